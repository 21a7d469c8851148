// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The control directory's pure parts: the generated-text buffer, the
 * parsing of written values as /proc/sys does it, and the tunable rules
 * (ranges, ratio/bytes twins zeroing each other, bad values changing
 * nothing). The FUSE side is tested by test/integration/test_ctl.py.
 */
#include <check.h>
#include "helpers.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wbcfs/daemon/ctl.h"

static struct dirty_tunables dt;
static unsigned ra_kb;
static struct throttle_domain dom;
static struct throttle_wb tw;
static _Atomic unsigned fair = 1, zdirty = 1;
static struct ctl_tunables t = { .dirty = &dt, .readahead_kb = &ra_kb, .throttle = &dom,
				 .tw = &tw, .fair_zone_alloc = &fair, .zone_dirty = &zdirty };

static void no_global(void *arg, struct throttle_global *g)
{
	memset(g, 0, sizeof(*g));
}

static void setup(void)
{
	dirty_tunables_default(&dt);
	ra_kb = 128;
	ck_assert_int_eq(throttle_domain_init(&dom, no_global, NULL, 0), 0);
	throttle_wb_init(&tw, &dom, "7:0", NULL, NULL);
}

static void teardown(void)
{
	throttle_wb_remove(&tw);
	throttle_domain_destroy(&dom);
}

static int t_write(unsigned which, const char *s)
{
	return ctl_tunable_write(&t, which, s, strlen(s));
}

static uint64_t t_parsed(const char *s)
{
	uint64_t v = 12345;

	ck_assert_msg(ctl_parse_u64(s, strlen(s), &v) == 0, "'%s' refused", s);
	return v;
}

static void t_unparsable(const char *s)
{
	uint64_t v = 777;

	ck_assert_msg(ctl_parse_u64(s, strlen(s), &v) == -EINVAL, "'%s' accepted", s);
	ck_assert_uint_eq(v, 777);
}

START_TEST(parse_accepts)
{
	ck_assert_uint_eq(t_parsed("20"), 20);
	ck_assert_uint_eq(t_parsed("20\n"), 20);
	ck_assert_uint_eq(t_parsed("  7 \t\n"), 7);
	ck_assert_uint_eq(t_parsed("0"), 0);
	ck_assert_uint_eq(t_parsed("007\n"), 7);
	ck_assert_uint_eq(t_parsed("18446744073709551615"), UINT64_MAX);
}
END_TEST

START_TEST(parse_refuses)
{
	t_unparsable("");
	t_unparsable("\n");
	t_unparsable("   ");
	t_unparsable("abc");
	t_unparsable("-1");
	t_unparsable("+1");
	t_unparsable("12abc");
	t_unparsable("1 2");
	t_unparsable("0x10");
	t_unparsable("64M");
	t_unparsable("18446744073709551616");
	t_unparsable("99999999999999999999999");
}
END_TEST

START_TEST(parse_len_bounds)
{
	uint64_t v;

	/* only the first len bytes count: the buffer is not NUL-terminated */
	ck_assert_int_eq(ctl_parse_u64("25junk", 2, &v), 0);
	ck_assert_uint_eq(v, 25);
	ck_assert_int_eq(ctl_parse_u64("25junk", 3, &v), -EINVAL);
}
END_TEST

START_TEST(names)
{
	ck_assert_str_eq(ctl_tunable_name(DT_DIRTY_RATIO), "dirty_ratio");
	ck_assert_str_eq(ctl_tunable_name(DT_DIRTY_WRITEBACK_CENTISECS), "dirty_writeback_centisecs");
	ck_assert_str_eq(ctl_tunable_name(TUN_READAHEAD_KB), "readahead_kb");
	ck_assert_ptr_null(ctl_tunable_name(CTL_NR_TUNABLES));
}
END_TEST

