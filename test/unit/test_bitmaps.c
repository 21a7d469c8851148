// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * ext4.c's bookkeeping that keeps a commit's cost to what changed: the
 * runs of a busy-block bitmap (a drain visits them alone, and must still
 * find every set bit exactly once, and clear the bitmap) and the groups
 * whose bitmaps changed (a commit writes only those: a group left out is
 * a bitmap never written, which e2fsck finds after unmount). Checked on a
 * filesystem libext2fs makes in memory, with four groups.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "helpers.h"

#include "../../ext4/ext4_i.h"

#define BPG 8192ULL			/* blocks per group */
#define NBLOCKS (4 * BPG)

static char t_path[128];

static struct wbfs *t_fs(void)
{
	struct wbfs *w = calloc(1, sizeof(*w));

	ck_assert_ptr_nonnull(w);
	w->fs = t_ext2fs(t_path, NBLOCKS, BPG);
	ck_assert_uint_eq(w->fs->group_desc_count, 4);
	ck_assert_int_eq(ext2fs_allocate_block_bitmap(w->fs, "busy", &w->busy), 0);
	w->bm_changed = calloc(w->fs->group_desc_count, 1);
	ck_assert_ptr_nonnull(w->bm_changed);
	return w;
}

static void t_fs_free(struct wbfs *w)
{
	ext2fs_free_block_bitmap(w->busy);
	ext4_bm_runs_free(&w->busy_runs);
	free(w->bm_changed);
	ext2fs_free(w->fs);
	unlink(t_path);
	free(w);
}

/* What a drain handed out: runs, in order. */
static struct {
	blk64_t blk[64], n[64];
	int nr;
} seen;

static void note_run(struct wbfs *w, blk64_t blk, blk64_t n)
{
	(void)w;
	ck_assert_int_lt(seen.nr, 64);
	seen.blk[seen.nr] = blk;
	seen.n[seen.nr++] = n;
}

static void mark(struct wbfs *w, blk64_t blk, blk64_t n)
{
	ext2fs_mark_block_bitmap_range2(w->busy, blk, (unsigned)n);
	ext4_bm_runs_add(&w->busy_runs, blk, n);
}

static void assert_empty(struct wbfs *w)
{
	blk64_t b;

	ck_assert_int_ne(ext2fs_find_first_set_block_bitmap2(w->busy, w->fs->super->s_first_data_block,
							     NBLOCKS - 1, &b), 0);
}

START_TEST(runs_merge_when_adjacent)
{
	struct bm_runs r = { 0 };

	ext4_bm_runs_add(&r, 100, 10);
	ext4_bm_runs_add(&r, 110, 5);	/* follows on: one run */
	ext4_bm_runs_add(&r, 200, 1);
	ext4_bm_runs_add(&r, 50, 1);	/* before: a run of its own */
	ext4_bm_runs_add(&r, 300, 0);	/* empty: nothing */
	ck_assert_uint_eq(r.nr, 3);
	ck_assert_uint_eq(r.v[0].blk, 100);
	ck_assert_uint_eq(r.v[0].n, 15);
	ck_assert(!r.all);
	ext4_bm_runs_free(&r);
	ck_assert_ptr_null(r.v);
	ck_assert_uint_eq(r.nr, 0);
}
END_TEST

START_TEST(too_many_runs_mean_the_whole_bitmap)
{
	struct bm_runs r = { 0 };
	blk64_t i;

	for (i = 0; i < 70000 && !r.all; i++)
		ext4_bm_runs_add(&r, i * 2, 1);	/* never adjacent */
	ck_assert(r.all);
	ck_assert_uint_le(r.nr, 65536);
	ext4_bm_runs_free(&r);
}
END_TEST

