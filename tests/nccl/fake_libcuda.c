/* SPDX-License-Identifier: MIT */
/*
 * A fake libcuda.so.1 for tests/nccl/bench-submit.sh: cuGetProcAddress_v2
 * hands out functions that succeed at once (cuMemHostGetDevicePointer gives
 * the host address back), so a figure taken through it is libr2ccl's own
 * host time, without the driver's. FAKE_CUDA_NO_BATCH=1: no
 * cuStreamBatchMemOp (the two-call path). Never installed, never a test.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;

static CUresult ok(void)
{
	return 0;
}

static CUresult host_get_device_pointer(uint64_t *d, void *p, unsigned int flags)
{
	(void)flags;
	*d = (uint64_t)(uintptr_t)p;
	return 0;
}

CUresult cuGetProcAddress_v2(const char *name, void **fn, int version, unsigned long long flags,
			     int *status);

CUresult cuGetProcAddress_v2(const char *name, void **fn, int version, unsigned long long flags,
			     int *status)
{
	(void)version;
	(void)flags;
	if (status)
		*status = 0;
	if (!strcmp(name, "cuStreamBatchMemOp") && getenv("FAKE_CUDA_NO_BATCH")) {
		*fn = NULL;
		return 500; /* CUDA_ERROR_NOT_FOUND */
	}
	*fn = !strcmp(name, "cuMemHostGetDevicePointer") ? (void *)host_get_device_pointer
							  : (void *)ok;
	return 0;
}
