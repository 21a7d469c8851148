// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The io engine interface: dispatch to the engine chosen at mount
 * (io_uring, libaio or psync), queueing with back-pressure at the queue
 * depth, and draining. Each engine lives in its own source file.
 */
#include <errno.h>
#include <string.h>

#include "wbcfs/engine.h"

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
	return ops->init(e, e->queue_depth);
}

void io_engine_exit(struct io_engine *e)
{
	if (e->ops)
		e->ops->exit(e);
	e->ops = NULL;
}

int io_engine_queue(struct io_engine *e, struct io_req *req)
{
	while (e->inflight >= e->queue_depth) {
		int ret = e->ops->submit(e);

		if (ret < 0)
			return ret;
		ret = e->ops->reap(e, 1);
		if (ret < 0)
			return ret;
	}
	e->inflight++;
	return e->ops->queue(e, req);
}

int io_engine_submit(struct io_engine *e)
{
	return e->ops->submit(e);
}

int io_engine_reap(struct io_engine *e, unsigned min)
{
	return e->ops->reap(e, min);
}

int io_engine_drain(struct io_engine *e)
{
	int ret = e->ops->submit(e);

	while (!ret && e->inflight) {
		ret = e->ops->reap(e, 1);
		if (ret > 0)
			ret = 0;
	}
	return ret;
}

int io_engine_parse(const char *s, enum io_engine_type *out)
{
	if (!strcmp(s, "uring"))
		*out = IO_ENGINE_URING;
	else if (!strcmp(s, "aio"))
		*out = IO_ENGINE_AIO;
	else if (!strcmp(s, "psync"))
		*out = IO_ENGINE_PSYNC;
	else
		return -EINVAL;
	return 0;
}

const char *io_engine_name(enum io_engine_type t)
{
	switch (t) {
	case IO_ENGINE_URING: return "uring";
	case IO_ENGINE_AIO: return "aio";
	case IO_ENGINE_PSYNC: return "psync";
	default: return "?";
	}
}
