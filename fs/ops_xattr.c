/*
 * ops_xattr.c — user.*, trusted.* and security.* xattrs kept in the index,
 * plus the virtual user.spillway.* names (the CephFS convention): per file
 * "state" and "pin", on the root "stats" and "scrub" (JSON); writing "evict"
 * or "warm" acts on a file, "scrub" ("start [LIMIT]", "stop") on the root. trusted.* is root's only (the kernel checks
 * CAP_SYS_ADMIN on get and set; a listing leaves them out for others).
 */
#include "fs/acl.h"
#include "fs/fs_i.h"
#include "common/size.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#define VPREFIX "user.spillway."

static int is_user(const char *name)
{
	return strncmp(name, "user.", 5) == 0;
}

static int is_trusted(const char *name)
{
	return strncmp(name, "trusted.", 8) == 0;
}

/* A namespace spillway keeps: 1; with no name after it: -EINVAL; else 0. */
static int kept_ns(const char *name)
{
	static const char *const ns[] = {"user.", "trusted.", "security."};
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		size_t l = strlen(ns[i]);
		if (!strncmp(name, ns[i], l))
			return name[l] ? 1 : -EINVAL;
	}
	return 0;
}

static int is_acl(struct spw *s, const char *name)
{
	return s->acl && (!strcmp(name, ACL_XATTR_ACCESS) || !strcmp(name, ACL_XATTR_DEFAULT));
}

/* An xattr of in, malloc'ed into *out (NULL and 0 when there is none). */
static ssize_t xattr_dup(struct inode *in, const char *name, void **out)
{
	ssize_t n;
	*out = NULL;
	for (int tries = 0; tries < 8; tries++) {
		if ((n = idx_xattr_get(in, name, NULL, 0)) < 0)
			return n == -ENODATA ? 0 : n;
		free(*out);
		if (!(*out = malloc((size_t)n + 1)))
			return -ENOMEM;
		if ((n = idx_xattr_get(in, name, *out, (size_t)n)) != -ERANGE)
			break;
	}
	if (n <= 0) {
		free(*out);
		*out = NULL;
	}
	return n == -ENODATA ? 0 : n;
}

int fs_acl_inherit(struct spw *s, fuse_ino_t parent, mode_t umask, mode_t *mode, void **acc,
		   size_t *acc_len, void **def, size_t *def_len)
{
	struct inode *p = idx_get(s->idx, parent);
	void *d = NULL;
	ssize_t n = 0;
	int ret = 0;

	*acc = NULL;
	if (def)
		*def = NULL;
	if (p) {
		n = xattr_dup(p, ACL_XATTR_DEFAULT, &d);
		idx_put(s->idx, p);
	}
	if (n < 0)
		return (int)n;
	if (n == 0 || acl_entries(d, (size_t)n) <= 0) {
		free(d);
		*mode &= ~(umask & 0777);
		return 0;
	}
	if (def) {
		if (!(*def = malloc((size_t)n))) {
			free(d);
			return -ENOMEM;
		}
		memcpy(*def, d, (size_t)n);
		*def_len = (size_t)n;
	}
	if ((ret = acl_create(d, (size_t)n, mode)) > 0) {
		*acc = d;
		*acc_len = (size_t)n;
		return 0;
	}
	free(d); /* the mode says it all (or malformed: the mode alone) */
	return 0;
}

int fs_acl_chmod(struct spw *s, struct inode *in, mode_t mode)
{
	void *v;
	ssize_t n = xattr_dup(in, ACL_XATTR_ACCESS, &v);
	int ret = (int)n;
	if (n > 0 && (ret = acl_chmod(v, (size_t)n, mode)) == 0)
		ret = idx_xattr_set(s->idx, in, ACL_XATTR_ACCESS, v, (size_t)n, 0);
	free(v);
	return ret < 0 ? ret : 0;
}

/* setfacl: the access ACL sets the mode's permission bits (and is not kept
 * when they say it all; a caller outside the file's group and not root
 * drops set-group-ID, as the VFS does); a default ACL only on a
 * directory. */
