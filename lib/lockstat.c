// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Lock statistics: the class registry, the slow paths of the wrappers in
 * include/wbcfs/lockstat.h and the snapshot /.wbcfs/lockstat prints. Which
 * locks are wrapped, and the classes' names, are their owners' business;
 * the control file is daemon/ctl.c's.
 *
 * Hold time needs the moment a lock was taken. Rather than widen every lock
 * with a field for it, each thread keeps a short stack of the wrapped locks
 * it holds (address, class, acquire time). An entry whose epoch predates the
 * last enable or reset belongs to a hold that began before it, or was left
 * behind by an unlock while off: it is ignored and replaced.
 *
 * Lock ordering: registry_lock is a leaf, taken only at registration and
 * collection; the counters are atomics.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wbcfs/lib/clock.h"
#include "wbcfs/lib/lockstat.h"

#define LOCKSTAT_HELD_MAX 16	/* deeper than any nesting in wbcfs */

atomic_bool lockstat_on;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lock_class *registry;		/* registry_lock */
static _Atomic unsigned lockstat_epoch = 1;	/* atomic: bumped at enable and reset */
static uint64_t (*_Atomic lockstat_clock)(void);

struct held_lock {
	const void *lock;
	struct lock_class *class;
	uint64_t t0_ns;
	unsigned epoch;
};

static __thread struct held_lock held[LOCKSTAT_HELD_MAX];
static __thread unsigned nr_held;

static uint64_t lockstat_now_ns(void)
{
	uint64_t (*fn)(void) = atomic_load_explicit(&lockstat_clock, memory_order_relaxed);

	return fn ? fn() : clock_real_ns();
}

void lockstat_set_clock(uint64_t (*fn)(void))
{
	atomic_store(&lockstat_clock, fn);
}

void lockstat_register(struct lock_class *c)
{
	struct lock_class *p;

	pthread_mutex_lock(&registry_lock);
	for (p = registry; p; p = p->next)
		if (p == c)
			goto out_unlock;
	c->next = registry;
	registry = c;
out_unlock:
	pthread_mutex_unlock(&registry_lock);
}

void lockstat_enable(bool on)
{
	/* a new epoch first: holds begun while off are not timed */
	if (on)
		atomic_fetch_add(&lockstat_epoch, 1);
	atomic_store(&lockstat_on, on);
}

void lockstat_reset(void)
{
	struct lock_class *c;

	atomic_fetch_add(&lockstat_epoch, 1);
	pthread_mutex_lock(&registry_lock);
	for (c = registry; c; c = c->next) {
		atomic_store_explicit(&c->acquired, 0, memory_order_relaxed);
		atomic_store_explicit(&c->contended, 0, memory_order_relaxed);
		atomic_store_explicit(&c->wait_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&c->wait_max_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&c->hold_ns, 0, memory_order_relaxed);
	}
	pthread_mutex_unlock(&registry_lock);
}

/* This thread's live entry for @lock, or NULL. */
static struct held_lock *held_find(const void *lock)
{
	unsigned epoch = atomic_load_explicit(&lockstat_epoch, memory_order_relaxed);
	unsigned i;

	for (i = nr_held; i-- > 0;)
		if (held[i].lock == lock)
			return held[i].epoch == epoch ? &held[i] : NULL;
	return NULL;
}

static void held_drop(const void *lock)
{
	unsigned i;

	for (i = nr_held; i-- > 0;) {
		if (held[i].lock != lock)
			continue;
		memmove(&held[i], &held[i + 1], (nr_held - i - 1) * sizeof(held[0]));
		nr_held--;
		return;
	}
}

/* Remember that this thread took @lock at @now. */
static void held_push(const void *lock, struct lock_class *c, uint64_t now)
{
	unsigned epoch = atomic_load_explicit(&lockstat_epoch, memory_order_relaxed);
	unsigned i, live = 0;

	held_drop(lock);	/* a stale entry for the same lock */
	if (nr_held == LOCKSTAT_HELD_MAX) {
		/* full of leftovers from before an enable or reset: keep the live ones */
		for (i = 0; i < nr_held; i++)
			if (held[i].epoch == epoch)
				held[live++] = held[i];
		nr_held = live;
		if (nr_held == LOCKSTAT_HELD_MAX)
			return;
	}
	held[nr_held++] = (struct held_lock){ lock, c, now, epoch };
}

static void class_add_wait(struct lock_class *c, uint64_t ns)
{
	uint64_t max = atomic_load_explicit(&c->wait_max_ns, memory_order_relaxed);

	atomic_fetch_add_explicit(&c->contended, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->wait_ns, ns, memory_order_relaxed);
	while (ns > max && !atomic_compare_exchange_weak_explicit(&c->wait_max_ns, &max, ns,
								   memory_order_relaxed,
								   memory_order_relaxed))
		;
}

/*
 * Account one acquisition of @lock: @tried is the result of the trylock
 * (0: got it at once), @lock_fn the blocking call for when it failed.
 */
