// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The arena and its zones: creation, watermarks, the free lists, page
 * allocation (fast path, then direct reclaim, then waiting for writeback to
 * free pages) and the LRU lists pages sit on while cached. Choosing which
 * pages to reclaim is reclaim.c's business.
 *
 * Watermarks per zone (pages): min = max(16, present/256), low = min*5/4,
 * high = min*3/2, in the kernel's proportions (low = min + min/4,
 * high = min + min/2).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "wbcfs/cache.h"
#include "wbcfs/mapping.h"
#include "cache_i.h"

#define CACHE_MIN_PAGES 64

static void zone_init(struct cache *c, struct zone *z, unsigned id, size_t first, size_t n)
{
	size_t i;

	memset(z, 0, sizeof(*z));
	pthread_mutex_init(&z->lock, NULL);
	list_init(&z->free_list);
	list_init(&z->active);
	list_init(&z->inactive);
	z->id = id;
	z->cache = c;
	z->present_pages = (long)n;
	z->wmark_min = z->present_pages / 256 > 16 ? z->present_pages / 256 : 16;
	if (z->wmark_min > z->present_pages / 4)
		z->wmark_min = z->present_pages / 4;
	z->wmark_low = z->wmark_min + z->wmark_min / 4;
	z->wmark_high = z->wmark_min + z->wmark_min / 2;
	for (i = first; i < first + n; i++) {
		struct page *p = &c->pages[i];

		p->zone = z;
		p->data = (char *)c->arena + (i << PAGE_SHIFT);
		list_init(&p->lru);
		list_add_tail(&p->lru, &z->free_list);
	}
	z->nr_free = (long)n;
}

