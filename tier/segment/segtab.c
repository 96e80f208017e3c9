/*
 * segtab — the segment table (see segtab.h).
 * DESIGN
 * - The table is an array indexed by segment id, grown by doubling; ids
 *   only grow (next), so a deleted slot (len 0) is never reused.
 * - Totals (count, bytes, live) follow every change under the same lock,
 *   so one read of them is consistent.
 * - A segment enters the table, then the journal (SEG_ADD); if the journal
 *   refuses it, it leaves the table again before any chunk points at it.
 * - gc_busy marks a segment a delete, compact or demote job holds (picked
 *   by segtab_pick_dead or segtab_pick_oldest, cleared by segtab_unbusy or
 *   segtab_drop): no two jobs hold one segment.
 * - The table knows the stores and the journal only to name them: the
 *   ordering of store I/O and journal syncs is its callers' (gc, demote).
 */
#include "tier/segment/segtab.h"

#include "index/index.h"
#include "index/journal.h"
#include "tier/segment/segment.h"
#include "tier/store/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* One sealed segment. */
struct seg_info {
	uint64_t len;	  /* 0 = slot unused (deleted or never sealed) */
	uint64_t live;	  /* payload bytes still referenced by chunks */
	uint64_t payload; /* payload bytes when sealed */
	uint64_t atime;	  /* last restore from it (demotion picks the oldest) */
	uint32_t dev;
	uint8_t store;	     /* 0: the first cold tier, 1: s3 (demoted) */
	uint8_t gc_busy;     /* a delete, compact or demote job queued or running (maint.c) */
	uint64_t gc_no_gain; /* live bytes when compacting it would not have shrunk it */
};

struct segtab {
	pthread_mutex_t lock;	     /* guards every field below */
	struct seg_info *v;	     /* indexed by segment id; v[0] unused */
	uint64_t cap, next;	     /* slots allocated; next id to hand out */
	uint64_t count, bytes, live; /* sealed segments, their bytes, live bytes */
	struct journal *jrnl;	     /* NULL: volatile */
	struct store *st[2];	     /* store 0 and store 1 */
	struct index *clock;	     /* idx_tick; NULL: 0 */
};

int segtab_new(struct index *clock, struct segtab **out)
{
	struct segtab *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	s->next = 1;
	s->clock = clock;
	*out = s;
	return 0;
}

