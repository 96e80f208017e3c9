/*
 * index_ext — a file's extent (index_types.h, struct idx_ext) as the index
 * keeps it: its memory, its journal records (JR_EXTENT, JR_EXTENT_CRC) and
 * their replay. What an extent means for opens, reads and writes is
 * tier/extent's; this file only keeps it.
 * Records of an extent, in order: JR_EXTENT without JEXT_SEALED (the extent
 * exists, its crcs are unknown: recovered by its size on disk), then, once
 * sealed, JR_EXTENT_CRC records holding every block's crc and JR_EXTENT
 * with JEXT_SEALED. A crash between them leaves it unsealed. JR_EXTENT
 * with JEXT_GONE: the file has no extent any more. Their replay is
 * index_replay.c's (idx_ext_replay).
 * Threading: the caller holds the inode lock (replay: single-threaded).
 */
#include "index/index_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void idx_ext_free(struct inode *in)
{
	if (!in->ext)
		return;
	free(in->ext->crc);
	free(in->ext);
	/* atomic: tier/extent peeks at it without the lock */
	__atomic_store_n(&in->ext, NULL, __ATOMIC_RELAXED);
}

struct idx_ext *idx_ext_new_locked(struct inode *in)
{
	struct idx_ext *x = in->ext;

	if (x)
		return x;
	if (!(x = calloc(1, sizeof(*x))))
		return NULL;
	x->fd = -1;
	__atomic_store_n(&in->ext, x, __ATOMIC_RELEASE);
	return x;
}

uint32_t idx_ext_blocks(uint64_t size)
{
	return (uint32_t)((size + JRNL_EXT_BLOCK - 1) / JRNL_EXT_BLOCK);
}

static void ext_rec(const struct inode *in, struct jrec *r, uint32_t flags)
{
	memset(r, 0, sizeof(*r));
	r->type = JR_EXTENT;
	r->ino = in->ino;
	r->ext.id = in->ext->id;
	r->ext.dev = in->ext->dev;
	r->ext.size = flags & JEXT_SEALED ? in->ext->size : 0;
	r->ext.flags = flags;
}

int idx_ext_recs_locked(const struct inode *in, int (*fn)(void *arg, const struct jrec *r),
			void *arg)
{
	struct jrec r;
	int ret;

	if (!in->ext)
		return 0;
	ext_rec(in, &r, 0);
	if ((ret = fn(arg, &r)) != 0 || !in->ext->sealed)
		return ret;
	for (uint32_t b = 0; b < in->ext->ncrc; b += JRNL_EXT_CRCS_MAX) {
		uint32_t n = in->ext->ncrc - b < JRNL_EXT_CRCS_MAX ? in->ext->ncrc - b
								     : JRNL_EXT_CRCS_MAX;
		struct jrec c = {.type = JR_EXTENT_CRC,
				 .ino = in->ino,
				 .chunk = b,
				 .value = in->ext->crc + b,
				 .value_len = n * 4};
		if ((ret = fn(arg, &c)) != 0)
			return ret;
	}
	ext_rec(in, &r, JEXT_SEALED);
	return fn(arg, &r);
}

static int append_one(void *arg, const struct jrec *r)
{
	return jrnl_append(arg, r);
}

int idx_journal_ext_locked(struct index *idx, struct inode *in, uint64_t gone_id)
{
	struct jrec r = {.type = JR_EXTENT, .ino = in->ino, .ext = {.id = gone_id, .flags = JEXT_GONE}};

	if (!idx->jrnl)
		return 0;
	if (!in->ext)
		return gone_id ? jrnl_append(idx->jrnl, &r) : 0;
	return idx_ext_recs_locked(in, append_one, idx->jrnl);
}
