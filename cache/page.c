// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Page state: references, the PG_locked sleeping bit, waiting on lock and
 * writeback through hashed wait queues, and the dirty/writeback transitions
 * with their counters and mapping tags. Which mapping a page belongs to is
 * mapping.c's business; where free pages come from is zone.c's.
 */
#include <stdint.h>

#include "wbcfs/cache.h"
#include "wbcfs/cache/mapping.h"
#include "wbcfs/lib/lockstat.h"
#include "cache_i.h"

#define WAIT_BUCKETS 256

/* Hashed wait queues: one (mutex, cond) per bucket of page addresses. */
static struct page_wq {
	pthread_mutex_t lock;	/* protects: sleepers' predicate re-checks */
	pthread_cond_t cond;
} page_wq[WAIT_BUCKETS];
LOCK_CLASS(lc_page_wq_lock, "page_wq_lock")
/* PG_locked: lock_page() calls, and the ones that slept */
LOCK_CLASS(lc_page_lock, "page_lock")
/* waits for PG_writeback to clear (no acquisitions: nothing is taken) */
LOCK_CLASS(lc_page_writeback, "page_writeback")
static pthread_once_t page_wq_once = PTHREAD_ONCE_INIT;

static void page_wq_init(void)
{
	int i;

	for (i = 0; i < WAIT_BUCKETS; i++) {
		pthread_mutex_init(&page_wq[i].lock, NULL);
		pthread_cond_init(&page_wq[i].cond, NULL);
	}
}

static struct page_wq *page_waitqueue(const struct page *p)
{
	uintptr_t h = (uintptr_t)p / sizeof(*p);

	pthread_once(&page_wq_once, page_wq_init);
	return &page_wq[(h * 2654435761u) % WAIT_BUCKETS];
}

/* Sleep until @bit of @p is clear; with @take, set it atomically. */
static void page_wait_bit(struct page *p, enum page_flag bit, bool take)
{
	struct page_wq *wq = page_waitqueue(p);

	ls_mutex_lock(&wq->lock, &lc_page_wq_lock);
	for (;;) {
		if (take ? !page_test_set(p, bit) : !page_test(p, bit))
			break;
		lockstat_cond_wait(&wq->cond, &wq->lock);
	}
	ls_mutex_unlock(&wq->lock);
}

/* Wake every sleeper of @p's bucket (after a bit was cleared). */
static void page_wake(struct page *p)
{
	struct page_wq *wq = page_waitqueue(p);

	/* the bucket lock orders the clear before a sleeper's re-check */
	ls_mutex_lock(&wq->lock, &lc_page_wq_lock);
	pthread_cond_broadcast(&wq->cond);
	ls_mutex_unlock(&wq->lock);
}

void page_get(struct page *p)
{
	atomic_fetch_add(&p->refcount, 1);
}

void page_put(struct page *p)
{
	if (atomic_fetch_sub(&p->refcount, 1) == 1)
		zone_free_page(p);
}

void lock_page(struct page *p)
{
	uint64_t t0;

	if (!page_test_set(p, PG_locked)) {
		lockstat_acquired(&lc_page_lock);
		return;
	}
	t0 = lockstat_wait_begin();
	page_wait_bit(p, PG_locked, true);
	lockstat_wait_end(&lc_page_lock, t0);
}

bool trylock_page(struct page *p)
{
	return !page_test_set(p, PG_locked);
}

void unlock_page(struct page *p)
{
	page_clear(p, PG_locked);
	page_wake(p);
}

void wait_on_page_writeback(struct page *p)
{
	uint64_t t0;

	if (!page_test(p, PG_writeback))
		return;
	t0 = lockstat_wait_begin();
	page_wait_bit(p, PG_writeback, false);
	lockstat_wait_end(&lc_page_writeback, t0);
}

void wait_on_page_locked(struct page *p)
{
	if (page_test(p, PG_locked))
		page_wait_bit(p, PG_locked, false);
}

static struct cache_stats *page_stats(struct page *p)
{
	return &p->zone->cache->stats;
}

static __thread long page_dirtied_by_thread;

long page_thread_dirtied(void)
{
	return page_dirtied_by_thread;
}

bool set_page_dirty(struct page *p)
{
	struct mapping *m = p->mapping;

	if (page_test_set(p, PG_dirty))
		return false;
	atomic_fetch_add(&p->zone->nr_dirty, 1);
	atomic_fetch_add(&page_stats(p)->nr_dirty, 1);
	atomic_fetch_add(&page_stats(p)->nr_dirtied, 1);
	page_dirtied_by_thread++;
	if (m) {
		atomic_fetch_add(&m->nrdirty, 1);
		mapping_tag_set(m, p->index, TAG_DIRTY);
		if (m->ops && m->ops->dirtied)
			m->ops->dirtied(m, p);
	}
	return true;
}

static void page_undirty(struct page *p)
{
	struct mapping *m = p->mapping;

	atomic_fetch_sub(&p->zone->nr_dirty, 1);
	atomic_fetch_sub(&page_stats(p)->nr_dirty, 1);
	if (m) {
		atomic_fetch_sub(&m->nrdirty, 1);
		mapping_tag_clear(m, p->index, TAG_DIRTY);
		mapping_tag_clear(m, p->index, TAG_TOWRITE);
	}
	cache_wake_dirty(p->zone->cache);
}

bool clear_page_dirty_for_io(struct page *p)
{
	if (!page_test_clear(p, PG_dirty))
		return false;
	page_undirty(p);
	return true;
}

void cancel_dirty_page(struct page *p)
{
	struct mapping *m = p->mapping;

	if (!page_test_clear(p, PG_dirty))
		return;
	page_undirty(p);
	if (m && m->ops && m->ops->undirtied)
		m->ops->undirtied(m, p);
}

void set_page_writeback(struct page *p)
{
	struct mapping *m = p->mapping;

	if (page_test_set(p, PG_writeback))
		return;
	atomic_fetch_add(&p->zone->nr_writeback, 1);
	atomic_fetch_add(&page_stats(p)->nr_writeback, 1);
	if (m) {
		atomic_fetch_add(&m->nrwriteback, 1);
		mapping_tag_set(m, p->index, TAG_WRITEBACK);
	}
}

/*
 * The writer may have dropped its reference already (the flusher does):
 * while PG_writeback is set the mapping keeps the page, so take our own
 * reference first; once the bit is clear a truncate may drop the cache's.
 * Context: any thread, no locks held; never sleeps.
 */
void end_page_writeback(struct page *p)
{
	struct cache *c = p->zone->cache;
	struct mapping *m;

	if (!page_test(p, PG_writeback))
		return;
	page_get(p);
	m = p->mapping;		/* stable while PG_writeback is set */
	if (m) {
		mapping_tag_clear(m, p->index, TAG_WRITEBACK);
		atomic_fetch_sub(&m->nrwriteback, 1);
	}
	atomic_fetch_sub(&p->zone->nr_writeback, 1);
	atomic_fetch_sub(&c->stats.nr_writeback, 1);
	atomic_fetch_add(&c->stats.nr_written, 1);
	page_clear(p, PG_writeback);
	page_wake(p);
	if (page_test_clear(p, PG_reclaim))
		cache_reclaim_now(p);
	cache_wake_dirty(c);
	page_put(p);
}

void mark_page_accessed(struct page *p)
{
	if (!page_test_set(p, PG_referenced))
		return;
	if (page_test(p, PG_lru) && !page_test(p, PG_active))
		cache_lru_activate(p);
}
