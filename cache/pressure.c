// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The cache's size controller (pressure.h): from one sample of the memory
 * signals, the target size of the cache. A pure function of its inputs and
 * the clock the sample carries, so the unit tests drive it with made-up
 * signals. Also the default cache size and oom_score_adj, and the parsers
 * of the kernel's text files the watcher (memwatch.c) reads.
 *
 * The rules, in the order memctl_step() applies them:
 *
 *  (1) Deficit. The daemon's cgroup keeps usage <= limit - headroom, and
 *      the machine keeps MemAvailable >= avail_floor, both as projected
 *      horizon_ms ahead at the rate the others' memory grew since the
 *      previous sample, while usage rises (projected_rise below; a
 *      program taking 300 MiB/s crosses a 192 MiB headroom in 0.6 s, and
 *      with only anonymous memory and no swap the kernel OOM-kills within
 *      milliseconds of the limit: the cache must move before it, not
 *      after; seen, a program OOM-killed beside a cache that cut only what
 *      the usage was over). When either is broken the target falls at
 *      once below what is resident, by the deficit plus a margin (a
 *      quarter of the headroom or floor): the margin is the dead band that
 *      keeps a steady signal at the edge from cutting and growing in turn.
 *      For settle_ms after such a cut, while usage does not rise and the
 *      cgroup's charges do not meet its limit, only the deficit's growth
 *      cuts further: memory given back may show in the cgroup's usage
 *      late (a transparent huge page partly given back stays charged
 *      until the kernel splits it), and cutting again for the same
 *      deficit at each sample would empty the cache. A program that takes
 *      what was given back raises the usage or meets the limit, and is
 *      answered at every sample.
 *  (2) Events. A PSI trigger or a medium-level event cuts a quarter of
 *      what is resident, a critical one a half; each level at most once
 *      per cut_interval_ms (the kernel repeats events while reclaim runs:
 *      one cut must have time to show before the next). The machine's PSI
 *      counts only near a bound (MemAvailable under twice its floor, or
 *      the cgroup within two headrooms of its limit): a task stalled on
 *      its own cgroup's limit stalls the machine's PSI as well, and a
 *      cache with gigabytes free around it must not shrink for another
 *      container's limit (seen: another cgroup's tests here fired it and
 *      cut an idle cache to its floor).
 *  (3) Growth. After hold_ms without pressure the target grows back by
 *      ceiling >> grow_shift per second (additive, as TCP's congestion
 *      avoidance after a multiplicative cut), never past what fits under
 *      the cgroup's allowance less the margin.
 *  (4) Always within [floor, ceiling].
 *
 * Usage is the cgroup's working set (usage less inactive file pages): a
 * program reading files fills the cgroup with page cache the kernel drops
 * first, and the cache must not shrink for that (docker's "usage" and the
 * kubelet's eviction signal subtract it too).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wbcfs/cache/pressure.h"

#define MIB (1ull << 20)
#define DEFAULT_CACHE_MIN_BYTES (64 * MIB)

void memctl_config_default(struct memctl_config *cfg, size_t page_bytes, size_t floor_pages,
			   size_t ceiling_pages)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->page_bytes = page_bytes;
	cfg->floor_pages = floor_pages;
	cfg->ceiling_pages = ceiling_pages;
	cfg->headroom_min_bytes = 64 * MIB;
	cfg->headroom_shift = 4;
	cfg->avail_total_shift = 5;
	cfg->hold_ms = 5000;
	cfg->grow_shift = 5;
	cfg->cut_interval_ms = 250;
	cfg->settle_ms = 1000;
	cfg->horizon_ms = 500;
}

static size_t clamp_target(const struct memctl_config *cfg, size_t t)
{
	size_t floor = cfg->floor_pages < cfg->ceiling_pages ? cfg->floor_pages
							     : cfg->ceiling_pages;

	if (t > cfg->ceiling_pages)
		t = cfg->ceiling_pages;
	return t < floor ? floor : t;
}

