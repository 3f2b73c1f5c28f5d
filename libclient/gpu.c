/* SPDX-License-Identifier: MIT */
/*
 * libr2ccl: GPU memory registration and stream-ordered collectives
 * (daemon/gpu/README.md). The CUDA driver is loaded with dlopen, so
 * libr2ccl has no link-time CUDA dependency.
 *
 * State the client structure has no room for (GPU registrations, each
 * communicator's GPU state: gpu_comm.c) lives in a table here, keyed by the
 * client and its session id.
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
#include "gpu_int.h"
#include "nvdev.h"
#include "r2ccl.pb-c.h"
#include "stage_kernel.h"
#include "util.h"

struct r2c_gpu_driver r2c_cu = { .once = PTHREAD_ONCE_INIT };
pthread_mutex_t r2c_glock = PTHREAD_MUTEX_INITIALIZER;

static void cu_load(void)
{
	const struct r2c_cu_sym t[] = {
		{ "cuPointerGetAttribute", (void **)&r2c_cu.pointerGetAttribute },
		{ "cuMemGetAddressRange", (void **)&r2c_cu.memGetAddressRange },
		{ "cuIpcGetMemHandle", (void **)&r2c_cu.ipcGetMemHandle },
		{ "cuMemRetainAllocationHandle", (void **)&r2c_cu.memRetainAllocationHandle },
		{ "cuMemExportToShareableHandle", (void **)&r2c_cu.memExportToShareableHandle },
		{ "cuMemRelease", (void **)&r2c_cu.memRelease },
		{ "cuDeviceGetUuid", (void **)&r2c_cu.deviceGetUuid },
		{ "cuDeviceGet", (void **)&r2c_cu.deviceGet },
		{ "cuMemHostRegister", (void **)&r2c_cu.memHostRegister },
		{ "cuMemHostUnregister", (void **)&r2c_cu.memHostUnregister },
		{ "cuMemHostGetDevicePointer", (void **)&r2c_cu.memHostGetDevicePointer },
		{ "cuStreamWriteValue32", (void **)&r2c_cu.streamWriteValue32 },
		{ "cuStreamWaitValue32", (void **)&r2c_cu.streamWaitValue32 },
		{ "cuCtxGetCurrent", (void **)&r2c_cu.ctxGetCurrent },
		{ "cuCtxPushCurrent", (void **)&r2c_cu.ctxPushCurrent },
		{ "cuCtxPopCurrent", (void **)&r2c_cu.ctxPopCurrent },
	};

	r2c_cu.err = r2c_cu_resolve(t, R2_ARRAY_SIZE(t));
	if (!r2c_cu.err) {
		/* optional: both of an operation's memory operations in one call */
		const struct r2c_cu_sym opt[] = {
			{ "cuStreamBatchMemOp", (void **)&r2c_cu.streamBatchMemOp },
		};
		/* optional: the device file passed with a legacy IPC handle */
		const struct r2c_cu_sym bus[] = {
			{ "cuDeviceGetPCIBusId", (void **)&r2c_cu.deviceGetPCIBusId },
		};
		if (r2c_cu_resolve(opt, 1) < 0)
			r2c_cu.streamBatchMemOp = NULL;
		if (r2c_cu_resolve(bus, 1) < 0)
			r2c_cu.deviceGetPCIBusId = NULL;
		const struct r2c_cu_sym stg[] = {
			{ "cuMemcpyDtoHAsync", (void **)&r2c_cu.memcpyDtoHAsync },
			{ "cuMemcpyHtoDAsync", (void **)&r2c_cu.memcpyHtoDAsync },
			{ "cuEventCreate", (void **)&r2c_cu.eventCreate },
			{ "cuEventRecord", (void **)&r2c_cu.eventRecord },
			{ "cuEventQuery", (void **)&r2c_cu.eventQuery },
			{ "cuEventDestroy", (void **)&r2c_cu.eventDestroy },
		};
		if (r2c_cu_resolve(stg, R2_ARRAY_SIZE(stg)) < 0)
			r2c_cu.memcpyDtoHAsync = NULL; /* no client staging */
	}
}

