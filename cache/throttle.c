// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * IO-less dirty throttling, after mm/page-writeback.c's balance_dirty_pages
 * (doc/algorithms.md §0-2). Units: pages, milliseconds (HZ = 1000), rates in
 * pages/s, ratios in x1024 fixed point (RL_SHIFT).
 *
 * Where wbcfs departs from the kernel, and why:
 * - A FUSE WRITE dirties up to 256 pages at once, where the kernel charges
 *   a write(2) page by page and pauses every nr_dirtied_pause pages. A
 *   pause that would exceed max_pause therefore pays only for the pages
 *   that fit in max_pause; the rest stay owed and are paid by the next
 *   pause of the same write (throttle_resume), so one write(2) may sleep
 *   several times, each pause at most max_pause, as in the kernel. The
 *   kernel instead forgives the excess beyond 2 * max_pause, which only
 *   happens there when task_ratelimit drops suddenly.
 * - The daemon knows how many tasks dirty pages (its task table). When a
 *   device starts being throttled after a second or more of freerun, its
 *   dirty_ratelimit starts at avg_write_bw / (tasks dirtying in the last
 *   second) instead of where it was left: the kernel ramps from 100 MB/s
 *   (or from the previous workload's rate) by 1/8 of the gap per 200 ms,
 *   which takes ~7 s for 100 writers. For the first 3 s after that, each
 *   ratelimit update moves halfway to balanced_dirty_ratelimit, a
 *   measurement of write_bw / N, when it is within 2x (samples that
 *   straddle the end of freerun are not); the kernel's damped steps take over
 *   from there (they close a 20% gap by only ~0.5% per 200 ms and rely
 *   on the position control meanwhile). The same 3 s of halving follow a
 *   change of the device's bandwidth estimate by a quarter or more.
 * - No per-CPU counters: the daemon's counters are exact, so the
 *   "stat error" slack is a constant (8 pages).
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wbcfs/lib/clock.h"
#include "wbcfs/cache/throttle.h"
#include "wbcfs/lib/lockstat.h"
#include "cache_i.h"

LOCK_CLASS(lc_throttle_lock, "throttle_lock")

#define RL_SHIFT 10			/* RATELIMIT_CALC_SHIFT */
#define BW_INTERVAL_MS 200		/* BANDWIDTH_INTERVAL */
#define INIT_BW 25600			/* 100 MB/s in pages/s */
#define FPROP_PERIOD_MS 3000		/* completions halve every 3 s */
#define STAT_ERROR 8			/* pages of slack (wb_stat_error) */
#define SEED_IDLE_MS 1000		/* freerun this long: seed the ratelimit */
#define RL_FAST_UPDATES 15		/* then move halfway to balanced, this many times */
#define TASK_ACTIVE_MS 1000		/* a task dirtying within this is active */

/* The control variables of one evaluation (dirty_throttle_control). */
struct dtc {
	unsigned long nr_dirty, dirty, thresh, bg_thresh, limit;
	unsigned long wb_dirty, wb_thresh, wb_bg_thresh;
	long pos_ratio;
	struct throttle_wb_stat st;
};

static unsigned long ilog2_ul(unsigned long v)
{
	return v ? (unsigned long)(63 - __builtin_clzl(v)) : 0;
}

static unsigned long min_ul(unsigned long a, unsigned long b)
{
	return a < b ? a : b;
}

static unsigned long max_ul(unsigned long a, unsigned long b)
{
	return a > b ? a : b;
}

/* ---- flex proportions of writeback completions --------------------------- */

/* Halve the global count once per elapsed period (lazily, missed ones too). */
static void fprop_advance(struct throttle_domain *d, uint64_t now)
{
	uint64_t n;

	if (now < d->fprop_period_start + FPROP_PERIOD_MS)
		return;
	n = (now - d->fprop_period_start) / FPROP_PERIOD_MS;
	d->fprop_events = n >= 64 ? 0 : d->fprop_events >> n;
	d->fprop_period += n;
	d->fprop_period_start += n * FPROP_PERIOD_MS;
}

/* Bring a local count to the current period (halved once per period missed). */
static void fprop_local_sync(struct throttle_domain *d, struct throttle_fprop_local *l)
{
	uint64_t n = d->fprop_period - l->period;

	if (n)
		l->events = n >= 64 ? 0 : l->events >> n;
	l->period = d->fprop_period;
}

void throttle_wb_completed(struct throttle_wb *tw, long nr)
{
	struct throttle_domain *d = tw->dom;

	if (nr <= 0)
		return;
	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	fprop_advance(d, clock_now_ms());
	fprop_local_sync(d, &tw->completions);
	tw->completions.events += (uint64_t)nr;
	d->fprop_events += (uint64_t)nr;
	ls_mutex_unlock(&d->lock);
}

/* ---- thresholds ------------------------------------------------------------- */

static unsigned long sum_min_ratio(struct throttle_domain *d)
{
	struct throttle_wb *w;
	unsigned long sum = 0;

	list_for_each_entry(w, &d->wbs, node)
		sum += atomic_load(&w->min_ratio);
	return sum > 100 ? 100 : sum;
}

/* wb_calc_thresh: the device's share of @thresh from its completions. */
static unsigned long wb_calc_thresh(struct throttle_wb *tw, unsigned long thresh,
				    unsigned long dirty, uint64_t now)
{
	struct throttle_domain *d = tw->dom;
	unsigned long min_r = atomic_load(&tw->min_ratio), max_r = atomic_load(&tw->max_ratio);
	unsigned long wb_thresh;
	uint64_t num, den;

	fprop_advance(d, now);
	fprop_local_sync(d, &tw->completions);
	num = tw->completions.events;
	den = d->fprop_events;
	if (num > den)
		num = den;
	wb_thresh = (unsigned long)((uint64_t)thresh * (100 - sum_min_ratio(d)) / 100);
	wb_thresh = den ? (unsigned long)((__uint128_t)wb_thresh * num / den) : 0;
	wb_thresh += thresh * min_r / 100;
	if (wb_thresh > thresh * max_r / 100)
		wb_thresh = thresh * max_r / 100;
	/* an idle device gets a start, so occasional writes are not blocked */
	if (thresh > dirty)
		wb_thresh = max_ul(wb_thresh, (thresh - dirty) /
					      (atomic_load(&tw->strictlimit) ? 100 : 8));
	return wb_thresh;
}

static void domain_limits(struct throttle_domain *d, struct dtc *c)
{
	struct throttle_global g;

	d->global(d->global_arg, &g);
	c->nr_dirty = g.nr_dirty;
	c->dirty = g.nr_dirty + g.nr_writeback;
	c->thresh = g.thresh ? g.thresh : 1;
	c->bg_thresh = g.bg_thresh < c->thresh ? g.bg_thresh : c->thresh / 2;
	c->limit = max_ul(c->thresh, d->dirty_limit);
}

static void wb_limits(struct throttle_wb *tw, struct dtc *c, uint64_t now)
{
	tw->ops->stat(tw, &c->st);
	c->wb_dirty = (unsigned long)(c->st.reclaimable > 0 ? c->st.reclaimable : 0) +
		      (unsigned long)(c->st.writeback > 0 ? c->st.writeback : 0);
	c->wb_thresh = wb_calc_thresh(tw, c->thresh, c->dirty, now);
	c->wb_bg_thresh = c->thresh ? (unsigned long)((uint64_t)c->wb_thresh * c->bg_thresh /
						       c->thresh) : 0;
}

static unsigned long freerun_ceiling(unsigned long thresh, unsigned long bg)
{
	return (thresh + bg) / 2;
}

/* The smoothed limit: up to thresh at once, down 1/32 of the gap per 200 ms. */
static void domain_update_dirty_limit(struct throttle_domain *d, const struct dtc *c,
				      uint64_t now)
{
	unsigned long limit = d->dirty_limit, t = c->thresh;

	if (now < d->dirty_limit_stamp + BW_INTERVAL_MS)
		return;
	if (limit < t) {
		limit = t;
	} else {
		t = max_ul(t, c->dirty);
		if (limit > t)
			limit -= (limit - t) >> 5;
	}
	d->dirty_limit = limit;
	d->dirty_limit_stamp = now;
}

/* ---- position ratio ------------------------------------------------------------ */

/* 1 + ((setpoint - dirty) / (limit - setpoint))^3, clamped to [0, 2]. */
static long pos_ratio_polynom(unsigned long setpoint, unsigned long dirty, unsigned long limit)
{
	long long x, pos;

	x = (((long long)setpoint - (long long)dirty) << RL_SHIFT) /
	    (long long)((limit - setpoint) | 1);
	pos = x;
	pos = pos * x >> RL_SHIFT;
	pos = pos * x >> RL_SHIFT;
	pos += 1 << RL_SHIFT;
	if (pos < 0)
		pos = 0;
	if (pos > 2 << RL_SHIFT)
		pos = 2 << RL_SHIFT;
	return (long)pos;
}

static void wb_position_ratio(struct throttle_wb *tw, struct dtc *c)
{
	unsigned long write_bw = (unsigned long)(c->st.avg_write_bw > 1 ? c->st.avg_write_bw : 1);
	unsigned long freerun = freerun_ceiling(c->thresh, c->bg_thresh);
	unsigned long limit = c->limit, wb_thresh = c->wb_thresh;
	unsigned long setpoint, wb_setpoint, span, x_intercept;
	long long pos;
	uint64_t x;

	c->pos_ratio = 0;
	if (c->dirty >= limit)
		return;
	setpoint = (freerun + limit) / 2;
	pos = pos_ratio_polynom(setpoint, c->dirty, limit);

	if (atomic_load(&tw->strictlimit)) {
		long wb_pos;

		if (c->wb_dirty < 8) {
			c->pos_ratio = (long)(pos * 2 < (2 << RL_SHIFT) ? pos * 2 : (2 << RL_SHIFT));
			return;
		}
		if (c->wb_dirty >= wb_thresh)
			return;
		wb_setpoint = freerun_ceiling(wb_thresh, c->wb_bg_thresh);
		if (wb_setpoint == 0 || wb_setpoint == wb_thresh)
			return;
		wb_pos = pos_ratio_polynom(wb_setpoint, c->wb_dirty, wb_thresh);
		c->pos_ratio = (long)(pos < wb_pos ? pos : wb_pos);
		return;
	}

	/* the device's control line: wb_setpoint scales the global one */
	if (wb_thresh > c->thresh)
		wb_thresh = c->thresh;
	wb_thresh = max_ul(wb_thresh, (limit - c->dirty) / 8);
	x = ((uint64_t)wb_thresh << 16) / (c->thresh | 1);
	wb_setpoint = (unsigned long)((uint64_t)setpoint * x >> 16);
	span = (unsigned long)((uint64_t)(c->thresh - wb_thresh + 8 * write_bw) * x >> 16);
	x_intercept = wb_setpoint + span;
	if (c->wb_dirty < x_intercept - span / 4)
		pos = pos * (long long)(x_intercept - c->wb_dirty) /
		      (long long)((x_intercept - wb_setpoint) | 1);
	else
		pos /= 4;

	/* reserve area: a nearly empty device must not run dry */
	x_intercept = wb_thresh / 2;
	if (c->wb_dirty < x_intercept) {
		if (c->wb_dirty > x_intercept / 8)
			pos = pos * (long long)x_intercept / (long long)c->wb_dirty;
		else
			pos *= 8;
	}
	c->pos_ratio = (long)pos;
}

/* ---- trace ------------------------------------------------------------------------ */

static unsigned long kbps(unsigned long pages_per_s)
{
	return pages_per_s * 4;
}

static void trace_balance_dirty_pages(struct throttle_domain *d, struct throttle_wb *tw, const struct dtc *c,
		      long dirty_rl, long task_rl, long dirtied, long dirtied_pause,
		      long period, long pause, uint64_t start, uint64_t now, uint64_t paused_when,
		      pid_t pid)
{
	struct throttle_trace_rec *r = throttle_trace_new(d, tw, TT_BDP, now);
	unsigned long freerun = freerun_ceiling(c->thresh, c->bg_thresh);
	unsigned long setpoint = (c->limit + freerun) / 2;

	if (!r)
		return;
	r->balance_dirty_pages.limit = c->limit;
	r->balance_dirty_pages.setpoint = setpoint;
	r->balance_dirty_pages.dirty = c->dirty;
	r->balance_dirty_pages.bdi_setpoint = (unsigned long)((uint64_t)setpoint * c->wb_thresh / (c->thresh + 1));
	r->balance_dirty_pages.bdi_dirty = c->wb_dirty;
	r->balance_dirty_pages.dirty_ratelimit = kbps((unsigned long)dirty_rl);
	r->balance_dirty_pages.task_ratelimit = kbps((unsigned long)task_rl);
	r->balance_dirty_pages.dirtied = dirtied;
	r->balance_dirty_pages.dirtied_pause = dirtied_pause;
	r->balance_dirty_pages.paused = (long)(now - start);
	r->balance_dirty_pages.pause = pause;
	r->balance_dirty_pages.period = period;
	r->balance_dirty_pages.think = paused_when ? (long)(now - paused_when) : 0;
	r->balance_dirty_pages.pid = pid;
	throttle_trace_done(d);
}

/* ---- the ratelimit -------------------------------------------------------------- */

static long nr_active_tasks(struct throttle_domain *d, uint64_t now)
{
	long n = 0;
	unsigned i;

	for (i = 0; i < THROTTLE_TASK_HASH; i++)
		for (struct throttle_task *t = d->tasks[i]; t; t = t->next)
			if (now - t->last_seen <= TASK_ACTIVE_MS)
				n++;
	return n ? n : 1;
}

/* nr_active_tasks, recounted at most every 100 ms. Lock held. */
static long nr_active_cached(struct throttle_domain *d, uint64_t now)
{
	if (!d->nr_active || now - d->nr_active_stamp >= 100) {
		d->nr_active = nr_active_tasks(d, now);
		d->nr_active_stamp = now;
	}
	return d->nr_active;
}

/*
 * wb_update_dirty_ratelimit: balanced = task_ratelimit * write_bw /
 * dirty_rate estimates write_bw / N; dirty_ratelimit steps towards it
 * only when the rate error and the position error agree, by a damped step.
 */
static void wb_update_dirty_ratelimit(struct throttle_wb *tw, struct dtc *c, long dirtied,
				      uint64_t elapsed)
{
	unsigned long freerun = freerun_ceiling(c->thresh, c->bg_thresh);
	unsigned long setpoint = (freerun + c->limit) / 2, dirty = c->dirty;
	unsigned long write_bw = (unsigned long)(c->st.avg_write_bw > 1 ? c->st.avg_write_bw : 1);
	unsigned long dr = (unsigned long)tw->dirty_ratelimit;
	unsigned long dirty_rate, task_rl, balanced, step = 0, x, shift;

	dirty_rate = (unsigned long)((uint64_t)(dirtied - tw->dirtied_stamp) * HZ / elapsed);
	task_rl = (unsigned long)((uint64_t)dr * (unsigned long)c->pos_ratio >> RL_SHIFT) + 1;
	balanced = (unsigned long)((uint64_t)task_rl * write_bw / (dirty_rate | 1));
	if (balanced > write_bw)
		balanced = write_bw;

	if (atomic_load(&tw->strictlimit)) {
		dirty = c->wb_dirty;
		setpoint = c->wb_dirty < 8 ? c->wb_dirty + 1
					   : (c->wb_thresh + c->wb_bg_thresh) / 2;
	}
	if (dirty < setpoint) {
		x = min_ul(min_ul((unsigned long)tw->balanced_dirty_ratelimit, balanced), task_rl);
		if (dr < x)
			step = x - dr;
	} else {
		x = max_ul(max_ul((unsigned long)tw->balanced_dirty_ratelimit, balanced), task_rl);
		if (dr > x)
			step = dr - x;
	}
	if (tw->rl_fresh) {
		/*
		 * The first seconds after a seed: half the agreed gap, undamped
		 * (see top). Only a gap both errors agree on moves it: below the
		 * setpoint dirty_ratelimit never falls, above it never rises,
		 * or writers still running free near freerun (an inflated
		 * dirty_rate) would drive it to nothing.
		 */
		step /= 2;
		tw->rl_fresh--;
	} else {
		shift = dr / (2 * step + 1);
		step = shift < 64 ? ((step >> shift) + 7) / 8 : 0;
	}
	if (dr < balanced)
		dr += step;
	else
		dr -= step;
	tw->dirty_ratelimit = (long)(dr > 1 ? dr : 1);
	tw->balanced_dirty_ratelimit = (long)balanced;
	tw->last_dirty_rate = (long)dirty_rate;
	tw->last_task_ratelimit = (long)task_rl;
}

/* __wb_update_bandwidth with update_ratelimit: every >= 200 ms from balance_dirty_pages. */
static void wb_update_bandwidth(struct throttle_wb *tw, struct dtc *c, uint64_t now)
{
	struct throttle_domain *d = tw->dom;
	uint64_t elapsed = now - tw->rl_stamp_ms;
	struct throttle_trace_rec *r;

	tw->ops->update_bw(tw, now);
	tw->ops->stat(tw, &c->st);
	domain_update_dirty_limit(d, c, now);
	if (!tw->rl_stamp_ms || elapsed > SEED_IDLE_MS) {
		/* was idle: start measuring the dirty rate from here */
		tw->rl_stamp_ms = now;
		tw->dirtied_stamp = c->st.dirtied;
		return;
	}
	/* the device changed speed by a quarter or more: converge quickly again */
	if (labs(c->st.avg_write_bw - tw->fast_bw) > tw->fast_bw / 4) {
		tw->fast_bw = c->st.avg_write_bw;
		tw->rl_fresh = RL_FAST_UPDATES;
	}
	wb_update_dirty_ratelimit(tw, c, c->st.dirtied, elapsed);
	r = throttle_trace_new(d, tw, TT_BW, now);
	if (r) {
		r->bw.write_bw = kbps((unsigned long)c->st.write_bw);
		r->bw.avg_write_bw = kbps((unsigned long)c->st.avg_write_bw);
		r->bw.dirty_rate = kbps((unsigned long)tw->last_dirty_rate);
		r->bw.dirty_ratelimit = kbps((unsigned long)tw->dirty_ratelimit);
		r->bw.task_ratelimit = kbps((unsigned long)tw->last_task_ratelimit);
		r->bw.balanced_dirty_ratelimit = kbps((unsigned long)tw->balanced_dirty_ratelimit);
		r->bw.dirtied = c->st.dirtied;
		r->bw.written = c->st.written;
		r->bw.nr_dirty = c->nr_dirty;
		r->bw.nr_writeback = c->dirty - c->nr_dirty;
		r->bw.bg_thresh = c->bg_thresh;
		r->bw.thresh = c->thresh;
		r->bw.limit = c->limit;
		throttle_trace_done(d);
	}
	tw->rl_stamp_ms = now;
	tw->dirtied_stamp = c->st.dirtied;
}

/* ---- pauses ---------------------------------------------------------------------- */

/* About 1/8 of the time needed to write out wb_dirty, at most max_pause. */
static long wb_max_pause(const struct dtc *c, long max_pause_ms)
{
	unsigned long bw = (unsigned long)(c->st.avg_write_bw > 0 ? c->st.avg_write_bw : 0);
	unsigned long t = c->wb_dirty / (1 + bw / 128) + 1;	/* roundup_pow2(1 + HZ/8) */

	return (long)(t < (unsigned long)max_pause_ms ? t : (unsigned long)max_pause_ms);
}

/* The shortest pause worth sleeping, and the next poll interval. */
static long wb_min_pause(const struct dtc *c, long dirty_rl, long max_pause,
			 unsigned long task_rl, long *nr_dirtied_pause)
{
	long hi = (long)ilog2_ul((unsigned long)(c->st.avg_write_bw > 1 ? c->st.avg_write_bw : 1));
	long lo = (long)ilog2_ul((unsigned long)dirty_rl);
	long t = HZ / 100, pause, pages;

	if (hi > lo)
		t += (hi - lo) * (10 * HZ) / 1024;
	t = t < 1 + max_pause / 2 ? t : 1 + max_pause / 2;
	pages = dirty_rl * t / 1024;			/* roundup_pow2(HZ) */
	if (pages < DIRTY_POLL_THRESH) {
		t = max_pause;
		pages = dirty_rl * t / 1024;
		if (pages > DIRTY_POLL_THRESH) {
			pages = DIRTY_POLL_THRESH;
			t = HZ * DIRTY_POLL_THRESH / dirty_rl;
		}
	}
	pause = HZ * pages / (long)(task_rl + 1);
	if (pause > max_pause) {
		t = max_pause;
		pages = (long)task_rl * t / 1024;
	}
	*nr_dirtied_pause = pages;
	return pages >= DIRTY_POLL_THRESH ? 1 + t / 2 : t;
}

/* dirty_poll_interval: ~sqrt of the headroom to thresh. */
static long dirty_poll_interval(unsigned long dirty, unsigned long thresh)
{
	if (thresh > dirty)
		return 1L << (ilog2_ul(thresh - dirty) >> 1);
	return 1;
}

static void note_pause(struct throttle_domain *d, long pause)
{
	long max = atomic_load(&d->stats.pause_ms_max);

	atomic_fetch_add(&d->stats.nr_pauses, 1);
	atomic_fetch_add(&d->stats.pause_ms_total, pause);
	if (pause > max)
		atomic_store(&d->stats.pause_ms_max, pause);
}

/*
 * One pass of balance_dirty_pages for @t, which owes t->nr_dirtied pages.
 * Returns the verdict: pause_ms > 0 to sleep, with hard_limit when the
 * domain is at or over its limit. Lock held.
 */
static struct throttle_verdict balance_dirty_pages(struct throttle_wb *tw, struct throttle_task *t,
				   uint64_t now, uint64_t start)
{
	struct throttle_domain *d = tw->dom;
	struct throttle_verdict v = { 0 };
	bool strict = atomic_load(&tw->strictlimit);
	long max_pause_opt = (long)atomic_load(&d->max_pause_ms);
	unsigned long dirty, thresh, bg;
	long pages = t->nr_dirtied, task_rl, dirty_rl, max_p, min_p, period, pause, ndp;
	uint64_t paid_until = 0;	/* a partial payment: the task's clock after it */
	bool partial = false;
	struct dtc c;

	domain_limits(d, &c);
	wb_limits(tw, &c, now);
	if (strict) {
		dirty = c.wb_dirty;
		thresh = c.wb_thresh;
		bg = c.wb_bg_thresh;
	} else {
		dirty = c.dirty;
		thresh = c.thresh;
		bg = c.bg_thresh;
	}
	if (c.nr_dirty > c.bg_thresh || (strict && (unsigned long)c.st.reclaimable > bg))
		v.kick = true;
	if (dirty <= freerun_ceiling(thresh, bg)) {
		t->paused_when = now;
		t->nr_dirtied = 0;
		t->nr_dirtied_pause = dirty_poll_interval(dirty, thresh);
		/*
		 * All tasks together may not jump from freerun past the limit
		 * before any of them looks again: the kernel bounds that with
		 * per-CPU counters (few tasks run at once); FUSE brings the
		 * writes of every task at once, so share half the headroom.
		 */
		if (thresh > dirty) {
			long share = (long)((thresh - dirty) / 2) / nr_active_cached(d, now);

			if (t->nr_dirtied_pause > share)
				t->nr_dirtied_pause = share > 1 ? share : 1;
		}
		return v;
	}
	v.kick = true;
	atomic_fetch_add(&d->stats.nr_evaluations, 1);
	tw->dirty_exceeded = c.wb_dirty > c.wb_thresh && (c.dirty > c.thresh || strict);
	wb_position_ratio(tw, &c);

	if (now - tw->last_throttled_ms > SEED_IDLE_MS) {
		/* throttling starts after freerun: begin at write_bw / N */
		long bw = c.st.avg_write_bw > 1 ? c.st.avg_write_bw : 1;

		tw->dirty_ratelimit = bw / nr_active_tasks(d, now);
		if (tw->dirty_ratelimit < 1)
			tw->dirty_ratelimit = 1;
		tw->balanced_dirty_ratelimit = tw->dirty_ratelimit;
		tw->rl_stamp_ms = 0;
		tw->rl_fresh = RL_FAST_UPDATES;
		tw->fast_bw = bw;
	}
	tw->last_throttled_ms = now;
	if (now >= tw->rl_stamp_ms + BW_INTERVAL_MS)
		wb_update_bandwidth(tw, &c, now);

	dirty_rl = tw->dirty_ratelimit;
	task_rl = (long)((uint64_t)dirty_rl * (unsigned long)c.pos_ratio >> RL_SHIFT);
	max_p = wb_max_pause(&c, max_pause_opt);
	min_p = wb_min_pause(&c, dirty_rl, max_p, (unsigned long)task_rl, &ndp);

	if (task_rl == 0) {
		/* at the hard limit: sleep max_pause and look again */
		period = max_p;
		pause = max_p;
		v.hard_limit = c.wb_dirty > STAT_ERROR;
		atomic_fetch_add(&d->stats.nr_hard_limit, 1);
		goto do_pause;
	}
	period = HZ * pages / task_rl;
	pause = period;
	if (t->paused_when)
		pause -= (long)(now - t->paused_when);
	if (pause < min_p) {
		/* no sleep: credit the think time, or reset after 1 s idle */
		trace_balance_dirty_pages(d, tw, &c, dirty_rl, task_rl, pages, t->nr_dirtied_pause, period,
			  pause < 0 ? pause : 0, start, now, t->paused_when, t->pid);
		if (pause < -HZ) {
			t->paused_when = now;
			t->nr_dirtied = 0;
		} else if (period) {
			t->paused_when += (uint64_t)period;
			t->nr_dirtied = 0;
		} else if (t->nr_dirtied_pause <= pages) {
			t->nr_dirtied_pause += pages;
		}
		return v;
	}
	if (pause > max_p) {
		/*
		 * Pay for the whole pages that fit in max_pause (plus the think
		 * time); the rest is owed (see top). The task's clock advances
		 * by exactly what was paid, so the fraction of a page the pause
		 * paid for beyond them is credited to the next evaluation
		 * instead of lost (which would favour tasks by their timing).
		 */
		uint64_t t0 = t->paused_when ? t->paused_when : now;
		long credit = max_p + (long)(now - t0);
		long payable = credit > 0 ? (long)((uint64_t)task_rl * (uint64_t)credit / HZ) : 0;

		pause = max_p;
		if (payable < pages) {
			period = HZ * payable / task_rl;
			t->nr_dirtied = pages - payable;
			pages = payable;
			paid_until = t0 + (uint64_t)period;
			partial = true;
		}
	}
do_pause:
	trace_balance_dirty_pages(d, tw, &c, dirty_rl, task_rl, pages, ndp, period, pause, start, now,
		  t->paused_when, t->pid);
	note_pause(d, pause);
	t->paused_when = partial ? paid_until : now + (uint64_t)pause;
	if (!partial && !v.hard_limit)
		t->nr_dirtied = 0;	/* paid in full (else owed: paid after this pause) */
	t->at_limit = v.hard_limit;
	t->nr_dirtied_pause = ndp;
	v.pause_ms = pause;
	return v;
}

/* ---- a task dirtied pages ------------------------------------------------------- */

/* The count of pages at which a task is looked at: 8 (32 KiB, poll often) while @tw is over. */
static long poll_limit(const struct throttle_wb *tw, long rl)
{
	return tw->dirty_exceeded && rl > 8 ? 8 : rl;
}

struct throttle_verdict throttle_dirtied(struct throttle_wb *tw, pid_t pid, long nr)
{
	struct throttle_domain *d = tw->dom;
	struct throttle_verdict v = { 0 };
	struct throttle_task *t;
	uint64_t now = clock_now_ms();
	long rl;

	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	t = throttle_task_dirtied_locked(d, pid, nr, now);
	if (!t)
		goto out;
	rl = poll_limit(tw, t->nr_dirtied_pause);
	if (d->dirty_leaks > 0 && t->nr_dirtied < rl) {
		long take = d->dirty_leaks < rl - t->nr_dirtied ? d->dirty_leaks
								 : rl - t->nr_dirtied;

		d->dirty_leaks -= take;
		t->nr_dirtied += take;
	}
	if (t->nr_dirtied >= rl) {
		t->start_ms = now;
		v = balance_dirty_pages(tw, t, now, now);
	}
out:
	ls_mutex_unlock(&d->lock);
	if (v.kick)
		tw->ops->kick(tw);	/* takes the flusher's lock: not under ours */
	return v;
}

struct throttle_verdict throttle_resume(struct throttle_wb *tw, pid_t pid)
{
	struct throttle_domain *d = tw->dom;
	struct throttle_verdict v = { 0 };
	struct throttle_task *t;
	uint64_t now = clock_now_ms();

	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	t = throttle_task_get(d, pid, now);
	if (t && (t->at_limit || (t->nr_dirtied > 0 && t->nr_dirtied >= t->nr_dirtied_pause)))
		v = balance_dirty_pages(tw, t, now, t->start_ms);
	else if (t)
		t->at_limit = false;
	ls_mutex_unlock(&d->lock);
	if (v.kick)
		tw->ops->kick(tw);
	return v;
}

/* ---- throttle=writeback: the dirtier writes (2.6.24-3.1) ----------------------------- */

bool throttle_writeback_due(struct throttle_wb *tw, pid_t pid, long nr, long ratelimit)
{
	struct throttle_domain *d = tw->dom;
	struct throttle_task *t;
	uint64_t now = clock_now_ms();
	bool due = false;

	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	t = throttle_task_dirtied_locked(d, pid, nr, now);
	if (t && t->nr_dirtied >= poll_limit(tw, ratelimit)) {
		t->nr_dirtied = 0;
		due = true;
	}
	ls_mutex_unlock(&d->lock);
	return due;
}

bool throttle_writeback_over(struct throttle_wb *tw)
{
	struct throttle_domain *d = tw->dom;
	bool over, kick;
	struct dtc c;

	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	domain_limits(d, &c);
	wb_limits(tw, &c, clock_now_ms());
	/* throttled only when background writeback cannot catch up */
	over = c.wb_dirty > c.wb_thresh && c.dirty >= (c.bg_thresh + c.thresh) / 2;
	tw->dirty_exceeded = over;
	kick = c.nr_dirty > c.bg_thresh;
	ls_mutex_unlock(&d->lock);
	if (over)
		atomic_fetch_add(&d->stats.nr_dirtier_evals, 1);
	if (kick)
		tw->ops->kick(tw);	/* pdflush_operation(background_writeout) */
	return over;
}

/* ---- setup, queries ----------------------------------------------------------------- */

int throttle_domain_init(struct throttle_domain *d,
			 void (*global)(void *arg, struct throttle_global *g), void *arg,
			 size_t ring_records)
{
	memset(d, 0, sizeof(*d));
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->ring_cond, NULL);
	list_init(&d->wbs);
	d->global = global;
	d->global_arg = arg;
	atomic_store(&d->max_pause_ms, THROTTLE_MAX_PAUSE_MS_DEFAULT);
	atomic_store(&d->mode, THROTTLE_IOLESS);
	d->start_ms = clock_now_ms();
	d->fprop_period_start = d->start_ms;
	if (ring_records) {
		size_t n = 1;

		while (n < ring_records)
			n <<= 1;
		d->ring = calloc(n, sizeof(*d->ring));
		if (!d->ring)
			return -ENOMEM;
		d->ring_size = n;
	}
	return 0;
}

