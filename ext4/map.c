// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The per-inode extent map cache, the flusher's side of delayed
 * allocation (map_pages: allocate big contiguous ranges, insert them in
 * the extent tree, convert unwritten extents), and failed writes to new
 * blocks, made unwritten again through the same mapping. Apart from
 * inode.c: this is the block side of an inode, not its attributes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "wbcfs/lib/clock.h"
#include "ext4_i.h"

/* ---- extent map cache ---------------------------------------------------- */

static int ec_push(struct winode *wi, uint64_t lblk, uint64_t pblk, uint32_t len, bool uninit)
{
	struct ext_run *r;

	if (wi->nr_runs) {
		r = &wi->runs[wi->nr_runs - 1];
		if (r->lblk + r->len == lblk && r->pblk + r->len == pblk &&
		    r->uninit == uninit && (uint64_t)r->len + len < UINT32_MAX) {
			r->len += len;
			return 0;
		}
	}
	if (wi->nr_runs == wi->cap_runs) {
		size_t cap = wi->cap_runs ? wi->cap_runs * 2 : 8;
		r = realloc(wi->runs, cap * sizeof(*r));
		if (!r)
			return -ENOMEM;
		wi->runs = r;
		wi->cap_runs = cap;
	}
	wi->runs[wi->nr_runs++] = (struct ext_run){ lblk, pblk, len, uninit };
	return 0;
}

/*
 * The next leaf extent of the walk @h, from the root when *@op is
 * EXT2_EXTENT_ROOT (it moves on to EXT2_EXTENT_NEXT). Returns 1 with @e
 * filled, 0 at the end of the tree, or -errno.
 */
int ext4_extent_next_leaf(ext2_extent_handle_t h, int *op, struct ext2fs_extent *e)
{
	for (;;) {
		errcode_t err = ext2fs_extent_get(h, *op, e);

		*op = EXT2_EXTENT_NEXT;
		if (err == EXT2_ET_EXTENT_NO_NEXT || err == EXT2_ET_NO_CURRENT_NODE)
			return 0;
		if (err)
			return -ext4_errno(err);
		if ((e->e_flags & EXT2_EXTENT_FLAGS_LEAF) &&
		    !(e->e_flags & EXT2_EXTENT_FLAGS_SECOND_VISIT))
			return 1;
	}
}

static int ec_load_extents(struct wbfs *w, struct winode *wi, struct ext2_inode_large *in)
{
	ext2_extent_handle_t h;
	struct ext2fs_extent e;
	errcode_t err;
	int op = EXT2_EXTENT_ROOT, ret = 0;

	err = ext2fs_extent_open2(w->fs, wi->ino, (struct ext2_inode *)in, &h);
	if (err)
		return -ext4_errno(err);
	while ((ret = ext4_extent_next_leaf(h, &op, &e)) > 0) {
		ret = ec_push(wi, e.e_lblk, e.e_pblk, e.e_len,
			      (e.e_flags & EXT2_EXTENT_FLAGS_UNINIT) != 0);
		if (ret)
			break;
	}
	ext2fs_extent_free(h);
	return ret;
}

static int ec_block_cb(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t blockcnt,
		       blk64_t ref_blk, int ref_offset, void *priv)
{
	struct winode *wi = priv;

	if (blockcnt >= 0 && ec_push(wi, (uint64_t)blockcnt, *blocknr, 1, false))
		return BLOCK_ABORT;
	return 0;
}

/* Load the extent map of @wi. Context: fs_lock and ec_lock held. */
static int ec_load_locked(struct wbfs *w, struct winode *wi)
{
	struct ext2_inode_large in;
	errcode_t err;
	int ret;

	lock_assert_held(&w->fs_lock);
	lock_assert_held(&wi->ec_lock);

	if (wi->ec_valid)
		return 0;
	wi->nr_runs = 0;
	ret = ext4_read_inode(w, wi->ino, &in);
	if (ret)
		return ret;
	if (in.i_flags & EXT4_EXTENTS_FL) {
		ret = ec_load_extents(w, wi, &in);
	} else if (ext2fs_inode_has_valid_blocks2(w->fs, (struct ext2_inode *)&in)) {
		err = ext2fs_block_iterate3(w->fs, wi->ino, BLOCK_FLAG_READ_ONLY | BLOCK_FLAG_DATA_ONLY,
					    NULL, ec_block_cb, wi);
		ret = -ext4_errno(err);
	}
	if (!ret)
		wi->ec_valid = true;
	return ret;
}

