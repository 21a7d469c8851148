// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The journal's checkpoint: when the next transaction finds no room in
 * the ring, the pinned blocks of the oldest transactions written home
 * (from the cache, or read back from the log when the running
 * transaction has changed the page since), a flush, and the journal
 * superblock with the new tail. Apart from the commit (jcommit.c) because
 * it is the one part that reads the cache's pages to write them home; the
 * batch of home writes also serves a transaction larger than the log.
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

/* A block to write home: its pin, where the log has it, its page. */
struct ckpt_blk {
	uint64_t blk;
	uint32_t tid;		/* the transaction it pins */
	uint32_t pos;		/* its newest copy in the log (| ESC_BIT) */
	struct page *p;		/* PG_jcommit while written, referenced; or NULL */
};

static int cmp_blk(const void *a, const void *b)
{
	const struct ckpt_blk *x = a, *y = b;

	return x->blk < y->blk ? -1 : x->blk > y->blk;
}

/*
 * Write the superblock with the log starting at transaction @tid (or
 * empty), then flush; the home writes it relies on are durable already.
 * Context: commit_mutex, not fs_lock.
 */
static int tail_write(struct wbfs *w, struct wjournal *j, bool empty, uint32_t tid)
{
	uint32_t start = j->log.jsb->s_start, seq = j->log.jsb->s_sequence;
	int ret;

	j->log.jsb->s_start = empty ? 0 : htobe32(ext4_journal_tx_start(j, tid));
	j->log.jsb->s_sequence = htobe32(empty ? j->seq : tid);
	ret = jbd2_log_sb_write(&j->log);
	if (!ret)
		ret = jbd2_log_flush(&j->log);
	if (ret) {
		/*
		 * The log stays as it was, but the device may hold either
		 * superblock. Both are true while nothing is appended (the
		 * home writes are flushed), but the new start would hide an
		 * older commit from replay once the space is reused: keep
		 * the in-memory copy true to the log, and let the next
		 * commit write it again first.
		 */
		j->log.jsb->s_start = start;
		j->log.jsb->s_sequence = seq;
		j->jsb_unsure = true;
		return ret;
	}
	j->jsb_unsure = false;
	ext4_lock(w);
	ext4_journal_tail_set(w, j, empty, empty ? j->seq : tid);
	ext4_unlock(w);
	return 0;
}

/*
 * The pinned blocks of the transactions before @upto (all with @all), to
 * write home. Each cached page is marked PG_jcommit under its lock, once
 * its writeback in flight is done: writeback leaves it alone until the
 * checkpoint's writes are, so that no write of a copy torn by a change
 * lands after them. Returns how many, in *@out (sorted). Context:
 * commit_mutex, fs_lock.
 */
static size_t ckpt_collect(struct wbfs *w, struct wjournal *j, bool all, uint32_t upto,
			   struct ckpt_blk **out)
{
	struct ckpt_blk *v;
	size_t i, n = 0;

	*out = NULL;
	if (!j->pinned.n)
		return 0;
	v = malloc(j->pinned.n * sizeof(*v));
	if (!v)
		return 0;
	for (i = 0; i < j->pinned.cap; i++) {
		uint64_t b = j->pinned.key[i];
		uint32_t *pos;

		if (b == JTAB_EMPTY || (!all && !jbd2_tid_gt(upto, j->pinned.val[i])))
			continue;
		pos = jtab_find(&j->logged, b);
		if (!pos)
			continue;	/* cannot be: pinned blocks are logged */
		v[n++] = (struct ckpt_blk){ b, j->pinned.val[i], *pos,
					    mapping_get_page(&w->meta_map, b) };
	}
	qsort(v, n, sizeof(*v), cmp_blk);
	*out = v;
	return n;
}

/*
 * Write home the blocks of @v, each from its page when that holds the
 * committed copy (in no running transaction), else from the log.
 * Context: commit_mutex, not fs_lock (namespace operations go on).
 */
static int ckpt_write(struct wbfs *w, struct wjournal *j, struct ckpt_blk *v, size_t n)
{
	struct ckpt_io *c = ext4_journal_ckpt_io_new(w);
	size_t i;
	int ret = c ? 0 : -ENOMEM;

	for (i = 0; i < n && !ret; i++) {
		struct page *p = v[i].p;
		bool own = false;

		if (p) {
			lock_page(p);
			if (p->mapping == &w->meta_map && page_test(p, PG_uptodate)) {
				/* no new writeback starts (it locks the page) */
				wait_on_page_writeback(p);
				page_set(p, PG_jcommit);
				own = !page_test(p, PG_jdirty);
			} else {
				unlock_page(p);
				page_put(p);
				v[i].p = p = NULL;
			}
		}
		if (own) {
			ret = ext4_journal_ckpt_add(j, c, v[i].blk, page_address(p));
			unlock_page(p);
		} else {
			if (p)
				unlock_page(p);
			ret = ckpt_add_logged(j, c, v[i].blk, v[i].pos);
		}
	}
	if (!ret && c)
		ret = ext4_journal_ckpt_flush_batch(j, c);
	ext4_journal_ckpt_io_free(c);
	if (!ret)
		ret = jbd2_log_flush(&j->log);
	return ret;
}

