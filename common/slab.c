#include "common/slab.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define SLAB_PASSTHROUGH 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_PASSTHROUGH 1
#endif
#endif

#define BLK_SIZE (64u * 1024)
#define NCLASS (SLAB_MAX / 8)

/* A block: this header, then objects of one class. */
struct blk {
	struct blk *prev, *next;	   /* its class's blocks with room */
	struct blk *all_prev, *all_next; /* every block */
	void *free;			   /* free objects, linked through their first word */
	uint32_t nfree, nobj;
	uint32_t cls;
	uint32_t listed; /* on its class's list */
};

#define HDR (((sizeof(struct blk)) + 15) & ~(size_t)15)

/* Blocks are mapped RUN at a time, as one mapping: the kernel counts
 * mappings (vm.max_map_count, 65,530 by default), and one per 64 KiB block
 * would stop the index at ~4 GiB (~20M files). A run's blocks not handed out
 * yet are never touched, so they cost no RAM. */
#define RUN 16

struct slab {
	pthread_mutex_t lock;
	struct blk *room[NCLASS]; /* per class: blocks with a free object */
	struct blk *all;
	uint64_t mapped;
	uint8_t *spare;	 /* the current run's blocks not handed out yet */
	uint32_t nspare;
};

int slab_new(struct slab **out)
{
	struct slab *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	*out = s;
	return 0;
}

static void unmap_blk(struct slab *s, struct blk *b)
{
	if (b->all_prev)
		b->all_prev->all_next = b->all_next;
	else
		s->all = b->all_next;
	if (b->all_next)
		b->all_next->all_prev = b->all_prev;
	s->mapped -= BLK_SIZE;
	munmap(b, BLK_SIZE);
}

void slab_destroy(struct slab *s)
{
	if (!s)
		return;
	while (s->all)
		unmap_blk(s, s->all);
	if (s->nspare)
		munmap(s->spare, (size_t)s->nspare * BLK_SIZE);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int slab_pooled(void)
{
#ifdef SLAB_PASSTHROUGH
	return 0;
#else
	return 1;
#endif
}

uint64_t slab_mapped(struct slab *s)
{
	uint64_t m;
	pthread_mutex_lock(&s->lock);
	m = s->mapped;
	pthread_mutex_unlock(&s->lock);
	return m;
}

void *slab_table_alloc(size_t bytes)
{
#ifdef SLAB_PASSTHROUGH
	return calloc(1, bytes ? bytes : 1);
#else
	void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	return p == MAP_FAILED ? NULL : p;
#endif
}

void slab_table_free(void *p, size_t bytes)
{
#ifdef SLAB_PASSTHROUGH
	(void)bytes;
	free(p);
#else
	if (p)
		munmap(p, bytes ? bytes : 1);
#endif
}

#ifndef SLAB_PASSTHROUGH /* the pool itself: sanitizer builds use malloc */
static size_t class_of(size_t size)
{
	return size ? (size - 1) / 8 : 0; /* class c holds sizes up to 8 (c + 1) */
}

/* A block on a BLK_SIZE boundary, from the current run; a new run is
 * mapped one block larger than RUN blocks and cut to the boundary. */
static struct blk *map_blk(struct slab *s)
{
	struct blk *b;
	if (!s->nspare) {
		size_t len = (RUN + 1) * (size_t)BLK_SIZE;
		uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				  -1, 0);
		uint8_t *a, *end;
		if (p == MAP_FAILED)
			return NULL;
		a = (uint8_t *)(((uintptr_t)p + BLK_SIZE - 1) & ~(uintptr_t)(BLK_SIZE - 1));
		end = a + RUN * (size_t)BLK_SIZE;
		if (a > p)
			munmap(p, (size_t)(a - p));
		if (end < p + len)
			munmap(end, (size_t)(p + len - end));
		s->spare = a;
		s->nspare = RUN;
	}
	b = (struct blk *)s->spare;
	s->spare += BLK_SIZE;
	s->nspare--;
	return b;
}

static void room_add(struct slab *s, struct blk *b)
{
	b->prev = NULL;
	b->next = s->room[b->cls];
	if (b->next)
		b->next->prev = b;
	s->room[b->cls] = b;
	b->listed = 1;
}

static void room_del(struct slab *s, struct blk *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		s->room[b->cls] = b->next;
	if (b->next)
		b->next->prev = b->prev;
	b->prev = b->next = NULL;
	b->listed = 0;
}

static struct blk *new_blk(struct slab *s, size_t cls)
{
	size_t osize = (cls + 1) * 8;
	struct blk *b = map_blk(s);
	if (!b)
		return NULL;
	b->cls = (uint32_t)cls;
	b->nobj = (uint32_t)((BLK_SIZE - HDR) / osize);
	b->nfree = b->nobj;
	/* the free list in address order (fresh pages are zero already) */
	for (uint32_t i = b->nobj; i-- > 0;) {
		void **o = (void **)((uint8_t *)b + HDR + i * osize);
		*o = b->free;
		b->free = o;
	}
	b->all_next = s->all;
	if (s->all)
		s->all->all_prev = b;
	s->all = b;
	s->mapped += BLK_SIZE;
	room_add(s, b);
	return b;
}
#endif /* SLAB_PASSTHROUGH */

void *slab_alloc(struct slab *s, size_t size)
{
#ifdef SLAB_PASSTHROUGH
	(void)s;
	return calloc(1, size ? size : 1);
#else
	size_t cls = class_of(size);
	struct blk *b;
	void **o = NULL;
	if (size > SLAB_MAX)
		return calloc(1, size);
	pthread_mutex_lock(&s->lock);
	b = s->room[cls];
	if (!b)
		b = new_blk(s, cls);
	if (b) {
		o = b->free;
		b->free = *o;
		if (--b->nfree == 0)
			room_del(s, b);
	}
	pthread_mutex_unlock(&s->lock);
	if (o)
		memset(o, 0, (cls + 1) * 8);
	return o;
#endif
}

void slab_free(struct slab *s, void *p, size_t size)
{
#ifdef SLAB_PASSTHROUGH
	(void)s;
	(void)size;
	free(p);
#else
	struct blk *b;
	if (!p)
		return;
	if (size > SLAB_MAX) {
		free(p);
		return;
	}
	b = (struct blk *)((uintptr_t)p & ~(uintptr_t)(BLK_SIZE - 1));
	pthread_mutex_lock(&s->lock);
	*(void **)p = b->free;
	b->free = p;
	b->nfree++;
	if (!b->listed)
		room_add(s, b);
	/* an empty block goes back unless it is the class's only one with room */
	if (b->nfree == b->nobj && (b->prev || b->next)) {
		room_del(s, b);
		unmap_blk(s, b);
	}
	pthread_mutex_unlock(&s->lock);
#endif
}