/* Binary search: the run containing @lblk, or the index where it would go. */
static size_t ec_find(struct winode *wi, uint64_t lblk, bool *hit)
{
	size_t lo = 0, hi = wi->nr_runs;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		struct ext_run *r = &wi->runs[mid];

		if (lblk < r->lblk)
			hi = mid;
		else if (lblk >= r->lblk + r->len)
			lo = mid + 1;
		else {
			*hit = true;
			return mid;
		}
	}
	*hit = false;
	return lo;
}

/*
 * Map logical block @lblk: on a hit @out is the run from @lblk on; on a
 * hole @out->pblk = 0 and @out->len is the hole's length up to the next run
 * (UINT32_MAX at the end). Returns 0 or -errno.
 */
static int ec_lookup_locked(struct winode *wi, uint64_t lblk, struct ext_run *out)
{
	bool hit;
	size_t i = ec_find(wi, lblk, &hit);

	lock_assert_held(&wi->ec_lock);

	if (hit) {
		struct ext_run *r = &wi->runs[i];
		uint64_t d = lblk - r->lblk;

		*out = (struct ext_run){ lblk, r->pblk + d, (uint32_t)(r->len - d), r->uninit };
		return 0;
	}
	out->lblk = lblk;
	out->pblk = 0;
	out->uninit = false;
	out->len = UINT32_MAX;
	if (i < wi->nr_runs && wi->runs[i].lblk - lblk < UINT32_MAX)
		out->len = (uint32_t)(wi->runs[i].lblk - lblk);
	return 0;
}

int ec_lookup(struct wbfs *w, struct winode *wi, uint64_t lblk, struct ext_run *out)
{
	int ret;

	ls_mutex_lock(&wi->ec_lock, &lc_ec_lock);
	while (!wi->ec_valid) {
		ls_mutex_unlock(&wi->ec_lock);
		ext4_lock(w);
		ls_mutex_lock(&wi->ec_lock, &lc_ec_lock);
		ret = ec_load_locked(w, wi);
		ls_mutex_unlock(&wi->ec_lock);
		ext4_unlock(w);
		if (ret)
			return ret;
		ls_mutex_lock(&wi->ec_lock, &lc_ec_lock);
	}
	ret = ec_lookup_locked(wi, lblk, out);
	ls_mutex_unlock(&wi->ec_lock);
	return ret;
}

void ec_invalidate(struct winode *wi)
{
	ls_mutex_lock(&wi->ec_lock, &lc_ec_lock);
	wi->ec_valid = false;
	wi->nr_runs = 0;
	ls_mutex_unlock(&wi->ec_lock);
}

/* Record a freshly allocated run [lblk, lblk+len) -> pblk. ec_lock held. */
static void ec_insert_locked(struct winode *wi, uint64_t lblk, uint64_t pblk, uint32_t len)
{
	bool hit;
	size_t i = ec_find(wi, lblk, &hit);
	struct ext_run *r;

	lock_assert_held(&wi->ec_lock);

	if (!hit && i > 0) {
		r = &wi->runs[i - 1];
		if (r->lblk + r->len == lblk && r->pblk + r->len == pblk && !r->uninit) {
			r->len += len;
			return;
		}
	}
	if (hit || ec_push(wi, lblk, pblk, len, false)) {
		wi->ec_valid = false;	/* unexpected overlap: reload later */
		return;
	}
	/* ec_push appended; rotate it into place */
	if (i < wi->nr_runs - 1) {
		struct ext_run nr = wi->runs[wi->nr_runs - 1];
		memmove(&wi->runs[i + 1], &wi->runs[i], (wi->nr_runs - 1 - i) * sizeof(nr));
		wi->runs[i] = nr;
	}
}

