// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * FUSE requests the kernel sends and libfuse 3.14 answers ENOSYS (which
 * would switch them off for the whole connection), served from the
 * channel hooks of fuse_io.c:
 *
 * - FUSE_TMPFILE (open(2) with O_TMPFILE): a CREATE without a name. Served
 *   here: ops_tmpfile makes and opens the unnamed inode, the reply
 *   (fuse_entry_out then fuse_open_out, as for CREATE) goes out on the
 *   device directly. If the kernel does not take it, the file is closed
 *   and forgotten again, so nothing leaks.
 *
 * Replies go out through fuse_io_send: on the device, or into the
 * io_uring entry the request came in.
 * - FUSE_STATX (statx(2) asking for more than the basic stats, e.g.
 *   STATX_BTIME): its argument starts with the fields of a GETATTR, so the
 *   request goes on to libfuse as that GETATTR and the getattr handler
 *   answers it; its reply is rewritten here into a fuse_statx_out with
 *   ext4's creation time (i_crtime) as btime. statx then returns exactly
 *   what stat(2) returns, plus the birth time where the inode has room
 *   for i_crtime (as ext4: inodes of 128 bytes have none).
 *
 * The installed <linux/fuse.h> is protocol 7.38: the statx structures
 * (7.39) are defined here.
 */
#include <errno.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fuse_i.h"

#define FEXT_ATTR_VALID 10		/* seconds: fuse_i.h's ATTR_TIMEOUT */
#define FEXT_STATX_BASIC_STATS 0x7ffU	/* STATX_BASIC_STATS */
#define FEXT_STATX_BTIME 0x800U		/* STATX_BTIME */

struct fext_sx_time {
	int64_t tv_sec;
	uint32_t tv_nsec;
	int32_t reserved;
};

struct fext_statx {
	uint32_t mask;
	uint32_t blksize;
	uint64_t attributes;
	uint32_t nlink;
	uint32_t uid;
	uint32_t gid;
	uint16_t mode;
	uint16_t spare0;
	uint64_t ino;
	uint64_t size;
	uint64_t blocks;
	uint64_t attributes_mask;
	struct fext_sx_time atime;
	struct fext_sx_time btime;
	struct fext_sx_time ctime;
	struct fext_sx_time mtime;
	uint32_t rdev_major;
	uint32_t rdev_minor;
	uint32_t dev_major;
	uint32_t dev_minor;
	uint64_t spare2[14];
};

struct fext_statx_in {
	uint32_t getattr_flags;
	uint32_t reserved;
	uint64_t fh;
	uint32_t sx_flags;
	uint32_t sx_mask;
};

struct fext_statx_out {
	uint64_t attr_valid;
	uint32_t attr_valid_nsec;
	uint32_t flags;
	uint64_t spare[2];
	struct fext_statx stat;
};

_Static_assert(sizeof(struct fext_statx) == 256, "fuse_statx is 256 bytes");
_Static_assert(sizeof(struct fext_statx_out) == 288, "fuse_statx_out is 288 bytes");
_Static_assert(sizeof(struct fext_statx_in) == 24, "fuse_statx_in is 24 bytes");
/* a STATX argument starts with a GETATTR argument */
_Static_assert(offsetof(struct fext_statx_in, fh) == offsetof(struct fuse_getattr_in, fh),
	       "fuse_statx_in begins as fuse_getattr_in");

/* ---- FUSE_STATX -------------------------------------------------------- */

/* The creation time of @nodeid, when its inode has room for i_crtime. */
static void fext_btime(struct wbfs *w, uint64_t nodeid, struct fext_btime *bt)
{
	const size_t crtime_end = offsetof(struct ext2_inode_large, i_crtime) + sizeof(uint32_t);
	struct ext2_inode_large in;

	bt->valid = false;
	if (!w || w->destroyed || ops_ctl_owns(nodeid))
		return;
	ext4_lock(w);
	if (!ext4_read_inode(w, ext4_ino(nodeid), &in) &&
	    EXT2_INODE_SIZE(w->fs->super) > EXT2_GOOD_OLD_INODE_SIZE &&
	    (size_t)EXT2_GOOD_OLD_INODE_SIZE + in.i_extra_isize >= crtime_end) {
		ext4_ts_get(&in, TS_CRTIME, &bt->ts);
		bt->valid = true;
	}
	ext4_unlock(w);
}

