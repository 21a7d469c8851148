// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Coherence of the kernel's page cache of mmapped files with ours.
 *
 * Files are opened direct_io, so the kernel holds pages of a file only
 * for mmap: faults and their readahead (shared or private mappings), and
 * dirty pages of shared mappings, which come back to us as WRITEs flagged
 * FUSE_WRITE_CACHE. Two copies of such a page live on, the kernel's and
 * ours, and neither may overwrite the other's bytes with old ones.
 *
 * What the kernel does itself (fs/fuse/file.c, dir.c): before a direct
 * read or write it writes back and waits for the dirty pages of the range,
 * and before a write it drops them; a truncate (size change) drops or
 * launders all of the file's pages after its reply, a hole punch or zero
 * range drops the whole pages of the range and zeroes the partial ones in
 * place after its reply. What it cannot do: a fault racing with a WRITE
 * brings the page back, maybe with the bytes from before the write, and a
 * mapping dirties it; the kernel then holds that page with the write's
 * bytes old. Dropping it (NOTIFY_INVAL_INODE) would first write it back
 * whole, old bytes included, over the write's: so the write's bytes are
 * stored into the kernel's pages instead, exactly those bytes
 * (NOTIFY_STORE, wbfs_inval_write), which keeps the mapping's stores in
 * the rest of the page. And a writeback of such a page copied out before
 * that store must not undo the write in our copy (the kstore log below).
 * Truncate and fallocate need nothing from us but the zeros of a grown
 * file's old EOF page (wbfs_inval_zero_eof_page): the kernel does not
 * drop that page, whose tail a mapping may have dirtied past EOF.
 *
 * Which files: those the kernel has read into its page cache. Its
 * page-cache READs (faults, readahead) carry no lock owner and are page
 * aligned in offset and size, while a read(2) of a direct_io file always
 * names its caller's file table as lock owner (FUSE_READ_LOCKOWNER), so
 * wbfs_inval_note_read marks the inode on an aligned READ without one. A
 * read(2) from a thread with no file table (a kernel thread) looks like a
 * page-cache READ when aligned and only costs a store per write; the
 * other way round cannot happen. (Aligned alone is not enough: most of
 * dbench's read(2)s are, and each store also copies the write's bytes
 * into the kernel's page cache.) A fault whose READ copied the old bytes
 * marked the inode before copying, so the write that changed them sees
 * the mark (both sequentially consistent) and stores; the store waits for
 * the faulting page's lock, so it lands after the READ's bytes.
 *
 * A WRITE's worker stores before it replies, holding no lock of ours
 * (write(2) must not return while a mapping can still read the old
 * bytes). NOTIFY_STORE takes page locks only: it never waits for
 * writeback, so it needs nothing from the kernel but what a fault holding
 * the page lock waits for, a READ, which other workers serve (it takes
 * ilock, which the storing worker does not hold).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "ext4_i.h"

LOCK_CLASS(lc_kstore_lock, "kstore_lock")

/* There while notifications may be sent (the session runs). */
struct inval_queue {
	struct wbfs *w;		/* constant */
};

/**
 * A READ of [off, off+size) with @lock_owner (0: none given): page aligned
 * and no owner means the kernel's page cache.
 */
void wbfs_inval_note_read(struct winode *wi, uint64_t off, size_t size, uint64_t lock_owner)
{
	if (((off | size) & (PAGE_SIZE - 1)) || !size || lock_owner)
		return;
	if (!atomic_load(&wi->kcached))
		atomic_store(&wi->kcached, true);
	/* orders the mark before this READ copies the page out; pairs with
	 * the fence in inval_kernel_caches */
	atomic_thread_fence(memory_order_seq_cst);
}

/* May the kernel hold pages of @wi? Context: after the caller's page stores. */
static bool inval_kernel_caches(struct winode *wi)
{
	/* orders the caller's page stores before reading the mark; pairs with
	 * the fence in wbfs_inval_note_read */
	atomic_thread_fence(memory_order_seq_cst);
	return atomic_load(&wi->kcached);
}

static void inval_store(struct wbfs *w, struct winode *wi, uint64_t off, const void *buf,
			size_t len)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(len);

	if (!len)
		return;
	bv.buf[0].mem = (void *)buf;
	/* -ENOENT: the kernel has forgotten the inode, so it caches nothing */
	fuse_lowlevel_notify_store(w->se, wbfs_fuse_ino(wi->ino), (off_t)off, &bv, 0);
	atomic_fetch_add(&w->stats.nr_store_sent, 1);
}

