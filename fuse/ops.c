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

#define ATTR_TIMEOUT 10.0
#define ENTRY_TIMEOUT 10.0

static struct wbfs *req_wbfs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static struct wfile *fi_file(struct fuse_file_info *fi)
{
	return (struct wfile *)(uintptr_t)fi->fh;
}

/* A request on a control inode (fs/ctl.c) is answered there. */
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

#define CTL_ROUTE(ino, op, ...)				\
	do {						\
		if (ops_ctl_owns(ino)) {			\
			ops_ctl->ops->op(__VA_ARGS__);	\
			return;				\
		}					\
	} while (0)

/* Who sent @req: ids and, for an unprivileged caller, its groups. */
static void req_cred(fuse_req_t req, struct wbfs_cred *c)
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

/*
 * A write, truncation at open or fallocate by @cred: clear set-user-ID and
 * set-group-ID as the kernel's ext4 does, and make the kernel drop the
 * mode it caches. Context: a request's worker before its reply; takes
 * fs_lock.
 */
static int file_kill_priv(struct wbfs *w, struct winode *wi, const struct wbfs_cred *cred)
{
	struct ext2_inode_large in;
	bool changed = false;
	mode_t mode;
	int ret;

	if (!atomic_load(&wi->has_priv) || !cred->uid)
		return 0;
	wbfs_lock(w);
	ret = wbfs_read_inode(w, wi->ino, &in);
	if (!ret) {
		mode = wbfs_cred_kill_priv(cred, in.i_mode, inode_gid(in));
		if (mode != in.i_mode) {
			in.i_mode = (uint16_t)mode;
			winode_fold_attrs_locked(w, wi->ino, &in);
			ret = wbfs_write_inode(w, wi->ino, &in);
			changed = !ret;
		}
		wi->has_priv = (in.i_mode & (S_ISUID | S_ISGID)) != 0;
	}
	wbfs_unlock(w);
	if (changed)
		wbfs_inval_attr(w, wi);
	return ret;
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
static int dir_change_sync(struct wbfs *w, ext2_ino_t dir, ext2_ino_t dir2)
{
	if (!iflags_is_dirsync(w, dir) && (!dir2 || !iflags_is_dirsync(w, dir2)))
		return 0;
	atomic_fetch_add(&w->stats.nr_dirsync_ops, 1);
	return wbfs_sync_durable(w);
}

/*
 * A change of @ino's size, attributes, xattrs or flags, committed before
 * the reply when @ino is IS_SYNC (a sync mount, chattr +S) or @sync (the
 * change came through an O_SYNC or O_DSYNC descriptor): ext4 commits its
 * truncate, setxattr and setflags of an IS_SYNC inode (ext4_handle_sync)
 * and fallocate through an O_SYNC one; wbcfs commits its mode, owner and
 * times too, and an ftruncate through an O_SYNC descriptor.
 */
static int inode_change_sync(struct wbfs *w, ext2_ino_t ino, bool sync)
{
	if (!sync && !iflags_is_sync(w, ino))
		return 0;
	atomic_fetch_add(&w->stats.nr_sync_metadata, 1);
	return wbfs_sync_durable(w);
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
	e.ino = wbfs_fuse_ino(ino);
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
	ret = dir_lookup(w, wbfs_ino(parent), name, &ino);
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
	winode_forget_ino(req_wbfs(req), wbfs_ino(ino), nlookup);
	fuse_reply_none(req);
}

/* Valid replies: fuse_reply_none */
static void wbcfs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	struct wbfs *w = req_wbfs(req);
	size_t i;

	for (i = 0; i < count; i++)
		if (!ops_ctl_owns(f[i].ino))
			winode_forget_ino(w, wbfs_ino(f[i].ino), f[i].nlookup);
	fuse_reply_none(req);
}

