// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The pdflush flusher model (flusher_model=pdflush; pdflush.h): a pool of
 * 2-8 threads shared by every device of a cache domain takes background
 * and periodic writeback for whichever device has dirty inodes, as Linux
 * 2.6.2x's mm/pdflush.c and background_writeout()/wb_kupdate() did (doc/algorithms.md §3.6):
 *
 * - A thread is handed an operation, background or kupdate, and runs it
 *   to the end. A background operation loops while the domain is over its
 *   background threshold; each round walks the devices (newest first, as
 *   the superblock walk went) writing MAX_WRITEBACK_PAGES in all. A round
 *   that wrote less than that because a device was congested or inodes
 *   were left over waits ~100 ms (congestion_wait) and goes again;
 *   otherwise the operation ends. kupdate runs every
 *   dirty_writeback_centisecs over inodes older than dirty_expire_centisecs,
 *   in the same rounds, at most once a second.
 * - Rounds are nonblocking: a device whose queue is full is passed over
 *   (counted in congestion_skips), and a device another pool thread is
 *   writing is left to it (BDI_pdflush: one pool thread per device).
 * - But a thread that enters a device writes its chunk there, waits for
 *   room when the queue fills, and completes its writes before it leaves
 *   (it owns its completions). On a slow device that is the stall every
 *   other device sees.
 * - More threads are started when no thread has been idle for a second
 *   (checked when an operation ends and when a wakeup finds no idle
 *   thread), up to the maximum; a thread idle for a second exits, one per
 *   second, down to the minimum.
 *
 * What stays with each device's own workers: sync, syncfs, fsync, umount,
 * metadata syncs and reclaim's requests (writeback.c). The writeback itself,
 * inode lists included, is writeback.c's; this file only decides who
 * writes where and when.
 *
 * Lock ordering:
 *   pool->lock
 *     bdi->lock (wb_has_dirty_io_locked in the walk)
 *     throttle domain lock (wb_over_bg)
 *   Neither bdi->lock nor a page lock is held when pool->lock is taken
 *   (bdi_wakeup calls in after dropping bdi->lock; completions call
 *   flusher_pool_uncongested holding nothing).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wbcfs/lib/clock.h"
#include "wbcfs/cache/dirty.h"
#include "bdi_i.h"

LOCK_CLASS(lc_pdflush_lock, "pdflush_lock")

#define PDFLUSH_IDLE_TICK_MS 100	/* idle threads look at the clock and thresholds */

enum pdflush_op {
	PDFLUSH_NONE,
	PDFLUSH_BACKGROUND,	/* background_writeout */
	PDFLUSH_KUPDATE,	/* wb_kupdate */
};

struct pdflush_thread {
	struct list_head list;		/* pool->lock: on pool->threads or pool->dead */
	struct flusher_pool *p;		/* constant */
	pthread_t tid;			/* constant once started */
	uint64_t idle_since_ms;		/* pool->lock: when it last went idle */
	struct wb_ctx *x;		/* the thread's own: engine, batch */
};

struct flusher_pool {
	pthread_mutex_t lock;		/* protects: bdis (and each bdi's pool_list,
					 * pool_busy), threads, dead, nr_threads,
					 * nr_idle, nr_background, bg_pending,
					 * next_kupdate_ms, last_empty_ms, last_exit_ms */
	pthread_cond_t work_cond;	/* idle threads sleep here */
	pthread_cond_t congestion_cond;	/* congestion_wait; a bdi's pool_busy cleared */
	pthread_cond_t exit_cond;	/* a thread exited (destroy waits) */
	struct list_head bdis;		/* lock: member bdis, newest first */
	struct list_head threads;	/* lock: live threads */
	struct list_head dead;		/* lock: exited, not yet joined */
	unsigned nr_threads;		/* lock */
	unsigned nr_idle;		/* lock: threads without an operation */
	unsigned nr_background;		/* lock: background operations running */
	bool bg_pending;		/* lock: a device asked for background writeback */
	uint64_t next_kupdate_ms;	/* lock: the kupdate timer */
	uint64_t last_empty_ms;		/* lock: when the last idle thread got work */
	uint64_t last_exit_ms;		/* lock: exits are one per second */
	_Atomic bool stopping;		/* atomic: destroy has begun */

