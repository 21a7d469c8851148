// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * In-memory inodes: the table FUSE lookups and forgets count against, the
 * attributes writers change without the fs lock (size, mtime, ctime) and
 * their write-back into the inode table, the per-inode extent map cache,
 * and the flusher's side of delayed allocation (map_pages: allocate big
 * contiguous ranges, insert them in the extent tree, convert unwritten
 * extents). Freeing an unlinked inode waits for its last forget.
 * Directory entries are dir.c's business; data pages are data.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "wbcfs/lib/clock.h"
#include "ext4_i.h"

/* ---- the inode table --------------------------------------------------- */

static size_t itable_slot(struct wbfs *w, ext2_ino_t ino)
{
	return (ino * 2654435761u) & (w->itable_size - 1);
}

static struct winode *itable_find_locked(struct wbfs *w, ext2_ino_t ino)
{
	struct winode *wi = w->itable[itable_slot(w, ino)];

	while (wi && wi->ino != ino)
		wi = wi->hash_next;
	return wi;
}

static void itable_remove_locked(struct wbfs *w, struct winode *wi)
{
	struct winode **pp = &w->itable[itable_slot(w, wi->ino)];

	while (*pp != wi)
		pp = &(*pp)->hash_next;
	*pp = wi->hash_next;
	w->nr_winodes--;
}

struct winode *winode_find(struct wbfs *w, ext2_ino_t ino)
{
	struct winode *wi;

	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	wi = itable_find_locked(w, ino);
	ls_mutex_unlock(&w->itable_lock);
	return wi;
}

static struct winode *winode_alloc(struct wbfs *w, ext2_ino_t ino,
				   const struct ext2_inode_large *in)
{
	struct winode *wi = calloc(1, sizeof(*wi));
	pthread_rwlockattr_t ra;

	if (!wi)
		return NULL;
	wi->ino = ino;
	wi->mode = in->i_mode;
	wi->size = EXT2_I_SIZE(in);
	wi->disksize = wi->size;
	wi->has_priv = (in->i_mode & (S_ISUID | S_ISGID)) != 0;
	wbfs_ts_get(in, TS_ATIME, &wi->disk_atime);
	wbfs_ts_get(in, TS_MTIME, &wi->disk_mtime);
	wbfs_ts_get(in, TS_CTIME, &wi->disk_ctime);
	wi->disk_noatime = (in->i_flags & EXT2_NOATIME_FL) != 0;
	wi->iflags = in->i_flags;
	/* truncate and extending writes must not starve behind a stream of
	 * shared writers and readers; nobody takes ilock recursively */
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&wi->ilock, &ra);
	pthread_rwlockattr_destroy(&ra);
	pthread_rwlock_init(&wi->dc_lock, NULL);
	pthread_mutex_init(&wi->attr_lock, NULL);
	pthread_mutex_init(&wi->ec_lock, NULL);
	mapping_init(&wi->map, w->cache, &bdi_mapping_ops, &wi->wb);
	bdi_inode_init(w->bdi, &wi->wb, &wi->map, false);
	return wi;
}

static void winode_free_mem(struct winode *wi)
{
	dcache_free(wi->dcache);
	mapping_destroy(&wi->map);
	pthread_rwlock_destroy(&wi->ilock);
	pthread_rwlock_destroy(&wi->dc_lock);
	pthread_mutex_destroy(&wi->attr_lock);
	pthread_mutex_destroy(&wi->ec_lock);
	free(wi->runs);
	wbfs_kstore_free(wi);
	free(wi);
}

/*
 * Find or instantiate the in-memory inode; @lookup counts one FUSE lookup.
 * Context: fs_lock not held (it is taken to read a new inode).
 */
struct winode *winode_get(struct wbfs *w, ext2_ino_t ino, bool lookup)
{
	struct ext2_inode_large in;
	struct winode *wi, *nw;

	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	if (w->closing) {
		/* unmount: no new references to an inode it is freeing */
		ls_mutex_unlock(&w->itable_lock);
		return NULL;
	}
	/* an inode on its way out is written first: wait, then read it anew */
	while ((wi = itable_find_locked(w, ino)) && wi->evicting)
		lockstat_cond_wait(&w->itable_cond, &w->itable_lock);
	if (wi && lookup)
		wi->nlookup++;
	ls_mutex_unlock(&w->itable_lock);
	if (wi)
		return wi;

	/* from the inode table's cached page when it can (no fs_lock) */
	if (!winode_peek_inode(w, ino, &in)) {
		wbfs_lock(w);
		if (wbfs_read_inode(w, ino, &in)) {
			wbfs_unlock(w);
			return NULL;
		}
		wbfs_unlock(w);
	}
	nw = winode_alloc(w, ino, &in);
	if (!nw)
		return NULL;
	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	while ((wi = itable_find_locked(w, ino)) && wi->evicting)
		lockstat_cond_wait(&w->itable_cond, &w->itable_lock);
	if (!wi && w->closing) {
		ls_mutex_unlock(&w->itable_lock);
		winode_free_mem(nw);
		return NULL;
	}
	if (!wi) {
		wi = nw;
		nw = NULL;
		/* a change to its inode since the read was made in this
		 * transaction or an older one (winode_note_itable_change
		 * did not find it in the table) */
		wi->sync_tid = wbfs_journal_tid(w);
		wi->hash_next = w->itable[itable_slot(w, ino)];
		w->itable[itable_slot(w, ino)] = wi;
		w->nr_winodes++;
	}
	if (lookup)
		wi->nlookup++;
	ls_mutex_unlock(&w->itable_lock);
	if (nw)
		winode_free_mem(nw);
	return wi;
}

/* Release every reservation held by dirty delalloc pages, then all pages. */
void data_drop_all(struct wbfs *w, struct winode *wi)
{
	struct page *pages[64];
	uint64_t start = 0;
	unsigned n, i;

	while ((n = mapping_lookup_tag(&wi->map, &start, UINT64_MAX, TAG_DIRTY, pages, 64))) {
		for (i = 0; i < n; i++) {
			lock_page(pages[i]);
			if (page_test_clear(pages[i], PG_delalloc))
				wbfs_unreserve_pages(w, wi, 1);
			unlock_page(pages[i]);
			page_put(pages[i]);
		}
	}
	mapping_truncate(&wi->map, 0, UINT64_MAX);
}

static bool winode_is_dirty(struct winode *wi)
{
	bool dirty;

	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	dirty = wi->size_dirty || wi->times_dirty || wi->atime_dirty;
	ls_mutex_unlock(&wi->attr_lock);
	return dirty || atomic_load(&wi->map.nrdirty) || atomic_load(&wi->map.nrwriteback);
}

/*
 * Drop an in-memory inode nobody references any more (marked evicting, so
 * lookups of the same inode wait): write what is still dirty, or free the
 * inode when its last link is gone, then leave the table. Pages that
 * cannot be written now keep the inode in memory, as the kernel keeps a
 * dirty inode, for writeback to retry; only at unmount (@final) are they
 * reported lost.
 */
static void winode_evict(struct wbfs *w, struct winode *wi, bool final)
{
	/*
	 * unlinked and freed are set under fs_lock, but not while @wi is
	 * evicting: only an operation the kernel makes on the inode (which
	 * holds a lookup or an open, so no eviction begins) or that finds it
	 * through winode_get (which waits for the eviction) changes them.
	 * So they are read here without it, as their writer left them.
	 */
	bool unlinked = __atomic_load_n(&wi->unlinked, __ATOMIC_ACQUIRE) &&
			!__atomic_load_n(&wi->freed, __ATOMIC_ACQUIRE);

	/* the pages and attributes die with @wi: write them first; what
	 * still cannot be written is reported lost, never dropped silently */
	if (!unlinked && !w->ro && winode_is_dirty(wi) &&
	    bdi_sync_inode(w->bdi, &wi->wb, 0, UINT64_MAX, false) &&
	    atomic_load(&wi->map.nrdirty)) {
		if (!final) {
			ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
			wi->evicting = false;
			pthread_cond_broadcast(&w->itable_cond);
			ls_mutex_unlock(&w->itable_lock);
			return;
		}
		data_report_lost(w, wi);
	}
	/* its data is written: the size on disk goes with it (an inode
	 * whose size waited for a page that is now written, and is not
	 * dirty itself) */
	if (!unlinked && !w->ro)
		winode_settle_disksize(w, wi);
	data_drop_all(w, wi);
	bdi_inode_remove(w->bdi, &wi->wb);
	wbfs_lock(w);
	if (unlinked && winode_free_locked(w, wi->ino)) {
		/* blocks and inode stay allocated: leave it to e2fsck */
		w->fs_error = true;
		fprintf(msg_stream(), "wbcfs: %s: inode %u: cannot free the deleted file; the"
			" filesystem is left marked not clean\n", w->dev_path, wi->ino);
	}
	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	itable_remove_locked(w, wi);
	pthread_cond_broadcast(&w->itable_cond);
	ls_mutex_unlock(&w->itable_lock);
	/* fs_lock held: nobody who found @wi under it is still using it */
	wbfs_unlock(w);
	winode_free_mem(wi);
}

/* Context: itable_lock held. True when @wi just became unreferenced. */
static bool winode_begin_evict_locked(struct winode *wi)
{
	if (wi->nlookup || wi->nopen || wi->evicting || wi->ino == EXT2_ROOT_INO)
		return false;
	wi->evicting = true;
	return true;
}

void winode_forget(struct wbfs *w, struct winode *wi, uint64_t nlookup)
{
	bool evict;

	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	wi->nlookup = wi->nlookup > nlookup ? wi->nlookup - nlookup : 0;
	evict = winode_begin_evict_locked(wi);
	ls_mutex_unlock(&w->itable_lock);
	if (evict)
		winode_evict(w, wi, false);
}

