// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * FUSE over io_uring: requests come to the daemon as completions of
 * IORING_OP_URING_CMD commands on /dev/fuse instead of read(2), and
 * replies go back with the command that fetches the next request
 * (COMMIT_AND_FETCH), one system call for both.
 *
 * One queue per possible CPU: the kernel puts a request on the queue of
 * the CPU its caller runs on, and routes nothing to io_uring until every
 * queue has an entry registered. Each queue is served by a few ring
 * threads pinned to its CPU, each with its own ring and few entries
 * (see fuse_io.c for the numbers). A ring thread serves a request to the
 * end before it fetches the next, and some handlers wait long (fsync
 * for writeback, a read of /.wbcfs/trace for records, direct reclaim):
 * an entry of a busy thread that the kernel fills waits with it, so
 * entries are spread over threads, and while one thread waits the kernel
 * hands requests to the entries of the others (it takes the entry made
 * available last, the thread that just answered).
 *
 * Each entry is a header buffer and a payload buffer (see
 * fuse_i.h); a request is handed to libfuse's
 * fuse_session_process_buf as one flat message rebuilt in the headroom
 * in front of the payload, so WRITE data is not copied. libfuse writes
 * the reply through fuse_io.c's writev hook on the same thread, which
 * hands it back here (furing_reply) by the thread's current entry.
 *
 * What stays on /dev/fuse and libfuse's own loop: INIT (the rings are set
 * up after its reply), FORGET and INTERRUPT (the kernel sends those
 * there), notifications, and whatever is queued before the rings are up.
 *
 * A held (throttled) WRITE reply keeps its entry out of service: the
 * timer of fuse_io.c calls furing_commit_held, which queues the entry and
 * wakes its ring thread through an eventfd, as only that thread may
 * submit on its ring (the kernel runs a command's completion work in the
 * task that submitted it).
 *
 * At unmount the kernel completes every registered command with
 * -ENOTCONN; a ring thread ends when all of its entries have, or when
 * furing_stop asks.
 *
 * Everything belongs to one FUSE connection (struct furing, made by
 * furing_start): the kernel takes one set of queues per connection, so a
 * process serving several mounts runs one struct furing for each mount
 * that uses io_uring. A ring thread serves its own connection only, and
 * a reply finds its entry, hence its connection, through the thread's
 * current entry: nothing here is shared between connections.
 */
#include <errno.h>
#include <linux/fuse.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include "fuse_i.h"
#include "wbcfs/lib/clock.h"

#define FURING_EFD_TAG 1ULL		/* user_data of the eventfd read */
#define FURING_MAX_QUEUES 1024

struct furing;
struct furing_ring;

struct furing_ent {
	struct furing_ring *q;
	struct furing_req_header *hdr;	/* registered header buffer */
	char *area;			/* FURING_HEADROOM, then the payload */
	char *payload;			/* registered payload buffer */
	struct iovec iov[2];		/* what REGISTER points the kernel at */
	uint64_t commit_id;		/* ring thread */
	uint64_t unique;		/* ring thread: the request being served */
	bool replied;			/* ring thread: a reply is in the buffers */
	bool held;			/* ring thread: committed by furing_commit_held */
	bool dead;			/* ring thread: the kernel gave it back */
	struct furing_ent *next;	/* q->lock: on q->commit_head */
};

struct furing_ring {
	struct furing *fr;		/* constant: the connection */
	unsigned qid;
	struct io_uring ring;		/* ring thread only */
	int efd;			/* eventfd: held replies to commit, or stop */
	uint64_t efd_val;
	bool deferred;			/* ring thread: completion work runs in our
					 * io_uring_enter only (DEFER_TASKRUN) */
	int wake_fd;			/* deferred: eventfd the kernel signals when
					 * it queues completion work for us, and
					 * furing_kick too */
	_Atomic bool kicked;		/* deferred: held replies to commit, or stop */
	pthread_t thread;
	unsigned nr_live;		/* ring thread: entries the kernel holds or we serve */
	_Atomic unsigned long nr_requests;	/* atomic: requests served (written by the thread) */
	struct furing_ent *ents;

	pthread_mutex_t lock;		/* protects commit_head, stop, exited */
	struct furing_ent *commit_head;
	bool stop;
	bool exited;
	int start_ret;			/* fr->start_lock: registration result, 1 = pending */
};

