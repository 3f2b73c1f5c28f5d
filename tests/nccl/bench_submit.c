/* SPDX-License-Identifier: MIT */
/*
 * libr2ccl's host time per stream-ordered submission (the path under every
 * ncclAllReduce on GPU buffers), on a machine without a GPU: bursts of 100
 * r2ccl_allreduce_stream calls of count 0 (no buffer to look up: the
 * handle's check, the communicator's slot, the SQE into the ring, the
 * doorbell or not, the stream's memory operations) on a communicator of
 * one rank, each burst answered (30 ms, untimed) before the next, fewer
 * than the 256 operations a communicator holds. Run by
 * tests/nccl/bench-submit.sh, with a fake driver. A figure, not a test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "r2ccl.h"

enum { BURST = 100, BURSTS = 41 };

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(void)
{
	r2ccl_client_t *c;
	r2ccl_comm_t *comm;
	r2ccl_unique_id_t id;
	double t[BURSTS];

	if (r2ccl_connect(NULL, &c) < 0 || r2ccl_get_unique_id(c, &id) < 0 ||
	    r2ccl_comm_init_rank(c, &comm, 1, &id, 0) < 0) {
		fprintf(stderr, "bench_submit: %s\n", r2ccl_last_error());
		return 1;
	}
	for (int k = 0; k < BURSTS + 2; k++) { /* the first two warm up */
		double t0 = now_us();
		for (int i = 0; i < BURST; i++) {
			int r = r2ccl_allreduce_stream(comm, NULL, NULL, 0, R2CCL_FLOAT32, R2CCL_SUM,
						       (void *)1);
			if (r < 0) {
				fprintf(stderr, "bench_submit: %d %s\n", r, r2ccl_last_error());
				return 1;
			}
		}
		if (k >= 2)
			t[k - 2] = (now_us() - t0) / BURST;
		usleep(30000);
	}
	qsort(t, BURSTS, sizeof(double), cmpd);
	printf("libr2ccl stream submission: median %.2f us, min %.2f us per call "
	       "(%d bursts of %d; driver calls faked: cost 0)\n",
	       t[BURSTS / 2], t[0], BURSTS, BURST);
	r2ccl_comm_destroy(comm);
	r2ccl_disconnect(c);
	return 0;
}
