// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Journal recovery at mount, the filesystem's side of it: whether the ext4
 * superblock asks for a replay wbcfs can do, the internal journal's blocks
 * found through a read-only libext2fs (by path, or by descriptor for an NBD
 * export), a writable descriptor for a read-only mount, and needs_recovery
 * cleared once jrec_replay() (jrecover.c) has emptied the log. Apart from
 * the log walk because it reads the ext4 superblock and inode, which the
 * walk itself never looks at.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wbcfs/blkdev.h"
#include "jbd2_i.h"

#define SB_BLOCK_BYTES 4096	/* block 0 of the device: holds the ext4 superblock */
#define SB_OFFSET 1024

int jrec_journal_map(ext2_filsys fs, ext2_ino_t ino, uint32_t maxlen, uint64_t **map)
{
	struct ext2_inode_large in;
	uint64_t *m;
	blk64_t pblk;
	uint32_t i;
	errcode_t err;

	memset(&in, 0, sizeof(in));
	err = ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)&in, sizeof(in));
	if (err)
		return -EIO;
	if (!LINUX_S_ISREG(in.i_mode) || EXT2_I_SIZE(&in) / fs->blocksize < maxlen)
		return -EUCLEAN;
	m = malloc((size_t)maxlen * sizeof(*m));
	if (!m)
		return -ENOMEM;
	for (i = 0; i < maxlen; i++) {
		pblk = 0;
		err = ext2fs_bmap2(fs, ino, (struct ext2_inode *)&in, NULL, 0, i, NULL, &pblk);
		if (err || !pblk || pblk >= ext2fs_blocks_count(fs->super)) {
			free(m);
			return err && err != EXT2_ET_BAD_BLOCK_NUM ? -EIO : -EUCLEAN;
		}
		m[i] = pblk;
	}
	*map = m;
	return 0;
}

/*
 * A read-only libext2fs channel over a device descriptor, for an NBD export:
 * it has no path unix_io_manager could open. Reads go through blkdev_pread in
 * whole 4 KiB blocks (the superblock is read at 1024, and a server may
 * demand 4 KiB alignment). The descriptor is set before ext2fs_open2, which
 * opens the channel in the same thread.
 */
static __thread int jio_fd = -1;
static struct struct_io_manager jio_manager;

static errcode_t jio_open(const char *name, int flags, io_channel *out)
{
	io_channel ch;

	if (jio_fd < 0 || (flags & IO_FLAG_RW))
		return EXT2_ET_BAD_DEVICE_NAME;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return EXT2_ET_NO_MEMORY;
	ch->magic = EXT2_ET_MAGIC_IO_CHANNEL;
	ch->manager = &jio_manager;
	ch->name = strdup(name);
	ch->block_size = 1024;
	ch->refcount = 1;
	ch->flags = flags;
	ch->private_data = (void *)(intptr_t)jio_fd;
	if (!ch->name) {
		free(ch);
		return EXT2_ET_NO_MEMORY;
	}
	*out = ch;
	return 0;
}

static errcode_t jio_close(io_channel ch)
{
	if (--ch->refcount > 0)
		return 0;
	free(ch->name);
	free(ch);
	return 0;
}

static errcode_t jio_set_blksize(io_channel ch, int blksize)
{
	ch->block_size = blksize;
	return 0;
}

static errcode_t jio_read_blk64(io_channel ch, unsigned long long blk, int count, void *buf)
{
	size_t len = count < 0 ? (size_t)-count : (size_t)count * (size_t)ch->block_size;
	uint64_t off = blk * (uint64_t)ch->block_size, start = off & ~4095ULL;
	size_t span = (size_t)(((off + len + 4095) & ~4095ULL) - start);
	void *bounce;
	int ret;

	if (posix_memalign(&bounce, 4096, span))
		return EXT2_ET_NO_MEMORY;
	ret = jrec_dev_pread((int)(intptr_t)ch->private_data, bounce, span, (off_t)start);
	if (!ret)
		memcpy(buf, (char *)bounce + (off - start), len);
	free(bounce);
	return ret ? EXT2_ET_SHORT_READ : 0;
}

static errcode_t jio_read_blk(io_channel ch, unsigned long blk, int count, void *buf)
{
	return jio_read_blk64(ch, blk, count, buf);
}

static errcode_t jio_write_blk64(io_channel ch, unsigned long long blk, int count,
				 const void *buf)
{
	(void)ch, (void)blk, (void)count, (void)buf;
	return EXT2_ET_RO_FILSYS;
}

static errcode_t jio_write_blk(io_channel ch, unsigned long blk, int count, const void *buf)
{
	return jio_write_blk64(ch, blk, count, buf);
}

static errcode_t jio_flush(io_channel ch)
{
	(void)ch;
	return 0;
}

