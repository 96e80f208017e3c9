/*
 * spw_fsx — an fsx-style file system exerciser (libc only).
 *
 *   spw_fsx [-N ops] [-S seed] [-f nfiles] [-l maxlen] [-b boundary] [-m] [-A] [-E] [-R] [-q]
 *           [-v] [-k] DIR
 *
 * Keeps nfiles files open in DIR, each with an in-memory model (a growable
 * zero-filled byte buffer + size), and applies a seeded random stream of
 * operations: pwrite (also past EOF, making holes), pread checked byte for
 * byte, ftruncate, fallocate (mode 0 and PUNCH_HOLE|KEEP_SIZE, when the file
 * system supports them), mmap read / mmap write + msync (-m), close+reopen
 * (sometimes with O_TRUNC), fsync/fdatasync and full-file verifies. With -A
 * (admission), also streams: a run of boundary-sized writes in a row, each
 * going on from the last (appending, or rewriting from 0 or from a
 * boundary), and scans: the file read front to back in 1 MiB reads through
 * a fresh descriptor, its pages dropped first (read once, as a restore of a
 * spilled object is). With -E, evicts and warms (setxattr user.spillway.evict
 * or .warm: a spillway mount's tier moves, which must not change a byte),
 * some with the file closed first (a closed big file all in RAM is what an
 * evict moves into an extent), reopened after. With -R, a second read-only
 * descriptor per file stays open from the start to the end, and some reads
 * go through it (a second opener, in whatever mode the file had when it
 * opened, sees every write of the first).
 *
 * Everything is a pure function of the seed and the options, so a failing run
 * is replayed with the same -S/-N/-f/-l/-b/-m. On the first mismatch or
 * unexpected error it prints the seed, the op number, the last LOG_SHOW ops,
 * the first differing offset with expected/actual bytes (and, when it can
 * tell, which logged write the actual bytes came from), saves the expected
 * image to $TMPDIR, leaves the files in DIR and exits 1. Success prints
 * "spw_fsx: N ops ok, seed S" and exits 0. Usage errors exit 2.
 *
 * Written data is a hash of (seed, op number, file offset), so stale or
 * misplaced data can be traced back to the op that wrote it.
 *
 * Single-threaded.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif
#ifndef FALLOC_FL_PUNCH_HOLE
#define FALLOC_FL_PUNCH_HOLE 0x02
#endif

#define KIB	  1024ULL
#define MIB	  (1024ULL * 1024ULL)
#define LOG_RING  4096 /* ops remembered (searched on a mismatch) */
#define LOG_SHOW  50   /* ops printed on failure */
#define MAX_FILES 64
#define NO_OTRUNC (1u << 31) /* -X otrunc: reopen never uses O_TRUNC */

enum op_kind {
	OP_WRITE,
	OP_READ,
	OP_TRUNC,
	OP_PUNCH,
	OP_FALLOC,
	OP_MAPREAD,
	OP_MAPWRITE,
	OP_REOPEN,
	OP_FSYNC,
	OP_VERIFY,
	OP_DROPCACHE,
	OP_STREAM, /* -A */
	OP_SCAN,   /* -A */
	OP_EVICT,  /* -E: evict or warm */
	OP_READ2,  /* -R: a read through the second descriptor */
	OP_NKINDS,
};

static const char *const op_names[OP_NKINDS] = {
    [OP_WRITE] = "write",	[OP_READ] = "read",	      [OP_TRUNC] = "truncate",
    [OP_PUNCH] = "punch",	[OP_FALLOC] = "fallocate",    [OP_MAPREAD] = "mapread",
    [OP_MAPWRITE] = "mapwrite", [OP_REOPEN] = "reopen",	      [OP_FSYNC] = "fsync",
    [OP_VERIFY] = "verify",	[OP_DROPCACHE] = "dropcache", [OP_STREAM] = "stream",
    [OP_SCAN] = "scan",		[OP_EVICT] = "evict",	      [OP_READ2] = "read2",
};

/*
 * Relative weights of the operations (mmap ones only with -m); a full verify
 * costs as much as ~100 small ops, so it is rare. dropcache (fadvise
 * DONTNEED) makes later reads go to the file system instead of the page cache.
 */
static const unsigned op_weight[OP_NKINDS] = {
    [OP_WRITE] = 60, [OP_READ] = 52,	[OP_TRUNC] = 12,    [OP_PUNCH] = 10,
    [OP_FALLOC] = 4, [OP_MAPREAD] = 12, [OP_MAPWRITE] = 12, [OP_REOPEN] = 6,
    [OP_FSYNC] = 4,  [OP_VERIFY] = 1,	[OP_DROPCACHE] = 8, [OP_STREAM] = 6, [OP_SCAN] = 4,
    [OP_EVICT] = 6,  [OP_READ2] = 20,
};

struct model {
	char path[4096];
	int fd;
	int fd2;	    /* -R: the second, read-only descriptor */
	unsigned char *buf; /* model contents; zero beyond size, always */
	uint64_t cap;
	uint64_t size;
};

struct log_ent {
	uint64_t opnum;
	int file;
	enum op_kind kind;
	uint64_t off, len;
	uint64_t size_before, size_after;
	int flag; /* reopen: O_TRUNC; fsync: datasync; read: short */
	int skipped;
};

struct fsx {
	uint64_t seed, nops, maxlen, boundary, maxio;
	unsigned nfiles;
	int use_mmap, quiet, verbose, keep, pt_reopen, second, admission, evicts;
	unsigned disabled; /* bit per op_kind, plus NO_OTRUNC */
	const char *xopt;  /* -X as given, for the replay line */
	int have_punch, have_falloc;
	int dense; /* -D: zeros written where the file would have holes */
	uint64_t rng;
	uint64_t opnum;
	struct model files[MAX_FILES];
	struct log_ent ring[LOG_RING];
	uint64_t nlogged;
	unsigned char *wbuf, *rbuf;
	uint64_t counts[OP_NKINDS];
	double secs[OP_NKINDS]; /* wall time spent per kind */
	long pagesize;
	const char *dir;
};

static struct fsx g; /* one run per process; the SIGBUS handler needs it */
static sigjmp_buf bus_jmp;
static volatile sig_atomic_t bus_armed;

