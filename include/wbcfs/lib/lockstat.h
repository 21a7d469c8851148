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

extern atomic_bool lockstat_on;

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

/* The slow paths, for when lockstat_on is set. */
int __lockstat_mutex_lock(pthread_mutex_t *m, struct lock_class *c);
int __lockstat_rdlock(pthread_rwlock_t *l, struct lock_class *c);
int __lockstat_wrlock(pthread_rwlock_t *l, struct lock_class *c);
int __lockstat_tryrdlock(pthread_rwlock_t *l, struct lock_class *c);
void __lockstat_release(const void *lock);
void __lockstat_hold_pause(const void *lock);
void __lockstat_hold_resume(const void *lock);
uint64_t __lockstat_now_ns(void);
void __lockstat_waited(struct lock_class *c, uint64_t t0_ns);

static inline bool lockstat_enabled(void)
{
	return __builtin_expect(atomic_load_explicit(&lockstat_on, memory_order_relaxed), 0);
}

static inline int ls_mutex_lock(pthread_mutex_t *m, struct lock_class *c)
{
	if (lockstat_enabled())
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
	if (lockstat_enabled())
		__lockstat_release(m);
	return pthread_mutex_unlock(m);
}

static inline int ls_rwlock_rdlock(pthread_rwlock_t *l, struct lock_class *c)
{
	if (lockstat_enabled())
		return __lockstat_rdlock(l, c);
	return pthread_rwlock_rdlock(l);
}

/* Returns 0 with @l held shared, or EBUSY (not counted as a wait). */
static inline int ls_rwlock_tryrdlock(pthread_rwlock_t *l, struct lock_class *c)
{
	if (lockstat_enabled())
		return __lockstat_tryrdlock(l, c);
	return pthread_rwlock_tryrdlock(l);
}

static inline int ls_rwlock_wrlock(pthread_rwlock_t *l, struct lock_class *c)
{
	if (lockstat_enabled())
		return __lockstat_wrlock(l, c);
	return pthread_rwlock_wrlock(l);
}

static inline int ls_rwlock_unlock(pthread_rwlock_t *l)
{
	if (lockstat_enabled())
		__lockstat_release(l);
	return pthread_rwlock_unlock(l);
}

/* pthread_cond_wait on a wrapped mutex: the sleep is neither hold nor wait. */
static inline int lockstat_cond_wait(pthread_cond_t *cv, pthread_mutex_t *m)
{
	int ret;

	if (!lockstat_enabled())
		return pthread_cond_wait(cv, m);
	__lockstat_hold_pause(m);
	ret = pthread_cond_wait(cv, m);
	__lockstat_hold_resume(m);
	return ret;
}

static inline int lockstat_cond_timedwait(pthread_cond_t *cv, pthread_mutex_t *m,
					  const struct timespec *ts)
{
	int ret;

	if (!lockstat_enabled())
		return pthread_cond_timedwait(cv, m, ts);
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
