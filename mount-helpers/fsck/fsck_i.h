/*
 * fsck_i.h — private to spillway-fsck: the index it checks (a struct index of index/) and the
 * segment table (a struct segtab of tier/), both replayed by their own
 * code, what fsck keeps beside them (paths, anomalies), the segments found
 * in the stores, and the calls between its files. Everything hangs off one
 * struct fsck that main() builds; functions take it first.
 * Files, each calling only those below it: spillway-fsck.c (main, the
 * options, STATE_DIR, the order of the passes); fsck_rebuild.c (--rebuild);
 * fsck_check.c (the checks and their report); fsck_stores.c (the cold
 * stores, the segments found in them, chunk reads); fsck_model.c (the
 * replay into the index, changes, paths, checkpoints); fsck_out.c (what is
 * printed).
 * Single-threaded: nothing here takes a lock (the segment table takes its
 * own, never contended).
 */
#ifndef SPW_FSCK_I_H
#define SPW_FSCK_I_H

#include "index/index.h"
#include "index/journal.h"
#include "tier/segment/tiers_file.h"
#include "tier/segment/segment.h"
#include "tier/segment/segtab.h"
#include "tier/store/store.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#define ROOT_INO     1
#define MAX_NVME     TIERS_MAX_NVME
#define PATH_MAX_OUT 4096

#define S(n) ((n) == 1 ? "" : "s") /* plural */

/* ---- a small chained hash (key: a 64-bit hash; callers compare the rest) ---- */

struct hent {
	struct hent *next;
	uint64_t key;
};

struct htab {
	struct hent **b;
	size_t nb, n;
};

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static inline uint64_t key2(uint64_t a, uint64_t b)
{
	return mix64(a * 0x9e3779b97f4a7c15ull ^ mix64(b));
}

static inline struct hent *ht_bucket(const struct htab *t, uint64_t key)
{
	return t->nb ? t->b[key & (t->nb - 1)] : NULL;
}

/* fsck_model.c: add e under key (0, -ENOMEM); every entry of t into a
 * malloc'ed array (caller frees; NULL when empty). */
int fsck_ht_add(struct htab *t, struct hent *e, uint64_t key);
void **fsck_ht_array(const struct htab *t, size_t *n);

/* ---- what fsck keeps beside the index ---- */

/* The first name / reaches an inode by (breadth first): its path. */
struct fname {
	struct hent h; /* key mix64(ino) */
	uint64_t ino, parent;
	char *name;
};

/* A name idx_replay_finish dropped (reported by check_namespace). */
struct badname {
	uint64_t parent, ino;
	char *name;
	int kind; /* IDX_AN_NAME_DANGLING, IDX_AN_NAME_ORPHAN */
	int rescue; /* its inode may need a new name */
};

/* An inode / does not reach (kept in the index by the anomaly hook). */
struct unreach {
	uint64_t ino, names;
	int is_dir;
};

/* A segment present in a store. */
struct found {
	struct hent h; /* key mix64(id) */
	int store;
	uint64_t id, size, payload;
	uint32_t dev;
	int bound; /* the copy the segment table's entry for id means (one at most) */
	int mret; /* seg_read_manifest's result */
	uint32_t version; /* its format version (1, 2, 3), when mret is 0 */
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

struct fsck {
	const char *dir;
	int verify, repair, rebuild, quiet, progress;
	struct tiers_file tiers;
	struct index *idx; /* the index, replayed by index/'s own code */
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

	struct segtab *segs; /* the segment table, replayed by tier/'s own code */
	uint8_t *seg_reported; /* by id: missing, and a file using it was reported */
	uint64_t nseg_reported;
	uint64_t meta_next_seg; /* the highest next_seg a META record holds */
	struct htab names, found, copies;
	uint64_t orig_next_ino;
	uint64_t unknown_recs;
	int root_seen; /* a JR_INODE made / (else fsck_check_root reports it) */
	int root_bad;  /* ... and the last one was not a directory */
	int collect;   /* the first scan: keep the names it drops in bad */
	struct badname *bad;
	size_t nbad;
	struct unreach *unreach; /* from the last fsck_scan */
	size_t nunreach, unreach_cap;

