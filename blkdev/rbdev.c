// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * RBD images through librbd (see rbdev.h).
 *
 * librbd is thread-safe on one image handle: any thread issues requests
 * (rbd_aio_*), and each completes on librbd's finisher thread through
 * aio_done, which hands the result to the caller's callback.
 *
 * Connecting. librados waits 300 s for an unreachable mon by default and
 * retries a refused key for as long: client_mount_timeout and
 * rados_mon_op_timeout bound the connection, the auth and the image's
 * open; rados_osd_op_timeout (rbd_timeout) bounds each request after.
 *
 * rbd_cache=false: wbcfs's page cache is the cache. librbd's would be a
 * second copy of every dirty page, written back on its own schedule and
 * acknowledged before it reaches an OSD, so the flushers' queue depth,
 * the dirty throttle and the journal's ordering (a commit block after its
 * data, a flush between) would be measured against a cache in between.
 *
 * The lock. With the image's exclusive-lock feature, rbd_lock_acquire in
 * exclusive mode takes it for good: librbd then refuses another client's
 * request for it rather than handing it over. Another client can only
 * take it by breaking it, which blocklists this one: its requests fail
 * with EBLOCKLISTED (ESHUTDOWN), and from the first such failure this
 * device fails every write before it is issued.
 *
 * An unreachable cluster. With every OSD that holds a placement group gone,
 * each request to it fails after rbd_timeout (ETIMEDOUT), but only once it
 * has waited that long, and the flushers write a file in batches, each
 * drained before the next is mapped: an fsync of many batches would wait
 * out the timeout once per batch (and librbd's object-map updates, one
 * object at a time, stretch a batch to several), hours for a large file
 * with the default 30 s. So the first timeout marks the device unreachable:
 * from then on every request fails at once with EIO, as a failed one
 * would, and a prober thread reads the image's first block, once a second
 * at most, until the cluster answers; then requests go to librbd again.
 * The data stay dirty and are written then (Device errors).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "blkdev_i.h"

#ifdef WBCFS_HAVE_RBD
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "wbcfs/lib/clock.h"

#define RBDEV_MAX	64
/* librados' EBLOCKLISTED: a client blocklisted by the cluster */
#define EBLOCKLISTED	ESHUTDOWN

struct rbdev {
	char *spec;			/* as given: rbd:POOL/IMAGE[@SNAP] */
	char name[16];			/* "rbdN" */
	int fd;				/* eventfd standing for the device */
	rados_t cluster;
	rados_ioctx_t io;
	rbd_image_t image;
	uint64_t size;
	bool ro;
	bool locked;			/* we hold the exclusive lock */
	atomic_bool lost;		/* blocklisted: writes fail before librbd */
	atomic_ulong requests, failed;
	/* an unreachable cluster: requests fail at once until the prober's read answers */
	unsigned timeout_s;		/* rbd_timeout; 0: no timeout, no prober */
	atomic_bool down;		/* a request timed out, no answer since */
	_Atomic uint64_t down_since_ms;
	atomic_ulong timeouts;		/* requests that failed with ETIMEDOUT */
	int probe_fd;			/* eventfd: wakes the prober (down, or closing) */
	atomic_bool closing;
	pthread_t prober;
	bool prober_started;
};

struct rbd_aio {
	struct rbdev *d;
	enum rbdev_op op;
	void (*done)(void *priv, int res);
	void *priv;
	size_t len;			/* bytes to transfer (a read: cut at the end) */
	struct iovec *clip;		/* a read cut at the image's end: its iovec */
};

static _Atomic(struct rbdev *) rbdevs[RBDEV_MAX];
static atomic_uint nr_rbdevs;

int rbdev_fd(const struct rbdev *d)
{
	return d->fd;
}

struct rbdev *rbdev_of_fd(int fd)
{
	unsigned i;

