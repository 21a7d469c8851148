// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * POSIX ACL rules (ext4/acl.c) on VFS-format buffers: malformed ACLs refused,
 * the mode an access ACL implies and whether it must be stored, chmod's
 * rewrite of user::/mask::/other::, a default ACL applied to a new
 * inode's mode, and who keeps set-user-ID and set-group-ID.
 */
#include <check.h>
#include "helpers.h"
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "wbcfs/ext4/acl.h"

enum { UO = 0x01, U = 0x02, GO = 0x04, G = 0x08, M = 0x10, O = 0x20 };

struct ent {
	unsigned tag, perm;
	uint32_t id;
};

static unsigned char buf[4 + 8 * 16];

/* Build an ACL of @n entries in buf; returns its length. */
static size_t mk(const struct ent *e, int n)
{
	uint32_t v = htole32(2);
	int i;

	memcpy(buf, &v, 4);
	for (i = 0; i < n; i++) {
		uint16_t tag = htole16((uint16_t)e[i].tag), perm = htole16((uint16_t)e[i].perm);
		uint32_t id = htole32(e[i].id);

		memcpy(buf + 4 + 8 * i, &tag, 2);
		memcpy(buf + 6 + 8 * i, &perm, 2);
		memcpy(buf + 8 + 8 * i, &id, 4);
	}
	return 4 + 8 * (size_t)n;
}

static unsigned perm_at(int i)
{
	uint16_t p;

	memcpy(&p, buf + 6 + 8 * i, 2);
	return le16toh(p);
}

#define MK(...) mk((const struct ent[]){ __VA_ARGS__ }, \
		   (int)(sizeof((const struct ent[]){ __VA_ARGS__ }) / sizeof(struct ent)))

START_TEST(malformed_refused)
{
	size_t len;

	len = MK({ UO, 6, 0 }, { GO, 4, 0 }, { O, 4, 0 });
	ck_assert_int_eq(acl_check(buf, len), 3);
	ck_assert_int_eq(acl_check(buf, len - 1), -EINVAL);	/* torn entry */
	ck_assert_int_eq(acl_check(buf, 3), -EINVAL);
	ck_assert_int_eq(acl_check(NULL, 0), -EINVAL);
	/* named entry without a mask */
	len = MK({ UO, 6, 0 }, { U, 4, 1000 }, { GO, 4, 0 }, { O, 4, 0 });
	ck_assert_int_eq(acl_check(buf, len), -EINVAL);
	/* out of order, missing other, bad perm, bad tag */
	len = MK({ GO, 4, 0 }, { UO, 6, 0 }, { O, 4, 0 });
	ck_assert_int_eq(acl_check(buf, len), -EINVAL);
	len = MK({ UO, 6, 0 }, { GO, 4, 0 });
	ck_assert_int_eq(acl_check(buf, len), -EINVAL);
	len = MK({ UO, 8, 0 }, { GO, 4, 0 }, { O, 4, 0 });
	ck_assert_int_eq(acl_check(buf, len), -EINVAL);
	len = MK({ UO, 6, 0 }, { 0x40, 4, 0 }, { GO, 4, 0 }, { O, 4, 0 });
	ck_assert_int_eq(acl_check(buf, len), -EINVAL);
	/* bad version */
	len = MK({ UO, 6, 0 }, { GO, 4, 0 }, { O, 4, 0 });
	buf[0] = 1;
	ck_assert_int_eq(acl_check(buf, len), -EINVAL);
	mode_t mode = 0644;
	ck_assert_int_eq(acl_equiv_mode(buf, len, &mode), -EINVAL);
}
END_TEST

START_TEST(equiv_mode)
{
	mode_t mode = S_IFREG | S_ISGID | 0644;
	size_t len;

	/* u::r-- alone: mode only, 444; format and setgid kept */
	len = MK({ UO, 4, 0 }, { GO, 4, 0 }, { O, 4, 0 });
	ck_assert_int_eq(acl_equiv_mode(buf, len, &mode), 0);
	ck_assert_uint_eq(mode, S_IFREG | S_ISGID | 0444);
	/* a named user: stored; the group bits are the mask's */
	mode = S_IFREG | 0644;
	len = MK({ UO, 6, 0 }, { U, 0, 65534 }, { GO, 4, 0 }, { M, 5, 0 }, { O, 0, 0 });
	ck_assert_int_eq(acl_equiv_mode(buf, len, &mode), 1);
	ck_assert_uint_eq(mode, S_IFREG | 0650);
	/* a mask alone is not the mode either */
	mode = 0777;
	len = MK({ UO, 7, 0 }, { GO, 7, 0 }, { M, 1, 0 }, { O, 7, 0 });
	ck_assert_int_eq(acl_equiv_mode(buf, len, &mode), 1);
	ck_assert_uint_eq(mode, 0717);
}
END_TEST

