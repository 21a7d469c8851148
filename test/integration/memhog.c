// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * memhog: take N MiB of anonymous memory as a program that needs it would,
 * touching every page, and say how long it took. For the tests and
 * bench/memory: the program beside wbcfs that the cache must make room for.
 *
 *   memhog [-r MIB_PER_S] [-c CHUNK_MIB] [-h HOLD_S] [-v] MIB
 *
 * Chunks of CHUNK_MIB (default 64) are mmap()ed and written one after the
 * other at full speed, or paced to MIB_PER_S. Prints
 * "memhog: N MiB in S.SSS s" and holds the memory HOLD_S seconds (default
 * 0) before exiting 0; -v prints each chunk's CLOCK_MONOTONIC time (ms) and
 * the MiB taken so far, to line up with other logs. Exits 1 when mmap
 * fails; the OOM killer's SIGKILL is seen by the caller.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(void)
{
	fprintf(stderr, "usage: memhog [-r MIB_PER_S] [-c CHUNK_MIB] [-h HOLD_S] [-v] MIB\n");
	exit(2);
}

int main(int argc, char **argv)
{
	double rate = 0, hold = 0, t0, t, pace;
	size_t chunk_mib = 64, total_mib, done = 0, n, off;
	long page = sysconf(_SC_PAGESIZE);
	bool verbose = false;
	char *p;
	int opt;

	while ((opt = getopt(argc, argv, "r:c:h:v")) != -1) {
		switch (opt) {
		case 'r': rate = atof(optarg); break;
		case 'c': chunk_mib = strtoul(optarg, NULL, 10); break;
		case 'h': hold = atof(optarg); break;
		case 'v': verbose = true; break;
		default: usage();
		}
	}
	if (optind != argc - 1 || !chunk_mib)
		usage();
	total_mib = strtoul(argv[optind], NULL, 10);
	t0 = now_s();
	while (done < total_mib) {
		n = total_mib - done < chunk_mib ? total_mib - done : chunk_mib;
		p = mmap(NULL, n << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			 -1, 0);
		if (p == MAP_FAILED) {
			fprintf(stderr, "memhog: mmap of %zu MiB after %zu MiB: %s\n", n, done,
				strerror(errno));
			return 1;
		}
		/* non-zero bytes: no zero-page or KSM shortcut */
		for (off = 0; off < n << 20; off += (size_t)page)
			p[off] = (char)(off >> 12 | 1);
		done += n;
		t = now_s();
		if (verbose)
			printf("memhog: t=%.3f ms %zu MiB\n", t * 1000, done);
		pace = rate > 0 ? t0 + (double)done / rate - t : 0;
		if (pace > 0)
			usleep((useconds_t)(pace * 1e6));
	}
	printf("memhog: %zu MiB in %.3f s\n", total_mib, now_s() - t0);
	fflush(stdout);
	if (hold > 0)
		usleep((useconds_t)(hold * 1e6));
	return 0;
}