	if (!atomic_load_explicit(&nr_rbdevs, memory_order_acquire))
		return NULL;
	for (i = 0; i < RBDEV_MAX; i++) {
		struct rbdev *d = atomic_load_explicit(&rbdevs[i], memory_order_acquire);

		if (d && d->fd == fd)
			return d;
	}
	return NULL;
}

uint64_t rbdev_size(const struct rbdev *d)
{
	return d->size;
}

bool rbdev_read_only(const struct rbdev *d)
{
	return d->ro;
}

const char *rbdev_name(const struct rbdev *d)
{
	return d->name;
}

bool rbdev_lost(const struct rbdev *d)
{
	return atomic_load(&d->lost);
}

int rbdev_show(const struct rbdev *d, char *buf, size_t size)
{
	int n = snprintf(buf, size, "name %s\nimage %s\nsize %llu\nread_only %d\nlock %s\n"
			 "requests %lu\nfailed %lu\nreachable %d\ntimeouts %lu\n", d->name,
			 d->spec, (unsigned long long)d->size, d->ro,
			 atomic_load(&d->lost) ? "lost" : d->locked ? "held" : "none",
			 atomic_load(&d->requests), atomic_load(&d->failed),
			 !atomic_load(&d->down), atomic_load(&d->timeouts));

	return n < 0 ? 0 : (size_t)n >= size ? (int)size - 1 : n;
}

/* ---- requests ------------------------------------------------------------ */

/* The first sign of a lost lock is said once; nothing is written after. */
static void lock_lost(struct rbdev *d, int err)
{
	if (atomic_exchange(&d->lost, true))
		return;
	fprintf(stderr, "wbcfs: %s: exclusive lock lost (%s: another client broke it and "
		"blocklisted this one); nothing more is written, unmount and mount again\n",
		d->spec, strerror(err));
}

static void wake_prober(struct rbdev *d)
{
	uint64_t one = 1;
	ssize_t n = write(d->probe_fd, &one, sizeof(one));

	(void)n;	/* a counter already set wakes it as well */
}

/* A request timed out: unreachable from now on, said once per outage. */
static void cluster_down(struct rbdev *d, int err)
{
	atomic_fetch_add(&d->timeouts, 1);
	if (!d->prober_started || atomic_exchange(&d->down, true))
		return;
	atomic_store(&d->down_since_ms, clock_now_ms());
	fprintf(stderr, "wbcfs: %s: no answer from the cluster within %u s (%s): every request "
		"fails at once with EIO until it answers again\n", d->spec, d->timeout_s,
		strerror(err));
	wake_prober(d);
}

/*
 * While the cluster is unreachable: read the image's first block (an OSD
 * op, under rbd_timeout like any request), at most once a second, until
 * an OSD answers anything but a timeout.
 */
static void *prober_main(void *arg)
{
	struct rbdev *d = arg;
	struct pollfd pfd = { .fd = d->probe_fd, .events = POLLIN };
	char block[4096];
	uint64_t v;
	ssize_t n;

	while (!atomic_load(&d->closing)) {
		poll(&pfd, 1, -1);
		n = read(d->probe_fd, &v, sizeof(v));	/* non-blocking: consumes the wake-up */
		(void)n;
		while (atomic_load(&d->down) && !atomic_load(&d->closing)) {
			uint64_t t0 = clock_now_ms();
			ssize_t r = rbd_read(d->image, 0, sizeof(block), block);

			if (r != -ETIMEDOUT) {
				atomic_store(&d->down, false);
				fprintf(stderr, "wbcfs: %s: the cluster answers again, after %llu s "
					"without: requests go to it again\n", d->spec,
					(unsigned long long)(clock_now_ms() -
							     atomic_load(&d->down_since_ms)) / 1000);
				break;
			}
			/* a probe that failed at once waits out the second */
			if (clock_now_ms() - t0 < 1000 &&
			    poll(&pfd, 1, (int)(1000 - (clock_now_ms() - t0))) > 0) {
				n = read(d->probe_fd, &v, sizeof(v));
				(void)n;
			}
		}
	}
	return NULL;
}

