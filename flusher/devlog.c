// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Synchronous device writes and flushes outside the io engines; see
 * include/wbcfs/devlog.h.
 */
#include <errno.h>
#include <unistd.h>

#include "wbcfs/devlog.h"

int devlog_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off)
{
	struct iovec v[64];
	int n = iovcnt < 64 ? iovcnt : 64, i;

	if (iovcnt > 64)
		return -EINVAL;
	for (i = 0; i < n; i++)
		v[i] = iov[i];
	i = 0;
	while (i < n) {
		ssize_t r = pwritev(fd, v + i, n - i, off);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO;
		off += r;
		while (i < n && (size_t)r >= v[i].iov_len) {
			r -= (ssize_t)v[i].iov_len;
			i++;
		}
		if (i < n) {
			v[i].iov_base = (char *)v[i].iov_base + r;
			v[i].iov_len -= (size_t)r;
		}
	}
	return 0;
}

int devlog_flush(int fd)
{
	return fdatasync(fd) < 0 ? -errno : 0;
}
