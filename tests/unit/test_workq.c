/*
 * test_workq — the work queue (common/workq.c): its threads run jobs side by
 * side, a level never holds more than its bound, a lower level goes first,
 * stop drains the queue (runs it, or cancels it with a cancel op) and
 * refuses later pushes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/workq.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#define NJOBS  64
#define PROBES 4096 /* pushes that may land before stop shows */

struct job {
	struct workq_job wj;
	int id;
};

struct fx {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int gate;	 /* jobs wait while 0 (lock) */
	int running;	 /* jobs in run now (lock) */
	int max_running; /* (lock) */
	int ran, cancelled;
	int order[NJOBS + PROBES]; /* ids in the order they ran (lock) */
	struct job jobs[NJOBS + PROBES];
};

static void run(struct workq *q, struct workq_job *wj, void *arg)
{
	struct fx *f = arg;
	struct job *j = (struct job *)wj;

	(void)q;
	pthread_mutex_lock(&f->lock);
	f->running++;
	if (f->running > f->max_running)
		f->max_running = f->running;
	pthread_cond_broadcast(&f->cond);
	while (!f->gate)
		pthread_cond_wait(&f->cond, &f->lock);
	f->order[f->ran++] = j->id;
	f->running--;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

static void cancel(struct workq_job *wj, void *arg)
{
	struct fx *f = arg;

	(void)wj;
	pthread_mutex_lock(&f->lock);
	f->cancelled++;
	pthread_mutex_unlock(&f->lock);
}

static const struct workq_ops drain_ops = {.run = run};
static const struct workq_ops cancel_ops = {.run = run, .cancel = cancel};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	for (int i = 0; i < NJOBS + PROBES; i++)
		f->jobs[i].id = i;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f);
	return 0;
}

/* Wait (5 s at most) until n jobs are inside run at once. */
static void wait_running(struct fx *f, int n)
{
	struct timespec dl;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 5;
	pthread_mutex_lock(&f->lock);
	while (f->running < n && pthread_cond_timedwait(&f->cond, &f->lock, &dl) == 0)
		;
	assert_int_equal(f->running, n);
	pthread_mutex_unlock(&f->lock);
}

