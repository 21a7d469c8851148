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

#include "wbfs_i.h"

#define SB_OFFSET 1024

static void wbfs_err(const char *dev, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void wbfs_err(const char *dev, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "wbcfs: %s: ", dev);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

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

void wbfs_lock(struct wbfs *w)
{
	pthread_mutex_lock(&w->fs_lock);
}

void wbfs_refresh_free_locked(struct wbfs *w)
{
	if (!w->fs)
		return;
	pthread_mutex_lock(&w->resv_lock);
	w->free_blocks = (int64_t)ext2fs_free_blocks_count(w->fs->super);
	w->free_inodes = w->fs->super->s_free_inodes_count;
	pthread_mutex_unlock(&w->resv_lock);
}

/* Unlock, refreshing the free counts writers reserve against. */
void wbfs_unlock(struct wbfs *w)
{
	wbfs_refresh_free_locked(w);
	pthread_mutex_unlock(&w->fs_lock);
}

/*
 * Reserve @nr blocks for delayed allocation. Metadata headroom is never
 * handed out; unprivileged writers also leave the root reserve alone.
 * Returns 0 or -ENOSPC.
 */
int wbfs_reserve(struct wbfs *w, long nr, bool privileged)
{
	int64_t avail;
	int ret = 0;

	pthread_mutex_lock(&w->resv_lock);
	avail = w->free_blocks - w->reserved - w->headroom;
	if (!privileged)
		avail -= w->root_reserved;
	if (avail < nr)
		ret = -ENOSPC;
	else
		w->reserved += nr;
	pthread_mutex_unlock(&w->resv_lock);
	return ret;
}

void wbfs_unreserve(struct wbfs *w, long nr)
{
	pthread_mutex_lock(&w->resv_lock);
	w->reserved -= nr;
	pthread_mutex_unlock(&w->resv_lock);
}

/*
 * Room for a metadata change of about @nr blocks (directory block, xattr
 * block, extent blocks)? Reserved data blocks and half the headroom stay
 * untouched, so the flusher can always allocate what writers were promised.
 */
int wbfs_meta_room(struct wbfs *w, long nr)
{
	int64_t avail;

	pthread_mutex_lock(&w->resv_lock);
	avail = w->free_blocks - w->reserved - w->headroom / 2;
	pthread_mutex_unlock(&w->resv_lock);
	return avail >= nr ? 0 : -ENOSPC;
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
	return -wbfs_errno(err);
}

void wbfs_now(struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME, ts);
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
			wbfs_err(dev, "image is in use by another wbcfs");
			close(fd);
			return -EBUSY;
		}
		return 0;
	}
	if (!ro && ioctl(fd, BLKROGET, &bdev_ro) == 0 && bdev_ro) {
		wbfs_err(dev, "device is read-only; mount with -o ro");
		close(fd);
		return -EROFS;
	}
	if (ioctl(fd, BLKGETSIZE64, &w->dev_bytes) < 0)
		w->dev_bytes = 0;
	return 0;
}