/* ---- bdi_ops: the flusher's side -------------------------------------- */

#define MAP_POOL 8	/* claims one mapping takes at most */

struct map_ctx {
	struct wbfs *w;
	struct winode *wi;
	struct ext2_inode_large in;
	ext2_extent_handle_t h;
	long allocated;		/* data blocks allocated */
	long delalloc_done;	/* reservations converted */
	bool ec_dirty;		/* unwritten extents converted: reload map */
	bool size_grown;	/* i_size extended over the pages mapped */
	struct bm_run pool[MAP_POOL];	/* blocks claimed for the holes, in order */
	unsigned nr_pool, pool_next;	/* claims; the first not yet used */
};

static int map_set(struct map_ctx *c, uint64_t lblk, uint64_t pblk)
{
	errcode_t err;

	if (c->h)
		err = ext2fs_extent_set_bmap(c->h, lblk, pblk, 0);
	else
		err = ext2fs_bmap2(c->w->fs, c->wi->ino, (struct ext2_inode *)&c->in, NULL,
				   BMAP_SET, lblk, NULL, (blk64_t *)&pblk);
	return -ext4_errno(err);
}


/*
 * After mapping @lblk -> @pblk, grow the extent that now ends there over
 * the next @n blocks in one replace instead of @n set_bmap calls.
 * Returns how many blocks it added (0 when the extent cannot grow).
 */
static uint32_t map_extend(struct map_ctx *c, uint64_t lblk, uint64_t pblk, uint32_t n)
{
	struct ext2fs_extent e;
	uint32_t k;

	if (!c->h || !n || ext2fs_extent_goto(c->h, lblk) ||
	    ext2fs_extent_get(c->h, EXT2_EXTENT_CURRENT, &e))
		return 0;
	if ((e.e_flags & EXT2_EXTENT_FLAGS_UNINIT) || e.e_lblk + e.e_len != lblk + 1 ||
	    e.e_pblk + e.e_len != pblk + 1 || e.e_len >= EXT_INIT_MAX_LEN)
		return 0;
	k = EXT_INIT_MAX_LEN - e.e_len < n ? EXT_INIT_MAX_LEN - e.e_len : n;
	e.e_len += k;
	return ext2fs_extent_replace(c->h, 0, &e) ? 0 : k;
}

/*
 * Map logical [lblk, lblk+n) to physical [pblk, pblk+n) (a hole before).
 * *@done: how many of them are in the extent tree, also on an error.
 */
static int map_set_range(struct map_ctx *c, uint64_t lblk, uint64_t pblk, uint32_t n,
			 uint32_t *done)
{
	*done = 0;
	while (n) {
		uint32_t k;
		int ret = map_set(c, lblk, pblk);

		if (ret)
			return ret;
		k = map_extend(c, lblk, pblk, n - 1);
		lblk += 1 + k;
		pblk += 1 + k;
		n -= 1 + k;
		*done += 1 + k;
	}
	return 0;
}

/*
 * Clear PG_delalloc of the page at @index; true if it held a reservation.
 * @fresh: its block holds nothing valid (just allocated, or unwritten
 * and now made written) until the page's write succeeds: PG_newblock.
 */
static bool map_take_delalloc(struct winode *wi, uint64_t index, bool fresh)
{
	struct page *p = mapping_get_page(&wi->map, index);
	bool was;

	if (!p)
		return false;
	was = page_test_clear(p, PG_delalloc);
	if (fresh)
		page_set(p, PG_newblock);
	page_put(p);
	return was;
}

/* map_alloc_run: the rest of the batch waits for a commit (BDI_PBLK_AGAIN). */
#define MAP_AFTER_COMMIT 1

/*
 * Allocate @len blocks for logical [lblk, lblk+len) in as few runs as
 * possible. Returns 0, -errno, or MAP_AFTER_COMMIT with the pages not
 * mapped set to BDI_PBLK_AGAIN.
 */
