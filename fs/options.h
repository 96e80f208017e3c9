/*
 * options — the mount options: one declarative fuse_opt table into a raw
 * struct, then one validation/defaults pass into struct spw_config.
 * A bad value yields one line naming the option, the value and what is
 * accepted; nothing is mounted. Not thread-safe (runs once before mount).
 */
#ifndef SPW_OPTIONS_H
#define SPW_OPTIONS_H

#include "common/config.h"

#include <fuse_lowlevel.h>
#include <stddef.h>

/* Parse spillway's options out of args (the rest stays for libfuse) and
 * validate them against mountpoint. Returns 0, or -1 with err filled (cfg
 * then holds nothing to free: opt_free is harmless). */
int opt_parse(struct fuse_args *args, const char *mountpoint, struct spw_config *cfg, char *err,
	      size_t errlen);
void opt_free(struct spw_config *cfg);
void opt_help(void);

#endif