static int dev_open(struct wbfs *w, const char *dev, bool ro)
{
	struct stat st;
	int fd, ret;

	if (stat(dev, &st) < 0) {
		wbfs_err(dev, "%s", strerror(errno));
		return -errno;
	}
	if (!S_ISBLK(st.st_mode) && !S_ISREG(st.st_mode)) {
		wbfs_err(dev, "not a block device or regular file");
		return -ENOTBLK;
	}
	w->is_blkdev = S_ISBLK(st.st_mode);
	if (w->is_blkdev) {
		/* a mounted device is claimed exclusively: probe, then open shared,
		 * since the fuseblk mount itself claims it later */
		fd = open(dev, O_RDONLY | O_EXCL | O_CLOEXEC);
		if (fd < 0 && errno == EBUSY) {
			wbfs_err(dev, "device is busy (already mounted?)");
			return -EBUSY;
		}
		if (fd >= 0)
			close(fd);
	}
	fd = open(dev, (ro ? O_RDONLY : O_RDWR) | O_DIRECT | O_CLOEXEC);
	if (fd < 0 && !ro && (errno == EROFS || errno == EACCES)) {
		wbfs_err(dev, "device is read-only (%s); mount with -o ro", strerror(errno));
		return -EROFS;
	}
	if (fd < 0) {
		wbfs_err(dev, "%s", strerror(errno));
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
	n = pread(w->dev_fd, buf, 4096, 0);
	if (n != 4096) {
		wbfs_err(dev, "cannot read the superblock (%s)", n < 0 ? strerror(errno) : "short read");
		goto out;
	}
	sb = (struct ext2_super_block *)((char *)buf + SB_OFFSET);
	if (sb->s_magic != EXT2_SUPER_MAGIC) {
		wbfs_err(dev, "not an ext4 filesystem (bad magic)");
		goto out;
	}
	bsize = 1024U << sb->s_log_block_size;
	blocks = sb->s_blocks_count | ((uint64_t)sb->s_blocks_count_hi << 32);
	if (sb->s_log_block_size > 6 || (w->dev_bytes && blocks * bsize > w->dev_bytes)) {
		wbfs_err(dev, "corrupt superblock: %llu blocks of %u bytes exceed the device (%llu bytes)",
			 (unsigned long long)blocks, bsize, (unsigned long long)w->dev_bytes);
		goto out;
	}
	if (!ro && bsize != 4096) {
		wbfs_err(dev, "block size %u is not supported read-write (4096 only); mount with -o ro", bsize);
		goto out;
	}
	if (!ro && (sb->s_feature_incompat & EXT4_FEATURE_INCOMPAT_MMP)) {
		/* checked here: libext2fs would first sleep through an MMP check */
		wbfs_err(dev, "feature mmp is not supported read-write; mount with -o ro");
		goto out;
	}
	if (sb->s_feature_incompat & EXT3_FEATURE_INCOMPAT_RECOVER) {
		wbfs_err(dev, "filesystem needs journal recovery; run e2fsck first (or mount with -o fsck)");
		goto out;
	}
	if (!fsck_done && !ro && (!(sb->s_state & EXT2_VALID_FS) || (sb->s_state & EXT2_ERROR_FS))) {
		wbfs_err(dev, "filesystem was not cleanly unmounted or has errors; run e2fsck first (or mount with -o fsck)");
		goto out;
	}
	ret = 0;
out:
	free(buf);
	return ret;
}

static int run_fsck(const char *dev)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		execlp("e2fsck", "e2fsck", "-p", dev, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0)
		return -errno;
	if (!WIFEXITED(status) || WEXITSTATUS(status) >= 4) {
		wbfs_err(dev, "e2fsck -p failed (exit %d); run e2fsck by hand",
			 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
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
		wbfs_err(dev, "feature %s is not supported read-write; mount with -o ro", bad);
		return -EINVAL;
	}
	if (sb->s_first_meta_bg && ext2fs_has_feature_meta_bg(sb) && !w->ro) {
		wbfs_err(dev, "feature meta_bg is not supported read-write; mount with -o ro");
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

/* cache_ops: reclaim and the dirty limits ask the flusher for writeback. */
static void wbfs_wakeup_flusher(void *owner, long nr_pages, enum wb_reason why)
{
	struct wbfs *w = owner;

	if (w->bdi)
		bdi_wakeup(w->bdi, nr_pages, why);
}

/*
 * The default cache: a quarter of RAM, but at most half of what the machine
 * has available right now (MemAvailable), so that a second daemon, or one
 * started on a loaded machine, does not fault in memory it cannot have.
 * Never below 64 MiB.
 */
static size_t default_cache_size(void)
{
	size_t size = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE) / 4;
	unsigned long long avail_kb;
	char line[128];
	FILE *f = fopen("/proc/meminfo", "r");

	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "MemAvailable: %llu kB", &avail_kb) == 1) {
			if (avail_kb * 1024 / 2 < size)
				size = avail_kb * 1024 / 2;
			break;
		}
	}
	if (f)
		fclose(f);
	return size < (64u << 20) ? 64u << 20 : size;
}

/* The throttle's mount options, into the live tunables /.wbcfs/ changes. */
static void throttle_setup(struct wbfs *w)
{
	struct throttle_wb *tw = bdi_throttle_wb(w->bdi);

	atomic_store(&w->cache->throttle.mode, (int)w->opts.throttle);
	atomic_store(&w->cache->throttle.max_pause_ms, w->opts.max_pause_ms);
	atomic_store(&tw->min_ratio, w->opts.min_ratio);
	atomic_store(&tw->max_ratio, w->opts.max_ratio);
	atomic_store(&tw->strictlimit, w->opts.strictlimit);
}

/*
 * The zones: as the options say; by default one per NUMA node that has
 * memory, each bound to its node, or a single zone on a machine with one
 * node (zones only matter where memory is not uniform; zones=64M:960M
 * imitates a small DMA32 beside a large Normal zone).
 */
