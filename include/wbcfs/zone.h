/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Zones of the arena: free list, active/inactive LRU lists, watermarks and
 * per-zone counters. One zone for now; fair allocation and per-zone dirty
 * limits come with the zones issue.
 */
#ifndef WBCFS_ZONE_H
#define WBCFS_ZONE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "list.h"

struct cache;

struct zone {
	pthread_mutex_t lock;		/* protects: free_list, active, inactive, nr_* lists */
	struct list_head free_list;	/* lock */
	struct list_head active;	/* lock: head = most recent */
	struct list_head inactive;	/* lock: tail = oldest */
	long nr_free;			/* lock (read racily for stats) */
	long nr_active;			/* lock */
	long nr_inactive;		/* lock */
	long present_pages;		/* constant */
	long wmark_min, wmark_low, wmark_high;	/* constant: pages */
	_Atomic long nr_dirty;		/* atomic */
	_Atomic long nr_writeback;	/* atomic */
	_Atomic long pgalloc;		/* atomic */
	_Atomic long pgscan;		/* atomic */
	_Atomic long pgsteal;		/* atomic */
	_Atomic long nr_immediate;	/* atomic: immediate-reclaim marks */
	unsigned id;			/* constant */
	struct cache *cache;		/* constant */
};

#endif
