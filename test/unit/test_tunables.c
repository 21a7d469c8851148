// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The tunables table (daemon/tunables.c) walked entry by entry: every tunable
 * is complete (name, help, a place in struct wbcfs_options, a default in
 * its range), the mount options parse its default and refuse values out
 * of its range, a live one's control file takes what the mount option
 * takes and reads it back, and --help names it. A tunable added to one of
 * the table, the option parser, the control files or the help without the
 * others fails here.
 */
#include <check.h>
#include "helpers.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wbcfs/cache.h"
#include "wbcfs/daemon/ctl.h"
#include "wbcfs/ext4/options.h"
#include "wbcfs/daemon/tunables.h"

#define T_CACHE_PAGES 16384	/* 64 MiB */

static struct cache *c;
static unsigned ra_kb;
static struct throttle_domain dom;
static struct throttle_wb tw;
static struct ctl_tunables t;
static char err[256];

static void no_global(void *arg, struct throttle_global *g)
{
	memset(g, 0, sizeof(*g));
}

static void setup(void)
{
	struct cache_config cfg = { .size_bytes = T_CACHE_PAGES * PAGE_SIZE,
				    .reserve_bytes = 2 * T_CACHE_PAGES * PAGE_SIZE,
				    .min_bytes = 8 << 20, .nr_zones = 1,
				    .fair_zone_alloc = true, .zone_dirty = true };

	dirty_tunables_default(&cfg.tunables);
	ck_assert_int_eq(cache_create(&c, &cfg), 0);
	ra_kb = tunables[TUN_READAHEAD_KB].def;
	ck_assert_int_eq(throttle_domain_init(&dom, no_global, NULL, 0), 0);
	throttle_wb_init(&tw, &dom, "7:0", NULL, NULL);
	t = (struct ctl_tunables){ .dirty = &c->tun, .readahead_kb = &ra_kb, .throttle = &dom,
				   .tw = &tw, .fair_zone_alloc = &c->fair_zone_alloc,
				   .zone_dirty = &c->zone_dirty, .cache = c };
}

static void teardown(void)
{
	throttle_wb_remove(&tw);
	throttle_domain_destroy(&dom);
	cache_destroy(c);
}

/* @v as the mount option and the control file write it. */
static void t_text(const struct tunable *d, uint64_t v, char *buf, size_t len)
{
	if (d->kind == TK_CHOICE)
		snprintf(buf, len, "%s", d->choice((unsigned)v));
	else if (d->kind == TK_INT)
		snprintf(buf, len, "%" PRId64, (int64_t)v);
	else
		snprintf(buf, len, "%" PRIu64, v);
}

/* Parse "@name=@val" over the defaults; *@o holds the result. */
static int t_mount(struct wbcfs_options *o, const char *name, const char *val)
{
	char opt[300];

	snprintf(opt, sizeof(opt), "%s=%s", name, val);
	options_default(o);
	err[0] = 0;
	return options_parse(o, opt, err, sizeof(err));
}

static int t_live(unsigned id, const char *val)
{
	char buf[80];

	snprintf(buf, sizeof(buf), "%s\n", val);
	return ctl_tunable_write(&t, id, buf, strlen(buf));
}

START_TEST(table_is_complete)
{
	unsigned i, k;

	for (i = 0; i < NR_TUNABLES; i++) {
		const struct tunable *d = &tunables[i];

		ck_assert_msg(d->name && d->help, "tunable %u has no name or help", i);
		ck_assert_ptr_eq(tunable_find(d->name), d);
		/* the live ones are the control files, numbered by id */
		ck_assert_msg(!(d->flags & TF_LIVE) == (i >= CTL_NR_TUNABLES),
			      "%s: live is not the same as having a control file", d->name);
		if (i < CTL_NR_TUNABLES)
			ck_assert_str_eq(ctl_tunable_name(i), d->name);
		/* kept somewhere: a field of its kind's size, or options.dirty */
		if (d->size == 0)
			ck_assert_msg(d->dirty >= 0 && d->dirty < NR_DIRTY_TUNABLES &&
				      (unsigned)d->dirty == i, "%s: no place", d->name);
		else if (d->kind == TK_BOOL)
			ck_assert_uint_eq(d->size, sizeof(bool));
		else if (d->kind == TK_SIZE)
			ck_assert_uint_eq(d->size, sizeof(uint64_t));
		else
			ck_assert_msg(d->size == 4, "%s: size %u", d->name, d->size);
		if (d->kind == TK_CHOICE) {
			ck_assert_uint_eq(d->max, d->nr_choices - 1);
			for (k = 0; k < d->nr_choices; k++)
				ck_assert_ptr_nonnull(d->choice(k));
		}
		if (!(d->flags & TF_AUTO))
			ck_assert_msg(tunable_check(d, d->def, false) == 0,
				      "%s: default out of its range", d->name);
	}
	ck_assert_ptr_null(ctl_tunable_name(CTL_NR_TUNABLES));
	ck_assert_ptr_null(tunable_find("frobnicate"));
	/* the engines: one list, parsed as named */
	ck_assert_uint_eq(tunables[TUN_IO_ENGINE].nr_choices, NR_IO_ENGINES);
	for (k = 0; k < NR_IO_ENGINES; k++) {
		enum io_engine_type e;

		ck_assert_int_eq(io_engine_parse(io_engine_name(k), &e), 0);
		ck_assert_uint_eq(e, k);
	}
}
END_TEST

