// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The FUSE channel hooks, driven over pipes as libfuse would drive them
 * (read a request, write its reply on the same thread): the INIT reply
 * gets DIRECT_IO_ALLOW_MMAP only when the kernel offered it and the reply
 * has flags2; OPEN and CREATE replies (full and pre-7.9 entry sizes) of
 * direct_io files get PARALLEL_DIRECT_WRITES; replies to other requests,
 * error replies and replies with another unique pass unchanged. FUSE_STATX
 * goes on as the GETATTR it begins with and that reply comes back as a
 * fuse_statx_out; FUSE_TMPFILE is answered by the hook itself.
 *
 * The hooks' userdata is a mount's struct wbfs, whose w->fio is its
 * connection: here a wbfs with no filesystem behind it (destroyed). Two
 * such connections in one process hold throttled replies apart: each goes
 * back on its own fd, an interrupt on one connection does not release the
 * other's, and stopping one sends only its own.
 */
#include <check.h>
#include "helpers.h"
#include <errno.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "../../ext4/ext4_i.h"
#include "../../fuse/fuse_i.h"

#define ALLOW_MMAP_FLAGS2 (1u << 4)	/* FUSE_DIRECT_IO_ALLOW_MMAP >> 32 */

static int req_pipe[2], rep_pipe[2];
static struct wbfs *t_w;	/* the connection the pipes stand for */

/* A mount's connection state without a filesystem or a session. */
static struct wbfs *t_conn_new(void)
{
	struct wbfs *w = calloc(1, sizeof(*w));

	ck_assert_ptr_nonnull(w);
	w->destroyed = true;	/* no filesystem: TMPFILE fails, STATX has no btime */
	ck_assert_int_eq(fuse_io_install(w, NULL), 0);
	ck_assert_ptr_nonnull(w->fio);
	return w;
}

static void t_conn_free(struct wbfs *w)
{
	fuse_io_transport_stop(w);
	ck_assert_ptr_null(w->fio);
	free(w);
}

static void setup(void)
{
	ck_assert_int_eq(pipe(req_pipe), 0);
	ck_assert_int_eq(pipe(rep_pipe), 0);
	t_w = t_conn_new();
}

