// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Mount-time checks of the metadata, as the kernel's ext4 makes them:
 * every group's block and inode bitmap (a bad group is fenced off, not
 * refused), the root inode, the journal inode and the group descriptors.
 * They run once, at mount, and only refuse or fence: apart from super.c
 * to keep the mount sequence readable.
 */

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wbcfs/jbd2.h"
#include "ext4_i.h"


static unsigned bits_set(const unsigned char *b, size_t nbits)
{
	unsigned n = 0;
	size_t i;

	for (i = 0; i < nbits / 8; i++)
		n += (unsigned)__builtin_popcount(b[i]);
	for (i = nbits & ~(size_t)7; i < nbits; i++)
		n += (b[i / 8] >> (i % 8)) & 1;
	return n;
}

/* Bit @blk is clear in a group whose bitmap was read: that group is bad. */
static void bb_need(ext2_filsys fs, blk64_t blk, bool *bad)
{
	dgrp_t g;

	if (!blk || blk >= ext2fs_blocks_count(fs->super))
		return;
	g = ext2fs_group_of_blk2(fs, blk);
	if (ext2fs_bg_flags_test(fs, g, EXT2_BG_BLOCK_UNINIT))
		return;		/* computed by libext2fs, not read */
	if (!ext2fs_test_block_bitmap2(fs->block_map, blk))
		bad[g] = true;
}

static int refuse_group(struct wbfs *w, const char *dev, dgrp_t g, const char *why)
{
	ext2_filsys fs = w->fs;
	blk64_t first = ext2fs_group_first_block2(fs, g);
	blk64_t n = ext2fs_group_last_block2(fs, g) - first + 1;

	msg_dev(dev, "group %u: block bitmap at block %llu is corrupt (%s); no blocks are "
		 "allocated from this group (run e2fsck)", g,
		 (unsigned long long)ext2fs_block_bitmap_loc(fs, g), why);
	w->bad_groups[w->nr_bad_groups++] = g;
	w->bad_free += ext2fs_bg_free_blocks_count(fs, g);
	ext2fs_mark_block_bitmap_range2(fs->block_map, first, (unsigned)n);
	atomic_fetch_add(&w->stats.nr_corrupt_groups, 1);
	return 0;
}

/*
 * Inode bitmaps, as ext4 checks them when it allocates an inode (group 0:
 * a reserved inode found cleared), and their free counts. A bad group
 * gives no new inodes (all marked in use in memory) and its bitmap is
 * never written back.
 */
static void validate_inode_bitmaps(struct wbfs *w, const char *dev)
{
	ext2_filsys fs = w->fs;
	unsigned ipg = fs->super->s_inodes_per_group;
	unsigned char *buf = malloc((ipg + 7) / 8);
	char why[96];
	ext2_ino_t i, first;
	dgrp_t g;

	w->bad_igroups = calloc(fs->group_desc_count, sizeof(*w->bad_igroups));
	if (!buf || !w->bad_igroups) {
		free(buf);
		return;
	}
	for (g = 0; g < fs->group_desc_count; g++) {
		unsigned nfree;

		if (ext2fs_bg_flags_test(fs, g, EXT2_BG_INODE_UNINIT))
			continue;
		first = g * ipg + 1;
		why[0] = 0;
		for (i = 1; g == 0 && i < EXT2_FIRST_INODE(fs->super); i++) {
			if (!ext2fs_test_inode_bitmap2(fs->inode_map, i)) {
				snprintf(why, sizeof(why), "reserved inode %u found cleared", i);
				break;
			}
		}
		if (!why[0] && !ext2fs_get_inode_bitmap_range2(fs->inode_map, first, ipg, buf)) {
			nfree = ipg - bits_set(buf, ipg);
			if (nfree != ext2fs_bg_free_inodes_count(fs, g))
				snprintf(why, sizeof(why), "%u free inodes, the descriptor says %u",
					 nfree, ext2fs_bg_free_inodes_count(fs, g));
		}
		if (!why[0])
			continue;
		msg_dev(dev, "group %u: inode bitmap at block %llu is corrupt (%s); no inodes are "
			 "allocated from this group (run e2fsck)", g,
			 (unsigned long long)ext2fs_inode_bitmap_loc(fs, g), why);
		w->bad_igroups[w->nr_bad_igroups++] = g;
		for (i = 0; i < ipg; i++)
			ext2fs_mark_inode_bitmap2(fs->inode_map, first + i);
		atomic_fetch_add(&w->stats.nr_corrupt_groups, 1);
	}
	free(buf);
}

