// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The control directory, /.wbcfs/ (mount option ctl_name): the cache
 * domain's /proc/vmstat (vmstat) and /proc/zoneinfo (zoneinfo), this
 * device's bdi debugfs stats (bdi, with its share of the domain's
 * writeback), the domain's devices (domain), lock statistics (lockstat)
 * and one file per live tunable, as /proc/sys/vm has them, and what the
 * mount chose where no tunable says it (transport, flusher). It is
 * virtual: its FUSE inode numbers are above
 * 2^32, where no ext4 inode number can be, and nothing done on it reaches
 * libext2fs. It is left out of the root's readdir but
 * found by lookup, shadowing a real entry of the same name. Mode 0700,
 * owned by root; the kernel checks that (default_permissions) and the
 * handlers refuse other users again with EACCES.
 *
 * A file's content is generated at open into a buffer owned by the open
 * file (seq_file's way) and served direct_io, so its size of 0 in stat
 * does not matter and reads at any offset see one consistent snapshot.
 * A write to a tunable file is parsed and applied at once; the cache and
 * the flusher read the tunables live (thresholds at each evaluation, the
 * periodic interval at each flusher tick of at most 100 ms).
 *
 * ops.c routes every request on a control inode here (ctl_ops); the
 * hooks there are one line each.
 *
 * Lock ordering: ctl_fh->lock, then ctl_tun_lock (leaf). Neither is held
 * across a fuse_reply_*.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wbcfs/lib/clock.h"
#include "wbcfs/daemon/ctl.h"
#include "wbcfs/cache/pressure.h"
#include "daemon_i.h"

#define CTL_ATTR_TIMEOUT 1.0
#define CTL_CENTISECS_MAX (100ULL * 3600 * 24 * 100)	/* 100 days */
#define CTL_DIRTY_BYTES_MIN (2 * PAGE_SIZE)
#define CTL_READAHEAD_KB_MAX 65536

/* protects: the read-modify-write of a tunable and its ratio/bytes twin */
static pthread_mutex_t ctl_tun_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- pure helpers (include/wbcfs/daemon/ctl.h) ------------------------------------ */

static int ctl_buf_reserve(struct ctl_buf *b, size_t need)
{
	size_t cap = b->cap ? b->cap : 256;
	char *p;

	if (need <= b->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int ctl_buf_printf(struct ctl_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || ctl_buf_reserve(b, b->len + (size_t)n + 1))
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

int ctl_buf_put(struct ctl_buf *b, size_t off, const void *data, size_t n)
{
	if (ctl_buf_reserve(b, off + n + 1))
		return -ENOMEM;
	if (off > b->len)
		memset(b->data + b->len, 0, off - b->len);
	memcpy(b->data + off, data, n);
	b->len = off + n;
	return 0;
}

void ctl_buf_free(struct ctl_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

/* The dirty_* names are the cache's own; the rest are the control files'. */
const char *ctl_tunable_name(unsigned which)
{
	if (which < NR_DIRTY_TUNABLES)
		return dirty_tunable_name((enum dirty_tunable)which);
	switch (which) {
	case CTL_TUN_READAHEAD_KB: return "readahead_kb";
	case CTL_TUN_MIN_RATIO: return "min_ratio";
	case CTL_TUN_MAX_RATIO: return "max_ratio";
	case CTL_TUN_STRICTLIMIT: return "strictlimit";
	case CTL_TUN_MAX_PAUSE_MS: return "max_pause_ms";
	case CTL_TUN_THROTTLE: return "throttle";
	case CTL_TUN_FAIR_ZONE_ALLOC: return "fair_zone_alloc";
	case CTL_TUN_ZONE_DIRTY: return "zone_dirty";
	case CTL_TUN_CACHE_SIZE: return "cache_size";
	case CTL_TUN_CACHE_MIN: return "cache_min";
	default: return NULL;
	}
}

static bool ctl_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n';
}

int ctl_parse_u64(const char *buf, size_t len, uint64_t *out)
{
	size_t i = 0;
	uint64_t v = 0;
	bool digits = false;

	while (i < len && ctl_blank(buf[i]))
		i++;
	for (; i < len && isdigit((unsigned char)buf[i]); i++) {
		unsigned d = (unsigned)(buf[i] - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
		digits = true;
	}
	while (i < len && ctl_blank(buf[i]))
		i++;
	if (!digits || i != len)
		return -EINVAL;
	*out = v;
	return 0;
}

/* The ranges of /proc/sys/vm (and the mount options for readahead_kb). */
static bool ctl_tunable_valid(unsigned which, uint64_t v)
{
	switch (which) {
	case DT_DIRTY_RATIO:
	case DT_DIRTY_BACKGROUND_RATIO:
		return v <= 100;
	case DT_DIRTY_BYTES:
		return v >= CTL_DIRTY_BYTES_MIN;
	case DT_DIRTY_BACKGROUND_BYTES:
		return v >= 1;
	case DT_DIRTY_EXPIRE_CENTISECS:
	case DT_DIRTY_WRITEBACK_CENTISECS:
		return v <= CTL_CENTISECS_MAX;
	case CTL_TUN_READAHEAD_KB:
		return v <= CTL_READAHEAD_KB_MAX && v % 4 == 0;
	case CTL_TUN_MIN_RATIO:
	case CTL_TUN_MAX_RATIO:
		return v <= 100;
	case CTL_TUN_STRICTLIMIT:
	case CTL_TUN_FAIR_ZONE_ALLOC:
	case CTL_TUN_ZONE_DIRTY:
		return v <= 1;
	case CTL_TUN_MAX_PAUSE_MS:
		return v >= 1 && v <= THROTTLE_MAX_PAUSE_MS_MAX;
	default:
		return false;
	}
}

/*
 * cache_size and cache_min: a size as the mount options take it. The
 * ceiling moves the target with it (cache_set_ceiling); a lower one makes
 * kswapd give pages back at once.
 */
static int ctl_cache_size_write(const struct ctl_tunables *t, unsigned which, const char *buf,
				size_t len)
{
	char s[32];
	uint64_t v;

	while (len && ctl_blank(buf[len - 1]))
		len--;
	while (len && ctl_blank(*buf)) {
		buf++;
		len--;
	}
	if (!t->cache || !len || len >= sizeof(s))
		return -EINVAL;
	memcpy(s, buf, len);
	s[len] = 0;
	if (options_parse_size(s, &v))
		return -EINVAL;
	if (which == CTL_TUN_CACHE_MIN)
		return v < OPTIONS_CACHE_MIN_MIN ? -EINVAL : cache_set_floor(t->cache, v >> PAGE_SHIFT);
	return cache_set_ceiling(t->cache, v >> PAGE_SHIFT);
}

int ctl_tunable_write(const struct ctl_tunables *t, unsigned which, const char *buf,
		      size_t len)
{
	enum throttle_mode mode;
	uint64_t v;
	int ret = 0;

	if (which == CTL_TUN_CACHE_SIZE || which == CTL_TUN_CACHE_MIN)
		return ctl_cache_size_write(t, which, buf, len);
	if (which == CTL_TUN_THROTTLE) {
		if (throttle_mode_parse(buf, len, &mode))
			return -EINVAL;
		atomic_store(&t->throttle->mode, (int)mode);
		return 0;
	}
	if (ctl_parse_u64(buf, len, &v) || !ctl_tunable_valid(which, v))
		return -EINVAL;
	pthread_mutex_lock(&ctl_tun_lock);
	switch (which) {
	case CTL_TUN_READAHEAD_KB:
		__atomic_store_n(t->readahead_kb, (unsigned)v, __ATOMIC_RELAXED);
		break;
	case CTL_TUN_MIN_RATIO:		/* as bdi_set_min_ratio: not above max_ratio */
		if (v > atomic_load(&t->tw->max_ratio))
			ret = -EINVAL;
		else
			atomic_store(&t->tw->min_ratio, (unsigned)v);
		break;
	case CTL_TUN_MAX_RATIO:
		if (v < atomic_load(&t->tw->min_ratio))
			ret = -EINVAL;
		else
			atomic_store(&t->tw->max_ratio, (unsigned)v);
		break;
	case CTL_TUN_STRICTLIMIT:
		atomic_store(&t->tw->strictlimit, v != 0);
		break;
	case CTL_TUN_MAX_PAUSE_MS:
		atomic_store(&t->throttle->max_pause_ms, (unsigned)v);
		break;
	case CTL_TUN_FAIR_ZONE_ALLOC:
		atomic_store(t->fair_zone_alloc, (unsigned)v);
		break;
	case CTL_TUN_ZONE_DIRTY:
		atomic_store(t->zone_dirty, (unsigned)v);
		break;
	default:
		ret = dirty_tunable_set(t->dirty, (enum dirty_tunable)which, v);
		break;
	}
	pthread_mutex_unlock(&ctl_tun_lock);
	return ret;
}

uint64_t ctl_tunable_read(const struct ctl_tunables *t, unsigned which)
{
	switch (which) {
	case CTL_TUN_READAHEAD_KB: return __atomic_load_n(t->readahead_kb, __ATOMIC_RELAXED);
	case CTL_TUN_MIN_RATIO: return atomic_load(&t->tw->min_ratio);
	case CTL_TUN_MAX_RATIO: return atomic_load(&t->tw->max_ratio);
	case CTL_TUN_STRICTLIMIT: return atomic_load(&t->tw->strictlimit);
	case CTL_TUN_MAX_PAUSE_MS: return atomic_load(&t->throttle->max_pause_ms);
	case CTL_TUN_THROTTLE: return (uint64_t)atomic_load(&t->throttle->mode);
	case CTL_TUN_FAIR_ZONE_ALLOC: return atomic_load(t->fair_zone_alloc);
	case CTL_TUN_ZONE_DIRTY: return atomic_load(t->zone_dirty);
	case CTL_TUN_CACHE_SIZE:
		return t->cache ? (uint64_t)cache_ceiling_pages(t->cache) << PAGE_SHIFT : 0;
	case CTL_TUN_CACHE_MIN:
		return t->cache ? (uint64_t)cache_floor_pages(t->cache) << PAGE_SHIFT : 0;
	default: return dirty_tunable_get(t->dirty, (enum dirty_tunable)which);
	}
}

int ctl_tunable_print(const struct ctl_tunables *t, unsigned which, struct ctl_buf *b)
{
	if (which == CTL_TUN_THROTTLE)
		return ctl_buf_printf(b, "%s\n", throttle_mode_name(
			(enum throttle_mode)ctl_tunable_read(t, which)));
	return ctl_buf_printf(b, "%llu\n", (unsigned long long)ctl_tunable_read(t, which));
}

/* ---- the nodes ---------------------------------------------------------------- */

enum ctl_kind {
	CTL_DIR, CTL_VMSTAT, CTL_ZONEINFO, CTL_BDI, CTL_TRACE, CTL_JOURNAL, CTL_LOCKSTAT,
	CTL_LOCKDEP,
	CTL_TRANSPORT, CTL_DOMAIN, CTL_FLUSHER, CTL_NBD,
	CTL_TUNABLE
};

/* Node n has FUSE inode CTL_INO_BASE + n: above every 32-bit ext4 inode. */
enum {
	CTL_NODE_DIR,
	CTL_NODE_VMSTAT,
	CTL_NODE_ZONEINFO,
	CTL_NODE_BDI,
	CTL_NODE_TRACE,
	CTL_NODE_JOURNAL,
	CTL_NODE_LOCKSTAT,
	CTL_NODE_LOCKDEP,
	CTL_NODE_TRANSPORT,
	CTL_NODE_DOMAIN,
	CTL_NODE_FLUSHER,
	CTL_NODE_NBD,		/* NBD mounts only */
	CTL_NODE_TUN0,
	CTL_NR_NODES = CTL_NODE_TUN0 + CTL_NR_TUNABLES
};

static enum ctl_kind ctl_node_kind(unsigned node)
{
	switch (node) {
	case CTL_NODE_DIR: return CTL_DIR;
	case CTL_NODE_VMSTAT: return CTL_VMSTAT;
	case CTL_NODE_ZONEINFO: return CTL_ZONEINFO;
	case CTL_NODE_BDI: return CTL_BDI;
	case CTL_NODE_TRACE: return CTL_TRACE;
	case CTL_NODE_JOURNAL: return CTL_JOURNAL;
	case CTL_NODE_LOCKSTAT: return CTL_LOCKSTAT;
	case CTL_NODE_LOCKDEP: return CTL_LOCKDEP;
	case CTL_NODE_TRANSPORT: return CTL_TRANSPORT;
	case CTL_NODE_DOMAIN: return CTL_DOMAIN;
	case CTL_NODE_FLUSHER: return CTL_FLUSHER;
	case CTL_NODE_NBD: return CTL_NBD;
	default: return CTL_TUNABLE;
	}
}

static const char *ctl_node_name(struct wbfs *w, unsigned node)
{
	switch (node) {
	case CTL_NODE_DIR: return w->opts.ctl_name;
	case CTL_NODE_VMSTAT: return "vmstat";
	case CTL_NODE_ZONEINFO: return "zoneinfo";
	case CTL_NODE_BDI: return "bdi";
	case CTL_NODE_TRACE: return "trace";
	case CTL_NODE_JOURNAL: return "journal";
	case CTL_NODE_LOCKSTAT: return "lockstat";
	case CTL_NODE_LOCKDEP: return "lockdep";
	case CTL_NODE_TRANSPORT: return "transport";
	case CTL_NODE_DOMAIN: return "domain";
	case CTL_NODE_FLUSHER: return "flusher";
	case CTL_NODE_NBD: return "nbd";
	default: return ctl_tunable_name(node - CTL_NODE_TUN0);
	}
}

/* Whether @node is in this mount's directory (nbd: NBD mounts only). */
static bool ctl_node_present(const struct wbfs *w, unsigned node)
{
	return node != CTL_NODE_NBD || w->nbd;
}

/* Files that take writes: the tunables, and lockstat's switch. */
static bool ctl_node_writable(unsigned node)
{
	return ctl_node_kind(node) == CTL_TUNABLE || ctl_node_kind(node) == CTL_LOCKSTAT;
}

static mode_t ctl_node_mode(unsigned node)
{
	if (ctl_node_kind(node) == CTL_DIR)
		return S_IFDIR | 0700;
	return S_IFREG | (ctl_node_writable(node) ? 0600 : 0400);
}

bool ctl_owns(fuse_ino_t ino)
{
	return ino >= CTL_INO_BASE && ino < CTL_INO_BASE + CTL_NR_NODES;
}

static unsigned ctl_node(fuse_ino_t ino)
{
	return (unsigned)(ino - CTL_INO_BASE);
}

bool ctl_is_root_name(struct wbfs *w, fuse_ino_t parent, const char *name)
{
	return parent == FUSE_ROOT_ID && !strcmp(name, w->opts.ctl_name);
}

int ctl_check_name(struct wbfs *w, fuse_ino_t parent, const char *name)
{
	if (ctl_owns(parent) || ctl_is_root_name(w, parent, name))
		return -EPERM;
	return 0;
}

static struct wbfs *ctl_wbfs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static bool ctl_req_root(fuse_req_t req)
{
	return fuse_req_ctx(req)->uid == 0;
}

static struct ctl_tunables ctl_tunables_of(struct wbfs *w)
{
	return (struct ctl_tunables){ .dirty = &w->cache->tun,
				      .readahead_kb = &w->opts.readahead_kb,
				      .throttle = &w->cache->throttle,
				      .tw = bdi_throttle_wb(w->bdi),
				      .fair_zone_alloc = &w->cache->fair_zone_alloc,
				      .zone_dirty = &w->cache->zone_dirty,
				      .cache = w->cache };
}

static void ctl_stat(struct wbfs *w, unsigned node, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = CTL_INO_BASE + node;
	st->st_mode = ctl_node_mode(node);
	st->st_nlink = ctl_node_kind(node) == CTL_DIR ? 2 : 1;
	st->st_blksize = PAGE_SIZE;
	st->st_atim = st->st_mtim = st->st_ctim = w->ctl_time;
}

void ctl_mount_check(struct wbfs *w)
{
	ext2_ino_t ino;

	ext4_now(&w->ctl_time);
	if (dir_lookup(w, EXT2_ROOT_INO, w->opts.ctl_name, &ino) == 0)
		fprintf(msg_stream(), "wbcfs: %s: warning: /%s exists in the filesystem; the control "
			"directory hides it (mount with ctl_name=NAME to reach it)\n",
			w->dev_path, w->opts.ctl_name);
}

void ctl_hide_in_root(struct wbfs *w, struct dir_snap *snap)
{
	size_t i, k = 0;

	for (i = 0; i < snap->n; i++) {
		if (!strcmp(snap->e[i].name, w->opts.ctl_name))
			free(snap->e[i].name);
		else
			snap->e[k++] = snap->e[i];
	}
	snap->n = k;
}

/* ---- generated content ---------------------------------------------------- */

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
static int ctl_gen_vmstat(struct wbfs *w, struct ctl_buf *b)
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
			{ "nr_sync_writes", atomic_load(&w->stats.nr_sync_writes) },
			{ "nr_dirsync_ops", atomic_load(&w->stats.nr_dirsync_ops) },
			{ "nr_sync_metadata", atomic_load(&w->stats.nr_sync_metadata) },
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

static int ctl_gen_zoneinfo(struct wbfs *w, struct ctl_buf *b)
{
	unsigned i;
	int ret = 0;

	for (i = 0; i < w->cache->nr_zones && !ret; i++)
		ret = ctl_gen_zone(b, &w->cache->zones[i]);
	return ret;
}

#define K(pages) ((unsigned long)ctl_gauge(pages) * (PAGE_SIZE / 1024))

/* The layout of the kernel's debugfs bdi/<dev>/stats. */
static int ctl_gen_bdi(struct wbfs *w, struct ctl_buf *b)
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
static int ctl_gen_flusher(struct wbfs *w, struct ctl_buf *b)
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
static int ctl_gen_lockstat(struct ctl_buf *b)
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

/* "1" or "on", "0" or "off", "reset" (a trailing newline allowed). */
static int ctl_lockstat_write(const char *buf, size_t len)
{
	while (len && ctl_blank(buf[len - 1]))
		len--;
	if ((len == 1 && buf[0] == '1') || (len == 2 && !memcmp(buf, "on", 2)))
		lockstat_enable(true);
	else if ((len == 1 && buf[0] == '0') || (len == 3 && !memcmp(buf, "off", 3)))
		lockstat_enable(false);
	else if (len == 5 && !memcmp(buf, "reset", 5))
		lockstat_reset();
	else
		return -EINVAL;
	return 0;
}

/* ---- open files ----------------------------------------------------------- */

/* an open control file's: outermost, its writes change tunables */
LOCK_CLASS(lc_ctl_fh_lock, "ctl_fh_lock")

struct ctl_fh {
	pthread_mutex_t lock;	/* protects: out, in */
	unsigned node;		/* constant */
	struct ctl_buf out;	/* lock: generated at open, what reads return */
	struct ctl_buf in;	/* lock: bytes written so far, parsed at each write */
	uint64_t cursor;	/* lock: trace: the next record this reader gets */
};

static struct ctl_fh *ctl_fh_of(struct fuse_file_info *fi)
{
	return (struct ctl_fh *)(uintptr_t)fi->fh;
}

static int ctl_generate(struct wbfs *w, struct ctl_fh *f)
{
	struct ctl_tunables t = ctl_tunables_of(w);

	switch (ctl_node_kind(f->node)) {
	case CTL_VMSTAT:
		return ctl_gen_vmstat(w, &f->out);
	case CTL_ZONEINFO:
		return ctl_gen_zoneinfo(w, &f->out);
	case CTL_BDI:
		return ctl_gen_bdi(w, &f->out);
	case CTL_JOURNAL: {
		char buf[1024];

		ext4_journal_show(w, buf, sizeof(buf));
		return ctl_buf_printf(&f->out, "%s", buf);
	}
	case CTL_LOCKSTAT:
		return ctl_gen_lockstat(&f->out);
	case CTL_LOCKDEP: {	/* the lock order seen, doc/locking.md's to check */
		char *t = lockdep_report();
		int ret = t ? ctl_buf_printf(&f->out, "%s", t) : -ENOMEM;

		free(t);
		return ret;
	}
	case CTL_TRANSPORT: {
		char buf[128];

		fuse_io_transport_show(w, buf, sizeof(buf));
		return ctl_buf_printf(&f->out, "%s", buf);
	}
	case CTL_DOMAIN: {
		char buf[8192];

		domain_show(w->host, buf, sizeof(buf));
		return ctl_buf_printf(&f->out, "%s", buf);
	}
	case CTL_FLUSHER:
		return ctl_gen_flusher(w, &f->out);
	case CTL_NBD: {
		char buf[2048];

		if (!w->nbd)
			return -ENOENT;
		nbdev_show(w->nbd, buf, sizeof(buf));
		return ctl_buf_printf(&f->out, "%s", buf);
	}
	case CTL_TUNABLE:
		return ctl_tunable_print(&t, f->node - CTL_NODE_TUN0, &f->out);
	case CTL_TRACE:
		f->cursor = throttle_trace_start(&w->cache->throttle);
		return 0;
	default:
		return -EISDIR;
	}
}

/* Valid replies: fuse_reply_open, fuse_reply_err */
static void ctl_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wbfs *w = ctl_wbfs(req);
	unsigned node = ctl_node(ino);
	bool writing = (fi->flags & O_ACCMODE) != O_RDONLY;
	struct ctl_fh *f;
	int ret;

	if (!ctl_req_root(req) || (writing && !ctl_node_writable(node))) {
		fuse_reply_err(req, EACCES);
		return;
	}
	if (ctl_node_kind(node) == CTL_DIR) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_init(&f->lock, NULL);
	f->node = node;
	ret = ctl_generate(w, f);
	if (ret) {
		ctl_buf_free(&f->out);
		pthread_mutex_destroy(&f->lock);
		free(f);
		fuse_reply_err(req, -ret);
		return;
	}
	fi->fh = (uintptr_t)f;
	fi->direct_io = 1;
	fi->keep_cache = 0;
	fi->noflush = 1;	/* ctl_flush has nothing to do: no round trip at close */
	if (fuse_reply_open(req, fi) == -ENOENT) {
		ctl_buf_free(&f->out);
		pthread_mutex_destroy(&f->lock);
		free(f);
	}
}

#define CTL_TRACE_LINE 384	/* longer than any trace line */
#define CTL_TRACE_WAIT_MS 200	/* look for interrupts and unmount this often */

/*
 * Append the records a reader has not seen to @out, at most @size bytes,
 * after a "lost" line when the ring overwrote some. Returns bytes used.
 * Context: f->lock held.
 */
static size_t ctl_trace_fill(struct wbfs *w, struct ctl_fh *f, char *out, size_t size)
{
	struct throttle_trace_rec recs[32];
	size_t used = 0, max = size / CTL_TRACE_LINE, n, i;
	uint64_t lost;

	while (max) {
		n = throttle_trace_read(&w->cache->throttle, &f->cursor, recs,
					max < 32 ? max : 32, &lost);
		if (lost) {
			used += (size_t)snprintf(out + used, size - used, "%llu lost count=%llu\n",
						 (unsigned long long)(clock_now_ms() -
								      w->cache->throttle.start_ms),
						 (unsigned long long)lost);
			max = (size - used) / CTL_TRACE_LINE;
			continue;
		}
		if (!n)
			break;
		for (i = 0; i < n; i++)
			used += (size_t)throttle_trace_format(&recs[i], out + used, size - used);
		max = (size - used) / CTL_TRACE_LINE;
	}
	return used;
}

/*
 * The trace streams like trace_pipe: each read returns the records this
 * open file has not read yet, waiting while there are none (one worker
 * per blocked reader; interrupted by a signal to the reader, EAGAIN with
 * O_NONBLOCK). Offsets are ignored.
 */
static void ctl_read_trace(fuse_req_t req, struct ctl_fh *f, size_t size,
			   struct fuse_file_info *fi)
{
	struct wbfs *w = ctl_wbfs(req);
	char *buf;
	size_t n = 0;

	if (size < CTL_TRACE_LINE) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	ls_mutex_lock(&f->lock, &lc_ctl_fh_lock);
	for (;;) {
		n = ctl_trace_fill(w, f, buf, size);
		/* an exiting session delivers no INTERRUPT: its end ends the wait */
		if (n || (fi->flags & O_NONBLOCK) || fuse_req_interrupted(req) || w->destroyed ||
		    (w->se && fuse_session_exited(w->se)))
			break;
		throttle_trace_wait(&w->cache->throttle, f->cursor, CTL_TRACE_WAIT_MS);
	}
	ls_mutex_unlock(&f->lock);
	if (n)
		fuse_reply_buf(req, buf, n);
	else
		fuse_reply_err(req, (fi->flags & O_NONBLOCK) ? EAGAIN : EINTR);
	free(buf);
}

/* Valid replies: fuse_reply_buf, fuse_reply_err */
static void ctl_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct ctl_fh *f = ctl_fh_of(fi);
	char *copy = NULL;
	size_t n = 0;

	if (ctl_node_kind(f->node) == CTL_TRACE) {
		ctl_read_trace(req, f, size, fi);
		return;
	}

	ls_mutex_lock(&f->lock, &lc_ctl_fh_lock);
	if (off >= 0 && (size_t)off < f->out.len) {
		n = f->out.len - (size_t)off;
		if (n > size)
			n = size;
		copy = malloc(n);
		if (copy)
			memcpy(copy, f->out.data + off, n);
	}
	ls_mutex_unlock(&f->lock);
	if (n && !copy)
		fuse_reply_err(req, ENOMEM);
	else
		fuse_reply_buf(req, copy, n);
	free(copy);
}

/*
 * The bytes written so far at [0, off + len) are parsed as one value, so
 * a value may arrive in pieces ("2" then "0\n"). A bad value is refused
 * and forgotten; the tunable keeps its value.
 */
static int ctl_write_locked(struct wbfs *w, struct ctl_fh *f, const char *data, size_t len,
			    off_t off)
{
	struct ctl_tunables t = ctl_tunables_of(w);
	size_t old_len = f->in.len;
	int ret;

	lock_assert_held(&f->lock);

	if (off < 0 || (size_t)off > f->in.len)
		return -EINVAL;
	if (len > 4096 || (size_t)off + len > 4096)
		return -EINVAL;
	ret = ctl_buf_put(&f->in, (size_t)off, data, len);
	if (ret)
		return ret;
	if (ctl_node_kind(f->node) == CTL_LOCKSTAT)
		ret = ctl_lockstat_write(f->in.data, f->in.len);
	else
		ret = ctl_tunable_write(&t, f->node - CTL_NODE_TUN0, f->in.data, f->in.len);
	if (ret) {
		f->in.len = old_len < (size_t)off ? old_len : (size_t)off;
		return ret;
	}
	if (ctl_node_kind(f->node) == CTL_LOCKSTAT)
		return 0;
	/* thresholds may have dropped: writers and the flusher look again now */
	cache_wake_dirty(w->cache);
	bdi_wakeup(w->bdi, 0, WB_REASON_BACKGROUND);
	return 0;
}

/* Valid replies: fuse_reply_write, fuse_reply_err */
static void ctl_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	struct ctl_fh *f = ctl_fh_of(fi);
	int ret;

	if (!ctl_req_root(req) || !ctl_node_writable(f->node)) {
		fuse_reply_err(req, EACCES);
		return;
	}
	ls_mutex_lock(&f->lock, &lc_ctl_fh_lock);
	ret = ctl_write_locked(ctl_wbfs(req), f, buf, size, off);
	ls_mutex_unlock(&f->lock);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_write(req, size);
}

/* Valid replies: fuse_reply_err */
static void ctl_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ctl_fh *f = ctl_fh_of(fi);

	ctl_buf_free(&f->out);
	ctl_buf_free(&f->in);
	pthread_mutex_destroy(&f->lock);
	free(f);
	fuse_reply_err(req, 0);
}

