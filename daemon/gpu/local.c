/* SPDX-License-Identifier: MIT */
/*
 * Local collectives on GPUs: the GPU worker thread, which launches the
 * kernels and copies of an operation whose ranks are all on this host.
 *
 * r2_gpu_exec queues a matched operation; the worker keeps a list of them.
 * One waits until every stream-ordered rank's sync slot says "ready", then
 * the worker launches kernels / copies on its own stream of each GPU
 * involved and records an event there; when every event completed it writes
 * each slot's status and "done" and completes the operation's CQEs.
 * Operations of one communicator run strictly in order; different
 * communicators proceed independently. A rank whose session dies, a broken
 * communicator or the operation timeout end a waiting operation with an
 * error (the surviving ranks' streams are released with that error).
 */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/comm_record.h"
#include "base/op_record.h"
#include "gpu_priv.h"
#include "log.h"
#include "util.h"

struct gjob {
	struct gjob *next;
	struct r2_exec *x;
	struct r2_comm *c;
	struct r2d *d;
	bool running;
	int status; /* preset error: finish at once */
	uint64_t t0;
	struct slots sl;
	bool used[MAX_DEV];
	cudaEvent_t ev[MAX_DEV];
};

/* The worker's queue: r2_gpu_exec appends, the worker takes it all. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct gjob *head, **tail;
	pthread_t thread;
} Q = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.tail = &Q.head,
};

/* GPU buffers, or stream-ordered: the GPU worker owns the sync slots, so a
 * stream-ordered op without buffers (count 0: an AllGather of 4 B on 2 ranks)
 * goes there too, or its client's stream would wait for the slot forever. */
bool r2_gpu_exec_is_gpu(const struct r2_exec *x)
{
	for (int i = 0; i < x->nops; i++)
		if (r2_mem_is_gpu(x->ops[i]->sendref) || r2_mem_is_gpu(x->ops[i]->recvref) ||
		    (x->ops[i]->sqe.gflags & R2_SQE_STREAM))
			return true;
	return false;
}

static int set_dev(struct gjob *j, int dev)
{
	j->used[dev] = true;
	return cuda_err(cudaSetDevice(r2g.dev[dev].ord));
}

static int blocks(int dev)
{
	return r2g.max_blocks > 0 ? r2g.max_blocks : 2 * r2g.dev[dev].sms;
}

static bool aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

/* A buffer: the daemon's (home GPU) address and the region holding it. */
struct buf {
	char *p;
	const struct r2_memreg *ref;
};

/* p + off as GPU dev addresses it (legacy IPC: each GPU has its own mapping). */
static void *xl(int dev, struct buf b, uint64_t off)
{
	const struct gpu_alloc *a = ((const struct r2_gpu_region *)b.ref)->a;

	if (!a->map[dev])
		return NULL;
	return a->map[dev] + (b.p - a->dptr) + off;
}

static int do_reduce(struct gjob *j, int dev, int dtype, int op, const struct buf *in, int nin,
		     const struct buf *out, int nout, uint64_t n, uint64_t off_bytes, int div)
{
	struct r2k_reduce_args a;
	int r = set_dev(j, dev);

	if (r < 0 || n == 0)
		return r;
	memset(&a, 0, sizeof(a));
	a.vec = 1;
	for (int k = 0; k < nin; k++) {
		a.in[k] = xl(dev, in[k], off_bytes);
		if (!a.in[k])
			return -EINVAL;
		a.vec &= aligned16(a.in[k]);
	}
	for (int o = 0; o < nout; o++) {
		a.out[o] = xl(dev, out[o], off_bytes);
		if (!a.out[o])
			return -EINVAL;
		a.vec &= aligned16(a.out[o]);
	}
	a.nin = nin;
	a.nout = nout;
	a.n = n;
	a.div = div;
	return cuda_err((cudaError_t)r2k_reduce(r2g.dev[dev].st, dtype, op, &a, blocks(dev)));
}

