// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The FUSE low-level handlers: argument checks (NAME_MAX, read-only),
 * translation to the dir/data/xattr layers, and replies. Each handler's
 * comment lists its valid replies. No handler holds a lock across a
 * fuse_reply_*. Files are opened direct_io, so the kernel keeps no copy of
 * file data and every read and write reaches the daemon's cache.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fuse_i.h"

/* A request on a control inode (daemon/ctl.c) is answered there. */
/* Until the daemon sets its hooks, no inode and no name is the control directory's. */
static bool no_ctl_owns(fuse_ino_t ino)
{
	return false;
}

static bool no_ctl_is_root_name(struct wbfs *w, fuse_ino_t parent, const char *name)
{
	return false;
}

static int no_ctl_check_name(struct wbfs *w, fuse_ino_t parent, const char *name)
{
	return 0;
}

static void no_ctl_hide_in_root(struct wbfs *w, struct dir_snap *snap)
{
}

static const struct ops_ctl_hooks no_ctl = {
	.owns = no_ctl_owns,
	.is_root_name = no_ctl_is_root_name,
	.check_name = no_ctl_check_name,
	.hide_in_root = no_ctl_hide_in_root,
};

const struct ops_ctl_hooks *ops_ctl = &no_ctl;

void ops_set_ctl(const struct ops_ctl_hooks *h)
{
	ops_ctl = h;
}

/* Who sent @req: ids and, for an unprivileged caller, its groups. */
void ops_req_cred(fuse_req_t req, struct wbfs_cred *c)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	int n = 0;

	c->uid = ctx->uid;
	c->gid = ctx->gid;
	if (ctx->uid) {
		n = fuse_req_getgroups(req, (int)(sizeof(c->groups) / sizeof(c->groups[0])),
				       c->groups);
		if (n > (int)(sizeof(c->groups) / sizeof(c->groups[0])))
			n = (int)(sizeof(c->groups) / sizeof(c->groups[0]));
	}
	c->ngroups = n < 0 ? -1 : n;
}

static bool name_too_long(const char *name)
{
	return strlen(name) > WBFS_NAME_MAX;
}

/*
 * ext4's IS_DIRSYNC (ext4_handle_sync in create, mknod, mkdir, symlink,
 * link, unlink, rmdir, rename): a change of the entries of @dir, or of
 * @dir2 too for a rename (0: none), is committed before the reply. The
 * kernel's FUSE commits nothing for a dirsync mount: it is ours. An
 * error of the commit is the request's, as in ext4: the change is made,
 * not durable.
 */
int ops_dir_change_sync(struct wbfs *w, ext2_ino_t dir, ext2_ino_t dir2)
{
	if (!iflags_is_dirsync(w, dir) && (!dir2 || !iflags_is_dirsync(w, dir2)))
		return 0;
	atomic_fetch_add(&w->stats.nr_dirsync_ops, 1);
	return ext4_sync_durable(w);
}

/*
 * A change of @ino's size, attributes, xattrs or flags, committed before
 * the reply when @ino is IS_SYNC (a sync mount, chattr +S) or @sync (the
 * change came through an O_SYNC or O_DSYNC descriptor): ext4 commits its
 * truncate, setxattr and setflags of an IS_SYNC inode (ext4_handle_sync)
 * and fallocate through an O_SYNC one; wbcfs commits its mode, owner and
 * times too, and an ftruncate through an O_SYNC descriptor.
 */
int ops_inode_change_sync(struct wbfs *w, ext2_ino_t ino, bool sync)
{
	if (!sync && !iflags_is_sync(w, ino))
		return 0;
	atomic_fetch_add(&w->stats.nr_sync_metadata, 1);
	return ext4_sync_durable(w);
}

/* Reply an entry for @ino after a lookup or a create (counts one lookup). */
static void reply_entry(fuse_req_t req, struct wbfs *w, ext2_ino_t ino)
{
	struct fuse_entry_param e;
	struct winode *wi;
	int ret;

	memset(&e, 0, sizeof(e));
	wi = winode_get(w, ino, true);
	if (!wi) {
		fuse_reply_err(req, EIO);
		return;
	}
	ret = export_stat(w, ino, &e.attr, &e.generation);
	if (ret) {
		winode_forget(w, wi, 1);
		fuse_reply_err(req, -ret);
		return;
	}
	e.ino = ext4_fuse_ino(ino);
	e.attr_timeout = ATTR_TIMEOUT;
	e.entry_timeout = ENTRY_TIMEOUT;
	if (fuse_reply_entry(req, &e))
		winode_forget(w, wi, 1);
}

