// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Opening and closing the ext4 filesystem: device checks with one-line
 * errors, libext2fs over the cache's io_manager, the not-clean mark while
 * mounted, the fs lock, libext2fs error translation and inode time
 * encoding. Block reservations and allocation are in alloc.c, the bitmaps
 * and busy blocks in bitmap.c, the mount-time metadata checks in check.c;
 * the FUSE handlers and the data path live in ops.c, data.c and dir.c.
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


int ext4_errno(errcode_t err)
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

void ext4_lock(struct wbfs *w)
{
	ls_rwlock_wrlock(&w->fs_lock, &lc_fs_lock);
}

/* fs_lock shared: for block claims only (ext4_claim_blocks). */
void ext4_lock_shared(struct wbfs *w)
{
	ls_rwlock_rdlock(&w->fs_lock, &lc_fs_lock_r);
}

/* fs_lock shared if nobody holds it exclusive or waits to: true if taken. */
bool ext4_trylock_shared(struct wbfs *w)
{
	return !ls_rwlock_tryrdlock(&w->fs_lock, &lc_fs_lock_r);
}

void ext4_unlock_shared(struct wbfs *w)
{
	ls_rwlock_unlock(&w->fs_lock);
}

void ext4_refresh_free_locked(struct wbfs *w)
{
	lock_assert_held(&w->fs_lock);

	if (!w->fs)
		return;
	ls_mutex_lock(&w->resv_lock, &lc_resv_lock);
	w->free_blocks = (int64_t)ext2fs_free_blocks_count(w->fs->super) - w->bad_free;
	w->free_inodes = w->fs->super->s_free_inodes_count;
	ls_mutex_unlock(&w->resv_lock);
}

/* Unlock, refreshing the free counts writers reserve against. */
void ext4_unlock(struct wbfs *w)
{
	ext4_refresh_free_locked(w);
	ls_rwlock_unlock(&w->fs_lock);
}

/* Is the request's user the owner of the root reserve (ext4's resuid/resgid)? */
bool ext4_privileged(struct wbfs *w, const struct fuse_ctx *ctx)
{
	const struct ext2_super_block *sb = w->fs->super;

	return ctx->uid == 0 || ctx->uid == sb->s_def_resuid ||
	       (sb->s_def_resgid && ctx->gid == sb->s_def_resgid);
}

int ext4_read_inode(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	errcode_t err;

	memset(in, 0, sizeof(*in));
	if (!w->fs)
		return -EIO;	/* a request that arrived after unmount */
	err = ext2fs_read_inode_full(w->fs, ino, (struct ext2_inode *)in, sizeof(*in));
	return -ext4_errno(err);
}

int ext4_write_inode(struct wbfs *w, ext2_ino_t ino, struct ext2_inode_large *in)
{
	errcode_t err;

	err = ext2fs_write_inode_full(w->fs, ino, (struct ext2_inode *)in, sizeof(*in));
	if (!err)
		winode_note_written(w, ino, in);
	return -ext4_errno(err);
}

/* Every inode (and superblock) stamp: one clock, never running backwards. */
void ext4_now(struct timespec *ts)
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

void ext4_ts_get(const struct ext2_inode_large *in, int which, struct timespec *ts)
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

void ext4_ts_set(struct ext2_inode_large *in, int which, const struct timespec *ts)
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
 * readahead_kb not given: the block device's read_ahead_kb (BLKRAGET, in
 * 512-byte sectors), the window the kernel's ext4 reads ahead with on the
 * same device (a loop device has 2560 KiB here, a disk often 128). With
 * 1 MiB FUSE reads a window of 128 KiB is the request alone: the next
 * 1 MiB is read, with its first-touch page faults, while the reader waits.
 */
