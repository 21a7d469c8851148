/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * POSIX ACLs in the VFS xattr format (the one FUSE passes and libext2fs
 * converts to and from ext4's on-disk format): checks, and the mode <-> ACL
 * rules of the kernel's ext4 (posix_acl_equiv_mode, posix_acl_chmod,
 * posix_acl_create). Pure functions on buffers; storing them is xattr.c's.
 */
#ifndef WBCFS_EXT4_ACL_H
#define WBCFS_EXT4_ACL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The caller of a request, for the set-group-ID rules. */
struct wbfs_cred {
	uid_t uid;		/* fsuid; 0 is privileged (CAP_FSETID) */
	gid_t gid;		/* fsgid */
	int ngroups;		/* supplementary groups; -1: unknown */
	gid_t groups[256];
};

/** May @c keep set-group-ID on a file of group @gid: a member, or privileged. */
bool ext4_cred_in_group(const struct wbfs_cred *c, gid_t gid);

/**
 * The mode a write, a truncation at open or an fallocate by @c leaves on a
 * regular file of @mode and group @gid: without privilege, set-user-ID
 * goes, and set-group-ID when group-executable or when @c is not in the
 * group (should_remove_suid, setattr_should_drop_sgid).
 */
mode_t ext4_cred_kill_priv(const struct wbfs_cred *c, mode_t mode, gid_t gid);

/* What a new inode inherits from its directory's default ACL. */
struct acl_inherit {
	void *def;		/* a directory's default ACL, or NULL */
	void *access;		/* its access ACL, or NULL (the mode says it all) */
	size_t len;		/* bytes of each */
};

#define ACL_XATTR_ACCESS "system.posix_acl_access"
#define ACL_XATTR_DEFAULT "system.posix_acl_default"

/** Entries of a well-formed ACL @v of @len bytes, or -EINVAL. */
int acl_check(const void *v, size_t len);
/**
 * The permission bits (0777) @acl gives through user::, mask:: (group::
 * without a mask) and other::, merged into *@mode. Returns 0 when the ACL
 * says nothing the mode does not (it need not be stored), 1 when it does,
 * -EINVAL when it is malformed.
 */
int acl_equiv_mode(const void *v, size_t len, mode_t *mode);
/** chmod: set user::, mask:: (group:: without one) and other:: from @mode. */
int acl_chmod(void *v, size_t len, mode_t mode);
/**
 * A new inode of *@mode inherits the default ACL @v (a copy, changed in
 * place into its access ACL): each class's bits are the intersection of
 * both, also in *@mode. Returns 0 when the access ACL is equivalent to the
 * mode (not stored), 1 when it is needed, -EINVAL when malformed.
 */
int acl_create_masq(void *v, size_t len, mode_t *mode);

#endif
