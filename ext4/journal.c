// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The journal: ext4's own, in the jbd2 format (fs/jbd2.h), written by
 * wbcfs so that a crash leaves a filesystem that a replay (wbcfs's, the
 * kernel's or e2fsck's) makes consistent.
 *
 * Metadata changes are libext2fs writes into the device mapping of the
 * cache (iomgr.c), all under fs_lock. With a journal, a page written there
 * joins the running transaction (PG_jdirty: writeback leaves it alone, so
 * its home block keeps the committed contents). A commit, under fs_lock,
 * puts libext2fs's in-memory metadata (superblock, descriptors, bitmaps)
 * into the cache, copies every page of the transaction and starts the next
 * one; then, without the lock: the ordered-data barrier (every data write
 * whose blocks that transaction allocated has completed), descriptor and
 * copied blocks and revoke blocks into the log, a device flush, the commit
 * block, a device flush. Only then do the pages become writable home, and
 * blocks the transaction freed reusable (busy blocks, ext4.c).
 *
 * The log never wraps: when the next transaction does not fit before its
 * end, a checkpoint writes the newest committed copy of every block the log
 * holds home (from the cache when the page is not in the running
 * transaction, from the log otherwise), flushes, and marks the log empty
 * in the journal superblock. A freed block that the log holds gets a
 * revoke record, so that a replay never writes old metadata over what the
 * block holds later (file data). Until that revoke has committed, the
 * committed metadata still points at the block: a checkpoint in between
 * writes its logged copy home, and only the revoke's commit drops it from
 * the log's tables. The freed block's cached page is dropped at once: what
 * the running transaction changed in it must not reach home.
 *
 * Commits: every commit=N seconds (journal thread), at fsync and syncfs,
 * when the running transaction grows past a quarter of the log, and at
 * unmount, which also checkpoints and clears needs_recovery.
 *
 * Locks: commit_mutex serialises commits and checkpoints (outside
 * fs_lock); the running transaction's tables are under fs_lock.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ext4_i.h"
#include "wbcfs/jbd2.h"
#include "wbcfs/lib/clock.h"
#include "wbcfs/blkdev/devlog.h"

LOCK_CLASS(lc_journal_tlock, "journal_tlock")
LOCK_CLASS(lc_journal_commit, "journal_commit")

#define JBS 4096U			/* journal block = filesystem block */
#define ESC_BIT 0x80000000U		/* logged: the copy was escaped */
#define COMMIT_RETRIES 8		/* builds of one commit while data writes
					 * it waits for keep failing on new blocks */

/* ---- the journal ------------------------------------------------------ */

struct wjournal {
	struct wbfs *w;
	struct jbd2_log log;		/* the log on the device (log.jsb:
					 * commit_mutex) */
	uint32_t max_tx;		/* constant: blocks that start a commit */

	pthread_mutex_t commit_mutex;
	uint32_t head;			/* commit_mutex: next log block */
	bool empty;			/* commit_mutex: s_start == 0 on disk */
	bool jsb_unsure;		/* commit_mutex: a journal superblock write
					 * may or may not have reached the device:
					 * the next commit writes it again */
	uint32_t stale_jb;		/* commit_mutex: a commit block that failed
					 * may be on the device there (0: none; the
					 * log starts after the superblock) */
	char *zero;			/* constant: a zeroed journal block */
	int err;			/* commit_mutex (read anywhere): aborted */
	uint32_t committed;		/* commit_mutex (written; read atomically
					 * without it): the last transaction
					 * committed, on the device */
	bool have_committed;		/* commit_mutex (the same): since mount */

	bool on;			/* fs_lock: changes join transactions */
	uint32_t seq;			/* fs_lock (written; read atomically without
					 * it): the running transaction's id */
	struct page **run;		/* fs_lock: its pages (referenced) */
	size_t nr_run, cap_run;		/* fs_lock */
	struct jtab runset;		/* fs_lock: their blocks */
	struct jtab revoke;		/* fs_lock: blocks it revokes */
	struct jtab logged;		/* fs_lock: block -> log block of its newest
					 * committed copy (| ESC_BIT), since the
					 * last checkpoint */
	struct jtab ctab;		/* fs_lock: the same for the transaction
					 * being committed */
	ext2fs_block_bitmap busy_commit;	/* fs_lock: blocks freed by the
						 * committing transaction */
	blk64_t nr_busy_commit;		/* fs_lock: blocks in it (0: nothing to scan) */
	struct bm_runs busy_commit_runs;	/* fs_lock: where they are */

	pthread_t thread;
	pthread_mutex_t tlock;		/* protects: stop, kick */
	pthread_cond_t tcond;
	bool stop, kick, thread_started;
	unsigned commit_ms;

	_Atomic long commits, blocks, revokes, checkpoints, unjournaled, failed;
	_Atomic long joined;		/* commit calls another's commit served */
	/* time in each phase of the commits, ns (as jbd2's info file) */
	_Atomic uint64_t ns_prepare, ns_log, ns_ordered, ns_seal, ns_finish;
};

/* Add the time since *@t0 to @sum; *@t0 becomes now. */
static void phase_add(_Atomic uint64_t *sum, uint64_t *t0)
{
	uint64_t now = clock_real_ns();

	atomic_fetch_add_explicit(sum, now - *t0, memory_order_relaxed);
	*t0 = now;
}

static void jlog(struct wbfs *w, const char *fmt, const char *what, int err)
{
	fprintf(msg_stream(), "wbcfs: %s: journal: ", w->dev_path);
	fprintf(msg_stream(), fmt, what, strerror(err));
	fputc('\n', msg_stream());
}

/*
 * The log's hooks into the mount: its writes fail under fault_meta=write
 * (fault_inject mounts) as metadata writeback does, and its flushes are
 * the bdi's, with their faults.
 */
static bool jlog_write_faulted(void *priv)
{
	struct wbfs *w = priv;

	return w->opts.fault_inject && (atomic_load(&w->meta_wb.fault) & WB_FAULT_WRITE);
}

static int jlog_flush(void *priv)
{
	struct wbfs *w = priv;

	return bdi_flush_device(w->bdi);
}

static bool jlog_flush_fault_take(void *priv)
{
	struct wbfs *w = priv;

	return bdi_flush_fault_take(w->bdi);
}

static const struct jbd2_log_ops jlog_ops = {
	.write_faulted = jlog_write_faulted,
	.flush = jlog_flush,
	.flush_fault_take = jlog_flush_fault_take,
};

static void *jalloc(size_t n)
{
	void *p;

	return posix_memalign(&p, JBS, n ? n : JBS) ? NULL : p;
}

/* ---- the running transaction ------------------------------------------ */

