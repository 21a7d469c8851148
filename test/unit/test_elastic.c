// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The cache's size: pages are resident only once used (descriptors too),
 * a target below the ceiling gives clean pages back to the kernel (the
 * balloon, played here by calling cache_balloon_step as kswapd would),
 * dirty pages are never dropped but handed to the flusher, a raised target
 * regrows, floor and ceiling clamp, the dirty limits follow the target,
 * allocation at the floor progresses, the ceiling moves at run time, and
 * every change of the target is one trace record.
 */
#include <check.h>
#include "helpers.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "wbcfs/cache.h"
#include "wbcfs/cache/mapping.h"

/* A cache of @pages with @reserve pages of address space, and its own kswapd. */
static struct cache *t_cache2(size_t pages, size_t reserve, bool kswapd)
{
	struct cache_config cfg = { .size_bytes = pages * PAGE_SIZE,
				    .reserve_bytes = reserve * PAGE_SIZE, .nr_zones = 1,
				    .start_kswapd = kswapd };

	return t_cache_cfg(&cfg);
}

/* Fill @m with @n uptodate pages from @first, their data written (faulted
 * in); dirty when @dirty. */
static void t_fill(struct mapping *m, uint64_t first, unsigned n, bool dirty)
{
	unsigned i;

	for (i = 0; i < n; i++) {
		struct page *p = mapping_grab_page(m, first + i, dirty ? ALLOC_WRITE : 0);

		ck_assert_ptr_nonnull(p);
		memset(page_address(p), 0x5a, PAGE_SIZE);
		page_set(p, PG_uptodate);
		if (dirty)
			set_page_dirty(p);
		unlock_page(p);
		page_put(p);
	}
}

/* Arena pages the kernel has resident now (mincore over the ceiling). */
static long t_arena_resident(struct cache *c, size_t pages)
{
	size_t len = pages << PAGE_SHIFT, i;
	unsigned char *vec = malloc(pages);
	long n = 0;

	ck_assert_ptr_nonnull(vec);
	ck_assert_int_eq(mincore(c->arena, len, vec), 0);
	for (i = 0; i < pages; i++)
		n += vec[i] & 1;
	free(vec);
	return n;
}

/* kswapd's part, until no zone holds more than its share or 64 rounds. */
static long t_balloon(struct cache *c)
{
	long left = 0;
	int i;

	for (i = 0; i < 64; i++) {
		cache_balloon_step(c, &left);
		if (!left)
			break;
	}
	return left;
}

static long t_held(struct cache *c)
{
	long n = 0;
	unsigned i;

	for (i = 0; i < c->nr_zones; i++)
		n += c->zones[i].nr_touched - c->zones[i].nr_returned;
	return n;
}

/* The trace's cache records, formatted, concatenated into @out. */
static void t_trace(struct cache *c, char *out, size_t len)
{
	struct throttle_trace_rec r[64];
	uint64_t cur = throttle_trace_start(&c->throttle), lost;
	size_t n, i, off = 0;

	out[0] = 0;
	n = throttle_trace_read(&c->throttle, &cur, r, 64, &lost);
	for (i = 0; i < n && off < len; i++)
		if (r[i].type == TT_CACHE)
			off += (size_t)throttle_trace_format(&r[i], out + off, len - off);
}

static double t_secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

