// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The cache's size: a ceiling (cache_size), a floor (cache_min) and a
 * target between them that the cache holds now, and the balloon that
 * gives the pages above the target back to the kernel.
 *
 * The arena is a reservation (MAP_NORESERVE) of reserve_pages; a page
 * becomes resident when the allocator first hands it out (zone.c: the
 * zone's never-used pages are counted free, nr_virgin, and their
 * descriptors written when taken). Each zone holds its share of the
 * target (managed_pages, in proportion to its share of the ceiling):
 *
 *   held    = pages in use + free pages on the list = touched - returned
 *   nr_free = free list + nr_virgin, nr_virgin = managed - held (>= 0)
 *
 * Lowering the target takes the never-used pages out of nr_free at once
 * and, when a zone holds more than its share, wakes kswapd: it takes free
 * pages off the list, gives them back with madvise(MADV_DONTNEED) in
 * coalesced ranges outside the zone lock, and keeps them on the zone's
 * returned list; for the rest it reclaims clean pages from the LRU tails
 * (dirty ones are handed to the flusher, reclaim never writes) and takes
 * them on its next round. Returned pages are neither free nor file pages,
 * so dirtyable memory (free + file - reserves), the dirty thresholds and
 * the zones' dirty limits fall with the target, and the throttle holds
 * writers to them. Raising the target puts returned pages back on the
 * free lists at once (they are faulted in again when used: pgregrown),
 * then never-used ones. Watermarks follow the managed pages, as the
 * kernel's follow managed_pages, so a zone at the floor keeps watermarks
 * it can reach and its allocators progress through direct reclaim.
 *
 * Why a balloon rather than unmapping pages as they are reclaimed: the
 * allocator, reclaim and the dirty rules all count pages per zone; a
 * balloon keeps those counts true (pages are in use, free, or returned)
 * and the madvise work is batched in one thread, off the allocation path.
 *
 * Lock ordering: size_lock, then zone->lock, then wait_lock or the
 * throttle domain's lock (leaves).
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "wbcfs/cache.h"
#include "wbcfs/lib/clock.h"
#include "cache_i.h"

LOCK_CLASS(lc_cache_size_lock, "cache_size_lock")

#define BALLOON_BATCH 4096	/* free pages given back per zone lock hold */
#define BALLOON_RECLAIM 4096	/* clean pages reclaimed per round for the balloon */

/* Pages @z holds: in use or on its free list (never-used ones excluded). */
static long zone_held(const struct zone *z)
{
	return z->nr_touched - z->nr_returned - z->nr_returning;
}

/*
 * Bring the free count in line with the zone's share: returned pages go
 * back to the free list tail first while the zone holds less than its
 * share (they keep PG_returned: regrown when handed out), then the
 * never-used pages make up the rest, as far as the zone's span allows.
 * Returns the change of nr_free. Context: z->lock held.
 */
static long zone_resize_locked(struct zone *z)
{
	long old = z->nr_free, held = zone_held(z), want, room;

	lock_assert_held(&z->lock);

	/* all of them: one splice, not a walk of a million descriptors
	 * under the lock */
	if (z->nr_returned && held + z->nr_returned <= z->managed_pages) {
		list_splice_init(&z->returned, &z->free_list);
		ZONE_COUNT(z->nr_free, z->nr_returned);
		held += z->nr_returned;
		ZONE_COUNT(z->nr_returned, -z->nr_returned);
	}
	while (held < z->managed_pages && !list_empty(&z->returned)) {
		struct page *p = list_first_entry(&z->returned, struct page, lru);

		list_move_tail(&p->lru, &z->free_list);
		ZONE_COUNT(z->nr_returned, -1);
		held++;
		ZONE_COUNT(z->nr_free, 1);
	}
	want = z->managed_pages - held;
	room = z->span_pages - z->nr_touched;
	if (want < 0)
		want = 0;
	if (want > room)
		want = room;
	ZONE_COUNT(z->nr_free, want - z->nr_virgin);
	z->nr_virgin = want;
	return z->nr_free - old;
}