void memctl_init(struct memctl *m, const struct memctl_config *cfg)
{
	memset(m, 0, sizeof(*m));
	m->cfg = *cfg;
	m->target_pages = clamp_target(cfg, cfg->ceiling_pages);
	m->reason = "init";
}

/*
 * headroom = max(headroom_min, limit >> headroom_shift)
 *
 * 64 MiB covers what the daemon allocates besides the cache (FUSE buffers,
 * threads' stacks) between two samples; 1/16 of the limit scales it for big
 * cgroups, where others allocate faster. Never more than half the limit.
 */
uint64_t memctl_headroom_bytes(const struct memctl_config *cfg, uint64_t limit_bytes)
{
	uint64_t h = limit_bytes >> cfg->headroom_shift;

	if (h < cfg->headroom_min_bytes)
		h = cfg->headroom_min_bytes;
	return h > limit_bytes / 2 ? limit_bytes / 2 : h;
}

/*
 * avail_floor = max(low watermark, MemTotal >> avail_total_shift)
 *
 * The kernel's kswapd wakes at the low watermark (min_free_kbytes * 5/4, doc/algorithms.md §7):
 * by then it reclaims, and swaps the cache's pages out if it can. Keeping
 * MemAvailable above it and above 1/32 of RAM gives the cache the first
 * move.
 */
uint64_t memctl_avail_floor_bytes(const struct memctl_config *cfg, const struct mem_signals *s)
{
	uint64_t low = s->min_free_bytes * 5 / 4, share = s->mem_total_bytes >> cfg->avail_total_shift;

	return low > share ? low : share;
}

/*
 * How far the signals are over their bound (the deficit, bytes), how far
 * under it (*room) and the margin of the dead band below it, the tighter
 * of the cgroup's and the machine's.
 */
/*
 * How far the others' memory (the cgroup's usage, or the machine's used
 * memory, less what the cache holds) grows in horizon_ms at its rate
 * since the previous sample:
 *
 *   rise = ((used - resident) - (used' - resident')) * horizon / dt
 *
 * (1) Counted only while @used itself rises: when the cache keeps up, used
 *     is flat and nothing is projected; memory given back that shows late
 *     in used (a huge page partly given back) makes the others seem to
 *     grow, but used does not rise, so it does not compound.
 * (2) The others' rate, not used's: used rises by the others' growth less
 *     what the cache gives back meanwhile, which would hide a program
 *     outrunning the cache.
 * (3) dt at least 50 ms: samples a few ms apart (an event right after the
 *     timer) must not extrapolate noise.
 */
static uint64_t projected_rise(const struct memctl *m, uint64_t now, uint64_t used_prev,
			       uint64_t used, size_t resident)
{
	uint64_t dt = m->prev_ms && now > m->prev_ms ? now - m->prev_ms : 0;
	uint64_t res = (uint64_t)resident * m->cfg.page_bytes;
	uint64_t res_prev = (uint64_t)m->prev_resident_pages * m->cfg.page_bytes;
	uint64_t others, others_prev;

	if (!dt || !used_prev || used <= used_prev)
		return 0;
	others = used > res ? used - res : 0;
	others_prev = used_prev > res_prev ? used_prev - res_prev : 0;
	if (others <= others_prev)
		return 0;
	if (dt < 50)
		dt = 50;
	return (others - others_prev) * m->cfg.horizon_ms / dt;
}

