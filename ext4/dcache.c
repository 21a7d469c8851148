// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A name -> inode cache of one directory. libext2fs directories are
 * linear here (no htree is built), so every lookup, create and unlink
 * would scan the whole directory; the kernel sends a LOOKUP before each
 * create, so a create costs three scans. A directory gets a hash of its
 * entries at its first lookup, built by one scan and kept exact by dir.c,
 * which updates it after every entry it adds, removes or repoints; it
 * also answers LOOKUPs without fs_lock (dir.c: dir_lookup).
 * Context: the caller serialises changes against lookups (dir.c: fs_lock
 * and the directory's dc_lock).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ext4_i.h"

struct dcache_ent {
	struct dcache_ent *next;
	ext2_ino_t ino;
	unsigned char len;
	char name[];
};

struct dcache {
	struct dcache_ent **bucket;
	size_t nbuckets;	/* power of two */
	size_t n;
};

static uint32_t dcache_hash(const char *name, size_t len)
{
	uint32_t h = 2166136261u;	/* FNV-1a */
	size_t i;

	for (i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * 16777619u;
	return h;
}

static struct dcache_ent **dcache_slot(struct dcache *dc, const char *name, size_t len)
{
	struct dcache_ent **pp = &dc->bucket[dcache_hash(name, len) & (dc->nbuckets - 1)];

	while (*pp && ((*pp)->len != len || memcmp((*pp)->name, name, len)))
		pp = &(*pp)->next;
	return pp;
}

static int dcache_grow(struct dcache *dc)
{
	size_t nb = dc->nbuckets * 2, i;
	struct dcache_ent **b = calloc(nb, sizeof(*b));

	if (!b)
		return -ENOMEM;
	for (i = 0; i < dc->nbuckets; i++) {
		struct dcache_ent *e = dc->bucket[i], *next;

		for (; e; e = next) {
			size_t s = dcache_hash(e->name, e->len) & (nb - 1);

			next = e->next;
			e->next = b[s];
			b[s] = e;
		}
	}
	free(dc->bucket);
	dc->bucket = b;
	dc->nbuckets = nb;
	return 0;
}

/* Add or repoint @name. Returns 0 or -ENOMEM (the caller drops the cache). */
int dcache_set(struct dcache *dc, const char *name, ext2_ino_t ino)
{
	size_t len = strlen(name);
	struct dcache_ent **pp = dcache_slot(dc, name, len), *e;

	if (*pp) {
		(*pp)->ino = ino;
		return 0;
	}
	if (dc->n >= dc->nbuckets && dcache_grow(dc))
		return -ENOMEM;
	pp = dcache_slot(dc, name, len);
	e = malloc(sizeof(*e) + len);
	if (!e)
		return -ENOMEM;
	e->ino = ino;
	e->len = (unsigned char)len;
	memcpy(e->name, name, len);
	e->next = NULL;
	*pp = e;
	dc->n++;
	return 0;
}

void dcache_remove(struct dcache *dc, const char *name)
{
	struct dcache_ent **pp = dcache_slot(dc, name, strlen(name)), *e = *pp;

	if (!e)
		return;
	*pp = e->next;
	free(e);
	dc->n--;
}

int dcache_lookup(struct dcache *dc, const char *name, ext2_ino_t *ino)
{
	struct dcache_ent *e = *dcache_slot(dc, name, strlen(name));

	if (!e)
		return -ENOENT;
	*ino = e->ino;
	return 0;
}

void dcache_free(struct dcache *dc)
{
	size_t i;

	if (!dc)
		return;
	for (i = 0; i < dc->nbuckets; i++) {
		struct dcache_ent *e = dc->bucket[i], *next;

		for (; e; e = next) {
			next = e->next;
			free(e);
		}
	}
	free(dc->bucket);
	free(dc);
}

struct build_ctx {
	struct dcache *dc;
	int err;
};

static int dcache_build_cb(ext2_ino_t dir, int entry, struct ext2_dir_entry *d, int offset,
			   int blocksize, char *buf, void *priv)
{
	struct build_ctx *b = priv;
	char name[EXT2_NAME_LEN + 1];
	int len = ext2fs_dirent_name_len(d);

	if (!d->inode)
		return 0;
	memcpy(name, d->name, (size_t)len);
	name[len] = 0;
	b->err = dcache_set(b->dc, name, d->inode);
	return b->err ? DIRENT_ABORT : 0;
}

/* An empty cache, or NULL without memory. */
struct dcache *dcache_new(void)
{
	struct dcache *dc = calloc(1, sizeof(*dc));

	if (!dc)
		return NULL;
	dc->nbuckets = 16;	/* most directories are small; it grows */
	dc->bucket = calloc(dc->nbuckets, sizeof(*dc->bucket));
	if (!dc->bucket) {
		free(dc);
		return NULL;
	}
	return dc;
}

/* Read every entry of @dir into a new cache. Returns NULL on failure. */
struct dcache *dcache_build(struct wbfs *w, ext2_ino_t dir)
{
	struct build_ctx b = { dcache_new(), 0 };
	errcode_t err;

	if (!b.dc)
		return NULL;
	err = ext2fs_dir_iterate2(w->fs, dir, 0, NULL, dcache_build_cb, &b);
	if (err || b.err) {
		dcache_free(b.dc);
		return NULL;
	}
	return b.dc;
}
