// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Namespace operations on ext4 directories through libext2fs: lookup,
 * create/mknod, O_TMPFILE, mkdir, symlink, link, unlink/rmdir, rename
 * (replace, NOREPLACE, EXCHANGE, WHITEOUT, across parents with ".." and
 * link counts). Errors are the kernel's ext4's. Reading a directory and
 * a symlink is readdir.c's.
 * Every function takes wbfs->fs_lock for its whole libext2fs sequence;
 * freeing inodes at their last link is orphan.c's (winode_drop_link_locked).
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/sysmacros.h>
#include <linux/fs.h>

#include <ext2fs/ext3_extents.h>

#include "ext4_i.h"

static int ftype_of(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return EXT2_FT_REG_FILE;
	case S_IFDIR: return EXT2_FT_DIR;
	case S_IFCHR: return EXT2_FT_CHRDEV;
	case S_IFBLK: return EXT2_FT_BLKDEV;
	case S_IFIFO: return EXT2_FT_FIFO;
	case S_IFSOCK: return EXT2_FT_SOCK;
	case S_IFLNK: return EXT2_FT_SYMLINK;
	default: return EXT2_FT_UNKNOWN;
	}
}

/*
 * An immutable or append-only inode keeps its names: unlink, rmdir and a
 * rename away or over it fail with EPERM, as ext4 (its directory's flags
 * are the caller's check: iflags_check).
 */
#define DIR_NO_REMOVE_FL (EXT2_IMMUTABLE_FL | EXT2_APPEND_FL)

/*
 * The name cache of @dir, built on demand when @build. Every directory
 * that has an in-memory inode gets one at its first lookup (one scan, the
 * cost of the lookup it serves): from then on a LOOKUP in it is answered
 * from the cache, without fs_lock (dir_lookup), and creates and unlinks
 * find a name without scanning. It lives as long as the directory's
 * in-memory inode, until the kernel forgets the directory.
 * Context: fs_lock.
 */
static struct dcache *dir_dcache_locked(struct wbfs *w, ext2_ino_t dir, bool build)
{
	struct winode *wi = winode_find(w, dir);
	struct dcache *dc;

	lock_assert_held(&w->fs_lock);

	if (!wi || wi->dcache || !build)
		return wi ? wi->dcache : NULL;
	if (!LINUX_S_ISDIR(wi->mode))	/* its format bits never change */
		return NULL;
	dc = dcache_build(w, dir);
	ls_rwlock_wrlock(&wi->dc_lock, &lc_dcache_w);
	wi->dcache = dc;
	ls_rwlock_unlock(&wi->dc_lock);
	return dc;
}

/* Keep a cached directory exact: @name now points at @ino (0: removed). */
static void dir_dcache_note(struct wbfs *w, ext2_ino_t dir, const char *name, ext2_ino_t ino)
{
	struct winode *wi = winode_find(w, dir);

	if (!wi || !wi->dcache)
		return;
	ls_rwlock_wrlock(&wi->dc_lock, &lc_dcache_w);
	if (!ino) {
		dcache_remove(wi->dcache, name);
	} else if (dcache_set(wi->dcache, name, ino)) {
		dcache_free(wi->dcache);	/* out of memory: scan instead */
		wi->dcache = NULL;
	}
	ls_rwlock_unlock(&wi->dc_lock);
}

/* The directory itself, never the cache. */
static int lookup_disk_locked(struct wbfs *w, ext2_ino_t dir, const char *name, ext2_ino_t *ino)
{
	errcode_t err = ext2fs_lookup(w->fs, dir, name, (int)strlen(name), NULL, ino);

	lock_assert_held(&w->fs_lock);

	if (err == EXT2_ET_FILE_NOT_FOUND)
		return -ENOENT;
	return -ext4_errno(err);
}

static int lookup_locked(struct wbfs *w, ext2_ino_t dir, const char *name, ext2_ino_t *ino)
{
	struct dcache *dc = dir_dcache_locked(w, dir, true);

	lock_assert_held(&w->fs_lock);

	return dc ? dcache_lookup(dc, name, ino) : lookup_disk_locked(w, dir, name, ino);
}

/* 0 when @name does not exist in @dir, -EEXIST when it does, else -errno. */
static int name_free_locked(struct wbfs *w, ext2_ino_t dir, const char *name)
{
	ext2_ino_t ino;
	int ret = lookup_locked(w, dir, name, &ino);

	lock_assert_held(&w->fs_lock);

	if (ret == -ENOENT)
		return 0;
	return ret ? ret : -EEXIST;
}

