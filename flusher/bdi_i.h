/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * flusher/ internals: the bdi layout, work items and the worker context.
 */
#ifndef WBCFS_FLUSHER_BDI_I_H
#define WBCFS_FLUSHER_BDI_I_H

#include "wbcfs/flusher/bdi.h"
#include "wbcfs/lib/lockstat.h"
#include "wbcfs/blkdev.h"

/* Lock classes of flusher/ (bdi.c defines them) for /.wbcfs/lockstat. */
extern struct lock_class lc_bdi_lock;		/* bdi->lock */
extern struct lock_class lc_bdi_bw_lock;	/* bdi->bw_lock */

enum wb_work_kind {
	WORK_PAGES,	/* write some or all dirty inodes (background, vmscan, sync) */
	WORK_INODE,	/* one inode, WB_SYNC_ALL (fsync) */
	WORK_META,	/* the metadata inode, WB_SYNC_ALL */
	WORK_SYNC,	/* sync(2)/umount: everything, sync_fs, meta, device flush */
};

struct wb_work {
	struct list_head list;		/* bdi->lock: on work_list */
	enum wb_work_kind kind;
	enum wb_sync_mode sync_mode;
	enum wb_reason reason;
	long nr_pages;			/* budget (SYNC_NONE) */
	bool nonblocking;		/* pool: leave a congested device (sets
					 * encountered_congestion) */
	bool encountered_congestion;	/* out: the device was congested */
	bool more_io;			/* out: inodes left on b_more_io */
	struct wb_inode *inode;		/* WORK_INODE */
	uint64_t start, end;		/* WORK_INODE page range */
	bool datasync;
	bool nowait;			/* WORK_INODE: leave its writes in flight
					 * (bdi_sync_inode_start) */
	bool done;			/* bdi->lock */
	int ret;			/* first error */
};

struct bdi {
	pthread_mutex_t lock;		/* protects: b_dirty, b_io, b_more_io, every
					 * wb_inode's io_list/state/dirtied_when,
					 * work_list, bg_pending, vmscan_nr, stopping,
					 * kupdate_armed */
	struct list_head b_dirty;	/* lock: newest dirtied at the head */
	struct list_head b_io;		/* lock: this pass, taken from the tail */
	struct list_head b_more_io;	/* lock: requeued, slice used up */
	struct list_head work_list;	/* lock: FIFO */
	pthread_cond_t work_cond;	/* workers sleep here */
	pthread_cond_t done_cond;	/* work done, I_SYNC cleared, inflight drained */
	bool bg_pending;		/* lock */
	long vmscan_nr;			/* lock: pages reclaim asked for */
	bool stopping;			/* lock */
	bool kupdate_armed;		/* lock: a periodic pass is scheduled (set by
					 * the first dirtying, cleared when a pass
					 * leaves nothing dirty) */
	struct wb_inode *meta;		/* constant after bdi_set_meta */
	errseq_t meta_err_since;	/* lock: metadata errors reported up to here */
	bool fault_inject;		/* constant */
	_Atomic unsigned fault_rate;	/* atomic: per mille of device writes that
					 * fail (fault_inject only) */
	_Atomic int fault_flush;	/* atomic: -1, or the device flushes that still
					 * succeed before all fail (fault_inject only) */

	unsigned ord_epoch;		/* lock: ordered-data epoch (bdi_ordered_mark) */
	long ord_cnt[2];		/* lock: data batches and writes per epoch parity */
	_Atomic long inflight;		/* atomic: pages under device I/O, bdi-wide */
	_Atomic long inflight_ios;	/* atomic: device writes in flight, every thread's:
					 * the device's queue (bdi_write_congested) */
	_Atomic bool congested;		/* atomic: the owner says congested */
	struct bdi_stats stats;

	pthread_mutex_t bw_lock;	/* protects: bw */
	struct bdi_bw bw;
	struct throttle_wb tw;		/* this device in the cache's throttle domain */

	int fd;				/* constant */
	char name[64];			/* constant */
	enum io_engine_type engine;	/* constant */
	unsigned queue_depth;		/* constant */
	unsigned max_io_pages;		/* constant */
	unsigned nr_flushers;		/* constant */
	struct cache *cache;		/* constant */
	const struct bdi_ops *ops;	/* constant */
	void *owner;			/* constant */
	pthread_t *threads;		/* constant */

