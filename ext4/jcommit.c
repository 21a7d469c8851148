// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The journal's commit: the running transaction taken under fs_lock
 * (libext2fs's metadata into the cache, its pages copied into log
 * blocks), then without the lock its log blocks, the ordered-data wait,
 * the journal superblock, flushes and the commit block, and at the end
 * what the outcome means for its pages and busy blocks. Who waits for
 * which transaction (fsync, syncfs, the commit thread) is here too. The
 * running transaction and mount are in journal.c, the checkpoint in
 * jcheckpoint.c, the log's jbd2 format in jbd2/log.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext4_i.h"
#include "wbcfs/lib/clock.h"

#define COMMIT_RETRIES 8		/* builds of one commit while data writes
					 * it waits for keep failing on new blocks */

/* Add the time since *@t0 to @sum; *@t0 becomes now. */
static void phase_add(_Atomic uint64_t *sum, uint64_t *t0)
{
	uint64_t now = clock_real_ns();

	atomic_fetch_add_explicit(sum, now - *t0, memory_order_relaxed);
	*t0 = now;
}

static void jlog(struct wbfs *w, const char *fmt, const char *what, int err)
{
	fprintf(msg_stream(), "wbcfs: %s: journal: ", w->dev_path);
	fprintf(msg_stream(), fmt, what, strerror(err));
	fputc('\n', msg_stream());
}

/* ---- commit ----------------------------------------------------------- */

struct jtx {
	uint32_t tid;
	uint32_t start;			/* first log block */
	uint32_t nblk;			/* log blocks in all */
	char **bufs;			/* nblk buffers, the last the commit block */
	char *mem;
	struct page **pages;		/* PG_jcommit, referenced */
	size_t nr_pages;
	uint64_t *rev;			/* blocks it revokes */
	size_t nrev;
	bool home;			/* larger than the log: mem holds the
					 * pages' copies, written home */
	int ord;			/* the ordered-data epoch it closed */
	uint32_t tail_cand;		/* the oldest transaction pinned when it
					 * was built: its flush makes that start
					 * safe for the superblock */
	bool tail_write;		/* its seal wrote j->safe_tid as the start */
};

static void tx_free(struct jtx *t)
{
	free(t->bufs);
	free(t->mem);
	free(t->pages);
	free(t->rev);
}

/*
 * The running transaction's pages that still hold metadata move to @t
 * (PG_jcommit, referenced; t->pages has room for all). Context: fs_lock.
 */
static void tx_take_pages(struct wbfs *w, struct wjournal *j, struct jtx *t)
{
	size_t i;

	for (i = 0; i < j->nr_run; i++) {
		struct page *p = j->run[i];

		if (p->mapping == &w->meta_map && page_test(p, PG_uptodate) &&
		    page_test_clear(p, PG_jdirty)) {
			page_set(p, PG_jcommit);
			t->pages[t->nr_pages++] = p;
		} else {
			page_put(p);
		}
	}
	j->nr_run = 0;
	jtab_clear(&j->runset);
}

/*
 * Take the running transaction: copy its pages into log blocks (laid out
 * from j->head), collect its revokes, record where each block's copy
 * lies. Context: commit_mutex and fs_lock.
 */
