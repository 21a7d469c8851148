// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The cache's size controller with a fake clock and made-up signals: it
 * falls at once on a cgroup or MemAvailable deficit and on PSI and level
 * events (each level rate-limited), grows back slowly and only after the
 * hold time, never into the headroom, does not oscillate on a steady
 * signal at the edge, honours floor and ceiling; the default cache size;
 * the parsers of the kernel's files.
 */
#include <check.h>
#include "helpers.h"
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wbcfs/cache/pressure.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define PG 4096ull
#define P(bytes) ((size_t)((bytes) / PG))

static struct memctl m;
static struct mem_signals s;
static size_t resident;

/* A 3 GiB cgroup; the cache between 64 MiB and 2 GiB; clock at 1000 s. */
static void setup(void)
{
	struct memctl_config cfg;

	memctl_config_default(&cfg, PG, P(64 * MIB), P(2 * GIB));
	memctl_init(&m, &cfg);
	memset(&s, 0, sizeof(s));
	s.now_ms = 1000000;
	s.cg_limit_bytes = 3 * GIB;
	s.cg_usage_bytes = 1 * GIB;
	resident = P(1 * GIB);
}

static size_t step_ms(unsigned ms)
{
	s.now_ms += ms;
	return memctl_step(&m, &s, resident, 0);
}

/* headroom of 3 GiB: 192 MiB (1/16); the allowance 2.8125 GiB */
#define ALLOWED (3 * GIB - 192 * MIB)

START_TEST(idle_no_change)
{
	size_t t0 = m.target_pages;
	int i;

	ck_assert_uint_eq(t0, P(2 * GIB));
	for (i = 0; i < 100; i++)
		ck_assert_uint_eq(step_ms(100), t0);
	/* no signal known at all: the same */
	memset(&s, 0, sizeof(s));
	for (i = 0; i < 100; i++)
		ck_assert_uint_eq(step_ms(1000), t0);
}
END_TEST

START_TEST(cgroup_deficit_falls_at_once)
{
	size_t t;

	/* 100 MiB over the allowance */
	s.cg_usage_bytes = ALLOWED + 100 * MIB;
	resident = P(1536 * MIB);
	t = step_ms(100);
	/* by the deficit plus a quarter of the headroom, below resident */
	ck_assert_uint_eq(t, resident - P(100 * MIB + 48 * MIB));
	ck_assert_str_eq(m.reason, "cgroup");
	ck_assert_int_eq(m.pressure, (long)P(100 * MIB));
	/* the same deficit again with resident already down: no further cut */
	resident = t;
	s.cg_usage_bytes = ALLOWED - 48 * MIB;
	ck_assert_uint_eq(step_ms(100), t);
}
END_TEST

/*
 * Memory given back that the cgroup's usage does not show yet (a huge
 * page partly given back): one cut per settle time, not one per sample;
 * the deficit's growth still cuts at once.
 */
START_TEST(deficit_settles)
{
	size_t t0, t;
	unsigned ms;

	s.cg_usage_bytes = ALLOWED + 100 * MIB;
	resident = P(1536 * MIB);
	t0 = step_ms(100);
	ck_assert_uint_eq(t0, resident - P(148 * MIB));
	/* the cache did its part, the usage stays */
	resident = t0;
	for (ms = 100; ms < 1000; ms += 100)
		ck_assert_uint_eq(step_ms(100), t0);
	/* someone allocates 50 MiB in 50 ms: rising usage is answered at
	 * once, projected 500 ms ahead (500 MiB more) */
	s.cg_usage_bytes += 50 * MIB;
	t = step_ms(50);
	ck_assert_uint_eq(t, t0 - P(150 * MIB + 500 * MIB + 48 * MIB));
	resident = t;
	/* past the settle time a deficit still there is cut for anew */
	ck_assert_uint_eq(step_ms(900), t);
	t = step_ms(100);
	ck_assert_uint_eq(t, resident - P(150 * MIB + 48 * MIB));
	/* within it, a limit hit says the memory given back was taken: the
	 * same deficit again is cut for at once */
	resident = t;
	ck_assert_uint_eq(step_ms(100), t);
	s.cg_limit_hits++;
	ck_assert_uint_eq(step_ms(100), t - P(150 * MIB + 48 * MIB));
}
END_TEST

