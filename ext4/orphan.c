// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The on-disk orphan list and freeing inodes: an unlinked inode still
 * open or looked up waits on the list for its last forget, and the
 * mount frees what a crash left there. Apart from inode.c: this is the
 * part of an inode's life that writes the superblock's list and frees
 * blocks, under fs_lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "wbcfs/lib/clock.h"
#include "ext4_i.h"

/* ---- the orphan list ------------------------------------------------------
 *
 * An inode whose last link goes while it is still open or looked up lives
 * on until its last forget. So that a crash in between does not leave it
 * allocated with no name, it is put on the on-disk orphan list as the
 * kernel's ext4 does without a journal's orphan file: s_last_orphan is the
 * head, each orphan's i_dtime the next inode number (0 ends the list).
 * e2fsck and the kernel's ext4 free the list's inodes at their next run,
 * and so does wbcfs at mount (ext4_orphan_cleanup).
 *
 * The list is singly linked on disk, and orphans leave it in any order
 * (the kernel forgets them oldest first, the far end of the list). So
 * that taking one off does not walk the list, reading an inode per step
 * (a few thousand deleted files held by the kernel made that quadratic,
 * all under fs_lock), orphan_prev keeps each orphan's predecessor in
 * memory, as the kernel's ext4 keeps its in-memory s_orphan list. It is
 * kept from the moment the list is known whole (empty after the mount's
 * cleanup); without it (no memory), the walk is the fallback.
 */

/* The list is empty or fully known from now on. Context: fs_lock held. */
void ext4_orphan_track(struct wbfs *w)
{
	jtab_clear(&w->orphan_prev);
	w->orphan_tracked = !w->fs->super->s_last_orphan;
}

/* Forget the in-memory links (fall back to walking the list). */
void ext4_orphan_untrack(struct wbfs *w)
{
	jtab_free(&w->orphan_prev);
	w->orphan_tracked = false;
}

/* @ino goes at the head of the list, before @next (0: none). */
static void orphan_track_add(struct wbfs *w, ext2_ino_t ino, ext2_ino_t next)
{
	if (!w->orphan_tracked)
		return;
	if (jtab_put(&w->orphan_prev, ino, 0) ||
	    (next && jtab_put(&w->orphan_prev, next, ino)))
		ext4_orphan_untrack(w);
}

static bool orphan_ino_valid(struct wbfs *w, ext2_ino_t ino)
{
	return ino >= EXT2_FIRST_INO(w->fs->super) && ino <= w->fs->super->s_inodes_count;
}

/* Put @ino, whose last link is gone, at the head of the list. @in is written. */
static int orphan_add_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	ext2_ino_t next = w->fs->super->s_last_orphan;
	struct winode *wi;
	int ret;

	lock_assert_held(&w->fs_lock);

	in->i_dtime = next;
	ret = ext4_write_inode(w, ino, in);
	if (ret)
		return ret;
	orphan_track_add(w, ino, orphan_ino_valid(w, next) ? next : 0);
	w->fs->super->s_last_orphan = ino;
	ext2fs_mark_super_dirty(w->fs);
	wi = winode_find(w, ino);
	if (wi)
		wi->orphan = true;
	return 0;
}

/*
 * Make the list skip @ino, whose successor is @next (0: none): the head
 * moves on (@cur 0), or orphan @cur, whose inode is @prev, points past it.
 */
static int orphan_skip(struct wbfs *w, ext2_ino_t cur, struct ext2_inode_large *prev,
		       ext2_ino_t next)
{
	if (!cur) {
		w->fs->super->s_last_orphan = next;
		ext2fs_mark_super_dirty(w->fs);
		return 0;
	}
	prev->i_dtime = next;
	return ext4_write_inode(w, cur, prev);
}

/*
 * The orphan before @ino, walking the list from its head: 1 with *@cur
 * (0: @ino is the head) and, for a predecessor, its inode in @prev; 0 when
 * @ino is not on the list; or -errno.
 */
