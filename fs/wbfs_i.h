/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fs/ internals: the mounted filesystem (struct wbfs), in-memory inodes
 * (struct winode) with their page mapping, extent map cache and delayed
 * allocation state, and the helpers the FUSE handlers share. libext2fs does
 * every on-disk format change, under wbfs->fs_lock; data pages move through
 * cache/ and flusher/ without that lock.
 *
 * Lock ordering (outer to inner):
 *   winode->ilock            (truncate/fallocate/writes past EOF exclusive;
 *                             reads and writes below EOF shared)
 *     page lock (PG_locked)  (data pages of that file)
 *       wbfs->fs_lock        (libext2fs; map_pages, iomgr)
 *         meta page lock     (pages of the device mapping, in iomgr)
 *         winode->ec_lock    (extent map cache)
 *         wbfs->resv_lock    (free-block mirror and reservations)
 *   wbfs->itable_lock is a leaf: never held while taking another lock
 *   except in winode_get/put, where it nests nothing that sleeps.
 *   The inval.c queue lock is a leaf. Notifications to the kernel
 *   (inval.c) are sent holding none of these: the kernel may answer them
 *   only after READs and WRITEs that take ilock and page locks.
 */
#ifndef WBCFS_FS_WBFS_I_H
#define WBCFS_FS_WBFS_I_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <ext2fs/ext2fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "wbcfs/bdi.h"
#include "wbcfs/cache.h"
#include "wbcfs/mapping.h"
#include "wbcfs/options.h"
#include "wbcfs/readahead.h"

#define WBFS_NAME_MAX 255
/* ext4 with 4 KiB blocks and extents: 2^32 blocks per file. */
#define WBFS_MAX_FILE_BYTES ((uint64_t)0xFFFFFFFFULL * 4096)
#define WBFS_LINK_MAX 65000

/* One run of the extent map: logical blocks [lblk, lblk+len) at pblk. */
struct ext_run {
	uint64_t lblk;
	uint64_t pblk;
	uint32_t len;
	bool uninit;		/* unwritten extent: reads as zeros */
};

struct winode {
	ext2_ino_t ino;				/* constant */
	struct winode *hash_next;		/* itable_lock */
	uint64_t nlookup;			/* itable_lock: FUSE lookup count */
	unsigned nopen;				/* itable_lock: open handles */
	bool evicting;				/* itable_lock: being written and torn down */
	bool unlinked;				/* fs_lock: links hit 0, free at last forget */
	bool freed;				/* fs_lock: on-disk inode released */
	mode_t mode;				/* fs_lock (format bits constant) */

	pthread_rwlock_t ilock;			/* protects: the page range and i_size
						 * against truncate/punch/fallocate;
						 * exclusive for those and for writes
						 * past EOF, shared for reads and for
						 * writes below EOF (page locks) */
	_Atomic long nr_writers;		/* atomic: writes inside ilock now */
	_Atomic bool kcached;			/* atomic: the kernel may cache pages
						 * (mmap); see inval.c */
	pthread_mutex_t attr_lock;		/* protects: size, mtime, ctime, *_dirty; leaf */
	uint64_t size;				/* attr_lock (changes also hold ilock) */
	struct timespec mtime, ctime;		/* attr_lock: valid when times_dirty */
	bool times_dirty;			/* attr_lock */
	bool size_dirty;			/* attr_lock */
	_Atomic bool has_priv;			/* atomic: mode has S_ISUID/S_ISGID */

	pthread_mutex_t ec_lock;		/* protects: runs, nr_runs, ec_valid */
	struct ext_run *runs;			/* ec_lock: sorted by lblk */
	size_t nr_runs, cap_runs;		/* ec_lock */
	bool ec_valid;				/* ec_lock */

	_Atomic long nr_delalloc;		/* atomic: reserved, unallocated pages */
	struct dcache *dcache;			/* fs_lock: names of a large directory */
	struct mapping map;
	struct wb_inode wb;
};