/*
 * A program allocating fast beside a full cache in a 3 GiB cgroup: the
 * cache gives back what the target asks one sample late (its reclaim),
 * and the cgroup's usage must never reach the limit, where the kernel
 * would OOM-kill within milliseconds (no swap).
 */
static uint64_t hog_peak(uint64_t mib_per_step, unsigned step_ms_each, unsigned delay)
{
	uint64_t others = 300 * MIB, peak = 0, usage, want = 300 * MIB + 2304 * MIB;
	size_t asked[4];
	unsigned i, k;

	resident = P(1800 * MIB);
	for (k = 0; k < 4; k++)
		asked[k] = resident;
	for (i = 0; i < 400; i++) {
		others = others + mib_per_step * MIB < want ? others + mib_per_step * MIB : want;
		/* what was asked @delay samples ago is given back now */
		if (asked[delay] < resident)
			resident = asked[delay];
		usage = others + (uint64_t)resident * PG;
		if (usage > peak)
			peak = usage;
		s.cg_usage_bytes = usage;
		for (k = 3; k > 0; k--)
			asked[k] = asked[k - 1];
		asked[0] = step_ms(step_ms_each);
	}
	ck_assert_uint_le((uint64_t)resident * PG, 3 * GIB - want);
	return peak;
}

/*
 * 300 MiB/s sampled every 100 ms and given back a sample late; 300 MiB/s
 * sampled every 200 ms (a loaded machine) given back two samples late;
 * 1 GiB/s. (Seen: a program OOM-killed at 300 MiB/s with the samples
 * 200 ms apart, the settle time cutting only the deficit's growth.)
 */
START_TEST(fast_program_no_limit)
{
	static const unsigned runs[][3] = { { 30, 100, 1 }, { 60, 200, 2 }, { 100, 100, 1 } };
	uint64_t peak;
	unsigned i;

	for (i = 0; i < 3; i++) {
		setup();
		peak = hog_peak(runs[i][0], runs[i][1], runs[i][2]);
		ck_assert_msg(peak < 3 * GIB, "%u MiB per %u ms, given back %u samples late: "
			      "usage reached %llu MiB", runs[i][0], runs[i][1], runs[i][2],
			      (unsigned long long)(peak / MIB));
	}
}
END_TEST

START_TEST(available_deficit_falls)
{
	size_t t;

	s.cg_limit_bytes = 0;
	s.cg_usage_bytes = 0;
	s.mem_total_bytes = 32 * GIB;	/* floor: 1 GiB */
	s.min_free_bytes = 64 * MIB;
	s.mem_available_bytes = 768 * MIB;
	t = step_ms(100);
	ck_assert_uint_eq(t, resident - P(256 * MIB + 256 * MIB));
	ck_assert_str_eq(m.reason, "available");
	/* the low watermark wins when it is above MemTotal/32 */
	s.min_free_bytes = 2 * GIB;
	ck_assert_uint_eq(memctl_avail_floor_bytes(&m.cfg, &s), 2560 * MIB);
}
END_TEST

START_TEST(events_cut_rate_limited)
{
	resident = P(1600 * MIB);
	s.events = MEM_EV_PSI;
	ck_assert_uint_eq(step_ms(100), P(1200 * MIB));
	ck_assert_str_eq(m.reason, "psi");
	/* again within 250 ms: no second cut from the same level */
	resident = P(1200 * MIB);
	ck_assert_uint_eq(step_ms(100), P(1200 * MIB));
	/* a critical event is another level: half of resident */
	s.events = MEM_EV_CRITICAL;
	ck_assert_uint_eq(step_ms(10), P(600 * MIB));
	ck_assert_str_eq(m.reason, "critical");
	/* PSI after its interval cuts again */
	resident = P(600 * MIB);
	s.events = MEM_EV_PSI;
	ck_assert_uint_eq(step_ms(300), P(450 * MIB));
	/* medium: a quarter */
	resident = P(400 * MIB);
	s.events = MEM_EV_MEDIUM;
	ck_assert_uint_eq(step_ms(1), P(300 * MIB));
	/* a threshold crossing alone is only a wakeup */
	s.events = MEM_EV_THRESHOLD;
	ck_assert_uint_eq(step_ms(300), P(300 * MIB));
}
END_TEST

