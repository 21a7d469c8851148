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

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/un.h>
#include "wbcfs/lib/list.h"
#include "wbcfs/lib/lockstat.h"
#include "wbcfs/cache.h"
#include "wbcfs/flusher/pdflush.h"
#include "wbcfs/ext4/options.h"
#include "wbcfs/lib/msg.h"
#include "wbcfs/fuse.h"
#include "wbcfs/daemon/ctl.h"

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

/* ---- domain.c and domain_join.c ---------------------------------------- */

/* One device of the domain. */
struct dmount {
	struct list_head link;		/* domain lock: on mounts */
	struct wbfs_domain *d;
	struct wbfs *w;
	struct fuse_session *se;
	struct fuse_args args;
	char dev[PATH_MAX], mnt[PATH_MAX];
	dev_t id_dev;			/* constant: what the device is (block device */
	ino_t id_ino;			/* number, or the image file's dev and inode) */
	pthread_t thread;
	bool serving;			/* domain lock: thread started */
	bool stopping;			/* domain lock: a signal asked it to end */
};

extern struct lock_class lc_domain_lock;	/* wbfs_domain->lock */

struct wbfs_domain {
	char name[OPTIONS_DOMAIN_MAX + 1];	/* constant: "" for a mount of its own */
	struct wbcfs_options opts;	/* constant: the first mount's (domain options) */
	struct cache *cache;		/* lock: created by the first mount */
	struct flusher_pool *pool;	/* lock: with the cache (flusher_model=pdflush) */
	struct memwatch *memwatch;	/* lock: at the first mount up (mem_watch=1) */
	bool mem_started;		/* lock: oom_score_adj and the watcher done */
	pthread_mutex_t lock;		/* protects: cache creation, mounts, nr_mounts,
					 * stopping, closing, status */
	pthread_cond_t cond;		/* lock: nr_mounts dropped */
	struct list_head mounts;	/* lock: serving or being mounted */
	unsigned nr_mounts;		/* lock: mounts, and mounts being set up */
	bool stopping;			/* lock: a signal came: no new mounts */
	bool closing;			/* lock: the last mount is gone */
	int status;			/* lock: 1 when an unmount lost data */
	pthread_rwlock_t bdis_lock;	/* protects: bdis (cache wakeups read it) */
	struct wbfs **bdis;		/* bdis_lock: the devices with a bdi */
	unsigned nr_bdis, cap_bdis;	/* bdis_lock */
	int lock_fd, listen_fd;		/* constant: -1 when unnamed */
	char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	pthread_t server, sig_thread;
	bool have_server, have_sig_thread;
};

/* domain_join.c: the daemon's side of the socket, for domain_create */
/** The signal thread: ask every serving mount to end, and keep nudging until they have. */
void *domain_sig_thread(void *arg);
/** The server thread: accept joiners on d->listen_fd and mount what they send. */
void *domain_server_thread(void *arg);
/** DOMAIN_RUN_DIR/@name.@ext into @out: 0, or -ENAMETOOLONG. */
int domain_sock_path(const char *name, const char *ext, char *out, size_t size);
/** Listen on @d's socket (d->sock_path, d->listen_fd). 0 or -errno. */
int domain_listen_on(struct wbfs_domain *d);

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

/* ctl_stats.c: the statistics files' text, generated at open for ctl.c */
/* Each appends its file's text to @b. Returns 0 or -ENOMEM. */
int ctl_gen_vmstat(struct wbfs *w, struct ctl_buf *b);
int ctl_gen_zoneinfo(struct wbfs *w, struct ctl_buf *b);
int ctl_gen_bdi(struct wbfs *w, struct ctl_buf *b);
int ctl_gen_flusher(struct wbfs *w, struct ctl_buf *b);
/* lockstat: a state line, a header, one line per lock class. Or -errno. */
int ctl_gen_lockstat(struct ctl_buf *b);

#endif
