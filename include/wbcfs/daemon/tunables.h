/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The tunables: one table (daemon/tunables.c) that says, for each, its name,
 * unit, range, default, whether it can also be set at run time (a file in
 * the control directory) and where the mount options keep it. The mount
 * option parser, the control files and --help all read their rules from
 * it, so a tunable is added in one place.
 *
 * Options that are not one value in a range (zones, pdflush_threads,
 * ctl_name, domain, write_log, the flag words) keep their own parsers in
 * daemon/options.c.
 */
#ifndef WBCFS_TUNABLES_H
#define WBCFS_TUNABLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "wbcfs/cache/dirty.h"

struct wbcfs_options;

/*
 * The live tunables come first, in the control directory's order: a
 * control file's number is its tunable's id. The dirty_* ones are the
 * cache's enum dirty_tunable values.
 */
enum tunable_id {
	TUN_DIRTY_RATIO = DT_DIRTY_RATIO,
	TUN_DIRTY_BACKGROUND_RATIO = DT_DIRTY_BACKGROUND_RATIO,
	TUN_DIRTY_BYTES = DT_DIRTY_BYTES,
	TUN_DIRTY_BACKGROUND_BYTES = DT_DIRTY_BACKGROUND_BYTES,
	TUN_DIRTY_EXPIRE_CENTISECS = DT_DIRTY_EXPIRE_CENTISECS,
	TUN_DIRTY_WRITEBACK_CENTISECS = DT_DIRTY_WRITEBACK_CENTISECS,
	TUN_READAHEAD_KB = NR_DIRTY_TUNABLES,
	TUN_MIN_RATIO,
	TUN_MAX_RATIO,
	TUN_STRICTLIMIT,
	TUN_MAX_PAUSE_MS,
	TUN_THROTTLE,
	TUN_FAIR_ZONE_ALLOC,
	TUN_ZONE_DIRTY,
	TUN_CACHE_SIZE,
	TUN_CACHE_MIN,
	NR_LIVE_TUNABLES,
	/* mount only */
	TUN_COMMIT = NR_LIVE_TUNABLES,
	TUN_AUTO_DA_ALLOC,
	TUN_CLOSE_ERRORS,
	TUN_PARK_ALL,
	TUN_FLUSHERS,
	TUN_FLUSHER_MODEL,
	TUN_IO_ENGINE,
	TUN_NBD_RETRY,
	TUN_NBD_TIMEOUT,
	TUN_RBD_TIMEOUT,
	TUN_RBD_CONNECT_TIMEOUT,
	TUN_BREAK_LOCK,
	TUN_QUEUE_DEPTH,
	TUN_MAX_THREADS,
	TUN_POLL_US,
	TUN_TRANSPORT,
	TUN_MAX_IO_KB,
	TUN_PREFAULT,
	TUN_OOM_SCORE_ADJ,
	TUN_MEM_WATCH,
	TUN_TAKE_DELAY_US,
	NR_TUNABLES
};

enum tunable_kind {
	TK_UINT,	/* a decimal number */
	TK_SIZE,	/* bytes, with the k/M/G/T suffixes (options_parse_size) */
	TK_BOOL,	/* 0 or 1; at mount the bare name is 1 */
	TK_CHOICE,	/* one of names; the value is its index */
	TK_INT,		/* a signed decimal number (min, max, def as int64_t) */
};

#define TF_LIVE		0x1	/* a control file sets it at run time too */
#define TF_ZERO_OFF	0x2	/* 0 (off) is taken at mount below min; at run time
				 * writing the twin is the way back (/proc/sys/vm) */
#define TF_ALL		0x4	/* "all" is UINT64_MAX (prefault) */
#define TF_AUTO		0x8	/* the default 0 means "chosen at mount" (def_text) */
#define TF_PLAIN	0x10	/* TK_SIZE at run time: digits only, as /proc/sys/vm */

struct tunable {
	const char *name;
	enum tunable_kind kind;
	unsigned flags;
	const char *unit;		/* help: after the range; NULL: none */
	uint64_t min, max, multiple;	/* the accepted range; multiple: 0 or 1 = any */
	uint64_t def;			/* the default */
	size_t off;			/* where struct wbcfs_options keeps it */
	unsigned size;			/* its size there: 1 (bool), 4 or 8 */
	int dirty;			/* >= 0: kept in options.dirty (enum dirty_tunable) */
	size_t given;			/* offsetof + 1 of a bool set when given; 0: none */
	const char *(*choice)(unsigned i);	/* TK_CHOICE: the name of value i */
	unsigned nr_choices;
	const char *syntax;		/* help's left column, when not NAME=ARG */
	const char *help;		/* what it does (--help) */
	const char *def_text;		/* help's default, when not the value itself */
};

extern const struct tunable tunables[NR_TUNABLES];

/** The tunable called @name, or NULL. */
const struct tunable *tunable_find(const char *name);

/**
 * Whether @v is in @d's range: min-max, a multiple of d->multiple; at mount
 * (!@live) 0 as well for TF_ZERO_OFF. Returns 0, -ERANGE (out of range)
 * or -EDOM (not a multiple).
 */
int tunable_check(const struct tunable *d, uint64_t v, bool live);

/**
 * A TK_CHOICE value: @len bytes of @s (trailing blanks and newlines
 * ignored) naming one of @d's choices. Returns 0 with the index in *@out,
 * or -EINVAL.
 */
int tunable_choice_parse(const struct tunable *d, const char *s, size_t len, uint64_t *out);

/**
 * Parse a mount option's value @val (NULL: the bare name) with @d's rules.
 * Returns 0 with the value in *@out, or -EINVAL with a message naming the
 * option in @err ("dirty_ratio: value 150 out of range 0-100").
 */
int tunable_parse(const struct tunable *d, const char *val, uint64_t *out, char *err,
		  size_t errlen);

/**
 * Parse @val, a number (or with @size a size) in @min-@max and a multiple
 * of @multiple (0 or 1: any), as option @key. Returns 0 or -EINVAL with
 * the message in @err ("needs a value", "'x' is not a number", "value 9
 * out of range 1-8", "value 6 is not a multiple of 4").
 */
int tunable_parse_number(const char *key, const char *val, uint64_t min, uint64_t max,
			 uint64_t multiple, bool size, uint64_t *out, char *err, size_t errlen);

/** Keep @v in @o as @d's value (dirty_* with the ratio/bytes rule). */
void tunable_store(const struct tunable *d, struct wbcfs_options *o, uint64_t v);
/** @d's value in @o. */
uint64_t tunable_load(const struct tunable *d, const struct wbcfs_options *o);

/**
 * One --help entry: "  LEFT   TEXT" with TEXT wrapped into the second
 * column (LEFT on a line of its own when too long for the first).
 */
void tunable_help_line(FILE *out, const char *left, const char *text);
/** The --help entries of every tunable, in the table's order. */
void tunables_usage(FILE *out);

#endif
