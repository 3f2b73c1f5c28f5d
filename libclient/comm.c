/* SPDX-License-Identifier: MIT */
/* libr2ccl: communicators and collectives (submitted through the ring). */
#include <errno.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "r2ccl.pb-c.h"
#include "ring.h"

static void *unpack_uid(void *a, size_t l, const uint8_t *d)
{
	return r2ccl__unique_id_reply__unpack(a, l, d);
}

static void *unpack_init(void *a, size_t l, const uint8_t *d)
{
	return r2ccl__comm_init_reply__unpack(a, l, d);
}

static void *unpack_result(void *a, size_t l, const uint8_t *d)
{
	return r2ccl__result__unpack(a, l, d);
}

int r2ccl_get_unique_id(r2ccl_client_t *c, r2ccl_unique_id_t *id)
{
	R2ccl__GetUniqueId req = R2CCL__GET_UNIQUE_ID__INIT;
	R2ccl__UniqueIdReply *rep = NULL;
	int r;

	if ((r = r2c_client_use(c)) < 0)
		return r;
	if (!id)
		return -EINVAL;
	req.req_id = c->next_req++;
	r = r2c_rpc(c, R2CCL__MSG_TYPE__MSG_GET_UNIQUE_ID, &req,
		    R2CCL__MSG_TYPE__MSG_UNIQUE_ID_REPLY, (void **)&rep, unpack_uid, NULL, 0, NULL,
		    0);
	if (r < 0)
		return r;
	r = rep->status;
	if (r == 0 && rep->id.len != sizeof(id->internal))
		r = R2CCL_E_PROTOCOL;
	if (r == 0)
		memcpy(id->internal, rep->id.data, sizeof(id->internal));
	r2ccl__unique_id_reply__free_unpacked(rep, NULL);
	return r;
}

/* The mode CommInit carries: "" leaves it to the daemon. */
static int mode_name(const r2ccl_comm_config_t *cfg, const char **name)
{
	r2ccl_mode_t m = R2CCL_MODE_DEFAULT;
	const char *env;

	if (cfg && cfg->size >= offsetof(r2ccl_comm_config_t, mode) + sizeof(cfg->mode))
		m = cfg->mode;
	if (m == R2CCL_MODE_DEFAULT && (env = getenv("R2CCL_MODE")) && env[0])
		m = !strcmp(env, "balance")	  ? R2CCL_MODE_BALANCE
		    : !strcmp(env, "hotrepair") ? R2CCL_MODE_HOTREPAIR
						: (r2ccl_mode_t)-1;
	switch (m) {
	case R2CCL_MODE_DEFAULT:
		*name = "";
		return 0;
	case R2CCL_MODE_BALANCE:
		*name = "balance";
		return 0;
	case R2CCL_MODE_HOTREPAIR:
		*name = "hotrepair";
		return 0;
	}
	return -EINVAL;
}

int r2ccl_comm_init_rank(r2ccl_client_t *c, r2ccl_comm_t **out, int nranks,
			 const r2ccl_unique_id_t *id, int rank)
{
	return r2ccl_comm_init_rank_config(c, out, nranks, id, rank, NULL);
}

