// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Reclaim of clean pages from the inactive LRU tails (mm/vmscan.c's ideas):
 * referenced pages get a second chance, clean unused pages are freed, dirty
 * or writeback pages are marked PG_reclaim, counted as immediate reclaim
 * and handed to the flusher (reclaim never writes and never sleeps on a
 * page), active pages are aged into the inactive list when it is smaller.
 * The kswapd thread keeps zones above their high watermark (doc/algorithms.md §6).
 */
#include <errno.h>

#include "wbcfs/cache.h"
#include "wbcfs/lib/clock.h"
#include "wbcfs/cache/mapping.h"
#include "cache_i.h"

#define SCAN_BATCH 32

/*
 * Age active pages into the inactive list while it is the smaller one
 * (inactive_file_is_low: active > inactive). As shrink_active_list does
 * for unmapped file pages, a page leaves the active list whether or not it
 * was referenced; PG_referenced stays, so a page touched on the active list
 * gets its second chance at the inactive tail.
 */
static void zone_age_active(struct zone *z, long nr)
{
	ls_mutex_lock(&z->lock, &lc_zone_lock);
	while (nr-- > 0 && z->nr_inactive < z->nr_active && !list_empty(&z->active)) {
		struct page *p = list_last_entry(&z->active, struct page, lru);

		page_clear(p, PG_active);
		list_move(&p->lru, &z->inactive);
		ZONE_COUNT(z->nr_active, -1);
		ZONE_COUNT(z->nr_inactive, 1);
	}
	ls_mutex_unlock(&z->lock);
}

/* page_get() unless the last reference is already gone (being freed). */
static bool page_get_unless_zero(struct page *p)
{
	int r = atomic_load(&p->refcount);

	while (r > 0)
		if (atomic_compare_exchange_weak(&p->refcount, &r, r + 1))
			return true;
	return false;
}

/*
 * Take up to @nr pages off the inactive tail, each with a reference. A page
 * whose refcount already hit 0 is on its way to the free list
 * (zone_free_page unlinks it): rotate past it. Context: z->lock held.
 */
static unsigned zone_isolate(struct zone *z, struct page **out, unsigned nr)
{
	long scan = z->nr_inactive;
	unsigned n = 0;

	while (n < nr && scan-- > 0 && !list_empty(&z->inactive)) {
		struct page *p = list_last_entry(&z->inactive, struct page, lru);

		if (!page_get_unless_zero(p)) {
			list_move(&p->lru, &z->inactive);
			continue;
		}
		list_del_init(&p->lru);
		page_clear(p, PG_lru);
		ZONE_COUNT(z->nr_inactive, -1);
		out[n++] = p;
	}
	return n;
}

/*
 * Return an isolated page to the inactive head, unless it left its mapping
 * meanwhile (then the caller's put frees it). p->mapping is re-read under
 * zone->lock: mapping_unlink_locked clears it before its own LRU unlink.
 */
static void zone_putback(struct zone *z, struct page *p)
{
	ls_mutex_lock(&z->lock, &lc_zone_lock);
	if (page_mapping_peek(p) && !page_test_set(p, PG_lru)) {
		page_clear(p, PG_active);
		list_add(&p->lru, &z->inactive);
		ZONE_COUNT(z->nr_inactive, 1);
	}
	ls_mutex_unlock(&z->lock);
}

enum scan_result { SCAN_FREED, SCAN_GONE, SCAN_KEEP, SCAN_DIRTY };

/*
 * Decide one isolated page (mm/vmscan.c's shrink_folio_list, reduced):
 *   truncated meanwhile     -> gone (our put frees it; not a steal)
 *   referenced              -> clear it, back to the inactive head (second
 *                              chance; a second touch activates it through
 *                              mark_page_accessed)
 *   locked                  -> keep: reclaim never sleeps on a page
 *   dirty or writeback      -> PG_reclaim (counted once), keep; the flusher
 *                              is asked and end_page_writeback frees it
 *   clean and unused        -> removed from its mapping
 */
static enum scan_result scan_page(struct zone *z, struct page *p)
{
	bool gone;

