// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The control directory's statistics files (daemon/ctl.c serves them): the
 * cache domain's /proc/vmstat (vmstat) and /proc/zoneinfo (zoneinfo),
 * this device's bdi debugfs stats (bdi), who does writeback (flusher) and
 * lock statistics (lockstat), each generated at open into the open file's
 * buffer with the kernel's names and layout.
 */
#include <stdio.h>
#include <stdlib.h>

#include "wbcfs/daemon/ctl.h"
#include "wbcfs/cache/pressure.h"
#include "daemon_i.h"

/* A gauge may dip below zero for a moment (an inc racing a dec). */
static long ctl_gauge(long v)
{
	return v < 0 ? 0 : v;
}

static void ctl_lru_counts(struct cache *c, long *active, long *inactive)
{
	unsigned i;

	*active = *inactive = 0;
	for (i = 0; i < c->nr_zones; i++) {
		*active += __atomic_load_n(&c->zones[i].nr_active, __ATOMIC_RELAXED);
		*inactive += __atomic_load_n(&c->zones[i].nr_inactive, __ATOMIC_RELAXED);
	}
}

struct ctl_stat_line {
	const char *name;
	long v;
};

static int ctl_print_lines(struct ctl_buf *b, const struct ctl_stat_line *l, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (ctl_buf_printf(b, "%s %ld\n", l[i].name, l[i].v))
			return -ENOMEM;
	return 0;
}

/* The per-zone lines of vmstat: the kernel's pgalloc_<zone> and the like. */
static int ctl_gen_zone_vmstat(struct ctl_buf *b, struct zone *z)
{
	const struct { const char *name; long v; } l[] = {
		{ "nr_free_pages", ctl_gauge(__atomic_load_n(&z->nr_free, __ATOMIC_RELAXED)) },
		{ "nr_dirty", ctl_gauge(atomic_load(&z->nr_dirty)) },
		{ "nr_writeback", ctl_gauge(atomic_load(&z->nr_writeback)) },
		{ "pgalloc", atomic_load(&z->pgalloc) },
		{ "pgscan", atomic_load(&z->pgscan) },
		{ "pgsteal", atomic_load(&z->pgsteal) },
		{ "nr_vmscan_immediate_reclaim", atomic_load(&z->nr_immediate) },
	};
	size_t i;

	for (i = 0; i < sizeof(l) / sizeof(l[0]); i++)
		if (ctl_buf_printf(b, "%s_zone%u %ld\n", l[i].name, z->id, l[i].v))
			return -ENOMEM;
	return 0;
}