static int tx_build(struct wbfs *w, struct wjournal *j, struct jtx *t)
{
	uint32_t per = jbd2_log_tags_per_desc(&j->log), rper = jbd2_log_revokes_per_block(&j->log);
	size_t n = j->nr_run, nrev = j->revoke.n, i, d = 0, k = 0, maxblk;
	uint64_t *rev;
	bool csum = jbd2_log_csum(&j->log);
	int ret = -ENOMEM;

	maxblk = jbd2_log_tx_blocks(&j->log, n, nrev);
	t->mem = ext4_journal_alloc(maxblk * (size_t)JBS);
	t->bufs = calloc(maxblk, sizeof(*t->bufs));
	t->pages = calloc(n ? n : 1, sizeof(*t->pages));
	rev = t->rev = malloc((nrev ? nrev : 1) * sizeof(*rev));
	if (!t->mem || !t->bufs || !t->pages || !rev)
		goto out;
	memset(t->mem, 0, maxblk * (size_t)JBS);
	t->tid = j->seq;
	t->start = j->head;

	tx_take_pages(w, j, t);

	/* descriptor blocks, each followed by its data blocks */
	for (i = 0; i < t->nr_pages;) {
		char *desc = t->mem + (size_t)(k++) * JBS, *tp = desc + sizeof(struct jbd2_header);
		uint32_t m = 0;

		t->bufs[k - 1] = desc;
		jbd2_log_set_header(desc, JBD2_DESCRIPTOR_BLOCK, t->tid);
		for (; i < t->nr_pages && m < per; i++, m++) {
			struct page *p = t->pages[i];
			char *blk = t->mem + (size_t)(k++) * JBS;
			uint32_t flags = 0, magic, bcsum = 0;
			uint32_t pos = ext4_journal_wrap(j, t->start + (uint32_t)(k - 1));

			t->bufs[k - 1] = blk;
			memcpy(blk, page_address(p), JBS);
			memcpy(&magic, blk, sizeof(magic));
			if (magic == htobe32(JBD2_MAGIC)) {
				memset(blk, 0, sizeof(magic));
				flags |= JBD2_FLAG_ESCAPE;
			}
			if (m)
				flags |= JBD2_FLAG_SAME_UUID;
			if (m + 1 == per || i + 1 == t->nr_pages)
				flags |= JBD2_FLAG_LAST_TAG;
			if (csum)
				bcsum = jbd2_block_csum(j->log.seed, t->tid, blk, JBS);
			tp += jbd2_log_put_tag(&j->log, tp, p->index, flags, bcsum, m == 0);
			if (jtab_put(&j->ctab, p->index,
				     pos | ((flags & JBD2_FLAG_ESCAPE) ? ESC_BIT : 0)))
				goto out;
			d++;
		}
		if (csum)
			jbd2_log_set_tail(&j->log, desc);
	}

	/* revoke blocks */
	if (nrev) {
		size_t r = 0;

		for (i = 0; i < j->revoke.cap; i++)
			if (j->revoke.key[i] != JTAB_EMPTY)
				rev[r++] = j->revoke.key[i];
		jtab_clear(&j->revoke);
		t->nrev = nrev;
		for (i = 0; i < nrev;) {
			char *blk = t->mem + (size_t)(k++) * JBS;
			struct jbd2_revoke_header *rh = (void *)blk;
			size_t off = sizeof(*rh), m;

			t->bufs[k - 1] = blk;
			jbd2_log_set_header(blk, JBD2_REVOKE_BLOCK, t->tid);
			for (m = 0; i < nrev && m < rper; m++, i++) {
				jbd2_log_put_be(blk + off, rev[i], j->log.is64);
				off += j->log.is64 ? 8 : 4;
			}
			rh->r_count = htobe32((uint32_t)off);
			if (csum)
				jbd2_log_set_tail(&j->log, blk);
		}
	}

	/* the commit block, filled in at write time (its time stamp) */
	t->bufs[k] = t->mem + (size_t)k * JBS;
	k++;
	t->nblk = (uint32_t)k;
	atomic_fetch_add(&j->blocks, (long)d);
	ret = 0;
out:
	return ret;
}

/* The transaction is on the device: its copies are the log's now. Context: fs_lock. */
static void tx_done(struct wbfs *w, struct wjournal *j, struct jtx *t)
{
	size_t i;

	for (i = 0; i < j->ctab.cap; i++)
		if (j->ctab.key[i] != JTAB_EMPTY) {
			jtab_put(&j->logged, j->ctab.key[i], j->ctab.val[i]);
			/* without room it would not pin: a replay could then
			 * miss it; the journal stops instead */
			if (jtab_put(&j->pinned, j->ctab.key[i], t->tid))
				ext4_journal_abort(w, j, -ENOMEM);
		}
	jtab_clear(&j->ctab);
	/* its revokes have committed: replay skips those copies, so must a
	 * checkpoint (the blocks may belong to file data by now) */
	for (i = 0; i < t->nrev; i++) {
		jtab_del(&j->logged, t->rev[i]);
		jtab_del(&j->pinned, t->rev[i]);
	}
	for (i = 0; i < t->nr_pages; i++)
		ext4_journal_hold(w, j, t->pages[i]);
	t->nr_pages = 0;
	ext4_journal_release_busy_commit(w, j);
}

/*
 * The transaction could not be written: it goes back into the running
 * one (pages, revokes, busy blocks), to be committed by the next try; its
 * log blocks, without a commit block, are never replayed. Context: fs_lock.
 */
