// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * File data through the cache: read (hits copy out, misses read through
 * the bdi with on-demand readahead) and write (into cache pages,
 * reserving a block for every page that has none: delayed allocation;
 * ENOSPC is reported here, never at writeback). A failed read leaves no
 * page cached. Truncate, punch, fallocate, SEEK_DATA/SEEK_HOLE and the
 * report of lost dirty pages are in range.c. Blocks are allocated by the
 * flusher (map.c, map_pages).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ext4_i.h"
#include "wbcfs/cache/dirty.h"

#define RA_BATCH 256

/* ---- filling pages from the device ----------------------------------- */

/* Zero the part of @p that lies at or beyond @isize. */
static void page_zero_eof(struct page *p, uint64_t isize)
{
	uint64_t start = p->index << PAGE_SHIFT;

	if (isize <= start)
		memset(page_address(p), 0, PAGE_SIZE);
	else if (isize < start + PAGE_SIZE)
		memset((char *)page_address(p) + (isize - start), 0,
		       start + PAGE_SIZE - isize);
}

/*
 * Read locked, !uptodate pages @pg[0..n) (ascending, any gaps) from their
 * blocks; holes and unwritten extents read as zeros. Pages are left locked.
 * Returns 0 or -errno.
 */
static int fill_pages(struct wbfs *w, struct winode *wi, struct page **pg, unsigned n,
		      uint64_t isize)
{
	struct iovec iov[RA_BATCH];
	unsigned i = 0;

	while (i < n) {
		struct ext_run r;
		unsigned k = 0;
		long got;
		int ret = ec_lookup(w, wi, pg[i]->index, &r);

		if (ret)
			return ret;
		if (!r.pblk || r.uninit || (pg[i]->index << PAGE_SHIFT) >= isize) {
			memset(page_address(pg[i]), 0, PAGE_SIZE);
			i++;
			continue;
		}
		while (i + k < n && k < r.len && pg[i + k]->index == pg[i]->index + k) {
			iov[k].iov_base = page_address(pg[i + k]);
			iov[k].iov_len = PAGE_SIZE;
			k++;
		}
		got = bdi_read(w->bdi, &wi->wb, iov, (int)k, r.pblk << PAGE_SHIFT);
		if (got < 0)
			return (int)got;
		if ((unsigned long)got < k * PAGE_SIZE)
			return -EIO;
		i += k;
	}
	for (i = 0; i < n; i++)
		page_zero_eof(pg[i], isize);
	return 0;
}

/*
 * Bring pages [start, start+count) into the cache. Existing pages are left
 * alone; @marker gets PG_readahead. Allocation waits for pages up to @need
 * (the reader's page; UINT64_MAX for pure readahead), not for the rest.
 */
static int read_pages(struct wbfs *w, struct winode *wi, uint64_t start, unsigned count,
		      uint64_t marker, uint64_t need, uint64_t isize)
{
	struct page *pg[RA_BATCH];
	unsigned n = 0, i;
	int ret = 0;

	for (i = 0; i < count && n < RA_BATCH; i++) {
		bool needed = need != UINT64_MAX && start + i <= need;
		struct page *p = mapping_grab_page(&wi->map, start + i, needed ? 0 : ALLOC_NOWAIT);

		if (!p) {
			if (needed)
				ret = -ENOMEM;
			break;
		}
		if (page_test(p, PG_uptodate)) {
			unlock_page(p);
			page_put(p);
			continue;
		}
		if (p->index == marker)
			page_set(p, PG_readahead);
		pg[n++] = p;
	}
	if (n && !ret)
		ret = fill_pages(w, wi, pg, n, isize);
	for (i = 0; i < n; i++) {
		if (!ret)
			page_set(pg[i], PG_uptodate);
		else
			page_set(pg[i], PG_error);
		unlock_page(pg[i]);
		/* a page that failed to read leaves the cache (unless another
		 * reader holds it: it stays !uptodate and is read again) */
		if (ret)
			mapping_try_remove_page(&wi->map, pg[i]);
		page_put(pg[i]);
	}
	return ret;
}

