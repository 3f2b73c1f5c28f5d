/* SPDX-License-Identifier: MIT */
/*
 * Host staging of GPU buffers for the rail phase: an operation that spans
 * hosts has its GPU buffers copied through pinned host memory.
 *
 * The rail phase (exec_rail.c) works on host memory: each GPU buffer of an
 * operation that spans hosts is staged through pinned host memory on the
 * GPU's NUMA node (device-to-host copy of the inputs, the host path with its
 * planner, chunk protocol and failover unchanged, host-to-device copy of the
 * outputs). Staging buffers are pinned once (cudaHostRegister) and reused,
 * up to gpu_stage_cache bytes. A buffer last used for another cgroup's
 * communicator (so another tenant's, or another cgroup of the same one) has
 * the bytes that use may have written cleared before it is handed out, so
 * no byte of one tenant's GPU buffers stays where another tenant's
 * operation could send it from (as the proxy buffers, net/bufpool.h).
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <numa.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/comm_record.h"
#include "base/op_record.h"
#include "gpu/owner.h"
#include "gpu_priv.h"
#include "log.h"
#include "util.h"

#define STAGE_MIN ((size_t)1 << 20)

struct pinned {
	struct pinned *next;
	char *p;
	size_t size;
	int node; /* -1: not from libnuma */
	uint64_t owner; /* its last user's cgroup (owner_of); 0: none yet */
	size_t dirty;   /* bytes from p that may hold data (cleared for another owner) */
};

/* A communicator's cgroup as a key (FNV-1a, never 0). */
static uint64_t owner_of(const struct r2_comm *c)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const char *s = c->tenant; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h | 1;
}

struct stage_op {
	char *gsend, *grecv; /* the op's buffers as the client gave them */
	int sdev, rdev;      /* their GPUs; -1: host memory (not staged) */
	uint64_t slen, rlen;
	struct pinned *hs, *hr;
};

/* Piecewise staging (an AllReduce of one local rank from STAGE_PIECES_MIN
 * bytes): the input goes to the host in slices of STAGE_SLICE, each with an
 * event, and the rail phase starts at once, waiting only for the slices it
 * touches (x->stage_wait); each region of the output goes back to the GPU as
 * soon as the rail phase makes it final (x->stage_out), on a second stream,
 * and stage_end copies the rest. gpu_stage_pieces off: one copy each
 * way, before and after. */
#define STAGE_SLICE ((uint64_t)4 << 20)
#define STAGE_PIECES_MIN ((uint64_t)16 << 20)
/* The wait for the clients' streams yields the CPU (sched_yield) for this
 * long, then sleeps 50 us at a time. */
#define STAGE_YIELD_US 2000

struct piece {
	int sdev, rdev;
	const char *in;     /* host staging of the input */
	uint64_t in_len;
	int nslice;         /* slices of the input */
	/* queued slices, in their order on the one copy stream: order[q] is
	 * the q-th queued, pos[j] where slice j is (-1: not queued yet);
	 * order[0 .. ndone) are known done */
	int *order, *pos, nqueued, ndone;
	cudaEvent_t *ev;
	char *out, *gout;   /* the output: host staging, GPU */
	uint64_t out_len;
	struct r2_range { uint64_t a, b; } *back; /* gone back already */
	size_t nback, capback;
	bool back_all;      /* a copy failed to queue: stage_end copies it all */
};

struct stage {
	uint64_t t0;
	/* the parts of a staged operation (--log-level debug, issue 21):
	 * its streams reached it, its inputs on the host, the rail phase done */
	uint64_t t_ready, t_in, t_rail;
	struct slots sl;
	struct piece *pc; /* NULL: staged whole */
	struct stage_op op[MAX_OPS];
};

