// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The nbd engine: requests on an NBD device (nbdev.h), up to queue_depth
 * in flight on its connection through libnbd's asynchronous API. A
 * request is issued when it is queued; its completion arrives on the
 * device's poller thread, waits on this engine's list, and is handed to
 * the caller's callback from engine_reap() on the owning thread as with
 * every engine. NBD has no vectored transfers: a request of several
 * buffers goes through one bounce buffer. IO_FSYNC is an NBD FLUSH.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "blkdev_i.h"
#include "wbcfs/blkdev/nbdev.h"
#include "wbcfs/lib/lockstat.h"

LOCK_CLASS(lc_nbd_done_lock, "nbd_done_lock")

struct nbd_req {
	struct io_req *req;
	struct nbd_eng *eng;
	char *bounce;			/* several buffers: the transfer's own */
	size_t bounce_size;
	size_t len;
	int res;
	struct nbd_req *next;
};

#define NBD_SPARE_MAX	16	/* bounce buffers kept for reuse */

struct nbd_eng {
	/* owner thread only: bounce buffers for reuse (a fresh 1 MiB buffer
	 * per request costs page faults and trims worth as much as the copy) */
	struct { char *buf; size_t size; } spare[NBD_SPARE_MAX];
	unsigned nr_spare;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct nbd_req *done, **done_tail;	/* lock: completed, not yet reaped */
	unsigned nr_done;			/* lock */
};

static int nbde_init(struct io_engine *e, unsigned qd)
{
	struct nbd_eng *n = calloc(1, sizeof(*n));

	if (!n)
		return -ENOMEM;
	pthread_mutex_init(&n->lock, NULL);
	pthread_cond_init(&n->cond, NULL);
	n->done_tail = &n->done;
	e->priv = n;
	return 0;
}

static void nbde_exit(struct io_engine *e)
{
	struct nbd_eng *n = e->priv;

	while (n->nr_spare)
		free(n->spare[--n->nr_spare].buf);
	pthread_cond_destroy(&n->cond);
	pthread_mutex_destroy(&n->lock);
	free(n);
}

/* A bounce buffer of at least @len bytes: a spare one, or a new one. */
static char *bounce_get(struct nbd_eng *n, size_t len, size_t *size)
{
	unsigned i;
	char *b;

	for (i = 0; i < n->nr_spare; i++) {
		if (n->spare[i].size >= len) {
			b = n->spare[i].buf;
			*size = n->spare[i].size;
			n->spare[i] = n->spare[--n->nr_spare];
			return b;
		}
	}
	*size = (len + 65535) & ~(size_t)65535;
	return malloc(*size);
}

static void bounce_put(struct nbd_eng *n, char *b, size_t size)
{
	if (!b)
		return;
	if (n->nr_spare < NBD_SPARE_MAX) {
		n->spare[n->nr_spare].buf = b;
		n->spare[n->nr_spare++].size = size;
		return;
	}
	free(b);
}

/* From the poller thread, or the issuer on failure. */
static void nbde_done(void *priv, int res)
{
	struct nbd_req *r = priv;
	struct nbd_eng *n = r->eng;

	r->res = res < 0 ? res : r->req->op == IO_FSYNC ? 0 : (int)r->len;
	r->next = NULL;
	ls_mutex_lock(&n->lock, &lc_nbd_done_lock);
	*n->done_tail = r;
	n->done_tail = &r->next;
	n->nr_done++;
	pthread_cond_signal(&n->cond);
	ls_mutex_unlock(&n->lock);
}

static int nbde_queue(struct io_engine *e, struct io_req *req)
{
	struct nbdev *d = nbdev_of_fd(req->fd);
	struct nbd_req *r = calloc(1, sizeof(*r));
	enum nbdev_op op;
	void *buf = NULL;
	int i;

	if (!r)
		return -ENOMEM;
	r->req = req;
	r->eng = e->priv;
	if (!d) {
		nbde_done(r, -EBADF);	/* not an NBD device: completes at reap */
		return 0;
	}
	for (i = 0; i < req->iovcnt; i++)
		r->len += req->iov[i].iov_len;
	if (req->op == IO_FSYNC) {
		op = NBDEV_FLUSH;
		r->len = 0;
	} else {
		uint64_t size = nbdev_info(d)->size;

		op = req->op == IO_WRITE ? NBDEV_WRITE : NBDEV_READ;
		if (op == NBDEV_READ && req->off + r->len > size)
			r->len = req->off >= size ? 0 : size - req->off;	/* as at a device's end */
		if (req->iovcnt == 1) {
			buf = req->iov[0].iov_base;
		} else {
			r->bounce = bounce_get(r->eng, r->len ? r->len : 1, &r->bounce_size);
			if (!r->bounce) {
				free(r);
				return -ENOMEM;
			}
			if (op == NBDEV_WRITE)
				iov_gather(r->bounce, req->iov, req->iovcnt, r->len);
			buf = r->bounce;
		}
		if (!r->len) {
			nbde_done(r, 0);
			return 0;
		}
	}
	nbdev_submit(d, op, buf, r->len, req->off, 0, nbde_done, r);
	return 0;
}

static int nbde_submit(struct io_engine *e)
{
	(void)e;	/* issued as queued */
	return 0;
}

static int nbde_reap(struct io_engine *e, unsigned min)
{
	struct nbd_eng *n = e->priv;
	struct nbd_req *list;
	int done = 0;

	if (min > e->inflight)
		min = e->inflight;
	ls_mutex_lock(&n->lock, &lc_nbd_done_lock);
	while (n->nr_done < min)
		lockstat_cond_wait(&n->cond, &n->lock);
	list = n->done;
	n->done = NULL;
	n->done_tail = &n->done;
	n->nr_done = 0;
	ls_mutex_unlock(&n->lock);
	while (list) {
		struct nbd_req *r = list;

		list = r->next;
		if (r->bounce && r->req->op == IO_READ && r->res > 0)
			iov_scatter(r->req->iov, r->req->iovcnt, r->bounce, r->len);
		bounce_put(n, r->bounce, r->bounce_size);
		e->inflight--;
		r->req->done(r->req, r->res);	/* may queue more */
		free(r);
		done++;
	}
	return done;
}

const struct io_engine_ops io_engine_nbd_ops = {
	.init = nbde_init,
	.exit = nbde_exit,
	.queue = nbde_queue,
	.submit = nbde_submit,
	.reap = nbde_reap,
};