	if (!page_mapping_peek(p))
		return SCAN_GONE;
	if (page_test_clear(p, PG_referenced))
		return SCAN_KEEP;
	if (page_test(p, PG_locked))
		return SCAN_KEEP;
	if (page_test(p, PG_dirty) || page_test(p, PG_writeback)) {
		if (!page_test_set(p, PG_reclaim)) {
			atomic_fetch_add(&z->nr_immediate, 1);
			atomic_fetch_add(&z->cache->stats.nr_vmscan_immediate_reclaim, 1);
		}
		return SCAN_DIRTY;
	}
	if (mapping_reclaim_page(p, &gone))
		return SCAN_FREED;
	return gone ? SCAN_GONE : SCAN_KEEP;
}

/* One batch from @z's inactive tail. Returns pages freed; counts dirty met. */
static long zone_shrink_batch(struct zone *z, long want, long *dirty_met)
{
	struct page *batch[SCAN_BATCH];
	unsigned n, i;
	long freed = 0;

	ls_mutex_lock(&z->lock, &lc_zone_lock);
	n = zone_isolate(z, batch, want < SCAN_BATCH ? (unsigned)want : SCAN_BATCH);
	ls_mutex_unlock(&z->lock);
	atomic_fetch_add(&z->pgscan, n);
	atomic_fetch_add(&z->cache->stats.pgscan, n);
	for (i = 0; i < n; i++) {
		struct page *p = batch[i];

		switch (scan_page(z, p)) {
		case SCAN_FREED:
			freed++;
			break;
		case SCAN_GONE:
			break;
		case SCAN_DIRTY:
			(*dirty_met)++;
			zone_putback(z, p);
			break;
		case SCAN_KEEP:
			zone_putback(z, p);
			break;
		}
		page_put(p);
	}
	atomic_fetch_add(&z->pgsteal, freed);
	atomic_fetch_add(&z->cache->stats.pgsteal, freed);
	return freed;
}

/* Pages on @z's LRU lists, read without the lock (a scan budget). */
static long zone_lru_pages(const struct zone *z)
{
	return __atomic_load_n(&z->nr_inactive, __ATOMIC_RELAXED) +
	       __atomic_load_n(&z->nr_active, __ATOMIC_RELAXED);
}

/* Reclaim up to @nr pages from @z (aging its active list as needed),
 * scanning at most @budget pages. */
long zone_shrink_scan(struct zone *z, long nr, long budget, long *dirty)
{
	long freed = 0;

	while (freed < nr && budget > 0) {
		long want = nr - freed < SCAN_BATCH ? nr - freed : SCAN_BATCH, got;

		zone_age_active(z, SCAN_BATCH);
		got = zone_shrink_batch(z, want, dirty);
		freed += got;
		budget -= want;
		if (!got && zone_lru_pages(z) == 0)
			break;
	}
	return freed;
}

/* Reclaim up to @nr pages from @z, scanning its whole LRU at most. */
long zone_shrink(struct zone *z, long nr, long *dirty)
{
	return zone_shrink_scan(z, nr, zone_lru_pages(z), dirty);
}

/*
 * Direct reclaim: every zone gives its share of @nr in proportion to its
 * LRU size (the kernel scans lru_size >> priority of each zone), highest
 * zone first; a second pass takes what is still missing from any zone.
 */
long cache_shrink(struct cache *c, long nr)
{
	long freed = 0, dirty = 0, total = 0;
	unsigned i;

	for (i = 0; i < c->nr_zones; i++)
		total += zone_lru_pages(&c->zones[i]);
	for (i = c->nr_zones; i-- > 0 && total > 0 && freed < nr;) {
		struct zone *z = &c->zones[i];
		long share = (nr * zone_lru_pages(z) + total - 1) / total;

		freed += zone_shrink(z, share < nr - freed ? share : nr - freed, &dirty);
	}
	for (i = c->nr_zones; i-- > 0 && freed < nr;)
		freed += zone_shrink(&c->zones[i], nr - freed, &dirty);
	if (dirty && c->ops && c->ops->wakeup_flusher)
		c->ops->wakeup_flusher(c->owner, dirty, WB_REASON_VMSCAN);
	return freed;
}

/* Not zone_watermark_ok: free pages at or under @mark (the allocator
 * takes a page only while free > mark). */
static bool zone_below(const struct zone *z, long mark)
{
	return __atomic_load_n(&z->nr_free, __ATOMIC_RELAXED) <= mark;
}

