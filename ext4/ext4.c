// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Opening and closing the ext4 filesystem: device checks with one-line
 * errors, libext2fs over the cache's io_manager, the not-clean mark while
 * mounted, the fs lock, libext2fs error translation, inode time encoding
 * and the block reservations of delayed allocation. The FUSE handlers and
 * the data path live in ops.c, data.c and dir.c.
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

#define SB_OFFSET 1024


int wbfs_errno(errcode_t err)
{
	if (err == 0)
		return 0;
	if (err > 0 && err < 4096)
		return (int)err;
	switch (err) {
	case EXT2_ET_NO_MEMORY:
		return ENOMEM;
	case EXT2_ET_BLOCK_ALLOC_FAIL:
	case EXT2_ET_INODE_ALLOC_FAIL:
	case EXT2_ET_DIR_NO_SPACE:
	case EXT2_ET_EA_NO_SPACE:
	case EXT2_ET_TOOSMALL:
	case EXT2_ET_RES_GDT_BLOCKS:
		return ENOSPC;
	case EXT2_ET_FILE_NOT_FOUND:
		return ENOENT;
	case EXT2_ET_RO_FILSYS:
		return EROFS;
	case EXT2_ET_EA_KEY_NOT_FOUND:
		return ENODATA;
	case EXT2_ET_FILE_TOO_BIG:
	case EXT2_ET_EXTENT_NOT_SUPPORTED:
		return EFBIG;
	case EXT2_ET_NO_DIRECTORY:
		return ENOTDIR;
	case EXT2_ET_DIR_EXISTS:
		return EEXIST;
	case EXT2_ET_EA_BAD_NAME_LEN:
	case EXT2_ET_EA_BAD_VALUE_SIZE:
		return ERANGE;
	case EXT2_ET_MAGIC_EA_HANDLE:
	case EXT2_ET_EA_INODE_CORRUPTED:
	case EXT2_ET_INODE_CSUM_INVALID:
	case EXT2_ET_DIR_CSUM_INVALID:
	case EXT2_ET_EXTENT_CSUM_INVALID:
	case EXT2_ET_BAD_EA_HEADER:
	case EXT2_ET_DIR_CORRUPTED:
		return EUCLEAN;
	default:
		return EIO;
	}
}

LOCK_CLASS(lc_fs_lock, "fs_lock")
LOCK_CLASS(lc_fs_lock_r, "fs_lock(r)")
LOCK_CLASS(lc_group_lock, "group_lock")
LOCK_CLASS(lc_claim_lock, "claim_lock")
LOCK_CLASS(lc_itable_lock, "itable_lock")
LOCK_CLASS(lc_resv_lock, "resv_lock")
LOCK_CLASS(lc_attr_lock, "attr_lock")
LOCK_CLASS(lc_ec_lock, "ec_lock")
LOCK_CLASS(lc_hide_lock, "hide_lock")
LOCK_CLASS(lc_ilock_r, "ilock(r)")
LOCK_CLASS(lc_ilock_w, "ilock(w)")
LOCK_CLASS(lc_ra_lock, "ra_lock")
LOCK_CLASS(lc_dcache_r, "dc_lock(r)")
LOCK_CLASS(lc_dcache_w, "dc_lock(w)")

void wbfs_lock(struct wbfs *w)
{
	ls_rwlock_wrlock(&w->fs_lock, &lc_fs_lock);
}

/* fs_lock shared: for block claims only (wbfs_claim_blocks). */
void wbfs_lock_shared(struct wbfs *w)
{
	ls_rwlock_rdlock(&w->fs_lock, &lc_fs_lock_r);
}

/* fs_lock shared if nobody holds it exclusive or waits to: true if taken. */
bool wbfs_trylock_shared(struct wbfs *w)
{
	return !ls_rwlock_tryrdlock(&w->fs_lock, &lc_fs_lock_r);
}

void wbfs_unlock_shared(struct wbfs *w)
{
	ls_rwlock_unlock(&w->fs_lock);
}

void wbfs_refresh_free_locked(struct wbfs *w)
{
	if (!w->fs)
		return;
	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	w->free_blocks = (int64_t)ext2fs_free_blocks_count(w->fs->super) - w->bad_free;
	w->free_inodes = w->fs->super->s_free_inodes_count;
	ls_mutex_unlock(&w->resv_lock);
}

/* Unlock, refreshing the free counts writers reserve against. */
void wbfs_unlock(struct wbfs *w)
{
	wbfs_refresh_free_locked(w);
	ls_rwlock_unlock(&w->fs_lock);
}

/*
 * May @nr more blocks be taken, @dirty being promised to delayed allocation
 * already? The kernel's ext4_has_free_clusters: every allocation leaves
 * the promised blocks, the metadata reserve (@headroom: s_resv_clusters,
 * which also covers the extent blocks the promised data will need at
 * writeback) and the root reserve (@root) free; WBFS_ROOM_PRIV (root, the
 * reserve's owner) may use the root reserve, WBFS_ROOM_NOFAIL (a change
 * that must not fail on a full filesystem: EXT4_MB_USE_RESERVED) also half
 * the metadata reserve. The other half is the flusher's alone.
 */
bool wbfs_room_ok(int64_t free_blocks, int64_t dirty, int64_t headroom, int64_t root,
		  long nr, unsigned flags)
{
	int64_t avail = free_blocks - dirty - nr;

	if (avail >= headroom + root)
		return true;
	if ((flags & (WBFS_ROOM_PRIV | WBFS_ROOM_NOFAIL)) && avail >= headroom)
		return true;
	return (flags & WBFS_ROOM_NOFAIL) && avail >= headroom / 2;
}

/*
 * Reserve @nr blocks for delayed allocation. Metadata headroom is never
 * handed out; unprivileged writers also leave the root reserve alone.
 * Returns 0 or -ENOSPC.
 */
int wbfs_reserve(struct wbfs *w, long nr, bool privileged)
{
	int ret = 0;

	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	if (!wbfs_room_ok(w->free_blocks, w->reserved, w->headroom, w->root_reserved, nr,
			  privileged ? WBFS_ROOM_PRIV : 0))
		ret = -ENOSPC;
	else
		w->reserved += nr;
	ls_mutex_unlock(&w->resv_lock);
	return ret;
}

void wbfs_unreserve(struct wbfs *w, long nr)
{
	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	w->reserved -= nr;
	ls_mutex_unlock(&w->resv_lock);
}

/* Extents an extent tree block holds (a 4 KiB block: 12-byte header). */
#define EXTENTS_PER_BLOCK ((4096 - 12) / 12)
/* Extents the inode itself holds. */
#define EXTENTS_IN_INODE 4

/*
 * Tree blocks (leaves and index blocks) that @extents extents need at
 * most beyond the inode: ext4_ext_calc_metadata_amount's worst case.
 */
long wbfs_extent_blocks(long extents)
{
	long blocks = 0;

	while (extents > EXTENTS_IN_INODE) {
		extents = (extents + EXTENTS_PER_BLOCK - 1) / EXTENTS_PER_BLOCK;
		blocks += extents;
	}
	return blocks;
}

/*
 * Reserve the block of a new delalloc page of @wi, and the extent tree
 * blocks writeback will need for it: each run of delalloc pages may
 * become an extent of its own (@new_run: the page before is not
 * delalloc), added to the @base_extents the file has, and past four
 * extents the tree needs blocks. Counting these
 * with the data, against the same free space, keeps a filesystem filled
 * with fragmented files from leaving writeback without the extent blocks
 * it must allocate. The tree blocks are given back when the inode has no
 * delalloc page left. Returns 0 or -ENOSPC.
 */
int wbfs_reserve_page(struct wbfs *w, struct winode *wi, bool new_run, long base_extents,
		      bool privileged)
{
	long runs, meta;
	int ret = 0;

	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	runs = wi->da_runs + (new_run || !wi->da_runs);
	meta = wbfs_extent_blocks(base_extents + runs) - wbfs_extent_blocks(base_extents) -
	       wi->meta_resv;
	if (meta < 0)
		meta = 0;
	if (!wbfs_room_ok(w->free_blocks, w->reserved, w->headroom, w->root_reserved, 1 + meta,
			  privileged ? WBFS_ROOM_PRIV : 0)) {
		ret = -ENOSPC;
	} else {
		w->reserved += 1 + meta;
		wi->meta_resv += meta;
		wi->da_runs = runs;
		wi->nr_delalloc++;
	}
	ls_mutex_unlock(&w->resv_lock);
	return ret;
}

/*
 * @nr delalloc pages of @wi were allocated or dropped: give back their
 * blocks, and the extent tree blocks once no delalloc page is left.
 */
void wbfs_unreserve_pages(struct wbfs *w, struct winode *wi, long nr)
{
	if (nr <= 0)
		return;
	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	w->reserved -= nr;
	wi->nr_delalloc -= nr;
	if (wi->nr_delalloc <= 0) {
		w->reserved -= wi->meta_resv;
		wi->meta_resv = 0;
		wi->da_runs = 0;
	}
	ls_mutex_unlock(&w->resv_lock);
}

/*
 * Room for @nr blocks of metadata (a new directory's block, a slow
 * symlink, a directory's growth, an xattr block) taken by a user
 * (@flags: WBFS_ROOM_PRIV for root) or by a change that must not fail
 * (WBFS_ROOM_NOFAIL)? Counted like data against the blocks promised to
 * writers, so once writers are refused, metadata sees the same full
 * filesystem, and the flusher can always allocate what was promised.
 * Returns 0 or -ENOSPC.
 */
int wbfs_claim_room(struct wbfs *w, long nr, unsigned flags)
{
	bool ok;

	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	ok = wbfs_room_ok(w->free_blocks, w->reserved, w->headroom, w->root_reserved, nr, flags);
	ls_mutex_unlock(&w->resv_lock);
	return ok ? 0 : -ENOSPC;
}

/*
 * Room for a metadata change that may need about @nr blocks but allocates
 * none in the usual case (an entry in a directory block with space, a
 * small xattr in the inode): the nofail rule, so such changes work as long
 * as the blocks promised to writers and half the headroom stay untouched.
 */
int wbfs_meta_room(struct wbfs *w, long nr)
{
	return wbfs_claim_room(w, nr, WBFS_ROOM_NOFAIL);
}

/* Is the request's user the owner of the root reserve (ext4's resuid/resgid)? */
bool wbfs_privileged(struct wbfs *w, const struct fuse_ctx *ctx)
{
	const struct ext2_super_block *sb = w->fs->super;

	return ctx->uid == 0 || ctx->uid == sb->s_def_resuid ||
	       (sb->s_def_resgid && ctx->gid == sb->s_def_resgid);
}

