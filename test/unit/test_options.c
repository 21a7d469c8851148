// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Mount options: defaults, every option's accepted and refused values with
 * messages naming the option, sizes with suffixes, the ratio/bytes rule,
 * FUSE options passed through to libfuse, fstab-only words dropped.
 */
#include <check.h>
#include "helpers.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wbcfs/ext4/options.h"
#include "wbcfs/cache/throttle.h"

static struct wbcfs_options o;
static char err[256];

static int t_parse(const char *s)
{
	err[0] = 0;
	return options_parse(&o, s, err, sizeof(err));
}

static void t_refused(const char *s, const char *msg)
{
	ck_assert_int_eq(t_parse(s), -EINVAL);
	ck_assert_msg(strstr(err, msg) != NULL, "'%s': message '%s' lacks '%s'", s, err, msg);
}

static void setup(void)
{
	options_default(&o);
}

START_TEST(defaults)
{
	ck_assert_uint_eq(o.cache_size, 0);
	ck_assert_uint_eq(o.dirty.dirty_ratio, 20);
	ck_assert_uint_eq(o.dirty.dirty_background_ratio, 10);
	ck_assert_uint_eq(o.dirty.dirty_expire_centisecs, 3000);
	ck_assert_uint_eq(o.dirty.dirty_writeback_centisecs, 500);
	ck_assert_uint_eq(o.flushers, 1);
	ck_assert_int_eq(o.io_engine, IO_ENGINE_URING);
	ck_assert_int_eq(o.transport, TRANSPORT_AUTO);
	ck_assert_uint_eq(o.queue_depth, 64);
	ck_assert_uint_eq(o.max_io_kb, 1024);
	ck_assert_uint_eq(o.readahead_kb, 128);
	/* the cache grows on demand: nothing faulted in at mount */
	ck_assert_uint_eq(o.prefault_bytes, 0);
	ck_assert_uint_eq(o.cache_min, 0);
	ck_assert(!o.fault_inject);
	ck_assert(!o.lockstat);
	ck_assert(!o.ro && !o.fsck && !o.allow_other);
	ck_assert_str_eq(o.fuse_opts, "");
	ck_assert_str_eq(o.ctl_name, ".wbcfs");
	ck_assert_str_eq(o.write_log, "");
	ck_assert(o.auto_da_alloc);
}
END_TEST

/* The daemon's OOM protection and the memory watcher's switch. */
START_TEST(memory_options)
{
	ck_assert_int_eq(o.oom_score_adj, -500);
	ck_assert(!o.oom_score_adj_given);
	ck_assert(o.mem_watch);
	ck_assert_int_eq(t_parse("oom_score_adj=-1000,mem_watch=0"), 0);
	ck_assert_int_eq(o.oom_score_adj, -1000);
	ck_assert(o.oom_score_adj_given);
	ck_assert(!o.mem_watch);
	ck_assert_int_eq(t_parse("oom_score_adj=1000,mem_watch"), 0);
	ck_assert_int_eq(o.oom_score_adj, 1000);
	ck_assert(o.mem_watch);
	t_refused("oom_score_adj=-1001", "oom_score_adj: value -1001 out of range -1000-1000");
	t_refused("oom_score_adj=12a", "oom_score_adj: '12a' is not a number");
	t_refused("oom_score_adj", "oom_score_adj: needs a value");
	t_refused("mem_watch=2", "mem_watch: '2' is not 0 or 1");
}
END_TEST

