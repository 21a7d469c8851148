/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ext4/, the filesystem over libext2fs, as the layers above it see it: the
 * mounted filesystem (struct wbfs), in-memory inodes (struct winode) with
 * their page mapping, extent map cache and delayed allocation state, and
 * the operations the FUSE handlers (fuse/) and the daemon (daemon/) call.
 * libext2fs does every on-disk format change, under wbfs->fs_lock; data
 * pages move through cache/ and flusher/ without that lock. ext4/ calls
 * the layers above it only through the tables they register
 * (struct ext4_host_ops, struct ext4_kcache_ops). Its internals are in
 * ext4/ext4_i.h.
 *
 * Lock ordering: doc/locking.md (every module's classes, checked by lockdep).
 */
#ifndef WBCFS_EXT4_H
#define WBCFS_EXT4_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <ext2fs/ext2fs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "wbcfs/flusher/bdi.h"
#include "wbcfs/cache.h"
#include "wbcfs/lib/lockstat.h"
#include "wbcfs/lib/msg.h"
#include "wbcfs/cache/mapping.h"
#include "wbcfs/blkdev.h"
#include "wbcfs/ext4/options.h"
#include "wbcfs/cache/readahead.h"
#include "wbcfs/ext4/acl.h"
#include "wbcfs/jbd2.h"

#define WBFS_NAME_MAX 255
/* ext4 with blocks of a page and extents: 2^32 blocks per file. */
#define WBFS_MAX_FILE_BYTES ((uint64_t)0xFFFFFFFFULL * PAGE_SIZE)
#define WBFS_LINK_MAX 65000

/* One run of the extent map: logical blocks [lblk, lblk+len) at pblk. */
struct ext_run {
	uint64_t lblk;
	uint64_t pblk;
	uint32_t len;
	bool uninit;		/* unwritten extent: reads as zeros */
};

/* Lock classes of fs/ (ext4.c defines them) for /.wbcfs/lockstat. */
extern struct lock_class lc_fs_lock;		/* wbfs->fs_lock */
extern struct lock_class lc_itable_lock;	/* wbfs->itable_lock */
extern struct lock_class lc_resv_lock;		/* wbfs->resv_lock */
extern struct lock_class lc_attr_lock;		/* winode->attr_lock */
extern struct lock_class lc_ec_lock;		/* winode->ec_lock */
extern struct lock_class lc_hide_lock;		/* wbfs->hide_lock */
extern struct lock_class lc_ilock_r;		/* winode->ilock, shared */
extern struct lock_class lc_ilock_w;		/* winode->ilock, exclusive */
extern struct lock_class lc_ra_lock;		/* wfile->ra_lock */
extern struct lock_class lc_dcache_r;		/* winode->dc_lock, shared */
extern struct lock_class lc_dcache_w;		/* winode->dc_lock, exclusive */

/*
 * Does the inode have security.capability? Looked up at its first write
 * (zero, as calloc leaves it, is "not known yet"), then kept by every
 * set and removal of that attribute (xattr.c).
 */
enum winode_caps {
	WINODE_CAPS_UNKNOWN = 0,
	WINODE_CAPS_NONE,
	WINODE_CAPS_SET,
};

struct winode {
	ext2_ino_t ino;				/* constant */
	struct winode *hash_next;		/* itable_lock */
	uint64_t nlookup;			/* itable_lock: FUSE lookup count */
	unsigned nopen;				/* itable_lock: open handles */
	bool evicting;				/* itable_lock: being written and torn down */
	bool unlinked;				/* fs_lock: links hit 0, free at last forget */
	bool freed;				/* fs_lock: on-disk inode released */
	bool orphan;				/* fs_lock: on the on-disk orphan list */
	_Atomic uint32_t sync_tid;		/* set under fs_lock: the transaction with
						 * its newest metadata change (its inode
						 * table block, its extents at writeback),
						 * what its fsync commits (ext4's
						 * i_sync_tid) */
	mode_t mode;				/* fs_lock (format bits constant) */

	pthread_rwlock_t ilock;			/* protects: the page range and i_size
						 * against truncate/punch/fallocate;
						 * exclusive for those and for writes
						 * past EOF, shared for reads and for
						 * writes below EOF (page locks) */
	_Atomic long nr_writers;		/* atomic: writes inside ilock now */
	_Atomic bool kcached;			/* atomic: the kernel may cache pages
						 * (mmap); see inval.c */
	struct kstore_log *_Atomic klog;	/* atomic (set once): writes the
						 * kernel's writeback may predate;
						 * inval.c */
	pthread_mutex_t attr_lock;		/* protects: size, mtime, ctime, *_dirty; leaf */
	uint64_t size;				/* attr_lock (changes also hold ilock) */
	uint64_t disksize;			/* attr_lock (raised under fs_lock): the
						 * size a regular file's on-disk inode
						 * carries (ext4's i_disksize): never
						 * past size, nor past the last page
						 * writeback mapped onto data still
						 * waiting (inode.c, disksize_reach) */
	struct timespec mtime, ctime;		/* attr_lock: valid when times_dirty */
	bool times_dirty;			/* attr_lock */
	bool size_dirty;			/* attr_lock */
	struct timespec atime;			/* attr_lock: valid when atime_dirty */
	bool atime_dirty;			/* attr_lock: set by a read, not yet written */
	struct timespec disk_atime, disk_mtime, disk_ctime;
						/* attr_lock: the inode's, as last read
						 * or written (the atime rule's input) */
	bool disk_noatime;			/* attr_lock: EXT2_NOATIME_FL, likewise */
	bool folding;				/* attr_lock: pending attributes folded
						 * into an inode not yet written */
	unsigned fold_seq;			/* attr_lock: +1 at each fold and write */
	_Atomic bool has_priv;			/* atomic: mode has S_ISUID/S_ISGID */
	_Atomic int caps;			/* atomic, changed under fs_lock:
						 * enum winode_caps */
	_Atomic uint32_t iflags;		/* atomic: ext4 i_flags (chattr), ioctl.c */

	pthread_mutex_t ec_lock;		/* protects: runs, nr_runs, ec_valid */
	struct ext_run *runs;			/* ec_lock: sorted by lblk */
	size_t nr_runs, cap_runs;		/* ec_lock */
	bool ec_valid;				/* ec_lock */

	_Atomic long nr_delalloc;		/* atomic (changed under resv_lock):
						 * reserved, unallocated pages */
	long da_runs;				/* resv_lock: runs of those pages (at
						 * most): the extents they will need */
	long meta_resv;				/* resv_lock: extent tree blocks
						 * reserved for those extents */
	_Atomic bool da_alloc_close;		/* atomic: truncated to 0 from a size
						 * above it: the next close writes
						 * its pages (auto_da_alloc; ext4's
						 * EXT4_STATE_DA_ALLOC_CLOSE) */
	pthread_rwlock_t dc_lock;		/* protects, with fs_lock: dcache (changed
						 * under both, dc_lock exclusive; read
						 * under either: a LOOKUP takes dc_lock
						 * shared only) */
	struct dcache *dcache;			/* fs_lock + dc_lock: a directory's names */
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
	bool flush;			/* its close(2) sends FLUSH (no FOPEN_NOFLUSH) */
	_Atomic bool truncated;		/* atomic: truncated to 0 through it (ftruncate):
					 * auto_da_alloc at its RELEASE if no FLUSH */
};

/* Filesystem-wide counters, for /.wbcfs/vmstat and the unmount log. */
struct wbfs_stats {
	_Atomic long nr_parallel_writes_max;	/* atomic: most writes inside one
						 * inode's ilock at once */
	_Atomic long nr_inval_sent;		/* atomic: page cache invalidations
						 * sent to the kernel */
	_Atomic long nr_store_sent;		/* atomic: written bytes stored into
						 * the kernel's page cache */
	_Atomic long nr_store_kept;		/* atomic: pages of writebacks from
						 * the kernel that kept a newer
						 * write's bytes */
	_Atomic long nr_store_unordered;	/* atomic: writebacks older than a
						 * write the log forgot */
	_Atomic long nr_corrupt_groups;		/* atomic: groups refused at mount */
	_Atomic long nr_bitmap_untracked;	/* atomic: bitmaps found changed by a
						 * full scan, not marked in bm_changed */
	_Atomic long nr_stat_unlocked;		/* atomic: stats served without fs_lock */
	_Atomic long nr_lookup_unlocked;	/* atomic: lookups served without fs_lock */
	_Atomic long nr_readdir_unlocked;	/* atomic: directory blocks listed without
						 * fs_lock */
	_Atomic long nr_blocks_claimed;		/* atomic: blocks found and taken for
						 * writeback under fs_lock shared */
	_Atomic long nr_inodes_claimed;		/* atomic: inodes found and taken for
						 * creates under fs_lock shared */
	_Atomic long nr_claim_overlaps;		/* atomic: claims begun while another
						 * was running */
	_Atomic long nr_ra_async;		/* atomic: readahead windows read by the
						 * readahead threads */
	_Atomic long nr_ra_inline;		/* atomic: ... by the reader itself (the
						 * queue was full, or unmount began) */
	_Atomic long nr_alloc_busy_refused;	/* atomic: data allocations that found
						 * room only in blocks whose free had
						 * not committed */
	_Atomic long nr_alloc_commits;		/* atomic: commits forced so that such
						 * blocks may be reused */
	_Atomic long nr_auto_da_alloc_rename;	/* atomic: renames over a file that
						 * wrote the moved file's pages first */
	_Atomic long nr_auto_da_alloc_close;	/* atomic: closes after a truncation to
						 * 0 that wrote the file's pages */
	_Atomic long nr_flush_requests;		/* atomic: FLUSHes served (a writer's
						 * close(2) under close_errors, or after
						 * a truncation: auto_da_alloc) */
	_Atomic long nr_sync_writes;		/* atomic: writes made durable before
						 * their reply (O_SYNC, O_DSYNC, IS_SYNC) */
	_Atomic long nr_dirsync_ops;		/* atomic: directory changes committed
						 * before their reply (IS_DIRSYNC) */
	_Atomic long nr_parked_total;		/* atomic: requests answered by the
						 * syncers, not their server thread */
	_Atomic long nr_park_groups;		/* atomic: syncs of sync requests */
	_Atomic long nr_sync_leaders;		/* atomic: sync requests that met no
						 * other, synced in their own thread */
	_Atomic long nr_park_grouped;		/* atomic: requests synced with others */
	_Atomic long nr_park_interrupts;	/* atomic: INTERRUPTs of parked requests */
	_Atomic long nr_sync_metadata;		/* atomic: other changes committed before
						 * their reply (IS_SYNC, O_SYNC fallocate) */
};

struct ra_pool;	/* data.c: the readahead threads */

/*
 * Where the set bits of a sparse block bitmap (busy blocks) can be: the
 * runs marked since it was last drained, so that a drain at every commit
 * visits those and not the whole filesystem (ext4.c).
 */
struct bm_runs {
	struct bm_run {
		blk64_t blk, n;
	} *v;
	size_t nr, cap;
	bool all;			/* too many kept: a drain scans it all */
};

/* Group locks, hashed as the kernel's blockgroup_lock. */
#define WBFS_GROUP_LOCKS 64
#define WBFS_ICLAIMS 64		/* inode claims outstanding at most */

struct ext4_host_ops;
struct ext4_kcache_ops;

struct wbfs {
	const struct ext4_host_ops *host_ops;	/* constant: the layer that mounts it */
	void *host;			/* constant: its argument (the daemon's domain) */
	const struct ext4_kcache_ops *kc;	/* constant while served: the FUSE
						 * layer's hands on the kernel's
						 * caches; NULL: none */
	ext2_filsys fs;			/* fs_lock */
	pthread_rwlock_t fs_lock;	/* protects: fs and every libext2fs call
					 * (held exclusive); shared, only block
					 * claims run (ext4_claim_blocks) */
	pthread_mutex_t group_lock[WBFS_GROUP_LOCKS];
					/* under fs_lock shared: group g's bits
					 * of fs->block_map (lock g % N) */
	pthread_mutex_t claim_lock;	/* protects: claims, nr_claims (a leaf) */
	_Atomic int nr_claimers;	/* atomic: claims running now */
	struct bm_run *claims;		/* blocks claimed, not yet in a file: in
					 * use in memory, free on disk */
	size_t nr_claims, cap_claims;
	ext2_ino_t iclaims[WBFS_ICLAIMS];	/* claim_lock: inodes claimed for
						 * creates, not yet taken */
	unsigned nr_iclaims;		/* claim_lock */
	struct cache *cache;
	struct bdi *bdi;
	struct flusher_pool *pool;	/* constant: flusher_model=pdflush: the domain's
					 * flusher threads, shared by its devices */
	int dev_fd;			/* O_RDWR|O_DIRECT (O_RDONLY for ro); or nbd's */
	struct nbdev *nbd;		/* an NBD export (dev_path is its URI); else NULL */
	struct rbdev *rbd;		/* an RBD image (dev_path is rbd:...); else NULL */
	bool is_blkdev;
	const char *dev_path;
	uint64_t dev_bytes;
	struct wbcfs_options opts;
	bool ro;
	bool recovered;				/* constant: the journal was replayed at mount */

	struct mapping meta_map;	/* the device's own pages: index == block */
	struct wb_inode meta_wb;

	pthread_mutex_t itable_lock;	/* protects: itable buckets, nlookup, nopen, evicting */
	pthread_cond_t itable_cond;	/* itable_lock: an eviction finished */
	struct winode **itable;
	size_t itable_size;
	long nr_winodes;		/* itable_lock */
	bool closing;			/* itable_lock: unmount evicts, nobody else */
	bool fs_error;			/* fs_lock: metadata left inconsistent */

	pthread_mutex_t resv_lock;	/* protects: free_blocks, reserved, free_inodes */
	int64_t free_blocks;		/* resv_lock: mirror of the superblock count */
	int64_t free_inodes;		/* resv_lock */
	int64_t reserved;		/* resv_lock: delalloc blocks promised to writers */
	int64_t headroom;		/* constant: blocks kept for metadata */
	int64_t root_reserved;		/* constant: s_r_blocks_count */
	uint64_t overhead;		/* constant: metadata blocks, for statfs */

	struct wbfs_stats stats;
	struct ra_pool *ra;		/* data.c: readahead threads; NULL when not running */
	struct inval_queue *inval;	/* inval.c; NULL before the session runs */
	_Atomic uint64_t kstore_seq;	/* atomic: writes stored into the kernel's
					 * pages, in order; inval.c */
	struct timespec ctl_time;	/* constant: mount time, the control files' times */

	struct fuse_session *se;
	struct fio_conn *fio;		/* fuse_io.c: this mount's FUSE connection;
					 * NULL before install, after transport_stop */
	bool posix_acl;			/* constant after FUSE_INIT: the kernel
					 * enforces POSIX ACLs (else they are
					 * refused, as ext4's noacl does) */
	bool destroyed;
	int close_ret;			/* ext4_close's result, for the exit status */
	_Atomic long lost_pages;	/* atomic: dirty pages dropped unwritten */

	/* new blocks whose data write failed (inode.c, ext4_hide_failed_locked) */
	pthread_mutex_t hide_lock;	/* protects: hide, nr_hide, cap_hide, hide_overflow;
					 * a leaf (taken in I/O completion, and
					 * under fs_lock by the commit) */
	struct hide_rec {
		ext2_ino_t ino;
		uint64_t index;
	} *hide;
	size_t nr_hide, cap_hide;
	bool hide_overflow;		/* hide_lock: a record could not be kept */
	_Atomic bool hide_pending;	/* atomic: records wait */
	_Atomic long nr_hidden;		/* atomic: blocks made unwritten for them */
	dgrp_t *bad_groups;		/* constant after mount: groups whose block
					 * bitmap failed validation, sorted */
	unsigned nr_bad_groups;		/* constant after mount */
	dgrp_t *bad_igroups;		/* constant after mount: groups whose inode
					 * bitmap failed validation */
	unsigned nr_bad_igroups;	/* constant after mount */
	int64_t bad_free;		/* constant: free blocks the bad groups'
					 * descriptors count, not handed out */
	blk64_t hidden_last;		/* constant: the last block, free on disk,
					 * kept from allocation (0: none) */
	ext2fs_block_bitmap busy;	/* fs_lock: blocks freed since the last
					 * sync, not yet reused (ext4.c) */
	blk64_t nr_busy;		/* fs_lock: blocks in it */
	struct bm_runs busy_runs;	/* fs_lock: where they are */
	_Atomic bool alloc_busy_refused;	/* atomic: a data allocation failed
						 * that a commit would let succeed
						 * (ext4_should_retry_alloc) */
	struct jtab orphan_prev;	/* fs_lock: orphan inode -> the orphan
					 * before it on the list (0: the head) */
	bool orphan_tracked;		/* fs_lock: orphan_prev holds the whole list */
	struct bb_loc *bb_locs;		/* constant: block bitmap locations,
					 * sorted, for the iomgr */
	struct bb_loc *it_locs;		/* constant: inode table locations, sorted */
	struct bb_loc *ib_locs;		/* constant: inode bitmap locations, sorted */
	struct wjournal *journal;	/* journal.c; NULL without a journal */
	uint8_t *trimmed_groups;	/* fs_lock: FITRIM's groups with nothing
					 * freed since (ioctl.c), or NULL */
	uint64_t trim_last_minlen;	/* fs_lock: that FITRIM's minlen, blocks */
	unsigned char *bb_scratch;	/* fs_lock: a block bitmap as written (ext4.c) */
	uint8_t *bm_changed;		/* fs_lock: per group, BM_BLOCK | BM_INODE:
					 * its bitmap changed in memory since it
					 * was last written (ext4.c), or NULL */
	bool bm_in_range;		/* fs_lock: in ext4_block_alloc_stats_range */
	enum { BM_SCAN_NONE, BM_SCAN_QUIET, BM_SCAN_CHECK } bm_scan;
					/* fs_lock: the next bitmap write looks at
					 * every group (CHECK: counting changes
					 * that bm_changed missed) */
};

#define BM_BLOCK 1
#define BM_INODE 2


/* journal.c */
int ext4_journal_show(struct wbfs *w, char *buf, size_t len);
int ext4_sync_durable(struct wbfs *w);

/* ext4.c */
int ext4_open(struct wbfs *w, const char *dev, const struct wbcfs_options *o);
int ext4_close(struct wbfs *w);
void ext4_lock(struct wbfs *w);
void ext4_unlock(struct wbfs *w);
int ext4_read_inode(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in);
int ext4_write_inode(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in);
void ext4_ts_get(const struct ext2_inode_large *in, int which, struct timespec *ts);
void ext4_ts_set(struct ext2_inode_large *in, int which, const struct timespec *ts);
enum { TS_ATIME, TS_MTIME, TS_CTIME, TS_CRTIME };
void ext4_now(struct timespec *ts);
#define WBFS_ROOM_PRIV		0x1	/* may use the root reserve */
#define WBFS_ROOM_NOFAIL	0x2	/* may use half the metadata headroom */
bool ext4_privileged(struct wbfs *w, const struct fuse_ctx *ctx);

/* inode.c */
struct winode *winode_get(struct wbfs *w, ext2_ino_t ino, bool lookup);
void winode_forget(struct wbfs *w, struct winode *wi, uint64_t nlookup);
void winode_forget_ino(struct wbfs *w, ext2_ino_t ino, uint64_t nlookup);
struct winode *winode_find(struct wbfs *w, ext2_ino_t ino);
void winode_put_open(struct wbfs *w, struct winode *wi);
void winode_put_open_ino(struct wbfs *w, ext2_ino_t ino);
bool ext4_should_retry_alloc(struct wbfs *w, int *retries);
int winode_stat(struct wbfs *w, ext2_ino_t ino, struct stat *st);
void winode_fold_attrs_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in);
bool winode_atime_due(struct wbfs *w, struct winode *wi);
void winode_accessed(struct wbfs *w, struct winode *wi, int oflags);
/*
 * auto_da_alloc (ext4_alloc_da_blocks): write @wi's dirty pages, allocating
 * their delayed blocks, and its inode, and wait for the writes; no commit.
 * A commit after the call holds the blocks, and finds their data on the
 * device. Returns the number of dirty pages there were (0: nothing done)
 * or -errno (a write error: also kept for the file's next fsync or close).
 * Context: no lock held; may sleep on the device.
 */
