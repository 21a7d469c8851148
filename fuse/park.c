// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Parked requests: an FSYNC, an FSYNCDIR or a synchronous WRITE waits for
 * the device without holding a server thread. Its handler hands it to the
 * mount's syncers and returns; the thread (a libfuse worker, or a ring
 * thread whose entry is set aside) goes on serving. A syncer takes every
 * request queued, up to PARK_GROUP, and makes them durable together
 * (ext4_sync_group: each file's data writes, one commit, one flush), then
 * answers each one with the ordinary fuse_reply_*; fuse_io.c routes such
 * a reply by its unique, into the request's ring entry or onto /dev/fuse.
 *
 * This is jbd2's group commit: requests that arrive while a commit runs
 * queue up, and the next syncer takes them all into the next commit. Two
 * syncers let one start the next group's data writes while the other
 * waits for its commit; both meet at the journal's commit mutex, where a
 * later commit finds an earlier one covered it.
 *
 * A sync request that meets no other (no sync running in any thread,
 * nothing queued) is the leader: it syncs in its own thread, as before,
 * and only those that come while a sync runs are parked. A hand-off
 * costs a wakeup on each side, which a lone synchronous writer (dd
 * oflag=dsync, one fsync at a time) would pay on every request with
 * nothing to share it with; dbench -F 8 ran at about 0.8x over /dev/fuse
 * and worse over io_uring with every request parked. So at most one
 * server thread at a time waits for a sync. park_all=1 parks every one
 * (A/B, tests that count parked requests).
 *
 * Before: every FSYNC waited in a server thread. With 128 dbench clients
 * about 9.5 of the 16 threads sat in fsync while the other requests
 * queued behind them.
 *
 * A request parked stays parked until it is answered: an INTERRUPT for it
 * is counted (nr_park_interrupts) and the reply still comes when the sync
 * is done, as ext4's fsync waits for its commit whatever signal comes. At
 * the connection's end (fuse_io_stop) the syncers answer everything they
 * were given before they stop, while the journal still runs; a daemon
 * killed with requests parked leaves their callers an error (ENOTCONN),
 * and what was committed before replays at the next mount.
 *
 * Locks: park_lock protects the queue and stop; never held across a sync
 * or a reply.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>

#include "fuse_i.h"

#define PARK_THREADS 2
#define PARK_GROUP 64

enum park_kind { PARK_FSYNC, PARK_FSYNCDIR, PARK_WRITE };

struct park_req {
	struct park_req *next;		/* park_lock: on the queue */
	fuse_req_t req;
	enum park_kind kind;
	struct wfile *f;		/* FSYNC, WRITE: held open by the kernel until
					 * the reply */
	size_t written;			/* WRITE: the reply's byte count */
	struct ext4_sync_req s;
};

struct fpark {
	struct wbfs *w;
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* lock: work queued, or stop */
	struct park_req *head;		/* lock: FIFO */
	struct park_req **tail;		/* lock */
	bool stop;			/* lock */
	unsigned active;		/* lock: syncs running (leaders, syncers) */
	unsigned nr_threads;
	pthread_t threads[PARK_THREADS];
};

LOCK_CLASS(lc_park_lock, "park_lock")

/* Answer @p, synced with result @ret, and free it. */
static void park_answer(struct park_req *p, int ret)
{
	if (p->kind != PARK_FSYNCDIR) {
		int err = ops_file_check_error(p->f);

		if (err)
			ret = err;
	}
	if (p->kind == PARK_WRITE && !ret)
		fuse_reply_write(p->req, p->written);
	else
		fuse_reply_err(p->req, -ret);
	free(p);
}

static void park_lead_done(struct fpark *k);

/*
 * Make the group @g (@n requests) durable and answer each; a leader's
 * (@lead) sync ends before its answer, so that the caller's next request
 * finds none running.
 */
static void park_sync_group(struct fpark *k, struct park_req **g, size_t n, bool lead)
{
	struct ext4_sync_req r[PARK_GROUP];
	size_t i;

	for (i = 0; i < n; i++)
		r[i] = g[i]->s;
	ext4_sync_group(k->w, r, n);
	if (lead)
		park_lead_done(k);
	atomic_fetch_add(&k->w->stats.nr_park_groups, 1);
	if (n > 1)
		atomic_fetch_add(&k->w->stats.nr_park_grouped, (long)n);
	for (i = 0; i < n; i++)
		park_answer(g[i], r[i].ret);
}

static void *park_main(void *arg)
{
	struct fpark *k = arg;
	struct park_req *g[PARK_GROUP];

	ls_mutex_lock(&k->lock, &lc_park_lock);
	for (;;) {
		size_t n = 0;

		while (!k->head && !k->stop)
			lockstat_cond_wait(&k->cond, &k->lock);
		if (!k->head)
			break;		/* stopping, and nothing left */
		while (k->head && n < PARK_GROUP) {
			g[n++] = k->head;
			k->head = k->head->next;
		}
		if (!k->head)
			k->tail = &k->head;
		k->active++;
		ls_mutex_unlock(&k->lock);
		park_sync_group(k, g, n, false);
		ls_mutex_lock(&k->lock, &lc_park_lock);
		k->active--;
	}
	ls_mutex_unlock(&k->lock);
	return NULL;
}

struct fpark *park_start(struct wbfs *w)
{
	struct fpark *k = calloc(1, sizeof(*k));
	unsigned i;

	if (!k)
		return NULL;
	k->w = w;
	k->tail = &k->head;
	pthread_mutex_init(&k->lock, NULL);
	pthread_cond_init(&k->cond, NULL);
	for (i = 0; i < PARK_THREADS; i++) {
		if (pthread_create(&k->threads[i], NULL, park_main, k))
			break;
		k->nr_threads++;
	}
	if (!k->nr_threads) {
		pthread_cond_destroy(&k->cond);
		pthread_mutex_destroy(&k->lock);
		free(k);
		return NULL;
	}
	return k;
}

void park_stop(struct fpark *k)
{
	unsigned i;

	if (!k)
		return;
	ls_mutex_lock(&k->lock, &lc_park_lock);
	k->stop = true;
	pthread_cond_broadcast(&k->cond);
	ls_mutex_unlock(&k->lock);
	for (i = 0; i < k->nr_threads; i++)
		pthread_join(k->threads[i], NULL);
	pthread_cond_destroy(&k->cond);
	pthread_mutex_destroy(&k->lock);
	free(k);
}

/*
 * Does @p's request lead (meets no other sync: run it in this thread)?
 * Then it counts as a sync running until park_lead_done.
 */
static bool park_lead(struct wbfs *w, struct fpark *k)
{
	bool lead;

	if (w->opts.park_all)
		return false;
	ls_mutex_lock(&k->lock, &lc_park_lock);
	lead = !k->active && !k->head && !k->stop;
	if (lead)
		k->active++;
	ls_mutex_unlock(&k->lock);
	return lead;
}

static void park_lead_done(struct fpark *k)
{
	ls_mutex_lock(&k->lock, &lc_park_lock);
	k->active--;
	ls_mutex_unlock(&k->lock);
}

/*
 * Park the request of @p and queue it. A connection that stops meanwhile
 * has no syncer left to take it: it is synced here, and its reply, parked
 * already, finds its way as any parked reply does.
 */
static bool park_queue(struct wbfs *w, struct park_req *p)
{
	struct fpark *k = fuse_io_parker(w);
	bool queued = false;

	if (!k) {
		free(p);
		return false;
	}
	if (park_lead(w, k)) {
		struct park_req *g[1] = { p };

		atomic_fetch_add(&w->stats.nr_sync_leaders, 1);
		park_sync_group(k, g, 1, true);	/* answered from here */
		return true;
	}
	if (!fuse_io_park(w)) {
		free(p);
		return false;
	}
	ls_mutex_lock(&k->lock, &lc_park_lock);
	if (!k->stop) {
		p->next = NULL;
		*k->tail = p;
		k->tail = &p->next;
		pthread_cond_signal(&k->cond);
		queued = true;
	}
	ls_mutex_unlock(&k->lock);
	if (!queued) {
		struct park_req *g[1] = { p };

		park_sync_group(k, g, 1, false);
	}
	return true;
}

static struct park_req *park_new(fuse_req_t req, enum park_kind kind, struct wfile *f)
{
	struct park_req *p = calloc(1, sizeof(*p));

	if (p) {
		p->req = req;
		p->kind = kind;
		p->f = f;
	}
	return p;
}

bool park_fsync(struct wbfs *w, fuse_req_t req, struct wfile *f, bool datasync)
{
	struct park_req *p = park_new(req, PARK_FSYNC, f);

	if (!p)
		return false;
	p->s = (struct ext4_sync_req){ .wi = f->wi, .first = 0, .last = UINT64_MAX,
				       .datasync = datasync };
	return park_queue(w, p);
}

bool park_fsyncdir(struct wbfs *w, fuse_req_t req)
{
	struct park_req *p = park_new(req, PARK_FSYNCDIR, NULL);

	return p ? park_queue(w, p) : false;
}

bool park_sync_write(struct wbfs *w, fuse_req_t req, struct wfile *f, uint64_t first,
		     uint64_t last, bool datasync, size_t written)
{
	struct park_req *p = park_new(req, PARK_WRITE, f);

	if (!p)
		return false;
	p->written = written;
	p->s = (struct ext4_sync_req){ .wi = f->wi, .first = first, .last = last,
				       .datasync = datasync };
	return park_queue(w, p);
}
