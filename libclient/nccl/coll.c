/* SPDX-License-Identifier: MIT */
/*
 * libnccl: the operations. Each call is checked, then queued in the open
 * group or run at once: on the host path (blocking, staged) or the GPU path
 * (queued on the stream) that its buffers take (mem.c). ncclAlltoAll,
 * ncclGather and ncclScatter are groups of sends and receives.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_int.h"
#include "reduce.h"

static bool is_p2p(const struct nccl_op *o)
{
	return o->kind == NCCL_OP_SEND || o->kind == NCCL_OP_RECV;
}

/* Which path the op's buffers take; a send or receive to oneself has none
 * (the group runner copies it). */
static ncclResult_t classify(struct nccl_op *o, enum nccl_memkind *kind)
{
	struct ncclComm *comm = o->comm;
	size_t n = o->count * nccl_dtype_size(o->dtype), all = n * (size_t)comm->nranks;
	enum nccl_memkind ks = NCCL_MEM_HOST, kr = NCCL_MEM_HOST;
	bool hs = false, hr = false, root = comm->rank == o->root;
	size_t sb = 0, rb = 0;
	ncclResult_t res;

	switch (o->kind) {
	case NCCL_OP_ALLREDUCE: sb = rb = n; break;
	case NCCL_OP_ALLGATHER: sb = n, rb = all; break;
	case NCCL_OP_REDUCESCATTER: sb = all, rb = n; break;
	case NCCL_OP_BROADCAST: sb = root ? n : 0, rb = n; break;
	case NCCL_OP_REDUCE: sb = n, rb = root ? n : 0; break;
	case NCCL_OP_SEND: sb = n; break;
	case NCCL_OP_RECV: rb = n; break;
	}
	if (sb) {
		res = nccl_mem_classify(comm, o->sendbuff, sb, &ks);
		if (res != ncclSuccess)
			return res;
		hs = true;
	}
	if (rb) {
		res = nccl_mem_classify(comm, o->recvbuff, rb, &kr);
		if (res != ncclSuccess)
			return res;
		hr = true;
	}
	if (hs && hr && ks != kr)
		return nccl_fail(comm, ncclInvalidArgument,
				 "one buffer is GPU memory and the other host memory");
	*kind = hs ? ks : kr;
	return ncclSuccess;
}

static ncclResult_t run_one(struct nccl_op *o)
{
	enum nccl_memkind kind = NCCL_MEM_HOST;
	ncclResult_t res;

	if (!o->count)
		return ncclSuccess; /* nothing to move, as NCCL */
	res = classify(o, &kind);
	if (res != ncclSuccess)
		return res;
	return kind == NCCL_MEM_GPU ? nccl_run_gpu(o) : nccl_run_host(o);
}

/* A send to oneself and a receive from oneself of one group are a copy. */
static ncclResult_t self_copy(struct nccl_op *recv, const struct nccl_op *send)
{
	size_t n = recv->count * nccl_dtype_size(recv->dtype);
	enum nccl_memkind ks, kr;
	ncclResult_t res;

	if (send->count != recv->count || send->dtype != recv->dtype)
		return nccl_fail(recv->comm, ncclInvalidUsage,
				 "rank %d sends %zu elements of type %d to itself and receives %zu "
				 "of type %d",
				 recv->comm->rank, send->count, (int)send->dtype, recv->count,
				 (int)recv->dtype);
	if (!n)
		return ncclSuccess;
	res = nccl_mem_classify(recv->comm, send->sendbuff, n, &ks);
	if (res == ncclSuccess)
		res = nccl_mem_classify(recv->comm, recv->recvbuff, n, &kr);
	if (res != ncclSuccess)
		return res;
	if (ks == NCCL_MEM_HOST && kr == NCCL_MEM_HOST) {
		if (nccl_cuda_current_device() >= 0 && nccl_cuda_stream_sync(recv->stream) < 0)
			return nccl_fail(recv->comm, ncclUnhandledCudaError, "the stream failed");
		memmove(recv->recvbuff, send->sendbuff, n);
		return ncclSuccess;
	}
	if (nccl_cuda_stream_capturing(recv->stream) != 0)
		return nccl_fail(recv->comm, ncclInvalidUsage,
				 "a send/receive on a stream being captured into a CUDA graph "
				 "(not supported by R2CCL; docs/nccl.md)");
	if (nccl_cuda_memcpy_async(recv->recvbuff, send->sendbuff, n, recv->stream) < 0)
		return nccl_fail(recv->comm, ncclUnhandledCudaError, "copy to self failed");
	return ncclSuccess;
}