/* /proc/vmstat's names and units (pages of 4 KiB). */
int ctl_gen_vmstat(struct wbfs *w, struct ctl_buf *b)
{
	struct cache *c = w->cache;
	struct cache_stats *s = &c->stats;
	const struct bdi_stats *bs = bdi_get_stats(w->bdi);
	struct throttle_stats *ts = &c->throttle.stats;
	/* flusher_model=bdi: the pool's lines read 0 */
	static const struct flusher_pool_stats no_pool;
	const struct flusher_pool_stats *ps = w->pool ? flusher_pool_get_stats(w->pool) : &no_pool;
	unsigned long bg, thresh;
	long active, inactive;
	struct mem_stats_snap ms;

	memwatch_stats(domain_memwatch(w->host), &ms);
	dirty_thresholds(c, &bg, &thresh);
	ctl_lru_counts(c, &active, &inactive);
	{
		const struct ctl_stat_line lines[] = {
			{ "nr_free_pages", ctl_gauge(cache_free_pages(c)) },
			{ "nr_file_pages", ctl_gauge(atomic_load(&s->nr_file_pages)) },
			{ "nr_active_file", ctl_gauge(active) },
			{ "nr_inactive_file", ctl_gauge(inactive) },
			{ "nr_dirty", ctl_gauge(atomic_load(&s->nr_dirty)) },
			{ "nr_writeback", ctl_gauge(atomic_load(&s->nr_writeback)) },
			{ "nr_dirtied", atomic_load(&s->nr_dirtied) },
			{ "nr_written", atomic_load(&s->nr_written) },
			{ "nr_dirty_threshold", (long)thresh },
			{ "nr_dirty_background_threshold", (long)bg },
			{ "nr_cache_pages", (long)cache_ceiling_pages(c) },
			{ "cache_target_pages", (long)cache_target_pages(c) },
			{ "cache_ceiling_pages", (long)cache_ceiling_pages(c) },
			{ "cache_min_pages", (long)cache_floor_pages(c) },
			{ "cache_resident_pages", (long)cache_resident_pages(c) },
			{ "pgreturned", atomic_load(&s->pgreturned) },
			{ "pgregrown", atomic_load(&s->pgregrown) },
			{ "cache_target_changes", atomic_load(&s->cache_target_changes) },
			{ "nr_dirtyable_pages", (long)dirty_dirtyable_pages(c) },
			{ "pgalloc", atomic_load(&s->pgalloc) },
			{ "pgactivate", atomic_load(&s->pgactivate) },
			{ "pgscan", atomic_load(&s->pgscan) },
			{ "pgsteal", atomic_load(&s->pgsteal) },
			{ "allocstall", atomic_load(&s->allocstall) },
			{ "kswapd_wakeups", atomic_load(&s->kswapd_wakeups) },
			{ "nr_vmscan_immediate_reclaim",
			  atomic_load(&s->nr_vmscan_immediate_reclaim) },
			{ "nr_vmscan_write", atomic_load(&s->nr_vmscan_write) },
			{ "nr_write_errors", atomic_load(&bs->write_errors) },
			{ "nr_write_ios", atomic_load(&bs->nr_ios) },
			{ "nr_syncs", atomic_load(&bs->syncs) },
			{ "nr_meta_turns", atomic_load(&bs->meta_turns) },
			{ "nr_writeback_alloc_waits", atomic_load(&bs->alloc_waits) },
			{ "nr_pdflush_threads", atomic_load(&ps->nr_threads) },
			{ "pdflush_threads_started", atomic_load(&ps->threads_started) },
			{ "pdflush_threads_exited", atomic_load(&ps->threads_exited) },
			{ "pdflush_background_rounds", atomic_load(&ps->background_rounds) },
			{ "pdflush_kupdate_rounds", atomic_load(&ps->kupdate_rounds) },
			{ "pdflush_pages_written", atomic_load(&ps->pages_written) },
			{ "pdflush_congestion_skips", atomic_load(&ps->congestion_skips) },
			{ "pdflush_congestion_waits", atomic_load(&ps->congestion_waits) },
			{ "pdflush_congestion_wait_ms", atomic_load(&ps->congestion_wait_ns) / 1000000 },
			{ "nr_parallel_writes_max", atomic_load(&w->stats.nr_parallel_writes_max) },
			{ "nr_inval_sent", atomic_load(&w->stats.nr_inval_sent) },
			{ "nr_store_sent", atomic_load(&w->stats.nr_store_sent) },
			{ "nr_store_kept", atomic_load(&w->stats.nr_store_kept) },
			{ "nr_store_unordered", atomic_load(&w->stats.nr_store_unordered) },
			{ "nr_stat_unlocked", atomic_load(&w->stats.nr_stat_unlocked) },
			{ "nr_lookup_unlocked", atomic_load(&w->stats.nr_lookup_unlocked) },
			{ "nr_readdir_unlocked", atomic_load(&w->stats.nr_readdir_unlocked) },
			{ "nr_ra_async", atomic_load(&w->stats.nr_ra_async) },
			{ "nr_ra_inline", atomic_load(&w->stats.nr_ra_inline) },
			{ "nr_auto_da_alloc_rename",
			  atomic_load(&w->stats.nr_auto_da_alloc_rename) },
			{ "nr_auto_da_alloc_close", atomic_load(&w->stats.nr_auto_da_alloc_close) },
			{ "nr_flush_requests", atomic_load(&w->stats.nr_flush_requests) },
			{ "nr_sync_writes", atomic_load(&w->stats.nr_sync_writes) },
			{ "nr_dirsync_ops", atomic_load(&w->stats.nr_dirsync_ops) },
			{ "nr_sync_metadata", atomic_load(&w->stats.nr_sync_metadata) },
			{ "nr_parked", fuse_io_parked(w) },
			{ "nr_parked_total", atomic_load(&w->stats.nr_parked_total) },
			{ "nr_park_groups", atomic_load(&w->stats.nr_park_groups) },
			{ "nr_sync_leaders", atomic_load(&w->stats.nr_sync_leaders) },
			{ "nr_park_grouped", atomic_load(&w->stats.nr_park_grouped) },
			{ "nr_park_interrupts", atomic_load(&w->stats.nr_park_interrupts) },
			{ "nr_blocks_claimed", atomic_load(&w->stats.nr_blocks_claimed) },
			{ "nr_claim_overlaps", atomic_load(&w->stats.nr_claim_overlaps) },
			{ "nr_alloc_busy_refused", atomic_load(&w->stats.nr_alloc_busy_refused) },
			{ "nr_alloc_commits", atomic_load(&w->stats.nr_alloc_commits) },
			{ "nr_inodes_claimed", atomic_load(&w->stats.nr_inodes_claimed) },
			{ "nr_corrupt_groups", atomic_load(&w->stats.nr_corrupt_groups) },
			{ "nr_bitmap_untracked", atomic_load(&w->stats.nr_bitmap_untracked) },
			{ "nr_throttle_evaluations", atomic_load(&ts->nr_evaluations) },
			{ "nr_throttle_pauses", atomic_load(&ts->nr_pauses) },
			{ "throttle_pause_ms_total", atomic_load(&ts->pause_ms_total) },
			{ "throttle_pause_ms_max", atomic_load(&ts->pause_ms_max) },
			{ "nr_throttle_hard_limit", atomic_load(&ts->nr_hard_limit) },
			{ "nr_dirtier_evals", atomic_load(&ts->nr_dirtier_evals) },
			{ "nr_dirtier_pages", atomic_load(&ts->nr_dirtier_pages) },
			{ "nr_dirtier_waits", atomic_load(&ts->nr_dirtier_waits) },
			{ "nr_throttle_tasks", atomic_load(&ts->nr_tasks) },
			{ "nr_throttle_tasks_reaped", atomic_load(&ts->nr_tasks_reaped) },
			{ "nr_throttle_held_replies", fuse_io_held(w) },
			{ "throttle_trace_records", atomic_load(&ts->trace_records) },
			{ "throttle_trace_lost", atomic_load(&ts->trace_lost) },
			{ "nr_fair_batch_resets", atomic_load(&s->nr_fair_batch_resets) },
			{ "nr_zone_dirty_skips", atomic_load(&s->nr_zone_dirty_skips) },
			{ "nr_zone_dirty_ignored", atomic_load(&s->nr_zone_dirty_ignored) },
			/* the memory watcher (pressure.h); 0 with mem_watch=0 */
			{ "mem_pressure_events", (long)ms.pressure_events },
			{ "mem_pressure_stall_us", (long)ms.pressure_stall_us },
			{ "mem_cgroup_limit_bytes", (long)ms.cgroup_limit_bytes },
			{ "mem_cgroup_usage_bytes", (long)ms.cgroup_usage_bytes },
			{ "mem_available_bytes", (long)ms.available_bytes },
			{ "mem_watch_steps", (long)ms.watch_steps },
			{ "mem_target_changes", (long)ms.target_changes },
		};
		unsigned i;
		int ret = ctl_print_lines(b, lines, sizeof(lines) / sizeof(lines[0]));

		for (i = 0; i < c->nr_zones && !ret; i++)
			ret = ctl_gen_zone_vmstat(b, &c->zones[i]);
		return ret;
	}
}