/* ---- random numbers ---------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t rnd(void)
{
	return splitmix64(&g.rng);
}

/* Uniform in [lo, hi] (inclusive); lo <= hi. */
static uint64_t rnd_range(uint64_t lo, uint64_t hi)
{
	if (hi <= lo)
		return lo;
	return lo + rnd() % (hi - lo + 1);
}

static uint64_t clamp(int64_t v, uint64_t lo, uint64_t hi)
{
	if (v < (int64_t)lo)
		return lo;
	if ((uint64_t)v > hi)
		return hi;
	return (uint64_t)v;
}

/* The byte that op `opnum` writes at file offset `off`. */
static unsigned char pattern_byte(uint64_t opnum, uint64_t off)
{
	uint64_t h = mix64(g.seed ^ mix64(opnum * 0x100000001b3ULL + 1) ^ ((off >> 3) * 0x9e37ULL));
	return (unsigned char)(h >> ((off & 7) * 8));
}

static void fill_pattern(unsigned char *dst, uint64_t opnum, uint64_t off, uint64_t len)
{
	uint64_t i = 0;

	while (i < len && ((off + i) & 7))
		dst[i] = pattern_byte(opnum, off + i), i++;
	for (; i + 8 <= len; i += 8) {
		uint64_t h = mix64(g.seed ^ mix64(opnum * 0x100000001b3ULL + 1) ^
				   (((off + i) >> 3) * 0x9e37ULL));
		memcpy(dst + i, &h, 8); /* little endian: byte k = h >> 8k */
	}
	for (; i < len; i++)
		dst[i] = pattern_byte(opnum, off + i);
}

/* ---- op log and failure reporting ------------------------------------- */

static struct log_ent *log_begin(int file, enum op_kind kind, uint64_t off, uint64_t len)
{
	struct log_ent *e = &g.ring[g.nlogged % LOG_RING];

	memset(e, 0, sizeof(*e));
	e->opnum = g.opnum;
	e->file = file;
	e->kind = kind;
	e->off = off;
	e->len = len;
	e->size_before = file >= 0 ? g.files[file].size : 0;
	e->size_after = e->size_before;
	g.nlogged++;
	return e;
}

static void log_print_ent(FILE *out, const struct log_ent *e)
{
	fprintf(out, "  #%-9" PRIu64 " f%-2d %-9s", e->opnum, e->file, op_names[e->kind]);
	switch (e->kind) {
	case OP_WRITE:
	case OP_STREAM:
	case OP_READ:
	case OP_PUNCH:
	case OP_FALLOC:
	case OP_MAPREAD:
	case OP_MAPWRITE:
		fprintf(out, " off=0x%-9" PRIx64 " len=0x%-7" PRIx64 " end=0x%-9" PRIx64, e->off,
			e->len, e->off + e->len);
		break;
	case OP_TRUNC:
		fprintf(out, " to=0x%-9" PRIx64, e->off);
		break;
	case OP_REOPEN:
		fprintf(out, "%s", e->flag ? " O_TRUNC" : "");
		break;
	case OP_FSYNC:
		fprintf(out, "%s", e->flag ? " (fdatasync)" : "");
		break;
	case OP_VERIFY:
		fprintf(out, "%s", e->flag ? " (page cache dropped first)" : "");
		break;
	case OP_EVICT:
		fprintf(out, "%s", e->flag == 1 ? " warm" : e->flag == 2 ? " closed first" : "");
		break;
	case OP_READ2:
		fprintf(out, " off=0x%-9" PRIx64 " len=0x%-7" PRIx64 " end=0x%-9" PRIx64, e->off,
			e->len, e->off + e->len);
		break;
	case OP_DROPCACHE:
		if (e->len)
			fprintf(out, " off=0x%-9" PRIx64 " len=0x%-7" PRIx64 " end=0x%-9" PRIx64,
				e->off, e->len, e->off + e->len);
		else
			fprintf(out, " whole file");
		break;
	default:
		break;
	}
	if (e->size_before != e->size_after)
		fprintf(out, "  size 0x%" PRIx64 " -> 0x%" PRIx64, e->size_before, e->size_after);
	else
		fprintf(out, "  size 0x%" PRIx64, e->size_before);
	if (e->kind == OP_READ && e->flag)
		fprintf(out, " (short: past EOF)");
	if (e->skipped)
		fprintf(out, " [skipped]");
	fputc('\n', out);
}

static void log_dump(FILE *out)
{
	uint64_t n = g.nlogged < LOG_SHOW ? g.nlogged : LOG_SHOW;

	fprintf(out, "spw_fsx: last %" PRIu64 " operations (oldest first):\n", n);
	for (uint64_t i = g.nlogged - n; i < g.nlogged; i++)
		log_print_ent(out, &g.ring[i % LOG_RING]);
}

static void save_good_images(void)
{
	const char *tmp = getenv("TMPDIR");

	if (!tmp || !*tmp)
		tmp = "/tmp";
	for (unsigned i = 0; i < g.nfiles; i++) {
		char p[4200];
		FILE *f;

		snprintf(p, sizeof(p), "%s/spw_fsx-%" PRIu64 "-f%u.good", tmp, g.seed, i);
		f = fopen(p, "w");
		if (!f)
			continue;
		if (g.files[i].size)
			fwrite(g.files[i].buf, 1, g.files[i].size, f);
		if (fclose(f) == 0)
			fprintf(stderr, "spw_fsx: expected image of %s saved as %s\n",
				g.files[i].path, p);
	}
}

static void __attribute__((noreturn)) fail_exit(void)
{
	fprintf(stderr, "spw_fsx: FAILED at op %" PRIu64 ", seed %" PRIu64 "\n", g.opnum, g.seed);
	fprintf(stderr,
		"spw_fsx: replay: spw_fsx -S %" PRIu64 " -N %" PRIu64 " -f %u -l %" PRIu64
		" -b %" PRIu64 "%s%s%s%s%s%s%s%s DIR\n",
		g.seed, g.nops, g.nfiles, g.maxlen, g.boundary, g.use_mmap ? " -m" : "",
		g.admission ? " -A" : "", g.pt_reopen ? " -P" : "", g.dense ? " -D" : "",
		g.evicts ? " -E" : "", g.second ? " -R" : "", g.xopt ? " -X " : "",
		g.xopt ? g.xopt : "");
	log_dump(stderr);
	save_good_images();
	fflush(stderr);
	exit(1);
}

static void __attribute__((noreturn, format(printf, 1, 2))) fail(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "spw_fsx: ERROR at op %" PRIu64 ": ", g.opnum);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fail_exit();
}

