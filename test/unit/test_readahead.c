// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Readahead windows (doc/algorithms.md §5): initial and next sizes, the
 * 16/32/64/128 KiB ramp of a sequential 4 KiB reader with ra_pages = 32,
 * the async marker position, random reads without readahead, requests
 * larger than the window, context readahead on cached history,
 * readahead switched off, and a window cut in parts of one device read.
 */
#include <check.h>
#include "helpers.h"
#include <stdlib.h>

#include "wbcfs/cache/readahead.h"

static unsigned cached_n;
static unsigned t_count(void *arg, uint64_t index, unsigned max)
{
	return cached_n < max ? cached_n : max;
}

START_TEST(size_rules)
{
	ck_assert_uint_eq(ra_init_size(1, 32), 4);	/* r <= max/32: 4r */
	ck_assert_uint_eq(ra_init_size(4, 32), 8);	/* r <= max/4: 2r */
	ck_assert_uint_eq(ra_init_size(8, 32), 16);
	ck_assert_uint_eq(ra_init_size(9, 32), 32);	/* else max */
	ck_assert_uint_eq(ra_init_size(3, 32), 8);	/* rounded up to 4 first */
	ck_assert_uint_eq(ra_next_size(1, 32), 4);	/* < max/16: 4x */
	ck_assert_uint_eq(ra_next_size(4, 32), 8);	/* <= max/2: 2x */
	ck_assert_uint_eq(ra_next_size(16, 32), 32);
	ck_assert_uint_eq(ra_next_size(32, 32), 32);
}
END_TEST

START_TEST(sequential_ramp)
{
	struct ra_state ra;
	struct ra_window w;
	uint64_t index;
	unsigned sizes[4], n = 0;

	ra_state_init(&ra, 32);
	ra_sync(&ra, 0, 1, 256, t_count, NULL, &w);
	ck_assert_uint_eq(w.start, 0);
	ck_assert_uint_eq(w.size, 4);
	ck_assert_uint_eq(w.async_size, 3);
	sizes[n++] = w.size;
	/* the reader walks the pages; at each marker the next window starts */
	for (index = 1; index < 200 && n < 4; index++) {
		if (index != w.start + w.size - w.async_size)
			continue;
		ra_async(&ra, index, 1, 256, w.start + w.size, &w);
		ck_assert_uint_eq(w.async_size, w.size);
		sizes[n++] = w.size;
	}
	/* 16, 32, 64, 128 KiB */
	ck_assert_uint_eq(sizes[1], 8);
	ck_assert_uint_eq(sizes[2], 16);
	ck_assert_uint_eq(sizes[3], 32);
	/* windows are contiguous: the last starts where its predecessor ended */
	ck_assert_uint_eq(w.start, 4 + 8 + 16);
}
END_TEST

START_TEST(sequential_miss_continues_stream)
{
	struct ra_state ra;
	struct ra_window w;

	ra_state_init(&ra, 32);
	ra_sync(&ra, 0, 4, 256, t_count, NULL, &w);
	ra_sync(&ra, 4, 4, 256, t_count, NULL, &w);	/* index - prev == 1 */
	ck_assert_uint_eq(w.start, 4);
	ck_assert_uint_eq(w.size, 8);
	ck_assert_uint_eq(w.async_size, 4);
}
END_TEST

START_TEST(random_reads_no_readahead)
{
	struct ra_state ra;
	struct ra_window w;

	ra_state_init(&ra, 32);
	cached_n = 0;
	ra_sync(&ra, 1000, 1, 256, t_count, NULL, &w);
	ck_assert_uint_eq(w.size, 0);
	ra_sync(&ra, 50, 2, 256, t_count, NULL, &w);
	ck_assert_uint_eq(w.size, 0);
}
END_TEST

START_TEST(context_readahead)
{
	struct ra_state ra;
	struct ra_window w;

	ra_state_init(&ra, 32);
	ra.prev_index = 10;
	cached_n = 8;		/* 8 pages cached right before the miss */
	ra_sync(&ra, 500, 1, 256, t_count, NULL, &w);
	ck_assert_uint_eq(w.start, 500);
	ck_assert_uint_eq(w.size, 9);
	ck_assert_uint_eq(w.async_size, 1);
}
END_TEST

START_TEST(large_request_uses_io_size)
{
	struct ra_state ra;
	struct ra_window w;

	ra_state_init(&ra, 32);
	ra_sync(&ra, 0, 256, 256, t_count, NULL, &w);	/* 1 MiB read */
	ck_assert_uint_eq(w.size, 256);
	ra_state_init(&ra, 32);
	ra_sync(&ra, 0, 256, 64, t_count, NULL, &w);	/* I/O limit 256 KiB */
	ck_assert_uint_ge(w.size, 256);			/* never less than asked */
}
END_TEST

START_TEST(readahead_off)
{
	struct ra_state ra;
	struct ra_window w;

	ra_state_init(&ra, 0);
	ra_sync(&ra, 0, 1, 256, t_count, NULL, &w);
	ck_assert_uint_eq(w.size, 0);
	ra_async(&ra, 1, 1, 256, 2, &w);
	ck_assert_uint_eq(w.size, 0);
}
END_TEST

/* A 4 MiB window read in 1 MiB parts: the marker goes with its part. */
START_TEST(window_parts)
{
	struct ra_window w = { .start = 1000, .size = 1024, .async_size = 1024 }, p;
	unsigned off, n, marked = 0;

	for (off = 0; (n = ra_window_part(&w, off, 256, &p)); off += n) {
		ck_assert_uint_eq(p.start, 1000 + off);
		ck_assert_uint_le(n, 256);
		if (p.async_size) {
			marked++;
			/* the same page as the whole window's marker */
			ck_assert_uint_eq(p.start + p.size - p.async_size, 1000);
		}
	}
	ck_assert_uint_eq(off, 1024);
	ck_assert_uint_eq(marked, 1);

	/* a marker in the second part, a short last part */
	w = (struct ra_window){ .start = 0, .size = 600, .async_size = 300 };
	ck_assert_uint_eq(ra_window_part(&w, 0, 256, &p), 256);
	ck_assert_uint_eq(p.async_size, 0);
	ck_assert_uint_eq(ra_window_part(&w, 256, 256, &p), 256);
	ck_assert_uint_eq(p.start + p.size - p.async_size, 300);
	ck_assert_uint_eq(ra_window_part(&w, 512, 256, &p), 88);
	ck_assert_uint_eq(p.async_size, 0);
	ck_assert_uint_eq(ra_window_part(&w, 600, 256, &p), 0);

	/* no marker: no part has one */
	w = (struct ra_window){ .start = 7, .size = 300, .async_size = 0 };
	ck_assert_uint_eq(ra_window_part(&w, 256, 256, &p), 44);
	ck_assert_uint_eq(p.async_size, 0);
}
END_TEST

static Suite *readahead_suite(void)
{
	Suite *s = suite_create("readahead");

	t_tcase(s, "sizes", size_rules);
	t_tcase(s, "sequential", sequential_ramp, sequential_miss_continues_stream,
		large_request_uses_io_size);
	t_tcase(s, "random", random_reads_no_readahead, context_readahead);
	t_tcase(s, "off", readahead_off);
	t_tcase(s, "parts", window_parts);
	return s;
}

int main(void)
{
	return t_run(readahead_suite());
}
