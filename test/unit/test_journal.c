// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The journal's pieces that stand alone: the block hash table (against a
 * plain array model, with deletions that shift probe chains) and the jbd2
 * format helpers (tag sizes per feature set, crc32c, checksum placement).
 */
#include <check.h>
#include "helpers.h"
#include <stdlib.h>
#include <string.h>
#include "wbcfs/jbd2.h"
#include "wbcfs/jbd2.h"

START_TEST(jtab_basic)
{
	struct jtab t = { 0 };

	ck_assert_ptr_null(jtab_find(&t, 0));
	ck_assert(!jtab_del(&t, 7));
	ck_assert_int_eq(jtab_put(&t, 0, 10), 0);	/* block 0: the superblock */
	ck_assert_int_eq(jtab_put(&t, 7, 70), 0);
	ck_assert_int_eq(jtab_put(&t, 7, 71), 0);	/* update */
	ck_assert_uint_eq(t.n, 2);
	ck_assert_uint_eq(*jtab_find(&t, 0), 10);
	ck_assert_uint_eq(*jtab_find(&t, 7), 71);
	ck_assert(jtab_del(&t, 0));
	ck_assert_ptr_null(jtab_find(&t, 0));
	ck_assert_uint_eq(*jtab_find(&t, 7), 71);
	jtab_clear(&t);
	ck_assert_uint_eq(t.n, 0);
	ck_assert_ptr_null(jtab_find(&t, 7));
	jtab_free(&t);
}
END_TEST

/* Random puts and deletes against a model array; every key checked. */
START_TEST(jtab_model)
{
	enum { KEYS = 5000, OPS = 200000 };
	static uint32_t model[KEYS];
	static bool present[KEYS];
	struct jtab t = { 0 };
	unsigned seed = 12345, i, k;

	memset(present, 0, sizeof(present));
	for (i = 0; i < OPS; i++) {
		unsigned r = (unsigned)rand_r(&seed);
		/* keys spread over a large range, many colliding in the hash */
		uint64_t key;

		k = r % KEYS;
		key = (uint64_t)k * 4096 + (k & 3) * (1ULL << 40);
		if (r & 0x10000) {
			ck_assert_int_eq(jtab_put(&t, key, i), 0);
			model[k] = i;
			present[k] = true;
		} else {
			ck_assert_int_eq(jtab_del(&t, key), present[k]);
			present[k] = false;
		}
	}
	for (k = 0, i = 0; k < KEYS; k++) {
		uint64_t key = (uint64_t)k * 4096 + (k & 3) * (1ULL << 40);
		uint32_t *v = jtab_find(&t, key);

		if (present[k]) {
			ck_assert_ptr_nonnull(v);
			ck_assert_uint_eq(*v, model[k]);
			i++;
		} else {
			ck_assert_ptr_null(v);
		}
	}
	ck_assert_uint_eq(t.n, i);
	jtab_free(&t);
}
END_TEST

START_TEST(tag_sizes)
{
	struct jbd2_superblock sb;

	memset(&sb, 0, sizeof(sb));
	ck_assert_uint_eq(jbd2_tag_bytes(&sb), 8);
	sb.s_feature_incompat = htobe32(JBD2_FEATURE_INCOMPAT_64BIT);
	ck_assert_uint_eq(jbd2_tag_bytes(&sb), 12);
	sb.s_feature_incompat = htobe32(JBD2_FEATURE_INCOMPAT_CSUM_V2);
	ck_assert_uint_eq(jbd2_tag_bytes(&sb), 10);
	sb.s_feature_incompat = htobe32(JBD2_FEATURE_INCOMPAT_CSUM_V2 |
					JBD2_FEATURE_INCOMPAT_64BIT);
	ck_assert_uint_eq(jbd2_tag_bytes(&sb), 14);
	sb.s_feature_incompat = htobe32(JBD2_FEATURE_INCOMPAT_CSUM_V3);
	ck_assert_uint_eq(jbd2_tag_bytes(&sb), 16);
	ck_assert(jbd2_has_csum(&sb));
	ck_assert_uint_eq(offsetof(struct jbd2_superblock, s_checksum), 0xFC);
	ck_assert_uint_eq(offsetof(struct jbd2_superblock, s_num_fc_blks), 0x54);
	ck_assert_uint_eq(offsetof(struct jbd2_commit, h_commit_sec), 0x30);
}
END_TEST