void cache_kswapd_kick(struct cache *c)
{
	unsigned i;

	if (atomic_load(&c->kswapd_wake))
		return;		/* already woken: no lock on the allocation path */
	for (i = 0; i < c->nr_zones; i++) {
		if (zone_below(&c->zones[i], c->zones[i].wmark_low + c->zones[i].lowmem_reserve)) {
			ls_mutex_lock(&c->wait_lock, &lc_cache_wait_lock);
			if (!c->kswapd_wake) {
				c->kswapd_wake = true;
				atomic_fetch_add(&c->stats.kswapd_wakeups, 1);
				if (c->have_kswapd)
					pthread_cond_signal(&c->kswapd_wait);
			}
			ls_mutex_unlock(&c->wait_lock);
			return;
		}
	}
}

/*
 * One round of balance_pgdat: from the inactive tail of every zone below
 * its high watermark (lowmem reserve included), pages in proportion to the
 * zone's size (zone->kswapd_batch, set at creation), as the kernel scans
 * lru_size >> priority of each zone. Zones are reclaimed side by side and
 * age at the same rate; with equal batches a small zone would be refilled
 * as fast as a large one and get the same number of allocations, whatever
 * the fair batches say. Zones that are balanced are left alone. Returns
 * the number of zones still below high after the round; *freed gets what
 * was freed.
 */
unsigned cache_kswapd_step(struct cache *c, long *freed)
{
	unsigned i, below = 0;

	*freed = 0;
	for (i = c->nr_zones; i-- > 0;) {
		struct zone *z = &c->zones[i];
		long dirty = 0, mark = z->wmark_high + z->lowmem_reserve;

		if (!zone_below(z, mark))
			continue;
		*freed += zone_shrink(z, z->kswapd_batch, &dirty);
		if (dirty && c->ops && c->ops->wakeup_flusher)
			c->ops->wakeup_flusher(c->owner, dirty, WB_REASON_VMSCAN);
		if (zone_below(z, mark))
			below++;
	}
	return below;
}

/*
 * Reclaim until every zone is above its high watermark. Returns false when
 * it gave up after 4 rounds that freed nothing (the zones below high hold
 * only dirty, writeback, locked or referenced pages).
 */
static bool kswapd_balance(struct cache *c)
{
	int idle = 0;
	long freed;

	while (cache_kswapd_step(c, &freed)) {
		idle = freed ? 0 : idle + 1;
		if (idle == 4)
			return false;
	}
	return true;
}

/*
 * Sleep until woken (or 100 ms, to notice stopping); balance. When a
 * balance gave up, wait 10 ms for writeback before trying again, as
 * kswapd's congestion_wait: allocations keep waking it, and scanning the
 * same dirty pages again at once would only burn CPU.
 * Context: wait_lock held, dropped while balancing.
 */
static void *kswapd_main(void *arg)
{
	struct cache *c = arg;
	bool backoff = false;

	ls_mutex_lock(&c->wait_lock, &lc_cache_wait_lock);
	while (!c->stopping) {
		if (backoff) {
			clock_cond_wait_ms(&c->kswapd_wait, &c->wait_lock, 10);	/* then try again, woken or not */
			backoff = false;
		} else if (!c->kswapd_wake) {
			clock_cond_wait_ms(&c->kswapd_wait, &c->wait_lock, 100);
			if (!c->kswapd_wake)
				continue;
		}
		c->kswapd_wake = false;
		ls_mutex_unlock(&c->wait_lock);
		/* pages over the target first: then the watermarks of what is left */
		backoff = !cache_balloon_run(c);
		backoff = !kswapd_balance(c) || backoff;
		ls_mutex_lock(&c->wait_lock, &lc_cache_wait_lock);
	}
	ls_mutex_unlock(&c->wait_lock);
	return NULL;
}

int reclaim_start(struct cache *c)
{
	int ret = pthread_create(&c->kswapd, NULL, kswapd_main, c);

	if (ret)
		return -ret;
	c->have_kswapd = true;
	return 0;
}

void reclaim_stop(struct cache *c)
{
	if (!c->have_kswapd)
		return;
	ls_mutex_lock(&c->wait_lock, &lc_cache_wait_lock);
	c->stopping = true;
	pthread_cond_broadcast(&c->kswapd_wait);
	ls_mutex_unlock(&c->wait_lock);
	pthread_join(c->kswapd, NULL);
	c->have_kswapd = false;
}