/* Valid replies: fuse_reply_attr, fuse_reply_err */
static void wbcfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	int ret;

	CTL_ROUTE(ino, getattr, req, ino, fi);
	ret = winode_stat(req_wbfs(req), wbfs_ino(ino), &st);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

static void set_time(struct ext2_inode_large *in, int which, int to_set, int now_flag,
		     const struct timespec *ts, const struct timespec *now)
{
	wbfs_ts_set(in, which, (to_set & now_flag) ? now : ts);
}

/* mode, owner and times: one read-modify-write of the inode. */
static int setattr_inode(struct wbfs *w, ext2_ino_t ino, const struct stat *a, int to_set)
{
	struct ext2_inode_large in;
	struct timespec now;
	struct winode *wi;
	int ret;

	wbfs_lock(w);
	ret = wbfs_read_inode(w, ino, &in);
	if (ret)
		goto out;
	winode_fold_attrs_locked(w, ino, &in);
	/* stamped under the lock: no change that waited for it gets an earlier one */
	wbfs_now(&now);
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
	wbfs_ts_set(&in, TS_CTIME, (to_set & FUSE_SET_ATTR_CTIME) ? &a->st_ctim : &now);
	ret = wbfs_write_inode(w, ino, &in);
	if (!ret && (to_set & FUSE_SET_ATTR_MODE))
		ret = xattr_acl_chmod_locked(w, ino, in.i_mode);
	wi = winode_find(w, ino);
	if (wi)
		wi->has_priv = (in.i_mode & (S_ISUID | S_ISGID)) != 0;
out:
	wbfs_unlock(w);
	return ret;
}

/* Valid replies: fuse_reply_attr, fuse_reply_err */
static void wbcfs_setattr(fuse_req_t req, fuse_ino_t fino, struct stat *attr, int to_set,
			  struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);
	ext2_ino_t ino = wbfs_ino(fino);
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
		to_set &= ~FUSE_SET_ATTR_SIZE;
		sized = true;
	}
	/* a SETATTR with no field (chown(f, -1, -1)) still changes ctime */
	if (!ret && (to_set || !sized))
		ret = setattr_inode(w, ino, attr, to_set);
	if (!ret)
		ret = inode_change_sync(w, ino, fi && fi->fh && (fi_file(fi)->flags & O_DSYNC));
	if (!ret)
		ret = winode_stat(w, ino, &st);
	if (!ret && S_ISDIR(st.st_mode))
		wbfs_inval_dir_listing(w, winode_find(w, ino), false);
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
	ret = dir_readlink(req_wbfs(req), wbfs_ino(ino), buf, sizeof(buf));
	if (ret) {
		fuse_reply_err(req, -ret);
	} else {
		struct winode *wi = winode_find(req_wbfs(req), wbfs_ino(ino));

		if (wi)
			winode_accessed(req_wbfs(req), wi, 0);
		fuse_reply_readlink(req, buf);
	}
}

/* The control directory and its entries are never created, removed or renamed. */
static int check_new_name(struct wbfs *w, fuse_ino_t parent, const char *name)
{
	if (w->ro)
		return -EROFS;
	if (name_too_long(name))
		return -ENAMETOOLONG;
	if (ops_ctl->check_name(w, parent, name))
		return -EPERM;
	return iflags_check(w, wbfs_ino(parent), EXT2_IMMUTABLE_FL);
}

/* Valid replies: fuse_reply_entry, fuse_reply_err */
static void wbcfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
			dev_t rdev)
{
	struct wbfs *w = req_wbfs(req);
	ext2_ino_t ino;
	int ret = check_new_name(w, parent, name);

	if (!ret)
		ret = dir_create(w, wbfs_ino(parent), name, mode, rdev, fuse_req_ctx(req), &ino);
	if (!ret)
		ret = dir_change_sync(w, wbfs_ino(parent), 0);
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
	int ret = check_new_name(w, parent, name);

	if (!ret)
		ret = dir_mkdir(w, wbfs_ino(parent), name, mode, fuse_req_ctx(req), &ino);
	if (!ret)
		ret = dir_change_sync(w, wbfs_ino(parent), 0);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		reply_entry(req, w, ino);
}

