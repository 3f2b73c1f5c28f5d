/* SPDX-License-Identifier: MIT */
/* libnccl (R2CCL's NCCL API): internal structures shared by its files. */
#ifndef R2CCL_NCCL_INT_H
#define R2CCL_NCCL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "r2ccl.h"

/* Every entry point also exists as pnccl* (NCCL's profiling interface). */
#define NCCL_ALIAS(name) extern __typeof__(name) p##name __attribute__((alias(#name)))

/* ---- configuration (config.c; pure) ---- */

/* What the library takes from a caller's ncclConfig_t. */
struct nccl_cfg {
	bool blocking;
	int split_share;
	char comm_name[64];
	char net_name[64];
};

/* Reads the caller's ncclConfig_t (NULL: defaults). Fields beyond what the
 * caller's size and version hold are ignored (they keep their default).
 * Returns ncclSuccess or ncclInvalidArgument, with why in err. */
ncclResult_t nccl_config_parse(const ncclConfig_t *cfg, struct nccl_cfg *out, char *err,
			       size_t errlen);
/* The size of ncclConfig_t of the NCCL version `version` (0 if unknown:
 * older than 2.14, the first with a versioned config). */
size_t nccl_config_size_of_version(unsigned int version);

/* ---- errors and logging (errors.c) ---- */

/* ncclResult_t for an r2ccl error (0 or negative). */
ncclResult_t nccl_result_of(int r2err);
/* Records the last error's text (thread's, and the communicator's if not
 * NULL) and returns res. */
ncclResult_t nccl_fail(struct ncclComm *comm, ncclResult_t res, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Makes text the calling thread's last error (a failure another thread
 * recorded, passed on to the thread that called the API), without logging
 * it again. */
void nccl_set_thread_error(const char *text);
/* nccl_fail for an r2ccl error: the text says what failed and why. */
ncclResult_t nccl_fail_r2(struct ncclComm *comm, int r2err, const char *what);

enum nccl_log_level { NCCL_LOG_NONE, NCCL_LOG_VERSION, NCCL_LOG_WARN, NCCL_LOG_INFO,
		      NCCL_LOG_TRACE };