/**
 * A write put @buf's @len bytes at @off into @wi, whose size was
 * @old_size (bytes from there to @off are zeros now). Store exactly those
 * bytes into the kernel's copy of the pages, before the write is
 * answered. Not an invalidation: the kernel may hold one of these pages
 * dirty with stores a mapping made since it dropped its copy before
 * sending the WRITE (the page faulted in again meanwhile, maybe with the
 * bytes from before this write), and dropping a dirty page writes it back
 * whole first, old bytes of this write included, over the new ones.
 * NOTIFY_STORE copies only the bytes given into the pages, present or
 * not, under their page lock; it neither dirties a page nor drops one,
 * so the mapping's stores in the other bytes stay in the kernel's page,
 * which now agrees with ours on these. It never waits for writeback.
 * Context: a WRITE's worker before its reply; holds no lock (a fault
 * holding a page lock waits for a READ, which takes ilock).
 */
void wbfs_inval_write(struct wbfs *w, struct winode *wi, const char *buf, uint64_t off,
		      size_t len, uint64_t old_size)
{
	static const char zeros[PAGE_SIZE];
	uint64_t end = (old_size + PAGE_SIZE - 1) & ~(uint64_t)(PAGE_SIZE - 1);

	if (!len || !w->inval || w->destroyed || !inval_kernel_caches(wi))
		return;
	/* the zeroed tail of the old EOF page; pages past it the kernel
	 * cannot hold (no fault or readahead reaches past its i_size) */
	if (off > old_size)
		inval_store(w, wi, old_size, zeros, (off < end ? off : end) - old_size);
	inval_store(w, wi, off, buf, len);
}

/*
 * Writeback from the kernel against our own changes. Stores through a
 * mapping come back as WRITEs of whole pages (FUSE_WRITE_CACHE), their
 * bytes copied out of the kernel's page when the request is handed to us
 * (read from /dev/fuse, or put into an io_uring entry). A write(2) that
 * changed part of such a page meanwhile stored its bytes into the
 * kernel's page (wbfs_inval_write), but a writeback copied out before
 * that store carries the old bytes of that part, and written after the
 * write it would put them back over the new ones, in our copy only.
 *
 * So each write to a file the kernel may cache notes its range here
 * while it runs (kstore_begin) and, once its store into the kernel's
 * pages is done, the mount-wide sequence number it ended at
 * (kstore_end). A worker notes the sequence number when it takes a
 * request (wbfs_kstore_taken, from fuse_io.c, after the copy). A
 * writeback taken before a write ended (its number is older than the
 * write's, or the write is still running) was copied out before that
 * write's store into the kernel's page was done, or while it ran: it
 * leaves the write's range as we have it, and the kernel's page holds the
 * write's bytes there too once the store is done. That orders the write
 * after the stores of that writeback, which is allowed: before sending
 * the write the kernel wrote back every page of its range dirty then and
 * waited for it, so those stores were made while the write(2) ran. A
 * writeback taken later holds the write's bytes or newer stores, and is
 * written whole. (Left open: a writeback copied out in the instant
 * between a write's store returning and its number being taken, of a
 * page a mapping stored into in that same instant, in the write's range.
 * Storing our bytes back from the writeback's worker would close it, but
 * deadlocks: fuse_page_mkwrite holds the page lock while it waits for
 * that writeback, and NOTIFY_STORE takes the page lock.)
 *
 * The kernel sends no write, truncate or fallocate touching a page while
 * its writeback runs (it waits for it first), so only writes sent before
 * the writeback started are met here. The log keeps the last KSTORE_LOG
 * writes per inode (a running one is never forgotten); a writeback taken
 * before a write the log forgot may overwrite that write's bytes, as all
 * did before (counted: nr_store_unordered).
 */
