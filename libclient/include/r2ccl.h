/* SPDX-License-Identifier: MIT */
/*
 * r2ccl.h - the one public header of libr2ccl, the client library of R2CCL.
 *
 * A process connects to its host's r2ccld, shares buffers with it and submits
 * collectives; the daemon does the work (the client never touches the
 * network). Every function returns 0 or a negative error code: a negative
 * errno value, or one of the R2CCL_E* codes below (reserved range
 * -4000..-4099). r2ccl_strerror() turns either into text.
 *
 * After a failure, r2ccl_last_error() says why in a sentence (the socket
 * path tried, the rank that was missing, ...).
 *
 * Lifetimes (docs/client.md):
 *  - r2ccl_disconnect releases everything the client owns: it unmaps every
 *    r2ccl_mem_alloc buffer (touching one afterwards faults, as after
 *    munmap) and releases its communicators. Destroy communicators first:
 *    one still alive at disconnect is released without waiting for the
 *    other ranks, and any later call with it (r2ccl_comm_destroy included)
 *    returns -EBADF.
 *  - A handle that was destroyed or disconnected is answered -EBADF by every
 *    function (a second r2ccl_comm_destroy, a collective after destroy, any
 *    call with a client after r2ccl_disconnect), never read after free: the
 *    library keeps a few dozen bytes of each such handle until the process
 *    exits. Passing a pointer that never was a handle is undefined.
 *  - r2ccl_comm_init_rank blocks until every rank of the communicator has
 *    joined, or until the daemon's bootstrap_timeout_ms (30 s by default)
 *    passes (R2CCL_E_BOOTSTRAP, saying which rank was missing).
 *  - fork(): a client belongs to the process that connected. In a child,
 *    every call with an inherited client or communicator returns
 *    R2CCL_E_FORKED (nothing is sent to the daemon, the parent's session is
 *    not disturbed), except r2ccl_disconnect and r2ccl_comm_destroy, which
 *    release the child's copies only. A child connects anew.
 *
 * Threading: an r2ccl_client_t and its communicators may be used from one
 * thread at a time (like an NCCL communicator); r2ccl_disconnect must not
 * run while another thread uses the client. Different clients may be used
 * from different threads at once. r2ccl_last_error is per thread.
 */
#ifndef R2CCL_H
#define R2CCL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define R2CCL_VERSION_MAJOR 0
#define R2CCL_VERSION_MINOR 1
#define R2CCL_VERSION_PATCH 0
#define R2CCL_VERSION_STRING "0.1.0"

/* Default path of r2ccld's Unix socket; R2CCL_SOCKET overrides it. */
#define R2CCL_DEFAULT_SOCKET "/run/r2ccl/r2ccld.sock"

/* Project error codes (negative, in a reserved range above errno values). */
enum r2ccl_error {
	R2CCL_E_BASE = -4000,
	R2CCL_E_DAEMON_GONE = -4001,    /* the daemon closed the session */
	R2CCL_E_PROTO_VERSION = -4002,  /* client and daemon speak different versions */
	R2CCL_E_PROTOCOL = -4003,       /* malformed or unexpected frame */
	R2CCL_E_MISMATCH = -4004,       /* ranks called with different arguments */
	R2CCL_E_PEER_GONE = -4005,      /* another rank of the communicator died or left it */
	R2CCL_E_COMM_BROKEN = -4006,    /* communicator failed earlier; destroy it */
	R2CCL_E_NO_PATH = -4007,        /* no healthy path left to a peer host */
	R2CCL_E_BOOTSTRAP = -4008,      /* communicator could not be formed */
	R2CCL_E_DUP_RANK = -4009,       /* a rank was given twice */
	R2CCL_E_SHUTDOWN = -4010,       /* the daemon is shutting down */
	R2CCL_E_BAD_BUFFER = -4011,     /* buffer not registered or out of range */
	R2CCL_E_QUOTA = -4012,          /* a cap of the daemon (docs/security.md) */
	R2CCL_E_FORKED = -4013,         /* handle inherited through fork(): connect again */
	R2CCL_E_LAST = -4099,
};

