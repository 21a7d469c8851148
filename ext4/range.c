// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Range operations on a file's data: truncate, punch, fallocate (with
 * unwritten extents), zero range and SEEK_DATA/SEEK_HOLE, and the report
 * of dirty pages a failing device never took (data_report_lost). Apart
 * from data.c: these change which blocks a file has, not what its pages
 * hold; the format work of truncate and punch is libext2fs's.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ext4_i.h"
#include "wbcfs/cache/dirty.h"

/* ---- truncate, punch, fallocate --------------------------------------- */

/* Release reservations of dirty pages in [start, end], then drop the pages. */
static void drop_range(struct wbfs *w, struct winode *wi, uint64_t start, uint64_t end)
{
	struct page *pages[64];
	uint64_t pos = start;
	unsigned n, i;

	while (pos <= end && (n = mapping_lookup_tag(&wi->map, &pos, end, TAG_DIRTY, pages, 64))) {
		for (i = 0; i < n; i++) {
			lock_page(pages[i]);
			if (page_test_clear(pages[i], PG_delalloc))
				ext4_unreserve_pages(w, wi, 1);
			unlock_page(pages[i]);
			page_put(pages[i]);
		}
		if (!pos)
			break;
	}
	mapping_truncate(&wi->map, start, end);
}

/* Zero bytes [from, to) within one page, below EOF. */
static int zero_partial(struct wbfs *w, struct winode *wi, uint64_t from, uint64_t to,
			uint64_t isize)
{
	if (from >= to || from >= isize)
		return 0;
	return data_zero_in_page(w, wi, from, to, isize);
}

/* Free blocks [first, last] and write the folded inode. Context: fs_lock. */
static int punch_blocks_locked(struct wbfs *w, struct winode *wi, uint64_t first,
			       uint64_t last, bool stamp)
{
	struct ext2_inode_large in;
	struct timespec now;
	errcode_t err = 0;
	int ret;

	lock_assert_held(&w->fs_lock);

	ret = ext4_read_inode(w, wi->ino, &in);
	if (ret)
		return ret;
	if (first <= last && ext2fs_inode_has_valid_blocks2(w->fs, (struct ext2_inode *)&in))
		err = ext4_punch(w, wi->ino, &in, first, last);
	ec_invalidate(wi);
	if (err)
		return -ext4_errno(err);
	winode_fold_attrs_locked(w, wi->ino, &in);
	if (stamp) {
		ext4_now(&now);
		ext4_ts_set(&in, TS_MTIME, &now);
		ext4_ts_set(&in, TS_CTIME, &now);
	}
	return ext4_write_inode(w, wi->ino, &in);
}

/* Punch logical blocks [first, last] of @wi, which nobody else uses now. */
static void lost_punch(struct wbfs *w, struct winode *wi, uint64_t first, uint64_t last)
{
	int ret;

	ext4_lock(w);
	ret = punch_blocks_locked(w, wi, first, last, false);
	ext4_unlock(w);
	if (ret)
		fprintf(msg_stream(), "wbcfs: %s: inode %u: cannot free blocks %llu-%llu of lost pages: %s\n",
			w->dev_path, wi->ino, (unsigned long long)first,
			(unsigned long long)last, strerror(-ret));
}

/*
 * @wi is being dropped with dirty pages that could not be written (the
 * device keeps failing): report them as lost, one line for the inode,
 * and count them for the exit status. Pages that never got a block give
 * back their reservation; blocks writeback allocated for them
 * (PG_newblock) hold nothing valid, so they are punched and the file
 * reads zeros there instead of stale data; a block that held older data
 * keeps it. Context: the inode is being evicted (no other user).
 * Returns the number of pages lost.
 */
