/* SPDX-License-Identifier: MIT */
/*
 * libr2ccl's GPU path (built with CUDA only), shared by gpu.c (the driver,
 * GPU registrations, completions, submission) and gpu_comm.c (a
 * communicator's GPU state: its sync slots, its client staging, the streams
 * its operations went on; set up at first use, retired when the
 * communicator is destroyed and freed once no stream can touch it).
 */
#ifndef R2CCL_GPU_INT_H
#define R2CCL_GPU_INT_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "client.h"
#include "gpu_abi.h"
#include "stage_kernel.h"

/* The driver's entry points (gpu.c loads them, cu_ready). */
struct r2c_gpu_driver {
	pthread_once_t once;
	int err;
	CUresult (*pointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
	CUresult (*memGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*ipcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
	CUresult (*memRetainAllocationHandle)(CUmemGenericAllocationHandle *, void *);
	CUresult (*memExportToShareableHandle)(void *, CUmemGenericAllocationHandle,
					       CUmemAllocationHandleType, unsigned long long);
	CUresult (*memRelease)(CUmemGenericAllocationHandle);
	CUresult (*deviceGetUuid)(CUuuid *, CUdevice);
	CUresult (*deviceGet)(CUdevice *, int);
	CUresult (*memHostRegister)(void *, size_t, unsigned int);
	CUresult (*ctxGetCurrent)(CUcontext *);
	CUresult (*ctxPushCurrent)(CUcontext);
	CUresult (*ctxPopCurrent)(CUcontext *);
	/* optional: the stream's own copies through a staging area (gpu_comm.c) */
	CUresult (*memcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*memcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*eventCreate)(CUevent *, unsigned int);
	CUresult (*eventRecord)(CUevent, CUstream);
	CUresult (*eventQuery)(CUevent);
	CUresult (*eventDestroy)(CUevent);
	CUresult (*memHostUnregister)(void *);
	CUresult (*memHostGetDevicePointer)(CUdeviceptr *, void *, unsigned int);
	CUresult (*streamWriteValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
	CUresult (*streamWaitValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
	/* optional: an operation's memory operations in one call */
	CUresult (*streamBatchMemOp)(CUstream, unsigned int, CUstreamBatchMemOpParams *,
				     unsigned int);
	CUresult (*deviceGetPCIBusId)(char *, int, CUdevice);
};
extern struct r2c_gpu_driver r2c_cu;

/* Client staging: STAGE_AREAS areas per communicator (gpu_comm.c). */
#define STAGE_AREAS 8u
/* Streams a communicator tracks (below); past that, a stream entry whose
 * stream has passed all it was given is reused. */
#define GC_STREAMS 32u

struct greg {
	struct greg *next;
	char *ptr;
	size_t size;
	uint32_t id;
};

/*
 * A communicator's GPU state. When can it be freed? The daemon holds its
 * own references to the shared memory (the slots, the staging areas), so
 * the daemon is no concern; the user's streams are: an operation's stream
 * writes "ready" into the slot, waits on "done", and a staged one copies
 * from and to a staging area, possibly long after the call (the GPU may be
 * far behind). So each operation's last access is made known to the host:
 *  - a staged one's by its area's event (recorded after its copy back);
 *  - any other by a third memory operation after the wait: its stream
 *    writes passed[i] = seq, i being its stream's entry in st[]. A stream
 *    runs its work in order, so passed[i] only grows, and the stream has
 *    passed every operation of this communicator it was given once
 *    passed[i] >= st_last[i]. No stream handle is used afterwards: a stream
 *    the user destroyed meanwhile is no concern.
 * Work queued that none of these covers (a driver call failing half way)
 * sets untracked: that state is then kept until r2ccl_disconnect.
 */
struct gcomm {
	struct gcomm *next;
	r2ccl_comm_t *comm;
	uint32_t handle;
	CUcontext ctx;             /* current at setup: where its CUDA frees run */
	struct r2_gpu_slot *slots; /* host, shared with the daemon */
	CUdeviceptr dslots;        /* the same, for the stream's memory operations */
	uint32_t *passed;          /* GC_STREAMS words after the slots (the daemon's
				    * slots never reach them) */
	CUdeviceptr dpassed;
	uint32_t mem_id;
	uint32_t next_seq;
	int async_err;
	uint64_t tag[R2_GPU_SLOTS];
	CUstream st[GC_STREAMS];
	uint32_t st_last[GC_STREAMS]; /* the last seq given to st[i] (0: none) */
	uint32_t nst;
	bool untracked;
	/* client staging: STAGE_AREAS x (input, output) of stage_max bytes */
	char *stage;               /* NULL: none yet */
	CUdeviceptr dstage;        /* the same, mapped into the GPU (0: not) */
	struct r2c_stage_kernel kern;
	bool stage_failed;         /* could not set it up: the daemon stages */
	uint32_t stage_mem, stage_next;
	uint64_t stage_max;
	CUevent stage_ev[STAGE_AREAS];
	bool stage_used[STAGE_AREAS]; /* stage_ev recorded */
};

struct gclient {
	struct gclient *next;
	r2ccl_client_t *c;
	uint64_t session_id;
	struct greg *regs;
	struct gcomm *comms;
	struct gcomm *retired; /* destroyed, their streams not past them yet */
	uint64_t alive_at;     /* r2c_client_alive last asked (us) */
};

/* Guards every gclient and what hangs from it. */
extern pthread_mutex_t r2c_glock;

/* ---- gpu_comm.c (called with r2c_glock held) ---- */

/* comm's state on g, set up at first use (its slots); NULL with *err. */
struct gcomm *r2c_gcomm_get(struct gclient *g, r2ccl_comm_t *comm, int *err);
/* The staging area for an operation of slen/rlen bytes, or NULL: the
 * daemon stages it (one host, too large, none free, no staging here). */
char *r2c_stage_take(r2ccl_client_t *c, r2ccl_comm_t *comm, struct gcomm *m, uint64_t slen,
		     uint64_t rlen, uint64_t *off);
/* The area's last use queued on st: free once st has run it (its event). */
void r2c_area_queued(struct gcomm *m, uint32_t area, CUstream st);
/* The device address of the word st's operation writes once past its wait
 * (gcomm above), noting seq as st's last; 0 when st cannot be tracked
 * (m->untracked is set then). */
CUdeviceptr r2c_stream_mark(struct gcomm *m, CUstream st, uint32_t seq);
/* Releases a slot's stream with status unless the daemon did. */
void r2c_slot_release(struct gcomm *m, uint32_t seq, int status);
/* Frees the retired communicators of g whose streams are past them. */
void r2c_gcomm_reap(struct gclient *g);
/* Drops what m holds without talking to the daemon or freeing its shared
 * memory (r2ccl_disconnect unmaps it next), then m. */
void r2c_gcomm_drop(struct gcomm *m);

#endif