/*
 * A request's end, on librbd's finisher thread. As a block device reports
 * errors: ENOSPC as itself, everything else (an OSD's EIO, a timeout, the
 * blocklist) as EIO.
 */
static void aio_done(rbd_completion_t c, void *arg)
{
	struct rbd_aio *a = arg;
	ssize_t r = rbd_aio_get_return_value(c);

	rbd_aio_release(c);
	atomic_fetch_add(&a->d->requests, 1);
	if (r < 0) {
		atomic_fetch_add(&a->d->failed, 1);
		if (r == -ETIMEDOUT)
			cluster_down(a->d, (int)-r);
		if ((r == -EBLOCKLISTED || r == -EROFS) && a->op != RBDEV_READ && !a->d->ro)
			lock_lost(a->d, (int)-r);
		r = r == -ENOSPC ? -ENOSPC : -EIO;
	} else {
		r = a->op == RBDEV_READ || a->op == RBDEV_WRITE ? (ssize_t)a->len : 0;
	}
	a->done(a->priv, (int)r);
	free(a->clip);
	free(a);
}

/* @iov cut to @len bytes, in a new array. NULL: no memory. */
static struct iovec *iov_clip(const struct iovec *iov, int iovcnt, size_t len, int *cnt)
{
	struct iovec *v = malloc(sizeof(*v) * (size_t)iovcnt);
	int i;

	if (!v)
		return NULL;
	for (i = 0; i < iovcnt && len; i++) {
		v[i] = iov[i];
		if (v[i].iov_len > len)
			v[i].iov_len = len;
		len -= v[i].iov_len;
	}
	*cnt = i;
	return v;
}

void rbdev_submit(struct rbdev *d, enum rbdev_op op, const struct iovec *iov, int iovcnt,
		  uint64_t off, uint64_t len, void (*done)(void *priv, int res), void *priv)
{
	struct rbd_aio *a = calloc(1, sizeof(*a));
	rbd_completion_t c;
	int ret;

	if (!a) {
		done(priv, -ENOMEM);
		return;
	}
	if (op != RBDEV_READ && (d->ro || atomic_load(&d->lost))) {
		free(a);
		done(priv, d->ro ? -EROFS : -EIO);
		return;
	}
	if (atomic_load(&d->down)) {
		/* unreachable: as a request that timed out, without the wait */
		free(a);
		atomic_fetch_add(&d->requests, 1);
		atomic_fetch_add(&d->failed, 1);
		done(priv, -EIO);
		return;
	}
	if (op == RBDEV_READ && off + len > d->size) {
		/* as at a device's end: what is there */
		len = off >= d->size ? 0 : d->size - off;
		if (!len) {
			free(a);
			done(priv, 0);
			return;
		}
		a->clip = iov_clip(iov, iovcnt, len, &iovcnt);
		if (!a->clip) {
			free(a);
			done(priv, -ENOMEM);
			return;
		}
		iov = a->clip;
	}
	a->d = d;
	a->op = op;
	a->done = done;
	a->priv = priv;
	a->len = len;
	ret = rbd_aio_create_completion(a, aio_done, &c);
	if (ret < 0) {
		free(a->clip);
		free(a);
		done(priv, ret);
		return;
	}
	switch (op) {
	case RBDEV_READ:
		ret = rbd_aio_readv(d->image, iov, iovcnt, off, c);
		break;
	case RBDEV_WRITE:
		ret = rbd_aio_writev(d->image, iov, iovcnt, off, c);
		break;
	case RBDEV_FLUSH:
		ret = rbd_aio_flush(d->image, c);
		break;
	default:
		ret = rbd_aio_discard(d->image, off, len, c);
		break;
	}
	if (ret < 0) {
		/* not issued: aio_done will not run */
		rbd_aio_release(c);
		free(a->clip);
		free(a);
		done(priv, ret == -ENOSPC ? ret : -EIO);
	}
}

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

