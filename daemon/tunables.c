// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The tunables table (include/wbcfs/daemon/tunables.h): each tunable's name,
 * unit, range, default, whether a control file sets it at run time, where
 * the mount options keep it and its --help line. options.c parses mount
 * options by it, ctl.c checks the control files' writes by it, and --help
 * is printed from it; test_tunables walks it.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "wbcfs/ext4/options.h"
#include "wbcfs/cache/throttle.h"
#include "wbcfs/daemon/tunables.h"

static const char *throttle_choice(unsigned i)
{
	return throttle_mode_name((enum throttle_mode)i);
}

static const char *engine_choice(unsigned i)
{
	return io_engine_name((enum io_engine_type)i);
}

static const char *transport_choice(unsigned i)
{
	static const char *const names[] = {
		[TRANSPORT_AUTO] = "auto", [TRANSPORT_URING] = "uring", [TRANSPORT_DEV] = "dev",
	};

	return names[i];
}

static const char *flusher_model_choice(unsigned i)
{
	static const char *const names[] = {
		[FLUSHER_MODEL_BDI] = "bdi", [FLUSHER_MODEL_PDFLUSH] = "pdflush",
	};

	return names[i];
}

/* Where struct wbcfs_options keeps a tunable: a field, or options.dirty. */
#define OPT(f) .off = offsetof(struct wbcfs_options, f), \
	       .size = sizeof(((struct wbcfs_options *)0)->f)
#define DIRTY(t) .size = 0, .dirty = (t)
#define GIVEN(f) .given = offsetof(struct wbcfs_options, f) + 1
#define RANGE(lo, hi) .min = (lo), .max = (hi)