/* Defaults: options_default's and the cache's are the table's; each parses. */
START_TEST(defaults_parse)
{
	struct wbcfs_options o;
	struct dirty_tunables dt;
	char val[64];
	unsigned i;

	dirty_tunables_default(&dt);
	for (i = 0; i < NR_TUNABLES; i++) {
		const struct tunable *d = &tunables[i];

		options_default(&o);
		ck_assert_msg(tunable_load(d, &o) == d->def, "%s: options_default has %" PRIu64
			      ", the table %" PRIu64, d->name, tunable_load(d, &o), d->def);
		if (d->size == 0)
			ck_assert_uint_eq(dirty_tunable_get(&dt, (enum dirty_tunable)d->dirty),
					  d->def);
		if (d->flags & TF_AUTO)
			continue;
		t_text(d, d->def, val, sizeof(val));
		ck_assert_msg(t_mount(&o, d->name, val) == 0, "%s=%s: %s", d->name, val, err);
		ck_assert_uint_eq(tunable_load(d, &o), d->def);
	}
}
END_TEST

static void t_refused(const struct tunable *d, const char *val, const char *msg)
{
	struct wbcfs_options o;
	char prefix[80];

	ck_assert_msg(t_mount(&o, d->name, val) == -EINVAL, "%s=%s accepted", d->name, val);
	snprintf(prefix, sizeof(prefix), "%s: ", d->name);
	ck_assert_msg(!strncmp(err, prefix, strlen(prefix)) && strstr(err, msg),
		      "%s=%s: message '%s' lacks '%s'", d->name, val, err, msg);
}

static void t_live_refused(const struct tunable *d, unsigned id, const char *val)
{
	uint64_t before = ctl_tunable_read(&t, id);

	ck_assert_msg(t_live(id, val) == -EINVAL, "live %s=%s accepted", d->name, val);
	ck_assert_uint_eq(ctl_tunable_read(&t, id), before);
}

/* Below min, above max, off the multiple, not a choice: refused with a message. */
START_TEST(out_of_range_refused)
{
	char val[64];
	unsigned i;

	for (i = 0; i < NR_TUNABLES; i++) {
		const struct tunable *d = &tunables[i];
		bool live = d->flags & TF_LIVE;

		switch (d->kind) {
		case TK_BOOL:
			t_refused(d, "2", "is not 0 or 1");
			if (live)
				t_live_refused(d, i, "2");
			continue;
		case TK_CHOICE:
			t_refused(d, "bogus", "is not one of");
			if (live) {
				t_live_refused(d, i, "bogus");
				t_live_refused(d, i, "0");
			}
			continue;
		case TK_INT:
			t_text(d, d->min - 1, val, sizeof(val));
			t_refused(d, val, "out of range");
			t_text(d, d->max + 1, val, sizeof(val));
			t_refused(d, val, "out of range");
			continue;
		default:
			break;
		}
		if (d->min > 1 || (d->min == 1 && !(d->flags & TF_ZERO_OFF))) {
			t_text(d, d->min - 1, val, sizeof(val));
			t_refused(d, val, (d->flags & TF_ZERO_OFF) ? "is not allowed"
							       : "out of range");
			if (live)
				t_live_refused(d, i, val);
		}
		if ((d->flags & TF_ZERO_OFF) && live)
			t_live_refused(d, i, "0");	/* the twin ratio is the way back */
		if (d->max < UINT64_MAX) {
			t_text(d, d->max + 1, val, sizeof(val));
			t_refused(d, val, "out of range");
			if (live)
				t_live_refused(d, i, val);
		}
		if (d->multiple > 1) {
			t_text(d, d->min + d->multiple + 1, val, sizeof(val));
			t_refused(d, val, "is not a multiple of");
			if (live)
				t_live_refused(d, i, val);
		}
	}
}
END_TEST

