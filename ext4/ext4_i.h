/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ext4/ internals: journal glue, block and inode allocation, bitmaps,
 * claims and busy blocks, orphans, the extent map cache, the directory
 * cache and what else only ext4/'s own files (and its unit tests) call.
 * What the other folders see is in include/wbcfs/ext4.h. Lock order:
 * doc/locking.md.
 */
#ifndef WBCFS_EXT4_EXT4_I_H
#define WBCFS_EXT4_EXT4_I_H

#include "wbcfs/ext4.h"

/* journal.c, jcommit.c, jcheckpoint.c: the journal's own state */
#define JBS JBD2_LOG_BLOCK		/* journal block = filesystem block */
#define ESC_BIT 0x80000000U		/* logged: the copy was escaped */

extern struct lock_class lc_journal_commit;

/* A committed transaction still in the log. */
struct jtx_rec {
	uint32_t tid, start, nblk;
};

/* A committed page held from writeback since @ms. */
struct jheld {
	struct page *p;
	uint64_t ms;
};

struct wjournal {
	struct wbfs *w;
	struct jbd2_log log;		/* the log on the device (log.jsb:
					 * commit_mutex) */
	uint32_t max_tx;		/* constant: blocks that start a commit */

	pthread_mutex_t commit_mutex;
	uint32_t head;			/* commit_mutex: next log block */
	bool empty;			/* commit_mutex: s_start == 0 on disk */
	bool jsb_unsure;		/* commit_mutex: a journal superblock write
					 * may or may not have reached the device:
					 * the next commit writes it again */
	uint32_t stale_jb;		/* commit_mutex: a commit block that failed
					 * may be on the device there (0: none; the
					 * log starts after the superblock) */
	char *zero;			/* constant: a zeroed journal block */
	int err;			/* commit_mutex (read anywhere): aborted */
	uint32_t committed;		/* commit_mutex (written; read atomically
					 * without it): the last transaction
					 * committed, on the device */
	bool have_committed;		/* commit_mutex (the same): since mount */

	bool on;			/* fs_lock: changes join transactions */
	uint32_t seq;			/* fs_lock (written; read atomically without
					 * it): the running transaction's id */
	struct page **run;		/* fs_lock: its pages (referenced) */
	size_t nr_run, cap_run;		/* fs_lock */
	struct jtab runset;		/* fs_lock: their blocks */
	struct jtab revoke;		/* fs_lock: blocks it revokes */
	struct jtab logged;		/* fs_lock: block -> log block of its newest
					 * committed copy (| ESC_BIT), since the
					 * last checkpoint */
	struct jtab ctab;		/* fs_lock: the same for the transaction
					 * being committed */
	struct jtab pinned;		/* fs_lock: block -> the transaction of its
					 * newest committed copy, while its home
					 * copy may be older: that transaction and
					 * every later one stay in the log */
	pthread_mutex_t hlock;		/* protects: homed */
	struct jtab homed;		/* hlock: block -> the last transaction
					 * committed when a write home of its page
					 * (clean, not in a transaction) completed;
					 * folded into pinned under fs_lock */
	uint32_t tail, tail_tid;	/* commit_mutex: the log's start and its
					 * transaction, as the journal superblock
					 * says (unless empty) */
	uint32_t safe_tid;		/* commit_mutex: a later start whose home
					 * writes a flush has made durable, for the
					 * superblock (== tail_tid: none) */
	struct jheld *held;		/* fs_lock: committed pages that writeback
					 * leaves alone a while (PG_jheld,
					 * referenced), oldest first */
	size_t nr_held, cap_held;	/* fs_lock */
	_Atomic uint64_t held_since;	/* written under fs_lock: held[0].ms, or 0
					 * when none is held (read without it) */
	struct jtx_rec *txs;		/* commit_mutex: the committed transactions
					 * from tail to head, oldest first */
	size_t nr_txs, cap_txs;		/* commit_mutex */
	ext2fs_block_bitmap busy_commit;	/* fs_lock: blocks freed by the
						 * committing transaction */
	blk64_t nr_busy_commit;		/* fs_lock: blocks in it (0: nothing to scan) */
	struct bm_runs busy_commit_runs;	/* fs_lock: where they are */

