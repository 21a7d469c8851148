/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ext4's journal on disk (jbd2 format), as described in the kernel's
 * Documentation/filesystems/ext4/journal.rst: every field big-endian, one
 * journal block = one filesystem block (4 KiB read-write in wbcfs).
 *
 * The log is a ring of journal blocks [s_first, s_maxlen) of the journal
 * inode. A transaction is: descriptor blocks, each followed by the data
 * blocks its tags name (the new contents of filesystem blocks); revoke
 * blocks; then one commit block. Every block but the data blocks starts
 * with a jbd2_header. s_start == 0 in the journal superblock: the log is
 * empty (nothing to replay); otherwise replay starts at block s_start with
 * transaction s_sequence.
 *
 * Checksums (CSUM_V2/V3, crc32c): seed = crc32c(~0, s_uuid, 16);
 * descriptor and revoke blocks end in a jbd2_tail over the whole block
 * (tail zeroed); a commit block carries crc32c over the whole block (its
 * h_chksum zeroed) in h_chksum[0]; a tag carries crc32c(seed, be32
 * sequence, then the data block as written in the log, i.e. after
 * JBD2_FLAG_ESCAPE zeroed its magic) (v3: 32 bits; v2: low 16 bits); the
 * superblock's s_checksum is crc32c(~0, superblock with s_checksum 0).
 * crc32c here is ext2fs_crc32c_le (the kernel's crc32c, no inversion).
 */
#ifndef WBCFS_FS_JBD2_H
#define WBCFS_FS_JBD2_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <ext2fs/ext2fs.h>

#define JBD2_MAGIC 0xc03b3998U

enum jbd2_blocktype {
	JBD2_DESCRIPTOR_BLOCK = 1,
	JBD2_COMMIT_BLOCK = 2,
	JBD2_SUPERBLOCK_V1 = 3,
	JBD2_SUPERBLOCK_V2 = 4,
	JBD2_REVOKE_BLOCK = 5,
	JBD2_FC_BLOCK = 6,
};

/* tag flags */
#define JBD2_FLAG_ESCAPE	1	/* block's first 4 bytes were the magic: zeroed in the log */
#define JBD2_FLAG_SAME_UUID	2	/* no 16-byte uuid after this tag */
#define JBD2_FLAG_DELETED	4	/* unused */
#define JBD2_FLAG_LAST_TAG	8	/* last tag of this descriptor block */

/* features */
#define JBD2_FEATURE_COMPAT_CHECKSUM		0x1	/* v1 commit checksums */
#define JBD2_FEATURE_INCOMPAT_REVOKE		0x1
#define JBD2_FEATURE_INCOMPAT_64BIT		0x2
#define JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT	0x4
#define JBD2_FEATURE_INCOMPAT_CSUM_V2		0x8
#define JBD2_FEATURE_INCOMPAT_CSUM_V3		0x10
#define JBD2_FEATURE_INCOMPAT_FAST_COMMIT	0x20
#define JBD2_KNOWN_INCOMPAT (JBD2_FEATURE_INCOMPAT_REVOKE | JBD2_FEATURE_INCOMPAT_64BIT | \
			     JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT | JBD2_FEATURE_INCOMPAT_CSUM_V2 | \
			     JBD2_FEATURE_INCOMPAT_CSUM_V3)

#define JBD2_CRC32C_CHKSUM	4	/* s_checksum_type, h_chksum_type */
#define JBD2_UUID_BYTES		16
#define JBD2_MIN_LOG_BLOCKS	1024	/* JBD2_MIN_JOURNAL_BLOCKS */

struct jbd2_header {
	uint32_t h_magic;
	uint32_t h_blocktype;
	uint32_t h_sequence;
};

struct jbd2_superblock {
	struct jbd2_header s_header;		/* 0x00 */
	uint32_t s_blocksize;			/* 0x0C */
	uint32_t s_maxlen;			/* 0x10: blocks in the journal */
	uint32_t s_first;			/* 0x14: first log block */
	uint32_t s_sequence;			/* 0x18: first transaction expected */
	uint32_t s_start;			/* 0x1C: log start block, 0 = empty */
	uint32_t s_errno;			/* 0x20 */
	uint32_t s_feature_compat;		/* 0x24 */
	uint32_t s_feature_incompat;		/* 0x28 */
	uint32_t s_feature_ro_compat;		/* 0x2C */
	uint8_t s_uuid[16];			/* 0x30 */
	uint32_t s_nr_users;			/* 0x40 */
	uint32_t s_dynsuper;			/* 0x44 */
	uint32_t s_max_transaction;		/* 0x48 */
	uint32_t s_max_trans_data;		/* 0x4C */
	uint8_t s_checksum_type;		/* 0x50 */
	uint8_t s_padding2[3];
	uint32_t s_num_fc_blks;			/* 0x54 */
	uint32_t s_head;			/* 0x58 */
	uint32_t s_padding[40];			/* 0x5C */
	uint32_t s_checksum;			/* 0xFC */
	uint8_t s_users[16 * 48];		/* 0x100 */
};

