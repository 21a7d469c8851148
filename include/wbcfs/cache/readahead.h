/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * On-demand readahead (the kernel's mm/readahead.c, doc/algorithms.md §5) as a
 * pure window calculator: it decides which pages to read and where the
 * async marker goes; the caller allocates pages and does the I/O.
 */
#ifndef WBCFS_READAHEAD_H
#define WBCFS_READAHEAD_H

#include <stdint.h>

struct ra_state {
	uint64_t start;		/* first page of the current window */
	unsigned size;		/* pages in the window */
	unsigned async_size;	/* pages left when the marker is hit */
	uint64_t prev_index;	/* last page the reader asked for (UINT64_MAX = none) */
	unsigned ra_pages;	/* max window: readahead_kb / 4 */
};

/* Window to read: [start, start+size), marker on page start+size-async_size. */
struct ra_window {
	uint64_t start;
	unsigned size;
	unsigned async_size;
};

/* Counts cached pages right before @index, at most @max. */
typedef unsigned (*ra_count_cached_fn)(void *arg, uint64_t index, unsigned max);

void ra_state_init(struct ra_state *ra, unsigned ra_pages);

/** Initial window size for a request of @req pages (doc/algorithms.md §5). */
unsigned ra_init_size(unsigned req, unsigned max);
/** Next window size after @cur. */
unsigned ra_next_size(unsigned cur, unsigned max);

/**
 * Cache miss at @index for a request of @req pages; @io_pages is the largest
 * useful I/O in pages (max_io_kb/4). Fills @w (size 0 = nothing to read
 * beyond the request itself: read @req pages only) and updates @ra.
 */
void ra_sync(struct ra_state *ra, uint64_t index, unsigned req, unsigned io_pages,
	     ra_count_cached_fn count, void *arg, struct ra_window *w);

/**
 * The reader hit a PG_readahead page at @index (request of @req pages).
 * @hole is the first uncached page after @index (used when the stream is
 * not where @ra expects it). Fills @w with the next window and updates @ra.
 */
void ra_async(struct ra_state *ra, uint64_t index, unsigned req, unsigned io_pages,
	      uint64_t hole, struct ra_window *w);

/**
 * The part of @w from page @w->start + @off, at most @max pages, into @part:
 * its marker when @w's marker page lies in it (async_size then counts from
 * the part's end), none otherwise. A window larger than one device read is
 * read in such parts, each on its own. Returns the part's size (0 past the end).
 */
unsigned ra_window_part(const struct ra_window *w, unsigned off, unsigned max,
			struct ra_window *part);

#endif