/*
 * A FUSE FORGET: find @ino and drop @nlookup lookups in one step under
 * itable_lock, so that the inode cannot be evicted and freed (by another
 * forget or by unmount) between finding and counting. A forget that
 * arrives during or after unmount finds nothing, or an inode unmount is
 * already evicting, and does nothing more.
 */
void winode_forget_ino(struct wbfs *w, ext2_ino_t ino, uint64_t nlookup)
{
	struct winode *wi;
	bool evict = false;

	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	wi = itable_find_locked(w, ino);
	if (wi) {
		wi->nlookup = wi->nlookup > nlookup ? wi->nlookup - nlookup : 0;
		evict = !w->closing && winode_begin_evict_locked(wi);
	}
	ls_mutex_unlock(&w->itable_lock);
	if (evict)
		winode_evict(w, wi, false);
}

void winode_put_open(struct wbfs *w, struct winode *wi)
{
	bool evict;

	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	wi->nopen--;
	evict = !w->closing && winode_begin_evict_locked(wi);
	ls_mutex_unlock(&w->itable_lock);
	if (evict)
		winode_evict(w, wi, false);
}

/*
 * A RELEASE: as winode_put_open, but @ino is looked up under itable_lock,
 * for a release that may arrive with the unmount (one sent when the last
 * asynchronous write of a closed file completes): unmount may already
 * have evicted the inode, and then there is nothing left to count.
 */
void winode_put_open_ino(struct wbfs *w, ext2_ino_t ino)
{
	struct winode *wi;
	bool evict = false;

	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	wi = itable_find_locked(w, ino);
	if (wi && wi->nopen) {
		wi->nopen--;
		evict = !w->closing && winode_begin_evict_locked(wi);
	}
	ls_mutex_unlock(&w->itable_lock);
	if (evict)
		winode_evict(w, wi, false);
}

/*
 * Unmount: evict everything still in the table (after the final sync),
 * and wait for the evictions other threads (a FORGET or RELEASE that
 * arrived with the unmount) are running: each may still write or free
 * its inode, which must be done before the filesystem is closed. From
 * here on, forgets and releases evict nothing themselves.
 */
void winode_release_all(struct wbfs *w)
{
	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	w->closing = true;
	for (;;) {
		struct winode *wi = NULL;
		size_t i;

		for (i = 0; i < w->itable_size && !wi; i++)
			for (wi = w->itable[i]; wi && wi->evicting; wi = wi->hash_next)
				;
		if (wi) {
			wi->evicting = true;
			ls_mutex_unlock(&w->itable_lock);
			winode_evict(w, wi, true);
			ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
		} else if (w->nr_winodes) {
			/* only inodes another thread is evicting are left */
			lockstat_cond_wait(&w->itable_cond, &w->itable_lock);
		} else {
			break;
		}
	}
	ls_mutex_unlock(&w->itable_lock);
}

/*
 * ENOSPC while deleted files wait for their FORGET: the kernel queues it
 * as the unlink drops its inode, but another thread may serve it after
 * the request that found no space, and freeing them gives the space back.
 * Wait up to 20 ms for an eviction, at most 3 times per request, as
 * ext4_should_retry_alloc waits for a journal commit. True: try again.
 */
bool winode_should_retry_alloc(struct wbfs *w, int *retries)
{
	struct winode *wi;
	bool pending = false;
	size_t i;

	if (++*retries > 3)
		return false;
	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	for (i = 0; i < w->itable_size && !pending; i++)
		for (wi = w->itable[i]; wi && !pending; wi = wi->hash_next)
			/* unlinked and freed are fs_lock's: a hint read here */
			pending = wi->evicting ||
				  (!wi->nopen && __atomic_load_n(&wi->unlinked, __ATOMIC_RELAXED) &&
				   !__atomic_load_n(&wi->freed, __ATOMIC_RELAXED));
	if (pending && !w->closing)
		clock_cond_wait_ms(&w->itable_cond, &w->itable_lock, 20);
	ls_mutex_unlock(&w->itable_lock);
	return pending;
}

/* ---- attributes ---------------------------------------------------------- */

uint64_t winode_size(struct winode *wi)
{
	uint64_t s;

	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	s = wi->size;
	ls_mutex_unlock(&wi->attr_lock);
	return s;
}

uint64_t winode_disksize(struct winode *wi)
{
	uint64_t s;

	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	s = wi->disksize;
	ls_mutex_unlock(&wi->attr_lock);
	return s;
}

/*
 * New in-memory size; @touch also stamps mtime/ctime. A smaller size
 * lowers the on-disk size with it, at once (ext4's truncate sets
 * i_disksize); a larger one leaves it to disksize_catch_up, which raises
 * it only over data that is no longer waiting to be written.
 * Context: ilock held.
 */
void winode_set_size(struct winode *wi, uint64_t size, bool touch)
{
	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	if (wi->size != size) {
		wi->size = size;
		wi->size_dirty = true;
	}
	if (wi->disksize > size)
		wi->disksize = size;
	if (touch) {
		wbfs_now(&wi->mtime);
		wi->ctime = wi->mtime;
		wi->times_dirty = true;
	}
	ls_mutex_unlock(&wi->attr_lock);
}

/* Data changed: stamp mtime and ctime. Context: ilock held (shared or not). */
void winode_stamp_times(struct winode *wi)
{
	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	wbfs_now(&wi->mtime);
	wi->ctime = wi->mtime;
	wi->times_dirty = true;
	ls_mutex_unlock(&wi->attr_lock);
}

/* A write changed data: stamp times, queue the inode for write_inode. */
void winode_touch(struct wbfs *w, struct winode *wi)
{
	bdi_mark_inode_dirty(w->bdi, &wi->wb, I_DIRTY_INODE);
}

/*
 * Only a regular file's size lives in @wi (writes, truncate and fallocate
 * change it without libext2fs); a directory grows inside libext2fs
 * (ext2fs_expand_dir), so its inode is the one copy of its size.
 */
static bool winode_owns_size(const struct winode *wi)
{
	return LINUX_S_ISREG(wi->mode);
}

/*
 * Does page @p hold data that is not yet mapped for writeback: dirty, or
 * reserved (delalloc), or locked while uptodate (a write copying into it,
 * or a writeback batch that has cleared its dirty bit and not yet mapped
 * it)? A page locked while not uptodate is being read and holds nothing
 * new; a page under writeback and unlocked has been mapped, and its write
 * is ordered before any commit that could record a size over it.
 */
static bool page_data_pending(const struct page *p)
{
	return page_test(p, PG_dirty) || page_test(p, PG_delalloc) ||
	       (page_test(p, PG_locked) && page_test(p, PG_uptodate));
}

/*
 * How far a file's on-disk size may reach, from @disksize towards @size:
 * up to the first page from @disksize's on whose data is pending, or to
 * @size when there is none. Pages not cached are holes or written data;
 * clean cached ones are written (or zeros read from holes): exposing them
 * shows no byte the file does not hold. @skip (@nskip indices, ascending)
 * are pages being mapped now, in the caller's fs_lock section: they count
 * as written. The size must have been read before the pages are looked
 * at: a write past EOF dirties its page before it grows i_size, so a page
 * holding data below @size is seen pending until it has been mapped.
 */
uint64_t disksize_reach(struct mapping *m, uint64_t disksize, uint64_t size,
			const uint64_t *skip, unsigned nskip)
{
	uint64_t start = disksize >> PAGE_SHIFT, last, stop = size;
	struct page *pages[16];
	unsigned n, i, k = 0;

	if (size <= disksize)
		return disksize;
	last = (size - 1) >> PAGE_SHIFT;
	while (stop == size && start <= last &&
	       (n = mapping_lookup_range(m, &start, last, pages, 16))) {
		for (i = 0; i < n; i++) {
			uint64_t idx = pages[i]->index;

			while (k < nskip && skip[k] < idx)
				k++;
			if (stop == size && !(k < nskip && skip[k] == idx) &&
			    page_data_pending(pages[i]))
				stop = idx << PAGE_SHIFT;
			page_put(pages[i]);
		}
		if (!start)	/* wrapped past the last index */
			break;
	}
	return stop > disksize ? stop : disksize;
}

/*
 * Raise @wi's on-disk size over the data that is written or being mapped
 * now (@skip, as disksize_reach), and to @floor at least, never past
 * i_size: ext4 raises i_disksize as writeback allocates, and ordered mode
 * makes the commit that records it wait for those writes. True when it
 * grew. Context: fs_lock held (every raise is; a commit never sees half
 * of one).
 */
static bool disksize_catch_up(struct winode *wi, uint64_t floor, const uint64_t *skip,
			      unsigned nskip)
{
	uint64_t ds, size, reach;
	bool grew = false;

	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	ds = wi->disksize;
	size = wi->size;
	ls_mutex_unlock(&wi->attr_lock);
	if (ds >= size)
		return false;
	if (floor > size)
		floor = size;
	reach = disksize_reach(&wi->map, ds > floor ? ds : floor, size, skip, nskip);
	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	/* a truncate may have lowered size meanwhile */
	if (reach > wi->size)
		reach = wi->size;
	if (reach > wi->disksize) {
		wi->disksize = reach;
		grew = true;
	}
	ls_mutex_unlock(&wi->attr_lock);
	return grew;
}

/*
 * Fold @wi's pending times, and its on-disk size (not i_size: the size
 * data has been written for), into @in. Context: fs_lock held.
 */
