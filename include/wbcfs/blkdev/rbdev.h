/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Ceph RBD images (rbd:POOL/IMAGE[@SNAP]) through librbd's asynchronous
 * API, with no kernel rbd module. librbd runs its own threads: requests are
 * issued from any thread and each completes through a callback on one of
 * librbd's threads (engine_rbd.c hands them to the engine's owning thread).
 *
 * As for NBD, the rest of wbcfs names the device by a file descriptor: an
 * eventfd standing for it, registered here, so that the fd-keyed calls
 * (sync.h, io_req.fd) find the image.
 *
 * A read-write open takes the image's exclusive lock and keeps it: ext4 is
 * not a cluster filesystem, a second writer would corrupt it. A client that
 * loses the lock (another one broke it and blocklisted this one) can write
 * nothing more: its writes fail, the loss is reported once, and every
 * later write fails with EIO before it reaches librbd.
 *
 * A request that times out (rbd_timeout) marks the cluster unreachable:
 * every request then fails at once with EIO, until a prober thread's read
 * gets an answer, rather than each waiting out the timeout again.
 *
 * Built only with librbd (meson finds librbd-dev); without it rbdev_open
 * says so and fails with -ENOSYS.
 */
#ifndef WBCFS_RBDEV_H
#define WBCFS_RBDEV_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/uio.h>

struct rbdev;

enum rbdev_op {
	RBDEV_READ,
	RBDEV_WRITE,
	RBDEV_FLUSH,
	RBDEV_DISCARD,
};

struct rbdev_conf {
	const char *conf;		/* ceph.conf; NULL: $CEPH_CONF, then librados' search */
	const char *id;			/* client id without "client."; NULL: admin */
	const char *keyring;		/* NULL: the conf's */
	bool ro;			/* no writes, no lock; a snapshot is always ro */
	bool break_lock;		/* the lock held by a dead client: blocklist it, take it */
	unsigned timeout_s;		/* an OSD op with no reply this long fails; 0 = never */
	unsigned connect_timeout_s;	/* mon unreachable, auth, image open: fail after this */
};

/** Whether @dev names an RBD image ("rbd:...") rather than a path. */
bool rbdev_is_spec(const char *dev);

/**
 * Connect to the cluster, open the image (@spec: rbd:POOL/IMAGE[@SNAP],
 * POOL defaults to "rbd") and, read-write, take its exclusive lock.
 * Errors are one line on @msg naming @spec and the cause. Returns 0 or
 * -errno: -ETIMEDOUT (no mon), -EACCES (refused key), -ENOENT (no pool or
 * image), -EBUSY (the lock is another client's), -EROFS (a snapshot
 * without ro), -ENOSYS (built without librbd).
 */
int rbdev_open(struct rbdev **out, const char *spec, const struct rbdev_conf *c, FILE *msg);
/** Release the lock, close the image, disconnect; nothing may be in flight. */
void rbdev_close(struct rbdev *d);
/** The descriptor that stands for @d in fd-keyed calls (blk_*, io_req.fd). */
int rbdev_fd(const struct rbdev *d);
/** The RBD device @fd stands for, or NULL for any other descriptor. */
struct rbdev *rbdev_of_fd(int fd);
/** Bytes, from rbd_stat at open. */
uint64_t rbdev_size(const struct rbdev *d);
bool rbdev_read_only(const struct rbdev *d);
/** "rbdN" (N: its slot among the daemon's RBD devices): its bdi's name. */
const char *rbdev_name(const struct rbdev *d);
/** The exclusive lock was lost: nothing more is written. */
bool rbdev_lost(const struct rbdev *d);
/**
 * The control file text (/.wbcfs/rbd): "key value" lines: name, image,
 * size, read_only, lock (held, lost, none), requests, failed, reachable
 * (0 while a timeout has marked the cluster unreachable), timeouts.
 * Returns the length.
 */
int rbdev_show(const struct rbdev *d, char *buf, size_t size);

/**
 * Issue one read or write of @len bytes (@iov's), flush or discard. @done
 * runs once with the bytes transferred (0 for a flush or discard) or
 * -errno, from a librbd thread or (on failure to issue) before this
 * returns; it must not call rbdev functions. @iov and its buffers stay
 * valid until then. A read past the image's end reads what is there, as
 * at a device's end: fewer bytes, or 0.
 */
void rbdev_submit(struct rbdev *d, enum rbdev_op op, const struct iovec *iov, int iovcnt,
		  uint64_t off, uint64_t len, void (*done)(void *priv, int res), void *priv);
/** The same, waited for. Returns what @done would have been given. */
int rbdev_sync(struct rbdev *d, enum rbdev_op op, const struct iovec *iov, int iovcnt,
	       uint64_t off, uint64_t len);

#endif
