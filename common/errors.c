// SPDX-License-Identifier: MIT
/*
 * Error strings and the names of data types and reduction operations (public
 * API of libr2ccl, also used by the daemon and the tools).
 *
 * Thread-safe: known codes map to constant strings; errno text comes from
 * strerrordesc_np() (glibc >= 2.32, constant strings too); only unknown codes
 * are formatted, into a thread-local buffer.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "r2ccl.h"

static const char *const r2ccl_errs[] = {
	[-(R2CCL_E_DAEMON_GONE - R2CCL_E_BASE)] =
		"The r2ccld daemon closed the session or is no longer running.",
	[-(R2CCL_E_PROTO_VERSION - R2CCL_E_BASE)] =
		"The client library and the daemon speak different protocol versions.",
	[-(R2CCL_E_PROTOCOL - R2CCL_E_BASE)] = "A malformed or unexpected message was received.",
	[-(R2CCL_E_MISMATCH - R2CCL_E_BASE)] =
		"The ranks of the communicator called the operation with different arguments.",
	[-(R2CCL_E_PEER_GONE - R2CCL_E_BASE)] = "Another rank of the communicator died or left it.",
	[-(R2CCL_E_COMM_BROKEN - R2CCL_E_BASE)] =
		"The communicator failed earlier and must be destroyed.",
	[-(R2CCL_E_NO_PATH - R2CCL_E_BASE)] = "No healthy network path is left to a peer host.",
	[-(R2CCL_E_BOOTSTRAP - R2CCL_E_BASE)] = "The communicator could not be formed.",
	[-(R2CCL_E_DUP_RANK - R2CCL_E_BASE)] =
		"The same rank was given twice when forming the communicator.",
	[-(R2CCL_E_SHUTDOWN - R2CCL_E_BASE)] = "The daemon is shutting down.",
	[-(R2CCL_E_BAD_BUFFER - R2CCL_E_BASE)] =
		"The buffer is not registered with the daemon or is out of its range.",
	[-(R2CCL_E_QUOTA - R2CCL_E_BASE)] = "A cap of the daemon was reached.",
	[-(R2CCL_E_FORKED - R2CCL_E_BASE)] =
		"The handle belongs to the process that connected (inherited through fork).",
};

static _Thread_local char r2ccl_errbuf[48];

const char *r2ccl_strerror(int err)
{
	const char *s = NULL;

	if (err == 0)
		return "Success.";
	if (err < 0 && err > -4000)
		s = strerrordesc_np(-err);
	else if (err <= R2CCL_E_BASE && err >= R2CCL_E_LAST) {
		int i = R2CCL_E_BASE - err;

		if (i < (int)(sizeof(r2ccl_errs) / sizeof(r2ccl_errs[0])))
			s = r2ccl_errs[i];
	}
	if (s)
		return s;
	snprintf(r2ccl_errbuf, sizeof(r2ccl_errbuf), "unknown error %d", err);
	return r2ccl_errbuf;
}

static const char *const dtype_names[R2CCL_NUM_DTYPES] = {
	[R2CCL_INT8] = "int8",       [R2CCL_UINT8] = "uint8",       [R2CCL_INT32] = "int32",
	[R2CCL_UINT32] = "uint32",   [R2CCL_INT64] = "int64",       [R2CCL_UINT64] = "uint64",
	[R2CCL_FLOAT16] = "half",    [R2CCL_BFLOAT16] = "bfloat16", [R2CCL_FLOAT32] = "float",
	[R2CCL_FLOAT64] = "double",
};

static const size_t dtype_sizes[R2CCL_NUM_DTYPES] = {
	[R2CCL_INT8] = 1,    [R2CCL_UINT8] = 1,    [R2CCL_INT32] = 4,   [R2CCL_UINT32] = 4,
	[R2CCL_INT64] = 8,   [R2CCL_UINT64] = 8,   [R2CCL_FLOAT16] = 2, [R2CCL_BFLOAT16] = 2,
	[R2CCL_FLOAT32] = 4, [R2CCL_FLOAT64] = 8,
};

static const char *const redop_names[R2CCL_NUM_OPS] = {
	[R2CCL_SUM] = "sum", [R2CCL_PROD] = "prod", [R2CCL_MIN] = "min",
	[R2CCL_MAX] = "max", [R2CCL_AVG] = "avg",
};

const char *r2ccl_dtype_name(r2ccl_dtype_t dtype)
{
	if ((unsigned)dtype >= R2CCL_NUM_DTYPES)
		return "invalid";
	return dtype_names[dtype];
}

const char *r2ccl_redop_name(r2ccl_redop_t op)
{
	if ((unsigned)op >= R2CCL_NUM_OPS)
		return "invalid";
	return redop_names[op];
}

size_t r2ccl_dtype_size(r2ccl_dtype_t dtype)
{
	if ((unsigned)dtype >= R2CCL_NUM_DTYPES)
		return 0;
	return dtype_sizes[dtype];
}
