/*
 * spillway-fsck — check a spillway filesystem offline: its index (journal and
 * checkpoints in STATE_DIR) against the segments of its cold tier; repair it,
 * or rebuild the index from the segments' footers.
 *   spillway-fsck [--verify-data] [--repair] [--rebuild] [--quiet] STATE_DIR
 * Exit status as fsck(8): 0 clean, 1 problems found and all repaired, 4
 * problems left, 8 operational error (e.g. the filesystem is mounted), 16
 * usage. One line per problem on stdout, naming files by path.
 *
 * DESIGN
 * - jrnl_open takes STATE_DIR's lock, so a mounted filesystem is refused;
 *   the cold directories' .spillway.lock files are taken too. The journal is
 *   replayed (jrnl_recover) into a model of the index: inodes, directory
 *   entries, chunk maps, xattrs, segment table. Nameless inodes are the
 *   journal's leftovers of unlinked files (there is no "free" record): they
 *   are not part of the filesystem and are ignored.
 * - Every segment in the stores is listed and its header and footer read
 *   once; the footers give a map (ino, chunk) -> copies, which serves the
 *   checks, the search for another copy of a damaged chunk and --rebuild.
 * - Every change (repair, rebuild) goes through change(): appended to the
 *   journal, then applied to the model with the same code that replays the
 *   journal; at the end a checkpoint is written from the model (jrnl_close
 *   with `final`; none after an operational error: the journal has every
 *   change). Without a usable checkpoint (--rebuild of a lost state), the
 *   checkpoint file is written here with the journal's codec, under the
 *   filesystem's uuid (from STATE_DIR/tiers or the segments' headers).
 * - Segments are deleted only when no journal record names them, after the
 *   journal changes that could have started using them.
 * - Single-threaded; the journal's own thread never checkpoints here
 *   (checkpoint_bytes is out of reach), so the model needs no lock.
 */
#include "common/crc32c.h"
#include "common/log.h"
#include "index/journal.h"
#include "tier/segment.h"
#include "tier/store.h"
#include "tier/store_s3.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EX_CLEAN 0
#define EX_FIXED 1
#define EX_LEFT	 4
#define EX_OPER	 8
#define EX_USAGE 16

#define ROOT_INO     1
#define MAX_NVME     64
#define MAX_CHUNKS   (1ull << 32) /* a chunk index beyond this is a corrupt record */
#define PATH_MAX_OUT 4096

/* ---- a small chained hash (key: a 64-bit hash; callers compare the rest) ---- */

struct hent {
	struct hent *next;
	uint64_t key;
};

struct htab {
	struct hent **b;
	size_t nb, n;
};

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static uint64_t key2(uint64_t a, uint64_t b)
{
	return mix64(a * 0x9e3779b97f4a7c15ull ^ mix64(b));
}

static uint64_t key_name(uint64_t parent, const char *name, uint32_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (uint32_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)name[i]) * 0x100000001b3ull;
	return key2(parent, h);
}

static int ht_add(struct htab *t, struct hent *e, uint64_t key)
{
	if (t->n + 1 > t->nb) {
		size_t nb = t->nb ? t->nb * 2 : 1024;
		struct hent **b = calloc(nb, sizeof(*b));
		if (!b)
			return -ENOMEM;
		for (size_t i = 0; i < t->nb; i++)
			for (struct hent *x = t->b[i], *nx; x; x = nx) {
				nx = x->next;
				x->next = b[x->key & (nb - 1)];
				b[x->key & (nb - 1)] = x;
			}
		free(t->b);
		t->b = b;
		t->nb = nb;
	}
	e->key = key;
	e->next = t->b[key & (t->nb - 1)];
	t->b[key & (t->nb - 1)] = e;
	t->n++;
	return 0;
}

static struct hent *ht_bucket(const struct htab *t, uint64_t key)
{
	return t->nb ? t->b[key & (t->nb - 1)] : NULL;
}

static void ht_del(struct htab *t, struct hent *e)
{
	for (struct hent **pp = &t->b[e->key & (t->nb - 1)]; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			t->n--;
			return;
		}
}

/* Every entry of t into a malloc'ed array (caller frees); NULL when empty. */
static void **ht_array(const struct htab *t, size_t *n)
{
	void **a = t->n ? malloc(t->n * sizeof(*a)) : NULL;
	size_t k = 0;
	if (a)
		for (size_t i = 0; i < t->nb; i++)
			for (struct hent *x = t->b[i]; x; x = x->next)
				a[k++] = x;
	*n = a ? k : 0;
	return a;
}

/* ---- the model of the index ---- */

enum { CS_NONE = 0, CS_LOC, CS_DIRTY };

struct fchunk {
	uint8_t state; /* CS_* */
	struct jrec_loc loc;
};

struct fxattr {
	struct fxattr *next;
	char *name;
	uint32_t nlen, vlen;
	void *val;
};

struct fdent;

struct finode {
	struct hent h; /* key mix64(ino) */
	uint64_t ino;
	struct jrec_attr attr;
	char *target; /* symlink target */
	uint32_t tlen;
	struct fxattr *xattrs;
	struct fchunk *chunks;
	uint64_t nchunks;
	/* set by ns_scan */
	uint32_t nlinks;
	int reachable;
	struct fdent *pdent;	/* the entry it was first reached by */
	struct fdent *children; /* directories: entries in it */
	int lost;		/* damaged beyond repair: names removed */
	int rescue;		/* lost its only name in a bad entry: relink it */
};

struct fdent {
	struct hent h; /* key key_name(parent, name) */
	uint64_t parent, ino;
	char *name;
	uint32_t nlen;
	struct fdent *sib; /* set by ns_scan */
};

struct found;

struct fseg {
	struct hent h; /* key mix64(id) */
	struct jrec_seg seg;
	struct found *copy; /* the copy in the store, NULL: missing */
	int reported;	    /* missing, and a file using it was reported */
};

/* A segment present in a store. */
struct found {
	struct hent h; /* key mix64(id) */
	int store;
	uint64_t id, size, payload;
	uint32_t dev;
	int mret; /* seg_read_manifest's result */
	int ours; /* header uuid is the filesystem's */
	uint8_t uuid[16];
	struct seg_entry *ents;
	uint32_t n;
	struct copy *copies;
	uint8_t *verified;   /* per entry: data read and crc good */
	uint64_t chunk_refs; /* live chunks pointing into it */
	int removed;
};

/* One footer entry, hashed by (ino, chunk). */
struct copy {
	struct hent h;
	struct found *f;
	uint32_t ei;
	int bad; /* its data failed verification */
};

struct tiers {
	char *nvme[MAX_NVME];
	int nnvme;
	char *s3, *s3_endpoint, *s3_region, *s3_credentials, *s3_ca_file;
	int s3_path_style;
	uint64_t s3_part_size, chunk_size;
	int have_uuid;
	uint8_t uuid[16];
};

struct fsck {
	const char *dir;
	int verify, repair, rebuild, quiet, progress;
	struct tiers tiers;
	uint64_t chunk_size;
	uint8_t uuid[16];
	int have_uuid;
	struct journal *j;
	int started; /* jrnl_start done: changes are appended */
	int manual;  /* rebuild without a usable checkpoint: write one here */
	int changed; /* the model differs from what the journal holds */
	int lockfds[MAX_NVME];
	int nlocks;

	struct store *st[2];	 /* 0: first cold tier, 1: s3 below nvme */
	int configured[2];	 /* the tier exists */
	int usable[2];		 /* opened and listed */
	const char *st_name[2];	 /* for messages */
	char *devname[MAX_NVME]; /* store 0's devices when nvme */

	struct htab inodes, dents, segs, found, copies;
	uint64_t next_ino, next_seg;
	uint64_t orig_next_ino;
	uint64_t unknown_recs;

	uint64_t problems, fixed, lost;
	int oper; /* an operational error happened: exit 8 */
	uint64_t files, dirs, chunks_checked, bytes_verified;
};

/* ---- output ---- */

#define S(n) ((n) == 1 ? "" : "s") /* plural */

