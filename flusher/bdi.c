// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The backing device: creation and teardown of its flusher threads, the
 * dirty inode lists and dirty accounting (bdi_mapping_ops), the public
 * sync entry points that queue work for the flushers, and the write
 * bandwidth estimator. The writeback itself is writeback.c's; with a
 * flusher pool (bdi_config.pool), background and periodic writeback are
 * pdflush.c's, and this bdi's workers keep the rest.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "wbcfs/lib/clock.h"
#include "wbcfs/blkdev.h"
#include "bdi_i.h"

LOCK_CLASS(lc_bdi_lock, "bdi_lock")
LOCK_CLASS(lc_bdi_bw_lock, "bdi_bw_lock")

static const struct throttle_wb_ops bdi_throttle_ops;

static unsigned long bdi_queue_limit(dev_t rdev, const char *what)
{
	char path[96];
	unsigned long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/queue/%s", major(rdev), minor(rdev),
		 what);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%lu", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

/*
 * The largest write the device takes whole: a merged write is one iovec
 * entry per cache page, pages that need not be adjacent in memory, so
 * each may be a segment of its own. A write over the queue's
 * max_segments or max_sectors_kb is split by the block layer, and a split
 * of a non-blocking (io_uring) write fails with EAGAIN: io_uring then
 * hands every write to its worker threads, measured here at half the
 * device's bandwidth (a loop device allows 128 segments).
 */
static unsigned bdi_io_pages_limit(int fd, unsigned pages)
{
	unsigned long segs, kb;
	struct stat st;

	if (fstat(fd, &st) || !S_ISBLK(st.st_mode))
		return pages;
	segs = bdi_queue_limit(st.st_rdev, "max_segments");
	kb = bdi_queue_limit(st.st_rdev, "max_sectors_kb");
	if (segs && segs < pages)
		pages = (unsigned)segs;
	if (kb >= 4 && kb / 4 < pages)
		pages = (unsigned)(kb / 4);
	return pages ? pages : 1;
}

static void bdi_account_dirtied(struct mapping *m, struct page *p)
{
	struct wb_inode *wi = m->host;

	atomic_fetch_add(&wi->bdi->stats.reclaimable, 1);
	atomic_fetch_add(&wi->bdi->stats.dirtied, 1);
	bdi_mark_inode_dirty(wi->bdi, wi, I_DIRTY_PAGES);
}

static void bdi_account_undirtied(struct mapping *m, struct page *p)
{
	struct wb_inode *wi = m->host;

	atomic_fetch_sub(&wi->bdi->stats.reclaimable, 1);
}

const struct mapping_ops bdi_mapping_ops = {
	.dirtied = bdi_account_dirtied,
	.undirtied = bdi_account_undirtied,
};

static void bdi_free(struct bdi *b)
{
	pthread_cond_destroy(&b->done_cond);
	pthread_cond_destroy(&b->work_cond);
	pthread_mutex_destroy(&b->bw_lock);
	pthread_mutex_destroy(&b->lock);
	free(b->threads);
	free(b);
}

int bdi_create(struct bdi **out, const struct bdi_config *cfg)
{
	struct bdi *b = calloc(1, sizeof(*b));
	unsigned i;
	int ret;

	if (!cfg->cache || !cfg->ops || !cfg->ops->map_pages || cfg->fd < 0) {
		free(b);
		return -EINVAL;
	}
	if (!b)
		return -ENOMEM;
	pthread_mutex_init(&b->lock, NULL);
	pthread_mutex_init(&b->bw_lock, NULL);
	pthread_cond_init(&b->work_cond, NULL);
	pthread_cond_init(&b->done_cond, NULL);
	list_init(&b->b_dirty);
	list_init(&b->b_io);
	list_init(&b->b_more_io);
	list_init(&b->work_list);
	list_init(&b->pool_list);
	b->fd = cfg->fd;
	snprintf(b->name, sizeof(b->name), "%s", cfg->name ? cfg->name : "?");
	b->engine = cfg->engine;
	b->queue_depth = cfg->queue_depth ? cfg->queue_depth : 64;
	b->max_io_pages = bdi_io_pages_limit(cfg->fd, cfg->max_io_kb >= 4 ? cfg->max_io_kb / 4 : 256);
	b->nr_flushers = cfg->nr_flushers ? cfg->nr_flushers : 1;
	b->cache = cfg->cache;
	b->ops = cfg->ops;
	b->owner = cfg->owner;
	b->fault_inject = cfg->fault_inject;
	atomic_store(&b->fault_flush, -1);
	b->bw.write_bw = b->bw.avg_write_bw = 25600;	/* 100 MB/s */
	b->bw.stamp_ms = clock_now_ms();
	atomic_store(&b->stats.write_bw, 25600);
	atomic_store(&b->stats.avg_write_bw, 25600);
	throttle_wb_init(&b->tw, &b->cache->throttle, b->name, &bdi_throttle_ops, b);
	b->threads = calloc(b->nr_flushers, sizeof(*b->threads));
	if (!b->threads) {
		bdi_free(b);
		return -ENOMEM;
	}
	for (i = 0; i < b->nr_flushers; i++) {
		ret = pthread_create(&b->threads[i], NULL, bdi_flusher_main, b);
		if (ret) {
			b->nr_flushers = i;
			bdi_destroy(b);
			return -ret;
		}
	}
	b->pool = cfg->pool;
	if (b->pool)
		flusher_pool_register(b->pool, b);
	*out = b;
	return 0;
}