static void dev_readahead(struct wbfs *w, int fd)
{
	long sectors = 0;
	unsigned long kb;

	if (w->opts.readahead_kb_given || ioctl(fd, BLKRAGET, &sectors) < 0 || sectors < 0)
		return;
	kb = (unsigned long)sectors / 2 / 4 * 4;
	w->opts.readahead_kb = kb > 65536 ? 65536 : (unsigned)kb;
}

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
	dev_readahead(w, fd);
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

/*
 * An RBD image: io_engine=rbd (any other engine given is refused), its
 * size is the image's, a read-write open holds its exclusive lock.
 */
static int rbd_open(struct wbfs *w, const char *spec, bool ro)
{
	const struct wbcfs_options *o = &w->opts;
	struct rbdev_conf c = { .conf = o->ceph_conf, .id = o->ceph_id,
				.keyring = o->ceph_keyring, .ro = ro, .break_lock = o->break_lock,
				.timeout_s = o->rbd_timeout_s,
				.connect_timeout_s = o->rbd_connect_timeout_s };
	int ret;

	if (o->io_engine_given && o->io_engine != IO_ENGINE_RBD) {
		msg_dev(spec, "io_engine=%s cannot drive an RBD image (it uses io_engine=rbd)",
			io_engine_name(o->io_engine));
		return -EINVAL;
	}
	ret = rbdev_open(&w->rbd, spec, &c, msg_stream());
	if (ret)
		return ret;
	w->opts.io_engine = IO_ENGINE_RBD;
	w->dev_fd = rbdev_fd(w->rbd);
	w->dev_bytes = rbdev_size(w->rbd);
	return 0;
}

static void dev_close(struct wbfs *w)
{
	if (w->nbd)
		nbdev_close(w->nbd);	/* its fd goes with it */
	else if (w->rbd)
		rbdev_close(w->rbd);	/* and its lock */
	else
		close(w->dev_fd);
	w->nbd = NULL;
	w->rbd = NULL;
	w->dev_fd = -1;
}