/*
 * The machine's PSI fires for any cgroup stalled on its own limit: it cuts
 * only when this cgroup or the machine is near its bound.
 */
START_TEST(system_psi_only_near_bound)
{
	size_t t0 = m.target_pages;

	s.mem_total_bytes = 32 * GIB;		/* floor 1 GiB */
	s.mem_available_bytes = 20 * GIB;
	s.events = MEM_EV_PSI_SYS;
	ck_assert_uint_eq(step_ms(100), t0);
	ck_assert_uint_eq(step_ms(300), t0);
	/* the cgroup within two headrooms of its limit */
	setup();
	s.cg_usage_bytes = 3 * GIB - 300 * MIB;
	s.events = MEM_EV_PSI_SYS;
	ck_assert_uint_eq(step_ms(300), resident - resident / 4);
	ck_assert_str_eq(m.reason, "psi");
	/* or the machine under twice its MemAvailable floor */
	setup();
	s.mem_total_bytes = 32 * GIB;
	s.mem_available_bytes = 1536 * MIB;
	s.events = MEM_EV_PSI_SYS;
	ck_assert_uint_eq(step_ms(100), resident - resident / 4);
}
END_TEST

START_TEST(grows_slowly_after_hold)
{
	size_t t, prev;
	unsigned ms;

	s.events = MEM_EV_CRITICAL;
	t = step_ms(100);
	ck_assert_uint_eq(t, P(512 * MIB));
	s.events = 0;
	resident = t;
	s.cg_usage_bytes = 512 * MIB;
	/* nothing during the hold time */
	for (ms = 0; ms + 100 < 5000; ms += 100)
		ck_assert_uint_eq(step_ms(100), t);
	/* then ceiling/32 per second: 64 MiB per second */
	prev = step_ms(100);
	prev = step_ms(1000);
	ck_assert_uint_eq(prev, t + P(64 * MIB) + P(64 * MIB) / 10);
	ck_assert_str_eq(m.reason, "grow");
	/* and on to the ceiling, never beyond */
	for (ms = 0; ms < 60000; ms += 100) {
		size_t n = step_ms(100);

		ck_assert_uint_ge(n, prev);
		ck_assert_uint_le(n - prev, P(64 * MIB) / 10 + 1);
		prev = n;
	}
	ck_assert_uint_eq(prev, P(2 * GIB));
}
END_TEST

START_TEST(growth_stops_short_of_headroom)
{
	size_t t;
	unsigned ms;

	/* 1.5 GiB of others' memory beside the cache */
	resident = P(1 * GIB);
	s.cg_usage_bytes = ALLOWED + 10 * MIB;
	t = step_ms(100);
	ck_assert_uint_lt(t, resident);
	/* the cache gave back, the others stay: usage follows the cache */
	for (ms = 0; ms < 60000; ms += 100) {
		s.cg_usage_bytes = s.cg_usage_bytes - resident * PG + m.target_pages * PG;
		resident = m.target_pages;
		step_ms(100);
		ck_assert_uint_le(s.cg_usage_bytes, ALLOWED);
	}
	ck_assert_uint_eq(m.target_pages, resident);
	ck_assert_uint_lt(m.target_pages, P(1 * GIB));
}
END_TEST

