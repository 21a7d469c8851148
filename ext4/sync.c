// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The flusher's other calls into ext4/ (write_inode, sync_fs, alloc_wait)
 * and the bdi_ops table, settling the on-disk size, and fsync and
 * syncfs. Apart from map.c: these make what was mapped durable, they
 * allocate nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "wbcfs/lib/clock.h"
#include "ext4_i.h"

static int ext4_write_inode_op(struct bdi *b, struct wb_inode *wb, enum wb_sync_mode mode)
{
	struct wbfs *w = bdi_owner(b);
	struct winode *wi = container_of(wb, struct winode, wb);
	struct ext2_inode_large in;
	int ret;

	if (wb->is_meta)
		return 0;
	ext4_lock(w);
	if (wi->freed || !w->fs) {
		ext4_unlock(w);
		return 0;
	}
	ret = ext4_read_inode(w, wi->ino, &in);
	if (!ret) {
		winode_fold(w, wi, &in);
		ret = ext4_write_inode(w, wi->ino, &in);
	}
	ext4_unlock(w);
	return ret;
}

/*
 * Commit so that blocks whose free has not committed may be reused, if
 * there are any: true when a commit was made. Context: no lock held.
 */
bool ext4_commit_for_alloc(struct wbfs *w)
{
	bool pending;

	ext4_lock(w);
	pending = w->fs && !w->ro && ext4_alloc_should_commit(w);
	ext4_unlock(w);
	if (!pending)
		return false;
	atomic_fetch_add(&w->stats.nr_alloc_commits, 1);
	return !ext4_journal_commit(w, NULL);
}

/*
 * ENOSPC from a request: try again? After deleted files' FORGETs
 * (winode_should_retry_alloc), or after a commit when an allocation found
 * room only in blocks whose free had not committed: ext4_should_retry_alloc
 * forces that commit the same way, up to 3 times a request.
 */
bool ext4_should_retry_alloc(struct wbfs *w, int *retries)
{
	bool refused;

	if (winode_should_retry_alloc(w, retries))
		return true;
	if (*retries > 3)
		return false;
	/* a commit since the refusal may have released them already: retry */
	refused = atomic_exchange(&w->alloc_busy_refused, false);
	return ext4_commit_for_alloc(w) || refused;
}

/*
 * Writeback found room for pages only in blocks whose free has not
 * committed (BDI_PBLK_AGAIN): commit, and it maps them again. Nothing to
 * commit (another commit came first): 0 all the same, and the map finds
 * the room, or ENOSPC. Context: flusher, no page of the batch locked.
 */
static int ext4_alloc_wait(struct bdi *b, struct wb_inode *wb)
{
	struct wbfs *w = bdi_owner(b);

	(void)wb;
	if (!ext4_commit_for_alloc(w) && ext4_journal_aborted(w))
		return -EIO;
	return 0;
}

static int ext4_sync_fs(struct bdi *b)
{
	struct wbfs *w = bdi_owner(b);
	errcode_t err = 0;
	int waits = 0;

	/* files just deleted: their FORGET frees them, part of what is synced */
	while (winode_should_retry_alloc(w, &waits))
		;
	ext4_bitmaps_check_next(w);	/* every changed bitmap was noted? */
	if (w->journal) {
		int ret = ext4_journal_commit(w, NULL);	/* with the busy blocks */

		ext4_journal_release_all(w);
		return ret;
	}
	ext4_lock(w);
	if (w->fs && !w->ro) {
		err = ext4_flush_locked(w);
		/* as a commit: what was freed before may be reused now */
		if (!err)
			ext4_release_busy_locked(w);
	}
	ext4_unlock(w);
	return -ext4_errno(err);
}

/*
 * Bring the on-disk size up to i_size once the data below it is written
 * or mapped (fsync, eviction): log the inode when winode_disksize_catch_up
 * raises it. A file whose data is all mapped then has disksize == i_size.
 * Context: no lock held; takes fs_lock.
 */
int winode_settle_disksize(struct wbfs *w, struct winode *wi)
{
	struct ext2_inode_large in;
	int ret = 0;

	if (!winode_owns_size(wi) || winode_disksize(wi) >= winode_size(wi))
		return 0;
	ext4_lock(w);
	if (!wi->freed && w->fs && winode_disksize_catch_up(wi, 0, NULL, 0)) {
		ret = ext4_read_inode(w, wi->ino, &in);
		if (!ret) {
			winode_fold(w, wi, &in);
			ret = ext4_write_inode(w, wi->ino, &in);
		}
	}
	ext4_unlock(w);
	return ret;
}

