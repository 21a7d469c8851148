// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Extended attributes through libext2fs's xattr handles (in-inode space
 * first, then an xattr block): set with XATTR_CREATE/XATTR_REPLACE, get,
 * list and remove, with the errors the kernel's ext4 gives (ENODATA,
 * EEXIST, ERANGE, ENOSPC). Namespaces are passed through as named.
 *
 * POSIX ACLs (system.posix_acl_access, system.posix_acl_default) come from
 * the kernel in the VFS format; libext2fs stores them in ext4's own ACL
 * format and gives them back converted. The kernel enforces them
 * (FUSE_CAP_POSIX_ACL) and leaves their ties to the mode to us, as ext4
 * keeps them: setting an access ACL sets the mode's permission bits from
 * it (and stores nothing when the mode says it all), chmod rewrites the
 * ACL's user::, mask:: and other::, and new inodes inherit their
 * directory's default ACL (acl.c has the rules).
 *
 * A write removes security.capability (xattr_kill_caps), as the kernel's
 * file_remove_privs does for ext4; the kernel does it for the other
 * changes of a file's contents itself.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "ext4_i.h"

#define XATTR_NAME_MAX_LEN 255
#define XATTR_VALUE_MAX (64 * 1024)
#define XATTR_NAME_CAPS "security.capability"

/* Namespaces the kernel's ext4 stores; anything else is EOPNOTSUPP. */
static bool xattr_name_ok(const char *name)
{
	static const char *const prefixes[] = { "user.", "trusted.", "security.", NULL };
	static const char *const names[] = {
		"system.posix_acl_access", "system.posix_acl_default", NULL,
	};
	const char *const *p;

	for (p = prefixes; *p; p++)
		if (!strncmp(name, *p, strlen(*p)) && name[strlen(*p)])
			return true;
	for (p = names; *p; p++)
		if (!strcmp(name, *p))
			return true;
	return false;
}

/*
 * @name was set (@state WINODE_CAPS_SET) or removed: if it is
 * security.capability, the next write of the inode in memory knows it
 * without looking. Under fs_lock, as xattr_kill_caps's lookup, so the
 * two cannot undo each other's answer. Context: fs_lock.
 */
static void caps_note_locked(struct wbfs *w, ext2_ino_t ino, const char *name,
			     enum winode_caps state)
{
	struct winode *wi;

	lock_assert_held(&w->fs_lock);

	if (strcmp(name, XATTR_NAME_CAPS))
		return;
	wi = winode_find(w, ino);
	if (wi)
		atomic_store(&wi->caps, state);
}

static int xopen_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_xattr_handle **h)
{
	errcode_t err = ext2fs_xattrs_open(w->fs, ino, h);

	lock_assert_held(&w->fs_lock);

	if (!err)
		err = ext2fs_xattrs_read(*h);
	if (err && *h)
		ext2fs_xattrs_close(h);
	return -ext4_errno(err);
}

static bool acl_name(const char *name)
{
	return !strcmp(name, ACL_XATTR_ACCESS) || !strcmp(name, ACL_XATTR_DEFAULT);
}

/*
 * Store (@v) or remove (@v NULL) the ACL @name of @ino; removing one that
 * is not there succeeds. Context: holds fs_lock.
 */
static int acl_store_locked(struct wbfs *w, ext2_ino_t ino, const char *name, const void *v,
			    size_t len)
{
	struct ext2_xattr_handle *h = NULL;
	errcode_t err;
	int ret = xopen_locked(w, ino, &h);

	lock_assert_held(&w->fs_lock);

	if (ret)
		return ret;
	if (v) {
		err = ext2fs_xattr_set(h, name, v, len);
	} else {
		err = ext2fs_xattr_remove(h, name);
		if (err == EXT2_ET_EA_KEY_NOT_FOUND)
			err = 0;
	}
	ret = -ext4_errno(err);
	err = ext2fs_xattrs_close(&h);
	return ret ? ret : -ext4_errno(err);
}

/* The ACL @name of @ino in the VFS format (free with ext2fs_free_mem), or
 * -ENODATA. Context: holds fs_lock. */