/* Append @p to the running list (the caller gives it a reference). */
static int add_run(struct wjournal *j, struct page *p)
{
	if (j->nr_run == j->cap_run) {
		size_t cap = j->cap_run ? j->cap_run * 2 : 256;
		struct page **n = realloc(j->run, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		j->run = n;
		j->cap_run = cap;
	}
	j->run[j->nr_run++] = p;
	return 0;
}

/* Called by the iomgr after changing metadata page @p. Context: fs_lock, @p locked. */
void wbfs_journal_note_write(struct wbfs *w, struct page *p)
{
	struct wjournal *j = w->journal;

	if (!j || !j->on || page_test_set(p, PG_jdirty))
		return;
	if (add_run(j, p)) {
		/* cannot track it: let it be written like an unjournaled page */
		page_clear(p, PG_jdirty);
		atomic_fetch_add(&j->unjournaled, 1);
		return;
	}
	page_get(p);
	jtab_put(&j->runset, p->index, 1);
	/* journaled again after a revoke in this transaction: the revoke
	 * would hide this copy from replay */
	jtab_del(&j->revoke, p->index);
	if (j->nr_run == j->max_tx) {
		ls_mutex_lock(&j->tlock, &lc_journal_tlock);
		j->kick = true;
		pthread_cond_signal(&j->tcond);
		ls_mutex_unlock(&j->tlock);
	}
}

/*
 * The iomgr rewrote dirty page @p with the bytes it holds. Unless the log
 * has its newest copy (this transaction, the one committing, or a
 * committed one not checkpointed), it joins the transaction: a block
 * freed, revoked and allocated again with the same contents would
 * otherwise be in no transaction at all while its home copy is old.
 * Context: fs_lock, @p locked.
 */
void wbfs_journal_note_same(struct wbfs *w, struct page *p)
{
	struct wjournal *j = w->journal;

	if (!j || !j->on || page_test(p, PG_jdirty))
		return;
	/* the log's copy is the newest, unless a pending revoke hides it */
	if ((jtab_find(&j->logged, p->index) || jtab_find(&j->ctab, p->index)) &&
	    !jtab_find(&j->revoke, p->index))
		return;
	wbfs_journal_note_write(w, p);
}

/*
 * Block @b was freed by the running transaction. Its newest committed copy
 * (in the log, or being committed) is still what the committed metadata
 * points at, so it stays in logged/ctab: a checkpoint before the freeing
 * transaction commits must write it home. A revoke keeps replay from
 * writing it over the block's next owner; tx_done forgets the copy once
 * the revoke has committed. The cached page goes now: what the running
 * transaction changed in it must never reach home, and it is nobody's
 * metadata any more.
 */
static void note_freed_one(struct wbfs *w, struct wjournal *j, uint64_t b)
{
	jtab_del(&j->runset, b);	/* tx_build skips the page once it is gone */
	if ((jtab_find(&j->logged, b) || jtab_find(&j->ctab, b)) && !jtab_find(&j->revoke, b) &&
	    !jtab_put(&j->revoke, b, 1))
		atomic_fetch_add(&j->revokes, 1);
	mapping_truncate(&w->meta_map, b, b);
}

/*
 * Call @fn for the blocks of @t inside [blk, blk+n): a table walk for
 * large ranges. @fn may remove blocks from @t.
 */
static void visit_tab(struct wbfs *w, struct wjournal *j, struct jtab *t, uint64_t blk,
		      uint64_t n, void (*fn)(struct wbfs *, struct wjournal *, uint64_t))
{
	uint64_t *hits;
	size_t i, k = 0;

	if (!t->n)
		return;
	if (n <= t->n * 4) {
		for (i = 0; i < n; i++)
			if (jtab_find(t, blk + i))
				fn(w, j, blk + i);
		return;
	}
	hits = malloc(t->n * sizeof(*hits));
	if (!hits)
		return;
	for (i = 0; i < t->cap; i++)
		if (t->key[i] != JTAB_EMPTY && t->key[i] >= blk && t->key[i] - blk < n)
			hits[k++] = t->key[i];
	for (i = 0; i < k; i++)
		fn(w, j, hits[i]);
	free(hits);
}

/* libext2fs freed [blk, blk+n). Context: fs_lock. */
void wbfs_journal_note_freed(struct wbfs *w, uint64_t blk, uint64_t n)
{
	struct wjournal *j = w->journal;

	if (!j || !j->on)
		return;
	visit_tab(w, j, &j->runset, blk, n, note_freed_one);
	visit_tab(w, j, &j->logged, blk, n, note_freed_one);
	visit_tab(w, j, &j->ctab, blk, n, note_freed_one);
}

static void note_reused_one(struct wbfs *w, struct wjournal *j, uint64_t b)
{
	bool had = jtab_del(&j->logged, b);

	(void)w;
	had |= jtab_del(&j->ctab, b);
	had |= jtab_del(&j->runset, b);
	if (had && !jtab_find(&j->revoke, b) && !jtab_put(&j->revoke, b, 1))
		atomic_fetch_add(&j->revokes, 1);
}

/*
 * Blocks [blk, blk+n) now hold file data. Normally their frees committed
 * and the log has forgotten them; a copy it may still hold must be
 * written over the data neither by a checkpoint nor by replay.
 * Context: fs_lock.
 */
void wbfs_journal_note_reused(struct wbfs *w, uint64_t blk, uint64_t n)
{
	struct wjournal *j = w->journal;

	if (!j || !j->on)
		return;
	visit_tab(w, j, &j->runset, blk, n, note_reused_one);
	visit_tab(w, j, &j->logged, blk, n, note_reused_one);
	visit_tab(w, j, &j->ctab, blk, n, note_reused_one);
}

/* Freed by the transaction that committed, unless freed anew since (busy again). */
static void unmark_unless_busy(struct wbfs *w, blk64_t blk, blk64_t n)
{
	for (; n; blk++, n--)
		if (!ext2fs_test_block_bitmap2(w->busy, blk))
			ext2fs_unmark_block_bitmap2(w->fs->block_map, blk);
}

/*
 * Call @fn on each run of the committing transaction's busy blocks and
 * empty the set; nothing to do (no scan of a whole-filesystem bitmap at
 * every commit) when it is empty. Context: fs_lock.
 */
static void drain_busy_commit(struct wbfs *w, struct wjournal *j,
			      void (*fn)(struct wbfs *w, blk64_t blk, blk64_t n))
{
	if (!j->busy_commit || !w->fs || !j->nr_busy_commit)
		return;
	wbfs_bitmap_drain(w, j->busy_commit, &j->busy_commit_runs, fn);
	j->nr_busy_commit = 0;
}

/* Blocks freed by the transaction that just committed may be reused. Context: fs_lock. */
static void release_busy_commit(struct wbfs *w, struct wjournal *j)
{
	drain_busy_commit(w, j, unmark_unless_busy);
}

static void mark_busy_commit(struct wbfs *w, blk64_t blk, blk64_t n)
{
	ext2fs_mark_block_bitmap_range2(w->journal->busy_commit, blk, (unsigned)n);
	wbfs_bm_runs_add(&w->journal->busy_commit_runs, blk, n);
	w->journal->nr_busy_commit += n;
}

static void mark_busy(struct wbfs *w, blk64_t blk, blk64_t n)
{
	ext2fs_mark_block_bitmap_range2(w->busy, blk, (unsigned)n);
	wbfs_bm_runs_add(&w->busy_runs, blk, n);
	w->nr_busy += n;
}

/*
 * The busy blocks of the running transaction become the committing one's.
 * Context: fs_lock.
 */
static void busy_to_commit(struct wbfs *w, struct wjournal *j)
{
	if (!w->nr_busy || !j->busy_commit)
		return;
	wbfs_bitmap_drain(w, w->busy, &w->busy_runs, mark_busy_commit);
	w->nr_busy = 0;
}

/*
 * wbfs_release_busy_locked: the committing transaction's too (at unmount,
 * and when a commit finds nothing left to commit).
 */
void wbfs_journal_release_busy(struct wbfs *w)
{
	struct wjournal *j = w->journal;

	if (j)
		drain_busy_commit(w, j, wbfs_busy_unmark);
}

blk64_t wbfs_journal_busy_blocks(struct wbfs *w)
{
	struct wjournal *j = w->journal;

	return w->nr_busy + (j ? j->nr_busy_commit : 0);
}

/* A set bit of @bm in [@goal, last], else in [first, @goal): *@blk. */
static bool busy_find(struct wbfs *w, ext2fs_block_bitmap bm, blk64_t goal, blk64_t *blk)
{
	blk64_t first = w->fs->super->s_first_data_block;
	blk64_t last = ext2fs_blocks_count(w->fs->super) - 1;

	if (goal < first || goal > last)
		goal = first;
	if (!ext2fs_find_first_set_block_bitmap2(bm, goal, last, blk))
		return true;
	return goal > first && !ext2fs_find_first_set_block_bitmap2(bm, first, goal - 1, blk);
}

/*
 * One busy block for libext2fs's metadata (busy_alloc_block): the running
 * transaction's, else the committing one's. It leaves its busy set (its
 * bit there would have the bitmap written show it free); it stays marked
 * in the in-memory bitmap, where the allocation that follows counts it.
 * A stale run noting it finds its bit clear. Context: fs_lock.
 */
errcode_t wbfs_journal_take_busy(struct wbfs *w, blk64_t goal, blk64_t *ret)
{
	struct wjournal *j = w->journal;

	if (w->nr_busy && busy_find(w, w->busy, goal, ret)) {
		ext2fs_unmark_block_bitmap2(w->busy, *ret);
		w->nr_busy--;
	} else if (j && j->busy_commit && j->nr_busy_commit &&
		   busy_find(w, j->busy_commit, goal, ret)) {
		ext2fs_unmark_block_bitmap2(j->busy_commit, *ret);
		j->nr_busy_commit--;
	} else {
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	}
	wbfs_bb_changed(w, *ret, 1);
	return 0;
}

/* ---- checkpoint ------------------------------------------------------- */

/*
 * Metadata page @p is home, as of a flush just done: unless a transaction
 * changed it since, it is clean. Left dirty, the next identical rewrite by
 * libext2fs (its bitmaps and descriptors, at every commit) would log it
 * again (wbfs_journal_note_same). Context: fs_lock.
 */
static void page_home(struct page *p)
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
static int ckpt_flush_batch(struct wjournal *j, struct ckpt_io *c)
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
static int ckpt_add(struct wjournal *j, struct ckpt_io *c, uint64_t blk, const void *src)
{
	memcpy(c->buf + (size_t)c->n * JBS, src, JBS);
	c->esc[c->n] = false;
	c->blk[c->n++] = blk;
	return c->n == CKPT_BATCH ? ckpt_flush_batch(j, c) : 0;
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
				     .off = (uint64_t)jbd2_log_off(&j->log, v & ~ESC_BIT), .iov = &c->iov[i],
				     .iovcnt = 1, .done = ckpt_done, .priv = c };
	ret = io_engine_queue(&c->eng, &c->req[i]);
	if (ret)
		return ret;
	c->blk[c->n++] = blk;
	return c->n == CKPT_BATCH ? ckpt_flush_batch(j, c) : 0;
}

