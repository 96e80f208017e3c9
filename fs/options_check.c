/*
 * options_check.c — the mount options' checks that look at the world, step
 * 4 of opt_parse (options.c DESIGN): the mountpoint; the rows' check hooks
 * in table order (hot_dir first: it may be created here, and opt_parse
 * removes it again on any failure; the cold directories against the hot
 * dir, the mountpoint, spillway mounts and other mounts' cold directories;
 * the S3 URL, endpoint, region, credentials and CA file; the metrics file's
 * directory; state_dir); and the defaults computed from the machine.
 * Guarantees: a failure is one line naming the option and the value.
 * Not thread-safe: opt_parse runs once, before the mount.
 */
#include "fs/options_i.h"

#include "tier/hot/hot.h"
#include "tier/store/store_s3.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <mntent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static uint32_t fnv(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

static int dir_is_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int empty = 1;
	if (!d)
		return -errno;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			empty = 0;
			break;
		}
	closedir(d);
	return empty;
}

/* path is dir itself or lies below it */
static int inside(const char *path, const char *dir)
{
	size_t l = strlen(dir);
	return !strncmp(path, dir, l) && (path[l] == '/' || !path[l]);
}

/* The cold directory of a live spillway mount that dir lies inside (its
 * .spillway.lock is held, tier/state/stores.c), malloc'ed; NULL when none. */
