// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Page descriptors: references (the last put frees), the PG_locked sleeping
 * lock under contention from several threads, waiting on lock and on
 * writeback without lost wakeups, dirty/writeback transitions and their
 * zone, global and mapping counters (also for pages outside any mapping),
 * and the LRU hint mark_page_accessed. Reclaim decisions are test_reclaim's.
 */
#include <check.h>
#include "helpers.h"
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "wbcfs/cache.h"
#include "wbcfs/cache/mapping.h"

static long dirtied_calls, undirtied_calls;
static void t_dirtied(struct mapping *m, struct page *p) { dirtied_calls++; }
static void t_undirtied(struct mapping *m, struct page *p) { undirtied_calls++; }
static const struct mapping_ops t_ops = { .dirtied = t_dirtied, .undirtied = t_undirtied };

START_TEST(alloc_and_put)
{
	struct cache *c = t_cache(64);
	struct page *p;

	ck_assert_int_eq(cache_free_pages(c), 64);
	p = cache_alloc_page(c, 0);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(p->refcount, 1);
	ck_assert_uint_eq(p->flags, 0);
	ck_assert_ptr_null(p->mapping);
	ck_assert_uint_eq((uintptr_t)page_address(p) % PAGE_SIZE, 0);
	ck_assert_int_eq(cache_free_pages(c), 63);
	ck_assert_int_eq(c->stats.pgalloc, 1);
	ck_assert_int_eq(c->zones[0].pgalloc, 1);
	page_get(p);
	page_set(p, PG_uptodate);
	page_put(p);
	ck_assert_int_eq(cache_free_pages(c), 63);	/* one reference left */
	page_put(p);
	ck_assert_int_eq(cache_free_pages(c), 64);
	ck_assert_uint_eq(p->flags, 0);			/* flags cleared on free */
	cache_destroy(c);
}
END_TEST

START_TEST(create_rejects_tiny_cache)
{
	struct cache_config cfg = { .size_bytes = 63 * PAGE_SIZE, .nr_zones = 1 };
	struct cache *c = NULL;

	dirty_tunables_default(&cfg.tunables);
	ck_assert_int_eq(cache_create(&c, &cfg), -EINVAL);
	cfg.size_bytes = 64 * PAGE_SIZE + 100;	/* rounded down to 64 pages */
	ck_assert_int_eq(cache_create(&c, &cfg), 0);
	ck_assert_uint_eq(c->nr_pages, 64);
	ck_assert_int_le(c->zones[0].wmark_min, c->zones[0].wmark_low);
	ck_assert_int_lt(c->zones[0].wmark_low, c->zones[0].wmark_high);
	cache_destroy(c);
}
END_TEST

START_TEST(zones_split_evenly)
{
	struct cache_config cfg = { .size_bytes = 1024 * PAGE_SIZE, .nr_zones = 4 };
	struct cache *c;
	unsigned i;

	c = t_cache_cfg(&cfg);
	ck_assert_uint_eq(c->nr_zones, 4);
	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(c->zones[i].present_pages, 256);
		ck_assert_int_eq(c->zones[i].nr_free, 256);
		ck_assert_int_gt(c->zones[i].wmark_min, 0);
	}
	ck_assert_int_eq(cache_free_pages(c), 1024);
	cache_destroy(c);
}
END_TEST

/* Lock contention: each thread increments a shared counter under the page lock. */
struct lock_arg {
	struct page *p;
	long *counter;
	unsigned loops;
};

static void *t_locker(void *arg)
{
	struct lock_arg *a = arg;
	unsigned i;

	for (i = 0; i < a->loops; i++) {
		long v;

		lock_page(a->p);
		v = *a->counter;
		if (i % 64 == 0)
			sched_yield();	/* widen the window a broken lock would expose */
		*a->counter = v + 1;
		unlock_page(a->p);
	}
	return NULL;
}