static int acl_load_locked(struct wbfs *w, ext2_ino_t ino, const char *name, void **v,
			   size_t *len)
{
	struct ext2_xattr_handle *h = NULL;
	errcode_t err;
	int ret = xopen_locked(w, ino, &h);

	lock_assert_held(&w->fs_lock);

	if (ret)
		return ret;
	*v = NULL;
	err = ext2fs_xattr_get(h, name, v, len);
	ext2fs_xattrs_close(&h);
	return err == EXT2_ET_EA_KEY_NOT_FOUND ? -ENODATA : -ext4_errno(err);
}

/*
 * setfacl: an access ACL sets the permission bits (user::, mask:: or
 * group::, other::) and is stored only when the mode cannot say it all
 * (posix_acl_update_mode); a caller outside the file's group without
 * privilege loses set-group-ID. A default ACL is for directories only.
 */
static int acl_set(struct wbfs *w, ext2_ino_t ino, const char *name, const void *v,
		   size_t len, const struct wbfs_cred *cred)
{
	struct ext2_inode_large in;
	struct timespec now;
	struct winode *wi;
	bool access = !strcmp(name, ACL_XATTR_ACCESS);
	mode_t mode;
	int ret, equiv;

	if (acl_check(v, len) < 0)
		return -EINVAL;
	ext4_lock(w);
	ret = ext4_meta_room(w, 1);
	if (!ret)
		ret = ext4_read_inode(w, ino, &in);
	if (ret)
		goto out;
	if (!access && !LINUX_S_ISDIR(in.i_mode)) {
		ret = -EACCES;
		goto out;
	}
	mode = in.i_mode;
	equiv = access ? acl_equiv_mode(v, len, &mode) : 1;
	if (equiv < 0) {
		ret = equiv;
		goto out;
	}
	ret = acl_store_locked(w, ino, name, equiv ? v : NULL, len);
	if (ret)
		goto out;
	ret = ext4_read_inode(w, ino, &in);
	if (ret)
		goto out;
	if (access && !ext4_cred_in_group(cred, inode_gid(in)))
		mode &= ~(mode_t)S_ISGID;
	in.i_mode = (uint16_t)mode;
	ext4_now(&now);
	ext4_ts_set(&in, TS_CTIME, &now);
	winode_fold_attrs_locked(w, ino, &in);
	ret = ext4_write_inode(w, ino, &in);
	wi = winode_find(w, ino);
	if (wi)
		wi->has_priv = (in.i_mode & (S_ISUID | S_ISGID)) != 0;
out:
	ext4_unlock(w);
	return ret;
}

/*
 * chmod to @mode: the access ACL's user::, mask:: (group:: without one)
 * and other:: follow it (posix_acl_chmod). Context: holds fs_lock, after
 * the inode with its new mode was written.
 */
int xattr_acl_chmod_locked(struct wbfs *w, ext2_ino_t ino, mode_t mode)
{
	void *v;
	size_t len;
	int ret = acl_load_locked(w, ino, ACL_XATTR_ACCESS, &v, &len);

	lock_assert_held(&w->fs_lock);

	if (ret == -ENODATA)
		return 0;
	if (ret)
		return ret;
	ret = acl_chmod(v, len, mode);
	if (!ret)
		ret = acl_store_locked(w, ino, ACL_XATTR_ACCESS, v, len);
	ext2fs_free_mem(&v);
	return ret;
}

/*
 * A new inode of *@mode in @dir: with a default ACL there, it takes the
 * ACL's bits (and the umask does not apply); a directory also keeps the
 * default ACL as its own. Without one, @umask applies. Symlinks are
 * always 0777 with no ACL. Fills @ai for xattr_acl_inherit_store_locked.
 * Context: holds fs_lock.
 */
int xattr_acl_inherit_locked(struct wbfs *w, ext2_ino_t dir, mode_t *mode, mode_t umask,
			     struct acl_inherit *ai)
{
	size_t len;
	void *v;
	int ret;

	lock_assert_held(&w->fs_lock);