static void open_gate(struct fx *f)
{
	pthread_mutex_lock(&f->lock);
	f->gate = 1;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

static void test_threads_run_jobs(void **state)
{
	struct fx *f = *state;
	struct workq *q;

	assert_int_equal(workq_new(&drain_ops, f, 4, 1, 0, &q), 0);
	assert_int_equal(workq_threads(q), 4);
	for (int i = 0; i < NJOBS; i++)
		assert_int_equal(workq_push(q, &f->jobs[i].wj, 0), 0);
	wait_running(f, 4); /* four at once: one per thread */
	assert_int_equal(workq_pending(q, 0), NJOBS);
	open_gate(f);
	workq_free(q);
	assert_int_equal(f->ran, NJOBS);
	assert_int_equal(f->max_running, 4);
}

static void test_bound_holds(void **state)
{
	struct fx *f = *state;
	struct workq *q;

	assert_int_equal(workq_new(&drain_ops, f, 1, 2, 3, &q), 0);
	assert_int_equal(workq_push(q, &f->jobs[0].wj, 0), 0);
	wait_running(f, 1); /* job 0 in hand: the lists are empty again */
	for (int i = 1; i <= 3; i++)
		assert_int_equal(workq_push(q, &f->jobs[i].wj, 0), 0);
	assert_int_equal(workq_room(q, 0), 0);
	assert_int_equal(workq_push(q, &f->jobs[4].wj, 0), -EAGAIN);
	/* the bound is per level */
	assert_int_equal(workq_room(q, 1), 3);
	assert_int_equal(workq_push(q, &f->jobs[5].wj, 1), 0);
	assert_int_equal(workq_pending(q, 0), 4);
	assert_int_equal(workq_pending(q, 1), 1);
	open_gate(f);
	workq_free(q);
	assert_int_equal(f->ran, 5);
}

static void test_levels_in_order(void **state)
{
	struct fx *f = *state;
	struct workq *q;
	struct workq_job *got[4];

	assert_int_equal(workq_new(&drain_ops, f, 1, 3, 0, &q), 0);
	assert_int_equal(workq_push(q, &f->jobs[0].wj, 0), 0);
	wait_running(f, 1);
	/* queued while the one thread is busy: 1, 2 at level 2, 3, 4 at 1, 5 at 0 */
	assert_int_equal(workq_push(q, &f->jobs[1].wj, 2), 0);
	assert_int_equal(workq_push(q, &f->jobs[2].wj, 2), 0);
	assert_int_equal(workq_push(q, &f->jobs[3].wj, 1), 0);
	assert_int_equal(workq_push(q, &f->jobs[4].wj, 1), 0);
	assert_int_equal(workq_push(q, &f->jobs[5].wj, 0), 0);
	/* a batch taken off a level is the caller's */
	assert_int_equal(workq_take(q, 2, got, 4), 2);
	assert_ptr_equal(got[0], &f->jobs[1].wj);
	assert_ptr_equal(got[1], &f->jobs[2].wj);
	open_gate(f);
	workq_free(q);
	assert_int_equal(f->ran, 4);
	assert_int_equal(f->order[0], 0);
	assert_int_equal(f->order[1], 5);
	assert_int_equal(f->order[2], 3);
	assert_int_equal(f->order[3], 4);
}

struct stopper {
	struct workq *q;
	pthread_t th;
};

static void *stop_thread(void *arg)
{
	workq_stop(((struct stopper *)arg)->q);
	return NULL;
}

/* Push probe jobs until one is refused (stop began): the count that got in. */
static int probe_until_stopping(struct fx *f, struct workq *q)
{
	const struct timespec ms = {0, 1000000};
	int k = 0;

	while (k < PROBES && workq_push(q, &f->jobs[NJOBS + k].wj, 0) == 0) {
		k++;
		nanosleep(&ms, NULL);
	}
	assert_true(k < PROBES);
	return k;
}

/* Without a cancel op, stop runs every queued job before the threads go. */
static void test_stop_drains(void **state)
{
	struct fx *f = *state;
	struct stopper s;
	int probes;

	assert_int_equal(workq_new(&drain_ops, f, 2, 1, 0, &s.q), 0);
	for (int i = 0; i < NJOBS; i++)
		assert_int_equal(workq_push(s.q, &f->jobs[i].wj, 0), 0);
	wait_running(f, 2);
	assert_int_equal(pthread_create(&s.th, NULL, stop_thread, &s), 0);
	probes = probe_until_stopping(f, s.q);
	/* stopping, jobs still queued: they run */
	open_gate(f);
	pthread_join(s.th, NULL);
	assert_int_equal(workq_threads(s.q), 0);
	assert_int_equal(f->ran, NJOBS + probes);
	assert_int_equal(f->cancelled, 0);
	assert_int_equal(workq_push(s.q, &f->jobs[0].wj, 0), -ESHUTDOWN);
	workq_free(s.q);
}

/* With a cancel op, stop ends the jobs in hand and cancels the rest. */
static void test_stop_cancels(void **state)
{
	struct fx *f = *state;
	struct stopper s;
	int probes;

	assert_int_equal(workq_new(&cancel_ops, f, 2, 2, 0, &s.q), 0);
	for (int i = 0; i < NJOBS; i++)
		assert_int_equal(workq_push(s.q, &f->jobs[i].wj, i % 2), 0);
	wait_running(f, 2);
	assert_int_equal(pthread_create(&s.th, NULL, stop_thread, &s), 0);
	probes = probe_until_stopping(f, s.q);
	open_gate(f);
	pthread_join(s.th, NULL);
	assert_int_equal(f->ran, 2);
	assert_int_equal(f->cancelled, NJOBS - 2 + probes);
	assert_int_equal(workq_pending(s.q, 0) + workq_pending(s.q, 1), 0);
	workq_free(s.q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_threads_run_jobs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bound_holds, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_levels_in_order, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stop_drains, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stop_cancels, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
