// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The jbd2 log writer: the log's block layout, the descriptor, revoke and
 * commit blocks with their checksums, and the writes of the log and of the
 * journal superblock. ext4/ (journal.c, jcommit.c) decides what a
 * transaction holds and when it commits, in which order these are called
 * and what a failure means; here is only the jbd2 format of it, apart so
 * that the format lives next to recovery (jrecover.c), which reads what
 * this writes.
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "wbcfs/blkdev.h"
#include "jbd2_i.h"

#define JBS JBD2_LOG_BLOCK

/* ---- the log on the device -------------------------------------------- */

off_t jbd2_log_off(const struct jbd2_log *l, uint32_t jb)
{
	return (off_t)(l->map[jb] * (uint64_t)JBS);
}

/*
 * The journal's metadata writes of the device (the log, the journal
 * superblock, a checkpoint) fail under fault_meta=write (fault_inject
 * mounts) as metadata writeback does.
 */
bool jbd2_log_faulted(const struct jbd2_log *l)
{
	return l->ops->write_faulted(l->priv);
}

static int jdev_write(struct jbd2_log *l, const struct iovec *iov, int n, off_t off)
{
	if (jbd2_log_faulted(l))
		return -EIO;
	return blkdev_pwritev(l->fd, iov, n, off);
}

/* The device cache to stable media: the owner's flush, with its faults. */
int jbd2_log_flush(struct jbd2_log *l)
{
	return l->ops->flush(l->priv);
}

/*
 * The commit block: durable on return (FUA, or a write and a flush). On
 * failure it may be on the device all the same (fault_meta=flush: written,
 * not flushed), which the caller then undoes (commit_stale_clear).
 */
int jbd2_log_write_commit(struct jbd2_log *l, uint32_t jb, char *buf)
{
	struct iovec v = { buf, JBS };
	int ret;

	if (jbd2_log_faulted(l))
		return -EIO;
	if (l->ops->flush_fault_take(l->priv)) {
		ret = blkdev_pwritev(l->fd, &v, 1, jbd2_log_off(l, jb));
		return ret ? ret : -EIO;
	}
	return blkdev_pwritev_fua(l->fd, &v, 1, jbd2_log_off(l, jb));
}

/*
 * Write journal blocks [jb, jb+n) from @bufs (one 4 KiB buffer each), in
 * runs of physically consecutive blocks.
 */
int jbd2_log_write(struct jbd2_log *l, uint32_t jb, char **bufs, uint32_t n)
{
	struct iovec iov[64];
	uint32_t i = 0;

	while (i < n) {
		uint32_t k = 1;
		int ret;

		iov[0] = (struct iovec){ bufs[i], JBS };
		while (i + k < n && k < 64 && l->map[jb + i + k] == l->map[jb + i] + k) {
			iov[k] = (struct iovec){ bufs[i + k], JBS };
			k++;
		}
		ret = jdev_write(l, iov, (int)k, jbd2_log_off(l, jb + i));
		if (ret)
			return ret;
		i += k;
	}
	return 0;
}

int jbd2_log_sb_write(struct jbd2_log *l)
{
	char *b = (char *)l->jsb;

	if (l->csum2 || l->csum3)
		l->jsb->s_checksum = htobe32(jbd2_sb_csum(l->jsb));
	return jbd2_log_write(l, 0, &b, 1);
}

/* ---- the ring ---------------------------------------------------------- */

uint32_t jbd2_ring_room(uint32_t first, uint32_t last, uint32_t tail, uint32_t head,
			bool empty)
{
	uint32_t len = last - first, used;

	if (empty)
		return len - 1;
	used = head >= tail ? head - tail : head + len - tail;
	return len - used - 1;
}

bool jbd2_ring_holds(uint32_t tail, uint32_t head, bool empty, uint32_t pos)
{
	if (empty)
		return false;
	if (tail <= head)
		return pos >= tail && pos < head;
	return pos >= tail || pos < head;
}

/* ---- layout of one transaction in the log ----------------------------- */

