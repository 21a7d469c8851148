// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Inode times: the stamp clock never runs backwards, and the atime rule
 * of relatime, strictatime and noatime is the kernel's.
 */
#include <check.h>
#include "helpers.h"

#include "wbcfs/lib/times.h"

static struct timespec ts(long long sec, long nsec)
{
	return (struct timespec){ .tv_sec = sec, .tv_nsec = nsec };
}

START_TEST(stamps_never_decrease)
{
	struct stamp_clock c = { 0 };
	struct timespec raw, out;

	raw = ts(1000, 500);
	stamp_clock_get(&c, &raw, &out);
	ck_assert_int_eq(out.tv_sec, 1000);
	ck_assert_int_eq(out.tv_nsec, 500);
	/* the clock is set back: the stamp stays where it was */
	raw = ts(999, 999999999);
	stamp_clock_get(&c, &raw, &out);
	ck_assert_int_eq(out.tv_sec, 1000);
	ck_assert_int_eq(out.tv_nsec, 500);
	raw = ts(1000, 499);
	stamp_clock_get(&c, &raw, &out);
	ck_assert_int_eq(out.tv_nsec, 500);
	/* and moves on with it once it is past */
	raw = ts(1001, 7);
	stamp_clock_get(&c, &raw, &out);
	ck_assert_int_eq(out.tv_sec, 1001);
	ck_assert_int_eq(out.tv_nsec, 7);
}
END_TEST

static bool due(enum atime_mode mode, struct timespec a, struct timespec m, struct timespec c,
		struct timespec now)
{
	return atime_update_due(mode, &a, &m, &c, &now);
}

START_TEST(relatime_rule)
{
	struct timespec now = ts(200000, 0);

	/* atime not after mtime, or not after ctime: update */
	ck_assert(due(ATIME_RELATIME, ts(100, 0), ts(100, 1), ts(50, 0), now));
	ck_assert(due(ATIME_RELATIME, ts(100, 0), ts(100, 0), ts(50, 0), now));
	ck_assert(due(ATIME_RELATIME, ts(190000, 0), ts(50, 0), ts(190000, 0), now));
	/* atime after both and younger than a day: leave it */
	ck_assert(!due(ATIME_RELATIME, ts(190000, 1), ts(190000, 0), ts(190000, 0), now));
	ck_assert(!due(ATIME_RELATIME, ts(200000 - 86399, 0), ts(0, 0), ts(0, 0), now));
	/* a day old: update */
	ck_assert(due(ATIME_RELATIME, ts(200000 - 86400, 0), ts(0, 0), ts(0, 0), now));
	/* never to the same time */
	ck_assert(!due(ATIME_RELATIME, now, ts(200000, 5), ts(0, 0), now));
}
END_TEST

START_TEST(strictatime_and_noatime)
{
	struct timespec now = ts(200000, 0);

	ck_assert(due(ATIME_STRICT, ts(199999, 0), ts(0, 0), ts(0, 0), now));
	ck_assert(!due(ATIME_STRICT, now, ts(0, 0), ts(0, 0), now));
	ck_assert(!due(ATIME_NOATIME, ts(100, 0), ts(150, 0), ts(150, 0), now));
	ck_assert(!due(ATIME_NOATIME, ts(0, 0), ts(0, 0), ts(0, 0), now));
}
END_TEST

static Suite *times_suite(void)
{
	Suite *s = suite_create("times");

	t_tcase(s, "clock", stamps_never_decrease);
	t_tcase(s, "atime", relatime_rule, strictatime_and_noatime);
	return s;
}

int main(void)
{
	return t_run(times_suite());
}