long winode_alloc_da_blocks(struct wbfs *w, struct winode *wi);
/*
 * fsync (fdatasync: @datasync) of @wi limited to its pages [@first, @last]
 * (@last inclusive), with the commit up to its newest change: a
 * synchronous write's. Returns 0 or -errno (-EIO: a page write failed).
 */
int winode_sync_range(struct wbfs *w, struct winode *wi, uint64_t first, uint64_t last,
		      bool datasync);
/*
 * One sync of a group made durable by one commit, as jbd2 wakes every
 * fsync waiting for a transaction at its commit: @wi's pages [@first,
 * @last] (fsync, fdatasync: @datasync; a synchronous write's range), or,
 * @wi NULL, everything (fsyncdir). @ret: what winode_sync_range (or
 * ext4_sync_durable) would have returned.
 */
struct ext4_sync_req {
	struct winode *wi;
	uint64_t first, last;
	bool datasync;
	int ret;			/* out */
	struct bdi_sync_io io;		/* ext4_sync_group's */
	bool started;			/* ext4_sync_group's: @io holds writes */
	bool unflushed;			/* ext4_sync_group's: its commit did not flush */
	bool errio;			/* ext4_sync_group's: failed before its commit */
};
/*
 * Make the @n syncs of @r durable together: every file's data writes go
 * out, then one commit covers all of them (a later one only when the
 * first failed to cover a file), then one device flush if the commit did
 * not end with one. Context: no lock held; waits for the device.
 */
