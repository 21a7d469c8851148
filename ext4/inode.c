// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * In-memory inodes: the table FUSE lookups and forgets count against,
 * eviction, and the attributes writers change without the fs lock (size,
 * mtime, ctime) with their write-back into the inode table. The orphan
 * list and freeing are in orphan.c, the extent map cache and the
 * flusher's mapping of delayed allocation in map.c, the flusher's other
 * calls and fsync in sync.c. Directory entries are dir.c's business;
 * data pages are data.c's.
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

struct winode *winode_itable_find_locked(struct wbfs *w, ext2_ino_t ino)
{
	struct winode *wi = w->itable[itable_slot(w, ino)];

	lock_assert_held(&w->itable_lock);

	while (wi && wi->ino != ino)
		wi = wi->hash_next;
	return wi;
}

static void itable_remove_locked(struct wbfs *w, struct winode *wi)
{
	struct winode **pp = &w->itable[itable_slot(w, wi->ino)];

	lock_assert_held(&w->itable_lock);

	while (*pp != wi)
		pp = &(*pp)->hash_next;
	*pp = wi->hash_next;
	w->nr_winodes--;
}

struct winode *winode_find(struct wbfs *w, ext2_ino_t ino)
{
	struct winode *wi;

	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	wi = winode_itable_find_locked(w, ino);
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
	ext4_ts_get(in, TS_ATIME, &wi->disk_atime);
	ext4_ts_get(in, TS_MTIME, &wi->disk_mtime);
	ext4_ts_get(in, TS_CTIME, &wi->disk_ctime);
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
	kstore_free(wi);
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
	while ((wi = winode_itable_find_locked(w, ino)) && wi->evicting)
		lockstat_cond_wait(&w->itable_cond, &w->itable_lock);
	if (wi && lookup)
		wi->nlookup++;
	ls_mutex_unlock(&w->itable_lock);
	if (wi)
		return wi;

	/* from the inode table's cached page when it can (no fs_lock) */
	if (!winode_peek_inode(w, ino, &in)) {
		ext4_lock(w);
		if (ext4_read_inode(w, ino, &in)) {
			ext4_unlock(w);
			return NULL;
		}
		ext4_unlock(w);
	}
	nw = winode_alloc(w, ino, &in);
	if (!nw)
		return NULL;
	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	while ((wi = winode_itable_find_locked(w, ino)) && wi->evicting)
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
		wi->sync_tid = ext4_journal_tid(w);
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
				ext4_unreserve_pages(w, wi, 1);
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
	ext4_lock(w);
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
	ext4_unlock(w);
	winode_free_mem(wi);
}

/*
 * Context: itable_lock held (not asserted: @wi does not lead to its wbfs).
 * True when @wi just became unreferenced.
 */
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
	wi = winode_itable_find_locked(w, ino);
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
	wi = winode_itable_find_locked(w, ino);
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
 * i_disksize); a larger one leaves it to winode_disksize_catch_up, which raises
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
		ext4_now(&wi->mtime);
		wi->ctime = wi->mtime;
		wi->times_dirty = true;
	}
	ls_mutex_unlock(&wi->attr_lock);
}

/* Data changed: stamp mtime and ctime. Context: ilock held (shared or not). */
void winode_stamp_times(struct winode *wi)
{
	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	ext4_now(&wi->mtime);
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
bool winode_owns_size(const struct winode *wi)
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
bool winode_disksize_catch_up(struct winode *wi, uint64_t floor, const uint64_t *skip,
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
void winode_fold(struct wbfs *w, struct winode *wi, struct ext2_inode_large *in)
{
	if (winode_owns_size(wi))
		winode_disksize_catch_up(wi, 0, NULL, 0);
	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	if (winode_owns_size(wi))
		ext2fs_inode_size_set(w->fs, (struct ext2_inode *)in, wi->disksize);
	if (wi->times_dirty) {
		ext4_ts_set(in, TS_MTIME, &wi->mtime);
		ext4_ts_set(in, TS_CTIME, &wi->ctime);
	}
	if (wi->atime_dirty)
		ext4_ts_set(in, TS_ATIME, &wi->atime);
	wi->size_dirty = wi->times_dirty = wi->atime_dirty = false;
	/* until the write: the times are in neither place stat_cached reads */
	wi->folding = true;
	wi->fold_seq++;
	ls_mutex_unlock(&wi->attr_lock);
}

/*
 * @in was just written: keep @ino's copy of the times and the noatime
 * flag the atime rule reads. Every write of an inode comes here
 * (ext4_write_inode). Context: fs_lock held.
 */
void winode_note_written(struct wbfs *w, ext2_ino_t ino, const struct ext2_inode_large *in)
{
	struct winode *wi = winode_find(w, ino);

	if (!wi)
		return;
	ls_mutex_lock(&wi->attr_lock, &lc_attr_lock);
	ext4_ts_get(in, TS_ATIME, &wi->disk_atime);
	ext4_ts_get(in, TS_MTIME, &wi->disk_mtime);
	ext4_ts_get(in, TS_CTIME, &wi->disk_ctime);
	wi->disk_noatime = (in->i_flags & EXT2_NOATIME_FL) != 0;
	wi->folding = false;
	wi->fold_seq++;
	ls_mutex_unlock(&wi->attr_lock);
	/* even when its bytes did not change (a clock stepped back leaves
	 * the stamps equal): what the caller changed besides, an xattr
	 * block say, is in the running transaction */
	wi->sync_tid = ext4_journal_tid(w);
}

void winode_note_itable_change(struct wbfs *w, uint64_t blk, const void *old, size_t in,
			       const void *b, size_t n)
{
	size_t isz, k, end = in + n;
	ext2_ino_t first;
	unsigned per;
	uint32_t tid;

	if (!w->journal || !n || !ext4_itable_inodes(w, blk, &first, &per))
		return;
	isz = EXT2_INODE_SIZE(w->fs->super);
	tid = ext4_journal_tid(w);
	ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
	/* only the inodes whose bytes differ: a block holds many files' */
	for (k = in / isz; k * isz < end && k < per; k++) {
		size_t lo = k * isz > in ? k * isz : in;
		size_t hi = (k + 1) * isz < end ? (k + 1) * isz : end;
		struct winode *wi;

		if (old && !memcmp((const char *)old + lo, (const char *)b + (lo - in), hi - lo))
			continue;
		wi = winode_itable_find_locked(w, first + (ext2_ino_t)k);
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

	lock_assert_held(&wi->attr_lock);

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

	ext4_now(&now);
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

	ext4_now(&now);
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

	lock_assert_held(&w->fs_lock);

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
	ext4_ts_get(in, TS_ATIME, &ts);
	st->st_atim = ts;
	ext4_ts_get(in, TS_MTIME, &ts);
	st->st_mtim = ts;
	ext4_ts_get(in, TS_CTIME, &ts);
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

	lock_assert_held(&w->fs_lock);

	ret = ext4_read_inode(w, ino, &in);
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
	if (!iomgr_meta_peek(w, byte, u.b, isz))
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
	ext4_lock(w);
	ret = winode_stat_locked(w, ino, st, generation);
	ext4_unlock(w);
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
	int ret = ext4_read_inode(w, ino, &in);

	lock_assert_held(&w->fs_lock);

	if (ret)
		return ret;
	/* pending times first: the new ctime is later than any of them */
	winode_fold_attrs_locked(w, ino, &in);
	ext4_now(&now);
	ext4_ts_set(&in, TS_CTIME, &now);
	return ext4_write_inode(w, ino, &in);
}
