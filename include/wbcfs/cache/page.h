/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Page descriptors of the cache arena: flag bits, reference counts, the page
 * lock and waiting on lock and writeback. Dirty/writeback transitions that
 * touch counters and tags live here too; which pages exist in which file is
 * mapping.c's business, where they come from is zone.c's.
 */
#ifndef WBCFS_PAGE_H
#define WBCFS_PAGE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "wbcfs/lib/list.h"

#define PAGE_SHIFT 12
#define PAGE_SIZE (1UL << PAGE_SHIFT)

enum page_flag {
	PG_locked,	/* I/O or state change in progress; see lock_page() */
	PG_uptodate,	/* contents valid */
	PG_dirty,	/* contents newer than the device */
	PG_writeback,	/* a write of this page to the device is in flight */
	PG_referenced,	/* accessed since last LRU scan */
	PG_active,	/* on the active LRU list */
	PG_lru,		/* on an LRU list of its zone */
	PG_reclaim,	/* reclaim met it dirty/under writeback: free at writeback end */
	PG_readahead,	/* async readahead marker */
	PG_delalloc,	/* dirty page whose block is reserved, not yet allocated */
	PG_error,	/* last I/O on this page failed */
	PG_newblock,	/* writeback gave it a block that holds nothing valid until
			 * a write of it succeeds (cleared then) */
	PG_jdirty,	/* metadata page changed in the journal's running transaction:
			 * writeback leaves it alone (its home copy must stay the
			 * committed one until the transaction commits) */
	PG_jcommit,	/* metadata page in a transaction being committed: likewise */
	PG_jheld,	/* committed metadata page its owner holds back from writeback
			 * until it expires (bdi_ops.meta_expire): likewise */
	PG_returned,	/* free page whose memory was given back to the kernel: the
			 * allocator counts it in pgregrown when it hands it out */
};

struct mapping;
struct zone;

struct page {
	_Atomic unsigned long flags;	/* atomic: enum page_flag bits */
	_Atomic int refcount;		/* atomic: 0 = free; the page cache holds 1 */
	struct mapping *mapping;	/* mapping->lock; NULL when not in a mapping */
	uint64_t index;			/* mapping->lock: page offset in the mapping */
	struct list_head lru;		/* zone->lock: free list or LRU list */
	struct zone *zone;		/* constant */
	void *data;			/* constant: PAGE_SIZE bytes, 4 KiB aligned */
};

static inline bool page_test(const struct page *p, enum page_flag f)
{
	return atomic_load(&((struct page *)p)->flags) & (1UL << f);
}
static inline bool page_test_set(struct page *p, enum page_flag f)
{
	return atomic_fetch_or(&p->flags, 1UL << f) & (1UL << f);
}
static inline bool page_test_clear(struct page *p, enum page_flag f)
{
	return atomic_fetch_and(&p->flags, ~(1UL << f)) & (1UL << f);
}
static inline void page_set(struct page *p, enum page_flag f) { page_test_set(p, f); }
static inline void page_clear(struct page *p, enum page_flag f) { page_test_clear(p, f); }

static inline void *page_address(const struct page *p) { return p->data; }

/** Take a reference; the caller must already hold one or the mapping lock. */
void page_get(struct page *p);
/** Drop a reference; the last one returns the page to its zone's free list. */
void page_put(struct page *p);

/** Sleep until PG_locked is ours. Context: may sleep. */
void lock_page(struct page *p);
/** Returns true when PG_locked was taken without sleeping. */
bool trylock_page(struct page *p);
/** Release PG_locked and wake waiters. */
void unlock_page(struct page *p);
/** Sleep while PG_writeback is set. */
void wait_on_page_writeback(struct page *p);
/** Sleep while PG_locked is set (without taking it). */
void wait_on_page_locked(struct page *p);

/**
 * Mark a page of a mapping dirty: tag DIRTY in its mapping, count it in the
 * zone, cache and mapping, and tell the mapping's owner (mapping_ops.dirtied)
 * on the clean -> dirty transition. Returns true on that transition.
 * Context: caller holds a reference; page is uptodate.
 */
bool set_page_dirty(struct page *p);
/**
 * Pages this thread has newly dirtied, cumulative (the kernel's
 * current->nr_dirtied before throttling resets it): a writer takes the
 * difference around its copy to know what it owes the throttle.
 */
long page_thread_dirtied(void);

/**
 * Clear PG_dirty before writing the page: untag DIRTY and TOWRITE, uncount.
 * Returns true if it was dirty (the caller then calls set_page_writeback()).
 * Context: page locked.
 */
bool clear_page_dirty_for_io(struct page *p);

/** Drop dirtiness without writing (truncate, punch). Calls mapping_ops.undirtied. */
void cancel_dirty_page(struct page *p);

/** Start writeback: PG_writeback, WRITEBACK tag, counters. Context: page locked. */
void set_page_writeback(struct page *p);

/**
 * End writeback: clear PG_writeback and its tag, count one page written,
 * wake waiters; a page marked PG_reclaim is rotated for immediate reclaim
 * (freed at once when clean and unused).
 * The caller need not hold a reference (it takes its own while working);
 * a PG_reclaim page whose only reference is the cache's is freed here, so
 * the caller must not touch @p afterwards unless it holds a reference.
 * Context: any thread, no cache locks held; never sleeps.
 */
void end_page_writeback(struct page *p);

/** LRU aging hint on access: referenced, then active on the second touch. */
void mark_page_accessed(struct page *p);

#endif