void ext4_sync_group(struct wbfs *w, struct ext4_sync_req *r, size_t n);
int winode_free_locked(struct wbfs *w, ext2_ino_t ino);
int winode_orphan_add_ino_locked(struct wbfs *w, ext2_ino_t ino);

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

/* dir.c */
int dir_lookup(struct wbfs *w, ext2_ino_t parent, const char *name, ext2_ino_t *ino);
int dir_create(struct wbfs *w, ext2_ino_t parent, const char *name, mode_t mode,
	       dev_t rdev, const struct fuse_ctx *ctx, ext2_ino_t *ino);
int dir_mkdir(struct wbfs *w, ext2_ino_t parent, const char *name, mode_t mode,
	      const struct fuse_ctx *ctx, ext2_ino_t *ino);
int dir_symlink(struct wbfs *w, ext2_ino_t parent, const char *name, const char *target,
		const struct fuse_ctx *ctx, ext2_ino_t *ino);
int dir_link(struct wbfs *w, ext2_ino_t ino, ext2_ino_t parent, const char *name,
	     bool privileged);
int dir_unlink(struct wbfs *w, ext2_ino_t parent, const char *name, bool is_rmdir);
int dir_rename(struct wbfs *w, ext2_ino_t p1, const char *n1, ext2_ino_t p2,
	       const char *n2, unsigned flags, const struct fuse_ctx *ctx, bool privileged,
	       ext2_ino_t moved[2]);