static int lockstat_acquire(const void *lock, struct lock_class *c, int tried,
			    int (*lock_fn)(void *), void *arg)
{
	uint64_t t0, now;
	int ret = 0;

	if (tried == 0) {
		now = lockstat_now_ns();
	} else {
		t0 = lockstat_now_ns();
		ret = lock_fn(arg);
		if (ret)
			return ret;
		now = lockstat_now_ns();
		class_add_wait(c, now - t0);
	}
	atomic_fetch_add_explicit(&c->acquired, 1, memory_order_relaxed);
	held_push(lock, c, now);
	return 0;
}

static int mutex_lock_fn(void *m)
{
	return pthread_mutex_lock(m);
}

static int rdlock_fn(void *l)
{
	return pthread_rwlock_rdlock(l);
}

static int wrlock_fn(void *l)
{
	return pthread_rwlock_wrlock(l);
}

int __lockstat_mutex_lock(pthread_mutex_t *m, struct lock_class *c)
{
	return lockstat_acquire(m, c, pthread_mutex_trylock(m), mutex_lock_fn, m);
}

struct stepping {
	pthread_mutex_t *m;
	bool (*step)(void *);
	void *arg;
};

/* The lock found taken: step until it is free or nothing is left to do. */
static int stepping_lock_fn(void *p)
{
	struct stepping *s = p;
	int ret;

	while ((ret = pthread_mutex_trylock(s->m)) == EBUSY)
		if (!s->step(s->arg))
			return pthread_mutex_lock(s->m);
	return ret;
}

int ls_mutex_lock_stepping(pthread_mutex_t *m, struct lock_class *c, bool (*step)(void *),
			   void *arg)
{
	struct stepping s = { m, step, arg };
	int tried = pthread_mutex_trylock(m);

	if (lockstat_enabled())
		return lockstat_acquire(m, c, tried, stepping_lock_fn, &s);
	return tried ? stepping_lock_fn(&s) : 0;
}

int __lockstat_rdlock(pthread_rwlock_t *l, struct lock_class *c)
{
	return lockstat_acquire(l, c, pthread_rwlock_tryrdlock(l), rdlock_fn, l);
}

int __lockstat_wrlock(pthread_rwlock_t *l, struct lock_class *c)
{
	return lockstat_acquire(l, c, pthread_rwlock_trywrlock(l), wrlock_fn, l);
}

int __lockstat_tryrdlock(pthread_rwlock_t *l, struct lock_class *c)
{
	int ret = pthread_rwlock_tryrdlock(l);

	return ret ? ret : lockstat_acquire(l, c, 0, rdlock_fn, l);
}

/* Context: @lock held by this thread, about to be unlocked. */
void __lockstat_release(const void *lock)
{
	struct held_lock *h = held_find(lock);

	if (h)
		atomic_fetch_add_explicit(&h->class->hold_ns, lockstat_now_ns() - h->t0_ns,
					  memory_order_relaxed);
	held_drop(lock);
}

/* Context: about to sleep on a condition variable with @lock held. */
void __lockstat_hold_pause(const void *lock)
{
	struct held_lock *h = held_find(lock);

	if (h)
		atomic_fetch_add_explicit(&h->class->hold_ns, lockstat_now_ns() - h->t0_ns,
					  memory_order_relaxed);
}

/* Context: woken with @lock held again: the hold restarts now. */
void __lockstat_hold_resume(const void *lock)
{
	struct held_lock *h = held_find(lock);

	if (h)
		h->t0_ns = lockstat_now_ns();
}

uint64_t __lockstat_now_ns(void)
{
	return lockstat_now_ns();
}

/* A contended acquisition of a lock that is not pthread's, begun at @t0_ns. */
void __lockstat_waited(struct lock_class *c, uint64_t t0_ns)
{
	class_add_wait(c, lockstat_now_ns() - t0_ns);
	atomic_fetch_add_explicit(&c->acquired, 1, memory_order_relaxed);
}

static int stat_cmp(const void *a, const void *b)
{
	const struct lock_stat *x = a, *y = b;

	if (x->wait_ns != y->wait_ns)
		return x->wait_ns < y->wait_ns ? 1 : -1;
	if (x->acquired != y->acquired)
		return x->acquired < y->acquired ? 1 : -1;
	return strcmp(x->name, y->name);
}

int lockstat_collect(struct lock_stat **out)
{
	struct lock_class *c;
	struct lock_stat *s;
	int n = 0, i = 0;

	pthread_mutex_lock(&registry_lock);
	for (c = registry; c; c = c->next)
		n++;
	s = calloc(n ? (size_t)n : 1, sizeof(*s));
	if (!s) {
		pthread_mutex_unlock(&registry_lock);
		return -ENOMEM;
	}
	for (c = registry; c; c = c->next, i++) {
		strncpy(s[i].name, c->name, LOCKSTAT_NAME_MAX);
		s[i].acquired = atomic_load_explicit(&c->acquired, memory_order_relaxed);
		s[i].contended = atomic_load_explicit(&c->contended, memory_order_relaxed);
		s[i].wait_ns = atomic_load_explicit(&c->wait_ns, memory_order_relaxed);
		s[i].wait_max_ns = atomic_load_explicit(&c->wait_max_ns, memory_order_relaxed);
		s[i].hold_ns = atomic_load_explicit(&c->hold_ns, memory_order_relaxed);
	}
	pthread_mutex_unlock(&registry_lock);
	qsort(s, (size_t)n, sizeof(*s), stat_cmp);
	*out = s;
	return n;
}