static struct {
	pthread_mutex_t lock;
	struct pinned *free;
	uint64_t cached, cache_max;
	int node[MAX_DEV]; /* each GPU's NUMA node, -1 unknown */
	cudaStream_t st[MAX_DEV];
	cudaStream_t back[MAX_DEV]; /* piecewise copies back to the GPU */
	bool pieces;                /* gpu_stage_pieces */
	bool init;
} S = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Each GPU's NUMA node (sysfs of its PCI function) and a copy stream. */
static int stage_init(const struct r2_params *p)
{
	if (S.init)
		return 0;
	S.cache_max = (uint64_t)r2_param_int(p, P_GPU_STAGE_CACHE);
	S.pieces = r2_param_bool(p, P_GPU_STAGE_PIECES);
	for (int g = 0; g < r2g.ndev; g++) {
		char bus[32], path[96];
		FILE *f;

		S.node[g] = -1;
		if (cudaDeviceGetPCIBusId(bus, sizeof(bus), r2g.dev[g].ord) == cudaSuccess) {
			for (char *c = bus; *c; c++)
				*c = (char)tolower((unsigned char)*c);
			snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus);
			if ((f = fopen(path, "r"))) {
				if (fscanf(f, "%d", &S.node[g]) != 1)
					S.node[g] = -1;
				fclose(f);
			}
		}
		if (cudaSetDevice(r2g.dev[g].ord) != cudaSuccess ||
		    cudaStreamCreateWithFlags(&S.st[g], cudaStreamNonBlocking) != cudaSuccess ||
		    cudaStreamCreateWithFlags(&S.back[g], cudaStreamNonBlocking) != cudaSuccess)
			return cuda_err(cudaGetLastError());
		log_info("gpu: GPU %d: staging buffers on NUMA node %d", g, S.node[g]);
	}
	S.init = true;
	return 0;
}

static void pinned_free(struct pinned *b)
{
	if (cudaHostUnregister(b->p) != cudaSuccess)
		(void)cudaGetLastError(); /* not pinned (pinned_get failing) */
	if (b->node >= 0)
		numa_free(b->p, b->size);
	else
		free(b->p);
	free(b);
}

/* The buffer for owner: what another owner's use may have written is
 * cleared. */
static struct pinned *pinned_own(struct pinned *b, size_t size, uint64_t owner)
{
	r2_gpu_stage_claim(b->p, b->size, &b->owner, &b->dirty, owner, size);
	return b;
}

/* A pinned buffer of at least size bytes on node (cached ones first), for
 * owner (owner_of). */
static struct pinned *pinned_get(size_t size, int node, uint64_t owner)
{
	struct pinned **pp, **best = NULL, *b;
	size_t sz = STAGE_MIN;

	pthread_mutex_lock(&S.lock);
	for (pp = &S.free; *pp; pp = &(*pp)->next)
		if ((*pp)->size >= size && (*pp)->node == node &&
		    (!best || (*pp)->size < (*best)->size))
			best = pp;
	if (best) {
		b = *best;
		*best = b->next;
		S.cached -= b->size;
		pthread_mutex_unlock(&S.lock);
		return pinned_own(b, size, owner);
	}
	pthread_mutex_unlock(&S.lock);
	while (sz < size)
		sz *= 2;
	if (!(b = calloc(1, sizeof(*b))))
		return NULL;
	b->size = sz;
	b->node = node >= 0 && numa_available() >= 0 ? node : -1;
	b->p = b->node >= 0 ? numa_alloc_onnode(sz, b->node) : NULL;
	if (!b->p) {
		b->node = -1;
		if (posix_memalign((void **)&b->p, 4096, sz))
			b->p = NULL;
		b->dirty = sz; /* the heap's: may hold anything (numa_alloc_onnode's are zero pages) */
	}
	if (!b->p) {
		free(b);
		return NULL;
	}
	if (cudaHostRegister(b->p, sz, cudaHostRegisterPortable) != cudaSuccess) {
		log_warn("gpu: cannot pin %zu B of staging memory: %s", sz,
			 cudaGetErrorString(cudaGetLastError()));
		pinned_free(b); /* its unregister fails harmlessly */
		return NULL;
	}
	return pinned_own(b, size, owner);
}

static void pinned_put(struct pinned *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&S.lock);
	if (S.cached + b->size <= S.cache_max) {
		b->next = S.free;
		S.free = b;
		S.cached += b->size;
		b = NULL;
	}
	pthread_mutex_unlock(&S.lock);
	if (b)
		pinned_free(b);
}

/* Copies n bytes on GPU dev's copy stream (cudaMemcpyDefault: UVA). */
static int stage_copy(int dev, void *dst, const void *src, uint64_t n, bool *used)
{
	if (!n)
		return 0;
	used[dev] = true;
	if (cudaSetDevice(r2g.dev[dev].ord) != cudaSuccess)
		return cuda_err(cudaGetLastError());
	return cuda_err(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, S.st[dev]));
}