/*
 * Page @p of a transaction that was not written goes back into the
 * running one, unless it is there already (PG_jdirty: changed again) or
 * no longer metadata. True when its reference moved to the running list.
 * Context: fs_lock.
 */
static bool run_take_back(struct wbfs *w, struct wjournal *j, struct page *p)
{
	if (p->mapping != &w->meta_map || page_test(p, PG_jdirty) || ext4_journal_add_run(j, p))
		return false;
	page_set(p, PG_jdirty);
	jtab_put(&j->runset, p->index, 1);
	return true;
}

static void tx_undo(struct wbfs *w, struct wjournal *j, struct jtx *t)
{
	size_t i;

	for (i = 0; i < t->nr_pages; i++) {
		struct page *p = t->pages[i];

		page_clear(p, PG_jcommit);
		if (jtab_find(&j->ctab, p->index) && run_take_back(w, j, p))
			continue;
		page_put(p);
	}
	t->nr_pages = 0;
	for (i = 0; i < t->nrev; i++)
		if (!jtab_find(&j->runset, t->rev[i]))
			jtab_put(&j->revoke, t->rev[i], 1);
	jtab_clear(&j->ctab);
	/* what it freed stays busy */
	ext4_journal_drain_busy_commit(w, j, ext4_journal_mark_busy);
}

/* A failed journal write: nothing more is committed, nothing uncommitted reaches home. */
int ext4_journal_abort(struct wbfs *w, struct wjournal *j, int err)
{
	if (!j->err) {
		__atomic_store_n(&j->err, err ? err : -EIO, __ATOMIC_RELAXED);
		jlog(w, "%s: %s; no more changes are committed (run e2fsck after unmount)",
		     "aborted", -j->err);
	}
	return j->err;
}

/*
 * Put libext2fs's in-memory metadata into the cache, as a commit needs
 * it: the primary superblock and descriptors only (the kernel leaves the
 * backups to resize and e2fsck). The superblock's write time stays what
 * it is: the kernel's ext4 sets it only where it writes the superblock
 * itself (mount, unmount, freeze), never in a commit, while libext2fs
 * stamps the time at every flush (unless fs->now is set): the superblock
 * would change at every commit, and an idle mount would commit it every
 * commit interval, for ever. Context: fs_lock.
 */
static errcode_t flush_fs_locked(struct wbfs *w)
{
	int saved = w->fs->flags & EXT2_FLAG_MASTER_SB_ONLY;
	struct ext2_super_block *sb = w->fs->super;
	time_t now = w->fs->now;
	errcode_t err;

	lock_assert_held(&w->fs_lock);

	/* 0 (never written): libext2fs's own time, once */
	w->fs->now = (time_t)((uint64_t)sb->s_wtime | (uint64_t)sb->s_wtime_hi << 32);
	w->fs->flags |= EXT2_FLAG_MASTER_SB_ONLY;
	err = ext4_flush_locked(w);
	w->fs->flags = (w->fs->flags & ~EXT2_FLAG_MASTER_SB_ONLY) | saved;
	w->fs->now = now;
	return err;
}

/*
 * A transaction larger than the whole log (a checkpoint has just emptied
 * it): its pages are copied, to be written home directly, not atomically
 * (said once). Nothing is left in the log to revoke. Context:
 * commit_mutex, fs_lock.
 */
static int tx_build_home(struct wbfs *w, struct wjournal *j, struct jtx *t)
{
	static bool said;
	size_t n = j->nr_run, i;

	if (!said) {
		said = true;
		fprintf(msg_stream(), "wbcfs: %s: journal: a transaction of %zu blocks exceeds the"
			" log (%u blocks); written without the journal\n", w->dev_path,
			n, j->log.last - j->log.first);
	}
	t->home = true;
	t->pages = calloc(n ? n : 1, sizeof(*t->pages));
	t->mem = ext4_journal_alloc(n * (size_t)JBS);
	if (!t->pages || !t->mem)
		return -ENOMEM;
	tx_take_pages(w, j, t);
	for (i = 0; i < t->nr_pages; i++)
		memcpy(t->mem + i * JBS, page_address(t->pages[i]), JBS);
	jtab_clear(&j->revoke);
	atomic_fetch_add(&j->unjournaled, (long)t->nr_pages);
	return 0;
}

/*
 * The running transaction becomes @t, for commit_write. Returns 0 (@t
 * built), 1 (nothing to commit), 2 (the log needs *@room blocks free
 * first) or -errno. Context: commit_mutex, fs_lock.
 */
