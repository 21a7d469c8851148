// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The write log (devlog.h) against temporary files: writes and flushes
 * through the psync engine are logged as issued when queued and as
 * completed when their callback runs, in that order, with the written data;
 * the synchronous blkdev_pwritev/blkdev_flush log the same way; reads and
 * injected failures are not logged; with the log closed nothing is
 * recorded and the callbacks are the caller's own.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wbcfs/blkdev.h"
#include "helpers.h"

#define BS 4096
#define MAXREC 32

struct t_rec {
	struct devlog_rec r;
	char *data;		/* WRITE: the logged data */
};

static int done_count, order[8];

static void t_done(struct io_req *req, int res)
{
	order[done_count++] = res;
	ck_assert_ptr_eq(req->done, t_done);	/* the caller's callback is back */
}

/* Read the whole log back. Returns the number of records. */
static int t_read_log(const char *path, struct t_rec *out)
{
	struct devlog_header h;
	int fd = open(path, O_RDONLY), n = 0;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(read(fd, &h, sizeof(h)), sizeof(h));
	ck_assert(!memcmp(h.magic, DEVLOG_MAGIC, 8));
	ck_assert_uint_eq(h.version, DEVLOG_VERSION);
	ck_assert_uint_eq(h.rec_bytes, sizeof(struct devlog_rec));
	while (n < MAXREC && read(fd, &out[n].r, sizeof(out[n].r)) == sizeof(out[n].r)) {
		out[n].data = NULL;
		if (out[n].r.type == DEVLOG_WRITE) {
			out[n].data = malloc(out[n].r.len);
			ck_assert_int_eq(read(fd, out[n].data, out[n].r.len), (ssize_t)out[n].r.len);
		}
		n++;
	}
	close(fd);
	return n;
}

static void t_free_log(struct t_rec *recs, int n)
{
	while (n--)
		free(recs[n].data);
}

START_TEST(engine_order_and_data)
{
	static char a[2 * BS], b[BS], rbuf[BS];
	struct iovec va[2] = { { a, BS }, { a + BS, BS } }, vb = { b, BS }, vr = { rbuf, BS };
	struct io_req w1, w2, fl, rd;
	struct t_rec recs[MAXREC];
	struct io_engine e;
	char dpath[64], lpath[64];
	int dfd = t_tmpfile(dpath, 0), lfd = t_tmpfile(lpath, 0), n;

	close(lfd);
	memset(a, 'a', BS);
	memset(a + BS, 'A', BS);
	memset(b, 'b', BS);
	ck_assert_int_eq(io_engine_init(&e, IO_ENGINE_PSYNC, 8), 0);
	ck_assert_int_eq(devlog_open(lpath), 0);
	done_count = 0;
	w1 = (struct io_req){ .op = IO_WRITE, .fd = dfd, .off = 8 * BS, .iov = va, .iovcnt = 2,
			      .done = t_done };
	w2 = (struct io_req){ .op = IO_WRITE, .fd = dfd, .off = 0, .iov = &vb, .iovcnt = 1,
			      .done = t_done };
	fl = (struct io_req){ .op = IO_FSYNC, .fd = dfd, .done = t_done };
	ck_assert_int_eq(io_engine_queue(&e, &w1), 0);
	ck_assert_int_eq(io_engine_queue(&e, &w2), 0);
	ck_assert_int_eq(io_engine_queue(&e, &fl), 0);
	ck_assert_int_eq(io_engine_drain(&e), 0);
	rd = (struct io_req){ .op = IO_READ, .fd = dfd, .off = 0, .iov = &vr, .iovcnt = 1,
			      .done = t_done };
	ck_assert_int_eq(io_engine_queue(&e, &rd), 0);
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(done_count, 4);
	ck_assert_int_eq(order[0], 2 * BS);
	devlog_close();

	n = t_read_log(lpath, recs);
	ck_assert_int_eq(n, 6);		/* the read is not logged */
	/* psync runs at reap: three issues, then three completions */
	ck_assert_uint_eq(recs[0].r.type, DEVLOG_WRITE);
	ck_assert_uint_eq(recs[0].r.off, 8 * BS);
	ck_assert_uint_eq(recs[0].r.len, 2 * BS);
	ck_assert(!memcmp(recs[0].data, a, 2 * BS));
	ck_assert_uint_eq(recs[1].r.type, DEVLOG_WRITE);
	ck_assert_uint_eq(recs[1].r.off, 0);
	ck_assert(!memcmp(recs[1].data, b, BS));
	ck_assert_uint_eq(recs[2].r.type, DEVLOG_FLUSH);
	ck_assert_uint_eq(recs[3].r.type, DEVLOG_WRITE_DONE);
	ck_assert_uint_eq(recs[3].r.seq, recs[0].r.seq);
	ck_assert_int_eq(recs[3].r.res, 2 * BS);
	ck_assert_uint_eq(recs[4].r.type, DEVLOG_WRITE_DONE);
	ck_assert_uint_eq(recs[4].r.seq, recs[1].r.seq);
	ck_assert_uint_eq(recs[5].r.type, DEVLOG_FLUSH_DONE);
	ck_assert_uint_eq(recs[5].r.seq, recs[2].r.seq);
	ck_assert_int_eq(recs[5].r.res, 0);
	ck_assert_uint_ne(recs[0].r.seq, recs[1].r.seq);
	t_free_log(recs, n);
	io_engine_exit(&e);
	close(dfd);
	unlink(dpath);
	unlink(lpath);
}
END_TEST