START_TEST(write_and_read_back)
{
	unsigned i;

	for (i = 0; i < CTL_NR_TUNABLES; i++)
		ck_assert_ptr_nonnull(ctl_tunable_name(i));
	ck_assert_uint_eq(ctl_tunable_read(&t, DT_DIRTY_RATIO), 20);
	ck_assert_int_eq(t_write(DT_DIRTY_RATIO, "35\n"), 0);
	ck_assert_uint_eq(ctl_tunable_read(&t, DT_DIRTY_RATIO), 35);
	ck_assert_int_eq(t_write(DT_DIRTY_EXPIRE_CENTISECS, "100"), 0);
	ck_assert_uint_eq(dt.dirty_expire_centisecs, 100);
	ck_assert_int_eq(t_write(DT_DIRTY_WRITEBACK_CENTISECS, "0\n"), 0);
	ck_assert_uint_eq(dt.dirty_writeback_centisecs, 0);
	ck_assert_int_eq(t_write(TUN_READAHEAD_KB, "256\n"), 0);
	ck_assert_uint_eq(ctl_tunable_read(&t, TUN_READAHEAD_KB), 256);
	ck_assert_int_eq(t_write(TUN_READAHEAD_KB, "0"), 0);
	ck_assert_uint_eq(ra_kb, 0);
	/* the zone policies: 0 or 1, live */
	ck_assert_str_eq(ctl_tunable_name(TUN_FAIR_ZONE_ALLOC), "fair_zone_alloc");
	ck_assert_str_eq(ctl_tunable_name(TUN_ZONE_DIRTY), "zone_dirty");
	ck_assert_int_eq(t_write(TUN_FAIR_ZONE_ALLOC, "0\n"), 0);
	ck_assert_uint_eq(fair, 0);
	ck_assert_int_eq(t_write(TUN_ZONE_DIRTY, "0"), 0);
	ck_assert_uint_eq(ctl_tunable_read(&t, TUN_ZONE_DIRTY), 0);
	ck_assert_int_eq(t_write(TUN_ZONE_DIRTY, "2"), -EINVAL);
	ck_assert_int_eq(t_write(TUN_FAIR_ZONE_ALLOC, "1"), 0);
	ck_assert_uint_eq(fair, 1);
	ck_assert_uint_eq(zdirty, 0);
}
END_TEST

/* The throttle's files: bdi ratio rules, strictlimit, max_pause_ms, the mode by name. */
START_TEST(throttle_tunables)
{
	struct ctl_buf b = { 0 };

	ck_assert_uint_eq(ctl_tunable_read(&t, TUN_MAX_RATIO), 100);
	ck_assert_int_eq(t_write(TUN_MIN_RATIO, "30\n"), 0);
	ck_assert_uint_eq(atomic_load(&tw.min_ratio), 30);
	ck_assert_int_eq(t_write(TUN_MAX_RATIO, "20"), -EINVAL);	/* below min_ratio */
	ck_assert_int_eq(t_write(TUN_MAX_RATIO, "40"), 0);
	ck_assert_int_eq(t_write(TUN_MIN_RATIO, "50"), -EINVAL);	/* above max_ratio */
	ck_assert_int_eq(t_write(TUN_MIN_RATIO, "101"), -EINVAL);
	ck_assert_uint_eq(atomic_load(&tw.min_ratio), 30);
	ck_assert_int_eq(t_write(TUN_STRICTLIMIT, "1"), 0);
	ck_assert(atomic_load(&tw.strictlimit));
	ck_assert_int_eq(t_write(TUN_STRICTLIMIT, "2"), -EINVAL);
	ck_assert_int_eq(t_write(TUN_MAX_PAUSE_MS, "0"), -EINVAL);
	ck_assert_int_eq(t_write(TUN_MAX_PAUSE_MS, "50\n"), 0);
	ck_assert_uint_eq(atomic_load(&dom.max_pause_ms), 50);
	ck_assert_int_eq(t_write(TUN_THROTTLE, "simple\n"), 0);
	ck_assert_int_eq(atomic_load(&dom.mode), THROTTLE_SIMPLE);
	ck_assert_int_eq(t_write(TUN_THROTTLE, "1"), -EINVAL);
	ck_assert_int_eq(ctl_tunable_print(&t, TUN_THROTTLE, &b), 0);
	ck_assert_int_eq(b.len, 7);
	ck_assert(!memcmp(b.data, "simple\n", 7));
	ctl_buf_free(&b);
	ck_assert_int_eq(ctl_tunable_print(&t, TUN_MAX_PAUSE_MS, &b), 0);
	ck_assert(!memcmp(b.data, "50\n", 3));
	ctl_buf_free(&b);
}
END_TEST

