/* SPDX-License-Identifier: MIT */
/*
 * libnccl: group calls. ncclGroupStart/End nest; between the outermost pair
 * operations are only recorded (per thread, as NCCL's groups are), and
 * ncclGroupEnd hands them all at once to the runner (coll.c), which puts
 * them in the order every rank agrees on (nccl_group_order, here).
 * Communicator creation inside a group runs on its own thread, which
 * ncclGroupEnd joins.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_int.h"

/* ---- the agreed order (pure) ---- */

struct okey {
	size_t comm_idx; /* order of the communicator's first call in the group */
	int cls;         /* 0 collective, 1 point-to-point */
	int src, dst;
	unsigned seq;
};

static int okey_cmp(const struct okey *a, const struct okey *b)
{
#define CMP(f)                     \
	if (a->f != b->f)          \
		return a->f < b->f ? -1 : 1
	CMP(comm_idx);
	CMP(cls);
	CMP(src);
	CMP(dst);
	CMP(seq);
#undef CMP
	return 0;
}

void nccl_group_order(struct nccl_op *ops, size_t n, int (*rank_of)(const struct ncclComm *))
{
	/* a group of up to NCCL_GROUP_SMALL operations (PyTorch's p2p pairs and
	 * coalesced collectives) is ordered on the stack: no malloc per group */
	struct okey ks[NCCL_GROUP_SMALL], *k = ks;
	struct nccl_op ts[NCCL_GROUP_SMALL], *tmp = ts;
	size_t is[NCCL_GROUP_SMALL], *idx = is;
	bool heap = n > NCCL_GROUP_SMALL;

	if (n < 2)
		return;
	if (heap) {
		k = calloc(n, sizeof(*k));
		idx = calloc(n, sizeof(*idx));
		tmp = calloc(n, sizeof(*tmp));
	} else {
		memset(ks, 0, sizeof(ks));
	}
	if (!k || !idx || !tmp)
		goto out; /* keep call order: correct unless p2p pairs are crossed */
	for (size_t i = 0; i < n; i++) {
		struct nccl_op *o = &ops[i];
		size_t j;

		for (j = 0; j < i && ops[j].comm != o->comm; j++)
			;
		k[i].comm_idx = j < i ? k[j].comm_idx : i;
		k[i].seq = o->seq;
		if (o->kind == NCCL_OP_SEND || o->kind == NCCL_OP_RECV) {
			int me = rank_of(o->comm);
			k[i].cls = 1;
			k[i].src = o->kind == NCCL_OP_SEND ? me : o->root;
			k[i].dst = o->kind == NCCL_OP_SEND ? o->root : me;
		}
		idx[i] = i;
	}
	/* insertion sort: groups are small, and it is stable */
	for (size_t i = 1; i < n; i++) {
		size_t v = idx[i], j = i;
		while (j > 0 && okey_cmp(&k[idx[j - 1]], &k[v]) > 0) {
			idx[j] = idx[j - 1];
			j--;
		}
		idx[j] = v;
	}
	for (size_t i = 0; i < n; i++)
		tmp[i] = ops[idx[i]];
	memcpy(ops, tmp, n * sizeof(*ops));
out:
	if (heap) {
		free(k);
		free(idx);
		free(tmp);
	}
}

/* ---- per-thread group state ---- */

struct deferred {
	pthread_t t;
	struct nccl_deferred *result;
};

static __thread struct {
	int depth;
	unsigned seq;
	struct nccl_op *ops;
	size_t n, cap;
	struct deferred *thr;
	size_t nthr, capthr;
	ncclResult_t err; /* first error while recording */
} g;

static nccl_group_runner_t runner;

void nccl_group_set_runner(nccl_group_runner_t fn)
{
	runner = fn;
}

int nccl_group_depth(void)
{
	return g.depth;
}

size_t nccl_group_pending(void)
{
	return g.n;
}

ncclResult_t ncclGroupStart(void)
{
	g.depth++;
	return ncclSuccess;
}
NCCL_ALIAS(ncclGroupStart);

