/* SPDX-License-Identifier: MIT */
/*
 * GPU devices: discovery, peer access, the driver's cuMem entry points, one
 * stream per GPU with its recycled events, and the sync slots through which
 * the clients' streams and the daemon order an operation (README.md beside
 * this file; the slot protocol is in common/gpu_abi.h).
 *
 * r2g_init runs once, at the first GPU registration (memory.c): it reads the
 * GPU parameters (gpu_copy, gpu_blocks, gpu_split_min) and starts the GPU
 * worker (local.c). A host with no usable GPU answers every later
 * registration with the same error.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/comm_record.h"
#include "base/op_record.h"
#include "gpu_priv.h"
#include "log.h"
#include "nvdev.h"
#include "util.h"

struct r2g_state r2g;

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

/* GPU ord's /dev/nvidiaN (gpu_legacy_ipc=gpu-access; MIG is checked at each
 * registration, memory.c); 0 if the driver's /proc files do not say */
static dev_t dev_file(int ord, char *bus, size_t buslen, int *minorp)
{
	int minor = -ENODEV;

	*minorp = -1;
	bus[0] = 0;
	if (cudaDeviceGetPCIBusId(bus, (int)buslen, ord) == cudaSuccess)
		minor = r2_nvidia_minor(bus);
	if (minor < 0) {
		log_warn("gpu: GPU %d: no device file found (%s): gpu_legacy_ipc=gpu-access "
			 "opens no legacy handle of it", ord, strerror(-minor));
		return 0;
	}
	*minorp = minor;
	return r2_nvidia_rdev(minor);
}

/* Every GPU: its properties and a non-blocking stream; then peer access
 * between every pair that allows it. The number of GPUs, or -1 (r2g.err). */
static int devices_open(void)
{
	cudaError_t e;
	int n = 0;

	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n <= 0) {
		r2g.err = -ENODEV;
		snprintf(r2g.errmsg, sizeof(r2g.errmsg), "no usable GPU: %s",
			 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		log_warn("gpu: %s", r2g.errmsg);
		return -1;
	}
	if (n > MAX_DEV)
		n = MAX_DEV;
	for (int i = 0; i < n; i++) {
		struct cudaDeviceProp p;
		struct gpu_dev *g = &r2g.dev[i];

		g->ord = i;
		if (cudaSetDevice(i) != cudaSuccess || cudaGetDeviceProperties(&p, i) != cudaSuccess ||
		    cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking) != cudaSuccess) {
			r2g.err = -ENODEV;
			snprintf(r2g.errmsg, sizeof(r2g.errmsg), "GPU %d: %s", i,
				 cudaGetErrorString(cudaGetLastError()));
			log_warn("gpu: %s", r2g.errmsg);
			return -1;
		}
		memcpy(g->uuid, p.uuid.bytes, 16);
		g->rdev = dev_file(i, g->bus, sizeof(g->bus), &g->minor);
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
	return n;
}

/* The cuMem entry points of the driver (memory.c imports with them). */
static int entries_load(void)
{
	r2g.memImport = entry("cuMemImportFromShareableHandle");
	r2g.memAddressReserve = entry("cuMemAddressReserve");
	r2g.memMap = entry("cuMemMap");
	r2g.memSetAccess = entry("cuMemSetAccess");
	r2g.memUnmap = entry("cuMemUnmap");
	r2g.memAddressFree = entry("cuMemAddressFree");
	r2g.memRelease = entry("cuMemRelease");
	r2g.memGetAddressRange = entry("cuMemGetAddressRange");
	if (!r2g.memImport || !r2g.memAddressReserve || !r2g.memMap || !r2g.memSetAccess ||
	    !r2g.memUnmap || !r2g.memAddressFree || !r2g.memRelease || !r2g.memGetAddressRange) {
		r2g.err = -ENOSYS;
		snprintf(r2g.errmsg, sizeof(r2g.errmsg), "the CUDA driver lacks cuMem entry points");
		log_warn("gpu: %s", r2g.errmsg);
		return -1;
	}
	return 0;
}

