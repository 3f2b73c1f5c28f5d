/* SPDX-License-Identifier: MIT */
/*
 * r2ccld's GPU path: registrations of client GPU memory, and the GPU worker
 * thread that runs local collectives over it (README.md beside this file).
 *
 * Memory: a client names an allocation by its CUDA IPC handle (cudaMalloc
 * memory) or by a POSIX fd from cuMemExportToShareableHandle (cuMem). The
 * daemon opens each allocation once per session (cache keyed by the session
 * and the handle / the client's allocation address), in the context of the
 * GPU that holds it, with access from every peer GPU; every registration of
 * a range of it takes a reference, the last one closes it.
 *
 * Work: r2_gpu_exec queues a matched operation; the worker keeps a list of
 * them. One waits until every stream-ordered rank's sync slot says "ready",
 * then the worker launches kernels / copies on its own stream of each GPU
 * involved and records an event there; when every event completed it writes
 * each slot's status and "done" and completes the operation's CQEs.
 * Operations of one communicator run strictly in order; different
 * communicators proceed independently. A rank whose session dies, a broken
 * communicator or the operation timeout end a waiting operation with an
 * error (the surviving ranks' streams are released with that error).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu.h"

#if HAVE_CUDA

#include <cuda.h>
#include <ctype.h>
#include <cuda_runtime_api.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "../engine/comm.h"
#include "../control/control.h" /* r2d_mem_resolve, r2d_mem_put (tests/unit/layers-allow-gpu.txt) */
#include "../engine/exec.h"
#include "gpu_abi.h"
#include "kernels.h"
#include "log.h"
#include "util.h"

#define MAX_DEV 16
#define MAX_OPS R2K_MAX_PTRS

struct gpu_dev {
	int ord;
	uint8_t uuid[16];
	int sms;
	cudaStream_t st;
	cudaEvent_t *evfree; /* worker only */
	int nevfree, capevfree;
};

struct gpu_alloc {
	struct gpu_alloc *next;
	uint64_t sess;
	uint32_t kind;
	uint8_t key[64];
	int dev;
	char *dptr;             /* = map[dev] */
	char *map[MAX_DEV];     /* its address for kernels/copies of each GPU */
	uint64_t size;
	CUmemGenericAllocationHandle h;
	int refs;
};

struct r2_gpu_region {
	struct r2_memreg m; /* first: r2_memreg * <-> r2_gpu_region * */
	struct gpu_alloc *a;
	int dev;
};

/* The sync slots of an operation's stream-ordered ranks (NULL: not one). */
struct slots {
	struct r2_gpu_slot *slot[MAX_OPS];
	struct r2_memreg *ref[MAX_OPS];
	uint32_t seq[MAX_OPS];
};

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

static struct {
	pthread_once_t once;
	int err;
	char errmsg[160];
	int ndev;
	struct gpu_dev dev[MAX_DEV];
	bool copy_ce;        /* copies with the copy engines (cudaMemcpyAsync) */
	int max_blocks;      /* per launch; 0: 2 per SM */
	uint64_t split_min;  /* bytes from which an op is spread over every GPU */
	/* driver entry points */
	CUresult (*memImport)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
	CUresult (*memAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*memMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			   unsigned long long);
	CUresult (*memSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*memUnmap)(CUdeviceptr, size_t);
	CUresult (*memAddressFree)(CUdeviceptr, size_t);
	CUresult (*memRelease)(CUmemGenericAllocationHandle);
	CUresult (*memGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
	/* allocations */
	pthread_mutex_t alloc_lock;
	struct gpu_alloc *allocs;
	/* worker */
	pthread_mutex_t q_lock;
	pthread_cond_t q_cond;
	struct gjob *q_head, **q_tail;
	bool stop, started;
	pthread_t thread;
} G = {
	.once = PTHREAD_ONCE_INIT,
	.alloc_lock = PTHREAD_MUTEX_INITIALIZER,
	.q_lock = PTHREAD_MUTEX_INITIALIZER,
	.q_cond = PTHREAD_COND_INITIALIZER,
};

static void *worker(void *arg);

static void *entry(const char *name)
{
	void *fn = NULL;
	enum cudaDriverEntryPointQueryResult qr;

	if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &qr) !=
		    cudaSuccess ||
	    qr != cudaDriverEntryPointSuccess)
		return NULL;
	return fn;
}

