/*
 * options — the mount options: one table (opt_table) declares each option
 * once: name, kind, the spw_config field it fills, bounds, default and its
 * help/README/man text. Parsing, validation, defaults, --help and the
 * documentation's option lists all come from it. A bad value yields one line
 * naming the option, the value and what is accepted; nothing is mounted.
 * Not thread-safe (runs once before mount); the table is const.
 */
#ifndef SPW_OPTIONS_H
#define SPW_OPTIONS_H

#include "common/config.h"

#include <fuse_lowlevel.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* How a value is spelled (and what the field holds). */
enum opt_kind {
	OPT_SIZE,     /* 512M, 8G: uint64_t bytes, within [min, max] */
	OPT_DURATION, /* 500ms, 60s, 5m, 1h: uint64_t ms, within [min, max] */
	OPT_COUNT,    /* decimal integer within [min, max]: unsigned or uint64_t */
	OPT_FRACTION, /* above 0, at most 1: double */
	OPT_ENUM,     /* one of words: int */
	OPT_FLAG,     /* the bare name, no value: int 1 */
	OPT_PATH,     /* a path: strdup'd char *, then checked by the row's hook */
	OPT_STRING,   /* any text: strdup'd char *, then checked by the row's hook */
};

enum {
	OPT_POW2 = 1 << 0,	  /* size: a power of two */
	OPT_ALIGN4K = 1 << 1,	  /* size: a multiple of 4K */
	OPT_OFF_IS_ZERO = 1 << 2, /* size: "off" means 0 */
	OPT_BARE = 1 << 3,	  /* enum: the bare name, no value, means 1 */
	OPT_NOCASE = 1 << 4,	  /* enum: words match in any case */
	OPT_KEEP = 1 << 5,	  /* also passed on to libfuse and the kernel */
	OPT_HIDDEN = 1 << 6,	  /* a standard mount option: not in the option lists */
};

struct opt_word {
	const char *word;
	int value;
	int hidden; /* accepted, but not offered in messages and help */
};

struct opt_ctx;

struct opt_spec {
	const char *name;
	enum opt_kind kind;
	size_t off, width;	      /* the field in struct spw_config */
	uint64_t min, max;	      /* size (bytes), duration (ms), count bounds */
	unsigned flags;		      /* OPT_* above */
	const struct opt_word *words; /* enum: ends with a NULL word */
	const char *def;      /* default, parsed like a user's value; NULL: none or computed */
	const char *def_doc;  /* the default as documented, when not def */
	const char *accepted; /* what the message says is accepted (else from the kind) */
	int (*check)(struct opt_ctx *c, const char *value); /* after every value parsed */
	const char *section;				    /* starts a man page subsection */
	const char *meta;				    /* --help: NAME=meta */
	const char *help;    /* one line: --help and the README's table */
	const char *man_tag; /* man .TP head, %s is the name */
	const char *man;     /* man body (troff), without the Default line */
};

#define OPT_COUNT_MAX 48
extern const struct opt_spec opt_table[];
extern const size_t opt_count;

/* Parse spillway's options out of args (the rest stays for libfuse) and
 * validate them against mountpoint. Returns 0, or -1 with err filled (cfg
 * then holds nothing to free: opt_free is harmless). */
int opt_parse(struct fuse_args *args, const char *mountpoint, struct spw_config *cfg, char *err,
	      size_t errlen);
void opt_free(struct spw_config *cfg);

/* The option list rendered from opt_table, for --help, man/spillway.8 (the
 * lines between its "options:" markers) or README.md's options table. */
enum opt_doc_format { OPT_DOC_HELP, OPT_DOC_MAN, OPT_DOC_README };
void opt_doc(FILE *out, enum opt_doc_format fmt);
void opt_help(void); /* opt_doc(stdout, OPT_DOC_HELP) */

#endif
