// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The flusher against a temporary file with a fake owner that maps page i
 * of inode k to block k*4096+i: sync writes exact bytes at the mapped
 * offsets, contiguous pages merge into writes of at most max_io_kb, pages
 * mapped to BDI_PBLK_SKIP are not written, fsync of one inode leaves the
 * others dirty, background writeback starts over the background threshold
 * and stops under it, periodic writeback writes expired inodes, write and
 * mapping errors reach fsync, metadata goes out after data (and after
 * write_inode and sync_fs), pages dirtied during fsync are left for later
 * (TOWRITE), concurrent fsyncs with two flushers, metadata pages the
 * owner holds go home once a periodic pass has it release them, pages
 * the owner leaves for after alloc_wait (BDI_PBLK_AGAIN) are mapped again
 * after it with no page locked or under writeback during the wait, and
 * the bandwidth estimator follows its formula.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wbcfs/flusher/bdi.h"
#include "wbcfs/cache.h"
#include "wbcfs/lib/clock.h"
#include "wbcfs/lib/lockstat.h"
#include "helpers.h"

struct t_inode {
	struct mapping m;
	struct wb_inode wb;
	uint64_t base;		/* first block */
	uint64_t skip_from;	/* pages at or past this index are skipped */
	int map_err;
	bool redirty_on_map;	/* dirty a new page at 100000 + n per map call */
	bool mark_new;		/* map gives its pages new blocks (PG_newblock) */
	unsigned map_delay_us;	/* a slow owner: each map call takes this long */
	uint64_t again_from;	/* pages at or past this index: BDI_PBLK_AGAIN... */
	int again_calls;	/* ...in this many more map calls (-1: always) */
	int alloc_wait_ret;	/* what alloc_wait returns */
	_Atomic int alloc_waits;	/* alloc_wait calls */
	_Atomic int alloc_wait_bad;	/* ...that found a page of it locked or
					 * under writeback */
	_Atomic int map_calls;
	pthread_t caller;	/* the test's thread, set by the test that counts it */
	_Atomic int caller_map_calls;	/* map calls made in @caller */
};

static void t_dirty(struct t_inode *ti, uint64_t first, unsigned n, char fill);

static _Atomic int write_inode_calls;
static _Atomic int order_errors;		/* ordering checks failed in callbacks */
static struct t_env *order_env;			/* set by the ordering test */
static struct t_inode *order_data, *order_meta;
static bool t_block_is(struct t_env *e, uint64_t blk, char fill, char first);

static int t_map(struct bdi *b, struct wb_inode *wi, const uint64_t *index, unsigned n,
		 uint64_t *pblk)
{
	struct t_inode *ti = container_of(wi, struct t_inode, wb);
	unsigned i;

	ti->map_calls++;
	if (pthread_equal(ti->caller, pthread_self()))
		ti->caller_map_calls++;
	if (ti->map_delay_us)
		usleep(ti->map_delay_us);
	if (ti->redirty_on_map)
		t_dirty(ti, 100000 + (uint64_t)ti->map_calls, 1, 'r');
	if (ti->map_err)
		return ti->map_err;
	for (i = 0; i < n; i++) {
		pblk[i] = index[i] >= ti->skip_from ? BDI_PBLK_SKIP : ti->base + index[i];
		if (ti->again_calls && index[i] >= ti->again_from) {
			for (; i < n; i++)
				pblk[i] = BDI_PBLK_AGAIN;
			break;
		}
		if (ti->mark_new) {
			struct page *p = mapping_get_page(&ti->m, index[i]);

			page_set(p, PG_newblock);
			page_put(p);
		}
	}
	if (ti->again_calls > 0)
		ti->again_calls--;
	return 0;
}

/* The owner commits: no page of the inode may be locked or under writeback. */
static int t_alloc_wait(struct bdi *b, struct wb_inode *wi)
{
	struct t_inode *ti = container_of(wi, struct t_inode, wb);
	uint64_t i;

	ti->alloc_waits++;
	for (i = 0; i < 64; i++) {
		struct page *p = mapping_get_page(&ti->m, i);

		if (!p)
			continue;
		if (page_test(p, PG_locked) || page_test(p, PG_writeback))
			ti->alloc_wait_bad++;
		page_put(p);
	}
	return ti->alloc_wait_ret;
}

static _Atomic int newblock_failed_calls;

static void t_newblock_failed(struct bdi *b, struct wb_inode *wi, uint64_t index)
{
	newblock_failed_calls++;
}

static int t_write_inode(struct bdi *b, struct wb_inode *wi, enum wb_sync_mode mode)
{
	write_inode_calls++;
	/* the inode goes out after its own pages are on the device */
	if (order_env && wi == &order_data->wb && !t_block_is(order_env, order_data->base + 3, 'd', 3))
		order_errors++;
	return 0;
}

/* sync_fs runs after all data and before any metadata is written. */
static int t_sync_fs(struct bdi *b)
{
	if (!order_env)
		return 0;
	if (!t_block_is(order_env, order_data->base + 31, 'd', 31))
		order_errors++;
	if (t_block_is(order_env, order_meta->base + 1, 'M', 1))
		order_errors++;
	return 0;
}

/*
 * The owner's held metadata pages (PG_jheld): pages [0, held_n) of
 * held_meta, held since held_at (fake clock), released once expired.
 */
static struct t_inode *held_meta;
static unsigned held_n;
static _Atomic uint64_t held_at;
static _Atomic int expire_calls;

static unsigned long t_meta_expire(struct bdi *b, uint64_t expire_ms)
{
	unsigned long n = 0;
	unsigned i;

	(void)b;
	atomic_fetch_add(&expire_calls, 1);
	if (!held_meta || clock_now_ms() - atomic_load(&held_at) < expire_ms)
		return 0;
	for (i = 0; i < held_n; i++) {
		struct page *p = mapping_get_page(&held_meta->m, i);

		if (p && page_test_clear(p, PG_jheld))
			n++;
		if (p)
			page_put(p);
	}
	return n;
}

static const struct bdi_ops t_ops = { .map_pages = t_map, .write_inode = t_write_inode,
				      .sync_fs = t_sync_fs, .newblock_failed = t_newblock_failed,
				      .alloc_wait = t_alloc_wait, .meta_expire = t_meta_expire };
static enum io_engine_type t_engine = IO_ENGINE_URING;
static unsigned t_flushers = 1;
static bool t_fault_inject;

struct t_env {
	struct cache *c;
	struct bdi *b;
	struct t_bdis wake;	/* the cache's wakeups go to b */
	char path[64];
	int fd;
};

static void t_env_init(struct t_env *e, unsigned max_io_kb, bool rdonly)
{
	struct cache_config cc = { .size_bytes = 4096 * PAGE_SIZE, .nr_zones = 1,
				   .owner = &e->wake };
	struct bdi_config bc = { .name = "test", .engine = t_engine, .queue_depth = 16,
				 .max_io_kb = max_io_kb, .nr_flushers = t_flushers, .ops = &t_ops };

	memset(e, 0, sizeof(*e));
	e->wake = (struct t_bdis){ &e->b, 1 };
	e->c = t_cache_cfg(&cc);
	bc.cache = e->c;
	bc.owner = e;
	bc.fault_inject = t_fault_inject;
	e->fd = t_bdi_file(&e->b, &bc, e->path, rdonly);
}

