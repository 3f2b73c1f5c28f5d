/* SPDX-License-Identifier: MIT */
/* What libnccl.so.2 (nccl/) uses of libr2ccl's internals, without client.h
 * (whose protocol headers it does not build): shutting a session's socket
 * from another thread wakes every call waiting on it (ncclCommAbort). */
#ifndef R2CCL_CLIENT_SESSION_H
#define R2CCL_CLIENT_SESSION_H

#include "r2ccl.h"

void r2c_client_shutdown(r2ccl_client_t *c);

#endif
