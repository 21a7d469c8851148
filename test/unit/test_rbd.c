// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The rbd engine's completion plumbing, without a cluster: a fake device
 * (blkdev_i.h's rbd_engine_lookup/rbd_engine_submit) completes requests on
 * threads of its own, in any order, as librbd's finisher does. Every
 * callback must run exactly once, on the engine's owning thread, from
 * reap; the data reach the fake image at their offsets; a device error
 * and a descriptor that is no RBD device come back through the callback;
 * a callback may queue the next request. rbd: device names parse as such.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wbcfs/blkdev.h"
#include "../../blkdev/blkdev_i.h"
#include "helpers.h"

#define FAKE_FD		4242
#define IMG_SIZE	(1u << 20)
#define NREQ		200
#define BS		4096

static char image[IMG_SIZE];
static struct rbdev *const fake_dev = (struct rbdev *)&image;

struct fake_op {
	enum rbdev_op op;
	const struct iovec *iov;
	int iovcnt;
	uint64_t off;
	uint64_t len;
	void (*done)(void *priv, int res);
	void *priv;
	struct fake_op *next;
};

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fake_cond = PTHREAD_COND_INITIALIZER;
static struct fake_op *fake_queue;
static unsigned fake_nr_queued;
static bool fake_stop;
static int fake_fail;			/* -errno every request completes with; 0: none */
static pthread_t owner;

static struct rbdev *fake_lookup(int fd)
{
	return fd == FAKE_FD ? fake_dev : NULL;
}

static void fake_submit(struct rbdev *d, enum rbdev_op op, const struct iovec *iov, int iovcnt,
			uint64_t off, uint64_t len, void (*done)(void *priv, int res), void *priv)
{
	struct fake_op *o = calloc(1, sizeof(*o));

	ck_assert_ptr_eq(d, fake_dev);
	ck_assert_ptr_nonnull(o);
	*o = (struct fake_op){ op, iov, iovcnt, off, len, done, priv, NULL };
	pthread_mutex_lock(&fake_lock);
	/* pushed at the head: completions come back out of order */
	o->next = fake_queue;
	fake_queue = o;
	fake_nr_queued++;
	pthread_cond_broadcast(&fake_cond);
	pthread_mutex_unlock(&fake_lock);
}

/* librbd's finisher, twice over: two threads completing whatever is queued. */
static void *fake_finisher(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&fake_lock);
	for (;;) {
		struct fake_op *o;
		uint64_t off;
		int i;

		while (!fake_queue && !fake_stop)
			pthread_cond_wait(&fake_cond, &fake_lock);
		if (!fake_queue)
			break;
		o = fake_queue;
		fake_queue = o->next;
		pthread_mutex_unlock(&fake_lock);
		usleep((unsigned)(rand() % 200));
		off = o->off;
		for (i = 0; i < o->iovcnt && !fake_fail; i++) {
			if (o->op == RBDEV_WRITE)
				memcpy(image + off, o->iov[i].iov_base, o->iov[i].iov_len);
			else if (o->op == RBDEV_READ)
				memcpy(o->iov[i].iov_base, image + off, o->iov[i].iov_len);
			off += o->iov[i].iov_len;
		}
		/* as rbdev_submit's contract: bytes, 0 for a flush, or -errno */
		o->done(o->priv, fake_fail ? fake_fail : (int)o->len);
		free(o);
		pthread_mutex_lock(&fake_lock);
	}
	pthread_mutex_unlock(&fake_lock);
	return NULL;
}

static pthread_t finishers[2];

static void fake_start(void)
{
	int i;

	rbd_engine_lookup = fake_lookup;
	rbd_engine_submit = fake_submit;
	fake_stop = false;
	fake_fail = 0;
	fake_nr_queued = 0;
	owner = pthread_self();
	memset(image, 0, sizeof(image));
	for (i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&finishers[i], NULL, fake_finisher, NULL), 0);
}

static void fake_end(void)
{
	int i;

	pthread_mutex_lock(&fake_lock);
	fake_stop = true;
	pthread_cond_broadcast(&fake_cond);
	pthread_mutex_unlock(&fake_lock);
	for (i = 0; i < 2; i++)
		pthread_join(finishers[i], NULL);
	rbd_engine_lookup = rbdev_of_fd;
	rbd_engine_submit = rbdev_submit;
}

static int calls[NREQ], results[NREQ];

static void count_done(struct io_req *req, int res)
{
	intptr_t i = (intptr_t)req->priv;

	ck_assert(pthread_equal(pthread_self(), owner));	/* the owner's reap, only */
	calls[i]++;
	results[i] = res;
}