static void hexdump_line(const char *label, const unsigned char *p, uint64_t base, uint64_t n,
			 uint64_t mark)
{
	fprintf(stderr, "  %-8s 0x%09" PRIx64 ":", label, base);
	for (uint64_t i = 0; i < n; i++)
		fprintf(stderr, "%s%02x", base + i == mark ? " [" : " ", p[i]);
	fputc('\n', stderr);
}

/* Which logged write (if any) put `actual` at file offset `off`? */
static void trace_origin(int file, uint64_t off, const unsigned char *actual, uint64_t n)
{
	int all_zero = 1;

	for (uint64_t i = 0; i < n; i++)
		all_zero &= actual[i] == 0;
	if (all_zero) {
		fprintf(stderr, "  actual bytes are zeros (lost write / hole where data was?)\n");
		return;
	}
	for (uint64_t k = 0; k < g.nlogged && k < LOG_RING; k++) {
		const struct log_ent *e = &g.ring[(g.nlogged - 1 - k) % LOG_RING];
		uint64_t i;

		if (e->kind != OP_WRITE && e->kind != OP_MAPWRITE && e->kind != OP_STREAM)
			continue;
		/* same offset, same op, any file (misdirected writes) */
		for (i = 0; i < n; i++)
			if (actual[i] != pattern_byte(e->opnum, off + i))
				break;
		if (i == n) {
			fprintf(stderr,
				"  actual bytes were written by op #%" PRIu64 " (f%d %s%s)\n",
				e->opnum, e->file, op_names[e->kind],
				e->file != file ? ", a different file!" : ", stale data");
			return;
		}
	}
	fprintf(stderr, "  actual bytes match no write in the log (garbage or older data)\n");
}

/* Does logged op e change byte `off` of file `file`? */
static int touches(const struct log_ent *e, int file, uint64_t off)
{
	if (e->file != file || e->skipped)
		return 0;
	switch (e->kind) {
	case OP_WRITE:
	case OP_STREAM:
	case OP_MAPWRITE:
	case OP_PUNCH:
	case OP_FALLOC:
		return off >= e->off && off < e->off + e->len;
	case OP_TRUNC: /* cuts it off, or brings it back as zero */
		return (e->size_before > off) != (e->off > off);
	case OP_REOPEN:
		return e->flag && e->size_before > off;
	default:
		return 0;
	}
}

/* The last ops (within the ring) that changed the bad byte. */
static void offset_history(int file, uint64_t off)
{
	uint64_t n = g.nlogged < LOG_RING ? g.nlogged : LOG_RING, shown = 0;

	fprintf(stderr,
		"spw_fsx: ops in the last %" PRIu64 " that changed f%d at 0x%" PRIx64
		" (newest first):\n",
		n, file, off);
	for (uint64_t k = 0; k < n && shown < 8; k++) {
		const struct log_ent *e = &g.ring[(g.nlogged - 1 - k) % LOG_RING];

		if (touches(e, file, off)) {
			log_print_ent(stderr, e);
			shown++;
		}
	}
	if (!shown)
		fprintf(stderr, "  (none)\n");
}

/*
 * Compare `actual` (read from file `file` at `off`) with the model; on a
 * difference print everything useful and exit.
 */
static void check_bytes(int file, uint64_t off, const unsigned char *actual, uint64_t len,
			const char *how)
{
	const unsigned char *exp;
	uint64_t first, last = 0, ndiff = 0, ctx, end;

	if (len == 0) /* the model's buffer may not exist yet (NULL + off is UB) */
		return;
	exp = g.files[file].buf + off;
	if (memcmp(exp, actual, len) == 0)
		return;
	for (first = 0; exp[first] == actual[first]; first++)
		;
	for (uint64_t i = first; i < len; i++)
		if (exp[i] != actual[i])
			ndiff++, last = i;
	fflush(stdout);
	fprintf(stderr,
		"spw_fsx: DATA MISMATCH at op %" PRIu64 " (%s of %s, off=0x%" PRIx64
		" len=0x%" PRIx64 ", size 0x%" PRIx64 ")\n",
		g.opnum, how, g.files[file].path, off, len, g.files[file].size);
	fprintf(stderr,
		"  first bad offset 0x%" PRIx64 " (%" PRIu64 "): expected 0x%02x, got 0x%02x\n",
		off + first, off + first, exp[first], actual[first]);
	fprintf(stderr,
		"  last bad offset 0x%" PRIx64 ", %" PRIu64 " bad bytes in this range; "
		"chunk-relative (boundary 0x%" PRIx64 "): 0x%" PRIx64 "\n",
		off + last, ndiff, g.boundary, (off + first) % g.boundary);
	ctx = first >= 8 ? first - 8 : 0;
	end = ctx + 24 < len ? ctx + 24 : len;
	hexdump_line("expected", exp + ctx, off + ctx, end - ctx, off + first);
	hexdump_line("actual", actual + ctx, off + ctx, end - ctx, off + first);
	trace_origin(file, off + first, actual + first, (len - first) < 16 ? len - first : 16);
	offset_history(file, off + first);
	fail_exit();
}

/* ---- model ------------------------------------------------------------- */

static void model_reserve(struct model *m, uint64_t need)
{
	uint64_t ncap;
	unsigned char *nb;

	if (need <= m->cap)
		return;
	ncap = m->cap ? m->cap : 64 * KIB;
	while (ncap < need)
		ncap *= 2;
	nb = realloc(m->buf, ncap);
	if (!nb)
		fail("out of memory growing model to %" PRIu64, ncap);
	memset(nb + m->cap, 0, ncap - m->cap);
	m->buf = nb;
	m->cap = ncap;
}

static void model_set_size(struct model *m, uint64_t size)
{
	model_reserve(m, size);
	if (size < m->size)
		memset(m->buf + size, 0, m->size - size);
	m->size = size;
}

/* ---- choosing offsets and lengths -------------------------------------- */

/*
 * I/O length: tiny 10%, up to 4K 35%, 4K-128K 35%, uniform up to maxio 10%,
 * about one boundary long (always crosses one) 10%. Big ops are few because
 * they dominate the run time; pick_off() makes many small ones cross
 * boundaries anyway.
 */
