/* SPDX-License-Identifier: MIT */
/*
 * r2ccl-bench --gpu: GPU buffers through the CUDA driver API, loaded with
 * dlopen("libcuda.so.1") so r2ccl-bench builds and runs without CUDA (the
 * option then fails with a clear message).
 */
#ifndef R2CCL_BENCH_GPUMEM_H
#define R2CCL_BENCH_GPUMEM_H

#include <stddef.h>

/* Makes GPU ordinal (dev % device count) current for this process and
 * creates a stream; 0 or -1 with a message in err. */
int bgpu_open(int dev, int *ordinal, char *err, size_t errlen);
void *bgpu_stream(void); /* the stream (a CUstream / cudaStream_t) */
int bgpu_alloc(void **p, size_t size);
void bgpu_free(void *p);
int bgpu_h2d(void *dst, const void *src, size_t n);
int bgpu_d2h(void *dst, const void *src, size_t n);
int bgpu_sync(void); /* waits for the stream */
void bgpu_close(void);

#endif