START_TEST(twins_zero_each_other)
{
	ck_assert_int_eq(t_write(DT_DIRTY_BYTES, "67108864\n"), 0);
	ck_assert_uint_eq(dt.dirty_bytes, 64 << 20);
	ck_assert_uint_eq(dt.dirty_ratio, 0);
	ck_assert_int_eq(t_write(DT_DIRTY_RATIO, "15"), 0);
	ck_assert_uint_eq(dt.dirty_ratio, 15);
	ck_assert_uint_eq(dt.dirty_bytes, 0);
	ck_assert_int_eq(t_write(DT_DIRTY_BACKGROUND_BYTES, "1048576"), 0);
	ck_assert_uint_eq(dt.dirty_background_bytes, 1 << 20);
	ck_assert_uint_eq(dt.dirty_background_ratio, 0);
	ck_assert_int_eq(t_write(DT_DIRTY_BACKGROUND_RATIO, "5"), 0);
	ck_assert_uint_eq(dt.dirty_background_ratio, 5);
	ck_assert_uint_eq(dt.dirty_background_bytes, 0);
	/* the pairs are independent of each other */
	ck_assert_uint_eq(dt.dirty_ratio, 15);
}
END_TEST

START_TEST(bad_values_change_nothing)
{
	static const struct { unsigned which; const char *v; } bad[] = {
		{ DT_DIRTY_RATIO, "101" }, { DT_DIRTY_RATIO, "" }, { DT_DIRTY_RATIO, "\n" },
		{ DT_DIRTY_RATIO, "abc" }, { DT_DIRTY_RATIO, "-5" }, { DT_DIRTY_RATIO, "5%" },
		{ DT_DIRTY_BACKGROUND_RATIO, "1000" },
		/* /proc/sys/vm: the way back to ratios is writing the ratio */
		{ DT_DIRTY_BYTES, "0" }, { DT_DIRTY_BYTES, "8191" },
		{ DT_DIRTY_BACKGROUND_BYTES, "0" },
		{ DT_DIRTY_EXPIRE_CENTISECS, "864000001" },
		{ DT_DIRTY_WRITEBACK_CENTISECS, "99999999999" },
		{ TUN_READAHEAD_KB, "6" }, { TUN_READAHEAD_KB, "65540" },
		{ CTL_NR_TUNABLES, "1" },
	};
	struct dirty_tunables before;
	size_t i;

	dirty_tunables_default(&before);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(t_write(bad[i].which, bad[i].v) == -EINVAL, "%u '%s' accepted",
			      bad[i].which, bad[i].v);
		ck_assert(memcmp(&dt, &before, sizeof(dt)) == 0);
		ck_assert_uint_eq(ra_kb, 128);
	}
	ck_assert_int_eq(t_write(DT_DIRTY_BYTES, "8192"), 0);
	ck_assert_int_eq(t_write(DT_DIRTY_BACKGROUND_BYTES, "1"), 0);
	ck_assert_int_eq(t_write(DT_DIRTY_EXPIRE_CENTISECS, "864000000"), 0);
}
END_TEST

START_TEST(buf_printf_and_put)
{
	struct ctl_buf b = {0};
	int i;

	for (i = 0; i < 1000; i++)
		ck_assert_int_eq(ctl_buf_printf(&b, "line %d\n", i), 0);
	ck_assert_uint_eq(b.len, 10 * 7 + 90 * 8 + 900 * 9);	/* "line N\n" */
	ck_assert(!memcmp(b.data, "line 0\nline 1\n", 14));
	ck_assert(!memcmp(b.data + b.len - 9, "line 999\n", 9));
	ctl_buf_free(&b);
	ck_assert_ptr_null(b.data);
	ck_assert_int_eq(ctl_buf_put(&b, 0, "2", 1), 0);
	ck_assert_int_eq(ctl_buf_put(&b, 1, "0\n", 2), 0);
	ck_assert_uint_eq(b.len, 3);
	ck_assert(!memcmp(b.data, "20\n", 3));
	ck_assert_int_eq(ctl_buf_put(&b, 0, "7", 1), 0);
	ck_assert_uint_eq(b.len, 1);
	ck_assert_int_eq(ctl_tunable_write(&t, DT_DIRTY_RATIO, b.data, b.len), 0);
	ck_assert_uint_eq(dt.dirty_ratio, 7);
	ctl_buf_free(&b);
}
END_TEST

static Suite *ctl_suite(void)
{
	Suite *s = suite_create("ctl");
	TCase *tc;

	t_tcase(s, "parse", parse_accepts, parse_refuses, parse_len_bounds);
	tc = t_tcase(s, "tunables", names, write_and_read_back, throttle_tunables,
		     twins_zero_each_other, bad_values_change_nothing);
	tcase_add_checked_fixture(tc, setup, teardown);
	tc = t_tcase(s, "buf", buf_printf_and_put);
	tcase_add_checked_fixture(tc, setup, teardown);
	return s;
}

int main(void)
{
	return t_run(ctl_suite());
}