static void gpu_init(const struct r2_params *p)
{
	int n = devices_open();

	if (n < 0 || entries_load() < 0)
		return;
	r2g.copy_ce = strcmp(r2_param_str(p, P_GPU_COPY), "kernel") != 0;
	r2g.max_blocks = (int)r2_param_int(p, P_GPU_BLOCKS);
	r2g.split_min = (uint64_t)r2_param_int(p, P_GPU_SPLIT_MIN);
	r2g.ndev = n;
	if (r2g_worker_start() < 0) {
		r2g.err = -EAGAIN;
		snprintf(r2g.errmsg, sizeof(r2g.errmsg), "cannot start the GPU worker");
		return;
	}
	r2g.started = true;
	log_info("gpu: %d GPUs, copies by %s, worker up", n, r2g.copy_ce ? "copy engine" : "kernel");
}

int r2g_init(const struct r2_params *p)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static bool done;

	pthread_mutex_lock(&lock);
	if (!done) {
		gpu_init(p);
		done = true;
	}
	pthread_mutex_unlock(&lock);
	return r2g.err;
}

int r2g_dev_by_uuid(const uint8_t *uuid)
{
	for (int i = 0; i < r2g.ndev; i++)
		if (!memcmp(r2g.dev[i].uuid, uuid, 16))
			return i;
	return -1;
}

int r2g_cuda_err_at(cudaError_t e, const char *fn, int line)
{
	static atomic_int nlogged;

	if (e == cudaSuccess)
		return 0;
	if (atomic_fetch_add(&nlogged, 1) < 50)
		log_warn("gpu: %s:%d: CUDA error %d: %s", fn, line, (int)e, cudaGetErrorString(e));
	return -EIO;
}

/* ---- events of the worker's streams ---- */

cudaEvent_t r2g_ev_get(int dev)
{
	struct gpu_dev *g = &r2g.dev[dev];
	cudaEvent_t e = NULL;

	if (g->nevfree)
		return g->evfree[--g->nevfree];
	if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess)
		return NULL;
	return e;
}

void r2g_ev_put(int dev, cudaEvent_t e)
{
	struct gpu_dev *g = &r2g.dev[dev];

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

/* ---- sync slots of stream-ordered operations ---- */

int r2g_slots_resolve(struct r2_exec *x, struct slots *sl)
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
		r = r2g.eng->mem_resolve(op->s, op->sqe.sync_mem, op->sqe.sync_off,
					 sizeof(struct r2_gpu_slot), &addr, &sl->ref[i]);
		if (r == 0 && r2_mem_is_gpu(sl->ref[i])) {
			r2g.eng->mem_put(op->s, sl->ref[i]);
			sl->ref[i] = NULL;
			r = -EINVAL;
		}
		if (r < 0) {
			status = r;
			continue;
		}
		sl->slot[i] = addr;
		sl->s[i] = op->s;
		sl->seq[i] = op->sqe.sync_seq;
	}
	return status;
}

bool r2g_slots_ready(int n, const struct slots *sl)
{
	for (int i = 0; i < n; i++)
		if (sl->slot[i] &&
		    (int32_t)(__atomic_load_n(&sl->slot[i]->ready, __ATOMIC_ACQUIRE) - sl->seq[i]) < 0)
			return false;
	return true;
}

void r2g_slots_release(int n, struct slots *sl, int status)
{
	for (int i = 0; i < n; i++) {
		if (!sl->slot[i])
			continue;
		__atomic_store_n(&sl->slot[i]->status, status, __ATOMIC_RELAXED);
		__atomic_store_n(&sl->slot[i]->done, sl->seq[i], __ATOMIC_RELEASE);
		r2g.eng->mem_put(sl->s[i], sl->ref[i]);
		sl->slot[i] = NULL;
	}
}

int r2g_op_aborted(struct r2_exec *x, uint64_t t0, uint64_t now)
{
	int64_t tmo = r2_param_int(&x->c->d->params, P_OP_TIMEOUT_MS);

	if (r2g.stop)
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

void r2_gpu_quiesce(void)
{
	if (r2g.started && !r2g.stop)
		r2g_worker_stop();
}

void r2_gpu_shutdown(void)
{
	if (!r2g.started)
		return;
	r2_gpu_quiesce();
	r2g.started = false;
	r2g_stage_shutdown();
}

void r2_gpu_set_engine(const struct r2_gpu_engine *e)
{
	r2g.eng = e;
}
