// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Flusher workers (fs/fs-writeback.c's design, doc/algorithms.md §3): queued
 * work first (sync, fsync, metadata), then background writeback while over
 * the background threshold or when reclaim asks, then periodic (kupdate)
 * writeback of inodes dirtied more than dirty_expire_centisecs ago. Inodes
 * move b_dirty -> b_io -> b_more_io; each gets a chunk of about half a
 * second of device bandwidth; sync tags TOWRITE first so it cannot
 * livelock. Pages are mapped by the owner (delayed allocation), merged
 * into large physically contiguous writes and submitted through the
 * worker's own io engine. The metadata inode is written only after every
 * data write in flight has completed (ordered mode); a background or
 * periodic pass gives it its turn once per round over b_io, as the
 * kernel's rotation reaches the block device inode (wb_meta_turn).
 *
 * Where I/O runs: background, periodic and sync(fs) writeback run on a
 * flusher worker (bdi_sync and bdi_sync_meta queue a work item and sleep
 * on its completion). fsync writes its file in the caller's thread, as
 * the kernel's fsync does (filemap_write_and_wait_range): fsyncs of
 * different files then overlap instead of queueing behind each other on
 * the worker. The caller borrows a writeback context (engine and batch)
 * from the bdi's free list for the call and drains it before giving it
 * back, so each io engine still has one owning thread at a time.
 *
 * Lock ordering:
 *   page lock (pages of one batch, ascending index)
 *     owner locks taken in bdi_ops (fs lock)
 *   bdi->lock is never held while sleeping on a page or calling bdi_ops;
 *   bdi->bw_lock is a leaf (completion path).
 *
 * No sleeping on others with completions of our own pending: a write this
 * worker has queued ends (PG_writeback cleared, page freeable) only when
 * this worker reaps it, and the thread we would wait for (an owner holding
 * the fs lock while it allocates a page, another worker waiting on
 * I_SYNC) may be waiting for exactly that. So the worker drains its engine
 * before every sleep that others can prolong: a contended page lock, a page
 * under writeback, map_pages/write_inode/sync_fs (owner locks), I_SYNC and
 * the bdi-wide inflight wait (wb_drain_before_sleep()).
 *
 * Write errors: a page whose write fails is redirtied before its
 * writeback ends (never clean in between), the error goes on the mapping
 * (each opener's errseq cursor reports it at its next fsync or close) and
 * on the inode's error count (bdi_sync_inode), and background and
 * periodic writeback leave the inode alone for a backoff that doubles
 * from WB_BACKOFF_MIN_MS to WB_BACKOFF_MAX_MS, so a dead device does not
 * spin the flusher. Sync and fsync always try again. What still cannot be
 * written at unmount is the owner's to report as lost.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wbcfs/lib/clock.h"
#include "wbcfs/cache/dirty.h"
#include "bdi_i.h"

#define CHUNK_MIN_PAGES 1024	/* 4 MiB */

static void wb_work_error(struct wb_work *w, int err)
{
	if (err && !w->ret)
		w->ret = err;
}

/* ---- inodes and lists ------------------------------------------------------ */

static void redirty_tail(struct bdi *b, struct wb_inode *wi)
{
	if (!list_empty(&b->b_dirty)) {
		struct wb_inode *head = list_first_entry(&b->b_dirty, struct wb_inode, io_list);

		if (wi->dirtied_when < head->dirtied_when)
			wi->dirtied_when = clock_now_ms();
	}
	list_move(&wi->io_list, &b->b_dirty);
}

/* Context: b->lock held. */
static void requeue_inode(struct bdi *b, struct wb_inode *wi, bool sync, bool slice_used)
{
	if (wi->state & I_FREEING) {
		list_del_init(&wi->io_list);
		return;
	}
	if (sync)
		wi->dirtied_when = clock_now_ms();
	if (wi->state & I_DIRTY_PAGES) {
		if (!sync && slice_used)
			list_move_tail(&wi->io_list, &b->b_more_io);
		else
			redirty_tail(b, wi);
	} else if (wi->state & I_DIRTY_INODE) {
		redirty_tail(b, wi);
	} else {
		list_del_init(&wi->io_list);
	}
}

/*
 * Wait for another worker to finish with @wi.
 * Context: b->lock held; dropped (to drain our engine) and retaken inside.
 */
static void wb_wait_isync_locked(struct wb_ctx *x, struct wb_inode *wi)
{
	struct bdi *b = x->b;

	lock_assert_held(&b->lock);

	while (wi->state & I_SYNC) {
		if (x->eng->inflight) {
			/* completions take b->lock: never reap while holding it */
			ls_mutex_unlock(&b->lock);
			wb_drain_before_sleep(x);
			ls_mutex_lock(&b->lock, &lc_bdi_lock);
			continue;
		}
		lockstat_cond_wait(&b->done_cond, &b->lock);
	}
}

/* Wait until every data write of the bdi has completed. Context: no lock held. */
static void wb_wait_inflight(struct wb_ctx *x)
{
	struct bdi *b = x->b;

	wb_drain_before_sleep(x);
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	while (atomic_load(&b->inflight) > 0)
		lockstat_cond_wait(&b->done_cond, &b->lock);
	ls_mutex_unlock(&b->lock);
}

/*
 * writeback_single_inode: write @wi's pages (and its inode when dirty).
 * Context: b->lock held on entry and exit; dropped inside. @wi must not be
 * under I_SYNC. Returns pages written.
 */
static long wb_single_inode(struct wb_ctx *x, struct wb_inode *wi, struct wb_work *w, long budget)
{
	struct bdi *b = x->b;
	bool sync = w->sync_mode == WB_SYNC_ALL;
	uint64_t start = w->kind == WORK_INODE ? w->start : 0;
	uint64_t end = w->kind == WORK_INODE ? w->end : UINT64_MAX;
	bool dirty_inode;
	long written;
	int ret = 0;

	wi->state |= I_SYNC;
	dirty_inode = wi->state & I_DIRTY_INODE;
	wi->state &= ~(I_DIRTY_PAGES | I_DIRTY_INODE);
	ls_mutex_unlock(&b->lock);

	written = wb_write_pages(x, wi, sync, start, end, budget);
	if (!w->nowait) {
		if (sync || dirty_inode)
			wb_drain_before_sleep(x);
		if (sync)
			mapping_wait_writeback(wi->mapping, start, end);
	}
	/* the inode after its pages: its size may only cover written data */
	if (dirty_inode && !wi->is_meta && b->ops->write_inode)
		ret = b->ops->write_inode(b, wi, w->sync_mode);

	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	wb_work_error(w, ret);
	if (ret)
		wi->state |= I_DIRTY_INODE;
	wi->state &= ~I_SYNC;
	if (atomic_load(&wi->mapping->nrdirty) > 0)
		wi->state |= I_DIRTY_PAGES;
	else
		wi->backoff_ms = 0;	/* all written: a new error starts afresh */
	if (!wi->is_meta)
		requeue_inode(b, wi, sync, written >= budget);
	pthread_cond_broadcast(&b->done_cond);
	return written;
}

/* queue_io: b_more_io, then inodes dirtied at or before @before, to b_io. */
static void queue_io(struct bdi *b, uint64_t before)
{
	list_splice_init(&b->b_more_io, &b->b_io);
	while (!list_empty(&b->b_dirty)) {
		struct wb_inode *wi = list_last_entry(&b->b_dirty, struct wb_inode, io_list);

		if (wi->dirtied_when > before)
			break;
		list_move(&wi->io_list, &b->b_io);
	}
}

/* About half a second of device time, in 4 MiB multiples (at least 4 MiB). */
static long wb_chunk(struct bdi *b, long nr)
{
	unsigned long bg, thresh;
	long chunk = atomic_load(&b->stats.avg_write_bw) / 2;

	dirty_thresholds(b->cache, &bg, &thresh);
	if ((long)(thresh / 8) < chunk)
		chunk = (long)(thresh / 8);
	if (nr < chunk)
		chunk = nr;
	if (chunk < 0)
		chunk = 0;	/* never a negative budget: it would write nothing */
	return (chunk + CHUNK_MIN_PAGES) / CHUNK_MIN_PAGES * CHUNK_MIN_PAGES;
}

/*
 * wb_over_bg_thresh: the domain's dirty pages over bg_thresh, or this
 * device's over its share of it: in a domain of several devices a device
 * whose own dirty pages exceed its share keeps writing although the domain
 * as a whole is under, and a strictlimit device stays under its own limit.
 * A device alone in its cache has the whole share, and the first test
 * says it all (a fresh device has no completions, hence no share, yet).
 */
bool wb_over_bg(struct bdi *b)
{
	unsigned long wb_thresh, wb_bg, thresh, bg;

	if (dirty_over_background(b->cache))
		return true;
	if (!atomic_load(&b->tw.strictlimit) && atomic_load(&b->tw.dom->nr_wbs) < 2)
		return false;
	throttle_wb_thresholds(&b->tw, &wb_thresh, &wb_bg, &thresh, &bg);
	return atomic_load(&b->stats.reclaimable) > (long)wb_bg;
}

/* Should a SYNC_NONE pass stop? Context: b->lock held. */
static bool wb_should_stop(struct bdi *b, struct wb_work *w)
{
	if (b->stopping && w->sync_mode == WB_SYNC_NONE)
		return true;
	if (w->sync_mode == WB_SYNC_ALL)
		return false;
	if (w->nr_pages <= 0)
		return true;
	if (w->reason == WB_REASON_BACKGROUND && !wb_over_bg(b))
		return true;
	/* queued work goes first, but not before a sync, nor before a
	 * dirtier's own writeback (it is not this worker's to yield) */
	return w->reason != WB_REASON_SYNC && w->reason != WB_REASON_DIRTIER &&
	       !list_empty(&b->work_list);
}

/* The dirtied_when cutoff of a round (doc/algorithms.md §3.3). */
static uint64_t wb_cutoff(struct bdi *b, struct wb_work *w, uint64_t started)
{
	uint64_t now = clock_now_ms();
	uint64_t expire = atomic_load(&b->cache->tun.dirty_expire_centisecs) * 10ULL;

	if (w->reason == WB_REASON_PERIODIC)
		return now > expire ? now - expire : 0;
	/* sync: only inodes dirtied before the request, so it cannot livelock */
	return w->sync_mode == WB_SYNC_ALL ? started : now;
}

/*
 * writeback_sb_inodes: write the inode at the tail of b_io. An inode
 * another worker is writing is waited for (SYNC_ALL) or requeued to
 * b_more_io (SYNC_NONE). Returns pages written.
 * Context: b->lock held; dropped inside.
 */
static long wb_io_tail(struct wb_ctx *x, struct wb_work *w)
{
	struct bdi *b = x->b;
	struct wb_inode *wi = list_last_entry(&b->b_io, struct wb_inode, io_list);
	long chunk;

	/* after a failed write, only sync and fsync try before the backoff ends */
	if (w->sync_mode == WB_SYNC_NONE && wi->retry_after_ms &&
	    wi->retry_after_ms > clock_now_ms()) {
		list_move(&wi->io_list, &b->b_more_io);
		return 0;
	}
	if (wi->state & I_SYNC) {
		if (w->sync_mode == WB_SYNC_NONE) {
			list_move(&wi->io_list, &b->b_more_io);
			return 0;
		}
		wb_wait_isync_locked(x, wi);
		return 0;	/* the list may have changed meanwhile: look again */
	}
	/*
	 * A pool round's MAX_WRITEBACK_PAGES are shared by its inodes, as
	 * nr_to_write was before chunks were sized by bandwidth (3.1).
	 */
	if (w->sync_mode == WB_SYNC_ALL)
		chunk = LONG_MAX;
	else if (w->nonblocking)
		chunk = w->nr_pages;
	else
		chunk = wb_chunk(b, w->nr_pages);
	return wb_single_inode(x, wi, w, chunk);
}

/*
 * Write the metadata inode: after every data write in flight has
 * completed, so metadata never points at data that is not on disk.
 */
static void wb_write_meta(struct wb_ctx *x, struct wb_work *w)
{
	struct bdi *b = x->b;
	struct wb_inode *meta = b->meta;

	if (!meta)
		return;
	wb_wait_inflight(x);
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	wb_wait_isync_locked(x, meta);
	if (meta->state & I_DIRTY_PAGES || w->sync_mode == WB_SYNC_ALL)
		wb_single_inode(x, meta, w, LONG_MAX);
	if (!(meta->state & I_DIRTY_PAGES))
		meta->dirtied_when = 0;
	ls_mutex_unlock(&b->lock);
	if (w->sync_mode == WB_SYNC_ALL)
		wb_wait_inflight(x);
}

/*
 * The metadata inode has dirty pages and is not backing off after a failed
 * write. Context: b->lock.
 */
static bool wb_meta_ready_locked(const struct wb_inode *meta)
{
	lock_assert_held(&meta->bdi->lock);

	return (meta->state & I_DIRTY_PAGES) && clock_now_ms() >= meta->retry_after_ms;
}

/*
 * The owner's held metadata pages that have expired become writable
 * (bdi_ops.meta_expire), in a periodic pass: expiry is its business.
 * Their age is their own, not the metadata inode's, which other pages
 * keep young: true when some were released, and the pass writes them
 * now. Context: no lock held.
 */
static bool wb_meta_expire(struct wb_ctx *x, uint64_t expire_ms)
{
	struct bdi *b = x->b;

	if (!b->meta || !b->ops->meta_expire)
		return false;
	wb_drain_before_sleep(x);	/* the owner's locks */
	return b->ops->meta_expire(b, expire_ms) > 0;
}

/* Metadata due for writing in a background or periodic round? */
static bool wb_meta_due(struct wb_ctx *x, struct wb_work *w)
{
	struct bdi *b = x->b;
	struct wb_inode *meta = b->meta;
	uint64_t expire = atomic_load(&b->cache->tun.dirty_expire_centisecs) * 10ULL;
	bool due, released;

	if (!meta)
		return false;
	released = w->reason == WB_REASON_PERIODIC && wb_meta_expire(x, expire);
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	due = wb_meta_ready_locked(meta) &&
	      (w->reason != WB_REASON_PERIODIC || released ||
	       clock_now_ms() - meta->dirtied_when >= expire || wb_over_bg(b));
	ls_mutex_unlock(&b->lock);
	return due;
}

/*
 * The metadata inode's turn in a background or periodic pass: in the
 * kernel it is one of the dirty inodes (the block device's), written when
 * the rotation reaches it. A pass that keeps finding data over the
 * background threshold never ends, so metadata written only at its end
 * would stay dirty until a checkpoint or the unmount; instead it goes out
 * once per round over b_io, when it was dirtied before the round's cutoff
 * (for a periodic pass, the cutoff is the expiry: wb_meta_due's test) and
 * is not backing off after a failed write.
 * Context: b->lock held; dropped inside when it writes.
 */
static void wb_meta_turn(struct wb_ctx *x, struct wb_work *w, uint64_t cutoff)
{
	struct bdi *b = x->b;
	struct wb_inode *meta = b->meta;

	if (!meta || w->sync_mode != WB_SYNC_NONE ||
	    (w->reason != WB_REASON_BACKGROUND && w->reason != WB_REASON_PERIODIC))
		return;
	if (!wb_meta_ready_locked(meta) || meta->dirtied_when > cutoff)
		return;
	ls_mutex_unlock(&b->lock);
	wb_write_meta(x, w);
	atomic_fetch_add(&b->stats.meta_turns, 1);
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	/* dirtied again meanwhile: to the back of the rotation (redirty_tail) */
	if (meta->state & I_DIRTY_PAGES)
		meta->dirtied_when = clock_now_ms();
}

/*
 * wb_writeback: rounds of queue_io + writing b_io from the tail, until
 * the work is done or a whole round makes no progress (every inode busy
 * or its pages under writeback: the worker loop retries later, after
 * draining, rather than spinning here). Returns pages written.
 * Context: b->lock not held.
 */
static long wb_writeback(struct wb_ctx *x, struct wb_work *w)
{
	struct bdi *b = x->b;
	uint64_t started = clock_now_ms();
	long total = 0, round = 0;
	bool queued = false;

	wb_bw_start(b);
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	while (!wb_should_stop(b, w)) {
		long got;

		/* nonblocking (pool): a full queue sends the thread elsewhere */
		if (w->nonblocking && bdi_write_congested(b)) {
			w->encountered_congestion = true;
			break;
		}
		if (list_empty(&b->b_io)) {
			uint64_t cutoff = wb_cutoff(b, w, started);

			if (queued && !round)
				break;
			/* a round over b_io is done: the metadata's turn */
			if (queued)
				wb_meta_turn(x, w, cutoff);
			queue_io(b, cutoff);
			queued = true;
			round = 0;
			if (list_empty(&b->b_io))
				break;
		}
		got = wb_io_tail(x, w);
		/* reclaim never writes itself: pages it asked for count here */
		if (w->reason == WB_REASON_VMSCAN && got > 0)
			atomic_fetch_add(&b->cache->stats.nr_vmscan_write, got);
		w->nr_pages -= got;
		total += got;
		round += got;
	}
	w->more_io = !list_empty(&b->b_more_io);
	ls_mutex_unlock(&b->lock);
	return total;
}

/*
 * After a metadata pass: report metadata write errors recorded since the
 * last report (one bdi-wide cursor: the next sync, syncfs or fsync sees
 * each, whichever pass failed).
 */
static void wb_meta_error(struct bdi *b, struct wb_work *w)
{
	int err;

	if (!b->meta)
		return;
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	err = mapping_check_and_advance(b->meta->mapping, &b->meta_err_since);
	ls_mutex_unlock(&b->lock);
	wb_work_error(w, err);
}

/*
 * sync(2)/syncfs/umount: (1) data of every inode dirtied before now,
 * SYNC_ALL, with write_inode after each inode's pages, (2) wait for all
 * data writes of the bdi, (3) sync_fs, (4) the metadata, (5) the device
 * cache. Data write errors stay on their mappings for fsync; sync reports
 * them as -EIO.
 */
static void wb_run_sync(struct wb_ctx *x, struct wb_work *w)
{
	struct bdi *b = x->b;
	long errors = atomic_load(&b->stats.write_errors);

	wb_writeback(x, w);
	wb_wait_inflight(x);
	if (b->ops->sync_fs)
		wb_work_error(w, b->ops->sync_fs(b));
	wb_write_meta(x, w);
	wb_meta_error(b, w);
	wb_work_error(w, bdi_flush_device(b));
	if (atomic_load(&b->stats.write_errors) != errors)
		wb_work_error(w, -EIO);
}

static void wb_run_inode(struct wb_ctx *x, struct wb_work *w)
{
	struct bdi *b = x->b;
	struct wb_inode *wi = w->inode;

	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	wb_wait_isync_locked(x, wi);
	wb_single_inode(x, wi, w, LONG_MAX);
	ls_mutex_unlock(&b->lock);
}

static void wb_run_work(struct wb_ctx *x, struct wb_work *w)
{
	switch (w->kind) {
	case WORK_INODE:
		wb_run_inode(x, w);
		break;
	case WORK_META:
		wb_write_meta(x, w);
		wb_meta_error(x->b, w);
		break;
	case WORK_SYNC:
		wb_run_sync(x, w);
		break;
	case WORK_PAGES:
		wb_writeback(x, w);
		if (wb_meta_due(x, w))
			wb_write_meta(x, w);
		break;
	}
	if (!w->nowait)
		io_engine_drain(x->eng);
}

int bdi_queue_work_wait(struct bdi *b, struct wb_work *w)
{
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	list_add_tail(&w->list, &b->work_list);
	pthread_cond_signal(&b->work_cond);
	while (!w->done)
		lockstat_cond_wait(&b->done_cond, &b->lock);
	ls_mutex_unlock(&b->lock);
	return w->ret;
}

/* ---- the worker ------------------------------------------------------------- */

static void wb_timed_wait(struct bdi *b, long ms)
{
	clock_cond_wait_ms(&b->work_cond, &b->lock, ms);
}

/* Nothing dirty on the bdi's lists nor in its metadata. Context: b->lock held. */
static bool wb_all_clean_locked(struct bdi *b)
{
	lock_assert_held(&b->lock);

	return list_empty(&b->b_dirty) && list_empty(&b->b_io) && list_empty(&b->b_more_io) &&
	       !(b->meta && (b->meta->state & I_DIRTY_PAGES));
}

bool wb_has_dirty_io_locked(struct bdi *b)
{
	lock_assert_held(&b->lock);

	return !wb_all_clean_locked(b);
}

/* Background or reclaim-driven pass. Context: b->lock held; dropped inside. */
static long wb_do_background(struct wb_ctx *x)
{
	struct bdi *b = x->b;
	struct wb_work w = { .kind = WORK_PAGES, .sync_mode = WB_SYNC_NONE };
	long got;

	w.reason = b->vmscan_nr ? WB_REASON_VMSCAN : WB_REASON_BACKGROUND;
	w.nr_pages = b->vmscan_nr ? b->vmscan_nr : LONG_MAX;
	b->vmscan_nr = 0;
	if (!b->pool)
		b->bg_pending = false;	/* with a pool, the pool's to clear */
	ls_mutex_unlock(&b->lock);
	got = wb_writeback(x, &w);
	if (wb_meta_due(x, &w))
		wb_write_meta(x, &w);
	io_engine_drain(x->eng);
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	return got;
}

static void wb_do_kupdate(struct wb_ctx *x)
{
	struct bdi *b = x->b;
	struct wb_work w = { .kind = WORK_PAGES, .sync_mode = WB_SYNC_NONE,
			     .reason = WB_REASON_PERIODIC, .nr_pages = LONG_MAX };

	ls_mutex_unlock(&b->lock);
	wb_writeback(x, &w);
	if (wb_meta_due(x, &w))
		wb_write_meta(x, &w);
	io_engine_drain(x->eng);
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	/* rearmed by the next dirtying once nothing is left */
	if (wb_all_clean_locked(b))
		b->kupdate_armed = false;
}

static void wb_engine_init(struct wb_ctx *x, const char *name, enum io_engine_type engine,
			   unsigned queue_depth, bool fault_inject)
{
	int ret;

	x->eng = &x->own_eng;
	ret = io_engine_init(x->eng, engine, queue_depth);

	if (ret) {
		fprintf(stderr, "wbcfs: %s: io engine %s unavailable (%s); using psync\n",
			name, io_engine_name(engine), strerror(-ret));
		io_engine_init(x->eng, IO_ENGINE_PSYNC, queue_depth);
	}
	io_engine_set_fault_inject(x->eng, fault_inject);
}

/* Run the oldest queued work and complete it. Context: b->lock held; dropped inside. */
static void wb_do_queued(struct wb_ctx *x)
{
	struct bdi *b = x->b;
	struct wb_work *w = list_first_entry(&b->work_list, struct wb_work, list);

	list_del_init(&w->list);
	ls_mutex_unlock(&b->lock);
	wb_run_work(x, w);
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	w->done = true;
	pthread_cond_broadcast(&b->done_cond);
}

/*
 * One turn of the worker, in fs-writeback.c's order: queued work (FIFO),
 * reclaim's request, kupdate when dirty_writeback_centisecs (read live;
 * 0 = off) has passed, then background writeback while over the
 * background threshold; otherwise sleep until woken or the next tick
 * (at most 100 ms, so live tunable changes and thresholds are noticed).
 * Context: b->lock held; dropped inside.
 */
/*
 * Sleep until woken or @ms pass, after completing this worker's writes in
 * flight: their waiters (fsync, page writeback, the journal's ordered
 * barrier) must not wait for the next tick. Context: b->lock held.
 */
static void wb_idle(struct wb_ctx *x, long ms)
{
	if (x->eng->inflight) {
		/* completions take b->lock: never reap while holding it */
		ls_mutex_unlock(&x->b->lock);
		wb_drain_before_sleep(x);
		ls_mutex_lock(&x->b->lock, &lc_bdi_lock);
		return;		/* look for work again before sleeping */
	}
	wb_timed_wait(x->b, ms);
}

static void wb_worker_step(struct wb_ctx *x, uint64_t *last_kupdate)
{
	struct bdi *b = x->b;
	uint64_t interval = atomic_load(&b->cache->tun.dirty_writeback_centisecs) * 10ULL;
	uint64_t now = clock_now_ms();

	if (!b->kupdate_armed)
		*last_kupdate = now;	/* clean: the interval starts at the first dirtying */
	if (!list_empty(&b->work_list)) {
		wb_do_queued(x);
	} else if (b->vmscan_nr) {
		/* reclaim's request before periodic and background work
		 * (wb_check_start_all comes first in wb_do_writeback) */
		if (!wb_do_background(x))
			wb_idle(x, 10);
	} else if (b->pool) {
		/* background and periodic writeback are the pool's */
		wb_bw_feed(b);
		wb_idle(x, 100);
	} else if (interval && now - *last_kupdate >= interval) {
		*last_kupdate = now;
		wb_do_kupdate(x);
	} else if (b->vmscan_nr || b->bg_pending || wb_over_bg(b)) {
		if (!wb_do_background(x))
			wb_idle(x, 10);	/* nothing writable now: retry soon */
	} else {
		wb_bw_feed(b);	/* the idle tick: idle time does not count as device time */
		wb_idle(x, interval && interval < 100 ? (long)interval : 100);
	}
}

void *bdi_flusher_main(void *arg)
{
	struct wb_ctx *x = calloc(1, sizeof(*x));
	struct bdi *b = arg;
	uint64_t last_kupdate = clock_now_ms();

	if (!x) {
		fprintf(stderr, "wbcfs: %s: flusher: out of memory\n", b->name);
		return NULL;
	}
	x->b = b;
	wb_engine_init(x, b->name, b->engine, b->queue_depth, b->fault_inject);
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	while (!b->stopping || !list_empty(&b->work_list))
		wb_worker_step(x, &last_kupdate);
	ls_mutex_unlock(&b->lock);
	io_engine_drain(x->eng);
	io_engine_exit(x->eng);
	free(x);
	return NULL;
}

/* ---- fsync in the caller's thread ---------------------------------------- */

/*
 * At most this many fsyncs of one device write in their callers' threads
 * at once (each with a context of its own); more wait for the worker.
 */
#define WB_SYNC_CTX_MAX 32

/* A free fsync context of @b, made when none is free; NULL: use the worker. */
static struct wb_ctx *wb_sync_ctx_get(struct bdi *b)
{
	struct wb_ctx *x;

	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	x = b->sync_ctxs;
	if (x) {
		b->sync_ctxs = x->next_free;
	} else if (b->nr_sync_ctxs < WB_SYNC_CTX_MAX) {
		b->nr_sync_ctxs++;
		ls_mutex_unlock(&b->lock);
		x = calloc(1, sizeof(*x));
		if (x) {
			x->b = b;
			wb_engine_init(x, b->name, b->engine, b->queue_depth, b->fault_inject);
			return x;
		}
		ls_mutex_lock(&b->lock, &lc_bdi_lock);
		b->nr_sync_ctxs--;
	}
	ls_mutex_unlock(&b->lock);
	return x;
}

static void wb_sync_ctx_put(struct bdi *b, struct wb_ctx *x)
{
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	x->next_free = b->sync_ctxs;
	b->sync_ctxs = x;
	ls_mutex_unlock(&b->lock);
}

/*
 * fsync's writeback of @wi in the calling thread, with a context borrowed
 * from @b (the worker runs it, to the end, when none is to be had). With
 * @nowait the writes are left in flight on io->x; without, io->x is NULL
 * on return and only the error report is left for bdi_sync_inode_finish.
 */
static void sync_inode_begin(struct bdi *b, struct wb_inode *wi, uint64_t start, uint64_t end,
			     bool datasync, bool nowait, struct bdi_sync_io *io,
			     struct bdi_sync_io *owner)
{
	struct wb_work w = {
		.kind = WORK_INODE, .sync_mode = WB_SYNC_ALL, .reason = WB_REASON_FSYNC,
		.inode = wi, .start = start, .end = end, .datasync = datasync, .nowait = nowait,
	};

	*io = (struct bdi_sync_io){ .wi = wi, .start = start, .end = end,
				    .errors = atomic_load(&wi->nr_write_errors) };
	if (owner && owner->x) {
		io->x = owner->x;
		io->borrowed = true;
	} else {
		io->x = wb_sync_ctx_get(b);
	}
	if (!io->x) {
		w.nowait = false;
		io->ret = bdi_queue_work_wait(b, &w);
		return;
	}
	wb_run_work(io->x, &w);
	io->ret = w.ret;
	if (!nowait) {
		wb_sync_ctx_put(b, io->x);	/* drained: nothing left in flight */
		io->x = NULL;
	}
}

int bdi_sync_inode(struct bdi *b, struct wb_inode *wi, uint64_t start, uint64_t end,
		   bool datasync)
{
	struct bdi_sync_io io;

	sync_inode_begin(b, wi, start, end, datasync, false, &io, NULL);
	return bdi_sync_inode_finish(b, &io);
}

void bdi_sync_inode_start(struct bdi *b, struct wb_inode *wi, uint64_t start, uint64_t end,
			  bool datasync, struct bdi_sync_io *io)
{
	sync_inode_begin(b, wi, start, end, datasync, true, io, NULL);
}

void bdi_sync_inode_start_with(struct bdi *b, struct wb_inode *wi, uint64_t start,
			       uint64_t end, bool datasync, struct bdi_sync_io *io,
			       struct bdi_sync_io *owner)
{
	sync_inode_begin(b, wi, start, end, datasync, true, io, owner);
}

bool bdi_sync_io_step(void *arg)
{
	struct bdi_sync_io *io;

	for (io = arg; io; io = io->next)
		if (io->x && io->x->eng->inflight)
			return io_engine_reap(io->x->eng, 1) >= 0;
	return false;
}

int bdi_sync_inode_finish(struct bdi *b, struct bdi_sync_io *io)
{
	if (io->x) {
		io_engine_drain(io->x->eng);
		if (!io->borrowed)
			wb_sync_ctx_put(b, io->x);
		io->x = NULL;
		mapping_wait_writeback(io->wi->mapping, io->start, io->end);
	}
	if (atomic_load(&io->wi->nr_write_errors) != io->errors) {
		int err = mapping_check_error_since(io->wi->mapping, 0);	/* its errno */

		return err ? err : -EIO;
	}
	return io->ret;
}

void wb_sync_ctxs_free(struct bdi *b)
{
	struct wb_ctx *x;

	while ((x = b->sync_ctxs)) {
		b->sync_ctxs = x->next_free;
		io_engine_exit(x->eng);
		free(x);
	}
	b->nr_sync_ctxs = 0;
}

/* ---- pool threads (pdflush.c) ---------------------------------------------- */

struct wb_ctx *wb_pool_ctx_create(enum io_engine_type engine, unsigned queue_depth,
				  const char *name)
{
	struct wb_ctx *x = calloc(1, sizeof(*x));

	if (!x)
		return NULL;
	x->pool = true;
	/* NBD and RBD devices get an engine of their own (wb_pool_visit) */
	if (engine == IO_ENGINE_NBD || engine == IO_ENGINE_RBD)
		engine = IO_ENGINE_URING;
	/* requests carry inject_err only for a bdi created with fault_inject */
	wb_engine_init(x, name, engine, queue_depth, true);
	return x;
}

void wb_pool_ctx_destroy(struct wb_ctx *x)
{
	io_engine_drain(x->eng);
	io_engine_exit(x->eng);
	if (x->nbd_eng_ready)
		io_engine_exit(&x->nbd_eng);
	if (x->rbd_eng_ready)
		io_engine_exit(&x->rbd_eng);
	free(x);
}

long wb_pool_visit(struct wb_ctx *x, struct bdi *b, enum wb_reason why, long budget,
		   bool nonblocking, bool *congested, bool *more_io)
{
	struct wb_work w = { .kind = WORK_PAGES, .sync_mode = WB_SYNC_NONE, .reason = why,
			     .nr_pages = budget, .nonblocking = nonblocking };
	long got;

	if (b->engine == IO_ENGINE_NBD) {
		/* the pool's engine cannot reach an NBD device: its own can */
		if (!x->nbd_eng_ready) {
			if (io_engine_init(&x->nbd_eng, IO_ENGINE_NBD, x->own_eng.queue_depth))
				return 0;
			io_engine_set_fault_inject(&x->nbd_eng, true);
			x->nbd_eng_ready = true;
		}
		x->eng = &x->nbd_eng;
	} else if (b->engine == IO_ENGINE_RBD) {
		if (!x->rbd_eng_ready) {
			if (io_engine_init(&x->rbd_eng, IO_ENGINE_RBD, x->own_eng.queue_depth))
				return 0;
			io_engine_set_fault_inject(&x->rbd_eng, true);
			x->rbd_eng_ready = true;
		}
		x->eng = &x->rbd_eng;
	}
	x->b = b;
	if (why == WB_REASON_BACKGROUND) {
		ls_mutex_lock(&b->lock, &lc_bdi_lock);
		b->bg_pending = false;
		ls_mutex_unlock(&b->lock);
	}
	got = wb_writeback(x, &w);
	if (!w.encountered_congestion && wb_meta_due(x, &w))
		wb_write_meta(x, &w);
	/*
	 * Completions are the submitting thread's to reap, and @b may go
	 * away once no pool thread is inside it: leave nothing in flight.
	 * On a slow device this is the wait the pool pays for all devices.
	 */
	io_engine_drain(x->eng);
	x->eng = &x->own_eng;
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	if (why == WB_REASON_PERIODIC && wb_all_clean_locked(b))
		b->kupdate_armed = false;
	ls_mutex_unlock(&b->lock);
	x->b = NULL;
	*congested = w.encountered_congestion;
	*more_io = w.more_io;
	return got;
}

/* ---- the dirtier's own writeback (throttle=writeback) ------------------------- */

static pthread_key_t dirtier_key;
static pthread_once_t dirtier_once = PTHREAD_ONCE_INIT;

static void dirtier_ctx_free(void *x)
{
	wb_pool_ctx_destroy(x);
}

static void dirtier_key_init(void)
{
	pthread_key_create(&dirtier_key, dirtier_ctx_free);
}

/*
 * writeback_inodes() from balance_dirty_pages, before 3.2: the calling
 * thread writes up to @nr_pages of @b's inodes itself, any inode's, with
 * WB_SYNC_NONE, and blocks while the device's queue is full (as in
 * get_request_wait). Its engine is the thread's own, made at its first
 * call and freed when it exits. Returns pages written.
 */
long bdi_writeback_dirtier(struct bdi *b, long nr_pages)
{
	struct wb_ctx *x;
	bool congested, more_io;

	pthread_once(&dirtier_once, dirtier_key_init);
	x = pthread_getspecific(dirtier_key);
	if (!x) {
		x = wb_pool_ctx_create(b->engine, b->queue_depth, "dirtier");
		if (!x)
			return 0;
		if (pthread_setspecific(dirtier_key, x)) {
			wb_pool_ctx_destroy(x);
			return 0;
		}
	}
	return wb_pool_visit(x, b, WB_REASON_DIRTIER, nr_pages, false, &congested, &more_io);
}

/*
 * congestion_wait(WRITE, HZ/10) for @b: until a write completes that
 * leaves its queue with room, or @ms pass. A queue that is not full
 * wakes nobody: the wait is then the whole @ms, as it was.
 */
void bdi_congestion_wait(struct bdi *b, unsigned ms)
{
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	clock_cond_wait_ms(&b->done_cond, &b->lock, ms);
	ls_mutex_unlock(&b->lock);
}
