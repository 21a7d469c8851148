// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The page index: radix-tree insert/lookup at scattered and huge indices,
 * height growth and shrink, tag set/clear and ordered tagged lookups that
 * skip untagged pages, TOWRITE tagging, the contiguous-cache count
 * readahead uses, truncation (dirty pages cancelled, counters back to
 * zero), the reclaim-side removal rules, waiting on writeback in a range,
 * and concurrent grabs (same page, waiting for a locked one).
 */
#include <check.h>
#include <errno.h>
#include "helpers.h"
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "wbcfs/cache.h"
#include "wbcfs/cache/mapping.h"

static long undirtied;
static void t_undirtied(struct mapping *m, struct page *p)
{
	undirtied++;
}
static const struct mapping_ops t_ops = { .undirtied = t_undirtied };

static struct page *t_add(struct mapping *m, uint64_t index)
{
	struct page *p = mapping_grab_page(m, index, 0);

	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(p->index, index);
	page_set(p, PG_uptodate);
	unlock_page(p);
	page_put(p);
	return p;
}

START_TEST(insert_lookup_scattered)
{
	static const uint64_t idx[] = { 0, 1, 63, 64, 4095, 4096, 1ULL << 40, UINT64_MAX - 1 };
	struct cache *c = t_cache(256);
	struct mapping m;
	size_t i;

	mapping_init(&m, c, &t_ops, NULL);
	for (i = 0; i < sizeof(idx) / sizeof(idx[0]); i++)
		t_add(&m, idx[i]);
	ck_assert_int_eq(m.nrpages, 8);
	for (i = 0; i < sizeof(idx) / sizeof(idx[0]); i++) {
		struct page *p = mapping_get_page(&m, idx[i]);

		ck_assert_ptr_nonnull(p);
		ck_assert_uint_eq(p->index, idx[i]);
		page_put(p);
	}
	ck_assert_ptr_null(mapping_get_page(&m, 2));
	ck_assert_ptr_null(mapping_get_page(&m, 1ULL << 41));
	mapping_truncate(&m, 0, UINT64_MAX);
	ck_assert_int_eq(m.nrpages, 0);
	ck_assert_int_eq(c->stats.nr_file_pages, 0);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(range_lookup_in_order)
{
	struct cache *c = t_cache(512);
	struct page *pages[16];
	struct mapping m;
	uint64_t start = 0, seen = 0, last = 0;
	unsigned n, i;

	mapping_init(&m, c, &t_ops, NULL);
	for (i = 0; i < 300; i += 3)
		t_add(&m, i * 7);
	while ((n = mapping_lookup_range(&m, &start, UINT64_MAX, pages, 16))) {
		for (i = 0; i < n; i++) {
			ck_assert(seen == 0 || pages[i]->index > last);
			last = pages[i]->index;
			seen++;
			page_put(pages[i]);
		}
	}
	ck_assert_uint_eq(seen, 100);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(tags_skip_clean_pages)
{
	struct cache *c = t_cache(2048);
	struct page *pages[8];
	struct mapping m;
	uint64_t start = 0;
	unsigned n, i, got = 0;

	mapping_init(&m, c, &t_ops, NULL);
	for (i = 0; i < 1000; i++)
		t_add(&m, i);
	for (i = 0; i < 1000; i += 100) {
		struct page *p = mapping_get_page(&m, i);

		ck_assert(set_page_dirty(p));
		ck_assert(!set_page_dirty(p));
		page_put(p);
	}
	ck_assert_int_eq(c->stats.nr_dirty, 10);
	ck_assert(mapping_tagged(&m, TAG_DIRTY));
	ck_assert(!mapping_tagged(&m, TAG_WRITEBACK));
	while ((n = mapping_lookup_tag(&m, &start, UINT64_MAX, TAG_DIRTY, pages, 8))) {
		for (i = 0; i < n; i++) {
			ck_assert_uint_eq(pages[i]->index, (uint64_t)got * 100);
			got++;
			page_put(pages[i]);
		}
	}
	ck_assert_uint_eq(got, 10);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(writeback_cycle_moves_tags)
{
	struct cache *c = t_cache(256);
	struct mapping m;
	struct page *p, *q;
	uint64_t start = 0;

	mapping_init(&m, c, &t_ops, NULL);
	t_add(&m, 5);
	p = mapping_get_page(&m, 5);
	set_page_dirty(p);
	lock_page(p);
	ck_assert(clear_page_dirty_for_io(p));
	set_page_writeback(p);
	unlock_page(p);
	ck_assert(!mapping_tagged(&m, TAG_DIRTY));
	ck_assert(mapping_tagged(&m, TAG_WRITEBACK));
	ck_assert_int_eq(c->stats.nr_dirty, 0);
	ck_assert_int_eq(c->stats.nr_writeback, 1);
	ck_assert_uint_eq(mapping_lookup_tag(&m, &start, 10, TAG_WRITEBACK, &q, 1), 1);
	page_put(q);
	end_page_writeback(p);
	ck_assert(!mapping_tagged(&m, TAG_WRITEBACK));
	ck_assert_int_eq(c->stats.nr_writeback, 0);
	ck_assert_int_eq(c->stats.nr_written, 1);
	page_put(p);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(towrite_tags_only_dirty)
{
	struct cache *c = t_cache(256);
	struct page *pages[8];
	struct mapping m;
	uint64_t start = 0;
	unsigned i, n;

	mapping_init(&m, c, &t_ops, NULL);
	for (i = 0; i < 20; i++)
		t_add(&m, i);
	for (i = 0; i < 20; i += 4) {
		struct page *p = mapping_get_page(&m, i);

		set_page_dirty(p);
		page_put(p);
	}
	mapping_tag_towrite(&m, 0, 11);
	n = mapping_lookup_tag(&m, &start, UINT64_MAX, TAG_TOWRITE, pages, 8);
	ck_assert_uint_eq(n, 3);	/* 0, 4, 8: 12 and 16 were outside the range */
	for (i = 0; i < n; i++) {
		ck_assert_uint_eq(pages[i]->index, i * 4);
		page_put(pages[i]);
	}
	/* a page dirtied after tagging is not part of the sync */
	pages[0] = mapping_get_page(&m, 1);
	set_page_dirty(pages[0]);
	page_put(pages[0]);
	start = 0;
	ck_assert_uint_eq(mapping_lookup_tag(&m, &start, UINT64_MAX, TAG_TOWRITE, pages, 8), 3);
	for (i = 0; i < 3; i++)
		page_put(pages[i]);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(count_cached_before)
{
	struct cache *c = t_cache(256);
	struct mapping m;
	unsigned i;

	mapping_init(&m, c, &t_ops, NULL);
	for (i = 10; i < 20; i++)
		t_add(&m, i);
	ck_assert_uint_eq(mapping_count_cached_before(&m, 20, 100), 10);
	ck_assert_uint_eq(mapping_count_cached_before(&m, 20, 4), 4);
	ck_assert_uint_eq(mapping_count_cached_before(&m, 10, 100), 0);
	ck_assert_uint_eq(mapping_count_cached_before(&m, 0, 100), 0);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(truncate_cancels_dirty)
{
	struct cache *c = t_cache(256);
	struct mapping m;
	unsigned i;

	undirtied = 0;
	mapping_init(&m, c, &t_ops, NULL);
	for (i = 0; i < 50; i++) {
		struct page *p;

		t_add(&m, i);
		p = mapping_get_page(&m, i);
		set_page_dirty(p);
		page_put(p);
	}
	mapping_truncate(&m, 20, UINT64_MAX);
	ck_assert_int_eq(m.nrpages, 20);
	ck_assert_int_eq(c->stats.nr_dirty, 20);
	ck_assert_int_eq(undirtied, 30);
	ck_assert_ptr_null(mapping_get_page(&m, 20));
	mapping_truncate(&m, 0, UINT64_MAX);
	ck_assert_int_eq(c->stats.nr_dirty, 0);
	ck_assert_int_eq(m.nrdirty, 0);
	ck_assert_int_eq(cache_free_pages(c), 256);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

struct grab_arg {
	struct mapping *m;
	struct page *got[200];
};

static void *t_grabber(void *arg)
{
	struct grab_arg *a = arg;
	unsigned i;

	for (i = 0; i < 200; i++) {
		a->got[i] = mapping_grab_page(a->m, i, 0);
		page_set(a->got[i], PG_uptodate);
		unlock_page(a->got[i]);
	}
	return NULL;
}

START_TEST(concurrent_grab_same_page)
{
	struct cache *c = t_cache(1024);
	struct grab_arg a = {0}, b = {0};
	pthread_t t1, t2;
	struct mapping m;
	unsigned i;

	mapping_init(&m, c, &t_ops, NULL);
	a.m = b.m = &m;
	pthread_create(&t1, NULL, t_grabber, &a);
	pthread_create(&t2, NULL, t_grabber, &b);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	for (i = 0; i < 200; i++) {
		ck_assert_ptr_eq(a.got[i], b.got[i]);
		page_put(a.got[i]);
		page_put(b.got[i]);
	}
	ck_assert_int_eq(m.nrpages, 200);
	mapping_truncate(&m, 0, UINT64_MAX);
	ck_assert_int_eq(cache_free_pages(c), 1024);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(tree_shrinks_when_emptied)
{
	struct cache *c = t_cache(64);
	struct mapping m;
	struct page *p;

	mapping_init(&m, c, &t_ops, NULL);
	t_add(&m, 3);
	ck_assert_uint_eq(m.height, 1);
	t_add(&m, UINT64_MAX - 1);
	ck_assert_uint_eq(m.height, 11);	/* 64 bits in 6-bit levels */
	mapping_truncate(&m, UINT64_MAX - 1, UINT64_MAX);
	ck_assert_uint_eq(m.height, 1);		/* back to one leaf */
	p = mapping_get_page(&m, 3);
	ck_assert_ptr_nonnull(p);
	page_put(p);
	mapping_truncate(&m, 0, UINT64_MAX);
	ck_assert_int_eq(cache_free_pages(c), 64);
	ck_assert_ptr_null(m.root);
	ck_assert_uint_eq(m.height, 0);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(explicit_tags_and_range_end)
{
	static const uint64_t idx[] = { 2, 70, 4100, 1ULL << 40, UINT64_MAX - 1 };
	struct cache *c = t_cache(64);
	struct page *pages[8];
	struct mapping m;
	uint64_t start = 0;
	unsigned i, n;

	mapping_init(&m, c, &t_ops, NULL);
	for (i = 0; i < 5; i++) {
		t_add(&m, idx[i]);
		t_add(&m, idx[i] + 1);	/* an untagged neighbour */
		mapping_tag_set(&m, idx[i], TAG_TOWRITE);
	}
	mapping_tag_set(&m, 5, TAG_TOWRITE);	/* absent page: no tag */
	n = mapping_lookup_tag(&m, &start, UINT64_MAX, TAG_TOWRITE, pages, 8);
	ck_assert_uint_eq(n, 5);
	for (i = 0; i < n; i++) {
		ck_assert_uint_eq(pages[i]->index, idx[i]);
		page_put(pages[i]);
	}
	start = 3;
	n = mapping_lookup_tag(&m, &start, 1ULL << 40, TAG_TOWRITE, pages, 8);
	ck_assert_uint_eq(n, 3);	/* 70, 4100, 2^40: end is inclusive */
	ck_assert_uint_eq(pages[2]->index, 1ULL << 40);
	ck_assert_uint_eq(start, (1ULL << 40) + 1);
	for (i = 0; i < n; i++)
		page_put(pages[i]);
	for (i = 0; i < 5; i++)
		mapping_tag_clear(&m, idx[i], TAG_TOWRITE);
	ck_assert(!mapping_tagged(&m, TAG_TOWRITE));
	start = 0;
	ck_assert_uint_eq(mapping_lookup_tag(&m, &start, UINT64_MAX, TAG_TOWRITE, pages, 8), 0);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(try_remove_refuses_busy_pages)
{
	struct cache *c = t_cache(64);
	struct mapping m;
	struct page *p, *extra;

	mapping_init(&m, c, &t_ops, NULL);
	t_add(&m, 1);
	p = mapping_get_page(&m, 1);
	extra = mapping_get_page(&m, 1);
	ck_assert(!mapping_try_remove_page(&m, p));	/* a third reference */
	page_put(extra);
	lock_page(p);
	ck_assert(!mapping_try_remove_page(&m, p));	/* locked */
	unlock_page(p);
	set_page_dirty(p);
	ck_assert(!mapping_try_remove_page(&m, p));	/* dirty */
	clear_page_dirty_for_io(p);
	set_page_writeback(p);
	ck_assert(!mapping_try_remove_page(&m, p));	/* under writeback */
	end_page_writeback(p);
	ck_assert_int_eq(c->zones[0].nr_inactive, 1);
	ck_assert(mapping_try_remove_page(&m, p));
	ck_assert_int_eq(c->zones[0].nr_inactive, 0);	/* off the LRU too */
	ck_assert(!page_test(p, PG_lru));
	ck_assert_int_eq(m.nrpages, 0);
	ck_assert_int_eq(p->refcount, 1);
	page_put(p);
	ck_assert_int_eq(cache_free_pages(c), 64);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

static void *t_end_writeback_later(void *arg)
{
	usleep(100000);
	end_page_writeback(arg);
	return NULL;
}

START_TEST(wait_writeback_in_range)
{
	struct cache *c = t_cache(64);
	struct mapping m;
	struct page *p;
	pthread_t t;

	mapping_init(&m, c, &t_ops, NULL);
	t_add(&m, 9);
	p = mapping_get_page(&m, 9);
	set_page_writeback(p);
	mapping_wait_writeback(&m, 10, 20);	/* not in range: at once */
	pthread_create(&t, NULL, t_end_writeback_later, p);
	mapping_wait_writeback(&m, 0, 20);
	ck_assert(!page_test(p, PG_writeback));
	pthread_join(t, NULL);
	page_put(p);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

static void *t_unlock_later(void *arg)
{
	usleep(100000);
	unlock_page(arg);
	return NULL;
}

START_TEST(grab_waits_for_locked_page)
{
	struct cache *c = t_cache(64);
	struct mapping m;
	struct page *p, *q;
	pthread_t t;

	mapping_init(&m, c, &t_ops, NULL);
	p = mapping_grab_page(&m, 4, 0);	/* held locked */
	ck_assert(page_test(p, PG_locked));
	ck_assert_int_eq(p->refcount, 2);	/* cache + caller */
	ck_assert_ptr_null(mapping_grab_page(&m, 4, ALLOC_NOWAIT));
	pthread_create(&t, NULL, t_unlock_later, p);
	q = mapping_grab_page(&m, 4, 0);
	ck_assert_ptr_eq(q, p);
	ck_assert_int_eq(p->refcount, 3);
	pthread_join(t, NULL);
	unlock_page(q);
	page_put(q);
	page_put(p);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

/* Every cursor sampled before an error sees it once, at its next check. */
START_TEST(errseq_each_cursor_once)
{
	struct cache *c = t_cache(64);
	struct mapping m;
	errseq_t fd1, fd2;

	mapping_init(&m, c, &t_ops, NULL);
	fd1 = mapping_sample_error(&m);
	fd2 = mapping_sample_error(&m);
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd1), 0);
	mapping_set_error(&m, -EIO);
	ck_assert_int_eq(mapping_check_error_since(&m, fd2), -EIO);	/* peek */
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd1), -EIO);
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd1), 0);	/* once */
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd2), -EIO);	/* and once more */
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd2), 0);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

/* An error after the last one was seen is a new error for everyone. */
START_TEST(errseq_new_error_after_seen)
{
	struct cache *c = t_cache(64);
	struct mapping m;
	errseq_t fd1, fd2;

	mapping_init(&m, c, &t_ops, NULL);
	fd1 = mapping_sample_error(&m);
	mapping_set_error(&m, -EIO);
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd1), -EIO);
	fd2 = mapping_sample_error(&m);		/* opened after it was seen */
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd2), 0);
	mapping_set_error(&m, -EIO);		/* the retry failed too */
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd1), -EIO);
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd2), -EIO);
	mapping_set_error(&m, -ENOSPC);
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd1), -ENOSPC);	/* the latest errno */
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