/**
 * A regular file of @mode in @parent with no name and i_links_count 0,
 * owned as a create of @ctx. Returns 0 or -errno (ENOTDIR, ENOSPC, EIO).
 */
int dir_tmpfile(struct wbfs *w, ext2_ino_t parent, mode_t mode, const struct fuse_ctx *ctx,
		ext2_ino_t *ino);
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
/* One entry for dir_read_at; @next is the position after it. Nonzero: stop. */
typedef int (*dir_emit_t)(void *priv, const char *name, size_t len, ext2_ino_t ino,
			  unsigned char type, uint64_t next);
int dir_read_at(struct wbfs *w, ext2_ino_t ino, uint64_t pos, dir_emit_t emit, void *priv);
void dir_snap_free(struct dir_snap *snap);

/* dcache.c */
struct dcache;

/* xattr.c */
int xattr_set(struct wbfs *w, ext2_ino_t ino, const char *name, const void *v, size_t len, int flags,
	      const struct wbfs_cred *cred, bool privileged);
int xattr_get(struct wbfs *w, ext2_ino_t ino, const char *name, void *buf, size_t len);
int xattr_list(struct wbfs *w, ext2_ino_t ino, char *buf, size_t len);
int xattr_remove(struct wbfs *w, ext2_ino_t ino, const char *name);
int xattr_kill_caps(struct wbfs *w, struct winode *wi);
int xattr_acl_chmod_locked(struct wbfs *w, ext2_ino_t ino, mode_t mode);
#define WBFS_FAULT_XATTR "trusted.wbcfs.fault"
#define WBFS_FAULT_META_XATTR "trusted.wbcfs.fault_meta"
#define WBFS_FAULT_RATE_XATTR "trusted.wbcfs.fault_rate"
bool xattr_is_fault(struct wbfs *w, const char *name);
int xattr_fault_set(struct wbfs *w, ext2_ino_t ino, const char *name, const char *v,
		    size_t len);
