// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The FUSE channel hooks, driven over pipes as libfuse would drive them
 * (read a request, write its reply on the same thread): the INIT reply
 * gets DIRECT_IO_ALLOW_MMAP only when the kernel offered it and the reply
 * has flags2; OPEN and CREATE replies (full and pre-7.9 entry sizes) of
 * direct_io files get PARALLEL_DIRECT_WRITES; replies to other requests,
 * error replies and replies with another unique pass unchanged.
 */
#include <check.h>
#include "helpers.h"
#include <errno.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "../../fs/wbfs_i.h"

#define ALLOW_MMAP_FLAGS2 (1u << 4)	/* FUSE_DIRECT_IO_ALLOW_MMAP >> 32 */

static int req_pipe[2], rep_pipe[2];

static void setup(void)
{
	ck_assert_int_eq(pipe(req_pipe), 0);
	ck_assert_int_eq(pipe(rep_pipe), 0);
}

static void teardown(void)
{
	close(req_pipe[0]);
	close(req_pipe[1]);
	close(rep_pipe[0]);
	close(rep_pipe[1]);
}

/* The kernel sends a request; the read hook passes it on to "libfuse". */
static void t_request(uint32_t opcode, uint64_t unique, const void *arg, size_t len)
{
	char buf[4096];
	struct fuse_in_header in = {
		.len = (uint32_t)(sizeof(in) + len),
		.opcode = opcode,
		.unique = unique,
		.nodeid = 1,
	};

	memcpy(buf, &in, sizeof(in));
	memcpy(buf + sizeof(in), arg, len);
	ck_assert_int_eq(write(req_pipe[1], buf, in.len), (ssize_t)in.len);
	ck_assert_int_eq(wbfs_fuse_io_ops()->read(req_pipe[0], buf, sizeof(buf), NULL),
			 (ssize_t)in.len);
}

/* "libfuse" replies with @arg; @out gets the argument the kernel received. */
static void t_reply(uint64_t unique, int error, void *arg, size_t len, void *out)
{
	struct fuse_out_header oh = {
		.len = (uint32_t)(sizeof(oh) + len),
		.error = error,
		.unique = unique,
	};
	struct iovec iov[2] = { { &oh, sizeof(oh) }, { arg, len } };
	char buf[4096];

	ck_assert_int_eq(wbfs_fuse_io_ops()->writev(rep_pipe[1], iov, len ? 2 : 1, NULL),
			 (ssize_t)oh.len);
	ck_assert_int_eq(read(rep_pipe[0], buf, oh.len), (ssize_t)oh.len);
	memcpy(out, buf + sizeof(oh), len);
}

static struct fuse_init_out t_init(uint32_t flags, uint32_t flags2, size_t reply_len)
{
	struct fuse_init_in in = { .major = 7, .minor = 45, .flags = flags, .flags2 = flags2 };
	struct fuse_init_out out = { .major = 7, .minor = 38, .flags = FUSE_ASYNC_READ,
				     .max_write = 1 << 20 }, got;

	t_request(FUSE_INIT, 2, &in, sizeof(in));
	memset(&got, 0, sizeof(got));
	t_reply(2, 0, &out, reply_len, &got);
	return got;
}

START_TEST(init_offered)
{
	struct fuse_init_out got = t_init(FUSE_INIT_EXT | FUSE_ASYNC_READ, ALLOW_MMAP_FLAGS2,
					  sizeof(struct fuse_init_out));

	ck_assert_uint_eq(got.flags2 & ALLOW_MMAP_FLAGS2, ALLOW_MMAP_FLAGS2);
	ck_assert_uint_eq(got.flags, FUSE_ASYNC_READ | FUSE_INIT_EXT);
	ck_assert_uint_eq(got.max_write, 1 << 20);
}
END_TEST

START_TEST(init_not_offered)
{
	struct fuse_init_out got = t_init(FUSE_INIT_EXT, 0, sizeof(struct fuse_init_out));

	ck_assert_uint_eq(got.flags2, 0);
	ck_assert_uint_eq(got.flags, FUSE_ASYNC_READ);
	got = t_init(0, ALLOW_MMAP_FLAGS2, sizeof(struct fuse_init_out));	/* no INIT_EXT */
	ck_assert_uint_eq(got.flags2, 0);
}
END_TEST