/* Valid replies: fuse_reply_entry, fuse_reply_err */
static void wbcfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct wbfs *w = req_wbfs(req);
	ext2_ino_t ino;
	int ret;

	if (name_too_long(name)) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	if (!strcmp(name, ".") || !strcmp(name, "..")) {
		/* the kernel resolving a file handle (export.c) */
		ret = export_lookup(w, parent, name, &ino);
		if (ret)
			fuse_reply_err(req, -ret);
		else
			reply_entry(req, w, ino);
		return;
	}
	if (ops_ctl_owns(parent) || ops_ctl->is_root_name(w, parent, name)) {
		ops_ctl->ops->lookup(req, parent, name);
		return;
	}
	ret = dir_lookup(w, ext4_ino(parent), name, &ino);
	if (ret == -ENOENT) {
		/*
		 * A negative entry the kernel may cache: every create, link,
		 * rename and mknod goes through this mount and replaces it.
		 * Workloads that probe for names before creating them (dbench:
		 * most of its lookups) save a round trip each.
		 */
		struct fuse_entry_param e = { .ino = 0, .entry_timeout = ENTRY_TIMEOUT };

		fuse_reply_entry(req, &e);
	} else if (ret) {
		fuse_reply_err(req, -ret);
	} else {
		reply_entry(req, w, ino);
	}
}

/* Valid replies: fuse_reply_none */
static void wbcfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	CTL_ROUTE(ino, forget, req, ino, nlookup);
	winode_forget_ino(req_wbfs(req), ext4_ino(ino), nlookup);
	fuse_reply_none(req);
}

/* Valid replies: fuse_reply_none */
static void wbcfs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	struct wbfs *w = req_wbfs(req);
	size_t i;

	for (i = 0; i < count; i++)
		if (!ops_ctl_owns(f[i].ino))
			winode_forget_ino(w, ext4_ino(f[i].ino), f[i].nlookup);
	fuse_reply_none(req);
}

/* Valid replies: fuse_reply_attr, fuse_reply_err */
static void wbcfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	int ret;

	CTL_ROUTE(ino, getattr, req, ino, fi);
	ret = winode_stat(req_wbfs(req), ext4_ino(ino), &st);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

static void set_time(struct ext2_inode_large *in, int which, int to_set, int now_flag,
		     const struct timespec *ts, const struct timespec *now)
{
	ext4_ts_set(in, which, (to_set & now_flag) ? now : ts);
}

/* mode, owner and times: one read-modify-write of the inode. */
static int setattr_inode(struct wbfs *w, ext2_ino_t ino, const struct stat *a, int to_set)
{
	struct ext2_inode_large in;
	struct timespec now;
	struct winode *wi;
	int ret;

	ext4_lock(w);
	ret = ext4_read_inode(w, ino, &in);
	if (ret)
		goto out;
	winode_fold_attrs_locked(w, ino, &in);
	/* stamped under the lock: no change that waited for it gets an earlier one */
	ext4_now(&now);
	if (to_set & FUSE_SET_ATTR_MODE)
		in.i_mode = (uint16_t)((in.i_mode & S_IFMT) | (a->st_mode & 07777));
	if (to_set & FUSE_SET_ATTR_UID) {
		in.i_uid = (uint16_t)a->st_uid;
		ext2fs_set_i_uid_high(in, a->st_uid >> 16);
	}
	if (to_set & FUSE_SET_ATTR_GID) {
		in.i_gid = (uint16_t)a->st_gid;
		ext2fs_set_i_gid_high(in, a->st_gid >> 16);
	}
	if (to_set & FUSE_SET_ATTR_ATIME)
		set_time(&in, TS_ATIME, to_set, FUSE_SET_ATTR_ATIME_NOW, &a->st_atim, &now);
	if (to_set & FUSE_SET_ATTR_MTIME)
		set_time(&in, TS_MTIME, to_set, FUSE_SET_ATTR_MTIME_NOW, &a->st_mtim, &now);
	ext4_ts_set(&in, TS_CTIME, (to_set & FUSE_SET_ATTR_CTIME) ? &a->st_ctim : &now);
	ret = ext4_write_inode(w, ino, &in);
	if (!ret && (to_set & FUSE_SET_ATTR_MODE))
		ret = xattr_acl_chmod_locked(w, ino, in.i_mode);
	wi = winode_find(w, ino);
	if (wi)
		wi->has_priv = (in.i_mode & (S_ISUID | S_ISGID)) != 0;
out:
	ext4_unlock(w);
	return ret;
}

