// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The ioctls of ext4 that FUSE carries, and the inode flags behind
 * lsattr/chattr. The kernel's fuse turns FS_IOC_GETFLAGS/SETFLAGS and
 * FS_IOC_FSGETXATTR/FSSETXATTR into FUSE_IOCTL on a file or directory it
 * opens itself; FITRIM and the label ioctls arrive as they are. The
 * kernel's fuse knows nothing of the flags, so the immutable and
 * append-only rules ext4's VFS applies are applied here
 * (iflags_check_*), from a copy of i_flags in each winode. Also FIBMAP
 * on fuseblk mounts (the bmap op). Replies are sent holding no lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "wbcfs/blkdev.h"
#include "ext4_i.h"

/* What lsattr shows: ext4's user-visible flags. */
#define IFL_VISIBLE (EXT2_FL_USER_VISIBLE | EXT4_INLINE_DATA_FL | EXT4_VERITY_FL)
/*
 * What chattr may change: ext4's user-modifiable flags less those whose
 * machinery wbcfs has not (data journalling, casefolding, DAX).
 */
#define IFL_MODIFIABLE (EXT2_SECRM_FL | EXT2_UNRM_FL | EXT2_COMPR_FL | EXT2_SYNC_FL | \
			EXT2_IMMUTABLE_FL | EXT2_APPEND_FL | EXT2_NODUMP_FL | \
			EXT2_NOATIME_FL | EXT2_NOTAIL_FL | EXT2_DIRSYNC_FL | \
			EXT2_TOPDIR_FL | EXT4_EXTENTS_FL | EXT4_PROJINHERIT_FL)
#define IFL_UNSUPPORTED (EXT3_JOURNAL_DATA_FL | EXT4_CASEFOLD_FL | 0x02000000 /* DAX */)
/* Flags meaningful on regular files, and on other non-directories (ext4) */
#define IFL_REG_MASK (~(EXT2_DIRSYNC_FL | EXT2_TOPDIR_FL | EXT4_CASEFOLD_FL | \
			EXT4_PROJINHERIT_FL))
#define IFL_OTHER_MASK (EXT2_NODUMP_FL | EXT2_NOATIME_FL)

static uint32_t iflags_mask(mode_t mode, uint32_t flags)
{
	if (S_ISDIR(mode))
		return flags;
	if (S_ISREG(mode))
		return flags & IFL_REG_MASK;
	return flags & IFL_OTHER_MASK;
}

/* What a new inode takes from its directory's flags (ext4's inherited set). */
#define IFL_INHERITED (EXT2_SECRM_FL | EXT2_UNRM_FL | EXT2_COMPR_FL | EXT2_SYNC_FL | \
		       EXT2_NODUMP_FL | EXT2_NOATIME_FL | EXT2_NOCOMPR_FL | \
		       EXT2_NOTAIL_FL | EXT2_DIRSYNC_FL | EXT4_PROJINHERIT_FL)

/* The flags a new inode of @mode in a directory with @dir_flags starts with. */
uint32_t iflags_inherit(mode_t mode, uint32_t dir_flags)
{
	return iflags_mask(mode, dir_flags & IFL_INHERITED);
}

/* i_flags of @ino: the winode's copy, or the inode table's. */
static uint32_t iflags_of(struct wbfs *w, ext2_ino_t ino)
{
	struct ext2_inode_large in;
	struct winode *wi = winode_find(w, ino);
	int ret;

	if (wi)
		return atomic_load(&wi->iflags);
	ext4_lock(w);
	ret = ext4_read_inode(w, ino, &in);
	ext4_unlock(w);
	return ret ? 0 : in.i_flags;
}

/*
 * ext4's IS_SYNC of @ino: a sync mount, or chattr +S. Its writes are
 * durable before they return (as O_DSYNC), and its changes of size,
 * attributes, xattrs and flags are committed before they return.
 */
bool iflags_is_sync(struct wbfs *w, ext2_ino_t ino)
{
	return w->opts.sync || (iflags_of(w, ino) & EXT2_SYNC_FL);
}

