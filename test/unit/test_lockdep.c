// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * lockdep, the lock order checker behind the lock wrappers: two classes
 * taken in both orders abort at the second order (directly, or through a
 * third class), naming both; one order repeated, two locks of one class
 * nested and a trylock against the order are fine; a thread taking a lock
 * it holds aborts before it would hang (a read lock taken twice only if
 * the lock makes readers wait behind writers), and so does one that
 * sleeps on a condition holding a lock taken after the condition's mutex;
 * lock_assert_held is a no-op when off and aborts naming the function
 * when on and the lock is not held.
 * What must abort runs in a forked child whose SIGABRT and stderr the
 * parent checks.
 */
#include <check.h>
#include "helpers.h"
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wbcfs/lib/lockstat.h"

LOCK_CLASS(lc_test_a, "test_a")
LOCK_CLASS(lc_test_b, "test_b")
LOCK_CLASS(lc_test_c, "test_c")
LOCK_CLASS(lc_test_rw_r, "test_rw(r)")
LOCK_CLASS(lc_test_rw_w, "test_rw(w)")

static pthread_mutex_t ma = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t ma2 = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t mb = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t mc = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;

static void setup(void)
{
	lockdep_enable(true);
}

/* Run @fn in a child; its wait status, and its stderr in @err. */
static int t_child(void (*fn)(void), char *err, size_t len)
{
	int pfd[2], status;
	size_t got = 0;
	ssize_t n;
	pid_t pid;

	ck_assert_int_eq(pipe(pfd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(pfd[1], STDERR_FILENO);
		close(pfd[0]);
		fn();
		_exit(0);
	}
	close(pfd[1]);
	while (got + 1 < len && (n = read(pfd[0], err + got, len - 1 - got)) > 0)
		got += (size_t)n;
	err[got] = '\0';
	close(pfd[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return status;
}

static void t_aborted(int status, const char *err, const char *want)
{
	ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
		      "child not aborted (status %#x), stderr:\n%s", status, err);
	ck_assert_msg(strstr(err, want), "stderr lacks \"%s\":\n%s", want, err);
}

static void t_exited(int status, const char *err)
{
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "child status %#x, stderr:\n%s", status, err);
	ck_assert_msg(!strstr(err, "lockdep"), "lockdep complained:\n%s", err);
}

static void a_then_b(void)
{
	ls_mutex_lock(&ma, &lc_test_a);
	ls_mutex_lock(&mb, &lc_test_b);
	ls_mutex_unlock(&mb);
	ls_mutex_unlock(&ma);
}

static void b_then_a(void)
{
	ls_mutex_lock(&mb, &lc_test_b);
	ls_mutex_lock(&ma, &lc_test_a);
	ls_mutex_unlock(&ma);
	ls_mutex_unlock(&mb);
}

static void inversion(void)
{
	a_then_b();
	b_then_a();
}

START_TEST(both_orders_abort)
{
	char err[8192];
	int status = t_child(inversion, err, sizeof(err));

	t_aborted(status, err, "wbcfs lockdep: inversion: test_b -> test_a here");
	t_aborted(status, err, "but test_a -> test_b seen before");
	t_aborted(status, err, "test_a -> test_b (first at ");
}
END_TEST

static void *a_then_b_thread(void *arg)
{
	a_then_b();
	return arg;
}

/* The order seen by one thread holds for the others. */
static void inversion_across_threads(void)
{
	pthread_t t;

	pthread_create(&t, NULL, a_then_b_thread, NULL);
	pthread_join(t, NULL);
	b_then_a();
}

START_TEST(orders_of_two_threads_abort)
{
	char err[8192];
	int status = t_child(inversion_across_threads, err, sizeof(err));

	t_aborted(status, err, "inversion: test_b -> test_a here");
}
END_TEST

static void b_then_c(void)
{
	ls_mutex_lock(&mb, &lc_test_b);
	ls_mutex_lock(&mc, &lc_test_c);
	ls_mutex_unlock(&mc);
	ls_mutex_unlock(&mb);
}

static void transitive(void)
{
	a_then_b();
	b_then_c();
	ls_mutex_lock(&mc, &lc_test_c);
	ls_mutex_lock(&ma, &lc_test_a);
}

START_TEST(inversion_through_a_third_class)
{
	char err[8192];
	int status = t_child(transitive, err, sizeof(err));

	t_aborted(status, err, "inversion: test_c -> test_a here");
	t_aborted(status, err, "but test_a -> test_b -> test_c seen before");
}
END_TEST

static void same_order_repeated(void)
{
	pthread_t t[4];
	int i;

	for (i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, a_then_b_thread, NULL);
	for (i = 0; i < 100; i++)
		a_then_b();
	for (i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	b_then_c();
	/* two locks of one class nest (two inodes' ilocks) */
	ls_mutex_lock(&ma, &lc_test_a);
	ls_mutex_lock(&ma2, &lc_test_a);
	ls_mutex_unlock(&ma2);
	ls_mutex_unlock(&ma);
	/* a recursive read lock */
	ls_rwlock_rdlock(&rw, &lc_test_rw_r);
	ls_rwlock_rdlock(&rw, &lc_test_rw_r);
	ls_rwlock_unlock(&rw);
	ls_rwlock_unlock(&rw);
}

START_TEST(one_order_is_fine)
{
	char err[8192];
	char *r;

	t_exited(t_child(same_order_repeated, err, sizeof(err)), err);
	/* and in this process, the edges are listed */
	same_order_repeated();
	r = lockdep_report();
	ck_assert_ptr_nonnull(r);
	ck_assert_msg(strstr(r, "# lockdep on: "), "%s", r);
	ck_assert_msg(strstr(r, "\ntest_a -> test_b\ttest_a -> test_b at "), "%s", r);
	ck_assert_msg(strstr(r, "\ntest_b -> test_c\t"), "%s", r);
	ck_assert_msg(strstr(r, "\ntest_a -> test_a\t"), "%s", r);
	ck_assert_msg(!strstr(r, "test_b -> test_a"), "%s", r);
	ck_assert_msg(!strstr(r, "test_rw -> test_rw"), "%s", r);
	free(r);
}
END_TEST

/* Held test_rw for reading, try test_a; then the order test_a -> test_rw. */
static void trylock_against_order(void)
{
	ls_mutex_lock(&ma, &lc_test_a);
	ck_assert_int_eq(ls_rwlock_tryrdlock(&rw, &lc_test_rw_r), 0);
	ls_rwlock_unlock(&rw);
	ls_mutex_unlock(&ma);
	ls_rwlock_wrlock(&rw, &lc_test_rw_w);
	ls_mutex_lock(&ma, &lc_test_a);
	ls_mutex_unlock(&ma);
	ls_rwlock_unlock(&rw);
}

START_TEST(trylock_records_no_edge)
{
	char err[8192];
	char *r;

	t_exited(t_child(trylock_against_order, err, sizeof(err)), err);
	trylock_against_order();
	r = lockdep_report();
	ck_assert_msg(strstr(r, "\ntest_rw -> test_a\ttest_rw(w) -> test_a at "), "%s", r);
	ck_assert_msg(!strstr(r, "test_a -> test_rw"), "%s", r);
	free(r);
}
END_TEST

/* The read and write classes of an rwlock are one class to the order. */
static void read_then_write_inverted(void)
{
	ls_rwlock_rdlock(&rw, &lc_test_rw_r);
	ls_mutex_lock(&ma, &lc_test_a);
	ls_mutex_unlock(&ma);
	ls_rwlock_unlock(&rw);
	ls_mutex_lock(&ma, &lc_test_a);
	ls_rwlock_wrlock(&rw, &lc_test_rw_w);
}

START_TEST(rwlock_modes_are_one_class)
{
	char err[8192];
	int status = t_child(read_then_write_inverted, err, sizeof(err));

	t_aborted(status, err, "inversion: test_a -> test_rw(w) here, but test_rw -> test_a seen before");
}
END_TEST

static void relock(void)
{
	ls_mutex_lock(&ma, &lc_test_a);
	ls_mutex_lock(&ma, &lc_test_a);
}

/* A writer-preferring rwlock read twice: a writer queued between hangs both. */
static void reread_writer_preferring(void)
{
	pthread_rwlock_t l;
	pthread_rwlockattr_t ra;

	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&l, &ra);
	ls_rwlock_rdlock(&l, &lc_test_rw_r);
	ls_rwlock_rdlock(&l, &lc_test_rw_r);
}

START_TEST(taking_a_held_lock_aborts)
{
	char err[8192];
	int status = t_child(relock, err, sizeof(err));

	t_aborted(status, err, "while this thread holds it (test_a, taken at ");
	t_aborted(status, err, "self-deadlock");
	status = t_child(reread_writer_preferring, err, sizeof(err));
	t_aborted(status, err, "while this thread holds it (test_rw(r), taken at ");
}
END_TEST

/* Waking from the wait on A, the thread takes A again holding B. */
static void cond_wait_holding_inner(void)
{
	pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
	struct timespec ts;

	ls_mutex_lock(&ma, &lc_test_a);
	ls_mutex_lock(&mb, &lc_test_b);
	clock_gettime(CLOCK_REALTIME, &ts);
	lockstat_cond_timedwait(&cv, &ma, &ts);
}

/* A wait on the innermost lock held is fine. */
static void cond_wait_innermost(void)
{
	pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
	struct timespec ts;

	ls_mutex_lock(&ma, &lc_test_a);
	ls_mutex_lock(&mb, &lc_test_b);
	clock_gettime(CLOCK_REALTIME, &ts);
	lockstat_cond_timedwait(&cv, &mb, &ts);
	ls_mutex_unlock(&mb);
	ls_mutex_unlock(&ma);
}

START_TEST(cond_wait_retakes_in_order)
{
	char err[8192];
	int status = t_child(cond_wait_holding_inner, err, sizeof(err));

	t_aborted(status, err, "inversion: test_b -> test_a here, but test_a -> test_b seen");
	t_exited(t_child(cond_wait_innermost, err, sizeof(err)), err);
}
END_TEST

static void assert_unheld(void)
{
	lock_assert_held(&ma);
}

static void assert_read_held_for_write(void)
{
	ls_rwlock_rdlock(&rw, &lc_test_rw_r);
	lock_assert_held(&rw);		/* fine */
	lock_assert_held_w(&rw);	/* not */
}

static void assert_off(void)
{
	lockdep_enable(false);
	lock_assert_held(&ma);
	lock_assert_held_w(&rw);
}

START_TEST(assert_held)
{
	char err[8192];
	int status;

	ls_mutex_lock(&ma, &lc_test_a);
	lock_assert_held(&ma);
	ls_rwlock_wrlock(&rw, &lc_test_rw_w);
	lock_assert_held_w(&rw);
	ls_rwlock_unlock(&rw);
	ls_mutex_unlock(&ma);

	status = t_child(assert_unheld, err, sizeof(err));
	t_aborted(status, err, "wbcfs lockdep: assert_unheld called without &ma held");
	status = t_child(assert_read_held_for_write, err, sizeof(err));
	t_aborted(status, err, "assert_read_held_for_write called without &rw held for writing");
	t_exited(t_child(assert_off, err, sizeof(err)), err);
}
END_TEST

/* The unit suite's environment turns it on (test/unit/meson.build). */
START_TEST(environment_turns_it_on)
{
	const char *e = getenv("WBCFS_LOCKDEP");

	ck_assert_int_eq(lockdep_enabled(), e && !strcmp(e, "1"));
	ck_assert_int_eq(lock_hooks_on(), e && !strcmp(e, "1"));
	ck_assert(!lockstat_enabled());
}
END_TEST

static Suite *lockdep_suite(void)
{
	Suite *s = suite_create("lockdep");
	TCase *tc = tcase_create("order");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, both_orders_abort);
	tcase_add_test(tc, orders_of_two_threads_abort);
	tcase_add_test(tc, inversion_through_a_third_class);
	tcase_add_test(tc, one_order_is_fine);
	tcase_add_test(tc, trylock_records_no_edge);
	tcase_add_test(tc, rwlock_modes_are_one_class);
	tcase_add_test(tc, taking_a_held_lock_aborts);
	tcase_add_test(tc, cond_wait_retakes_in_order);
	tcase_add_test(tc, assert_held);
	suite_add_tcase(s, tc);
	tc = tcase_create("switch");
	tcase_add_test(tc, environment_turns_it_on);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return t_run(lockdep_suite());
}