static void oper_err(struct fsck *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void oper_err(struct fsck *f, const char *fmt, ...)
{
	va_list ap;
	if (f->progress)
		fputs("\r\033[K", stderr);
	fputs("spillway-fsck: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	f->oper = 1;
}

/* A problem line; `fixed`: 1 repaired, 0 left. */
static void problem(struct fsck *f, int fixed, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void problem(struct fsck *f, int fixed, const char *fmt, ...)
{
	va_list ap;
	if (f->progress)
		fputs("\r\033[K", stderr);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	f->problems++;
	f->fixed += fixed ? 1 : 0;
}

static void note(struct fsck *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct fsck *f, const char *fmt, ...)
{
	va_list ap;
	if (f->quiet)
		return;
	if (f->progress)
		fputs("\r\033[K", stderr);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void progress(struct fsck *f, const char *what, uint64_t done, uint64_t total)
{
	static time_t last;
	time_t now;
	if (!f->progress)
		return;
	now = time(NULL);
	if (now == last && done != total)
		return;
	last = now;
	fprintf(stderr, "\r\033[K%s %" PRIu64 "/%" PRIu64 " (%d%%)", what, done, total,
		total ? (int)(done * 100 / total) : 100);
	if (done == total)
		fputs("\r\033[K", stderr);
	fflush(stderr);
}

/* "64 MiB", "1.5 GiB", "512 bytes" */
static const char *human(uint64_t v, char *buf, size_t len)
{
	static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
	double d = (double)v;
	int u = -1;
	if (v < 1024) {
		snprintf(buf, len, "%" PRIu64 " bytes", v);
		return buf;
	}
	while (d >= 1024 && u < 4) {
		d /= 1024;
		u++;
	}
	if (d == (double)(uint64_t)d)
		snprintf(buf, len, "%.0f %s", d, unit[u]);
	else
		snprintf(buf, len, "%.1f %s", d, unit[u]);
	return buf;
}

/* "chunk 3" / "chunks 0-3,7" from sorted chunk numbers (duplicates allowed). */
static const char *chunk_list(const uint64_t *c, size_t n, char *buf, size_t len)
{
	size_t used, distinct = 0;
	for (size_t i = 0; i < n; i++)
		distinct += i == 0 || c[i] != c[i - 1];
	used = (size_t)snprintf(buf, len, "%s ", distinct == 1 ? "chunk" : "chunks");
	for (size_t i = 0; i < n && used < len;) {
		size_t k = i;
		while (k + 1 < n && (c[k + 1] == c[k] || c[k + 1] == c[k] + 1))
			k++;
		if (used + 48 > len) {
			snprintf(buf + used, len - used, "...");
			break;
		}
		used += (size_t)snprintf(buf + used, len - used, "%s%" PRIu64, i ? "," : "", c[i]);
		if (c[k] != c[i])
			used += (size_t)snprintf(buf + used, len - used, "-%" PRIu64, c[k]);
		i = k + 1;
	}
	return buf;
}

/* ---- model: lookups and record application ---- */

static struct finode *ino_get(struct fsck *f, uint64_t ino)
{
	uint64_t k = mix64(ino);
	for (struct hent *e = ht_bucket(&f->inodes, k); e; e = e->next)
		if (e->key == k && ((struct finode *)e)->ino == ino)
			return (struct finode *)e;
	return NULL;
}

static struct finode *ino_make(struct fsck *f, uint64_t ino)
{
	struct finode *in = ino_get(f, ino);
	if (in)
		return in;
	if (!(in = calloc(1, sizeof(*in))))
		return NULL;
	in->ino = ino;
	if (ht_add(&f->inodes, &in->h, mix64(ino)) < 0) {
		free(in);
		return NULL;
	}
	return in;
}

static struct fdent *dent_get(struct fsck *f, uint64_t parent, const char *name, uint32_t nlen)
{
	uint64_t k = key_name(parent, name, nlen);
	for (struct hent *e = ht_bucket(&f->dents, k); e; e = e->next) {
		struct fdent *d = (struct fdent *)e;
		if (e->key == k && d->parent == parent && d->nlen == nlen &&
		    memcmp(d->name, name, nlen) == 0)
			return d;
	}
	return NULL;
}

static struct fseg *seg_get(struct fsck *f, uint64_t id)
{
	uint64_t k = mix64(id);
	for (struct hent *e = ht_bucket(&f->segs, k); e; e = e->next)
		if (e->key == k && ((struct fseg *)e)->seg.id == id)
			return (struct fseg *)e;
	return NULL;
}

static int chunks_reserve(struct finode *in, uint64_t n)
{
	uint64_t cap = in->nchunks ? in->nchunks : 8;
	struct fchunk *c;
	if (n <= in->nchunks)
		return 0;
	if (n > MAX_CHUNKS)
		return -EFBIG;
	while (cap < n)
		cap *= 2;
	if (!(c = realloc(in->chunks, cap * sizeof(*c))))
		return -ENOMEM;
	memset(c + in->nchunks, 0, (cap - in->nchunks) * sizeof(*c));
	in->chunks = c;
	in->nchunks = cap;
	return 0;
}

static void *memdup(const void *p, size_t n)
{
	void *q = malloc(n ? n : 1);
	if (q && n)
		memcpy(q, p, n);
	return q;
}

static int is_dir(const struct finode *in)
{
	return S_ISDIR(in->attr.mode);
}

/* Apply one record to the model (journal replay and our own changes).
 * 0, -ENOMEM; records that name unknown inodes are counted and skipped. */
static int apply(void *arg, const struct jrec *r)
{
	struct fsck *f = arg;
	struct finode *in;
	struct fdent *d;
	struct fseg *s;

	switch (r->type) {
	case JR_META:
		if (r->next_ino > f->next_ino)
			f->next_ino = r->next_ino;
		if (r->next_seg > f->next_seg)
			f->next_seg = r->next_seg;
		return 0;
	case JR_INODE:
		if (!(in = ino_make(f, r->ino)))
			return -ENOMEM;
		in->attr = r->attr;
		if (r->name_len || !in->target) {
			char *t = memdup(r->name, r->name_len); /* r->name may be in->target */
			if (!t)
				return -ENOMEM;
			free(in->target);
			in->target = t;
			in->tlen = r->name_len;
		}
		return 0;
	case JR_LINK:
		/* as the daemon replays it: a name in a directory or for an inode
		 * that does not exist (yet, in a fuzzy checkpoint) is skipped */
		if (!(in = ino_get(f, r->parent)) || !is_dir(in) || !ino_get(f, r->ino))
			return 0;
		if ((d = dent_get(f, r->parent, r->name, r->name_len))) {
			d->ino = r->ino;
			return 0;
		}
		if (!(d = calloc(1, sizeof(*d))) || !(d->name = memdup(r->name, r->name_len))) {
			free(d);
			return -ENOMEM;
		}
		d->parent = r->parent;
		d->ino = r->ino;
		d->nlen = r->name_len;
		if (ht_add(&f->dents, &d->h, key_name(r->parent, r->name, r->name_len)) < 0) {
			free(d->name);
			free(d);
			return -ENOMEM;
		}
		return 0;
	case JR_UNLINK:
		if ((d = dent_get(f, r->parent, r->name, r->name_len))) {
			ht_del(&f->dents, &d->h);
			free(d->name);
			free(d);
		}
		return 0;
	case JR_XATTR_SET:
	case JR_XATTR_DEL: {
		struct fxattr **pp, *x;
		if (!(in = ino_get(f, r->ino))) {
			f->unknown_recs++;
			return 0;
		}
		for (pp = &in->xattrs; *pp; pp = &(*pp)->next)
			if ((*pp)->nlen == r->name_len &&
			    !memcmp((*pp)->name, r->name, r->name_len))
				break;
		if (r->type == JR_XATTR_DEL) {
			if ((x = *pp)) {
				*pp = x->next;
				free(x->name);
				free(x->val);
				free(x);
			}
			return 0;
		}
		if (!(x = *pp)) {
			if (!(x = calloc(1, sizeof(*x))) ||
			    !(x->name = memdup(r->name, r->name_len))) {
				free(x);
				return -ENOMEM;
			}
			x->nlen = r->name_len;
			*pp = x;
		}
		free(x->val);
		if (!(x->val = memdup(r->value, r->value_len)))
			return -ENOMEM;
		x->vlen = r->value_len;
		return 0;
	}
	case JR_CHUNK_LOC:
	case JR_CHUNK_DIRTY: {
		int ret;
		if (!(in = ino_get(f, r->ino)) || !S_ISREG(in->attr.mode)) {
			f->unknown_recs++;
			return 0;
		}
		if ((ret = chunks_reserve(in, r->chunk + 1)) < 0) {
			if (ret != -EFBIG)
				return ret;
			f->unknown_recs++;
			return 0;
		}
		in->chunks[r->chunk].state = r->type == JR_CHUNK_LOC ? CS_LOC : CS_DIRTY;
		in->chunks[r->chunk].loc = r->loc;
		return 0;
	}
	case JR_CHUNK_ABSENT:
		if (!(in = ino_get(f, r->ino))) {
			f->unknown_recs++;
			return 0;
		}
		for (uint64_t c = r->chunk; c < in->nchunks && c - r->chunk < r->count; c++)
			in->chunks[c].state = CS_NONE;
		return 0;
	case JR_SEG_ADD:
		if (!(s = seg_get(f, r->seg.id))) {
			if (!(s = calloc(1, sizeof(*s))))
				return -ENOMEM;
			if (ht_add(&f->segs, &s->h, mix64(r->seg.id)) < 0) {
				free(s);
				return -ENOMEM;
			}
		}
		s->seg = r->seg;
		s->copy = NULL; /* bound again by bind_segments */
		return 0;
	case JR_SEG_DEL:
		if ((s = seg_get(f, r->seg.id))) {
			ht_del(&f->segs, &s->h);
			free(s);
		}
		return 0;
	}
	return 0;
}

/* ---- namespace: reachability and paths ---- */

static int ns_scan(struct fsck *f)
{
	size_t n, nd, head = 0, tail = 0;
	void **all = ht_array(&f->inodes, &n), **dents = ht_array(&f->dents, &nd);
	struct finode **queue = NULL, *root;
	int ret = 0;

	if ((f->inodes.n && !all) || (f->dents.n && !dents) ||
	    !(queue = malloc((n + 1) * sizeof(*queue)))) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct finode *in = all[i];
		in->nlinks = 0;
		in->reachable = 0;
		in->pdent = NULL;
		in->children = NULL;
	}
	for (size_t i = 0; i < nd; i++) {
		struct fdent *d = dents[i];
		struct finode *t = ino_get(f, d->ino), *p = ino_get(f, d->parent);
		d->sib = NULL;
		if (t)
			t->nlinks++;
		if (p && is_dir(p)) {
			d->sib = p->children;
			p->children = d;
		}
	}
	if ((root = ino_get(f, ROOT_INO)) && is_dir(root)) {
		root->reachable = 1;
		queue[tail++] = root;
	}
	while (head < tail) {
		struct finode *dir = queue[head++];
		for (struct fdent *d = dir->children; d; d = d->sib) {
			struct finode *t = ino_get(f, d->ino);
			if (!t || t->reachable || t->ino == ROOT_INO)
				continue;
			t->reachable = 1;
			t->pdent = d;
			if (is_dir(t))
				queue[tail++] = t;
		}
	}
out:
	free(queue);
	free(all);
	free(dents);
	return ret;
}

/* Path of a reachable inode ("/a/b"), else "<inode N>". */
static const char *path_of(struct fsck *f, const struct finode *in, char *buf, size_t len)
{
	size_t pos = len - 1;
	buf[pos] = 0;
	if (in->ino == ROOT_INO)
		return "/";
	if (!in->reachable) {
		snprintf(buf, len, "<inode %" PRIu64 ">", in->ino);
		return buf;
	}
	for (const struct finode *x = in; x && x->pdent; x = ino_get(f, x->pdent->parent)) {
		const struct fdent *d = x->pdent;
		if (d->nlen + 1 > pos) {
			memcpy(buf, "...", 3);
			return buf;
		}
		pos -= d->nlen;
		memcpy(buf + pos, d->name, d->nlen);
		buf[--pos] = '/';
	}
	return buf + pos;
}

/* Path of entry d ("/dir/name"), its parent being reachable or not. */
static const char *dent_path(struct fsck *f, const struct fdent *d, char *buf, size_t len)
{
	char pb[PATH_MAX_OUT];
	struct finode *p = ino_get(f, d->parent);
	const char *pp = p ? path_of(f, p, pb, sizeof(pb)) : NULL;
	if (!pp)
		snprintf(buf, len, "<missing directory %" PRIu64 ">/%.*s", d->parent, (int)d->nlen,
			 d->name);
	else
		snprintf(buf, len, "%s%s%.*s", pp, strcmp(pp, "/") ? "/" : "", (int)d->nlen,
			 d->name);
	return buf;
}

/* ---- changes: model + journal ---- */

static int snapshot(struct fsck *f, int (*emit)(void *, const struct jrec *), void *ectx);

static int emit_jrnl(void *e, const struct jrec *r)
{
	return jrnl_emit(e, r);
}

static int snap_jrnl(void *arg, struct jrnl_emitter *e)
{
	return snapshot(arg, emit_jrnl, e);
}

/* Append r to the journal, then apply it to the model (r's strings may
 * belong to the model). 0 or -errno (reported). */
static int change(struct fsck *f, const struct jrec *r)
{
	int ret;
	if (!f->manual && !f->started) {
		if ((ret = jrnl_start(f->j, snap_jrnl, f)) < 0) {
			oper_err(f, "%s: cannot start the journal: %s", f->dir, strerror(-ret));
			return ret;
		}
		f->started = 1;
	}
	if (!f->manual && (ret = jrnl_append(f->j, r)) < 0) {
		oper_err(f, "%s: journal append failed: %s", f->dir, strerror(-ret));
		return ret;
	}
	f->changed = 1;
	if ((ret = apply(f, r)) < 0) {
		oper_err(f, "%s", strerror(-ret));
		return ret;
	}
	return 0;
}

static int change_meta(struct fsck *f)
{
	struct jrec r = {.type = JR_META, .next_ino = f->next_ino, .next_seg = f->next_seg};
	return change(f, &r);
}

static int change_seg_add(struct fsck *f, struct found *fd)
{
	struct jrec r = {.type = JR_SEG_ADD,
			 .seg = {.id = fd->id,
				 .len = fd->size,
				 .payload = fd->payload,
				 .dev = fd->dev,
				 .store = (uint8_t)fd->store}};
	struct fseg *s;
	int ret = change(f, &r);
	if (ret == 0 && (s = seg_get(f, fd->id)))
		s->copy = fd;
	return ret;
}

static int change_loc(struct fsck *f, uint64_t ino, uint64_t chunk, const struct found *fd,
		      const struct seg_entry *e)
{
	struct jrec r = {.type = JR_CHUNK_LOC,
			 .ino = ino,
			 .chunk = chunk,
			 .loc = {.seg_id = fd->id,
				 .off = e->off,
				 .len = e->len,
				 .crc = e->crc,
				 .dev = fd->dev,
				 .gen = (uint32_t)e->gen}};
	return change(f, &r);
}

static int change_link(struct fsck *f, uint64_t parent, const char *name, uint64_t ino)
{
	struct jrec r = {.type = JR_LINK,
			 .parent = parent,
			 .ino = ino,
			 .name = name,
			 .name_len = (uint32_t)strlen(name)};
	return change(f, &r);
}

static int change_unlink(struct fsck *f, uint64_t parent, const char *name, uint32_t nlen)
{
	struct jrec r = {.type = JR_UNLINK, .parent = parent, .name = name, .name_len = nlen};
	return change(f, &r);
}

static int change_inode(struct fsck *f, uint64_t ino, const struct jrec_attr *a, const char *target,
			uint32_t tlen)
{
	struct jrec r = {
	    .type = JR_INODE, .ino = ino, .attr = *a, .name = target, .name_len = tlen};
	return change(f, &r);
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The highest inode number anything knows of, plus one. */
static uint64_t ino_ceiling(struct fsck *f)
{
	uint64_t top = f->next_ino > ROOT_INO ? f->next_ino : ROOT_INO + 1;
	for (size_t i = 0; i < f->inodes.nb; i++)
		for (struct hent *e = f->inodes.b[i]; e; e = e->next)
			if (((struct finode *)e)->ino >= top)
				top = ((struct finode *)e)->ino + 1;
	for (size_t i = 0; i < f->copies.nb; i++)
		for (struct hent *e = f->copies.b[i]; e; e = e->next) {
			struct copy *c = (struct copy *)e;
			if (c->f->ents[c->ei].ino >= top)
				top = c->f->ents[c->ei].ino + 1;
		}
	return top;
}

/* /lost+found (created as a directory inode above every known number). */
static int lost_found(struct fsck *f, uint64_t *out)
{
	static const char *const names[] = {"lost+found", "lost+found.fsck"};
	struct finode *root = ino_get(f, ROOT_INO);
	for (int i = 0; i < 2; i++) {
		struct fdent *d = dent_get(f, ROOT_INO, names[i], (uint32_t)strlen(names[i]));
		struct finode *in = d ? ino_get(f, d->ino) : NULL;
		struct jrec_attr a;
		uint64_t ino;
		int ret;
		if (in && is_dir(in)) {
			*out = in->ino;
			return 0;
		}
		if (d)
			continue;
		ino = ino_ceiling(f);
		memset(&a, 0, sizeof(a));
		a.mode = S_IFDIR | 0700;
		a.uid = root ? root->attr.uid : 0;
		a.gid = root ? root->attr.gid : 0;
		a.atime_ns = a.mtime_ns = a.ctime_ns = now_ns();
		f->next_ino = ino + 1;
		if ((ret = change_meta(f)) < 0 || (ret = change_inode(f, ino, &a, "", 0)) < 0 ||
		    (ret = change_link(f, ROOT_INO, names[i], ino)) < 0)
			return ret;
		*out = ino;
		return ns_scan(f);
	}
	oper_err(f, "no room for a lost+found directory in /");
	return -EEXIST;
}

/* ---- STATE_DIR/tiers ---- */

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int parse_uuid(const char *s, uint8_t out[16])
{
	if (strlen(s) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static void uuid_str(const uint8_t u[16], char out[33])
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", u[i]);
}

static int read_tiers(struct fsck *f)
{
	char path[PATH_MAX_OUT], line[8192];
	struct tiers *t = &f->tiers;
	FILE *fp;
	int lineno = 0;

	snprintf(path, sizeof(path), "%s/tiers", f->dir);
	if (!(fp = fopen(path, "r"))) {
		oper_err(f, "%s: %s (not a spillway state directory?)", path, strerror(errno));
		return -errno;
	}
	while (fgets(line, sizeof(line), fp)) {
		char *v, *k = line, *nl = strchr(line, '\n');
		lineno++;
		if (nl)
			*nl = 0;
		if (!*k || *k == '#')
			continue;
		if (!(v = strchr(k, '='))) {
			oper_err(f, "%s:%d: not key=value: '%s'", path, lineno, k);
			fclose(fp);
			return -EINVAL;
		}
		*v++ = 0;
		if (!strcmp(k, "nvme")) {
			char *save = NULL, *d, *copy = strdup(v);
			for (d = strtok_r(copy, ":", &save); d && t->nnvme < MAX_NVME;
			     d = strtok_r(NULL, ":", &save))
				t->nvme[t->nnvme++] = strdup(d);
			free(copy);
		} else if (!strcmp(k, "s3")) {
			t->s3 = strdup(v);
		} else if (!strcmp(k, "s3_endpoint")) {
			t->s3_endpoint = strdup(v);
		} else if (!strcmp(k, "s3_region")) {
			t->s3_region = strdup(v);
		} else if (!strcmp(k, "s3_path_style")) {
			t->s3_path_style = atoi(v) != 0;
		} else if (!strcmp(k, "s3_credentials")) {
			t->s3_credentials = strdup(v);
		} else if (!strcmp(k, "s3_ca_file")) {
			t->s3_ca_file = strdup(v);
		} else if (!strcmp(k, "s3_part_size")) {
			t->s3_part_size = strtoull(v, NULL, 10);
		} else if (!strcmp(k, "chunk_size")) {
			t->chunk_size = strtoull(v, NULL, 10);
		} else if (!strcmp(k, "uuid")) {
			if (parse_uuid(v, t->uuid) < 0) {
				oper_err(f, "%s:%d: bad uuid '%s'", path, lineno, v);
				fclose(fp);
				return -EINVAL;
			}
			t->have_uuid = 1;
		}
	}
	fclose(fp);
	if (!t->nnvme && !t->s3) {
		oper_err(f, "%s: names no cold tier (nvme= or s3=): nothing to check", path);
		return -EINVAL;
	}
	return 0;
}

/* Generations of the checkpoint.* / journal.* files: highest of both, and the
 * chunk size of the newest readable checkpoint header (0: none). */
static int scan_state(struct fsck *f, int *any, uint64_t *max_gen, uint64_t *ck_chunk)
{
	DIR *d = opendir(f->dir);
	struct dirent *de;
	uint64_t best = 0;
	int have_ck = 0;

	*any = 0;
	*max_gen = 0;
	*ck_chunk = 0;
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		const char *n = de->d_name, *hex;
		uint64_t g = 0;
		int ck = !strncmp(n, "checkpoint.", 11), ok = 1;
		if (!ck && strncmp(n, "journal.", 8))
			continue;
		hex = n + (ck ? 11 : 8);
		if (strlen(hex) != 16)
			continue;
		for (int i = 0; i < 16; i++) {
			int h = hexval(hex[i]);
			if (h < 0)
				ok = 0;
			g = g << 4 | (uint64_t)(h < 0 ? 0 : h);
		}
		if (!ok)
			continue;
		*any = 1;
		if (g > *max_gen)
			*max_gen = g;
		if (ck && (!have_ck || g > best)) {
			char path[PATH_MAX_OUT];
			uint8_t buf[128];
			struct jrec r;
			int fd;
			ssize_t got;
			snprintf(path, sizeof(path), "%s/%s", f->dir, n);
			if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
				continue;
			got = read(fd, buf, sizeof(buf));
			close(fd);
			if (got > 0 && jrnl_decode(buf, (size_t)got, &r) > 0 &&
			    r.type == JR_HEADER) {
				best = g;
				have_ck = 1;
				*ck_chunk = r.hdr.chunk_size;
			}
		}
	}
	closedir(d);
	return 0;
}

/* ---- stores ---- */

struct list_ctx {
	struct fsck *f;
	int store;
	int err;
};

static int list_cb(void *arg, uint64_t id, uint32_t dev, uint64_t size)
{
	struct list_ctx *lc = arg;
	struct found *fd = calloc(1, sizeof(*fd));
	if (!fd)
		return -ENOMEM;
	fd->store = lc->store;
	fd->id = id;
	fd->dev = dev;
	fd->size = size;
	if (ht_add(&lc->f->found, &fd->h, mix64(id)) < 0) {
		free(fd);
		return -ENOMEM;
	}
	return 0;
}

static int lock_nvme_dirs(struct fsck *f)
{
	for (int i = 0; i < f->tiers.nnvme; i++) {
		char lock[PATH_MAX_OUT];
		struct stat sb;
		int fd;
		if (stat(f->tiers.nvme[i], &sb) < 0 || !S_ISDIR(sb.st_mode)) {
			oper_err(f, "cold directory %s: %s", f->tiers.nvme[i],
				 errno ? strerror(errno) : "not a directory");
			return -ENOENT;
		}
		snprintf(lock, sizeof(lock), "%s/.spillway.lock", f->tiers.nvme[i]);
		fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int e = errno;
			if (fd >= 0)
				close(fd);
			oper_err(f, "cold directory %s: %s", f->tiers.nvme[i],
				 e == EWOULDBLOCK ? "in use by a spillway mount" : strerror(e));
			return -EBUSY;
		}
		f->lockfds[f->nlocks++] = fd;
	}
	return 0;
}

static int open_s3(struct fsck *f, struct store **out)
{
	char url[2048], why[512], us[33];
	const char *base = f->tiers.s3;
	size_t bl = strlen(base);
	const char *last = strrchr(base, '/');
	struct s3_config sc = {
	    .endpoint = f->tiers.s3_endpoint,
	    .region = f->tiers.s3_region,
	    .path_style = f->tiers.s3_path_style,
	    .part_size = f->tiers.s3_part_size,
	    .credentials_file = f->tiers.s3_credentials,
	    .ca_file = f->tiers.s3_ca_file,
	};
	int ret;

	while (bl > 5 && base[bl - 1] == '/')
		bl--;
	uuid_str(f->uuid, us);
	/* the daemon keeps its objects under <s3>/<uuid>/ */
	if (last && !strcmp(last + 1, us))
		snprintf(url, sizeof(url), "%.*s", (int)bl, base);
	else
		snprintf(url, sizeof(url), "%.*s/%s", (int)bl, base, us);
	sc.url = url;
	ret = store_s3_open(&sc, out, why, sizeof(why));
	if (ret < 0)
		oper_err(f, "s3 %s: %s; s3 segments not checked", url, why);
	return ret;
}

static int open_stores(struct fsck *f)
{
	int ret, s3_idx = f->tiers.nnvme ? 1 : 0;

	if (f->tiers.nnvme) {
		const char *dirs[MAX_NVME];
		if ((ret = lock_nvme_dirs(f)) < 0)
			return ret;
		for (int i = 0; i < f->tiers.nnvme; i++) {
			dirs[i] = f->tiers.nvme[i];
			f->devname[i] = f->tiers.nvme[i];
		}
		f->configured[0] = 1;
		f->st_name[0] = "nvme";
		if ((ret = store_nvme_open(dirs, f->tiers.nnvme, &f->st[0])) < 0) {
			oper_err(f, "cold directories: %s", strerror(-ret));
			return ret;
		}
		f->usable[0] = 1;
	}
	if (f->tiers.s3) {
		f->configured[s3_idx] = 1;
		f->st_name[s3_idx] = f->tiers.s3;
		if (open_s3(f, &f->st[s3_idx]) == 0)
			f->usable[s3_idx] = 1;
	}
	for (int s = 0; s < 2; s++) {
		struct list_ctx lc = {.f = f, .store = s};
		if (!f->usable[s])
			continue;
		ret = store_list(f->st[s], list_cb, &lc);
		if (ret < 0) {
			oper_err(f, "listing the segments of %s: %s", f->st_name[s],
				 strerror(-ret));
			f->usable[s] = 0;
			if (ret == -ENOMEM)
				return ret;
		}
	}
	return 0;
}

static const char *dev_name(struct fsck *f, int store, uint32_t dev)
{
	if (store == 0 && f->tiers.nnvme && dev < (uint32_t)f->tiers.nnvme)
		return f->devname[dev];
	return f->st_name[store] ? f->st_name[store] : "?";
}

/* Read every listed segment's header and footer; index the footers. */
static int read_manifests(struct fsck *f)
{
	size_t n, k = 0;
	struct found **all = (struct found **)ht_array(&f->found, &n);
	int ret = 0;

	if (f->found.n && !all)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct found *fd = all[i];
		progress(f, "reading segment footers", i, n);
		fd->mret = seg_read_manifest(f->st[fd->store], fd->id, fd->dev, fd->size, fd->uuid,
					     &fd->ents, &fd->n);
		if (fd->mret == -ENOMEM) {
			ret = -ENOMEM;
			break;
		}
		if (fd->mret < 0)
			continue;
		fd->ours = !f->have_uuid || !memcmp(fd->uuid, f->uuid, 16);
		if (!fd->ours)
			continue;
		if (fd->n && !(fd->copies = calloc(fd->n, sizeof(*fd->copies)))) {
			ret = -ENOMEM;
			break;
		}
		for (uint32_t e = 0; e < fd->n; e++) {
			fd->payload += fd->ents[e].len;
			fd->copies[e].f = fd;
			fd->copies[e].ei = e;
			k++;
			if ((ret = ht_add(&f->copies, &fd->copies[e].h,
					  key2(fd->ents[e].ino, fd->ents[e].chunk))) < 0)
				goto out;
		}
	}
	progress(f, "reading segment footers", n, n);
out:
	free(all);
	return ret;
}

/* The copy of segment id in `store` (preferring dev), or NULL. */
static struct found *found_get(struct fsck *f, int store, uint64_t id, uint32_t dev)
{
	struct found *any = NULL;
	uint64_t k = mix64(id);
	for (struct hent *e = ht_bucket(&f->found, k); e; e = e->next) {
		struct found *fd = (struct found *)e;
		if (e->key != k || fd->id != id || fd->store != store || fd->removed)
			continue;
		if (fd->dev == dev)
			return fd;
		if (!any)
			any = fd;
	}
	return any;
}

/* Bind each segment-table entry to its copy in the store. */
static void bind_segments(struct fsck *f)
{
	for (size_t i = 0; i < f->segs.nb; i++)
		for (struct hent *e = f->segs.b[i]; e; e = e->next) {
			struct fseg *s = (struct fseg *)e;
			s->copy = s->seg.store < 2
				      ? found_get(f, s->seg.store, s->seg.id, s->seg.dev)
				      : NULL;
		}
}

/* Is fd the copy the segment table points at? */
static int in_table(struct fsck *f, const struct found *fd)
{
	struct fseg *s = seg_get(f, fd->id);
	return s && s->copy == fd;
}

static struct seg_entry *entry_for(struct found *fd, uint64_t ino, uint64_t chunk, uint64_t off)
{
	for (uint32_t i = 0; i < fd->n; i++)
		if (fd->ents[i].ino == ino && fd->ents[i].chunk == chunk && fd->ents[i].off == off)
			return &fd->ents[i];
	return NULL;
}

/* Read a chunk and check its crc32c (once per footer entry). 0, 1 crc
 * mismatch, or -errno (read). */
static int verify_chunk(struct fsck *f, struct found *fd, const struct seg_entry *e)
{
	size_t alen = ((size_t)e->len + SEG_ALIGN - 1) / SEG_ALIGN * SEG_ALIGN;
	size_t ei = (size_t)(e - fd->ents);
	int mine = e >= fd->ents && ei < fd->n, ret;
	void *buf;
	if (mine && fd->verified && fd->verified[ei])
		return 0;
	if (!(buf = seg_buf_alloc(e->len)))
		return -ENOMEM;
	ret = store_read(f->st[fd->store], fd->id, fd->dev, e->off, buf, alen);
	if (ret == 0)
		ret = crc32c(0, buf, e->len) != e->crc;
	seg_buf_free(buf);
	f->bytes_verified += e->len;
	if (ret == 0 && mine && (fd->verified || (fd->verified = calloc(fd->n, 1))))
		fd->verified[ei] = 1;
	return ret;
}

/* ---- the checks ---- */

enum kind {
	K_NOTABLE = 1, /* in the store, not in the segment table (not damage) */
	K_DEV,	       /* the segment moved to another device (not damage) */
	K_NOSTORE,     /* the table names a tier that is not configured */
	K_MISSING,
	K_UNREADABLE,
	K_FOREIGN,
	K_MANIFEST,
	K_CRC,
	K_READERR,
};

#define DAMAGE(k) ((k) >= K_NOSTORE)

struct bad {
	int kind;
	uint64_t seg, chunk;
	int err; /* K_UNREADABLE, K_READERR */
};

struct badlist {
	struct bad *b;
	size_t n, cap;
};

static int bad_add(struct badlist *l, int kind, uint64_t seg, uint64_t chunk, int err)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct bad *b = realloc(l->b, cap * sizeof(*b));
		if (!b)
			return -ENOMEM;
		l->b = b;
		l->cap = cap;
	}
	l->b[l->n++] = (struct bad){.kind = kind, .seg = seg, .chunk = chunk, .err = err};
	return 0;
}

