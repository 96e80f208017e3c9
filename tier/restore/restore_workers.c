/*
 * restore_workers — the restore room's workers (see restore.h): io_workers
 * threads on a workq that restore COLD chunks ahead of their readers:
 * jobs ahead of sequential readers (restore_ahead) first, at normal I/O
 * priority; then prefetch of whole files opened with restore=open
 * (restore_file_async), at idle priority and only while the hot tier is
 * below spill_threshold. Each job holds a ref on its inode; a chunk no
 * longer COLD is skipped; jobs still queued at stop are dropped.
 */
#include "tier/admit/admit.h"
#include "tier/restore/restore.h"
#include "tier/restore/restore_i.h"
#include "tier/tier_i.h"
#include "common/workq.h"

#include "common/log.h"
#include "common/uring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define IOPRIO_IDLE   (3 << 13)
#define IOPRIO_NORMAL (2 << 13 | 4) /* best effort, default level */

/* Job levels: ahead of sequential readers first, then prefetch. */
enum { RST_AHEAD, RST_PREFETCH, RST_LEVELS };

struct restore_job {
	struct workq_job wj; /* first: a workq_job * is a restore_job * */
	struct inode *in;    /* internal ref */
	uint64_t c;
	int ahead; /* for a sequential reader: normal priority, no room check */
};

/* A job not run (stopping): its ref goes. */
static void job_cancel(struct workq_job *wj, void *arg)
{
	struct restore *r = arg;
	struct restore_job *j = (struct restore_job *)wj;

	if (j->c != UINT64_MAX)
		idx_put(r->t->idx, j->in);
	free(j);
}

/* Queue the jobs head.. (linked through next) at level; one the workers
 * refuse (stopping) is dropped as at stop. */
static void queue_jobs(struct restore *r, struct workq_job *head, unsigned level)
{
	while (head) {
		struct workq_job *j = head;
		head = j->next;
		if (workq_push(r->wq, j, level) < 0)
			job_cancel(j, r);
	}
}

void restore_file_async(struct tier *t, struct inode *in)
{
	struct workq_job *head = NULL, **tail = &head;
	uint64_t n = 0;

	if (!t->store || !workq_threads(t->rst->wq))
		return;
	idx_inode_lock(in);
	for (uint64_t c = 0; c < in->nchunks; c++) {
		struct chunk *ch = &in->chunks[c];
		struct restore_job *j;
		/* only what the admission filter lets into RAM (a chunk read
		 * before: a working set opened again) */
		if (ch->state != CHUNK_COLD || ch->queued || !admit_ahead_locked(t, in, c))
			continue;
		if (!(j = calloc(1, sizeof(*j))))
			break;
		ch->queued = 1;
		j->c = c;
		*tail = &j->wj;
		tail = &j->wj.next;
		n++;
	}
	idx_inode_unlock(in);
	if (!head)
		return;
	/* each job holds a ref so the inode outlives its queue entries */
	for (struct workq_job *w = head; w; w = w->next) {
		struct restore_job *j = (struct restore_job *)w;
		struct inode *r = idx_get(t->idx, in->ino);
		j->in = r ? r : in;
		if (!r)
			j->c = UINT64_MAX; /* gone: the worker only clears nothing */
	}
	queue_jobs(t->rst, head, RST_PREFETCH);
	log_debug("restore: inode %llu: %llu chunks queued", (unsigned long long)in->ino,
		  (unsigned long long)n);
}

void restore_ahead(struct tier *t, struct inode *in, uint64_t first, uint64_t last)
{
	struct workq_job *head = NULL, **tail = &head, *w;
	struct restore_job *j;
	uint64_t n = 0;

	if (!t->store || !workq_threads(t->rst->wq))
		return;
	idx_inode_lock(in);
	for (uint64_t c = first; c <= last && c < in->nchunks; c++) {
		/* queued for prefetch (restore=open) or not: this goes first;
		 * a chunk the stream would read once is not brought in */
		if (in->chunks[c].state != CHUNK_COLD || !admit_ahead_locked(t, in, c) ||
		    !(j = calloc(1, sizeof(*j))))
			continue;
		in->chunks[c].queued = 1;
		j->in = in;
		j->c = c;
		j->ahead = 1;
		*tail = &j->wj;
		tail = &j->wj.next;
		n++;
	}
	idx_inode_unlock(in);
	/* each job holds a ref (index lock: never under the inode lock) */
	for (w = head; w; w = w->next)
		idx_ref(t->idx, in);
	if (!head)
		return;
	__atomic_add_fetch(&t->st.readahead_chunks, n, __ATOMIC_RELAXED);
	queue_jobs(t->rst, head, RST_AHEAD);
}

/* Prefetch is best effort: idle I/O class, so a chunk a reader is waiting
 * for (restored by the reader's own thread) is not queued behind a whole
 * file's worth of prefetch in the disk scheduler. */
static void worker_init(void *arg)
{
	(void)arg;
	if (syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, (int)syscall(SYS_gettid), IOPRIO_IDLE) <
	    0) /* the pread fallback, and S3 */
		log_debug("restore: cannot lower the prefetch I/O priority: %s", strerror(errno));
}

static void job_run(struct workq *q, struct workq_job *wj, void *arg)
{
	struct restore *r = arg;
	struct tier *t = r->t;
	struct restore_job *j = (struct restore_job *)wj;

	(void)q;
	/* the tier is stopping (evict_stop is first): no new restore */
	if (__atomic_load_n(&t->stopping, __ATOMIC_ACQUIRE)) {
		job_cancel(wj, r);
		return;
	}
	if (j->c != UINT64_MAX) {
		struct inode *in = j->in;
		idx_inode_lock(in);
		if (j->c < in->nchunks) {
			struct chunk *ch = &in->chunks[j->c];
			ch->queued = 0;
			/* prefetch only while there is room to spare (a
			 * sequential reader will need its chunks anyway),
			 * and not while a truncate, fallocate or write waits
			 * for the file's restores (rst_hold, tier.c) */
			if (ch->state == CHUNK_COLD && in->nlink + in->open_count > 0 &&
			    !in->rst_hold &&
			    (j->ahead || hot_used(t->hot) + hot_reserved(t->hot) < r->threshold)) {
				/* the head of a file is what its reader asks for
				 * first: fetch it at normal priority */
				uring_set_ioprio(j->ahead || j->c < 2 ? IOPRIO_NORMAL : IOPRIO_IDLE);
				chunk_set_state(in, j->c, CHUNK_RESTORING);
				/* until its reader reads it (a read beside the
				 * restore counts too) */
				ch->unread = 1;
				restore_pub_locked(t, in, j->c);
			}
		}
		idx_inode_unlock(in);
		idx_put(t->idx, in);
	}
	free(j);
}

static const struct workq_ops restore_wq_ops = {
    .run = job_run,
    .cancel = job_cancel,
    .thread_init = worker_init,
};

int restore_start(struct tier *t)
{
	struct restore *r = t->rst;

	r->threshold = (uint64_t)(t->cfg->spill_threshold * hot_limit(t->hot));
	return workq_new(&restore_wq_ops, r, t->cfg->io_workers, RST_LEVELS, 0, &r->wq);
}

void restore_stop(struct tier *t)
{
	__atomic_store_n(&t->stopping, 1, __ATOMIC_RELEASE);
	workq_stop(t->rst->wq); /* queued jobs: job_cancel */
}
