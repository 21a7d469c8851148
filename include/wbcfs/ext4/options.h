/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Mount options: the one struct a mount is given (ext4/ keeps it as
 * w->opts; every layer reads its part), parsed and validated from `-o`
 * strings by daemon/options.c. Its rules:
 * named after /proc/sys/vm and the kernel's knobs. Options wbcfs does not
 * own are passed on to libfuse; fstab-only words (defaults, noauto, nofail,
 * _netdev, user, relatime, ...) are dropped. Bad values are refused with a
 * message naming the option.
 */
#ifndef WBCFS_OPTIONS_H
#define WBCFS_OPTIONS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include "wbcfs/lib/times.h"
#include "wbcfs/cache/dirty.h"
#include "wbcfs/blkdev.h"

#define OPTIONS_FUSE_MAX 1024
#define OPTIONS_NAME_MAX 255	/* a file name, as ext4's */
#define OPTIONS_CTL_NAME_DEFAULT ".wbcfs"
#define OPTIONS_ZONES_MAX 64
#define OPTIONS_PDFLUSH_THREADS_MAX 64	/* pdflush_threads= at most */
#define OPTIONS_ZONE_MIN_BYTES (1u << 20)	/* smallest zone: 1 MiB */
#define OPTIONS_DOMAIN_MAX 64		/* a domain's name: [A-Za-z0-9_.-] */
/* the daemon's default OOM protection: see README "Memory" (why not -1000) */
#define OPTIONS_OOM_SCORE_ADJ (-500)

/* How FUSE requests reach the daemon. */
enum transport_type {
	TRANSPORT_AUTO,		/* io_uring when the kernel offers it, else /dev/fuse */
	TRANSPORT_URING,	/* io_uring, or refuse to mount */
	TRANSPORT_DEV,		/* read(2)/write(2) on /dev/fuse */
};

/* Who does background and periodic writeback (issue 14's experiment). */
enum flusher_model {
	FLUSHER_MODEL_BDI,	/* each device's own flusher workers */
	FLUSHER_MODEL_PDFLUSH,	/* one pool of threads for every device (pdflush.h) */
};

/*
 * cache_min: 64 MiB by default (room for 16 FUSE writers' 1 MiB requests,
 * readahead and the journal's metadata pages while the cache is shrunk);
 * 4 MiB at least (the zones' watermarks and a few writes in flight).
 */
#define OPTIONS_CACHE_MIN_DEFAULT (64ULL << 20)
#define OPTIONS_CACHE_MIN_MIN (4ULL << 20)

