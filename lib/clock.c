// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The millisecond clock (HZ = 1000). Real time is CLOCK_MONOTONIC; unit
 * tests swap in a fake source so timing logic runs deterministically.
 */
#include <stdatomic.h>
#include <time.h>
#include "wbcfs/lib/clock.h"
#include "wbcfs/lib/lockstat.h"

static uint64_t (*_Atomic fake_clock)(void);

uint64_t clock_now_ms(void)
{
	uint64_t (*fn)(void) = atomic_load(&fake_clock);
	struct timespec ts;

	if (fn)
		return fn();
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t clock_real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int clock_cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *m, long ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	/* the sleep is not hold time of a lock lockstat times */
	return lockstat_cond_timedwait(cond, m, &ts);
}

void clock_set_fake(uint64_t (*fn)(void))
{
	atomic_store(&fake_clock, fn);
}