	pthread_t thread;
	pthread_mutex_t tlock;		/* protects: stop, kick */
	pthread_cond_t tcond;
	bool stop, kick, thread_started;
	unsigned commit_ms;

	_Atomic long commits, blocks, revokes, checkpoints, unjournaled, failed;
	_Atomic long joined;		/* commit calls another's commit served */
	_Atomic long tail_lazy;		/* tail advances in a commit's flush */
	_Atomic long tail_forced;	/* tail advances that had to write home */
	_Atomic long ckpt_blocks;	/* blocks those wrote home */
	_Atomic long homed_blocks;	/* home writes that released a block */
	_Atomic long wraps;		/* commits that wrapped past the log's end */
	_Atomic long held_pages;	/* nr_held, for the journal file */
	_Atomic long held_expired;	/* held pages released by their expiry */
	/* time in each phase of the commits, ns (as jbd2's info file) */
	_Atomic uint64_t ns_prepare, ns_log, ns_ordered, ns_seal, ns_finish;
};

struct ckpt_io;

/* journal.c */
/* A buffer of @n bytes (one journal block if 0) aligned for O_DIRECT. */
void *ext4_journal_alloc(size_t n);
/* Append @p to the running list (the caller gives it a reference). */
int ext4_journal_add_run(struct wjournal *j, struct page *p);
/* Call @fn on the blocks the committing transaction freed, and forget them. */
void ext4_journal_drain_busy_commit(struct wbfs *w, struct wjournal *j,
				    void (*fn)(struct wbfs *w, blk64_t blk, blk64_t n));
/* The committing transaction's frees are on disk: those blocks are free. */
void ext4_journal_release_busy_commit(struct wbfs *w, struct wjournal *j);
/* Blocks [@blk, +@n) freed by the running transaction: busy until it commits. */
void ext4_journal_mark_busy(struct wbfs *w, blk64_t blk, blk64_t n);
/* The running transaction's busy blocks become the committing one's. */
void ext4_journal_busy_to_commit(struct wbfs *w, struct wjournal *j);
/* jcheckpoint.c */
/* Metadata page @p is home as of a flush just done: clean unless changed since. */
void ext4_journal_page_home(struct page *p);
/* A batch of home writes, one per checkpoint (an engine belongs to one thread). */
struct ckpt_io *ext4_journal_ckpt_io_new(struct wbfs *w);
void ext4_journal_ckpt_io_free(struct ckpt_io *c);
/* Queue @src (one block) for home block @blk; writes a full batch. */
int ext4_journal_ckpt_add(struct wjournal *j, struct ckpt_io *c, uint64_t blk, const void *src);
/* Write the batch's slots home. */
int ext4_journal_ckpt_flush_batch(struct wjournal *j, struct ckpt_io *c);
/*
 * Make room for @need log blocks after the head (UINT32_MAX: empty the
 * log): advance the tail, writing home the pinned blocks of the oldest
 * transactions first if need be. Context: commit_mutex, not fs_lock.
 */
int ext4_journal_checkpoint(struct wbfs *w, struct wjournal *j, uint32_t need);
/* Log blocks after the head that the next transaction may use. Context: commit_mutex. */
uint32_t ext4_journal_room(const struct wjournal *j);
/* Journal block @x of the ring, wrapped. */
static inline uint32_t ext4_journal_wrap(const struct wjournal *j, uint32_t x)
{
	return jbd2_ring_wrap(j->log.first, j->log.last, x);
}
/* Committed page @p (its reference given) joins the held pages. Context: fs_lock. */
void ext4_journal_hold(struct wbfs *w, struct wjournal *j, struct page *p);
/*
 * Held pages to writeback: all (@all), or those held @age_ms or longer
 * and in no transaction. Returns how many. Context: fs_lock.
 */
unsigned long ext4_journal_release_held(struct wbfs *w, struct wjournal *j, uint64_t age_ms,
					bool all);