struct wbcfs_options {
	uint64_t cache_size;		/* bytes: the cache's ceiling; 0 = a quarter of RAM */
	uint64_t cache_min;		/* bytes: the floor it never shrinks below; 0 = the
					 * default, OPTIONS_CACHE_MIN_DEFAULT or cache_size */
	struct dirty_tunables dirty;	/* dirty_* tunables */
	unsigned flushers;		/* flusher workers per bdi, 1-16; default 1 */
	enum io_engine_type io_engine;	/* default IO_ENGINE_URING; nbd for NBD exports */
	bool io_engine_given;		/* io_engine= was on the command line */
	unsigned nbd_retry_s;		/* NBD reconnect interval, s; 0 = never [5] */
	unsigned nbd_timeout_s;		/* NBD: no reply this long = connection dead; 0 = never [30] */
	unsigned rbd_timeout_s;		/* RBD: an OSD request fails after this; 0 = never [30] */
	unsigned rbd_connect_timeout_s;	/* RBD: mon, auth and image open bound [10] */
	bool break_lock;		/* RBD: take the image's lock from a dead holder */
	char ceph_conf[PATH_MAX];	/* RBD: ceph.conf; "" = $CEPH_CONF, then librados' */
	char ceph_id[64];		/* RBD: client id (client.ID); "" = admin */
	char ceph_keyring[PATH_MAX];	/* RBD: keyring; "" = the conf's */
	unsigned queue_depth;		/* 1-4096; default 64 */
	enum flusher_model flusher_model;	/* default FLUSHER_MODEL_BDI */
	unsigned pdflush_min;		/* pdflush_threads=MIN[-MAX]: the pool's bounds, */
	unsigned pdflush_max;		/* 1 <= MIN <= MAX <= 64; default 2-8 */
	bool pdflush_threads_given;	/* pdflush_threads= was on the command line */
	unsigned max_io_kb;		/* 4-4096, multiple of 4; default 1024 */
	unsigned readahead_kb;		/* 0-65536, multiple of 4; default: the block
					 * device's read_ahead_kb, else 128 */
	bool readahead_kb_given;	/* readahead_kb= was on the command line */
	unsigned max_threads;		/* FUSE worker threads, 1-256; default 16 */
	unsigned poll_us;		/* FUSE device busy-poll, 0-1000 us; default 50 */
	unsigned take_delay_us;		/* testing: pause between a request's copy
					 * from the kernel and its serving; 0 */
	enum transport_type transport;	/* default TRANSPORT_AUTO */
	uint64_t prefault_bytes;	/* cache faulted in at mount; UINT64_MAX = all; 0 (default) */
	int oom_score_adj;		/* the daemon's, -1000..1000 [OPTIONS_OOM_SCORE_ADJ] */
	bool oom_score_adj_given;	/* oom_score_adj= was on the command line */
	bool mem_watch;			/* watch memory pressure, size the cache by it [1] */
	unsigned throttle;		/* enum throttle_mode; default THROTTLE_IOLESS */
	unsigned min_ratio;		/* percent of the dirty threshold guaranteed [0] */
	unsigned max_ratio;		/* percent of the dirty threshold at most [100] */
	unsigned max_pause_ms;		/* longest single throttle pause, 1-10000 [200] */
	bool strictlimit;		/* throttle on the device's own share of the limit */
	unsigned commit_s;		/* commit=N: journal commit interval, s; 0 = 5 */
	unsigned nr_zones;		/* zones=N or the number of sizes; 0 = default */
	uint64_t zone_bytes[OPTIONS_ZONES_MAX];	/* zones=SIZE:SIZE...; all 0 for zones=N */
	bool fair_zone_alloc;		/* fair zone allocation batches [1] */
	bool zone_dirty;		/* per-zone dirty limits for page-cache writes [1] */
	char ctl_name[OPTIONS_NAME_MAX + 1];	/* control directory in the root; default ".wbcfs" */
	char domain[OPTIONS_DOMAIN_MAX + 1];	/* cache domain to start or join; "" = own */
	bool noatime;			/* noatime (strictatime wins over it) */
	bool strictatime;		/* strictatime; neither: relatime */
	bool nodiratime;		/* no atime updates on directories */
	bool auto_da_alloc;		/* write a file's delayed data at a rename
					 * over another file and at the close after
					 * a truncation to 0, as ext4's [1] */
	bool close_errors;		/* a writer's close(2) sends FLUSH and reports
					 * writeback errors, as NFS; else FOPEN_NOFLUSH,
					 * errors at fsync only, as ext4 [0] */
	bool park_all;			/* every sync request is parked; else one that
					 * meets no other sync runs in its thread [0] */
	bool sync;			/* sync: every write durable before its reply */
	bool dirsync;			/* dirsync: directory changes committed before
					 * their reply (sync implies it) */
	bool ro;
	bool fsck;			/* run e2fsck -p before mounting */
	bool norecovery;		/* norecovery/noload: never replay the
					 * journal (needs ro) */
	bool allow_other;
	bool fault_inject;		/* testing aid: per-file I/O error injection */
	bool lockstat;			/* collect lock statistics from mount on */
	char write_log[PATH_MAX];	/* testing aid: record device writes here; "" = off */
	bool debug;			/* -d */
	bool foreground;		/* -f */
	char fuse_opts[OPTIONS_FUSE_MAX];	/* comma list for libfuse */
};

/** Defaults for every field. */
void options_default(struct wbcfs_options *o);

/**
 * Parse one comma-separated -o string (may be called repeatedly, later
 * values win). Returns 0, or -EINVAL with a message in @err such as
 * "dirty_ratio: value 150 out of range 0-100".
 */
int options_parse(struct wbcfs_options *o, const char *optstr, char *err, size_t errlen);

/**
 * Options that need others (pdflush_threads needs flusher_model=pdflush,
 * wherever each was given): checked where a mount's options become its
 * domain's, or are laid over a running domain's. Returns 0 or -EINVAL
 * with a message in @err.
 */
int options_check(const struct wbcfs_options *o, char *err, size_t errlen);

/** Parse a size: digits with optional k/K, m/M, g/G, t/T suffix (binary). */
int options_parse_size(const char *s, uint64_t *out);

/**
 * Parse a sysfs node list ("0", "0-3,6") into @ids (at most @max).
 * Returns the number of nodes or -EINVAL.
 */
int options_parse_nodelist(const char *s, int *ids, unsigned max);

/*
 * A cache domain's options (cache_size, zones, dirty_*, throttle, ...)
 * belong to the daemon that runs it: a device joining it takes them from
 * @dom (its dirty tunables from @live, as changed since mount, unless
 * NULL). Seed @o with them before parsing the joiner's -o strings, then
 * options_domain_conflict() names the first one the joiner set otherwise
 * (NULL: none).
 */
void options_domain_seed(struct wbcfs_options *o, const struct wbcfs_options *dom,
			 const struct dirty_tunables *live);
const char *options_domain_conflict(const struct wbcfs_options *dom,
				    const struct wbcfs_options *o);

/** The atime rule the options chose: strictatime > noatime > relatime. */
static inline enum atime_mode options_atime_mode(const struct wbcfs_options *o)
{
	if (o->strictatime)
		return ATIME_STRICT;
	return o->noatime ? ATIME_NOATIME : ATIME_RELATIME;
}

/** Print every option with its default (for --help). */
void options_usage(FILE *out);

#endif
