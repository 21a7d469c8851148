// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The clock of every inode stamp, and the atime rule of the kernel's mount
 * options (relatime, strictatime, noatime), apart from the inodes they are
 * applied to (inode.c, ext4.c).
 */
#include "wbcfs/lib/times.h"

void stamp_clock_get(struct stamp_clock *c, const struct timespec *raw, struct timespec *out)
{
	int64_t ns = (int64_t)raw->tv_sec * 1000000000 + raw->tv_nsec;
	int64_t last = atomic_load(&c->last_ns);

	while (ns > last && !atomic_compare_exchange_weak(&c->last_ns, &last, ns))
		;
	if (ns < last)
		ns = last;
	out->tv_sec = ns / 1000000000;
	out->tv_nsec = ns % 1000000000;
}

static int ts_cmp(const struct timespec *x, const struct timespec *y)
{
	if (x->tv_sec != y->tv_sec)
		return x->tv_sec < y->tv_sec ? -1 : 1;
	if (x->tv_nsec != y->tv_nsec)
		return x->tv_nsec < y->tv_nsec ? -1 : 1;
	return 0;
}

bool atime_update_due(enum atime_mode mode, const struct timespec *a,
		      const struct timespec *m, const struct timespec *c,
		      const struct timespec *now)
{
	if (mode == ATIME_NOATIME || !ts_cmp(a, now))
		return false;
	if (mode == ATIME_STRICT)
		return true;
	return ts_cmp(m, a) >= 0 || ts_cmp(c, a) >= 0 ||
	       (long long)now->tv_sec - (long long)a->tv_sec >= ATIME_RELATIME_MAX_AGE;
}