	struct cache *cache;		/* constant */
	enum io_engine_type engine;	/* constant */
	unsigned queue_depth;		/* constant */
	unsigned min_threads;		/* constant */
	unsigned max_threads;		/* constant */
	char name[64];			/* constant */
	struct flusher_pool_stats stats;
};

static void *pdflush_main(void *arg);

/* ---- threads ---------------------------------------------------------------- */

/*
 * Join the threads that exited: each has only to return, so this does not
 * wait. Context: p->lock held (they no longer take it).
 */
static void pdflush_join_dead_locked(struct flusher_pool *p)
{
	struct pdflush_thread *t, *n;

	lock_assert_held(&p->lock);

	list_for_each_entry_safe(t, n, &p->dead, list) {
		list_del_init(&t->list);
		pthread_join(t->tid, NULL);
		free(t);
	}
}

/* Start one idle thread. Context: p->lock held. Returns 0 or -errno. */
static int pdflush_spawn_locked(struct flusher_pool *p)
{
	struct pdflush_thread *t;
	int ret;

	lock_assert_held(&p->lock);

	pdflush_join_dead_locked(p);
	if (p->nr_threads >= p->max_threads)
		return -EAGAIN;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->p = p;
	t->idle_since_ms = clock_now_ms();
	ret = pthread_create(&t->tid, NULL, pdflush_main, t);
	if (ret) {
		free(t);
		return -ret;
	}
	list_add_tail(&t->list, &p->threads);
	p->nr_threads++;
	p->nr_idle++;
	atomic_store(&p->stats.nr_threads, p->nr_threads);
	atomic_fetch_add(&p->stats.threads_started, 1);
	return 0;
}

/*
 * No thread has been idle for PDFLUSH_SPAWN_BUSY_MS: start another (the
 * caller, if a pool thread, is not idle either). Context: p->lock held.
 */
static void pdflush_maybe_spawn_locked(struct flusher_pool *p)
{
	lock_assert_held(&p->lock);

	if (!p->nr_idle && !atomic_load(&p->stopping) &&
	    clock_now_ms() - p->last_empty_ms > PDFLUSH_SPAWN_BUSY_MS)
		pdflush_spawn_locked(p);
}

/* Idle too long, above the minimum, and nobody exited in the last second? */
static bool pdflush_should_exit_locked(struct flusher_pool *p, struct pdflush_thread *t)
{
	uint64_t now = clock_now_ms();

	lock_assert_held(&p->lock);

	if (atomic_load(&p->stopping))
		return true;
	if (p->nr_threads <= p->min_threads || now - t->idle_since_ms <= PDFLUSH_EXIT_IDLE_MS)
		return false;
	return now - p->last_exit_ms >= PDFLUSH_EXIT_IDLE_MS;
}

/* ---- operations --------------------------------------------------------------- */

/* Add the real time since @t0_ns to a cumulative counter (for reading, not deciding). */
static void pool_account(_Atomic long *ns, uint64_t t0_ns)
{
	atomic_fetch_add(ns, (long)(clock_real_ns() - t0_ns));
}

struct pdflush_round {
	long written;		/* pages */
	bool congested;		/* a device was congested (passed over or filled up) */
	bool more_io;		/* inodes left for later */
};

/*
 * writeback_inodes: one round over the member devices, PDFLUSH_CHUNK_PAGES
 * in all, for @why. Context: pool thread, no lock held.
 */