static int map_alloc_run(struct map_ctx *c, uint64_t lblk, uint32_t len, uint64_t *pblk_out)
{
	ext2_filsys fs = c->w->fs;
	blk64_t goal, got, glen;
	uint32_t done = 0, mapped, i;
	errcode_t err;
	int ret;

	goal = ext2fs_find_inode_goal(fs, c->wi->ino, (struct ext2_inode *)&c->in, lblk);
	while (done < len) {
		if (c->pool_next < c->nr_pool) {
			/* claimed before fs_lock was taken exclusive */
			struct bm_run *p = &c->pool[c->pool_next];

			got = p->blk;
			glen = p->n < len - done ? p->n : len - done;
			p->blk += glen;
			p->n -= glen;
			if (!p->n)
				c->pool_next++;
			ext4_claim_use(c->w, got, glen);
		} else {
			err = ext4_new_range(c->w, goal, len - done, &got, &glen);
			if (err == EXT2_ET_BLOCK_ALLOC_FAIL && ext4_alloc_should_commit(c->w)) {
				/* room only where frees have not committed */
				for (i = done; i < len; i++)
					pblk_out[i] = BDI_PBLK_AGAIN;
				return MAP_AFTER_COMMIT;
			}
			if (err)
				return -ext4_errno(err);
			ext4_block_alloc_stats_range(c->w, got, glen, +1);
		}
		iomgr_forget_range(c->w, got, glen);
		ret = map_set_range(c, lblk + done, got, (uint32_t)glen, &mapped);
		/* an error midway (no room for an extent block): the blocks in
		 * the tree count in i_blocks as if all had gone well, the rest
		 * go back to the bitmap, so the tree, i_blocks and the bitmap
		 * agree; their pages stay dirty for the next attempt */
		if (ret && mapped < glen)
			ext4_block_alloc_stats_range(c->w, got + mapped, glen - mapped, -1);
		for (i = 0; i < mapped; i++) {
			pblk_out[done + i] = got + i;
			if (map_take_delalloc(c->wi, lblk + done + i, true))
				c->delalloc_done++;
		}
		ls_mutex_lock(&c->wi->ec_lock, &lc_ec_lock);
		if (c->wi->ec_valid && mapped)
			ec_insert_locked(c->wi, lblk + done, got, mapped);
		ls_mutex_unlock(&c->wi->ec_lock);
		c->allocated += (long)mapped;
		done += mapped;
		if (ret) {
			c->ec_dirty = true;	/* reload the map from the tree */
			return ret;
		}
		goal = got + glen;
	}
	return 0;
}

/* Map one page already backed by a block; unwritten extents become written. */
static int map_existing(struct map_ctx *c, const struct ext_run *r, uint64_t *pblk)
{
	*pblk = r->pblk;
	if (map_take_delalloc(c->wi, r->lblk, r->uninit))	/* fallocated under a delalloc page */
		c->delalloc_done++;
	if (!r->uninit)
		return 0;
	c->ec_dirty = true;
	return map_set(c, r->lblk, r->pblk);
}

static int map_open(struct map_ctx *c)
{
	struct wbfs *w = c->w;
	errcode_t err;
	int ret;

	ret = ext4_read_inode(w, c->wi->ino, &c->in);
	if (ret)
		return ret;
	ls_mutex_lock(&c->wi->ec_lock, &lc_ec_lock);
	ret = ec_load_locked(w, c->wi);
	ls_mutex_unlock(&c->wi->ec_lock);
	if (ret)
		return ret;
	if (c->in.i_flags & EXT4_EXTENTS_FL) {
		err = ext2fs_extent_open2(w->fs, c->wi->ino, (struct ext2_inode *)&c->in, &c->h);
		if (err)
			return -ext4_errno(err);
	}
	return 0;
}

static int map_close(struct map_ctx *c, int ret)
{
	struct wbfs *w = c->w;
	int r;

	if (c->h)
		ext2fs_extent_free(c->h);
	if (c->allocated || c->size_grown) {
		ext2fs_iblk_add_blocks(w->fs, (struct ext2_inode *)&c->in, (blk64_t)c->allocated);
		r = ext4_write_inode(w, c->wi->ino, &c->in);
		if (r && !ret)
			ret = r;
	}
	if (c->ec_dirty)
		ec_invalidate(c->wi);
	ext4_unreserve_pages(w, c->wi, c->delalloc_done);
	return ret;
}

