/* SPDX-License-Identifier: MIT */
/* The processes with a CUDA context on a GPU (nvml.c). */
#ifndef R2CCL_DAEMON_GPU_NVML_H
#define R2CCL_DAEMON_GPU_NVML_H

#include <stddef.h>
#include <sys/types.h>

#define R2G_NVML_MAX_PIDS 256

/* The pids (as NVML sees them: the host's) of the processes with a compute
 * context on the GPU at PCI bus id bus, at most max, in pids[0..*n); 0, or
 * -errno with the reason in err. */
int r2g_nvml_gpu_pids(const char *bus, pid_t *pids, size_t max, size_t *n, char *err,
		      size_t errlen);

#endif
