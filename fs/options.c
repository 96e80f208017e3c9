#include "fs/options.h"

#include "common/log.h"
#include "common/size.h"
#include "tier/store/store_s3.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* What the user wrote, before validation. */
struct raw_opts {
	char *hot_dir, *hot_size, *chunk_size, *log_level;
	char *nvme, *spill_threshold, *low_watermark, *hard_watermark, *min_spill_size;
	char *io_workers, *restore, *write_wait, *gc_threshold;
	char *s3, *s3_endpoint, *s3_region, *s3_part_size, *s3_credentials, *s3_ca_file;
	char *s3_buffers;
	char *s3_path_style, *nvme_threshold, *metrics, *metrics_interval;
	char *state_dir, *journal_sync_ms, *checkpoint_size, *io_engine;
	char *hot_min, *mem_reserve, *mem_pressure;
	int s3_path_style_flag, takeover, keep_hot;
	int allow_other, default_permissions;
	char *bad; /* first unknown option */
};

#define OPT(name)                                                                                  \
	{                                                                                          \
#name "=%s", offsetof(struct raw_opts, name), 0                                    \
	}
static const struct fuse_opt spw_opts[] = {
    OPT(hot_dir),
    OPT(hot_size),
    OPT(chunk_size),
    OPT(log_level),
    OPT(nvme),
    OPT(spill_threshold),
    OPT(low_watermark),
    OPT(hard_watermark),
    OPT(min_spill_size),
    OPT(io_workers),
    OPT(restore),
    OPT(write_wait),
    OPT(gc_threshold),
    OPT(s3),
    OPT(s3_endpoint),
    OPT(s3_region),
    OPT(s3_part_size),
    OPT(s3_buffers),
    OPT(s3_credentials),
    OPT(s3_ca_file),
    OPT(s3_path_style),
    OPT(nvme_threshold),
    OPT(metrics),
    OPT(metrics_interval),
    OPT(state_dir),
    OPT(journal_sync_ms),
    OPT(checkpoint_size),
    OPT(io_engine),
    OPT(hot_min),
    OPT(mem_reserve),
    OPT(mem_pressure),
    {"takeover", offsetof(struct raw_opts, takeover), 1},
    {"keep_hot", offsetof(struct raw_opts, keep_hot), 1},
    {"s3_path_style", offsetof(struct raw_opts, s3_path_style_flag), 1},
    /* seen and passed on to the kernel */
    {"allow_other", offsetof(struct raw_opts, allow_other), 1},
    {"default_permissions", offsetof(struct raw_opts, default_permissions), 1},
    FUSE_OPT_KEY("allow_other", FUSE_OPT_KEY_KEEP),
    FUSE_OPT_KEY("default_permissions", FUSE_OPT_KEY_KEEP),
    FUSE_OPT_END,
};

/* Options libfuse, the kernel or mount(8)/fstab understand: passed on. */
static const char *const fuse_known[] = {
    "allow_root", "auto_unmount", "fsname=",	   "subtype=",	 "max_read=",
    "ro",	  "rw",		  "suid",	   "nosuid",	 "dev",
    "nodev",	  "exec",	  "noexec",	   "async",	 "sync",
    "dirsync",	  "atime",	  "noatime",	   "nodiratime", "relatime",
    "norelatime", "strictatime",  "nostrictatime", "lazytime",	 "nolazytime",
    "debug",	  "max_threads=", "clone_fd",	   NULL,
};
/* fstab-only words mount.fuse3 may hand us: accepted and dropped. */
static const char *const fstab_words[] = {
    "defaults", "auto",	  "noauto", "user", "nouser",	"users",
    "_netdev",	"nofail", "owner",  "x-",   "comment=", NULL,
};

