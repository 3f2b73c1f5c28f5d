/* SPDX-License-Identifier: MIT */
/*
 * GPU memory of the clients: CUDA IPC and cuMem POSIX-fd imports, and the
 * per-session cache of opened allocations that registrations share.
 *
 * A client names an allocation by its CUDA IPC handle (cudaMalloc memory) or
 * by a POSIX fd from cuMemExportToShareableHandle (cuMem). The daemon opens
 * each allocation once per session (cache keyed by the session and the
 * handle / the client's allocation address), in the context of the GPU that
 * holds it, with access from every peer GPU; every registration of a range
 * of it takes a reference, the last one closes it.
 *
 * A cuMem fd is proof of ownership by itself (the client exported it from
 * an allocation it holds). A legacy IPC handle is only bytes: it is opened
 * only past gpu_legacy_ipc's owner check (owner.h), with the offset of the
 * exporter's pid in this driver's handles learnt from two of the daemon's.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/comm_record.h"
#include "base/op_record.h"
#include "gpu/owner.h"
#include "nvdev.h"
#include "nvml.h"
#include "gpu_priv.h"
#include "log.h"
#include "util.h"

static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gpu_alloc *allocs;

/* Where this driver writes the exporter's pid in a legacy IPC handle: learnt
 * once, from two allocations of the daemon's own on GPU dev (owner.h). A
 * negative answer (no single place) makes same-pid refuse every legacy
 * handle; a failure to allocate is not kept (the next registration asks
 * again). Under alloc_lock. */
static int ipc_pid_off = INT_MIN;

/* Whether the driver binds a handle to the pid in it: the daemon's own
 * handle h with another live process's pid written at off (our parent's: a
 * pid of a process that never exported this memory). A driver that opens it
 * takes the pid for a label only, and then anyone may write their own pid
 * into a handle they saw: -EACCES. 0 when it refuses, as same-pid needs. */
static int ipc_pid_binds(cudaIpcMemHandle_t h, int off)
{
	uint32_t other = (uint32_t)getppid();
	void *q = NULL;

	memcpy(h.reserved + off, &other, sizeof(other));
	if (cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
		cudaGetLastError(); /* the refusal expected: not sticky */
		return 0;
	}
	cudaIpcCloseMemHandle(q);
	return -EACCES;
}

static int ipc_pid_offset(int dev)
{
	cudaIpcMemHandle_t h[2];
	void *p[2] = { NULL, NULL };
	int off = -EIO;

	if (ipc_pid_off != INT_MIN)
		return ipc_pid_off;
	cudaSetDevice(r2g.dev[dev].ord);
	if (cudaMalloc(&p[0], 2u << 20) == cudaSuccess &&
	    cudaMalloc(&p[1], 2u << 20) == cudaSuccess &&
	    cudaIpcGetMemHandle(&h[0], p[0]) == cudaSuccess &&
	    cudaIpcGetMemHandle(&h[1], p[1]) == cudaSuccess) {
		off = r2_gpu_ipc_pid_offset((const uint8_t *)h[0].reserved,
					    (const uint8_t *)h[1].reserved, sizeof(h[0].reserved),
					    getpid());
		if (off >= 0 && ipc_pid_binds(h[0], off) < 0) {
			log_warn("gpu: legacy IPC handles hold the exporting pid at byte %d, but "
				 "this driver opened one of r2ccld's own handles with another "
				 "pid written there: the pid binds nothing, so "
				 "gpu_legacy_ipc=same-pid refuses every legacy handle (cudaMalloc "
				 "memory: libnccl stages it; cuMem memory with a POSIX fd handle "
				 "is opened)", off);
			off = -EACCES;
		}
	}
	for (int i = 0; i < 2; i++)
		if (p[i])
			cudaFree(p[i]);
	if (off == -EIO) {
		log_warn("gpu: no IPC handle of the daemon's own to learn the layout from: %s",
			 cudaGetErrorString(cudaGetLastError()));
		return off;
	}
	if (off >= 0)
		log_info("gpu: legacy IPC handles hold the exporting pid at byte %d, and this "
			 "driver refuses one whose pid was changed (gpu_legacy_ipc=same-pid "
			 "checks it)", off);
	else if (off != -EACCES)
		log_warn("gpu: legacy IPC handles hold the exporting pid at %s: "
			 "gpu_legacy_ipc=same-pid refuses every legacy handle",
			 off == -EEXIST ? "several places" : "no place");
	ipc_pid_off = off;
	return off;
}

