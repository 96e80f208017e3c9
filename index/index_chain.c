/*
 * index_chain — a chunk's overlay chain (index.h, struct chunk_chain): its
 * memory, its bitmaps and its journal records (with the residency record
 * of the chunk it is over, idx_chunk_rec_locked). What the chain means for
 * reads, writes and spills is tier/chain/chain.c's; this file only keeps it.
 * Threading: the caller holds the chunk's inode lock.
 */
#include "index/index_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct chunk_chain *idx_chain_get(struct index *idx, struct inode *in, uint64_t c)
{
	struct chunk *ch = &in->chunks[c];
	uint32_t w = chain_words(idx->chunk_size);
	struct chunk_chain *k;

	if (ch->chain)
		return ch->chain;
	k = calloc(1, sizeof(*k) + (size_t)(2 + CHAIN_MAX) * w * sizeof(uint64_t));
	if (!k)
		return NULL;
	k->nbits = (uint32_t)(idx->chunk_size / CHAIN_BLK);
	k->partial = 1;
	k->have = k->bm;
	k->dirty = k->bm + w;
	for (int i = 0; i < CHAIN_MAX; i++)
		k->rec[i].bits = k->bm + (size_t)(2 + i) * w;
	ch->chain = k;
	return k;
}

void idx_chain_free(struct chunk *ch)
{
	free(ch->chain);
	ch->chain = NULL;
}

void chain_set(uint64_t *bm, uint32_t b0, uint32_t b1, int on)
{
	for (uint32_t b = b0; b < b1; b++) {
		if (b % 64 == 0 && b + 64 <= b1) {
			bm[b / 64] = on ? ~0ull : 0;
			b += 63;
		} else if (on) {
			bm[b / 64] |= 1ull << (b % 64);
		} else {
			bm[b / 64] &= ~(1ull << (b % 64));
		}
	}
}

int chain_any(const uint64_t *bm, uint32_t b0, uint32_t b1)
{
	for (uint32_t b = b0; b < b1; b++) {
		if (b % 64 == 0 && b + 64 <= b1) {
			if (bm[b / 64])
				return 1;
			b += 63;
		} else if (chain_test(bm, b)) {
			return 1;
		}
	}
	return 0;
}

int chain_all(const uint64_t *bm, uint32_t b0, uint32_t b1)
{
	for (uint32_t b = b0; b < b1; b++) {
		if (b % 64 == 0 && b + 64 <= b1) {
			if (bm[b / 64] != ~0ull)
				return 0;
			b += 63;
		} else if (!chain_test(bm, b)) {
			return 0;
		}
	}
	return 1;
}

uint32_t chain_count(const uint64_t *bm, uint32_t nbits)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < (nbits + 63) / 64; i++)
		n += (uint32_t)__builtin_popcountll(bm[i]);
	return n;
}

/* The residency record of chunk c (caller holds in->lock): its cold
 * location when it has a valid one, RAM-only when dirty, else a hole. */
void idx_chunk_rec_locked(struct inode *in, uint64_t c, struct jrec *r)
{
	struct chunk *ch = c < in->nchunks ? &in->chunks[c] : NULL;
	memset(r, 0, sizeof(*r));
	r->ino = in->ino;
	r->chunk = c;
	if (!ch || ch->state == CHUNK_ABSENT) {
		r->type = JR_CHUNK_ABSENT;
		r->count = 1;
	} else if (ch->loc.seg_id) { /* clean, or a kept copy (index.h) */
		r->type = JR_CHUNK_LOC;
		r->loc = ch->loc;
	} else {
		r->type = JR_CHUNK_DIRTY;
	}
}

int idx_chunk_recs_locked(struct inode *in, uint64_t c, struct jrec *rs)
{
	struct chunk *ch = c < in->nchunks ? &in->chunks[c] : NULL;
	struct chunk_chain *k = ch ? ch->chain : NULL;
	int n = 1;

	idx_chunk_rec_locked(in, c, &rs[0]);
	if (!k || !ch->loc.seg_id)
		return 1;
	/* the base, whatever the chunk's state: the chain stays under RAM bytes */
	rs[0].type = JR_CHUNK_LOC;
	rs[0].loc = ch->loc;
	for (uint16_t i = 0; i < k->nrec; i++, n++) {
		const struct chain_rec *o = &k->rec[i];
		memset(&rs[n], 0, sizeof(rs[n]));
		rs[n].type = JR_CHUNK_OVL;
		rs[n].ino = in->ino;
		rs[n].chunk = c;
		rs[n].loc = o->loc;
		rs[n].value = o->bits;
		rs[n].value_len = (k->nbits + 7) / 8;
	}
	if (ch->state == CHUNK_HOT_DIRTY || ch->state == CHUNK_SPILLING) {
		memset(&rs[n], 0, sizeof(rs[n]));
		rs[n].type = JR_CHUNK_PART;
		rs[n].ino = in->ino;
		rs[n].chunk = c;
		n++;
	}
	return n;
}
