// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The block and inode bitmaps: corrupt groups fenced off, allocation
 * statistics, blocks freed but busy until their transaction commits, the
 * group locations of the bitmap blocks, and the bitmap writes themselves
 * (only the groups that changed, busy and hidden blocks masked). Apart
 * from alloc.c: this is how allocations reach the device, not who takes
 * which block.
 */

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wbcfs/jbd2.h"
#include "ext4_i.h"


/* ---- corrupt metadata ------------------------------------------------- */

/*
 * Checked once at mount, as the kernel's ext4 checks them: the group
 * descriptors (bitmaps and inode tables inside the filesystem, not on
 * top of each other), the root inode, the journal inode, and each group's
 * block bitmap. A group whose bitmap fails (its own metadata not marked in
 * use, or a free count other than the descriptor's) is refused, not the
 * filesystem: nothing is allocated from it (every block stays marked in
 * use in memory, blocks freed there stay in use), its bitmap is never
 * written back, and the filesystem is marked with errors for e2fsck.
 */

bool ext4_group_bad(struct wbfs *w, dgrp_t g)
{
	unsigned i;

	for (i = 0; i < w->nr_bad_groups; i++)
		if (w->bad_groups[i] == g)
			return true;
	return false;
}

/* Is block @blk a refused group's block or inode bitmap? fs_lock held. */
bool ext4_is_bad_bitmap(struct wbfs *w, uint64_t blk, uint64_t count)
{
	unsigned i;

	if (!w->fs)
		return false;
	for (i = 0; i < w->nr_bad_groups; i++) {
		blk64_t b = ext2fs_block_bitmap_loc(w->fs, w->bad_groups[i]);

		if (b >= blk && b - blk < count)
			return true;
	}
	for (i = 0; i < w->nr_bad_igroups; i++) {
		blk64_t b = ext2fs_inode_bitmap_loc(w->fs, w->bad_igroups[i]);

		if (b >= blk && b - blk < count)
			return true;
	}
	return false;
}

/*
 * Which groups' bitmaps changed in memory since they were last written:
 * a commit writes those alone, not every group's (at a commit per fsync,
 * a scan of every group under fs_lock made dbench -F on a 256 GiB
 * filesystem a quarter as fast as on an 8 GiB one). Every change goes
 * through here: libext2fs's own allocations and frees by its
 * alloc-stats callbacks (ext4_bad_group_keep_range), wbcfs's direct marks and
 * its inode allocations (ext4_inode_alloc_stats, and after ext2fs_mkdir
 * and ext2fs_symlink) by calls. A scan of every group at mount, and at
 * each syncfs counting what this missed (nr_bitmap_untracked), keeps
 * the tracking honest. Context: fs_lock.
 */
void ext4_bb_changed(struct wbfs *w, blk64_t blk, blk64_t n)
{
	ext2_filsys fs = w->fs;
	dgrp_t g, last;

	if (!w->bm_changed || !n || blk >= ext2fs_blocks_count(fs->super))
		return;
	if (blk + n > ext2fs_blocks_count(fs->super))
		n = ext2fs_blocks_count(fs->super) - blk;
	last = ext2fs_group_of_blk2(fs, blk + n - 1);
	for (g = ext2fs_group_of_blk2(fs, blk); g <= last; g++)
		w->bm_changed[g] |= BM_BLOCK;
}

/*
 * The next bitmap write looks at every group and counts the changes the
 * notes missed (syncfs, unmount). Context: fs_lock not held.
 */
void ext4_bitmaps_check_next(struct wbfs *w)
{
	ext4_lock(w);
	if (w->fs && !w->ro)
		w->bm_scan = BM_SCAN_CHECK;
	ext4_unlock(w);
}

void ext4_ib_changed(struct wbfs *w, ext2_ino_t ino)
{
	ext2_filsys fs = w->fs;

	if (w->bm_changed && ino && ino <= fs->super->s_inodes_count)
		w->bm_changed[ext2fs_group_of_ino(fs, ino)] |= BM_INODE;
}

/*
 * ext2fs_block_alloc_stats_range, noted for the next bitmap write.
 * libext2fs 1.47.0 calls the range callback with the range already
 * consumed (its end, and 0 blocks), so the callback cannot say which
 * groups changed: wbcfs's own calls note them here, and a call from
 * inside libext2fs (none is known) makes the next write scan them all.
 * Context: fs_lock.
 */