/* Valid replies: fuse_reply_attr, fuse_reply_err */
static void wbcfs_setattr(fuse_req_t req, fuse_ino_t fino, struct stat *attr, int to_set,
			  struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);
	ext2_ino_t ino = ext4_ino(fino);
	struct stat st;
	bool sized = false;
	int ret = 0;

	CTL_ROUTE(fino, setattr, req, fino, attr, to_set, fi);
	if (w->ro) {
		fuse_reply_err(req, EROFS);
		return;
	}
	ret = iflags_check_setattr(w, ino, to_set);
	if (!ret && (to_set & FUSE_SET_ATTR_SIZE)) {
		struct winode *wi = winode_get(w, ino, false);

		if (!wi)
			ret = -EIO;
		else if (!S_ISREG(wi->mode))
			ret = S_ISDIR(wi->mode) ? -EISDIR : -EINVAL;
		else
			ret = data_truncate(w, wi, (uint64_t)attr->st_size);
		/* ftruncate(fd, 0): that descriptor's close writes the new data */
		if (!ret && !attr->st_size && fi && fi->fh)
			atomic_store(&fi_file(fi)->truncated, true);
		to_set &= ~FUSE_SET_ATTR_SIZE;
		sized = true;
	}
	/* a SETATTR with no field (chown(f, -1, -1)) still changes ctime */
	if (!ret && (to_set || !sized))
		ret = setattr_inode(w, ino, attr, to_set);
	if (!ret)
		ret = ops_inode_change_sync(w, ino, fi && fi->fh && (fi_file(fi)->flags & O_DSYNC));
	if (!ret)
		ret = winode_stat(w, ino, &st);
	if (!ret && S_ISDIR(st.st_mode))
		inval_dir_listing(w, winode_find(w, ino), false);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

/* Valid replies: fuse_reply_readlink, fuse_reply_err */
static void wbcfs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char buf[4097];
	int ret;

	CTL_ROUTE(ino, readlink, req, ino);
	ret = dir_readlink(req_wbfs(req), ext4_ino(ino), buf, sizeof(buf));
	if (ret) {
		fuse_reply_err(req, -ret);
	} else {
		struct winode *wi = winode_find(req_wbfs(req), ext4_ino(ino));

		if (wi)
			winode_accessed(req_wbfs(req), wi, 0);
		fuse_reply_readlink(req, buf);
	}
}

/* The control directory and its entries are never created, removed or renamed. */
int ops_check_new_name(struct wbfs *w, fuse_ino_t parent, const char *name)
{
	if (w->ro)
		return -EROFS;
	if (name_too_long(name))
		return -ENAMETOOLONG;
	if (ops_ctl->check_name(w, parent, name))
		return -EPERM;
	return iflags_check(w, ext4_ino(parent), EXT2_IMMUTABLE_FL);
}

/* Valid replies: fuse_reply_entry, fuse_reply_err */
static void wbcfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
			dev_t rdev)
{
	struct wbfs *w = req_wbfs(req);
	ext2_ino_t ino;
	int ret = ops_check_new_name(w, parent, name);

	if (!ret)
		ret = dir_create(w, ext4_ino(parent), name, mode, rdev, fuse_req_ctx(req), &ino);
	if (!ret)
		ret = ops_dir_change_sync(w, ext4_ino(parent), 0);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		reply_entry(req, w, ino);
}

/* Valid replies: fuse_reply_entry, fuse_reply_err */
static void wbcfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct wbfs *w = req_wbfs(req);
	ext2_ino_t ino;
	int ret = ops_check_new_name(w, parent, name);

	if (!ret)
		ret = dir_mkdir(w, ext4_ino(parent), name, mode, fuse_req_ctx(req), &ino);
	if (!ret)
		ret = ops_dir_change_sync(w, ext4_ino(parent), 0);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		reply_entry(req, w, ino);
}

