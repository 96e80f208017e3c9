/*
 * cand — the evictor's candidates (see cand.h): collecting hot chunks, in
 * one file or in every file with a hot file, and sorting them.
 */
#include "tier/spill/cand.h"
#include "tier/tier_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int cand_push(struct cand_set *cs, const struct cand *c)
{
	if (cs->n == cs->cap) {
		size_t ncap = cs->cap ? cs->cap * 2 : 1024;
		struct cand *nv = realloc(cs->v, ncap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		cs->v = nv;
		cs->cap = ncap;
	}
	cs->v[cs->n++] = *c;
	return 0;
}

/* Ticks since atime at now, both the low 32 bits of the index tick. An
 * access after now (a reader racing the collection) counts as age 0, not as
 * 2^32 - 1: the wrap-around age of a tick from the future. */
static uint32_t chunk_age(uint32_t now, uint32_t atime)
{
	uint32_t age = now - atime;
	return age > UINT32_MAX / 2 ? 0 : age;
}

long cand_collect_file(struct tier *t, struct cand_set *cs, struct inode *in, int only)
{
	size_t before = cs->n;
	idx_inode_lock(in);
	/* a file with passthrough writers is written behind our back: its
	 * chunks are spilled at fsync and after the last such close */
	if ((!in->pinned && !in->pt_writers) || only) {
		for (uint64_t c = 0; c < in->nchunks; c++) {
			struct chunk *ch = &in->chunks[c];
			uint32_t len = tier_chunk_len(t, in->size, c);
			if ((ch->pins && !only) || len == 0 ||
			    (ch->state != CHUNK_HOT_CLEAN && ch->state != CHUNK_HOT_DIRTY) ||
			    (ch->state == CHUNK_HOT_CLEAN && in->pt_opens && !only))
				continue;
			struct cand cd = {
			    .in = in, .c = c, .age = chunk_age(cs->now, ch->atime), .len = len, .state = ch->state,
			    .unread = ch->unread, .around = ch->around && ch->state == CHUNK_HOT_DIRTY};
			if (cand_push(cs, &cd) < 0) {
				cs->oom = 1;
				break;
			}
		}
	}
	idx_inode_unlock(in);
	if (cs->n > before && cs->nrefs == cs->refcap) {
		size_t ncap = cs->refcap ? cs->refcap * 2 : 256;
		struct inode **nr = realloc(cs->refs, ncap * sizeof(*nr));
		if (!nr) {
			cs->n = before;
			cs->oom = 1;
			return -ENOMEM;
		}
		cs->refs = nr;
		cs->refcap = ncap;
	}
	return (long)(cs->n - before);
}

void cand_collect_hot(struct tier *t, struct cand_set *cs)
{
	uint64_t *inos;
	size_t n;

	if (hot_list_inos(t->hot, &inos, &n) < 0) {
		cs->oom = 1;
		return;
	}
	for (size_t i = 0; i < n && !cs->oom; i++) {
		struct inode *in = idx_get(t->idx, inos[i]);
		if (!in)
			continue;
		/* only regular files have hot files */
		if (cand_collect_file(t, cs, in, 0) > 0)
			cs->refs[cs->nrefs++] = in; /* the ref is the candidate set's now */
		else
			idx_put(t->idx, in);
	}
	free(inos);
}

void cand_free(struct tier *t, struct cand_set *cs)
{
	for (size_t i = 0; i < cs->nrefs; i++)
		idx_put(t->idx, cs->refs[i]);
	free(cs->refs);
	free(cs->v);
	memset(cs, 0, sizeof(*cs));
}

/* Least recently used first: the oldest age first. Ages, not tick values,
 * so the order holds across the 32-bit tick's wrap. */
static int by_age(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	return x->age > y->age ? -1 : x->age < y->age;
}

static int by_location(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->in->ino != y->in->ino)
		return x->in->ino < y->in->ino ? -1 : 1;
	return x->c < y->c ? -1 : x->c > y->c;
}

void cand_sort_lru(struct cand *v, size_t n)
{
	if (n) /* v is NULL when nothing was collected: qsort's is nonnull */
		qsort(v, n, sizeof(*v), by_age);
}

void cand_sort_location(struct cand *v, size_t n)
{
	if (n)
		qsort(v, n, sizeof(*v), by_location);
}