/* One communicator's share of a group, in the agreed order. */
static ncclResult_t run_comm_ops(struct nccl_op *ops, size_t n)
{
	struct ncclComm *comm = ops[0].comm;
	ncclResult_t res = nccl_comm_ready(comm, "ncclGroupEnd");
	bool small[NCCL_GROUP_SMALL] = { false }, *used = small;
	struct nccl_ctx_save sv;

	if (res != ncclSuccess)
		return res;
	if (n > NCCL_GROUP_SMALL && !(used = calloc(n, sizeof(*used))))
		return nccl_fail(comm, ncclSystemError, "out of memory");
	pthread_mutex_lock(&comm->lock);
	nccl_cuda_ctx_enter(comm->cuctx, &sv); /* its device's, whatever the caller's */
	for (size_t i = 0; i < n && res == ncclSuccess; i++) {
		struct nccl_op *o = &ops[i];
		if (used[i])
			continue;
		if (is_p2p(o) && o->root == comm->rank) {
			/* pair it with the first unused opposite self transfer */
			size_t j;
			for (j = i + 1; j < n; j++)
				if (!used[j] && is_p2p(&ops[j]) && ops[j].root == comm->rank &&
				    ops[j].kind != o->kind)
					break;
			if (j == n) {
				res = nccl_fail(comm, ncclInvalidUsage,
						"rank %d: a %s itself has no matching %s in the group",
						comm->rank, o->kind == NCCL_OP_SEND ? "send to"
										    : "receive from",
						o->kind == NCCL_OP_SEND ? "receive" : "send");
				break;
			}
			used[j] = true;
			res = o->kind == NCCL_OP_RECV ? self_copy(o, &ops[j]) : self_copy(&ops[j], o);
			continue;
		}
		res = run_one(o);
	}
	nccl_cuda_ctx_leave(&sv);
	pthread_mutex_unlock(&comm->lock);
	if (used != small)
		free(used);
	return res;
}

struct comm_job {
	struct nccl_op *ops;
	size_t n;
	void *ctx; /* the communicator's CUDA context, else the caller's */
	ncclResult_t res;
	char err[256]; /* the thread's last error when res failed */
};

static void *comm_job_thread(void *arg)
{
	struct comm_job *j = arg;
	nccl_cuda_ctx_set(j->ctx);
	j->res = run_comm_ops(j->ops, j->n);
	if (j->res != ncclSuccess)
		snprintf(j->err, sizeof(j->err), "%s", ncclGetLastError(NULL));
	return NULL;
}

/* ncclGroupEnd's runner: ops ordered, each communicator's together. One
 * communicator runs here; several (one thread driving several ranks) run
 * on a thread each, since a host-path operation waits for its peers. */