static void pdflush_round(struct pdflush_thread *t, enum wb_reason why, struct pdflush_round *r)
{
	struct flusher_pool *p = t->p;
	long budget = PDFLUSH_CHUNK_PAGES;
	struct bdi *b;

	ls_mutex_lock(&p->lock, &lc_pdflush_lock);
	/* @b stays on the list while pool_busy: unregister waits for it */
	list_for_each_entry(b, &p->bdis, pool_list) {
		bool dirty, congested, more_io;
		uint64_t t0;
		long got;

		if (budget <= 0) {
			r->more_io = true;
			break;
		}
		if (b->pool_busy)
			continue;	/* another pool thread is writing it */
		ls_mutex_lock(&b->lock, &lc_bdi_lock);
		dirty = wb_has_dirty_io_locked(b);
		ls_mutex_unlock(&b->lock);
		if (!dirty)
			continue;
		if (bdi_write_congested(b)) {
			atomic_fetch_add(&p->stats.congestion_skips, 1);
			r->congested = true;
			continue;
		}
		b->pool_busy = true;
		ls_mutex_unlock(&p->lock);
		t0 = clock_real_ns();
		got = wb_pool_visit(t->x, b, why, budget, true, &congested, &more_io);
		pool_account(&b->stats.pool_ns, t0);
		ls_mutex_lock(&p->lock, &lc_pdflush_lock);
		b->pool_busy = false;
		pthread_cond_broadcast(&p->congestion_cond);
		atomic_fetch_add(&p->stats.pages_written, got);
		budget -= got;
		r->written += got;
		r->congested |= congested;
		r->more_io |= more_io;
	}
	ls_mutex_unlock(&p->lock);
}

/* congestion_wait: ~100 ms, or until a device's queue has room again. */
static void pdflush_congestion_wait(struct flusher_pool *p)
{
	uint64_t t0 = clock_real_ns();

	atomic_fetch_add(&p->stats.congestion_waits, 1);
	ls_mutex_lock(&p->lock, &lc_pdflush_lock);
	if (!atomic_load(&p->stopping))
		clock_cond_wait_ms(&p->congestion_cond, &p->lock, PDFLUSH_CONGESTION_WAIT_MS);
	ls_mutex_unlock(&p->lock);
	pool_account(&p->stats.congestion_wait_ns, t0);
}

/*
 * A round that wrote less than its chunk: go again after a congestion
 * wait when a device was congested or inodes were left, else stop
 * (everything writable was written). Returns true to go on.
 */
static bool pdflush_round_continue(struct flusher_pool *p, const struct pdflush_round *r)
{
	if (atomic_load(&p->stopping))
		return false;
	if (r->written >= PDFLUSH_CHUNK_PAGES)
		return true;
	if (!r->congested && !r->more_io)
		return false;
	pdflush_congestion_wait(p);
	return true;
}

/* Any member device over the background threshold? Context: p->lock held. */
static bool pdflush_over_bg_locked(struct flusher_pool *p)
{
	struct bdi *b;

	lock_assert_held(&p->lock);

	list_for_each_entry(b, &p->bdis, pool_list)
		if (wb_over_bg(b))
			return true;
	return false;
}

static bool pdflush_over_bg(struct flusher_pool *p)
{
	bool over;

	ls_mutex_lock(&p->lock, &lc_pdflush_lock);
	over = pdflush_over_bg_locked(p);
	ls_mutex_unlock(&p->lock);
	return over;
}

/* background_writeout: rounds while over the background threshold. */
static void pdflush_background(struct pdflush_thread *t)
{
	struct flusher_pool *p = t->p;

	while (pdflush_over_bg(p)) {
		struct pdflush_round r = {0};

		atomic_fetch_add(&p->stats.background_rounds, 1);
		pdflush_round(t, WB_REASON_BACKGROUND, &r);
		if (!pdflush_round_continue(p, &r))
			break;
	}
}

/*
 * wb_kupdate: rounds over inodes dirtied more than dirty_expire_centisecs
 * ago, for about as many pages as are dirty; then the timer is set one
 * interval after the start, but at least a second after the end.
 */
static void pdflush_kupdate(struct pdflush_thread *t)
{
	struct flusher_pool *p = t->p;
	uint64_t start = clock_now_ms(), next, now;
	uint64_t interval = atomic_load(&p->cache->tun.dirty_writeback_centisecs) * 10ULL;
	long nr_to_write = atomic_load(&p->cache->stats.nr_dirty) + 1;

	while (nr_to_write > 0) {
		struct pdflush_round r = {0};

		atomic_fetch_add(&p->stats.kupdate_rounds, 1);
		pdflush_round(t, WB_REASON_PERIODIC, &r);
		if (!pdflush_round_continue(p, &r))
			break;
		nr_to_write -= PDFLUSH_CHUNK_PAGES;
	}
	now = clock_now_ms();
	next = start + interval;
	if (next < now + 1000)
		next = now + 1000;
	ls_mutex_lock(&p->lock, &lc_pdflush_lock);
	p->next_kupdate_ms = next;
	ls_mutex_unlock(&p->lock);
}

