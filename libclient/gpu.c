/* SPDX-License-Identifier: MIT */
/*
 * libr2ccl: GPU memory registration and stream-ordered collectives
 * (daemon/gpu/README.md). The CUDA driver is loaded with dlopen, so
 * libr2ccl has no link-time CUDA dependency.
 *
 * State the client structure has no room for (GPU registrations, each
 * communicator's sync slots) lives in a table here, keyed by the client and
 * its session id.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "cuda_load.h"
#include "r2ccl.h"

#if HAVE_CUDA

#include <cuda.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "gpu_abi.h"
#include "nvdev.h"
#include "params.h"
#include "r2ccl.pb-c.h"
#include "stage_kernel.h"
#include "util.h"

static struct {
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
	/* optional: the stream's own copies through a staging area (below) */
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
	/* optional: both of an operation's memory operations in one call */
	CUresult (*streamBatchMemOp)(CUstream, unsigned int, CUstreamBatchMemOpParams *,
				     unsigned int);
	CUresult (*deviceGetPCIBusId)(char *, int, CUdevice);
} cu = { .once = PTHREAD_ONCE_INIT };

static void cu_load(void)
{
	const struct r2c_cu_sym t[] = {
		{ "cuPointerGetAttribute", (void **)&cu.pointerGetAttribute },
		{ "cuMemGetAddressRange", (void **)&cu.memGetAddressRange },
		{ "cuIpcGetMemHandle", (void **)&cu.ipcGetMemHandle },
		{ "cuMemRetainAllocationHandle", (void **)&cu.memRetainAllocationHandle },
		{ "cuMemExportToShareableHandle", (void **)&cu.memExportToShareableHandle },
		{ "cuMemRelease", (void **)&cu.memRelease },
		{ "cuDeviceGetUuid", (void **)&cu.deviceGetUuid },
		{ "cuDeviceGet", (void **)&cu.deviceGet },
		{ "cuMemHostRegister", (void **)&cu.memHostRegister },
		{ "cuMemHostUnregister", (void **)&cu.memHostUnregister },
		{ "cuMemHostGetDevicePointer", (void **)&cu.memHostGetDevicePointer },
		{ "cuStreamWriteValue32", (void **)&cu.streamWriteValue32 },
		{ "cuStreamWaitValue32", (void **)&cu.streamWaitValue32 },
	};

	cu.err = r2c_cu_resolve(t, R2_ARRAY_SIZE(t));
	if (!cu.err) {
		/* optional: both of an operation's memory operations in one call */
		const struct r2c_cu_sym opt[] = {
			{ "cuStreamBatchMemOp", (void **)&cu.streamBatchMemOp },
		};
		/* optional: the device file passed with a legacy IPC handle */
		const struct r2c_cu_sym bus[] = {
			{ "cuDeviceGetPCIBusId", (void **)&cu.deviceGetPCIBusId },
		};
		if (r2c_cu_resolve(opt, 1) < 0)
			cu.streamBatchMemOp = NULL;
		if (r2c_cu_resolve(bus, 1) < 0)
			cu.deviceGetPCIBusId = NULL;
		const struct r2c_cu_sym stg[] = {
			{ "cuMemcpyDtoHAsync", (void **)&cu.memcpyDtoHAsync },
			{ "cuMemcpyHtoDAsync", (void **)&cu.memcpyHtoDAsync },
			{ "cuEventCreate", (void **)&cu.eventCreate },
			{ "cuEventRecord", (void **)&cu.eventRecord },
			{ "cuEventQuery", (void **)&cu.eventQuery },
			{ "cuEventDestroy", (void **)&cu.eventDestroy },
		};
		if (r2c_cu_resolve(stg, R2_ARRAY_SIZE(stg)) < 0)
			cu.memcpyDtoHAsync = NULL; /* no client staging */
	}
}

static int cu_ready(void)
{
	pthread_once(&cu.once, cu_load);
	return cu.err;
}

/* The device file of GPU dev, opened here: the proof r2ccld's
 * gpu_legacy_ipc=gpu-access takes with a legacy IPC handle that this process
 * can use the GPU, so could open the handle itself (docs/security.md). -1
 * where it cannot be found or opened: the handle goes without it. */
static int dev_file_open(CUdevice dev)
{
	char bus[32], path[32];
	int minor;

	if (!cu.deviceGetPCIBusId || cu.deviceGetPCIBusId(bus, sizeof(bus), dev) != CUDA_SUCCESS)
		return -1;
	minor = r2_nvidia_minor(bus);
	if (minor < 0)
		return -1;
	snprintf(path, sizeof(path), "/dev/nvidia%d", minor);
	return open(path, O_RDWR | O_CLOEXEC);
}