/*
 * A LOOKUP: from @parent's name cache under its dc_lock alone when it has
 * one, so lookups run beside each other and beside every operation that
 * holds fs_lock; else under fs_lock, building the cache. The in-memory
 * inode is used without a reference: the kernel holds @parent while its
 * LOOKUP is in flight (and the root for the mount's life), as for
 * winode_stat's unlocked path.
 */
int dir_lookup(struct wbfs *w, ext2_ino_t parent, const char *name, ext2_ino_t *ino)
{
	struct winode *wi = winode_find(w, parent);
	int ret = -EAGAIN;

	if (wi) {
		ls_rwlock_rdlock(&wi->dc_lock, &lc_dcache_r);
		if (wi->dcache)
			ret = dcache_lookup(wi->dcache, name, ino);
		ls_rwlock_unlock(&wi->dc_lock);
	}
	if (ret != -EAGAIN) {
		atomic_fetch_add(&w->stats.nr_lookup_unlocked, 1);
		return ret;
	}
	ext4_lock(w);
	ret = lookup_locked(w, parent, name, ino);
	ext4_unlock(w);
	return ret;
}

/*
 * Add an entry, growing the directory by a block when it is full: an
 * allocation by the user, @room (WBFS_ROOM_PRIV for root), as in ext4.
 */
static int dir_add_locked(struct wbfs *w, ext2_ino_t dir, const char *name, ext2_ino_t ino,
			  int ftype, unsigned room)
{
	errcode_t err = ext2fs_link(w->fs, dir, name, ino, ftype);

	lock_assert_held(&w->fs_lock);

	if (err == EXT2_ET_DIR_NO_SPACE) {
		if (ext4_claim_room(w, 2, room))
			return -ENOSPC;
		err = ext2fs_expand_dir(w->fs, dir);
		if (!err)
			err = ext2fs_link(w->fs, dir, name, ino, ftype);
	}
	if (!err)
		dir_dcache_note(w, dir, name, ino);
	return -ext4_errno(err);
}

static int unlink_entry_locked(struct wbfs *w, ext2_ino_t dir, const char *name, ext2_ino_t ino)
{
	errcode_t err = ext2fs_unlink(w->fs, dir, name, ino, 0);

	lock_assert_held(&w->fs_lock);

	if (!err)
		dir_dcache_note(w, dir, name, 0);
	return -ext4_errno(err);
}

/* Stamp mtime/ctime of a directory whose entries changed; @links adjusts i_links_count. */
static int dir_touch_locked(struct wbfs *w, ext2_ino_t dir, int links)
{
	struct ext2_inode_large in;
	struct timespec now;
	int ret = ext4_read_inode(w, dir, &in);

	lock_assert_held(&w->fs_lock);

	if (ret)
		return ret;
	if (links > 0 && in.i_links_count != 1) {
		in.i_links_count++;
		if (in.i_links_count >= WBFS_LINK_MAX)
			in.i_links_count = 1;	/* dir_nlink: count no longer kept */
	} else if (links < 0 && in.i_links_count > 2) {
		in.i_links_count--;
	}
	ext4_now(&now);
	ext4_ts_set(&in, TS_MTIME, &now);
	ext4_ts_set(&in, TS_CTIME, &now);
	return ext4_write_inode(w, dir, &in);
}

/* A subdirectory may be added under @dir (EMLINK without dir_nlink). */
static int dir_may_add_subdir(struct wbfs *w, ext2_ino_t dir)
{
	struct ext2_inode_large in;
	int ret = ext4_read_inode(w, dir, &in);

	if (ret)
		return ret;
	if (!ext2fs_has_feature_dir_nlink(w->fs->super) && in.i_links_count + 1 >= WBFS_LINK_MAX)
		return -EMLINK;
	return 0;
}

static void inode_init_owner(struct ext2_inode_large *in, ext2_ino_t parent_gid_src,
			     const struct ext2_inode_large *parent, mode_t mode,
			     const struct fuse_ctx *ctx)
{
	gid_t gid = ctx->gid;

	if (parent->i_mode & S_ISGID) {
		gid = inode_gid(*parent);
		if (S_ISDIR(mode))
			mode |= S_ISGID;
	}
	in->i_mode = (uint16_t)mode;
	in->i_uid = (uint16_t)ctx->uid;
	ext2fs_set_i_uid_high(*in, ctx->uid >> 16);
	in->i_gid = (uint16_t)gid;
	ext2fs_set_i_gid_high(*in, gid >> 16);
	(void)parent_gid_src;
}

static void inode_init_times(struct ext2_inode_large *in)
{
	struct timespec now;

	ext4_now(&now);
	ext4_ts_set(in, TS_ATIME, &now);
	ext4_ts_set(in, TS_MTIME, &now);
	ext4_ts_set(in, TS_CTIME, &now);
	ext4_ts_set(in, TS_CRTIME, &now);
}