ncclResult_t nccl_group_add(const struct nccl_op *op, bool *queued)
{
	*queued = false;
	if (!g.depth)
		return ncclSuccess;
	if (g.n == g.cap) {
		size_t cap = g.cap ? g.cap * 2 : 16;
		struct nccl_op *p = realloc(g.ops, cap * sizeof(*p));
		if (!p) {
			if (g.err == ncclSuccess)
				g.err = ncclSystemError;
			return nccl_fail(op->comm, ncclSystemError, "group: out of memory");
		}
		g.ops = p;
		g.cap = cap;
	}
	g.ops[g.n] = *op;
	g.ops[g.n].seq = g.seq++;
	g.n++;
	*queued = true;
	return ncclSuccess;
}

ncclResult_t nccl_group_error(ncclResult_t r)
{
	if (g.depth && r != ncclSuccess && g.err == ncclSuccess)
		g.err = r;
	return r;
}

ncclResult_t nccl_group_defer_thread(pthread_t t, struct nccl_deferred *result)
{
	if (g.nthr == g.capthr) {
		size_t cap = g.capthr ? g.capthr * 2 : 8;
		struct deferred *p = realloc(g.thr, cap * sizeof(*p));
		if (!p) {
			ncclResult_t r;

			pthread_join(t, NULL);
			r = result->result;
			if (r != ncclSuccess)
				nccl_set_thread_error(result->err);
			free(result);
			return r;
		}
		g.thr = p;
		g.capthr = cap;
	}
	g.thr[g.nthr].t = t;
	g.thr[g.nthr].result = result;
	g.nthr++;
	return ncclSuccess;
}

static ncclResult_t group_flush(bool simulate, float *estimate_us)
{
	ncclResult_t res = g.err, r;
	struct nccl_op *ops = g.ops;
	size_t n = g.n;

	g.ops = NULL;
	g.n = g.cap = 0;
	g.seq = 0;
	g.err = ncclSuccess;
	/* communicators created in the group first: its operations may use them */
	for (size_t i = 0; i < g.nthr; i++) {
		struct nccl_deferred *d = g.thr[i].result;

		pthread_join(g.thr[i].t, NULL);
		if (res == ncclSuccess && d->result != ncclSuccess && d->result != ncclInProgress) {
			/* the thread's text, or the caller's ncclGetLastError is empty */
			res = d->result;
			nccl_set_thread_error(d->err[0] ? d->err
						       : "a communicator created in the group "
							 "failed (its thread gave no reason)");
		}
		free(d);
	}
	free(g.thr);
	g.thr = NULL;
	g.nthr = g.capthr = 0;
	if (simulate) {
		/* a first-order estimate: 20 us per operation plus its bytes at
		 * the 10 GB/s a TCP rail pair gives (docs/nccl.md) */
		double us = 0;
		for (size_t i = 0; i < n; i++)
			us += 20.0 + (double)(ops[i].count * nccl_dtype_size(ops[i].dtype)) / 1e4;
		*estimate_us = (float)us;
	} else if (n && res == ncclSuccess) {
		r = runner ? runner(ops, n) : nccl_fail(NULL, ncclInternalError, "no group runner");
		if (res == ncclSuccess)
			res = r;
	}
	free(ops);
	return res;
}

ncclResult_t ncclGroupEnd(void)
{
	if (g.depth <= 0)
		return nccl_fail(NULL, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
	if (--g.depth)
		return ncclSuccess;
	return group_flush(false, NULL);
}
NCCL_ALIAS(ncclGroupEnd);

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *info)
{
	float est = 0;
	ncclResult_t r;

	if (g.depth <= 0)
		return nccl_fail(NULL, ncclInvalidUsage,
				 "ncclGroupSimulateEnd without ncclGroupStart");
	if (info && (info->magic != NCCL_SIM_INFO_MAGIC || info->size < sizeof(ncclSimInfo_t)))
		return nccl_fail(NULL, ncclInvalidArgument,
				 "ncclSimInfo_t not set up with NCCL_SIM_INFO_INITIALIZER");
	if (--g.depth)
		return ncclSuccess;
	/* nothing runs: the group's operations are dropped, as NCCL does */
	r = group_flush(true, &est);
	if (info)
		info->estimatedTime = est;
	return r;
}
NCCL_ALIAS(ncclGroupSimulateEnd);