/*
 * Give the flushers nothing to do: no kupdate, and thresholds over
 * anything a test dirties (512 pages of 4096 are over the default 10%
 * background ratio). Whatever is written is then written by the test's
 * own calls, however late the flushers run on a busy machine.
 */
static void t_no_flusher_work(struct t_env *e)
{
	dirty_tunable_set(&e->c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 0);
	dirty_tunable_set(&e->c->tun, DT_DIRTY_RATIO, 100);
	dirty_tunable_set(&e->c->tun, DT_DIRTY_BACKGROUND_RATIO, 90);
}

static void t_inode_init(struct t_env *e, struct t_inode *ti, uint64_t base)
{
	memset(ti, 0, sizeof(*ti));
	ti->base = base;
	ti->skip_from = UINT64_MAX;
	mapping_init(&ti->m, e->c, &bdi_mapping_ops, &ti->wb);
	bdi_inode_init(e->b, &ti->wb, &ti->m, false);
}

/* The bdi's metadata inode: index == block. */
static void t_meta_init(struct t_env *e, struct t_inode *ti)
{
	memset(ti, 0, sizeof(*ti));
	ti->skip_from = UINT64_MAX;
	mapping_init(&ti->m, e->c, &bdi_mapping_ops, &ti->wb);
	bdi_inode_init(e->b, &ti->wb, &ti->m, true);
	bdi_set_meta(e->b, &ti->wb);
}

/* Pages stamped with their index: t_block_is tells which page landed where. */
static void t_dirty(struct t_inode *ti, uint64_t first, unsigned n, char fill)
{
	t_dirty_pages(&ti->m, first, n, fill, true);
}

static void t_inode_done(struct t_env *e, struct t_inode *ti)
{
	bdi_inode_remove(e->b, &ti->wb);
	mapping_truncate(&ti->m, 0, UINT64_MAX);
	mapping_destroy(&ti->m);
}

static void t_env_done(struct t_env *e)
{
	t_bdi_file_done(&e->b, e->fd, e->path);
	cache_destroy(e->c);
}

static bool t_block_is(struct t_env *e, uint64_t blk, char fill, char first)
{
	return t_block_holds(e->fd, blk, fill, (unsigned char)first);
}

START_TEST(sync_writes_mapped_blocks)
{
	struct t_env e;
	struct t_inode a, b;
	unsigned i;

	t_env_init(&e, 1024, false);
	t_inode_init(&e, &a, 100);
	t_inode_init(&e, &b, 2000);
	t_dirty(&a, 0, 50, 'a');
	t_dirty(&a, 70, 10, 'A');
	t_dirty(&b, 5, 20, 'b');
	ck_assert_int_eq(bdi_sync(e.b, WB_REASON_SYNC), 0);
	for (i = 0; i < 50; i++)
		ck_assert(t_block_is(&e, 100 + i, 'a', (char)i));
	for (i = 70; i < 80; i++)
		ck_assert(t_block_is(&e, 100 + i, 'A', (char)i));
	for (i = 5; i < 25; i++)
		ck_assert(t_block_is(&e, 2000 + i, 'b', (char)i));
	ck_assert_int_eq(e.c->stats.nr_dirty, 0);
	ck_assert_int_eq(e.c->stats.nr_writeback, 0);
	ck_assert_int_eq(bdi_get_stats(e.b)->written, 80);
	ck_assert_int_eq(bdi_get_stats(e.b)->reclaimable, 0);
	t_inode_done(&e, &a);
	t_inode_done(&e, &b);
	t_env_done(&e);
}
END_TEST

START_TEST(contiguous_pages_merge)
{
	struct t_env e;
	struct t_inode a;

	t_env_init(&e, 256, false);	/* 64 pages per write at most */
	t_inode_init(&e, &a, 0);
	t_dirty(&a, 0, 256, 'm');
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), 0);
	ck_assert_int_eq(bdi_get_stats(e.b)->nr_ios, 4);
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

START_TEST(skipped_pages_not_written)
{
	struct t_env e;
	struct t_inode a;

	t_env_init(&e, 1024, false);
	t_inode_init(&e, &a, 10);
	a.skip_from = 5;
	t_dirty(&a, 0, 10, 's');
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), 0);
	ck_assert(t_block_is(&e, 14, 's', 4));
	ck_assert(!t_block_is(&e, 15, 's', 5));
	ck_assert_int_eq(bdi_get_stats(e.b)->written, 5);
	ck_assert_int_eq(e.c->stats.nr_dirty, 0);
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

START_TEST(fsync_one_inode_only)
{
	struct t_env e;
	struct t_inode a, b;

	t_env_init(&e, 1024, false);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 0);	/* no kupdate */
	t_inode_init(&e, &a, 0);
	t_inode_init(&e, &b, 1000);
	t_dirty(&a, 0, 10, 'x');
	t_dirty(&b, 0, 10, 'y');
	write_inode_calls = 0;
	bdi_mark_inode_dirty(e.b, &a.wb, I_DIRTY_INODE);
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), 0);
	ck_assert_int_eq(a.m.nrdirty, 0);
	ck_assert_int_eq(b.m.nrdirty, 10);
	ck_assert_int_eq(write_inode_calls, 1);
	ck_assert(!t_block_is(&e, 1000, 'y', 0));
	t_inode_done(&e, &a);
	t_inode_done(&e, &b);
	t_env_done(&e);
}
END_TEST

START_TEST(background_over_threshold)
{
	struct t_env e;
	struct t_inode a;
	unsigned long bg, thresh;
	int i;

	t_env_init(&e, 1024, false);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 0);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_BACKGROUND_BYTES, 100 * PAGE_SIZE);
	t_inode_init(&e, &a, 0);
	t_dirty(&a, 0, 60, 'q');	/* under bg: stays dirty */
	usleep(200000);
	ck_assert_int_eq(a.m.nrdirty, 60);
	t_dirty(&a, 60, 440, 'q');	/* over: the flusher is kicked */
	bdi_wakeup(e.b, 0, WB_REASON_BACKGROUND);
	for (i = 0; i < 1000 && dirty_over_background(e.c); i++)
		usleep(10000);
	dirty_thresholds(e.c, &bg, &thresh);
	ck_assert_int_le(e.c->stats.nr_dirty, (long)bg);
	/* pages leave the dirty count when their writes start, not end */
	for (i = 0; i < 1000 && bdi_get_stats(e.b)->writeback; i++)
		usleep(10000);
	ck_assert_int_gt(bdi_get_stats(e.b)->written, 0);
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

START_TEST(periodic_writes_expired)
{
	struct t_env e;
	struct t_inode a;
	int i;

	t_env_init(&e, 1024, false);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_EXPIRE_CENTISECS, 20);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 10);
	t_inode_init(&e, &a, 0);
	t_dirty(&a, 0, 8, 'p');
	/* nrdirty drops when writeback starts: wait for the writes too */
	for (i = 0; i < 1000 && (a.m.nrdirty || a.m.nrwriteback); i++)
		usleep(10000);
	ck_assert_int_eq(a.m.nrdirty, 0);
	ck_assert(t_block_is(&e, 7, 'p', 7));
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

