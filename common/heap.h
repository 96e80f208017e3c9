/*
 * heap — the daemon's own heap, as malloc holds it. heap_tune() sets malloc
 * up once, in main() before any thread starts: at most HEAP_ARENAS arenas
 * (glibc gives each thread its own, up to 8 per core, and every one kept
 * its own freed buffers), and buffers up to 8 MiB from the heap rather than
 * an mmap and its page faults per request. heap_give_back() hands the free
 * heap's pages back to the kernel once the heap has been still for one of
 * its periods. Thread-safe; heap_give_back from one thread at a time.
 */
#ifndef SPW_HEAP_H
#define SPW_HEAP_H

#include <stdint.h>

#define HEAP_ARENAS 2
#define HEAP_KEEP   (2u << 20) /* free heap left mapped: below this, no trim */

/* 0 where a sanitizer's allocator stands in for glibc's malloc (ASan, TSan,
 * MSan builds): nothing to tune or trim, heap_give_back returns 0. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HEAP_GLIBC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                      \
    __has_feature(memory_sanitizer)
#define HEAP_GLIBC 0
#endif
#endif
#ifndef HEAP_GLIBC
#define HEAP_GLIBC 1
#endif

void heap_tune(void);
/* Called about once a second: when the heap is as it was at the previous
 * call (no buffer taken or given back in between) and differs from how the
 * last trim left it, give back the pages of its free memory (malloc_trim)
 * if more than HEAP_KEEP is free. Returns 1 when it trimmed. */
int heap_give_back(void);

#endif