static uint64_t mem_deficit(const struct memctl *m, const struct mem_signals *s, size_t resident,
			    uint64_t *room, uint64_t *margin, const char **why, bool *rising)
{
	uint64_t deficit = 0, bound, r, usage, avail, up, down;

	*room = UINT64_MAX;
	*margin = 0;
	*why = NULL;
	*rising = false;
	if (s->cg_limit_bytes && s->cg_usage_bytes) {
		uint64_t h = memctl_headroom_bytes(&m->cfg, s->cg_limit_bytes);

		up = projected_rise(m, s->now_ms, m->prev_usage_bytes, s->cg_usage_bytes, resident);
		usage = s->cg_usage_bytes + up;
		bound = s->cg_limit_bytes - h;
		if (usage > bound) {
			deficit = usage - bound;
			*room = 0;
			*why = "cgroup";
			*rising = s->cg_usage_bytes > m->prev_usage_bytes && m->prev_usage_bytes;
		} else {
			*room = bound - usage;
		}
		*margin = h / 4;
	}
	if (s->mem_available_bytes && s->mem_total_bytes) {
		/* used = MemTotal - MemAvailable */
		uint64_t t = s->mem_total_bytes, prev = m->prev_avail_bytes;

		down = prev && prev <= t && s->mem_available_bytes <= t
		       ? projected_rise(m, s->now_ms, t - prev, t - s->mem_available_bytes, resident)
		       : 0;
		avail = s->mem_available_bytes > down ? s->mem_available_bytes - down : 0;
		bound = memctl_avail_floor_bytes(&m->cfg, s);
		r = avail > bound ? avail - bound : 0;
		if (avail < bound && bound - avail > deficit) {
			deficit = bound - avail;
			*why = "available";
			*margin = bound / 4;
			*rising = prev && s->mem_available_bytes < prev;
		}
		if (r < *room) {
			*room = r;
			if (!deficit)
				*margin = bound / 4;
		}
	}
	return deficit;
}

/* Within two headrooms of the cgroup's limit, or MemAvailable under twice its floor. */
static bool near_bound(const struct memctl *m, const struct mem_signals *s)
{
	if (s->cg_limit_bytes && s->cg_usage_bytes &&
	    s->cg_usage_bytes + 2 * memctl_headroom_bytes(&m->cfg, s->cg_limit_bytes) >
	    s->cg_limit_bytes)
		return true;
	return s->mem_available_bytes && s->mem_total_bytes &&
	       s->mem_available_bytes < 2 * memctl_avail_floor_bytes(&m->cfg, s);
}

static size_t bytes_to_pages(const struct memctl *m, uint64_t bytes)
{
	uint64_t p = (bytes + m->cfg.page_bytes - 1) / m->cfg.page_bytes;

	return p > SIZE_MAX ? SIZE_MAX : (size_t)p;
}

/* Rule (2): the cut of one event level, or 0 when it cut too recently. */
static size_t event_cut(struct memctl *m, enum memctl_level l, uint64_t now, size_t resident)
{
	if (m->last_cut_ms[l] && now - m->last_cut_ms[l] < m->cfg.cut_interval_ms)
		return 0;
	m->last_cut_ms[l] = now;
	return l == MEMCTL_CRITICAL ? resident / 2 : resident / 4;
}

/*
 * Rule (3): additive growth, ceiling >> grow_shift per second of steps
 * since the last one (at most 2 s of it: a late step must not jump), up
 * to @cap.
 */
static size_t grow(struct memctl *m, uint64_t now, size_t cap)
{
	uint64_t dt = m->last_step_ms ? now - m->last_step_ms : 0, add;
	size_t t = m->target_pages;

	if (dt > 2000)
		dt = 2000;
	if (t >= cap)
		return t;
	m->grow_frac_pages += (size_t)((uint64_t)(m->cfg.ceiling_pages >> m->cfg.grow_shift) * dt);
	add = m->grow_frac_pages / 1000;
	m->grow_frac_pages %= 1000;
	return add >= cap - t ? cap : t + (size_t)add;
}

static void set_target(struct memctl *m, size_t t, const char *reason, long pressure)
{
	t = clamp_target(&m->cfg, t);
	if (t == m->target_pages)
		return;
	m->target_pages = t;
	m->reason = reason;
	m->pressure = pressure;
}