static int bad_cmp(const void *a, const void *b)
{
	const struct bad *x = a, *y = b;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	if (x->seg != y->seg)
		return x->seg < y->seg ? -1 : 1;
	if (x->chunk != y->chunk)
		return x->chunk < y->chunk ? -1 : 1;
	return 0;
}

/* Classify chunk c of in (a CS_LOC chunk) into l. */
static int check_chunk(struct fsck *f, struct finode *in, uint64_t c, struct badlist *l)
{
	const struct jrec_loc *loc = &in->chunks[c].loc;
	struct fseg *s = seg_get(f, loc->seg_id);
	struct found *fd;
	struct seg_entry *e;
	int store = s ? s->seg.store : -1, ret;

	if (store < 0) { /* not in the table: look in every store */
		for (int k = 0; k < 2 && store < 0; k++)
			if (f->usable[k] && found_get(f, k, loc->seg_id, loc->dev))
				store = k;
		if (store < 0) {
			for (int k = 0; k < 2; k++)
				if (f->configured[k] && !f->usable[k])
					return 0; /* may be there: not checked */
			return bad_add(l, K_MISSING, loc->seg_id, c, 0);
		}
	}
	if (store > 1 || !f->configured[store])
		return bad_add(l, K_NOSTORE, loc->seg_id, c, 0);
	if (!f->usable[store])
		return 0;
	fd = s ? s->copy : found_get(f, store, loc->seg_id, loc->dev);
	if (!fd) {
		if (s)
			s->reported = 1;
		return bad_add(l, K_MISSING, loc->seg_id, c, 0);
	}
	fd->chunk_refs++;
	if (!s && (ret = bad_add(l, K_NOTABLE, loc->seg_id, c, 0)) < 0)
		return ret;
	if (fd->mret < 0)
		return bad_add(l, K_UNREADABLE, loc->seg_id, c, fd->mret);
	if (!fd->ours)
		return bad_add(l, K_FOREIGN, loc->seg_id, c, 0);
	e = entry_for(fd, in->ino, c, loc->off);
	if (!e || e->len != loc->len || e->crc != loc->crc || e->gen != loc->gen)
		return bad_add(l, K_MANIFEST, loc->seg_id, c, 0);
	if (f->verify) {
		ret = verify_chunk(f, fd, e);
		if (ret == -ENOMEM)
			return ret;
		if (ret)
			return bad_add(l, ret > 0 ? K_CRC : K_READERR, loc->seg_id, c,
				       ret < 0 ? ret : 0);
	}
	if (loc->dev != fd->dev)
		return bad_add(l, K_DEV, loc->seg_id, c, 0);
	return 0;
}