/* Valid replies: fuse_reply_err */
static void ctl_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

/* Valid replies: fuse_reply_err */
static void ctl_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

/* ---- attributes, names, directory ------------------------------------------ */

/* Valid replies: fuse_reply_entry, fuse_reply_err */
static void ctl_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct wbfs *w = ctl_wbfs(req);
	struct fuse_entry_param e;
	unsigned node;

	memset(&e, 0, sizeof(e));
	if (parent == FUSE_ROOT_ID) {
		node = CTL_NODE_DIR;
	} else {
		if (!ctl_req_root(req)) {
			fuse_reply_err(req, EACCES);
			return;
		}
		for (node = CTL_NODE_VMSTAT; node < CTL_NR_NODES; node++)
			if (ctl_node_present(w, node) && !strcmp(name, ctl_node_name(w, node)))
				break;
		if (node == CTL_NR_NODES) {
			fuse_reply_err(req, ENOENT);
			return;
		}
	}
	ctl_stat(w, node, &e.attr);
	e.ino = CTL_INO_BASE + node;
	e.attr_timeout = CTL_ATTR_TIMEOUT;
	e.entry_timeout = CTL_ATTR_TIMEOUT;
	fuse_reply_entry(req, &e);
}

/* Nodes are static: nothing to forget. Valid replies: fuse_reply_none */
static void ctl_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fuse_reply_none(req);
}

