/*
 * options_i.h — private to the mount options (options.c: the table, the
 * parsing and the rules between options, --help and the documentation;
 * options_check.c: the checks that look at the world — paths, mounts, the
 * machine's memory, the S3 credentials). What opt_parse carries between its
 * steps, and the calls both files use. Not thread-safe: opt_parse runs once,
 * before the mount.
 */
#ifndef SPW_OPTIONS_I_H
#define SPW_OPTIONS_I_H

#include "fs/options.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#define KiB 1024ULL
#define MiB (1024ULL * KiB)
#define GiB (1024ULL * MiB)

/* What opt_parse carries between its steps. */
struct opt_ctx {
	struct spw_config *cfg;
	char *raw[OPT_COUNT_MAX]; /* the value given for each row, or NULL */
	int given[OPT_COUNT_MAX]; /* the row was named (flags: set) */
	char *bad;		  /* first unknown option */
	char *created;		  /* hot_dir made here: removed again on failure */
	char *default_dir;	  /* the default hot_dir's name, when it existed */
	char *err;
	size_t errlen;
};

/* ---- options.c ---- */

/* The value given for an option, or NULL; whether it was named at all. */
const char *opt_raw(const struct opt_ctx *c, const char *name);
int opt_given(const struct opt_ctx *c, const char *name);
/* The one-line failure message into c->err: returns -1. */
static inline int __attribute__((format(printf, 2, 3))) opt_fail(struct opt_ctx *c, const char *fmt,
								  ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, c->errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* ---- options_check.c: 0, or -1 with the message (opt_fail) ---- */

/* The mountpoint: must exist, be a directory, be empty, and not be served
 * by a spillway already; sets cfg->mountpoint (its real path). */
int opt_check_mountpoint(struct opt_ctx *c, const char *mountpoint);
/* The rows' check hooks (opt_table[].check), run in table order after every
 * value is parsed; value: what was given, or NULL. */
int opt_check_hot_dir(struct opt_ctx *c, const char *v);
int opt_check_nvme(struct opt_ctx *c, const char *v);
int opt_check_s3(struct opt_ctx *c, const char *v);
int opt_check_s3_endpoint(struct opt_ctx *c, const char *v);
int opt_check_s3_region(struct opt_ctx *c, const char *v);
int opt_check_s3_credentials(struct opt_ctx *c, const char *v);
int opt_check_s3_ca_file(struct opt_ctx *c, const char *v);
int opt_check_metrics(struct opt_ctx *c, const char *v);
int opt_check_state_dir(struct opt_ctx *c, const char *v);

#endif