static void gpu_init(void)
{
	cudaError_t e;
	int n = 0;
	const char *v;

	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n <= 0) {
		G.err = -ENODEV;
		snprintf(G.errmsg, sizeof(G.errmsg), "no usable GPU: %s",
			 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		log_warn("gpu: %s", G.errmsg);
		return;
	}
	if (n > MAX_DEV)
		n = MAX_DEV;
	for (int i = 0; i < n; i++) {
		struct cudaDeviceProp p;
		struct gpu_dev *g = &G.dev[i];

		g->ord = i;
		if (cudaSetDevice(i) != cudaSuccess || cudaGetDeviceProperties(&p, i) != cudaSuccess ||
		    cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking) != cudaSuccess) {
			G.err = -ENODEV;
			snprintf(G.errmsg, sizeof(G.errmsg), "GPU %d: %s", i,
				 cudaGetErrorString(cudaGetLastError()));
			log_warn("gpu: %s", G.errmsg);
			return;
		}
		memcpy(g->uuid, p.uuid.bytes, 16);
		g->sms = p.multiProcessorCount;
		log_info("gpu: GPU %d: %s, %d SMs, PCI %04x:%02x:%02x", i, p.name, p.multiProcessorCount,
			 p.pciDomainID, p.pciBusID, p.pciDeviceID);
	}
	for (int i = 0; i < n; i++) {
		for (int j = 0; j < n; j++) {
			int ok = 0;
			if (i == j || cudaDeviceCanAccessPeer(&ok, i, j) != cudaSuccess || !ok)
				continue;
			cudaSetDevice(i);
			if (cudaDeviceEnablePeerAccess(j, 0) != cudaSuccess)
				(void)cudaGetLastError(); /* already enabled */
			log_info("gpu: peer access GPU %d -> GPU %d", i, j);
		}
	}
	G.memImport = entry("cuMemImportFromShareableHandle");
	G.memAddressReserve = entry("cuMemAddressReserve");
	G.memMap = entry("cuMemMap");
	G.memSetAccess = entry("cuMemSetAccess");
	G.memUnmap = entry("cuMemUnmap");
	G.memAddressFree = entry("cuMemAddressFree");
	G.memRelease = entry("cuMemRelease");
	G.memGetAddressRange = entry("cuMemGetAddressRange");
	if (!G.memImport || !G.memAddressReserve || !G.memMap || !G.memSetAccess || !G.memUnmap ||
	    !G.memAddressFree || !G.memRelease || !G.memGetAddressRange) {
		G.err = -ENOSYS;
		snprintf(G.errmsg, sizeof(G.errmsg), "the CUDA driver lacks cuMem entry points");
		log_warn("gpu: %s", G.errmsg);
		return;
	}
	v = getenv("R2CCL_GPU_COPY");
	G.copy_ce = !(v && !strcmp(v, "kernel"));
	v = getenv("R2CCL_GPU_BLOCKS");
	G.max_blocks = v ? atoi(v) : 0;
	v = getenv("R2CCL_GPU_SPLIT_MIN");
	G.split_min = v ? strtoull(v, NULL, 0) : (256u << 10);
	G.ndev = n;
	G.q_tail = &G.q_head;
	if (pthread_create(&G.thread, NULL, worker, NULL) == 0)
		pthread_setname_np(G.thread, "r2-gpu");
	else {
		G.err = -EAGAIN;
		snprintf(G.errmsg, sizeof(G.errmsg), "cannot start the GPU worker");
		return;
	}
	G.started = true;
	log_info("gpu: %d GPUs, copies by %s, worker up", n, G.copy_ce ? "copy engine" : "kernel");
}

static int dev_by_uuid(const uint8_t *uuid)
{
	for (int i = 0; i < G.ndev; i++)
		if (!memcmp(G.dev[i].uuid, uuid, 16))
			return i;
	return -1;
}

/* ---- allocations and regions ---- */