/* An open file: FUSE fh points here. */
struct wfile {
	struct winode *wi;
	pthread_mutex_t ra_lock;	/* protects: ra, wb_err */
	struct ra_state ra;
	errseq_t wb_err;		/* ra_lock: writeback errors reported to this
					 * open file up to here (f_wb_err) */
	int flags;			/* open(2) flags */
};

/* Filesystem-wide counters, for /.wbcfs/vmstat and the unmount log. */
struct wbfs_stats {
	_Atomic long nr_parallel_writes_max;	/* atomic: most writes inside one
						 * inode's ilock at once */
	_Atomic long nr_inval_sent;		/* atomic: page cache invalidations
						 * sent to the kernel */
};

struct wbfs {
	ext2_filsys fs;			/* fs_lock */
	pthread_mutex_t fs_lock;	/* protects: fs and every libext2fs call */
	struct cache *cache;
	struct bdi *bdi;
	int dev_fd;			/* O_RDWR|O_DIRECT (O_RDONLY for ro) */
	bool is_blkdev;
	const char *dev_path;
	uint64_t dev_bytes;
	struct wbcfs_options opts;
	bool ro;

	struct mapping meta_map;	/* the device's own pages: index == block */
	struct wb_inode meta_wb;

	pthread_mutex_t itable_lock;	/* protects: itable buckets, nlookup, nopen, evicting */
	pthread_cond_t itable_cond;	/* itable_lock: an eviction finished */
	struct winode **itable;
	size_t itable_size;
	long nr_winodes;		/* itable_lock */

	pthread_mutex_t resv_lock;	/* protects: free_blocks, reserved, free_inodes */
	int64_t free_blocks;		/* resv_lock: mirror of the superblock count */
	int64_t free_inodes;		/* resv_lock */
	int64_t reserved;		/* resv_lock: delalloc blocks promised to writers */
	int64_t headroom;		/* constant: blocks kept for metadata */
	int64_t root_reserved;		/* constant: s_r_blocks_count */
	uint64_t overhead;		/* constant: metadata blocks, for statfs */

	struct wbfs_stats stats;
	struct inval_queue *inval;	/* inval.c; NULL before the session runs */
	struct timespec ctl_time;	/* constant: mount time, the control files' times */

	struct fuse_session *se;
	bool destroyed;
	int close_ret;			/* wbfs_close's result, for the exit status */
	_Atomic long lost_pages;	/* atomic: dirty pages dropped unwritten */
};

/* ext4.c */
int wbfs_open(struct wbfs *w, const char *dev, const struct wbcfs_options *o);
int wbfs_close(struct wbfs *w);
void wbfs_lock(struct wbfs *w);
void wbfs_unlock(struct wbfs *w);
int wbfs_errno(errcode_t err);
int wbfs_read_inode(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in);
int wbfs_write_inode(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in);
void wbfs_ts_get(const struct ext2_inode_large *in, int which, struct timespec *ts);
void wbfs_ts_set(struct ext2_inode_large *in, int which, const struct timespec *ts);
enum { TS_ATIME, TS_MTIME, TS_CTIME, TS_CRTIME };
void wbfs_now(struct timespec *ts);
int wbfs_reserve(struct wbfs *w, long nr, bool privileged);
void wbfs_unreserve(struct wbfs *w, long nr);
int wbfs_meta_room(struct wbfs *w, long nr);
void wbfs_refresh_free_locked(struct wbfs *w);

/* iomgr.c */
extern struct struct_io_manager wbfs_io_manager;
void wbfs_iomgr_set(struct wbfs *w);
void wbfs_iomgr_forget_range(struct wbfs *w, uint64_t blk, uint64_t count);

