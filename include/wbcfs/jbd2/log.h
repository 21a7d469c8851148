/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The jbd2 log writer: where journal blocks lie on the device, how one
 * transaction is laid out in the log (descriptor blocks with their tags,
 * escaped copies, revoke blocks, the commit block, their checksums), and
 * the writes and flushes of the log and the journal superblock. Which
 * blocks a transaction holds, and when it commits, is the filesystem's
 * (ext4/journal.c); the log knows neither. Blocks are 4 KiB.
 */
#ifndef WBCFS_JBD2_LOG_H
#define WBCFS_JBD2_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wbcfs/jbd2/format.h"

#define JBD2_LOG_BLOCK 4096U		/* journal block = filesystem block */

/* What the log asks of its owner's device (fault injection, flushes). */
struct jbd2_log_ops {
	/* the log's writes fail (as metadata writeback under fault_meta=write) */
	bool (*write_faulted)(void *priv);
	/* the device cache to stable media, 0 or -errno */
	int (*flush)(void *priv);
	/* take one injected flush fault: the commit block is then written
	 * but not made durable, and its write fails */
	bool (*flush_fault_take)(void *priv);
};

struct jbd2_log {
	int fd;				/* constant: the device */
	uint64_t *map;			/* constant: journal block -> device block */
	uint32_t first, last;		/* constant: log blocks [first, last) */
	struct jbd2_superblock *jsb;	/* owner's commit lock: block 0 of the journal */
	uint32_t seed;			/* constant: checksum seed */
	bool csum2, csum3, is64;	/* constant */
	size_t tag_bytes;		/* constant */
	const struct jbd2_log_ops *ops;	/* constant */
	void *priv;			/* constant: for @ops */
};

/* Device byte offset of journal block @jb. */
off_t jbd2_log_off(const struct jbd2_log *l, uint32_t jb);
/* Do the log's writes fail now (fault injection)? */
bool jbd2_log_faulted(const struct jbd2_log *l);
/* The device cache to stable media. */
int jbd2_log_flush(struct jbd2_log *l);
/* Journal blocks [jb, jb+n) from @bufs (4 KiB each), 0 or -errno. */
int jbd2_log_write(struct jbd2_log *l, uint32_t jb, char **bufs, uint32_t n);
/* The commit block @buf at @jb, durable on return (FUA, or write and flush). */
int jbd2_log_write_commit(struct jbd2_log *l, uint32_t jb, char *buf);
/* The journal superblock (l->jsb), with its checksum. */
int jbd2_log_sb_write(struct jbd2_log *l);

/* Do descriptor, revoke and commit blocks carry checksums? */
static inline bool jbd2_log_csum(const struct jbd2_log *l)
{
	return l->csum2 || l->csum3;
}

/* Tags one descriptor block holds. */
uint32_t jbd2_log_tags_per_desc(const struct jbd2_log *l);
/* Revoke records one revoke block holds. */
uint32_t jbd2_log_revokes_per_block(const struct jbd2_log *l);
/* Log blocks a transaction of @n blocks and @nrev revokes takes. */
uint32_t jbd2_log_tx_blocks(const struct jbd2_log *l, size_t n, size_t nrev);

/* Big-endian @v at @dst, 8 bytes when @is64, else 4. */
void jbd2_log_put_be(void *dst, uint64_t v, bool is64);
/* The jbd2 header of a log block. */
void jbd2_log_set_header(void *blk, uint32_t type, uint32_t tid);
/* Write one tag for block @blk at @tp; returns bytes used (uuid included). */
size_t jbd2_log_put_tag(const struct jbd2_log *l, char *tp, uint64_t blk, uint32_t flags,
			uint32_t csum, bool first);
/* The checksum tail of descriptor or revoke block @blk. */
void jbd2_log_set_tail(const struct jbd2_log *l, void *blk);
/* The commit block of transaction @tid in @cb: header, time stamp, checksum. */
void jbd2_log_commit_fill(const struct jbd2_log *l, char *cb, uint32_t tid);

/*
 * The log as a ring [first, last): transactions from the tail (the
 * journal superblock's s_start) to the head, wrapping at last. Pure
 * arithmetic, apart for its unit tests.
 */
static inline uint32_t jbd2_ring_wrap(uint32_t first, uint32_t last, uint32_t x)
{
	return x >= last ? x - (last - first) : x;
}

/*
 * Blocks free after @head with the log starting at @tail (@empty: it
 * holds nothing). One always stays free: a log filling the whole ring
 * would run into its own start, which replay must then tell from a
 * newer block.
 */
uint32_t jbd2_ring_room(uint32_t first, uint32_t last, uint32_t tail, uint32_t head,
			bool empty);
/* Is journal block @pos in the log, [tail, head) modulo the ring? */
bool jbd2_ring_holds(uint32_t tail, uint32_t head, bool empty, uint32_t pos);

#endif
