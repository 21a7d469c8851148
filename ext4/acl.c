// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * POSIX ACLs as FUSE passes them: a little-endian header (version 2) and
 * entries { tag, perm, id }, sorted by tag, then by id. This file checks
 * them and applies the kernel's ext4 rules between an ACL and the mode's
 * permission bits; reading and writing them on disk is xattr.c's.
 */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "ext4_i.h"


#define ACL_VERSION 2

enum {
	TAG_USER_OBJ = 0x01,
	TAG_USER = 0x02,
	TAG_GROUP_OBJ = 0x04,
	TAG_GROUP = 0x08,
	TAG_MASK = 0x10,
	TAG_OTHER = 0x20,
};

struct acl_hdr {
	uint32_t version;
};

struct acl_ent {
	uint16_t tag;
	uint16_t perm;
	uint32_t id;
};

static struct acl_ent *acl_ents(const void *v)
{
	return (struct acl_ent *)((char *)v + sizeof(struct acl_hdr));
}

static unsigned ent_tag(const struct acl_ent *e)
{
	return le16toh(e->tag);
}

static unsigned ent_perm(const struct acl_ent *e)
{
	return le16toh(e->perm);
}

static void ent_set_perm(struct acl_ent *e, unsigned perm)
{
	e->perm = htole16((uint16_t)perm);
}

/* The rules of posix_acl_valid: each object entry once, in tag order, and
 * a mask whenever named entries exist. */
int acl_check(const void *v, size_t len)
{
	const struct acl_hdr *h = v;
	const struct acl_ent *e;
	unsigned state = TAG_USER_OBJ, named = 0, n, i;
	bool have_mask = false;

	if (!v || len < sizeof(*h) || (len - sizeof(*h)) % sizeof(*e))
		return -EINVAL;
	if (le32toh(h->version) != ACL_VERSION)
		return -EINVAL;
	n = (unsigned)((len - sizeof(*h)) / sizeof(*e));
	e = acl_ents(v);
	for (i = 0; i < n; i++) {
		if (ent_perm(&e[i]) & ~7U)
			return -EINVAL;
		switch (ent_tag(&e[i])) {
		case TAG_USER_OBJ:
			if (state != TAG_USER_OBJ)
				return -EINVAL;
			state = TAG_USER;
			break;
		case TAG_USER:
			if (state != TAG_USER)
				return -EINVAL;
			named++;
			break;
		case TAG_GROUP_OBJ:
			if (state != TAG_USER)
				return -EINVAL;
			state = TAG_GROUP;
			break;
		case TAG_GROUP:
			if (state != TAG_GROUP)
				return -EINVAL;
			named++;
			break;
		case TAG_MASK:
			if (state != TAG_GROUP)
				return -EINVAL;
			have_mask = true;
			state = TAG_OTHER;
			break;
		case TAG_OTHER:
			if (state != TAG_GROUP && state != TAG_OTHER)
				return -EINVAL;
			state = 0;
			break;
		default:
			return -EINVAL;
		}
	}
	if (state != 0 || (named && !have_mask))
		return -EINVAL;
	return (int)n;
}

int acl_equiv_mode(const void *v, size_t len, mode_t *mode)
{
	const struct acl_ent *e = acl_ents(v);
	mode_t m = 0;
	int n = acl_check(v, len), i, not_equiv = 0;

	if (n < 0)
		return n;
	for (i = 0; i < n; i++) {
		unsigned perm = ent_perm(&e[i]);

		switch (ent_tag(&e[i])) {
		case TAG_USER_OBJ:
			m |= perm << 6;
			break;
		case TAG_GROUP_OBJ:
			m |= perm << 3;
			break;
		case TAG_OTHER:
			m |= perm;
			break;
		case TAG_MASK:
			m = (m & ~(mode_t)S_IRWXG) | (perm << 3);
			not_equiv = 1;
			break;
		default:	/* named users and groups */
			not_equiv = 1;
			break;
		}
	}
	*mode = (*mode & ~(mode_t)0777) | m;
	return not_equiv;
}

int acl_chmod(void *v, size_t len, mode_t mode)
{
	struct acl_ent *e = acl_ents(v), *group_obj = NULL, *mask = NULL;
	int n = acl_check(v, len), i;

	if (n < 0)
		return n;
	for (i = 0; i < n; i++) {
		switch (ent_tag(&e[i])) {
		case TAG_USER_OBJ:
			ent_set_perm(&e[i], (mode >> 6) & 7);
			break;
		case TAG_GROUP_OBJ:
			group_obj = &e[i];
			break;
		case TAG_MASK:
			mask = &e[i];
			break;
		case TAG_OTHER:
			ent_set_perm(&e[i], mode & 7);
			break;
		}
	}
	ent_set_perm(mask ? mask : group_obj, (mode >> 3) & 7);
	return 0;
}

int acl_create_masq(void *v, size_t len, mode_t *mode)
{
	struct acl_ent *e = acl_ents(v), *group_obj = NULL, *mask = NULL;
	mode_t m = *mode & 0777;
	int n = acl_check(v, len), i, not_equiv = 0;
	unsigned perm;

	if (n < 0)
		return n;
	for (i = 0; i < n; i++) {
		switch (ent_tag(&e[i])) {
		case TAG_USER_OBJ:
			perm = ent_perm(&e[i]) & ((m >> 6) & 7);
			ent_set_perm(&e[i], perm);
			m = (m & ~(mode_t)S_IRWXU) | (perm << 6);
			break;
		case TAG_GROUP_OBJ:
			group_obj = &e[i];
			break;
		case TAG_MASK:
			mask = &e[i];
			not_equiv = 1;
			break;
		case TAG_OTHER:
			perm = ent_perm(&e[i]) & (m & 7);
			ent_set_perm(&e[i], perm);
			m = (m & ~(mode_t)S_IRWXO) | perm;
			break;
		default:
			not_equiv = 1;
			break;
		}
	}
	/* the mask, or group:: without one, is what the group class gets */
	if (!mask)
		mask = group_obj;
	perm = ent_perm(mask) & ((m >> 3) & 7);
	ent_set_perm(mask, perm);
	m = (m & ~(mode_t)S_IRWXG) | (perm << 3);
	*mode = (*mode & ~(mode_t)0777) | m;
	return not_equiv;
}

bool ext4_cred_in_group(const struct wbfs_cred *c, gid_t gid)
{
	int i;

	if (!c || c->uid == 0 || c->gid == gid)
		return true;
	for (i = 0; i < c->ngroups; i++)
		if (c->groups[i] == gid)
			return true;
	return false;
}

mode_t ext4_cred_kill_priv(const struct wbfs_cred *c, mode_t mode, gid_t gid)
{
	if (!c || c->uid == 0 || !S_ISREG(mode))
		return mode;
	mode &= ~(mode_t)S_ISUID;
	if ((mode & S_ISGID) && ((mode & S_IXGRP) || !ext4_cred_in_group(c, gid)))
		mode &= ~(mode_t)S_ISGID;
	return mode;
}