#define KSTORE_LOG KSTORE_MAX_KEEP
#define KSTORE_RUNNING UINT64_MAX

struct kstore_log {
	pthread_mutex_t lock;			/* protects: e, forgotten; leaf */
	struct {
		uint64_t seq;			/* lock: 0 unused, KSTORE_RUNNING */
		uint64_t start, end;		/* lock: bytes */
	} e[KSTORE_LOG];
	uint64_t forgotten;			/* lock: newest seq reused */
};

static _Thread_local uint64_t kstore_taken_seq;

/** A worker takes a request of @w: its bytes are ours now. */
void wbfs_kstore_taken(struct wbfs *w)
{
	kstore_taken_seq = atomic_load(&w->kstore_seq);
}

static struct kstore_log *kstore_log_get(struct winode *wi)
{
	struct kstore_log *l = atomic_load(&wi->klog), *old = NULL;

	if (l)
		return l;
	l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	pthread_mutex_init(&l->lock, NULL);
	if (atomic_compare_exchange_strong(&wi->klog, &old, l))
		return l;
	pthread_mutex_destroy(&l->lock);
	free(l);
	return old;
}

void wbfs_kstore_free(struct winode *wi)
{
	struct kstore_log *l = atomic_load(&wi->klog);

	if (l) {
		pthread_mutex_destroy(&l->lock);
		free(l);
	}
}

/**
 * A write of [start, end) to @wi begins: note it for writebacks, when the
 * kernel may cache the file. Returns the slot for kstore_end, or -1.
 * Context: before the write touches a page; no page lock held.
 */
int wbfs_kstore_begin(struct winode *wi, uint64_t start, uint64_t end)
{
	struct kstore_log *l;
	uint64_t oldest = KSTORE_RUNNING;
	int i, slot = -1;

	if (start >= end || !atomic_load(&wi->kcached) || !(l = kstore_log_get(wi)))
		return -1;
	ls_mutex_lock(&l->lock, &lc_kstore_lock);
	for (i = 0; i < KSTORE_LOG; i++) {
		if (l->e[i].seq < oldest) {
			oldest = l->e[i].seq;
			slot = i;
		}
	}
	if (slot >= 0) {	/* all running: none, and writebacks meet it unordered */
		if (l->e[slot].seq > l->forgotten)
			l->forgotten = l->e[slot].seq;
		l->e[slot].seq = KSTORE_RUNNING;
		l->e[slot].start = start;
		l->e[slot].end = end;
	}
	ls_mutex_unlock(&l->lock);
	return slot;
}

/**
 * The write noted in @slot changed [start, end) and stored it into the
 * kernel's pages (or failed: @end == @start). Context: after the store.
 */
void wbfs_kstore_end(struct wbfs *w, struct winode *wi, int slot, uint64_t start, uint64_t end)
{
	struct kstore_log *l = atomic_load(&wi->klog);

	if (slot < 0 || !l)
		return;
	ls_mutex_lock(&l->lock, &lc_kstore_lock);
	l->e[slot].start = start;
	l->e[slot].end = end;
	l->e[slot].seq = start < end ? atomic_fetch_add(&w->kstore_seq, 1) + 1 : 0;
	ls_mutex_unlock(&l->lock);
}

/**
 * A writeback taken by this worker is about to copy [pos, pos+n) (one
 * page) into @wi: the parts it must leave as they are, newest writes'
 * ranges clipped to it, into @keep (at most KSTORE_LOG). Returns how many.
 * Context: the page lock of that page held (a write's page copies come
 * after its kstore_begin, so one not seen here copies after this one).
 */
int wbfs_kstore_mask(struct wbfs *w, struct winode *wi, uint64_t pos, size_t n,
		     struct kstore_range *keep)
{
	struct kstore_log *l = atomic_load(&wi->klog);
	uint64_t taken = kstore_taken_seq, end = pos + n;
	int i, nr = 0;

