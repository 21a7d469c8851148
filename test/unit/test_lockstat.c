// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Lock statistics: acquisitions are counted only while on, a second thread
 * finding the lock held is a contended acquisition whose wait is timed, hold
 * time runs from owning to unlock (a condition-variable sleep excluded), and
 * reset zeroes. Time comes from a fake nanosecond clock, so the tests assert
 * exact sums rather than wall-clock rates, except for contention, which
 * uses the real clock and asserts only orderings.
 */
#include <check.h>
#include "helpers.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wbcfs/lib/lockstat.h"

LOCK_CLASS(lc_test_a, "test_a")
LOCK_CLASS(lc_test_rw_r, "test_rw(r)")
LOCK_CLASS(lc_test_rw_w, "test_rw(w)")

static _Atomic uint64_t fake_ns;

static uint64_t fake_clock(void)
{
	return atomic_load(&fake_ns);
}

static void setup(void)
{
	lockstat_set_clock(NULL);
	lockstat_enable(false);
	lockstat_reset();
}

static struct lock_stat t_stat(const char *name)
{
	struct lock_stat *s, found = { 0 };
	int n = lockstat_collect(&s), i;

	ck_assert_int_ge(n, 3);
	for (i = 0; i < n; i++)
		if (!strcmp(s[i].name, name))
			found = s[i];
	free(s);
	ck_assert_str_eq(found.name, name);
	return found;
}

START_TEST(off_records_nothing)
{
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	struct lock_stat s;
	int i;

	for (i = 0; i < 10; i++) {
		ck_assert_int_eq(ls_mutex_lock(&m, &lc_test_a), 0);
		ck_assert_int_eq(ls_mutex_unlock(&m), 0);
	}
	s = t_stat("test_a");
	ck_assert_uint_eq(s.acquired, 0);
	ck_assert_uint_eq(s.hold_ns, 0);
}
END_TEST

START_TEST(counts_acquisitions_and_hold)
{
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	struct lock_stat s;
	int i;

	atomic_store(&fake_ns, 1000);
	lockstat_set_clock(fake_clock);
	lockstat_enable(true);
	for (i = 0; i < 5; i++) {
		ls_mutex_lock(&m, &lc_test_a);
		atomic_fetch_add(&fake_ns, 100);
		ls_mutex_unlock(&m);
		atomic_fetch_add(&fake_ns, 7);	/* not held: not counted */
	}
	s = t_stat("test_a");
	ck_assert_uint_eq(s.acquired, 5);
	ck_assert_uint_eq(s.contended, 0);
	ck_assert_uint_eq(s.wait_ns, 0);
	ck_assert_uint_eq(s.hold_ns, 500);
}
END_TEST

START_TEST(reset_zeroes_and_forgets_holds)
{
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	struct lock_stat s;

	lockstat_set_clock(fake_clock);
	lockstat_enable(true);
	ls_mutex_lock(&m, &lc_test_a);
	atomic_fetch_add(&fake_ns, 100);
	lockstat_reset();	/* the hold in progress began before: not counted */
	atomic_fetch_add(&fake_ns, 100);
	ls_mutex_unlock(&m);
	s = t_stat("test_a");
	ck_assert_uint_eq(s.acquired, 0);
	ck_assert_uint_eq(s.hold_ns, 0);
}
END_TEST

START_TEST(turned_on_while_held)
{
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	struct lock_stat s;

	lockstat_set_clock(fake_clock);
	lockstat_enable(true);
	ls_mutex_lock(&m, &lc_test_a);
	lockstat_enable(false);
	ls_mutex_unlock(&m);		/* leaves its entry behind */
	ls_mutex_lock(&m, &lc_test_a);
	lockstat_enable(true);
	atomic_fetch_add(&fake_ns, 1000000);
	ls_mutex_unlock(&m);		/* the stale entry must not count */
	s = t_stat("test_a");
	ck_assert_uint_eq(s.acquired, 1);
	ck_assert_uint_eq(s.hold_ns, 0);
}
END_TEST

struct cv_ctx {
	pthread_mutex_t m;
	pthread_cond_t cv;
	bool go;
};

static void *cv_waker(void *arg)
{
	struct cv_ctx *x = arg;

	pthread_mutex_lock(&x->m);	/* owns it only while the waiter sleeps */
	atomic_fetch_add(&fake_ns, 1000000);
	x->go = true;
	pthread_cond_signal(&x->cv);
	pthread_mutex_unlock(&x->m);
	return NULL;
}

