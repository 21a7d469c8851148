// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * NBD devices through libnbd's asynchronous API (see nbdev.h).
 *
 * Threads. Any thread issues commands (nbd_aio_*) under the read side of
 * d->lock; libnbd serialises them on its handle lock and sends as much as
 * the socket takes at once. The poller thread owns the handle's life: it
 * polls the socket in the direction libnbd asks for plus an eventfd that
 * an issuer kicks when a command could not be sent whole, feeds libnbd
 * (nbd_aio_notify_read/write), and on a dead connection closes the handle
 * under the write side of d->lock and reconnects.
 *
 * Completion. Each command's completion callback records its error; its
 * free callback, which libnbd calls exactly once per command (also when
 * the command fails to be issued, and for the commands in flight when a
 * dead handle is closed), is the one place a command ends. A transfer
 * split in parts ends with its last part.
 */
#include <errno.h>
#include <libnbd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "blkdev_i.h"
#include "wbcfs/lib/lockstat.h"

LOCK_CLASS(lc_nbdev_lock_r, "nbdev_lock(r)")
LOCK_CLASS(lc_nbdev_lock_w, "nbdev_lock(w)")

/* NBD servers may refuse requests over 32 MiB (the protocol's advice) */
#define NBD_REQUEST_MAX		(32u << 20)
#define NBDEV_MAX		64

struct nbdev {
	char *uri;
	char name[16];			/* "nbdN": its slot, short for traces and bdi names */
	int fd;				/* eventfd standing for the device */
	int wake;			/* eventfd: the poller looks again */
	struct nbdev_info info;
	unsigned retry_s;
	unsigned timeout_s;		/* a connection with no reply for this long is dead */
	atomic_uint inflight;		/* commands issued, not yet ended */
	atomic_ullong progress_ms;	/* last reply, or the first command after none */
	pthread_rwlock_t lock;		/* read: issuing on h; write: replacing it */
	struct nbd_handle *h;		/* NULL while disconnected; poller replaces it */
	atomic_bool connected;
	atomic_bool stop;
	atomic_bool server_leaving;	/* a command failed with ESHUTDOWN */
	pthread_t poller;
	atomic_ulong requests, failed, reconnects;
	char last_error[256];		/* poller only */
};

/* One issued operation; its parts are NBD commands. */
struct nbd_op {
	void (*done)(void *priv, int res);
	void *priv;
	atomic_uint parts;		/* commands not yet ended, +1 while issuing */
	atomic_int err;			/* first positive errno seen */
	struct nbdev *d;
};

static _Atomic(struct nbdev *) nbdevs[NBDEV_MAX];
static atomic_uint nr_nbdevs;

