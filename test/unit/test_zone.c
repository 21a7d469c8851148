// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Zones: watermarks and lowmem reserves, the fair zone allocation policy
 * (zones age in proportion to their size with it, the preferred zone takes
 * nearly everything without it), per-zone dirty limits (a small preferred
 * zone cannot fill with dirty pages with them, and does without them;
 * reclaim then meets fewer dirty pages), and the slow path that ignores the
 * limits rather than fail.
 *
 * Deterministic: no kswapd thread. The test plays kswapd (cache_kswapd_step)
 * after any allocation that woke it, and writeback with a FIFO flusher
 * whose writes take a while.
 */
#include <check.h>
#include "helpers.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "wbcfs/cache.h"
#include "wbcfs/cache/mapping.h"

#define MIB_PAGES(n) ((size_t)(n) << (20 - PAGE_SHIFT))

/* Two zones of @pages0 (the preferred) and @pages1 pages. */
static struct cache *t_cache_zones(size_t pages0, size_t pages1, bool fair, bool zone_dirty)
{
	size_t bytes[2] = { pages0 * PAGE_SIZE, pages1 * PAGE_SIZE };
	struct cache_config cfg = { .size_bytes = (pages0 + pages1) * PAGE_SIZE, .nr_zones = 2,
				    .zone_bytes = bytes,
				    .fair_zone_alloc = fair, .zone_dirty = zone_dirty };

	return t_cache_cfg(&cfg);
}

/*
 * The test's kswapd: once an allocation woke it, it balances every zone
 * before the next allocation (the thread frees a clean page several times
 * faster than a FUSE request fills one, so it keeps pace).
 */
static void t_kswapd_tick(struct cache *c)
{
	long freed;
	int idle = 0;

	if (!c->kswapd_wake)
		return;
	c->kswapd_wake = false;
	while (idle < 4 && cache_kswapd_step(c, &freed))
		idle = freed ? 0 : idle + 1;
}

/*
 * The FIFO flusher: past half the threshold it starts writeback of the
 * oldest dirty page at every allocation, and a write completes 512
 * allocations after it started (the device's latency); over the threshold
 * the writer waits for completions (the throttle).
 */
#define T_WB_LAG 512

struct t_flusher {
	struct page **dirty, **inflight;
	unsigned long *started;
	size_t cap, dhead, dtail, ihead, itail;
	unsigned long tick;
};

static void t_flusher_init(struct t_flusher *f, size_t cap)
{
	memset(f, 0, sizeof(*f));
	f->dirty = calloc(cap, sizeof(*f->dirty));
	f->inflight = calloc(cap, sizeof(*f->inflight));
	f->started = calloc(cap, sizeof(*f->started));
	f->cap = cap;
	ck_assert(f->dirty && f->inflight && f->started);
}

static void t_flusher_add(struct t_flusher *f, struct page *p)
{
	ck_assert_uint_lt(f->dtail - f->dhead, f->cap);
	page_get(p);
	f->dirty[f->dtail++ % f->cap] = p;
}

static void t_flusher_start_one(struct t_flusher *f)
{
	struct page *p = f->dirty[f->dhead++ % f->cap];

	lock_page(p);
	if (clear_page_dirty_for_io(p)) {
		set_page_writeback(p);
		unlock_page(p);
		f->started[f->itail % f->cap] = f->tick;
		f->inflight[f->itail++ % f->cap] = p;
		return;
	}
	unlock_page(p);
	page_put(p);
}

static void t_flusher_end_one(struct t_flusher *f)
{
	struct page *p = f->inflight[f->ihead++ % f->cap];

	end_page_writeback(p);
	page_put(p);
}

static void t_flusher_run(struct cache *c, struct t_flusher *f, long thresh)
{
	f->tick++;
	if (f->dhead != f->dtail && atomic_load(&c->stats.nr_dirty) > thresh / 2)
		t_flusher_start_one(f);
	while (f->ihead != f->itail && f->started[f->ihead % f->cap] + T_WB_LAG <= f->tick)
		t_flusher_end_one(f);
	while (atomic_load(&c->stats.nr_dirty) + atomic_load(&c->stats.nr_writeback) > thresh) {
		if (f->ihead != f->itail)
			t_flusher_end_one(f);
		else
			t_flusher_start_one(f);
	}
}

static void t_flusher_drain(struct t_flusher *f)
{
	while (f->dhead != f->dtail)
		t_flusher_start_one(f);
	while (f->ihead != f->itail)
		t_flusher_end_one(f);
	free(f->dirty);
	free(f->inflight);
	free(f->started);
}