static void winode_fold(struct wbfs *w, struct winode *wi, struct ext2_inode_large *in)
{
	if (winode_owns_size(wi))
		disksize_catch_up(wi, 0, NULL, 0);
	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	if (winode_owns_size(wi))
		ext2fs_inode_size_set(w->fs, (struct ext2_inode *)in, wi->disksize);
	if (wi->times_dirty) {
		wbfs_ts_set(in, TS_MTIME, &wi->mtime);
		wbfs_ts_set(in, TS_CTIME, &wi->ctime);
	}
	if (wi->atime_dirty)
		wbfs_ts_set(in, TS_ATIME, &wi->atime);
	wi->size_dirty = wi->times_dirty = wi->atime_dirty = false;
	/* until the write: the times are in neither place stat_cached reads */
	wi->folding = true;
	wi->fold_seq++;
	ls_mutex_unlock(&wi->attr_lock);
}

/*
 * @in was just written: keep @ino's copy of the times and the noatime
 * flag the atime rule reads. Every write of an inode comes here
 * (wbfs_write_inode). Context: fs_lock held.
 */
void winode_note_written(struct wbfs *w, ext2_ino_t ino, const struct ext2_inode_large *in)
{
	struct winode *wi = winode_find(w, ino);

	if (!wi)
		return;
	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	wbfs_ts_get(in, TS_ATIME, &wi->disk_atime);
	wbfs_ts_get(in, TS_MTIME, &wi->disk_mtime);
	wbfs_ts_get(in, TS_CTIME, &wi->disk_ctime);
	wi->disk_noatime = (in->i_flags & EXT2_NOATIME_FL) != 0;
	wi->folding = false;
	wi->fold_seq++;
	ls_mutex_unlock(&wi->attr_lock);
	/* even when its bytes did not change (a clock stepped back leaves
	 * the stamps equal): what the caller changed besides, an xattr
	 * block say, is in the running transaction */
	wi->sync_tid = wbfs_journal_tid(w);
}

void winode_note_itable_change(struct wbfs *w, uint64_t blk, const void *old, size_t in,
			       const void *b, size_t n)
{
	size_t isz, k, end = in + n;
	ext2_ino_t first;
	unsigned per;
	uint32_t tid;

	if (!w->journal || !n || !wbfs_itable_inodes(w, blk, &first, &per))
		return;
	isz = EXT2_INODE_SIZE(w->fs->super);
	tid = wbfs_journal_tid(w);
	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	/* only the inodes whose bytes differ: a block holds many files' */
	for (k = in / isz; k * isz < end && k < per; k++) {
		size_t lo = k * isz > in ? k * isz : in;
		size_t hi = (k + 1) * isz < end ? (k + 1) * isz : end;
		struct winode *wi;

		if (old && !memcmp((const char *)old + lo, (const char *)b + (lo - in), hi - lo))
			continue;
		wi = itable_find_locked(w, first + (ext2_ino_t)k);
		if (wi)
			wi->sync_tid = tid;
	}
	ls_mutex_unlock(&w->itable_lock);
}

/* Is an access at @now due to update @wi's atime? Context: attr_lock held. */
static bool winode_atime_due_locked(struct wbfs *w, struct winode *wi, int oflags,
				    const struct timespec *now)
{
	enum atime_mode mode = options_atime_mode(&w->opts);
	struct timespec a, m, c;

	if (w->ro || mode == ATIME_NOATIME || (oflags & O_NOATIME) || wi->disk_noatime ||
	    (w->opts.nodiratime && LINUX_S_ISDIR(wi->mode)))
		return false;
	a = wi->atime_dirty ? wi->atime : wi->disk_atime;
	m = wi->times_dirty ? wi->mtime : wi->disk_mtime;
	c = wi->times_dirty ? wi->ctime : wi->disk_ctime;
	return atime_update_due(mode, &a, &m, &c, now);
}

/* Would an access now update @wi's atime? */
bool winode_atime_due(struct wbfs *w, struct winode *wi)
{
	struct timespec now;
	bool due;

	wbfs_now(&now);
	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	due = winode_atime_due_locked(w, wi, 0, &now);
	ls_mutex_unlock(&wi->attr_lock);
	return due;
}

/*
 * A read, readdir or readlink of @wi (@oflags: its open flags, or 0):
 * update atime as the kernel's ext4 does under the mount's atime options
 * (relatime, strictatime, noatime, nodiratime; O_NOATIME and the inode's
 * noatime flag stop it too). The new atime waits in memory, like the
 * times of a write, and is written with the inode: a read never waits
 * for fs_lock here.
 */
void winode_accessed(struct wbfs *w, struct winode *wi, int oflags)
{
	struct timespec now;
	bool due;

	wbfs_now(&now);
	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	due = winode_atime_due_locked(w, wi, oflags, &now);
	if (due) {
		wi->atime = now;
		wi->atime_dirty = true;
	}
	ls_mutex_unlock(&wi->attr_lock);
	if (due)
		bdi_mark_inode_dirty(w->bdi, &wi->wb, I_DIRTY_INODE);
}

/*
 * Fold in-memory size and times into @in, which the caller is about to
 * write; they are clean afterwards. Context: fs_lock held.
 */
void winode_fold_attrs_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	struct winode *wi = winode_find(w, ino);

	if (wi)
		winode_fold(w, wi, in);
}

static dev_t inode_rdev(const struct ext2_inode_large *in)
{
	uint32_t b0 = in->i_block[0], b1 = in->i_block[1];

	if (b0)
		return makedev((b0 >> 8) & 255, b0 & 255);
	return makedev((b1 & 0xfff00) >> 8, (b1 & 0xff) | ((b1 >> 12) & 0xfff00));
}

static void stat_fill(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in,
		      struct stat *st)
{
	struct timespec ts;

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = in->i_mode;
	st->st_nlink = in->i_links_count;
	if (LINUX_S_ISDIR(in->i_mode) && in->i_links_count == 1)
		st->st_nlink = 1;
	st->st_uid = inode_uid(*in);
	st->st_gid = inode_gid(*in);
	st->st_size = (off_t)EXT2_I_SIZE(in);
	st->st_blksize = (blksize_t)w->fs->blocksize;
	st->st_blocks = (blkcnt_t)ext2fs_get_stat_i_blocks(w->fs, (struct ext2_inode *)in);
	if (S_ISCHR(in->i_mode) || S_ISBLK(in->i_mode))
		st->st_rdev = inode_rdev(in);
	wbfs_ts_get(in, TS_ATIME, &ts);
	st->st_atim = ts;
	wbfs_ts_get(in, TS_MTIME, &ts);
	st->st_mtim = ts;
	wbfs_ts_get(in, TS_CTIME, &ts);
	st->st_ctim = ts;
}

/* @st from inode @in, with @wi's in-memory size, times and delalloc blocks. */
static void stat_overlay(struct winode *wi, struct stat *st)
{
	if (winode_owns_size(wi))
		st->st_size = (off_t)wi->size;
	if (wi->times_dirty) {
		st->st_mtim = wi->mtime;
		st->st_ctim = wi->ctime;
	}
	if (wi->atime_dirty)
		st->st_atim = wi->atime;
	st->st_blocks += wi->nr_delalloc * (PAGE_SIZE / 512);
}

/*
 * stat of @ino with the in-memory size, times and delalloc blocks, and
 * its generation when @generation is not NULL. Context: fs_lock held.
 */
static int winode_stat_locked(struct wbfs *w, ext2_ino_t ino, struct stat *st,
			      uint32_t *generation)
{
	struct ext2_inode_large in;
	struct winode *wi;
	int ret;

	ret = wbfs_read_inode(w, ino, &in);
	if (ret)
		return ret;
	stat_fill(w, ino, &in, st);
	if (generation)
		*generation = in.i_generation;
	wi = winode_find(w, ino);
	if (!wi)
		return 0;
	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	stat_overlay(wi, st);
	ls_mutex_unlock(&wi->attr_lock);
	return 0;
}

/*
 * Inode @ino as libext2fs last wrote it, without fs_lock, into @in (the
 * large inode's fields): every inode write goes through the metadata
 * page cache (iomgr.c) under the page lock, so a cached inode table page
 * holds a whole, current copy. The checksum is verified over the whole
 * on-disk inode, as a read through libext2fs does. Returns false when the
 * page is not cached or the copy does not verify: the caller reads it
 * under fs_lock, which reports what is wrong. The inode table's place
 * never changes on a mounted filesystem. Context: any.
 */
bool winode_peek_inode(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	ext2_filsys fs = w->fs;
	union {
		struct ext2_inode_large in;
		char b[1024];	/* the largest on-disk inode */
	} u;
	uint32_t ipg;
	unsigned isz;
	uint64_t byte;

	if (!fs)
		return false;
	ipg = fs->super->s_inodes_per_group;
	isz = EXT2_INODE_SIZE(fs->super);
	if (isz > sizeof(u) || !ino || ino > fs->super->s_inodes_count)
		return false;
	byte = ext2fs_inode_table_loc(fs, (dgrp_t)((ino - 1) / ipg)) * (uint64_t)fs->blocksize +
	       (uint64_t)((ino - 1) % ipg) * isz;
	if (!wbfs_meta_peek(w, byte, u.b, isz))
		return false;
	/* a 128-byte inode has no extra fields: zero, as libext2fs reads it */
	if (isz < sizeof(struct ext2_inode_large))
		memset(u.b + isz, 0, sizeof(struct ext2_inode_large) - isz);
	if (!ext2fs_inode_csum_verify(fs, ino, &u.in))
		return false;
	*in = u.in;
	return true;
}

/*
 * stat of an instantiated inode without fs_lock (getattr, and the
 * replies of lookup and create): the inode from the page cache, the
 * in-memory attributes from @wi. A fold of those attributes into an inode
 * not yet written (fold_seq moved, or folding) sends the caller to the
 * locked path, so the two are never from different moments.
 */
