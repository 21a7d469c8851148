// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The journal: ext4's own, in the jbd2 format (jbd2/log.c writes the
 * log), written by wbcfs so that a crash leaves a filesystem that a replay
 * (wbcfs's, the kernel's or e2fsck's) makes consistent. This file holds
 * the running transaction, busy blocks, the commit thread and mount; the
 * commit is in jcommit.c, the checkpoint in jcheckpoint.c.
 *
 * Metadata changes are libext2fs writes into the device mapping of the
 * cache (iomgr.c), all under fs_lock. With a journal, a page written there
 * joins the running transaction (PG_jdirty: writeback leaves it alone, so
 * its home block keeps the committed contents). A commit, under fs_lock,
 * puts libext2fs's in-memory metadata (superblock, descriptors, bitmaps)
 * into the cache, copies every page of the transaction and starts the next
 * one; then, without the lock: the ordered-data barrier (every data write
 * whose blocks that transaction allocated has completed), descriptor and
 * copied blocks and revoke blocks into the log, a device flush, the commit
 * block, a device flush. Only then do the pages become writable home, and
 * blocks the transaction freed reusable (busy blocks, ext4.c).
 *
 * The log is a ring [first, last), as jbd2's: transactions are laid out
 * after the head and wrap at its end; the journal superblock's s_start
 * and s_sequence are its tail, the oldest transaction that still holds
 * the newest committed copy of a block whose home copy is older (pinned:
 * block -> that transaction). After a commit its pages are ordinary dirty
 * pages that writeback takes home on its own schedule; a block logged
 * again pins only its newest transaction, so one home write covers all
 * of them. The completion of a home write of a clean page in no
 * transaction (meta_written, from writeback) releases its block up to the
 * last transaction committed then; the releases are folded into pinned
 * at the next commit, whose flush makes them durable: from then on the
 * oldest transaction still pinned may be the tail (safe_tid), and a later
 * commit writes it into the superblock before its own flush (lazily:
 * once the log is a quarter full). The tail is never written before the
 * home writes it relies on are flushed, and a block is never reused
 * before the superblock that frees it is on the device.
 *
 * Only when the next transaction does not fit does a checkpoint
 * (jcheckpoint.c) write home the pinned blocks of the oldest
 * transactions, flush and write the new tail; it holds commit_mutex but
 * takes fs_lock only to read and update the tables, so namespace
 * operations go on during its I/O. A block that the running transaction
 * has changed since its commit is written from its logged copy.
 *
 * A freed block the log holds gets a revoke record, so that a replay
 * never writes old metadata over what the block holds later (file data).
 * Until that revoke has committed, the committed metadata still points at
 * the block: it stays pinned, a checkpoint in between writes its logged
 * copy home, and only the revoke's commit drops it from the log's
 * tables. The freed block's cached page is dropped at once: what the
 * running transaction changed in it must not reach home. A revoke leaves
 * the log only after every older transaction (the tail moves in order),
 * and a block leaves `logged` (no revoke needed any more) once the tail
 * has passed its newest copy.
 *
 * Commits: every commit=N seconds (journal thread), at fsync and syncfs,
 * when the running transaction grows past a quarter of the log, and at
 * unmount, which also checkpoints and clears needs_recovery.
 *
 * Locks: commit_mutex serialises commits and checkpoints (outside
 * fs_lock); the running transaction's tables are under fs_lock; hlock,
 * a leaf, holds the home writes completed since the last fold.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ext4_i.h"
#include "wbcfs/jbd2.h"
#include "wbcfs/lib/clock.h"
#include "wbcfs/blkdev.h"

LOCK_CLASS(lc_journal_tlock, "journal_tlock")
LOCK_CLASS(lc_journal_commit, "journal_commit")
LOCK_CLASS(lc_journal_homed, "journal_homed")

/* ---- the journal ------------------------------------------------------ */

/*
 * The log's hooks into the mount: its writes fail under fault_meta=write
 * (fault_inject mounts) as metadata writeback does, and its flushes are
 * the bdi's, with their faults.
 */
static bool jlog_write_faulted(void *priv)
{
	struct wbfs *w = priv;

	return w->opts.fault_inject && (atomic_load(&w->meta_wb.fault) & WB_FAULT_WRITE);
}

static int jlog_flush(void *priv)
{
	struct wbfs *w = priv;

	return bdi_flush_device(w->bdi);
}

static bool jlog_flush_fault_take(void *priv)
{
	struct wbfs *w = priv;

	return bdi_flush_fault_take(w->bdi);
}

static const struct jbd2_log_ops jlog_ops = {
	.write_faulted = jlog_write_faulted,
	.flush = jlog_flush,
	.flush_fault_take = jlog_flush_fault_take,
};

void *ext4_journal_alloc(size_t n)
{
	void *p;

	return posix_memalign(&p, JBS, n ? n : JBS) ? NULL : p;
}

/* ---- the running transaction ------------------------------------------ */

/* Append @p to the running list (the caller gives it a reference). */
int ext4_journal_add_run(struct wjournal *j, struct page *p)
{
	if (j->nr_run == j->cap_run) {
		size_t cap = j->cap_run ? j->cap_run * 2 : 256;
		struct page **n = realloc(j->run, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		j->run = n;
		j->cap_run = cap;
	}
	j->run[j->nr_run++] = p;
	return 0;
}

/* Called by the iomgr after changing metadata page @p. Context: fs_lock, @p locked. */
void ext4_journal_note_write(struct wbfs *w, struct page *p)
{
	struct wjournal *j = w->journal;

	if (!j || !j->on || page_test_set(p, PG_jdirty))
		return;
	if (ext4_journal_add_run(j, p)) {
		/* cannot track it: let it be written like an unjournaled page */
		page_clear(p, PG_jdirty);
		atomic_fetch_add(&j->unjournaled, 1);
		return;
	}
	page_get(p);
	jtab_put(&j->runset, p->index, 1);
	/* journaled again after a revoke in this transaction: the revoke
	 * would hide this copy from replay */
	jtab_del(&j->revoke, p->index);
	if (j->nr_run == j->max_tx) {
		ls_mutex_lock(&j->tlock, &lc_journal_tlock);
		j->kick = true;
		pthread_cond_signal(&j->tcond);
		ls_mutex_unlock(&j->tlock);
	}
}

/*
 * The iomgr rewrote dirty page @p with the bytes it holds. Unless the log
 * has its newest copy (this transaction, the one committing, or a
 * committed one not checkpointed), it joins the transaction: a block
 * freed, revoked and allocated again with the same contents would
 * otherwise be in no transaction at all while its home copy is old.
 * Context: fs_lock, @p locked.
 */
void ext4_journal_note_same(struct wbfs *w, struct page *p)
{
	struct wjournal *j = w->journal;

	if (!j || !j->on || page_test(p, PG_jdirty))
		return;
	/* the log's copy is the newest, unless a pending revoke hides it */
	if ((jtab_find(&j->logged, p->index) || jtab_find(&j->ctab, p->index)) &&
	    !jtab_find(&j->revoke, p->index))
		return;
	ext4_journal_note_write(w, p);
}

/*
 * Block @b was freed by the running transaction. Its newest committed copy
 * (in the log, or being committed) is still what the committed metadata
 * points at, so it stays in logged/ctab: a checkpoint before the freeing
 * transaction commits must write it home. A revoke keeps replay from
 * writing it over the block's next owner; tx_done forgets the copy once
 * the revoke has committed. The cached page goes now: what the running
 * transaction changed in it must never reach home, and it is nobody's
 * metadata any more.
 */
static void note_freed_one(struct wbfs *w, struct wjournal *j, uint64_t b)
{
	jtab_del(&j->runset, b);	/* tx_build skips the page once it is gone */
	if ((jtab_find(&j->logged, b) || jtab_find(&j->ctab, b)) && !jtab_find(&j->revoke, b) &&
	    !jtab_put(&j->revoke, b, 1))
		atomic_fetch_add(&j->revokes, 1);
	mapping_truncate(&w->meta_map, b, b);
}

/*
 * Call @fn for the blocks of @t inside [blk, blk+n): a table walk for
 * large ranges. @fn may remove blocks from @t.
 */
static void visit_tab(struct wbfs *w, struct wjournal *j, struct jtab *t, uint64_t blk,
		      uint64_t n, void (*fn)(struct wbfs *, struct wjournal *, uint64_t))
{
	uint64_t *hits;
	size_t i, k = 0;

	if (!t->n)
		return;
	if (n <= t->n * 4) {
		for (i = 0; i < n; i++)
			if (jtab_find(t, blk + i))
				fn(w, j, blk + i);
		return;
	}
	hits = malloc(t->n * sizeof(*hits));
	if (!hits)
		return;
	for (i = 0; i < t->cap; i++)
		if (t->key[i] != JTAB_EMPTY && t->key[i] >= blk && t->key[i] - blk < n)
			hits[k++] = t->key[i];
	for (i = 0; i < k; i++)
		fn(w, j, hits[i]);
	free(hits);
}

/* libext2fs freed [blk, blk+n). Context: fs_lock. */
void ext4_journal_note_freed(struct wbfs *w, uint64_t blk, uint64_t n)
{
	struct wjournal *j = w->journal;

	if (!j || !j->on)
		return;
	visit_tab(w, j, &j->runset, blk, n, note_freed_one);
	visit_tab(w, j, &j->logged, blk, n, note_freed_one);
	visit_tab(w, j, &j->ctab, blk, n, note_freed_one);
}

static void note_reused_one(struct wbfs *w, struct wjournal *j, uint64_t b)
{
	bool had = jtab_del(&j->logged, b);

	(void)w;
	jtab_del(&j->pinned, b);	/* its home copy is file data now */
	had |= jtab_del(&j->ctab, b);
	had |= jtab_del(&j->runset, b);
	if (had && !jtab_find(&j->revoke, b) && !jtab_put(&j->revoke, b, 1))
		atomic_fetch_add(&j->revokes, 1);
}

/*
 * Blocks [blk, blk+n) now hold file data. Normally their frees committed
 * and the log has forgotten them; a copy it may still hold must be
 * written over the data neither by a checkpoint nor by replay.
 * Context: fs_lock.
 */
void ext4_journal_note_reused(struct wbfs *w, uint64_t blk, uint64_t n)
{
	struct wjournal *j = w->journal;

	if (!j || !j->on)
		return;
	visit_tab(w, j, &j->runset, blk, n, note_reused_one);
	visit_tab(w, j, &j->logged, blk, n, note_reused_one);
	visit_tab(w, j, &j->ctab, blk, n, note_reused_one);
}

/* ---- the log's tail ---------------------------------------------------- */

/*
 * Page @p of the metadata mapping reached home. Clean and in no
 * transaction, it held what its last commit logged (a change while the
 * write was in flight would have dirtied it, and a commit of it would
 * have it PG_jcommit until done): that block no longer pins the
 * transactions up to the last one committed now. Noted under hlock, a
 * leaf, and folded into pinned at the next commit or checkpoint; only a
 * flush after that makes the tail it allows durable. Context: I/O
 * completion (ext4_bdi_ops.meta_written).
 */
void ext4_journal_meta_written(struct bdi *b, struct page *p)
{
	struct wbfs *w = bdi_owner(b);
	struct wjournal *j = w->journal;
	uint32_t c;

	if (!j || p->mapping != &w->meta_map ||
	    !__atomic_load_n(&j->have_committed, __ATOMIC_ACQUIRE))
		return;
	if (page_test(p, PG_dirty) || page_test(p, PG_jdirty) || page_test(p, PG_jcommit))
		return;
	c = __atomic_load_n(&j->committed, __ATOMIC_ACQUIRE);
	ls_mutex_lock(&j->hlock, &lc_journal_homed);
	jtab_put(&j->homed, p->index, c);	/* no room: it stays pinned */
	ls_mutex_unlock(&j->hlock);
}

/*
 * Freshly committed metadata waits a while before writeback takes it
 * home, as the kernel's: jbd2 dirties a buffer at the end of its commit,
 * and the flusher writes it when it expires (dirty_expire_centisecs). A
 * page written home after every commit (commit=5) would cost the device
 * a scattered write per block every few seconds, where one write per
 * expiry covers every commit in between: the log holds the newest copy
 * meanwhile. The page is PG_jheld, which writeback skips, until the
 * flusher's periodic pass finds it expired (ext4_journal_meta_expire);
 * a change by the running transaction and its commit keep the hold's
 * start. At most a sixteenth of the cache is held (reclaim cannot free
 * dirty pages); past that, committed pages go home at once. @p leaves
 * its transaction here (PG_jcommit). Context: fs_lock.
 */
void ext4_journal_hold(struct wbfs *w, struct wjournal *j, struct page *p)
{
	/* dirty pages reclaim cannot free: a sixteenth of the cache at most */
	size_t cap = atomic_load(&w->cache->nr_pages) / 16;

	page_clear(p, PG_jcommit);
	/* PG_jheld: held already, from its first commit on (one reference) */
	if (page_test(p, PG_jheld) || j->nr_held >= cap || j->nr_held == j->cap_held) {
		page_put(p);
		return;
	}
	page_set(p, PG_jheld);
	j->held[j->nr_held++] = (struct jheld){ p, clock_now_ms() };
	atomic_store(&j->held_pages, (long)j->nr_held);
	if (j->nr_held == 1)
		atomic_store(&j->held_since, j->held[0].ms);
}

/*
 * Held pages go to writeback: with @all every one, else those held
 * @age_ms or longer that no transaction has again (a page changed since
 * is not writable before its next commit; it keeps its place, and the
 * first pass after that commit releases it, its expiry past). A
 * released page that is still dirty is marked so on the metadata inode
 * again, which its writeback then finds whatever happened to the
 * inode's state meanwhile. Returns how many were released.
 * Context: fs_lock.
 */
unsigned long ext4_journal_release_held(struct wbfs *w, struct wjournal *j, uint64_t age_ms,
					bool all)
{
	uint64_t now = clock_now_ms();
	unsigned long n = 0;
	bool dirty = false;
	size_t i, k = 0;

	lock_assert_held(&w->fs_lock);
	for (i = 0; i < j->nr_held; i++) {
		struct page *p = j->held[i].p;

		if (!all && (now - j->held[i].ms < age_ms ||
			     page_test(p, PG_jdirty) || page_test(p, PG_jcommit))) {
			j->held[k++] = j->held[i];	/* in order: oldest first */
			continue;
		}
		page_clear(p, PG_jheld);
		/* not dropped from the cache meanwhile (a freed block) */
		if (p->mapping == &w->meta_map && page_test(p, PG_dirty))
			dirty = true;
		page_put(p);
		n++;
	}
	j->nr_held = k;
	atomic_store(&j->held_pages, (long)k);
	atomic_store(&j->held_since, k ? j->held[0].ms : 0);
	if (dirty)
		bdi_mark_inode_dirty(w->bdi, &w->meta_wb, I_DIRTY_PAGES);
	return n;
}

/*
 * bdi_ops.meta_expire: the flusher's periodic pass sends expired held
 * pages home, with or without commits (an idle journal commits nothing).
 * Context: flusher, no lock held.
 */
unsigned long ext4_journal_meta_expire(struct bdi *b, uint64_t expire_ms)
{
	struct wbfs *w = bdi_owner(b);
	struct wjournal *j = w->journal;
	uint64_t since;
	unsigned long n;

	if (!j)
		return 0;
	/* none held, or none expired: not worth fs_lock */
	since = atomic_load(&j->held_since);
	if (!since || clock_now_ms() - since < expire_ms)
		return 0;
	ext4_lock(w);
	n = ext4_journal_release_held(w, j, expire_ms, false);
	ext4_unlock(w);
	atomic_fetch_add(&j->held_expired, (long)n);
	return n;
}

/*
 * syncfs: the held pages go to its metadata pass, as sync(2) writes the
 * kernel's block device pages home too. Context: no lock held.
 */
void ext4_journal_release_all(struct wbfs *w)
{
	struct wjournal *j = w->journal;

	if (!j)
		return;
	ext4_lock(w);
	ext4_journal_release_held(w, j, 0, true);
	ext4_unlock(w);
}

/* Context: fs_lock (and commit_mutex: no commit changes pinned meanwhile). */
void ext4_journal_fold_homed(struct wjournal *j)
{
	size_t i;

	ls_mutex_lock(&j->hlock, &lc_journal_homed);
	if (j->homed.n && j->pinned.n) {
		for (i = 0; i < j->homed.cap; i++) {
			uint32_t *t;

			if (j->homed.key[i] == JTAB_EMPTY)
				continue;
			t = jtab_find(&j->pinned, j->homed.key[i]);
			if (t && !jbd2_tid_gt(*t, j->homed.val[i])) {
				jtab_del(&j->pinned, j->homed.key[i]);
				atomic_fetch_add(&j->homed_blocks, 1);
			}
		}
	}
	jtab_clear(&j->homed);
	ls_mutex_unlock(&j->hlock);
}

/* The oldest transaction a block pins, or @dflt. Context: fs_lock. */
uint32_t ext4_journal_oldest_pinned(const struct wjournal *j, uint32_t dflt)
{
	return jtab_min_tid(&j->pinned, dflt);
}

/*
 * The log starts at transaction @tid now (the superblock says so,
 * durably), or is empty (@empty): the transactions before it leave the
 * list, and so do the blocks whose newest copy they held (a later free of
 * such a block needs no revoke). Context: commit_mutex and fs_lock.
 */
void ext4_journal_tail_set(struct wbfs *w, struct wjournal *j, bool empty, uint32_t tid)
{
	size_t i, k = 0;
	uint64_t *gone;

	lock_assert_held(&j->commit_mutex);
	lock_assert_held(&w->fs_lock);
	if (empty) {
		j->empty = true;
		j->head = j->tail = j->log.first;
		j->nr_txs = 0;
		jtab_clear(&j->logged);
		jtab_clear(&j->pinned);
		j->tail_tid = j->safe_tid = tid;
		return;
	}
	while (k < j->nr_txs && jbd2_tid_gt(tid, j->txs[k].tid))
		k++;
	if (k == j->nr_txs)
		return;		/* not in the log: nothing to forget */
	memmove(j->txs, j->txs + k, (j->nr_txs - k) * sizeof(*j->txs));
	j->nr_txs -= k;
	j->tail = j->txs[0].start;
	j->tail_tid = tid;
	if (jbd2_tid_gt(tid, j->safe_tid))
		j->safe_tid = tid;
	if (!k || !j->logged.n)
		return;
	gone = malloc(j->logged.n * sizeof(*gone));
	if (!gone)
		return;		/* they stay: a revoke too many later */
	for (i = 0, k = 0; i < j->logged.cap; i++)
		if (j->logged.key[i] != JTAB_EMPTY && !jbd2_ring_holds(j->tail, j->head, j->empty, j->logged.val[i] & ~ESC_BIT))
			gone[k++] = j->logged.key[i];
	for (i = 0; i < k; i++)
		jtab_del(&j->logged, gone[i]);
	free(gone);
}

/* Where transaction @tid starts in the log (the head when it is not there). */
uint32_t ext4_journal_tx_start(const struct wjournal *j, uint32_t tid)
{
	size_t i;

	for (i = 0; i < j->nr_txs; i++)
		if (j->txs[i].tid == tid)
			return j->txs[i].start;
	return j->head;
}

/* Free log blocks after the head. Context: commit_mutex. */
uint32_t ext4_journal_room(const struct wjournal *j)
{
	return jbd2_ring_room(j->log.first, j->log.last, j->tail, j->head, j->empty);
}

/* Freed by the transaction that committed, unless freed anew since (busy again). */
static void unmark_unless_busy(struct wbfs *w, blk64_t blk, blk64_t n)
{
	for (; n; blk++, n--)
		if (!ext2fs_test_block_bitmap2(w->busy, blk))
			ext2fs_unmark_block_bitmap2(w->fs->block_map, blk);
}

/*
 * Call @fn on each run of the committing transaction's busy blocks and
 * empty the set; nothing to do (no scan of a whole-filesystem bitmap at
 * every commit) when it is empty. Context: fs_lock.
 */
void ext4_journal_drain_busy_commit(struct wbfs *w, struct wjournal *j,
			      void (*fn)(struct wbfs *w, blk64_t blk, blk64_t n))
{
	if (!j->busy_commit || !w->fs || !j->nr_busy_commit)
		return;
	ext4_bitmap_drain(w, j->busy_commit, &j->busy_commit_runs, fn);
	j->nr_busy_commit = 0;
}

/* Blocks freed by the transaction that just committed may be reused. Context: fs_lock. */
void ext4_journal_release_busy_commit(struct wbfs *w, struct wjournal *j)
{
	ext4_journal_drain_busy_commit(w, j, unmark_unless_busy);
}

static void mark_busy_commit(struct wbfs *w, blk64_t blk, blk64_t n)
{
	ext2fs_mark_block_bitmap_range2(w->journal->busy_commit, blk, (unsigned)n);
	ext4_bm_runs_add(&w->journal->busy_commit_runs, blk, n);
	w->journal->nr_busy_commit += n;
}

void ext4_journal_mark_busy(struct wbfs *w, blk64_t blk, blk64_t n)
{
	ext2fs_mark_block_bitmap_range2(w->busy, blk, (unsigned)n);
	ext4_bm_runs_add(&w->busy_runs, blk, n);
	w->nr_busy += n;
}

/*
 * The busy blocks of the running transaction become the committing one's.
 * Context: fs_lock.
 */
void ext4_journal_busy_to_commit(struct wbfs *w, struct wjournal *j)
{
	if (!w->nr_busy || !j->busy_commit)
		return;
	ext4_bitmap_drain(w, w->busy, &w->busy_runs, mark_busy_commit);
	w->nr_busy = 0;
}

/*
 * ext4_release_busy_locked: the committing transaction's too (at unmount,
 * and when a commit finds nothing left to commit).
 */
void ext4_journal_release_busy(struct wbfs *w)
{
	struct wjournal *j = w->journal;

	if (j)
		ext4_journal_drain_busy_commit(w, j, ext4_busy_unmark);
}

blk64_t ext4_journal_busy_blocks(struct wbfs *w)
{
	struct wjournal *j = w->journal;

	return w->nr_busy + (j ? j->nr_busy_commit : 0);
}

/* A set bit of @bm in [@goal, last], else in [first, @goal): *@blk. */
static bool busy_find(struct wbfs *w, ext2fs_block_bitmap bm, blk64_t goal, blk64_t *blk)
{
	blk64_t first = w->fs->super->s_first_data_block;
	blk64_t last = ext2fs_blocks_count(w->fs->super) - 1;

	if (goal < first || goal > last)
		goal = first;
	if (!ext2fs_find_first_set_block_bitmap2(bm, goal, last, blk))
		return true;
	return goal > first && !ext2fs_find_first_set_block_bitmap2(bm, first, goal - 1, blk);
}

/*
 * One busy block for libext2fs's metadata (ext4_busy_alloc_block): the running
 * transaction's, else the committing one's. It leaves its busy set (its
 * bit there would have the bitmap written show it free); it stays marked
 * in the in-memory bitmap, where the allocation that follows counts it.
 * A stale run noting it finds its bit clear. Context: fs_lock.
 */
errcode_t ext4_journal_take_busy(struct wbfs *w, blk64_t goal, blk64_t *ret)
{
	struct wjournal *j = w->journal;

	if (w->nr_busy && busy_find(w, w->busy, goal, ret)) {
		ext2fs_unmark_block_bitmap2(w->busy, *ret);
		w->nr_busy--;
	} else if (j && j->busy_commit && j->nr_busy_commit &&
		   busy_find(w, j->busy_commit, goal, ret)) {
		ext2fs_unmark_block_bitmap2(j->busy_commit, *ret);
		j->nr_busy_commit--;
	} else {
		return EXT2_ET_BLOCK_ALLOC_FAIL;
	}
	ext4_bb_changed(w, *ret, 1);
	return 0;
}

/* ---- the commit thread ------------------------------------------------ */

static void *journal_thread(void *arg)
{
	struct wbfs *w = arg;
	struct wjournal *j = w->journal;

	ls_mutex_lock(&j->tlock, &lc_journal_tlock);
	while (!j->stop) {
		struct timespec ts;

		if (!j->kick) {
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += j->commit_ms / 1000;
			ts.tv_nsec += (long)(j->commit_ms % 1000) * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			lockstat_cond_timedwait(&j->tcond, &j->tlock, &ts);
		}
		if (j->stop)
			break;
		j->kick = false;
		ls_mutex_unlock(&j->tlock);
		ext4_journal_commit(w, NULL);
		ls_mutex_lock(&j->tlock, &lc_journal_tlock);
	}
	ls_mutex_unlock(&j->tlock);
	return NULL;
}

/* ---- mount and unmount ------------------------------------------------ */

/*
 * Load the journal of a read-write mount (after any recovery: the log
 * must be empty) and set up its features as the kernel's ext4 does: 64bit
 * tags with 64bit, checksums v3 with metadata_csum. Returns 0 (also for a
 * filesystem without a journal) or -errno after a one-line message.
 * Context: mount, before anything is served.
 */
int ext4_journal_load(struct wbfs *w, const char *dev)
{
	ext2_filsys fs = w->fs;
	struct wjournal *j;
	struct ext2_inode_large in;
	uint32_t maxlen, incompat, nfc = 0;
	ssize_t r;
	int ret = -EUCLEAN;

	if (w->ro || !ext2fs_has_feature_journal(fs->super))
		return 0;
	if (!fs->super->s_journal_inum) {
		fprintf(msg_stream(), "wbcfs: %s: the journal is on another device (external journal),"
			" which wbcfs cannot write; mount with -o ro\n", dev);
		return -EOPNOTSUPP;
	}
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->w = w;
	j->log.fd = w->dev_fd;
	j->log.ops = &jlog_ops;
	j->log.priv = w;
	j->log.jsb = ext4_journal_alloc(JBS);
	j->zero = ext4_journal_alloc(JBS);
	if (!j->log.jsb || !j->zero)
		goto nomem;
	memset(j->zero, 0, JBS);
	if (ext2fs_read_inode_full(fs, fs->super->s_journal_inum, (struct ext2_inode *)&in,
				   sizeof(in))) {
		fprintf(msg_stream(), "wbcfs: %s: cannot read the journal inode; run e2fsck\n", dev);
		goto fail;
	}
	maxlen = (uint32_t)(EXT2_I_SIZE(&in) / JBS);
	if (maxlen < JBD2_MIN_LOG_BLOCKS ||
	    jrec_journal_map(fs, fs->super->s_journal_inum, maxlen, &j->log.map)) {
		fprintf(msg_stream(), "wbcfs: %s: the journal inode maps its blocks badly; run e2fsck\n",
			dev);
		goto fail;
	}
	r = blkdev_pread(w->dev_fd, j->log.jsb, JBS, jbd2_log_off(&j->log, 0));
	if (r != (ssize_t)JBS) {
		fprintf(msg_stream(), "wbcfs: %s: cannot read the journal superblock\n", dev);
		ret = -EIO;
		goto fail;
	}
	incompat = be32toh(j->log.jsb->s_feature_incompat);
	if (j->log.jsb->s_header.h_magic != htobe32(JBD2_MAGIC) ||
	    be32toh(j->log.jsb->s_header.h_blocktype) != JBD2_SUPERBLOCK_V2 ||
	    be32toh(j->log.jsb->s_blocksize) != JBS ||
	    be32toh(j->log.jsb->s_maxlen) > maxlen ||
	    be32toh(j->log.jsb->s_maxlen) < JBD2_MIN_LOG_BLOCKS ||
	    be32toh(j->log.jsb->s_first) == 0 ||
	    be32toh(j->log.jsb->s_first) >= be32toh(j->log.jsb->s_maxlen)) {
		fprintf(msg_stream(), "wbcfs: %s: the journal superblock is not a valid jbd2 v2"
			" superblock; run e2fsck\n", dev);
		goto fail;
	}
	if (incompat & ~(JBD2_KNOWN_INCOMPAT | JBD2_FEATURE_INCOMPAT_FAST_COMMIT)) {
		fprintf(msg_stream(), "wbcfs: %s: the journal has unknown features (0x%x); run e2fsck\n",
			dev, incompat & ~JBD2_KNOWN_INCOMPAT);
		goto fail;
	}
	if (j->log.jsb->s_start) {
		fprintf(msg_stream(), "wbcfs: %s: the journal holds transactions not replayed;"
			" run e2fsck\n", dev);
		goto fail;
	}
	if (be32toh(j->log.jsb->s_nr_users) > 1) {
		fprintf(msg_stream(), "wbcfs: %s: the journal is shared by %u filesystems; run e2fsck\n",
			dev, be32toh(j->log.jsb->s_nr_users));
		goto fail;
	}
	maxlen = be32toh(j->log.jsb->s_maxlen);
	if (incompat & JBD2_FEATURE_INCOMPAT_FAST_COMMIT) {
		/* the fast-commit area ends the journal; wbcfs never writes it */
		nfc = be32toh(j->log.jsb->s_num_fc_blks) ? be32toh(j->log.jsb->s_num_fc_blks) : 256;
		if (nfc >= maxlen - be32toh(j->log.jsb->s_first) - JBD2_MIN_LOG_BLOCKS / 2)
			nfc = 0;
	}
	j->log.first = be32toh(j->log.jsb->s_first);
	j->log.last = maxlen - nfc;

	/* features, as the kernel's ext4 sets them at mount */
	incompat &= ~(JBD2_FEATURE_INCOMPAT_CSUM_V2 | JBD2_FEATURE_INCOMPAT_CSUM_V3 |
		      JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT);
	incompat |= JBD2_FEATURE_INCOMPAT_REVOKE;
	if (ext2fs_has_feature_64bit(fs->super))
		incompat |= JBD2_FEATURE_INCOMPAT_64BIT;
	if (ext2fs_has_feature_metadata_csum(fs->super)) {
		incompat |= JBD2_FEATURE_INCOMPAT_CSUM_V3;
		j->log.jsb->s_checksum_type = JBD2_CRC32C_CHKSUM;
	}
	j->log.jsb->s_feature_compat &= htobe32(~(uint32_t)JBD2_FEATURE_COMPAT_CHECKSUM);
	j->log.jsb->s_feature_incompat = htobe32(incompat);
	j->log.csum3 = incompat & JBD2_FEATURE_INCOMPAT_CSUM_V3;
	j->log.csum2 = false;
	j->log.is64 = incompat & JBD2_FEATURE_INCOMPAT_64BIT;
	j->log.tag_bytes = jbd2_tag_bytes(j->log.jsb);
	j->log.seed = jbd2_csum_seed(j->log.jsb);
	j->seq = be32toh(j->log.jsb->s_sequence);
	j->head = j->log.first;
	j->empty = true;
	j->max_tx = (j->log.last - j->log.first) / 4;
	j->commit_ms = w->opts.commit_s ? w->opts.commit_s * 1000 : 5000;
	ret = jbd2_log_sb_write(&j->log);
	if (!ret)
		ret = jbd2_log_flush(&j->log);
	if (ret) {
		fprintf(msg_stream(), "wbcfs: %s: cannot write the journal superblock: %s\n", dev,
			strerror(-ret));
		goto fail;
	}
	if (ext2fs_allocate_block_bitmap(fs, "committing busy blocks", &j->busy_commit))
		goto nomem;
	/* no more held pages than blocks the log holds */
	j->cap_held = j->log.last - j->log.first;
	j->held = calloc(j->cap_held, sizeof(*j->held));
	if (!j->held)
		goto nomem;
	pthread_mutex_init(&j->commit_mutex, NULL);
	pthread_mutex_init(&j->tlock, NULL);
	pthread_mutex_init(&j->hlock, NULL);
	j->tail = j->log.first;
	j->tail_tid = j->safe_tid = j->seq;
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&j->tcond, &ca);
		pthread_condattr_destroy(&ca);
	}
	w->journal = j;
	return 0;
nomem:
	ret = -ENOMEM;
	fprintf(msg_stream(), "wbcfs: %s: journal: out of memory\n", dev);
fail:
	free(j->log.map);
	free(j->log.jsb);
	free(j->zero);
	free(j);
	return ret;
}

