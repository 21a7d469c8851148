// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The on-disk size of a file (ext4's i_disksize): how far disksize_reach
 * lets it grow towards i_size over the page cache's state. It stops at
 * the first page whose data is still waiting to be written (dirty,
 * reserved, or locked while uptodate: a write copying into it, a
 * writeback batch not yet mapped), never goes back, and passes holes,
 * clean pages, pages being read and pages mapped and under writeback.
 */
#include <check.h>
#include "helpers.h"
#include <stdlib.h>

#include "../../ext4/ext4_i.h"

#define P(n) ((uint64_t)(n) * PAGE_SIZE)

static struct cache *c;
static struct mapping m;

static void t_undirtied(struct mapping *mp, struct page *p)
{
	(void)mp;
	(void)p;
}
static const struct mapping_ops t_ops = { .undirtied = t_undirtied };

static void setup(void)
{
	c = t_cache(64);
	mapping_init(&m, c, &t_ops, NULL);
}

static void teardown(void)
{
	struct page *pages[64];
	uint64_t start = 0;
	unsigned n, i;

	/* the flags were set by hand: clear them before the pages go */
	n = mapping_lookup_range(&m, &start, UINT64_MAX, pages, 64);
	for (i = 0; i < n; i++) {
		page_clear(pages[i], PG_dirty);
		page_clear(pages[i], PG_delalloc);
		page_clear(pages[i], PG_writeback);
		if (page_test(pages[i], PG_locked))
			unlock_page(pages[i]);
		page_put(pages[i]);
	}
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}

/* A page at @index with @set flags (uptodate unless @reading); @locked stays locked. */
static void t_page(uint64_t index, enum page_flag set, bool locked, bool reading)
{
	struct page *p = mapping_grab_page(&m, index, 0);

	ck_assert_ptr_nonnull(p);
	if (!reading)
		page_set(p, PG_uptodate);
	if (set != PG_locked)
		page_set(p, set);
	if (!locked)
		unlock_page(p);
	page_put(p);
}

START_TEST(holes_only_reach_isize)
{
	ck_assert_uint_eq(disksize_reach(&m, 0, P(10) + 5, NULL, 0), P(10) + 5);
	ck_assert_uint_eq(disksize_reach(&m, P(3) + 1, P(10), NULL, 0), P(10));
}
END_TEST

START_TEST(never_lowers_never_past_isize)
{
	t_page(0, PG_dirty, false, false);
	ck_assert_uint_eq(disksize_reach(&m, 100, P(1), NULL, 0), 100);
	/* already at or past i_size: stays */
	ck_assert_uint_eq(disksize_reach(&m, P(2), P(2), NULL, 0), P(2));
	ck_assert_uint_eq(disksize_reach(&m, P(2), P(1), NULL, 0), P(2));
}
END_TEST

START_TEST(stops_at_pending_data)
{
	/* `seq 1 20000 > a`: 27 dirty pages, nothing written, disksize 0 */
	uint64_t i;

	for (i = 0; i < 27; i++)
		t_page(i, PG_dirty, false, false);
	ck_assert_uint_eq(disksize_reach(&m, 0, 108894, NULL, 0), 0);
}
END_TEST

START_TEST(appended_tail_page_keeps_old_size)
{
	/* 50000 bytes fsync'ed, then appended: page 12 (old EOF) is dirty */
	t_page(12, PG_dirty, false, false);
	t_page(13, PG_dirty, false, false);
	ck_assert_uint_eq(disksize_reach(&m, 50000, 108894, NULL, 0), 50000);
}
END_TEST

START_TEST(clean_and_read_pages_pass)
{
	t_page(1, PG_uptodate, false, false);		/* clean */
	t_page(2, PG_locked, true, true);		/* being read */
	t_page(3, PG_writeback, false, false);		/* mapped, in flight */
	t_page(5, PG_dirty, false, false);
	ck_assert_uint_eq(disksize_reach(&m, 0, P(8), NULL, 0), P(5));
}
END_TEST

START_TEST(delalloc_and_locked_writes_stop)
{
	t_page(4, PG_delalloc, false, false);
	ck_assert_uint_eq(disksize_reach(&m, 0, P(8), NULL, 0), P(4));
	t_page(2, PG_locked, true, false);		/* a write copying into it */
	ck_assert_uint_eq(disksize_reach(&m, 0, P(8), NULL, 0), P(2));
}
END_TEST

START_TEST(batch_being_mapped_counts_as_written)
{
	/* a writeback batch: locked, dirty bit cleared, mapped in the
	 * caller's fs_lock section; a dirty page after it stops */
	static const uint64_t batch[] = { 2, 3, 4 };

	t_page(2, PG_writeback, true, false);
	t_page(3, PG_writeback, true, false);
	t_page(4, PG_writeback, true, false);
	t_page(6, PG_dirty, false, false);
	ck_assert_uint_eq(disksize_reach(&m, P(2), P(9), batch, 3), P(6));
	/* the same pages, not in the caller's batch: another batch's */
	ck_assert_uint_eq(disksize_reach(&m, P(2), P(9), NULL, 0), P(2));
	/* a skip list naming pages not cached changes nothing */
	ck_assert_uint_eq(disksize_reach(&m, P(5), P(6), batch, 3), P(6));
}
END_TEST

START_TEST(pages_past_isize_ignored)
{
	t_page(10, PG_dirty, false, false);
	ck_assert_uint_eq(disksize_reach(&m, 0, P(10), NULL, 0), P(10));
	/* the partial last page holds pending data */
	ck_assert_uint_eq(disksize_reach(&m, 0, P(10) + 7, NULL, 0), P(10));
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("disksize");
	TCase *tc;

	tc = t_tcase(s, "reach", holes_only_reach_isize, never_lowers_never_past_isize,
		     stops_at_pending_data, appended_tail_page_keeps_old_size,
		     clean_and_read_pages_pass, delalloc_and_locked_writes_stop,
		     batch_being_mapped_counts_as_written, pages_past_isize_ignored);
	tcase_add_checked_fixture(tc, setup, teardown);
	return s;
}

int main(void)
{
	return t_run(suite());
}
