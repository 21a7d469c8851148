// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * aio_append FILE BYTES ALIGN DEPTH: append BYTES to FILE (created if
 * needed) with O_DIRECT writes of ALIGN..64*ALIGN bytes, DEPTH of them in
 * flight at once through Linux AIO (io_submit), the file closed while the
 * last batch is still in flight (its release then comes from the AIO
 * completion, as with an application that closes before reaping).
 * Exit 0 when every write completed in full, 1 with one line otherwise.
 * Raw syscalls: no libaio needed.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_DEPTH 64

static int fail(const char *what, int err)
{
	fprintf(stderr, "aio_append: %s: %s\n", what, strerror(err));
	return 1;
}

int main(int argc, char **argv)
{
	struct iocb cbs[MAX_DEPTH], *ptrs[MAX_DEPTH];
	struct io_event ev[MAX_DEPTH];
	long long left, off, align, depth;
	aio_context_t ctx = 0;
	unsigned seed;
	char *buf;
	struct stat st;
	int fd, i, n, done, ret = 0;

	if (argc != 5) {
		fprintf(stderr, "usage: aio_append FILE BYTES ALIGN DEPTH\n");
		return 1;
	}
	left = atoll(argv[2]);
	align = atoll(argv[3]);
	depth = atoll(argv[4]);
	if (left <= 0 || align < 512 || align > 4096 || (align & (align - 1)) ||
	    depth < 1 || depth > MAX_DEPTH) {
		fprintf(stderr, "aio_append: bad BYTES, ALIGN (512-4096, power of 2) or DEPTH (1-%d)\n",
			MAX_DEPTH);
		return 1;
	}
	fd = open(argv[1], O_WRONLY | O_CREAT | O_DIRECT, 0644);
	if (fd < 0)
		return fail(argv[1], errno);
	if (fstat(fd, &st) < 0)
		return fail("fstat", errno);
	off = st.st_size / align * align;
	if (posix_memalign((void **)&buf, 4096, (size_t)(64 * align * depth)))
		return fail("posix_memalign", ENOMEM);
	memset(buf, 0x5a, (size_t)(64 * align * depth));
	if (syscall(SYS_io_setup, (unsigned)depth, &ctx) < 0)
		return fail("io_setup", errno);
	seed = (unsigned)getpid();
	while (left > 0) {
		for (n = 0; n < depth && left > 0; n++) {
			long long len = align * (1 + rand_r(&seed) % 64);

			memset(&cbs[n], 0, sizeof(cbs[n]));
			cbs[n].aio_fildes = (uint32_t)fd;
			cbs[n].aio_lio_opcode = IOCB_CMD_PWRITE;
			cbs[n].aio_buf = (uint64_t)(uintptr_t)(buf + n * 64 * align);
			cbs[n].aio_nbytes = (uint64_t)len;
			cbs[n].aio_offset = off;
			cbs[n].aio_data = (uint64_t)len;
			ptrs[n] = &cbs[n];
			off += len;
			left -= len;
		}
		if (syscall(SYS_io_submit, ctx, (long)n, ptrs) != n)
			return fail("io_submit", errno);
		if (left <= 0)
			close(fd);	/* the last batch is still in flight */
		for (done = 0; done < n; ) {
			int got = (int)syscall(SYS_io_getevents, ctx, 1L, (long)(n - done), ev, NULL);

			if (got < 0 && errno == EINTR)
				continue;
			if (got < 0)
				return fail("io_getevents", errno);
			for (i = 0; i < got; i++)
				if (ev[i].res != (int64_t)ev[i].data)
					ret = ev[i].res < 0 ? fail("write", (int)-ev[i].res) :
							      fail("write", EIO);
			done += got;
		}
	}
	syscall(SYS_io_destroy, ctx);
	free(buf);
	return ret;
}