static int acl_set(struct spw *s, fuse_req_t req, struct inode *in, const char *name,
		   const char *value, size_t size, int flags)
{
	int n = acl_entries(value, size), ret;
	mode_t mode;

	if (n < 0)
		return n;
	if (!strcmp(name, ACL_XATTR_DEFAULT)) {
		if (!idx_dir(in))
			return n ? -EACCES : 0;
		if (n == 0) {
			ret = idx_xattr_remove(s->idx, in, name);
			return ret == -ENODATA ? 0 : ret;
		}
		return idx_xattr_set(s->idx, in, name, value, size, flags);
	}
	idx_inode_lock(in);
	mode = in->mode;
	idx_inode_unlock(in);
	if ((ret = acl_equiv_mode(value, size, &mode)) < 0)
		return ret;
	if (ret == 0) {
		ret = idx_xattr_remove(s->idx, in, name);
		if (ret < 0 && ret != -ENODATA)
			return ret;
	} else if ((ret = idx_xattr_set(s->idx, in, name, value, size, flags)) < 0) {
		return ret;
	}
	idx_inode_lock(in);
	if (fuse_req_ctx(req)->uid != 0 && !fs_req_in_group(req, in->gid))
		mode &= ~(mode_t)S_ISGID;
	idx_set_mode_locked(in, (in->mode & S_IFMT) | (mode & 07777));
	idx_touch(&in->ctime);
	ret = idx_journal_attr_locked(s->idx, in);
	idx_inode_unlock(in);
	return ret;
}

/* May the caller of req see trusted.* names? (CAP_SYS_ADMIN: taken as root) */
static int sees_trusted(fuse_req_t req)
{
	return fuse_req_ctx(req)->uid == 0;
}

/* "0" or "1", as setfattr, echo -n or echo (one '\n') send it; else -1 */
static int vx_bool(const char *v, size_t size)
{
	if (size < 1 || size > 2 || (v[0] != '0' && v[0] != '1') ||
	    (size == 2 && v[1] != '\n' && v[1] != '\0'))
		return -1;
	return v[0] == '1';
}

/* One rule for all three: the value is "1" (pin also takes "0"); anything
 * else is EINVAL. */
int xattr_vx_parse(const char *what, const void *value, size_t size)
{
	int b = vx_bool(value, size);

	if (!strcmp(what, "pin") && b >= 0)
		return b ? VX_PIN : VX_UNPIN;
	if (b != 1)
		return -EINVAL;
	if (!strcmp(what, "evict"))
		return VX_EVICT;
	if (!strcmp(what, "warm"))
		return VX_WARM;
	return -EINVAL;
}

/* user.spillway.scrub on the root: "start", "start LIMIT" (bytes/s, a
 * size: "50M") or "stop" (a trailing newline or NUL taken); root or the
 * root directory's owner only. */
static int vx_scrub(struct spw *s, fuse_req_t req, struct inode *in, const char *value,
		    size_t size)
{
	char v[64];
	uint64_t limit = 0;
	uid_t uid = fuse_req_ctx(req)->uid, owner;

	if (in->ino != IDX_ROOT_INO)
		return -EINVAL;
	idx_inode_lock(in);
	owner = in->uid;
	idx_inode_unlock(in);
	if (uid != 0 && uid != owner)
		return -EPERM;
	while (size && (value[size - 1] == '\n' || value[size - 1] == '\0'))
		size--;
	if (size >= sizeof(v))
		return -EINVAL;
	memcpy(v, value, size);
	v[size] = '\0';
	if (!strcmp(v, "stop"))
		return tier_scrub_cancel(s->tier);
	if (!strncmp(v, "start ", 6) && (size_parse(v + 6, &limit) < 0 || !limit))
		return -EINVAL;
	if (strcmp(v, "start") && strncmp(v, "start ", 6))
		return -EINVAL;
	return tier_scrub_start(s->tier, limit);
}

static int vx_set(struct spw *s, fuse_req_t req, struct inode *in, const char *what,
		  const char *value, size_t size)
{
	int act;

	if (!strcmp(what, "scrub"))
		return vx_scrub(s, req, in, value, size);
	act = xattr_vx_parse(what, value, size);

	if (act < 0)
		return act;
	if (!S_ISREG(idx_type(in)))
		return -EINVAL;
	switch (act) {
	case VX_PIN:
	case VX_UNPIN:
		return tier_pin(s->tier, in, act == VX_PIN);
	case VX_EVICT:
		return tier_evict_file(s->tier, in);
	default:
		return tier_warm_file(s->tier, in);
	}
}

static ssize_t vx_get(struct spw *s, struct inode *in, const char *what, char *buf, size_t len)
{
	if (!strcmp(what, "stats") && in->ino == IDX_ROOT_INO)
		return tier_stats_json(s->tier, buf, len);
	if (!strcmp(what, "scrub") && in->ino == IDX_ROOT_INO)
		return tier_scrub_json(s->tier, buf, len);
	if (!S_ISREG(idx_type(in)))
		return -ENODATA;
	if (!strcmp(what, "state"))
		return tier_file_state(s->tier, in, buf, len);
	if (!strcmp(what, "pin"))
		return snprintf(buf, len, "%d", in->pinned);
	return -ENODATA;
}

/* One reply for a get/list: the size asked about (size 0), the bytes, or the
 * error. Frees buf. */