static int orphan_prev_walk(struct wbfs *w, ext2_ino_t ino, ext2_ino_t *cur,
			    struct ext2_inode_large *prev)
{
	ext2_ino_t c = w->fs->super->s_last_orphan;
	uint32_t steps = 0;
	int ret;

	*cur = 0;
	if (c == ino)
		return 1;
	while (orphan_ino_valid(w, c) && steps++ < w->fs->super->s_inodes_count) {
		ret = ext4_read_inode(w, c, prev);
		if (ret)
			return ret;
		if (prev->i_dtime == ino) {
			*cur = c;
			return 1;
		}
		c = prev->i_dtime;
	}
	return 0;
}

/*
 * The same from orphan_prev, checked against the disk; -EAGAIN when the
 * two disagree.
 */
static int orphan_prev_tracked(struct wbfs *w, ext2_ino_t ino, ext2_ino_t *cur,
			       struct ext2_inode_large *prev)
{
	uint32_t *p = jtab_find(&w->orphan_prev, ino);
	int ret;

	if (!p)
		return 0;
	*cur = *p;
	if (!*cur)
		return w->fs->super->s_last_orphan == ino ? 1 : -EAGAIN;
	ret = ext4_read_inode(w, *cur, prev);
	if (ret)
		return ret;
	return prev->i_dtime == ino ? 1 : -EAGAIN;
}

/*
 * Take @ino (its inode @in) off the list if it is there: the head moves on,
 * or the orphan before it points past it. Returns 0 or -errno.
 */
static int orphan_del_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	ext2_ino_t cur, next = orphan_ino_valid(w, in->i_dtime) ? in->i_dtime : 0;
	struct ext2_inode_large prev;
	int ret;

	lock_assert_held(&w->fs_lock);

	if (!w->fs->super->s_last_orphan)
		return 0;
	ret = w->orphan_tracked ? orphan_prev_tracked(w, ino, &cur, &prev) : -EAGAIN;
	if (ret == -EAGAIN) {
		if (w->orphan_tracked)
			ext4_orphan_untrack(w);	/* they disagree: the disk wins */
		ret = orphan_prev_walk(w, ino, &cur, &prev);
	}
	if (ret <= 0)
		return ret;	/* not on the list, or an error */
	ret = orphan_skip(w, cur, &prev, next);
	if (!ret && w->orphan_tracked) {
		jtab_del(&w->orphan_prev, ino);
		if (next && jtab_put(&w->orphan_prev, next, cur))
			ext4_orphan_untrack(w);	/* cannot fail: @next is there */
	}
	return ret;
}

/* ---- freeing ------------------------------------------------------------- */

/*
 * An O_TMPFILE inode is born without a link: on the orphan list from the
 * start, as ext4_tmpfile puts it, so a crash leaves it for the next mount
 * to free. Context: fs_lock held, @ino in the inode table.
 */
int winode_orphan_add_ino_locked(struct wbfs *w, ext2_ino_t ino)
{
	struct ext2_inode_large in;
	int ret = ext4_read_inode(w, ino, &in);

	lock_assert_held(&w->fs_lock);

	return ret ? ret : orphan_add_locked(w, ino, &in);
}

/*
 * linkat() names an O_TMPFILE inode: off the orphan list, with no dtime;
 * @in is updated for the caller to write. Context: fs_lock held.
 */
int winode_orphan_del_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	struct winode *wi = winode_find(w, ino);
	int ret = 0;

	lock_assert_held(&w->fs_lock);

	if (w->fs->super->s_last_orphan == ino || (wi && wi->orphan))
		ret = orphan_del_locked(w, ino, in);
	if (!ret) {
		in->i_dtime = 0;
		if (wi)
			wi->orphan = false;
	}
	return ret;
}