int r2ccl_comm_init_rank_config(r2ccl_client_t *c, r2ccl_comm_t **out, int nranks,
				const r2ccl_unique_id_t *id, int rank,
				const r2ccl_comm_config_t *cfg)
{
	R2ccl__CommInit req = R2CCL__COMM_INIT__INIT;
	R2ccl__CommInitReply *rep = NULL;
	r2ccl_comm_t *comm;
	const char *mode;
	int r, saved;

	if ((r = r2c_client_use(c)) < 0)
		return r;
	if (!out || !id || nranks < 1 || rank < 0 || rank >= nranks)
		return r2c_fail(-EINVAL, "bad arguments: nranks %d, rank %d", nranks, rank);
	if (mode_name(cfg, &mode) < 0)
		return r2c_fail(-EINVAL, "unknown mode (R2CCL_MODE is balance or hotrepair)");
	*out = NULL;
	req.req_id = c->next_req++;
	req.id.data = (uint8_t *)id->internal;
	req.id.len = sizeof(id->internal);
	req.nranks = (uint32_t)nranks;
	req.rank = (uint32_t)rank;
	req.mode = (char *)mode;
	if (cfg && cfg->size >= offsetof(r2ccl_comm_config_t, share) + sizeof(cfg->share))
		req.share = (uint32_t)cfg->share;
	/* joining waits for the other ranks: up to the daemon's bootstrap timeout */
	saved = c->timeout_ms;
	if (c->timeout_ms < 600000)
		c->timeout_ms = 600000;
	r = r2c_rpc(c, R2CCL__MSG_TYPE__MSG_COMM_INIT, &req, R2CCL__MSG_TYPE__MSG_COMM_INIT_REPLY,
		    (void **)&rep, unpack_init, NULL, 0, NULL, 0);
	c->timeout_ms = saved;
	if (r < 0)
		return r;
	r = rep->status;
	if (r < 0 && rep->error && rep->error[0])
		r2c_fail(r, "%s", rep->error); /* the daemon's reason */
	if (r == 0) {
		comm = calloc(1, sizeof(*comm));
		if (!comm) {
			r = -ENOMEM;
		} else {
			comm->magic = R2C_COMM_LIVE;
			comm->next = c->comms;
			c->comms = comm;
			comm->client = c;
			comm->handle = rep->comm_id;
			comm->nranks = nranks;
			comm->rank = rank;
			comm->nhosts = rep->nhosts;
			*out = comm;
		}
	}
	r2ccl__comm_init_reply__free_unpacked(rep, NULL);
	return r;
}

static int comm_leave(r2ccl_comm_t *comm, bool abort)
{
	R2ccl__CommDestroy req = R2CCL__COMM_DESTROY__INIT;
	R2ccl__Result *rep = NULL;
	r2ccl_client_t *c;
	char why[256] = "";
	int r;

	if (!comm)
		return 0;
	r = r2c_comm_use(comm);
	if (r == R2CCL_E_FORKED) {
		/* a child's copy: release it here, the parent's stays a member */
		r2c_comm_bury(comm, "destroyed");
		return 0;
	}
	if (r < 0)
		return r;
	c = comm->client;
	req.req_id = c->next_req++;
	req.comm_id = comm->handle;
	req.abort = abort;
	r = r2c_rpc(c, R2CCL__MSG_TYPE__MSG_COMM_DESTROY, &req, R2CCL__MSG_TYPE__MSG_RESULT,
		    (void **)&rep, unpack_result, NULL, 0, NULL, 0);
	if (r == 0) {
		r = rep->status;
		r2ccl__result__free_unpacked(rep, NULL);
	}
	if (r == R2CCL_E_DAEMON_GONE)
		r = 0;
	if (r < 0) /* the GPU state's release clears the thread's error */
		snprintf(why, sizeof(why), "%s", r2ccl_last_error());
	r2c_gpu_comm_forget(comm);
	r2c_comm_bury(comm, abort ? "aborted (r2ccl_comm_abort)" : "destroyed (r2ccl_comm_destroy)");
	return r < 0 && why[0] ? r2c_fail(r, "%s", why) : r;
}

int r2ccl_comm_destroy(r2ccl_comm_t *comm)
{
	return comm_leave(comm, false);
}

int r2ccl_comm_abort(r2ccl_comm_t *comm)
{
	return comm_leave(comm, true);
}

int r2ccl_comm_count(const r2ccl_comm_t *comm, int *count)
{
	R2C_COMM_USE(comm);
	if (!count)
		return -EINVAL;
	*count = comm->nranks;
	return 0;
}

int r2ccl_comm_user_rank(const r2ccl_comm_t *comm, int *rank)
{
	R2C_COMM_USE(comm);
	if (!rank)
		return -EINVAL;
	*rank = comm->rank;
	return 0;
}

