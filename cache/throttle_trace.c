// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The throttle's bookkeeping around balance_dirty_pages: the trace ring
 * (records appended under the domain lock, read by /.wbcfs/ and the
 * tests through a cursor) and the table of dirtying tasks (what each
 * owes, reaping the dead and the idle). Apart from throttle.c because
 * that file holds the controller's formulas (thresholds, position ratio,
 * ratelimit, pauses) and these only store and hand out state for them.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wbcfs/lib/clock.h"
#include "wbcfs/cache/throttle.h"
#include "wbcfs/lib/lockstat.h"
#include "cache_i.h"

#define TASK_REAP_DEAD_MS 1000		/* a dead task's state goes after this */
#define TASK_REAP_IDLE_MS 60000		/* any idle task's state goes after this */

/* ---- trace ring -------------------------------------------------------------------- */

/* Append a record; the oldest is overwritten when the ring is full. Lock held. */
struct throttle_trace_rec *throttle_trace_new(struct throttle_domain *d, struct throttle_wb *tw,
					      uint16_t type, uint64_t now)
{
	struct throttle_trace_rec *r;

	if (!d->ring)
		return NULL;
	r = &d->ring[d->ring_seq & (d->ring_size - 1)];
	memset(r, 0, sizeof(*r));
	r->seq = d->ring_seq++;
	r->ms = now - d->start_ms;
	r->type = type;
	snprintf(r->bdi, sizeof(r->bdi), "%s", tw ? tw->name : "");
	atomic_fetch_add(&d->stats.trace_records, 1);
	return r;
}

void throttle_trace_done(struct throttle_domain *d)
{
	pthread_cond_broadcast(&d->ring_cond);
}

/* ---- tasks ----------------------------------------------------------------------- */

static bool task_alive_default(pid_t pid)
{
	return kill(pid, 0) == 0 || errno != ESRCH;
}

struct throttle_task *throttle_task_get(struct throttle_domain *d, pid_t pid, uint64_t now)
{
	unsigned h = (unsigned)pid % THROTTLE_TASK_HASH;
	struct throttle_task *t;

	for (t = d->tasks[h]; t; t = t->next)
		if (t->pid == pid)
			return t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->pid = pid;
	t->nr_dirtied_pause = DIRTY_POLL_THRESH;
	t->last_seen = now;
	t->next = d->tasks[h];
	d->tasks[h] = t;
	atomic_fetch_add(&d->stats.nr_tasks, 1);
	return t;
}

/* Free the state of tasks gone (or idle for a minute); keep what they owe. */
static void tasks_reap(struct throttle_domain *d, uint64_t now)
{
	bool (*alive)(pid_t) = d->task_alive ? d->task_alive : task_alive_default;
	unsigned i;

	if (now < d->reap_stamp + TASK_REAP_DEAD_MS)
		return;
	d->reap_stamp = now;
	for (i = 0; i < THROTTLE_TASK_HASH; i++) {
		struct throttle_task **pp = &d->tasks[i], *t;

		while ((t = *pp)) {
			uint64_t idle = now - t->last_seen;

			if (idle > TASK_REAP_IDLE_MS || (idle > TASK_REAP_DEAD_MS && !alive(t->pid))) {
				*pp = t->next;
				d->dirty_leaks += t->nr_dirtied;
				free(t);
				atomic_fetch_sub(&d->stats.nr_tasks, 1);
				atomic_fetch_add(&d->stats.nr_tasks_reaped, 1);
			} else {
				pp = &t->next;
			}
		}
	}
}

/* Task @pid dirtied @nr pages: its state, charged with them. Context: domain lock. */
struct throttle_task *throttle_task_dirtied_locked(struct throttle_domain *d, pid_t pid,
						   long nr, uint64_t now)
{
	struct throttle_task *t;

	lock_assert_held(&d->lock);

	tasks_reap(d, now);
	t = throttle_task_get(d, pid, now);
	if (t) {
		t->nr_dirtied += nr;
		t->last_seen = now;
	}
	return t;
}

long throttle_nr_tasks(struct throttle_domain *d)
{
	return atomic_load(&d->stats.nr_tasks);
}

uint64_t throttle_trace_start(struct throttle_domain *d)
{
	uint64_t s;

	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	s = d->ring_seq > d->ring_size ? d->ring_seq - d->ring_size : 0;
	ls_mutex_unlock(&d->lock);
	return s;
}