static int dev_open(struct wbfs *w, const char *dev, bool ro)
{
	struct stat st;
	int fd, ret;

	if (nbdev_is_uri(dev))
		return nbd_open(w, dev, ro);
	if (rbdev_is_spec(dev))
		return rbd_open(w, dev, ro);
	if (w->opts.io_engine == IO_ENGINE_NBD || w->opts.io_engine == IO_ENGINE_RBD) {
		msg_dev(dev, "io_engine=%s is for %s", io_engine_name(w->opts.io_engine),
			w->opts.io_engine == IO_ENGINE_NBD ? "NBD exports (nbd://, nbd+unix://...)"
							   : "RBD images (rbd:POOL/IMAGE)");
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

	if (posix_memalign(&buf, PAGE_SIZE, PAGE_SIZE))
		return -ENOMEM;
	n = blkdev_pread(w->dev_fd, buf, PAGE_SIZE, 0);
	if (n != (ssize_t)PAGE_SIZE) {
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
	if (!ro && bsize != PAGE_SIZE) {
		msg_dev(dev, "block size %u is not supported read-write (%lu only); mount with -o ro",
			bsize, PAGE_SIZE);
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
	int status;

	if (rbdev_is_spec(dev)) {
		msg_dev(dev, "fsck: e2fsck cannot reach an RBD image from here; check an rbd "
			"export of it");
		return -EOPNOTSUPP;
	}
	status = nbdev_is_uri(dev) ? fsck_nbd(dev) : run_prog(argv);

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
	else if (w->rbd)
		snprintf(name, sizeof(name), "%s", rbdev_name(w->rbd));
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
	bc.ops = &ext4_bdi_ops;
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
	ext4_now(&now);
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
	ext4_lock(w);	/* nobody else yet: for the contract's check */
	ext4_refresh_free_locked(w);
	ext4_unlock(w);
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

	iomgr_set(w);
	/* libext2fs reads "NAME?OPTIONS": a URI's query is no channel option */
	err = ext2fs_open2(w->nbd ? "nbd" : dev, NULL, flags, 0, 0, &ext4_io_manager, &w->fs);
	if (err) {
		msg_dev(dev, "cannot open the filesystem: %s", error_message(err));
		return -EINVAL;
	}
	ret = check_features(w, dev);
	if (!ret)
		ret = ext4_check_desc(w, dev);
	if (!ret)
		ret = ext4_check_root(w, dev);
	if (!ret)
		ret = ext4_check_journal(w, dev);
	if (ret)
		goto out_fs;
	if (w->recovered)
		sb_recount_free(w);
	/* the array kind: claims change one group's bytes at a time under
	 * fs_lock shared (ext4_claim_blocks); a tree would be shared */
	w->fs->default_bitmap_type = EXT2FS_BMAP64_BITARRAY;
	err = ext2fs_read_bitmaps(w->fs);
	if (err) {
		msg_dev(dev, "cannot read the bitmaps: %s", error_message(err));
		ret = -EIO;
		goto out_fs;
	}
	ret = ext4_validate_block_bitmaps(w, dev);
	if (ret)
		goto out_fs;
	ext4_hide_last_block(w);
	init_space(w);
	return 0;
out_fs:
	/* anything libext2fs writes here lands in the cache and is dropped */
	ext4_lock(w);	/* alone, but the contract is fs_lock (unmount holds it) */
	ext4_busy_free(w);
	ext4_unlock(w);
	ext4_orphan_untrack(w);
	ext2fs_close_free(&w->fs);
	free(w->bad_groups);
	free(w->bad_igroups);
	w->bad_groups = w->bad_igroups = NULL;
	w->nr_bad_groups = w->nr_bad_igroups = 0;
	return ret;
}

static int ext4_init_locks(struct wbfs *w)
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

	ext4_lock(w);
	any = w->fs->super->s_last_orphan != 0;
	if (any)
		ret = ext4_orphan_cleanup(w);
	ext4_orphan_track(w);
	ext4_unlock(w);
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

int ext4_open(struct wbfs *w, const char *dev, const struct wbcfs_options *o)
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
	ret = ext4_init_locks(w);
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
	ret = ext4_journal_load(w, dev);
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
		ret = ext4_journal_start(w);
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
	ext4_journal_free(w);
	ext4_lock(w);	/* alone, but the contract is fs_lock (unmount holds it) */
	ext4_busy_free(w);
	ext4_unlock(w);
	ext4_orphan_untrack(w);
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

int ext4_close(struct wbfs *w)
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
	ext4_bitmaps_check_next(w);	/* the last bitmap write: every group */
	if (w->journal) {
		/* commit, checkpoint: the log is empty on disk */
		r = ext4_journal_shutdown(w);
		if (r) {
			fprintf(msg_stream(), "wbcfs: %s: the journal could not be emptied at unmount: %s;"
				" the next mount replays it\n", w->dev_path, strerror(-r));
			meta_ok = false;
			if (!ret)
				ret = r;
		}
	}
	ext4_lock(w);
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
	} else if (ext4_journal_aborted(w)) {
		/* what was not committed must not reach the device: the
		 * replay at the next mount restores the last commit */
		w->fs->flags &= ~(EXT2_FLAG_DIRTY | EXT2_FLAG_BB_DIRTY | EXT2_FLAG_IB_DIRTY |
				  EXT2_FLAG_CHANGED);
	} else if (!w->ro && w->journal) {
		/* journaled but inconsistent: e2fsck must look at it */
		w->fs->super->s_state &= ~EXT2_VALID_FS;
		ext2fs_mark_super_dirty(w->fs);
	}
	ext4_busy_free(w);
	ext4_orphan_untrack(w);
	r = -ext4_errno(ext2fs_close_free(&w->fs));
	ls_rwlock_unlock(&w->fs_lock);
	if (r && !ret)
		ret = r;
	if (!w->ro) {
		r = bdi_sync(w->bdi, WB_REASON_UMOUNT);
		if (r && !ret && !ext4_journal_aborted(w))
			ret = r;
	}
	ext4_journal_free(w);
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