/* syncfs: every held page to writeback. Context: no lock held. */
void ext4_journal_release_all(struct wbfs *w);
/* Held pages expired by @expire_ms to writeback (bdi op). Context: flusher, no lock. */
unsigned long ext4_journal_meta_expire(struct bdi *b, uint64_t expire_ms);
/* Fold completed home writes into pinned. Context: fs_lock. */
void ext4_journal_fold_homed(struct wjournal *j);
/* The oldest transaction pinned (or @dflt when none is). Context: fs_lock. */
uint32_t ext4_journal_oldest_pinned(const struct wjournal *j, uint32_t dflt);
/* The log starts at transaction @tid, or is empty, on disk now: forget what is before. */
void ext4_journal_tail_set(struct wbfs *w, struct wjournal *j, bool empty, uint32_t tid);
/* Where transaction @tid starts in the log. Context: commit_mutex. */
uint32_t ext4_journal_tx_start(const struct wjournal *j, uint32_t tid);
/* jcommit.c */
/* A failed journal write: nothing more is committed. Returns the error kept. */
int ext4_journal_abort(struct wbfs *w, struct wjournal *j, int err);

/* journal.c */
int ext4_journal_load(struct wbfs *w, const char *dev);
int ext4_journal_start(struct wbfs *w);
/*
 * Commit the running transaction (or those up to @tid: a file's sync_tid)
 * and wait until it is on the device. *@flushed: the device cache was
 * flushed after every data write completed before the call, and after
 * @io's (the caller's writes still in flight, bdi_sync_inode_start; NULL:
 * none); when false, the caller completes @io and flushes it. Returns 0 or
 * -errno. Context: no lock held.
 */
int ext4_journal_commit(struct wbfs *w, bool *flushed);
/* As ext4_journal_commit, with writes of the caller in flight on @io (a chain). */
int ext4_journal_commit_io(struct wbfs *w, bool *flushed, struct bdi_sync_io *io);
int ext4_journal_commit_tid(struct wbfs *w, uint32_t tid, bool *flushed,
			    struct bdi_sync_io *io);
/* The running transaction's id (0 without a journal). Context: any. */
uint32_t ext4_journal_tid(struct wbfs *w);
int ext4_journal_shutdown(struct wbfs *w);
void ext4_journal_free(struct wbfs *w);
void ext4_journal_note_write(struct wbfs *w, struct page *p);
void ext4_journal_note_same(struct wbfs *w, struct page *p);
void ext4_journal_note_freed(struct wbfs *w, uint64_t blk, uint64_t n);
void ext4_journal_note_reused(struct wbfs *w, uint64_t blk, uint64_t n);
void ext4_journal_release_busy(struct wbfs *w);
/* Blocks whose free has not committed: the running and committing
 * transactions' busy blocks. Context: fs_lock. */
blk64_t ext4_journal_busy_blocks(struct wbfs *w);
/* One busy block, near @goal, for journaled metadata (ext4.c). Context: fs_lock. */
errcode_t ext4_journal_take_busy(struct wbfs *w, blk64_t goal, blk64_t *ret);
/*
 * Blocks allocated (or made written) for pages whose write then failed
 * hold stale data: before a commit can record them as written, they are
 * made unwritten again (reads give zeros; the retried write converts them
 * back). Returns 0 or the first -errno (a record that could not be kept,
 * a conversion that failed: the others are still done; the caller says
 * so). Context: fs_lock held.
 */
int ext4_hide_failed_locked(struct wbfs *w);
static inline bool ext4_hide_pending(struct wbfs *w)
{
	return atomic_load(&w->hide_pending);
}
bool ext4_journal_on(const struct wbfs *w);
bool ext4_journal_aborted(const struct wbfs *w);
void ext4_bm_runs_add(struct bm_runs *r, blk64_t blk, blk64_t n);
void ext4_bm_runs_free(struct bm_runs *r);
void ext4_bitmap_drain(struct wbfs *w, ext2fs_block_bitmap bm, struct bm_runs *r,
		       void (*fn)(struct wbfs *w, blk64_t blk, blk64_t n));