/*
 * The on-disk size covers the pages about to be written, in the same
 * change as their blocks, as ext4 raises i_disksize at writeback
 * (mpage_map_and_submit_extent): a commit (or a crash) never shows
 * written blocks past it (e2fsck would call the size wrong). Ordered data
 * makes the pages reach the device before that change commits. Past the
 * batch it stops at the first page still waiting to be written
 * (disksize_reach). Pages waiting below the batch's last one (writeback
 * that started mid-file) have no block yet and read as zeros until they
 * are written, as with ext4.
 */
static void map_grow_size(struct map_ctx *c, const uint64_t *index, const uint64_t *pblk,
			  unsigned n)
{
	/* the pages past EOF (a suffix: the batch is in index order) are not
	 * written, and must not count as written; nor the pages left to map
	 * after a commit (a suffix too) */
	while (n && (pblk[n - 1] == BDI_PBLK_SKIP || pblk[n - 1] == BDI_PBLK_AGAIN))
		n--;
	if (!n || !winode_owns_size(c->wi) ||
	    !winode_disksize_catch_up(c->wi, (index[n - 1] + 1) << PAGE_SHIFT, index, n))
		return;
	ext2fs_inode_size_set(c->w->fs, (struct ext2_inode *)&c->in, winode_disksize(c->wi));
	c->size_grown = true;
}

/* Look up index @i of the batch; returns the count of unmapped pages from it. */
static unsigned map_hole_run(const uint64_t *index, unsigned i, unsigned n, const struct ext_run *r)
{
	unsigned k = 1;

	while (i + k < n && index[i + k] == index[i] + k && k < r->len)
		k++;
	return k;
}

/*
 * Where a new block for hole @lblk should go: after the block mapped
 * before it, else at the start of the inode's (flex) group, as
 * ext2fs_find_inode_goal. Context: ec_lock, ec_valid.
 */
static blk64_t map_goal_locked(struct wbfs *w, struct winode *wi, uint64_t lblk)
{
	ext2_filsys fs = w->fs;
	bool hit;
	size_t i = ec_find(wi, lblk, &hit);
	dgrp_t g;

	lock_assert_held(&wi->ec_lock);

	if (i > 0 && !hit) {
		const struct ext_run *r = &wi->runs[i - 1];

		return r->pblk + (lblk - r->lblk);
	}
	g = ext2fs_group_of_ino(fs, wi->ino);
	if (fs->super->s_log_groups_per_flex)
		g &= ~((1U << fs->super->s_log_groups_per_flex) - 1);
	return ext2fs_group_first_block2(fs, g);
}

/*
 * Claim blocks for the batch's holes before fs_lock is taken exclusive
 * (ext4_claim_blocks): what writeback searches for runs concurrently
 * with other claims, and map_alloc_run uses them in order. Nothing is
 * claimed when the map is not cached (loading it needs fs_lock), or
 * when free space is short (claims held by one flusher must not make
 * another's allocation fail).
 */
static void map_claim(struct map_ctx *c, const uint64_t *index, unsigned n, uint64_t size)
{
	struct wbfs *w = c->w;
	struct winode *wi = c->wi;
	blk64_t want = 0, goal = 0, got, glen;
	unsigned i;
	bool room;

	ls_mutex_lock(&wi->ec_lock, &lc_ec_lock);
	for (i = 0; wi->ec_valid && i < n && (index[i] << PAGE_SHIFT) < size; i++) {
		struct ext_run r;

		if (ec_lookup_locked(wi, index[i], &r) || r.pblk)
			continue;
		if (!want)
			goal = map_goal_locked(w, wi, index[i]);
		want++;
	}
	ls_mutex_unlock(&wi->ec_lock);
	if (!want)
		return;		/* overwrites only, or the map not cached */
	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	room = w->free_blocks - w->reserved - w->headroom > 4 * (int64_t)want;
	ls_mutex_unlock(&w->resv_lock);
	if (!room)
		return;
	ext4_lock_shared(w);
	if (atomic_fetch_add(&w->nr_claimers, 1))
		atomic_fetch_add(&w->stats.nr_claim_overlaps, 1);
	while (want && c->nr_pool < MAP_POOL && !ext4_claim_blocks(w, goal, want, &got, &glen)) {
		c->pool[c->nr_pool++] = (struct bm_run){ got, glen };
		want -= glen;
		goal = got + glen;
	}
	atomic_fetch_sub(&w->nr_claimers, 1);
	ext4_unlock_shared(w);
}

