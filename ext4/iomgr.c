// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The libext2fs io_manager whose blocks are pages of the device's own
 * mapping in the cache: superblock, group descriptors, bitmaps, inode
 * tables, directories and extent blocks are cached, dirtied and written by
 * the flusher like file data (the kernel's buffer cache does the same).
 * Byte ranges of any channel block size are handled page by page. Data
 * blocks of files never pass through here; when a block changes owner the
 * stale metadata page is dropped (iomgr_forget_range).
 * Context: every entry point runs under wbfs->fs_lock (libext2fs calls).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wbcfs/blkdev.h"
#include "ext4_i.h"

/* set before ext2fs_open2, which opens the channel in the same thread */
static __thread struct wbfs *iomgr_wbfs;

void iomgr_set(struct wbfs *w)
{
	iomgr_wbfs = w;
}

static struct wbfs *chan_wbfs(io_channel ch)
{
	return ch->private_data;
}

static errcode_t wio_open(const char *name, int flags, io_channel *out)
{
	io_channel ch;

	if (!iomgr_wbfs)
		return EXT2_ET_BAD_DEVICE_NAME;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return EXT2_ET_NO_MEMORY;
	ch->magic = EXT2_ET_MAGIC_IO_CHANNEL;
	ch->manager = &ext4_io_manager;
	ch->name = strdup(name);
	ch->block_size = 1024;
	ch->refcount = 1;
	ch->flags = flags;
	ch->private_data = iomgr_wbfs;
	if (!ch->name) {
		free(ch);
		return EXT2_ET_NO_MEMORY;
	}
	*out = ch;
	return 0;
}

static errcode_t wio_close(io_channel ch)
{
	if (--ch->refcount > 0)
		return 0;
	free(ch->name);
	free(ch);
	return 0;
}

static errcode_t wio_set_blksize(io_channel ch, int blksize)
{
	ch->block_size = blksize;
	return 0;
}

/* Fill a !uptodate page from the device. Returns 0 or -errno. */
static int meta_fill(struct wbfs *w, struct page *p)
{
	struct iovec iov = { page_address(p), PAGE_SIZE };
	uint64_t off = p->index << PAGE_SHIFT;
	long n;

	if (off >= w->dev_bytes) {
		memset(page_address(p), 0, PAGE_SIZE);
		page_set(p, PG_uptodate);
		return 0;
	}
	n = bdi_read(w->bdi, &w->meta_wb, &iov, 1, off);
	if (n < 0)
		return (int)n;
	if (n < (long)PAGE_SIZE)
		memset((char *)page_address(p) + n, 0, PAGE_SIZE - (size_t)n);
	page_set(p, PG_uptodate);
	return 0;
}

/*
 * Store @n bytes at @in of locked page @p. Bytes equal to what an
 * uptodate page holds change nothing (libext2fs rewrites every
 * descriptor and bitmap block at each flush: only the changed ones
 * become dirty and join a journal transaction). A page under writeback
 * may change: with a journal, a home copy torn that way is restored by
 * the replay, as the log keeps the committed copy until a checkpoint
 * rewrites the block from it.
 */
static int meta_store(struct wbfs *w, struct page *p, size_t in, const void *b, size_t n)
{
	/* on the stack: every device of a domain stores under its own fs_lock */
	char scratch[PAGE_SIZE] __attribute__((aligned(64)));
	bool fix = n == PAGE_SIZE && ext4_bitmap_masked(w);

	if (fix) {
		/* the bitmap as it is to be written: busy blocks free */
		memcpy(scratch, b, PAGE_SIZE);
		ext4_bitmap_written(w, p->index, scratch);
		b = scratch;
	}
	if (page_test(p, PG_uptodate) && !memcmp((char *)page_address(p) + in, b, n)) {
		/* not yet home, and its copy in the log may be revoked (freed
		 * and allocated again since): the journal must have it */
		if (page_test(p, PG_dirty))
			ext4_journal_note_same(w, p);
		return 0;
	}
	winode_note_itable_change(w, p->index, page_test(p, PG_uptodate) ? page_address(p) : NULL,
				  in, b, n);
	memcpy((char *)page_address(p) + in, b, n);
	page_set(p, PG_uptodate);
	set_page_dirty(p);
	ext4_journal_note_write(w, p);
	return 0;
}

/*
 * Copy bytes [off, off+len) of the device between @buf and the cache.
 * Writing a whole page skips the read; a partial write reads first.
 */
static errcode_t meta_rw(struct wbfs *w, uint64_t off, size_t len, void *buf, bool write)
{
	char *b = buf;

	while (len) {
		uint64_t idx = off >> PAGE_SHIFT;
		size_t in = off & (PAGE_SIZE - 1);
		size_t n = PAGE_SIZE - in < len ? PAGE_SIZE - in : len;
		struct page *p;
		int ret = 0;

		if (write && (w->nr_bad_groups || w->nr_bad_igroups) &&
		    ext4_is_bad_bitmap(w, idx, 1)) {
			/* a refused group's bitmap is never written back */
			off += n;
			b += n;
			len -= n;
			continue;
		}
		p = mapping_grab_page(&w->meta_map, idx, write ? ALLOC_WRITE : 0);
		if (!p)
			return EXT2_ET_NO_MEMORY;
		if (!page_test(p, PG_uptodate) && !(write && n == PAGE_SIZE))
			ret = meta_fill(w, p);
		if (ret) {
			unlock_page(p);
			page_put(p);
			return write ? EXT2_ET_SHORT_WRITE : EXT2_ET_SHORT_READ;
		}
		if (write) {
			ret = meta_store(w, p, in, b, n);
			if (ret) {
				unlock_page(p);
				page_put(p);
				return EXT2_ET_NO_MEMORY;
			}
		} else {
			memcpy(b, (char *)page_address(p) + in, n);
			mark_page_accessed(p);
		}
		unlock_page(p);
		page_put(p);
		off += n;
		b += n;
		len -= n;
	}
	return 0;
}

/*
 * Copy @len bytes at device offset @off, inside one page, from the
 * metadata cache without fs_lock: every metadata write goes through
 * meta_rw under the page lock, so a cached, up-to-date page holds a
 * whole, current copy of each block libext2fs wrote. Returns false when
 * the page is not cached (the caller reads under fs_lock). The page is not
 * marked accessed: a peek is cheap and takes no LRU lock; pages in use are
 * read through libext2fs often enough. Context: any.
 */
bool iomgr_meta_peek(struct wbfs *w, uint64_t off, void *buf, size_t len)
{
	size_t in = off & (PAGE_SIZE - 1);
	struct page *p;
	bool ok;

	if (!len || in + len > PAGE_SIZE)
		return false;
	p = mapping_get_page(&w->meta_map, off >> PAGE_SHIFT);
	if (!p)
		return false;
	lock_page(p);
	ok = page_test(p, PG_uptodate);
	if (ok)
		memcpy(buf, (char *)page_address(p) + in, len);
	unlock_page(p);
	page_put(p);
	return ok;
}

static size_t chan_bytes(io_channel ch, int count)
{
	return count < 0 ? (size_t)-count : (size_t)count * (size_t)ch->block_size;
}

static errcode_t wio_read_blk64(io_channel ch, unsigned long long block, int count, void *data)
{
	return meta_rw(chan_wbfs(ch), block * (uint64_t)ch->block_size,
		       chan_bytes(ch, count), data, false);
}

static errcode_t wio_write_blk64(io_channel ch, unsigned long long block, int count,
				 const void *data)
{
	struct wbfs *w = chan_wbfs(ch);

	if (w->ro)
		return EXT2_ET_RO_FILSYS;
	return meta_rw(w, block * (uint64_t)ch->block_size, chan_bytes(ch, count),
		       (void *)data, true);
}

static errcode_t wio_read_blk(io_channel ch, unsigned long block, int count, void *data)
{
	return wio_read_blk64(ch, block, count, data);
}

static errcode_t wio_write_blk(io_channel ch, unsigned long block, int count, const void *data)
{
	return wio_write_blk64(ch, block, count, data);
}

static errcode_t wio_write_byte(io_channel ch, unsigned long offset, int size, const void *data)
{
	struct wbfs *w = chan_wbfs(ch);

	if (w->ro)
		return EXT2_ET_RO_FILSYS;
	return meta_rw(w, offset, (size_t)size, (void *)data, true);
}

/* Durability is the flusher's job (bdi_sync); nothing is buffered here. */
static errcode_t wio_flush(io_channel ch)
{
	return 0;
}

static errcode_t wio_set_option(io_channel ch, const char *option, const char *arg)
{
	return strcmp(option, "cache") == 0 ? 0 : EXT2_ET_INVALID_ARGUMENT;
}

static errcode_t wio_discard(io_channel ch, unsigned long long block, unsigned long long count)
{
	return EXT2_ET_UNIMPLEMENTED;
}

/*
 * Zero device blocks (fallocate with zeroing): drop cached pages of the
 * range and write zeros straight to the device.
 */
static errcode_t wio_zeroout(io_channel ch, unsigned long long block, unsigned long long count)
{
	struct wbfs *w = chan_wbfs(ch);
	uint64_t off = block * (uint64_t)ch->block_size;
	uint64_t len = count * (uint64_t)ch->block_size;
	size_t chunk = 1 << 20;
	void *zero;

	if (w->ro)
		return EXT2_ET_RO_FILSYS;
	if ((off | len) & (PAGE_SIZE - 1))
		return EXT2_ET_UNIMPLEMENTED;
	if (posix_memalign(&zero, PAGE_SIZE, chunk))
		return EXT2_ET_NO_MEMORY;
	memset(zero, 0, chunk);
	mapping_truncate(&w->meta_map, off >> PAGE_SHIFT, ((off + len) >> PAGE_SHIFT) - 1);
	while (len) {
		struct iovec v = { zero, len < chunk ? (size_t)len : chunk };

		if (blkdev_pwritev(w->dev_fd, &v, 1, (off_t)off)) {
			free(zero);
			return EXT2_ET_SHORT_WRITE;
		}
		off += v.iov_len;
		len -= v.iov_len;
	}
	free(zero);
	return 0;
}

/* Blocks [blk, blk+count) now hold file data: forget any metadata copy. */
void iomgr_forget_range(struct wbfs *w, uint64_t blk, uint64_t count)
{
	if (!count)
		return;
	mapping_truncate(&w->meta_map, blk, blk + count - 1);
	ext4_journal_note_reused(w, blk, count);
}

struct struct_io_manager ext4_io_manager = {
	.magic = EXT2_ET_MAGIC_IO_MANAGER,
	.name = "wbcfs cache I/O manager",
	.open = wio_open,
	.close = wio_close,
	.set_blksize = wio_set_blksize,
	.read_blk = wio_read_blk,
	.write_blk = wio_write_blk,
	.flush = wio_flush,
	.write_byte = wio_write_byte,
	.set_option = wio_set_option,
	.read_blk64 = wio_read_blk64,
	.write_blk64 = wio_write_blk64,
	.discard = wio_discard,
	.zeroout = wio_zeroout,
};
