/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Zones of the arena: free list, active/inactive LRU lists, watermarks,
 * lowmem protection, the fair allocation batch and per-zone counters.
 * Zones are numbered low to high, as the kernel's DMA32, Normal: the
 * allocator prefers the highest zone, and a lower zone keeps a reserve
 * (lowmem_reserve) that allocations which could have used a higher zone
 * may not take. See zone.c for the allocator.
 */
#ifndef WBCFS_ZONE_H
#define WBCFS_ZONE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "wbcfs/lib/list.h"

struct cache;

struct zone {
	pthread_mutex_t lock;		/* protects: free_list, active, inactive, nr_* lists */
	struct list_head free_list;	/* lock */
	struct list_head active;	/* lock: head = most recent */
	struct list_head inactive;	/* lock: tail = oldest */
	long nr_free;			/* lock (read racily for stats): free_list
					 * + nr_virgin */
	struct list_head returned;	/* lock: pages given back to the kernel */
	long nr_returned;		/* lock: on returned */
	long nr_returning;		/* lock: taken for returned, madvise under way */
	long nr_touched;		/* lock: pages from start_pfn with a written
					 * descriptor (used at least once) */
	long nr_virgin;			/* lock: never-used pages counted as free: the
					 * allocator writes their descriptor when it
					 * takes them (pfns start_pfn + nr_touched...) */
	long span_pages;		/* constant: pfns reserved for the zone */
	long managed_pages;		/* lock (written under size_lock too): the
					 * zone's share of the target */
	long nr_active;			/* lock */
	long nr_inactive;		/* lock */
	long present_pages;		/* size_lock: the zone's share of the ceiling */
	size_t start_pfn;		/* constant: first page's index in the arena */
	/* the rest of this block: written under size_lock (from managed
	 * pages, as the kernel's), read without a lock */
	long wmark_min, wmark_low, wmark_high;	/* pages */
	long lowmem_reserve;		/* pages of higher zones / 256 */
	long dirty_balance_reserve;	/* high + lowmem_reserve, not dirtyable */
	long kswapd_batch;		/* pages kswapd reclaims a round, in
					 * proportion to size (32 for the smallest zone) */
	_Atomic long alloc_batch;	/* atomic: NR_ALLOC_BATCH, high - low per round */
	_Atomic bool fair_depleted;	/* atomic: alloc_batch ran out this round */
	_Atomic long dirty_limit;	/* atomic: cached zone_dirty_limit() (pages) */
	_Atomic long nr_dirty;		/* atomic */
	_Atomic long nr_writeback;	/* atomic */
	_Atomic long pgalloc;		/* atomic */
	_Atomic long pgscan;		/* atomic */
	_Atomic long pgsteal;		/* atomic */
	_Atomic long nr_immediate;	/* atomic: immediate-reclaim marks */
	unsigned id;			/* constant */
	struct cache *cache;		/* constant */
};

/** Dirtyable pages of @z: free + file LRU pages - dirty_balance_reserve. */
unsigned long zone_dirtyable_pages(const struct zone *z);
/** The zone's share of the dirty threshold, computed now (pages). */
unsigned long zone_dirty_limit(struct zone *z);
/** dirty + writeback within the zone's (cached) dirty limit? */
bool zone_dirty_ok(struct zone *z);

#endif
