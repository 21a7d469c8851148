// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Block allocation for ext4/: the reservations of delayed allocation and
 * the room checks (as the kernel's ext4_has_free_clusters), allocation of
 * block ranges, block and inode claims taken under fs_lock shared, and
 * punching. Apart from super.c (mount) and bitmap.c (how the bitmaps
 * reach the device): this is what the write path and writeback call.
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


/*
 * May @nr more blocks be taken, @dirty being promised to delayed allocation
 * already? The kernel's ext4_has_free_clusters: every allocation leaves
 * the promised blocks, the metadata reserve (@headroom: s_resv_clusters,
 * which also covers the extent blocks the promised data will need at
 * writeback) and the root reserve (@root) free; WBFS_ROOM_PRIV (root, the
 * reserve's owner) may use the root reserve, WBFS_ROOM_NOFAIL (a change
 * that must not fail on a full filesystem: EXT4_MB_USE_RESERVED) also half
 * the metadata reserve. The other half is the flusher's alone.
 */
bool ext4_room_ok(int64_t free_blocks, int64_t dirty, int64_t headroom, int64_t root,
		  long nr, unsigned flags)
{
	int64_t avail = free_blocks - dirty - nr;

	if (avail >= headroom + root)
		return true;
	if ((flags & (WBFS_ROOM_PRIV | WBFS_ROOM_NOFAIL)) && avail >= headroom)
		return true;
	return (flags & WBFS_ROOM_NOFAIL) && avail >= headroom / 2;
}

/*
 * Reserve @nr blocks for delayed allocation. Metadata headroom is never
 * handed out; unprivileged writers also leave the root reserve alone.
 * Returns 0 or -ENOSPC.
 */
int ext4_reserve(struct wbfs *w, long nr, bool privileged)
{
	int ret = 0;

	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	if (!ext4_room_ok(w->free_blocks, w->reserved, w->headroom, w->root_reserved, nr,
			  privileged ? WBFS_ROOM_PRIV : 0))
		ret = -ENOSPC;
	else
		w->reserved += nr;
	ls_mutex_unlock(&w->resv_lock);
	return ret;
}

void ext4_unreserve(struct wbfs *w, long nr)
{
	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	w->reserved -= nr;
	ls_mutex_unlock(&w->resv_lock);
}

/* Extents an extent tree block holds (a block of a page, as read-write needs: 12-byte header). */
#define EXTENTS_PER_BLOCK ((PAGE_SIZE - 12) / 12)
/* Extents the inode itself holds. */
#define EXTENTS_IN_INODE 4

/*
 * Tree blocks (leaves and index blocks) that @extents extents need at
 * most beyond the inode: ext4_ext_calc_metadata_amount's worst case.
 */
long ext4_extent_blocks(long extents)
{
	long blocks = 0;

	while (extents > EXTENTS_IN_INODE) {
		extents = (extents + EXTENTS_PER_BLOCK - 1) / EXTENTS_PER_BLOCK;
		blocks += extents;
	}
	return blocks;
}

/*
 * Reserve the block of a new delalloc page of @wi, and the extent tree
 * blocks writeback will need for it: each run of delalloc pages may
 * become an extent of its own (@new_run: the page before is not
 * delalloc), added to the @base_extents the file has, and past four
 * extents the tree needs blocks. Counting these
 * with the data, against the same free space, keeps a filesystem filled
 * with fragmented files from leaving writeback without the extent blocks
 * it must allocate. The tree blocks are given back when the inode has no
 * delalloc page left. Returns 0 or -ENOSPC.
 */
int ext4_reserve_page(struct wbfs *w, struct winode *wi, bool new_run, long base_extents,
		      bool privileged)
{
	long runs, meta;
	int ret = 0;

	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	runs = wi->da_runs + (new_run || !wi->da_runs);
	meta = ext4_extent_blocks(base_extents + runs) - ext4_extent_blocks(base_extents) -
	       wi->meta_resv;
	if (meta < 0)
		meta = 0;
	if (!ext4_room_ok(w->free_blocks, w->reserved, w->headroom, w->root_reserved, 1 + meta,
			  privileged ? WBFS_ROOM_PRIV : 0)) {
		ret = -ENOSPC;
	} else {
		w->reserved += 1 + meta;
		wi->meta_resv += meta;
		wi->da_runs = runs;
		wi->nr_delalloc++;
	}
	ls_mutex_unlock(&w->resv_lock);
	return ret;
}

/*
 * @nr delalloc pages of @wi were allocated or dropped: give back their
 * blocks, and the extent tree blocks once no delalloc page is left.
 */
void ext4_unreserve_pages(struct wbfs *w, struct winode *wi, long nr)
{
	if (nr <= 0)
		return;
	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	w->reserved -= nr;
	wi->nr_delalloc -= nr;
	if (wi->nr_delalloc <= 0) {
		w->reserved -= wi->meta_resv;
		wi->meta_resv = 0;
		wi->da_runs = 0;
	}
	ls_mutex_unlock(&w->resv_lock);
}

/*
 * Room for @nr blocks of metadata (a new directory's block, a slow
 * symlink, a directory's growth, an xattr block) taken by a user
 * (@flags: WBFS_ROOM_PRIV for root) or by a change that must not fail
 * (WBFS_ROOM_NOFAIL)? Counted like data against the blocks promised to
 * writers, so once writers are refused, metadata sees the same full
 * filesystem, and the flusher can always allocate what was promised.
 * Returns 0 or -ENOSPC.
 */
int ext4_claim_room(struct wbfs *w, long nr, unsigned flags)
{
	bool ok;

	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	ok = ext4_room_ok(w->free_blocks, w->reserved, w->headroom, w->root_reserved, nr, flags);
	ls_mutex_unlock(&w->resv_lock);
	return ok ? 0 : -ENOSPC;
}

/*
 * Room for a metadata change that may need about @nr blocks but allocates
 * none in the usual case (an entry in a directory block with space, a
 * small xattr in the inode): the nofail rule, so such changes work as long
 * as the blocks promised to writers and half the headroom stay untouched.
 */
int ext4_meta_room(struct wbfs *w, long nr)
{
	return ext4_claim_room(w, nr, WBFS_ROOM_NOFAIL);
}

/*
 * ext2fs_new_range for file data (writeback, fallocate): never a busy
 * block while there is a journal (ext4_busy_new_range). A failure that a
 * commit would cure is noted for ext4_should_retry_alloc. Context: fs_lock.
 */
errcode_t ext4_new_range(struct wbfs *w, blk64_t goal, blk64_t len, blk64_t *got,
			 blk64_t *glen)
{
	errcode_t err = ext2fs_new_range(w->fs, 0, goal, len, NULL, got, glen);

	if (err == EXT2_ET_BLOCK_ALLOC_FAIL && ext4_alloc_should_commit(w)) {
		atomic_store(&w->alloc_busy_refused, true);
		atomic_fetch_add(&w->stats.nr_alloc_busy_refused, 1);
	}
	return err;
}

/*
 * Concurrent block claims (seed 004's per-group allocation). Writeback
 * finds its data blocks under fs_lock shared and a lock per group, so
 * that flushers and fsyncs claiming in different groups run at once,
 * and only the extent-tree change that follows needs fs_lock exclusive.
 * Nothing else changes under fs_lock shared: every other change to the
 * bitmaps, and every group descriptor and superblock count, holds it
 * exclusive, so a claim needs its group's lock against other claims
 * only. A claim marks the blocks in the in-memory bitmap (allocators
 * skip them) and no count: the descriptors and the superblock are
 * changed when the blocks are mapped (ext4_claim_use), in the same
 * exclusive section as the extent that points to them, so a commit
 * never holds one without the other. Until then every bitmap written
 * shows them free (ext4_bitmap_written), and a crash loses nothing.
 * The search and the marks use libext2fs's find and single-bit calls,
 * which touch the group's own bytes of the bitmap and nothing shared
 * (its range calls count statistics in the bitmap).
 */

static pthread_mutex_t *group_lock(struct wbfs *w, dgrp_t g)
{
	return &w->group_lock[g % WBFS_GROUP_LOCKS];
}

/* Note claim [blk, blk+n). Context: claim_lock. */
static int claim_add_locked(struct wbfs *w, blk64_t blk, blk64_t n)
{
	lock_assert_held(&w->claim_lock);

	if (w->nr_claims == w->cap_claims) {
		size_t cap = w->cap_claims ? w->cap_claims * 2 : 16;
		struct bm_run *v = realloc(w->claims, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		w->claims = v;
		w->cap_claims = cap;
	}
	w->claims[w->nr_claims++] = (struct bm_run){ blk, n };
	return 0;
}

/*
 * Take [blk, blk+n), which lies inside one claim, out of it. Claims are
 * used from their start on (map_alloc_run takes its blocks in order), so
 * a claim only ever shrinks from its head: whatever lies before @blk in
 * it goes back to free first (not expected, and never split off as a
 * claim of its own, which would need room here). Returns false when no
 * claim holds it all. Context: fs_lock exclusive.
 */
static bool claim_del(struct wbfs *w, blk64_t blk, blk64_t n)
{
	bool found = false;
	size_t i;

	ls_mutex_lock(&w->claim_lock, &lc_claim_lock);
	for (i = 0; i < w->nr_claims; i++) {
		struct bm_run *r = &w->claims[i];
		blk64_t end = r->blk + r->n;

		if (blk < r->blk || blk + n > end)
			continue;
		found = true;
		if (blk > r->blk)
			ext2fs_unmark_block_bitmap_range2(w->fs->block_map, r->blk,
							  (unsigned)(blk - r->blk));
		if (blk + n < end) {
			r->blk = blk + n;
			r->n = end - r->blk;
		} else {
			*r = w->claims[--w->nr_claims];
		}
		break;
	}
	ls_mutex_unlock(&w->claim_lock);
	return found;
}

/*
 * Claim the first free run of up to @len blocks in [@gs, @ge] of group
 * @g, under the group's lock: 0 with *@got, *@glen; 1 when the range has
 * no free block; -ENOSPC when the claim cannot be noted. Context:
 * fs_lock shared.
 */
static int claim_in_group(struct wbfs *w, dgrp_t g, blk64_t gs, blk64_t ge, blk64_t len,
			  blk64_t *got, blk64_t *glen)
{
	ext2_filsys fs = w->fs;
	pthread_mutex_t *gl = group_lock(w, g);
	blk64_t b, e, s, x;
	int ret;

	ls_mutex_lock(gl, &lc_group_lock);
	if (ext2fs_find_first_zero_block_bitmap2(fs->block_map, gs, ge, &b)) {
		ls_mutex_unlock(gl);
		return 1;
	}
	e = len - 1 < ge - b ? b + len - 1 : ge;
	if (!ext2fs_find_first_set_block_bitmap2(fs->block_map, b, e, &s))
		e = s - 1;
	ls_mutex_lock(&w->claim_lock, &lc_claim_lock);
	ret = claim_add_locked(w, b, e - b + 1);
	ls_mutex_unlock(&w->claim_lock);
	if (!ret) {
		for (x = b; x <= e; x++)
			ext2fs_mark_block_bitmap2(fs->block_map, x);
	}
	ls_mutex_unlock(gl);
	if (ret)
		return -ENOSPC;
	atomic_fetch_add(&w->stats.nr_blocks_claimed, (long)(e - b + 1));
	*got = b;
	*glen = e - b + 1;
	return 0;
}

/*
 * Find and take up to @len free blocks, from @goal on (wrapping round
 * the groups), in the first group that has any: *@got, *@glen. Returns
 * 0, or -ENOSPC (nothing found: the caller allocates under fs_lock
 * exclusive, where busy blocks can be released). Context: fs_lock shared.
 */
int ext4_claim_blocks(struct wbfs *w, blk64_t goal, blk64_t len, blk64_t *got, blk64_t *glen)
{
	ext2_filsys fs = w->fs;
	dgrp_t ng, g0, g, i;
	blk64_t first, last;
	int ret;

	if (!fs || w->ro || !len || fs->cluster_ratio_bits)
		return -ENOSPC;
	ng = fs->group_desc_count;
	first = fs->super->s_first_data_block;
	last = ext2fs_blocks_count(fs->super) - 1;
	if (goal < first || goal > last)
		goal = first;
	g0 = ext2fs_group_of_blk2(fs, goal);
	for (i = 0; i <= ng; i++) {
		blk64_t gs, ge;

		g = (dgrp_t)(((uint64_t)g0 + i) % ng);
		gs = i == 0 ? goal : ext2fs_group_first_block2(fs, g);
		ge = i == ng ? goal - 1 : ext2fs_group_last_block2(fs, g);
		if (gs < first)
			gs = first;
		/* counts change only under fs_lock exclusive: stable here */
		if (gs > ge || !ext2fs_bg_free_blocks_count(fs, g) || ext4_group_bad(w, g))
			continue;
		ret = claim_in_group(w, g, gs, ge, len, got, glen);
		if (ret <= 0)
			return ret;
	}
	return -ENOSPC;
}

/* Claimed blocks [blk, blk+n) go into a file: now allocated. Context: fs_lock. */
void ext4_claim_use(struct wbfs *w, blk64_t blk, blk64_t n)
{
	claim_del(w, blk, n);
	ext4_block_alloc_stats_range(w, blk, n, +1);
}

/* Claimed blocks [blk, blk+n) were not needed: free again. Context: fs_lock. */
void ext4_claim_release(struct wbfs *w, blk64_t blk, blk64_t n)
{
	if (claim_del(w, blk, n))
		ext2fs_unmark_block_bitmap_range2(w->fs->block_map, blk, (unsigned)n);
}

/*
 * Claim a free inode for a create in @parent: from @parent's group on,
 * as ext2fs_new_inode searches, under fs_lock shared and the group's
 * lock. A group whose inodes are not initialised stops the search (its
 * first use changes the group descriptor: ext2fs_new_inode does that
 * under fs_lock exclusive). Only when fs_lock is free of writers: the
 * search is short, and a create that queued for the lock twice (shared,
 * then exclusive) would wait more than the claim saves. Returns the
 * inode, or 0.
 */
ext2_ino_t ext4_claim_inode(struct wbfs *w, ext2_ino_t parent)
{
	ext2_filsys fs;
	ext2_ino_t ipg, start, ino = 0, got;
	dgrp_t ng, g0, g, i;

	if (!ext4_trylock_shared(w))
		return 0;
	fs = w->fs;
	if (!fs || w->ro || !fs->inode_map)
		goto out;
	ipg = fs->super->s_inodes_per_group;
	ng = fs->group_desc_count;
	g0 = parent ? (parent - 1) / ipg : 0;
	if (g0 >= ng)
		g0 = 0;
	for (i = 0; i < ng && !ino; i++) {
		pthread_mutex_t *gl;

		g = (dgrp_t)(((uint64_t)g0 + i) % ng);
		if (ext2fs_has_group_desc_csum(fs) &&
		    ext2fs_bg_flags_test(fs, g, EXT2_BG_INODE_UNINIT))
			break;
		/* counts change only under fs_lock exclusive: stable here */
		if (!ext2fs_bg_free_inodes_count(fs, g))
			continue;
		start = g * ipg + 1;
		if (start < EXT2_FIRST_INODE(fs->super))
			start = EXT2_FIRST_INODE(fs->super);
		gl = group_lock(w, g);
		ls_mutex_lock(gl, &lc_group_lock);
		if (!ext2fs_find_first_zero_inode_bitmap2(fs->inode_map, start, (g + 1) * ipg, &got)) {
			ls_mutex_lock(&w->claim_lock, &lc_claim_lock);
			if (w->nr_iclaims < WBFS_ICLAIMS) {
				w->iclaims[w->nr_iclaims++] = got;
				ext2fs_mark_inode_bitmap2(fs->inode_map, got);
				ino = got;
			}
			ls_mutex_unlock(&w->claim_lock);
		}
		ls_mutex_unlock(gl);
	}
	if (ino)
		atomic_fetch_add(&w->stats.nr_inodes_claimed, 1);
out:
	ext4_unlock_shared(w);
	return ino;
}

/*
 * Inode @ino, claimed, is free again in the bitmap and known to the
 * caller only (the create that claimed it uses it, or drops it).
 * Returns false if it was not claimed. Context: fs_lock.
 */
bool ext4_claim_inode_take(struct wbfs *w, ext2_ino_t ino)
{
	bool found = false;
	unsigned i;

	ls_mutex_lock(&w->claim_lock, &lc_claim_lock);
	for (i = 0; i < w->nr_iclaims; i++) {
		if (w->iclaims[i] == ino) {
			w->iclaims[i] = w->iclaims[--w->nr_iclaims];
			found = true;
			break;
		}
	}
	ls_mutex_unlock(&w->claim_lock);
	if (found)
		ext2fs_unmark_inode_bitmap2(w->fs->inode_map, ino);
	return found;
}

/*
 * ext2fs_punch of logical blocks [start, end] of @ino. When the file maps
 * the filesystem's last block there (it did before mount: the block is
 * not hidden) and libext2fs cannot free it, that block is unmapped and
 * freed here first; it is the physical end of its extent, so the extent
 * only shrinks and no extent block is needed. Context: fs_lock.
 */
errcode_t ext4_punch(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in,
		     blk64_t start, blk64_t end)
{
	ext2_filsys fs = w->fs;
	blk64_t last = ext2fs_blocks_count(fs->super) - 1;
	ext2_extent_handle_t h;
	struct ext2fs_extent e;
	errcode_t err;
	int op = EXT2_EXTENT_ROOT;
	bool found = false;

	if (!(in->i_flags & EXT4_EXTENTS_FL) || w->hidden_last == last ||
	    ext2fs_get_library_version(NULL, NULL) >= 14704 ||
	    !ext2fs_test_block_bitmap2(fs->block_map, last))
		goto punch;
	err = ext2fs_extent_open2(fs, ino, (struct ext2_inode *)in, &h);
	if (err)
		return err;
	while (!ext2fs_extent_get(h, op, &e)) {
		op = EXT2_EXTENT_NEXT_LEAF;
		if ((e.e_flags & EXT2_EXTENT_FLAGS_LEAF) && e.e_pblk <= last &&
		    last - e.e_pblk < e.e_len) {
			found = true;
			break;
		}
	}
	if (found && e.e_lblk + (last - e.e_pblk) >= start &&
	    e.e_lblk + (last - e.e_pblk) <= end) {
		err = ext2fs_extent_set_bmap(h, e.e_lblk + (last - e.e_pblk), 0, 0);
		if (err) {
			ext2fs_extent_free(h);
			return err;
		}
		ext2fs_block_alloc_stats2(fs, last, -1);
		ext2fs_iblk_sub_blocks(fs, (struct ext2_inode *)in, 1);
	}
	ext2fs_extent_free(h);
punch:
	return ext2fs_punch(fs, ino, (struct ext2_inode *)in, NULL, start, end);
}