/* Another good copy of chunk c of in (same gen, len and crc, data verified),
 * in a segment the table can point at; NULL if none. */
static struct copy *find_copy(struct fsck *f, struct finode *in, uint64_t c)
{
	const struct jrec_loc *loc = &in->chunks[c].loc;
	uint64_t k = key2(in->ino, c);
	for (struct hent *h = ht_bucket(&f->copies, k); h; h = h->next) {
		struct copy *cp = (struct copy *)h;
		struct found *fd = cp->f;
		struct seg_entry *e = &fd->ents[cp->ei];
		struct fseg *s;
		if (h->key != k || e->ino != in->ino || e->chunk != c || cp->bad || fd->removed)
			continue;
		if (e->gen != loc->gen || e->len != loc->len || e->crc != loc->crc)
			continue;
		if (fd->id == loc->seg_id && e->off == loc->off && fd->dev == loc->dev)
			continue; /* the damaged one */
		s = seg_get(f, fd->id);
		if (s && (s->seg.store != fd->store || (s->copy && s->copy != fd)))
			continue; /* the table means another segment by that id */
		if (verify_chunk(f, fd, e) != 0) {
			cp->bad = 1;
			continue;
		}
		return cp;
	}
	return NULL;
}

static const char *kind_text(struct fsck *f, const struct bad *b, char *buf, size_t len)
{
	switch (b->kind) {
	case K_UNREADABLE:
		snprintf(buf, len, "%s",
			 b->err == -EIO ? "bad header or footer" : strerror(-b->err));
		break;
	case K_READERR:
		snprintf(buf, len, "%s", strerror(-b->err));
		break;
	default:
		buf[0] = 0;
	}
	return buf;
}

