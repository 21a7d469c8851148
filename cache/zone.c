// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The arena and its zones: creation, watermarks, the free lists, page
 * allocation (fast path, then direct reclaim, then waiting for writeback to
 * free pages) and the LRU lists pages sit on while cached. Choosing which
 * pages to reclaim is reclaim.c's business.
 *
 * Watermarks per zone (pages): the cache's min, max(16, pages/256), shared
 * in proportion to zone size (at least 4, at most a quarter of the zone);
 * low = min + min/4, high = min + min/2, as the kernel's (doc/algorithms.md §4).
 *
 * The allocator is get_page_from_freelist of kernels 3.17-4.7 for one page:
 *  - zones are tried highest first (the zonelist order: Normal, DMA32);
 *  - fast path: a zone is used while free > low + lowmem_reserve;
 *  - fair zone allocation (fair_zone_alloc=1): each zone has a batch of
 *    high - low pages per round (NR_ALLOC_BATCH); a zone whose batch ran
 *    out is flagged depleted and skipped, so zones fill in proportion to
 *    their size and age at the same rate. When the fast pass skipped a
 *    depleted zone and found nothing, all batches are reset and the zones
 *    rescanned without fairness. The depleted flag is the cheap variant of
 *    the 3.17 series: one flag test per zone instead of reading a counter;
 *  - per-zone dirty limits (zone_dirty=1, ALLOC_WRITE only): the fast path
 *    skips a zone whose dirty + writeback pages exceed its share of the
 *    dirty threshold (zone_dirty_ok), the share of a zone being its
 *    dirtyable memory (free + file - high watermark - lowmem reserve). The
 *    limit is cached per zone and refreshed every 64 allocations and at
 *    every batch reset, as the 3.17 series cached it to save its cost;
 *  - kswapd is woken as soon as an allocation sees a zone under its low
 *    watermark (not only in the slow path, as the kernel does: its zones
 *    are thousands of pages between low and high, ours can be a few);
 *  - slow path: the min watermark is tried ignoring fairness and dirty
 *    limits (a write allocation that gets its page from a zone over its
 *    limit this way is counted in nr_zone_dirty_ignored); then direct reclaim,
 *    then the flusher is asked and writeback waited for.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "wbcfs/cache.h"
#include "wbcfs/lib/clock.h"
#include "wbcfs/cache/mapping.h"
#include "cache_i.h"

LOCK_CLASS(lc_zone_lock, "zone_lock")
LOCK_CLASS(lc_cache_wait_lock, "cache_wait_lock")

#define CACHE_MIN_PAGES 64	/* the smallest ceiling */
#define DIRTY_LIMIT_REFRESH 64	/* allocations between dirty-limit refreshes */

/* NR_ALLOC_BATCH's full value: high - low, at least 1 page. */
static long zone_batch(const struct zone *z)
{
	long b = z->wmark_high - z->wmark_low;

	return b > 0 ? b : 1;
}

/*
 * The cache's min watermark, shared among the zones in proportion to their
 * size as min_free_kbytes is: max(16, pages / 256) of the target (the
 * managed pages, as the kernel computes watermarks from managed_pages: a
 * ballooned zone keeps watermarks it can reach). Every zone then has the
 * same watermark-to-size ratio, and the fair batches (high - low) are
 * proportional to zone sizes.
 */
static long cache_wmark_total(size_t target)
{
	return target / 256 > 16 ? (long)(target / 256) : 16;
}

/* Context: size_lock held (or creation); readers peek without a lock. */
static void zone_set_watermarks(struct zone *z, size_t target)
{
	long managed = z->managed_pages, min;

	min = target ? (long)((size_t)cache_wmark_total(target) * (size_t)managed / target) : 4;
	if (min < 4)
		min = 4;
	if (min > managed / 4)
		min = managed / 4;
	__atomic_store_n(&z->wmark_min, min, __ATOMIC_RELAXED);
	__atomic_store_n(&z->wmark_low, min + min / 4, __ATOMIC_RELAXED);
	__atomic_store_n(&z->wmark_high, min + min / 2, __ATOMIC_RELAXED);
	atomic_store(&z->alloc_batch, zone_batch(z));
}

