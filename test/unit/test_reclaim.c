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
#include "helpers.h"
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "wbcfs/cache.h"
#include "wbcfs/cache/mapping.h"

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
	ck_assert_int_gt(t_woken.calls, 0);
	ck_assert_int_gt(t_woken.pages, 0);
	ck_assert_int_eq(t_woken.other, 0);	/* all WB_REASON_VMSCAN */
	ck_assert_int_eq(c->stats.pgsteal, 100);
	ck_assert_int_ge(c->stats.pgscan, 100);
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
	ck_assert_int_gt(t_woken.calls, 0);
	mapping_truncate(&m, 0, UINT64_MAX);
	ck_assert_int_eq(cache_free_pages(c), 64);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

/* Write back @p as the flusher does: clean it, writeback, end. */
static void t_write_page(struct page *p, bool hold_ref_at_end)
{
	bool wb = false;

	lock_page(p);
	if (p->mapping && clear_page_dirty_for_io(p)) {
		set_page_writeback(p);
		wb = true;
	}
	unlock_page(p);
	if (!wb) {
		page_put(p);
		return;
	}
	if (!hold_ref_at_end)
		page_put(p);	/* as flusher/ does: PG_writeback keeps the page */
	end_page_writeback(p);
	if (hold_ref_at_end)
		page_put(p);
}

START_TEST(single_reference_second_chance)
{
	struct cache *c = t_cache(128);
	struct mapping m;
	struct page *p;

	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 20, 0);
	p = mapping_get_page(&m, 0);	/* the oldest page, touched once */
	mark_page_accessed(p);
	page_put(p);
	ck_assert_int_eq(cache_shrink(c, 1), 1);
	ck_assert(t_present(&m, 0));	/* rotated, not freed */
	ck_assert(!t_present(&m, 1));
	p = mapping_get_page(&m, 0);
	ck_assert(!page_test(p, PG_referenced));
	ck_assert(!page_test(p, PG_active));	/* one touch does not activate */
	page_put(p);
	ck_assert_int_eq(cache_shrink(c, 18), 18);
	ck_assert(t_present(&m, 0));	/* now the oldest again */
	ck_assert_int_eq(cache_shrink(c, 1), 1);
	ck_assert(!t_present(&m, 0));
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(writeback_end_with_holder_rotates_to_tail)
{
	struct cache *c = t_cache(128);
	struct mapping m;
	struct page *p;

	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 10, 1);			/* all dirty */
	ck_assert_int_eq(cache_shrink(c, 10), 0);	/* all marked PG_reclaim */
	p = mapping_get_page(&m, 7);		/* cleaned, but stays in the middle */
	lock_page(p);
	clear_page_dirty_for_io(p);
	unlock_page(p);
	page_put(p);
	p = mapping_get_page(&m, 5);
	t_write_page(p, true);			/* writer's reference blocks the free */
	ck_assert(t_present(&m, 5));
	ck_assert(!page_test(p, PG_reclaim));
	ck_assert_int_eq(cache_shrink(c, 1), 1);	/* the inactive tail: page 5 */
	ck_assert(!t_present(&m, 5));
	ck_assert(t_present(&m, 7));
	mapping_truncate(&m, 0, UINT64_MAX);
	ck_assert_int_eq(cache_free_pages(c), 128);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

struct writer {
	struct mapping *m;
	unsigned n;
};

/* A fake flusher: after 100 ms, write back the first @n pages. */
static void *t_writer(void *arg)
{
	struct writer *w = arg;
	unsigned i;

	usleep(100000);
	for (i = 0; i < w->n; i++)
		t_write_page(mapping_get_page(w->m, i), false);
	return NULL;
}

