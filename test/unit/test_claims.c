// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * ext4.c's block claims: writeback finds free blocks under fs_lock
 * shared and a lock per group, so claims in different groups run at
 * once. A claimed block is in use in the in-memory bitmap (nobody else
 * gets it) and changes no count until it is used (then it is an ordinary
 * allocation: group and superblock counts, its group noted for the next
 * bitmap write) or released (then it is free again, as if never
 * claimed); every bitmap written meanwhile shows it free. Inodes are
 * claimed for creates the same way. Busy blocks (freed, the free not
 * committed) go to libext2fs's metadata one at a time. Checked on a filesystem libext2fs
 * makes in memory, with four groups; the concurrency checks run eight
 * threads claiming at once, half of them in one group, and require that
 * no block and no inode went to two.
 */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "helpers.h"

#include "../../ext4/ext4_i.h"

#define BPG 8192ULL			/* blocks per group */
#define NBLOCKS (4 * BPG)

static char t_path[128];

/* The bitmaps of the array kind, as the daemon reads them (ext4.c, fs_load). */
static void t_bitarray(ext2_filsys fs)
{
	blk64_t first = fs->super->s_first_data_block;
	ext2fs_block_bitmap bm;
	ext2fs_inode_bitmap im;
	char *buf = malloc(NBLOCKS / 8);

	ck_assert_ptr_nonnull(buf);
	fs->default_bitmap_type = EXT2FS_BMAP64_BITARRAY;
	ck_assert_int_eq(ext2fs_allocate_block_bitmap(fs, "blocks", &bm), 0);
	ck_assert_int_eq(ext2fs_get_block_bitmap_range2(fs->block_map, first, NBLOCKS - first,
							buf), 0);
	ck_assert_int_eq(ext2fs_set_block_bitmap_range2(bm, first, NBLOCKS - first, buf), 0);
	ext2fs_free_block_bitmap(fs->block_map);
	fs->block_map = bm;
	ck_assert_int_eq(ext2fs_allocate_inode_bitmap(fs, "inodes", &im), 0);
	ext2fs_free_inode_bitmap(fs->inode_map);	/* nothing in use yet */
	fs->inode_map = im;
	free(buf);
}

static struct wbfs *t_fs(void)
{
	struct wbfs *w = calloc(1, sizeof(*w));
	unsigned i;

	ck_assert_ptr_nonnull(w);
	w->fs = t_ext2fs(t_path, NBLOCKS, BPG);
	ck_assert_uint_eq(w->fs->group_desc_count, 4);
	ck_assert_int_eq(ext2fs_allocate_tables(w->fs), 0);
	t_bitarray(w->fs);
	ck_assert_int_eq(ext4_locs_build(w), 0);
	w->bm_changed = calloc(w->fs->group_desc_count, 1);
	ck_assert_ptr_nonnull(w->bm_changed);
	pthread_rwlock_init(&w->fs_lock, NULL);
	for (i = 0; i < WBFS_GROUP_LOCKS; i++)
		pthread_mutex_init(&w->group_lock[i], NULL);
	pthread_mutex_init(&w->claim_lock, NULL);
	pthread_mutex_init(&w->resv_lock, NULL);
	return w;
}

static void t_fs_free(struct wbfs *w)
{
	free(w->claims);
	free(w->bb_locs);
	free(w->it_locs);
	free(w->ib_locs);
	free(w->bm_changed);
	ext2fs_free(w->fs);
	unlink(t_path);
	free(w);
}

static blk64_t group_start(struct wbfs *w, dgrp_t g)
{
	return ext2fs_group_first_block2(w->fs, g);
}

static bool in_use(struct wbfs *w, blk64_t b)
{
	return ext2fs_test_block_bitmap2(w->fs->block_map, b);
}

static int claim(struct wbfs *w, blk64_t goal, blk64_t len, blk64_t *got, blk64_t *glen)
{
	int ret;

	ext4_lock_shared(w);
	ret = ext4_claim_blocks(w, goal, len, got, glen);
	ext4_unlock_shared(w);
	return ret;
}

/*
 * Busy blocks (freed, the free not committed) go to libext2fs's metadata
 * one at a time (ext4_journal_take_busy): the nearest at or after the
 * goal, wrapping; each leaves the busy set and stays in use in memory, its
 * group noted; a drain of the rest frees only those left. Data never
 * takes them while there is a journal (ext4_alloc_should_commit).
 */