int rbdev_sync(struct rbdev *d, enum rbdev_op op, const struct iovec *iov, int iovcnt,
	       uint64_t off, uint64_t len)
{
	struct sync_wait s = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0 };

	rbdev_submit(d, op, iov, iovcnt, off, len, sync_done, &s);
	pthread_mutex_lock(&s.m);
	while (!s.done)
		pthread_cond_wait(&s.c, &s.m);
	pthread_mutex_unlock(&s.m);
	pthread_cond_destroy(&s.c);
	pthread_mutex_destroy(&s.m);
	return s.res;
}

/* ---- open and close ------------------------------------------------------- */

static int rbdev_register(struct rbdev *d)
{
	unsigned i;

	for (i = 0; i < RBDEV_MAX; i++) {
		struct rbdev *none = NULL;

		if (atomic_compare_exchange_strong(&rbdevs[i], &none, d)) {
			atomic_fetch_add_explicit(&nr_rbdevs, 1, memory_order_release);
			snprintf(d->name, sizeof(d->name), "rbd%u", i);
			return 0;
		}
	}
	return -EMFILE;
}

static void rbdev_unregister(struct rbdev *d)
{
	unsigned i;

	for (i = 0; i < RBDEV_MAX; i++) {
		struct rbdev *me = d;

		if (atomic_compare_exchange_strong(&rbdevs[i], &me, NULL)) {
			atomic_fetch_sub(&nr_rbdevs, 1);
			return;
		}
	}
}

/* Split rbd:POOL/IMAGE[@SNAP] in @buf. Returns 0 or -EINVAL. */
static int parse_spec(const char *spec, char *buf, size_t size, char **pool, char **image,
		      char **snap)
{
	char *slash, *at;

	if (snprintf(buf, size, "%s", spec + 4) >= (int)size || !buf[0])
		return -EINVAL;
	slash = strchr(buf, '/');
	if (slash) {
		*slash = '\0';
		*pool = buf;
		*image = slash + 1;
	} else {
		*pool = "rbd";
		*image = buf;
	}
	at = strchr(*image, '@');
	*snap = NULL;
	if (at) {
		*at = '\0';
		*snap = at + 1;
	}
	if (!**pool || !**image || (*snap && !**snap) || strchr(*image, '/'))
		return -EINVAL;
	return 0;
}

static int conf_set(rados_t r, const char *key, const char *val, const char *spec, FILE *msg)
{
	int ret = rados_conf_set(r, key, val);

	if (ret < 0)
		fprintf(msg, "wbcfs: %s: ceph option %s=%s: %s\n", spec, key, val, strerror(-ret));
	return ret;
}

/* The one line a failed rados_connect gets: the cause, in words. */
static void say_connect_error(const struct rbdev *d, const struct rbdev_conf *c, int ret,
			      const char *conf, FILE *msg)
{
	const char *id = c->id && *c->id ? c->id : "admin";
	const char *kr = c->keyring && *c->keyring ? c->keyring : NULL;
	char mons[256] = "";

	rados_conf_get(d->cluster, "mon_host", mons, sizeof(mons));
	if (ret == -ETIMEDOUT)
		fprintf(msg, "wbcfs: %s: no Ceph monitor answered within %u s (mon_host %s, "
			"conf %s)\n", d->spec, c->connect_timeout_s, mons[0] ? mons : "unset",
			conf ? conf : "default");
	else if (ret == -EACCES || ret == -EPERM)
		fprintf(msg, "wbcfs: %s: the monitors refused client.%s's key (wrong keyring%s%s, "
			"or no such client)\n", d->spec, id, kr ? " " : "", kr ? kr : "");
	else if (ret == -ENOENT)
		fprintf(msg, "wbcfs: %s: no keyring for client.%s (%s)\n", d->spec, id,
			kr ? kr : "none in the conf; give ceph_keyring=");
	else if (ret == -EIO)
		/* what a key that does not decode gives */
		fprintf(msg, "wbcfs: %s: cannot authenticate as client.%s: its key in the "
			"keyring%s%s is unusable\n", d->spec, id, kr ? " " : "", kr ? kr : "");
	else
		fprintf(msg, "wbcfs: %s: cannot connect to the Ceph cluster (mon_host %s): %s\n",
			d->spec, mons[0] ? mons : "unset", strerror(-ret));
}