static int do_copy(struct gjob *j, int dev, struct buf src, const struct buf *out, int nout,
		   uint64_t bytes)
{
	struct r2k_copy_args a;
	int r = set_dev(j, dev);

	if (r < 0 || bytes == 0 || nout == 0)
		return r;
	memset(&a, 0, sizeof(a));
	a.in = xl(dev, src, 0);
	if (!a.in)
		return -EINVAL;
	a.vec = aligned16(a.in);
	for (int o = 0; o < nout; o++) {
		a.out[o] = xl(dev, out[o], 0);
		if (!a.out[o])
			return -EINVAL;
		a.vec &= aligned16(a.out[o]);
	}
	if (r2g.copy_ce) {
		for (int o = 0; o < nout && r == 0; o++)
			r = cuda_err(cudaMemcpyAsync(a.out[o], a.in, bytes, cudaMemcpyDefault,
						     r2g.dev[dev].st));
		return r;
	}
	a.nout = nout;
	a.bytes = bytes;
	return cuda_err((cudaError_t)r2k_copy(r2g.dev[dev].st, &a, blocks(dev)));
}

/* Reduction over all inputs into all outputs, spread over the GPUs of devs[]
 * (contiguous slices) when large enough. */
static int reduce_spread(struct gjob *j, const bool *devs, int dtype, int op,
			 const struct buf *in, int nin, const struct buf *out, int nout, uint64_t n,
			 size_t es, int div)
{
	int list[MAX_DEV], nd = 0, r = 0;
	uint64_t per, lo = 0;

	for (int g = 0; g < r2g.ndev; g++)
		if (devs[g])
			list[nd++] = g;
	if (nd == 0)
		return -EINVAL;
	if (n * es < r2g.split_min)
		nd = 1;
	per = (n + (uint64_t)nd - 1) / (uint64_t)nd;
	per = (per + 4095) & ~(uint64_t)4095; /* slices stay 16-byte aligned */
	for (int s = 0; s < nd && lo < n && r == 0; s++) {
		uint64_t cnt = R2_MIN(per, n - lo);
		r = do_reduce(j, list[s], dtype, op, in, nin, out, nout, cnt, lo * es, div);
		lo += cnt;
	}
	return r;
}

/* Copies src to every output, each GPU pulling into its own outputs. */
static int copy_pull(struct gjob *j, struct buf src, const struct buf *out, const int *odev,
		     int nout, uint64_t bytes)
{
	int r = 0;

	for (int g = 0; g < r2g.ndev && r == 0; g++) {
		struct buf mine[MAX_OPS];
		int n = 0;
		for (int o = 0; o < nout; o++)
			if (odev[o] == g && out[o].p != src.p)
				mine[n++] = out[o];
		if (n)
			r = do_copy(j, g, src, mine, n, bytes);
	}
	return r;
}

static struct buf shift(struct buf b, uint64_t off)
{
	b.p += off;
	return b;
}

static int launch(struct gjob *j)
{
	struct r2_exec *x = j->x;
	const struct r2_sqe *q = &x->ops[0]->sqe;
	int n = x->nops, dtype = (int)q->dtype, op = (int)q->redop, root = -1, r = 0;
	size_t es = r2ccl_dtype_size((r2ccl_dtype_t)q->dtype);
	uint64_t count = q->count, blk = count * es;
	struct buf in[MAX_OPS], out[MAX_OPS];
	int idev[MAX_OPS], odev[MAX_OPS];
	bool devs[MAX_DEV] = { false };

	if (count == 0)
		return 0;
	for (int i = 0; i < n; i++) {
		in[i].p = x->ops[i]->sendbuf;
		in[i].ref = x->ops[i]->sendref;
		out[i].p = x->ops[i]->recvbuf;
		out[i].ref = x->ops[i]->recvref;
		idev[i] = x->ops[i]->sendref ? r2g_dev_of(x->ops[i]->sendref) : -1;
		odev[i] = x->ops[i]->recvref ? r2g_dev_of(x->ops[i]->recvref) : -1;
		if (x->opcode == R2_OP_BROADCAST || x->opcode == R2_OP_REDUCE) {
			/* ops[] are the local ranks in rank order; find the root */
			if (x->ops[i]->rank == q->root)
				root = i;
		}
	}
	switch (x->opcode) {
	case R2_OP_ALLREDUCE:
		if (n == 1)
			return copy_pull(j, in[0], out, odev, 1, blk);
		for (int i = 0; i < n; i++)
			devs[odev[i]] = true;
		return reduce_spread(j, devs, dtype, op, in, n, out, n, count, es, n);
	case R2_OP_REDUCE:
		if (root < 0)
			return -EINVAL;
		for (int i = 0; i < n; i++)
			devs[idev[i]] = true;
		return reduce_spread(j, devs, dtype, op, in, n, &out[root], 1, count, es, n);
	case R2_OP_REDUCESCATTER:
		for (int d = 0; d < n && r == 0; d++) {
			struct buf ins[MAX_OPS];
			for (int k = 0; k < n; k++)
				ins[k] = shift(in[k], (uint64_t)d * blk);
			r = do_reduce(j, odev[d], dtype, op, ins, n, &out[d], 1, count, 0, n);
		}
		return r;
	case R2_OP_ALLGATHER:
		for (int s = 0; s < n && r == 0; s++) {
			struct buf dst[MAX_OPS];
			for (int d = 0; d < n; d++)
				dst[d] = shift(out[d], (uint64_t)s * blk);
			r = copy_pull(j, in[s], dst, odev, n, blk);
		}
		return r;
	case R2_OP_BROADCAST:
		if (root < 0)
			return -EINVAL;
		return copy_pull(j, in[root], out, odev, n, blk);
	case R2_OP_SEND:
		if (n != 2)
			return -EINVAL;
		return copy_pull(j, in[0], &out[1], &odev[1], 1, blk);
	default:
		return -EINVAL;
	}
}