static int commit_prepare_locked(struct wbfs *w, struct wjournal *j, struct jtx *t,
				 uint32_t *room)
{
	uint32_t need, len = j->log.last - j->log.first;
	int ret;

	lock_assert_held(&j->commit_mutex);
	lock_assert_held(&w->fs_lock);

	if (!w->fs || !j->on)
		return 1;
	/*
	 * New blocks whose data write failed: unwritten before they commit.
	 * Where that fails (no room to split an extent on a full disk) the
	 * commit goes on, as the kernel's ext4 commits them: refusing would
	 * also keep deletes, which make room, from committing.
	 */
	ret = ext4_hide_pending(w) ? ext4_hide_failed_locked(w) : 0;
	if (ret)
		jlog(w, "%s: %s; a crash before their writes succeed may show their old contents",
		     "cannot make the blocks of failed writes unwritten", -ret);
	if (flush_fs_locked(w))
		return ext4_journal_abort(w, j, -EIO);
	if (!j->nr_run && !j->revoke.n) {
		/* nothing changed: what was freed is freed on disk already,
		 * the running transaction's frees too (a free changes a
		 * bitmap, which joins it) */
		ext4_journal_release_busy_commit(w, j);
		if (w->nr_busy)
			ext4_bitmap_drain(w, w->busy, &w->busy_runs, ext4_busy_unmark);
		w->nr_busy = 0;
		return 1;
	}
	need = jbd2_log_tx_blocks(&j->log, j->nr_run, j->revoke.n);
	/* the caller makes room, without fs_lock, and comes back; one
	 * larger than the whole log waits for it to be empty */
	if (need >= len ? !j->empty : ext4_journal_room(j) < need) {
		*room = need >= len ? UINT32_MAX : need;
		return 2;
	}
	ext4_journal_fold_homed(j);
	ret = need >= len ? tx_build_home(w, j, t) : tx_build(w, j, t);
	t->tail_cand = ext4_journal_oldest_pinned(j, t->tid);
	if (ret)
		return ext4_journal_abort(w, j, ret);
	if (!t->home)
		__atomic_store_n(&j->seq, j->seq + 1, __ATOMIC_RELEASE);
	ext4_journal_busy_to_commit(w, j);
	/* data writes mapped from here on belong to the next transaction:
	 * this one's commit does not wait for them */
	t->ord = bdi_ordered_mark(w->bdi);
	return 0;
}

/* @t's pages home (tx_build_home), then a flush. */
static int tx_write_home(struct wjournal *j, struct jtx *t)
{
	struct ckpt_io *c = ext4_journal_ckpt_io_new(j->w);
	size_t i;
	int ret = c ? 0 : -ENOMEM;

	for (i = 0; i < t->nr_pages && !ret; i++)
		ret = ext4_journal_ckpt_add(j, c, t->pages[i]->index, t->mem + i * JBS);
	if (!ret)
		ret = ext4_journal_ckpt_flush_batch(j, c);
	ext4_journal_ckpt_io_free(c);
	return ret ? ret : jbd2_log_flush(&j->log);
}

/*
 * The ordered-data wait of @t: the caller's own data writes (@io, which
 * only it completes) first, then everyone's.
 */
static void ordered_wait(struct wbfs *w, struct jtx *t, struct bdi_sync_io *io)
{
	while (io && bdi_sync_io_step(io))
		;
	bdi_ordered_wait(w->bdi, t->ord);
}

/*
 * A commit block that failed to write or to flush may be on the device
 * all the same. Its retry takes the same id and starts at the same log
 * block, maybe with other contents: a crash while it is being written
 * would let replay pair the old commit block with the new blocks (same
 * id, same place), whose checksums then fail. So the old one is zeroed,
 * durably, before the log is written again. Context: commit_mutex.
 */
static int commit_stale_clear(struct wjournal *j)
{
	char *b = j->zero;
	int ret;

	if (!j->stale_jb)
		return 0;
	ret = jbd2_log_write(&j->log, j->stale_jb, &b, 1);
	if (!ret)
		ret = jbd2_log_flush(&j->log);
	if (!ret)
		j->stale_jb = 0;
	return ret;
}

/*
 * After @t's log blocks and its data: the journal superblock when the log
 * starts with @t (or may read "empty"), a flush, and the commit block.
 * Context: commit_mutex.
 */
