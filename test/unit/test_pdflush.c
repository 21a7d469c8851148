// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The pdflush pool (flusher_model=pdflush) with two devices in one cache,
 * each a temporary file with a fake owner mapping page i of an inode to
 * block base+i: background writeback of both goes through the pool, a
 * congested device is passed over and counted while the other is written,
 * a pool thread held inside a slow device (its owner blocks in map_pages)
 * stalls the other device until a second thread is started (and for as
 * long as it is held when the pool may not grow), idle threads
 * exit down to the minimum, periodic writeback of expired inodes goes
 * through the pool, sync, fsync and reclaim's requests stay with each
 * device's own worker, and destroy joins every thread. Counts and states
 * only: no rates.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wbcfs/flusher/bdi.h"
#include "wbcfs/cache.h"
#include "wbcfs/lib/clock.h"
#include "wbcfs/flusher/pdflush.h"
#include "helpers.h"

#define T_DEVS 2

struct t_inode {
	struct mapping m;
	struct wb_inode wb;
	uint64_t base;
	_Atomic int map_calls;
};

/* The slow device: its owner blocks in map_pages while the gate is shut. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_shut;
static struct bdi *gate_bdi;

static void t_gate(bool shut)
{
	pthread_mutex_lock(&gate_lock);
	gate_shut = shut;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

static int t_map(struct bdi *b, struct wb_inode *wi, const uint64_t *index, unsigned n,
		 uint64_t *pblk)
{
	struct t_inode *ti = container_of(wi, struct t_inode, wb);
	unsigned i;

	ti->map_calls++;
	pthread_mutex_lock(&gate_lock);
	while (gate_shut && b == gate_bdi)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
	for (i = 0; i < n; i++)
		pblk[i] = ti->base + index[i];
	return 0;
}

static const struct bdi_ops t_ops = { .map_pages = t_map };
static unsigned t_queue_depth = 16;	/* the devices' */

struct t_env {
	struct cache *c;
	struct flusher_pool *pool;
	struct bdi *b[T_DEVS];
	struct t_bdis wake;	/* reclaim and the throttle ask every device */
	char path[T_DEVS][64];
	int fd[T_DEVS];
};

static void t_env_init(struct t_env *e, unsigned min_threads, unsigned max_threads)
{
	struct cache_config cc = { .size_bytes = 4096 * PAGE_SIZE, .nr_zones = 1,
				   .owner = &e->wake };
	struct flusher_pool_config pc = { .name = "pool", .engine = IO_ENGINE_URING,
					  .queue_depth = 16, .min_threads = min_threads,
					  .max_threads = max_threads };
	unsigned i;

	memset(e, 0, sizeof(*e));
	e->wake = (struct t_bdis){ e->b, T_DEVS };
	e->c = t_cache_cfg(&cc);
	/* nothing but what a test asks for */
	dirty_tunable_set(&e->c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 0);
	pc.cache = e->c;
	ck_assert_int_eq(flusher_pool_create(&e->pool, &pc), 0);
	for (i = 0; i < T_DEVS; i++) {
		struct bdi_config bc = { .name = i ? "fast" : "slow", .engine = IO_ENGINE_URING,
					 .queue_depth = t_queue_depth, .max_io_kb = 256,
					 .nr_flushers = 1,
					 .cache = e->c, .ops = &t_ops, .owner = e,
					 .pool = e->pool };

		e->fd[i] = t_bdi_file(&e->b[i], &bc, e->path[i], false);
	}
	gate_bdi = e->b[0];
}

static void t_env_done(struct t_env *e)
{
	unsigned i;

	t_gate(false);
	for (i = 0; i < T_DEVS; i++)
		t_bdi_file_done(&e->b[i], e->fd[i], e->path[i]);
	flusher_pool_destroy(e->pool);
	cache_destroy(e->c);
	t_clock_real();
}

static void t_inode_init(struct t_env *e, unsigned dev, struct t_inode *ti, uint64_t base)
{
	memset(ti, 0, sizeof(*ti));
	ti->base = base;
	mapping_init(&ti->m, e->c, &bdi_mapping_ops, &ti->wb);
	bdi_inode_init(e->b[dev], &ti->wb, &ti->m, false);
}

