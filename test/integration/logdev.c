// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * logdev: an image file served through FUSE as MNT/dev, recording every
 * write, discard and flush it receives in wbcfs's write log format
 * (doc/write_log.md). A loop device over MNT/dev is then a disk whose
 * writes tools/wbcfs-crash can replay: the kernel's ext4 mounted on it
 * is the oracle the crash-point workloads are checked against (the
 * kernel has no device mapper here, so no dm-log-writes).
 *
 *     logdev IMAGE LOG MNT [fuse options]
 *
 * The file is opened direct_io, so the kernel keeps no page cache of it:
 * each write of the loop device reaches us before it completes, and a
 * flush of the loop device (REQ_PREFLUSH, or the flush that emulates
 * FUA, as loop has no FUA) arrives as FSYNC. A write is logged when it
 * arrives and completed once it is in the image, before the reply; a
 * flush likewise. Discards and zeroed ranges (fallocate) are logged as
 * DISCARD: a write of zeros.
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { WL_WRITE = 1, WL_WRITE_DONE, WL_FLUSH, WL_FLUSH_DONE, WL_DISCARD };

struct wl_rec {
	uint32_t type;
	uint32_t zero;
	uint64_t seq;
	uint64_t off;
	uint64_t len;
	int64_t res;
};

static int img_fd = -1, log_fd = -1;
static off_t img_size;
static uint64_t next_seq;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void write_full(const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t r = write(log_fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			perror("logdev: write log");
			abort();	/* a log with a hole replays states that never were */
		}
		p += r;
		n -= r;
	}
}

/* Append one record (and @data for a write) under the lock; returns its
 * seq (new for an issue, @seq for a completion). */
static uint64_t log_rec(uint32_t type, uint64_t seq, uint64_t off, uint64_t len,
			int64_t res, const void *data)
{
	struct wl_rec r = { .type = type, .off = off, .len = len, .res = res };

	pthread_mutex_lock(&log_lock);
	r.seq = seq ? seq : ++next_seq;
	write_full(&r, sizeof(r));
	if (data)
		write_full(data, len);
	pthread_mutex_unlock(&log_lock);
	return r.seq;
}

static int ld_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	(void)fi;
	memset(st, 0, sizeof(*st));
	if (!strcmp(path, "/")) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	} else if (!strcmp(path, "/dev")) {
		st->st_mode = S_IFREG | 0600;
		st->st_nlink = 1;
		st->st_size = img_size;
	} else {
		return -ENOENT;
	}
	return 0;
}

static int ld_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
		      struct fuse_file_info *fi, enum fuse_readdir_flags fl)
{
	(void)off, (void)fi, (void)fl;
	if (strcmp(path, "/"))
		return -ENOTDIR;
	fill(buf, ".", NULL, 0, 0);
	fill(buf, "..", NULL, 0, 0);
	fill(buf, "dev", NULL, 0, 0);
	return 0;
}

static int ld_open(const char *path, struct fuse_file_info *fi)
{
	if (strcmp(path, "/dev"))
		return -ENOENT;
	fi->direct_io = 1;	/* no page cache: every write reaches us */
	return 0;
}

static int ld_read(const char *path, char *buf, size_t n, off_t off,
		   struct fuse_file_info *fi)
{
	ssize_t r;

	(void)path, (void)fi;
	r = pread(img_fd, buf, n, off);
	return r < 0 ? -errno : (int)r;
}

static int ld_write(const char *path, const char *buf, size_t n, off_t off,
		    struct fuse_file_info *fi)
{
	uint64_t seq;
	ssize_t r;

	(void)path, (void)fi;
	if (off + (off_t)n > img_size)
		return -ENOSPC;
	seq = log_rec(WL_WRITE, 0, off, n, 0, buf);
	r = pwrite(img_fd, buf, n, off);
	log_rec(WL_WRITE_DONE, seq, 0, 0, r < 0 ? -errno : r, NULL);
	return r < 0 ? -errno : (int)r;
}

static int ld_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	uint64_t seq;

	(void)path, (void)datasync, (void)fi;
	seq = log_rec(WL_FLUSH, 0, 0, 0, 0, NULL);
	log_rec(WL_FLUSH_DONE, seq, 0, 0, 0, NULL);
	return 0;
}

static int ld_fallocate(const char *path, int mode, off_t off, off_t n,
			struct fuse_file_info *fi)
{
	static const char zero[65536];
	uint64_t seq;
	off_t o;

	(void)path, (void)fi;
	if (!(mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)))
		return -EOPNOTSUPP;
	if (off + n > img_size)
		n = img_size - off;
	seq = log_rec(WL_DISCARD, 0, off, n, 0, NULL);
	for (o = off; o < off + n; o += sizeof(zero)) {
		size_t k = off + n - o < (off_t)sizeof(zero) ? (size_t)(off + n - o) :
			   sizeof(zero);

		if (pwrite(img_fd, zero, k, o) != (ssize_t)k) {
			log_rec(WL_WRITE_DONE, seq, 0, 0, -EIO, NULL);
			return -EIO;
		}
	}
	log_rec(WL_WRITE_DONE, seq, 0, 0, n, NULL);
	return 0;
}

static const struct fuse_operations ops = {
	.getattr = ld_getattr,
	.readdir = ld_readdir,
	.open = ld_open,
	.read = ld_read,
	.write = ld_write,
	.fsync = ld_fsync,
	.fallocate = ld_fallocate,
};

int main(int argc, char **argv)
{
	struct { char magic[8]; uint32_t ver, recsz; } hdr = {
		{ 'W', 'B', 'C', 'F', 'S', 'W', 'L', '1' }, 1, sizeof(struct wl_rec)
	};
	struct stat st;

	if (argc < 4) {
		fprintf(stderr, "usage: logdev IMAGE LOG MNT [fuse options]\n");
		return 2;
	}
	img_fd = open(argv[1], O_RDWR);
	log_fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (img_fd < 0 || log_fd < 0 || fstat(img_fd, &st)) {
		perror("logdev");
		return 1;
	}
	img_size = st.st_size;
	write_full(&hdr, sizeof(hdr));
	/* fuse_main gets: argv[0] MNT [options] */
	argv[2] = argv[0];
	return fuse_main(argc - 2, argv + 2, &ops, NULL);
}
