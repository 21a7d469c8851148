// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The memory watcher (pressure.h): one thread that reads the kernel's
 * memory signals and runs the size controller (pressure.c) on each of
 * them, handing a changed target to its owner's callback.
 *
 * Signals, fastest first, each used when the kernel and permissions allow:
 *  - cgroup v1: an eventfd on memory.usage_in_bytes crossing
 *    limit - headroom (cgroup.event_control), re-armed as the limit
 *    changes: the kernel signals it from the charge path, before reclaim
 *    and long before the cgroup's OOM; memory.pressure_level "medium" and
 *    "critical" eventfds (vmpressure, from reclaim's scan/reclaim ratio).
 *  - cgroup v2: memory.events (POLLPRI when high, max or oom count up).
 *  - PSI triggers: /proc/pressure/memory, and the cgroup's memory.pressure
 *    in the v2 hierarchy (even a hybrid one without the v2 memory
 *    controller has it): "some STALL WINDOW".
 *  - A timerfd: every fast_ms near a limit or under recent pressure,
 *    slow_ms otherwise, to read usage and MemAvailable.
 *
 * It does not move pages: the callback (the cache's cache_set_target)
 * does, on this thread.
 *
 * Lock ordering: w->lock (the controller, its bounds) is a leaf; the
 * callbacks run without it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "wbcfs/lib/clock.h"
#include "wbcfs/cache/page.h"
#include "wbcfs/cache/pressure.h"
#include "wbcfs/lib/lockstat.h"

LOCK_CLASS(lc_memwatch_lock, "memwatch_lock")

#define NO_LIMIT (1ull << 60)		/* v1 says "no limit" as 2^63 - page */
#define LIMIT_RESCAN_MS 5000		/* how often the limits up the tree are re-read */
#define TEXT_MAX 8192
#define MEMWATCH_NICE (-10)		/* the watcher thread's nice value */

/* Where the daemon's memory cgroup is, and which of its files to read. */
struct cg_info {
	bool found, v1;
	char path[PATH_MAX];		/* as /proc/self/cgroup says */
	char leaf[PATH_MAX];		/* its directory */
	char lim_dir[PATH_MAX];		/* the directory with the tightest limit */
	char mnt[PATH_MAX];		/* the hierarchy's mount point */
	char psi_dir[PATH_MAX];		/* v2 directory with memory.pressure; "" none */
	uint64_t limit;			/* bytes; 0: none */
	uint64_t lim_own;		/* lim_dir's own limit file(s) at the scan */
};

enum { FD_STOP, FD_TIMER, FD_PSI_SYS, FD_PSI_CG, FD_MEDIUM, FD_CRITICAL, FD_THRESHOLD,
       FD_EVENTS, FD_NR };

struct memwatch {
	struct memwatch_config cfg;
	pthread_mutex_t lock;		/* protects: ctl */
	struct memctl ctl;		/* lock */
	pthread_t thread;
	atomic_bool stopping;
	struct pollfd pfd[FD_NR];	/* watcher thread; fd -1 unused */
	int usage_fd, stat_fd, meminfo_fd, psi_read_fd, limit_fd, high_fd;	/* -1 unused */
	int failcnt_fd;			/* v1 memory.failcnt; -1 unused */
	int evctl_fd;			/* v1 cgroup.event_control */
	uint64_t armed_bytes;		/* threshold eventfd's value; 0: none */
	uint64_t events_seen[3];	/* v2 memory.events high, max, oom */
	uint64_t min_free_bytes;
	uint64_t last_scan_ms;
	unsigned period_ms;		/* the timer's current period */
	unsigned psi_window_us;		/* the window the kernel took */
	size_t applied_pages;		/* watcher thread: the target last handed over */
	struct cg_info cg;
	struct mem_stats stats;
};

/* ---- reading the kernel's files ----------------------------------------------- */

/* Tests only: /proc read from under this directory (mem_set_proc_root). */
static char proc_root[PATH_MAX];

void mem_set_proc_root(const char *root)
{
	snprintf(proc_root, sizeof(proc_root), "%s", root ? root : "");
}

/* A /proc path, under the tests' root when one is set. */
static const char *proc_path(const char *p, char *buf, size_t len)
{
	if (!proc_root[0])
		return p;
	snprintf(buf, len, "%s%s", proc_root, p);
	return buf;
}

static ssize_t pread_text(int fd, char *buf, size_t len)
{
	ssize_t n;

	if (fd < 0)
		return -EBADF;
	n = pread(fd, buf, len - 1, 0);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return n;
}

static ssize_t read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = pread_text(fd, buf, len);
	close(fd);
	return n;
}

static int open_in(const char *dir, const char *name, int flags)
{
	char p[PATH_MAX + 64];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return open(p, flags | O_CLOEXEC);
}

static ssize_t read_text_in(const char *dir, const char *name, char *buf, size_t len)
{
	char p[PATH_MAX + 64];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return read_text(p, buf, len);
}

/* A file of one number ("max": none); 0 when absent or unlimited. */
static uint64_t read_limit_fd(int fd)
{
	char buf[64];
	uint64_t v;

	if (pread_text(fd, buf, sizeof(buf)) <= 0 || !strncmp(buf, "max", 3))
		return 0;
	v = strtoull(buf, NULL, 10);
	return v >= NO_LIMIT ? 0 : v;
}

static uint64_t read_limit(const char *dir, const char *name)
{
	int fd = open_in(dir, name, O_RDONLY);
	uint64_t v = read_limit_fd(fd);

	if (fd >= 0)
		close(fd);
	return v;
}

static uint64_t min_nonzero(uint64_t a, uint64_t b)
{
	return !a ? b : !b ? a : a < b ? a : b;
}

/* ---- finding the cgroup --------------------------------------------------------- */

/*
 * The mount of the hierarchy: cgroup (v1) with "memory" among its super
 * options, or cgroup2. Fills mnt and the mount's root within it.
 */
static int cg_find_mount(bool v1, char *mnt, char *root, size_t len)
{
	char line[4096], m[PATH_MAX], r[PATH_MAX], fstype[64], sopts[1024];
	char pb[PATH_MAX + 64];
	FILE *f = fopen(proc_path("/proc/self/mountinfo", pb, sizeof(pb)), "re");
	int ret = -ENOENT;

	while (f && fgets(line, sizeof(line), f)) {
		char *dash = strstr(line, " - ");

		if (!dash || sscanf(line, "%*s %*s %*s %4095s %4095s", r, m) != 2 ||
		    sscanf(dash + 3, "%63s %*s %1023s", fstype, sopts) != 2)
			continue;
		if (v1 ? strcmp(fstype, "cgroup") || !strstr(sopts, "memory")
		       : strcmp(fstype, "cgroup2"))
			continue;
		snprintf(mnt, len, "%s", m);
		snprintf(root, len, "%s", r);
		ret = 0;
		break;
	}
	if (f)
		fclose(f);
	return ret;
}

/* The directory of cgroup @path in the hierarchy mounted at @mnt from @root. */
static void cg_dir(const char *mnt, const char *root, const char *path, char *out, size_t len)
{
	size_t rl = strlen(root);

	if (strcmp(root, "/") && !strncmp(path, root, rl))
		path += rl;
	snprintf(out, len, "%s%s", mnt, strcmp(path, "/") ? path : "");
}

/*
 * The tightest limit from the leaf up to the mount: v1 memory.limit_in_bytes
 * (and memory.stat's hierarchical_memory_limit, which sees ancestors above
 * a container's mount); v2 the smaller of memory.max and memory.high (the
 * kernel throttles and reclaims hard at high).
 */
static uint64_t cg_own_limit(const struct cg_info *cg, const char *dir)
{
	return cg->v1 ? read_limit(dir, "memory.limit_in_bytes")
		      : min_nonzero(read_limit(dir, "memory.max"), read_limit(dir, "memory.high"));
}

static void cg_scan_limits(struct cg_info *cg, uint64_t mem_total)
{
	char dir[PATH_MAX], text[TEXT_MAX];
	size_t ml = strlen(cg->mnt);
	uint64_t best = 0, v;

	snprintf(dir, sizeof(dir), "%s", cg->leaf);
	snprintf(cg->lim_dir, sizeof(cg->lim_dir), "%s", cg->leaf);
	cg->lim_own = 0;
	for (;;) {
		v = cg_own_limit(cg, dir);
		if (v && (!best || v < best)) {
			best = v;
			cg->lim_own = v;
			snprintf(cg->lim_dir, sizeof(cg->lim_dir), "%s", dir);
		}
		if (strlen(dir) <= ml)
			break;
		*strrchr(dir, '/') = 0;
	}
	if (cg->v1 && read_text_in(cg->leaf, "memory.stat", text, sizeof(text)) > 0) {
		v = mem_kv_field(text, "hierarchical_memory_limit");
		if (v && v < NO_LIMIT && (!best || v < best))
			best = v;	/* above the mount: usage read from the leaf */
	}
	/* a limit above RAM never binds: MemAvailable does */
	cg->limit = best && mem_total && best >= mem_total ? 0 : best;
}

static uint64_t mem_total_bytes(void)
{
	char text[TEXT_MAX];

	char pb[PATH_MAX + 64];

	return read_text(proc_path("/proc/meminfo", pb, sizeof(pb)), text, sizeof(text)) > 0
	       ? mem_meminfo_field(text, "MemTotal") : 0;
}

/*
 * The daemon's memory cgroup: the v1 memory controller's, else the v2
 * hierarchy's when it has the memory controller. The v2 path is also where
 * the cgroup's memory.pressure is (PSI is per cgroup without the
 * controller, so a hybrid machine has it too).
 */
static void cg_find(struct cg_info *cg, uint64_t mem_total)
{
	char text[TEXT_MAX], root[PATH_MAX], mnt[PATH_MAX], v2path[PATH_MAX] = "";
	const char *p;

	memset(cg, 0, sizeof(*cg));
	char pb[PATH_MAX + 64];

	if (read_text(proc_path("/proc/self/cgroup", pb, sizeof(pb)), text, sizeof(text)) <= 0 ||
	    mem_cgroup_path(text, cg->path, sizeof(cg->path), &cg->v1))
		return;
	p = strstr(text, "0::");
	if (p && (p == text || p[-1] == '\n'))
		sscanf(p + 3, "%4095s", v2path);
	if (v2path[0] && strcmp(v2path, "/") && !cg_find_mount(false, mnt, root, sizeof(mnt))) {
		cg_dir(mnt, root, v2path, cg->psi_dir, sizeof(cg->psi_dir));
		if (access(cg->psi_dir, F_OK))
			cg->psi_dir[0] = 0;
	}
	if (cg_find_mount(cg->v1, cg->mnt, root, sizeof(cg->mnt)))
		return;
	cg_dir(cg->mnt, root, cg->path, cg->leaf, sizeof(cg->leaf));
	if (!cg->v1) {
		/* v2 without the memory controller: no limits to read */
		if (read_text_in(cg->mnt, "cgroup.controllers", text, sizeof(text)) <= 0 ||
		    !strstr(text, "memory"))
			return;
	}
	if (access(cg->leaf, F_OK))
		return;
	cg->found = true;
	cg_scan_limits(cg, mem_total);
}

uint64_t mem_default_cache_size(void)
{
	char text[TEXT_MAX], pb[PATH_MAX + 64];
	struct cg_info *cg = malloc(sizeof(*cg));
	uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t avail = 0, limit = 0;

	if (read_text(proc_path("/proc/meminfo", pb, sizeof(pb)), text, sizeof(text)) > 0) {
		avail = mem_meminfo_field(text, "MemAvailable");
		if (proc_root[0])
			ram = mem_meminfo_field(text, "MemTotal");
	}
	if (cg) {
		cg_find(cg, ram);
		limit = cg->found ? cg->limit : 0;
		free(cg);
	}
	return mem_default_cache_bytes(ram, limit, avail);
}

/* ---- the signals' file descriptors ---------------------------------------------- */

static unsigned v2_events_read(struct memwatch *w);

/*
 * "some STALL WINDOW" on a PSI file: POLLPRI when the stall is exceeded.
 * Without CAP_SYS_RESOURCE the kernel takes only windows of whole 2 s
 * (6.x: unprivileged triggers poll at a slower, 2 s granularity): then the
 * window is rounded up and the stall scaled with it, the same share.
 */
static int psi_trigger_write(int fd, unsigned stall_us, unsigned window_us)
{
	char trig[64];
	int n = snprintf(trig, sizeof(trig), "some %u %u", stall_us, window_us);

	return write(fd, trig, (size_t)n + 1) < 0 ? -errno : 0;
}

static int psi_trigger_open(const char *path, const struct memwatch_config *cfg,
			    unsigned *window_us)
{
	unsigned win = cfg->psi_window_us, up = (win + 1999999) / 2000000 * 2000000;
	int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return -1;
	*window_us = win;
	if (!psi_trigger_write(fd, cfg->psi_stall_us, win))
		return fd;
	if (up != win && !psi_trigger_write(fd, (unsigned)((uint64_t)cfg->psi_stall_us * up / win),
					    up)) {
		*window_us = up;
		return fd;
	}
	close(fd);
	return -1;
}

/* v1: an eventfd registered on @file of @dir with @arg ("medium", bytes). */
static int v1_event_open(struct memwatch *w, const char *dir, const char *file, const char *arg)
{
	char line[128];
	int efd, ffd, n;

	if (w->evctl_fd < 0)
		return -1;
	efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ffd = open_in(dir, file, O_RDONLY);
	if (efd < 0 || ffd < 0)
		goto out_close;
	n = snprintf(line, sizeof(line), "%d %d %s", efd, ffd, arg);
	if (write(w->evctl_fd, line, (size_t)n) < 0)
		goto out_close;
	/* the registration holds its own reference to the file */
	close(ffd);
	return efd;
out_close:
	if (efd >= 0)
		close(efd);
	if (ffd >= 0)
		close(ffd);
	return -1;
}

static void fd_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/*
 * v1: the usage threshold at limit - headroom, re-armed when the limit
 * moved (closing the eventfd unregisters the old one).
 */
static void threshold_arm(struct memwatch *w)
{
	uint64_t want = 0;
	char arg[32];

	if (w->cg.v1 && w->cg.limit)
		want = w->cg.limit - memctl_headroom_bytes(&w->ctl.cfg, w->cg.limit);
	if (want == w->armed_bytes)
		return;
	fd_close(&w->pfd[FD_THRESHOLD].fd);
	w->armed_bytes = 0;
	if (!want)
		return;
	snprintf(arg, sizeof(arg), "%llu", (unsigned long long)want);
	w->pfd[FD_THRESHOLD].fd = v1_event_open(w, w->cg.lim_dir, "memory.usage_in_bytes", arg);
	if (w->pfd[FD_THRESHOLD].fd >= 0)
		w->armed_bytes = want;
}

/* The files of the cgroup with the tightest limit (cg.lim_dir). */
static void lim_files_close(struct memwatch *w)
{
	fd_close(&w->usage_fd);
	fd_close(&w->stat_fd);
	fd_close(&w->limit_fd);
	fd_close(&w->high_fd);
	fd_close(&w->failcnt_fd);
	fd_close(&w->evctl_fd);
	fd_close(&w->pfd[FD_EVENTS].fd);
	fd_close(&w->pfd[FD_THRESHOLD].fd);
	w->armed_bytes = 0;
}

static void lim_files_open(struct memwatch *w)
{
	const char *dir = w->cg.lim_dir;

	if (w->cg.v1) {
		w->usage_fd = open_in(dir, "memory.usage_in_bytes", O_RDONLY);
		w->limit_fd = open_in(dir, "memory.limit_in_bytes", O_RDONLY);
		w->failcnt_fd = open_in(dir, "memory.failcnt", O_RDONLY);
		/* the threshold registers in the limit's own cgroup */
		w->evctl_fd = open_in(dir, "cgroup.event_control", O_WRONLY);
	} else {
		w->usage_fd = open_in(dir, "memory.current", O_RDONLY);
		w->limit_fd = open_in(dir, "memory.max", O_RDONLY);
		w->high_fd = open_in(dir, "memory.high", O_RDONLY);
		w->pfd[FD_EVENTS].fd = open_in(dir, "memory.events", O_RDONLY);
		/* the counts so far are no news */
		if (w->pfd[FD_EVENTS].fd >= 0)
			v2_events_read(w);
	}
	w->stat_fd = open_in(dir, "memory.stat", O_RDONLY);
}

/*
 * v1 pressure_level in the daemon's own cgroup: reclaim anywhere above it
 * (a parent's limit, the machine's) scans it and reports there.
 */
static void v1_levels_open(struct memwatch *w)
{
	int keep = w->evctl_fd;

	w->evctl_fd = open_in(w->cg.leaf, "cgroup.event_control", O_WRONLY);
	w->pfd[FD_MEDIUM].fd = v1_event_open(w, w->cg.leaf, "memory.pressure_level", "medium");
	w->pfd[FD_CRITICAL].fd = v1_event_open(w, w->cg.leaf, "memory.pressure_level", "critical");
	fd_close(&w->evctl_fd);
	w->evctl_fd = keep;
}

static void files_open(struct memwatch *w)
{
	struct cg_info *cg = &w->cg;
	char text[64], pb[PATH_MAX + 64];
	int i;

	for (i = 0; i < FD_NR; i++) {
		w->pfd[i].fd = -1;
		w->pfd[i].events = POLLPRI;
	}
	w->pfd[FD_STOP].events = POLLIN;
	w->pfd[FD_TIMER].events = POLLIN;
	w->pfd[FD_MEDIUM].events = POLLIN;
	w->pfd[FD_CRITICAL].events = POLLIN;
	w->pfd[FD_THRESHOLD].events = POLLIN;
	w->usage_fd = w->stat_fd = w->psi_read_fd = w->limit_fd = w->high_fd = -1;
	w->failcnt_fd = -1;
	w->evctl_fd = -1;
	w->meminfo_fd = open(proc_path("/proc/meminfo", pb, sizeof(pb)), O_RDONLY | O_CLOEXEC);
	if (read_text(proc_path("/proc/sys/vm/min_free_kbytes", pb, sizeof(pb)), text,
		      sizeof(text)) > 0)
		w->min_free_bytes = strtoull(text, NULL, 10) * 1024;
	w->pfd[FD_PSI_SYS].fd = psi_trigger_open(proc_path("/proc/pressure/memory", pb,
							   sizeof(pb)), &w->cfg,
						  &w->psi_window_us);
	if (cg->psi_dir[0]) {
		char p[PATH_MAX + 32];

		snprintf(p, sizeof(p), "%s/memory.pressure", cg->psi_dir);
		w->pfd[FD_PSI_CG].fd = psi_trigger_open(p, &w->cfg, &w->psi_window_us);
		w->psi_read_fd = open(p, O_RDONLY | O_CLOEXEC);
	}
	if (w->psi_read_fd < 0)
		w->psi_read_fd = open(proc_path("/proc/pressure/memory", pb, sizeof(pb)),
				      O_RDONLY | O_CLOEXEC);
	if (!cg->found)
		return;
	if (cg->v1)
		v1_levels_open(w);
	lim_files_open(w);
}

static void files_close(struct memwatch *w)
{
	int i;

	lim_files_close(w);
	for (i = 0; i < FD_NR; i++)
		fd_close(&w->pfd[i].fd);
	fd_close(&w->meminfo_fd);
	fd_close(&w->psi_read_fd);
}

/* ---- one step ------------------------------------------------------------------------ */

/* v2 memory.events: which of high, max, oom counted up since last read. */
static unsigned v2_events_read(struct memwatch *w)
{
	static const char *const keys[3] = { "high", "max", "oom" };
	char text[512];
	unsigned ev = 0, i;
	uint64_t v;

	if (pread_text(w->pfd[FD_EVENTS].fd, text, sizeof(text)) <= 0)
		return 0;
	for (i = 0; i < 3; i++) {
		v = mem_kv_field(text, keys[i]);
		if (v > w->events_seen[i])
			ev |= i ? MEM_EV_CRITICAL : MEM_EV_MEDIUM;
		w->events_seen[i] = v;
	}
	return ev;
}

/* What woke the thread, as mem_event bits; counts them. */
static unsigned wakeups_read(struct memwatch *w)
{
	static const unsigned efd_ev[FD_NR] = {
		[FD_MEDIUM] = MEM_EV_MEDIUM, [FD_CRITICAL] = MEM_EV_CRITICAL,
		[FD_THRESHOLD] = MEM_EV_THRESHOLD,
	};
	unsigned ev = 0, n = 0;
	uint64_t cnt;
	int i;

	if (w->pfd[FD_TIMER].revents & POLLIN)
		(void)!read(w->pfd[FD_TIMER].fd, &cnt, sizeof(cnt));
	for (i = FD_PSI_SYS; i <= FD_PSI_CG; i++) {
		if (w->pfd[i].revents & POLLPRI) {
			ev |= i == FD_PSI_SYS ? MEM_EV_PSI_SYS : MEM_EV_PSI;
			n++;
		} else if (w->pfd[i].revents & (POLLERR | POLLNVAL)) {
			fd_close(&w->pfd[i].fd);	/* the cgroup went away */
		}
	}
	for (i = FD_MEDIUM; i <= FD_THRESHOLD; i++) {
		if ((w->pfd[i].revents & POLLIN) && read(w->pfd[i].fd, &cnt, sizeof(cnt)) > 0) {
			ev |= efd_ev[i];
			n++;
		}
	}
	if (w->pfd[FD_EVENTS].revents & (POLLPRI | POLLERR)) {
		unsigned e = v2_events_read(w);

		ev |= e;
		n += !!e;
	}
	if (n)
		atomic_fetch_add(&w->stats.pressure_events, n);
	return ev;
}

/* The tightest limit's own file changed since the scan (read each step). */
static bool limit_moved(struct memwatch *w)
{
	uint64_t v = read_limit_fd(w->limit_fd);

	if (w->high_fd >= 0)
		v = min_nonzero(v, read_limit_fd(w->high_fd));
	return v != w->cg.lim_own;
}

/*
 * The limits up the tree again: another cgroup may now be the tightest
 * (its files are opened instead), and the threshold follows the limit
 * (threshold_arm at the end of the step).
 */
static void limits_rescan(struct memwatch *w, uint64_t now_ms, uint64_t mem_total)
{
	char before[PATH_MAX];

	snprintf(before, sizeof(before), "%s", w->cg.lim_dir);
	cg_scan_limits(&w->cg, mem_total);
	w->last_scan_ms = now_ms;
	if (strcmp(before, w->cg.lim_dir)) {
		lim_files_close(w);
		lim_files_open(w);
	}
}

/* Usage less inactive file pages (see pressure.c), and the limit's changes. */
static void cg_sample(struct memwatch *w, struct mem_signals *s)
{
	char text[TEXT_MAX];
	uint64_t usage, inactive;

	if (!w->cg.found)
		return;
	if (s->now_ms - w->last_scan_ms >= LIMIT_RESCAN_MS || limit_moved(w))
		limits_rescan(w, s->now_ms, s->mem_total_bytes);
	if (pread_text(w->usage_fd, text, sizeof(text)) <= 0)
		return;
	usage = strtoull(text, NULL, 10);
	if (pread_text(w->stat_fd, text, sizeof(text)) > 0) {
		inactive = mem_kv_field(text, w->cg.v1 ? "total_inactive_file" : "inactive_file");
		usage = inactive < usage ? usage - inactive : 0;
	}
	s->cg_limit_bytes = w->cg.limit;
	s->cg_usage_bytes = usage;
	if (w->cg.v1 && pread_text(w->failcnt_fd, text, sizeof(text)) > 0)
		s->cg_limit_hits = strtoull(text, NULL, 10);
	else if (!w->cg.v1)
		s->cg_limit_hits = w->events_seen[1];
}

static void signals_sample(struct memwatch *w, struct mem_signals *s, unsigned events)
{
	char text[TEXT_MAX];

	memset(s, 0, sizeof(*s));
	s->now_ms = clock_now_ms();
	s->events = events;
	s->min_free_bytes = w->min_free_bytes;
	if (pread_text(w->meminfo_fd, text, sizeof(text)) > 0) {
		s->mem_available_bytes = mem_meminfo_field(text, "MemAvailable");
		s->mem_total_bytes = mem_meminfo_field(text, "MemTotal");
	}
	cg_sample(w, s);
	if (pread_text(w->psi_read_fd, text, sizeof(text)) > 0)
		atomic_store(&w->stats.pressure_stall_us, mem_psi_some_total(text));
	atomic_store(&w->stats.cgroup_limit_bytes, s->cg_limit_bytes);
	atomic_store(&w->stats.cgroup_usage_bytes, s->cg_usage_bytes);
	atomic_store(&w->stats.available_bytes, s->mem_available_bytes);
}

/* Fast sampling under recent pressure, or within two headrooms of a bound. */
static unsigned period_choose(struct memwatch *w, const struct mem_signals *s)
{
	const struct memctl *m = &w->ctl;
	uint64_t h;

	if (m->last_pressure_ms && s->now_ms - m->last_pressure_ms < m->cfg.hold_ms)
		return w->cfg.fast_ms;
	if (s->cg_limit_bytes) {
		h = memctl_headroom_bytes(&m->cfg, s->cg_limit_bytes);
		if (s->cg_usage_bytes + 2 * h > s->cg_limit_bytes)
			return w->cfg.fast_ms;
	}
	if (s->mem_available_bytes && s->mem_total_bytes &&
	    s->mem_available_bytes < 2 * memctl_avail_floor_bytes(&m->cfg, s))
		return w->cfg.fast_ms;
	return w->cfg.slow_ms;
}

static void timer_set(struct memwatch *w, unsigned ms)
{
	struct itimerspec its = {
		.it_value = { ms / 1000, (long)(ms % 1000) * 1000000 },
		.it_interval = { ms / 1000, (long)(ms % 1000) * 1000000 },
	};

	if (ms == w->period_ms)
		return;
	w->period_ms = ms;
	timerfd_settime(w->pfd[FD_TIMER].fd, 0, &its, NULL);
}

static void memwatch_step(struct memwatch *w, unsigned events, uint64_t woken_ns)
{
	const struct memwatch_ops *ops = w->cfg.ops;
	struct mem_signals s;
	size_t resident = ops->resident_pages(w->cfg.arg);
	size_t dirty = ops->dirty_pages ? ops->dirty_pages(w->cfg.arg) : 0;
	size_t target, floor = 0, ceiling = 0;
	const char *reason;
	long pressure;

	signals_sample(w, &s, events);
	if (ops->bounds)
		ops->bounds(w->cfg.arg, &floor, &ceiling);
	ls_mutex_lock(&w->lock, &lc_memwatch_lock);
	if (ops->bounds && (floor != w->ctl.cfg.floor_pages || ceiling != w->ctl.cfg.ceiling_pages))
		memctl_set_bounds(&w->ctl, floor, ceiling);
	target = memctl_step(&w->ctl, &s, resident, dirty);
	reason = w->ctl.reason;
	pressure = w->ctl.pressure;
	threshold_arm(w);
	timer_set(w, period_choose(w, &s));
	ls_mutex_unlock(&w->lock);
	atomic_fetch_add(&w->stats.watch_steps, 1);
	/* memwatch_set_bounds() may have changed it between steps too */
	if (target != w->applied_pages) {
		w->applied_pages = target;
		atomic_fetch_add(&w->stats.target_changes, 1);
		ops->set_target(w->cfg.arg, target, reason, pressure);
	}
	if (ops->trace)
		ops->trace(w->cfg.arg, &s, target, woken_ns, clock_real_ns());
}

static void *memwatch_thread(void *arg)
{
	struct memwatch *w = arg;
	uint64_t cnt;
	int i;

	/*
	 * Wake ahead of the busy threads: a program allocating fast keeps the
	 * CPUs busy exactly when the answer is due (seen: the threshold's
	 * wakeup 50-70 ms late on a loaded 2-CPU machine). The thread sleeps
	 * in poll() and takes ~0.1 ms a step. Without CAP_SYS_NICE it stays
	 * at the daemon's priority.
	 */
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), MEMWATCH_NICE);

	while (!atomic_load(&w->stopping)) {
		for (i = 0; i < FD_NR; i++)
			w->pfd[i].revents = 0;
		if (poll(w->pfd, FD_NR, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (w->pfd[FD_STOP].revents & POLLIN)
			(void)!read(w->pfd[FD_STOP].fd, &cnt, sizeof(cnt));
		if (atomic_load(&w->stopping))
			break;
		memwatch_step(w, wakeups_read(w), clock_real_ns());
	}
	return NULL;
}

/* ---- start, stop, bounds --------------------------------------------------------------- */

void memwatch_config_default(struct memwatch_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	memctl_config_default(&cfg->ctl, PAGE_SIZE, 0, 0);
	cfg->psi_stall_us = 100000;
	cfg->psi_window_us = 1000000;
	cfg->fast_ms = 100;
	cfg->slow_ms = 1000;
}

void memwatch_describe(const struct memwatch *w, char *buf, size_t len)
{
	int n = 0;

	buf[0] = 0;
#define ADD(...) do { if (n >= 0 && (size_t)n < len) \
	n += snprintf(buf + n, len - (size_t)n, __VA_ARGS__); } while (0)
	if (w->cg.found) {
		ADD("cgroup %s %s", w->cg.v1 ? "v1" : "v2", w->cg.path);
		if (w->cg.limit)
			ADD(" limit %.1fG", (double)w->cg.limit / (1 << 30));
		else
			ADD(" (no limit)");
		if (w->pfd[FD_THRESHOLD].fd >= 0)
			ADD(", usage threshold");
		if (w->pfd[FD_MEDIUM].fd >= 0 || w->pfd[FD_CRITICAL].fd >= 0)
			ADD(", pressure_level");
		if (w->pfd[FD_EVENTS].fd >= 0)
			ADD(", memory.events");
		ADD(", ");
	}
	if (w->pfd[FD_PSI_SYS].fd >= 0)
		ADD("PSI (%u ms window), ", w->psi_window_us / 1000);
	if (w->pfd[FD_PSI_CG].fd >= 0)
		ADD("cgroup PSI %s, ", w->cg.psi_dir);
	ADD(w->meminfo_fd >= 0 ? "MemAvailable" : "timer only");
#undef ADD
}

