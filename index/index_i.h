/*
 * index_i.h — private to index/ (index.c, index_names.c, index_replay.c):
 * the index's own types (struct index, directory entries and arrays) and
 * the table operations the three files share. index.c owns the tables (the
 * inode and name hashes, inode lifecycle, locks, journal records);
 * index_names.c the POSIX namespace operations; index_replay.c recovery and
 * checkpoints. Threading as index.h says: the table calls below want
 * idx->lock held (except the record builders, which say what they need).
 */
#ifndef SPW_INDEX_I_H
#define SPW_INDEX_I_H

#include "index/index_types.h"
#include "index/journal.h"

#include <stddef.h>
#include <stdint.h>

struct idx_new_node;
struct slab;

struct dirent_node {
	struct dirent_node *hash_next;
	uint64_t parent;
	uint64_t ino;
	uint64_t cookie;
	uint32_t hash;
	char name[];
};

/* A regular file's inode carries its first chunk: the whole map of a file
 * of one chunk (most files), no separate allocation. */
struct idx_file {
	struct inode in;
	struct chunk chunk0;
};

/* Bytes of an inode of this type (a regular file carries its first chunk). */
static inline size_t inode_size(mode_t mode)
{
	return S_ISREG(mode) ? sizeof(struct idx_file) : sizeof(struct inode);
}

static inline struct chunk *inline_chunk(struct inode *in)
{
	return &((struct idx_file *)in)->chunk0;
}

struct idx_dir {
	/* ordered by cookie. A slot holds its entry, or, once the entry is
	 * removed, its cookie tagged (cookie << 1 | 1: entries are aligned, so
	 * the low bit tells them apart): no second array of cookies */
	uintptr_t *slots;
	uint64_t n, cap, live;
	uint64_t next_cookie;
	uint64_t parent; /* ino of '..' (index lock) */
};

/* Slot i's entry; NULL where it was removed. */
static inline struct dirent_node *dir_ent(const struct idx_dir *dir, uint64_t i)
{
	return dir->slots[i] & 1 ? NULL : (struct dirent_node *)dir->slots[i];
}

static inline uint64_t slot_cookie(const struct idx_dir *dir, uint64_t i)
{
	return dir->slots[i] & 1 ? dir->slots[i] >> 1 : ((struct dirent_node *)dir->slots[i])->cookie;
}

struct index {
	pthread_mutex_t lock;
	uint64_t chunk_size;
	uint64_t next_ino;   /* protected by lock */
	uint64_t tick;	     /* atomic */
	struct inode **itab; /* protected by lock */
	uint64_t itab_size, ninodes, nfiles;
	struct dirent_node **dtab; /* protected by lock */
	uint64_t dtab_size, ndents;
	idx_release_fn release;
	void *release_arg;
	struct journal *jrnl; /* NULL: volatile (no state_dir) */
	struct slab *slab;    /* inodes and names (common/slab.h) */
	idx_anomaly_fn anomaly; /* recovery only (single-threaded) */
	void *anomaly_arg;
};

/* ---- index.c: the tables (caller holds idx->lock) ---- */

/* Walk of every inode in table order: the first (in == NULL) or the one
 * after in. Taking the next before dropping in lets a walk unhook it. */
struct inode *idx_inode_next(const struct index *idx, const struct inode *in);
struct inode *idx_ino_find(struct index *idx, uint64_t ino);
struct dirent_node *idx_dent_find(struct index *idx, uint64_t parent, const char *name);
/* A name in parent (0 or -ENOMEM; nothing changed on failure); removing one. */
int idx_dent_add(struct index *idx, struct inode *parent, const char *name, uint64_t ino);
void idx_dent_del(struct index *idx, struct inode *parent, struct dirent_node *d);
/* Index of the first slot whose cookie is > off. */
uint64_t idx_dir_search(const struct idx_dir *dir, uint64_t off);
/* A new inode numbered idx->next_ino (not in the table yet; NULL: ENOMEM);
 * into the table (0, -ENOMEM); freed (out of the table). */
struct inode *idx_inode_alloc(struct index *idx, const struct idx_new_node *nn);
int idx_inode_insert(struct index *idx, struct inode *in);
void idx_inode_destroy(struct index *idx, struct inode *in);
/* Unhook an inode that has no names and no references; called with idx->lock.
 * Returns it when the caller must destroy it (after dropping the lock). */
struct inode *idx_inode_maybe_unhook(struct index *idx, struct inode *in);
/* The release hook, then destroy (NULL: nothing); without idx->lock. */
void idx_inode_release(struct index *idx, struct inode *dead);

/* ---- index.c: journal records ---- */

/* -EIO once the journal is read-only, else 0. */
int idx_jcheck(struct index *idx);
/* rs[0..n) as one transaction (nothing without a journal). */
int idx_jlog(struct index *idx, const struct jrec *rs, int n);
/* JR_INODE for in; _locked: caller holds in's lock (symlink is immutable). */
void idx_attr_rec_locked(struct inode *in, struct jrec *r);
void idx_attr_rec(struct inode *in, struct jrec *r);
/* JR_LINK / JR_UNLINK of a name (r points at name). */
void idx_name_rec(struct jrec *r, uint8_t type, uint64_t parent, const char *name, uint64_t ino);

/* ---- index_chain.c ---- */

/* The residency record of chunk c (caller holds in's lock). */
void idx_chunk_rec_locked(struct inode *in, uint64_t c, struct jrec *r);

#endif
