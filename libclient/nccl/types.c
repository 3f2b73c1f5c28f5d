/* SPDX-License-Identifier: MIT */
/* libnccl: NCCL's data types against r2ccl's. */
#include "nccl_int.h"

int nccl_dtype_r2(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8: return R2CCL_INT8;
	case ncclUint8: return R2CCL_UINT8;
	case ncclInt32: return R2CCL_INT32;
	case ncclUint32: return R2CCL_UINT32;
	case ncclInt64: return R2CCL_INT64;
	case ncclUint64: return R2CCL_UINT64;
	case ncclFloat16: return R2CCL_FLOAT16;
	case ncclFloat32: return R2CCL_FLOAT32;
	case ncclFloat64: return R2CCL_FLOAT64;
	case ncclBfloat16: return R2CCL_BFLOAT16;
	default: return -1;
	}
}

size_t nccl_dtype_size(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
	case ncclFloat16: case ncclBfloat16: return 2;
	case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
	case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
	default: return 0;
	}
}