/* A device error (not injected) through each engine's own completion path. */
START_TEST(write_error_reaches_fsync)
{
	struct t_env e;
	struct t_inode a;

	t_engine = (enum io_engine_type)_i;
	t_env_init(&e, 1024, true);	/* the device refuses writes */
	t_engine = IO_ENGINE_URING;
	t_inode_init(&e, &a, 0);
	t_dirty(&a, 0, 4, 'e');
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), -EBADF);
	ck_assert_int_eq(bdi_get_stats(e.b)->write_errors, 4);
	ck_assert_int_eq(a.m.nrdirty, 4);	/* kept dirty */
	ck_assert_int_eq(bdi_get_stats(e.b)->reclaimable, 4);
	ck_assert_int_eq(bdi_get_stats(e.b)->writeback, 0);
	/* a second fsync tries again, and fails again */
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), -EBADF);
	ck_assert_int_eq(bdi_get_stats(e.b)->write_errors, 8);
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

START_TEST(map_error_reaches_fsync)
{
	struct t_env e;
	struct t_inode a;

	t_env_init(&e, 1024, false);
	t_inode_init(&e, &a, 0);
	a.map_err = -ENOSPC;
	t_dirty(&a, 0, 4, 'n');
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), -ENOSPC);
	ck_assert_int_eq(a.m.nrdirty, 4);
	a.map_err = 0;
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), 0);
	ck_assert_int_eq(a.m.nrdirty, 0);
	ck_assert(t_block_is(&e, 3, 'n', 3));
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

/*
 * The owner has room for pages 5.. only after a commit (BDI_PBLK_AGAIN):
 * alloc_wait once, with none of the inode's pages locked or under
 * writeback, then they are mapped again and written; nothing is reported.
 * By fsync (the caller's thread) and by sync (a flusher worker).
 */
START_TEST(alloc_wait_then_mapped)
{
	struct t_env e;
	struct t_inode a;
	int sync = _i;

	t_env_init(&e, 1024, false);
	t_inode_init(&e, &a, 100);
	a.again_from = 5;
	a.again_calls = 1;
	t_dirty(&a, 0, 10, 'g');
	if (sync)
		ck_assert_int_eq(bdi_sync(e.b, WB_REASON_SYNC), 0);
	else
		ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), 0);
	ck_assert_int_eq(a.alloc_waits, 1);
	ck_assert_int_eq(a.alloc_wait_bad, 0);
	ck_assert_int_eq(a.map_calls, 2);
	ck_assert_int_eq(bdi_get_stats(e.b)->alloc_waits, 1);
	ck_assert_int_eq(bdi_get_stats(e.b)->written, 10);
	ck_assert_int_eq(a.m.nrdirty, 0);
	ck_assert_int_eq(e.c->stats.nr_writeback, 0);
	for (unsigned i = 0; i < 10; i++)
		ck_assert(t_block_is(&e, 100 + i, 'g', (char)i));
	ck_assert_int_eq(atomic_load(&a.wb.nr_write_errors), 0);
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

/*
 * alloc_wait fails (the commit failed): the pages it was for stay dirty
 * and fsync reports the error; those mapped before were written. An owner
 * that never finds room is asked a bounded number of times: ENOSPC.
 */
START_TEST(alloc_wait_fails)
{
	struct t_env e;
	struct t_inode a;

	t_env_init(&e, 1024, false);
	t_inode_init(&e, &a, 100);
	a.again_from = 5;
	a.again_calls = 1;
	a.alloc_wait_ret = -EIO;
	t_dirty(&a, 0, 10, 'f');
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), -EIO);
	ck_assert_int_eq(a.alloc_waits, 1);
	ck_assert_int_eq(a.m.nrdirty, 5);
	ck_assert(t_block_is(&e, 104, 'f', 4));
	ck_assert(!t_block_is(&e, 105, 'f', 5));
	ck_assert_int_eq(e.c->stats.nr_writeback, 0);

	a.alloc_wait_ret = 0;
	a.again_calls = -1;
	a.alloc_waits = 0;
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), -ENOSPC);
	ck_assert_int_eq(a.alloc_waits, 8);
	ck_assert_int_eq(a.alloc_wait_bad, 0);
	ck_assert_int_eq(a.m.nrdirty, 5);

	a.again_calls = 0;
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), 0);
	ck_assert_int_eq(a.m.nrdirty, 0);
	ck_assert(t_block_is(&e, 109, 'f', 9));
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

/*
 * fault_meta=flush:N: N device flushes succeed, every later one fails
 * until it is turned off; a syncer sees the failed flush; without
 * fault_inject the knob is refused and flushes never fail.
 */
START_TEST(flush_fault_countdown)
{
	struct t_env e;
	struct t_inode a;

	t_env_init(&e, 1024, false);
	ck_assert_int_eq(bdi_set_fault_flush(e.b, 0), -EPERM);
	ck_assert(!bdi_flush_faulted(e.b));
	ck_assert_int_eq(bdi_flush_device(e.b), 0);
	t_env_done(&e);

	t_fault_inject = true;
	t_env_init(&e, 1024, false);
	t_fault_inject = false;
	ck_assert(!bdi_flush_faulted(e.b));
	ck_assert_int_eq(bdi_flush_device(e.b), 0);	/* off by default */
	ck_assert_int_eq(bdi_set_fault_flush(e.b, 2), 0);
	ck_assert(bdi_flush_faulted(e.b));
	ck_assert(!bdi_flush_fault_take(e.b));		/* one: a FUA write's */
	ck_assert_int_eq(bdi_flush_device(e.b), 0);	/* two */
	ck_assert_int_eq(bdi_flush_device(e.b), -EIO);
	ck_assert(bdi_flush_fault_take(e.b));
	ck_assert_int_eq(bdi_flush_device(e.b), -EIO);
	/* sync writes the data, then its flush fails */
	t_inode_init(&e, &a, 0);
	t_dirty(&a, 0, 4, 'q');
	ck_assert_int_eq(bdi_sync(e.b, WB_REASON_SYNC), -EIO);
	ck_assert(t_block_is(&e, 3, 'q', 3));
	ck_assert_int_eq(bdi_set_fault_flush(e.b, -1), 0);
	ck_assert(!bdi_flush_faulted(e.b));
	ck_assert_int_eq(bdi_flush_device(e.b), 0);
	ck_assert_int_eq(bdi_sync(e.b, WB_REASON_SYNC), 0);
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

START_TEST(bandwidth_estimator)
{
	struct bdi_bw bw = { .stamp_ms = 1000, .written_stamp = 0,
			     .write_bw = 25600, .avg_write_bw = 25600, .measured_ms = 4096 };

	bdi_bw_update(&bw, 1100, 1000);		/* < 200 ms: nothing */
	ck_assert_int_eq(bw.write_bw, 25600);
	/* 12800 pages in 500 ms = 25600 pages/s: unchanged */
	bdi_bw_update(&bw, 1500, 12800);
	ck_assert_int_eq(bw.write_bw, 25600);
	/* 0.5 s at 51200 pages/s: bw = (25600*1000 + 25600*(4096-500))/4096 */
	bdi_bw_update(&bw, 2000, 12800 + 25600);
	ck_assert_int_eq(bw.write_bw, (25600 * 1000 + 25600L * (4096 - 500)) / 4096);
	/* avg only follows when old and new agree in direction */
	ck_assert_int_eq(bw.avg_write_bw, 25600);
	/* a long gap: the estimate is the rate over the gap */
	bdi_bw_update(&bw, 2000 + 5000, 12800 + 25600 + 50000);
	ck_assert_int_eq(bw.write_bw, 10000);
	ck_assert_int_eq(bw.avg_write_bw, 10000);
}
END_TEST


/* The same sync through every engine (an unavailable one falls back to psync). */
START_TEST(sync_each_engine)
{
	static const enum io_engine_type types[] = { IO_ENGINE_URING, IO_ENGINE_AIO,
						     IO_ENGINE_PSYNC };
	struct t_env e;
	struct t_inode a;
	unsigned i;

	t_engine = types[_i];
	t_env_init(&e, 64, false);
	t_engine = IO_ENGINE_URING;
	t_inode_init(&e, &a, 300);
	t_dirty(&a, 0, 100, 'g');
	t_dirty(&a, 200, 3, 'h');
	ck_assert_int_eq(bdi_sync(e.b, WB_REASON_SYNC), 0);
	for (i = 0; i < 100; i++)
		ck_assert(t_block_is(&e, 300 + i, 'g', (char)i));
	for (i = 200; i < 203; i++)
		ck_assert(t_block_is(&e, 300 + i, 'h', (char)i));
	ck_assert_int_eq(bdi_get_stats(e.b)->written, 103);
	/* 100 contiguous pages in 16-page writes (7), and one run of 3 */
	ck_assert_int_eq(bdi_get_stats(e.b)->nr_ios, 8);
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

/* Background writeback writes whole inodes until under the threshold, then stops. */
START_TEST(background_stops_under_threshold)
{
	struct t_env e;
	struct t_inode a[10];
	unsigned long bg, thresh;
	int i;

	t_env_init(&e, 1024, false);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 0);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_BACKGROUND_BYTES, 100 * PAGE_SIZE);
	dirty_thresholds(e.c, &bg, &thresh);
	ck_assert_int_eq(bg, 100);
	for (i = 0; i < 10; i++) {
		t_inode_init(&e, &a[i], 1000 * (uint64_t)i);
		t_dirty(&a[i], 0, 50, 'b');
	}
	bdi_wakeup(e.b, 0, WB_REASON_BACKGROUND);
	for (i = 0; i < 1000 && dirty_over_background(e.c); i++)
		usleep(10000);
	usleep(300000);		/* and it stays stopped */
	ck_assert_int_le(e.c->stats.nr_dirty, 100);
	ck_assert_int_gt(e.c->stats.nr_dirty, 0);
	/* oldest first: the first inode dirtied went out */
	ck_assert_int_eq(a[0].m.nrdirty, 0);
	ck_assert_int_eq(a[9].m.nrdirty, 50);
	for (i = 0; i < 10; i++)
		t_inode_done(&e, &a[i]);
	t_env_done(&e);
}
END_TEST