int xattr_fault_get(struct wbfs *w, ext2_ino_t ino, const char *name, char *buf, size_t len);

/* export.c */
int export_stat(struct wbfs *w, ext2_ino_t ino, struct stat *st, uint64_t *generation);
int export_lookup(struct wbfs *w, fuse_ino_t parent, const char *name, ext2_ino_t *ino);

/* ioctl.c */
int iflags_check(struct wbfs *w, ext2_ino_t ino, uint32_t deny);
/* ext4's IS_SYNC (sync mount, chattr +S) and IS_DIRSYNC (+dirsync, +D) */
bool iflags_is_sync(struct wbfs *w, ext2_ino_t ino);
bool iflags_is_dirsync(struct wbfs *w, ext2_ino_t dir);
int iflags_check_setattr(struct wbfs *w, ext2_ino_t ino, int to_set);
int iflags_check_open(struct winode *wi, int flags);
int iflags_check_write(struct winode *wi, int flags);
int iflags_check_fallocate(struct winode *wi, int mode);
void ext4_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		size_t in_bufsz, size_t out_bufsz);
void ext4_bmap(fuse_req_t req, fuse_ino_t ino, size_t blocksize, uint64_t idx);

/* kstore.c */
struct kstore_range {
	uint64_t start, end;
};
void kstore_before_copy(struct wbfs *w);
void kstore_copy_unnoted(void);
void kstore_taken(struct wbfs *w);
int kstore_begin(struct winode *wi, uint64_t start, uint64_t end);
void kstore_end(struct wbfs *w, struct winode *wi, int slot, uint64_t start, uint64_t end);
int kstore_mask(struct wbfs *w, struct winode *wi, uint64_t pos, size_t n,
		     struct kstore_range *keep);