static int stage_sync(const bool *used)
{
	int r = 0;

	for (int g = 0; g < r2g.ndev; g++) {
		if (!used[g] || cudaSetDevice(r2g.dev[g].ord) != cudaSuccess)
			continue;
		int a = cuda_err(cudaStreamSynchronize(S.st[g]));
		int b = cuda_err(cudaStreamSynchronize(S.back[g]));
		if (r == 0)
			r = a < 0 ? a : b;
	}
	return r;
}

/* Stages op i: pinned buffers for its GPU buffers (in place: one buffer),
 * device-to-host copy of its input; op->sendbuf/recvbuf point to them. */
static int stage_in(struct r2_exec *x, struct stage *st, int i, bool *used)
{
	struct r2_op *op = x->ops[i];
	struct stage_op *so = &st->op[i];
	uint64_t own = owner_of(x->c);
	char *hs, *hr;

	so->gsend = op->sendbuf;
	so->grecv = op->recvbuf;
	so->sdev = r2_mem_is_gpu(op->sendref) ? r2g_dev_of(op->sendref) : -1;
	so->rdev = r2_mem_is_gpu(op->recvref) ? r2g_dev_of(op->recvref) : -1;
	if (!r2d_op_extents(&op->sqe, x->c->nranks, op->rank, &so->slen, &so->rlen))
		return -EOVERFLOW;
	if (so->sdev < 0 || !so->slen)
		so->sdev = -1;
	if (so->rdev < 0 || !so->rlen)
		so->rdev = -1;
	hs = op->sendbuf;
	hr = op->recvbuf;
	if (so->rdev >= 0 && so->sdev >= 0 && op->sendref == op->recvref &&
	    so->gsend >= so->grecv && so->gsend + so->slen <= so->grecv + so->rlen) {
		/* input inside the output (in place) */
		if (!(so->hr = pinned_get(so->rlen, S.node[so->rdev], own)))
			return -ENOMEM;
		hr = so->hr->p;
		hs = hr + (so->gsend - so->grecv);
	} else if (so->rdev >= 0 && so->sdev >= 0 && op->sendref == op->recvref &&
		   so->grecv >= so->gsend && so->grecv + so->rlen <= so->gsend + so->slen) {
		/* output inside the input (in-place reduce-scatter) */
		if (!(so->hs = pinned_get(so->slen, S.node[so->sdev], own)))
			return -ENOMEM;
		hs = so->hs->p;
		hr = hs + (so->grecv - so->gsend);
	} else {
		if (so->sdev >= 0) {
			if (!(so->hs = pinned_get(so->slen, S.node[so->sdev], own)))
				return -ENOMEM;
			hs = so->hs->p;
		}
		if (so->rdev >= 0) {
			if (!(so->hr = pinned_get(so->rlen, S.node[so->rdev], own)))
				return -ENOMEM;
			hr = so->hr->p;
		}
	}
	op->sendbuf = hs;
	op->recvbuf = hr;
	if (so->sdev >= 0 && !st->pc)
		return stage_copy(so->sdev, hs, so->gsend, so->slen, used);
	return 0;
}

/* Queues slice j's copy to the host (once), with its event. */
static int piece_queue(struct piece *pc, struct stage_op *so, int j)
{
	uint64_t a = (uint64_t)j * STAGE_SLICE, n = R2_MIN(STAGE_SLICE, pc->in_len - a);
	int r;

	if (pc->pos[j] >= 0)
		return 0;
	if ((r = cuda_err(cudaMemcpyAsync((char *)pc->in + a, so->gsend + a, n, cudaMemcpyDefault,
					  S.st[pc->sdev]))) < 0 ||
	    (r = cuda_err(cudaEventRecord(pc->ev[j], S.st[pc->sdev]))) < 0)
		return r;
	pc->pos[j] = pc->nqueued;
	pc->order[pc->nqueued++] = j;
	return 0;
}

/* x->stage_first: the slices of the k ranges first, one of each range in
 * turn. */