START_TEST(cond_wait_is_not_hold)
{
	struct cv_ctx x = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false };
	struct lock_stat s;
	pthread_t t;

	lockstat_set_clock(fake_clock);
	lockstat_enable(true);
	ls_mutex_lock(&x.m, &lc_test_a);
	atomic_fetch_add(&fake_ns, 10);
	ck_assert_int_eq(pthread_create(&t, NULL, cv_waker, &x), 0);
	while (!x.go)
		lockstat_cond_wait(&x.cv, &x.m);
	atomic_fetch_add(&fake_ns, 20);
	ls_mutex_unlock(&x.m);
	pthread_join(t, NULL);
	s = t_stat("test_a");
	ck_assert_uint_eq(s.acquired, 1);
	ck_assert_uint_eq(s.hold_ns, 30);
}
END_TEST

static pthread_mutex_t contend_m = PTHREAD_MUTEX_INITIALIZER;
static _Atomic pid_t contend_tid;

static void *contender(void *arg)
{
	atomic_store(&contend_tid, gettid());
	ls_mutex_lock(&contend_m, &lc_test_a);
	ls_mutex_unlock(&contend_m);
	return NULL;
}

/* Wait (up to 10 s) until thread @tid sleeps: blocked on the mutex. */
static void t_wait_sleeping(pid_t tid)
{
	char path[64], buf[256], *p;
	int i;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	for (i = 0; i < 10000; i++) {
		FILE *f = fopen(path, "r");

		ck_assert_ptr_nonnull(f);
		p = fgets(buf, sizeof(buf), f);
		fclose(f);
		p = p ? strrchr(buf, ')') : NULL;
		if (p && p[2] == 'S')
			return;
		usleep(1000);
	}
	ck_abort_msg("thread %d never blocked", (int)tid);
}

START_TEST(second_thread_is_contended)
{
	struct lock_stat s;
	pthread_t t;

	lockstat_enable(true);
	ls_mutex_lock(&contend_m, &lc_test_a);
	ck_assert_int_eq(pthread_create(&t, NULL, contender, NULL), 0);
	while (!atomic_load(&contend_tid))
		usleep(1000);
	t_wait_sleeping(atomic_load(&contend_tid));	/* its trylock failed: it blocks */
	ls_mutex_unlock(&contend_m);
	pthread_join(t, NULL);
	s = t_stat("test_a");
	ck_assert_uint_eq(s.acquired, 2);
	ck_assert_uint_eq(s.contended, 1);
	ck_assert_uint_gt(s.wait_ns, 0);
	ck_assert_uint_eq(s.wait_max_ns, s.wait_ns);
	ck_assert_uint_gt(s.hold_ns, 0);
}
END_TEST

START_TEST(rwlock_classes_and_sort_order)
{
	pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
	struct lock_stat *all, s;
	int n;

	lockstat_enable(true);
	ls_rwlock_rdlock(&l, &lc_test_rw_r);
	ls_rwlock_rdlock(&l, &lc_test_rw_r);	/* readers share: not contended */
	ls_rwlock_unlock(&l);
	ls_rwlock_unlock(&l);
	ls_rwlock_wrlock(&l, &lc_test_rw_w);
	ls_rwlock_unlock(&l);
	s = t_stat("test_rw(r)");
	ck_assert_uint_eq(s.acquired, 2);
	ck_assert_uint_eq(s.contended, 0);
	s = t_stat("test_rw(w)");
	ck_assert_uint_eq(s.acquired, 1);

	/* a class with wait time sorts before those without */
	atomic_fetch_add(&lc_test_a.wait_ns, 5);
	n = lockstat_collect(&all);
	ck_assert_int_ge(n, 3);
	ck_assert_str_eq(all[0].name, "test_a");
	free(all);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lockstat");
	TCase *tc;

	tc = t_tcase(s, "counting", off_records_nothing, counts_acquisitions_and_hold,
		     reset_zeroes_and_forgets_holds, turned_on_while_held, cond_wait_is_not_hold);
	tcase_add_checked_fixture(tc, setup, NULL);
	tc = t_tcase(s, "contention", second_thread_is_contended, rwlock_classes_and_sort_order);
	tcase_add_checked_fixture(tc, setup, NULL);
	return t_run(s);
}