static struct struct_io_manager jio_manager = {
	.magic = EXT2_ET_MAGIC_IO_MANAGER,
	.name = "wbcfs journal recovery (read-only, by descriptor)",
	.open = jio_open,
	.close = jio_close,
	.set_blksize = jio_set_blksize,
	.read_blk = jio_read_blk,
	.write_blk = jio_write_blk,
	.flush = jio_flush,
	.read_blk64 = jio_read_blk64,
	.write_blk64 = jio_write_blk64,
};

/*
 * The internal journal's blocks, read through a read-only libext2fs: by
 * path for a local device, through @fd for an NBD export.
 */
static int journal_blocks(const char *dev, int fd, ext2_ino_t ino, uint64_t **map, uint32_t *nr)
{
	int flags = EXT2_FLAG_64BITS | EXT2_FLAG_DIRECT_IO | EXT2_FLAG_IGNORE_CSUM_ERRORS;
	struct ext2_inode_large in;
	ext2_filsys fs;
	uint64_t blocks;
	errcode_t err;
	int ret;

	if (nbdev_of_fd(fd) || rbdev_of_fd(fd)) {
		/* not the URI: ext2fs_open2 takes what follows a '?' for io options */
		jio_fd = fd;
		err = ext2fs_open2("nbd", NULL, flags & ~EXT2_FLAG_DIRECT_IO, 0, 0, &jio_manager, &fs);
		jio_fd = -1;
	} else {
		err = ext2fs_open2(dev, NULL, flags, 0, 0, unix_io_manager, &fs);
	}
	if (err) {
		fprintf(msg_stream(), "wbcfs: %s: cannot open the filesystem for journal recovery: %s\n",
			dev, error_message(err));
		return -EIO;
	}
	memset(&in, 0, sizeof(in));
	ret = -EUCLEAN;
	if (ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)&in, sizeof(in)))
		goto out_close;
	blocks = EXT2_I_SIZE(&in) / fs->blocksize;
	if (blocks > UINT32_MAX)
		goto out_close;
	*nr = (uint32_t)blocks;
	ret = jrec_journal_map(fs, ino, *nr, map);
out_close:
	ext2fs_close_free(&fs);
	if (ret == -EUCLEAN)
		jrec_err(dev, "corrupt journal inode %u", ino);
	return ret;
}

/*
 * A read-only mount still replays when the device can be written, as the
 * kernel's ext4 does; a read-only device cannot be recovered here. An NBD
 * export (@ro_fd) is written through its own descriptor when the server
 * allows writes.
 */
static int open_writable(const char *dev, int ro_fd)
{
	struct nbdev *nbd = nbdev_of_fd(ro_fd);
	struct rbdev *rbd = rbdev_of_fd(ro_fd);
	int fd, bdev_ro = 0;
	struct stat st;

	if (rbd) {
		if (!rbdev_read_only(rbd))
			return ro_fd;
		fprintf(msg_stream(), "wbcfs: %s: filesystem needs journal recovery but the RBD image is open read-only (a snapshot, or -o ro); run e2fsck\n",
			dev);
		return -EROFS;
	}
	if (nbd) {
		if (!nbdev_info(nbd)->read_only)
			return ro_fd;
		fprintf(msg_stream(), "wbcfs: %s: filesystem needs journal recovery but the NBD export is read-only; run e2fsck\n",
			dev);
		return -EROFS;
	}
	fd = open(dev, O_RDWR | O_DIRECT | O_CLOEXEC);

	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISBLK(st.st_mode) &&
	    ioctl(fd, BLKROGET, &bdev_ro) == 0 && bdev_ro) {
		close(fd);
		fd = -1;
		errno = EROFS;
	}
	if (fd < 0) {
		fprintf(msg_stream(), "wbcfs: %s: filesystem needs journal recovery but the device cannot be written (%s); run e2fsck\n",
			dev, strerror(errno));
		return -EROFS;
	}
	return fd;
}

/* Does the ext4 superblock @sb point to a journal wbcfs can replay? */
static int sb_journal_check(const char *dev, struct ext2_super_block *sb)
{
	static const uint8_t no_uuid[16];

	if (!ext2fs_has_feature_journal(sb))
		return jrec_err(dev, "needs_recovery is set but the filesystem has no journal");
	if (ext2fs_has_feature_journal_dev(sb) || !sb->s_journal_inum ||
	    memcmp(sb->s_journal_uuid, no_uuid, sizeof(no_uuid)))
		return jrec_err(dev, "filesystem needs recovery from an external journal, which wbcfs does not replay");
	return 0;
}

/*
 * The superblock the log left must describe the filesystem the mount
 * checked before the replay: the kernel keeps the geometry it read first
 * and would work on with a superblock that says otherwise. (The block
 * count may grow: an online resize journals the superblock. Features
 * may be gained online, encrypt or meta_bg: the mount checks them as
 * for any superblock.)
 */
static int sb_replayed_check(const char *dev, struct ext2_super_block *was,
			     struct ext2_super_block *sb)
{
	const char *what = NULL;

