// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The journal's checkpoint: the newest committed copy of every block the
 * log holds written home (from the cache, or read back from the log),
 * flushed, and the log marked empty, so that the next transaction starts
 * at its beginning again. Apart from the commit (jcommit.c) because it is
 * the one part that reads the cache's pages to write them home; the batch
 * of home writes also serves a transaction larger than the log.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ext4_i.h"

/* ---- checkpoint ------------------------------------------------------- */

/*
 * Metadata page @p is home, as of a flush just done: unless a transaction
 * changed it since, it is clean. Left dirty, the next identical rewrite by
 * libext2fs (its bitmaps and descriptors, at every commit) would log it
 * again (ext4_journal_note_same). Context: fs_lock.
 */
void ext4_journal_page_home(struct page *p)
{
	if (page_test(p, PG_jdirty) || page_test(p, PG_jcommit) || !page_test(p, PG_dirty))
		return;
	lock_page(p);
	if (!page_test(p, PG_jdirty) && !page_test(p, PG_jcommit))
		cancel_dirty_page(p);
	unlock_page(p);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * The checkpoint's writes home, issued together: a batch of up to
 * CKPT_BATCH blocks in runs of up to 64 consecutive blocks, all in flight
 * at once on an engine of the mount's type, and so are the reads of the
 * copies that only the log holds. One by one they cost a device round trip
 * each under fs_lock. dbench -F 8 checkpoints ~130 blocks in ~100 runs:
 * 6.5-8.5 ms one by one, 3.4-5.3 ms together (flushes included); the
 * first of a run, ~600 blocks: 49 ms, then 19-23 ms.
 */
#define CKPT_BATCH 1024U
#define CKPT_RUN 64U

struct ckpt_io {
	struct io_engine eng;
	char *buf;			/* CKPT_BATCH blocks */
	uint64_t blk[CKPT_BATCH];	/* home block of each slot */
	bool esc[CKPT_BATCH];		/* the slot is read from the log, escaped */
	struct iovec iov[CKPT_BATCH];
	struct io_req req[CKPT_BATCH];
	unsigned n;			/* slots filled */
	int err;			/* first failure */
};

static void ckpt_done(struct io_req *req, int res)
{
	struct ckpt_io *c = req->priv;

	if (res < 0 && !c->err)
		c->err = res;
	else if (res >= 0 && (size_t)res != (size_t)req->iovcnt * JBS && !c->err)
		c->err = -EIO;
}

/* Write the batch's slots home, runs of consecutive blocks as one request. */
int ext4_journal_ckpt_flush_batch(struct wjournal *j, struct ckpt_io *c)
{
	uint32_t magic = htobe32(JBD2_MAGIC);
	unsigned i = 0, nreq = 0;
	int ret;

	if (!c->n)
		return 0;
	/* the slots read from the log first */
	ret = io_engine_drain(&c->eng) ? -EIO : c->err;
	for (i = 0; i < c->n && !ret; i++)
		if (c->esc[i])
			memcpy(c->buf + (size_t)i * JBS, &magic, sizeof(magic));
	i = 0;
	if (!ret && jbd2_log_faulted(&j->log))
		ret = -EIO;
	while (i < c->n && !ret) {
		unsigned k = 1;
		struct io_req *r = &c->req[nreq++];

		c->iov[i] = (struct iovec){ c->buf + (size_t)i * JBS, JBS };
		while (i + k < c->n && k < CKPT_RUN && c->blk[i + k] == c->blk[i] + k) {
			c->iov[i + k] = (struct iovec){ c->buf + (size_t)(i + k) * JBS, JBS };
			k++;
		}
		*r = (struct io_req){ .op = IO_WRITE, .fd = j->w->dev_fd,
				      .off = c->blk[i] * (uint64_t)JBS, .iov = &c->iov[i],
				      .iovcnt = (int)k, .done = ckpt_done, .priv = c };
		ret = io_engine_queue(&c->eng, r);
		i += k;
	}
	if (io_engine_drain(&c->eng) && !ret)
		ret = -EIO;
	c->n = 0;
	return ret ? ret : c->err;
}

/* Queue @src (one block) for home block @blk. */
int ext4_journal_ckpt_add(struct wjournal *j, struct ckpt_io *c, uint64_t blk, const void *src)
{
	memcpy(c->buf + (size_t)c->n * JBS, src, JBS);
	c->esc[c->n] = false;
	c->blk[c->n++] = blk;
	return c->n == CKPT_BATCH ? ext4_journal_ckpt_flush_batch(j, c) : 0;
}

/*
 * Queue home block @blk from the log (journal block @v, maybe escaped):
 * the newest committed copy of a block that the running transaction has
 * changed since. Read with the batch's other reads; an escaped copy gets
 * its magic back before it is written.
 */
static int ckpt_add_logged(struct wjournal *j, struct ckpt_io *c, uint64_t blk, uint32_t v)
{
	unsigned i = c->n;
	int ret;

	c->esc[i] = v & ESC_BIT;
	c->iov[i] = (struct iovec){ c->buf + (size_t)i * JBS, JBS };
	c->req[i] = (struct io_req){ .op = IO_READ, .fd = j->w->dev_fd,
				     .off = (uint64_t)jbd2_log_off(&j->log, v & ~ESC_BIT),
				     .iov = &c->iov[i],
				     .iovcnt = 1, .done = ckpt_done, .priv = c };
	ret = io_engine_queue(&c->eng, &c->req[i]);
	if (ret)
		return ret;
	c->blk[c->n++] = blk;
	return c->n == CKPT_BATCH ? ext4_journal_ckpt_flush_batch(j, c) : 0;
}

void ext4_journal_ckpt_io_free(struct ckpt_io *c)
{
	if (!c)
		return;
	io_engine_drain(&c->eng);	/* nothing may still land in buf */
	io_engine_exit(&c->eng);
	free(c->buf);
	free(c);
}

/*
 * One per checkpoint (or oversized transaction), freed at its end: an
 * engine belongs to one thread, and checkpoints run in whichever thread
 * commits.
 */
struct ckpt_io *ext4_journal_ckpt_io_new(struct wbfs *w)
{
	struct ckpt_io *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->buf = ext4_journal_alloc((size_t)CKPT_BATCH * JBS);
	if (!c->buf) {
		free(c);
		return NULL;
	}
	if (io_engine_init(&c->eng, w->opts.io_engine, CKPT_BATCH / CKPT_RUN * 2) &&
	    io_engine_init(&c->eng, IO_ENGINE_PSYNC, CKPT_BATCH / CKPT_RUN * 2)) {
		free(c->buf);
		free(c);
		return NULL;
	}
	return c;
}

/*
 * Write home the newest committed copy of every block the log holds,
 * flush, and mark the log empty. Context: commit_mutex and fs_lock; no
 * transaction is being committed.
 */
int ext4_journal_checkpoint_locked(struct wbfs *w, struct wjournal *j)
{
	size_t n = j->logged.n, i, k = 0;
	struct ckpt_io *c = NULL;
	uint64_t *blks = NULL;
	int ret = 0;

	lock_assert_held(&j->commit_mutex);
	lock_assert_held(&w->fs_lock);

	if (n) {
		blks = malloc(n * sizeof(*blks));
		c = ext4_journal_ckpt_io_new(w);
		if (!blks || !c) {
			ret = -ENOMEM;
			goto out;
		}
		for (i = 0; i < j->logged.cap; i++)
			if (j->logged.key[i] != JTAB_EMPTY)
				blks[k++] = j->logged.key[i];
		qsort(blks, n, sizeof(*blks), cmp_u64);
	}
	for (i = 0; i < n && !ret; i++) {
		struct page *p = mapping_get_page(&w->meta_map, blks[i]);

		if (p && page_test(p, PG_uptodate) && !page_test(p, PG_jdirty)) {
			/* not changed since its commit: the cache has it, and
			 * once written back (this flush makes that durable) it
			 * is home already */
			if (page_test(p, PG_writeback))
				wait_on_page_writeback(p);
			if (page_test(p, PG_dirty))
				ret = ext4_journal_ckpt_add(j, c, blks[i], page_address(p));
		} else {
			ret = ckpt_add_logged(j, c, blks[i], *jtab_find(&j->logged, blks[i]));
		}
		if (p)
			page_put(p);
	}
	if (!ret && c)
		ret = ext4_journal_ckpt_flush_batch(j, c);
	if (!ret)
		ret = jbd2_log_flush(&j->log);
	for (i = 0; i < n && !ret; i++) {
		struct page *p = mapping_get_page(&w->meta_map, blks[i]);

		if (p) {
			ext4_journal_page_home(p);
			page_put(p);
		}
	}
	if (!ret && !j->empty) {
		uint32_t start = j->log.jsb->s_start, seq = j->log.jsb->s_sequence;

		j->log.jsb->s_start = 0;
		j->log.jsb->s_sequence = htobe32(j->seq);
		ret = jbd2_log_sb_write(&j->log);
		if (!ret)
			ret = jbd2_log_flush(&j->log);
		if (ret) {
			/*
			 * The log stays as it was, but the device may hold
			 * either superblock. "Empty" is harmless while no
			 * commit is appended (the home writes are flushed,
			 * and commit_prepare_locked retries the checkpoint
			 * before any commit), but it would hide one from
			 * replay: keep the in-memory copy true to the log,
			 * and let the next commit write it again first.
			 */
			j->log.jsb->s_start = start;
			j->log.jsb->s_sequence = seq;
			j->jsb_unsure = true;
		}
	}
	if (!ret) {
		j->head = j->log.first;
		j->empty = true;
		j->jsb_unsure = false;
		jtab_clear(&j->logged);
		atomic_fetch_add(&j->checkpoints, 1);
	}
out:
	free(blks);
	ext4_journal_ckpt_io_free(c);
	return ret;
}