void bdi_destroy(struct bdi *b)
{
	unsigned i;

	/* first: a pool thread inside @b leaves it, and none comes back */
	if (b->pool)
		flusher_pool_unregister(b->pool, b);
	throttle_wb_remove(&b->tw);
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	b->stopping = true;
	pthread_cond_broadcast(&b->work_cond);
	ls_mutex_unlock(&b->lock);
	for (i = 0; i < b->nr_flushers; i++)
		pthread_join(b->threads[i], NULL);
	wb_sync_ctxs_free(b);
	bdi_free(b);
}

void bdi_inode_init(struct bdi *b, struct wb_inode *wi, struct mapping *m, bool is_meta)
{
	memset(wi, 0, sizeof(*wi));
	list_init(&wi->io_list);
	wi->mapping = m;
	wi->bdi = b;
	wi->is_meta = is_meta;
	m->host = wi;
}

void bdi_set_meta(struct bdi *b, struct wb_inode *meta)
{
	b->meta = meta;
}

void bdi_mark_inode_dirty(struct bdi *b, struct wb_inode *wi, unsigned flags)
{
	bool wake = false;

	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	if (!(wi->state & I_FREEING)) {
		if (!(wi->state & (I_DIRTY_PAGES | I_DIRTY_INODE))) {
			wi->dirtied_when = clock_now_ms();
			wake = !b->kupdate_armed;
			b->kupdate_armed = true;
			/* the metadata inode is written after the data of each round */
			if (!wi->is_meta && list_empty(&wi->io_list))
				list_add(&wi->io_list, &b->b_dirty);
		}
		wi->state |= flags;
	}
	/* the bdi's first dirty inode starts the periodic clock */
	if (wake)
		pthread_cond_signal(&b->work_cond);
	ls_mutex_unlock(&b->lock);
}

void bdi_inode_remove(struct bdi *b, struct wb_inode *wi)
{
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	while (wi->state & I_SYNC)
		lockstat_cond_wait(&b->done_cond, &b->lock);
	wi->state |= I_FREEING;
	list_del_init(&wi->io_list);
	ls_mutex_unlock(&b->lock);
}

/*
 * Reclaim's requests go to this bdi's workers whatever the model: they
 * name the device whose pages a zone needs cleaned. Background requests
 * go to the pool when there is one (after b->lock is dropped: the pool's
 * lock nests outside it).
 */
void bdi_wakeup(struct bdi *b, long nr_pages, enum wb_reason why)
{
	bool vmscan = why == WB_REASON_VMSCAN;

	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	if (vmscan)
		b->vmscan_nr += nr_pages > 0 ? nr_pages : 1024;
	else
		b->bg_pending = true;
	if (vmscan || !b->pool)
		pthread_cond_signal(&b->work_cond);
	ls_mutex_unlock(&b->lock);
	if (!vmscan && b->pool)
		flusher_pool_wakeup(b->pool, b);
}

bool bdi_write_congested(struct bdi *b)
{
	return atomic_load(&b->congested) ||
	       atomic_load(&b->inflight_ios) >= (long)b->queue_depth;
}

void bdi_set_congested(struct bdi *b, bool on)
{
	atomic_store(&b->congested, on);
	if (!on && b->pool)
		flusher_pool_uncongested(b->pool);
}

int bdi_sync_meta(struct bdi *b)
{
	struct wb_work w = { .kind = WORK_META, .sync_mode = WB_SYNC_ALL,
			     .reason = WB_REASON_FSYNC };

	return bdi_queue_work_wait(b, &w);
}

int bdi_flush_device(struct bdi *b)
{
	if (bdi_flush_fault_take(b))
		return -EIO;
	return blkdev_flush(b->fd);
}

int bdi_sync(struct bdi *b, enum wb_reason why)
{
	struct wb_work w = { .kind = WORK_SYNC, .sync_mode = WB_SYNC_ALL, .reason = why };

	atomic_fetch_add(&b->stats.syncs, 1);
	return bdi_queue_work_wait(b, &w);
}