static int alloc_open(struct gpu_alloc *a, const struct r2_gpu_reg_req *req, char *err,
		      size_t errlen)
{
	cudaError_t e;
	CUresult cr;

	cudaSetDevice(G.dev[a->dev].ord);
	if (a->kind == R2_GPU_MEM_IPC) {
		cudaIpcMemHandle_t h;
		void *p = NULL;
		CUdeviceptr base = 0;
		size_t sz = 0;

		memcpy(&h, req->ipc_handle, sizeof(h));
		e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
		if (e != cudaSuccess) {
			log_warn("gpu: cudaIpcOpenMemHandle: %s", cudaGetErrorString(e));
			snprintf(err, errlen, "cudaIpcOpenMemHandle: %s", cudaGetErrorString(e));
			return -EINVAL;
		}
		/* the client's word for the size is not trusted */
		cr = G.memGetAddressRange(&base, &sz, (CUdeviceptr)p);
		if (cr != CUDA_SUCCESS || (uint64_t)sz < req->alloc_size) {
			snprintf(err, errlen, "allocation holds %zu bytes, %llu declared", sz,
				 (unsigned long long)req->alloc_size);
			cudaIpcCloseMemHandle(p);
			return -EINVAL;
		}
		a->dptr = p;
		a->map[a->dev] = p;
		a->size = req->alloc_size;
		/* A legacy IPC mapping serves the context that opened it: open it
		 * in every peer GPU's context too (one context per device may). */
		for (int i = 0; i < G.ndev; i++) {
			int ok = 0;
			void *q = NULL;
			if (i == a->dev || cudaDeviceCanAccessPeer(&ok, G.dev[i].ord,
								   G.dev[a->dev].ord) != cudaSuccess ||
			    !ok)
				continue;
			cudaSetDevice(G.dev[i].ord);
			if (cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess)
				a->map[i] = q;
			else
				log_warn("gpu: GPU %d cannot map memory of GPU %d: %s", i, a->dev,
					 cudaGetErrorString(cudaGetLastError()));
		}
		return 0;
	} else {
		CUmemAccessDesc acc[MAX_DEV];
		CUdeviceptr va = 0;
		size_t nacc = 0;
		int fd = req->fd;

		cr = G.memImport(&a->h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		if (cr != CUDA_SUCCESS) {
			snprintf(err, errlen, "cuMemImportFromShareableHandle: error %d", (int)cr);
			return -EINVAL;
		}
		/* 2 MiB: the granularity of every GPU this targets; cuMemMap
		 * refuses a size over the allocation's own */
		cr = G.memAddressReserve(&va, req->alloc_size, 2u << 20, 0, 0);
		if (cr != CUDA_SUCCESS) {
			snprintf(err, errlen, "cuMemAddressReserve(%llu): error %d",
				 (unsigned long long)req->alloc_size, (int)cr);
			G.memRelease(a->h);
			return -EINVAL;
		}
		cr = G.memMap(va, req->alloc_size, 0, a->h, 0);
		if (cr != CUDA_SUCCESS) {
			snprintf(err, errlen, "cuMemMap(%llu bytes): error %d",
				 (unsigned long long)req->alloc_size, (int)cr);
			G.memAddressFree(va, req->alloc_size);
			G.memRelease(a->h);
			return -EINVAL;
		}
		for (int i = 0; i < G.ndev; i++) {
			int ok = i == a->dev;
			if (!ok && cudaDeviceCanAccessPeer(&ok, G.dev[i].ord, G.dev[a->dev].ord) !=
					   cudaSuccess)
				ok = 0;
			if (!ok)
				continue;
			memset(&acc[nacc], 0, sizeof(acc[nacc]));
			acc[nacc].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
			acc[nacc].location.id = G.dev[i].ord;
			acc[nacc].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
			nacc++;
		}
		cr = G.memSetAccess(va, req->alloc_size, acc, nacc);
		if (cr != CUDA_SUCCESS) {
			snprintf(err, errlen, "cuMemSetAccess: error %d", (int)cr);
			G.memUnmap(va, req->alloc_size);
			G.memAddressFree(va, req->alloc_size);
			G.memRelease(a->h);
			return -EINVAL;
		}
		a->dptr = (char *)(uintptr_t)va;
		for (size_t k = 0; k < nacc; k++)
			for (int i = 0; i < G.ndev; i++)
				if (G.dev[i].ord == acc[k].location.id)
					a->map[i] = a->dptr; /* one mapping, every GPU */
		a->size = req->alloc_size;
		return 0;
	}
}

static void alloc_close(struct gpu_alloc *a)
{
	if (a->kind == R2_GPU_MEM_IPC) {
		for (int i = 0; i < G.ndev; i++) {
			if (!a->map[i])
				continue;
			cudaSetDevice(G.dev[i].ord);
			cudaIpcCloseMemHandle(a->map[i]);
		}
	} else {
		cudaSetDevice(G.dev[a->dev].ord);
		G.memUnmap((CUdeviceptr)(uintptr_t)a->dptr, a->size);
		G.memAddressFree((CUdeviceptr)(uintptr_t)a->dptr, a->size);
		G.memRelease(a->h);
	}
	log_info("gpu: session %llu: released %s allocation of %llu bytes on GPU %d",
		 (unsigned long long)a->sess, a->kind == R2_GPU_MEM_IPC ? "IPC" : "cuMem",
		 (unsigned long long)a->size, G.dev[a->dev].ord);
	free(a);
}

int r2_gpu_region_new(struct r2_session *s, const struct r2_gpu_reg_req *req,
		      struct r2_memreg **out, char *err, size_t errlen)
{
	struct gpu_alloc *a;
	struct r2_gpu_region *g;
	uint8_t key[64];
	int dev, r;

	pthread_once(&G.once, gpu_init);
	if (G.err) {
		snprintf(err, errlen, "%s", G.errmsg);
		return G.err;
	}
	if (req->kind != R2_GPU_MEM_IPC && req->kind != R2_GPU_MEM_CUMEM_FD) {
		snprintf(err, errlen, "unknown GPU memory kind %u", req->kind);
		return -EINVAL;
	}
	if (req->kind == R2_GPU_MEM_IPC && req->ipc_handle_len != R2_GPU_IPC_HANDLE_BYTES) {
		snprintf(err, errlen, "IPC handle of %zu bytes", req->ipc_handle_len);
		return -EINVAL;
	}
	if (req->kind == R2_GPU_MEM_CUMEM_FD && req->fd < 0) {
		snprintf(err, errlen, "no fd");
		return -EINVAL;
	}
	if (req->uuid_len != R2_GPU_UUID_BYTES || (dev = dev_by_uuid(req->uuid)) < 0) {
		snprintf(err, errlen, "no GPU of this host has that UUID");
		return -ENODEV;
	}
	if (req->size == 0 || req->alloc_size == 0 || req->offset > req->alloc_size ||
	    req->size > req->alloc_size - req->offset || req->alloc_size > (1ull << 44)) {
		snprintf(err, errlen, "range %llu+%llu outside an allocation of %llu bytes",
			 (unsigned long long)req->offset, (unsigned long long)req->size,
			 (unsigned long long)req->alloc_size);
		return -EINVAL;
	}
	memset(key, 0, sizeof(key));
	if (req->kind == R2_GPU_MEM_IPC) {
		memcpy(key, req->ipc_handle, 64);
	} else {
		memcpy(key, &req->alloc_base, 8);
		memcpy(key + 8, &req->alloc_size, 8);
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	pthread_mutex_lock(&G.alloc_lock);
	for (a = G.allocs; a; a = a->next)
		if (a->sess == s->id && a->kind == req->kind && !memcmp(a->key, key, 64))
			break;
	if (a) {
		if (a->dev != dev || req->alloc_size > a->size) {
			pthread_mutex_unlock(&G.alloc_lock);
			free(g);
			snprintf(err, errlen, "does not match the allocation registered before");
			return -EINVAL;
		}
		a->refs++;
		if (req->kind == R2_GPU_MEM_CUMEM_FD)
			close(req->fd); /* already imported */
	} else {
		a = calloc(1, sizeof(*a));
		if (!a) {
			pthread_mutex_unlock(&G.alloc_lock);
			free(g);
			return -ENOMEM;
		}
		a->sess = s->id;
		a->kind = req->kind;
		a->dev = dev;
		memcpy(a->key, key, 64);
		r = alloc_open(a, req, err, errlen);
		if (r < 0) {
			pthread_mutex_unlock(&G.alloc_lock);
			free(a);
			free(g);
			return r;
		}
		if (req->kind == R2_GPU_MEM_CUMEM_FD)
			close(req->fd); /* the imported handle keeps the memory */
		a->refs = 1;
		a->next = G.allocs;
		G.allocs = a;
		log_info("gpu: session %llu: opened %s allocation of %llu bytes on GPU %d",
			 (unsigned long long)s->id, a->kind == R2_GPU_MEM_IPC ? "IPC" : "cuMem",
			 (unsigned long long)a->size, G.dev[dev].ord);
	}
	pthread_mutex_unlock(&G.alloc_lock);
	g->a = a;
	g->dev = dev;
	g->m.fd = R2_MEM_FD_GPU;
	g->m.size = req->size;
	g->m.addr = a->dptr + req->offset;
	atomic_init(&g->m.refs, 1);
	*out = &g->m;
	return 0;
}

void r2_gpu_region_free(struct r2_memreg *m)
{
	struct r2_gpu_region *g = (struct r2_gpu_region *)m;
	struct gpu_alloc *a = g->a, **pp;
	bool last = false;

	pthread_mutex_lock(&G.alloc_lock);
	if (--a->refs == 0) {
		for (pp = &G.allocs; *pp; pp = &(*pp)->next)
			if (*pp == a) {
				*pp = a->next;
				break;
			}
		last = true;
	}
	pthread_mutex_unlock(&G.alloc_lock);
	if (last)
		alloc_close(a);
	free(g);
}

static int dev_of(const struct r2_memreg *m)
{
	return ((const struct r2_gpu_region *)m)->dev;
}

/* ---- execution ---- */

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

#define cuda_err(e) cuda_err_at((e), __func__, __LINE__)
static int cuda_err_at(cudaError_t e, const char *fn, int line)
{
	static atomic_int nlogged;

	if (e == cudaSuccess)
		return 0;
	if (atomic_fetch_add(&nlogged, 1) < 50)
		log_warn("gpu: %s:%d: CUDA error %d: %s", fn, line, (int)e, cudaGetErrorString(e));
	return -EIO;
}

static int set_dev(struct gjob *j, int dev)
{
	j->used[dev] = true;
	return cuda_err(cudaSetDevice(G.dev[dev].ord));
}

static int blocks(int dev)
{
	return G.max_blocks > 0 ? G.max_blocks : 2 * G.dev[dev].sms;
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
	return cuda_err((cudaError_t)r2k_reduce(G.dev[dev].st, dtype, op, &a, blocks(dev)));
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
	if (G.copy_ce) {
		for (int o = 0; o < nout && r == 0; o++)
			r = cuda_err(cudaMemcpyAsync(a.out[o], a.in, bytes, cudaMemcpyDefault,
						     G.dev[dev].st));
		return r;
	}
	a.nout = nout;
	a.bytes = bytes;
	return cuda_err((cudaError_t)r2k_copy(G.dev[dev].st, &a, blocks(dev)));
}

/* Reduction over all inputs into all outputs, spread over the GPUs of devs[]
 * (contiguous slices) when large enough. */
static int reduce_spread(struct gjob *j, const bool *devs, int dtype, int op,
			 const struct buf *in, int nin, const struct buf *out, int nout, uint64_t n,
			 size_t es, int div)
{
	int list[MAX_DEV], nd = 0, r = 0;
	uint64_t per, lo = 0;

	for (int g = 0; g < G.ndev; g++)
		if (devs[g])
			list[nd++] = g;
	if (nd == 0)
		return -EINVAL;
	if (n * es < G.split_min)
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

	for (int g = 0; g < G.ndev && r == 0; g++) {
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
		idev[i] = x->ops[i]->sendref ? dev_of(x->ops[i]->sendref) : -1;
		odev[i] = x->ops[i]->recvref ? dev_of(x->ops[i]->recvref) : -1;
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

static cudaEvent_t ev_get(int dev)
{
	struct gpu_dev *g = &G.dev[dev];
	cudaEvent_t e = NULL;

	if (g->nevfree)
		return g->evfree[--g->nevfree];
	if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess)
		return NULL;
	return e;
}

static void ev_put(int dev, cudaEvent_t e)
{
	struct gpu_dev *g = &G.dev[dev];

	if (!e)
		return;
	if (g->nevfree == g->capevfree) {
		int cap = g->capevfree ? 2 * g->capevfree : 16;
		cudaEvent_t *n = realloc(g->evfree, sizeof(*n) * (size_t)cap);
		if (!n) {
			cudaEventDestroy(e);
			return;
		}
		g->evfree = n;
		g->capevfree = cap;
	}
	g->evfree[g->nevfree++] = e;
}

static int start(struct gjob *j)
{
	int r = launch(j);

	for (int g = 0; g < G.ndev; g++) {
		if (!j->used[g])
			continue;
		cudaSetDevice(G.dev[g].ord);
		j->ev[g] = ev_get(g);
		if (!j->ev[g] || cudaEventRecord(j->ev[g], G.dev[g].st) != cudaSuccess) {
			/* cannot track it: wait for the stream instead */
			cudaStreamSynchronize(G.dev[g].st);
			ev_put(g, j->ev[g]);
			j->ev[g] = NULL;
		}
	}
	return r;
}

/* 1: all done, 0: not yet; negative: failed */
static int poll_done(struct gjob *j)
{
	for (int g = 0; g < G.ndev; g++) {
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
		ev_put(g, j->ev[g]);
		j->ev[g] = NULL;
	}
	return 1;
}

/* ---- sync slots of stream-ordered operations ---- */

/* Resolves the sync slot of every stream-ordered op of x (under d->lock);
 * the first error, 0 if none. */
static int slots_resolve(struct r2_exec *x, struct slots *sl)
{
	int status = 0;

	for (int i = 0; i < x->nops; i++) {
		struct r2_op *op = x->ops[i];
		void *addr;
		int r;

		if (!(op->sqe.gflags & R2_SQE_STREAM))
			continue;
		if (op->sqe.sync_off % 16) {
			status = -EINVAL;
			continue;
		}
		r = r2d_mem_resolve(op->s, op->sqe.sync_mem, op->sqe.sync_off,
				    sizeof(struct r2_gpu_slot), &addr, &sl->ref[i]);
		if (r == 0 && r2_mem_is_gpu(sl->ref[i])) {
			r2d_mem_put(sl->ref[i]);
			sl->ref[i] = NULL;
			r = -EINVAL;
		}
		if (r < 0) {
			status = r;
			continue;
		}
		sl->slot[i] = addr;
		sl->seq[i] = op->sqe.sync_seq;
	}
	return status;
}

/* True once every stream-ordered op's stream has reached it. */
static bool slots_ready(int n, const struct slots *sl)
{
	for (int i = 0; i < n; i++)
		if (sl->slot[i] &&
		    (int32_t)(__atomic_load_n(&sl->slot[i]->ready, __ATOMIC_ACQUIRE) - sl->seq[i]) < 0)
			return false;
	return true;
}

/* Releases the streams: status, then done (the stream waits on done). */
static void slots_release(int n, struct slots *sl, int status)
{
	for (int i = 0; i < n; i++) {
		if (!sl->slot[i])
			continue;
		__atomic_store_n(&sl->slot[i]->status, status, __ATOMIC_RELAXED);
		__atomic_store_n(&sl->slot[i]->done, sl->seq[i], __ATOMIC_RELEASE);
		r2d_mem_put(sl->ref[i]);
		sl->slot[i] = NULL;
	}
}

/* Why an operation of c begun at t0 must stop now (0: it may go on). */
static int op_aborted(struct r2_exec *x, uint64_t t0, uint64_t now)
{
	int64_t tmo = r2_param_int(&x->c->d->params, P_OP_TIMEOUT_MS);

	if (G.stop)
		return R2CCL_E_SHUTDOWN;
	for (int i = 0; i < x->nops; i++) {
		struct r2_session *s = x->ops[i]->s;
		if (__atomic_load_n(&s->dead, __ATOMIC_RELAXED) ||
		    __atomic_load_n(&s->closing, __ATOMIC_RELAXED))
			return R2CCL_E_PEER_GONE;
	}
	if (__atomic_load_n(&x->c->state, __ATOMIC_RELAXED) == R2_COMM_BROKEN)
		return R2CCL_E_COMM_BROKEN;
	if (tmo > 0 && now - t0 > (uint64_t)tmo * 1000)
		return -ETIMEDOUT;
	return 0;
}

static bool ready(struct gjob *j)
{
	return slots_ready(j->x->nops, &j->sl);
}

static int aborted(struct gjob *j, uint64_t now)
{
	return op_aborted(j->x, j->t0, now);
}

static void finish(struct gjob *j, int status)
{
	struct r2_comm *c = j->c;
	struct r2d *d = j->d;

	if (status < 0)
		log_warn("communicator %u: GPU %s failed: %s", c->id, r2_opcode_name(j->x->opcode),
			 r2ccl_strerror(status));
	for (int g = 0; g < G.ndev; g++) {
		if (j->ev[g]) {
			/* an error after launch: let the GPU finish with the buffers */
			cudaEventSynchronize(j->ev[g]);
			ev_put(g, j->ev[g]);
		}
	}
	slots_release(j->x->nops, &j->sl, status);
	r2d_exec_complete(j->x, status);
	pthread_mutex_lock(&d->lock);
	r2d_comm_put(c);
	pthread_mutex_unlock(&d->lock);
	free(j);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void *worker(void *arg)
{
	struct gjob *list = NULL, **tail = &list;
	uint64_t last_progress = 0;
	unsigned spins = 0;

	(void)arg;
	for (;;) {
		bool progress = false;
		uint64_t now;

		if (!list) {
			/* idle: poll the queue a little before sleeping (the next
			 * operation often follows at once; a wake-up costs more) */
			uint64_t t = r2_now_us();
			while (!__atomic_load_n(&G.q_head, __ATOMIC_ACQUIRE) &&
			       !__atomic_load_n(&G.stop, __ATOMIC_RELAXED) && r2_now_us() - t < 200)
				for (int i = 0; i < 16; i++)
					cpu_relax();
		}
		if (!list || __atomic_load_n(&G.q_head, __ATOMIC_RELAXED)) {
			pthread_mutex_lock(&G.q_lock);
			while (!list && !G.q_head && !G.stop)
				pthread_cond_wait(&G.q_cond, &G.q_lock);
			if (G.q_head) {
				*tail = G.q_head;
				tail = G.q_tail;
				G.q_head = NULL;
				G.q_tail = &G.q_head;
			}
			pthread_mutex_unlock(&G.q_lock);
			if (!list && G.stop)
				break;
		}
		now = r2_now_us();
		for (struct gjob **pp = &list, *j; (j = *pp);) {
			int r = 0;
			bool blocked = false;

			for (struct gjob *e = list; e != j; e = e->next)
				if (e->c == j->c) {
					blocked = true; /* an earlier op of its communicator */
					break;
				}
			if (blocked) {
				pp = &j->next;
				continue;
			}
			if (j->status < 0) {
				r = j->status;
			} else if (!j->running) {
				r = aborted(j, now);
				if (r == 0 && ready(j)) {
					r = start(j);
					j->running = true;
					progress = true;
				}
				if (r == 0) {
					pp = &j->next;
					continue;
				}
			} else {
				r = poll_done(j);
				if (r == 0) {
					pp = &j->next;
					continue;
				}
				if (r > 0)
					r = 0;
			}
			/* finished (r: status) */
			*pp = j->next;
			if (tail == &j->next)
				tail = pp;
			finish(j, r);
			progress = true;
		}
		if (progress) {
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
					cpu_relax();
			}
		}
	}
	return NULL;
}

int r2_gpu_exec(struct r2_exec *x)
{
	struct r2d *d = x->c->d;
	struct gjob *j;

	if (G.err || !G.started)
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
	pthread_mutex_lock(&d->lock);
	j->status = slots_resolve(x, &j->sl);
	x->c->refs++;
	pthread_mutex_unlock(&d->lock);
	pthread_mutex_lock(&G.q_lock);
	*G.q_tail = j;
	G.q_tail = &j->next;
	pthread_cond_signal(&G.q_cond);
	pthread_mutex_unlock(&G.q_lock);
	return R2_EXEC_PENDING;
}

/* ---- GPU buffers across hosts ----
 *
 * The rail phase (exec_rail.c) works on host memory: each GPU buffer of an
 * operation that spans hosts is staged through pinned host memory on the
 * GPU's NUMA node (device-to-host copy of the inputs, the host path with its
 * planner, chunk protocol and failover unchanged, host-to-device copy of the
 * outputs). Staging buffers are pinned once (cudaHostRegister) and reused. */

#define STAGE_MIN ((size_t)1 << 20)

struct pinned {
	struct pinned *next;
	char *p;
	size_t size;
	int node; /* -1: not from libnuma */
};

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
 * and stage_end copies the rest. R2CCL_GPU_STAGE_PIECES=0: one copy each
 * way, before and after. */
#define STAGE_SLICE ((uint64_t)4 << 20)
#define STAGE_PIECES_MIN ((uint64_t)16 << 20)

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
	bool pieces;                /* R2CCL_GPU_STAGE_PIECES is not 0 */
	bool init;
} S = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Each GPU's NUMA node (sysfs of its PCI function) and a copy stream. */
static int stage_init(void)
{
	const char *v = getenv("R2CCL_GPU_STAGE_CACHE");

	if (S.init)
		return 0;
	S.cache_max = v ? strtoull(v, NULL, 0) : ((uint64_t)8 << 30);
	v = getenv("R2CCL_GPU_STAGE_PIECES");
	S.pieces = !v || strcmp(v, "0") != 0;
	for (int g = 0; g < G.ndev; g++) {
		char bus[32], path[96];
		FILE *f;

		S.node[g] = -1;
		if (cudaDeviceGetPCIBusId(bus, sizeof(bus), G.dev[g].ord) == cudaSuccess) {
			for (char *c = bus; *c; c++)
				*c = (char)tolower((unsigned char)*c);
			snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus);
			if ((f = fopen(path, "r"))) {
				if (fscanf(f, "%d", &S.node[g]) != 1)
					S.node[g] = -1;
				fclose(f);
			}
		}
		if (cudaSetDevice(G.dev[g].ord) != cudaSuccess ||
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

/* A pinned buffer of at least size bytes on node (cached ones first). */
static struct pinned *pinned_get(size_t size, int node)
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
		return b;
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
	return b;
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
	if (cudaSetDevice(G.dev[dev].ord) != cudaSuccess)
		return cuda_err(cudaGetLastError());
	return cuda_err(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, S.st[dev]));
}

static int stage_sync(const bool *used)
{
	int r = 0;

	for (int g = 0; g < G.ndev; g++) {
		if (!used[g] || cudaSetDevice(G.dev[g].ord) != cudaSuccess)
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
	char *hs, *hr;

	so->gsend = op->sendbuf;
	so->grecv = op->recvbuf;
	so->sdev = r2_mem_is_gpu(op->sendref) ? dev_of(op->sendref) : -1;
	so->rdev = r2_mem_is_gpu(op->recvref) ? dev_of(op->recvref) : -1;
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
		if (!(so->hr = pinned_get(so->rlen, S.node[so->rdev])))
			return -ENOMEM;
		hr = so->hr->p;
		hs = hr + (so->gsend - so->grecv);
	} else if (so->rdev >= 0 && so->sdev >= 0 && op->sendref == op->recvref &&
		   so->grecv >= so->gsend && so->grecv + so->rlen <= so->gsend + so->slen) {
		/* output inside the input (in-place reduce-scatter) */
		if (!(so->hs = pinned_get(so->slen, S.node[so->sdev])))
			return -ENOMEM;
		hs = so->hs->p;
		hr = hs + (so->grecv - so->gsend);
	} else {
		if (so->sdev >= 0) {
			if (!(so->hs = pinned_get(so->slen, S.node[so->sdev])))
				return -ENOMEM;
			hs = so->hs->p;
		}
		if (so->rdev >= 0) {
			if (!(so->hr = pinned_get(so->rlen, S.node[so->rdev])))
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

	if (!pc || pc->nqueued || k > R2_STAGE_FIRST_MAX || cudaSetDevice(G.dev[pc->sdev].ord) != cudaSuccess)
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
	if (cudaSetDevice(G.dev[pc->sdev].ord) != cudaSuccess)
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
	    cudaSetDevice(G.dev[pc->rdev].ord) != cudaSuccess ||
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
	if (cudaSetDevice(G.dev[pc->sdev].ord) != cudaSuccess)
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

	if (G.err || !G.started)
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
	r = slots_resolve(x, &st->sl);
	pthread_mutex_unlock(&x->c->d->lock);
	if (r < 0)
		return r;
	pthread_mutex_lock(&S.lock);
	r = stage_init();
	pthread_mutex_unlock(&S.lock);
	if (r < 0)
		return r;
	/* the clients' streams reach the operation (bounded: op timeout) */
	while (!slots_ready(x->nops, &st->sl)) {
		if ((r = op_aborted(x, st->t0, r2_now_us())))
			return r;
		if (++spins % 64 == 0) {
			struct timespec ts = { 0, spins > 100000 ? 50000 : 2000 };
			nanosleep(&ts, NULL);
		} else {
			cpu_relax();
		}
	}
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
	return r2_exec_hier(x, pool);
}

int r2_gpu_stage_end(struct r2_exec *x, int status)
{
	struct stage *st = x->gpu_stage;
	bool used[MAX_DEV] = { false };

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
	piece_free(st->pc);
	slots_release(x->nops, &st->sl, status);
	free(st);
	return status;
}

static void stage_shutdown(void)
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

void r2_gpu_shutdown(void)
{
	if (!G.started)
		return;
	pthread_mutex_lock(&G.q_lock);
	G.stop = true;
	pthread_cond_signal(&G.q_cond);
	pthread_mutex_unlock(&G.q_lock);
	pthread_join(G.thread, NULL);
	G.started = false;
	stage_shutdown();
}

#else /* !HAVE_CUDA */

#include "../engine/comm.h"

int r2_gpu_region_new(struct r2_session *s, const struct r2_gpu_reg_req *req,
		      struct r2_memreg **out, char *err, size_t errlen)
{
	(void)s;
	(void)req;
	(void)out;
	snprintf(err, errlen, "this r2ccld was built without CUDA");
	return -EOPNOTSUPP;
}

void r2_gpu_region_free(struct r2_memreg *m)
{
	free(m);
}

bool r2_gpu_exec_is_gpu(const struct r2_exec *x)
{
	(void)x;
	return false;
}

int r2_gpu_exec(struct r2_exec *x)
{
	(void)x;
	return -EOPNOTSUPP;
}

int r2_gpu_exec_rail(struct r2_exec *x, struct r2_pool *pool)
{
	(void)x;
	(void)pool;
	return -EOPNOTSUPP;
}

int r2_gpu_stage_end(struct r2_exec *x, int status)
{
	x->gpu_stage = NULL;
	return status;
}

void r2_gpu_shutdown(void)
{
}

#endif
