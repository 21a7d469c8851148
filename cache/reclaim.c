// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Reclaim of clean pages from the inactive LRU tails (mm/vmscan.c's ideas):
 * referenced pages get a second chance, clean unused pages are freed, dirty
 * or writeback pages are marked PG_reclaim, counted as immediate reclaim
 * and handed to the flusher (reclaim never writes and never sleeps on a
 * page), active pages are aged into the inactive list when it is smaller.
 * The kswapd thread keeps zones above their high watermark.
 */
#include <errno.h>
#include <time.h>

#include "wbcfs/cache.h"
#include "wbcfs/mapping.h"
#include "cache_i.h"

#define SCAN_BATCH 32

/* Age active pages into the inactive list while it is the smaller one. */
static void zone_age_active(struct zone *z, long nr)
{
	pthread_mutex_lock(&z->lock);
	while (nr-- > 0 && z->nr_inactive < z->nr_active && !list_empty(&z->active)) {
		struct page *p = list_last_entry(&z->active, struct page, lru);

		if (page_test_clear(p, PG_referenced)) {
			list_move(&p->lru, &z->active);	/* one more round */
			continue;
		}
		page_clear(p, PG_active);
		list_move(&p->lru, &z->inactive);
		z->nr_active--;
		z->nr_inactive++;
	}
	pthread_mutex_unlock(&z->lock);
}

/* Take up to @nr pages off the inactive tail, referenced. Context: z->lock. */
static unsigned zone_isolate(struct zone *z, struct page **out, unsigned nr)
{
	unsigned n = 0;

	while (n < nr && !list_empty(&z->inactive)) {
		struct page *p = list_last_entry(&z->inactive, struct page, lru);

		list_del_init(&p->lru);
		page_clear(p, PG_lru);
		z->nr_inactive--;
		page_get(p);
		out[n++] = p;
	}
	return n;
}

static void zone_putback(struct zone *z, struct page *p, bool active, bool tail)
{
	pthread_mutex_lock(&z->lock);
	if (p->mapping && !page_test_set(p, PG_lru)) {
		if (active) {
			page_set(p, PG_active);
			list_add(&p->lru, &z->active);
			z->nr_active++;
		} else {
			list_add(&p->lru, tail ? z->inactive.prev : &z->inactive);
			z->nr_inactive++;
		}
	}
	pthread_mutex_unlock(&z->lock);
}

enum scan_result { SCAN_FREED, SCAN_KEEP, SCAN_ACTIVATE, SCAN_DIRTY };

static enum scan_result scan_page(struct zone *z, struct page *p)
{
	struct mapping *m = p->mapping;

	if (!m)
		return SCAN_FREED;	/* truncated meanwhile: our put frees it */
	if (page_test_clear(p, PG_referenced))
		return SCAN_ACTIVATE;
	if (page_test(p, PG_dirty) || page_test(p, PG_writeback)) {
		if (!page_test_set(p, PG_reclaim)) {
			atomic_fetch_add(&z->nr_immediate, 1);
			atomic_fetch_add(&z->cache->stats.nr_vmscan_immediate_reclaim, 1);
		}
		return SCAN_DIRTY;
	}
	if (page_test(p, PG_locked))
		return SCAN_KEEP;
	return mapping_try_remove_page(m, p) ? SCAN_FREED : SCAN_KEEP;
}

/* One batch from @z's inactive tail. Returns pages freed; counts dirty met. */
static long zone_shrink_batch(struct zone *z, long want, long *dirty_met)
{
	struct page *batch[SCAN_BATCH];
	unsigned n, i;
	long freed = 0;

	pthread_mutex_lock(&z->lock);
	n = zone_isolate(z, batch, want < SCAN_BATCH ? (unsigned)want : SCAN_BATCH);
	pthread_mutex_unlock(&z->lock);
	atomic_fetch_add(&z->pgscan, n);
	atomic_fetch_add(&z->cache->stats.pgscan, n);
	for (i = 0; i < n; i++) {
		struct page *p = batch[i];

		switch (scan_page(z, p)) {
		case SCAN_FREED:
			freed++;
			break;
		case SCAN_ACTIVATE:
			zone_putback(z, p, true, false);
			break;
		case SCAN_DIRTY:
			(*dirty_met)++;
			zone_putback(z, p, false, false);
			break;
		case SCAN_KEEP:
			zone_putback(z, p, false, false);
			break;
		}
		page_put(p);
	}
	atomic_fetch_add(&z->pgsteal, freed);
	atomic_fetch_add(&z->cache->stats.pgsteal, freed);
	return freed;
}

