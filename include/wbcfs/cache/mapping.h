/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Per-file page index: pages of one file (or of the device itself, for
 * metadata) by page index, in a radix tree with per-node tag bitmaps
 * (DIRTY, WRITEBACK, TOWRITE) so dirty or writeback pages are found in index
 * order without visiting clean ones, as the kernel's xarray marks do.
 * What the pages mean on disk is the owner's business (mapping_ops).
 */
#ifndef WBCFS_MAPPING_H
#define WBCFS_MAPPING_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "wbcfs/cache/page.h"

enum mapping_tag {
	TAG_DIRTY,
	TAG_WRITEBACK,
	TAG_TOWRITE,
	NR_TAGS
};

struct mapping;
struct cache;

/*
 * Writeback error sequence, after the kernel's errseq_t: the last -errno
 * (low 12 bits), a SEEN flag (someone was told of it) and a counter
 * bumped by every error recorded after the last one was seen. Each opener
 * keeps a cursor sampled at open; an error is reported once per cursor,
 * so every fd open on a file sees a failed writeback at its next fsync,
 * and a second failure is reported again.
 */
typedef uint32_t errseq_t;

struct mapping_ops {
	/* A page went clean -> dirty. Context: any thread; no mapping lock held. */
	void (*dirtied)(struct mapping *m, struct page *p);
	/* A dirty page was cancelled (truncate) without being written. */
	void (*undirtied)(struct mapping *m, struct page *p);
};

struct radix_node;

struct mapping {
	pthread_mutex_t lock;		/* protects: root, height, nrpages */
	struct radix_node *root;	/* lock */
	unsigned height;		/* lock: levels of 64-way nodes */
	_Atomic long nrpages;		/* atomic (written under lock) */
	_Atomic long nrdirty;		/* atomic */
	_Atomic long nrwriteback;	/* atomic */
	_Atomic errseq_t wb_err;	/* atomic: writeback error sequence (below) */
	uint64_t writeback_index;	/* flusher only: cyclic writeback resume point */
	struct cache *cache;		/* constant */
	const struct mapping_ops *ops;	/* constant */
	void *host;			/* constant: the owner's object */
};

/* Alloc flags for mapping_grab_page() / cache_alloc_page(). */
#define ALLOC_WRITE  0x1	/* page will be dirtied: __GFP_WRITE hint */
#define ALLOC_NOWAIT 0x2	/* never sleep: fail with NULL instead */

void mapping_init(struct mapping *m, struct cache *c,
		  const struct mapping_ops *ops, void *host);
/** Free tree nodes. All pages must have been removed (mapping_truncate(m, 0, ~0)). */
void mapping_destroy(struct mapping *m);

/** Find a page and take a reference, or NULL. */
struct page *mapping_get_page(struct mapping *m, uint64_t index);

/**
 * Find or create the page at @index; returns it referenced and LOCKED.
 * A new page is !uptodate, inserted in the tree and on the LRU. Returns NULL
 * only with ALLOC_NOWAIT when no page is free, or when the cache shuts down.
 */
struct page *mapping_grab_page(struct mapping *m, uint64_t index, unsigned alloc_flags);

/**
 * Up to @nr present pages with index in [*start, end], in index order,
 * referenced. *start is set past the last page returned. Returns the count.
 */
unsigned mapping_lookup_range(struct mapping *m, uint64_t *start, uint64_t end,
			      struct page **pages, unsigned nr);

/** Same, restricted to pages carrying @tag. */
unsigned mapping_lookup_tag(struct mapping *m, uint64_t *start, uint64_t end,
			    enum mapping_tag tag, struct page **pages, unsigned nr);

/** Tag TOWRITE every DIRTY page in [start, end] (sync writeback, no livelock). */
void mapping_tag_towrite(struct mapping *m, uint64_t start, uint64_t end);

/** True if any page of @m carries @tag. */
bool mapping_tagged(struct mapping *m, enum mapping_tag tag);

/** Set/clear a tag on the page at @index. Context: used by page.c. */
void mapping_tag_set(struct mapping *m, uint64_t index, enum mapping_tag tag);
void mapping_tag_clear(struct mapping *m, uint64_t index, enum mapping_tag tag);

/**
 * Number of pages present immediately before @index, counting back at most
 * @max (readahead's contiguous-cache test).
 */
unsigned mapping_count_cached_before(struct mapping *m, uint64_t index, unsigned max);

/**
 * Remove every page with index in [start, end]: waits for writeback and
 * page locks, cancels dirtiness (mapping_ops.undirtied), drops the cache's
 * reference. Pages still referenced by others are freed at their last put.
 * Context: may sleep; caller prevents new pages in the range (inode lock).
 */
void mapping_truncate(struct mapping *m, uint64_t start, uint64_t end);

/**
 * Reclaim path: remove a clean, unlocked, not-writeback page whose only
 * references are the cache's and the caller's. Returns true if removed
 * (the caller still holds its own reference and drops it).
 */
bool mapping_try_remove_page(struct mapping *m, struct page *p);
/*
 * Reclaim's mapping_try_remove_page, for a page met on the LRU (with a
 * reference, not through its inode): the mapping is read and used under
 * the page lock, which truncation takes before it unlinks a page and
 * frees a deleted file's mapping. False when the page stays (*@gone: it
 * had left its mapping already). Never sleeps.
 */
bool mapping_reclaim_page(struct page *p, bool *gone);

/** Wait until no page in [start, end] is under writeback. */
void mapping_wait_writeback(struct mapping *m, uint64_t start, uint64_t end);

/**
 * Record a writeback error (-errno; 0 does nothing): a new error for
 * every cursor that has not seen it yet. Context: any thread; lock-free.
 */
void mapping_set_error(struct mapping *m, int err);
/**
 * A cursor for a new opener (the kernel's file->f_wb_err): an error
 * nobody has seen yet is still reported to it, one already reported
 * is not.
 */
errseq_t mapping_sample_error(struct mapping *m);
/** -errno of an error recorded since @since, or 0. Does not advance. */
int mapping_check_error_since(struct mapping *m, errseq_t since);
/**
 * -errno of an error recorded since *@since, or 0; moves *@since to the
 * current sequence and marks the error seen, so this cursor reports it
 * once. Context: the caller serialises uses of the same cursor.
 */
int mapping_check_and_advance(struct mapping *m, errseq_t *since);

#endif
