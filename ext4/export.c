// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * File handles: the FUSE side of the kernel's export operations. With
 * FUSE_CAP_EXPORT_SUPPORT the kernel resolves a handle whose inode it has
 * dropped (drop_caches, remount, an NFS server restart) by a LOOKUP of "."
 * under the handle's node id, and finds a directory's parent by a LOOKUP
 * of "..". Node ids are ext4 inode numbers (the root is FUSE_ROOT_ID), and
 * every entry carries ext4's i_generation, so a handle to a deleted inode
 * whose number was reused is stale, as on the kernel's ext4. An inode the
 * daemon has never seen is checked before it is trusted: in range, not one
 * of ext4's reserved inodes, in use in the bitmap, linked.
 * Replies are ops.c's; this file only finds and checks inodes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "ext4_i.h"

static _Atomic uint32_t next_generation;
static pthread_once_t generation_once = PTHREAD_ONCE_INIT;

static void generation_seed(void)
{
	uint32_t seed;

	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != sizeof(seed))
		seed = (uint32_t)time(NULL) ^ (uint32_t)clock();
	atomic_store(&next_generation, seed);
}

/*
 * The i_generation of a new inode: a different one for each inode this
 * mount creates, starting at a random point, so a number freed and
 * reused gets a generation its old handles do not carry.
 */
uint32_t export_new_generation(void)
{
	pthread_once(&generation_once, generation_seed);
	return atomic_fetch_add(&next_generation, 1);
}

/*
 * stat of @ino and the generation its entries carry. The root keeps
 * generation 0: the kernel made its root inode with 0 and marks an inode
 * whose generation changes bad.
 */
int export_stat(struct wbfs *w, ext2_ino_t ino, struct stat *st, uint64_t *generation)
{
	uint32_t gen = 0;
	int ret = winode_stat_gen(w, ino, st, &gen);

	if (!ret)
		*generation = ino == EXT2_ROOT_INO ? 0 : gen;
	return ret;
}

/*
 * Is @ino a live inode a file handle may name? Context: fs_lock held.
 * -ESTALE for ext4's reserved inodes (the root is reached only as
 * FUSE_ROOT_ID), numbers past the inode count, free or unlinked inodes.
 */
static int export_check_locked(struct wbfs *w, ext2_ino_t ino)
{
	struct ext2_inode_large in;

	lock_assert_held(&w->fs_lock);

	if (ino < EXT2_FIRST_INO(w->fs->super) || ino > w->fs->super->s_inodes_count)
		return -ESTALE;
	if (!ext2fs_test_inode_bitmap2(w->fs->inode_map, ino))
		return -ESTALE;
	if (ext4_read_inode(w, ino, &in))
		return -ESTALE;
	if (!in.i_mode || !in.i_links_count || in.i_dtime)
		return -ESTALE;
	return 0;
}

/*
 * The inode a LOOKUP of "." (by handle) or ".." (the parent of a
 * directory) under @parent names, in *ino. Context: fs_lock not held.
 */
int export_lookup(struct wbfs *w, fuse_ino_t parent, const char *name, ext2_ino_t *ino)
{
	ext2_ino_t dir;
	errcode_t err;
	int ret;

	if (parent == FUSE_ROOT_ID) {
		dir = EXT2_ROOT_INO;
	} else {
		if (!ext4_ino_ours(parent))
			return -ESTALE;	/* the control directory has no handles */
		dir = (ext2_ino_t)parent;
	}
	ext4_lock(w);
	ret = dir == EXT2_ROOT_INO ? 0 : export_check_locked(w, dir);
	if (ret || !strcmp(name, ".")) {
		*ino = dir;
		goto out;
	}
	err = ext2fs_lookup(w->fs, dir, "..", 2, NULL, ino);
	if (err == EXT2_ET_NO_DIRECTORY)
		ret = -ENOTDIR;
	else if (err)
		ret = err == EXT2_ET_FILE_NOT_FOUND ? -ESTALE : -ext4_errno(err);
	else if (*ino != EXT2_ROOT_INO)
		ret = export_check_locked(w, *ino);
out:
	ext4_unlock(w);
	return ret;
}

struct regen {
	ext2_ino_t ino;
	char *buf;
	errcode_t err;
};

static int regen_block(ext2_filsys fs, blk64_t *blocknr, e2_blkcnt_t blockcnt,
		       blk64_t ref_blk, int ref_offset, void *priv)
{
	struct regen *r = priv;

	(void)blockcnt;
	(void)ref_blk;
	(void)ref_offset;
	/* the checksum is of the old generation: expected, rewritten below */
	r->err = ext2fs_read_dir_block4(fs, *blocknr, r->buf, 0, r->ino);
	if (r->err == EXT2_ET_DIR_CSUM_INVALID)
		r->err = 0;
	if (!r->err)
		r->err = ext2fs_write_dir_block4(fs, *blocknr, r->buf, 0, r->ino);
	return r->err ? BLOCK_ABORT : 0;
}

/*
 * Give the directory libext2fs just made (ext2fs_mkdir writes generation
 * 0) its generation: with metadata_csum its blocks' checksums cover it,
 * so they are written again. Context: fs_lock held.
 */
int export_set_dir_generation_locked(struct wbfs *w, ext2_ino_t ino)
{
	struct ext2_inode_large in;
	struct regen r = { .ino = ino };
	errcode_t err;
	int ret;

	lock_assert_held(&w->fs_lock);

	ret = ext4_read_inode(w, ino, &in);
	if (ret)
		return ret;
	in.i_generation = export_new_generation();
	ret = ext4_write_inode(w, ino, &in);
	if (ret || !ext2fs_has_feature_metadata_csum(w->fs->super) ||
	    (in.i_flags & EXT4_INLINE_DATA_FL))
		return ret;
	err = ext2fs_get_mem(w->fs->blocksize, &r.buf);
	if (err)
		return -ext4_errno(err);
	err = ext2fs_block_iterate3(w->fs, ino, BLOCK_FLAG_DATA_ONLY | BLOCK_FLAG_READ_ONLY,
				    NULL, regen_block, &r);
	ext2fs_free_mem(&r.buf);
	return -ext4_errno(err ? err : r.err);
}