void segtab_free(struct segtab *s)
{
	if (!s)
		return;
	free(s->v);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

void segtab_set_journal(struct segtab *s, struct journal *j)
{
	pthread_mutex_lock(&s->lock);
	s->jrnl = j;
	pthread_mutex_unlock(&s->lock);
}

void segtab_set_stores(struct segtab *s, struct store *first, struct store *s3)
{
	pthread_mutex_lock(&s->lock);
	s->st[0] = first;
	s->st[1] = s3;
	pthread_mutex_unlock(&s->lock);
}

static uint64_t tick(struct segtab *s)
{
	return s->clock ? idx_tick(s->clock) : 0;
}

/* Entry id, or NULL when it is not in the table (lock held). */
static struct seg_info *entry_locked(struct segtab *s, uint64_t id)
{
	return id < s->cap && s->v[id].len ? &s->v[id] : NULL;
}

/* Table entry for id, growing the table (lock held). */
static struct seg_info *slot_locked(struct segtab *s, uint64_t id)
{
	if (id >= s->cap) {
		uint64_t ncap = s->cap ? s->cap : 1024;
		struct seg_info *ns;
		while (ncap <= id)
			ncap *= 2;
		ns = realloc(s->v, ncap * sizeof(*ns));
		if (!ns)
			abort(); /* cannot track a durable segment: nothing sane to do */
		memset(ns + s->cap, 0, (ncap - s->cap) * sizeof(*ns));
		s->v = ns;
		s->cap = ncap;
	}
	if (id >= s->next)
		s->next = id + 1;
	return &s->v[id];
}

static void where_locked(struct segtab *s, const struct seg_info *i, struct seg_where *w)
{
	*w = (struct seg_where){.st = s->st[i->store ? 1 : 0],
				.len = i->len,
				.payload = i->payload,
				.live = i->live,
				.dev = i->dev,
				.store = i->store};
}

/* Ids index the table (slot_locked), so they stay far below
 * JRNL_MAX_SEG_ID (2^32 - 1, what a journal record and struct chunk hold):
 * the table of 2^32 entries it would take cannot be allocated. */
static uint64_t take_ids(struct segtab *s, uint64_t n)
{
	uint64_t id;
	pthread_mutex_lock(&s->lock);
	id = s->next;
	s->next += n;
	pthread_mutex_unlock(&s->lock);
	return id;
}

uint64_t segtab_alloc_id(struct segtab *s)
{
	return take_ids(s, 1);
}

uint64_t segtab_next_id(struct segtab *s)
{
	return take_ids(s, 0);
}

int segtab_register(struct segtab *s, uint64_t id, uint8_t store, uint32_t dev, uint64_t len,
		    uint64_t payload)
{
	int ret;
	pthread_mutex_lock(&s->lock);
	*slot_locked(s, id) = (struct seg_info){.len = len,
						.live = payload,
						.payload = payload,
						.store = store,
						.dev = dev,
						.atime = tick(s)};
	s->count++;
	s->bytes += len;
	s->live += payload;
	pthread_mutex_unlock(&s->lock);
	/* recorded before any chunk points at it; if it cannot be, forget it */
	if ((ret = segtab_log(s, id, 0)) < 0) {
		pthread_mutex_lock(&s->lock);
		s->count--;
		s->bytes -= len;
		s->live -= payload;
		memset(&s->v[id], 0, sizeof(s->v[id]));
		pthread_mutex_unlock(&s->lock);
	}
	return ret;
}

static int commit_in(struct segtab *s, struct seg_writer *w, uint64_t id, uint8_t store,
		     uint64_t payload, uint32_t *dev, uint64_t *len)
{
	struct journal *j;
	int ret;

	pthread_mutex_lock(&s->lock);
	j = s->jrnl;
	pthread_mutex_unlock(&s->lock);
	if (j && (ret = jrnl_sync(j)) < 0) {
		seg_writer_abort(w);
		return ret;
	}
	if ((ret = seg_writer_finish(w, dev, len)) < 0)
		return ret;
	return segtab_register(s, id, store, *dev, *len, payload);
}

int segtab_commit(struct segtab *s, struct seg_writer *w, uint64_t id, uint64_t payload,
		  uint32_t *dev, uint64_t *len)
{
	return commit_in(s, w, id, 0, payload, dev, len);
}

int segtab_commit_s3(struct segtab *s, struct seg_writer *w, uint64_t id, uint64_t payload,
		     uint32_t *dev, uint64_t *len)
{
	return commit_in(s, w, id, 1, payload, dev, len);
}

void segtab_release_bytes(struct segtab *s, uint64_t id, uint64_t bytes)
{
	struct seg_info *i;
	pthread_mutex_lock(&s->lock);
	if ((i = entry_locked(s, id))) {
		if (i->live < bytes)
			abort(); /* live-bytes underflow: accounting bug */
		i->live -= bytes;
		s->live -= bytes;
	}
	pthread_mutex_unlock(&s->lock);
}

void segtab_release_chunk(struct segtab *s, struct chunk *c)
{
	if (c->loc.seg_id)
		segtab_release_bytes(s, c->loc.seg_id, c->loc.len);
	c->loc.seg_id = 0;
	c->loc.len = 0;
}

int segtab_locate(struct segtab *s, uint64_t id, struct store **st, uint32_t *dev)
{
	struct seg_info *i;
	int ret = -ENOENT;
	pthread_mutex_lock(&s->lock);
	if ((i = entry_locked(s, id))) {
		*st = s->st[i->store ? 1 : 0];
		*dev = i->dev;
		i->atime = tick(s);
		ret = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int segtab_where(struct segtab *s, uint64_t id, struct seg_where *w)
{
	struct seg_info *i;
	int ret = -ENOENT;
	pthread_mutex_lock(&s->lock);
	if ((i = entry_locked(s, id))) {
		where_locked(s, i, w);
		ret = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int segtab_next(struct segtab *s, uint64_t *id, struct seg_where *w)
{
	int found = 0;
	pthread_mutex_lock(&s->lock);
	for (uint64_t k = *id + 1; k < s->cap && !found; k++)
		if (s->v[k].len) {
			where_locked(s, &s->v[k], w);
			*id = k;
			found = 1;
		}
	pthread_mutex_unlock(&s->lock);
	return found;
}

void segtab_totals(struct segtab *s, uint64_t *count, uint64_t *bytes, uint64_t *live)
{
	pthread_mutex_lock(&s->lock);
	*count = s->count;
	*bytes = s->bytes;
	*live = s->live;
	pthread_mutex_unlock(&s->lock);
}

void segtab_tier_bytes(struct segtab *s, uint64_t out[2])
{
	out[0] = out[1] = 0;
	pthread_mutex_lock(&s->lock);
	for (uint64_t id = 1; id < s->cap; id++)
		if (s->v[id].len)
			out[s->v[id].store ? 1 : 0] += s->v[id].len;
	pthread_mutex_unlock(&s->lock);
}

/* ---- GC and demotion ---- */

size_t segtab_pick_dead(struct segtab *s, uint64_t *dead, size_t max, double sparse,
			uint64_t *compact)
{
	size_t ndead = 0;

	if (compact)
		*compact = 0;
	pthread_mutex_lock(&s->lock);
	for (uint64_t id = 1; id < s->next && id < s->cap; id++) {
		struct seg_info *i = &s->v[id];
		if (!i->len || i->gc_busy)
			continue;
		if (i->live == 0) {
			if (ndead < max) {
				i->gc_busy = 1;
				dead[ndead++] = id;
			}
		} else if (compact && !*compact && i->live != i->gc_no_gain &&
			   (double)i->live < sparse * (double)i->payload) {
			i->gc_busy = 1;
			*compact = id;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return ndead;
}

struct oldest_cand {
	uint64_t atime, id, len;
};

static int by_atime(const void *a, const void *b)
{
	const struct oldest_cand *x = a, *y = b;
	return x->atime < y->atime ? -1 : x->atime > y->atime;
}

size_t segtab_pick_oldest(struct segtab *s, uint8_t store, uint64_t bytes, uint64_t *ids,
			  size_t max, uint64_t *atimes, uint64_t *lens)
{
	struct oldest_cand *v = NULL;
	uint64_t sum = 0;
	size_t n = 0, npick = 0;

	pthread_mutex_lock(&s->lock);
	if (s->count && (v = malloc(s->count * sizeof(*v)))) {
		for (uint64_t id = 1; id < s->next && id < s->cap; id++) {
			struct seg_info *i = &s->v[id];
			if (i->len && i->store == store && !i->gc_busy && n < s->count)
				v[n++] = (struct oldest_cand){i->atime, id, i->len};
		}
		if (n)
			qsort(v, n, sizeof(*v), by_atime);
		/* least recently read first, until their bytes cover the excess */
		for (size_t k = 0; k < n && npick < max && sum < bytes; k++) {
			s->v[v[k].id].gc_busy = 1;
			if (atimes)
				atimes[npick] = v[k].atime;
			if (lens)
				lens[npick] = v[k].len;
			ids[npick++] = v[k].id;
			sum += v[k].len;
		}
	}
	pthread_mutex_unlock(&s->lock);
	free(v);
	return npick;
}

void segtab_unbusy(struct segtab *s, const uint64_t *ids, size_t n)
{
	pthread_mutex_lock(&s->lock);
	for (size_t k = 0; k < n; k++)
		if (ids[k] < s->cap)
			s->v[ids[k]].gc_busy = 0;
	pthread_mutex_unlock(&s->lock);
}

void segtab_no_gain(struct segtab *s, uint64_t id)
{
	pthread_mutex_lock(&s->lock);
	if (id < s->cap)
		s->v[id].gc_no_gain = s->v[id].live;
	pthread_mutex_unlock(&s->lock);
}

void segtab_drop(struct segtab *s, uint64_t id)
{
	struct seg_info *i;
	pthread_mutex_lock(&s->lock);
	if ((i = entry_locked(s, id))) {
		s->count--;
		s->bytes -= i->len;
		s->live -= i->live;
		memset(i, 0, sizeof(*i));
	}
	pthread_mutex_unlock(&s->lock);
}

void segtab_relocate(struct segtab *s, uint64_t id, uint8_t store, uint32_t dev)
{
	struct seg_info *i;
	pthread_mutex_lock(&s->lock);
	if ((i = entry_locked(s, id))) {
		i->store = store;
		i->dev = dev;
	}
	pthread_mutex_unlock(&s->lock);
}

/* ---- journal, replay, recovery ---- */

int segtab_log(struct segtab *s, uint64_t id, int del)
{
	struct jrec r = {.type = del ? JR_SEG_DEL : JR_SEG_ADD};
	struct journal *j;

	r.seg.id = id;
	pthread_mutex_lock(&s->lock);
	j = s->jrnl;
	if (j && !del && id < s->cap) {
		r.seg.len = s->v[id].len;
		r.seg.payload = s->v[id].payload;
		r.seg.dev = s->v[id].dev;
		r.seg.store = s->v[id].store;
	}
	pthread_mutex_unlock(&s->lock);
	return j ? jrnl_append(j, &r) : 0;
}

void segtab_replay(struct segtab *s, const struct jrec *r)
{
	struct seg_info *i;

	pthread_mutex_lock(&s->lock);
	switch (r->type) {
	case JR_META:
		if (r->next_seg > s->next)
			s->next = r->next_seg;
		break;
	case JR_SEG_ADD:
		i = slot_locked(s, r->seg.id);
		i->len = r->seg.len ? r->seg.len : 1;
		i->payload = r->seg.payload;
		i->dev = r->seg.dev;
		i->store = r->seg.store;
		i->live = 0; /* recounted from the chunk maps */
		break;
	case JR_SEG_DEL:
		if (r->seg.id < s->cap)
			memset(&s->v[r->seg.id], 0, sizeof(s->v[r->seg.id]));
		break;
	}
	pthread_mutex_unlock(&s->lock);
}

int segtab_emit(struct segtab *s, struct jrnl_emitter *e, uint64_t next_ino)
{
	struct jrec m = {.type = JR_META, .next_ino = next_ino};
	int ret;

	pthread_mutex_lock(&s->lock);
	m.next_seg = s->next;
	ret = jrnl_emit(e, &m);
	for (uint64_t id = 1; id < s->cap && !ret; id++) {
		struct seg_info *i = &s->v[id];
		struct jrec r = {.type = JR_SEG_ADD,
				 .seg = {.id = id,
					 .len = i->len,
					 .payload = i->payload,
					 .dev = i->dev,
					 .store = i->store}};
		if (i->len)
			ret = jrnl_emit(e, &r);
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int segtab_add_live(struct segtab *s, uint64_t id, uint64_t bytes)
{
	struct seg_info *i;
	int ret = -ENOENT;
	pthread_mutex_lock(&s->lock);
	if ((i = entry_locked(s, id))) {
		i->live += bytes;
		ret = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

uint64_t segtab_recount(struct segtab *s)
{
	uint64_t cap;

	pthread_mutex_lock(&s->lock);
	s->count = s->bytes = s->live = 0;
	for (uint64_t id = 1; id < s->cap; id++)
		if (s->v[id].len) {
			s->count++;
			s->bytes += s->v[id].len;
			s->live += s->v[id].live;
			s->v[id].atime = tick(s);
		}
	cap = s->cap;
	pthread_mutex_unlock(&s->lock);
	return cap;
}

void segtab_remove_stored(struct segtab *s)
{
	pthread_mutex_lock(&s->lock);
	for (uint64_t id = 1; id < s->cap; id++)
		if (s->v[id].len)
			store_remove(s->st[s->v[id].store ? 1 : 0], id, s->v[id].dev);
	pthread_mutex_unlock(&s->lock);
}
