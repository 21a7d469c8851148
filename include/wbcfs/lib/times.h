/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Inode times: the one clock every stamp comes from (it never runs
 * backwards), and when a read or readdir updates atime, as the kernel's
 * mount options decide: relatime (the default), strictatime, noatime.
 */
#ifndef WBCFS_TIMES_H
#define WBCFS_TIMES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* The last stamp handed out, in ns since the epoch. */
struct stamp_clock {
	_Atomic int64_t last_ns;
};

/**
 * A stamp from @raw (the realtime clock read now): @raw itself, or the
 * last stamp of @c when the clock was set back or another thread stamped
 * later in between; so stamps taken one after the other never decrease.
 */
void stamp_clock_get(struct stamp_clock *c, const struct timespec *raw, struct timespec *out);

enum atime_mode {
	ATIME_RELATIME,		/* when atime <= mtime or ctime, or a day old */
	ATIME_STRICT,		/* on every access */
	ATIME_NOATIME,		/* never */
};

/* relatime's limit: an atime this old is updated whatever mtime and ctime say */
#define ATIME_RELATIME_MAX_AGE (24 * 60 * 60)

/**
 * Does an access at @now change atime @a of an inode with mtime @m and
 * ctime @c under @mode? Never when @now equals @a.
 */
bool atime_update_due(enum atime_mode mode, const struct timespec *a,
		      const struct timespec *m, const struct timespec *c,
		      const struct timespec *now);

#endif
