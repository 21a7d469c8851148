/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The millisecond clock every timing decision reads (HZ = 1000, as in
 * doc/algorithms.md §0). Unit tests install a fake clock with clock_set_fake().
 */
#ifndef WBCFS_CLOCK_H
#define WBCFS_CLOCK_H

#include <pthread.h>
#include <stdint.h>

#define HZ 1000

/** Monotonic milliseconds, or the fake clock's value when one is set. */
uint64_t clock_now_ms(void);

/**
 * Monotonic nanoseconds of real time, never the fake clock: for measuring
 * (spins, phase times), not for timing decisions a test must control.
 */
uint64_t clock_real_ns(void);

/**
 * pthread_cond_timedwait for at most @ms of real time (the condition's
 * clock, CLOCK_REALTIME; never the fake clock). Context: @m held.
 */
int clock_cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *m, long ms);

/** Install a fake clock source (NULL restores the real one). Tests only. */
void clock_set_fake(uint64_t (*fn)(void));

#endif
