/* SPDX-License-Identifier: MIT */
/*
 * libnccl: the memory paths. Host memory (from ncclMemAlloc without a GPU, or
 * registered with ncclCommRegister) is staged through the communicator's
 * r2ccl memory and the operation runs blocking. GPU memory is registered with
 * the daemon implicitly, once per allocation (cuMemGetAddressRange's base and
 * size, and the allocation's buffer id to see an address reused after a
 * free), and the operation is queued on the stream (libclient/gpu.c); an
 * allocation the daemon cannot open (cuMem without a POSIX fd handle type,
 * as PyTorch's expandable segments) goes through a device staging buffer of
 * the communicator that it can. docs/nccl.md gives the costs.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "nccl_int.h"
#include "reduce.h"

/* ---- host ranges the library knows ---- */

struct nccl_hreg {
	struct nccl_hreg *next;
	char *base;
	size_t size;
	struct ncclComm *comm; /* NULL: from ncclMemAlloc, good for every communicator */
	bool gpu;              /* an ncclMemAlloc device allocation (size for the free) */
};

static pthread_mutex_t hlock = PTHREAD_MUTEX_INITIALIZER;
static struct nccl_hreg *hregs;

static bool host_known(struct ncclComm *comm, const void *p, size_t len)
{
	const char *a = p;
	bool ok = false;

	pthread_mutex_lock(&hlock);
	for (struct nccl_hreg *h = hregs; h && !ok; h = h->next)
		ok = !h->gpu && (!h->comm || h->comm == comm) && a >= h->base &&
		     a < h->base + h->size && len <= (size_t)(h->base + h->size - a);
	pthread_mutex_unlock(&hlock);
	return ok;
}

static struct nccl_hreg *hreg_add(char *base, size_t size, struct ncclComm *comm, bool gpu)
{
	struct nccl_hreg *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->base = base;
	h->size = size;
	h->comm = comm;
	h->gpu = gpu;
	pthread_mutex_lock(&hlock);
	h->next = hregs;
	hregs = h;
	pthread_mutex_unlock(&hlock);
	return h;
}

static struct nccl_hreg *hreg_take(const void *base, struct nccl_hreg *which)
{
	struct nccl_hreg **pp, *h = NULL;

	pthread_mutex_lock(&hlock);
	for (pp = &hregs; *pp; pp = &(*pp)->next)
		if (which ? *pp == which : (*pp)->base == base && !(*pp)->comm) {
			h = *pp;
			*pp = h->next;
			break;
		}
	pthread_mutex_unlock(&hlock);
	return h;
}

ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
	bool gpu;
	size_t asize;
	void *p;
	int r;

	if (!ptr || !size)
		return nccl_fail(NULL, ncclInvalidArgument, "ncclMemAlloc: ptr NULL or size 0");
	*ptr = NULL;
	gpu = nccl_cuda_current_device() >= 0;
	if (gpu) {
		/* device memory r2ccld can open (a POSIX fd): zero copy */
		r = nccl_cuda_alloc_exportable(-1, size, &p, &asize);
		if (r < 0)
			return nccl_fail(NULL, r == -ENOMEM ? ncclSystemError : ncclUnhandledCudaError,
					 "ncclMemAlloc: %zu bytes of device memory: %s", size,
					 r2ccl_strerror(r));
	} else {
		/* no GPU: host memory, usable by every communicator (staged) */
		asize = size;
		p = mmap(NULL, asize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return nccl_fail(NULL, ncclSystemError, "ncclMemAlloc: %zu bytes: %s", size,
					 strerror(errno));
	}
	if (!hreg_add(p, asize, NULL, gpu)) {
		if (gpu)
			nccl_cuda_free_exportable(p, asize);
		else
			munmap(p, asize);
		return nccl_fail(NULL, ncclSystemError, "ncclMemAlloc: out of memory");
	}
	*ptr = p;
	return ncclSuccess;
}
NCCL_ALIAS(ncclMemAlloc);