/*
 * Stream @n new pages into @m from @start (a sequential read, or with
 * @write a sequential write whose dirty pages the flusher writes back,
 * keeping dirty + writeback under @thresh). Calls @sample after every page.
 */
static void t_stream(struct cache *c, struct mapping *m, uint64_t start, size_t n, bool write,
		     long thresh, struct t_flusher *f,
		     void (*sample)(struct cache *c, void *arg), void *arg)
{
	size_t i;

	for (i = 0; i < n; i++) {
		struct page *p = mapping_grab_page(m, start + i, write ? ALLOC_WRITE : 0);

		ck_assert_ptr_nonnull(p);
		page_set(p, PG_uptodate);
		if (write) {
			set_page_dirty(p);
			t_flusher_add(f, p);
		}
		unlock_page(p);
		page_put(p);
		if (write)
			t_flusher_run(c, f, thresh);
		t_kswapd_tick(c);
		if (sample)
			sample(c, arg);
	}
}

static void t_teardown(struct cache *c, struct mapping *m)
{
	mapping_truncate(m, 0, UINT64_MAX);
	mapping_destroy(m);
	ck_assert_int_eq(cache_free_pages(c), (long)c->nr_pages);
	cache_destroy(c);
}

START_TEST(watermarks_and_reserves)
{
	struct cache *c = t_cache_zones(MIB_PAGES(64), MIB_PAGES(960), true, true);
	struct zone *z0 = &c->zones[0], *z1 = &c->zones[1];

	/* min is shared in proportion to size: 1024 pages of 1 GiB */
	ck_assert_int_eq(z0->wmark_min, 64);
	ck_assert_int_eq(z1->wmark_min, 960);
	ck_assert_int_eq(z1->wmark_low, 1200);
	ck_assert_int_eq(z1->wmark_high, 1440);
	/* the fair batches are proportional to size: high - low */
	ck_assert_int_eq(z0->alloc_batch, 16);
	ck_assert_int_eq(z1->alloc_batch, 240);
	/* lowmem_reserve_ratio 256: the lower zone keeps 1/256 of what is above */
	ck_assert_int_eq(z0->lowmem_reserve, (long)MIB_PAGES(960) / 256);
	ck_assert_int_eq(z1->lowmem_reserve, 0);
	ck_assert_int_eq(z0->dirty_balance_reserve, z0->wmark_high + z0->lowmem_reserve);
	/* dirtyable memory excludes the reserves, per zone and in total */
	ck_assert_uint_eq(zone_dirtyable_pages(z0), MIB_PAGES(64) - z0->dirty_balance_reserve);
	ck_assert_uint_eq(dirty_dirtyable_pages(c),
			  MIB_PAGES(1024) - z0->dirty_balance_reserve - z1->dirty_balance_reserve + 1);
	/* dirty_ratio 20: the zone's limit is 20% of its dirtyable pages */
	ck_assert_uint_eq(zone_dirty_limit(z0), zone_dirtyable_pages(z0) * 20 / 100);
	/* dirty_bytes: its share of the bytes, by dirtyable memory */
	atomic_store(&c->tun.dirty_bytes, 100ULL << 20);
	ck_assert_uint_eq(zone_dirty_limit(z0), MIB_PAGES(100) * zone_dirtyable_pages(z0) /
						    dirty_dirtyable_pages(c));
	cache_destroy(c);
}
END_TEST

/* Allocations per zone over a long sequential read of 8x the cache. */
static double t_read_share0(bool fair, long *resets)
{
	struct cache *c = t_cache_zones(MIB_PAGES(16), MIB_PAGES(240), fair, false);
	struct mapping m;
	long a0, a1;

	mapping_init(&m, c, NULL, NULL);
	t_stream(c, &m, 0, c->nr_pages, false, 0, NULL, NULL, NULL);	/* warm */
	a0 = c->zones[0].pgalloc;
	a1 = c->zones[1].pgalloc;
	t_stream(c, &m, c->nr_pages, 8 * c->nr_pages, false, 0, NULL, NULL, NULL);
	a0 = c->zones[0].pgalloc - a0;
	a1 = c->zones[1].pgalloc - a1;
	*resets = c->stats.nr_fair_batch_resets;
	ck_assert_int_gt(c->stats.pgsteal, 7 * (long)c->nr_pages);
	ck_assert_int_gt(c->stats.kswapd_wakeups, 0);
	t_teardown(c, &m);
	return (double)a0 / (double)(a0 + a1);
}