START_TEST(busy_blocks_taken_one_at_a_time)
{
	struct wbfs *w = t_fs();
	blk64_t base = group_start(w, 2) + 4000, b, got[8];
	unsigned i, k;

	ck_assert_int_eq(ext2fs_allocate_block_bitmap(w->fs, "busy", &w->busy), 0);
	ext2fs_mark_block_bitmap_range2(w->fs->block_map, base, 8);
	ext2fs_mark_block_bitmap_range2(w->busy, base, 8);
	ext4_bm_runs_add(&w->busy_runs, base, 8);
	w->nr_busy = 8;
	ck_assert(!ext4_alloc_should_commit(w));	/* no journal: released instead */
	ck_assert_uint_eq(ext4_journal_busy_blocks(w), 8);

	ck_assert_int_eq(ext4_journal_take_busy(w, base + 5, &got[0]), 0);
	ck_assert_uint_eq(got[0], base + 5);
	ck_assert(!ext2fs_test_block_bitmap2(w->busy, base + 5));
	ck_assert(in_use(w, base + 5));
	ck_assert(w->bm_changed[2] & BM_BLOCK);
	ck_assert_uint_eq(w->nr_busy, 7);
	/* past the last busy block: wraps to the first */
	ck_assert_int_eq(ext4_journal_take_busy(w, base + 7, &got[1]), 0);
	ck_assert_uint_eq(got[1], base + 7);
	ck_assert_int_eq(ext4_journal_take_busy(w, base + 7, &got[2]), 0);
	ck_assert_uint_eq(got[2], base);

	/* the other five are released by a drain; the three taken stay in use */
	ext4_lock(w);
	ext4_release_busy_locked(w);
	ext4_unlock(w);
	ck_assert_uint_eq(w->nr_busy, 0);
	for (b = base, k = 0; b < base + 8; b++) {
		bool taken = false;

		for (i = 0; i < 3; i++)
			taken |= got[i] == b;
		ck_assert_int_eq(in_use(w, b), taken);
		k += taken;
	}
	ck_assert_uint_eq(k, 3);
	ck_assert_int_eq(ext4_journal_take_busy(w, base, &b), EXT2_ET_BLOCK_ALLOC_FAIL);
	ext2fs_free_block_bitmap(w->busy);
	ext4_bm_runs_free(&w->busy_runs);
	t_fs_free(w);
}
END_TEST

START_TEST(claim_takes_a_run_and_changes_no_count)
{
	struct wbfs *w = t_fs();
	blk64_t goal = group_start(w, 2) + 4000, got, glen, free_sb;	/* past its tables */
	unsigned free_g = ext2fs_bg_free_blocks_count(w->fs, 2);

	free_sb = ext2fs_free_blocks_count(w->fs->super);
	ck_assert_int_eq(claim(w, goal, 16, &got, &glen), 0);
	ck_assert_uint_eq(got, goal);
	ck_assert_uint_eq(glen, 16);
	for (blk64_t b = got; b < got + glen; b++)
		ck_assert(in_use(w, b));
	ck_assert(!in_use(w, got + glen));
	/* free on disk until used: no count, no note */
	ck_assert_uint_eq(ext2fs_bg_free_blocks_count(w->fs, 2), free_g);
	ck_assert_uint_eq(ext2fs_free_blocks_count(w->fs->super), free_sb);
	ck_assert_uint_eq(w->bm_changed[2], 0);
	ck_assert_uint_eq(w->nr_claims, 1);
	ck_assert(ext4_bitmap_masked(w));
	/* the next claim does not get them */
	ck_assert_int_eq(claim(w, goal, 4, &got, &glen), 0);
	ck_assert_uint_eq(got, goal + 16);
	ck_assert_uint_eq(atomic_load(&w->stats.nr_blocks_claimed), 20);
	t_fs_free(w);
}
END_TEST