/* Valid replies: fuse_reply_err */
static void wbcfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct wbfs *w = req_wbfs(req);
	int ret = check_new_name(w, parent, name);

	if (!ret)
		ret = iflags_check(w, wbfs_ino(parent), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL);
	if (!ret)
		ret = dir_unlink(w, wbfs_ino(parent), name, false);
	if (!ret)
		ret = dir_change_sync(w, wbfs_ino(parent), 0);
	fuse_reply_err(req, -ret);
}

/* Valid replies: fuse_reply_err */
static void wbcfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct wbfs *w = req_wbfs(req);
	int ret = check_new_name(w, parent, name);

	if (!ret)
		ret = iflags_check(w, wbfs_ino(parent), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL);
	if (!ret)
		ret = dir_unlink(w, wbfs_ino(parent), name, true);
	if (!ret)
		ret = dir_change_sync(w, wbfs_ino(parent), 0);
	fuse_reply_err(req, -ret);
}

/* Valid replies: fuse_reply_entry, fuse_reply_err */
static void wbcfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct wbfs *w = req_wbfs(req);
	ext2_ino_t ino;
	int ret = check_new_name(w, parent, name);

	if (!ret)
		ret = dir_symlink(w, wbfs_ino(parent), name, link, fuse_req_ctx(req), &ino);
	if (!ret)
		ret = dir_change_sync(w, wbfs_ino(parent), 0);
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
	int ret = check_new_name(w, parent, name);
	ext2_ino_t moved[2];
	int i;

	if (!ret)
		ret = check_new_name(w, newparent, newname);
	if (!ret)
		ret = iflags_check(w, wbfs_ino(parent), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL);
	if (!ret)
		ret = iflags_check(w, wbfs_ino(newparent), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL);
	if (!ret && !w->ro)
		rename_alloc_da(w, wbfs_ino(parent), name, wbfs_ino(newparent), newname, flags);
	if (!ret)
		ret = dir_rename(w, wbfs_ino(parent), name, wbfs_ino(newparent), newname, flags,
				 fuse_req_ctx(req), wbfs_privileged(w, fuse_req_ctx(req)), moved);
	/* a directory moved: its "..", which the kernel may list, changed */
	for (i = 0; !ret && i < 2; i++)
		if (moved[i])
			wbfs_inval_dir_listing(w, winode_find(w, moved[i]), true);
	if (!ret)
		ret = dir_change_sync(w, wbfs_ino(parent), wbfs_ino(newparent));
	fuse_reply_err(req, -ret);
}

/* Valid replies: fuse_reply_entry, fuse_reply_err */
static void wbcfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct wbfs *w = req_wbfs(req);
	int ret = check_new_name(w, newparent, newname);

	if (!ret && ops_ctl_owns(ino))
		ret = -EPERM;
	if (!ret)
		ret = iflags_check(w, wbfs_ino(ino), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL);
	if (!ret)
		ret = dir_link(w, wbfs_ino(ino), wbfs_ino(newparent), newname,
			       wbfs_privileged(w, fuse_req_ctx(req)));
	if (!ret)
		ret = dir_change_sync(w, wbfs_ino(newparent), 0);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		reply_entry(req, w, wbfs_ino(ino));
}