static int start(struct gjob *j)
{
	int r = launch(j);

	for (int g = 0; g < r2g.ndev; g++) {
		if (!j->used[g])
			continue;
		cudaSetDevice(r2g.dev[g].ord);
		j->ev[g] = r2g_ev_get(g);
		if (!j->ev[g] || cudaEventRecord(j->ev[g], r2g.dev[g].st) != cudaSuccess) {
			/* cannot track it: wait for the stream instead */
			cudaStreamSynchronize(r2g.dev[g].st);
			r2g_ev_put(g, j->ev[g]);
			j->ev[g] = NULL;
		}
	}
	return r;
}

/* 1: all done, 0: not yet; negative: failed */
static int poll_done(struct gjob *j)
{
	for (int g = 0; g < r2g.ndev; g++) {
		cudaError_t e;
		if (!j->ev[g])
			continue;
		e = cudaEventQuery(j->ev[g]);
		if (e == cudaErrorNotReady) {
			(void)cudaGetLastError(); /* "not ready" is recorded as an error */
			return 0;
		}
		if (e != cudaSuccess)
			return cuda_err(e);
		r2g_ev_put(g, j->ev[g]);
		j->ev[g] = NULL;
	}
	return 1;
}

static bool ready(struct gjob *j)
{
	return r2g_slots_ready(j->x->nops, &j->sl);
}

static int aborted(struct gjob *j, uint64_t now)
{
	return r2g_op_aborted(j->x, j->t0, now);
}

static void finish(struct gjob *j, int status)
{
	struct r2_comm *c = j->c;
	struct r2d *d = j->d;

	if (status < 0)
		log_warn("communicator %u: GPU %s failed: %s", c->id, r2_opcode_name(j->x->opcode),
			 r2ccl_strerror(status));
	for (int g = 0; g < r2g.ndev; g++) {
		if (j->ev[g]) {
			/* an error after launch: let the GPU finish with the buffers */
			cudaEventSynchronize(j->ev[g]);
			r2g_ev_put(g, j->ev[g]);
		}
	}
	r2g_slots_release(j->x->nops, &j->sl, status);
	r2g.eng->exec_done(j->x, status); /* drops the job's reference on c */
	(void)d;
	free(j);
}

/* Moves what r2_gpu_exec queued to the end of the worker's list (sleeping
 * while there is nothing at all); false once stopping with nothing left. */
static bool take_queued(struct gjob **list, struct gjob ***tail)
{
	if (!*list) {
		/* idle: poll the queue a little before sleeping (the next
		 * operation often follows at once; a wake-up costs more) */
		uint64_t t = r2_now_us();
		while (!__atomic_load_n(&Q.head, __ATOMIC_ACQUIRE) &&
		       !__atomic_load_n(&r2g.stop, __ATOMIC_RELAXED) && r2_now_us() - t < 200)
			for (int i = 0; i < 16; i++)
				r2_cpu_relax();
	}
	if (!*list || __atomic_load_n(&Q.head, __ATOMIC_RELAXED)) {
		pthread_mutex_lock(&Q.lock);
		while (!*list && !Q.head && !r2g.stop)
			pthread_cond_wait(&Q.cond, &Q.lock);
		if (Q.head) {
			**tail = Q.head;
			*tail = Q.tail;
			Q.head = NULL;
			Q.tail = &Q.head;
		}
		pthread_mutex_unlock(&Q.lock);
		if (!*list && r2g.stop)
			return false;
	}
	return true;
}

