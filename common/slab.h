/*
 * slab — a size-class allocator for many small objects of known size.
 *
 * Why: the index holds one inode and one name per file, a million of them
 * on a node full of small objects. malloc adds an 8-byte header to each and
 * rounds it up to 16 bytes (an inode of 184 bytes costs 192, a name of 45
 * costs 64): about 15% of what a file costs the daemon. Here objects of one
 * class (sizes rounded up to 8 bytes, up to SLAB_MAX) are carved from 64 KiB
 * blocks mapped on a 64 KiB boundary, so an object needs no header: its block
 * is its address rounded down. A block whose objects are all free goes back
 * to the kernel (munmap) unless it is its class's last one with room, so
 * deleting files gives the RAM back to the node.
 *
 * The caller passes the object's size to slab_free: the index knows it (the
 * file type says the inode's size; a name's length says the entry's).
 * Objects above SLAB_MAX go to calloc/free. Built with AddressSanitizer,
 * every object goes to calloc/free, so ASan still sees each one.
 *
 * Thread safety: one mutex per slab (a leaf lock). Memory is zeroed.
 */
#ifndef SPW_SLAB_H
#define SPW_SLAB_H

#include <stddef.h>
#include <stdint.h>

#define SLAB_MAX 512

struct slab;

int slab_new(struct slab **out); /* 0 or -ENOMEM */
/* Give every block back; objects still allocated are gone with them. */
void slab_destroy(struct slab *s);
void *slab_alloc(struct slab *s, size_t size); /* zeroed; NULL when out of memory */
void slab_free(struct slab *s, void *p, size_t size); /* p may be NULL */
/* 1 when objects come from blocks, 0 when they go to calloc (ASan). */
int slab_pooled(void);
/* Bytes mapped for blocks (for stats and tests). */
uint64_t slab_mapped(struct slab *s);

/*
 * Zeroed memory for one large array (a hash table that doubles), in a
 * mapping of its own, so freeing it gives its pages back to the kernel at
 * once. From malloc, a table under the mmap threshold (fs/main.c raises it
 * to 8 MiB) would stay in a heap when freed: every old copy a table leaves
 * behind as it doubles to a million slots, ~16 MiB per table. NULL when out
 * of memory; free with the same size. ASan builds use calloc/free.
 */
void *slab_table_alloc(size_t bytes);
void slab_table_free(void *p, size_t bytes);

#endif
