/*
 * segtab — the segment table (see segtab.h).
 * DESIGN
 * - The table is an array indexed by segment id, grown by doubling; ids
 *   only grow (next), so a deleted slot (len 0) is never reused.
 * - Totals (count, bytes, live) follow every change under the same lock,
 *   so one read of them is consistent.
 * - A segment enters the table, then the journal (SEG_ADD); if the journal
 *   refuses it, it leaves the table again before any chunk points at it.
 */
#include "tier/tier_i.h"

#include "index/journal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void segtab_init(struct segtab *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	s->next = 1;
}

void segtab_destroy(struct segtab *s)
{
	free(s->v);
	s->v = NULL;
	s->cap = 0;
	pthread_mutex_destroy(&s->lock);
}

/* Ids index the table (segtab_slot_locked), so they stay far below
 * JRNL_MAX_SEG_ID (2^32 - 1, what a journal record and struct chunk hold):
 * the table of 2^32 entries it would take cannot be allocated. */
uint64_t segtab_alloc_id(struct tier *t)
{
	uint64_t id;
	pthread_mutex_lock(&t->segtab.lock);
	id = t->segtab.next++;
	pthread_mutex_unlock(&t->segtab.lock);
	return id;
}

struct seg_info *segtab_slot_locked(struct tier *t, uint64_t id)
{
	if (id >= t->segtab.cap) {
		uint64_t ncap = t->segtab.cap ? t->segtab.cap : 1024;
		struct seg_info *ns;
		while (ncap <= id)
			ncap *= 2;
		ns = realloc(t->segtab.v, ncap * sizeof(*ns));
		if (!ns)
			abort(); /* cannot track a durable segment: nothing sane to do */
		memset(ns + t->segtab.cap, 0, (ncap - t->segtab.cap) * sizeof(*ns));
		t->segtab.v = ns;
		t->segtab.cap = ncap;
	}
	if (id >= t->segtab.next)
		t->segtab.next = id + 1;
	return &t->segtab.v[id];
}

int segtab_register(struct tier *t, uint64_t id, uint32_t dev, uint64_t len, uint64_t payload)
{
	int ret;
	pthread_mutex_lock(&t->segtab.lock);
	*segtab_slot_locked(t, id) = (struct seg_info){
	    .len = len, .live = payload, .payload = payload, .dev = dev, .atime = idx_tick(t->idx)};
	t->segtab.count++;
	t->segtab.bytes += len;
	t->segtab.live += payload;
	pthread_mutex_unlock(&t->segtab.lock);
	/* recorded before any chunk points at it; if it cannot be, forget it */
	if ((ret = segtab_log(t, id, 0)) < 0) {
		pthread_mutex_lock(&t->segtab.lock);
		t->segtab.count--;
		t->segtab.bytes -= len;
		t->segtab.live -= payload;
		memset(&t->segtab.v[id], 0, sizeof(t->segtab.v[id]));
		pthread_mutex_unlock(&t->segtab.lock);
	}
	return ret;
}

int segtab_locate(struct tier *t, uint64_t id, struct store **st, uint32_t *dev)
{
	int ret = -ENOENT;
	pthread_mutex_lock(&t->segtab.lock);
	if (id < t->segtab.cap && t->segtab.v[id].len) {
		*st = t->segtab.v[id].store ? t->s3 : t->store;
		*dev = t->segtab.v[id].dev;
		t->segtab.v[id].atime = idx_tick(t->idx);
		ret = 0;
	}
	pthread_mutex_unlock(&t->segtab.lock);
	return ret;
}

void segtab_tier_bytes(struct tier *t, uint64_t out[2])
{
	out[0] = out[1] = 0;
	pthread_mutex_lock(&t->segtab.lock);
	for (uint64_t id = 1; id < t->segtab.cap; id++)
		if (t->segtab.v[id].len)
			out[t->segtab.v[id].store] += t->segtab.v[id].len;
	pthread_mutex_unlock(&t->segtab.lock);
}