/* @created: a new, empty file (CREATE, O_TMPFILE): O_TRUNC has nothing to cut */
static int file_open(struct wbfs *w, ext2_ino_t ino, struct fuse_file_info *fi, fuse_req_t req,
		     bool created)
{
	struct winode *wi;
	struct wfile *f;
	int ret = 0;

	if (w->ro && (fi->flags & O_ACCMODE) != O_RDONLY)
		return -EROFS;
	wi = winode_get(w, ino, false);
	if (!wi)
		return -EIO;
	ret = iflags_check_open(wi, fi->flags);
	if (ret)
		return ret;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->wi = wi;
	f->flags = fi->flags;
	f->wb_err = mapping_sample_error(&wi->map);
	pthread_mutex_init(&f->ra_lock, NULL);
	/* readahead_kb changes live through the control directory */
	ra_state_init(&f->ra, __atomic_load_n(&w->opts.readahead_kb, __ATOMIC_RELAXED) / 4);
	if ((fi->flags & O_TRUNC) && (fi->flags & O_ACCMODE) != O_RDONLY && S_ISREG(wi->mode) &&
	    !created) {
		/* the kernel's truncation at open (ATOMIC_O_TRUNC) is this one */
		ret = data_truncate(w, wi, 0);
		if (!ret && req && atomic_load(&wi->has_priv) && fuse_req_ctx(req)->uid) {
			struct wbfs_cred cred;

			req_cred(req, &cred);
			ret = file_kill_priv(w, wi, &cred);
		}
		/* as an ftruncate through the new descriptor would be */
		if (!ret)
			ret = inode_change_sync(w, ino, fi->flags & O_DSYNC);
	}
	if (ret) {
		free(f);
		return ret;
	}
	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	wi->nopen++;
	ls_mutex_unlock(&w->itable_lock);
	fi->fh = (uintptr_t)f;
	fi->direct_io = 1;
	/* close reports writeback errors to files open for writing only
	 * (as NFS and CIFS do): a read-only one gets no FLUSH round trip */
	fi->noflush = (fi->flags & O_ACCMODE) == O_RDONLY;
	return 0;
}

/* Valid replies: fuse_reply_open, fuse_reply_err */
static void wbcfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int ret;

	CTL_ROUTE(ino, open, req, ino, fi);
	ret = file_open(req_wbfs(req), wbfs_ino(ino), fi, req, false);
	if (ret)
		fuse_reply_err(req, -ret);
	else if (fuse_reply_open(req, fi) == -ENOENT)
		winode_put_open(req_wbfs(req), ((struct wfile *)(uintptr_t)fi->fh)->wi);
}

/* Valid replies: fuse_reply_create, fuse_reply_err */
static void wbcfs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
			 struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);
	struct fuse_entry_param e;
	struct winode *wi;
	ext2_ino_t ino;
	int ret = check_new_name(w, parent, name);

	if (!ret)
		ret = dir_create(w, wbfs_ino(parent), name, (mode & ~S_IFMT) | S_IFREG, 0,
				 fuse_req_ctx(req), &ino);
	if (!ret)
		ret = dir_change_sync(w, wbfs_ino(parent), 0);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	memset(&e, 0, sizeof(e));
	wi = winode_get(w, ino, true);
	ret = wi ? export_stat(w, ino, &e.attr, &e.generation) : -EIO;
	if (!ret)
		ret = file_open(w, ino, fi, req, true);
	if (ret) {
		if (wi)
			winode_forget(w, wi, 1);
		fuse_reply_err(req, -ret);
		return;
	}
	e.ino = ino;
	e.attr_timeout = ATTR_TIMEOUT;
	e.entry_timeout = ENTRY_TIMEOUT;
	fuse_reply_create(req, &e, fi);
}

/* Valid replies: fuse_reply_iov, fuse_reply_buf, fuse_reply_err */
static void wbcfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct read_reply rr;
	int ret;

	CTL_ROUTE(ino, read, req, ino, size, off, fi);
	wbfs_inval_note_read(fi_file(fi)->wi, (uint64_t)off, size, fi->lock_owner);
	ret = data_read(req_wbfs(req), fi_file(fi), (uint64_t)off, size, &rr);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	if (size)
		winode_accessed(req_wbfs(req), fi_file(fi)->wi, fi_file(fi)->flags);
	if (!rr.n)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_iov(req, rr.iov, rr.n);
	data_read_done(&rr);
}