/* ---- per-client state ---- */

struct greg {
	struct greg *next;
	char *ptr;
	size_t size;
	uint32_t id;
};

/*
 * Client staging (issue 21). A GPU operation across hosts has its buffers
 * staged through host memory for the rails. r2ccld can do that itself
 * (daemon/gpu/staging.c), but its copies are another process's CUDA
 * context: on the 16-core H200 machine a 4-16 KiB copy back to the GPU took
 * 147 us there (the GPU time-slices between the contexts while the
 * client's stream waits), against 8-10 us in one context (tests/gpu/
 * copy_lat.cu). So up to R2CCL_GPU_CLIENT_STAGE bytes (default 256 KiB;
 * 0: off) the client's own stream does both copies, in order: the input
 * to a staging area of shared host memory the daemon knows, "ready", the
 * wait for "done", the output back to the GPU. The daemon sees an
 * operation on host memory gated by the stream (R2_SQE_STREAM) and does no
 * CUDA work for it. STAGE_AREAS areas per communicator, taken in turn; an
 * area whose last copy back has not run yet (its event) is not waited for:
 * that operation goes the daemon's way instead.
 * With R2CCL_GPU_STAGE_KERNEL=1 the stream's part is one kernel launch
 * (stage_kernel.cu): the areas are mapped into the GPU and the kernel
 * copies in, writes "ready", waits for "done" and copies back, without the
 * copy engines and the stream memory operations (copy_lat: 15-19 us for
 * 4-64 KiB against 27-28). Not the default: its wait holds the GPU, so two
 * processes sharing one GPU without MPS wait for each other's time slice
 * (stage_kernel.h). A launch refused: the copies from then on.
 */
#define STAGE_AREAS 8u
#define STAGE_DEFAULT (256u << 10)

struct gcomm {
	struct gcomm *next;
	r2ccl_comm_t *comm;
	uint32_t handle;
	struct r2_gpu_slot *slots; /* host, shared with the daemon */
	CUdeviceptr dslots;        /* the same, for the stream's memory operations */
	uint32_t mem_id;
	uint32_t next_seq;
	int async_err;
	uint64_t tag[R2_GPU_SLOTS];
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
	uint64_t alive_at; /* r2c_client_alive last asked (us) */
};

/* How often a submission asks whether the daemon is still there (a poll()
 * on the control socket): an operation queued to a daemon that died since
 * is released by r2ccl_comm_get_async_error or the next wait, as when it
 * dies after the submission. */
#define ALIVE_EVERY_US 1000

static pthread_mutex_t glock = PTHREAD_MUTEX_INITIALIZER;
static struct gclient *gclients;

static struct gclient *gclient_get(r2ccl_client_t *c, bool create)
{
	struct gclient **pp, *g;

	for (pp = &gclients; (g = *pp); pp = &g->next) {
		if (g->c != c)
			continue;
		if (g->session_id == c->session_id)
			return g;
		/* a new session at the address of an old one: forget the old */
		*pp = g->next;
		while (g->regs) {
			struct greg *r = g->regs;
			g->regs = r->next;
			free(r);
		}
		while (g->comms) {
			struct gcomm *m = g->comms;
			g->comms = m->next;
			/* the old session's slot memory was unmapped with it: drop
			 * CUDA's registration of that range too */
			cu.memHostUnregister(m->slots);
			free(m);
		}
		free(g);
		break;
	}
	if (!create)
		return NULL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->c = c;
	g->session_id = c->session_id;
	g->next = gclients;
	gclients = g;
	return g;
}

/* R2CCL_GPU_CLIENT_STAGE: bytes (suffixes K, M), 0 off */
static uint64_t stage_limit(void)
{
	static int64_t v = -1;

	if (v < 0) {
		const char *e = getenv("R2CCL_GPU_CLIENT_STAGE");
		int64_t x;
		v = e && *e && r2_parse_size(e, &x) == 0 && x >= 0 ? x : STAGE_DEFAULT;
		v = v > (64 << 20) ? (64 << 20) : v;
	}
	return (uint64_t)v;
}

static void stage_free(struct gcomm *m)
{
	if (!m->stage)
		return;
	for (uint32_t i = 0; i < STAGE_AREAS; i++)
		if (m->stage_ev[i])
			cu.eventDestroy(m->stage_ev[i]);
	r2c_stage_kernel_free(&m->kern);
	cu.memHostUnregister(m->stage); /* unmapped with the client */
	m->stage = NULL;
}