/* Claims map_alloc_run did not use go back. Context: fs_lock. */
static void map_unclaim(struct map_ctx *c)
{
	for (; c->pool_next < c->nr_pool; c->pool_next++)
		if (c->pool[c->pool_next].n)
			ext4_claim_release(c->w, c->pool[c->pool_next].blk,
					   c->pool[c->pool_next].n);
}

int ext4_map_pages(struct bdi *b, struct wb_inode *wb, const uint64_t *index,
		   unsigned n, uint64_t *pblk)
{
	struct map_ctx c = { .w = bdi_owner(b), .wi = container_of(wb, struct winode, wb) };
	uint64_t size = winode_size(c.wi);
	unsigned i = 0, k;
	int ret;

	map_claim(&c, index, n, size);
	ext4_lock(c.w);
	/* allocation and unwritten conversion change its extents (maybe
	 * only leaf blocks, not its inode): its fsync commits them */
	c.wi->sync_tid = ext4_journal_tid(c.w);
	if (c.wi->freed) {
		/* the file is gone: nothing to write its pages to */
		for (i = 0; i < n; i++)
			pblk[i] = BDI_PBLK_SKIP;
		map_unclaim(&c);
		ext4_unlock(c.w);
		return 0;
	}
	ret = map_open(&c);
	while (!ret && i < n) {
		struct ext_run r;

		if ((index[i] << PAGE_SHIFT) >= size) {
			pblk[i++] = BDI_PBLK_SKIP;
			continue;
		}
		ls_mutex_lock(&c.wi->ec_lock, &lc_ec_lock);
		ret = ec_lookup_locked(c.wi, index[i], &r);
		ls_mutex_unlock(&c.wi->ec_lock);
		if (ret)
			break;
		if (r.pblk) {
			ret = map_existing(&c, &r, &pblk[i++]);
			continue;
		}
		k = map_hole_run(index, i, n, &r);
		ret = map_alloc_run(&c, index[i], k, &pblk[i]);
		i += k;
		if (ret == MAP_AFTER_COMMIT) {
			/* the flusher commits, then maps the rest again */
			for (; i < n; i++)
				pblk[i] = BDI_PBLK_AGAIN;
			ret = 0;
		}
	}
	if (!ret)
		map_grow_size(&c, index, pblk, n);
	map_unclaim(&c);
	ret = map_close(&c, ret);
	ext4_unlock(c.w);
	/* a page still waiting held the on-disk size back: the inode's
	 * next write (after that page's) raises it */
	if (!ret && winode_owns_size(c.wi) && winode_disksize(c.wi) < winode_size(c.wi))
		bdi_mark_inode_dirty(b, wb, I_DIRTY_INODE);
	return ret;
}

/* ---- failed writes to new blocks ------------------------------------ */

/* Record page @index of inode @ino for ext4_hide_failed_locked. */
static void hide_record(struct wbfs *w, ext2_ino_t ino, uint64_t index)
{
	ls_mutex_lock(&w->hide_lock, &lc_hide_lock);
	if (w->nr_hide == w->cap_hide) {
		size_t cap = w->cap_hide ? w->cap_hide * 2 : 64;
		struct hide_rec *v = realloc(w->hide, cap * sizeof(*v));

		if (!v) {
			w->hide_overflow = true;
			goto out;
		}
		w->hide = v;
		w->cap_hide = cap;
	}
	w->hide[w->nr_hide++] = (struct hide_rec){ ino, index };
out:
	atomic_store(&w->hide_pending, true);
	ls_mutex_unlock(&w->hide_lock);
}

