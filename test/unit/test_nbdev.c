// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * NBD devices against a real server: nbdkit's memory plugin on a unix
 * socket, started for each test (skipped when nbdkit is not installed).
 * The nbd engine writes vectored batches beyond its queue depth and reads
 * them back; transfers over the export's maximum block size are split;
 * the fd-keyed blk_* calls reach the export; a refused connection and a
 * read-only export are refused; a server that goes away fails requests
 * with EIO until it is back, and then the connection is made again; one
 * that stops answering is left after nbd_timeout.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wbcfs/blkdev.h"
#include "helpers.h"

#define SIZE_MB 16

static char dir[64], sock[96], uri[160];
static pid_t server = -1;

/* nbdkit binds its socket before it listens: ready once a connect succeeds. */
static bool accepts(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* Start nbdkit: memory plugin of SIZE_MB, @extra arguments before it. false: no nbdkit. */
static bool server_start(const char *const *extra)
{
	const char *argv[24] = { "nbdkit", "-f", "--exit-with-parent", "-U", sock };
	int n = 5, i;

	while (extra && *extra)
		argv[n++] = *extra++;
	argv[n++] = "memory";
	argv[n++] = "size=" "16M";
	argv[n] = NULL;
	unlink(sock);
	server = fork();
	if (server == 0) {
		int null = open("/dev/null", 1);

		dup2(null, 2);
		execvp("nbdkit", (char *const *)argv);
		_exit(127);
	}
	for (i = 0; i < 500; i++) {
		int st;

		if (accepts(sock))
			return true;
		if (waitpid(server, &st, WNOHANG) == server) {
			server = -1;
			return false;
		}
		usleep(10000);
	}
	return false;
}

static void server_kill(void)
{
	if (server > 0) {
		kill(server, SIGKILL);
		waitpid(server, NULL, 0);
	}
	server = -1;
	unlink(sock);
}

static bool setup(const char *const *extra)
{
	snprintf(dir, sizeof(dir), "/tmp/wbcfs-nbdev.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%s/sock", dir);
	snprintf(uri, sizeof(uri), "nbd+unix:///?socket=%s", sock);
	if (server_start(extra))
		return true;
	rmdir(dir);
	fprintf(stderr, "nbdkit not available: test skipped\n");
	return false;
}

static void teardown(void)
{
	server_kill();
	rmdir(dir);
}

static struct nbdev *open_timeout(unsigned retry, unsigned timeout)
{
	struct nbdev *d = NULL;

	ck_assert_int_eq(nbdev_open(&d, uri, false, retry, timeout, stderr), 0);
	return d;
}

static struct nbdev *open_ok(unsigned retry)
{
	return open_timeout(retry, 0);
}

START_TEST(uri_forms)
{
	ck_assert(nbdev_is_uri("nbd://host/export"));
	ck_assert(nbdev_is_uri("nbd+unix:///?socket=/s"));
	ck_assert(nbdev_is_uri("nbds://host:10809/x"));
	ck_assert(!nbdev_is_uri("/dev/sdb1"));
	ck_assert(!nbdev_is_uri("nbd.img"));
	ck_assert_ptr_null(nbdev_of_fd(0));
}
END_TEST

START_TEST(open_info)
{
	struct nbdev *d;
	char buf[1024];
	int fd;

	if (!setup(NULL))
		return;
	d = open_ok(0);
	fd = nbdev_fd(d);
	ck_assert_ptr_eq(nbdev_of_fd(fd), d);
	ck_assert_uint_eq(nbdev_info(d)->size, SIZE_MB << 20);
	ck_assert(nbdev_info(d)->can_flush);
	ck_assert(nbdev_connected(d));
	nbdev_show(d, buf, sizeof(buf));
	ck_assert_ptr_nonnull(strstr(buf, "state connected\n"));
	/* a stray syscall on the standing-in fd fails instead of writing */
	ck_assert_int_lt(pwrite(fd, buf, sizeof(buf), 0), 0);
	nbdev_close(d);
	ck_assert_ptr_null(nbdev_of_fd(fd));
	teardown();
}
END_TEST

#define NREQ 64
#define BS 8192

START_TEST(engine_roundtrip)
{
	static char buf[NREQ][2][BS / 2], back[NREQ][2][BS / 2];
	struct iovec iov[NREQ][2], riov[NREQ][2];
	struct io_req req[NREQ], rreq[NREQ], fs;
	struct io_engine e;
	struct nbdev *d;
	int i;

	if (!setup(NULL))
		return;
	d = open_ok(0);
	ck_assert_int_eq(io_engine_init(&e, IO_ENGINE_NBD, 8), 0);
	t_io.done = t_io.bad = 0;
	for (i = 0; i < NREQ; i++) {
		t_io_write_req(&req[i], iov[i], buf[i][0], BS, nbdev_fd(d), i, NREQ);
		ck_assert_int_eq(io_engine_queue(&e, &req[i]), 0);
		ck_assert_uint_le(e.inflight, 8);
	}
	fs = (struct io_req){ .op = IO_FSYNC, .fd = nbdev_fd(d), .done = t_io_done };
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(io_engine_queue(&e, &fs), 0);
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(t_io.done, NREQ + 1);
	ck_assert_int_eq(t_io.bad, 0);
	/* read back through the engine, into two buffers each */
	for (i = 0; i < NREQ; i++) {
		riov[i][0] = (struct iovec){ back[i][0], BS / 2 };
		riov[i][1] = (struct iovec){ back[i][1], BS / 2 };
		rreq[i] = (struct io_req){ .op = IO_READ, .fd = nbdev_fd(d),
					   .off = (uint64_t)(NREQ - 1 - i) * BS, .iov = riov[i],
					   .iovcnt = 2, .done = t_io_done };
		ck_assert_int_eq(io_engine_queue(&e, &rreq[i]), 0);
	}
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(t_io.bad, 0);
	ck_assert_int_eq(memcmp(buf, back, sizeof(buf)), 0);
	io_engine_exit(&e);
	nbdev_close(d);
	teardown();
}
END_TEST

START_TEST(blk_split)
{
	static const char *const policy[] = { "--filter=blocksize-policy",
					       "blocksize-maximum=65536", NULL };
	size_t len = 1 << 20, i;
	char *a = malloc(len), *b = malloc(len);
	struct iovec v[2] = { { a, len / 2 }, { a + len / 2, len / 2 } };
	struct nbdev *d;
	int fd;

	if (!setup(policy)) {
		free(a);
		free(b);
		return;
	}
	d = open_ok(0);
	fd = nbdev_fd(d);
	ck_assert_uint_eq(nbdev_info(d)->max_request, 65536);
	for (i = 0; i < len; i++)
		a[i] = (char)(i * 7 + i / 4096);
	ck_assert_int_eq(blkdev_pwritev_unlogged(fd, v, 2, 4096, false), (ssize_t)len);
	ck_assert_int_eq(blkdev_flush_unlogged(fd), 0);
	ck_assert_int_eq(blkdev_pread(fd, b, len, 4096), (ssize_t)len);
	ck_assert_int_eq(memcmp(a, b, len), 0);
	ck_assert_int_eq(blkdev_pwritev_unlogged(fd, v, 1, 0, true), (ssize_t)len / 2);	/* FUA */
	/* reads stop at the end of the export, as at a device's */
	ck_assert_int_eq(blkdev_pread(fd, b, 8192, (SIZE_MB << 20) - 4096), 4096);
	ck_assert_int_eq(blkdev_pread(fd, b, 4096, SIZE_MB << 20), 0);
	ck_assert_int_eq(blkdev_discard(fd, 0, 65536), nbdev_info(d)->can_trim ? 0 : -EOPNOTSUPP);
	nbdev_close(d);
	teardown();
	free(a);
	free(b);
}
END_TEST

START_TEST(refusals)
{
	static const char *const ro[] = { "-r", NULL };
	struct nbdev *d = NULL;
	char *text = NULL;
	size_t n = 0;
	FILE *msg;

	if (!setup(ro))
		return;
	msg = open_memstream(&text, &n);
	ck_assert_int_eq(nbdev_open(&d, uri, false, 0, 0, msg), -EROFS);
	fflush(msg);
	ck_assert_ptr_nonnull(strstr(text, "read-only"));
	ck_assert_int_eq(nbdev_open(&d, uri, true, 0, 0, msg), 0);
	ck_assert(nbdev_info(d)->read_only);
	nbdev_close(d);
	server_kill();
	ck_assert_int_eq(nbdev_open(&d, uri, true, 0, 0, msg), -ECONNREFUSED);
	fclose(msg);
	ck_assert_ptr_nonnull(strstr(text, "cannot connect to the NBD server"));
	free(text);
	teardown();
}
END_TEST

/*
 * _i 0: the server dies (SIGKILL: the connection breaks). _i 1: it shuts
 * down (SIGTERM: nbdkit keeps the connection and fails every command with
 * ESHUTDOWN until the client leaves).
 */
START_TEST(server_lost)
{
	char buf[4096] = "kept";
	struct nbdev *d;
	int fd, i;

	if (!setup(NULL))
		return;
	d = open_ok(1);
	fd = nbdev_fd(d);
	ck_assert_int_eq(blkdev_pwritev_unlogged(fd, &(struct iovec){ buf, 4096 }, 1, 0, false), 4096);
	kill(server, _i ? SIGTERM : SIGKILL);
	if (!_i)
		server_kill();
	/* a shutting-down server may finish a few commands first */
	for (i = 0; _i && i < 200; i++) {
		if (blkdev_pwritev_unlogged(fd, &(struct iovec){ buf, 4096 }, 1, 0, false) < 0)
			break;
		usleep(10000);
	}
	/* every request fails, with EIO, while the server is away */
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(blkdev_pwritev_unlogged(fd, &(struct iovec){ buf, 4096 }, 1, 0, false), -EIO);
		ck_assert_int_eq(blkdev_flush_unlogged(fd), -EIO);
	}
	if (_i) {
		waitpid(server, NULL, 0);	/* it leaves once we did */
		server = -1;
		unlink(sock);
	}
	for (i = 0; i < 200 && nbdev_connected(d); i++)
		usleep(10000);
	ck_assert(!nbdev_connected(d));
	ck_assert(server_start(NULL));
	for (i = 0; i < 1000 && !nbdev_connected(d); i++)
		usleep(10000);
	ck_assert(nbdev_connected(d));
	ck_assert_int_eq(blkdev_pwritev_unlogged(fd, &(struct iovec){ buf, 4096 }, 1, 0, false), 4096);
	ck_assert_int_eq(blkdev_flush_unlogged(fd), 0);
	nbdev_show(d, buf, sizeof(buf));
	ck_assert_ptr_nonnull(strstr(buf, "reconnects 1\n"));
	nbdev_close(d);
	teardown();
}
END_TEST

