// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * LRU and reclaim decisions: clean pages are freed before dirty ones,
 * dirty/writeback pages are marked PG_reclaim, counted as immediate
 * reclaim and handed to the flusher, referenced pages get a second chance,
 * reclaim never blocks on a locked page, a PG_reclaim page is freed when
 * its writeback ends, allocation reclaims when the cache is full, and
 * ALLOC_NOWAIT fails instead of waiting when nothing is reclaimable.
 */
#include <check.h>
#include <stdlib.h>
#include <unistd.h>

#include "wbcfs/cache.h"
#include "wbcfs/mapping.h"

static long flusher_calls, flusher_pages;

static void t_wakeup(void *owner, long nr, enum wb_reason why)
{
	flusher_calls++;
	flusher_pages += nr;
}
static const struct cache_ops t_cops = { .wakeup_flusher = t_wakeup };

static struct cache *t_cache(size_t pages)
{
	struct cache_config cfg = { .size_bytes = pages * PAGE_SIZE, .nr_zones = 1,
				    .ops = &t_cops };
	struct cache *c;

	dirty_tunables_default(&cfg.tunables);
	ck_assert_int_eq(cache_create(&c, &cfg), 0);
	flusher_calls = flusher_pages = 0;
	return c;
}

/* Fill @m with @n uptodate pages from index 0; every @dirty_every-th dirty. */
static void t_fill(struct mapping *m, unsigned n, unsigned dirty_every)
{
	unsigned i;

	for (i = 0; i < n; i++) {
		struct page *p = mapping_grab_page(m, i, ALLOC_NOWAIT);

		ck_assert_ptr_nonnull(p);
		page_set(p, PG_uptodate);
		if (dirty_every && i % dirty_every == 0)
			set_page_dirty(p);
		unlock_page(p);
		page_put(p);
	}
}

static bool t_present(struct mapping *m, uint64_t i)
{
	struct page *p = mapping_get_page(m, i);

	if (p)
		page_put(p);
	return p != NULL;
}

