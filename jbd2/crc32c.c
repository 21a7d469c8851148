// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * crc32c for every metadata checksum, with the CPU's crc32 instruction.
 *
 * With metadata_csum, ext4 checksums every directory block, extent block,
 * bitmap, inode and descriptor with crc32c, and the journal (checksums
 * v3) every block it logs. libext2fs computes crc32c in software (a
 * table per byte), and verifies a directory or extent block's checksum
 * each time it reads it, from our cache too: under dbench -F that was a
 * tenth of the daemon's CPU. x86-64's SSE4.2 crc32 instruction computes
 * the same polynomial, reflected, 8 bytes at a time.
 *
 * libext2fs calls ext2fs_crc32c_le through its PLT, so the definition
 * below, in the executable, takes its place for libext2fs's own callers
 * as well as ours (ELF symbol interposition, as malloc replacements do).
 * The function is the same: crc32c of @len bytes at @p continuing from
 * @crc, without inversion before or after. Other CPUs (not x86-64, or
 * without SSE4.2) get libext2fs's own, found with dlsym(RTLD_NEXT) at
 * startup. test_crc32c checks both against each other and that
 * libext2fs's calls reach this one.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jbd2_i.h"

typedef uint32_t (*crc32c_fn)(uint32_t crc, unsigned char const *p, size_t len);

static crc32c_fn crc32c_impl;		/* set before main(), then constant */
static bool crc32c_hw;			/* the same: crc32c_impl is crc32c_sse42 */
static __thread unsigned long nr_calls;	/* this thread's calls (test_crc32c) */

#ifdef __x86_64__
#include <nmmintrin.h>

__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(uint32_t crc, unsigned char const *p, size_t len)
{
	uint64_t c = crc;

	for (; len >= 8; p += 8, len -= 8) {
		uint64_t v;

		memcpy(&v, p, sizeof(v));
		c = _mm_crc32_u64(c, v);
	}
	crc = (uint32_t)c;
	while (len--)
		crc = _mm_crc32_u8(crc, *p++);
	return crc;
}
#endif

/* libext2fs's own: the next definition after this executable's. */
static crc32c_fn crc32c_library(void)
{
	return (crc32c_fn)dlsym(RTLD_NEXT, "ext2fs_crc32c_le");
}

__attribute__((constructor))
static void crc32c_init(void)
{
#ifdef __x86_64__
	__builtin_cpu_init();
	if (__builtin_cpu_supports("sse4.2")) {
		crc32c_impl = crc32c_sse42;
		crc32c_hw = true;
		return;
	}
#endif
	crc32c_impl = crc32c_library();
	if (!crc32c_impl) {
		fprintf(stderr, "wbcfs: cannot find libext2fs's ext2fs_crc32c_le: %s\n", dlerror());
		abort();
	}
}

uint32_t ext2fs_crc32c_le(uint32_t crc, unsigned char const *p, size_t len)
{
	nr_calls++;
	return crc32c_impl(crc, p, len);
}

bool jbd2_crc32c_is_hw(void)
{
	return crc32c_hw;
}

unsigned long jbd2_crc32c_calls(void)
{
	return nr_calls;
}

uint32_t jbd2_crc32c_library(uint32_t crc, const void *p, size_t len)
{
	return crc32c_library()(crc, p, len);
}