static bool winode_stat_cached(struct wbfs *w, ext2_ino_t ino, struct stat *st,
			       uint32_t *generation)
{
	struct winode *wi = winode_find(w, ino);
	struct ext2_inode_large in;
	unsigned seq;
	bool ok;

	if (!wi)
		return false;
	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	ok = !wi->folding;
	seq = wi->fold_seq;
	ls_mutex_unlock(&wi->attr_lock);
	if (!ok || !winode_peek_inode(w, ino, &in) || !in.i_mode)
		return false;
	stat_fill(w, ino, &in, st);
	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	ok = !wi->folding && wi->fold_seq == seq;
	if (ok)
		stat_overlay(wi, st);
	ls_mutex_unlock(&wi->attr_lock);
	if (ok && generation)
		*generation = in.i_generation;
	if (ok)
		atomic_fetch_add(&w->stats.nr_stat_unlocked, 1);
	return ok;
}

/* winode_stat, and the inode's generation (for a lookup's reply) unless NULL. */
int winode_stat_gen(struct wbfs *w, ext2_ino_t ino, struct stat *st, uint32_t *generation)
{
	int ret;

	if (winode_stat_cached(w, ino, st, generation))
		return 0;
	wbfs_lock(w);
	ret = winode_stat_locked(w, ino, st, generation);
	wbfs_unlock(w);
	return ret;
}

int winode_stat(struct wbfs *w, ext2_ino_t ino, struct stat *st)
{
	return winode_stat_gen(w, ino, st, NULL);
}

/* A change to @ino itself (links, xattrs, rename): stamp ctime. Context: fs_lock. */
int winode_touch_ctime_locked(struct wbfs *w, ext2_ino_t ino)
{
	struct ext2_inode_large in;
	struct timespec now;
	int ret = wbfs_read_inode(w, ino, &in);

	if (ret)
		return ret;
	/* pending times first: the new ctime is later than any of them */
	winode_fold_attrs_locked(w, ino, &in);
	wbfs_now(&now);
	wbfs_ts_set(&in, TS_CTIME, &now);
	return wbfs_write_inode(w, ino, &in);
}

/* ---- the orphan list ------------------------------------------------------
 *
 * An inode whose last link goes while it is still open or looked up lives
 * on until its last forget. So that a crash in between does not leave it
 * allocated with no name, it is put on the on-disk orphan list as the
 * kernel's ext4 does without a journal's orphan file: s_last_orphan is the
 * head, each orphan's i_dtime the next inode number (0 ends the list).
 * e2fsck and the kernel's ext4 free the list's inodes at their next run,
 * and so does wbcfs at mount (wbfs_orphan_cleanup).
 *
 * The list is singly linked on disk, and orphans leave it in any order
 * (the kernel forgets them oldest first, the far end of the list). So
 * that taking one off does not walk the list, reading an inode per step
 * (a few thousand deleted files held by the kernel made that quadratic,
 * all under fs_lock), orphan_prev keeps each orphan's predecessor in
 * memory, as the kernel's ext4 keeps its in-memory s_orphan list. It is
 * kept from the moment the list is known whole (empty after the mount's
 * cleanup); without it (no memory), the walk is the fallback.
 */

/* The list is empty or fully known from now on. Context: fs_lock held. */
void wbfs_orphan_track(struct wbfs *w)
{
	jtab_clear(&w->orphan_prev);
	w->orphan_tracked = !w->fs->super->s_last_orphan;
}

/* Forget the in-memory links (fall back to walking the list). */
void wbfs_orphan_untrack(struct wbfs *w)
{
	jtab_free(&w->orphan_prev);
	w->orphan_tracked = false;
}

/* @ino goes at the head of the list, before @next (0: none). */
static void orphan_track_add(struct wbfs *w, ext2_ino_t ino, ext2_ino_t next)
{
	if (!w->orphan_tracked)
		return;
	if (jtab_put(&w->orphan_prev, ino, 0) ||
	    (next && jtab_put(&w->orphan_prev, next, ino)))
		wbfs_orphan_untrack(w);
}

static bool orphan_ino_valid(struct wbfs *w, ext2_ino_t ino)
{
	return ino >= EXT2_FIRST_INO(w->fs->super) && ino <= w->fs->super->s_inodes_count;
}

/* Put @ino, whose last link is gone, at the head of the list. @in is written. */
static int orphan_add_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	ext2_ino_t next = w->fs->super->s_last_orphan;
	struct winode *wi;
	int ret;

	in->i_dtime = next;
	ret = wbfs_write_inode(w, ino, in);
	if (ret)
		return ret;
	orphan_track_add(w, ino, orphan_ino_valid(w, next) ? next : 0);
	w->fs->super->s_last_orphan = ino;
	ext2fs_mark_super_dirty(w->fs);
	wi = winode_find(w, ino);
	if (wi)
		wi->orphan = true;
	return 0;
}

/*
 * Make the list skip @ino, whose successor is @next (0: none): the head
 * moves on (@cur 0), or orphan @cur, whose inode is @prev, points past it.
 */
static int orphan_skip(struct wbfs *w, ext2_ino_t cur, struct ext2_inode_large *prev,
		       ext2_ino_t next)
{
	if (!cur) {
		w->fs->super->s_last_orphan = next;
		ext2fs_mark_super_dirty(w->fs);
		return 0;
	}
	prev->i_dtime = next;
	return wbfs_write_inode(w, cur, prev);
}

/*
 * The orphan before @ino, walking the list from its head: 1 with *@cur
 * (0: @ino is the head) and, for a predecessor, its inode in @prev; 0 when
 * @ino is not on the list; or -errno.
 */
static int orphan_prev_walk(struct wbfs *w, ext2_ino_t ino, ext2_ino_t *cur,
			    struct ext2_inode_large *prev)
{
	ext2_ino_t c = w->fs->super->s_last_orphan;
	uint32_t steps = 0;
	int ret;

	*cur = 0;
	if (c == ino)
		return 1;
	while (orphan_ino_valid(w, c) && steps++ < w->fs->super->s_inodes_count) {
		ret = wbfs_read_inode(w, c, prev);
		if (ret)
			return ret;
		if (prev->i_dtime == ino) {
			*cur = c;
			return 1;
		}
		c = prev->i_dtime;
	}
	return 0;
}

/*
 * The same from orphan_prev, checked against the disk; -EAGAIN when the
 * two disagree.
 */
static int orphan_prev_tracked(struct wbfs *w, ext2_ino_t ino, ext2_ino_t *cur,
			       struct ext2_inode_large *prev)
{
	uint32_t *p = jtab_find(&w->orphan_prev, ino);
	int ret;

	if (!p)
		return 0;
	*cur = *p;
	if (!*cur)
		return w->fs->super->s_last_orphan == ino ? 1 : -EAGAIN;
	ret = wbfs_read_inode(w, *cur, prev);
	if (ret)
		return ret;
	return prev->i_dtime == ino ? 1 : -EAGAIN;
}

/*
 * Take @ino (its inode @in) off the list if it is there: the head moves on,
 * or the orphan before it points past it. Returns 0 or -errno.
 */
static int orphan_del_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	ext2_ino_t cur, next = orphan_ino_valid(w, in->i_dtime) ? in->i_dtime : 0;
	struct ext2_inode_large prev;
	int ret;

	if (!w->fs->super->s_last_orphan)
		return 0;
	ret = w->orphan_tracked ? orphan_prev_tracked(w, ino, &cur, &prev) : -EAGAIN;
	if (ret == -EAGAIN) {
		if (w->orphan_tracked)
			wbfs_orphan_untrack(w);	/* they disagree: the disk wins */
		ret = orphan_prev_walk(w, ino, &cur, &prev);
	}
	if (ret <= 0)
		return ret;	/* not on the list, or an error */
	ret = orphan_skip(w, cur, &prev, next);
	if (!ret && w->orphan_tracked) {
		jtab_del(&w->orphan_prev, ino);
		if (next && jtab_put(&w->orphan_prev, next, cur))
			wbfs_orphan_untrack(w);	/* cannot fail: @next is there */
	}
	return ret;
}

/* ---- freeing ------------------------------------------------------------- */

/*
 * An O_TMPFILE inode is born without a link: on the orphan list from the
 * start, as ext4_tmpfile puts it, so a crash leaves it for the next mount
 * to free. Context: fs_lock held, @ino in the inode table.
 */
int winode_orphan_add_ino_locked(struct wbfs *w, ext2_ino_t ino)
{
	struct ext2_inode_large in;
	int ret = wbfs_read_inode(w, ino, &in);

	return ret ? ret : orphan_add_locked(w, ino, &in);
}

/*
 * linkat() names an O_TMPFILE inode: off the orphan list, with no dtime;
 * @in is updated for the caller to write. Context: fs_lock held.
 */
int winode_orphan_del_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	struct winode *wi = winode_find(w, ino);
	int ret = 0;

	if (w->fs->super->s_last_orphan == ino || (wi && wi->orphan))
		ret = orphan_del_locked(w, ino, in);
	if (!ret) {
		in->i_dtime = 0;
		if (wi)
			wi->orphan = false;
	}
	return ret;
}

/* Release the blocks, xattrs and inode number of an inode with no links. */
int winode_free_locked(struct wbfs *w, ext2_ino_t ino)
{
	struct ext2_inode_large in;
	struct timespec now;
	struct winode *wi;
	errcode_t err = 0;
	int ret;

	ret = wbfs_read_inode(w, ino, &in);
	if (ret)
		return ret;
	wi = winode_find(w, ino);
	if (w->fs->super->s_last_orphan == ino || (wi && wi->orphan)) {
		ret = orphan_del_locked(w, ino, &in);
		if (ret)
			return ret;
	}
	if (ext2fs_inode_has_valid_blocks2(w->fs, (struct ext2_inode *)&in))
		err = wbfs_punch(w, ino, &in, 0, ~0ULL);
	if (!err)
		err = ext2fs_free_ext_attr(w->fs, ino, &in);
	if (err)
		return -wbfs_errno(err);
	wbfs_now(&now);
	in.i_dtime = (uint32_t)now.tv_sec;
	in.i_links_count = 0;
	ret = wbfs_write_inode(w, ino, &in);
	if (ret)
		return ret;
	wbfs_inode_alloc_stats(w, ino, -1, LINUX_S_ISDIR(in.i_mode));
	if (wi) {
		wi->freed = true;
		wi->orphan = false;
	}
	return 0;
}