START_TEST(drain_finds_every_bit_once_and_clears)
{
	struct wbfs *w = t_fs();

	mark(w, 10, 3);
	mark(w, BPG - 2, 4);		/* across groups 0 and 1 */
	mark(w, 11, 5);			/* overlaps the first: 10..15 set */
	mark(w, 3 * BPG + 7, 1);
	mark(w, 10, 3);			/* noted twice */
	seen.nr = 0;
	ext4_bitmap_drain(w, w->busy, &w->busy_runs, note_run);
	/* every set block handed out once (a run may come in pieces), no other */
	static unsigned char got[NBLOCKS];
	blk64_t b;
	int i;

	memset(got, 0, sizeof(got));
	for (i = 0; i < seen.nr; i++)
		for (b = seen.blk[i]; b < seen.blk[i] + seen.n[i]; b++)
			got[b]++;
	for (b = 0; b < NBLOCKS; b++) {
		bool set = (b >= 10 && b < 16) || (b >= BPG - 2 && b < BPG + 2) ||
			   b == 3 * BPG + 7;

		ck_assert_msg(got[b] == (set ? 1 : 0), "block %llu handed out %d times",
			      (unsigned long long)b, got[b]);
	}
	assert_empty(w);
	ck_assert_uint_eq(w->busy_runs.nr, 0);
	/* busy blocks are free in the bitmap as written: their groups changed */
	ck_assert_int_eq(w->bm_changed[0], BM_BLOCK);
	ck_assert_int_eq(w->bm_changed[1], BM_BLOCK);
	ck_assert_int_eq(w->bm_changed[2], 0);
	ck_assert_int_eq(w->bm_changed[3], BM_BLOCK);
	/* empty now: a second drain hands out nothing */
	seen.nr = 0;
	ext4_bitmap_drain(w, w->busy, &w->busy_runs, note_run);
	ck_assert_int_eq(seen.nr, 0);
	t_fs_free(w);
}
END_TEST

START_TEST(drain_of_the_whole_bitmap)
{
	struct wbfs *w = t_fs();

	mark(w, 20, 2);
	/* a bit set without its run: found only because the runs gave up */
	ext2fs_mark_block_bitmap2(w->busy, 2 * BPG + 5);
	w->busy_runs.all = true;
	seen.nr = 0;
	ext4_bitmap_drain(w, w->busy, &w->busy_runs, note_run);
	ck_assert_int_eq(seen.nr, 2);
	ck_assert_uint_eq(seen.blk[1], 2 * BPG + 5);
	assert_empty(w);
	ck_assert(!w->busy_runs.all);
	ck_assert_uint_eq(w->busy_runs.nr, 0);
	t_fs_free(w);
}
END_TEST

START_TEST(changed_groups)
{
	struct wbfs *w = t_fs();
	blk64_t end = ext2fs_blocks_count(w->fs->super);

	ext4_bb_changed(w, BPG - 1, BPG + 2);	/* groups 0, 1, 2 */
	ck_assert_int_eq(w->bm_changed[0] & BM_BLOCK, BM_BLOCK);
	ck_assert_int_eq(w->bm_changed[1] & BM_BLOCK, BM_BLOCK);
	ck_assert_int_eq(w->bm_changed[2] & BM_BLOCK, BM_BLOCK);
	ck_assert_int_eq(w->bm_changed[3], 0);
	ext4_bb_changed(w, end - 1, 100);	/* clamped to the last block */
	ck_assert_int_eq(w->bm_changed[3], BM_BLOCK);
	memset(w->bm_changed, 0, w->fs->group_desc_count);
	ext4_bb_changed(w, end, 1);		/* past the end: nothing */
	ext4_bb_changed(w, 5, 0);
	ck_assert_int_eq(w->bm_changed[0] | w->bm_changed[3], 0);
	/* an inode's group */
	ext4_ib_changed(w, w->fs->super->s_inodes_per_group * 2 + 1);
	ck_assert_int_eq(w->bm_changed[2], BM_INODE);
	ext4_ib_changed(w, 0);
	ext4_ib_changed(w, w->fs->super->s_inodes_count + 1);
	ck_assert_int_eq(w->bm_changed[0] | w->bm_changed[1] | w->bm_changed[3], 0);
	t_fs_free(w);
}
END_TEST

/*
 * libext2fs 1.47.0 tells its range callback (end, 0): the wrapper must
 * note the groups itself, and they are in use in the bitmap.
 */
START_TEST(range_allocations_are_noted)
{
	struct wbfs *w = t_fs();
	blk64_t start = BPG + BPG / 2;

	ext4_block_alloc_stats_range(w, start, BPG, +1);	/* groups 1 and 2 */
	ck_assert_int_eq(w->bm_changed[0], 0);
	ck_assert_int_eq(w->bm_changed[1], BM_BLOCK);
	ck_assert_int_eq(w->bm_changed[2], BM_BLOCK);
	ck_assert_int_eq(w->bm_changed[3], 0);
	ck_assert(ext2fs_test_block_bitmap2(w->fs->block_map, start));
	ck_assert(ext2fs_test_block_bitmap2(w->fs->block_map, start + BPG - 1));
	ck_assert(!w->bm_in_range);
	t_fs_free(w);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("bitmaps");

	t_tcase(s, "bitmaps", runs_merge_when_adjacent, too_many_runs_mean_the_whole_bitmap,
		drain_finds_every_bit_once_and_clears, drain_of_the_whole_bitmap, changed_groups,
		range_allocations_are_noted);
	return t_run(s);
}