	memset(ai, 0, sizeof(*ai));
	if (S_ISLNK(*mode))
		return 0;
	ret = acl_load_locked(w, dir, ACL_XATTR_DEFAULT, &v, &len);
	if (ret == -ENODATA) {
		*mode &= ~(umask & 0777);
		return 0;
	}
	if (ret)
		return ret;
	ai->access = malloc(len);
	if (!ai->access) {
		ext2fs_free_mem(&v);
		return -ENOMEM;
	}
	memcpy(ai->access, v, len);
	ai->len = len;
	ret = acl_create_masq(ai->access, len, mode);
	if (ret <= 0) {
		free(ai->access);
		ai->access = NULL;
	}
	if (ret < 0) {
		ext2fs_free_mem(&v);
		return -EIO;
	}
	if (S_ISDIR(*mode)) {
		ai->def = malloc(len);
		if (!ai->def) {
			xattr_acl_inherit_done(ai);
			ext2fs_free_mem(&v);
			return -ENOMEM;
		}
		memcpy(ai->def, v, len);
	}
	ext2fs_free_mem(&v);
	return 0;
}

/* Store what xattr_acl_inherit_locked found on the new inode @ino, and
 * free it. Context: holds fs_lock. */
int xattr_acl_inherit_store_locked(struct wbfs *w, ext2_ino_t ino, struct acl_inherit *ai)
{
	int ret = 0;

	lock_assert_held(&w->fs_lock);

	if (ai->def)
		ret = acl_store_locked(w, ino, ACL_XATTR_DEFAULT, ai->def, ai->len);
	if (!ret && ai->access)
		ret = acl_store_locked(w, ino, ACL_XATTR_ACCESS, ai->access, ai->len);
	xattr_acl_inherit_done(ai);
	return ret;
}

void xattr_acl_inherit_done(struct acl_inherit *ai)
{
	free(ai->def);
	free(ai->access);
	ai->def = ai->access = NULL;
}

/* The inode's xattr block, or 0. Context: fs_lock. */
static blk64_t xattr_block_locked(struct wbfs *w, ext2_ino_t ino)
{
	struct ext2_inode_large in;

	lock_assert_held(&w->fs_lock);

	if (ext4_read_inode(w, ino, &in))
		return 0;
	return ext2fs_file_acl_block(w->fs, (struct ext2_inode *)&in);
}

/*
 * The set just made gave the inode an xattr block it had not, and the
 * user may not take a block (@room): put @name back as it was (@old,
 * @oldlen; absent when @had is false), which fits in the inode again and
 * frees the block. Returns -ENOSPC, or the error that kept it from
 * undoing. Context: fs_lock.
 */
static int xattr_undo_block_locked(struct wbfs *w, ext2_ino_t ino, const char *name,
				   const void *old, size_t oldlen, bool had)
{
	struct ext2_xattr_handle *h = NULL;
	errcode_t err;
	int ret = xopen_locked(w, ino, &h);

	lock_assert_held(&w->fs_lock);

	if (ret)
		return ret;
	err = had ? ext2fs_xattr_set(h, name, old, oldlen) : ext2fs_xattr_remove(h, name);
	ret = -ext4_errno(ext2fs_xattrs_close(&h));
	if (err)
		ret = -ext4_errno(err);
	return ret ? ret : -ENOSPC;
}

/*
 * Set @name. A value that fits in the inode needs no block, as in ext4;
 * one that takes a new xattr block is an allocation by the user
 * (@privileged: may use the root reserve), refused with ENOSPC once
 * writers have been refused. libext2fs decides where the value goes, so
 * a block it took without room is given back by undoing the set.
 */
