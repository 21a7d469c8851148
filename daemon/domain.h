/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A cache domain: one daemon, one page cache (zones, reclaim, the global
 * dirty limits and the throttle domain), and one or more devices, each its
 * own FUSE mount, its own struct wbfs and its own bdi. `-o domain=NAME`
 * starts a domain or joins the running one over a unix socket
 * (/run/wbcfs/NAME.sock); without it a mount is a domain of its own.
 */
#ifndef WBCFS_DOMAIN_H
#define WBCFS_DOMAIN_H

#include <stdio.h>
#include "wbcfs/cache.h"
#include "wbcfs/flusher/pdflush.h"
#include "wbcfs/ext4/options.h"

struct wbfs;
struct wbfs_domain;

#define DOMAIN_RUN_DIR "/run/wbcfs"

/* domain_join's results besides 0 (joined) */
#define DOMAIN_JOIN_REFUSED 1	/* the daemon said no; its words were printed */
#define DOMAIN_JOIN_START 2	/* nobody runs it: start it (*lock_fd is held) */

/**
 * Hand @dev and @mnt with the -o strings @optv[0..@optc) to the daemon
 * running domain @name and wait until it has mounted them (its messages
 * go to our standard error). Returns 0, DOMAIN_JOIN_REFUSED, or
 * DOMAIN_JOIN_START with the domain's lock held in *@lock_fd: the caller
 * becomes its daemon and keeps the lock for its whole life.
 */
int domain_join(const char *name, const char *dev, const char *mnt, char *const *optv, int optc,
		int *lock_fd);

/**
 * The domain that @o names ("" : unnamed) with @lock_fd from domain_join
 * (-1 when unnamed). Before any thread starts. NULL with a message.
 */
struct wbfs_domain *domain_create(const struct wbcfs_options *o, int lock_fd);
/** Open @dev, mount it on @mnt and serve it from its own thread. 0 or -errno. */
int domain_mount(struct wbfs_domain *d, const char *dev, const char *mnt,
		 const struct wbcfs_options *o);
/**
 * Serve: take joiners (named domains), stop every mount on SIGTERM,
 * SIGINT or SIGHUP, and return when the last mount is gone.
 */
void domain_run(struct wbfs_domain *d);
/** Free the domain and its cache. Returns the exit status: 0, or 1 when
 * a mount's unmount lost data or could not write its metadata. */
int domain_destroy(struct wbfs_domain *d);

/*
 * For ext4.c: the domain's cache, and with flusher_model=pdflush its pool
 * of flusher threads (else NULL), created by the first mount with its
 * options (a joiner's domain options equal them: join_mount checked).
 * The bdi of @w is attached once created and detached before it is
 * destroyed, so the domain's cache-wide wakeups reach every device.
 */
int domain_cache(struct wbfs_domain *d, const struct wbcfs_options *o, const char *dev,
		 struct cache **out, struct flusher_pool **pool);
void domain_attach(struct wbfs_domain *d, struct wbfs *w);
/** The domain's memory watcher (its vmstat counters); NULL with mem_watch=0. */
struct memwatch *domain_memwatch(struct wbfs_domain *d);
void domain_detach(struct wbfs_domain *d, struct wbfs *w);

/** For /.wbcfs/domain: name, devices and mountpoints. */
int domain_show(struct wbfs_domain *d, char *buf, size_t size);

/*
 * Where a mount's messages go: standard error, or, while the daemon mounts
 * a joiner's device, the joiner's standard error as well.
 */
FILE *wbfs_msg(void);

#endif
