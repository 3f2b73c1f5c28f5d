/* SPDX-License-Identifier: MIT */
/*
 * libr2ccl: a communicator's GPU state (gpu_int.h, struct gcomm): its sync
 * slots, its client staging areas and the streams its operations went on,
 * set up at its first stream-ordered operation, retired when it is destroyed
 * (r2c_gpu_comm_forget, gpu.c) and freed once no stream can touch it any
 * more. Everything here runs with r2c_glock held.
 */
#include "config.h"

#if HAVE_CUDA

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_int.h"
#include "params.h"
#include "util.h"

/* ---- the sync slots ---- */

#define SLOTS_BYTES (sizeof(struct r2_gpu_slot) * R2_GPU_SLOTS)
#define SYNC_BYTES (SLOTS_BYTES + sizeof(uint32_t) * GC_STREAMS)

static int slots_setup(r2ccl_client_t *c, struct gcomm *m)
{
	uint64_t off;
	CUresult e;
	void *p;
	int r;

	r = r2ccl_mem_alloc(c, SYNC_BYTES, &p);
	if (r < 0)
		return r;
	memset(p, 0, SYNC_BYTES);
	e = r2c_cu.memHostRegister(p, SYNC_BYTES,
			       CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
	if (e == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
		/* left over from memory unmapped while registered (a client
		 * disconnected without this library seeing it) */
		r2c_cu.memHostUnregister(p);
		e = r2c_cu.memHostRegister(p, SYNC_BYTES,
				       CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
	}
	if (e != CUDA_SUCCESS || r2c_cu.memHostGetDevicePointer(&m->dslots, p, 0) != CUDA_SUCCESS) {
		if (e == CUDA_SUCCESS)
			r2c_cu.memHostUnregister(p);
		r2ccl_mem_free(c, p);
		return -ENODEV; /* no current CUDA context? */
	}
	r = r2c_mem_lookup(c, p, SYNC_BYTES, &m->mem_id, &off);
	if (r < 0 || off != 0) {
		r2c_cu.memHostUnregister(p);
		r2ccl_mem_free(c, p);
		return r < 0 ? r : -EINVAL;
	}
	m->slots = p;
	m->passed = (uint32_t *)((char *)p + SLOTS_BYTES);
	m->dpassed = m->dslots + SLOTS_BYTES;
	m->ctx = NULL;
	r2c_cu.ctxGetCurrent(&m->ctx);
	return 0;
}

struct gcomm *r2c_gcomm_get(struct gclient *g, r2ccl_comm_t *comm, int *err)
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

void r2c_slot_release(struct gcomm *m, uint32_t seq, int status)
{
	struct r2_gpu_slot *s = &m->slots[seq % R2_GPU_SLOTS];

	if (s->seq != seq)
		return;
	if ((int32_t)(__atomic_load_n(&s->done, __ATOMIC_ACQUIRE) - seq) >= 0)
		return; /* the daemon released it already */
	__atomic_store_n(&s->status, status, __ATOMIC_RELAXED);
	__atomic_store_n(&s->done, seq, __ATOMIC_RELEASE);
}

/* ---- the streams (gpu_int.h, struct gcomm) ---- */

static bool entry_passed(const struct gcomm *m, uint32_t i)
{
	return !m->st_last[i] ||
	       (int32_t)(__atomic_load_n(&m->passed[i], __ATOMIC_ACQUIRE) - m->st_last[i]) >= 0;
}

CUdeviceptr r2c_stream_mark(struct gcomm *m, CUstream st, uint32_t seq)
{
	uint32_t i;

	for (i = 0; i < m->nst && m->st[i] != st; i++)
		;
	if (i == m->nst) {
		if (m->nst < GC_STREAMS) {
			m->nst++;
		} else {
			/* full: an entry whose stream is past all it was given
			 * (its word then only grows with the new stream's) */
			for (i = 0; i < GC_STREAMS && !entry_passed(m, i); i++)
				;
			if (i == GC_STREAMS) {
				m->untracked = true;
				return 0;
			}
		}
		m->st[i] = st;
	}
	m->st_last[i] = seq;
	return m->dpassed + (CUdeviceptr)i * sizeof(uint32_t);
}

/* ---- client staging (gpu_int.h; gpu.c's submission uses it) ---- */

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
#define STAGE_DEFAULT (256u << 10)

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

/* Releases the CUDA side of m's staging (not its shared memory). */
static void stage_free(struct gcomm *m)
{
	if (!m->stage)
		return;
	for (uint32_t i = 0; i < STAGE_AREAS; i++)
		if (m->stage_ev[i])
			r2c_cu.eventDestroy(m->stage_ev[i]);
	memset(m->stage_ev, 0, sizeof(m->stage_ev));
	r2c_stage_kernel_free(&m->kern);
	r2c_cu.memHostUnregister(m->stage);
}

char *r2c_stage_take(r2ccl_client_t *c, r2ccl_comm_t *comm, struct gcomm *m, uint64_t slen,
		     uint64_t rlen, uint64_t *off)
{
	uint64_t max = stage_limit();
	uint32_t i;

	if (comm->nhosts < 2 || !max || slen > max || rlen > max || !r2c_cu.memcpyDtoHAsync ||
	    m->stage_failed)
		return NULL;
	if (!m->stage) {
		uint64_t o;
		void *p;
		bool ok = r2ccl_mem_alloc(c, 2 * STAGE_AREAS * max, &p) == 0;
		/* mapped into the GPU for the kernel, else pinned only */
		m->dstage = 0;
		if (ok && r2c_stage_kernel_enabled() &&
		    r2c_cu.memHostRegister(p, 2 * STAGE_AREAS * max,
				       CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) ==
			    CUDA_SUCCESS &&
		    r2c_cu.memHostGetDevicePointer(&m->dstage, p, 0) != CUDA_SUCCESS) {
			r2c_cu.memHostUnregister(p);
			m->dstage = 0;
		}
		if (ok && !m->dstage &&
		    r2c_cu.memHostRegister(p, 2 * STAGE_AREAS * max, CU_MEMHOSTREGISTER_PORTABLE) !=
			    CUDA_SUCCESS) {
			r2ccl_mem_free(c, p);
			ok = false;
		}
		if (ok && (r2c_mem_lookup(c, p, 2 * STAGE_AREAS * max, &m->stage_mem, &o) < 0 || o)) {
			r2c_cu.memHostUnregister(p);
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
			if (r2c_cu.eventCreate(&m->stage_ev[i], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
				stage_free(m);
				r2ccl_mem_free(c, p);
				m->stage = NULL;
				m->stage_failed = true;
				return NULL;
			}
	}
	i = m->stage_next % STAGE_AREAS;
	if (m->stage_used[i] && r2c_cu.eventQuery(m->stage_ev[i]) != CUDA_SUCCESS)
		return NULL; /* its last copy back is still queued */
	m->stage_next++;
	*off = (uint64_t)i * 2 * m->stage_max;
	return m->stage + *off;
}

/* The staging area is free once what st queued for it has run: its event.
 * Without the event its end is unknown: no more staging for m (the
 * operation itself is fine), and m's memory stays until disconnect. */
void r2c_area_queued(struct gcomm *m, uint32_t area, CUstream st)
{
	if (r2c_cu.eventRecord(m->stage_ev[area], st) != CUDA_SUCCESS) {
		m->stage_failed = true;
		m->untracked = true;
	}
	m->stage_used[area] = true;
}

/* ---- the end ---- */

/* No stream can touch m's memory any more: every stream entry is past what
 * it was given, every staging area's last use has run. */
static bool gcomm_idle(struct gcomm *m)
{
	if (m->untracked)
		return false;
	for (uint32_t i = 0; i < m->nst; i++)
		if (!entry_passed(m, i))
			return false;
	for (uint32_t i = 0; m->stage && i < STAGE_AREAS; i++)
		if (m->stage_used[i] && r2c_cu.eventQuery(m->stage_ev[i]) == CUDA_ERROR_NOT_READY)
			return false; /* (another error: its context is gone, and its work) */
	return true;
}

/* The CUDA side of m, in the context it was set up in (a context destroyed
 * since took its registrations with it). */
static void gcomm_cuda_free(struct gcomm *m)
{
	CUcontext x;
	bool pushed = m->ctx && r2c_cu.ctxPushCurrent(m->ctx) == CUDA_SUCCESS;

	r2c_cu.memHostUnregister(m->slots);
	stage_free(m);
	if (pushed)
		r2c_cu.ctxPopCurrent(&x);
}

void r2c_gcomm_drop(struct gcomm *m)
{
	gcomm_cuda_free(m);
	free(m);
}

void r2c_gcomm_reap(struct gclient *g)
{
	struct gcomm **pp = &g->retired, *m;

	while ((m = *pp)) {
		if (!gcomm_idle(m)) {
			pp = &m->next;
			continue;
		}
		*pp = m->next;
		gcomm_cuda_free(m);
		/* the daemon keeps what an operation of its still uses */
		r2ccl_mem_free(g->c, m->slots);
		if (m->stage)
			r2ccl_mem_free(g->c, m->stage);
		free(m);
	}
}

#endif
