/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Shared unit-test helpers (t_ prefix, as liburing's test/helpers.c). */
#ifndef WBCFS_TEST_HELPERS_H
#define WBCFS_TEST_HELPERS_H

#include <check.h>
#include <stdint.h>

/** Install a fake millisecond clock starting at @start_ms. */
void t_clock_fake(uint64_t start_ms);
/** Advance the fake clock. */
void t_clock_advance(uint64_t ms);
/** Current fake time. */
uint64_t t_clock_now(void);
/** Back to the real clock. */
void t_clock_real(void);

/** A temporary file of @size bytes in /tmp (or $TMPDIR); path in @path (>= 64 bytes). Returns fd. */
int t_tmpfile(char *path, uint64_t size);

/** Run @s (verbosity from CK_VERBOSITY); EXIT_SUCCESS when nothing failed. */
int t_run(Suite *s);

#endif