/*
 * The write of page @index failed while its block was new: the block
 * holds stale data (another file's, or the device's old contents), and
 * the allocation or unwritten conversion that mapped it is in the running
 * transaction, or in the one whose ordered wait this write ends. Recorded
 * here; the commit makes the block unwritten first (journal.c). Context:
 * flusher thread, maybe I/O completion: a short mutex, no I/O.
 */
void ext4_newblock_failed(struct bdi *b, struct wb_inode *wb, uint64_t index)
{
	struct wbfs *w = bdi_owner(b);

	/* without a journal nothing orders metadata after data anyway */
	if (ext4_journal_on(w))
		hide_record(w, container_of(wb, struct winode, wb)->ino, index);
}

/*
 * Make the block of page @index of @wi unwritten, unless the page has
 * been written since (PG_newblock cleared) or is gone (truncated: its
 * block with it). The flusher maps a page only with fs_lock, which we
 * hold: a retry that starts now finds the extent unwritten and converts
 * it back, in the transaction its write is ordered before. A page being
 * written again may turn out either way: it stays recorded (the commit
 * builds again once the write is done). Files without extents keep the
 * block as it is (there is no unwritten state to give it).
 * Context: fs_lock held.
 */
static int hide_block_locked(struct wbfs *w, struct winode *wi, uint64_t index)
{
	struct map_ctx c = { .w = w, .wi = wi };
	struct page *p = mapping_get_page(&wi->map, index);
	struct ext_run r;
	bool hide, busy;
	int ret;

	lock_assert_held(&w->fs_lock);

	if (!p)
		return 0;
	hide = page_test(p, PG_newblock) && !wi->freed;
	busy = page_test(p, PG_writeback);
	page_put(p);
	if (!hide)
		return 0;
	if (busy) {
		hide_record(w, wi->ino, index);
		return 0;
	}
	ret = map_open(&c);
	if (!ret && c.h) {
		ls_mutex_lock(&wi->ec_lock, &lc_ec_lock);
		ret = ec_lookup_locked(wi, index, &r);
		ls_mutex_unlock(&wi->ec_lock);
		if (!ret && r.pblk && !r.uninit) {
			ret = -ext4_errno(ext2fs_extent_set_bmap(c.h, index, r.pblk,
								 EXT2_EXTENT_SET_BMAP_UNINIT));
			c.ec_dirty = true;
			if (!ret)
				atomic_fetch_add(&w->nr_hidden, 1);
		}
	}
	ret = map_close(&c, ret);
	/* its extents changed: its fsync commits that */
	if (c.ec_dirty)
		wi->sync_tid = ext4_journal_tid(w);
	return ret;
}

int ext4_hide_failed_locked(struct wbfs *w)
{
	struct hide_rec *v;
	size_t n, i;
	bool over;
	int ret = 0;

	lock_assert_held(&w->fs_lock);

	ls_mutex_lock(&w->hide_lock, &lc_hide_lock);
	v = w->hide;
	n = w->nr_hide;
	over = w->hide_overflow;
	w->hide = NULL;
	w->nr_hide = w->cap_hide = 0;
	w->hide_overflow = false;
	atomic_store(&w->hide_pending, false);
	ls_mutex_unlock(&w->hide_lock);
	if (over)
		ret = -ENOMEM;
	/* a winode found under fs_lock is not freed before we let go of it */
	for (i = 0; i < n; i++) {
		struct winode *wi = winode_find(w, v[i].ino);
		int r = wi ? hide_block_locked(w, wi, v[i].index) : 0;

		if (r && !ret)
			ret = r;
	}
	free(v);
	return ret;
}

/* The first failed write of a file after a success: one line, not one per retry. */
void ext4_write_error(struct bdi *b, struct wb_inode *wb, uint64_t index, int err)
{
	struct wbfs *w = bdi_owner(b);
	struct winode *wi = container_of(wb, struct winode, wb);

	fprintf(msg_stream(), "wbcfs: %s: inode %u: write error at offset %llu: %s; data kept dirty,"
		" will retry\n", w->dev_path, wi->ino,
		(unsigned long long)index << PAGE_SHIFT, strerror(-err));
}