START_TEST(chmod_rewrites)
{
	size_t len;

	len = MK({ UO, 7, 0 }, { U, 7, 1000 }, { GO, 5, 0 }, { M, 7, 0 }, { O, 5, 0 });
	ck_assert_int_eq(acl_chmod(buf, len, S_IFREG | 0640), 0);
	ck_assert_uint_eq(perm_at(0), 6);
	ck_assert_uint_eq(perm_at(1), 7);	/* named entries untouched */
	ck_assert_uint_eq(perm_at(2), 5);	/* group:: stays: the mask moves */
	ck_assert_uint_eq(perm_at(3), 4);
	ck_assert_uint_eq(perm_at(4), 0);
	/* without a mask, group:: takes the group bits */
	len = MK({ UO, 7, 0 }, { GO, 7, 0 }, { O, 7, 0 });
	ck_assert_int_eq(acl_chmod(buf, len, 0751), 0);
	ck_assert_uint_eq(perm_at(0), 7);
	ck_assert_uint_eq(perm_at(1), 5);
	ck_assert_uint_eq(perm_at(2), 1);
	buf[0] = 3;
	ck_assert_int_eq(acl_chmod(buf, len, 0751), -EINVAL);
}
END_TEST

START_TEST(create_masq)
{
	mode_t mode;
	size_t len;

	/* default u::rwx,u:65534:rwx,g::r-x,m::rwx,o::r-x on a 666 file */
	len = MK({ UO, 7, 0 }, { U, 7, 65534 }, { GO, 5, 0 }, { M, 7, 0 }, { O, 5, 0 });
	mode = S_IFREG | 0666;
	ck_assert_int_eq(acl_create_masq(buf, len, &mode), 1);
	ck_assert_uint_eq(mode, S_IFREG | 0664);
	ck_assert_uint_eq(perm_at(0), 6);
	ck_assert_uint_eq(perm_at(1), 7);
	ck_assert_uint_eq(perm_at(3), 6);	/* the mask */
	ck_assert_uint_eq(perm_at(4), 4);
	/* a minimal default ACL: equivalent to the mode; setgid kept */
	len = MK({ UO, 7, 0 }, { GO, 5, 0 }, { O, 0, 0 });
	mode = S_IFDIR | S_ISGID | 0777;
	ck_assert_int_eq(acl_create_masq(buf, len, &mode), 0);
	ck_assert_uint_eq(mode, S_IFDIR | S_ISGID | 0750);
	ck_assert_uint_eq(perm_at(1), 5);
}
END_TEST

START_TEST(kill_priv_rule)
{
	struct wbfs_cred c = { .uid = 65534, .gid = 65534, .ngroups = 1, .groups = { 4321 } };
	struct wbfs_cred root = { .uid = 0, .gid = 0 };

	ck_assert_uint_eq(ext4_cred_kill_priv(&c, S_IFREG | 06777, 0), S_IFREG | 0777);
	/* setgid without group-exec: the group decides */
	ck_assert_uint_eq(ext4_cred_kill_priv(&c, S_IFREG | 02666, 0), S_IFREG | 0666);
	ck_assert_uint_eq(ext4_cred_kill_priv(&c, S_IFREG | 02666, 4321), S_IFREG | 02666);
	ck_assert_uint_eq(ext4_cred_kill_priv(&c, S_IFREG | 02666, 65534), S_IFREG | 02666);
	ck_assert_uint_eq(ext4_cred_kill_priv(&c, S_IFREG | 06676, 4321), S_IFREG | 0676);
	/* privileged, not a regular file */
	ck_assert_uint_eq(ext4_cred_kill_priv(&root, S_IFREG | 06777, 5), S_IFREG | 06777);
	ck_assert_uint_eq(ext4_cred_kill_priv(&c, S_IFDIR | 02777, 0), S_IFDIR | 02777);
	/* groups unknown: not a member */
	c.ngroups = -1;
	ck_assert(!ext4_cred_in_group(&c, 4321));
	ck_assert(ext4_cred_in_group(&c, 65534));
	ck_assert(ext4_cred_in_group(&root, 4321));
}
END_TEST

static Suite *acl_suite(void)
{
	Suite *s = suite_create("acl");

	t_tcase(s, "acl", malformed_refused, equiv_mode, chmod_rewrites, create_masq,
		kill_priv_rule);
	return s;
}

int main(void)
{
	return t_run(acl_suite());
}
