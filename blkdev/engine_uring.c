// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The io_uring engine (liburing): one ring per flusher thread, READV/WRITEV
 * and FSYNC(DATASYNC) submitted in batches, completions reaped in batches
 * and handed to each request's callback on the owning thread.
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>

#include "blkdev_i.h"

struct uring {
	struct io_uring ring;	/* owner thread only */
	unsigned queued;	/* SQEs prepared, not yet submitted */
};

static int uring_init(struct io_engine *e, unsigned qd)
{
	struct uring *u = calloc(1, sizeof(*u));
	int ret;

	if (!u)
		return -ENOMEM;
	ret = io_uring_queue_init(qd, &u->ring, 0);
	if (ret < 0) {
		free(u);
		return ret;
	}
	e->priv = u;
	return 0;
}

static void uring_exit(struct io_engine *e)
{
	struct uring *u = e->priv;

	io_uring_queue_exit(&u->ring);
	free(u);
}

static int uring_submit(struct io_engine *e)
{
	struct uring *u = e->priv;

	while (u->queued) {
		int ret = io_uring_submit(&u->ring);

		if (ret == -EINTR || ret == -EAGAIN)
			continue;
		if (ret < 0)
			return ret;
		u->queued -= (unsigned)ret > u->queued ? u->queued : (unsigned)ret;
	}
	return 0;
}

static int uring_queue(struct io_engine *e, struct io_req *req)
{
	struct uring *u = e->priv;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);

	if (!sqe) {
		int ret = uring_submit(e);

		if (ret)
			return ret;
		sqe = io_uring_get_sqe(&u->ring);
		if (!sqe)
			return -EBUSY;
	}
	switch (req->op) {
	case IO_READ:
		io_uring_prep_readv(sqe, req->fd, req->iov, (unsigned)req->iovcnt, req->off);
		break;
	case IO_WRITE:
		io_uring_prep_writev(sqe, req->fd, req->iov, (unsigned)req->iovcnt, req->off);
		break;
	case IO_FSYNC:
		io_uring_prep_fsync(sqe, req->fd, IORING_FSYNC_DATASYNC);
		break;
	}
	io_uring_sqe_set_data(sqe, req);
	u->queued++;
	return 0;
}

/* Complete the CQEs already posted (up to 64), in one batch. Returns the count. */
static int uring_reap_batch(struct io_engine *e, struct uring *u)
{
	struct io_uring_cqe *cqes[64];
	unsigned i, n = io_uring_peek_batch_cqe(&u->ring, cqes, 64);

	for (i = 0; i < n; i++) {
		struct io_req *req = io_uring_cqe_get_data(cqes[i]);
		int res = cqes[i]->res;

		/* mark seen first: the callback may queue new work */
		io_uring_cqe_seen(&u->ring, cqes[i]);
		e->inflight--;
		req->done(req, res);
	}
	return (int)n;
}

/*
 * Wait until at least @min requests (capped at those in flight) have
 * completed, then complete everything already posted. Prepared SQEs are
 * submitted first, so waiting cannot hang on an unsubmitted request.
 */
static int uring_reap(struct io_engine *e, unsigned min)
{
	struct uring *u = e->priv;
	struct io_uring_cqe *cqe;
	int done = 0, ret;

	if (min > e->inflight)
		min = e->inflight;
	if (min) {
		ret = uring_submit(e);
		if (ret)
			return ret;
	}
	for (;;) {
		int n = uring_reap_batch(e, u);

		done += n;
		if (n)
			continue;
		if (done >= (int)min)
			return done;
		ret = io_uring_wait_cqe_nr(&u->ring, &cqe, min - (unsigned)done);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN)
			return ret;
	}
}

const struct io_engine_ops io_engine_uring_ops = {
	.init = uring_init,
	.exit = uring_exit,
	.queue = uring_queue,
	.submit = uring_submit,
	.reap = uring_reap,
};
