/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Dirty tunables (named after /proc/sys/vm), the global thresholds derived
 * from them and the cache's dirtyable memory, and the simple throttle: a
 * writer over the limit waits for writeback. The IO-less controller
 * (throttle.c) replaces the simple one in a later issue.
 */
#ifndef WBCFS_DIRTY_H
#define WBCFS_DIRTY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cache;

/* The kernel's defaults and limits; the tunables table (tunables.h) uses these too. */
#define DIRTY_RATIO_DEFAULT			20
#define DIRTY_BACKGROUND_RATIO_DEFAULT		10
#define DIRTY_EXPIRE_CENTISECS_DEFAULT		3000
#define DIRTY_WRITEBACK_CENTISECS_DEFAULT	500
#define DIRTY_RATIO_MAX				100
#define DIRTY_BYTES_MIN				(2 * 4096)	/* two pages */
#define DIRTY_CENTISECS_MAX			(100U * 3600 * 24 * 100)	/* 100 days */

struct dirty_tunables {
	_Atomic unsigned dirty_ratio;			/* percent, 0-100; default 20 */
	_Atomic unsigned dirty_background_ratio;	/* percent, 0-100; default 10 */
	_Atomic uint64_t dirty_bytes;			/* 0 = use ratio; else >= 2 pages */
	_Atomic uint64_t dirty_background_bytes;	/* 0 = use ratio */
	_Atomic unsigned dirty_expire_centisecs;	/* default 3000 */
	_Atomic unsigned dirty_writeback_centisecs;	/* default 500; 0 = no periodic */
};

enum dirty_tunable {
	DT_DIRTY_RATIO,
	DT_DIRTY_BACKGROUND_RATIO,
	DT_DIRTY_BYTES,
	DT_DIRTY_BACKGROUND_BYTES,
	DT_DIRTY_EXPIRE_CENTISECS,
	DT_DIRTY_WRITEBACK_CENTISECS,
	NR_DIRTY_TUNABLES
};

/** Kernel defaults (20/10/0/0/3000/500). */
void dirty_tunables_default(struct dirty_tunables *t);

/**
 * Set one tunable with the kernel's rules: writing a ratio zeroes the
 * matching bytes value and the other way round; ratios 0-100; dirty_bytes
 * 0 or >= 2 pages. Returns 0 or -EINVAL.
 */
int dirty_tunable_set(struct dirty_tunables *t, enum dirty_tunable which, uint64_t value);
uint64_t dirty_tunable_get(const struct dirty_tunables *t, enum dirty_tunable which);

/** Dirtyable pages: free + file pages (minus reserves) + 1. */
unsigned long dirty_dirtyable_pages(struct cache *c);

/**
 * Global thresholds in pages, doc/algorithms.md §1.2: bytes settings win over
 * ratios; bg >= thresh gives bg = thresh/2.
 */
void dirty_thresholds(struct cache *c, unsigned long *bg_thresh, unsigned long *thresh);

/**
 * The thresholds the cache will have once it holds no more than @target
 * pages (its dirtyable memory then at most the target minus the reserves).
 */
void dirty_thresholds_for(struct cache *c, size_t target, unsigned long *bg_thresh,
			  unsigned long *thresh);

struct throttle_global;
/** The throttle domain's source of global counters: @arg is the cache. */
void dirty_throttle_global(void *arg, struct throttle_global *g);

/** FILE_DIRTY over the background threshold? */
bool dirty_over_background(struct cache *c);

/**
 * The simple throttle: after dirtying pages, kick background writeback when
 * over bg_thresh; while dirty + writeback > thresh, wait for writeback.
 * Context: may sleep; holds no locks.
 */
void dirty_balance_simple(struct cache *c);

#endif