static void encode_rdev(struct ext2_inode_large *in, dev_t rdev)
{
	unsigned maj = major(rdev), min = minor(rdev);

	if (maj < 256 && min < 256) {
		in->i_block[0] = maj * 256 + min;
		in->i_block[1] = 0;
	} else {
		in->i_block[0] = 0;
		in->i_block[1] = (min & 0xff) | (maj << 8) | ((min & ~0xffU) << 12);
	}
}

static int new_inode_locked(struct wbfs *w, ext2_ino_t parent, mode_t mode, dev_t rdev,
			    const struct fuse_ctx *ctx, ext2_ino_t ino)
{
	struct ext2_inode_large in, pin;
	int ret = ext4_read_inode(w, parent, &pin);

	lock_assert_held(&w->fs_lock);

	if (ret)
		return ret;
	memset(&in, 0, sizeof(in));
	in.i_extra_isize = sizeof(struct ext2_inode_large) - EXT2_GOOD_OLD_INODE_SIZE;
	inode_init_owner(&in, 0, &pin, mode, ctx);
	in.i_links_count = 1;
	in.i_generation = export_new_generation();
	in.i_flags = iflags_inherit(mode, pin.i_flags);
	if (S_ISCHR(mode) || S_ISBLK(mode)) {
		encode_rdev(&in, rdev);
	} else if (S_ISREG(mode) && ext2fs_has_feature_extents(w->fs->super)) {
		ext2_extent_handle_t h;

		if (!ext2fs_extent_open2(w->fs, ino, (struct ext2_inode *)&in, &h))
			ext2fs_extent_free(h);
	}
	ret = -ext4_errno(ext2fs_write_new_inode(w->fs, ino, (struct ext2_inode *)&in));
	if (ret)
		return ret;
	inode_init_times(&in);
	return ext4_write_inode(w, ino, &in);
}

/* Metadata an error left half changed: the filesystem stays marked not clean. */
static void dir_left_inconsistent(struct wbfs *w, const char *what, ext2_ino_t ino, int err)
{
	w->fs_error = true;
	fprintf(msg_stream(), "wbcfs: %s: %s of inode %u failed half way (%s) and could not be"
		" undone; the filesystem is left marked not clean (run e2fsck)\n",
		w->dev_path, what, ino, strerror(-err));
}

/*
 * Undo a create, mknod, mkdir or symlink that failed after choosing @ino:
 * its entry @name in @parent goes if it was added, and the inode is freed
 * if it was counted as in use (with the link it gave a new directory's
 * parent), or else marked deleted on disk if it was written at all.
 * An inode whose table block cannot be read was never written: only its
 * bitmap bit is given back then.
 */
static void undo_new_locked(struct wbfs *w, ext2_ino_t parent, const char *name,
			    ext2_ino_t ino, bool is_dir)
{
	struct ext2_inode_large in;
	ext2_ino_t cur;
	int ret = 0, rd;

	lock_assert_held(&w->fs_lock);

	if (!lookup_disk_locked(w, parent, name, &cur) && cur == ino)
		ret = unlink_entry_locked(w, parent, name, ino);
	rd = ext4_read_inode(w, ino, &in);
	if (ext2fs_test_inode_bitmap2(w->fs->inode_map, ino)) {
		if (!ret && is_dir)
			ret = dir_touch_locked(w, parent, -1);
		if (rd)
			ext4_inode_alloc_stats(w, ino, -1, is_dir);
		else if (!ret)
			ret = winode_free_locked(w, ino);
	} else if (!rd && in.i_links_count) {
		struct timespec now;

		ext4_now(&now);
		in.i_links_count = 0;
		in.i_dtime = (uint32_t)now.tv_sec;
		ret = ext4_write_inode(w, ino, &in);
	}
	if (ret)
		dir_left_inconsistent(w, "creation", ino, ret);
}

/*
 * The number of a new inode: @claimed (found under fs_lock shared by
 * ext4_claim_inode, and taken back since), unless the bitmap has it in
 * use after all, else ext2fs_new_inode's choice. Context: fs_lock.
 */
static errcode_t new_inode_number_locked(struct wbfs *w, ext2_ino_t parent, mode_t mode,
					 ext2_ino_t claimed, ext2_ino_t *ino)
{
	lock_assert_held(&w->fs_lock);

	if (claimed && !ext2fs_test_inode_bitmap2(w->fs->inode_map, claimed)) {
		*ino = claimed;
		return 0;
	}
	return ext2fs_new_inode(w->fs, parent, (int)mode, NULL, ino);
}

