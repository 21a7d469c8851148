// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Delayed-allocation reservations: writers reserve a block per new dirty
 * page at write(2) time (and the extent tree blocks sparse pages will
 * need) against the free count, minus the metadata headroom and (for
 * unprivileged writers) the root reserve; user metadata allocations obey
 * the same rule, nofail ones may dig into half the headroom, none into
 * reserved blocks, so the flusher can always allocate what was promised.
 */
#include <check.h>
#include "helpers.h"
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "../../ext4/ext4_i.h"

static struct wbfs *t_wbfs(int64_t free_blocks, int64_t headroom, int64_t root)
{
	struct wbfs *w = calloc(1, sizeof(*w));

	pthread_mutex_init(&w->resv_lock, NULL);
	w->free_blocks = free_blocks;
	w->headroom = headroom;
	w->root_reserved = root;
	return w;
}

START_TEST(reserve_until_full)
{
	struct wbfs *w = t_wbfs(1000, 100, 0);
	int i;

	for (i = 0; i < 900; i++)
		ck_assert_int_eq(ext4_reserve(w, 1, true), 0);
	ck_assert_int_eq(w->reserved, 900);
	ck_assert_int_eq(ext4_reserve(w, 1, true), -ENOSPC);
	ext4_unreserve(w, 10);
	ck_assert_int_eq(ext4_reserve(w, 10, true), 0);
	ck_assert_int_eq(ext4_reserve(w, 1, true), -ENOSPC);
	free(w);
}
END_TEST

START_TEST(batch_is_all_or_nothing)
{
	struct wbfs *w = t_wbfs(1000, 100, 0);

	ck_assert_int_eq(ext4_reserve(w, 901, true), -ENOSPC);
	ck_assert_int_eq(w->reserved, 0);
	ck_assert_int_eq(ext4_reserve(w, 900, true), 0);
	free(w);
}
END_TEST

START_TEST(root_reserve_only_for_privileged)
{
	struct wbfs *w = t_wbfs(1000, 100, 50);

	ck_assert_int_eq(ext4_reserve(w, 851, false), -ENOSPC);
	ck_assert_int_eq(ext4_reserve(w, 850, false), 0);
	ck_assert_int_eq(ext4_reserve(w, 1, false), -ENOSPC);
	ck_assert_int_eq(ext4_reserve(w, 50, true), 0);
	ck_assert_int_eq(ext4_reserve(w, 1, true), -ENOSPC);
	free(w);
}
END_TEST

START_TEST(metadata_keeps_reserved_blocks)
{
	struct wbfs *w = t_wbfs(1000, 100, 0);

	ck_assert_int_eq(ext4_meta_room(w, 10), 0);
	ck_assert_int_eq(ext4_reserve(w, 900, true), 0);
	/* reserved data blocks are untouchable; half the headroom is usable */
	ck_assert_int_eq(ext4_meta_room(w, 50), 0);
	ck_assert_int_eq(ext4_meta_room(w, 51), -ENOSPC);
	/* the flusher allocated 900 blocks: free and reserved both drop */
	w->free_blocks -= 900;
	w->reserved -= 900;
	ck_assert_int_eq(ext4_meta_room(w, 50), 0);
	ck_assert_int_eq(ext4_reserve(w, 1, true), -ENOSPC);
	free(w);
}
END_TEST

/* ext4_has_free_clusters: users, root, and changes that must not fail */
START_TEST(room_rules_as_ext4)
{
	/* 1000 free, 100 promised, headroom 100, root reserve 50 */
	ck_assert(ext4_room_ok(1000, 100, 100, 50, 750, 0));
	ck_assert(!ext4_room_ok(1000, 100, 100, 50, 751, 0));
	ck_assert(ext4_room_ok(1000, 100, 100, 50, 800, WBFS_ROOM_PRIV));
	ck_assert(!ext4_room_ok(1000, 100, 100, 50, 801, WBFS_ROOM_PRIV));
	ck_assert(ext4_room_ok(1000, 100, 100, 50, 850, WBFS_ROOM_NOFAIL));
	ck_assert(!ext4_room_ok(1000, 100, 100, 50, 851, WBFS_ROOM_NOFAIL));
	/* over-promised (cannot happen, but must not wrap) */
	ck_assert(!ext4_room_ok(10, 100, 0, 0, 0, WBFS_ROOM_NOFAIL));
}
END_TEST

START_TEST(user_metadata_refused_with_user_writes)
{
	struct wbfs *w = t_wbfs(1000, 100, 50);
	long n = 0;

	while (ext4_reserve(w, 1, false) == 0)
		n++;
	ck_assert_int_eq(n, 850);
	/* the user's mkdir sees the same full filesystem */
	ck_assert_int_eq(ext4_claim_room(w, 1, 0), -ENOSPC);
	/* root's has the root reserve, the nofail changes half the headroom */
	ck_assert_int_eq(ext4_claim_room(w, 50, WBFS_ROOM_PRIV), 0);
	ck_assert_int_eq(ext4_claim_room(w, 51, WBFS_ROOM_PRIV), -ENOSPC);
	ck_assert_int_eq(ext4_meta_room(w, 100), 0);
	ck_assert_int_eq(ext4_meta_room(w, 101), -ENOSPC);
	/* root's writes fill the root reserve: then only the nofail half */
	ck_assert_int_eq(ext4_reserve(w, 50, true), 0);
	ck_assert_int_eq(ext4_claim_room(w, 1, WBFS_ROOM_PRIV), -ENOSPC);
	ck_assert_int_eq(ext4_meta_room(w, 50), 0);
	ck_assert_int_eq(ext4_meta_room(w, 51), -ENOSPC);
	free(w);
}
END_TEST