void ext4_block_alloc_stats_range(struct wbfs *w, blk64_t blk, blk64_t n, int inuse)
{
	w->bm_in_range = true;
	ext2fs_block_alloc_stats_range(w->fs, blk, (blk_t)n, inuse);
	w->bm_in_range = false;
	ext4_bb_changed(w, blk, n);
}

/* ext2fs_inode_alloc_stats2, noted for the next bitmap write. Context: fs_lock. */
void ext4_inode_alloc_stats(struct wbfs *w, ext2_ino_t ino, int inuse, int isdir)
{
	ext2fs_inode_alloc_stats2(w->fs, ino, inuse, isdir);
	ext4_ib_changed(w, ino);
}

/*
 * Blocks freed since the last sync are busy, as the kernel's ext4 keeps
 * freed blocks from reuse until the transaction that freed them commits:
 * new data written into them before the freeing is on disk would, after
 * a crash, show in the file that owned them (or, with blocks shared by
 * two files, overwrite the other file at once). A busy block is free on
 * disk (group and superblock counts, and the bitmap as written:
 * ext4_bitmap_written) but marked in use in the in-memory bitmap the
 * allocators search. The commit of the transaction that freed them (or
 * without a journal, the next sync_fs) makes them free in memory too; an
 * allocation that finds no other room waits for that commit
 * (busy_release_now).
 */
static void busy_add(struct wbfs *w, blk64_t blk, blk_t n)
{
	ext2fs_mark_block_bitmap_range2(w->fs->block_map, blk, n);
	ext2fs_mark_block_bitmap_range2(w->busy, blk, n);
	ext4_bm_runs_add(&w->busy_runs, blk, n);
	w->nr_busy += n;
}

#define BM_RUNS_MAX 65536	/* runs kept before a drain scans it all */

/* Note that bits [blk, blk+n) of the bitmap @r describes were set. */
void ext4_bm_runs_add(struct bm_runs *r, blk64_t blk, blk64_t n)
{
	if (r->all || !n)
		return;
	if (r->nr && r->v[r->nr - 1].blk + r->v[r->nr - 1].n == blk) {
		r->v[r->nr - 1].n += n;		/* frees often come in order */
		return;
	}
	if (r->nr == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		struct bm_run *v = cap <= BM_RUNS_MAX ? realloc(r->v, cap * sizeof(*v)) : NULL;

		if (!v) {
			r->all = true;
			return;
		}
		r->v = v;
		r->cap = cap;
	}
	r->v[r->nr++] = (struct bm_run){ blk, n };
}

void ext4_bm_runs_free(struct bm_runs *r)
{
	free(r->v);
	*r = (struct bm_runs){ 0 };
}

/* Call @fn on each run of set bits of @bm in [start, end], then clear them. */
static void bitmap_drain_range(struct wbfs *w, ext2fs_block_bitmap bm, blk64_t start,
			       blk64_t end, void (*fn)(struct wbfs *w, blk64_t blk, blk64_t n))
{
	blk64_t from = start, b, e;

	while (from <= end && !ext2fs_find_first_set_block_bitmap2(bm, from, end, &b)) {
		if (ext2fs_find_first_zero_block_bitmap2(bm, b, end, &e))
			e = end + 1;
		/* busy blocks are free in the bitmap as written: it changes */
		ext4_bb_changed(w, b, e - b);
		fn(w, b, e - b);
		from = e;
	}
	ext2fs_unmark_block_bitmap_range2(bm, start, (unsigned)(end - start + 1));
}

/*
 * Call @fn on each run of set bits of @bm, then clear it: the runs @r
 * noted (a run noted twice finds its bits cleared the second time), or
 * the whole bitmap when @r could not keep them all. Context: fs_lock.
 */