bool nbdev_is_uri(const char *dev)
{
	static const char *const schemes[] = { "nbd://", "nbds://", "nbd+unix://",
					       "nbds+unix://", "nbd+vsock://", "nbds+vsock://" };
	size_t i;

	for (i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
		if (!strncmp(dev, schemes[i], strlen(schemes[i])))
			return true;
	return false;
}

int nbdev_fd(const struct nbdev *d)
{
	return d->fd;
}

struct nbdev *nbdev_of_fd(int fd)
{
	unsigned i;

	if (!atomic_load_explicit(&nr_nbdevs, memory_order_acquire))
		return NULL;
	for (i = 0; i < NBDEV_MAX; i++) {
		struct nbdev *d = atomic_load_explicit(&nbdevs[i], memory_order_acquire);

		if (d && d->fd == fd)
			return d;
	}
	return NULL;
}

const char *nbdev_name(const struct nbdev *d)
{
	return d->name;
}

const struct nbdev_info *nbdev_info(const struct nbdev *d)
{
	return &d->info;
}

bool nbdev_connected(const struct nbdev *d)
{
	return atomic_load(&d->connected);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void kick(int efd)
{
	uint64_t one = 1;
	ssize_t n = write(efd, &one, sizeof(one));

	(void)n;	/* a full counter still wakes the poller */
}

/* ---- commands ------------------------------------------------------------- */

static void op_put(struct nbd_op *op)
{
	int err;

	if (atomic_fetch_sub(&op->parts, 1) != 1)
		return;
	err = atomic_load(&op->err);
	atomic_fetch_add(&op->d->requests, 1);
	if (err)
		atomic_fetch_add(&op->d->failed, 1);
	op->done(op->priv, -err);
	free(op);
}

/*
 * Record @op's first error. As a block device reports them: ENOSPC (a
 * thin export out of space) as itself, everything else (a server's EIO, a
 * broken connection's EPIPE or ENOTCONN) as EIO.
 */
static void op_fail(struct nbd_op *op, int err)
{
	int zero = 0;

	atomic_compare_exchange_strong(&op->err, &zero, err == ENOSPC ? ENOSPC : EIO);
}

struct nbd_part {
	struct nbd_op *op;
	bool completed;
};

/* Context: libnbd's handle lock held: no nbd_* calls here. */
static int part_completed(void *user_data, int *error)
{
	struct nbd_part *p = user_data;

	p->completed = true;
	if (*error)
		op_fail(p->op, *error);
	if (*error == ESHUTDOWN) {
		/* the server is going away (it keeps the connection open and
		 * fails every command until we leave): reconnect */
		atomic_store(&p->op->d->server_leaving, true);
		kick(p->op->d->wake);
	}
	return 1;	/* retire at once: part_free follows */
}

/*
 * The end of one command, whatever happened: completed, failed to be
 * issued, or still in flight when its dead handle was closed. One that
 * never completed (no reply) fails with EIO.
 */
static void part_free(void *user_data)
{
	struct nbd_part *p = user_data;
	struct nbd_op *op = p->op;

	atomic_store(&op->d->progress_ms, now_ms());
	atomic_fetch_sub(&op->d->inflight, 1);
	if (!p->completed)
		op_fail(op, EIO);
	free(p);
	op_put(op);
}

/* Issue one command of @op. Context: d->lock read side. */
static void issue_part(struct nbdev *d, struct nbd_op *op, enum nbdev_op kind, void *buf,
		       uint64_t len, uint64_t off, unsigned flags)
{
	struct nbd_part *p = malloc(sizeof(*p));
	nbd_completion_callback cb;
	int64_t cookie;

	atomic_fetch_add(&op->parts, 1);
	if (!p) {
		atomic_store(&op->err, ENOMEM);
		op_put(op);
		return;
	}
	p->op = op;
	p->completed = false;
	if (atomic_fetch_add(&d->inflight, 1) == 0)
		atomic_store(&d->progress_ms, now_ms());	/* the clock starts now */
	cb = (nbd_completion_callback){ .callback = part_completed, .user_data = p,
					.free = part_free };
	switch (kind) {
	case NBDEV_READ:
		cookie = nbd_aio_pread(d->h, buf, len, off, cb, 0);
		break;
	case NBDEV_WRITE:
		cookie = nbd_aio_pwrite(d->h, buf, len, off, cb,
					(flags & NBDEV_FUA) ? LIBNBD_CMD_FLAG_FUA : 0);
		break;
	case NBDEV_FLUSH:
		cookie = nbd_aio_flush(d->h, cb, 0);
		break;
	default:
		cookie = nbd_aio_trim(d->h, len, off, cb, 0);
		break;
	}
	/* -1: libnbd has called part_free already, which failed @op with EIO */
	(void)cookie;
}

void nbdev_submit(struct nbdev *d, enum nbdev_op kind, void *buf, uint64_t len, uint64_t off,
		  unsigned flags, void (*done)(void *priv, int res), void *priv)
{
	struct nbd_op *op = malloc(sizeof(*op));
	uint64_t max = d->info.max_request;

	if (!op) {
		done(priv, -ENOMEM);
		return;
	}
	op->done = done;
	op->priv = priv;
	op->d = d;
	atomic_init(&op->parts, 1);	/* held while issuing */
	atomic_init(&op->err, 0);
	if (!d->info.can_fua)
		flags &= ~NBDEV_FUA;
	ls_rwlock_rdlock(&d->lock, &lc_nbdev_lock_r);
	if (!d->h) {
		op_fail(op, EIO);	/* disconnected: fails as a dead disk does */
	} else if (kind == NBDEV_FLUSH) {
		if (d->info.can_flush)
			issue_part(d, op, kind, NULL, 0, 0, 0);
	} else if (kind == NBDEV_TRIM && !d->info.can_trim) {
		atomic_store(&op->err, EOPNOTSUPP);	/* as BLKDISCARD without discard */
	} else {
		while (len) {
			uint64_t n = len < max ? len : max;

			issue_part(d, op, kind, buf, n, off, flags);
			if (buf)
				buf = (char *)buf + n;
			off += n;
			len -= n;
		}
	}
	/*
	 * The poller looks again when a command could not be sent whole, or
	 * when sending found the connection dead (libnbd has closed its
	 * socket then: the poller may be waiting on a descriptor number that
	 * no longer is, or already is something else's).
	 */
	if (d->h && ((nbd_aio_get_direction(d->h) & LIBNBD_AIO_DIRECTION_WRITE) ||
		     nbd_aio_is_dead(d->h) || nbd_aio_is_closed(d->h)))
		kick(d->wake);
	ls_rwlock_unlock(&d->lock);
	op_put(op);
}

/* ---- synchronous calls ---------------------------------------------------- */

struct sync_wait {
	pthread_mutex_t m;
	pthread_cond_t c;
	bool done;
	int res;
};

static void sync_done(void *priv, int res)
{
	struct sync_wait *s = priv;

	pthread_mutex_lock(&s->m);
	s->res = res;
	s->done = true;
	pthread_cond_signal(&s->c);
	pthread_mutex_unlock(&s->m);
}

int nbdev_sync(struct nbdev *d, enum nbdev_op kind, void *buf, uint64_t len,
	       uint64_t off, unsigned flags)
{
	struct sync_wait s = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0 };

	nbdev_submit(d, kind, buf, len, off, flags, sync_done, &s);
	pthread_mutex_lock(&s.m);
	while (!s.done)
		pthread_cond_wait(&s.c, &s.m);
	pthread_mutex_unlock(&s.m);
	pthread_cond_destroy(&s.c);
	pthread_mutex_destroy(&s.m);
	return s.res;
}

size_t iov_bytes(const struct iovec *iov, int cnt)
{
	size_t n = 0;
	int i;

	for (i = 0; i < cnt; i++)
		n += iov[i].iov_len;
	return n;
}

/*
 * The calling thread's bounce buffer for a transfer of several buffers,
 * kept for its next one (a fresh large buffer each time costs page faults
 * and trims worth as much as the copy).
 */
char *iov_bounce(size_t len)
{
	static __thread char *buf;
	static __thread size_t size;

	if (len > size) {
		size_t n = (len + 65535) & ~(size_t)65535;
		char *b = realloc(buf, n);

		if (!b)
			return NULL;
		buf = b;
		size = n;
	}
	return buf;
}

void iov_gather(char *buf, const struct iovec *iov, int iovcnt, size_t len)
{
	size_t done = 0;
	int i;

	for (i = 0; i < iovcnt && done < len; i++) {
		size_t n = iov[i].iov_len < len - done ? iov[i].iov_len : len - done;

		memcpy(buf + done, iov[i].iov_base, n);
		done += n;
	}
}

void iov_scatter(const struct iovec *iov, int iovcnt, const char *buf, size_t len)
{
	size_t done = 0;
	int i;

	for (i = 0; i < iovcnt && done < len; i++) {
		size_t n = iov[i].iov_len < len - done ? iov[i].iov_len : len - done;

		memcpy(iov[i].iov_base, buf + done, n);
		done += n;
	}
}

/* ---- connection ----------------------------------------------------------- */

static struct nbd_handle *connect_uri(const char *uri, char *err, size_t errlen)
{
	struct nbd_handle *h = nbd_create();

	if (!h) {
		snprintf(err, errlen, "%s", nbd_get_error() ? nbd_get_error() : "out of memory");
		return NULL;
	}
	nbd_set_handle_name(h, "wbcfs");
	if (nbd_connect_uri(h, uri) == -1) {
		const char *e = nbd_get_error();
		size_t n;

		snprintf(err, errlen, "%s", e ? e : "connection failed");
		n = strcspn(err, "\n");		/* one line */
		err[n] = '\0';
		nbd_close(h);
		return NULL;
	}
	return h;
}

static void read_info(struct nbd_handle *h, struct nbdev_info *in)
{
	int64_t v;

	in->size = (uint64_t)nbd_get_size(h);
	v = nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM);
	in->block_min = v > 0 ? (uint32_t)v : 0;
	v = nbd_get_block_size(h, LIBNBD_SIZE_PREFERRED);
	in->block_pref = v > 0 ? (uint32_t)v : 0;
	v = nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM);
	in->block_max = v > 0 ? (uint32_t)v : 0;
	in->max_request = in->block_max && in->block_max < NBD_REQUEST_MAX ? in->block_max
									    : NBD_REQUEST_MAX;
	in->max_request &= ~4095u;
	if (!in->max_request)
		in->max_request = 4096;
	in->can_flush = nbd_can_flush(h) == 1;
	in->can_fua = nbd_can_fua(h) == 1;
	in->can_trim = nbd_can_trim(h) == 1;
	in->can_multi_conn = nbd_can_multi_conn(h) == 1;
	in->read_only = nbd_is_read_only(h) == 1;
}