/* inode.c */
struct winode *winode_get(struct wbfs *w, ext2_ino_t ino, bool lookup);
void winode_forget(struct wbfs *w, struct winode *wi, uint64_t nlookup);
struct winode *winode_find(struct wbfs *w, ext2_ino_t ino);
void winode_put_open(struct wbfs *w, struct winode *wi);
void winode_release_all(struct wbfs *w);
int winode_stat(struct wbfs *w, ext2_ino_t ino, struct stat *st);
int winode_stat_locked(struct wbfs *w, ext2_ino_t ino, struct stat *st);
void winode_fold_attrs_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in);
uint64_t winode_size(struct winode *wi);
void winode_set_size(struct winode *wi, uint64_t size, bool touch);
void winode_stamp_times(struct winode *wi);
void winode_touch(struct wbfs *w, struct winode *wi);
int winode_sync(struct wbfs *w, struct winode *wi, bool datasync);
int winode_free_locked(struct wbfs *w, ext2_ino_t ino);
int winode_touch_ctime_locked(struct wbfs *w, ext2_ino_t ino);
int winode_drop_link_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in);
int ec_lookup(struct wbfs *w, struct winode *wi, uint64_t lblk, struct ext_run *out);
void ec_invalidate(struct winode *wi);
extern const struct bdi_ops wbfs_bdi_ops;

/* data.c */
/* A read's reply: iovecs into referenced cache pages. */
struct read_reply {
	struct iovec *iov;
	struct page **pages;
	int n;
};
int data_read(struct wbfs *w, struct wfile *f, uint64_t off, size_t size, struct read_reply *rr);
void data_read_done(struct read_reply *rr);
ssize_t data_write(struct wbfs *w, struct winode *wi, const char *buf, size_t len,
		   uint64_t off, bool privileged, bool from_page_cache);
void data_balance_dirty(struct wbfs *w, pid_t pid, long nr);
int data_truncate(struct wbfs *w, struct winode *wi, uint64_t size);
int data_fallocate(struct wbfs *w, struct winode *wi, int mode, uint64_t off, uint64_t len,
		   bool privileged);
int data_lseek(struct wbfs *w, struct winode *wi, uint64_t off, int whence, uint64_t *out);
void data_drop_all(struct wbfs *w, struct winode *wi);
long data_report_lost(struct wbfs *w, struct winode *wi);

/* dir.c */
int dir_lookup(struct wbfs *w, ext2_ino_t parent, const char *name, ext2_ino_t *ino);
int dir_create(struct wbfs *w, ext2_ino_t parent, const char *name, mode_t mode,
	       dev_t rdev, const struct fuse_ctx *ctx, ext2_ino_t *ino);
int dir_mkdir(struct wbfs *w, ext2_ino_t parent, const char *name, mode_t mode,
	      const struct fuse_ctx *ctx, ext2_ino_t *ino);
int dir_symlink(struct wbfs *w, ext2_ino_t parent, const char *name, const char *target,
		const struct fuse_ctx *ctx, ext2_ino_t *ino);
int dir_link(struct wbfs *w, ext2_ino_t ino, ext2_ino_t parent, const char *name);
int dir_unlink(struct wbfs *w, ext2_ino_t parent, const char *name, bool is_rmdir);
int dir_rename(struct wbfs *w, ext2_ino_t p1, const char *n1, ext2_ino_t p2,
	       const char *n2, unsigned flags);
int dir_readlink(struct wbfs *w, ext2_ino_t ino, char *buf, size_t len);
struct dir_snap_ent {
	char *name;
	ext2_ino_t ino;
	unsigned char type;	/* DT_* */
};
struct dir_snap {
	struct dir_snap_ent *e;
	size_t n, cap;
};
int dir_snapshot(struct wbfs *w, ext2_ino_t ino, struct dir_snap *snap);
void dir_snap_free(struct dir_snap *snap);