/* Vectored writes, more than the queue depth, then read back: each once, in place. */
START_TEST(t_rbd_engine_roundtrip)
{
	static char buf[NREQ][2][BS / 2], back[NREQ][BS];
	struct iovec iov[NREQ][2], riov[NREQ];
	struct io_req req[NREQ], fs = {0};
	struct io_engine e;
	int i;

	fake_start();
	ck_assert_int_eq(io_engine_init(&e, IO_ENGINE_RBD, 8), 0);
	memset(calls, 0, sizeof(calls));
	for (i = 0; i < NREQ; i++) {
		memset(buf[i][0], 'a' + i % 26, BS / 2);
		memset(buf[i][1], 'A' + i % 26, BS / 2);
		iov[i][0] = (struct iovec){ buf[i][0], BS / 2 };
		iov[i][1] = (struct iovec){ buf[i][1], BS / 2 };
		req[i] = (struct io_req){ .op = IO_WRITE, .fd = FAKE_FD, .off = (uint64_t)i * BS,
					  .iov = iov[i], .iovcnt = 2, .done = count_done,
					  .priv = (void *)(intptr_t)i };
		ck_assert_int_eq(io_engine_queue(&e, &req[i]), 0);
		ck_assert_uint_le(e.inflight, 8);
	}
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_uint_eq(e.inflight, 0);
	for (i = 0; i < NREQ; i++) {
		ck_assert_int_eq(calls[i], 1);
		ck_assert_int_eq(results[i], BS);
		ck_assert_int_eq(image[i * BS], 'a' + i % 26);
		ck_assert_int_eq(image[i * BS + BS / 2], 'A' + i % 26);
	}
	memset(calls, 0, sizeof(calls));
	for (i = 0; i < NREQ; i++) {
		riov[i] = (struct iovec){ back[i], BS };
		req[i] = (struct io_req){ .op = IO_READ, .fd = FAKE_FD, .off = (uint64_t)i * BS,
					  .iov = &riov[i], .iovcnt = 1, .done = count_done,
					  .priv = (void *)(intptr_t)i };
		ck_assert_int_eq(io_engine_queue(&e, &req[i]), 0);
	}
	fs = (struct io_req){ .op = IO_FSYNC, .fd = FAKE_FD, .done = count_done,
			      .priv = (void *)(intptr_t)0 };
	ck_assert_int_eq(io_engine_drain(&e), 0);
	for (i = 0; i < NREQ; i++) {
		ck_assert_int_eq(calls[i], 1);
		ck_assert_int_eq(results[i], BS);
		ck_assert(!memcmp(back[i], image + i * BS, BS));
	}
	/* a flush completes with 0, not a byte count */
	calls[0] = 0;
	ck_assert_int_eq(io_engine_queue(&e, &fs), 0);
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(calls[0], 1);
	ck_assert_int_eq(results[0], 0);
	io_engine_exit(&e);
	fake_end();
}
END_TEST

/* The device's error, and a descriptor that is no RBD device, reach the callback. */
START_TEST(t_rbd_engine_errors)
{
	static char b[BS];
	struct iovec v = { b, BS };
	struct io_req r0 = { .op = IO_WRITE, .fd = FAKE_FD, .iov = &v, .iovcnt = 1,
			     .done = count_done, .priv = (void *)(intptr_t)0 };
	struct io_req r1 = { .op = IO_WRITE, .fd = 3, .iov = &v, .iovcnt = 1,
			     .done = count_done, .priv = (void *)(intptr_t)1 };
	struct io_engine e;

	fake_start();
	fake_fail = -EIO;
	ck_assert_int_eq(io_engine_init(&e, IO_ENGINE_RBD, 4), 0);
	memset(calls, 0, sizeof(calls));
	ck_assert_int_eq(io_engine_queue(&e, &r0), 0);
	ck_assert_int_eq(io_engine_queue(&e, &r1), 0);
	ck_assert_int_eq(calls[1], 0);	/* not from queue: from reap */
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(calls[0], 1);
	ck_assert_int_eq(results[0], -EIO);
	ck_assert_int_eq(calls[1], 1);
	ck_assert_int_eq(results[1], -EBADF);
	io_engine_exit(&e);
	fake_end();
}
END_TEST

static struct io_engine *chain_eng;
static int chain_left, chain_calls;

/* Each completion queues the next request, from inside reap. */
static void chain_done(struct io_req *req, int res)
{
	ck_assert(pthread_equal(pthread_self(), owner));
	ck_assert_int_eq(res, BS);
	chain_calls++;
	if (chain_left-- > 0)
		ck_assert_int_eq(io_engine_queue(chain_eng, req), 0);
}

START_TEST(t_rbd_engine_chain)
{
	static char b[BS];
	struct iovec v = { b, BS };
	struct io_req r = { .op = IO_WRITE, .fd = FAKE_FD, .iov = &v, .iovcnt = 1,
			    .done = chain_done };
	struct io_engine e;

	fake_start();
	ck_assert_int_eq(io_engine_init(&e, IO_ENGINE_RBD, 2), 0);
	chain_eng = &e;
	chain_left = 50;
	chain_calls = 0;
	ck_assert_int_eq(io_engine_queue(&e, &r), 0);
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(chain_calls, 51);
	ck_assert_uint_eq(e.inflight, 0);
	io_engine_exit(&e);
	fake_end();
}
END_TEST

START_TEST(t_rbd_spec)
{
	enum io_engine_type t;

	ck_assert(rbdev_is_spec("rbd:pool/image"));
	ck_assert(rbdev_is_spec("rbd:image@snap"));
	ck_assert(!rbdev_is_spec("/dev/loop0"));
	ck_assert(!rbdev_is_spec("nbd://localhost/x"));
	ck_assert(!rbdev_of_fd(0));
	ck_assert_int_eq(io_engine_parse("rbd", &t), 0);
	ck_assert_int_eq(t, IO_ENGINE_RBD);
}
END_TEST

static Suite *rbd_suite(void)
{
	Suite *s = suite_create("rbd");
	TCase *tc = tcase_create("engine");

	tcase_add_test(tc, t_rbd_engine_roundtrip);
	tcase_add_test(tc, t_rbd_engine_errors);
	tcase_add_test(tc, t_rbd_engine_chain);
	tcase_add_test(tc, t_rbd_spec);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run(rbd_suite());
}