START_TEST(fair_alloc_proportional)
{
	double want = 16.0 / 256.0, fair, unfair;
	long resets_fair, resets_unfair;

	fair = t_read_share0(true, &resets_fair);
	unfair = t_read_share0(false, &resets_unfair);
	printf("# zone 0 (16M of 256M) got %.4f of the allocations with fair_zone_alloc=1, "
	       "%.4f with 0 (size share %.4f); %ld batch resets\n", fair, unfair, want,
	       resets_fair);
	/* with the policy: in proportion to size within 5% */
	ck_assert_double_lt(fabs(fair - want) / want, 0.05);
	ck_assert_int_gt(resets_fair, 0);
	ck_assert_int_eq(resets_unfair, 0);
	/* without it: kswapd keeps the preferred zone going, the other ages slowly */
	ck_assert_double_lt(unfair, want / 2);
}
END_TEST

struct dirty_watch {
	long max_dirty1;	/* zone 1: dirty + writeback, highest seen */
	long max_over;		/* zone 1: most pages over its limit while zone 0 had room */
};

static void t_watch(struct cache *c, void *arg)
{
	struct dirty_watch *w = arg;
	struct zone *z0 = &c->zones[0], *z1 = &c->zones[1];
	long d0 = z0->nr_dirty + z0->nr_writeback, d1 = z1->nr_dirty + z1->nr_writeback;
	long lim1 = (long)zone_dirty_limit(z1);

	if (d1 > w->max_dirty1)
		w->max_dirty1 = d1;
	if (d0 < (long)zone_dirty_limit(z0) && d1 - lim1 > w->max_over)
		w->max_over = d1 - lim1;
}

/*
 * A small preferred zone (zone 1, 16M: the Normal zone of a 4 GiB machine)
 * beside a large one, no fair allocation (the kernel before 3.12), dirty
 * threshold 32M (twice the small zone): a read fills the cache with clean pages, then a writer
 * streams 4x the cache through it.
 */
static void t_write_small_zone(bool zone_dirty, struct dirty_watch *w, long *immediate,
			       long *skips, long *ignored)
{
	struct cache *c = t_cache_zones(MIB_PAGES(48), MIB_PAGES(16), false, zone_dirty);
	struct t_flusher f;
	struct mapping rd, wr;

	atomic_store(&c->tun.dirty_bytes, 32ULL << 20);
	mapping_init(&rd, c, NULL, NULL);
	mapping_init(&wr, c, NULL, NULL);
	t_flusher_init(&f, 4 * c->nr_pages);
	t_stream(c, &rd, 0, c->nr_pages, false, 0, NULL, NULL, NULL);
	memset(w, 0, sizeof(*w));
	t_stream(c, &wr, 0, 4 * c->nr_pages, true, (long)MIB_PAGES(32), &f, t_watch, w);
	*immediate = c->stats.nr_vmscan_immediate_reclaim;
	*skips = c->stats.nr_zone_dirty_skips;
	*ignored = c->stats.nr_zone_dirty_ignored;
	t_flusher_drain(&f);
	mapping_truncate(&rd, 0, UINT64_MAX);
	mapping_destroy(&rd);
	t_teardown(c, &wr);
}

START_TEST(zone_dirty_limits_small_zone)
{
	struct dirty_watch on, off;
	long imm_on, imm_off, skips_on, skips_off, ign_on, ign_off;
	long zone1 = (long)MIB_PAGES(16);

	t_write_small_zone(true, &on, &imm_on, &skips_on, &ign_on);
	t_write_small_zone(false, &off, &imm_off, &skips_off, &ign_off);
	printf("# zone 1 (16M, preferred) dirty+writeback max: %ld pages with zone_dirty=1 "
	       "(at most %ld over its limit while zone 0 had room), %ld with 0 (%ld over); "
	       "immediate reclaim %ld vs %ld; skips %ld, slow-path ignores %ld\n", on.max_dirty1,
	       on.max_over, off.max_dirty1, off.max_over, imm_on, imm_off, skips_on, ign_on);
	/* with the limits: over only by the slow path's pages and the staleness
	 * of the cached limit (refreshed every 64 write allocations) */
	ck_assert_int_le(on.max_over, 64 + ign_on);
	ck_assert_int_lt(ign_on, 4 * (long)MIB_PAGES(64) / 50);	/* < 2% of the writes */
	ck_assert_int_eq(ign_off, 0);
	ck_assert_int_gt(skips_on, 0);
	ck_assert_int_eq(skips_off, 0);
	/* without: the small zone fills with dirty pages */
	ck_assert_int_gt(off.max_dirty1, zone1 * 3 / 4);
	ck_assert_int_gt(off.max_over, 1000);
	/* and reclaim meets them */
	ck_assert_int_gt(imm_off, 0);
	ck_assert_int_lt(imm_on * 4, imm_off);
}
END_TEST