size_t fext_statx_to_getattr(struct wbfs *w, void *buf, size_t len, struct fext_btime *bt)
{
	struct fuse_in_header *in = buf;
	const size_t glen = sizeof(*in) + sizeof(struct fuse_getattr_in);

	if (len < sizeof(*in) + sizeof(struct fext_statx_in) || in->opcode != FEXT_STATX)
		return 0;
	fext_btime(w, in->nodeid, bt);
	in->opcode = FUSE_GETATTR;
	in->len = (uint32_t)glen;
	return glen;
}

/* The GETATTR reply's fuse_attr_out, copied out of the iovecs. */
static bool fext_gather(const struct iovec *iov, int count, size_t off, void *dst, size_t len)
{
	char *d = dst;
	int i;

	for (i = 0; i < count && len; i++) {
		size_t n;

		if (off >= iov[i].iov_len) {
			off -= iov[i].iov_len;
			continue;
		}
		n = iov[i].iov_len - off;
		if (n > len)
			n = len;
		memcpy(d, (const char *)iov[i].iov_base + off, n);
		d += n;
		len -= n;
		off = 0;
	}
	return len == 0;
}

static void fext_sx_time(struct fext_sx_time *t, uint64_t sec, uint32_t nsec)
{
	t->tv_sec = (int64_t)sec;
	t->tv_nsec = nsec;
}

void fext_attr_to_statx(const struct fuse_attr_out *ao, const struct fext_btime *bt,
			void *sxo_buf)
{
	struct fext_statx_out *sxo = sxo_buf;
	const struct fuse_attr *a = &ao->attr;
	struct fext_statx *sx = &sxo->stat;

	memset(sxo, 0, sizeof(*sxo));
	sxo->attr_valid = ao->attr_valid;
	sxo->attr_valid_nsec = ao->attr_valid_nsec;
	sx->mask = FEXT_STATX_BASIC_STATS;
	sx->blksize = a->blksize;
	sx->nlink = a->nlink;
	sx->uid = a->uid;
	sx->gid = a->gid;
	sx->mode = (uint16_t)a->mode;
	sx->ino = a->ino;
	sx->size = a->size;
	sx->blocks = a->blocks;
	fext_sx_time(&sx->atime, a->atime, a->atimensec);
	fext_sx_time(&sx->mtime, a->mtime, a->mtimensec);
	fext_sx_time(&sx->ctime, a->ctime, a->ctimensec);
	sx->rdev_major = major(a->rdev);
	sx->rdev_minor = minor(a->rdev);
	if (bt && bt->valid) {
		sx->mask |= FEXT_STATX_BTIME;
		fext_sx_time(&sx->btime, (uint64_t)bt->ts.tv_sec, (uint32_t)bt->ts.tv_nsec);
	}
}

ssize_t fext_statx_reply(int fd, const struct iovec *iov, int count, const struct fext_btime *bt)
{
	const struct fuse_out_header *oh = iov[0].iov_base;
	struct fuse_out_header h = *oh;
	struct fext_statx_out sxo;
	struct fuse_attr_out ao;
	struct iovec out[2];
	ssize_t n;

	/* errors, and what the kernel would refuse anyway, pass unchanged */
	if (oh->error || oh->len != sizeof(*oh) + sizeof(ao) ||
	    !fext_gather(iov, count, sizeof(*oh), &ao, sizeof(ao)))
		return fuse_io_send(fd, iov, count);
	fext_attr_to_statx(&ao, bt, &sxo);
	h.len = (uint32_t)(sizeof(h) + sizeof(sxo));
	out[0] = (struct iovec){ &h, sizeof(h) };
	out[1] = (struct iovec){ &sxo, sizeof(sxo) };
	n = fuse_io_send(fd, out, 2);
	return n == (ssize_t)h.len ? (ssize_t)oh->len : n < 0 ? n : 0;
}

/* ---- FUSE_TMPFILE ------------------------------------------------------ */