/*
 * Writeback errors of the file not yet reported to this open file: each
 * is reported once per open file (errseq), by fsync, by close or by a
 * synchronous write.
 */
static int file_check_error(struct wfile *f)
{
	int ret;

	ls_mutex_lock(&f->ra_lock, &lc_ra_lock);
	ret = mapping_check_and_advance(&f->wi->map, &f->wb_err);
	ls_mutex_unlock(&f->ra_lock);
	return ret;
}

/*
 * fsync or fdatasync (@datasync) of @f's file, pages [@first, @last]:
 * the writeback error it meets, or one not yet reported to @f, is
 * reported to @f once, as fsync reports it (errseq); -EIO from the sync
 * is that same error.
 */
static int file_sync(struct wbfs *w, struct wfile *f, uint64_t first, uint64_t last,
		     bool datasync)
{
	int ret = winode_sync_range(w, f->wi, first, last, datasync);
	int err = file_check_error(f);

	return err ? err : ret;
}

/*
 * A synchronous write: the kernel passes O_DSYNC or O_SYNC in the WRITE's
 * flags (fuse_write_flags(): O_DSYNC for IOCB_DSYNC, from O_DSYNC, RWF_DSYNC
 * or an IS_SYNC inode; O_SYNC for IOCB_SYNC, from O_SYNC or RWF_SYNC) and,
 * the file being direct_io, leaves its durability to us: it sends no
 * fsync after it, as generic_write_sync would for a page cache write. So
 * the range written is made durable before the reply, as fdatasync of it
 * (O_DSYNC) or fsync (O_SYNC), joining the commit of other syncs; so is
 * every write to a sync inode (ext4's IS_SYNC: a sync mount, chattr +S),
 * whatever the kernel passed. Returns 0 or the sync's -errno, which
 * replaces the byte count: the bytes are in the cache, not durable.
 */
static int write_sync(struct wbfs *w, struct wfile *f, int flags, uint64_t off, size_t len)
{
	bool datasync = (flags & O_SYNC) != O_SYNC;

	if (!(flags & O_DSYNC) && !w->opts.sync && !(atomic_load(&f->wi->iflags) & EXT2_SYNC_FL))
		return 0;
	atomic_fetch_add(&w->stats.nr_sync_writes, 1);
	return file_sync(w, f, off >> PAGE_SHIFT, (off + len - 1) >> PAGE_SHIFT, datasync);
}

/* Valid replies: fuse_reply_write, fuse_reply_err */
static void wbcfs_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *bufv,
			    off_t off, struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);
	size_t len = fuse_buf_size(bufv);
	const char *data = NULL;
	char *copy = NULL;
	long dirtied;
	ssize_t ret;
	int retries = 0;

	if (w->ro && !ops_ctl_owns(ino)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (bufv->count == 1 && !(bufv->buf[0].flags & FUSE_BUF_IS_FD)) {
		data = (const char *)bufv->buf[0].mem + bufv->off;
	} else {
		struct fuse_bufvec dst = FUSE_BUFVEC_INIT(len);

		copy = malloc(len ? len : 1);
		dst.buf[0].mem = copy;
		if (!copy || fuse_buf_copy(&dst, bufv, 0) != (ssize_t)len) {
			free(copy);
			fuse_reply_err(req, EIO);
			return;
		}
		data = copy;
	}
	if (ops_ctl_owns(ino)) {
		ops_ctl->ops->write(req, ino, data, len, off, fi);
		free(copy);
		return;
	}
	dirtied = page_thread_dirtied();
	/* pages the kernel dirtied before a chattr are still written */
	ret = fi->writepage ? 0 : iflags_check_write(fi_file(fi)->wi, fi_file(fi)->flags);
	/* before the bytes land, as file_remove_privs; a mapping's pages
	 * written back are not a write(2) (ext4's page_mkwrite keeps them) */
	if (!ret && !fi->writepage)
		ret = xattr_kill_caps(w, fi_file(fi)->wi);
	while (!ret) {
		ret = data_write(w, fi_file(fi)->wi, data, len, (uint64_t)off,
				 fuse_req_ctx(req)->uid == 0, fi->writepage);
		/* a page the kernel writes back reports its loss at once: no retry */
		if (ret != -ENOSPC || fi->writepage || !wbfs_should_retry_alloc(w, &retries))
			break;
		ret = 0;
	}
	free(copy);
	if (ret > 0 && atomic_load(&fi_file(fi)->wi->has_priv) && fuse_req_ctx(req)->uid) {
		struct wbfs_cred cred;

		/* the bytes are written: a failure here is the inode's, for
		 * e2fsck and the next access, not this write's */
		req_cred(req, &cred);
		file_kill_priv(w, fi_file(fi)->wi, &cred);
	}
	if (ret > 0 && !fi->writepage) {
		int err = write_sync(w, fi_file(fi), fi->flags, (uint64_t)off, (size_t)ret);

		if (err)
			ret = err;
	}
	if (ret > 0)
		data_balance_dirty(w, fuse_req_ctx(req)->pid, page_thread_dirtied() - dirtied);
	if (ret < 0)
		fuse_reply_err(req, (int)-ret);
	else
		fuse_reply_write(req, (size_t)ret);
}

