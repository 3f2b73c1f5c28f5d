/* SPDX-License-Identifier: MIT */
/*
 * The gpu suite's attacker (gpu_test.cu, test_ipc_owner): a GPU memory
 * registration sent on a raw control connection, with whatever IPC handle
 * the caller has, not the one libr2ccl would compute. C, for the protocol's
 * generated code.
 */
#ifndef R2CCL_TESTS_GPU_IPC_RAW_H
#define R2CCL_TESTS_GPU_IPC_RAW_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Says hello on the daemon's socket and registers the legacy IPC handle
 * (64 bytes) of an allocation of alloc_size bytes on the GPU of uuid (16
 * bytes), all of it; with dev_fd (>= 0) passed as the GPU's device file
 * (gpu_legacy_ipc=gpu-access). The reply's status (0 or negative, its error
 * in err), or a negative errno when no reply came. */
int ipc_raw_register(const char *socket, const uint8_t *handle, const uint8_t *uuid,
		     uint64_t alloc_base, uint64_t alloc_size, int dev_fd, char *err,
		     size_t errlen);

/* The device file of the GPU at PCI bus id bus (cudaDeviceGetPCIBusId's
 * text), opened for reading and writing as libr2ccl opens it; -errno. */
int ipc_raw_dev_file(const char *bus);

#ifdef __cplusplus
}
#endif

#endif