int dir_create(struct wbfs *w, ext2_ino_t parent, const char *name, mode_t mode,
	       dev_t rdev, const struct fuse_ctx *ctx, ext2_ino_t *ino)
{
	struct acl_inherit ai = { 0 };
	ext2_ino_t claimed = ext4_claim_inode(w, parent);
	int ret;

	ext4_lock(w);
	if (claimed)
		ext4_claim_inode_take(w, claimed);
	ret = name_free_locked(w, parent, name);
	if (ret)
		goto out;
	ret = ext4_meta_room(w, 2);
	if (!ret)
		ret = xattr_acl_inherit_locked(w, parent, &mode, ctx->umask, &ai);
	if (ret)
		goto out;
	ret = -ext4_errno(new_inode_number_locked(w, parent, mode, claimed, ino));
	if (ret)
		goto out;
	ret = dir_add_locked(w, parent, name, *ino, ftype_of(mode),
			     ext4_privileged(w, ctx) ? WBFS_ROOM_PRIV : 0);
	if (!ret) {
		ext4_inode_alloc_stats(w, *ino, +1, 0);
		ret = new_inode_locked(w, parent, mode, rdev, ctx, *ino);
	}
	if (!ret)
		ret = xattr_acl_inherit_store_locked(w, *ino, &ai);
	if (!ret)
		ret = dir_touch_locked(w, parent, 0);
	if (ret)
		undo_new_locked(w, parent, name, *ino, false);
out:
	xattr_acl_inherit_done(&ai);
	ext4_unlock(w);
	return ret;
}

/*
 * O_TMPFILE: a regular file with no name and no link, freed at its last
 * close unless linkat() gives it one (dir_link).
 */
int dir_tmpfile(struct wbfs *w, ext2_ino_t parent, mode_t mode, const struct fuse_ctx *ctx,
		ext2_ino_t *ino)
{
	struct acl_inherit ai = { 0 };
	struct ext2_inode_large in;
	ext2_ino_t claimed = ext4_claim_inode(w, parent);
	int ret;

	ext4_lock(w);
	if (claimed)
		ext4_claim_inode_take(w, claimed);
	ret = ext4_read_inode(w, parent, &in);
	if (!ret && !LINUX_S_ISDIR(in.i_mode))
		ret = -ENOTDIR;
	if (!ret)
		ret = ext4_meta_room(w, 1);
	if (!ret)	/* the default ACL, or else the umask, as for create */
		ret = xattr_acl_inherit_locked(w, parent, &mode, ctx->umask, &ai);
	if (!ret)
		ret = -ext4_errno(new_inode_number_locked(w, parent, mode, claimed, ino));
	if (ret)
		goto out;
	ext4_inode_alloc_stats(w, *ino, +1, 0);
	ret = new_inode_locked(w, parent, mode, 0, ctx, *ino);
	if (!ret)
		ret = xattr_acl_inherit_store_locked(w, *ino, &ai);
	if (!ret)
		ret = ext4_read_inode(w, *ino, &in);
	if (!ret) {
		in.i_links_count = 0;
		ret = ext4_write_inode(w, *ino, &in);
	}
	if (ret)
		winode_free_locked(w, *ino);
out:
	xattr_acl_inherit_done(&ai);
	ext4_unlock(w);
	return ret;
}

/* Set owner, mode and times of a directory or symlink libext2fs just made. */
static int fix_new_inode_locked(struct wbfs *w, ext2_ino_t parent, ext2_ino_t ino,
				mode_t mode, const struct fuse_ctx *ctx)
{
	struct ext2_inode_large in, pin;
	int ret = ext4_read_inode(w, parent, &pin);

	lock_assert_held(&w->fs_lock);

	if (!ret)
		ret = ext4_read_inode(w, ino, &in);
	if (ret)
		return ret;
	inode_init_owner(&in, 0, &pin, mode, ctx);
	inode_init_times(&in);
	in.i_flags |= iflags_inherit(mode, pin.i_flags);
	if (!S_ISDIR(mode))
		in.i_generation = export_new_generation();
	ret = ext4_write_inode(w, ino, &in);
	if (!ret && S_ISDIR(mode))
		ret = export_set_dir_generation_locked(w, ino);
	return ret;
}

