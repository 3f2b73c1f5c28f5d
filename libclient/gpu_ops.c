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

/* A stream-ordered collective: its lengths checked as the blocking ones'
 * (r2c_op_lengths), then queued on the stream. */
static int stream_op(r2ccl_comm_t *comm, uint32_t opcode, const void *sendbuff, void *recvbuff,
		     size_t count, r2ccl_dtype_t dtype, r2ccl_redop_t op, int root, void *stream)
{
	uint64_t slen, rlen;
	int r = r2c_op_lengths(comm, opcode, count, dtype, root, &slen, &rlen);

	return r ? r : r2c_gpu_submit(comm, opcode, sendbuff, slen, recvbuff, rlen, count, dtype, op,
				      root, stream);
}

int r2ccl_allreduce_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			   size_t count, r2ccl_dtype_t dtype, r2ccl_redop_t op, void *stream)
{
	return stream_op(comm, R2_OP_ALLREDUCE, sendbuff, recvbuff, count, dtype, op, 0, stream);
}

int r2ccl_allgather_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			   size_t sendcount, r2ccl_dtype_t dtype, void *stream)
{
	return stream_op(comm, R2_OP_ALLGATHER, sendbuff, recvbuff, sendcount, dtype, R2CCL_SUM, 0,
			 stream);
}

int r2ccl_reducescatter_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			       size_t recvcount, r2ccl_dtype_t dtype, r2ccl_redop_t op,
			       void *stream)
{
	return stream_op(comm, R2_OP_REDUCESCATTER, sendbuff, recvbuff, recvcount, dtype, op, 0,
			 stream);
}

int r2ccl_broadcast_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			   size_t count, r2ccl_dtype_t dtype, int root, void *stream)
{
	return stream_op(comm, R2_OP_BROADCAST, sendbuff, recvbuff, count, dtype, R2CCL_SUM, root,
			 stream);
}

int r2ccl_reduce_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff, size_t count,
			r2ccl_dtype_t dtype, r2ccl_redop_t op, int root, void *stream)
{
	return stream_op(comm, R2_OP_REDUCE, sendbuff, recvbuff, count, dtype, op, root, stream);
}

int r2ccl_send_stream(r2ccl_comm_t *comm, const void *sendbuff, size_t count,
		      r2ccl_dtype_t dtype, int peer, void *stream)
{
	return stream_op(comm, R2_OP_SEND, sendbuff, NULL, count, dtype, R2CCL_SUM, peer, stream);
}

int r2ccl_recv_stream(r2ccl_comm_t *comm, void *recvbuff, size_t count, r2ccl_dtype_t dtype,
		      int peer, void *stream)
{
	return stream_op(comm, R2_OP_RECV, NULL, recvbuff, count, dtype, R2CCL_SUM, peer, stream);
}
