// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * memwatch_probe: the memory watcher with a pretend cache, to see which
 * signals a machine offers and how fast the controller reacts to them.
 *
 *   memwatch_probe [-s SECONDS] [-c CEILING_MIB] [-f FLOOR_MIB] [-q]
 *
 * The pretend cache holds CEILING_MIB (default 1024) "resident" and gives
 * back at once whatever the target asks (it holds no memory: the cgroup's
 * usage is the real programs'). Prints the watcher's one-line description,
 * then each step that saw an event or changed the target:
 *   t=MS ev=BITS usage=MIB limit=MIB avail=MIB target=MIB wake->decide=US
 * (t: CLOCK_MONOTONIC ms, as memhog -v prints), and the counters at the
 * end. -q prints only changes of target.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "wbcfs/lib/clock.h"
#include "wbcfs/cache/pressure.h"

#define MIB ((size_t)1 << 20)

static size_t resident;
static bool quiet;

static void set_target(void *arg, size_t pages, const char *reason, long pressure)
{
	printf("probe: target %zu MiB (%s, pressure %ld pages)\n", pages * 4096 / MIB, reason,
	       pressure);
	if (pages < resident)
		resident = pages;
}

static size_t resident_pages(void *arg)
{
	return resident;
}

static void trace(void *arg, const struct mem_signals *s, size_t target, uint64_t woken_ns,
		  uint64_t decided_ns)
{
	static size_t last;

	if ((quiet || !s->events) && target == last)
		return;
	last = target;
	printf("probe: t=%.3f ev=%#x usage=%llu limit=%llu avail=%llu target=%zu "
	       "wake->decide=%.1f us\n", (double)woken_ns / 1e6, s->events,
	       (unsigned long long)(s->cg_usage_bytes / MIB),
	       (unsigned long long)(s->cg_limit_bytes / MIB),
	       (unsigned long long)(s->mem_available_bytes / MIB), target * 4096 / MIB,
	       (double)(decided_ns - woken_ns) / 1e3);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static const struct memwatch_ops ops = {
		.set_target = set_target, .resident_pages = resident_pages, .trace = trace,
	};
	struct memwatch_config cfg;
	struct mem_stats_snap st;
	struct memwatch *w;
	unsigned seconds = 10, ceiling = 1024, floor_mib = 64;
	int opt, ret;

	while ((opt = getopt(argc, argv, "s:c:f:q")) != -1) {
		switch (opt) {
		case 's': seconds = (unsigned)atoi(optarg); break;
		case 'c': ceiling = (unsigned)atoi(optarg); break;
		case 'f': floor_mib = (unsigned)atoi(optarg); break;
		case 'q': quiet = true; break;
		default:
			fprintf(stderr, "usage: memwatch_probe [-s S] [-c MIB] [-f MIB] [-q]\n");
			return 2;
		}
	}
	memwatch_config_default(&cfg);
	memctl_config_default(&cfg.ctl, 4096, floor_mib * MIB / 4096, ceiling * MIB / 4096);
	cfg.ops = &ops;
	cfg.msg = stdout;
	cfg.name = "probe";
	resident = cfg.ctl.ceiling_pages;
	printf("probe: default cache_size would be %llu MiB\n",
	       (unsigned long long)(mem_default_cache_size() / MIB));
	ret = memwatch_start(&w, &cfg);
	if (ret) {
		fprintf(stderr, "probe: cannot start the watcher: %d\n", ret);
		return 1;
	}
	fflush(stdout);
	sleep(seconds);
	memwatch_stats(w, &st);
	memwatch_stop(w);
	printf("probe: mem_pressure_events %llu\nprobe: mem_pressure_stall_us %llu\n"
	       "probe: mem_cgroup_limit_bytes %llu\nprobe: mem_cgroup_usage_bytes %llu\n"
	       "probe: mem_available_bytes %llu\nprobe: mem_watch_steps %llu\n"
	       "probe: mem_target_changes %llu\n", st.pressure_events, st.pressure_stall_us,
	       st.cgroup_limit_bytes, st.cgroup_usage_bytes, st.available_bytes,
	       st.watch_steps, st.target_changes);
	return 0;
}
