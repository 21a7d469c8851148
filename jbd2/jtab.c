// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A hash table of block numbers with a 32-bit value each: open addressing,
 * linear probing, backward-shift deletion (no tombstones, so a table that
 * sees many deletions stays fast). The journal's block sets.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jbd2_i.h"

static size_t jtab_slot(const struct jtab *t, uint64_t k)
{
	return (size_t)((k * 0x9E3779B97F4A7C15ULL) >> 20) & (t->cap - 1);
}

static int jtab_grow(struct jtab *t)
{
	struct jtab n = { 0 };
	size_t i;

	n.cap = t->cap ? t->cap * 2 : 256;
	n.key = malloc(n.cap * sizeof(*n.key));
	n.val = malloc(n.cap * sizeof(*n.val));
	if (!n.key || !n.val) {
		free(n.key);
		free(n.val);
		return -ENOMEM;
	}
	for (i = 0; i < n.cap; i++)
		n.key[i] = JTAB_EMPTY;
	for (i = 0; i < t->cap; i++) {
		if (t->key[i] != JTAB_EMPTY) {
			size_t s = jtab_slot(&n, t->key[i]);

			while (n.key[s] != JTAB_EMPTY)
				s = (s + 1) & (n.cap - 1);
			n.key[s] = t->key[i];
			n.val[s] = t->val[i];
			n.n++;
		}
	}
	free(t->key);
	free(t->val);
	*t = n;
	return 0;
}

uint32_t *jtab_find(const struct jtab *t, uint64_t k)
{
	size_t s;

	if (!t->n)
		return NULL;
	for (s = jtab_slot(t, k); t->key[s] != JTAB_EMPTY; s = (s + 1) & (t->cap - 1))
		if (t->key[s] == k)
			return &t->val[s];
	return NULL;
}

int jtab_put(struct jtab *t, uint64_t k, uint32_t v)
{
	uint32_t *p = jtab_find(t, k);
	size_t s;

	if (p) {
		*p = v;
		return 0;
	}
	if ((t->n + 1) * 2 > t->cap && jtab_grow(t))
		return -ENOMEM;
	for (s = jtab_slot(t, k); t->key[s] != JTAB_EMPTY; s = (s + 1) & (t->cap - 1))
		;
	t->key[s] = k;
	t->val[s] = v;
	t->n++;
	return 0;
}

/* Remove @k (backward-shift deletion keeps probe chains whole). */
bool jtab_del(struct jtab *t, uint64_t k)
{
	size_t s, i, h;

	if (!t->n)
		return false;
	for (s = jtab_slot(t, k); t->key[s] != k; s = (s + 1) & (t->cap - 1))
		if (t->key[s] == JTAB_EMPTY)
			return false;
	t->key[s] = JTAB_EMPTY;
	t->n--;
	for (i = (s + 1) & (t->cap - 1); t->key[i] != JTAB_EMPTY; i = (i + 1) & (t->cap - 1)) {
		h = jtab_slot(t, t->key[i]);
		/* move it back if its home is not in (s, i] */
		if ((i > s && (h <= s || h > i)) || (i < s && h <= s && h > i)) {
			t->key[s] = t->key[i];
			t->val[s] = t->val[i];
			t->key[i] = JTAB_EMPTY;
			s = i;
		}
	}
	return true;
}

void jtab_clear(struct jtab *t)
{
	size_t i;

	for (i = 0; i < t->cap; i++)
		t->key[i] = JTAB_EMPTY;
	t->n = 0;
}

void jtab_free(struct jtab *t)
{
	free(t->key);
	free(t->val);
	memset(t, 0, sizeof(*t));
}


uint32_t jtab_min_tid(const struct jtab *t, uint32_t dflt)
{
	bool any = false;
	uint32_t m = dflt;
	size_t i;

	for (i = 0; i < t->cap && t->n; i++)
		if (t->key[i] != JTAB_EMPTY && (!any || (int32_t)(m - t->val[i]) > 0)) {
			m = t->val[i];
			any = true;
		}
	return m;
}