START_TEST(shrink_returns_clean_pages)
{
	struct cache *c = t_cache(16384);	/* 64 MiB */
	struct mapping m;
	long before, after;
	char tr[4096];
	double t0;

	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 0, 12000, false);
	ck_assert_uint_ge(cache_resident_pages(c), 12000);
	before = t_arena_resident(c, 16384);
	ck_assert_int_ge(before, 12000);
	t0 = t_secs();
	cache_set_target(c, 2048, "test", 7);
	ck_assert_uint_eq(cache_target_pages(c), 2048);
	ck_assert_int_eq(t_balloon(c), 0);
	printf("# 12000 clean pages (47 MiB) to a target of 2048: %.1f ms, %ld pages returned\n",
	       (t_secs() - t0) * 1000, (long)c->stats.pgreturned);
	ck_assert_uint_le(cache_resident_pages(c), 2048);
	ck_assert_int_le(t_held(c), 2048);
	ck_assert_int_ge(c->stats.pgreturned, 12000 - 2048);
	ck_assert_int_ge(c->stats.pgsteal, 12000 - 2048);
	/* the kernel really has the memory back (but for the never-used
	 * rest of the last 2 MiB huge page the first touches faulted in) */
	after = t_arena_resident(c, 16384);
	ck_assert_int_le(after, 2048 + 511);
	ck_assert_int_eq(c->stats.cache_target_changes, 1);
	t_trace(c, tr, sizeof(tr));
	ck_assert_msg(strstr(tr, " cache target=2048 resident=") && strstr(tr, " ceiling=16384 ") &&
		      strstr(tr, " floor=64 ") && strstr(tr, " reason=test pressure=7\n"),
		      "trace: %s", tr);
	/* the same target again: no change, no record */
	cache_set_target(c, 2048, "test", 8);
	ck_assert_int_eq(c->stats.cache_target_changes, 1);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(dirty_pages_not_dropped)
{
	struct cache *c = t_cache(4096);
	struct mapping m;
	uint64_t i;

	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 0, 600, false);
	t_fill(&m, 600, 1000, true);
	cache_set_target(c, 256, "pressure", -1);
	ck_assert_int_gt(t_balloon(c), 0);	/* the dirty pages stay */
	ck_assert_int_gt(t_woken.calls, 0);
	ck_assert_int_gt(t_woken.pages, 0);
	for (i = 600; i < 1600; i++) {
		struct page *p = mapping_get_page(&m, i);

		ck_assert_ptr_nonnull(p);	/* not one dropped */
		ck_assert(page_test(p, PG_dirty));
		page_put(p);
	}
	ck_assert_int_ge(t_held(c), 1000);
	/* the flusher cleans them: they go */
	for (i = 600; i < 1600; i++) {
		struct page *p = mapping_get_page(&m, i);

		lock_page(p);
		ck_assert(clear_page_dirty_for_io(p));
		set_page_writeback(p);
		unlock_page(p);
		end_page_writeback(p);
		page_put(p);
	}
	ck_assert_int_eq(t_balloon(c), 0);
	ck_assert_uint_le(cache_resident_pages(c), 256);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(regrow_on_raised_target)
{
	struct cache *c = t_cache(4096);
	struct mapping m;
	long free0;

	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 0, 4000, false);
	cache_set_target(c, 512, "pressure", 50);
	ck_assert_int_eq(t_balloon(c), 0);
	ck_assert_uint_le(cache_resident_pages(c), 512);
	free0 = cache_free_pages(c);
	ck_assert_int_le(free0, 512);
	cache_set_target(c, 4096, "relax", 0);
	/* at once, without kswapd: the returned pages are free again */
	ck_assert_int_ge(cache_free_pages(c), free0 + 3500);
	ck_assert_int_eq(c->stats.pgregrown, 0);
	t_fill(&m, 10000, 3000, false);
	ck_assert_int_ge(c->stats.pgregrown, 2500);
	ck_assert_uint_ge(cache_resident_pages(c), 3000);
	ck_assert_int_eq(c->stats.cache_target_changes, 2);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(floor_and_ceiling_clamp)
{
	struct cache *c = t_cache2(4096, 8192, false);

	ck_assert_uint_eq(cache_ceiling_pages(c), 4096);
	ck_assert_uint_eq(cache_floor_pages(c), CACHE_FLOOR_MIN_PAGES);
	ck_assert_uint_eq(cache_target_pages(c), 4096);
	cache_set_target(c, 0, "pressure", 99);
	ck_assert_uint_eq(cache_target_pages(c), CACHE_FLOOR_MIN_PAGES);
	cache_set_target(c, 1UL << 40, "relax", 0);
	ck_assert_uint_eq(cache_target_pages(c), 4096);
	ck_assert_int_eq(cache_set_floor(c, 1024), 0);
	cache_set_target(c, 100, "pressure", 99);
	ck_assert_uint_eq(cache_target_pages(c), 1024);
	ck_assert_int_eq(cache_set_floor(c, 4097), -EINVAL);
	ck_assert_int_eq(cache_set_floor(c, CACHE_FLOOR_MIN_PAGES - 1), -EINVAL);
	ck_assert_int_eq(cache_set_ceiling(c, 1023), -EINVAL);	/* below the floor */
	ck_assert_int_eq(cache_set_ceiling(c, 8193), -EINVAL);	/* above the reservation */
	ck_assert_uint_eq(cache_ceiling_pages(c), 4096);
	/* a floor raised above the target lifts it */
	ck_assert_int_eq(cache_set_floor(c, 2048), 0);
	ck_assert_uint_eq(cache_target_pages(c), 2048);
	cache_destroy(c);
}
END_TEST