/* From now on metadata changes are journaled. Context: mount, fs_lock not held. */
int ext4_journal_start(struct wbfs *w)
{
	struct wjournal *j = w->journal;

	if (!j)
		return 0;
	ext4_lock(w);
	j->on = true;
	ext4_unlock(w);
	if (pthread_create(&j->thread, NULL, journal_thread, w))
		return -EAGAIN;
	j->thread_started = true;
	return 0;
}

static void stop_thread(struct wjournal *j)
{
	if (!j->thread_started)
		return;
	ls_mutex_lock(&j->tlock, &lc_journal_tlock);
	j->stop = true;
	pthread_cond_signal(&j->tcond);
	ls_mutex_unlock(&j->tlock);
	pthread_join(j->thread, NULL);
	j->thread_started = false;
}

/*
 * Unmount: commit what is left, checkpoint, mark the log empty, and stop
 * journaling (what libext2fs writes while closing goes home directly).
 * Returns 0 when the log is empty on disk: the caller may clear
 * needs_recovery. Context: no lock held; nothing else changes metadata.
 */
int ext4_journal_shutdown(struct wbfs *w)
{
	struct wjournal *j = w->journal;
	int ret;

	if (!j)
		return 0;
	stop_thread(j);
	ret = ext4_journal_commit(w, NULL);
	ls_mutex_lock(&j->commit_mutex, &lc_journal_commit);
	if (!ret && !j->err)
		ret = ext4_journal_checkpoint(w, j, UINT32_MAX);
	ext4_lock(w);
	/* what is left dirty goes home with the unmount's writeback */
	ext4_journal_release_held(w, j, 0, true);
	if (!ret)
		ret = j->err;
	if (!ret) {
		j->on = false;
	} else {
		/* leave every uncommitted change out: the log and the home
		 * blocks stay as the last commit left them */
		ext4_journal_abort(w, j, ret);
	}
	ext4_unlock(w);
	ls_mutex_unlock(&j->commit_mutex);
	return ret;
}