START_TEST(steady_edge_no_oscillation)
{
	size_t t, changes = 0, prev;
	unsigned ms;

	/* the others' memory: what is left for the cache's 1 GiB resident */
	uint64_t others = ALLOWED + 1 * MIB - 1 * GIB;

	resident = P(1 * GIB);
	for (ms = 0; ms < 120000; ms += 100) {
		s.cg_usage_bytes = others + (uint64_t)resident * PG;
		prev = m.target_pages;
		t = step_ms(100);
		if (t != prev)
			changes++;
		/* the cache follows its target, filling up to it */
		resident = t < P(1 * GIB) ? t : P(1 * GIB);
	}
	/* one cut, then a dead band: at most one regrowth toward its edge */
	ck_assert_uint_le(changes, 3);
	ck_assert_uint_le(s.cg_usage_bytes, ALLOWED);
}
END_TEST

START_TEST(floor_and_ceiling)
{
	s.events = MEM_EV_CRITICAL;
	resident = P(100 * MIB);
	ck_assert_uint_eq(step_ms(100), P(64 * MIB));
	s.events = 0;
	s.cg_usage_bytes = 4 * GIB;
	ck_assert_uint_eq(step_ms(300), P(64 * MIB));
	/* a floor above the ceiling yields to it */
	memctl_set_bounds(&m, P(64 * MIB), P(32 * MIB));
	ck_assert_uint_eq(m.target_pages, P(32 * MIB));
}
END_TEST

START_TEST(ceiling_change_takes_effect)
{
	/* lowered: at once */
	memctl_set_bounds(&m, P(64 * MIB), P(1 * GIB));
	ck_assert_uint_eq(m.target_pages, P(1 * GIB));
	ck_assert_uint_eq(step_ms(100), P(1 * GIB));
	/* raised while not under pressure: follows */
	memctl_set_bounds(&m, P(64 * MIB), P(4 * GIB));
	ck_assert_uint_eq(m.target_pages, P(4 * GIB));
	/* raised after pressure had cut: grows back by the rules */
	s.events = MEM_EV_MEDIUM;
	resident = P(2 * GIB);
	ck_assert_uint_eq(step_ms(100), P(1536 * MIB));
	s.events = 0;
	memctl_set_bounds(&m, P(64 * MIB), P(8 * GIB));
	ck_assert_uint_eq(m.target_pages, P(1536 * MIB));
	/* a floor raised above the target lifts it */
	memctl_set_bounds(&m, P(1800 * MIB), P(8 * GIB));
	ck_assert_uint_eq(m.target_pages, P(1800 * MIB));
}
END_TEST

START_TEST(default_cache_size)
{
	/* a 3 GiB cgroup on a 24 GiB host: 768 MiB, not 6 GiB */
	ck_assert_uint_eq(mem_default_cache_bytes(24 * GIB, 3 * GIB, 22 * GIB), 768 * MIB);
	ck_assert_uint_eq(mem_default_cache_bytes(24 * GIB, 0, 22 * GIB), 6 * GIB);
	/* cgroup v1's "no limit" is a huge number */
	ck_assert_uint_eq(mem_default_cache_bytes(24 * GIB, 9223372036854771712ull, 0), 6 * GIB);
	/* half of MemAvailable at most, 64 MiB at least */
	ck_assert_uint_eq(mem_default_cache_bytes(24 * GIB, 0, 2 * GIB), 1 * GIB);
	ck_assert_uint_eq(mem_default_cache_bytes(24 * GIB, 128 * MIB, 0), 64 * MIB);
}
END_TEST