void ext4_bitmap_drain(struct wbfs *w, ext2fs_block_bitmap bm, struct bm_runs *r,
		       void (*fn)(struct wbfs *w, blk64_t blk, blk64_t n))
{
	blk64_t first = w->fs->super->s_first_data_block;
	blk64_t last = ext2fs_blocks_count(w->fs->super) - 1;
	size_t i;

	if (r->all) {
		bitmap_drain_range(w, bm, first, last, fn);
		ext2fs_clear_block_bitmap(bm);
	} else {
		for (i = 0; i < r->nr; i++) {
			blk64_t s = r->v[i].blk, e = s + r->v[i].n - 1;

			if (s < first)
				s = first;
			if (e > last)
				e = last;
			if (s <= e)
				bitmap_drain_range(w, bm, s, e, fn);
		}
	}
	r->nr = 0;
	r->all = false;
}

/* Blocks [blk, blk+n) may be allocated again (a drain's @fn: noted there). */
void ext4_busy_unmark(struct wbfs *w, blk64_t blk, blk64_t n)
{
	ext2fs_unmark_block_bitmap_range2(w->fs->block_map, blk, (unsigned)n);
}

/* Busy blocks become free for allocation. Context: fs_lock. */
void ext4_release_busy_locked(struct wbfs *w)
{
	lock_assert_held(&w->fs_lock);

	if (!w->fs)
		return;
	if (w->nr_busy)
		ext4_bitmap_drain(w, w->busy, &w->busy_runs, ext4_busy_unmark);
	w->nr_busy = 0;
	ext4_journal_release_busy(w);
}

/*
 * Before the filesystem closes: the bitmap it writes shows busy blocks
 * free. Context: fs_lock (alone, at mount's failure and at unmount).
 */
void ext4_busy_free(struct wbfs *w)
{
	ext4_release_busy_locked(w);
	if (w->busy)
		ext2fs_free_block_bitmap(w->busy);
	w->busy = NULL;
	ext4_bm_runs_free(&w->busy_runs);
	free(w->claims);
	w->claims = NULL;
	w->nr_claims = w->cap_claims = 0;
}

/*
 * May busy blocks be handed out at once when nothing else is free? Only
 * without a journal: there is no transaction to wait for, as the kernel's
 * ext4 without a journal frees at once. With one, a block whose free has
 * not committed holds, after a crash, the data of the file that owned it
 * again: the allocation fails, and the caller commits and tries again
 * (ext4_commit_for_alloc), as ext4_should_retry_alloc does.
 */
static bool busy_release_now(struct wbfs *w)
{
	return !w->journal;
}

/* Blocks whose free has not committed (none without a journal). Context: fs_lock. */
bool ext4_alloc_should_commit(struct wbfs *w)
{
	return w->journal && ext4_journal_busy_blocks(w);
}

bool ext4_bitmap_masked(struct wbfs *w)
{
	return w->hidden_last || w->nr_busy || w->nr_claims || w->nr_iclaims;
}

/* Claimed inodes are free in group @g's inode bitmap @d as written. */
static void ibitmap_written(struct wbfs *w, dgrp_t g, unsigned char *d)
{
	ext2_filsys fs = w->fs;
	ext2_ino_t ipg = fs->super->s_inodes_per_group;
	bool hit = false;
	unsigned i;

	/* no claim changes under fs_lock exclusive */
	for (i = 0; i < w->nr_iclaims; i++) {
		ext2_ino_t k;

		if ((w->iclaims[i] - 1) / ipg != g)
			continue;
		k = w->iclaims[i] - 1 - g * ipg;
		d[k / 8] &= (unsigned char)~(1U << (k % 8));
		hit = true;
	}
	if (!hit)
		return;
	ext2fs_inode_bitmap_csum_set(fs, g, (char *)d, (int)((ipg + 7) / 8));
	ext2fs_group_desc_csum_set(fs, g);
}

/*
 * libext2fs's own single-block allocations: extent, directory, xattr and
 * symlink blocks, all of them metadata that goes through the journal.
 * With no other room, one busy block is taken: its new contents join the
 * running transaction and reach home only after it commits, and with it
 * the free (or after the committing one's, which is older), so a crash
 * before leaves the old owner's block untouched. This cannot wait for a
 * commit (fs_lock is held). Without a journal, busy blocks are released.
 */