START_TEST(dirty_limits_follow_target)
{
	struct cache *c = t_cache(8192);
	struct mapping m;
	unsigned long bg, thresh, avail0, zlimit0;

	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 0, 6000, false);
	avail0 = dirty_dirtyable_pages(c);
	zlimit0 = zone_dirty_limit(&c->zones[0]);
	ck_assert_uint_ge(avail0, 7000);
	c->throttle.dirty_limit = avail0 * 20 / 100;	/* the smoothed limit before */
	cache_set_target(c, 1024, "pressure", 1);
	/* the throttle's hard limit falls at once, not 1/32 per 200 ms */
	ck_assert_uint_le(c->throttle.dirty_limit, 1025 * 20 / 100);
	ck_assert_int_eq(t_balloon(c), 0);
	/* returned pages are neither free nor file pages */
	ck_assert_uint_le(dirty_dirtyable_pages(c), 1024 + 1);
	dirty_thresholds(c, &bg, &thresh);
	ck_assert_uint_le(thresh, 1025 * 20 / 100);
	ck_assert_uint_le(bg, 1025 * 10 / 100);
	ck_assert_uint_lt(zone_dirty_limit(&c->zones[0]), zlimit0 / 4);
	ck_assert_int_le(atomic_load(&c->zones[0].dirty_limit), 1025 * 20 / 100);
	/* watermarks follow the managed pages: a shrunk zone can reach them */
	ck_assert_int_lt(c->zones[0].wmark_high, 1024 / 4);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

struct t_writer {
	struct cache *c;
	struct mapping *m;
	unsigned n;
	_Atomic bool done;
};

static void *t_writer_main(void *arg)
{
	struct t_writer *w = arg;

	t_fill(w->m, 100000, w->n, false);
	w->done = true;
	return NULL;
}

/*
 * A writer keeps allocating (each page a new one, the old ones reclaimed)
 * while kswapd shrinks the cache to its floor and the target bounces:
 * it finishes.
 */
