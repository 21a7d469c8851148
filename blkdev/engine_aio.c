// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The libaio engine: io_submit of preadv/pwritev iocbs, io_getevents for
 * completions. fdsync through aio is refused by most filesystems and block
 * devices, so IO_FSYNC runs fdatasync() inline and completes at reap time.
 */
#include <errno.h>
#include <libaio.h>
#include <stdlib.h>
#include <unistd.h>

#include "blkdev_i.h"

struct aio {
	io_context_t ctx;	/* owner thread only */
	struct iocb **pending;	/* queued, not yet submitted */
	unsigned npending;
	struct io_req **synced;	/* IO_FSYNC done inline, completion pending */
	int *sync_res;
	unsigned nsynced;
	unsigned qd;
};

static int aio_init(struct io_engine *e, unsigned qd)
{
	struct aio *a = calloc(1, sizeof(*a));
	int ret;

	if (!a)
		return -ENOMEM;
	a->qd = qd;
	a->pending = calloc(qd, sizeof(*a->pending));
	a->synced = calloc(qd, sizeof(*a->synced));
	a->sync_res = calloc(qd, sizeof(*a->sync_res));
	ret = (a->pending && a->synced && a->sync_res) ? io_setup((int)qd, &a->ctx) : -ENOMEM;
	if (ret < 0) {
		free(a->pending);
		free(a->synced);
		free(a->sync_res);
		free(a);
		return ret;
	}
	e->priv = a;
	return 0;
}

static void aio_exit(struct io_engine *e)
{
	struct aio *a = e->priv;

	io_destroy(a->ctx);
	free(a->pending);
	free(a->synced);
	free(a->sync_res);
	free(a);
}

static int aio_submit(struct io_engine *e)
{
	struct aio *a = e->priv;
	unsigned done = 0;

	while (done < a->npending) {
		int ret = io_submit(a->ctx, (long)(a->npending - done), a->pending + done);

		if (ret == -EINTR || ret == -EAGAIN)
			continue;
		if (ret < 0) {
			/* the first iocb was refused (bad fd, ...): fail it alone */
			struct iocb *cb = a->pending[done++];
			struct io_req *req = cb->data;

			free(cb);
			e->inflight--;
			req->done(req, ret);
			continue;
		}
		done += (unsigned)ret;
	}
	a->npending = 0;
	return 0;
}

static int aio_queue(struct io_engine *e, struct io_req *req)
{
	struct aio *a = e->priv;
	struct iocb *cb;

	if (req->op == IO_FSYNC) {
		a->sync_res[a->nsynced] = fdatasync(req->fd) < 0 ? -errno : 0;
		a->synced[a->nsynced++] = req;
		return 0;
	}
	cb = calloc(1, sizeof(*cb));
	if (!cb)
		return -ENOMEM;
	if (req->op == IO_WRITE)
		io_prep_pwritev(cb, req->fd, req->iov, req->iovcnt, (long long)req->off);
	else
		io_prep_preadv(cb, req->fd, req->iov, req->iovcnt, (long long)req->off);
	cb->data = req;
	if (a->npending == a->qd) {
		int ret = aio_submit(e);

		if (ret) {
			free(cb);
			return ret;
		}
	}
	a->pending[a->npending++] = cb;
	return 0;
}

static int aio_reap(struct io_engine *e, unsigned min)
{
	struct aio *a = e->priv;
	struct io_event ev[64];
	int done = 0, n, i;

	while (a->nsynced) {
		struct io_req *req = a->synced[--a->nsynced];

		e->inflight--;
		req->done(req, a->sync_res[a->nsynced]);
		done++;
	}
	if (min > e->inflight)
		min = e->inflight;
	if (min && a->npending)
		aio_submit(e);	/* never wait on an iocb that was not submitted */
	do {
		n = io_getevents(a->ctx, done < (int)min ? 1 : 0, 64, ev, NULL);
		if (n == -EINTR)
			continue;
		if (n < 0)
			return n;
		for (i = 0; i < n; i++) {
			struct iocb *cb = ev[i].obj;
			struct io_req *req = cb->data;

			free(cb);
			e->inflight--;
			req->done(req, (int)(long)ev[i].res);
			done++;
		}
	} while (n > 0 || done < (int)min);
	return done;
}

const struct io_engine_ops io_engine_aio_ops = {
	.init = aio_init,
	.exit = aio_exit,
	.queue = aio_queue,
	.submit = aio_submit,
	.reap = aio_reap,
};