int dir_mkdir(struct wbfs *w, ext2_ino_t parent, const char *name, mode_t mode,
	      const struct fuse_ctx *ctx, ext2_ino_t *ino)
{
	struct acl_inherit ai = { 0 };
	struct ext2_inode_large pin;
	unsigned room;
	errcode_t err;
	int ret, before;

	ext2_ino_t claimed = ext4_claim_inode(w, parent);

	mode = S_IFDIR | (mode & 07777);
	*ino = 0;
	ext4_lock(w);
	if (claimed)
		ext4_claim_inode_take(w, claimed);
	ret = name_free_locked(w, parent, name);
	if (ret)
		goto out;
	room = ext4_privileged(w, ctx) ? WBFS_ROOM_PRIV : 0;
	ret = ext4_claim_room(w, 1, room);	/* the new directory's block */
	if (!ret)
		ret = dir_may_add_subdir(w, parent);
	if (!ret)
		ret = ext4_read_inode(w, parent, &pin);
	if (!ret)
		ret = xattr_acl_inherit_locked(w, parent, &mode, ctx->umask, &ai);
	if (ret)
		goto out;
	before = pin.i_links_count;
	/* the inode ext2fs_mkdir takes: known, so a failure can be undone */
	err = new_inode_number_locked(w, parent, LINUX_S_IFDIR | 0755, claimed, ino);
	if (!err)
		err = ext2fs_mkdir(w->fs, parent, *ino, name);
	if (err == EXT2_ET_DIR_NO_SPACE) {
		if (ext4_claim_room(w, 3, room)) {
			ret = -ENOSPC;
			goto out;
		}
		err = ext2fs_expand_dir(w->fs, parent);
		if (!err)
			err = ext2fs_mkdir(w->fs, parent, *ino, name);
	}
	/* ext2fs_mkdir marks the inode in use itself (even when it fails late) */
	if (*ino)
		ext4_ib_changed(w, *ino);
	ret = -ext4_errno(err);
	if (!err) {
		dir_dcache_note(w, parent, name, *ino);
		ret = fix_new_inode_locked(w, parent, *ino, mode, ctx);
	}
	if (!ret)
		ret = xattr_acl_inherit_store_locked(w, *ino, &ai);
	if (!ret && (before == 1 || before + 1 >= WBFS_LINK_MAX) &&
	    !ext4_read_inode(w, parent, &pin)) {
		pin.i_links_count = 1;
		ret = ext4_write_inode(w, parent, &pin);
	}
	if (!ret)
		ret = dir_touch_locked(w, parent, 0);
	if (ret && *ino)
		undo_new_locked(w, parent, name, *ino, true);
out:
	xattr_acl_inherit_done(&ai);
	ext4_unlock(w);
	return ret;
}

int dir_symlink(struct wbfs *w, ext2_ino_t parent, const char *name, const char *target,
		const struct fuse_ctx *ctx, ext2_ino_t *ino)
{
	unsigned room;
	errcode_t err;
	int ret;

	ext2_ino_t claimed;

	if (strlen(target) >= w->fs->blocksize)
		return -ENAMETOOLONG;
	*ino = 0;
	claimed = ext4_claim_inode(w, parent);
	ext4_lock(w);
	if (claimed)
		ext4_claim_inode_take(w, claimed);
	ret = name_free_locked(w, parent, name);
	if (ret)
		goto out;
	/* a target that does not fit in the inode takes a block */
	room = ext4_privileged(w, ctx) ? WBFS_ROOM_PRIV : 0;
	if (strlen(target) >= sizeof(((struct ext2_inode *)0)->i_block))
		ret = ext4_claim_room(w, 1, room);
	else
		ret = ext4_meta_room(w, 3);
	if (ret)
		goto out;
	err = new_inode_number_locked(w, parent, LINUX_S_IFLNK | 0777, claimed, ino);
	if (!err)
		err = ext2fs_symlink(w->fs, parent, *ino, name, target);
	if (err == EXT2_ET_DIR_NO_SPACE) {
		if (ext4_claim_room(w, 3, room)) {
			ret = -ENOSPC;
			goto out;
		}
		err = ext2fs_expand_dir(w->fs, parent);
		if (!err)
			err = ext2fs_symlink(w->fs, parent, *ino, name, target);
	}
	/* as for ext2fs_mkdir */
	if (*ino)
		ext4_ib_changed(w, *ino);
	ret = -ext4_errno(err);
	if (!err) {
		dir_dcache_note(w, parent, name, *ino);
		ret = fix_new_inode_locked(w, parent, *ino, S_IFLNK | 0777, ctx);
	}
	if (!ret)
		ret = dir_touch_locked(w, parent, 0);
	if (ret && *ino)
		undo_new_locked(w, parent, name, *ino, false);
out:
	ext4_unlock(w);
	return ret;
}

