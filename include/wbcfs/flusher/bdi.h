/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Backing device (bdi) and its flusher workers, after fs/fs-writeback.c and
 * doc/algorithms.md §3: dirty inode lists (b_dirty, b_io, b_more_io), work items
 * (sync, background, periodic/kupdate, reclaim), chunk sizing, TOWRITE
 * tagging for sync, and write bandwidth estimation. The flusher walks dirty
 * pages of an inode in index order, asks the owner (bdi_ops) to map them to
 * device blocks (delayed allocation happens there), merges physically
 * adjacent pages into large writes and submits them through an io engine.
 * The metadata inode (the device's own mapping) is written only after all
 * data writes of the round have completed: ordered mode.
 */
#ifndef WBCFS_BDI_H
#define WBCFS_BDI_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "wbcfs/lib/list.h"
#include "wbcfs/cache/mapping.h"
#include "wbcfs/blkdev.h"
#include "wbcfs/cache.h"
#include "wbcfs/flusher/pdflush.h"

/* wb_inode.state bits */
#define I_DIRTY_PAGES	0x1	/* has dirty pages */
#define I_DIRTY_INODE	0x2	/* size/times changed: owner's write_inode needed */
#define I_SYNC		0x4	/* a flusher is writing this inode */
#define I_FREEING	0x8	/* being evicted: never queue again */

/* wb_inode.fault bits (fault injection, honoured only with bdi_config.fault_inject) */
#define WB_FAULT_READ	0x1	/* reads of its pages fail with EIO */
#define WB_FAULT_WRITE	0x2	/* writes of its pages fail with EIO */
#define WB_FAULT_FLUSH	0x4	/* the device's cache flushes fail with EIO (a
				 * device-wide fault: bdi_set_fault_flush) */

/* map_pages result for a page that must not be written (beyond EOF). */
#define BDI_PBLK_SKIP UINT64_MAX
/* map_pages result for a page to map again after ops->alloc_wait. */
#define BDI_PBLK_AGAIN (UINT64_MAX - 1)

enum wb_sync_mode { WB_SYNC_NONE, WB_SYNC_ALL };

struct bdi;

/* Embedded in the owner's inode; mapping->host points here. */
struct wb_inode {
	struct list_head io_list;	/* bdi->list_lock: on b_dirty/b_io/b_more_io or empty */
	uint64_t dirtied_when;		/* bdi->list_lock: ms, first dirtying */
	unsigned state;			/* bdi->list_lock: I_* bits */
	struct mapping *mapping;	/* constant */
	struct bdi *bdi;		/* constant */
	bool is_meta;			/* constant: device mapping, index == block */
	_Atomic unsigned fault;		/* atomic: WB_FAULT_* (testing aid) */
	_Atomic unsigned long nr_write_errors;	/* atomic: failed page writes, cumulative */
	uint64_t retry_after_ms;	/* bdi->list_lock: after a failed write, background
					 * and periodic writeback leave it alone until then */
	unsigned backoff_ms;		/* bdi->list_lock: the current retry delay */
};

struct bdi_ops {
	/*
	 * Map @n dirty pages of @wi (indices ascending, @index[]) to device
	 * blocks in @pblk[] (block = page = 4 KiB), allocating delayed blocks,
	 * or BDI_PBLK_SKIP, or BDI_PBLK_AGAIN (from some page to the end of
	 * the batch: there is room only after alloc_wait). Returns 0 or -errno (-ENOSPC, -EIO): then no page
	 * of the batch is written and the error is recorded on the mapping.
	 * Context: flusher thread; may take the owner's locks and allocate
	 * cache pages (the worker has completed its own writes first). The
	 * batch's pages are locked by the flusher during the call: do not
	 * lock pages of @wi nor wait on their writeback here.
	 */
	int (*map_pages)(struct bdi *b, struct wb_inode *wi, const uint64_t *index,
			 unsigned n, uint64_t *pblk);
	/* Write @wi's size/times into the metadata cache. Returns 0 or -errno. */
	int (*write_inode)(struct bdi *b, struct wb_inode *wi, enum wb_sync_mode mode);
	/* Put filesystem-wide metadata (superblock, bitmaps) into the
	 * metadata cache before the metadata pass of a sync. */
	int (*sync_fs)(struct bdi *b);
	/*
	 * Optional (needed by a map_pages that returns BDI_PBLK_AGAIN): make
	 * the room such pages wait for (the owner commits the transaction
	 * whose frees they need). Returns 0 (map them again) or -errno (they
	 * stay dirty, the error goes on the mapping). Context: flusher
	 * thread, its own writes completed, no page of @wi locked by it.
	 */
	int (*alloc_wait)(struct bdi *b, struct wb_inode *wi);
	/*
	 * Optional: writes of @wi's pages from @index on failed with @err and
	 * are kept dirty; called at the first failure after a success, not at
	 * every retry (the owner logs it). Context: flusher thread, from I/O
	 * completion; must not sleep or take locks that wait on writeback.
	 */
	void (*write_error)(struct bdi *b, struct wb_inode *wi, uint64_t index, int err);
	/*
	 * Optional: the write (or the mapping) of page @index of @wi failed
	 * while the page's block was new (PG_newblock: just allocated, or
	 * unwritten until this write), so the block holds stale data that
	 * the committed metadata must not point at as written. Called before
	 * the write's ordered epoch ends. Context: flusher thread, maybe
	 * from I/O completion; must not sleep or wait on writeback.
	 */
	void (*newblock_failed)(struct bdi *b, struct wb_inode *wi, uint64_t index);
	/*
	 * Optional: page @p of a metadata inode (is_meta) reached the
	 * device; called before its writeback ends (the owner's journal
	 * learns which logged blocks are home). Context: I/O completion;
	 * must not sleep; leaf locks only.
	 */
	void (*meta_written)(struct bdi *b, struct page *p);
	/*
	 * Optional: metadata pages the owner holds back from writeback
	 * (PG_jheld: a journal's committed blocks, left dirty for the
	 * flusher to take home once they expire, as jbd2 leaves them) that
	 * were held @expire_ms ago or earlier become writable, dirty on the
	 * metadata inode as before. Returns how many. Called by each
	 * periodic pass before it decides on the metadata: whatever else
	 * goes on (no commit, no sync), a held page's expiry sends it
	 * home. Context: flusher thread, its own writes completed, no page
	 * locked; may take the owner's locks.
	 */
	unsigned long (*meta_expire)(struct bdi *b, uint64_t expire_ms);
};