size_t throttle_trace_read(struct throttle_domain *d, uint64_t *cursor,
			   struct throttle_trace_rec *out, size_t max, uint64_t *lost)
{
	uint64_t oldest;
	size_t n = 0;

	*lost = 0;
	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	oldest = d->ring_seq > d->ring_size ? d->ring_seq - d->ring_size : 0;
	if (*cursor < oldest) {
		*lost = oldest - *cursor;
		*cursor = oldest;
		atomic_fetch_add(&d->stats.trace_lost, (long)*lost);
	}
	while (n < max && *cursor < d->ring_seq) {
		out[n++] = d->ring[*cursor & (d->ring_size - 1)];
		(*cursor)++;
	}
	ls_mutex_unlock(&d->lock);
	return n;
}

void throttle_trace_wait(struct throttle_domain *d, uint64_t cursor, unsigned timeout_ms)
{
	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	if (d->ring && cursor >= d->ring_seq)
		clock_cond_wait_ms(&d->ring_cond, &d->lock, (long)timeout_ms);
	ls_mutex_unlock(&d->lock);
}

void throttle_trace_cache(struct throttle_domain *d, const struct throttle_trace_cache *rec)
{
	struct throttle_trace_rec *r;

	ls_mutex_lock(&d->lock, &lc_throttle_lock);
	r = throttle_trace_new(d, NULL, TT_CACHE, clock_now_ms());
	if (r) {
		r->cache = *rec;
		throttle_trace_done(d);
	}
	ls_mutex_unlock(&d->lock);
}

int throttle_trace_format(const struct throttle_trace_rec *r, char *buf, size_t len)
{
	int n;

	if (r->type == TT_CACHE)
		n = snprintf(buf, len,
			     "%llu cache target=%lu resident=%lu ceiling=%lu floor=%lu free=%lu "
			     "dirty=%lu reason=%s pressure=%ld\n",
			     (unsigned long long)r->ms, r->cache.target, r->cache.resident,
			     r->cache.ceiling, r->cache.floor, r->cache.free, r->cache.dirty,
			     r->cache.reason ? r->cache.reason : "?", r->cache.pressure);
	else if (r->type == TT_BDP)
		n = snprintf(buf, len,
			     "%llu balance_dirty_pages bdi=%s limit=%lu setpoint=%lu dirty=%lu bdi_setpoint=%lu "
			     "bdi_dirty=%lu dirty_ratelimit=%lu task_ratelimit=%lu dirtied=%ld "
			     "dirtied_pause=%ld paused=%ld pause=%ld period=%ld think=%ld pid=%d\n",
			     (unsigned long long)r->ms, r->bdi, r->balance_dirty_pages.limit, r->balance_dirty_pages.setpoint,
			     r->balance_dirty_pages.dirty, r->balance_dirty_pages.bdi_setpoint, r->balance_dirty_pages.bdi_dirty,
			     r->balance_dirty_pages.dirty_ratelimit, r->balance_dirty_pages.task_ratelimit, r->balance_dirty_pages.dirtied,
			     r->balance_dirty_pages.dirtied_pause, r->balance_dirty_pages.paused, r->balance_dirty_pages.pause, r->balance_dirty_pages.period,
			     r->balance_dirty_pages.think, (int)r->balance_dirty_pages.pid);
	else
		n = snprintf(buf, len,
			     "%llu bw bdi=%s write_bw=%lu avg_write_bw=%lu dirty_rate=%lu "
			     "dirty_ratelimit=%lu task_ratelimit=%lu balanced_dirty_ratelimit=%lu "
			     "dirtied=%ld written=%ld nr_dirty=%lu nr_writeback=%lu bg_thresh=%lu "
			     "thresh=%lu limit=%lu\n",
			     (unsigned long long)r->ms, r->bdi, r->bw.write_bw, r->bw.avg_write_bw,
			     r->bw.dirty_rate, r->bw.dirty_ratelimit, r->bw.task_ratelimit,
			     r->bw.balanced_dirty_ratelimit, r->bw.dirtied, r->bw.written,
			     r->bw.nr_dirty, r->bw.nr_writeback, r->bw.bg_thresh, r->bw.thresh,
			     r->bw.limit);
	return n < 0 ? 0 : (n < (int)len ? n : (int)len - 1);
}
