/* SPDX-License-Identifier: MIT */
#include "gpumem.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

/* The few driver API types used here (cuda.h is not needed to build). */
typedef int cu_result;
typedef unsigned long long cu_ptr;

static struct {
	void *lib;
	void *ctx, *stream;
	int dev;
	cu_result (*init)(unsigned);
	cu_result (*count)(int *);
	cu_result (*get)(int *, int);
	cu_result (*retain)(void **, int);
	cu_result (*release)(int);
	cu_result (*set_current)(void *);
	cu_result (*alloc)(cu_ptr *, size_t);
	cu_result (*mfree)(cu_ptr);
	cu_result (*h2d)(cu_ptr, const void *, size_t, void *);
	cu_result (*d2h)(void *, cu_ptr, size_t, void *);
	cu_result (*st_create)(void **, unsigned);
	cu_result (*st_sync)(void *);
	cu_result (*st_destroy)(void *);
} B;

#define SYM(field, name)                                                      \
	do {                                                                  \
		*(void **)&B.field = dlsym(B.lib, name);                      \
		if (!B.field) {                                               \
			snprintf(err, errlen, "libcuda.so.1 lacks %s", name); \
			return -1;                                            \
		}                                                             \
	} while (0)

int bgpu_open(int dev, int *ordinal, char *err, size_t errlen)
{
	int n = 0, d;
	cu_result r;

	if (!(B.lib = dlopen("libcuda.so.1", RTLD_NOW))) {
		snprintf(err, errlen, "no CUDA driver (libcuda.so.1): %s", dlerror());
		return -1;
	}
	SYM(init, "cuInit");
	SYM(count, "cuDeviceGetCount");
	SYM(get, "cuDeviceGet");
	SYM(retain, "cuDevicePrimaryCtxRetain");
	SYM(release, "cuDevicePrimaryCtxRelease_v2");
	SYM(set_current, "cuCtxSetCurrent");
	SYM(alloc, "cuMemAlloc_v2");
	SYM(mfree, "cuMemFree_v2");
	/* on the bench's stream, then synchronized: a synchronous cuMemcpyHtoD
	 * from pageable memory may return before its DMA lands (small copies),
	 * and the legacy stream it runs on does not order the non-blocking
	 * stream the collectives run on */
	SYM(h2d, "cuMemcpyHtoDAsync_v2");
	SYM(d2h, "cuMemcpyDtoHAsync_v2");
	SYM(st_create, "cuStreamCreate");
	SYM(st_sync, "cuStreamSynchronize");
	SYM(st_destroy, "cuStreamDestroy_v2");
	if ((r = B.init(0)) || (r = B.count(&n)) || n < 1) {
		snprintf(err, errlen, "no usable GPU (CUDA error %d, %d devices)", r, n);
		return -1;
	}
	*ordinal = dev % n;
	if ((r = B.get(&d, *ordinal)) || (r = B.retain(&B.ctx, d)) || (r = B.set_current(B.ctx)) ||
	    (r = B.st_create(&B.stream, 1 /* CU_STREAM_NON_BLOCKING */))) {
		snprintf(err, errlen, "GPU %d: CUDA error %d", *ordinal, r);
		return -1;
	}
	B.dev = d;
	return 0;
}

void *bgpu_stream(void)
{
	return B.stream;
}

int bgpu_alloc(void **p, size_t size)
{
	cu_ptr d = 0;
	int r = B.alloc(&d, size ? size : 1);

	*p = (void *)(uintptr_t)d;
	return r ? -1 : 0;
}

void bgpu_free(void *p)
{
	if (p)
		B.mfree((cu_ptr)(uintptr_t)p);
}

int bgpu_h2d(void *dst, const void *src, size_t n)
{
	return n && (B.h2d((cu_ptr)(uintptr_t)dst, src, n, B.stream) || B.st_sync(B.stream)) ? -1
											   : 0;
}

int bgpu_d2h(void *dst, const void *src, size_t n)
{
	return n && (B.d2h(dst, (cu_ptr)(uintptr_t)src, n, B.stream) || B.st_sync(B.stream)) ? -1
											   : 0;
}

int bgpu_sync(void)
{
	return B.st_sync(B.stream) ? -1 : 0;
}

void bgpu_close(void)
{
	if (!B.lib)
		return;
	if (B.stream)
		B.st_destroy(B.stream);
	if (B.ctx)
		B.release(B.dev);
	B.stream = B.ctx = NULL;
}