/*
 * The lock's holder as librbd names it for rbd_lock_break (its address,
 * "127.0.0.1:0/4048138861"), in @owner; for messages, "client.4131 at
 * 127.0.0.1:0/4048138861" in @who. Returns false when nobody holds it.
 */
static bool lock_holder(struct rbdev *d, char *owner, size_t osize, char *who, size_t wsize)
{
	char tag[64], clients[128], cookies[128], addrs[128];
	size_t tl = sizeof(tag), cl = sizeof(clients), kl = sizeof(cookies), al = sizeof(addrs);
	rbd_lock_mode_t mode;
	char *owners[4];
	size_t n = 4;
	int excl;

	snprintf(owner, osize, "unknown");
	snprintf(who, wsize, "an unknown client");
	if (rbd_lock_get_owners(d->image, &mode, owners, &n) < 0 || !n)
		return false;
	snprintf(owner, osize, "%s", owners[0]);
	rbd_lock_get_owners_cleanup(owners, n);
	/* the client's name beside its address: the lockers list has both */
	if (rbd_list_lockers(d->image, &excl, tag, &tl, clients, &cl, cookies, &kl, addrs,
			     &al) > 0)
		snprintf(who, wsize, "%s at %s", clients, addrs);
	else
		snprintf(who, wsize, "%s", owner);
	return true;
}

/*
 * Take the exclusive lock. Held by another client: refused, naming it,
 * unless @c->break_lock, which blocklists that client (it may be dead or
 * alive: it can write nothing more either way) and takes the lock. The
 * lock's state is librbd's: a mount that fails after this point releases
 * it (rbdev_free).
 */
static int take_lock(struct rbdev *d, const struct rbdev_conf *c, FILE *msg)
{
	char owner[128], who[320];
	uint64_t features = 0;
	int ret;

	if (rbd_get_features(d->image, &features) == 0 &&
	    !(features & RBD_FEATURE_EXCLUSIVE_LOCK)) {
		fprintf(msg, "wbcfs: %s: the image has no exclusive-lock feature: nothing would "
			"keep a second writer out (rbd feature enable IMAGE exclusive-lock), "
			"or mount with -o ro\n", d->spec);
		return -EINVAL;
	}
	/*
	 * Held: refused at once, naming the holder, without break_lock. (Left
	 * to itself, rbd_lock_acquire would wait out a dead holder's watch,
	 * ~30 s, then break its lock unasked.)
	 */
	if (lock_holder(d, owner, sizeof(owner), who, sizeof(who))) {
		if (!c->break_lock) {
			fprintf(msg, "wbcfs: %s: the image is in use: its exclusive lock is held "
				"by %s (if that client is dead, mount with -o break_lock)\n",
				d->spec, who);
			return -EBUSY;
		}
		fprintf(msg, "wbcfs: %s: break_lock: blocklisting %s and taking its lock\n",
			d->spec, who);
		ret = rbd_lock_break(d->image, RBD_LOCK_MODE_EXCLUSIVE, owner);
		if (ret < 0 && ret != -ENOENT) {
			fprintf(msg, "wbcfs: %s: break_lock: cannot break %s's lock: %s\n",
				d->spec, who, strerror(-ret));
			return ret;
		}
	}
	ret = rbd_lock_acquire(d->image, RBD_LOCK_MODE_EXCLUSIVE);
	if (ret < 0) {
		if (lock_holder(d, owner, sizeof(owner), who, sizeof(who))) {
			fprintf(msg, "wbcfs: %s: the image is in use: its exclusive lock is held by "
				"%s (if that client is dead, mount with -o break_lock)\n",
				d->spec, who);
			return -EBUSY;
		}
		fprintf(msg, "wbcfs: %s: cannot take the image's exclusive lock: %s\n",
			d->spec, strerror(-ret));
		return ret;
	}
	d->locked = true;
	return 0;
}