const struct tunable tunables[NR_TUNABLES] = {
	[TUN_DIRTY_RATIO] = {
		"dirty_ratio", TK_UINT, TF_LIVE, "%", RANGE(0, DIRTY_RATIO_MAX),
		.def = DIRTY_RATIO_DEFAULT, DIRTY(DT_DIRTY_RATIO),
		.help = "share of the dirtyable cache a writer may dirty",
	},
	[TUN_DIRTY_BACKGROUND_RATIO] = {
		"dirty_background_ratio", TK_UINT, TF_LIVE, "%", RANGE(0, DIRTY_RATIO_MAX),
		.def = DIRTY_BACKGROUND_RATIO_DEFAULT, DIRTY(DT_DIRTY_BACKGROUND_RATIO),
		.help = "share at which background writeback starts",
	},
	[TUN_DIRTY_BYTES] = {
		"dirty_bytes", TK_SIZE, TF_LIVE | TF_ZERO_OFF | TF_PLAIN, NULL,
		RANGE(DIRTY_BYTES_MIN, UINT64_MAX), .def = 0, DIRTY(DT_DIRTY_BYTES),
		.help = "dirty limit in bytes, 0 = use dirty_ratio",
	},
	[TUN_DIRTY_BACKGROUND_BYTES] = {
		"dirty_background_bytes", TK_SIZE, TF_LIVE | TF_ZERO_OFF | TF_PLAIN, NULL,
		RANGE(1, UINT64_MAX), .def = 0, DIRTY(DT_DIRTY_BACKGROUND_BYTES),
		.help = "background threshold in bytes, 0 = use dirty_background_ratio",
	},
	[TUN_DIRTY_EXPIRE_CENTISECS] = {
		"dirty_expire_centisecs", TK_UINT, TF_LIVE, "centisecs",
		RANGE(0, DIRTY_CENTISECS_MAX), .def = DIRTY_EXPIRE_CENTISECS_DEFAULT,
		DIRTY(DT_DIRTY_EXPIRE_CENTISECS),
		.help = "age at which dirty data is written",
	},
	[TUN_DIRTY_WRITEBACK_CENTISECS] = {
		"dirty_writeback_centisecs", TK_UINT, TF_LIVE, "centisecs",
		RANGE(0, DIRTY_CENTISECS_MAX), .def = DIRTY_WRITEBACK_CENTISECS_DEFAULT,
		DIRTY(DT_DIRTY_WRITEBACK_CENTISECS),
		.help = "periodic writeback interval, 0 = off",
	},
	[TUN_READAHEAD_KB] = {
		"readahead_kb", TK_UINT, TF_LIVE, "KiB", RANGE(0, 65536), .multiple = 4,
		.def = 128, OPT(readahead_kb), GIVEN(readahead_kb_given),
		.help = "largest readahead window",
		.def_text = "the block device's read_ahead_kb; 128 for an image or NBD",
	},
	[TUN_MIN_RATIO] = {
		"min_ratio", TK_UINT, TF_LIVE, "%", RANGE(0, 100), .def = 0, OPT(min_ratio),
		.help = "share of the dirty threshold the device is guaranteed",
	},
	[TUN_MAX_RATIO] = {
		"max_ratio", TK_UINT, TF_LIVE, "%", RANGE(0, 100), .def = 100, OPT(max_ratio),
		.help = "share of the dirty threshold the device may use",
	},
	[TUN_STRICTLIMIT] = {
		"strictlimit", TK_BOOL, TF_LIVE, NULL, RANGE(0, 1), .def = 0, OPT(strictlimit),
		.help = "throttle on the device's own share of the limit",
	},
	[TUN_MAX_PAUSE_MS] = {
		"max_pause_ms", TK_UINT, TF_LIVE, "ms", RANGE(1, THROTTLE_MAX_PAUSE_MS_MAX),
		.def = THROTTLE_MAX_PAUSE_MS_DEFAULT, OPT(max_pause_ms),
		.help = "longest single throttle pause",
	},
	[TUN_THROTTLE] = {
		"throttle", TK_CHOICE, TF_LIVE, NULL, RANGE(0, THROTTLE_WRITEBACK),
		.def = THROTTLE_IOLESS, OPT(throttle),
		.choice = throttle_choice, .nr_choices = THROTTLE_WRITEBACK + 1,
		.help = "dirty throttling: paced pauses, block at the limit, or the writer "
			"writes (before 3.2)",
	},
	[TUN_FAIR_ZONE_ALLOC] = {
		"fair_zone_alloc", TK_BOOL, TF_LIVE, NULL, RANGE(0, 1), .def = 1,
		OPT(fair_zone_alloc),
		.help = "fill zones in proportion to their size",
	},
	[TUN_ZONE_DIRTY] = {
		"zone_dirty", TK_BOOL, TF_LIVE, NULL, RANGE(0, 1), .def = 1, OPT(zone_dirty),
		.help = "per-zone dirty limits for writes",
	},
	[TUN_CACHE_SIZE] = {
		"cache_size", TK_SIZE, TF_LIVE | TF_AUTO, NULL, RANGE(1 << 20, UINT64_MAX),
		.def = 0, OPT(cache_size),
		.help = "page cache ceiling, grown on demand up to it",
		.def_text = "min(RAM, cgroup limit)/4, <= MemAvailable/2",
	},
	[TUN_CACHE_MIN] = {
		"cache_min", TK_SIZE, TF_LIVE | TF_AUTO, NULL,
		RANGE(OPTIONS_CACHE_MIN_MIN, UINT64_MAX), .def = 0, OPT(cache_min),
		.help = "floor the cache is never shrunk below, up to cache_size",
		.def_text = "64M",
	},
	[TUN_COMMIT] = {
		"commit", TK_UINT, 0, "s", RANGE(0, 3600), .def = 0, OPT(commit_s),
		.help = "journal commit interval, 0 = the default", .def_text = "5",
	},
	[TUN_AUTO_DA_ALLOC] = {
		"auto_da_alloc", TK_BOOL, 0, NULL, RANGE(0, 1), .def = 1, OPT(auto_da_alloc),
		.syntax = "auto_da_alloc[=0|1], noauto_da_alloc",
		.help = "write a file's new data at a rename over another file and at close "
			"after truncation to 0",
	},
	[TUN_CLOSE_ERRORS] = {
		"close_errors", TK_BOOL, 0, NULL, RANGE(0, 1), .def = 0, OPT(close_errors),
		.help = "a writer's close(2) reports writeback errors (a FLUSH round trip per "
			"close, as NFS); 0: at fsync only, as ext4",
	},
	[TUN_PARK_ALL] = {
		"park_all", TK_BOOL, 0, NULL, RANGE(0, 1), .def = 0, OPT(park_all),
		.help = "every fsync and synchronous write is handed to the syncers; 0: one "
			"that meets no other sync runs in its own thread",
	},
	[TUN_FLUSHERS] = {
		"flushers", TK_UINT, 0, NULL, RANGE(1, 16), .def = 1, OPT(flushers),
		.help = "flusher threads per device",
	},
	[TUN_FLUSHER_MODEL] = {
		"flusher_model", TK_CHOICE, 0, NULL, RANGE(0, FLUSHER_MODEL_PDFLUSH),
		.def = FLUSHER_MODEL_BDI, OPT(flusher_model),
		.choice = flusher_model_choice, .nr_choices = FLUSHER_MODEL_PDFLUSH + 1,
		.help = "background writeback: per-device workers or one shared pool of "
			"threads (pdflush_threads)",
	},
	[TUN_IO_ENGINE] = {
		"io_engine", TK_CHOICE, 0, NULL, RANGE(0, NR_IO_ENGINES - 1),
		.def = IO_ENGINE_URING, OPT(io_engine), GIVEN(io_engine_given),
		.choice = engine_choice, .nr_choices = NR_IO_ENGINES,
		.help = "device I/O engine", .def_text = "uring; nbd for NBD exports, rbd for RBD images",
	},
	[TUN_NBD_RETRY] = {
		"nbd_retry", TK_UINT, 0, "s", RANGE(0, 3600), .def = 5, OPT(nbd_retry_s),
		.help = "NBD: reconnect every N s when the server goes away, 0 = never",
	},
	[TUN_NBD_TIMEOUT] = {
		"nbd_timeout", TK_UINT, 0, "s", RANGE(0, 3600), .def = 30, OPT(nbd_timeout_s),
		.help = "NBD: no reply for N s with requests in flight: the connection is "
			"dead, 0 = never",
	},
	[TUN_RBD_TIMEOUT] = {
		"rbd_timeout", TK_UINT, 0, "s", RANGE(0, 3600), .def = 30, OPT(rbd_timeout_s),
		.help = "RBD: an OSD request with no reply for N s fails (EIO), 0 = never",
	},
	[TUN_RBD_CONNECT_TIMEOUT] = {
		"rbd_connect_timeout", TK_UINT, 0, "s", RANGE(1, 3600), .def = 10,
		OPT(rbd_connect_timeout_s),
		.help = "RBD: the mount fails when the monitors, the key check or the image's "
			"open take longer",
	},
	[TUN_BREAK_LOCK] = {
		"break_lock", TK_BOOL, 0, NULL, RANGE(0, 1), .def = 0, OPT(break_lock),
		.help = "RBD: the image's lock is held by a dead client: blocklist it and "
			"take the lock",
	},
	[TUN_QUEUE_DEPTH] = {
		"queue_depth", TK_UINT, 0, NULL, RANGE(1, 4096), .def = 64, OPT(queue_depth),
		.help = "I/Os in flight per flusher",
	},
	[TUN_MAX_THREADS] = {
		"max_threads", TK_UINT, 0, NULL, RANGE(1, 256), .def = 16, OPT(max_threads),
		.help = "FUSE worker threads",
	},
	[TUN_POLL_US] = {
		"poll_us", TK_UINT, 0, "us", RANGE(0, 1000), .def = 50, OPT(poll_us),
		.help = "busy-poll for requests",
	},
	[TUN_TRANSPORT] = {
		"transport", TK_CHOICE, 0, NULL, RANGE(0, TRANSPORT_DEV), .def = TRANSPORT_AUTO,
		OPT(transport), .choice = transport_choice, .nr_choices = TRANSPORT_DEV + 1,
		.help = "FUSE requests over io_uring or /dev/fuse",
	},
	[TUN_MAX_IO_KB] = {
		"max_io_kb", TK_UINT, 0, "KiB", RANGE(4, 4096), .multiple = 4, .def = 1024,
		OPT(max_io_kb),
		.help = "largest merged write",
	},
	[TUN_PREFAULT] = {
		"prefault", TK_SIZE, TF_ALL, NULL, RANGE(0, UINT64_MAX), .def = 0,
		OPT(prefault_bytes),
		.help = "cache faulted in at mount",
	},
	[TUN_OOM_SCORE_ADJ] = {
		"oom_score_adj", TK_INT, 0, NULL, RANGE((uint64_t)-1000, 1000),
		.def = (uint64_t)OPTIONS_OOM_SCORE_ADJ, OPT(oom_score_adj),
		GIVEN(oom_score_adj_given),
		.help = "the daemon's OOM score adjustment: it serves every process on the mount",
	},
	[TUN_MEM_WATCH] = {
		"mem_watch", TK_BOOL, 0, NULL, RANGE(0, 1), .def = 1, OPT(mem_watch),
		.help = "watch memory pressure (PSI, the cgroup's limit, MemAvailable) and size "
			"the cache by it",
	},
	[TUN_TAKE_DELAY_US] = {
		"take_delay_us", TK_UINT, 0, "us", RANGE(0, 100000), .def = 0,
		OPT(take_delay_us),
		.help = "testing: pause between a request's copy from the kernel and its serving",
	},
};