static ncclResult_t group_run(struct nccl_op *ops, size_t n)
{
	struct comm_job *jobs;
	pthread_t *t;
	bool *started;
	size_t nj = 0;
	ncclResult_t res = ncclSuccess;

	nccl_group_order(ops, n, nccl_comm_rank_of);
	for (size_t i = 0; i < n; i++)
		if (i == 0 || ops[i].comm != ops[i - 1].comm)
			nj++;
	if (nj == 1)
		return run_comm_ops(ops, n);
	jobs = calloc(nj, sizeof(*jobs));
	t = calloc(nj, sizeof(*t));
	if (!jobs || !t) {
		free(jobs);
		free(t);
		return nccl_fail(NULL, ncclSystemError, "out of memory");
	}
	nj = 0;
	for (size_t i = 0; i < n; i++) {
		if (i == 0 || ops[i].comm != ops[i - 1].comm) {
			/* the caller's current context is the device it set last
			 * (one thread driving several GPUs): the communicator's */
			jobs[nj].ctx = ops[i].comm->cuctx ? ops[i].comm->cuctx
							  : nccl_cuda_ctx_get();
			jobs[nj++].ops = &ops[i];
		}
		jobs[nj - 1].n++;
	}
	started = calloc(nj, sizeof(*started));
	for (size_t k = 0; k < nj; k++) {
		started[k] = started && pthread_create(&t[k], NULL, comm_job_thread, &jobs[k]) == 0;
		if (!started || !started[k])
			jobs[k].res = nccl_fail(jobs[k].ops->comm, ncclSystemError,
						"cannot start a thread");
	}
	for (size_t k = 0; k < nj; k++) {
		if (started && started[k])
			pthread_join(t[k], NULL);
		if (res == ncclSuccess && jobs[k].res != ncclSuccess) {
			/* the text was the job thread's: make it the caller's */
			res = jobs[k].res;
			if (started && started[k])
				nccl_set_thread_error(jobs[k].err);
		}
	}
	free(started);
	free(jobs);
	free(t);
	return res;
}

__attribute__((constructor)) static void coll_init(void)
{
	nccl_group_set_runner(group_run);
}

/* An operation's arguments and communicator, before it is queued or run. */
static ncclResult_t check_op(struct nccl_op *o, const char *who)
{
	struct ncclComm *comm = o->comm;
	size_t es = nccl_dtype_size(o->dtype), bytes;
	ncclResult_t res;

	res = nccl_comm_ready(comm, who);
	if (res != ncclSuccess)
		return res;
	if (!es)
		return nccl_fail(comm, ncclInvalidArgument, "%s: data type %d is not valid", who,
				 (int)o->dtype);
	if (__builtin_mul_overflow(o->count, es, &bytes) ||
	    __builtin_mul_overflow(bytes, (size_t)comm->nranks, &bytes))
		return nccl_fail(comm, ncclInvalidArgument, "%s: count %zu overflows", who,
				 o->count);
	if ((o->kind == NCCL_OP_BROADCAST || o->kind == NCCL_OP_REDUCE || is_p2p(o)) &&
	    (o->root < 0 || o->root >= comm->nranks))
		return nccl_fail(comm, ncclInvalidArgument, "%s: %s %d of %d ranks", who,
				 is_p2p(o) ? "peer" : "root", o->root, comm->nranks);
	return ncclSuccess;
}

/* Checks an operation, then queues it in the group or runs it; a failed
 * check in a group fails the group too (nccl_group_error). */
static ncclResult_t submit(struct nccl_op *o, const char *who)
{
	struct ncclComm *comm = o->comm;
	ncclResult_t res;
	bool queued;

	res = check_op(o, who);
	if (res != ncclSuccess)
		return nccl_group_error(res);
	/* NCCL lets the caller destroy a PreMulSum operator once the call that
	 * uses it returns (PyTorch does, inside a group): the op keeps a copy */
	if ((int)o->op >= ncclNumOps && (int)o->op < ncclNumOps + NCCL_MAX_PREMUL) {
		pthread_mutex_lock(&comm->lock);
		o->pm = comm->premul[o->op - ncclNumOps];
		pthread_mutex_unlock(&comm->lock);
	}
	res = nccl_group_add(o, &queued);
	if (res != ncclSuccess || queued)
		return res;
	if (is_p2p(o) && o->root == comm->rank)
		return nccl_fail(comm, ncclInvalidUsage,
				 "%s to itself outside a group: pair it with the %s in one group",
				 who, o->kind == NCCL_OP_SEND ? "ncclRecv" : "ncclSend");
	pthread_mutex_lock(&comm->lock);
	{
		struct nccl_ctx_save sv;
		nccl_cuda_ctx_enter(comm->cuctx, &sv);
		res = run_one(o);
		nccl_cuda_ctx_leave(&sv);
	}
	pthread_mutex_unlock(&comm->lock);
	return res;
}

