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
 * periodic interval at each flusher tick of at most 100 ms). The
 * statistics files' text is ctl_stats.c's; the tunable files' names,
 * ranges and kinds are the tunables table's (tunables.h).
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
#include "daemon_i.h"

#define CTL_ATTR_TIMEOUT 1.0

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

/* The tunable files are the table's live tunables (tunables.h), by id. */
const char *ctl_tunable_name(unsigned which)
{
	return which < CTL_NR_TUNABLES ? tunables[which].name : NULL;
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

/*
 * A size as the mount options take it (cache_size, cache_min), blanks
 * around it allowed.
 */
static int ctl_parse_size(const char *buf, size_t len, uint64_t *out)
{
	char s[32];

	while (len && ctl_blank(buf[len - 1]))
		len--;
	while (len && ctl_blank(*buf)) {
		buf++;
		len--;
	}
	if (!len || len >= sizeof(s))
		return -EINVAL;
	memcpy(s, buf, len);
	s[len] = 0;
	return options_parse_size(s, out);
}

/*
 * The written text as the tunable's kind has it: a choice by name, a
 * size with suffixes, else a number as /proc/sys takes it (TF_PLAIN: the
 * dirty_*bytes, as /proc/sys/vm has them).
 */
static int ctl_tunable_parse(const struct tunable *d, const char *buf, size_t len,
			     uint64_t *v)
{
	if (d->kind == TK_CHOICE)
		return tunable_choice_parse(d, buf, len, v);
	if (d->kind == TK_SIZE && !(d->flags & TF_PLAIN))
		return ctl_parse_size(buf, len, v);
	return ctl_parse_u64(buf, len, v);
}

/*
 * Set a checked value where the running mount reads it. The ceiling moves
 * the target with it (cache_set_ceiling); a lower one makes kswapd give
 * pages back at once. Context: ctl_tun_lock held, except for the cache's
 * sizes (cache_set_* take the cache's size_lock).
 */
static int ctl_tunable_store(const struct ctl_tunables *t, unsigned which, uint64_t v)
{
	switch (which) {
	case TUN_CACHE_SIZE:
		return cache_set_ceiling(t->cache, v >> PAGE_SHIFT);
	case TUN_CACHE_MIN:
		return cache_set_floor(t->cache, v >> PAGE_SHIFT);
	case TUN_THROTTLE:
		atomic_store(&t->throttle->mode, (int)v);
		return 0;
	case TUN_READAHEAD_KB:
		__atomic_store_n(t->readahead_kb, (unsigned)v, __ATOMIC_RELAXED);
		return 0;
	case TUN_MIN_RATIO:		/* as bdi_set_min_ratio: not above max_ratio */
		if (v > atomic_load(&t->tw->max_ratio))
			return -EINVAL;
		atomic_store(&t->tw->min_ratio, (unsigned)v);
		return 0;
	case TUN_MAX_RATIO:
		if (v < atomic_load(&t->tw->min_ratio))
			return -EINVAL;
		atomic_store(&t->tw->max_ratio, (unsigned)v);
		return 0;
	case TUN_STRICTLIMIT:
		atomic_store(&t->tw->strictlimit, v != 0);
		return 0;
	case TUN_MAX_PAUSE_MS:
		atomic_store(&t->throttle->max_pause_ms, (unsigned)v);
		return 0;
	case TUN_FAIR_ZONE_ALLOC:
		atomic_store(t->fair_zone_alloc, (unsigned)v);
		return 0;
	case TUN_ZONE_DIRTY:
		atomic_store(t->zone_dirty, (unsigned)v);
		return 0;
	default:
		if (which < NR_DIRTY_TUNABLES)
			return dirty_tunable_set(t->dirty, (enum dirty_tunable)which, v);
		return -EINVAL;
	}
}

int ctl_tunable_write(const struct ctl_tunables *t, unsigned which, const char *buf,
		      size_t len)
{
	const struct tunable *d;
	uint64_t v;
	int ret;

	if (which >= CTL_NR_TUNABLES)
		return -EINVAL;
	d = &tunables[which];
	if (ctl_tunable_parse(d, buf, len, &v) || tunable_check(d, v, true))
		return -EINVAL;
	if (which == TUN_CACHE_SIZE || which == TUN_CACHE_MIN)
		return t->cache ? ctl_tunable_store(t, which, v) : -EINVAL;
	pthread_mutex_lock(&ctl_tun_lock);
	ret = ctl_tunable_store(t, which, v);
	pthread_mutex_unlock(&ctl_tun_lock);
	return ret;
}

uint64_t ctl_tunable_read(const struct ctl_tunables *t, unsigned which)
{
	switch (which) {
	case TUN_READAHEAD_KB: return __atomic_load_n(t->readahead_kb, __ATOMIC_RELAXED);
	case TUN_MIN_RATIO: return atomic_load(&t->tw->min_ratio);
	case TUN_MAX_RATIO: return atomic_load(&t->tw->max_ratio);
	case TUN_STRICTLIMIT: return atomic_load(&t->tw->strictlimit);
	case TUN_MAX_PAUSE_MS: return atomic_load(&t->throttle->max_pause_ms);
	case TUN_THROTTLE: return (uint64_t)atomic_load(&t->throttle->mode);
	case TUN_FAIR_ZONE_ALLOC: return atomic_load(t->fair_zone_alloc);
	case TUN_ZONE_DIRTY: return atomic_load(t->zone_dirty);
	case TUN_CACHE_SIZE:
		return t->cache ? (uint64_t)cache_ceiling_pages(t->cache) << PAGE_SHIFT : 0;
	case TUN_CACHE_MIN:
		return t->cache ? (uint64_t)cache_floor_pages(t->cache) << PAGE_SHIFT : 0;
	default:
		if (which < NR_DIRTY_TUNABLES)
			return dirty_tunable_get(t->dirty, (enum dirty_tunable)which);
		return 0;
	}
}

int ctl_tunable_print(const struct ctl_tunables *t, unsigned which, struct ctl_buf *b)
{
	const struct tunable *d = &tunables[which];

	if (d->kind == TK_CHOICE)
		return ctl_buf_printf(b, "%s\n", d->choice((unsigned)ctl_tunable_read(t, which)));
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
	CTL_NODE_NBD,		/* NBD mounts only; "rbd" on RBD mounts */
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
	case CTL_NODE_NBD: return w->rbd ? "rbd" : "nbd";
	default: return ctl_tunable_name(node - CTL_NODE_TUN0);
	}
}

/*
 * Whether @node is in this mount's directory (nbd: NBD mounts only; the
 * same node is rbd on RBD mounts: a device is one or the other).
 */
static bool ctl_node_present(const struct wbfs *w, unsigned node)
{
	return node != CTL_NODE_NBD || w->nbd || w->rbd;
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

		if (w->rbd)
			rbdev_show(w->rbd, buf, sizeof(buf));
		else if (w->nbd)
			nbdev_show(w->nbd, buf, sizeof(buf));
		else
			return -ENOENT;
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