/* Data types (the same values on the wire). */
typedef enum {
	R2CCL_INT8 = 0,
	R2CCL_UINT8 = 1,
	R2CCL_INT32 = 2,
	R2CCL_UINT32 = 3,
	R2CCL_INT64 = 4,
	R2CCL_UINT64 = 5,
	R2CCL_FLOAT16 = 6,
	R2CCL_BFLOAT16 = 7,
	R2CCL_FLOAT32 = 8,
	R2CCL_FLOAT64 = 9,
	R2CCL_NUM_DTYPES
} r2ccl_dtype_t;

/* Reduction operations. avg: sum, then divided by the rank count (integers
 * round toward zero, as C division does; see docs/architecture.md). */
typedef enum {
	R2CCL_SUM = 0,
	R2CCL_PROD = 1,
	R2CCL_MIN = 2,
	R2CCL_MAX = 3,
	R2CCL_AVG = 4,
	R2CCL_NUM_OPS
} r2ccl_redop_t;

#define R2CCL_UNIQUE_ID_BYTES 128
/* Names a communicator across processes and hosts (NCCL's ncclUniqueId). */
typedef struct {
	char internal[R2CCL_UNIQUE_ID_BYTES];
} r2ccl_unique_id_t;

typedef struct r2ccl_client r2ccl_client_t;
typedef struct r2ccl_comm r2ccl_comm_t;

/* Options for r2ccl_connect; grows at its end, callers set .size. */
typedef struct {
	size_t size;             /* sizeof(r2ccl_connect_opts_t) */
	const char *socket_path; /* NULL: $R2CCL_SOCKET, else R2CCL_DEFAULT_SOCKET */
	int timeout_ms;          /* connect/handshake/control reply timeout; 0: 30000 */
	const char *client_name; /* shown by r2cclctl; NULL: program name */
} r2ccl_connect_opts_t;

#define R2CCL_CONNECT_OPTS_INITIALIZER \
	{ sizeof(r2ccl_connect_opts_t), NULL, 0, NULL }

const char *r2ccl_strerror(int err);
/* Why this thread's last call into libr2ccl failed, in a sentence: "" after
 * a call that succeeded (each call clears it) or a failure with nothing to
 * add to r2ccl_strerror: for a missing daemon the socket path tried;
 * for a communicator that failed, the daemon's reason ("only 1 of 2 ranks
 * joined within 3000 ms (rank 1 missing)", "rank 0 waited 3000 ms for rank 1
 * to call the matching operation"). Valid until this thread's next call into
 * libr2ccl. Never NULL. */
const char *r2ccl_last_error(void);
const char *r2ccl_dtype_name(r2ccl_dtype_t dtype);
const char *r2ccl_redop_name(r2ccl_redop_t op);
size_t r2ccl_dtype_size(r2ccl_dtype_t dtype); /* 0 for an invalid type */

/* Sessions. opts may be NULL. */
int r2ccl_connect(const r2ccl_connect_opts_t *opts, r2ccl_client_t **out);
void r2ccl_disconnect(r2ccl_client_t *client); /* accepts NULL */
/* 0 while the daemon serves this session; R2CCL_E_DAEMON_GONE once it is gone. */
int r2ccl_client_check(r2ccl_client_t *client);

/* Shared host memory: allocated in a memfd the daemon maps too (zero copy).
 * Only memory from r2ccl_mem_alloc (any address inside it) may be passed to
 * collectives. */
int r2ccl_mem_alloc(r2ccl_client_t *client, size_t size, void **ptr);
int r2ccl_mem_free(r2ccl_client_t *client, void *ptr);

/* Communicators (NCCL's model). */
int r2ccl_get_unique_id(r2ccl_client_t *client, r2ccl_unique_id_t *id);
int r2ccl_comm_init_rank(r2ccl_client_t *client, r2ccl_comm_t **comm, int nranks,
			 const r2ccl_unique_id_t *id, int rank);