long data_report_lost(struct wbfs *w, struct winode *wi)
{
	struct page *pages[64];
	uint64_t pos = 0, first = UINT64_MAX, run = 0, run_end = 0;
	long lost = 0;
	unsigned n, i;

	while ((n = mapping_lookup_tag(&wi->map, &pos, UINT64_MAX, TAG_DIRTY, pages, 64))) {
		for (i = 0; i < n; i++) {
			struct page *p = pages[i];

			lock_page(p);
			if (first == UINT64_MAX)
				first = p->index;
			lost++;
			if (page_test_clear(p, PG_delalloc))
				ext4_unreserve_pages(w, wi, 1);
			if (page_test_clear(p, PG_newblock)) {
				if (run_end && p->index == run_end) {
					run_end++;
				} else {
					if (run_end)
						lost_punch(w, wi, run, run_end - 1);
					run = p->index;
					run_end = p->index + 1;
				}
			}
			unlock_page(p);
			page_put(p);
		}
		if (!pos)
			break;
	}
	if (run_end)
		lost_punch(w, wi, run, run_end - 1);
	if (lost) {
		fprintf(msg_stream(), "wbcfs: %s: inode %u: %ld dirty pages (%llu bytes, first at offset"
			" %llu) could not be written and are lost\n", w->dev_path, wi->ino, lost,
			(unsigned long long)lost * PAGE_SIZE, (unsigned long long)first << PAGE_SHIFT);
		atomic_fetch_add(&w->lost_pages, lost);
	}
	return lost;
}

int data_truncate(struct wbfs *w, struct winode *wi, uint64_t size)
{
	uint64_t old, keep;
	int ret = 0;

	if (size > WBFS_MAX_FILE_BYTES)
		return -EFBIG;
	ls_rwlock_wrlock(&wi->ilock, &lc_ilock_w);
	old = winode_size(wi);
	if (size < old) {
		keep = (size + PAGE_SIZE - 1) >> PAGE_SHIFT;
		ret = zero_partial(w, wi, size, (keep << PAGE_SHIFT), old);
		drop_range(w, wi, keep, UINT64_MAX);
	} else if (size > old) {
		ret = data_zero_eof_tail(w, wi, old);
	}
	if (!ret) {
		winode_set_size(wi, size, true);
		ext4_lock(w);
		ret = punch_blocks_locked(w, wi, size < old ? (size + PAGE_SIZE - 1) >> PAGE_SHIFT : 1,
					  size < old ? ~0ULL : 0, true);
		ext4_unlock(w);
	}
	ls_rwlock_unlock(&wi->ilock);
	/* auto_da_alloc: the data written next goes out at the next close
	 * (ops.c). Only when there was data to lose: a file emptied again
	 * loses nothing, and its close need not wait */
	if (!ret && !size && old && w->opts.auto_da_alloc)
		atomic_store(&wi->da_alloc_close, true);
	if (!ret && size > old)
		kcache_zero_eof_page(w, wi, old, size);
	return ret;
}

/*
 * PUNCH_HOLE|KEEP_SIZE: zero the partial pages at both ends, free the whole
 * blocks between (up to the page holding EOF when the hole reaches it).
 * Context: ilock held for writing.
 */
static int punch_hole(struct wbfs *w, struct winode *wi, uint64_t off, uint64_t len)
{
	uint64_t isize = winode_size(wi);
	uint64_t end = off + len < isize ? off + len : isize;
	uint64_t first = (off + PAGE_SIZE - 1) >> PAGE_SHIFT;
	uint64_t stop = (end == isize ? end + PAGE_SIZE - 1 : end) >> PAGE_SHIFT;
	uint64_t head_end, tail_start;
	int ret;

	if (off >= end)
		return 0;
	head_end = end < (first << PAGE_SHIFT) ? end : first << PAGE_SHIFT;
	ret = zero_partial(w, wi, off, head_end, isize);
	if (!ret && stop > first) {
		drop_range(w, wi, first, stop - 1);
		ext4_lock(w);
		ret = punch_blocks_locked(w, wi, first, stop - 1, true);
		ext4_unlock(w);
	}
	tail_start = (stop << PAGE_SHIFT) > head_end ? stop << PAGE_SHIFT : head_end;
	if (!ret && tail_start < end)
		ret = zero_partial(w, wi, tail_start, end, isize);
	return ret;
}

/* ---- fallocate: unwritten extents ------------------------------------ */

/* One leaf extent, as found before the tree is changed. */
struct falloc_ext {
	uint64_t lblk, pblk;
	uint32_t len;
	bool uninit;
};

/*
 * The leaf extents of @h overlapping [first, last], in order, into *@out
 * (malloc'ed; the caller frees it). Context: fs_lock.
 */
static int falloc_extents(ext2_extent_handle_t h, uint64_t first, uint64_t last,
			  struct falloc_ext **out, size_t *nr)
{
	struct falloc_ext *v = NULL, *nv;
	struct ext2fs_extent e;
	size_t n = 0, cap = 0;
	int op = EXT2_EXTENT_ROOT, ret;