/* Release the blocks, xattrs and inode number of an inode with no links. */
int winode_free_locked(struct wbfs *w, ext2_ino_t ino)
{
	struct ext2_inode_large in;
	struct timespec now;
	struct winode *wi;
	errcode_t err = 0;
	int ret;

	lock_assert_held(&w->fs_lock);

	ret = ext4_read_inode(w, ino, &in);
	if (ret)
		return ret;
	wi = winode_find(w, ino);
	if (w->fs->super->s_last_orphan == ino || (wi && wi->orphan)) {
		ret = orphan_del_locked(w, ino, &in);
		if (ret)
			return ret;
	}
	if (ext2fs_inode_has_valid_blocks2(w->fs, (struct ext2_inode *)&in))
		err = ext4_punch(w, ino, &in, 0, ~0ULL);
	if (!err)
		err = ext2fs_free_ext_attr(w->fs, ino, &in);
	if (err)
		return -ext4_errno(err);
	ext4_now(&now);
	in.i_dtime = (uint32_t)now.tv_sec;
	in.i_links_count = 0;
	ret = ext4_write_inode(w, ino, &in);
	if (ret)
		return ret;
	ext4_inode_alloc_stats(w, ino, -1, LINUX_S_ISDIR(in.i_mode));
	if (wi) {
		wi->freed = true;
		wi->orphan = false;
	}
	return 0;
}

/*
 * One link of @ino is gone (already removed from its directory); @in is
 * its inode, updated and written here. At zero links the inode is freed
 * now, or at its last forget while the kernel still references it.
 * Context: fs_lock held.
 */
int winode_drop_link_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	struct winode *wi;
	struct timespec now;
	bool busy;
	int ret;

	lock_assert_held(&w->fs_lock);

	if (LINUX_S_ISDIR(in->i_mode))
		in->i_links_count = 0;
	else if (in->i_links_count > 0)
		in->i_links_count--;
	winode_fold_attrs_locked(w, ino, in);
	ext4_now(&now);
	ext4_ts_set(in, TS_CTIME, &now);
	ret = ext4_write_inode(w, ino, in);
	if (ret || in->i_links_count)
		return ret;
	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	wi = winode_itable_find_locked(w, ino);
	busy = wi && (wi->nlookup || wi->nopen);
	if (wi)
		wi->unlinked = true;
	ls_mutex_unlock(&w->itable_lock);
	return busy ? orphan_add_locked(w, ino, in) : winode_free_locked(w, ino);
}

/*
 * At mount: free the inodes left on the orphan list by a crash (open
 * files whose last link was gone), as the kernel's ext4 does. An inode
 * that still has links is only taken off the list. A list that leads
 * somewhere invalid is cut there, with one line, and the filesystem is
 * left marked not clean at unmount for e2fsck to finish. Returns how many inodes were freed, or -errno.
 */
int ext4_orphan_cleanup(struct wbfs *w)
{
	struct ext2_super_block *sb = w->fs->super;
	struct ext2_inode_large in;
	uint32_t steps = 0;
	int ret, nr = 0;

	while (sb->s_last_orphan) {
		ext2_ino_t ino = sb->s_last_orphan;

		if (!orphan_ino_valid(w, ino) || steps++ >= sb->s_inodes_count ||
		    !ext2fs_test_inode_bitmap2(w->fs->inode_map, ino)) {
			fprintf(msg_stream(), "wbcfs: %s: bad orphan inode %u: orphan list cut there;"
				" the filesystem stays marked not clean (run e2fsck)\n",
				w->dev_path, ino);
			sb->s_last_orphan = 0;
			ext2fs_mark_super_dirty(w->fs);
			w->fs_error = true;
			break;
		}
		ret = ext4_read_inode(w, ino, &in);
		if (ret)
			return ret;
		if (in.i_links_count) {
			sb->s_last_orphan = orphan_ino_valid(w, in.i_dtime) ? in.i_dtime : 0;
			ext2fs_mark_super_dirty(w->fs);
			in.i_dtime = 0;
			ret = ext4_write_inode(w, ino, &in);
		} else {
			ret = winode_free_locked(w, ino);
			nr++;
		}
		if (ret)
			return ret;
	}
	return nr;
}