/*
 * The transport of one FUSE connection: set up once, at its INIT, by one
 * thread; the fields without a comment are constant after furing_start.
 */
struct furing {
	struct fuse_session *se;
	int fd;
	size_t payload_size;
	unsigned nr_ents;		/* per ring */
	unsigned nr_queues;		/* the kernel's: one per possible CPU */
	unsigned rings_per_queue;
	unsigned nr_rings;
	struct furing_ring *rings;
	bool (*take)(void *arg, int fd, void *buf, size_t *len);
	void (*before_copy)(void *arg);
	void *take_arg;
	unsigned poll_us;
	_Atomic bool active;		/* atomic */

	pthread_mutex_t start_lock;	/* protects: rings[].start_ret */
	pthread_cond_t start_cond;	/* start_lock: a ring reported */
};

/* The entry this thread is serving: its reply goes into the entry. */
static __thread struct furing_ent *furing_cur;

/* ---- messages (no kernel needed: unit-tested) ---------------------------- */

void *furing_req_flatten(const struct furing_req_header *h, char *payload, size_t payload_size,
			 size_t *len)
{
	const struct fuse_in_header *in = (const void *)h->in_out;
	const struct furing_ent_in_out *eio = &h->ring_ent_in_out;
	size_t op_len;
	char *msg;

	if (in->len < sizeof(*in) + eio->payload_sz || eio->payload_sz > payload_size)
		return NULL;
	/* the op header is what the request's length leaves beside the payload */
	op_len = in->len - sizeof(*in) - eio->payload_sz;
	if (op_len > FURING_OP_IN_OUT_SZ)
		return NULL;
	msg = payload - op_len - sizeof(*in);
	memcpy(msg, in, sizeof(*in));
	memcpy(msg + sizeof(*in), h->op_in, op_len);
	*len = in->len;
	return msg;
}

ssize_t furing_reply_fill(struct furing_req_header *h, char *payload, size_t payload_size,
			  const struct iovec *iov, int count)
{
	struct fuse_out_header *out = (void *)h->in_out;
	size_t hdr = 0, used = 0, total = 0;
	int i;

	for (i = 0; i < count; i++)
		total += iov[i].iov_len;
	if (total < sizeof(*out))
		return -EINVAL;
	if (total - sizeof(*out) > payload_size) {
		memcpy(out, iov[0].iov_base, sizeof(*out));	/* libfuse: header alone */
		out->error = -EIO;
		out->len = sizeof(*out);
		h->ring_ent_in_out.payload_sz = 0;
		return -E2BIG;
	}
	for (i = 0; i < count; i++) {
		const char *p = iov[i].iov_base;
		size_t n = iov[i].iov_len;

		if (hdr < sizeof(*out)) {
			size_t k = n < sizeof(*out) - hdr ? n : sizeof(*out) - hdr;

			memcpy((char *)out + hdr, p, k);
			hdr += k;
			p += k;
			n -= k;
		}
		memcpy(payload + used, p, n);
		used += n;
	}
	h->ring_ent_in_out.payload_sz = (uint32_t)used;
	return (ssize_t)total;
}

/* ---- the kernel's switch ------------------------------------------------- */

int furing_kernel_enabled(void)
{
	FILE *f = fopen("/sys/module/fuse/parameters/enable_uring", "r");
	int c;

	if (!f)
		return -errno;
	c = fgetc(f);
	fclose(f);
	return c == 'Y' || c == 'y' || c == '1';
}

/*
 * Turn the switch on (root only): it lets the servers that ask for
 * io_uring in INIT use it and changes nothing for the others, which keep
 * /dev/fuse. It stays on after the daemon: it is the kernel's, for every
 * mount. Returns 0 or -errno.
 */
int furing_kernel_enable(void)
{
	FILE *f = fopen("/sys/module/fuse/parameters/enable_uring", "w");
	int ret = 0;

	if (!f)
		return -errno;
	if (fputc('Y', f) == EOF)
		ret = -errno;
	if (fclose(f) && !ret)
		ret = -errno;
	if (!ret && furing_kernel_enabled() <= 0)
		ret = -EOPNOTSUPP;
	return ret;
}