long bdi_read(struct bdi *b, struct wb_inode *wi, const struct iovec *iov, int iovcnt,
	      uint64_t off)
{
	if (b->fault_inject && wi && (atomic_load(&wi->fault) & WB_FAULT_READ))
		return -EIO;
	return (long)blkdev_preadv(b->fd, iov, iovcnt, (off_t)off);
}

int bdi_inode_set_fault(struct bdi *b, struct wb_inode *wi, unsigned fault)
{
	if (!b->fault_inject)
		return -EPERM;
	atomic_store(&wi->fault, fault & (WB_FAULT_READ | WB_FAULT_WRITE));
	if (!(fault & WB_FAULT_WRITE)) {
		/* the device works again: let writeback retry at once */
		ls_mutex_lock(&b->lock, &lc_bdi_lock);
		wi->retry_after_ms = 0;
		wi->backoff_ms = 0;
		ls_mutex_unlock(&b->lock);
	}
	return 0;
}

int bdi_set_fault_rate(struct bdi *b, unsigned per_mille)
{
	if (!b->fault_inject)
		return -EPERM;
	if (per_mille > 1000)
		return -EINVAL;
	atomic_store(&b->fault_rate, per_mille);
	return 0;
}

unsigned bdi_fault_rate(struct bdi *b)
{
	return atomic_load(&b->fault_rate);
}

int bdi_set_fault_flush(struct bdi *b, int after)
{
	if (!b->fault_inject)
		return -EPERM;
	atomic_store(&b->fault_flush, after < 0 ? -1 : after);
	return 0;
}

bool bdi_flush_faulted(struct bdi *b)
{
	return b->fault_inject && atomic_load(&b->fault_flush) >= 0;
}

bool bdi_flush_fault_take(struct bdi *b)
{
	int n;

	if (!b->fault_inject)
		return false;
	n = atomic_load(&b->fault_flush);
	while (n > 0 && !atomic_compare_exchange_weak(&b->fault_flush, &n, n - 1))
		;
	return n == 0;
}

const struct bdi_stats *bdi_get_stats(const struct bdi *b)
{
	return &b->stats;
}

void bdi_list_counts(struct bdi *b, long *b_dirty, long *b_io, long *b_more_io)
{
	struct wb_inode *wi;

	*b_dirty = *b_io = *b_more_io = 0;
	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	list_for_each_entry(wi, &b->b_dirty, io_list)
		(*b_dirty)++;
	list_for_each_entry(wi, &b->b_io, io_list)
		(*b_io)++;
	list_for_each_entry(wi, &b->b_more_io, io_list)
		(*b_more_io)++;
	ls_mutex_unlock(&b->lock);
}

unsigned bdi_state(struct bdi *b)
{
	unsigned st = 0;

	ls_mutex_lock(&b->lock, &lc_bdi_lock);
	if (!b->stopping)
		st |= BDI_STATE_RUNNING;
	if (atomic_load(&b->inflight) > 0)
		st |= BDI_STATE_WRITEBACK;
	if (!list_empty(&b->b_dirty) || !list_empty(&b->b_io) || !list_empty(&b->b_more_io))
		st |= BDI_STATE_DIRTY_IO;
	if (b->bg_pending || b->vmscan_nr)
		st |= BDI_STATE_BG_PENDING;
	if (b->kupdate_armed)
		st |= BDI_STATE_PERIODIC;
	ls_mutex_unlock(&b->lock);
	return st;
}

void *bdi_owner(const struct bdi *b)
{
	return b->owner;
}

/* ---- bandwidth estimation (doc/algorithms.md §2.6) ---------------------- */

void bdi_bw_feed(struct bdi *b, uint64_t now_ms)
{
	ls_mutex_lock(&b->bw_lock, &lc_bdi_bw_lock);
	bdi_bw_sample(&b->bw, now_ms, atomic_load(&b->stats.written),
		      atomic_load(&b->inflight) == 0);
	atomic_store(&b->stats.write_bw, b->bw.write_bw);
	atomic_store(&b->stats.avg_write_bw, b->bw.avg_write_bw);
	ls_mutex_unlock(&b->bw_lock);
}

/* The throttle controller reads the device through these. */
static void bdi_tw_stat(struct throttle_wb *tw, struct throttle_wb_stat *st)
{
	struct bdi *b = tw->arg;

	st->reclaimable = atomic_load(&b->stats.reclaimable);
	st->writeback = atomic_load(&b->stats.writeback);
	st->dirtied = atomic_load(&b->stats.dirtied);
	st->written = atomic_load(&b->stats.written);
	st->write_bw = atomic_load(&b->stats.write_bw);
	st->avg_write_bw = atomic_load(&b->stats.avg_write_bw);
}

static void bdi_tw_update_bw(struct throttle_wb *tw, uint64_t now_ms)
{
	bdi_bw_feed(tw->arg, now_ms);
}

