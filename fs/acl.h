/*
 * acl.h — POSIX ACLs in their xattr form (system.posix_acl_*): checked,
 * turned into mode bits, and changed by a chmod or a create, by the VFS's
 * rules. Pure functions on the caller's buffer; no locks, no FUSE.
 */
#ifndef SPW_FS_ACL_H
#define SPW_FS_ACL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ACL_XATTR_ACCESS "system.posix_acl_access"
#define ACL_XATTR_DEFAULT "system.posix_acl_default"

/* The number of entries of a well-formed ACL value, or -EINVAL. */
int acl_entries(const void *value, size_t size);
/* The permission bits (0777) of *mode the access ACL implies; returns 0 when
 * the ACL says no more than those bits (it need not be kept), 1 when it
 * does, -EINVAL when malformed. */
int acl_equiv_mode(const void *value, size_t size, mode_t *mode);
/* A chmod to mode: the owner, group (the mask, if any) and other entries
 * take its bits, in place. 0 or -EINVAL. */
int acl_chmod(void *value, size_t size, mode_t mode);
/* A new node under a directory with this default ACL (value: a copy, made
 * the node's access ACL in place): the ACL and *mode mask each other.
 * Returns as acl_equiv_mode. */
int acl_create(void *value, size_t size, mode_t *mode);

#endif
