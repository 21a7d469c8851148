/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * IO-less dirty throttling (doc/algorithms.md §2): writers are never made to
 * write; after dirtying pages they are told how long to pause, computed
 * from the device's write bandwidth, a per-device dirty ratelimit that
 * converges to write_bw / N, and the position of the dirty count against
 * a setpoint between the freerun ceiling and the (smoothed) hard limit.
 *
 * One throttle_domain per cache (the kernel's global_wb_domain); one
 * throttle_wb per backing device in it; per-task state keyed by the pid a
 * FUSE request carries. The module does no I/O and does not sleep: the
 * caller delivers the pause (fuse/fuse_io.c defers the write's reply), and
 * the counters come from callbacks, so a unit test can drive it with a
 * fake clock and a simulated device.
 *
 * Locking: one mutex per domain guards the controller state, the task
 * table and the trace ring. The stat and update_bw callbacks run under it
 * and may take only leaf locks (the flusher's bw_lock); kick runs after it
 * is dropped, because the flusher asks for thresholds (and so takes the
 * domain lock) under its own bdi->lock.
 */
#ifndef WBCFS_THROTTLE_H
#define WBCFS_THROTTLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "wbcfs/lib/list.h"

#define THROTTLE_MAX_PAUSE_MS_DEFAULT 200	/* MAX_PAUSE = HZ/5 */
#define THROTTLE_MAX_PAUSE_MS_MAX 10000

/*
 * ioless: paced pauses (3.2 on). simple: block while over the limit.
 * writeback: the dirtier writes its device's pages itself, as
 * balance_dirty_pages did from 2.6.24 to 3.1 (throttle_writeback_*).
 */
enum throttle_mode { THROTTLE_IOLESS, THROTTLE_SIMPLE, THROTTLE_WRITEBACK };

/* The global domain's counters (pages), read at each evaluation. */
struct throttle_global {
	unsigned long nr_dirty;		/* FILE_DIRTY */
	unsigned long nr_writeback;	/* WRITEBACK */
	unsigned long thresh;		/* from the tunables and dirtyable memory */
	unsigned long bg_thresh;
};

/* One device's counters (pages, pages/s). */
struct throttle_wb_stat {
	long reclaimable;	/* dirty pages */
	long writeback;		/* under writeback */
	long dirtied;		/* cumulative */
	long written;		/* cumulative */
	long write_bw;		/* estimate */
	long avg_write_bw;	/* spike-filtered estimate */
};

struct throttle_wb;

struct throttle_wb_ops {
	/* Current counters of the device. */
	void (*stat)(struct throttle_wb *tw, struct throttle_wb_stat *st);
	/* Fold completed writes into the bandwidth estimate at @now_ms
	 * (the estimator ignores calls within 200 ms of its last update). */
	void (*update_bw)(struct throttle_wb *tw, uint64_t now_ms);
	/* Start background writeback, without waiting. Called without the
	 * domain lock. */
	void (*kick)(struct throttle_wb *tw);
};

struct throttle_domain;

/* A flex proportion's share (lib/flex_proportions.c's role). */
struct throttle_fprop_local {
	uint64_t events;
	uint64_t period;	/* the domain's period the count is scaled to */
};

struct throttle_wb {
	struct list_head node;			/* domain lock: on dom->wbs */
	struct throttle_domain *dom;
	const struct throttle_wb_ops *ops;
	void *arg;				/* the owner's (ops use it) */
	char name[16];				/* "MAJ:MIN" */
	/* tunables, read at each evaluation */
	_Atomic unsigned min_ratio;		/* percent of thresh guaranteed, 0-100 */
	_Atomic unsigned max_ratio;		/* percent of thresh at most, 0-100 */
	_Atomic bool strictlimit;		/* throttle on this device's own limit */
	/* controller state, domain lock */
	struct throttle_fprop_local completions;
	long dirty_ratelimit;			/* pages/s */
	long balanced_dirty_ratelimit;		/* pages/s */
	uint64_t rl_stamp_ms;			/* last ratelimit update */
	long dirtied_stamp;			/* stat.dirtied at rl_stamp_ms */
	uint64_t last_throttled_ms;		/* last evaluation outside freerun */
	int rl_fresh;				/* updates that move halfway to balanced */
	long fast_bw;				/* avg_write_bw when they were granted */
	bool dirty_exceeded;
	/* last values, for /.wbcfs/bdi (domain lock) */
	long last_task_ratelimit, last_dirty_rate;
};

/* One task's throttling state (the kernel keeps it in task_struct). */
struct throttle_task {
	struct throttle_task *next;	/* hash chain */
	pid_t pid;
	long nr_dirtied;		/* pages dirtied and not yet paid for */
	long nr_dirtied_pause;		/* evaluate again after this many */
	uint64_t paused_when;		/* ms; 0 = never (think time unknown) */
	uint64_t last_seen;		/* ms: last dirtying */
	uint64_t start_ms;		/* the current write's first evaluation */
	bool at_limit;			/* paused at the hard limit: look again */
};

/* Statistics (domain lock for writes, atomics for readers). */
struct throttle_stats {
	_Atomic long nr_pauses;		/* pauses handed out */
	_Atomic long pause_ms_total;	/* their sum */
	_Atomic long pause_ms_max;
	_Atomic long nr_evaluations;	/* balance_dirty_pages calls outside freerun */
	_Atomic long nr_hard_limit;	/* pauses because dirty >= limit */
	_Atomic long nr_tasks;		/* tasks in the table */
	_Atomic long nr_tasks_reaped;
	_Atomic long trace_records;
	_Atomic long trace_lost;	/* records dropped (ring full, oldest first) */
	/* throttle=writeback */
	_Atomic long nr_dirtier_evals;	/* looks that found the device over */
	_Atomic long nr_dirtier_pages;	/* pages the dirtiers wrote */
	_Atomic long nr_dirtier_waits;	/* their congestion waits */
};

/*
 * A trace record: one throttle decision (balance_dirty_pages), one bandwidth update (bw)
 * or one change of the cache's target size (cache).
 */
enum throttle_trace_type { TT_BDP = 1, TT_BW = 2, TT_CACHE = 3 };

/* The cache record (pages); @reason is a static string. */
struct throttle_trace_cache {
	unsigned long target, resident, ceiling, floor, free, dirty;
	const char *reason;
	long pressure;		/* the caller's measure of pressure; -1 = none */
};

struct throttle_trace_rec {
	uint64_t seq;
	uint64_t ms;			/* since the domain was created */
	uint16_t type;
	char bdi[16];
	union {
		struct {
			unsigned long limit, setpoint, dirty, bdi_setpoint, bdi_dirty;
			unsigned long dirty_ratelimit, task_ratelimit;	/* KB/s */
			long dirtied, dirtied_pause;
			long paused, pause, period, think;		/* ms */
			pid_t pid;
		} balance_dirty_pages;
		struct {
			unsigned long write_bw, avg_write_bw, dirty_rate;	/* KB/s */
			unsigned long dirty_ratelimit, task_ratelimit;
			unsigned long balanced_dirty_ratelimit;
			long dirtied, written;				/* pages */
			unsigned long nr_dirty, nr_writeback, bg_thresh, thresh, limit;
		} bw;
		struct throttle_trace_cache cache;
	};
};

#define THROTTLE_TASK_HASH 256

struct lock_class;
extern struct lock_class lc_throttle_lock;	/* throttle_domain->lock */

struct throttle_domain {
	pthread_mutex_t lock;
	void (*global)(void *arg, struct throttle_global *g);
	void *global_arg;
	struct list_head wbs;			/* lock */
	_Atomic unsigned nr_wbs;		/* changed under lock: devices in wbs */
	/* tunables */
	_Atomic unsigned max_pause_ms;		/* 1-10000; default 200 */
	_Atomic int mode;			/* enum throttle_mode */
	/* global limit state (lock) */
	unsigned long dirty_limit;		/* smoothed hard limit */
	uint64_t dirty_limit_stamp;
	/* writeback completions, halved every 3 s (lock) */
	uint64_t fprop_events;
	uint64_t fprop_period;
	uint64_t fprop_period_start;
	/* tasks (lock) */
	struct throttle_task *tasks[THROTTLE_TASK_HASH];
	long dirty_leaks;			/* unpaid pages of reaped tasks */
	long nr_active;				/* tasks dirtying in the last second */
	uint64_t nr_active_stamp;		/* when it was counted */
	uint64_t reap_stamp;
	bool (*task_alive)(pid_t pid);		/* NULL: kill(pid, 0) */
	/* trace ring (lock) */
	struct throttle_trace_rec *ring;
	size_t ring_size;			/* power of two */
	uint64_t ring_seq;			/* next record's seq */
	pthread_cond_t ring_cond;		/* broadcast on new records */
	uint64_t start_ms;
	struct throttle_stats stats;
};

/* What one evaluation decided. */
struct throttle_verdict {
	long pause_ms;		/* > 0: pause this long, then call throttle_resume */
	bool hard_limit;	/* dirty >= limit: the pause repeats until under it */
	bool kick;		/* start background writeback (done by the caller of
				 * balance_dirty_pages, after the domain lock is dropped) */
};

/**
 * Init @d; @global fills the global counters at each evaluation.
 * @ring_records: trace ring size (rounded up to a power of two; 0 = no
 * trace). Returns 0 or -ENOMEM.
 */
int throttle_domain_init(struct throttle_domain *d,
			 void (*global)(void *arg, struct throttle_global *g), void *arg,
			 size_t ring_records);
void throttle_domain_destroy(struct throttle_domain *d);

/** Add a device to @d. Its ratelimits start at 100 MB/s (the kernel's INIT_BW). */
void throttle_wb_init(struct throttle_wb *tw, struct throttle_domain *d, const char *name,
		      const struct throttle_wb_ops *ops, void *arg);
void throttle_wb_remove(struct throttle_wb *tw);

/** @nr pages of @tw finished writeback: its share of the threshold grows. */
void throttle_wb_completed(struct throttle_wb *tw, long nr);

/**
 * Task @pid dirtied @nr pages of @tw (balance_dirty_pages_ratelimited):
 * when its count reaches its poll interval the controller runs once.
 * Returns the verdict; pause_ms 0 means go on at once.
 */
struct throttle_verdict throttle_dirtied(struct throttle_wb *tw, pid_t pid, long nr);
/**
 * The pause handed out for @pid ended: evaluate again when the domain is
 * still over its hard limit or the task still owes pages (a write larger
 * than one pause pays in several). Returns the next verdict.
 */
struct throttle_verdict throttle_resume(struct throttle_wb *tw, pid_t pid);

/**
 * The device's share of the thresholds now, as the controller computes it
 * (pages): wb_thresh and wb_bg_thresh, plus the global thresh and bg_thresh.
 */
void throttle_wb_thresholds(struct throttle_wb *tw, unsigned long *wb_thresh,
			    unsigned long *wb_bg, unsigned long *thresh, unsigned long *bg);
/**
 * @tw's share of the domain's recent writeback completions (the flex
 * proportion its dirty threshold follows), in thousandths; 0 before any.
 */
unsigned throttle_wb_share(struct throttle_wb *tw);

/**
 * Copy trace records with seq >= *@cursor into @out (at most @max);
 * *@lost is set to how many the reader missed (overwritten). Advances
 * *@cursor. Returns the number copied.
 */
size_t throttle_trace_read(struct throttle_domain *d, uint64_t *cursor,
			   struct throttle_trace_rec *out, size_t max, uint64_t *lost);
/** Wait until a record with seq >= @cursor exists or @timeout_ms passes. */
void throttle_trace_wait(struct throttle_domain *d, uint64_t cursor, unsigned timeout_ms);
/**
 * The cache's target fell: the smoothed hard limit, which otherwise comes
 * down 1/32 of the gap per 200 ms, drops at once to @thresh or to the
 * pages dirty now, whichever is higher, so that writers are held to the
 * new limits instead of filling a shrinking cache with dirty pages.
 * Context: takes the domain lock (leaf).
 */
void throttle_domain_lower_limit(struct throttle_domain *d, unsigned long thresh,
				 unsigned long dirty);
/** Record a change of the cache's target. Context: takes the domain lock (leaf). */
void throttle_trace_cache(struct throttle_domain *d, const struct throttle_trace_cache *rec);
/** Format one record as a trace line (with '\n'). Returns its length. */
int throttle_trace_format(const struct throttle_trace_rec *r, char *buf, size_t len);

/** The oldest-first position a new reader starts from. */
uint64_t throttle_trace_start(struct throttle_domain *d);

/**
 * throttle=writeback, balance_dirty_pages_ratelimited before 3.2: task
 * @pid dirtied @nr pages of @tw; true once it has dirtied @ratelimit
 * since its last look (8 while its device is over its limit).
 */
bool throttle_writeback_due(struct throttle_wb *tw, pid_t pid, long nr, long ratelimit);
/**
 * One look of that balance_dirty_pages: true when the dirtier must write
 * (its device is over its share of the threshold, and the domain's dirty
 * and writeback pages past the middle of the background and hard
 * thresholds). Kicks background writeback when the domain's dirty pages
 * are over the background threshold.
 */
bool throttle_writeback_over(struct throttle_wb *tw);

/** Parse "ioless"/"simple"/"writeback". Returns 0 or -EINVAL. */
int throttle_mode_parse(const char *s, size_t len, enum throttle_mode *out);
const char *throttle_mode_name(enum throttle_mode m);

/** Tasks in the table (for tests). */
long throttle_nr_tasks(struct throttle_domain *d);

#endif