static void t_inode_done(struct t_env *e, unsigned dev, struct t_inode *ti)
{
	bdi_inode_remove(e->b[dev], &ti->wb);
	mapping_truncate(&ti->m, 0, UINT64_MAX);
	mapping_destroy(&ti->m);
}

static void t_dirty(struct t_inode *ti, uint64_t first, unsigned n, char fill)
{
	t_dirty_pages(&ti->m, first, n, fill, false);
}

/* Written and completed: nothing dirty, nothing under writeback. */
static bool t_clean(struct t_inode *ti)
{
	return !atomic_load(&ti->m.nrdirty) && !atomic_load(&ti->m.nrwriteback);
}

/* Poll @cond every 10 ms for up to @ms of real time. */
#define t_wait_for(cond, ms)						\
	do {								\
		int _i;							\
		for (_i = 0; _i < (ms) / 10 && !(cond); _i++)		\
			usleep(10000);					\
	} while (0)

static bool t_block_is(struct t_env *e, unsigned dev, uint64_t blk, char fill)
{
	return t_block_holds(e->fd[dev], blk, fill, -1);
}

static long t_written(struct t_env *e, unsigned dev)
{
	return atomic_load(&bdi_get_stats(e->b[dev])->written);
}

/* Over the background threshold: the pool writes both devices down under it. */
START_TEST(background_both_devices)
{
	const struct flusher_pool_stats *ps;
	struct t_env e;
	struct t_inode a, b;
	unsigned long bg, thresh;

	t_env_init(&e, 0, 0);
	ps = flusher_pool_get_stats(e.pool);
	ck_assert_int_eq(atomic_load(&ps->nr_threads), PDFLUSH_MIN_THREADS);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_BACKGROUND_BYTES, 16 * PAGE_SIZE);
	t_inode_init(&e, 0, &a, 0);
	t_inode_init(&e, 1, &b, 0);
	t_dirty(&a, 0, 1500, 'a');
	t_dirty(&b, 0, 1500, 'b');
	bdi_wakeup(e.b[0], 0, WB_REASON_BACKGROUND);
	t_wait_for(!dirty_over_background(e.c) && !atomic_load(&e.c->stats.nr_writeback), 5000);
	dirty_thresholds(e.c, &bg, &thresh);
	ck_assert_int_le(atomic_load(&e.c->stats.nr_dirty), (long)bg);
	/* each device's first chunk went out, whichever came first */
	ck_assert_int_gt(t_written(&e, 0), 0);
	ck_assert_int_gt(t_written(&e, 1), 0);
	ck_assert(t_block_is(&e, 0, 0, 'a'));
	ck_assert(t_block_is(&e, 1, 0, 'b'));
	/* all of it by the pool: the devices' own workers left it alone */
	ck_assert_int_eq(atomic_load(&ps->pages_written), t_written(&e, 0) + t_written(&e, 1));
	/* rounds of MAX_WRITEBACK_PAGES at most, shared by both devices */
	ck_assert_int_ge(atomic_load(&ps->background_rounds), 2);
	ck_assert_int_le(atomic_load(&ps->pages_written),
			 atomic_load(&ps->background_rounds) * PDFLUSH_CHUNK_PAGES);
	ck_assert_int_eq(atomic_load(&ps->kupdate_rounds), 0);
	t_inode_done(&e, 0, &a);
	t_inode_done(&e, 1, &b);
	t_env_done(&e);
}
END_TEST