/* Valid replies: fuse_reply_err */
static void wbcfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct wbfs *w = req_wbfs(req);
	int ret = ops_check_new_name(w, parent, name);

	if (!ret)
		ret = iflags_check(w, ext4_ino(parent), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL);
	if (!ret)
		ret = dir_unlink(w, ext4_ino(parent), name, false);
	if (!ret)
		ret = ops_dir_change_sync(w, ext4_ino(parent), 0);
	fuse_reply_err(req, -ret);
}

/* Valid replies: fuse_reply_err */
static void wbcfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct wbfs *w = req_wbfs(req);
	int ret = ops_check_new_name(w, parent, name);

	if (!ret)
		ret = iflags_check(w, ext4_ino(parent), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL);
	if (!ret)
		ret = dir_unlink(w, ext4_ino(parent), name, true);
	if (!ret)
		ret = ops_dir_change_sync(w, ext4_ino(parent), 0);
	fuse_reply_err(req, -ret);
}

/* Valid replies: fuse_reply_entry, fuse_reply_err */
static void wbcfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct wbfs *w = req_wbfs(req);
	ext2_ino_t ino;
	int ret = ops_check_new_name(w, parent, name);

	if (!ret)
		ret = dir_symlink(w, ext4_ino(parent), name, link, fuse_req_ctx(req), &ino);
	if (!ret)
		ret = ops_dir_change_sync(w, ext4_ino(parent), 0);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		reply_entry(req, w, ino);
}

/*
 * auto_da_alloc at a rename over a file (ext4_rename): the file moved in
 * is written before its new name is made, so that no commit holds the
 * name without the data (the pattern "write a temp file, rename it over
 * the real one", without fsync, would otherwise give a file of zeros
 * after a crash). Under the kernel's locks on both directories, so the
 * names looked up here are still the rename's. No lock of ours is held
 * while the data is written. A write error does not fail the rename (as
 * ext4): it is the file's, reported at its next fsync or close.
 */
static void rename_alloc_da(struct wbfs *w, ext2_ino_t p1, const char *n1, ext2_ino_t p2,
			    const char *n2, unsigned flags)
{
	ext2_ino_t src, dst;
	struct winode *wi;

	if (!w->opts.auto_da_alloc || (flags & (RENAME_EXCHANGE | RENAME_NOREPLACE)))
		return;
	if (dir_lookup(w, p2, n2, &dst) || dir_lookup(w, p1, n1, &src) || src == dst)
		return;
	/* not in memory: nothing dirty. In memory, it stays: the kernel
	 * holds a lookup of it for the rename */
	wi = winode_find(w, src);
	if (wi && LINUX_S_ISREG(wi->mode) && winode_alloc_da_blocks(w, wi) > 0)
		atomic_fetch_add(&w->stats.nr_auto_da_alloc_rename, 1);
}

/* Valid replies: fuse_reply_err */
static void wbcfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
			 fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	struct wbfs *w = req_wbfs(req);
	int ret = ops_check_new_name(w, parent, name);
	ext2_ino_t moved[2];
	int i;

	if (!ret)
		ret = ops_check_new_name(w, newparent, newname);
	if (!ret)
		ret = iflags_check(w, ext4_ino(parent), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL);
	if (!ret)
		ret = iflags_check(w, ext4_ino(newparent), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL);
	if (!ret && !w->ro)
		rename_alloc_da(w, ext4_ino(parent), name, ext4_ino(newparent), newname, flags);
	if (!ret)
		ret = dir_rename(w, ext4_ino(parent), name, ext4_ino(newparent), newname, flags,
				 fuse_req_ctx(req), ext4_privileged(w, fuse_req_ctx(req)), moved);
	/* a directory moved: its "..", which the kernel may list, changed */
	for (i = 0; !ret && i < 2; i++)
		if (moved[i])
			inval_dir_listing(w, winode_find(w, moved[i]), true);
	if (!ret)
		ret = ops_dir_change_sync(w, ext4_ino(parent), ext4_ino(newparent));
	fuse_reply_err(req, -ret);
}

