/* SPDX-License-Identifier: MIT */
/*
 * An NVIDIA GPU's device file, /dev/nvidiaN, from its PCI bus id. A process
 * that can open that file can use the GPU; libr2ccl passes the open file to
 * r2ccld with a legacy CUDA IPC handle as that proof (gpu_legacy_ipc=
 * gpu-access, docs/security.md "GPU memory"). No CUDA here.
 */
#ifndef R2CCL_COMMON_NVDEV_H
#define R2CCL_COMMON_NVDEV_H

#include <sys/types.h>

#define R2_NVIDIA_MAJOR 195 /* NV_MAJOR_DEVICE_NUMBER of the driver */

/* The N of /dev/nvidiaN in the text of the driver's
 * /proc/driver/nvidia/gpus/<bus>/information ("Device Minor:  0");
 * -ENOENT if it has no such line. */
int r2_nvidia_minor_parse(const char *info);

/* The N of /dev/nvidiaN for the GPU at PCI bus id bus, as
 * cuDeviceGetPCIBusId writes it ("0000:1B:00.0"; the driver's folder is in
 * lower case); -errno. */
int r2_nvidia_minor(const char *bus);

/* Whether the MIG folder of a GPU's capabilities
 * (/proc/driver/nvidia/capabilities/gpuN/mig) holds a GPU instance ("gi*"):
 * 1, else 0 (no such folder: MIG off or not supported). Under MIG the
 * instances share /dev/nvidiaN, and access to one is granted by
 * /dev/nvidia-caps, so the device file proves nothing about an instance. */
int r2_nvidia_mig_dir_in_use(const char *migdir);
/* The same for /dev/nvidiaN's GPU. */
int r2_nvidia_mig_in_use(int minor);

/* The device number of /dev/nvidiaN (stat of the file, else the driver's
 * major with minor N); 0 if minor is negative. */
dev_t r2_nvidia_rdev(int minor);

#endif