	while ((ret = ext4_extent_next_leaf(h, &op, &e)) > 0) {
		if (!e.e_len)
			continue;
		if (e.e_lblk > last)
			break;
		if (e.e_lblk + e.e_len <= first)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		v[n++] = (struct falloc_ext){ e.e_lblk, e.e_pblk, e.e_len,
					      (e.e_flags & EXT2_EXTENT_FLAGS_UNINIT) != 0 };
	}
	if (ret < 0) {
		free(v);
		return ret;
	}
	*out = v;
	*nr = n;
	return 0;
}

/* Blocks of [first, last] that no extent maps. */
static uint64_t falloc_hole_blocks(const struct falloc_ext *v, size_t n, uint64_t first,
				   uint64_t last)
{
	uint64_t holes = last - first + 1;
	size_t i;

	for (i = 0; i < n; i++) {
		uint64_t s = v[i].lblk > first ? v[i].lblk : first;
		uint64_t e = v[i].lblk + v[i].len - 1 < last ? v[i].lblk + v[i].len - 1 : last;

		if (s <= e)
			holes -= e - s + 1;
	}
	return holes;
}

/*
 * Map the hole [lblk, lblk+n) to fresh blocks [pblk, pblk+n) as unwritten:
 * one set_bmap, then the extent it made grows over the rest, as far as an
 * unwritten extent may. *@done: how many blocks are mapped (on error too).
 */
static int falloc_map_unwritten(ext2_extent_handle_t h, uint64_t lblk, uint64_t pblk,
				uint64_t n, uint64_t *done)
{
	struct ext2fs_extent e;
	errcode_t err;

	*done = 0;
	while (n) {
		uint64_t k = 0;

		err = ext2fs_extent_set_bmap(h, lblk, pblk, EXT2_EXTENT_SET_BMAP_UNINIT);
		if (err)
			return -ext4_errno(err);
		if (n > 1 && !ext2fs_extent_goto(h, lblk) &&
		    !ext2fs_extent_get(h, EXT2_EXTENT_CURRENT, &e) &&
		    (e.e_flags & EXT2_EXTENT_FLAGS_UNINIT) && e.e_lblk + e.e_len == lblk + 1 &&
		    e.e_pblk + e.e_len == pblk + 1 && e.e_len < EXT_UNINIT_MAX_LEN) {
			k = EXT_UNINIT_MAX_LEN - e.e_len;
			if (k > n - 1)
				k = n - 1;
			e.e_len += (uint32_t)k;
			if (ext2fs_extent_replace(h, 0, &e))
				k = 0;
		}
		lblk += 1 + k;
		pblk += 1 + k;
		n -= 1 + k;
		*done += 1 + k;
	}
	return 0;
}

/*
 * Allocate the hole [lblk, lblk+n) as unwritten extents, near @goal.
 * Blocks that could not be mapped are given back. Context: fs_lock.
 */
static int falloc_fill_hole(struct wbfs *w, ext2_extent_handle_t h,
			    struct ext2_inode_large *in, uint64_t lblk, uint64_t n, uint64_t goal)
{
	ext2_filsys fs = w->fs;

	while (n) {
		blk64_t got, glen;
		uint64_t done;
		/* busy blocks (freed since the last sync) too when nothing else is free */
		errcode_t err = ext4_new_range(w, goal, n, &got, &glen);
		int ret;

		if (err)
			return -ext4_errno(err);
		ext4_block_alloc_stats_range(w, got, glen, +1);
		iomgr_forget_range(w, got, glen);
		ret = falloc_map_unwritten(h, lblk, got, glen, &done);
		ext2fs_iblk_add_blocks(fs, (struct ext2_inode *)in, done);
		if (ret) {
			if (done < glen)
				ext4_block_alloc_stats_range(w, got + done, glen - done, -1);
			return ret;
		}
		lblk += glen;
		n -= glen;
		goal = got + glen;
	}
	return 0;
}

/*
 * Give every hole of [first, last] unwritten blocks, each placed after the
 * extent before it. Only the holes are allocated: a range that starts or
 * ends inside a hole gets no block outside it. Context: fs_lock.
 */