/* When every zone is over its dirty limit, a write still gets a page. */
START_TEST(slow_path_ignores_dirty_limit)
{
	struct cache *c = t_cache_zones(MIB_PAGES(4), MIB_PAGES(4), true, true);
	struct mapping m;
	unsigned i;

	atomic_store(&c->tun.dirty_bytes, 8 * PAGE_SIZE);
	mapping_init(&m, c, NULL, NULL);
	for (i = 0; i < 512; i++) {
		struct page *p = mapping_grab_page(&m, i, ALLOC_WRITE);

		ck_assert_ptr_nonnull(p);
		page_set(p, PG_uptodate);
		set_page_dirty(p);
		unlock_page(p);
		page_put(p);
	}
	ck_assert_int_eq(c->stats.nr_dirty, 512);
	ck_assert_int_gt(c->stats.nr_zone_dirty_ignored, 0);
	ck_assert_int_gt(c->stats.nr_zone_dirty_skips, 0);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

/* Live toggles act on the next allocation. */
START_TEST(toggles_are_live)
{
	struct cache *c = t_cache_zones(MIB_PAGES(4), MIB_PAGES(4), false, false);
	struct mapping m;
	long resets;

	mapping_init(&m, c, NULL, NULL);
	t_stream(c, &m, 0, 512, false, 0, NULL, NULL, NULL);
	ck_assert_int_eq(c->stats.nr_fair_batch_resets, 0);
	ck_assert_int_eq(c->zones[0].pgalloc, 0);	/* the higher zone had room */
	atomic_store(&c->fair_zone_alloc, 1);
	t_stream(c, &m, 512, 1024, false, 0, NULL, NULL, NULL);
	resets = c->stats.nr_fair_batch_resets;
	ck_assert_int_gt(resets, 0);
	ck_assert_int_gt(c->zones[0].pgalloc, 400);	/* half of them, in batches */
	t_teardown(c, &m);
}
END_TEST

/*
 * NUMA zones: each zone's part of the arena is bound to its node. This
 * machine may have one node, so both zones ask for node 0, and the policy
 * the kernel reports for an address in the second zone must be a bind to
 * node 0 (no policy at all would be MPOL_DEFAULT).
 */
/* The memory policy of the first page of zone 1 (MPOL_F_ADDR); its
 * descriptor is not written before the page is used: the arena's address. */
static int t_policy(struct cache *c, int *mode, unsigned long *mask, size_t bytes)
{
	return (int)syscall(SYS_get_mempolicy, mode, mask, bytes * 8,
			    (char *)c->arena + (c->zones[1].start_pfn << PAGE_SHIFT),
			    2 /* MPOL_F_ADDR */);
}

START_TEST(zones_bound_to_nodes)
{
	size_t bytes[2] = { MIB_PAGES(4) * PAGE_SIZE, MIB_PAGES(4) * PAGE_SIZE };
	int node[2] = { 0, 0 };
	struct cache_config cfg = { .size_bytes = 2 * bytes[0], .nr_zones = 2,
				    .zone_bytes = bytes, .zone_node = node };
	unsigned long mask[16] = {0};
	struct cache *c;
	int mode = -1;

	c = t_cache_cfg(&cfg);
	ck_assert_int_eq(t_policy(c, &mode, mask, sizeof(mask)), 0);
	ck_assert_int_eq(mode, 2);	/* MPOL_BIND */
	ck_assert_uint_eq(mask[0] & 1, 1);
	cache_destroy(c);
	cfg.zone_node = NULL;		/* no nodes given: no policy */
	ck_assert_int_eq(cache_create(&c, &cfg), 0);
	ck_assert_int_eq(t_policy(c, &mode, mask, sizeof(mask)), 0);
	ck_assert_int_eq(mode, 0);	/* MPOL_DEFAULT */
	cache_destroy(c);
}
END_TEST

static Suite *zone_suite(void)
{
	Suite *s = suite_create("zone");
	TCase *tc;

	tc = t_tcase(s, "zone", watermarks_and_reserves, fair_alloc_proportional,
		     zone_dirty_limits_small_zone, slow_path_ignores_dirty_limit, toggles_are_live,
		     zones_bound_to_nodes);
	tcase_set_timeout(tc, 60);
	return s;
}

int main(void)
{
	return t_run(zone_suite());
}