START_TEST(use_counts_release_frees)
{
	struct wbfs *w = t_fs();
	blk64_t goal = group_start(w, 1) + 4000, got, glen, free_sb;
	unsigned free_g = ext2fs_bg_free_blocks_count(w->fs, 1);

	free_sb = ext2fs_free_blocks_count(w->fs->super);
	ck_assert_int_eq(claim(w, goal, 10, &got, &glen), 0);
	ck_assert_uint_eq(glen, 10);
	ext4_lock(w);
	/* the first four go into a file */
	ext4_claim_use(w, got, 4);
	ck_assert_uint_eq(w->nr_claims, 1);
	ck_assert_uint_eq(ext2fs_bg_free_blocks_count(w->fs, 1), free_g - 4);
	ck_assert_uint_eq(ext2fs_free_blocks_count(w->fs->super), free_sb - 4);
	ck_assert(w->bm_changed[1] & BM_BLOCK);
	/* the next two, skipping one: the one skipped goes back, the claim
	 * only ever shrinks from its head */
	ext4_claim_use(w, got + 5, 2);
	ck_assert_uint_eq(w->nr_claims, 1);
	ck_assert(!in_use(w, got + 4));
	/* the rest was not needed */
	ext4_claim_release(w, got + 7, 3);
	ck_assert_uint_eq(w->nr_claims, 0);
	ck_assert(!ext4_bitmap_masked(w));
	for (blk64_t b = got; b < got + 10; b++)
		ck_assert(in_use(w, b) == (b < got + 4 || b == got + 5 || b == got + 6));
	ck_assert_uint_eq(ext2fs_bg_free_blocks_count(w->fs, 1), free_g - 6);
	/* releasing what is not claimed changes nothing */
	ext4_claim_release(w, got + 3, 1);
	ck_assert(in_use(w, got + 3));
	ext4_unlock(w);
	t_fs_free(w);
}
END_TEST

START_TEST(claims_stop_at_used_blocks_and_wrap)
{
	struct wbfs *w = t_fs();
	blk64_t g3 = group_start(w, 3), got, glen, b;

	/* a used block cuts the run short */
	ext2fs_mark_block_bitmap2(w->fs->block_map, g3 + 4005);
	ck_assert_int_eq(claim(w, g3 + 4000, 50, &got, &glen), 0);
	ck_assert_uint_eq(got, g3 + 4000);
	ck_assert_uint_eq(glen, 5);
	/* a run does not cross into the next group */
	ck_assert_int_eq(claim(w, group_start(w, 1) - 2, 50, &got, &glen), 0);
	ck_assert_uint_eq(got, group_start(w, 1) - 2);
	ck_assert_uint_eq(glen, 2);
	/* everything from the goal to the end in use: it wraps to the start */
	ext2fs_mark_block_bitmap_range2(w->fs->block_map, g3, (unsigned)BPG);
	ck_assert_int_eq(claim(w, g3 + 10, 1, &got, &glen), 0);
	ck_assert_uint_lt(got, g3);
	/* nothing free anywhere: -ENOSPC, nothing claimed */
	for (b = w->fs->super->s_first_data_block; b < NBLOCKS; b++)
		ext2fs_mark_block_bitmap2(w->fs->block_map, b);
	ck_assert_int_eq(claim(w, g3, 1, &got, &glen), -ENOSPC);
	t_fs_free(w);
}
END_TEST

START_TEST(claims_are_free_in_the_bitmaps_written)
{
	struct wbfs *w = t_fs();
	ext2_filsys fs = w->fs;
	unsigned char bb[4096], ib[4096];
	blk64_t first = group_start(w, 1), got, glen;
	ext2_ino_t ipg = fs->super->s_inodes_per_group, ino;

	/* a used block right after the claim: it stays set */
	ext2fs_mark_block_bitmap2(fs->block_map, first + 4010);
	ck_assert_int_eq(claim(w, first + 4000, 10, &got, &glen), 0);
	ck_assert_uint_eq(glen, 10);
	ino = ext4_claim_inode(w, ipg + 5);	/* a parent in group 1 */
	ck_assert_uint_eq((ino - 1) / ipg, 1);
	ext4_lock(w);
	/* the block bitmap as a commit would write it */
	memset(bb, 0xff, sizeof(bb));
	ck_assert_int_eq(ext2fs_get_block_bitmap_range2(fs->block_map, first, BPG, bb), 0);
	for (blk64_t b = got; b < got + glen; b++)
		ck_assert(bb[(b - first) / 8] & (1U << ((b - first) % 8)));
	ext4_bitmap_written(w, ext2fs_block_bitmap_loc(fs, 1), bb);
	for (blk64_t b = got; b < got + glen; b++)
		ck_assert(!(bb[(b - first) / 8] & (1U << ((b - first) % 8))));
	ck_assert(bb[4010 / 8] & (1U << (4010 % 8)));
	/* the inode bitmap */
	memset(ib, 0xff, sizeof(ib));
	ck_assert_int_eq(ext2fs_get_inode_bitmap_range2(fs->inode_map, ipg + 1, ipg, ib), 0);
	ck_assert(ib[(ino - 1 - ipg) / 8] & (1U << ((ino - 1 - ipg) % 8)));
	ext4_bitmap_written(w, ext2fs_inode_bitmap_loc(fs, 1), ib);
	ck_assert(!(ib[(ino - 1 - ipg) / 8] & (1U << ((ino - 1 - ipg) % 8))));
	/* used and released, nothing is masked any more */
	ext4_claim_use(w, got, glen);
	ck_assert(ext4_claim_inode_take(w, ino));
	ck_assert(!ext4_bitmap_masked(w));
	ext4_unlock(w);
	t_fs_free(w);
}
END_TEST

