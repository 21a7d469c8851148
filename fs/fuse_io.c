// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The FUSE channel hooks (fuse_session_custom_io): requests libfuse 3.14
 * does not know are served here before libfuse sees them. FUSE_SYNCFS
 * (sync(2), syncfs(2) on the mount) runs a full bdi_sync and is answered
 * on the device fd directly; everything else passes through unchanged.
 */
#include <errno.h>
#include <linux/fuse.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "wbfs_i.h"

static struct wbfs *fio_wbfs;	/* the one mounted filesystem of this process */

static int fio_reply(int fd, uint64_t unique, int err)
{
	struct fuse_out_header out = {
		.len = sizeof(out),
		.error = err,
		.unique = unique,
	};

	return write(fd, &out, sizeof(out)) == sizeof(out) ? 0 : -errno;
}

/* Serve a request here; returns true when it was consumed. */
static bool fio_intercept(int fd, const void *buf, size_t len)
{
	const struct fuse_in_header *in = buf;
	int ret = 0;

	if (len < sizeof(*in) || in->opcode != FUSE_SYNCFS || !fio_wbfs)
		return false;
	if (!fio_wbfs->ro && !fio_wbfs->destroyed)
		ret = bdi_sync(fio_wbfs->bdi, WB_REASON_SYNC);
	fio_reply(fd, in->unique, ret);
	return true;
}

static ssize_t fio_read(int fd, void *buf, size_t buf_len, void *userdata)
{
	for (;;) {
		ssize_t n = read(fd, buf, buf_len);

		if (n <= 0 || !fio_intercept(fd, buf, (size_t)n))
			return n;
	}
}

static ssize_t fio_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	return writev(fd, iov, count);
}

static const struct fuse_custom_io fio_ops = {
	.read = fio_read,
	.writev = fio_writev,
};

/** Install the hooks on a mounted session. Returns 0 or -errno. */
int wbfs_fuse_io_install(struct wbfs *w, struct fuse_session *se)
{
	fio_wbfs = w;
	return fuse_session_custom_io(se, &fio_ops, fuse_session_fd(se));
}