int dir_link(struct wbfs *w, ext2_ino_t ino, ext2_ino_t parent, const char *name,
	     bool privileged)
{
	struct ext2_inode_large in;
	struct winode *wi;
	struct timespec now;
	int ret;

	ext4_lock(w);
	ret = name_free_locked(w, parent, name);
	if (ret)
		goto out;
	ret = ext4_read_inode(w, ino, &in);
	if (ret)
		goto out;
	if (in.i_links_count >= WBFS_LINK_MAX) {
		ret = -EMLINK;
		goto out;
	}
	/* no link left: only an open O_TMPFILE file may get a name (the
	 * kernel refuses to link any other deleted file) */
	wi = in.i_links_count ? NULL : winode_find(w, ino);
	if (!in.i_links_count && (!wi || wi->freed || LINUX_S_ISDIR(in.i_mode))) {
		ret = -ENOENT;
		goto out;
	}
	ret = ext4_meta_room(w, 1);
	if (!ret)
		ret = dir_add_locked(w, parent, name, ino, ftype_of(in.i_mode),
				     privileged ? WBFS_ROOM_PRIV : 0);
	if (ret)
		goto out;
	/* the parent first: a failure there leaves only the entry to take back */
	ret = dir_touch_locked(w, parent, 0);
	if (!ret && !in.i_links_count)
		ret = winode_orphan_del_locked(w, ino, &in);
	if (!ret) {
		in.i_links_count++;
		winode_fold_attrs_locked(w, ino, &in);
		ext4_now(&now);
		ext4_ts_set(&in, TS_CTIME, &now);
		ret = ext4_write_inode(w, ino, &in);
	}
	if (!ret && wi)
		wi->unlinked = false;	/* named now: it outlives its last close */
	if (ret) {
		int r = unlink_entry_locked(w, parent, name, ino);

		if (r)
			dir_left_inconsistent(w, "link", ino, r);
	}
out:
	ext4_unlock(w);
	return ret;
}

static int empty_cb(ext2_ino_t dir, int entry, struct ext2_dir_entry *d, int offset,
		    int blocksize, char *buf, void *priv)
{
	if (entry == DIRENT_DOT_FILE || entry == DIRENT_DOT_DOT_FILE || !d->inode)
		return 0;
	*(bool *)priv = false;
	return DIRENT_ABORT;
}

static int dir_is_empty_locked(struct wbfs *w, ext2_ino_t dir)
{
	bool empty = true;
	errcode_t err = ext2fs_dir_iterate2(w->fs, dir, 0, NULL, empty_cb, &empty);

	lock_assert_held(&w->fs_lock);

	if (err)
		return -ext4_errno(err);
	return empty ? 0 : -ENOTEMPTY;
}

int dir_unlink(struct wbfs *w, ext2_ino_t parent, const char *name, bool is_rmdir)
{
	struct ext2_inode_large in;
	ext2_ino_t ino;
	int ret;

	ext4_lock(w);
	ret = lookup_locked(w, parent, name, &ino);
	if (!ret)
		ret = ext4_read_inode(w, ino, &in);
	if (ret)
		goto out;
	if (in.i_flags & DIR_NO_REMOVE_FL)
		ret = -EPERM;	/* the directory's own flags: checked by the caller */
	else if (is_rmdir && !LINUX_S_ISDIR(in.i_mode))
		ret = -ENOTDIR;
	else if (!is_rmdir && LINUX_S_ISDIR(in.i_mode))
		ret = -EISDIR;
	else if (is_rmdir)
		ret = dir_is_empty_locked(w, ino);
	if (ret)
		goto out;
	ret = unlink_entry_locked(w, parent, name, ino);
	if (!ret)
		ret = dir_touch_locked(w, parent, is_rmdir ? -1 : 0);
	if (!ret)
		ret = winode_drop_link_locked(w, ino, &in);
out:
	ext4_unlock(w);
	return ret;
}

struct set_entry_ctx {
	const char *name;
	size_t len;
	ext2_ino_t ino;
	int ftype;
	bool done;
};

static int set_entry_cb(ext2_ino_t dir, int entry, struct ext2_dir_entry *d, int offset,
			int blocksize, char *buf, void *priv)
{
	struct set_entry_ctx *c = priv;

	if (!d->inode || ext2fs_dirent_name_len(d) != (int)c->len ||
	    memcmp(d->name, c->name, c->len))
		return 0;
	d->inode = c->ino;
	if (ext2fs_dirent_file_type(d) != 0 || c->ftype == EXT2_FT_DIR)
		ext2fs_dirent_set_file_type(d, c->ftype);
	c->done = true;
	return DIRENT_CHANGED | DIRENT_ABORT;
}