/*
 * /proc/zoneinfo's layout, one block per zone, in pages. present is the
 * zone's share of the ceiling (cache_size), managed its share of the target,
 * nr_returned the pages it gave back to the kernel. protection is the
 * lowmem reserve; dirty_limit the zone's share of the dirty threshold now.
 */
static int ctl_gen_zone(struct ctl_buf *b, struct zone *z)
{
	return ctl_buf_printf(b,
		"Zone %u\n"
		"  pages free     %ld\n"
		"        min      %ld\n"
		"        low      %ld\n"
		"        high     %ld\n"
		"        present  %ld\n"
		"        managed  %ld\n"
		"        protection %ld\n"
		"        dirty_limit %lu\n"
		"  nr_active_file %ld\n"
		"  nr_inactive_file %ld\n"
		"  nr_dirty       %ld\n"
		"  nr_writeback   %ld\n"
		"  nr_alloc_batch %ld\n"
		"  fair_depleted  %d\n"
		"  pgalloc        %ld\n"
		"  pgscan         %ld\n"
		"  pgsteal        %ld\n"
		"  nr_vmscan_immediate_reclaim %ld\n"
		"  nr_returned    %ld\n",
		z->id, ctl_gauge(__atomic_load_n(&z->nr_free, __ATOMIC_RELAXED)),
		z->wmark_min, z->wmark_low, z->wmark_high, z->present_pages,
		__atomic_load_n(&z->managed_pages, __ATOMIC_RELAXED),
		z->lowmem_reserve, zone_dirty_limit(z),
		ctl_gauge(__atomic_load_n(&z->nr_active, __ATOMIC_RELAXED)),
		ctl_gauge(__atomic_load_n(&z->nr_inactive, __ATOMIC_RELAXED)),
		ctl_gauge(atomic_load(&z->nr_dirty)), ctl_gauge(atomic_load(&z->nr_writeback)),
		atomic_load(&z->alloc_batch), (int)atomic_load(&z->fair_depleted),
		atomic_load(&z->pgalloc), atomic_load(&z->pgscan), atomic_load(&z->pgsteal),
		atomic_load(&z->nr_immediate),
		ctl_gauge(__atomic_load_n(&z->nr_returned, __ATOMIC_RELAXED)));
}

