/*
 * spillway-fsck — check a spillway filesystem offline: its index (journal and
 * checkpoints in STATE_DIR) against the segments of its cold tier; repair it,
 * or rebuild the index from the segments' footers.
 *   spillway-fsck [--verify-data] [--repair] [--rebuild] [--quiet] STATE_DIR
 * Exit status as fsck(8): 0 clean, 1 problems found and all repaired, 4
 * problems left, 8 operational error (e.g. the filesystem is mounted), 16
 * usage. One line per problem on stdout, naming files by path.
 * Files: this one has main, the options, STATE_DIR and the order of the
 * passes; fsck_check.c the checks and their report; fsck_stores.c the
 * stores and segment reads; fsck_out.c the output; fsck_model.c the replay
 * into index/'s struct index, its changes and checkpoints; fsck_rebuild.c
 * --rebuild; fsck_i.h what they share (and which calls which: no circle).
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

#include "common/log.h"
#include "index/journal.h"
#include "tier/store/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EX_CLEAN 0
#define EX_FIXED 1
#define EX_LEFT	 4
#define EX_OPER	 8
#define EX_USAGE 16

/* ---- STATE_DIR ---- */

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
		fsck_uuid_str(f->tiers.uuid, us);
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

	if ((ret = replay_state(f, any)) < 0 || (ret = fsck_open_stores(f)) < 0 ||
	    (ret = fsck_read_manifests(f)) < 0 || (ret = adopt_majority_uuid(f)) < 0)
		return ret;
	fsck_bind_segments(f);
	f->collect = 1; /* the names the first scan drops are problems */
	if ((ret = fsck_scan(f)) < 0 || (ret = rebuild(f)) < 0)
		return ret;
	if ((ret = fsck_check_namespace(f)) < 0 || (ret = fsck_scan(f)) < 0 ||
	    (ret = fsck_check_files(f)) < 0 || (ret = fsck_check_segments(f)) < 0)
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
	/* the segments found and kept, for the summary: the tables go below */
	for (size_t i = 0; i < f->found.nb; i++)
		for (struct hent *e = f->found.b[i]; e; e = e->next)
			if (!((struct found *)e)->removed) {
				f->seg_bytes_kept += ((struct found *)e)->size;
				f->segs_kept++;
			}
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
	uint64_t segbytes = f->seg_bytes_kept, nsegs = f->segs_kept;
	char hs[32];

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
	if (f->layout_off)
		printf("; %" PRIu64 " record%s of v3 segments off 4 KiB (read through a buffer)",
		       f->layout_off, S(f->layout_off));
	if (f->extents)
		printf("; %" PRIu64 " file%s in extents", f->extents, S(f->extents));
	printf("\n");
}

int main(int argc, char **argv)
{
	struct fsck fs = {0}, *f = &fs;
	uint64_t max_gen;
	int any, code;

	if ((code = parse_args(f, argc, argv)) >= 0)
		return code;
	if (open_state(f, &any, &max_gen) < 0) {
		tiers_file_free(&f->tiers); /* what read_tiers took (LeakSanitizer) */
		return EX_OPER;
	}
	code = finish(f, check(f, any), max_gen);
	if (!f->quiet)
		print_summary(f, code);
	return code;
}