void ext4_busy_unmark(struct wbfs *w, blk64_t blk, blk64_t n);
void ext4_bb_changed(struct wbfs *w, blk64_t blk, blk64_t n);
void ext4_ib_changed(struct wbfs *w, ext2_ino_t ino);
void ext4_bitmaps_check_next(struct wbfs *w);
void ext4_inode_alloc_stats(struct wbfs *w, ext2_ino_t ino, int inuse, int isdir);
void ext4_block_alloc_stats_range(struct wbfs *w, blk64_t blk, blk64_t n, int inuse);

/* ioctl.c */
void ext4_trim_note_freed(struct wbfs *w, blk64_t blk, blk64_t num);

/* super.c, alloc.c, bitmap.c */
void ext4_lock_shared(struct wbfs *w);
bool ext4_trylock_shared(struct wbfs *w);
void ext4_unlock_shared(struct wbfs *w);
/*
 * Block claims: writeback finds and takes free blocks under fs_lock
 * shared, so that claims in different groups run at once; the blocks
 * become an allocation (counts, notes) when mapped under fs_lock
 * exclusive (ext4_claim_use), or go back (ext4_claim_release). Until
 * then they are in use in memory and free in every bitmap written.
 */
int ext4_claim_blocks(struct wbfs *w, blk64_t goal, blk64_t len, blk64_t *got, blk64_t *glen);
void ext4_claim_use(struct wbfs *w, blk64_t blk, blk64_t n);
void ext4_claim_release(struct wbfs *w, blk64_t blk, blk64_t n);
/*
 * Inode claims, the same for creates: a free inode near @parent found
 * under fs_lock shared before the create takes it exclusive (0: none;
 * the create uses ext2fs_new_inode then). ext4_claim_inode_take, under
 * fs_lock exclusive, turns it back into a free inode the caller alone
 * knows of, as ext2fs_new_inode returns one.
 */
ext2_ino_t ext4_claim_inode(struct wbfs *w, ext2_ino_t parent);
bool ext4_claim_inode_take(struct wbfs *w, ext2_ino_t ino);
/* Does a bitmap block need ext4_bitmap_written's mask? Context: fs_lock. */
bool ext4_bitmap_masked(struct wbfs *w);
int ext4_errno(errcode_t err);
int ext4_reserve(struct wbfs *w, long nr, bool privileged);
void ext4_unreserve(struct wbfs *w, long nr);
long ext4_extent_blocks(long extents);
int ext4_reserve_page(struct wbfs *w, struct winode *wi, bool new_run, long base_extents,
		      bool privileged);
void ext4_unreserve_pages(struct wbfs *w, struct winode *wi, long nr);
int ext4_meta_room(struct wbfs *w, long nr);
bool ext4_room_ok(int64_t free_blocks, int64_t dirty, int64_t headroom, int64_t root,
		  long nr, unsigned flags);
int ext4_claim_room(struct wbfs *w, long nr, unsigned flags);
void ext4_refresh_free_locked(struct wbfs *w);
bool ext4_group_bad(struct wbfs *w, dgrp_t g);
bool ext4_is_bad_bitmap(struct wbfs *w, uint64_t blk, uint64_t count);
void ext4_bitmap_written(struct wbfs *w, uint64_t blk, void *data);
int ext4_locs_build(struct wbfs *w);
/*
 * ext2fs_flush, but a group's bitmap is written (and checksummed) only
 * when it changed: ext2fs_flush rewrites every group's two bitmaps when
 * any bit changed, a pass over the whole filesystem's bitmaps per journal
 * commit or fsync. Context: fs_lock, read-write.
 */
errcode_t ext4_flush_locked(struct wbfs *w);
/* Block @blk of an inode table holds inodes [*@first, *@first + *@n). */
bool ext4_itable_inodes(struct wbfs *w, uint64_t blk, ext2_ino_t *first, unsigned *n);
void ext4_release_busy_locked(struct wbfs *w);
bool ext4_alloc_should_commit(struct wbfs *w);
errcode_t ext4_new_range(struct wbfs *w, blk64_t goal, blk64_t len, blk64_t *got,
			 blk64_t *glen);