int ctl_gen_zoneinfo(struct wbfs *w, struct ctl_buf *b)
{
	unsigned i;
	int ret = 0;

	for (i = 0; i < w->cache->nr_zones && !ret; i++)
		ret = ctl_gen_zone(b, &w->cache->zones[i]);
	return ret;
}

#define K(pages) ((unsigned long)ctl_gauge(pages) * (PAGE_SIZE / 1024))

/* The layout of the kernel's debugfs bdi/<dev>/stats. */
int ctl_gen_bdi(struct wbfs *w, struct ctl_buf *b)
{
	const struct bdi_stats *s = bdi_get_stats(w->bdi);
	struct throttle_wb *tw = bdi_throttle_wb(w->bdi);
	unsigned long bg, thresh, wb_thresh, wb_bg;
	long nd, nio, nmore, dr, bal, task_rl, rate;
	unsigned state = bdi_state(w->bdi);

	/* BdiDirtyThresh: this device's share of DirtyThresh, from its share
	 * of recent writeback completions and min_ratio/max_ratio */
	throttle_wb_thresholds(tw, &wb_thresh, &wb_bg, &thresh, &bg);
	/* the controller updates these together under the domain lock (leaf) */
	ls_mutex_lock(&tw->dom->lock, &lc_throttle_lock);
	dr = tw->dirty_ratelimit;
	bal = tw->balanced_dirty_ratelimit;
	task_rl = tw->last_task_ratelimit;
	rate = tw->last_dirty_rate;
	ls_mutex_unlock(&tw->dom->lock);
	bdi_list_counts(w->bdi, &nd, &nio, &nmore);
	return ctl_buf_printf(b,
		"BdiWriteback:       %10lu kB\n"
		"BdiReclaimable:     %10lu kB\n"
		"BdiDirtyThresh:     %10lu kB\n"
		"DirtyThresh:        %10lu kB\n"
		"BackgroundThresh:   %10lu kB\n"
		"BdiDirtied:         %10lu kB\n"
		"BdiWritten:         %10lu kB\n"
		"BdiWriteBandwidth:  %10lu kBps\n"
		"BdiAvgWriteBandwidth: %8lu kBps\n"
		"BdiBackgroundThresh: %9lu kB\n"
		"DirtyRatelimit:     %10lu kBps\n"
		"BalancedDirtyRatelimit: %6lu kBps\n"
		"TaskRatelimit:      %10lu kBps\n"
		"DirtyRate:          %10lu kBps\n"
		"WritebackShare:     %10u /1000\n"
		"min_ratio:          %10u\n"
		"max_ratio:          %10u\n"
		"strictlimit:        %10d\n"
		"b_dirty:            %10ld\n"
		"b_io:               %10ld\n"
		"b_more_io:          %10ld\n"
		"state:              %10x\n"
		"PdflushBusy:        %10ld ms\n",
		K(atomic_load(&s->writeback)), K(atomic_load(&s->reclaimable)),
		K((long)wb_thresh), K((long)thresh), K((long)bg),
		K(atomic_load(&s->dirtied)), K(atomic_load(&s->written)),
		K(atomic_load(&s->write_bw)), K(atomic_load(&s->avg_write_bw)),
		K((long)wb_bg), K(dr), K(bal), K(task_rl), K(rate), throttle_wb_share(tw),
		atomic_load(&tw->min_ratio), atomic_load(&tw->max_ratio),
		(int)atomic_load(&tw->strictlimit), nd, nio, nmore, state,
		atomic_load(&s->pool_ns) / 1000000);
}