static unsigned ra_count_cached(void *arg, uint64_t index, unsigned max)
{
	return mapping_count_cached_before(arg, index, max);
}

static unsigned clip_to_eof(uint64_t start, unsigned size, uint64_t isize)
{
	uint64_t eof_pages = (isize + PAGE_SIZE - 1) >> PAGE_SHIFT;

	if (start >= eof_pages)
		return 0;
	return eof_pages - start < size ? (unsigned)(eof_pages - start) : size;
}

/*
 * Read @win, in parts of at most RA_BATCH pages (read_pages' batch, one
 * device read at most): a window of readahead_kb above 1 MiB is read
 * whole, and its marker page is marked in whichever part holds it.
 */
static int read_window(struct wbfs *w, struct winode *wi, const struct ra_window *win,
		       uint64_t need, uint64_t isize)
{
	struct ra_window part;
	unsigned off, n;
	int ret = 0;

	for (off = 0; !ret && (n = ra_window_part(win, off, RA_BATCH, &part)); off += n) {
		unsigned size = clip_to_eof(part.start, part.size, isize);
		uint64_t marker = part.async_size ? part.start + part.size - part.async_size
						  : UINT64_MAX;

		if (!size)
			break;
		ret = read_pages(w, wi, part.start, size, marker, need, isize);
	}
	return ret;
}

static bool ra_queue(struct wbfs *w, struct winode *wi, const struct ra_window *win);

/* Cache miss at @index: sync readahead, then the page itself. */
static int read_miss(struct wbfs *w, struct wfile *f, uint64_t index, unsigned req,
		     uint64_t isize)
{
	struct winode *wi = f->wi;
	struct ra_window win, part;
	unsigned io_pages = w->opts.max_io_kb / 4, off, n;
	int ret = 0;

	ls_mutex_lock(&f->ra_lock, &lc_ra_lock);
	ra_sync(&f->ra, index, req, io_pages, ra_count_cached, &wi->map, &win);
	ls_mutex_unlock(&f->ra_lock);
	if (!win.size || win.start > index || win.start + win.size <= index) {
		win.start = index;
		win.size = req;
		win.async_size = 0;
	}
	/*
	 * The reader reads the parts its request needs; the parts after it are
	 * readahead proper, for the threads (one device read each: two threads
	 * keep two in flight), as the kernel waits only for the pages asked for.
	 */
	for (off = 0; (n = ra_window_part(&win, off, RA_BATCH, &part)); off += n) {
		if (part.start >= index + req && clip_to_eof(part.start, part.size, isize) &&
		    ra_queue(w, wi, &part))
			continue;
		ret = read_window(w, wi, &part, index, isize);
		if (ret)
			break;
	}
	/* a bad block elsewhere in the window must not fail this read */
	if (ret == -EIO && (win.start != index || win.size != 1)) {
		win = (struct ra_window){ .start = index, .size = 1 };
		ret = read_window(w, wi, &win, index, isize);
	}
	return ret;
}

/* ---- asynchronous readahead ---------------------------------------------- */

/*
 * The window that a reader's PG_readahead page asks for is read by the
 * readahead threads, as the kernel's async readahead is submitted and not
 * waited for: the reader returns its own pages at once, and the next
 * window's I/O overlaps the client's use of them and its next request.
 * (Read by the reader itself, every window of a sequential read waited
 * for the device in full: ~1 GB/s cold whatever readahead_kb was.) The
 * window's pages are locked while they are read: a reader that reaches
 * one waits for it (read_get_page), one that comes first reads it itself
 * and the thread finds it uptodate. A job holds its inode open (nopen) and
 * reads under its ilock, shared, as a reader does: truncation waits.
 */
#define RA_THREADS 2
#define RA_QUEUE 64