static void teardown(void)
{
	t_conn_free(t_w);
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
	ck_assert_int_eq(fuse_io_ops()->read(req_pipe[0], buf, sizeof(buf), t_w),
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

	ck_assert_int_eq(fuse_io_ops()->writev(rep_pipe[1], iov, len ? 2 : 1, t_w),
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

/* The protocol 7.39 structures (the installed header is 7.38). */
#define T_FUSE_TMPFILE 51
#define T_FUSE_STATX 52
#define T_STATX_BASIC_STATS 0x7ffU

struct t_sx_time {
	int64_t sec;
	uint32_t nsec;
	int32_t reserved;
};

struct t_statx_in {
	uint32_t getattr_flags, reserved;
	uint64_t fh;
	uint32_t sx_flags, sx_mask;
};

struct t_statx_out {
	uint64_t attr_valid;
	uint32_t attr_valid_nsec, flags;
	uint64_t spare[2];
	uint32_t mask, blksize;
	uint64_t attributes;
	uint32_t nlink, uid, gid;
	uint16_t mode, spare0;
	uint64_t ino, size, blocks, attributes_mask;
	struct t_sx_time atime, btime, ctime, mtime;
	uint32_t rdev_major, rdev_minor, dev_major, dev_minor;
	uint64_t spare2[14];
};

/* A STATX request: what "libfuse" gets must be a GETATTR of the same node. */
static void t_statx_request(uint64_t unique)
{
	struct t_statx_in sin = { .getattr_flags = FUSE_GETATTR_FH, .fh = 77,
				  .sx_mask = 0xfff };
	struct fuse_in_header in = {
		.len = (uint32_t)(sizeof(in) + sizeof(sin)),
		.opcode = T_FUSE_STATX,
		.unique = unique,
		.nodeid = 5,
	};
	const struct fuse_getattr_in *gin;
	const struct fuse_in_header *got;
	char buf[4096];

	memcpy(buf, &in, sizeof(in));
	memcpy(buf + sizeof(in), &sin, sizeof(sin));
	ck_assert_int_eq(write(req_pipe[1], buf, in.len), (ssize_t)in.len);
	memset(buf, 0, sizeof(buf));
	ck_assert_int_eq(fuse_io_ops()->read(req_pipe[0], buf, sizeof(buf), t_w),
			 (ssize_t)(sizeof(in) + sizeof(*gin)));
	got = (const void *)buf;
	gin = (const void *)(got + 1);
	ck_assert_uint_eq(got->opcode, FUSE_GETATTR);
	ck_assert_uint_eq(got->len, sizeof(in) + sizeof(*gin));
	ck_assert_uint_eq(got->unique, unique);
	ck_assert_uint_eq(got->nodeid, 5);
	ck_assert_uint_eq(gin->getattr_flags, FUSE_GETATTR_FH);
	ck_assert_uint_eq(gin->fh, 77);
}

START_TEST(statx_as_getattr)
{
	struct fuse_attr_out ao = {
		.attr_valid = 10, .attr_valid_nsec = 5,
		.attr = { .ino = 5, .size = 123457, .blocks = 248, .atime = 1700000001,
			  .mtime = 1700000002, .ctime = 1700000003, .atimensec = 11,
			  .mtimensec = 22, .ctimensec = 33, .mode = S_IFCHR | 0640,
			  .nlink = 2, .uid = 1000, .gid = 100,
			  .rdev = (uint32_t)makedev(259, 70000), .blksize = 4096 },
	};
	struct fuse_out_header oh = {
		.len = (uint32_t)(sizeof(oh) + sizeof(ao)), .unique = 30,
	};
	struct iovec iov[2] = { { &oh, sizeof(oh) }, { &ao, sizeof(ao) } };
	char buf[4096];
	struct fuse_out_header *goth = (void *)buf;
	struct t_statx_out sx;

	ck_assert_uint_eq(sizeof(sx), 288);
	t_statx_request(30);
	/* the hook tells "libfuse" its whole reply went out */
	ck_assert_int_eq(fuse_io_ops()->writev(rep_pipe[1], iov, 2, t_w),
			 (ssize_t)oh.len);
	ck_assert_int_eq(read(rep_pipe[0], buf, sizeof(buf)),
			 (ssize_t)(sizeof(oh) + sizeof(sx)));
	ck_assert_uint_eq(goth->len, sizeof(oh) + sizeof(sx));
	ck_assert_uint_eq(goth->unique, 30);
	ck_assert_int_eq(goth->error, 0);
	memcpy(&sx, buf + sizeof(oh), sizeof(sx));
	ck_assert_uint_eq(sx.attr_valid, 10);
	ck_assert_uint_eq(sx.attr_valid_nsec, 5);
	/* no filesystem here, so no birth time: the basic stats only */
	ck_assert_uint_eq(sx.mask, T_STATX_BASIC_STATS);
	ck_assert_uint_eq(sx.ino, 5);
	ck_assert_uint_eq(sx.size, 123457);
	ck_assert_uint_eq(sx.blocks, 248);
	ck_assert_uint_eq(sx.blksize, 4096);
	ck_assert_uint_eq(sx.mode, S_IFCHR | 0640);
	ck_assert_uint_eq(sx.nlink, 2);
	ck_assert_uint_eq(sx.uid, 1000);
	ck_assert_uint_eq(sx.gid, 100);
	ck_assert_int_eq(sx.atime.sec, 1700000001);
	ck_assert_uint_eq(sx.atime.nsec, 11);
	ck_assert_int_eq(sx.mtime.sec, 1700000002);
	ck_assert_uint_eq(sx.mtime.nsec, 22);
	ck_assert_int_eq(sx.ctime.sec, 1700000003);
	ck_assert_uint_eq(sx.ctime.nsec, 33);
	ck_assert_int_eq(sx.btime.sec, 0);
	ck_assert_uint_eq(sx.rdev_major, 259);
	ck_assert_uint_eq(sx.rdev_minor, 70000);
}
END_TEST

START_TEST(statx_error_and_others)
{
	struct fuse_attr_out ao = { .attr_valid = 1 }, got;

	/* an error reply goes out as it is */
	t_statx_request(40);
	t_reply(40, -ENOENT, NULL, 0, &got);
	/* a plain GETATTR's reply is not turned into a STATX reply */
	t_request(FUSE_GETATTR, 42, &(struct fuse_getattr_in){ 0 },
		  sizeof(struct fuse_getattr_in));
	t_reply(42, 0, &ao, sizeof(ao), &got);
	ck_assert_uint_eq(got.attr_valid, 1);
	/* a STATX too short to hold its argument is left to libfuse */
	t_request(T_FUSE_STATX, 44, &(uint32_t){ 0 }, sizeof(uint32_t));
	t_reply(44, -ENOSYS, NULL, 0, &got);
}
END_TEST

/* FUSE_TMPFILE is answered by the hook (EIO: no filesystem here). */
START_TEST(tmpfile_answered_here)
{
	struct fuse_create_in cin = { .flags = O_RDWR, .mode = S_IFREG | 0600 };
	struct fuse_in_header in = {
		.len = (uint32_t)(sizeof(in) + sizeof(cin) + 2),
		.opcode = T_FUSE_TMPFILE,
		.unique = 50,
		.nodeid = 1,
	};
	struct fuse_in_header next = {
		.len = sizeof(next) + sizeof(struct fuse_getattr_in),
		.opcode = FUSE_GETATTR,
		.unique = 52,
		.nodeid = 1,
	};
	struct fuse_out_header oh;
	char buf[4096];
	int pkt[2];

	/* packets: each read returns one request, as /dev/fuse does, and
	 * replies go back on the same fd */
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pkt), 0);
	memcpy(buf, &in, sizeof(in));
	memcpy(buf + sizeof(in), &cin, sizeof(cin));
	memcpy(buf + sizeof(in) + sizeof(cin), "/", 2);
	ck_assert_int_eq(write(pkt[1], buf, in.len), (ssize_t)in.len);
	memset(buf, 0, sizeof(buf));
	memcpy(buf, &next, sizeof(next));
	ck_assert_int_eq(write(pkt[1], buf, next.len), (ssize_t)next.len);
	/* the hook answers the TMPFILE on the fd it read it from and hands
	 * "libfuse" the next request */
	ck_assert_int_eq(fuse_io_ops()->read(pkt[0], buf, sizeof(buf), t_w),
			 (ssize_t)next.len);
	ck_assert_uint_eq(((struct fuse_in_header *)buf)->unique, 52);
	ck_assert_int_eq(read(pkt[1], &oh, sizeof(oh)), (ssize_t)sizeof(oh));
	ck_assert_uint_eq(oh.unique, 50);
	ck_assert_int_eq(oh.error, -EIO);
	ck_assert_uint_eq(oh.len, sizeof(oh));
	close(pkt[0]);
	close(pkt[1]);
}
END_TEST

/* ---- held replies: two connections in one process ------------------------ */

/*
 * One connection as the kernel sees it: requests on a packet socket (each
 * read returns one, as /dev/fuse does), replies on a pipe.
 */
struct t_conn {
	struct wbfs *w;
	int req[2], rep[2];
};

static void t_conn_open(struct t_conn *tc)
{
	tc->w = t_conn_new();
	ck_assert_int_eq(fuse_io_start(tc->w), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, tc->req), 0);
	ck_assert_int_eq(pipe2(tc->rep, O_NONBLOCK), 0);
}