static char *live_cold_dir_above(const char *dir)
{
	char *up = strdup(dir), *slash;
	while (up && (slash = strrchr(up, '/')) && slash != up) {
		char lock[PATH_MAX + 32];
		int fd;
		*slash = 0;
		snprintf(lock, sizeof(lock), "%s/.spillway.lock", up);
		if ((fd = open(lock, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		/* held exclusively by the mount that uses the directory */
		if (flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK) {
			close(fd);
			return up;
		}
		flock(fd, LOCK_UN);
		close(fd);
	}
	free(up);
	return NULL;
}

/* The spillway mount (its mountpoint) that path lies on or inside, from
 * /proc/self/mounts; NULL when none. Malloc'ed. */
static char *spillway_mount_of(const char *path)
{
	FILE *f = setmntent("/proc/self/mounts", "r");
	struct mntent *m;
	char *hit = NULL;

	if (!f)
		return NULL;
	while ((m = getmntent(f)))
		if ((!strcmp(m->mnt_type, "fuse.spillway") ||
		     (!strncmp(m->mnt_type, "fuse", 4) && !strcmp(m->mnt_fsname, "spillway"))) &&
		    inside(path, m->mnt_dir)) {
			free(hit);
			hit = strdup(m->mnt_dir);
		}
	endmntent(f);
	return hit;
}

/* The mountpoint: must exist, be a directory, be empty, and not be served
 * by a spillway already (a second daemon would hide the first). */
int opt_check_mountpoint(struct opt_ctx *c, const char *mountpoint)
{
	char real[PATH_MAX];
	struct stat st;
	int r;

	if (!mountpoint)
		return opt_fail(c, "no mountpoint given (usage: spillway [options] MOUNTPOINT)");
	if (!realpath(mountpoint, real))
		return opt_fail(c, "mountpoint '%s': %s", mountpoint, strerror(errno));
	if (stat(real, &st) < 0 || !S_ISDIR(st.st_mode))
		return opt_fail(c, "mountpoint '%s': not a directory", mountpoint);
	{
		char *m = spillway_mount_of(real);
		if (m) {
			opt_fail(c, "mountpoint '%s': %s is a spillway mount already", mountpoint,
			     !strcmp(m, real) ? "it" : m);
			free(m);
			return -1;
		}
	}
	if ((r = dir_is_empty(real)) <= 0)
		return opt_fail(c, "mountpoint '%s': %s", mountpoint,
			    r < 0 ? strerror(-r) : "not empty");
	c->cfg->mountpoint = strdup(real);
	return 0;
}

/* ---- the checks that look at the world, in table order ---- */

/* hot_dir: absolute; created 0700 if missing; an existing directory only
 * when it is spillway's or empty (tier/hot/hot.h, HOT_MARKER). */
int opt_check_hot_dir(struct opt_ctx *c, const char *v)
{
	struct spw_config *cfg = c->cfg;
	char buf[PATH_MAX + 64];
	const char *why;
	struct stat st;
	int ret;

	if (!v) {
		snprintf(buf, sizeof(buf), "/dev/shm/spillway-%u-%08x", (unsigned)getuid(),
			 fnv(cfg->mountpoint));
		v = buf;
	} else if (v[0] != '/')
		return opt_fail(c, "option 'hot_dir': invalid value '%s': must be an absolute path", v);
	if (v == buf && !(v = c->default_dir = strdup(buf)))
		return opt_fail(c, "option 'hot_dir': %s", strerror(ENOMEM));
	/* again when it vanished: a daemon finishing its unmount removes the
	 * directory it made (tier/hot.c hot_free) */
	for (int i = 0;; i++) {
		if (!c->created && (ret = hot_dir_make(v)) == 0)
			c->created = strdup(v);
		else if (!c->created && ret != -EEXIST)
			return opt_fail(c, "option 'hot_dir': cannot create '%s': %s", v,
					strerror(-ret));
		if (realpath(v, buf) && stat(buf, &st) == 0)
			break;
		if (errno != ENOENT || c->created || i == 100)
			return opt_fail(c, "option 'hot_dir': '%s': %s", v, strerror(errno));
	}
	if (!S_ISDIR(st.st_mode))
		return opt_fail(c, "option 'hot_dir': '%s' is not a directory", v);
	if (inside(buf, cfg->mountpoint))
		return opt_fail(c, "option 'hot_dir': '%s' lies inside the mountpoint", v);
	if (hot_dir_check(buf, &why) < 0)
		return opt_fail(c, "option 'hot_dir': invalid value '%s': %s", v, why);
	free(cfg->hot_dir);
	cfg->hot_dir = strdup(buf);
	cfg->hot_dir_made = c->created != NULL;
	return 0;
}

/* nvme: a colon-separated list of cold directories. */
int opt_check_nvme(struct opt_ctx *c, const char *list)
{
	char *copy, *save = NULL, *d, *seen[64], *onmnt = NULL;
	int ret = 0, n = 0, nseen = 0;
	if (!list)
		return 0;
	if (!(copy = strdup(list)))
		return opt_fail(c, "option 'nvme': %s", strerror(ENOMEM));
	for (d = strtok_r(copy, ":", &save); d && !ret; d = strtok_r(NULL, ":", &save)) {
		char real[PATH_MAX];
		struct stat st;
		n++;
		if (d[0] != '/')
			ret = opt_fail(
			    c, "option 'nvme': invalid value '%s': '%s' is not an absolute path",
			    list, d);
		else if (stat(d, &st) < 0 || !realpath(d, real))
			ret = opt_fail(c, "option 'nvme': invalid value '%s': '%s': %s", list, d,
				   strerror(errno));
		else if (!S_ISDIR(st.st_mode))
			ret = opt_fail(c, "option 'nvme': invalid value '%s': '%s' is not a directory",
				   list, d);
		else if (strcmp(real, c->cfg->hot_dir) == 0)
			ret =
			    opt_fail(c, "option 'nvme': invalid value '%s': '%s' is the hot_dir itself",
				 list, d);
		else if (strcmp(real, c->cfg->mountpoint) == 0)
			ret = opt_fail(
			    c, "option 'nvme': invalid value '%s': '%s' is the mountpoint itself",
			    list, d);
		else if (access(real, W_OK) < 0)
			ret = opt_fail(c, "option 'nvme': invalid value '%s': '%s' is not writable",
				   list, d);
		else if ((onmnt = spillway_mount_of(real)))
			ret = opt_fail(c,
				   "option 'nvme': invalid value '%s': '%s' lies on the spillway mount "
				   "%s (cold data must be on a disk)",
				   list, d, onmnt);
		else if ((onmnt = live_cold_dir_above(real)))
			ret = opt_fail(c,
				   "option 'nvme': invalid value '%s': '%s' lies inside '%s', the "
				   "cold directory of another spillway mount",
				   list, d, onmnt);
		for (int j = 0; !ret && j < nseen; j++)
			if (inside(real, seen[j]) || inside(seen[j], real))
				ret = opt_fail(c,
					   "option 'nvme': invalid value '%s': '%s' is named twice "
					   "(the same directory, or one inside the other)",
					   list, d);
		free(onmnt);
		onmnt = NULL;
		if (!ret && nseen < (int)(sizeof(seen) / sizeof(seen[0])))
			seen[nseen++] = strdup(real);
	}
	for (int j = 0; j < nseen; j++)
		free(seen[j]);
	if (!ret && n == 0)
		ret = opt_fail(c, "option 'nvme': invalid value '%s': expected DIR[:DIR...]", list);
	free(copy);
	return ret;
}

int opt_check_s3(struct opt_ctx *c, const char *v)
{
	char *bucket = NULL, *prefix = NULL, why[256];
	int r;
	if (!v)
		return 0;
	r = s3_url_parse_err(v, &bucket, &prefix, why, sizeof(why));
	free(bucket);
	free(prefix);
	return r < 0 ? opt_fail(c, "option 's3': invalid value '%s': %s", v, why) : 0;
}

int opt_check_s3_endpoint(struct opt_ctx *c, const char *v)
{
	if (v && strncmp(v, "http://", 7) && strncmp(v, "https://", 8))
		return opt_fail(c,
			    "option 's3_endpoint': invalid value '%s': expected http://HOST[:PORT] "
			    "or https://HOST[:PORT]",
			    v);
	return 0;
}

int opt_check_s3_region(struct opt_ctx *c, const char *v)
{
	for (const char *p = v; p && *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
			return opt_fail(
			    c,
			    "option 's3_region': invalid value '%s': expected a region name "
			    "like us-east-1",
			    v);
	return 0;
}

int opt_check_s3_credentials(struct opt_ctx *c, const char *v)
{
	struct s3_creds cr;
	char why[512];
	if (!v)
		return 0;
	if (v[0] != '/')
		return opt_fail(
		    c, "option 's3_credentials': invalid value '%s': must be an absolute path", v);
	if (s3_credentials_load(v, &cr, why, sizeof(why)) < 0)
		return opt_fail(c, "option 's3_credentials': '%s': %s", v, why);
	s3_credentials_free(&cr);
	return 0;
}

int opt_check_s3_ca_file(struct opt_ctx *c, const char *v)
{
	if (v && access(v, R_OK) < 0)
		return opt_fail(c, "option 's3_ca_file': '%s': %s", v, strerror(errno));
	return 0;
}

int opt_check_metrics(struct opt_ctx *c, const char *v)
{
	char *dir, *slash;
	struct stat st;
	int r;
	if (!v)
		return 0;
	slash = strrchr(v, '/');
	if (v[0] != '/' || !slash || !slash[1])
		return opt_fail(
		    c, "option 'metrics': invalid value '%s': expected an absolute file path", v);
	if (!(dir = strndup(v, slash == v ? 1 : (size_t)(slash - v))))
		return opt_fail(c, "option 'metrics': %s", strerror(ENOMEM));
	r = stat(dir, &st);
	if (r < 0 || !S_ISDIR(st.st_mode)) {
		free(dir);
		return opt_fail(c, "option 'metrics': invalid value '%s': its directory does not exist",
			    v);
	}
	/* the file is replaced atomically (a temporary file beside it, then
	 * rename): prove now that a file can be made there */
	{
		char tmp[PATH_MAX];
		int fd;
		snprintf(tmp, sizeof(tmp), "%s/.spillway-metrics-XXXXXX", dir);
		fd = mkstemp(tmp);
		free(dir);
		if (fd < 0)
			return opt_fail(c,
				    "option 'metrics': invalid value '%s': cannot create a file in its "
				    "directory: %s",
				    v, strerror(errno));
		close(fd);
		unlink(tmp);
	}
	return 0;
}

/* state_dir: absolute, or none; default in the first nvme directory. */
int opt_check_state_dir(struct opt_ctx *c, const char *v)
{
	struct spw_config *cfg = c->cfg;
	if (v && !strcmp(v, "none")) {
		free(cfg->state_dir);
		cfg->state_dir = NULL;
	} else if (v) {
		if (v[0] != '/')
			return opt_fail(
			    c,
			    "option 'state_dir': invalid value '%s': must be an absolute path "
			    "or none",
			    v);
		if (inside(v, cfg->hot_dir))
			return opt_fail(
			    c,
			    "option 'state_dir': invalid value '%s': must not be inside hot_dir "
			    "(RAM does not survive a reboot)",
			    v);
		if (inside(v, cfg->mountpoint))
			return opt_fail(
			    c,
			    "option 'state_dir': invalid value '%s': must not be inside the "
			    "mountpoint",
			    v);
	} else if (cfg->nvme) {
		size_t n = strcspn(cfg->nvme, ":");
		if (asprintf(&cfg->state_dir, "%.*s/.spillway", (int)n, cfg->nvme) < 0)
			cfg->state_dir = NULL;
	}
	return 0;
}
