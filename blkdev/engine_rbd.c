// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The rbd engine: requests on an RBD image (rbdev.h), up to queue_depth in
 * flight through librbd's asynchronous API, vectored as given. A request is
 * issued when it is queued. Its completion arrives on one of librbd's
 * threads, which puts it on this engine's completed list and counts it on
 * an eventfd; engine_reap() on the owning thread reads the eventfd (its
 * wait, with no lost wake-up: the counter keeps what was signalled before
 * the read) and hands each completion to the caller's callback, as every
 * engine does. IO_FSYNC is an rbd flush.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "blkdev_i.h"
#include "wbcfs/lib/lockstat.h"

LOCK_CLASS(lc_rbd_done_lock, "rbd_done_lock")

struct rbd_req {
	struct io_req *req;
	struct rbd_eng *eng;
	int res;
	struct rbd_req *next;
};

struct rbd_eng {
	int efd;				/* counts completions put on done */
	pthread_mutex_t lock;
	struct rbd_req *done, **done_tail;	/* lock: completed, not yet reaped */
};

/* The device layer, replaceable by the unit test's fake (blkdev_i.h). */
struct rbdev *(*rbd_engine_lookup)(int fd) = rbdev_of_fd;
void (*rbd_engine_submit)(struct rbdev *d, enum rbdev_op op, const struct iovec *iov,
			  int iovcnt, uint64_t off, uint64_t len,
			  void (*done)(void *priv, int res), void *priv) = rbdev_submit;

static int rbde_init(struct io_engine *e, unsigned qd)
{
	struct rbd_eng *r = calloc(1, sizeof(*r));

	(void)qd;
	if (!r)
		return -ENOMEM;
	r->efd = eventfd(0, EFD_CLOEXEC);
	if (r->efd < 0) {
		free(r);
		return -errno;
	}
	pthread_mutex_init(&r->lock, NULL);
	r->done_tail = &r->done;
	e->priv = r;
	return 0;
}

static void rbde_exit(struct io_engine *e)
{
	struct rbd_eng *r = e->priv;

	close(r->efd);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* From a librbd thread, or the issuer on failure. */
static void rbde_done(void *priv, int res)
{
	struct rbd_req *q = priv;
	struct rbd_eng *r = q->eng;
	uint64_t one = 1;
	ssize_t n;

	q->res = res;	/* the bytes (a read at the image's end: fewer), 0, or -errno */
	q->next = NULL;
	ls_mutex_lock(&r->lock, &lc_rbd_done_lock);
	*r->done_tail = q;
	r->done_tail = &q->next;
	ls_mutex_unlock(&r->lock);
	n = write(r->efd, &one, sizeof(one));
	(void)n;	/* the counter cannot overflow at queue_depth */
}

static int rbde_queue(struct io_engine *e, struct io_req *req)
{
	struct rbdev *d = rbd_engine_lookup(req->fd);
	struct rbd_req *q = calloc(1, sizeof(*q));
	enum rbdev_op op;
	size_t len = 0;

	if (!q)
		return -ENOMEM;
	q->req = req;
	q->eng = e->priv;
	if (!d) {
		rbde_done(q, -EBADF);	/* not an RBD device: completes at reap */
		return 0;
	}
	if (req->op == IO_FSYNC) {
		op = RBDEV_FLUSH;
	} else {
		op = req->op == IO_WRITE ? RBDEV_WRITE : RBDEV_READ;
		len = iov_bytes(req->iov, req->iovcnt);
	}
	rbd_engine_submit(d, op, req->iov, req->iovcnt, req->off, len, rbde_done, q);
	return 0;
}

static int rbde_submit(struct io_engine *e)
{
	(void)e;	/* issued as queued */
	return 0;
}

static int rbde_reap(struct io_engine *e, unsigned min)
{
	struct rbd_eng *r = e->priv;
	int done = 0;

	if (min > e->inflight)
		min = e->inflight;
	for (;;) {
		struct rbd_req *list;
		uint64_t v;

		ls_mutex_lock(&r->lock, &lc_rbd_done_lock);
		list = r->done;
		r->done = NULL;
		r->done_tail = &r->done;
		ls_mutex_unlock(&r->lock);
		while (list) {
			struct rbd_req *q = list;

			list = q->next;
			e->inflight--;
			q->req->done(q->req, q->res);	/* may queue more */
			free(q);
			done++;
		}
		if ((unsigned)done >= min)
			return done;
		/* wait for the next completion; one already signalled returns at once */
		if (read(r->efd, &v, sizeof(v)) < 0 && errno != EINTR)
			return -errno;
	}
}

const struct io_engine_ops io_engine_rbd_ops = {
	.init = rbde_init,
	.exit = rbde_exit,
	.queue = rbde_queue,
	.submit = rbde_submit,
	.reap = rbde_reap,
};