static int matches(const char *arg, const char *const *list)
{
	for (int i = 0; list[i]; i++) {
		size_t l = strlen(list[i]);
		if (list[i][l - 1] == '=' || list[i][l - 1] == '-' ? strncmp(arg, list[i], l) == 0
								   : strcmp(arg, list[i]) == 0)
			return 1;
	}
	return 0;
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct raw_opts *raw = data;
	if (key == FUSE_OPT_KEY_KEEP)
		return 1;
	if (key != FUSE_OPT_KEY_OPT || arg[0] == '-')
		return 1; /* non-options and flags like -d: libfuse's business */
	if (matches(arg, fuse_known))
		return 1;
	if (matches(arg, fstab_words))
		return 0;
	if (!raw->bad)
		raw->bad = strdup(arg);
	return 0;
}

void opt_help(void)
{
	printf(
	    "spillway options (-o name=value,...):\n"
	    "    hot_dir=DIR            RAM tier directory (default "
	    "/dev/shm/spillway-<uid>-<hash>)\n"
	    "    hot_size=SIZE          RAM budget (default: half of hot_dir's filesystem)\n"
	    "    hot_min=SIZE           the budget never shrinks below this under memory\n"
	    "                           pressure (default hot_size/8)\n"
	    "    mem_reserve=SIZE       keep this much of the node's (or cgroup's) memory\n"
	    "                           available (default min(1G, 5%% of RAM); 0: off)\n"
	    "    mem_pressure=on|off    shrink the budget under memory pressure (default on)\n"
	    "    keep_hot               unmount keeps the hot files in RAM (fast remount)\n"
	    "    chunk_size=SIZE        residency granularity, power of two 1M..64M (default 4M)\n"
	    "    nvme=DIR[:DIR...]      cold directories for spilled segments\n"
	    "    spill_threshold=F      start spilling above F x hot_size (default 0.75)\n"
	    "    low_watermark=F        spill until below F x hot_size (default 0.60)\n"
	    "    hard_watermark=F       above this, spill partial segments (default 0.95)\n"
	    "    min_spill_size=SIZE    smallest segment when not under pressure (default 64M)\n"
	    "    io_workers=N           parallel segment writes / restore reads, 1..256 (default "
	    "8)\n"
	    "    restore=open|lazy      restore a cold file on open, or only chunks read (default "
	    "open)\n"
	    "    write_wait=DURATION    longest a writer waits for room before ENOSPC (default "
	    "60s)\n"
	    "    gc_threshold=F         compact segments below F live (default 0.5)\n"
	    "    s3=s3://BUCKET/PREFIX  S3 cold tier (alone, or below nvme)\n"
	    "    s3_endpoint=URL        http(s)://host[:port] (default AWS for s3_region)\n"
	    "    s3_region=REGION       signing region (default us-east-1)\n"
	    "    s3_path_style[=0|1]    path-style URLs (MinIO, Ceph RGW, local servers)\n"
	    "    s3_part_size=SIZE      multipart part size, 5M..5G (default 16M)\n"
	    "    s3_buffers=SIZE        part buffers of all uploads together, whole parts\n"
	    "                           (default 48M, at least 2 parts)\n"
	    "    s3_credentials=FILE    AWS credentials file, mode 0600 (default: AWS_* env)\n"
	    "    s3_ca_file=FILE        CA bundle for a private TLS endpoint\n"
	    "    nvme_threshold=F       with nvme and s3: demote segments above F full (0.90)\n"
	    "    metrics=FILE           Prometheus text file, rewritten atomically\n"
	    "    metrics_interval=DUR   how often (default 5s)\n"
	    "    state_dir=DIR|none     journal and checkpoints (default <first nvme>/.spillway;\n"
	    "                           required with s3 alone; none: nothing survives unmount)\n"
	    "    journal_sync_ms=N      group commit period in ms, 0..60000 (default 1000;\n"
	    "                           0: every change is synced before the reply)\n"
	    "    checkpoint_size=SIZE   journal size that triggers a checkpoint, 64K..4G (64M)\n"
	    "    takeover               with s3: attach a prefix another node still holds\n"
	    "    io_engine=uring|psync  cold-tier I/O through io_uring or pread/pwrite (uring)\n"
	    "    log_level=LEVEL        error, warn, info, debug (default info)\n"
	    "Sizes take K/M/G/T suffixes (powers of 1024); durations ms/s/m/h.\n"
	    "allow_other requires default_permissions.\n");
}

