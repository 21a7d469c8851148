/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Network block devices: an ext4 served over NBD (nbd://, nbd+unix://, any
 * libnbd URI), reached through libnbd's asynchronous API with no kernel
 * nbd module. One connection per device, driven by a poller thread of its
 * own; any thread may issue commands on it, and each command completes
 * through a callback (from the poller thread, or at once on failure).
 *
 * The rest of wbcfs names a device by a file descriptor. An NBD device has
 * one too: an eventfd standing for it, registered here, on which a stray
 * pread/pwrite/fdatasync fails (ESPIPE/EINVAL) rather than reaching
 * anything. The blk_* calls are what every synchronous device access uses:
 * they go to the NBD device an fd stands for, or to the fd itself.
 *
 * When the connection is lost, every command in flight and every new one
 * fails with EIO (the writeback keeps its pages dirty and retries them with
 * backoff, as for a failing disk); the poller reconnects every nbd_retry
 * seconds, and the export must come back at least as large as before.
 */
#ifndef WBCFS_NBDEV_H
#define WBCFS_NBDEV_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/uio.h>

struct nbdev;

struct nbdev_info {
	uint64_t size;			/* bytes, as offered at the first connection */
	uint32_t block_min, block_pref, block_max;	/* the server's; 0 = not given */
	uint32_t max_request;		/* bytes: larger transfers are split */
	bool can_flush, can_fua, can_trim, can_multi_conn, read_only;
};

enum nbdev_op {
	NBDEV_READ,
	NBDEV_WRITE,
	NBDEV_FLUSH,
	NBDEV_TRIM,
};

#define NBDEV_FUA	1u	/* NBDEV_WRITE: durable when it completes */

/** Whether @dev names an NBD export (an NBD URI) rather than a path. */
bool nbdev_is_uri(const char *dev);

/**
 * Connect to @uri and read what the export offers. Errors are one line on
 * @msg naming @uri. @retry_s: reconnect interval once connected (0: never).
 * @timeout_s: a connection that has commands in flight and no reply for
 * this long is taken for dead (0: wait for ever).
 * Returns 0 or -errno (-ECONNREFUSED for a server that cannot be reached
 * or refuses the export, -EROFS for a read-only export without @ro).
 */
int nbdev_open(struct nbdev **out, const char *uri, bool ro, unsigned retry_s,
	       unsigned timeout_s, FILE *msg);
/** Disconnect cleanly and free; nothing may be in flight. */
void nbdev_close(struct nbdev *d);
/** The descriptor that stands for @d in fd-keyed calls (blk_*, io_req.fd). */
int nbdev_fd(const struct nbdev *d);
/** The NBD device @fd stands for, or NULL for an ordinary descriptor. */
struct nbdev *nbdev_of_fd(int fd);
const struct nbdev_info *nbdev_info(const struct nbdev *d);
/** "nbdN" (N: its slot among the daemon's NBD devices): its bdi's name, as in traces. */
const char *nbdev_name(const struct nbdev *d);
bool nbdev_connected(const struct nbdev *d);

/**
 * Issue one transfer (split at max_request), flush or trim. @done runs once,
 * with 0 or -errno, from the poller thread or (on failure to issue) before
 * this returns; it must not call nbdev functions. @buf stays valid until then.
 */
void nbdev_submit(struct nbdev *d, enum nbdev_op op, void *buf, uint64_t len, uint64_t off,
		  unsigned flags, void (*done)(void *priv, int res), void *priv);

/** The control file text (/.wbcfs/nbd): "key value" lines. Returns the length. */
int nbdev_show(const struct nbdev *d, char *buf, size_t size);

/* NBD has no vectored transfers: a request of several buffers goes through one. */
/** Copy the first @len bytes held by @iov into @buf. */
void iov_gather(char *buf, const struct iovec *iov, int iovcnt, size_t len);
/** Copy @len bytes of @buf out into @iov's buffers, in order. */
void iov_scatter(const struct iovec *iov, int iovcnt, const char *buf, size_t len);

#endif