START_TEST(parsers)
{
	static const char meminfo[] = "MemTotal:       24683736 kB\nMemFree:  1 kB\n"
				      "MemAvailable:   22928440 kB\n";
	static const char psi[] = "some avg10=0.00 avg60=0.00 avg300=0.00 total=910675\n"
				  "full avg10=0.00 avg60=0.00 avg300=0.00 total=468010\n";
	static const char cg1[] = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/f66a\n"
				  "0::/\n";
	static const char cg1b[] = "5:cpu,memory:/a/b\n";
	static const char cg2[] = "0::/user.slice/x.scope\n";
	static const char stat[] = "cache 10\ninactive_file 4096\ntotal_inactive_file 8192\n";
	char path[64];
	bool v1;

	ck_assert_uint_eq(mem_meminfo_field(meminfo, "MemAvailable"), 22928440ull * 1024);
	ck_assert_uint_eq(mem_meminfo_field(meminfo, "MemTotal"), 24683736ull * 1024);
	ck_assert_uint_eq(mem_meminfo_field(meminfo, "Mem"), 0);
	ck_assert_uint_eq(mem_psi_some_total(psi), 910675);
	ck_assert_uint_eq(mem_kv_field(stat, "inactive_file"), 4096);
	ck_assert_uint_eq(mem_kv_field(stat, "total_inactive_file"), 8192);
	ck_assert_int_eq(mem_cgroup_path(cg1, path, sizeof(path), &v1), 0);
	ck_assert(v1);
	ck_assert_str_eq(path, "/process_api/f66a");
	ck_assert_int_eq(mem_cgroup_path(cg1b, path, sizeof(path), &v1), 0);
	ck_assert_str_eq(path, "/a/b");
	ck_assert_int_eq(mem_cgroup_path(cg2, path, sizeof(path), &v1), 0);
	ck_assert(!v1);
	ck_assert_str_eq(path, "/user.slice/x.scope");
	ck_assert_int_eq(mem_cgroup_path("1:cpu:/\n", path, sizeof(path), &v1), -ENOENT);
}
END_TEST

/* ---- the watcher thread, on this machine's real signals ---- */

static atomic_size_t w_target = SIZE_MAX, w_ceiling = 1000;
static atomic_int w_calls;

static void w_set_target(void *arg, size_t pages, const char *reason, long pressure)
{
	atomic_store(&w_target, pages);
	atomic_fetch_add(&w_calls, 1);
}

static size_t w_resident(void *arg)
{
	return 1000;
}

static void w_bounds(void *arg, size_t *floor_pages, size_t *ceiling_pages)
{
	*floor_pages = 10;
	*ceiling_pages = atomic_load(&w_ceiling);
}

static bool w_wait(bool (*cond)(void))
{
	int i;

	for (i = 0; i < 300 && !cond(); i++)
		usleep(50000);
	return cond();
}

static bool w_target_le_500(void)
{
	return atomic_load(&w_target) <= 500;
}

static bool w_target_le_100(void)
{
	return atomic_load(&w_target) <= 100;
}

/*
 * The watcher steps, hands a lowered ceiling over as a new target (from
 * the bounds callback and from memwatch_set_bounds), counts its steps,
 * and stops.
 */
START_TEST(watcher_runs)
{
	static const struct memwatch_ops ops = {
		.set_target = w_set_target, .resident_pages = w_resident, .bounds = w_bounds,
	};
	struct memwatch_config cfg;
	struct mem_stats_snap st;
	struct memwatch *w;
	char desc[512];

	memwatch_config_default(&cfg);
	memctl_config_default(&cfg.ctl, 4096, 10, 1000);
	cfg.ops = &ops;
	cfg.slow_ms = 50;
	cfg.fast_ms = 20;
	ck_assert_int_eq(memwatch_start(&w, &cfg), 0);
	memwatch_describe(w, desc, sizeof(desc));
	ck_assert_msg(strstr(desc, "MemAvailable") != NULL, "%s", desc);
	atomic_store(&w_ceiling, 500);
	ck_assert_msg(w_wait(w_target_le_500), "target %zu", atomic_load(&w_target));
	memwatch_set_bounds(w, 10, 100);
	/* memwatch_set_bounds() lowers it too; the bounds callback, read at
	 * each step, must agree or it would win at the next one */
	atomic_store(&w_ceiling, 100);
	ck_assert_msg(w_wait(w_target_le_100), "target %zu", atomic_load(&w_target));
	memwatch_stats(w, &st);
	ck_assert_uint_ge(st.watch_steps, 1);
	ck_assert_uint_ge(st.target_changes, 2);
	ck_assert_int_ge(atomic_load(&w_calls), 2);
	memwatch_stop(w);
	memwatch_stats(NULL, &st);
	ck_assert_uint_eq(st.watch_steps, 0);
}
END_TEST

/* ---- made-up cgroup trees (mem_set_proc_root) ---- */