START_TEST(lock_contention)
{
	struct cache *c = t_cache(64);
	struct page *p = cache_alloc_page(c, 0);
	pthread_t t[4];
	long counter = 0;
	struct lock_arg a = { p, &counter, 20000 };
	unsigned i;

	for (i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, t_locker, &a);
	for (i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	ck_assert_int_eq(counter, 4 * 20000);
	ck_assert(!page_test(p, PG_locked));
	ck_assert(trylock_page(p));
	ck_assert(!trylock_page(p));
	unlock_page(p);
	page_put(p);
	cache_destroy(c);
}
END_TEST

struct waiter {
	struct page *p;
	enum page_flag bit;
	_Atomic int done;
};

static void *t_waiter(void *arg)
{
	struct waiter *w = arg;

	if (w->bit == PG_writeback)
		wait_on_page_writeback(w->p);
	else
		wait_on_page_locked(w->p);
	atomic_store(&w->done, 1);
	return NULL;
}

/* A waiter sleeps while the bit is set and wakes when it is cleared. */
static void t_wait_for(struct page *p, enum page_flag bit)
{
	struct waiter w = { p, bit, 0 };
	pthread_t t;

	pthread_create(&t, NULL, t_waiter, &w);
	usleep(50000);
	ck_assert_int_eq(atomic_load(&w.done), 0);
	if (bit == PG_writeback)
		end_page_writeback(p);
	else
		unlock_page(p);
	pthread_join(t, NULL);
	ck_assert_int_eq(atomic_load(&w.done), 1);
}

START_TEST(wait_on_lock_and_writeback)
{
	struct cache *c = t_cache(64);
	struct page *p = cache_alloc_page(c, 0);

	wait_on_page_locked(p);		/* not set: returns at once */
	wait_on_page_writeback(p);
	lock_page(p);
	t_wait_for(p, PG_locked);
	set_page_writeback(p);
	t_wait_for(p, PG_writeback);
	ck_assert_int_eq(c->stats.nr_writeback, 0);
	page_put(p);
	cache_destroy(c);
}
END_TEST

/* Many short lock/unlock cycles with a waiter each time: no lost wakeup. */
START_TEST(no_lost_wakeups)
{
	struct cache *c = t_cache(64);
	struct page *p = cache_alloc_page(c, 0);
	unsigned i;

	for (i = 0; i < 300; i++) {
		struct waiter w = { p, PG_locked, 0 };
		pthread_t t;

		lock_page(p);
		pthread_create(&t, NULL, t_waiter, &w);
		if (i % 2)
			sched_yield();
		unlock_page(p);
		pthread_join(t, NULL);	/* hangs (test timeout) on a lost wakeup */
	}
	page_put(p);
	cache_destroy(c);
}
END_TEST

START_TEST(dirty_counters_in_mapping)
{
	struct cache *c = t_cache(64);
	struct mapping m;
	struct page *p;

	dirtied_calls = undirtied_calls = 0;
	mapping_init(&m, c, &t_ops, NULL);
	p = mapping_grab_page(&m, 7, 0);
	page_set(p, PG_uptodate);
	ck_assert(set_page_dirty(p));
	ck_assert(!set_page_dirty(p));
	ck_assert_int_eq(dirtied_calls, 1);
	ck_assert_int_eq(c->stats.nr_dirty, 1);
	ck_assert_int_eq(c->stats.nr_dirtied, 1);
	ck_assert_int_eq(c->zones[0].nr_dirty, 1);
	ck_assert_int_eq(m.nrdirty, 1);
	ck_assert(mapping_tagged(&m, TAG_DIRTY));
	ck_assert(clear_page_dirty_for_io(p));
	ck_assert(!clear_page_dirty_for_io(p));
	ck_assert_int_eq(undirtied_calls, 0);	/* the flusher accounts writes */
	set_page_writeback(p);
	ck_assert_int_eq(c->stats.nr_dirty, 0);
	ck_assert_int_eq(m.nrdirty, 0);
	ck_assert_int_eq(c->stats.nr_writeback, 1);
	ck_assert_int_eq(c->zones[0].nr_writeback, 1);
	ck_assert_int_eq(m.nrwriteback, 1);
	ck_assert(mapping_tagged(&m, TAG_WRITEBACK));
	ck_assert(!mapping_tagged(&m, TAG_DIRTY));
	end_page_writeback(p);
	ck_assert_int_eq(c->stats.nr_writeback, 0);
	ck_assert_int_eq(m.nrwriteback, 0);
	ck_assert_int_eq(c->stats.nr_written, 1);
	ck_assert(!mapping_tagged(&m, TAG_WRITEBACK));
	/* redirty, then cancel: undirtied is called, counters back to 0 */
	set_page_dirty(p);
	cancel_dirty_page(p);
	ck_assert_int_eq(undirtied_calls, 1);
	ck_assert_int_eq(c->stats.nr_dirty, 0);
	ck_assert_int_eq(c->stats.nr_dirtied, 2);
	ck_assert(!mapping_tagged(&m, TAG_DIRTY));
	unlock_page(p);
	page_put(p);
	mapping_truncate(&m, 0, UINT64_MAX);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

START_TEST(dirty_counters_without_mapping)
{
	struct cache *c = t_cache(64);
	struct page *p = cache_alloc_page(c, 0);

	ck_assert(set_page_dirty(p));
	ck_assert_int_eq(c->stats.nr_dirty, 1);
	ck_assert(clear_page_dirty_for_io(p));
	set_page_writeback(p);
	page_set(p, PG_reclaim);
	end_page_writeback(p);		/* PG_reclaim, no mapping: just cleared */
	ck_assert(!page_test(p, PG_reclaim));
	ck_assert_int_eq(p->refcount, 1);
	ck_assert_int_eq(c->stats.nr_dirty, 0);
	ck_assert_int_eq(c->stats.nr_writeback, 0);
	ck_assert_int_eq(c->stats.nr_written, 1);
	set_page_dirty(p);
	cancel_dirty_page(p);
	ck_assert_int_eq(c->stats.nr_dirty, 0);
	page_put(p);
	ck_assert_int_eq(cache_free_pages(c), 64);
	cache_destroy(c);
}
END_TEST

START_TEST(accessed_twice_activates)
{
	struct cache *c = t_cache(64);
	struct mapping m;
	struct page *p;

	mapping_init(&m, c, NULL, NULL);
	p = mapping_grab_page(&m, 0, 0);
	unlock_page(p);
	ck_assert(page_test(p, PG_lru));
	ck_assert_int_eq(c->zones[0].nr_inactive, 1);
	mark_page_accessed(p);
	ck_assert(page_test(p, PG_referenced));
	ck_assert(!page_test(p, PG_active));
	mark_page_accessed(p);
	ck_assert(page_test(p, PG_active));
	ck_assert_int_eq(c->zones[0].nr_active, 1);
	ck_assert_int_eq(c->zones[0].nr_inactive, 0);
	ck_assert_int_eq(c->stats.pgactivate, 1);
	page_put(p);
	mapping_truncate(&m, 0, UINT64_MAX);
	ck_assert_int_eq(c->zones[0].nr_active, 0);
	mapping_destroy(&m);
	cache_destroy(c);
}
END_TEST

static Suite *page_suite(void)
{
	Suite *s = suite_create("page");

	t_tcase(s, "refcount", alloc_and_put, create_rejects_tiny_cache, zones_split_evenly);
	t_tcase(s, "lock", lock_contention, wait_on_lock_and_writeback, no_lost_wakeups);
	t_tcase(s, "dirty", dirty_counters_in_mapping, dirty_counters_without_mapping);
	t_tcase(s, "lru_hint", accessed_twice_activates);
	return s;
}

int main(void)
{
	return t_run(page_suite());
}