/* A value the live file should take: another one than it has, in range. */
static uint64_t t_other(const struct tunable *d, uint64_t cur)
{
	if (d->kind == TK_CHOICE)
		return (cur + 1) % d->nr_choices;
	if (d->kind == TK_BOOL)
		return !cur;
	if (d->kind == TK_SIZE && !(d->flags & TF_PLAIN))
		return (cur / 2) & ~(uint64_t)(PAGE_SIZE - 1);	/* the cache's: within it */
	if (cur != d->max && d->max < UINT64_MAX)
		return d->max;
	return d->min + (d->multiple > 1 ? d->multiple : 1);
}

/*
 * Each control file: reads as the tunable's value, takes another value in
 * range (written as the mount option takes it, which must parse to the
 * same), reads it back, and its text written back changes nothing.
 */
START_TEST(live_round_trip)
{
	struct wbcfs_options o;
	struct ctl_buf b = { 0 };
	char val[64];
	uint64_t cur, v;
	unsigned i;

	for (i = 0; i < CTL_NR_TUNABLES; i++) {
		const struct tunable *d = &tunables[i];

		cur = ctl_tunable_read(&t, i);
		if (!(d->flags & TF_AUTO))
			ck_assert_msg(cur == d->def, "%s reads %" PRIu64 " at start, default %"
				      PRIu64, d->name, cur, d->def);
		v = t_other(d, cur);
		ck_assert_uint_ne(v, cur);
		t_text(d, v, val, sizeof(val));
		ck_assert_msg(t_mount(&o, d->name, val) == 0, "%s=%s at mount: %s", d->name,
			      val, err);
		ck_assert_uint_eq(tunable_load(d, &o), v);
		ck_assert_msg(t_live(i, val) == 0, "live %s=%s refused", d->name, val);
		ck_assert_msg(ctl_tunable_read(&t, i) == v, "live %s reads %" PRIu64 " after %s",
			      d->name, ctl_tunable_read(&t, i), val);
		ck_assert_int_eq(ctl_tunable_print(&t, i, &b), 0);
		ck_assert_int_eq(ctl_tunable_write(&t, i, b.data, b.len), 0);
		ck_assert_uint_eq(ctl_tunable_read(&t, i), v);
		ctl_buf_free(&b);
		/* back to how it was, for the tunables after it (min/max_ratio) */
		if (d->flags & TF_ZERO_OFF)	/* 0 is not written live: the twin's way */
			dirty_tunables_default(&c->tun);
		else
			ck_assert_int_eq(t_live(i, (t_text(d, cur, val, sizeof(val)), val)), 0);
	}
}
END_TEST

/* --help names every tunable and every choice. */
START_TEST(help_names_all)
{
	char *text = NULL, word[128];
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	unsigned i, k;

	ck_assert_ptr_nonnull(f);
	options_usage(f);
	fclose(f);
	for (i = 0; i < NR_TUNABLES; i++) {
		const struct tunable *d = &tunables[i];

		snprintf(word, sizeof(word), "  %s", d->name);
		ck_assert_msg(strstr(text, word), "--help lacks %s", d->name);
		for (k = 0; d->kind == TK_CHOICE && k < d->nr_choices; k++)
			ck_assert_msg(strstr(text, d->choice(k)), "--help lacks %s=%s",
				      d->name, d->choice(k));
	}
	free(text);
}
END_TEST

static Suite *tunables_suite(void)
{
	Suite *s = suite_create("tunables");
	TCase *tc = tcase_create("table");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, table_is_complete);
	tcase_add_test(tc, defaults_parse);
	tcase_add_test(tc, out_of_range_refused);
	tcase_add_test(tc, live_round_trip);
	tcase_add_test(tc, help_names_all);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run(tunables_suite());
}