static void t_conn_close(struct t_conn *tc)
{
	t_conn_free(tc->w);
	close(tc->req[0]);
	close(tc->req[1]);
	close(tc->rep[0]);
	close(tc->rep[1]);
}

/* The kernel sends @opcode with @arg. */
static void t_conn_send(struct t_conn *tc, uint32_t opcode, uint64_t unique, const void *arg,
			size_t len)
{
	struct fuse_in_header in = {
		.len = (uint32_t)(sizeof(in) + len),
		.opcode = opcode,
		.unique = unique,
		.nodeid = 2,
	};
	char buf[512];

	memcpy(buf, &in, sizeof(in));
	memcpy(buf + sizeof(in), arg, len);
	ck_assert_int_eq(write(tc->req[1], buf, in.len), (ssize_t)in.len);
}

/* As t_conn_send; returns the length of what the read hook hands libfuse. */
static ssize_t t_conn_request(struct t_conn *tc, uint32_t opcode, uint64_t unique,
			      const void *arg, size_t len)
{
	char buf[512];

	t_conn_send(tc, opcode, unique, arg, len);
	return fuse_io_ops()->read(tc->req[0], buf, sizeof(buf), tc->w);
}

/* A WRITE whose writer was told to pause long: its reply is held. */
static void t_conn_write_held(struct t_conn *tc, uint64_t unique)
{
	struct fuse_write_in wi = { .fh = 1, .size = 0 };
	struct fuse_out_header oh = {
		.len = sizeof(oh) + sizeof(struct fuse_write_out),
		.unique = unique,
	};
	struct fuse_write_out wo = { .size = 4096 };
	struct iovec iov[2] = { { &oh, sizeof(oh) }, { &wo, sizeof(wo) } };
	char c;

	ck_assert_int_eq(t_conn_request(tc, FUSE_WRITE, unique, &wi, sizeof(wi)),
			 (ssize_t)(sizeof(struct fuse_in_header) + sizeof(wi)));
	/* no throttle state: the pause is never over, only stop or interrupt end it */
	ck_assert(fuse_io_hold_reply(tc->w, NULL, getpid(), 3600 * 1000L));
	ck_assert_int_eq(fuse_io_ops()->writev(tc->rep[1], iov, 2, tc->w),
			 (ssize_t)oh.len);
	ck_assert_int_eq(read(tc->rep[0], &c, 1), -1);
	ck_assert_int_eq(errno, EAGAIN);
}