/*
 * auto_da_alloc at close (ext4_release_file): a file truncated to 0 from
 * a larger size since the last close has its pages written now, so that
 * the commit that holds the truncation also holds the new data, or a
 * later one does (the pattern "open(O_TRUNC), write, close" would
 * otherwise give an empty file after a crash). Once per truncation: at
 * the first close of any open file of the inode, as ext4's state bit.
 * At FLUSH, which close(2) waits for, where ext4 acts at the release of
 * the open file (its last close): FUSE sends RELEASE only after close(2)
 * has returned, so the commit an application makes next (its fsync of
 * another file) would not find the data, and the RELEASE of a file
 * closed before the truncation, arriving after it, would take the state
 * from the close it is meant for. So the close of each descriptor counts,
 * not only the last of a file shared by dup or fork; and pages a
 * mapping of the file dirties after its close are not written here.
 */
static void file_alloc_da_close(struct wbfs *w, struct winode *wi)
{
	if (atomic_exchange(&wi->da_alloc_close, false) && winode_alloc_da_blocks(w, wi) > 0)
		atomic_fetch_add(&w->stats.nr_auto_da_alloc_close, 1);
}

/*
 * close(2): nothing is written here (but for auto_da_alloc, above), and a
 * writeback of the file that failed since it was opened (or since the
 * error was last reported to it, by fsync or an earlier close of a dup)
 * is reported, as EIO.
 * Valid replies: fuse_reply_err
 */
static void wbcfs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	CTL_ROUTE(ino, flush, req, ino, fi);
	file_alloc_da_close(req_wbfs(req), fi_file(fi)->wi);
	fuse_reply_err(req, -file_check_error(fi_file(fi)));
}

/* Valid replies: fuse_reply_err */
static void wbcfs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);
	struct wfile *f = fi_file(fi);

	CTL_ROUTE(ino, release, req, ino, fi);
	pthread_mutex_destroy(&f->ra_lock);
	winode_put_open_ino(w, wbfs_ino(ino));
	free(f);
	fuse_reply_err(req, 0);
}

/*
 * O_TMPFILE, for fuse_io.c (libfuse 3.14 has no tmpfile op): an open file
 * without a name or a link in @parent, counting one lookup as a create
 * does. Fills @e and @fi (fi->flags: the open flags) for the reply.
 * Returns 0 or -errno.
 */
int wbfs_tmpfile(struct wbfs *w, fuse_ino_t parent, mode_t mode, const struct fuse_ctx *ctx,
		 struct fuse_entry_param *e, struct fuse_file_info *fi)
{
	struct winode *wi;
	ext2_ino_t ino;
	int ret;

