// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Lock statistics, as the kernel's Documentation/locking/lockstat.rst
 * describes them: per lock class (one per lock role, not per instance:
 * every inode's ilock is one class), how often it was taken, how often the
 * taker found it held, how long takers waited and how long holders held
 * it. Read through /.wbcfs/lockstat.
 *
 * Off by default. When off, each wrapper costs one relaxed load and one
 * branch before the plain pthread call. When on, a lock is tried first
 * (a failed try is a contended acquisition) and its wait timed; the
 * acquire time goes on a small per-thread stack of held locks, so unlock
 * needs no class and the lock types stay pthread's own.
 *
 * A pthread_cond_wait on a wrapped mutex must go through lockstat_cond_wait
 * (or clock_cond_wait_ms): the time asleep is not hold time.
 *
 * The same wrappers feed lockdep, an order checker in the manner of the
 * kernel's, per lock class: while on, every blocking acquisition records
 * the edges held class -> new class, and one whose reverse (directly or
 * through other classes) was ever recorded aborts at once, naming both
 * orders: a deadlock that needs two threads to meet at the wrong moment
 * is reported the first time each order is merely taken. "x(r)" and
 * "x(w)" are one class to it, "x"; two locks of one class may nest (two
 * inodes' ilocks, in an order their code keeps). Trylocks record no edge.
 * On when the environment holds WBCFS_LOCKDEP=1 at startup, or built with
 * -Dlockdep=true (WBCFS_LOCKDEP=0 then turns it off). doc/locking.md is the
 * order it checks against; /.wbcfs/lockdep lists what was seen.
 */
#ifndef WBCFS_LOCKSTAT_H
#define WBCFS_LOCKSTAT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOCKSTAT_NAME_MAX 23

struct lock_class {
	const char *name;		/* constant: "fs_lock", "ilock(w)", ... */
	_Atomic uint64_t acquired;	/* atomic: acquisitions while on */
	_Atomic uint64_t contended;	/* atomic: of those, the try failed */
	_Atomic uint64_t wait_ns;	/* atomic: time from failed try to owning it */
	_Atomic uint64_t wait_max_ns;	/* atomic: longest single wait */
	_Atomic uint64_t hold_ns;	/* atomic: time from owning to unlock */
	struct lock_class *next;	/* registry list; set once at registration */
	unsigned short dep_id;		/* lockdep's class, 1-based; 0: none yet */
};

/*
 * Define a lock class and register it before main() runs, so that
 * /.wbcfs/lockstat lists every class, taken or not.
 */
#define LOCK_CLASS(var, lname)							\
	struct lock_class var = { .name = (lname) };				\
	static void __attribute__((constructor)) var##_register(void)		\
	{									\
		lockstat_register(&var);					\
	}

/* One class's counters, copied out for printing. */
struct lock_stat {
	char name[LOCKSTAT_NAME_MAX + 1];
	uint64_t acquired, contended, wait_ns, wait_max_ns, hold_ns;
};

/* lock_hooks bits: who wants the wrappers' slow path */
#define LOCK_HOOK_STAT	1u	/* lockstat counts */
#define LOCK_HOOK_DEP	2u	/* lockdep checks */

extern _Atomic unsigned lock_hooks;

/** Add @c to the list lockstat_collect walks. Idempotent per class. */
void lockstat_register(struct lock_class *c);

/** Turn collection on or off. Counters are kept; see lockstat_reset(). */
void lockstat_enable(bool on);

/** Zero every class's counters; holds begun before now are not counted. */
void lockstat_reset(void);

/**
 * Copy every registered class into a malloc'ed array in *@out, sorted by
 * total wait, longest first (ties: acquisitions). Returns the count, or
 * -ENOMEM.
 */
int lockstat_collect(struct lock_stat **out);

/** Testing aid: read time (ns) from @fn instead of CLOCK_MONOTONIC; NULL restores. */
void lockstat_set_clock(uint64_t (*fn)(void));

/* The slow paths, for when lock_hooks has a bit set (lockstat or lockdep). */
int __lockstat_mutex_lock(pthread_mutex_t *m, struct lock_class *c);
int __lockstat_rdlock(pthread_rwlock_t *l, struct lock_class *c);
int __lockstat_wrlock(pthread_rwlock_t *l, struct lock_class *c);
int __lockstat_tryrdlock(pthread_rwlock_t *l, struct lock_class *c);
void __lockstat_release(const void *lock);
void __lockstat_hold_pause(const void *lock);
void __lockstat_hold_resume(const void *lock);
uint64_t __lockstat_now_ns(void);
void __lockstat_waited(struct lock_class *c, uint64_t t0_ns);

/* lockdep (see the top of this file) */
void lockdep_enable(bool on);
/** The edges seen so far, one "outer -> inner" line each, malloc'ed; NULL if out of memory. */
char *lockdep_report(void);
void __lockdep_assert_held(const void *lock, bool write, const char *func, const char *what);
void __lockdep_cond_wait(pthread_mutex_t *m);

/* The wrappers' one relaxed load and branch when lockstat and lockdep are off. */
static inline bool lock_hooks_on(void)
{
	return __builtin_expect(atomic_load_explicit(&lock_hooks, memory_order_relaxed) != 0, 0);
}

static inline bool lockstat_enabled(void)
{
	return __builtin_expect(atomic_load_explicit(&lock_hooks, memory_order_relaxed) &
				LOCK_HOOK_STAT, 0);
}

static inline bool lockdep_enabled(void)
{
	return __builtin_expect(atomic_load_explicit(&lock_hooks, memory_order_relaxed) &
				LOCK_HOOK_DEP, 0);
}

/*
 * The contract of a *_locked function: its caller holds @lock (a wrapped
 * pthread mutex or rwlock; for an rwlock either way, or for writing with
 * lock_assert_held_w). Aborts naming the function when lockdep is on and
 * this thread does not; nothing when off.
 */
#define lock_assert_held(lock)							\
	do {									\
		if (lockdep_enabled())						\
			__lockdep_assert_held((lock), false, __func__, #lock);	\
	} while (0)
#define lock_assert_held_w(lock)						\
	do {									\
		if (lockdep_enabled())						\
			__lockdep_assert_held((lock), true, __func__, #lock);	\
	} while (0)

static inline int ls_mutex_lock(pthread_mutex_t *m, struct lock_class *c)
{
	if (lock_hooks_on())
		return __lockstat_mutex_lock(m, c);
	return pthread_mutex_lock(m);
}

/*
 * Lock @m, calling @step(@arg) each time it is found taken, until @step
 * returns false (nothing left to do: then block). For a thread that must
 * not sleep on @m while it holds up @m's holder: @step does what the
 * holder may be waiting for (completes the thread's own writes).
 */
int ls_mutex_lock_stepping(pthread_mutex_t *m, struct lock_class *c, bool (*step)(void *),
			   void *arg);

static inline int ls_mutex_unlock(pthread_mutex_t *m)
{
	if (lock_hooks_on())
		__lockstat_release(m);
	return pthread_mutex_unlock(m);
}

static inline int ls_rwlock_rdlock(pthread_rwlock_t *l, struct lock_class *c)
{
	if (lock_hooks_on())
		return __lockstat_rdlock(l, c);
	return pthread_rwlock_rdlock(l);
}

/* Returns 0 with @l held shared, or EBUSY (not counted as a wait). */
static inline int ls_rwlock_tryrdlock(pthread_rwlock_t *l, struct lock_class *c)
{
	if (lock_hooks_on())
		return __lockstat_tryrdlock(l, c);
	return pthread_rwlock_tryrdlock(l);
}

static inline int ls_rwlock_wrlock(pthread_rwlock_t *l, struct lock_class *c)
{
	if (lock_hooks_on())
		return __lockstat_wrlock(l, c);
	return pthread_rwlock_wrlock(l);
}

static inline int ls_rwlock_unlock(pthread_rwlock_t *l)
{
	if (lock_hooks_on())
		__lockstat_release(l);
	return pthread_rwlock_unlock(l);
}

/* pthread_cond_wait on a wrapped mutex: the sleep is neither hold nor wait. */
static inline int lockstat_cond_wait(pthread_cond_t *cv, pthread_mutex_t *m)
{
	int ret;

	if (!lock_hooks_on())
		return pthread_cond_wait(cv, m);
	if (lockdep_enabled())
		__lockdep_cond_wait(m);
	__lockstat_hold_pause(m);
	ret = pthread_cond_wait(cv, m);
	__lockstat_hold_resume(m);
	return ret;
}

static inline int lockstat_cond_timedwait(pthread_cond_t *cv, pthread_mutex_t *m,
					  const struct timespec *ts)
{
	int ret;

	if (!lock_hooks_on())
		return pthread_cond_timedwait(cv, m, ts);
	if (lockdep_enabled())
		__lockdep_cond_wait(m);
	__lockstat_hold_pause(m);
	ret = pthread_cond_timedwait(cv, m, ts);
	__lockstat_hold_resume(m);
	return ret;
}

/*
 * Locks that are not pthread's (the page lock bits): count an acquisition
 * that did not wait with lockstat_acquired(); time one that did between
 * lockstat_wait_begin() and lockstat_wait_end(). No hold time: such a lock
 * may be released by another thread (I/O completion).
 */
static inline void lockstat_acquired(struct lock_class *c)
{
	if (lockstat_enabled())
		atomic_fetch_add_explicit(&c->acquired, 1, memory_order_relaxed);
}

/* Returns a start time for lockstat_wait_end(), or 0 (off: nothing to record). */
static inline uint64_t lockstat_wait_begin(void)
{
	return lockstat_enabled() ? __lockstat_now_ns() : 0;
}

static inline void lockstat_wait_end(struct lock_class *c, uint64_t t0_ns)
{
	if (t0_ns)
		__lockstat_waited(c, t0_ns);
}

#endif