/* A server that stops answering (SIGSTOP): after nbd_timeout its requests fail, and it is left. */
START_TEST(server_hangs)
{
	char buf[4096] = "x";
	struct nbdev *d;
	int fd, i, st;

	if (!setup(NULL))
		return;
	d = open_timeout(1, 1);
	fd = nbdev_fd(d);
	ck_assert_int_eq(blkdev_pwritev_unlogged(fd, &(struct iovec){ buf, 4096 }, 1, 0, false), 4096);
	kill(server, SIGSTOP);
	/* SIGSTOP is asynchronous: a thread of the server could still answer */
	ck_assert_int_eq(waitpid(server, &st, WUNTRACED), server);
	ck_assert(WIFSTOPPED(st));
	ck_assert_int_eq(blkdev_pwritev_unlogged(fd, &(struct iovec){ buf, 4096 }, 1, 0, false), -EIO);
	ck_assert(!nbdev_connected(d));
	kill(server, SIGCONT);
	for (i = 0; i < 1000 && !nbdev_connected(d); i++)
		usleep(10000);
	ck_assert(nbdev_connected(d));
	ck_assert_int_eq(blkdev_pwritev_unlogged(fd, &(struct iovec){ buf, 4096 }, 1, 0, false), 4096);
	nbdev_close(d);
	teardown();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nbdev");
	TCase *tc = tcase_create("nbdev");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, uri_forms);
	tcase_add_test(tc, open_info);
	tcase_add_test(tc, engine_roundtrip);
	tcase_add_test(tc, blk_split);
	tcase_add_test(tc, refusals);
	tcase_add_loop_test(tc, server_lost, 0, 2);
	tcase_add_test(tc, server_hangs);
	suite_add_tcase(s, tc);
	return t_run(s);
}