int r2ccl_comm_trigger_rebalance(r2ccl_comm_t *comm)
{
	R2ccl__Rebalance req = R2CCL__REBALANCE__INIT;
	R2ccl__Result *rep = NULL;
	int r;

	R2C_COMM_USE(comm);
	req.req_id = comm->client->next_req++;
	req.comm_id = comm->handle >> 16;
	r = r2c_rpc(comm->client, R2CCL__MSG_TYPE__MSG_REBALANCE, &req,
		    R2CCL__MSG_TYPE__MSG_RESULT, (void **)&rep, unpack_result, NULL, 0, NULL, 0);
	if (r == 0) {
		r = rep->status;
		r2ccl__result__free_unpacked(rep, NULL);
	}
	return r;
}

int r2ccl_set_bandwidth_limit(r2ccl_comm_t *group, int64_t bits_per_s)
{
	R2ccl__TenantSet req = R2CCL__TENANT_SET__INIT;
	R2ccl__Result *rep = NULL;
	int r;

	R2C_COMM_USE(group);
	if (bits_per_s == INT64_MIN)
		return -EINVAL;
	req.req_id = group->client->next_req++;
	req.own_limit = true;
	/* UINT64_MAX: the other one as it is */
	req.limit_bps = bits_per_s >= 0 ? (uint64_t)bits_per_s : UINT64_MAX;
	req.reserve_bps = bits_per_s < 0 ? (uint64_t)-bits_per_s : bits_per_s ? UINT64_MAX : 0;
	r = r2c_rpc(group->client, R2CCL__MSG_TYPE__MSG_TENANT_SET, &req,
		    R2CCL__MSG_TYPE__MSG_RESULT, (void **)&rep, unpack_result, NULL, 0, NULL, 0);
	if (r == 0) {
		r = rep->status;
		if (r < 0 && rep->error && rep->error[0])
			r2c_fail(r, "%s", rep->error);
		r2ccl__result__free_unpacked(rep, NULL);
	}
	return r;
}

/* ---- collectives ---- */

static int submit(r2ccl_comm_t *comm, uint32_t opcode, const void *sendbuff, uint64_t slen,
		  void *recvbuff, uint64_t rlen, size_t count, r2ccl_dtype_t dtype,
		  r2ccl_redop_t op, int root)
{
	struct r2_sqe q;
	int r;

	R2C_COMM_USE(comm);
	if ((unsigned)dtype >= R2CCL_NUM_DTYPES || (unsigned)op >= R2CCL_NUM_OPS)
		return -EINVAL;
	memset(&q, 0, sizeof(q));
	q.opcode = opcode;
	q.comm_id = comm->handle;
	q.rank = (uint32_t)comm->rank;
	q.count = count;
	q.dtype = (uint32_t)dtype;
	q.redop = (uint32_t)op;
	q.root = root;
	if (slen) {
		r = r2c_mem_lookup(comm->client, sendbuff, slen, &q.send_mem, &q.send_off);
		if (r < 0)
			return r;
	}
	if (rlen) {
		r = r2c_mem_lookup(comm->client, recvbuff, rlen, &q.recv_mem, &q.recv_off);
		if (r < 0)
			return r;
	}
	r = r2c_submit_wait(comm->client, &q);
	return r < 0 ? r2c_comm_failed(comm, r) : r;
}

/* count elements of dtype, times mult, in bytes: -EINVAL for an unknown
 * dtype, -EOVERFLOW past 64 bits. */
static int r2c_bytes(size_t count, r2ccl_dtype_t dtype, uint64_t mult, uint64_t *out)
{
	uint64_t es = r2ccl_dtype_size(dtype);

	if (!es)
		return -EINVAL;
	if (count && (uint64_t)count > UINT64_MAX / es / mult)
		return -EOVERFLOW;
	*out = (uint64_t)count * es * mult;
	return 0;
}

