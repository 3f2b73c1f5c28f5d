// SPDX-License-Identifier: MIT
/*
 * Example: AllReduce of GPU buffers ordered on a CUDA stream, two ranks on
 * one host (threads here for brevity; processes work the same way, with the
 * id shared as in onehost.c). Each rank registers its cudaMalloc buffer once,
 * queues the AllReduce on its stream, waits for the stream, checks the
 * result, then tears down: communicator, registration, GPU memory, client.
 * Exits 77 (skipped) where there is no GPU or r2ccld has no CUDA.
 *
 *   cc gpu.c $(pkg-config --cflags --libs r2ccl) -lcudart -o gpu
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <r2ccl.h>

#define NRANKS 2
#define COUNT (1 << 20)

struct rank {
	int rank;
	r2ccl_unique_id_t id;
	int status; /* 0 ok, 1 failed, 77 skipped */
};

static int fail(int rank, const char *what, int err)
{
	fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, what, r2ccl_strerror(err),
		r2ccl_last_error());
	return 1;
}

static int cuda_fail(int rank, const char *what, cudaError_t e)
{
	fprintf(stderr, "rank %d: %s: %s\n", rank, what, cudaGetErrorString(e));
	return 1;
}

static void *run_rank(void *arg)
{
	struct rank *m = arg;
	r2ccl_client_t *client = NULL;
	r2ccl_comm_t *comm = NULL;
	cudaStream_t stream = NULL;
	float *dbuf = NULL, *host = NULL;
	int r, async_err = 0, registered = 0, bad = 0;
	cudaError_t e;

	m->status = 1;
	if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaStreamCreate(&stream)) != cudaSuccess ||
	    (e = cudaMalloc((void **)&dbuf, COUNT * sizeof(float))) != cudaSuccess) {
		m->status = cuda_fail(m->rank, "cuda setup", e);
		goto out;
	}
	host = malloc(COUNT * sizeof(float));
	if (!host)
		goto out;
	for (int i = 0; i < COUNT; i++)
		host[i] = (float)(m->rank + 1);
	if ((e = cudaMemcpy(dbuf, host, COUNT * sizeof(float), cudaMemcpyHostToDevice)) !=
	    cudaSuccess) {
		m->status = cuda_fail(m->rank, "cudaMemcpy", e);
		goto out;
	}
	if ((r = r2ccl_connect(NULL, &client)) < 0) {
		m->status = fail(m->rank, "r2ccl_connect", r);
		goto out;
	}
	if ((r = r2ccl_comm_init_rank(client, &comm, NRANKS, &m->id, m->rank)) < 0) {
		m->status = fail(m->rank, "r2ccl_comm_init_rank", r);
		goto out;
	}
	r = r2ccl_mem_register_gpu(client, dbuf, COUNT * sizeof(float));
	if (r == -EOPNOTSUPP || r == -ENODEV) {
		fprintf(stderr, "rank %d: no GPU support here (%s): skipped\n", m->rank,
			r2ccl_strerror(r));
		m->status = 77;
		goto out;
	}
	if (r < 0) {
		m->status = fail(m->rank, "r2ccl_mem_register_gpu", r);
		goto out;
	}
	registered = 1;
	/* queued on the stream: starts after the copy above, returns at once */
	r = r2ccl_allreduce_stream(comm, dbuf, dbuf, COUNT, R2CCL_FLOAT32, R2CCL_SUM, stream);
	if (r < 0) {
		m->status = fail(m->rank, "r2ccl_allreduce_stream", r);
		goto out;
	}
	/* wait for the stream, asking for the operation's own error meanwhile */
	while ((e = cudaStreamQuery(stream)) == cudaErrorNotReady) {
		if ((r = r2ccl_comm_get_async_error(comm, &async_err)) < 0 || async_err < 0)
			break;
	}
	if (async_err < 0 || r < 0) {
		m->status = fail(m->rank, "the stream's allreduce", async_err < 0 ? async_err : r);
		cudaStreamSynchronize(stream);
		goto out;
	}
	if (e != cudaSuccess ||
	    (e = cudaMemcpy(host, dbuf, COUNT * sizeof(float), cudaMemcpyDeviceToHost)) !=
		    cudaSuccess) {
		m->status = cuda_fail(m->rank, "stream", e);
		goto out;
	}
	for (int i = 0; i < COUNT; i++)
		bad += host[i] != (float)(NRANKS * (NRANKS + 1) / 2);
	if (bad)
		fprintf(stderr, "rank %d: %d wrong values\n", m->rank, bad);
	else
		printf("rank %d: GPU allreduce on a stream ok\n", m->rank);
	m->status = bad ? 1 : 0;
out:
	/* teardown: communicator, registration, GPU memory, client */
	if (comm && (r = r2ccl_comm_destroy(comm)) < 0 && m->status != 77)
		m->status = fail(m->rank, "r2ccl_comm_destroy", r);
	if (registered && (r = r2ccl_mem_deregister_gpu(client, dbuf)) < 0)
		m->status = fail(m->rank, "r2ccl_mem_deregister_gpu", r);
	r2ccl_disconnect(client);
	if (dbuf)
		cudaFree(dbuf);
	if (stream)
		cudaStreamDestroy(stream);
	free(host);
	return NULL;
}

int main(void)
{
	struct rank m[NRANKS];
	pthread_t t[NRANKS];
	r2ccl_client_t *client;
	r2ccl_unique_id_t id;
	int n = 0, r, status = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
		fprintf(stderr, "no CUDA device: skipped\n");
		return 77;
	}
	/* the id, from a short-lived client (any rank could make it) */
	if ((r = r2ccl_connect(NULL, &client)) < 0 || (r = r2ccl_get_unique_id(client, &id)) < 0)
		return fail(0, "r2ccl_connect / r2ccl_get_unique_id", r);
	r2ccl_disconnect(client);
	for (int k = 0; k < NRANKS; k++) {
		m[k].rank = k;
		m[k].id = id;
		if (pthread_create(&t[k], NULL, run_rank, &m[k]) != 0)
			return 1;
	}
	for (int k = 0; k < NRANKS; k++) {
		pthread_join(t[k], NULL);
		if (m[k].status == 77 && status == 0)
			status = 77;
		else if (m[k].status != 0 && m[k].status != 77)
			status = 1;
	}
	return status;
}