static void ckpt_io_free(struct ckpt_io *c)
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
static struct ckpt_io *ckpt_io_new(struct wbfs *w)
{
	struct ckpt_io *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->buf = jalloc((size_t)CKPT_BATCH * JBS);
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
static int checkpoint_locked(struct wbfs *w, struct wjournal *j)
{
	size_t n = j->logged.n, i, k = 0;
	struct ckpt_io *c = NULL;
	uint64_t *blks = NULL;
	int ret = 0;

	if (n) {
		blks = malloc(n * sizeof(*blks));
		c = ckpt_io_new(w);
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
				ret = ckpt_add(j, c, blks[i], page_address(p));
		} else {
			ret = ckpt_add_logged(j, c, blks[i], *jtab_find(&j->logged, blks[i]));
		}
		if (p)
			page_put(p);
	}
	if (!ret && c)
		ret = ckpt_flush_batch(j, c);
	if (!ret)
		ret = jbd2_log_flush(&j->log);
	for (i = 0; i < n && !ret; i++) {
		struct page *p = mapping_get_page(&w->meta_map, blks[i]);

		if (p) {
			page_home(p);
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
	ckpt_io_free(c);
	return ret;
}

/* ---- commit ----------------------------------------------------------- */

struct jtx {
	uint32_t tid;
	uint32_t start;			/* first log block */
	uint32_t nblk;			/* log blocks in all */
	char **bufs;			/* nblk buffers, the last the commit block */
	char *mem;
	struct page **pages;		/* PG_jcommit, referenced */
	size_t nr_pages;
	uint64_t *rev;			/* blocks it revokes */
	size_t nrev;
	bool home;			/* larger than the log: mem holds the
					 * pages' copies, written home */
	int ord;			/* the ordered-data epoch it closed */
};

static void tx_free(struct jtx *t)
{
	free(t->bufs);
	free(t->mem);
	free(t->pages);
	free(t->rev);
}

/*
 * The running transaction's pages that still hold metadata move to @t
 * (PG_jcommit, referenced; t->pages has room for all). Context: fs_lock.
 */
static void tx_take_pages(struct wbfs *w, struct wjournal *j, struct jtx *t)
{
	size_t i;

	for (i = 0; i < j->nr_run; i++) {
		struct page *p = j->run[i];

		if (p->mapping == &w->meta_map && page_test(p, PG_uptodate) &&
		    page_test_clear(p, PG_jdirty)) {
			page_set(p, PG_jcommit);
			t->pages[t->nr_pages++] = p;
		} else {
			page_put(p);
		}
	}
	j->nr_run = 0;
	jtab_clear(&j->runset);
}

/*
 * Take the running transaction: copy its pages into log blocks (laid out
 * from j->head), collect its revokes, record where each block's copy
 * lies. Context: commit_mutex and fs_lock.
 */
static int tx_build(struct wbfs *w, struct wjournal *j, struct jtx *t)
{
	uint32_t per = jbd2_log_tags_per_desc(&j->log), rper = jbd2_log_revokes_per_block(&j->log);
	size_t n = j->nr_run, nrev = j->revoke.n, i, d = 0, k = 0, maxblk;
	uint64_t *rev;
	bool csum = jbd2_log_csum(&j->log);
	int ret = -ENOMEM;

	maxblk = jbd2_log_tx_blocks(&j->log, n, nrev);
	t->mem = jalloc(maxblk * (size_t)JBS);
	t->bufs = calloc(maxblk, sizeof(*t->bufs));
	t->pages = calloc(n ? n : 1, sizeof(*t->pages));
	rev = t->rev = malloc((nrev ? nrev : 1) * sizeof(*rev));
	if (!t->mem || !t->bufs || !t->pages || !rev)
		goto out;
	memset(t->mem, 0, maxblk * (size_t)JBS);
	t->tid = j->seq;
	t->start = j->head;

	tx_take_pages(w, j, t);

	/* descriptor blocks, each followed by its data blocks */
	for (i = 0; i < t->nr_pages;) {
		char *desc = t->mem + (size_t)(k++) * JBS, *tp = desc + sizeof(struct jbd2_header);
		uint32_t m = 0;

		t->bufs[k - 1] = desc;
		jbd2_log_set_header(desc, JBD2_DESCRIPTOR_BLOCK, t->tid);
		for (; i < t->nr_pages && m < per; i++, m++) {
			struct page *p = t->pages[i];
			char *blk = t->mem + (size_t)(k++) * JBS;
			uint32_t flags = 0, pos = t->start + (uint32_t)(k - 1), magic, bcsum = 0;

			t->bufs[k - 1] = blk;
			memcpy(blk, page_address(p), JBS);
			memcpy(&magic, blk, sizeof(magic));
			if (magic == htobe32(JBD2_MAGIC)) {
				memset(blk, 0, sizeof(magic));
				flags |= JBD2_FLAG_ESCAPE;
			}
			if (m)
				flags |= JBD2_FLAG_SAME_UUID;
			if (m + 1 == per || i + 1 == t->nr_pages)
				flags |= JBD2_FLAG_LAST_TAG;
			if (csum)
				bcsum = jbd2_block_csum(j->log.seed, t->tid, blk, JBS);
			tp += jbd2_log_put_tag(&j->log, tp, p->index, flags, bcsum, m == 0);
			if (jtab_put(&j->ctab, p->index,
				     pos | ((flags & JBD2_FLAG_ESCAPE) ? ESC_BIT : 0)))
				goto out;
			d++;
		}
		if (csum)
			jbd2_log_set_tail(&j->log, desc);
	}

	/* revoke blocks */
	if (nrev) {
		size_t r = 0;

		for (i = 0; i < j->revoke.cap; i++)
			if (j->revoke.key[i] != JTAB_EMPTY)
				rev[r++] = j->revoke.key[i];
		jtab_clear(&j->revoke);
		t->nrev = nrev;
		for (i = 0; i < nrev;) {
			char *blk = t->mem + (size_t)(k++) * JBS;
			struct jbd2_revoke_header *rh = (void *)blk;
			size_t off = sizeof(*rh), m;

			t->bufs[k - 1] = blk;
			jbd2_log_set_header(blk, JBD2_REVOKE_BLOCK, t->tid);
			for (m = 0; i < nrev && m < rper; m++, i++) {
				jbd2_log_put_be(blk + off, rev[i], j->log.is64);
				off += j->log.is64 ? 8 : 4;
			}
			rh->r_count = htobe32((uint32_t)off);
			if (csum)
				jbd2_log_set_tail(&j->log, blk);
		}
	}

	/* the commit block, filled in at write time (its time stamp) */
	t->bufs[k] = t->mem + (size_t)k * JBS;
	k++;
	t->nblk = (uint32_t)k;
	atomic_fetch_add(&j->blocks, (long)d);
	ret = 0;
out:
	return ret;
}

/* The transaction is on the device: its copies are the log's now. Context: fs_lock. */
static void tx_done(struct wbfs *w, struct wjournal *j, struct jtx *t)
{
	size_t i;

	for (i = 0; i < j->ctab.cap; i++)
		if (j->ctab.key[i] != JTAB_EMPTY)
			jtab_put(&j->logged, j->ctab.key[i], j->ctab.val[i]);
	jtab_clear(&j->ctab);
	/* its revokes have committed: replay skips those copies, so must a
	 * checkpoint (the blocks may belong to file data by now) */
	for (i = 0; i < t->nrev; i++)
		jtab_del(&j->logged, t->rev[i]);
	for (i = 0; i < t->nr_pages; i++) {
		page_clear(t->pages[i], PG_jcommit);
		page_put(t->pages[i]);
	}
	t->nr_pages = 0;
	release_busy_commit(w, j);
}

/*
 * The transaction could not be written: it goes back into the running
 * one (pages, revokes, busy blocks), to be committed by the next try; its
 * log blocks, without a commit block, are never replayed. Context: fs_lock.
 */
/*
 * Page @p of a transaction that was not written goes back into the
 * running one, unless it is there already (PG_jdirty: changed again) or
 * no longer metadata. True when its reference moved to the running list.
 * Context: fs_lock.
 */
static bool run_take_back(struct wbfs *w, struct wjournal *j, struct page *p)
{
	if (p->mapping != &w->meta_map || page_test(p, PG_jdirty) || add_run(j, p))
		return false;
	page_set(p, PG_jdirty);
	jtab_put(&j->runset, p->index, 1);
	return true;
}

static void tx_undo(struct wbfs *w, struct wjournal *j, struct jtx *t)
{
	size_t i;

	for (i = 0; i < t->nr_pages; i++) {
		struct page *p = t->pages[i];

		page_clear(p, PG_jcommit);
		if (jtab_find(&j->ctab, p->index) && run_take_back(w, j, p))
			continue;
		page_put(p);
	}
	t->nr_pages = 0;
	for (i = 0; i < t->nrev; i++)
		if (!jtab_find(&j->runset, t->rev[i]))
			jtab_put(&j->revoke, t->rev[i], 1);
	jtab_clear(&j->ctab);
	/* what it freed stays busy */
	drain_busy_commit(w, j, mark_busy);
}

/* A failed journal write: nothing more is committed, nothing uncommitted reaches home. */
static int journal_abort(struct wbfs *w, struct wjournal *j, int err)
{
	if (!j->err) {
		__atomic_store_n(&j->err, err ? err : -EIO, __ATOMIC_RELAXED);
		jlog(w, "%s: %s; no more changes are committed (run e2fsck after unmount)",
		     "aborted", -j->err);
	}
	return j->err;
}

/*
 * Put libext2fs's in-memory metadata into the cache, as a commit needs
 * it: the primary superblock and descriptors only (the kernel leaves the
 * backups to resize and e2fsck). Context: fs_lock.
 */
static errcode_t flush_fs_locked(struct wbfs *w)
{
	int saved = w->fs->flags & EXT2_FLAG_MASTER_SB_ONLY;
	errcode_t err;

	w->fs->flags |= EXT2_FLAG_MASTER_SB_ONLY;
	err = wbfs_flush_locked(w);
	w->fs->flags = (w->fs->flags & ~EXT2_FLAG_MASTER_SB_ONLY) | saved;
	return err;
}

/*
 * A transaction larger than the whole log (a checkpoint has just emptied
 * it): its pages are copied, to be written home directly, not atomically
 * (said once). Nothing is left in the log to revoke. Context:
 * commit_mutex, fs_lock.
 */
static int tx_build_home(struct wbfs *w, struct wjournal *j, struct jtx *t)
{
	static bool said;
	size_t n = j->nr_run, i;

	if (!said) {
		said = true;
		fprintf(msg_stream(), "wbcfs: %s: journal: a transaction of %zu blocks exceeds the"
			" log (%u blocks); written without the journal\n", w->dev_path,
			n, j->log.last - j->log.first);
	}
	t->home = true;
	t->pages = calloc(n ? n : 1, sizeof(*t->pages));
	t->mem = jalloc(n * (size_t)JBS);
	if (!t->pages || !t->mem)
		return -ENOMEM;
	tx_take_pages(w, j, t);
	for (i = 0; i < t->nr_pages; i++)
		memcpy(t->mem + i * JBS, page_address(t->pages[i]), JBS);
	jtab_clear(&j->revoke);
	atomic_fetch_add(&j->unjournaled, (long)t->nr_pages);
	return 0;
}

/*
 * The running transaction becomes @t, for commit_write. Returns 0 (@t
 * built), 1 (nothing to commit) or -errno. Context: commit_mutex, fs_lock.
 */
static int commit_prepare_locked(struct wbfs *w, struct wjournal *j, struct jtx *t)
{
	uint32_t need;
	int ret;

	if (!w->fs || !j->on)
		return 1;
	/*
	 * New blocks whose data write failed: unwritten before they commit.
	 * Where that fails (no room to split an extent on a full disk) the
	 * commit goes on, as the kernel's ext4 commits them: refusing would
	 * also keep deletes, which make room, from committing.
	 */
	ret = wbfs_hide_pending(w) ? wbfs_hide_failed_locked(w) : 0;
	if (ret)
		jlog(w, "%s: %s; a crash before their writes succeed may show their old contents",
		     "cannot make the blocks of failed writes unwritten", -ret);
	if (flush_fs_locked(w))
		return journal_abort(w, j, -EIO);
	if (!j->nr_run && !j->revoke.n) {
		/* nothing changed: what was freed is freed on disk already,
		 * the running transaction's frees too (a free changes a
		 * bitmap, which joins it) */
		release_busy_commit(w, j);
		if (w->nr_busy)
			wbfs_bitmap_drain(w, w->busy, &w->busy_runs, wbfs_busy_unmark);
		w->nr_busy = 0;
		return 1;
	}
	need = jbd2_log_tx_blocks(&j->log, j->nr_run, j->revoke.n);
	/* a block stays free: a log filling the whole ring would run into
	 * its own start, which replay must then tell from a newer block */
	if (j->head + need >= j->log.last) {
		/* a failure leaves the log as it was: tried again next time */
		ret = checkpoint_locked(w, j);
		if (ret) {
			atomic_fetch_add(&j->failed, 1);
			jlog(w, "%s: %s; retried at the next commit", "checkpoint failed", -ret);
			return ret;
		}
	}
	ret = j->log.first + need >= j->log.last ? tx_build_home(w, j, t) : tx_build(w, j, t);
	if (ret)
		return journal_abort(w, j, ret);
	if (!t->home)
		__atomic_store_n(&j->seq, j->seq + 1, __ATOMIC_RELEASE);
	busy_to_commit(w, j);
	/* data writes mapped from here on belong to the next transaction:
	 * this one's commit does not wait for them */
	t->ord = bdi_ordered_mark(w->bdi);
	return 0;
}

/* @t's pages home (tx_build_home), then a flush. */
static int tx_write_home(struct wjournal *j, struct jtx *t)
{
	struct ckpt_io *c = ckpt_io_new(j->w);
	size_t i;
	int ret = c ? 0 : -ENOMEM;

	for (i = 0; i < t->nr_pages && !ret; i++)
		ret = ckpt_add(j, c, t->pages[i]->index, t->mem + i * JBS);
	if (!ret)
		ret = ckpt_flush_batch(j, c);
	ckpt_io_free(c);
	return ret ? ret : jbd2_log_flush(&j->log);
}

/*
 * The ordered-data wait of @t: the caller's own data writes (@io, which
 * only it completes) first, then everyone's.
 */
static void ordered_wait(struct wbfs *w, struct jtx *t, struct bdi_sync_io *io)
{
	while (io && bdi_sync_io_step(io))
		;
	bdi_ordered_wait(w->bdi, t->ord);
}

/*
 * A commit block that failed to write or to flush may be on the device
 * all the same. Its retry takes the same id and starts at the same log
 * block, maybe with other contents: a crash while it is being written
 * would let replay pair the old commit block with the new blocks (same
 * id, same place), whose checksums then fail. So the old one is zeroed,
 * durably, before the log is written again. Context: commit_mutex.
 */
static int commit_stale_clear(struct wjournal *j)
{
	char *b = j->zero;
	int ret;

	if (!j->stale_jb)
		return 0;
	ret = jbd2_log_write(&j->log, j->stale_jb, &b, 1);
	if (!ret)
		ret = jbd2_log_flush(&j->log);
	if (!ret)
		j->stale_jb = 0;
	return ret;
}

/*
 * After @t's log blocks and its data: the journal superblock when the log
 * starts with @t (or may read "empty"), a flush, and the commit block.
 * Context: commit_mutex.
 */
static int commit_seal(struct wjournal *j, struct jtx *t)
{
	uint32_t cb = t->start + t->nblk - 1;
	int ret = 0;

	if (j->empty || j->jsb_unsure) {
		/* the log starts here (or where it started: a superblock
		 * write that failed may have left "empty"): replay must find it */
		if (j->empty) {
			j->log.jsb->s_start = htobe32(t->start);
			j->log.jsb->s_sequence = htobe32(t->tid);
		}
		ret = jbd2_log_sb_write(&j->log);
	}
	if (!ret)
		ret = jbd2_log_flush(&j->log);
	if (ret)
		return ret;
	jbd2_log_commit_fill(&j->log, t->bufs[t->nblk - 1], t->tid);
	ret = jbd2_log_write_commit(&j->log, cb, t->bufs[t->nblk - 1]);
	if (ret)
		j->stale_jb = cb;
	else
		j->jsb_unsure = false;
	return ret;
}

/*
 * Write @t after the data its metadata points at (ordered mode): log
 * blocks, a flush, the commit block, a flush (or the commit block with FUA
 * where the device offers it: one round trip less per commit). The log
 * blocks go out while @t's data writes may still be in flight: only the
 * commit block must follow them (with the flush between), so the wait for
 * them overlaps the log writes. Home writes do wait first: they make the
 * metadata live. @io: the committing fsync's data writes, in flight.
 * Context: commit_mutex only.
 */
static int commit_write(struct wbfs *w, struct wjournal *j, struct jtx *t,
			struct bdi_sync_io *io)
{
	uint64_t t0 = clock_real_ns();
	int ret;

	/* before the log or home is written: either would outdate it */
	ret = commit_stale_clear(j);
	if (t->home) {
		ordered_wait(w, t, io);
		/* as below: its copies may map a failed write's block as
		 * written; and pages left to writeback would go home under
		 * the stale commit: back into the running transaction */
		if (ret || wbfs_hide_pending(w))
			return -EAGAIN;
		return tx_write_home(j, t);
	}
	if (!ret)
		ret = jbd2_log_write(&j->log, t->start, t->bufs, t->nblk - 1);
	phase_add(&j->ns_log, &t0);
	/* always: a failed @t is retried inside the next transaction, whose
	 * commit waits on the next epoch only */
	ordered_wait(w, t, io);
	phase_add(&j->ns_ordered, &t0);
	/* a data write it waited for failed on a new block, which @t may map
	 * as written: build it again with that block unwritten */
	if (!ret && wbfs_hide_pending(w))
		ret = -EAGAIN;
	if (!ret)
		ret = commit_seal(j, t);
	phase_add(&j->ns_seal, &t0);
	return ret;
}

/*
 * After commit_write returned @ret: the log's state, @t's pages and busy
 * blocks. A log write that failed leaves @t to be retried in the running
 * transaction; pages that failed to go home stay dirty for writeback.
 * Context: commit_mutex, fs_lock.
 */
static void commit_finish_locked(struct wbfs *w, struct wjournal *j, struct jtx *t, int ret)
{
	size_t i;

	if (ret && ret != -EAGAIN) {
		atomic_fetch_add(&j->failed, 1);
		jlog(w, t->home ? "%s: %s; its pages are left to writeback" :
			"%s: %s; the transaction stays in memory and is retried",
		     "commit failed", -ret);
	}
	if (t->home) {
		for (i = 0; i < t->nr_pages; i++) {
			struct page *p = t->pages[i];

			page_clear(p, PG_jcommit);
			/* built again: its pages go back into the running transaction */
			if (ret == -EAGAIN && run_take_back(w, j, p))
				continue;
			if (!ret)
				page_home(p);
			page_put(p);
		}
		t->nr_pages = 0;
		if (!ret)
			release_busy_commit(w, j);
		else
			drain_busy_commit(w, j, mark_busy);
		return;
	}
	if (ret) {
		tx_undo(w, j, t);
		/* the retry is this transaction again, and takes its id: a
		 * replay stops at the first gap in the ids, so a skipped one
		 * would leave every later commit out of it */
		__atomic_store_n(&j->seq, t->tid, __ATOMIC_RELEASE);
		return;
	}
	j->head = t->start + t->nblk;
	j->empty = false;
	__atomic_store_n(&j->committed, t->tid, __ATOMIC_RELEASE);
	__atomic_store_n(&j->have_committed, true, __ATOMIC_RELEASE);
	atomic_fetch_add(&j->commits, 1);
	/* the pages may go home now, with periodic writeback (a wakeup here
	 * would put their writes in front of the next fsync's) */
	tx_done(w, j, t);
}

uint32_t wbfs_journal_tid(struct wbfs *w)
{
	return w->journal ? __atomic_load_n(&w->journal->seq, __ATOMIC_ACQUIRE) : 0;
}

/* What a commit for @tid (@upto) or for the running transaction @cur must reach. */
static uint32_t commit_target(bool upto, uint32_t tid, uint32_t cur)
{
	return upto && !jbd2_tid_gt(tid, cur) ? tid : cur;
}

/*
 * Is @target on the device, @done being the last transaction committed?
 * Then *@flushed: that commit's flush followed the caller's data writes
 * only if @cur, running when the call began, has committed too.
 */
static bool tid_covered(uint32_t target, uint32_t cur, uint32_t done, bool *flushed)
{
	if (jbd2_tid_gt(target, done))
		return false;
	if (flushed)
		*flushed = !jbd2_tid_gt(cur, done);
	return true;
}

/*
 * Without commit_mutex: is transaction @tid on the device already (and the
 * journal not aborted)? Then *@flushed as journal_commit sets it. An fsync
 * of a file whose changes have all committed needs only a device flush,
 * and must not wait for a commit of other files' changes to find that
 * out (ext4's fsync does not wait for an unrelated commit either). A stale
 * reading only sends the caller the locked way.
 */
static bool committed_already(struct wjournal *j, uint32_t tid, bool *flushed)
{
	uint32_t cur;

	if (!__atomic_load_n(&j->have_committed, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&j->err, __ATOMIC_RELAXED))
		return false;
	cur = __atomic_load_n(&j->seq, __ATOMIC_ACQUIRE);
	return tid_covered(commit_target(true, tid, cur), cur,
			   __atomic_load_n(&j->committed, __ATOMIC_ACQUIRE), flushed);
}

/*
 * Commit the running transaction: build it, write it, settle the log.
 * One that a data write it waited for undid (-EAGAIN: the write failed
 * on a new block) is built again, with that block unwritten, once the
 * writes in flight (a retry of one of them may be) are done; at most
 * COMMIT_RETRIES times. Returns 0, 1 (nothing to commit) or -errno.
 * Context: commit_mutex only.
 */
static int commit_running(struct wbfs *w, struct wjournal *j, struct bdi_sync_io *io)
{
	unsigned tries;
	int ret;

	for (tries = 0;; tries++) {
		struct jtx t = { 0 };
		uint64_t t0 = clock_real_ns();

		wbfs_lock(w);
		ret = commit_prepare_locked(w, j, &t);
		wbfs_unlock(w);
		if (ret) {
			tx_free(&t);
			return ret;
		}
		phase_add(&j->ns_prepare, &t0);
		ret = commit_write(w, j, &t, io);
		t0 = clock_real_ns();
		wbfs_lock(w);
		commit_finish_locked(w, j, &t, ret);
		wbfs_unlock(w);
		tx_free(&t);
		phase_add(&j->ns_finish, &t0);
		if (ret != -EAGAIN)
			return ret;
		if (tries == COMMIT_RETRIES)
			return -EIO;
		bdi_ordered_wait(w->bdi, bdi_ordered_mark(w->bdi));
	}
}

/*
 * Commit transactions up to @tid (or the running one, @upto false) and
 * wait until they are on the device. *@flushed: the device cache was
 * flushed after every data write that completed before the call: true
 * when the commit that covers @tid was prepared after the call began.
 * @io: the caller's data writes still in flight (bdi_sync_inode_start),
 * or NULL; a commit prepared after the call began waits for them too.
 * Returns 0 or -errno. Context: no lock held.
 */
static int journal_commit(struct wbfs *w, bool upto, uint32_t tid, bool *flushed,
			  struct bdi_sync_io *io)
{
	struct wjournal *j = w->journal;
	uint32_t target, cur;
	int ret;

	if (flushed)
		*flushed = false;
	if (!j)
		return 0;
	if (upto && committed_already(j, tid, flushed))
		return 0;
	/* every change made before this call is in this transaction or an older one */
	wbfs_lock(w);
	cur = j->seq;
	wbfs_unlock(w);
	target = commit_target(upto, tid, cur);
	/* its holder may be in an ordered wait for @io's writes */
	if (io)
		ls_mutex_lock_stepping(&j->commit_mutex, &lc_journal_commit, bdi_sync_io_step, io);
	else
		ls_mutex_lock(&j->commit_mutex, &lc_journal_commit);
	if (j->err) {
		ret = j->err;
		goto out;
	}
	/* committed already, or group commit: another caller committed it
	 * while we waited */
	if (j->have_committed && tid_covered(target, cur, j->committed, flushed)) {
		atomic_fetch_add(&j->joined, 1);
		ret = 0;
		goto out;
	}
	ret = commit_running(w, j, io);
	if (ret > 0)
		ret = 0;	/* nothing to commit */
	else if (!ret && flushed)
		*flushed = true;
out:
	ls_mutex_unlock(&j->commit_mutex);
	return ret;
}

int wbfs_journal_commit(struct wbfs *w, bool *flushed)
{
	return journal_commit(w, false, 0, flushed, NULL);
}

int wbfs_journal_commit_tid(struct wbfs *w, uint32_t tid, bool *flushed,
			    struct bdi_sync_io *io)
{
	return journal_commit(w, true, tid, flushed, io);
}

/* ---- the commit thread ------------------------------------------------ */

static void *journal_thread(void *arg)
{
	struct wbfs *w = arg;
	struct wjournal *j = w->journal;

	ls_mutex_lock(&j->tlock, &lc_journal_tlock);
	while (!j->stop) {
		struct timespec ts;

		if (!j->kick) {
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += j->commit_ms / 1000;
			ts.tv_nsec += (long)(j->commit_ms % 1000) * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			lockstat_cond_timedwait(&j->tcond, &j->tlock, &ts);
		}
		if (j->stop)
			break;
		j->kick = false;
		ls_mutex_unlock(&j->tlock);
		wbfs_journal_commit(w, NULL);
		ls_mutex_lock(&j->tlock, &lc_journal_tlock);
	}
	ls_mutex_unlock(&j->tlock);
	return NULL;
}

/* ---- mount and unmount ------------------------------------------------ */

/*
 * Load the journal of a read-write mount (after any recovery: the log
 * must be empty) and set up its features as the kernel's ext4 does: 64bit
 * tags with 64bit, checksums v3 with metadata_csum. Returns 0 (also for a
 * filesystem without a journal) or -errno after a one-line message.
 * Context: mount, before anything is served.
 */
int wbfs_journal_load(struct wbfs *w, const char *dev)
{
	ext2_filsys fs = w->fs;
	struct wjournal *j;
	struct ext2_inode_large in;
	uint32_t maxlen, incompat, nfc = 0;
	ssize_t r;
	int ret = -EUCLEAN;

	if (w->ro || !ext2fs_has_feature_journal(fs->super))
		return 0;
	if (!fs->super->s_journal_inum) {
		fprintf(msg_stream(), "wbcfs: %s: the journal is on another device (external journal),"
			" which wbcfs cannot write; mount with -o ro\n", dev);
		return -EOPNOTSUPP;
	}
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->w = w;
	j->log.fd = w->dev_fd;
	j->log.ops = &jlog_ops;
	j->log.priv = w;
	j->log.jsb = jalloc(JBS);
	j->zero = jalloc(JBS);
	if (!j->log.jsb || !j->zero)
		goto nomem;
	memset(j->zero, 0, JBS);
	if (ext2fs_read_inode_full(fs, fs->super->s_journal_inum, (struct ext2_inode *)&in,
				   sizeof(in))) {
		fprintf(msg_stream(), "wbcfs: %s: cannot read the journal inode; run e2fsck\n", dev);
		goto fail;
	}
	maxlen = (uint32_t)(EXT2_I_SIZE(&in) / JBS);
	if (maxlen < JBD2_MIN_LOG_BLOCKS ||
	    jrec_journal_map(fs, fs->super->s_journal_inum, maxlen, &j->log.map)) {
		fprintf(msg_stream(), "wbcfs: %s: the journal inode maps its blocks badly; run e2fsck\n",
			dev);
		goto fail;
	}
	r = blk_pread(w->dev_fd, j->log.jsb, JBS, jbd2_log_off(&j->log, 0));
	if (r != (ssize_t)JBS) {
		fprintf(msg_stream(), "wbcfs: %s: cannot read the journal superblock\n", dev);
		ret = -EIO;
		goto fail;
	}
	incompat = be32toh(j->log.jsb->s_feature_incompat);
	if (j->log.jsb->s_header.h_magic != htobe32(JBD2_MAGIC) ||
	    be32toh(j->log.jsb->s_header.h_blocktype) != JBD2_SUPERBLOCK_V2 ||
	    be32toh(j->log.jsb->s_blocksize) != JBS || be32toh(j->log.jsb->s_maxlen) > maxlen ||
	    be32toh(j->log.jsb->s_maxlen) < JBD2_MIN_LOG_BLOCKS || be32toh(j->log.jsb->s_first) == 0 ||
	    be32toh(j->log.jsb->s_first) >= be32toh(j->log.jsb->s_maxlen)) {
		fprintf(msg_stream(), "wbcfs: %s: the journal superblock is not a valid jbd2 v2"
			" superblock; run e2fsck\n", dev);
		goto fail;
	}
	if (incompat & ~(JBD2_KNOWN_INCOMPAT | JBD2_FEATURE_INCOMPAT_FAST_COMMIT)) {
		fprintf(msg_stream(), "wbcfs: %s: the journal has unknown features (0x%x); run e2fsck\n",
			dev, incompat & ~JBD2_KNOWN_INCOMPAT);
		goto fail;
	}
	if (j->log.jsb->s_start) {
		fprintf(msg_stream(), "wbcfs: %s: the journal holds transactions not replayed;"
			" run e2fsck\n", dev);
		goto fail;
	}
	if (be32toh(j->log.jsb->s_nr_users) > 1) {
		fprintf(msg_stream(), "wbcfs: %s: the journal is shared by %u filesystems; run e2fsck\n",
			dev, be32toh(j->log.jsb->s_nr_users));
		goto fail;
	}
	maxlen = be32toh(j->log.jsb->s_maxlen);
	if (incompat & JBD2_FEATURE_INCOMPAT_FAST_COMMIT) {
		/* the fast-commit area ends the journal; wbcfs never writes it */
		nfc = be32toh(j->log.jsb->s_num_fc_blks) ? be32toh(j->log.jsb->s_num_fc_blks) : 256;
		if (nfc >= maxlen - be32toh(j->log.jsb->s_first) - JBD2_MIN_LOG_BLOCKS / 2)
			nfc = 0;
	}
	j->log.first = be32toh(j->log.jsb->s_first);
	j->log.last = maxlen - nfc;

	/* features, as the kernel's ext4 sets them at mount */
	incompat &= ~(JBD2_FEATURE_INCOMPAT_CSUM_V2 | JBD2_FEATURE_INCOMPAT_CSUM_V3 |
		      JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT);
	incompat |= JBD2_FEATURE_INCOMPAT_REVOKE;
	if (ext2fs_has_feature_64bit(fs->super))
		incompat |= JBD2_FEATURE_INCOMPAT_64BIT;
	if (ext2fs_has_feature_metadata_csum(fs->super)) {
		incompat |= JBD2_FEATURE_INCOMPAT_CSUM_V3;
		j->log.jsb->s_checksum_type = JBD2_CRC32C_CHKSUM;
	}
	j->log.jsb->s_feature_compat &= htobe32(~(uint32_t)JBD2_FEATURE_COMPAT_CHECKSUM);
	j->log.jsb->s_feature_incompat = htobe32(incompat);
	j->log.csum3 = incompat & JBD2_FEATURE_INCOMPAT_CSUM_V3;
	j->log.csum2 = false;
	j->log.is64 = incompat & JBD2_FEATURE_INCOMPAT_64BIT;
	j->log.tag_bytes = jbd2_tag_bytes(j->log.jsb);
	j->log.seed = jbd2_csum_seed(j->log.jsb);
	j->seq = be32toh(j->log.jsb->s_sequence);
	j->head = j->log.first;
	j->empty = true;
	j->max_tx = (j->log.last - j->log.first) / 4;
	j->commit_ms = w->opts.commit_s ? w->opts.commit_s * 1000 : 5000;
	ret = jbd2_log_sb_write(&j->log);
	if (!ret)
		ret = jbd2_log_flush(&j->log);
	if (ret) {
		fprintf(msg_stream(), "wbcfs: %s: cannot write the journal superblock: %s\n", dev,
			strerror(-ret));
		goto fail;
	}
	if (ext2fs_allocate_block_bitmap(fs, "committing busy blocks", &j->busy_commit))
		goto nomem;
	pthread_mutex_init(&j->commit_mutex, NULL);
	pthread_mutex_init(&j->tlock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&j->tcond, &ca);
		pthread_condattr_destroy(&ca);
	}
	w->journal = j;
	return 0;
nomem:
	ret = -ENOMEM;
	fprintf(msg_stream(), "wbcfs: %s: journal: out of memory\n", dev);
fail:
	free(j->log.map);
	free(j->log.jsb);
	free(j->zero);
	free(j);
	return ret;
}

/* From now on metadata changes are journaled. Context: mount, fs_lock not held. */
int wbfs_journal_start(struct wbfs *w)
{
	struct wjournal *j = w->journal;

	if (!j)
		return 0;
	wbfs_lock(w);
	j->on = true;
	wbfs_unlock(w);
	if (pthread_create(&j->thread, NULL, journal_thread, w))
		return -EAGAIN;
	j->thread_started = true;
	return 0;
}

static void stop_thread(struct wjournal *j)
{
	if (!j->thread_started)
		return;
	ls_mutex_lock(&j->tlock, &lc_journal_tlock);
	j->stop = true;
	pthread_cond_signal(&j->tcond);
	ls_mutex_unlock(&j->tlock);
	pthread_join(j->thread, NULL);
	j->thread_started = false;
}

/*
 * Unmount: commit what is left, checkpoint, mark the log empty, and stop
 * journaling (what libext2fs writes while closing goes home directly).
 * Returns 0 when the log is empty on disk: the caller may clear
 * needs_recovery. Context: no lock held; nothing else changes metadata.
 */
int wbfs_journal_shutdown(struct wbfs *w)
{
	struct wjournal *j = w->journal;
	int ret;

	if (!j)
		return 0;
	stop_thread(j);
	ret = wbfs_journal_commit(w, NULL);
	ls_mutex_lock(&j->commit_mutex, &lc_journal_commit);
	wbfs_lock(w);
	if (!ret && !j->err)
		ret = checkpoint_locked(w, j);
	if (!ret)
		ret = j->err;
	if (!ret) {
		j->on = false;
	} else {
		/* leave every uncommitted change out: the log and the home
		 * blocks stay as the last commit left them */
		journal_abort(w, j, ret);
	}
	wbfs_unlock(w);
	ls_mutex_unlock(&j->commit_mutex);
	return ret;
}

/* Drop what is left after shutdown (pinned pages of an aborted journal). */
void wbfs_journal_free(struct wbfs *w)
{
	struct wjournal *j = w->journal;
	size_t i;

	if (!j)
		return;
	stop_thread(j);
	for (i = 0; i < j->nr_run; i++) {
		page_clear(j->run[i], PG_jdirty);
		page_put(j->run[i]);
	}
	free(j->run);
	jtab_free(&j->runset);
	jtab_free(&j->revoke);
	jtab_free(&j->logged);
	jtab_free(&j->ctab);
	if (j->busy_commit)
		ext2fs_free_block_bitmap(j->busy_commit);
	wbfs_bm_runs_free(&j->busy_commit_runs);
	free(j->log.map);
	free(j->log.jsb);
	free(j->zero);
	pthread_mutex_destroy(&j->commit_mutex);
	pthread_mutex_destroy(&j->tlock);
	pthread_cond_destroy(&j->tcond);
	free(j);
	w->journal = NULL;
}

bool wbfs_journal_on(const struct wbfs *w)
{
	return w->journal && !w->journal->err;
}

bool wbfs_journal_aborted(const struct wbfs *w)
{
	return w->journal && w->journal->err;
}

/* /.wbcfs/journal */
int wbfs_journal_show(struct wbfs *w, char *buf, size_t len)
{
	struct wjournal *j = w->journal;
	uint64_t n;

	if (!j)
		return snprintf(buf, len, "journal 0\n");
	n = (uint64_t)atomic_load(&j->commits);
	n = n ? n : 1;
	return snprintf(buf, len,
			"journal 1\ncommit_ms %u\nlog_blocks %u\nhead %u\nmax_transaction %u\n"
			"csum_v3 %d\n64bit %d\ncommits %ld\nblocks_logged %ld\nrevokes %ld\n"
			"checkpoints %ld\nunjournaled %ld\nfailed %ld\naborted %d\ncrc32c_hw %d\n"
			"unwritten_after_error %ld\njoined %ld\n"
			"commit_prepare_us %lu\ncommit_log_us %lu\ncommit_ordered_us %lu\n"
			"commit_seal_us %lu\ncommit_finish_us %lu\n",
			j->commit_ms, j->log.last - j->log.first, j->head, j->max_tx, j->log.csum3,
			j->log.is64,
			atomic_load(&j->commits), atomic_load(&j->blocks),
			atomic_load(&j->revokes), atomic_load(&j->checkpoints),
			atomic_load(&j->unjournaled), atomic_load(&j->failed), j->err,
			wbfs_crc32c_is_hw(), atomic_load(&w->nr_hidden), atomic_load(&j->joined),
			(unsigned long)(atomic_load(&j->ns_prepare) / 1000 / n),
			(unsigned long)(atomic_load(&j->ns_log) / 1000 / n),
			(unsigned long)(atomic_load(&j->ns_ordered) / 1000 / n),
			(unsigned long)(atomic_load(&j->ns_seal) / 1000 / n),
			(unsigned long)(atomic_load(&j->ns_finish) / 1000 / n));
}
