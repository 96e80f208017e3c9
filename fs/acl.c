/*
 * acl.c — POSIX ACLs in their xattr form (system.posix_acl_access and
 * system.posix_acl_default), as the kernel hands them over with
 * FUSE_CAP_POSIX_ACL: it enforces them; spillway stores them, keeps the
 * mode in step with the access ACL and gives new nodes their parent's
 * default ACL. The rules are the VFS's (fs/posix_acl.c: equiv_mode,
 * chmod_masq, create_masq). Pure functions on a caller's buffer.
 */
#include "fs/acl.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#define ACL_VERSION 2
#define HDR 4
#define ENT 8

enum { T_USER_OBJ = 1, T_USER = 2, T_GROUP_OBJ = 4, T_GROUP = 8, T_MASK = 16, T_OTHER = 32 };

/* the xattr form is little-endian: version, then (tag, perm, id) entries */
static unsigned le16_at(const uint8_t *p)
{
	return p[0] | (unsigned)p[1] << 8;
}

static unsigned tag_at(const uint8_t *v, size_t i)
{
	return le16_at(v + HDR + i * ENT);
}

static unsigned perm_at(const uint8_t *v, size_t i)
{
	return le16_at(v + HDR + i * ENT + 2);
}

static void perm_set(uint8_t *v, size_t i, unsigned perm)
{
	v[HDR + i * ENT + 2] = (uint8_t)(perm & 7);
	v[HDR + i * ENT + 3] = 0;
}

int acl_entries(const void *value, size_t size)
{
	const uint8_t *v = value;
	unsigned seen = 0;
	size_t n;

	if (size < HDR || (size - HDR) % ENT || le16_at(v) != ACL_VERSION || le16_at(v + 2))
		return -EINVAL;
	n = (size - HDR) / ENT;
	for (size_t i = 0; i < n; i++) {
		unsigned t = tag_at(v, i);
		if (t != T_USER && t != T_GROUP && (seen & t))
			return -EINVAL; /* one of each object entry */
		if (t != T_USER_OBJ && t != T_USER && t != T_GROUP_OBJ && t != T_GROUP &&
		    t != T_MASK && t != T_OTHER)
			return -EINVAL;
		if (perm_at(v, i) & ~7u)
			return -EINVAL;
		seen |= t;
	}
	if (n && (!(seen & T_USER_OBJ) || !(seen & T_GROUP_OBJ) || !(seen & T_OTHER) ||
		  ((seen & (T_USER | T_GROUP)) && !(seen & T_MASK))))
		return -EINVAL;
	return (int)n;
}

int acl_equiv_mode(const void *value, size_t size, mode_t *mode)
{
	const uint8_t *v = value;
	int n = acl_entries(value, size), not_equiv = 0, mask = -1;
	mode_t m = 0;

	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		unsigned p = perm_at(v, (size_t)i);
		switch (tag_at(v, (size_t)i)) {
		case T_USER_OBJ:
			m |= p << 6;
			break;
		case T_GROUP_OBJ:
			m |= p << 3;
			break;
		case T_OTHER:
			m |= p;
			break;
		case T_MASK:
			mask = (int)p;
			not_equiv = 1;
			break;
		default:
			not_equiv = 1;
		}
	}
	if (mask >= 0) /* the group bits show the mask */
		m = (m & ~(mode_t)S_IRWXG) | ((mode_t)mask << 3);
	*mode = (*mode & ~(mode_t)0777) | m;
	return not_equiv;
}

int acl_chmod(void *value, size_t size, mode_t mode)
{
	uint8_t *v = value;
	int n = acl_entries(value, size), group = -1, mask = -1;

	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		switch (tag_at(v, (size_t)i)) {
		case T_USER_OBJ:
			perm_set(v, (size_t)i, (mode & S_IRWXU) >> 6);
			break;
		case T_GROUP_OBJ:
			group = i;
			break;
		case T_MASK:
			mask = i;
			break;
		case T_OTHER:
			perm_set(v, (size_t)i, mode & S_IRWXO);
			break;
		}
	}
	if (mask >= 0)
		perm_set(v, (size_t)mask, (mode & S_IRWXG) >> 3);
	else if (group >= 0)
		perm_set(v, (size_t)group, (mode & S_IRWXG) >> 3);
	return 0;
}

int acl_create(void *value, size_t size, mode_t *modep)
{
	uint8_t *v = value;
	int n = acl_entries(value, size), group = -1, mask = -1, not_equiv = 0;
	mode_t mode = *modep;

	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		unsigned p = perm_at(v, (size_t)i);
		switch (tag_at(v, (size_t)i)) {
		case T_USER_OBJ:
			p &= (mode >> 6) & 7;
			perm_set(v, (size_t)i, p);
			mode &= (p << 6) | ~(mode_t)S_IRWXU;
			break;
		case T_GROUP_OBJ:
			group = i;
			break;
		case T_MASK:
			mask = i;
			not_equiv = 1;
			break;
		case T_OTHER:
			p &= mode & 7;
			perm_set(v, (size_t)i, p);
			mode &= p | ~(mode_t)S_IRWXO;
			break;
		default:
			not_equiv = 1;
		}
	}
	if (mask >= 0 || group >= 0) {
		int g = mask >= 0 ? mask : group;
		unsigned p = perm_at(v, (size_t)g) & ((mode >> 3) & 7);
		perm_set(v, (size_t)g, p);
		mode &= (p << 3) | ~(mode_t)S_IRWXG;
	}
	*modep = (*modep & ~(mode_t)0777) | (mode & 0777);
	return not_equiv;
}