void segtab_release_bytes(struct tier *t, uint64_t id, uint64_t bytes)
{
	pthread_mutex_lock(&t->segtab.lock);
	if (id < t->segtab.cap && t->segtab.v[id].len) {
		if (t->segtab.v[id].live < bytes)
			abort(); /* live-bytes underflow: accounting bug */
		t->segtab.v[id].live -= bytes;
		t->segtab.live -= bytes;
	}
	pthread_mutex_unlock(&t->segtab.lock);
}

void segtab_release_chunk(struct tier *t, struct chunk *c)
{
	if (c->seg_id)
		segtab_release_bytes(t, c->seg_id, c->seg_len);
	c->seg_id = 0;
	c->seg_len = 0;
}

int segtab_log(struct tier *t, uint64_t id, int del)
{
	struct jrec r = {.type = del ? JR_SEG_DEL : JR_SEG_ADD};
	if (!t->jrnl)
		return 0;
	r.seg.id = id;
	if (!del) {
		pthread_mutex_lock(&t->segtab.lock);
		r.seg.len = t->segtab.v[id].len;
		r.seg.payload = t->segtab.v[id].payload;
		r.seg.dev = t->segtab.v[id].dev;
		r.seg.store = t->segtab.v[id].store;
		pthread_mutex_unlock(&t->segtab.lock);
	}
	return jrnl_append(t->jrnl, &r);
}

void segtab_totals(struct tier *t, uint64_t *count, uint64_t *bytes, uint64_t *live)
{
	pthread_mutex_lock(&t->segtab.lock);
	*count = t->segtab.count;
	*bytes = t->segtab.bytes;
	*live = t->segtab.live;
	pthread_mutex_unlock(&t->segtab.lock);
}

void segtab_replay(struct tier *t, const struct jrec *r)
{
	struct seg_info *s;

	pthread_mutex_lock(&t->segtab.lock);
	switch (r->type) {
	case JR_META:
		if (r->next_seg > t->segtab.next)
			t->segtab.next = r->next_seg;
		break;
	case JR_SEG_ADD:
		s = segtab_slot_locked(t, r->seg.id);
		s->len = r->seg.len ? r->seg.len : 1;
		s->payload = r->seg.payload;
		s->dev = r->seg.dev;
		s->store = r->seg.store;
		s->live = 0; /* recounted from the chunk maps */
		break;
	case JR_SEG_DEL:
		if (r->seg.id < t->segtab.cap)
			memset(&t->segtab.v[r->seg.id], 0, sizeof(t->segtab.v[r->seg.id]));
		break;
	}
	pthread_mutex_unlock(&t->segtab.lock);
}

int segtab_emit(struct tier *t, struct jrnl_emitter *e, uint64_t next_ino)
{
	struct jrec m = {.type = JR_META, .next_ino = next_ino};
	int ret;

	pthread_mutex_lock(&t->segtab.lock);
	m.next_seg = t->segtab.next;
	ret = jrnl_emit(e, &m);
	for (uint64_t id = 1; id < t->segtab.cap && !ret; id++) {
		struct seg_info *s = &t->segtab.v[id];
		struct jrec r = {.type = JR_SEG_ADD,
				 .seg = {.id = id,
					 .len = s->len,
					 .payload = s->payload,
					 .dev = s->dev,
					 .store = s->store}};
		if (s->len)
			ret = jrnl_emit(e, &r);
	}
	pthread_mutex_unlock(&t->segtab.lock);
	return ret;
}

uint64_t segtab_recount(struct tier *t)
{
	uint64_t cap;

	pthread_mutex_lock(&t->segtab.lock);
	t->segtab.count = t->segtab.bytes = t->segtab.live = 0;
	for (uint64_t id = 1; id < t->segtab.cap; id++)
		if (t->segtab.v[id].len) {
			t->segtab.count++;
			t->segtab.bytes += t->segtab.v[id].len;
			t->segtab.live += t->segtab.v[id].live;
			t->segtab.v[id].atime = idx_tick(t->idx);
		}
	cap = t->segtab.cap;
	pthread_mutex_unlock(&t->segtab.lock);
	return cap;
}