/*
 * Rule (1): below what is resident by deficit + margin; within settle_ms
 * of that, with usage not rising and no limit hit since, by the deficit's
 * growth only.
 */
static void deficit_cut(struct memctl *m, const struct mem_signals *s, uint64_t deficit,
			uint64_t margin, size_t resident, const char *why, bool rising)
{
	uint64_t now = s->now_ms;
	size_t d, t;

	if (m->last_deficit_ms && now - m->last_deficit_ms < m->cfg.settle_ms && !rising &&
	    s->cg_limit_hits == m->last_deficit_hits) {
		if (deficit <= m->last_deficit_bytes)
			return;
		d = bytes_to_pages(m, deficit - m->last_deficit_bytes);
		m->last_deficit_bytes = deficit;
		t = m->target_pages > d ? m->target_pages - d : 0;
	} else {
		d = bytes_to_pages(m, deficit + margin);
		m->last_deficit_ms = now;
		m->last_deficit_bytes = deficit;
		m->last_deficit_hits = s->cg_limit_hits;
		t = resident > d ? resident - d : 0;
	}
	if (t < m->target_pages)
		set_target(m, t, why, (long)bytes_to_pages(m, deficit));
}

size_t memctl_step(struct memctl *m, const struct mem_signals *s, size_t resident_pages,
		   size_t dirty_pages)
{
	static const unsigned level_ev[MEMCTL_NR_LEVELS] = {
		[MEMCTL_PSI] = MEM_EV_PSI, [MEMCTL_MEDIUM] = MEM_EV_MEDIUM,
		[MEMCTL_CRITICAL] = MEM_EV_CRITICAL,
	};
	static const char *const level_name[MEMCTL_NR_LEVELS] = {
		[MEMCTL_PSI] = "psi", [MEMCTL_MEDIUM] = "medium", [MEMCTL_CRITICAL] = "critical",
	};
	uint64_t room, margin, deficit, now = s->now_ms;
	unsigned events = s->events;
	const char *why;
	bool pressure = false, rising;
	size_t cut;
	int l;

	/* dirty pages are written back before they are dropped: the target
	 * does not wait for them (the kernel's reclaim sets a goal too) */
	(void)dirty_pages;
	deficit = mem_deficit(m, s, resident_pages, &room, &margin, &why, &rising);
	if (deficit) {
		deficit_cut(m, s, deficit, margin, resident_pages, why, rising);
		pressure = true;
	}
	if ((events & MEM_EV_PSI_SYS) && near_bound(m, s))
		events |= MEM_EV_PSI;
	for (l = MEMCTL_CRITICAL; l >= 0; l--) {
		if (!(events & level_ev[l]))
			continue;
		pressure = true;
		cut = event_cut(m, (enum memctl_level)l, now, resident_pages);
		if (cut && resident_pages - cut < m->target_pages)
			set_target(m, resident_pages - cut, level_name[l], (long)cut);
	}
	if (pressure)
		m->last_pressure_ms = now;
	else if (!m->last_pressure_ms || now - m->last_pressure_ms >= m->cfg.hold_ms) {
		/* never into the headroom, and not into the dead band below it */
		size_t cap = m->cfg.ceiling_pages;

		if (room != UINT64_MAX) {
			uint64_t r = room > margin ? room - margin : 0;
			size_t rp = bytes_to_pages(m, r);

			if (rp < SIZE_MAX - resident_pages && resident_pages + rp < cap)
				cap = resident_pages + rp;
		}
		set_target(m, grow(m, now, cap), "grow", 0);
	}
	m->last_step_ms = now;
	m->prev_ms = now;
	m->prev_usage_bytes = s->cg_usage_bytes;
	m->prev_avail_bytes = s->mem_available_bytes;
	m->prev_resident_pages = resident_pages;
	return m->target_pages;
}