/* A congested device is passed over and counted; the other is written meanwhile. */
START_TEST(congested_device_skipped)
{
	const struct flusher_pool_stats *ps;
	struct t_env e;
	struct t_inode a, b;

	t_env_init(&e, 0, 0);
	ps = flusher_pool_get_stats(e.pool);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_BACKGROUND_BYTES, 8 * PAGE_SIZE);
	bdi_set_congested(e.b[0], true);
	ck_assert(bdi_write_congested(e.b[0]));
	ck_assert(!bdi_write_congested(e.b[1]));
	t_inode_init(&e, 0, &a, 0);
	t_inode_init(&e, 1, &b, 0);
	t_dirty(&a, 0, 64, 'c');
	t_dirty(&b, 0, 64, 'd');
	bdi_wakeup(e.b[1], 0, WB_REASON_BACKGROUND);
	t_wait_for(t_clean(&b) && atomic_load(&ps->congestion_waits) > 0, 5000);
	ck_assert(t_clean(&b));
	ck_assert(t_block_is(&e, 1, 63, 'd'));
	ck_assert_int_eq(atomic_load(&a.m.nrdirty), 64);
	ck_assert_int_eq(a.map_calls, 0);
	ck_assert_int_gt(atomic_load(&ps->congestion_skips), 0);
	/* still over the threshold, with only a congested device left: it waits */
	ck_assert_int_gt(atomic_load(&ps->congestion_waits), 0);
	bdi_set_congested(e.b[0], false);
	t_wait_for(atomic_load(&a.m.nrdirty) <= 8 && !atomic_load(&a.m.nrwriteback), 5000);
	ck_assert_int_le(atomic_load(&a.m.nrdirty), 8);
	ck_assert_int_gt(t_written(&e, 0), 0);
	/* the waits are timed (real time, for reading) */
	ck_assert_int_gt(atomic_load(&ps->congestion_wait_ns), 0);
	t_inode_done(&e, 0, &a);
	t_inode_done(&e, 1, &b);
	t_env_done(&e);
}
END_TEST

/*
 * A pool of one thread (at most @max_threads) whose thread is held inside
 * the slow device (@a's, gated) while the fast one (@b's) has 64 dirty
 * pages and has asked for background writeback.
 */
static void t_hold_in_slow(struct t_env *e, unsigned max_threads, struct t_inode *a,
			   struct t_inode *b)
{
	t_clock_fake(100000);
	t_env_init(e, 1, max_threads);
	ck_assert_int_eq(atomic_load(&flusher_pool_get_stats(e->pool)->nr_threads), 1);
	dirty_tunable_set(&e->c->tun, DT_DIRTY_BACKGROUND_BYTES, 8 * PAGE_SIZE);
	t_inode_init(e, 0, a, 0);
	t_inode_init(e, 1, b, 0);
	t_gate(true);
	t_dirty(a, 0, 64, 's');
	bdi_wakeup(e->b[0], 0, WB_REASON_BACKGROUND);
	t_wait_for(a->map_calls > 0, 5000);
	ck_assert_int_gt(a->map_calls, 0);	/* the only thread is inside the slow device */
	t_dirty(b, 0, 64, 'f');
	bdi_wakeup(e->b[1], 0, WB_REASON_BACKGROUND);
}

/*
 * A pool thread inside a slow device stays there: with one thread the
 * other device waits for it (the stall the model shows). When no thread
 * has been idle for a second, the pool starts another, which writes the
 * other device; a second after all is written, the extra one exits.
 */
START_TEST(slow_device_stall_and_spawn)
{
	const struct flusher_pool_stats *ps;
	struct t_env e;
	struct t_inode a, b;

	t_hold_in_slow(&e, 2, &a, &b);
	ps = flusher_pool_get_stats(e.pool);
	usleep(300000);
	ck_assert_int_eq(atomic_load(&b.m.nrdirty), 64);	/* stalled behind it */
	ck_assert_int_eq(atomic_load(&ps->nr_threads), 1);	/* busy for less than 1 s */
	t_clock_advance(PDFLUSH_SPAWN_BUSY_MS + 100);
	bdi_wakeup(e.b[1], 0, WB_REASON_BACKGROUND);
	ck_assert_int_eq(atomic_load(&ps->nr_threads), 2);
	ck_assert_int_eq(atomic_load(&ps->threads_started), 2);
	t_wait_for(t_clean(&b), 5000);
	ck_assert(t_clean(&b));
	ck_assert(t_block_is(&e, 1, 63, 'f'));
	ck_assert_int_eq(atomic_load(&a.m.nrdirty) + atomic_load(&a.m.nrwriteback), 64);
	t_gate(false);
	t_wait_for(t_clean(&a) && !atomic_load(&ps->nr_busy), 5000);
	ck_assert(t_clean(&a));
	ck_assert(t_block_is(&e, 0, 63, 's'));
	/* PdflushBusy: the stalled thread's time in the slow device, 300 ms of
	 * real sleep at least; some in the other device too */
	ck_assert_int_ge(atomic_load(&bdi_get_stats(e.b[0])->pool_ns), 300000000L);
	ck_assert_int_gt(atomic_load(&bdi_get_stats(e.b[1])->pool_ns), 0);
	/* a second idle: one exits, down to the minimum and no further */
	t_wait_for(!atomic_load(&ps->nr_busy), 5000);
	t_clock_advance(PDFLUSH_EXIT_IDLE_MS + 100);
	t_wait_for(atomic_load(&ps->nr_threads) == 1, 5000);
	ck_assert_int_eq(atomic_load(&ps->nr_threads), 1);
	t_clock_advance(PDFLUSH_EXIT_IDLE_MS + 100);
	usleep(300000);
	ck_assert_int_eq(atomic_load(&ps->nr_threads), 1);
	ck_assert_int_eq(atomic_load(&ps->threads_exited), 1);
	t_inode_done(&e, 0, &a);
	t_inode_done(&e, 1, &b);
	t_env_done(&e);
}
END_TEST

