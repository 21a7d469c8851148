// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Built without liburing: no FUSE over io_uring, every request comes on
 * /dev/fuse (transport=auto), and transport=uring refuses to mount.
 */
#include <errno.h>

#include "fuse_i.h"

void *furing_req_flatten(const struct furing_req_header *h, char *payload, size_t payload_size,
			 size_t *len)
{
	return NULL;
}

ssize_t furing_reply_fill(struct furing_req_header *h, char *payload, size_t payload_size,
			  const struct iovec *iov, int count)
{
	return -EINVAL;
}

int furing_kernel_enabled(void)
{
	return -ENOTSUP;
}

int furing_kernel_enable(void)
{
	return -ENOTSUP;
}

int furing_start(struct furing **out, struct fuse_session *se, int fd, size_t payload_size,
		 unsigned rings_per_queue, unsigned nr_ents, unsigned poll_us,
		 bool (*take)(void *arg, int fd, void *buf, size_t *len),
		 void (*before_copy)(void *arg), void *take_arg)
{
	return -ENOTSUP;
}

void furing_stop(struct furing *fr)
{
}

bool furing_active(const struct furing *fr)
{
	return false;
}

void furing_shape(const struct furing *fr, unsigned *nr_queues, unsigned *nr_ents,
		  unsigned long *nr_requests)
{
	*nr_queues = *nr_ents = 0;
	*nr_requests = 0;
}

bool furing_reply(const struct iovec *iov, int count, ssize_t *ret)
{
	return false;
}

void *furing_hold(const struct iovec *iov, int count)
{
	return NULL;
}

void furing_commit_held(void *ent)
{
}

void *furing_park(uint64_t unique)
{
	(void)unique;
	return NULL;
}

ssize_t furing_reply_parked(void *ent, const struct iovec *iov, int count)
{
	(void)ent;
	(void)iov;
	(void)count;
	errno = ENOTCONN;
	return -1;
}