static int zones_init(struct cache *c, const struct cache_config *cfg)
{
	size_t first = 0;
	unsigned i;

	c->nr_zones = cfg->nr_zones ? cfg->nr_zones : 1;
	c->zones = calloc(c->nr_zones, sizeof(*c->zones));
	if (!c->zones)
		return -ENOMEM;
	for (i = 0; i < c->nr_zones; i++) {
		size_t n = cfg->zone_bytes ? cfg->zone_bytes[i] >> PAGE_SHIFT
					   : c->nr_pages / c->nr_zones;

		if (i == c->nr_zones - 1 || first + n > c->nr_pages)
			n = c->nr_pages - first;
		if (n < CACHE_MIN_PAGES / 4)
			return -EINVAL;
		zone_init(c, &c->zones[i], i, first, n);
		first += n;
	}
	return 0;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/*
 * Fault @bytes of the arena in before the cache is used (pages are handed
 * out in arena order). The kernel zeroes every page on first touch, and on
 * a virtual machine the host backs guest memory on first touch too:
 * measured here, 6 GiB took 8-19 s when the host had not backed it and
 * 0.9 s when it had. Left to the first writers, that cost turned a 1 GiB
 * dd from 700-900 MB/s into 100-350 MB/s and halved cold reads; a
 * background pass competed with them just as badly. So by default it is
 * paid at mount (the prefault= option bounds it).
 * MADV_POPULATE_WRITE maps pages without changing their contents.
 */
void cache_prefault(struct cache *c, uint64_t bytes)
{
	size_t len = c->nr_pages << PAGE_SHIFT;

	if (bytes < len)
		len = (size_t)bytes & ~(PAGE_SIZE - 1);
	if (len)
		madvise(c->arena, len, MADV_POPULATE_WRITE);
}

int cache_create(struct cache **out, const struct cache_config *cfg)
{
	struct cache *c;
	int ret = -ENOMEM;

	if (cfg->size_bytes >> PAGE_SHIFT < CACHE_MIN_PAGES)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->nr_pages = cfg->size_bytes >> PAGE_SHIFT;
	c->arena = mmap(NULL, c->nr_pages << PAGE_SHIFT, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (c->arena == MAP_FAILED)
		goto out_free;
	/* 2 MiB pages: 512x fewer first-touch faults, fewer TLB misses */
	madvise(c->arena, c->nr_pages << PAGE_SHIFT, MADV_HUGEPAGE);
	c->pages = calloc(c->nr_pages, sizeof(*c->pages));
	if (!c->pages)
		goto out_unmap;
	ret = zones_init(c, cfg);
	if (ret)
		goto out_pages;
	c->tun = cfg->tunables;
	c->ops = cfg->ops;
	c->owner = cfg->owner;
	pthread_mutex_init(&c->wait_lock, NULL);
	pthread_cond_init(&c->free_wait, NULL);
	pthread_cond_init(&c->dirty_wait, NULL);
	pthread_cond_init(&c->kswapd_wait, NULL);
	ret = throttle_domain_init(&c->throttle, dirty_throttle_global, c, CACHE_TRACE_RECORDS);
	if (ret)
		goto out_zones;
	if (cfg->start_kswapd) {
		ret = reclaim_start(c);
		if (ret)
			goto out_throttle;
	}
	*out = c;
	return 0;
out_throttle:
	throttle_domain_destroy(&c->throttle);
out_zones:
	free(c->zones);
out_pages:
	free(c->pages);
out_unmap:
	munmap(c->arena, c->nr_pages << PAGE_SHIFT);
out_free:
	free(c);
	return ret;
}

void cache_destroy(struct cache *c)
{
	pthread_mutex_lock(&c->wait_lock);
	c->stopping = true;
	pthread_cond_broadcast(&c->free_wait);
	pthread_cond_broadcast(&c->dirty_wait);
	pthread_mutex_unlock(&c->wait_lock);
	reclaim_stop(c);
	throttle_domain_destroy(&c->throttle);
	munmap(c->arena, c->nr_pages << PAGE_SHIFT);
	free(c->pages);
	free(c->zones);
	free(c);
}

long cache_free_pages(const struct cache *c)
{
	long n = 0;
	unsigned i;

	for (i = 0; i < c->nr_zones; i++)
		n += __atomic_load_n(&c->zones[i].nr_free, __ATOMIC_RELAXED);
	return n;
}

void cache_wake_free(struct cache *c)
{
	pthread_mutex_lock(&c->wait_lock);
	pthread_cond_broadcast(&c->free_wait);
	pthread_mutex_unlock(&c->wait_lock);
}

void cache_wake_dirty(struct cache *c)
{
	pthread_mutex_lock(&c->wait_lock);
	pthread_cond_broadcast(&c->dirty_wait);
	pthread_mutex_unlock(&c->wait_lock);
}

/* Context: z->lock held. */
static void lru_del_locked(struct zone *z, struct page *p);

/*
 * Last reference gone: back to the free list. A page still on an LRU list
 * (a racing putback) is unlinked first, so the free list never shares it.
 * Context: any thread; takes zone->lock, then wait_lock if allocators wait.
 */
void zone_free_page(struct page *p)
{
	struct zone *z = p->zone;

	pthread_mutex_lock(&z->lock);
	lru_del_locked(z, p);
	atomic_store(&p->flags, 0);
	page_mapping_set(p, NULL);
	list_add(&p->lru, &z->free_list);
	ZONE_COUNT(z->nr_free, 1);
	pthread_mutex_unlock(&z->lock);
	/* seq_cst: orders nr_free++ before the waiter check (pairs with
	 * cache_wait_free's free_waiters++ before its nr_free check) */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load(&z->cache->free_waiters))
		cache_wake_free(z->cache);
}

/* Fast path: a free page from the first zone that has one above min. */
static struct page *zone_take_free(struct cache *c, bool use_reserve)
{
	unsigned i;

	for (i = 0; i < c->nr_zones; i++) {
		struct zone *z = &c->zones[i];
		struct page *p = NULL;

		pthread_mutex_lock(&z->lock);
		if (z->nr_free > (use_reserve ? 0 : z->wmark_min)) {
			p = list_first_entry(&z->free_list, struct page, lru);
			list_del_init(&p->lru);
			ZONE_COUNT(z->nr_free, -1);
		}
		pthread_mutex_unlock(&z->lock);
		if (p) {
			atomic_store(&p->flags, 0);
			atomic_store(&p->refcount, 1);
			atomic_fetch_add(&z->pgalloc, 1);
			atomic_fetch_add(&c->stats.pgalloc, 1);
			return p;
		}
	}
	return NULL;
}

/* Sleep up to @ms for freed pages; false when the cache is stopping. */
static bool cache_wait_free(struct cache *c, long ms)
{
	struct timespec ts;
	bool stop;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += ms * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_mutex_lock(&c->wait_lock);
	atomic_fetch_add(&c->free_waiters, 1);	/* seq_cst: before the nr_free check */
	if (!c->stopping && cache_free_pages(c) == 0)
		pthread_cond_timedwait(&c->free_wait, &c->wait_lock, &ts);
	atomic_fetch_sub(&c->free_waiters, 1);
	stop = c->stopping;
	pthread_mutex_unlock(&c->wait_lock);
	return !stop;
}

struct page *cache_alloc_page(struct cache *c, unsigned alloc_flags)
{
	struct page *p = zone_take_free(c, false);

	cache_kswapd_kick(c);
	if (p)
		return p;
	if (alloc_flags & ALLOC_NOWAIT) {
		cache_shrink(c, 32);	/* never sleeps; kicks the flusher on dirty pages */
		return zone_take_free(c, true);
	}
	for (;;) {
		atomic_fetch_add(&c->stats.allocstall, 1);
		cache_shrink(c, 32);
		p = zone_take_free(c, true);
		if (p)
			return p;
		if (c->ops && c->ops->wakeup_flusher)
			c->ops->wakeup_flusher(c->owner, 1024, WB_REASON_VMSCAN);
		if (!cache_wait_free(c, 10))
			return NULL;
		p = zone_take_free(c, true);
		if (p)
			return p;
	}
}

void cache_lru_add(struct page *p)
{
	struct zone *z = p->zone;

	pthread_mutex_lock(&z->lock);
	if (!page_test_set(p, PG_lru)) {
		list_add(&p->lru, &z->inactive);
		ZONE_COUNT(z->nr_inactive, 1);
	}
	pthread_mutex_unlock(&z->lock);
}

static void lru_del_locked(struct zone *z, struct page *p)
{
	if (!page_test_clear(p, PG_lru))
		return;
	list_del_init(&p->lru);
	if (page_test_clear(p, PG_active))
		ZONE_COUNT(z->nr_active, -1);
	else
		ZONE_COUNT(z->nr_inactive, -1);
}

void cache_lru_del(struct page *p)
{
	struct zone *z = p->zone;

	pthread_mutex_lock(&z->lock);
	lru_del_locked(z, p);
	pthread_mutex_unlock(&z->lock);
}

void cache_lru_activate(struct page *p)
{
	struct zone *z = p->zone;

	pthread_mutex_lock(&z->lock);
	if (page_test(p, PG_lru) && !page_test(p, PG_active)) {
		list_move(&p->lru, &z->active);
		ZONE_COUNT(z->nr_inactive, -1);
		ZONE_COUNT(z->nr_active, 1);
		page_set(p, PG_active);
		page_clear(p, PG_referenced);
		atomic_fetch_add(&z->cache->stats.pgactivate, 1);
	}
	pthread_mutex_unlock(&z->lock);
}

/*
 * Writeback of a PG_reclaim page ended (end_page_writeback): free it now if
 * it is clean, unreferenced since reclaim met it and used by nobody else
 * (mapping_try_remove_page's refcount test: the cache's and the caller's);
 * otherwise move it to the inactive tail so the next scan meets it first.
 * Context: caller holds a reference and no locks; never sleeps.
 */
void cache_reclaim_now(struct page *p)
{
	struct zone *z = p->zone;
	struct mapping *m = page_mapping_peek(p);

	if (m && !page_test(p, PG_dirty) && !page_test(p, PG_referenced) &&
	    !page_test(p, PG_active) && mapping_try_remove_page(m, p)) {
		atomic_fetch_add(&z->pgsteal, 1);
		atomic_fetch_add(&z->cache->stats.pgsteal, 1);
		return;
	}
	pthread_mutex_lock(&z->lock);
	if (page_test(p, PG_lru) && !page_test(p, PG_active))
		list_move_tail(&p->lru, &z->inactive);
	pthread_mutex_unlock(&z->lock);
}
