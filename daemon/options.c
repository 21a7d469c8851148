// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Mount option parsing: wbcfs's own options (named after /proc/sys/vm and
 * the kernel's knobs) into struct wbcfs_options, FUSE mount options passed
 * through to libfuse, fstab-only words dropped. Every refusal names the
 * option and the reason.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wbcfs/ext4/options.h"
#include "wbcfs/flusher/pdflush.h"
#include "wbcfs/cache/page.h"
#include "wbcfs/cache/throttle.h"

/* Words that only mean something to mount(8)/fstab. */
static const char *const fstab_words[] = {
	"defaults", "auto", "noauto", "nofail", "_netdev", "user", "users", "nouser",
	"owner", "group", "relatime", "norelatime",
	"lazytime", "nolazytime", "iversion", "noiversion",
	"loud", "silent", "rw", NULL,
};

/* FUSE mount options libfuse 3.14 accepts, passed through as given. */
static const char *const fuse_words[] = {
	"allow_root", "auto_unmount", "nosuid", "suid", "nodev", "dev", "noexec", "exec",
	"default_permissions", NULL,
};
static const char *const fuse_keys[] = { "fsname", "subtype", "max_read", NULL };

void options_default(struct wbcfs_options *o)
{
	memset(o, 0, sizeof(*o));
	dirty_tunables_default(&o->dirty);
	o->flushers = 1;
	o->io_engine = IO_ENGINE_URING;
	o->queue_depth = 64;
	o->pdflush_min = PDFLUSH_MIN_THREADS;
	o->pdflush_max = PDFLUSH_MAX_THREADS;
	o->nbd_retry_s = 5;
	o->nbd_timeout_s = 30;
	o->max_io_kb = 1024;
	o->readahead_kb = 128;
	o->max_threads = 16;
	o->poll_us = 50;
	o->prefault_bytes = 0;
	o->oom_score_adj = OPTIONS_OOM_SCORE_ADJ;
	o->mem_watch = true;
	o->throttle = THROTTLE_IOLESS;
	o->max_ratio = 100;
	o->max_pause_ms = THROTTLE_MAX_PAUSE_MS_DEFAULT;
	o->fair_zone_alloc = true;
	o->zone_dirty = true;
	o->auto_da_alloc = true;
	strcpy(o->ctl_name, OPTIONS_CTL_NAME_DEFAULT);
}

int options_parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: break;
	}
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_uint(const char *s, uint64_t *out)
{
	char *end;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return (errno || *end) ? -EINVAL : 0;
}

static bool in_list(const char *const *list, const char *key)
{
	for (; *list; list++)
		if (!strcmp(*list, key))
			return true;
	return false;
}

static int fuse_opt_append(struct wbcfs_options *o, const char *opt, char *err, size_t errlen)
{
	size_t used = strlen(o->fuse_opts), n = strlen(opt);

	if (used + n + 2 > sizeof(o->fuse_opts)) {
		snprintf(err, errlen, "%s: too many mount options", opt);
		return -EINVAL;
	}
	if (used)
		o->fuse_opts[used++] = ',';
	memcpy(o->fuse_opts + used, opt, n + 1);
	return 0;
}

struct num_opt {
	const char *name;
	unsigned *field;
	uint64_t min, max, multiple;
};

