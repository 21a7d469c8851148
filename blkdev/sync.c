// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Synchronous I/O of a device, by descriptor: what mount, the journal,
 * recovery and the metadata path do outside the flushers' engines. A
 * descriptor is a plain file or block device, or an NBD export's (its
 * requests go through the NBD client, which has no vectored transfers:
 * several buffers go through one), or an RBD image's (through librbd,
 * vectored). blkdev_pwritev and blkdev_flush are
 * recorded in the write log while one is open (devlog.c): that is the
 * only way such writes reach a device, so the log sees them all.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include "blkdev_i.h"

/* ---- by descriptor, not recorded ------------------------------------------ */

/*
 * An RBD image's transfer: librbd takes the buffers as they are; a read
 * at the image's end is short, as at a device's end.
 */
static ssize_t rbd_xfer(struct rbdev *r, enum rbdev_op op, const struct iovec *iov, int iovcnt,
			off_t off)
{
	return rbdev_sync(r, op, iov, iovcnt, (uint64_t)off, iov_bytes(iov, iovcnt));
}

ssize_t blkdev_preadv(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
	struct nbdev *d = nbdev_of_fd(fd);
	size_t len;
	char *bounce;
	int ret;

	if (rbdev_of_fd(fd))
		return rbd_xfer(rbdev_of_fd(fd), RBDEV_READ, iov, iovcnt, off);
	if (!d) {
		for (;;) {
			ssize_t n = preadv(fd, iov, iovcnt, off);

			if (n >= 0 || errno != EINTR)
				return n < 0 ? -errno : n;
		}
	}
	len = iov_bytes(iov, iovcnt);
	if ((uint64_t)off >= nbdev_info(d)->size)
		return 0;
	if (len > nbdev_info(d)->size - (uint64_t)off)
		len = nbdev_info(d)->size - (uint64_t)off;	/* as a read at a device's end */
	if (iovcnt == 1) {
		ret = nbdev_sync(d, NBDEV_READ, iov[0].iov_base, len, (uint64_t)off, 0);
		return ret < 0 ? ret : (ssize_t)len;
	}
	bounce = iov_bounce(len ? len : 1);
	if (!bounce)
		return -ENOMEM;
	ret = nbdev_sync(d, NBDEV_READ, bounce, len, (uint64_t)off, 0);
	if (!ret)
		iov_scatter(iov, iovcnt, bounce, len);
	return ret < 0 ? ret : (ssize_t)len;
}

ssize_t blkdev_pwritev_unlogged(int fd, const struct iovec *iov, int iovcnt, off_t off, bool fua)
{
	struct nbdev *d = nbdev_of_fd(fd);
	size_t len;
	char *bounce;
	int ret;

	if (rbdev_of_fd(fd)) {
		/* no FUA in RBD: a flush after */
		ssize_t n = rbd_xfer(rbdev_of_fd(fd), RBDEV_WRITE, iov, iovcnt, off);

		if (n >= 0 && fua && blkdev_flush_unlogged(fd))
			return -EIO;
		return n;
	}
	if (!d) {
		ssize_t n;

		do
			n = pwritev(fd, iov, iovcnt, off);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			return -errno;
		if (fua && blkdev_flush_unlogged(fd))
			return -EIO;
		return n;
	}
	len = iov_bytes(iov, iovcnt);
	if (iovcnt == 1) {
		ret = nbdev_sync(d, NBDEV_WRITE, iov[0].iov_base, len, (uint64_t)off,
				 fua ? NBDEV_FUA : 0);
	} else {
		bounce = iov_bounce(len ? len : 1);
		if (!bounce)
			return -ENOMEM;
		iov_gather(bounce, iov, iovcnt, len);
		ret = nbdev_sync(d, NBDEV_WRITE, bounce, len, (uint64_t)off, fua ? NBDEV_FUA : 0);
	}
	if (!ret && fua && !nbdev_info(d)->can_fua)
		ret = nbdev_sync(d, NBDEV_FLUSH, NULL, 0, 0, 0);
	return ret < 0 ? ret : (ssize_t)len;
}

int blkdev_flush_unlogged(int fd)
{
	struct nbdev *d = nbdev_of_fd(fd);

	if (rbdev_of_fd(fd))
		return rbdev_sync(rbdev_of_fd(fd), RBDEV_FLUSH, NULL, 0, 0, 0);
	if (!d)
		return fdatasync(fd) < 0 ? -errno : 0;
	return nbdev_sync(d, NBDEV_FLUSH, NULL, 0, 0, 0);
}

bool blkdev_has_fua(int fd)
{
	struct nbdev *d = nbdev_of_fd(fd);

	return d && nbdev_info(d)->can_fua;
}

int blkdev_discard(int fd, uint64_t off, uint64_t len)
{
	struct nbdev *d = nbdev_of_fd(fd);

	if (rbdev_of_fd(fd))
		return rbdev_sync(rbdev_of_fd(fd), RBDEV_DISCARD, NULL, 0, off, len);
	if (!d)
		return -ENOTTY;
	return nbdev_sync(d, NBDEV_TRIM, NULL, len, off, 0);
}

/* ---- recorded in the write log ------------------------------------------- */

int blkdev_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
	struct iovec v[64];
	int n = iovcnt < 64 ? iovcnt : 64, i;
	int64_t total = 0;
	uint64_t seq;

	if (iovcnt > 64)
		return -EINVAL;
	seq = devlog_on ? devlog_write_issued((uint64_t)off, iov, iovcnt) : 0;
	for (i = 0; i < n; i++)
		v[i] = iov[i];
	i = 0;
	if (nbdev_of_fd(fd) || rbdev_of_fd(fd)) {
		total = blkdev_pwritev_unlogged(fd, v, n, off, false);
		i = n;
	}
	while (i < n) {
		ssize_t r = pwritev(fd, v + i, n - i, off);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			total = -errno;
			break;
		}
		if (r == 0) {
			total = -EIO;
			break;
		}
		off += r;
		total += r;
		while (i < n && (size_t)r >= v[i].iov_len) {
			r -= (ssize_t)v[i].iov_len;
			i++;
		}
		if (i < n) {
			v[i].iov_base = (char *)v[i].iov_base + r;
			v[i].iov_len -= (size_t)r;
		}
	}
	if (seq)
		devlog_completed(DEVLOG_WRITE_DONE, seq, total);
	return total < 0 ? (int)total : 0;
}

int blkdev_flush(int fd)
{
	uint64_t seq = devlog_on ? devlog_flush_issued() : 0;
	int ret = blkdev_flush_unlogged(fd);

	if (seq)
		devlog_completed(DEVLOG_FLUSH_DONE, seq, ret);
	return ret;
}

int blkdev_pwritev_fua(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
	ssize_t n;
	int ret;

	if (devlog_on || !blkdev_has_fua(fd)) {
		ret = blkdev_pwritev(fd, iov, iovcnt, off);
		return ret ? ret : blkdev_flush(fd);
	}
	n = blkdev_pwritev_unlogged(fd, iov, iovcnt, off, true);
	return n < 0 ? (int)n : 0;
}