/* How a communicator's traffic is moved off a failed or slow NIC (the seeds'
 * HotRepair / Balance; docs/resilience.md). */
typedef enum {
	R2CCL_MODE_DEFAULT = 0,   /* $R2CCL_MODE of this process if set, else the daemon's mode */
	R2CCL_MODE_BALANCE = 1,   /* re-plan over every NIC that works (failure-optimized) */
	R2CCL_MODE_HOTREPAIR = 2, /* move a failed NIC's share to one backup NIC */
} r2ccl_mode_t;

/* Who may join a communicator besides its creator (the first rank to join
 * on this daemon): by default only processes of the creator's uid and tenant
 * (cgroup); a rank of another uid or tenant is refused with -EACCES and the
 * creator's communicator goes on (docs/security.md). Only the creator's
 * value counts. */
typedef enum {
	R2CCL_SHARE_OWNER = 0,   /* the creator's uid and tenant only */
	R2CCL_SHARE_ANY_UID = 1, /* any local user that holds the unique id */
} r2ccl_share_t;

/* Options for r2ccl_comm_init_rank_config (NCCL's ncclConfig_t); grows at
 * its end, callers set .size. Every rank must give the same mode (resolved:
 * DEFAULT counts as what it stands for): a mismatch fails the communicator's
 * initialization on every rank with R2CCL_E_MISMATCH. */
typedef struct {
	size_t size;       /* sizeof(r2ccl_comm_config_t) */
	r2ccl_mode_t mode;
	r2ccl_share_t share;
} r2ccl_comm_config_t;

#define R2CCL_COMM_CONFIG_INITIALIZER \
	{ sizeof(r2ccl_comm_config_t), R2CCL_MODE_DEFAULT, R2CCL_SHARE_OWNER }

/* r2ccl_comm_init_rank with options; config may be NULL (all defaults).
 * -EINVAL for an unknown mode (also for $R2CCL_MODE other than balance or
 * hotrepair). */
int r2ccl_comm_init_rank_config(r2ccl_client_t *client, r2ccl_comm_t **comm, int nranks,
				const r2ccl_unique_id_t *id, int rank,
				const r2ccl_comm_config_t *config);
int r2ccl_comm_destroy(r2ccl_comm_t *comm); /* accepts NULL */
int r2ccl_comm_abort(r2ccl_comm_t *comm);   /* accepts NULL */
int r2ccl_comm_count(const r2ccl_comm_t *comm, int *count);
int r2ccl_comm_user_rank(const r2ccl_comm_t *comm, int *rank);
/* Ask the daemons to re-plan this communicator now (seed's ncclCommTriggerRebalance). */
int r2ccl_comm_trigger_rebalance(r2ccl_comm_t *comm);

/* Bandwidth of a group (the seeds' r2ccl_set_bandwidth_limit;
 * docs/tenancy.md). The group is the tenant of the communicator: every
 * communicator of the caller's cgroup on this host shares it. Units: bits
 * per second leaving this host, all rails together.
 *   bits_per_s > 0: a cap: the tenant sends at most this (token bucket,
 *     burst 2% of a second); never above the cap its policy gives (a larger
 *     value is cut to it), so a tenant can only lower its own cap;
 *   R2CCL_BW_RESERVE(x): a reserved minimum: up to x bits/s of the tenant's
 *     chunks go ahead of other tenants' (cut to its cap, if any, and to its
 *     weight's share of the host's rails);
 *   R2CCL_BW_UNLIMITED (0): the tenant's own cap and reservation removed
 *     (its policy's cap stays).
 * A cap and a reservation are set by two calls and kept apart. 0, or a
 * negative error (-EINVAL for INT64_MIN). */
#define R2CCL_BW_UNLIMITED 0
#define R2CCL_BW_RESERVE(bits_per_s) (-(int64_t)(bits_per_s))
int r2ccl_set_bandwidth_limit(r2ccl_comm_t *group, int64_t bits_per_s);