static int falloc_fill_holes(struct wbfs *w, struct winode *wi, ext2_extent_handle_t h,
			     struct ext2_inode_large *in, const struct falloc_ext *v, size_t n,
			     uint64_t first, uint64_t last)
{
	uint64_t pos = first;
	size_t i = 0;
	int ret = 0;

	while (!ret && pos <= last) {
		uint64_t hole_last = last, goal;

		while (i < n && v[i].lblk + v[i].len <= pos)
			i++;
		if (i < n && v[i].lblk <= pos) {
			if (v[i].lblk + v[i].len - 1 >= last)
				break;
			pos = v[i].lblk + v[i].len;
			continue;
		}
		if (i < n && v[i].lblk - 1 < hole_last)
			hole_last = v[i].lblk - 1;
		if (i > 0)
			goal = v[i - 1].pblk + (pos - v[i - 1].lblk);
		else
			goal = ext2fs_find_inode_goal(w->fs, wi->ino, (struct ext2_inode *)in, pos);
		ret = falloc_fill_hole(w, h, in, pos, hole_last - pos + 1, goal);
		if (hole_last == last)
			break;
		pos = hole_last + 1;
	}
	return ret;
}

/* Make the written blocks of [first, last] unwritten (they read as zeros). */
static int falloc_mark_unwritten(ext2_extent_handle_t h, const struct falloc_ext *v,
				 size_t n, uint64_t first, uint64_t last)
{
	struct ext2fs_extent e;
	errcode_t err = 0;
	size_t i;

	for (i = 0; i < n && !err; i++) {
		uint64_t s = v[i].lblk > first ? v[i].lblk : first;
		uint64_t t = v[i].lblk + v[i].len - 1 < last ? v[i].lblk + v[i].len - 1 : last;
		uint64_t b;

		if (v[i].uninit || s > t)
			continue;
		if (s == v[i].lblk && t == v[i].lblk + v[i].len - 1 &&
		    v[i].len <= EXT_UNINIT_MAX_LEN) {
			err = ext2fs_extent_goto(h, v[i].lblk);
			if (!err)
				err = ext2fs_extent_get(h, EXT2_EXTENT_CURRENT, &e);
			if (!err) {
				e.e_flags |= EXT2_EXTENT_FLAGS_UNINIT;
				err = ext2fs_extent_replace(h, 0, &e);
			}
			continue;
		}
		for (b = s; b <= t && !err; b++)
			err = ext2fs_extent_set_bmap(h, b, v[i].pblk + (b - v[i].lblk),
						     EXT2_EXTENT_SET_BMAP_UNINIT);
	}
	return -ext4_errno(err);
}

/*
 * The delalloc pages of [first, last] (dirty, a block reserved for each,
 * none allocated yet): counted (@take false), or, once fallocate has
 * given their blocks, cleared of PG_delalloc with their reservations
 * given back, as writeback gives them back when it maps a page
 * fallocated under it (map_existing). Kept, they would count twice in
 * statfs (reserved, and allocated) until their writeback. Without page
 * locks (writeback takes them before fs_lock): the flag is cleared only
 * under fs_lock, here or by writeback's map. Returns how many. Context:
 * fs_lock, ilock held for writing (no write adds one).
 */
static long falloc_delalloc(struct wbfs *w, struct winode *wi, uint64_t first, uint64_t last,
			    bool take)
{
	struct page *pages[64];
	uint64_t pos = first;
	long found = 0;
	unsigned n, i;

	if (!atomic_load(&wi->nr_delalloc))
		return 0;
	while (pos <= last && (n = mapping_lookup_range(&wi->map, &pos, last, pages, 64))) {
		for (i = 0; i < n; i++) {
			if (take ? page_test_clear(pages[i], PG_delalloc) :
				   page_test(pages[i], PG_delalloc))
				found++;
			page_put(pages[i]);
		}
		if (!pos)
			break;
	}
	if (take)
		ext4_unreserve_pages(w, wi, found);
	return found;
}

/*
 * Allocate unwritten blocks for the holes of [first, last] and, when
 * @zfirst <= @zlast, make the written blocks of [zfirst, zlast] unwritten;
 * then set the size to @size and stamp ctime (and mtime with @mtime).
 * Space is checked against the reservations of delayed allocation first
 * (and, for unprivileged callers, the root reserve, as ext4 does).
 * Context: ilock held for writing; takes fs_lock.
 */