static void zones_config(struct wbfs *w, struct cache_config *cc, size_t *bytes, int *node)
{
	char line[512] = "";
	FILE *f;
	int n;
	unsigned i;

	cc->nr_zones = w->opts.nr_zones ? w->opts.nr_zones : 1;
	if (w->opts.nr_zones && w->opts.zone_bytes[0]) {
		for (i = 0; i < w->opts.nr_zones; i++)
			bytes[i] = (size_t)w->opts.zone_bytes[i];
		cc->zone_bytes = bytes;
	}
	if (w->opts.nr_zones)
		return;
	f = fopen("/sys/devices/system/node/has_memory", "r");
	if (!f)
		return;
	if (!fgets(line, sizeof(line), f))
		line[0] = 0;
	fclose(f);
	n = options_parse_nodelist(line, node, OPTIONS_ZONES_MAX);
	if (n > 1 && cc->size_bytes / (size_t)n >= OPTIONS_ZONE_MIN_BYTES) {
		cc->nr_zones = (unsigned)n;
		cc->zone_node = node;
	}
}

static int cache_and_bdi(struct wbfs *w, const char *dev)
{
	size_t zone_bytes[OPTIONS_ZONES_MAX];
	int zone_node[OPTIONS_ZONES_MAX];
	static const struct cache_ops cops = {
		.wakeup_flusher = wbfs_wakeup_flusher,
	};
	struct cache_config cc = {0};
	struct bdi_config bc = {0};
	char name[64];
	struct stat st;
	int ret;

	cc.size_bytes = w->opts.cache_size;
	if (!cc.size_bytes)
		cc.size_bytes = default_cache_size();
	zones_config(w, &cc, zone_bytes, zone_node);
	cc.fair_zone_alloc = w->opts.fair_zone_alloc;
	cc.zone_dirty = w->opts.zone_dirty;
	cc.tunables = w->opts.dirty;
	cc.ops = &cops;
	cc.owner = w;
	cc.start_kswapd = true;
	ret = cache_create(&w->cache, &cc);
	if (ret) {
		wbfs_err(dev, "cannot create a cache of %zu bytes in %u zones: %s", cc.size_bytes,
			 cc.nr_zones, strerror(-ret));
		return ret;
	}
	if (fstat(w->dev_fd, &st) == 0 && w->is_blkdev)
		snprintf(name, sizeof(name), "%u:%u", major(st.st_rdev), minor(st.st_rdev));
	else
		snprintf(name, sizeof(name), "%s", dev);
	bc.fd = w->dev_fd;
	bc.name = name;
	bc.engine = w->opts.io_engine;
	bc.queue_depth = w->opts.queue_depth;
	bc.max_io_kb = w->opts.max_io_kb;
	bc.nr_flushers = w->opts.flushers;
	bc.cache = w->cache;
	bc.ops = &wbfs_bdi_ops;
	bc.owner = w;
	bc.fault_inject = w->opts.fault_inject;
	ret = bdi_create(&w->bdi, &bc);
	if (ret) {
		wbfs_err(dev, "cannot start the flusher: %s", strerror(-ret));
		cache_destroy(w->cache);
		return ret;
	}
	throttle_setup(w);
	mapping_init(&w->meta_map, w->cache, &bdi_mapping_ops, &w->meta_wb);
	bdi_inode_init(w->bdi, &w->meta_wb, &w->meta_map, true);
	bdi_set_meta(w->bdi, &w->meta_wb);
	return 0;
}

static void teardown_cache(struct wbfs *w)
{
	mapping_truncate(&w->meta_map, 0, UINT64_MAX);
	bdi_destroy(w->bdi);
	mapping_destroy(&w->meta_map);
	cache_destroy(w->cache);
}

