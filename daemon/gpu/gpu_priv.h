/* SPDX-License-Identifier: MIT */
/*
 * The GPU path's private header: what device.c (GPUs, streams, sync slots),
 * memory.c (client allocations), local.c (the GPU worker and its local
 * collectives) and staging.c (host staging for the rail phase) share.
 * Built only with CUDA (gpu_stub.c stands in without it).
 */
#ifndef R2CCL_DAEMON_GPU_PRIV_H
#define R2CCL_DAEMON_GPU_PRIV_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpu.h"
#include "gpu_abi.h"
#include "kernels.h"

#define MAX_DEV 16
#define MAX_OPS R2K_MAX_PTRS

struct r2_exec;

struct gpu_dev {
	int ord;
	uint8_t uuid[16];
	dev_t rdev; /* its /dev/nvidiaN (0: not found; owner.h, gpu-access) */
	char bus[32]; /* its PCI bus id ("" not known) */
	int minor;    /* the N of /dev/nvidiaN, -1 not known */
	int sms;
	cudaStream_t st;
	cudaEvent_t *evfree; /* worker only */
	int nevfree, capevfree;
};

/* One client allocation opened by the daemon (memory.c). */
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
	struct r2_session *s[MAX_OPS]; /* whose memory ref[] is */
	uint32_t seq[MAX_OPS];
};

/* The GPUs and the driver entry points (device.c), set once by
 * r2g_init. */
struct r2g_state {
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
	bool stop, started; /* the worker (local.c) */
	const struct r2_gpu_engine *eng; /* r2_gpu_set_engine */
};

extern struct r2g_state r2g;

/* ---- device.c ---- */

/* Finds the GPUs, enables peer access, reads the GPU parameters of p and
 * starts the worker, once (later calls return the first outcome). 0, or a
 * negative error with r2g.errmsg set. */
int r2g_init(const struct r2_params *p);
/* The index of the GPU with that 16-byte UUID, or -1. */
int r2g_dev_by_uuid(const uint8_t *uuid);

/* A CUDA error as a negative errno (-EIO), logged (the first 50). */
#define cuda_err(e) r2g_cuda_err_at((e), __func__, __LINE__)
int r2g_cuda_err_at(cudaError_t e, const char *fn, int line);

/* Completion events of GPU dev's stream, recycled (worker thread only). */
cudaEvent_t r2g_ev_get(int dev);
void r2g_ev_put(int dev, cudaEvent_t e);

/* Sync slots: resolves those of x's stream-ordered ops (under d->lock; the
 * first error, 0 if none); true once every client stream has reached the
 * operation; releases the streams with status (status, then done). */
int r2g_slots_resolve(struct r2_exec *x, struct slots *sl);
bool r2g_slots_ready(int n, const struct slots *sl);
void r2g_slots_release(int n, struct slots *sl, int status);
/* Why an operation begun at t0 must stop now (0: it may go on): shutdown,
 * a rank's session gone, the communicator broken, the operation timeout. */
int r2g_op_aborted(struct r2_exec *x, uint64_t t0, uint64_t now);

/* ---- memory.c ---- */

/* The GPU (index) holding region m. */
static inline int r2g_dev_of(const struct r2_memreg *m)
{
	return ((const struct r2_gpu_region *)m)->dev;
}

/* ---- local.c ---- */

int r2g_worker_start(void);
void r2g_worker_stop(void);

/* ---- staging.c ---- */

/* Frees the cached staging buffers (daemon shutdown). */
void r2g_stage_shutdown(void);

#endif