/* NCCL_DEBUG (and NCCL_DEBUG_FILE): the user asked for these lines. */
void nccl_log(enum nccl_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
enum nccl_log_level nccl_log_level(void);

/* ---- types (coll.c) ---- */

/* r2ccl type of an NCCL type; -1 if R2CCL cannot reduce it. */
int nccl_dtype_r2(ncclDataType_t t);
/* bytes per element, 0 for an invalid type */
size_t nccl_dtype_size(ncclDataType_t t);

/* ---- operations and groups (group.c; the ordering is pure) ---- */

enum nccl_opkind {
	NCCL_OP_ALLREDUCE,
	NCCL_OP_ALLGATHER,
	NCCL_OP_REDUCESCATTER,
	NCCL_OP_BROADCAST,
	NCCL_OP_REDUCE,
	NCCL_OP_SEND,
	NCCL_OP_RECV,
};

struct nccl_premul {
	bool used;
	ncclDataType_t dtype;
	ncclScalarResidence_t residence;
	const void *scalar_dev; /* ncclScalarDevice */
	double scalar;          /* ncclScalarHostImmediate */
	int64_t iscalar;
};

struct nccl_op {
	enum nccl_opkind kind;
	struct ncclComm *comm;
	const void *sendbuff;
	void *recvbuff;
	size_t count;
	ncclDataType_t dtype;
	ncclRedOp_t op;
	struct nccl_premul pm; /* a PreMulSum op's operator, copied when the op is
				* called: it may be destroyed before the group ends */
	int root; /* root, or the peer of a send/recv */
	cudaStream_t stream;
	unsigned seq; /* order of the call within its group */
};

/* Puts a group's operations in the order every rank agrees on: per
 * communicator in call order, collectives first (as called), then
 * point-to-point operations sorted by the transfer they are part of
 * (source rank, destination rank, then call order): the smallest transfer
 * not yet done is at the head of both its ranks' queues, so queues that
 * match heads one pair at a time (r2ccld) never deadlock, whatever order the
 * program called them in. rank_of gives the calling rank in an op's
 * communicator (op->comm is otherwise compared by pointer only). */
/* Groups up to this many operations are ordered and run with no malloc. */
#define NCCL_GROUP_SMALL 16
void nccl_group_order(struct nccl_op *ops, size_t n, int (*rank_of)(const struct ncclComm *));

/* Thread-local group state. */
int nccl_group_depth(void);
/* Queues op if a group is open (returns true), else the caller runs it. */
ncclResult_t nccl_group_add(const struct nccl_op *op, bool *queued);
/* Inside a group, an operation's call failed (its arguments, its
 * communicator): ncclGroupEnd returns the first such error and runs none of
 * the group's operations, as NCCL does. Returns r. */
ncclResult_t nccl_group_error(ncclResult_t r);
/* For tests: how many operations the open group holds. */
size_t nccl_group_pending(void);
/* The executor GroupEnd hands the ordered operations to (coll.c by
 * default; tests replace it). */
typedef ncclResult_t (*nccl_group_runner_t)(struct nccl_op *ops, size_t n);
void nccl_group_set_runner(nccl_group_runner_t fn);
/* What a thread started inside a group reports: its result and, when it
 * failed, its error's text (the thread's own ncclGetLastError). */
struct nccl_deferred {
	ncclResult_t result;
	char err[256];
};
/* Threads started inside a group (communicator creation) that GroupEnd
 * joins; GroupEnd frees d, and makes the first failure's text its
 * caller's last error. */
ncclResult_t nccl_group_defer_thread(pthread_t t, struct nccl_deferred *d);

/* ---- communicators (comm.c) ---- */

struct nccl_greg; /* a GPU allocation registered with the daemon (mem.c) */
struct nccl_hreg; /* a host range the user registered (mem.c) */
/* A communicator's kernels (premul.cu), loaded in its context when first
 * used. */
struct nccl_kmod {
	void *mod;
	void *fn[7];
	bool failed; /* the driver refused the module: not again */
};

#define NCCL_MAX_PREMUL 64


struct ncclComm {
	pthread_mutex_t lock; /* serializes use of client */
	pthread_mutex_t sock_lock; /* publishing client against ncclCommAbort */
	r2ccl_client_t *client;
	r2ccl_comm_t *comm;
	int nranks, rank, cudev;
	/* the CUDA context of cudev it works in (nccl_cuda_ctx_for), made
	 * current by every call and thread of the library that touches CUDA
	 * for it: the caller's current one may be another device's (one
	 * thread driving several GPUs) or none (a watchdog thread) */
	void *cuctx;
	bool cuctx_primary; /* retained: released with the communicator */
	struct nccl_cfg cfg;
	_Atomic int init_state;  /* ncclInProgress while a nonblocking init runs, else its result */
	_Atomic int async_err;   /* ncclResult_t of the first failed operation */
	atomic_bool aborting;
	pthread_t init_thread;
	bool init_thread_live;
	char last_err[256];
	/* host staging (mem.c): r2ccl memory of this client */
	void *hstage;
	size_t hstage_size;
	/* GPU (mem.c) */
	struct nccl_greg *gregs;
	void *gstage_list; /* device staging buffers, freed with the comm */
	uintptr_t gstage;
	size_t gstage_size;
	cudaStream_t gstage_stream;
	struct nccl_premul premul[NCCL_MAX_PREMUL];
	struct nccl_kmod kmod; /* PreMulSum's scaling kernels (premul.cu) */
	r2ccl_unique_id_t uid; /* the id it was created with (ncclCommShrink derives from it) */
	/* the streams its GPU operations were queued on (ncclCommFinalize) */
	cudaStream_t streams[16];
	int nstreams;
	unsigned shrinks;      /* how many times it was shrunk */
};

/* Byte offset of the random nonce in an r2ccl unique id (struct r2_uid in
 * daemon/comm.h: magic, version, host id, nonce); the unit test checks it. */
#define NCCL_UID_NONCE_OFF 16
/* The id of a communicator shrunk from one created with `parent`: the same
 * root daemon, a nonce every remaining rank computes alike from the
 * parent's, the shrink's number and the excluded ranks. */
void nccl_uid_derive(const r2ccl_unique_id_t *parent, unsigned gen, const int *excl, int nexcl,
		     r2ccl_unique_id_t *out);

int nccl_comm_rank_of(const struct ncclComm *comm);
/* ncclSuccess if comm can run operations, else the error (and its text). */
ncclResult_t nccl_comm_ready(struct ncclComm *comm, const char *who);

/* ---- memory paths (mem.c) ---- */

enum nccl_memkind { NCCL_MEM_HOST, NCCL_MEM_GPU };
/* Where a buffer lives; ncclInvalidArgument for a host pointer that is
 * neither from ncclMemAlloc nor registered (ncclCommRegister). */
ncclResult_t nccl_mem_classify(struct ncclComm *comm, const void *p, size_t len,
			       enum nccl_memkind *kind);
/* Runs one operation whose buffers are host memory: staged through the
 * communicator's r2ccl memory, blocking. Called with comm->lock held. */
ncclResult_t nccl_run_host(struct nccl_op *op);
/* Queues one operation on GPU buffers on its stream. comm->lock held. */
ncclResult_t nccl_run_gpu(struct nccl_op *op);
/* Frees what mem.c holds for comm (GPU registrations, staging). */
void nccl_mem_comm_release(struct ncclComm *comm);

/* ---- the CUDA driver, loaded at run time (cuda.c) ---- */
bool nccl_cuda_available(void);
bool nccl_cuda_is_device_ptr(const void *p);
/* 1 if stream is being captured into a graph, 0 if not, <0 if unknown */
int nccl_cuda_stream_capturing(cudaStream_t stream);
int nccl_cuda_current_device(void);
/* the calling thread's CUDA context (NULL: none), to make it current on
 * a thread of the library's */
void *nccl_cuda_ctx_get(void);
void nccl_cuda_ctx_set(void *ctx);
/* The context a communicator of device dev works in: hint when given (its
 * parent's), else the calling thread's when it is dev's (dev < 0: whatever
 * is current), else dev's primary context, retained (*primary: release it
 * with nccl_cuda_ctx_put). NULL: no CUDA here, or the driver not in use
 * yet in this process. */
void *nccl_cuda_ctx_for(int dev, void *hint, bool *primary);
void nccl_cuda_ctx_put(int dev, bool primary);
/* Makes ctx current on the calling thread for a while (NULL: nothing
 * changes); leave puts back what was current before. */
struct nccl_ctx_save {
	void *prev;
	bool set;
};
void nccl_cuda_ctx_enter(void *ctx, struct nccl_ctx_save *sv);
void nccl_cuda_ctx_leave(const struct nccl_ctx_save *sv);
int nccl_cuda_stream_sync(cudaStream_t stream);
/* 1 if the stream's work is done, 0 if not yet, <0 on error */
int nccl_cuda_stream_query(cudaStream_t stream);
int nccl_cuda_memcpy_async(void *dst, const void *src, size_t n, cudaStream_t stream);
int nccl_cuda_memcpy(void *dst, const void *src, size_t n);
/* base, size and buffer id of the allocation holding p */
int nccl_cuda_range(const void *p, uintptr_t *base, size_t *size, unsigned long long *bufid);
/* the buffer id of the allocation holding p (0: none or unknown) */
unsigned long long nccl_cuda_buffer_id(const void *p);
/* A device allocation on dev (< 0: the current context's) every other
 * process (r2ccld) can open: cuMem with a POSIX fd handle type. */
int nccl_cuda_alloc_exportable(int dev, size_t size, void **ptr, size_t *alloc_size);
int nccl_cuda_free_exportable(void *ptr, size_t size);
/* PreMulSum's scaling on stream: dst[i] = src[i] * the scalar, for n
 * elements of t; the scalar from scalar_dev (device memory, read when the
 * kernel runs) or, when it is NULL, s (floating types) or is (integers).
 * The communicator's context current. 0; -ENOSYS: no kernel here (the
 * caller takes the host path); -EIO: the launch failed. */
int nccl_cuda_premul(struct nccl_kmod *k, ncclDataType_t t, const void *src, void *dst,
		     size_t n, const void *scalar_dev, double s, int64_t is, cudaStream_t st);
void nccl_cuda_kmod_free(struct nccl_kmod *k);

#endif
