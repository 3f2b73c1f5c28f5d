/* SPDX-License-Identifier: MIT */
/* A small parallel-for pool for large reductions and copies. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "engine/exec.h"
#include "util.h"

struct r2_pool {
	int nthreads;
	pthread_t *threads;
	pthread_mutex_t run_lock; /* one job at a time */
	pthread_mutex_t lock;
	pthread_cond_t cond, done_cond;
	uint64_t gen;
	bool stop;
	/* the current job */
	void (*fn)(void *ctx, size_t part);
	void *ctx;
	size_t nparts;
	atomic_size_t next;
	atomic_size_t done;
	int active; /* helpers inside the current job */
};

static void work(struct r2_pool *p)
{
	size_t i;

	while ((i = atomic_fetch_add(&p->next, 1)) < p->nparts) {
		p->fn(p->ctx, i);
		atomic_fetch_add(&p->done, 1);
	}
}

static void *helper(void *arg)
{
	struct r2_pool *p = arg;
	uint64_t seen = 0;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->cond, &p->lock);
		if (p->stop)
			break;
		seen = p->gen;
		p->active++;
		pthread_mutex_unlock(&p->lock);
		work(p);
		pthread_mutex_lock(&p->lock);
		if (--p->active == 0)
			pthread_cond_signal(&p->done_cond);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int r2_pool_create(struct r2_pool **out, int nthreads)
{
	struct r2_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	if (nthreads < 1)
		nthreads = 1;
	p->nthreads = nthreads;
	pthread_mutex_init(&p->run_lock, NULL);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	pthread_cond_init(&p->done_cond, NULL);
	p->threads = calloc((size_t)nthreads, sizeof(pthread_t));
	if (!p->threads) {
		free(p);
		return -ENOMEM;
	}
	for (int i = 0; i < nthreads - 1; i++) {
		if (r2_thread_create(&p->threads[i], helper, p) == 0)
			pthread_setname_np(p->threads[i], "r2-reduce");
		else {
			p->nthreads = i + 1;
			break;
		}
	}
	*out = p;
	return 0;
}

void r2_pool_destroy(struct r2_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; i < p->nthreads - 1; i++)
		pthread_join(p->threads[i], NULL);
	pthread_mutex_destroy(&p->run_lock);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	pthread_cond_destroy(&p->done_cond);
	free(p->threads);
	free(p);
}

int r2_pool_threads(const struct r2_pool *p)
{
	return p->nthreads;
}

void r2_pool_run(struct r2_pool *p, size_t nparts, void (*fn)(void *ctx, size_t part),
		 void *ctx)
{
	if (nparts == 1 || p->nthreads == 1 || pthread_mutex_trylock(&p->run_lock) != 0) {
		for (size_t i = 0; i < nparts; i++)
			fn(ctx, i);
		return;
	}
	pthread_mutex_lock(&p->lock);
	while (p->active > 0) /* a helper late from the previous job */
		pthread_cond_wait(&p->done_cond, &p->lock);
	p->fn = fn;
	p->ctx = ctx;
	p->nparts = nparts;
	atomic_store(&p->next, 0);
	atomic_store(&p->done, 0);
	p->gen++;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	work(p);
	/* wait for the parts helpers took, and for every helper to leave the
	 * job before the next one may reuse the fields */
	pthread_mutex_lock(&p->lock);
	while (atomic_load(&p->done) < nparts || p->active > 0)
		pthread_cond_wait(&p->done_cond, &p->lock);
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_unlock(&p->run_lock);
}

/* ---- a work queue: independent jobs, each run whole by one thread ----
 * One FIFO per owner (owner modulo WQ_OWNERS): owners take turns by deficit
 * round robin, each turn worth weight x WQ_QUANTUM bytes of jobs, so one
 * tenant's hundreds of chunks do not hold another's behind and the bytes
 * follow the weights while both have jobs waiting. */

#define WQ_OWNERS 64
#define WQ_QUANTUM (64u << 10)

struct r2_workq {
	int nthreads;
	pthread_t *threads;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct {
		struct r2_work *head, *tail;
	} fifo[WQ_OWNERS];
	uint64_t deficit[WQ_OWNERS]; /* bytes the FIFO may still take this round */
	uint32_t queued;
	int next;  /* the owner FIFO whose turn it is */
	bool turn; /* next has had its quantum for this turn */
	bool stop;
};

static uint64_t work_cost(const struct r2_work *w)
{
	return w->cost ? w->cost : WQ_QUANTUM;
}

static void workq_pass(struct r2_workq *q)
{
	q->next = (q->next + 1) % WQ_OWNERS;
	q->turn = false;
}

/* The next job (under q->lock) by deficit round robin over the owners;
 * NULL if none. Ends: while a job is queued, each round adds at least
 * WQ_QUANTUM to a FIFO that has one. */
static struct r2_work *workq_take(struct r2_workq *q)
{
	while (q->queued) {
		int k = q->next;
		struct r2_work *w = q->fifo[k].head;
		if (!w) {
			q->deficit[k] = 0; /* an idle owner saves no credit */
			workq_pass(q);
			continue;
		}
		if (!q->turn) {
			q->deficit[k] += (uint64_t)(w->weight ? w->weight : 1) * WQ_QUANTUM;
			q->turn = true;
		}
		if (work_cost(w) > q->deficit[k]) {
			workq_pass(q);
			continue;
		}
		q->deficit[k] -= work_cost(w);
		q->fifo[k].head = w->next;
		if (!w->next) {
			q->fifo[k].tail = NULL;
			q->deficit[k] = 0;
			workq_pass(q);
		}
		q->queued--;
		return w;
	}
	return NULL;
}

static void *workq_main(void *arg)
{
	struct r2_workq *q = arg;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		struct r2_work *w;
		while (!q->stop && !q->queued)
			pthread_cond_wait(&q->cond, &q->lock);
		if (!(w = workq_take(q)))
			break; /* stopping, nothing left */
		pthread_mutex_unlock(&q->lock);
		w->fn(w);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int r2_workq_create(struct r2_workq **out, int nthreads, const char *name)
{
	struct r2_workq *q = calloc(1, sizeof(*q));

	*out = NULL;
	if (!q || nthreads < 1) {
		free(q);
		return q ? -EINVAL : -ENOMEM;
	}
	if (!(q->threads = calloc((size_t)nthreads, sizeof(pthread_t)))) {
		free(q);
		return -ENOMEM;
	}
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	for (int i = 0; i < nthreads; i++) {
		if (r2_thread_create(&q->threads[i], workq_main, q) != 0)
			break;
		pthread_setname_np(q->threads[i], name);
		q->nthreads++;
	}
	if (!q->nthreads) {
		r2_workq_destroy(q);
		return -EAGAIN;
	}
	*out = q;
	return 0;
}

void r2_workq_destroy(struct r2_workq *q)
{
	if (!q)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	for (int i = 0; i < q->nthreads; i++)
		pthread_join(q->threads[i], NULL);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->cond);
	free(q->threads);
	free(q);
}

int r2_workq_threads(const struct r2_workq *q)
{
	return q ? q->nthreads : 0;
}

void r2_workq_submit(struct r2_workq *q, struct r2_work *w)
{
	int k = (int)(w->owner % WQ_OWNERS);

	w->next = NULL;
	pthread_mutex_lock(&q->lock);
	if (q->fifo[k].tail)
		q->fifo[k].tail->next = w;
	else
		q->fifo[k].head = w;
	q->fifo[k].tail = w;
	q->queued++;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
}
