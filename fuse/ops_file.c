// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The FUSE handlers of open files: open, create, read, write, flush,
 * release, fsync, fallocate, lseek and O_TMPFILE. Apart from ops.c's
 * namespace and attribute handlers because these carry the per-open-file
 * state (struct wfile: errseq cursor, readahead, delalloc on close) and
 * reach the page cache, while those reach only inodes and directories.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuse_i.h"

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
	ext4_lock(w);
	ret = ext4_read_inode(w, wi->ino, &in);
	if (!ret) {
		mode = ext4_cred_kill_priv(cred, in.i_mode, inode_gid(in));
		if (mode != in.i_mode) {
			in.i_mode = (uint16_t)mode;
			winode_fold_attrs_locked(w, wi->ino, &in);
			ret = ext4_write_inode(w, wi->ino, &in);
			changed = !ret;
		}
		wi->has_priv = (in.i_mode & (S_ISUID | S_ISGID)) != 0;
	}
	ext4_unlock(w);
	if (changed)
		inval_attr(w, wi);
	return ret;
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

			ops_req_cred(req, &cred);
			ret = file_kill_priv(w, wi, &cred);
		}
		/* as an ftruncate through the new descriptor would be */
		if (!ret)
			ret = ops_inode_change_sync(w, ino, fi->flags & O_DSYNC);
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
	/*
	 * A FLUSH round trip at close(2) only where it has work. Under
	 * close_errors every writer's reports writeback errors (as NFS and
	 * CIFS do); by default they wait for fsync, as ext4's, and only a
	 * writer opened with a truncation to 0 pending (O_TRUNC above, or
	 * truncate(2) before) gets one: its new data written before close(2)
	 * returns (file_alloc_da_close), as ext4's release does. The kernel
	 * handles POSIX and flock locks itself (no getlk/setlk/flock here):
	 * it needs no FLUSH to drop them.
	 */
	f->flush = (fi->flags & O_ACCMODE) != O_RDONLY &&
		   (w->opts.close_errors || atomic_load(&wi->da_alloc_close));
	fi->noflush = !f->flush;
	return 0;
}

/* Valid replies: fuse_reply_open, fuse_reply_err */
void ops_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int ret;

	CTL_ROUTE(ino, open, req, ino, fi);
	ret = file_open(req_wbfs(req), ext4_ino(ino), fi, req, false);
	if (ret)
		fuse_reply_err(req, -ret);
	else if (fuse_reply_open(req, fi) == -ENOENT)
		winode_put_open(req_wbfs(req), ((struct wfile *)(uintptr_t)fi->fh)->wi);
}

/* Valid replies: fuse_reply_create, fuse_reply_err */
void ops_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);
	struct fuse_entry_param e;
	struct winode *wi;
	ext2_ino_t ino;
	int ret = ops_check_new_name(w, parent, name);

	if (!ret)
		ret = dir_create(w, ext4_ino(parent), name, (mode & ~S_IFMT) | S_IFREG, 0,
				 fuse_req_ctx(req), &ino);
	if (!ret)
		ret = ops_dir_change_sync(w, ext4_ino(parent), 0);
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
void ops_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	      struct fuse_file_info *fi)
{
	struct read_reply rr;
	int ret;

	CTL_ROUTE(ino, read, req, ino, size, off, fi);
	inval_note_read(fi_file(fi)->wi, (uint64_t)off, size, fi->lock_owner);
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
int ops_file_check_error(struct wfile *f)
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
	int err = ops_file_check_error(f);

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
 * whatever the kernel passed. Handed to the syncers when another sync
 * runs (park_sync_write): they answer it when durable, with the next
 * group commit, and with no pause from the throttle (the writer's pages
 * are written before its reply: they add no lasting dirt). Returns 1
 * when so parked, else 0 or the sync's -errno, which replaces the byte
 * count: the bytes are in the cache, not durable.
 */
static int write_sync(struct wbfs *w, fuse_req_t req, struct wfile *f, int flags,
		      uint64_t off, size_t len)
{
	uint64_t first = off >> PAGE_SHIFT, last = (off + len - 1) >> PAGE_SHIFT;
	bool datasync = (flags & O_SYNC) != O_SYNC;

	if (!(flags & O_DSYNC) && !w->opts.sync && !(atomic_load(&f->wi->iflags) & EXT2_SYNC_FL))
		return 0;
	atomic_fetch_add(&w->stats.nr_sync_writes, 1);
	if (park_sync_write(w, req, f, first, last, datasync, len))
		return 1;
	return file_sync(w, f, first, last, datasync);
}

/* Valid replies: fuse_reply_write, fuse_reply_err */
void ops_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *bufv,
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
		if (ret != -ENOSPC || fi->writepage || !ext4_should_retry_alloc(w, &retries))
			break;
		ret = 0;
	}
	free(copy);
	if (ret > 0 && atomic_load(&fi_file(fi)->wi->has_priv) && fuse_req_ctx(req)->uid) {
		struct wbfs_cred cred;

		/* the bytes are written: a failure here is the inode's, for
		 * e2fsck and the next access, not this write's */
		ops_req_cred(req, &cred);
		file_kill_priv(w, fi_file(fi)->wi, &cred);
	}
	if (ret > 0 && !fi->writepage) {
		int err = write_sync(w, req, fi_file(fi), fi->flags, (uint64_t)off, (size_t)ret);

		if (err > 0)
			return;		/* parked: the syncers answer it */
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
 * Without close_errors only the descriptors opened with the truncation
 * pending get a FLUSH (file_open); one truncated after its open
 * (ftruncate) has none, and acts at its RELEASE instead (ops_release).
 */
static void file_alloc_da_close(struct wbfs *w, struct winode *wi)
{
	if (atomic_exchange(&wi->da_alloc_close, false) && winode_alloc_da_blocks(w, wi) > 0)
		atomic_fetch_add(&w->stats.nr_auto_da_alloc_close, 1);
}

/*
 * close(2) of a descriptor file_open gave a FLUSH: nothing is written here
 * (but for auto_da_alloc, above), and under close_errors a writeback of
 * the file that failed since it was opened (or since the error was last
 * reported to it, by fsync or an earlier close of a dup) is reported, as
 * EIO. Without it the error waits for fsync, as ext4's.
 * Valid replies: fuse_reply_err
 */
void ops_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);

	CTL_ROUTE(ino, flush, req, ino, fi);
	atomic_fetch_add(&w->stats.nr_flush_requests, 1);
	file_alloc_da_close(w, fi_file(fi)->wi);
	fuse_reply_err(req, w->opts.close_errors ? -ops_file_check_error(fi_file(fi)) : 0);
}

