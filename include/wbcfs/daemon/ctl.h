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
 * The tunable files: the dirty_* tunables (enum dirty_tunable values),
 * then readahead_kb and the throttle's: the device's min_ratio, max_ratio
 * and strictlimit (as /sys/class/bdi/<dev>/ has them), max_pause_ms,
 * throttle ("ioless" or "simple"), and the zone policies fair_zone_alloc
 * and zone_dirty (0 or 1).
 */
#define CTL_TUN_READAHEAD_KB	NR_DIRTY_TUNABLES
#define CTL_TUN_MIN_RATIO	(NR_DIRTY_TUNABLES + 1)
#define CTL_TUN_MAX_RATIO	(NR_DIRTY_TUNABLES + 2)
#define CTL_TUN_STRICTLIMIT	(NR_DIRTY_TUNABLES + 3)
#define CTL_TUN_MAX_PAUSE_MS	(NR_DIRTY_TUNABLES + 4)
#define CTL_TUN_THROTTLE	(NR_DIRTY_TUNABLES + 5)
#define CTL_TUN_FAIR_ZONE_ALLOC	(NR_DIRTY_TUNABLES + 6)
#define CTL_TUN_ZONE_DIRTY	(NR_DIRTY_TUNABLES + 7)
#define CTL_TUN_CACHE_SIZE	(NR_DIRTY_TUNABLES + 8)	/* bytes: the cache's ceiling */
#define CTL_TUN_CACHE_MIN	(NR_DIRTY_TUNABLES + 9)	/* bytes: its floor */
#define CTL_NR_TUNABLES		(NR_DIRTY_TUNABLES + 10)

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
 * Parse @buf and set tunable @which with the kernel's rules: ratios 0-100;
 * dirty_bytes at least two pages and dirty_background_bytes at least 1
 * (writing the ratio is the way back to ratios, as in /proc/sys/vm);
 * writing a ratio zeroes its bytes twin and the other way round;
 * centisecs up to 100 days; readahead_kb 0-65536 in multiples of 4;
 * min_ratio and max_ratio 0-100 with min_ratio <= max_ratio; strictlimit
 * 0 or 1; max_pause_ms 1-10000; throttle "ioless" or "simple";
 * fair_zone_alloc and zone_dirty 0 or 1; cache_size and cache_min in
 * bytes with the mount options' k/M/G/T suffixes, rounded down to pages,
 * cache_min at least 4M and not above cache_size (cache_set_ceiling and
 * cache_set_floor have the last word).
 * On error nothing changes. Returns 0 or -EINVAL.
 */
int ctl_tunable_write(const struct ctl_tunables *t, unsigned which, const char *buf,
		      size_t len);
/** Current value of tunable @which (throttle: enum throttle_mode). */
uint64_t ctl_tunable_read(const struct ctl_tunables *t, unsigned which);
/** The text a tunable file reads as: the number, or the throttle's mode name. */
int ctl_tunable_print(const struct ctl_tunables *t, unsigned which, struct ctl_buf *b);

#endif