/* Possible CPUs: the kernel makes one queue for each. */
static unsigned furing_possible_cpus(void)
{
	FILE *f = fopen("/sys/devices/system/cpu/possible", "r");
	unsigned lo, hi, max = 0;
	int n;

	if (!f)
		return (unsigned)get_nprocs_conf();
	while ((n = fscanf(f, "%u-%u", &lo, &hi)) >= 1) {
		if (n == 1)
			hi = lo;
		if (hi + 1 > max)
			max = hi + 1;
		if (fgetc(f) != ',')
			break;
	}
	fclose(f);
	return max ? max : (unsigned)get_nprocs_conf();
}

/* ---- submission (ring thread only) ------------------------------------ */

/*
 * Enter the kernel: submit what is queued and run the completion work it
 * queued for this thread (deferred), which is where it copies a request
 * into an entry of ours; so the take hook is told first, unless requests
 * it copied before wait in the completion queue still (their note is the
 * older one, made before they were copied).
 */
static int furing_enter(struct furing_ring *q)
{
	struct furing *fr = q->fr;

	if (q->deferred && fr->before_copy && !io_uring_cq_ready(&q->ring))
		fr->before_copy(fr->take_arg);
	return io_uring_submit_and_get_events(&q->ring);
}

static struct io_uring_sqe *furing_get_sqe(struct furing_ring *q)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);

	if (!sqe) {
		furing_enter(q);
		sqe = io_uring_get_sqe(&q->ring);
	}
	return sqe;
}

static int furing_prep_cmd(struct furing_ring *q, struct furing_ent *e, uint32_t op)
{
	struct io_uring_sqe *sqe = furing_get_sqe(q);
	struct furing_cmd_req *req;

	if (!sqe)
		return -EBUSY;
	memset(sqe, 0, 2 * sizeof(*sqe));	/* a 128-byte SQE */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = q->fr->fd;
	sqe->cmd_op = op;
	if (op == FURING_CMD_REGISTER) {
		sqe->addr = (uintptr_t)e->iov;
		sqe->len = 2;
	}
	req = (struct furing_cmd_req *)sqe->cmd;
	req->qid = (uint16_t)q->qid;
	req->commit_id = e->commit_id;
	io_uring_sqe_set_data(sqe, e);
	return 0;
}

static void furing_prep_efd_read(struct furing_ring *q)
{
	struct io_uring_sqe *sqe = furing_get_sqe(q);

	if (!sqe)
		return;
	io_uring_prep_read(sqe, q->efd, &q->efd_val, sizeof(q->efd_val), 0);
	io_uring_sqe_set_data64(sqe, FURING_EFD_TAG);
}

static void furing_commit(struct furing_ring *q, struct furing_ent *e)
{
	e->held = false;
	if (furing_prep_cmd(q, e, FURING_CMD_COMMIT_AND_FETCH) < 0) {
		fprintf(stderr, "wbcfs: fuse io_uring queue %u: no SQE for a commit\n", q->qid);
		e->dead = true;
		q->nr_live--;
	}
}

/* ---- serving ----------------------------------------------------------- */

static void furing_error_reply(struct furing_ent *e, int err)
{
	struct fuse_out_header out = { .len = sizeof(out), .error = err, .unique = e->unique };
	struct iovec iov = { .iov_base = &out, .iov_len = sizeof(out) };

	furing_reply_fill(e->hdr, e->payload, e->q->fr->payload_size, &iov, 1);
}

static void furing_serve(struct furing_ring *q, struct furing_ent *e)
{
	struct furing *fr = q->fr;
	const struct fuse_in_header *in = (const void *)e->hdr->in_out;
	size_t len;
	void *msg;

	atomic_store_explicit(&q->nr_requests, atomic_load_explicit(&q->nr_requests,
			      memory_order_relaxed) + 1, memory_order_relaxed);
	e->commit_id = e->hdr->ring_ent_in_out.commit_id;
	e->unique = in->unique;
	e->replied = e->held = false;
	msg = furing_req_flatten(e->hdr, e->payload, fr->payload_size, &len);
	if (!msg) {
		furing_error_reply(e, -EIO);
		furing_commit(q, e);
		return;
	}
	furing_cur = e;
	if (!fr->take(fr->take_arg, fr->fd, msg, &len)) {
		struct fuse_buf fb = { .mem = msg, .size = len };

		fuse_session_process_buf(fr->se, &fb);
	}
	furing_cur = NULL;
	if (e->held)
		return;			/* the timer commits it */
	if (!e->replied)		/* every handler replies: never leak the entry */
		furing_error_reply(e, -EIO);
	furing_commit(q, e);
}