static int commit_seal(struct wjournal *j, struct jtx *t)
{
	uint32_t cb = ext4_journal_wrap(j, t->start + t->nblk - 1);
	uint32_t len = j->log.last - j->log.first;
	int ret = 0;

	/*
	 * A lazy tail advance rides on this flush: the home writes of the
	 * start it writes were made durable by an earlier commit's flush,
	 * and this transaction's blocks lie after the old start's room.
	 * Only when the log is a quarter full: an extra write per commit
	 * otherwise.
	 */
	t->tail_write = !j->empty && j->safe_tid != j->tail_tid &&
			len - 1 - ext4_journal_room(j) + t->nblk > len / 4;
	if (t->tail_write) {
		j->log.jsb->s_start = htobe32(ext4_journal_tx_start(j, j->safe_tid));
		j->log.jsb->s_sequence = htobe32(j->safe_tid);
	}
	if (j->empty || j->jsb_unsure || t->tail_write) {
		/* the log starts here (or where it started: a superblock
		 * write that failed may have left "empty"): replay must find it */
		if (j->empty) {
			j->log.jsb->s_start = htobe32(t->start);
			j->log.jsb->s_sequence = htobe32(t->tid);
		}
		ret = jbd2_log_sb_write(&j->log);
	}
	if (!ret)
		ret = jbd2_log_flush(&j->log);
	if (ret)
		return ret;
	jbd2_log_commit_fill(&j->log, t->bufs[t->nblk - 1], t->tid);
	ret = jbd2_log_write_commit(&j->log, cb, t->bufs[t->nblk - 1]);
	if (ret)
		j->stale_jb = cb;
	else
		j->jsb_unsure = false;
	return ret;
}

/*
 * Write @t after the data its metadata points at (ordered mode): log
 * blocks, a flush, the commit block, a flush (or the commit block with FUA
 * where the device offers it: one round trip less per commit). The log
 * blocks go out while @t's data writes may still be in flight: only the
 * commit block must follow them (with the flush between), so the wait for
 * them overlaps the log writes. Home writes do wait first: they make the
 * metadata live. @io: the committing fsync's data writes, in flight.
 * Context: commit_mutex only.
 */
static int commit_write(struct wbfs *w, struct wjournal *j, struct jtx *t,
			struct bdi_sync_io *io)
{
	uint64_t t0 = clock_real_ns();
	int ret;

	/* before the log or home is written: either would outdate it */
	ret = commit_stale_clear(j);
	if (t->home) {
		ordered_wait(w, t, io);
		/* as below: its copies may map a failed write's block as
		 * written; and pages left to writeback would go home under
		 * the stale commit: back into the running transaction */
		if (ret || ext4_hide_pending(w))
			return -EAGAIN;
		return tx_write_home(j, t);
	}
	if (!ret) {
		/* the ring wraps at its end: in two parts then */
		uint32_t n1 = j->log.last - t->start;

		n1 = n1 < t->nblk - 1 ? n1 : t->nblk - 1;
		ret = jbd2_log_write(&j->log, t->start, t->bufs, n1);
		if (!ret && n1 < t->nblk - 1)
			ret = jbd2_log_write(&j->log, j->log.first, t->bufs + n1,
					     t->nblk - 1 - n1);
	}
	phase_add(&j->ns_log, &t0);
	/* always: a failed @t is retried inside the next transaction, whose
	 * commit waits on the next epoch only */
	ordered_wait(w, t, io);
	phase_add(&j->ns_ordered, &t0);
	/* a data write it waited for failed on a new block, which @t may map
	 * as written: build it again with that block unwritten */
	if (!ret && ext4_hide_pending(w))
		ret = -EAGAIN;
	if (!ret)
		ret = commit_seal(j, t);
	phase_add(&j->ns_seal, &t0);
	return ret;
}

/*
 * After commit_write returned @ret: the log's state, @t's pages and busy
 * blocks. A log write that failed leaves @t to be retried in the running
 * transaction; pages that failed to go home stay dirty for writeback.
 * Context: commit_mutex, fs_lock.
 */
