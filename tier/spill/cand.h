/*
 * cand — the evictor's candidates: the hot chunks a round, an fsync, the
 * evict xattr or the unmount flush may drop or spill, with the inode refs
 * that keep them, sorted least recently used first or by location.
 * Ownership: a cand_set is its caller's (on the stack, zeroed but for now);
 * cand_free() puts its refs and frees it. Threading: one thread per set;
 * collecting takes each file's inode lock in turn.
 */
#ifndef SPW_CAND_H
#define SPW_CAND_H

#include <stddef.h>
#include <stdint.h>

struct tier;
struct inode;

struct cand {
	struct inode *in;
	uint64_t c;
	uint32_t age; /* index ticks since the chunk's last access (mod 2^32) */
	uint32_t len;
	uint8_t state;
	uint8_t unread; /* restored ahead and not read yet (index.h) */
	uint8_t around; /* dirty, written around (tier/admit): spilled first */
};

struct cand_set {
	struct cand *v;
	size_t n, cap;
	struct inode **refs; /* one internal ref per inode in v */
	size_t nrefs, refcap;
	int oom;
	uint32_t now; /* the index tick when collecting began (low 32 bits) */
};

/* Candidates of one file: its hot chunks. For a whole-tier round (only 0)
 * pinned files, files with passthrough writers and chunks in use are
 * skipped; for one file (only 1: fsync, evict xattr) a chunk in use is
 * still spilled: a write racing the spill bumps the generation and the copy
 * is not trusted, and a chunk in use is never dropped. The caller adds
 * in's ref to cs->refs when some were added (room is made for it).
 * Returns the number of candidates added or -ENOMEM (cs->oom set). */
long cand_collect_file(struct tier *t, struct cand_set *cs, struct inode *in, int only);
/* Candidates of every file with a hot file (the only ones with hot chunks:
 * O(hot files), not O(files)); their refs are the set's. */
void cand_collect_hot(struct tier *t, struct cand_set *cs);
/* Put every ref, free the arrays, zero the set. */
void cand_free(struct tier *t, struct cand_set *cs);
/* Least recently used first (the oldest age first). */
void cand_sort_lru(struct cand *v, size_t n);
/* By (inode number, chunk): the order a segment is written in. */
void cand_sort_location(struct cand *v, size_t n);

#endif
