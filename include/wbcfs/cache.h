/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The cache: one arena of cache_size bytes in 4 KiB pages, split into zones,
 * with global counters (the daemon's /proc/vmstat), the dirty tunables and
 * the reclaim thread. The cache never does I/O: when it needs dirty pages
 * cleaned it asks its owner through cache_ops, as the kernel's reclaim asks
 * the flusher.
 */
#ifndef WBCFS_CACHE_H
#define WBCFS_CACHE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "wbcfs/cache/page.h"
#include "wbcfs/cache/zone.h"
#include "wbcfs/cache/dirty.h"
#include "wbcfs/cache/throttle.h"

enum wb_reason {
	WB_REASON_BACKGROUND,
	WB_REASON_VMSCAN,
	WB_REASON_SYNC,
	WB_REASON_PERIODIC,
	WB_REASON_FSYNC,
	WB_REASON_UMOUNT,
	WB_REASON_DIRTIER,	/* the dirtier writes (throttle=writeback) */
};

struct cache_ops {
	/* Ask for writeback of about @nr_pages (0 = background rules).
	 * Context: any thread, must not sleep. */
	void (*wakeup_flusher)(void *owner, long nr_pages, enum wb_reason why);
};

/* Global counters, named as in /proc/vmstat. All atomic. */
struct cache_stats {
	_Atomic long nr_file_pages;	/* pages in some mapping */
	_Atomic long nr_dirty;
	_Atomic long nr_writeback;
	_Atomic long nr_dirtied;	/* cumulative */
	_Atomic long nr_written;	/* cumulative */
	_Atomic long pgalloc;
	_Atomic long pgscan;
	_Atomic long pgsteal;
	_Atomic long pgactivate;
	_Atomic long nr_vmscan_immediate_reclaim;
	_Atomic long nr_vmscan_write;	/* pages the flusher sent to the device
					 * for work that reclaim asked for */
	_Atomic long allocstall;	/* allocations that did direct reclaim */
	_Atomic long kswapd_wakeups;
	_Atomic long nr_fair_batch_resets;	/* fair allocation rounds begun anew */
	_Atomic long nr_zone_dirty_skips;	/* fast-path skips of a zone over its dirty limit */
	_Atomic long nr_zone_dirty_ignored;	/* slow-path write allocations from a
						 * zone over its dirty limit */
	_Atomic long pgreturned;	/* pages given back to the kernel (madvise) */
	_Atomic long pgregrown;		/* returned pages handed out (faulted in) again */
	_Atomic long cache_target_changes;	/* changes of the target size */
};

#define CACHE_TRACE_RECORDS 32768	/* throttle trace ring (~6 MiB) */

/*
 * The smallest floor (cache_min) the cache accepts, in pages: the zones'
 * watermarks and a few writes in flight must fit (see cache_set_floor).
 */
#define CACHE_FLOOR_MIN_PAGES 64

struct cache_config {
	size_t size_bytes;		/* the ceiling at creation, rounded down to pages */
	size_t reserve_bytes;		/* address space reserved for the arena, the most
					 * the ceiling can be raised to (0 = size_bytes) */
	size_t min_bytes;		/* the floor (0 = CACHE_FLOOR_MIN_PAGES) */
	unsigned nr_zones;		/* >= 1 */
	const size_t *zone_bytes;	/* optional per-zone sizes (sum = size) */
	const int *zone_node;		/* optional: NUMA node per zone (mbind), -1 = any */
	bool fair_zone_alloc;		/* initial value of cache.fair_zone_alloc */
	bool zone_dirty;		/* initial value of cache.zone_dirty */
	struct dirty_tunables tunables;	/* initial values */
	const struct cache_ops *ops;
	void *owner;
	bool start_kswapd;		/* false in unit tests: reclaim only direct */
};

struct cache {
	void *arena;			/* constant: 4 KiB aligned, reserve_pages long */
	size_t reserve_pages;		/* constant: pages of address space reserved */
	_Atomic size_t nr_pages;	/* size_lock: the ceiling (cache_size) */
	_Atomic size_t target_pages;	/* size_lock: floor <= target <= ceiling */
	_Atomic size_t floor_pages;	/* size_lock: cache_min */
	pthread_mutex_t size_lock;	/* protects: changes of ceiling, target, floor and
					 * the zones' shares of them */
	_Atomic bool balloon_work;	/* a zone holds more than its share of the target,
					 * or may: kswapd gives pages back */
	struct page *pages;		/* constant: descriptor array (reserve_pages long;
					 * a descriptor is written when its page is first used) */
	unsigned nr_zones;		/* constant */
	struct zone *zones;		/* constant array */
	struct cache_stats stats;
	struct dirty_tunables tun;	/* atomics, changed live */
	_Atomic unsigned fair_zone_alloc;	/* live: 1 = fair zone allocation batches */
	_Atomic unsigned zone_dirty;	/* live: 1 = per-zone dirty limits for writes */
	_Atomic unsigned long dirty_limit_tick;	/* atomic: write allocations, paces the
					 * refresh of the zones' cached dirty limits */
	const struct cache_ops *ops;	/* constant */
	void *owner;			/* constant */

	pthread_mutex_t wait_lock;	/* protects: the two conds below' predicates */
	pthread_cond_t free_wait;	/* signalled when pages are freed */
	pthread_cond_t dirty_wait;	/* signalled when dirty+writeback drops */
	pthread_cond_t kswapd_wait;	/* kswapd sleeps here */
	_Atomic bool kswapd_wake;	/* set under wait_lock; peeked without it */
	bool stopping;			/* wait_lock */
	_Atomic int free_waiters;	/* atomic: allocators sleeping on free_wait; a freed
				 * page wakes them only when > 0 (added for zone.c) */
	bool have_kswapd;		/* constant after create */
	pthread_t kswapd;
	struct throttle_domain throttle;	/* IO-less dirty throttling (throttle.h) */
};

/** Create the cache. Returns 0 or -errno (-ENOMEM, -EINVAL for bad sizes). */
int cache_create(struct cache **out, const struct cache_config *cfg);
/** Stop kswapd and free the arena. All mappings must be empty. */
void cache_destroy(struct cache *c);
/**
 * Fault @bytes of the cache in now (MADV_POPULATE_WRITE), each zone its
 * share, so the first writers do not pay for it; the pages go on the free
 * lists and count as resident. Call before the cache is used.
 */
void cache_prefault(struct cache *c, uint64_t bytes);

/*
 * The cache's size (pages). The ceiling (cache_size) bounds it; the target,
 * between the floor (cache_min) and the ceiling, is what the cache may hold
 * now: pages in use plus free pages. Pages above the target are given back
 * to the kernel by kswapd (clean pages reclaimed first, dirty ones handed
 * to the flusher) and kept aside as "returned"; resident pages are those
 * ever handed out minus those returned. Each zone holds its share of the
 * target in proportion to its share of the ceiling.
 */

/**
 * Set the target, clamped to [floor, ceiling]. @reason is a static string
 * ("pressure", "relax", "limit", "admin", ...) and @pressure an opaque
 * number (-1 = none), both written in the trace record that each change of
 * the target emits. Lowering wakes kswapd to give pages back; raising makes
 * pages available at once. Context: any thread; never sleeps on I/O or on
 * reclaim (takes the size lock and each zone's lock briefly).
 */
void cache_set_target(struct cache *c, size_t pages, const char *reason, long pressure);
size_t cache_target_pages(const struct cache *c);
/** Pages ever handed out, minus those given back to the kernel. */
size_t cache_resident_pages(const struct cache *c);
size_t cache_ceiling_pages(const struct cache *c);
size_t cache_floor_pages(const struct cache *c);
/**
 * Set the ceiling at run time, within the reservation. A target equal to
 * the old ceiling (nobody lowered it) follows the new one; otherwise the
 * target is only lowered to the ceiling if above it. Returns 0 or -EINVAL
 * (below the floor, above the reservation).
 */
int cache_set_ceiling(struct cache *c, size_t pages);
/**
 * Set the floor; a target below it rises to it. Returns 0 or -EINVAL
 * (above the ceiling, below CACHE_FLOOR_MIN_PAGES).
 */
int cache_set_floor(struct cache *c, size_t pages);
/**
 * One round of giving pages back (kswapd runs it when woken; tests call it
 * to play kswapd): from each zone over its share of the target, free pages
 * are taken, given back to the kernel with madvise(MADV_DONTNEED) in
 * coalesced ranges, and clean pages are reclaimed from its LRU tails for
 * the rest; dirty pages met are handed to the flusher. Returns the pages
 * given back; *left gets how many the zones still hold above the target.
 */
long cache_balloon_step(struct cache *c, long *left);

/**
 * Allocate a page (refcount 1, not on any list, contents undefined).
 * ALLOC_WRITE: the page will be dirtied (__GFP_WRITE): with zone_dirty on,
 * the fast path skips zones over their dirty limit. The fast path takes
 * zones highest first above their low watermark (plus lowmem reserve),
 * in fair batches when fair_zone_alloc is on; then kswapd is woken and
 * the min watermark tried, ignoring fairness and dirty limits; then direct
 * reclaim, then the flusher is asked and writeback waited for. Returns
 * NULL only with ALLOC_NOWAIT or when the cache is being destroyed.
 * Context: may sleep unless ALLOC_NOWAIT.
 */
struct page *cache_alloc_page(struct cache *c, unsigned alloc_flags);

/** Put a freshly inserted page of a mapping on its zone's inactive LRU. */
void cache_lru_add(struct page *p);

/** Free pages now (sum over zones). */
long cache_free_pages(const struct cache *c);

/** Wake waiters of free pages / dirty drops (called by page.c and zone.c). */
void cache_wake_free(struct cache *c);
void cache_wake_dirty(struct cache *c);

/**
 * Reclaim up to @nr clean pages from inactive LRU tails (active lists are
 * aged into inactive as needed). Dirty or writeback pages met are marked
 * PG_reclaim, counted in nr_vmscan_immediate_reclaim and the flusher is
 * asked to write them. Never writes, never sleeps on a page.
 * Returns the number of pages freed.
 */
long cache_shrink(struct cache *c, long nr);

/**
 * One round of kswapd's balancing (the thread loops on it; tests call it
 * to play kswapd deterministically): reclaim from each zone below its
 * high watermark, in proportion to the zone's size. Returns how many zones
 * are still below it; *freed gets the pages freed. An allocation that
 * finds a zone under its low watermark sets kswapd_wake (and wakes the
 * thread if there is one).
 */
unsigned cache_kswapd_step(struct cache *c, long *freed);

#endif
