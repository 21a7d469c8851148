// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Dirty tunables (the /proc/sys/vm names and rules), dirtyable memory and
 * the global thresholds of doc/algorithms.md §1, and the simple throttle: a
 * writer over the limit kicks the flusher and waits for writeback. The
 * IO-less controller of a later issue replaces dirty_balance_simple().
 */
#include <errno.h>

#include "wbcfs/cache.h"
#include "wbcfs/lib/clock.h"
#include "wbcfs/cache/dirty.h"
#include "cache_i.h"

_Static_assert(DIRTY_BYTES_MIN == 2 * PAGE_SIZE, "dirty_bytes: at least two pages");

/* The names, units and help are the tunables table's (daemon/tunables.c). */
void dirty_tunables_default(struct dirty_tunables *t)
{
	atomic_store(&t->dirty_ratio, DIRTY_RATIO_DEFAULT);
	atomic_store(&t->dirty_background_ratio, DIRTY_BACKGROUND_RATIO_DEFAULT);
	atomic_store(&t->dirty_bytes, 0);
	atomic_store(&t->dirty_background_bytes, 0);
	atomic_store(&t->dirty_expire_centisecs, DIRTY_EXPIRE_CENTISECS_DEFAULT);
	atomic_store(&t->dirty_writeback_centisecs, DIRTY_WRITEBACK_CENTISECS_DEFAULT);
}

uint64_t dirty_tunable_get(const struct dirty_tunables *t, enum dirty_tunable which)
{
	struct dirty_tunables *m = (struct dirty_tunables *)t;

	switch (which) {
	case DT_DIRTY_RATIO: return atomic_load(&m->dirty_ratio);
	case DT_DIRTY_BACKGROUND_RATIO: return atomic_load(&m->dirty_background_ratio);
	case DT_DIRTY_BYTES: return atomic_load(&m->dirty_bytes);
	case DT_DIRTY_BACKGROUND_BYTES: return atomic_load(&m->dirty_background_bytes);
	case DT_DIRTY_EXPIRE_CENTISECS: return atomic_load(&m->dirty_expire_centisecs);
	case DT_DIRTY_WRITEBACK_CENTISECS: return atomic_load(&m->dirty_writeback_centisecs);
	default: return 0;
	}
}

/* Kernel rule: writing a ratio zeroes the bytes twin and the other way round. */
int dirty_tunable_set(struct dirty_tunables *t, enum dirty_tunable which, uint64_t v)
{
	switch (which) {
	case DT_DIRTY_RATIO:
	case DT_DIRTY_BACKGROUND_RATIO:
		if (v > DIRTY_RATIO_MAX)
			return -EINVAL;
		if (which == DT_DIRTY_RATIO) {
			atomic_store(&t->dirty_ratio, (unsigned)v);
			atomic_store(&t->dirty_bytes, 0);
		} else {
			atomic_store(&t->dirty_background_ratio, (unsigned)v);
			atomic_store(&t->dirty_background_bytes, 0);
		}
		return 0;
	case DT_DIRTY_BYTES:
		if (v && v < DIRTY_BYTES_MIN)
			return -EINVAL;
		atomic_store(&t->dirty_bytes, v);
		if (v)
			atomic_store(&t->dirty_ratio, 0);
		return 0;
	case DT_DIRTY_BACKGROUND_BYTES:
		atomic_store(&t->dirty_background_bytes, v);
		if (v)
			atomic_store(&t->dirty_background_ratio, 0);
		return 0;
	case DT_DIRTY_EXPIRE_CENTISECS:
	case DT_DIRTY_WRITEBACK_CENTISECS:
		if (v > DIRTY_CENTISECS_MAX)
			return -EINVAL;
		atomic_store(which == DT_DIRTY_EXPIRE_CENTISECS ? &t->dirty_expire_centisecs
							       : &t->dirty_writeback_centisecs,
			     (unsigned)v);
		return 0;
	default:
		return -EINVAL;
	}
}

/*
 * free + file pages - reserves + 1, as global_dirtyable_memory(): each
 * zone's dirty_balance_reserve (high watermark + lowmem reserve) is not
 * dirtyable.
 */
unsigned long dirty_dirtyable_pages(struct cache *c)
{
	long reserve = 0, free = cache_free_pages(c);
	long file = atomic_load(&c->stats.nr_file_pages);
	unsigned i;

	for (i = 0; i < c->nr_zones; i++)
		reserve += c->zones[i].dirty_balance_reserve;
	free -= free < reserve ? free : reserve;
	return (unsigned long)(free + file) + 1;
}