int wbfs_read_inode(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	errcode_t err;

	memset(in, 0, sizeof(*in));
	if (!w->fs)
		return -EIO;	/* a request that arrived after unmount */
	err = ext2fs_read_inode_full(w->fs, ino, (struct ext2_inode *)in, sizeof(*in));
	return -wbfs_errno(err);
}

int wbfs_write_inode(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	errcode_t err;

	err = ext2fs_write_inode_full(w->fs, ino, (struct ext2_inode *)in, sizeof(*in));
	if (!err)
		winode_note_written(w, ino, in);
	return -wbfs_errno(err);
}

/* Every inode (and superblock) stamp: one clock, never running backwards. */
void wbfs_now(struct timespec *ts)
{
	static struct stamp_clock clock;
	struct timespec raw;

	clock_gettime(CLOCK_REALTIME, &raw);
	stamp_clock_get(&clock, &raw, ts);
}

/* ext4 extra time field: nsec << 2 | epoch bits (seconds 32-33). */
static uint32_t ts_extra(const struct timespec *ts)
{
	return ((uint32_t)ts->tv_nsec << 2) |
	       (uint32_t)((((int64_t)ts->tv_sec - (int32_t)ts->tv_sec) >> 32) & 3);
}

static void ts_decode(uint32_t sec, uint32_t extra, bool has_extra, struct timespec *ts)
{
	ts->tv_sec = (int32_t)sec;
	ts->tv_nsec = 0;
	if (has_extra) {
		ts->tv_sec += (int64_t)(extra & 3) << 32;
		ts->tv_nsec = extra >> 2;
	}
}

static bool has_extra(const struct ext2_inode_large *in, size_t field_end)
{
	return (size_t)EXT2_GOOD_OLD_INODE_SIZE + in->i_extra_isize >= field_end;
}

#define FIELD_END(f) (offsetof(struct ext2_inode_large, f) + \
		      sizeof(((struct ext2_inode_large *)0)->f))

void wbfs_ts_get(const struct ext2_inode_large *in, int which, struct timespec *ts)
{
	switch (which) {
	case TS_ATIME:
		ts_decode(in->i_atime, in->i_atime_extra, has_extra(in, FIELD_END(i_atime_extra)), ts);
		break;
	case TS_MTIME:
		ts_decode(in->i_mtime, in->i_mtime_extra, has_extra(in, FIELD_END(i_mtime_extra)), ts);
		break;
	case TS_CTIME:
		ts_decode(in->i_ctime, in->i_ctime_extra, has_extra(in, FIELD_END(i_ctime_extra)), ts);
		break;
	default:
		ts_decode(in->i_crtime, in->i_crtime_extra, has_extra(in, FIELD_END(i_crtime_extra)), ts);
		break;
	}
}

void wbfs_ts_set(struct ext2_inode_large *in, int which, const struct timespec *ts)
{
	uint32_t sec = (uint32_t)ts->tv_sec, extra = ts_extra(ts);

	switch (which) {
	case TS_ATIME:
		in->i_atime = sec;
		if (has_extra(in, FIELD_END(i_atime_extra)))
			in->i_atime_extra = extra;
		break;
	case TS_MTIME:
		in->i_mtime = sec;
		if (has_extra(in, FIELD_END(i_mtime_extra)))
			in->i_mtime_extra = extra;
		break;
	case TS_CTIME:
		in->i_ctime = sec;
		if (has_extra(in, FIELD_END(i_ctime_extra)))
			in->i_ctime_extra = extra;
		break;
	default:
		if (has_extra(in, FIELD_END(i_crtime_extra))) {
			in->i_crtime = sec;
			in->i_crtime_extra = extra;
		}
		break;
	}
}

/* ---- opening ---------------------------------------------------------- */

/*
 * The opened device, checked for what only an open fd tells: a read-only
 * block device (it opens O_RDWR and fails the first write), its size, and
 * for an image another wbcfs holding it. Closes @fd on refusal.
 */
static int dev_check_open(struct wbfs *w, const char *dev, int fd, const struct stat *st,
			  bool ro)
{
	int bdev_ro = 0;

	if (!w->is_blkdev) {
		w->dev_bytes = (uint64_t)st->st_size;
		if (flock(fd, (ro ? LOCK_SH : LOCK_EX) | LOCK_NB) < 0) {
			msg_dev(dev, "image is in use by another wbcfs");
			close(fd);
			return -EBUSY;
		}
		return 0;
	}
	if (!ro && ioctl(fd, BLKROGET, &bdev_ro) == 0 && bdev_ro) {
		msg_dev(dev, "device is read-only; mount with -o ro");
		close(fd);
		return -EROFS;
	}
	if (ioctl(fd, BLKGETSIZE64, &w->dev_bytes) < 0)
		w->dev_bytes = 0;
	return 0;
}

/*
 * An NBD export: io_engine=nbd (any other engine given is refused), and
 * the size the server offers is the device's.
 */
static int nbd_open(struct wbfs *w, const char *uri, bool ro)
{
	int ret;

	if (w->opts.io_engine_given && w->opts.io_engine != IO_ENGINE_NBD) {
		msg_dev(uri, "io_engine=%s cannot drive an NBD export (it uses io_engine=nbd)",
			 io_engine_name(w->opts.io_engine));
		return -EINVAL;
	}
	ret = nbdev_open(&w->nbd, uri, ro, w->opts.nbd_retry_s, w->opts.nbd_timeout_s,
			 msg_stream());
	if (ret)
		return ret;
	w->opts.io_engine = IO_ENGINE_NBD;
	w->dev_fd = nbdev_fd(w->nbd);
	w->dev_bytes = nbdev_info(w->nbd)->size;
	return 0;
}

static void dev_close(struct wbfs *w)
{
	if (w->nbd)
		nbdev_close(w->nbd);	/* its fd goes with it */
	else
		close(w->dev_fd);
	w->nbd = NULL;
	w->dev_fd = -1;
}

static int dev_open(struct wbfs *w, const char *dev, bool ro)
{
	struct stat st;
	int fd, ret;

	if (nbdev_is_uri(dev))
		return nbd_open(w, dev, ro);
	if (w->opts.io_engine == IO_ENGINE_NBD) {
		msg_dev(dev, "io_engine=nbd is for NBD exports (nbd://, nbd+unix://...)");
		return -EINVAL;
	}
	if (stat(dev, &st) < 0) {
		msg_dev(dev, "%s", strerror(errno));
		return -errno;
	}
	if (!S_ISBLK(st.st_mode) && !S_ISREG(st.st_mode)) {
		msg_dev(dev, "not a block device or regular file");
		return -ENOTBLK;
	}
	w->is_blkdev = S_ISBLK(st.st_mode);
	if (w->is_blkdev) {
		/* a mounted device is claimed exclusively: probe, then open shared,
		 * since the fuseblk mount itself claims it later */
		fd = open(dev, O_RDONLY | O_EXCL | O_CLOEXEC);
		if (fd < 0 && errno == EBUSY) {
			msg_dev(dev, "device is busy (already mounted?)");
			return -EBUSY;
		}
		if (fd >= 0)
			close(fd);
	}
	fd = open(dev, (ro ? O_RDONLY : O_RDWR) | O_DIRECT | O_CLOEXEC);
	if (fd < 0 && !ro && (errno == EROFS || errno == EACCES)) {
		msg_dev(dev, "device is read-only (%s); mount with -o ro", strerror(errno));
		return -EROFS;
	}
	if (fd < 0) {
		msg_dev(dev, "%s", strerror(errno));
		return -errno;
	}
	ret = dev_check_open(w, dev, fd, &st, ro);
	if (!ret)
		w->dev_fd = fd;
	return ret;
}

/* Read the raw superblock to check magic and features before libext2fs. */
static int sb_check(struct wbfs *w, const char *dev, bool ro, bool fsck_done)
{
	struct ext2_super_block *sb;
	void *buf;
	ssize_t n;
	int ret = -EINVAL;
	uint64_t blocks;
	unsigned bsize;

	if (posix_memalign(&buf, 4096, 4096))
		return -ENOMEM;
	n = blkdev_pread(w->dev_fd, buf, 4096, 0);
	if (n != 4096) {
		msg_dev(dev, "cannot read the superblock (%s)", n < 0 ? strerror((int)-n) : "short read");
		goto out;
	}
	sb = (struct ext2_super_block *)((char *)buf + SB_OFFSET);
	if (sb->s_magic != EXT2_SUPER_MAGIC) {
		msg_dev(dev, "not an ext4 filesystem (bad magic)");
		goto out;
	}
	bsize = 1024U << sb->s_log_block_size;
	blocks = sb->s_blocks_count | ((uint64_t)sb->s_blocks_count_hi << 32);
	if (w->nbd && sb->s_log_block_size <= 6 && blocks * bsize > w->dev_bytes) {
		/* over NBD the likelier cause: the wrong export, or one cut short */
		msg_dev(dev, "the NBD export (%llu bytes) is smaller than the filesystem"
			 " (%llu blocks of %u bytes)", (unsigned long long)w->dev_bytes,
			 (unsigned long long)blocks, bsize);
		goto out;
	}
	if (sb->s_log_block_size > 6 || (w->dev_bytes && blocks * bsize > w->dev_bytes)) {
		msg_dev(dev, "corrupt superblock: %llu blocks of %u bytes exceed the device (%llu bytes)",
			 (unsigned long long)blocks, bsize, (unsigned long long)w->dev_bytes);
		goto out;
	}
	if (!ro && bsize != 4096) {
		msg_dev(dev, "block size %u is not supported read-write (4096 only); mount with -o ro", bsize);
		goto out;
	}
	if (!ro && (sb->s_feature_incompat & EXT4_FEATURE_INCOMPAT_MMP)) {
		/* checked here: libext2fs would first sleep through an MMP check */
		msg_dev(dev, "feature mmp is not supported read-write; mount with -o ro");
		goto out;
	}
	if ((sb->s_feature_incompat & EXT3_FEATURE_INCOMPAT_RECOVER) && w->opts.norecovery) {
		/* as ext4's noload: said, and left to the next mount that replays */
		fprintf(msg_stream(), "wbcfs: %s: the journal needs recovery and is not replayed"
			" (norecovery): the filesystem may look older or inconsistent\n", dev);
	} else if (sb->s_feature_incompat & EXT3_FEATURE_INCOMPAT_RECOVER) {
		/* jrec_recover() cleared it, or refused: never reached in practice */
		msg_dev(dev, "filesystem needs journal recovery; run e2fsck first (or mount with -o fsck)");
		goto out;
	}
	if (!fsck_done && !ro && (!(sb->s_state & EXT2_VALID_FS) || (sb->s_state & EXT2_ERROR_FS))) {
		msg_dev(dev, "filesystem was not cleanly unmounted or has errors; run e2fsck first (or mount with -o fsck)");
		goto out;
	}
	ret = 0;
out:
	free(buf);
	return ret;
}