	uint64_t problems, fixed, lost;
	uint64_t extents; /* files whose bytes are an extent (checked) */
	int oper; /* an operational error happened: exit 8 */
	uint64_t files, dirs, chunks_checked, bytes_verified;
	/* --verify-data: records of v3 segments not laid out as v3 places them
	 * (readable, but read through a buffer: not counted as damage) */
	uint64_t layout_off;
	uint64_t segs_kept, seg_bytes_kept; /* the summary's: counted before close */
};

/* Attributes of an inode of the index (JR_INODE's view; target: name). */
static inline struct jrec_attr fsck_attr(struct inode *in)
{
	struct jrec r;
	idx_inode_rec(in, &r);
	return r.attr;
}

static inline int is_dir(struct inode *in)
{
	return S_ISDIR(fsck_attr(in).mode);
}

/* Chunk c of in: 1 with its location when it has a cold copy, else 0. */
static inline int fsck_chunk_loc(struct inode *in, uint64_t c, struct chunk_loc *loc)
{
	struct jrec r;
	idx_chunk_rec(in, c, &r);
	*loc = r.loc;
	return r.type == JR_CHUNK_LOC;
}

/* Chunk c of in: the locations of its cold copy — one, or a chain's base
 * and overlays (locs holds CHAIN_MAX + 1) — and how many (0: none). */
static inline int fsck_chunk_locs(struct inode *in, uint64_t c, struct chunk_loc *locs)
{
	struct jrec rs[CHAIN_MAX + 2];
	int n = idx_chunk_recs(in, c, rs), k = 0;
	for (int i = 0; i < n; i++)
		if (rs[i].type == JR_CHUNK_LOC || rs[i].type == JR_CHUNK_OVL)
			locs[k++] = rs[i].loc;
	return k;
}

/* Chunk c of in has overlays over its cold copy (its records are checked,
 * not replaced: a copy of its base alone would drop them). */
static inline int fsck_chunk_chained(struct inode *in, uint64_t c)
{
	return c < idx_nchunks(in) && in->chunks[c].chain != NULL;
}

static inline int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- fsck_out.c: what is printed ---- */

/* An operational error on stderr (exit 8). */
void fsck_oper_err(struct fsck *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A problem line on stdout, counted; `fixed`: 1 repaired, 0 left. */
void fsck_problem(struct fsck *f, int fixed, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An information line on stdout, unless --quiet. */
void fsck_note(struct fsck *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "what done/total (n%)" on a terminal's stderr, at most once a second. */
void fsck_progress(struct fsck *f, const char *what, uint64_t done, uint64_t total);
/* "64 MiB", "1.5 GiB", "512 bytes" into buf. */
const char *fsck_human(uint64_t v, char *buf, size_t len);
/* "chunk 3" / "chunks 0-3,7" from sorted chunk numbers (duplicates allowed). */
const char *fsck_chunk_list(const uint64_t *c, size_t n, char *buf, size_t len);
/* A uuid as 32 lowercase hex digits. */
void fsck_uuid_str(const uint8_t u[16], char out[33]);

/* ---- fsck_model.c: replay into the index, changes, paths, checkpoints ---- */

/* The copy in a store that segment id's table entry is bound to (NULL:
 * none, or no entry). A replayed SEG_ADD or SEG_DEL unbinds it;
 * bind_segments and fsck_change_seg_add bind. */
struct found *fsck_seg_copy(struct fsck *f, uint64_t id);
/* Set up f->idx (chunk size known) with fsck's anomaly hook, and the
 * segment table f->segs. 0, -ENOMEM. */
int fsck_index_open(struct fsck *f);
/* Apply one record: to the index with idx_replay, segments and next_seg to
 * the segment table with segtab_replay (a jrnl_recover callback, and our
 * own changes). 0, -errno; records that name unknown inodes are counted
 * (unknown_recs) and skipped. */
int fsck_apply(void *arg, const struct jrec *r);
/* idx_replay_finish (link counts; nothing dropped: the hook keeps every
 * unreachable inode, listed in f->unreach) and each reachable inode's path.
 * 0, -ENOMEM. */
int fsck_scan(struct fsck *f);
int fsck_reachable(struct fsck *f, uint64_t ino);
/* Path of a reachable inode ("/a/b"), else "<inode N>"; of a name
 * ("/dir/name"), its parent being reachable or not. */
const char *fsck_path_of(struct fsck *f, uint64_t ino, char *buf, size_t len);
const char *fsck_dent_path(struct fsck *f, uint64_t parent, const char *name, char *buf,
			   size_t len);
/* Append r to the journal, then apply it (r's strings may belong to the
 * index). 0 or -errno (reported). The change_* build r. */
int fsck_change(struct fsck *f, const struct jrec *r);
/* next_seg: at least this (0: the table's next id). */
int fsck_change_meta(struct fsck *f, uint64_t next_ino, uint64_t next_seg);
int fsck_change_seg_add(struct fsck *f, struct found *fd);
int fsck_change_loc(struct fsck *f, uint64_t ino, uint64_t chunk, const struct found *fd,
		    const struct seg_entry *e);
int fsck_change_link(struct fsck *f, uint64_t parent, const char *name, uint64_t ino);
int fsck_change_unlink(struct fsck *f, uint64_t parent, const char *name, uint32_t nlen);
int fsck_change_inode(struct fsck *f, uint64_t ino, const struct jrec_attr *a, const char *target,
		      uint32_t tlen);
/* The highest inode number anything knows of, plus one. */
uint64_t fsck_ino_ceiling(struct fsck *f);
/* /lost+found (created as a directory inode above every known number). */
int fsck_lost_found(struct fsck *f, uint64_t *out);
/* Is fd the copy the segment table points at? */
int fsck_in_table(struct fsck *f, const struct found *fd);
/* Sorted array of the reachable inodes (caller frees). NULL and *n 0 when
 * none or out of memory (then -ENOMEM in *err). */
struct inode **fsck_reachable_inodes(struct fsck *f, size_t *n, int *err);
/* qsort comparator of struct found *. */
int fsck_found_cmp(const void *a, const void *b);
/* Write STATE_DIR/checkpoint.<gen> with the journal's writer (no usable
 * checkpoint to start the journal from). 0 or -errno (reported). */
int fsck_write_checkpoint(struct fsck *f, uint64_t gen);
/* Free what fsck_index_open and fsck_scan made. */
void fsck_index_close(struct fsck *f);

/* ---- fsck_stores.c: the cold stores and the segments in them ---- */

/* Lock the cold directories (store_nvme_lock), open the stores STATE_DIR/tiers
 * names and list their segments into f->found. 0 or -errno (reported); an
 * S3 store that does not open is reported and left unusable. */
int fsck_open_stores(struct fsck *f);
/* Read every listed segment's header and footer; index the footers. */
int fsck_read_manifests(struct fsck *f);
/* Bind each segment-table entry to its copy in the store. */
void fsck_bind_segments(struct fsck *f);
/* A device's name for messages (a cold directory, or the store's). */
const char *fsck_dev_name(struct fsck *f, int store, uint32_t dev);
/* The copy of segment id in `store` (preferring dev), or NULL. */
struct found *fsck_found_get(struct fsck *f, int store, uint64_t id, uint32_t dev);
/* A file uses segment id, which the table has but the store lacks: it is
 * reported with the file (fsck_check_segments says no more). 0, -ENOMEM. */
int fsck_seg_mark_reported(struct fsck *f, uint64_t id);
int fsck_seg_reported(struct fsck *f, uint64_t id);
/* fd's footer entry for (ino, chunk) at offset off, or NULL. */
struct seg_entry *fsck_entry_for(struct found *fd, uint64_t ino, uint64_t chunk, uint64_t off);
/* Read a chunk and check its crc32c (once per footer entry). 0, 1 crc
 * mismatch, or -errno (read). */
int fsck_verify_chunk(struct fsck *f, struct found *fd, const struct seg_entry *e);

/* ---- fsck_check.c: the checks ---- */

/* Check (and with --repair fix) the chunks of every reachable file. */
int fsck_check_files(struct fsck *f);
/* The root directory, created with --repair when missing. 0 (fine or
 * created), 1 (missing, left), -errno. */
int fsck_check_root(struct fsck *f);
/* Root, names of missing inodes or in missing directories (dropped by the
 * first scan), inodes named but unreachable from / (cycles). */
int fsck_check_namespace(struct fsck *f);
/* Segment table against the stores: missing entries, wrong length or
 * device, and segments nobody references (deleted by --repair). */
int fsck_check_segments(struct fsck *f);

/* ---- fsck_rebuild.c ---- */

/* --rebuild: the segment table and chunk locations from the footers. */
int fsck_rebuild(struct fsck *f);

#endif