static uint64_t pick_len(void)
{
	uint64_t len, r = rnd() % 20;

	if (r < 2)
		len = rnd_range(1, 16);
	else if (r < 9)
		len = rnd_range(1, 4 * KIB);
	else if (r < 16)
		len = rnd_range(4 * KIB, 128 * KIB);
	else if (r < 18)
		len = rnd_range(1, g.maxio);
	else
		len =
		    clamp((int64_t)g.boundary + (int64_t)rnd_range(0, 32 * KIB) - 16 * (int64_t)KIB,
			  1, g.maxio);
	if (len > g.maxlen)
		len = rnd_range(1, g.maxlen);
	return len;
}

/* Start offset for `len` bytes, within [0, maxlen - len]. */
static uint64_t pick_off(const struct model *m, uint64_t len)
{
	uint64_t hi = g.maxlen - len, r = rnd() % 8, nb;
	int64_t o;

	switch (r) {
	case 0:
	case 1:
	case 2:
		return rnd_range(0, hi);
	case 3:
	case 4: /* straddle or touch a chunk boundary */
		nb = g.maxlen / g.boundary;
		o = (int64_t)(rnd_range(1, nb ? nb : 1) * g.boundary);
		switch (rnd() % 3) {
		case 0:
			o -= (int64_t)rnd_range(1, len < 64 * KIB ? len : 64 * KIB);
			break;
		case 1:
			o -= (int64_t)len; /* ends exactly on it */
			break;
		default:
			o += (int64_t)rnd_range(0, 64) - 32 * (rnd() % 2);
		}
		return clamp(o, 0, hi);
	case 5: /* around EOF: appends and small holes */
		o = (int64_t)m->size + (int64_t)rnd_range(0, 256 * KIB) - 64 * (int64_t)KIB;
		return clamp(o, 0, hi);
	default: /* inside the current data */
		return clamp((int64_t)rnd_range(0, m->size), 0, hi);
	}
}

/* ---- I/O helpers ------------------------------------------------------- */

static void check_fstat_size(int file, const char *when)
{
	struct model *m = &g.files[file];
	struct stat st;

	if (fstat(m->fd, &st) < 0)
		fail("fstat %s: %s", m->path, strerror(errno));
	if ((uint64_t)st.st_size != m->size)
		fail("%s: st_size of %s is 0x%" PRIx64 ", expected 0x%" PRIx64, when, m->path,
		     (uint64_t)st.st_size, m->size);
}

static void open_file(int file, int trunc)
{
	struct model *m = &g.files[file];

	m->fd = open(m->path, O_RDWR | O_CREAT | (trunc ? O_TRUNC : 0), 0644);
	if (m->fd < 0)
		fail("open %s%s: %s", m->path, trunc ? " O_TRUNC" : "", strerror(errno));
	if (trunc)
		model_set_size(m, 0);
}

/* Read [off, off+len) of the file through pread of fd and compare with the model. */
static void read_and_check_fd(int file, int fd, uint64_t off, uint64_t len, const char *how)
{
	struct model *m = &g.files[file];
	uint64_t want = off >= m->size ? 0 : (m->size - off < len ? m->size - off : len);
	ssize_t n;

	n = pread(fd, g.rbuf, len, (off_t)off);
	if (n < 0)
		fail("%s pread %s off=0x%" PRIx64 " len=0x%" PRIx64 ": %s", how, m->path, off, len,
		     strerror(errno));
	if ((uint64_t)n != want) {
		if ((uint64_t)n > want) /* show what came back past the model's EOF */
			fprintf(stderr, "spw_fsx: extra bytes past EOF start with 0x%02x\n",
				g.rbuf[want]);
		else if (n > 0)
			check_bytes(file, off, g.rbuf, (uint64_t)n, how);
		fail("%s pread %s off=0x%" PRIx64 " len=0x%" PRIx64 " returned 0x%zx, expected "
		     "0x%" PRIx64 " (size 0x%" PRIx64 ")",
		     how, m->path, off, len, n, want, m->size);
	}
	check_bytes(file, off, g.rbuf, want, how);
}

static void read_and_check(int file, uint64_t off, uint64_t len, const char *how)
{
	read_and_check_fd(file, g.files[file].fd, off, len, how);
}

static void verify_file(int file, const char *how)
{
	struct model *m = &g.files[file];

	check_fstat_size(file, how);
	for (uint64_t off = 0; off < m->size; off += g.maxio)
		read_and_check(file, off, g.maxio, how);
	/* and a read at EOF must return 0 */
	read_and_check(file, m->size, 1 + rnd() % 4096, how);
}

/* ---- operations -------------------------------------------------------- */

/* -D: write zeros over [from, to) of file m (what would be a hole). */
static void fill_zeros(struct model *m, uint64_t from, uint64_t to)
{
	static const unsigned char zero[64 * 1024];
	while (from < to) {
		size_t n = to - from < sizeof(zero) ? (size_t)(to - from) : sizeof(zero);
		ssize_t w = pwrite(m->fd, zero, n, (off_t)from);
		if (w <= 0)
			fail("dense: pwrite of zeros %s off=0x%" PRIx64 ": %s", m->path, from,
			     w < 0 ? strerror(errno) : "short");
		from += (uint64_t)w;
	}
}

static void do_write(int file)
{
	struct model *m = &g.files[file];
	uint64_t len = pick_len(), off = pick_off(m, len);
	struct log_ent *e = log_begin(file, OP_WRITE, off, len);
	ssize_t n;

	fill_pattern(g.wbuf, g.opnum, off, len);
	if (g.dense && off > m->size)
		fill_zeros(m, m->size, off);
	n = pwrite(m->fd, g.wbuf, len, (off_t)off);
	if (n < 0)
		fail("pwrite %s off=0x%" PRIx64 " len=0x%" PRIx64 ": %s", m->path, off, len,
		     strerror(errno));
	if ((uint64_t)n != len)
		fail("short pwrite %s off=0x%" PRIx64 " len=0x%" PRIx64 ": 0x%zx", m->path, off,
		     len, n);
	model_reserve(m, off + len);
	memcpy(m->buf + off, g.wbuf, len);
	if (off + len > m->size)
		m->size = off + len;
	e->size_after = m->size;
}

/* -A: a streaming writer: boundary-sized writes in a row through the
 * file's descriptor, each going on from the last; appending, or rewriting
 * from 0 or from a boundary. */