/* Valid replies: fuse_reply_entry, fuse_reply_err */
static void wbcfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct wbfs *w = req_wbfs(req);
	int ret = ops_check_new_name(w, newparent, newname);

	if (!ret && ops_ctl_owns(ino))
		ret = -EPERM;
	if (!ret)
		ret = iflags_check(w, ext4_ino(ino), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL);
	if (!ret)
		ret = dir_link(w, ext4_ino(ino), ext4_ino(newparent), newname,
			       ext4_privileged(w, fuse_req_ctx(req)));
	if (!ret)
		ret = ops_dir_change_sync(w, ext4_ino(newparent), 0);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		reply_entry(req, w, ext4_ino(ino));
}

struct wdir {
	struct dir_snap snap;
	bool loaded;
};

/* Valid replies: fuse_reply_open, fuse_reply_err */
static void wbcfs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);
	struct wdir *d;

	CTL_ROUTE(ino, opendir, req, ino, fi);
	if (options_atime_mode(&w->opts) != ATIME_STRICT) {
		/*
		 * Refused once, the kernel sends no OPENDIR or RELEASEDIR for
		 * the rest of the connection (two round trips per opendir(3),
		 * a third of dbench's requests) and keeps every directory's
		 * entries across opens, dropping them itself when the
		 * directory changes through this mount (iversion and mtime).
		 * READDIR then comes without a handle and is served by
		 * position (dir_read_at). A listing that is to update atime
		 * must reach us: inval_dir_listing drops the kernel's
		 * copy when a change other than to the entries makes atime
		 * due.
		 * Under strictatime every listing must reach us: the handle
		 * stays, with the kernel's cache off.
		 */
		fuse_reply_err(req, ENOSYS);
		return;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->fh = (uintptr_t)d;
	/* strictatime: no cache_readdir, so every listing reaches us */
	fuse_reply_open(req, fi);
}

struct readdir_fill {
	fuse_req_t req;
	struct wbfs *w;
	bool root;
	char *buf;
	size_t size, used;
};

static int readdir_emit(void *priv, const char *name, size_t len, ext2_ino_t ino,
			unsigned char type, uint64_t next)
{
	struct readdir_fill *f = priv;
	struct stat st = { .st_ino = ino, .st_mode = (mode_t)type << 12 };
	char nm[EXT2_NAME_LEN + 1];
	size_t n;

	memcpy(nm, name, len);
	nm[len] = 0;
	if (f->root && !strcmp(nm, f->w->opts.ctl_name))
		return 0;	/* the control directory hides it */
	n = fuse_add_direntry(f->req, f->buf + f->used, f->size - f->used, nm, &st,
			      (off_t)next);
	if (n > f->size - f->used)
		return 1;
	f->used += n;
	return 0;
}

/* READDIR without a handle (OPENDIR refused): entries by position. */
static void readdir_at(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off)
{
	struct readdir_fill f = { .req = req, .w = req_wbfs(req), .root = ino == FUSE_ROOT_ID,
				  .size = size };
	struct winode *wi;
	int ret;

	f.buf = malloc(size ? size : 1);
	if (!f.buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	ret = dir_read_at(f.w, ext4_ino(ino), off < 0 ? 0 : (uint64_t)off, readdir_emit, &f);
	wi = winode_get(f.w, ext4_ino(ino), false);
	if (wi)
		winode_accessed(f.w, wi, 0);
	if (ret && !f.used)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_buf(req, f.buf, f.used);
	free(f.buf);
}

/* Valid replies: fuse_reply_buf, fuse_reply_err */
static void wbcfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			  struct fuse_file_info *fi)
{
	struct wdir *d = (struct wdir *)(uintptr_t)fi->fh;
	struct winode *wi;
	char *buf;
	size_t used = 0, i;
	int ret;

	CTL_ROUTE(ino, readdir, req, ino, size, off, fi);
	if (!d) {
		readdir_at(req, ino, size, off);
		return;
	}
	if (off == 0 || !d->loaded) {
		dir_snap_free(&d->snap);
		ret = dir_snapshot(req_wbfs(req), ext4_ino(ino), &d->snap);
		if (ret) {
			fuse_reply_err(req, -ret);
			return;
		}
		if (ino == FUSE_ROOT_ID)
			ops_ctl->hide_in_root(req_wbfs(req), &d->snap);
		d->loaded = true;
	}
	wi = winode_get(req_wbfs(req), ext4_ino(ino), false);
	if (wi)
		winode_accessed(req_wbfs(req), wi, 0);
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (i = (size_t)off; i < d->snap.n; i++) {
		struct stat st = { .st_ino = d->snap.e[i].ino,
				   .st_mode = (mode_t)d->snap.e[i].type << 12 };
		size_t n = fuse_add_direntry(req, buf + used, size - used, d->snap.e[i].name,
					     &st, (off_t)(i + 1));

		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

/* Valid replies: fuse_reply_err */
static void wbcfs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wdir *d = (struct wdir *)(uintptr_t)fi->fh;

	CTL_ROUTE(ino, releasedir, req, ino, fi);
	if (d)
		dir_snap_free(&d->snap);
	free(d);
	fuse_reply_err(req, 0);
}

/* Valid replies: fuse_reply_err */
static void wbcfs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
			   struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);
	int ret = 0;

	CTL_ROUTE(ino, fsyncdir, req, ino, datasync, fi);
	if (!w->ro && park_fsyncdir(w, req))
		return;
	if (!w->ro)
		ret = ext4_sync_durable(w);
	fuse_reply_err(req, -ret);
}