int xattr_set(struct wbfs *w, ext2_ino_t ino, const char *name, const void *v, size_t len,
	      int flags, const struct wbfs_cred *cred, bool privileged)
{
	struct ext2_xattr_handle *h = NULL;
	void *old = NULL;
	size_t oldlen = 0;
	bool had, block_room;
	blk64_t blk_before;
	errcode_t err;
	int ret;

	if (strlen(name) > XATTR_NAME_MAX_LEN || !*name)
		return -ERANGE;
	if (!xattr_name_ok(name))
		return -EOPNOTSUPP;
	if (len > XATTR_VALUE_MAX)
		return -E2BIG;
	if (acl_name(name))
		return w->posix_acl ? acl_set(w, ino, name, v, len, cred) : -EOPNOTSUPP;
	ext4_lock(w);
	ret = ext4_meta_room(w, 1);
	if (!ret)
		ret = xopen_locked(w, ino, &h);
	if (ret)
		goto out;
	blk_before = xattr_block_locked(w, ino);
	block_room = !ext4_claim_room(w, 1, privileged ? WBFS_ROOM_PRIV : 0);
	err = ext2fs_xattr_get(h, name, &old, &oldlen);
	had = !err;
	if ((flags & XATTR_CREATE) && !err)
		ret = -EEXIST;
	else if ((flags & XATTR_REPLACE) && err == EXT2_ET_EA_KEY_NOT_FOUND)
		ret = -ENODATA;
	if (!ret)
		ret = -ext4_errno(ext2fs_xattr_set(h, name, v, len));
	err = ext2fs_xattrs_close(&h);
	if (!ret)
		ret = -ext4_errno(err);
	if (!ret && !block_room && !blk_before && xattr_block_locked(w, ino))
		ret = xattr_undo_block_locked(w, ino, name, old, oldlen, had);
	if (!ret)
		ret = winode_touch_ctime_locked(w, ino);
	if (!ret)
		caps_note_locked(w, ino, name, WINODE_CAPS_SET);
out:
	if (old)
		ext2fs_free_mem(&old);
	ext4_unlock(w);
	return ret;
}

int xattr_get(struct wbfs *w, ext2_ino_t ino, const char *name, void *buf, size_t len)
{
	struct ext2_xattr_handle *h = NULL;
	void *val = NULL;
	size_t vlen = 0;
	int ret;

	if (!xattr_name_ok(name))
		return -EOPNOTSUPP;
	ext4_lock(w);
	ret = xopen_locked(w, ino, &h);
	if (ret)
		goto out;
	ret = -ext4_errno(ext2fs_xattr_get(h, name, &val, &vlen));
	ext2fs_xattrs_close(&h);
	if (ret)
		goto out;
	if (len && vlen > len)
		ret = -ERANGE;
	else if (len)
		memcpy(buf, val, vlen);
	if (!ret)
		ret = (int)vlen;
	ext2fs_free_mem(&val);
out:
	ext4_unlock(w);
	return ret;
}

struct list_ctx {
	char *buf;
	size_t len, used;
};

static int list_cb(char *name, char *value, size_t value_len, void *data)
{
	struct list_ctx *c = data;
	size_t n = strlen(name) + 1;

	if (c->len && c->used + n <= c->len)
		memcpy(c->buf + c->used, name, n);
	c->used += n;
	return 0;
}

int xattr_list(struct wbfs *w, ext2_ino_t ino, char *buf, size_t len)
{
	struct ext2_xattr_handle *h = NULL;
	struct list_ctx c = { buf, len, 0 };
	int ret;

	ext4_lock(w);
	ret = xopen_locked(w, ino, &h);
	if (!ret) {
		ret = -ext4_errno(ext2fs_xattrs_iterate(h, list_cb, &c));
		ext2fs_xattrs_close(&h);
	}
	ext4_unlock(w);
	if (ret)
		return ret;
	if (len && c.used > len)
		return -ERANGE;
	return (int)c.used;
}

int xattr_remove(struct wbfs *w, ext2_ino_t ino, const char *name)
{
	struct ext2_xattr_handle *h = NULL;
	void *old = NULL;
	size_t oldlen;
	errcode_t err;
	int ret;

	if (!xattr_name_ok(name))
		return -EOPNOTSUPP;
	ext4_lock(w);
	ret = xopen_locked(w, ino, &h);
	if (ret)
		goto out;
	err = ext2fs_xattr_get(h, name, &old, &oldlen);
	if (err) {
		ret = -ext4_errno(err);
		/* ext4: removing an ACL that is not there succeeds */
		if (err == EXT2_ET_EA_KEY_NOT_FOUND && acl_name(name))
			ret = 0;
		ext2fs_xattrs_close(&h);
		goto out;
	}
	ext2fs_free_mem(&old);
	ret = -ext4_errno(ext2fs_xattr_remove(h, name));
	err = ext2fs_xattrs_close(&h);
	if (!ret)
		ret = -ext4_errno(err);
	if (!ret)
		ret = winode_touch_ctime_locked(w, ino);
	if (!ret)
		caps_note_locked(w, ino, name, WINODE_CAPS_NONE);
out:
	ext4_unlock(w);
	return ret;
}