struct bdi_config {
	int fd;				/* device, opened O_RDWR|O_DIRECT */
	const char *name;		/* "MAJ:MIN" or the image path */
	enum io_engine_type engine;
	unsigned queue_depth;		/* per flusher, >= 1 */
	unsigned max_io_kb;		/* largest merged write, >= 4 */
	unsigned nr_flushers;		/* >= 1 */
	struct cache *cache;
	const struct bdi_ops *ops;
	void *owner;
	bool fault_inject;		/* honour wb_inode.fault (mount option fault_inject) */
	struct flusher_pool *pool;	/* NULL: this bdi's workers do background and
					 * periodic writeback; else the pool does
					 * (pdflush.h), the workers keep the rest */
};

struct bdi_stats {
	_Atomic long reclaimable;	/* dirty pages of this bdi */
	_Atomic long writeback;		/* pages under writeback */
	_Atomic long dirtied;		/* cumulative */
	_Atomic long written;		/* cumulative */
	_Atomic long write_bw;		/* pages/s, estimate */
	_Atomic long avg_write_bw;	/* pages/s, smoothed */
	_Atomic long write_errors;	/* cumulative failed page writes */
	_Atomic long nr_ios;		/* cumulative device writes submitted (merged
					 * requests, not pages) */
	_Atomic long syncs;		/* cumulative bdi_sync calls: sync(2) and
					 * syncfs from anyone, mount, umount */
	_Atomic long alloc_waits;	/* cumulative alloc_wait calls that let a
					 * batch's pages be mapped again */
	_Atomic long meta_turns;	/* cumulative metadata writes taken in the
					 * rotation of a background or periodic pass */
	_Atomic long pool_ns;		/* cumulative ns pdflush pool threads spent in
					 * this device: writing it and waiting for its
					 * completions (flusher_model=pdflush) */
};

struct bdi;	/* private layout in flusher/bdi_i.h */

/* mapping_ops that account dirtying to the bdi of the wb_inode in m->host. */
extern const struct mapping_ops bdi_mapping_ops;

/** Create the bdi and start its flushers. Returns 0 or -errno. */
int bdi_create(struct bdi **out, const struct bdi_config *cfg);
/** Stop the flushers (after the caller's final bdi_sync) and free. */
void bdi_destroy(struct bdi *b);

/** Init a wb_inode for @m; set m->host = wi before any page is dirtied. */
void bdi_inode_init(struct bdi *b, struct wb_inode *wi, struct mapping *m, bool is_meta);
/** Register the device's own mapping (metadata). */
void bdi_set_meta(struct bdi *b, struct wb_inode *meta);
/**
 * Mark @wi dirty (I_DIRTY_PAGES and/or I_DIRTY_INODE): first dirtying stamps
 * dirtied_when and queues it on b_dirty; schedules periodic writeback.
 */
void bdi_mark_inode_dirty(struct bdi *b, struct wb_inode *wi, unsigned flags);
/** Evict: wait for I_SYNC to clear, set I_FREEING, unlink from the lists. */
void bdi_inode_remove(struct bdi *b, struct wb_inode *wi);

