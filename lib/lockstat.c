// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Lock statistics: the class registry, the slow paths of the wrappers in
 * include/wbcfs/lib/lockstat.h and the snapshot /.wbcfs/lockstat prints. Which
 * locks are wrapped, and the classes' names, are their owners' business;
 * the control file is daemon/ctl.c's.
 *
 * Hold time needs the moment a lock was taken. Rather than widen every lock
 * with a field for it, each thread keeps a short stack of the wrapped locks
 * it holds (address, class, acquire time). An entry whose epoch predates the
 * last enable or reset belongs to a hold that began before it, or was left
 * behind by an unlock while off: it is ignored and replaced.
 *
 * lockdep reuses that stack: with it on, the stack is exact (every wrapped
 * lock taken since startup is on it until unlocked), and each blocking
 * acquisition walks it once, testing one bit per held lock in an N x N
 * bitmap of class pairs seen nested. Only an edge never seen before takes
 * dep_lock, looks for the reverse path and records where it was first
 * taken; that happens a few dozen times in a daemon's life.
 *
 * Lock ordering: registry_lock and dep_lock are leaves, taken only at
 * registration, collection and a new lockdep edge (never both); the
 * counters and the bitmap are atomics.
 */
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wbcfs/lib/clock.h"
#include "wbcfs/lib/lockstat.h"

#define LOCKSTAT_HELD_MAX 24	/* deeper than any nesting in wbcfs */
#define LOCKDEP_CLASSES 64	/* one bitmap word per class */

#ifndef WBCFS_LOCKDEP_DEFAULT
#define WBCFS_LOCKDEP_DEFAULT 0
#endif

_Atomic unsigned lock_hooks;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lock_class *registry;		/* registry_lock */
static _Atomic unsigned lockstat_epoch = 1;	/* atomic: bumped at enable and reset */
static _Atomic unsigned dep_epoch = 1;		/* atomic: bumped at lockdep_enable */
static uint64_t (*_Atomic lockstat_clock)(void);

struct held_lock {
	const void *lock;
	struct lock_class *class;
	uint64_t t0_ns;
	unsigned epoch;
	unsigned dep_epoch;	/* lockdep's, when taken with it on; else 0 */
	bool read;		/* an rwlock held shared */
	const void *ip;		/* where it was taken, for lockdep's messages */
};

/* lockdep: the classes, and the pairs seen nested (outer's word, inner's bit) */
static struct lock_class *dep_class[LOCKDEP_CLASSES + 1];	/* by dep_id; registry_lock */
static unsigned nr_dep_classes;					/* registry_lock */
static _Atomic uint64_t dep_edge[LOCKDEP_CLASSES + 1];		/* atomic; set under dep_lock */
/* protects: dep_first, and the edge setting with its path search; a leaf, not
 * itself checked (it would record edges about the checker) */
static pthread_mutex_t dep_lock = PTHREAD_MUTEX_INITIALIZER;

struct dep_first {
	struct lock_class *outer, *inner;	/* the classes as first taken */
	const void *ip;				/* where inner was taken */
};
static struct dep_first dep_first[LOCKDEP_CLASSES + 1][LOCKDEP_CLASSES + 1];	/* dep_lock */

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

/* "ilock(r)" and "ilock(w)" are lockdep's "ilock": the length of that base name */
static size_t class_base_len(const char *name)
{
	size_t n = strlen(name);

	if (n > 3 && name[n - 3] == '(' && (name[n - 2] == 'r' || name[n - 2] == 'w') &&
	    name[n - 1] == ')')
		return n - 3;
	return n;
}

/* Context: registry_lock held. Give @c the lockdep class of its base name. */
static void dep_assign(struct lock_class *c)
{
	size_t n = class_base_len(c->name);
	unsigned i;

	for (i = 1; i <= nr_dep_classes; i++) {
		if (class_base_len(dep_class[i]->name) == n &&
		    !strncmp(dep_class[i]->name, c->name, n)) {
			c->dep_id = (unsigned short)i;
			return;
		}
	}
	if (nr_dep_classes == LOCKDEP_CLASSES) {
		fprintf(stderr, "wbcfs lockdep: more than %d lock classes, %s unchecked\n",
			LOCKDEP_CLASSES, c->name);
		return;
	}
	dep_class[++nr_dep_classes] = c;
	c->dep_id = (unsigned short)nr_dep_classes;
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
	dep_assign(c);
out_unlock:
	pthread_mutex_unlock(&registry_lock);
}