static void rbdev_free(struct rbdev *d)
{
	if (d->prober_started) {
		atomic_store(&d->closing, true);
		wake_prober(d);
		pthread_join(d->prober, NULL);	/* a probe in flight: rbd_timeout at most */
	}
	if (d->probe_fd >= 0)
		close(d->probe_fd);
	if (d->image) {
		if (d->locked)
			rbd_lock_release(d->image);
		rbd_close(d->image);
	}
	if (d->io)
		rados_ioctx_destroy(d->io);
	if (d->cluster)
		rados_shutdown(d->cluster);
	if (d->fd >= 0)
		close(d->fd);
	free(d->spec);
	free(d);
}

int rbdev_open(struct rbdev **out, const char *spec, const struct rbdev_conf *c, FILE *msg)
{
	struct rbdev *d = calloc(1, sizeof(*d));
	char buf[1024], num[24], *pool, *image, *snap;
	const char *conf = c->conf && *c->conf ? c->conf : getenv("CEPH_CONF");
	rbd_image_info_t info;
	int ret;

	if (!d)
		return -ENOMEM;
	d->fd = eventfd(0, EFD_CLOEXEC);
	d->probe_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	d->spec = strdup(spec);
	d->timeout_s = c->timeout_s;
	if (d->fd < 0 || d->probe_fd < 0 || !d->spec) {
		rbdev_free(d);
		return -ENOMEM;
	}
	if (parse_spec(spec, buf, sizeof(buf), &pool, &image, &snap)) {
		fprintf(msg, "wbcfs: %s: not rbd:POOL/IMAGE[@SNAP]\n", spec);
		rbdev_free(d);
		return -EINVAL;
	}
	d->ro = c->ro || snap;
	if (snap && !c->ro) {
		fprintf(msg, "wbcfs: %s: a snapshot is read-only; mount with -o ro\n", spec);
		rbdev_free(d);
		return -EROFS;
	}
	ret = rados_create(&d->cluster, c->id && *c->id ? c->id : NULL);
	if (ret < 0) {
		fprintf(msg, "wbcfs: %s: rados_create: %s\n", spec, strerror(-ret));
		d->cluster = NULL;
		goto fail;
	}
	ret = rados_conf_read_file(d->cluster, conf && *conf ? conf : NULL);
	if (ret < 0) {
		fprintf(msg, "wbcfs: %s: cannot read the Ceph configuration %s: %s\n", spec,
			conf && *conf ? conf : "(default search: /etc/ceph/ceph.conf...)",
			strerror(-ret));
		goto fail;
	}
	/* librados' own messages would go to our stderr, many lines per failure */
	ret = conf_set(d->cluster, "log_to_stderr", "false", spec, msg);
	if (!ret)
		ret = conf_set(d->cluster, "err_to_stderr", "false", spec, msg);
	if (!ret)
		ret = conf_set(d->cluster, "rbd_cache", "false", spec, msg);
	if (!ret && c->keyring && *c->keyring)
		ret = conf_set(d->cluster, "keyring", c->keyring, spec, msg);
	snprintf(num, sizeof(num), "%u", c->connect_timeout_s);
	if (!ret)
		ret = conf_set(d->cluster, "client_mount_timeout", num, spec, msg);
	if (!ret)
		ret = conf_set(d->cluster, "rados_mon_op_timeout", num, spec, msg);
	snprintf(num, sizeof(num), "%u", c->timeout_s);
	if (!ret)
		ret = conf_set(d->cluster, "rados_osd_op_timeout", num, spec, msg);
	if (ret)
		goto fail;
	ret = rados_connect(d->cluster);
	if (ret < 0) {
		say_connect_error(d, c, ret, conf, msg);
		goto fail;
	}
	ret = rados_ioctx_create(d->cluster, pool, &d->io);
	if (ret < 0) {
		d->io = NULL;
		if (ret == -ENOENT)
			fprintf(msg, "wbcfs: %s: no pool %s in the cluster\n", spec, pool);
		else
			fprintf(msg, "wbcfs: %s: pool %s: %s\n", spec, pool, strerror(-ret));
		goto fail;
	}
	if (d->ro)
		ret = rbd_open_read_only(d->io, image, &d->image, snap);
	else
		ret = rbd_open(d->io, image, &d->image, NULL);
	if (ret < 0) {
		d->image = NULL;
		if (ret == -ENOENT)
			fprintf(msg, "wbcfs: %s: no image %s%s%s in pool %s\n", spec, image,
				snap ? "@" : "", snap ? snap : "", pool);
		else
			fprintf(msg, "wbcfs: %s: cannot open the image: %s\n", spec,
				strerror(-ret));
		goto fail;
	}
	ret = rbd_stat(d->image, &info, sizeof(info));
	if (ret < 0) {
		fprintf(msg, "wbcfs: %s: rbd_stat: %s\n", spec, strerror(-ret));
		goto fail;
	}
	d->size = info.size;
	if (!d->size) {
		fprintf(msg, "wbcfs: %s: the image is empty\n", spec);
		ret = -EINVAL;
		goto fail;
	}
	if (!d->ro) {
		ret = take_lock(d, c, msg);
		if (ret)
			goto fail;
	}
	if (d->timeout_s) {
		ret = -pthread_create(&d->prober, NULL, prober_main, d);
		if (ret) {
			fprintf(msg, "wbcfs: %s: cannot start a thread: %s\n", spec, strerror(-ret));
			goto fail;
		}
		d->prober_started = true;
	}
	ret = rbdev_register(d);
	if (ret) {
		fprintf(msg, "wbcfs: %s: too many RBD devices in one daemon\n", spec);
		goto fail;
	}
	*out = d;
	return 0;
fail:
	rbdev_free(d);
	return ret;
}

