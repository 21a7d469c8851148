// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Journal recovery: a filesystem marked needs_recovery (the kernel's ext4,
 * or wbcfs's own journal writer, crashed with committed transactions still
 * in the log) is replayed here at mount, before libext2fs reads anything,
 * following the rules of the kernel's jbd2 recovery so that wbcfs, e2fsck
 * and the kernel agree on what a log holds:
 *
 *   SCAN    walk transactions from s_start/s_sequence until a block that
 *           is not the next expected one; a transaction counts only once
 *           its commit block is found (a torn last transaction is ignored;
 *           a commit block whole in its header only counts, as in 6.11+);
 *   REVOKE  collect revoke records with the transaction that wrote them,
 *           and check where every tag sends its block, so that a log the
 *           kernel's ext4 would fail on is refused before anything is
 *           written;
 *   REPLAY  write each tagged block home unless a revoke record of the
 *           same or a later transaction names it.
 *
 * Then the journal is marked empty (s_start = 0), needs_recovery cleared
 * in the ext4 superblock, and the device flushed after each step, so a
 * crash during recovery leaves a log that replays again to the same
 * result. Writing new transactions (jbd2/log.c) is not done here; fast
 * commits and external journals are refused, for e2fsck to replay. The
 * mount-time side (finding the journal inode's blocks, checking and
 * clearing needs_recovery in the ext4 superblock) is in jmount.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wbcfs/blkdev.h"
#include "jbd2_i.h"

#define JBD2_CRC32_CHKSUM 1	/* v1 commit checksums: crc32_be */
#define JBD2_CRC32_CHKSUM_SIZE 4
#define FC_DEFAULT_BLOCKS 256	/* fast-commit area when s_num_fc_blks is 0 */
#define FC_TAG_HEAD 0x0009	/* ext4 fast-commit head tag */

enum jrec_pass { PASS_SCAN, PASS_REVOKE, PASS_REPLAY };
enum { WALK_NEXT = 0, WALK_STOP = 1 };

struct jrec_revoke {
	uint64_t blocknr;
	uint32_t tid;		/* latest transaction that revoked it */
};

/* One recovery: the journal's geometry and features, the passes' results. */
struct jrec {
	const struct jrec_log *log;
	struct jrec_stats *st;
	struct jbd2_superblock *sb;	/* in sb_blk */
	void *sb_blk;			/* journal block 0 as read */
	uint8_t *blk;			/* the header block being walked */
	uint8_t *data;			/* a data block being replayed */
	unsigned bsize;
	uint32_t first, last;		/* the ring: journal blocks [first, last) */
	bool csum, csum3, v1csum, is64, async, fc;
	uint32_t seed;			/* crc32c of the journal uuid */
	size_t tag_bytes;
	size_t tail_bytes;		/* checksum tail of descriptor/revoke blocks */
	struct jrec_revoke *rv;		/* sorted by block after PASS_REVOKE */
	size_t nr_rv, cap_rv;
	uint32_t end_tid;		/* first transaction not replayed */
	bool have_end;
	uint32_t head;			/* log block after the last good commit */
	bool failed;			/* a commit block failed its checksum */
	uint32_t failed_tid;
	uint64_t nr_bad;		/* data blocks that failed their checksum */
};

/* Where one pass is in the log. */
struct jrec_walk {
	enum jrec_pass pass;
	uint32_t tid;			/* transaction expected next */
	uint32_t blk;			/* journal block read next */
	uint64_t walked;		/* blocks passed: bounds a looping log */
	bool check_time;		/* a bad descriptor/revoke checksum seen */
	uint64_t last_sec;		/* commit time of the last good commit */
	uint32_t crc32_sum;		/* v1 checksum of this transaction */
};

/* A decoded descriptor tag. */
struct jrec_tag {
	uint64_t blocknr;
	uint32_t flags;
	uint32_t csum;
};