/*
 * A write drops the file's capabilities (security.capability), whoever
 * writes, as the kernel's ext4 does (file_remove_privs: the attribute
 * being there is enough, cap_inode_need_killpriv): a changed binary must
 * not keep them. Before truncate, chown, fallocate and copy_file_range
 * the kernel removes it itself (setattr_prepare, file_modified), but a
 * direct_io WRITE reaches us untouched. @wi->caps keeps the answer, so
 * only an inode's first write in memory looks for the attribute. Returns
 * 0 or -errno; the removal is a metadata change like any removexattr,
 * and stamps ctime. Context: a WRITE's worker before it writes; takes
 * fs_lock.
 */
int xattr_kill_caps(struct wbfs *w, struct winode *wi)
{
	struct ext2_xattr_handle *h = NULL;
	void *old = NULL;
	size_t oldlen;
	errcode_t err;
	int ret;

	if (atomic_load(&wi->caps) == WINODE_CAPS_NONE)
		return 0;
	ext4_lock(w);
	ret = xopen_locked(w, wi->ino, &h);
	if (ret)
		goto out;
	err = ext2fs_xattr_get(h, XATTR_NAME_CAPS, &old, &oldlen);
	if (err == EXT2_ET_EA_KEY_NOT_FOUND) {
		ext2fs_xattrs_close(&h);
		goto none;
	}
	if (err) {
		ext2fs_xattrs_close(&h);
		ret = -ext4_errno(err);
		goto out;
	}
	ext2fs_free_mem(&old);
	ret = -ext4_errno(ext2fs_xattr_remove(h, XATTR_NAME_CAPS));
	err = ext2fs_xattrs_close(&h);
	if (!ret)
		ret = -ext4_errno(err);
	if (!ret)
		ret = winode_touch_ctime_locked(w, wi->ino);
	if (ret)
		goto out;
none:
	atomic_store(&wi->caps, WINODE_CAPS_NONE);
out:
	ext4_unlock(w);
	return ret;
}

/* ---- fault injection control (mount option fault_inject) --------------- */

/*
 * On a fault_inject mount, trusted.wbcfs.fault is not stored: it sets and
 * shows the file's injected I/O errors ("none", "read", "write", "rw"),
 * for as long as the inode stays in memory; trusted.wbcfs.fault_meta, on
 * any file, does the same for the filesystem's metadata I/O (the device's
 * own mapping: superblock, bitmaps, inode tables, directories, extent
 * blocks, the journal), and with "flush" ("flush", "write+flush", ...)
 * fails every flush of the device's cache too: a device that takes
 * writes but cannot make them durable, so that no commit completes;
 * "flush:N" lets N more flushes succeed first (the first of a commit's
 * two, say). Reading it back gives the name without the count.
 * trusted.wbcfs.fault_rate, on any file, is the per mille (0 to
 * 1000) of all device writes, data and metadata, that fail at random.
 * On other mounts they are ordinary attributes with no effect.
 */
bool xattr_is_fault(struct wbfs *w, const char *name)
{
	return w->opts.fault_inject &&
	       (!strcmp(name, WBFS_FAULT_XATTR) || !strcmp(name, WBFS_FAULT_META_XATTR) ||
		!strcmp(name, WBFS_FAULT_RATE_XATTR));
}

/* The wb_inode whose faults @name controls. */
static struct wb_inode *fault_target(struct wbfs *w, ext2_ino_t ino, const char *name)
{
	struct winode *wi;

	if (!strcmp(name, WBFS_FAULT_META_XATTR))
		return &w->meta_wb;
	wi = winode_get(w, ino, false);
	return wi ? &wi->wb : NULL;
}

