// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The immutable and append-only rules the daemon applies itself (the
 * kernel's fuse does not know ext4's inode flags): which opens, writes
 * and fallocate modes each flag refuses, and which flags a new inode
 * takes from its directory.
 */
#include <check.h>
#include "helpers.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>

#include "../../ext4/ext4_i.h"

static struct winode *t_winode(uint32_t iflags)
{
	struct winode *wi = calloc(1, sizeof(*wi));

	wi->iflags = iflags;
	return wi;
}

START_TEST(no_flags_refuse_nothing)
{
	struct winode *wi = t_winode(EXT4_EXTENTS_FL | EXT2_NODUMP_FL | EXT2_NOATIME_FL);

	ck_assert_int_eq(iflags_check_open(wi, O_RDWR | O_TRUNC), 0);
	ck_assert_int_eq(iflags_check_write(wi, O_WRONLY), 0);
	ck_assert_int_eq(iflags_check_fallocate(wi, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE), 0);
	ck_assert(winode_noatime_flag(wi));
	free(wi);
}
END_TEST

START_TEST(immutable_is_read_only)
{
	struct winode *wi = t_winode(EXT2_IMMUTABLE_FL);

	ck_assert_int_eq(iflags_check_open(wi, O_RDONLY), 0);
	ck_assert_int_eq(iflags_check_open(wi, O_RDONLY | O_TRUNC), -EPERM);
	ck_assert_int_eq(iflags_check_open(wi, O_WRONLY | O_APPEND), -EPERM);
	ck_assert_int_eq(iflags_check_open(wi, O_RDWR), -EPERM);
	ck_assert_int_eq(iflags_check_write(wi, O_WRONLY | O_APPEND), -EPERM);
	ck_assert_int_eq(iflags_check_fallocate(wi, 0), -EPERM);
	ck_assert(!winode_noatime_flag(wi));
	free(wi);
}
END_TEST

START_TEST(append_only_appends)
{
	struct winode *wi = t_winode(EXT2_APPEND_FL);

	ck_assert_int_eq(iflags_check_open(wi, O_RDONLY), 0);
	ck_assert_int_eq(iflags_check_open(wi, O_WRONLY | O_APPEND), 0);
	ck_assert_int_eq(iflags_check_open(wi, O_RDWR | O_APPEND), 0);
	ck_assert_int_eq(iflags_check_open(wi, O_WRONLY), -EPERM);
	ck_assert_int_eq(iflags_check_open(wi, O_WRONLY | O_APPEND | O_TRUNC), -EPERM);
	ck_assert_int_eq(iflags_check_write(wi, O_WRONLY | O_APPEND), 0);
	ck_assert_int_eq(iflags_check_write(wi, O_RDWR), -EPERM);
	ck_assert_int_eq(iflags_check_fallocate(wi, 0), 0);
	ck_assert_int_eq(iflags_check_fallocate(wi, FALLOC_FL_KEEP_SIZE), 0);
	ck_assert_int_eq(iflags_check_fallocate(wi, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE),
			 -EPERM);
	ck_assert_int_eq(iflags_check_fallocate(wi, FALLOC_FL_ZERO_RANGE), -EPERM);
	free(wi);
}
END_TEST

START_TEST(inherited_flags)
{
	uint32_t dir = EXT2_NODUMP_FL | EXT2_NOATIME_FL | EXT2_SYNC_FL | EXT2_DIRSYNC_FL |
		       EXT2_IMMUTABLE_FL | EXT2_APPEND_FL | EXT2_INDEX_FL | EXT4_EXTENTS_FL;

	/* never immutable, append-only, or the directory's own format flags */
	ck_assert_uint_eq(iflags_inherit(S_IFDIR | 0755, dir),
			  EXT2_NODUMP_FL | EXT2_NOATIME_FL | EXT2_SYNC_FL | EXT2_DIRSYNC_FL);
	/* dirsync means nothing to a file */
	ck_assert_uint_eq(iflags_inherit(S_IFREG | 0644, dir),
			  EXT2_NODUMP_FL | EXT2_NOATIME_FL | EXT2_SYNC_FL);
	/* other inodes keep only nodump and noatime */
	ck_assert_uint_eq(iflags_inherit(S_IFLNK | 0777, dir), EXT2_NODUMP_FL | EXT2_NOATIME_FL);
	ck_assert_uint_eq(iflags_inherit(S_IFREG | 0644, 0), 0);
}
END_TEST

static Suite *iflags_suite(void)
{
	Suite *s = suite_create("iflags");

	t_tcase(s, "enforce", no_flags_refuse_nothing, immutable_is_read_only, append_only_appends);
	t_tcase(s, "inherit", inherited_flags);
	return s;
}

int main(void)
{
	return t_run(iflags_suite());
}