/*
 * The zones' shares of the target, in proportion to their shares of the
 * ceiling (the last zone takes the rounding). Returns pages made free;
 * *over gets whether a zone holds more than its share.
 * Context: size_lock held.
 */
static long zones_share_target(struct cache *c, bool *over)
{
	size_t ceil = c->nr_pages, target = c->target_pages, done = 0;
	long grown = 0;
	unsigned i;

	*over = false;
	for (i = 0; i < c->nr_zones; i++) {
		struct zone *z = &c->zones[i];
		long m = i == c->nr_zones - 1 ? (long)(target - done)
					      : (long)(target * (size_t)z->present_pages / ceil);

		if (m > z->present_pages)
			m = z->present_pages;
		if (m < 1)
			m = 1;
		done += (size_t)m;
		ls_mutex_lock(&z->lock, &lc_zone_lock);
		z->managed_pages = m;
		grown += zone_resize_locked(z);
		if (zone_held(z) > m)
			*over = true;
		ls_mutex_unlock(&z->lock);
	}
	zones_set_watermarks(c);
	zones_refresh_dirty_limits(c);
	return grown;
}

/* The zones' shares of the ceiling, in proportion to their spans. */
static void zones_share_ceiling(struct cache *c)
{
	size_t ceil = c->nr_pages, done = 0;
	unsigned i;

	for (i = 0; i < c->nr_zones; i++) {
		struct zone *z = &c->zones[i];
		size_t n = i == c->nr_zones - 1 ? ceil - done
						: (size_t)z->span_pages * ceil / c->reserve_pages;

		__atomic_store_n(&z->present_pages, (long)n, __ATOMIC_RELAXED);
		done += n;
	}
}

size_t cache_resident_pages(const struct cache *c)
{
	long n = 0;
	unsigned i;

	for (i = 0; i < c->nr_zones; i++) {
		const struct zone *z = &c->zones[i];

		n += __atomic_load_n(&z->nr_touched, __ATOMIC_RELAXED) -
		     __atomic_load_n(&z->nr_returned, __ATOMIC_RELAXED) -
		     __atomic_load_n(&z->nr_returning, __ATOMIC_RELAXED);
	}
	return n > 0 ? (size_t)n : 0;
}

size_t cache_target_pages(const struct cache *c)
{
	return atomic_load(&((struct cache *)c)->target_pages);
}

size_t cache_ceiling_pages(const struct cache *c)
{
	return atomic_load(&((struct cache *)c)->nr_pages);
}

size_t cache_floor_pages(const struct cache *c)
{
	return atomic_load(&((struct cache *)c)->floor_pages);
}

/* Wake kswapd to give pages back (it may be asleep on its 100 ms tick). */
static void balloon_kick(struct cache *c)
{
	atomic_store(&c->balloon_work, true);
	ls_mutex_lock(&c->wait_lock, &lc_cache_wait_lock);
	if (!c->kswapd_wake) {
		c->kswapd_wake = true;
		if (c->have_kswapd)
			pthread_cond_signal(&c->kswapd_wait);
	}
	ls_mutex_unlock(&c->wait_lock);
}

/*
 * Apply @pages (clamped) as the target; @force: the ceiling moved, the
 * shares change even if the target does not. Context: size_lock held.
 */