/* Valid replies: fuse_reply_statfs, fuse_reply_err */
static void wbcfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct wbfs *w = req_wbfs(req);
	struct statvfs st;
	int64_t bfree;

	/*
	 * No fs_lock: the sizes never change on a mounted filesystem, and the
	 * free counts are the mirror every fs_lock holder refreshes on unlock.
	 */
	memset(&st, 0, sizeof(st));
	st.f_bsize = w->fs->blocksize;
	st.f_frsize = w->fs->blocksize;
	st.f_blocks = ext2fs_blocks_count(w->fs->super) - w->overhead;
	st.f_files = w->fs->super->s_inodes_count;
	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	st.f_ffree = (fsfilcnt_t)w->free_inodes;
	bfree = w->free_blocks - w->reserved;
	ls_mutex_unlock(&w->resv_lock);
	if (bfree < 0)
		bfree = 0;
	st.f_bfree = (fsblkcnt_t)bfree;
	/* as ext4: neither the root reserve nor the metadata reserve is available */
	st.f_bavail = bfree > w->root_reserved + w->headroom ?
		      (fsblkcnt_t)(bfree - w->root_reserved - w->headroom) : 0;
	st.f_favail = st.f_ffree;
	st.f_namemax = WBFS_NAME_MAX;
	fuse_reply_statfs(req, &st);
}

/* Valid replies: fuse_reply_err */
static void wbcfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			   size_t size, int flags)
{
	struct wbfs *w = req_wbfs(req);
	struct wbfs_cred cred = { .uid = 0 };
	int ret;

	CTL_ROUTE(ino, setxattr, req, ino, name, value, size, flags);
	/* only an ACL's set-group-ID rule needs the caller's groups */
	if (!strncmp(name, "system.posix_acl_", 17))
		ops_req_cred(req, &cred);
	if (xattr_is_fault(w, name))
		ret = fuse_req_ctx(req)->uid ? -EPERM :
		      xattr_fault_set(w, ext4_ino(ino), name, value, size);
	else
		ret = w->ro ? -EROFS :
		      iflags_check(w, ext4_ino(ino), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL) ? -EPERM :
		      xattr_set(w, ext4_ino(ino), name, value, size, flags, &cred,
				ext4_privileged(w, fuse_req_ctx(req)));
	if (!ret)
		inval_dir_listing(w, winode_find(w, ext4_ino(ino)), false);
	if (!ret && !xattr_is_fault(w, name))
		ret = ops_inode_change_sync(w, ext4_ino(ino), false);
	fuse_reply_err(req, -ret);
}

/* Valid replies: fuse_reply_buf, fuse_reply_xattr, fuse_reply_err */
static void wbcfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	char *buf;
	int ret;

	CTL_ROUTE(ino, getxattr, req, ino, name, size);
	buf = size ? malloc(size) : NULL;
	if (size && !buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (xattr_is_fault(req_wbfs(req), name))
		ret = xattr_fault_get(req_wbfs(req), ext4_ino(ino), name, buf, size);
	else
		ret = xattr_get(req_wbfs(req), ext4_ino(ino), name, buf, size);
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else if (!size)
		fuse_reply_xattr(req, (size_t)ret);
	else
		fuse_reply_buf(req, buf, (size_t)ret);
	free(buf);
}