/* The reason stays one line whatever the value quoted in it holds. */
static void one_line(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
}

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		snprintf(err, errlen, __VA_ARGS__);                                                \
		goto fail;                                                                         \
	} while (0)

static int parse_size_opt(const char *name, const char *v, uint64_t *out, char *err, size_t errlen)
{
	if (size_parse(v, out) < 0) {
		snprintf(err, errlen,
			 "option '%s': invalid value '%s': expected a size like 512M or 8G "
			 "(K/M/G/T suffixes)",
			 name, v);
		return -1;
	}
	return 0;
}

static int parse_frac_opt(const char *name, const char *v, double *out, char *err, size_t errlen)
{
	if (fraction_parse(v, out) < 0 || *out <= 0) {
		snprintf(
		    err, errlen,
		    "option '%s': invalid value '%s': expected a fraction above 0 and at most 1",
		    name, v);
		return -1;
	}
	return 0;
}

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

/* Validate a colon-separated list of cold directories. */
static int check_nvme(const char *list, const char *hot_dir, const char *mnt, char *err,
		      size_t errlen)
{
	char *copy = strdup(list), *save = NULL, *d;
	int ret = -1, n = 0;
	if (!copy)
		return -1;
	for (d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		char real[PATH_MAX];
		struct stat st;
		n++;
		if (d[0] != '/')
			FAIL("option 'nvme': invalid value '%s': '%s' is not an absolute path",
			     list, d);
		if (stat(d, &st) < 0)
			FAIL("option 'nvme': invalid value '%s': '%s': %s", list, d,
			     strerror(errno));
		if (!S_ISDIR(st.st_mode))
			FAIL("option 'nvme': invalid value '%s': '%s' is not a directory", list, d);
		if (!realpath(d, real))
			FAIL("option 'nvme': invalid value '%s': '%s': %s", list, d,
			     strerror(errno));
		if (strcmp(real, hot_dir) == 0)
			FAIL("option 'nvme': invalid value '%s': '%s' is the hot_dir itself", list,
			     d);
		if (strcmp(real, mnt) == 0)
			FAIL("option 'nvme': invalid value '%s': '%s' is the mountpoint itself",
			     list, d);
		if (access(real, W_OK) < 0)
			FAIL("option 'nvme': invalid value '%s': '%s' is not writable", list, d);
	}
	if (n == 0)
		FAIL("option 'nvme': invalid value '%s': expected DIR[:DIR...]", list);
	ret = 0;
fail:
	free(copy);
	return ret;
}

