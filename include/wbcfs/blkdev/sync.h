/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Synchronous I/O of a device by descriptor (blkdev/sync.c): a plain
 * file or block device, or an NBD export's descriptor (nbdev_fd).
 * blkdev_pwritev, blkdev_pwritev_fua and blkdev_flush are what mount, the
 * journal and recovery write with: recorded in the write log while one is
 * open. The _unlogged variants are for the engines' own paths, which log
 * around them.
 */
#ifndef WBCFS_BLKDEV_SYNC_H
#define WBCFS_BLKDEV_SYNC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Synchronous device access by descriptor: an NBD device's or a real fd's. */
/** Returns bytes read (short only at the end of the device) or -errno. */
ssize_t blkdev_preadv(int fd, const struct iovec *iov, int iovcnt, off_t off);
static inline ssize_t blkdev_pread(int fd, void *buf, size_t len, off_t off)
{
	struct iovec v = { buf, len };

	return blkdev_preadv(fd, &v, 1, off);
}
/** Returns bytes written or -errno. FUA: durable on return (else written). */
ssize_t blkdev_pwritev_unlogged(int fd, const struct iovec *iov, int iovcnt, off_t off, bool fua);
/** Device cache flush (fdatasync / NBD FLUSH). */
int blkdev_flush_unlogged(int fd);
/** Discard (NBD TRIM) on an NBD device; -ENOTTY for a real fd, -EOPNOTSUPP if not offered. */
int blkdev_discard(int fd, uint64_t off, uint64_t len);
/** Whether a FUA write is cheaper than a write and a flush on @fd. */
bool blkdev_has_fua(int fd);

/** pwritev that loops over short writes. Returns 0 or -errno. */
int blkdev_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off);
/**
 * A write durable when it returns: FUA where the device offers it (NBD),
 * else (and while recording, which knows no FUA) a write and a flush.
 */
int blkdev_pwritev_fua(int fd, const struct iovec *iov, int iovcnt, off_t off);
/** fdatasync of the device (its volatile cache). Returns 0 or -errno. */
int blkdev_flush(int fd);

#endif