/* Valid replies: fuse_reply_attr, fuse_reply_err */
static void ctl_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	ctl_stat(ctl_wbfs(req), ctl_node(ino), &st);
	fuse_reply_attr(req, &st, CTL_ATTR_TIMEOUT);
}

/*
 * Truncation of a tunable file (`echo 5 > f` without atomic O_TRUNC) and
 * time updates are accepted and change nothing; mode and owner are fixed.
 * Valid replies: fuse_reply_attr, fuse_reply_err
 */
static void ctl_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
			struct fuse_file_info *fi)
{
	unsigned node = ctl_node(ino);
	struct stat st;

	if (!ctl_req_root(req)) {
		fuse_reply_err(req, EACCES);
		return;
	}
	if (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if ((to_set & FUSE_SET_ATTR_SIZE) && !ctl_node_writable(node)) {
		fuse_reply_err(req, ctl_node_kind(node) == CTL_DIR ? EISDIR : EACCES);
		return;
	}
	ctl_stat(ctl_wbfs(req), node, &st);
	fuse_reply_attr(req, &st, CTL_ATTR_TIMEOUT);
}

/* Valid replies: fuse_reply_open, fuse_reply_err */
static void ctl_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (!ctl_req_root(req))
		fuse_reply_err(req, EACCES);
	else if (ctl_node_kind(ctl_node(ino)) != CTL_DIR)
		fuse_reply_err(req, ENOTDIR);
	else
		fuse_reply_open(req, fi);
}