static void do_stream(int file)
{
	struct model *m = &g.files[file];
	uint64_t r = rnd() % 4, off, len, n, piece = g.boundary < g.maxio ? g.boundary : g.maxio;
	struct log_ent *e;

	off = r < 2 ? m->size : r < 3 ? 0 : rnd_range(0, g.maxlen / g.boundary) * g.boundary;
	if (off + piece > g.maxlen)
		off = 0;
	len = rnd_range(piece, g.maxlen - off);
	e = log_begin(file, OP_STREAM, off, len);
	if (g.dense && off > m->size)
		fill_zeros(m, m->size, off);
	for (uint64_t pos = 0; pos < len; pos += n) {
		ssize_t w;

		n = len - pos < piece ? len - pos : piece;
		fill_pattern(g.wbuf, g.opnum, off + pos, n);
		w = pwrite(m->fd, g.wbuf, n, (off_t)(off + pos));
		if (w < 0 || (uint64_t)w != n)
			fail("stream pwrite %s off=0x%" PRIx64 " len=0x%" PRIx64 ": %s", m->path,
			     off + pos, n, w < 0 ? strerror(errno) : "short");
		model_reserve(m, off + pos + n);
		memcpy(m->buf + off + pos, g.wbuf, n);
		if (off + pos + n > m->size)
			m->size = off + pos + n;
	}
	e->size_after = m->size;
}

/* -A: the whole file read front to back in 1 MiB reads through a fresh
 * descriptor, its cached pages dropped first (a read once), then a read at
 * EOF that must return nothing. */
static void do_scan(int file)
{
	struct model *m = &g.files[file];
	int fd = open(m->path, O_RDONLY);
	uint64_t off = 0;
	ssize_t n;

	log_begin(file, OP_SCAN, 0, m->size);
	if (fd < 0)
		fail("scan: open %s: %s", m->path, strerror(errno));
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	while ((n = read(fd, g.rbuf, MIB)) > 0) {
		if (off + (uint64_t)n > m->size)
			fail("scan %s: read past EOF at 0x%" PRIx64 " (size 0x%" PRIx64 ")",
			     m->path, off + (uint64_t)n, m->size);
		check_bytes(file, off, g.rbuf, (uint64_t)n, "scan");
		off += (uint64_t)n;
	}
	if (n < 0)
		fail("scan read %s off=0x%" PRIx64 ": %s", m->path, off, strerror(errno));
	if (off != m->size)
		fail("scan %s: EOF at 0x%" PRIx64 ", expected 0x%" PRIx64, m->path, off, m->size);
	close(fd);
}

static void do_read(int file)
{
	struct model *m = &g.files[file];
	uint64_t len = pick_len(), off;
	struct log_ent *e;

	/* mostly inside the data, sometimes straddling or past EOF */
	if (rnd() % 8 == 0)
		off = rnd_range(m->size > 4 * KIB ? m->size - 4 * KIB : 0, m->size + 64 * KIB);
	else
		off = pick_off(m, len);
	e = log_begin(file, OP_READ, off, len);
	e->flag = off + len > m->size;
	if (rnd() % 16 == 0)
		check_fstat_size(file, "read");
	read_and_check(file, off, len, "read");
}

static void do_trunc(int file)
{
	struct model *m = &g.files[file];
	uint64_t to, r = rnd() % 6;
	struct log_ent *e;

	if (r < 2)
		to = rnd_range(0, m->size); /* shrink */
	else if (r < 4)
		to = rnd_range(m->size, g.maxlen); /* grow */
	else if (r < 5)
		to = clamp((int64_t)(rnd_range(0, g.maxlen / g.boundary) * g.boundary) +
			       (int64_t)rnd_range(0, 8) - 4,
			   0, g.maxlen);
	else
		to = rnd() % 4 == 0 ? 0 : rnd_range(0, g.maxlen);
	e = log_begin(file, OP_TRUNC, to, 0);
	if (ftruncate(m->fd, (off_t)to) < 0)
		fail("ftruncate %s to 0x%" PRIx64 ": %s", m->path, to, strerror(errno));
	if (g.dense && to > m->size)
		fill_zeros(m, m->size, to);
	model_set_size(m, to);
	e->size_after = to;
	if (rnd() % 4 == 0)
		check_fstat_size(file, "after truncate");
}

static void do_punch(int file)
{
	struct model *m = &g.files[file];
	uint64_t len = pick_len(), off, end;
	struct log_ent *e;

	off = m->size ? rnd_range(0, m->size - 1) : 0;
	if (rnd() % 4 == 0) /* boundary-aligned punches, whole chunks */
		off = (off / g.boundary) * g.boundary, len = g.boundary * rnd_range(1, 2);
	e = log_begin(file, OP_PUNCH, off, len);
	if (!g.have_punch || m->size == 0) {
		e->skipped = 1;
		return;
	}
	if (g.dense) { /* zeros written instead of a hole */
		end = off + len < m->size ? off + len : m->size;
		fill_zeros(m, off, end > off ? end : off);
		if (end > off)
			memset(m->buf + off, 0, end - off);
		return;
	}
	if (fallocate(m->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) <
	    0) {
		if ((errno == EOPNOTSUPP || errno == ENOSYS) && g.have_punch == -1) {
			g.have_punch = 0;
			e->skipped = 1;
			if (!g.quiet)
				printf("spw_fsx: PUNCH_HOLE not supported here, skipping\n");
			return;
		}
		fail("fallocate(PUNCH_HOLE) %s off=0x%" PRIx64 " len=0x%" PRIx64 ": %s", m->path,
		     off, len, strerror(errno));
	}
	g.have_punch = 1;
	end = off + len < m->size ? off + len : m->size;
	if (end > off)
		memset(m->buf + off, 0, end - off);
}

static void do_falloc(int file)
{
	struct model *m = &g.files[file];
	uint64_t len = pick_len(), off = pick_off(m, len);
	struct log_ent *e = log_begin(file, OP_FALLOC, off, len);

	if (!g.have_falloc) {
		e->skipped = 1;
		return;
	}
	if (fallocate(m->fd, 0, (off_t)off, (off_t)len) < 0) {
		if ((errno == EOPNOTSUPP || errno == ENOSYS) && g.have_falloc == -1) {
			g.have_falloc = 0;
			e->skipped = 1;
			if (!g.quiet)
				printf("spw_fsx: fallocate(0) not supported here, skipping\n");
			return;
		}
		fail("fallocate(0) %s off=0x%" PRIx64 " len=0x%" PRIx64 ": %s", m->path, off, len,
		     strerror(errno));
	}
	g.have_falloc = 1;
	if (g.dense && off + len > m->size)
		fill_zeros(m, m->size, off + len);
	if (off + len > m->size)
		model_set_size(m, off + len);
	e->size_after = m->size;
}