START_TEST(domain_name)
{
	ck_assert_int_eq(t_parse("domain=main-1.a_b"), 0);
	ck_assert_str_eq(o.domain, "main-1.a_b");
	ck_assert_str_eq(o.fuse_opts, "");
	t_refused("domain=", "domain: needs a name");
	t_refused("domain=.hidden", "not starting with '.'");
	t_refused("domain=a/b", "only letters, digits");
	t_refused("domain=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		  "1-64 characters");
}
END_TEST

/*
 * A joiner's options over the domain's: the domain's own values pass,
 * device options are free, a domain option set otherwise is named.
 */
START_TEST(domain_options)
{
	struct wbcfs_options dom, j;
	struct dirty_tunables live;

	options_default(&dom);
	ck_assert_int_eq(options_parse(&dom, "cache_size=96M,dirty_bytes=8M,zones=2", err,
				       sizeof(err)), 0);
	options_default(&j);
	options_domain_seed(&j, &dom, NULL);
	ck_assert_int_eq(options_parse(&j, "cache_size=96M,io_engine=psync,min_ratio=5,"
				       "max_ratio=50,strictlimit,queue_depth=8", err, sizeof(err)), 0);
	ck_assert_ptr_null(options_domain_conflict(&dom, &j));
	ck_assert_uint_eq(j.cache_size, 96u << 20);
	ck_assert_uint_eq(j.nr_zones, 2);
	ck_assert_uint_eq(atomic_load(&j.dirty.dirty_bytes), 8u << 20);
	ck_assert_uint_eq(atomic_load(&j.dirty.dirty_ratio), 0);
	ck_assert_int_eq(options_parse(&j, "cache_size=64M", err, sizeof(err)), 0);
	ck_assert_str_eq(options_domain_conflict(&dom, &j), "cache_size");
	options_domain_seed(&j, &dom, NULL);
	ck_assert_int_eq(options_parse(&j, "dirty_ratio=30", err, sizeof(err)), 0);
	ck_assert_str_eq(options_domain_conflict(&dom, &j), "dirty_ratio");
	options_domain_seed(&j, &dom, NULL);
	ck_assert_int_eq(options_parse(&j, "zones=4", err, sizeof(err)), 0);
	ck_assert_str_eq(options_domain_conflict(&dom, &j), "zones");
	options_domain_seed(&j, &dom, NULL);
	ck_assert_int_eq(options_parse(&j, "throttle=simple", err, sizeof(err)), 0);
	ck_assert_str_eq(options_domain_conflict(&dom, &j), "throttle");
	options_domain_seed(&j, &dom, NULL);
	ck_assert_int_eq(options_parse(&j, "flusher_model=pdflush", err, sizeof(err)), 0);
	ck_assert_str_eq(options_domain_conflict(&dom, &j), "flusher_model");
	options_domain_seed(&j, &dom, NULL);
	ck_assert_int_eq(options_parse(&j, "pdflush_threads=2-8", err, sizeof(err)), 0);
	ck_assert_ptr_null(options_domain_conflict(&dom, &j));	/* the default, restated */
	ck_assert_int_eq(options_parse(&j, "pdflush_threads=1", err, sizeof(err)), 0);
	ck_assert_str_eq(options_domain_conflict(&dom, &j), "pdflush_threads");
	/* tunables changed live since: the live values are the domain's */
	live = dom.dirty;
	dirty_tunable_set(&live, DT_DIRTY_EXPIRE_CENTISECS, 100);
	options_default(&j);
	options_domain_seed(&j, &dom, &live);
	ck_assert_uint_eq(atomic_load(&j.dirty.dirty_expire_centisecs), 100);
	ck_assert_str_eq(options_domain_conflict(&dom, &j), "dirty_expire_centisecs");
}
END_TEST

START_TEST(transport)
{
	ck_assert_int_eq(t_parse("transport=uring"), 0);
	ck_assert_int_eq(o.transport, TRANSPORT_URING);
	ck_assert_int_eq(t_parse("transport=dev"), 0);
	ck_assert_int_eq(o.transport, TRANSPORT_DEV);
	ck_assert_int_eq(t_parse("transport=auto"), 0);
	ck_assert_int_eq(o.transport, TRANSPORT_AUTO);
	ck_assert_str_eq(o.fuse_opts, "");
	t_refused("transport", "transport: '' is not one of auto, uring, dev");
}
END_TEST

START_TEST(flusher_model)
{
	ck_assert_int_eq(o.flusher_model, FLUSHER_MODEL_BDI);
	ck_assert_int_eq(t_parse("flusher_model=pdflush"), 0);
	ck_assert_int_eq(o.flusher_model, FLUSHER_MODEL_PDFLUSH);
	ck_assert_int_eq(t_parse("flusher_model=bdi"), 0);
	ck_assert_int_eq(o.flusher_model, FLUSHER_MODEL_BDI);
	ck_assert_str_eq(o.fuse_opts, "");
	t_refused("flusher_model=percpu", "flusher_model: 'percpu' is not one of bdi, pdflush");
}
END_TEST

/* ext4's words for a mount that does not replay the journal; ro only */
START_TEST(norecovery)
{
	ck_assert(!o.norecovery);
	ck_assert_int_eq(t_parse("norecovery"), 0);
	ck_assert(o.norecovery);
	ck_assert_str_eq(o.fuse_opts, "");
	options_default(&o);
	/* without ro it is refused where the device is opened (ext4.c) */
	ck_assert_int_eq(t_parse("ro,noload"), 0);
	ck_assert(o.norecovery && o.ro);
	t_refused("noload=1", "noload: takes no value");
}
END_TEST

START_TEST(pdflush_threads)
{
	ck_assert_uint_eq(o.pdflush_min, 2);
	ck_assert_uint_eq(o.pdflush_max, 8);
	ck_assert_int_eq(options_check(&o, err, sizeof(err)), 0);
	ck_assert_int_eq(t_parse("pdflush_threads=1"), 0);
	ck_assert_uint_eq(o.pdflush_min, 1);
	ck_assert_uint_eq(o.pdflush_max, 1);
	/* without the pool it means nothing: refused once all -o are read */
	ck_assert_int_eq(options_check(&o, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "pdflush_threads: only with flusher_model=pdflush");
	ck_assert_int_eq(t_parse("flusher_model=pdflush"), 0);
	ck_assert_int_eq(options_check(&o, err, sizeof(err)), 0);
	ck_assert_int_eq(t_parse("pdflush_threads=3-64"), 0);
	ck_assert_uint_eq(o.pdflush_min, 3);
	ck_assert_uint_eq(o.pdflush_max, 64);
	ck_assert_str_eq(o.fuse_opts, "");
	t_refused("pdflush_threads", "pdflush_threads: needs N or MIN-MAX");
	t_refused("pdflush_threads=0", "pdflush_threads: value 0 out of range 1-64");
	t_refused("pdflush_threads=65", "pdflush_threads: value 65 out of range 1-64");
	t_refused("pdflush_threads=2-65", "pdflush_threads: value 65 out of range 1-64");
	t_refused("pdflush_threads=4-2", "pdflush_threads: 4-2: the minimum is above the maximum");
	t_refused("pdflush_threads=two", "pdflush_threads: 'two' is not a number");
	t_refused("pdflush_threads=2-", "pdflush_threads: '' is not a number");
	/* a refused value leaves the last good one */
	ck_assert_uint_eq(o.pdflush_min, 3);
	ck_assert_uint_eq(o.pdflush_max, 64);
}
END_TEST

START_TEST(write_log)
{
	ck_assert_int_eq(t_parse("write_log=/tmp/wl,io_engine=psync"), 0);
	ck_assert_str_eq(o.write_log, "/tmp/wl");
	ck_assert_int_eq(o.io_engine, IO_ENGINE_PSYNC);
	ck_assert_str_eq(o.fuse_opts, "");
	ck_assert_int_eq(t_parse("write_log=rel/wl"), 0);
	ck_assert_str_eq(o.write_log, "rel/wl");
	t_refused("write_log", "write_log: needs a file name");
	t_refused("write_log=", "write_log: needs a file name");
}
END_TEST

START_TEST(ctl_name)
{
	char longname[300];

	ck_assert_int_eq(t_parse("ctl_name=.control"), 0);
	ck_assert_str_eq(o.ctl_name, ".control");
	ck_assert_str_eq(o.fuse_opts, "");
	t_refused("ctl_name", "ctl_name: needs a value");
	t_refused("ctl_name=", "ctl_name: needs a value");
	t_refused("ctl_name=a/b", "ctl_name: 'a/b' is not a file name");
	t_refused("ctl_name=.", "is not a file name");
	t_refused("ctl_name=..", "is not a file name");
	memset(longname, 'n', sizeof(longname));
	memcpy(longname, "ctl_name=", 9);
	longname[9 + 256] = 0;
	t_refused(longname, "ctl_name: longer than 255 bytes");
	longname[9 + 255] = 0;
	ck_assert_int_eq(t_parse(longname), 0);
	ck_assert_uint_eq(strlen(o.ctl_name), 255);
	ck_assert_str_eq(o.ctl_name + 250, "nnnnn");
}
END_TEST

START_TEST(sizes)
{
	uint64_t v;

	ck_assert_int_eq(options_parse_size("4096", &v), 0);
	ck_assert_uint_eq(v, 4096);
	ck_assert_int_eq(options_parse_size("64k", &v), 0);
	ck_assert_uint_eq(v, 65536);
	ck_assert_int_eq(options_parse_size("512M", &v), 0);
	ck_assert_uint_eq(v, 512ULL << 20);
	ck_assert_int_eq(options_parse_size("2G", &v), 0);
	ck_assert_uint_eq(v, 2ULL << 30);
	ck_assert_int_eq(options_parse_size("1T", &v), 0);
	ck_assert_uint_eq(v, 1ULL << 40);
	ck_assert_int_eq(options_parse_size("", &v), -EINVAL);
	ck_assert_int_eq(options_parse_size("-1", &v), -EINVAL);
	ck_assert_int_eq(options_parse_size("12X", &v), -EINVAL);
	ck_assert_int_eq(options_parse_size("1MB", &v), -EINVAL);
	ck_assert_int_eq(options_parse_size("99999999999999999999", &v), -EINVAL);
	ck_assert_int_eq(options_parse_size("20000000T", &v), -EINVAL);
}
END_TEST

START_TEST(own_options)
{
	ck_assert_int_eq(t_parse("cache_size=256M,flushers=4,io_engine=aio,queue_depth=128"), 0);
	ck_assert_uint_eq(o.cache_size, 256ULL << 20);
	ck_assert_uint_eq(o.flushers, 4);
	ck_assert_int_eq(o.io_engine, IO_ENGINE_AIO);
	ck_assert_uint_eq(o.queue_depth, 128);
	ck_assert_int_eq(t_parse("max_io_kb=512,readahead_kb=0,io_engine=psync"), 0);
	ck_assert_uint_eq(o.max_io_kb, 512);
	ck_assert_uint_eq(o.readahead_kb, 0);
	ck_assert_int_eq(o.io_engine, IO_ENGINE_PSYNC);
	ck_assert_int_eq(t_parse("fault_inject"), 0);
	ck_assert(o.fault_inject);
	ck_assert_int_eq(t_parse("fault_inject=1"), -EINVAL);
	ck_assert_int_eq(t_parse("lockstat"), 0);
	ck_assert(o.lockstat);
	ck_assert_int_eq(t_parse("lockstat=1"), -EINVAL);
	ck_assert_int_eq(t_parse("prefault=1G"), 0);
	ck_assert_uint_eq(o.prefault_bytes, 1ULL << 30);
	ck_assert_int_eq(t_parse("prefault=0"), 0);
	ck_assert_uint_eq(o.prefault_bytes, 0);
	ck_assert_int_eq(t_parse("prefault=all"), 0);
	ck_assert_uint_eq(o.prefault_bytes, UINT64_MAX);
	t_refused("prefault=some", "prefault: 'some' is not a size");
	/* cache_min: a floor of at least 4M, not above cache_size */
	ck_assert_int_eq(t_parse("cache_size=1G,cache_min=128M"), 0);
	ck_assert_uint_eq(o.cache_min, 128ULL << 20);
	t_refused("cache_min=1M", "cache_min: value");
	t_refused("cache_size=64M,cache_min=128M", "cache_min: 134217728 is above cache_size");
	ck_assert_int_eq(t_parse("cache_size=256M,cache_min=16M"), 0);
	ck_assert_uint_eq(o.max_threads, 16);
	ck_assert_int_eq(t_parse("max_threads=4"), 0);
	ck_assert_uint_eq(o.max_threads, 4);
	t_refused("max_threads=0", "max_threads: value 0 out of range 1-256");
	ck_assert_uint_eq(o.poll_us, 50);
	ck_assert_int_eq(t_parse("poll_us=0"), 0);
	ck_assert_uint_eq(o.poll_us, 0);
	t_refused("poll_us=1001", "poll_us: value 1001 out of range 0-1000");
	ck_assert_int_eq(t_parse("ro,fsck,allow_other"), 0);
	ck_assert(o.ro && o.fsck && o.allow_other);
	ck_assert_int_eq(t_parse("dirty_expire_centisecs=100,dirty_writeback_centisecs=0"), 0);
	ck_assert_uint_eq(o.dirty.dirty_expire_centisecs, 100);
	ck_assert_uint_eq(o.dirty.dirty_writeback_centisecs, 0);
}
END_TEST

START_TEST(ratio_and_bytes_exclude)
{
	ck_assert_int_eq(t_parse("dirty_bytes=64M"), 0);
	ck_assert_uint_eq(o.dirty.dirty_bytes, 64ULL << 20);
	ck_assert_uint_eq(o.dirty.dirty_ratio, 0);
	ck_assert_int_eq(t_parse("dirty_ratio=30"), 0);
	ck_assert_uint_eq(o.dirty.dirty_bytes, 0);
	ck_assert_int_eq(t_parse("dirty_background_bytes=1M,dirty_background_ratio=5"), 0);
	ck_assert_uint_eq(o.dirty.dirty_background_bytes, 0);
	ck_assert_uint_eq(o.dirty.dirty_background_ratio, 5);
}
END_TEST

START_TEST(throttle_options)
{
	ck_assert_uint_eq(o.throttle, THROTTLE_IOLESS);
	ck_assert_uint_eq(o.max_ratio, 100);
	ck_assert_uint_eq(o.max_pause_ms, 200);
	ck_assert(!o.strictlimit);
	ck_assert_int_eq(t_parse("throttle=simple,strictlimit,min_ratio=5,max_ratio=50,"
				 "max_pause_ms=100"), 0);
	ck_assert_uint_eq(o.throttle, THROTTLE_SIMPLE);
	ck_assert(o.strictlimit);
	ck_assert_uint_eq(o.min_ratio, 5);
	ck_assert_uint_eq(o.max_ratio, 50);
	ck_assert_uint_eq(o.max_pause_ms, 100);
	ck_assert_int_eq(t_parse("strictlimit=0,throttle=ioless"), 0);
	ck_assert(!o.strictlimit);
	ck_assert_uint_eq(o.throttle, THROTTLE_IOLESS);
	ck_assert_int_eq(t_parse("throttle=writeback"), 0);
	ck_assert_uint_eq(o.throttle, THROTTLE_WRITEBACK);
}
END_TEST

/* zones=N, zones=SIZE:SIZE (cache_size follows, or must agree), the policies. */
START_TEST(zone_options)
{
	int ids[8];

	ck_assert_uint_eq(o.nr_zones, 0);
	ck_assert(o.fair_zone_alloc);
	ck_assert(o.zone_dirty);
	ck_assert_int_eq(t_parse("zones=4,fair_zone_alloc=0,zone_dirty=0"), 0);
	ck_assert_uint_eq(o.nr_zones, 4);
	ck_assert_uint_eq(o.zone_bytes[0], 0);
	ck_assert(!o.fair_zone_alloc);
	ck_assert(!o.zone_dirty);
	ck_assert_int_eq(t_parse("zones=64M:960M"), 0);
	ck_assert_uint_eq(o.nr_zones, 2);
	ck_assert_uint_eq(o.zone_bytes[0], 64ULL << 20);
	ck_assert_uint_eq(o.zone_bytes[1], 960ULL << 20);
	ck_assert_uint_eq(o.cache_size, 1ULL << 30);	/* from the sizes */
	options_default(&o);
	ck_assert_int_eq(t_parse("cache_size=512M,zones=64M:448M,fair_zone_alloc,zone_dirty"), 0);
	ck_assert_uint_eq(o.cache_size, 512ULL << 20);
	ck_assert(o.fair_zone_alloc && o.zone_dirty);
	ck_assert_int_eq(options_parse_nodelist("0-2,5\n", ids, 8), 4);
	ck_assert_int_eq(ids[3], 5);
	ck_assert_int_eq(options_parse_nodelist("0", ids, 8), 1);
	ck_assert_int_eq(options_parse_nodelist("", ids, 8), -EINVAL);
	ck_assert_int_eq(options_parse_nodelist("3-1", ids, 8), -EINVAL);
	ck_assert_int_eq(options_parse_nodelist("0-9", ids, 8), -EINVAL);
}
END_TEST

START_TEST(bad_values_named)
{
	t_refused("dirty_ratio=150", "dirty_ratio");
	t_refused("dirty_ratio=150", "out of range");
	t_refused("dirty_background_ratio=abc", "dirty_background_ratio: 'abc' is not a number");
	t_refused("cache_size=lots", "cache_size: 'lots' is not a size");
	t_refused("cache_size=4k", "cache_size");
	t_refused("dirty_bytes=4096", "dirty_bytes");
	t_refused("flushers=0", "flushers");
	t_refused("flushers=17", "flushers");
	t_refused("queue_depth=", "queue_depth");
	t_refused("queue_depth", "queue_depth: needs a value");
	t_refused("max_io_kb=6", "multiple of 4");
	t_refused("max_io_kb=8192", "max_io_kb");
	t_refused("readahead_kb=-4", "readahead_kb");
	t_refused("io_engine=spdk", "io_engine");
	t_refused("transport=splice", "transport");
	t_refused("throttle=fast", "throttle: 'fast' is not one of ioless, simple, writeback");
	t_refused("strictlimit=2", "strictlimit");
	t_refused("max_pause_ms=0", "max_pause_ms");
	t_refused("max_ratio=101", "max_ratio");
	t_refused("min_ratio=60,max_ratio=50", "min_ratio: 60 is above max_ratio 50");
	t_refused("ro=1", "ro: takes no value");
	t_refused("zones=0", "zones");
	t_refused("zones=65", "zones");
	t_refused("zones=", "zones: needs a count");
	t_refused("zones=64M:lots", "zones: 'lots' is not a size");
	t_refused("zones=512k:64M", "zones: '512k' is not a size of at least 1M");
	t_refused("cache_size=512M,zones=64M:64M", "zones: sizes add up to 134217728 bytes, "
		  "cache_size is 536870912");
	t_refused("cache_size=4M,zones=8", "zones: 8 zones of cache_size 4194304 are below 1M");
	t_refused("fair_zone_alloc=yes", "fair_zone_alloc: 'yes' is not 0 or 1");
	t_refused("zone_dirty=2", "zone_dirty");
	t_refused("frobnicate", "unknown option 'frobnicate'");
	t_refused("cache_size=64M,bogus=1", "unknown option 'bogus'");
}
END_TEST

START_TEST(fuse_options_pass_through)
{
	ck_assert_int_eq(t_parse("allow_root,nosuid,nodev,fsname=mydisk,subtype=x,noexec"), 0);
	ck_assert_str_eq(o.fuse_opts, "allow_root,nosuid,nodev,fsname=mydisk,subtype=x,noexec");
}
END_TEST

START_TEST(fstab_words_dropped)
{
	ck_assert_int_eq(t_parse("defaults,noauto,nofail,_netdev,user,relatime,nodiratime,"
				 "x-systemd.automount,rw,lazytime"), 0);
	ck_assert_str_eq(o.fuse_opts, "");
	ck_assert(!o.ro);
}
END_TEST

START_TEST(atime_words)
{
	ck_assert_int_eq(options_atime_mode(&o), ATIME_RELATIME);
	ck_assert_int_eq(t_parse("relatime,norelatime"), 0);
	ck_assert_int_eq(options_atime_mode(&o), ATIME_RELATIME);
	ck_assert_int_eq(t_parse("noatime"), 0);
	ck_assert_int_eq(options_atime_mode(&o), ATIME_NOATIME);
	ck_assert_str_eq(o.fuse_opts, "noatime");
	/* strictatime wins over noatime, in either order */
	ck_assert_int_eq(t_parse("strictatime"), 0);
	ck_assert_int_eq(options_atime_mode(&o), ATIME_STRICT);
	ck_assert_int_eq(t_parse("nostrictatime"), 0);
	ck_assert_int_eq(options_atime_mode(&o), ATIME_NOATIME);
	ck_assert_int_eq(t_parse("atime"), 0);
	ck_assert_int_eq(options_atime_mode(&o), ATIME_RELATIME);
	ck_assert(!o.nodiratime);
	ck_assert_int_eq(t_parse("nodiratime"), 0);
	ck_assert(o.nodiratime);
	ck_assert_int_eq(t_parse("diratime"), 0);
	ck_assert(!o.nodiratime);
	t_refused("strictatime=1", "strictatime: takes no value");
}
END_TEST

/* ext4's spellings; the last one given wins */
START_TEST(auto_da_alloc)
{
	ck_assert_int_eq(t_parse("noauto_da_alloc"), 0);
	ck_assert(!o.auto_da_alloc);
	ck_assert_int_eq(t_parse("auto_da_alloc"), 0);
	ck_assert(o.auto_da_alloc);
	ck_assert_int_eq(t_parse("auto_da_alloc=0"), 0);
	ck_assert(!o.auto_da_alloc);
	ck_assert_int_eq(t_parse("auto_da_alloc=1"), 0);
	ck_assert(o.auto_da_alloc);
	ck_assert_int_eq(t_parse("auto_da_alloc=1,noauto_da_alloc"), 0);
	ck_assert(!o.auto_da_alloc);
	ck_assert_str_eq(o.fuse_opts, "");
	t_refused("auto_da_alloc=2", "auto_da_alloc: '2' is not 0 or 1");
	t_refused("noauto_da_alloc=1", "noauto_da_alloc: takes no value");
}
END_TEST

/* sync and dirsync are the daemon's to honour, and the kernel's mount flags */
START_TEST(sync_words)
{
	ck_assert(!o.sync && !o.dirsync);
	ck_assert_int_eq(t_parse("sync"), 0);
	ck_assert(o.sync && !o.dirsync);
	ck_assert_str_eq(o.fuse_opts, "sync");
	ck_assert_int_eq(t_parse("async,dirsync"), 0);
	ck_assert(!o.sync && o.dirsync);
	ck_assert_str_eq(o.fuse_opts, "sync,async,dirsync");
	t_refused("sync=1", "sync: takes no value");
}
END_TEST

static Suite *options_suite(void)
{
	Suite *s = suite_create("options");
	TCase *tc;

	tc = t_tcase(s, "parse", defaults, memory_options, sizes, own_options,
		     ratio_and_bytes_exclude, ctl_name, write_log, transport, domain_name,
		     domain_options, flusher_model, pdflush_threads, norecovery, atime_words,
		     auto_da_alloc, sync_words);
	tcase_add_checked_fixture(tc, setup, NULL);
	tc = t_tcase(s, "errors", zone_options, bad_values_named, throttle_options);
	tcase_add_checked_fixture(tc, setup, NULL);
	tc = t_tcase(s, "pass_through", fuse_options_pass_through, fstab_words_dropped);
	tcase_add_checked_fixture(tc, setup, NULL);
	return s;
}

int main(void)
{
	return t_run(options_suite());
}