/* r2ccld's own depth in pid namespaces, from its /proc (owner.h); 2 when it
 * is not in the host's (initial) pid namespace, where NVML would hide the
 * processes it cannot see, whatever its /proc says */
static int self_nslevels(void)
{
	static int levels;
	struct stat st;
	char buf[4096];
	ssize_t n;
	int fd;

	if (levels)
		return levels;
	if (stat("/proc/self/ns/pid", &st) < 0 || st.st_ino != R2_PROC_PID_INIT_INO) {
		levels = 2;
		log_info("gpu: r2ccld is not in the host's pid namespace: gpu_legacy_ipc=gpu-access "
			 "checks legacy handles as same-pid does");
		return levels;
	}
	fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	levels = n > 0 ? (buf[n] = 0, r2_gpu_status_nslevels(buf)) : -EIO;
	return levels;
}

/* gpu-access's tests (owner.h): the client's device file of GPU dev, the GPU
 * not split into MIG instances, and no other user's process on it, whose
 * memory a handle could be */
static int gpu_access(struct r2_session *s, const struct r2_gpu_reg_req *req, int dev, char *why,
		      size_t whylen)
{
	static bool nvml_said;
	pid_t pids[R2G_NVML_MAX_PIDS];
	size_t n = 0;
	int r;

	r = r2_gpu_access_check(req->dev_fd, r2g.dev[dev].rdev, s->nslevels, self_nslevels(), why,
				whylen);
	if (r == 0 && r2_nvidia_mig_in_use(r2g.dev[dev].minor)) { /* instances made since */
		snprintf(why, whylen, "the GPU is split into MIG instances, which share its "
			 "device file");
		r = -EPERM;
	}
	if (r == 0) {
		r = r2g_nvml_gpu_pids(r2g.dev[dev].bus, pids, R2G_NVML_MAX_PIDS, &n, why, whylen);
		if (r < 0 && !nvml_said) {
			nvml_said = true;
			log_warn("gpu: %s: gpu_legacy_ipc=gpu-access checks legacy handles as "
				 "same-pid does", why);
		}
	}
	if (r == 0)
		r = r2_gpu_sole_user_check(pids, n, getpid(), s->uid, r2_gpu_proc_uid, why, whylen);
	return r < 0 ? r : 0;
}

/* Whether s may have the legacy IPC handle of req opened (gpu_legacy_ipc):
 * 1 (gpu-access's tests passed), 0 (another policy's), or -EPERM; under
 * alloc_lock. gpu-access: its own tests, else same-pid's. */
static int ipc_owner_check(struct r2_session *s, const struct r2_gpu_reg_req *req, int dev,
			   char *err, size_t errlen)
{
	int pol = r2_gpu_legacy_parse(r2_param_str(&s->d->params, P_GPU_LEGACY_IPC));
	char why[192], pidwhy[384];
	int off = -ENOENT, r;

	if (pol < 0)
		pol = R2_GPU_LEGACY_DENY;
	if (pol == R2_GPU_LEGACY_GPU_ACCESS && gpu_access(s, req, dev, why, sizeof(why)) == 0)
		return 1; /* checked again once opened (r2_gpu_region_new) */
	/* a pid proves something in r2ccld's pid namespace only: in one of
	 * its own, anyone may take any pid (unshare, clone3's set_tid) */
	if ((pol == R2_GPU_LEGACY_SAME_PID || pol == R2_GPU_LEGACY_GPU_ACCESS) &&
	    s->nslevels != 1) {
		snprintf(err, errlen, "gpu_legacy_ipc=%s: the client runs in another pid namespace "
			 "than r2ccld's, where the pid in a handle proves nothing; allocate with "
			 "cuMem and a POSIX fd handle type (libnccl stages cudaMalloc memory)",
			 pol == R2_GPU_LEGACY_SAME_PID ? "same-pid" : "gpu-access");
		return -EPERM;
	}
	if (pol == R2_GPU_LEGACY_SAME_PID || pol == R2_GPU_LEGACY_GPU_ACCESS)
		off = ipc_pid_offset(dev);
	r = r2_gpu_ipc_owner_check((enum r2_gpu_legacy)pol, req->ipc_handle, req->ipc_handle_len,
				   off, s->pidfd, s->nspid, pidwhy, sizeof(pidwhy));
	if (r < 0 && pol == R2_GPU_LEGACY_GPU_ACCESS)
		snprintf(err, errlen, "gpu_legacy_ipc=gpu-access: %s; nor does %s", why, pidwhy);
	else if (r < 0)
		snprintf(err, errlen, "%s", pidwhy);
	return r;
}