START_TEST(init_compat_reply)
{
	struct fuse_init_out got = t_init(FUSE_INIT_EXT, ALLOW_MMAP_FLAGS2,
					  FUSE_COMPAT_22_INIT_OUT_SIZE);

	ck_assert_uint_eq(got.flags, FUSE_ASYNC_READ);
}
END_TEST

static uint32_t t_open(uint32_t opcode, uint64_t unique, uint64_t reply_unique, int error,
		       size_t entry_len, uint32_t open_flags)
{
	struct fuse_open_in in = { .flags = 2 };
	char arg[sizeof(struct fuse_entry_out) + sizeof(struct fuse_open_out)];
	char got[sizeof(arg)];
	struct fuse_open_out oo = { .fh = 42, .open_flags = open_flags };

	t_request(opcode, unique, &in, sizeof(in));
	memset(arg, 0x5a, entry_len);
	memcpy(arg + entry_len, &oo, sizeof(oo));
	t_reply(reply_unique, error, arg, error ? 0 : entry_len + sizeof(oo), got);
	if (error)
		return 0;
	ck_assert_int_eq(memcmp(got, arg, entry_len), 0);
	memcpy(&oo, got + entry_len, sizeof(oo));
	ck_assert_uint_eq(oo.fh, 42);
	return oo.open_flags;
}

START_TEST(open_direct_io)
{
	ck_assert_uint_eq(t_open(FUSE_OPEN, 4, 4, 0, 0, FOPEN_DIRECT_IO),
			  FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES);
	ck_assert_uint_eq(t_open(FUSE_OPEN, 6, 6, 0, 0, FOPEN_KEEP_CACHE), FOPEN_KEEP_CACHE);
}
END_TEST

START_TEST(create_both_entry_sizes)
{
	ck_assert_uint_eq(t_open(FUSE_CREATE, 8, 8, 0, sizeof(struct fuse_entry_out),
				 FOPEN_DIRECT_IO),
			  FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES);
	ck_assert_uint_eq(t_open(FUSE_CREATE, 10, 10, 0, FUSE_COMPAT_ENTRY_OUT_SIZE,
				 FOPEN_DIRECT_IO),
			  FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES);
}
END_TEST

START_TEST(other_replies_untouched)
{
	/* a reply with another unique, an error reply, then a READ's reply
	 * that happens to look like fuse_open_out */
	ck_assert_uint_eq(t_open(FUSE_OPEN, 12, 14, 0, 0, FOPEN_DIRECT_IO), FOPEN_DIRECT_IO);
	t_open(FUSE_OPEN, 16, 16, -EACCES, 0, 0);
	ck_assert_uint_eq(t_open(FUSE_READ, 18, 18, 0, 0, FOPEN_DIRECT_IO), FOPEN_DIRECT_IO);
	/* the slot is spent once answered */
	t_request(FUSE_OPEN, 20, &(struct fuse_open_in){ 0 }, sizeof(struct fuse_open_in));
	{
		struct fuse_open_out oo = { .open_flags = FOPEN_DIRECT_IO }, got;

		t_reply(20, 0, &oo, sizeof(oo), &got);
		oo.open_flags = FOPEN_DIRECT_IO;
		t_reply(20, 0, &oo, sizeof(oo), &got);
		ck_assert_uint_eq(got.open_flags, FOPEN_DIRECT_IO);
	}
}
END_TEST

static Suite *fuse_io_suite(void)
{
	Suite *s = suite_create("fuse_io");
	TCase *tc;

	tc = tcase_create("init");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, init_offered);
	tcase_add_test(tc, init_not_offered);
	tcase_add_test(tc, init_compat_reply);
	suite_add_tcase(s, tc);
	tc = tcase_create("open");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, open_direct_io);
	tcase_add_test(tc, create_both_entry_sizes);
	tcase_add_test(tc, other_replies_untouched);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run(fuse_io_suite());
}
