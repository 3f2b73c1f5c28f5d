// SPDX-License-Identifier: MIT
/* The CUDA driver, loaded at run time (cuda_load.h). */
#include "config.h"

#include <errno.h>

#include "cuda_load.h"

#if HAVE_CUDA

#include <cuda.h>
#include <dlfcn.h>

int r2c_cu_resolve(const struct r2c_cu_sym *t, size_t n)
{
	CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);

	if (!h)
		return -ENODEV;
	*(void **)&gpa = dlsym(h, "cuGetProcAddress_v2");
	if (!gpa)
		return -ENOSYS;
	for (size_t i = 0; i < n; i++) {
		CUdriverProcAddressQueryResult q;
		if (gpa(t[i].name, t[i].fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS ||
		    !*t[i].fn)
			return -ENOSYS;
	}
	return 0;
}

#else

int r2c_cu_resolve(const struct r2c_cu_sym *t, size_t n)
{
	(void)t;
	(void)n;
	return -ENODEV;
}

#endif