/* Entry i (offset i + 1): ".", "..", then the nodes. */
static bool ctl_dirent(struct wbfs *w, size_t i, const char **name, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	if (i == 0 || i == 1) {
		*name = i ? ".." : ".";
		st->st_ino = i ? FUSE_ROOT_ID : CTL_INO_BASE + CTL_NODE_DIR;
		st->st_mode = S_IFDIR;
		return true;
	}
	i--;
	if (i >= CTL_NODE_NBD && !ctl_node_present(w, CTL_NODE_NBD))
		i++;	/* not an NBD mount: no nbd file */
	if (i >= CTL_NR_NODES)
		return false;
	*name = ctl_node_name(w, (unsigned)i);
	st->st_ino = CTL_INO_BASE + i;
	st->st_mode = ctl_node_mode((unsigned)i) & S_IFMT;
	return true;
}

/* Valid replies: fuse_reply_buf, fuse_reply_err */
static void ctl_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	struct wbfs *w = ctl_wbfs(req);
	char *buf = malloc(size ? size : 1);
	size_t used = 0, i;
	const char *name;
	struct stat st;

	if (!buf || !ctl_req_root(req)) {	/* no OPENDIR may have checked */
		fuse_reply_err(req, buf ? EACCES : ENOMEM);
		free(buf);
		return;
	}
	for (i = off < 0 ? 0 : (size_t)off; ctl_dirent(w, i, &name, &st); i++) {
		size_t n = fuse_add_direntry(req, buf + used, size - used, name, &st,
					     (off_t)(i + 1));

		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

/* Valid replies: fuse_reply_err */
static void ctl_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

/* Valid replies: fuse_reply_err */
static void ctl_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

/* Valid replies: fuse_reply_err */
static void ctl_readlink(fuse_req_t req, fuse_ino_t ino)
{
	fuse_reply_err(req, EINVAL);
}

/* Valid replies: fuse_reply_err */
static void ctl_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			 size_t size, int flags)
{
	fuse_reply_err(req, EPERM);
}

