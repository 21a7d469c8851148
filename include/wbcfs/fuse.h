/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuse/, the FUSE layer, as the daemon sees it: the operations table
 * (ops.c), one connection's channel over /dev/fuse or io_uring
 * (fuse_io.c, fuse_uring.c), the notifications that keep the kernel's
 * caches coherent with ours (inval.c), and the hooks through which the
 * daemon serves its control directory beside the filesystem. Internals:
 * fuse/fuse_i.h.
 */
#ifndef WBCFS_FUSE_H
#define WBCFS_FUSE_H

#include "wbcfs/ext4.h"

/* inval.c */
struct inval_queue;
void inval_note_read(struct winode *wi, uint64_t off, size_t size, uint64_t lock_owner);
void inval_write(struct wbfs *w, struct winode *wi, const char *buf, uint64_t off,
		      size_t len, uint64_t old_size);
void inval_zero_eof_page(struct wbfs *w, struct winode *wi, uint64_t old_size,
			      uint64_t new_size);
void inval_attr(struct wbfs *w, struct winode *wi);
void inval_dir_listing(struct wbfs *w, struct winode *wi, bool always);
int inval_start(struct wbfs *w);
void inval_stop(struct wbfs *w);

/* fuse_io.c */
/**
 * Make @w's connection state (w->fio) and install the channel hooks on its
 * mounted session @se, whose userdata must be @w (the hooks find their
 * connection through it). @se NULL: the state alone, for unit tests that
 * drive fuse_io_ops() themselves with @w as userdata.
 * Returns 0 or -errno (EALREADY: installed before; ENOMEM; libfuse's
 * refusal, after which w->fio is NULL again).
 */
int fuse_io_install(struct wbfs *w, struct fuse_session *se);
/**
 * Start the timer thread of @w's connection, which sends its held
 * (throttled) WRITE replies. Returns 0 or -errno (ENODEV: not installed).
 */
int fuse_io_start(struct wbfs *w);
/**
 * Stop @w's timer and send every reply held on @w's connection now (its
 * session is ending). Other connections' held replies keep their pauses.
 */
void fuse_io_stop(struct wbfs *w);
/**
 * The reply this thread sends next (a WRITE's, on @w's connection) is
 * held for @pause_ms, then throttle_resume(@tw, @pid) decides whether it
 * waits longer. Returns false when replies cannot be held (no timer):
 * pause in place.
 */
bool fuse_io_hold_reply(struct wbfs *w, struct throttle_wb *tw, pid_t pid, long pause_ms);
/** Replies held now on @w's connection (vmstat). */
long fuse_io_held(struct wbfs *w);
/** Requests parked now (answered by the syncers when durable). */
long fuse_io_parked(struct wbfs *w);
/** The hooks themselves; their userdata is the mount's struct wbfs. */
const struct fuse_custom_io *fuse_io_ops(void);
/**
 * Send a reply on the device @fd, or into the io_uring entry whose request
 * this thread serves (the entry, and so its connection, is the thread's
 * own: @fd or the entry name the connection). Returns the bytes sent or
 * -1 with errno (as writev).
 */
ssize_t fuse_io_send(int fd, const struct iovec *iov, int count);
/**
 * Stop @w's io_uring queues and free its connection state (w->fio NULL),
 * after the session's loop and fuse_io_stop, before the unmount.
 */
void fuse_io_transport_stop(struct wbfs *w);
/** "uring" or "dev": what serves @w's requests now; with queues and entries. */
int fuse_io_transport_show(struct wbfs *w, char *buf, size_t size);

/* ops.c */
extern const struct fuse_lowlevel_ops ops_table;
/**
 * open(O_TMPFILE) in @parent: the file made, opened (@fi->flags in, @fi
 * out) and looked up once (@e), freed at its last close and forget unless
 * linked. Returns 0 or -errno (EROFS, EPERM in the control directory,
 * ENOTDIR, ENOSPC, EIO).
 */
int ops_tmpfile(struct wbfs *w, fuse_ino_t parent, mode_t mode, const struct fuse_ctx *ctx,
		 struct fuse_entry_param *e, struct fuse_file_info *fi);
/** Undo ops_tmpfile when its reply did not reach the kernel. */
void ops_tmpfile_undo(struct wbfs *w, struct fuse_file_info *fi);

/* ---- the control directory, served beside the filesystem ---------------- */

/*
 * The daemon's control directory (/.wbcfs), which the operations table
 * routes to: requests on its inodes (@owns) and on its name in the root
 * (@is_root_name) go to @ops; @check_name refuses names inside it (0 or
 * -EPERM); @hide_in_root drops the entry it shadows from a root listing.
 * Set once, before any mount serves (ops_set_ctl); without it no inode is
 * the control directory's.
 */
struct ops_ctl_hooks {
	const struct fuse_lowlevel_ops *ops;
	bool (*owns)(fuse_ino_t ino);
	bool (*is_root_name)(struct wbfs *w, fuse_ino_t parent, const char *name);
	int (*check_name)(struct wbfs *w, fuse_ino_t parent, const char *name);
	void (*hide_in_root)(struct wbfs *w, struct dir_snap *snap);
};
void ops_set_ctl(const struct ops_ctl_hooks *h);

/** Is FUSE over io_uring enabled in the kernel (1), off (0), or absent (-1)? */
int furing_kernel_enabled(void);
/** Turn it on (root): 0 or -errno. */
int furing_kernel_enable(void);

#endif