/*
 * What an idle thread should do now: kupdate when its timer is due
 * (dirty_writeback_centisecs read live; 0 = off), background when a
 * device asked for it, or when over the threshold and no background
 * operation runs (a request may have found every thread busy).
 * Context: p->lock held.
 */
static enum pdflush_op pdflush_take_op_locked(struct flusher_pool *p)
{
	uint64_t interval = atomic_load(&p->cache->tun.dirty_writeback_centisecs) * 10ULL;
	uint64_t now = clock_now_ms();

	lock_assert_held(&p->lock);

	if (interval && now >= p->next_kupdate_ms) {
		p->next_kupdate_ms = now + interval;	/* pdflush_kupdate sets the real one */
		return PDFLUSH_KUPDATE;
	}
	if (!interval && p->next_kupdate_ms <= now)
		p->next_kupdate_ms = now + PDFLUSH_IDLE_TICK_MS;	/* turned on: starts afresh */
	if (p->bg_pending || (!p->nr_background && pdflush_over_bg_locked(p))) {
		p->bg_pending = false;
		return PDFLUSH_BACKGROUND;
	}
	return PDFLUSH_NONE;
}

/* Run @op. Context: p->lock held; dropped inside. */
static void pdflush_run_locked(struct pdflush_thread *t, enum pdflush_op op)
{
	struct flusher_pool *p = t->p;

	lock_assert_held(&p->lock);

	if (--p->nr_idle == 0)
		p->last_empty_ms = clock_now_ms();
	if (op == PDFLUSH_BACKGROUND)
		p->nr_background++;
	atomic_fetch_add(&p->stats.nr_busy, 1);
	ls_mutex_unlock(&p->lock);
	if (op == PDFLUSH_BACKGROUND)
		pdflush_background(t);
	else
		pdflush_kupdate(t);
	ls_mutex_lock(&p->lock, &lc_pdflush_lock);
	atomic_fetch_sub(&p->stats.nr_busy, 1);
	if (op == PDFLUSH_BACKGROUND)
		p->nr_background--;
	/* the others have all been busy for a second: one more */
	pdflush_maybe_spawn_locked(p);
	p->nr_idle++;
	t->idle_since_ms = clock_now_ms();
}

static void *pdflush_main(void *arg)
{
	struct pdflush_thread *t = arg;
	struct flusher_pool *p = t->p;

	t->x = wb_pool_ctx_create(p->engine, p->queue_depth, p->name);
	ls_mutex_lock(&p->lock, &lc_pdflush_lock);
	while (t->x && !pdflush_should_exit_locked(p, t)) {
		enum pdflush_op op = pdflush_take_op_locked(p);

		if (op != PDFLUSH_NONE)
			pdflush_run_locked(t, op);
		else
			clock_cond_wait_ms(&p->work_cond, &p->lock, PDFLUSH_IDLE_TICK_MS);
	}
	if (!t->x)
		fprintf(stderr, "wbcfs: %s: pdflush thread: out of memory\n", p->name);
	p->nr_idle--;
	p->last_exit_ms = clock_now_ms();
	if (!atomic_load(&p->stopping))
		atomic_fetch_add(&p->stats.threads_exited, 1);
	ls_mutex_unlock(&p->lock);
	/* the engine's teardown takes a while: not under the lock, nor in a joiner's wait */
	if (t->x)
		wb_pool_ctx_destroy(t->x);
	ls_mutex_lock(&p->lock, &lc_pdflush_lock);
	p->nr_threads--;
	atomic_store(&p->stats.nr_threads, p->nr_threads);
	list_move_tail(&t->list, &p->dead);
	pthread_cond_broadcast(&p->exit_cond);
	/* nothing of the pool is touched after this: it is joined, then freed */
	ls_mutex_unlock(&p->lock);
	return NULL;
}