/*
 * ext4's IS_DIRSYNC of directory @dir: a sync or dirsync mount, chattr +S
 * or +D. Entries made or removed in it are committed before the reply.
 */
bool iflags_is_dirsync(struct wbfs *w, ext2_ino_t dir)
{
	return w->opts.sync || w->opts.dirsync ||
	       (iflags_of(w, dir) & (EXT2_SYNC_FL | EXT2_DIRSYNC_FL));
}

bool winode_noatime_flag(struct winode *wi)
{
	return atomic_load(&wi->iflags) & EXT2_NOATIME_FL;
}

/* -EPERM when @ino has one of @deny (EXT2_IMMUTABLE_FL, EXT2_APPEND_FL). */
int iflags_check(struct wbfs *w, ext2_ino_t ino, uint32_t deny)
{
	return iflags_of(w, ino) & deny ? -EPERM : 0;
}

/* setattr: ext4 refuses mode, owner, size and set times of an immutable or
 * append-only inode, and "now" times of an immutable one. */
int iflags_check_setattr(struct wbfs *w, ext2_ino_t ino, int to_set)
{
	const int now = FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW;
	uint32_t deny = 0;

	if ((to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID |
		       FUSE_SET_ATTR_SIZE)) ||
	    ((to_set & FUSE_SET_ATTR_ATIME) && !(to_set & FUSE_SET_ATTR_ATIME_NOW)) ||
	    ((to_set & FUSE_SET_ATTR_MTIME) && !(to_set & FUSE_SET_ATTR_MTIME_NOW)))
		deny = EXT2_IMMUTABLE_FL | EXT2_APPEND_FL;
	else if (to_set & now)
		deny = EXT2_IMMUTABLE_FL;
	return deny ? iflags_check(w, ino, deny) : 0;
}

/* open(2): no writing an immutable file, only appending to an append-only one. */
int iflags_check_open(struct winode *wi, int flags)
{
	uint32_t fl = atomic_load(&wi->iflags);
	bool write = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);

	if ((fl & EXT2_IMMUTABLE_FL) && write)
		return -EPERM;
	if ((fl & EXT2_APPEND_FL) && write && (!(flags & O_APPEND) || (flags & O_TRUNC)))
		return -EPERM;
	return 0;
}

/* write(2) through a file opened with @flags (the flag may be set since). */
int iflags_check_write(struct winode *wi, int flags)
{
	uint32_t fl = atomic_load(&wi->iflags);

	if (fl & EXT2_IMMUTABLE_FL)
		return -EPERM;
	if ((fl & EXT2_APPEND_FL) && !(flags & O_APPEND))
		return -EPERM;
	return 0;
}

/* fallocate(2): only plain allocation, keeping the size, on append-only. */
int iflags_check_fallocate(struct winode *wi, int mode)
{
	uint32_t fl = atomic_load(&wi->iflags);

	if (fl & EXT2_IMMUTABLE_FL)
		return -EPERM;
	if ((fl & EXT2_APPEND_FL) && (mode & ~FALLOC_FL_KEEP_SIZE))
		return -EPERM;
	return 0;
}

/* ---- FS_IOC_GETFLAGS / SETFLAGS / FSGETXATTR / FSSETXATTR ------------- */

static const struct {
	uint32_t fl, xfl;
} xflag_map[] = {
	{ EXT2_SYNC_FL, FS_XFLAG_SYNC },
	{ EXT2_IMMUTABLE_FL, FS_XFLAG_IMMUTABLE },
	{ EXT2_APPEND_FL, FS_XFLAG_APPEND },
	{ EXT2_NODUMP_FL, FS_XFLAG_NODUMP },
	{ EXT2_NOATIME_FL, FS_XFLAG_NOATIME },
	{ EXT4_PROJINHERIT_FL, FS_XFLAG_PROJINHERIT },
};

static uint32_t flags_to_xflags(uint32_t fl)
{
	uint32_t x = 0;
	size_t i;

	for (i = 0; i < sizeof(xflag_map) / sizeof(xflag_map[0]); i++)
		if (fl & xflag_map[i].fl)
			x |= xflag_map[i].xfl;
	return x;
}

