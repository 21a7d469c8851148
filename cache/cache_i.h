/* SPDX-License-Identifier: GPL-2.0-or-later */
/* cache/ internals shared by page.c, mapping.c, zone.c and reclaim.c, and by
 * throttle.c and throttle_trace.c. */
#ifndef WBCFS_CACHE_I_H
#define WBCFS_CACHE_I_H

#include "wbcfs/cache.h"
#include "wbcfs/lib/lockstat.h"
#include "wbcfs/cache/throttle.h"

/* Lock classes of cache/ (zone.c defines them) for /.wbcfs/lockstat. */
extern struct lock_class lc_zone_lock;		/* zone->lock */
extern struct lock_class lc_cache_wait_lock;	/* cache->wait_lock */

/*
 * Update a zone list counter (nr_free, nr_active, nr_inactive). Writers hold
 * zone->lock; the relaxed atomic store only makes the lock-free readers
 * (watermark checks, stats, scan budgets) well defined.
 */
#define ZONE_COUNT(field, delta) __atomic_fetch_add(&(field), (delta), __ATOMIC_RELAXED)

/*
 * p->mapping outside mapping->lock: reclaim and writeback completion peek
 * at it and re-check under the lock; writers (insert, unlink, free) store
 * it with page_mapping_set(). Relaxed atomics keep those peeks defined.
 */
static inline struct mapping *page_mapping_peek(const struct page *p)
{
	return __atomic_load_n(&p->mapping, __ATOMIC_RELAXED);
}
static inline void page_mapping_set(struct page *p, struct mapping *m)
{
	__atomic_store_n(&p->mapping, m, __ATOMIC_RELAXED);
}

/* Take @p off its zone's LRU list (if on one). Takes zone->lock. */
void cache_lru_del(struct page *p);
/* Return a page with no references to its zone's free list (unlinking it
 * from an LRU list if a racing putback left it there). */
void zone_free_page(struct page *p);
/* Writeback of a PG_reclaim page ended: free it now if clean and unused,
 * else move it to the inactive tail so reclaim meets it first.
 * Context: caller holds a reference of its own; no locks; never sleeps. */
void cache_reclaim_now(struct page *p);
/* Second touch: move to the active list. */
void cache_lru_activate(struct page *p);
/* Wake kswapd if any zone is below its low watermark. */
void cache_kswapd_kick(struct cache *c);
/* Reclaim up to @nr clean pages from @z's LRU; *dirty counts dirty pages met. */
long zone_shrink(struct zone *z, long nr, long *dirty);
/* The same, scanning at most @budget pages. */
long zone_shrink_scan(struct zone *z, long nr, long budget, long *dirty);
/* Watermarks and reserves from the zones' managed pages. Context: size_lock. */
void zones_set_watermarks(struct cache *c);
void zones_set_reserves(struct cache *c);
/* Recompute the zones' cached dirty limits (zone_dirty_limit). */
void zones_refresh_dirty_limits(struct cache *c);
/* kswapd's balloon rounds (size.c); false when stuck on dirty pages. */
bool cache_balloon_run(struct cache *c);
/* Start/stop the reclaim thread. */
int reclaim_start(struct cache *c);
void reclaim_stop(struct cache *c);

/* throttle.c and throttle_trace.c */
extern struct lock_class lc_throttle_lock;	/* throttle_domain->lock (throttle.c) */
#define DIRTY_POLL_THRESH 32		/* pages */
/* Append a record; the oldest is overwritten when the ring is full. Lock held. */
struct throttle_trace_rec *throttle_trace_new(struct throttle_domain *d, struct throttle_wb *tw,
					      uint16_t type, uint64_t now);
/* Wake the trace's readers after a record is complete. Lock held. */
void throttle_trace_done(struct throttle_domain *d);
/* Task @pid's state, made (owing nothing) on its first call; NULL without memory. Domain lock. */
struct throttle_task *throttle_task_get(struct throttle_domain *d, pid_t pid, uint64_t now);
/* Task @pid dirtied @nr pages: its state, charged with them. Context: domain lock. */
struct throttle_task *throttle_task_dirtied_locked(struct throttle_domain *d, pid_t pid,
						   long nr, uint64_t now);

#endif