/* Print the problems of one file, grouped by (kind, segment). */
static void report_file(struct fsck *f, struct finode *in, struct badlist *l, const char *suffix,
			int fixed)
{
	char path[PATH_MAX_OUT], chunks[512], why[256];
	const char *p = path_of(f, in, path, sizeof(path));
	uint64_t *cs = malloc(l->n * sizeof(*cs));

	if (!cs)
		return;
	qsort(l->b, l->n, sizeof(*l->b), bad_cmp);
	for (size_t i = 0; i < l->n;) {
		size_t k = i, m = 0;
		const struct bad *b = &l->b[i];
		while (k < l->n && l->b[k].kind == b->kind && l->b[k].seg == b->seg)
			cs[m++] = l->b[k++].chunk;
		chunk_list(cs, m, chunks, sizeof(chunks));
		kind_text(f, b, why, sizeof(why));
		switch (b->kind) {
		case K_NOTABLE:
			problem(f, f->repair,
				"segment %" PRIu64 " not in the segment table: %s (%s)%s", b->seg,
				p, chunks, f->repair ? " -- added" : "");
			break;
		case K_DEV:
			problem(f, f->repair,
				"%s of %s: segment %" PRIu64 " is on another device%s", chunks, p,
				b->seg, f->repair ? " -- location updated" : "");
			break;
		case K_NOSTORE:
			problem(f, fixed,
				"segment %" PRIu64 " is on a tier not configured: %s (%s)%s",
				b->seg, p, chunks, suffix);
			break;
		case K_MISSING:
			problem(f, fixed, "segment %" PRIu64 " missing: %s (%s)%s", b->seg, p,
				chunks, suffix);
			break;
		case K_UNREADABLE:
			problem(f, fixed, "segment %" PRIu64 " unreadable (%s): %s (%s)%s", b->seg,
				why, p, chunks, suffix);
			break;
		case K_FOREIGN:
			problem(f, fixed,
				"segment %" PRIu64 " belongs to another filesystem: %s (%s)%s",
				b->seg, p, chunks, suffix);
			break;
		case K_MANIFEST:
			problem(f, fixed, "%s of %s: not in segment %" PRIu64 "'s manifest%s",
				chunks, p, b->seg, suffix);
			break;
		case K_CRC:
			problem(f, fixed, "%s of %s: crc mismatch in segment %" PRIu64 "%s", chunks,
				p, b->seg, suffix);
			break;
		case K_READERR:
			problem(f, fixed, "%s of %s: read error in segment %" PRIu64 " (%s)%s",
				chunks, p, b->seg, why, suffix);
			break;
		}
		i = k;
	}
	free(cs);
}

/* Remove every name of in; with `lost`, it is lost: print "lost: PATH" for each. */
static int unlink_all(struct fsck *f, struct finode *in, int lost)
{
	size_t n;
	void **dents = ht_array(&f->dents, &n);
	int ret = 0;
	if (f->dents.n && !dents)
		return -ENOMEM;
	for (size_t i = 0; i < n && ret == 0; i++) {
		struct fdent *d = dents[i];
		char path[PATH_MAX_OUT];
		if (d->ino != in->ino)
			continue;
		if (lost)
			printf("lost: %s\n", dent_path(f, d, path, sizeof(path)));
		ret = change_unlink(f, d->parent, d->name, d->nlen);
	}
	free(dents);
	if (lost) {
		in->lost = 1;
		f->lost++;
	}
	return ret;
}