static void target_apply_locked(struct cache *c, size_t pages, bool force, const char *reason,
				long pressure)
{
	size_t old = c->target_pages;
	struct throttle_trace_cache rec;
	bool over;
	long grown, dirty;

	lock_assert_held(&c->size_lock);

	if (pages > c->nr_pages)
		pages = c->nr_pages;
	if (pages < c->floor_pages)
		pages = c->floor_pages;
	if (pages == old && !force)
		return;
	atomic_store(&c->target_pages, pages);
	grown = zones_share_target(c, &over);
	if (over)
		balloon_kick(c);
	if (grown > 0)
		cache_wake_free(c);
	if (pages == old)
		return;
	atomic_fetch_add(&c->stats.cache_target_changes, 1);
	dirty = atomic_load(&c->stats.nr_dirty);
	if (pages < old) {
		unsigned long bg, thresh;
		long wb = atomic_load(&c->stats.nr_writeback);

		/* the thresholds of the cache once shrunk: dirtyable memory
		 * falls as kswapd gives pages back, the limit at once */
		dirty_thresholds_for(c, pages, &bg, &thresh);
		throttle_domain_lower_limit(&c->throttle, thresh,
					    dirty + wb > 0 ? (unsigned long)(dirty + wb) : 0);
	}
	rec = (struct throttle_trace_cache){
		.target = pages, .resident = cache_resident_pages(c), .ceiling = c->nr_pages,
		.floor = c->floor_pages, .free = (unsigned long)cache_free_pages(c),
		.dirty = dirty > 0 ? (unsigned long)dirty : 0, .reason = reason,
		.pressure = pressure,
	};
	throttle_trace_cache(&c->throttle, &rec);
}

void cache_set_target(struct cache *c, size_t pages, const char *reason, long pressure)
{
	ls_mutex_lock(&c->size_lock, &lc_cache_size_lock);
	target_apply_locked(c, pages, false, reason ? reason : "?", pressure);
	ls_mutex_unlock(&c->size_lock);
}

int cache_set_ceiling(struct cache *c, size_t pages)
{
	size_t old;
	bool follow;

	ls_mutex_lock(&c->size_lock, &lc_cache_size_lock);
	if (pages > c->reserve_pages || pages < c->floor_pages || pages < CACHE_FLOOR_MIN_PAGES) {
		ls_mutex_unlock(&c->size_lock);
		return -EINVAL;
	}
	old = c->nr_pages;
	/* a target nobody lowered follows the ceiling up; a lowered one is
	 * the pressure controller's to raise */
	follow = c->target_pages == old;
	atomic_store(&c->nr_pages, pages);
	zones_share_ceiling(c);
	target_apply_locked(c, follow ? pages : c->target_pages, true, "ceiling", -1);
	ls_mutex_unlock(&c->size_lock);
	return 0;
}

int cache_set_floor(struct cache *c, size_t pages)
{
	ls_mutex_lock(&c->size_lock, &lc_cache_size_lock);
	if (pages > c->nr_pages || pages < CACHE_FLOOR_MIN_PAGES) {
		ls_mutex_unlock(&c->size_lock);
		return -EINVAL;
	}
	atomic_store(&c->floor_pages, pages);
	target_apply_locked(c, c->target_pages, false, "floor", -1);
	ls_mutex_unlock(&c->size_lock);
	return 0;
}

static int page_addr_cmp(const void *a, const void *b)
{
	const char *x = (*(struct page *const *)a)->data, *y = (*(struct page *const *)b)->data;

	return x < y ? -1 : x > y;
}

/*
 * Give @n pages back to the kernel: sorted by address, one madvise per
 * run of adjacent pages (a run covering a whole 2 MiB huge page frees it
 * whole; a partial one splits it, and the kernel frees the 4 KiB pages).
 * Pages already returned and not used since are skipped.
 * Returns the pages given back. Context: no locks; the pages are ours.
 */
static long balloon_madvise(struct page **batch, long n)
{
	long i = 0, done = 0;

	qsort(batch, (size_t)n, sizeof(*batch), page_addr_cmp);
	while (i < n) {
		long j = i + 1;

		if (page_test(batch[i], PG_returned)) {
			i++;
			continue;
		}
		while (j < n && !page_test(batch[j], PG_returned) &&
		       (char *)batch[j]->data == (char *)batch[j - 1]->data + PAGE_SIZE)
			j++;
		madvise(batch[i]->data, (size_t)(j - i) << PAGE_SHIFT, MADV_DONTNEED);
		done += j - i;
		i = j;
	}
	return done;
}

