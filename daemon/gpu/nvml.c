/* SPDX-License-Identifier: MIT */
/*
 * The processes with a CUDA context on a GPU, from NVML (nvml.h):
 * libnvidia-ml.so.1, which comes with the driver, opened at the first call.
 * Only NVML's oldest entry points are used (nvmlInit_v2,
 * nvmlDeviceGetHandleByPciBusId_v2, nvmlDeviceGetComputeRunningProcesses
 * with its first record layout), declared here: CUDA's toolkit has no
 * nvml.h on every host this builds on.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "nvml.h"

struct nvml_proc_v1 { /* nvmlProcessInfo_v1_t */
	unsigned int pid;
	unsigned long long used;
};

static struct {
	pthread_once_t once;
	int err;
	int (*init)(void);
	int (*by_bus)(const char *, void **);
	int (*procs)(void *, unsigned int *, struct nvml_proc_v1 *);
} nv = { .once = PTHREAD_ONCE_INIT };

static void nvml_load(void)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);

	nv.err = -ENOENT;
	if (!h)
		return;
	nv.init = (int (*)(void))dlsym(h, "nvmlInit_v2");
	nv.by_bus = (int (*)(const char *, void **))dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
	nv.procs = (int (*)(void *, unsigned int *, struct nvml_proc_v1 *))dlsym(
		h, "nvmlDeviceGetComputeRunningProcesses");
	if (!nv.init || !nv.by_bus || !nv.procs || nv.init() != 0)
		return; /* the library stays loaded: NVML may have started threads */
	nv.err = 0;
}

int r2g_nvml_gpu_pids(const char *bus, pid_t *pids, size_t max, size_t *n, char *err,
		      size_t errlen)
{
	struct nvml_proc_v1 info[R2G_NVML_MAX_PIDS];
	unsigned int cnt = R2G_NVML_MAX_PIDS;
	void *dev = NULL;
	int r;

	pthread_once(&nv.once, nvml_load);
	if (nv.err) {
		snprintf(err, errlen, "NVML (libnvidia-ml.so.1) is not usable");
		return nv.err;
	}
	if ((r = nv.by_bus(bus, &dev)) != 0) {
		snprintf(err, errlen, "NVML knows no GPU at %s (error %d)", bus, r);
		return -ENODEV;
	}
	if ((r = nv.procs(dev, &cnt, info)) != 0) {
		snprintf(err, errlen, "NVML could not list the processes on GPU %s (error %d%s)",
			 bus, r, r == 7 ? ": more than r2ccld asks for" : "");
		return -EIO;
	}
	if (cnt > max)
		cnt = (unsigned int)max;
	for (unsigned int i = 0; i < cnt; i++)
		pids[i] = (pid_t)info[i].pid;
	*n = cnt;
	return 0;
}