START_TEST(alloc_at_floor_progresses)
{
	struct cache *c = t_cache2(8192, 0, true);
	struct t_writer w = { .c = c, .n = 30000 };
	struct mapping m;
	pthread_t th;
	int i;

	mapping_init(&m, c, NULL, NULL);
	w.m = &m;
	t_fill(&m, 0, 8000, false);
	cache_set_target(c, 0, "pressure", 100);
	ck_assert_uint_eq(cache_target_pages(c), CACHE_FLOOR_MIN_PAGES);
	ck_assert_int_eq(pthread_create(&th, NULL, t_writer_main, &w), 0);
	for (i = 0; i < 20000 && !w.done; i++) {
		if (i % 50 == 25)
			cache_set_target(c, 256, "relax", 0);
		else if (i % 50 == 0)
			cache_set_target(c, 0, "pressure", 100);
		usleep(1000);
	}
	ck_assert_msg(w.done, "the writer at the floor did not finish");
	pthread_join(th, NULL);
	cache_set_target(c, 0, "pressure", 100);
	for (i = 0; i < 5000 && cache_resident_pages(c) > CACHE_FLOOR_MIN_PAGES; i++)
		usleep(1000);	/* kswapd's work */
	ck_assert_uint_le(cache_resident_pages(c), CACHE_FLOOR_MIN_PAGES);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

/* Descriptors of pages never used are never written: not resident. */
START_TEST(lazy_descriptors)
{
	size_t reserve = 262144;	/* 1 GiB: 16 MiB of descriptors */
	struct cache *c = t_cache2(1024, reserve, false);
	size_t len = reserve * sizeof(struct page), npg = len / PAGE_SIZE, i;
	unsigned char *vec = malloc(npg);
	struct mapping m;
	long n = 0;

	ck_assert_ptr_nonnull(vec);
	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 0, 100, false);
	ck_assert_int_eq(c->zones[0].nr_touched, 100);
	ck_assert_int_eq(mincore(c->pages, len, vec), 0);
	for (i = 0; i < npg; i++)
		n += vec[i] & 1;
	/* 100 descriptors: 2 pages of them (THP off for this mapping or
	 * not, far below the 4096 pages of the whole array) */
	ck_assert_int_le(n, 512);
	ck_assert_int_le(t_arena_resident(c, 1024), 512);	/* one huge page at most */
	ck_assert_uint_eq(cache_resident_pages(c), 100);
	free(vec);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(ceiling_raised_at_run_time)
{
	struct cache *c = t_cache2(1024, 8192, false);
	struct mapping m;
	char tr[4096];

	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 0, 1000, false);
	ck_assert_int_eq(cache_set_ceiling(c, 4096), 0);
	ck_assert_uint_eq(cache_ceiling_pages(c), 4096);
	ck_assert_uint_eq(cache_target_pages(c), 4096);	/* nobody had lowered it */
	t_fill(&m, 1000, 3000, false);
	ck_assert_int_eq(c->stats.pgsteal, 0);	/* room without reclaim */
	ck_assert_uint_ge(cache_resident_pages(c), 4000);
	/* lowered: the target follows down, the pages go back */
	ck_assert_int_eq(cache_set_ceiling(c, 512), 0);
	ck_assert_uint_eq(cache_target_pages(c), 512);
	ck_assert_int_eq(t_balloon(c), 0);
	ck_assert_uint_le(cache_resident_pages(c), 512);
	/* a target lowered by pressure stays when the ceiling rises */
	ck_assert_int_eq(cache_set_ceiling(c, 2048), 0);
	cache_set_target(c, 600, "pressure", 3);
	ck_assert_int_eq(cache_set_ceiling(c, 8192), 0);
	ck_assert_uint_eq(cache_target_pages(c), 600);
	t_trace(c, tr, sizeof(tr));
	ck_assert_msg(strstr(tr, "target=4096") && strstr(tr, "reason=ceiling pressure=-1"),
		      "trace: %s", tr);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

/* Two zones: each holds its share of the target, in proportion to size. */
START_TEST(zone_shares)
{
	size_t bytes[2] = { 1024 * PAGE_SIZE, 3072 * PAGE_SIZE };
	struct cache_config cfg = { .size_bytes = 4096 * PAGE_SIZE, .nr_zones = 2,
				    .zone_bytes = bytes };
	struct cache *c = t_cache_cfg(&cfg);
	struct mapping m;

	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 0, 4000, false);
	cache_set_target(c, 1024, "pressure", 1);
	ck_assert_int_eq(c->zones[0].managed_pages, 256);
	ck_assert_int_eq(c->zones[1].managed_pages, 768);
	ck_assert_int_eq(t_balloon(c), 0);
	ck_assert_int_le(c->zones[0].nr_touched - c->zones[0].nr_returned, 256);
	ck_assert_int_le(c->zones[1].nr_touched - c->zones[1].nr_returned, 768);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

/* The measure of the goal: 90% of 256 MiB of clean pages back, timed. */
START_TEST(shrink_timed)
{
	size_t pages = 65536;
	struct cache *c = t_cache(pages);
	struct mapping m;
	double t0, t1;

	mapping_init(&m, c, NULL, NULL);
	t_fill(&m, 0, (unsigned)pages - 1024, false);
	t0 = t_secs();
	cache_set_target(c, CACHE_FLOOR_MIN_PAGES, "pressure", 100);
	t1 = t_secs();
	ck_assert_int_eq(t_balloon(c), 0);
	printf("# 256 MiB of clean pages given back: cache_set_target %.3f ms, balloon %.1f ms, "
	       "arena resident %ld pages after\n", (t1 - t0) * 1000, (t_secs() - t1) * 1000,
	       t_arena_resident(c, pages));
	ck_assert_uint_le(cache_resident_pages(c), CACHE_FLOOR_MIN_PAGES);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

static Suite *elastic_suite(void)
{
	Suite *s = suite_create("elastic");
	TCase *tc;

	tc = t_tcase(s, "size", shrink_returns_clean_pages, dirty_pages_not_dropped,
		     regrow_on_raised_target, floor_and_ceiling_clamp, dirty_limits_follow_target,
		     alloc_at_floor_progresses, lazy_descriptors, ceiling_raised_at_run_time,
		     zone_shares, shrink_timed);
	tcase_set_timeout(tc, 60);
	return s;
}

int main(void)
{
	return t_run(elastic_suite());
}
