/*
 * clock — the time helpers every worker needs: a monotonic nanosecond or
 * millisecond count for latencies and backoffs, and a CLOCK_REALTIME deadline
 * for pthread_cond_timedwait. Pure, thread-safe.
 */
#ifndef SPW_CLOCK_H
#define SPW_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Monotonic milliseconds (backoff deadlines, retry due times). */
static inline uint64_t clock_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The CLOCK_REALTIME instant `ms` milliseconds from now. */
static inline struct timespec clock_deadline_ms(uint64_t ms)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += (time_t)(ms / 1000);
	dl.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	return dl;
}

#endif
