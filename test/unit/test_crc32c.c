// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * crc32c.c: the crc32 instruction's crc32c is libext2fs's, bit for bit,
 * for any length, alignment and starting value, and libext2fs's own
 * checksum code calls it (the executable's ext2fs_crc32c_le takes the
 * library's place).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <ext2fs/ext2fs.h>
#include "helpers.h"

#include "../../ext4/ext4_i.h"
#include "wbcfs/jbd2/format.h"

START_TEST(known_value)
{
	/* the check value of CRC-32C (Castagnoli): inverted in and out */
	ck_assert_uint_eq(~ext2fs_crc32c_le(~0U, (unsigned char const *)"123456789", 9),
			  0xE3069283U);
	ck_assert_uint_eq(ext2fs_crc32c_le(0x1234U, NULL, 0), 0x1234U);
}
END_TEST

START_TEST(same_as_library)
{
	static unsigned char buf[8192 + 64];
	unsigned seed = 12345;
	int i;

	srand(seed);
	for (i = 0; i < (int)sizeof(buf); i++)
		buf[i] = (unsigned char)rand();
	for (i = 0; i < 4000; i++) {
		size_t off = (size_t)(rand() % 64);
		size_t len = (size_t)(i < 200 ? i : rand() % 8193);
		uint32_t crc = (uint32_t)rand() ^ ((uint32_t)rand() << 16);

		ck_assert_msg(ext2fs_crc32c_le(crc, buf + off, len) ==
			      jbd2_crc32c_library(crc, buf + off, len),
			      "crc32c differs at offset %zu length %zu", off, len);
	}
	/* a whole block, as the journal and the metadata checksums use it */
	ck_assert_uint_eq(ext2fs_crc32c_le(~0U, buf, 4096), jbd2_crc32c_library(~0U, buf, 4096));
}
END_TEST

START_TEST(continues)
{
	unsigned char buf[1000];
	size_t cut;

	for (cut = 0; cut < sizeof(buf); cut++)
		buf[cut] = (unsigned char)(cut * 7 + 3);
	for (cut = 0; cut <= sizeof(buf); cut += 37)
		ck_assert_uint_eq(ext2fs_crc32c_le(ext2fs_crc32c_le(~0U, buf, cut), buf + cut,
						   sizeof(buf) - cut),
				  ext2fs_crc32c_le(~0U, buf, sizeof(buf)));
}
END_TEST

START_TEST(library_calls_reach_it)
{
	struct struct_ext2_filsys fs;
	struct ext2_super_block sb;
	unsigned long before;
	int i;

	memset(&fs, 0, sizeof(fs));
	memset(&sb, 0, sizeof(sb));
	for (i = 0; i < (int)sizeof(sb.s_uuid); i++)
		sb.s_uuid[i] = (unsigned char)(0x10 + i);
	ext2fs_set_feature_metadata_csum(&sb);
	fs.super = &sb;
	before = jbd2_crc32c_calls();
	/* libext2fs computes the seed, crc32c(~0, uuid), through its PLT */
	ext2fs_init_csum_seed(&fs);
	ck_assert_uint_gt(jbd2_crc32c_calls(), before);
	ck_assert_uint_eq(fs.csum_seed, jbd2_crc32c_library(~0U, sb.s_uuid, sizeof(sb.s_uuid)));
}
END_TEST

START_TEST(hardware_when_the_cpu_has_it)
{
#ifdef __x86_64__
	__builtin_cpu_init();
	ck_assert_int_eq(jbd2_crc32c_is_hw(), __builtin_cpu_supports("sse4.2") != 0);
#else
	ck_assert(!jbd2_crc32c_is_hw());
#endif
}
END_TEST

/*
 * Published vectors (inverted in and out) and a journal seed and block
 * checksum, through the journal's wrapper (the instruction here) and
 * libext2fs's own: the constants libext2fs alone must give once it is
 * the only implementation.
 */
START_TEST(known_vectors)
{
	static unsigned char blk[4096];
	struct jbd2_superblock jsb;
	unsigned char b[32];
	uint32_t seed;
	int i;

	memset(b, 0, sizeof(b));
	ck_assert_uint_eq(~jbd2_crc(~0U, b, 32), 0x8A9136AAU);
	ck_assert_uint_eq(~jbd2_crc32c_library(~0U, b, 32), 0x8A9136AAU);
	memset(b, 0xFF, sizeof(b));
	ck_assert_uint_eq(~jbd2_crc(~0U, b, 32), 0x62A8AB43U);
	ck_assert_uint_eq(~jbd2_crc32c_library(~0U, b, 32), 0x62A8AB43U);
	for (i = 0; i < 32; i++)
		b[i] = (unsigned char)i;
	ck_assert_uint_eq(~jbd2_crc(~0U, b, 32), 0x46DD794EU);
	ck_assert_uint_eq(~jbd2_crc32c_library(~0U, b, 32), 0x46DD794EU);
	for (i = 0; i < 32; i++)
		b[i] = (unsigned char)(31 - i);
	ck_assert_uint_eq(~jbd2_crc(~0U, b, 32), 0x113FDB5CU);
	ck_assert_uint_eq(~jbd2_crc32c_library(~0U, b, 32), 0x113FDB5CU);
	memset(&jsb, 0, sizeof(jsb));
	for (i = 0; i < (int)sizeof(jsb.s_uuid); i++)
		jsb.s_uuid[i] = (unsigned char)(0x10 + i);
	for (i = 0; i < (int)sizeof(blk); i++)
		blk[i] = (unsigned char)(i * 7 + 3);
	seed = jbd2_csum_seed(&jsb);
	ck_assert_uint_eq(seed, 0x58F0A594U);
	ck_assert_uint_eq(jbd2_crc32c_library(~0U, jsb.s_uuid, sizeof(jsb.s_uuid)), seed);
	ck_assert_uint_eq(jbd2_crc(seed, blk, sizeof(blk)), 0x029DCD62U);
	ck_assert_uint_eq(jbd2_crc32c_library(seed, blk, sizeof(blk)), 0x029DCD62U);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("crc32c");

	t_tcase(s, "crc32c", known_value, known_vectors, same_as_library, continues, library_calls_reach_it,
		hardware_when_the_cpu_has_it);
	return t_run(s);
}