void throttle_domain_destroy(struct throttle_domain *d)
{
	unsigned i;

	for (i = 0; i < THROTTLE_TASK_HASH; i++) {
		while (d->tasks[i]) {
			struct throttle_task *t = d->tasks[i];

			d->tasks[i] = t->next;
			free(t);
		}
	}
	free(d->ring);
	d->ring = NULL;
	pthread_cond_destroy(&d->ring_cond);
	pthread_mutex_destroy(&d->lock);
}

void throttle_wb_init(struct throttle_wb *tw, struct throttle_domain *d, const char *name,
		      const struct throttle_wb_ops *ops, void *arg)
{
	memset(tw, 0, sizeof(*tw));
	tw->dom = d;
	tw->ops = ops;
	tw->arg = arg;
	snprintf(tw->name, sizeof(tw->name), "%s", name ? name : "?");
	atomic_store(&tw->max_ratio, 100);
	tw->dirty_ratelimit = INIT_BW;
	tw->balanced_dirty_ratelimit = INIT_BW;
	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	tw->completions.period = d->fprop_period;
	list_add_tail(&tw->node, &d->wbs);
	atomic_fetch_add(&d->nr_wbs, 1);
	ls_mutex_unlock(&d->lock);
}

void throttle_wb_remove(struct throttle_wb *tw)
{
	struct throttle_domain *d = tw->dom;

	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	list_del_init(&tw->node);
	atomic_fetch_sub(&d->nr_wbs, 1);
	ls_mutex_unlock(&d->lock);
}