/* Drop what is left after shutdown (pinned pages of an aborted journal). */
void ext4_journal_free(struct wbfs *w)
{
	struct wjournal *j = w->journal;
	size_t i;

	if (!j)
		return;
	stop_thread(j);
	for (i = 0; i < j->nr_run; i++) {
		page_clear(j->run[i], PG_jdirty);
		page_put(j->run[i]);
	}
	free(j->run);
	jtab_free(&j->runset);
	jtab_free(&j->revoke);
	jtab_free(&j->logged);
	jtab_free(&j->ctab);
	jtab_free(&j->pinned);
	jtab_free(&j->homed);
	for (i = 0; i < j->nr_held; i++) {
		page_clear(j->held[i].p, PG_jheld);
		page_put(j->held[i].p);
	}
	free(j->held);
	free(j->txs);
	if (j->busy_commit)
		ext2fs_free_block_bitmap(j->busy_commit);
	ext4_bm_runs_free(&j->busy_commit_runs);
	free(j->log.map);
	free(j->log.jsb);
	free(j->zero);
	pthread_mutex_destroy(&j->commit_mutex);
	pthread_mutex_destroy(&j->tlock);
	pthread_mutex_destroy(&j->hlock);
	pthread_cond_destroy(&j->tcond);
	free(j);
	w->journal = NULL;
}