static int set_number(const char *key, const char *val, uint64_t min, uint64_t max,
		      uint64_t multiple, bool size, uint64_t *out, char *err, size_t errlen)
{
	uint64_t v;

	if (!val) {
		snprintf(err, errlen, "%s: needs a value", key);
		return -EINVAL;
	}
	if ((size ? options_parse_size(val, &v) : parse_uint(val, &v))) {
		snprintf(err, errlen, "%s: '%s' is not a %s", key, val, size ? "size" : "number");
		return -EINVAL;
	}
	if (v < min || v > max) {
		snprintf(err, errlen, "%s: value %s out of range %" PRIu64 "-%" PRIu64, key, val,
			 min, max);
		return -EINVAL;
	}
	if (multiple > 1 && v % multiple) {
		snprintf(err, errlen, "%s: value %s is not a multiple of %" PRIu64, key, val, multiple);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int set_dirty(struct wbcfs_options *o, enum dirty_tunable t, const char *key,
		     const char *val, bool size, uint64_t max, char *err, size_t errlen)
{
	uint64_t v;
	int ret = set_number(key, val, 0, max, 1, size, &v, err, errlen);

	if (ret)
		return ret;
	if (dirty_tunable_set(&o->dirty, t, v)) {
		snprintf(err, errlen, "%s: value %s is not allowed%s", key, val,
			 t == DT_DIRTY_BYTES ? " (0 or at least 8192)" : "");
		return -EINVAL;
	}
	return 0;
}

static const struct {
	const char *name;
	enum dirty_tunable t;
	bool size;
	uint64_t max;
} dirty_opts[] = {
	{ "dirty_ratio", DT_DIRTY_RATIO, false, 100 },
	{ "dirty_background_ratio", DT_DIRTY_BACKGROUND_RATIO, false, 100 },
	{ "dirty_bytes", DT_DIRTY_BYTES, true, UINT64_MAX },
	{ "dirty_background_bytes", DT_DIRTY_BACKGROUND_BYTES, true, UINT64_MAX },
	{ "dirty_expire_centisecs", DT_DIRTY_EXPIRE_CENTISECS, false, 864000000 },
	{ "dirty_writeback_centisecs", DT_DIRTY_WRITEBACK_CENTISECS, false, 864000000 },
};

static int parse_unsigned_opt(struct wbcfs_options *o, const char *key, const char *val,
			      char *err, size_t errlen, bool *matched)
{
	static const struct { const char *name; size_t off; uint64_t min, max, mult; } u[] = {
		{ "flushers", offsetof(struct wbcfs_options, flushers), 1, 16, 1 },
		{ "queue_depth", offsetof(struct wbcfs_options, queue_depth), 1, 4096, 1 },
		{ "max_io_kb", offsetof(struct wbcfs_options, max_io_kb), 4, 4096, 4 },
		{ "readahead_kb", offsetof(struct wbcfs_options, readahead_kb), 0, 65536, 4 },
		{ "max_threads", offsetof(struct wbcfs_options, max_threads), 1, 256, 1 },
		{ "poll_us", offsetof(struct wbcfs_options, poll_us), 0, 1000, 1 },
		{ "min_ratio", offsetof(struct wbcfs_options, min_ratio), 0, 100, 1 },
		{ "max_ratio", offsetof(struct wbcfs_options, max_ratio), 0, 100, 1 },
		{ "max_pause_ms", offsetof(struct wbcfs_options, max_pause_ms), 1,
		  THROTTLE_MAX_PAUSE_MS_MAX, 1 },
		{ "commit", offsetof(struct wbcfs_options, commit_s), 0, 3600, 1 },
		{ "nbd_retry", offsetof(struct wbcfs_options, nbd_retry_s), 0, 3600, 1 },
		{ "nbd_timeout", offsetof(struct wbcfs_options, nbd_timeout_s), 0, 3600, 1 },
	};
	uint64_t v;
	size_t i;
	int ret;

	for (i = 0; i < sizeof(u) / sizeof(u[0]); i++) {
		if (strcmp(key, u[i].name))
			continue;
		*matched = true;
		ret = set_number(key, val, u[i].min, u[i].max, u[i].mult, false, &v, err, errlen);
		if (!ret)
			*(unsigned *)((char *)o + u[i].off) = (unsigned)v;
		return ret;
	}
	*matched = false;
	return 0;
}

static int parse_flag(struct wbcfs_options *o, const char *key, const char *val,
		      char *err, size_t errlen, bool *matched)
{
	bool *f = NULL;

	*matched = true;
	if (!strcmp(key, "ro"))
		f = &o->ro;
	else if (!strcmp(key, "fsck"))
		f = &o->fsck;
	else if (!strcmp(key, "norecovery") || !strcmp(key, "noload"))
		f = &o->norecovery;
	else if (!strcmp(key, "allow_other"))
		f = &o->allow_other;
	else if (!strcmp(key, "fault_inject"))
		f = &o->fault_inject;
	else if (!strcmp(key, "lockstat"))
		f = &o->lockstat;
	else {
		*matched = false;
		return 0;
	}
	if (val) {
		snprintf(err, errlen, "%s: takes no value", key);
		return -EINVAL;
	}
	*f = true;
	return 0;
}

/*
 * The atime words, as mount(8) and the kernel read them: each clears its
 * opposite, strictatime wins over noatime, relatime is the default (so
 * relatime and norelatime change nothing). noatime also goes to the
 * kernel's mount, where /proc/mounts shows it.
 */
static int parse_atime(struct wbcfs_options *o, const char *key, const char *val,
		       char *err, size_t errlen, bool *matched)
{
	static const struct {
		const char *name;
		size_t field;
		bool v;
	} words[] = {
		{ "noatime", offsetof(struct wbcfs_options, noatime), true },
		{ "atime", offsetof(struct wbcfs_options, noatime), false },
		{ "strictatime", offsetof(struct wbcfs_options, strictatime), true },
		{ "nostrictatime", offsetof(struct wbcfs_options, strictatime), false },
		{ "nodiratime", offsetof(struct wbcfs_options, nodiratime), true },
		{ "diratime", offsetof(struct wbcfs_options, nodiratime), false },
	};
	size_t i;

	for (i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (!strcmp(key, words[i].name))
			break;
	*matched = i < sizeof(words) / sizeof(words[0]);
	if (!*matched)
		return 0;
	if (val) {
		snprintf(err, errlen, "%s: takes no value", key);
		return -EINVAL;
	}
	*(bool *)((char *)o + words[i].field) = words[i].v;
	return !strcmp(key, "noatime") ? fuse_opt_append(o, key, err, errlen) : 0;
}

/*
 * sync, async and dirsync: the daemon's to honour (files are direct_io,
 * and FUSE commits nothing itself), and the kernel's mount flags too
 * (MS_SYNCHRONOUS, MS_DIRSYNC), so /proc/mounts shows them and the kernel
 * marks every WRITE of a sync mount O_DSYNC (IS_SYNC in fuse_write_flags).
 */
static int parse_sync(struct wbcfs_options *o, const char *key, const char *val,
		      char *err, size_t errlen, bool *matched)
{
	*matched = !strcmp(key, "sync") || !strcmp(key, "async") || !strcmp(key, "dirsync");
	if (!*matched)
		return 0;
	if (val) {
		snprintf(err, errlen, "%s: takes no value", key);
		return -EINVAL;
	}
	if (!strcmp(key, "dirsync"))
		o->dirsync = true;
	else
		o->sync = !strcmp(key, "sync");
	return fuse_opt_append(o, key, err, errlen);
}

/* ctl_name: one path component, not "." or "..", at most NAME_MAX bytes. */
static int set_ctl_name(struct wbcfs_options *o, const char *val, char *err, size_t errlen)
{
	if (!val || !*val) {
		snprintf(err, errlen, "ctl_name: needs a value");
		return -EINVAL;
	}
	if (strchr(val, '/') || !strcmp(val, ".") || !strcmp(val, "..")) {
		snprintf(err, errlen, "ctl_name: '%s' is not a file name", val);
		return -EINVAL;
	}
	if (strlen(val) > OPTIONS_NAME_MAX) {
		snprintf(err, errlen, "ctl_name: longer than %d bytes", OPTIONS_NAME_MAX);
		return -EINVAL;
	}
	strcpy(o->ctl_name, val);
	return 0;
}

/* domain=NAME: a file name under /run/wbcfs, so a safe, short word. */
static int set_domain(struct wbcfs_options *o, const char *val, char *err, size_t errlen)
{
	size_t i, n = val ? strlen(val) : 0;

	if (!n || n > OPTIONS_DOMAIN_MAX || val[0] == '.') {
		snprintf(err, errlen, "domain: needs a name of 1-%d characters, not starting "
			 "with '.'", OPTIONS_DOMAIN_MAX);
		return -EINVAL;
	}
	for (i = 0; i < n; i++) {
		if (!isalnum((unsigned char)val[i]) && !strchr("_.-", val[i])) {
			snprintf(err, errlen, "domain: '%s': only letters, digits, '_', '.' "
				 "and '-'", val);
			return -EINVAL;
		}
	}
	strcpy(o->domain, val);
	return 0;
}

/* write_log=FILE: any path; relative to the directory wbcfs was started in. */
static int set_write_log(struct wbcfs_options *o, const char *val, char *err, size_t errlen)
{
	if (!val || !*val) {
		snprintf(err, errlen, "write_log: needs a file name");
		return -EINVAL;
	}
	if (strlen(val) >= sizeof(o->write_log)) {
		snprintf(err, errlen, "write_log: longer than %zu bytes", sizeof(o->write_log) - 1);
		return -EINVAL;
	}
	strcpy(o->write_log, val);
	return 0;
}

/*
 * zones=N: N equal zones (1-64). zones=SIZE:SIZE:...: one zone per size,
 * lowest first, each at least 1 MiB and a multiple of 4 KiB; the sizes must
 * add up to cache_size (checked once all options are read).
 */
static int set_zones(struct wbcfs_options *o, const char *val, char *err, size_t errlen)
{
	char buf[1024], *save = NULL, *tok;
	unsigned n = 0;
	uint64_t v;

	memset(o->zone_bytes, 0, sizeof(o->zone_bytes));
	o->nr_zones = 0;
	if (!val || !*val) {
		snprintf(err, errlen, "zones: needs a count or SIZE:SIZE...");
		return -EINVAL;
	}
	if (!strchr(val, ':') && strspn(val, "0123456789") == strlen(val)) {
		int ret = set_number("zones", val, 1, OPTIONS_ZONES_MAX, 1, false, &v, err, errlen);

		if (!ret)
			o->nr_zones = (unsigned)v;
		return ret;
	}
	if (strlen(val) >= sizeof(buf)) {
		snprintf(err, errlen, "zones: value too long");
		return -EINVAL;
	}
	strcpy(buf, val);
	for (tok = strtok_r(buf, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
		if (n == OPTIONS_ZONES_MAX) {
			snprintf(err, errlen, "zones: more than %d zones", OPTIONS_ZONES_MAX);
			return -EINVAL;
		}
		if (options_parse_size(tok, &v) || v < OPTIONS_ZONE_MIN_BYTES || v % PAGE_SIZE) {
			snprintf(err, errlen, "zones: '%s' is not a size of at least 1M in 4k pages",
				 tok);
			return -EINVAL;
		}
		o->zone_bytes[n++] = v;
	}
	o->nr_zones = n;
	return 0;
}

/*
 * pdflush_threads=N or MIN-MAX: the pool's fewest and most threads
 * (2.6.2x: MIN_PDFLUSH_THREADS 2, MAX_PDFLUSH_THREADS 8).
 */
static int set_pdflush_threads(struct wbcfs_options *o, const char *val, char *err,
			       size_t errlen)
{
	char buf[32], *dash;
	uint64_t lo, hi;
	int ret;

	if (!val || !*val || strlen(val) >= sizeof(buf)) {
		snprintf(err, errlen, "pdflush_threads: needs N or MIN-MAX");
		return -EINVAL;
	}
	strcpy(buf, val);
	dash = strchr(buf, '-');
	if (dash)
		*dash = '\0';
	ret = set_number("pdflush_threads", buf, 1, OPTIONS_PDFLUSH_THREADS_MAX, 1, false, &lo,
			 err, errlen);
	hi = lo;
	if (!ret && dash)
		ret = set_number("pdflush_threads", dash + 1, 1, OPTIONS_PDFLUSH_THREADS_MAX, 1,
				 false, &hi, err, errlen);
	if (ret)
		return ret;
	if (lo > hi) {
		snprintf(err, errlen, "pdflush_threads: %s: the minimum is above the maximum", val);
		return -EINVAL;
	}
	o->pdflush_min = (unsigned)lo;
	o->pdflush_max = (unsigned)hi;
	o->pdflush_threads_given = true;
	return 0;
}

/* After all options: zone sizes and cache_size agree (or give it). */
static int check_zones(struct wbcfs_options *o, char *err, size_t errlen)
{
	uint64_t sum = 0;
	unsigned i;

	if (!o->nr_zones)
		return 0;
	if (!o->zone_bytes[0]) {
		if (o->cache_size && o->cache_size / o->nr_zones < OPTIONS_ZONE_MIN_BYTES) {
			snprintf(err, errlen, "zones: %u zones of cache_size %llu are below 1M each",
				 o->nr_zones, (unsigned long long)o->cache_size);
			return -EINVAL;
		}
		return 0;
	}
	for (i = 0; i < o->nr_zones; i++)
		sum += o->zone_bytes[i];
	if (!o->cache_size) {
		o->cache_size = sum;
		return 0;
	}
	if (sum != (o->cache_size & ~(uint64_t)(PAGE_SIZE - 1))) {
		snprintf(err, errlen, "zones: sizes add up to %llu bytes, cache_size is %llu",
			 (unsigned long long)sum, (unsigned long long)o->cache_size);
		return -EINVAL;
	}
	return 0;
}

/* @key=@val, @val one of @names[0..n): *@out its index. */
static int set_choice(const char *key, const char *val, const char *const names[], int n,
		      int *out, char *err, size_t errlen)
{
	int i;

	for (i = 0; val && i < n; i++) {
		if (!strcmp(val, names[i])) {
			*out = i;
			return 0;
		}
	}
	i = snprintf(err, errlen, "%s: '%s' is not one of %s", key, val ? val : "", names[0]);
	for (int k = 1; k < n && i > 0 && (size_t)i < errlen; k++)
		i += snprintf(err + i, errlen - (size_t)i, ", %s", names[k]);
	return -EINVAL;
}

static int set_bool(const char *key, const char *val, bool *out, char *err, size_t errlen)
{
	if (!val || !strcmp(val, "1"))
		*out = true;
	else if (!strcmp(val, "0"))
		*out = false;
	else {
		snprintf(err, errlen, "%s: '%s' is not 0 or 1", key, val);
		return -EINVAL;
	}
	return 0;
}

/* oom_score_adj=N: -1000..1000, as /proc/PID/oom_score_adj takes */
static int set_oom_score_adj(struct wbcfs_options *o, const char *val, char *err, size_t errlen)
{
	char *end;
	long v;

	if (!val || !*val) {
		snprintf(err, errlen, "oom_score_adj: needs a value");
		return -EINVAL;
	}
	errno = 0;
	v = strtol(val, &end, 10);
	if (errno || *end) {
		snprintf(err, errlen, "oom_score_adj: '%s' is not a number", val);
		return -EINVAL;
	}
	if (v < -1000 || v > 1000) {
		snprintf(err, errlen, "oom_score_adj: value %s out of range -1000-1000", val);
		return -EINVAL;
	}
	o->oom_score_adj = (int)v;
	o->oom_score_adj_given = true;
	return 0;
}

int options_parse_nodelist(const char *s, int *ids, unsigned max)
{
	unsigned n = 0;

	while (s && *s && *s != '\n') {
		char *end;
		long a = strtol(s, &end, 10), b;

		if (end == s || a < 0)
			return -EINVAL;
		b = a;
		if (*end == '-') {
			s = end + 1;
			b = strtol(s, &end, 10);
			if (end == s || b < a)
				return -EINVAL;
		}
		for (; a <= b; a++) {
			if (n == max)
				return -EINVAL;
			ids[n++] = (int)a;
		}
		s = end;
		if (*s == ',')
			s++;
		else if (*s && *s != '\n')
			return -EINVAL;
	}
	return n ? (int)n : -EINVAL;
}

static int parse_one(struct wbcfs_options *o, char *opt, char *err, size_t errlen)
{
	char *val = strchr(opt, '=');
	bool matched;
	size_t i;
	int ret, choice;

	if (val)
		*val++ = 0;
	for (i = 0; i < sizeof(dirty_opts) / sizeof(dirty_opts[0]); i++)
		if (!strcmp(opt, dirty_opts[i].name))
			return set_dirty(o, dirty_opts[i].t, opt, val, dirty_opts[i].size,
					 dirty_opts[i].max, err, errlen);
	if (!strcmp(opt, "cache_size"))
		return set_number(opt, val, 1 << 20, UINT64_MAX, 1, true, &o->cache_size, err, errlen);
	if (!strcmp(opt, "cache_min"))
		return set_number(opt, val, OPTIONS_CACHE_MIN_MIN, UINT64_MAX, 1, true, &o->cache_min,
				  err, errlen);
	if (!strcmp(opt, "prefault")) {
		if (val && !strcmp(val, "all")) {
			o->prefault_bytes = UINT64_MAX;
			return 0;
		}
		return set_number(opt, val, 0, UINT64_MAX, 1, true, &o->prefault_bytes, err, errlen);
	}
	if (!strcmp(opt, "oom_score_adj"))
		return set_oom_score_adj(o, val, err, errlen);
	if (!strcmp(opt, "mem_watch"))
		return set_bool(opt, val, &o->mem_watch, err, errlen);
	if (!strcmp(opt, "ctl_name"))
		return set_ctl_name(o, val, err, errlen);
	if (!strcmp(opt, "write_log"))
		return set_write_log(o, val, err, errlen);
	if (!strcmp(opt, "domain"))
		return set_domain(o, val, err, errlen);
	if (!strcmp(opt, "throttle")) {
		enum throttle_mode m;

		if (!val || throttle_mode_parse(val, strlen(val), &m)) {
			snprintf(err, errlen, "throttle: '%s' is not one of ioless, simple, writeback",
				 val ? val : "");
			return -EINVAL;
		}
		o->throttle = m;
		return 0;
	}
	if (!strcmp(opt, "strictlimit"))
		return set_bool(opt, val, &o->strictlimit, err, errlen);
	if (!strcmp(opt, "fair_zone_alloc"))
		return set_bool(opt, val, &o->fair_zone_alloc, err, errlen);
	if (!strcmp(opt, "zone_dirty"))
		return set_bool(opt, val, &o->zone_dirty, err, errlen);
	if (!strcmp(opt, "zones"))
		return set_zones(o, val, err, errlen);
	/* ext4's spellings: auto_da_alloc[=0|1] and noauto_da_alloc */
	if (!strcmp(opt, "auto_da_alloc"))
		return set_bool(opt, val, &o->auto_da_alloc, err, errlen);
	if (!strcmp(opt, "noauto_da_alloc")) {
		if (val) {
			snprintf(err, errlen, "%s: takes no value", opt);
			return -EINVAL;
		}
		o->auto_da_alloc = false;
		return 0;
	}
	if (!strcmp(opt, "transport")) {
		static const char *const names[] = {
			[TRANSPORT_AUTO] = "auto", [TRANSPORT_URING] = "uring",
			[TRANSPORT_DEV] = "dev",
		};

		ret = set_choice(opt, val, names, 3, &choice, err, errlen);
		if (!ret)
			o->transport = (enum transport_type)choice;
		return ret;
	}
	if (!strcmp(opt, "flusher_model")) {
		static const char *const names[] = {
			[FLUSHER_MODEL_BDI] = "bdi", [FLUSHER_MODEL_PDFLUSH] = "pdflush",
		};

		ret = set_choice(opt, val, names, 2, &choice, err, errlen);
		if (!ret)
			o->flusher_model = (enum flusher_model)choice;
		return ret;
	}
	if (!strcmp(opt, "pdflush_threads"))
		return set_pdflush_threads(o, val, err, errlen);
	if (!strcmp(opt, "io_engine")) {
		static const char *const names[] = {
			[IO_ENGINE_URING] = "uring", [IO_ENGINE_AIO] = "aio",
			[IO_ENGINE_PSYNC] = "psync", [IO_ENGINE_NBD] = "nbd",
		};

		ret = set_choice(opt, val, names, 4, &choice, err, errlen);
		if (!ret) {
			o->io_engine = (enum io_engine_type)choice;
			o->io_engine_given = true;
		}
		return ret;
	}
	ret = parse_unsigned_opt(o, opt, val, err, errlen, &matched);
	if (matched)
		return ret;
	ret = parse_flag(o, opt, val, err, errlen, &matched);
	if (matched)
		return ret;
	ret = parse_atime(o, opt, val, err, errlen, &matched);
	if (matched)
		return ret;
	ret = parse_sync(o, opt, val, err, errlen, &matched);
	if (matched)
		return ret;
	if (!val && in_list(fstab_words, opt))
		return 0;
	if (!strncmp(opt, "x-", 2) || !strcmp(opt, "comment"))
		return 0;
	if ((!val && in_list(fuse_words, opt)) || (val && in_list(fuse_keys, opt))) {
		if (val)
			val[-1] = '=';
		return fuse_opt_append(o, opt, err, errlen);
	}
	snprintf(err, errlen, "unknown option '%s'", opt);
	return -EINVAL;
}

int options_parse(struct wbcfs_options *o, const char *optstr, char *err, size_t errlen)
{
	char *copy = strdup(optstr), *save = NULL, *tok;
	int ret = 0;

	if (!copy) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (tok = strtok_r(copy, ",", &save); tok && !ret; tok = strtok_r(NULL, ",", &save))
		ret = parse_one(o, tok, err, errlen);
	free(copy);
	if (!ret)
		ret = check_zones(o, err, errlen);
	if (!ret && o->min_ratio > o->max_ratio) {
		snprintf(err, errlen, "min_ratio: %u is above max_ratio %u", o->min_ratio,
			 o->max_ratio);
		ret = -EINVAL;
	}
	if (!ret && o->cache_min && o->cache_size && o->cache_min > o->cache_size) {
		snprintf(err, errlen, "cache_min: %llu is above cache_size %llu",
			 (unsigned long long)o->cache_min, (unsigned long long)o->cache_size);
		ret = -EINVAL;
	}
	return ret;
}

int options_check(const struct wbcfs_options *o, char *err, size_t errlen)
{
	if (o->pdflush_threads_given && o->flusher_model != FLUSHER_MODEL_PDFLUSH) {
		snprintf(err, errlen, "pdflush_threads: only with flusher_model=pdflush");
		return -EINVAL;
	}
	return 0;
}

void options_usage(FILE *out)
{
	fprintf(out,
		"  cache_size=SIZE                page cache ceiling, grown on demand up to it\n"
		"                                 [min(RAM, cgroup limit)/4, <= MemAvailable/2]\n"
		"  cache_min=SIZE                 floor the cache is never shrunk below [64M]\n"
		"  dirty_ratio=N                  %% of dirtyable cache a writer may dirty [20]\n"
		"  dirty_background_ratio=N       %% at which background writeback starts [10]\n"
		"  dirty_bytes=SIZE               dirty limit in bytes, 0 = use the ratio [0]\n"
		"  dirty_background_bytes=SIZE    background threshold in bytes [0]\n"
		"  dirty_expire_centisecs=N       age at which dirty data is written [3000]\n"
		"  dirty_writeback_centisecs=N    periodic writeback interval, 0 = off [500]\n"
		"  throttle=ioless|simple|writeback\n"
		"                                 dirty throttling: paced pauses, block at the limit,\n"
		"                                 or the writer writes (before 3.2) [ioless]\n"
		"  min_ratio=N                    %% of the dirty threshold the device is guaranteed [0]\n"
		"  max_ratio=N                    %% of the dirty threshold the device may use [100]\n"
		"  strictlimit[=0|1]              throttle on the device's own share of the limit [0]\n"
		"  max_pause_ms=N                 longest single throttle pause, ms (1-10000) [200]\n"
		"  commit=N                       journal commit interval, s (0-3600; 0: 5) [5]\n"
		"  auto_da_alloc[=0|1], noauto_da_alloc\n"
		"                                 write a file's new data at a rename over another\n"
		"                                 file and at close after truncation to 0 [1]\n"
		"  zones=N|SIZE:SIZE...           cache zones, lowest first [one per NUMA node, else 1]\n"
		"  fair_zone_alloc[=0|1]          fill zones in proportion to their size [1]\n"
		"  zone_dirty[=0|1]               per-zone dirty limits for writes [1]\n"
		"  flushers=N                     flusher threads per device (1-16) [1]\n"
		"  flusher_model=bdi|pdflush      background writeback: per-device workers or\n"
		"                                 one shared pool of 2-8 threads [bdi]\n"
		"  pdflush_threads=N|MIN-MAX      the pool's fewest and most threads (1-64) [2-8]\n"
		"  io_engine=uring|aio|psync|nbd  device I/O engine [uring; nbd for NBD exports]\n"
		"  nbd_retry=N                    NBD: reconnect every N s when the server goes\n"
		"                                 away (0-3600; 0: never) [5]\n"
		"  nbd_timeout=N                  NBD: no reply for N s with requests in flight:\n"
		"                                 the connection is dead (0-3600; 0: never) [30]\n"
		"  queue_depth=N                  I/Os in flight per flusher (1-4096) [64]\n"
		"  max_threads=N                  FUSE worker threads (1-256) [16]\n"
		"  poll_us=N                      busy-poll for requests, us (0-1000) [50]\n"
		"  transport=auto|uring|dev       FUSE requests over io_uring or /dev/fuse [auto]\n"
		"  max_io_kb=N                    largest merged write, KiB (4-4096) [1024]\n"
		"  readahead_kb=N                 maximum readahead window, KiB [128]\n"
		"  prefault=SIZE|all              cache faulted in at mount [0]\n"
		"  oom_score_adj=N                the daemon's OOM score adjustment (-1000-1000):\n"
		"                                 it serves every process on the mount [-500]\n"
		"  mem_watch[=0|1]                watch memory pressure (PSI, the cgroup's limit,\n"
		"                                 MemAvailable) and size the cache by it [1]\n"
		"  ctl_name=NAME                  control directory in the root [.wbcfs]\n"
		"  domain=NAME                    start or join cache domain NAME: several devices\n"
		"                                 in one daemon and one cache [none]\n"
		"  relatime|strictatime|noatime   atime on reads: when older than mtime/ctime\n"
		"                                 or a day, always, never [relatime]\n"
		"  nodiratime                     no atime updates on directories\n"
		"  sync                           every write durable before it returns, and\n"
		"                                 every directory change (as ext4's sync)\n"
		"  dirsync                        directory changes durable before they return\n"
		"  ro                             mount read-only\n"
		"  fsck                           run e2fsck -p before mounting\n"
		"  norecovery|noload              with ro: do not replay the journal, read the\n"
		"                                 filesystem as it is on the device\n"
		"  allow_other                    let other users access the mount\n"
		"  fault_inject                   testing: per-file I/O errors (trusted.wbcfs.fault)\n"
		"  write_log=FILE                 testing: record every device write and flush in FILE\n"
		"  lockstat                       collect lock statistics (.wbcfs/lockstat) from mount\n"
		"  default_permissions            (always on) kernel permission checks\n"
		"  fsname=NAME, subtype=NAME      FUSE names (fsname is the device for fuseblk)\n"
		"  SIZE takes k, M, G, T suffixes (binary).\n");
}

/* The options a cache domain owns, for seeding and comparing. */
static const struct {
	const char *name;
	size_t off, size;
} domain_opts[] = {
#define DOM_OPT(n, f) { n, offsetof(struct wbcfs_options, f), \
			sizeof(((struct wbcfs_options *)0)->f) }
	DOM_OPT("cache_size", cache_size),
	DOM_OPT("cache_min", cache_min),
	DOM_OPT("zones", nr_zones),
	DOM_OPT("zones", zone_bytes),
	DOM_OPT("fair_zone_alloc", fair_zone_alloc),
	DOM_OPT("zone_dirty", zone_dirty),
	DOM_OPT("throttle", throttle),
	DOM_OPT("max_pause_ms", max_pause_ms),
	DOM_OPT("prefault", prefault_bytes),
	DOM_OPT("oom_score_adj", oom_score_adj),
	DOM_OPT("mem_watch", mem_watch),
	DOM_OPT("flusher_model", flusher_model),
	DOM_OPT("pdflush_threads", pdflush_min),
	DOM_OPT("pdflush_threads", pdflush_max),
#undef DOM_OPT
};

void options_domain_seed(struct wbcfs_options *o, const struct wbcfs_options *dom,
			 const struct dirty_tunables *t)
{
	size_t i;

	if (!t)
		t = &dom->dirty;
	for (i = 0; i < sizeof(domain_opts) / sizeof(domain_opts[0]); i++)
		memcpy((char *)o + domain_opts[i].off, (const char *)dom + domain_opts[i].off,
		       domain_opts[i].size);
	/* field by field: dirty_tunable_set's ratio/bytes pairing would
	 * undo one of the two */
	atomic_store(&o->dirty.dirty_ratio, atomic_load(&t->dirty_ratio));
	atomic_store(&o->dirty.dirty_background_ratio, atomic_load(&t->dirty_background_ratio));
	atomic_store(&o->dirty.dirty_bytes, atomic_load(&t->dirty_bytes));
	atomic_store(&o->dirty.dirty_background_bytes, atomic_load(&t->dirty_background_bytes));
	atomic_store(&o->dirty.dirty_expire_centisecs, atomic_load(&t->dirty_expire_centisecs));
	atomic_store(&o->dirty.dirty_writeback_centisecs,
		     atomic_load(&t->dirty_writeback_centisecs));
}

const char *options_domain_conflict(const struct wbcfs_options *dom,
				    const struct wbcfs_options *o)
{
	size_t i;

	for (i = 0; i < sizeof(domain_opts) / sizeof(domain_opts[0]); i++)
		if (memcmp((const char *)o + domain_opts[i].off,
			   (const char *)dom + domain_opts[i].off, domain_opts[i].size))
			return domain_opts[i].name;
	for (i = 0; i < NR_DIRTY_TUNABLES; i++)
		if (dirty_tunable_get(&o->dirty, (enum dirty_tunable)i) !=
		    dirty_tunable_get(&dom->dirty, (enum dirty_tunable)i))
			return dirty_tunable_name((enum dirty_tunable)i);
	return NULL;
}
