/*
 * workq — a fixed set of worker threads over a queue of caller-owned jobs,
 * in priority levels (redis bio.c's shape): the restore workers, the
 * maintenance worker, the spill pool and the page-cache invalidations
 * (inval.c) each run one.
 * Guarantees: a lower level is taken first, FIFO within a level; at most
 * `bound` jobs wait in each level (0: no bound), a push never blocks; after
 * workq_stop no job is queued or running: what was queued ran (no cancel
 * op: a drain) or went to cancel.
 * Threading: push, take, pending and room from any thread; run on the
 * workq's threads, cancel on the thread calling workq_stop. The workq lock
 * is a leaf: never held while run or cancel is called.
 */
#ifndef SPW_WORKQ_H
#define SPW_WORKQ_H

#include <stddef.h>

struct workq;

/* Embedded in the caller's job; the caller owns it (run or cancel frees). */
struct workq_job {
	struct workq_job *next; /* (the workq's lock while queued) */
	unsigned level;
};

struct workq_ops {
	/* One job, on a worker thread, no lock of the workq held. */
	void (*run)(struct workq *q, struct workq_job *j, void *arg);
	/* At stop: a job still queued is handed here instead of run, and the
	 * threads stop after their job in hand. NULL: they run every queued
	 * job first (drain), then stop. */
	void (*cancel)(struct workq_job *j, void *arg);
	/* Once on each thread before its first job (NULL: nothing). */
	void (*thread_init)(void *arg);
};

/* Start up to nthreads threads over nlevels levels (at most WORKQ_LEVELS).
 * 0 with at least one thread running, or -errno (nothing started). Free
 * with workq_free(). */
#define WORKQ_LEVELS 8
int workq_new(const struct workq_ops *ops, void *arg, unsigned nthreads, unsigned nlevels,
	      size_t bound, struct workq **out);
/* Queue j at level. 0; -EAGAIN when the level holds bound jobs; -ESHUTDOWN
 * once stopping. On failure j is still the caller's. */
int workq_push(struct workq *q, struct workq_job *j, unsigned level);
/* Take up to max jobs off level (a run batching more of its kind, or one
 * giving up the rest of a batch); the caller owns them. Returns the count. */
size_t workq_take(struct workq *q, unsigned level, struct workq_job **out, size_t max);
/* Jobs of level queued or being run. */
unsigned workq_pending(struct workq *q, unsigned level);
/* Jobs level has room for (bound 0: SIZE_MAX). */
size_t workq_room(struct workq *q, unsigned level);
/* Threads running (0 after workq_stop). */
unsigned workq_threads(const struct workq *q);
/* Stop the threads (see cancel) and join them. Idempotent. */
void workq_stop(struct workq *q);
/* workq_stop, then free (NULL: nothing). */
void workq_free(struct workq *q);

#endif