errcode_t ext4_busy_alloc_block(ext2_filsys fs, blk64_t goal, blk64_t *ret)
{
	struct wbfs *w = fs->priv_data;
	errcode_t err = ext2fs_new_block2(fs, goal, fs->block_map, ret);

	if (err != EXT2_ET_BLOCK_ALLOC_FAIL || !w)
		return err;
	if (busy_release_now(w)) {
		if (!w->nr_busy)
			return err;
		ext4_release_busy_locked(w);
		return ext2fs_new_block2(fs, goal, fs->block_map, ret);
	}
	return ext4_journal_take_busy(w, goal, ret);
}

/*
 * libext2fs's range allocations (ext4_new_range's, for file data): busy
 * blocks only without a journal. Data written into a block before its
 * free commits would show in the file that owned it after a crash.
 */
errcode_t ext4_busy_new_range(ext2_filsys fs, int flags, blk64_t goal, blk64_t len,
			      blk64_t *pblk, blk64_t *plen)
{
	struct wbfs *w = fs->priv_data;
	errcode_t err = ext2fs_new_range(fs, flags, goal, len, fs->block_map, pblk, plen);

	if (err == EXT2_ET_BLOCK_ALLOC_FAIL && w && w->nr_busy && busy_release_now(w)) {
		ext4_release_busy_locked(w);
		err = ext2fs_new_range(fs, flags, goal, len, fs->block_map, pblk, plen);
	}
	return err;
}

/* A group's block bitmap location, for ext4_bitmap_written. */
struct bb_loc {
	blk64_t blk;
	dgrp_t g;
};

static int bb_loc_cmp(const void *a, const void *b)
{
	const struct bb_loc *x = a, *y = b;

	return x->blk < y->blk ? -1 : x->blk > y->blk;
}

/*
 * Each group's block bitmap or inode table location (@loc), sorted: for
 * the iomgr, which group's bitmap a write is and which inodes an inode
 * table block holds.
 */
static struct bb_loc *locs_build(ext2_filsys fs, blk64_t (*loc)(ext2_filsys, dgrp_t))
{
	struct bb_loc *l = calloc(fs->group_desc_count, sizeof(*l));
	dgrp_t g;

	if (!l)
		return NULL;
	for (g = 0; g < fs->group_desc_count; g++)
		l[g] = (struct bb_loc){ loc(fs, g), g };
	qsort(l, fs->group_desc_count, sizeof(*l), bb_loc_cmp);
	return l;
}

/* The last of the @n sorted @locs at or before @blk, or NULL. */
static const struct bb_loc *locs_floor(const struct bb_loc *locs, size_t n, blk64_t blk)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (locs[mid].blk <= blk)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? &locs[lo - 1] : NULL;
}

bool ext4_itable_inodes(struct wbfs *w, uint64_t blk, ext2_ino_t *first, unsigned *n)
{
	ext2_filsys fs = w->fs;
	const struct bb_loc *l;
	unsigned per;

	if (!fs || !w->it_locs)
		return false;
	l = locs_floor(w->it_locs, fs->group_desc_count, blk);
	if (!l || blk - l->blk >= fs->inode_blocks_per_group)
		return false;
	per = fs->blocksize / EXT2_INODE_SIZE(fs->super);
	*first = l->g * fs->super->s_inodes_per_group + (ext2_ino_t)(blk - l->blk) * per + 1;
	*n = per;
	return true;
}

/* Where the bitmaps and inode tables are, for the iomgr. Returns 0 or -ENOMEM. */
int ext4_locs_build(struct wbfs *w)
{
	w->bb_locs = locs_build(w->fs, ext2fs_block_bitmap_loc);
	w->it_locs = locs_build(w->fs, ext2fs_inode_table_loc);
	w->ib_locs = locs_build(w->fs, ext2fs_inode_bitmap_loc);
	return w->bb_locs && w->it_locs && w->ib_locs ? 0 : -ENOMEM;
}

/* The group whose bitmap (as @locs lists them) is at block @blk, if any. */
static bool loc_group(struct wbfs *w, const struct bb_loc *locs, blk64_t blk, dgrp_t *g)
{
	const struct bb_loc *l = locs ? locs_floor(locs, w->fs->group_desc_count, blk) : NULL;

	if (!l || l->blk != blk)
		return false;
	*g = l->g;
	return true;
}

static bool bb_group(struct wbfs *w, blk64_t blk, dgrp_t *g)
{
	return loc_group(w, w->bb_locs, blk, g);
}