/*
 * Descriptors are written when a page is first handed out, not at
 * creation: the array covers the whole reservation (64 bytes a page, 1.5%
 * of it), and pages never used must not make it resident.
 */
static struct page *zone_page_init(struct zone *z, size_t pfn)
{
	struct page *p = &z->cache->pages[pfn];

	p->zone = z;
	p->data = (char *)z->cache->arena + (pfn << PAGE_SHIFT);
	list_init(&p->lru);
	return p;
}

static void zone_init(struct cache *c, struct zone *z, unsigned id, size_t first, size_t n,
		      size_t span)
{
	memset(z, 0, sizeof(*z));
	pthread_mutex_init(&z->lock, NULL);
	list_init(&z->free_list);
	list_init(&z->active);
	list_init(&z->inactive);
	list_init(&z->returned);
	z->id = id;
	z->cache = c;
	z->present_pages = (long)n;
	z->managed_pages = (long)n;
	z->span_pages = (long)span;
	z->start_pfn = first;
	zone_set_watermarks(z, c->nr_pages);
	z->nr_virgin = (long)n;
	z->nr_free = (long)n;
}

/*
 * kswapd's round per zone: 32 pages for the smallest zone, the others in
 * proportion to their size, as the kernel scans lru_size >> priority of
 * each zone; zones then age at the same rate.
 */
#define KSWAPD_BATCH 32

/*
 * Lowmem protection, as the kernel's lowmem_reserve_ratio (256 for DMA32
 * against Normal): every allocation here could use the highest zone, so a
 * lower zone keeps 1/256 of the pages above it out of their reach. Its
 * dirtyable memory excludes that reserve and its high watermark.
 */
void zones_set_reserves(struct cache *c)
{
	long above = 0, smallest = 0;
	unsigned i;

	for (i = 0; i < c->nr_zones; i++)
		if (!smallest || c->zones[i].managed_pages < smallest)
			smallest = c->zones[i].managed_pages;
	if (smallest < 1)
		smallest = 1;
	for (i = c->nr_zones; i-- > 0;) {
		struct zone *z = &c->zones[i];
		long r = above / 256;

		if (r > z->managed_pages / 4)
			r = z->managed_pages / 4;
		__atomic_store_n(&z->lowmem_reserve, r, __ATOMIC_RELAXED);
		__atomic_store_n(&z->dirty_balance_reserve, z->wmark_high + r, __ATOMIC_RELAXED);
		__atomic_store_n(&z->kswapd_batch, KSWAPD_BATCH * z->managed_pages / smallest,
				 __ATOMIC_RELAXED);
		above += z->managed_pages;
	}
}

/* Context: size_lock held. */
void zones_set_watermarks(struct cache *c)
{
	unsigned i;

	for (i = 0; i < c->nr_zones; i++)
		zone_set_watermarks(&c->zones[i], atomic_load(&c->target_pages));
	zones_set_reserves(c);
}

/*
 * Each zone reserves address space in proportion to its size: raising the
 * ceiling grows every zone by the same factor, as far as its span allows.
 */
static int zones_init(struct cache *c, const struct cache_config *cfg)
{
	size_t first = 0, pfirst = 0;
	unsigned i;

	c->nr_zones = cfg->nr_zones ? cfg->nr_zones : 1;
	c->zones = calloc(c->nr_zones, sizeof(*c->zones));
	if (!c->zones)
		return -ENOMEM;
	for (i = 0; i < c->nr_zones; i++) {
		size_t n = cfg->zone_bytes ? cfg->zone_bytes[i] >> PAGE_SHIFT
					   : c->nr_pages / c->nr_zones;
		size_t span;

		if (i == c->nr_zones - 1 || pfirst + n > c->nr_pages)
			n = c->nr_pages - pfirst;
		if (n < CACHE_MIN_PAGES / 4)
			return -EINVAL;
		span = i == c->nr_zones - 1 ? c->reserve_pages - first
					    : n * c->reserve_pages / c->nr_pages;
		zone_init(c, &c->zones[i], i, first, n, span);
		first += span;
		pfirst += n;
	}
	zones_set_reserves(c);
	return 0;
}

#ifndef MPOL_BIND
#define MPOL_BIND 2
#endif