static void piece_first(struct r2_exec *x, const char *const *p, const uint64_t *n, int k)
{
	struct stage *st = x->gpu_stage;
	struct piece *pc = st ? st->pc : NULL;
	int cur[R2_STAGE_FIRST_MAX], end[R2_STAGE_FIRST_MAX], left = 0;

	if (!pc || pc->nqueued || k > R2_STAGE_FIRST_MAX || cudaSetDevice(r2g.dev[pc->sdev].ord) != cudaSuccess)
		return;
	for (int i = 0; i < k; i++) {
		cur[i] = end[i] = 0;
		if (p[i] + n[i] <= pc->in || p[i] >= pc->in + pc->in_len || !n[i])
			continue;
		uint64_t a = p[i] > pc->in ? (uint64_t)(p[i] - pc->in) : 0;
		uint64_t b = R2_MIN((uint64_t)(p[i] + n[i] - pc->in), pc->in_len);
		cur[i] = (int)(a / STAGE_SLICE);
		end[i] = (int)((b - 1) / STAGE_SLICE) + 1;
		left++;
	}
	while (left > 0) {
		left = 0;
		for (int i = 0; i < k; i++) {
			if (cur[i] >= end[i])
				continue;
			if (piece_queue(pc, &st->op[0], cur[i]++) < 0)
				return; /* the first stage_wait queues the rest, reports it */
			left += cur[i] < end[i];
		}
	}
}

static int piece_wait(struct r2_exec *x, const void *p, uint64_t n)
{
	struct stage *st = x->gpu_stage;
	struct piece *pc = st ? st->pc : NULL;
	const char *q = p;
	int first, last, maxpos = -1, r;

	if (!pc || q + n <= pc->in || q >= pc->in + pc->in_len)
		return 0;
	first = q > pc->in ? (int)((uint64_t)(q - pc->in) / STAGE_SLICE) : 0;
	last = (int)((R2_MIN((uint64_t)(q + n - pc->in), pc->in_len) - 1) / STAGE_SLICE);
	if (cudaSetDevice(r2g.dev[pc->sdev].ord) != cudaSuccess)
		return cuda_err(cudaGetLastError());
	/* whatever stage_first did not ask for goes now, in address order */
	for (int j = 0; pc->nqueued < pc->nslice && j < pc->nslice; j++)
		if ((r = piece_queue(pc, &st->op[0], j)) < 0)
			return r;
	for (int j = first; j <= last; j++)
		maxpos = R2_MAX(maxpos, pc->pos[j]);
	if (maxpos < pc->ndone)
		return 0;
	r = cuda_err(cudaEventSynchronize(pc->ev[pc->order[maxpos]]));
	if (r == 0)
		pc->ndone = maxpos + 1; /* one stream: the earlier ones are done too */
	return r;
}

static void piece_out(struct r2_exec *x, const void *p, uint64_t n)
{
	struct stage *st = x->gpu_stage;
	struct piece *pc = st ? st->pc : NULL;
	const char *q = p;

	if (!pc || pc->back_all || q < pc->out || q + n > pc->out + pc->out_len)
		return;
	uint64_t off = (uint64_t)(q - pc->out);
	if (R2_GROW(pc->back, pc->capback, pc->nback, 64) < 0 ||
	    cudaSetDevice(r2g.dev[pc->rdev].ord) != cudaSuccess ||
	    cudaMemcpyAsync(pc->gout + off, p, n, cudaMemcpyDefault, S.back[pc->rdev]) !=
		    cudaSuccess) {
		(void)cudaGetLastError();
		pc->back_all = true;
		return;
	}
	pc->back[pc->nback++] = (struct r2_range){ off, off + n };
}

/* Whether x is staged piecewise: an AllReduce of one local rank, GPU
 * buffers both, large enough, not AVG (the division follows the rail
 * phase). */
static bool piece_ok(const struct r2_exec *x)
{
	const struct r2_sqe *q = &x->ops[0]->sqe;
	uint64_t sl, rl;

	if (!S.pieces || x->nops != 1 || x->opcode != R2_OP_ALLREDUCE ||
	    q->redop == R2CCL_AVG || !r2_mem_is_gpu(x->ops[0]->sendref) ||
	    !r2_mem_is_gpu(x->ops[0]->recvref))
		return false;
	return r2d_op_extents(q, x->c->nranks, x->ops[0]->rank, &sl, &rl) &&
	       sl >= STAGE_PIECES_MIN && sl == rl;
}

