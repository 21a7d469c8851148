// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The IO-less dirty throttling controller (cache/throttle.c), driven by a
 * deterministic simulation: a fake millisecond clock, simulated devices
 * that write dirty pages at a fixed bandwidth while background writeback
 * is due (with the flusher's real bandwidth estimator, bdi_bw_update),
 * and writers that dirty a block per write and sleep the pause the
 * controller hands them, then ask again (throttle_resume) as the daemon's
 * held replies do. No threads: every run gives the same numbers.
 *
 * What it shows (issue 4, point 8): dirty_ratelimit converges to
 * write_bw / N for 1, 2, 10 and 100 writers within 5 s and stays; dirty
 * pages stay within 10% of the setpoint; writers get equal bandwidth;
 * no pause exceeds max_pause; writers below their fair share are never
 * paused; a 4x bandwidth drop and a dirty_ratio change re-converge; two
 * devices 10x apart get threshold shares that follow their completions;
 * strictlimit keeps a device under its own limit.
 */
#include <check.h>
#include "helpers.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wbcfs/flusher/bdi.h"
#include "wbcfs/cache/throttle.h"

#define MB_PAGES 256L			/* pages per MB (MiB) */
#define SIM_MAX_DEV 2
#define SIM_MAX_WRITERS 128

struct sim_dev {
	struct throttle_wb tw;
	struct bdi_bw bw;
	long bw_pages;			/* true bandwidth, pages/s */
	long credit_milli;		/* pages * 1000 the device may write */
	long reclaimable, writeback, dirtied, written;
	bool bg_active;
};

struct sim_writer {
	int dev;
	pid_t pid;
	long block;			/* pages per write */
	long rate;			/* pages/s, 0 = as fast as allowed */
	uint64_t next;			/* ms: may issue the next write */
	uint64_t pause_until;		/* ms: 0 = not paused */
	uint64_t issued_at;		/* ms: the paused write was issued */
	long done_pages;		/* pages of completed writes */
	long window_pages;		/* ... completed inside the measuring window */
	long max_pause;
	long nr_pauses;
};

struct sim {
	struct throttle_domain dom;
	struct sim_dev dev[SIM_MAX_DEV];
	int nr_dev;
	struct sim_writer w[SIM_MAX_WRITERS];
	int nr_w;
	unsigned long thresh, bg_thresh;
	uint64_t window_start, window_end;
	long max_pause_seen;
};

static struct sim *S;
static uint32_t sim_rand_state = 12345;

/* Writers are not in lock-step: each write takes 1-3 ms (deterministic LCG). */
static unsigned sim_rand(unsigned n)
{
	sim_rand_state = sim_rand_state * 1103515245u + 12345u;
	return (sim_rand_state >> 16) % n;
}

static void sim_global(void *arg, struct throttle_global *g)
{
	struct sim *s = arg;
	int i;

	g->nr_dirty = g->nr_writeback = 0;
	for (i = 0; i < s->nr_dev; i++) {
		g->nr_dirty += (unsigned long)s->dev[i].reclaimable;
		g->nr_writeback += (unsigned long)s->dev[i].writeback;
	}
	g->thresh = s->thresh;
	g->bg_thresh = s->bg_thresh;
}

static void sim_stat(struct throttle_wb *tw, struct throttle_wb_stat *st)
{
	struct sim_dev *d = tw->arg;

	st->reclaimable = d->reclaimable;
	st->writeback = d->writeback;
	st->dirtied = d->dirtied;
	st->written = d->written;
	st->write_bw = d->bw.write_bw;
	st->avg_write_bw = d->bw.avg_write_bw;
}

static void sim_update_bw(struct throttle_wb *tw, uint64_t now)
{
	struct sim_dev *d = tw->arg;

	bdi_bw_sample(&d->bw, now, d->written, d->writeback == 0);
}

static void sim_kick(struct throttle_wb *tw)
{
	struct sim_dev *d = tw->arg;

	d->bg_active = true;
}

static const struct throttle_wb_ops sim_ops = {
	.stat = sim_stat, .update_bw = sim_update_bw, .kick = sim_kick,
};

static bool sim_alive(pid_t pid)
{
	return true;
}

static struct sim *sim_new(unsigned long thresh_mb)
{
	struct sim *s = calloc(1, sizeof(*s));

	t_clock_fake(1000000);
	sim_rand_state = 12345;
	ck_assert_int_eq(throttle_domain_init(&s->dom, sim_global, s, 4096), 0);
	s->dom.task_alive = sim_alive;
	s->thresh = thresh_mb * MB_PAGES;
	s->bg_thresh = s->thresh / 2;
	S = s;
	return s;
}

static void sim_free(struct sim *s)
{
	throttle_domain_destroy(&s->dom);
	free(s);
	t_clock_real();
}

static struct sim_dev *sim_add_dev(struct sim *s, long mb_per_s)
{
	struct sim_dev *d = &s->dev[s->nr_dev++];
	char name[16];

	snprintf(name, sizeof(name), "7:%d", s->nr_dev - 1);
	d->bw_pages = mb_per_s * MB_PAGES;
	d->bw.write_bw = d->bw.avg_write_bw = 25600;	/* 100 MB/s, as a new bdi */
	d->bw.stamp_ms = t_clock_now();
	throttle_wb_init(&d->tw, &s->dom, name, &sim_ops, d);
	return d;
}

static struct sim_writer *sim_add_writer(struct sim *s, int dev, long block, long rate_kbps)
{
	struct sim_writer *w = &s->w[s->nr_w++];

	w->dev = dev;
	w->pid = 1000 + s->nr_w;
	w->block = block;
	w->rate = rate_kbps / 4;
	w->next = t_clock_now() + sim_rand(50);
	return w;
}

static void sim_pause(struct sim *s, struct sim_writer *w, long pause, uint64_t now)
{
	w->pause_until = now + (uint64_t)pause;
	w->nr_pauses++;
	if (pause > w->max_pause)
		w->max_pause = pause;
	if (pause > s->max_pause_seen)
		s->max_pause_seen = pause;
}

static void sim_complete(struct sim *s, struct sim_writer *w, uint64_t now)
{
	w->pause_until = 0;
	w->done_pages += w->block;
	if (now >= s->window_start && now < s->window_end)
		w->window_pages += w->block;
	if (w->rate)	/* paced writer: its own think time */
		w->next = w->issued_at + (uint64_t)(w->block * 1000 / w->rate);
	else
		w->next = now + 1 + sim_rand(3);
	if (w->next <= now)
		w->next = now + 1;
}

static void sim_writer_tick(struct sim *s, struct sim_writer *w, uint64_t now)
{
	struct sim_dev *d = &s->dev[w->dev];
	struct throttle_verdict v;

	if (w->pause_until) {
		if (now < w->pause_until)
			return;
		v = throttle_resume(&d->tw, w->pid);
		if (v.pause_ms > 0)
			sim_pause(s, w, v.pause_ms, now);
		else
			sim_complete(s, w, now);
		return;
	}
	if (now < w->next)
		return;
	w->issued_at = now;
	d->reclaimable += w->block;
	d->dirtied += w->block;
	v = throttle_dirtied(&d->tw, w->pid, w->block);
	if (v.pause_ms > 0)
		sim_pause(s, w, v.pause_ms, now);
	else
		sim_complete(s, w, now);
}

/* Background writeback: on while over bg_thresh (global or this device's share). */
static void sim_dev_tick(struct sim *s, struct sim_dev *d, uint64_t now)
{
	unsigned long wb_thresh, wb_bg, thresh, bg, nr_dirty = 0;
	long n;
	int i;

	for (i = 0; i < s->nr_dev; i++)
		nr_dirty += (unsigned long)s->dev[i].reclaimable;
	if (now % 10 == 0) {
		throttle_wb_thresholds(&d->tw, &wb_thresh, &wb_bg, &thresh, &bg);
		d->bg_active = nr_dirty > bg || (unsigned long)d->reclaimable > wb_bg ||
			       (d->bg_active && d->reclaimable > 0 && nr_dirty > bg / 2 &&
				(unsigned long)d->reclaimable > wb_bg / 2);
	}
	/* keep up to 1024 pages (4 MiB) under writeback while active */
	if (d->bg_active && d->writeback < 1024) {
		n = 1024 - d->writeback < d->reclaimable ? 1024 - d->writeback : d->reclaimable;
		d->reclaimable -= n;
		d->writeback += n;
	}
	if (!d->writeback) {
		d->credit_milli = 0;	/* an idle device saves no bandwidth */
		bdi_bw_sample(&d->bw, now, d->written, true);
		return;
	}
	d->credit_milli += d->bw_pages;
	n = d->credit_milli / 1000;
	if (n > d->writeback)
		n = d->writeback;
	if (n > 0) {
		d->credit_milli -= n * 1000;
		d->writeback -= n;
		d->written += n;
		throttle_wb_completed(&d->tw, n);
		bdi_bw_update(&d->bw, now, d->written);
	}
}

/* Per 200 ms samples of one device, for the convergence checks. */
struct sim_sample {
	uint64_t t;			/* ms since start */
	long dr, avg_bw, bal;
	unsigned long dirty, setpoint, wb_dirty, wb_thresh;
};

#define MAX_SAMPLES 2000

static struct sim_sample samples[MAX_SAMPLES];
static int nr_samples;

static void sim_sample(struct sim *s, int dev, uint64_t t0, uint64_t now)
{
	struct sim_dev *d = &s->dev[dev];
	struct sim_sample *x;
	unsigned long wb_thresh, wb_bg, thresh, bg, freerun, limit;
	int i;

	if (nr_samples >= MAX_SAMPLES)
		return;
	x = &samples[nr_samples++];
	throttle_wb_thresholds(&d->tw, &wb_thresh, &wb_bg, &thresh, &bg);
	x->t = now - t0;
	x->dr = d->tw.dirty_ratelimit;
	x->bal = d->tw.balanced_dirty_ratelimit;
	x->avg_bw = d->bw.avg_write_bw;
	x->dirty = 0;
	for (i = 0; i < s->nr_dev; i++)
		x->dirty += (unsigned long)(s->dev[i].reclaimable + s->dev[i].writeback);
	freerun = (thresh + bg) / 2;
	limit = thresh > s->dom.dirty_limit ? thresh : s->dom.dirty_limit;
	x->setpoint = (freerun + limit) / 2;
	x->wb_dirty = (unsigned long)(d->reclaimable + d->writeback);
	x->wb_thresh = wb_thresh;
}

typedef void (*sim_event_fn)(struct sim *s, uint64_t t);

/* Run for @ms; @ev is called every ms with the time since start. */
static void sim_run(struct sim *s, uint64_t ms, int sample_dev, sim_event_fn ev)
{
	uint64_t t0 = t_clock_now(), t;
	int i;

	nr_samples = 0;
	for (t = 0; t < ms; t++) {
		uint64_t now = t0 + t;

		if (ev)
			ev(s, t);
		for (i = 0; i < s->nr_w; i++)
			sim_writer_tick(s, &s->w[i], now);
		for (i = 0; i < s->nr_dev; i++)
			sim_dev_tick(s, &s->dev[i], now);
		if (t % 200 == 0 && sample_dev >= 0)
			sim_sample(s, sample_dev, t0, now);
		t_clock_advance(1);
	}
}

static double rel_err(double got, double want)
{
	return fabs(got - want) / want;
}

/* max/min of the writers' pages completed inside the window (unpaced ones). */
static double sim_spread(struct sim *s, long *total)
{
	long mx = 0, mn = -1;
	int i;

	*total = 0;
	for (i = 0; i < s->nr_w; i++) {
		long p = s->w[i].window_pages;

		*total += p;
		if (s->w[i].rate)
			continue;
		if (p > mx)
			mx = p;
		if (mn < 0 || p < mn)
			mn = p;
	}
	return mn > 0 ? (double)mx / (double)mn : 1e9;
}

/*
 * N dd-like writers on one 50 MB/s device, 100 MB threshold, for 40 s:
 * dirty_ratelimit within 10% of avg_write_bw / N from 5 s on; dirty
 * within 10% of the setpoint from 10 s on; spread <= 1.1 over 10-40 s.
 */
static void check_n_writers(int n)
{
	struct sim *s = sim_new(100);
	long block = n >= 100 ? 32 : 64;	/* 128 KiB writes for 100 tasks, else 256 KiB */
	uint64_t converge_by = 5000;
	long total;
	double spread, worst_dr = 0, worst_dirty = 0;
	uint64_t converged_at = 0;
	int i;

	sim_add_dev(s, 50);
	for (i = 0; i < n; i++)
		sim_add_writer(s, 0, block, 0);
	s->window_start = t_clock_now() + 10000;
	s->window_end = t_clock_now() + 40000;
	sim_run(s, 40000, 0, NULL);
	for (i = 0; i < nr_samples; i++) {
		struct sim_sample *x = &samples[i];
		double e = rel_err((double)x->dr, 50.0 * MB_PAGES / n);

		if (e > 0.10)
			converged_at = x->t + 200;
		if (x->t >= converge_by && e > worst_dr)
			worst_dr = e;
		if (x->t >= 10000 && rel_err((double)x->dirty, (double)x->setpoint) > worst_dirty)
			worst_dirty = rel_err((double)x->dirty, (double)x->setpoint);
	}
	spread = sim_spread(s, &total);
	if (getenv("SIM_DEBUG")) {
		for (i = 0; i < nr_samples; i += 5)
			fprintf(stderr, "t=%5llu dr=%6ld bal=%6ld avg_bw=%6ld dirty=%6lu sp=%6lu\n",
				(unsigned long long)samples[i].t, samples[i].dr, samples[i].bal,
				samples[i].avg_bw, samples[i].dirty, samples[i].setpoint);
		for (i = 0; i < s->nr_w; i++)
			fprintf(stderr, "%ld/%ld/%ld ", s->w[i].window_pages, s->w[i].nr_pauses,
				s->w[i].max_pause);
		fprintf(stderr, "\n");
	}
	fprintf(stderr, "# %3d writers: dirty_ratelimit within 10%% of write_bw/N from %.1f s "
		"(worst after that %.1f%%), dirty vs setpoint worst %.1f%%, spread %.3f, "
		"%.1f MB/s, max pause %ld ms\n", n, converged_at / 1000.0, worst_dr * 100,
		worst_dirty * 100, spread, total / 30.0 / MB_PAGES, s->max_pause_seen);
	ck_assert_msg(converged_at <= converge_by, "%d writers: converged only at %llu ms", n,
		      (unsigned long long)converged_at);
	ck_assert_msg(worst_dirty <= 0.10, "%d writers: dirty %.1f%% off the setpoint", n,
		      worst_dirty * 100);
	ck_assert_msg(spread <= 1.1, "%d writers: spread %.3f", n, spread);
	ck_assert_msg(s->max_pause_seen <= THROTTLE_MAX_PAUSE_MS_DEFAULT, "pause %ld ms",
		      s->max_pause_seen);
	/* the device is kept busy: >= 95% of its bandwidth in the window */
	ck_assert_msg(total >= 0.95 * 30 * 50 * MB_PAGES, "%d writers: %.1f MB/s", n,
		      total / 30.0 / MB_PAGES);
	sim_free(s);
}

START_TEST(converge_1)
{
	check_n_writers(1);
}
END_TEST

START_TEST(converge_2)
{
	check_n_writers(2);
}
END_TEST

START_TEST(converge_10)
{
	check_n_writers(10);
}
END_TEST

START_TEST(converge_100)
{
	check_n_writers(100);
}
END_TEST

/*
 * Seed 003's experiment: one unlimited writer and three paced at 2, 4 and
 * 8 MB/s. The paced ones are below their fair share: never paused, and
 * they get their rate; the unlimited one gets the rest of the device.
 */
START_TEST(light_writers_run_free)
{
	struct sim *s = sim_new(100);
	static const long rates[] = { 2048, 4096, 8192 };	/* KB/s */
	long total;
	int i;

	sim_add_dev(s, 50);
	sim_add_writer(s, 0, 256, 0);
	for (i = 0; i < 3; i++)
		sim_add_writer(s, 0, 256, rates[i]);
	s->window_start = t_clock_now() + 10000;
	s->window_end = t_clock_now() + 60000;
	sim_run(s, 60000, 0, NULL);
	sim_spread(s, &total);
	for (i = 1; i <= 3; i++) {
		double got = s->w[i].window_pages / 50.0 * 4;	/* KB/s */

		fprintf(stderr, "# paced %ld KB/s: got %.0f KB/s, pauses %ld\n", rates[i - 1],
			got, s->w[i].nr_pauses);
		ck_assert_msg(s->w[i].nr_pauses == 0, "paced writer %d paused %ld times (max %ld ms)",
			      i, s->w[i].nr_pauses, s->w[i].max_pause);
		ck_assert_msg(got >= 0.95 * rates[i - 1], "paced writer %d: %.0f KB/s", i, got);
	}
	fprintf(stderr, "# unlimited: %.1f MB/s of %.1f\n", s->w[0].window_pages / 50.0 / MB_PAGES,
		total / 50.0 / MB_PAGES);
	ck_assert(s->w[0].window_pages / 50.0 >= 0.9 * (50 * MB_PAGES - 14 * MB_PAGES));
	sim_free(s);
}
END_TEST

static void drop_bw(struct sim *s, uint64_t t)
{
	if (t == 20000)
		s->dev[0].bw_pages /= 4;
}

/* The device slows down 4x at 20 s: write_bw follows, and dirty_ratelimit with it. */
START_TEST(bandwidth_drop_reconverges)
{
	struct sim *s = sim_new(100);
	int i, n = 4;
	double worst = 0;

	sim_add_dev(s, 80);
	for (i = 0; i < n; i++)
		sim_add_writer(s, 0, 64, 0);
	sim_run(s, 60000, 0, drop_bw);
	for (i = 0; i < nr_samples; i++) {
		struct sim_sample *x = &samples[i];

		/* the estimate is within 10% of the new bandwidth 20 s later
		 * (the kernel's ~4 s averaging period, then its spike filter),
		 * and the ratelimit with it */
		if (x->t >= 40000) {
			ck_assert_msg(rel_err((double)x->avg_bw, 20.0 * MB_PAGES) <= 0.10,
				      "avg_write_bw %ld at %llu", x->avg_bw,
				      (unsigned long long)x->t);
			if (rel_err((double)x->dr, (double)x->avg_bw / n) > worst)
				worst = rel_err((double)x->dr, (double)x->avg_bw / n);
		}
	}
	fprintf(stderr, "# 4x drop: dirty_ratelimit within %.1f%% of write_bw/N after 20 s\n",
		worst * 100);
	ck_assert(worst <= 0.10);
	sim_free(s);
}
END_TEST

static void change_ratio(struct sim *s, uint64_t t)
{
	if (t == 20000) {		/* echo smaller dirty_ratio: thresholds halve */
		s->thresh /= 2;
		s->bg_thresh /= 2;
	}
}

/* dirty_ratio halves at 20 s: dirty follows the new setpoint, the limit smoothly. */
START_TEST(dirty_ratio_change_reconverges)
{
	struct sim *s = sim_new(200);
	int i, n = 2;
	double worst = 0;

	sim_add_dev(s, 50);
	for (i = 0; i < n; i++)
		sim_add_writer(s, 0, 64, 0);
	sim_run(s, 60000, 0, change_ratio);
	for (i = 0; i < nr_samples; i++) {
		struct sim_sample *x = &samples[i];

		if (x->t >= 30000 && rel_err((double)x->dirty, (double)x->setpoint) > worst)
			worst = rel_err((double)x->dirty, (double)x->setpoint);
		if (x->t >= 30000)
			ck_assert(rel_err((double)x->dr, (double)x->avg_bw / n) <= 0.10);
	}
	fprintf(stderr, "# dirty_ratio halved: dirty within %.1f%% of the setpoint 10 s later\n",
		worst * 100);
	ck_assert(worst <= 0.10);
	/* the hard limit came down smoothly and is back at thresh */
	ck_assert_uint_le(s->dom.dirty_limit, s->thresh + s->thresh / 50);
	sim_free(s);
}
END_TEST

/* Two devices 10x apart, one writer each: shares follow their completions. */
START_TEST(two_devices_share_by_completions)
{
	struct sim *s = sim_new(100);
	unsigned long wt[2], wbg, th, bg;
	double share[2];
	int i;

	sim_add_dev(s, 100);
	sim_add_dev(s, 10);
	sim_add_writer(s, 0, 64, 0);
	sim_add_writer(s, 1, 64, 0);
	sim_run(s, 30000, -1, NULL);
	for (i = 0; i < 2; i++) {
		throttle_wb_thresholds(&s->dev[i].tw, &wt[i], &wbg, &th, &bg);
		share[i] = (double)wt[i] / (double)th;
	}
	fprintf(stderr, "# shares: fast %.3f slow %.3f (completions 10:1)\n", share[0], share[1]);
	ck_assert_msg(rel_err(share[0], 10.0 / 11) <= 0.05, "fast share %.3f", share[0]);
	ck_assert_msg(share[1] >= 0.5 / 11 && share[1] <= 2.0 / 11, "slow share %.3f", share[1]);
	/* each writer got about its own device's bandwidth */
	ck_assert(s->w[0].done_pages > 5 * s->w[1].done_pages);
	sim_free(s);
}
END_TEST

/*
 * strictlimit: a device limited to 10% of the threshold (max_ratio) stays
 * under its own limit although the domain is far below freerun; without
 * strictlimit it fills up to the global freerun point unthrottled.
 */
static unsigned long strict_run(bool strict)
{
	struct sim *s = sim_new(400);
	unsigned long worst = 0, wt = 0;
	int i;

	sim_add_dev(s, 50);
	atomic_store(&s->dev[0].tw.max_ratio, 10);
	atomic_store(&s->dev[0].tw.strictlimit, strict);
	sim_add_writer(s, 0, 64, 0);
	sim_run(s, 30000, 0, NULL);
	for (i = 0; i < nr_samples; i++) {
		if (samples[i].t < 5000)
			continue;
		wt = samples[i].wb_thresh;
		if (samples[i].wb_dirty > worst)
			worst = samples[i].wb_dirty;
	}
	fprintf(stderr, "# strictlimit=%d: wb_dirty max %lu pages, wb_thresh %lu\n", strict,
		worst, wt);
	ck_assert_uint_le(wt, 40 * MB_PAGES + 1);
	sim_free(s);
	return worst * 1000 / (wt ? wt : 1);	/* per mille of wb_thresh */
}

START_TEST(strictlimit_keeps_device_under_its_limit)
{
	ck_assert_uint_le(strict_run(true), 1000);
	ck_assert_uint_gt(strict_run(false), 2000);
}
END_TEST

/* A task that went away: its state is reclaimed, its unpaid pages charged on. */
static bool dead(pid_t pid)
{
	return false;
}

START_TEST(tasks_reaped)
{
	struct sim *s = sim_new(100);

	sim_add_dev(s, 50);
	sim_add_writer(s, 0, 16, 0);
	sim_add_writer(s, 0, 16, 0);
	sim_run(s, 3000, -1, NULL);
	ck_assert_int_eq(throttle_nr_tasks(&s->dom), 2);
	s->dom.task_alive = dead;
	s->nr_w = 0;
	t_clock_advance(2000);
	sim_add_writer(s, 0, 16, 0);	/* pid 1001 again: a new task with that pid */
	s->w[0].pid = 4242;
	sim_run(s, 10, -1, NULL);
	ck_assert_int_eq(throttle_nr_tasks(&s->dom), 1);
	ck_assert_int_eq(atomic_load(&s->dom.stats.nr_tasks_reaped), 2);
	sim_free(s);
}
END_TEST

/* The trace: records stream in order; a slow reader loses the oldest, counted. */
START_TEST(trace_ring)
{
	struct sim *s = sim_new(100);
	struct throttle_trace_rec r[8];
	uint64_t cur, lost;
	char line[512];
	size_t n;

	sim_add_dev(s, 50);
	sim_add_writer(s, 0, 64, 0);
	sim_add_writer(s, 0, 64, 0);
	sim_add_writer(s, 0, 64, 0);
	cur = throttle_trace_start(&s->dom);
	sim_run(s, 1000, -1, NULL);
	n = throttle_trace_read(&s->dom, &cur, r, 8, &lost);
	ck_assert_uint_gt(n, 0);
	ck_assert_uint_eq(lost, 0);
	throttle_trace_format(&r[0], line, sizeof(line));
	ck_assert_msg(strstr(line, " balance_dirty_pages bdi=7:0 limit=") || strstr(line, " bw bdi=7:0 write_bw="),
		      "%s", line);
	ck_assert(line[strlen(line) - 1] == '\n');
	sim_run(s, 60000, -1, NULL);	/* far more than the ring holds */
	ck_assert_uint_gt(s->dom.ring_seq, s->dom.ring_size);
	n = throttle_trace_read(&s->dom, &cur, r, 8, &lost);
	ck_assert_uint_eq(n, 8);
	ck_assert_uint_gt(lost, 0);
	ck_assert_uint_eq(r[0].seq, s->dom.ring_seq - s->dom.ring_size);
	sim_free(s);
}
END_TEST

/*
 * The shares themselves, on the fake clock: completions 3:1 give 750/250;
 * a device that stops completing loses half its weight per 3 s period
 * while the other's grows, and a removed device leaves its count behind
 * without a share.
 */
START_TEST(shares_follow_completions)
{
	struct sim *s = sim_new(100);
	struct sim_dev *a = sim_add_dev(s, 100), *b = sim_add_dev(s, 100);
	unsigned before, after;
	int i;

	ck_assert_uint_eq(throttle_wb_share(&a->tw), 0);
	throttle_wb_completed(&a->tw, 3000);
	throttle_wb_completed(&b->tw, 1000);
	ck_assert_uint_eq(throttle_wb_share(&a->tw), 750);
	ck_assert_uint_eq(throttle_wb_share(&b->tw), 250);
	/* a stops; b keeps completing 1000 pages per period */
	for (i = 0; i < 4; i++) {
		t_clock_advance(3000);
		throttle_wb_completed(&b->tw, 1000);
	}
	before = throttle_wb_share(&a->tw);
	/* a: 3000 / 16; b: 1000/16 + 1000/8 + 1000/4 + 1000/2 + 1000 */
	ck_assert_uint_le(before, 95);	/* 187.5 / 2125 = 88 */
	ck_assert_uint_ge(before, 82);
	ck_assert_uint_eq(before + throttle_wb_share(&b->tw) >= 998, 1);
	/* nothing completes for a minute: both decay, the ratio stays */
	t_clock_advance(9000);
	after = throttle_wb_share(&a->tw);
	ck_assert_uint_le(after > before ? after - before : before - after, 2);
	sim_free(s);
}
END_TEST

START_TEST(mode_names)
{
	enum throttle_mode m;

	ck_assert_int_eq(throttle_mode_parse("simple\n", 7, &m), 0);
	ck_assert_int_eq(m, THROTTLE_SIMPLE);
	ck_assert_int_eq(throttle_mode_parse("ioless", 6, &m), 0);
	ck_assert_int_eq(m, THROTTLE_IOLESS);
	ck_assert_int_eq(throttle_mode_parse("writeback\n", 10, &m), 0);
	ck_assert_int_eq(m, THROTTLE_WRITEBACK);
	ck_assert_int_eq(throttle_mode_parse("fast", 4, &m), -EINVAL);
	ck_assert_str_eq(throttle_mode_name(THROTTLE_SIMPLE), "simple");
	ck_assert_str_eq(throttle_mode_name(THROTTLE_WRITEBACK), "writeback");
}
END_TEST

/*
 * throttle=writeback (balance_dirty_pages before 3.2): a dirtier is looked
 * at every ratelimit pages, 8 while its device is over; it must write
 * only when its device is over its share and the domain past the middle
 * of the background and hard thresholds; over the background threshold
 * background writeback is kicked either way.
 */
START_TEST(writeback_mode_decisions)
{
	struct sim *s = sim_new(100);		/* thresh 25600 pages, bg 12800 */
	struct sim_dev *a = sim_add_dev(s, 100), *b = sim_add_dev(s, 100);

	throttle_wb_completed(&b->tw, 1000);	/* b has the whole share */
	ck_assert(!throttle_writeback_due(&a->tw, 1, 10, 32));
	ck_assert(throttle_writeback_due(&a->tw, 1, 22, 32));
	ck_assert(!throttle_writeback_due(&a->tw, 1, 31, 32));	/* counted afresh */
	ck_assert(!throttle_writeback_due(&a->tw, 2, 31, 32));	/* per task */

	a->reclaimable = 1000;
	ck_assert(!throttle_writeback_over(&a->tw));
	ck_assert(!a->bg_active);
	/* over the background threshold, below the middle: kicked, not made to write */
	a->reclaimable = 14000;
	ck_assert(!throttle_writeback_over(&a->tw));
	ck_assert(a->bg_active);
	ck_assert(!a->tw.dirty_exceeded);
	/* past the middle (19200) and over its (small) share: it writes */
	a->reclaimable = 15000;
	a->writeback = 5000;
	ck_assert(throttle_writeback_over(&a->tw));
	ck_assert(a->tw.dirty_exceeded);
	ck_assert_int_eq(atomic_load(&s->dom.stats.nr_dirtier_evals), 1);
	ck_assert(throttle_writeback_due(&a->tw, 1, 8, 32));	/* 8 while over */
	/* b, with the share, is under its threshold at the same domain count */
	b->reclaimable = 1000;
	ck_assert(!throttle_writeback_over(&b->tw));
	/* written down: a is under again, and its ratelimit is back */
	a->reclaimable = 2000;
	a->writeback = 0;
	ck_assert(!throttle_writeback_over(&a->tw));
	ck_assert(!throttle_writeback_due(&a->tw, 1, 8, 32));
	sim_free(s);
}
END_TEST

static Suite *throttle_suite(void)
{
	Suite *s = suite_create("throttle");
	TCase *tc;

	tc = t_tcase(s, "core", converge_1, converge_2, converge_10, converge_100,
		     light_writers_run_free, bandwidth_drop_reconverges,
		     dirty_ratio_change_reconverges, two_devices_share_by_completions,
		     shares_follow_completions, strictlimit_keeps_device_under_its_limit,
		     tasks_reaped, trace_ring, mode_names, writeback_mode_decisions);
	tcase_set_timeout(tc, 120);
	return s;
}

int main(void)
{
	return t_run(throttle_suite());
}
