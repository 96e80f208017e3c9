/*
 * heap — malloc's settings and the idle trim (contract: heap.h).
 *
 * DESIGN. Freed memory stays in malloc: glibc returns a heap's top to the
 * kernel only past M_TRIM_THRESHOLD, which is kept high so that 1 MiB
 * request buffers are not unmapped and faulted in again per request, and
 * free chunks inside a heap are returned only by malloc_trim. So after a
 * burst (many FUSE threads, restores) the daemon kept what the burst took:
 * 60-90 MiB of free heap measured (bench/bench_s3_rss.py). heap_give_back
 * trims once the heap is still: mallinfo2's in-use and free byte counts
 * equal at two calls a period apart. Trimming only after a still period
 * keeps it off a running stream (no buffer is faulted in again mid-burst),
 * and not trimming twice the same heap keeps an idle daemon from calling
 * malloc_trim every second.
 */
#include "common/heap.h"

#include <malloc.h>
#include <pthread.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static size_t prev_used, prev_free;   /* protected by lock: the previous call's */
static size_t trim_used, trim_free;   /* protected by lock: after the last trim */

void heap_tune(void)
{
	if (!HEAP_GLIBC)
		return;
	mallopt(M_ARENA_MAX, HEAP_ARENAS);
	mallopt(M_MMAP_THRESHOLD, 8 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

int heap_give_back(void)
{
	struct mallinfo2 mi;
	int trimmed = 0;

	if (!HEAP_GLIBC)
		return 0;
	mi = mallinfo2();
	pthread_mutex_lock(&lock);
	if (mi.uordblks == prev_used && mi.fordblks == prev_free && mi.fordblks > HEAP_KEEP &&
	    (mi.uordblks != trim_used || mi.fordblks != trim_free)) {
		malloc_trim(HEAP_KEEP);
		mi = mallinfo2();
		trim_used = mi.uordblks;
		trim_free = mi.fordblks;
		trimmed = 1;
	}
	prev_used = mi.uordblks;
	prev_free = mi.fordblks;
	pthread_mutex_unlock(&lock);
	return trimmed;
}