/* tag with CSUM_V3: 16 bytes */
struct jbd2_tag3 {
	uint32_t t_blocknr;
	uint32_t t_flags;
	uint32_t t_blocknr_high;
	uint32_t t_checksum;
};

/* tag without CSUM_V3: 8 bytes, 12 with 64BIT (+2 checksum bytes with CSUM_V2) */
struct jbd2_tag {
	uint32_t t_blocknr;
	uint16_t t_checksum;
	uint16_t t_flags;
	uint32_t t_blocknr_high;
};

struct jbd2_tail {
	uint32_t t_checksum;
};

struct jbd2_revoke_header {
	struct jbd2_header r_header;
	uint32_t r_count;		/* bytes used in the block, header included */
};

struct jbd2_commit {
	struct jbd2_header c_header;
	uint8_t h_chksum_type;
	uint8_t h_chksum_size;
	uint8_t h_padding[2];
	uint32_t h_chksum[8];
	uint64_t h_commit_sec;
	uint32_t h_commit_nsec;
} __attribute__((packed));

_Static_assert(sizeof(struct jbd2_superblock) == 1024, "jbd2 superblock layout");
_Static_assert(sizeof(struct jbd2_tag3) == 16, "jbd2 tag3 layout");
_Static_assert(sizeof(struct jbd2_commit) == 60, "jbd2 commit layout");

static inline int jbd2_has_csum(const struct jbd2_superblock *sb)
{
	return (be32toh(sb->s_feature_incompat) &
		(JBD2_FEATURE_INCOMPAT_CSUM_V2 | JBD2_FEATURE_INCOMPAT_CSUM_V3)) != 0;
}

/* Bytes of one tag in a descriptor block, as the kernel's journal_tag_bytes(). */
static inline size_t jbd2_tag_bytes(const struct jbd2_superblock *sb)
{
	uint32_t in = be32toh(sb->s_feature_incompat);
	size_t sz = sizeof(struct jbd2_tag);

	if (in & JBD2_FEATURE_INCOMPAT_CSUM_V3)
		return sizeof(struct jbd2_tag3);
	if (in & JBD2_FEATURE_INCOMPAT_CSUM_V2)
		sz += sizeof(uint16_t);
	return (in & JBD2_FEATURE_INCOMPAT_64BIT) ? sz : sz - sizeof(uint32_t);
}

static inline uint32_t jbd2_crc(uint32_t crc, const void *p, size_t len)
{
	return ext2fs_crc32c_le(crc, (unsigned char const *)p, len);
}

/* The checksum seed of a journal: crc32c(~0, s_uuid). */
static inline uint32_t jbd2_csum_seed(const struct jbd2_superblock *sb)
{
	return jbd2_crc(~0U, sb->s_uuid, sizeof(sb->s_uuid));
}

static inline uint32_t jbd2_sb_csum(const struct jbd2_superblock *sb)
{
	struct jbd2_superblock c = *sb;

	c.s_checksum = 0;
	return jbd2_crc(~0U, &c, sizeof(c));
}

/*
 * Checksum of a tagged data block, as stored in a v3 tag (v2: low 16 bits):
 * over the block as it is in the log (escaped), which is what recovery
 * reads and checks before it puts the magic back.
 */
static inline uint32_t jbd2_block_csum(uint32_t seed, uint32_t sequence, const void *blk,
				       size_t bsize)
{
	uint32_t seq = htobe32(sequence);

	return jbd2_crc(jbd2_crc(seed, &seq, sizeof(seq)), blk, bsize);
}

/* crc32c over a whole block with the 4 bytes at @csum_off zeroed. */
static inline uint32_t jbd2_block_csum_at(uint32_t seed, const void *blk, size_t bsize,
					  size_t csum_off)
{
	static const uint32_t zero;
	uint32_t c = jbd2_crc(seed, blk, csum_off);

	c = jbd2_crc(c, &zero, sizeof(zero));
	return jbd2_crc(c, (const char *)blk + csum_off + 4, bsize - csum_off - 4);
}

/*
 * Commit block checksum: over the block with h_chksum_type, h_chksum_size
 * and h_chksum[0] zeroed (the writer zeroes them before computing).
 */
static inline uint32_t jbd2_commit_csum(uint32_t seed, const void *blk, size_t bsize)
{
	return jbd2_block_csum_at(seed, blk, bsize, offsetof(struct jbd2_commit, h_chksum));
}

/* Descriptor and revoke blocks: the tail is the block's last 4 bytes. */
static inline uint32_t jbd2_tail_csum(uint32_t seed, const void *blk, size_t bsize)
{
	return jbd2_block_csum_at(seed, blk, bsize, bsize - sizeof(struct jbd2_tail));
}

/* Is transaction id @a after @b (wrapping 32-bit)? */
static inline int jbd2_tid_gt(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) > 0;
}

#endif
