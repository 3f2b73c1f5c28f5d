/* SPDX-License-Identifier: MIT */
#include "gpumem.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The few driver API types used here (cuda.h is not needed to build); the
 * allocation properties as cuda.h lays out CUmemAllocationProp (CUDA 11.x
 * to 13: 32 bytes on 64-bit hosts). */
typedef int cu_result;
typedef unsigned long long cu_ptr;
typedef unsigned long long cu_mem_handle;
struct cu_alloc_prop {
	int type;                  /* CU_MEM_ALLOCATION_TYPE_PINNED: 1 */
	int handle_types;          /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: 1 */
	int loc_type, loc_id;      /* CU_MEM_LOCATION_TYPE_DEVICE: 1, the device */
	void *win32_meta;
	unsigned char flags[8];    /* allocFlags: none */
};
struct cu_access_desc {
	int loc_type, loc_id;
	int flags;                 /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE: 3 */
};
_Static_assert(sizeof(struct cu_alloc_prop) == 32, "CUmemAllocationProp's size");

/* cuMem allocations made here, for the free (their size and handle) */
struct galloc {
	struct galloc *next;
	cu_ptr va;
	size_t size;
	cu_mem_handle h;
};
static struct galloc *gallocs;

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
	cu_result (*create)(cu_mem_handle *, size_t, const struct cu_alloc_prop *,
			    unsigned long long);
	cu_result (*granularity)(size_t *, const struct cu_alloc_prop *, int);
	cu_result (*reserve)(cu_ptr *, size_t, size_t, cu_ptr, unsigned long long);
	cu_result (*map)(cu_ptr, size_t, size_t, cu_mem_handle, unsigned long long);
	cu_result (*set_access)(cu_ptr, size_t, const struct cu_access_desc *, size_t);
	cu_result (*unmap)(cu_ptr, size_t);
	cu_result (*addr_free)(cu_ptr, size_t);
	cu_result (*mrelease)(cu_mem_handle);
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
	SYM(create, "cuMemCreate");
	SYM(granularity, "cuMemGetAllocationGranularity");
	SYM(reserve, "cuMemAddressReserve");
	SYM(map, "cuMemMap");
	SYM(set_access, "cuMemSetAccess");
	SYM(unmap, "cuMemUnmap");
	SYM(addr_free, "cuMemAddressFree");
	SYM(mrelease, "cuMemRelease");
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

/* cuMem memory with a POSIX fd handle type: what r2ccld opens whatever its
 * gpu_legacy_ipc (docs/security.md, "GPU memory"); cudaMalloc memory may be
 * refused there */
int bgpu_alloc(void **p, size_t size)
{
	struct cu_alloc_prop prop = { .type = 1, .handle_types = 1, .loc_type = 1,
				      .loc_id = B.dev };
	struct cu_access_desc acc = { .loc_type = 1, .loc_id = B.dev, .flags = 3 };
	struct galloc *g = calloc(1, sizeof(*g));
	size_t gran = 0;

	*p = NULL;
	if (!g)
		return -1;
	if (B.granularity(&gran, &prop, 0) || !gran)
		gran = 2u << 20;
	g->size = ((size ? size : 1) + gran - 1) / gran * gran;
	if (B.create(&g->h, g->size, &prop, 0)) {
		free(g);
		return -1;
	}
	if (B.reserve(&g->va, g->size, gran, 0, 0) || B.map(g->va, g->size, 0, g->h, 0) ||
	    B.set_access(g->va, g->size, &acc, 1)) {
		if (g->va) {
			B.unmap(g->va, g->size);
			B.addr_free(g->va, g->size);
		}
		B.mrelease(g->h);
		free(g);
		return -1;
	}
	g->next = gallocs;
	gallocs = g;
	*p = (void *)(uintptr_t)g->va;
	return 0;
}

void bgpu_free(void *p)
{
	for (struct galloc **pp = &gallocs; *pp; pp = &(*pp)->next) {
		struct galloc *g = *pp;
		if (g->va != (cu_ptr)(uintptr_t)p)
			continue;
		*pp = g->next;
		B.unmap(g->va, g->size);
		B.addr_free(g->va, g->size);
		B.mrelease(g->h);
		free(g);
		return;
	}
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