/*
 * A pool held to one thread (pdflush_threads=1): while the thread is
 * inside the slow device, the other device is not written however long
 * that lasts, and no thread is started; once the slow device lets it go,
 * the same thread writes the other.
 */
START_TEST(pool_of_one_stalls)
{
	const struct flusher_pool_stats *ps;
	struct t_env e;
	struct t_inode a, b;

	t_hold_in_slow(&e, 1, &a, &b);
	ps = flusher_pool_get_stats(e.pool);
	/* ten seconds of the pool's clock without an idle thread */
	t_clock_advance(10 * PDFLUSH_SPAWN_BUSY_MS);
	bdi_wakeup(e.b[1], 0, WB_REASON_BACKGROUND);
	usleep(300000);
	ck_assert_int_eq(atomic_load(&b.m.nrdirty), 64);
	ck_assert_int_eq(t_written(&e, 1), 0);
	ck_assert_int_eq(atomic_load(&ps->nr_threads), 1);
	ck_assert_int_eq(atomic_load(&ps->threads_started), 1);
	t_gate(false);
	t_wait_for(t_clean(&a) && t_clean(&b), 5000);
	ck_assert(t_clean(&a) && t_clean(&b));
	ck_assert(t_block_is(&e, 0, 63, 's'));
	ck_assert(t_block_is(&e, 1, 63, 'f'));
	ck_assert_int_eq(atomic_load(&ps->threads_started), 1);
	t_inode_done(&e, 0, &a);
	t_inode_done(&e, 1, &b);
	t_env_done(&e);
}
END_TEST

/* kupdate through the pool: expired inodes of both devices, not younger ones. */
START_TEST(periodic_through_pool)
{
	const struct flusher_pool_stats *ps;
	struct t_env e;
	struct t_inode a, b;

	t_clock_fake(100000);
	t_env_init(&e, 0, 0);
	ps = flusher_pool_get_stats(e.pool);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_EXPIRE_CENTISECS, 3000);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 500);
	t_inode_init(&e, 0, &a, 0);
	t_inode_init(&e, 1, &b, 0);
	t_dirty(&a, 0, 8, 'p');
	t_dirty(&b, 0, 8, 'q');
	/* a kupdate at 5 s finds nothing expired (30 s) */
	t_clock_advance(5100);
	t_wait_for(atomic_load(&ps->kupdate_rounds) > 0, 5000);
	ck_assert_int_gt(atomic_load(&ps->kupdate_rounds), 0);
	usleep(200000);
	ck_assert_int_eq(atomic_load(&a.m.nrdirty), 8);
	ck_assert_int_eq(atomic_load(&b.m.nrdirty), 8);
	/* 30 s later both are expired and the timer is due again */
	t_clock_advance(30000);
	t_wait_for(t_clean(&a) && t_clean(&b), 5000);
	ck_assert(t_clean(&a));
	ck_assert(t_clean(&b));
	ck_assert(t_block_is(&e, 0, 7, 'p'));
	ck_assert(t_block_is(&e, 1, 7, 'q'));
	ck_assert_int_eq(atomic_load(&ps->pages_written), 16);
	ck_assert_int_eq(atomic_load(&ps->background_rounds), 0);
	/* clean again: the devices' periodic state is cleared */
	ck_assert(!(bdi_state(e.b[0]) & BDI_STATE_PERIODIC));
	t_inode_done(&e, 0, &a);
	t_inode_done(&e, 1, &b);
	t_env_done(&e);
}
END_TEST