int memwatch_start(struct memwatch **out, const struct memwatch_config *cfg)
{
	struct memwatch *w = calloc(1, sizeof(*w));
	char desc[PATH_MAX + 256];
	int ret;

	if (!w)
		return -ENOMEM;
	w->cfg = *cfg;
	pthread_mutex_init(&w->lock, NULL);
	memctl_init(&w->ctl, &cfg->ctl);
	w->applied_pages = w->ctl.target_pages;
	cg_find(&w->cg, mem_total_bytes());
	w->last_scan_ms = clock_now_ms();
	files_open(w);
	w->pfd[FD_STOP].fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	w->pfd[FD_TIMER].fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (w->pfd[FD_STOP].fd < 0 || w->pfd[FD_TIMER].fd < 0) {
		ret = -errno;
		goto out_free;
	}
	threshold_arm(w);
	timer_set(w, cfg->slow_ms);
	if (cfg->msg) {
		memwatch_describe(w, desc, sizeof(desc));
		fprintf(cfg->msg, "wbcfs: memory: %s%s%s\n", cfg->name ? cfg->name : "",
			cfg->name ? ": " : "", desc);
	}
	ret = -pthread_create(&w->thread, NULL, memwatch_thread, w);
	if (ret)
		goto out_free;
	*out = w;
	return 0;
out_free:
	files_close(w);
	pthread_mutex_destroy(&w->lock);
	free(w);
	return ret;
}

