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
 * (NOTIFY_STORE, inval_write), which keeps the mapping's stores in
 * the rest of the page. And a writeback of such a page copied out before
 * that store must not undo the write in our copy (the kstore log, ext4/kstore.c).
 * Truncate and fallocate need nothing from us but the zeros of a grown
 * file's old EOF page (inval_zero_eof_page): the kernel does not
 * drop that page, whose tail a mapping may have dirtied past EOF.
 *
 * Which files: those the kernel has read into its page cache. Its
 * page-cache READs (faults, readahead) carry no lock owner and are page
 * aligned in offset and size, while a read(2) of a direct_io file always
 * names its caller's file table as lock owner (FUSE_READ_LOCKOWNER), so
 * inval_note_read marks the inode on an aligned READ without one. A
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

#include "fuse_i.h"

/* There while notifications may be sent (the session runs). */
struct inval_queue {
	struct wbfs *w;		/* constant */
};

/**
 * A READ of [off, off+size) with @lock_owner (0: none given): page aligned
 * and no owner means the kernel's page cache.
 */
void inval_note_read(struct winode *wi, uint64_t off, size_t size, uint64_t lock_owner)
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
	 * the fence in inval_note_read */
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
	fuse_lowlevel_notify_store(w->se, ext4_fuse_ino(wi->ino), (off_t)off, &bv, 0);
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
void inval_write(struct wbfs *w, struct winode *wi, const char *buf, uint64_t off,
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
void inval_zero_eof_page(struct wbfs *w, struct winode *wi, uint64_t old_size,
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
	fuse_lowlevel_notify_store(w->se, ext4_fuse_ino(wi->ino), (off_t)old_size, &bv, 0);
}

/**
 * The daemon changed @wi's mode itself (a write, a truncation at open or an
 * fallocate cleared set-user-ID or set-group-ID): drop the attributes the
 * kernel caches, which it would show until they time out. Only attributes:
 * no page lock is waited for. Context: the request's worker before its
 * reply; holds no lock of ours.
 */
void inval_attr(struct wbfs *w, struct winode *wi)
{
	if (!w->inval || w->destroyed)
		return;
	fuse_lowlevel_notify_inval_inode(w->se, ext4_fuse_ino(wi->ino), -1, 0);
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
void inval_dir_listing(struct wbfs *w, struct winode *wi, bool always)
{
	if (!w->inval || w->destroyed || !wi || !LINUX_S_ISDIR(wi->mode) ||
	    options_atime_mode(&w->opts) == ATIME_STRICT || (!always && !winode_atime_due(w, wi)))
		return;
	fuse_lowlevel_notify_inval_inode(w->se, ext4_fuse_ino(wi->ino), 0, 0);
	atomic_fetch_add(&w->stats.nr_inval_sent, 1);
}

/**
 * The session of @w runs: notifications may be sent from now on. Returns
 * 0 or -errno.
 */
int inval_start(struct wbfs *w)
{
	struct inval_queue *iq = calloc(1, sizeof(*iq));

	if (!iq)
		return -ENOMEM;
	iq->w = w;
	w->inval = iq;
	return 0;
}

/** No more notifications. Context: after the session loop ended. */
void inval_stop(struct wbfs *w)
{
	free(w->inval);
	w->inval = NULL;
}

const struct ext4_kcache_ops fuse_kcache_ops = {
	.write = inval_write,
	.zero_eof_page = inval_zero_eof_page,
	.attr = inval_attr,
	.hold_reply = fuse_io_hold_reply,
};
