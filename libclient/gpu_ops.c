/* SPDX-License-Identifier: MIT */
/*
 * libr2ccl: the stream-ordered collectives (r2ccl_*_stream), their argument
 * checks as the blocking ones', each handed to r2c_gpu_submit (gpu.c: the
 * sync slot, client staging, the stream's memory operations).
 */
#include <errno.h>
#include <stdint.h>

#include "client.h"
#include "r2ccl.h"

static int bytes(size_t count, r2ccl_dtype_t dtype, uint64_t mult, uint64_t *out)
{
	uint64_t es = r2ccl_dtype_size(dtype);

	if (!es)
		return -EINVAL;
	if (count && (uint64_t)count > UINT64_MAX / es / mult)
		return -EOVERFLOW;
	*out = (uint64_t)count * es * mult;
	return 0;
}

int r2ccl_allreduce_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			   size_t count, r2ccl_dtype_t dtype, r2ccl_redop_t op, void *stream)
{
	uint64_t n;
	int r = bytes(count, dtype, 1, &n);

	return r ? r : r2c_gpu_submit(comm, R2_OP_ALLREDUCE, sendbuff, n, recvbuff, n, count, dtype, op, 0,
			      stream);
}

int r2ccl_allgather_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			   size_t sendcount, r2ccl_dtype_t dtype, void *stream)
{
	uint64_t n, t;
	int r;

	R2C_COMM_USE(comm);
	r = bytes(sendcount, dtype, 1, &n);
	if (!r)
		r = bytes(sendcount, dtype, (uint64_t)comm->nranks, &t);
	return r ? r : r2c_gpu_submit(comm, R2_OP_ALLGATHER, sendbuff, n, recvbuff, t, sendcount, dtype,
			      R2CCL_SUM, 0, stream);
}

int r2ccl_reducescatter_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			       size_t recvcount, r2ccl_dtype_t dtype, r2ccl_redop_t op,
			       void *stream)
{
	uint64_t n, t;
	int r;

	R2C_COMM_USE(comm);
	r = bytes(recvcount, dtype, 1, &n);
	if (!r)
		r = bytes(recvcount, dtype, (uint64_t)comm->nranks, &t);
	return r ? r : r2c_gpu_submit(comm, R2_OP_REDUCESCATTER, sendbuff, t, recvbuff, n, recvcount,
			      dtype, op, 0, stream);
}

int r2ccl_broadcast_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			   size_t count, r2ccl_dtype_t dtype, int root, void *stream)
{
	uint64_t n;
	int r;

	R2C_COMM_USE(comm);
	if (root < 0 || root >= comm->nranks)
		return -EINVAL;
	r = bytes(count, dtype, 1, &n);
	return r ? r : r2c_gpu_submit(comm, R2_OP_BROADCAST, sendbuff, comm->rank == root ? n : 0,
			      recvbuff, n, count, dtype, R2CCL_SUM, root, stream);
}

int r2ccl_reduce_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff, size_t count,
			r2ccl_dtype_t dtype, r2ccl_redop_t op, int root, void *stream)
{
	uint64_t n;
	int r;

	R2C_COMM_USE(comm);
	if (root < 0 || root >= comm->nranks)
		return -EINVAL;
	r = bytes(count, dtype, 1, &n);
	return r ? r : r2c_gpu_submit(comm, R2_OP_REDUCE, sendbuff, n, recvbuff,
			      comm->rank == root ? n : 0, count, dtype, op, root, stream);
}

int r2ccl_send_stream(r2ccl_comm_t *comm, const void *sendbuff, size_t count,
		      r2ccl_dtype_t dtype, int peer, void *stream)
{
	uint64_t n;
	int r;

	R2C_COMM_USE(comm);
	if (peer < 0 || peer >= comm->nranks || peer == comm->rank)
		return -EINVAL;
	r = bytes(count, dtype, 1, &n);
	return r ? r : r2c_gpu_submit(comm, R2_OP_SEND, sendbuff, n, NULL, 0, count, dtype, R2CCL_SUM,
			      peer, stream);
}

int r2ccl_recv_stream(r2ccl_comm_t *comm, void *recvbuff, size_t count, r2ccl_dtype_t dtype,
		      int peer, void *stream)
{
	uint64_t n;
	int r;

	R2C_COMM_USE(comm);
	if (peer < 0 || peer >= comm->nranks || peer == comm->rank)
		return -EINVAL;
	r = bytes(count, dtype, 1, &n);
	return r ? r : r2c_gpu_submit(comm, R2_OP_RECV, NULL, 0, recvbuff, n, count, dtype, R2CCL_SUM,
			      peer, stream);
}