START_TEST(extent_blocks_worst_case)
{
	ck_assert_int_eq(ext4_extent_blocks(0), 0);
	ck_assert_int_eq(ext4_extent_blocks(4), 0);		/* in the inode */
	ck_assert_int_eq(ext4_extent_blocks(5), 1);		/* one leaf */
	ck_assert_int_eq(ext4_extent_blocks(340), 1);
	ck_assert_int_eq(ext4_extent_blocks(341), 2);
	ck_assert_int_eq(ext4_extent_blocks(4 * 340), 4);	/* 4 leaves, index in inode */
	ck_assert_int_eq(ext4_extent_blocks(4 * 340 + 1), 6);	/* 5 leaves + an index block */
}
END_TEST

/* Sparse pages reserve the extent blocks writeback will need; runs do not. */
START_TEST(page_reservations_count_extent_blocks)
{
	struct wbfs *w = t_wbfs(1000, 100, 0);
	struct winode *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	int i;

	for (i = 0; i < 4; i++)
		ck_assert_int_eq(ext4_reserve_page(w, a, true, 0, true), 0);
	ck_assert_int_eq(w->reserved, 4);
	ck_assert_int_eq(ext4_reserve_page(w, a, true, 0, true), 0);	/* 5th extent */
	ck_assert_int_eq(w->reserved, 6);
	ck_assert_int_eq(a->meta_resv, 1);
	/* a run of 500 pages is one extent */
	for (i = 0; i < 500; i++)
		ck_assert_int_eq(ext4_reserve_page(w, b, false, 0, true), 0);
	ck_assert_int_eq(w->reserved, 506);
	ck_assert_int_eq(b->meta_resv, 0);
	/* the extent block goes back with the last delalloc page */
	ext4_unreserve_pages(w, a, 4);
	ck_assert_int_eq(w->reserved, 502);
	ext4_unreserve_pages(w, a, 1);
	ck_assert_int_eq(w->reserved, 500);
	ck_assert_int_eq(a->meta_resv, 0);
	ck_assert_int_eq(a->da_runs, 0);
	ck_assert_int_eq(a->nr_delalloc, 0);
	/* a page whose extent block does not fit is refused, with nothing held */
	w->free_blocks = 100 + 500 + 4;
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(ext4_reserve_page(w, a, true, 0, true), 0);
	ck_assert_int_eq(ext4_reserve_page(w, a, true, 0, true), -ENOSPC);
	ck_assert_int_eq(w->reserved, 504);
	ck_assert_int_eq(a->da_runs, 4);
	free(a);
	free(b);
	free(w);
}
END_TEST

/* A file with four extents on disk needs a tree block for its fifth. */
START_TEST(page_reservations_count_file_extents)
{
	struct wbfs *w = t_wbfs(1000, 100, 0);
	struct winode *a = calloc(1, sizeof(*a));

	ck_assert_int_eq(ext4_reserve_page(w, a, true, 4, true), 0);
	ck_assert_int_eq(w->reserved, 2);
	ck_assert_int_eq(a->meta_resv, 1);
	/* a file with a full leaf's worth already: its next leaf */
	ext4_unreserve_pages(w, a, 1);
	ck_assert_int_eq(ext4_reserve_page(w, a, true, 100, true), 0);
	ck_assert_int_eq(a->meta_resv, 0);
	ck_assert_int_eq(ext4_reserve_page(w, a, true, 339, true), 0);
	ck_assert_int_eq(a->meta_resv, 1);
	free(a);
	free(w);
}
END_TEST

static void *t_reserver(void *arg)
{
	struct wbfs *w = arg;
	long got = 0;
	int i;

	for (i = 0; i < 100000; i++)
		if (ext4_reserve(w, 1, true) == 0)
			got++;
	return (void *)got;
}

START_TEST(concurrent_reservations_never_overcommit)
{
	struct wbfs *w = t_wbfs(50100, 100, 0);
	pthread_t t[4];
	long total = 0;
	void *r;
	int i;

	for (i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, t_reserver, w);
	for (i = 0; i < 4; i++) {
		pthread_join(t[i], &r);
		total += (long)r;
	}
	ck_assert_int_eq(total, 50000);
	ck_assert_int_eq(w->reserved, 50000);
	free(w);
}
END_TEST

static Suite *delalloc_suite(void)
{
	Suite *s = suite_create("delalloc");

	t_tcase(s, "reserve", reserve_until_full, batch_is_all_or_nothing);
	t_tcase(s, "root_reserve", root_reserve_only_for_privileged);
	t_tcase(s, "extent_blocks", extent_blocks_worst_case, page_reservations_count_extent_blocks,
		page_reservations_count_file_extents);
	t_tcase(s, "room_rules", room_rules_as_ext4, user_metadata_refused_with_user_writes);
	t_tcase(s, "metadata_room", metadata_keeps_reserved_blocks);
	t_tcase(s, "concurrency", concurrent_reservations_never_overcommit);
	return s;
}

int main(void)
{
	return t_run(delalloc_suite());
}
