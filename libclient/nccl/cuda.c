/* SPDX-License-Identifier: MIT */
/*
 * libnccl: the CUDA driver calls it needs, resolved at run time from
 * libcuda.so.1 (libclient/cuda_load.c, as for libclient/gpu.c), so the library loads and serves
 * host memory on machines without a GPU.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "cuda_load.h"
#include "nccl_int.h"

#if HAVE_CUDA

#include <cuda.h>
#include <pthread.h>

static struct {
	pthread_once_t once;
	bool ok;
	CUresult (*pointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
	CUresult (*memGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*streamIsCapturing)(CUstream, CUstreamCaptureStatus *);
	CUresult (*ctxGetDevice)(CUdevice *);
	CUresult (*ctxGetCurrent)(CUcontext *);
	CUresult (*ctxSetCurrent)(CUcontext);
	CUresult (*streamSynchronize)(CUstream);
	CUresult (*streamQuery)(CUstream);
	CUresult (*memcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*memcpy)(CUdeviceptr, CUdeviceptr, size_t);
	CUresult (*memCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			      unsigned long long);
	CUresult (*memAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
				      unsigned long long);
	CUresult (*memMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			   unsigned long long);
	CUresult (*memSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*memGetAllocationGranularity)(size_t *, const CUmemAllocationProp *,
						CUmemAllocationGranularity_flags);
	CUresult (*memUnmap)(CUdeviceptr, size_t);
	CUresult (*memAddressFree)(CUdeviceptr, size_t);
	CUresult (*memRelease)(CUmemGenericAllocationHandle);
	CUresult (*memRetainAllocationHandle)(CUmemGenericAllocationHandle *, void *);
	CUresult (*deviceGet)(CUdevice *, int);
	CUresult (*primaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*primaryCtxRelease)(CUdevice);
} cu = { .once = PTHREAD_ONCE_INIT };

static void cu_load(void)
{
	const struct r2c_cu_sym t[] = {
		{ "cuPointerGetAttribute", (void **)&cu.pointerGetAttribute },
		{ "cuMemGetAddressRange", (void **)&cu.memGetAddressRange },
		{ "cuStreamIsCapturing", (void **)&cu.streamIsCapturing },
		{ "cuCtxGetDevice", (void **)&cu.ctxGetDevice },
		{ "cuCtxGetCurrent", (void **)&cu.ctxGetCurrent },
		{ "cuCtxSetCurrent", (void **)&cu.ctxSetCurrent },
		{ "cuStreamSynchronize", (void **)&cu.streamSynchronize },
		{ "cuStreamQuery", (void **)&cu.streamQuery },
		{ "cuMemcpyAsync", (void **)&cu.memcpyAsync },
		{ "cuMemcpy", (void **)&cu.memcpy },
		{ "cuMemCreate", (void **)&cu.memCreate },
		{ "cuMemAddressReserve", (void **)&cu.memAddressReserve },
		{ "cuMemMap", (void **)&cu.memMap },
		{ "cuMemSetAccess", (void **)&cu.memSetAccess },
		{ "cuMemGetAllocationGranularity", (void **)&cu.memGetAllocationGranularity },
		{ "cuMemUnmap", (void **)&cu.memUnmap },
		{ "cuMemAddressFree", (void **)&cu.memAddressFree },
		{ "cuMemRelease", (void **)&cu.memRelease },
		{ "cuMemRetainAllocationHandle", (void **)&cu.memRetainAllocationHandle },
		{ "cuDeviceGet", (void **)&cu.deviceGet },
		{ "cuDevicePrimaryCtxRetain", (void **)&cu.primaryCtxRetain },
		{ "cuDevicePrimaryCtxRelease", (void **)&cu.primaryCtxRelease },
	};

	cu.ok = r2c_cu_resolve(t, sizeof(t) / sizeof(t[0])) == 0;
}

bool nccl_cuda_available(void)
{
	pthread_once(&cu.once, cu_load);
	return cu.ok;
}

bool nccl_cuda_is_device_ptr(const void *p)
{
	unsigned int type = 0;

	if (!p || !nccl_cuda_available())
		return false;
	if (cu.pointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p) !=
	    CUDA_SUCCESS)
		return false; /* memory CUDA does not know: host */
	return type == CU_MEMORYTYPE_DEVICE;
}