LOCK_CLASS(lc_ra_pool_lock, "ra_pool_lock")

struct ra_job {
	struct winode *wi;		/* held open (nopen) until the job is done */
	struct ra_window win;
};

/*
 * Lock ordering: lock, then w->itable_lock (a job's nopen is taken as it
 * is queued). Jobs run, and their inodes are put, without the lock.
 */
struct ra_pool {
	pthread_mutex_t lock;		/* protects: jobs, head, nr, stop */
	pthread_cond_t cond;		/* a job was queued, or stop */
	struct ra_job jobs[RA_QUEUE];
	unsigned head, nr;
	bool stop;
	unsigned nr_threads;		/* constant once started */
	pthread_t threads[RA_THREADS];
};

static void ra_job_run(struct wbfs *w, struct ra_job *j)
{
	ls_rwlock_rdlock(&j->wi->ilock, &lc_ilock_r);
	read_window(w, j->wi, &j->win, UINT64_MAX, winode_size(j->wi));
	ls_rwlock_unlock(&j->wi->ilock);
	winode_put_open(w, j->wi);
}

static void *ra_main(void *arg)
{
	struct wbfs *w = arg;
	struct ra_pool *rp = w->ra;

	ls_mutex_lock(&rp->lock, &lc_ra_pool_lock);
	for (;;) {
		struct ra_job j;

		while (!rp->nr && !rp->stop)
			lockstat_cond_wait(&rp->cond, &rp->lock);
		if (rp->stop)
			break;
		j = rp->jobs[rp->head];
		rp->head = (rp->head + 1) % RA_QUEUE;
		rp->nr--;
		ls_mutex_unlock(&rp->lock);
		ra_job_run(w, &j);
		atomic_fetch_add(&w->stats.nr_ra_async, 1);
		ls_mutex_lock(&rp->lock, &lc_ra_pool_lock);
	}
	ls_mutex_unlock(&rp->lock);
	return NULL;
}

/* Queue @win of @wi for the readahead threads; false: read it yourself. */
static bool ra_queue(struct wbfs *w, struct winode *wi, const struct ra_window *win)
{
	struct ra_pool *rp = w->ra;
	bool queued = false;

	if (!rp || !win->size)
		return false;
	ls_mutex_lock(&rp->lock, &lc_ra_pool_lock);
	if (!rp->stop && rp->nr < RA_QUEUE) {
		ls_mutex_lock(&w->itable_lock, &lc_itable_lock);
		wi->nopen++;	/* the job's, until it is done */
		ls_mutex_unlock(&w->itable_lock);
		rp->jobs[(rp->head + rp->nr) % RA_QUEUE] = (struct ra_job){ .wi = wi, .win = *win };
		rp->nr++;
		pthread_cond_signal(&rp->cond);
		queued = true;
	}
	ls_mutex_unlock(&rp->lock);
	return queued;
}

int data_ra_start(struct wbfs *w)
{
	struct ra_pool *rp = calloc(1, sizeof(*rp));
	unsigned i;
	int ret = 0;

	if (!rp)
		return -ENOMEM;
	pthread_mutex_init(&rp->lock, NULL);
	pthread_cond_init(&rp->cond, NULL);
	w->ra = rp;
	for (i = 0; i < RA_THREADS && !ret; i++) {
		ret = -pthread_create(&rp->threads[i], NULL, ra_main, w);
		if (!ret)
			rp->nr_threads++;
	}
	if (!rp->nr_threads) {
		data_ra_stop(w);
		return ret;
	}
	return 0;	/* fewer threads than asked for still read ahead */
}