/*
 * libext2fs freed [blk, blk+num): what lies in a refused group stays in
 * use, and its group and the superblock keep their counts (the kernel
 * does not free into a group whose bitmap it refused either).
 */
static void busy_add(struct wbfs *w, blk64_t blk, blk_t n);

void ext4_bad_group_keep_range(ext2_filsys fs, blk64_t blk, blk_t num, int inuse)
{
	struct wbfs *w = fs->priv_data;

	if (!w)
		return;
	/* busy_add below needs no note of its own: this covers the range */
	if (!num && !w->bm_in_range && w->bm_scan == BM_SCAN_NONE)
		w->bm_scan = BM_SCAN_QUIET;	/* which groups: unknown */
	ext4_bb_changed(w, blk, num);
	if (inuse >= 0)
		return;
	ext4_trim_note_freed(w, blk, num);
	while (num) {
		dgrp_t g = ext2fs_group_of_blk2(fs, blk);
		blk64_t end = ext2fs_group_last_block2(fs, g) + 1;
		blk_t n = end - blk < num ? (blk_t)(end - blk) : num;

		if (ext4_group_bad(w, g)) {
			ext2fs_mark_block_bitmap_range2(fs->block_map, blk, n);
			ext2fs_bg_free_blocks_count_set(fs, g,
							ext2fs_bg_free_blocks_count(fs, g) - n);
			ext2fs_group_desc_csum_set(fs, g);
			ext2fs_free_blocks_count_add(fs->super, -(blk64_t)n);
		} else {
			busy_add(w, blk, n);
			ext4_journal_note_freed(w, blk, n);
		}
		blk += n;
		num -= n;
	}
}

void ext4_bad_group_keep(ext2_filsys fs, blk64_t blk, int inuse)
{
	ext4_bad_group_keep_range(fs, blk, 1, inuse);
}

/*
 * libext2fs before 1.47.4 refuses to free a run that ends at the last
 * block of the filesystem (EXT2_ET_BAD_BLOCK_NUM), after the extent is
 * already gone from the tree: a punch, truncate or unlink of the file
 * that owns it leaks the block and leaves i_blocks wrong. So that no file
 * gets it, the last block, while free, is marked in use in memory only:
 * the block bitmap written to the device shows it free
 * (ext4_bitmap_written), and statfs counts it free as the kernel's ext4
 * does (the metadata headroom covers the one block reservations may
 * promise too many).
 */
void ext4_hide_last_block(struct wbfs *w)
{
	ext2_filsys fs = w->fs;
	blk64_t last = ext2fs_blocks_count(fs->super) - 1;

	if (w->ro || ext2fs_get_library_version(NULL, NULL) >= 14704 ||
	    ext2fs_test_block_bitmap2(fs->block_map, last))
		return;
	ext2fs_mark_block_bitmap2(fs->block_map, last);
	ext4_bb_changed(w, last, 1);
	w->hidden_last = last;
}

/*
 * The iomgr wrote @data as device block @blk: if it is the bitmap of the
 * hidden last block or of busy blocks, clear their bits. Context: fs_lock.
 */
void ext4_bitmap_written(struct wbfs *w, uint64_t blk, void *data)
{
	ext2_filsys fs = w->fs;
	unsigned char *busy = w->bb_scratch;
	unsigned char *d = data;
	blk64_t first, n, i;
	bool hit = false;
	dgrp_t g;

	if (!fs || !w->bb_locs)
		return;
	if (!bb_group(w, blk, &g)) {
		if (w->nr_iclaims && loc_group(w, w->ib_locs, blk, &g))
			ibitmap_written(w, g, d);
		return;
	}
	first = ext2fs_group_first_block2(fs, g);
	n = ext2fs_group_last_block2(fs, g) - first + 1;
	if (w->hidden_last && ext2fs_group_of_blk2(fs, w->hidden_last) == g) {
		i = w->hidden_last - first;
		d[i / 8] &= (unsigned char)~(1U << (i % 8));
		hit = true;
	}
	if (w->nr_busy && !busy) {
		/* per device: the devices of a domain run here at once */
		busy = w->bb_scratch = malloc(fs->blocksize);
	}
	if (w->nr_busy && busy && (n + 7) / 8 <= fs->blocksize &&
	    !ext2fs_get_block_bitmap_range2(w->busy, first, (unsigned)n, busy)) {
		for (i = 0; i < (n + 7) / 8; i++) {
			if (busy[i]) {
				d[i] &= (unsigned char)~busy[i];
				hit = true;
			}
		}
	}
	/* claims (no claim changes under fs_lock exclusive) */
	for (i = 0; i < w->nr_claims; i++) {
		blk64_t s = w->claims[i].blk, e = s + w->claims[i].n, b;

		if (s < first)
			s = first;
		if (e > first + n)
			e = first + n;
		for (b = s; b < e; b++) {
			d[(b - first) / 8] &= (unsigned char)~(1U << ((b - first) % 8));
			hit = true;
		}
	}
	if (!hit)
		return;
	/* the descriptors are written after the bitmaps: their checksum of
	 * this bitmap must be of what is on the device */
	ext2fs_block_bitmap_csum_set(fs, g, data, EXT2_CLUSTERS_PER_GROUP(fs->super) / 8);
	ext2fs_group_desc_csum_set(fs, g);
}

