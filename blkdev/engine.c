// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The io engine interface: dispatch to the engine chosen at mount
 * (io_uring, libaio or psync), queueing with back-pressure at the queue
 * depth, and draining. Each engine lives in its own source file.
 *
 * Fault injection wraps every engine the same way: a request carrying
 * inject_err (only honoured once io_engine_set_fault_inject() turned it
 * on) never reaches the engine; it waits on a list and completes with its
 * error from the next reap, on the owning thread, like a real completion.
 *
 * The write log (devlog.h) wraps every engine the same way too: a write or
 * flush is logged as issued when it is queued (before the engine may send
 * it) and as completed when its callback runs, through a callback that
 * stands in for the caller's. Injected failures never reach the device and
 * are not logged.
 */
#include <errno.h>
#include <string.h>

#include "wbcfs/blkdev/devlog.h"
#include "blkdev_i.h"

static const struct io_engine_ops *engine_ops(enum io_engine_type t)
{
	switch (t) {
#ifndef WBCFS_NO_URING
	case IO_ENGINE_URING:
		return &io_engine_uring_ops;
#endif
#ifndef WBCFS_NO_AIO
	case IO_ENGINE_AIO:
		return &io_engine_aio_ops;
#endif
	case IO_ENGINE_PSYNC:
		return &io_engine_psync_ops;
	case IO_ENGINE_NBD:
		return &io_engine_nbd_ops;
	case IO_ENGINE_RBD:
		return &io_engine_rbd_ops;
	default:
		return NULL;
	}
}

int io_engine_init(struct io_engine *e, enum io_engine_type type, unsigned queue_depth)
{
	const struct io_engine_ops *ops = engine_ops(type);

	memset(e, 0, sizeof(*e));
	if (!ops)
		return -ENOSYS;
	e->ops = ops;
	e->queue_depth = queue_depth ? queue_depth : 1;
	e->injected_tail = &e->injected;
	return ops->init(e, e->queue_depth);
}

void io_engine_exit(struct io_engine *e)
{
	if (e->ops)
		e->ops->exit(e);
	e->ops = NULL;
}

void io_engine_set_fault_inject(struct io_engine *e, bool on)
{
	e->fault_inject = on;
}

/* Park a request that is to fail; io_engine_reap() completes it. */
static void engine_inject(struct io_engine *e, struct io_req *req)
{
	req->inject_next = NULL;
	*e->injected_tail = req;
	e->injected_tail = &req->inject_next;
}

/* Complete every parked failure. Returns how many. */
static int engine_complete_injected(struct io_engine *e)
{
	int done = 0;

	while (e->injected) {
		struct io_req *req = e->injected;

		e->injected = req->inject_next;
		if (!e->injected)
			e->injected_tail = &e->injected;
		e->inflight--;
		req->done(req, req->inject_err);	/* may queue more */
		done++;
	}
	return done;
}

/* Log the completion, then hand the request back to its owner's callback. */
static void engine_log_done(struct io_req *req, int res)
{
	void (*done)(struct io_req *req, int res) = req->log_done;

	devlog_completed(req->op == IO_FSYNC ? DEVLOG_FLUSH_DONE : DEVLOG_WRITE_DONE,
			 req->log_seq, res);
	req->done = done;	/* before: the callback may queue @req again */
	done(req, res);
}

static void engine_log_issue(struct io_req *req)
{
	if (req->op == IO_READ)
		return;
	req->log_seq = req->op == IO_FSYNC ? devlog_flush_issued()
					   : devlog_write_issued(req->off, req->iov, req->iovcnt);
	req->log_done = req->done;
	req->done = engine_log_done;
}

int io_engine_queue(struct io_engine *e, struct io_req *req)
{
	int ret;

	while (e->inflight >= e->queue_depth) {
		ret = e->ops->submit(e);
		if (ret < 0)
			return ret;
		ret = io_engine_reap(e, 1);
		if (ret < 0)
			return ret;
	}
	e->inflight++;
	if (e->fault_inject && req->inject_err < 0) {
		engine_inject(e, req);
		return 0;
	}
	if (devlog_on)
		engine_log_issue(req);
	ret = e->ops->queue(e, req);
	if (ret < 0 && devlog_on && req->done == engine_log_done) {
		/* never sent: complete its log record, give the callback back */
		devlog_completed(req->op == IO_FSYNC ? DEVLOG_FLUSH_DONE : DEVLOG_WRITE_DONE,
				 req->log_seq, ret);
		req->done = req->log_done;
	}
	return ret;
}

int io_engine_submit(struct io_engine *e)
{
	return e->ops->submit(e);
}

int io_engine_reap(struct io_engine *e, unsigned min)
{
	int done = engine_complete_injected(e), ret;

	/* the engine caps @min at what it has in flight itself */
	ret = e->ops->reap(e, (unsigned)done >= min ? 0 : min - (unsigned)done);
	return ret < 0 ? ret : done + ret;
}

int io_engine_drain(struct io_engine *e)
{
	int ret = e->ops->submit(e);

	while (!ret && e->inflight) {
		ret = io_engine_reap(e, 1);
		if (ret > 0)
			ret = 0;
	}
	return ret;
}

/* The engines' names: the mount option's values, --help's and the messages'. */
static const char *const engine_names[NR_IO_ENGINES] = {
	[IO_ENGINE_URING] = "uring",
	[IO_ENGINE_AIO] = "aio",
	[IO_ENGINE_PSYNC] = "psync",
	[IO_ENGINE_NBD] = "nbd",
	[IO_ENGINE_RBD] = "rbd",
};

int io_engine_parse(const char *s, enum io_engine_type *out)
{
	unsigned i;

	for (i = 0; i < NR_IO_ENGINES; i++) {
		if (!strcmp(s, engine_names[i])) {
			*out = (enum io_engine_type)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *io_engine_name(enum io_engine_type t)
{
	return (unsigned)t < NR_IO_ENGINES ? engine_names[t] : "?";
}
