// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The io engines against a temporary file: each available engine
 * (io_uring, libaio, psync) writes vectored batches larger than its queue
 * depth at the right offsets, reads them back, fsyncs, and reports errors
 * (-EBADF on a read-only descriptor) through the completion callback;
 * fault injection fails exactly the marked requests, from reap, and only
 * once it is turned on.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wbcfs/blkdev.h"
#include "helpers.h"

#define NREQ 100
#define BS 8192

static void t_engine_roundtrip(enum io_engine_type type)
{
	static char buf[NREQ][2][BS / 2];
	struct iovec iov[NREQ][2];
	struct io_req req[NREQ], fs;
	struct io_engine e;
	char path[64], check[BS];
	int fd = t_tmpfile(path, 0), i, ret;

	ck_assert_int_ge(fd, 0);
	ret = io_engine_init(&e, type, 8);
	if (ret == -ENOSYS || ret == -EPERM) {
		close(fd);
		unlink(path);
		return;		/* engine not built or not allowed here */
	}
	ck_assert_int_eq(ret, 0);
	t_io.done = t_io.bad = 0;
	for (i = 0; i < NREQ; i++) {
		t_io_write_req(&req[i], iov[i], buf[i][0], BS, fd, i, NREQ);
		ck_assert_int_eq(io_engine_queue(&e, &req[i]), 0);
		ck_assert_uint_le(e.inflight, 8);
	}
	fs = (struct io_req){ .op = IO_FSYNC, .fd = fd, .done = t_io_done };
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(t_io.done, NREQ);
	ck_assert_int_eq(t_io.bad, 0);
	ck_assert_int_eq(io_engine_queue(&e, &fs), 0);
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(t_io.last_res, 0);
	for (i = 0; i < NREQ; i++) {
		ck_assert_int_eq(pread(fd, check, BS, (off_t)(NREQ - 1 - i) * BS), BS);
		ck_assert(check[0] == 'a' + i % 26 && check[BS / 2 - 1] == 'a' + i % 26);
		ck_assert(check[BS / 2] == 'A' + i % 26 && check[BS - 1] == 'A' + i % 26);
	}
	/* read back through the engine */
	memset(buf[0], 0, sizeof(buf[0]));
	req[0] = (struct io_req){ .op = IO_READ, .fd = fd, .off = (NREQ - 1) * BS,
				  .iov = iov[0], .iovcnt = 2, .done = t_io_done };
	ck_assert_int_eq(io_engine_queue(&e, &req[0]), 0);
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(t_io.last_res, BS);
	ck_assert(buf[0][0][0] == 'a' && buf[0][1][0] == 'A');
	io_engine_exit(&e);
	close(fd);
	unlink(path);
}

static void t_engine_error(enum io_engine_type type)
{
	static char data[4096];
	struct iovec iov[2] = { { data, 2048 }, { data, 2048 } };
	struct io_req req;
	struct io_engine e;
	char path[64];
	int fd = t_tmpfile(path, 0), rfd;

	close(fd);
	rfd = open(path, O_RDONLY);
	if (io_engine_init(&e, type, 4)) {
		close(rfd);
		unlink(path);
		return;
	}
	req = (struct io_req){ .op = IO_WRITE, .fd = rfd, .off = 0, .iov = iov, .iovcnt = 2,
			       .done = t_io_done };
	ck_assert_int_eq(io_engine_queue(&e, &req), 0);
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(t_io.last_res, -EBADF);
	io_engine_exit(&e);
	close(rfd);
	unlink(path);
}