#define OP(k, c, s, r, n, t, rop, rt, st) \
	(struct nccl_op){ .kind = (k), .comm = (c), .sendbuff = (s), .recvbuff = (r), .count = (n), \
			  .dtype = (t), .op = (rop), .root = (rt), .stream = (st) }

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
			   ncclComm_t comm, cudaStream_t st)
{
	struct nccl_op o = OP(NCCL_OP_ALLREDUCE, comm, s, r, n, t, op, 0, st);
	return submit(&o, "ncclAllReduce");
}
NCCL_ALIAS(ncclAllReduce);

ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t comm,
			   cudaStream_t st)
{
	struct nccl_op o = OP(NCCL_OP_ALLGATHER, comm, s, r, n, t, ncclSum, 0, st);
	return submit(&o, "ncclAllGather");
}
NCCL_ALIAS(ncclAllGather);

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
			       ncclComm_t comm, cudaStream_t st)
{
	struct nccl_op o = OP(NCCL_OP_REDUCESCATTER, comm, s, r, n, t, op, 0, st);
	return submit(&o, "ncclReduceScatter");
}
NCCL_ALIAS(ncclReduceScatter);

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root,
			   ncclComm_t comm, cudaStream_t st)
{
	struct nccl_op o = OP(NCCL_OP_BROADCAST, comm, s, r, n, t, ncclSum, root, st);
	return submit(&o, "ncclBroadcast");
}
NCCL_ALIAS(ncclBroadcast);

ncclResult_t ncclBcast(void *buf, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
		       cudaStream_t st)
{
	return ncclBroadcast(buf, buf, n, t, root, comm, st);
}
NCCL_ALIAS(ncclBcast);

ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
			int root, ncclComm_t comm, cudaStream_t st)
{
	struct nccl_op o = OP(NCCL_OP_REDUCE, comm, s, r, n, t, op, root, st);
	return submit(&o, "ncclReduce");
}
NCCL_ALIAS(ncclReduce);

ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
		      cudaStream_t st)
{
	struct nccl_op o = OP(NCCL_OP_SEND, comm, s, NULL, n, t, ncclSum, peer, st);
	return submit(&o, "ncclSend");
}
NCCL_ALIAS(ncclSend);

ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
		      cudaStream_t st)
{
	struct nccl_op o = OP(NCCL_OP_RECV, comm, NULL, r, n, t, ncclSum, peer, st);
	return submit(&o, "ncclRecv");
}
NCCL_ALIAS(ncclRecv);

enum p2p_pattern { P2P_ALLTOALL, P2P_GATHER, P2P_SCATTER };

/* A group of its own around the sends and receives. */
static ncclResult_t p2p_group(ncclComm_t comm, const char *who, enum p2p_pattern pat,
			      const void *s, void *r, size_t n, ncclDataType_t t, int root,
			      cudaStream_t st)
{
	ncclResult_t res = nccl_comm_ready(comm, who), e;
	size_t es = nccl_dtype_size(t), bytes;

	if (res != ncclSuccess)
		return res;
	if (!es || __builtin_mul_overflow(n, es, &bytes) ||
	    __builtin_mul_overflow(bytes, (size_t)comm->nranks, &bytes))
		return nccl_fail(comm, ncclInvalidArgument, "%s: bad type or count", who);
	if (root >= comm->nranks)
		return nccl_fail(comm, ncclInvalidArgument, "%s: root %d", who, root);
	bytes = n * es;
	ncclGroupStart();
	for (int p = 0; p < comm->nranks && res == ncclSuccess; p++) {
		if (pat == P2P_ALLTOALL) {
			res = ncclSend((const char *)s + (size_t)p * bytes, n, t, p, comm, st);
			if (res == ncclSuccess)
				res = ncclRecv((char *)r + (size_t)p * bytes, n, t, p, comm, st);
		} else if (pat == P2P_GATHER) { /* everyone to root */
			if (p == 0)
				res = ncclSend(s, n, t, root, comm, st);
			if (res == ncclSuccess && comm->rank == root)
				res = ncclRecv((char *)r + (size_t)p * bytes, n, t, p, comm, st);
		} else { /* scatter: root to everyone */
			if (comm->rank == root)
				res = ncclSend((const char *)s + (size_t)p * bytes, n, t, p, comm, st);
			if (res == ncclSuccess && p == 0)
				res = ncclRecv(r, n, t, root, comm, st);
		}
	}
	e = ncclGroupEnd();
	return res != ncclSuccess ? res : e;
}

ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t comm,
			  cudaStream_t st)
{
	return p2p_group(comm, "ncclAlltoAll", P2P_ALLTOALL, s, r, n, t, 0, st);
}
NCCL_ALIAS(ncclAlltoAll);