void data_ra_stop(struct wbfs *w)
{
	struct ra_pool *rp = w->ra;
	unsigned i;

	if (!rp)
		return;
	ls_mutex_lock(&rp->lock, &lc_ra_pool_lock);
	rp->stop = true;
	pthread_cond_broadcast(&rp->cond);
	ls_mutex_unlock(&rp->lock);
	for (i = 0; i < rp->nr_threads; i++)
		pthread_join(rp->threads[i], NULL);
	/* what nobody took is only a hint: drop it, and the inodes it held */
	for (; rp->nr; rp->nr--, rp->head = (rp->head + 1) % RA_QUEUE)
		winode_put_open(w, rp->jobs[rp->head].wi);
	w->ra = NULL;
	pthread_cond_destroy(&rp->cond);
	pthread_mutex_destroy(&rp->lock);
	free(rp);
}

/* The reader met a PG_readahead page: have the next window read. */
static void read_async(struct wbfs *w, struct wfile *f, uint64_t index, unsigned req,
		       uint64_t isize)
{
	struct ra_window win, part;
	uint64_t hole = index + 1;
	unsigned io_pages = w->opts.max_io_kb / 4, off, n;

	while (hole < index + f->ra.ra_pages + req) {
		struct page *p = mapping_get_page(&f->wi->map, hole);

		if (!p)
			break;
		page_put(p);
		hole++;
	}
	ls_mutex_lock(&f->ra_lock, &lc_ra_lock);
	ra_async(&f->ra, index, req, io_pages, hole, &win);
	ls_mutex_unlock(&f->ra_lock);
	/* a job per part: the threads read two of them at once */
	for (off = 0; (n = ra_window_part(&win, off, RA_BATCH, &part)); off += n) {
		if (!clip_to_eof(part.start, part.size, isize))
			break;
		if (ra_queue(w, f->wi, &part))
			continue;
		read_window(w, f->wi, &part, UINT64_MAX, isize);
		atomic_fetch_add(&w->stats.nr_ra_inline, 1);
	}
}

/* A referenced, uptodate page at @index, reading it (with readahead) if needed. */
static struct page *read_get_page(struct wbfs *w, struct wfile *f, uint64_t index,
				  unsigned req, uint64_t isize, int *err)
{
	int tries;

	for (tries = 0; tries < 8; tries++) {
		struct page *p = mapping_get_page(&f->wi->map, index);

		if (p && !page_test(p, PG_uptodate)) {
			wait_on_page_locked(p);
			if (!page_test(p, PG_uptodate)) {
				page_put(p);
				p = NULL;
			}
		}
		if (p) {
			if (page_test_clear(p, PG_readahead))
				read_async(w, f, index, req, isize);
			mark_page_accessed(p);
			return p;
		}
		*err = read_miss(w, f, index, req, isize);
		if (*err)
			return NULL;
	}
	*err = -EIO;
	return NULL;
}

void data_read_done(struct read_reply *rr)
{
	int i;

	for (i = 0; i < rr->n; i++)
		page_put(rr->pages[i]);
	free(rr->pages);
	free(rr->iov);
	memset(rr, 0, sizeof(*rr));
}

int data_read(struct wbfs *w, struct wfile *f, uint64_t off, size_t size, struct read_reply *rr)
{
	struct winode *wi = f->wi;
	uint64_t isize, end, idx, first, last;
	int ret = 0;

	memset(rr, 0, sizeof(*rr));
	ls_rwlock_rdlock(&wi->ilock, &lc_ilock_r);
	isize = winode_size(wi);
	if (off >= isize || !size)
		goto out;
	end = off + size < isize ? off + size : isize;
	first = off >> PAGE_SHIFT;
	last = (end - 1) >> PAGE_SHIFT;
	rr->pages = calloc(last - first + 1, sizeof(*rr->pages));
	rr->iov = calloc(last - first + 1, sizeof(*rr->iov));
	if (!rr->pages || !rr->iov) {
		ret = -ENOMEM;
		goto out;
	}
	for (idx = first; idx <= last; idx++) {
		uint64_t ps = idx << PAGE_SHIFT;
		uint64_t from = off > ps ? off - ps : 0;
		uint64_t to = end < ps + PAGE_SIZE ? end - ps : PAGE_SIZE;
		struct page *p = read_get_page(w, f, idx, (unsigned)(last - idx + 1), isize, &ret);

		if (!p)
			break;
		rr->pages[rr->n] = p;
		rr->iov[rr->n].iov_base = (char *)page_address(p) + from;
		rr->iov[rr->n].iov_len = to - from;
		rr->n++;
	}
	if (rr->n)
		ret = 0;	/* short read up to the failing page */
out:
	ls_rwlock_unlock(&wi->ilock);
	if (ret)
		data_read_done(rr);
	return ret;
}