/* The WRITE reply that came back on @tc's fd: its unique (0: none within @wait_ms). */
static uint64_t t_conn_reply(struct t_conn *tc, int wait_ms)
{
	struct pollfd pfd = { .fd = tc->rep[0], .events = POLLIN };
	char buf[64];
	struct fuse_out_header *oh = (void *)buf;

	if (poll(&pfd, 1, wait_ms) != 1)
		return 0;
	ck_assert_int_eq(read(tc->rep[0], buf, sizeof(buf)),
			 (ssize_t)(sizeof(*oh) + sizeof(struct fuse_write_out)));
	ck_assert_int_eq(oh->error, 0);
	return oh->unique;
}

/*
 * FUSE_INTERRUPT of @held_unique, then a GETATTR: returns the length of
 * the first request the read hook hands libfuse (the GETATTR's when the
 * interrupt was consumed).
 */
static ssize_t t_conn_interrupt(struct t_conn *tc, uint64_t unique, uint64_t held_unique)
{
	struct fuse_interrupt_in ii = { .unique = held_unique };
	struct fuse_getattr_in gi = { 0 };
	char buf[512];
	ssize_t n;

	t_conn_send(tc, FUSE_INTERRUPT, unique, &ii, sizeof(ii));
	t_conn_send(tc, FUSE_GETATTR, unique + 1, &gi, sizeof(gi));
	n = fuse_io_ops()->read(tc->req[0], buf, sizeof(buf), tc->w);
	if (n == (ssize_t)(sizeof(struct fuse_in_header) + sizeof(ii)))
		/* passed on: the GETATTR is still queued */
		ck_assert_int_eq(read(tc->req[0], buf, sizeof(buf)),
				 (ssize_t)(sizeof(struct fuse_in_header) + sizeof(gi)));
	return n;
}

