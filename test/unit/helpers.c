// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Shared unit-test helpers: fake clock, temporary files, test caches with
 * a fake flusher, fake devices (a bdi over a temporary file), io_req
 * completion counts and fresh ext4 layouts.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <ext2fs/ext2fs.h>
#include "wbcfs/lib/clock.h"
#include "helpers.h"

static uint64_t t_now;

static uint64_t t_clock_read(void)
{
	return t_now;
}

void t_clock_fake(uint64_t start_ms)
{
	t_now = start_ms;
	clock_set_fake(t_clock_read);
}

void t_clock_advance(uint64_t ms)
{
	t_now += ms;
}

uint64_t t_clock_now(void)
{
	return t_now;
}

void t_clock_real(void)
{
	clock_set_fake(NULL);
}

int t_tmpfile(char *path, uint64_t size)
{
	const char *dir = getenv("TMPDIR");
	int fd;

	snprintf(path, 64, "%s/wbcfs-test-XXXXXX", dir ? dir : "/var/tmp");
	fd = mkstemp(path);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)size) < 0) {
		close(fd);
		unlink(path);
		return -1;
	}
	return fd;
}

int t_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

TCase *t_tcase_add(Suite *s, const char *name, const TTest *const *tests)
{
	TCase *tc = tcase_create(name);

	for (; *tests; tests++)
		tcase_add_test(tc, *tests);
	suite_add_tcase(s, tc);
	return tc;
}

struct t_wakeups t_woken;

void t_wakeup(void *owner, long nr, enum wb_reason why)
{
	struct t_bdis *to = owner;
	unsigned i;

	t_woken.calls++;
	t_woken.pages += nr;
	if (why == WB_REASON_BACKGROUND && nr == 0)
		t_woken.bg++;
	if (why == WB_REASON_VMSCAN)
		t_woken.vmscan++;
	else
		t_woken.other++;
	for (i = 0; to && i < to->n; i++)
		if (to->b[i])
			bdi_wakeup(to->b[i], nr, why);
}

const struct cache_ops t_cache_ops = { .wakeup_flusher = t_wakeup };

struct cache *t_cache_cfg(struct cache_config *cfg)
{
	struct cache *c;

	if (!cfg->ops)
		cfg->ops = &t_cache_ops;
	dirty_tunables_default(&cfg->tunables);
	ck_assert_int_eq(cache_create(&c, cfg), 0);
	memset(&t_woken, 0, sizeof(t_woken));
	return c;
}

struct cache *t_cache(size_t pages)
{
	struct cache_config cfg = { .size_bytes = pages * PAGE_SIZE, .nr_zones = 1 };

	return t_cache_cfg(&cfg);
}

void t_dirty_pages(struct mapping *m, uint64_t first, unsigned n, char fill, bool stamp)
{
	unsigned i;

	for (i = 0; i < n; i++) {
		struct page *p = mapping_grab_page(m, first + i, ALLOC_WRITE);

		memset(page_address(p), fill, PAGE_SIZE);
		if (stamp)
			((char *)page_address(p))[0] = (char)(first + i);
		page_set(p, PG_uptodate);
		set_page_dirty(p);
		unlock_page(p);
		page_put(p);
	}
}

int t_bdi_file(struct bdi **b, struct bdi_config *bc, char *path, bool rdonly)
{
	int fd = t_tmpfile(path, 64 << 20);

	ck_assert_int_ge(fd, 0);
	if (rdonly) {
		close(fd);
		fd = open(path, O_RDONLY);
	}
	bc->fd = fd;
	ck_assert_int_eq(bdi_create(b, bc), 0);
	return fd;
}

void t_bdi_file_done(struct bdi **b, int fd, const char *path)
{
	bdi_destroy(*b);
	*b = NULL;
	close(fd);
	unlink(path);
}

bool t_block_holds(int fd, uint64_t blk, char fill, int first)
{
	char buf[PAGE_SIZE];

	if (pread(fd, buf, PAGE_SIZE, (off_t)(blk * PAGE_SIZE)) != PAGE_SIZE)
		return false;
	if (first < 0)
		return buf[0] == fill && buf[PAGE_SIZE - 1] == fill;
	return buf[0] == (char)first && buf[1] == fill && buf[PAGE_SIZE - 1] == fill;
}

struct t_io_count t_io;

void t_io_done(struct io_req *req, int res)
{
	t_io.done++;
	t_io.last_res = res;
	if (req->op != IO_FSYNC && res != (int)(req->iov[0].iov_len + req->iov[1].iov_len))
		t_io.bad++;
}

void t_io_write_req(struct io_req *req, struct iovec *iov, char *buf, size_t bs, int fd,
		    unsigned i, unsigned nreq)
{
	memset(buf, 'a' + i % 26, bs / 2);
	memset(buf + bs / 2, 'A' + i % 26, bs / 2);
	iov[0] = (struct iovec){ buf, bs / 2 };
	iov[1] = (struct iovec){ buf + bs / 2, bs / 2 };
	*req = (struct io_req){ .op = IO_WRITE, .fd = fd, .off = (uint64_t)(nreq - 1 - i) * bs,
				.iov = iov, .iovcnt = 2, .done = t_io_done };
}

int t_fsync_rounds(struct bdi *b, struct wb_inode *wi, struct mapping *m, int fd, uint64_t base,
		   unsigned rounds, unsigned n, bool stamp)
{
	unsigned round;
	int ret;

	for (round = 0; round < rounds; round++) {
		char fill = (char)('a' + round);

		t_dirty_pages(m, 0, n, fill, stamp);
		ret = bdi_sync_inode(b, wi, 0, UINT64_MAX, false);
		if (ret)
			return ret;
		if (!t_block_holds(fd, base + n - 1, fill, stamp ? (int)((n - 1) & 0xff) : -1))
			return -EILSEQ;
	}
	return 0;
}

ext2_filsys t_ext2fs(char *path, uint64_t nblocks, unsigned bpg)
{
	struct ext2_super_block param;
	ext2_filsys fs;
	int fd = t_tmpfile(path, nblocks * 4096);

	ck_assert_int_ge(fd, 0);
	close(fd);
	memset(&param, 0, sizeof(param));
	param.s_log_block_size = 2;	/* 4 KiB */
	param.s_blocks_per_group = bpg;
	ext2fs_blocks_count_set(&param, nblocks);
	ck_assert_int_eq(ext2fs_initialize(path, EXT2_FLAG_RW | EXT2_FLAG_64BITS, &param,
					   unix_io_manager, &fs), 0);
	return fs;
}