static void commit_finish_locked(struct wbfs *w, struct wjournal *j, struct jtx *t, int ret)
{
	size_t i;

	lock_assert_held(&j->commit_mutex);
	lock_assert_held(&w->fs_lock);

	if (ret && ret != -EAGAIN) {
		atomic_fetch_add(&j->failed, 1);
		jlog(w, t->home ? "%s: %s; its pages are left to writeback" :
			"%s: %s; the transaction stays in memory and is retried",
		     "commit failed", -ret);
	}
	if (t->home) {
		for (i = 0; i < t->nr_pages; i++) {
			struct page *p = t->pages[i];

			page_clear(p, PG_jcommit);
			/* built again: its pages go back into the running transaction */
			if (ret == -EAGAIN && run_take_back(w, j, p))
				continue;
			if (!ret)
				ext4_journal_page_home(p);
			page_put(p);
		}
		t->nr_pages = 0;
		if (!ret)
			ext4_journal_release_busy_commit(w, j);
		else
			ext4_journal_drain_busy_commit(w, j, ext4_journal_mark_busy);
		return;
	}
	if (ret) {
		if (t->tail_write) {
			/* the superblock may or may not say the new start */
			j->log.jsb->s_start = htobe32(j->tail);
			j->log.jsb->s_sequence = htobe32(j->tail_tid);
			j->jsb_unsure = true;
		}
		tx_undo(w, j, t);
		/* the retry is this transaction again, and takes its id: a
		 * replay stops at the first gap in the ids, so a skipped one
		 * would leave every later commit out of it */
		__atomic_store_n(&j->seq, t->tid, __ATOMIC_RELEASE);
		return;
	}
	if (j->nr_txs == j->cap_txs) {
		size_t cap = j->cap_txs ? j->cap_txs * 2 : 64;
		struct jtx_rec *n = realloc(j->txs, cap * sizeof(*n));

		if (!n) {
			/* committed all the same; no later start can be found */
			ext4_journal_abort(w, j, -ENOMEM);
		} else {
			j->txs = n;
			j->cap_txs = cap;
		}
	}
	if (j->nr_txs < j->cap_txs)
		j->txs[j->nr_txs++] = (struct jtx_rec){ t->tid, t->start, t->nblk };
	if (j->empty) {
		j->tail = t->start;
		j->tail_tid = j->safe_tid = t->tid;
	}
	j->head = ext4_journal_wrap(j, t->start + t->nblk);
	if (j->head <= t->start)
		atomic_fetch_add(&j->wraps, 1);
	j->empty = false;
	if (t->tail_write) {
		ext4_journal_tail_set(w, j, false, j->safe_tid);
		atomic_fetch_add(&j->tail_lazy, 1);
	}
	/* this commit's flush made the home writes noted before it durable */
	if (jbd2_tid_gt(t->tail_cand, j->safe_tid))
		j->safe_tid = t->tail_cand;
	__atomic_store_n(&j->committed, t->tid, __ATOMIC_RELEASE);
	__atomic_store_n(&j->have_committed, true, __ATOMIC_RELEASE);
	atomic_fetch_add(&j->commits, 1);
	/* the pages may go home now, with periodic writeback (a wakeup here
	 * would put their writes in front of the next fsync's) */
	tx_done(w, j, t);
}

uint32_t ext4_journal_tid(struct wbfs *w)
{
	return w->journal ? __atomic_load_n(&w->journal->seq, __ATOMIC_ACQUIRE) : 0;
}

/* What a commit for @tid (@upto) or for the running transaction @cur must reach. */
static uint32_t commit_target(bool upto, uint32_t tid, uint32_t cur)
{
	return upto && !jbd2_tid_gt(tid, cur) ? tid : cur;
}

/*
 * Is @target on the device, @done being the last transaction committed?
 * Then *@flushed: that commit's flush followed the caller's data writes
 * only if @cur, running when the call began, has committed too.
 */
static bool tid_covered(uint32_t target, uint32_t cur, uint32_t done, bool *flushed)
{
	if (jbd2_tid_gt(target, done))
		return false;
	if (flushed)
		*flushed = !jbd2_tid_gt(cur, done);
	return true;
}

/*
 * Without commit_mutex: is transaction @tid on the device already (and the
 * journal not aborted)? Then *@flushed as journal_commit sets it. An fsync
 * of a file whose changes have all committed needs only a device flush,
 * and must not wait for a commit of other files' changes to find that
 * out (ext4's fsync does not wait for an unrelated commit either). A stale
 * reading only sends the caller the locked way.
 */
static bool committed_already(struct wjournal *j, uint32_t tid, bool *flushed)
{
	uint32_t cur;

	if (!__atomic_load_n(&j->have_committed, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&j->err, __ATOMIC_RELAXED))
		return false;
	cur = __atomic_load_n(&j->seq, __ATOMIC_ACQUIRE);
	return tid_covered(commit_target(true, tid, cur), cur,
			   __atomic_load_n(&j->committed, __ATOMIC_ACQUIRE), flushed);
}

