/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Memory pressure: what the machine and the daemon's memory cgroup say
 * (struct mem_signals), the controller that turns it into the cache's
 * target size (struct memctl, a pure function of the signals and the
 * clock they carry), and the watcher thread that reads the signals
 * (struct memwatch: PSI triggers, cgroup v1 pressure_level and usage
 * threshold eventfds, cgroup v2 memory.events, /proc/meminfo, a timer).
 *
 * This file decides sizes; it does not move pages. The watcher hands each
 * new target to a callback (the cache's cache_set_target() in the daemon,
 * a recorder in tests), which reclaims clean pages and writes dirty ones
 * back. The default cache size and the daemon's oom_score_adj live here
 * too, as the other halves of "the cache fits where the daemon runs".
 */
#ifndef WBCFS_PRESSURE_H
#define WBCFS_PRESSURE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Events seen since the previous step (mem_signals.events). */
enum mem_event {
	MEM_EV_PSI = 1u << 0,		/* the daemon's cgroup's PSI trigger fired */
	MEM_EV_MEDIUM = 1u << 1,	/* v1 pressure_level medium, v2 memory.events high */
	MEM_EV_CRITICAL = 1u << 2,	/* v1 pressure_level critical, v2 max/oom */
	MEM_EV_THRESHOLD = 1u << 3,	/* v1 usage crossed limit - headroom (a wakeup:
					 * the deficit is read from usage) */
	MEM_EV_PSI_SYS = 1u << 4,	/* the machine's PSI trigger fired: it counts only
					 * near a bound (another cgroup at its own limit
					 * stalls the machine's PSI too) */
};

/* One sample of the memory signals; 0 = unknown for every size. */
struct mem_signals {
	uint64_t now_ms;		/* monotonic ms: the controller's only clock */
	uint64_t cg_limit_bytes;	/* the tightest limit over the daemon's cgroup
					 * and its ancestors (v2: min(max, high)); 0: none */
	uint64_t cg_usage_bytes;	/* that cgroup's working set: usage less its
					 * inactive file pages, which the kernel drops
					 * before it would OOM */
	uint64_t cg_limit_hits;		/* times that cgroup's charges met its limit
					 * (v1 memory.failcnt, v2 memory.events max) */
	uint64_t mem_available_bytes;	/* /proc/meminfo MemAvailable */
	uint64_t mem_total_bytes;	/* /proc/meminfo MemTotal */
	uint64_t min_free_bytes;	/* /proc/sys/vm/min_free_kbytes */
	unsigned events;		/* enum mem_event bits */
};

/* The controller's rules; memctl_config_default() fills the defaults. */
struct memctl_config {
	size_t page_bytes;		/* the cache's page size */
	size_t floor_pages;		/* cache_min: never below */
	size_t ceiling_pages;		/* cache_size: never above */
	uint64_t headroom_min_bytes;	/* cgroup headroom at least [64 MiB] */
	unsigned headroom_shift;	/* ... and limit >> shift [4: 1/16] */
	unsigned avail_total_shift;	/* MemAvailable floor: MemTotal >> shift [5: 1/32] */
	unsigned hold_ms;		/* no pressure this long before growing [5000] */
	unsigned grow_shift;		/* growth per second: ceiling >> shift [5: 1/32] */
	unsigned cut_interval_ms;	/* an event level cuts at most this often [250] */
	unsigned settle_ms;		/* after a deficit cut, while usage does not rise
					 * and the limit is not hit, only the deficit's
					 * growth cuts for this long [1000] */
	unsigned horizon_ms;		/* others' growth is projected this far ahead,
					 * while usage rises [500] */
};

enum memctl_level { MEMCTL_PSI, MEMCTL_MEDIUM, MEMCTL_CRITICAL, MEMCTL_NR_LEVELS };

struct memctl {
	struct memctl_config cfg;	/* owner's lock (the watcher's) */
	size_t target_pages;		/* the current decision */
	uint64_t last_pressure_ms;	/* last step that saw pressure; 0: never */
	uint64_t last_step_ms;		/* 0: no step yet */
	uint64_t last_cut_ms[MEMCTL_NR_LEVELS];	/* per event level; 0: never */
	uint64_t last_deficit_ms;	/* the last full deficit cut; 0: never */
	uint64_t last_deficit_bytes;	/* the deficit cut for since then */
	uint64_t last_deficit_hits;	/* cg_limit_hits at that cut */
	uint64_t prev_ms;		/* the previous step's sample: its time, */
	uint64_t prev_usage_bytes;	/* cgroup usage, */
	uint64_t prev_avail_bytes;	/* MemAvailable (0: none), */
	size_t prev_resident_pages;	/* and what the cache held */
	size_t grow_frac_pages;		/* growth not yet whole pages, x1000 */
	const char *reason;		/* why the last change: "cgroup", "psi", ... */
	long pressure;			/* the last change's pressure: deficit pages for
					 * "cgroup"/"available", cut pages for events */
};

void memctl_config_default(struct memctl_config *cfg, size_t page_bytes, size_t floor_pages,
			   size_t ceiling_pages);

/** Start at the ceiling (the cache grows on demand; pressure brings it down). */
void memctl_init(struct memctl *m, const struct memctl_config *cfg);

/**
 * One decision: the new target in pages, from the signals @s (their now_ms
 * is the clock) and what the cache holds. A target below @resident_pages
 * asks the cache to give the difference back (dirty pages after their
 * writeback). m->reason and m->pressure say why when it changed.
 */