/*
 * The oldest transactions to free for @need blocks after the head with
 * @room free now, and about a quarter of the log more, so that this is
 * not done at every commit: *@upto gets the first one kept. True when
 * that is all of them. Context: commit_mutex.
 */
static bool ckpt_upto(const struct wjournal *j, uint32_t need, uint32_t room, uint32_t *upto)
{
	uint32_t len = j->log.last - j->log.first, freed = 0;
	uint32_t goal = need + len / 4 < len - 1 ? need + len / 4 : len - 1;
	size_t i;

	for (i = 0; i < j->nr_txs; i++) {
		freed += j->txs[i].nblk;
		if (room + freed >= goal)
			break;
	}
	if (i + 1 >= j->nr_txs)
		return true;
	*upto = j->txs[i + 1].tid;
	return false;
}

/*
 * The checkpoint's writes of @v are done (@ret): written blocks no longer
 * pin (the copy written is the newest committed, as a commit would need
 * commit_mutex), and their pages are home. Context: commit_mutex, fs_lock.
 */
static void ckpt_written(struct wbfs *w, struct wjournal *j, struct ckpt_blk *v, size_t n, int ret)
{
	size_t i;

	for (i = 0; i < n; i++) {
		uint32_t *t = jtab_find(&j->pinned, v[i].blk);

		if (!ret && t && *t == v[i].tid)
			jtab_del(&j->pinned, v[i].blk);
		if (v[i].p) {
			page_clear(v[i].p, PG_jcommit);
			if (!ret && v[i].p->mapping == &w->meta_map)
				ext4_journal_page_home(v[i].p);
			page_put(v[i].p);
		}
	}
}

/*
 * Make room for @need log blocks after the head, as jbd2's
 * log_do_checkpoint: a start the commits' flushes have made safe may be
 * enough; else the oldest transactions' pinned blocks go home (about a
 * quarter of the log more than asked for, so that this is not done at
 * every commit), a flush, and the superblock with the oldest transaction
 * still pinned as the start. @need UINT32_MAX: every pinned block, and
 * the log is empty after (unmount; a transaction larger than the log).
 * fs_lock is taken only to read and update the tables: namespace
 * operations go on during the I/O; a page that the running transaction
 * changes meanwhile keeps its committed copy home (written from the log).
 * Context: commit_mutex, not fs_lock; no transaction is being committed.
 */
int ext4_journal_checkpoint(struct wbfs *w, struct wjournal *j, uint32_t need)
{
	uint32_t len = j->log.last - j->log.first, room = ext4_journal_room(j), upto = 0;
	bool all = need == UINT32_MAX;
	struct ckpt_blk *v = NULL;
	size_t n = 0;
	int ret;

	lock_assert_held(&j->commit_mutex);

	if (j->empty && !j->jsb_unsure)
		return 0;
	if (!all && room >= need)
		return 0;
	if (!all && j->safe_tid != j->tail_tid) {
		uint32_t s = ext4_journal_tx_start(j, j->safe_tid);
		uint32_t freed = s >= j->tail ? s - j->tail : s + len - j->tail;

		if (room + freed >= need) {
			ret = tail_write(w, j, false, j->safe_tid);
			if (!ret)
				atomic_fetch_add(&j->tail_lazy, 1);
			return ret;
		}
	}
	if (!all)
		all = ckpt_upto(j, need, room, &upto);
	ext4_lock(w);
	/* home writes done so far: this checkpoint's flush covers them */
	ext4_journal_fold_homed(j);
	n = ckpt_collect(w, j, all, upto, &v);
	ext4_unlock(w);
	ret = ckpt_write(w, j, v, n);
	ext4_lock(w);
	ckpt_written(w, j, v, n, ret);
	if (!ret) {
		atomic_fetch_add(&j->ckpt_blocks, (long)n);
		upto = ext4_journal_oldest_pinned(j, j->seq);
		all = !j->pinned.n;
	}
	ext4_unlock(w);
	free(v);
	if (ret)
		return ret;
	ret = tail_write(w, j, all, upto);
	if (!ret) {
		atomic_fetch_add(&j->tail_forced, 1);
		atomic_fetch_add(&j->checkpoints, 1);
	}
	return ret;
}
