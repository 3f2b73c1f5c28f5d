// SPDX-License-Identifier: MIT
/* The daemon's GPU API (daemon/gpu/gpu.h) where no GPU can be used: a build
 * without CUDA (gpu_stub.c) answers -EOPNOTSUPP, "no GPU support built"; a
 * CUDA build on a host without a usable GPU (no driver: this machine, CI)
 * answers -ENODEV with the reason, every time (device.c initializes once).
 * On a host with a GPU, a registration naming no GPU of the host is refused.
 * Runs in the unit suite of every build. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm.h"
#include "engine/exec.h"
#include "gpu/gpu.h"
#include "gpu_abi.h"

static struct r2d D;
static struct r2_session S;
static struct r2_comm C;

static void setup(void)
{
	char err[256];

	memset(&D, 0, sizeof(D));
	ck_assert_int_eq(r2_params_init(&D.params, r2d_param_defs, P_COUNT, err, sizeof(err)), 0);
	S.d = &D;
	S.id = 7;
	C.d = &D;
}

static void teardown(void)
{
	r2_gpu_shutdown();
	r2_params_free(&D.params);
}

/* A well-formed IPC registration of 1 MiB on the GPU with UUID 0. */
static int region_new(struct r2_memreg **m, char *err, size_t len)
{
	static const uint8_t handle[R2_GPU_IPC_HANDLE_BYTES], uuid[R2_GPU_UUID_BYTES];
	struct r2_gpu_reg_req req = {
		.kind = R2_GPU_MEM_IPC,
		.ipc_handle = handle,
		.ipc_handle_len = sizeof(handle),
		.uuid = uuid,
		.uuid_len = sizeof(uuid),
		.alloc_base = 0x7f0000000000ull,
		.alloc_size = 1 << 20,
		.offset = 0,
		.size = 1 << 20,
		.fd = -1,
		.dev_fd = -1,
	};

	err[0] = 0;
	return r2_gpu_region_new(&S, &req, m, err, len);
}

START_TEST(test_register_refused)
{
	struct r2_memreg *m = NULL;
	char err[256];

	for (int i = 0; i < 2; i++) { /* the same answer the second time */
		int r = region_new(&m, err, sizeof(err));
#if HAVE_CUDA
		ck_assert_int_eq(r, -ENODEV);
		ck_assert_msg(strstr(err, "no usable GPU") || strstr(err, "no GPU of this host"),
			      "error text: %s", err);
#else
		ck_assert_int_eq(r, -EOPNOTSUPP);
		ck_assert_msg(strstr(err, "no GPU support built"), "error text: %s", err);
#endif
		ck_assert_ptr_null(m);
	}
}
END_TEST

START_TEST(test_exec_refused)
{
	struct r2_exec *x = calloc(1, sizeof(*x) + sizeof(x->ops[0]));
	struct r2_memreg *m = NULL;
	char err[256];
	int want;

	ck_assert_ptr_nonnull(x);
	x->c = &C;
	x->opcode = R2_OP_ALLREDUCE;
	x->nops = 0;
#if HAVE_CUDA
	/* the GPUs are looked for at the first registration */
	ck_assert_int_lt(region_new(&m, err, sizeof(err)), 0);
	if (!strstr(err, "no usable GPU")) {
		free(x);
		return; /* this host has a GPU: the gpu suite covers execution */
	}
	want = -ENODEV;
#else
	want = -EOPNOTSUPP;
	(void)m;
	(void)err;
#endif
	ck_assert(!r2_gpu_exec_is_gpu(x));
	ck_assert_int_eq(r2_gpu_exec(x), want);
	ck_assert_int_eq(r2_gpu_exec_rail(x, NULL), want);
#if !HAVE_CUDA
	/* nothing was staged: the status passes through */
	x->gpu_stage = NULL;
	ck_assert_int_eq(r2_gpu_stage_end(x, -ETIMEDOUT), -ETIMEDOUT);
	ck_assert_int_eq(r2_gpu_stage_end(x, 0), 0);
	ck_assert_ptr_null(x->gpu_stage);
#endif
	free(x);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gpu_api");
	TCase *tc = tcase_create("refused");
	SRunner *sr;
	int nf;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_register_refused);
	tcase_add_test(tc, test_exec_refused);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf == 0 ? 0 : 1;
}
