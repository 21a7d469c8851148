/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A hash table of block numbers (any uint64 but JTAB_EMPTY) with a 32-bit
 * value each. Not thread-safe: the owner's lock protects it.
 */
#ifndef WBCFS_FS_JTAB_H
#define WBCFS_FS_JTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JTAB_EMPTY UINT64_MAX

struct jtab {
	uint64_t *key;			/* JTAB_EMPTY: a free slot */
	uint32_t *val;
	size_t cap, n;			/* cap: a power of two, or 0 */
};

/** The value of @k, or NULL. */
uint32_t *jtab_find(const struct jtab *t, uint64_t k);
/** Insert or update. Returns 0 or -ENOMEM. */
int jtab_put(struct jtab *t, uint64_t k, uint32_t v);
/** Remove @k; false when it was not there. */
bool jtab_del(struct jtab *t, uint64_t k);
void jtab_clear(struct jtab *t);
void jtab_free(struct jtab *t);

/** The oldest value in transaction id order (ids wrap), or @dflt when empty. */
uint32_t jtab_min_tid(const struct jtab *t, uint32_t dflt);

#endif