	if (w->ro)
		return -EROFS;
	if (ops_ctl_owns(parent))
		return -EPERM;
	ret = dir_tmpfile(w, wbfs_ino(parent), (mode & ~S_IFMT) | S_IFREG, ctx, &ino);
	if (ret)
		return ret;
	wi = winode_get(w, ino, true);
	wbfs_lock(w);
	if (wi) {
		wi->unlinked = true;	/* freed at the last close and forget */
		ret = winode_orphan_add_ino_locked(w, ino);
		if (ret)
			winode_free_locked(w, ino);
	} else {
		winode_free_locked(w, ino);
	}
	wbfs_unlock(w);
	if (!wi)
		return -EIO;
	if (ret) {
		winode_forget(w, wi, 1);
		return ret;
	}
	memset(e, 0, sizeof(*e));
	/* with its generation: the kernel marks an inode whose generation
	 * changes between replies bad, and linkat's entry carries it */
	ret = export_stat(w, ino, &e->attr, &e->generation);
	if (!ret)
		ret = file_open(w, ino, fi, NULL, true);
	if (ret) {
		winode_forget(w, wi, 1);
		return ret;
	}
	e->ino = ino;
	e->attr_timeout = ATTR_TIMEOUT;
	e->entry_timeout = ENTRY_TIMEOUT;
	return 0;
}

/* The kernel did not take wbfs_tmpfile's reply: close and forget the file. */
void wbfs_tmpfile_undo(struct wbfs *w, struct fuse_file_info *fi)
{
	struct wfile *f = fi_file(fi);
	struct winode *wi = f->wi;

	pthread_mutex_destroy(&f->ra_lock);
	winode_put_open(w, wi);
	free(f);
	winode_forget(w, wi, 1);
}

/* Valid replies: fuse_reply_err */
static void wbcfs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);
	struct wfile *f;

	CTL_ROUTE(ino, fsync, req, ino, datasync, fi);
	f = fi_file(fi);
	fuse_reply_err(req, -file_sync(w, f, 0, UINT64_MAX, datasync != 0));
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
		 * must reach us: wbfs_inval_dir_listing drops the kernel's
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
	ret = dir_read_at(f.w, wbfs_ino(ino), off < 0 ? 0 : (uint64_t)off, readdir_emit, &f);
	wi = winode_get(f.w, wbfs_ino(ino), false);
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
		ret = dir_snapshot(req_wbfs(req), wbfs_ino(ino), &d->snap);
		if (ret) {
			fuse_reply_err(req, -ret);
			return;
		}
		if (ino == FUSE_ROOT_ID)
			ops_ctl->hide_in_root(req_wbfs(req), &d->snap);
		d->loaded = true;
	}
	wi = winode_get(req_wbfs(req), wbfs_ino(ino), false);
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
	if (!w->ro)
		ret = wbfs_sync_durable(w);
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
		req_cred(req, &cred);
	if (xattr_is_fault(w, name))
		ret = fuse_req_ctx(req)->uid ? -EPERM :
		      xattr_fault_set(w, wbfs_ino(ino), name, value, size);
	else
		ret = w->ro ? -EROFS :
		      iflags_check(w, wbfs_ino(ino), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL) ? -EPERM :
		      xattr_set(w, wbfs_ino(ino), name, value, size, flags, &cred,
				wbfs_privileged(w, fuse_req_ctx(req)));
	if (!ret)
		wbfs_inval_dir_listing(w, winode_find(w, wbfs_ino(ino)), false);
	if (!ret && !xattr_is_fault(w, name))
		ret = inode_change_sync(w, wbfs_ino(ino), false);
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
		ret = xattr_fault_get(req_wbfs(req), wbfs_ino(ino), name, buf, size);
	else
		ret = xattr_get(req_wbfs(req), wbfs_ino(ino), name, buf, size);
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
	ret = xattr_list(req_wbfs(req), wbfs_ino(ino), buf, size);
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
		      xattr_fault_set(w, wbfs_ino(ino), name, "none", 4);
	else
		ret = w->ro ? -EROFS :
		      iflags_check(w, wbfs_ino(ino), EXT2_IMMUTABLE_FL | EXT2_APPEND_FL) ? -EPERM :
		      xattr_remove(w, wbfs_ino(ino), name);
	if (!ret)
		wbfs_inval_dir_listing(w, winode_find(w, wbfs_ino(ino)), false);
	if (!ret && !xattr_is_fault(w, name))
		ret = inode_change_sync(w, wbfs_ino(ino), false);
	fuse_reply_err(req, -ret);
}