static void bus_handler(int sig)
{
	if (bus_armed)
		siglongjmp(bus_jmp, 1);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Map the pages covering [off, off+len) of a file that is at least that long. */
static unsigned char *map_range(struct model *m, uint64_t off, uint64_t len, int prot,
				uint64_t *map_off, uint64_t *map_len)
{
	void *p;

	*map_off = off - off % (uint64_t)g.pagesize;
	*map_len = off + len - *map_off;
	p = mmap(NULL, *map_len, prot, MAP_SHARED, m->fd, (off_t)*map_off);
	if (p == MAP_FAILED)
		fail("mmap %s off=0x%" PRIx64 " len=0x%" PRIx64 " %s: %s", m->path, *map_off,
		     *map_len, prot & PROT_WRITE ? "rw" : "r", strerror(errno));
	return p;
}

/*
 * A range inside the file (size > 0) for the mmap ops: at most 256K (page
 * faults through FUSE are slow), at EOF, across a boundary, or anywhere.
 */
static void pick_inside(const struct model *m, uint64_t *off, uint64_t *len)
{
	uint64_t r = rnd() % 4, b;

	*len = pick_len();
	if (*len > 256 * KIB)
		*len = rnd_range(64 * KIB, 256 * KIB);
	if (*len > m->size)
		*len = rnd_range(1, m->size);
	if (r == 0) {
		*off = m->size - *len;
	} else if (r == 1 && m->size > g.boundary) {
		b = rnd_range(1, (m->size - 1) / g.boundary) * g.boundary;
		*off = clamp((int64_t)b - (int64_t)rnd_range(1, *len), 0, m->size - *len);
	} else {
		*off = rnd_range(0, m->size - *len);
	}
}

static void do_mapread(int file)
{
	struct model *m = &g.files[file];
	uint64_t off = 0, len = 0, moff, mlen;
	struct log_ent *e;
	unsigned char *p;

	if (m->size)
		pick_inside(m, &off, &len);
	e = log_begin(file, OP_MAPREAD, off, len);
	if (!m->size) {
		e->skipped = 1;
		return;
	}
	p = map_range(m, off, len, PROT_READ, &moff, &mlen);
	if (sigsetjmp(bus_jmp, 1)) {
		bus_armed = 0;
		fail("SIGBUS reading mapping of %s at off=0x%" PRIx64 " len=0x%" PRIx64, m->path,
		     off, len);
	}
	bus_armed = 1;
	memcpy(g.rbuf, p + (off - moff), len);
	bus_armed = 0;
	if (munmap(p, mlen) < 0)
		fail("munmap: %s", strerror(errno));
	check_bytes(file, off, g.rbuf, len, "mapread");
}

static void do_mapwrite(int file)
{
	struct model *m = &g.files[file];
	uint64_t off = 0, len = 0, moff, mlen;
	struct log_ent *e;
	unsigned char *p;

	if (m->size)
		pick_inside(m, &off, &len);
	e = log_begin(file, OP_MAPWRITE, off, len);
	if (!m->size) {
		e->skipped = 1;
		return;
	}
	fill_pattern(g.wbuf, g.opnum, off, len);
	p = map_range(m, off, len, PROT_READ | PROT_WRITE, &moff, &mlen);
	if (sigsetjmp(bus_jmp, 1)) {
		bus_armed = 0;
		fail("SIGBUS writing mapping of %s at off=0x%" PRIx64 " len=0x%" PRIx64, m->path,
		     off, len);
	}
	bus_armed = 1;
	memcpy(p + (off - moff), g.wbuf, len);
	bus_armed = 0;
	if (msync(p, mlen, MS_SYNC) < 0)
		fail("msync %s off=0x%" PRIx64 " len=0x%" PRIx64 ": %s", m->path, moff, mlen,
		     strerror(errno));
	if (munmap(p, mlen) < 0)
		fail("munmap: %s", strerror(errno));
	memcpy(m->buf + off, g.wbuf, len);
}

static void do_reopen(int file)
{
	struct model *m = &g.files[file];
	int trunc = rnd() % 5 == 0 && !(g.disabled & NO_OTRUNC);
	struct log_ent *e = log_begin(file, OP_REOPEN, 0, 0);

	e->flag = trunc;
	if (close(m->fd) < 0)
		fail("close %s: %s", m->path, strerror(errno));
	m->fd = -1;
	/* -P: a reader opens first, so on a mount that passes files all in RAM
	 * through to the kernel, the reopen joins it as a passthrough writer */
	int holder = g.pt_reopen ? open(m->path, O_RDONLY) : -1;
	if (g.pt_reopen && holder < 0)
		fail("open %s read-only: %s", m->path, strerror(errno));
	open_file(file, trunc);
	if (holder >= 0)
		close(holder);
	e->size_after = m->size;
	if (rnd() % 2)
		check_fstat_size(file, "after reopen");
}

/* -R: a read through the second descriptor, checked like any */
static void do_read2(int file)
{
	struct model *m = &g.files[file];
	uint64_t len = pick_len(), off = pick_off(m, len);

	log_begin(file, OP_READ2, off, len)->flag = off + len > m->size;
	read_and_check_fd(file, m->fd2, off, len, "read2");
}

/* -E: user.spillway.evict or .warm of the file (the tier moves it; its
 * bytes stay); one evict in three with the file closed first (not the
 * second descriptor), reopened after as a reopen does. An evict refused
 * with EBUSY (a file in RAM with passthrough opens) is logged skipped. */
static void do_evict(int file)
{
	struct model *m = &g.files[file];
	uint64_t r = rnd() % 6;
	int how = r < 2 ? 0 : r < 4 ? 1 : 2; /* evict, warm, evict closed */
	const char *name = how == 1 ? "user.spillway.warm" : "user.spillway.evict";
	struct log_ent *e = log_begin(file, OP_EVICT, 0, 0);

	e->flag = how;
	if (how == 2) {
		if (close(m->fd) < 0)
			fail("close %s: %s", m->path, strerror(errno));
		m->fd = -1;
	}
	/* EBUSY: an evict of a file the kernel reads itself (passthrough
	 * opens of its hot file), refused as documented */
	if (setxattr(m->path, name, "1", 1, 0) < 0) {
		if (errno != EBUSY || how == 1)
			fail("setxattr %s %s: %s", m->path, name, strerror(errno));
		e->skipped = 1;
	}
	if (how == 2) {
		int holder = g.pt_reopen ? open(m->path, O_RDONLY) : -1;
		if (g.pt_reopen && holder < 0)
			fail("open %s read-only: %s", m->path, strerror(errno));
		open_file(file, 0);
		if (holder >= 0)
			close(holder);
	}
	if (rnd() % 2)
		check_fstat_size(file, how == 1 ? "after warm" : "after evict");
}

static void do_fsync(int file)
{
	struct model *m = &g.files[file];
	int data = rnd() % 2;
	struct log_ent *e = log_begin(file, OP_FSYNC, 0, 0);

	e->flag = data;
	if ((data ? fdatasync(m->fd) : fsync(m->fd)) < 0)
		fail("%s %s: %s", data ? "fdatasync" : "fsync", m->path, strerror(errno));
}

static void drop_cache(int file, uint64_t off, uint64_t len)
{
	struct model *m = &g.files[file];
	int err = posix_fadvise(m->fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);

	if (err)
		fail("posix_fadvise(DONTNEED) %s off=0x%" PRIx64 " len=0x%" PRIx64 ": %s", m->path,
		     off, len, strerror(err));
}

static void do_verify(int file)
{
	struct log_ent *e = log_begin(file, OP_VERIFY, 0, g.files[file].size);

	e->flag = rnd() % 2; /* from the file system, not the page cache */
	if (e->flag)
		drop_cache(file, 0, 0);
	verify_file(file, "verify");
}

static void do_dropcache(int file)
{
	struct model *m = &g.files[file];
	uint64_t off = 0, len = 0;

	if (rnd() % 2) {
		len = pick_len();
		off = pick_off(m, len);
	}
	log_begin(file, OP_DROPCACHE, off, len);
	drop_cache(file, off, len);
}

static enum op_kind pick_op(void)
{
	unsigned total = 0, r;
	int k;

	for (k = 0; k < OP_NKINDS; k++)
		if (!(g.disabled & (1u << k)))
			total += op_weight[k];
	r = (unsigned)(rnd() % total);
	for (k = 0; k < OP_NKINDS; k++) {
		if (g.disabled & (1u << k))
			continue;
		if (r < op_weight[k])
			return (enum op_kind)k;
		r -= op_weight[k];
	}
	return OP_READ;
}

/* -X a,b,c: names from op_names[] or "otrunc". */
static int parse_disabled(const char *arg)
{
	char *copy = strdup(arg), *save = NULL, *tok;
	int ret = 0, k;

	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "otrunc")) {
			g.disabled |= NO_OTRUNC;
			continue;
		}
		for (k = 0; k < OP_NKINDS; k++)
			if (!strcmp(tok, op_names[k]))
				break;
		if (k == OP_NKINDS || k == OP_WRITE) {
			fprintf(stderr, "spw_fsx: -X: unknown or required operation '%s'\n", tok);
			ret = -1;
			break;
		}
		g.disabled |= 1u << k;
	}
	free(copy);
	return ret;
}

