/* SPDX-License-Identifier: MIT */
/*
 * r2ccld's GPU path (README.md beside this file): GPU memory registrations
 * (CUDA IPC handles, cuMem POSIX fds), the GPU worker that runs local
 * collectives over GPU buffers with the kernels of kernels.cu, and stream
 * ordering through sync slots in the client's shared memory.
 *
 * With CUDA: device.c, memory.c, local.c and staging.c (gpu_priv.h). Every
 * function here exists in a build without CUDA too (gpu_stub.c, HAVE_CUDA 0):
 * registration answers -EOPNOTSUPP and no region is ever a GPU region.
 */
#ifndef R2CCL_DAEMON_GPU_H
#define R2CCL_DAEMON_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "base/daemon.h"

struct r2_comm;
struct r2_exec;

/* struct r2_memreg.fd of a GPU region (the region is a struct r2_gpu_region). */
#define R2_MEM_FD_GPU (-2)

static inline bool r2_mem_is_gpu(const struct r2_memreg *m)
{
	return m && m->fd == R2_MEM_FD_GPU;
}

struct r2_gpu_reg_req {
	uint32_t kind;            /* R2_GPU_MEM_IPC or R2_GPU_MEM_CUMEM_FD */
	const uint8_t *ipc_handle; /* 64 bytes (IPC) */
	size_t ipc_handle_len;
	const uint8_t *uuid;      /* 16 bytes */
	size_t uuid_len;
	uint64_t alloc_base, alloc_size, offset, size;
	int fd;                   /* cuMem: the POSIX fd (taken on success) */
	int dev_fd;               /* IPC: the GPU's device file, if passed (-1) */
};

/* Opens (or finds in the session's cache) the allocation and makes a region
 * of [offset, offset+size) of it; *out->addr is the daemon's device pointer.
 * Loop thread, under d->lock. */
int r2_gpu_region_new(struct r2_session *s, const struct r2_gpu_reg_req *req,
		      struct r2_memreg **out, char *err, size_t errlen);
/* Last reference of a GPU region gone (r2d_mem_put): closes it; any thread. */
void r2_gpu_region_free(struct r2_memreg *m);

/* True if any buffer of x is GPU memory. */
bool r2_gpu_exec_is_gpu(const struct r2_exec *x);
/* Queues x on the GPU worker: R2_EXEC_PENDING, or a negative error. */
int r2_gpu_exec(struct r2_exec *x);

/* Across hosts (executor thread): stages x's GPU buffers through pinned host
 * memory and runs the host path (r2_exec_hier). Every outcome passes through
 * r2d_exec_complete, which calls r2_gpu_stage_end (x->gpu_stage set): it
 * copies the outputs back, releases the streams and returns the status. */
struct r2_pool;
int r2_gpu_exec_rail(struct r2_exec *x, struct r2_pool *pool);
int r2_gpu_stage_end(struct r2_exec *x, int status);

/* Daemon shutdown, before the engine stops (the worker's jobs hold
 * communicators and complete through the engine): the worker fails what
 * waits (R2CCL_E_SHUTDOWN), lets what the GPU runs finish, and ends;
 * r2_gpu_exec refuses from then on. */
void r2_gpu_quiesce(void);
/* After the engine: the worker (if still up) and the staging buffers. */
void r2_gpu_shutdown(void);

/* What the GPU path needs of the engine that runs it, registered by the
 * engine at start-up (r2d_engine_start): the GPU path never calls the engine
 * or the control layer (docs/architecture.md, "Layers"). */
struct r2_pool;
struct r2_session;
struct r2_gpu_engine {
	/* x ran on the GPU worker: complete every rank's op of x with status,
	 * free x, and drop the worker's reference on its communicator */
	void (*exec_done)(struct r2_exec *x, int status);
	/* the hierarchical phases of x (local, rail, local) on host buffers
	 * that r2_gpu_exec_rail staged */
	int (*exec_hier)(struct r2_exec *x, struct r2_pool *pool);
	/* while r2_gpu_exec_rail waits on the executor for the clients'
	 * streams: runs the communicator's transfers in flight (a stream may
	 * wait for one of them, a send queued before this receive); true if
	 * there were any */
	bool (*progress)(struct r2_comm *c);
	/* memory of a submitting session: (id, off, len) to an address with a
	 * reference (R2CCL_E_BAD_BUFFER if unknown); mem_put drops it */
	int (*mem_resolve)(struct r2_session *s, uint32_t id, uint64_t off, uint64_t len,
			   void **addr, struct r2_memreg **ref);
	void (*mem_put)(struct r2_session *s, struct r2_memreg *m);
};
void r2_gpu_set_engine(const struct r2_gpu_engine *e);

#endif