/* kupdate writes inodes dirtied more than dirty_expire ago, not younger ones. */
START_TEST(periodic_only_expired)
{
	struct t_env e;
	struct t_inode a, b;
	int i;

	/* the flusher's clock moves only when the test moves it: how late
	 * the flusher runs on a busy machine changes no inode's age */
	t_clock_fake(100000);
	t_env_init(&e, 1024, false);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_EXPIRE_CENTISECS, 60);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 5);
	t_inode_init(&e, &a, 0);
	t_inode_init(&e, &b, 1000);
	/* a sync is the worker's to serve: once it returns the worker runs,
	 * and its kupdate interval counts from this clock, not from a thread
	 * start delayed past the moves below */
	ck_assert_int_eq(bdi_sync(e.b, WB_REASON_SYNC), 0);
	t_dirty(&a, 0, 8, 'o');
	t_clock_advance(450);
	t_dirty(&b, 0, 8, 'y');
	t_clock_advance(200);		/* a is 0.65 s old, b 0.2 s */
	for (i = 0; i < 1000 && a.m.nrdirty; i++)
		usleep(10000);
	ck_assert_int_eq(a.m.nrdirty, 0);
	ck_assert_int_eq(b.m.nrdirty, 8);	/* expires at 0.6 s */
	t_clock_advance(500);
	for (i = 0; i < 1000 && b.m.nrdirty; i++)
		usleep(10000);
	ck_assert_int_eq(b.m.nrdirty, 0);
	t_inode_done(&e, &a);
	t_inode_done(&e, &b);
	t_env_done(&e);
	t_clock_real();
}
END_TEST

/*
 * Held metadata pages (a journal's committed blocks) are skipped by
 * writeback, even when the metadata inode is due, until the owner
 * releases them; a periodic pass asks the owner (meta_expire) and
 * writes what expired, with no sync, commit or new dirtying to requeue
 * anything.
 */
START_TEST(held_meta_expires)
{
	struct t_env e;
	struct t_inode meta;
	unsigned i;
	int calls, k;

	t_clock_fake(100000);
	t_env_init(&e, 1024, false);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_EXPIRE_CENTISECS, 60);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 5);
	t_meta_init(&e, &meta);
	ck_assert_int_eq(bdi_sync(e.b, WB_REASON_SYNC), 0);	/* the worker runs */
	t_dirty(&meta, 0, 4, 'H');
	for (i = 0; i < 4; i++) {
		struct page *p = mapping_get_page(&meta.m, i);

		ck_assert_ptr_nonnull(p);
		page_set(p, PG_jheld);
		page_put(p);
	}
	/* committed 0.4 s after they were dirtied */
	atomic_store(&held_at, clock_now_ms() + 400);
	held_n = 4;
	held_meta = &meta;
	/* the inode is 0.7 s old, past its expiry; the pages are held 0.3 s */
	calls = atomic_load(&expire_calls);
	t_clock_advance(700);
	for (k = 0; k < 1000 && atomic_load(&expire_calls) == calls; k++)
		usleep(10000);
	ck_assert_int_gt(atomic_load(&expire_calls), calls);
	usleep(100000);
	ck_assert_int_eq(meta.m.nrdirty, 4);
	ck_assert(!t_block_is(&e, 3, 'H', 3));
	/* held 0.7 s now: the next periodic pass releases and writes them */
	t_clock_advance(400);
	for (k = 0; k < 1000 && (meta.m.nrdirty || meta.m.nrwriteback); k++)
		usleep(10000);
	ck_assert_int_eq(meta.m.nrdirty, 0);
	for (i = 0; i < 4; i++)
		ck_assert(t_block_is(&e, i, 'H', (char)i));
	held_meta = NULL;
	bdi_set_meta(e.b, NULL);
	t_inode_done(&e, &meta);
	t_env_done(&e);
	t_clock_real();
}
END_TEST

/* Ordered mode: data, then write_inode, then sync_fs, then metadata. */
START_TEST(metadata_after_data)
{
	struct t_env e;
	struct t_inode d, meta;
	unsigned i;

	t_env_init(&e, 1024, false);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 0);
	t_inode_init(&e, &d, 500);
	t_meta_init(&e, &meta);
	order_env = &e;
	order_data = &d;
	order_meta = &meta;
	order_errors = 0;
	t_dirty(&meta, 0, 4, 'M');	/* dirtied first, still written last */
	t_dirty(&d, 0, 32, 'd');
	bdi_mark_inode_dirty(e.b, &d.wb, I_DIRTY_INODE);
	ck_assert_int_eq(bdi_sync(e.b, WB_REASON_SYNC), 0);
	ck_assert_int_eq(order_errors, 0);
	for (i = 0; i < 4; i++)
		ck_assert(t_block_is(&e, i, 'M', (char)i));
	ck_assert_int_eq(meta.m.nrdirty, 0);
	/* bdi_sync_meta alone */
	t_dirty(&meta, 10, 2, 'N');
	ck_assert_int_eq(bdi_sync_meta(e.b), 0);
	ck_assert(t_block_is(&e, 11, 'N', 11));
	order_env = NULL;
	bdi_set_meta(e.b, NULL);
	t_inode_done(&e, &meta);
	t_inode_done(&e, &d);
	t_env_done(&e);
}
END_TEST

