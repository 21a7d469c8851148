// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Dirty accounting and limits: the tunables' kernel rules (ratio and bytes
 * exclude each other, ranges, dirty_bytes minimum), thresholds from ratios
 * and from bytes, bg >= thresh halving, per-page/per-mapping/global dirty
 * counters, and the simple throttle: free below the limit, waiting above
 * it until writeback brings the cache back under.
 */
#include <check.h>
#include "helpers.h"
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "wbcfs/cache.h"
#include "wbcfs/cache/mapping.h"

START_TEST(tunable_rules)
{
	struct dirty_tunables t;

	dirty_tunables_default(&t);
	ck_assert_uint_eq(dirty_tunable_get(&t, DT_DIRTY_RATIO), 20);
	ck_assert_uint_eq(dirty_tunable_get(&t, DT_DIRTY_BACKGROUND_RATIO), 10);
	ck_assert_uint_eq(dirty_tunable_get(&t, DT_DIRTY_EXPIRE_CENTISECS), 3000);
	ck_assert_uint_eq(dirty_tunable_get(&t, DT_DIRTY_WRITEBACK_CENTISECS), 500);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_BYTES, 100 << 20), 0);
	ck_assert_uint_eq(dirty_tunable_get(&t, DT_DIRTY_RATIO), 0);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_RATIO, 30), 0);
	ck_assert_uint_eq(dirty_tunable_get(&t, DT_DIRTY_BYTES), 0);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_BACKGROUND_BYTES, 1 << 20), 0);
	ck_assert_uint_eq(dirty_tunable_get(&t, DT_DIRTY_BACKGROUND_RATIO), 0);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_BACKGROUND_RATIO, 5), 0);
	ck_assert_uint_eq(dirty_tunable_get(&t, DT_DIRTY_BACKGROUND_BYTES), 0);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_RATIO, 101), -EINVAL);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_BYTES, 4096), -EINVAL);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_BYTES, 8192), 0);
	ck_assert_uint_eq(dirty_tunable_get(&t, DT_DIRTY_RATIO), 30 * 0);
}
END_TEST

START_TEST(tunable_ranges)
{
	struct dirty_tunables t;

	dirty_tunables_default(&t);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_BACKGROUND_RATIO, 101), -EINVAL);
	ck_assert_uint_eq(dirty_tunable_get(&t, DT_DIRTY_BACKGROUND_RATIO), 10);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_RATIO, 100), 0);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_RATIO, 0), 0);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_BYTES, 8191), -EINVAL);
	ck_assert_uint_eq(dirty_tunable_get(&t, DT_DIRTY_BYTES), 0);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_BYTES, 0), 0);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_BACKGROUND_BYTES, 1), 0);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_WRITEBACK_CENTISECS, 0), 0);
	ck_assert_uint_eq(dirty_tunable_get(&t, DT_DIRTY_WRITEBACK_CENTISECS), 0);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_EXPIRE_CENTISECS, 8640000), 0);
	ck_assert_int_eq(dirty_tunable_set(&t, DT_DIRTY_EXPIRE_CENTISECS, UINT64_MAX), -EINVAL);
	ck_assert_uint_eq(dirty_tunable_get(&t, DT_DIRTY_EXPIRE_CENTISECS), 8640000);
	ck_assert_int_eq(dirty_tunable_set(&t, NR_DIRTY_TUNABLES, 1), -EINVAL);
}
END_TEST