/* Queues the input's slices to the host, each with its event. */
static int piece_start(struct r2_exec *x, struct stage *st, bool *used)
{
	struct piece *pc = st->pc;
	struct stage_op *so = &st->op[0];
	int r;

	pc->sdev = so->sdev;
	pc->rdev = so->rdev;
	pc->in = x->ops[0]->sendbuf;
	pc->in_len = so->slen;
	pc->out = x->ops[0]->recvbuf;
	pc->gout = so->grecv;
	pc->out_len = so->rlen;
	pc->nslice = (int)R2_DIV_UP(so->slen, STAGE_SLICE);
	if (!(pc->ev = calloc((size_t)pc->nslice, sizeof(*pc->ev))) ||
	    !(pc->order = calloc((size_t)pc->nslice, sizeof(int))) ||
	    !(pc->pos = malloc((size_t)pc->nslice * sizeof(int))))
		return -ENOMEM;
	used[pc->sdev] = true;
	if (cudaSetDevice(r2g.dev[pc->sdev].ord) != cudaSuccess)
		return cuda_err(cudaGetLastError());
	for (int j = 0; j < pc->nslice; j++) {
		pc->pos[j] = -1;
		if ((r = cuda_err(cudaEventCreateWithFlags(&pc->ev[j], cudaEventDisableTiming))) < 0)
			return r;
	}
	/* queued by the rail phase: stage_first (what its first step sends),
	 * then the rest at its first stage_wait */
	x->stage_wait = piece_wait;
	x->stage_out = piece_out;
	x->stage_first = piece_first;
	return 0;
}

static int range_cmp(const void *a, const void *b)
{
	const struct r2_range *p = a, *q = b;

	return p->a < q->a ? -1 : p->a > q->a;
}

/* The output regions that have not gone back yet go now. */
static int piece_finish(struct piece *pc, bool *used)
{
	uint64_t cur = 0;
	int r = 0;

	used[pc->rdev] = true;
	if (pc->back_all)
		return stage_copy(pc->rdev, pc->gout, pc->out, pc->out_len, used);
	qsort(pc->back, pc->nback, sizeof(*pc->back), range_cmp);
	for (size_t i = 0; i <= pc->nback && r == 0; i++) {
		uint64_t a = i < pc->nback ? pc->back[i].a : pc->out_len;
		if (a > cur)
			r = stage_copy(pc->rdev, pc->gout + cur, pc->out + cur, a - cur, used);
		if (i < pc->nback)
			cur = R2_MAX(cur, pc->back[i].b);
	}
	return r;
}

static void piece_free(struct piece *pc)
{
	if (!pc)
		return;
	for (int j = 0; pc->ev && j < pc->nslice; j++)
		if (pc->ev[j])
			(void)cudaEventDestroy(pc->ev[j]);
	free(pc->ev);
	free(pc->order);
	free(pc->pos);
	free(pc->back);
	free(pc);
}

int r2_gpu_exec_rail(struct r2_exec *x, struct r2_pool *pool)
{
	struct stage *st;
	bool used[MAX_DEV] = { false };
	unsigned spins = 0;
	int r;

	if (r2g.err || !r2g.started)
		return -ENODEV;
	if (x->nops > MAX_OPS)
		return -E2BIG;
	if (!(st = calloc(1, sizeof(*st))))
		return -ENOMEM;
	st->t0 = r2_now_us();
	/* from here r2d_exec_complete calls r2_gpu_stage_end, which releases
	 * the streams whatever happens */
	x->gpu_stage = st;
	pthread_mutex_lock(&x->c->d->lock);
	r = r2g_slots_resolve(x, &st->sl);
	pthread_mutex_unlock(&x->c->d->lock);
	if (r < 0)
		return r;
	pthread_mutex_lock(&S.lock);
	r = stage_init(&x->c->d->params);
	pthread_mutex_unlock(&S.lock);
	if (r < 0)
		return r;
	/* the clients' streams reach the operation (bounded: op timeout).
	 * Meanwhile the communicator's transfers in flight go on: this
	 * executor is the only thread that completes them, and a stream may
	 * wait for one (grouped send then receive on one stream: the receive's
	 * READY comes after the send's DONE, which needs the peer's ACKs
	 * taken from the mailbox; without this the receive timed out across
	 * hosts, issue 19) */
	while (!r2g_slots_ready(x->nops, &st->sl)) {
		if ((r = r2g_op_aborted(x, st->t0, r2_now_us())))
			return r;
		if (r2g.eng->progress)
			r2g.eng->progress(x->c); /* then the same back-off */
		/* yield, not sleep, while the stream is near: a nanosleep of
		 * 2 us lasts the thread's timer slack, 50 us by default (59 us
		 * median measured), on the latency path of every small GPU
		 * operation whose READY comes after the operation; sleep only
		 * once the wait is long (issue 21) */
		if (++spins % 64 == 0) {
			if (r2_now_us() - st->t0 > STAGE_YIELD_US) {
				struct timespec ts = { 0, 50000 };
				nanosleep(&ts, NULL);
			} else {
				sched_yield();
			}
		} else {
			r2_cpu_relax();
		}
	}
	st->t_ready = r2_now_us();
	if (piece_ok(x) && !(st->pc = calloc(1, sizeof(*st->pc))))
		return -ENOMEM;
	for (int i = 0; i < x->nops; i++)
		if ((r = stage_in(x, st, i, used)) < 0)
			return r;
	if (st->pc)
		r = piece_start(x, st, used);
	else
		r = stage_sync(used);
	if (r < 0)
		return r;
	st->t_in = r2_now_us();
	return r2g.eng->exec_hier(x, pool);
}