/* @fl with the flags fsxattr speaks of replaced by @xfl's. */
static int xflags_to_flags(uint32_t fl, uint32_t xfl, uint32_t *out)
{
	size_t i;

	for (i = 0; i < sizeof(xflag_map) / sizeof(xflag_map[0]); i++) {
		fl &= ~xflag_map[i].fl;
		if (xfl & xflag_map[i].xfl) {
			fl |= xflag_map[i].fl;
			xfl &= ~xflag_map[i].xfl;
		}
	}
	*out = fl;
	return xfl ? -EOPNOTSUPP : 0;
}

static int flags_get(struct wbfs *w, ext2_ino_t ino, uint32_t *fl, uint32_t *projid)
{
	struct ext2_inode_large in;
	int ret;

	ext4_lock(w);
	ret = ext4_read_inode(w, ino, &in);
	ext4_unlock(w);
	if (ret)
		return ret;
	*fl = in.i_flags & IFL_VISIBLE;
	*projid = in.i_extra_isize >= offsetof(struct ext2_inode_large, i_projid) +
		  sizeof(in.i_projid) - EXT2_GOOD_OLD_INODE_SIZE ? in.i_projid : 0;
	return 0;
}

/*
 * chattr: the new user flags of @ino are @want, as ext4 takes them. The
 * owner (or root) only; immutable and append-only change for root only
 * (CAP_LINUX_IMMUTABLE), and nothing else changes while immutable stays;
 * extents are never cleared, and set only where they are already.
 */
static int flags_set(struct wbfs *w, ext2_ino_t ino, uint32_t want, const struct fuse_ctx *ctx)
{
	struct ext2_inode_large in;
	struct winode *wi;
	struct timespec now;
	uint32_t old = 0, nfl = 0;
	int ret;

	if (w->ro)
		return -EROFS;
	ext4_lock(w);
	ret = ext4_read_inode(w, ino, &in);
	if (ret)
		goto out;
	ret = -EPERM;
	if (ctx->uid && ctx->uid != inode_uid(in))
		goto out;
	old = in.i_flags;
	want = iflags_mask(in.i_mode, want);
	if ((old ^ want) & (EXT2_IMMUTABLE_FL | EXT2_APPEND_FL) && ctx->uid)
		goto out;
	nfl = (old & ~IFL_MODIFIABLE) | (want & IFL_MODIFIABLE);
	/* an immutable inode changes no other flag unless it stops being so */
	if ((old & nfl & EXT2_IMMUTABLE_FL) && nfl != old)
		goto out;
	ret = -EOPNOTSUPP;
	if ((old ^ want) & (EXT4_EXTENTS_FL | IFL_UNSUPPORTED))
		goto out;
	/* ext4 stamps ctime even when no flag changes (chattr of what is) */
	in.i_flags = nfl;
	/* a write's pending times first: its older ctime must not win */
	winode_fold_attrs_locked(w, ino, &in);
	ext4_now(&now);
	ext4_ts_set(&in, TS_CTIME, &now);
	ret = ext4_write_inode(w, ino, &in);
	wi = winode_find(w, ino);
	if (!ret && wi)
		atomic_store(&wi->iflags, nfl);
out:
	ext4_unlock(w);
	/* as ext4_ioctl_setflags: committed when the inode is (now) sync */
	if (!ret && nfl != old && iflags_is_sync(w, ino))
		ret = ext4_sync_durable(w);
	return ret;
}

/* ---- the label ---------------------------------------------------------- */

static int label_get(struct wbfs *w, char *out)
{
	memset(out, 0, FSLABEL_MAX);
	ext4_lock(w);
	memcpy(out, w->fs->super->s_volume_name, sizeof(w->fs->super->s_volume_name));
	ext4_unlock(w);
	return 0;
}