void kstore_free(struct winode *wi);
/*
 * Writes per file the kernel caches that a writeback from its page cache is
 * checked against (inval.c). A writeback taken before a write but handled
 * after the log forgot it may put old bytes over the write's; the worker
 * that took it may be off the CPU for milliseconds on a loaded machine
 * while a writer goes on (16 were met: one lost marker in ~600 holetest
 * runs under the test suite's load). 256 covers ~10 ms of 40 us writes, at
 * 6 KiB per such file and a scan of 256 entries per write and writeback.
 */
#define KSTORE_MAX_KEEP 256

/* inode numbers */
static inline ext2_ino_t ext4_ino(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? EXT2_ROOT_INO : (ext2_ino_t)ino;
}
static inline fuse_ino_t ext4_fuse_ino(ext2_ino_t ino)
{
	return ino == EXT2_ROOT_INO ? FUSE_ROOT_ID : ino;
}

/* ---- the tables through which ext4/ calls the layers above it ---------- */

/*
 * What the layer that mounts a filesystem (the daemon) does for it: the
 * page cache and flusher pool the device joins (created by the first
 * device of a domain), and being told when the device's bdi starts and
 * stops, so that cache-wide wakeups reach it. Set before ext4_open.
 */
struct ext4_host_ops {
	int (*get_cache)(void *host, const struct wbcfs_options *o, const char *dev,
			 struct cache **cache, struct flusher_pool **pool);
	void (*attach)(void *host, struct wbfs *w);
	void (*detach)(void *host, struct wbfs *w);
};