/*
 * One link of @ino is gone (already removed from its directory); @in is
 * its inode, updated and written here. At zero links the inode is freed
 * now, or at its last forget while the kernel still references it.
 * Context: fs_lock held.
 */
int winode_drop_link_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	struct winode *wi;
	struct timespec now;
	bool busy;
	int ret;

	if (LINUX_S_ISDIR(in->i_mode))
		in->i_links_count = 0;
	else if (in->i_links_count > 0)
		in->i_links_count--;
	winode_fold_attrs_locked(w, ino, in);
	wbfs_now(&now);
	wbfs_ts_set(in, TS_CTIME, &now);
	ret = wbfs_write_inode(w, ino, in);
	if (ret || in->i_links_count)
		return ret;
	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	wi = itable_find_locked(w, ino);
	busy = wi && (wi->nlookup || wi->nopen);
	if (wi)
		wi->unlinked = true;
	ls_mutex_unlock(&w->itable_lock);
	return busy ? orphan_add_locked(w, ino, in) : winode_free_locked(w, ino);
}

/*
 * At mount: free the inodes left on the orphan list by a crash (open
 * files whose last link was gone), as the kernel's ext4 does. An inode
 * that still has links is only taken off the list. A list that leads
 * somewhere invalid is cut there, with one line, and the filesystem is
 * left marked not clean at unmount for e2fsck to finish. Returns how many inodes were freed, or -errno.
 */
int wbfs_orphan_cleanup(struct wbfs *w)
{
	struct ext2_super_block *sb = w->fs->super;
	struct ext2_inode_large in;
	uint32_t steps = 0;
	int ret, nr = 0;

	while (sb->s_last_orphan) {
		ext2_ino_t ino = sb->s_last_orphan;

		if (!orphan_ino_valid(w, ino) || steps++ >= sb->s_inodes_count ||
		    !ext2fs_test_inode_bitmap2(w->fs->inode_map, ino)) {
			fprintf(msg_stream(), "wbcfs: %s: bad orphan inode %u: orphan list cut there;"
				" the filesystem stays marked not clean (run e2fsck)\n",
				w->dev_path, ino);
			sb->s_last_orphan = 0;
			ext2fs_mark_super_dirty(w->fs);
			w->fs_error = true;
			break;
		}
		ret = wbfs_read_inode(w, ino, &in);
		if (ret)
			return ret;
		if (in.i_links_count) {
			sb->s_last_orphan = orphan_ino_valid(w, in.i_dtime) ? in.i_dtime : 0;
			ext2fs_mark_super_dirty(w->fs);
			in.i_dtime = 0;
			ret = wbfs_write_inode(w, ino, &in);
		} else {
			ret = winode_free_locked(w, ino);
			nr++;
		}
		if (ret)
			return ret;
	}
	return nr;
}

/* ---- extent map cache ---------------------------------------------------- */

static int ec_push(struct winode *wi, uint64_t lblk, uint64_t pblk, uint32_t len, bool uninit)
{
	struct ext_run *r;

	if (wi->nr_runs) {
		r = &wi->runs[wi->nr_runs - 1];
		if (r->lblk + r->len == lblk && r->pblk + r->len == pblk &&
		    r->uninit == uninit && (uint64_t)r->len + len < UINT32_MAX) {
			r->len += len;
			return 0;
		}
	}
	if (wi->nr_runs == wi->cap_runs) {
		size_t cap = wi->cap_runs ? wi->cap_runs * 2 : 8;
		r = realloc(wi->runs, cap * sizeof(*r));
		if (!r)
			return -ENOMEM;
		wi->runs = r;
		wi->cap_runs = cap;
	}
	wi->runs[wi->nr_runs++] = (struct ext_run){ lblk, pblk, len, uninit };
	return 0;
}

/*
 * The next leaf extent of the walk @h, from the root when *@op is
 * EXT2_EXTENT_ROOT (it moves on to EXT2_EXTENT_NEXT). Returns 1 with @e
 * filled, 0 at the end of the tree, or -errno.
 */
int wbfs_extent_next_leaf(ext2_extent_handle_t h, int *op, struct ext2fs_extent *e)
{
	for (;;) {
		errcode_t err = ext2fs_extent_get(h, *op, e);

		*op = EXT2_EXTENT_NEXT;
		if (err == EXT2_ET_EXTENT_NO_NEXT || err == EXT2_ET_NO_CURRENT_NODE)
			return 0;
		if (err)
			return -wbfs_errno(err);
		if ((e->e_flags & EXT2_EXTENT_FLAGS_LEAF) &&
		    !(e->e_flags & EXT2_EXTENT_FLAGS_SECOND_VISIT))
			return 1;
	}
}

static int ec_load_extents(struct wbfs *w, struct winode *wi, struct ext2_inode_large *in)
{
	ext2_extent_handle_t h;
	struct ext2fs_extent e;
	errcode_t err;
	int op = EXT2_EXTENT_ROOT, ret = 0;

	err = ext2fs_extent_open2(w->fs, wi->ino, (struct ext2_inode *)in, &h);
	if (err)
		return -wbfs_errno(err);
	while ((ret = wbfs_extent_next_leaf(h, &op, &e)) > 0) {
		ret = ec_push(wi, e.e_lblk, e.e_pblk, e.e_len,
			      (e.e_flags & EXT2_EXTENT_FLAGS_UNINIT) != 0);
		if (ret)
			break;
	}
	ext2fs_extent_free(h);
	return ret;
}

static int ec_block_cb(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t blockcnt,
		       blk64_t ref_blk, int ref_offset, void *priv)
{
	struct winode *wi = priv;

	if (blockcnt >= 0 && ec_push(wi, (uint64_t)blockcnt, *blocknr, 1, false))
		return BLOCK_ABORT;
	return 0;
}

/* Load the extent map of @wi. Context: fs_lock and ec_lock held. */
static int ec_load_locked(struct wbfs *w, struct winode *wi)
{
	struct ext2_inode_large in;
	errcode_t err;
	int ret;

	if (wi->ec_valid)
		return 0;
	wi->nr_runs = 0;
	ret = wbfs_read_inode(w, wi->ino, &in);
	if (ret)
		return ret;
	if (in.i_flags & EXT4_EXTENTS_FL) {
		ret = ec_load_extents(w, wi, &in);
	} else if (ext2fs_inode_has_valid_blocks2(w->fs, (struct ext2_inode *)&in)) {
		err = ext2fs_block_iterate3(w->fs, wi->ino, BLOCK_FLAG_READ_ONLY | BLOCK_FLAG_DATA_ONLY,
					    NULL, ec_block_cb, wi);
		ret = -wbfs_errno(err);
	}
	if (!ret)
		wi->ec_valid = true;
	return ret;
}

/* Binary search: the run containing @lblk, or the index where it would go. */
static size_t ec_find(struct winode *wi, uint64_t lblk, bool *hit)
{
	size_t lo = 0, hi = wi->nr_runs;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		struct ext_run *r = &wi->runs[mid];

		if (lblk < r->lblk)
			hi = mid;
		else if (lblk >= r->lblk + r->len)
			lo = mid + 1;
		else {
			*hit = true;
			return mid;
		}
	}
	*hit = false;
	return lo;
}

/*
 * Map logical block @lblk: on a hit @out is the run from @lblk on; on a
 * hole @out->pblk = 0 and @out->len is the hole's length up to the next run
 * (UINT32_MAX at the end). Returns 0 or -errno.
 */
static int ec_lookup_locked(struct winode *wi, uint64_t lblk, struct ext_run *out)
{
	bool hit;
	size_t i = ec_find(wi, lblk, &hit);

	if (hit) {
		struct ext_run *r = &wi->runs[i];
		uint64_t d = lblk - r->lblk;

		*out = (struct ext_run){ lblk, r->pblk + d, (uint32_t)(r->len - d), r->uninit };
		return 0;
	}
	out->lblk = lblk;
	out->pblk = 0;
	out->uninit = false;
	out->len = UINT32_MAX;
	if (i < wi->nr_runs && wi->runs[i].lblk - lblk < UINT32_MAX)
		out->len = (uint32_t)(wi->runs[i].lblk - lblk);
	return 0;
}

int ec_lookup(struct wbfs *w, struct winode *wi, uint64_t lblk, struct ext_run *out)
{
	int ret;

	ls_mutex_lock(&wi->ec_lock, &lc_ec_lock);
	while (!wi->ec_valid) {
		ls_mutex_unlock(&wi->ec_lock);
		wbfs_lock(w);
		ls_mutex_lock(&wi->ec_lock, &lc_ec_lock);
		ret = ec_load_locked(w, wi);
		ls_mutex_unlock(&wi->ec_lock);
		wbfs_unlock(w);
		if (ret)
			return ret;
		ls_mutex_lock(&wi->ec_lock, &lc_ec_lock);
	}
	ret = ec_lookup_locked(wi, lblk, out);
	ls_mutex_unlock(&wi->ec_lock);
	return ret;
}

void ec_invalidate(struct winode *wi)
{
	ls_mutex_lock(&wi->ec_lock, &lc_ec_lock);
	wi->ec_valid = false;
	wi->nr_runs = 0;
	ls_mutex_unlock(&wi->ec_lock);
}

