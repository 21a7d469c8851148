// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Mount option parsing: wbcfs's own options (named after /proc/sys/vm and
 * the kernel's knobs) into struct wbcfs_options, FUSE mount options passed
 * through to libfuse, fstab-only words dropped. Every refusal names the
 * option and the reason. The tunables (one value in a range) are parsed by
 * the table in tunables.c; the options here are the others.
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
#include "wbcfs/daemon/tunables.h"

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
	unsigned i;

	memset(o, 0, sizeof(*o));
	for (i = 0; i < NR_TUNABLES; i++)
		tunable_store(&tunables[i], o, tunables[i].def);
	o->pdflush_min = PDFLUSH_MIN_THREADS;
	o->pdflush_max = PDFLUSH_MAX_THREADS;
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

/* A tunable: its rules are the table's (tunables.c). */
static int set_tunable(struct wbcfs_options *o, const struct tunable *d, const char *val,
		       char *err, size_t errlen)
{
	uint64_t v;
	int ret = tunable_parse(d, val, &v, err, errlen);

	if (ret)
		return ret;
	tunable_store(d, o, v);
	if (d->given)
		*(bool *)((char *)o + d->given - 1) = true;
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

/* ceph_conf=, ceph_id=, ceph_keyring=: strings for librados, as given. */
static int set_string(char *dst, size_t size, const char *key, const char *val, char *err,
		      size_t errlen)
{
	if (!val || !*val) {
		snprintf(err, errlen, "%s: needs a value", key);
		return -EINVAL;
	}
	if (strlen(val) >= size) {
		snprintf(err, errlen, "%s: longer than %zu bytes", key, size - 1);
		return -EINVAL;
	}
	strcpy(dst, val);
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
		int ret = tunable_parse_number("zones", val, 1, OPTIONS_ZONES_MAX, 1, false, &v, err, errlen);

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
	ret = tunable_parse_number("pdflush_threads", buf, 1, OPTIONS_PDFLUSH_THREADS_MAX, 1,
				   false, &lo, err, errlen);
	hi = lo;
	if (!ret && dash)
		ret = tunable_parse_number("pdflush_threads", dash + 1, 1,
					   OPTIONS_PDFLUSH_THREADS_MAX, 1, false, &hi, err, errlen);
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
	const struct tunable *d;
	bool matched;
	int ret;

	if (val)
		*val++ = 0;
	d = tunable_find(opt);
	if (d)
		return set_tunable(o, d, val, err, errlen);
	if (!strcmp(opt, "ctl_name"))
		return set_ctl_name(o, val, err, errlen);
	if (!strcmp(opt, "write_log"))
		return set_write_log(o, val, err, errlen);
	if (!strcmp(opt, "domain"))
		return set_domain(o, val, err, errlen);
	if (!strcmp(opt, "ceph_conf"))
		return set_string(o->ceph_conf, sizeof(o->ceph_conf), opt, val, err, errlen);
	if (!strcmp(opt, "ceph_id"))
		return set_string(o->ceph_id, sizeof(o->ceph_id), opt, val, err, errlen);
	if (!strcmp(opt, "ceph_keyring"))
		return set_string(o->ceph_keyring, sizeof(o->ceph_keyring), opt, val, err,
				  errlen);
	if (!strcmp(opt, "zones"))
		return set_zones(o, val, err, errlen);
	/* ext4's spellings: auto_da_alloc[=0|1] (a tunable) and noauto_da_alloc */
	if (!strcmp(opt, "noauto_da_alloc")) {
		if (val) {
			snprintf(err, errlen, "%s: takes no value", opt);
			return -EINVAL;
		}
		o->auto_da_alloc = false;
		return 0;
	}
	if (!strcmp(opt, "pdflush_threads"))
		return set_pdflush_threads(o, val, err, errlen);
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

/* --help for the options that are not tunables (those are the table's). */
static const struct {
	const char *syntax, *help;
} other_opts[] = {
	{ "zones=N|SIZE:SIZE...", "cache zones, lowest first [one per NUMA node, else 1]" },
	{ "ctl_name=NAME", "control directory in the root [" OPTIONS_CTL_NAME_DEFAULT "]" },
	{ "domain=NAME", "start or join cache domain NAME: several devices in one daemon and "
	  "one cache [none]" },
	{ "relatime|strictatime|noatime", "atime on reads: when older than mtime/ctime or a "
	  "day, always, never [relatime]" },
	{ "nodiratime", "no atime updates on directories" },
	{ "sync", "every write durable before it returns, and every directory change (as "
	  "ext4's sync)" },
	{ "dirsync", "directory changes durable before they return" },
	{ "ro", "mount read-only" },
	{ "fsck", "run e2fsck -p before mounting" },
	{ "norecovery|noload", "with ro: do not replay the journal, read the filesystem as it "
	  "is on the device" },
	{ "allow_other", "let other users access the mount" },
	{ "fault_inject", "testing: per-file I/O errors (trusted.wbcfs.fault)" },
	{ "write_log=FILE", "testing: record every device write and flush in FILE" },
	{ "ceph_conf=FILE", "RBD: the cluster's ceph.conf [$CEPH_CONF, then librados' "
	  "default]" },
	{ "ceph_id=ID", "RBD: connect as client.ID [admin]" },
	{ "ceph_keyring=FILE", "RBD: the client's keyring [the ceph.conf's]" },
	{ "lockstat", "collect lock statistics (.wbcfs/lockstat) from mount" },
	{ "default_permissions", "(always on) kernel permission checks" },
	{ "fsname=NAME, subtype=NAME", "FUSE names (fsname is the device for fuseblk)" },
};

void options_usage(FILE *out)
{
	char text[128];
	size_t i;

	tunables_usage(out);
	snprintf(text, sizeof(text), "the pool's fewest and most threads (1-%d), with "
		 "flusher_model=pdflush [%d-%d]", OPTIONS_PDFLUSH_THREADS_MAX, PDFLUSH_MIN_THREADS,
		 PDFLUSH_MAX_THREADS);
	tunable_help_line(out, "pdflush_threads=N|MIN-MAX", text);
	for (i = 0; i < sizeof(other_opts) / sizeof(other_opts[0]); i++)
		tunable_help_line(out, other_opts[i].syntax, other_opts[i].help);
	fprintf(out, "  SIZE takes k, M, G, T suffixes (binary).\n"
		"  live: also a file in the control directory, where a write sets it at once.\n");
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
			return tunables[i].name;	/* the dirty_* ids come first */
	return NULL;
}
