/* SPDX-License-Identifier: MIT */
/*
 * libnccl's CUDA contexts without a GPU: each communicator works in its
 * device's context (docs/nccl.md, "CUDA contexts"), whatever the calling
 * thread has current. libnccl loads the fake driver of
 * tests/nccl/fake_libcuda.c (LD_LIBRARY_PATH, set by meson): 8 devices with
 * a context each, a current one per thread, and a note of the context
 * current when a stream was synchronized (the host path synchronizes the
 * operation's stream first), per stream handle. A real r2ccld; host memory
 * registered with ncclCommRegister; exact sums. Exits 77 without CUDA
 * support in the library or without the fake.
 *  - ncclCommInitAll on devices 0 and 1 with device 1's context current
 *    (as after a loop of cudaSetDevice): rank 0 gets device 0's primary
 *    context (retained, released at destroy), rank 1 the current one; a
 *    group over both, ranks on their own threads: each rank's stream is
 *    used in its own device's context, and the caller's context is the same
 *    after ncclGroupEnd;
 *  - a communicator of device 0 called with device 1's context current:
 *    its stream is used in device 0's, and device 1's is current again
 *    after the call.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "nccl.h"

#define N 1024

static void *(*fctx)(int);
static void (*fset)(void *);
static void *(*fcur)(void);
static void *(*fseen)(int);
static int (*fretained)(int);

static float *buf(ncclComm_t comm, float base, void **reg)
{
	float *p = malloc(N * sizeof(float));

	ck_assert_ptr_nonnull(p);
	for (int i = 0; i < N; i++)
		p[i] = base + (float)(i % 5);
	ck_assert_int_eq(ncclCommRegister(comm, p, N * sizeof(float), reg), ncclSuccess);
	return p;
}

START_TEST(test_init_all_group)
{
	struct th_daemon d;
	ncclComm_t comm[2];
	int devs[2] = { 0, 1 };
	void *reg[2];
	float *b[2];

	th_start(&d, NULL);
	fset(fctx(1)); /* the device set last */
	ck_assert_int_eq(ncclCommInitAll(comm, 2, devs), ncclSuccess);
	ck_assert_int_eq(fretained(0), 1); /* device 0's primary context */
	ck_assert_int_eq(fretained(1), 0); /* device 1's: the current one */
	ck_assert_ptr_eq(fcur(), fctx(1));
	for (int r = 0; r < 2; r++)
		b[r] = buf(comm[r], (float)r, &reg[r]);
	ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
	for (int r = 0; r < 2; r++)
		ck_assert_int_eq(ncclAllReduce(b[r], b[r], N, ncclFloat32, ncclSum, comm[r],
					       (cudaStream_t)(uintptr_t)(r + 1)),
				 ncclSuccess);
	ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
	ck_assert_ptr_eq(fseen(1), fctx(0)); /* rank 0's stream, in device 0's context */
	ck_assert_ptr_eq(fseen(2), fctx(1));
	ck_assert_ptr_eq(fcur(), fctx(1));
	for (int r = 0; r < 2; r++)
		for (int i = 0; i < N; i++)
			ck_assert_msg(b[r][i] == 1.0f + 2.0f * (float)(i % 5), "rank %d element %d: %g",
				      r, i, b[r][i]);
	for (int r = 0; r < 2; r++) {
		ck_assert_int_eq(ncclCommDeregister(comm[r], reg[r]), ncclSuccess);
		ck_assert_int_eq(ncclCommDestroy(comm[r]), ncclSuccess);
		free(b[r]);
	}
	ck_assert_int_eq(fretained(0), 0); /* released with rank 0 */
	ck_assert_ptr_eq(fcur(), fctx(1));
	th_stop_ok(&d);
}
END_TEST

START_TEST(test_call_other_device_current)
{
	struct th_daemon d;
	ncclUniqueId id;
	ncclComm_t comm;
	void *reg;
	float *b;

	th_start(&d, NULL);
	fset(fctx(0));
	ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
	ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
	ck_assert_int_eq(fretained(0), 0); /* the current context is device 0's */
	b = buf(comm, 3.0f, &reg);
	fset(fctx(1));
	ck_assert_int_eq(ncclAllReduce(b, b, N, ncclFloat32, ncclSum, comm, (cudaStream_t)3),
			 ncclSuccess);
	ck_assert_ptr_eq(fseen(3), fctx(0));
	ck_assert_ptr_eq(fcur(), fctx(1)); /* the caller's, as it was */
	ck_assert(b[7] == 3.0f + 2.0f);
	fset(NULL); /* a thread with none (a watchdog's) */
	ck_assert_int_eq(ncclCommDeregister(comm, reg), ncclSuccess);
	ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
	ck_assert_ptr_null(fcur());
	free(b);
	th_stop_ok(&d);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { test_init_all_group, test_call_other_device_current };
	void *h;

	if (!R2C_TEST_CUDA) {
		printf("SKIP: libnccl was built without CUDA\n");
		return 77;
	}
	h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	*(void **)&fctx = h ? dlsym(h, "fake_cuda_ctx") : NULL;
	*(void **)&fset = h ? dlsym(h, "fake_cuda_ctx_set") : NULL;
	*(void **)&fcur = h ? dlsym(h, "fake_cuda_ctx_current") : NULL;
	*(void **)&fseen = h ? dlsym(h, "fake_cuda_ctx_seen") : NULL;
	*(void **)&fretained = h ? dlsym(h, "fake_cuda_ctx_retained") : NULL;
	if (!fctx || !fset || !fcur || !fseen || !fretained) {
		printf("SKIP: the libcuda.so.1 found is not tests/nccl/fake_libcuda.c "
		       "(LD_LIBRARY_PATH)\n");
		return 77;
	}
	return th_run_suite(th_suite("nccl_ctx", 120, tests, sizeof(tests) / sizeof(tests[0])));
}
