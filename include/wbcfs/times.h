/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Inode times: when a read or readdir updates atime, as the kernel's
 * mount options decide: relatime (the default), strictatime, noatime.
 */
#ifndef WBCFS_TIMES_H
#define WBCFS_TIMES_H

#include <stdbool.h>
#include <time.h>

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
