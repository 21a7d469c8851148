// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * On-demand readahead window arithmetic (mm/readahead.c, doc/algorithms.md
 * §5). Pure: decides which pages to read and where the async marker goes;
 * page allocation and I/O are the caller's.
 */
#include <stdint.h>

#include "wbcfs/cache/readahead.h"

static unsigned roundup_pow2(unsigned x)
{
	unsigned r = 1;

	while (r < x)
		r <<= 1;
	return r;
}

void ra_state_init(struct ra_state *ra, unsigned ra_pages)
{
	ra->start = 0;
	ra->size = 0;
	ra->async_size = 0;
	ra->prev_index = UINT64_MAX;
	ra->ra_pages = ra_pages;
}

/* 4x for tiny requests, 2x for small ones, else the maximum. */
unsigned ra_init_size(unsigned req, unsigned max)
{
	unsigned r = roundup_pow2(req);

	if (r <= max / 32)
		r *= 4;
	else if (r <= max / 4)
		r *= 2;
	else
		r = max;
	return r;
}

unsigned ra_next_size(unsigned cur, unsigned max)
{
	if (cur < max / 16)
		return 4 * cur;
	if (cur <= max / 2)
		return 2 * cur;
	return max;
}

/* The kernel lets one large request exceed ra_pages, up to the I/O size. */
static unsigned ra_max(const struct ra_state *ra, unsigned req, unsigned io_pages)
{
	unsigned max = ra->ra_pages;

	if (!max)
		return 0;	/* readahead off */
	if (req > max && io_pages > max)
		max = req < io_pages ? req : io_pages;
	return max;
}

static void ra_set(struct ra_state *ra, struct ra_window *w, uint64_t start, unsigned size,
		   unsigned async)
{
	ra->start = w->start = start;
	ra->size = w->size = size;
	ra->async_size = w->async_size = async;
}

void ra_sync(struct ra_state *ra, uint64_t index, unsigned req, unsigned io_pages,
	     ra_count_cached_fn count, void *arg, struct ra_window *w)
{
	unsigned max = ra_max(ra, req, io_pages), size, c;
	uint64_t prev = ra->prev_index;

	ra->prev_index = index + req - 1;
	w->start = index;
	w->size = 0;
	w->async_size = 0;
	if (!max)
		return;		/* readahead off: the request only */
	if (index == 0 || req > max || (prev != UINT64_MAX && index - prev <= 1)) {
		size = ra_init_size(req, max);
		if (size < req)
			size = req;
		ra_set(ra, w, index, size, size > req ? size - req : size / 2);
		return;
	}
	c = count ? count(arg, index, max) : 0;
	if (c <= req)
		return;		/* random read */
	if (c >= index)		/* cached from the start of the file */
		c *= 2;
	size = c + req < max ? c + req : max;
	if (size < req)
		size = req;
	ra_set(ra, w, index, size, 1);
}

void ra_async(struct ra_state *ra, uint64_t index, unsigned req, unsigned io_pages,
	      uint64_t hole, struct ra_window *w)
{
	unsigned max = ra_max(ra, req, io_pages), size;

	ra->prev_index = index + req - 1;
	if (!max) {
		w->start = index;
		w->size = w->async_size = 0;
		return;
	}
	if (index == ra->start + ra->size - ra->async_size || index == ra->start + ra->size) {
		size = ra_next_size(ra->size ? ra->size : req, max);
		if (size < ra->size)
			size = ra->size;
		ra_set(ra, w, ra->start + ra->size, size, size);
		return;
	}
	size = ra_next_size((unsigned)(hole - index) + req, max);
	ra_set(ra, w, hole, size, size);
}

unsigned ra_window_part(const struct ra_window *w, unsigned off, unsigned max,
			struct ra_window *part)
{
	uint64_t marker = w->start + w->size - w->async_size;

	part->start = w->start + off;
	part->size = off < w->size ? (w->size - off < max ? w->size - off : max) : 0;
	part->async_size = 0;
	if (w->async_size && marker >= part->start && marker < part->start + part->size)
		part->async_size = (unsigned)(part->start + part->size - marker);
	return part->size;
}