const struct bdi_ops ext4_bdi_ops = {
	.map_pages = ext4_map_pages,
	.write_inode = ext4_write_inode_op,
	.sync_fs = ext4_sync_fs,
	.alloc_wait = ext4_alloc_wait,
	.write_error = ext4_write_error,
	.newblock_failed = ext4_newblock_failed,
	.meta_written = ext4_journal_meta_written,
	.meta_expire = ext4_journal_meta_expire,
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
 *
 * For the pages [@first, @last] only (0, UINT64_MAX: the whole file); a
 * synchronous write syncs the range written, as the kernel's
 * generic_write_sync does, not the file. The commit is the same: it joins
 * whatever commit other syncs started.
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
		return ret ? ret : ext4_sync_durable(w);
	}
	bdi_sync_inode_start(w->bdi, &wi->wb, first, last, datasync, &io);
	/* every page of the range is mapped now, its write in flight (the
	 * commit's ordered wait takes it): the on-disk size may reach as far
	 * as written data goes (winode_disksize_catch_up stops at waiting pages) */
	r = winode_settle_disksize(w, wi);
	if (r) {
		bdi_sync_inode_finish(w->bdi, &io);
		return r;
	}
	/* as ext4: only the transactions up to the file's newest change;
	 * one already committed leaves just the device cache to flush */
	r = ext4_journal_commit_tid(w, wi->sync_tid, &flushed, &io);
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
int ext4_sync_durable(struct wbfs *w)
{
	bool flushed = false;
	int ret, r;

	if (w->journal) {
		ret = ext4_journal_commit(w, &flushed);
		if (ret || flushed)
			return ret;
		return bdi_flush_device(w->bdi);
	}
	/* the bitmaps and descriptors too: what the file owns must be in use
	 * on disk, or e2fsck finds its inode in a group's unused area */
	ext4_lock(w);
	ret = w->fs ? -ext4_errno(ext4_flush_locked(w)) : 0;
	ext4_unlock(w);
	r = bdi_sync_meta(w->bdi);
	if (!ret)
		ret = r;
	r = bdi_flush_device(w->bdi);
	return ret ? ret : r;
}

/*
 * A group of syncs (ext4_sync_group) with a journal: start every file's
 * writes, chained so that the commit's ordered wait completes them while
 * it waits. A file whose size cannot be logged is done at once.
 */
static struct bdi_sync_io *sync_group_start(struct wbfs *w, struct ext4_sync_req *r, size_t n)
{
	struct bdi_sync_io *chain = NULL, *owner = NULL;
	size_t i;

	for (i = 0; i < n; i++) {
		r[i].ret = 0;
		r[i].started = r[i].errio = r[i].unflushed = false;
		if (!r[i].wi)
			continue;
		bdi_sync_inode_start_with(w->bdi, &r[i].wi->wb, r[i].first, r[i].last,
					  r[i].datasync, &r[i].io, owner);
		if (!owner && r[i].io.x)
			owner = &r[i].io;
		r[i].ret = winode_settle_disksize(w, r[i].wi);
		if (r[i].ret) {
			/* the writes stay in flight, on the owner's context,
			 * finished with the others': the error is the reply */
			r[i].unflushed = false;
			r[i].errio = true;
		}
		r[i].started = true;
		r[i].io.next = chain;
		chain = &r[i].io;
	}
	return chain;
}

/*
 * The group's commit: the first commit takes the whole running
 * transaction, so it covers every file's newest change made before it
 * started; the later calls find their transactions committed and return
 * at once. One that finds nothing to commit (the file's change committed
 * before) leaves the flush to the caller: true when one is needed.
 */
static bool sync_group_commit(struct wbfs *w, struct ext4_sync_req *r, size_t n,
			      struct bdi_sync_io *chain)
{
	bool need_flush = false, flushed;
	int cret = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if ((r[i].wi && !r[i].started) || r[i].errio)
			continue;
		flushed = false;
		if (!cret)
			cret = r[i].wi ? ext4_journal_commit_tid(w, r[i].wi->sync_tid, &flushed,
								 chain)
				       : ext4_journal_commit_io(w, &flushed, chain);
		r[i].ret = cret;
		r[i].unflushed = !cret && !flushed;
		need_flush |= r[i].unflushed;
	}
	return need_flush;
}

void ext4_sync_group(struct wbfs *w, struct ext4_sync_req *r, size_t n)
{
	bool need_flush;
	int fret = 0;
	size_t i;

	if (w->ro || !w->journal) {
		for (i = 0; i < n; i++)
			r[i].ret = w->ro ? 0 : r[i].wi ? winode_sync_range(w, r[i].wi, r[i].first,
							     r[i].last, r[i].datasync)
						: ext4_sync_durable(w);
		return;
	}
	need_flush = sync_group_commit(w, r, n, sync_group_start(w, r, n));
	/* the owner of the shared context last: it gives the context back */
	for (i = n; i-- > 0;) {
		if (r[i].started) {
			int ret = bdi_sync_inode_finish(w->bdi, &r[i].io);

			r[i].started = false;
			if (!r[i].errio && ret)
				r[i].ret = ret;
			r[i].errio = false;
		}
	}
	if (need_flush)
		fret = bdi_flush_device(w->bdi);
	for (i = 0; fret && i < n; i++)
		if (!r[i].ret && r[i].unflushed)
			r[i].ret = fret;
}