static int cu_ready(void)
{
	pthread_once(&r2c_cu.once, cu_load);
	return r2c_cu.err;
}

/* The device file of GPU dev, opened here: the proof r2ccld's
 * gpu_legacy_ipc=gpu-access takes with a legacy IPC handle that this process
 * can use the GPU, so could open the handle itself (docs/security.md). -1
 * where it cannot be found or opened: the handle goes without it. */
static int dev_file_open(CUdevice dev)
{
	char bus[32], path[32];
	int minor;

	if (!r2c_cu.deviceGetPCIBusId || r2c_cu.deviceGetPCIBusId(bus, sizeof(bus), dev) != CUDA_SUCCESS)
		return -1;
	minor = r2_nvidia_minor(bus);
	if (minor < 0)
		return -1;
	snprintf(path, sizeof(path), "/dev/nvidia%d", minor);
	return open(path, O_RDWR | O_CLOEXEC);
}

/* ---- per-client state ---- */

/* How often a submission asks whether the daemon is still there (a poll()
 * on the control socket): an operation queued to a daemon that died since
 * is released by r2ccl_comm_get_async_error or the next wait, as when it
 * dies after the submission. */
#define ALIVE_EVERY_US 1000

static struct gclient *gclients;

static void gclient_drop(struct gclient *g)
{
	while (g->regs) {
		struct greg *r = g->regs;
		g->regs = r->next;
		free(r);
	}
	while (g->comms) {
		struct gcomm *m = g->comms;
		g->comms = m->next;
		r2c_gcomm_drop(m);
	}
	while (g->retired) {
		struct gcomm *m = g->retired;
		g->retired = m->next;
		r2c_gcomm_drop(m);
	}
	free(g);
}

static struct gclient *gclient_get(r2ccl_client_t *c, bool create)
{
	struct gclient **pp, *g;

	for (pp = &gclients; (g = *pp); pp = &g->next) {
		if (g->c != c)
			continue;
		if (g->session_id == c->session_id)
			return g;
		/* a new session at the address of an old one: forget the old
		 * (its memory was unmapped with it: drop CUDA's registration of
		 * those ranges too) */
		*pp = g->next;
		gclient_drop(g);
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

void r2c_gpu_forget(r2ccl_client_t *c)
{
	struct gclient **pp, *g;

	pthread_mutex_lock(&r2c_glock);
	for (pp = &gclients; (g = *pp); pp = &g->next) {
		if (g->c != c)
			continue;
		*pp = g->next;
		gclient_drop(g); /* the memory is unmapped with the client next */
		break;
	}
	pthread_mutex_unlock(&r2c_glock);
}

void r2c_gpu_comm_forget(r2ccl_comm_t *comm)
{
	struct gclient *g;
	struct gcomm **pp, *m = NULL;

	pthread_mutex_lock(&r2c_glock);
	/* (a process that never made a GPU call has none: the driver is not
	 * loaded for it here) */
	g = gclients ? gclient_get(comm->client, false) : NULL;
	for (pp = g ? &g->comms : NULL; pp && (m = *pp); pp = &m->next)
		if (m->comm == comm && m->handle == comm->handle) {
			*pp = m->next;
			break;
		}
	if (m) {
		/* streams still waiting for one of its operations go on: its
		 * daemon side was cancelled with the member (or runs on, with
		 * references of its own to the memory). The state goes once
		 * the streams are past it (gpu_int.h, struct gcomm). */
		for (uint32_t i = 0; i < R2_GPU_SLOTS; i++)
			if (m->slots[i].seq)
				r2c_slot_release(m, m->slots[i].seq, -ECANCELED);
		m->comm = NULL;
		m->next = g->retired;
		g->retired = m;
	}
	if (g)
		r2c_gcomm_reap(g);
	pthread_mutex_unlock(&r2c_glock);
}

/* ---- completions ---- */

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
			r2c_slot_release(m, m->slots[i].seq, e->status);
		}
	}
}

