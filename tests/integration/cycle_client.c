/* SPDX-License-Identifier: MIT */
/*
 * A small client for the valgrind cycle: 2 ranks (2 processes) run each
 * collective once on small buffers and check the results.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "r2ccl.h"

#define N 1000

static int rank_main(const r2ccl_unique_id_t *id, int rank, int n)
{
	r2ccl_client_t *c;
	r2ccl_comm_t *comm;
	int32_t *a, *b;
	int r, bad = 0;

	if ((r = r2ccl_connect(NULL, &c)) || (r = r2ccl_comm_init_rank(c, &comm, n, id, rank)) ||
	    (r = r2ccl_mem_alloc(c, N * 4 * n, (void **)&a)) ||
	    (r = r2ccl_mem_alloc(c, N * 4 * n, (void **)&b))) {
		fprintf(stderr, "rank %d: setup: %s\n", rank, r2ccl_strerror(r));
		return 1;
	}
	for (int i = 0; i < N; i++)
		a[i] = rank + i;
	r = r2ccl_allreduce(comm, a, b, N, R2CCL_INT32, R2CCL_SUM);
	for (int i = 0; !r && i < N; i++)
		bad += b[i] != n * i + n * (n - 1) / 2;
	if (!r)
		r = r2ccl_allgather(comm, a, b, N, R2CCL_INT32);
	for (int i = 0; !r && i < N * n; i++)
		bad += b[i] != (i / N) + (i % N);
	if (!r)
		r = r2ccl_broadcast(comm, a, b, N, R2CCL_INT32, 1);
	for (int i = 0; !r && i < N; i++)
		bad += b[i] != 1 + i;
	if (r || bad) {
		fprintf(stderr, "rank %d: %s, %d wrong\n", rank, r2ccl_strerror(r), bad);
		return 1;
	}
	r2ccl_mem_free(c, a);
	r2ccl_comm_destroy(comm);
	r2ccl_disconnect(c); /* b is released with the session */
	return 0;
}

int main(void)
{
	r2ccl_unique_id_t *id = mmap(NULL, sizeof(*id), PROT_READ | PROT_WRITE,
				     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	r2ccl_client_t *c;
	int r, st, fail = 0, n = 2;

	if ((r = r2ccl_connect(NULL, &c)) || (r = r2ccl_get_unique_id(c, id))) {
		fprintf(stderr, "setup: %s\n", r2ccl_strerror(r));
		return 1;
	}
	r2ccl_disconnect(c);
	for (int k = 0; k < n; k++)
		if (fork() == 0)
			_exit(rank_main(id, k, n));
	while (wait(&st) > 0)
		fail |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	printf("cycle client: %s\n", fail ? "FAILED" : "ok");
	return fail;
}