/* ext4 keeps 16 bytes; longer is EINVAL. Written with the superblock. */
static int label_set(struct wbfs *w, const char *in, const struct fuse_ctx *ctx)
{
	size_t len = strnlen(in, FSLABEL_MAX);
	struct ext2_super_block *sb;

	if (ctx->uid)
		return -EPERM;
	if (w->ro)
		return -EROFS;
	if (len == FSLABEL_MAX || len > sizeof(sb->s_volume_name))
		return -EINVAL;
	ext4_lock(w);
	sb = w->fs->super;
	memset(sb->s_volume_name, 0, sizeof(sb->s_volume_name));
	memcpy(sb->s_volume_name, in, len);
	ext2fs_mark_super_dirty(w->fs);
	ext4_unlock(w);
	return 0;
}

/* ---- the ioctl op --------------------------------------------------------- */

/* Valid replies: fuse_reply_ioctl, fuse_reply_err */
void ext4_ioctl(fuse_req_t req, fuse_ino_t fino, unsigned int cmd, void *arg,
		struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		size_t in_bufsz, size_t out_bufsz)
{
	struct wbfs *w = fuse_req_userdata(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	ext2_ino_t ino = ext4_ino(fino);
	union {
		uint32_t fl;
		struct fsxattr fsx;
		struct fstrim_range trim;
		char label[FSLABEL_MAX];
	} u;
	uint32_t fl = 0, projid = 0;
	size_t out = 0;
	int ret;

	(void)arg;
	(void)fi;
	(void)flags;
	if (!ext4_ino_ours(fino)) {	/* the control directory's */
		fuse_reply_err(req, ENOTTY);
		return;
	}
	memset(&u, 0, sizeof(u));
	/* restricted ioctls: the kernel sized both buffers, from @cmd or (for
	 * the flags of lsattr/chattr) from what it passes itself: an int */
	if (in_bufsz > sizeof(u)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	memcpy(&u, in_buf, in_bufsz);
	switch (cmd) {
	case FS_IOC_GETFLAGS:
	case FS_IOC32_GETFLAGS:
		ret = flags_get(w, ino, &fl, &projid);
		u.fl = fl;
		out = sizeof(u.fl);
		break;
	case FS_IOC_SETFLAGS:
	case FS_IOC32_SETFLAGS:
		ret = in_bufsz < sizeof(u.fl) ? -EINVAL : flags_set(w, ino, u.fl, ctx);
		break;
	case FS_IOC_FSGETXATTR:
		ret = flags_get(w, ino, &fl, &projid);
		memset(&u, 0, sizeof(u));
		u.fsx.fsx_xflags = flags_to_xflags(fl);
		u.fsx.fsx_projid = projid;
		out = sizeof(u.fsx);
		break;
	case FS_IOC_FSSETXATTR:
		ret = in_bufsz < sizeof(u.fsx) ? -EINVAL : flags_get(w, ino, &fl, &projid);
		if (!ret && (u.fsx.fsx_projid != projid || u.fsx.fsx_extsize ||
			     u.fsx.fsx_cowextsize))
			ret = -EOPNOTSUPP;
		if (!ret)
			ret = xflags_to_flags(fl, u.fsx.fsx_xflags, &fl);
		if (!ret)
			ret = flags_set(w, ino, fl, ctx);
		break;
	case FS_IOC_GETVERSION:
	case FS_IOC32_GETVERSION: {
		struct stat st;
		uint64_t gen;

		ret = export_stat(w, ino, &st, &gen);
		u.fl = (uint32_t)gen;
		out = sizeof(u.fl);	/* an int, as ext4 writes it */
		break;
	}
	case FS_IOC_GETFSLABEL:
		ret = label_get(w, u.label);
		out = FSLABEL_MAX;
		break;
	case FS_IOC_SETFSLABEL:
		ret = in_bufsz < FSLABEL_MAX ? -EINVAL : label_set(w, u.label, ctx);
		break;
	case FITRIM:
		ret = ctx->uid ? -EPERM : in_bufsz < sizeof(u.trim) ? -EINVAL :
		      ext4_trim(w, &u.trim);
		out = sizeof(u.trim);
		break;
	default:
		ret = -ENOTTY;
		break;
	}
	/*
	 * chattr stamped ctime, and the kernel keeps the old one until its
	 * attributes time out: drop them before the reply, so stat after
	 * chattr sees it (the kernel takes no page lock for that).
	 */
	if (!ret && (cmd == FS_IOC_SETFLAGS || cmd == FS_IOC32_SETFLAGS ||
		     cmd == FS_IOC_FSSETXATTR)) {
		struct winode *wi = winode_find(w, ino);

		if (wi)
			kcache_attr(w, wi);
	}
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_ioctl(req, 0, out ? &u : NULL, out < out_bufsz ? out : out_bufsz);
}

/* ---- FIBMAP ---------------------------------------------------------------- */

/*
 * The device block of @idx (in @blocksize units) of the file, 0 for a
 * hole or an unwritten extent. Dirty pages are written first, as ext4
 * does, so delayed allocation gets its blocks.
 * Valid replies: fuse_reply_bmap, fuse_reply_err
 */
void ext4_bmap(fuse_req_t req, fuse_ino_t fino, size_t blocksize, uint64_t idx)
{
	struct wbfs *w = fuse_req_userdata(req);
	unsigned fs_bs = w->fs->blocksize;
	struct ext_run run;
	struct winode *wi;
	uint64_t byte, res = 0;
	int ret = 0;

	if (!ext4_ino_ours(fino) || !blocksize || blocksize > fs_bs || fs_bs % blocksize) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	wi = winode_get(w, ext4_ino(fino), false);
	if (!wi) {
		fuse_reply_err(req, EIO);
		return;
	}
	if (!S_ISREG(wi->mode)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	byte = idx * blocksize;
	if (!w->ro && (atomic_load(&wi->map.nrdirty) || atomic_load(&wi->nr_delalloc)))
		ret = bdi_sync_inode(w->bdi, &wi->wb, 0, UINT64_MAX, true);
	if (!ret)
		ret = ec_lookup(w, wi, byte / fs_bs, &run);
	if (ret) {
		fuse_reply_err(req, -ret);
		return;
	}
	if (run.pblk && !run.uninit)
		res = (run.pblk * fs_bs + byte % fs_bs) / blocksize;
	fuse_reply_bmap(req, res);
}

/* ---- FITRIM ------------------------------------------------------------------- */

/*
 * Discard device blocks [blk, blk+n): BLKDISCARD, NBD TRIM, an RBD
 * discard, or a hole in an image file.
 */
static int trim_discard(struct wbfs *w, uint64_t blk, uint64_t n)
{
	uint64_t r[2] = { blk * w->fs->blocksize, n * w->fs->blocksize };
	uint64_t seq = devlog_on ? devlog_discard_issued(r[0], r[1]) : 0;
	int ret;

	if (w->nbd || w->rbd)
		ret = blkdev_discard(w->dev_fd, r[0], r[1]);
	else if (w->is_blkdev)
		ret = ioctl(w->dev_fd, BLKDISCARD, r) ? -errno : 0;
	else
		ret = fallocate(w->dev_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				(off_t)r[0], (off_t)r[1]) ? -errno : 0;
	if (seq)
		devlog_completed(DEVLOG_WRITE_DONE, seq, ret);
	return ret;
}

/*
 * Discard the free runs of at least @minlen blocks in [first, last] of one
 * block group; returns the blocks discarded or -errno. Context: fs_lock
 * held, so no block of the range is allocated meanwhile (delayed
 * allocation takes its blocks under fs_lock, marking them in the bitmap).
 */
static int64_t trim_range_locked(struct wbfs *w, uint64_t first, uint64_t last, uint64_t minlen)
{
	ext2fs_block_bitmap map = w->fs->block_map;
	blk64_t s = first, e;
	int64_t done = 0;
	int ret;

	lock_assert_held(&w->fs_lock);

	while (s <= last) {
		if (ext2fs_find_first_zero_block_bitmap2(map, s, last, &s))
			break;
		if (ext2fs_find_first_set_block_bitmap2(map, s, last, &e))
			e = last + 1;
		if (e - s >= minlen) {
			iomgr_forget_range(w, s, e - s);
			ret = trim_discard(w, s, e - s);
			if (ret)
				return ret;
			done += (int64_t)(e - s);
		}
		s = e;
	}
	return done;
}

/*
 * Groups discarded since a block was last freed in them, as ext4 keeps
 * them: FITRIM skips such a group unless asked for a smaller minlen than
 * last time. Set up at the first FITRIM, per filesystem (w->trimmed_groups).
 * Protected by fs_lock (libext2fs calls the hooks under it).
 */

static void trim_forget_range(struct wbfs *w, blk64_t blk, blk64_t num)
{
	dgrp_t g, last;

	if (!num)
		return;
	last = ext2fs_group_of_blk2(w->fs, blk + num - 1);
	for (g = ext2fs_group_of_blk2(w->fs, blk); g <= last; g++)
		w->trimmed_groups[g] = 0;
}

/* libext2fs freed [blk, blk+num) (ext4.c's hook). Context: fs_lock. */
void ext4_trim_note_freed(struct wbfs *w, blk64_t blk, blk64_t num)
{
	if (w->trimmed_groups)
		trim_forget_range(w, blk, num);
}

/* Context: fs_lock held. */
static int trim_track_locked(struct wbfs *w)
{
	lock_assert_held(&w->fs_lock);

	if (w->trimmed_groups)
		return 0;
	w->trimmed_groups = calloc(w->fs->group_desc_count, 1);
	if (!w->trimmed_groups)
		return -ENOMEM;
	return 0;
}

/*
 * FITRIM: discard the free blocks of [start, start+len) (bytes) in free
 * runs of at least minlen bytes; range->len becomes the bytes discarded.
 * Metadata is written first, so no block whose freeing is not yet on disk
 * is discarded from under the inode that still owns it there.
 */
int ext4_trim(struct wbfs *w, struct fstrim_range *range)
{
	unsigned bs, bits;
	uint64_t first, last, minlen, nblocks, bpg, trimmed = 0;
	dgrp_t g, ngroups;
	int64_t n = 0;
	int ret;

	if (w->ro)
		return -EROFS;
	ext4_lock(w);
	bs = w->fs->blocksize;
	nblocks = ext2fs_blocks_count(w->fs->super);
	bpg = w->fs->super->s_blocks_per_group;
	first = w->fs->super->s_first_data_block;
	ngroups = w->fs->group_desc_count;
	ret = trim_track_locked(w);
	ext4_unlock(w);
	if (ret)
		return ret;
	bits = (unsigned)__builtin_ctz(bs);
	minlen = range->minlen >> bits;
	if (!minlen)
		minlen = 1;
	if (minlen > bpg || range->start >= nblocks * bs || range->len < bs)
		return -EINVAL;
	if ((range->start >> bits) > first)
		first = range->start >> bits;
	last = (range->start >> bits) + (range->len >> bits) - 1;
	if (last >= nblocks)
		last = nblocks - 1;
	/*
	 * A sync first, as a commit: blocks freed since the last one stay
	 * busy (in use in memory) until the metadata that frees them is on
	 * disk, and are trimmed only then. Its data errors belong to the
	 * files' fsync; a sync_fs that failed leaves them busy, not trimmed.
	 */
	bdi_sync(w->bdi, WB_REASON_SYNC);	/* waits for pending FORGETs too */
	ret = bdi_sync_meta(w->bdi);
	if (ret)
		return ret;
	/* a group at a time under fs_lock: allocation waits no longer */
	for (g = 0; g < ngroups && first <= last; g++) {
		uint64_t gs, ge;

		ext4_lock(w);
		gs = ext2fs_group_first_block2(w->fs, g);
		ge = ext2fs_group_last_block2(w->fs, g);
		if (ge >= first && gs <= last &&
		    (!w->trimmed_groups[g] || minlen < w->trim_last_minlen)) {
			n = trim_range_locked(w, gs > first ? gs : first, ge < last ? ge : last,
					      minlen);
			/* the whole group was discarded */
			if (n >= 0 && gs >= first && ge <= last)
				w->trimmed_groups[g] = 1;
		}
		ext4_unlock(w);
		if (n < 0)
			return (int)n;
		trimmed += (uint64_t)n;
		n = 0;
	}
	ext4_lock(w);
	w->trim_last_minlen = minlen;
	ext4_unlock(w);
	range->len = trimmed * bs;
	return 0;
}