int opt_parse(struct fuse_args *args, const char *mountpoint, struct spw_config *cfg, char *err,
	      size_t errlen)
{
	struct raw_opts raw = {0};
	char real[PATH_MAX], buf[PATH_MAX + 64];
	struct stat st;
	int ret = -1, r;
	char *created = NULL; /* hot_dir made here: removed again on failure */

	memset(cfg, 0, sizeof(*cfg));
	cfg->chunk_size = 4ULL << 20;
	cfg->log_level = LOG_INFO;
	cfg->spill_threshold = 0.75;
	cfg->low_watermark = 0.60;
	cfg->hard_watermark = 0.95;
	cfg->min_spill_size = 64ULL << 20;
	cfg->io_workers = 8;
	cfg->restore = RESTORE_OPEN;
	cfg->write_wait_ms = 60000;
	cfg->gc_threshold = 0.5;
	cfg->nvme_threshold = 0.90;
	cfg->metrics_interval_ms = 5000;
	cfg->s3_part_size = 16ULL << 20;
	cfg->journal_sync_ms = 1000;
	cfg->checkpoint_size = 64ULL << 20;

	if (fuse_opt_parse(args, &raw, spw_opts, opt_proc) < 0)
		FAIL("cannot parse options");
	if (raw.bad)
		FAIL("unknown option '%s' (see spillway --help)", raw.bad);

	/* mountpoint: must exist, be a directory and be empty */
	if (!mountpoint)
		FAIL("no mountpoint given (usage: spillway [options] MOUNTPOINT)");
	if (!realpath(mountpoint, real))
		FAIL("mountpoint '%s': %s", mountpoint, strerror(errno));
	if (stat(real, &st) < 0 || !S_ISDIR(st.st_mode))
		FAIL("mountpoint '%s': not a directory", mountpoint);
	if ((r = dir_is_empty(real)) <= 0)
		FAIL("mountpoint '%s': %s", mountpoint, r < 0 ? strerror(-r) : "not empty");
	cfg->mountpoint = strdup(real);

	cfg->allow_other = raw.allow_other;
	cfg->default_permissions = raw.default_permissions;
	if (raw.allow_other && !raw.default_permissions)
		FAIL("option 'allow_other' requires 'default_permissions' (otherwise every user "
		     "could read every file)");

	if (raw.log_level && (cfg->log_level = spw_log_parse_level(raw.log_level)) < 0)
		FAIL("option 'log_level': invalid value '%s': expected error, warn, info or debug",
		     raw.log_level);

	if (raw.chunk_size) {
		if (parse_size_opt("chunk_size", raw.chunk_size, &cfg->chunk_size, err, errlen))
			goto fail;
		if (cfg->chunk_size < (1ULL << 20) || cfg->chunk_size > (64ULL << 20) ||
		    (cfg->chunk_size & (cfg->chunk_size - 1)))
			FAIL("option 'chunk_size': invalid value '%s': must be a power of two "
			     "between 1M and 64M",
			     raw.chunk_size);
	}

	/* hot_dir: absolute; created 0700 if missing (by the hot tier) */
	if (raw.hot_dir) {
		if (raw.hot_dir[0] != '/')
			FAIL("option 'hot_dir': invalid value '%s': must be an absolute path",
			     raw.hot_dir);
		if (mkdir(raw.hot_dir, 0700) == 0)
			created = strdup(raw.hot_dir);
		else if (errno != EEXIST)
			FAIL("option 'hot_dir': cannot create '%s': %s", raw.hot_dir,
			     strerror(errno));
		if (!realpath(raw.hot_dir, buf))
			FAIL("option 'hot_dir': '%s': %s", raw.hot_dir, strerror(errno));
		if (stat(buf, &st) < 0 || !S_ISDIR(st.st_mode))
			FAIL("option 'hot_dir': '%s' is not a directory", raw.hot_dir);
		if (strcmp(buf, real) == 0 ||
		    (strncmp(buf, real, strlen(real)) == 0 && buf[strlen(real)] == '/'))
			FAIL("option 'hot_dir': '%s' lies inside the mountpoint", raw.hot_dir);
		cfg->hot_dir = strdup(buf);
	} else {
		snprintf(buf, sizeof(buf), "/dev/shm/spillway-%u-%08x", (unsigned)getuid(),
			 fnv(real));
		if (mkdir(buf, 0700) == 0)
			created = strdup(buf);
		else if (errno != EEXIST)
			FAIL("option 'hot_dir': cannot create default '%s': %s", buf,
			     strerror(errno));
		cfg->hot_dir = strdup(buf);
	}

	{
		struct statvfs sv;
		uint64_t fs_size;
		if (statvfs(cfg->hot_dir, &sv) < 0)
			FAIL("option 'hot_dir': '%s': %s", cfg->hot_dir, strerror(errno));
		fs_size = (uint64_t)sv.f_blocks * sv.f_frsize;
		if (raw.hot_size) {
			if (parse_size_opt("hot_size", raw.hot_size, &cfg->hot_size, err, errlen))
				goto fail;
			if (cfg->hot_size < cfg->chunk_size * 2)
				FAIL("option 'hot_size': invalid value '%s': must be at least two "
				     "chunks (%lluM)",
				     raw.hot_size, (unsigned long long)(cfg->chunk_size * 2 >> 20));
			if (cfg->hot_size > fs_size)
				FAIL("option 'hot_size': invalid value '%s': larger than hot_dir's "
				     "filesystem (%lluM)",
				     raw.hot_size, (unsigned long long)(fs_size >> 20));
		} else {
			cfg->hot_size = fs_size / 2;
		}
	}

	/* elastic budget: hot_size is the ceiling, hot_min the floor */
	cfg->hot_min = cfg->hot_size / 8 > cfg->chunk_size * 2 ? cfg->hot_size / 8
							       : cfg->chunk_size * 2;
	if (raw.hot_min) {
		if (parse_size_opt("hot_min", raw.hot_min, &cfg->hot_min, err, errlen))
			goto fail;
		if (cfg->hot_min < cfg->chunk_size * 2 || cfg->hot_min > cfg->hot_size)
			FAIL("option 'hot_min': invalid value '%s': must be between two chunks "
			     "(%lluM) and hot_size (%lluM)",
			     raw.hot_min, (unsigned long long)(cfg->chunk_size * 2 >> 20),
			     (unsigned long long)(cfg->hot_size >> 20));
	}
	{
		uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
		cfg->mem_reserve = ram / 20 < (1ULL << 30) ? ram / 20 : (1ULL << 30);
		if (raw.mem_reserve) {
			if (!strcmp(raw.mem_reserve, "off"))
				cfg->mem_reserve = 0;
			else if (parse_size_opt("mem_reserve", raw.mem_reserve, &cfg->mem_reserve,
						err, errlen))
				goto fail;
			if (cfg->mem_reserve >= ram)
				FAIL("option 'mem_reserve': invalid value '%s': must be below the "
				     "node's memory (%lluM), or 0/off",
				     raw.mem_reserve, (unsigned long long)(ram >> 20));
		}
	}
	cfg->mem_pressure = 1;
	if (raw.mem_pressure) {
		if (!strcmp(raw.mem_pressure, "on"))
			cfg->mem_pressure = 1;
		else if (!strcmp(raw.mem_pressure, "off"))
			cfg->mem_pressure = 0;
		else
			FAIL("option 'mem_pressure': invalid value '%s': expected on or off",
			     raw.mem_pressure);
	}
	cfg->keep_hot = raw.keep_hot;

	if (raw.spill_threshold && parse_frac_opt("spill_threshold", raw.spill_threshold,
						  &cfg->spill_threshold, err, errlen))
		goto fail;
	if (raw.low_watermark &&
	    parse_frac_opt("low_watermark", raw.low_watermark, &cfg->low_watermark, err, errlen))
		goto fail;
	if (raw.hard_watermark &&
	    parse_frac_opt("hard_watermark", raw.hard_watermark, &cfg->hard_watermark, err, errlen))
		goto fail;
	if (cfg->low_watermark >= cfg->spill_threshold)
		FAIL("option 'low_watermark': invalid value '%g': must be below spill_threshold "
		     "(%g)",
		     cfg->low_watermark, cfg->spill_threshold);
	if (cfg->hard_watermark < cfg->spill_threshold)
		FAIL(
		    "option 'hard_watermark': invalid value '%g': must be at least spill_threshold "
		    "(%g)",
		    cfg->hard_watermark, cfg->spill_threshold);
	if (raw.gc_threshold &&
	    parse_frac_opt("gc_threshold", raw.gc_threshold, &cfg->gc_threshold, err, errlen))
		goto fail;
	if (raw.min_spill_size) {
		if (parse_size_opt("min_spill_size", raw.min_spill_size, &cfg->min_spill_size, err,
				   errlen))
			goto fail;
		if (cfg->min_spill_size < cfg->chunk_size || cfg->min_spill_size > (16ULL << 30))
			FAIL("option 'min_spill_size': invalid value '%s': must be between "
			     "chunk_size and 16G",
			     raw.min_spill_size);
	}
	if (raw.io_workers) {
		char *end;
		unsigned long v = strtoul(raw.io_workers, &end, 10);
		if (raw.io_workers[0] < '0' || raw.io_workers[0] > '9' || *end || v < 1 || v > 256)
			FAIL("option 'io_workers': invalid value '%s': expected an integer 1..256",
			     raw.io_workers);
		cfg->io_workers = (unsigned)v;
	}
	if (raw.restore) {
		if (strcmp(raw.restore, "open") == 0)
			cfg->restore = RESTORE_OPEN;
		else if (strcmp(raw.restore, "lazy") == 0)
			cfg->restore = RESTORE_LAZY;
		else
			FAIL("option 'restore': invalid value '%s': expected open or lazy",
			     raw.restore);
	}
	if (raw.write_wait && (duration_parse_ms(raw.write_wait, &cfg->write_wait_ms) < 0 ||
			       cfg->write_wait_ms > 86400000ULL))
		FAIL("option 'write_wait': invalid value '%s': expected a duration like 500ms, 60s "
		     "or 5m (at most 24h)",
		     raw.write_wait);
	if (raw.nvme) {
		if (check_nvme(raw.nvme, cfg->hot_dir, cfg->mountpoint, err, errlen) < 0)
			goto fail;
		cfg->nvme = strdup(raw.nvme);
	}
	if (raw.nvme_threshold &&
	    parse_frac_opt("nvme_threshold", raw.nvme_threshold, &cfg->nvme_threshold, err, errlen))
		goto fail;
	if (raw.s3) {
		char *bucket = NULL, *prefix = NULL, why[256];
		if (s3_url_parse_err(raw.s3, &bucket, &prefix, why, sizeof(why)) < 0)
			FAIL("option 's3': invalid value '%s': %s", raw.s3, why);
		free(bucket);
		free(prefix);
		cfg->s3 = strdup(raw.s3);
	}
	if (raw.s3_endpoint) {
		if (strncmp(raw.s3_endpoint, "http://", 7) &&
		    strncmp(raw.s3_endpoint, "https://", 8))
			FAIL(
			    "option 's3_endpoint': invalid value '%s': expected http://HOST[:PORT] "
			    "or https://HOST[:PORT]",
			    raw.s3_endpoint);
		cfg->s3_endpoint = strdup(raw.s3_endpoint);
	}
	if (raw.s3_region) {
		for (const char *c = raw.s3_region; *c; c++)
			if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-'))
				FAIL("option 's3_region': invalid value '%s': expected a region "
				     "name like us-east-1",
				     raw.s3_region);
		cfg->s3_region = strdup(raw.s3_region);
	}
	cfg->s3_path_style = raw.s3_path_style_flag;
	if (raw.s3_path_style) {
		if (!strcmp(raw.s3_path_style, "1") || !strcmp(raw.s3_path_style, "true"))
			cfg->s3_path_style = 1;
		else if (!strcmp(raw.s3_path_style, "0") || !strcmp(raw.s3_path_style, "false"))
			cfg->s3_path_style = 0;
		else
			FAIL("option 's3_path_style': invalid value '%s': expected 0 or 1",
			     raw.s3_path_style);
	}
	if (raw.s3_part_size) {
		if (parse_size_opt("s3_part_size", raw.s3_part_size, &cfg->s3_part_size, err,
				   errlen))
			goto fail;
		if (cfg->s3_part_size < S3_MIN_PART_SIZE || cfg->s3_part_size > S3_MAX_PART_SIZE ||
		    cfg->s3_part_size % 4096)
			FAIL(
			    "option 's3_part_size': invalid value '%s': must be between 5M and 5G, "
			    "a multiple of 4K",
			    raw.s3_part_size);
	}
	if (raw.s3_buffers) {
		if (parse_size_opt("s3_buffers", raw.s3_buffers, &cfg->s3_buffers, err, errlen))
			goto fail;
		if (cfg->s3_buffers < cfg->s3_part_size || cfg->s3_buffers > (64ULL << 30))
			FAIL(
			    "option 's3_buffers': invalid value '%s': must be between s3_part_size "
			    "and 64G",
			    raw.s3_buffers);
	}
	if (raw.s3_credentials) {
		struct s3_creds cr;
		char why[512];
		if (raw.s3_credentials[0] != '/')
			FAIL(
			    "option 's3_credentials': invalid value '%s': must be an absolute path",
			    raw.s3_credentials);
		if (s3_credentials_load(raw.s3_credentials, &cr, why, sizeof(why)) < 0)
			FAIL("option 's3_credentials': '%s': %s", raw.s3_credentials, why);
		s3_credentials_free(&cr);
		cfg->s3_credentials = strdup(raw.s3_credentials);
	}
	if (raw.s3_ca_file) {
		if (access(raw.s3_ca_file, R_OK) < 0)
			FAIL("option 's3_ca_file': '%s': %s", raw.s3_ca_file, strerror(errno));
		cfg->s3_ca_file = strdup(raw.s3_ca_file);
	}
	if (raw.metrics) {
		char *slash = strrchr(raw.metrics, '/');
		struct stat mst;
		if (raw.metrics[0] != '/' || !slash || !slash[1])
			FAIL("option 'metrics': invalid value '%s': expected an absolute file path",
			     raw.metrics);
		*slash = '\0';
		r = stat(slash == raw.metrics ? "/" : raw.metrics, &mst);
		*slash = '/';
		if (r < 0 || !S_ISDIR(mst.st_mode))
			FAIL("option 'metrics': invalid value '%s': its directory does not exist",
			     raw.metrics);
		cfg->metrics = strdup(raw.metrics);
	}
	if (raw.metrics_interval &&
	    (duration_parse_ms(raw.metrics_interval, &cfg->metrics_interval_ms) < 0 ||
	     cfg->metrics_interval_ms < 100 || cfg->metrics_interval_ms > 3600000))
		FAIL(
		    "option 'metrics_interval': invalid value '%s': expected a duration from 100ms "
		    "to 1h",
		    raw.metrics_interval);
	if (!cfg->s3 && (raw.s3_endpoint || raw.s3_region || raw.s3_part_size || raw.s3_buffers ||
			 raw.s3_credentials || raw.s3_ca_file))
		FAIL("option 's3_*' given without 's3=s3://BUCKET/PREFIX'");
	if (raw.journal_sync_ms) {
		char *end;
		unsigned long v = strtoul(raw.journal_sync_ms, &end, 10);
		if (raw.journal_sync_ms[0] < '0' || raw.journal_sync_ms[0] > '9' || *end ||
		    v > 60000)
			FAIL("option 'journal_sync_ms': invalid value '%s': expected an integer "
			     "0..60000",
			     raw.journal_sync_ms);
		cfg->journal_sync_ms = v;
	}
	if (raw.checkpoint_size) {
		if (parse_size_opt("checkpoint_size", raw.checkpoint_size, &cfg->checkpoint_size,
				   err, errlen))
			goto fail;
		if (cfg->checkpoint_size < (64ULL << 10) || cfg->checkpoint_size > (4ULL << 30))
			FAIL("option 'checkpoint_size': invalid value '%s': expected a size from "
			     "64K to 4G",
			     raw.checkpoint_size);
	}
	if (raw.io_engine) {
		if (!strcmp(raw.io_engine, "psync"))
			cfg->io_psync = 1;
		else if (strcmp(raw.io_engine, "uring"))
			FAIL("option 'io_engine': invalid value '%s': expected uring or psync",
			     raw.io_engine);
	}
	cfg->takeover = raw.takeover;
	if (raw.takeover && !cfg->s3)
		FAIL("option 'takeover' needs 's3=s3://BUCKET/PREFIX'");
	/* state_dir: absolute, or none; default in the first nvme directory */
	if (raw.state_dir && !strcmp(raw.state_dir, "none")) {
		cfg->state_dir = NULL;
	} else if (raw.state_dir) {
		if (raw.state_dir[0] != '/')
			FAIL("option 'state_dir': invalid value '%s': must be an absolute path or "
			     "none",
			     raw.state_dir);
		if (!strncmp(raw.state_dir, cfg->hot_dir, strlen(cfg->hot_dir)) &&
		    (raw.state_dir[strlen(cfg->hot_dir)] == '/' ||
		     !raw.state_dir[strlen(cfg->hot_dir)]))
			FAIL("option 'state_dir': invalid value '%s': must not be inside hot_dir "
			     "(RAM does not survive a reboot)",
			     raw.state_dir);
		if (!strncmp(raw.state_dir, cfg->mountpoint, strlen(cfg->mountpoint)) &&
		    (raw.state_dir[strlen(cfg->mountpoint)] == '/' ||
		     !raw.state_dir[strlen(cfg->mountpoint)]))
			FAIL("option 'state_dir': invalid value '%s': must not be inside the "
			     "mountpoint",
			     raw.state_dir);
		cfg->state_dir = strdup(raw.state_dir);
	} else if (cfg->nvme) {
		size_t n = strcspn(cfg->nvme, ":");
		if (asprintf(&cfg->state_dir, "%.*s/.spillway", (int)n, cfg->nvme) < 0)
			cfg->state_dir = NULL;
	} else if (cfg->s3) {
		FAIL("option 's3' alone needs 'state_dir=DIR' on a local disk for the journal "
		     "(or state_dir=none: nothing survives an unmount)");
	}
	ret = 0;
fail:
	if (ret < 0) { /* leave nothing behind */
		one_line(err);
		if (created)
			rmdir(created);
		opt_free(cfg);
		memset(cfg, 0, sizeof(*cfg));
	}
	free(created);
	free(raw.hot_dir);
	free(raw.hot_size);
	free(raw.chunk_size);
	free(raw.log_level);
	free(raw.nvme);
	free(raw.spill_threshold);
	free(raw.low_watermark);
	free(raw.hard_watermark);
	free(raw.min_spill_size);
	free(raw.io_workers);
	free(raw.restore);
	free(raw.write_wait);
	free(raw.gc_threshold);
	free(raw.s3);
	free(raw.s3_endpoint);
	free(raw.s3_region);
	free(raw.s3_part_size);
	free(raw.s3_buffers);
	free(raw.s3_credentials);
	free(raw.s3_ca_file);
	free(raw.s3_path_style);
	free(raw.nvme_threshold);
	free(raw.metrics);
	free(raw.metrics_interval);
	free(raw.state_dir);
	free(raw.journal_sync_ms);
	free(raw.checkpoint_size);
	free(raw.io_engine);
	free(raw.hot_min);
	free(raw.mem_reserve);
	free(raw.mem_pressure);
	free(raw.bad);
	return ret;
}

void opt_free(struct spw_config *cfg)
{
	free(cfg->mountpoint);
	free(cfg->hot_dir);
	free(cfg->nvme);
	free(cfg->s3);
	free(cfg->s3_endpoint);
	free(cfg->s3_region);
	free(cfg->s3_credentials);
	free(cfg->s3_ca_file);
	free(cfg->metrics);
	free(cfg->state_dir);
}
