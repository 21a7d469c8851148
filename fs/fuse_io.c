// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The FUSE channel hooks (fuse_session_custom_io): what libfuse 3.14 does
 * not know is done here, on the raw messages.
 *
 * - FUSE_SYNCFS (sync(2), syncfs(2) on the mount) runs a full bdi_sync and
 *   is answered on the device fd directly.
 * - The INIT reply gets FUSE_DIRECT_IO_ALLOW_MMAP (flags2) when the kernel
 *   offers it, so MAP_SHARED works on our direct_io files.
 * - OPEN and CREATE replies of direct_io files get
 *   FOPEN_PARALLEL_DIRECT_WRITES, so the kernel sends non-extending writes
 *   to one file concurrently instead of under its inode lock.
 *
 * Everything else passes through unchanged. Which request a reply answers
 * is known from its unique: a libfuse worker reads a request, runs its
 * handler and writes the reply on the same thread before it reads again
 * (every wbcfs handler replies before returning), so the read hook leaves
 * the unique of an INIT/OPEN/CREATE in a thread-local slot and the writev
 * hook of that thread compares one integer per reply. A reply written by
 * another thread (none today) would merely go out unpatched.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "wbfs_i.h"

/* Newer than the uapi header of this distribution (protocol 7.39+). */
#ifndef FUSE_DIRECT_IO_ALLOW_MMAP
#define FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36)
#endif
#define FIO_ALLOW_MMAP_FLAGS2 ((uint32_t)(FUSE_DIRECT_IO_ALLOW_MMAP >> 32))

static struct wbfs *fio_wbfs;	/* the one mounted filesystem of this process */
static _Atomic bool fio_kernel_allows_mmap;	/* atomic: INIT offered ALLOW_MMAP */

/* The request this worker thread is serving, when its reply is patched. */
static __thread struct {
	uint64_t unique;	/* 0: nothing to patch */
	uint32_t opcode;
} fio_pending;

static int fio_reply(int fd, uint64_t unique, int err)
{
	struct fuse_out_header out = {
		.len = sizeof(out),
		.error = err,
		.unique = unique,
	};

	return write(fd, &out, sizeof(out)) == sizeof(out) ? 0 : -errno;
}

/* Serve a request here; returns true when it was consumed. */
static bool fio_intercept(int fd, const void *buf, size_t len)
{
	const struct fuse_in_header *in = buf;
	int ret = 0;

	if (len < sizeof(*in) || in->opcode != FUSE_SYNCFS || !fio_wbfs)
		return false;
	if (!fio_wbfs->ro && !fio_wbfs->destroyed)
		ret = bdi_sync(fio_wbfs->bdi, WB_REASON_SYNC);
	fio_reply(fd, in->unique, ret);
	return true;
}

/* Remember requests whose replies fio_writev patches. */
static void fio_note_request(const void *buf, size_t len)
{
	const struct fuse_in_header *in = buf;

	fio_pending.unique = 0;
	if (len < sizeof(*in))
		return;
	switch (in->opcode) {
	case FUSE_INIT: {
		const struct fuse_init_in *arg = (const void *)(in + 1);

		/* flags2 exists only with FUSE_INIT_EXT (protocol 7.36) */
		if (len >= sizeof(*in) + sizeof(*arg) && arg->major == 7 &&
		    (arg->flags & FUSE_INIT_EXT) && (arg->flags2 & FIO_ALLOW_MMAP_FLAGS2))
			fio_kernel_allows_mmap = true;
		break;
	}
	case FUSE_OPEN:
	case FUSE_CREATE:
		break;
	default:
		return;
	}
	fio_pending.unique = in->unique;
	fio_pending.opcode = in->opcode;
}

/*
 * Busy-poll before sleeping. A synchronous client (dd, dbench) sends its
 * next request a few microseconds after our reply; if every worker is
 * asleep by then, the kernel must wake one, which on a virtual machine
 * means an IPI to a halted vCPU: measured here, half of a 4 KiB dd's time
 * was idle halts and wakeup paths. So one worker at a time (never more:
 * it costs a CPU while it spins) polls the device for up to poll_us
 * before sleeping in poll(2), and only while no other worker is serving a
 * request: with many clients requests queue up anyway, and the CPU is
 * theirs (dbench 8 lost ~10% to unconditional spinning). The device fds
 * are made non-blocking once.
 */
static _Atomic int fio_spinner;		/* atomic: 1 while a worker spins */
static _Atomic int fio_busy;		/* atomic: requests read, not yet answered */
static __thread int fio_nonblock_fd = -1;

static uint64_t fio_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static ssize_t fio_spin_read(int fd, void *buf, size_t buf_len, unsigned poll_us)
{
	int idle = 0;
	uint64_t end;
	ssize_t n;

	if (atomic_load(&fio_busy) ||
	    !atomic_compare_exchange_strong(&fio_spinner, &idle, 1))
		return -1;	/* errno EAGAIN from the caller's first read */
	end = fio_now_ns() + (uint64_t)poll_us * 1000;
	do {
		n = read(fd, buf, buf_len);
		if (n >= 0 || errno != EAGAIN)
			break;
		__builtin_ia32_pause();
	} while (fio_now_ns() < end);
	atomic_store(&fio_spinner, 0);
	return n;
}

