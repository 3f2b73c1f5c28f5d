/* SPDX-License-Identifier: MIT */
/*
 * The GPU path of an r2ccld built without CUDA (meson picks this file when
 * cuda_enabled is false): the gpu.h API, answering -EOPNOTSUPP. No region is
 * ever a GPU region, so no operation reaches the GPU worker or staging.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/comm_record.h"
#include "base/op_record.h"
#include "gpu.h"

int r2_gpu_region_new(struct r2_session *s, const struct r2_gpu_reg_req *req,
		      struct r2_memreg **out, char *err, size_t errlen)
{
	(void)s;
	(void)req;
	(void)out;
	snprintf(err, errlen, "no GPU support built: this r2ccld was built without CUDA");
	return -EOPNOTSUPP;
}

void r2_gpu_region_free(struct r2_memreg *m)
{
	free(m);
}

bool r2_gpu_exec_is_gpu(const struct r2_exec *x)
{
	(void)x;
	return false;
}

int r2_gpu_exec(struct r2_exec *x)
{
	(void)x;
	return -EOPNOTSUPP;
}

int r2_gpu_exec_rail(struct r2_exec *x, struct r2_pool *pool)
{
	(void)x;
	(void)pool;
	return -EOPNOTSUPP;
}

int r2_gpu_stage_end(struct r2_exec *x, int status)
{
	x->gpu_stage = NULL;
	return status;
}

void r2_gpu_quiesce(void)
{
}

void r2_gpu_shutdown(void)
{
}

void r2_gpu_set_engine(const struct r2_gpu_engine *e)
{
	(void)e; /* nothing runs on a GPU in this build */
}