int nccl_cuda_stream_capturing(cudaStream_t s)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	CUresult e;

	if (!nccl_cuda_available())
		return 0;
	e = cu.streamIsCapturing((CUstream)s, &st);
	if (e == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
		return 1; /* the legacy stream while another captures globally */
	if (e != CUDA_SUCCESS)
		return -1;
	return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

int nccl_cuda_current_device(void)
{
	CUdevice d;

	if (!nccl_cuda_available() || cu.ctxGetDevice(&d) != CUDA_SUCCESS)
		return -1;
	return (int)d;
}

void *nccl_cuda_ctx_get(void)
{
	CUcontext c = NULL;

	if (!nccl_cuda_available() || cu.ctxGetCurrent(&c) != CUDA_SUCCESS)
		return NULL;
	return c;
}

void nccl_cuda_ctx_set(void *ctx)
{
	if (ctx && nccl_cuda_available())
		cu.ctxSetCurrent((CUcontext)ctx);
}

void *nccl_cuda_ctx_for(int dev, void *hint, bool *primary)
{
	CUcontext cur = NULL, p = NULL;
	CUdevice want, have;

	*primary = false;
	if (!nccl_cuda_available())
		return NULL;
	if (hint)
		return hint;
	if (cu.ctxGetCurrent(&cur) != CUDA_SUCCESS)
		cur = NULL;
	if (dev < 0)
		return cur;
	/* the driver is not initialized (no CUDA use in this process yet):
	 * cuDeviceGet fails, and the communicator has no context */
	if (cu.deviceGet(&want, dev) != CUDA_SUCCESS)
		return NULL;
	if (cur && cu.ctxGetDevice(&have) == CUDA_SUCCESS && have == want)
		return cur;
	if (cu.primaryCtxRetain(&p, want) != CUDA_SUCCESS)
		return NULL;
	*primary = true;
	return p;
}

void nccl_cuda_ctx_put(int dev, bool primary)
{
	CUdevice d;

	if (primary && nccl_cuda_available() && cu.deviceGet(&d, dev) == CUDA_SUCCESS)
		cu.primaryCtxRelease(d);
}

void nccl_cuda_ctx_enter(void *ctx, struct nccl_ctx_save *sv)
{
	CUcontext cur = NULL;

	sv->set = false;
	if (!ctx || !nccl_cuda_available() || cu.ctxGetCurrent(&cur) != CUDA_SUCCESS ||
	    cur == (CUcontext)ctx)
		return;
	sv->prev = cur;
	sv->set = cu.ctxSetCurrent((CUcontext)ctx) == CUDA_SUCCESS;
}

void nccl_cuda_ctx_leave(const struct nccl_ctx_save *sv)
{
	if (sv->set)
		cu.ctxSetCurrent((CUcontext)sv->prev); /* NULL too: the thread had none */
}

int nccl_cuda_stream_sync(cudaStream_t s)
{
	if (!nccl_cuda_available())
		return 0;
	return cu.streamSynchronize((CUstream)s) == CUDA_SUCCESS ? 0 : -EIO;
}

int nccl_cuda_stream_query(cudaStream_t s)
{
	CUresult e;

	if (!nccl_cuda_available())
		return 1;
	e = cu.streamQuery((CUstream)s);
	return e == CUDA_SUCCESS ? 1 : e == CUDA_ERROR_NOT_READY ? 0 : -EIO;
}

int nccl_cuda_memcpy_async(void *dst, const void *src, size_t n, cudaStream_t s)
{
	if (!n)
		return 0;
	if (!nccl_cuda_available())
		return -ENODEV;
	return cu.memcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, (CUstream)s) == CUDA_SUCCESS
		       ? 0
		       : -EIO;
}

int nccl_cuda_memcpy(void *dst, const void *src, size_t n)
{
	if (!n)
		return 0;
	if (!nccl_cuda_available())
		return -ENODEV;
	return cu.memcpy((CUdeviceptr)dst, (CUdeviceptr)src, n) == CUDA_SUCCESS ? 0 : -EIO;
}

int nccl_cuda_range(const void *p, uintptr_t *base, size_t *size, unsigned long long *bufid)
{
	CUdeviceptr b = 0;
	size_t s = 0;
	unsigned long long id = 0;

	if (!nccl_cuda_available())
		return -ENODEV;
	if (cu.memGetAddressRange(&b, &s, (CUdeviceptr)p) != CUDA_SUCCESS)
		return -EFAULT;
	if (cu.pointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)p) !=
	    CUDA_SUCCESS)
		id = 0;
	*base = (uintptr_t)b;
	*size = s;
	*bufid = id;
	return 0;
}