/* ---- writing ------------------------------------------------------------- */

/* Extents of @wi known to the extent map cache (0 when not loaded). */
static long file_extents(struct winode *wi)
{
	long n;

	ls_mutex_lock(&wi->ec_lock, &lc_ec_lock);
	n = wi->ec_valid ? (long)wi->nr_runs : 0;
	ls_mutex_unlock(&wi->ec_lock);
	return n;
}

/* Is page @index of @wi cached with a delalloc reservation? */
static bool page_is_delalloc(struct winode *wi, uint64_t index)
{
	struct page *p = mapping_get_page(&wi->map, index);
	bool d = p && page_test(p, PG_delalloc);

	if (p)
		page_put(p);
	return d;
}

/* Does the block of page @index have no block (a hole)? */
static bool page_unmapped(struct wbfs *w, struct winode *wi, uint64_t index, int *err)
{
	struct ext_run r;

	*err = ec_lookup(w, wi, index, &r);
	return !*err && !r.pblk;
}

/*
 * Make locked page @p ready to be partly overwritten: read it if needed, and
 * reserve a block if it has none. Returns 0 or -errno (-ENOSPC).
 */
static int write_prepare(struct wbfs *w, struct winode *wi, struct page *p, bool whole,
			 uint64_t isize, bool privileged)
{
	int ret = 0;

	if (!page_test(p, PG_uptodate) && !whole) {
		ret = fill_pages(w, wi, &p, 1, isize);
		if (ret)
			return ret;
	}
	if (page_test(p, PG_delalloc))
		return 0;
	if (!page_unmapped(w, wi, p->index, &ret))
		return ret;
	ret = ext4_reserve_page(w, wi, !p->index || !page_is_delalloc(wi, p->index - 1),
				file_extents(wi), privileged);
	if (ret)
		return ret;
	page_set(p, PG_delalloc);
	return 0;
}

/*
 * Zero bytes [from, to) of one page, in the cache or, when the page is not
 * cached, after reading its block; a hole is left alone (it reads as
 * zeros). The page is dirtied when its block holds the stale bytes.
 */
int data_zero_in_page(struct wbfs *w, struct winode *wi, uint64_t from, uint64_t to,
		      uint64_t isize)
{
	uint64_t idx = from >> PAGE_SHIFT;
	struct page *p = mapping_get_page(&wi->map, idx);
	int ret = 0, err;

	if (!p && page_unmapped(w, wi, idx, &err))
		return err;
	if (p)
		page_put(p);
	p = mapping_grab_page(&wi->map, idx, ALLOC_WRITE);
	if (!p)
		return -ENOMEM;
	if (!page_test(p, PG_uptodate))
		ret = fill_pages(w, wi, &p, 1, isize);
	if (!ret) {
		page_set(p, PG_uptodate);
		memset((char *)page_address(p) + (from & (PAGE_SIZE - 1)), 0, to - from);
		if (!page_unmapped(w, wi, idx, &ret) || page_test(p, PG_dirty))
			set_page_dirty(p);
	}
	unlock_page(p);
	page_put(p);
	return ret;
}

