/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The millisecond clock every timing decision reads (HZ = 1000, as in
 * ALGORITHMS.md). Unit tests install a fake clock with clock_set_fake().
 */
#ifndef WBCFS_CLOCK_H
#define WBCFS_CLOCK_H

#include <stdint.h>

#define HZ 1000

/** Monotonic milliseconds, or the fake clock's value when one is set. */
uint64_t clock_now_ms(void);

/** Install a fake clock source (NULL restores the real one). Tests only. */
void clock_set_fake(uint64_t (*fn)(void));

#endif
