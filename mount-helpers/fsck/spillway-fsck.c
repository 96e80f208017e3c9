/*
 * spillway-fsck — check a spillway filesystem offline: its index (journal and
 * checkpoints in STATE_DIR) against the segments of its cold tier; repair it,
 * or rebuild the index from the segments' footers.
 *   spillway-fsck [--verify-data] [--repair] [--rebuild] [--quiet] STATE_DIR
 * Exit status as fsck(8): 0 clean, 1 problems found and all repaired, 4
 * problems left, 8 operational error (e.g. the filesystem is mounted), 16
 * usage. One line per problem on stdout, naming files by path.
 * Files: this one has main and the options, the output, the stores and
 * segment reads, the checks and the report; fsck_model.c the replay into
 * index/'s struct index, its changes and checkpoints; fsck_rebuild.c
 * --rebuild; fsck_i.h what they share.
 *
 * DESIGN
 * - jrnl_open takes STATE_DIR's lock, so a mounted filesystem is refused;
 *   the cold directories' .spillway.lock files are taken too. The journal is
 *   replayed (jrnl_recover) by index/'s own idx_replay into a struct
 *   index, the segment records into fsck's segment table; what replay skips
 *   or idx_replay_finish drops reaches fsck through the index's anomaly hook.
 *   Nameless inodes are the journal's leftovers of unlinked files (there is
 *   no "free" record): they are not part of the filesystem and are ignored.
 * - Every segment in the stores is listed and its header and footer read
 *   once; the footers give a map (ino, chunk) -> copies, which serves the
 *   checks, the search for another copy of a damaged chunk and --rebuild.
 * - Every change (repair, rebuild) goes through fsck_change(): appended to the
 *   journal, then applied with the same code that replays the journal; at
 *   the end a checkpoint is written (jrnl_close with `final`; none after an
 *   operational error: the journal has every change). Without a usable
 *   checkpoint (--rebuild of a lost state), fsck_write_checkpoint() writes
 *   it with jrnl_write_checkpoint, under the filesystem's uuid (from
 *   STATE_DIR/tiers or the segments' headers). Either way the snapshot is
 *   the daemon's: META, segment table, idx_snapshot.
 * - Segments are deleted only when no journal record names them, after the
 *   journal changes that could have started using them.
 * - Single-threaded; the journal's own thread never checkpoints here
 *   (checkpoint_bytes is out of reach), so nothing else touches the index.
 */
#include "mount-helpers/fsck/fsck_i.h"

#include "common/crc32c.h"
#include "common/log.h"
#include "index/journal.h"
#include "tier/segment.h"
#include "tier/store/store.h"
#include "tier/store/store_s3.h"

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

/* ---- output ---- */

void fsck_oper_err(struct fsck *f, const char *fmt, ...)
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

void fsck_note(struct fsck *f, const char *fmt, ...)
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

void fsck_progress(struct fsck *f, const char *what, uint64_t done, uint64_t total)
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
const char *fsck_human(uint64_t v, char *buf, size_t len)
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

/* ---- STATE_DIR ---- */

static void uuid_str(const uint8_t u[16], char out[33])
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", u[i]);
}