static int falloc_blocks(struct wbfs *w, struct winode *wi, uint64_t first, uint64_t last,
			 uint64_t zfirst, uint64_t zlast, uint64_t size, bool mtime, bool privileged)
{
	struct ext2_inode_large in;
	ext2_extent_handle_t h = NULL;
	struct falloc_ext *v = NULL;
	struct timespec now;
	bool zero = zfirst <= zlast;
	uint64_t lo = zero && zfirst < first ? zfirst : first;
	uint64_t hi = zero && zlast > last ? zlast : last;
	int64_t holes = 0;
	size_t n = 0;
	errcode_t err;
	int ret;

	ext4_lock(w);
	ret = ext4_read_inode(w, wi->ino, &in);
	if (!ret) {
		err = ext2fs_extent_open2(w->fs, wi->ino, (struct ext2_inode *)&in, &h);
		ret = -ext4_errno(err);
	}
	if (!ret)
		ret = falloc_extents(h, lo, hi, &v, &n);
	if (!ret) {
		/* delalloc pages lie in holes and have their blocks reserved */
		holes = (int64_t)falloc_hole_blocks(v, n, first, last) -
			falloc_delalloc(w, wi, first, last, false);
		if (holes < 0)
			holes = 0;
		ret = ext4_reserve(w, holes, privileged);
	}
	if (!ret) {
		ret = falloc_fill_holes(w, wi, h, &in, v, n, first, last);
		ext4_unreserve(w, holes);
		if (!ret)
			falloc_delalloc(w, wi, first, last, true);
	}
	if (!ret && zero) {
		free(v);
		v = NULL;
		ret = falloc_extents(h, zfirst, zlast, &v, &n);
		if (!ret)
			ret = falloc_mark_unwritten(h, v, n, zfirst, zlast);
	}
	free(v);
	ec_invalidate(wi);
	if (h) {
		/* what was allocated before a failure stays, as in ext4 */
		ext2fs_extent_free(h);
		if (!ret && size != winode_size(wi))
			winode_set_size(wi, size, mtime);
		else if (!ret && mtime)
			winode_stamp_times(wi);
		winode_fold_attrs_locked(w, wi->ino, &in);
		ext4_now(&now);
		ext4_ts_set(&in, TS_CTIME, &now);
		if (ext4_write_inode(w, wi->ino, &in) && !ret)
			ret = -EIO;
	}
	ext4_unlock(w);
	return ret;
}

static int alloc_range(struct wbfs *w, struct winode *wi, int mode, uint64_t off, uint64_t len,
		       bool privileged)
{
	uint64_t size = winode_size(wi);

	if (!(mode & FALLOC_FL_KEEP_SIZE) && off + len > size)
		size = off + len;
	return falloc_blocks(w, wi, off >> PAGE_SHIFT, (off + len - 1) >> PAGE_SHIFT, 1, 0,
			     size, true, privileged);
}

/*
 * ZERO_RANGE (with or without KEEP_SIZE), as ext4 does it: the whole
 * blocks of the range leave the cache (dirty pages are dropped with their
 * reservations, writeback in flight is waited for) and become unwritten
 * extents, holes included; the partial blocks at both ends are allocated
 * too and zeroed in the cache. Context: ilock held for writing.
 */
static int zero_range(struct wbfs *w, struct winode *wi, int mode, uint64_t off, uint64_t len,
		      bool privileged)
{
	uint64_t old = winode_size(wi), end = off + len, size = old;
	uint64_t first = (off + PAGE_SIZE - 1) >> PAGE_SHIFT, stop = end >> PAGE_SHIFT;
	uint64_t head_end, tail_start;
	int ret = 0;

	if (!(mode & FALLOC_FL_KEEP_SIZE) && end > old)
		size = end;
	if (size > old)
		ret = data_zero_eof_tail(w, wi, old);
	if (!ret && stop > first)
		drop_range(w, wi, first, stop - 1);
	/* no whole block (first > stop - 1): nothing becomes unwritten */
	if (!ret)
		ret = falloc_blocks(w, wi, off >> PAGE_SHIFT, (end - 1) >> PAGE_SHIFT,
				    stop > first ? first : 1, stop > first ? stop - 1 : 0, size, true,
				    privileged);
	if (ret)
		return ret;
	head_end = end < (first << PAGE_SHIFT) ? end : first << PAGE_SHIFT;
	ret = zero_partial(w, wi, off, head_end, old);
	tail_start = (stop << PAGE_SHIFT) > head_end ? stop << PAGE_SHIFT : head_end;
	if (!ret && tail_start < end)
		ret = zero_partial(w, wi, tail_start, end, old);
	return ret;
}