/* Zero the tail of the page holding byte @old_size before the file grows. */
int data_zero_eof_tail(struct wbfs *w, struct winode *wi, uint64_t old_size)
{
	uint64_t end = (old_size + PAGE_SIZE - 1) & ~(uint64_t)(PAGE_SIZE - 1);

	return end > old_size ? data_zero_in_page(w, wi, old_size, end, old_size) : 0;
}

/*
 * Copy the writeback's @n bytes for file offset @pos into page bytes @dst,
 * except the @nr ranges of @keep, whose bytes in @dst are newer and stay.
 */
static void copy_keeping(char *dst, const char *src, uint64_t pos, size_t n,
			 const struct kstore_range *keep, int nr)
{
	char save[PAGE_SIZE];
	int i;

	memcpy(save, dst, n);
	memcpy(dst, src, n);
	for (i = 0; i < nr; i++)
		memcpy(dst + (keep[i].start - pos), save + (keep[i].start - pos),
		       keep[i].end - keep[i].start);
}

/*
 * Copy @len bytes at @off into cache pages. Returns the bytes copied, or
 * -errno when none were; *@errp gets the error that stopped it, if any.
 * @from_page_cache: a writeback from the kernel's page cache, which leaves
 * the bytes of newer writes as they are (inval.c).
 */
static ssize_t write_pages(struct wbfs *w, struct winode *wi, const char *buf, size_t len,
			   uint64_t off, uint64_t isize, bool privileged, bool from_page_cache,
			   int *errp)
{
	struct kstore_range keep[KSTORE_MAX_KEEP];
	size_t done = 0;
	int ret = 0;

	while (done < len) {
		uint64_t pos = off + done;
		size_t in = pos & (PAGE_SIZE - 1);
		size_t n = PAGE_SIZE - in < len - done ? PAGE_SIZE - in : len - done;
		struct page *p = mapping_grab_page(&wi->map, pos >> PAGE_SHIFT, ALLOC_WRITE);
		int nk = 0;

		if (!p) {
			ret = -ENOMEM;
			break;
		}
		/* under the page lock: a write not seen here copies after us */
		if (from_page_cache)
			nk = kstore_mask(w, wi, pos, n, keep);
		ret = write_prepare(w, wi, p, n == PAGE_SIZE && !nk, isize, privileged);
		if (!ret) {
			if (nk)
				copy_keeping((char *)page_address(p) + in, buf + done, pos, n,
					     keep, nk);
			else
				memcpy((char *)page_address(p) + in, buf + done, n);
			page_set(p, PG_uptodate);
			set_page_dirty(p);
			/* grow i_size before the page can be locked by the flusher,
			 * which writes nothing past EOF (write_end in the kernel) */
			if (pos + n > isize) {
				isize = pos + n;
				winode_set_size(wi, isize, false);
			}
		}
		unlock_page(p);
		page_put(p);
		if (ret)
			break;
		done += n;
	}
	*errp = ret;
	return done ? (ssize_t)done : ret;
}

/*
 * The kernel's writeback of pages stored through a shared mapping,
 * [off, off+len), was refused at @done bytes with @err (ENOSPC: the store
 * went into a hole of a full filesystem). The kernel's ext4 refuses such
 * a store with SIGBUS in page_mkwrite, but FUSE sends nothing there (its
 * page_mkwrite only waits for the page's writeback), so the first chance
 * to refuse is this WRITE, and the kernel drops the page's data once its
 * writeback has failed (a new fault reads what the file holds). So: the
 * whole WRITE fails, which the kernel's errseq reports to msync and to
 * every descriptor open on the file, once each, at its next fsync; the
 * pages that did not fit are named lost now and counted for the exit
 * status. Pages accepted before @done stay dirty here and are written.
 * Context: a WRITE's worker, no lock held.
 */