static int inode_cmp(const void *a, const void *b)
{
	const struct finode *x = *(struct finode *const *)a, *y = *(struct finode *const *)b;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* Sorted array of the reachable inodes (caller frees). */
static struct finode **reachable_inodes(struct fsck *f, size_t *n)
{
	size_t all_n, k = 0;
	struct finode **all = (struct finode **)ht_array(&f->inodes, &all_n);
	for (size_t i = 0; i < all_n; i++)
		if (all[i]->reachable)
			all[k++] = all[i];
	if (all)
		qsort(all, k, sizeof(*all), inode_cmp);
	*n = k;
	return all;
}

/* Check (and with --repair fix) the chunks of every reachable file. */
static int check_files(struct fsck *f)
{
	size_t n;
	struct finode **ins = reachable_inodes(f, &n);
	const char *what = f->verify ? "verifying chunks" : "checking chunks";
	uint64_t total = 0, done = 0;
	int ret = 0;

	if (f->inodes.n && !ins)
		return -ENOMEM;

	for (size_t i = 0; i < n; i++)
		for (uint64_t c = 0; S_ISREG(ins[i]->attr.mode) && c < ins[i]->nchunks; c++)
			total += ins[i]->chunks[c].state == CS_LOC;
	for (size_t i = 0; i < n && ret == 0; i++) {
		struct finode *in = ins[i];
		struct badlist l = {0};
		int damaged = 0, all_found = 1;
		struct copy **repl = NULL;

		if (is_dir(in))
			f->dirs++;
		else if (S_ISREG(in->attr.mode))
			f->files++;
		if (!S_ISREG(in->attr.mode))
			continue;
		for (uint64_t c = 0; c < in->nchunks && ret == 0; c++) {
			if (in->chunks[c].state != CS_LOC)
				continue;
			progress(f, what, done++, total);
			f->chunks_checked++;
			ret = check_chunk(f, in, c, &l);
		}
		if (ret < 0 || l.n == 0) {
			free(l.b);
			continue;
		}
		for (size_t k = 0; k < l.n; k++)
			damaged |= DAMAGE(l.b[k].kind);
		if (!f->repair) {
			report_file(f, in, &l, "", 0);
			free(l.b);
			continue;
		}
		/* segments used but missing from the table: add them first */
		for (size_t k = 0; k < l.n && ret == 0; k++) {
			struct fseg *s;
			struct found *fd = NULL;
			if (l.b[k].kind != K_NOTABLE || seg_get(f, l.b[k].seg))
				continue;
			for (int st = 0; st < 2; st++)
				if (f->usable[st] &&
				    (fd = found_get(f, st, l.b[k].seg,
						    in->chunks[l.b[k].chunk].loc.dev)))
					break;
			if (fd && (ret = change_seg_add(f, fd)) == 0 && (s = seg_get(f, fd->id)))
				s->copy = fd;
		}
		if (damaged && !(repl = calloc(l.n, sizeof(*repl))))
			ret = -ENOMEM;
		for (size_t k = 0; damaged && k < l.n && ret == 0; k++)
			if (DAMAGE(l.b[k].kind) && !(repl[k] = find_copy(f, in, l.b[k].chunk)))
				all_found = 0;
		if (ret < 0) {
			free(repl);
			free(l.b);
			break;
		}
		if (damaged && !all_found) {
			report_file(f, in, &l, " -- no other copy", 1);
			ret = unlink_all(f, in, 1);
		} else {
			report_file(f, in, &l, damaged ? " -- relocated to another copy" : "", 1);
			for (size_t k = 0; k < l.n && ret == 0; k++) {
				uint64_t c = l.b[k].chunk;
				struct found *fd;
				if (repl && repl[k]) {
					fd = repl[k]->f;
					if (!in_table(f, fd) && (ret = change_seg_add(f, fd)) < 0)
						break;
					ret = change_loc(f, in->ino, c, fd, &fd->ents[repl[k]->ei]);
				} else if (l.b[k].kind == K_DEV) {
					struct fseg *s = seg_get(f, l.b[k].seg);
					fd = s ? s->copy : NULL;
					if (fd)
						ret = change_loc(f, in->ino, c, fd,
								 entry_for(fd, in->ino, c,
									   in->chunks[c].loc.off));
				}
			}
		}
		free(repl);
		free(l.b);
	}
	progress(f, what, total, total);
	free(ins);
	return ret;
}

/* Link in (nameless or unreachable) into /lost+found as #<ino>. */
static int link_lost_found(struct fsck *f, struct finode *in)
{
	char name[32];
	uint64_t lf;
	int ret;
	if ((ret = lost_found(f, &lf)) < 0)
		return ret;
	snprintf(name, sizeof(name), "#%" PRIu64, in->ino);
	if ((ret = change_link(f, lf, name, in->ino)) < 0)
		return ret;
	return ns_scan(f);
}

/* The root directory, created (owned like STATE_DIR) when missing. */
static int check_root(struct fsck *f)
{
	struct finode *root = ino_get(f, ROOT_INO);
	struct jrec_attr a = {.mode = S_IFDIR | 0755};
	struct stat sb;
	int ret;

	if (root && is_dir(root))
		return 0;
	if (stat(f->dir, &sb) == 0) {
		a.uid = sb.st_uid;
		a.gid = sb.st_gid;
	}
	a.atime_ns = a.mtime_ns = a.ctime_ns = now_ns();
	problem(f, f->repair, "root directory %s%s", root ? "is not a directory" : "missing",
		f->repair ? " -- created" : "");
	if (!f->repair)
		return 1;
	if ((ret = change_inode(f, ROOT_INO, &a, "", 0)) < 0)
		return ret;
	return ns_scan(f);
}

/* Root, dangling entries, entries in non-directories or in missing
 * directories, inodes named but unreachable from / (cycles). */
static int check_namespace(struct fsck *f)
{
	size_t nd;
	void **dents;
	int ret;

	if ((ret = check_root(f)) != 0)
		return ret < 0 ? ret : 0;
	if (!(dents = ht_array(&f->dents, &nd)) && f->dents.n)
		return -ENOMEM;
	for (size_t i = 0; i < nd && ret == 0; i++) {
		struct fdent *d = dents[i];
		struct finode *t = ino_get(f, d->ino), *p = ino_get(f, d->parent);
		char path[PATH_MAX_OUT];
		const char *what;
		if (p && is_dir(p))
			continue; /* fine, or inside an unreachable tree (below) */
		if (!t)
			what = "entry for a missing inode";
		else if (p)
			what = "entry in a file that is not a directory";
		else
			what = "entry in a missing directory";
		if (p && !p->reachable && t)
			continue; /* a leftover inside an unlinked file */
		dent_path(f, d, path, sizeof(path));
		if (t)
			t->rescue = 1; /* may need a new name: see below */
		problem(f, f->repair, "%s: %s (inode %" PRIu64 ")%s", path, what, d->ino,
			f->repair ? " -- removed" : "");
		if (f->repair)
			ret = change_unlink(f, d->parent, d->name, d->nlen);
	}
	free(dents);
	if (ret < 0 || (ret = ns_scan(f)) < 0)
		return ret;
	for (;;) {
		size_t n;
		struct finode **all = (struct finode **)ht_array(&f->inodes, &n), *pick = NULL;
		if (f->inodes.n && !all)
			return -ENOMEM;
		if (all)
			qsort(all, n, sizeof(*all), inode_cmp);
		for (size_t i = 0; i < n; i++) {
			struct finode *in = all[i];
			if (in->reachable || in->ino == ROOT_INO || (!in->nlinks && !in->rescue))
				continue;
			if (!f->repair) {
				if (!in->rescue)
					problem(f, 0,
						"inode %" PRIu64
						" (%s) is named but not reachable from /",
						in->ino, is_dir(in) ? "directory" : "file");
			} else if (!pick || in->ino < pick->ino) {
				pick = in;
			}
		}
		free(all);
		if (!pick)
			return 0;
		if (!pick->rescue)
			problem(f, 1, "inode %" PRIu64 " (%s) is named but not reachable from /",
				pick->ino, is_dir(pick) ? "directory" : "file");
		note(f, "inode %" PRIu64 " moved to /lost+found/#%" PRIu64, pick->ino, pick->ino);
		pick->rescue = 0;
		if ((ret = unlink_all(f, pick, 0)) < 0 || (ret = link_lost_found(f, pick)) < 0)
			return ret;
	}
}

static int found_cmp(const void *a, const void *b)
{
	const struct found *x = *(struct found *const *)a, *y = *(struct found *const *)b;
	if (x->store != y->store)
		return x->store - y->store;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->dev < y->dev ? -1 : x->dev > y->dev;
}

static int seg_cmp(const void *a, const void *b)
{
	const struct fseg *x = *(struct fseg *const *)a, *y = *(struct fseg *const *)b;
	return x->seg.id < y->seg.id ? -1 : x->seg.id > y->seg.id;
}

/* Segment table against the stores: missing entries, wrong length or
 * device, and segments nobody references (deleted by --repair). */
static int check_segments(struct fsck *f)
{
	size_t n;
	struct fseg **segs = (struct fseg **)ht_array(&f->segs, &n);
	struct found **fds;
	char h1[32], h2[32];
	int ret = 0;

	if (f->segs.n && !segs)
		return -ENOMEM;
	if (segs)
		qsort(segs, n, sizeof(*segs), seg_cmp);
	for (size_t i = 0; i < n && ret == 0; i++) {
		struct fseg *s = segs[i];
		struct found *fd = s->copy;
		int st = s->seg.store;
		if (st > 1 || !f->configured[st]) {
			problem(f, f->repair,
				"segment %" PRIu64 " is on a tier not configured here%s", s->seg.id,
				f->repair ? " -- dropped from the segment table" : "");
		} else if (!f->usable[st]) {
			continue;
		} else if (!fd) {
			if (!s->reported)
				problem(f, f->repair,
					"segment %" PRIu64 " missing (%s, no file uses it)%s",
					s->seg.id, human(s->seg.len, h1, sizeof(h1)),
					f->repair ? " -- dropped from the segment table" : "");
			else if (f->repair)
				note(f, "segment %" PRIu64 " dropped from the segment table",
				     s->seg.id);
		} else if (fd->mret == 0 && fd->ours && s->seg.len != fd->size) {
			problem(f, f->repair,
				"segment %" PRIu64 ": %s in the store, the segment table says %s%s",
				s->seg.id, human(fd->size, h1, sizeof(h1)),
				human(s->seg.len, h2, sizeof(h2)),
				f->repair ? " -- table updated" : "");
			if (f->repair)
				ret = change_seg_add(f, fd);
			continue;
		} else if (fd->mret == 0 && fd->ours && s->seg.dev != fd->dev) {
			problem(f, f->repair,
				"segment %" PRIu64 " is in %s, the segment table says %s%s",
				s->seg.id, dev_name(f, st, fd->dev), dev_name(f, st, s->seg.dev),
				f->repair ? " -- table updated" : "");
			if (f->repair)
				ret = change_seg_add(f, fd);
			continue;
		} else {
			continue;
		}
		if (f->repair) {
			struct jrec r = {.type = JR_SEG_DEL, .seg = {.id = s->seg.id}};
			ret = change(f, &r);
		}
	}
	free(segs);
	if (ret < 0)
		return ret;
	fds = (struct found **)ht_array(&f->found, &n);
	if (f->found.n && !fds)
		return -ENOMEM;
	if (fds)
		qsort(fds, n, sizeof(*fds), found_cmp);
	for (size_t i = 0; i < n; i++) {
		struct found *fd = fds[i];
		struct fseg *s = seg_get(f, fd->id);
		char extra[PATH_MAX_OUT + 64] = "";
		int r = 0;
		if (fd->removed || in_table(f, fd) || fd->chunk_refs)
			continue; /* used (chunk_refs without --repair: reported with the files) */
		if (s && s->copy)
			snprintf(extra, sizeof(extra), ", a second copy in %s",
				 dev_name(f, fd->store, fd->dev));
		else if (fd->mret < 0)
			snprintf(extra, sizeof(extra), ", unreadable");
		else if (!fd->ours)
			snprintf(extra, sizeof(extra), ", another filesystem's");
		if (f->tiers.nnvme > 1 || (f->tiers.nnvme && f->tiers.s3))
			snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra), ", in %s",
				 dev_name(f, fd->store, fd->dev));
		if (f->repair) {
			r = store_remove(f->st[fd->store], fd->id, fd->dev);
			fd->removed = r == 0 || r == -ENOENT;
		}
		problem(f, f->repair && fd->removed, "segment %" PRIu64 " unreferenced (%s%s)%s%s",
			fd->id, human(fd->size, h1, sizeof(h1)), extra,
			!f->repair    ? ""
			: fd->removed ? " -- deleted"
				      : " -- cannot delete: ",
			f->repair && !fd->removed ? strerror(-r) : "");
	}
	free(fds);
	return 0;
}

/* ---- --rebuild ---- */

struct best {
	struct hent h;
	uint64_t ino, chunk;
	struct copy *c;
};

/* Is copy a better than b for its (ino, chunk)? Highest gen, then segment id. */
static int better(const struct copy *a, const struct copy *b)
{
	const struct seg_entry *x = &a->f->ents[a->ei], *y = &b->f->ents[b->ei];
	if (x->gen != y->gen)
		return x->gen > y->gen;
	if (a->f->id != b->f->id)
		return a->f->id > b->f->id;
	return x->off > y->off;
}

/* A copy --rebuild may use: a readable segment of ours the table points at. */
static int usable_copy(struct fsck *f, const struct copy *c)
{
	return !c->bad && c->f->ours && c->f->mret == 0 && !c->f->removed && in_table(f, c->f);
}

/* The best usable copy of (ino, chunk), verified with --verify-data. */
static struct copy *best_copy(struct fsck *f, uint64_t ino, uint64_t chunk)
{
	uint64_t k = key2(ino, chunk);
	for (;;) {
		struct copy *best = NULL;
		for (struct hent *h = ht_bucket(&f->copies, k); h; h = h->next) {
			struct copy *c = (struct copy *)h;
			const struct seg_entry *e = &c->f->ents[c->ei];
			if (h->key == k && e->ino == ino && e->chunk == chunk &&
			    usable_copy(f, c) && (!best || better(c, best)))
				best = c;
		}
		if (!best || !f->verify || verify_chunk(f, best->f, &best->f->ents[best->ei]) == 0)
			return best;
		best->bad = 1;
	}
}

static int best_cmp(const void *a, const void *b)
{
	const struct best *x = *(struct best *const *)a, *y = *(struct best *const *)b;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->chunk < y->chunk ? -1 : x->chunk > y->chunk;
}