long cache_shrink(struct cache *c, long nr)
{
	long freed = 0, dirty = 0;
	unsigned i;

	for (i = 0; i < c->nr_zones && freed < nr; i++) {
		struct zone *z = &c->zones[i];
		long budget = z->nr_inactive + z->nr_active;

		while (freed < nr && budget > 0) {
			long want = nr - freed < SCAN_BATCH ? nr - freed : SCAN_BATCH, got;

			zone_age_active(z, SCAN_BATCH);
			got = zone_shrink_batch(z, want, &dirty);
			freed += got;
			budget -= want;
			if (!got && z->nr_inactive == 0 && z->nr_active == 0)
				break;
		}
	}
	if (dirty && c->ops && c->ops->wakeup_flusher)
		c->ops->wakeup_flusher(c->owner, dirty, WB_REASON_VMSCAN);
	return freed;
}

static bool zone_below(const struct zone *z, long mark)
{
	return __atomic_load_n(&z->nr_free, __ATOMIC_RELAXED) < mark;
}

void cache_kswapd_kick(struct cache *c)
{
	unsigned i;

	if (!c->have_kswapd)
		return;
	for (i = 0; i < c->nr_zones; i++) {
		if (zone_below(&c->zones[i], c->zones[i].wmark_low)) {
			pthread_mutex_lock(&c->wait_lock);
			if (!c->kswapd_wake) {
				c->kswapd_wake = true;
				atomic_fetch_add(&c->stats.kswapd_wakeups, 1);
				pthread_cond_signal(&c->kswapd_wait);
			}
			pthread_mutex_unlock(&c->wait_lock);
			return;
		}
	}
}

/* Reclaim until every zone is above its high watermark. */
static void kswapd_balance(struct cache *c)
{
	unsigned i;

	for (i = 0; i < c->nr_zones; i++) {
		struct zone *z = &c->zones[i];
		int idle = 0;

		while (zone_below(z, z->wmark_high) && idle < 4) {
			long dirty = 0;

			zone_age_active(z, SCAN_BATCH);
			if (zone_shrink_batch(z, SCAN_BATCH, &dirty) == 0)
				idle++;
			if (dirty && c->ops && c->ops->wakeup_flusher)
				c->ops->wakeup_flusher(c->owner, dirty, WB_REASON_VMSCAN);
		}
	}
}

static void *kswapd_main(void *arg)
{
	struct cache *c = arg;

	pthread_mutex_lock(&c->wait_lock);
	while (!c->stopping) {
		if (!c->kswapd_wake) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 100 * 1000000L;
			ts.tv_sec += ts.tv_nsec / 1000000000L;
			ts.tv_nsec %= 1000000000L;
			pthread_cond_timedwait(&c->kswapd_wait, &c->wait_lock, &ts);
			if (!c->kswapd_wake)
				continue;
		}
		c->kswapd_wake = false;
		pthread_mutex_unlock(&c->wait_lock);
		kswapd_balance(c);
		pthread_mutex_lock(&c->wait_lock);
	}
	pthread_mutex_unlock(&c->wait_lock);
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
	pthread_mutex_lock(&c->wait_lock);
	c->stopping = true;
	pthread_cond_broadcast(&c->kswapd_wait);
	pthread_mutex_unlock(&c->wait_lock);
	pthread_join(c->kswapd, NULL);
	c->have_kswapd = false;
}