	if (!l)
		return 0;
	ls_mutex_lock(&l->lock, &lc_kstore_lock);
	if (taken < l->forgotten)
		atomic_fetch_add(&w->stats.nr_store_unordered, 1);
	for (i = 0; i < KSTORE_LOG; i++) {
		uint64_t s = l->e[i].start > pos ? l->e[i].start : pos;
		uint64_t e = l->e[i].end < end ? l->e[i].end : end;

		if (l->e[i].seq > taken && s < e)
			keep[nr++] = (struct kstore_range){ s, e };
	}
	if (nr)
		atomic_fetch_add(&w->stats.nr_store_kept, 1);
	ls_mutex_unlock(&l->lock);
	return nr;
}

/**
 * i_size grew from @old_size to @new_size by truncate or fallocate, and
 * the daemon zeroed the tail of the old EOF page. The kernel may hold that
 * page dirty with stores a mapping made past the old EOF, which it would
 * write back as file data now that i_size covers them; dropping the page
 * would write it back first. So zeros are stored straight into the
 * kernel's copy (NOTIFY_STORE takes only the page lock, never waits for
 * writeback, which the kernel holds off until this request is answered).
 * Context: the request's worker before its reply; no lock of ours held
 * (a fault holding the page lock may wait on a READ, which needs ilock).
 */
void wbfs_inval_zero_eof_page(struct wbfs *w, struct winode *wi, uint64_t old_size,
			      uint64_t new_size)
{
	static const char zeros[PAGE_SIZE];
	uint64_t end = (old_size + PAGE_SIZE - 1) & ~(uint64_t)(PAGE_SIZE - 1);
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);

	if (end > new_size)
		end = new_size;
	if (old_size >= end || !w->inval || w->destroyed || !inval_kernel_caches(wi))
		return;
	bv.buf[0].mem = (void *)zeros;
	bv.buf[0].size = end - old_size;
	fuse_lowlevel_notify_store(w->se, wbfs_fuse_ino(wi->ino), (off_t)old_size, &bv, 0);
}

/**
 * The daemon changed @wi's mode itself (a write, a truncation at open or an
 * fallocate cleared set-user-ID or set-group-ID): drop the attributes the
 * kernel caches, which it would show until they time out. Only attributes:
 * no page lock is waited for. Context: the request's worker before its
 * reply; holds no lock of ours.
 */
void wbfs_inval_attr(struct wbfs *w, struct winode *wi)
{
	if (!w->inval || w->destroyed)
		return;
	fuse_lowlevel_notify_inval_inode(w->se, wbfs_fuse_ino(wi->ino), -1, 0);
}

/**
 * A change other than to its entries (chmod, chown, utimes, xattrs, a
 * rename of it) touched directory @wi: if a listing should now update its
 * atime (relatime: ctime passed atime), drop the entries the kernel keeps
 * for it, so the next listing reaches wbcfs (ops.c serves READDIR without
 * OPENDIR, and the kernel keeps listings across opens). Changes to the
 * entries need nothing: the kernel drops its copy itself. Context: the
 * request's worker before its reply; holds no lock of ours. @always: drop
 * it anyway (a rename moved the directory: its ".." entry changed, which
 * the kernel does not see).
 */
void wbfs_inval_dir_listing(struct wbfs *w, struct winode *wi, bool always)
{
	if (!w->inval || w->destroyed || !wi || !LINUX_S_ISDIR(wi->mode) ||
	    options_atime_mode(&w->opts) == ATIME_STRICT || (!always && !winode_atime_due(w, wi)))
		return;
	fuse_lowlevel_notify_inval_inode(w->se, wbfs_fuse_ino(wi->ino), 0, 0);
	atomic_fetch_add(&w->stats.nr_inval_sent, 1);
}

/**
 * The session of @w runs: notifications may be sent from now on. Returns
 * 0 or -errno.
 */
int wbfs_inval_start(struct wbfs *w)
{
	struct inval_queue *iq = calloc(1, sizeof(*iq));

	if (!iq)
		return -ENOMEM;
	iq->w = w;
	w->inval = iq;
	return 0;
}

/** No more notifications. Context: after the session loop ended. */
void wbfs_inval_stop(struct wbfs *w)
{
	free(w->inval);
	w->inval = NULL;
}