static int rebuild(struct fsck *f)
{
	struct htab keys = {0};
	struct best **bs = NULL;
	size_t n, nb = 0;
	struct found **fds = NULL;
	struct fseg **segs;
	uint64_t top_seg = 0, updated_files = 0, updated_chunks = 0, recovered = 0, dropped = 0,
		 added = 0;
	int ret = 0;

	if ((ret = check_root(f)) < 0) /* a new namespace: / first */
		return ret;
	/* 1. the segment table: exactly the readable segments of ours */
	segs = (struct fseg **)ht_array(&f->segs, &n);
	for (size_t i = 0; i < n && ret == 0; i++)
		if (!segs[i]->copy) {
			struct jrec r = {.type = JR_SEG_DEL, .seg = {.id = segs[i]->seg.id}};
			ret = change(f, &r);
			dropped++;
		}
	free(segs);
	fds = (struct found **)ht_array(&f->found, &n);
	if (fds)
		qsort(fds, n, sizeof(*fds), found_cmp);
	for (size_t i = 0; i < n && ret == 0; i++) {
		struct found *fd = fds[i];
		struct fseg *s = seg_get(f, fd->id);
		if (fd->mret < 0 || !fd->ours)
			continue;
		if (fd->id >= top_seg)
			top_seg = fd->id + 1;
		if (s && s->copy && s->copy != fd)
			continue; /* a second copy of a segment the table has */
		if (s && s->copy == fd && s->seg.len == fd->size && s->seg.dev == fd->dev &&
		    s->seg.store == fd->store)
			continue;
		ret = change_seg_add(f, fd);
		added++;
	}
	if (ret < 0)
		goto out;

	/* 2. the best copy of every (ino, chunk) any footer has */
	for (size_t i = 0; i < n && ret == 0; i++) {
		struct found *fd = fds[i];
		if (!in_table(f, fd))
			continue;
		for (uint32_t e = 0; e < fd->n && ret == 0; e++) {
			const struct seg_entry *se = &fd->ents[e];
			uint64_t k = key2(se->ino, se->chunk);
			struct best *b = NULL;
			for (struct hent *h = ht_bucket(&keys, k); h && !b; h = h->next)
				if (h->key == k && ((struct best *)h)->ino == se->ino &&
				    ((struct best *)h)->chunk == se->chunk)
					b = (struct best *)h;
			if (b)
				continue;
			if (!(b = calloc(1, sizeof(*b))) || (ret = ht_add(&keys, &b->h, k)) < 0) {
				free(b);
				ret = -ENOMEM;
				break;
			}
			b->ino = se->ino;
			b->chunk = se->chunk;
		}
	}
	if (ret < 0)
		goto out;
	bs = (struct best **)ht_array(&keys, &nb);
	if (keys.n && !bs) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < nb; i++) {
		progress(f, f->verify ? "rebuild: verifying chunks" : "rebuild: choosing chunks", i,
			 nb);
		bs[i]->c = best_copy(f, bs[i]->ino, bs[i]->chunk);
	}
	progress(f, "rebuild", nb, nb);
	if (bs)
		qsort(bs, nb, sizeof(*bs), best_cmp);

	/* 3. chunk locations of the files the namespace has; the others go to
	 * /lost+found when they are newer than the namespace */
	for (size_t i = 0; i < nb && ret == 0;) {
		uint64_t ino = bs[i]->ino, end = 0, changed = 0;
		struct finode *in = ino_get(f, ino);
		size_t k = i;
		int orphan = !in && ino >= f->orig_next_ino;
		while (k < nb && bs[k]->ino == ino)
			k++;
		if (!orphan && !(in && in->reachable && S_ISREG(in->attr.mode))) {
			i = k;
			continue; /* a file deleted before the namespace was saved */
		}
		if (orphan) {
			struct finode *root = ino_get(f, ROOT_INO);
			struct jrec_attr a = {.mode = S_IFREG | 0600};
			char name[32];
			uint64_t lf;
			a.uid = root ? root->attr.uid : 0;
			a.gid = root ? root->attr.gid : 0;
			a.atime_ns = a.mtime_ns = a.ctime_ns = now_ns();
			if ((ret = lost_found(f, &lf)) < 0 ||
			    (ret = change_inode(f, ino, &a, "", 0)) < 0)
				break;
			snprintf(name, sizeof(name), "#%" PRIu64, ino);
			if ((ret = change_link(f, lf, name, ino)) < 0 || (ret = ns_scan(f)) < 0)
				break;
			in = ino_get(f, ino);
		}
		for (size_t c = i; c < k && ret == 0; c++) {
			struct copy *cp = bs[c]->c;
			const struct seg_entry *e;
			const struct fchunk *ch;
			if (!cp)
				continue;
			e = &cp->f->ents[cp->ei];
			ch = bs[c]->chunk < in->nchunks ? &in->chunks[bs[c]->chunk] : NULL;
			if (bs[c]->chunk * f->chunk_size + e->len > end)
				end = bs[c]->chunk * f->chunk_size + e->len;
			if (ch && ch->state == CS_LOC && ch->loc.seg_id == cp->f->id &&
			    ch->loc.off == e->off && ch->loc.dev == cp->f->dev &&
			    ch->loc.gen == e->gen && ch->loc.len == e->len && ch->loc.crc == e->crc)
				continue;
			if (ch && ch->state == CS_LOC && ch->loc.gen > e->gen) {
				char path[PATH_MAX_OUT];
				note(f,
				     "chunk %" PRIu64
				     " of %s: only an older copy found (gen %" PRIu64 " < %u)",
				     bs[c]->chunk, path_of(f, in, path, sizeof(path)), e->gen,
				     ch->loc.gen);
			}
			ret = change_loc(f, ino, bs[c]->chunk, cp->f, e);
			changed++;
		}
		if (ret == 0 && end > in->attr.size) {
			struct jrec_attr a = in->attr;
			a.size = end;
			ret = change_inode(f, ino, &a, in->target, in->tlen);
		}
		if (ret == 0 && (changed || orphan)) {
			char path[PATH_MAX_OUT], hs[32];
			note(f, "%s %s (%s, %" PRIu64 " chunk location%s set)",
			     orphan ? "recovered" : "restored", path_of(f, in, path, sizeof(path)),
			     human(in->attr.size, hs, sizeof(hs)), changed, S(changed));
			updated_files++;
			updated_chunks += changed;
			recovered += orphan;
		}
		i = k;
	}
	if (ret < 0)
		goto out;
	/* 4. counters */
	if (top_seg > f->next_seg || ino_ceiling(f) > f->next_ino) {
		if (top_seg > f->next_seg)
			f->next_seg = top_seg;
		if (ino_ceiling(f) > f->next_ino)
			f->next_ino = ino_ceiling(f);
		ret = change_meta(f);
	}
	note(f,
	     "rebuild: %" PRIu64 " segment%s added to the segment table, %" PRIu64
	     " dropped; %" PRIu64 " file%s restored (%" PRIu64 " chunk location%s), %" PRIu64
	     " in /lost+found",
	     added, S(added), dropped, updated_files - recovered, S(updated_files - recovered),
	     updated_chunks, S(updated_chunks), recovered);
	if (ret == 0)
		ret = ns_scan(f);
out:
	for (size_t i = 0; i < nb; i++)
		free(bs[i]);
	free(bs);
	free(keys.b);
	free(fds);
	return ret;
}

/* ---- checkpoints ---- */

static int emit_dent_cmp(const void *a, const void *b)
{
	const struct fdent *x = *(struct fdent *const *)a, *y = *(struct fdent *const *)b;
	if (x->parent != y->parent)
		return x->parent < y->parent ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* Emit the model as checkpoint records: META, INODE, LINK, XATTR_SET,
 * CHUNK_LOC/DIRTY, SEG_ADD. Only what / reaches is part of it. */
static int snapshot(struct fsck *f, int (*emit)(void *, const struct jrec *), void *ectx)
{
	struct jrec r = {.type = JR_META, .next_ino = f->next_ino, .next_seg = f->next_seg};
	struct finode **ins = NULL;
	struct fdent **dents = NULL;
	struct fseg **segs = NULL;
	size_t n = 0, nd = 0, ns = 0;
	int ret;

	if ((ret = ns_scan(f)) < 0)
		return ret;
	if ((ret = emit(ectx, &r)) != 0)
		return ret;
	ins = reachable_inodes(f, &n);
	dents = (struct fdent **)ht_array(&f->dents, &nd);
	segs = (struct fseg **)ht_array(&f->segs, &ns);
	if ((f->inodes.n && !ins) || (f->dents.n && !dents) || (f->segs.n && !segs)) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n && ret == 0; i++) {
		r = (struct jrec){.type = JR_INODE,
				  .ino = ins[i]->ino,
				  .attr = ins[i]->attr,
				  .name = ins[i]->target,
				  .name_len = ins[i]->tlen};
		ret = emit(ectx, &r);
	}
	if (dents)
		qsort(dents, nd, sizeof(*dents), emit_dent_cmp);
	for (size_t i = 0; i < nd && ret == 0; i++) {
		struct fdent *d = dents[i];
		struct finode *p = ino_get(f, d->parent), *t = ino_get(f, d->ino);
		if (!p || !t || !p->reachable || !t->reachable || !is_dir(p))
			continue;
		r = (struct jrec){.type = JR_LINK,
				  .parent = d->parent,
				  .ino = d->ino,
				  .name = d->name,
				  .name_len = d->nlen};
		ret = emit(ectx, &r);
	}
	for (size_t i = 0; i < n && ret == 0; i++)
		for (struct fxattr *x = ins[i]->xattrs; x && ret == 0; x = x->next) {
			r = (struct jrec){.type = JR_XATTR_SET,
					  .ino = ins[i]->ino,
					  .name = x->name,
					  .name_len = x->nlen,
					  .value = x->val,
					  .value_len = x->vlen};
			ret = emit(ectx, &r);
		}
	for (size_t i = 0; i < n && ret == 0; i++)
		for (uint64_t c = 0; c < ins[i]->nchunks && ret == 0; c++) {
			const struct fchunk *ch = &ins[i]->chunks[c];
			if (ch->state == CS_NONE)
				continue;
			r = (struct jrec){.type =
					      ch->state == CS_LOC ? JR_CHUNK_LOC : JR_CHUNK_DIRTY,
					  .ino = ins[i]->ino,
					  .chunk = c,
					  .loc = ch->loc};
			ret = emit(ectx, &r);
		}
	if (segs)
		qsort(segs, ns, sizeof(*segs), seg_cmp);
	for (size_t i = 0; i < ns && ret == 0; i++) {
		r = (struct jrec){.type = JR_SEG_ADD, .seg = segs[i]->seg};
		ret = emit(ectx, &r);
	}
out:
	free(ins);
	free(dents);
	free(segs);
	return ret;
}

struct fwriter {
	int fd;
	uint8_t *buf;
	size_t used, cap;
	uint64_t off, count;
};

static int fw_flush(struct fwriter *w)
{
	size_t done = 0;
	while (done < w->used) {
		ssize_t k = pwrite(w->fd, w->buf + done, w->used - done, (off_t)(w->off + done));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		done += (size_t)k;
	}
	w->off += w->used;
	w->used = 0;
	return 0;
}

static int emit_file(void *arg, const struct jrec *r)
{
	struct fwriter *w = arg;
	size_t len = jrnl_encoded_size(r);
	int ret;
	if (len > w->cap - w->used && (ret = fw_flush(w)) < 0)
		return ret;
	if (len > w->cap)
		return -E2BIG;
	jrnl_encode(r, w->buf + w->used);
	w->used += len;
	if (r->type != JR_HEADER && r->type != JR_END)
		w->count++;
	return 0;
}

