/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The pdflush flusher model (mount option flusher_model=pdflush): one pool
 * of flusher threads per cache domain, shared by every device of the
 * domain, as Linux had before per-bdi flusher threads (2.6.32). The pool
 * takes background writeback (over the background threshold) and periodic
 * writeback (kupdate, every dirty_writeback_centisecs) for whichever
 * registered device has dirty inodes, in chunks of MAX_WRITEBACK_PAGES,
 * skipping a device whose queue is full (congested) and waiting about
 * 100 ms when every candidate is. A pool thread that does enter a slow
 * device stays there until that device's writes complete: its stall is
 * every other device's stall, which is what the model is for.
 *
 * Each bdi's own worker(s) keep the work that names the device: sync,
 * fsync, umount, metadata and reclaim's requests. A bdi joins a pool
 * through bdi_config.pool; bdi_destroy leaves it.
 */
#ifndef WBCFS_PDFLUSH_H
#define WBCFS_PDFLUSH_H

#include <stdatomic.h>
#include "wbcfs/blkdev.h"

struct cache;
struct flusher_pool;

#define PDFLUSH_MIN_THREADS 2		/* MIN_PDFLUSH_THREADS */
#define PDFLUSH_MAX_THREADS 8		/* MAX_PDFLUSH_THREADS */
#define PDFLUSH_CHUNK_PAGES 1024	/* MAX_WRITEBACK_PAGES: 4 MiB per round */
#define PDFLUSH_CONGESTION_WAIT_MS 100	/* congestion_wait(WRITE, HZ/10) */
#define PDFLUSH_SPAWN_BUSY_MS 1000	/* no idle thread this long: start one */
#define PDFLUSH_EXIT_IDLE_MS 1000	/* idle this long (and above the minimum): exit */

struct flusher_pool_config {
	struct cache *cache;		/* the domain's cache */
	const char *name;		/* for messages */
	enum io_engine_type engine;	/* each pool thread's own engine */
	unsigned queue_depth;		/* of that engine, >= 1 (0: 64) */
	unsigned min_threads;		/* 0: PDFLUSH_MIN_THREADS */
	unsigned max_threads;		/* 0: PDFLUSH_MAX_THREADS; >= min_threads */
};

/* Counters, for /.wbcfs/vmstat. All atomic. */
struct flusher_pool_stats {
	_Atomic long nr_threads;		/* gauge: threads alive (nr_pdflush_threads) */
	_Atomic long nr_busy;			/* gauge: threads in an operation */
	_Atomic long threads_started;		/* cumulative, the first min_threads included */
	_Atomic long threads_exited;		/* cumulative, idle exits only */
	_Atomic long background_rounds;		/* MAX_WRITEBACK_PAGES rounds for background */
	_Atomic long kupdate_rounds;		/* rounds for periodic writeback */
	_Atomic long pages_written;		/* pages the pool sent to devices */
	_Atomic long congestion_skips;		/* a congested device passed over */
	_Atomic long congestion_waits;		/* ~100 ms waits: everything congested */
	_Atomic long congestion_wait_ns;	/* cumulative time in those waits */
};

/**
 * Create the pool and start its min_threads threads. Returns 0 or -errno
 * (-EINVAL for a bad config, -ENOMEM, or pthread_create's error).
 */
int flusher_pool_create(struct flusher_pool **out, const struct flusher_pool_config *cfg);
/** Stop and join every pool thread. Context: every member bdi destroyed. */
void flusher_pool_destroy(struct flusher_pool *p);
const struct flusher_pool_stats *flusher_pool_get_stats(const struct flusher_pool *p);

#endif