/*
 * Node-local zones: bind each zone's part of the arena to its node before
 * anything faults it in. A failure is reported and ignored (the zone still
 * works, only its memory may sit on another node).
 */
static void zones_bind_nodes(struct cache *c, const int *node)
{
	unsigned i;

	for (i = 0; node && i < c->nr_zones; i++) {
		struct zone *z = &c->zones[i];
		unsigned long mask[16] = {0};

		if (node[i] < 0 || node[i] >= (int)(sizeof(mask) * 8))
			continue;
		mask[node[i] / (8 * sizeof(long))] = 1UL << (node[i] % (8 * sizeof(long)));
		if (syscall(SYS_mbind, (char *)c->arena + (z->start_pfn << PAGE_SHIFT),
			    (size_t)z->span_pages << PAGE_SHIFT, MPOL_BIND, mask,
			    sizeof(mask) * 8, 0))
			fprintf(stderr, "wbcfs: zone %u: cannot bind to node %d: %s\n", i, node[i],
				strerror(errno));
	}
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/*
 * Fault @bytes of the cache in before it is used, each zone its share.
 * The kernel zeroes every page on first touch, and on a virtual machine
 * the host backs guest memory on first touch too: measured here, 6 GiB
 * took 8-19 s when the host had not backed it and 0.9 s when it had.
 * Left to the first writers, that cost slows them (README, "Cache size":
 * the figures of a 1 GiB dd with prefault=0 and prefault=all), but paying
 * it at mount pins the whole ceiling in memory that an idle mount does
 * not need, so it is no longer the default (prefault=0).
 * MADV_POPULATE_WRITE maps pages without changing their contents; the
 * pages go on the free lists with their descriptors written.
 */
void cache_prefault(struct cache *c, uint64_t bytes)
{
	uint64_t total = (uint64_t)atomic_load(&c->nr_pages) << PAGE_SHIFT;
	unsigned i;

	if (bytes > total)
		bytes = total;
	for (i = 0; i < c->nr_zones && bytes; i++) {
		struct zone *z = &c->zones[i];
		long n = (long)(bytes / PAGE_SIZE * (uint64_t)z->present_pages /
				(total / PAGE_SIZE)), k, first;

		ls_mutex_lock(&z->lock, &lc_zone_lock);
		if (n > z->nr_virgin)
			n = z->nr_virgin;
		first = z->nr_touched;
		for (k = 0; k < n; k++) {
			struct page *p = zone_page_init(z, z->start_pfn + (size_t)(first + k));

			list_add_tail(&p->lru, &z->free_list);
		}
		ZONE_COUNT(z->nr_touched, n);
		z->nr_virgin -= n;
		ls_mutex_unlock(&z->lock);
		if (n)
			madvise((char *)c->arena + ((z->start_pfn + (size_t)first) << PAGE_SHIFT),
				(size_t)n << PAGE_SHIFT, MADV_POPULATE_WRITE);
	}
}

int cache_create(struct cache **out, const struct cache_config *cfg)
{
	struct cache *c;
	int ret = -ENOMEM;

	size_t floor = cfg->min_bytes ? cfg->min_bytes >> PAGE_SHIFT : CACHE_FLOOR_MIN_PAGES;

	if (cfg->size_bytes >> PAGE_SHIFT < CACHE_MIN_PAGES || floor < CACHE_FLOOR_MIN_PAGES ||
	    floor > cfg->size_bytes >> PAGE_SHIFT ||
	    (cfg->reserve_bytes && cfg->reserve_bytes < cfg->size_bytes))
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->nr_pages = cfg->size_bytes >> PAGE_SHIFT;
	c->target_pages = c->nr_pages;
	c->floor_pages = floor;
	c->reserve_pages = (cfg->reserve_bytes ? cfg->reserve_bytes : cfg->size_bytes) >> PAGE_SHIFT;
	pthread_mutex_init(&c->size_lock, NULL);
	/* a reservation: nothing is resident until a page is first used */
	c->arena = mmap(NULL, c->reserve_pages << PAGE_SHIFT, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (c->arena == MAP_FAILED && c->reserve_pages > c->nr_pages) {
		/* strict overcommit (vm.overcommit_memory=2) charges even a
		 * MAP_NORESERVE mapping: then the ceiling cannot rise above
		 * the size asked for */
		c->reserve_pages = c->nr_pages;
		c->arena = mmap(NULL, c->reserve_pages << PAGE_SHIFT, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	}
	if (c->arena == MAP_FAILED)
		goto out_free;
	/* 2 MiB pages: 512x fewer first-touch faults, fewer TLB misses */
	madvise(c->arena, c->reserve_pages << PAGE_SHIFT, MADV_HUGEPAGE);
	c->pages = mmap(NULL, c->reserve_pages * sizeof(*c->pages), PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (c->pages == MAP_FAILED)
		goto out_unmap;
	ret = zones_init(c, cfg);
	if (ret)
		goto out_pages;
	c->tun = cfg->tunables;
	atomic_store(&c->fair_zone_alloc, cfg->fair_zone_alloc);
	atomic_store(&c->zone_dirty, cfg->zone_dirty);
	zones_refresh_dirty_limits(c);
	zones_bind_nodes(c, cfg->zone_node);
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
	munmap(c->pages, c->reserve_pages * sizeof(*c->pages));
out_unmap:
	munmap(c->arena, c->reserve_pages << PAGE_SHIFT);
out_free:
	free(c);
	return ret;
}

void cache_destroy(struct cache *c)
{
	ls_mutex_lock(&c->wait_lock, &lc_cache_wait_lock);
	c->stopping = true;
	pthread_cond_broadcast(&c->free_wait);
	pthread_cond_broadcast(&c->dirty_wait);
	ls_mutex_unlock(&c->wait_lock);
	reclaim_stop(c);
	throttle_domain_destroy(&c->throttle);
	munmap(c->arena, c->reserve_pages << PAGE_SHIFT);
	munmap(c->pages, c->reserve_pages * sizeof(*c->pages));
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
	ls_mutex_lock(&c->wait_lock, &lc_cache_wait_lock);
	pthread_cond_broadcast(&c->free_wait);
	ls_mutex_unlock(&c->wait_lock);
}

void cache_wake_dirty(struct cache *c)
{
	ls_mutex_lock(&c->wait_lock, &lc_cache_wait_lock);
	pthread_cond_broadcast(&c->dirty_wait);
	ls_mutex_unlock(&c->wait_lock);
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

	ls_mutex_lock(&z->lock, &lc_zone_lock);
	lru_del_locked(z, p);
	atomic_store(&p->flags, 0);
	page_mapping_set(p, NULL);
	list_add(&p->lru, &z->free_list);
	ZONE_COUNT(z->nr_free, 1);
	ls_mutex_unlock(&z->lock);
	/* seq_cst: orders nr_free++ before the waiter check (pairs with
	 * cache_wait_free's free_waiters++ before its nr_free check) */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load(&z->cache->free_waiters))
		cache_wake_free(z->cache);
}

unsigned long zone_dirtyable_pages(const struct zone *z)
{
	long n = __atomic_load_n(&z->nr_free, __ATOMIC_RELAXED) +
		 __atomic_load_n(&z->nr_active, __ATOMIC_RELAXED) +
		 __atomic_load_n(&z->nr_inactive, __ATOMIC_RELAXED) - z->dirty_balance_reserve;

	return n > 0 ? (unsigned long)n : 0;
}

/* zone_dirty_limit of kernel 3.3: the zone's share of the dirty threshold. */
unsigned long zone_dirty_limit(struct zone *z)
{
	struct cache *c = z->cache;
	unsigned long zd = zone_dirtyable_pages(z);
	uint64_t bytes = atomic_load(&c->tun.dirty_bytes);

	if (bytes)
		return (unsigned long)((bytes + PAGE_SIZE - 1) / PAGE_SIZE * zd /
				       dirty_dirtyable_pages(c));
	return zd * atomic_load(&c->tun.dirty_ratio) / 100;
}

void zones_refresh_dirty_limits(struct cache *c)
{
	unsigned i;

	for (i = 0; i < c->nr_zones; i++)
		atomic_store(&c->zones[i].dirty_limit, (long)zone_dirty_limit(&c->zones[i]));
}

bool zone_dirty_ok(struct zone *z)
{
	return atomic_load(&z->nr_dirty) + atomic_load(&z->nr_writeback) <=
	       atomic_load(&z->dirty_limit);
}

/* reset_alloc_batches: a new fair round. */
static void zones_reset_batches(struct cache *c)
{
	unsigned i;

	for (i = 0; i < c->nr_zones; i++) {
		atomic_store(&c->zones[i].alloc_batch, zone_batch(&c->zones[i]));
		atomic_store(&c->zones[i].fair_depleted, false);
	}
	atomic_fetch_add(&c->stats.nr_fair_batch_resets, 1);
	zones_refresh_dirty_limits(c);
}

enum alloc_mark { MARK_LOW, MARK_MIN, MARK_RESERVE };

/* Take a page from @z if it stays above @mark. Counts the batch. */
static struct page *zone_rmqueue(struct zone *z, enum alloc_mark mark)
{
	long floor = mark == MARK_RESERVE ? 0 :
		     (mark == MARK_LOW ? z->wmark_low : z->wmark_min) + z->lowmem_reserve;
	struct page *p = NULL;

	if (__atomic_load_n(&z->nr_free, __ATOMIC_RELAXED) <= floor)
		return NULL;	/* unlocked peek: a zone under its mark costs no lock */
	ls_mutex_lock(&z->lock, &lc_zone_lock);
	if (z->nr_free > floor) {
		/* resident pages first; a never-used one only when none is free */
		if (!list_empty(&z->free_list)) {
			p = list_first_entry(&z->free_list, struct page, lru);
			list_del_init(&p->lru);
		} else {
			p = zone_page_init(z, z->start_pfn + (size_t)z->nr_touched);
			ZONE_COUNT(z->nr_touched, 1);
			z->nr_virgin--;
		}
		ZONE_COUNT(z->nr_free, -1);
		if (atomic_fetch_sub(&z->alloc_batch, 1) <= 1)
			atomic_store(&z->fair_depleted, true);
	}
	ls_mutex_unlock(&z->lock);
	if (p) {
		if (atomic_exchange(&p->flags, 0) & (1UL << PG_returned))
			atomic_fetch_add(&z->cache->stats.pgregrown, 1);
		atomic_store(&p->refcount, 1);
		atomic_fetch_add(&z->pgalloc, 1);
		atomic_fetch_add(&z->cache->stats.pgalloc, 1);
	}
	return p;
}

/*
 * One pass over the zones, highest first (get_page_from_freelist).
 * Fairness and dirty limits apply to the low-watermark pass only.
 */
static struct page *zone_take_free(struct cache *c, unsigned alloc_flags, enum alloc_mark mark)
{
	bool multi = c->nr_zones > 1;
	bool fair = multi && mark == MARK_LOW && atomic_load(&c->fair_zone_alloc);
	bool dirty = multi && mark == MARK_LOW && (alloc_flags & ALLOC_WRITE) &&
		     atomic_load(&c->zone_dirty);
	struct page *p;
	unsigned i;

	if (dirty && atomic_fetch_add(&c->dirty_limit_tick, 1) % DIRTY_LIMIT_REFRESH == 0)
		zones_refresh_dirty_limits(c);
	for (;;) {
		long fair_skipped = 0;

		if (mark == MARK_LOW)
			cache_kswapd_kick(c);	/* a zone under low: kswapd refills it early */
		for (i = c->nr_zones; i-- > 0;) {
			struct zone *z = &c->zones[i];

			if (fair && atomic_load(&z->fair_depleted)) {
				fair_skipped++;
				continue;
			}
			if (dirty && !zone_dirty_ok(z)) {
				atomic_fetch_add(&c->stats.nr_zone_dirty_skips, 1);
				continue;
			}
			p = zone_rmqueue(z, mark);
			if (p) {
				if (mark != MARK_LOW && (alloc_flags & ALLOC_WRITE) && multi &&
				    atomic_load(&c->zone_dirty) && !zone_dirty_ok(z))
					atomic_fetch_add(&c->stats.nr_zone_dirty_ignored, 1);
				return p;
			}
		}
		if (!fair)
			return NULL;
		fair = false;
		if (fair_skipped)
			zones_reset_batches(c);
	}
}

/* Sleep up to @ms for freed pages; false when the cache is stopping. */
static bool cache_wait_free(struct cache *c, long ms)
{
	bool stop;

	ls_mutex_lock(&c->wait_lock, &lc_cache_wait_lock);
	atomic_fetch_add(&c->free_waiters, 1);	/* seq_cst: before the nr_free check */
	if (!c->stopping && cache_free_pages(c) == 0)
		clock_cond_wait_ms(&c->free_wait, &c->wait_lock, ms);
	atomic_fetch_sub(&c->free_waiters, 1);
	stop = c->stopping;
	ls_mutex_unlock(&c->wait_lock);
	return !stop;
}

struct page *cache_alloc_page(struct cache *c, unsigned alloc_flags)
{
	struct page *p = zone_take_free(c, alloc_flags, MARK_LOW);

	if (p)
		return p;
	/* __alloc_pages_slowpath: the min watermark, ignoring fairness and dirty limits */
	p = zone_take_free(c, alloc_flags, MARK_MIN);
	if (p)
		return p;
	if (alloc_flags & ALLOC_NOWAIT) {
		cache_shrink(c, 32);	/* never sleeps; kicks the flusher on dirty pages */
		return zone_take_free(c, alloc_flags, MARK_RESERVE);
	}
	for (;;) {
		atomic_fetch_add(&c->stats.allocstall, 1);
		cache_shrink(c, 32);
		p = zone_take_free(c, alloc_flags, MARK_RESERVE);
		if (p)
			return p;
		if (c->ops && c->ops->wakeup_flusher)
			c->ops->wakeup_flusher(c->owner, 1024, WB_REASON_VMSCAN);
		if (!cache_wait_free(c, 10))
			return NULL;
		p = zone_take_free(c, alloc_flags, MARK_RESERVE);
		if (p)
			return p;
	}
}

void cache_lru_add(struct page *p)
{
	struct zone *z = p->zone;

	ls_mutex_lock(&z->lock, &lc_zone_lock);
	if (!page_test_set(p, PG_lru)) {
		list_add(&p->lru, &z->inactive);
		ZONE_COUNT(z->nr_inactive, 1);
	}
	ls_mutex_unlock(&z->lock);
}

static void lru_del_locked(struct zone *z, struct page *p)
{
	lock_assert_held(&z->lock);

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

	ls_mutex_lock(&z->lock, &lc_zone_lock);
	lru_del_locked(z, p);
	ls_mutex_unlock(&z->lock);
}

void cache_lru_activate(struct page *p)
{
	struct zone *z = p->zone;

	ls_mutex_lock(&z->lock, &lc_zone_lock);
	if (page_test(p, PG_lru) && !page_test(p, PG_active)) {
		list_move(&p->lru, &z->active);
		ZONE_COUNT(z->nr_inactive, -1);
		ZONE_COUNT(z->nr_active, 1);
		page_set(p, PG_active);
		page_clear(p, PG_referenced);
		atomic_fetch_add(&z->cache->stats.pgactivate, 1);
	}
	ls_mutex_unlock(&z->lock);
}

/*
 * Writeback of a PG_reclaim page ended (end_page_writeback): free it now if
 * it is clean, unreferenced since reclaim met it and used by nobody else
 * (mapping_reclaim_page's refcount test: the cache's and the caller's);
 * otherwise move it to the inactive tail so the next scan meets it first.
 * Context: caller holds a reference and no locks; never sleeps.
 */
void cache_reclaim_now(struct page *p)
{
	struct zone *z = p->zone;
	bool gone;

	if (page_mapping_peek(p) && !page_test(p, PG_dirty) && !page_test(p, PG_referenced) &&
	    !page_test(p, PG_active) && mapping_reclaim_page(p, &gone)) {
		atomic_fetch_add(&z->pgsteal, 1);
		atomic_fetch_add(&z->cache->stats.pgsteal, 1);
		return;
	}
	ls_mutex_lock(&z->lock, &lc_zone_lock);
	if (page_test(p, PG_lru) && !page_test(p, PG_active))
		list_move_tail(&p->lru, &z->inactive);
	ls_mutex_unlock(&z->lock);
}
