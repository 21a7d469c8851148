// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Reading what directories and symlinks hold: readlink, readdir at an
 * offset (inline data, or directory blocks checked and read through the
 * cache) and the directory snapshots readdir serves from. Apart from
 * dir.c: these only read, and change no name.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/sysmacros.h>
#include <linux/fs.h>

#include <ext2fs/ext3_extents.h>

#include "ext4_i.h"

int dir_readlink(struct wbfs *w, ext2_ino_t ino, char *buf, size_t len)
{
	struct ext2_inode_large in;
	uint64_t size;
	blk64_t pblk = 0;
	char *blk = NULL;
	int ret;

	ext4_lock(w);
	ret = ext4_read_inode(w, ino, &in);
	if (ret)
		goto out;
	if (!LINUX_S_ISLNK(in.i_mode)) {
		ret = -EINVAL;
		goto out;
	}
	size = EXT2_I_SIZE(&in);
	if (size >= len || size >= w->fs->blocksize) {
		ret = -ENAMETOOLONG;
		goto out;
	}
	if (ext2fs_is_fast_symlink((struct ext2_inode *)&in)) {
		memcpy(buf, in.i_block, size);
	} else {
		ret = -ext4_errno(ext2fs_bmap2(w->fs, ino, (struct ext2_inode *)&in, NULL, 0, 0,
					       NULL, &pblk));
		if (!ret && (blk = malloc(w->fs->blocksize)) == NULL)
			ret = -ENOMEM;
		if (!ret)
			ret = -ext4_errno(io_channel_read_blk64(w->fs->io, pblk, 1, blk));
		if (!ret)
			memcpy(buf, blk, size);
	}
	if (!ret)
		buf[size] = 0;
out:
	ext4_unlock(w);
	free(blk);
	return ret;
}

static unsigned char dt_of(int ftype)
{
	static const unsigned char map[] = {
		[EXT2_FT_UNKNOWN] = DT_UNKNOWN, [EXT2_FT_REG_FILE] = DT_REG,
		[EXT2_FT_DIR] = DT_DIR, [EXT2_FT_CHRDEV] = DT_CHR,
		[EXT2_FT_BLKDEV] = DT_BLK, [EXT2_FT_FIFO] = DT_FIFO,
		[EXT2_FT_SOCK] = DT_SOCK, [EXT2_FT_SYMLINK] = DT_LNK,
	};

	return ftype >= 0 && ftype < (int)sizeof(map) ? map[ftype] : DT_UNKNOWN;
}

static int snap_cb(ext2_ino_t dir, int entry, struct ext2_dir_entry *d, int offset,
		   int blocksize, char *buf, void *priv)
{
	struct dir_snap *s = priv;
	int len = ext2fs_dirent_name_len(d);

	if (!d->inode)
		return 0;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct dir_snap_ent *e = realloc(s->e, cap * sizeof(*e));

		if (!e)
			return DIRENT_ABORT;
		s->e = e;
		s->cap = cap;
	}
	s->e[s->n].name = strndup(d->name, (size_t)len);
	if (!s->e[s->n].name)
		return DIRENT_ABORT;
	s->e[s->n].ino = d->inode;
	s->e[s->n].type = dt_of(ext2fs_dirent_file_type(d));
	s->n++;
	return 0;
}

/*
 * Readdir without a directory handle (the kernel stops sending OPENDIR
 * once it is refused, see ops.c): a stream position is the byte offset of
 * an entry in the directory file, as ext4's own readdir of a linear
 * directory uses. libext2fs never moves a live entry: an unlink merges the
 * entry into the one before it, an insert splits an entry's slack after
 * it, a new block goes at the end. So a position taken from one listing
 * stays valid while entries come and go: the walk restarts at the start
 * of the position's block and skips entries before it, whatever boundaries
 * that block has now. An inline-data directory (no blocks) is listed from
 * a full walk, numbered in order: it holds a handful of entries, which one
 * READDIR returns at once.
 */
static int dir_read_inline(struct wbfs *w, ext2_ino_t ino, uint64_t pos, dir_emit_t emit,
			   void *priv)
{
	struct dir_snap snap;
	errcode_t err;
	size_t i;

	memset(&snap, 0, sizeof(snap));
	err = ext2fs_dir_iterate2(w->fs, ino, 0, NULL, snap_cb, &snap);
	for (i = (size_t)pos; !err && i < snap.n; i++)
		if (emit(priv, snap.e[i].name, strlen(snap.e[i].name), snap.e[i].ino,
			 snap.e[i].type, i + 1))
			break;
	dir_snap_free(&snap);
	return -ext4_errno(err);
}