/* Valid replies: fuse_reply_buf, fuse_reply_xattr, fuse_reply_err */
static void wbcfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	char *buf;
	int ret;

	CTL_ROUTE(ino, listxattr, req, ino, size);
	buf = size ? malloc(size) : NULL;
	if (size && !buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	ret = xattr_list(req_wbfs(req), ext4_ino(ino), buf, size);
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else if (!size)
		fuse_reply_xattr(req, (size_t)ret);
	else
		fuse_reply_buf(req, buf, (size_t)ret);
	free(buf);
}

/* Valid replies: fuse_reply_err */
static void wbcfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct wbfs *w = req_wbfs(req);
	int ret;

	CTL_ROUTE(ino, removexattr, req, ino, name);
	if (xattr_is_fault(w, name))
		ret = fuse_req_ctx(req)->uid ? -EPERM :
		      xattr_fault_set(w, ext4_ino(ino), name, "none", 4);
	else
		ret = w->ro ? -EROFS :
		      iflags_check(w, ext4_ino(ino), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL) ? -EPERM :
		      xattr_remove(w, ext4_ino(ino), name);
	if (!ret)
		inval_dir_listing(w, winode_find(w, ext4_ino(ino)), false);
	if (!ret && !xattr_is_fault(w, name))
		ret = ops_inode_change_sync(w, ext4_ino(ino), false);
	fuse_reply_err(req, -ret);
}

static void wbcfs_init(void *userdata, struct fuse_conn_info *conn)
{
	/*
	 * POSIX ACLs: the kernel checks them and caches them; the mode <->
	 * ACL ties, inheritance and the umask (not applied by the kernel
	 * then: DONT_MASK) are xattr.c's and dir.c's.
	 */
	conn->want |= conn->capable & (FUSE_CAP_ATOMIC_O_TRUNC | FUSE_CAP_ASYNC_DIO |
				       FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_EXPORT_SUPPORT |
				       FUSE_CAP_IOCTL_DIR | FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK);
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	((struct wbfs *)userdata)->posix_acl = (conn->want & FUSE_CAP_POSIX_ACL) != 0;
	conn->max_write = 1 << 20;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
}

/*
 * umount: the kernel waits for this reply on fuseblk mounts, so everything
 * is written and the filesystem marked clean before umount(8) returns.
 */
static void wbcfs_destroy(void *userdata)
{
	struct wbfs *w = userdata;

	if (!w->destroyed) {
		w->destroyed = true;
		w->close_ret = ext4_close(w);
	}
}

const struct fuse_lowlevel_ops ops_table = {
	.init = wbcfs_init,
	.destroy = wbcfs_destroy,
	.lookup = wbcfs_lookup,
	.forget = wbcfs_forget,
	.forget_multi = wbcfs_forget_multi,
	.getattr = wbcfs_getattr,
	.setattr = wbcfs_setattr,
	.readlink = wbcfs_readlink,
	.mknod = wbcfs_mknod,
	.mkdir = wbcfs_mkdir,
	.unlink = wbcfs_unlink,
	.rmdir = wbcfs_rmdir,
	.symlink = wbcfs_symlink,
	.rename = wbcfs_rename,
	.link = wbcfs_link,
	.open = ops_open,
	.create = ops_create,
	.read = ops_read,
	.write_buf = ops_write_buf,
	.flush = ops_flush,
	.release = ops_release,
	.fsync = ops_fsync,
	.opendir = wbcfs_opendir,
	.readdir = wbcfs_readdir,
	.releasedir = wbcfs_releasedir,
	.fsyncdir = wbcfs_fsyncdir,
	.statfs = wbcfs_statfs,
	.setxattr = wbcfs_setxattr,
	.getxattr = wbcfs_getxattr,
	.listxattr = wbcfs_listxattr,
	.removexattr = wbcfs_removexattr,
	.fallocate = ops_fallocate,
	.lseek = ops_lseek,
	.ioctl = ext4_ioctl,
	.bmap = ext4_bmap,
};
