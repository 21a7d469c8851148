// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The psync engine: preadv/pwritev/fdatasync, run at reap time on the
 * owning thread, one request at a time. The reference the other engines
 * are checked against, and the fallback when io_uring is unavailable.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "blkdev_i.h"
#include "wbcfs/lib/list.h"

struct psync_req {
	struct io_req *req;
	struct psync_req *next;
};

struct psync {
	struct psync_req *head, *tail;	/* owner thread only */
};

static int psync_init(struct io_engine *e, unsigned qd)
{
	e->priv = calloc(1, sizeof(struct psync));
	return e->priv ? 0 : -ENOMEM;
}

static void psync_exit(struct io_engine *e)
{
	free(e->priv);
}

static int psync_queue(struct io_engine *e, struct io_req *req)
{
	struct psync *ps = e->priv;
	struct psync_req *r = malloc(sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->req = req;
	r->next = NULL;
	if (ps->tail)
		ps->tail->next = r;
	else
		ps->head = r;
	ps->tail = r;
	return 0;
}

static int psync_submit(struct io_engine *e)
{
	return 0;
}

/* Run one request to completion; short transfers are continued. */
static int psync_run(struct io_req *req)
{
	struct iovec iov[IOV_MAX];
	int cnt = req->iovcnt > IOV_MAX ? IOV_MAX : req->iovcnt, i = 0;
	uint64_t off = req->off;
	long total = 0;

	if (req->op == IO_FSYNC)
		return fdatasync(req->fd) < 0 ? -errno : 0;
	for (i = 0; i < cnt; i++)
		iov[i] = req->iov[i];
	i = 0;
	while (i < cnt) {
		ssize_t n = req->op == IO_WRITE ? pwritev(req->fd, iov + i, cnt - i, (off_t)off)
						: preadv(req->fd, iov + i, cnt - i, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		total += n;
		off += (uint64_t)n;
		while (i < cnt && (size_t)n >= iov[i].iov_len)
			n -= (ssize_t)iov[i++].iov_len;
		if (i < cnt) {
			iov[i].iov_base = (char *)iov[i].iov_base + n;
			iov[i].iov_len -= (size_t)n;
		}
	}
	return (int)total;
}

static int psync_reap(struct io_engine *e, unsigned min)
{
	struct psync *ps = e->priv;
	int done = 0;

	while (ps->head) {
		struct psync_req *r = ps->head;

		ps->head = r->next;
		if (!ps->head)
			ps->tail = NULL;
		e->inflight--;
		r->req->done(r->req, psync_run(r->req));
		free(r);
		done++;
	}
	return done;
}

const struct io_engine_ops io_engine_psync_ops = {
	.init = psync_init,
	.exit = psync_exit,
	.queue = psync_queue,
	.submit = psync_submit,
	.reap = psync_reap,
};