static const char *const fault_names[] = {
	[0] = "none",
	[WB_FAULT_READ] = "read",
	[WB_FAULT_WRITE] = "write",
	[WB_FAULT_READ | WB_FAULT_WRITE] = "rw",
	[WB_FAULT_FLUSH] = "flush",
	[WB_FAULT_READ | WB_FAULT_FLUSH] = "read+flush",
	[WB_FAULT_WRITE | WB_FAULT_FLUSH] = "write+flush",
	[WB_FAULT_READ | WB_FAULT_WRITE | WB_FAULT_FLUSH] = "rw+flush",
};

/* A value's length without the trailing newline or NULs setfattr may add. */
static size_t fault_value_len(const char *v, size_t len)
{
	while (len && (v[len - 1] == '\n' || v[len - 1] == '\0'))
		len--;
	return len;
}

/* @len decimal digits, at most @max of them, into *@out. */
static int fault_digits(const char *v, size_t len, size_t max, unsigned *out)
{
	size_t i;

	if (!len || len > max)
		return -EINVAL;
	*out = 0;
	for (i = 0; i < len; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -EINVAL;
		*out = *out * 10 + (unsigned)(v[i] - '0');
	}
	return 0;
}

/* "NAME" or "NAME:N" (N flushes before the flush fault; *@after, else 0). */
static int fault_parse(const char *v, size_t len, unsigned *out, int *after)
{
	const char *colon;
	unsigned i, n = 0;

	len = fault_value_len(v, len);
	colon = memchr(v, ':', len);
	if (colon) {
		size_t k = (size_t)(colon - v) + 1;

		if (fault_digits(v + k, len - k, 6, &n))
			return -EINVAL;
		len = (size_t)(colon - v);
	}
	*after = (int)n;
	for (i = 0; i < sizeof(fault_names) / sizeof(fault_names[0]); i++) {
		if (strlen(fault_names[i]) == len && !memcmp(v, fault_names[i], len)) {
			*out = i;
			return 0;
		}
	}
	return -EINVAL;
}

/* "0" to "1000": the per mille of device writes that fail. */
static int fault_rate_set(struct wbfs *w, const char *v, size_t len)
{
	unsigned rate;

	if (fault_digits(v, fault_value_len(v, len), 4, &rate))
		return -EINVAL;
	return bdi_set_fault_rate(w->bdi, rate);
}

int xattr_fault_set(struct wbfs *w, ext2_ino_t ino, const char *name, const char *v,
		    size_t len)
{
	struct wb_inode *wb;
	unsigned fault;
	int ret, after;

	if (!strcmp(name, WBFS_FAULT_RATE_XATTR))
		return fault_rate_set(w, v, len);
	if (fault_parse(v, len, &fault, &after))
		return -EINVAL;
	/* a flush is the device's, not a file's; a count is a flush's */
	if ((fault & WB_FAULT_FLUSH) ? strcmp(name, WBFS_FAULT_META_XATTR) != 0 : after != 0)
		return -EINVAL;
	wb = fault_target(w, ino, name);
	if (!wb)
		return -EIO;
	ret = bdi_inode_set_fault(w->bdi, wb, fault);
	if (!ret && wb == &w->meta_wb)
		ret = bdi_set_fault_flush(w->bdi, (fault & WB_FAULT_FLUSH) ? after : -1);
	return ret;
}

/* Returns the value's length, or -errno (-ERANGE when @len is too small). */
int xattr_fault_get(struct wbfs *w, ext2_ino_t ino, const char *name, char *buf, size_t len)
{
	struct wb_inode *wb;
	const char *val;
	unsigned fault;
	char rate[16];
	size_t n;

	if (!strcmp(name, WBFS_FAULT_RATE_XATTR)) {
		snprintf(rate, sizeof(rate), "%u", bdi_fault_rate(w->bdi));
		val = rate;
		goto out;
	}
	wb = fault_target(w, ino, name);
	if (!wb)
		return -EIO;
	fault = atomic_load(&wb->fault) & (WB_FAULT_READ | WB_FAULT_WRITE);
	if (wb == &w->meta_wb && bdi_flush_faulted(w->bdi))
		fault |= WB_FAULT_FLUSH;
	val = fault_names[fault];
out:
	n = strlen(val);
	if (!len)
		return (int)n;
	if (len < n)
		return -ERANGE;
	memcpy(buf, val, n);
	return (int)n;
}
