/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * blkdev/ internals: the engines behind io_engine_init, and the NBD
 * client's waited requests that the synchronous I/O uses. What the other
 * folders see is in include/wbcfs/blkdev.h.
 */
#ifndef WBCFS_BLKDEV_BLKDEV_I_H
#define WBCFS_BLKDEV_BLKDEV_I_H

#include "wbcfs/blkdev.h"

extern const struct io_engine_ops io_engine_uring_ops;
extern const struct io_engine_ops io_engine_aio_ops;
extern const struct io_engine_ops io_engine_psync_ops;
extern const struct io_engine_ops io_engine_nbd_ops;
extern const struct io_engine_ops io_engine_rbd_ops;

/*
 * engine_rbd.c's way to the device: rbdev_of_fd and rbdev_submit, which the
 * unit test replaces with a fake completing on threads of its own.
 */
extern struct rbdev *(*rbd_engine_lookup)(int fd);
extern void (*rbd_engine_submit)(struct rbdev *d, enum rbdev_op op, const struct iovec *iov,
				 int iovcnt, uint64_t off, uint64_t len,
				 void (*done)(void *priv, int res), void *priv);

/* nbdev.c: a request of the NBD client, waited for (sync.c) */
int nbdev_sync(struct nbdev *d, enum nbdev_op kind, void *buf, uint64_t len,
	       uint64_t off, unsigned flags);
/* Bytes held by @iov. */
size_t iov_bytes(const struct iovec *iov, int cnt);
/*
 * The calling thread's bounce buffer of at least @len bytes, for a
 * transfer of several buffers, kept for its next one. NULL: no memory.
 */
char *iov_bounce(size_t len);

#endif