/** Ask for writeback without waiting (cache_ops.wakeup_flusher lands here). */
void bdi_wakeup(struct bdi *b, long nr_pages, enum wb_reason why);

/**
 * fsync data part: write every dirty page of @wi in [start, end] (page
 * indices) with WB_SYNC_ALL and wait, then its write_inode unless
 * @datasync and only times changed. Returns 0, -EIO when a page write of
 * @wi failed meanwhile (the page stays dirty; the error is also recorded
 * on the mapping, for each opener's cursor), or write_inode's -errno.
 */
int bdi_sync_inode(struct bdi *b, struct wb_inode *wi, uint64_t start, uint64_t end,
		   bool datasync);
/**
 * bdi_sync_inode in two halves, for a caller with work of its own to do
 * while the data writes are in flight (a journal commit, its log writes).
 * bdi_sync_inode_start() writes as bdi_sync_inode does, inode included,
 * but returns with the data writes in flight on @io, written before its
 * inode is: only for a caller whose metadata reaches the device after the
 * data it points at (a journal in ordered mode). Only the caller completes
 * those writes: bdi_sync_io_step() completes one at least, waiting, and is
 * false when none is left. The caller must not sleep on a thread that may
 * wait for them (an ordered wait: step while trying its lock, or drain
 * first). bdi_sync_inode_finish() completes the rest, waits for writes of
 * the range that others started, and returns what bdi_sync_inode would.
 */
struct wb_ctx;
struct bdi_sync_io {
	struct wb_ctx *x;		/* its writes, on this context's engine */
	struct wb_inode *wi;
	uint64_t start, end;
	unsigned long errors;		/* wi->nr_write_errors at the start */
	int ret;			/* write_inode's */
	struct bdi_sync_io *next;	/* the caller's: bdi_sync_io_step steps a
					 * chain (reset by bdi_sync_inode_start) */
	bool borrowed;			/* @x is another io's (bdi_sync_inode_start_with) */
};
void bdi_sync_inode_start(struct bdi *b, struct wb_inode *wi, uint64_t start, uint64_t end,
			  bool datasync, struct bdi_sync_io *io);
/*
 * bdi_sync_inode_start for one more inode of a caller syncing several
 * (a group of fsyncs): its writes go on the context of @owner, an io
 * started before and finished after this one, so that the caller never
 * sleeps (waiting for a context of its own) with writes in flight that
 * only it completes: a commit's ordered wait elsewhere would wait for
 * them forever. @owner without a context (none was free): as
 * bdi_sync_inode_start.
 */
void bdi_sync_inode_start_with(struct bdi *b, struct wb_inode *wi, uint64_t start,
			       uint64_t end, bool datasync, struct bdi_sync_io *io,
			       struct bdi_sync_io *owner);
bool bdi_sync_io_step(void *io);
int bdi_sync_inode_finish(struct bdi *b, struct bdi_sync_io *io);
/** Write every dirty metadata page and wait (data must be written first). */
int bdi_sync_meta(struct bdi *b);
/**
 * Ordered data: bdi_ordered_mark() closes the current epoch and returns
 * it; bdi_ordered_wait() waits until every data write whose blocks were
 * mapped (allocated) before that mark has completed. Later batches do not
 * hold it up. Call them in pairs, one pair at a time. Context of the
 * wait: no lock that writeback takes; not a flusher thread.
 */
int bdi_ordered_mark(struct bdi *b);
void bdi_ordered_wait(struct bdi *b, int mark);
/**
 * The device's volatile cache to stable media (blkdev_flush). -EIO
 * without issuing it while bdi_set_fault_flush is on.
 */
int bdi_flush_device(struct bdi *b);
/**
 * sync(2)/syncfs/umount: all data inodes with WB_SYNC_ALL, their
 * write_inode, ops->sync_fs, the metadata, then the device cache.
 */
int bdi_sync(struct bdi *b, enum wb_reason why);

/**
 * Synchronous read through the bdi's fd (for read misses) of pages of @wi
 * (NULL: not a file's pages). Returns bytes or -errno; -EIO when @wi has
 * WB_FAULT_READ and the bdi was created with fault_inject.
 */
long bdi_read(struct bdi *b, struct wb_inode *wi, const struct iovec *iov, int iovcnt,
	      uint64_t off);
/**
 * Fault injection (testing aid): set @wi's WB_FAULT_* bits. Returns 0, or
 * -EPERM when the bdi was not created with fault_inject.
 */
int bdi_inode_set_fault(struct bdi *b, struct wb_inode *wi, unsigned fault);
/**
 * Fault injection (testing aid): from now on each device write of any
 * inode, the metadata's included, fails with EIO with probability
 * @per_mille / 1000 (0: none). Returns 0, -EINVAL above 1000, or -EPERM
 * when the bdi was not created with fault_inject.
 */