/* dcache.c */
#define DCACHE_MIN_BLOCKS 4
struct dcache;
struct dcache *dcache_build(struct wbfs *w, ext2_ino_t dir);
int dcache_lookup(struct dcache *dc, const char *name, ext2_ino_t *ino);
int dcache_set(struct dcache *dc, const char *name, ext2_ino_t ino);
void dcache_remove(struct dcache *dc, const char *name);
void dcache_free(struct dcache *dc);

/* xattr.c */
int xattr_set(struct wbfs *w, ext2_ino_t ino, const char *name, const void *v, size_t len, int flags);
int xattr_get(struct wbfs *w, ext2_ino_t ino, const char *name, void *buf, size_t len);
int xattr_list(struct wbfs *w, ext2_ino_t ino, char *buf, size_t len);
int xattr_remove(struct wbfs *w, ext2_ino_t ino, const char *name);
#define WBFS_FAULT_XATTR "trusted.wbcfs.fault"
#define WBFS_FAULT_META_XATTR "trusted.wbcfs.fault_meta"
bool xattr_is_fault(struct wbfs *w, const char *name);
int xattr_fault_set(struct wbfs *w, ext2_ino_t ino, const char *name, const char *v,
		    size_t len);
int xattr_fault_get(struct wbfs *w, ext2_ino_t ino, const char *name, char *buf, size_t len);

/* inval.c */
struct inval_queue;
void wbfs_inval_note_read(struct winode *wi, uint64_t off, size_t size);
void wbfs_inval_queue(struct wbfs *w, struct winode *wi, uint64_t start, uint64_t end);
void wbfs_inval_write(struct wbfs *w, struct winode *wi, uint64_t start, uint64_t end);
void wbfs_inval_zero_eof_page(struct wbfs *w, struct winode *wi, uint64_t old_size,
			      uint64_t new_size);
int wbfs_inval_start(struct wbfs *w);
void wbfs_inval_stop(struct wbfs *w);

/* fuse_io.c */
int wbfs_fuse_io_install(struct wbfs *w, struct fuse_session *se);
/** Start the timer that sends held (throttled) WRITE replies. Returns 0 or -errno. */
int wbfs_fuse_io_start(void);
/** Stop it and send every held reply now (the session is ending). */
void wbfs_fuse_io_stop(void);
/**
 * The reply this thread sends next (a WRITE's) is held for @pause_ms,
 * then throttle_resume(@tw, @pid) decides whether it waits longer.
 * Returns false when replies cannot be held (no timer): pause in place.
 */
bool wbfs_fuse_io_hold_reply(struct throttle_wb *tw, pid_t pid, long pause_ms);
/** Replies held now (vmstat). */
long wbfs_fuse_io_held(void);
const struct fuse_custom_io *wbfs_fuse_io_ops(void);

/* ctl.c: the control directory; FUSE inodes from CTL_INO_BASE up */
#define CTL_INO_BASE (1ULL << 32)
extern const struct fuse_lowlevel_ops ctl_ops;
/** Is @ino one of the control directory's inodes? */
bool ctl_owns(fuse_ino_t ino);
/** Is @name in @parent the control directory itself (root, ctl_name)? */
bool ctl_is_root_name(struct wbfs *w, fuse_ino_t parent, const char *name);
/** -EPERM when @name in @parent is, or is inside, the control directory. */
int ctl_check_name(struct wbfs *w, fuse_ino_t parent, const char *name);
/** Drop the entry the control directory shadows from a snapshot of the root. */
void ctl_hide_in_root(struct wbfs *w, struct dir_snap *snap);
/** At mount: stamp the control files' times, warn if a real entry is shadowed. */
void ctl_mount_check(struct wbfs *w);

/* ops.c */
extern const struct fuse_lowlevel_ops wbfs_ops;

static inline ext2_ino_t wbfs_ino(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? EXT2_ROOT_INO : (ext2_ino_t)ino;
}
static inline fuse_ino_t wbfs_fuse_ino(ext2_ino_t ino)
{
	return ino == EXT2_ROOT_INO ? FUSE_ROOT_ID : ino;
}

#endif