/*
 * flusher: who does background and periodic writeback. "bdi" and the
 * workers per device, or "pdflush" and the pool's threads now (the
 * counters are in vmstat).
 */
int ctl_gen_flusher(struct wbfs *w, struct ctl_buf *b)
{
	const struct flusher_pool_stats *ps;

	if (!w->pool)
		return ctl_buf_printf(b, "bdi\nflushers %u\n", w->opts.flushers);
	ps = flusher_pool_get_stats(w->pool);
	return ctl_buf_printf(b, "pdflush\nthreads %ld\nbusy %ld\nflushers %u\n"
			      "min_threads %u\nmax_threads %u\n",
			      atomic_load(&ps->nr_threads), atomic_load(&ps->nr_busy),
			      w->opts.flushers, w->opts.pdflush_min, w->opts.pdflush_max);
}

/*
 * lockstat: a state line, a column header, then one line per lock class,
 * longest total wait first. Times are totals since the last reset while on.
 */
int ctl_gen_lockstat(struct ctl_buf *b)
{
	struct lock_stat *s;
	int n = lockstat_collect(&s), i, ret;

	if (n < 0)
		return n;
	ret = ctl_buf_printf(b, "# lockstat %s (write on, off or reset)\n"
			     "# %-14s %12s %10s %7s %13s %11s %13s\n",
			     lockstat_enabled() ? "on" : "off", "class", "acquired", "contended",
			     "cont%", "wait_total_ms", "wait_max_us", "hold_total_ms");
	for (i = 0; i < n && !ret; i++) {
		const struct lock_stat *l = &s[i];

		ret = ctl_buf_printf(b, "%-16s %12llu %10llu %7.2f %13.3f %11llu %13.3f\n",
				     l->name, (unsigned long long)l->acquired,
				     (unsigned long long)l->contended,
				     l->acquired ? 100.0 * l->contended / l->acquired : 0.0,
				     l->wait_ns / 1e6, (unsigned long long)(l->wait_max_ns / 1000),
				     l->hold_ns / 1e6);
	}
	free(s);
	return ret;
}
