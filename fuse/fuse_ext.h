/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuse_ext.c: FUSE_TMPFILE and FUSE_STATX, which libfuse 3.14 does not
 * know, for the channel hooks of fuse_io.c.
 */
#ifndef WBCFS_FS_FUSE_EXT_H
#define WBCFS_FS_FUSE_EXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#define FEXT_TMPFILE 51		/* protocol 7.37 */
#define FEXT_STATX 52		/* protocol 7.39 */

struct wbfs;
struct fuse_attr_out;

/* A STATX request's birth time, looked up when the request arrives. */
struct fext_btime {
	struct timespec ts;
	bool valid;		/* the inode has i_crtime */
};

/** Is this request a FUSE_TMPFILE? */
bool fext_is_tmpfile(const void *buf, size_t len);
/** Serve a FUSE_TMPFILE and write its reply on @fd. */
void fext_tmpfile(struct wbfs *w, int fd, const void *buf, size_t len, bool dont_mask);
/**
 * Turn a FUSE_STATX request in @buf into the FUSE_GETATTR it begins with
 * and look up its birth time in @bt. Returns the request's new length, or
 * 0 when it is no (well-formed) FUSE_STATX and was left alone.
 */
size_t fext_statx_to_getattr(struct wbfs *w, void *buf, size_t len, struct fext_btime *bt);
/**
 * Write the GETATTR reply in @iov as the STATX reply the kernel waits
 * for (errors unchanged). Returns the length of @iov's message, or -1.
 */
ssize_t fext_statx_reply(int fd, const struct iovec *iov, int count, const struct fext_btime *bt);
/** The fuse_statx_out (at @sxo, fext_statx_out_size() bytes) for @ao and @bt. */
void fext_attr_to_statx(const struct fuse_attr_out *ao, const struct fext_btime *bt, void *sxo);
size_t fext_statx_out_size(void);

#endif