void memctl_set_bounds(struct memctl *m, size_t floor_pages, size_t ceiling_pages)
{
	/* a target that pressure had not lowered follows the ceiling up */
	bool at_ceiling = m->target_pages >= m->cfg.ceiling_pages;

	m->cfg.floor_pages = floor_pages;
	m->cfg.ceiling_pages = ceiling_pages;
	set_target(m, at_ceiling ? ceiling_pages : m->target_pages, "bounds", 0);
}

/* ---- the default size and OOM protection ---------------------------------- */

/*
 * default = min(min(RAM, cgroup limit) / 4, MemAvailable / 2), >= 64 MiB
 *
 * A quarter of the smaller of the machine and the cgroup: a daemon in a
 * 3 GiB cgroup on a 24 GiB host takes 768 MiB, not 6 GiB it may never
 * have; half of MemAvailable so a daemon started on a loaded machine does
 * not ask for memory the others hold. The cache grows on demand and shrinks
 * under pressure, so this is the ceiling, not what is taken at mount.
 */
uint64_t mem_default_cache_bytes(uint64_t ram_bytes, uint64_t cg_limit_bytes,
				 uint64_t avail_bytes)
{
	uint64_t base = ram_bytes, size;

	if (cg_limit_bytes && cg_limit_bytes < base)
		base = cg_limit_bytes;
	size = base / 4;
	if (avail_bytes && avail_bytes / 2 < size)
		size = avail_bytes / 2;
	return size < DEFAULT_CACHE_MIN_BYTES ? DEFAULT_CACHE_MIN_BYTES : size;
}

int mem_oom_score_adj_set(int adj)
{
	char buf[16];
	int fd, n, ret = 0;

	fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = snprintf(buf, sizeof(buf), "%d\n", adj);
	if (write(fd, buf, (size_t)n) != n)
		ret = -errno;
	close(fd);
	return ret;
}

/* ---- parsers ------------------------------------------------------------------ */

uint64_t mem_meminfo_field(const char *text, const char *field)
{
	size_t n = strlen(field);
	const char *p = text;

	while (p && *p) {
		if (!strncmp(p, field, n) && p[n] == ':')
			return strtoull(p + n + 1, NULL, 10) * 1024;
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return 0;
}

uint64_t mem_psi_some_total(const char *text)
{
	const char *p;

	if (strncmp(text, "some ", 5))
		return 0;
	p = strstr(text, "total=");
	return p ? strtoull(p + 6, NULL, 10) : 0;
}

uint64_t mem_kv_field(const char *text, const char *key)
{
	size_t n = strlen(key);
	const char *p = text;

	while (p && *p) {
		if (!strncmp(p, key, n) && p[n] == ' ')
			return strtoull(p + n + 1, NULL, 10);
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return 0;
}

/* Copy up to the end of the line into @path. */
static int copy_line(const char *s, char *path, size_t len)
{
	size_t n = strcspn(s, "\n");

	if (n >= len)
		return -ENAMETOOLONG;
	memcpy(path, s, n);
	path[n] = 0;
	return 0;
}

/* The v1 line "ID:ctrl,ctrl:/path" naming the memory controller. */
static const char *cgroup_v1_memory(const char *line)
{
	const char *c = strchr(line, ':'), *end;

	if (!c)
		return NULL;
	end = strchr(++c, ':');
	if (!end)
		return NULL;
	while (c < end) {
		size_t n = strcspn(c, ",:");

		if (n == 6 && !strncmp(c, "memory", 6))
			return end + 1;
		c += n + 1;
	}
	return NULL;
}

int mem_cgroup_path(const char *text, char *path, size_t len, bool *v1)
{
	const char *p = text, *v2 = NULL, *m;

	while (p && *p) {
		m = cgroup_v1_memory(p);
		if (m) {
			*v1 = true;
			return copy_line(m, path, len);
		}
		if (!strncmp(p, "0::", 3))
			v2 = p + 3;
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	if (!v2)
		return -ENOENT;
	*v1 = false;
	return copy_line(v2, path, len);
}