	if (sb->s_magic != EXT2_SUPER_MAGIC)
		what = "no ext4 magic";
	else if (sb->s_log_block_size != was->s_log_block_size ||
		 sb->s_log_cluster_size != was->s_log_cluster_size)
		what = "another block size";
	else if (sb->s_first_data_block != was->s_first_data_block ||
		 sb->s_blocks_per_group != was->s_blocks_per_group ||
		 sb->s_inodes_per_group != was->s_inodes_per_group)
		what = "another group geometry";
	else if (sb->s_rev_level != was->s_rev_level || sb->s_inode_size != was->s_inode_size ||
		 sb->s_desc_size != was->s_desc_size)
		what = "another inode or descriptor size";
	else if (ext2fs_blocks_count(sb) < ext2fs_blocks_count(was))
		what = "fewer blocks";
	if (!what)
		return 0;
	return jrec_err(dev, "the journal replayed a superblock with %s", what);
}

/*
 * Clear needs_recovery in the ext4 superblock, re-read from the device
 * since the replay may have rewritten it, and checked against @was, the
 * one read before; record a journal error as ext4 does (the filesystem
 * then needs e2fsck).
 */
static int sb_clear_recover(const char *dev, int fd, struct ext2_super_block *was,
			    uint32_t jerrno)
{
	struct ext2_super_block *sb;
	void *buf;
	int ret;

	if (posix_memalign(&buf, 4096, SB_BLOCK_BYTES))
		return -ENOMEM;
	ret = jrec_dev_pread(fd, buf, SB_BLOCK_BYTES, 0);
	if (ret)
		goto out;
	sb = (struct ext2_super_block *)((char *)buf + SB_OFFSET);
	ret = sb_replayed_check(dev, was, sb);
	if (ret)
		goto out;
	ext2fs_clear_feature_journal_needs_recovery(sb);
	if (jerrno) {
		fprintf(msg_stream(), "wbcfs: %s: the journal recorded error %d: marking the filesystem for e2fsck\n",
			dev, (int)jerrno);
		sb->s_state |= EXT2_ERROR_FS;
	}
	if (ext2fs_has_feature_metadata_csum(sb))
		sb->s_checksum = ext2fs_crc32c_le(~0U, (unsigned char *)sb,
						  offsetof(struct ext2_super_block, s_checksum));
	ret = jrec_dev_pwrite(fd, buf, SB_BLOCK_BYTES, 0);
	if (!ret)
		ret = blkdev_flush(fd);
out:
	if (ret && ret != -EUCLEAN)
		fprintf(msg_stream(), "wbcfs: %s: cannot clear needs_recovery: %s\n", dev,
			strerror(-ret));
	free(buf);
	return ret;
}

static int recover_journal(const char *dev, int fd, struct ext2_super_block *sb)
{
	struct jrec_stats st;
	struct jrec_log log = {
		.fd = fd,
		.blocksize = EXT2_BLOCK_SIZE(sb),
		.fs_blocks = ext2fs_blocks_count(sb),
		.dev = dev,
	};
	uint64_t *map = NULL;
	int ret;

	ret = journal_blocks(dev, fd, sb->s_journal_inum, &map, &log.nr_blocks);
	if (ret)
		return ret;
	log.map = map;
	ret = jrec_replay(&log, &st);
	free(map);
	if (!ret)
		ret = sb_clear_recover(dev, fd, sb, st.jerrno);
	if (ret)
		return ret;
	fprintf(msg_stream(), "wbcfs: %s: journal recovered: %u transactions, %llu blocks replayed, %llu revoked\n",
		dev, st.transactions, (unsigned long long)st.replayed,
		(unsigned long long)st.revoked);
	return 1;
}

int jrec_recover(const char *dev, int fd, bool ro)
{
	struct ext2_super_block *sb;
	void *buf;
	int ret, wfd = fd;

	if (posix_memalign(&buf, 4096, SB_BLOCK_BYTES))
		return -ENOMEM;
	ret = jrec_dev_pread(fd, buf, SB_BLOCK_BYTES, 0);
	sb = (struct ext2_super_block *)((char *)buf + SB_OFFSET);
	/* an unreadable or foreign superblock is sb_check's to report */
	if (ret || sb->s_magic != EXT2_SUPER_MAGIC || sb->s_log_block_size > 6 ||
	    !ext2fs_has_feature_journal_needs_recovery(sb)) {
		ret = 0;
		goto out;
	}
	ret = sb_journal_check(dev, sb);
	if (ret)
		goto out;
	if (ro) {
		wfd = open_writable(dev, fd);
		if (wfd < 0) {
			ret = wfd;
			goto out;
		}
	}
	ret = recover_journal(dev, wfd, sb);
	if (wfd != fd)
		close(wfd);
out:
	free(buf);
	return ret;
}