/*
 * Commit the running transaction: build it, write it, settle the log.
 * One that a data write it waited for undid (-EAGAIN: the write failed
 * on a new block) is built again, with that block unwritten, once the
 * writes in flight (a retry of one of them may be) are done; at most
 * COMMIT_RETRIES times. Returns 0, 1 (nothing to commit) or -errno.
 * Context: commit_mutex only.
 */
static int commit_running(struct wbfs *w, struct wjournal *j, struct bdi_sync_io *io)
{
	unsigned tries;
	int ret;

	for (tries = 0;; tries++) {
		struct jtx t = { 0 };
		uint64_t t0 = clock_real_ns();
		uint32_t room = 0;
		unsigned k;

		for (k = 0;; k++) {
			ext4_lock(w);
			ret = commit_prepare_locked(w, j, &t, &room);
			ext4_unlock(w);
			if (ret != 2)
				break;
			/* the running transaction grew meanwhile: after a few
			 * rounds, empty the log */
			ret = ext4_journal_checkpoint(w, j, k < 3 ? room : UINT32_MAX);
			if (ret) {
				atomic_fetch_add(&j->failed, 1);
				jlog(w, "%s: %s; retried at the next commit", "checkpoint failed",
				     -ret);
				break;
			}
		}
		if (ret) {
			tx_free(&t);
			return ret;
		}
		phase_add(&j->ns_prepare, &t0);
		ret = commit_write(w, j, &t, io);
		t0 = clock_real_ns();
		ext4_lock(w);
		commit_finish_locked(w, j, &t, ret);
		ext4_unlock(w);
		tx_free(&t);
		phase_add(&j->ns_finish, &t0);
		if (ret != -EAGAIN)
			return ret;
		if (tries == COMMIT_RETRIES)
			return -EIO;
		bdi_ordered_wait(w->bdi, bdi_ordered_mark(w->bdi));
	}
}

/*
 * Commit transactions up to @tid (or the running one, @upto false) and
 * wait until they are on the device. *@flushed: the device cache was
 * flushed after every data write that completed before the call: true
 * when the commit that covers @tid was prepared after the call began.
 * @io: the caller's data writes still in flight (bdi_sync_inode_start),
 * or NULL; a commit prepared after the call began waits for them too.
 * Returns 0 or -errno. Context: no lock held.
 */
static int journal_commit(struct wbfs *w, bool upto, uint32_t tid, bool *flushed,
			  struct bdi_sync_io *io)
{
	struct wjournal *j = w->journal;
	uint32_t target, cur;
	int ret;

	if (flushed)
		*flushed = false;
	if (!j)
		return 0;
	if (upto && committed_already(j, tid, flushed))
		return 0;
	/* every change made before this call is in this transaction or an older one */
	ext4_lock(w);
	cur = j->seq;
	ext4_unlock(w);
	target = commit_target(upto, tid, cur);
	/* its holder may be in an ordered wait for @io's writes */
	if (io)
		ls_mutex_lock_stepping(&j->commit_mutex, &lc_journal_commit, bdi_sync_io_step, io);
	else
		ls_mutex_lock(&j->commit_mutex, &lc_journal_commit);
	if (j->err) {
		ret = j->err;
		goto out;
	}
	/* committed already, or group commit: another caller committed it
	 * while we waited */
	if (j->have_committed && tid_covered(target, cur, j->committed, flushed)) {
		atomic_fetch_add(&j->joined, 1);
		ret = 0;
		goto out;
	}
	ret = commit_running(w, j, io);
	if (ret > 0)
		ret = 0;	/* nothing to commit */
	else if (!ret && flushed)
		*flushed = true;
out:
	ls_mutex_unlock(&j->commit_mutex);
	return ret;
}

int ext4_journal_commit(struct wbfs *w, bool *flushed)
{
	return journal_commit(w, false, 0, flushed, NULL);
}

int ext4_journal_commit_io(struct wbfs *w, bool *flushed, struct bdi_sync_io *io)
{
	return journal_commit(w, false, 0, flushed, io);
}

int ext4_journal_commit_tid(struct wbfs *w, uint32_t tid, bool *flushed,
			    struct bdi_sync_io *io)
{
	return journal_commit(w, true, tid, flushed, io);
}