START_TEST(clean_before_dirty)
{
	struct cache *c = t_cache(256);
	struct mapping m;
	unsigned i;
	long freed;

	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 200, 2);	/* even pages dirty */
	freed = cache_shrink(c, 100);
	ck_assert_int_eq(freed, 100);
	for (i = 0; i < 200; i += 2)
		ck_assert(t_present(&m, i));	/* no dirty page was dropped */
	for (i = 1; i < 200; i += 2)
		ck_assert(!t_present(&m, i));
	ck_assert_int_gt(c->stats.nr_vmscan_immediate_reclaim, 0);
	ck_assert_int_eq(c->stats.nr_vmscan_write, 0);
	ck_assert_int_gt(flusher_calls, 0);
	ck_assert_int_eq(c->stats.pgsteal, 100);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(dirty_marked_for_immediate_reclaim)
{
	struct cache *c = t_cache(128);
	struct mapping m;
	struct page *p;
	long free_before;

	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 10, 1);	/* all dirty */
	ck_assert_int_eq(cache_shrink(c, 10), 0);
	ck_assert_int_eq(c->stats.nr_vmscan_immediate_reclaim, 10);
	p = mapping_get_page(&m, 3);
	ck_assert(page_test(p, PG_reclaim));
	/* the flusher writes it: at writeback end it is freed at once */
	lock_page(p);
	clear_page_dirty_for_io(p);
	set_page_writeback(p);
	unlock_page(p);
	page_put(p);
	free_before = cache_free_pages(c);
	end_page_writeback(p);
	ck_assert(!t_present(&m, 3));
	ck_assert_int_eq(cache_free_pages(c), free_before + 1);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(referenced_second_chance)
{
	struct cache *c = t_cache(128);
	struct mapping m;
	struct page *p;

	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 20, 0);
	p = mapping_get_page(&m, 0);	/* the oldest page, touched twice */
	mark_page_accessed(p);
	mark_page_accessed(p);
	ck_assert(page_test(p, PG_active));
	page_put(p);
	ck_assert_int_eq(cache_shrink(c, 10), 10);
	ck_assert(t_present(&m, 0));
	ck_assert(!t_present(&m, 1));
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(locked_pages_are_skipped)
{
	struct cache *c = t_cache(128);
	struct mapping m;
	struct page *p;

	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 4, 0);
	p = mapping_get_page(&m, 0);
	lock_page(p);
	ck_assert_int_eq(cache_shrink(c, 4), 3);	/* returns without blocking */
	ck_assert(t_present(&m, 0));
	unlock_page(p);
	page_put(p);
	ck_assert_int_eq(cache_shrink(c, 4), 1);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(allocation_reclaims_clean_pages)
{
	struct cache *c = t_cache(128);
	struct mapping m;
	unsigned i;

	mapping_init(&m, c, NULL, NULL);
	for (i = 0; i < 1000; i++) {	/* eight times the cache */
		struct page *p = mapping_grab_page(&m, i, 0);

		ck_assert_ptr_nonnull(p);
		page_set(p, PG_uptodate);
		unlock_page(p);
		page_put(p);
	}
	ck_assert(t_present(&m, 999));
	ck_assert_int_le(m.nrpages, 128);
	ck_assert_int_gt(c->stats.pgsteal, 800);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(nowait_fails_when_all_dirty)
{
	struct cache *c = t_cache(64);
	struct mapping m;
	struct page *p;
	unsigned n = 0;

	mapping_init(&m, c, NULL, NULL);
	while ((p = mapping_grab_page(&m, n, ALLOC_NOWAIT)) != NULL) {
		page_set(p, PG_uptodate);
		set_page_dirty(p);
		unlock_page(p);
		page_put(p);
		n++;
	}
	ck_assert_uint_eq(n, 64);
	ck_assert_int_gt(flusher_calls, 0);
	mapping_truncate(&m, 0, UINT64_MAX);
	ck_assert_int_eq(cache_free_pages(c), 64);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(kswapd_keeps_high_watermark)
{
	struct cache_config cfg = { .size_bytes = 4096 * PAGE_SIZE, .nr_zones = 1,
				    .ops = &t_cops, .start_kswapd = true };
	struct cache *c;
	struct mapping m;
	unsigned i, tries;

	dirty_tunables_default(&cfg.tunables);
	ck_assert_int_eq(cache_create(&c, &cfg), 0);
	mapping_init(&m, c, NULL, NULL);
	for (i = 0; i < 8000; i++) {
		struct page *p = mapping_grab_page(&m, i, 0);

		page_set(p, PG_uptodate);
		unlock_page(p);
		page_put(p);
	}
	for (tries = 0; tries < 100 && cache_free_pages(c) < c->zones[0].wmark_high; tries++)
		usleep(10000);
	ck_assert_int_ge(cache_free_pages(c), c->zones[0].wmark_high);
	ck_assert_int_gt(c->stats.kswapd_wakeups, 0);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

static Suite *reclaim_suite(void)
{
	Suite *s = suite_create("reclaim");
	TCase *tc;

	tc = tcase_create("order");
	tcase_add_test(tc, clean_before_dirty);
	tcase_add_test(tc, referenced_second_chance);
	tcase_add_test(tc, locked_pages_are_skipped);
	suite_add_tcase(s, tc);
	tc = tcase_create("immediate_reclaim");
	tcase_add_test(tc, dirty_marked_for_immediate_reclaim);
	suite_add_tcase(s, tc);
	tc = tcase_create("allocation");
	tcase_add_test(tc, allocation_reclaims_clean_pages);
	tcase_add_test(tc, nowait_fails_when_all_dirty);
	suite_add_tcase(s, tc);
	tc = tcase_create("kswapd");
	tcase_add_test(tc, kswapd_keeps_high_watermark);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(reclaim_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