uint32_t jbd2_log_tags_per_desc(const struct jbd2_log *l)
{
	size_t room = JBS - sizeof(struct jbd2_header) - JBD2_UUID_BYTES -
		      ((l->csum2 || l->csum3) ? sizeof(struct jbd2_tail) : 0);

	return (uint32_t)(room / l->tag_bytes);
}

uint32_t jbd2_log_revokes_per_block(const struct jbd2_log *l)
{
	size_t room = JBS - sizeof(struct jbd2_revoke_header) -
		      ((l->csum2 || l->csum3) ? sizeof(struct jbd2_tail) : 0);

	return (uint32_t)(room / (l->is64 ? 8 : 4));
}

/* Log blocks a transaction of @n blocks and @nrev revokes takes. */
uint32_t jbd2_log_tx_blocks(const struct jbd2_log *l, size_t n, size_t nrev)
{
	uint32_t per = jbd2_log_tags_per_desc(l), rper = jbd2_log_revokes_per_block(l);

	return (uint32_t)(n + (n + per - 1) / per + (nrev + rper - 1) / rper + 1);
}

/* ---- the blocks of a transaction -------------------------------------- */

void jbd2_log_put_be(void *dst, uint64_t v, bool is64)
{
	if (is64) {
		uint64_t b = htobe64(v);

		memcpy(dst, &b, 8);
	} else {
		uint32_t b = htobe32((uint32_t)v);

		memcpy(dst, &b, 4);
	}
}

void jbd2_log_set_header(void *blk, uint32_t type, uint32_t tid)
{
	struct jbd2_header *h = blk;

	h->h_magic = htobe32(JBD2_MAGIC);
	h->h_blocktype = htobe32(type);
	h->h_sequence = htobe32(tid);
}

/* Write one tag for block @blk at @tp; returns bytes used (uuid included). */
size_t jbd2_log_put_tag(const struct jbd2_log *l, char *tp, uint64_t blk, uint32_t flags,
			uint32_t csum, bool first)
{
	if (l->csum3) {
		struct jbd2_tag3 t = { 0 };

		t.t_blocknr = htobe32((uint32_t)blk);
		t.t_flags = htobe32(flags);
		if (l->is64)
			t.t_blocknr_high = htobe32((uint32_t)(blk >> 32));
		t.t_checksum = htobe32(csum);
		memcpy(tp, &t, sizeof(t));
	} else {
		struct jbd2_tag t = { 0 };

		t.t_blocknr = htobe32((uint32_t)blk);
		t.t_flags = htobe16((uint16_t)flags);
		if (l->csum2)
			t.t_checksum = htobe16((uint16_t)csum);
		if (l->is64)
			t.t_blocknr_high = htobe32((uint32_t)(blk >> 32));
		memcpy(tp, &t, l->tag_bytes < sizeof(t) ? l->tag_bytes : sizeof(t));
	}
	if (!first)
		return l->tag_bytes;
	memcpy(tp + l->tag_bytes, l->jsb->s_uuid, JBD2_UUID_BYTES);
	return l->tag_bytes + JBD2_UUID_BYTES;
}

void jbd2_log_set_tail(const struct jbd2_log *l, void *blk)
{
	struct jbd2_tail *tl = (struct jbd2_tail *)((char *)blk + JBS - sizeof(*tl));

	tl->t_checksum = htobe32(jbd2_tail_csum(l->seed, blk, JBS));
}

void jbd2_log_commit_fill(const struct jbd2_log *l, char *cb, uint32_t tid)
{
	struct jbd2_commit *c = (struct jbd2_commit *)cb;
	struct timespec ts;

	memset(cb, 0, JBS);
	jbd2_log_set_header(cb, JBD2_COMMIT_BLOCK, tid);
	clock_gettime(CLOCK_REALTIME, &ts);
	c->h_commit_sec = htobe64((uint64_t)ts.tv_sec);
	c->h_commit_nsec = htobe32((uint32_t)ts.tv_nsec);
	if (l->csum2 || l->csum3)
		c->h_chksum[0] = htobe32(jbd2_commit_csum(l->seed, cb, JBS));
}
