// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * dcache.c: a directory's name cache answers lookups exactly as the
 * directory would, through any sequence of adds, repoints and removals
 * and the growth of its hash (it starts at 16 buckets), for names of
 * every length ext4 allows and names that differ in one byte. LOOKUPs
 * are served from it without fs_lock (and a miss is a negative entry the
 * kernel keeps), so a name it loses or keeps too long is a wrong answer.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "helpers.h"

#include "../../ext4/ext4_i.h"

#define NNAMES 3000

struct model {
	char name[NNAMES][EXT2_NAME_LEN + 1];
	ext2_ino_t ino[NNAMES];		/* 0: absent */
};

static void make_names(struct model *m, unsigned seed)
{
	int i, j;

	srand(seed);
	for (i = 0; i < NNAMES; i++) {
		int len = i < 255 ? i + 1 : 1 + rand() % EXT2_NAME_LEN;

		if (i >= 255 && i % 7 == 0) {
			/* the one before, its first byte different ('~' starts
			 * no other name) */
			len = (int)strlen(m->name[i - 1]);
			memcpy(m->name[i], m->name[i - 1], (size_t)len + 1);
			m->name[i][0] = '~';
			continue;
		}
		for (j = 0; j < len; j++)
			m->name[i][j] = (char)('!' + rand() % 90);	/* '!'..'z' */
		m->name[i][len] = 0;
		/* names are distinct: a suffix of the index where long enough */
		if (len > 8)
			snprintf(m->name[i] + len - 6, 7, "%06d", i);
		else if (i >= 255)
			snprintf(m->name[i], 9, "%08d", i);
	}
	/* the first 255 are "a", "aa", ... up to 255 bytes */
	for (i = 0; i < 255; i++) {
		memset(m->name[i], 'a', (size_t)i + 1);
		m->name[i][i + 1] = 0;
	}
}

/* The cache answers name @i as the model says. */
static void check_one(struct dcache *dc, const struct model *m, int i)
{
	ext2_ino_t ino = 0;
	int ret = dcache_lookup(dc, m->name[i], &ino);

	if (m->ino[i]) {
		ck_assert_msg(ret == 0, "name %d (%zu bytes) lost", i, strlen(m->name[i]));
		ck_assert_uint_eq(ino, m->ino[i]);
	} else {
		ck_assert_msg(ret == -ENOENT, "name %d (%zu bytes) kept after removal", i,
			      strlen(m->name[i]));
	}
}

static void check_all(struct dcache *dc, const struct model *m)
{
	int i;

	for (i = 0; i < NNAMES; i++)
		check_one(dc, m, i);
}

/* An empty cache, and a model of its names (all absent) from @seed. */
static struct dcache *setup(struct model *m, unsigned seed)
{
	struct dcache *dc = dcache_new();

	ck_assert_ptr_nonnull(dc);
	memset(m, 0, sizeof(*m));
	make_names(m, seed);
	return dc;
}

START_TEST(matches_a_model)
{
	static struct model m;
	struct dcache *dc = setup(&m, 4242);
	int op;

	for (op = 0; op < 60000; op++) {
		int i = rand() % NNAMES, r = rand() % 10;

		if (r < 6) {		/* add or repoint */
			m.ino[i] = (ext2_ino_t)(1 + rand() % 1000000);
			ck_assert_int_eq(dcache_set(dc, m.name[i], m.ino[i]), 0);
		} else if (r < 9) {	/* remove (of an absent name too) */
			m.ino[i] = 0;
			dcache_remove(dc, m.name[i]);
		} else {
			check_one(dc, &m, i);
		}
		if (op % 10000 == 0)
			check_all(dc, &m);
	}
	check_all(dc, &m);
	dcache_free(dc);
}
END_TEST

START_TEST(grows_and_empties)
{
	static struct model m;
	struct dcache *dc = setup(&m, 7);
	int i;

	/* every name in, one by one, checked as the hash doubles past 16 */
	for (i = 0; i < NNAMES; i++) {
		m.ino[i] = (ext2_ino_t)(i + 11);
		ck_assert_int_eq(dcache_set(dc, m.name[i], m.ino[i]), 0);
		if ((i & (i + 1)) == 0)		/* 2^k - 1 entries */
			check_all(dc, &m);
	}
	check_all(dc, &m);
	/* all out again: nothing answers */
	for (i = NNAMES - 1; i >= 0; i--) {
		dcache_remove(dc, m.name[i]);
		m.ino[i] = 0;
	}
	check_all(dc, &m);
	/* and back, repointed */
	for (i = 0; i < NNAMES; i += 3) {
		m.ino[i] = (ext2_ino_t)(i + 99);
		ck_assert_int_eq(dcache_set(dc, m.name[i], m.ino[i]), 0);
	}
	check_all(dc, &m);
	dcache_free(dc);
	dcache_free(NULL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dcache");

	t_tcase(s, "dcache", matches_a_model, grows_and_empties);
	return t_run(s);
}