/*
 * One round of @z: free pages over its share go back to the kernel; what
 * the free list could not give is reclaimed from the LRU for the next
 * round. Returns the pages given back; *progress counts them and the
 * pages reclaimed.
 */
static long zone_balloon(struct zone *z, struct page **batch, long *dirty, long *progress)
{
	long n = 0, excess, given, i;

	ls_mutex_lock(&z->lock, &lc_zone_lock);
	excess = zone_held(z) - z->managed_pages;
	while (n < excess && n < BALLOON_BATCH && !list_empty(&z->free_list)) {
		struct page *p = list_last_entry(&z->free_list, struct page, lru);

		list_del_init(&p->lru);
		batch[n++] = p;
	}
	ZONE_COUNT(z->nr_free, -n);
	ZONE_COUNT(z->nr_returning, n);
	ls_mutex_unlock(&z->lock);
	given = n ? balloon_madvise(batch, n) : 0;
	if (n) {
		ls_mutex_lock(&z->lock, &lc_zone_lock);
		for (i = 0; i < n; i++) {
			page_set(batch[i], PG_returned);
			list_add(&batch[i]->lru, &z->returned);
		}
		ZONE_COUNT(z->nr_returning, -n);
		ZONE_COUNT(z->nr_returned, n);
		/* the target may have risen meanwhile */
		if (zone_resize_locked(z) > 0) {
			ls_mutex_unlock(&z->lock);
			cache_wake_free(z->cache);
		} else {
			ls_mutex_unlock(&z->lock);
		}
		atomic_fetch_add(&z->cache->stats.pgreturned, given);
	}
	*progress += n;
	if (excess > n) {
		long want = excess - n < BALLOON_RECLAIM ? excess - n : BALLOON_RECLAIM;

		/* a bounded scan: an LRU of dirty pages is not walked whole
		 * every round while the flusher writes them */
		*progress += zone_shrink_scan(z, want, 4 * want, dirty);
	}
	return given;
}

long cache_balloon_step(struct cache *c, long *left)
{
	struct page *batch[BALLOON_BATCH];	/* 32 KiB: kswapd's or a test's stack */
	long given = 0, dirty = 0, progress = 0, rest = 0;
	unsigned i;

	for (i = c->nr_zones; i-- > 0;)
		given += zone_balloon(&c->zones[i], batch, &dirty, &progress);
	if (dirty && c->ops && c->ops->wakeup_flusher)
		c->ops->wakeup_flusher(c->owner, dirty, WB_REASON_VMSCAN);
	for (i = 0; i < c->nr_zones; i++) {
		struct zone *z = &c->zones[i];
		long over;

		ls_mutex_lock(&z->lock, &lc_zone_lock);
		over = zone_held(z) - z->managed_pages;
		ls_mutex_unlock(&z->lock);
		rest += over > 0 ? over : 0;
	}
	/* the zones' cached dirty limits fall with what was given back */
	if (given)
		zones_refresh_dirty_limits(c);
	*left = rest;
	return given;
}

/*
 * kswapd's part: rounds until no zone holds more than its share. Returns
 * false when it gave up after 4 rounds without progress (what is left is
 * dirty, under writeback, locked or referenced: the flusher was asked);
 * the work stays pending and kswapd comes back after its backoff.
 */
bool cache_balloon_run(struct cache *c)
{
	long left, prev = -1;
	int idle = 0;

	if (!atomic_exchange(&c->balloon_work, false))
		return true;
	for (;;) {
		cache_balloon_step(c, &left);
		if (!left)
			return true;
		idle = prev >= 0 && left >= prev ? idle + 1 : 0;
		prev = left;
		if (idle == 4) {
			atomic_store(&c->balloon_work, true);
			return false;
		}
	}
}