void rbdev_close(struct rbdev *d)
{
	if (!d)
		return;
	rbdev_unregister(d);
	rbdev_free(d);
}

#else /* !WBCFS_HAVE_RBD */

int rbdev_open(struct rbdev **out, const char *spec, const struct rbdev_conf *c, FILE *msg)
{
	(void)out;
	(void)c;
	fprintf(msg, "wbcfs: %s: this wbcfs was built without librbd (install librbd-dev "
		"and rebuild)\n", spec);
	return -ENOSYS;
}

void rbdev_close(struct rbdev *d)
{
	(void)d;
}

int rbdev_fd(const struct rbdev *d)
{
	(void)d;
	return -1;
}

struct rbdev *rbdev_of_fd(int fd)
{
	(void)fd;
	return NULL;
}

uint64_t rbdev_size(const struct rbdev *d)
{
	(void)d;
	return 0;
}

bool rbdev_read_only(const struct rbdev *d)
{
	(void)d;
	return true;
}

const char *rbdev_name(const struct rbdev *d)
{
	(void)d;
	return "rbd";
}

bool rbdev_lost(const struct rbdev *d)
{
	(void)d;
	return false;
}

int rbdev_show(const struct rbdev *d, char *buf, size_t size)
{
	(void)d;
	return snprintf(buf, size, "%s", "");
}

void rbdev_submit(struct rbdev *d, enum rbdev_op op, const struct iovec *iov, int iovcnt,
		  uint64_t off, uint64_t len, void (*done)(void *priv, int res), void *priv)
{
	(void)d, (void)op, (void)iov, (void)iovcnt, (void)off, (void)len;
	done(priv, -ENOSYS);
}

int rbdev_sync(struct rbdev *d, enum rbdev_op op, const struct iovec *iov, int iovcnt,
	       uint64_t off, uint64_t len)
{
	(void)d, (void)op, (void)iov, (void)iovcnt, (void)off, (void)len;
	return -ENOSYS;
}

#endif /* WBCFS_HAVE_RBD */

bool rbdev_is_spec(const char *dev)
{
	return !strncmp(dev, "rbd:", 4);
}