ncclResult_t ncclGather(const void *s, void *r, size_t n, ncclDataType_t t, int root,
			ncclComm_t comm, cudaStream_t st)
{
	if (root < 0)
		return nccl_fail(comm, ncclInvalidArgument, "ncclGather: root %d", root);
	return p2p_group(comm, "ncclGather", P2P_GATHER, s, r, n, t, root, st);
}
NCCL_ALIAS(ncclGather);

ncclResult_t ncclScatter(const void *s, void *r, size_t n, ncclDataType_t t, int root,
			 ncclComm_t comm, cudaStream_t st)
{
	if (root < 0)
		return nccl_fail(comm, ncclInvalidArgument, "ncclScatter: root %d", root);
	return p2p_group(comm, "ncclScatter", P2P_SCATTER, s, r, n, t, root, st);
}
NCCL_ALIAS(ncclScatter);

/* ---- PreMulSum ---- */

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t t,
				      ncclScalarResidence_t residence, ncclComm_t comm)
{
	struct nccl_premul *pm = NULL;
	int i;

	if (!comm || !op || !scalar || !nccl_dtype_size(t) || nccl_dtype_r2(t) < 0 ||
	    (residence != ncclScalarDevice && residence != ncclScalarHostImmediate))
		return nccl_fail(comm, ncclInvalidArgument,
				 "ncclRedOpCreatePreMulSum: bad argument (type %d, residence %d)",
				 (int)t, (int)residence);
	pthread_mutex_lock(&comm->lock);
	for (i = 0; i < NCCL_MAX_PREMUL; i++)
		if (!comm->premul[i].used) {
			pm = &comm->premul[i];
			break;
		}
	if (pm) {
		memset(pm, 0, sizeof(*pm));
		pm->used = true;
		pm->dtype = t;
		pm->residence = residence;
		if (residence == ncclScalarDevice) {
			pm->scalar_dev = scalar;
		} else {
			switch (t) {
			case ncclFloat16: pm->scalar = r2_half_to_float(*(uint16_t *)scalar); break;
			case ncclBfloat16: pm->scalar = r2_bf16_to_float(*(uint16_t *)scalar); break;
			case ncclFloat32: pm->scalar = *(float *)scalar; break;
			case ncclFloat64: pm->scalar = *(double *)scalar; break;
			case ncclInt8: pm->iscalar = *(int8_t *)scalar; break;
			case ncclUint8: pm->iscalar = *(uint8_t *)scalar; break;
			case ncclInt32: pm->iscalar = *(int32_t *)scalar; break;
			case ncclUint32: pm->iscalar = *(uint32_t *)scalar; break;
			default: pm->iscalar = *(int64_t *)scalar; break;
			}
		}
		*op = (ncclRedOp_t)(ncclNumOps + i);
	}
	pthread_mutex_unlock(&comm->lock);
	return pm ? ncclSuccess
		  : nccl_fail(comm, ncclInvalidUsage,
			      "ncclRedOpCreatePreMulSum: %d operators exist already (destroy some)",
			      NCCL_MAX_PREMUL);
}
NCCL_ALIAS(ncclRedOpCreatePreMulSum);

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
	int i = (int)op - ncclNumOps;
	ncclResult_t res = ncclSuccess;

	if (!comm)
		return nccl_fail(NULL, ncclInvalidArgument, "ncclRedOpDestroy: comm is NULL");
	pthread_mutex_lock(&comm->lock);
	if (i < 0 || i >= NCCL_MAX_PREMUL || !comm->premul[i].used)
		res = nccl_fail(comm, ncclInvalidArgument,
				"ncclRedOpDestroy: op %d was not created on this communicator",
				(int)op);
	else
		comm->premul[i].used = false;
	pthread_mutex_unlock(&comm->lock);
	return res;
}
NCCL_ALIAS(ncclRedOpDestroy);