START_TEST(checksums)
{
	static char blk[4096];
	uint32_t c;

	/* the standard crc32c check value */
	ck_assert_uint_eq(jbd2_crc(~0U, "123456789", 9) ^ ~0U, 0xE3069283);
	/* the checksum field does not take part in its own checksum */
	memset(blk, 0xA5, sizeof(blk));
	c = jbd2_tail_csum(1, blk, sizeof(blk));
	memset(blk + sizeof(blk) - 4, 0, 4);
	ck_assert_uint_eq(jbd2_crc(1, blk, sizeof(blk)), c);
	memset(blk + offsetof(struct jbd2_commit, h_chksum), 0x11, 4);
	c = jbd2_commit_csum(7, blk, sizeof(blk));
	memset(blk + offsetof(struct jbd2_commit, h_chksum), 0, 4);
	ck_assert_uint_eq(jbd2_crc(7, blk, sizeof(blk)), c);
	/* tags: the sequence, then the block */
	ck_assert_uint_eq(jbd2_block_csum(3, 0x01020304, blk, sizeof(blk)),
			  jbd2_crc(jbd2_crc(3, "\x01\x02\x03\x04", 4), blk, sizeof(blk)));
	ck_assert(jbd2_tid_gt(1, 0xFFFFFFFF));
	ck_assert(!jbd2_tid_gt(5, 5));
}
END_TEST

/* The log as a ring: room, wrap and what it holds, across its end. */
START_TEST(ring)
{
	/* blocks [1, 11): ten, one always free */
	ck_assert_uint_eq(jbd2_ring_room(1, 11, 1, 1, true), 9);
	ck_assert_uint_eq(jbd2_ring_room(1, 11, 1, 4, false), 6);
	/* wrapped: the head before the tail */
	ck_assert_uint_eq(jbd2_ring_room(1, 11, 8, 3, false), 4);
	ck_assert_uint_eq(jbd2_ring_room(1, 11, 8, 7, false), 0);
	ck_assert_uint_eq(jbd2_ring_wrap(1, 11, 10), 10);
	ck_assert_uint_eq(jbd2_ring_wrap(1, 11, 11), 1);
	ck_assert_uint_eq(jbd2_ring_wrap(1, 11, 13), 3);
	ck_assert(jbd2_ring_holds(8, 3, false, 10));
	ck_assert(jbd2_ring_holds(8, 3, false, 1));
	ck_assert(!jbd2_ring_holds(8, 3, false, 3));
	ck_assert(!jbd2_ring_holds(8, 3, false, 5));
	ck_assert(jbd2_ring_holds(2, 5, false, 4));
	ck_assert(!jbd2_ring_holds(2, 5, false, 7));
	ck_assert(!jbd2_ring_holds(2, 5, true, 3));
}
END_TEST

/* The oldest pinning transaction: in id order, across the ids' wrap. */
START_TEST(min_tid)
{
	struct jtab t = { 0 };

	ck_assert_uint_eq(jtab_min_tid(&t, 42), 42);
	ck_assert_int_eq(jtab_put(&t, 100, 7), 0);
	ck_assert_int_eq(jtab_put(&t, 200, 5), 0);
	ck_assert_int_eq(jtab_put(&t, 300, 9), 0);
	ck_assert_uint_eq(jtab_min_tid(&t, 42), 5);
	/* a block logged again pins only its newest transaction */
	ck_assert_int_eq(jtab_put(&t, 200, 10), 0);
	ck_assert_uint_eq(jtab_min_tid(&t, 42), 7);
	/* ids wrap: 0xFFFFFFFE is older than 1 */
	jtab_clear(&t);
	ck_assert_int_eq(jtab_put(&t, 1, 1), 0);
	ck_assert_int_eq(jtab_put(&t, 2, 0xFFFFFFFEU), 0);
	ck_assert_uint_eq(jtab_min_tid(&t, 42), 0xFFFFFFFEU);
	ck_assert(jtab_del(&t, 2));
	ck_assert_uint_eq(jtab_min_tid(&t, 42), 1);
	jtab_free(&t);
}
END_TEST

static Suite *journal_suite(void)
{
	Suite *s = suite_create("journal");

	t_tcase(s, "journal", jtab_basic, jtab_model, tag_sizes, checksums, ring, min_tid);
	return s;
}

int main(void)
{
	return t_run(journal_suite());
}
