/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The pure parts of the control directory (daemon/ctl.c): a growable text
 * buffer the control files are generated into at open (seq_file's role),
 * and the parsing and validation of values written to the tunable files
 * with the rules of /proc/sys/vm. The FUSE side lives in daemon/ctl.c.
 */
#ifndef WBCFS_CTL_H
#define WBCFS_CTL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include "wbcfs/cache/dirty.h"
#include "wbcfs/cache/throttle.h"
#include "wbcfs/daemon/tunables.h"

/* A generated file: text, not NUL-terminated in @len. */
struct ctl_buf {
	char *data;
	size_t len;
	size_t cap;
};

/** Append printf output. Returns 0 or -ENOMEM (the buffer is unchanged). */
int ctl_buf_printf(struct ctl_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/** Put @n bytes at @off, growing the buffer; len becomes off + n. Returns 0 or -ENOMEM. */
int ctl_buf_put(struct ctl_buf *b, size_t off, const void *data, size_t n);
void ctl_buf_free(struct ctl_buf *b);

/*
 * The tunable files are the live tunables of the table (tunables.h), a
 * file's number its tunable's id (enum tunable_id): the dirty_* tunables,
 * readahead_kb, the throttle's (the device's min_ratio, max_ratio and
 * strictlimit as /sys/class/bdi/<dev>/ has them, max_pause_ms, throttle
 * by name), the zone policies fair_zone_alloc and zone_dirty, and the
 * cache's cache_size and cache_min.
 */
#define CTL_NR_TUNABLES		NR_LIVE_TUNABLES

/* The live values the tunable files read and write. */
struct ctl_tunables {
	struct dirty_tunables *dirty;	/* the cache's: read live by cache and flusher */
	unsigned *readahead_kb;		/* atomic (__atomic builtins): read at each open */
	struct throttle_domain *throttle;	/* max_pause_ms, mode: read at each evaluation */
	struct throttle_wb *tw;		/* the device's ratios and strictlimit */
	_Atomic unsigned *fair_zone_alloc;	/* the cache's: read at each allocation */
	_Atomic unsigned *zone_dirty;	/* the cache's: read at each write allocation */
	struct cache *cache;		/* cache_size, cache_min (NULL: they read 0) */
};

const char *ctl_tunable_name(unsigned which);

/**
 * Parse a written value as /proc/sys does: optional leading blanks, decimal
 * digits, optional trailing blanks and newlines, nothing else.
 * Returns 0 or -EINVAL (empty, sign, other characters, overflow).
 */
int ctl_parse_u64(const char *buf, size_t len, uint64_t *out);

/**
 * Parse @buf and set tunable @which with the table's rules (tunables.h)
 * and the kernel's: a number as /proc/sys takes it (ctl_parse_u64), a
 * choice by name, cache_size and cache_min with the mount options'
 * suffixes; in the tunable's range, where at run time dirty_bytes and
 * dirty_background_bytes take no 0 (writing the ratio is the way back, as
 * in /proc/sys/vm); writing a ratio zeroes its bytes twin and the other
 * way round; min_ratio <= max_ratio; cache_set_ceiling and cache_set_floor
 * have the last word on the cache's sizes.
 * On error nothing changes. Returns 0 or -EINVAL.
 */
int ctl_tunable_write(const struct ctl_tunables *t, unsigned which, const char *buf,
		      size_t len);
/** Current value of tunable @which (throttle: enum throttle_mode). */
uint64_t ctl_tunable_read(const struct ctl_tunables *t, unsigned which);
/** The text a tunable file reads as: the number, or the throttle's mode name. */
int ctl_tunable_print(const struct ctl_tunables *t, unsigned which, struct ctl_buf *b);

#endif