/* One read of the device: busy-poll (maybe), then sleep until readable. */
static ssize_t fio_read_dev(int fd, void *buf, size_t buf_len)
{
	unsigned poll_us = fio_wbfs ? fio_wbfs->opts.poll_us : 0;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t n;

	if (!poll_us)
		return read(fd, buf, buf_len);
	if (fio_nonblock_fd != fd) {
		int fl = fcntl(fd, F_GETFL);

		if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
			return read(fd, buf, buf_len);
		fio_nonblock_fd = fd;
	}
	n = read(fd, buf, buf_len);
	if (n >= 0 || errno != EAGAIN)
		return n;
	n = fio_spin_read(fd, buf, buf_len, poll_us);
	while (n < 0 && errno == EAGAIN) {
		if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
			return -1;
		n = read(fd, buf, buf_len);	/* EAGAIN: another worker took it */
	}
	return n;
}

static ssize_t fio_read(int fd, void *buf, size_t buf_len, void *userdata)
{
	for (;;) {
		ssize_t n = fio_read_dev(fd, buf, buf_len);

		if (n <= 0)
			return n;
		if (!fio_intercept(fd, buf, (size_t)n)) {
			const struct fuse_in_header *in = buf;

			fio_note_request(buf, (size_t)n);
			/* answered through fio_writev, except these */
			if ((size_t)n >= sizeof(*in) && in->opcode != FUSE_FORGET &&
			    in->opcode != FUSE_BATCH_FORGET && in->opcode != FUSE_INTERRUPT)
				atomic_fetch_add(&fio_busy, 1);
			return n;
		}
	}
}

/*
 * Bytes [pos, pos+size) of the message in @iov, when they lie in one
 * iovec (libfuse passes the header, then each argument whole); else NULL.
 */
static void *fio_msg_bytes(const struct iovec *iov, int count, size_t pos, size_t size)
{
	int i;

	for (i = 0; i < count; i++) {
		if (pos < iov[i].iov_len)
			return pos + size <= iov[i].iov_len ? (char *)iov[i].iov_base + pos : NULL;
		pos -= iov[i].iov_len;
	}
	return NULL;
}

/* INIT reply: let MAP_SHARED through to direct_io files. */
static void fio_patch_init(const struct iovec *iov, int count, size_t arg_len)
{
	struct fuse_init_out *out;

	/* the kernel reads flags2 only from a full (7.23+) reply with INIT_EXT */
	if (!fio_kernel_allows_mmap || arg_len < offsetof(struct fuse_init_out, unused))
		return;
	out = fio_msg_bytes(iov, count, sizeof(struct fuse_out_header),
			    offsetof(struct fuse_init_out, unused));
	if (!out)
		return;
	out->flags |= FUSE_INIT_EXT;
	out->flags2 |= FIO_ALLOW_MMAP_FLAGS2;
}

/*
 * OPEN reply (fuse_open_out) or CREATE reply (fuse_entry_out, full or
 * the pre-7.9 size, then fuse_open_out): fuse_open_out is the tail.
 */
static void fio_patch_open(const struct iovec *iov, int count, size_t arg_len, bool create)
{
	const size_t oo = sizeof(struct fuse_open_out);
	struct fuse_open_out *out;

	if (create ? arg_len != sizeof(struct fuse_entry_out) + oo &&
		     arg_len != FUSE_COMPAT_ENTRY_OUT_SIZE + oo
		   : arg_len != oo)
		return;
	out = fio_msg_bytes(iov, count, sizeof(struct fuse_out_header) + arg_len - oo, oo);
	if (out && (out->open_flags & FOPEN_DIRECT_IO))
		out->open_flags |= FOPEN_PARALLEL_DIRECT_WRITES;
}

static void fio_patch_reply(const struct iovec *iov, int count)
{
	const struct fuse_out_header *out;
	size_t arg_len;

	if (count < 1 || iov[0].iov_len < sizeof(*out))
		return;
	out = iov[0].iov_base;
	if (out->unique != fio_pending.unique)
		return;
	fio_pending.unique = 0;
	if (out->error || out->len < sizeof(*out))
		return;
	arg_len = out->len - sizeof(*out);
	if (fio_pending.opcode == FUSE_INIT)
		fio_patch_init(iov, count, arg_len);
	else
		fio_patch_open(iov, count, arg_len, fio_pending.opcode == FUSE_CREATE);
}

static ssize_t fio_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	const struct fuse_out_header *out = iov[0].iov_base;

	if (fio_pending.unique)
		fio_patch_reply(iov, count);
	/* a reply (notifications have unique 0) ends a request's service */
	if (count > 0 && iov[0].iov_len >= sizeof(*out) && out->unique &&
	    atomic_fetch_sub(&fio_busy, 1) <= 0)
		atomic_fetch_add(&fio_busy, 1);		/* never below zero */
	return writev(fd, iov, count);
}

static const struct fuse_custom_io fio_ops = {
	.read = fio_read,
	.writev = fio_writev,
};

/** The hooks themselves (for unit tests, which drive them over pipes). */
const struct fuse_custom_io *wbfs_fuse_io_ops(void)
{
	return &fio_ops;
}

/** Install the hooks on a mounted session. Returns 0 or -errno. */
int wbfs_fuse_io_install(struct wbfs *w, struct fuse_session *se)
{
	fio_wbfs = w;
	return fuse_session_custom_io(se, &fio_ops, fuse_session_fd(se));
}
