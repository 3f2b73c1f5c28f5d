/* SPDX-License-Identifier: MIT */
/*
 * What the NCCL layer costs on host memory: small AllReduces through
 * ncclAllReduce (ncclMemAlloc buffers, staged through r2ccl memory) and
 * through r2ccl_allreduce (r2ccl memory) on 2 ranks of one r2ccld started
 * here, the two loops alternated in rounds. Prints the median time per
 * operation of each and their difference. Not a test: a figure.
 *   bench_host [iterations per round (2000)] [bytes (8)]
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "nccl.h"
#include "r2ccl.h"

#define ROUNDS 5

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 2000;
	size_t bytes = argc > 2 ? strtoul(argv[2], NULL, 0) : 8;
	size_t count = bytes / 4 ? bytes / 4 : 1;
	struct th_daemon d;
	ncclUniqueId nid;
	r2ccl_unique_id_t rid;
	r2ccl_client_t *c;
	double *res = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pids[2];

	if (th_daemon_start(&d, NULL) < 0)
		return 1;
	if (ncclGetUniqueId(&nid) != ncclSuccess || r2ccl_connect(NULL, &c) < 0 ||
	    r2ccl_get_unique_id(c, &rid) < 0)
		return 1;
	r2ccl_disconnect(c);
	for (int r = 0; r < 2; r++) {
		pids[r] = fork();
		if (pids[r] == 0) {
			ncclComm_t nc;
			r2ccl_client_t *rc;
			r2ccl_comm_t *cc;
			void *np, *rp;
			double tn[ROUNDS], tr[ROUNDS];

			if (ncclCommInitRank(&nc, 2, nid, r) != ncclSuccess ||
			    ncclMemAlloc(&np, count * 4) != ncclSuccess || r2ccl_connect(NULL, &rc) < 0 ||
			    r2ccl_comm_init_rank(rc, &cc, 2, &rid, r) < 0 ||
			    r2ccl_mem_alloc(rc, count * 4, &rp) < 0)
				_exit(2);
			memset(np, 0, count * 4);
			memset(rp, 0, count * 4);
			for (int k = 0; k < ROUNDS; k++) {
				double t0 = th_now_ms();
				for (int i = 0; i < iters; i++)
					if (ncclAllReduce(np, np, count, ncclFloat32, ncclSum, nc, NULL))
						_exit(3);
				tn[k] = (th_now_ms() - t0) * 1000 / iters;
				t0 = th_now_ms();
				for (int i = 0; i < iters; i++)
					if (r2ccl_allreduce(cc, rp, rp, count, R2CCL_FLOAT32, R2CCL_SUM))
						_exit(4);
				tr[k] = (th_now_ms() - t0) * 1000 / iters;
			}
			qsort(tn, ROUNDS, sizeof(double), cmpd);
			qsort(tr, ROUNDS, sizeof(double), cmpd);
			res[r * 2] = tn[ROUNDS / 2];
			res[r * 2 + 1] = tr[ROUNDS / 2];
			ncclCommDestroy(nc);
			r2ccl_comm_destroy(cc);
			r2ccl_disconnect(rc);
			_exit(0);
		}
	}
	for (int r = 0; r < 2; r++) {
		int st;
		waitpid(pids[r], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "rank %d failed (%#x)\n", r, st);
			return 1;
		}
	}
	th_daemon_stop(&d, SIGTERM, 20000);
	th_daemon_cleanup(&d);
	printf("%zu B AllReduce, 2 ranks, one r2ccld, median of %d rounds x %d:\n", count * 4, ROUNDS,
	       iters);
	printf("  ncclAllReduce (staged): %8.2f us\n  r2ccl_allreduce:        %8.2f us\n"
	       "  NCCL layer:             %8.2f us per call (rank 0)\n",
	       res[0], res[1], res[0] - res[1]);
	return 0;
}