	struct flusher_pool *pool;	/* constant: NULL, or the pool doing background
					 * and periodic writeback */
	struct list_head pool_list;	/* pool->lock: on pool->bdis */
	bool pool_busy;			/* pool->lock: a pool thread is writing this bdi
					 * (2.6.2x's BDI_pdflush bit: one at a time) */
	struct wb_ctx *sync_ctxs;	/* lock: free contexts of fsyncs run in their
					 * callers' threads (sync_inode_begin) */
	unsigned nr_sync_ctxs;		/* lock: made, free or in use */
};

/* writeback.c and wb_submit.c: a worker's writeback context */
/*
 * Pages locked, mapped and submitted together: 4 MiB, so that with the
 * engine drained before each map_pages call a batch still fills several
 * max_io_kb writes in flight.
 */
#define WB_BATCH 1024

/*
 * One flusher worker, or one pool thread; everything here is owned by its
 * thread. A pool thread's @b is the device it is visiting, NULL between
 * visits.
 */
struct wb_ctx {
	struct bdi *b;
	bool pool;			/* a pool thread: waits for room in the device's
					 * queue before each write (get_request_wait) */
	struct io_engine *eng;		/* the engine in use: own_eng, or nbd_eng
					 * (rbd_eng) while a pool thread visits an
					 * NBD device (an RBD image) */
	struct io_engine own_eng;	/* this worker's engine */
	struct io_engine nbd_eng;	/* pool threads: for NBD devices, made on first use */
	bool nbd_eng_ready;
	struct io_engine rbd_eng;	/* pool threads: for RBD images, made on first use */
	bool rbd_eng_ready;
	struct page *pages[WB_BATCH];	/* current batch */
	uint64_t idx[WB_BATCH];		/* its page indices */
	uint64_t pblk[WB_BATCH];	/* and device blocks (map_pages) */
	struct wb_ctx *next_free;	/* b->lock: on b->sync_ctxs (fsync's) */
};

/* wb_submit.c: page I/O for writeback.c */
/* Feed @b's bandwidth estimate now (completion, and the worker's idle ticks). */
void wb_bw_feed(struct bdi *b);
/* A writeback round starts: forget an idle gap (doc/algorithms.md §2.6). */
void wb_bw_start(struct bdi *b);
/* Complete everything this worker has queued before it may sleep on others. */
void wb_drain_before_sleep(struct wb_ctx *x);
/*
 * write_cache_pages: up to @budget pages of @wi in index order (cyclic
 * from writeback_index under SYNC_NONE; TOWRITE-tagged in [start, end]
 * under SYNC_ALL). Returns pages sent to the device.
 */
long wb_write_pages(struct wb_ctx *x, struct wb_inode *wi, bool sync,
		    uint64_t start, uint64_t end, long budget);

/* writeback.c */
void *bdi_flusher_main(void *arg);
int bdi_queue_work_wait(struct bdi *b, struct wb_work *w);
/* Free @b's fsync contexts. Context: @b stopping, none in use. */
void wb_sync_ctxs_free(struct bdi *b);

/* A pool thread's writeback context: its engine, its batch arrays. */
struct wb_ctx;
struct wb_ctx *wb_pool_ctx_create(enum io_engine_type engine, unsigned queue_depth,
				  const char *name);
void wb_pool_ctx_destroy(struct wb_ctx *x);
/*
 * One visit of a pool thread to @b: nonblocking SYNC_NONE writeback of
 * at most @budget pages for @why (background or periodic), then the
 * metadata when due, then every write of the visit completed (the thread
 * owns its completions and leaves nothing in flight behind it).
 * *@congested: the device filled up meanwhile; *@more_io: inodes were
 * left for later. Returns pages written. Context: pool thread, no lock.
 */
long wb_pool_visit(struct wb_ctx *x, struct bdi *b, enum wb_reason why, long budget,
		   bool nonblocking, bool *congested, bool *more_io);
/* Is there anything for background or periodic writeback? Context: b->lock held. */
bool wb_has_dirty_io_locked(struct bdi *b);
/* The domain over its background threshold, or @b over its strictlimit share. */
bool wb_over_bg(struct bdi *b);

/* pdflush.c */
void flusher_pool_register(struct flusher_pool *p, struct bdi *b);
/* Leave the pool; waits until no pool thread is inside @b. */
void flusher_pool_unregister(struct flusher_pool *p, struct bdi *b);
/* Background writeback asked for on @b. Context: any; no bdi lock held. */
void flusher_pool_wakeup(struct flusher_pool *p, struct bdi *b);
/* @b's queue has room again: wake congestion waiters. Context: no lock held. */
void flusher_pool_uncongested(struct flusher_pool *p);

#endif