/* The dead handle goes; every command still on it ends with EIO. Poller only. */
static void conn_lost(struct nbdev *d, const char *why)
{
	struct nbd_handle *h = d->h;
	const char *e = why ? why : nbd_get_error();

	snprintf(d->last_error, sizeof(d->last_error), "%s", e && *e ? e : "connection closed");
	d->last_error[strcspn(d->last_error, "\n")] = '\0';
	ls_rwlock_wrlock(&d->lock, &lc_nbdev_lock_w);
	d->h = NULL;
	atomic_store(&d->connected, false);
	ls_rwlock_unlock(&d->lock);
	nbd_close(h);	/* frees the commands in flight: they fail */
	if (d->retry_s)
		fprintf(stderr, "wbcfs: %s: NBD connection lost (%s); its writes are kept and"
			" retried; reconnecting every %u s\n", d->uri, d->last_error, d->retry_s);
	else
		fprintf(stderr, "wbcfs: %s: NBD connection lost (%s); nbd_retry=0: not"
			" reconnecting, device I/O fails from now on\n", d->uri, d->last_error);
}

/* Wait @ms on the wake eventfd (a stop, or nothing). Returns false on stop. */
static bool poller_sleep(struct nbdev *d, int ms)
{
	struct pollfd p = { d->wake, POLLIN, 0 };
	uint64_t v;

	if (poll(&p, 1, ms) > 0 && read(d->wake, &v, sizeof(v)) < 0)
		(void)v;
	return !atomic_load(&d->stop);
}

