// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Extended attributes through libext2fs's xattr handles (in-inode space
 * first, then an xattr block): set with XATTR_CREATE/XATTR_REPLACE, get,
 * list and remove, with the errors the kernel's ext4 gives (ENODATA,
 * EEXIST, ERANGE, ENOSPC). Namespaces are passed through as named.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "wbfs_i.h"

#define XATTR_NAME_MAX_LEN 255
#define XATTR_VALUE_MAX (64 * 1024)

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

static int xopen_locked(struct wbfs *w, ext2_ino_t ino, struct ext2_xattr_handle **h)
{
	errcode_t err = ext2fs_xattrs_open(w->fs, ino, h);

	if (!err)
		err = ext2fs_xattrs_read(*h);
	if (err && *h)
		ext2fs_xattrs_close(h);
	return -wbfs_errno(err);
}

int xattr_set(struct wbfs *w, ext2_ino_t ino, const char *name, const void *v, size_t len,
	      int flags)
{
	struct ext2_xattr_handle *h = NULL;
	void *old = NULL;
	size_t oldlen;
	errcode_t err;
	int ret;

	if (strlen(name) > XATTR_NAME_MAX_LEN || !*name)
		return -ERANGE;
	if (!xattr_name_ok(name))
		return -EOPNOTSUPP;
	if (len > XATTR_VALUE_MAX)
		return -E2BIG;
	wbfs_lock(w);
	ret = wbfs_meta_room(w, 1);
	if (!ret)
		ret = xopen_locked(w, ino, &h);
	if (ret)
		goto out;
	err = ext2fs_xattr_get(h, name, &old, &oldlen);
	if (!err)
		ext2fs_free_mem(&old);
	if ((flags & XATTR_CREATE) && !err)
		ret = -EEXIST;
	else if ((flags & XATTR_REPLACE) && err == EXT2_ET_EA_KEY_NOT_FOUND)
		ret = -ENODATA;
	if (!ret)
		ret = -wbfs_errno(ext2fs_xattr_set(h, name, v, len));
	err = ext2fs_xattrs_close(&h);
	if (!ret)
		ret = -wbfs_errno(err);
	if (!ret)
		ret = winode_touch_ctime_locked(w, ino);
out:
	wbfs_unlock(w);
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
	wbfs_lock(w);
	ret = xopen_locked(w, ino, &h);
	if (ret)
		goto out;
	ret = -wbfs_errno(ext2fs_xattr_get(h, name, &val, &vlen));
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
	wbfs_unlock(w);
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

	wbfs_lock(w);
	ret = xopen_locked(w, ino, &h);
	if (!ret) {
		ret = -wbfs_errno(ext2fs_xattrs_iterate(h, list_cb, &c));
		ext2fs_xattrs_close(&h);
	}
	wbfs_unlock(w);
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
	wbfs_lock(w);
	ret = xopen_locked(w, ino, &h);
	if (ret)
		goto out;
	err = ext2fs_xattr_get(h, name, &old, &oldlen);
	if (err) {
		ret = -wbfs_errno(err);
		ext2fs_xattrs_close(&h);
		goto out;
	}
	ext2fs_free_mem(&old);
	ret = -wbfs_errno(ext2fs_xattr_remove(h, name));
	err = ext2fs_xattrs_close(&h);
	if (!ret)
		ret = -wbfs_errno(err);
	if (!ret)
		ret = winode_touch_ctime_locked(w, ino);
out:
	wbfs_unlock(w);
	return ret;
}

/* ---- fault injection control (mount option fault_inject) --------------- */

/*
 * On a fault_inject mount, trusted.wbcfs.fault is not stored: it sets and
 * shows the file's injected I/O errors ("none", "read", "write", "rw"),
 * for as long as the inode stays in memory; trusted.wbcfs.fault_meta, on
 * any file, does the same for the filesystem's metadata I/O (the device's
 * own mapping: superblock, bitmaps, inode tables, directories, extent
 * blocks). trusted.wbcfs.fault_rate, on any file, is the per mille (0 to
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
};

static int fault_parse(const char *v, size_t len, unsigned *out)
{
	unsigned i;

	while (len && (v[len - 1] == '\n' || v[len - 1] == '\0'))
		len--;
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
	unsigned rate = 0;
	size_t i;

	while (len && (v[len - 1] == '\n' || v[len - 1] == '\0'))
		len--;
	if (!len || len > 4)
		return -EINVAL;
	for (i = 0; i < len; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -EINVAL;
		rate = rate * 10 + (unsigned)(v[i] - '0');
	}
	return bdi_set_fault_rate(w->bdi, rate);
}

int xattr_fault_set(struct wbfs *w, ext2_ino_t ino, const char *name, const char *v,
		    size_t len)
{
	struct wb_inode *wb;
	unsigned fault;

	if (!strcmp(name, WBFS_FAULT_RATE_XATTR))
		return fault_rate_set(w, v, len);
	if (fault_parse(v, len, &fault))
		return -EINVAL;
	wb = fault_target(w, ino, name);
	if (!wb)
		return -EIO;
	return bdi_inode_set_fault(w->bdi, wb, fault);
}

/* Returns the value's length, or -errno (-ERANGE when @len is too small). */
int xattr_fault_get(struct wbfs *w, ext2_ino_t ino, const char *name, char *buf, size_t len)
{
	struct wb_inode *wb;
	const char *val;
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
	val = fault_names[atomic_load(&wb->fault) & (WB_FAULT_READ | WB_FAULT_WRITE)];
out:
	n = strlen(val);
	if (!len)
		return (int)n;
	if (len < n)
		return -ERANGE;
	memcpy(buf, val, n);
	return (int)n;
}
