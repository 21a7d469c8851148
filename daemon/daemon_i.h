/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * daemon/ internals: domains (domain.c) and the control directory (ctl.c).
 *
 * A cache domain: one daemon, one page cache (zones, reclaim, the global
 * dirty limits and the throttle domain), and one or more devices, each its
 * own FUSE mount, its own struct wbfs and its own bdi. `-o domain=NAME`
 * starts a domain or joins the running one over a unix socket
 * (/run/wbcfs/NAME.sock); without it a mount is a domain of its own.
 */
#ifndef WBCFS_DAEMON_DAEMON_I_H
#define WBCFS_DAEMON_DAEMON_I_H

#include <stdio.h>
#include "wbcfs/cache.h"
#include "wbcfs/flusher/pdflush.h"
#include "wbcfs/ext4/options.h"
#include "wbcfs/lib/msg.h"
#include "wbcfs/fuse.h"

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

/** The domain's memory watcher (its vmstat counters); NULL with mem_watch=0. */
struct memwatch *domain_memwatch(struct wbfs_domain *d);

/** For /.wbcfs/domain: name, devices and mountpoints. */
int domain_show(struct wbfs_domain *d, char *buf, size_t size);

/* ctl.c */
#define CTL_INO_BASE (1ULL << 32)
extern const struct fuse_lowlevel_ops ctl_ops;
extern const struct ops_ctl_hooks ctl_hooks;
/** Is @ino one of the control directory's inodes? */
bool ctl_owns(fuse_ino_t ino);
/** Is @name in @parent the control directory itself (root, ctl_name)? */
bool ctl_is_root_name(struct wbfs *w, fuse_ino_t parent, const char *name);
/** -EPERM when @name in @parent is, or is inside, the control directory. */
int ctl_check_name(struct wbfs *w, fuse_ino_t parent, const char *name);
/** Drop the entry the control directory shadows from a snapshot of the root. */
void ctl_hide_in_root(struct wbfs *w, struct dir_snap *snap);
/** At mount: stamp the control files' times, warn if a real entry is shadowed. */
void ctl_mount_check(struct wbfs *w);

#endif
