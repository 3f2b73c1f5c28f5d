// SPDX-License-Identifier: MIT
/* The victim loop of the adversary and tenant tests (victim.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "victim.h"

static void *rank_init(void *a)
{
	struct th_vrank *k = a;
	struct th_victim *v = k->v;

	if (r2ccl_comm_init_rank(v->cl[k->rank], &v->comm[k->rank], 2, &v->id, k->rank) != 0) {
		snprintf(v->why, sizeof(v->why), "rank %d: communicator init: %s", k->rank,
			 r2ccl_last_error());
		atomic_fetch_add(&v->failed, 1);
	}
	return NULL;
}

static void *rank_loop(void *a)
{
	struct th_vrank *k = a;
	struct th_victim *v = k->v;
	const size_t n = v->n;
	float *buf;

	if (r2ccl_mem_alloc(v->cl[k->rank], n * sizeof(float), (void **)&buf) != 0) {
		snprintf(v->why, sizeof(v->why), "rank %d: mem_alloc: %s", k->rank,
			 r2ccl_last_error());
		atomic_fetch_add(&v->failed, 1);
		return NULL;
	}
	for (long it = 0; it < atomic_load(&v->stop_at); it++) {
		th_loop_stop_point(k->rank, &v->stop, &v->stop_at, it);
		for (size_t i = 0; i < n; i++)
			buf[i] = (float)(k->rank + 1);
		double t0 = th_now_ms();
		int r = r2ccl_allreduce(v->comm[k->rank], buf, buf, n, R2CCL_FLOAT32, R2CCL_SUM);
		if (r != 0 || buf[0] != 3.0f || buf[n - 1] != 3.0f) {
			snprintf(v->why, sizeof(v->why), "rank %d: %s (%s)", k->rank,
				 r2ccl_strerror(r), r2ccl_last_error());
			atomic_fetch_add(&v->failed, 1);
			break;
		}
		if (k->rank == 0) {
			if (v->nlat < TH_VICTIM_SAMPLES) {
				v->lat_at[v->nlat] = t0;
				v->lat[v->nlat++] = (th_now_ms() - t0) * 1000;
			}
			atomic_fetch_add(&v->ops, 1);
		}
	}
	r2ccl_mem_free(v->cl[k->rank], buf);
	return NULL;
}

static int both(struct th_victim *v, void *(*fn)(void *))
{
	for (int r = 0; r < 2; r++) {
		v->rk[r] = (struct th_vrank){ v, r };
		if (pthread_create(&v->t[r], NULL, fn, &v->rk[r])) {
			snprintf(v->why, sizeof(v->why), "pthread_create failed");
			return -1;
		}
	}
	return 0;
}

int th_victim_init(struct th_victim *v)
{
	return th_victim_init_size(v, 4096);
}

int th_victim_init_size(struct th_victim *v, size_t bytes)
{
	memset(v, 0, sizeof(*v));
	v->lat = calloc(TH_VICTIM_SAMPLES, sizeof(*v->lat));
	v->lat_at = calloc(TH_VICTIM_SAMPLES, sizeof(*v->lat_at));
	if (!v->lat || !v->lat_at) {
		snprintf(v->why, sizeof(v->why), "out of memory");
		return -1;
	}
	v->n = bytes / sizeof(float);
	atomic_store(&v->stop_at, 1L << 40);
	atomic_store(&v->stop, false);
	for (int r = 0; r < 2; r++)
		if (r2ccl_connect(NULL, &v->cl[r]) != 0) {
			snprintf(v->why, sizeof(v->why), "connect: %s", r2ccl_last_error());
			return -1;
		}
	if (r2ccl_get_unique_id(v->cl[0], &v->id) != 0) {
		snprintf(v->why, sizeof(v->why), "unique id: %s", r2ccl_last_error());
		return -1;
	}
	if (both(v, rank_init))
		return -1;
	for (int r = 0; r < 2; r++)
		pthread_join(v->t[r], NULL);
	return atomic_load(&v->failed) ? -1 : 0;
}

int th_victim_run(struct th_victim *v)
{
	atomic_store(&v->stop_at, 1L << 40);
	atomic_store(&v->stop, false);
	atomic_store(&v->ops, 0);
	v->nlat = 0;
	v->p50 = v->p99 = 0;
	return both(v, rank_loop);
}

int th_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int th_victim_stop(struct th_victim *v, long min_ops, int wait_s)
{
	for (int i = 0; i < wait_s * 10 && atomic_load(&v->ops) < min_ops &&
			!atomic_load(&v->failed);
	     i++)
		usleep(100000);
	atomic_store(&v->stop, true); /* both stop at the same AllReduce */
	for (int r = 0; r < 2; r++)
		pthread_join(v->t[r], NULL);
	th_victim_window(v, 0, 1e300);
	if (atomic_load(&v->failed))
		return -1;
	if (atomic_load(&v->ops) < min_ops) {
		snprintf(v->why, sizeof(v->why), "only %ld AllReduces in %d s",
			 atomic_load(&v->ops), wait_s);
		return -1;
	}
	return 0;
}

size_t th_victim_window(struct th_victim *v, double from_ms, double to_ms)
{
	const double w[2] = { from_ms, to_ms };

	return th_victim_windows(v, w, 1);
}

size_t th_victim_windows(struct th_victim *v, const double *w, size_t nw)
{
	double *got = malloc((v->nlat ? v->nlat : 1) * sizeof(*got));
	size_t n = 0;

	v->p50 = v->p99 = 0;
	if (!got)
		return 0;
	for (size_t i = 0; i < v->nlat; i++)
		for (size_t k = 0; k < nw; k++)
			if (v->lat_at[i] >= w[2 * k] && v->lat_at[i] <= w[2 * k + 1]) {
				got[n++] = v->lat[i];
				break;
			}
	if (n) {
		qsort(got, n, sizeof(got[0]), th_cmp_double);
		v->p50 = got[n / 2];
		v->p99 = got[n * 99 / 100];
	}
	free(got);
	return n;
}

int th_victim_fini(struct th_victim *v)
{
	int ret = 0;

	for (int r = 0; r < 2; r++) {
		if (v->comm[r] && r2ccl_comm_destroy(v->comm[r]) != 0) {
			snprintf(v->why, sizeof(v->why), "rank %d: destroy: %s", r,
				 r2ccl_last_error());
			ret = -1;
		}
		v->comm[r] = NULL;
		if (v->cl[r])
			r2ccl_disconnect(v->cl[r]);
		v->cl[r] = NULL;
	}
	free(v->lat);
	free(v->lat_at);
	v->lat = v->lat_at = NULL;
	v->nlat = 0;
	return ret;
}