bool ext4_journal_on(const struct wbfs *w)
{
	return w->journal && !w->journal->err;
}

bool ext4_journal_aborted(const struct wbfs *w)
{
	return w->journal && w->journal->err;
}

/* /.wbcfs/journal */
int ext4_journal_show(struct wbfs *w, char *buf, size_t len)
{
	struct wjournal *j = w->journal;
	uint64_t n;

	if (!j)
		return snprintf(buf, len, "journal 0\n");
	n = (uint64_t)atomic_load(&j->commits);
	n = n ? n : 1;
	return snprintf(buf, len,
			"journal 1\ncommit_ms %u\nlog_blocks %u\nhead %u\nmax_transaction %u\n"
			"csum_v3 %d\n64bit %d\ncommits %ld\nblocks_logged %ld\nrevokes %ld\n"
			"checkpoints %ld\nunjournaled %ld\nfailed %ld\naborted %d\n"
			"unwritten_after_error %ld\njoined %ld\n"
			"commit_prepare_us %lu\ncommit_log_us %lu\ncommit_ordered_us %lu\n"
			"commit_seal_us %lu\ncommit_finish_us %lu\n"
			"tail %u\ntail_lazy %ld\ntail_forced %ld\ncheckpoint_blocks %ld\n"
			"homed %ld\nwraps %ld\nheld %ld\nheld_expired %ld\n",
			j->commit_ms, j->log.last - j->log.first, j->head, j->max_tx, j->log.csum3,
			j->log.is64,
			atomic_load(&j->commits), atomic_load(&j->blocks),
			atomic_load(&j->revokes), atomic_load(&j->checkpoints),
			atomic_load(&j->unjournaled), atomic_load(&j->failed), j->err,
			atomic_load(&w->nr_hidden), atomic_load(&j->joined),
			(unsigned long)(atomic_load(&j->ns_prepare) / 1000 / n),
			(unsigned long)(atomic_load(&j->ns_log) / 1000 / n),
			(unsigned long)(atomic_load(&j->ns_ordered) / 1000 / n),
			(unsigned long)(atomic_load(&j->ns_seal) / 1000 / n),
			(unsigned long)(atomic_load(&j->ns_finish) / 1000 / n),
			j->empty ? 0 : j->tail, atomic_load(&j->tail_lazy),
			atomic_load(&j->tail_forced), atomic_load(&j->ckpt_blocks),
			atomic_load(&j->homed_blocks), atomic_load(&j->wraps),
			atomic_load(&j->held_pages), atomic_load(&j->held_expired));
}