/* Valid replies: fuse_reply_err */
static void wbcfs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			    struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);
	int ret, retries = 0;

	CTL_ROUTE(ino, fallocate, req, ino, mode, off, len, fi);
	ret = w->ro ? -EROFS : iflags_check_fallocate(fi_file(fi)->wi, mode);
	while (!ret) {
		ret = data_fallocate(w, fi_file(fi)->wi, mode, (uint64_t)off, (uint64_t)len,
				     fuse_req_ctx(req)->uid == 0);
		if (ret != -ENOSPC || !wbfs_should_retry_alloc(w, &retries))
			break;
		ret = 0;
	}
	if (!ret && atomic_load(&fi_file(fi)->wi->has_priv) && fuse_req_ctx(req)->uid) {
		struct wbfs_cred cred;

		req_cred(req, &cred);
		ret = file_kill_priv(w, fi_file(fi)->wi, &cred);
	}
	/*
	 * ext4 commits a fallocate through an O_SYNC (or O_DSYNC) descriptor,
	 * and a punch of an IS_SYNC inode; the kernel's FUSE leaves it to
	 * us. An fsync of the range: zeroed pages written, then the commit.
	 */
	if (!ret && len > 0 && ((fi_file(fi)->flags & O_DSYNC) ||
				iflags_is_sync(w, fi_file(fi)->wi->ino))) {
		atomic_fetch_add(&w->stats.nr_sync_metadata, 1);
		ret = file_sync(w, fi_file(fi), (uint64_t)off >> PAGE_SHIFT,
				((uint64_t)off + (uint64_t)len - 1) >> PAGE_SHIFT, false);
	}
	fuse_reply_err(req, -ret);
}

/* Valid replies: fuse_reply_lseek, fuse_reply_err */
static void wbcfs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
			struct fuse_file_info *fi)
{
	uint64_t out;
	int ret;

	CTL_ROUTE(ino, lseek, req, ino, off, whence, fi);
	if (whence != SEEK_DATA && whence != SEEK_HOLE) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	ret = data_lseek(req_wbfs(req), fi_file(fi)->wi, (uint64_t)off, whence, &out);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_lseek(req, (off_t)out);
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
		w->close_ret = wbfs_close(w);
	}
}

const struct fuse_lowlevel_ops wbfs_ops = {
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
	.open = wbcfs_open,
	.create = wbcfs_create,
	.read = wbcfs_read,
	.write_buf = wbcfs_write_buf,
	.flush = wbcfs_flush,
	.release = wbcfs_release,
	.fsync = wbcfs_fsync,
	.opendir = wbcfs_opendir,
	.readdir = wbcfs_readdir,
	.releasedir = wbcfs_releasedir,
	.fsyncdir = wbcfs_fsyncdir,
	.statfs = wbcfs_statfs,
	.setxattr = wbcfs_setxattr,
	.getxattr = wbcfs_getxattr,
	.listxattr = wbcfs_listxattr,
	.removexattr = wbcfs_removexattr,
	.fallocate = wbcfs_fallocate,
	.lseek = wbcfs_lseek,
	.ioctl = wbfs_ioctl,
	.bmap = wbfs_bmap,
};