static char root[256];

static void t_put(const char *rel, const char *text)
{
	char path[512], *sl;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (sl = strchr(path + strlen(root) + 1, '/'); sl; sl = strchr(sl + 1, '/')) {
		*sl = 0;
		mkdir(path, 0755);
		*sl = '/';
	}
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static void tree_setup(void)
{
	char mi[1024];

	snprintf(root, sizeof(root), "/tmp/wbcfs-pressure-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(root));
	t_put("proc/meminfo", "MemTotal:       33554432 kB\nMemFree: 1 kB\n"
	      "MemAvailable:   16777216 kB\n");
	t_put("proc/pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=1234\n"
	      "full avg10=0.00 avg60=0.00 avg300=0.00 total=5\n");
	t_put("proc/sys/vm/min_free_kbytes", "65536\n");
	snprintf(mi, sizeof(mi), "34 30 0:31 / %s/mem rw,relatime - cgroup cgroup rw,memory\n"
		 "40 30 0:37 / %s/sys rw,relatime - cgroup2 cgroup2 rw\n", root, root);
	t_put("proc/self/mountinfo", mi);
	mem_set_proc_root(root);
}

static void tree_teardown(void)
{
	char cmd[300];

	mem_set_proc_root(NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	ck_assert_int_eq(system(cmd), 0);
}

static struct mem_stats_snap w_st;
static struct memwatch *w_cur;

static bool w_stats_limit_1g(void)
{
	memwatch_stats(w_cur, &w_st);
	return w_st.cgroup_limit_bytes == GIB;
}

static bool w_stats_sampled(void)
{
	memwatch_stats(w_cur, &w_st);
	/* a step after the PSI file was written again */
	return w_st.watch_steps >= 1 && w_st.available_bytes && w_st.pressure_stall_us;
}

static struct memwatch *tree_watch(size_t ceiling)
{
	static const struct memwatch_ops ops = {
		.set_target = w_set_target, .resident_pages = w_resident,
	};
	struct memwatch_config cfg;

	memwatch_config_default(&cfg);
	memctl_config_default(&cfg.ctl, 4096, 10, ceiling);
	cfg.ops = &ops;
	cfg.slow_ms = cfg.fast_ms = 20;
	atomic_store(&w_target, SIZE_MAX);
	ck_assert_int_eq(memwatch_start(&w_cur, &cfg), 0);
	return w_cur;
}

/*
 * cgroup v2: the tightest of memory.max and memory.high up the tree,
 * usage less inactive_file, the cgroup's own PSI total, a limit changed
 * at run time, and a deficit cut.
 */
START_TEST(tree_v2)
{
	struct memwatch *w;
	char desc[1024];

	t_put("proc/self/cgroup", "0::/a/b\n");
	t_put("sys/cgroup.controllers", "cpu io memory pids\n");
	t_put("sys/a/memory.max", "max\n");
	t_put("sys/a/memory.high", "2147483648\n");
	t_put("sys/a/memory.current", "1610612736\n");
	t_put("sys/a/memory.stat", "anon 1073741824\ninactive_file 536870912\n");
	t_put("sys/a/memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n");
	t_put("sys/a/b/memory.max", "3221225472\n");
	t_put("sys/a/b/memory.high", "max\n");
	t_put("sys/a/b/memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=777\n");
	/* RAM 32 GiB, MemAvailable 16 GiB, limit 2 GiB: 512 MiB */
	ck_assert_uint_eq(mem_default_cache_size(), 512 * MIB);
	w = tree_watch(P(1 * GIB));
	/* the PSI triggers were written into the made-up files: again */
	t_put("sys/a/b/memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=777\n");
	memwatch_describe(w, desc, sizeof(desc));
	ck_assert_msg(strstr(desc, "cgroup v2 /a/b limit 2.0G, memory.events") != NULL, "%s", desc);
	ck_assert_msg(strstr(desc, "cgroup PSI") != NULL, "%s", desc);
	ck_assert(w_wait(w_stats_sampled));
	ck_assert_uint_eq(w_st.cgroup_limit_bytes, 2 * GIB);
	ck_assert_uint_eq(w_st.cgroup_usage_bytes, 1 * GIB);
	ck_assert_uint_eq(w_st.available_bytes, 16 * GIB);
	ck_assert_uint_eq(w_st.pressure_stall_us, 777);
	/* the limit lowered: followed without waiting for the 5 s rescan */
	t_put("sys/a/memory.high", "1073741824\n");
	ck_assert(w_wait(w_stats_limit_1g));
	/* usage 1 GiB over a 1 GiB limit less 64 MiB: cut below resident
	 * (1000 pages) to the floor */
	ck_assert(w_wait(w_target_le_100));
	memwatch_stop(w);
}
END_TEST

/*
 * cgroup v1: the daemon in /x/y, the limit on /x (its usage read there),
 * the pressure_level and threshold registrations written; a limit only in
 * memory.stat's hierarchical_memory_limit (above a container's mount)
 * sizes the default too.
 */
START_TEST(tree_v1)
{
	struct memwatch *w;
	char desc[1024];

	t_put("proc/self/cgroup", "9:name=systemd:/\n4:memory:/x/y\n0::/\n");
	t_put("mem/memory.limit_in_bytes", "9223372036854771712\n");
	t_put("mem/x/memory.limit_in_bytes", "1073741824\n");
	t_put("mem/x/memory.usage_in_bytes", "500000000\n");
	t_put("mem/x/memory.stat", "total_inactive_file 100000000\n");
	t_put("mem/x/memory.failcnt", "0\n");
	t_put("mem/x/cgroup.event_control", "");
	t_put("mem/x/y/memory.limit_in_bytes", "9223372036854771712\n");
	t_put("mem/x/y/memory.usage_in_bytes", "100000000\n");
	t_put("mem/x/y/memory.stat", "hierarchical_memory_limit 1073741824\n");
	t_put("mem/x/y/memory.pressure_level", "");
	t_put("mem/x/y/cgroup.event_control", "");
	ck_assert_uint_eq(mem_default_cache_size(), 256 * MIB);
	w = tree_watch(P(1 * GIB));
	t_put("proc/pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=1234\n");
	memwatch_describe(w, desc, sizeof(desc));
	ck_assert_msg(strstr(desc, "cgroup v1 /x/y limit 1.0G, usage threshold, pressure_level") !=
		      NULL, "%s", desc);
	ck_assert(w_wait(w_stats_sampled));
	ck_assert_uint_eq(w_st.cgroup_limit_bytes, 1 * GIB);
	ck_assert_uint_eq(w_st.cgroup_usage_bytes, 400000000);
	ck_assert_uint_eq(w_st.pressure_stall_us, 1234);
	memwatch_stop(w);
	/* no limit on /x: memory.stat's hierarchical limit of 512 MiB */
	t_put("mem/x/memory.limit_in_bytes", "9223372036854771712\n");
	t_put("mem/x/y/memory.stat", "hierarchical_memory_limit 536870912\n");
	ck_assert_uint_eq(mem_default_cache_size(), 128 * MIB);
}
END_TEST

static Suite *pressure_suite(void)
{
	Suite *s = suite_create("pressure");
	TCase *tc;

	tc = t_tcase(s, "memctl", idle_no_change, cgroup_deficit_falls_at_once, deficit_settles,
		     fast_program_no_limit, available_deficit_falls, events_cut_rate_limited,
		     system_psi_only_near_bound, grows_slowly_after_hold,
		     growth_stops_short_of_headroom, steady_edge_no_oscillation, floor_and_ceiling,
		     ceiling_change_takes_effect);
	tcase_add_checked_fixture(tc, setup, NULL);
	t_tcase(s, "sizes", default_cache_size, parsers);
	tc = t_tcase(s, "watcher", watcher_runs);
	tcase_set_timeout(tc, 60);
	tc = t_tcase(s, "trees", tree_v2, tree_v1);
	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, tree_setup, tree_teardown);
	return s;
}

int main(void)
{
	return t_run(pressure_suite());
}