static void write_cache_refused(struct wbfs *w, struct winode *wi, uint64_t off, size_t len,
				size_t done, int err)
{
	uint64_t first = (off + done) >> PAGE_SHIFT;
	uint64_t last = (off + len - 1) >> PAGE_SHIFT;
	long lost = (long)(last - first + 1);

	fprintf(msg_stream(), "wbcfs: %s: inode %u: %ld pages stored through a shared mapping (%llu"
		" bytes, first at offset %llu) could not be written (%s) and are lost\n",
		w->dev_path, wi->ino, lost, (unsigned long long)(off + len - (first << PAGE_SHIFT)),
		(unsigned long long)first << PAGE_SHIFT, strerror(err));
	atomic_fetch_add(&w->lost_pages, lost);
}

/*
 * Lock @wi for a write of [off, off+len). A write that lies below i_size
 * allocates nothing but delalloc reservations and leaves i_size alone, so
 * it shares the lock with other such writes (and reads); each page is
 * still written whole under its page lock. A write that reaches past EOF
 * grows i_size and may zero the old EOF page: exclusive, like truncate and
 * fallocate. i_size changes only under the exclusive lock, so the check
 * made under the shared lock holds until it is dropped.
 * Returns true when the lock is shared.
 */
static bool write_lock(struct winode *wi, uint64_t off, size_t len)
{
	if (off + len <= winode_size(wi)) {
		ls_rwlock_rdlock(&wi->ilock, &lc_ilock_r);
		if (off + len <= winode_size(wi))
			return true;
		ls_rwlock_unlock(&wi->ilock);
	}
	ls_rwlock_wrlock(&wi->ilock, &lc_ilock_w);
	return false;
}

/* One more writer inside @wi's ilock: keep the fs-wide maximum. */
static void write_enter(struct wbfs *w, struct winode *wi)
{
	long n = atomic_fetch_add(&wi->nr_writers, 1) + 1;
	long max = atomic_load(&w->stats.nr_parallel_writes_max);

	while (n > max &&
	       !atomic_compare_exchange_weak(&w->stats.nr_parallel_writes_max, &max, n))
		;
}

static void write_exit(struct winode *wi)
{
	atomic_fetch_sub(&wi->nr_writers, 1);
}

/*
 * Write @len bytes at @off. @from_page_cache: the kernel writes back pages
 * of a shared mapping, which it holds already; anything else may have to
 * be dropped from the kernel's page cache (inval.c) before the write is
 * answered, from the old EOF on when the write grows the file (its page's
 * tail was zeroed). Context: a WRITE's worker, before its reply.
 */
ssize_t data_write(struct wbfs *w, struct winode *wi, const char *buf, size_t len,
		   uint64_t off, bool privileged, bool from_page_cache)
{
	uint64_t isize, start;
	int err = 0, slot = -1;
	ssize_t ret;

	if (off >= WBFS_MAX_FILE_BYTES)
		return -EFBIG;
	if (len > WBFS_MAX_FILE_BYTES - off)
		len = WBFS_MAX_FILE_BYTES - off;
	write_lock(wi, off, len);
	write_enter(w, wi);
	isize = winode_size(wi);
	start = off < isize ? off : isize;
	if (!from_page_cache)	/* before any page: see inval.c */
		slot = kstore_begin(wi, start, off + len);
	ret = off > isize ? data_zero_eof_tail(w, wi, isize) : 0;
	if (!ret)
		ret = write_pages(w, wi, buf, len, off, isize, privileged, from_page_cache,
				  &err);
	if (ret > 0)
		winode_stamp_times(wi);
	write_exit(wi);
	ls_rwlock_unlock(&wi->ilock);
	if (from_page_cache && len && (ret < 0 || (size_t)ret < len)) {
		write_cache_refused(w, wi, off, len, ret < 0 ? 0 : (size_t)ret,
				    ret < 0 ? (int)-ret : (err ? -err : EIO));
		if (ret > 0)
			winode_touch(w, wi);
		return ret < 0 ? ret : (err ? err : -EIO);
	}
	if (ret > 0) {
		if (!from_page_cache)
			kcache_write(w, wi, buf, off, (size_t)ret, isize);
		winode_touch(w, wi);
	}
	kstore_end(w, wi, slot, start, ret > 0 ? off + (uint64_t)ret : start);
	return ret;
}