/* Valid replies: fuse_reply_err */
void ops_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);
	struct wfile *f = fi_file(fi);

	CTL_ROUTE(ino, release, req, ino, fi);
	/* truncated through a descriptor without FLUSH (ftruncate after its
	 * open): auto_da_alloc here, later than ext4's (after close(2) has
	 * returned, not before), but before the data waits for writeback */
	if (!f->flush && atomic_load(&f->truncated))
		file_alloc_da_close(w, f->wi);
	pthread_mutex_destroy(&f->ra_lock);
	winode_put_open_ino(w, ext4_ino(ino));
	free(f);
	fuse_reply_err(req, 0);
}

/*
 * O_TMPFILE, for fuse_io.c (libfuse 3.14 has no tmpfile op): an open file
 * without a name or a link in @parent, counting one lookup as a create
 * does. Fills @e and @fi (fi->flags: the open flags) for the reply.
 * Returns 0 or -errno.
 */
int ops_tmpfile(struct wbfs *w, fuse_ino_t parent, mode_t mode, const struct fuse_ctx *ctx,
		 struct fuse_entry_param *e, struct fuse_file_info *fi)
{
	struct winode *wi;
	ext2_ino_t ino;
	int ret;

	if (w->ro)
		return -EROFS;
	if (ops_ctl_owns(parent))
		return -EPERM;
	ret = dir_tmpfile(w, ext4_ino(parent), (mode & ~S_IFMT) | S_IFREG, ctx, &ino);
	if (ret)
		return ret;
	wi = winode_get(w, ino, true);
	ext4_lock(w);
	if (wi) {
		wi->unlinked = true;	/* freed at the last close and forget */
		ret = winode_orphan_add_ino_locked(w, ino);
		if (ret)
			winode_free_locked(w, ino);
	} else {
		winode_free_locked(w, ino);
	}
	ext4_unlock(w);
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

/* The kernel did not take ops_tmpfile's reply: close and forget the file. */
void ops_tmpfile_undo(struct wbfs *w, struct fuse_file_info *fi)
{
	struct wfile *f = fi_file(fi);
	struct winode *wi = f->wi;

	pthread_mutex_destroy(&f->ra_lock);
	winode_put_open(w, wi);
	free(f);
	winode_forget(w, wi, 1);
}

/* Valid replies: fuse_reply_err */
void ops_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);
	struct wfile *f;

	CTL_ROUTE(ino, fsync, req, ino, datasync, fi);
	f = fi_file(fi);
	if (w->ro || !park_fsync(w, req, f, datasync != 0))
		fuse_reply_err(req, -file_sync(w, f, 0, UINT64_MAX, datasync != 0));
}

/* Valid replies: fuse_reply_err */
void ops_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
		   struct fuse_file_info *fi)
{
	struct wbfs *w = req_wbfs(req);
	int ret, retries = 0;

	CTL_ROUTE(ino, fallocate, req, ino, mode, off, len, fi);
	ret = w->ro ? -EROFS : iflags_check_fallocate(fi_file(fi)->wi, mode);
	while (!ret) {
		ret = data_fallocate(w, fi_file(fi)->wi, mode, (uint64_t)off, (uint64_t)len,
				     fuse_req_ctx(req)->uid == 0);
		if (ret != -ENOSPC || !ext4_should_retry_alloc(w, &retries))
			break;
		ret = 0;
	}
	if (!ret && atomic_load(&fi_file(fi)->wi->has_priv) && fuse_req_ctx(req)->uid) {
		struct wbfs_cred cred;

		ops_req_cred(req, &cred);
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
void ops_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
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