ncclResult_t ncclMemFree(void *ptr)
{
	struct nccl_hreg *h;
	int r = 0;

	if (!ptr)
		return ncclSuccess;
	h = hreg_take(ptr, NULL);
	if (!h)
		return nccl_fail(NULL, ncclInvalidArgument,
				 "ncclMemFree: %p was not returned by ncclMemAlloc", ptr);
	if (h->gpu)
		r = nccl_cuda_free_exportable(h->base, h->size);
	else if (munmap(h->base, h->size) < 0)
		r = -errno;
	free(h);
	return r < 0 ? nccl_fail(NULL, ncclUnhandledCudaError, "ncclMemFree: %s", r2ccl_strerror(r))
		     : ncclSuccess;
}
NCCL_ALIAS(ncclMemFree);

/* ---- classification ---- */

struct nccl_greg {
	struct nccl_greg *next;
	uintptr_t base;
	size_t size;
	unsigned long long bufid;
	bool staged; /* the daemon cannot open it */
};

ncclResult_t nccl_mem_classify(struct ncclComm *comm, const void *p, size_t len,
			       enum nccl_memkind *kind)
{
	if (!p)
		return nccl_fail(comm, ncclInvalidArgument, "buffer is NULL (%zu bytes)", len);
	/* inside a GPU allocation this communicator registered: no driver
	 * call (greg_get checks that it is still the same allocation) */
	for (struct nccl_greg *g = comm->gregs; g; g = g->next)
		if ((uintptr_t)p >= g->base && (uintptr_t)p < g->base + g->size) {
			*kind = NCCL_MEM_GPU;
			return ncclSuccess;
		}
	if (nccl_cuda_is_device_ptr(p)) {
		*kind = NCCL_MEM_GPU;
		return ncclSuccess;
	}
	if (host_known(comm, p, len)) {
		*kind = NCCL_MEM_HOST;
		return ncclSuccess;
	}
	return nccl_fail(comm, ncclInvalidArgument,
			 "buffer %p (%zu bytes) is neither GPU memory nor host memory from "
			 "ncclMemAlloc or ncclCommRegister",
			 p, len);
}

/* ---- sizes of one operation ---- */

static void op_bytes(const struct nccl_op *o, size_t *s, size_t *r)
{
	size_t n = o->count * nccl_dtype_size(o->dtype), all = n * (size_t)o->comm->nranks;
	bool root = o->comm->rank == o->root;

	*s = *r = 0;
	switch (o->kind) {
	case NCCL_OP_ALLREDUCE:
		*s = *r = n;
		break;
	case NCCL_OP_ALLGATHER:
		*s = n, *r = all;
		break;
	case NCCL_OP_REDUCESCATTER:
		*s = all, *r = n;
		break;
	case NCCL_OP_BROADCAST:
		*s = root ? n : 0, *r = n;
		break;
	case NCCL_OP_REDUCE:
		*s = n, *r = root ? n : 0;
		break;
	case NCCL_OP_SEND:
		*s = n;
		break;
	case NCCL_OP_RECV:
		*r = n;
		break;
	}
}

/* r2ccl's type and op for o; copies of types r2ccl lacks go as bytes */
static ncclResult_t op_r2(struct nccl_op *o, r2ccl_dtype_t *t, size_t *count, r2ccl_redop_t *op,
			  struct nccl_premul **pm)
{
	bool reduces = o->kind == NCCL_OP_ALLREDUCE || o->kind == NCCL_OP_REDUCESCATTER ||
		       o->kind == NCCL_OP_REDUCE;
	int rt = nccl_dtype_r2(o->dtype);

	*pm = NULL;
	*count = o->count;
	*op = R2CCL_SUM;
	if (rt < 0) {
		if (reduces)
			return nccl_fail(o->comm, ncclInvalidArgument,
					 "reductions of data type %d (float8) are not supported",
					 (int)o->dtype);
		*t = R2CCL_UINT8;
		*count = o->count * nccl_dtype_size(o->dtype);
	} else {
		*t = (r2ccl_dtype_t)rt;
	}
	if (!reduces)
		return ncclSuccess;
	if ((int)o->op >= 0 && o->op < ncclNumOps) {
		static const r2ccl_redop_t map[] = { R2CCL_SUM, R2CCL_PROD, R2CCL_MAX, R2CCL_MIN,
						     R2CCL_AVG };
		*op = map[o->op];
		return ncclSuccess;
	}
	if ((int)o->op < ncclNumOps + NCCL_MAX_PREMUL && (int)o->op >= ncclNumOps &&
	    o->pm.used) { /* copied when the op was called (submit) */
		*pm = &o->pm;
		if ((*pm)->dtype != o->dtype)
			return nccl_fail(o->comm, ncclInvalidArgument,
					 "reduction op %d was created for data type %d, used with %d",
					 (int)o->op, (int)(*pm)->dtype, (int)o->dtype);
		return ncclSuccess;
	}
	return nccl_fail(o->comm, ncclInvalidArgument, "reduction op %d is not valid here",
			 (int)o->op);
}