/*
 * Is @buf, as the iomgr would store it at @blk (busy blocks free:
 * ext4_bitmap_written), what the cache holds there already? A dirty page
 * that is then left alone gets the journal's note_same, as meta_store
 * gives it. Context: fs_lock.
 */
static bool bitmap_unchanged(struct wbfs *w, blk64_t blk, const char *buf, bool *cached)
{
	char scratch[PAGE_SIZE] __attribute__((aligned(64)));
	struct page *p = mapping_get_page(&w->meta_map, blk);
	bool same = false;

	*cached = false;
	if (!p)
		return false;
	if (ext4_bitmap_masked(w)) {
		memcpy(scratch, buf, PAGE_SIZE);
		ext4_bitmap_written(w, blk, scratch);
		buf = scratch;
	}
	lock_page(p);
	*cached = page_test(p, PG_uptodate);
	if (page_test(p, PG_uptodate) && !memcmp(page_address(p), buf, PAGE_SIZE)) {
		same = true;
		if (page_test(p, PG_dirty))
			ext4_journal_note_same(w, p);
	}
	unlock_page(p);
	page_put(p);
	return same;
}

/*
 * One group's bitmap, as libext2fs writes it (its checksum in the group
 * descriptor, then the block), unless the cache has it unchanged.
 * *@changed: the cache held it, different (not: unchanged, or not cached).
 */
static errcode_t bitmap_put(struct wbfs *w, dgrp_t g, blk64_t blk, char *buf, int nbytes,
			    bool inode, bool *changed)
{
	ext2_filsys fs = w->fs;
	errcode_t err;
	bool cached;

	*changed = false;
	if (!blk || blk >= ext2fs_blocks_count(fs->super) || bitmap_unchanged(w, blk, buf, &cached))
		return 0;
	*changed = cached;
	err = inode ? ext2fs_inode_bitmap_csum_set(fs, g, buf, nbytes)
		    : ext2fs_block_bitmap_csum_set(fs, g, buf, nbytes);
	if (err)
		return err;
	ext2fs_group_desc_csum_set(fs, g);
	fs->flags |= EXT2_FLAG_DIRTY;
	err = io_channel_write_blk64(fs->io, blk, 1, buf);
	if (err)
		return inode ? EXT2_ET_INODE_BITMAP_WRITE : EXT2_ET_BLOCK_BITMAP_WRITE;
	return 0;
}

/* The last group's block bitmap: the bits past the filesystem's end are set. */
static void pad_last_group(ext2_filsys fs, char *bb)
{
	unsigned nbits = EXT2FS_NUM_B2C(fs, ((ext2fs_blocks_count(fs->super) -
					      (uint64_t)fs->super->s_first_data_block) %
					     (uint64_t)EXT2_BLOCKS_PER_GROUP(fs->super)));

	if (nbits)
		for (unsigned k = nbits; k < fs->blocksize * 8; k++)
			ext2fs_set_bit(k, bb);
}

/*
 * Group @g's block (@kind BM_BLOCK) or inode bitmap, as libext2fs's
 * write_bitmaps lays it out (clusters per group bits, the last group's
 * tail padded with ones), into @buf (filled with ones beyond it) and out
 * unless the cache has it unchanged. A difference the group's notes
 * (@changed) did not announce counts as untracked in a checking scan.
 * Context: fs_lock.
 */
