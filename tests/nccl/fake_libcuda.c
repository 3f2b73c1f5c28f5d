/* SPDX-License-Identifier: MIT */
/*
 * A fake libcuda.so.1: cuGetProcAddress_v2 hands out functions that succeed
 * at once (cuMemHostGetDevicePointer gives the host address back). Used by
 * tests/nccl/bench-submit.sh (a figure taken through it is libr2ccl's own
 * host time, without the driver's) and by the test gpu-release
 * (tests/gpu/test_gpu_release.c: a communicator's GPU state freed at
 * destroy), which reads its counters (fake_cuda_counts). FAKE_CUDA_NO_BATCH=1:
 * no cuStreamBatchMemOp (the call-each path). Never installed.
 *
 * The stream memory operations run on "the stream": one queue for all
 * streams, in call order. Each runs when queued, or, while fake_cuda_hold(1)
 * holds the stream back (a GPU behind), when fake_cuda_run() is called. A
 * write stores its value; a wait whose condition does not hold when it runs
 * is counted (a real stream would wait there for ever).
 *
 * Contexts: 8 fake devices, each with one (primary) context; the current
 * one is per thread (none at first), cuDevicePrimaryCtxRetain/Release
 * count, and cuStreamSynchronize/cuStreamQuery note which context was
 * current when a stream (its handle's value, 0-15) was last used: the
 * test nccl-ctx (tests/nccl/test_nccl_ctx.c) reads them (fake_cuda_ctx...).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;

/* the driver's values (cuda.h), without including it */
#define OP_WAIT 1
#define OP_WRITE 2
#define WAIT_GEQ 0
#define WAIT_EQ 1

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int registered, events, blocked, hold;
static struct fop {
	int kind;
	uint32_t *addr;
	uint32_t value;
	unsigned flags;
} q[4096];
static unsigned nq;

static CUresult ok(void)
{
	return 0;
}

static void op_run(const struct fop *o)
{
	if (o->kind == OP_WRITE) {
		__atomic_store_n(o->addr, o->value, __ATOMIC_RELEASE);
		return;
	}
	uint32_t v = __atomic_load_n(o->addr, __ATOMIC_ACQUIRE);
	if ((o->flags & 3) == WAIT_EQ ? v != o->value : (int32_t)(v - o->value) < 0)
		blocked++;
}

static CUresult op_queue(int kind, uint64_t addr, uint32_t value, unsigned flags)
{
	struct fop o = { kind, (uint32_t *)(uintptr_t)addr, value, flags };

	pthread_mutex_lock(&lock);
	if (hold && nq < sizeof(q) / sizeof(q[0]))
		q[nq++] = o;
	else
		op_run(&o);
	pthread_mutex_unlock(&lock);
	return 0;
}

void fake_cuda_hold(int on);
void fake_cuda_run(void);
void fake_cuda_counts(int *host_registered, int *events_live, int *waits_blocked,
		      int *ops_held);

void fake_cuda_hold(int on)
{
	pthread_mutex_lock(&lock);
	hold = on;
	pthread_mutex_unlock(&lock);
}

void fake_cuda_run(void)
{
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nq; i++)
		op_run(&q[i]);
	nq = 0;
	pthread_mutex_unlock(&lock);
}

void fake_cuda_counts(int *host_registered, int *events_live, int *waits_blocked,
		      int *ops_held)
{
	pthread_mutex_lock(&lock);
	*host_registered = registered;
	*events_live = events;
	*waits_blocked = blocked;
	*ops_held = (int)nq;
	pthread_mutex_unlock(&lock);
}

static CUresult host_get_device_pointer(uint64_t *d, void *p, unsigned int flags)
{
	(void)flags;
	*d = (uint64_t)(uintptr_t)p;
	return 0;
}

static CUresult host_register(void *p, size_t n, unsigned flags)
{
	(void)p, (void)n, (void)flags;
	__atomic_add_fetch(&registered, 1, __ATOMIC_RELAXED);
	return 0;
}

static CUresult host_unregister(void *p)
{
	(void)p;
	__atomic_sub_fetch(&registered, 1, __ATOMIC_RELAXED);
	return 0;
}

static CUresult event_create(void **e, unsigned flags)
{
	(void)flags;
	*e = malloc(1);
	__atomic_add_fetch(&events, 1, __ATOMIC_RELAXED);
	return 0;
}

static CUresult event_destroy(void *e)
{
	free(e);
	__atomic_sub_fetch(&events, 1, __ATOMIC_RELAXED);
	return 0;
}

/* ---- contexts ---- */

#define NDEV 8
static char ctxs[NDEV];
static int retained[NDEV];
static void *seen[16];
static __thread void *cur;

static CUresult ctx_get(void **ctx)
{
	*ctx = cur;
	return 0;
}