/* ---- host path ---- */

static ncclResult_t hstage_get(struct ncclComm *comm, size_t need)
{
	void *p;
	size_t sz;
	int r;

	if (comm->hstage_size >= need)
		return ncclSuccess;
	sz = comm->hstage_size ? comm->hstage_size : 1 << 20;
	while (sz < need)
		sz *= 2;
	r = r2ccl_mem_alloc(comm->client, sz, &p);
	if (r < 0)
		return nccl_fail_r2(comm, r, "staging memory for host buffers");
	if (comm->hstage)
		r2ccl_mem_free(comm->client, comm->hstage);
	comm->hstage = p;
	comm->hstage_size = sz;
	return ncclSuccess;
}

/* PreMulSum's scaling of the input, on its way into the staging memory */
static ncclResult_t premul_copy(struct ncclComm *comm, struct nccl_premul *pm, void *dst,
				const void *src, size_t count)
{
	double s = pm->scalar;
	int64_t is = pm->iscalar;

	if (pm->residence == ncclScalarDevice) {
		char b[8] = { 0 };
		size_t es = nccl_dtype_size(pm->dtype);
		if (nccl_cuda_is_device_ptr(pm->scalar_dev)) {
			if (nccl_cuda_memcpy(b, pm->scalar_dev, es) < 0)
				return nccl_fail(comm, ncclUnhandledCudaError,
						 "PreMulSum: reading the scalar failed");
		} else {
			memcpy(b, pm->scalar_dev, es);
		}
		switch (pm->dtype) {
		case ncclFloat16: s = r2_half_to_float(*(uint16_t *)b); break;
		case ncclBfloat16: s = r2_bf16_to_float(*(uint16_t *)b); break;
		case ncclFloat32: s = *(float *)b; break;
		case ncclFloat64: s = *(double *)b; break;
		case ncclInt8: is = *(int8_t *)b; break;
		case ncclUint8: is = *(uint8_t *)b; break;
		case ncclInt32: is = *(int32_t *)b; break;
		case ncclUint32: is = *(uint32_t *)b; break;
		default: is = *(int64_t *)b; break;
		}
	}
	for (size_t i = 0; i < count; i++) {
		switch (pm->dtype) {
		case ncclFloat16:
			((uint16_t *)dst)[i] = r2_float_to_half(
				(float)(r2_half_to_float(((const uint16_t *)src)[i]) * s));
			break;
		case ncclBfloat16:
			((uint16_t *)dst)[i] = r2_float_to_bf16(
				(float)(r2_bf16_to_float(((const uint16_t *)src)[i]) * s));
			break;
		case ncclFloat32:
			((float *)dst)[i] = (float)(((const float *)src)[i] * s);
			break;
		case ncclFloat64:
			((double *)dst)[i] = ((const double *)src)[i] * s;
			break;
		case ncclInt8: case ncclUint8:
			((uint8_t *)dst)[i] = (uint8_t)(((const uint8_t *)src)[i] * (uint64_t)is);
			break;
		case ncclInt32: case ncclUint32:
			((uint32_t *)dst)[i] = (uint32_t)(((const uint32_t *)src)[i] * (uint64_t)is);
			break;
		default:
			((uint64_t *)dst)[i] = ((const uint64_t *)src)[i] * (uint64_t)is;
			break;
		}
	}
	return ncclSuccess;
}

static int r2_run(struct nccl_op *o, const void *s, void *rb, size_t count, r2ccl_dtype_t t,
		  r2ccl_redop_t op)
{
	r2ccl_comm_t *c = o->comm->comm;

	switch (o->kind) {
	case NCCL_OP_ALLREDUCE: return r2ccl_allreduce(c, s, rb, count, t, op);
	case NCCL_OP_ALLGATHER: return r2ccl_allgather(c, s, rb, count, t);
	case NCCL_OP_REDUCESCATTER: return r2ccl_reducescatter(c, s, rb, count, t, op);
	case NCCL_OP_BROADCAST: return r2ccl_broadcast(c, s, rb, count, t, o->root);
	case NCCL_OP_REDUCE: return r2ccl_reduce(c, s, rb, count, t, op, o->root);
	case NCCL_OP_SEND: return r2ccl_send(c, s, count, t, o->root);
	case NCCL_OP_RECV: return r2ccl_recv(c, rb, count, t, o->root);
	}
	return -EINVAL;
}