/* Record a freshly allocated run [lblk, lblk+len) -> pblk. ec_lock held. */
static void ec_insert_locked(struct winode *wi, uint64_t lblk, uint64_t pblk, uint32_t len)
{
	bool hit;
	size_t i = ec_find(wi, lblk, &hit);
	struct ext_run *r;

	if (!hit && i > 0) {
		r = &wi->runs[i - 1];
		if (r->lblk + r->len == lblk && r->pblk + r->len == pblk && !r->uninit) {
			r->len += len;
			return;
		}
	}
	if (hit || ec_push(wi, lblk, pblk, len, false)) {
		wi->ec_valid = false;	/* unexpected overlap: reload later */
		return;
	}
	/* ec_push appended; rotate it into place */
	if (i < wi->nr_runs - 1) {
		struct ext_run nr = wi->runs[wi->nr_runs - 1];
		memmove(&wi->runs[i + 1], &wi->runs[i], (wi->nr_runs - 1 - i) * sizeof(nr));
		wi->runs[i] = nr;
	}
}

/* ---- bdi_ops: the flusher's side -------------------------------------- */

#define MAP_POOL 8	/* claims one mapping takes at most */

struct map_ctx {
	struct wbfs *w;
	struct winode *wi;
	struct ext2_inode_large in;
	ext2_extent_handle_t h;
	long allocated;		/* data blocks allocated */
	long delalloc_done;	/* reservations converted */
	bool ec_dirty;		/* unwritten extents converted: reload map */
	bool size_grown;	/* i_size extended over the pages mapped */
	struct bm_run pool[MAP_POOL];	/* blocks claimed for the holes, in order */
	unsigned nr_pool, pool_next;	/* claims; the first not yet used */
};

static int map_set(struct map_ctx *c, uint64_t lblk, uint64_t pblk)
{
	errcode_t err;

	if (c->h)
		err = ext2fs_extent_set_bmap(c->h, lblk, pblk, 0);
	else
		err = ext2fs_bmap2(c->w->fs, c->wi->ino, (struct ext2_inode *)&c->in, NULL,
				   BMAP_SET, lblk, NULL, (blk64_t *)&pblk);
	return -wbfs_errno(err);
}


/*
 * After mapping @lblk -> @pblk, grow the extent that now ends there over
 * the next @n blocks in one replace instead of @n set_bmap calls.
 * Returns how many blocks it added (0 when the extent cannot grow).
 */
static uint32_t map_extend(struct map_ctx *c, uint64_t lblk, uint64_t pblk, uint32_t n)
{
	struct ext2fs_extent e;
	uint32_t k;

	if (!c->h || !n || ext2fs_extent_goto(c->h, lblk) ||
	    ext2fs_extent_get(c->h, EXT2_EXTENT_CURRENT, &e))
		return 0;
	if ((e.e_flags & EXT2_EXTENT_FLAGS_UNINIT) || e.e_lblk + e.e_len != lblk + 1 ||
	    e.e_pblk + e.e_len != pblk + 1 || e.e_len >= EXT_INIT_MAX_LEN)
		return 0;
	k = EXT_INIT_MAX_LEN - e.e_len < n ? EXT_INIT_MAX_LEN - e.e_len : n;
	e.e_len += k;
	return ext2fs_extent_replace(c->h, 0, &e) ? 0 : k;
}

/*
 * Map logical [lblk, lblk+n) to physical [pblk, pblk+n) (a hole before).
 * *@done: how many of them are in the extent tree, also on an error.
 */
static int map_set_range(struct map_ctx *c, uint64_t lblk, uint64_t pblk, uint32_t n,
			 uint32_t *done)
{
	*done = 0;
	while (n) {
		uint32_t k;
		int ret = map_set(c, lblk, pblk);

		if (ret)
			return ret;
		k = map_extend(c, lblk, pblk, n - 1);
		lblk += 1 + k;
		pblk += 1 + k;
		n -= 1 + k;
		*done += 1 + k;
	}
	return 0;
}

/*
 * Clear PG_delalloc of the page at @index; true if it held a reservation.
 * @fresh: its block holds nothing valid (just allocated, or unwritten
 * and now made written) until the page's write succeeds: PG_newblock.
 */
static bool map_take_delalloc(struct winode *wi, uint64_t index, bool fresh)
{
	struct page *p = mapping_get_page(&wi->map, index);
	bool was;

	if (!p)
		return false;
	was = page_test_clear(p, PG_delalloc);
	if (fresh)
		page_set(p, PG_newblock);
	page_put(p);
	return was;
}

/* map_alloc_run: the rest of the batch waits for a commit (BDI_PBLK_AGAIN). */
#define MAP_AFTER_COMMIT 1

/*
 * Allocate @len blocks for logical [lblk, lblk+len) in as few runs as
 * possible. Returns 0, -errno, or MAP_AFTER_COMMIT with the pages not
 * mapped set to BDI_PBLK_AGAIN.
 */
static int map_alloc_run(struct map_ctx *c, uint64_t lblk, uint32_t len, uint64_t *pblk_out)
{
	ext2_filsys fs = c->w->fs;
	blk64_t goal, got, glen;
	uint32_t done = 0, mapped, i;
	errcode_t err;
	int ret;

	goal = ext2fs_find_inode_goal(fs, c->wi->ino, (struct ext2_inode *)&c->in, lblk);
	while (done < len) {
		if (c->pool_next < c->nr_pool) {
			/* claimed before fs_lock was taken exclusive */
			struct bm_run *p = &c->pool[c->pool_next];

			got = p->blk;
			glen = p->n < len - done ? p->n : len - done;
			p->blk += glen;
			p->n -= glen;
			if (!p->n)
				c->pool_next++;
			wbfs_claim_use(c->w, got, glen);
		} else {
			err = wbfs_new_range(c->w, goal, len - done, &got, &glen);
			if (err == EXT2_ET_BLOCK_ALLOC_FAIL && wbfs_alloc_should_commit(c->w)) {
				/* room only where frees have not committed */
				for (i = done; i < len; i++)
					pblk_out[i] = BDI_PBLK_AGAIN;
				return MAP_AFTER_COMMIT;
			}
			if (err)
				return -wbfs_errno(err);
			wbfs_block_alloc_stats_range(c->w, got, glen, +1);
		}
		wbfs_iomgr_forget_range(c->w, got, glen);
		ret = map_set_range(c, lblk + done, got, (uint32_t)glen, &mapped);
		/* an error midway (no room for an extent block): the blocks in
		 * the tree count in i_blocks as if all had gone well, the rest
		 * go back to the bitmap, so the tree, i_blocks and the bitmap
		 * agree; their pages stay dirty for the next attempt */
		if (ret && mapped < glen)
			wbfs_block_alloc_stats_range(c->w, got + mapped, glen - mapped, -1);
		for (i = 0; i < mapped; i++) {
			pblk_out[done + i] = got + i;
			if (map_take_delalloc(c->wi, lblk + done + i, true))
				c->delalloc_done++;
		}
		ls_mutex_lock(&c->wi->ec_lock, &lc_ec_lock);
		if (c->wi->ec_valid && mapped)
			ec_insert_locked(c->wi, lblk + done, got, mapped);
		ls_mutex_unlock(&c->wi->ec_lock);
		c->allocated += (long)mapped;
		done += mapped;
		if (ret) {
			c->ec_dirty = true;	/* reload the map from the tree */
			return ret;
		}
		goal = got + glen;
	}
	return 0;
}

/* Map one page already backed by a block; unwritten extents become written. */
static int map_existing(struct map_ctx *c, const struct ext_run *r, uint64_t *pblk)
{
	*pblk = r->pblk;
	if (map_take_delalloc(c->wi, r->lblk, r->uninit))	/* fallocated under a delalloc page */
		c->delalloc_done++;
	if (!r->uninit)
		return 0;
	c->ec_dirty = true;
	return map_set(c, r->lblk, r->pblk);
}

static int map_open(struct map_ctx *c)
{
	struct wbfs *w = c->w;
	errcode_t err;
	int ret;

	ret = wbfs_read_inode(w, c->wi->ino, &c->in);
	if (ret)
		return ret;
	ls_mutex_lock(&c->wi->ec_lock, &lc_ec_lock);
	ret = ec_load_locked(w, c->wi);
	ls_mutex_unlock(&c->wi->ec_lock);
	if (ret)
		return ret;
	if (c->in.i_flags & EXT4_EXTENTS_FL) {
		err = ext2fs_extent_open2(w->fs, c->wi->ino, (struct ext2_inode *)&c->in, &c->h);
		if (err)
			return -wbfs_errno(err);
	}
	return 0;
}

static int map_close(struct map_ctx *c, int ret)
{
	struct wbfs *w = c->w;
	int r;

	if (c->h)
		ext2fs_extent_free(c->h);
	if (c->allocated || c->size_grown) {
		ext2fs_iblk_add_blocks(w->fs, (struct ext2_inode *)&c->in, (blk64_t)c->allocated);
		r = wbfs_write_inode(w, c->wi->ino, &c->in);
		if (r && !ret)
			ret = r;
	}
	if (c->ec_dirty)
		ec_invalidate(c->wi);
	wbfs_unreserve_pages(w, c->wi, c->delalloc_done);
	return ret;
}

/*
 * The on-disk size covers the pages about to be written, in the same
 * change as their blocks, as ext4 raises i_disksize at writeback
 * (mpage_map_and_submit_extent): a commit (or a crash) never shows
 * written blocks past it (e2fsck would call the size wrong). Ordered data
 * makes the pages reach the device before that change commits. Past the
 * batch it stops at the first page still waiting to be written
 * (disksize_reach). Pages waiting below the batch's last one (writeback
 * that started mid-file) have no block yet and read as zeros until they
 * are written, as with ext4.
 */