/* Write STATE_DIR/checkpoint.<gen> from the model ourselves (no usable
 * checkpoint to start the journal from): tmp file, fsync, rename, fsync dir. */
static int write_checkpoint(struct fsck *f, uint64_t gen)
{
	char tmp[PATH_MAX_OUT + 8], name[PATH_MAX_OUT];
	struct fwriter w = {.cap = 1 << 20};
	struct jrec h = {.type = JR_HEADER,
			 .hdr = {.version = JRNL_VERSION,
				 .kind = JRNL_KIND_CHECKPOINT,
				 .gen = gen,
				 .chunk_size = f->chunk_size}};
	int ret, dfd = -1;

	memcpy(h.hdr.uuid, f->uuid, 16);
	snprintf(name, sizeof(name), "%s/checkpoint.%016" PRIx64, f->dir, gen);
	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	if (!(w.buf = malloc(w.cap)))
		return -ENOMEM;
	w.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (w.fd < 0) {
		ret = -errno;
		goto out;
	}
	if ((ret = emit_file(&w, &h)) < 0 || (ret = snapshot(f, emit_file, &w)) != 0)
		goto out;
	{
		struct jrec end = {.type = JR_END, .count = w.count};
		if ((ret = emit_file(&w, &end)) < 0 || (ret = fw_flush(&w)) < 0)
			goto out;
	}
	if (fsync(w.fd) < 0 || rename(tmp, name) < 0) {
		ret = -errno;
		goto out;
	}
	if ((dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || fsync(dfd) < 0)
		ret = -errno;
out:
	if (dfd >= 0)
		close(dfd);
	if (w.fd >= 0)
		close(w.fd);
	if (ret < 0) {
		unlink(tmp);
		oper_err(f, "%s: %s", name, strerror(ret < 0 ? -ret : EIO));
	}
	free(w.buf);
	return ret;
}

/* ---- main ---- */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: spillway-fsck [--verify-data] [--repair] [--rebuild] [--quiet] STATE_DIR\n"
		"Check a spillway filesystem (not mounted) against its cold tier.\n"
		"  --verify-data  read every chunk and check its crc32c\n"
		"  --repair       fix what can be fixed: relocate damaged chunks to another\n"
		"                 copy, remove files with no good copy, delete unreferenced\n"
		"                 segments\n"
		"  --rebuild      rebuild the index from the segments' footers (journal lost\n"
		"                 or stale): each chunk gets its newest copy in the cold tier,\n"
		"                 files newer than the namespace go to /lost+found\n"
		"  --quiet        print only the problems\n"
		"  --verbose      also print the library's log lines\n"
		"exit: 0 clean, 1 repaired, 4 problems left, 8 operational error, 16 usage\n");
}

/* The uuid most of the readable segments carry (rebuild without a journal). */
static int majority_uuid(struct fsck *f, uint8_t out[16])
{
	size_t n, best = 0;
	struct found **fds = (struct found **)ht_array(&f->found, &n);
	for (size_t i = 0; i < n; i++) {
		size_t votes = 0;
		if (fds[i]->mret < 0)
			continue;
		for (size_t k = 0; k < n; k++)
			votes += fds[k]->mret == 0 && !memcmp(fds[k]->uuid, fds[i]->uuid, 16);
		if (votes > best) {
			best = votes;
			memcpy(out, fds[i]->uuid, 16);
		}
	}
	free(fds);
	return best ? 0 : -ENOENT;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"verify-data", no_argument, NULL, 'V'},
					     {"repair", no_argument, NULL, 'r'},
					     {"rebuild", no_argument, NULL, 'R'},
					     {"quiet", no_argument, NULL, 'q'},
					     {"verbose", no_argument, NULL, 'v'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	struct fsck fs = {0}, *f = &fs;
	struct jrnl_recovery info;
	struct stat sb;
	char err[512], us[33], hs[32];
	uint64_t max_gen, ck_chunk;
	int any, c, verbose = 0, ret, code;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'V':
			f->verify = 1;
			break;
		case 'r':
			f->repair = 1;
			break;
		case 'R':
			f->rebuild = 1;
			break;
		case 'q':
			f->quiet = 1;
			break;
		case 'v':
			verbose = 1;
			break;
		case 'h':
			usage(stdout);
			return EX_CLEAN;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return EX_USAGE;
	}
	f->dir = argv[optind];
	setvbuf(stdout, NULL, _IOLBF, 0); /* problems interleave with stderr in order */
	f->progress = !f->quiet && isatty(2);
	spw_log_level = verbose ? LOG_DEBUG : LOG_CRIT; /* failures are reported here */
	if (f->rebuild)
		f->repair = 1; /* what the rebuilt index still lacks is repaired */
	if (stat(f->dir, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
		oper_err(f, "%s: %s", f->dir, errno ? strerror(errno) : "not a directory");
		return EX_OPER;
	}
	if (read_tiers(f) < 0)
		return EX_OPER;
	if (scan_state(f, &any, &max_gen, &ck_chunk) < 0) {
		oper_err(f, "%s: %s", f->dir, strerror(errno));
		return EX_OPER;
	}
	f->chunk_size = f->tiers.chunk_size ? f->tiers.chunk_size : ck_chunk;
	if (!f->chunk_size) {
		oper_err(f, "%s: chunk_size is neither in tiers nor in a checkpoint", f->dir);
		return EX_OPER;
	}
	if (!any && !f->rebuild) {
		oper_err(f,
			 "%s: no checkpoint or journal (nothing to check; --rebuild makes one "
			 "from the cold tier)",
			 f->dir);
		return EX_OPER;
	}
	{
		struct jrnl_config cfg = {.dir = f->dir,
					  .sync_ms = 1000,
					  .checkpoint_bytes = UINT64_MAX / 2,
					  .chunk_size = f->chunk_size};
		ret = jrnl_open(&cfg, &f->j, err, sizeof(err));
	}
	if (ret < 0) {
		if (ret == -EBUSY)
			oper_err(f, "%s: in use by a running spillway daemon (unmount it first)",
				 f->dir);
		else
			oper_err(f, "%s", err);
		return EX_OPER;
	}
	if (any) {
		ret = jrnl_recover(f->j, apply, f, &info, err, sizeof(err));
		if (ret == -EBADMSG && f->rebuild) {
			note(f, "%s", err);
			f->manual = 1;
		} else if (ret < 0) {
			oper_err(f, "%s", err);
			goto out;
		} else {
			memcpy(f->uuid, info.uuid, 16);
			f->have_uuid = 1;
			if (info.truncated)
				note(f, "journal: %" PRIu64 " bytes of torn or bad records dropped",
				     info.truncated);
		}
	} else {
		f->manual = 1;
	}
	if (f->manual && f->tiers.have_uuid) {
		memcpy(f->uuid, f->tiers.uuid, 16);
		f->have_uuid = 1;
	} else if (f->have_uuid && f->tiers.have_uuid && memcmp(f->uuid, f->tiers.uuid, 16)) {
		uuid_str(f->tiers.uuid, us);
		note(f, "%s/tiers says uuid=%s, the journal another one: the journal's is used",
		     f->dir, us);
	}
	f->orig_next_ino = ino_ceiling(f);
	if (f->unknown_recs)
		note(f, "journal: %" PRIu64 " records name inodes that do not exist (ignored)",
		     f->unknown_recs);
	if ((ret = open_stores(f)) < 0 || (ret = read_manifests(f)) < 0)
		goto out;
	if (!f->have_uuid) {
		if (majority_uuid(f, f->uuid) < 0) {
			oper_err(f,
				 "%s: no uuid in tiers and no readable segment: nothing to rebuild",
				 f->dir);
			goto out;
		}
		f->have_uuid = 1;
		for (size_t i = 0; i < f->found.nb; i++)
			for (struct hent *e = f->found.b[i]; e; e = e->next) {
				struct found *fd = (struct found *)e;
				fd->ours = fd->mret == 0 && !memcmp(fd->uuid, f->uuid, 16);
			}
	}
	bind_segments(f);
	if ((ret = ns_scan(f)) < 0)
		goto out;
	if (f->rebuild) {
		for (int s = 0; s < 2; s++)
			if (f->configured[s] && !f->usable[s]) {
				oper_err(f, "cannot rebuild without every cold tier");
				goto out;
			}
		if ((ret = rebuild(f)) < 0)
			goto out;
	}
	if ((ret = check_namespace(f)) < 0 || (ret = ns_scan(f)) < 0 ||
	    (ret = check_files(f)) < 0 || (ret = check_segments(f)) < 0)
		goto out;
out:
	if (ret == -ENOMEM)
		oper_err(f, "out of memory");
	if (f->manual && f->changed && !f->oper)
		write_checkpoint(f, max_gen + 1);
	/* a failed final checkpoint leaves the journal, which holds every change */
	jrnl_close(f->j, f->started && !f->oper);
	for (int s = 0; s < 2; s++)
		store_close(f->st[s]);
	for (int i = 0; i < f->nlocks; i++)
		close(f->lockfds[i]);
	code = f->oper			   ? EX_OPER
	       : f->problems > f->fixed	   ? EX_LEFT
	       : f->problems || f->changed ? EX_FIXED
					   : EX_CLEAN;
	if (!f->quiet) {
		uint64_t segbytes = 0, nsegs = 0;
		for (size_t i = 0; i < f->found.nb; i++)
			for (struct hent *e = f->found.b[i]; e; e = e->next)
				if (!((struct found *)e)->removed) {
					segbytes += ((struct found *)e)->size;
					nsegs++;
				}
		printf("%s: %" PRIu64 " file%s, %" PRIu64 " director%s, %" PRIu64
		       " chunk%s in %" PRIu64 " segment%s (%s)",
		       f->dir, f->files, S(f->files), f->dirs, f->dirs == 1 ? "y" : "ies",
		       f->chunks_checked, S(f->chunks_checked), nsegs, S(nsegs),
		       human(segbytes, hs, sizeof(hs)));
		if (f->verify)
			printf(", %s verified", human(f->bytes_verified, hs, sizeof(hs)));
		if (code == EX_OPER)
			printf(": check incomplete (operational error)");
		else if (!f->problems)
			printf(": %s", f->changed ? "rebuilt" : "clean");
		else
			printf(": %" PRIu64 " problem%s, %" PRIu64 " repaired, %" PRIu64 " left",
			       f->problems, S(f->problems), f->fixed, f->problems - f->fixed);
		if (f->lost)
			printf("; %" PRIu64 " file%s lost", f->lost, S(f->lost));
		printf("\n");
	}
	return code;
}
