/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Shared unit-test helpers (t_ prefix, as liburing's test/helpers.c). */
#ifndef WBCFS_TEST_HELPERS_H
#define WBCFS_TEST_HELPERS_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>

#include "wbcfs/blkdev.h"
#include "wbcfs/cache.h"
#include "wbcfs/cache/mapping.h"
#include "wbcfs/flusher/bdi.h"

/** Install a fake millisecond clock starting at @start_ms. */
void t_clock_fake(uint64_t start_ms);
/** Advance the fake clock. */
void t_clock_advance(uint64_t ms);
/** Current fake time. */
uint64_t t_clock_now(void);
/** Back to the real clock. */
void t_clock_real(void);

/** A temporary file of @size bytes in /tmp (or $TMPDIR); path in @path (>= 64 bytes). Returns fd. */
int t_tmpfile(char *path, uint64_t size);

/** Run @s (verbosity from CK_VERBOSITY); EXIT_SUCCESS when nothing failed. */
int t_run(Suite *s);

/*
 * t_tcase(s, "name", test, ...): a test case of @s with these tests, in
 * this order; returns it for a timeout or a fixture. Loop tests are added
 * to a tcase_create()d one as Check has it.
 */
#define t_tcase(s, name, ...) t_tcase_add(s, name, (const TTest *[]){ __VA_ARGS__, NULL })
TCase *t_tcase_add(Suite *s, const char *name, const TTest *const *tests);

/*
 * The fake flusher every test cache has (t_cache_ops): what the cache
 * asked of it, reset by t_cache_cfg. Tests assert on the counter that
 * says what they test (kicks, pages handed over, reclaim's requests).
 */
struct t_wakeups {
	_Atomic long calls;	/* every wakeup_flusher call */
	_Atomic long pages;	/* the pages they asked for */
	_Atomic long bg;	/* the throttle's background kicks (nr 0) */
	_Atomic long vmscan;	/* reclaim's (WB_REASON_VMSCAN) */
	_Atomic long other;	/* anything but reclaim's */
};
extern struct t_wakeups t_woken;

/*
 * A cache owner whose wakeups go on to real flushers: reclaim and the
 * throttle ask every device, as the daemon's owner does. Entries still
 * NULL (a device not created yet) are passed over.
 */
struct t_bdis {
	struct bdi **b;
	unsigned n;
};

/** cache_ops.wakeup_flusher: counts in t_woken; passes the wakeup on to
 * every bdi of @owner (a struct t_bdis) when there is one. */
void t_wakeup(void *owner, long nr, enum wb_reason why);
extern const struct cache_ops t_cache_ops;

/** cache_create(@cfg) with the default tunables, t_cache_ops unless @cfg
 * has ops, and t_woken zeroed; fails the test if creation fails. */
struct cache *t_cache_cfg(struct cache_config *cfg);
/** A one-zone cache of @pages pages (t_cache_cfg). */
struct cache *t_cache(size_t pages);

/*
 * Pages @first..@first+@n-1 of @m made uptodate and dirty, their bytes
 * @fill; with @stamp the first byte is the page index's low byte (which
 * page landed where, see t_block_holds).
 */
void t_dirty_pages(struct mapping *m, uint64_t first, unsigned n, char fill, bool stamp);

/** A fake device: a temporary file of 64 MiB (path in @path, reopened
 * read-only with @rdonly) behind a bdi made with @bc. Returns its fd. */
int t_bdi_file(struct bdi **b, struct bdi_config *bc, char *path, bool rdonly);
/** Destroy the bdi, close and remove its file. */
void t_bdi_file_done(struct bdi **b, int fd, const char *path);
/** Block @blk of @fd holds a page t_dirty_pages wrote with @fill; @first
 * >= 0: a stamped one, its first byte @first. */
bool t_block_holds(int fd, uint64_t blk, char fill, int first);

/* io_req completions counted by t_io_done. */
struct t_io_count {
	int done;	/* completions */
	int last_res;	/* the last one's result */
	int bad;	/* reads and writes that moved fewer bytes than asked */
};
extern struct t_io_count t_io;
/** io_req.done for requests of two iovecs: counts in t_io. */
void t_io_done(struct io_req *req, int res);

/*
 * Request @i of @nreq: a write of @bs bytes at @buf from two iovecs at
 * @iov (the halves filled 'a' + i % 26 and 'A' + i % 26), to @fd at
 * @bs * (@nreq - 1 - @i): offsets, not submission order, place the data.
 * Completes in t_io_done.
 */
void t_io_write_req(struct io_req *req, struct iovec *iov, char *buf, size_t bs, int fd,
		    unsigned i, unsigned nreq);

/*
 * An fsync loop, for several threads at once: @rounds times @n pages of
 * @m from index 0 dirtied (t_dirty_pages, a new fill each round),
 * bdi_sync_inode, and the last page read back from @fd at block @base +
 * @n - 1. 0, or the first error (-EILSEQ: the page was not on the device).
 */
int t_fsync_rounds(struct bdi *b, struct wb_inode *wi, struct mapping *m, int fd, uint64_t base,
		   unsigned rounds, unsigned n, bool stamp);

/** A fresh ext4 layout (ext2fs_initialize, 4 KiB blocks, @bpg blocks a
 * group, 64-bit) of @nblocks blocks in a temporary file (path in @path). */
struct struct_ext2_filsys *t_ext2fs(char *path, uint64_t nblocks, unsigned bpg);

#endif