/* cudaMalloc memory: the IPC handle opened in the context of its GPU, and
 * of every peer GPU (a legacy IPC mapping serves the context that opened
 * it; one context per device may open it). */
static int open_ipc(struct gpu_alloc *a, const struct r2_gpu_reg_req *req, char *err,
		    size_t errlen)
{
	cudaIpcMemHandle_t h;
	void *p = NULL;
	CUdeviceptr base = 0;
	size_t sz = 0;
	cudaError_t e;
	CUresult cr;

	memcpy(&h, req->ipc_handle, sizeof(h));
	e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
	if (e != cudaSuccess) {
		log_warn("gpu: cudaIpcOpenMemHandle: %s", cudaGetErrorString(e));
		snprintf(err, errlen, "cudaIpcOpenMemHandle: %s", cudaGetErrorString(e));
		return -EINVAL;
	}
	/* the client's word for the GPU is not trusted: the owner check was
	 * of the GPU the request named */
	struct cudaPointerAttributes pa;
	if (cudaPointerGetAttributes(&pa, p) != cudaSuccess || pa.device != r2g.dev[a->dev].ord) {
		cudaGetLastError();
		snprintf(err, errlen, "the IPC handle's memory is not on the GPU the request names "
			 "(GPU %d)", r2g.dev[a->dev].ord);
		cudaIpcCloseMemHandle(p);
		return -EPERM;
	}
	/* the client's word for the size is not trusted */
	cr = r2g.memGetAddressRange(&base, &sz, (CUdeviceptr)p);
	/* the allocation's bytes from the pointer opened, not from its base */
	if (cr != CUDA_SUCCESS || (CUdeviceptr)p < base || (CUdeviceptr)p - base > sz ||
	    (uint64_t)(sz - ((CUdeviceptr)p - base)) < req->alloc_size) {
		snprintf(err, errlen, "allocation holds %zu bytes, %llu declared", sz,
			 (unsigned long long)req->alloc_size);
		cudaIpcCloseMemHandle(p);
		return -EINVAL;
	}
	a->dptr = p;
	a->map[a->dev] = p;
	a->size = req->alloc_size;
	for (int i = 0; i < r2g.ndev; i++) {
		int ok = 0;
		void *q = NULL;
		if (i == a->dev || cudaDeviceCanAccessPeer(&ok, r2g.dev[i].ord,
							   r2g.dev[a->dev].ord) != cudaSuccess ||
		    !ok)
			continue;
		cudaSetDevice(r2g.dev[i].ord);
		if (cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess)
			a->map[i] = q;
		else
			log_warn("gpu: GPU %d cannot map memory of GPU %d: %s", i, a->dev,
				 cudaGetErrorString(cudaGetLastError()));
	}
	return 0;
}

/* cuMem memory: imported from the fd, mapped once at an address of the
 * daemon's, readable and writable by its GPU and every peer GPU. */