static void fext_attr(struct fuse_attr *a, const struct stat *st)
{
	memset(a, 0, sizeof(*a));
	a->ino = st->st_ino;
	a->mode = st->st_mode;
	a->nlink = (uint32_t)st->st_nlink;
	a->uid = st->st_uid;
	a->gid = st->st_gid;
	a->rdev = (uint32_t)st->st_rdev;
	a->size = (uint64_t)st->st_size;
	a->blocks = (uint64_t)st->st_blocks;
	a->blksize = (uint32_t)st->st_blksize;
	a->atime = (uint64_t)st->st_atim.tv_sec;
	a->atimensec = (uint32_t)st->st_atim.tv_nsec;
	a->mtime = (uint64_t)st->st_mtim.tv_sec;
	a->mtimensec = (uint32_t)st->st_mtim.tv_nsec;
	a->ctime = (uint64_t)st->st_ctim.tv_sec;
	a->ctimensec = (uint32_t)st->st_ctim.tv_nsec;
}

static int fext_reply_err(int fd, uint64_t unique, int err)
{
	struct fuse_out_header out = {
		.len = sizeof(out),
		.error = err,
		.unique = unique,
	};
	struct iovec iov = { .iov_base = &out, .iov_len = sizeof(out) };

	return fuse_io_send(fd, &iov, 1) == sizeof(out) ? 0 : -errno;
}

bool fext_is_tmpfile(const void *buf, size_t len)
{
	const struct fuse_in_header *in = buf;

	return len >= sizeof(*in) && in->opcode == FEXT_TMPFILE;
}

void fext_tmpfile(struct wbfs *w, int fd, const void *buf, size_t len, bool dont_mask)
{
	const struct fuse_in_header *in = buf;
	const struct fuse_create_in *arg = (const void *)(in + 1);
	struct fuse_file_info fi;
	struct fuse_entry_param e;
	struct fuse_out_header oh;
	struct fuse_entry_out eo;
	struct fuse_open_out oo;
	struct fuse_ctx ctx;
	struct iovec iov[3];
	mode_t mode;
	int ret;

	if (len < sizeof(*in) + sizeof(*arg)) {
		fext_reply_err(fd, in->unique, -EINVAL);
		return;
	}
	if (!w || w->destroyed) {
		fext_reply_err(fd, in->unique, -EIO);
		return;
	}
	memset(&ctx, 0, sizeof(ctx));
	ctx.uid = in->uid;
	ctx.gid = in->gid;
	ctx.pid = (pid_t)in->pid;
	ctx.umask = arg->umask;
	memset(&fi, 0, sizeof(fi));
	fi.flags = (int)arg->flags;
	/* dir_tmpfile applies the umask unless a default ACL is inherited;
	 * without FUSE_DONT_MASK the kernel has applied it already */
	mode = arg->mode;
	ret = ops_tmpfile(w, in->nodeid, mode, &ctx, &e, &fi);
	if (ret) {
		fext_reply_err(fd, in->unique, ret);
		return;
	}
	memset(&eo, 0, sizeof(eo));
	eo.nodeid = e.ino;
	eo.generation = e.generation;
	eo.entry_valid = FEXT_ATTR_VALID;
	eo.attr_valid = FEXT_ATTR_VALID;
	fext_attr(&eo.attr, &e.attr);
	memset(&oo, 0, sizeof(oo));
	oo.fh = fi.fh;
	if (fi.direct_io)
		oo.open_flags |= FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES;
	if (fi.keep_cache)
		oo.open_flags |= FOPEN_KEEP_CACHE;
	if (fi.noflush)
		oo.open_flags |= FOPEN_NOFLUSH;
	oh = (struct fuse_out_header){
		.len = sizeof(oh) + sizeof(eo) + sizeof(oo),
		.unique = in->unique,
	};
	iov[0] = (struct iovec){ &oh, sizeof(oh) };
	iov[1] = (struct iovec){ &eo, sizeof(eo) };
	iov[2] = (struct iovec){ &oo, sizeof(oo) };
	/* not delivered (the request was interrupted and is gone): undo */
	if (fuse_io_send(fd, iov, 3) != (ssize_t)oh.len)
		ops_tmpfile_undo(w, &fi);
}