static void reply_xattr(fuse_req_t req, size_t size, ssize_t ret, char *buf)
{
	if (ret < 0)
		fuse_reply_err(req, (int)-ret);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)ret);
	else
		fuse_reply_buf(req, buf, (size_t)ret);
	free(buf);
}

void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
		 int flags)
{
	struct spw *s = spw_of(req);
	struct inode *in;
	int ret = is_acl(s, name) ? 1 : kept_ns(name);
	if (ret <= 0 || (is_trusted(name) && !sees_trusted(req))) {
		fuse_reply_err(req, ret < 0 ? EINVAL : ret == 0 ? EOPNOTSUPP : EPERM);
		return;
	}
	if (!(in = idx_get(s->idx, ino))) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (is_acl(s, name))
		ret = acl_set(s, req, in, name, value, size, flags);
	else if (!strncmp(name, VPREFIX, strlen(VPREFIX)))
		ret = vx_set(s, req, in, name + strlen(VPREFIX), value, size);
	else if (is_user(name) && !S_ISREG(idx_type(in)) && !idx_dir(in))
		ret = -EPERM; /* as on Linux: user.* only on files and directories */
	else
		ret = idx_xattr_set(s->idx, in, name, value, size, flags);
	idx_put(s->idx, in);
	fuse_reply_err(req, -ret);
}

void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct spw *s = spw_of(req);
	struct inode *in;
	ssize_t ret;
	char *buf = NULL;

	/* ENODATA, never EOPNOTSUPP: the kernel would stop asking for all names */
	if ((!is_acl(spw_of(req), name) && kept_ns(name) <= 0) ||
	    (is_trusted(name) && !sees_trusted(req))) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	if (!(in = idx_get(s->idx, ino))) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (!strncmp(name, VPREFIX, strlen(VPREFIX))) {
		size_t cap = 65536;
		buf = malloc(cap);
		ret = buf ? vx_get(s, in, name + strlen(VPREFIX), buf, cap) : -ENOMEM;
		if (ret >= (ssize_t)cap)
			ret = -E2BIG;
		if (ret >= 0 && size && (size_t)ret > size)
			ret = -ERANGE;
	} else {
		if (size && !(buf = malloc(size)))
			ret = -ENOMEM;
		else
			ret = idx_xattr_get(in, name, buf, size);
	}
	idx_put(s->idx, in);
	reply_xattr(req, size, ret, buf);
}

/* The names of in without trusted.*, into a malloc'ed *buf (size 0: only
 * their length); the length, or -errno. */
static ssize_t list_untrusted(struct inode *in, size_t size, char **buf)
{
	ssize_t all, n = 0;
	char *names = NULL;
	/* a name set between the two calls: ask again */
	for (int tries = 0; tries < 8; tries++) {
		if ((all = idx_xattr_list(in, NULL, 0)) < 0)
			return all;
		free(names);
		if (!(names = malloc((size_t)all + 1)))
			return -ENOMEM;
		if ((all = idx_xattr_list(in, names, (size_t)all)) != -ERANGE)
			break;
	}
	if (all < 0) {
		free(names);
		return all;
	}
	for (ssize_t i = 0, l; i < all; i += l) {
		l = (ssize_t)strlen(names + i) + 1;
		if (!is_trusted(names + i)) {
			memmove(names + n, names + i, (size_t)l);
			n += l;
		}
	}
	if (size && (size_t)n > size) {
		free(names);
		return -ERANGE;
	}
	*buf = names;
	return n;
}

void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct spw *s = spw_of(req);
	struct inode *in = idx_get(s->idx, ino);
	char *buf = NULL;
	ssize_t ret;
	if (!in) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (sees_trusted(req)) {
		if (size && !(buf = malloc(size)))
			ret = -ENOMEM;
		else
			ret = idx_xattr_list(in, buf, size);
	} else {
		ret = list_untrusted(in, size, &buf);
	}
	idx_put(s->idx, in);
	reply_xattr(req, size, ret, buf);
}

void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct spw *s = spw_of(req);
	struct inode *in;
	int ret = is_acl(s, name) ? 1 : kept_ns(name);
	if (ret <= 0 || (is_trusted(name) && !sees_trusted(req))) {
		fuse_reply_err(req, ret < 0 ? EINVAL : ret == 0 ? EOPNOTSUPP : EPERM);
		return;
	}
	if (!(in = idx_get(s->idx, ino))) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	ret = !strncmp(name, VPREFIX, strlen(VPREFIX)) ? -EINVAL : idx_xattr_remove(s->idx, in, name);
	idx_put(s->idx, in);
	fuse_reply_err(req, -ret);
}