static void map_grow_size(struct map_ctx *c, const uint64_t *index, const uint64_t *pblk,
			  unsigned n)
{
	/* the pages past EOF (a suffix: the batch is in index order) are not
	 * written, and must not count as written; nor the pages left to map
	 * after a commit (a suffix too) */
	while (n && (pblk[n - 1] == BDI_PBLK_SKIP || pblk[n - 1] == BDI_PBLK_AGAIN))
		n--;
	if (!n || !winode_owns_size(c->wi) ||
	    !disksize_catch_up(c->wi, (index[n - 1] + 1) << PAGE_SHIFT, index, n))
		return;
	ext2fs_inode_size_set(c->w->fs, (struct ext2_inode *)&c->in, winode_disksize(c->wi));
	c->size_grown = true;
}

/* Look up index @i of the batch; returns the count of unmapped pages from it. */
static unsigned map_hole_run(const uint64_t *index, unsigned i, unsigned n, const struct ext_run *r)
{
	unsigned k = 1;

	while (i + k < n && index[i + k] == index[i] + k && k < r->len)
		k++;
	return k;
}

/*
 * Where a new block for hole @lblk should go: after the block mapped
 * before it, else at the start of the inode's (flex) group, as
 * ext2fs_find_inode_goal. Context: ec_lock, ec_valid.
 */
static blk64_t map_goal_locked(struct wbfs *w, struct winode *wi, uint64_t lblk)
{
	ext2_filsys fs = w->fs;
	bool hit;
	size_t i = ec_find(wi, lblk, &hit);
	dgrp_t g;

	if (i > 0 && !hit) {
		const struct ext_run *r = &wi->runs[i - 1];

		return r->pblk + (lblk - r->lblk);
	}
	g = ext2fs_group_of_ino(fs, wi->ino);
	if (fs->super->s_log_groups_per_flex)
		g &= ~((1U << fs->super->s_log_groups_per_flex) - 1);
	return ext2fs_group_first_block2(fs, g);
}

/*
 * Claim blocks for the batch's holes before fs_lock is taken exclusive
 * (wbfs_claim_blocks): what writeback searches for runs concurrently
 * with other claims, and map_alloc_run uses them in order. Nothing is
 * claimed when the map is not cached (loading it needs fs_lock), or
 * when free space is short (claims held by one flusher must not make
 * another's allocation fail).
 */
static void map_claim(struct map_ctx *c, const uint64_t *index, unsigned n, uint64_t size)
{
	struct wbfs *w = c->w;
	struct winode *wi = c->wi;
	blk64_t want = 0, goal = 0, got, glen;
	unsigned i;
	bool room;

	ls_mutex_lock(&wi->ec_lock, &lc_ec_lock);
	for (i = 0; wi->ec_valid && i < n && (index[i] << PAGE_SHIFT) < size; i++) {
		struct ext_run r;

		if (ec_lookup_locked(wi, index[i], &r) || r.pblk)
			continue;
		if (!want)
			goal = map_goal_locked(w, wi, index[i]);
		want++;
	}
	ls_mutex_unlock(&wi->ec_lock);
	if (!want)
		return;		/* overwrites only, or the map not cached */
	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	room = w->free_blocks - w->reserved - w->headroom > 4 * (int64_t)want;
	ls_mutex_unlock(&w->resv_lock);
	if (!room)
		return;
	wbfs_lock_shared(w);
	if (atomic_fetch_add(&w->nr_claimers, 1))
		atomic_fetch_add(&w->stats.nr_claim_overlaps, 1);
	while (want && c->nr_pool < MAP_POOL && !wbfs_claim_blocks(w, goal, want, &got, &glen)) {
		c->pool[c->nr_pool++] = (struct bm_run){ got, glen };
		want -= glen;
		goal = got + glen;
	}
	atomic_fetch_sub(&w->nr_claimers, 1);
	wbfs_unlock_shared(w);
}

/* Claims map_alloc_run did not use go back. Context: fs_lock. */
static void map_unclaim(struct map_ctx *c)
{
	for (; c->pool_next < c->nr_pool; c->pool_next++)
		if (c->pool[c->pool_next].n)
			wbfs_claim_release(c->w, c->pool[c->pool_next].blk,
					   c->pool[c->pool_next].n);
}

static int wbfs_map_pages(struct bdi *b, struct wb_inode *wb, const uint64_t *index,
			  unsigned n, uint64_t *pblk)
{
	struct map_ctx c = { .w = bdi_owner(b), .wi = container_of(wb, struct winode, wb) };
	uint64_t size = winode_size(c.wi);
	unsigned i = 0, k;
	int ret;

	map_claim(&c, index, n, size);
	wbfs_lock(c.w);
	/* allocation and unwritten conversion change its extents (maybe
	 * only leaf blocks, not its inode): its fsync commits them */
	c.wi->sync_tid = wbfs_journal_tid(c.w);
	if (c.wi->freed) {
		/* the file is gone: nothing to write its pages to */
		for (i = 0; i < n; i++)
			pblk[i] = BDI_PBLK_SKIP;
		map_unclaim(&c);
		wbfs_unlock(c.w);
		return 0;
	}
	ret = map_open(&c);
	while (!ret && i < n) {
		struct ext_run r;

		if ((index[i] << PAGE_SHIFT) >= size) {
			pblk[i++] = BDI_PBLK_SKIP;
			continue;
		}
		ls_mutex_lock(&c.wi->ec_lock, &lc_ec_lock);
		ret = ec_lookup_locked(c.wi, index[i], &r);
		ls_mutex_unlock(&c.wi->ec_lock);
		if (ret)
			break;
		if (r.pblk) {
			ret = map_existing(&c, &r, &pblk[i++]);
			continue;
		}
		k = map_hole_run(index, i, n, &r);
		ret = map_alloc_run(&c, index[i], k, &pblk[i]);
		i += k;
		if (ret == MAP_AFTER_COMMIT) {
			/* the flusher commits, then maps the rest again */
			for (; i < n; i++)
				pblk[i] = BDI_PBLK_AGAIN;
			ret = 0;
		}
	}
	if (!ret)
		map_grow_size(&c, index, pblk, n);
	map_unclaim(&c);
	ret = map_close(&c, ret);
	wbfs_unlock(c.w);
	/* a page still waiting held the on-disk size back: the inode's
	 * next write (after that page's) raises it */
	if (!ret && winode_owns_size(c.wi) && winode_disksize(c.wi) < winode_size(c.wi))
		bdi_mark_inode_dirty(b, wb, I_DIRTY_INODE);
	return ret;
}

static int wbfs_write_inode_op(struct bdi *b, struct wb_inode *wb, enum wb_sync_mode mode)
{
	struct wbfs *w = bdi_owner(b);
	struct winode *wi = container_of(wb, struct winode, wb);
	struct ext2_inode_large in;
	int ret;

	if (wb->is_meta)
		return 0;
	wbfs_lock(w);
	if (wi->freed || !w->fs) {
		wbfs_unlock(w);
		return 0;
	}
	ret = wbfs_read_inode(w, wi->ino, &in);
	if (!ret) {
		winode_fold(w, wi, &in);
		ret = wbfs_write_inode(w, wi->ino, &in);
	}
	wbfs_unlock(w);
	return ret;
}

/*
 * Commit so that blocks whose free has not committed may be reused, if
 * there are any: true when a commit was made. Context: no lock held.
 */
bool wbfs_commit_for_alloc(struct wbfs *w)
{
	bool pending;

	wbfs_lock(w);
	pending = w->fs && !w->ro && wbfs_alloc_should_commit(w);
	wbfs_unlock(w);
	if (!pending)
		return false;
	atomic_fetch_add(&w->stats.nr_alloc_commits, 1);
	return !wbfs_journal_commit(w, NULL);
}

/*
 * ENOSPC from a request: try again? After deleted files' FORGETs
 * (winode_should_retry_alloc), or after a commit when an allocation found
 * room only in blocks whose free had not committed: ext4_should_retry_alloc
 * forces that commit the same way, up to 3 times a request.
 */
bool wbfs_should_retry_alloc(struct wbfs *w, int *retries)
{
	bool refused;

	if (winode_should_retry_alloc(w, retries))
		return true;
	if (*retries > 3)
		return false;
	/* a commit since the refusal may have released them already: retry */
	refused = atomic_exchange(&w->alloc_busy_refused, false);
	return wbfs_commit_for_alloc(w) || refused;
}

/*
 * Writeback found room for pages only in blocks whose free has not
 * committed (BDI_PBLK_AGAIN): commit, and it maps them again. Nothing to
 * commit (another commit came first): 0 all the same, and the map finds
 * the room, or ENOSPC. Context: flusher, no page of the batch locked.
 */
static int wbfs_alloc_wait(struct bdi *b, struct wb_inode *wb)
{
	struct wbfs *w = bdi_owner(b);

	(void)wb;
	if (!wbfs_commit_for_alloc(w) && wbfs_journal_aborted(w))
		return -EIO;
	return 0;
}

static int wbfs_sync_fs(struct bdi *b)
{
	struct wbfs *w = bdi_owner(b);
	errcode_t err = 0;
	int waits = 0;

	/* files just deleted: their FORGET frees them, part of what is synced */
	while (winode_should_retry_alloc(w, &waits))
		;
	wbfs_bitmaps_check_next(w);	/* every changed bitmap was noted? */
	if (w->journal)
		return wbfs_journal_commit(w, NULL);	/* with the busy blocks */
	wbfs_lock(w);
	if (w->fs && !w->ro) {
		err = wbfs_flush_locked(w);
		/* as a commit: what was freed before may be reused now */
		if (!err)
			wbfs_release_busy_locked(w);
	}
	wbfs_unlock(w);
	return -wbfs_errno(err);
}

/*
 * Bring the on-disk size up to i_size once the data below it is written
 * or mapped (fsync, eviction): log the inode when disksize_catch_up
 * raises it. A file whose data is all mapped then has disksize == i_size.
 * Context: no lock held; takes fs_lock.
 */