/* Reaping with requests queued but never submitted must not hang. */
static void t_engine_reap_unsubmitted(enum io_engine_type type)
{
	static char data[3][4096];
	struct iovec iov[3][2];
	struct io_req req[3];
	struct io_engine e;
	char path[64];
	int fd = t_tmpfile(path, 0), i;

	ck_assert_int_ge(fd, 0);
	if (io_engine_init(&e, type, 8)) {
		close(fd);
		unlink(path);
		return;
	}
	t_io.done = t_io.bad = 0;
	for (i = 0; i < 3; i++) {
		iov[i][0] = (struct iovec){ data[i], 2048 };
		iov[i][1] = (struct iovec){ data[i] + 2048, 2048 };
		req[i] = (struct io_req){ .op = IO_WRITE, .fd = fd, .off = (uint64_t)i * 4096,
					  .iov = iov[i], .iovcnt = 2, .done = t_io_done };
		ck_assert_int_eq(io_engine_queue(&e, &req[i]), 0);
	}
	while (t_io.done < 3)
		ck_assert_int_gt(io_engine_reap(&e, 3 - (unsigned)t_io.done), 0);
	ck_assert_int_eq(t_io.bad, 0);
	ck_assert_uint_eq(e.inflight, 0);
	io_engine_exit(&e);
	close(fd);
	unlink(path);
}

/*
 * Fault injection: with it on, requests carrying inject_err complete with
 * it from reap (never synchronously from queue) and leave the file alone,
 * the others are written; with it off (the default) inject_err is ignored.
 */
static void t_engine_inject(enum io_engine_type type)
{
	static char buf[16][BS / 2];
	struct iovec iov[16][2];
	struct io_req req[16];
	struct io_engine e;
	char path[64], check[BS];
	int fd = t_tmpfile(path, 16 * BS), i, ret, round;

	ck_assert_int_ge(fd, 0);
	ret = io_engine_init(&e, type, 4);
	if (ret == -ENOSYS || ret == -EPERM) {
		close(fd);
		unlink(path);
		return;
	}
	ck_assert_int_eq(ret, 0);
	ck_assert(!e.fault_inject);
	for (round = 0; round < 2; round++) {
		bool on = round == 1;

		io_engine_set_fault_inject(&e, on);
		t_io.done = t_io.bad = 0;
		for (i = 0; i < 16; i++) {
			memset(buf[i], 'a' + round, BS / 2);
			iov[i][0] = (struct iovec){ buf[i], BS / 2 };
			iov[i][1] = (struct iovec){ buf[i], BS / 2 };
			req[i] = (struct io_req){ .op = IO_WRITE, .fd = fd, .off = (uint64_t)i * BS,
						  .iov = iov[i], .iovcnt = 2, .done = t_io_done,
						  .inject_err = i % 2 ? -EIO : 0 };
			ck_assert_int_eq(io_engine_queue(&e, &req[i]), 0);
		}
		ck_assert_int_eq(io_engine_drain(&e), 0);
		ck_assert_int_eq(t_io.done, 16);
		ck_assert_int_eq(t_io.bad, on ? 8 : 0);	/* odd ones failed */
		ck_assert_uint_eq(e.inflight, 0);
		for (i = 0; i < 16; i++) {
			char want = (on && i % 2) ? 'a' : 'a' + round;

			ck_assert_int_eq(pread(fd, check, BS, (off_t)i * BS), BS);
			ck_assert_int_eq(check[0], want);
			ck_assert_int_eq(check[BS - 1], want);
		}
	}
	io_engine_exit(&e);
	close(fd);
	unlink(path);
}

static int inject_res[4];

static void t_done_record(struct io_req *req, int res)
{
	inject_res[req - (struct io_req *)req->priv] = res;
}