/* Valid replies: fuse_reply_err */
static void ctl_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	fuse_reply_err(req, ENODATA);
}

/* Valid replies: fuse_reply_xattr, fuse_reply_buf */
static void ctl_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	if (!size)
		fuse_reply_xattr(req, 0);
	else
		fuse_reply_buf(req, NULL, 0);
}

/* Valid replies: fuse_reply_err */
static void ctl_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, ENODATA);
}

/* Valid replies: fuse_reply_err */
static void ctl_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			  struct fuse_file_info *fi)
{
	fuse_reply_err(req, EOPNOTSUPP);
}

/* Valid replies: fuse_reply_err (never ENOSYS: that would turn lseek off for the mount) */
static void ctl_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		      struct fuse_file_info *fi)
{
	fuse_reply_err(req, EINVAL);
}

/* Only the handlers ops.c routes here; lookup is routed by parent and name. */
const struct fuse_lowlevel_ops ctl_ops = {
	.lookup = ctl_lookup,
	.forget = ctl_forget,
	.getattr = ctl_getattr,
	.setattr = ctl_setattr,
	.readlink = ctl_readlink,
	.open = ctl_open,
	.read = ctl_read,
	.write = ctl_write,
	.flush = ctl_flush,
	.release = ctl_release,
	.fsync = ctl_fsync,
	.opendir = ctl_opendir,
	.readdir = ctl_readdir,
	.releasedir = ctl_releasedir,
	.fsyncdir = ctl_fsyncdir,
	.setxattr = ctl_setxattr,
	.getxattr = ctl_getxattr,
	.listxattr = ctl_listxattr,
	.removexattr = ctl_removexattr,
	.fallocate = ctl_fallocate,
	.lseek = ctl_lseek,
};

/* The operations table routes the control directory's requests through these. */
const struct ops_ctl_hooks ctl_hooks = {
	.ops = &ctl_ops,
	.owns = ctl_owns,
	.is_root_name = ctl_is_root_name,
	.check_name = ctl_check_name,
	.hide_in_root = ctl_hide_in_root,
};