/* ext4_validate_block_bitmap and mballoc's free count check, for every group. */
int ext4_validate_block_bitmaps(struct wbfs *w, const char *dev)
{
	ext2_filsys fs = w->fs;
	size_t bpg = EXT2_BLOCKS_PER_GROUP(fs->super);
	unsigned char *buf = malloc((bpg + 7) / 8);
	bool *bad = calloc(fs->group_desc_count, sizeof(*bad));
	char why[96];
	dgrp_t g;
	blk64_t b;

	w->bad_groups = calloc(fs->group_desc_count, sizeof(*w->bad_groups));
	if (!buf || !bad || !w->bad_groups) {
		free(buf);
		free(bad);
		return -ENOMEM;
	}
	for (g = 0; g < fs->group_desc_count; g++) {
		blk64_t it = ext2fs_inode_table_loc(fs, g);

		bb_need(fs, ext2fs_block_bitmap_loc(fs, g), bad);
		bb_need(fs, ext2fs_inode_bitmap_loc(fs, g), bad);
		for (b = it; it && b < it + fs->inode_blocks_per_group; b++)
			bb_need(fs, b, bad);
	}
	for (g = 0; g < fs->group_desc_count; g++) {
		blk64_t first = ext2fs_group_first_block2(fs, g);
		size_t n = (size_t)(ext2fs_group_last_block2(fs, g) - first + 1);
		unsigned nfree;

		if (ext2fs_bg_flags_test(fs, g, EXT2_BG_BLOCK_UNINIT))
			continue;
		if (bad[g]) {
			refuse_group(w, dev, g, "its own bitmaps or inode table not marked in use");
			continue;
		}
		if (ext2fs_get_block_bitmap_range2(fs->block_map, first, n, buf))
			continue;
		nfree = (unsigned)n - bits_set(buf, n);
		if (nfree != ext2fs_bg_free_blocks_count(fs, g)) {
			snprintf(why, sizeof(why), "%u free blocks, the descriptor says %u", nfree,
				 ext2fs_bg_free_blocks_count(fs, g));
			refuse_group(w, dev, g, why);
		}
	}
	free(buf);
	free(bad);
	fs->priv_data = w;
	if (!w->ro) {
		w->bm_changed = calloc(fs->group_desc_count, 1);
		w->bm_scan = BM_SCAN_QUIET;	/* what validation marked */
		if (ext4_locs_build(w) || !w->bm_changed ||
		    ext2fs_allocate_block_bitmap(fs, "busy blocks", &w->busy))
			return -ENOMEM;
		ext2fs_set_block_alloc_stats_callback(fs, ext4_bad_group_keep, NULL);
		ext2fs_set_block_alloc_stats_range_callback(fs, ext4_bad_group_keep_range, NULL);
		ext2fs_set_alloc_block_callback(fs, ext4_busy_alloc_block, NULL);
		ext2fs_set_new_range_callback(fs, ext4_busy_new_range, NULL);
	}
	validate_inode_bitmaps(w, dev);
	if (!w->nr_bad_groups && !w->nr_bad_igroups)
		return 0;
	if (!w->ro) {
		/* as ext4_error: e2fsck checks the filesystem before its next use */
		fs->super->s_state |= EXT2_ERROR_FS;
		fs->super->s_error_count++;
		if (!fs->super->s_first_error_time)
			fs->super->s_first_error_time = (uint32_t)time(NULL);
		fs->super->s_last_error_time = (uint32_t)time(NULL);
		ext2fs_mark_super_dirty(fs);
	}
	return 0;
}

/* A leaf extent within the filesystem, past the superblock: as ext4_valid_extent. */
static bool extent_in_fs(ext2_filsys fs, const struct ext2fs_extent *e)
{
	return e->e_len && e->e_pblk > fs->super->s_first_data_block &&
	       e->e_pblk < ext2fs_blocks_count(fs->super) &&
	       e->e_len <= ext2fs_blocks_count(fs->super) - e->e_pblk;
}

/*
 * Every leaf extent of @ino valid; *@first set to the block holding
 * logical block 0 (0 when it is a hole). An error message or NULL.
 */
static const char *check_extents(ext2_filsys fs, ext2_ino_t ino, struct ext2_inode *in,
				 blk64_t *first)
{
	ext2_extent_handle_t h;
	struct ext2fs_extent e;
	errcode_t err;
	int op = EXT2_EXTENT_ROOT;
	const char *bad = NULL;

	*first = 0;
	if (!(in->i_flags & EXT4_EXTENTS_FL)) {
		if (ext2fs_bmap2(fs, ino, in, NULL, 0, 0, NULL, first))
			return "its block map cannot be read";
		if (*first && *first >= ext2fs_blocks_count(fs->super))
			return "its first block is outside the filesystem";
		return NULL;
	}
	if (ext2fs_extent_header_verify(in->i_block, sizeof(in->i_block)))
		return "bad extent header";
	if (ext2fs_extent_open2(fs, ino, in, &h))
		return "bad extent header";
	for (;;) {
		err = ext2fs_extent_get(h, op, &e);
		op = EXT2_EXTENT_NEXT_LEAF;
		if (err == EXT2_ET_EXTENT_NO_NEXT || err == EXT2_ET_NO_CURRENT_NODE)
			break;
		if (err) {
			bad = "its extent tree cannot be read";
			break;
		}
		if (!(e.e_flags & EXT2_EXTENT_FLAGS_LEAF))
			continue;
		if (!extent_in_fs(fs, &e)) {
			bad = "an extent lies outside the filesystem";
			break;
		}
		if (e.e_lblk == 0)
			*first = e.e_pblk;
	}
	ext2fs_extent_free(h);
	return bad;
}