bool furing_reply(const struct iovec *iov, int count, ssize_t *ret)
{
	struct furing_ent *e = furing_cur;
	const struct fuse_out_header *out = iov[0].iov_base;

	if (!e || e->replied || count < 1 || iov[0].iov_len < sizeof(*out) ||
	    out->unique != e->unique)
		return false;
	*ret = furing_reply_fill(e->hdr, e->payload, e->q->fr->payload_size, iov, count);
	if (*ret == -E2BIG)
		fprintf(stderr, "wbcfs: reply of %u bytes larger than the ring entry\n", out->len);
	e->replied = true;
	return true;
}

void *furing_hold(const struct iovec *iov, int count)
{
	struct furing_ent *e = furing_cur;
	ssize_t ret;

	if (!furing_reply(iov, count, &ret))
		return NULL;
	e->held = true;
	return e;
}

void *furing_park(uint64_t unique)
{
	struct furing_ent *e = furing_cur;

	if (!e || e->replied || e->unique != unique)
		return NULL;
	e->held = true;
	return e;
}

ssize_t furing_reply_parked(void *ent, const struct iovec *iov, int count)
{
	struct furing_ent *e = ent;
	ssize_t ret = furing_reply_fill(e->hdr, e->payload, e->q->fr->payload_size, iov, count);

	if (ret == -E2BIG)
		fprintf(stderr, "wbcfs: reply of %zd bytes larger than the ring entry\n",
			(ssize_t)((const struct fuse_out_header *)iov[0].iov_base)->len);
	furing_commit_held(e);
	if (ret < 0) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
}

/*
 * Wake @q's ring thread to look at commit_head and stop. Deferred: straight
 * through wake_fd, not a read of efd on the ring. The kernel signals the
 * eventfd registered with a ring from inside the wakeup of the eventfd
 * that read waits on, and an eventfd signalled within another's wakeup
 * is signalled later, from RCU: a parked fsync's reply waited a grace
 * period for its thread (dbench -F 8: 0.4x).
 */
static void furing_kick(struct furing_ring *q)
{
	if (q->deferred) {
		atomic_store(&q->kicked, true);
		eventfd_write(q->wake_fd, 1);
	} else {
		eventfd_write(q->efd, 1);
	}
}

void furing_commit_held(void *ent)
{
	struct furing_ent *e = ent;
	struct furing_ring *q = e->q;
	bool exited;

	pthread_mutex_lock(&q->lock);
	exited = q->exited;
	if (!exited) {
		e->next = q->commit_head;
		q->commit_head = e;
	}
	pthread_mutex_unlock(&q->lock);
	if (!exited)
		furing_kick(q);
}

/* The eventfd fired: commit the held replies handed over. False: stop. */
static bool furing_take_commits(struct furing_ring *q)
{
	struct furing_ent *e, *next;
	bool stop;

	pthread_mutex_lock(&q->lock);
	e = q->commit_head;
	q->commit_head = NULL;
	stop = q->stop;
	pthread_mutex_unlock(&q->lock);
	for (; e; e = next) {
		next = e->next;
		if (!e->dead)
			furing_commit(q, e);
	}
	if (!stop && !q->deferred)
		furing_prep_efd_read(q);
	return !stop;
}

static bool furing_complete(struct furing_ring *q, struct io_uring_cqe *cqe)
{
	struct furing_ent *e;

	if (cqe->user_data == FURING_EFD_TAG)
		return furing_take_commits(q);
	e = io_uring_cqe_get_data(cqe);
	if (cqe->res < 0) {
		/* -ENOTCONN: unmounted; -ECANCELED: the ring is going */
		if (!e->dead) {
			e->dead = true;
			q->nr_live--;
		}
		return q->nr_live > 0;
	}
	furing_serve(q, e);
	return true;
}

/* ---- ring threads ------------------------------------------------------- */

static void furing_report(struct furing_ring *q, int ret)
{
	pthread_mutex_lock(&q->fr->start_lock);
	q->start_ret = ret;
	pthread_cond_broadcast(&q->fr->start_cond);
	pthread_mutex_unlock(&q->fr->start_lock);
}

