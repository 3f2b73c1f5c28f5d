/* SPDX-License-Identifier: MIT */
/*
 * The victim of the adversary and tenant tests: a 2-rank AllReduce loop of
 * 4 KiB or another size (two clients of this process), each result checked exactly, rank
 * 0's times kept for the figures printed beside the attack or neighbour.
 * The calls return 0 or -1 with v->why set, so that a forked child (which
 * has no Check context) uses them too.
 */
#ifndef R2CCL_TEST_VICTIM_H
#define R2CCL_TEST_VICTIM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "r2ccl.h"

struct th_victim;

/* A 2-rank AllReduce loop's stop (`for (it = 0; it < stop_at; it++)`): at
 * the top of iteration it, before it enters AllReduce it, rank 0 asked to
 * stop sets stop_at to it + 2. Rank 1 is at most in it then, so both still
 * run it and it + 1 and stop there (one at a different AllReduce would
 * wait for the other until the op timeout). */
static inline void th_loop_stop_point(int rank, atomic_bool *stop, atomic_long *stop_at, long it)
{
	if (rank == 0 && atomic_load(stop) && atomic_load(stop_at) > it + 2)
		atomic_store(stop_at, it + 2);
}

/* AllReduce times kept (the later ones are not): 256 Ki, some seconds of a
 * fast loop */
#define TH_VICTIM_SAMPLES (1u << 18)

struct th_vrank {
	struct th_victim *v;
	int rank;
};

struct th_victim {
	r2ccl_client_t *cl[2];
	r2ccl_comm_t *comm[2];
	r2ccl_unique_id_t id;
	pthread_t t[2];
	struct th_vrank rk[2];
	atomic_long stop_at; /* both ranks run AllReduces 0 .. stop_at - 1 */
	atomic_bool stop;    /* asked (th_victim_stop): rank 0 sets stop_at */
	atomic_long ops;     /* AllReduces done (rank 0's count) */
	atomic_long failed;
	size_t n;            /* floats per AllReduce */
	char why[256];
	double *lat;    /* rank 0's AllReduce times (us), TH_VICTIM_SAMPLES */
	double *lat_at; /* when each began (th_now_ms) */
	size_t nlat;
	double p50, p99;     /* of lat, after th_victim_stop */
};

/* Connects both ranks to the daemon of R2CCL_SOCKET and forms their
 * communicator; AllReduces of 4 KiB. */
/* qsort's comparison of doubles, ascending. */
int th_cmp_double(const void *a, const void *b);
int th_victim_init(struct th_victim *v);
/* The same with AllReduces of bytes (a multiple of 4). */
int th_victim_init_size(struct th_victim *v, size_t bytes);
/* Starts the loop (after th_victim_init; v->id may go to others first), or
 * again after th_victim_stop: a new count of operations and times. */
int th_victim_run(struct th_victim *v);
/* Waits until min_ops AllReduces are done (wait_s at most: a loaded
 * machine is slow), stops both ranks at the same AllReduce, joins them:
 * -1 when one failed or fewer than min_ops ran. Sets p50 and p99. */
int th_victim_stop(struct th_victim *v, long min_ops, int wait_s);
/* After th_victim_stop: p50 and p99 of the AllReduces begun within
 * [from_ms, to_ms] (th_now_ms, one clock for every process); their count. */
size_t th_victim_window(struct th_victim *v, double from_ms, double to_ms);
/* The same over the AllReduces begun within any of nw windows, w[2i] to
 * w[2i+1], pooled. */
size_t th_victim_windows(struct th_victim *v, const double *w, size_t nw);
/* Destroys the communicator and disconnects: -1 when a destroy failed. */
int th_victim_fini(struct th_victim *v);

#endif