/*
 * ratelimit_pages of 2.6.24-3.1 (writeback_set_ratelimit): the cache's
 * pages / (CPUs * 32), from 16 pages to 4 MiB. The CPUs are counted once
 * (sysconf reads sysfs: not for every write).
 */
static long dirtier_ratelimit(struct wbfs *w)
{
	static _Atomic long cpus;
	long n = atomic_load_explicit(&cpus, memory_order_relaxed), rl;
	long max = (long)((4UL << 20) / PAGE_SIZE);

	if (!n) {
		n = sysconf(_SC_NPROCESSORS_ONLN);
		n = n > 0 ? n : 1;
		atomic_store_explicit(&cpus, n, memory_order_relaxed);
	}
	rl = (long)w->cache->nr_pages / (n * 32);

	return rl < 16 ? 16 : rl > max ? max : rl;
}

/*
 * throttle=writeback: balance_dirty_pages as it was before IO-less
 * throttling (2.6.24-3.1), the writers seed 001 ran with. Every
 * ratelimit_pages (8 while over) a dirtier looks at its device; while it
 * is over its share and the domain past the middle of the thresholds,
 * the dirtier writes write_chunk (1.5 ratelimit_pages) of the device's
 * pages itself, any inode's, blocking on a full queue, and waits for the
 * queue (congestion_wait, 100 ms) when it wrote less. This FUSE worker
 * does the I/O before it replies: the writer waits for it.
 */
static void data_balance_writeback(struct wbfs *w, pid_t pid, long nr)
{
	struct throttle_wb *tw = bdi_throttle_wb(w->bdi);
	struct throttle_stats *ts = &w->cache->throttle.stats;
	long rl = dirtier_ratelimit(w), chunk = rl + rl / 2, written = 0;

	if (nr <= 0 || !throttle_writeback_due(tw, pid, nr, rl))
		return;
	while (!w->destroyed && throttle_writeback_over(tw)) {
		long got = bdi_writeback_dirtier(w->bdi, chunk);

		written += got;
		atomic_fetch_add(&ts->nr_dirtier_pages, got);
		if (written >= chunk || !throttle_writeback_over(tw))
			break;
		atomic_fetch_add(&ts->nr_dirtier_waits, 1);
		bdi_congestion_wait(w->bdi, 100);
	}
}

/*
 * A write by task @pid dirtied @nr pages: the throttle's turn
 * (balance_dirty_pages_ratelimited). The IO-less controller's pause is
 * served by holding the write's reply (fuse_io.c), so this returns at
 * once; the simple throttle blocks here until under the limit, and
 * throttle=writeback makes this worker write.
 * Context: a WRITE's worker, after data_write, before the reply.
 */
void data_balance_dirty(struct wbfs *w, pid_t pid, long nr)
{
	struct throttle_wb *tw = bdi_throttle_wb(w->bdi);
	struct throttle_verdict v;

	switch (atomic_load(&w->cache->throttle.mode)) {
	case THROTTLE_SIMPLE:
		dirty_balance_simple(w->cache);
		return;
	case THROTTLE_WRITEBACK:
		data_balance_writeback(w, pid, nr);
		return;
	default:
		break;
	}
	if (nr <= 0)
		return;
	v = throttle_dirtied(tw, pid, nr);
	if (v.pause_ms <= 0 || kcache_hold_reply(w, tw, pid, v.pause_ms))
		return;
	/* no timer for held replies: pause this worker instead */
	while (v.pause_ms > 0 && !w->destroyed) {
		struct timespec ts = { v.pause_ms / 1000, (v.pause_ms % 1000) * 1000000L };

		nanosleep(&ts, NULL);
		v = throttle_resume(tw, pid);
	}
}