void lockstat_enable(bool on)
{
	/* a new epoch first: holds begun while off are not timed */
	if (on) {
		atomic_fetch_add(&lockstat_epoch, 1);
		atomic_fetch_or(&lock_hooks, LOCK_HOOK_STAT);
	} else {
		atomic_fetch_and(&lock_hooks, ~LOCK_HOOK_STAT);
	}
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

/* This thread's live entry for @lock (its hold is timed), or NULL. */
static struct held_lock *held_find(const void *lock)
{
	unsigned epoch = atomic_load_explicit(&lockstat_epoch, memory_order_relaxed);
	unsigned i;

	if (!lockstat_enabled())
		return NULL;	/* lockdep alone keeps the stack */
	for (i = nr_held; i-- > 0;)
		if (held[i].lock == lock)
			return held[i].epoch == epoch ? &held[i] : NULL;
	return NULL;
}

/* This thread's entry for @lock taken while lockdep was on, or NULL. */
static struct held_lock *held_find_dep(const void *lock)
{
	unsigned epoch = atomic_load_explicit(&dep_epoch, memory_order_relaxed);
	unsigned i;

	for (i = nr_held; i-- > 0;)
		if (held[i].lock == lock)
			return held[i].dep_epoch == epoch ? &held[i] : NULL;
	return NULL;
}

static bool held_drop(const void *lock)
{
	unsigned i;

	for (i = nr_held; i-- > 0;) {
		if (held[i].lock != lock)
			continue;
		memmove(&held[i], &held[i + 1], (nr_held - i - 1) * sizeof(held[0]));
		nr_held--;
		return true;
	}
	return false;
}

/* A code address as "file+0xoffset", for addr2line -f -e file 0xoffset. */
static void print_ip(FILE *f, const void *ip)
{
	Dl_info info;

	if (ip && dladdr(ip, &info) && info.dli_fname) {
		const char *base = strrchr(info.dli_fname, '/');

		fprintf(f, "%s+%#lx", base ? base + 1 : info.dli_fname,
			(unsigned long)((const char *)ip - (const char *)info.dli_fbase));
	} else {
		fprintf(f, "%p", ip);
	}
}

/* Context: about to abort. This thread's held locks and stack, to stderr. */
static __attribute__((noreturn)) void dep_die(void)
{
	void *bt[32];
	unsigned i;

	fprintf(stderr, "wbcfs lockdep: this thread holds %u lock(s), outermost first:\n",
		nr_held);
	for (i = 0; i < nr_held; i++) {
		fprintf(stderr, "  %s %p taken at ", held[i].class->name, held[i].lock);
		print_ip(stderr, held[i].ip);
		fputc('\n', stderr);
	}
	fprintf(stderr, "wbcfs lockdep: stack:\n");
	fflush(stderr);
	backtrace_symbols_fd(bt, backtrace(bt, 32), STDERR_FILENO);
	abort();
}

/* Remember that this thread took @lock at @now. */
static void held_push(const void *lock, struct lock_class *c, uint64_t now, bool read,
		      const void *ip)
{
	unsigned epoch = atomic_load_explicit(&lockstat_epoch, memory_order_relaxed);
	unsigned depoch = 0;
	unsigned i, live = 0;

	if (!lockstat_enabled())
		epoch = 0;	/* taken for lockdep alone: its hold is not timed */

	if (lockdep_enabled())
		depoch = atomic_load_explicit(&dep_epoch, memory_order_relaxed);
	else
		held_drop(lock);	/* a stale entry for the same lock */
	if (nr_held == LOCKSTAT_HELD_MAX) {
		/* full of leftovers from before an enable or reset: keep the live ones */
		for (i = 0; i < nr_held; i++)
			if (held[i].epoch == epoch || (depoch && held[i].dep_epoch == depoch))
				held[live++] = held[i];
		nr_held = live;
		if (nr_held == LOCKSTAT_HELD_MAX) {
			if (!depoch)
				return;
			/* exact while on: a leak (unlocked past the wrappers) */
			fprintf(stderr, "wbcfs lockdep: more than %d locks held taking %s at ",
				LOCKSTAT_HELD_MAX, c->name);
			print_ip(stderr, ip);
			fputc('\n', stderr);
			dep_die();
		}
	}
	held[nr_held++] = (struct held_lock){ lock, c, now, epoch, depoch, read, ip };
}

/* The first-seen record of edge @a -> @b, as "outer -> inner at where". */
static void print_first(FILE *f, unsigned a, unsigned b)
{
	struct dep_first *d = &dep_first[a][b];

	fprintf(f, "%s -> %s (first at ", d->outer->name, d->inner->name);
	print_ip(f, d->ip);
	fputc(')', f);
}

/*
 * Whether a reader of @lock waits behind a waiting writer: then a thread
 * that takes it twice for reading deadlocks with any writer between
 * (fs_lock is such a lock, so that claims cannot starve the writers).
 */
static bool rwlock_prefers_writer(const void *lock)
{
#ifdef __GLIBC__
	return ((const pthread_rwlock_t *)lock)->__data.__flags != PTHREAD_RWLOCK_PREFER_READER_NP;
#else
	return true;
#endif
}

/*
 * Context: dep_lock held, edge @from -> @to about to be recorded. Is there
 * a path @to -> ... -> @from already? Then fills @path (class ids from @to
 * to @from) and returns its length, else 0.
 */
static unsigned dep_path(unsigned from, unsigned to, unsigned *path)
{
	unsigned char parent[LOCKDEP_CLASSES + 1];
	unsigned queue[LOCKDEP_CLASSES + 1];
	uint64_t seen = 0;
	unsigned head = 0, tail = 0, n = 0, x, y;

	queue[tail++] = to;
	seen |= 1ull << (to - 1);
	parent[to] = 0;
	while (head < tail) {
		uint64_t next;

		x = queue[head++];
		next = atomic_load_explicit(&dep_edge[x], memory_order_relaxed) & ~seen;
		while (next) {
			y = (unsigned)__builtin_ctzll(next) + 1;
			next &= next - 1;
			seen |= 1ull << (y - 1);
			parent[y] = (unsigned char)x;
			if (y == from) {
				unsigned rev[LOCKDEP_CLASSES + 1], i;

				for (x = y; x; x = parent[x])
					rev[n++] = x;
				for (i = 0; i < n; i++)
					path[i] = rev[n - 1 - i];
				return n;
			}
			queue[tail++] = y;
		}
	}
	return 0;
}

/*
 * Context: dep_lock held. Taking @c at @ip while holding @h inverts the
 * order @path[0..@n) (from @c's class to @h's) seen before: say both
 * orders, where each edge of the old one was first taken, and abort.
 */
static __attribute__((noreturn)) void dep_inversion(const struct held_lock *h,
						    const struct lock_class *c, const void *ip,
						    const unsigned *path, unsigned n)
{
	unsigned k;

	fprintf(stderr, "wbcfs lockdep: inversion: %s -> %s here, but ", h->class->name,
		c->name);
	for (k = 0; k < n; k++)
		fprintf(stderr, "%s%.*s", k ? " -> " : "",
			(int)class_base_len(dep_class[path[k]]->name), dep_class[path[k]]->name);
	fprintf(stderr, " seen before\n  here: %s taken at ", c->name);
	print_ip(stderr, ip);
	fprintf(stderr, " holding %s taken at ", h->class->name);
	print_ip(stderr, h->ip);
	fprintf(stderr, "\n  before:\n");
	for (k = 0; k + 1 < n; k++) {
		fprintf(stderr, "    ");
		print_first(stderr, path[k], path[k + 1]);
		fputc('\n', stderr);
	}
	fflush(stderr);
	dep_die();
}

/*
 * A blocking acquisition of @lock (class @c, at @ip) while this thread
 * holds what is on its stack: record each held class -> @c, and abort if
 * @c was ever seen outside one of them.
 */
static void dep_check_from(unsigned first, const void *lock, struct lock_class *c, bool read,
			   const void *ip)
{
	unsigned depoch = atomic_load_explicit(&dep_epoch, memory_order_relaxed);
	unsigned b = c->dep_id, i;

	if (!b) {
		lockstat_register(c);
		b = c->dep_id;
		if (!b)
			return;
	}
	for (i = first; i < nr_held; i++) {
		struct held_lock *h = &held[i];
		unsigned a = h->class->dep_id, path[LOCKDEP_CLASSES + 1], n;

		if (h->dep_epoch != depoch || !a)
			continue;
		if (h->lock == lock) {
			if (read && h->read && !rwlock_prefers_writer(lock))
				continue;	/* a recursive read lock: allowed */
			fprintf(stderr, "wbcfs lockdep: %s %p taken at ", c->name, lock);
			print_ip(stderr, ip);
			fprintf(stderr, " while this thread holds it (%s, taken at ",
				h->class->name);
			print_ip(stderr, h->ip);
			fprintf(stderr, "): self-deadlock\n");
			dep_die();
		}
		if (atomic_load_explicit(&dep_edge[a], memory_order_relaxed) &
		    (1ull << (b - 1)))
			continue;
		pthread_mutex_lock(&dep_lock);
		n = a == b ? 0 : dep_path(a, b, path);
		if (n)
			dep_inversion(h, c, ip, path, n);
		if (!(atomic_load_explicit(&dep_edge[a], memory_order_relaxed) &
		      (1ull << (b - 1)))) {
			dep_first[a][b] = (struct dep_first){ h->class, c, ip };
			atomic_fetch_or_explicit(&dep_edge[a], 1ull << (b - 1),
						 memory_order_relaxed);
		}
		pthread_mutex_unlock(&dep_lock);
	}
}

static void dep_check(const void *lock, struct lock_class *c, bool read, const void *ip)
{
	dep_check_from(0, lock, c, read, ip);
}

/*
 * Context: about to sleep on a condition variable with @m held. Waking,
 * the thread takes @m again holding whatever it took after @m: those
 * orders (later -> @m) are checked as any acquisition's.
 */
void __lockdep_cond_wait(pthread_mutex_t *m)
{
	unsigned depoch = atomic_load_explicit(&dep_epoch, memory_order_relaxed);
	unsigned i;

	for (i = nr_held; i-- > 0;) {
		if (held[i].lock != m || held[i].dep_epoch != depoch)
			continue;
		if (i + 1 < nr_held)
			dep_check_from(i + 1, m, held[i].class, false,
				       __builtin_return_address(0));
		return;
	}
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
 * (0: got it at once), @lock_fn the blocking call for when it failed; a
 * @trylock records no lockdep edge (it cannot wait, so cannot deadlock).
 */
static int lockstat_acquire(const void *lock, struct lock_class *c, int tried,
			    int (*lock_fn)(void *), void *arg, bool read, bool trylock,
			    const void *ip)
{
	bool stat = lockstat_enabled();
	uint64_t t0, now = 0;
	int ret = 0;

	/* before blocking: an inversion is reported rather than met */
	if (lockdep_enabled() && !trylock)
		dep_check(lock, c, read, ip);
	if (tried == 0) {
		if (stat)
			now = lockstat_now_ns();
	} else {
		t0 = stat ? lockstat_now_ns() : 0;
		ret = lock_fn(arg);
		if (ret)
			return ret;
		if (stat) {
			now = lockstat_now_ns();
			class_add_wait(c, now - t0);
		}
	}
	if (stat)
		atomic_fetch_add_explicit(&c->acquired, 1, memory_order_relaxed);
	held_push(lock, c, now, read, ip);
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
	return lockstat_acquire(m, c, pthread_mutex_trylock(m), mutex_lock_fn, m, false, false,
				__builtin_return_address(0));
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

	if (lock_hooks_on())
		return lockstat_acquire(m, c, tried, stepping_lock_fn, &s, false, false,
					__builtin_return_address(0));
	return tried ? stepping_lock_fn(&s) : 0;
}

int __lockstat_rdlock(pthread_rwlock_t *l, struct lock_class *c)
{
	return lockstat_acquire(l, c, pthread_rwlock_tryrdlock(l), rdlock_fn, l, true, false,
				__builtin_return_address(0));
}

int __lockstat_wrlock(pthread_rwlock_t *l, struct lock_class *c)
{
	return lockstat_acquire(l, c, pthread_rwlock_trywrlock(l), wrlock_fn, l, false, false,
				__builtin_return_address(0));
}

int __lockstat_tryrdlock(pthread_rwlock_t *l, struct lock_class *c)
{
	int ret = pthread_rwlock_tryrdlock(l);

	return ret ? ret : lockstat_acquire(l, c, 0, rdlock_fn, l, true, true,
					    __builtin_return_address(0));
}

/* Context: @lock held by this thread, about to be unlocked. */
void __lockstat_release(const void *lock)
{
	struct held_lock *h = held_find(lock);

	static atomic_bool warned;

	if (h)
		atomic_fetch_add_explicit(&h->class->hold_ns, lockstat_now_ns() - h->t0_ns,
					  memory_order_relaxed);
	if (!held_drop(lock) && lockdep_enabled() && !atomic_exchange(&warned, true)) {
		/* locked past the wrappers, or by another thread: its order is unchecked */
		fprintf(stderr, "wbcfs lockdep: unlock of %p at ", lock);
		print_ip(stderr, __builtin_return_address(0));
		fprintf(stderr, ", which this thread did not take through the lock wrappers"
			" (reported once)\n");
	}
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

void lockdep_enable(bool on)
{
	/* a new epoch first: holds begun while off are not known to be exact */
	if (on) {
		atomic_fetch_add(&dep_epoch, 1);
		atomic_fetch_or(&lock_hooks, LOCK_HOOK_DEP);
	} else {
		atomic_fetch_and(&lock_hooks, ~LOCK_HOOK_DEP);
	}
}

void __lockdep_assert_held(const void *lock, bool write, const char *func, const char *what)
{
	struct held_lock *h = held_find_dep(lock);

	if (h && (!write || !h->read))
		return;
	fprintf(stderr, "wbcfs lockdep: %s called without %s held%s by this thread\n", func, what,
		h ? " for writing" : "");
	dep_die();
}

/*
 * Appends to a malloc'ed text; on allocation failure the text is freed and
 * *@t set NULL (the next calls do nothing).
 */
static void text_printf(char **t, size_t *len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void text_printf(char **t, size_t *len, const char *fmt, ...)
{
	va_list ap;
	char *line, *n;
	int k;

	if (!*t)
		return;
	va_start(ap, fmt);
	k = vasprintf(&line, fmt, ap);
	va_end(ap);
	n = k < 0 ? NULL : realloc(*t, *len + (size_t)k + 1);
	if (!n) {
		if (k >= 0)
			free(line);
		free(*t);
		*t = NULL;
		return;
	}
	memcpy(n + *len, line, (size_t)k + 1);
	*len += (size_t)k;
	*t = n;
	free(line);
}

/*
 * One line per edge: "outer -> inner", the base class names (what
 * doc/locking.md orders), then a tab and the first occurrence: the two
 * classes as taken and where the inner one was taken (file+offset for
 * addr2line).
 */
char *lockdep_report(void)
{
	size_t len = 0;
	char *t = calloc(1, 1);
	unsigned a, b, n = 0, nr;

	pthread_mutex_lock(&registry_lock);
	nr = nr_dep_classes;
	pthread_mutex_unlock(&registry_lock);
	for (a = 1; a <= nr; a++)
		n += (unsigned)__builtin_popcountll(atomic_load(&dep_edge[a]));
	text_printf(&t, &len, "# lockdep %s: %u classes, %u edges (outer -> inner\tfirst seen)\n",
		    lockdep_enabled() ? "on" : "off", nr, n);
	pthread_mutex_lock(&dep_lock);
	for (a = 1; a <= nr; a++) {
		uint64_t e = atomic_load(&dep_edge[a]);

		for (b = 1; b <= nr; b++) {
			struct dep_first *d = &dep_first[a][b];
			char where[128];
			Dl_info info;

			if (!(e & (1ull << (b - 1))))
				continue;
			if (d->ip && dladdr(d->ip, &info) && info.dli_fname) {
				const char *base = strrchr(info.dli_fname, '/');

				snprintf(where, sizeof(where), "%s+%#lx",
					 base ? base + 1 : info.dli_fname,
					 (unsigned long)((const char *)d->ip -
							 (const char *)info.dli_fbase));
			} else {
				snprintf(where, sizeof(where), "%p", d->ip);
			}
			text_printf(&t, &len, "%.*s -> %.*s\t%s -> %s at %s\n",
				    (int)class_base_len(dep_class[a]->name), dep_class[a]->name,
				    (int)class_base_len(dep_class[b]->name), dep_class[b]->name,
				    d->outer->name, d->inner->name, where);
		}
	}
	pthread_mutex_unlock(&dep_lock);
	return t;
}

static const char *dep_dump_path;

/*
 * atexit: the edges to $WBCFS_LOCKDEP_DUMP ("%p" in it: the process id), for
 * runs without a control directory.
 */
static void lockdep_dump(void)
{
	char *t = lockdep_report(), path[4096];
	const char *pid = strstr(dep_dump_path, "%p");
	FILE *f;

	if (!t)
		return;
	/* "%p": this process's id, for a run of many daemons */
	if (pid)
		snprintf(path, sizeof(path), "%.*s%d%s", (int)(pid - dep_dump_path), dep_dump_path,
			 (int)getpid(), pid + 2);
	else
		snprintf(path, sizeof(path), "%s", dep_dump_path);
	f = fopen(path, "w");
	if (f) {
		fputs(t, f);
		fclose(f);
	}
	free(t);
}

/* Read once, before main(): WBCFS_LOCKDEP=1 turns lockdep on, =0 off. */
static void __attribute__((constructor)) lockdep_init(void)
{
	const char *e = getenv("WBCFS_LOCKDEP");
	bool on = WBCFS_LOCKDEP_DEFAULT;

	if (e && *e)
		on = strcmp(e, "0") != 0;
	if (!on)
		return;
	lockdep_enable(true);
	dep_dump_path = getenv("WBCFS_LOCKDEP_DUMP");
	if (dep_dump_path && *dep_dump_path)
		atexit(lockdep_dump);
}