/* The root inode, as ext4_fill_super and ext4_iget check it. */
int ext4_check_root(struct wbfs *w, const char *dev)
{
	struct ext2_inode_large in;
	const char *bad = NULL;
	blk64_t first;

	memset(&in, 0, sizeof(in));
	if (ext2fs_read_inode_full(w->fs, EXT2_ROOT_INO, (struct ext2_inode *)&in, sizeof(in)))
		bad = "cannot be read";
	else if (!LINUX_S_ISDIR(in.i_mode))
		bad = "not a directory";
	else if (!in.i_links_count)
		bad = "no links";
	else if (!EXT2_I_SIZE(&in) || !ext2fs_get_stat_i_blocks(w->fs, (struct ext2_inode *)&in))
		bad = "no blocks";
	else
		bad = check_extents(w->fs, EXT2_ROOT_INO, (struct ext2_inode *)&in, &first);
	if (!bad && !first)
		bad = "its first block is a hole";
	if (!bad)
		return 0;
	msg_dev(dev, "corrupt root inode (%s); run e2fsck", bad);
	return -EUCLEAN;
}

#define JBD2_MAGIC 0xc03b3998U
#define JBD2_MIN_BLOCKS 1024

/*
 * The journal inode, as the kernel checks it when it loads the journal:
 * a regular file with links, long enough, valid extents, and a journal
 * superblock at its block 0. wbcfs never replays or writes the journal,
 * but a broken one means a damaged filesystem: refused read-write.
 */
int ext4_check_journal(struct wbfs *w, const char *dev)
{
	ext2_filsys fs = w->fs;
	struct ext2_inode_large in;
	const char *bad = NULL;
	blk64_t first = 0;
	uint32_t *jsb;
	ext2_ino_t ino = fs->super->s_journal_inum;

	if (!ext2fs_has_feature_journal(fs->super) || !ino || w->ro)
		return 0;
	memset(&in, 0, sizeof(in));
	if (ext2fs_read_inode_full(fs, ino, (struct ext2_inode *)&in, sizeof(in)))
		bad = "cannot be read";
	else if (!in.i_links_count)
		bad = "deleted";
	else if (!LINUX_S_ISREG(in.i_mode))
		bad = "not a regular file";
	else if (EXT2_I_SIZE(&in) / fs->blocksize < JBD2_MIN_BLOCKS)
		bad = "too short";
	else
		bad = check_extents(fs, ino, (struct ext2_inode *)&in, &first);
	if (!bad && !first)
		bad = "no journal superblock";
	if (!bad) {
		if (posix_memalign((void **)&jsb, PAGE_SIZE, fs->blocksize))
			return -ENOMEM;
		if (io_channel_read_blk64(fs->io, first, 1, jsb))
			bad = "its superblock cannot be read";
		else if (__builtin_bswap32(jsb[0]) != JBD2_MAGIC)
			bad = "no journal superblock";
		free(jsb);
	}
	if (!bad)
		return 0;
	msg_dev(dev, "corrupt journal inode %u (%s); run e2fsck (or mount with -o ro)", ino, bad);
	return -EUCLEAN;
}

/*
 * The group descriptors, as ext4_check_descriptors: where they place the
 * bitmaps and inode tables, and (read-write only, as the kernel) their
 * checksums. Read after any journal replay, so what the log left is what
 * is checked.
 */
int ext4_check_desc(struct wbfs *w, const char *dev)
{
	errcode_t err = ext2fs_check_desc(w->fs);
	dgrp_t g;

	if (err) {
		msg_dev(dev, "corrupt group descriptors (%s); run e2fsck", error_message(err));
		return -EUCLEAN;
	}
	if (w->ro || !ext2fs_has_group_desc_csum(w->fs))
		return 0;
	for (g = 0; g < w->fs->group_desc_count; g++) {
		if (ext2fs_group_desc_csum_verify(w->fs, g))
			continue;
		msg_dev(dev, "corrupt group descriptors (bad checksum on group %u); run e2fsck (or mount with -o ro)",
			 g);
		return -EUCLEAN;
	}
	return 0;
}