static CUresult ctx_set(void *ctx)
{
	cur = ctx;
	return 0;
}

static CUresult ctx_device(int *dev)
{
	if (!cur)
		return 201; /* CUDA_ERROR_INVALID_CONTEXT */
	*dev = (int)((char *)cur - ctxs);
	return 0;
}

static CUresult device_get(int *dev, int ordinal)
{
	if (ordinal < 0 || ordinal >= NDEV)
		return 101; /* CUDA_ERROR_INVALID_DEVICE */
	*dev = ordinal;
	return 0;
}

static CUresult primary_retain(void **ctx, int dev)
{
	*ctx = &ctxs[dev];
	__atomic_add_fetch(&retained[dev], 1, __ATOMIC_RELAXED);
	return 0;
}

static CUresult primary_release(int dev)
{
	__atomic_sub_fetch(&retained[dev], 1, __ATOMIC_RELAXED);
	return 0;
}

static CUresult stream_used(void *st)
{
	__atomic_store_n(&seen[(uintptr_t)st & 15], cur, __ATOMIC_RELAXED);
	return 0;
}

void *fake_cuda_ctx(int dev);
void fake_cuda_ctx_set(void *ctx);
void *fake_cuda_ctx_current(void);
void *fake_cuda_ctx_seen(int stream);
int fake_cuda_ctx_retained(int dev);

void *fake_cuda_ctx(int dev)
{
	return &ctxs[dev];
}

void fake_cuda_ctx_set(void *ctx)
{
	cur = ctx;
}

void *fake_cuda_ctx_current(void)
{
	return cur;
}

void *fake_cuda_ctx_seen(int stream)
{
	return __atomic_load_n(&seen[stream & 15], __ATOMIC_RELAXED);
}

int fake_cuda_ctx_retained(int dev)
{
	return __atomic_load_n(&retained[dev], __ATOMIC_RELAXED);
}

static CUresult write_value(void *st, uint64_t addr, uint32_t v, unsigned flags)
{
	(void)st, (void)flags;
	return op_queue(OP_WRITE, addr, v, 0);
}

static CUresult wait_value(void *st, uint64_t addr, uint32_t v, unsigned flags)
{
	(void)st;
	return op_queue(OP_WAIT, addr, v, flags);
}

/* CUstreamBatchMemOpParams: a union of 48 bytes, the operation first, the
 * address at 8, the 32-bit value at 16, the flags at 24 */
static CUresult batch(void *st, unsigned n, const unsigned char *p, unsigned flags)
{
	(void)st, (void)flags;
	for (unsigned i = 0; i < n; i++, p += 48) {
		uint32_t op, v, f;
		uint64_t a;
		memcpy(&op, p, 4);
		memcpy(&a, p + 8, 8);
		memcpy(&v, p + 16, 4);
		memcpy(&f, p + 24, 4);
		op_queue(op == OP_WRITE ? OP_WRITE : OP_WAIT, a, v, f);
	}
	return 0;
}

CUresult cuGetProcAddress_v2(const char *name, void **fn, int version, unsigned long long flags,
			     int *status);

CUresult cuGetProcAddress_v2(const char *name, void **fn, int version, unsigned long long flags,
			     int *status)
{
	static const struct {
		const char *name;
		void *fn;
	} t[] = {
		{ "cuMemHostGetDevicePointer", (void *)host_get_device_pointer },
		{ "cuMemHostRegister", (void *)host_register },
		{ "cuMemHostUnregister", (void *)host_unregister },
		{ "cuEventCreate", (void *)event_create },
		{ "cuEventDestroy", (void *)event_destroy },
		{ "cuCtxGetCurrent", (void *)ctx_get },
		{ "cuCtxSetCurrent", (void *)ctx_set },
		{ "cuCtxGetDevice", (void *)ctx_device },
		{ "cuDeviceGet", (void *)device_get },
		{ "cuDevicePrimaryCtxRetain", (void *)primary_retain },
		{ "cuDevicePrimaryCtxRelease", (void *)primary_release },
		{ "cuStreamSynchronize", (void *)stream_used },
		{ "cuStreamQuery", (void *)stream_used },
		{ "cuStreamWriteValue32", (void *)write_value },
		{ "cuStreamWaitValue32", (void *)wait_value },
		{ "cuStreamBatchMemOp", (void *)batch },
	};

	(void)version;
	(void)flags;
	if (status)
		*status = 0;
	if (!strcmp(name, "cuStreamBatchMemOp") && getenv("FAKE_CUDA_NO_BATCH")) {
		*fn = NULL;
		return 500; /* CUDA_ERROR_NOT_FOUND */
	}
	*fn = (void *)ok;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (!strcmp(name, t[i].name))
			*fn = t[i].fn;
	return 0;
}
