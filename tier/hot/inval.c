/*
 * inval — page-cache invalidations sent by their own thread: the kernel may
 * wait on page locks held by reads that wait for us, so the evictor, restore
 * and the last close only queue them (inval_async never blocks).
 * DESIGN
 * - Its state is its own (struct inval, below; t->inval points at it): one
 *   worker thread on a workq (workq.h) calls the fs layer's function
 *   (tier_set_inval) for each job. A job that cannot be allocated or queued
 *   (not started, or stopping) is skipped: only page cache is left behind
 *   (correct, just not freed).
 * - A range of a file that is open is never dropped: the kernel drops a
 *   page only once it holds the page's lock, and a read in flight holds it
 *   until this daemon answers. Alive, we answer and the drop ends; killed
 *   (kill -9, the OOM killer) between the two, the drop never ends, the
 *   thread stays in D state holding /dev/fuse, the connection is never
 *   aborted and every request on the mount hangs (the soak saw it once in
 *   an hour; huggingface/hf-mount#195 is the same). So the worker looks at
 *   the file just before it sends: open, it marks the drop owed
 *   (in->inval_owed) and the last close drops the whole file instead
 *   (tier_close). The pages held meanwhile are clean page cache the kernel
 *   reclaims under pressure. What is left: an open and a read that start
 *   between that look and the send, and a kill in that instant.
 * - inval_stop: the worker sends what is still queued (a drain), then exits.
 * - Threading: inval_async from any thread; inval_set, start, stop and free
 *   from the tier's owner (tier.c), never while inval_async may run.
 */
#include "tier/tier_i.h"
#include "common/workq.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

struct inval_job {
	struct workq_job wj;
	uint64_t ino, off, len;
};

struct inval {
	/* the fs layer's sender (tier_inval_fn); NULL: nothing to drop */
	void (*fn)(void *arg, uint64_t ino, uint64_t off, uint64_t len);
	void *arg;
	struct index *idx;     /* to look at a file before its pages go */
	struct tier_stats *st; /* kdrops_sent, kdrops_owed */
	struct workq *wq;      /* one thread; NULL: not started */
};

int inval_new(struct tier *t)
{
	struct inval *v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->idx = t->idx;
	v->st = &t->st;
	t->inval = v;
	return 0;
}

void inval_free(struct tier *t)
{
	struct inval *v = t->inval;
	if (!v)
		return;
	workq_free(v->wq); /* drains what is queued */
	free(v);
	t->inval = NULL;
}

void inval_set(struct tier *t, void (*fn)(void *, uint64_t, uint64_t, uint64_t), void *arg)
{
	t->inval->fn = fn;
	t->inval->arg = arg;
}

void inval_async(struct tier *t, uint64_t ino, uint64_t off, uint64_t len)
{
	struct inval *v = t->inval;
	struct inval_job *j;
	if (!v->fn || !v->wq || !(j = malloc(sizeof(*j))))
		return; /* only page cache left behind: correct, just not freed */
	j->ino = ino;
	j->off = off;
	j->len = len;
	if (workq_push(v->wq, &j->wj, 0) < 0)
		free(j); /* stopping: the same */
}

/* 1: send j now; 0: the file is open, the drop is owed to its last close */
static int inval_may_send(struct inval *v, const struct inval_job *j)
{
	struct inode *in = idx_get(v->idx, j->ino);
	int send = 1; /* forgotten: the kernel holds nothing of it */
	if (in) {
		idx_inode_lock(in);
		if (in->open_count > 0) {
			in->inval_owed = 1;
			send = 0;
		}
		idx_inode_unlock(in);
		idx_put(v->idx, in);
	}
	return send;
}

static void inval_run(struct workq *q, struct workq_job *wj, void *arg)
{
	struct inval *v = arg;
	struct inval_job *j = (struct inval_job *)((char *)wj - offsetof(struct inval_job, wj));
	(void)q;
	if (v->fn && inval_may_send(v, j)) {
		v->fn(v->arg, j->ino, j->off, j->len);
		__atomic_add_fetch(&v->st->kdrops_sent, 1, __ATOMIC_RELAXED);
	} else if (v->fn) {
		__atomic_add_fetch(&v->st->kdrops_owed, 1, __ATOMIC_RELAXED);
	}
	free(j);
}

static const struct workq_ops inval_wq_ops = {.run = inval_run};

int inval_start(struct tier *t)
{
	struct inval *v = t->inval;
	return workq_new(&inval_wq_ops, v, 1, 1, 0, &v->wq);
}

void inval_stop(struct tier *t)
{
	struct inval *v = t->inval;
	if (v && v->wq)
		workq_stop(v->wq); /* sends what is queued first */
}
