// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The kstore log: which writes a writeback of the kernel's cached pages
 * (an mmapped file's, sent as WRITEs from its page cache) may predate, so
 * that such a writeback never puts old bytes over a newer write(2)'s.
 * Bookkeeping of the data path; the FUSE layer stores the written bytes
 * into the kernel's pages (fuse/inval.c) and tells, per request, when its
 * worker took it (kstore_taken).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "ext4_i.h"

LOCK_CLASS(lc_kstore_lock, "kstore_lock")

/*
 * Writeback from the kernel against our own changes. Stores through a
 * mapping come back as WRITEs of whole pages (FUSE_WRITE_CACHE), their
 * bytes copied out of the kernel's page when the request is handed to us
 * (read from /dev/fuse, or put into an io_uring entry). A write(2) that
 * changed part of such a page meanwhile stored its bytes into the
 * kernel's page (inval_write), but a writeback copied out before
 * that store carries the old bytes of that part, and written after the
 * write it would put them back over the new ones, in our copy only.
 *
 * So each write to a file the kernel may cache notes its range here
 * while it runs (kstore_begin) and, once its store into the kernel's
 * pages is done, the mount-wide sequence number it ended at
 * (kstore_end). A worker notes the sequence number when it takes a
 * request (kstore_taken: the number it noted before the kernel copied
 * the request to it, see kstore_before_copy). A
 * writeback taken before a write ended (its number is older than the
 * write's, or the write is still running) was copied out before that
 * write's store into the kernel's page was done, or while it ran: it
 * leaves the write's range as we have it, and the kernel's page holds the
 * write's bytes there too once the store is done. That orders the write
 * after the stores of that writeback, which is allowed: before sending
 * the write the kernel wrote back every page of its range dirty then and
 * waited for it, so those stores were made while the write(2) ran. A
 * writeback taken later holds the write's bytes or newer stores, and is
 * written whole. When a writeback counts as taken matters: see
 * kstore_before_copy. (Storing our bytes back into the kernel's page from
 * the writeback's worker, instead, would deadlock: fuse_page_mkwrite holds
 * the page lock while it waits for that writeback, and NOTIFY_STORE takes
 * the page lock.)
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
static _Thread_local uint64_t kstore_copy_seq;	/* kstore_before_copy's */
static _Thread_local bool kstore_copy_noted;

/*
 * When was a writeback's page copied out? Any sequence number read
 * between the start of its writeback and the copy will do: a write that
 * ended before the writeback started may have been overwritten since by
 * the mapping, whose bytes the writeback carries and must keep (so it
 * must count as older), while a write that ended after the writeback
 * started is either in the copy or newer than it, and keeping its range
 * as we have it is right both ways (no mapping stores into a page while
 * its writeback runs: page_mkwrite waits for it). A number read after
 * the copy is not enough: a write whose store into the kernel's page
 * came after the copy may have ended before the number was read, and the
 * writeback would put the page's old bytes over it. So the transport
 * notes the number just before it lets the kernel copy requests to this
 * thread, once it knows one is waiting for it (kstore_before_copy): a
 * /dev/fuse read that does not block, or the io_uring_enter that runs the
 * completion work which copies into an entry (fuse_uring.c). A worker
 * that copies in a read that blocks notes nothing and reads the number
 * at kstore_taken, after the copy: the window left open is that worker's
 * way back from the read.
 */

/** A worker of @w may have the kernel copy requests to it now. */
void kstore_before_copy(struct wbfs *w)
{
	kstore_copy_seq = atomic_load(&w->kstore_seq);
	kstore_copy_noted = true;
}

/** A worker of @w will copy requests in a read that may block. */
void kstore_copy_unnoted(void)
{
	kstore_copy_noted = false;
}

/** A worker takes a request of @w: its bytes are ours now. */
void kstore_taken(struct wbfs *w)
{
	kstore_taken_seq = kstore_copy_noted ? kstore_copy_seq : atomic_load(&w->kstore_seq);
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

void kstore_free(struct winode *wi)
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
int kstore_begin(struct winode *wi, uint64_t start, uint64_t end)
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
void kstore_end(struct wbfs *w, struct winode *wi, int slot, uint64_t start, uint64_t end)
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
int kstore_mask(struct wbfs *w, struct winode *wi, uint64_t pos, size_t n,
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