START_TEST(threshold_floor_and_file_pages)
{
	struct cache *c = t_cache(1000);
	unsigned long bg, thresh, avail0, avail1;
	struct mapping m;
	struct page *p;

	dirty_tunable_set(&c->tun, DT_DIRTY_RATIO, 0);
	dirty_tunable_set(&c->tun, DT_DIRTY_BACKGROUND_RATIO, 0);
	dirty_thresholds(c, &bg, &thresh);
	ck_assert_uint_eq(thresh, 1);	/* never 0 */
	ck_assert_uint_eq(bg, 0);
	/* a cached page moves from free to file: dirtyable is unchanged */
	avail0 = dirty_dirtyable_pages(c);
	mapping_init(&m, c, NULL, NULL);
	p = mapping_grab_page(&m, 0, 0);
	unlock_page(p);
	page_put(p);
	avail1 = dirty_dirtyable_pages(c);
	ck_assert_uint_eq(avail0, avail1);
	/* an allocated, uncached page is not dirtyable */
	p = cache_alloc_page(c, 0);
	ck_assert_uint_eq(dirty_dirtyable_pages(c), avail1 - 1);
	page_put(p);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(simple_throttle_kicks_background)
{
	struct cache *c = t_cache(1000);
	struct mapping m;
	unsigned i;

	mapping_init(&m, c, NULL, NULL);
	dirty_tunable_set(&c->tun, DT_DIRTY_BYTES, 100 * PAGE_SIZE);
	dirty_tunable_set(&c->tun, DT_DIRTY_BACKGROUND_BYTES, 20 * PAGE_SIZE);
	for (i = 0; i < 30; i++) {
		struct page *p = mapping_grab_page(&m, i, 0);

		set_page_dirty(p);
		unlock_page(p);
		page_put(p);
		dirty_balance_simple(c);	/* under thresh: never waits */
		ck_assert_int_eq(t_woken.bg, i >= 20 ? (long)i - 19 : 0);
	}
	ck_assert(dirty_over_background(c));
	mapping_truncate(&m, 0, UINT64_MAX);
	ck_assert(!dirty_over_background(c));
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(thresholds_from_ratio_and_bytes)
{
	struct cache *c = t_cache(10000);
	unsigned long bg, thresh, avail = dirty_dirtyable_pages(c);

	/* an empty cache: everything but the reserves is dirtyable */
	ck_assert_uint_le(avail, 10001);
	ck_assert_uint_ge(avail, 10001 - (unsigned long)c->zones[0].wmark_high);
	dirty_thresholds(c, &bg, &thresh);
	ck_assert_uint_eq(thresh, avail * 20 / 100);
	ck_assert_uint_eq(bg, avail * 10 / 100);
	dirty_tunable_set(&c->tun, DT_DIRTY_BYTES, 10 << 20);
	dirty_tunable_set(&c->tun, DT_DIRTY_BACKGROUND_BYTES, (4 << 20) + 1);
	dirty_thresholds(c, &bg, &thresh);
	ck_assert_uint_eq(thresh, 2560);
	ck_assert_uint_eq(bg, 1025);	/* rounded up to whole pages */
	dirty_tunable_set(&c->tun, DT_DIRTY_BACKGROUND_BYTES, 20 << 20);
	dirty_thresholds(c, &bg, &thresh);
	ck_assert_uint_eq(bg, thresh / 2);	/* bg >= thresh: halved */
	cache_destroy(c);
}
END_TEST

START_TEST(counters_follow_pages)
{
	struct cache *c = t_cache(256);
	struct mapping m;
	unsigned i;

	mapping_init(&m, c, NULL, NULL);
	for (i = 0; i < 30; i++) {
		struct page *p = mapping_grab_page(&m, i, 0);

		page_set(p, PG_uptodate);
		set_page_dirty(p);
		unlock_page(p);
		page_put(p);
	}
	ck_assert_int_eq(c->stats.nr_dirty, 30);
	ck_assert_int_eq(c->stats.nr_dirtied, 30);
	ck_assert_int_eq(c->zones[0].nr_dirty, 30);
	ck_assert_int_eq(m.nrdirty, 30);
	ck_assert(dirty_over_background(c) == (30 > 25));
	mapping_truncate(&m, 0, UINT64_MAX);
	ck_assert_int_eq(c->stats.nr_dirty, 0);
	ck_assert_int_eq(c->stats.nr_dirtied, 30);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

struct cleaner {
	struct mapping *m;
	unsigned n;
	_Atomic unsigned cleaned;	/* pages it has written back */
};

/* A fake flusher: after a while, write back every page. */
static void *t_cleaner(void *arg)
{
	struct cleaner *cl = arg;
	unsigned i;

	usleep(200000);
	for (i = 0; i < cl->n; i++) {
		struct page *p = mapping_get_page(cl->m, i);

		lock_page(p);
		if (clear_page_dirty_for_io(p))
			set_page_writeback(p);
		unlock_page(p);
		end_page_writeback(p);
		page_put(p);
		cl->cleaned++;
	}
	return NULL;
}

START_TEST(simple_throttle_waits_over_limit)
{
	struct cache *c = t_cache(1000);
	struct cleaner cl;
	struct mapping m;
	pthread_t t;
	unsigned i;

	mapping_init(&m, c, NULL, NULL);
	dirty_tunable_set(&c->tun, DT_DIRTY_BYTES, 100 * PAGE_SIZE);
	for (i = 0; i < 150; i++) {
		struct page *p = mapping_grab_page(&m, i, 0);

		page_set(p, PG_uptodate);
		set_page_dirty(p);
		unlock_page(p);
		page_put(p);
		if (i == 50) {
			/* below the limit: returns with nobody cleaning (it
			 * would wait forever otherwise), nothing changed */
			dirty_balance_simple(c);
			ck_assert_int_eq(c->stats.nr_dirty, 51);
		}
	}
	cl = (struct cleaner){ .m = &m, .n = 150 };
	pthread_create(&t, NULL, t_cleaner, &cl);
	dirty_balance_simple(c);	/* 150 > 100: waits for the cleaner */
	/* it returned because the cleaner brought the count under the
	 * limit, however slow either thread ran: no clock is needed */
	ck_assert_uint_ge(atomic_load(&cl.cleaned), 50);
	ck_assert_int_le(c->stats.nr_dirty + c->stats.nr_writeback, 100);
	ck_assert_int_gt(t_woken.calls, 0);	/* over bg: the flusher was asked */
	pthread_join(t, NULL);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

static Suite *dirty_suite(void)
{
	Suite *s = suite_create("dirty");

	t_tcase(s, "tunables", tunable_rules, tunable_ranges);
	t_tcase(s, "thresholds", thresholds_from_ratio_and_bytes, threshold_floor_and_file_pages);
	t_tcase(s, "accounting", counters_follow_pages);
	t_tcase(s, "throttle", simple_throttle_waits_over_limit, simple_throttle_kicks_background);
	return s;
}

int main(void)
{
	return t_run(dirty_suite());
}