struct t_dirtier {
	struct t_env *e;
	struct t_inode *ti;
	_Atomic bool stop;
	_Atomic long loops;
};

/* Keeps @ti over the background threshold: 64 pages at a time over 1024. */
static void *t_dirtier_main(void *arg)
{
	struct t_dirtier *d = arg;
	uint64_t k = 0;

	while (!d->stop) {
		t_dirty(d->ti, (k++ % 16) * 64, 64, 'a');
		bdi_wakeup(d->e->b, 0, WB_REASON_BACKGROUND);
		d->loops++;
	}
	return NULL;
}

/*
 * A background pass that data keeps over the threshold never ends; the
 * metadata inode still gets its turn in the rotation (the kernel's block
 * device inode is one of the dirty inodes), not only when the pass ends.
 */
START_TEST(metadata_in_rotation)
{
	struct t_env e;
	struct t_inode a, meta;
	struct t_dirtier d = { 0 };
	pthread_t th;
	unsigned i;

	t_env_init(&e, 1024, false);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 0);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_BACKGROUND_BYTES, 16 * PAGE_SIZE);
	t_inode_init(&e, &a, 2000);
	a.map_delay_us = 2000;	/* writeback slower than the dirtier */
	t_meta_init(&e, &meta);
	t_dirty(&meta, 0, 4, 'M');
	d.e = &e;
	d.ti = &a;
	ck_assert_int_eq(pthread_create(&th, NULL, t_dirtier_main, &d), 0);
	/* a pass may also end on a round that wrote nothing (the dirtier holds
	 * the pages), and write the metadata then: dirty it again until a turn */
	for (i = 0; i < 1000 && !atomic_load(&bdi_get_stats(e.b)->meta_turns); i++) {
		if (!meta.m.nrdirty && !meta.m.nrwriteback)
			t_dirty(&meta, 0, 4, 'M');
		usleep(10000);
	}
	ck_assert_int_ge(atomic_load(&bdi_get_stats(e.b)->meta_turns), 1);
	for (i = 0; i < 1000 && (meta.m.nrdirty || meta.m.nrwriteback); i++)
		usleep(10000);
	ck_assert_int_eq(meta.m.nrdirty, 0);
	for (i = 0; i < 4; i++)
		ck_assert(t_block_is(&e, i, 'M', (char)i));
	d.stop = true;
	pthread_join(th, NULL);
	ck_assert_int_gt(d.loops, 0);
	bdi_set_meta(e.b, NULL);
	t_inode_done(&e, &meta);
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

/* Pages dirtied while fsync runs are left for later: TOWRITE, no livelock. */
START_TEST(towrite_no_livelock)
{
	struct t_env e;
	struct t_inode a;

	t_env_init(&e, 1024, false);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 0);
	/* keep background writeback out of it */
	dirty_tunable_set(&e.c->tun, DT_DIRTY_BYTES, 4000 * PAGE_SIZE);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_BACKGROUND_BYTES, 3900 * PAGE_SIZE);
	t_inode_init(&e, &a, 0);
	t_dirty(&a, 0, 2100, 't');	/* three batches: three map_pages calls */
	a.redirty_on_map = true;
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), 0);
	a.redirty_on_map = false;
	ck_assert_int_ge(a.map_calls, 3);
	ck_assert_int_eq(a.m.nrdirty, a.map_calls);
	ck_assert(t_block_is(&e, 2099, 't', (char)2099));
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

struct t_fsync_arg {
	struct t_env *e;
	struct t_inode *ti;
	int ret;
};

static void *t_fsync_loop(void *arg)
{
	struct t_fsync_arg *f = arg;

	f->ret = t_fsync_rounds(f->e->b, &f->ti->wb, &f->ti->m, f->e->fd, f->ti->base, 15, 64,
				true);
	return NULL;
}

/* fsync from several threads with two flushers and background writeback running. */
START_TEST(concurrent_fsync)
{
	struct t_env e;
	struct t_inode a[4];
	struct t_fsync_arg f[4];
	pthread_t th[4];
	int i;

	t_flushers = 2;
	t_env_init(&e, 128, false);
	t_flushers = 1;
	dirty_tunable_set(&e.c->tun, DT_DIRTY_BACKGROUND_BYTES, 32 * PAGE_SIZE);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_EXPIRE_CENTISECS, 1);
	dirty_tunable_set(&e.c->tun, DT_DIRTY_WRITEBACK_CENTISECS, 1);
	for (i = 0; i < 4; i++) {
		t_inode_init(&e, &a[i], 1000 * (uint64_t)i);
		f[i] = (struct t_fsync_arg){ .e = &e, .ti = &a[i] };
		ck_assert_int_eq(pthread_create(&th[i], NULL, t_fsync_loop, &f[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_eq(f[i].ret, 0);
	}
	ck_assert_int_eq(bdi_sync(e.b, WB_REASON_SYNC), 0);
	ck_assert_int_eq(e.c->stats.nr_dirty, 0);
	ck_assert_int_eq(bdi_get_stats(e.b)->writeback, 0);
	ck_assert_int_eq(bdi_get_stats(e.b)->reclaimable, 0);
	for (i = 0; i < 4; i++)
		t_inode_done(&e, &a[i]);
	t_env_done(&e);
}
END_TEST

/*
 * fsync writes in its caller's thread, as the kernel's does: two fsyncs
 * of different files need not queue behind each other on the worker.
 */
START_TEST(fsync_in_caller)
{
	struct t_env e;
	struct t_inode a;

	t_env_init(&e, 1024, false);
	t_no_flusher_work(&e);
	t_inode_init(&e, &a, 0);
	a.caller = pthread_self();
	t_dirty(&a, 0, 8, 'c');
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), 0);
	ck_assert_int_eq(a.map_calls, 1);
	ck_assert_int_eq(a.caller_map_calls, 1);
	ck_assert(t_block_is(&e, 7, 'c', 7));
	/* the context goes back to the bdi: a second fsync reuses it */
	t_dirty(&a, 8, 8, 'd');
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), 0);
	ck_assert_int_eq(a.caller_map_calls, a.map_calls);
	ck_assert(t_block_is(&e, 15, 'd', 15));
	ck_assert_int_eq(a.m.nrdirty, 0);
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

LOCK_CLASS(lc_test_lock, "test_lock")

/* A thread that holds a lock while it waits for an ordered epoch, as a journal commit does. */
struct t_orderer {
	struct t_env *e;
	pthread_mutex_t *lock;
	pthread_barrier_t *held;
	int mark;
};

static void *t_orderer_main(void *arg)
{
	struct t_orderer *o = arg;

	pthread_mutex_lock(o->lock);
	pthread_barrier_wait(o->held);
	bdi_ordered_wait(o->e->b, o->mark);
	pthread_mutex_unlock(o->lock);
	return NULL;
}