/* Register every entry; a refusal completes at once (before submit returns). */
static int furing_register(struct furing_ring *q)
{
	struct io_uring_cqe *cqe;
	unsigned head, i;
	int ret;

	for (i = 0; i < q->fr->nr_ents; i++) {
		ret = furing_prep_cmd(q, &q->ents[i], FURING_CMD_REGISTER);
		if (ret)
			return ret;
	}
	if (!q->deferred)
		furing_prep_efd_read(q);
	q->nr_live = q->fr->nr_ents;
	ret = furing_enter(q);
	if (ret < 0)
		return ret;
	io_uring_for_each_cqe(&q->ring, head, cqe) {
		if (cqe->user_data != FURING_EFD_TAG && cqe->res < 0)
			return cqe->res;
	}
	return 0;
}

/*
 * Is there something for this thread: a completion, or completion work
 * the kernel queued that our next io_uring_enter runs (deferred, which
 * the kernel flags in the SQ ring: TASKRUN_FLAG), or a kick?
 */
static bool furing_work_ready(struct furing_ring *q)
{
	return io_uring_cq_ready(&q->ring) ||
	       (q->deferred && ((IO_URING_READ_ONCE(*q->ring.sq.kflags) & IORING_SQ_TASKRUN) ||
				atomic_load(&q->kicked)));
}

/*
 * Busy-poll the ring before sleeping, for the reason fuse_io.c polls the
 * device (poll_us): a synchronous client's next request comes a few
 * microseconds after our reply, and waking a sleeping thread costs an IPI
 * to a halted vCPU. The kernel gives the next request of the queue to the
 * entry committed last, this thread's.
 * (The kernel's completion work waits for our next io_uring_enter
 * (DEFER_TASKRUN, furing_ring_setup); the poll looks for the flag the
 * kernel raises when it queues some. On a kernel without DEFER_TASKRUN
 * the work reaches a thread polling in user space: the ring is set up
 * without COOP_TASKRUN, so it is signalled.)
 *
 * The poll yields the CPU instead of spinning on it. The thread is pinned
 * to its queue's CPU, and the kernel queues a request on the queue of the
 * CPU its client runs on: the client we just woke is most likely waiting
 * for this very CPU. A pause loop held it there: a 4 KiB dd's client
 * waited out the whole poll_us (perf sched: 56 us wait, 73 us a request
 * against 19). sched_yield() hands the CPU to the client at once; this
 * thread stays runnable, so the client's next request needs no wakeup
 * (dd 4 KiB without fsync: 258 -> 272 MB/s, mean of 20 runs each).
 *
 * Every ring thread polls after its reply, however many others serve or
 * poll: a yielding poller takes the CPU only when nobody else wants it,
 * and with many clients their requests then find a thread awake instead
 * of one to wake. The rule before, one poller at a time and only while
 * no other request was being served (spin_gate_note), made dbench slower
 * (3 pairs of 10 s runs): 8 clients with an fsync after every write
 * 281 -> 331 MB/s, plain dbench 8 537 -> 603 MB/s, dbench 128 unchanged
 * (467 -> 469).
 */
static void furing_spin(struct furing_ring *q)
{
	struct furing *fr = q->fr;
	uint64_t end;

	if (!fr->poll_us || furing_work_ready(q))
		return;
	end = clock_real_ns() + (uint64_t)fr->poll_us * 1000;
	while (!furing_work_ready(q) && clock_real_ns() < end)
		sched_yield();
}

/*
 * Deferred: sleep until the kernel queues completion work for this
 * thread (a request copied into an entry of ours waits for it) or posts
 * a completion, without running that work: it is run by the
 * io_uring_enter after, once the take hook has been told (furing_enter).
 * The kernel signals wake_fd when work arrives on an empty list, and only
 * while the eventfd is enabled, which it is while this thread sleeps.
 */
static void furing_sleep(struct furing_ring *q)
{
	uint64_t v;

	io_uring_cq_eventfd_toggle(&q->ring, true);
	while (!furing_work_ready(q) && read(q->wake_fd, &v, sizeof(v)) < 0 && errno == EINTR)
		;
	io_uring_cq_eventfd_toggle(&q->ring, false);
}

/* Submit, then wait for at least one completion, each way's own. */
static int furing_wait(struct furing_ring *q)
{
	int ret;

	if (!q->deferred) {
		if (q->fr->poll_us) {
			io_uring_submit(&q->ring);
			furing_spin(q);
		}
		return io_uring_submit_and_wait(&q->ring, 1);
	}
	ret = furing_enter(q);
	if (ret < 0 || io_uring_cq_ready(&q->ring))
		return ret;
	furing_spin(q);
	if (!furing_work_ready(q))
		furing_sleep(q);
	return furing_enter(q);
}