static int open_cumem(struct gpu_alloc *a, const struct r2_gpu_reg_req *req, char *err,
		      size_t errlen)
{
	CUmemAccessDesc acc[MAX_DEV];
	CUdeviceptr va = 0;
	size_t nacc = 0;
	int fd = req->fd;
	CUresult cr;

	cr = r2g.memImport(&a->h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (cr != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuMemImportFromShareableHandle: error %d", (int)cr);
		return -EINVAL;
	}
	/* 2 MiB: the granularity of every GPU this targets; cuMemMap refuses
	 * a size over the allocation's own */
	cr = r2g.memAddressReserve(&va, req->alloc_size, 2u << 20, 0, 0);
	if (cr != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuMemAddressReserve(%llu): error %d",
			 (unsigned long long)req->alloc_size, (int)cr);
		r2g.memRelease(a->h);
		return -EINVAL;
	}
	cr = r2g.memMap(va, req->alloc_size, 0, a->h, 0);
	if (cr != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuMemMap(%llu bytes): error %d",
			 (unsigned long long)req->alloc_size, (int)cr);
		r2g.memAddressFree(va, req->alloc_size);
		r2g.memRelease(a->h);
		return -EINVAL;
	}
	for (int i = 0; i < r2g.ndev; i++) {
		int ok = i == a->dev;
		if (!ok && cudaDeviceCanAccessPeer(&ok, r2g.dev[i].ord, r2g.dev[a->dev].ord) !=
				   cudaSuccess)
			ok = 0;
		if (!ok)
			continue;
		memset(&acc[nacc], 0, sizeof(acc[nacc]));
		acc[nacc].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		acc[nacc].location.id = r2g.dev[i].ord;
		acc[nacc].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		nacc++;
	}
	cr = r2g.memSetAccess(va, req->alloc_size, acc, nacc);
	if (cr != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuMemSetAccess: error %d", (int)cr);
		r2g.memUnmap(va, req->alloc_size);
		r2g.memAddressFree(va, req->alloc_size);
		r2g.memRelease(a->h);
		return -EINVAL;
	}
	a->dptr = (char *)(uintptr_t)va;
	for (size_t k = 0; k < nacc; k++)
		for (int i = 0; i < r2g.ndev; i++)
			if (r2g.dev[i].ord == acc[k].location.id)
				a->map[i] = a->dptr; /* one mapping, every GPU */
	a->size = req->alloc_size;
	return 0;
}

static int alloc_open(struct gpu_alloc *a, const struct r2_gpu_reg_req *req, char *err,
		      size_t errlen)
{
	cudaSetDevice(r2g.dev[a->dev].ord);
	if (a->kind == R2_GPU_MEM_IPC)
		return open_ipc(a, req, err, errlen);
	return open_cumem(a, req, err, errlen);
}

static void alloc_close(struct gpu_alloc *a)
{
	if (a->kind == R2_GPU_MEM_IPC) {
		for (int i = 0; i < r2g.ndev; i++) {
			if (!a->map[i])
				continue;
			cudaSetDevice(r2g.dev[i].ord);
			cudaIpcCloseMemHandle(a->map[i]);
		}
	} else {
		cudaSetDevice(r2g.dev[a->dev].ord);
		r2g.memUnmap((CUdeviceptr)(uintptr_t)a->dptr, a->size);
		r2g.memAddressFree((CUdeviceptr)(uintptr_t)a->dptr, a->size);
		r2g.memRelease(a->h);
	}
	log_info("gpu: session %llu: released %s allocation of %llu bytes on GPU %d",
		 (unsigned long long)a->sess, a->kind == R2_GPU_MEM_IPC ? "IPC" : "cuMem",
		 (unsigned long long)a->size, r2g.dev[a->dev].ord);
	free(a);
}

/* Checks a registration request; its GPU's index in *dev. */
static int req_check(const struct r2_gpu_reg_req *req, int *dev, char *err, size_t errlen)
{
	if (req->kind != R2_GPU_MEM_IPC && req->kind != R2_GPU_MEM_CUMEM_FD) {
		snprintf(err, errlen, "unknown GPU memory kind %u", req->kind);
		return -EINVAL;
	}
	if (req->kind == R2_GPU_MEM_IPC && req->ipc_handle_len != R2_GPU_IPC_HANDLE_BYTES) {
		snprintf(err, errlen, "IPC handle of %zu bytes", req->ipc_handle_len);
		return -EINVAL;
	}
	if (req->kind == R2_GPU_MEM_CUMEM_FD && req->fd < 0) {
		snprintf(err, errlen, "no fd");
		return -EINVAL;
	}
	if (req->uuid_len != R2_GPU_UUID_BYTES || (*dev = r2g_dev_by_uuid(req->uuid)) < 0) {
		snprintf(err, errlen, "no GPU of this host has that UUID");
		return -ENODEV;
	}
	if (req->size == 0 || req->alloc_size == 0 || req->offset > req->alloc_size ||
	    req->size > req->alloc_size - req->offset || req->alloc_size > (1ull << 44)) {
		snprintf(err, errlen, "range %llu+%llu outside an allocation of %llu bytes",
			 (unsigned long long)req->offset, (unsigned long long)req->size,
			 (unsigned long long)req->alloc_size);
		return -EINVAL;
	}
	return 0;
}

/* The session's allocation of req, opened now if new, with one more
 * reference (under alloc_lock). */