START_TEST(inode_claims)
{
	struct wbfs *w = t_fs();
	ext2_filsys fs = w->fs;
	ext2_ino_t ipg = fs->super->s_inodes_per_group, a, b;
	unsigned free0 = ext2fs_bg_free_inodes_count(fs, 0);

	a = ext4_claim_inode(w, EXT2_ROOT_INO);
	b = ext4_claim_inode(w, EXT2_ROOT_INO);
	ck_assert_uint_ge(a, EXT2_FIRST_INODE(fs->super));
	ck_assert_uint_ne(a, b);
	ck_assert(ext2fs_test_inode_bitmap2(fs->inode_map, a));
	ck_assert(ext2fs_test_inode_bitmap2(fs->inode_map, b));
	ck_assert_uint_eq(ext2fs_bg_free_inodes_count(fs, 0), free0);	/* no count */
	ck_assert_uint_eq(atomic_load(&w->stats.nr_inodes_claimed), 2);
	ext4_lock(w);
	ck_assert(ext4_claim_inode_take(w, a));
	ck_assert(!ext2fs_test_inode_bitmap2(fs->inode_map, a));
	ck_assert(!ext4_claim_inode_take(w, a));	/* once */
	ck_assert(ext4_claim_inode_take(w, b));
	/* fs_lock held exclusive: no claim (the create would queue twice) */
	ck_assert_uint_eq(ext4_claim_inode(w, EXT2_ROOT_INO), 0);
	ext4_unlock(w);
	/* a group full in the bitmap: the next group */
	for (ext2_ino_t i = 1; i <= ipg; i++)
		ext2fs_mark_inode_bitmap2(fs->inode_map, i);
	a = ext4_claim_inode(w, EXT2_ROOT_INO);
	ck_assert_uint_eq((a - 1) / ipg, 1);
	/* an uninitialised group stops the search: ext2fs_new_inode's job */
	ext2fs_set_feature_gdt_csum(fs->super);
	ext2fs_bg_flags_set(fs, 1, EXT2_BG_INODE_UNINIT);
	for (ext2_ino_t i = ipg + 1; i <= 2 * ipg; i++)
		ext2fs_mark_inode_bitmap2(fs->inode_map, i);
	ext2fs_bg_flags_set(fs, 2, EXT2_BG_INODE_UNINIT);
	ck_assert_uint_eq(ext4_claim_inode(w, EXT2_ROOT_INO), 0);
	t_fs_free(w);
}
END_TEST

/* ---- concurrency ---- */

#define NTHREADS 8
#define ROUNDS 400

struct claimer {
	struct wbfs *w;
	blk64_t goal;
	unsigned seed;
	blk64_t got[ROUNDS], n[ROUNDS];
	int nr;
};

static void *claimer_run(void *arg)
{
	struct claimer *c = arg;
	int i;

	for (i = 0; i < ROUNDS; i++) {
		blk64_t len = 1 + (blk64_t)(rand_r(&c->seed) % 8), got, glen;

		if (claim(c->w, c->goal, len, &got, &glen))
			break;
		c->got[c->nr] = got;
		c->n[c->nr++] = glen;
	}
	return NULL;
}

#define IROUNDS 2000	/* 16000 of the 32768 inodes */

struct iclaimer {
	struct wbfs *w;
	ext2_ino_t parent, got[IROUNDS];
	int nr;
};

static void *iclaimer_run(void *arg)
{
	struct iclaimer *c = arg;
	int i, k;

	/* four claims at a time (as four creates under way), then taken
	 * and used: at most 8 x 4 outstanding, within WBFS_ICLAIMS */
	for (i = 0; i < IROUNDS / 4; i++) {
		for (k = 0; k < 4; k++) {
			ext2_ino_t ino = 0;
			long tries;

			/* none while another thread holds fs_lock exclusive */
			for (tries = 0; !ino && tries < 1000000; tries++)
				if (!(ino = ext4_claim_inode(c->w, c->parent)))
					sched_yield();
			if (!ino)
				return NULL;
			c->got[c->nr++] = ino;
		}
		ext4_lock(c->w);
		for (k = c->nr - 4; k < c->nr; k++) {
			ck_assert(ext4_claim_inode_take(c->w, c->got[k]));
			ext2fs_mark_inode_bitmap2(c->w->fs->inode_map, c->got[k]);	/* "used" */
		}
		ext4_unlock(c->w);
	}
	return NULL;
}