/* ---- the bdi's side (bdi_i.h) ----------------------------------------------- */

void flusher_pool_register(struct flusher_pool *p, struct bdi *b)
{
	ls_mutex_lock(&p->lock, &lc_pdflush_lock);
	list_add(&b->pool_list, &p->bdis);
	ls_mutex_unlock(&p->lock);
}

void flusher_pool_unregister(struct flusher_pool *p, struct bdi *b)
{
	ls_mutex_lock(&p->lock, &lc_pdflush_lock);
	while (b->pool_busy)
		lockstat_cond_wait(&p->congestion_cond, &p->lock);
	list_del_init(&b->pool_list);
	ls_mutex_unlock(&p->lock);
}

/*
 * pdflush_operation(background_writeout): an idle thread takes it; with
 * none idle the request waits for the next one to come free, and when
 * none has been free for a second, a thread is started for it.
 */
void flusher_pool_wakeup(struct flusher_pool *p, struct bdi *b)
{
	ls_mutex_lock(&p->lock, &lc_pdflush_lock);
	p->bg_pending = true;
	if (p->nr_idle)
		pthread_cond_signal(&p->work_cond);
	else
		pdflush_maybe_spawn_locked(p);
	ls_mutex_unlock(&p->lock);
}

void flusher_pool_uncongested(struct flusher_pool *p)
{
	ls_mutex_lock(&p->lock, &lc_pdflush_lock);
	pthread_cond_broadcast(&p->congestion_cond);
	ls_mutex_unlock(&p->lock);
}

/* ---- the pool ------------------------------------------------------------------ */

static void pdflush_free(struct flusher_pool *p)
{
	pthread_cond_destroy(&p->exit_cond);
	pthread_cond_destroy(&p->congestion_cond);
	pthread_cond_destroy(&p->work_cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

int flusher_pool_create(struct flusher_pool **out, const struct flusher_pool_config *cfg)
{
	struct flusher_pool *p;
	unsigned i;
	int ret = 0;

	if (!cfg->cache)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->min_threads = cfg->min_threads ? cfg->min_threads : PDFLUSH_MIN_THREADS;
	p->max_threads = cfg->max_threads ? cfg->max_threads : PDFLUSH_MAX_THREADS;
	if (p->max_threads < p->min_threads) {
		free(p);
		return -EINVAL;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work_cond, NULL);
	pthread_cond_init(&p->congestion_cond, NULL);
	pthread_cond_init(&p->exit_cond, NULL);
	list_init(&p->bdis);
	list_init(&p->threads);
	list_init(&p->dead);
	p->cache = cfg->cache;
	p->engine = cfg->engine;
	p->queue_depth = cfg->queue_depth ? cfg->queue_depth : 64;
	snprintf(p->name, sizeof(p->name), "%s", cfg->name ? cfg->name : "pdflush");
	p->next_kupdate_ms = clock_now_ms() +
			     atomic_load(&p->cache->tun.dirty_writeback_centisecs) * 10ULL;
	p->last_empty_ms = clock_now_ms();
	ls_mutex_lock(&p->lock, &lc_pdflush_lock);
	for (i = 0; i < p->min_threads && !ret; i++)
		ret = pdflush_spawn_locked(p);
	ls_mutex_unlock(&p->lock);
	if (ret) {
		flusher_pool_destroy(p);
		return ret;
	}
	*out = p;
	return 0;
}

void flusher_pool_destroy(struct flusher_pool *p)
{
	ls_mutex_lock(&p->lock, &lc_pdflush_lock);
	atomic_store(&p->stopping, true);
	pthread_cond_broadcast(&p->work_cond);
	pthread_cond_broadcast(&p->congestion_cond);
	while (p->nr_threads)
		lockstat_cond_wait(&p->exit_cond, &p->lock);
	pdflush_join_dead_locked(p);
	if (!list_empty(&p->bdis))
		fprintf(stderr, "wbcfs: %s: pool destroyed with devices still in it\n", p->name);
	ls_mutex_unlock(&p->lock);
	pdflush_free(p);
}

const struct flusher_pool_stats *flusher_pool_get_stats(const struct flusher_pool *p)
{
	return &p->stats;
}