/*
 * An error nobody has seen yet reaches an opener that came after it;
 * errors recorded while unseen are reported once, not once each; 0 and
 * out-of-range values are not recorded as themselves.
 */
START_TEST(errseq_unseen_reaches_new_opener)
{
	struct cache *c = t_cache(64);
	struct mapping m;
	errseq_t fd;

	mapping_init(&m, c, &t_ops, NULL);
	mapping_set_error(&m, 0);
	fd = mapping_sample_error(&m);
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd), 0);
	mapping_set_error(&m, -EIO);
	mapping_set_error(&m, -EIO);
	fd = mapping_sample_error(&m);
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd), -EIO);
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd), 0);
	mapping_set_error(&m, -100000);
	ck_assert_int_eq(mapping_check_and_advance(&m, &fd), -EIO);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

static Suite *mapping_suite(void)
{
	Suite *s = suite_create("mapping");

	t_tcase(s, "index", insert_lookup_scattered, range_lookup_in_order, count_cached_before,
		tree_shrinks_when_emptied);
	t_tcase(s, "tags", tags_skip_clean_pages, writeback_cycle_moves_tags,
		towrite_tags_only_dirty, explicit_tags_and_range_end);
	t_tcase(s, "truncate", truncate_cancels_dirty, try_remove_refuses_busy_pages,
		wait_writeback_in_range);
	t_tcase(s, "concurrency", concurrent_grab_same_page, grab_waits_for_locked_page);
	t_tcase(s, "errors", errseq_each_cursor_once, errseq_new_error_after_seen,
		errseq_unseen_reaches_new_opener);
	return s;
}

int main(void)
{
	return t_run(mapping_suite());
}