START_TEST(held_per_connection)
{
	const ssize_t interrupt_len = sizeof(struct fuse_in_header) +
				      sizeof(struct fuse_interrupt_in);
	const ssize_t getattr_len = sizeof(struct fuse_in_header) +
				    sizeof(struct fuse_getattr_in);
	struct t_conn a, b;
	int i;

	t_conn_open(&a);
	t_conn_open(&b);
	/* the same unique on both: each connection numbers its own requests */
	t_conn_write_held(&a, 100);
	t_conn_write_held(&b, 100);
	t_conn_write_held(&b, 102);
	ck_assert_int_eq(fuse_io_held(a.w), 1);
	ck_assert_int_eq(fuse_io_held(b.w), 2);
	/* b's held reply is not a's to interrupt: a passes it on to libfuse */
	ck_assert_int_eq(t_conn_interrupt(&a, 104, 102), interrupt_len);
	ck_assert_int_eq(fuse_io_held(b.w), 2);
	/* a's session ends: its reply goes out on its fd, b's stay held */
	fuse_io_stop(a.w);
	ck_assert_int_eq(fuse_io_held(a.w), 0);
	ck_assert_uint_eq(t_conn_reply(&a, 0), 100);
	ck_assert_uint_eq(t_conn_reply(&a, 0), 0);
	ck_assert_uint_eq(t_conn_reply(&b, 0), 0);
	ck_assert_int_eq(fuse_io_held(b.w), 2);
	/* b's timer still runs: an interrupt there sends that reply, on b's fd */
	ck_assert_int_eq(t_conn_interrupt(&b, 106, 102), getattr_len);
	ck_assert_uint_eq(t_conn_reply(&b, 10000), 102);
	for (i = 0; i < 10000 && fuse_io_held(b.w) != 1; i++)
		usleep(1000);
	ck_assert_int_eq(fuse_io_held(b.w), 1);
	ck_assert_uint_eq(t_conn_reply(&a, 0), 0);
	/* the last one goes out when b stops */
	fuse_io_stop(b.w);
	ck_assert_uint_eq(t_conn_reply(&b, 0), 100);
	t_conn_close(&a);
	t_conn_close(&b);
}
END_TEST

/*
 * The busy-poll gate: open for a lone synchronous client, closed by one
 * request that overlaps another, open again after SPIN_GATE_HOLD lone
 * requests in a row.
 */
START_TEST(spin_gate_overlap)
{
	_Atomic int gate = 0;
	int i;

	for (i = 0; i < 3 * SPIN_GATE_HOLD; i++)
		spin_gate_note(&gate, 0);
	ck_assert(spin_gate_open(&gate));
	spin_gate_note(&gate, 1);
	ck_assert(!spin_gate_open(&gate));
	for (i = 0; i < SPIN_GATE_HOLD - 1; i++)
		spin_gate_note(&gate, 0);
	ck_assert(!spin_gate_open(&gate));
	/* an overlap before the hold ran out starts it over */
	spin_gate_note(&gate, 3);
	for (i = 0; i < SPIN_GATE_HOLD - 1; i++)
		spin_gate_note(&gate, 0);
	ck_assert(!spin_gate_open(&gate));
	spin_gate_note(&gate, 0);
	ck_assert(spin_gate_open(&gate));
}
END_TEST

static Suite *fuse_io_suite(void)
{
	Suite *s = suite_create("fuse_io");
	TCase *tc;

	tc = t_tcase(s, "init", init_offered, init_not_offered, init_compat_reply);
	tcase_add_checked_fixture(tc, setup, teardown);
	tc = t_tcase(s, "open", open_direct_io, create_both_entry_sizes, other_replies_untouched);
	tcase_add_checked_fixture(tc, setup, teardown);
	tc = t_tcase(s, "ext", statx_as_getattr, statx_error_and_others, tmpfile_answered_here);
	tcase_add_checked_fixture(tc, setup, teardown);
	t_tcase(s, "held", held_per_connection, spin_gate_overlap);
	return s;
}

int main(void)
{
	return t_run(fuse_io_suite());
}