static void run_op(void)
{
	int file = (int)(rnd() % g.nfiles);
	enum op_kind k = pick_op();
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	switch (k) {
	case OP_WRITE:
		do_write(file);
		break;
	case OP_READ:
		do_read(file);
		break;
	case OP_TRUNC:
		do_trunc(file);
		break;
	case OP_PUNCH:
		do_punch(file);
		break;
	case OP_FALLOC:
		do_falloc(file);
		break;
	case OP_MAPREAD:
		do_mapread(file);
		break;
	case OP_MAPWRITE:
		do_mapwrite(file);
		break;
	case OP_REOPEN:
		do_reopen(file);
		break;
	case OP_DROPCACHE:
		do_dropcache(file);
		break;
	case OP_STREAM:
		do_stream(file);
		break;
	case OP_SCAN:
		do_scan(file);
		break;
	case OP_FSYNC:
		do_fsync(file);
		break;
	case OP_EVICT:
		do_evict(file);
		break;
	case OP_READ2:
		do_read2(file);
		break;
	default:
		do_verify(file);
		break;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	g.counts[k]++;
	g.secs[k] += (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	if (g.verbose)
		log_print_ent(stdout, &g.ring[(g.nlogged - 1) % LOG_RING]);
}

/* ---- main -------------------------------------------------------------- */

static int parse_u64(const char *s, uint64_t *out, int allow_suffix)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *s == '-')
		return -1;
	if (allow_suffix && *end) {
		unsigned shift = 0;

		switch (*end) {
		case 'k':
		case 'K':
			shift = 10;
			break;
		case 'm':
		case 'M':
			shift = 20;
			break;
		case 'g':
		case 'G':
			shift = 30;
			break;
		default:
			return -1;
		}
		end++;
		if (v > (UINT64_MAX >> shift))
			return -1;
		v <<= shift;
	}
	if (*end)
		return -1;
	*out = v;
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: spw_fsx [-N ops] [-S seed] [-f nfiles] [-l maxlen] [-b boundary] [-m] [-A] [-q] "
		"[-v] [-k] [-P] [-D] [-E] [-R] [-X ops] DIR\n"
		"  -N ops       operations to run (default 10000)\n"
		"  -S seed      PRNG seed (default: from time and pid; always printed)\n"
		"  -f nfiles    files kept open (default 4, max %d)\n"
		"  -l maxlen    largest file size, K/M/G suffixes (default 8M)\n"
		"  -b boundary  chunk size to aim I/O at (default 1M)\n"
		"  -m           also mmap MAP_SHARED reads and writes (+ msync)\n"
		"  -A           also streams (writes in a row) and scans (reads once)\n"
		"  -q           quiet: only the summary line and failures\n"
		"  -v           print every operation\n"
		"  -k           keep the files in DIR at the end (default: unlink)\n"
		"  -P           reopen with a read-only open held meanwhile (passthrough writers)\n"
		"  -D           dense: zeros written where a file would get holes (grow, punch)\n"
		"  -E           also evicts and warms (setxattr user.spillway.evict/.warm), some\n"
		"               with the file closed first\n"
		"  -R           a second read-only descriptor per file, open throughout, read too\n"
		"  -X ops       disable operations, comma-separated: read, truncate, punch,\n"
		"               fallocate, mapread, mapwrite, reopen, fsync, verify,\n"
		"               dropcache, stream, scan, evict, read2, and otrunc (reopens never use O_TRUNC); to step\n"
		"               past a known bug\n",
		MAX_FILES);
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t v, progress_every;
	int c, seed_given = 0;
	struct timeval t0, t1;
	double secs;

	g.nops = 10000;
	g.nfiles = 4;
	g.maxlen = 8 * MIB;
	g.boundary = MIB;
	g.have_punch = -1; /* unknown until the first try */
	g.have_falloc = -1;
	while ((c = getopt(argc, argv, "N:S:f:l:b:mAqvkPDERX:h")) != -1) {
		switch (c) {
		case 'N':
			if (parse_u64(optarg, &g.nops, 1))
				usage();
			break;
		case 'S':
			if (parse_u64(optarg, &g.seed, 0))
				usage();
			seed_given = 1;
			break;
		case 'f':
			if (parse_u64(optarg, &v, 0) || v < 1 || v > MAX_FILES)
				usage();
			g.nfiles = (unsigned)v;
			break;
		case 'l':
			if (parse_u64(optarg, &g.maxlen, 1) || g.maxlen < 1)
				usage();
			break;
		case 'b':
			if (parse_u64(optarg, &g.boundary, 1) || g.boundary < 4096)
				usage();
			break;
		case 'm':
			g.use_mmap = 1;
			break;
		case 'A':
			g.admission = 1;
			break;
		case 'q':
			g.quiet = 1;
			break;
		case 'v':
			g.verbose = 1;
			break;
		case 'k':
			g.keep = 1;
			break;
		case 'P':
			g.pt_reopen = 1;
			break;
		case 'D':
			g.dense = 1;
			break;
		case 'E':
			g.evicts = 1;
			break;
		case 'R':
			g.second = 1;
			break;
		case 'X':
			if (parse_disabled(optarg))
				usage();
			g.xopt = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1)
		usage();
	if (!g.use_mmap)
		g.disabled |= (1u << OP_MAPREAD) | (1u << OP_MAPWRITE);
	if (!g.admission)
		g.disabled |= (1u << OP_STREAM) | (1u << OP_SCAN);
	if (!g.evicts)
		g.disabled |= 1u << OP_EVICT;
	if (!g.second)
		g.disabled |= 1u << OP_READ2;
	g.dir = argv[optind];
	if (!seed_given) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		v = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
		g.seed = mix64(v) % 1000000000ULL; /* short enough to type */
	}
	g.rng = g.seed;
	g.maxio = MIB + 64 * KIB;
	if (g.boundary + 32 * KIB > g.maxio)
		g.maxio = g.boundary + 32 * KIB;
	g.pagesize = sysconf(_SC_PAGESIZE);
	g.wbuf = malloc(g.maxio);
	g.rbuf = malloc(g.maxio);
	if (!g.wbuf || !g.rbuf) {
		fprintf(stderr, "spw_fsx: out of memory\n");
		return 1;
	}
	signal(SIGBUS, bus_handler);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("spw_fsx: seed %" PRIu64 ", %" PRIu64 " ops, %u files, maxlen %" PRIu64
	       ", boundary %" PRIu64 "%s, dir %s\n",
	       g.seed, g.nops, g.nfiles, g.maxlen, g.boundary, g.use_mmap ? ", mmap" : "", g.dir);

	for (unsigned i = 0; i < g.nfiles; i++) {
		snprintf(g.files[i].path, sizeof(g.files[i].path), "%s/fsx.%u", g.dir, i);
		open_file((int)i, 1);
		check_fstat_size((int)i, "after create");
		g.files[i].fd2 = g.second ? open(g.files[i].path, O_RDONLY) : -1;
		if (g.second && g.files[i].fd2 < 0)
			fail("open %s read-only: %s", g.files[i].path, strerror(errno));
	}

	progress_every = g.nops / 10 ? g.nops / 10 : 1;
	gettimeofday(&t0, NULL);
	for (g.opnum = 1; g.opnum <= g.nops; g.opnum++) {
		run_op();
		if (!g.quiet && g.opnum % progress_every == 0 && g.opnum != g.nops)
			printf("spw_fsx: %" PRIu64 " ops\n", g.opnum);
	}
	g.opnum = g.nops + 1; /* the final checks */

	/* final: verify every file, then close, reopen and verify again */
	for (unsigned i = 0; i < g.nfiles; i++) {
		log_begin((int)i, OP_VERIFY, 0, g.files[i].size);
		verify_file((int)i, "final verify");
		if (g.second) {
			for (uint64_t off = 0; off <= g.files[i].size; off += g.maxio)
				read_and_check_fd((int)i, g.files[i].fd2, off, g.maxio,
						  "final verify (second descriptor)");
			if (close(g.files[i].fd2) < 0)
				fail("close %s: %s", g.files[i].path, strerror(errno));
		}
		if (close(g.files[i].fd) < 0)
			fail("close %s: %s", g.files[i].path, strerror(errno));
		open_file((int)i, 0);
		log_begin((int)i, OP_VERIFY, 0, g.files[i].size)->flag = 1;
		drop_cache((int)i, 0, 0);
		verify_file((int)i, "verify after reopen");
		if (close(g.files[i].fd) < 0)
			fail("close %s: %s", g.files[i].path, strerror(errno));
		if (!g.keep && unlink(g.files[i].path) < 0)
			fail("unlink %s: %s", g.files[i].path, strerror(errno));
		free(g.files[i].buf);
	}
	gettimeofday(&t1, NULL);
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_usec - t0.tv_usec) / 1e6;
	if (!g.quiet) {
		printf("spw_fsx: op counts:");
		for (int k = 0; k < OP_NKINDS; k++)
			if (g.counts[k])
				printf(" %s=%" PRIu64 "(%.1fs)", op_names[k], g.counts[k],
				       g.secs[k]);
		printf("; punch %s, fallocate %s; %.1fs\n",
		       g.have_punch == 1 ? "ok"
		       : g.have_punch	 ? "untried"
					 : "unsupported",
		       g.have_falloc == 1 ? "ok"
		       : g.have_falloc	  ? "untried"
					  : "unsupported",
		       secs);
	}
	printf("spw_fsx: %" PRIu64 " ops ok, seed %" PRIu64 "\n", g.nops, g.seed);
	free(g.wbuf);
	free(g.rbuf);
	return 0;
}