static int r2_run_stream(struct nccl_op *o, const void *s, void *rb, size_t count,
			 r2ccl_dtype_t t, r2ccl_redop_t op)
{
	r2ccl_comm_t *c = o->comm->comm;
	void *st = (void *)o->stream;

	switch (o->kind) {
	case NCCL_OP_ALLREDUCE: return r2ccl_allreduce_stream(c, s, rb, count, t, op, st);
	case NCCL_OP_ALLGATHER: return r2ccl_allgather_stream(c, s, rb, count, t, st);
	case NCCL_OP_REDUCESCATTER: return r2ccl_reducescatter_stream(c, s, rb, count, t, op, st);
	case NCCL_OP_BROADCAST: return r2ccl_broadcast_stream(c, s, rb, count, t, o->root, st);
	case NCCL_OP_REDUCE: return r2ccl_reduce_stream(c, s, rb, count, t, op, o->root, st);
	case NCCL_OP_SEND: return r2ccl_send_stream(c, s, count, t, o->root, st);
	case NCCL_OP_RECV: return r2ccl_recv_stream(c, rb, count, t, o->root, st);
	}
	return -EINVAL;
}

static const char *kind_name(enum nccl_opkind k)
{
	static const char *const n[] = { "ncclAllReduce", "ncclAllGather", "ncclReduceScatter",
					 "ncclBroadcast", "ncclReduce",	   "ncclSend",
					 "ncclRecv" };
	return n[k];
}

ncclResult_t nccl_run_host(struct nccl_op *o)
{
	struct ncclComm *comm = o->comm;
	struct nccl_premul *pm;
	size_t sb, rb, count, soff;
	r2ccl_dtype_t t;
	r2ccl_redop_t op;
	ncclResult_t res;
	bool inplace;
	char *st;
	int r;

	res = op_r2(o, &t, &count, &op, &pm);
	if (res != ncclSuccess)
		return res;
	op_bytes(o, &sb, &rb);
	/* in place stays in place in the staging memory (r2ccld's in-place
	 * path moves less) */
	inplace = o->sendbuff == o->recvbuff && sb == rb &&
		  (o->kind == NCCL_OP_ALLREDUCE || o->kind == NCCL_OP_BROADCAST ||
		   o->kind == NCCL_OP_REDUCE);
	soff = inplace ? 0 : (rb + 63) & ~(size_t)63;
	res = hstage_get(comm, soff + sb ? soff + sb : 64);
	if (res != ncclSuccess)
		return res;
	/* host memory the GPU may still be writing: wait for the stream (a
	 * process with no CUDA context has no GPU work to wait for) */
	if (nccl_cuda_current_device() >= 0 && nccl_cuda_stream_sync(o->stream) < 0)
		return nccl_fail(comm, ncclUnhandledCudaError, "%s: the stream failed",
				 kind_name(o->kind));
	st = comm->hstage;
	if (sb) {
		if (pm) {
			res = premul_copy(comm, pm, st + soff, o->sendbuff, sb / nccl_dtype_size(o->dtype));
			if (res != ncclSuccess)
				return res;
		} else {
			memcpy(st + soff, o->sendbuff, sb);
		}
	}
	r = r2_run(o, st + soff, st, count, t, op);
	if (r < 0) {
		res = nccl_fail_r2(comm, r, kind_name(o->kind));
		int zero = 0;
		atomic_compare_exchange_strong(&comm->async_err, &zero, (int)res);
		return res;
	}
	if (rb)
		memcpy(o->recvbuff, st, rb);
	return ncclSuccess;
}

/* ---- GPU path ---- */


struct gstage {
	struct gstage *next;
	void *ptr;
	size_t size;
};