static unsigned long bytes_to_pages(uint64_t b)
{
	return (unsigned long)((b + PAGE_SIZE - 1) / PAGE_SIZE);
}

static void thresholds_of(struct cache *c, unsigned long avail, unsigned long *bg_thresh,
			  unsigned long *thresh)
{
	unsigned long t, bg;
	uint64_t bytes = atomic_load(&c->tun.dirty_bytes);
	uint64_t bg_bytes = atomic_load(&c->tun.dirty_background_bytes);

	t = bytes ? bytes_to_pages(bytes) : avail * atomic_load(&c->tun.dirty_ratio) / 100;
	bg = bg_bytes ? bytes_to_pages(bg_bytes)
		      : avail * atomic_load(&c->tun.dirty_background_ratio) / 100;
	if (!t)
		t = 1;
	if (bg >= t)
		bg = t / 2;
	*thresh = t;
	*bg_thresh = bg;
}

void dirty_thresholds(struct cache *c, unsigned long *bg_thresh, unsigned long *thresh)
{
	thresholds_of(c, dirty_dirtyable_pages(c), bg_thresh, thresh);
}

void dirty_thresholds_for(struct cache *c, size_t target, unsigned long *bg_thresh,
			  unsigned long *thresh)
{
	unsigned long avail = dirty_dirtyable_pages(c), cap;
	long reserve = 0;
	unsigned i;

	for (i = 0; i < c->nr_zones; i++)
		reserve += c->zones[i].dirty_balance_reserve;
	cap = (long)target > reserve ? (unsigned long)((long)target - reserve) + 1 : 1;
	thresholds_of(c, avail < cap ? avail : cap, bg_thresh, thresh);
}

void dirty_throttle_global(void *arg, struct throttle_global *g)
{
	struct cache *c = arg;
	long dirty = atomic_load(&c->stats.nr_dirty);
	long wb = atomic_load(&c->stats.nr_writeback);

	g->nr_dirty = dirty > 0 ? (unsigned long)dirty : 0;
	g->nr_writeback = wb > 0 ? (unsigned long)wb : 0;
	dirty_thresholds(c, &g->bg_thresh, &g->thresh);
}

bool dirty_over_background(struct cache *c)
{
	unsigned long bg, thresh;

	long dirty = atomic_load(&c->stats.nr_dirty);

	dirty_thresholds(c, &bg, &thresh);
	return dirty > 0 && (unsigned long)dirty > bg;
}

#define BALANCE_WAIT_MS 50	/* re-evaluate at least this often (tunables change live) */

static void flusher_kick(struct cache *c, enum wb_reason why)
{
	if (c->ops && c->ops->wakeup_flusher)
		c->ops->wakeup_flusher(c->owner, 0, why);
}

/* FILE_DIRTY + WRITEBACK over the hard threshold? Sets *over_bg when
 * FILE_DIRTY is over the background threshold. Counters may dip below 0
 * for a moment (an inc racing a dec), hence the signed tests. */
static bool dirty_over_limit(struct cache *c, bool *over_bg)
{
	unsigned long bg, thresh;
	long dirty = atomic_load(&c->stats.nr_dirty);
	long wb = atomic_load(&c->stats.nr_writeback);

	dirty_thresholds(c, &bg, &thresh);
	*over_bg = dirty > 0 && (unsigned long)dirty > bg;
	return dirty + wb > 0 && (unsigned long)(dirty + wb) > thresh;
}

/*
 * The predicate is evaluated under wait_lock and cache_wake_dirty()
 * broadcasts under it after the counters moved, so no wakeup is lost; the
 * timeout only covers tunable changes and a cache that grows dirtyable.
 * The flusher is kicked with wait_lock dropped: wakeup_flusher may take
 * the owner's locks, and the owner calls end_page_writeback (which takes
 * wait_lock) under them.
 */
void dirty_balance_simple(struct cache *c)
{
	for (;;) {
		bool over_bg, over, stop;

		over = dirty_over_limit(c, &over_bg);
		if (over_bg || over)
			flusher_kick(c, WB_REASON_BACKGROUND);
		if (!over)
			return;
		ls_mutex_lock(&c->wait_lock, &lc_cache_wait_lock);
		if (!c->stopping && dirty_over_limit(c, &over_bg))
			clock_cond_wait_ms(&c->dirty_wait, &c->wait_lock, BALANCE_WAIT_MS);
		stop = c->stopping;
		ls_mutex_unlock(&c->wait_lock);
		if (stop)
			return;
	}
}