static void reconnect(struct nbdev *d)
{
	char err[256], said[256] = "";

	while (poller_sleep(d, (int)d->retry_s * 1000)) {
		struct nbd_handle *h = connect_uri(d->uri, err, sizeof(err));
		struct nbdev_info in = {0};

		if (h) {
			read_info(h, &in);
			if (in.size < d->info.size || (in.read_only && !d->info.read_only) ||
			    in.block_min > 4096 || in.max_request < d->info.max_request) {
				snprintf(err, sizeof(err), "export came back %s",
					 in.read_only ? "read-only" :
					 in.size < d->info.size ? "smaller" :
					 "with block sizes it did not have");
				nbd_close(h);
				h = NULL;
			}
		}
		if (!h) {
			/* said once per reason: a refused connection, then an
			 * export come back smaller, are two lines */
			if (strcmp(said, err))
				fprintf(stderr, "wbcfs: %s: NBD reconnect failed (%s); still"
					" trying every %u s\n", d->uri, err, d->retry_s);
			snprintf(said, sizeof(said), "%s", err);
			continue;
		}
		ls_rwlock_wrlock(&d->lock, &lc_nbdev_lock_w);
		d->h = h;
		d->info.can_flush = in.can_flush;
		d->info.can_fua = in.can_fua;
		d->info.can_trim = in.can_trim;
		atomic_store(&d->connected, true);
		ls_rwlock_unlock(&d->lock);
		atomic_fetch_add(&d->reconnects, 1);
		fprintf(stderr, "wbcfs: %s: NBD connection back; retrying the kept writes\n",
			d->uri);
		return;
	}
}