/* As ext4: no preallocation (nor zeroing) in block-mapped files. */
static int falloc_check_extents(struct wbfs *w, struct winode *wi)
{
	struct ext2_inode_large in;
	int ret;

	ext4_lock(w);
	ret = ext4_read_inode(w, wi->ino, &in);
	ext4_unlock(w);
	if (!ret && !(in.i_flags & EXT4_EXTENTS_FL))
		ret = -EOPNOTSUPP;
	return ret;
}

int data_fallocate(struct wbfs *w, struct winode *wi, int mode, uint64_t off, uint64_t len,
		   bool privileged)
{
	uint64_t old;
	int ret, slot = -1;

	if (!len)
		return -EINVAL;
	if (off + len > WBFS_MAX_FILE_BYTES || off + len < off)
		return -EFBIG;
	/*
	 * The kernel zeroes or drops its pages of the range once answered; a
	 * writeback from it taken before then keeps our zeros (inval.c). A
	 * failure may have zeroed part of the range: all of it is noted.
	 */
	if (mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)) {
		ls_rwlock_wrlock(&wi->ilock, &lc_ilock_w);
		slot = kstore_begin(wi, off, off + len);
		ret = punch_hole(w, wi, off, len);
		ls_rwlock_unlock(&wi->ilock);
		kstore_end(w, wi, slot, off, off + len);
		return ret;
	}
	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_ZERO_RANGE))
		return -EOPNOTSUPP;
	ls_rwlock_wrlock(&wi->ilock, &lc_ilock_w);
	old = winode_size(wi);
	ret = falloc_check_extents(w, wi);
	if (ret) {
		ls_rwlock_unlock(&wi->ilock);
		return ret;
	}
	if (mode & FALLOC_FL_ZERO_RANGE) {
		slot = kstore_begin(wi, off, off + len);
		ret = zero_range(w, wi, mode, off, len, privileged);
	} else {
		if (off > old && !(mode & FALLOC_FL_KEEP_SIZE))
			data_zero_eof_tail(w, wi, old);
		ret = alloc_range(w, wi, mode, off, len, privileged);
	}
	ls_rwlock_unlock(&wi->ilock);
	if (!ret && off + len > old && !(mode & FALLOC_FL_KEEP_SIZE))	/* the zeroed tail */
		kcache_zero_eof_page(w, wi, old, off + len);
	kstore_end(w, wi, slot, off, off + len);
	return ret;
}

/* ---- SEEK_DATA / SEEK_HOLE -------------------------------------------- */

static bool page_is_dirty(struct winode *wi, uint64_t idx)
{
	struct page *p = mapping_get_page(&wi->map, idx);
	bool d = p && page_test(p, PG_dirty);

	if (p)
		page_put(p);
	return d;
}

/* Next dirty page in [idx, idx+len), or UINT64_MAX. */
static uint64_t next_dirty(struct winode *wi, uint64_t idx, uint64_t len)
{
	struct page *p;
	uint64_t pos = idx;
	unsigned n = mapping_lookup_tag(&wi->map, &pos, idx + len - 1, TAG_DIRTY, &p, 1);

	if (!n)
		return UINT64_MAX;
	pos = p->index;
	page_put(p);
	return pos;
}

int data_lseek(struct wbfs *w, struct winode *wi, uint64_t off, int whence, uint64_t *out)
{
	uint64_t isize = winode_size(wi), b = off >> PAGE_SHIFT, d;
	struct ext_run r;
	int ret;

	if (off >= isize)
		return -ENXIO;
	while ((b << PAGE_SHIFT) < isize) {
		ret = ec_lookup(w, wi, b, &r);
		if (ret)
			return ret;
		if (r.pblk && !r.uninit) {
			if (whence == SEEK_DATA)
				goto found;
			b += r.len;
			continue;
		}
		if (whence == SEEK_HOLE) {
			if (!page_is_dirty(wi, b))
				goto found;
			b++;
			continue;
		}
		d = next_dirty(wi, b, r.len);
		if (d != UINT64_MAX) {
			b = d;
			goto found;
		}
		if (r.len == UINT32_MAX)
			break;
		b += r.len;
	}
	if (whence == SEEK_DATA)
		return -ENXIO;
	*out = isize;
	return 0;
found:
	*out = (b << PAGE_SHIFT) > off ? b << PAGE_SHIFT : off;
	if (*out > isize)
		*out = isize;
	return 0;
}