/*
 * The ring: completion work deferred to our io_uring_enter calls
 * (DEFER_TASKRUN) where the kernel has it, so that a request is copied
 * into an entry only inside one (furing_enter); SINGLE_ISSUER, which it
 * needs, holds: only this thread submits. The kernel ties the ring to the
 * task that makes it, so this thread makes it.
 */
static int furing_ring_setup(struct furing_ring *q)
{
	unsigned entries = q->fr->nr_ents * 2 + 4;
	int ret;

	ret = io_uring_queue_init(entries, &q->ring, IORING_SETUP_SQE128 |
				  IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
				  IORING_SETUP_TASKRUN_FLAG);
	if (!ret) {
		q->wake_fd = eventfd(0, EFD_CLOEXEC);
		if (q->wake_fd < 0)
			return -errno;
		ret = io_uring_register_eventfd(&q->ring, q->wake_fd);
		if (ret)
			return ret;
		io_uring_cq_eventfd_toggle(&q->ring, false);
		q->deferred = true;
		return 0;
	}
	if (ret != -EINVAL)
		return ret;
	/* an older kernel: its completion work interrupts us anywhere */
	return io_uring_queue_init(entries, &q->ring, IORING_SETUP_SQE128);
}

static void *furing_main(void *arg)
{
	struct furing_ring *q = arg;
	bool more = true;
	cpu_set_t set;
	int ret;

	CPU_ZERO(&set);
	CPU_SET(q->qid, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);	/* best effort */
	ret = furing_ring_setup(q);
	if (!ret)
		ret = furing_register(q);
	furing_report(q, ret);
	if (ret)
		more = false;
	while (more) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;

		ret = furing_wait(q);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY)
			break;
		if (q->deferred && atomic_exchange(&q->kicked, false) && !furing_take_commits(q))
			more = false;
		io_uring_for_each_cqe(&q->ring, head, cqe) {
			seen++;
			if (!furing_complete(q, cqe))
				more = false;
		}
		io_uring_cq_advance(&q->ring, seen);
	}
	pthread_mutex_lock(&q->lock);
	q->exited = true;
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