static int read_tiers(struct fsck *f)
{
	char err[PATH_MAX_OUT + 256];
	int ret = tiers_file_read(f->dir, &f->tiers, err, sizeof(err));
	if (ret < 0) {
		fsck_oper_err(f, "%s", err);
		return ret;
	}
	if (!f->tiers.nnvme && !f->tiers.s3) {
		fsck_oper_err(f, "%s/tiers: names no cold tier (nvme= or s3=): nothing to check",
			      f->dir);
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
		const char *n = de->d_name;
		uint64_t g;
		int kind, ck;
		if (!jrnl_parse_name(n, &kind, &g))
			continue;
		ck = kind == JRNL_KIND_CHECKPOINT;
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
	if (fsck_ht_add(&lc->f->found, &fd->h, mix64(id)) < 0) {
		free(fd);
		return -ENOMEM;
	}
	return 0;
}

static int lock_nvme_dirs(struct fsck *f)
{
	for (int i = 0; i < f->tiers.nnvme; i++) {
		struct stat sb;
		int fd, ret;
		if (stat(f->tiers.nvme_dir[i], &sb) < 0 || !S_ISDIR(sb.st_mode)) {
			fsck_oper_err(f, "cold directory %s: %s", f->tiers.nvme_dir[i],
				      errno ? strerror(errno) : "not a directory");
			return -ENOENT;
		}
		if ((ret = store_nvme_lock(f->tiers.nvme_dir[i], &fd)) < 0) {
			fsck_oper_err(f, "cold directory %s: %s", f->tiers.nvme_dir[i],
				      ret == -EBUSY ? "in use by a spillway mount"
						    : strerror(-ret));
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

	uuid_str(f->uuid, us);
	/* the daemon keeps its objects under <s3>/<uuid>/ (a base naming
	 * the uuid already is taken as it is) */
	store_s3_fs_url(url, sizeof(url), base, last && !strcmp(last + 1, us) ? NULL : f->uuid);
	sc.url = url;
	ret = store_s3_open(&sc, out, why, sizeof(why));
	if (ret < 0)
		fsck_oper_err(f, "s3 %s: %s; s3 segments not checked", url, why);
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
			dirs[i] = f->tiers.nvme_dir[i];
			f->devname[i] = f->tiers.nvme_dir[i];
		}
		f->configured[0] = 1;
		f->st_name[0] = "nvme";
		if ((ret = store_nvme_open(dirs, f->tiers.nnvme, &f->st[0])) < 0) {
			fsck_oper_err(f, "cold directories: %s", strerror(-ret));
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
			fsck_oper_err(f, "listing the segments of %s: %s", f->st_name[s],
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
	struct found **all = (struct found **)fsck_ht_array(&f->found, &n);
	int ret = 0;

	if (f->found.n && !all)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct found *fd = all[i];
		fsck_progress(f, "reading segment footers", i, n);
		fd->mret = seg_read_manifest(f->st[fd->store], fd->id, fd->dev, fd->size, fd->uuid,
					     NULL, &fd->ents, &fd->n);
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
			if ((ret = fsck_ht_add(&f->copies, &fd->copies[e].h,
					       key2(fd->ents[e].ino, fd->ents[e].chunk))) < 0)
				goto out;
		}
	}
	fsck_progress(f, "reading segment footers", n, n);
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
	struct seg_where w;
	struct found *fd;

	for (uint64_t id = 0; segtab_next(f->segs, &id, &w);)
		if (w.store < 2 && (fd = found_get(f, w.store, id, w.dev)))
			fd->bound = 1;
}

/* A file uses segment id, which the table has but the store lacks: it is
 * reported with the file (check_segments says no more). 0, -ENOMEM. */
static int seg_mark_reported(struct fsck *f, uint64_t id)
{
	if (id >= f->nseg_reported) {
		uint64_t n = id + 1 > 2 * f->nseg_reported ? id + 1 : 2 * f->nseg_reported;
		uint8_t *v = realloc(f->seg_reported, n);
		if (!v)
			return -ENOMEM;
		memset(v + f->nseg_reported, 0, n - f->nseg_reported);
		f->seg_reported = v;
		f->nseg_reported = n;
	}
	f->seg_reported[id] = 1;
	return 0;
}

static int seg_reported(struct fsck *f, uint64_t id)
{
	return id < f->nseg_reported && f->seg_reported[id];
}

static struct seg_entry *entry_for(struct found *fd, uint64_t ino, uint64_t chunk, uint64_t off)
{
	for (uint32_t i = 0; i < fd->n; i++)
		if (fd->ents[i].ino == ino && fd->ents[i].chunk == chunk && fd->ents[i].off == off)
			return &fd->ents[i];
	return NULL;
}

/* Read a chunk record and check it all (map, every block crc; either
 * format version), once per footer entry. 0, 1 crc or map mismatch, or
 * -errno (read). */
int fsck_verify_chunk(struct fsck *f, struct found *fd, const struct seg_entry *e)
{
	size_t ei = (size_t)(e - fd->ents);
	int mine = e >= fd->ents && ei < fd->n, ret;
	struct seg_chunk sc;
	if (mine && fd->verified && fd->verified[ei])
		return 0;
	ret = seg_read_chunk(f->st[fd->store], fd->id, fd->dev, e, &sc);
	if (ret == 0)
		seg_chunk_free(&sc);
	else if (ret == -EBADMSG)
		ret = 1;
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

/* Classify chunk c of in (cold copy at loc) into l. */
static int check_chunk(struct fsck *f, struct inode *in, uint64_t c, const struct jrec_loc *loc,
		       struct badlist *l)
{
	struct seg_where w;
	int in_table = segtab_where(f->segs, loc->seg_id, &w) == 0;
	struct found *fd;
	struct seg_entry *e;
	int store = in_table ? w.store : -1, ret;

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
	fd = in_table ? fsck_seg_copy(f, loc->seg_id) : found_get(f, store, loc->seg_id, loc->dev);
	if (!fd) {
		if (in_table && (ret = seg_mark_reported(f, loc->seg_id)) < 0)
			return ret;
		return bad_add(l, K_MISSING, loc->seg_id, c, 0);
	}
	fd->chunk_refs++;
	if (!in_table && (ret = bad_add(l, K_NOTABLE, loc->seg_id, c, 0)) < 0)
		return ret;
	if (fd->mret < 0)
		return bad_add(l, K_UNREADABLE, loc->seg_id, c, fd->mret);
	if (!fd->ours)
		return bad_add(l, K_FOREIGN, loc->seg_id, c, 0);
	e = entry_for(fd, in->ino, c, loc->off);
	if (!e || e->len != loc->len || e->crc != loc->crc || e->gen != loc->gen ||
	    e->flags != loc->flags)
		return bad_add(l, K_MANIFEST, loc->seg_id, c, 0);
	if (f->verify) {
		ret = fsck_verify_chunk(f, fd, e);
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
static struct copy *find_copy(struct fsck *f, struct inode *in, uint64_t c)
{
	struct jrec_loc l, *loc = &l;
	uint64_t k = key2(in->ino, c);
	if (!fsck_chunk_loc(in, c, loc))
		return NULL;
	for (struct hent *h = ht_bucket(&f->copies, k); h; h = h->next) {
		struct copy *cp = (struct copy *)h;
		struct found *fd = cp->f;
		struct seg_entry *e = &fd->ents[cp->ei];
		struct found *bound;
		struct seg_where w;
		if (h->key != k || e->ino != in->ino || e->chunk != c || cp->bad || fd->removed)
			continue;
		if (e->gen != loc->gen || e->len != loc->len || e->crc != loc->crc ||
		    e->flags != loc->flags)
			continue;
		if (fd->id == loc->seg_id && e->off == loc->off && fd->dev == loc->dev)
			continue; /* the damaged one */
		bound = fsck_seg_copy(f, fd->id);
		if (segtab_where(f->segs, fd->id, &w) == 0 &&
		    (w.store != fd->store || (bound && bound != fd)))
			continue; /* the table means another segment by that id */
		if (fsck_verify_chunk(f, fd, e) != 0) {
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
static void report_file(struct fsck *f, struct inode *in, struct badlist *l, const char *suffix,
			int fixed)
{
	char path[PATH_MAX_OUT], chunks[512], why[256];
	const char *p = fsck_path_of(f, in->ino, path, sizeof(path));
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

struct names_of {
	uint64_t ino;
	struct {
		uint64_t parent;
		char *name;
	} *v;
	size_t n;
	int err;
};

static int collect_names(void *arg, uint64_t parent, const char *name, uint64_t ino)
{
	struct names_of *no = arg;
	void *v;
	if (ino != no->ino)
		return 0;
	if (!(v = realloc(no->v, (no->n + 1) * sizeof(*no->v))) ||
	    !(((struct names_of *)arg)->v = v, no->v[no->n].name = strdup(name))) {
		no->err = -ENOMEM;
		return 1;
	}
	no->v[no->n++].parent = parent;
	return 0;
}

/* Remove every name of inode ino; with `lost`, it is lost: print "lost: PATH"
 * for each. */
static int unlink_all(struct fsck *f, uint64_t ino, int lost)
{
	struct names_of no = {.ino = ino};
	int ret;
	idx_for_each_name(f->idx, collect_names, &no);
	ret = no.err;
	for (size_t i = 0; i < no.n && ret == 0; i++) {
		char path[PATH_MAX_OUT];
		if (lost)
			printf("lost: %s\n",
			       fsck_dent_path(f, no.v[i].parent, no.v[i].name, path, sizeof(path)));
		ret = fsck_change_unlink(f, no.v[i].parent, no.v[i].name,
					 (uint32_t)strlen(no.v[i].name));
	}
	for (size_t i = 0; i < no.n; i++)
		free(no.v[i].name);
	free(no.v);
	if (lost)
		f->lost++;
	return ret;
}

/* Check (and with --repair fix) the chunks of every reachable file. */
static int check_files(struct fsck *f)
{
	size_t n;
	const char *what = f->verify ? "verifying chunks" : "checking chunks";
	uint64_t total = 0, done = 0;
	int ret = 0;
	struct inode **ins = fsck_reachable_inodes(f, &n, &ret);
	struct jrec_loc loc;

	if (ret < 0)
		return ret;

	for (size_t i = 0; i < n; i++)
		for (uint64_t c = 0; S_ISREG(fsck_attr(ins[i]).mode) && c < idx_nchunks(ins[i]);
		     c++)
			total += fsck_chunk_loc(ins[i], c, &loc);
	for (size_t i = 0; i < n && ret == 0; i++) {
		struct inode *in = ins[i];
		struct badlist l = {0};
		int damaged = 0, all_found = 1;
		mode_t mode = fsck_attr(in).mode;
		struct copy **repl = NULL;

		if (S_ISDIR(mode))
			f->dirs++;
		else if (S_ISREG(mode))
			f->files++;
		if (!S_ISREG(mode))
			continue;
		for (uint64_t c = 0; c < idx_nchunks(in) && ret == 0; c++) {
			if (!fsck_chunk_loc(in, c, &loc))
				continue;
			fsck_progress(f, what, done++, total);
			f->chunks_checked++;
			ret = check_chunk(f, in, c, &loc, &l);
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
			struct seg_where w;
			struct found *fd = NULL;
			if (l.b[k].kind != K_NOTABLE || segtab_where(f->segs, l.b[k].seg, &w) == 0)
				continue;
			fsck_chunk_loc(in, l.b[k].chunk, &loc);
			for (int st = 0; st < 2; st++)
				if (f->usable[st] && (fd = found_get(f, st, l.b[k].seg, loc.dev)))
					break;
			if (fd)
				ret = fsck_change_seg_add(f, fd);
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
			ret = unlink_all(f, in->ino, 1);
		} else {
			report_file(f, in, &l, damaged ? " -- relocated to another copy" : "", 1);
			for (size_t k = 0; k < l.n && ret == 0; k++) {
				uint64_t c = l.b[k].chunk;
				struct found *fd;
				if (repl && repl[k]) {
					fd = repl[k]->f;
					if (!fsck_in_table(f, fd) &&
					    (ret = fsck_change_seg_add(f, fd)) < 0)
						break;
					ret = fsck_change_loc(f, in->ino, c, fd,
							      &fd->ents[repl[k]->ei]);
				} else if (l.b[k].kind == K_DEV) {
					fd = fsck_seg_copy(f, l.b[k].seg);
					if (fd && fsck_chunk_loc(in, c, &loc))
						ret = fsck_change_loc(
						    f, in->ino, c, fd,
						    entry_for(fd, in->ino, c, loc.off));
				}
			}
		}
		free(repl);
		free(l.b);
	}
	fsck_progress(f, what, total, total);
	free(ins);
	return ret;
}

/* Link in (nameless or unreachable) into /lost+found as #<ino>. */
static int link_lost_found(struct fsck *f, uint64_t ino)
{
	char name[32];
	uint64_t lf;
	int ret;
	if ((ret = fsck_lost_found(f, &lf)) < 0)
		return ret;
	snprintf(name, sizeof(name), "#%" PRIu64, ino);
	if ((ret = fsck_change_link(f, lf, name, ino)) < 0)
		return ret;
	return fsck_scan(f);
}

/* The root directory, created (owned like STATE_DIR) when missing. */
int fsck_check_root(struct fsck *f)
{
	struct jrec_attr a = {.mode = S_IFDIR | 0755};
	struct stat sb;
	int ret;

	/* the index always has a directory /: did the journal make it? */
	if (f->root_seen && !f->root_bad)
		return 0;
	if (stat(f->dir, &sb) == 0) {
		a.uid = sb.st_uid;
		a.gid = sb.st_gid;
	}
	a.atime_ns = a.mtime_ns = a.ctime_ns = now_ns();
	problem(f, f->repair, "root directory %s%s",
		f->root_seen ? "is not a directory" : "missing",
		f->repair ? " -- created" : "");
	if (!f->repair)
		return 1;
	if ((ret = fsck_change_inode(f, ROOT_INO, &a, "", 0)) < 0)
		return ret;
	return fsck_scan(f);
}

static int unreach_cmp(const void *a, const void *b)
{
	const struct unreach *x = a, *y = b;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* A name dropped for ino: it may need a new one (no separate report). */
static struct badname *rescue_of(struct fsck *f, uint64_t ino)
{
	for (size_t i = 0; i < f->nbad; i++)
		if (f->bad[i].rescue && f->bad[i].ino == ino)
			return &f->bad[i];
	return NULL;
}

/* Root, names of missing inodes or in missing directories (dropped by the
 * first scan), inodes named but unreachable from / (cycles). */
static int check_namespace(struct fsck *f)
{
	int ret;

	if ((ret = fsck_check_root(f)) != 0)
		return ret < 0 ? ret : 0;
	for (size_t i = 0; i < f->nbad && ret == 0; i++) {
		struct badname *b = &f->bad[i];
		int have_t = idx_find(f->idx, b->ino) != NULL;
		char path[PATH_MAX_OUT];
		const char *what = !have_t			   ? "entry for a missing inode"
				   : idx_find(f->idx, b->parent) ? "entry in a file that is not a directory"
								   : "entry in a missing directory";
		fsck_dent_path(f, b->parent, b->name, path, sizeof(path));
		b->rescue = have_t; /* may need a new name: see below */
		problem(f, f->repair, "%s: %s (inode %" PRIu64 ")%s", path, what, b->ino,
			f->repair ? " -- removed" : "");
		if (f->repair) /* gone from the index already: journal it */
			ret = fsck_change_unlink(f, b->parent, b->name, (uint32_t)strlen(b->name));
	}
	if (ret < 0 || (ret = fsck_scan(f)) < 0)
		return ret;
	for (;;) {
		struct unreach pick = {0};
		struct badname *r;
		qsort(f->unreach, f->nunreach, sizeof(*f->unreach), unreach_cmp);
		for (size_t i = 0; i < f->nunreach; i++) {
			struct unreach *u = &f->unreach[i];
			int rescue = rescue_of(f, u->ino) != NULL;
			if (!u->names && !rescue)
				continue; /* nameless: the journal's leftover of an unlinked file */
			if (!f->repair) {
				if (!rescue)
					problem(f, 0,
						"inode %" PRIu64
						" (%s) is named but not reachable from /",
						u->ino, u->is_dir ? "directory" : "file");
			} else if (!pick.ino) {
				pick = *u; /* the lowest number */
			}
		}
		if (!pick.ino)
			return 0;
		if (!(r = rescue_of(f, pick.ino)))
			problem(f, 1, "inode %" PRIu64 " (%s) is named but not reachable from /",
				pick.ino, pick.is_dir ? "directory" : "file");
		fsck_note(f, "inode %" PRIu64 " moved to /lost+found/#%" PRIu64, pick.ino,
			  pick.ino);
		while ((r = rescue_of(f, pick.ino)))
			r->rescue = 0;
		if ((ret = unlink_all(f, pick.ino, 0)) < 0 ||
		    (ret = link_lost_found(f, pick.ino)) < 0)
			return ret;
	}
}

/* Segment table against the stores: missing entries, wrong length or
 * device, and segments nobody references (deleted by --repair). */
static int check_segments(struct fsck *f)
{
	size_t n;
	struct found **fds;
	struct seg_where w;
	char h1[32], h2[32];
	int ret = 0;

	for (uint64_t id = 0; ret == 0 && segtab_next(f->segs, &id, &w);) {
		struct found *fd = fsck_seg_copy(f, id);
		int st = w.store;
		if (st > 1 || !f->configured[st]) {
			problem(f, f->repair,
				"segment %" PRIu64 " is on a tier not configured here%s", id,
				f->repair ? " -- dropped from the segment table" : "");
		} else if (!f->usable[st]) {
			continue;
		} else if (!fd) {
			if (!seg_reported(f, id))
				problem(f, f->repair,
					"segment %" PRIu64 " missing (%s, no file uses it)%s", id,
					fsck_human(w.len, h1, sizeof(h1)),
					f->repair ? " -- dropped from the segment table" : "");
			else if (f->repair)
				fsck_note(f, "segment %" PRIu64 " dropped from the segment table",
					  id);
		} else if (fd->mret == 0 && fd->ours && w.len != fd->size) {
			problem(f, f->repair,
				"segment %" PRIu64 ": %s in the store, the segment table says %s%s",
				id, fsck_human(fd->size, h1, sizeof(h1)),
				fsck_human(w.len, h2, sizeof(h2)),
				f->repair ? " -- table updated" : "");
			if (f->repair)
				ret = fsck_change_seg_add(f, fd);
			continue;
		} else if (fd->mret == 0 && fd->ours && w.dev != fd->dev) {
			problem(f, f->repair,
				"segment %" PRIu64 " is in %s, the segment table says %s%s", id,
				dev_name(f, st, fd->dev), dev_name(f, st, w.dev),
				f->repair ? " -- table updated" : "");
			if (f->repair)
				ret = fsck_change_seg_add(f, fd);
			continue;
		} else {
			continue;
		}
		if (f->repair) {
			struct jrec r = {.type = JR_SEG_DEL, .seg = {.id = id}};
			ret = fsck_change(f, &r);
		}
	}
	if (ret < 0)
		return ret;
	fds = (struct found **)fsck_ht_array(&f->found, &n);
	if (f->found.n && !fds)
		return -ENOMEM;
	if (fds)
		qsort(fds, n, sizeof(*fds), fsck_found_cmp);
	for (size_t i = 0; i < n; i++) {
		struct found *fd = fds[i];
		char extra[PATH_MAX_OUT + 64] = "";
		int r = 0;
		if (fd->removed || fsck_in_table(f, fd) || fd->chunk_refs)
			continue; /* used (chunk_refs without --repair: reported with the files) */
		if (fsck_seg_copy(f, fd->id))
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
			fd->id, fsck_human(fd->size, h1, sizeof(h1)), extra,
			!f->repair    ? ""
			: fd->removed ? " -- deleted"
				      : " -- cannot delete: ",
			f->repair && !fd->removed ? strerror(-r) : "");
	}
	free(fds);
	return 0;
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
	struct found **fds = (struct found **)fsck_ht_array(&f->found, &n);
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

/* The command line into f. -1 to go on, else the exit code. */
static int parse_args(struct fsck *f, int argc, char **argv)
{
	static const struct option opts[] = {{"verify-data", no_argument, NULL, 'V'},
					     {"repair", no_argument, NULL, 'r'},
					     {"rebuild", no_argument, NULL, 'R'},
					     {"quiet", no_argument, NULL, 'q'},
					     {"verbose", no_argument, NULL, 'v'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	int c, verbose = 0;

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
	return -1;
}

/* The state dir looked over (tiers, what state files it has, the chunk
 * size) and its journal opened, which locks out a daemon. 0, or -1 with the
 * error reported. */
static int open_state(struct fsck *f, int *any, uint64_t *max_gen)
{
	struct jrnl_config cfg = {
	    .dir = f->dir, .sync_ms = 1000, .checkpoint_bytes = UINT64_MAX / 2};
	struct stat sb;
	char err[512];
	uint64_t ck_chunk;
	int ret;

	if (stat(f->dir, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
		fsck_oper_err(f, "%s: %s", f->dir, errno ? strerror(errno) : "not a directory");
		return -1;
	}
	if (read_tiers(f) < 0)
		return -1;
	if (scan_state(f, any, max_gen, &ck_chunk) < 0) {
		fsck_oper_err(f, "%s: %s", f->dir, strerror(errno));
		return -1;
	}
	f->chunk_size = f->tiers.chunk_size ? f->tiers.chunk_size : ck_chunk;
	if (!f->chunk_size) {
		fsck_oper_err(f, "%s: chunk_size is neither in tiers nor in a checkpoint", f->dir);
		return -1;
	}
	if (!*any && !f->rebuild) {
		fsck_oper_err(f,
			      "%s: no checkpoint or journal (nothing to check; --rebuild makes one "
			      "from the cold tier)",
			      f->dir);
		return -1;
	}
	cfg.chunk_size = f->chunk_size;
	if ((ret = jrnl_open(&cfg, &f->j, err, sizeof(err))) < 0) {
		if (ret == -EBUSY)
			fsck_oper_err(f,
				      "%s: in use by a running spillway daemon (unmount it first)",
				      f->dir);
		else
			fsck_oper_err(f, "%s", err);
		return -1;
	}
	return 0;
}

/* The index replayed from the checkpoint and journals (when `any`; else it
 * starts empty, to be rebuilt), and the uuid it belongs to. 0 or -errno. */
static int replay_state(struct fsck *f, int any)
{
	struct jrnl_recovery info;
	char err[512], us[33];
	int ret;

	if ((ret = fsck_index_open(f)) < 0)
		return ret;
	if (any) {
		ret = jrnl_recover(f->j, fsck_apply, f, &info, err, sizeof(err));
		if (ret == -EBADMSG && f->rebuild) {
			fsck_note(f, "%s", err);
			f->manual = 1;
		} else if (ret < 0) {
			fsck_oper_err(f, "%s", err);
			return ret;
		} else {
			memcpy(f->uuid, info.uuid, 16);
			f->have_uuid = 1;
			if (info.truncated)
				fsck_note(
				    f, "journal: %" PRIu64 " bytes of torn or bad records dropped",
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
		fsck_note(f,
			  "%s/tiers says uuid=%s, the journal another one: the journal's is used",
			  f->dir, us);
	}
	f->orig_next_ino = fsck_ino_ceiling(f);
	if (f->unknown_recs)
		fsck_note(f, "journal: %" PRIu64 " records name inodes that do not exist (ignored)",
			  f->unknown_recs);
	return 0;
}

/* Without a uuid from the journal or tiers, the filesystem's is the one most
 * readable segments carry; those segments are ours. 0, or -ENOENT when no
 * segment is readable (reported). */
static int adopt_majority_uuid(struct fsck *f)
{
	if (f->have_uuid)
		return 0;
	if (majority_uuid(f, f->uuid) < 0) {
		fsck_oper_err(f, "%s: no uuid in tiers and no readable segment: nothing to rebuild",
			      f->dir);
		return -ENOENT;
	}
	f->have_uuid = 1;
	for (size_t i = 0; i < f->found.nb; i++)
		for (struct hent *e = f->found.b[i]; e; e = e->next) {
			struct found *fd = (struct found *)e;
			fd->ours = fd->mret == 0 && !memcmp(fd->uuid, f->uuid, 16);
		}
	return 0;
}

/* --rebuild, which needs every configured cold tier. 0 or -errno. */
static int rebuild(struct fsck *f)
{
	if (!f->rebuild)
		return 0;
	for (int s = 0; s < 2; s++)
		if (f->configured[s] && !f->usable[s]) {
			fsck_oper_err(f, "cannot rebuild without every cold tier");
			return -EIO;
		}
	return fsck_rebuild(f);
}

/* Replay, read the cold tier, rebuild if asked, then every check in order.
 * 0 or -errno (the first step that failed). */
static int check(struct fsck *f, int any)
{
	int ret;

	if ((ret = replay_state(f, any)) < 0 || (ret = open_stores(f)) < 0 ||
	    (ret = read_manifests(f)) < 0 || (ret = adopt_majority_uuid(f)) < 0)
		return ret;
	bind_segments(f);
	f->collect = 1; /* the names the first scan drops are problems */
	if ((ret = fsck_scan(f)) < 0 || (ret = rebuild(f)) < 0)
		return ret;
	if ((ret = check_namespace(f)) < 0 || (ret = fsck_scan(f)) < 0 ||
	    (ret = check_files(f)) < 0 || (ret = check_segments(f)) < 0)
		return ret;
	return 0;
}

/* Save what a manual replay changed, close everything; the exit code. */
static int finish(struct fsck *f, int ret, uint64_t max_gen)
{
	if (ret == -ENOMEM)
		fsck_oper_err(f, "out of memory");
	if (f->manual && f->changed && !f->oper)
		fsck_write_checkpoint(f, max_gen + 1);
	/* a failed final checkpoint leaves the journal, which holds every change */
	jrnl_close(f->j, f->started && !f->oper);
	for (int s = 0; s < 2; s++)
		store_close(f->st[s]);
	for (int i = 0; i < f->nlocks; i++)
		close(f->lockfds[i]);
	fsck_index_close(f);
	tiers_file_free(&f->tiers);
	return f->oper			   ? EX_OPER
	       : f->problems > f->fixed	   ? EX_LEFT
	       : f->problems || f->changed ? EX_FIXED
					   : EX_CLEAN;
}

/* The one-line summary. */
static void print_summary(struct fsck *f, int code)
{
	uint64_t segbytes = 0, nsegs = 0;
	char hs[32];

	for (size_t i = 0; i < f->found.nb; i++)
		for (struct hent *e = f->found.b[i]; e; e = e->next)
			if (!((struct found *)e)->removed) {
				segbytes += ((struct found *)e)->size;
				nsegs++;
			}
	printf("%s: %" PRIu64 " file%s, %" PRIu64 " director%s, %" PRIu64 " chunk%s in %" PRIu64
	       " segment%s (%s)",
	       f->dir, f->files, S(f->files), f->dirs, f->dirs == 1 ? "y" : "ies",
	       f->chunks_checked, S(f->chunks_checked), nsegs, S(nsegs),
	       fsck_human(segbytes, hs, sizeof(hs)));
	if (f->verify)
		printf(", %s verified", fsck_human(f->bytes_verified, hs, sizeof(hs)));
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

int main(int argc, char **argv)
{
	struct fsck fs = {0}, *f = &fs;
	uint64_t max_gen;
	int any, code;

	if ((code = parse_args(f, argc, argv)) >= 0)
		return code;
	if (open_state(f, &any, &max_gen) < 0)
		return EX_OPER;
	code = finish(f, check(f, any), max_gen);
	if (!f->quiet)
		print_summary(f, code);
	return code;
}