void throttle_wb_thresholds(struct throttle_wb *tw, unsigned long *wb_thresh,
			    unsigned long *wb_bg, unsigned long *thresh, unsigned long *bg)
{
	struct throttle_domain *d = tw->dom;
	struct dtc c;

	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	domain_limits(d, &c);
	wb_limits(tw, &c, clock_now_ms());
	ls_mutex_unlock(&d->lock);
	*wb_thresh = c.wb_thresh;
	*wb_bg = c.wb_bg_thresh;
	*thresh = c.thresh;
	*bg = c.bg_thresh;
}

unsigned throttle_wb_share(struct throttle_wb *tw)
{
	struct throttle_domain *d = tw->dom;
	uint64_t num, den;

	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	fprop_advance(d, clock_now_ms());
	fprop_local_sync(d, &tw->completions);
	num = tw->completions.events;
	den = d->fprop_events;
	ls_mutex_unlock(&d->lock);
	return den ? (unsigned)(num * 1000 / den) : 0;
}

void throttle_domain_lower_limit(struct throttle_domain *d, unsigned long thresh,
				 unsigned long dirty)
{
	unsigned long t = max_ul(thresh, dirty);

	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	if (d->dirty_limit > t)
		d->dirty_limit = t;
	ls_mutex_unlock(&d->lock);
}

int throttle_mode_parse(const char *s, size_t len, enum throttle_mode *out)
{
	while (len && (s[len - 1] == '\n' || s[len - 1] == ' '))
		len--;
	if (len == 6 && !memcmp(s, "ioless", 6))
		*out = THROTTLE_IOLESS;
	else if (len == 6 && !memcmp(s, "simple", 6))
		*out = THROTTLE_SIMPLE;
	else if (len == 9 && !memcmp(s, "writeback", 9))
		*out = THROTTLE_WRITEBACK;
	else
		return -EINVAL;
	return 0;
}

const char *throttle_mode_name(enum throttle_mode m)
{
	return m == THROTTLE_SIMPLE ? "simple" : m == THROTTLE_WRITEBACK ? "writeback" : "ioless";
}
