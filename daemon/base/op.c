/* SPDX-License-Identifier: MIT */
/* Pure facts about an operation: its buffers' extents, its name. */
#include <stdint.h>

#include "base/op_record.h"
#include "r2ccl.h"

bool r2d_op_extents(const struct r2_sqe *q, int nranks, int rank, uint64_t *send_len,
		    uint64_t *recv_len)
{
	uint64_t es = r2ccl_dtype_size((r2ccl_dtype_t)q->dtype);
	uint64_t n = q->count;

	if (n > UINT64_MAX / es / (uint64_t)nranks)
		return false;
	*send_len = *recv_len = n * es;
	switch (q->opcode) {
	case R2_OP_ALLGATHER:
		*recv_len = n * es * (uint64_t)nranks;
		break;
	case R2_OP_REDUCESCATTER:
		*send_len = n * es * (uint64_t)nranks;
		break;
	case R2_OP_BROADCAST:
		if ((int)q->root != rank)
			*send_len = 0;
		break;
	case R2_OP_REDUCE:
		if ((int)q->root != rank)
			*recv_len = 0;
		break;
	case R2_OP_SEND:
		*recv_len = 0;
		break;
	case R2_OP_RECV:
		*send_len = 0;
		break;
	}
	return true;
}

const char *r2_opcode_name(uint32_t opcode)
{
	static const char *const names[R2_OP_MAX] = {
		[R2_OP_NOP] = "nop",
		[R2_OP_ALLREDUCE] = "allreduce",
		[R2_OP_ALLGATHER] = "allgather",
		[R2_OP_REDUCESCATTER] = "reducescatter",
		[R2_OP_BROADCAST] = "broadcast",
		[R2_OP_REDUCE] = "reduce",
		[R2_OP_SEND] = "send",
		[R2_OP_RECV] = "recv",
	};
	return opcode < R2_OP_MAX && names[opcode] ? names[opcode] : "unknown";
}