/* Point the existing entry @name of @dir at @ino. */
static int set_entry_locked(struct wbfs *w, ext2_ino_t dir, const char *name, ext2_ino_t ino,
			    int ftype)
{
	struct set_entry_ctx c = { name, strlen(name), ino, ftype, false };
	errcode_t err;

	lock_assert_held(&w->fs_lock);

	if (!ext2fs_has_feature_filetype(w->fs->super))
		c.ftype = 0;
	err = ext2fs_dir_iterate2(w->fs, dir, DIRENT_FLAG_INCLUDE_EMPTY, NULL, set_entry_cb, &c);
	if (err)
		return -ext4_errno(err);
	if (!c.done)
		return -ENOENT;
	dir_dcache_note(w, dir, name, ino);
	return 0;
}

/* A directory moved from @from to @to: its ".." and both link counts. */
static int reparent_locked(struct wbfs *w, ext2_ino_t dir, ext2_ino_t from, ext2_ino_t to)
{
	int ret;

	lock_assert_held(&w->fs_lock);

	if (from == to)
		return 0;
	ret = set_entry_locked(w, dir, "..", to, EXT2_FT_DIR);
	if (!ret)
		ret = dir_touch_locked(w, from, -1);
	if (!ret)
		ret = dir_touch_locked(w, to, +1);
	return ret;
}

static int rename_exchange_locked(struct wbfs *w, ext2_ino_t p1, const char *n1, ext2_ino_t src,
				  const struct ext2_inode_large *si, ext2_ino_t p2,
				  const char *n2, ext2_ino_t dst, const struct ext2_inode_large *di)
{
	bool sdir = LINUX_S_ISDIR(si->i_mode), ddir = LINUX_S_ISDIR(di->i_mode);
	int ret;

	lock_assert_held(&w->fs_lock);

	ret = set_entry_locked(w, p1, n1, dst, ftype_of(di->i_mode));
	if (ret)
		return ret;
	ret = set_entry_locked(w, p2, n2, src, ftype_of(si->i_mode));
	if (ret) {
		int r = set_entry_locked(w, p1, n1, src, ftype_of(si->i_mode));

		if (r)
			dir_left_inconsistent(w, "rename", src, r);
		return ret;
	}
	if (sdir)
		ret = reparent_locked(w, src, p1, p2);
	if (!ret && ddir)
		ret = reparent_locked(w, dst, p2, p1);
	if (ret)
		dir_left_inconsistent(w, "rename", sdir ? src : dst, ret);
	if (!ret)
		ret = winode_touch_ctime_locked(w, src);
	if (!ret)
		ret = winode_touch_ctime_locked(w, dst);
	if (!ret)
		ret = dir_touch_locked(w, p1, 0);
	if (!ret && p2 != p1)
		ret = dir_touch_locked(w, p2, 0);
	return ret;
}

/* Checks before @src replaces @dst (both exist, different inodes). */
static int rename_replace_check(struct wbfs *w, const struct ext2_inode_large *si,
				ext2_ino_t dst, const struct ext2_inode_large *di)
{
	if (LINUX_S_ISDIR(si->i_mode)) {
		if (!LINUX_S_ISDIR(di->i_mode))
			return -ENOTDIR;
		return dir_is_empty_locked(w, dst);
	}
	return LINUX_S_ISDIR(di->i_mode) ? -EISDIR : 0;
}

/*
 * RENAME_WHITEOUT: the whiteout that takes the source's name, a character
 * device 0:0 with mode 0, owned as a new file of @ctx in @dir.
 */
static int whiteout_new_locked(struct wbfs *w, ext2_ino_t dir, const struct fuse_ctx *ctx,
			       ext2_ino_t *ino)
{
	int ret = ext4_meta_room(w, 1);

	lock_assert_held(&w->fs_lock);

	if (!ret)
		ret = -ext4_errno(ext2fs_new_inode(w->fs, dir, S_IFCHR, NULL, ino));
	if (ret)
		return ret;
	ext4_inode_alloc_stats(w, *ino, +1, 0);
	ret = new_inode_locked(w, dir, S_IFCHR, makedev(0, 0), ctx, *ino);
	if (ret)
		winode_free_locked(w, *ino);
	return ret;
}