unsigned long long nccl_cuda_buffer_id(const void *p)
{
	unsigned long long id = 0;

	if (!nccl_cuda_available() ||
	    cu.pointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)p) !=
		    CUDA_SUCCESS)
		return 0;
	return id;
}

static void alloc_prop(CUmemAllocationProp *prop, int dev)
{
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = dev;
	prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

int nccl_cuda_alloc_exportable(int dev, size_t size, void **ptr, size_t *alloc_size)
{
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc acc;
	CUdeviceptr va = 0;
	size_t gran = 0;

	if (dev < 0)
		dev = nccl_cuda_current_device();
	if (dev < 0)
		return -ENODEV;
	alloc_prop(&prop, dev);
	if (cu.memGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) !=
		    CUDA_SUCCESS ||
	    !gran)
		return -EIO;
	if (size > SIZE_MAX - gran)
		return -ENOMEM;
	size = (size + gran - 1) / gran * gran;
	if (cu.memCreate(&h, size, &prop, 0) != CUDA_SUCCESS)
		return -ENOMEM;
	if (cu.memAddressReserve(&va, size, gran, 0, 0) != CUDA_SUCCESS) {
		cu.memRelease(h);
		return -ENOMEM;
	}
	if (cu.memMap(va, size, 0, h, 0) != CUDA_SUCCESS) {
		cu.memAddressFree(va, size);
		cu.memRelease(h);
		return -EIO;
	}
	cu.memRelease(h); /* the mapping keeps the allocation */
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (cu.memSetAccess(va, size, &acc, 1) != CUDA_SUCCESS) {
		cu.memUnmap(va, size);
		cu.memAddressFree(va, size);
		return -EIO;
	}
	*ptr = (void *)va;
	*alloc_size = size;
	return 0;
}

int nccl_cuda_free_exportable(void *ptr, size_t size)
{
	if (!nccl_cuda_available())
		return -ENODEV;
	if (cu.memUnmap((CUdeviceptr)ptr, size) != CUDA_SUCCESS)
		return -EIO;
	return cu.memAddressFree((CUdeviceptr)ptr, size) == CUDA_SUCCESS ? 0 : -EIO;
}

#else /* !HAVE_CUDA: a library built without CUDA serves host memory only */

bool nccl_cuda_available(void)
{
	return false;
}

bool nccl_cuda_is_device_ptr(const void *p)
{
	(void)p;
	return false;
}

int nccl_cuda_stream_capturing(cudaStream_t s)
{
	(void)s;
	return 0;
}

int nccl_cuda_current_device(void)
{
	return -1;
}

void *nccl_cuda_ctx_get(void)
{
	return NULL;
}

void nccl_cuda_ctx_set(void *ctx)
{
	(void)ctx;
}

void *nccl_cuda_ctx_for(int dev, void *hint, bool *primary)
{
	(void)dev, (void)hint;
	*primary = false;
	return NULL;
}

void nccl_cuda_ctx_put(int dev, bool primary)
{
	(void)dev, (void)primary;
}

void nccl_cuda_ctx_enter(void *ctx, struct nccl_ctx_save *sv)
{
	(void)ctx;
	sv->set = false;
}

void nccl_cuda_ctx_leave(const struct nccl_ctx_save *sv)
{
	(void)sv;
}

int nccl_cuda_stream_sync(cudaStream_t s)
{
	(void)s;
	return 0;
}

int nccl_cuda_stream_query(cudaStream_t s)
{
	(void)s;
	return 1;
}

int nccl_cuda_memcpy_async(void *dst, const void *src, size_t n, cudaStream_t s)
{
	(void)dst, (void)src, (void)s;
	return n ? -ENODEV : 0;
}

int nccl_cuda_memcpy(void *dst, const void *src, size_t n)
{
	(void)dst, (void)src;
	return n ? -ENODEV : 0;
}

int nccl_cuda_range(const void *p, uintptr_t *base, size_t *size, unsigned long long *bufid)
{
	(void)p, (void)base, (void)size, (void)bufid;
	return -ENODEV;
}

int nccl_cuda_alloc_exportable(int dev, size_t size, void **ptr, size_t *alloc_size)
{
	(void)dev, (void)size, (void)ptr, (void)alloc_size;
	return -ENODEV;
}

unsigned long long nccl_cuda_buffer_id(const void *p)
{
	(void)p;
	return 0;
}

int nccl_cuda_free_exportable(void *ptr, size_t size)
{
	(void)ptr, (void)size;
	return -ENODEV;
}

#endif