errcode_t ext4_punch(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in,
		     blk64_t start, blk64_t end);
extern struct lock_class lc_group_lock;		/* wbfs->group_lock[] */
extern struct lock_class lc_claim_lock;		/* wbfs->claim_lock */

/* bitmap.c: libext2fs callbacks, set by ext4_validate_block_bitmaps */
/*
 * libext2fs freed [blk, blk+num): what lies in a refused group stays in
 * use, and its group and the superblock keep their counts.
 */
void ext4_bad_group_keep_range(ext2_filsys fs, blk64_t blk, blk_t num, int inuse);
void ext4_bad_group_keep(ext2_filsys fs, blk64_t blk, int inuse);
/* libext2fs's own single-block allocations: a busy block when no other is free. */
errcode_t ext4_busy_alloc_block(ext2_filsys fs, blk64_t goal, blk64_t *ret);
/* libext2fs's range allocations: busy blocks only without a journal. */
errcode_t ext4_busy_new_range(ext2_filsys fs, int flags, blk64_t goal, blk64_t len,
			      blk64_t *pblk, blk64_t *plen);
/* Mount: the last block, while free, in use in memory only (libext2fs < 1.47.4). */
void ext4_hide_last_block(struct wbfs *w);
/* Before the filesystem closes: the bitmap it writes shows busy blocks free. */
void ext4_busy_free(struct wbfs *w);

/* check.c: the mount-time metadata checks (super.c calls them); 0 or -errno */
/* ext4_validate_block_bitmap and mballoc's free count check, for every group. */
int ext4_validate_block_bitmaps(struct wbfs *w, const char *dev);
/* The root inode, as ext4_fill_super and ext4_iget check it. */
int ext4_check_root(struct wbfs *w, const char *dev);
/* The journal inode, as the kernel checks it when it loads the journal. */
int ext4_check_journal(struct wbfs *w, const char *dev);
/* The group descriptors, as ext4_check_descriptors. */
int ext4_check_desc(struct wbfs *w, const char *dev);

/* iomgr.c */
extern struct struct_io_manager ext4_io_manager;
void iomgr_set(struct wbfs *w);
void iomgr_forget_range(struct wbfs *w, uint64_t blk, uint64_t count);
bool iomgr_meta_peek(struct wbfs *w, uint64_t off, void *buf, size_t len);

/* inode.c, orphan.c, map.c, sync.c */
bool winode_peek_inode(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in);
void winode_release_all(struct wbfs *w);
bool winode_should_retry_alloc(struct wbfs *w, int *retries);
bool ext4_commit_for_alloc(struct wbfs *w);
int winode_stat_gen(struct wbfs *w, ext2_ino_t ino, struct stat *st, uint32_t *generation);
uint64_t winode_size(struct winode *wi);
uint64_t winode_disksize(struct winode *wi);
uint64_t disksize_reach(struct mapping *m, uint64_t disksize, uint64_t size,
			const uint64_t *skip, unsigned nskip);
int winode_settle_disksize(struct wbfs *w, struct winode *wi);
void winode_set_size(struct winode *wi, uint64_t size, bool touch);
void winode_stamp_times(struct winode *wi);
void winode_touch(struct wbfs *w, struct winode *wi);
void winode_note_written(struct wbfs *w, ext2_ino_t ino, const struct ext2_inode_large *in);
/*
 * Bytes [@in, @in+@n) of block @blk become @b (they were @old's, NULL:
 * unknown). When @blk is in an inode table, each inode in memory whose
 * bytes change must commit the running transaction at its next fsync.
 * Context: fs_lock.
 */
void winode_note_itable_change(struct wbfs *w, uint64_t blk, const void *old, size_t in,
			       const void *b, size_t n);