int winode_settle_disksize(struct wbfs *w, struct winode *wi)
{
	struct ext2_inode_large in;
	int ret = 0;

	if (!winode_owns_size(wi) || winode_disksize(wi) >= winode_size(wi))
		return 0;
	wbfs_lock(w);
	if (!wi->freed && w->fs && disksize_catch_up(wi, 0, NULL, 0)) {
		ret = wbfs_read_inode(w, wi->ino, &in);
		if (!ret) {
			winode_fold(w, wi, &in);
			ret = wbfs_write_inode(w, wi->ino, &in);
		}
	}
	wbfs_unlock(w);
	return ret;
}

/* ---- failed writes to new blocks ------------------------------------ */

/* Record page @index of inode @ino for wbfs_hide_failed_locked. */
static void hide_record(struct wbfs *w, ext2_ino_t ino, uint64_t index)
{
	ls_mutex_lock(&w->hide_lock, &lc_hide_lock);
	if (w->nr_hide == w->cap_hide) {
		size_t cap = w->cap_hide ? w->cap_hide * 2 : 64;
		struct hide_rec *v = realloc(w->hide, cap * sizeof(*v));

		if (!v) {
			w->hide_overflow = true;
			goto out;
		}
		w->hide = v;
		w->cap_hide = cap;
	}
	w->hide[w->nr_hide++] = (struct hide_rec){ ino, index };
out:
	atomic_store(&w->hide_pending, true);
	ls_mutex_unlock(&w->hide_lock);
}

/*
 * The write of page @index failed while its block was new: the block
 * holds stale data (another file's, or the device's old contents), and
 * the allocation or unwritten conversion that mapped it is in the running
 * transaction, or in the one whose ordered wait this write ends. Recorded
 * here; the commit makes the block unwritten first (journal.c). Context:
 * flusher thread, maybe I/O completion: a short mutex, no I/O.
 */
static void wbfs_newblock_failed(struct bdi *b, struct wb_inode *wb, uint64_t index)
{
	struct wbfs *w = bdi_owner(b);

	/* without a journal nothing orders metadata after data anyway */
	if (wbfs_journal_on(w))
		hide_record(w, container_of(wb, struct winode, wb)->ino, index);
}

/*
 * Make the block of page @index of @wi unwritten, unless the page has
 * been written since (PG_newblock cleared) or is gone (truncated: its
 * block with it). The flusher maps a page only with fs_lock, which we
 * hold: a retry that starts now finds the extent unwritten and converts
 * it back, in the transaction its write is ordered before. A page being
 * written again may turn out either way: it stays recorded (the commit
 * builds again once the write is done). Files without extents keep the
 * block as it is (there is no unwritten state to give it).
 * Context: fs_lock held.
 */
static int hide_block_locked(struct wbfs *w, struct winode *wi, uint64_t index)
{
	struct map_ctx c = { .w = w, .wi = wi };
	struct page *p = mapping_get_page(&wi->map, index);
	struct ext_run r;
	bool hide, busy;
	int ret;

	if (!p)
		return 0;
	hide = page_test(p, PG_newblock) && !wi->freed;
	busy = page_test(p, PG_writeback);
	page_put(p);
	if (!hide)
		return 0;
	if (busy) {
		hide_record(w, wi->ino, index);
		return 0;
	}
	ret = map_open(&c);
	if (!ret && c.h) {
		ls_mutex_lock(&wi->ec_lock, &lc_ec_lock);
		ret = ec_lookup_locked(wi, index, &r);
		ls_mutex_unlock(&wi->ec_lock);
		if (!ret && r.pblk && !r.uninit) {
			ret = -wbfs_errno(ext2fs_extent_set_bmap(c.h, index, r.pblk,
								 EXT2_EXTENT_SET_BMAP_UNINIT));
			c.ec_dirty = true;
			if (!ret)
				atomic_fetch_add(&w->nr_hidden, 1);
		}
	}
	ret = map_close(&c, ret);
	/* its extents changed: its fsync commits that */
	if (c.ec_dirty)
		wi->sync_tid = wbfs_journal_tid(w);
	return ret;
}

int wbfs_hide_failed_locked(struct wbfs *w)
{
	struct hide_rec *v;
	size_t n, i;
	bool over;
	int ret = 0;

	ls_mutex_lock(&w->hide_lock, &lc_hide_lock);
	v = w->hide;
	n = w->nr_hide;
	over = w->hide_overflow;
	w->hide = NULL;
	w->nr_hide = w->cap_hide = 0;
	w->hide_overflow = false;
	atomic_store(&w->hide_pending, false);
	ls_mutex_unlock(&w->hide_lock);
	if (over)
		ret = -ENOMEM;
	/* a winode found under fs_lock is not freed before we let go of it */
	for (i = 0; i < n; i++) {
		struct winode *wi = winode_find(w, v[i].ino);
		int r = wi ? hide_block_locked(w, wi, v[i].index) : 0;

		if (r && !ret)
			ret = r;
	}
	free(v);
	return ret;
}

/* The first failed write of a file after a success: one line, not one per retry. */
static void wbfs_write_error(struct bdi *b, struct wb_inode *wb, uint64_t index, int err)
{
	struct wbfs *w = bdi_owner(b);
	struct winode *wi = container_of(wb, struct winode, wb);

	fprintf(msg_stream(), "wbcfs: %s: inode %u: write error at offset %llu: %s; data kept dirty,"
		" will retry\n", w->dev_path, wi->ino,
		(unsigned long long)index << PAGE_SHIFT, strerror(-err));
}

const struct bdi_ops wbfs_bdi_ops = {
	.map_pages = wbfs_map_pages,
	.write_inode = wbfs_write_inode_op,
	.sync_fs = wbfs_sync_fs,
	.alloc_wait = wbfs_alloc_wait,
	.write_error = wbfs_write_error,
	.newblock_failed = wbfs_newblock_failed,
};

/*
 * fsync: the file's data, then its inode, then every dirty metadata page
 * (directory entries, inode table, extent blocks), then the device cache.
 * With a journal: the data and the inode, then a commit of the
 * transactions up to the file's newest metadata change (none when that one
 * has committed already), then the device cache unless that commit
 * flushed it. The data writes are still in flight when the commit starts:
 * its ordered wait takes them, after its log writes (one device round trip
 * less before the commit block, as ext4's fsync: its data and log writes
 * go out together).
 */
int winode_sync(struct wbfs *w, struct winode *wi, bool datasync)
{
	return winode_sync_range(w, wi, 0, UINT64_MAX, datasync);
}

/*
 * winode_sync for the pages [@first, @last] only (a synchronous write's:
 * the kernel's generic_write_sync syncs the range written, not the file).
 * The commit is the same: it joins whatever commit other syncs started.
 */
int winode_sync_range(struct wbfs *w, struct winode *wi, uint64_t first, uint64_t last,
		      bool datasync)
{
	struct bdi_sync_io io;
	bool flushed = false;
	int ret, r;

	if (w->ro)
		return 0;
	if (!w->journal) {
		ret = bdi_sync_inode(w->bdi, &wi->wb, first, last, datasync);
		if (!ret)
			ret = winode_settle_disksize(w, wi);
		return ret ? ret : wbfs_sync_durable(w);
	}
	bdi_sync_inode_start(w->bdi, &wi->wb, first, last, datasync, &io);
	/* every page of the range is mapped now, its write in flight (the
	 * commit's ordered wait takes it): the on-disk size may reach as far
	 * as written data goes (disksize_catch_up stops at waiting pages) */
	r = winode_settle_disksize(w, wi);
	if (r) {
		bdi_sync_inode_finish(w->bdi, &io);
		return r;
	}
	/* as ext4: only the transactions up to the file's newest change;
	 * one already committed leaves just the device cache to flush */
	r = wbfs_journal_commit_tid(w, wi->sync_tid, &flushed, &io);
	ret = bdi_sync_inode_finish(w->bdi, &io);
	if (!r && !flushed)
		r = bdi_flush_device(w->bdi);
	return ret ? ret : r;
}

/*
 * ext4's ext4_alloc_da_blocks only starts the writeback (filemap_flush):
 * the blocks are allocated in the caller, in the running transaction, and
 * jbd2's ordered list makes that transaction's commit wait for the data.
 * Here the caller waits for the data writes itself, through fsync's path
 * (its own writeback context, WB_SYNC_ALL, the bdi's bandwidth and
 * completion accounting), but without the fsync's commit: the rename or
 * close then costs the data's write, not a commit's two flushes, and
 * whatever commit comes next finds the data already on the device.
 * Every dirty page, not only delayed ones: pages over unwritten
 * (fallocated) blocks would read back as zeros too.
 */
long winode_alloc_da_blocks(struct wbfs *w, struct winode *wi)
{
	long nr = atomic_load(&wi->map.nrdirty);
	int ret;

	if (w->ro || nr <= 0)
		return 0;
	ret = bdi_sync_inode(w->bdi, &wi->wb, 0, UINT64_MAX, true);
	return ret ? ret : nr;
}

/*
 * Make every metadata change so far durable, and the data written so far:
 * with a journal, one commit (the running transaction's metadata, in the
 * log); without, libext2fs's bitmaps and descriptors into the cache and
 * every dirty metadata page home. Then the device cache.
 */
int wbfs_sync_durable(struct wbfs *w)
{
	bool flushed = false;
	int ret, r;

	if (w->journal) {
		ret = wbfs_journal_commit(w, &flushed);
		if (ret || flushed)
			return ret;
		return bdi_flush_device(w->bdi);
	}
	/* the bitmaps and descriptors too: what the file owns must be in use
	 * on disk, or e2fsck finds its inode in a group's unused area */
	wbfs_lock(w);
	ret = w->fs ? -wbfs_errno(wbfs_flush_locked(w)) : 0;
	wbfs_unlock(w);
	r = bdi_sync_meta(w->bdi);
	if (!ret)
		ret = r;
	r = bdi_flush_device(w->bdi);
	return ret ? ret : r;
}