static int furing_ring_init(struct furing *fr, struct furing_ring *q, unsigned qid)
{
	size_t area = FURING_HEADROOM + fr->payload_size;
	unsigned i;

	q->fr = fr;
	q->qid = qid;
	q->start_ret = 1;
	pthread_mutex_init(&q->lock, NULL);
	q->efd = eventfd(0, EFD_CLOEXEC);
	if (q->efd < 0)
		return -errno;
	q->ents = calloc(fr->nr_ents, sizeof(*q->ents));
	if (!q->ents)
		return -ENOMEM;
	for (i = 0; i < fr->nr_ents; i++) {
		struct furing_ent *e = &q->ents[i];

		e->q = q;
		e->hdr = calloc(1, sizeof(*e->hdr));
		/* mmap: touched only as requests fill it */
		e->area = mmap(NULL, area, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		if (!e->hdr || e->area == MAP_FAILED) {
			e->area = NULL;
			return -ENOMEM;
		}
		e->payload = e->area + FURING_HEADROOM;
		e->iov[0] = (struct iovec){ e->hdr, sizeof(*e->hdr) };
		e->iov[1] = (struct iovec){ e->payload, fr->payload_size };
	}
	return 0;
}

static void furing_ring_free(struct furing_ring *q)
{
	struct furing *fr = q->fr;
	unsigned i;

	if (!fr)
		return;		/* never initialised */
	if (q->ring.ring_fd > 0)
		io_uring_queue_exit(&q->ring);
	for (i = 0; q->ents && i < fr->nr_ents; i++) {
		free(q->ents[i].hdr);
		if (q->ents[i].area)
			munmap(q->ents[i].area, FURING_HEADROOM + fr->payload_size);
	}
	free(q->ents);
	if (q->efd > 0)
		close(q->efd);
	if (q->wake_fd > 0)
		close(q->wake_fd);
	pthread_mutex_destroy(&q->lock);
}

/* Wait until every started queue has said how its registration went. */
static int furing_wait_started(struct furing *fr, unsigned started)
{
	unsigned i;
	int ret = 0;

	pthread_mutex_lock(&fr->start_lock);
	for (i = 0; i < started; i++) {
		while (fr->rings[i].start_ret == 1)
			pthread_cond_wait(&fr->start_cond, &fr->start_lock);
		if (fr->rings[i].start_ret && !ret)
			ret = fr->rings[i].start_ret;
	}
	pthread_mutex_unlock(&fr->start_lock);
	return ret;
}

static struct furing *furing_alloc(unsigned nr_queues, unsigned rings_per_queue)
{
	struct furing *fr = calloc(1, sizeof(*fr));

	if (!fr)
		return NULL;
	fr->rings = calloc((size_t)nr_queues * rings_per_queue, sizeof(*fr->rings));
	if (!fr->rings) {
		free(fr);
		return NULL;
	}
	fr->nr_queues = nr_queues;
	fr->rings_per_queue = rings_per_queue;
	fr->nr_rings = nr_queues * rings_per_queue;
	pthread_mutex_init(&fr->start_lock, NULL);
	pthread_cond_init(&fr->start_cond, NULL);
	return fr;
}

int furing_start(struct furing **out, struct fuse_session *se, int fd, size_t payload_size,
		 unsigned rings_per_queue, unsigned nr_ents, unsigned poll_us,
		 bool (*take)(void *arg, int fd, void *buf, size_t *len),
		 void (*before_copy)(void *arg), void *take_arg)
{
	unsigned i, started = 0, n = furing_possible_cpus();
	struct furing *fr;
	int ret = 0;

	if (*out)
		return -EALREADY;
	if (!n || n > FURING_MAX_QUEUES || !rings_per_queue || !nr_ents)
		return -EINVAL;
	fr = furing_alloc(n, rings_per_queue);
	if (!fr)
		return -ENOMEM;
	fr->se = se;
	fr->fd = fd;
	fr->payload_size = (payload_size + PAGE_SIZE - 1) & ~(size_t)(PAGE_SIZE - 1);
	fr->nr_ents = nr_ents;
	fr->take = take;
	fr->before_copy = before_copy;
	fr->take_arg = take_arg;
	fr->poll_us = poll_us;
	for (i = 0; i < fr->nr_rings && !ret; i++) {
		ret = furing_ring_init(fr, &fr->rings[i], i / rings_per_queue);
		if (!ret)
			ret = -pthread_create(&fr->rings[i].thread, NULL, furing_main,
					      &fr->rings[i]);
		if (!ret)
			started++;
	}
	if (!ret)
		ret = furing_wait_started(fr, started);
	else
		furing_wait_started(fr, started);
	if (ret) {
		furing_stop(fr);
		return ret;
	}
	fr->active = true;
	*out = fr;
	return 0;
}

void furing_stop(struct furing *fr)
{
	unsigned i;

	if (!fr)
		return;
	fr->active = false;
	for (i = 0; i < fr->nr_rings; i++) {
		struct furing_ring *q = &fr->rings[i];

		if (!q->fr || (q->start_ret == 1 && !q->thread))
			continue;
		pthread_mutex_lock(&q->lock);
		q->stop = true;
		pthread_mutex_unlock(&q->lock);
		if (q->efd > 0)
			furing_kick(q);
	}
	for (i = 0; i < fr->nr_rings; i++) {
		struct furing_ring *q = &fr->rings[i];

		if (q->thread)
			pthread_join(q->thread, NULL);
		furing_ring_free(q);
	}
	pthread_cond_destroy(&fr->start_cond);
	pthread_mutex_destroy(&fr->start_lock);
	free(fr->rings);
	free(fr);
}

bool furing_active(const struct furing *fr)
{
	return fr && fr->active;
}

void furing_shape(const struct furing *fr, unsigned *nr_queues, unsigned *nr_ents,
		  unsigned long *nr_requests)
{
	bool active = furing_active(fr);
	unsigned i;

	*nr_queues = active ? fr->nr_queues : 0;
	*nr_ents = active ? fr->nr_ents * fr->rings_per_queue : 0;
	*nr_requests = 0;
	for (i = 0; active && i < fr->nr_rings; i++)
		*nr_requests += atomic_load_explicit(&fr->rings[i].nr_requests,
						     memory_order_relaxed);
}