int bdi_set_fault_rate(struct bdi *b, unsigned per_mille);
unsigned bdi_fault_rate(struct bdi *b);
/**
 * Fault injection (testing aid): with @after >= 0, the next @after device
 * cache flushes succeed and every one after them fails with EIO, as a
 * device whose cache can no longer be written out; -1 turns it off.
 * Flushes are bdi_flush_device's and its users' own (the journal's FUA
 * commit block), each of which asks bdi_flush_fault_take. Returns 0, or
 * -EPERM when the bdi was not created with fault_inject.
 */
int bdi_set_fault_flush(struct bdi *b, int after);
/* Is the flush fault armed (counting down or failing)? */
bool bdi_flush_faulted(struct bdi *b);
/* A flush is about to be issued: true when it must fail instead. */
bool bdi_flush_fault_take(struct bdi *b);

const struct bdi_stats *bdi_get_stats(const struct bdi *b);

/* Bandwidth estimator state, doc/algorithms.md §2.6 (pages, ms). */
struct bdi_bw {
	uint64_t stamp_ms;		/* last update */
	long written_stamp;		/* pages written at stamp */
	long write_bw;			/* pages/s */
	long avg_write_bw;		/* pages/s, spike-filtered */
	uint64_t measured_ms;		/* busy time folded in so far, up to one period:
					 * below it the estimate is the plain average of
					 * what was measured (warm-up) */
};
/**
 * Fold the pages written since the last update into the estimate; does
 * nothing within 200 ms of the last update. Until a whole period (~4 s)
 * has been measured, the estimate is the average over the measured time
 * (the initial guess carries no weight), then the kernel's running one. Pure: exposed for unit tests
 * and the throttling controller.
 */
void bdi_bw_update(struct bdi_bw *bw, uint64_t now_ms, long written_total);
/**
 * bdi_bw_update, except that while the device is @idle (nothing under
 * writeback) and nothing, or only a trickle (under 1/8 of the estimate's
 * rate), was written since the last update, the interval is not counted:
 * an idle device is not a slow one. Pure.
 */
void bdi_bw_sample(struct bdi_bw *bw, uint64_t now_ms, long written_total, bool idle);
/** Fold this bdi's completed writes into its estimate (bdi_bw_sample under bw_lock). */
void bdi_bw_feed(struct bdi *b, uint64_t now_ms);
/** The bdi's place in the cache's throttle domain (cache/throttle.c). */
struct throttle_wb *bdi_throttle_wb(struct bdi *b);
/**
 * A writeback round starts: if the device was idle (@idle: nothing under
 * writeback) and the last update is more than 1 s old, restart the stamps
 * at (@now_ms, @written_total) so the idle gap does not dilute the next
 * estimate (the kernel's wb_bandwidth_estimate_start). Pure.
 */
void bdi_bw_start(struct bdi_bw *bw, uint64_t now_ms, long written_total, bool idle);
/* bdi_state() bits, numbered as the kernel's WB_* state bits */
#define BDI_STATE_RUNNING	0x1	/* flushers running, not stopping (WB_registered) */
#define BDI_STATE_WRITEBACK	0x2	/* pages under device I/O (WB_writeback_running) */
#define BDI_STATE_DIRTY_IO	0x4	/* inodes on b_dirty/b_io/b_more_io (WB_has_dirty_io) */
#define BDI_STATE_BG_PENDING	0x8	/* background writeback asked for, not started */
#define BDI_STATE_PERIODIC	0x10	/* a periodic (kupdate) pass is scheduled */

/**
 * The device's queue is full: its writes in flight, from every thread,
 * reached queue_depth, or its owner said so (bdi_set_congested). Pool
 * threads pass a congested device over (nonblocking writeback); its own
 * workers just wait for room. Context: any; lock-free.
 */
bool bdi_write_congested(struct bdi *b);
/**
 * throttle=writeback: the calling thread (a dirtier) writes up to
 * @nr_pages of @b itself, blocking on a full queue, with an engine of its
 * own. Returns pages written.
 */
long bdi_writeback_dirtier(struct bdi *b, long nr_pages);
/** congestion_wait: until @b's full queue has room, or @ms pass. */
void bdi_congestion_wait(struct bdi *b, unsigned ms);
/**
 * The owner declares the device congested (@on) or no longer, whatever its
 * queue holds (the kernel's set_bdi_congested, as FUSE and NFS use it).
 */
void bdi_set_congested(struct bdi *b, bool on);

/** A snapshot of the BDI_STATE_* bits, for /.wbcfs/bdi. Takes bdi->lock. */
unsigned bdi_state(struct bdi *b);
/** Inode counts on the lists, for /.wbcfs/bdi. */
void bdi_list_counts(struct bdi *b, long *b_dirty, long *b_io, long *b_more_io);
void *bdi_owner(const struct bdi *b);

#endif