void r2c_gpu_cqe(r2ccl_client_t *c, const struct r2_cqe *e)
{
	struct gclient *g;

	if (e->status >= 0)
		return;
	pthread_mutex_lock(&r2c_glock);
	g = gclient_get(c, false);
	if (g)
		cqe_failed(g, e);
	pthread_mutex_unlock(&r2c_glock);
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
	if (r2c_cu.pointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
				       (CUdeviceptr)ptr) != CUDA_SUCCESS ||
	    r2c_cu.deviceGet(&dev, ord) != CUDA_SUCCESS ||
	    r2c_cu.deviceGetUuid(&uuid, dev) != CUDA_SUCCESS ||
	    r2c_cu.memGetAddressRange(&base, &asize, (CUdeviceptr)ptr) != CUDA_SUCCESS)
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
	if (r2c_cu.memRetainAllocationHandle(&h, (void *)base) == CUDA_SUCCESS) {
		/* cuMem: an fd for the physical allocation */
		CUresult e = r2c_cu.memExportToShareableHandle(&fd, h,
							  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		r2c_cu.memRelease(h);
		if (e != CUDA_SUCCESS)
			return r2c_fail(-EOPNOTSUPP, "the cuMem allocation at %p was not created "
					"exportable as a POSIX fd (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)",
					(void *)base);
		req.kind = R2_GPU_MEM_CUMEM_FD;
		type = R2CCL__MSG_TYPE__MSG_MEM_REGISTER_GPU_FD;
	} else {
		if (r2c_cu.ipcGetMemHandle(&ipc, base) != CUDA_SUCCESS)
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
		pthread_mutex_lock(&r2c_glock);
		g = gclient_get(c, true);
		if (g) {
			reg->next = g->regs;
			g->regs = reg;
			reg = NULL;
		}
		pthread_mutex_unlock(&r2c_glock);
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
	pthread_mutex_lock(&r2c_glock);
	g = gclient_get(c, false);
	for (pp = g ? &g->regs : NULL; pp && *pp; pp = &(*pp)->next)
		if ((*pp)->ptr == ptr) {
			reg = *pp;
			*pp = reg->next;
			break;
		}
	pthread_mutex_unlock(&r2c_glock);
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

/* The stream's half of an operation on slot (device address): write ready =
 * seq after its earlier work, wait until done >= seq, then (passed: not 0)
 * write passed = seq, which tells the host that the stream is past it
 * (gpu_int.h, struct gcomm). One driver call (cuStreamBatchMemOp, in this
 * order) where the driver has it, else one call each. */
static int stream_sync_ops(CUstream st, CUdeviceptr slot, uint32_t seq, CUdeviceptr passed)
{
	CUdeviceptr ready = slot + offsetof(struct r2_gpu_slot, ready);
	CUdeviceptr done = slot + offsetof(struct r2_gpu_slot, done);

	if (r2c_cu.streamBatchMemOp) {
		CUstreamBatchMemOpParams p[3];
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
		p[2].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
		p[2].writeValue.address = passed;
		p[2].writeValue.value = seq;
		p[2].writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
		e = r2c_cu.streamBatchMemOp(st, passed ? 3 : 2, p, 0);
		if (e == CUDA_SUCCESS)
			return 0;
		if (e != CUDA_ERROR_NOT_SUPPORTED && e != CUDA_ERROR_INVALID_VALUE)
			return -EIO;
		r2c_cu.streamBatchMemOp = NULL; /* refused before queuing: a call each from now on */
	}
	if (r2c_cu.streamWriteValue32(st, ready, seq, CU_STREAM_WRITE_VALUE_DEFAULT) !=
		    CUDA_SUCCESS ||
	    r2c_cu.streamWaitValue32(st, done, seq, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS ||
	    (passed && r2c_cu.streamWriteValue32(st, passed, seq, CU_STREAM_WRITE_VALUE_DEFAULT) !=
			       CUDA_SUCCESS))
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
	pthread_mutex_lock(&r2c_glock);
	g = gclient_get(c, true);
	if (!g) {
		r = -ENOMEM;
		goto out;
	}
	if (g->retired) /* destroyed communicators' state, once their streams are past it */
		r2c_gcomm_reap(g);
	if (slen && (r = lookup(g, sendbuff, slen, &q.send_mem, &q.send_off)) < 0)
		goto out;
	if (rlen && (r = lookup(g, recvbuff, rlen, &q.recv_mem, &q.recv_off)) < 0)
		goto out;
	m = r2c_gcomm_get(g, comm, &r);
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
				r2c_slot_release(m, s->seq, R2CCL_E_DAEMON_GONE);
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
	stage = r2c_stage_take(c, comm, m, slen, rlen, &soff);
	kern = stage && m->dstage && !m->kern.failed; /* the input after the post */
	if (stage) {
		area = (uint32_t)(soff / (2 * m->stage_max));
		if (!kern && slen &&
		    r2c_cu.memcpyDtoHAsync(stage, (CUdeviceptr)sendbuff, slen, (CUstream)stream) !=
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
		r2c_slot_release(m, seq, r); /* nothing to wait for */
		if (stage && !kern) /* the area is free once the input's copy has run */
			r2c_area_queued(m, area, (CUstream)stream);
		goto out;
	}
	m->tag[idx] = q.tag;
	if (kern && r2c_stage_kernel_launch(&m->kern, (CUstream)stream, (CUdeviceptr)sendbuff,
					    m->dstage + soff, slen, m->dstage + soff + m->stage_max,
					    (CUdeviceptr)recvbuff, rlen,
					    m->dslots + (uint64_t)idx * sizeof(*s), idx, seq) == 0) {
		r2c_area_queued(m, area, (CUstream)stream); /* free once the kernel has run */
		goto out;
	}
	/* a launch refused (no more from now on): the copies instead */
	if (kern && slen &&
	    r2c_cu.memcpyDtoHAsync(stage, (CUdeviceptr)sendbuff, slen, (CUstream)stream) !=
		    CUDA_SUCCESS) {
		__atomic_store_n(&s->ready, seq, __ATOMIC_RELEASE); /* the daemon runs it */
		m->stage_failed = true;
		r = -EIO; /* without this rank's input */
		goto out;
	}
	/* the stream: ready = seq after its earlier work, then wait done >= seq;
	 * then, unless the area's event will say it, "passed" */
	if (stream_sync_ops((CUstream)stream, m->dslots + (uint64_t)idx * sizeof(*s), seq,
			    stage ? 0 : r2c_stream_mark(m, (CUstream)stream, seq)) < 0) {
		/* the daemon will time the op out; tell the caller now */
		__atomic_store_n(&s->ready, seq, __ATOMIC_RELEASE);
		m->untracked = true; /* part of it may be queued */
		r = -EIO;
		if (stage) /* its input copy may still be queued: no more staging */
			m->stage_failed = true;
	} else if (stage) {
		/* the output back to the GPU once "done"; the area is free when
		 * this copy has run (its event) */
		if (rlen && r2c_cu.memcpyHtoDAsync((CUdeviceptr)recvbuff, stage + m->stage_max, rlen,
					       (CUstream)stream) != CUDA_SUCCESS)
			r = -EIO; /* the output will not reach the caller's buffer */
		r2c_area_queued(m, area, (CUstream)stream);
	}
out:
	pthread_mutex_unlock(&r2c_glock);
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
	pthread_mutex_lock(&r2c_glock);
	g = gclient_get(comm->client, false);
	if (g) {
		reap_all(g);
		if (g->retired)
			r2c_gcomm_reap(g);
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
				r2c_slot_release(m, s->seq, R2CCL_E_DAEMON_GONE);
			if ((int32_t)(__atomic_load_n(&s->done, __ATOMIC_ACQUIRE) - s->seq) >= 0 &&
			    __atomic_load_n(&s->status, __ATOMIC_RELAXED) < 0 && !m->async_err)
				m->async_err = s->status;
		}
		*async_err = m->async_err;
	}
	pthread_mutex_unlock(&r2c_glock);
	return 0;
}

#else /* !HAVE_CUDA */

void r2c_gpu_forget(r2ccl_client_t *c)
{
	(void)c;
}

void r2c_gpu_comm_forget(r2ccl_comm_t *comm)
{
	(void)comm;
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