static void memwatch_kick(struct memwatch *w)
{
	uint64_t one = 1;

	(void)!write(w->pfd[FD_STOP].fd, &one, sizeof(one));
}

void memwatch_stop(struct memwatch *w)
{
	if (!w)
		return;
	atomic_store(&w->stopping, true);
	memwatch_kick(w);
	pthread_join(w->thread, NULL);
	files_close(w);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

void memwatch_set_bounds(struct memwatch *w, size_t floor_pages, size_t ceiling_pages)
{
	ls_mutex_lock(&w->lock, &lc_memwatch_lock);
	memctl_set_bounds(&w->ctl, floor_pages, ceiling_pages);
	ls_mutex_unlock(&w->lock);
	memwatch_kick(w);
}

void memwatch_stats(const struct memwatch *w, struct mem_stats_snap *out)
{
	struct mem_stats *st;

	if (!w) {
		memset(out, 0, sizeof(*out));
		return;
	}
	st = (struct mem_stats *)&w->stats;
	out->pressure_events = atomic_load(&st->pressure_events);
	out->pressure_stall_us = atomic_load(&st->pressure_stall_us);
	out->cgroup_limit_bytes = atomic_load(&st->cgroup_limit_bytes);
	out->cgroup_usage_bytes = atomic_load(&st->cgroup_usage_bytes);
	out->available_bytes = atomic_load(&st->available_bytes);
	out->watch_steps = atomic_load(&st->watch_steps);
	out->target_changes = atomic_load(&st->target_changes);
}