/* True while an earlier operation of j's communicator is in the list. */
static bool blocked(const struct gjob *list, const struct gjob *j)
{
	for (const struct gjob *e = list; e != j; e = e->next)
		if (e->c == j->c)
			return true;
	return false;
}

/* Advances j: false while it goes on, true once it is over (*status). */
static bool step(struct gjob *j, uint64_t now, bool *progress, int *status)
{
	int r;

	if (j->status < 0) {
		r = j->status;
	} else if (!j->running) {
		r = aborted(j, now);
		if (r == 0 && ready(j)) {
			r = start(j);
			j->running = true;
			*progress = true;
		}
		if (r == 0)
			return false;
	} else {
		r = poll_done(j);
		if (r == 0)
			return false;
		if (r > 0)
			r = 0;
	}
	*status = r;
	return true;
}

/* One pass over the list: starts what is ready, finishes what is over.
 * True if anything moved. */
static bool run_list(struct gjob **list, struct gjob ***tail, uint64_t now)
{
	bool progress = false;

	for (struct gjob **pp = list, *j; (j = *pp);) {
		int r = 0;

		if (blocked(*list, j) || !step(j, now, &progress, &r)) {
			pp = &j->next;
			continue;
		}
		*pp = j->next;
		if (*tail == &j->next)
			*tail = pp;
		finish(j, r);
		progress = true;
	}
	return progress;
}

static void *worker(void *arg)
{
	struct gjob *list = NULL, **tail = &list;
	uint64_t last_progress = 0;
	unsigned spins = 0;

	(void)arg;
	while (take_queued(&list, &tail)) {
		uint64_t now = r2_now_us();

		if (run_list(&list, &tail, now)) {
			last_progress = now;
			spins = 0;
		} else if (list) {
			/* spin while work is near (latency: the client's "ready"
			 * and the GPU's completion are polled); yield now and
			 * then; sleep only after 100 ms without progress */
			if (now - last_progress > 100000) {
				struct timespec ts = { 0, 50000 };
				nanosleep(&ts, NULL);
			} else if (++spins % 64 == 0) {
				sched_yield();
			} else {
				for (int i = 0; i < 32; i++)
					r2_cpu_relax();
			}
		}
	}
	return NULL;
}

int r2g_worker_start(void)
{
	if (r2_thread_create(&Q.thread, worker, NULL) != 0)
		return -EAGAIN;
	pthread_setname_np(Q.thread, "r2-gpu");
	return 0;
}

void r2g_worker_stop(void)
{
	pthread_mutex_lock(&Q.lock);
	r2g.stop = true;
	pthread_cond_signal(&Q.cond);
	pthread_mutex_unlock(&Q.lock);
	pthread_join(Q.thread, NULL);
}

int r2_gpu_exec(struct r2_exec *x)
{
	struct r2d *d = x->c->d;
	struct gjob *j;

	if (r2g.err || !r2g.started)
		return -ENODEV;
	if (x->nops > MAX_OPS)
		return -E2BIG;
	for (int i = 0; i < x->nops; i++) {
		const struct r2_op *op = x->ops[i];
		if ((op->sendref && !r2_mem_is_gpu(op->sendref)) ||
		    (op->recvref && !r2_mem_is_gpu(op->recvref))) {
			log_warn("communicator %u: %s mixes host and GPU buffers (not supported)",
				 x->c->id, r2_opcode_name(x->opcode));
			return -EOPNOTSUPP;
		}
	}
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->x = x;
	j->c = x->c;
	j->d = d;
	j->t0 = r2_now_us();
	/* Q.lock first: once the worker is told to stop nothing more is
	 * queued, so every job it was given ends before it does */
	pthread_mutex_lock(&Q.lock);
	if (r2g.stop) {
		pthread_mutex_unlock(&Q.lock);
		free(j);
		return R2CCL_E_SHUTDOWN;
	}
	pthread_mutex_lock(&d->lock);
	j->status = r2g_slots_resolve(x, &j->sl);
	x->c->refs++;
	pthread_mutex_unlock(&d->lock);
	*Q.tail = j;
	Q.tail = &j->next;
	pthread_cond_signal(&Q.cond);
	pthread_mutex_unlock(&Q.lock);
	return R2_EXEC_PENDING;
}