int r2c_op_lengths(r2ccl_comm_t *comm, uint32_t opcode, size_t count, r2ccl_dtype_t dtype,
		   int root, uint64_t *slen, uint64_t *rlen)
{
	uint64_t n, t = 0;
	int r;

	if (opcode != R2_OP_ALLREDUCE) /* the others read comm's ranks */
		R2C_COMM_USE(comm);
	if ((opcode == R2_OP_BROADCAST || opcode == R2_OP_REDUCE) &&
	    (root < 0 || root >= comm->nranks))
		return -EINVAL;
	if ((opcode == R2_OP_SEND || opcode == R2_OP_RECV) &&
	    (root < 0 || root >= comm->nranks || root == comm->rank))
		return -EINVAL;
	r = r2c_bytes(count, dtype, 1, &n);
	if (!r && (opcode == R2_OP_ALLGATHER || opcode == R2_OP_REDUCESCATTER))
		r = r2c_bytes(count, dtype, (uint64_t)comm->nranks, &t);
	if (r)
		return r;
	switch (opcode) {
	case R2_OP_ALLGATHER: /* count is what each rank sends */
		*slen = n, *rlen = t;
		break;
	case R2_OP_REDUCESCATTER: /* count is what each rank receives */
		*slen = t, *rlen = n;
		break;
	case R2_OP_BROADCAST:
		*slen = comm->rank == root ? n : 0, *rlen = n;
		break;
	case R2_OP_REDUCE:
		*slen = n, *rlen = comm->rank == root ? n : 0;
		break;
	case R2_OP_SEND:
		*slen = n, *rlen = 0;
		break;
	case R2_OP_RECV:
		*slen = 0, *rlen = n;
		break;
	default:
		*slen = *rlen = n;
	}
	return 0;
}

/* A blocking collective: its lengths checked (r2c_op_lengths), then submitted. */
static int blocking(r2ccl_comm_t *comm, uint32_t opcode, const void *sendbuff, void *recvbuff,
		    size_t count, r2ccl_dtype_t dtype, r2ccl_redop_t op, int root)
{
	uint64_t slen, rlen;
	int r = r2c_op_lengths(comm, opcode, count, dtype, root, &slen, &rlen);

	return r ? r : submit(comm, opcode, sendbuff, slen, recvbuff, rlen, count, dtype, op, root);
}

int r2ccl_allreduce(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff, size_t count,
		    r2ccl_dtype_t dtype, r2ccl_redop_t op)
{
	return blocking(comm, R2_OP_ALLREDUCE, sendbuff, recvbuff, count, dtype, op, 0);
}

int r2ccl_allgather(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff, size_t sendcount,
		    r2ccl_dtype_t dtype)
{
	return blocking(comm, R2_OP_ALLGATHER, sendbuff, recvbuff, sendcount, dtype, R2CCL_SUM, 0);
}

int r2ccl_reducescatter(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			size_t recvcount, r2ccl_dtype_t dtype, r2ccl_redop_t op)
{
	return blocking(comm, R2_OP_REDUCESCATTER, sendbuff, recvbuff, recvcount, dtype, op, 0);
}

int r2ccl_broadcast(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff, size_t count,
		    r2ccl_dtype_t dtype, int root)
{
	return blocking(comm, R2_OP_BROADCAST, sendbuff, recvbuff, count, dtype, R2CCL_SUM, root);
}

int r2ccl_reduce(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff, size_t count,
		 r2ccl_dtype_t dtype, r2ccl_redop_t op, int root)
{
	return blocking(comm, R2_OP_REDUCE, sendbuff, recvbuff, count, dtype, op, root);
}

int r2ccl_send(r2ccl_comm_t *comm, const void *sendbuff, size_t count, r2ccl_dtype_t dtype,
	       int peer)
{
	return blocking(comm, R2_OP_SEND, sendbuff, NULL, count, dtype, R2CCL_SUM, peer);
}

int r2ccl_recv(r2ccl_comm_t *comm, void *recvbuff, size_t count, r2ccl_dtype_t dtype, int peer)
{
	return blocking(comm, R2_OP_RECV, NULL, recvbuff, count, dtype, R2CCL_SUM, peer);
}