/*
 * Emit the live entries of directory block @buf (logical block @lblk) at
 * positions @pos or later. Returns 0 to go on, 1 when @emit stopped, or
 * -EUCLEAN for a block whose checksum passed but whose entries do not fit.
 */
static int dir_block_emit(struct wbfs *w, const char *buf, uint64_t lblk, uint64_t pos,
			  dir_emit_t emit, void *priv)
{
	unsigned bs = w->fs->blocksize, off = 0;

	while (off + 8 <= bs) {
		struct ext2_dir_entry *d = (struct ext2_dir_entry *)(buf + off);
		uint64_t at = lblk * bs + off;
		int len = ext2fs_dirent_name_len(d);
		unsigned rec_len;

		if (ext2fs_get_rec_len(w->fs, d, &rec_len) || rec_len < 8 ||
		    off + rec_len > bs || (unsigned)len + 8 > rec_len)
			return -EUCLEAN;
		off += rec_len;
		if (!d->inode || at < pos || d->inode > w->fs->super->s_inodes_count)
			continue;
		if (emit(priv, d->name, (size_t)len, d->inode, dt_of(ext2fs_dirent_file_type(d)),
			 at + 1))
			return 1;
	}
	return 0;
}

/*
 * Is @buf, block of directory @ino (inode @in), whole by its tail checksum
 * (metadata_csum)? ext2fs_dir_block_csum_verify reads the inode through
 * libext2fs for its generation, so the sum is taken here from @in, as the
 * kernel's ext4 takes it: crc32c over the inode number, the generation
 * and the entries before the tail. A block without a leaf's tail (an
 * htree node) is not judged here: false.
 */
static bool dir_block_csum_ok(struct wbfs *w, ext2_ino_t ino, const struct ext2_inode_large *in,
			      const char *buf)
{
	unsigned bs = w->fs->blocksize;
	const struct ext2_dir_entry_tail *t = (const void *)(buf + bs - sizeof(*t));
	uint32_t le_ino = ext2fs_cpu_to_le32(ino), crc;

	if (!ext2fs_has_feature_metadata_csum(w->fs->super))
		return true;
	if (t->det_reserved_zero1 || ext2fs_le16_to_cpu(t->det_rec_len) != sizeof(*t) ||
	    ext2fs_le16_to_cpu(t->det_reserved_name_len) != EXT2_DIR_NAME_LEN_CSUM)
		return false;
	crc = ext2fs_crc32c_le(w->fs->csum_seed, (const unsigned char *)&le_ino, sizeof(le_ino));
	crc = ext2fs_crc32c_le(crc, (const unsigned char *)&in->i_generation,
			       sizeof(in->i_generation));
	crc = ext2fs_crc32c_le(crc, (const unsigned char *)buf, bs - sizeof(*t));
	return ext2fs_le32_to_cpu(t->det_checksum) == crc;
}

/*
 * Block @lblk of directory @ino (inode @in) without fs_lock: mapped
 * through the extents the inode holds itself (a tree of depth 0, a
 * directory of up to four extents: all but the largest) and copied from
 * the metadata cache (iomgr_meta_peek), its checksum verified. The kernel
 * holds the directory's i_rwsem over a READDIR and over every change to
 * its entries, so @in and the block are of one moment. Returns 1 with the
 * block in @buf, 0 for a hole, -EAGAIN when the block is not served this
 * way (not cached, a deeper tree, an unwritten extent, an htree node, a
 * checksum that fails): the read under fs_lock decides.
 */
static int dir_block_peek(struct wbfs *w, ext2_ino_t ino, const struct ext2_inode_large *in,
			  uint64_t lblk, char *buf)
{
	const struct ext3_extent_header *eh = (const void *)in->i_block;
	const struct ext3_extent *ex = (const void *)(eh + 1);
	unsigned bs = w->fs->blocksize, n, i;

	if (!(in->i_flags & EXT4_EXTENTS_FL) || bs > PAGE_SIZE ||
	    ext2fs_le16_to_cpu(eh->eh_magic) != EXT3_EXT_MAGIC || eh->eh_depth)
		return -EAGAIN;
	n = ext2fs_le16_to_cpu(eh->eh_entries);
	if (n > (sizeof(in->i_block) - sizeof(*eh)) / sizeof(*ex))
		return -EAGAIN;
	for (i = 0; i < n; i++, ex++) {
		uint64_t first = ext2fs_le32_to_cpu(ex->ee_block), pblk;
		unsigned len = ext2fs_le16_to_cpu(ex->ee_len);
		bool unwritten = len > EXT_INIT_MAX_LEN;

		if (unwritten)
			len -= EXT_INIT_MAX_LEN;
		if (lblk < first || lblk >= first + len)
			continue;
		if (unwritten)
			return -EAGAIN;
		pblk = ((uint64_t)ext2fs_le16_to_cpu(ex->ee_start_hi) << 32) +
		       ext2fs_le32_to_cpu(ex->ee_start) + (lblk - first);
		if (pblk >= ext2fs_blocks_count(w->fs->super) ||
		    !iomgr_meta_peek(w, pblk * bs, buf, bs) || !dir_block_csum_ok(w, ino, in, buf))
			return -EAGAIN;
		return 1;
	}
	return 0;
}