/* Collectives. Blocking: they return when the result is in recvbuff (or an
 * error), within the daemon's operation timeout. In-place when
 * sendbuff == recvbuff (AllGather: sendbuff == recvbuff + rank*count*size;
 * ReduceScatter: sendbuff == recvbuff - rank*recvcount*size, as NCCL). */
int r2ccl_allreduce(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff, size_t count,
		    r2ccl_dtype_t dtype, r2ccl_redop_t op);
int r2ccl_allgather(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff, size_t sendcount,
		    r2ccl_dtype_t dtype);
int r2ccl_reducescatter(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			size_t recvcount, r2ccl_dtype_t dtype, r2ccl_redop_t op);
int r2ccl_broadcast(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff, size_t count,
		    r2ccl_dtype_t dtype, int root);
int r2ccl_reduce(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff, size_t count,
		 r2ccl_dtype_t dtype, r2ccl_redop_t op, int root);
int r2ccl_send(r2ccl_comm_t *comm, const void *sendbuff, size_t count, r2ccl_dtype_t dtype,
	       int peer);
int r2ccl_recv(r2ccl_comm_t *comm, void *recvbuff, size_t count, r2ccl_dtype_t dtype, int peer);

/* ---- GPU buffers and stream-ordered collectives (NCCL's model) ----
 * libr2ccl loads the CUDA driver (libcuda.so.1) itself when these are first
 * used; a libr2ccl or r2ccld built without CUDA answers -EOPNOTSUPP, a host
 * without a GPU -ENODEV.
 *
 * Register GPU memory once (like a memory registration for RDMA): ptr..+size
 * must lie in one allocation, from cudaMalloc (shared through a CUDA IPC
 * handle) or from cuMemCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
 * among its requested handle types (shared through a POSIX fd). Registering
 * several ranges of one allocation is fine (the daemon opens it once).
 * Deregister before freeing the memory. */
int r2ccl_mem_register_gpu(r2ccl_client_t *client, void *ptr, size_t size);
int r2ccl_mem_deregister_gpu(r2ccl_client_t *client, void *ptr); /* ptr as registered */

/* Stream-ordered collectives over registered GPU memory: they return once the
 * operation is queued; on `stream` (a cudaStream_t; NULL is the legacy default
 * stream) the operation starts after the stream's earlier work and the
 * stream's later work waits for it; the CPU never blocks (except when 256
 * operations of the communicator are still outstanding). The thread must have
 * the stream's CUDA context current (as with NCCL). Errors of the operation
 * itself are reported by r2ccl_comm_get_async_error; the stream goes on. */
int r2ccl_allreduce_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			   size_t count, r2ccl_dtype_t dtype, r2ccl_redop_t op, void *stream);
int r2ccl_allgather_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			   size_t sendcount, r2ccl_dtype_t dtype, void *stream);
int r2ccl_reducescatter_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			       size_t recvcount, r2ccl_dtype_t dtype, r2ccl_redop_t op,
			       void *stream);
int r2ccl_broadcast_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff,
			   size_t count, r2ccl_dtype_t dtype, int root, void *stream);
int r2ccl_reduce_stream(r2ccl_comm_t *comm, const void *sendbuff, void *recvbuff, size_t count,
			r2ccl_dtype_t dtype, r2ccl_redop_t op, int root, void *stream);
int r2ccl_send_stream(r2ccl_comm_t *comm, const void *sendbuff, size_t count,
		      r2ccl_dtype_t dtype, int peer, void *stream);
int r2ccl_recv_stream(r2ccl_comm_t *comm, void *recvbuff, size_t count, r2ccl_dtype_t dtype,
		      int peer, void *stream);
/* The first error of this communicator's stream-ordered operations (0 if
 * none) in *async_err (ncclCommGetAsyncError). Call it while waiting for a
 * stream: it also releases the streams of operations the daemon refused or
 * can no longer run (daemon gone), which then carry that error. */
int r2ccl_comm_get_async_error(r2ccl_comm_t *comm, int *async_err);

#ifdef __cplusplus
}
#endif
#endif /* R2CCL_H */
