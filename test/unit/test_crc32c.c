// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * crc32c as wbcfs uses it: libext2fs's ext2fs_crc32c_le, reached by the
 * journal through jbd2_crc(). The convention is the kernel's crc32c():
 * no inversion inside, the caller gives the starting value (~0 for a
 * seed, the seed for a checksum). Known vectors: the CRC-32C check value
 * and RFC 3720's (B.4), which invert in and out, and a journal seed and
 * block checksum, which the SSE4.2 implementation wbcfs had before and
 * libext2fs's gave alike (checked before that one was removed).
 */
#include <check.h>
#include <string.h>
#include <ext2fs/ext2fs.h>
#include "helpers.h"

#include "wbcfs/jbd2/format.h"

/* crc32c of @len bytes, inverted in and out (the published vectors' form). */
static uint32_t crc_std(const void *p, size_t len)
{
	return ~jbd2_crc(~0U, p, len);
}

START_TEST(known_vectors)
{
	unsigned char b[32];
	int i;

	ck_assert_uint_eq(crc_std("123456789", 9), 0xE3069283U);
	memset(b, 0, sizeof(b));
	ck_assert_uint_eq(crc_std(b, sizeof(b)), 0x8A9136AAU);
	memset(b, 0xFF, sizeof(b));
	ck_assert_uint_eq(crc_std(b, sizeof(b)), 0x62A8AB43U);
	for (i = 0; i < 32; i++)
		b[i] = (unsigned char)i;
	ck_assert_uint_eq(crc_std(b, sizeof(b)), 0x46DD794EU);
	for (i = 0; i < 32; i++)
		b[i] = (unsigned char)(31 - i);
	ck_assert_uint_eq(crc_std(b, sizeof(b)), 0x113FDB5CU);
	/* the wrapper is libext2fs's function, uninverted */
	ck_assert_uint_eq(jbd2_crc(0x1234U, NULL, 0), 0x1234U);
	ck_assert_uint_eq(jbd2_crc(~0U, b, sizeof(b)), ext2fs_crc32c_le(~0U, b, sizeof(b)));
}
END_TEST

/* The journal's seed, crc32c(~0, uuid), and a block's checksum from it. */
START_TEST(journal_seed_and_block)
{
	static unsigned char blk[4096];
	struct jbd2_superblock jsb;
	struct struct_ext2_filsys fs;
	struct ext2_super_block sb;
	uint32_t seed;
	int i;

	memset(&jsb, 0, sizeof(jsb));
	for (i = 0; i < (int)sizeof(jsb.s_uuid); i++)
		jsb.s_uuid[i] = (unsigned char)(0x10 + i);
	for (i = 0; i < (int)sizeof(blk); i++)
		blk[i] = (unsigned char)(i * 7 + 3);
	seed = jbd2_csum_seed(&jsb);
	ck_assert_uint_eq(seed, 0x58F0A594U);
	ck_assert_uint_eq(jbd2_crc(seed, blk, sizeof(blk)), 0x029DCD62U);
	/* ext4's metadata seed follows the same convention */
	memset(&fs, 0, sizeof(fs));
	memset(&sb, 0, sizeof(sb));
	memcpy(sb.s_uuid, jsb.s_uuid, sizeof(sb.s_uuid));
	ext2fs_set_feature_metadata_csum(&sb);
	fs.super = &sb;
	ext2fs_init_csum_seed(&fs);
	ck_assert_uint_eq(fs.csum_seed, seed);
}
END_TEST

START_TEST(continues)
{
	unsigned char buf[1000];
	size_t cut;

	for (cut = 0; cut < sizeof(buf); cut++)
		buf[cut] = (unsigned char)(cut * 7 + 3);
	for (cut = 0; cut <= sizeof(buf); cut += 37)
		ck_assert_uint_eq(jbd2_crc(jbd2_crc(~0U, buf, cut), buf + cut, sizeof(buf) - cut),
				  jbd2_crc(~0U, buf, sizeof(buf)));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("crc32c");

	t_tcase(s, "crc32c", known_vectors, journal_seed_and_block, continues);
	return t_run(s);
}