/*
 * bdi_sync_inode_start: the pages are mapped in the caller and written, and
 * the writes that have not ended by the time it returns stay in flight
 * until the caller steps them (nobody else completes them); a thread that
 * holds a lock while it waits for them (ordered wait) does not deadlock a
 * caller that steps while it tries that lock; finish reports what
 * bdi_sync_inode would, a write fault included. 2 MiB in 1 MiB writes, so
 * that writes are still in flight when start returns (it ends only those
 * already done): with a plain lock instead of the stepping one, the test
 * then hangs.
 */
START_TEST(sync_start_steps)
{
	struct t_env e;
	struct t_inode a;
	struct bdi_sync_io io;
	struct t_orderer o;
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_barrier_t held;
	pthread_t th;

	t_fault_inject = true;
	t_env_init(&e, 1024, false);
	t_fault_inject = false;
	t_no_flusher_work(&e);
	t_inode_init(&e, &a, 0);
	a.caller = pthread_self();
	t_dirty(&a, 0, 512, 's');
	bdi_sync_inode_start(e.b, &a.wb, 0, UINT64_MAX, false, &io);
	ck_assert_int_gt(a.map_calls, 0);
	ck_assert_int_eq(a.caller_map_calls, a.map_calls);
	ck_assert_int_eq(a.m.nrdirty, 0);
	/* every page is either written or still in flight, nothing lost */
	ck_assert_int_eq(bdi_get_stats(e.b)->writeback + bdi_get_stats(e.b)->written, 512);

	/* the orderer holds the lock and waits for our writes: stepping gets it */
	o = (struct t_orderer){ .e = &e, .lock = &lock, .held = &held,
				.mark = bdi_ordered_mark(e.b) };
	pthread_barrier_init(&held, NULL, 2);
	ck_assert_int_eq(pthread_create(&th, NULL, t_orderer_main, &o), 0);
	pthread_barrier_wait(&held);
	ck_assert_int_eq(ls_mutex_lock_stepping(&lock, &lc_test_lock, bdi_sync_io_step, &io), 0);
	pthread_mutex_unlock(&lock);
	pthread_join(th, NULL);
	pthread_barrier_destroy(&held);
	ck_assert_int_eq(bdi_get_stats(e.b)->writeback, 0);
	ck_assert(!bdi_sync_io_step(&io));	/* nothing left */
	ck_assert_int_eq(bdi_sync_inode_finish(e.b, &io), 0);
	ck_assert(t_block_is(&e, 511, 's', (char)511));

	/* a write that fails reaches finish, and the page stays dirty */
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &a.wb, WB_FAULT_WRITE), 0);
	t_dirty(&a, 600, 1, 'x');
	bdi_sync_inode_start(e.b, &a.wb, 0, UINT64_MAX, false, &io);
	ck_assert_int_eq(bdi_sync_inode_finish(e.b, &io), -EIO);
	ck_assert_int_eq(a.m.nrdirty, 1);
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &a.wb, 0), 0);
	bdi_sync_inode_start(e.b, &a.wb, 0, UINT64_MAX, false, &io);
	ck_assert_int_eq(bdi_sync_inode_finish(e.b, &io), 0);
	ck_assert(t_block_is(&e, 600, 'x', (char)600));
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

START_TEST(map_eio_reaches_fsync)
{
	struct t_env e;
	struct t_inode a;

	t_env_init(&e, 1024, false);
	t_inode_init(&e, &a, 0);
	a.map_err = -EIO;
	t_dirty(&a, 0, 4, 'n');
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), -EIO);
	ck_assert_int_eq(bdi_get_stats(e.b)->write_errors, 4);
	ck_assert_int_eq(a.m.nrdirty, 4);	/* kept, and reported */
	a.map_err = 0;
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), 0);
	ck_assert_int_eq(a.m.nrdirty, 0);
	ck_assert(t_block_is(&e, 2, 'n', 2));
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

/*
 * Fault injection, with each engine: writes of the faulted inode fail
 * with EIO and its pages stay dirty while another inode is written; every
 * errseq cursor sampled before sees the error once; once the fault is
 * cleared an fsync writes the kept data.
 */
START_TEST(fault_write_then_recover)
{
	struct t_env e;
	struct t_inode a, b;
	errseq_t fd1, fd2, fb;

	t_engine = (enum io_engine_type)_i;
	t_fault_inject = true;
	t_env_init(&e, 1024, false);
	t_fault_inject = false;
	t_engine = IO_ENGINE_URING;
	t_inode_init(&e, &a, 0);
	t_inode_init(&e, &b, 1000);
	fd1 = mapping_sample_error(&a.m);
	fd2 = mapping_sample_error(&a.m);
	fb = mapping_sample_error(&b.m);
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &a.wb, WB_FAULT_WRITE), 0);
	t_dirty(&a, 0, 8, 'f');
	t_dirty(&b, 0, 8, 'g');
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), -EIO);
	ck_assert_int_eq(a.m.nrdirty, 8);
	ck_assert(!t_block_is(&e, 0, 'f', 0));
	ck_assert_int_eq(bdi_sync_inode(e.b, &b.wb, 0, UINT64_MAX, false), 0);
	ck_assert(t_block_is(&e, 1007, 'g', 7));
	ck_assert_int_eq(mapping_check_and_advance(&a.m, &fd1), -EIO);
	ck_assert_int_eq(mapping_check_and_advance(&a.m, &fd1), 0);
	ck_assert_int_eq(mapping_check_and_advance(&b.m, &fb), 0);	/* b never failed */
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &a.wb, 0), 0);
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), 0);
	ck_assert_int_eq(a.m.nrdirty, 0);
	ck_assert(t_block_is(&e, 7, 'f', 7));
	ck_assert_int_eq(mapping_check_and_advance(&a.m, &fd2), -EIO);	/* not yet seen by it */
	ck_assert_int_eq(mapping_check_and_advance(&a.m, &fd2), 0);
	fd1 = mapping_sample_error(&a.m);	/* opened after: nothing to report */
	ck_assert_int_eq(mapping_check_and_advance(&a.m, &fd1), 0);
	ck_assert_int_eq(bdi_sync(e.b, WB_REASON_SYNC), 0);
	t_inode_done(&e, &a);
	t_inode_done(&e, &b);
	t_env_done(&e);
}
END_TEST

/*
 * A write that fails on a page whose block is new (PG_newblock, set by the
 * owner's map) is reported to the owner (newblock_failed), once per page
 * and failed write, before the sync returns; pages whose blocks held data
 * are not; a write that succeeds clears PG_newblock.
 */