/* An injected failure is delivered by reap with its own -errno. */
static void t_engine_inject_errno(enum io_engine_type type)
{
	struct io_req req[4];
	struct io_engine e;
	char path[64], page[BS];
	struct iovec iov = { page, BS };
	int fd = t_tmpfile(path, BS), i, ret;

	ck_assert_int_ge(fd, 0);
	ret = io_engine_init(&e, type, 8);
	if (ret == -ENOSYS || ret == -EPERM) {
		close(fd);
		unlink(path);
		return;
	}
	io_engine_set_fault_inject(&e, true);
	for (i = 0; i < 4; i++) {
		inject_res[i] = 1;
		req[i] = (struct io_req){ .op = i == 3 ? IO_FSYNC : IO_READ, .fd = fd, .iov = &iov,
					  .iovcnt = 1, .done = t_done_record, .priv = req,
					  .inject_err = i == 1 ? -ENOSPC : i == 2 ? -EIO : 0 };
		ck_assert_int_eq(io_engine_queue(&e, &req[i]), 0);
	}
	ck_assert_int_eq(inject_res[1], 1);	/* not completed inside queue */
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(inject_res[0], BS);
	ck_assert_int_eq(inject_res[1], -ENOSPC);
	ck_assert_int_eq(inject_res[2], -EIO);
	ck_assert_int_eq(inject_res[3], 0);
	io_engine_exit(&e);
	close(fd);
	unlink(path);
}

START_TEST(engine_inject) { t_engine_inject((enum io_engine_type)_i); }
END_TEST
START_TEST(engine_inject_errno) { t_engine_inject_errno((enum io_engine_type)_i); }
END_TEST

START_TEST(uring_reap_unsubmitted) { t_engine_reap_unsubmitted(IO_ENGINE_URING); }
END_TEST
START_TEST(aio_reap_unsubmitted) { t_engine_reap_unsubmitted(IO_ENGINE_AIO); }
END_TEST
START_TEST(psync_reap_unsubmitted) { t_engine_reap_unsubmitted(IO_ENGINE_PSYNC); }
END_TEST

START_TEST(uring_roundtrip) { t_engine_roundtrip(IO_ENGINE_URING); }
END_TEST
START_TEST(aio_roundtrip) { t_engine_roundtrip(IO_ENGINE_AIO); }
END_TEST
START_TEST(psync_roundtrip) { t_engine_roundtrip(IO_ENGINE_PSYNC); }
END_TEST
START_TEST(uring_error) { t_engine_error(IO_ENGINE_URING); }
END_TEST
START_TEST(aio_error) { t_engine_error(IO_ENGINE_AIO); }
END_TEST
START_TEST(psync_error) { t_engine_error(IO_ENGINE_PSYNC); }
END_TEST

START_TEST(parse_names)
{
	enum io_engine_type t;

	ck_assert_int_eq(io_engine_parse("uring", &t), 0);
	ck_assert_int_eq(t, IO_ENGINE_URING);
	ck_assert_int_eq(io_engine_parse("aio", &t), 0);
	ck_assert_int_eq(t, IO_ENGINE_AIO);
	ck_assert_int_eq(io_engine_parse("psync", &t), 0);
	ck_assert_int_eq(io_engine_parse("nbd", &t), 0);
	ck_assert_int_eq(t, IO_ENGINE_NBD);
	ck_assert_int_eq(io_engine_parse("sync", &t), -EINVAL);
	ck_assert_str_eq(io_engine_name(IO_ENGINE_PSYNC), "psync");
}
END_TEST

static Suite *engine_suite(void)
{
	Suite *s = suite_create("engine");
	TCase *tc;

	t_tcase(s, "roundtrip", uring_roundtrip, aio_roundtrip, psync_roundtrip);
	t_tcase(s, "reap", uring_reap_unsubmitted, aio_reap_unsubmitted, psync_reap_unsubmitted);
	t_tcase(s, "errors", uring_error, aio_error, psync_error);
	tc = tcase_create("inject");
	tcase_add_loop_test(tc, engine_inject, IO_ENGINE_URING, IO_ENGINE_PSYNC + 1);
	tcase_add_loop_test(tc, engine_inject_errno, IO_ENGINE_URING, IO_ENGINE_PSYNC + 1);
	suite_add_tcase(s, tc);
	t_tcase(s, "names", parse_names);
	return s;
}

int main(void)
{
	return t_run(engine_suite());
}