/* Block @lblk of directory @ino (inode @in) through libext2fs; 0 and no block for a hole. */
static int dir_block_read_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in,
				 uint64_t lblk, char *buf)
{
	blk64_t pblk = 0;
	int ret = -ext4_errno(ext2fs_bmap2(w->fs, ino, (struct ext2_inode *)in, NULL, 0, lblk,
					   NULL, &pblk));

	lock_assert_held(&w->fs_lock);

	if (ret || !pblk)
		return ret;
	ret = -ext4_errno(ext2fs_read_dir_block4(w->fs, pblk, buf, 0, ino));
	return ret ? ret : 1;
}

/*
 * Block @lblk of directory @ino (inode @in): without fs_lock when it can
 * (dir_block_peek), else through libext2fs, under fs_lock for this block
 * alone unless @locked (the caller holds it). 1 with the block in @buf,
 * 0 for a hole, or -errno.
 */
static int dir_block_get(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in,
			 uint64_t lblk, char *buf, bool locked)
{
	int ret = locked ? -EAGAIN : dir_block_peek(w, ino, in, lblk, buf);

	if (ret > 0)
		atomic_fetch_add(&w->stats.nr_readdir_unlocked, 1);
	if (ret != -EAGAIN)
		return ret;
	if (!locked)
		ext4_lock(w);
	ret = dir_block_read_locked(w, ino, in, lblk, buf);
	if (!locked)
		ext4_unlock(w);
	return ret;
}

/*
 * A listing from position @pos: block by block (dir_block_get) when the
 * directory's inode is cached; the whole listing of an uncached or
 * inline-data directory under fs_lock.
 */
int dir_read_at(struct wbfs *w, ext2_ino_t ino, uint64_t pos, dir_emit_t emit, void *priv)
{
	unsigned bs = w->fs->blocksize;
	struct ext2_inode_large in;
	bool locked = false;
	uint64_t size, lblk;
	char *buf = NULL;
	int ret = 0;

	if (!winode_peek_inode(w, ino, &in)) {
		ext4_lock(w);
		locked = true;
		ret = ext4_read_inode(w, ino, &in);
	}
	if (!ret && !LINUX_S_ISDIR(in.i_mode))
		ret = -ENOTDIR;
	if (ret)
		goto out;
	if (in.i_flags & EXT4_INLINE_DATA_FL) {
		if (!locked) {
			ext4_lock(w);
			locked = true;
		}
		ret = dir_read_inline(w, ino, pos, emit, priv);
		goto out;
	}
	buf = malloc(bs);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	size = EXT2_I_SIZE(&in);
	for (lblk = pos / bs; !ret && lblk * bs < size; lblk++) {
		ret = dir_block_get(w, ino, &in, lblk, buf, locked);
		if (ret > 0)
			ret = dir_block_emit(w, buf, lblk, pos, emit, priv);
	}
	if (ret > 0)
		ret = 0;	/* the caller's buffer is full */
out:
	if (locked)
		ext4_unlock(w);
	free(buf);
	return ret;
}

/* Read all entries of @ino (with "." and "..") for a readdir stream. */
int dir_snapshot(struct wbfs *w, ext2_ino_t ino, struct dir_snap *snap)
{
	errcode_t err;

	memset(snap, 0, sizeof(*snap));
	ext4_lock(w);
	err = ext2fs_dir_iterate2(w->fs, ino, 0, NULL, snap_cb, snap);
	ext4_unlock(w);
	if (err) {
		dir_snap_free(snap);
		return -ext4_errno(err);
	}
	return 0;
}

void dir_snap_free(struct dir_snap *snap)
{
	size_t i;

	for (i = 0; i < snap->n; i++)
		free(snap->e[i].name);
	free(snap->e);
	memset(snap, 0, sizeof(*snap));
}