START_TEST(newblock_failure_reported)
{
	struct t_env e;
	struct t_inode a, b;
	struct page *p;

	t_fault_inject = true;
	t_env_init(&e, 1024, false);
	t_fault_inject = false;
	t_inode_init(&e, &a, 0);
	t_inode_init(&e, &b, 1000);
	a.mark_new = true;
	newblock_failed_calls = 0;
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &a.wb, WB_FAULT_WRITE), 0);
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &b.wb, WB_FAULT_WRITE), 0);
	t_dirty(&a, 0, 8, 'n');
	t_dirty(&b, 0, 4, 'o');
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), -EIO);
	ck_assert_int_eq(newblock_failed_calls, 8);
	ck_assert_int_eq(bdi_sync_inode(e.b, &b.wb, 0, UINT64_MAX, false), -EIO);
	ck_assert_int_eq(newblock_failed_calls, 8);	/* b's blocks held data */
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), -EIO);
	ck_assert_int_eq(newblock_failed_calls, 16);	/* each failed write */
	p = mapping_get_page(&a.m, 5);
	ck_assert(page_test(p, PG_newblock) && page_test(p, PG_dirty));
	page_put(p);
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &a.wb, 0), 0);
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &b.wb, 0), 0);
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), 0);
	ck_assert_int_eq(bdi_sync_inode(e.b, &b.wb, 0, UINT64_MAX, false), 0);
	ck_assert_int_eq(newblock_failed_calls, 16);
	p = mapping_get_page(&a.m, 5);
	ck_assert(!page_test(p, PG_newblock) && !page_test(p, PG_dirty));
	page_put(p);
	ck_assert(t_block_is(&e, 7, 'n', 7));
	a.mark_new = false;
	t_inode_done(&e, &a);
	t_inode_done(&e, &b);
	t_env_done(&e);
}
END_TEST

/*
 * A failed metadata write is kept dirty and reported by the next metadata
 * sync (one bdi-wide cursor), and by sync(2) while it keeps failing.
 */
START_TEST(meta_error_reported_once)
{
	struct t_env e;
	struct t_inode meta;

	t_fault_inject = true;
	t_env_init(&e, 1024, false);
	t_fault_inject = false;
	t_inode_init(&e, &meta, 0);
	meta.wb.is_meta = true;
	bdi_set_meta(e.b, &meta.wb);
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &meta.wb, WB_FAULT_WRITE), 0);
	t_dirty(&meta, 10, 3, 'M');
	ck_assert_int_eq(bdi_sync_meta(e.b), -EIO);
	ck_assert_int_eq(meta.m.nrdirty, 3);
	ck_assert_int_eq(bdi_sync(e.b, WB_REASON_SYNC), -EIO);	/* failed again */
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &meta.wb, 0), 0);
	ck_assert_int_eq(bdi_sync_meta(e.b), 0);		/* already reported */
	ck_assert_int_eq(meta.m.nrdirty, 0);
	ck_assert(t_block_is(&e, 12, 'M', 12));
	bdi_set_meta(e.b, NULL);
	t_inode_done(&e, &meta);
	t_env_done(&e);
}
END_TEST

/* Without fault_inject nothing fails, whatever the inode says. */
START_TEST(fault_off_by_default)
{
	struct t_env e;
	struct t_inode a;
	struct iovec iov;
	char buf[PAGE_SIZE];

	t_env_init(&e, 1024, false);
	t_inode_init(&e, &a, 0);
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &a.wb, WB_FAULT_WRITE), -EPERM);
	atomic_store(&a.wb.fault, WB_FAULT_WRITE | WB_FAULT_READ);
	t_dirty(&a, 0, 2, 'o');
	ck_assert_int_eq(bdi_sync_inode(e.b, &a.wb, 0, UINT64_MAX, false), 0);
	ck_assert(t_block_is(&e, 1, 'o', 1));
	iov = (struct iovec){ buf, PAGE_SIZE };
	ck_assert_int_eq(bdi_read(e.b, &a.wb, &iov, 1, PAGE_SIZE), (long)PAGE_SIZE);
	ck_assert_int_eq(buf[1], 'o');
	t_inode_done(&e, &a);
	t_env_done(&e);
}
END_TEST

/* A read fault fails reads of that inode's pages only. */
START_TEST(fault_read)
{
	struct t_env e;
	struct t_inode a, b;
	struct iovec iov;
	char buf[PAGE_SIZE];

	t_fault_inject = true;
	t_env_init(&e, 1024, false);
	t_fault_inject = false;
	t_inode_init(&e, &a, 0);
	t_inode_init(&e, &b, 0);
	iov = (struct iovec){ buf, PAGE_SIZE };
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &a.wb, WB_FAULT_READ), 0);
	ck_assert_int_eq(bdi_read(e.b, &a.wb, &iov, 1, 0), -EIO);
	ck_assert_int_eq(bdi_read(e.b, &b.wb, &iov, 1, 0), (long)PAGE_SIZE);
	ck_assert_int_eq(bdi_read(e.b, NULL, &iov, 1, 0), (long)PAGE_SIZE);
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &a.wb, 0), 0);
	ck_assert_int_eq(bdi_read(e.b, &a.wb, &iov, 1, 0), (long)PAGE_SIZE);
	t_inode_done(&e, &a);
	t_inode_done(&e, &b);
	t_env_done(&e);
}
END_TEST

/*
 * A permanent write error does not spin the flusher: background
 * writeback over the threshold retries the failing inode with a backoff
 * (100 ms, doubling), while other inodes are still written.
 */
START_TEST(fault_backoff)
{
	struct t_env e;
	struct t_inode a, b;
	unsigned long errs;
	int i;

	/* the backoff runs on the flusher's clock, which moves only here:
	 * how often a busy machine lets the flusher look changes nothing */
	t_clock_fake(100000);
	t_fault_inject = true;
	t_env_init(&e, 1024, false);
	t_fault_inject = false;
	dirty_tunable_set(&e.c->tun, DT_DIRTY_BACKGROUND_BYTES, 8 * PAGE_SIZE);
	t_inode_init(&e, &a, 0);
	t_inode_init(&e, &b, 1000);
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &a.wb, WB_FAULT_WRITE), 0);
	t_dirty(&a, 0, 64, 'k');
	t_dirty(&b, 0, 64, 'l');
	bdi_wakeup(e.b, 0, WB_REASON_BACKGROUND);
	for (i = 0; i < 1000 && (b.m.nrdirty || !atomic_load(&a.wb.nr_write_errors) ||
				 a.m.nrwriteback); i++)
		usleep(10000);
	ck_assert_int_eq(b.m.nrdirty, 0);
	ck_assert_int_eq(a.m.nrwriteback, 0);
	errs = atomic_load(&a.wb.nr_write_errors);
	ck_assert_uint_gt(errs, 0);
	/* the clock stands still: the backoff never ends, no retry comes */
	usleep(300000);
	ck_assert_uint_eq(atomic_load(&a.wb.nr_write_errors), errs);
	/* past the first backoff (100 ms): retried once, then waiting 200 ms */
	t_clock_advance(150);
	for (i = 0; i < 1000 && (atomic_load(&a.wb.nr_write_errors) == errs || a.m.nrwriteback); i++)
		usleep(10000);
	ck_assert_uint_gt(atomic_load(&a.wb.nr_write_errors), errs);
	ck_assert_int_eq(a.m.nrwriteback, 0);
	errs = atomic_load(&a.wb.nr_write_errors);
	t_clock_advance(150);	/* 150 of its 200 ms */
	usleep(300000);
	ck_assert_uint_eq(atomic_load(&a.wb.nr_write_errors), errs);
	ck_assert_int_eq(a.m.nrdirty, 64);
	ck_assert_int_eq(bdi_inode_set_fault(e.b, &a.wb, 0), 0);
	ck_assert_int_eq(bdi_sync(e.b, WB_REASON_SYNC), 0);
	ck_assert_int_eq(a.m.nrdirty, 0);
	ck_assert(t_block_is(&e, 63, 'k', 63));
	t_inode_done(&e, &a);
	t_inode_done(&e, &b);
	t_env_done(&e);
	t_clock_real();
}
END_TEST