size_t memctl_step(struct memctl *m, const struct mem_signals *s, size_t resident_pages,
		   size_t dirty_pages);

/** New ceiling or floor at run time (cache_size= through /.wbcfs/). */
void memctl_set_bounds(struct memctl *m, size_t floor_pages, size_t ceiling_pages);

/** The cgroup headroom and the MemAvailable floor the rules keep, in bytes. */
uint64_t memctl_headroom_bytes(const struct memctl_config *cfg, uint64_t limit_bytes);
uint64_t memctl_avail_floor_bytes(const struct memctl_config *cfg, const struct mem_signals *s);

/**
 * The default cache_size: a quarter of the smaller of RAM and the cgroup
 * limit (@cg_limit_bytes, 0: none), at most half of MemAvailable (0:
 * unknown), never below 64 MiB.
 */
uint64_t mem_default_cache_bytes(uint64_t ram_bytes, uint64_t cg_limit_bytes,
				 uint64_t avail_bytes);

/** Read RAM, MemAvailable and the daemon's cgroup limit; then as above. */
uint64_t mem_default_cache_size(void);

/**
 * Write /proc/self/oom_score_adj. Returns 0 or -errno (-EACCES when
 * lowering it needs CAP_SYS_RESOURCE).
 */
int mem_oom_score_adj_set(int adj);

/* ---- the watcher ---------------------------------------------------------- */

/* Counters for /.wbcfs/vmstat; all atomic, read with memwatch_stats(). */
struct mem_stats {
	atomic_ullong pressure_events;	/* PSI triggers + cgroup events seen */
	atomic_ullong pressure_stall_us;	/* PSI "some" total of the watched source */
	atomic_ullong cgroup_limit_bytes;
	atomic_ullong cgroup_usage_bytes;
	atomic_ullong available_bytes;
	atomic_ullong watch_steps;
	atomic_ullong target_changes;
};

/* A plain copy of struct mem_stats. */
struct mem_stats_snap {
	unsigned long long pressure_events, pressure_stall_us, cgroup_limit_bytes,
			   cgroup_usage_bytes, available_bytes, watch_steps, target_changes;
};

struct memwatch_ops {
	/* the new target (only on change); from the watcher thread */
	void (*set_target)(void *arg, size_t pages, const char *reason, long pressure);
	size_t (*resident_pages)(void *arg);
	size_t (*dirty_pages)(void *arg);	/* may be NULL */
	/* the cache's floor and ceiling now (cache_min, cache_size as changed
	 * at run time), read each step; NULL: memwatch_set_bounds() only */
	void (*bounds)(void *arg, size_t *floor_pages, size_t *ceiling_pages);
	/* testing and measuring: each step, with when its wakeup came (real ns) */
	void (*trace)(void *arg, const struct mem_signals *s, size_t target,
		      uint64_t woken_ns, uint64_t decided_ns);
};

struct memwatch_config {
	struct memctl_config ctl;
	const struct memwatch_ops *ops;
	void *arg;
	unsigned psi_stall_us;		/* PSI trigger: stall this long... [100000] */
	unsigned psi_window_us;		/* ... within this window [1000000] */
	unsigned fast_ms;		/* sampling under pressure or near a limit [100] */
	unsigned slow_ms;		/* sampling when idle [1000] */
	const char *name;		/* for the message at start */
	FILE *msg;			/* the one line saying which signals; NULL: none */
};

struct memwatch;

void memwatch_config_default(struct memwatch_config *cfg);

/**
 * Find the signals and start the watcher thread. Missing files degrade to
 * fewer signals (the timer and /proc/meminfo are always there). Returns 0
 * or -errno (-ENOMEM, or the thread's creation error).
 */
int memwatch_start(struct memwatch **out, const struct memwatch_config *cfg);

/** Stop the thread and close everything. NULL is fine. */
void memwatch_stop(struct memwatch *w);

/** New bounds at run time; the next step applies them (it is kicked). */
void memwatch_set_bounds(struct memwatch *w, size_t floor_pages, size_t ceiling_pages);

/** The counters; all 0 for a NULL @w (no watcher). */
void memwatch_stats(const struct memwatch *w, struct mem_stats_snap *out);

/** One line: "cgroup v1 /foo limit 3.0G, PSI, MemAvailable". */
void memwatch_describe(const struct memwatch *w, char *buf, size_t len);

/* ---- parsing, exposed for the unit tests ----------------------------------- */

/**
 * Tests only: read /proc/self/cgroup, /proc/self/mountinfo, /proc/meminfo,
 * /proc/pressure/memory and /proc/sys/vm/min_free_kbytes from under @root
 * (NULL: the real ones), so that a made-up cgroup tree can be watched.
 */
void mem_set_proc_root(const char *root);

/** "MemAvailable:" etc. of a /proc/meminfo text in bytes; 0 when absent. */
uint64_t mem_meminfo_field(const char *text, const char *field);

/** The "some" line's total= (us) of a PSI file's text; 0 when absent. */
uint64_t mem_psi_some_total(const char *text);

/** A "key value" line's value in a memory.stat/memory.events text; 0 when absent. */
uint64_t mem_kv_field(const char *text, const char *key);

/**
 * The memory cgroup path in a /proc/self/cgroup text: the v1 line naming
 * the memory controller (@v1 true), else the v2 "0::" line. Returns 0 or
 * -ENOENT.
 */
int mem_cgroup_path(const char *text, char *path, size_t len, bool *v1);

#endif