int winode_touch_ctime_locked(struct wbfs *w, ext2_ino_t ino);
int winode_orphan_del_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in);
int winode_drop_link_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in);
int ext4_orphan_cleanup(struct wbfs *w);
void ext4_orphan_track(struct wbfs *w);
void ext4_orphan_untrack(struct wbfs *w);
int ext4_extent_next_leaf(ext2_extent_handle_t h, int *op, struct ext2fs_extent *e);
int ec_lookup(struct wbfs *w, struct winode *wi, uint64_t lblk, struct ext_run *out);
void ec_invalidate(struct winode *wi);
extern const struct bdi_ops ext4_bdi_ops;
/* The in-memory inode @ino, evicting or not (NULL: none). Context: itable_lock. */
struct winode *winode_itable_find_locked(struct wbfs *w, ext2_ino_t ino);
/*
 * Only a regular file's size lives in @wi (writes, truncate and fallocate
 * change it without libext2fs); a directory grows inside libext2fs
 * (ext2fs_expand_dir), so its inode is the one copy of its size.
 */
bool winode_owns_size(const struct winode *wi);
/*
 * Raise @wi's on-disk size over the data that is written or being mapped
 * now (@skip, as disksize_reach), and to @floor at least, never past
 * i_size. True when it grew. Context: fs_lock held.
 */
bool winode_disksize_catch_up(struct winode *wi, uint64_t floor, const uint64_t *skip,
			      unsigned nskip);
/*
 * Fold @wi's pending times, and its on-disk size (not i_size: the size
 * data has been written for), into @in. Context: fs_lock held.
 */
void winode_fold(struct wbfs *w, struct winode *wi, struct ext2_inode_large *in);
/* bdi_ops (sync.c's table) that map.c defines: mapping and failed writes. */
int ext4_map_pages(struct bdi *b, struct wb_inode *wb, const uint64_t *index,
		   unsigned n, uint64_t *pblk);
void ext4_newblock_failed(struct bdi *b, struct wb_inode *wb, uint64_t index);
/* A metadata page's write home completed (bdi op). Context: I/O completion. */
void ext4_journal_meta_written(struct bdi *b, struct page *p);
void ext4_write_error(struct bdi *b, struct wb_inode *wb, uint64_t index, int err);

/* data.c, range.c */
/* Start the readahead threads (mount, before serving); stop them, dropping
 * what is still queued, before inodes are released at unmount. */
int data_ra_start(struct wbfs *w);
void data_ra_stop(struct wbfs *w);
void data_drop_all(struct wbfs *w, struct winode *wi);
long data_report_lost(struct wbfs *w, struct winode *wi);
/*
 * Zero bytes [from, to) of one page, in the cache or, when the page is not
 * cached, after reading its block; a hole is left alone (it reads as
 * zeros). The page is dirtied when its block holds the stale bytes.
 */
int data_zero_in_page(struct wbfs *w, struct winode *wi, uint64_t from, uint64_t to,
		      uint64_t isize);
/* Zero the tail of the page holding byte @old_size before the file grows. */
int data_zero_eof_tail(struct wbfs *w, struct winode *wi, uint64_t old_size);

/* dcache.c */
struct dcache *dcache_new(void);
struct dcache *dcache_build(struct wbfs *w, ext2_ino_t dir);
int dcache_lookup(struct dcache *dc, const char *name, ext2_ino_t *ino);
int dcache_set(struct dcache *dc, const char *name, ext2_ino_t ino);
void dcache_remove(struct dcache *dc, const char *name);
void dcache_free(struct dcache *dc);

/* xattr.c */
int xattr_acl_inherit_locked(struct wbfs *w, ext2_ino_t dir, mode_t *mode, mode_t umask,
			     struct acl_inherit *ai);
int xattr_acl_inherit_store_locked(struct wbfs *w, ext2_ino_t ino, struct acl_inherit *ai);
void xattr_acl_inherit_done(struct acl_inherit *ai);

/* export.c */
uint32_t export_new_generation(void);
int export_set_dir_generation_locked(struct wbfs *w, ext2_ino_t ino);

/* ioctl.c */
bool winode_noatime_flag(struct winode *wi);
uint32_t iflags_inherit(mode_t mode, uint32_t dir_flags);
struct fstrim_range;
int ext4_trim(struct wbfs *w, struct fstrim_range *range);

#endif