static errcode_t group_bitmap_put(struct wbfs *w, dgrp_t g, uint8_t kind, uint8_t changed,
				  char *buf)
{
	ext2_filsys fs = w->fs;
	bool block = kind == BM_BLOCK, differs;
	int nbytes = block ? (int)(EXT2_CLUSTERS_PER_GROUP(fs->super) / 8)
			   : (int)((EXT2_INODES_PER_GROUP(fs->super) + 7) / 8);
	errcode_t err;

	if (block) {
		err = ext2fs_get_block_bitmap_range2(fs->block_map,
						     EXT2FS_B2C(fs, fs->super->s_first_data_block) +
						     ((blk64_t)g * nbytes << 3),
						     (size_t)nbytes << 3, buf);
		if (!err && g == fs->group_desc_count - 1)
			pad_last_group(fs, buf);
	} else {
		err = ext2fs_get_inode_bitmap_range2(fs->inode_map,
						     1 + ((ext2_ino_t)g * nbytes << 3),
						     (size_t)nbytes << 3, buf);
	}
	if (!err)
		err = bitmap_put(w, g, block ? ext2fs_block_bitmap_loc(fs, g)
					     : ext2fs_inode_bitmap_loc(fs, g),
				 buf, nbytes, !block, &differs);
	if (!err && differs && !(changed & kind) && w->bm_scan == BM_SCAN_CHECK)
		atomic_fetch_add(&w->stats.nr_bitmap_untracked, 1);
	return err;
}

/*
 * The changed groups' bitmaps (an uninitialised group skipped): those
 * marked in bm_changed, or with bm_scan every group, each still compared
 * with what the cache holds. Context: fs_lock.
 */
static errcode_t write_changed_bitmaps(struct wbfs *w, bool do_block, bool do_inode)
{
	char bb[PAGE_SIZE] __attribute__((aligned(64)));
	char ib[PAGE_SIZE] __attribute__((aligned(64)));
	ext2_filsys fs = w->fs;
	bool csum = ext2fs_has_group_desc_csum(fs);
	bool all = w->bm_scan != BM_SCAN_NONE || !w->bm_changed;
	uint8_t due = (do_block ? BM_BLOCK : 0) | (do_inode ? BM_INODE : 0);
	errcode_t err;
	dgrp_t g;

	memset(bb, 0xff, sizeof(bb));
	memset(ib, 0xff, sizeof(ib));
	for (g = 0; g < fs->group_desc_count; g++) {
		uint8_t changed = w->bm_changed ? w->bm_changed[g] : BM_BLOCK | BM_INODE;
		uint8_t look = all ? due : changed & due;

		if ((look & BM_BLOCK) && !(csum && ext2fs_bg_flags_test(fs, g, EXT2_BG_BLOCK_UNINIT)) &&
		    (err = group_bitmap_put(w, g, BM_BLOCK, changed, bb)))
			return err;
		if ((look & BM_INODE) && !(csum && ext2fs_bg_flags_test(fs, g, EXT2_BG_INODE_UNINIT)) &&
		    (err = group_bitmap_put(w, g, BM_INODE, changed, ib)))
			return err;
		/* written (or the same): only what changes from now on is due */
		if (w->bm_changed)
			w->bm_changed[g] &= (uint8_t)~due;
	}
	if (do_block && do_inode)
		w->bm_scan = BM_SCAN_NONE;
	return 0;
}

errcode_t ext4_flush_locked(struct wbfs *w)
{
	ext2_filsys fs = w->fs;
	bool do_block = fs->block_map && ext2fs_test_bb_dirty(fs);
	bool do_inode = fs->inode_map && ext2fs_test_ib_dirty(fs);

	lock_assert_held(&w->fs_lock);

	if ((do_block || do_inode) && (fs->flags & EXT2_FLAG_RW) && fs->blocksize == PAGE_SIZE) {
		errcode_t err = write_changed_bitmaps(w, do_block, do_inode);

		if (err)
			return err;
		/* written: ext2fs_flush writes the superblock and descriptors */
		fs->flags &= ~(EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY);
	}
	return ext2fs_flush(fs);
}