/*
 * What the FUSE layer does when the kernel may cache a file's pages or
 * attributes, and with the replies it holds: set (w->kc) when it starts
 * serving a mount. Each may be called with no lock of ext4/ held only.
 */
struct ext4_kcache_ops {
	/* a write put @len bytes of @buf at @off of @wi, whose size was @old_size */
	void (*write)(struct wbfs *w, struct winode *wi, const char *buf, uint64_t off,
		      size_t len, uint64_t old_size);
	/* i_size grew from @old_size to @new_size; the old EOF page's tail is zeros */
	void (*zero_eof_page)(struct wbfs *w, struct winode *wi, uint64_t old_size,
			      uint64_t new_size);
	/* @wi's attributes changed behind the kernel's back (chattr's ctime) */
	void (*attr)(struct wbfs *w, struct winode *wi);
	/* hold the reply this thread sends next for @pause_ms (false: cannot) */
	bool (*hold_reply)(struct wbfs *w, struct throttle_wb *tw, pid_t pid, long pause_ms);
};

static inline void kcache_write(struct wbfs *w, struct winode *wi, const char *buf, uint64_t off,
				size_t len, uint64_t old_size)
{
	if (w->kc)
		w->kc->write(w, wi, buf, off, len, old_size);
}

static inline void kcache_zero_eof_page(struct wbfs *w, struct winode *wi, uint64_t old_size,
					uint64_t new_size)
{
	if (w->kc)
		w->kc->zero_eof_page(w, wi, old_size, new_size);
}

static inline void kcache_attr(struct wbfs *w, struct winode *wi)
{
	if (w->kc)
		w->kc->attr(w, wi);
}

static inline bool kcache_hold_reply(struct wbfs *w, struct throttle_wb *tw, pid_t pid,
				     long pause_ms)
{
	return w->kc && w->kc->hold_reply(w, tw, pid, pause_ms);
}

/*
 * Inode numbers of the filesystem fit 32 bits; the FUSE inodes above them
 * are the daemon's (its control directory).
 */
static inline bool ext4_ino_ours(fuse_ino_t ino)
{
	return ino <= UINT32_MAX;
}

#endif
