/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * I/O engines: one small interface, one source file per engine (io_uring,
 * libaio, psync; nbd for NBD devices, rbd for RBD images). An engine instance belongs to one thread; requests are
 * queued, submitted in batches, and completed through their callback from
 * engine_reap() on that thread.
 */
#ifndef WBCFS_ENGINE_H
#define WBCFS_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

enum io_engine_type {
	IO_ENGINE_URING,
	IO_ENGINE_AIO,
	IO_ENGINE_PSYNC,
	IO_ENGINE_NBD,		/* an NBD device (nbdev.h) */
	IO_ENGINE_RBD,		/* a Ceph RBD image (rbdev.h) */
	NR_IO_ENGINES
};

enum io_op {
	IO_READ,
	IO_WRITE,
	IO_FSYNC,	/* fdatasync of the whole fd; off/iov ignored */
};

struct io_req {
	enum io_op op;
	int fd;
	uint64_t off;			/* bytes */
	struct iovec *iov;
	int iovcnt;
	void (*done)(struct io_req *req, int res);	/* res: bytes or -errno */
	void *priv;
	/*
	 * Fault injection (testing): when the engine has it enabled
	 * (io_engine_set_fault_inject) and this is a -errno, the request is
	 * not sent to the device but completes with it from the next reap,
	 * as a failing device would. 0: a normal request.
	 */
	int inject_err;
	struct io_req *inject_next;	/* engine: on its injected-failure list */
	/* write_log (devlog.h): the seq and the caller's callback */
	uint64_t log_seq;
	void (*log_done)(struct io_req *req, int res);
};

struct io_engine;

/* An engine's name is io_engine_name()'s: one list in engine.c. */
struct io_engine_ops {
	int (*init)(struct io_engine *e, unsigned queue_depth);
	void (*exit)(struct io_engine *e);
	/* queue one request; may submit when the queue is full */
	int (*queue)(struct io_engine *e, struct io_req *req);
	/* submit everything queued; returns 0 or -errno */
	int (*submit)(struct io_engine *e);
	/* reap completions, waiting for at least @min; returns number reaped */
	int (*reap)(struct io_engine *e, unsigned min);
};

struct io_engine {
	const struct io_engine_ops *ops;
	unsigned queue_depth;
	unsigned inflight;		/* queued or submitted, not yet completed */
	void *priv;			/* engine's own state */
	bool fault_inject;		/* honour io_req.inject_err; off by default */
	struct io_req *injected, **injected_tail;	/* to complete with their error */
};

/** Returns 0 or -errno (-ENOSYS when the engine is unavailable). */
int io_engine_init(struct io_engine *e, enum io_engine_type type, unsigned queue_depth);
void io_engine_exit(struct io_engine *e);
/**
 * Honour io_req.inject_err from now on (mount option fault_inject). Off
 * after io_engine_init, so a request can never fail by accident.
 */
void io_engine_set_fault_inject(struct io_engine *e, bool on);
/** Queue; if the engine is at queue_depth, reaps until there is room. */
int io_engine_queue(struct io_engine *e, struct io_req *req);
int io_engine_submit(struct io_engine *e);
/** Complete injected failures, then reap the engine; returns the number completed or -errno. */
int io_engine_reap(struct io_engine *e, unsigned min);
/** Submit and reap until nothing is in flight. */
int io_engine_drain(struct io_engine *e);
/** Parse an engine's name ("uring", "aio", "psync", "nbd"). Returns 0 or -EINVAL. */
int io_engine_parse(const char *s, enum io_engine_type *out);
/** The engine's name; "?" past the last (NR_IO_ENGINES). */
const char *io_engine_name(enum io_engine_type t);

#endif