/* sync, fsync and reclaim's requests are the devices' own workers', pool or not. */
START_TEST(sync_fsync_vmscan_with_pool)
{
	const struct flusher_pool_stats *ps;
	struct t_env e;
	struct t_inode a, b;

	t_env_init(&e, 0, 0);
	ps = flusher_pool_get_stats(e.pool);
	t_inode_init(&e, 0, &a, 0);
	t_inode_init(&e, 1, &b, 100);
	t_dirty(&a, 0, 20, 'x');
	t_dirty(&b, 0, 20, 'y');
	ck_assert_int_eq(bdi_sync_inode(e.b[0], &a.wb, 0, UINT64_MAX, false), 0);
	ck_assert(t_clean(&a));
	ck_assert(t_block_is(&e, 0, 19, 'x'));
	ck_assert_int_eq(atomic_load(&b.m.nrdirty), 20);
	ck_assert_int_eq(bdi_sync(e.b[1], WB_REASON_SYNC), 0);
	ck_assert(t_clean(&b));
	ck_assert(t_block_is(&e, 1, 119, 'y'));
	/* reclaim asks the device it needs cleaned */
	t_dirty(&a, 100, 16, 'v');
	bdi_wakeup(e.b[0], 16, WB_REASON_VMSCAN);
	t_wait_for(t_clean(&a), 5000);
	ck_assert(t_clean(&a));
	ck_assert_int_eq(atomic_load(&e.c->stats.nr_vmscan_write), 16);
	ck_assert_int_eq(atomic_load(&ps->pages_written), 0);
	t_inode_done(&e, 0, &a);
	t_inode_done(&e, 1, &b);
	t_env_done(&e);
}
END_TEST

struct t_fsync_arg {
	struct t_env *e;
	unsigned dev;
	struct t_inode *ti;
	int ret;
};

static void *t_fsync_loop(void *arg)
{
	struct t_fsync_arg *f = arg;

	f->ret = t_fsync_rounds(f->e->b[f->dev], &f->ti->wb, &f->ti->m, f->e->fd[f->dev],
				f->ti->base, 10, 200, false);
	return NULL;
}

/*
 * fsync from several threads on both devices while the pool writes the
 * same inodes in the background and for kupdate: every fsync finds its
 * data on the device, and a final sync leaves nothing dirty or in flight.
 */