/* A new device: the first measurements replace the initial guess at once. */
START_TEST(bandwidth_warmup)
{
	struct bdi_bw bw = { .stamp_ms = 1000, .written_stamp = 0,
			     .write_bw = 25600, .avg_write_bw = 25600 };

	/* 200 ms at 12800 pages/s (50 MB/s): the estimate is that */
	bdi_bw_update(&bw, 1200, 2560);
	ck_assert_int_eq(bw.write_bw, 12800);
	ck_assert_int_eq(bw.avg_write_bw, 12800);
	/* 200 ms more at 6400 pages/s: the average of the 400 ms */
	bdi_bw_update(&bw, 1400, 2560 + 1280);
	ck_assert_int_eq(bw.write_bw, 9600);
	/* after a whole period measured, the kernel's running estimate */
	bdi_bw_update(&bw, 5600, 3840 + 4200 * 64 / 10);
	ck_assert_int_eq(bw.measured_ms, 4096);	/* 4.2 s at once: the rate over it */
	bdi_bw_update(&bw, 5800, 3840 + 4200 * 64 / 10 + 2560);
	ck_assert_int_eq(bw.write_bw, (2560L * 1000 + 6400L * (4096 - 200)) / 4096);
}
END_TEST

/* A trickle while idle does not drag the estimate down; a burst counts. */
START_TEST(bandwidth_idle_trickle)
{
	struct bdi_bw bw = { .stamp_ms = 1000, .written_stamp = 0,
			     .write_bw = 12800, .avg_write_bw = 12800, .measured_ms = 4096 };
	uint64_t t;
	long w = 0;

	for (t = 1200; t <= 11000; t += 200) {	/* 2 metadata pages a second */
		if (t % 1000 == 0)
			w += 2;
		bdi_bw_sample(&bw, t, w, true);
	}
	ck_assert_int_eq(bw.write_bw, 12800);
	ck_assert_int_eq(bw.stamp_ms, 11000);
	/* 2560 pages that completed within 200 ms: a real sample */
	bdi_bw_sample(&bw, 11200, w + 2560, true);
	ck_assert_int_eq(bw.write_bw, 12800);
	ck_assert_int_eq(bw.stamp_ms, 11200);
	/* busy (I/O in flight) but slow: counted, the estimate drops */
	bdi_bw_sample(&bw, 11400, w + 2560 + 128, false);
	ck_assert_int_lt(bw.write_bw, 12800);
}
END_TEST

/* After an idle gap the next estimate covers only the busy time. */
START_TEST(bandwidth_idle_reset)
{
	struct bdi_bw bw = { .stamp_ms = 1000, .written_stamp = 0,
			     .write_bw = 25600, .avg_write_bw = 25600, .measured_ms = 4096 };

	bdi_bw_start(&bw, 1500, 0, true);	/* < 1 s: keep */
	ck_assert_int_eq(bw.stamp_ms, 1000);
	bdi_bw_start(&bw, 9000, 0, false);	/* I/O in flight: keep */
	ck_assert_int_eq(bw.stamp_ms, 1000);
	bdi_bw_start(&bw, 9000, 0, true);
	ck_assert_int_eq(bw.stamp_ms, 9000);
	/* 500 ms at 25600 pages/s: the estimate holds */
	bdi_bw_update(&bw, 9500, 12800);
	ck_assert_int_eq(bw.write_bw, 25600);
	/* an update with nothing written after > 1 s only moves the stamps */
	bdi_bw_update(&bw, 12000, 12800);
	ck_assert_int_eq(bw.write_bw, 25600);
	ck_assert_int_eq(bw.stamp_ms, 12000);
}
END_TEST

/*
 * Samplers read the clock before bw_lock: one that lost the race arrives
 * with a time before the last stamp. Its interval is empty; it must not
 * be read as 2^64 ms (that drove the estimate negative, and writeback's
 * chunk with it: 100 writers then stalled with nothing written).
 */
START_TEST(bandwidth_late_sampler)
{
	struct bdi_bw bw = { .stamp_ms = 10000, .written_stamp = 5000,
			     .write_bw = 12800, .avg_write_bw = 12800, .measured_ms = 4096 };

	bdi_bw_update(&bw, 9990, 5100);
	ck_assert_int_eq(bw.write_bw, 12800);
	ck_assert_int_eq(bw.avg_write_bw, 12800);
	ck_assert_int_eq(bw.stamp_ms, 10000);
	bdi_bw_sample(&bw, 9990, 5100, true);
	bdi_bw_sample(&bw, 9990, 5100, false);
	bdi_bw_start(&bw, 8000, 5100, true);
	ck_assert_int_eq(bw.write_bw, 12800);
	ck_assert_int_eq(bw.stamp_ms, 10000);
	ck_assert_int_eq(bw.written_stamp, 5000);
	/* and the next on-time sample counts from the real stamp */
	bdi_bw_update(&bw, 10500, 5000 + 6400);
	ck_assert_int_eq(bw.write_bw, 12800);
}
END_TEST

static Suite *writeback_suite(void)
{
	Suite *s = suite_create("writeback");
	TCase *tc;

	tc = tcase_create("sync");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, sync_writes_mapped_blocks);
	tcase_add_test(tc, contiguous_pages_merge);
	tcase_add_test(tc, skipped_pages_not_written);
	tcase_add_test(tc, fsync_one_inode_only);
	tcase_add_loop_test(tc, sync_each_engine, 0, 3);
	tcase_add_test(tc, metadata_after_data);
	tcase_add_test(tc, metadata_in_rotation);
	tcase_add_test(tc, towrite_no_livelock);
	tcase_add_test(tc, concurrent_fsync);
	tcase_add_test(tc, fsync_in_caller);
	tcase_add_test(tc, sync_start_steps);
	suite_add_tcase(s, tc);
	tc = t_tcase(s, "background", background_over_threshold, periodic_writes_expired,
		     background_stops_under_threshold, periodic_only_expired, held_meta_expires);
	tcase_set_timeout(tc, 30);
	tc = tcase_create("errors");
	tcase_add_loop_test(tc, write_error_reaches_fsync, IO_ENGINE_URING, IO_ENGINE_PSYNC + 1);
	tcase_add_test(tc, meta_error_reported_once);
	tcase_add_test(tc, newblock_failure_reported);
	tcase_add_test(tc, map_error_reaches_fsync);
	tcase_add_test(tc, map_eio_reaches_fsync);
	tcase_add_loop_test(tc, alloc_wait_then_mapped, 0, 2);
	tcase_add_test(tc, alloc_wait_fails);
	tcase_set_timeout(tc, 30);
	tcase_add_loop_test(tc, fault_write_then_recover, IO_ENGINE_URING, IO_ENGINE_PSYNC + 1);
	tcase_add_test(tc, fault_off_by_default);
	tcase_add_test(tc, fault_read);
	tcase_add_test(tc, fault_backoff);
	suite_add_tcase(s, tc);
	t_tcase(s, "bandwidth", flush_fault_countdown, bandwidth_estimator, bandwidth_idle_reset,
		bandwidth_late_sampler, bandwidth_warmup, bandwidth_idle_trickle);
	return s;
}

int main(void)
{
	return t_run(writeback_suite());
}