START_TEST(concurrent_inode_claims_never_share_an_inode)
{
	struct wbfs *w = t_fs();
	struct iclaimer *c = calloc(NTHREADS, sizeof(*c));
	pthread_t tid[NTHREADS];
	ext2_ino_t n = w->fs->super->s_inodes_count, ipg = w->fs->super->s_inodes_per_group;
	unsigned char *owner = calloc(n + 1, 1);
	int i, k;

	ck_assert_ptr_nonnull(c);
	ck_assert_ptr_nonnull(owner);
	for (i = 0; i < NTHREADS; i++) {
		c[i].w = w;
		c[i].parent = i < 4 ? EXT2_ROOT_INO : (ext2_ino_t)(i - 4) * ipg + 1;
		ck_assert_int_eq(pthread_create(&tid[i], NULL, iclaimer_run, &c[i]), 0);
	}
	for (i = 0; i < NTHREADS; i++)
		pthread_join(tid[i], NULL);
	for (i = 0; i < NTHREADS; i++) {
		ck_assert_int_eq(c[i].nr, IROUNDS);
		for (k = 0; k < c[i].nr; k++) {
			ck_assert_msg(!owner[c[i].got[k]], "inode %u claimed twice", c[i].got[k]);
			owner[c[i].got[k]] = 1;
		}
	}
	ck_assert_uint_eq(w->nr_iclaims, 0);
	free(owner);
	free(c);
	t_fs_free(w);
}
END_TEST

START_TEST(concurrent_claims_never_share_a_block)
{
	struct wbfs *w = t_fs();
	struct claimer *c = calloc(NTHREADS, sizeof(*c));
	pthread_t tid[NTHREADS];
	unsigned char *owner = calloc(NBLOCKS, 1);
	blk64_t total = 0;
	int i, k;

	ck_assert_ptr_nonnull(c);
	ck_assert_ptr_nonnull(owner);
	/* blocks in use before: nobody may claim them */
	for (blk64_t b = 0; b < NBLOCKS; b++)
		if (in_use(w, b))
			owner[b] = 0xff;
	for (i = 0; i < NTHREADS; i++) {
		c[i].w = w;
		c[i].seed = 7u + (unsigned)i;
		/* four in group 1 from the same goal, one in each group */
		c[i].goal = i < 4 ? group_start(w, 1) + 1 : group_start(w, (dgrp_t)(i - 4)) + 1;
		ck_assert_int_eq(pthread_create(&tid[i], NULL, claimer_run, &c[i]), 0);
	}
	for (i = 0; i < NTHREADS; i++)
		pthread_join(tid[i], NULL);
	for (i = 0; i < NTHREADS; i++) {
		ck_assert_int_eq(c[i].nr, ROUNDS);
		for (k = 0; k < c[i].nr; k++) {
			for (blk64_t b = c[i].got[k]; b < c[i].got[k] + c[i].n[k]; b++) {
				ck_assert_msg(owner[b] == 0, "block %llu claimed twice",
					      (unsigned long long)b);
				owner[b] = (unsigned char)(i + 1);
				ck_assert(in_use(w, b));
			}
			total += c[i].n[k];
		}
	}
	ck_assert_uint_eq(atomic_load(&w->stats.nr_blocks_claimed), total);
	/* every claim is recorded, and each releases back to free */
	ext4_lock(w);
	for (i = 0; i < NTHREADS; i++)
		for (k = 0; k < c[i].nr; k++)
			ext4_claim_release(w, c[i].got[k], c[i].n[k]);
	ck_assert_uint_eq(w->nr_claims, 0);
	ext4_unlock(w);
	for (blk64_t b = 0; b < NBLOCKS; b++)
		if (owner[b] && owner[b] != 0xff)
			ck_assert(!in_use(w, b));
	free(owner);
	free(c);
	t_fs_free(w);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("claims");

	t_tcase(s, "claims", claim_takes_a_run_and_changes_no_count,
		busy_blocks_taken_one_at_a_time, use_counts_release_frees,
		claims_stop_at_used_blocks_and_wrap, claims_are_free_in_the_bitmaps_written,
		inode_claims, concurrent_claims_never_share_a_block,
		concurrent_inode_claims_never_share_an_inode);
	return t_run(s);
}