static void *poller_main(void *arg)
{
	struct nbdev *d = arg;

	while (!atomic_load(&d->stop)) {
		struct pollfd p[2];
		unsigned dir;
		uint64_t v;

		if (!d->h) {
			if (d->retry_s)
				reconnect(d);
			else
				poller_sleep(d, -1);
			continue;
		}
		if (atomic_exchange(&d->server_leaving, false)) {
			conn_lost(d, "the server is shutting down");
			continue;
		}
		if (nbd_aio_is_dead(d->h) || nbd_aio_is_closed(d->h)) {
			conn_lost(d, NULL);	/* an issuer found it so */
			continue;
		}
		dir = nbd_aio_get_direction(d->h);
		p[0] = (struct pollfd){ nbd_aio_get_fd(d->h), 0, 0 };
		if (dir & LIBNBD_AIO_DIRECTION_READ)
			p[0].events |= POLLIN;
		if (dir & LIBNBD_AIO_DIRECTION_WRITE)
			p[0].events |= POLLOUT;
		p[1] = (struct pollfd){ d->wake, POLLIN, 0 };
		if (p[0].fd < 0) {
			conn_lost(d, NULL);
			continue;
		}
		if (poll(p, 2, d->timeout_s ? 1000 : -1) < 0)
			continue;
		if ((p[1].revents & POLLIN) && read(d->wake, &v, sizeof(v)) < 0)
			(void)v;
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
			nbd_aio_notify_read(d->h);
		if ((p[0].revents & POLLOUT) && !nbd_aio_is_dead(d->h))
			nbd_aio_notify_write(d->h);
		if (nbd_aio_is_dead(d->h) || nbd_aio_is_closed(d->h)) {
			conn_lost(d, NULL);
		} else if (d->timeout_s && atomic_load(&d->inflight) &&
			   now_ms() - atomic_load(&d->progress_ms) > d->timeout_s * 1000ull) {
			char why[64];

			/* a server that stopped answering: what is in flight fails */
			snprintf(why, sizeof(why), "no reply for %u s", d->timeout_s);
			conn_lost(d, why);
		}
	}
	return NULL;
}

static int nbdev_register(struct nbdev *d)
{
	unsigned i;

	for (i = 0; i < NBDEV_MAX; i++) {
		struct nbdev *none = NULL;

		if (atomic_compare_exchange_strong(&nbdevs[i], &none, d)) {
			atomic_fetch_add_explicit(&nr_nbdevs, 1, memory_order_release);
			snprintf(d->name, sizeof(d->name), "nbd%u", i);
			return 0;
		}
	}
	return -EMFILE;
}

static void nbdev_unregister(struct nbdev *d)
{
	unsigned i;

	for (i = 0; i < NBDEV_MAX; i++) {
		struct nbdev *me = d;

		if (atomic_compare_exchange_strong(&nbdevs[i], &me, NULL)) {
			atomic_fetch_sub(&nr_nbdevs, 1);
			return;
		}
	}
}

static void nbdev_free(struct nbdev *d)
{
	if (d->fd >= 0)
		close(d->fd);
	if (d->wake >= 0)
		close(d->wake);
	pthread_rwlock_destroy(&d->lock);
	free(d->uri);
	free(d);
}

