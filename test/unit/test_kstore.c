// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The kstore log (ext4/kstore.c): which writes a writeback of the
 * kernel's pages of a mapping must leave as we have them. The rule under
 * test is when the writeback counts as taken: at the number its worker
 * noted before the kernel copied it (kstore_before_copy), not when the
 * worker got round to it. A write(2) whose store into the kernel's page
 * ended between the copy and the worker's look is newer than the copy,
 * and the writeback must keep its bytes.
 */
#include <check.h>
#include "helpers.h"
#include <stdlib.h>

#include "../../ext4/ext4_i.h"

static struct wbfs *w;
static struct winode *wi;

static void setup(void)
{
	w = calloc(1, sizeof(*w));
	wi = calloc(1, sizeof(*wi));
	ck_assert(w && wi);
	atomic_store(&wi->kcached, true);	/* the kernel may hold its pages */
}

static void teardown(void)
{
	kstore_free(wi);
	free(wi);
	free(w);
	kstore_copy_unnoted();
}

/* A write(2) of [start, end) that runs and stores into the kernel's page. */
static void t_write(uint64_t start, uint64_t end)
{
	int slot = kstore_begin(wi, start, end);

	ck_assert_int_ge(slot, 0);
	kstore_end(w, wi, slot, start, end);
}

/* The ranges of page 0 a writeback this thread took must keep. */
static int t_mask(struct kstore_range *keep)
{
	return kstore_mask(w, wi, 0, PAGE_SIZE, keep);
}

START_TEST(write_after_copy_kept)
{
	struct kstore_range keep[KSTORE_MAX_KEEP];

	kstore_before_copy(w);		/* the kernel copies the writeback now */
	t_write(0, 8);			/* a write stores after the copy */
	kstore_taken(w);		/* the worker gets to the writeback */
	ck_assert_int_eq(t_mask(keep), 1);
	ck_assert_uint_eq(keep[0].start, 0);
	ck_assert_uint_eq(keep[0].end, 8);
	ck_assert_int_eq(atomic_load(&w->stats.nr_store_kept), 1);
}
END_TEST

START_TEST(write_before_copy_overwritten)
{
	struct kstore_range keep[KSTORE_MAX_KEEP];

	/* the write ended before the writeback started: a mapping may have
	 * stored over it since, and the writeback carries those bytes */
	t_write(0, 8);
	kstore_before_copy(w);
	kstore_taken(w);
	ck_assert_int_eq(t_mask(keep), 0);
}
END_TEST

START_TEST(running_write_kept)
{
	struct kstore_range keep[KSTORE_MAX_KEEP];
	int slot;

	kstore_before_copy(w);
	slot = kstore_begin(wi, 100, 200);
	kstore_taken(w);
	ck_assert_int_eq(t_mask(keep), 1);
	ck_assert_uint_eq(keep[0].start, 100);
	kstore_end(w, wi, slot, 100, 200);
	/* a later writeback, copied after that write ended, is whole */
	kstore_before_copy(w);
	kstore_taken(w);
	ck_assert_int_eq(t_mask(keep), 0);
}
END_TEST

START_TEST(unnoted_copy_taken_late)
{
	struct kstore_range keep[KSTORE_MAX_KEEP];

	/* a read that may block notes nothing: the number is read when the
	 * worker takes the request, after the copy */
	kstore_before_copy(w);
	kstore_copy_unnoted();
	t_write(0, 8);
	kstore_taken(w);
	ck_assert_int_eq(t_mask(keep), 0);
}
END_TEST

START_TEST(clipped_to_page)
{
	struct kstore_range keep[KSTORE_MAX_KEEP];

	kstore_before_copy(w);
	t_write(PAGE_SIZE - 4, PAGE_SIZE + 4);	/* across pages 0 and 1 */
	t_write(2 * PAGE_SIZE, 3 * PAGE_SIZE);	/* page 2 only */
	kstore_taken(w);
	ck_assert_int_eq(t_mask(keep), 1);
	ck_assert_uint_eq(keep[0].start, PAGE_SIZE - 4);
	ck_assert_uint_eq(keep[0].end, PAGE_SIZE);
}
END_TEST

static Suite *kstore_suite(void)
{
	Suite *s = suite_create("kstore");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, write_after_copy_kept);
	tcase_add_test(tc, write_before_copy_overwritten);
	tcase_add_test(tc, running_write_kept);
	tcase_add_test(tc, unnoted_copy_taken_late);
	tcase_add_test(tc, clipped_to_page);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run(kstore_suite());
}