static ncclResult_t greg_get(struct ncclComm *comm, const void *p, size_t len,
			     struct nccl_greg **out)
{
	struct nccl_greg **pp, *g;
	unsigned long long id;
	uintptr_t base;
	size_t size;
	int r;

	/* the common case in one driver call: an allocation seen before,
	 * still the same one (its buffer id) */
	for (g = comm->gregs; g; g = g->next) {
		if ((uintptr_t)p < g->base || (uintptr_t)p >= g->base + g->size)
			continue;
		if ((uintptr_t)p + len <= g->base + g->size && nccl_cuda_buffer_id(p) == g->bufid &&
		    g->bufid) {
			*out = g;
			return ncclSuccess;
		}
		break;
	}
	r = nccl_cuda_range(p, &base, &size, &id);
	if (r < 0)
		return nccl_fail(comm, ncclInvalidArgument, "GPU buffer %p: not in an allocation", p);
	if ((uintptr_t)p + len > base + size) {
		/* over several mappings of one reserved range (PyTorch's
		 * expandable segments map each piece separately): no one
		 * allocation r2ccld could open holds it; staged, not cached */
		static struct nccl_greg span = { .staged = true };
		*out = &span;
		return ncclSuccess;
	}
	for (pp = &comm->gregs; (g = *pp); pp = &g->next) {
		if (g->base != base)
			continue;
		if (g->size == size && g->bufid == id) {
			*out = g;
			return ncclSuccess;
		}
		/* freed and allocated again at the same address: register anew */
		*pp = g->next;
		if (!g->staged)
			r2ccl_mem_deregister_gpu(comm->client, (void *)g->base);
		nccl_log(NCCL_LOG_INFO, "allocation at %#lx reused (buffer id %llu -> %llu)",
			 (unsigned long)base, g->bufid, id);
		free(g);
		break;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return nccl_fail(comm, ncclSystemError, "out of memory");
	g->base = base;
	g->size = size;
	g->bufid = id;
	r = r2ccl_mem_register_gpu(comm->client, (void *)base, size);
	if (r == -EOPNOTSUPP || r == -EPERM) {
		/* -EPERM: r2ccld refused to open it (gpu_legacy_ipc) */
		g->staged = true;
		nccl_log(NCCL_LOG_INFO,
			 "GPU allocation at %#lx (%zu bytes) cannot be shared with r2ccld: staged "
			 "(%s)",
			 (unsigned long)base, size, r2ccl_last_error());
	} else if (r < 0) {
		free(g);
		return nccl_fail_r2(comm, r, "registering GPU memory with r2ccld");
	}
	g->next = comm->gregs;
	comm->gregs = g;
	*out = g;
	return ncclSuccess;
}

static ncclResult_t gstage_get(struct ncclComm *comm, size_t need, cudaStream_t stream)
{
	struct gstage *s;
	size_t sz, asz;
	void *p;
	int r;

	/* one staging buffer per communicator, ordered on the stream that
	 * used it last: another stream first waits for that one */
	if (comm->gstage && comm->gstage_stream != stream &&
	    nccl_cuda_stream_sync(comm->gstage_stream) < 0)
		return nccl_fail(comm, ncclUnhandledCudaError, "staging: the previous stream failed");
	comm->gstage_stream = stream;
	if (comm->gstage_size >= need)
		return ncclSuccess;
	sz = comm->gstage_size ? comm->gstage_size * 2 : 4 << 20;
	while (sz < need)
		sz *= 2;
	r = nccl_cuda_alloc_exportable(comm->cudev, sz, &p, &asz);
	if (r < 0)
		return nccl_fail(comm, ncclUnhandledCudaError, "staging buffer of %zu bytes: %s", sz,
				 r2ccl_strerror(r));
	r = r2ccl_mem_register_gpu(comm->client, p, asz);
	if (r < 0) {
		nccl_cuda_free_exportable(p, asz);
		return nccl_fail_r2(comm, r, "registering the staging buffer");
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		r2ccl_mem_deregister_gpu(comm->client, p);
		nccl_cuda_free_exportable(p, asz);
		return nccl_fail(comm, ncclSystemError, "out of memory");
	}
	/* older buffers stay until the communicator goes: queued work may
	 * still use them */
	s->ptr = p;
	s->size = asz;
	s->next = comm->gstage_list;
	comm->gstage_list = s;
	comm->gstage = (uintptr_t)p;
	comm->gstage_size = asz;
	return ncclSuccess;
}

/* Remembers the streams a communicator queued work on, for the flush of
 * ncclCommFinalize (the oldest is forgotten past 16: it was synchronized
 * then). */
static void note_stream(struct ncclComm *comm, cudaStream_t s)
{
	int i;

	for (i = 0; i < comm->nstreams; i++)
		if (comm->streams[i] == s)
			return;
	if (comm->nstreams == (int)(sizeof(comm->streams) / sizeof(comm->streams[0]))) {
		nccl_cuda_stream_sync(comm->streams[0]);
		memmove(comm->streams, comm->streams + 1,
			sizeof(comm->streams[0]) * (size_t)(comm->nstreams - 1));
		comm->nstreams--;
	}
	comm->streams[comm->nstreams++] = s;
}

/* PreMulSum on GPU buffers where the scaling kernel cannot run (a driver
 * that refuses its PTX): the input goes through the host: the stream is
 * synchronized, the input copied down and scaled into the staging memory,
 * the sum runs there and the result goes back to the GPU before the call
 * returns (it blocks the host: docs/nccl.md gives the cost). */
static ncclResult_t premul_host(struct nccl_op *o, struct nccl_premul *pm, r2ccl_dtype_t t,
				size_t count)
{
	struct ncclComm *comm = o->comm;
	size_t sb, rb, soff;
	ncclResult_t res;
	void *tmp;
	char *st;
	int r;

	op_bytes(o, &sb, &rb);
	soff = (rb + 63) & ~(size_t)63;
	res = hstage_get(comm, soff + sb ? soff + sb : 64);
	if (res != ncclSuccess)
		return res;
	if (nccl_cuda_stream_sync(o->stream) < 0)
		return nccl_fail(comm, ncclUnhandledCudaError, "PreMulSum: the stream failed");
	tmp = malloc(sb ? sb : 1);
	if (!tmp)
		return nccl_fail(comm, ncclSystemError, "out of memory");
	st = comm->hstage;
	if (nccl_cuda_memcpy(tmp, o->sendbuff, sb) < 0) {
		free(tmp);
		return nccl_fail(comm, ncclUnhandledCudaError, "PreMulSum: copy from the GPU");
	}
	res = premul_copy(comm, pm, st + soff, tmp, sb / nccl_dtype_size(o->dtype));
	free(tmp);
	if (res != ncclSuccess)
		return res;
	r = r2_run(o, st + soff, st, count, t, R2CCL_SUM);
	if (r < 0)
		return nccl_fail_r2(comm, r, kind_name(o->kind));
	if (rb && nccl_cuda_memcpy(o->recvbuff, st, rb) < 0)
		return nccl_fail(comm, ncclUnhandledCudaError, "PreMulSum: copy to the GPU");
	return ncclSuccess;
}

/* PreMulSum on GPU buffers, stream-ordered: r2ccld's kernels have no
 * pre-multiplication, so the input is scaled on the caller's stream
 * (premul.cu) into the communicator's staging buffer, which r2ccld can open,
 * and the sum runs from there as any stream-ordered sum; a staged output
 * comes back with a copy on the stream. Nothing waits on the host. */
static ncclResult_t premul_gpu(struct nccl_op *o, struct nccl_premul *pm, r2ccl_dtype_t t,
			       size_t count)
{
	struct ncclComm *comm = o->comm;
	struct nccl_greg *gr = NULL;
	const void *scalar = NULL;
	size_t sb, rb, soff, es = nccl_dtype_size(o->dtype);
	void *rbuf = o->recvbuff;
	ncclResult_t res;
	char *in;
	int r;

	op_bytes(o, &sb, &rb);
	if (rb && (res = greg_get(comm, rbuf, rb, &gr)) != ncclSuccess)
		return res;
	if (pm->residence == ncclScalarDevice) {
		scalar = pm->scalar_dev;
		if (!nccl_cuda_is_device_ptr(scalar))
			return premul_host(o, pm, t, count); /* host memory: read now */
	}
	soff = (rb + 255) & ~(size_t)255;
	res = gstage_get(comm, soff + sb ? soff + sb : 256, o->stream);
	if (res != ncclSuccess)
		return res;
	in = (char *)comm->gstage + soff;
	r = nccl_cuda_premul(&comm->kmod, o->dtype, o->sendbuff, in, sb / es, scalar, pm->scalar,
			     pm->iscalar, o->stream);
	if (r == -ENOSYS)
		return premul_host(o, pm, t, count);
	if (r < 0)
		return nccl_fail(comm, ncclUnhandledCudaError, "PreMulSum: the scaling kernel");
	if (gr && gr->staged)
		rbuf = (void *)comm->gstage;
	r = r2_run_stream(o, in, rbuf, count, t, R2CCL_SUM);
	if (r < 0)
		return nccl_fail_r2(comm, r, kind_name(o->kind));
	note_stream(comm, o->stream);
	if (rbuf != o->recvbuff && nccl_cuda_memcpy_async(o->recvbuff, rbuf, rb, o->stream) < 0)
		return nccl_fail(comm, ncclUnhandledCudaError, "staging copy out");
	return ncclSuccess;
}

ncclResult_t nccl_run_gpu(struct nccl_op *o)
{
	struct ncclComm *comm = o->comm;
	struct nccl_greg *gs = NULL, *gr = NULL;
	struct nccl_premul *pm;
	const void *s = o->sendbuff;
	void *rbuf = o->recvbuff;
	size_t sb, rb, count, soff;
	r2ccl_dtype_t t;
	r2ccl_redop_t op;
	ncclResult_t res;
	int r;

	if (nccl_cuda_stream_capturing(o->stream) != 0)
		return nccl_fail(comm, ncclInvalidUsage,
				 "%s on a stream being captured into a CUDA graph: R2CCL cannot "
				 "record collectives in graphs (its daemon takes each operation "
				 "when it is called; docs/nccl.md); call it outside the capture",
				 kind_name(o->kind));
	res = op_r2(o, &t, &count, &op, &pm);
	if (res != ncclSuccess)
		return res;
	if (pm)
		return premul_gpu(o, pm, t, count);
	op_bytes(o, &sb, &rb);
	if (sb && (res = greg_get(comm, s, sb, &gs)) != ncclSuccess)
		return res;
	if (rb && gs && gs->bufid && (uintptr_t)rbuf >= gs->base &&
	    (uintptr_t)rbuf + rb <= gs->base + gs->size)
		gr = gs; /* in the allocation just checked (in place): no second driver call */
	else if (rb && (res = greg_get(comm, rbuf, rb, &gr)) != ncclSuccess)
		return res;
	if (gs && gs == gr && gs->staged && sb && rb && (uintptr_t)s < (uintptr_t)rbuf + rb &&
	    (uintptr_t)rbuf < (uintptr_t)s + sb) {
		/* in place (or overlapping, as NCCL's in-place AllGather and
		 * ReduceScatter are): stage the union of both ranges, so the
		 * daemon sees the same aliasing and runs its in-place schedule;
		 * one copy in (the send range), one copy out (the receive range) */
		uintptr_t lo = (uintptr_t)s < (uintptr_t)rbuf ? (uintptr_t)s : (uintptr_t)rbuf;
		uintptr_t hi = (uintptr_t)s + sb > (uintptr_t)rbuf + rb ? (uintptr_t)s + sb
									 : (uintptr_t)rbuf + rb;

		res = gstage_get(comm, hi - lo, o->stream);
		if (res != ncclSuccess)
			return res;
		s = (const void *)(comm->gstage + ((uintptr_t)s - lo));
		rbuf = (void *)(comm->gstage + ((uintptr_t)rbuf - lo));
		if (nccl_cuda_memcpy_async((void *)s, o->sendbuff, sb, o->stream) < 0)
			return nccl_fail(comm, ncclUnhandledCudaError, "staging copy in");
	} else if ((gs && gs->staged) || (gr && gr->staged)) {
		soff = (rb + 255) & ~(size_t)255;
		res = gstage_get(comm, soff + sb ? soff + sb : 256, o->stream);
		if (res != ncclSuccess)
			return res;
		if (gs && gs->staged) {
			s = (const void *)(comm->gstage + soff);
			if (nccl_cuda_memcpy_async((void *)s, o->sendbuff, sb, o->stream) < 0)
				return nccl_fail(comm, ncclUnhandledCudaError, "staging copy in");
		}
		if (gr && gr->staged)
			rbuf = (void *)comm->gstage;
	}
	r = r2_run_stream(o, s, rbuf, count, t, op);
	if (r < 0)
		return nccl_fail_r2(comm, r, kind_name(o->kind));
	note_stream(comm, o->stream);
	if (rbuf != o->recvbuff && nccl_cuda_memcpy_async(o->recvbuff, rbuf, rb, o->stream) < 0)
		return nccl_fail(comm, ncclUnhandledCudaError, "staging copy out");
	return ncclSuccess;
}

void nccl_mem_comm_release(struct ncclComm *comm)
{
	struct gstage *s;
	struct nccl_hreg *h;

	while (comm->gregs) {
		struct nccl_greg *g = comm->gregs;
		comm->gregs = g->next;
		free(g); /* the daemon drops registrations with the session */
	}
	while ((s = comm->gstage_list)) {
		comm->gstage_list = s->next;
		nccl_cuda_stream_sync(comm->gstage_stream); /* work that may still use it */
		nccl_cuda_free_exportable(s->ptr, s->size);
		free(s);
	}
	nccl_cuda_kmod_free(&comm->kmod);
	/* host ranges registered with this communicator */
	pthread_mutex_lock(&hlock);
	for (struct nccl_hreg **pp = &hregs; (h = *pp);) {
		if (h->comm == comm) {
			*pp = h->next;
			free(h);
		} else {
			pp = &h->next;
		}
	}
	pthread_mutex_unlock(&hlock);
	if (comm->hstage && comm->client)
		r2ccl_mem_free(comm->client, comm->hstage);
	comm->hstage = NULL;
}

/* ---- explicit registration ---- */

struct nccl_reg_handle {
	bool gpu;
	struct nccl_hreg *h;
	uintptr_t base;
};

static ncclResult_t do_register(struct ncclComm *comm, void *buff, size_t size, void **handle,
				const char *who)
{
	struct nccl_reg_handle *hd;
	struct nccl_greg *g;
	ncclResult_t res = ncclSuccess;

	if (!comm || !buff || !size || !handle)
		return nccl_fail(comm, ncclInvalidArgument, "%s: NULL argument or size 0", who);
	hd = calloc(1, sizeof(*hd));
	if (!hd)
		return nccl_fail(comm, ncclSystemError, "%s: out of memory", who);
	if (nccl_cuda_is_device_ptr(buff)) {
		/* register now what the first operation would */
		struct nccl_ctx_save sv;
		pthread_mutex_lock(&comm->lock);
		nccl_cuda_ctx_enter(comm->cuctx, &sv);
		res = greg_get(comm, buff, size, &g);
		nccl_cuda_ctx_leave(&sv);
		pthread_mutex_unlock(&comm->lock);
		hd->gpu = true;
		hd->base = res == ncclSuccess ? g->base : 0;
	} else {
		hd->h = hreg_add(buff, size, comm, false);
		if (!hd->h)
			res = nccl_fail(comm, ncclSystemError, "%s: out of memory", who);
	}
	if (res != ncclSuccess) {
		free(hd);
		return res;
	}
	*handle = hd;
	return ncclSuccess;
}

static ncclResult_t do_deregister(struct ncclComm *comm, void *handle, const char *who)
{
	struct nccl_reg_handle *hd = handle;

	if (!comm || !hd)
		return nccl_fail(comm, ncclInvalidArgument, "%s: NULL argument", who);
	if (hd->gpu) {
		/* the registration stays cached while the allocation lives: a
		 * later operation on it would register it again anyway */
	} else if (hreg_take(NULL, hd->h)) {
		free(hd->h);
	}
	free(hd);
	return ncclSuccess;
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle)
{
	return do_register(comm, buff, size, handle, "ncclCommRegister");
}
NCCL_ALIAS(ncclCommRegister);

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
	return do_deregister(comm, handle, "ncclCommDeregister");
}
NCCL_ALIAS(ncclCommDeregister);

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
				    int winFlags)
{
	(void)winFlags; /* R2CCL has no symmetric kernels: a window is a registration */
	return do_register(comm, buff, size, (void **)win, "ncclCommWindowRegister");
}
NCCL_ALIAS(ncclCommWindowRegister);

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
	return do_deregister(comm, win, "ncclCommWindowDeregister");
}
NCCL_ALIAS(ncclCommWindowDeregister);