int r2_gpu_stage_end(struct r2_exec *x, int status)
{
	struct stage *st = x->gpu_stage;
	bool used[MAX_DEV] = { false };

	st->t_rail = r2_now_us();
	x->gpu_stage = NULL;
	x->stage_wait = NULL;
	x->stage_out = NULL;
	x->stage_first = NULL;
	if (st->pc) {
		/* the slices still on their way end before their buffer goes */
		if (st->pc->sdev >= 0)
			used[st->pc->sdev] = true;
		if (status == 0 && st->pc->ev) {
			int r = piece_finish(st->pc, used);
			if (r < 0)
				status = r;
		}
	}
	/* every GPU whose copy streams may hold a copy of this operation (one
	 * queued before an error further on included): those copies end
	 * before their pinned buffers go back to the cache or are freed */
	for (int i = 0; i < x->nops; i++) {
		if (st->op[i].sdev >= 0 && st->op[i].sdev < MAX_DEV)
			used[st->op[i].sdev] = true;
		if (st->op[i].rdev >= 0 && st->op[i].rdev < MAX_DEV)
			used[st->op[i].rdev] = true;
	}
	if (st->pc && st->pc->rdev >= 0 && st->pc->rdev < MAX_DEV)
		used[st->pc->rdev] = true;
	for (int i = 0; !st->pc && i < x->nops; i++) {
		struct stage_op *so = &st->op[i];
		if (status == 0 && so->rdev >= 0) {
			int r = stage_copy(so->rdev, so->grecv, x->ops[i]->recvbuf, so->rlen, used);
			if (r < 0)
				status = r;
		}
	}
	if (status == 0)
		status = stage_sync(used);
	else
		(void)stage_sync(used); /* the copies already queued end first */
	for (int i = 0; i < x->nops; i++) {
		struct stage_op *so = &st->op[i];
		if (so->gsend || so->grecv) {
			x->ops[i]->sendbuf = so->gsend;
			x->ops[i]->recvbuf = so->grecv;
		}
		pinned_put(so->hs);
		pinned_put(so->hr);
	}
	if (status == 0 && st->t_in) {
		uint64_t t_out = r2_now_us();
		log_debug("communicator %u: GPU op of %llu bytes staged: stream wait %llu us, "
			  "device->host %llu us, rail phase %llu us, host->device %llu us%s",
			  x->c->id, (unsigned long long)(st->op[0].slen > st->op[0].rlen ?
							 st->op[0].slen : st->op[0].rlen),
			  (unsigned long long)(st->t_ready - st->t0),
			  (unsigned long long)(st->t_in - st->t_ready),
			  (unsigned long long)(st->t_rail - st->t_in),
			  (unsigned long long)(t_out - st->t_rail), st->pc ? " (in slices)" : "");
	}
	piece_free(st->pc);
	r2g_slots_release(x->nops, &st->sl, status);
	free(st);
	return status;
}

void r2g_stage_shutdown(void)
{
	pthread_mutex_lock(&S.lock);
	while (S.free) {
		struct pinned *b = S.free;
		S.free = b->next;
		pinned_free(b);
	}
	S.cached = 0;
	pthread_mutex_unlock(&S.lock);
}