static int rename_locked(struct wbfs *w, ext2_ino_t p1, const char *n1, ext2_ino_t p2,
			 const char *n2, unsigned flags, const struct fuse_ctx *ctx, unsigned room,
			 ext2_ino_t moved[2])
{
	struct ext2_inode_large si, di;
	ext2_ino_t src, dst = 0, wo = 0;
	bool sdir;
	int ret;

	lock_assert_held(&w->fs_lock);

	ret = lookup_locked(w, p1, n1, &src);
	if (!ret)
		ret = ext4_read_inode(w, src, &si);
	if (ret)
		return ret;
	if (si.i_flags & DIR_NO_REMOVE_FL)
		return -EPERM;
	sdir = LINUX_S_ISDIR(si.i_mode);
	if (sdir)
		moved[0] = src;
	ret = lookup_locked(w, p2, n2, &dst);
	if (ret && ret != -ENOENT)
		return ret;
	if (!ret)
		ret = ext4_read_inode(w, dst, &di);
	else
		dst = 0;
	if (ret && ret != -ENOENT)
		return ret;
	if (dst && dst != src && (di.i_flags & DIR_NO_REMOVE_FL))
		return -EPERM;
	if (dst && (flags & RENAME_EXCHANGE) && LINUX_S_ISDIR(di.i_mode))
		moved[1] = dst;
	if (flags & RENAME_EXCHANGE) {
		if (!dst)
			return -ENOENT;
		return rename_exchange_locked(w, p1, n1, src, &si, p2, n2, dst, &di);
	}
	if (dst && (flags & RENAME_NOREPLACE))
		return -EEXIST;
	if (dst == src)
		return 0;
	if (dst) {
		ret = rename_replace_check(w, &si, dst, &di);
	} else {
		ret = ext4_meta_room(w, 1);
		if (!ret && sdir && p1 != p2)
			ret = dir_may_add_subdir(w, p2);
	}
	/* the whiteout exists before any entry changes: ENOSPC leaves all as it was */
	if (!ret && (flags & RENAME_WHITEOUT))
		ret = whiteout_new_locked(w, p1, ctx, &wo);
	if (ret)
		return ret;
	if (dst) {
		ret = set_entry_locked(w, p2, n2, src, ftype_of(si.i_mode));
	} else {
		ret = dir_add_locked(w, p2, n2, src, ftype_of(si.i_mode), room);
	}
	if (ret) {
		if (wo)
			winode_free_locked(w, wo);
		return ret;
	}
	/*
	 * A moved directory's "..", then the old name (or the whiteout in its
	 * place), go before any link count changes: until then a failure is
	 * undone by putting ".." back and taking the new name back.
	 */
	if (sdir && p1 != p2)
		ret = set_entry_locked(w, src, "..", p2, EXT2_FT_DIR);
	if (!ret) {
		ret = wo ? set_entry_locked(w, p1, n1, wo, EXT2_FT_CHRDEV) :
			   unlink_entry_locked(w, p1, n1, src);
		if (ret && sdir && p1 != p2 &&
		    set_entry_locked(w, src, "..", p1, EXT2_FT_DIR))
			dir_left_inconsistent(w, "rename", src, ret);
	}
	if (ret) {
		int r = dst ? set_entry_locked(w, p2, n2, dst, ftype_of(di.i_mode)) :
			      unlink_entry_locked(w, p2, n2, src);

		if (r)
			dir_left_inconsistent(w, "rename", src, r);
		if (wo)
			winode_free_locked(w, wo);
		return ret;
	}
	if (dst && LINUX_S_ISDIR(di.i_mode))
		ret = dir_touch_locked(w, p2, -1);
	if (!ret && dst)
		ret = winode_drop_link_locked(w, dst, &di);
	if (!ret && sdir && p1 != p2)
		ret = dir_touch_locked(w, p1, -1);
	if (!ret && sdir && p1 != p2)
		ret = dir_touch_locked(w, p2, +1);
	if (ret) {
		dir_left_inconsistent(w, "rename", src, ret);
		return ret;
	}
	ret = winode_touch_ctime_locked(w, src);
	if (!ret)
		ret = dir_touch_locked(w, p1, 0);
	if (!ret && p2 != p1)
		ret = dir_touch_locked(w, p2, 0);
	return ret;
}

/*
 * renameat2(2): flags RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT.
 * On success @moved holds the directories that moved (0: none), whose
 * ".." and ctime changed.
 */
int dir_rename(struct wbfs *w, ext2_ino_t p1, const char *n1, ext2_ino_t p2,
	       const char *n2, unsigned flags, const struct fuse_ctx *ctx, bool privileged,
	       ext2_ino_t moved[2])
{
	int ret;

	moved[0] = moved[1] = 0;
	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT))
		return -EINVAL;
	if ((flags & (RENAME_NOREPLACE | RENAME_WHITEOUT)) && (flags & RENAME_EXCHANGE))
		return -EINVAL;
	ext4_lock(w);
	ret = rename_locked(w, p1, n1, p2, n2, flags, ctx, privileged ? WBFS_ROOM_PRIV : 0,
			    moved);
	ext4_unlock(w);
	return ret;
}
