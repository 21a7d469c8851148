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
 * - FUSE_TMPFILE is served here, FUSE_STATX goes to libfuse as a GETATTR
 *   whose reply becomes a STATX reply (fuse_ext.c). A FUSE_INTERRUPT for a
 *   request served here is dropped: it is answered soon anyway.
 *
 * - Throttled writes (cache/throttle.c): the WRITE is done, its reply is
 *   held on a timer queue until the writer's pause ends, so the writer
 *   sleeps inside write(2) while the worker serves others. When the pause
 *   ends the controller may ask for another (over the hard limit, or a
 *   large write paying in several pauses). A FUSE_INTERRUPT for a held
 *   reply (the writer got a signal) sends it at once, as the kernel's
 *   balance_dirty_pages stops pausing a task with a fatal signal.
 *
 * - FUSE over io_uring (fuse_uring.c, transport=): the INIT reply asks for
 *   it when the kernel offers it, and the rings are registered once that
 *   reply is out. A ring thread hands each request to fio_take, as the
 *   read hook does, and libfuse's reply comes back through fio_writev on
 *   the same thread; fuse_io_send puts a reply into the ring entry
 *   of the request it answers, else on the device. A held reply keeps its
 *   ring entry until the timer commits it.
 *
 * Each FUSE connection (one per mount) has its own state, struct fio_conn,
 * hung off its struct wbfs as w->fio: the INIT flags it saw, the requests
 * served here, the busy-poll gate, its held replies and their timer
 * thread, and its io_uring transport. The hooks find it through the
 * session's userdata, which is the mount's struct wbfs (fuse_session_new's
 * argument, as every handler's fuse_req_userdata); the io_uring ring
 * threads are given it. So one process serves several mounts, each on its
 * own /dev/fuse fd or rings, and stopping one leaves the others running.
 * Each connection has its own timer thread rather than one shared by all:
 * a held reply then never meets another connection's lock or list, and
 * stopping a connection is joining its thread and sending its list; the
 * cost is one sleeping thread per mount, beside its FUSE workers.
 *
 * Everything else passes through unchanged. Which request a reply answers
 * is known from its unique: a libfuse worker reads a request, runs its
 * handler and writes the reply on the same thread before it reads again
 * (every wbcfs handler replies before returning), so the read hook leaves
 * the unique of an INIT/OPEN/CREATE in a thread-local slot and the writev
 * hook of that thread compares one integer per reply. A reply written by
 * another thread (none today) would merely go out unpatched. A worker
 * thread serves one session, so such thread-local slots never mix
 * connections.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "wbcfs/lib/clock.h"
#include "fuse_i.h"

/* Newer than the uapi header of this distribution (protocol 7.39+). */
#ifndef FUSE_DIRECT_IO_ALLOW_MMAP
#define FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36)
#endif
#define FIO_ALLOW_MMAP_FLAGS2 ((uint32_t)(FUSE_DIRECT_IO_ALLOW_MMAP >> 32))

/*
 * Requests being served inside the read hook (not by libfuse), so that a
 * FUSE_INTERRUPT for one of them is not left to libfuse, which would keep
 * it and answer it EAGAIN later.
 */
#define FIO_SERVING_SLOTS 32

struct fio_held;
struct fio_parked;

/*
 * One FUSE connection's channel state. Locks (never nested, never held
 * across a reply or a libfuse call):
 *   held_lock	protects held_head, held_stop, held_running
 *   uring_lock	protects uring_starting
 *   park_lock	protects park_head, park_running
 */
struct fio_conn {
	struct wbfs *w;				/* constant */
	struct fuse_session *se;		/* constant; NULL in unit tests */
	_Atomic bool kernel_offers_uring;	/* atomic: INIT offered FUSE_OVER_IO_URING */
	_Atomic bool kernel_allows_mmap;	/* atomic: INIT offered ALLOW_MMAP */
	_Atomic bool dont_mask;			/* atomic: INIT reply has FUSE_DONT_MASK */
	_Atomic uint64_t serving[FIO_SERVING_SLOTS];	/* atomic: uniques served here */
	_Atomic int spinner;			/* atomic: 1 while a worker spins */
	_Atomic int busy;			/* atomic: requests read, not yet answered */
	_Atomic int spin_gate;			/* atomic: spin_gate_note */

	pthread_mutex_t held_lock;
	pthread_cond_t held_cond;		/* held_lock: a new first reply, or stop */
	struct fio_held *held_head;		/* held_lock: sorted by due */
	bool held_stop;				/* held_lock: the timer thread ends */
	bool held_running;			/* held_lock: replies may be held */
	pthread_t held_thread;
	_Atomic long held_count;		/* atomic: replies held now */

	/*
	 * Parked requests (fuse_io_park): answered later, from another
	 * thread, which finds each by its unique.
	 */
	pthread_mutex_t park_lock;
	pthread_cond_t park_cond;		/* park_lock: the last one was answered */
	struct fio_parked *park_head;		/* park_lock */
	bool park_running;			/* park_lock: requests may be parked */
	_Atomic long nr_parked;			/* atomic: parked, not yet answered */
	struct fpark *park;			/* the syncers (park.c); constant while
						 * park_running */

	/*
	 * Other workers serve requests while the rings are set up: one that
	 * asks which transport serves (/.wbcfs/transport) waits for the
	 * outcome.
	 */
	pthread_mutex_t uring_lock;
	pthread_cond_t uring_cond;		/* uring_lock: uring_starting cleared */
	bool uring_starting;			/* uring_lock */
	struct furing *uring;			/* set once, before uring_starting is
						 * cleared; freed by transport_stop */
};

/* The request this worker thread is serving, when its reply is patched. */
static __thread struct {
	uint64_t unique;	/* 0: nothing to patch */
	uint32_t opcode;
	struct fext_btime btime;	/* FEXT_STATX */
} fio_pending;

/*
 * The request this thread is serving (0: none): fuse_io_park parks it,
 * and a reply to any other unique written on this thread may be a
 * parked one.
 */
static __thread uint64_t fio_cur_unique;

/* The hooks' userdata is the session's: the mount's struct wbfs. */
static struct fio_conn *fio_conn_of(void *userdata)
{
	struct wbfs *w = userdata;

	return w ? w->fio : NULL;
}

/* One request's service ended (its reply is written): never below zero. */
static void fio_busy_done(struct fio_conn *c)
{
	if (atomic_fetch_sub(&c->busy, 1) <= 0)
		atomic_fetch_add(&c->busy, 1);
}

static int fio_serving_claim(struct fio_conn *c, uint64_t unique)
{
	int i;

	for (i = 0; i < FIO_SERVING_SLOTS; i++) {
		uint64_t free_slot = 0;

		if (atomic_compare_exchange_strong(&c->serving[i], &free_slot, unique))
			return i;
	}
	return -1;	/* a very busy hook: such an interrupt goes to libfuse */
}

static void fio_serving_release(struct fio_conn *c, int slot)
{
	if (slot >= 0)
		atomic_store(&c->serving[slot], 0);
}

/* A FUSE_INTERRUPT for a request served here: true when it was one. */
static bool fio_serving_interrupt(struct fio_conn *c, const void *buf, size_t len)
{
	const struct fuse_in_header *in = buf;
	const struct fuse_interrupt_in *arg = (const void *)(in + 1);
	int i;

	if (len < sizeof(*in) + sizeof(*arg) || !arg->unique)
		return false;
	for (i = 0; i < FIO_SERVING_SLOTS; i++)
		if (atomic_load(&c->serving[i]) == arg->unique)
			return true;
	return false;
}

/*
 * Send a reply: into the ring entry this thread serves when it answers
 * that entry's request, else on the device.
 */
ssize_t fuse_io_send(int fd, const struct iovec *iov, int count)
{
	ssize_t ret;

	if (!furing_reply(iov, count, &ret))
		return writev(fd, iov, count);
	if (ret < 0) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
}

static int fio_reply(int fd, uint64_t unique, int err)
{
	struct fuse_out_header out = {
		.len = sizeof(out),
		.error = err,
		.unique = unique,
	};
	struct iovec iov = { .iov_base = &out, .iov_len = sizeof(out) };

	return fuse_io_send(fd, &iov, 1) == sizeof(out) ? 0 : -errno;
}

/* Serve a request here; returns true when it was consumed. */
static bool fio_intercept(struct fio_conn *c, int fd, const void *buf, size_t len)
{
	const struct fuse_in_header *in = buf;
	struct wbfs *w = c->w;
	int ret = 0, slot;

	if (fext_is_tmpfile(buf, len)) {
		slot = fio_serving_claim(c, in->unique);
		fext_tmpfile(w, fd, buf, len, atomic_load(&c->dont_mask));
		fio_serving_release(c, slot);
		return true;
	}
	if (len < sizeof(*in) || in->opcode != FUSE_SYNCFS)
		return false;
	slot = fio_serving_claim(c, in->unique);
	if (!w->ro && !w->destroyed)
		ret = bdi_sync(w->bdi, WB_REASON_SYNC);
	fio_reply(fd, in->unique, ret);
	fio_serving_release(c, slot);
	return true;
}

/*
 * Remember requests whose replies fio_writev patches. A FUSE_STATX becomes
 * a FUSE_GETATTR here: returns the request's length for libfuse.
 */
static size_t fio_note_request(struct fio_conn *c, void *buf, size_t len)
{
	const struct fuse_in_header *in = buf;
	size_t glen;

	fio_pending.unique = 0;
	if (len < sizeof(*in))
		return len;
	switch (in->opcode) {
	case FEXT_STATX:
		glen = fext_statx_to_getattr(c->w, buf, len, &fio_pending.btime);
		if (!glen)
			return len;
		fio_pending.unique = in->unique;
		fio_pending.opcode = FEXT_STATX;
		return glen;
	case FUSE_INIT: {
		const struct fuse_init_in *arg = (const void *)(in + 1);

		/* flags2 exists only with FUSE_INIT_EXT (protocol 7.36) */
		if (len >= sizeof(*in) + sizeof(*arg) && arg->major == 7 &&
		    (arg->flags & FUSE_INIT_EXT)) {
			if (arg->flags2 & FIO_ALLOW_MMAP_FLAGS2)
				c->kernel_allows_mmap = true;
			if (arg->flags2 & FURING_OVER_IO_URING_FLAGS2)
				c->kernel_offers_uring = true;
		}
		break;
	}
	case FUSE_OPEN:
	case FUSE_CREATE:
		break;
	default:
		return len;
	}
	fio_pending.unique = in->unique;
	fio_pending.opcode = in->opcode;
	return len;
}

/*
 * Busy-poll before sleeping. A synchronous client (dd, dbench) sends its
 * next request a few microseconds after our reply; if every worker is
 * asleep by then, the kernel must wake one, which on a virtual machine
 * means an IPI to a halted vCPU: measured here, half of a 4 KiB dd's time
 * was idle halts and wakeup paths. So one worker at a time (never more:
 * it costs a CPU while it spins) polls the device for up to poll_us
 * before sleeping in poll(2), and only while no other worker is serving a
 * request and the gate is open (spin_gate_note): with many clients
 * requests queue up anyway, and the CPU is theirs (dbench 8 lost ~10% to
 * unconditional spinning, and 15% more to spinning between its requests
 * on 2 CPUs). The device fds
 * are made non-blocking once. The gate is per connection: a worker
 * polling one mount's device gains nothing for another mount's clients.
 * Between reads the worker yields the CPU: the client it has just
 * answered is often woken on the same CPU, and a pause loop kept it off
 * until the poll ran out (as fuse_uring.c's ring threads did). 4 KiB dd
 * without fsync, 9 runs each: 178 MB/s polling with pause, 236 without
 * polling, 245 polling with sched_yield.
 */
static __thread int fio_nonblock_fd = -1;

/*
 * A read of the device that does not block (O_NONBLOCK): the kernel
 * copies a request already waiting, or none. When it copies a writeback
 * of a mapping's pages, the number noted just before tells which writes
 * it may predate (ext4/kstore.c).
 */
static ssize_t fio_read_now(struct fio_conn *c, int fd, void *buf, size_t buf_len)
{
	kstore_before_copy(c->w);
	return read(fd, buf, buf_len);
}

/* A read that may sleep until a request comes: nothing to note before it. */
static ssize_t fio_read_blocking(int fd, void *buf, size_t buf_len)
{
	kstore_copy_unnoted();
	return read(fd, buf, buf_len);
}

static ssize_t fio_spin_read(struct fio_conn *c, int fd, void *buf, size_t buf_len,
			     unsigned poll_us)
{
	int idle = 0;
	uint64_t end;
	ssize_t n;

	if (atomic_load(&c->busy) || !spin_gate_open(&c->spin_gate) ||
	    !atomic_compare_exchange_strong(&c->spinner, &idle, 1))
		return -1;	/* errno EAGAIN from the caller's first read */
	end = clock_real_ns() + (uint64_t)poll_us * 1000;
	do {
		n = fio_read_now(c, fd, buf, buf_len);
		if (n >= 0 || errno != EAGAIN)
			break;
		sched_yield();
	} while (clock_real_ns() < end);
	atomic_store(&c->spinner, 0);
	return n;
}

/* One read of the device: busy-poll (maybe), then sleep until readable. */
static ssize_t fio_read_dev(struct fio_conn *c, int fd, void *buf, size_t buf_len)
{
	unsigned poll_us = c->w->opts.poll_us;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ssize_t n;

	if (!poll_us)
		return fio_read_blocking(fd, buf, buf_len);
	if (fio_nonblock_fd != fd) {
		int fl = fcntl(fd, F_GETFL);

		if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
			return fio_read_blocking(fd, buf, buf_len);
		fio_nonblock_fd = fd;
	}
	n = fio_read_now(c, fd, buf, buf_len);
	if (n >= 0 || errno != EAGAIN)
		return n;
	n = fio_spin_read(c, fd, buf, buf_len, poll_us);
	while (n < 0 && errno == EAGAIN) {
		if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
			return -1;
		/* EAGAIN: another worker took it */
		n = fio_read_now(c, fd, buf, buf_len);
	}
	return n;
}

/* ---- held replies ------------------------------------------------------- */

#define FIO_HELD_MAX_MSG 64	/* a WRITE reply is 24 bytes */

struct fio_held {
	struct fio_held *next;		/* conn->held_lock: sorted by due */
	uint64_t due;			/* ms, clock_now_ms() */
	uint64_t unique;
	int fd;				/* -1: the reply sits in ring entry @ent */
	void *ent;
	pid_t pid;
	struct throttle_wb *tw;
	bool interrupted;		/* send at once, no further pause */
	size_t len;
	char msg[FIO_HELD_MAX_MSG];
};

LOCK_CLASS(lc_fio_held_lock, "fio_held_lock")

/* Set by the WRITE handler just before its reply (fuse_io_hold_reply). */
static __thread struct {
	long pause_ms;
	pid_t pid;
	struct throttle_wb *tw;
} fio_hold_next;

bool fuse_io_hold_reply(struct wbfs *w, struct throttle_wb *tw, pid_t pid, long pause_ms)
{
	struct fio_conn *c = w->fio;
	bool running;

	if (!c)
		return false;
	ls_mutex_lock(&c->held_lock, &lc_fio_held_lock);
	running = c->held_running;
	ls_mutex_unlock(&c->held_lock);
	if (!running)
		return false;
	fio_hold_next.pause_ms = pause_ms;
	fio_hold_next.pid = pid;
	fio_hold_next.tw = tw;
	return true;
}

long fuse_io_held(struct wbfs *w)
{
	return w->fio ? atomic_load(&w->fio->held_count) : 0;
}

static void fio_held_insert(struct fio_conn *c, struct fio_held *h)
{
	struct fio_held **pp = &c->held_head;

	while (*pp && (*pp)->due <= h->due)
		pp = &(*pp)->next;
	h->next = *pp;
	*pp = h;
	if (c->held_head == h)
		pthread_cond_signal(&c->held_cond);
}

/* Send a held reply on its own connection: its ring entry or its device fd. */
static void fio_held_send(struct fio_conn *c, struct fio_held *h)
{
	if (h->ent) {
		furing_commit_held(h->ent);
	} else {
		if (write(h->fd, h->msg, h->len) != (ssize_t)h->len && errno != ENOENT)
			fprintf(stderr, "wbcfs: held write reply not delivered: %s\n",
				strerror(errno));
		close(h->fd);
	}
	atomic_fetch_sub(&c->held_count, 1);
	free(h);
}

/*
 * The connection's timer: sends held replies whose pause is over, or
 * pauses them again.
 */
static void *fio_held_main(void *arg)
{
	struct fio_conn *c = arg;

	ls_mutex_lock(&c->held_lock, &lc_fio_held_lock);
	while (!c->held_stop) {
		struct fio_held *h = c->held_head;
		uint64_t now = clock_now_ms();

		if (!h) {
			lockstat_cond_wait(&c->held_cond, &c->held_lock);
			continue;
		}
		if (h->due > now) {
			struct timespec ts;
			uint64_t ns;

			clock_gettime(CLOCK_MONOTONIC, &ts);
			ns = (uint64_t)ts.tv_nsec + (h->due - now) * 1000000ull;
			ts.tv_sec += (time_t)(ns / 1000000000ull);
			ts.tv_nsec = (long)(ns % 1000000000ull);
			lockstat_cond_timedwait(&c->held_cond, &c->held_lock, &ts);
			continue;
		}
		c->held_head = h->next;
		ls_mutex_unlock(&c->held_lock);
		if (!h->interrupted) {
			struct throttle_verdict v = throttle_resume(h->tw, h->pid);

			if (v.pause_ms > 0) {
				h->due = clock_now_ms() + (uint64_t)v.pause_ms;
				ls_mutex_lock(&c->held_lock, &lc_fio_held_lock);
				fio_held_insert(c, h);
				continue;
			}
		}
		fio_held_send(c, h);
		ls_mutex_lock(&c->held_lock, &lc_fio_held_lock);
	}
	ls_mutex_unlock(&c->held_lock);
	return NULL;
}

/* Hold this reply for @pause_ms (its WRITE was told to pause). True when held. */
static bool fio_hold(struct fio_conn *c, int fd, const struct iovec *iov, int count,
		     long pause_ms)
{
	const struct fuse_out_header *out = iov[0].iov_base;
	struct fio_held *h;
	size_t len = 0;
	int i;

	/* held_running read unlocked: hold_reply saw it set just before */
	if (!c->held_running || out->error || out->len > FIO_HELD_MAX_MSG)
		return false;
	h = malloc(sizeof(*h));
	if (!h)
		return false;
	/* a ring request: its entry keeps the reply until the timer commits it */
	h->ent = furing_hold(iov, count);
	if (h->ent) {
		h->fd = -1;
		h->len = out->len;
		goto queue;
	}
	/*
	 * The reply must go out on the fd the request was read from (each
	 * cloned /dev/fuse fd has its own list of requests being processed),
	 * and libfuse closes a worker's fd when an idle worker exits, which
	 * would abort the held request: hold a reference of our own.
	 */
	h->fd = dup(fd);
	if (h->fd < 0) {
		free(h);
		return false;
	}
	for (i = 0; i < count; i++) {
		if (len + iov[i].iov_len > FIO_HELD_MAX_MSG) {
			close(h->fd);
			free(h);
			return false;
		}
		memcpy(h->msg + len, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	h->len = len;
queue:
	h->unique = out->unique;
	h->pid = fio_hold_next.pid;
	h->tw = fio_hold_next.tw;
	h->interrupted = false;
	h->due = clock_now_ms() + (uint64_t)pause_ms;
	atomic_fetch_add(&c->held_count, 1);
	ls_mutex_lock(&c->held_lock, &lc_fio_held_lock);
	fio_held_insert(c, h);
	ls_mutex_unlock(&c->held_lock);
	return true;
}

/* FUSE_INTERRUPT of a reply held on this connection: send it now. True when it was. */
static bool fio_interrupt(struct fio_conn *c, const void *buf, size_t len)
{
	const struct fuse_in_header *in = buf;
	const struct fuse_interrupt_in *arg = (const void *)(in + 1);
	struct fio_held **pp, *h = NULL;

	if (len < sizeof(*in) + sizeof(*arg))
		return false;
	ls_mutex_lock(&c->held_lock, &lc_fio_held_lock);
	for (pp = &c->held_head; *pp; pp = &(*pp)->next) {
		if ((*pp)->unique == arg->unique) {
			h = *pp;
			*pp = h->next;
			h->interrupted = true;
			h->due = 0;
			fio_held_insert(c, h);
			break;
		}
	}
	ls_mutex_unlock(&c->held_lock);
	return h != NULL;
}

/* ---- parked requests ---------------------------------------------------- */

struct fio_parked {
	struct fio_parked *next;	/* conn->park_lock */
	uint64_t unique;
	void *ent;			/* its ring entry; NULL: /dev/fuse */
};

LOCK_CLASS(lc_fio_park_lock, "fio_park_lock")

bool fuse_io_park(struct wbfs *w)
{
	struct fio_conn *c = w->fio;
	struct fio_parked *p;
	bool running;

	if (!c || !fio_cur_unique)
		return false;
	p = malloc(sizeof(*p));
	if (!p)
		return false;
	p->unique = fio_cur_unique;
	ls_mutex_lock(&c->park_lock, &lc_fio_park_lock);
	running = c->park_running;
	if (running) {
		/* the entry is set aside before another thread can answer it */
		p->ent = furing_park(p->unique);
		p->next = c->park_head;
		c->park_head = p;
		atomic_fetch_add(&c->nr_parked, 1);
	}
	ls_mutex_unlock(&c->park_lock);
	if (!running) {
		free(p);
		return false;
	}
	atomic_fetch_add(&w->stats.nr_parked_total, 1);
	fio_cur_unique = 0;
	/* no worker serves it any more: the busy-poll gate may open */
	fio_busy_done(c);
	return true;
}

long fuse_io_parked(struct wbfs *w)
{
	return w->fio ? atomic_load(&w->fio->nr_parked) : 0;
}

struct fpark *fuse_io_parker(struct wbfs *w)
{
	return w->fio ? w->fio->park : NULL;
}

/* The link to parked request @unique (*link NULL: none). Context: park_lock. */
static struct fio_parked **fio_park_find_locked(struct fio_conn *c, uint64_t unique)
{
	struct fio_parked **pp = &c->park_head;

	lock_assert_held(&c->park_lock);
	while (*pp && (*pp)->unique != unique)
		pp = &(*pp)->next;
	return pp;
}

/* The reply to @unique is written: true when it was parked (its entry in *@ent). */
static bool fio_unpark(struct fio_conn *c, uint64_t unique, void **ent)
{
	struct fio_parked **pp, *p;

	ls_mutex_lock(&c->park_lock, &lc_fio_park_lock);
	pp = fio_park_find_locked(c, unique);
	p = *pp;
	if (p)
		*pp = p->next;
	if (p && atomic_fetch_sub(&c->nr_parked, 1) == 1)
		pthread_cond_broadcast(&c->park_cond);
	ls_mutex_unlock(&c->park_lock);
	if (!p)
		return false;
	*ent = p->ent;
	free(p);
	return true;
}

/*
 * FUSE_INTERRUPT of a parked request: consumed here (libfuse would keep
 * it and answer EAGAIN, for the kernel to send it again). The request
 * goes on to its reply when its I/O completes, as ext4's fsync waits for
 * its commit whatever signal comes. True when it was one.
 */
static bool fio_park_interrupt(struct fio_conn *c, const void *buf, size_t len)
{
	const struct fuse_in_header *in = buf;
	const struct fuse_interrupt_in *arg = (const void *)(in + 1);
	bool found;

	if (len < sizeof(*in) + sizeof(*arg) || !atomic_load(&c->nr_parked))
		return false;
	ls_mutex_lock(&c->park_lock, &lc_fio_park_lock);
	found = *fio_park_find_locked(c, arg->unique) != NULL;
	ls_mutex_unlock(&c->park_lock);
	if (found)
		atomic_fetch_add(&c->w->stats.nr_park_interrupts, 1);
	return found;
}

/* Wait until every parked request is answered; none is parked after. */
static void fio_park_stop(struct fio_conn *c)
{
	struct fpark *k;

	ls_mutex_lock(&c->park_lock, &lc_fio_park_lock);
	c->park_running = false;
	k = c->park;
	c->park = NULL;
	ls_mutex_unlock(&c->park_lock);
	/* the syncers answer what they were given, then end */
	park_stop(k);
	ls_mutex_lock(&c->park_lock, &lc_fio_park_lock);
	while (c->park_head)
		lockstat_cond_wait(&c->park_cond, &c->park_lock);
	ls_mutex_unlock(&c->park_lock);
}

int fuse_io_start(struct wbfs *w)
{
	struct fio_conn *c = w->fio;
	int ret;

	if (!c)
		return -ENODEV;		/* no hooks: no reply can be held */
	c->held_stop = false;
	ret = pthread_create(&c->held_thread, NULL, fio_held_main, c);
	if (ret)
		return -ret;
	ls_mutex_lock(&c->held_lock, &lc_fio_held_lock);
	c->held_running = true;
	ls_mutex_unlock(&c->held_lock);
	c->park = park_start(w);
	if (c->park) {
		ls_mutex_lock(&c->park_lock, &lc_fio_park_lock);
		c->park_running = true;
		ls_mutex_unlock(&c->park_lock);
	}
	return 0;
}

/*
 * This connection's session ends: every reply it holds goes out now,
 * unpaused. Other connections' timers and replies are not touched.
 */
void fuse_io_stop(struct wbfs *w)
{
	struct fio_conn *c = w->fio;
	struct fio_held *h;

	if (!c)
		return;
	/* parked replies first: a held one may be among them, and the
	 * syncers' requests still have their connection */
	fio_park_stop(c);
	ls_mutex_lock(&c->held_lock, &lc_fio_held_lock);
	if (!c->held_running) {
		ls_mutex_unlock(&c->held_lock);
		return;
	}
	c->held_running = false;
	c->held_stop = true;
	pthread_cond_signal(&c->held_cond);
	ls_mutex_unlock(&c->held_lock);
	pthread_join(c->held_thread, NULL);
	while ((h = c->held_head)) {
		c->held_head = h->next;
		fio_held_send(c, h);
	}
}

/* ---- the hooks --------------------------------------------------------- */

/*
 * libfuse lets its workers be cancelled while they read (at the session's
 * end): what is served inside this hook takes locks, so it runs with
 * cancellation off.
 */
/* A ring thread lets the kernel copy requests to it now (ext4/kstore.c). */
static void fio_before_copy(void *arg)
{
	struct fio_conn *c = arg;

	kstore_before_copy(c->w);
}

static bool fio_take(void *arg, int fd, void *buf, size_t *len)
{
	struct fio_conn *c = arg;
	bool served;
	int cs;

	/* testing: a worker preempted between the copy and this */
	if (c->w->opts.take_delay_us)
		usleep(c->w->opts.take_delay_us);
	/* the request's bytes are copied out of the kernel by now: when? */
	kstore_taken(c->w);
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
	served = fio_intercept(c, fd, buf, *len);
	if (!served)
		*len = fio_note_request(c, buf, *len);
	pthread_setcancelstate(cs, NULL);
	if (!served) {
		const struct fuse_in_header *in = buf;

		fio_cur_unique = *len >= sizeof(*in) ? in->unique : 0;
		/* answered through fio_writev, except these */
		if (*len >= sizeof(*in) && in->opcode != FUSE_FORGET &&
		    in->opcode != FUSE_BATCH_FORGET && in->opcode != FUSE_INTERRUPT)
			spin_gate_note(&c->spin_gate, atomic_fetch_add(&c->busy, 1));
	}
	return served;
}

static ssize_t fio_read(int fd, void *buf, size_t buf_len, void *userdata)
{
	struct fio_conn *c = fio_conn_of(userdata);

	if (!c)
		return read(fd, buf, buf_len);	/* not installed by us: pass through */
	for (;;) {
		ssize_t n = fio_read_dev(c, fd, buf, buf_len);
		size_t len;

		if (n <= 0)
			return n;
		if ((size_t)n >= sizeof(struct fuse_in_header) &&
		    ((const struct fuse_in_header *)buf)->opcode == FUSE_INTERRUPT &&
		    (fio_interrupt(c, buf, (size_t)n) ||
		     fio_serving_interrupt(c, buf, (size_t)n) ||
		     fio_park_interrupt(c, buf, (size_t)n)))
			continue;
		len = (size_t)n;
		if (!fio_take(c, fd, buf, &len))
			return (ssize_t)len;
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

/* The transport asked for with transport= and offered by the kernel's INIT. */
static bool fio_uring_wanted(struct fio_conn *c)
{
	return c->w->opts.transport != TRANSPORT_DEV && atomic_load(&c->kernel_offers_uring);
}

/* Set by the INIT reply's patch: the rings start once that reply is out. */
static __thread size_t fio_uring_payload_bytes;

static void fio_uring_set_starting(struct fio_conn *c, bool starting)
{
	pthread_mutex_lock(&c->uring_lock);
	c->uring_starting = starting;
	pthread_cond_broadcast(&c->uring_cond);
	pthread_mutex_unlock(&c->uring_lock);
}

/*
 * A ring entry's payload holds the largest request or reply of the
 * connection: the kernel asks for max(8 KiB, max_write, max_pages pages).
 */
static size_t fio_uring_payload(const struct fuse_init_out *out)
{
	size_t pages = (out->flags & FUSE_MAX_PAGES) && out->max_pages ? out->max_pages : 32;
	size_t bytes = pages * PAGE_SIZE;

	if (bytes < out->max_write)
		bytes = out->max_write;
	return bytes < 8192 ? 8192 : bytes;
}

/*
 * INIT reply: let MAP_SHARED through to direct_io files, and ask for
 * FUSE over io_uring when the kernel offers it and transport= allows.
 */
static void fio_patch_init(struct fio_conn *c, const struct iovec *iov, int count,
			   size_t arg_len)
{
	struct fuse_init_out *out;

	out = fio_msg_bytes(iov, count, sizeof(struct fuse_out_header),
			    offsetof(struct fuse_init_out, flags) + sizeof(out->flags));
	if (out && arg_len >= offsetof(struct fuse_init_out, flags) + sizeof(out->flags))
		c->dont_mask = (out->flags & FUSE_DONT_MASK) != 0;
	/* the kernel reads flags2 only from a full (7.23+) reply with INIT_EXT */
	if (arg_len < offsetof(struct fuse_init_out, unused))
		return;
	out = fio_msg_bytes(iov, count, sizeof(struct fuse_out_header),
			    offsetof(struct fuse_init_out, unused));
	if (!out)
		return;
	if (c->kernel_allows_mmap) {
		out->flags |= FUSE_INIT_EXT;
		out->flags2 |= FIO_ALLOW_MMAP_FLAGS2;
	}
	if (fio_uring_wanted(c)) {
		out->flags |= FUSE_INIT_EXT;
		out->flags2 |= FURING_OVER_IO_URING_FLAGS2;
		fio_uring_payload_bytes = fio_uring_payload(out);
		fio_uring_set_starting(c, true);
	}
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

static void fio_patch_reply(struct fio_conn *c, const struct iovec *iov, int count)
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
		fio_patch_init(c, iov, count, arg_len);
	else
		fio_patch_open(iov, count, arg_len, fio_pending.opcode == FUSE_CREATE);
}

/*
 * Per queue (CPU): ring threads and entries per ring thread. A handler that
 * waits (fsync, a trace read, direct reclaim) stops its thread, and a held
 * (throttled) reply keeps its entry, so a queue has as many threads as
 * libfuse has workers on /dev/fuse at most, each with one entry: the
 * kernel only gives requests to entries whose thread is free to fetch.
 * (Four entries per thread hung the throttle suite: the writers' WRITEs
 * went to the spare entries of the thread reading /.wbcfs/trace, which
 * waited for the records those WRITEs would make.) The price: at most
 * that many replies held per CPU; more throttled writers wait for an
 * entry in the kernel, which the pauses they are owed do not count.
 */
#define FIO_URING_RINGS 8
#define FIO_URING_ENTRIES 1

/*
 * The INIT reply asked for io_uring and has reached the kernel (it sets
 * the connection up while the reply is written): register this
 * connection's rings on its device @fd. Until every queue has, requests
 * keep coming on /dev/fuse.
 */
static void fio_uring_start(struct fio_conn *c, int fd)
{
	size_t payload = fio_uring_payload_bytes;
	struct furing *fr = NULL;
	int ret;

	fio_uring_payload_bytes = 0;
	ret = furing_start(&fr, c->se, fd, payload, FIO_URING_RINGS, FIO_URING_ENTRIES,
			   c->w->opts.poll_us, fio_take, fio_before_copy, c);
	if (ret)
		fprintf(stderr, "wbcfs: %s: FUSE over io_uring not started (%s): serving "
			"on /dev/fuse\n", c->w->dev_path, strerror(-ret));
	/* published by the lock fio_uring_set_starting takes, before waiters look */
	c->uring = fr;
	fio_uring_set_starting(c, false);
}

static ssize_t fio_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct fio_conn *c = fio_conn_of(userdata);
	const struct fuse_out_header *out = iov[0].iov_base;
	bool reply = count > 0 && iov[0].iov_len >= sizeof(*out) && out->unique;
	ssize_t ret;

	if (!c)
		return writev(fd, iov, count);	/* not installed by us: pass through */
	if (fio_pending.unique && fio_pending.opcode == FEXT_STATX && reply &&
	    out->unique == fio_pending.unique) {
		fio_pending.unique = 0;
		fio_busy_done(c);
		return fext_statx_reply(fd, iov, count, &fio_pending.btime);
	}
	if (reply && out->unique != fio_cur_unique && atomic_load(&c->nr_parked)) {
		void *ent;

		if (fio_unpark(c, out->unique, &ent))
			return ent ? furing_reply_parked(ent, iov, count) :
				     fuse_io_send(fd, iov, count);
	}
	if (fio_pending.unique)
		fio_patch_reply(c, iov, count);
	/* a reply (notifications have unique 0) ends a request's service */
	if (reply)
		fio_busy_done(c);
	if (fio_hold_next.pause_ms > 0) {
		long pause_ms = fio_hold_next.pause_ms;

		/* spent by this reply, held or not: the next one is not paused */
		fio_hold_next.pause_ms = 0;
		if (reply && fio_hold(c, fd, iov, count, pause_ms))
			return (ssize_t)out->len;
	}
	ret = fuse_io_send(fd, iov, count);
	if (fio_uring_payload_bytes) {
		if (ret >= 0)
			fio_uring_start(c, fd);
		else
			fio_uring_set_starting(c, false);
		fio_uring_payload_bytes = 0;
	}
	return ret;
}

static const struct fuse_custom_io fio_ops = {
	.read = fio_read,
	.writev = fio_writev,
};

/** The hooks themselves (for unit tests, which drive them over pipes). */
const struct fuse_custom_io *fuse_io_ops(void)
{
	return &fio_ops;
}

static void fio_conn_free(struct fio_conn *c)
{
	pthread_cond_destroy(&c->uring_cond);
	pthread_mutex_destroy(&c->uring_lock);
	pthread_cond_destroy(&c->held_cond);
	pthread_mutex_destroy(&c->held_lock);
	pthread_cond_destroy(&c->park_cond);
	pthread_mutex_destroy(&c->park_lock);
	free(c);
}

static struct fio_conn *fio_conn_alloc(struct wbfs *w, struct fuse_session *se)
{
	struct fio_conn *c = calloc(1, sizeof(*c));
	pthread_condattr_t ca;

	if (!c)
		return NULL;
	c->w = w;
	c->se = se;
	pthread_mutex_init(&c->held_lock, NULL);
	/* the timer sleeps until a reply's due time on the monotonic clock */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->held_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&c->uring_lock, NULL);
	pthread_cond_init(&c->uring_cond, NULL);
	pthread_mutex_init(&c->park_lock, NULL);
	pthread_cond_init(&c->park_cond, NULL);
	return c;
}

int fuse_io_install(struct wbfs *w, struct fuse_session *se)
{
	int ret;

	if (w->fio)
		return -EALREADY;
	w->fio = fio_conn_alloc(w, se);
	if (!w->fio)
		return -ENOMEM;
	w->kc = &fuse_kcache_ops;
	if (!se)
		return 0;
	ret = fuse_session_custom_io(se, &fio_ops, fuse_session_fd(se));
	if (ret) {
		/* without the hooks nothing would reach this state */
		fio_conn_free(w->fio);
		w->fio = NULL;
		return ret < 0 ? ret : -EIO;
	}
	return 0;
}

void fuse_io_transport_stop(struct wbfs *w)
{
	struct fio_conn *c = w->fio;

	if (!c)
		return;
	fuse_io_stop(w);	/* done already, unless the caller skipped it */
	furing_stop(c->uring);
	w->fio = NULL;
	fio_conn_free(c);
}

int fuse_io_transport_show(struct wbfs *w, char *buf, size_t size)
{
	struct fio_conn *c = w->fio;
	unsigned long requests;
	unsigned queues, ents;

	if (!c)
		return snprintf(buf, size, "dev\n");
	pthread_mutex_lock(&c->uring_lock);
	while (c->uring_starting)
		pthread_cond_wait(&c->uring_cond, &c->uring_lock);
	pthread_mutex_unlock(&c->uring_lock);
	if (!furing_active(c->uring))
		return snprintf(buf, size, "dev\n");
	furing_shape(c->uring, &queues, &ents, &requests);
	return snprintf(buf, size, "uring\nqueues %u\nentries %u\nrequests %lu\n", queues,
			ents, requests);
}