const struct tunable *tunable_find(const char *name)
{
	unsigned i;

	for (i = 0; i < NR_TUNABLES; i++)
		if (!strcmp(tunables[i].name, name))
			return &tunables[i];
	return NULL;
}

int tunable_check(const struct tunable *d, uint64_t v, bool live)
{
	if (d->kind == TK_INT) {
		int64_t s = (int64_t)v;

		return s < (int64_t)d->min || s > (int64_t)d->max ? -ERANGE : 0;
	}
	if (!v && !live && (d->flags & TF_ZERO_OFF))
		return 0;
	if (v < d->min || v > d->max)
		return -ERANGE;
	if (d->multiple > 1 && v % d->multiple)
		return -EDOM;
	return 0;
}

int tunable_choice_parse(const struct tunable *d, const char *s, size_t len, uint64_t *out)
{
	unsigned i;

	while (len && (s[len - 1] == '\n' || s[len - 1] == ' '))
		len--;
	for (i = 0; i < d->nr_choices; i++) {
		const char *name = d->choice(i);

		if (strlen(name) == len && !memcmp(s, name, len)) {
			*out = i;
			return 0;
		}
	}
	return -EINVAL;
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

int tunable_parse_number(const char *key, const char *val, uint64_t min, uint64_t max,
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

static int parse_choice(const struct tunable *d, const char *val, uint64_t *out, char *err,
			size_t errlen)
{
	unsigned i;
	int n;

	if (val && !tunable_choice_parse(d, val, strlen(val), out))
		return 0;
	n = snprintf(err, errlen, "%s: '%s' is not one of %s", d->name, val ? val : "",
		     d->choice(0));
	for (i = 1; i < d->nr_choices && n > 0 && (size_t)n < errlen; i++)
		n += snprintf(err + n, errlen - (size_t)n, ", %s", d->choice(i));
	return -EINVAL;
}

static int parse_int(const struct tunable *d, const char *val, uint64_t *out, char *err,
		     size_t errlen)
{
	char *end;
	long v;

	if (!val || !*val) {
		snprintf(err, errlen, "%s: needs a value", d->name);
		return -EINVAL;
	}
	errno = 0;
	v = strtol(val, &end, 10);
	if (errno || *end) {
		snprintf(err, errlen, "%s: '%s' is not a number", d->name, val);
		return -EINVAL;
	}
	if (tunable_check(d, (uint64_t)(int64_t)v, false)) {
		snprintf(err, errlen, "%s: value %s out of range %" PRId64 "-%" PRId64, d->name,
			 val, (int64_t)d->min, (int64_t)d->max);
		return -EINVAL;
	}
	*out = (uint64_t)(int64_t)v;
	return 0;
}

int tunable_parse(const struct tunable *d, const char *val, uint64_t *out, char *err,
		  size_t errlen)
{
	uint64_t v;

	switch (d->kind) {
	case TK_BOOL:
		if (!val || !strcmp(val, "1"))
			*out = 1;
		else if (!strcmp(val, "0"))
			*out = 0;
		else {
			snprintf(err, errlen, "%s: '%s' is not 0 or 1", d->name, val);
			return -EINVAL;
		}
		return 0;
	case TK_CHOICE:
		return parse_choice(d, val, out, err, errlen);
	case TK_INT:
		return parse_int(d, val, out, err, errlen);
	default:
		break;
	}
	if ((d->flags & TF_ALL) && val && !strcmp(val, "all")) {
		*out = UINT64_MAX;
		return 0;
	}
	if (!(d->flags & TF_ZERO_OFF))
		return tunable_parse_number(d->name, val, d->min, d->max, d->multiple,
					    d->kind == TK_SIZE, out, err, errlen);
	/* 0 (off), or in the range */
	if (tunable_parse_number(d->name, val, 0, d->max, d->multiple, d->kind == TK_SIZE, &v,
				 err, errlen))
		return -EINVAL;
	if (tunable_check(d, v, false)) {
		snprintf(err, errlen, "%s: value %s is not allowed (0 or at least %" PRIu64 ")",
			 d->name, val, d->min);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

void tunable_store(const struct tunable *d, struct wbcfs_options *o, uint64_t v)
{
	char *p = (char *)o + d->off;

	switch (d->size) {
	case 0:		/* checked against the same limits: cannot fail */
		dirty_tunable_set(&o->dirty, (enum dirty_tunable)d->dirty, v);
		break;
	case 1:
		*(bool *)p = v != 0;
		break;
	case 4:
		if (d->kind == TK_INT)
			*(int *)p = (int)(int64_t)v;
		else
			*(unsigned *)p = (unsigned)v;
		break;
	default:
		*(uint64_t *)p = v;
		break;
	}
}

uint64_t tunable_load(const struct tunable *d, const struct wbcfs_options *o)
{
	const char *p = (const char *)o + d->off;

	switch (d->size) {
	case 0:
		return dirty_tunable_get(&o->dirty, (enum dirty_tunable)d->dirty);
	case 1:
		return *(const bool *)p;
	case 4:
		if (d->kind == TK_INT)
			return (uint64_t)(int64_t)*(const int *)p;
		return *(const unsigned *)p;
	default:
		return *(const uint64_t *)p;
	}
}

/* ---- --help ------------------------------------------------------------------ */

#define HELP_COL 33	/* where the text column starts */
#define HELP_WIDTH 80

void tunable_help_line(FILE *out, const char *left, const char *text)
{
	size_t col, n;

	col = (size_t)fprintf(out, "  %s", left);
	if (col >= HELP_COL) {		/* no room for a blank: the text starts below */
		fputc('\n', out);
		col = 0;
	}
	while (*text) {
		const char *word = text;

		while (*text == ' ')
			text++;
		word = text;
		n = strcspn(word, " ");
		if (col < HELP_COL || col + 1 + n > HELP_WIDTH) {
			if (col >= HELP_COL) {
				fputc('\n', out);
				col = 0;
			}
			col += (size_t)fprintf(out, "%*s", (int)(HELP_COL - col), "");
		} else {
			fputc(' ', out);
			col++;
		}
		col += fwrite(word, 1, n, out);
		text = word + n;
	}
	fputc('\n', out);
}

/* 64M, 8k, 0: the largest binary suffix that divides @v */
static void size_text(uint64_t v, char *buf, size_t len)
{
	static const char sfx[] = "kMGT";
	int i;

	for (i = 3; i >= 0 && v; i--) {
		if (!(v % (1ULL << (10 * (i + 1))))) {
			snprintf(buf, len, "%" PRIu64 "%c", v >> (10 * (i + 1)), sfx[i]);
			return;
		}
	}
	snprintf(buf, len, "%" PRIu64, v);
}

static void value_text(const struct tunable *d, uint64_t v, char *buf, size_t len)
{
	switch (d->kind) {
	case TK_SIZE:
		size_text(v, buf, len);
		break;
	case TK_CHOICE:
		snprintf(buf, len, "%s", d->choice((unsigned)v));
		break;
	case TK_INT:
		snprintf(buf, len, "%" PRId64, (int64_t)v);
		break;
	default:
		snprintf(buf, len, "%" PRIu64, v);
		break;
	}
}

/* The left column: NAME=N, NAME=SIZE, NAME[=0|1], NAME=a|b|c. */
static void syntax_text(const struct tunable *d, char *buf, size_t len)
{
	size_t n;
	unsigned i;

	if (d->syntax) {
		snprintf(buf, len, "%s", d->syntax);
		return;
	}
	switch (d->kind) {
	case TK_BOOL:
		snprintf(buf, len, "%s[=0|1]", d->name);
		break;
	case TK_CHOICE:
		n = (size_t)snprintf(buf, len, "%s=", d->name);
		for (i = 0; i < d->nr_choices && n < len; i++)
			n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? "|" : "",
					      d->choice(i));
		break;
	case TK_SIZE:
		snprintf(buf, len, "%s=SIZE%s", d->name, (d->flags & TF_ALL) ? "|all" : "");
		break;
	default:
		snprintf(buf, len, "%s=N", d->name);
		break;
	}
}

/* The range as the parser takes it: (0-100 %), (at least 4M), (0 or at least 8k). */
static void range_text(const struct tunable *d, char *buf, size_t len)
{
	char lo[32], hi[32];
	size_t n;

	buf[0] = 0;
	if (d->kind == TK_BOOL || d->kind == TK_CHOICE)
		return;
	value_text(d, d->min, lo, sizeof(lo));
	value_text(d, d->max, hi, sizeof(hi));
	if (d->kind == TK_SIZE) {
		if (d->min > 1)
			snprintf(buf, len, " (%sat least %s)",
				 (d->flags & TF_ZERO_OFF) ? "0 or " : "", lo);
		return;
	}
	n = (size_t)snprintf(buf, len, " (%s-%s%s%s", lo, hi, d->unit ? " " : "",
			     d->unit ? d->unit : "");
	if (d->multiple > 1 && n < len)
		n += (size_t)snprintf(buf + n, len - n, ", multiple of %" PRIu64, d->multiple);
	if (n < len)
		snprintf(buf + n, len - n, ")");
}

void tunables_usage(FILE *out)
{
	char left[128], range[96], def[64], text[512];
	unsigned i;

	for (i = 0; i < NR_TUNABLES; i++) {
		const struct tunable *d = &tunables[i];

		syntax_text(d, left, sizeof(left));
		range_text(d, range, sizeof(range));
		value_text(d, d->def, def, sizeof(def));
		snprintf(text, sizeof(text), "%s%s%s [%s]", d->help, range,
			 (d->flags & TF_LIVE) ? "; live" : "", d->def_text ? d->def_text : def);
		tunable_help_line(out, left, text);
	}
}