/* Run a program; its exit status, or -1 when it did not exit. */
static int run_prog(const char *const argv[])
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/*
 * e2fsck reads files and block devices only: an NBD export is shown to it
 * as a file, through nbdfuse on a private directory, for the time of the
 * check. Returns the e2fsck exit status, or -1.
 */
static int fsck_nbd(const char *uri)
{
	char dir[] = "/tmp/wbcfs-fsck.XXXXXX", pidf[64], file[64];
	const char *fsck[] = { "e2fsck", "-p", file, NULL };
	const char *umount[] = { "fusermount3", "-u", "-q", dir, NULL };
	int status = -1, i;
	pid_t pid;

	if (!mkdtemp(dir))
		return -1;
	snprintf(pidf, sizeof(pidf), "%s.pid", dir);
	snprintf(file, sizeof(file), "%s/nbd", dir);
	pid = fork();
	if (pid == 0) {
		execlp("nbdfuse", "nbdfuse", "-P", pidf, dir, uri, (char *)NULL);
		_exit(127);
	}
	/* nbdfuse writes its pid file once the file is served */
	for (i = 0; pid > 0 && i < 300 && access(pidf, F_OK); i++) {
		if (waitpid(pid, &status, WNOHANG) == pid) {
			pid = -1;
			break;
		}
		usleep(20000);
	}
	if (pid > 0 && !access(pidf, F_OK)) {
		status = run_prog(fsck);
		run_prog(umount);
	} else {
		msg_dev(uri, "cannot show the export to e2fsck (nbdfuse, from libnbd-bin)");
		status = -1;
		if (pid > 0)
			kill(pid, SIGTERM);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
	unlink(pidf);
	rmdir(dir);
	return status;
}

static int run_fsck(const char *dev)
{
	const char *argv[] = { "e2fsck", "-p", dev, NULL };
	int status = nbdev_is_uri(dev) ? fsck_nbd(dev) : run_prog(argv);

	if (status < 0 || status >= 4) {
		msg_dev(dev, "e2fsck -p failed (exit %d); run e2fsck by hand", status);
		return -EUCLEAN;
	}
	return 0;
}

static int check_features(struct wbfs *w, const char *dev)
{
	struct ext2_super_block *sb = w->fs->super;
	const char *bad = NULL;

	if (ext2fs_has_feature_journal_dev(sb))
		bad = "journal_dev";
	else if (ext2fs_has_feature_encrypt(sb))
		bad = "encrypt";
	else if (ext2fs_has_feature_casefold(sb))
		bad = "casefold";
	else if (ext2fs_has_feature_bigalloc(sb))
		bad = "bigalloc";
	else if (ext2fs_has_feature_inline_data(sb))
		bad = "inline_data";
	else if (ext2fs_has_feature_ea_inode(sb))
		bad = "ea_inode";
	else if (ext2fs_has_feature_verity(sb))
		bad = "verity";		/* verity files must never be rewritten */
	else if (ext2fs_has_feature_quota(sb))
		bad = "quota";		/* usage would go stale: e2fsck objects */
	else if (ext2fs_has_feature_project(sb))
		bad = "project";
	if (bad && !w->ro) {
		msg_dev(dev, "feature %s is not supported read-write; mount with -o ro", bad);
		return -EINVAL;
	}
	if (sb->s_first_meta_bg && ext2fs_has_feature_meta_bg(sb) && !w->ro) {
		msg_dev(dev, "feature meta_bg is not supported read-write; mount with -o ro");
		return -EINVAL;
	}
	return 0;
}

/* Blocks of metadata, as the kernel's ext4 subtracts them in statfs. */
static uint64_t fs_overhead(ext2_filsys fs)
{
	uint64_t total = fs->super->s_first_data_block;
	dgrp_t g;

	if (fs->super->s_overhead_clusters)
		return fs->super->s_overhead_clusters;
	for (g = 0; g < fs->group_desc_count; g++) {
		blk64_t super_blk, old_desc, new_desc;
		blk_t used = 0;

		ext2fs_super_and_bgd_loc2(fs, g, &super_blk, &old_desc, &new_desc, &used);
		total += used + 2 + fs->inode_blocks_per_group;
	}
	if (fs->super->s_journal_inum) {
		struct ext2_inode in;

		if (!ext2fs_read_inode(fs, fs->super->s_journal_inum, &in))
			total += ext2fs_get_stat_i_blocks(fs, &in) /
				 (fs->blocksize / 512);
	}
	return total;
}

/*
 * The device's throttle options, into the live tunables /.wbcfs/ changes
 * (the domain's, throttle= and max_pause_ms, were set with its cache).
 */
static void throttle_setup(struct wbfs *w)
{
	struct throttle_wb *tw = bdi_throttle_wb(w->bdi);

	atomic_store(&tw->min_ratio, w->opts.min_ratio);
	atomic_store(&tw->max_ratio, w->opts.max_ratio);
	atomic_store(&tw->strictlimit, w->opts.strictlimit);
}

/* The domain's cache (made by its first device) and this device's bdi. */
static int cache_and_bdi(struct wbfs *w, const char *dev)
{
	struct bdi_config bc = {0};
	char name[64];
	struct stat st;
	int ret;

	ret = w->host_ops->get_cache(w->host, &w->opts, dev, &w->cache, &w->pool);
	if (ret)
		return ret;
	if (w->nbd)
		snprintf(name, sizeof(name), "%s", nbdev_name(w->nbd));
	else if (fstat(w->dev_fd, &st) == 0 && w->is_blkdev)
		snprintf(name, sizeof(name), "%u:%u", major(st.st_rdev), minor(st.st_rdev));
	else
		snprintf(name, sizeof(name), "%s", dev);
	bc.fd = w->dev_fd;
	bc.name = name;
	bc.engine = w->opts.io_engine;
	bc.queue_depth = w->opts.queue_depth;
	bc.max_io_kb = w->opts.max_io_kb;
	if (w->nbd && bc.max_io_kb > nbdev_info(w->nbd)->max_request / 1024)
		bc.max_io_kb = nbdev_info(w->nbd)->max_request / 1024;
	bc.nr_flushers = w->opts.flushers;
	bc.cache = w->cache;
	bc.ops = &wbfs_bdi_ops;
	bc.owner = w;
	bc.fault_inject = w->opts.fault_inject;
	if (ret) {
		cache_destroy(w->cache);
		return ret;
	}
	bc.pool = w->pool;
	ret = bdi_create(&w->bdi, &bc);
	if (ret) {
		msg_dev(dev, "cannot start the flusher: %s", strerror(-ret));
		return ret;
	}
	w->host_ops->attach(w->host, w);
	throttle_setup(w);
	mapping_init(&w->meta_map, w->cache, &bdi_mapping_ops, &w->meta_wb);
	bdi_inode_init(w->bdi, &w->meta_wb, &w->meta_map, true);
	bdi_set_meta(w->bdi, &w->meta_wb);
	return 0;
}

/* The device leaves the cache: its pages go, its bdi stops (the domain frees the cache). */
static void teardown_cache(struct wbfs *w)
{
	mapping_truncate(&w->meta_map, 0, UINT64_MAX);
	w->host_ops->detach(w->host, w);
	bdi_destroy(w->bdi);
	mapping_destroy(&w->meta_map);
}

/* Mark the filesystem in use (not clean) on disk before serving anything. */
static int mark_mounted(struct wbfs *w)
{
	struct ext2_super_block *sb = w->fs->super;
	struct timespec now;

	if (w->journal)
		/* as the kernel's ext4: a crash is told by needs_recovery,
		 * and the replay makes the filesystem valid again */
		ext2fs_set_feature_journal_needs_recovery(sb);
	else
		sb->s_state &= ~EXT2_VALID_FS;
	sb->s_mnt_count++;
	wbfs_now(&now);
	sb->s_mtime = (uint32_t)now.tv_sec;
	ext2fs_mark_super_dirty(w->fs);
	if (ext2fs_flush(w->fs))
		return -EIO;
	return bdi_sync(w->bdi, WB_REASON_SYNC);
}

static void init_space(struct wbfs *w)
{
	uint64_t blocks = ext2fs_blocks_count(w->fs->super);
	int64_t h = (int64_t)(blocks / 200);

	if (h < 64)
		h = 64;
	if (h > 8192)
		h = 8192;
	w->headroom = h;
	w->root_reserved = (int64_t)ext2fs_r_blocks_count(w->fs->super);
	w->overhead = fs_overhead(w->fs);
	w->reserved = 0;
	wbfs_refresh_free_locked(w);
}

/* ---- corrupt metadata ------------------------------------------------- */

/*
 * Checked once at mount, as the kernel's ext4 checks them: the group
 * descriptors (bitmaps and inode tables inside the filesystem, not on
 * top of each other), the root inode, the journal inode, and each group's
 * block bitmap. A group whose bitmap fails (its own metadata not marked in
 * use, or a free count other than the descriptor's) is refused, not the
 * filesystem: nothing is allocated from it (every block stays marked in
 * use in memory, blocks freed there stay in use), its bitmap is never
 * written back, and the filesystem is marked with errors for e2fsck.
 */

bool wbfs_group_bad(struct wbfs *w, dgrp_t g)
{
	unsigned i;

	for (i = 0; i < w->nr_bad_groups; i++)
		if (w->bad_groups[i] == g)
			return true;
	return false;
}

/* Is block @blk a refused group's block or inode bitmap? fs_lock held. */
bool wbfs_is_bad_bitmap(struct wbfs *w, uint64_t blk, uint64_t count)
{
	unsigned i;

	if (!w->fs)
		return false;
	for (i = 0; i < w->nr_bad_groups; i++) {
		blk64_t b = ext2fs_block_bitmap_loc(w->fs, w->bad_groups[i]);

		if (b >= blk && b - blk < count)
			return true;
	}
	for (i = 0; i < w->nr_bad_igroups; i++) {
		blk64_t b = ext2fs_inode_bitmap_loc(w->fs, w->bad_igroups[i]);

		if (b >= blk && b - blk < count)
			return true;
	}
	return false;
}

/*
 * Which groups' bitmaps changed in memory since they were last written:
 * a commit writes those alone, not every group's (at a commit per fsync,
 * a scan of every group under fs_lock made dbench -F on a 256 GiB
 * filesystem a quarter as fast as on an 8 GiB one). Every change goes
 * through here: libext2fs's own allocations and frees by its
 * alloc-stats callbacks (bad_group_keep_range), wbcfs's direct marks and
 * its inode allocations (wbfs_inode_alloc_stats, and after ext2fs_mkdir
 * and ext2fs_symlink) by calls. A scan of every group at mount, and at
 * each syncfs counting what this missed (nr_bitmap_untracked), keeps
 * the tracking honest. Context: fs_lock.
 */
void wbfs_bb_changed(struct wbfs *w, blk64_t blk, blk64_t n)
{
	ext2_filsys fs = w->fs;
	dgrp_t g, last;

	if (!w->bm_changed || !n || blk >= ext2fs_blocks_count(fs->super))
		return;
	if (blk + n > ext2fs_blocks_count(fs->super))
		n = ext2fs_blocks_count(fs->super) - blk;
	last = ext2fs_group_of_blk2(fs, blk + n - 1);
	for (g = ext2fs_group_of_blk2(fs, blk); g <= last; g++)
		w->bm_changed[g] |= BM_BLOCK;
}

/*
 * The next bitmap write looks at every group and counts the changes the
 * notes missed (syncfs, unmount). Context: fs_lock not held.
 */
void wbfs_bitmaps_check_next(struct wbfs *w)
{
	wbfs_lock(w);
	if (w->fs && !w->ro)
		w->bm_scan = BM_SCAN_CHECK;
	wbfs_unlock(w);
}

void wbfs_ib_changed(struct wbfs *w, ext2_ino_t ino)
{
	ext2_filsys fs = w->fs;

	if (w->bm_changed && ino && ino <= fs->super->s_inodes_count)
		w->bm_changed[ext2fs_group_of_ino(fs, ino)] |= BM_INODE;
}

/*
 * ext2fs_block_alloc_stats_range, noted for the next bitmap write.
 * libext2fs 1.47.0 calls the range callback with the range already
 * consumed (its end, and 0 blocks), so the callback cannot say which
 * groups changed: wbcfs's own calls note them here, and a call from
 * inside libext2fs (none is known) makes the next write scan them all.
 * Context: fs_lock.
 */
void wbfs_block_alloc_stats_range(struct wbfs *w, blk64_t blk, blk64_t n, int inuse)
{
	w->bm_in_range = true;
	ext2fs_block_alloc_stats_range(w->fs, blk, (blk_t)n, inuse);
	w->bm_in_range = false;
	wbfs_bb_changed(w, blk, n);
}

/* ext2fs_inode_alloc_stats2, noted for the next bitmap write. Context: fs_lock. */
void wbfs_inode_alloc_stats(struct wbfs *w, ext2_ino_t ino, int inuse, int isdir)
{
	ext2fs_inode_alloc_stats2(w->fs, ino, inuse, isdir);
	wbfs_ib_changed(w, ino);
}

/*
 * Blocks freed since the last sync are busy, as the kernel's ext4 keeps
 * freed blocks from reuse until the transaction that freed them commits:
 * new data written into them before the freeing is on disk would, after
 * a crash, show in the file that owned them (or, with blocks shared by
 * two files, overwrite the other file at once). A busy block is free on
 * disk (group and superblock counts, and the bitmap as written:
 * wbfs_bitmap_written) but marked in use in the in-memory bitmap the
 * allocators search. The commit of the transaction that freed them (or
 * without a journal, the next sync_fs) makes them free in memory too; an
 * allocation that finds no other room waits for that commit
 * (busy_release_now).
 */
static void busy_add(struct wbfs *w, blk64_t blk, blk_t n)
{
	ext2fs_mark_block_bitmap_range2(w->fs->block_map, blk, n);
	ext2fs_mark_block_bitmap_range2(w->busy, blk, n);
	wbfs_bm_runs_add(&w->busy_runs, blk, n);
	w->nr_busy += n;
}

#define BM_RUNS_MAX 65536	/* runs kept before a drain scans it all */

/* Note that bits [blk, blk+n) of the bitmap @r describes were set. */
void wbfs_bm_runs_add(struct bm_runs *r, blk64_t blk, blk64_t n)
{
	if (r->all || !n)
		return;
	if (r->nr && r->v[r->nr - 1].blk + r->v[r->nr - 1].n == blk) {
		r->v[r->nr - 1].n += n;		/* frees often come in order */
		return;
	}
	if (r->nr == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 64;
		struct bm_run *v = cap <= BM_RUNS_MAX ? realloc(r->v, cap * sizeof(*v)) : NULL;

		if (!v) {
			r->all = true;
			return;
		}
		r->v = v;
		r->cap = cap;
	}
	r->v[r->nr++] = (struct bm_run){ blk, n };
}

void wbfs_bm_runs_free(struct bm_runs *r)
{
	free(r->v);
	*r = (struct bm_runs){ 0 };
}

/* Call @fn on each run of set bits of @bm in [start, end], then clear them. */
static void bitmap_drain_range(struct wbfs *w, ext2fs_block_bitmap bm, blk64_t start,
			       blk64_t end, void (*fn)(struct wbfs *w, blk64_t blk, blk64_t n))
{
	blk64_t from = start, b, e;

	while (from <= end && !ext2fs_find_first_set_block_bitmap2(bm, from, end, &b)) {
		if (ext2fs_find_first_zero_block_bitmap2(bm, b, end, &e))
			e = end + 1;
		/* busy blocks are free in the bitmap as written: it changes */
		wbfs_bb_changed(w, b, e - b);
		fn(w, b, e - b);
		from = e;
	}
	ext2fs_unmark_block_bitmap_range2(bm, start, (unsigned)(end - start + 1));
}

/*
 * Call @fn on each run of set bits of @bm, then clear it: the runs @r
 * noted (a run noted twice finds its bits cleared the second time), or
 * the whole bitmap when @r could not keep them all. Context: fs_lock.
 */
void wbfs_bitmap_drain(struct wbfs *w, ext2fs_block_bitmap bm, struct bm_runs *r,
		       void (*fn)(struct wbfs *w, blk64_t blk, blk64_t n))
{
	blk64_t first = w->fs->super->s_first_data_block;
	blk64_t last = ext2fs_blocks_count(w->fs->super) - 1;
	size_t i;

	if (r->all) {
		bitmap_drain_range(w, bm, first, last, fn);
		ext2fs_clear_block_bitmap(bm);
	} else {
		for (i = 0; i < r->nr; i++) {
			blk64_t s = r->v[i].blk, e = s + r->v[i].n - 1;

			if (s < first)
				s = first;
			if (e > last)
				e = last;
			if (s <= e)
				bitmap_drain_range(w, bm, s, e, fn);
		}
	}
	r->nr = 0;
	r->all = false;
}

/* Blocks [blk, blk+n) may be allocated again (a drain's @fn: noted there). */
void wbfs_busy_unmark(struct wbfs *w, blk64_t blk, blk64_t n)
{
	ext2fs_unmark_block_bitmap_range2(w->fs->block_map, blk, (unsigned)n);
}

/* Busy blocks become free for allocation. Context: fs_lock. */
void wbfs_release_busy_locked(struct wbfs *w)
{
	if (!w->fs)
		return;
	if (w->nr_busy)
		wbfs_bitmap_drain(w, w->busy, &w->busy_runs, wbfs_busy_unmark);
	w->nr_busy = 0;
	wbfs_journal_release_busy(w);
}

/* Before the filesystem closes: the bitmap it writes shows busy blocks free. */
static void busy_free(struct wbfs *w)
{
	wbfs_release_busy_locked(w);
	if (w->busy)
		ext2fs_free_block_bitmap(w->busy);
	w->busy = NULL;
	wbfs_bm_runs_free(&w->busy_runs);
	free(w->claims);
	w->claims = NULL;
	w->nr_claims = w->cap_claims = 0;
}

/*
 * May busy blocks be handed out at once when nothing else is free? Only
 * without a journal: there is no transaction to wait for, as the kernel's
 * ext4 without a journal frees at once. With one, a block whose free has
 * not committed holds, after a crash, the data of the file that owned it
 * again: the allocation fails, and the caller commits and tries again
 * (wbfs_commit_for_alloc), as ext4_should_retry_alloc does.
 */
static bool busy_release_now(struct wbfs *w)
{
	return !w->journal;
}

/* Blocks whose free has not committed (none without a journal). Context: fs_lock. */
bool wbfs_alloc_should_commit(struct wbfs *w)
{
	return w->journal && wbfs_journal_busy_blocks(w);
}

/*
 * ext2fs_new_range for file data (writeback, fallocate): never a busy
 * block while there is a journal (busy_new_range). A failure that a
 * commit would cure is noted for wbfs_should_retry_alloc. Context: fs_lock.
 */
errcode_t wbfs_new_range(struct wbfs *w, blk64_t goal, blk64_t len, blk64_t *got,
			 blk64_t *glen)
{
	errcode_t err = ext2fs_new_range(w->fs, 0, goal, len, NULL, got, glen);

	if (err == EXT2_ET_BLOCK_ALLOC_FAIL && wbfs_alloc_should_commit(w)) {
		atomic_store(&w->alloc_busy_refused, true);
		atomic_fetch_add(&w->stats.nr_alloc_busy_refused, 1);
	}
	return err;
}

/*
 * Concurrent block claims (seed 004's per-group allocation). Writeback
 * finds its data blocks under fs_lock shared and a lock per group, so
 * that flushers and fsyncs claiming in different groups run at once,
 * and only the extent-tree change that follows needs fs_lock exclusive.
 * Nothing else changes under fs_lock shared: every other change to the
 * bitmaps, and every group descriptor and superblock count, holds it
 * exclusive, so a claim needs its group's lock against other claims
 * only. A claim marks the blocks in the in-memory bitmap (allocators
 * skip them) and no count: the descriptors and the superblock are
 * changed when the blocks are mapped (wbfs_claim_use), in the same
 * exclusive section as the extent that points to them, so a commit
 * never holds one without the other. Until then every bitmap written
 * shows them free (wbfs_bitmap_written), and a crash loses nothing.
 * The search and the marks use libext2fs's find and single-bit calls,
 * which touch the group's own bytes of the bitmap and nothing shared
 * (its range calls count statistics in the bitmap).
 */

static pthread_mutex_t *group_lock(struct wbfs *w, dgrp_t g)
{
	return &w->group_lock[g % WBFS_GROUP_LOCKS];
}

/* Note claim [blk, blk+n). Context: claim_lock. */
static int claim_add_locked(struct wbfs *w, blk64_t blk, blk64_t n)
{
	if (w->nr_claims == w->cap_claims) {
		size_t cap = w->cap_claims ? w->cap_claims * 2 : 16;
		struct bm_run *v = realloc(w->claims, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		w->claims = v;
		w->cap_claims = cap;
	}
	w->claims[w->nr_claims++] = (struct bm_run){ blk, n };
	return 0;
}

/*
 * Take [blk, blk+n), which lies inside one claim, out of it. Claims are
 * used from their start on (map_alloc_run takes its blocks in order), so
 * a claim only ever shrinks from its head: whatever lies before @blk in
 * it goes back to free first (not expected, and never split off as a
 * claim of its own, which would need room here). Returns false when no
 * claim holds it all. Context: fs_lock exclusive.
 */
static bool claim_del(struct wbfs *w, blk64_t blk, blk64_t n)
{
	bool found = false;
	size_t i;

	ls_mutex_lock(&w->claim_lock, &lc_claim_lock);
	for (i = 0; i < w->nr_claims; i++) {
		struct bm_run *r = &w->claims[i];
		blk64_t end = r->blk + r->n;

		if (blk < r->blk || blk + n > end)
			continue;
		found = true;
		if (blk > r->blk)
			ext2fs_unmark_block_bitmap_range2(w->fs->block_map, r->blk,
							  (unsigned)(blk - r->blk));
		if (blk + n < end) {
			r->blk = blk + n;
			r->n = end - r->blk;
		} else {
			*r = w->claims[--w->nr_claims];
		}
		break;
	}
	ls_mutex_unlock(&w->claim_lock);
	return found;
}

/*
 * Claim the first free run of up to @len blocks in [@gs, @ge] of group
 * @g, under the group's lock: 0 with *@got, *@glen; 1 when the range has
 * no free block; -ENOSPC when the claim cannot be noted. Context:
 * fs_lock shared.
 */
static int claim_in_group(struct wbfs *w, dgrp_t g, blk64_t gs, blk64_t ge, blk64_t len,
			  blk64_t *got, blk64_t *glen)
{
	ext2_filsys fs = w->fs;
	pthread_mutex_t *gl = group_lock(w, g);
	blk64_t b, e, s, x;
	int ret;

	ls_mutex_lock(gl, &lc_group_lock);
	if (ext2fs_find_first_zero_block_bitmap2(fs->block_map, gs, ge, &b)) {
		ls_mutex_unlock(gl);
		return 1;
	}
	e = len - 1 < ge - b ? b + len - 1 : ge;
	if (!ext2fs_find_first_set_block_bitmap2(fs->block_map, b, e, &s))
		e = s - 1;
	ls_mutex_lock(&w->claim_lock, &lc_claim_lock);
	ret = claim_add_locked(w, b, e - b + 1);
	ls_mutex_unlock(&w->claim_lock);
	if (!ret) {
		for (x = b; x <= e; x++)
			ext2fs_mark_block_bitmap2(fs->block_map, x);
	}
	ls_mutex_unlock(gl);
	if (ret)
		return -ENOSPC;
	atomic_fetch_add(&w->stats.nr_blocks_claimed, (long)(e - b + 1));
	*got = b;
	*glen = e - b + 1;
	return 0;
}

/*
 * Find and take up to @len free blocks, from @goal on (wrapping round
 * the groups), in the first group that has any: *@got, *@glen. Returns
 * 0, or -ENOSPC (nothing found: the caller allocates under fs_lock
 * exclusive, where busy blocks can be released). Context: fs_lock shared.
 */
int wbfs_claim_blocks(struct wbfs *w, blk64_t goal, blk64_t len, blk64_t *got, blk64_t *glen)
{
	ext2_filsys fs = w->fs;
	dgrp_t ng, g0, g, i;
	blk64_t first, last;
	int ret;

	if (!fs || w->ro || !len || fs->cluster_ratio_bits)
		return -ENOSPC;
	ng = fs->group_desc_count;
	first = fs->super->s_first_data_block;
	last = ext2fs_blocks_count(fs->super) - 1;
	if (goal < first || goal > last)
		goal = first;
	g0 = ext2fs_group_of_blk2(fs, goal);
	for (i = 0; i <= ng; i++) {
		blk64_t gs, ge;

		g = (dgrp_t)(((uint64_t)g0 + i) % ng);
		gs = i == 0 ? goal : ext2fs_group_first_block2(fs, g);
		ge = i == ng ? goal - 1 : ext2fs_group_last_block2(fs, g);
		if (gs < first)
			gs = first;
		/* counts change only under fs_lock exclusive: stable here */
		if (gs > ge || !ext2fs_bg_free_blocks_count(fs, g) || wbfs_group_bad(w, g))
			continue;
		ret = claim_in_group(w, g, gs, ge, len, got, glen);
		if (ret <= 0)
			return ret;
	}
	return -ENOSPC;
}

/* Claimed blocks [blk, blk+n) go into a file: now allocated. Context: fs_lock. */
void wbfs_claim_use(struct wbfs *w, blk64_t blk, blk64_t n)
{
	claim_del(w, blk, n);
	wbfs_block_alloc_stats_range(w, blk, n, +1);
}

/* Claimed blocks [blk, blk+n) were not needed: free again. Context: fs_lock. */
void wbfs_claim_release(struct wbfs *w, blk64_t blk, blk64_t n)
{
	if (claim_del(w, blk, n))
		ext2fs_unmark_block_bitmap_range2(w->fs->block_map, blk, (unsigned)n);
}

/*
 * Claim a free inode for a create in @parent: from @parent's group on,
 * as ext2fs_new_inode searches, under fs_lock shared and the group's
 * lock. A group whose inodes are not initialised stops the search (its
 * first use changes the group descriptor: ext2fs_new_inode does that
 * under fs_lock exclusive). Only when fs_lock is free of writers: the
 * search is short, and a create that queued for the lock twice (shared,
 * then exclusive) would wait more than the claim saves. Returns the
 * inode, or 0.
 */
ext2_ino_t wbfs_claim_inode(struct wbfs *w, ext2_ino_t parent)
{
	ext2_filsys fs;
	ext2_ino_t ipg, start, ino = 0, got;
	dgrp_t ng, g0, g, i;

	if (!wbfs_trylock_shared(w))
		return 0;
	fs = w->fs;
	if (!fs || w->ro || !fs->inode_map)
		goto out;
	ipg = fs->super->s_inodes_per_group;
	ng = fs->group_desc_count;
	g0 = parent ? (parent - 1) / ipg : 0;
	if (g0 >= ng)
		g0 = 0;
	for (i = 0; i < ng && !ino; i++) {
		pthread_mutex_t *gl;

		g = (dgrp_t)(((uint64_t)g0 + i) % ng);
		if (ext2fs_has_group_desc_csum(fs) &&
		    ext2fs_bg_flags_test(fs, g, EXT2_BG_INODE_UNINIT))
			break;
		/* counts change only under fs_lock exclusive: stable here */
		if (!ext2fs_bg_free_inodes_count(fs, g))
			continue;
		start = g * ipg + 1;
		if (start < EXT2_FIRST_INODE(fs->super))
			start = EXT2_FIRST_INODE(fs->super);
		gl = group_lock(w, g);
		ls_mutex_lock(gl, &lc_group_lock);
		if (!ext2fs_find_first_zero_inode_bitmap2(fs->inode_map, start, (g + 1) * ipg, &got)) {
			ls_mutex_lock(&w->claim_lock, &lc_claim_lock);
			if (w->nr_iclaims < WBFS_ICLAIMS) {
				w->iclaims[w->nr_iclaims++] = got;
				ext2fs_mark_inode_bitmap2(fs->inode_map, got);
				ino = got;
			}
			ls_mutex_unlock(&w->claim_lock);
		}
		ls_mutex_unlock(gl);
	}
	if (ino)
		atomic_fetch_add(&w->stats.nr_inodes_claimed, 1);
out:
	wbfs_unlock_shared(w);
	return ino;
}

/*
 * Inode @ino, claimed, is free again in the bitmap and known to the
 * caller only (the create that claimed it uses it, or drops it).
 * Returns false if it was not claimed. Context: fs_lock.
 */
bool wbfs_claim_inode_take(struct wbfs *w, ext2_ino_t ino)
{
	bool found = false;
	unsigned i;

	ls_mutex_lock(&w->claim_lock, &lc_claim_lock);
	for (i = 0; i < w->nr_iclaims; i++) {
		if (w->iclaims[i] == ino) {
			w->iclaims[i] = w->iclaims[--w->nr_iclaims];
			found = true;
			break;
		}
	}
	ls_mutex_unlock(&w->claim_lock);
	if (found)
		ext2fs_unmark_inode_bitmap2(w->fs->inode_map, ino);
	return found;
}

bool wbfs_bitmap_masked(struct wbfs *w)
{
	return w->hidden_last || w->nr_busy || w->nr_claims || w->nr_iclaims;
}

/* Claimed inodes are free in group @g's inode bitmap @d as written. */
static void ibitmap_written(struct wbfs *w, dgrp_t g, unsigned char *d)
{
	ext2_filsys fs = w->fs;
	ext2_ino_t ipg = fs->super->s_inodes_per_group;
	bool hit = false;
	unsigned i;

	/* no claim changes under fs_lock exclusive */
	for (i = 0; i < w->nr_iclaims; i++) {
		ext2_ino_t k;

		if ((w->iclaims[i] - 1) / ipg != g)
			continue;
		k = w->iclaims[i] - 1 - g * ipg;
		d[k / 8] &= (unsigned char)~(1U << (k % 8));
		hit = true;
	}
	if (!hit)
		return;
	ext2fs_inode_bitmap_csum_set(fs, g, (char *)d, (int)((ipg + 7) / 8));
	ext2fs_group_desc_csum_set(fs, g);
}

/*
 * libext2fs's own single-block allocations: extent, directory, xattr and
 * symlink blocks, all of them metadata that goes through the journal.
 * With no other room, one busy block is taken: its new contents join the
 * running transaction and reach home only after it commits, and with it
 * the free (or after the committing one's, which is older), so a crash
 * before leaves the old owner's block untouched. This cannot wait for a
 * commit (fs_lock is held). Without a journal, busy blocks are released.
 */
static errcode_t busy_alloc_block(ext2_filsys fs, blk64_t goal, blk64_t *ret)
{
	struct wbfs *w = fs->priv_data;
	errcode_t err = ext2fs_new_block2(fs, goal, fs->block_map, ret);

	if (err != EXT2_ET_BLOCK_ALLOC_FAIL || !w)
		return err;
	if (busy_release_now(w)) {
		if (!w->nr_busy)
			return err;
		wbfs_release_busy_locked(w);
		return ext2fs_new_block2(fs, goal, fs->block_map, ret);
	}
	return wbfs_journal_take_busy(w, goal, ret);
}

/*
 * libext2fs's range allocations (wbfs_new_range's, for file data): busy
 * blocks only without a journal. Data written into a block before its
 * free commits would show in the file that owned it after a crash.
 */
static errcode_t busy_new_range(ext2_filsys fs, int flags, blk64_t goal, blk64_t len,
				blk64_t *pblk, blk64_t *plen)
{
	struct wbfs *w = fs->priv_data;
	errcode_t err = ext2fs_new_range(fs, flags, goal, len, fs->block_map, pblk, plen);

	if (err == EXT2_ET_BLOCK_ALLOC_FAIL && w && w->nr_busy && busy_release_now(w)) {
		wbfs_release_busy_locked(w);
		err = ext2fs_new_range(fs, flags, goal, len, fs->block_map, pblk, plen);
	}
	return err;
}

/* A group's block bitmap location, for wbfs_bitmap_written. */
struct bb_loc {
	blk64_t blk;
	dgrp_t g;
};

static int bb_loc_cmp(const void *a, const void *b)
{
	const struct bb_loc *x = a, *y = b;

	return x->blk < y->blk ? -1 : x->blk > y->blk;
}

/*
 * Each group's block bitmap or inode table location (@loc), sorted: for
 * the iomgr, which group's bitmap a write is and which inodes an inode
 * table block holds.
 */
static struct bb_loc *locs_build(ext2_filsys fs, blk64_t (*loc)(ext2_filsys, dgrp_t))
{
	struct bb_loc *l = calloc(fs->group_desc_count, sizeof(*l));
	dgrp_t g;

	if (!l)
		return NULL;
	for (g = 0; g < fs->group_desc_count; g++)
		l[g] = (struct bb_loc){ loc(fs, g), g };
	qsort(l, fs->group_desc_count, sizeof(*l), bb_loc_cmp);
	return l;
}

/* The last of the @n sorted @locs at or before @blk, or NULL. */
static const struct bb_loc *locs_floor(const struct bb_loc *locs, size_t n, blk64_t blk)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (locs[mid].blk <= blk)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? &locs[lo - 1] : NULL;
}

bool wbfs_itable_inodes(struct wbfs *w, uint64_t blk, ext2_ino_t *first, unsigned *n)
{
	ext2_filsys fs = w->fs;
	const struct bb_loc *l;
	unsigned per;

	if (!fs || !w->it_locs)
		return false;
	l = locs_floor(w->it_locs, fs->group_desc_count, blk);
	if (!l || blk - l->blk >= fs->inode_blocks_per_group)
		return false;
	per = fs->blocksize / EXT2_INODE_SIZE(fs->super);
	*first = l->g * fs->super->s_inodes_per_group + (ext2_ino_t)(blk - l->blk) * per + 1;
	*n = per;
	return true;
}

/* Where the bitmaps and inode tables are, for the iomgr. Returns 0 or -ENOMEM. */
int wbfs_locs_build(struct wbfs *w)
{
	w->bb_locs = locs_build(w->fs, ext2fs_block_bitmap_loc);
	w->it_locs = locs_build(w->fs, ext2fs_inode_table_loc);
	w->ib_locs = locs_build(w->fs, ext2fs_inode_bitmap_loc);
	return w->bb_locs && w->it_locs && w->ib_locs ? 0 : -ENOMEM;
}

/* The group whose bitmap (as @locs lists them) is at block @blk, if any. */
static bool loc_group(struct wbfs *w, const struct bb_loc *locs, blk64_t blk, dgrp_t *g)
{
	const struct bb_loc *l = locs ? locs_floor(locs, w->fs->group_desc_count, blk) : NULL;

	if (!l || l->blk != blk)
		return false;
	*g = l->g;
	return true;
}

static bool bb_group(struct wbfs *w, blk64_t blk, dgrp_t *g)
{
	return loc_group(w, w->bb_locs, blk, g);
}

/*
 * libext2fs freed [blk, blk+num): what lies in a refused group stays in
 * use, and its group and the superblock keep their counts (the kernel
 * does not free into a group whose bitmap it refused either).
 */
static void busy_add(struct wbfs *w, blk64_t blk, blk_t n);

static void bad_group_keep_range(ext2_filsys fs, blk64_t blk, blk_t num, int inuse)
{
	struct wbfs *w = fs->priv_data;

	if (!w)
		return;
	/* busy_add below needs no note of its own: this covers the range */
	if (!num && !w->bm_in_range && w->bm_scan == BM_SCAN_NONE)
		w->bm_scan = BM_SCAN_QUIET;	/* which groups: unknown */
	wbfs_bb_changed(w, blk, num);
	if (inuse >= 0)
		return;
	wbfs_trim_note_freed(w, blk, num);
	while (num) {
		dgrp_t g = ext2fs_group_of_blk2(fs, blk);
		blk64_t end = ext2fs_group_last_block2(fs, g) + 1;
		blk_t n = end - blk < num ? (blk_t)(end - blk) : num;

		if (wbfs_group_bad(w, g)) {
			ext2fs_mark_block_bitmap_range2(fs->block_map, blk, n);
			ext2fs_bg_free_blocks_count_set(fs, g,
							ext2fs_bg_free_blocks_count(fs, g) - n);
			ext2fs_group_desc_csum_set(fs, g);
			ext2fs_free_blocks_count_add(fs->super, -(blk64_t)n);
		} else {
			busy_add(w, blk, n);
			wbfs_journal_note_freed(w, blk, n);
		}
		blk += n;
		num -= n;
	}
}

static void bad_group_keep(ext2_filsys fs, blk64_t blk, int inuse)
{
	bad_group_keep_range(fs, blk, 1, inuse);
}

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
static int validate_block_bitmaps(struct wbfs *w, const char *dev)
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
		if (wbfs_locs_build(w) || !w->bm_changed ||
		    ext2fs_allocate_block_bitmap(fs, "busy blocks", &w->busy))
			return -ENOMEM;
		ext2fs_set_block_alloc_stats_callback(fs, bad_group_keep, NULL);
		ext2fs_set_block_alloc_stats_range_callback(fs, bad_group_keep_range, NULL);
		ext2fs_set_alloc_block_callback(fs, busy_alloc_block, NULL);
		ext2fs_set_new_range_callback(fs, busy_new_range, NULL);
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

/*
 * libext2fs before 1.47.4 refuses to free a run that ends at the last
 * block of the filesystem (EXT2_ET_BAD_BLOCK_NUM), after the extent is
 * already gone from the tree: a punch, truncate or unlink of the file
 * that owns it leaks the block and leaves i_blocks wrong. So that no file
 * gets it, the last block, while free, is marked in use in memory only:
 * the block bitmap written to the device shows it free
 * (wbfs_bitmap_written), and statfs counts it free as the kernel's ext4
 * does (the metadata headroom covers the one block reservations may
 * promise too many).
 */
static void hide_last_block(struct wbfs *w)
{
	ext2_filsys fs = w->fs;
	blk64_t last = ext2fs_blocks_count(fs->super) - 1;

	if (w->ro || ext2fs_get_library_version(NULL, NULL) >= 14704 ||
	    ext2fs_test_block_bitmap2(fs->block_map, last))
		return;
	ext2fs_mark_block_bitmap2(fs->block_map, last);
	wbfs_bb_changed(w, last, 1);
	w->hidden_last = last;
}

/*
 * The iomgr wrote @data as device block @blk: if it is the bitmap of the
 * hidden last block or of busy blocks, clear their bits. Context: fs_lock.
 */
void wbfs_bitmap_written(struct wbfs *w, uint64_t blk, void *data)
{
	ext2_filsys fs = w->fs;
	unsigned char *busy = w->bb_scratch;
	unsigned char *d = data;
	blk64_t first, n, i;
	bool hit = false;
	dgrp_t g;

	if (!fs || !w->bb_locs)
		return;
	if (!bb_group(w, blk, &g)) {
		if (w->nr_iclaims && loc_group(w, w->ib_locs, blk, &g))
			ibitmap_written(w, g, d);
		return;
	}
	first = ext2fs_group_first_block2(fs, g);
	n = ext2fs_group_last_block2(fs, g) - first + 1;
	if (w->hidden_last && ext2fs_group_of_blk2(fs, w->hidden_last) == g) {
		i = w->hidden_last - first;
		d[i / 8] &= (unsigned char)~(1U << (i % 8));
		hit = true;
	}
	if (w->nr_busy && !busy) {
		/* per device: the devices of a domain run here at once */
		busy = w->bb_scratch = malloc(fs->blocksize);
	}
	if (w->nr_busy && busy && (n + 7) / 8 <= fs->blocksize &&
	    !ext2fs_get_block_bitmap_range2(w->busy, first, (unsigned)n, busy)) {
		for (i = 0; i < (n + 7) / 8; i++) {
			if (busy[i]) {
				d[i] &= (unsigned char)~busy[i];
				hit = true;
			}
		}
	}
	/* claims (no claim changes under fs_lock exclusive) */
	for (i = 0; i < w->nr_claims; i++) {
		blk64_t s = w->claims[i].blk, e = s + w->claims[i].n, b;

		if (s < first)
			s = first;
		if (e > first + n)
			e = first + n;
		for (b = s; b < e; b++) {
			d[(b - first) / 8] &= (unsigned char)~(1U << ((b - first) % 8));
			hit = true;
		}
	}
	if (!hit)
		return;
	/* the descriptors are written after the bitmaps: their checksum of
	 * this bitmap must be of what is on the device */
	ext2fs_block_bitmap_csum_set(fs, g, data, EXT2_CLUSTERS_PER_GROUP(fs->super) / 8);
	ext2fs_group_desc_csum_set(fs, g);
}

/*
 * Is @buf, as the iomgr would store it at @blk (busy blocks free:
 * wbfs_bitmap_written), what the cache holds there already? A dirty page
 * that is then left alone gets the journal's note_same, as meta_store
 * gives it. Context: fs_lock.
 */
static bool bitmap_unchanged(struct wbfs *w, blk64_t blk, const char *buf, bool *cached)
{
	char scratch[PAGE_SIZE] __attribute__((aligned(64)));
	struct page *p = mapping_get_page(&w->meta_map, blk);
	bool same = false;

	*cached = false;
	if (!p)
		return false;
	if (wbfs_bitmap_masked(w)) {
		memcpy(scratch, buf, PAGE_SIZE);
		wbfs_bitmap_written(w, blk, scratch);
		buf = scratch;
	}
	lock_page(p);
	*cached = page_test(p, PG_uptodate);
	if (page_test(p, PG_uptodate) && !memcmp(page_address(p), buf, PAGE_SIZE)) {
		same = true;
		if (page_test(p, PG_dirty))
			wbfs_journal_note_same(w, p);
	}
	unlock_page(p);
	page_put(p);
	return same;
}

/*
 * One group's bitmap, as libext2fs writes it (its checksum in the group
 * descriptor, then the block), unless the cache has it unchanged.
 * *@changed: the cache held it, different (not: unchanged, or not cached).
 */
static errcode_t bitmap_put(struct wbfs *w, dgrp_t g, blk64_t blk, char *buf, int nbytes,
			    bool inode, bool *changed)
{
	ext2_filsys fs = w->fs;
	errcode_t err;
	bool cached;

	*changed = false;
	if (!blk || blk >= ext2fs_blocks_count(fs->super) || bitmap_unchanged(w, blk, buf, &cached))
		return 0;
	*changed = cached;
	err = inode ? ext2fs_inode_bitmap_csum_set(fs, g, buf, nbytes)
		    : ext2fs_block_bitmap_csum_set(fs, g, buf, nbytes);
	if (err)
		return err;
	ext2fs_group_desc_csum_set(fs, g);
	fs->flags |= EXT2_FLAG_DIRTY;
	err = io_channel_write_blk64(fs->io, blk, 1, buf);
	if (err)
		return inode ? EXT2_ET_INODE_BITMAP_WRITE : EXT2_ET_BLOCK_BITMAP_WRITE;
	return 0;
}

/* The last group's block bitmap: the bits past the filesystem's end are set. */
static void pad_last_group(ext2_filsys fs, char *bb)
{
	unsigned nbits = EXT2FS_NUM_B2C(fs, ((ext2fs_blocks_count(fs->super) -
					      (uint64_t)fs->super->s_first_data_block) %
					     (uint64_t)EXT2_BLOCKS_PER_GROUP(fs->super)));

	if (nbits)
		for (unsigned k = nbits; k < fs->blocksize * 8; k++)
			ext2fs_set_bit(k, bb);
}

/*
 * Group @g's block (@kind BM_BLOCK) or inode bitmap, as libext2fs's
 * write_bitmaps lays it out (clusters per group bits, the last group's
 * tail padded with ones), into @buf (filled with ones beyond it) and out
 * unless the cache has it unchanged. A difference the group's notes
 * (@changed) did not announce counts as untracked in a checking scan.
 * Context: fs_lock.
 */
static errcode_t group_bitmap_put(struct wbfs *w, dgrp_t g, uint8_t kind, uint8_t changed,
				  char *buf)
{
	ext2_filsys fs = w->fs;
	bool block = kind == BM_BLOCK, differs;
	int nbytes = block ? (int)(EXT2_CLUSTERS_PER_GROUP(fs->super) / 8)
			   : (int)((EXT2_INODES_PER_GROUP(fs->super) + 7) / 8);
	errcode_t err;

	if (block) {
		err = ext2fs_get_block_bitmap_range2(fs->block_map,
						     EXT2FS_B2C(fs, fs->super->s_first_data_block) +
						     ((blk64_t)g * nbytes << 3),
						     (size_t)nbytes << 3, buf);
		if (!err && g == fs->group_desc_count - 1)
			pad_last_group(fs, buf);
	} else {
		err = ext2fs_get_inode_bitmap_range2(fs->inode_map,
						     1 + ((ext2_ino_t)g * nbytes << 3),
						     (size_t)nbytes << 3, buf);
	}
	if (!err)
		err = bitmap_put(w, g, block ? ext2fs_block_bitmap_loc(fs, g)
					     : ext2fs_inode_bitmap_loc(fs, g),
				 buf, nbytes, !block, &differs);
	if (!err && differs && !(changed & kind) && w->bm_scan == BM_SCAN_CHECK)
		atomic_fetch_add(&w->stats.nr_bitmap_untracked, 1);
	return err;
}

/*
 * The changed groups' bitmaps (an uninitialised group skipped): those
 * marked in bm_changed, or with bm_scan every group, each still compared
 * with what the cache holds. Context: fs_lock.
 */
static errcode_t write_changed_bitmaps(struct wbfs *w, bool do_block, bool do_inode)
{
	char bb[PAGE_SIZE] __attribute__((aligned(64)));
	char ib[PAGE_SIZE] __attribute__((aligned(64)));
	ext2_filsys fs = w->fs;
	bool csum = ext2fs_has_group_desc_csum(fs);
	bool all = w->bm_scan != BM_SCAN_NONE || !w->bm_changed;
	uint8_t due = (do_block ? BM_BLOCK : 0) | (do_inode ? BM_INODE : 0);
	errcode_t err;
	dgrp_t g;

	memset(bb, 0xff, sizeof(bb));
	memset(ib, 0xff, sizeof(ib));
	for (g = 0; g < fs->group_desc_count; g++) {
		uint8_t changed = w->bm_changed ? w->bm_changed[g] : BM_BLOCK | BM_INODE;
		uint8_t look = all ? due : changed & due;

		if ((look & BM_BLOCK) && !(csum && ext2fs_bg_flags_test(fs, g, EXT2_BG_BLOCK_UNINIT)) &&
		    (err = group_bitmap_put(w, g, BM_BLOCK, changed, bb)))
			return err;
		if ((look & BM_INODE) && !(csum && ext2fs_bg_flags_test(fs, g, EXT2_BG_INODE_UNINIT)) &&
		    (err = group_bitmap_put(w, g, BM_INODE, changed, ib)))
			return err;
		/* written (or the same): only what changes from now on is due */
		if (w->bm_changed)
			w->bm_changed[g] &= (uint8_t)~due;
	}
	if (do_block && do_inode)
		w->bm_scan = BM_SCAN_NONE;
	return 0;
}

errcode_t wbfs_flush_locked(struct wbfs *w)
{
	ext2_filsys fs = w->fs;
	bool do_block = fs->block_map && ext2fs_test_bb_dirty(fs);
	bool do_inode = fs->inode_map && ext2fs_test_ib_dirty(fs);

	if ((do_block || do_inode) && (fs->flags & EXT2_FLAG_RW) && fs->blocksize == PAGE_SIZE) {
		errcode_t err = write_changed_bitmaps(w, do_block, do_inode);

		if (err)
			return err;
		/* written: ext2fs_flush writes the superblock and descriptors */
		fs->flags &= ~(EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY);
	}
	return ext2fs_flush(fs);
}

/*
 * ext2fs_punch of logical blocks [start, end] of @ino. When the file maps
 * the filesystem's last block there (it did before mount: the block is
 * not hidden) and libext2fs cannot free it, that block is unmapped and
 * freed here first; it is the physical end of its extent, so the extent
 * only shrinks and no extent block is needed. Context: fs_lock.
 */
errcode_t wbfs_punch(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in,
		     blk64_t start, blk64_t end)
{
	ext2_filsys fs = w->fs;
	blk64_t last = ext2fs_blocks_count(fs->super) - 1;
	ext2_extent_handle_t h;
	struct ext2fs_extent e;
	errcode_t err;
	int op = EXT2_EXTENT_ROOT;
	bool found = false;

	if (!(in->i_flags & EXT4_EXTENTS_FL) || w->hidden_last == last ||
	    ext2fs_get_library_version(NULL, NULL) >= 14704 ||
	    !ext2fs_test_block_bitmap2(fs->block_map, last))
		goto punch;
	err = ext2fs_extent_open2(fs, ino, (struct ext2_inode *)in, &h);
	if (err)
		return err;
	while (!ext2fs_extent_get(h, op, &e)) {
		op = EXT2_EXTENT_NEXT_LEAF;
		if ((e.e_flags & EXT2_EXTENT_FLAGS_LEAF) && e.e_pblk <= last &&
		    last - e.e_pblk < e.e_len) {
			found = true;
			break;
		}
	}
	if (found && e.e_lblk + (last - e.e_pblk) >= start &&
	    e.e_lblk + (last - e.e_pblk) <= end) {
		err = ext2fs_extent_set_bmap(h, e.e_lblk + (last - e.e_pblk), 0, 0);
		if (err) {
			ext2fs_extent_free(h);
			return err;
		}
		ext2fs_block_alloc_stats2(fs, last, -1);
		ext2fs_iblk_sub_blocks(fs, (struct ext2_inode *)in, 1);
	}
	ext2fs_extent_free(h);
punch:
	return ext2fs_punch(fs, ino, (struct ext2_inode *)in, NULL, start, end);
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
static int check_root(struct wbfs *w, const char *dev)
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
static int check_journal(struct wbfs *w, const char *dev)
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
		if (posix_memalign((void **)&jsb, 4096, fs->blocksize))
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
static int check_desc(struct wbfs *w, const char *dev)
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

/*
 * The superblock's free counts after a journal replay are those of the
 * last superblock the log held: ext4 keeps them only loosely (the kernel
 * recounts them from the group descriptors at every mount). The
 * descriptors were journaled with every allocation: recount from them.
 */
static void sb_recount_free(struct wbfs *w)
{
	ext2_filsys fs = w->fs;
	uint64_t blocks = 0, inodes = 0;
	dgrp_t g;

	for (g = 0; g < fs->group_desc_count; g++) {
		blocks += ext2fs_bg_free_blocks_count(fs, g);
		inodes += ext2fs_bg_free_inodes_count(fs, g);
	}
	if (blocks == ext2fs_free_blocks_count(fs->super) &&
	    inodes == fs->super->s_free_inodes_count)
		return;
	ext2fs_free_blocks_count_set(fs->super, blocks);
	fs->super->s_free_inodes_count = (uint32_t)inodes;
	if (!w->ro)
		ext2fs_mark_super_dirty(fs);
}

/* libext2fs over the cache: open, check features, read the bitmaps. */
static int fs_load(struct wbfs *w, const char *dev)
{
	int flags = EXT2_FLAG_64BITS | (w->ro ? 0 : EXT2_FLAG_RW);
	errcode_t err;
	int ret;

	wbfs_iomgr_set(w);
	/* libext2fs reads "NAME?OPTIONS": a URI's query is no channel option */
	err = ext2fs_open2(w->nbd ? "nbd" : dev, NULL, flags, 0, 0, &wbfs_io_manager, &w->fs);
	if (err) {
		msg_dev(dev, "cannot open the filesystem: %s", error_message(err));
		return -EINVAL;
	}
	ret = check_features(w, dev);
	if (!ret)
		ret = check_desc(w, dev);
	if (!ret)
		ret = check_root(w, dev);
	if (!ret)
		ret = check_journal(w, dev);
	if (ret)
		goto out_fs;
	if (w->recovered)
		sb_recount_free(w);
	/* the array kind: claims change one group's bytes at a time under
	 * fs_lock shared (wbfs_claim_blocks); a tree would be shared */
	w->fs->default_bitmap_type = EXT2FS_BMAP64_BITARRAY;
	err = ext2fs_read_bitmaps(w->fs);
	if (err) {
		msg_dev(dev, "cannot read the bitmaps: %s", error_message(err));
		ret = -EIO;
		goto out_fs;
	}
	ret = validate_block_bitmaps(w, dev);
	if (ret)
		goto out_fs;
	hide_last_block(w);
	init_space(w);
	return 0;
out_fs:
	/* anything libext2fs writes here lands in the cache and is dropped */
	busy_free(w);
	wbfs_orphan_untrack(w);
	ext2fs_close_free(&w->fs);
	free(w->bad_groups);
	free(w->bad_igroups);
	w->bad_groups = w->bad_igroups = NULL;
	w->nr_bad_groups = w->nr_bad_igroups = 0;
	return ret;
}

static int wbfs_init_locks(struct wbfs *w)
{
	pthread_rwlockattr_t ra;
	unsigned i;

	/* a writer waiting keeps new claims out: claims are short, and
	 * everything else needs the lock exclusive */
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&w->fs_lock, &ra);
	pthread_rwlockattr_destroy(&ra);
	for (i = 0; i < WBFS_GROUP_LOCKS; i++)
		pthread_mutex_init(&w->group_lock[i], NULL);
	pthread_mutex_init(&w->claim_lock, NULL);
	pthread_mutex_init(&w->resv_lock, NULL);
	pthread_mutex_init(&w->itable_lock, NULL);
	pthread_cond_init(&w->itable_cond, NULL);
	pthread_mutex_init(&w->hide_lock, NULL);
	w->itable_size = 4096;
	w->itable = calloc(w->itable_size, sizeof(*w->itable));
	return w->itable ? 0 : -ENOMEM;
}

/*
 * Free what a crash left on the orphan list (open files already
 * deleted), as the kernel's ext4 does at mount, and write it out.
 */
static int orphan_cleanup(struct wbfs *w, const char *dev)
{
	bool any;
	int ret = 0;

	wbfs_lock(w);
	any = w->fs->super->s_last_orphan != 0;
	if (any)
		ret = wbfs_orphan_cleanup(w);
	wbfs_orphan_track(w);
	wbfs_unlock(w);
	if (!any)
		return 0;
	if (ret < 0) {
		msg_dev(dev, "cannot process the orphan list: %s; run e2fsck",
			 strerror(-ret));
		return ret;
	}
	fprintf(msg_stream(), "wbcfs: %s: %d orphan inode%s deleted\n", dev, ret, ret == 1 ? "" : "s");
	return bdi_sync(w->bdi, WB_REASON_SYNC);
}

int wbfs_open(struct wbfs *w, const char *dev, const struct wbcfs_options *o)
{
	int ret;

	w->opts = *o;
	w->ro = o->ro;
	w->dev_path = dev;
	/*
	 * A filesystem whose journal was not replayed is not one to write.
	 * ext4 mounts read-write with noload when no replay is due and runs
	 * without a journal; wbcfs never writes without one.
	 */
	if (o->norecovery && !o->ro) {
		msg_dev(dev, "norecovery (noload) requires ro");
		return -EINVAL;
	}
	ret = wbfs_init_locks(w);
	if (!ret && o->fsck && !o->ro)
		ret = run_fsck(dev);
	if (!ret)
		ret = dev_open(w, dev, w->ro);
	if (ret)
		return ret;
	/* the journal goes home before anything below reads metadata,
	 * unless the mount asked to see the device as it is (ro only) */
	ret = o->norecovery ? 0 : jrec_recover(dev, w->dev_fd, w->ro);
	w->recovered = ret > 0;
	if (ret >= 0)
		ret = sb_check(w, dev, w->ro, o->fsck);
	if (!ret)
		ret = cache_and_bdi(w, dev);
	if (ret)
		goto out_close;
	ret = fs_load(w, dev);
	if (ret)
		goto out_cache;
	ret = wbfs_journal_load(w, dev);
	if (ret)
		goto out_fs;
	if (!winode_get(w, EXT2_ROOT_INO, false)) {	/* kept until unmount */
		msg_dev(dev, "cannot read the root directory");
		ret = -EIO;
		goto out_fs;
	}
	if (!w->ro) {
		ret = mark_mounted(w);
		if (ret) {
			msg_dev(dev, "cannot mark the filesystem in use: %s", strerror(-ret));
			goto out_inodes;
		}
		ret = wbfs_journal_start(w);
		if (ret) {
			msg_dev(dev, "cannot start the journal: %s", strerror(-ret));
			goto out_inodes;
		}
		ret = orphan_cleanup(w, dev);
		if (ret)
			goto out_inodes;
	} else if (w->fs->super->s_last_orphan) {
		msg_dev(dev, "read-only: deleted inodes on the orphan list are not freed");
	}
	ret = data_ra_start(w);
	if (ret) {
		msg_dev(dev, "cannot start the readahead threads: %s", strerror(-ret));
		goto out_inodes;
	}
	/* only once everything is known to be good: bad input fails fast */
	cache_prefault(w->cache, w->opts.prefault_bytes);
	return 0;
out_inodes:
	winode_release_all(w);
out_fs:
	wbfs_journal_free(w);
	busy_free(w);
	wbfs_orphan_untrack(w);
	ext2fs_close_free(&w->fs);
out_cache:
	teardown_cache(w);
out_close:
	dev_close(w);
	free(w->bad_groups);
	free(w->bad_igroups);
	w->bad_groups = w->bad_igroups = NULL;
	return ret;
}

/*
 * Unmount: write every dirty page, release inodes still held, mark the
 * filesystem clean, write the final metadata and flush the device.
 */
/*
 * Unmount: write everything; each inode still dirty after that is
 * retried once more as it is evicted, and what still cannot be written is
 * reported lost (data_report_lost) and makes the result -EIO. Then the
 * metadata, the eviction's included, is written once more: only when
 * that succeeds is the superblock marked clean, so a metadata write
 * failure leaves the filesystem for e2fsck.
 */
/*
 * An NBD server away at unmount (nbd_retry on): wait for it a while,
 * max(60 s, 3 reconnect intervals), before anything is written back and
 * what cannot be written is reported lost.
 */
static void nbd_unmount_wait(struct wbfs *w)
{
	unsigned s = w->opts.nbd_retry_s, limit_s = s * 3 > 60 ? s * 3 : 60, i;

	if (w->ro || !w->nbd || !s || nbdev_connected(w->nbd))
		return;
	fprintf(msg_stream(), "wbcfs: %s: unmount: waiting up to %u s for the NBD server to come"
		" back\n", w->dev_path, limit_s);
	for (i = 0; i < limit_s * 10 && !nbdev_connected(w->nbd); i++)
		usleep(100000);
}

int wbfs_close(struct wbfs *w)
{
	bool meta_ok = true;
	int ret = 0, r;

	nbd_unmount_wait(w);
	if (!w->ro) {
		ret = bdi_sync(w->bdi, WB_REASON_UMOUNT);
		if (ret)
			fprintf(msg_stream(), "wbcfs: %s: writeback error at unmount: %s; retrying"
				" each file once more\n", w->dev_path, strerror(-ret));
		ret = 0;	/* what is finally lost is counted in lost_pages */
	}
	nbd_unmount_wait(w);
	data_ra_stop(w);	/* its jobs hold inodes open */
	winode_release_all(w);
	if (!w->ro) {
		r = bdi_sync(w->bdi, WB_REASON_UMOUNT);
		meta_ok = r == 0;
		if (r) {
			fprintf(msg_stream(), "wbcfs: %s: metadata could not be written at unmount: %s;"
				" the filesystem is left marked not clean (run e2fsck)\n",
				w->dev_path, strerror(-r));
			ret = r;
		}
	}
	wbfs_bitmaps_check_next(w);	/* the last bitmap write: every group */
	if (w->journal) {
		/* commit, checkpoint: the log is empty on disk */
		r = wbfs_journal_shutdown(w);
		if (r) {
			fprintf(msg_stream(), "wbcfs: %s: the journal could not be emptied at unmount: %s;"
				" the next mount replays it\n", w->dev_path, strerror(-r));
			meta_ok = false;
			if (!ret)
				ret = r;
		}
	}
	wbfs_lock(w);
	if (w->fs_error) {
		meta_ok = false;
		if (!ret)
			ret = -EIO;
	}
	if (!w->ro && meta_ok) {
		w->fs->super->s_state |= EXT2_VALID_FS;
		if (w->journal)
			ext2fs_clear_feature_journal_needs_recovery(w->fs->super);
		ext2fs_mark_super_dirty(w->fs);
	} else if (wbfs_journal_aborted(w)) {
		/* what was not committed must not reach the device: the
		 * replay at the next mount restores the last commit */
		w->fs->flags &= ~(EXT2_FLAG_DIRTY | EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY |
				  EXT2_FLAG_CHANGED);
	} else if (!w->ro && w->journal) {
		/* journaled but inconsistent: e2fsck must look at it */
		w->fs->super->s_state &= ~EXT2_VALID_FS;
		ext2fs_mark_super_dirty(w->fs);
	}
	busy_free(w);
	wbfs_orphan_untrack(w);
	r = -wbfs_errno(ext2fs_close_free(&w->fs));
	ls_rwlock_unlock(&w->fs_lock);
	if (r && !ret)
		ret = r;
	if (!w->ro) {
		r = bdi_sync(w->bdi, WB_REASON_UMOUNT);
		if (r && !ret && !wbfs_journal_aborted(w))
			ret = r;
	}
	wbfs_journal_free(w);
	teardown_cache(w);
	dev_close(w);
	free(w->bad_groups);
	free(w->bad_igroups);
	free(w->bb_locs);
	free(w->bm_changed);
	free(w->it_locs);
	free(w->ib_locs);
	free(w->trimmed_groups);
	free(w->bb_scratch);
	free(w->hide);
	if (atomic_load(&w->lost_pages)) {
		fprintf(msg_stream(), "wbcfs: %s: %ld dirty pages could not be written and are lost\n",
			w->dev_path, atomic_load(&w->lost_pages));
		if (!ret)
			ret = -EIO;
	}
	return ret;
}