static int alloc_ref(struct r2_session *s, const struct r2_gpu_reg_req *req, int dev,
		     struct gpu_alloc **out, char *err, size_t errlen)
{
	struct gpu_alloc *a = NULL;
	uint8_t key[64];
	int r;

	memset(key, 0, sizeof(key));
	if (req->kind == R2_GPU_MEM_IPC) {
		memcpy(key, req->ipc_handle, 64);
	} else {
		memcpy(key, &req->alloc_base, 8);
		memcpy(key + 8, &req->alloc_size, 8);
	}
	for (a = allocs; a; a = a->next)
		if (a->sess == s->id && a->kind == req->kind && !memcmp(a->key, key, 64))
			break;
	if (a) {
		if (a->dev != dev || req->alloc_size > a->size) {
			snprintf(err, errlen, "does not match the allocation registered before");
			return -EINVAL;
		}
		a->refs++;
		if (req->kind == R2_GPU_MEM_CUMEM_FD)
			close(req->fd); /* already imported */
		*out = a;
		return 0;
	}
	if (!(a = calloc(1, sizeof(*a))))
		return -ENOMEM;
	a->sess = s->id;
	a->kind = req->kind;
	a->dev = dev;
	memcpy(a->key, key, 64);
	r = alloc_open(a, req, err, errlen);
	if (r < 0) {
		free(a);
		return r;
	}
	if (req->kind == R2_GPU_MEM_CUMEM_FD)
		close(req->fd); /* the imported handle keeps the memory */
	a->refs = 1;
	a->next = allocs;
	allocs = a;
	log_info("gpu: session %llu: opened %s allocation of %llu bytes on GPU %d",
		 (unsigned long long)s->id, a->kind == R2_GPU_MEM_IPC ? "IPC" : "cuMem",
		 (unsigned long long)a->size, r2g.dev[dev].ord);
	*out = a;
	return 0;
}

int r2_gpu_region_new(struct r2_session *s, const struct r2_gpu_reg_req *req,
		      struct r2_memreg **out, char *err, size_t errlen)
{
	struct gpu_alloc *a = NULL;
	struct r2_gpu_region *g;
	int dev = -1, by_access = 0, r;

	if ((r = r2g_init(&s->d->params)) < 0) {
		snprintf(err, errlen, "%s", r2g.errmsg);
		return r;
	}
	if ((r = req_check(req, &dev, err, errlen)) < 0)
		return r;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	pthread_mutex_lock(&alloc_lock);
	r = 0;
	if (req->kind == R2_GPU_MEM_IPC)
		r = by_access = ipc_owner_check(s, req, dev, err, errlen);
	if (r >= 0)
		r = alloc_ref(s, req, dev, &a, err, errlen);
	/* gpu-access again, now that the memory exists for certain: a process
	 * of another user that came to the GPU since the first look (its
	 * handle's exporter) refuses it */
	if (r == 0 && by_access == 1 && gpu_access(s, req, dev, err, errlen) < 0)
		r = -EAGAIN;
	pthread_mutex_unlock(&alloc_lock);
	if (r < 0 && r != -EAGAIN) {
		free(g);
		return r;
	}
	g->a = a;
	g->dev = dev;
	g->m.fd = R2_MEM_FD_GPU;
	g->m.size = req->size;
	g->m.addr = a->dptr + req->offset;
	atomic_init(&g->m.refs, 1);
	if (r == -EAGAIN) {
		char why[256];
		snprintf(why, sizeof(why), "%s", err);
		snprintf(err, errlen, "gpu_legacy_ipc=gpu-access, checked again after the open: %s",
			 why);
		r2_gpu_region_free(&g->m); /* the reference taken, the handle closed if last */
		return -EPERM;
	}
	*out = &g->m;
	return 0;
}

void r2_gpu_region_free(struct r2_memreg *m)
{
	struct r2_gpu_region *g = (struct r2_gpu_region *)m;
	struct gpu_alloc *a = g->a, **pp;
	bool last = false;

	pthread_mutex_lock(&alloc_lock);
	if (--a->refs == 0) {
		for (pp = &allocs; *pp; pp = &(*pp)->next)
			if (*pp == a) {
				*pp = a->next;
				break;
			}
		last = true;
	}
	pthread_mutex_unlock(&alloc_lock);
	if (last)
		alloc_close(a);
	free(g);
}