START_TEST(sync_paths)
{
	static char d[3 * BS];
	struct iovec v[2] = { { d, BS }, { d + BS, 2 * BS } };
	struct t_rec recs[MAXREC];
	char dpath[64], lpath[64];
	int dfd = t_tmpfile(dpath, 0), lfd = t_tmpfile(lpath, 0), n;

	close(lfd);
	memset(d, 'z', sizeof(d));
	d[5] = 'q';
	ck_assert_int_eq(devlog_open(lpath), 0);
	ck_assert_int_eq(blkdev_pwritev(dfd, v, 2, 3 * BS), 0);
	ck_assert_int_eq(blkdev_flush(dfd), 0);
	ck_assert_uint_ne(devlog_discard_issued(BS, BS), 0);
	devlog_close();
	n = t_read_log(lpath, recs);
	ck_assert_int_eq(n, 5);
	ck_assert_uint_eq(recs[0].r.type, DEVLOG_WRITE);
	ck_assert_uint_eq(recs[0].r.off, 3 * BS);
	ck_assert_uint_eq(recs[0].r.len, 3 * BS);
	ck_assert(!memcmp(recs[0].data, d, sizeof(d)));
	ck_assert_uint_eq(recs[1].r.type, DEVLOG_WRITE_DONE);
	ck_assert_int_eq(recs[1].r.res, 3 * BS);
	ck_assert_uint_eq(recs[2].r.type, DEVLOG_FLUSH);
	ck_assert_uint_eq(recs[3].r.type, DEVLOG_FLUSH_DONE);
	ck_assert_uint_eq(recs[3].r.seq, recs[2].r.seq);
	ck_assert_uint_eq(recs[4].r.type, DEVLOG_DISCARD);
	ck_assert_uint_eq(recs[4].r.len, BS);
	t_free_log(recs, n);
	close(dfd);
	unlink(dpath);
	unlink(lpath);
}
END_TEST

/* Off (closed, or never opened): nothing is written and nothing wrapped. */
START_TEST(off_records_nothing)
{
	static char a[BS];
	struct iovec va = { a, BS };
	struct io_req w, inj;
	struct io_engine e;
	struct stat st;
	char dpath[64], lpath[64];
	int dfd = t_tmpfile(dpath, 0), lfd = t_tmpfile(lpath, 0);

	close(lfd);
	ck_assert_int_eq(devlog_open(lpath), 0);
	ck_assert_int_eq(io_engine_init(&e, IO_ENGINE_PSYNC, 4), 0);
	/* an injected failure never reaches the device: not logged */
	io_engine_set_fault_inject(&e, true);
	done_count = 0;
	inj = (struct io_req){ .op = IO_WRITE, .fd = dfd, .off = 0, .iov = &va, .iovcnt = 1,
			       .done = t_done, .inject_err = -EIO };
	ck_assert_int_eq(io_engine_queue(&e, &inj), 0);
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(order[0], -EIO);
	ck_assert_int_eq(stat(lpath, &st), 0);
	ck_assert_int_eq(st.st_size, sizeof(struct devlog_header));
	devlog_close();
	ck_assert(!devlog_on);

	w = (struct io_req){ .op = IO_WRITE, .fd = dfd, .off = 0, .iov = &va, .iovcnt = 1,
			     .done = t_done };
	ck_assert_int_eq(io_engine_queue(&e, &w), 0);
	ck_assert_ptr_eq(w.done, t_done);
	ck_assert_int_eq(io_engine_drain(&e), 0);
	ck_assert_int_eq(blkdev_pwritev(dfd, &va, 1, 0), 0);
	ck_assert_int_eq(blkdev_flush(dfd), 0);
	ck_assert_uint_eq(devlog_flush_issued(), 0);
	ck_assert_int_eq(done_count, 2);
	ck_assert_int_eq(stat(lpath, &st), 0);
	ck_assert_int_eq(st.st_size, sizeof(struct devlog_header));
	io_engine_exit(&e);
	close(dfd);
	unlink(dpath);
	unlink(lpath);
}
END_TEST

static Suite *devlog_suite(void)
{
	Suite *s = suite_create("devlog");

	t_tcase(s, "log", engine_order_and_data, sync_paths, off_records_nothing);
	return s;
}

int main(void)
{
	return t_run(devlog_suite());
}