START_TEST(blocking_alloc_waits_for_writeback)
{
	struct cache *c = t_cache(64);
	struct writer w;
	struct mapping m;
	struct page *p;
	pthread_t t;
	unsigned n = 0;

	mapping_init(&m, c, NULL, NULL);
	while ((p = mapping_grab_page(&m, n, ALLOC_NOWAIT)) != NULL) {
		set_page_dirty(p);
		unlock_page(p);
		page_put(p);
		n++;
	}
	ck_assert_int_eq(cache_free_pages(c), 0);
	w.m = &m;
	w.n = 8;
	pthread_create(&t, NULL, t_writer, &w);
	p = cache_alloc_page(c, 0);		/* sleeps until the writer cleans some */
	ck_assert_ptr_nonnull(p);
	ck_assert_int_gt(c->stats.allocstall, 0);
	ck_assert_int_gt(t_woken.calls, 0);
	ck_assert_int_eq(t_woken.other, 0);
	pthread_join(t, NULL);
	page_put(p);
	mapping_truncate(&m, 0, UINT64_MAX);
	ck_assert_int_eq(cache_free_pages(c), 64);
	ck_assert_int_eq(c->stats.nr_dirty, 0);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

struct stress {
	struct mapping *m;
	_Atomic bool stop_dirtying;	/* first: allocators may wait for the flusher */
	_Atomic bool stop;
	unsigned seed;
};

static void *t_stress_dirtier(void *arg)
{
	struct stress *st = arg;
	unsigned seed = st->seed;

	while (!atomic_load(&st->stop_dirtying)) {
		struct page *p = mapping_grab_page(st->m, rand_r(&seed) % 512, 0);

		if (!p)
			continue;
		page_set(p, PG_uptodate);
		if (rand_r(&seed) % 2)
			set_page_dirty(p);
		else
			mark_page_accessed(p);
		unlock_page(p);
		page_put(p);
	}
	return NULL;
}

/* Writes back dirty pages, dropping its reference before the end, as flusher/ does. */
static void *t_stress_flusher(void *arg)
{
	struct stress *st = arg;

	while (!atomic_load(&st->stop)) {
		struct page *pages[16];
		uint64_t pos = 0;
		unsigned n = mapping_lookup_tag(st->m, &pos, UINT64_MAX, TAG_DIRTY, pages, 16), i;

		for (i = 0; i < n; i++)
			t_write_page(pages[i], false);
		if (!n)
			sched_yield();
	}
	return NULL;
}

static void *t_stress_truncater(void *arg)
{
	struct stress *st = arg;
	unsigned seed = st->seed + 1;

	while (!atomic_load(&st->stop)) {
		uint64_t a = rand_r(&seed) % 512;

		mapping_truncate(st->m, a, a + rand_r(&seed) % 32);
		usleep(500);
	}
	return NULL;
}

/* Dirtying, writeback with PG_reclaim frees, truncation, direct reclaim and
 * kswapd all at once: every page must come home, every counter to 0. */
START_TEST(stress_reclaim_truncate_writeback)
{
	struct cache_config cfg = { .size_bytes = 128 * PAGE_SIZE, .nr_zones = 2,
				    .start_kswapd = true };
	void *(*fn[4])(void *) = { t_stress_dirtier, t_stress_dirtier, t_stress_flusher,
				   t_stress_truncater };
	struct stress st = { .seed = 7 };
	struct cache *c;
	struct mapping m;
	pthread_t t[4];
	unsigned i;

	c = t_cache_cfg(&cfg);
	mapping_init(&m, c, NULL, NULL);
	st.m = &m;
	for (i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, fn[i], &st);
	usleep(400000);
	atomic_store(&st.stop_dirtying, true);
	for (i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	atomic_store(&st.stop, true);
	for (i = 2; i < 4; i++)
		pthread_join(t[i], NULL);
	mapping_truncate(&m, 0, UINT64_MAX);
	ck_assert_int_eq(m.nrpages, 0);
	ck_assert_int_eq(cache_free_pages(c), 128);
	ck_assert_int_eq(c->stats.nr_file_pages, 0);
	ck_assert_int_eq(c->stats.nr_dirty, 0);
	ck_assert_int_eq(c->stats.nr_writeback, 0);
	ck_assert_int_eq(c->zones[0].nr_inactive + c->zones[0].nr_active, 0);
	ck_assert_int_eq(c->zones[1].nr_inactive + c->zones[1].nr_active, 0);
	ck_assert_int_gt(c->stats.pgsteal, 0);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(kswapd_keeps_high_watermark)
{
	struct cache_config cfg = { .size_bytes = 4096 * PAGE_SIZE, .nr_zones = 1,
				    .start_kswapd = true };
	struct cache *c;
	struct mapping m;
	unsigned i, tries;

	c = t_cache_cfg(&cfg);
	mapping_init(&m, c, NULL, NULL);
	for (i = 0; i < 8000; i++) {
		struct page *p = mapping_grab_page(&m, i, 0);

		page_set(p, PG_uptodate);
		unlock_page(p);
		page_put(p);
	}
	for (tries = 0; tries < 1000 && cache_free_pages(c) < c->zones[0].wmark_high; tries++)
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

	t_tcase(s, "order", clean_before_dirty, referenced_second_chance,
		single_reference_second_chance, locked_pages_are_skipped);
	t_tcase(s, "immediate_reclaim", dirty_marked_for_immediate_reclaim,
		writeback_end_with_holder_rotates_to_tail);
	t_tcase(s, "allocation", allocation_reclaims_clean_pages, nowait_fails_when_all_dirty,
		blocking_alloc_waits_for_writeback);
	t_tcase(s, "kswapd", kswapd_keeps_high_watermark);
	t_tcase(s, "stress", stress_reclaim_truncate_writeback);
	return s;
}

int main(void)
{
	return t_run(reclaim_suite());
}