/* One line, "wbcfs: DEV: ...; run e2fsck". Returns -EUCLEAN. */
int jrec_err(const char *dev, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	msg_dev_vmsg(dev, "; run e2fsck\n", fmt, ap);
	va_end(ap);
	return -EUCLEAN;
}

static uint32_t get_be32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return be32toh(v);
}

static uint16_t get_be16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return be16toh(v);
}

int jrec_dev_pread(int fd, void *buf, size_t len, off_t off)
{
	while (len) {
		ssize_t n = blkdev_pread(fd, buf, len, off);

		if (n < 0)
			return (int)n;
		if (n == 0)
			return -EIO;
		buf = (char *)buf + n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

int jrec_dev_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return blkdev_pwritev(fd, &iov, 1, off);
}

static off_t log_off(const struct jrec *j, uint32_t lblk)
{
	return (off_t)j->log->map[lblk] * j->bsize;
}

static int log_read(struct jrec *j, uint32_t lblk, void *buf)
{
	int ret = jrec_dev_pread(j->log->fd, buf, j->bsize, log_off(j, lblk));

	if (ret)
		fprintf(msg_stream(), "wbcfs: %s: cannot read journal block %u: %s\n", j->log->dev, lblk,
			strerror(-ret));
	return ret;
}

/* @blk + @n around the ring [first, last). */
static uint32_t ring_add(const struct jrec *j, uint32_t blk, uint32_t n)
{
	uint64_t b = (uint64_t)blk + n;
	uint32_t len = j->last - j->first;

	if (b >= j->last)
		b = j->first + (b - j->first) % len;
	return (uint32_t)b;
}

/* ---- the journal superblock ------------------------------------------- */

static int sb_features(struct jrec *j)
{
	const struct jbd2_superblock *sb = j->sb;
	const char *dev = j->log->dev;
	uint32_t in = be32toh(sb->s_feature_incompat);
	uint32_t known = JBD2_KNOWN_INCOMPAT | JBD2_FEATURE_INCOMPAT_FAST_COMMIT;

	if (in & ~known)
		return jrec_err(dev, "journal has unknown incompatible features 0x%x", in & ~known);
	if (be32toh(sb->s_feature_ro_compat))
		return jrec_err(dev, "journal has unknown read-only features 0x%x",
				be32toh(sb->s_feature_ro_compat));
	j->csum3 = in & JBD2_FEATURE_INCOMPAT_CSUM_V3;
	j->csum = j->csum3 || (in & JBD2_FEATURE_INCOMPAT_CSUM_V2);
	j->v1csum = be32toh(sb->s_feature_compat) & JBD2_FEATURE_COMPAT_CHECKSUM;
	j->is64 = in & JBD2_FEATURE_INCOMPAT_64BIT;
	j->async = in & JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT;
	j->fc = in & JBD2_FEATURE_INCOMPAT_FAST_COMMIT;
	if (j->csum3 && (in & JBD2_FEATURE_INCOMPAT_CSUM_V2))
		return jrec_err(dev, "journal claims checksums v2 and v3 at once");
	if (j->csum && j->v1csum)
		return jrec_err(dev, "journal claims checksums v1 and v2/v3 at once");
	if (j->csum && sb->s_checksum_type != JBD2_CRC32C_CHKSUM)
		return jrec_err(dev, "journal checksum type %u is unknown", sb->s_checksum_type);
	if (j->csum && be32toh(sb->s_checksum) != jbd2_sb_csum(sb))
		return jrec_err(dev, "corrupt journal superblock (bad checksum)");
	j->seed = jbd2_csum_seed(sb);
	j->tag_bytes = jbd2_tag_bytes(sb);
	j->tail_bytes = j->csum ? sizeof(struct jbd2_tail) : 0;
	return 0;
}

/* The ring's geometry: [s_first, s_maxlen), less a fast-commit area. */
static int sb_geometry(struct jrec *j)
{
	const struct jbd2_superblock *sb = j->sb;
	const char *dev = j->log->dev;
	uint32_t maxlen = be32toh(sb->s_maxlen), start = be32toh(sb->s_start);
	uint32_t nr_fc = 0;

	if (be32toh(sb->s_blocksize) != j->bsize)
		return jrec_err(dev, "journal block size %u differs from the filesystem's %u",
				be32toh(sb->s_blocksize), j->bsize);
	if (maxlen > j->log->nr_blocks)
		return jrec_err(dev, "journal superblock claims %u blocks, the journal has %u",
				maxlen, j->log->nr_blocks);
	j->first = be32toh(sb->s_first);
	j->last = maxlen;
	if (j->fc) {
		nr_fc = be32toh(sb->s_num_fc_blks) ?: FC_DEFAULT_BLOCKS;
		if (maxlen < nr_fc + 2)
			return jrec_err(dev, "journal too short for %u fast-commit blocks", nr_fc);
		j->last = maxlen - nr_fc;
	}
	if (j->first == 0 || j->first >= j->last)
		return jrec_err(dev, "corrupt journal superblock (first log block %u of %u)",
				j->first, j->last);
	if (start && (start < j->first || start >= j->last))
		return jrec_err(dev, "corrupt journal superblock (log start %u outside [%u, %u))",
				start, j->first, j->last);
	return 0;
}

static int sb_load(struct jrec *j)
{
	uint32_t type;
	int ret;

	if (j->log->nr_blocks < 2)
		return jrec_err(j->log->dev, "journal of %u blocks is too short",
				j->log->nr_blocks);
	ret = log_read(j, 0, j->sb_blk);
	if (ret)
		return ret;
	j->sb = j->sb_blk;
	type = be32toh(j->sb->s_header.h_blocktype);
	if (be32toh(j->sb->s_header.h_magic) != JBD2_MAGIC ||
	    (type != JBD2_SUPERBLOCK_V1 && type != JBD2_SUPERBLOCK_V2))
		return jrec_err(j->log->dev, "corrupt journal superblock (bad magic)");
	if (type == JBD2_SUPERBLOCK_V1) {
		/* version 1 has no feature fields: whatever lies there means nothing */
		j->sb->s_feature_compat = j->sb->s_feature_incompat = 0;
		j->sb->s_feature_ro_compat = 0;
	}
	ret = sb_features(j);
	return ret ? ret : sb_geometry(j);
}

/* The log is empty again: start at transaction @end_tid + 1, as the kernel does. */
static int sb_reset(struct jrec *j)
{
	struct jbd2_superblock *sb = j->sb;
	int ret;

	sb->s_start = 0;
	/* skip the tid of a torn transaction, whose blocks may still lie in the log */
	sb->s_sequence = htobe32(j->end_tid + 1);
	sb->s_head = htobe32(j->head);
	sb->s_errno = 0;
	if (j->csum)
		sb->s_checksum = htobe32(jbd2_sb_csum(sb));
	ret = jrec_dev_pwrite(j->log->fd, j->sb_blk, j->bsize, log_off(j, 0));
	if (!ret)
		ret = blkdev_flush(j->log->fd);
	return ret;
}

/* ---- descriptor tags and revoke records ------------------------------- */

/* Decode the tag at *@off of descriptor @d; false when no more fit. */
static bool tag_next(const struct jrec *j, const uint8_t *d, size_t *off, struct jrec_tag *t)
{
	const uint8_t *p = d + *off;

	if (*off + j->tag_bytes > j->bsize - j->tail_bytes)
		return false;
	t->blocknr = get_be32(p);
	if (j->is64)
		t->blocknr |= (uint64_t)get_be32(p + 8) << 32;
	if (j->csum3) {
		t->flags = get_be32(p + 4);
		t->csum = get_be32(p + 12);
	} else {
		t->flags = get_be16(p + 6);
		t->csum = get_be16(p + 4);
	}
	*off += j->tag_bytes;
	if (!(t->flags & JBD2_FLAG_SAME_UUID))
		*off += JBD2_UUID_BYTES;
	return true;
}

static uint32_t tag_count(const struct jrec *j, const uint8_t *d)
{
	size_t off = sizeof(struct jbd2_header);
	struct jrec_tag t;
	uint32_t n = 0;

	while (tag_next(j, d, &off, &t)) {
		n++;
		if (t.flags & JBD2_FLAG_LAST_TAG)
			break;
	}
	return n;
}

static bool tag_csum_ok(const struct jrec *j, const struct jrec_tag *t, uint32_t tid,
			const void *blk)
{
	uint32_t c;

	if (!j->csum)
		return true;
	c = jbd2_block_csum(j->seed, tid, blk, j->bsize);
	return j->csum3 ? t->csum == c : t->csum == (c & 0xffff);
}

static bool tail_csum_ok(const struct jrec *j, const uint8_t *blk)
{
	if (!j->csum)
		return true;
	return get_be32(blk + j->bsize - sizeof(struct jbd2_tail)) ==
	       jbd2_tail_csum(j->seed, blk, j->bsize);
}

static int revoke_add(struct jrec *j, uint64_t blocknr, uint32_t tid)
{
	if (j->nr_rv == j->cap_rv) {
		size_t cap = j->cap_rv ? j->cap_rv * 2 : 256;
		struct jrec_revoke *rv = realloc(j->rv, cap * sizeof(*rv));

		if (!rv)
			return -ENOMEM;
		j->rv = rv;
		j->cap_rv = cap;
	}
	j->rv[j->nr_rv++] = (struct jrec_revoke){ .blocknr = blocknr, .tid = tid };
	return 0;
}

static int revoke_cmp(const void *a, const void *b)
{
	const struct jrec_revoke *x = a, *y = b;

	return x->blocknr < y->blocknr ? -1 : x->blocknr > y->blocknr;
}

/* Sort the records by block, one per block holding its latest tid. */
static void revoke_index(struct jrec *j)
{
	size_t i, n = 0;

	if (!j->nr_rv)
		return;
	qsort(j->rv, j->nr_rv, sizeof(*j->rv), revoke_cmp);
	for (i = 1; i < j->nr_rv; i++) {
		if (j->rv[i].blocknr != j->rv[n].blocknr)
			j->rv[++n] = j->rv[i];
		else if (jbd2_tid_gt(j->rv[i].tid, j->rv[n].tid))
			j->rv[n].tid = j->rv[i].tid;
	}
	j->nr_rv = n + 1;
}

/* Is @blocknr, logged by transaction @tid, revoked by @tid or a later one? */
static bool revoked(const struct jrec *j, uint64_t blocknr, uint32_t tid)
{
	struct jrec_revoke key = { .blocknr = blocknr };
	const struct jrec_revoke *r;

	if (!j->nr_rv)
		return false;
	r = bsearch(&key, j->rv, j->nr_rv, sizeof(*j->rv), revoke_cmp);
	return r && !jbd2_tid_gt(tid, r->tid);
}

/* The records of the revoke block in j->blk, written by transaction @tid. */
static int revoke_scan(struct jrec *j, uint32_t tid)
{
	const struct jbd2_revoke_header *h = (const void *)j->blk;
	size_t off = sizeof(*h), rlen = j->is64 ? 8 : 4;
	uint32_t count = be32toh(h->r_count);
	int ret;

	if (count > j->bsize - j->tail_bytes)
		return jrec_err(j->log->dev, "corrupt revoke block in journal transaction %u", tid);
	for (; off + rlen <= count; off += rlen) {
		uint64_t blocknr = get_be32(j->blk + off);

		if (rlen == 8)
			blocknr = blocknr << 32 | get_be32(j->blk + off + 4);
		ret = revoke_add(j, blocknr, tid);
		if (ret)
			return ret;
	}
	return 0;
}

/* ---- the passes -------------------------------------------------------- */

/*
 * Step over @n blocks of the log; with v1 checksums during the scan, fold
 * them into the transaction's crc32_be (the kernel's calc_chksums).
 */
static int walk_skip(struct jrec *j, struct jrec_walk *w, uint32_t n, bool v1sum)
{
	uint32_t i;
	int ret;

	if (w->walked + n > j->last - j->first)
		return jrec_err(j->log->dev, "journal log runs around the whole journal");
	w->walked += n;
	for (i = 0; v1sum && i < n; i++) {
		ret = log_read(j, ring_add(j, w->blk, i), j->data);
		if (ret)
			return ret;
		w->crc32_sum = ext2fs_crc32_be(w->crc32_sum, j->data, j->bsize);
	}
	w->blk = ring_add(j, w->blk, n);
	return 0;
}

/* Write one logged block home, unless revoked or failing its checksum. */
static int replay_block(struct jrec *j, uint32_t tid, uint32_t lblk, const struct jrec_tag *t)
{
	int ret;

	if (revoked(j, t->blocknr, tid)) {
		j->st->revoked++;
		return 0;
	}
	ret = log_read(j, lblk, j->data);
	if (ret)
		return ret;
	if (!tag_csum_ok(j, t, tid, j->data)) {
		/* as the kernel: the others still go home, the mount fails after */
		fprintf(msg_stream(), "wbcfs: %s: bad checksum on journal block %u (block %llu of transaction %u)\n",
			j->log->dev, lblk, (unsigned long long)t->blocknr, tid);
		j->nr_bad++;
		return 0;
	}
	if (t->flags & JBD2_FLAG_ESCAPE) {
		uint32_t magic = htobe32(JBD2_MAGIC);

		memcpy(j->data, &magic, sizeof(magic));
	}
	ret = jrec_dev_pwrite(j->log->fd, j->data, j->bsize, (off_t)t->blocknr * j->bsize);
	if (ret) {
		fprintf(msg_stream(), "wbcfs: %s: cannot write block %llu during journal recovery: %s\n",
			j->log->dev, (unsigned long long)t->blocknr, strerror(-ret));
		return ret;
	}
	j->st->replayed++;
	return 0;
}

static int walk_replay_tags(struct jrec *j, struct jrec_walk *w)
{
	size_t off = sizeof(struct jbd2_header);
	struct jrec_tag t;
	int ret;

	while (tag_next(j, j->blk, &off, &t)) {
		uint32_t lblk = w->blk;

		ret = walk_skip(j, w, 1, false);
		if (!ret)
			ret = replay_block(j, w->tid, lblk, &t);
		if (ret)
			return ret;
		if (t.flags & JBD2_FLAG_LAST_TAG)
			break;
	}
	return WALK_NEXT;
}

/*
 * The block holding the ext4 superblock: block 0 with blocks over 1 KiB
 * (the superblock at byte 1024), else block 1 (block 0 is the boot block,
 * which nothing journals).
 */
static uint64_t sb_home(const struct jrec *j)
{
	return j->bsize == 1024 ? 1 : 0;
}

/*
 * Where a committed transaction's tag may send its block. The kernel's
 * ext4 reads its superblock from the very buffer replay writes into, so
 * anything but a superblock replayed there fails its mount (and leaves
 * the block the tag was meant for without its update): refused here, as
 * is a block outside the filesystem or the boot block, before anything
 * of the log goes home.
 */
static int tag_target_ok(struct jrec *j, uint32_t tid, uint32_t lblk, const struct jrec_tag *t)
{
	const struct ext2_super_block *es;
	unsigned off = j->bsize == 1024 ? 0 : 1024;
	int ret;

	if (t->blocknr >= j->log->fs_blocks || (t->blocknr == 0 && sb_home(j) != 0))
		return jrec_err(j->log->dev, "journal transaction %u logs block %llu, outside the filesystem",
				tid, (unsigned long long)t->blocknr);
	if (t->blocknr != sb_home(j))
		return 0;
	ret = log_read(j, lblk, j->data);
	if (ret)
		return ret;
	es = (const void *)(j->data + off);
	if (le16toh(es->s_magic) != EXT2_SUPER_MAGIC ||
	    (1024U << le32toh(es->s_log_block_size)) != j->bsize)
		return jrec_err(j->log->dev, "journal transaction %u logs block %llu, the superblock's, without a superblock in it",
				tid, (unsigned long long)t->blocknr);
	return 0;
}

/* Before any replay: every tag of the descriptor in j->blk names a sane home. */
static int walk_check_tags(struct jrec *j, struct jrec_walk *w)
{
	size_t off = sizeof(struct jbd2_header);
	struct jrec_tag t;
	uint32_t i = 0;	/* w->blk: the first data block, past the descriptor */
	int ret;

	while (tag_next(j, j->blk, &off, &t)) {
		ret = tag_target_ok(j, w->tid, ring_add(j, w->blk, i++), &t);
		if (ret)
			return ret;
		if (t.flags & JBD2_FLAG_LAST_TAG)
			break;
	}
	return 0;
}

static int walk_descriptor(struct jrec *j, struct jrec_walk *w)
{
	bool v1sum;
	int ret;

	if (!tail_csum_ok(j, j->blk)) {
		if (w->pass != PASS_SCAN)
			return jrec_err(j->log->dev, "bad checksum on descriptor block of journal transaction %u",
					w->tid);
		/* maybe a stale block of an older log: the commit time decides */
		w->check_time = true;
	}
	if (w->pass == PASS_REPLAY)
		return walk_replay_tags(j, w);
	if (w->pass == PASS_REVOKE) {
		ret = walk_check_tags(j, w);
		if (ret)
			return ret;
	}
	v1sum = w->pass == PASS_SCAN && j->v1csum && !w->check_time && !j->have_end;
	if (v1sum)
		w->crc32_sum = ext2fs_crc32_be(w->crc32_sum, j->blk, j->bsize);
	ret = walk_skip(j, w, tag_count(j, j->blk), v1sum);
	return ret ? ret : WALK_NEXT;
}

/* The v1 checksum fields of a commit block. */
struct jrec_commit_view {
	uint32_t found;
	uint8_t type, size;
};

/* v1: crc32_be of the descriptors and data blocks, or no checksum at all. */
static bool commit_v1_ok(const struct jrec_commit_view *c, uint32_t sum)
{
	if (c->type == 0 && c->size == 0 && c->found == 0)
		return true;
	return c->found == sum && c->type == JBD2_CRC32_CHKSUM && c->size == JBD2_CRC32_CHKSUM_SIZE;
}

/*
 * A commit block that fails its checksum: a transaction torn while being
 * committed (its successor cannot be trusted either), or with a commit
 * time older than the last good one, stale blocks of an older log.
 */
static int commit_bad(struct jrec *j, struct jrec_walk *w, uint64_t sec)
{
	if (sec < w->last_sec)
		return WALK_STOP;
	if (!j->have_end) {
		j->have_end = true;
		j->end_tid = w->tid;
	}
	if (j->async)
		return WALK_NEXT;	/* async commit: an interrupted commit, not corruption */
	j->failed = true;
	j->failed_tid = w->tid;
	return WALK_STOP;
}

/*
 * The kernel's struct commit_header as its compiler lays it out: 60 bytes
 * of fields, padded to 64 by its __be64.
 */
#define KERNEL_COMMIT_HEADER 64

/*
 * A commit block whose checksum fails over the whole block but holds over
 * its header with the rest zeroed: only the header's sector reached the
 * disk (a commit block is zeros past its header). The kernel (since 6.11,
 * "incomplete commit block") counts the transaction as committed, and so
 * does wbcfs, with a line saying so.
 */
static bool commit_partial(struct jrec *j, const struct jrec_walk *w)
{
	struct jbd2_commit *c = (void *)j->data;

	memset(j->data, 0, j->bsize);
	memcpy(j->data, j->blk, KERNEL_COMMIT_HEADER);
	if (be32toh(c->h_chksum[0]) != jbd2_commit_csum(j->seed, j->data, j->bsize))
		return false;
	fprintf(msg_stream(), "wbcfs: %s: journal transaction %u has an incomplete commit block (its header is whole): replayed, as the kernel does\n",
		j->log->dev, w->tid);
	return true;
}

static int walk_commit(struct jrec *j, struct jrec_walk *w)
{
	const struct jbd2_commit *c = (const void *)j->blk;
	uint64_t sec = be64toh(c->h_commit_sec);
	bool bad = false;
	int ret;

	if (w->pass != PASS_SCAN) {
		w->tid++;
		return WALK_NEXT;
	}
	if (w->check_time) {
		if (sec >= w->last_sec)
			return jrec_err(j->log->dev, "journal transaction %u is corrupt (bad descriptor or revoke checksum)",
					w->tid);
		return WALK_STOP;	/* stale blocks of an older log end it */
	}
	if (j->v1csum) {
		struct jrec_commit_view v = { be32toh(c->h_chksum[0]), c->h_chksum_type,
					      c->h_chksum_size };

		if (j->have_end) {
			/* a commit after a failed one: the log is damaged */
			j->failed = true;
			j->failed_tid = j->end_tid;
			return WALK_STOP;
		}
		bad = !commit_v1_ok(&v, w->crc32_sum);
		w->crc32_sum = ~0U;
	}
	if (!bad && j->csum && be32toh(c->h_chksum[0]) != jbd2_commit_csum(j->seed, j->blk, j->bsize))
		bad = !commit_partial(j, w);
	if (bad) {
		ret = commit_bad(j, w, sec);
		if (ret == WALK_STOP)
			return ret;
	}
	w->last_sec = sec;
	w->tid++;
	if (!j->have_end)
		j->head = w->blk;
	return WALK_NEXT;
}

static int walk_revoke(struct jrec *j, struct jrec_walk *w)
{
	if (w->pass == PASS_SCAN && !tail_csum_ok(j, j->blk))
		w->check_time = true;
	if (w->pass != PASS_REVOKE)
		return WALK_NEXT;
	return revoke_scan(j, w->tid) ?: WALK_NEXT;
}

static int walk_block(struct jrec *j, struct jrec_walk *w)
{
	const struct jbd2_header *h = (const void *)j->blk;

	if (be32toh(h->h_magic) != JBD2_MAGIC || be32toh(h->h_sequence) != w->tid)
		return WALK_STOP;
	switch (be32toh(h->h_blocktype)) {
	case JBD2_DESCRIPTOR_BLOCK:
		return walk_descriptor(j, w);
	case JBD2_COMMIT_BLOCK:
		return walk_commit(j, w);
	case JBD2_REVOKE_BLOCK:
		return walk_revoke(j, w);
	default:
		return WALK_STOP;
	}
}

/*
 * One pass over the log from s_start. The scan finds where the log ends
 * (end_tid); the other passes stop there, and must end exactly there.
 */
static int walk_pass(struct jrec *j, enum jrec_pass pass)
{
	struct jrec_walk w = {
		.pass = pass,
		.tid = be32toh(j->sb->s_sequence),
		.blk = be32toh(j->sb->s_start),
		.crc32_sum = ~0U,
	};
	int ret;

	if (pass == PASS_SCAN)
		j->head = w.blk;
	for (;;) {
		if (pass != PASS_SCAN && !jbd2_tid_gt(j->end_tid, w.tid))
			break;
		/* a log that fills the whole ring ends there: the block after
		 * it is the log's own start (the kernel reads it, finds an
		 * older transaction and stops) */
		if (w.walked >= j->last - j->first)
			break;
		ret = log_read(j, w.blk, j->blk);
		if (!ret)
			ret = walk_skip(j, &w, 1, false);
		if (!ret)
			ret = walk_block(j, &w);
		if (ret < 0)
			return ret;
		if (ret == WALK_STOP)
			break;
	}
	if (pass == PASS_SCAN) {
		if (!j->have_end) {
			j->have_end = true;
			j->end_tid = w.tid;
		}
	} else if (w.tid != j->end_tid) {
		fprintf(msg_stream(), "wbcfs: %s: journal recovery pass %d ended at transaction %u, expected %u\n",
			j->log->dev, pass, w.tid, j->end_tid);
		return -EIO;
	}
	return 0;
}

/*
 * Fast commits of the transaction after the last committed one wait in
 * the fast-commit area; only e2fsck (or the kernel) can replay them.
 */
static int fc_check(struct jrec *j)
{
	uint32_t fc_first = j->last + 1;
	const uint8_t *p = j->data;
	uint16_t tag, len;
	uint32_t tid;
	int ret;

	if (!j->fc || fc_first >= be32toh(j->sb->s_maxlen))
		return 0;
	ret = log_read(j, fc_first, j->data);
	if (ret)
		return ret;
	tag = le16toh(*(const uint16_t *)p);
	len = le16toh(*(const uint16_t *)(p + 2));
	memcpy(&tid, p + 8, sizeof(tid));
	if (tag != FC_TAG_HEAD || len < 8 || le32toh(tid) != j->end_tid)
		return 0;
	return jrec_err(j->log->dev, "journal holds fast commits, which wbcfs does not replay");
}

static int jrec_passes(struct jrec *j)
{
	int ret = walk_pass(j, PASS_SCAN);

	if (!ret)
		ret = fc_check(j);
	if (!ret)
		ret = walk_pass(j, PASS_REVOKE);
	if (ret)
		return ret;
	revoke_index(j);
	ret = walk_pass(j, PASS_REPLAY);
	/* what went home must be stable before the log can be dropped */
	if (!ret)
		ret = blkdev_flush(j->log->fd);
	if (ret)
		return ret;
	j->st->transactions = j->end_tid - be32toh(j->sb->s_sequence);
	if (j->failed)
		return jrec_err(j->log->dev, "journal transaction %u is corrupt (bad commit block), replay stopped before it",
				j->failed_tid);
	if (j->nr_bad)
		return jrec_err(j->log->dev, "%llu journal blocks failed their checksums",
				(unsigned long long)j->nr_bad);
	return 0;
}

int jrec_replay(const struct jrec_log *log, struct jrec_stats *st)
{
	struct jrec j = { .log = log, .st = st, .bsize = log->blocksize };
	int ret = -ENOMEM;

	memset(st, 0, sizeof(*st));
	if (posix_memalign(&j.sb_blk, 4096, j.bsize) ||
	    posix_memalign((void **)&j.blk, 4096, j.bsize) ||
	    posix_memalign((void **)&j.data, 4096, j.bsize))
		goto out_free;
	ret = sb_load(&j);
	if (ret)
		goto out_free;
	st->jerrno = be32toh(j.sb->s_errno);
	st->next_sequence = be32toh(j.sb->s_sequence);
	if (!j.sb->s_start) {
		st->was_empty = true;
		/* only an error code to carry over: the log itself stays as it is */
		if (st->jerrno) {
			j.end_tid = st->next_sequence - 1;
			j.head = be32toh(j.sb->s_head);
			ret = sb_reset(&j);
		}
		goto out_free;
	}
	ret = jrec_passes(&j);
	if (!ret)
		ret = sb_reset(&j);
	if (!ret)
		st->next_sequence = j.end_tid + 1;
out_free:
	free(j.rv);
	free(j.data);
	free(j.blk);
	free(j.sb_blk);
	return ret;
}