int nbdev_open(struct nbdev **out, const char *uri, bool ro, unsigned retry_s,
	       unsigned timeout_s, FILE *msg)
{
	struct nbdev *d = calloc(1, sizeof(*d));
	pthread_rwlockattr_t attr;
	char err[256];
	int ret;

	if (!d)
		return -ENOMEM;
	d->fd = eventfd(0, EFD_CLOEXEC);
	d->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	d->uri = strdup(uri);
	d->retry_s = retry_s;
	d->timeout_s = timeout_s;
	pthread_rwlockattr_init(&attr);
	/* a reconnect must not wait behind a stream of failing issuers */
	pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&d->lock, &attr);
	pthread_rwlockattr_destroy(&attr);
	if (d->fd < 0 || d->wake < 0 || !d->uri) {
		nbdev_free(d);
		return -ENOMEM;
	}
	d->h = connect_uri(uri, err, sizeof(err));
	if (!d->h) {
		fprintf(msg, "wbcfs: %s: cannot connect to the NBD server: %s\n", uri, err);
		nbdev_free(d);
		return -ECONNREFUSED;
	}
	read_info(d->h, &d->info);
	if (d->info.read_only && !ro) {
		fprintf(msg, "wbcfs: %s: the NBD export is read-only; mount with -o ro\n", uri);
		ret = -EROFS;
		goto fail;
	}
	if (!d->info.size) {
		fprintf(msg, "wbcfs: %s: the NBD export is empty\n", uri);
		ret = -EINVAL;
		goto fail;
	}
	/* libnbd refuses, before sending, requests not aligned to it */
	if (d->info.block_min > 4096) {
		fprintf(msg, "wbcfs: %s: the NBD export's minimum block size is %u bytes;"
			" wbcfs reads and writes 4096-byte blocks\n", uri, d->info.block_min);
		ret = -EINVAL;
		goto fail;
	}
	atomic_store(&d->connected, true);
	ret = nbdev_register(d);
	if (ret) {
		fprintf(msg, "wbcfs: %s: too many NBD devices in one daemon\n", uri);
		goto fail;
	}
	ret = -pthread_create(&d->poller, NULL, poller_main, d);
	if (ret) {
		nbdev_unregister(d);
		fprintf(msg, "wbcfs: %s: cannot start the NBD poller: %s\n", uri, strerror(-ret));
		goto fail;
	}
	*out = d;
	return 0;
fail:
	nbd_close(d->h);
	nbdev_free(d);
	return ret;
}

void nbdev_close(struct nbdev *d)
{
	if (!d)
		return;
	atomic_store(&d->stop, true);
	kick(d->wake);
	pthread_join(d->poller, NULL);
	nbdev_unregister(d);
	if (d->h) {
		/* NBD_CMD_DISC once nothing is in flight, then wait for the close */
		if (nbd_shutdown(d->h, 0) == 0) {
			int i;

			for (i = 0; i < 50 && !nbd_aio_is_closed(d->h) && !nbd_aio_is_dead(d->h);
			     i++)
				if (nbd_poll(d->h, 100) == -1)
					break;
		}
		nbd_close(d->h);
	}
	nbdev_free(d);
}

int nbdev_show(const struct nbdev *d, char *buf, size_t size)
{
	const struct nbdev_info *in = &d->info;
	int n;

	n = snprintf(buf, size,
		     "name %s\nuri %s\nstate %s\nsize %llu\nblock_min %u\nblock_preferred %u\n"
		     "block_max %u\nmax_request %u\ncan_flush %d\ncan_fua %d\ncan_trim %d\n"
		     "can_multi_conn %d\nread_only %d\nretry_s %u\ntimeout_s %u\n"
		     "inflight %u\nreconnects %lu\n"
		     "requests %lu\nfailed %lu\n",
		     d->name, d->uri, atomic_load(&d->connected) ? "connected" : "disconnected",
		     (unsigned long long)in->size, in->block_min, in->block_pref, in->block_max,
		     in->max_request, in->can_flush, in->can_fua, in->can_trim,
		     in->can_multi_conn, in->read_only, d->retry_s, d->timeout_s,
		     atomic_load(&d->inflight),
		     atomic_load(&d->reconnects), atomic_load(&d->requests),
		     atomic_load(&d->failed));
	return n < 0 ? 0 : (size_t)n >= size ? (int)size - 1 : n;
}
