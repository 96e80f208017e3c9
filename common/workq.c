/*
 * workq — worker threads over a leveled job queue (see workq.h).
 *
 * DESIGN
 * - One lock and one condvar: the lists, their counts, the jobs in hand
 *   per level (busy) and stop. A push signals one thread.
 * - A thread takes the first job of the lowest non-empty level, runs it
 *   with the lock dropped, then counts it done. Stopping: with a cancel op
 *   it leaves after its job in hand; without, once every list is empty.
 * - workq_stop joins the threads, then hands what is still queued (cancel
 *   op only) to cancel, lowest level first, on the calling thread.
 */
#include "common/workq.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

struct workq_list {
	struct workq_job *head, *tail;
	size_t n;
};

struct workq {
	const struct workq_ops *ops;
	void *arg;
	size_t bound;		/* per level; 0: none (read-only) */
	unsigned nlevels;	/* (read-only) */
	pthread_mutex_t lock;
	pthread_cond_t work;	/* a job was queued, or stop */
	struct workq_list l[WORKQ_LEVELS]; /* (lock) */
	unsigned busy[WORKQ_LEVELS];	   /* jobs being run (lock) */
	int stop;			   /* (lock) */
	pthread_t *th;
	unsigned nth; /* threads started; 0 once joined (atomic) */
};

static struct workq_job *pop_locked(struct workq *q, unsigned level)
{
	struct workq_list *l = &q->l[level];
	struct workq_job *j = l->head;

	if (j) {
		l->head = j->next;
		if (!l->head)
			l->tail = NULL;
		l->n--;
		j->next = NULL;
	}
	return j;
}

/* The next job to run, or NULL: stop (lock held). */
static struct workq_job *next_locked(struct workq *q)
{
	for (;;) {
		if (q->stop && q->ops->cancel)
			return NULL;
		for (unsigned k = 0; k < q->nlevels; k++)
			if (q->l[k].n)
				return pop_locked(q, k);
		if (q->stop)
			return NULL; /* drained */
		pthread_cond_wait(&q->work, &q->lock);
	}
}

static void *worker(void *arg)
{
	struct workq *q = arg;
	struct workq_job *j;

	if (q->ops->thread_init)
		q->ops->thread_init(q->arg);
	pthread_mutex_lock(&q->lock);
	while ((j = next_locked(q))) {
		unsigned level = j->level;
		q->busy[level]++;
		pthread_mutex_unlock(&q->lock);
		q->ops->run(q, j, q->arg); /* j may be freed by now */
		pthread_mutex_lock(&q->lock);
		q->busy[level]--;
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int workq_new(const struct workq_ops *ops, void *arg, unsigned nthreads, unsigned nlevels,
	      size_t bound, struct workq **out)
{
	struct workq *q;
	int ret = -ENOMEM;

	if (!nthreads || !nlevels || nlevels > WORKQ_LEVELS)
		return -EINVAL;
	if (!(q = calloc(1, sizeof(*q))) || !(q->th = calloc(nthreads, sizeof(*q->th))))
		goto fail;
	q->ops = ops;
	q->arg = arg;
	q->bound = bound;
	q->nlevels = nlevels;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->work, NULL);
	for (unsigned i = 0; i < nthreads; i++) {
		if ((ret = pthread_create(&q->th[i], NULL, worker, q)) != 0)
			break;
		q->nth++;
	}
	if (!q->nth) {
		ret = ret ? -ret : -EAGAIN;
		pthread_cond_destroy(&q->work);
		pthread_mutex_destroy(&q->lock);
		goto fail;
	}
	*out = q;
	return 0;
fail:
	if (q)
		free(q->th);
	free(q);
	return ret;
}

int workq_push(struct workq *q, struct workq_job *j, unsigned level)
{
	struct workq_list *l = &q->l[level];
	int ret = 0;

	pthread_mutex_lock(&q->lock);
	if (q->stop) {
		ret = -ESHUTDOWN;
	} else if (q->bound && l->n >= q->bound) {
		ret = -EAGAIN;
	} else {
		j->level = level;
		j->next = NULL;
		if (l->tail)
			l->tail->next = j;
		else
			l->head = j;
		l->tail = j;
		l->n++;
		pthread_cond_signal(&q->work);
	}
	pthread_mutex_unlock(&q->lock);
	return ret;
}

size_t workq_take(struct workq *q, unsigned level, struct workq_job **out, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&q->lock);
	while (n < max && (out[n] = pop_locked(q, level)))
		n++;
	pthread_mutex_unlock(&q->lock);
	return n;
}

unsigned workq_pending(struct workq *q, unsigned level)
{
	unsigned n;

	pthread_mutex_lock(&q->lock);
	n = (unsigned)q->l[level].n + q->busy[level];
	pthread_mutex_unlock(&q->lock);
	return n;
}

size_t workq_room(struct workq *q, unsigned level)
{
	size_t room = SIZE_MAX;

	pthread_mutex_lock(&q->lock);
	if (q->bound)
		room = q->l[level].n < q->bound ? q->bound - q->l[level].n : 0;
	pthread_mutex_unlock(&q->lock);
	return room;
}

unsigned workq_threads(const struct workq *q)
{
	return q ? __atomic_load_n(&q->nth, __ATOMIC_ACQUIRE) : 0;
}

void workq_stop(struct workq *q)
{
	struct workq_job *j;
	unsigned n = workq_threads(q);

	if (!n)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = 1;
	pthread_cond_broadcast(&q->work);
	pthread_mutex_unlock(&q->lock);
	for (unsigned i = 0; i < n; i++)
		pthread_join(q->th[i], NULL);
	__atomic_store_n(&q->nth, 0, __ATOMIC_RELEASE);
	/* no thread left: the lists are ours (empty after a drain) */
	for (unsigned k = 0; k < q->nlevels; k++)
		while ((j = pop_locked(q, k)))
			q->ops->cancel(j, q->arg);
}

void workq_free(struct workq *q)
{
	if (!q)
		return;
	workq_stop(q);
	pthread_cond_destroy(&q->work);
	pthread_mutex_destroy(&q->lock);
	free(q->th);
	free(q);
}