static void bdi_tw_kick(struct throttle_wb *tw)
{
	bdi_wakeup(tw->arg, 0, WB_REASON_BACKGROUND);
}

static const struct throttle_wb_ops bdi_throttle_ops = {
	.stat = bdi_tw_stat,
	.update_bw = bdi_tw_update_bw,
	.kick = bdi_tw_kick,
};

struct throttle_wb *bdi_throttle_wb(struct bdi *b)
{
	return &b->tw;
}

#define BW_PERIOD_MS 4096	/* roundup_pow_of_two(3 * HZ) */
#define BW_INTERVAL_MS 200	/* BANDWIDTH_INTERVAL */
#define BW_FIRST_PAGES 256	/* the warm-up's first sample: at least 1 MiB */

/*
 * write_bw = (written * HZ + write_bw * (period - elapsed)) / period, so
 * an estimate decays over ~4 s; avg_write_bw follows it only in the
 * direction both agree on (the spike filter), by 1/8 of the gap.
 */
void bdi_bw_update(struct bdi_bw *bw, uint64_t now_ms, long written_total)
{
	uint64_t elapsed = now_ms - bw->stamp_ms;
	long written = written_total - bw->written_stamp, old = bw->write_bw, avg;
	int64_t w;

	/*
	 * Callers read the clock before taking bw_lock, so a sampler that
	 * lost the race can arrive with a time before the last stamp: its
	 * interval is empty, not 2^64 ms long (that turned the estimate
	 * negative, and writeback with it).
	 */
	if (now_ms < bw->stamp_ms || written < 0 || elapsed < BW_INTERVAL_MS)
		return;
	if (elapsed > 1000 && written == 0)
		goto stamp;	/* idle: restart the period */
	w = (int64_t)written * 1000;
	if (elapsed > BW_PERIOD_MS) {
		bw->write_bw = (long)(w / (int64_t)elapsed);
		bw->avg_write_bw = bw->write_bw;
		bw->measured_ms = BW_PERIOD_MS;
		goto stamp;
	}
	if (!bw->measured_ms && written < BW_FIRST_PAGES && elapsed < 1000)
		return;	/* a first sample of a few pages says nothing yet: gather more */
	if (bw->measured_ms < BW_PERIOD_MS) {
		/*
		 * Warm-up: the 100 MB/s a device starts with is a guess, not a
		 * measurement of the last period, so it gets no weight; the
		 * kernel's formula would take ~15 s to forget it, and the
		 * throttle's ratelimits with it.
		 */
		bw->write_bw = (long)((w + (int64_t)old * (int64_t)bw->measured_ms) /
				      (int64_t)(bw->measured_ms + elapsed));
		bw->avg_write_bw = bw->write_bw > 1 ? bw->write_bw : 1;
		bw->measured_ms += elapsed;
		goto stamp;
	}
	bw->write_bw = (long)((w + (int64_t)old * (int64_t)(BW_PERIOD_MS - elapsed)) / BW_PERIOD_MS);
	avg = bw->avg_write_bw;
	if (avg > old && old >= bw->write_bw)
		avg -= (avg - old) / 8;
	else if (avg < old && old <= bw->write_bw)
		avg += (old - avg) / 8;
	bw->avg_write_bw = avg > 1 ? avg : 1;
stamp:
	bw->stamp_ms = now_ms;
	bw->written_stamp = written_total;
}

void bdi_bw_sample(struct bdi_bw *bw, uint64_t now_ms, long written_total, bool idle)
{
	uint64_t elapsed = now_ms - bw->stamp_ms;
	long written = written_total - bw->written_stamp;

	if (now_ms < bw->stamp_ms)
		return;		/* a sampler that lost the race for bw_lock: see above */

	/*
	 * Idle time is not device time: with nothing under writeback now and
	 * less written since the last sample than an eighth of the estimate
	 * would have (a trickle of periodic or metadata writes), the interval
	 * was mostly idle and is dropped. Folding it in would drag the
	 * estimate toward zero between bursts, and the throttle's ratelimits
	 * with it (the kernel restarts its stamps when writeback starts
	 * after an idle second, to the same end).
	 */
	if (idle && elapsed >= BW_INTERVAL_MS &&
	    (uint64_t)written * 1000 < (uint64_t)(bw->write_bw / 8) * elapsed) {
		bw->stamp_ms = now_ms;
		bw->written_stamp = written_total;
		return;
	}
	if (idle && !written) {
		bw->stamp_ms = now_ms;
		return;
	}
	bdi_bw_update(bw, now_ms, written_total);
}

void bdi_bw_start(struct bdi_bw *bw, uint64_t now_ms, long written_total, bool idle)
{
	if (!idle || now_ms < bw->stamp_ms || now_ms - bw->stamp_ms <= 1000)
		return;
	bw->stamp_ms = now_ms;
	bw->written_stamp = written_total;
}