/* The staging area for an operation of slen/rlen bytes, or NULL: the
 * daemon stages it (one host, too large, none free, no staging here). */
static char *stage_take(r2ccl_client_t *c, r2ccl_comm_t *comm, struct gcomm *m, uint64_t slen,
			uint64_t rlen, uint64_t *off)
{
	uint64_t max = stage_limit();
	uint32_t i;

	if (comm->nhosts < 2 || !max || slen > max || rlen > max || !cu.memcpyDtoHAsync ||
	    m->stage_failed)
		return NULL;
	if (!m->stage) {
		uint64_t o;
		void *p;
		bool ok = r2ccl_mem_alloc(c, 2 * STAGE_AREAS * max, &p) == 0;
		/* mapped into the GPU for the kernel, else pinned only */
		m->dstage = 0;
		if (ok && r2c_stage_kernel_enabled() &&
		    cu.memHostRegister(p, 2 * STAGE_AREAS * max,
				       CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) ==
			    CUDA_SUCCESS &&
		    cu.memHostGetDevicePointer(&m->dstage, p, 0) != CUDA_SUCCESS) {
			cu.memHostUnregister(p);
			m->dstage = 0;
		}
		if (ok && !m->dstage &&
		    cu.memHostRegister(p, 2 * STAGE_AREAS * max, CU_MEMHOSTREGISTER_PORTABLE) !=
			    CUDA_SUCCESS) {
			r2ccl_mem_free(c, p);
			ok = false;
		}
		if (ok && (r2c_mem_lookup(c, p, 2 * STAGE_AREAS * max, &m->stage_mem, &o) < 0 || o)) {
			cu.memHostUnregister(p);
			r2ccl_mem_free(c, p);
			ok = false;
		}
		if (!ok) {
			m->stage_failed = true;
			return NULL;
		}
		m->stage = p;
		m->stage_max = max;
		memset(m->stage_ev, 0, sizeof(m->stage_ev));
		for (i = 0; i < STAGE_AREAS; i++)
			if (cu.eventCreate(&m->stage_ev[i], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
				stage_free(m);
				r2ccl_mem_free(c, p);
				m->stage_failed = true;
				return NULL;
			}
	}
	i = m->stage_next % STAGE_AREAS;
	if (m->stage_used[i] && cu.eventQuery(m->stage_ev[i]) != CUDA_SUCCESS)
		return NULL; /* its last copy back is still queued */
	m->stage_next++;
	*off = (uint64_t)i * 2 * m->stage_max;
	return m->stage + *off;
}

void r2c_gpu_forget(r2ccl_client_t *c)
{
	struct gclient **pp, *g;

	pthread_mutex_lock(&glock);
	for (pp = &gclients; (g = *pp); pp = &g->next) {
		if (g->c != c)
			continue;
		*pp = g->next;
		while (g->regs) {
			struct greg *r = g->regs;
			g->regs = r->next;
			free(r);
		}
		while (g->comms) {
			struct gcomm *m = g->comms;
			g->comms = m->next;
			cu.memHostUnregister(m->slots); /* unmapped with the client next */
			stage_free(m);
			free(m);
		}
		free(g);
		break;
	}
	pthread_mutex_unlock(&glock);
}

static int slots_setup(r2ccl_client_t *c, struct gcomm *m)
{
	size_t len = sizeof(struct r2_gpu_slot) * R2_GPU_SLOTS;
	uint64_t off;
	CUresult e;
	void *p;
	int r;

	r = r2ccl_mem_alloc(c, len, &p);
	if (r < 0)
		return r;
	memset(p, 0, len);
	e = cu.memHostRegister(p, len, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
	if (e == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
		/* left over from memory unmapped while registered (a client
		 * disconnected without this library seeing it) */
		cu.memHostUnregister(p);
		e = cu.memHostRegister(p, len,
				       CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
	}
	if (e != CUDA_SUCCESS ||
	    cu.memHostGetDevicePointer(&m->dslots, p, 0) != CUDA_SUCCESS) {
		r2ccl_mem_free(c, p);
		return -ENODEV; /* no current CUDA context? */
	}
	r = r2c_mem_lookup(c, p, len, &m->mem_id, &off);
	if (r < 0 || off != 0) {
		cu.memHostUnregister(p);
		r2ccl_mem_free(c, p);
		return r < 0 ? r : -EINVAL;
	}
	m->slots = p;
	return 0;
}

static struct gcomm *gcomm_get(struct gclient *g, r2ccl_comm_t *comm, int *err)
{
	struct gcomm *m;

	for (m = g->comms; m; m = m->next)
		if (m->comm == comm && m->handle == comm->handle)
			return m;
	m = calloc(1, sizeof(*m));
	if (!m) {
		*err = -ENOMEM;
		return NULL;
	}
	m->comm = comm;
	m->handle = comm->handle;
	*err = slots_setup(g->c, m);
	if (*err < 0) {
		free(m);
		return NULL;
	}
	m->next = g->comms;
	g->comms = m;
	return m;
}

/* ---- completions ---- */

static void slot_release(struct gcomm *m, uint32_t seq, int status)
{
	struct r2_gpu_slot *s = &m->slots[seq % R2_GPU_SLOTS];

	if (s->seq != seq)
		return;
	if ((int32_t)(__atomic_load_n(&s->done, __ATOMIC_ACQUIRE) - seq) >= 0)
		return; /* the daemon released it already */
	__atomic_store_n(&s->status, status, __ATOMIC_RELAXED);
	__atomic_store_n(&s->done, seq, __ATOMIC_RELEASE);
}

/* A failed stream-ordered operation the daemon never ran (refused, or failed
 * before it was matched) has no "done" from the daemon: release its stream
 * here, with its error. */
static void cqe_failed(struct gclient *g, const struct r2_cqe *e)
{
	for (struct gcomm *m = g->comms; m; m = m->next) {
		for (uint32_t i = 0; i < R2_GPU_SLOTS; i++) {
			if (m->tag[i] != e->tag || !m->slots[i].seq)
				continue;
			if (!m->async_err)
				m->async_err = e->status;
			slot_release(m, m->slots[i].seq, e->status);
		}
	}
}

void r2c_gpu_cqe(r2ccl_client_t *c, const struct r2_cqe *e)
{
	struct gclient *g;

	if (e->status >= 0)
		return;
	pthread_mutex_lock(&glock);
	g = gclient_get(c, false);
	if (g)
		cqe_failed(g, e);
	pthread_mutex_unlock(&glock);
}

/* Consumes every CQE (cqe_failed for the failed ones). */
static void reap_all(struct gclient *g)
{
	r2ccl_client_t *c = g->c;
	struct r2_ring_shm *ring = c->ring;
	uint32_t head = atomic_load_explicit(&ring->cq_head, memory_order_relaxed);
	uint32_t tail = atomic_load_explicit(&ring->cq_tail, memory_order_acquire);

	while (head != tail) {
		struct r2_cqe e = ring->cq[head & (R2_RING_ENTRIES - 1)];
		head++;
		atomic_store_explicit(&ring->cq_head, head, memory_order_release);
		if (c->inflight)
			c->inflight--;
		if (e.status < 0)
			cqe_failed(g, &e);
	}
}

static void wait_cq(r2ccl_client_t *c, int ms)
{
	struct pollfd p = { c->cq_efd, POLLIN, 0 };
	uint64_t v;

	if (poll(&p, 1, ms) == 1 && read(c->cq_efd, &v, sizeof(v)) < 0)
		(void)0;
}

/* Queues q on the ring. The fast path makes no system call: the daemon's
 * liveness is asked at most every ALIVE_EVERY_US, and the doorbell is rung
 * only when the dispatcher is not polling the ring (common/ring.h). */
static int post(struct gclient *g, struct r2_sqe *q)
{
	r2ccl_client_t *c = g->c;
	struct r2_ring_shm *ring = c->ring;
	uint64_t one = 1, now = r2_now_us();
	uint64_t deadline = now + (uint64_t)(c->op_timeout_ms + 5000) * 1000;
	uint32_t tail;

	for (;;) {
		if (c->gone)
			return R2CCL_E_DAEMON_GONE;
		if (now - g->alive_at >= ALIVE_EVERY_US) {
			if (r2c_client_alive(c) < 0)
				return R2CCL_E_DAEMON_GONE;
			g->alive_at = now;
		}
		reap_all(g);
		tail = atomic_load_explicit(&ring->sq_tail, memory_order_relaxed);
		if (c->inflight < R2_RING_ENTRIES &&
		    tail - atomic_load_explicit(&ring->sq_head, memory_order_acquire) < R2_RING_ENTRIES)
			break;
		if (now > deadline)
			return -EBUSY;
		wait_cq(c, 1);
		now = r2_now_us();
	}
	q->tag = c->next_tag++;
	ring->sq[tail & (R2_RING_ENTRIES - 1)] = *q;
	/* sequentially consistent, then daemon_spinning read: ring.h's Dekker */
	atomic_store(&ring->sq_tail, tail + 1);
	c->inflight++;
	if (!atomic_load(&ring->daemon_spinning) &&
	    write(c->sq_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

/* ---- registration ---- */

static void *unpack_reg(void *a, size_t l, const uint8_t *d)
{
	return r2ccl__mem_register_reply__unpack(a, l, d);
}

static void *unpack_result(void *a, size_t l, const uint8_t *d)
{
	return r2ccl__result__unpack(a, l, d);
}

int r2ccl_mem_register_gpu(r2ccl_client_t *c, void *ptr, size_t size)
{
	R2ccl__MemRegisterGpu req = R2CCL__MEM_REGISTER_GPU__INIT;
	R2ccl__MemRegisterReply *rep = NULL;
	CUmemGenericAllocationHandle h;
	CUipcMemHandle ipc;
	CUdeviceptr base = 0;
	CUdevice dev;
	CUuuid uuid;
	size_t asize = 0;
	int ord = -1, fd = -1, r;
	struct gclient *g;
	struct greg *reg;
	uint16_t type;

	if ((r = r2c_client_use(c)) < 0)
		return r;
	if (!ptr || !size)
		return -EINVAL;
	r = cu_ready();
	if (r < 0)
		return r;
	if (cu.pointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)ptr) !=
		    CUDA_SUCCESS ||
	    cu.deviceGet(&dev, ord) != CUDA_SUCCESS || cu.deviceGetUuid(&uuid, dev) != CUDA_SUCCESS ||
	    cu.memGetAddressRange(&base, &asize, (CUdeviceptr)ptr) != CUDA_SUCCESS)
		return R2CCL_E_BAD_BUFFER; /* not GPU memory */
	if ((CUdeviceptr)ptr + size > base + asize || (CUdeviceptr)ptr + size < (CUdeviceptr)ptr)
		return R2CCL_E_BAD_BUFFER;
	req.req_id = c->next_req++;
	req.device_uuid.data = (uint8_t *)uuid.bytes;
	req.device_uuid.len = sizeof(uuid.bytes);
	req.alloc_base = base;
	req.alloc_size = asize;
	req.offset = (CUdeviceptr)ptr - base;
	req.size = size;
	if (cu.memRetainAllocationHandle(&h, (void *)base) == CUDA_SUCCESS) {
		/* cuMem: an fd for the physical allocation */
		CUresult e = cu.memExportToShareableHandle(&fd, h,
							  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		cu.memRelease(h);
		if (e != CUDA_SUCCESS)
			return r2c_fail(-EOPNOTSUPP, "the cuMem allocation at %p was not created "
					"exportable as a POSIX fd (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)",
					(void *)base);
		req.kind = R2_GPU_MEM_CUMEM_FD;
		type = R2CCL__MSG_TYPE__MSG_MEM_REGISTER_GPU_FD;
	} else {
		if (cu.ipcGetMemHandle(&ipc, base) != CUDA_SUCCESS)
			return r2c_fail(-EOPNOTSUPP, "the allocation at %p has no CUDA IPC handle",
					(void *)base);
		req.kind = R2_GPU_MEM_IPC;
		req.ipc_handle.data = (uint8_t *)ipc.reserved;
		req.ipc_handle.len = sizeof(ipc.reserved);
		fd = dev_file_open(dev);
		type = fd >= 0 ? R2CCL__MSG_TYPE__MSG_MEM_REGISTER_GPU_FD
			       : R2CCL__MSG_TYPE__MSG_MEM_REGISTER_GPU;
	}
	r = r2c_rpc(c, type, &req, R2CCL__MSG_TYPE__MSG_MEM_REGISTER_REPLY, (void **)&rep, unpack_reg,
		    fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0, NULL, 0);
	if (fd >= 0)
		close(fd);
	if (r == 0 && rep->status == -EINVAL && req.kind == R2_GPU_MEM_IPC && fd >= 0 &&
	    rep->error && strstr(rep->error, "does not fit message type")) {
		/* an r2ccld older than the device file ("GPU memory kind 1 does not
		 * fit message type"): the handle alone, as it knows it */
		r2ccl__mem_register_reply__free_unpacked(rep, NULL);
		rep = NULL;
		req.req_id = c->next_req++;
		r = r2c_rpc(c, R2CCL__MSG_TYPE__MSG_MEM_REGISTER_GPU, &req,
			    R2CCL__MSG_TYPE__MSG_MEM_REGISTER_REPLY, (void **)&rep, unpack_reg, NULL, 0,
			    NULL, 0);
	}
	if (r < 0)
		return r;
	r = rep->status;
	if (r < 0 && rep->error && rep->error[0])
		r2c_fail(r, "r2ccld refused the GPU memory: %s", rep->error); /* the check */
	reg = calloc(1, sizeof(*reg));
	if (r == 0 && reg) {
		reg->ptr = ptr;
		reg->size = size;
		reg->id = rep->mem_id;
		pthread_mutex_lock(&glock);
		g = gclient_get(c, true);
		if (g) {
			reg->next = g->regs;
			g->regs = reg;
			reg = NULL;
		}
		pthread_mutex_unlock(&glock);
		if (reg)
			r = -ENOMEM; /* the daemon frees it with the session */
	}
	free(reg);
	r2ccl__mem_register_reply__free_unpacked(rep, NULL);
	return r;
}

int r2ccl_mem_deregister_gpu(r2ccl_client_t *c, void *ptr)
{
	R2ccl__MemDeregister req = R2CCL__MEM_DEREGISTER__INIT;
	R2ccl__Result *rep = NULL;
	struct gclient *g;
	struct greg **pp, *reg = NULL;
	int r;

	if ((r = r2c_client_use(c)) < 0)
		return r;
	if (!ptr)
		return -EINVAL;
	pthread_mutex_lock(&glock);
	g = gclient_get(c, false);
	for (pp = g ? &g->regs : NULL; pp && *pp; pp = &(*pp)->next)
		if ((*pp)->ptr == ptr) {
			reg = *pp;
			*pp = reg->next;
			break;
		}
	pthread_mutex_unlock(&glock);
	if (!reg)
		return R2CCL_E_BAD_BUFFER;
	req.req_id = c->next_req++;
	req.mem_id = reg->id;
	free(reg);
	r = r2c_rpc(c, R2CCL__MSG_TYPE__MSG_MEM_DEREGISTER, &req, R2CCL__MSG_TYPE__MSG_RESULT,
		    (void **)&rep, unpack_result, NULL, 0, NULL, 0);
	if (r == 0) {
		r = rep->status;
		r2ccl__result__free_unpacked(rep, NULL);
	}
	return r == R2CCL_E_DAEMON_GONE ? 0 : r;
}

static int lookup(struct gclient *g, const void *p, uint64_t len, uint32_t *id, uint64_t *off)
{
	const char *a = p;

	for (struct greg *r = g->regs; r; r = r->next) {
		if (a < r->ptr || a >= r->ptr + r->size)
			continue;
		if (len > r->size - (size_t)(a - r->ptr))
			continue; /* maybe a larger registration holds it */
		*id = r->id;
		*off = (uint64_t)(a - r->ptr);
		return 0;
	}
	return R2CCL_E_BAD_BUFFER;
}

/* ---- stream-ordered submission ---- */

/* The staging area is free once what st queued for it has run: its event.
 * Without the event its end is unknown: no more staging for m (the
 * operation itself is fine). */
static void area_queued(struct gcomm *m, uint32_t area, CUstream st)
{
	if (cu.eventRecord(m->stage_ev[area], st) != CUDA_SUCCESS)
		m->stage_failed = true;
	m->stage_used[area] = true;
}

/* The stream's half of an operation on slot (device address): write ready =
 * seq after its earlier work, then wait until done >= seq. One driver call
 * (cuStreamBatchMemOp, the two in this order) where the driver has it, else
 * two. */
static int stream_sync_ops(CUstream st, CUdeviceptr slot, uint32_t seq)
{
	CUdeviceptr ready = slot + offsetof(struct r2_gpu_slot, ready);
	CUdeviceptr done = slot + offsetof(struct r2_gpu_slot, done);

	if (cu.streamBatchMemOp) {
		CUstreamBatchMemOpParams p[2];
		CUresult e;

		memset(p, 0, sizeof(p));
		p[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
		p[0].writeValue.address = ready;
		p[0].writeValue.value = seq;
		p[0].writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
		p[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
		p[1].waitValue.address = done;
		p[1].waitValue.value = seq;
		p[1].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
		e = cu.streamBatchMemOp(st, 2, p, 0);
		if (e == CUDA_SUCCESS)
			return 0;
		if (e != CUDA_ERROR_NOT_SUPPORTED && e != CUDA_ERROR_INVALID_VALUE)
			return -EIO;
		cu.streamBatchMemOp = NULL; /* refused before queuing: two calls from now on */
	}
	if (cu.streamWriteValue32(st, ready, seq, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS ||
	    cu.streamWaitValue32(st, done, seq, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS)
		return -EIO;
	return 0;
}

int r2c_gpu_submit(r2ccl_comm_t *comm, uint32_t opcode, const void *sendbuff, uint64_t slen,
		    void *recvbuff, uint64_t rlen, size_t count, r2ccl_dtype_t dtype,
		    r2ccl_redop_t op, int root, void *stream)
{
	r2ccl_client_t *c;
	struct gclient *g;
	struct gcomm *m;
	struct r2_gpu_slot *s;
	struct r2_sqe q;
	uint32_t seq, idx, area = 0;
	bool kern;
	uint64_t soff = 0;
	char *stage = NULL;
	int r;

	if ((r = r2c_comm_use(comm)) < 0)
		return r;
	if ((unsigned)dtype >= R2CCL_NUM_DTYPES || (unsigned)op >= R2CCL_NUM_OPS)
		return -EINVAL;
	r = cu_ready();
	if (r < 0)
		return r;
	c = comm->client;
	memset(&q, 0, sizeof(q));
	q.opcode = opcode;
	q.comm_id = comm->handle;
	q.rank = (uint32_t)comm->rank;
	q.count = count;
	q.dtype = (uint32_t)dtype;
	q.redop = (uint32_t)op;
	q.root = root;
	pthread_mutex_lock(&glock);
	g = gclient_get(c, true);
	if (!g) {
		r = -ENOMEM;
		goto out;
	}
	if (slen && (r = lookup(g, sendbuff, slen, &q.send_mem, &q.send_off)) < 0)
		goto out;
	if (rlen && (r = lookup(g, recvbuff, rlen, &q.recv_mem, &q.recv_off)) < 0)
		goto out;
	m = gcomm_get(g, comm, &r);
	if (!m)
		goto out;
	seq = ++m->next_seq;
	if (seq == 0)
		seq = m->next_seq = 1;
	idx = seq % R2_GPU_SLOTS;
	s = &m->slots[idx];
	/* the slot's previous operation must be over (256 outstanding) */
	if (s->seq) {
		uint64_t deadline = r2_now_us() + (uint64_t)(c->op_timeout_ms + 5000) * 1000;
		while ((int32_t)(__atomic_load_n(&s->done, __ATOMIC_ACQUIRE) - s->seq) < 0) {
			reap_all(g);
			if (r2c_client_alive(c) < 0) {
				slot_release(m, s->seq, R2CCL_E_DAEMON_GONE);
				break;
			}
			if (r2_now_us() > deadline) {
				r = -EBUSY;
				goto out;
			}
			wait_cq(c, 1);
		}
	}
	/* the stream's own copies through host memory (above) */
	stage = stage_take(c, comm, m, slen, rlen, &soff);
	kern = stage && m->dstage && !m->kern.failed; /* the input after the post */
	if (stage) {
		area = (uint32_t)(soff / (2 * m->stage_max));
		if (!kern && slen &&
		    cu.memcpyDtoHAsync(stage, (CUdeviceptr)sendbuff, slen, (CUstream)stream) !=
			    CUDA_SUCCESS) {
			/* a copy the driver refuses on this stream: this
			 * communicator's operations go the daemon's way */
			m->stage_failed = true;
			stage = NULL;
		}
	}
	if (stage) {
		if (slen) {
			q.send_mem = m->stage_mem;
			q.send_off = soff;
		}
		if (rlen) {
			q.recv_mem = m->stage_mem;
			q.recv_off = soff + m->stage_max;
		}
	}
	s->seq = seq;
	s->status = 0;
	q.gflags = R2_SQE_STREAM;
	q.sync_mem = m->mem_id;
	q.sync_off = (uint64_t)idx * sizeof(*s);
	q.sync_seq = seq;
	r = post(g, &q);
	if (r < 0) {
		slot_release(m, seq, r); /* nothing to wait for */
		if (stage && !kern) /* the area is free once the input's copy has run */
			area_queued(m, area, (CUstream)stream);
		goto out;
	}
	m->tag[idx] = q.tag;
	if (kern && r2c_stage_kernel_launch(&m->kern, (CUstream)stream, (CUdeviceptr)sendbuff,
					    m->dstage + soff, slen, m->dstage + soff + m->stage_max,
					    (CUdeviceptr)recvbuff, rlen,
					    m->dslots + (uint64_t)idx * sizeof(*s), idx, seq) == 0) {
		area_queued(m, area, (CUstream)stream); /* free once the kernel has run */
		goto out;
	}
	/* a launch refused (no more from now on): the copies instead */
	if (kern && slen &&
	    cu.memcpyDtoHAsync(stage, (CUdeviceptr)sendbuff, slen, (CUstream)stream) != CUDA_SUCCESS) {
		__atomic_store_n(&s->ready, seq, __ATOMIC_RELEASE); /* the daemon runs it */
		m->stage_failed = true;
		r = -EIO; /* without this rank's input */
		goto out;
	}
	/* the stream: ready = seq after its earlier work, then wait done >= seq */
	if (stream_sync_ops((CUstream)stream, m->dslots + (uint64_t)idx * sizeof(*s), seq) < 0) {
		/* the daemon will time the op out; tell the caller now */
		__atomic_store_n(&s->ready, seq, __ATOMIC_RELEASE);
		r = -EIO;
		if (stage) /* its input copy may still be queued: no more staging */
			m->stage_failed = true;
	} else if (stage) {
		/* the output back to the GPU once "done"; the area is free when
		 * this copy has run (its event) */
		if (rlen && cu.memcpyHtoDAsync((CUdeviceptr)recvbuff, stage + m->stage_max, rlen,
					       (CUstream)stream) != CUDA_SUCCESS)
			r = -EIO; /* the output will not reach the caller's buffer */
		area_queued(m, area, (CUstream)stream);
	}
out:
	pthread_mutex_unlock(&glock);
	return r;
}

int r2ccl_comm_get_async_error(r2ccl_comm_t *comm, int *async_err)
{
	struct gclient *g;
	struct gcomm *m = NULL;
	bool gone;
	int r;

	if ((r = r2c_comm_use(comm)) < 0)
		return r;
	if (!async_err)
		return -EINVAL;
	*async_err = 0;
	if (cu_ready() < 0)
		return 0;
	gone = r2c_client_alive(comm->client) < 0;
	pthread_mutex_lock(&glock);
	g = gclient_get(comm->client, false);
	if (g) {
		reap_all(g);
		for (m = g->comms; m; m = m->next)
			if (m->comm == comm && m->handle == comm->handle)
				break;
	}
	if (m) {
		for (uint32_t i = 0; i < R2_GPU_SLOTS; i++) {
			struct r2_gpu_slot *s = &m->slots[i];
			if (!s->seq)
				continue;
			if (gone)
				slot_release(m, s->seq, R2CCL_E_DAEMON_GONE);
			if ((int32_t)(__atomic_load_n(&s->done, __ATOMIC_ACQUIRE) - s->seq) >= 0 &&
			    __atomic_load_n(&s->status, __ATOMIC_RELAXED) < 0 && !m->async_err)
				m->async_err = s->status;
		}
		*async_err = m->async_err;
	}
	pthread_mutex_unlock(&glock);
	return 0;
}

#else /* !HAVE_CUDA */

void r2c_gpu_forget(r2ccl_client_t *c)
{
	(void)c;
}

void r2c_gpu_cqe(r2ccl_client_t *c, const struct r2_cqe *e)
{
	(void)c, (void)e;
}

int r2ccl_mem_register_gpu(r2ccl_client_t *c, void *ptr, size_t size)
{
	int r = r2c_client_use(c);

	(void)ptr, (void)size;
	return r < 0 ? r : r2c_fail(-EOPNOTSUPP, "libr2ccl was built without CUDA");
}

int r2ccl_mem_deregister_gpu(r2ccl_client_t *c, void *ptr)
{
	int r = r2c_client_use(c);

	(void)ptr;
	return r < 0 ? r : r2c_fail(-EOPNOTSUPP, "libr2ccl was built without CUDA");
}

int r2c_gpu_submit(r2ccl_comm_t *comm, uint32_t opcode, const void *sendbuff, uint64_t slen,
		    void *recvbuff, uint64_t rlen, size_t count, r2ccl_dtype_t dtype,
		    r2ccl_redop_t op, int root, void *stream)
{
	int r = r2c_comm_use(comm);

	(void)opcode, (void)sendbuff, (void)slen, (void)recvbuff, (void)rlen;
	(void)count, (void)dtype, (void)op, (void)root, (void)stream;
	return r < 0 ? r : r2c_fail(-EOPNOTSUPP, "libr2ccl was built without CUDA");
}

int r2ccl_comm_get_async_error(r2ccl_comm_t *comm, int *async_err)
{
	int r = r2c_comm_use(comm);

	if (r < 0)
		return r;
	if (!async_err)
		return -EINVAL;
	*async_err = 0;
	return 0;
}

#endif