/* Mark the filesystem in use (not clean) on disk before serving anything. */
static int mark_mounted(struct wbfs *w)
{
	struct ext2_super_block *sb = w->fs->super;

	sb->s_state &= ~EXT2_VALID_FS;
	sb->s_mnt_count++;
	sb->s_mtime = (uint32_t)time(NULL);
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

/* libext2fs over the cache: open, check features, read the bitmaps. */
static int fs_load(struct wbfs *w, const char *dev)
{
	int flags = EXT2_FLAG_64BITS | (w->ro ? 0 : EXT2_FLAG_RW);
	errcode_t err;
	int ret;

	wbfs_iomgr_set(w);
	err = ext2fs_open2(dev, NULL, flags, 0, 0, &wbfs_io_manager, &w->fs);
	if (err) {
		wbfs_err(dev, "cannot open the filesystem: %s", error_message(err));
		return -EINVAL;
	}
	ret = check_features(w, dev);
	if (ret)
		goto out_fs;
	err = ext2fs_read_bitmaps(w->fs);
	if (err) {
		wbfs_err(dev, "cannot read the bitmaps: %s", error_message(err));
		ret = -EIO;
		goto out_fs;
	}
	init_space(w);
	return 0;
out_fs:
	/* anything libext2fs writes here lands in the cache and is dropped */
	ext2fs_close_free(&w->fs);
	return ret;
}

static int wbfs_init_locks(struct wbfs *w)
{
	pthread_mutex_init(&w->fs_lock, NULL);
	pthread_mutex_init(&w->resv_lock, NULL);
	pthread_mutex_init(&w->itable_lock, NULL);
	pthread_cond_init(&w->itable_cond, NULL);
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
	int ret;

	if (!w->fs->super->s_last_orphan)
		return 0;
	wbfs_lock(w);
	ret = wbfs_orphan_cleanup(w);
	wbfs_unlock(w);
	if (ret < 0) {
		wbfs_err(dev, "cannot process the orphan list: %s; run e2fsck",
			 strerror(-ret));
		return ret;
	}
	fprintf(stderr, "wbcfs: %s: %d orphan inode%s deleted\n", dev, ret, ret == 1 ? "" : "s");
	return bdi_sync(w->bdi, WB_REASON_SYNC);
}

int wbfs_open(struct wbfs *w, const char *dev, const struct wbcfs_options *o)
{
	int ret;

	w->opts = *o;
	w->ro = o->ro;
	w->dev_path = dev;
	ret = wbfs_init_locks(w);
	if (!ret && o->fsck && !o->ro)
		ret = run_fsck(dev);
	if (!ret)
		ret = dev_open(w, dev, w->ro);
	if (ret)
		return ret;
	ret = sb_check(w, dev, w->ro, o->fsck);
	if (!ret)
		ret = cache_and_bdi(w, dev);
	if (ret)
		goto out_close;
	ret = fs_load(w, dev);
	if (ret)
		goto out_cache;
	if (!winode_get(w, EXT2_ROOT_INO, false)) {	/* kept until unmount */
		wbfs_err(dev, "cannot read the root directory");
		ret = -EIO;
		goto out_fs;
	}
	if (!w->ro) {
		ret = mark_mounted(w);
		if (ret) {
			wbfs_err(dev, "cannot mark the filesystem in use: %s", strerror(-ret));
			goto out_inodes;
		}
		ret = orphan_cleanup(w, dev);
		if (ret)
			goto out_inodes;
	} else if (w->fs->super->s_last_orphan) {
		wbfs_err(dev, "read-only: deleted inodes on the orphan list are not freed");
	}
	/* only once everything is known to be good: bad input fails fast */
	cache_prefault(w->cache, w->opts.prefault_bytes);
	return 0;
out_inodes:
	winode_release_all(w);
out_fs:
	ext2fs_close_free(&w->fs);
out_cache:
	teardown_cache(w);
out_close:
	close(w->dev_fd);
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
int wbfs_close(struct wbfs *w)
{
	bool meta_ok = true;
	int ret = 0, r;

	if (!w->ro) {
		ret = bdi_sync(w->bdi, WB_REASON_UMOUNT);
		if (ret)
			fprintf(stderr, "wbcfs: %s: writeback error at unmount: %s; retrying"
				" each file once more\n", w->dev_path, strerror(-ret));
		ret = 0;	/* what is finally lost is counted in lost_pages */
	}
	winode_release_all(w);
	if (!w->ro) {
		r = bdi_sync(w->bdi, WB_REASON_UMOUNT);
		meta_ok = r == 0;
		if (r) {
			fprintf(stderr, "wbcfs: %s: metadata could not be written at unmount: %s;"
				" the filesystem is left marked not clean (run e2fsck)\n",
				w->dev_path, strerror(-r));
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
		ext2fs_mark_super_dirty(w->fs);
	}
	r = -wbfs_errno(ext2fs_close_free(&w->fs));
	pthread_mutex_unlock(&w->fs_lock);
	if (r && !ret)
		ret = r;
	if (!w->ro) {
		r = bdi_sync(w->bdi, WB_REASON_UMOUNT);
		if (r && !ret)
			ret = r;
	}
	teardown_cache(w);
	close(w->dev_fd);
	if (atomic_load(&w->lost_pages)) {
		fprintf(stderr, "wbcfs: %s: %ld dirty pages could not be written and are lost\n",
			w->dev_path, atomic_load(&w->lost_pages));
		if (!ret)
			ret = -EIO;
	}
	return ret;
}
