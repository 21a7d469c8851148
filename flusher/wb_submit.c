// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Writeback's page I/O: ordered-data epochs, building a batch (lock,
 * map, merge into contiguous runs), submitting it through the worker's
 * io engine, and completing it (end writeback, redirty on error, the
 * failure backoff). Apart from writeback.c because that file decides
 * what to write (works, inode lists, chunks, the metadata's turn) and
 * this one only how a range of one inode's pages reaches the device;
 * the locking rules and the drain-before-sleep rule at the head of
 * writeback.c hold here too.
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

#define WB_BACKOFF_MIN_MS 100	/* first retry after a failed write */
#define WB_BACKOFF_MAX_MS 30000	/* a permanent error: one retry per 30 s */
#define WB_ALLOC_RETRIES 8	/* alloc_waits for one batch before its pages
				 * are left dirty with ENOSPC */

/* One device write of physically contiguous pages. */
struct wb_io {
	struct io_req req;
	struct bdi *b;
	struct mapping *m;
	unsigned n;
	struct page **pages;
	struct iovec *iov;
	int ord;		/* ordered-data epoch parity; -1: metadata */
};

/* ---- ordered data --------------------------------------------------------- */

/*
 * A data batch takes a reference on the current epoch before its blocks
 * are mapped (allocated) and each of its writes holds one until it
 * completes. bdi_ordered_mark() closes the epoch (the journal does it as
 * it closes a transaction, under the lock that allocation takes) and
 * bdi_ordered_wait() then waits for every write whose blocks were
 * allocated before the mark, and for no later one. Marks must not
 * overlap: one mark, then its wait, then the next mark (the journal's
 * commit_mutex).
 */
static int ord_get(struct bdi *b)
{
	int e;

	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	e = (int)(b->ord_epoch & 1);
	b->ord_cnt[e]++;
	ls_mutex_unlock(&b->lock);
	return e;
}

static void ord_put(struct bdi *b, int e)
{
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	if (--b->ord_cnt[e] == 0)
		pthread_cond_broadcast(&b->done_cond);
	ls_mutex_unlock(&b->lock);
}

int bdi_ordered_mark(struct bdi *b)
{
	int old;

	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	old = (int)(b->ord_epoch & 1);
	b->ord_epoch++;
	ls_mutex_unlock(&b->lock);
	return old;
}

void bdi_ordered_wait(struct bdi *b, int mark)
{
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	while (b->ord_cnt[mark] > 0)
		lockstat_cond_wait(&b->done_cond, &b->lock);
	ls_mutex_unlock(&b->lock);
}

/* ---- completion ----------------------------------------------------------- */

void wb_bw_feed(struct bdi *b)
{
	bdi_bw_feed(b, clock_now_ms());
}

/* A writeback round starts: forget an idle gap (doc/algorithms.md §2.6). */
void wb_bw_start(struct bdi *b)
{
	ls_mutex_lock(&b->bw_lock, &lc_bdi_bw_lock);
	bdi_bw_start(&b->bw, clock_now_ms(), atomic_load(&b->stats.written),
		     atomic_load(&b->stats.writeback) == 0);
	ls_mutex_unlock(&b->bw_lock);
}

/*
 * A device write ends: when the device's queue drops below full, waiters
 * for room (pool threads inside it, done_cond) and congestion waiters of
 * the pool get a look.
 */
static void wb_inflight_ios_dec(struct bdi *b)
{
	if (atomic_fetch_sub(&b->inflight_ios, 1) != (long)b->queue_depth)
		return;
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	pthread_cond_broadcast(&b->done_cond);
	ls_mutex_unlock(&b->lock);
	if (b->pool)
		flusher_pool_uncongested(b->pool);
}

static void wb_inflight_sub(struct bdi *b, long n)
{
	if (atomic_fetch_sub(&b->inflight, n) == n) {
		ls_mutex_lock(&b->lock, &lc_bdi_lock);
		pthread_cond_broadcast(&b->done_cond);
		ls_mutex_unlock(&b->lock);
	}
}

/* End writeback of @p: written, failed (@err) or skipped (@err == 1). */
static void wb_page_end(struct bdi *b, struct page *p, int err)
{
	atomic_fetch_sub(&b->stats.writeback, 1);
	if (err < 0) {
		atomic_fetch_add(&b->stats.write_errors, 1);
	} else if (err == 0) {
		atomic_fetch_add(&b->stats.written, 1);
		page_clear(p, PG_newblock);	/* its block holds its data now */
	}
	/* our reference goes first: while PG_writeback is set the mapping keeps
	 * the page, and end_page_writeback may free a PG_reclaim page at once */
	page_put(p);
	end_page_writeback(p);
}

/*
 * The write of @p failed (@err < 0): keep its data dirty so that a later
 * writeback, or an fsync once the device works again, writes it, then end
 * its writeback. Redirtying first means the page is never clean in
 * between, so reclaim cannot drop it. The redirty is not a new dirtying.
 */
static void wb_page_fail(struct bdi *b, struct wb_inode *wi, struct page *p, int err)
{
	/* its block holds nothing of it: the owner keeps that out of commits */
	if (page_test(p, PG_newblock) && !wi->is_meta && b->ops->newblock_failed)
		b->ops->newblock_failed(b, wi, p->index);
	if (set_page_dirty(p))
		atomic_fetch_sub(&b->stats.dirtied, 1);
	wb_page_end(b, p, err);
}

/*
 * @n pages of @wi from @index failed to be written: count them, record
 * @err on the mapping, and (re)start the backoff. The delay doubles only
 * when a retry after the previous one failed, not for every write of the
 * same pass. The owner hears of the first failure after a success.
 */
static void wb_inode_failed(struct bdi *b, struct wb_inode *wi, uint64_t index, unsigned n,
			    int err)
{
	uint64_t now = clock_now_ms();
	bool first;

	atomic_fetch_add(&wi->nr_write_errors, n);
	mapping_set_error(wi->mapping, err);
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	first = !wi->backoff_ms;
	if (now >= wi->retry_after_ms) {
		wi->backoff_ms = wi->backoff_ms ? wi->backoff_ms * 2 : WB_BACKOFF_MIN_MS;
		if (wi->backoff_ms > WB_BACKOFF_MAX_MS)
			wi->backoff_ms = WB_BACKOFF_MAX_MS;
		wi->retry_after_ms = now + wi->backoff_ms;
	}
	ls_mutex_unlock(&b->lock);
	if (first && !wi->is_meta && b->ops->write_error)
		b->ops->write_error(b, wi, index, err);
}

/* fault_rate: does this write fail? (a per-thread generator, no lock) */
static bool wb_fault_roll(struct bdi *b)
{
	static _Thread_local unsigned seed;
	unsigned rate = atomic_load(&b->fault_rate);

	if (!rate)
		return false;
	if (!seed)
		seed = (unsigned)time(NULL) ^ (unsigned)(uintptr_t)&seed;
	return (unsigned)rand_r(&seed) % 1000 < rate;
}

static void wb_io_done(struct io_req *req, int res)
{
	struct wb_io *io = container_of(req, struct wb_io, req);
	struct wb_inode *wi = io->m->host;
	int err = 0;
	unsigned i;

	if (res < 0)
		err = res;
	else if ((size_t)res != (size_t)io->n * PAGE_SIZE)
		err = -EIO;
	if (err) {
		if (wi->is_meta)
			fprintf(stderr, "wbcfs: %s: metadata write of blocks %llu-%llu failed: %s;"
				" kept dirty\n", io->b->name,
				(unsigned long long)(req->off >> PAGE_SHIFT),
				(unsigned long long)(req->off >> PAGE_SHIFT) + io->n - 1,
				strerror(-err));
		wb_inode_failed(io->b, wi, io->pages[0]->index, io->n, err);
		for (i = 0; i < io->n; i++)
			wb_page_fail(io->b, wi, io->pages[i], err);
	} else {
		for (i = 0; i < io->n; i++) {
			if (wi->is_meta && io->b->ops->meta_written)
				io->b->ops->meta_written(io->b, io->pages[i]);
			wb_page_end(io->b, io->pages[i], 0);
		}
		throttle_wb_completed(&io->b->tw, io->n);
	}
	wb_inflight_sub(io->b, io->n);
	wb_inflight_ios_dec(io->b);
	wb_bw_feed(io->b);
	if (io->ord >= 0)
		ord_put(io->b, io->ord);
	free(io);
}

/* ---- submission ----------------------------------------------------------- */

/*
 * A pool thread about to write to a device whose queue is full waits for
 * room, as a pdflush thread slept in get_request_wait: this is where a
 * slow device holds it. Its own writes (all to this device: it completes
 * them before leaving a device) are reaped first; only with none of its
 * own in flight does it sleep on the others' (the device's own workers,
 * which complete theirs before they sleep on anything).
 */
static void wb_wait_queue_room(struct wb_ctx *x)
{
	struct bdi *b = x->b;

	while (atomic_load(&b->inflight_ios) >= (long)b->queue_depth) {
		if (x->eng->inflight) {
			io_engine_submit(x->eng);
			io_engine_reap(x->eng, 1);
			continue;
		}
		ls_mutex_lock(&b->lock, &lc_bdi_lock);
		if (atomic_load(&b->inflight_ios) >= (long)b->queue_depth)
			clock_cond_wait_ms(&b->done_cond, &b->lock, 10);
		ls_mutex_unlock(&b->lock);
	}
}

static void wb_submit_run(struct wb_ctx *x, struct mapping *m, struct page **pages,
			  unsigned n, uint64_t pblk, int ord)
{
	struct wb_io *io = malloc(sizeof(*io) + n * (sizeof(struct page *) + sizeof(struct iovec)));
	unsigned i;
	int ret;

	if (x->pool)
		wb_wait_queue_room(x);
	atomic_fetch_add(&x->b->inflight, n);
	atomic_fetch_add(&x->b->inflight_ios, 1);
	atomic_fetch_add(&x->b->stats.nr_ios, 1);
	if (!io) {
		wb_inode_failed(x->b, m->host, pages[0]->index, n, -ENOMEM);
		for (i = 0; i < n; i++)
			wb_page_fail(x->b, m->host, pages[i], -ENOMEM);
		wb_inflight_sub(x->b, n);
		wb_inflight_ios_dec(x->b);
		return;
	}
	io->iov = (struct iovec *)(io + 1);
	io->pages = (struct page **)(io->iov + n);
	io->b = x->b;
	io->m = m;
	io->n = n;
	io->ord = ord;
	if (ord >= 0) {
		ls_mutex_lock(&x->b->lock, &lc_bdi_lock);
		x->b->ord_cnt[ord]++;
		ls_mutex_unlock(&x->b->lock);
	}
	for (i = 0; i < n; i++) {
		io->pages[i] = pages[i];
		io->iov[i].iov_base = page_address(pages[i]);
		io->iov[i].iov_len = PAGE_SIZE;
	}
	io->req = (struct io_req){ .op = IO_WRITE, .fd = x->b->fd, .off = pblk << PAGE_SHIFT,
				   .iov = io->iov, .iovcnt = (int)n, .done = wb_io_done };
	if (x->b->fault_inject && ((atomic_load(&((struct wb_inode *)m->host)->fault) & WB_FAULT_WRITE) ||
				   wb_fault_roll(x->b)))
		io->req.inject_err = -EIO;
	ret = io_engine_queue(x->eng, &io->req);
	if (ret)
		wb_io_done(&io->req, ret);
}

/* Complete everything this worker has queued before it may sleep on others. */
void wb_drain_before_sleep(struct wb_ctx *x)
{
	if (x->eng->inflight)
		io_engine_drain(x->eng);
}

/* lock_page(), draining our own writes first if the lock is contended. */
static void wb_lock_page(struct wb_ctx *x, struct page *p)
{
	if (trylock_page(p))
		return;
	wb_drain_before_sleep(x);
	lock_page(p);
}

/*
 * Lock each page, keep those still dirty (waiting on writeback under
 * SYNC_ALL, skipping them otherwise), and move them from dirty to
 * writeback. Pages stay locked and referenced. Returns how many are kept.
 */
static unsigned wb_prepare_batch(struct wb_ctx *x, struct mapping *m, unsigned n, bool sync)
{
	struct page **pages = x->pages;
	unsigned i, k = 0;

	for (i = 0; i < n; i++) {
		struct page *p = pages[i];

		wb_lock_page(x, p);
		/* a journaled metadata page waits for its transaction's
		 * commit, and a held one for its expiry */
		if (p->mapping == m && page_test(p, PG_dirty) &&
		    !page_test(p, PG_jdirty) && !page_test(p, PG_jcommit) &&
		    !page_test(p, PG_jheld) &&
		    (!page_test(p, PG_writeback) || sync)) {
			if (page_test(p, PG_writeback)) {
				wb_drain_before_sleep(x);
				wait_on_page_writeback(p);
			}
			if (clear_page_dirty_for_io(p)) {
				set_page_writeback(p);
				atomic_fetch_sub(&x->b->stats.reclaimable, 1);
				atomic_fetch_add(&x->b->stats.writeback, 1);
				pages[k++] = p;
				continue;
			}
		}
		unlock_page(p);
		page_put(p);
	}
	return k;
}

/* Submit runs of physically consecutive blocks, at most max_io_pages each. */
static void wb_submit_runs(struct wb_ctx *x, struct mapping *m, unsigned n, int ord)
{
	uint64_t *pblk = x->pblk;
	unsigned i, k;

	for (i = 0; i < n; i += k) {
		if (pblk[i] == BDI_PBLK_SKIP) {
			wb_page_end(x->b, x->pages[i], 1);
			k = 1;
			continue;
		}
		if (pblk[i] == BDI_PBLK_AGAIN) {
			k = 1;		/* wb_keep_again's */
			continue;
		}
		for (k = 1; i + k < n && k < x->b->max_io_pages && pblk[i + k] == pblk[i] + k; k++)
			;
		wb_submit_run(x, m, x->pages + i, k, pblk[i], ord);
	}
}

/*
 * The pages of the batch that map_pages left for after alloc_wait
 * (BDI_PBLK_AGAIN, unlocked): dirty again and out of writeback, so that
 * nothing waits on them while the owner commits (reclaim, a writer), as a
 * failed write's are (wb_page_fail) but without an error; still
 * referenced, at the front of the batch. Returns how many.
 */
static unsigned wb_keep_again(struct wb_ctx *x, unsigned n)
{
	unsigned i, k = 0;

	for (i = 0; i < n; i++) {
		struct page *p = x->pages[i];

		if (x->pblk[i] != BDI_PBLK_AGAIN)
			continue;
		if (set_page_dirty(p))
			atomic_fetch_sub(&x->b->stats.dirtied, 1);
		page_get(p);	/* wb_page_end puts the batch's */
		wb_page_end(x->b, p, 1);
		x->pages[k++] = p;
	}
	return k;
}

/*
 * Map a prepared batch to device blocks (the metadata inode's index is
 * its block) and submit merged writes. A mapping failure fails the whole
 * batch: the error goes on the mapping and the pages stay dirty. Returns
 * how many pages map_pages left for after alloc_wait (wb_keep_again).
 */
static unsigned wb_map_submit_once(struct wb_ctx *x, struct wb_inode *wi, unsigned n)
{
	struct bdi *b = x->b;
	unsigned i, k = 0;
	int ret = 0, ord = -1;

	for (i = 0; i < n; i++)
		x->idx[i] = x->pblk[i] = x->pages[i]->index;
	if (!wi->is_meta) {
		wb_drain_before_sleep(x);
		ord = ord_get(b);
		ret = b->ops->map_pages(b, wi, x->idx, n, x->pblk);
	}
	for (i = 0; i < n; i++)
		unlock_page(x->pages[i]);
	if (ret) {
		wb_inode_failed(b, wi, x->idx[0], n, ret);
		for (i = 0; i < n; i++)
			wb_page_fail(b, wi, x->pages[i], ret);
	} else {
		wb_submit_runs(x, wi->mapping, n, ord);
		if (!wi->is_meta)
			k = wb_keep_again(x, n);
	}
	if (ord >= 0)
		ord_put(b, ord);
	return k;
}

/*
 * wb_map_submit_once, and for pages that must wait for room (blocks whose
 * free has not committed: the owner commits, alloc_wait) again, up to
 * WB_ALLOC_RETRIES times. The wait holds no page lock and no ordered
 * epoch (the commit waits for the epoch's writes: ours are completed
 * first), so that the commit never waits for this worker.
 */
static void wb_map_submit(struct wb_ctx *x, struct wb_inode *wi, unsigned n, bool sync)
{
	struct bdi *b = x->b;
	unsigned k = wb_map_submit_once(x, wi, n), tries = 0, i;
	int ret = 0;

	while (k) {
		if (tries++ == WB_ALLOC_RETRIES || !b->ops->alloc_wait) {
			ret = -ENOSPC;
			break;
		}
		wb_drain_before_sleep(x);
		ret = b->ops->alloc_wait(b, wi);
		if (ret)
			break;
		atomic_fetch_add(&b->stats.alloc_waits, 1);
		/* those still dirty, locked and under writeback again */
		k = wb_prepare_batch(x, wi->mapping, k, sync);
		if (k)
			k = wb_map_submit_once(x, wi, k);
	}
	if (!k)
		return;
	/* they stay dirty, for a later pass */
	wb_inode_failed(b, wi, x->pages[0]->index, k, ret);
	for (i = 0; i < k; i++)
		page_put(x->pages[i]);
}

/*
 * write_cache_pages: up to @budget pages of @wi in index order (cyclic
 * from writeback_index under SYNC_NONE; TOWRITE-tagged in [start, end]
 * under SYNC_ALL). Returns pages sent to the device.
 */
long wb_write_pages(struct wb_ctx *x, struct wb_inode *wi, bool sync,
		    uint64_t start, uint64_t end, long budget)
{
	struct mapping *m = wi->mapping;
	enum mapping_tag tag = sync ? TAG_TOWRITE : TAG_DIRTY;
	uint64_t first = sync ? start : m->writeback_index, index = first;
	bool wrapped = sync || first == 0;
	long written = 0;

	if (sync)
		mapping_tag_towrite(m, start, end);
	else
		end = UINT64_MAX;
	while (sync || written < budget) {
		/* nr_to_write counts pages: the last batch takes only what is left */
		unsigned max = sync || budget - written >= WB_BATCH ? WB_BATCH
								     : (unsigned)(budget - written);
		unsigned n = mapping_lookup_tag(m, &index, end, tag, x->pages, max);

		if (!n) {
			if (wrapped)
				break;
			wrapped = true;
			end = first - 1;
			index = 0;
			continue;
		}
		n = wb_prepare_batch(x, m, n, sync);
		if (n)
			wb_map_submit(x, wi, n, sync);
		written += n;
		if (index == 0)		/* wrapped past UINT64_MAX */
			break;
	}
	if (!sync)
		m->writeback_index = index;
	io_engine_submit(x->eng);
	io_engine_reap(x->eng, 0);	/* end what is already done, without waiting */
	return written;
}