START_TEST(concurrent_fsync_with_pool)
{
	struct t_env e;
	struct t_inode ti[4];
	struct t_fsync_arg f[4];
	pthread_t th[4];
	unsigned i;

	t_env_init(&e, 0, 0);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_BACKGROUND_BYTES, 32 * PAGE_SIZE);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_EXPIRE_CENTISECS, 1);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 1);
	for (i = 0; i < 4; i++) {
		t_inode_init(&e, i % T_DEVS, &ti[i], 1000 * (uint64_t)i);
		f[i] = (struct t_fsync_arg){ .e = &e, .dev = i % T_DEVS, .ti = &ti[i] };
		ck_assert_int_eq(pthread_create(&th[i], NULL, t_fsync_loop, &f[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		bdi_wakeup(e.b[i % T_DEVS], 0, WB_REASON_BACKGROUND);
		pthread_join(th[i], NULL);
		ck_assert_int_eq(f[i].ret, 0);
	}
	for (i = 0; i < T_DEVS; i++) {
		ck_assert_int_eq(bdi_sync(e.b[i], WB_REASON_SYNC), 0);
		ck_assert_int_eq(atomic_load(&bdi_get_stats(e.b[i])->reclaimable), 0);
	}
	/* the pool's last visit may still be completing its writes */
	t_wait_for(!atomic_load(&e.c->stats.nr_writeback), 5000);
	ck_assert_int_eq(atomic_load(&e.c->stats.nr_dirty), 0);
	ck_assert_int_eq(atomic_load(&e.c->stats.nr_writeback), 0);
	for (i = 0; i < 4; i++)
		t_inode_done(&e, i % T_DEVS, &ti[i]);
	t_env_done(&e);
}
END_TEST

/*
 * A device queue of one write: a pool thread inside it waits for room
 * before each write (reaping its own), and leaves between inodes once the
 * queue is full; every scattered page still goes out, one write each.
 */
START_TEST(full_queue_waits_for_room)
{
	const struct flusher_pool_stats *ps;
	struct t_env e;
	struct t_inode a[2];
	unsigned i, k;

	t_queue_depth = 1;
	t_env_init(&e, 0, 0);
	t_queue_depth = 16;
	ps = flusher_pool_get_stats(e.pool);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_BACKGROUND_BYTES, 2 * PAGE_SIZE);
	for (k = 0; k < 2; k++) {
		t_inode_init(&e, 0, &a[k], 1000 * (uint64_t)k);
		for (i = 0; i < 32; i++)
			t_dirty(&a[k], 2 * i, 1, (char)('k' + k));	/* no two adjacent */
	}
	bdi_wakeup(e.b[0], 0, WB_REASON_BACKGROUND);
	t_wait_for(atomic_load(&e.c->stats.nr_dirty) <= 2 &&
		   !atomic_load(&e.c->stats.nr_writeback), 10000);
	ck_assert_int_le(atomic_load(&e.c->stats.nr_dirty), 2);
	ck_assert_int_eq(atomic_load(&bdi_get_stats(e.b[0])->nr_ios), t_written(&e, 0));
	ck_assert_int_ge(t_written(&e, 0), 62);
	ck_assert_int_eq(atomic_load(&ps->pages_written), t_written(&e, 0));
	ck_assert(!bdi_write_congested(e.b[0]));
	for (k = 0; k < 2; k++)
		t_inode_done(&e, 0, &a[k]);
	t_env_done(&e);
}
END_TEST

/* The device's queue count comes back to empty: no device stays congested. */
START_TEST(queue_drains_after_sync)
{
	struct t_env e;
	struct t_inode a;

	t_env_init(&e, 0, 0);
	t_inode_init(&e, 0, &a, 0);
	ck_assert(!bdi_write_congested(e.b[0]));
	t_dirty(&a, 0, 64, 'z');
	ck_assert_int_eq(bdi_sync(e.b[0], WB_REASON_SYNC), 0);
	ck_assert(!bdi_write_congested(e.b[0]));	/* drained again */
	t_inode_done(&e, 0, &a);
	t_env_done(&e);
}
END_TEST

/* Bad configs are refused; destroy joins every thread, however many. */
START_TEST(create_destroy)
{
	struct flusher_pool_config pc = { .min_threads = 3, .max_threads = 2 };
	struct flusher_pool *p;
	struct cache *c;
	struct cache_config cc = { .size_bytes = 256 * PAGE_SIZE, .nr_zones = 1 };

	ck_assert_int_eq(flusher_pool_create(&p, &pc), -EINVAL);	/* no cache */
	c = t_cache_cfg(&cc);
	pc.cache = c;
	ck_assert_int_eq(flusher_pool_create(&p, &pc), -EINVAL);	/* min > max */
	pc.max_threads = 8;
	ck_assert_int_eq(flusher_pool_create(&p, &pc), 0);
	ck_assert_int_eq(atomic_load(&flusher_pool_get_stats(p)->nr_threads), 3);
	flusher_pool_destroy(p);
	cache_destroy(c);
}
END_TEST

static Suite *pdflush_suite(void)
{
	Suite *s = suite_create("pdflush");
	TCase *tc;

	tc = t_tcase(s, "background", background_both_devices, congested_device_skipped,
		     slow_device_stall_and_spawn, pool_of_one_stalls, full_queue_waits_for_room);
	tcase_set_timeout(tc, 30);
	tc = t_tcase(s, "periodic", periodic_through_pool);
	tcase_set_timeout(tc, 30);
	tc = t_tcase(s, "device_work", sync_fsync_vmscan_with_pool, queue_drains_after_sync,
		     concurrent_fsync_with_pool);
	tcase_set_timeout(tc, 30);
	t_tcase(s, "lifecycle", create_destroy);
	return s;
}

int main(void)
{
	return t_run(pdflush_suite());
}
