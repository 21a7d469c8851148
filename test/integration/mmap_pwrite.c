// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * mmap_pwrite FILE PAGES RUNS [flush]: stores through a shared mapping beside
 * pwrite(2)s into the same pages, as xfstests' holetest -w does
 * (generic/346). Each run creates FILE anew, sizes it with ftruncate to
 * PAGES pages (all holes), maps it MAP_SHARED and starts two threads:
 * thread 0 pwrites its 8-byte marker at offset 0 of every page, thread 1
 * stores its own at offset 8 of every page through the mapping. Both walk
 * the pages in the same order, so they meet in the same page most of the
 * time. With "flush", a third thread starts writeback of the dirty pages
 * over and over while they run (sync_file_range), so the kernel's
 * writeback of a page meets the pwrite into it, not only the invalidation
 * before that pwrite. Once both are done every page must hold both markers, read
 * through the mapping and read with pread(2), and again after msync.
 * Each lost marker prints one line (run, thread, offset, what was found)
 * on stdout; the last line counts them. Exit 0 when none was lost, 1
 * when some were, 2 on a failed system call.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NTHREADS 2

struct run {
	int fd;
	char *map;
	long pages;
	long page_size;
	uint64_t marker[NTHREADS];
	int err;		/* errno of a failed pwrite */
	atomic_int done;	/* writers finished */
};

static void *flush_pages(void *arg)
{
	struct run *r = arg;

	while (atomic_load(&r->done) < NTHREADS)
		sync_file_range(r->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
	return NULL;
}

static void *pwrite_marker(void *arg)
{
	struct run *r = arg;
	long i;

	for (i = 0; i < r->pages; i++) {
		if (pwrite(r->fd, &r->marker[0], sizeof(r->marker[0]),
			   (off_t)i * r->page_size) != sizeof(r->marker[0])) {
			r->err = errno ? errno : EIO;
			break;
		}
	}
	atomic_fetch_add(&r->done, 1);
	return NULL;
}

static void *store_marker(void *arg)
{
	struct run *r = arg;
	long i;

	for (i = 0; i < r->pages; i++)
		*(volatile uint64_t *)(r->map + i * r->page_size + sizeof(uint64_t)) = r->marker[1];
	atomic_fetch_add(&r->done, 1);
	return NULL;
}

/* Count the markers of @buf (PAGES pages) that are not there, naming them. */
static long check(const struct run *r, const char *buf, int run, const char *how)
{
	long i, lost = 0;
	int t;

	for (i = 0; i < r->pages; i++) {
		for (t = 0; t < NTHREADS; t++) {
			uint64_t got;

			memcpy(&got, buf + i * r->page_size + t * sizeof(uint64_t), sizeof(got));
			if (got == r->marker[t])
				continue;
			if (lost++ < 20)
				printf("run %d (%s): thread %d, offset %08lx, %016" PRIx64
				       " != %016" PRIx64 "\n", run, how, t,
				       (unsigned long)(i * r->page_size + t * sizeof(uint64_t)),
				       got, r->marker[t]);
		}
	}
	return lost;
}

static int fail(const char *what)
{
	printf("mmap_pwrite: %s: %s\n", what, strerror(errno));
	return 2;
}

int main(int argc, char **argv)
{
	long page_size = sysconf(_SC_PAGESIZE), pages, runs, lost = 0, bad_runs = 0;
	size_t size;
	char *copy;
	bool flush;
	int run;

	if ((argc != 4 && (argc != 5 || strcmp(argv[4], "flush"))) || (pages = atol(argv[2])) <= 0 || (runs = atol(argv[3])) <= 0) {
		fprintf(stderr, "usage: mmap_pwrite FILE PAGES RUNS [flush]\n");
		return 2;
	}
	flush = argc == 5;
	size = (size_t)pages * (size_t)page_size;
	copy = malloc(size);
	if (!copy)
		return fail("malloc");
	srandom((unsigned)getpid());
	for (run = 0; run < runs; run++) {
		struct run r = { .pages = pages, .page_size = page_size };
		pthread_t th[NTHREADS + 1];
		long n = 0;
		int t;

		for (t = 0; t < NTHREADS; t++)
			r.marker[t] = ((uint64_t)random() << 33) ^ ((uint64_t)random() << 2) ^
				      ((uint64_t)run << 1) ^ 1;	/* never 0 */
		r.fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
		if (r.fd < 0)
			return fail("open");
		if (ftruncate(r.fd, (off_t)size))
			return fail("ftruncate");
		r.map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd, 0);
		if (r.map == MAP_FAILED)
			return fail("mmap");
		if ((errno = pthread_create(&th[0], NULL, pwrite_marker, &r)) ||
		    (errno = pthread_create(&th[1], NULL, store_marker, &r)) ||
		    (flush && (errno = pthread_create(&th[2], NULL, flush_pages, &r))))
			return fail("pthread_create");
		for (t = 0; t < NTHREADS + flush; t++)
			pthread_join(th[t], NULL);
		if (r.err) {
			errno = r.err;
			return fail("pwrite");
		}
		n += check(&r, r.map, run, "mapping");
		if (pread(r.fd, copy, size, 0) != (ssize_t)size)
			return fail("pread");
		n += check(&r, copy, run, "pread");
		if (msync(r.map, size, MS_SYNC))
			return fail("msync");
		if (pread(r.fd, copy, size, 0) != (ssize_t)size)
			return fail("pread");
		n += check(&r, copy, run, "pread after msync");
		munmap(r.map, size);
		close(r.fd);
		lost += n;
		bad_runs += n > 0;
	}
	free(copy);
	printf("%ld of %ld runs lost markers, %ld lost in all\n", bad_runs, runs, lost);
	return lost ? 1 : 0;
}
