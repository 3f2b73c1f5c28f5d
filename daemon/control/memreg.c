/* SPDX-License-Identifier: MIT */
/*
 * Client memory the daemon maps (BRIEF.md decision 3, host memory).
 *
 * A client passes a memfd; the daemon maps it shared and works in it directly
 * (zero copy). The memfd must be sealed against shrinking (F_SEAL_SHRINK):
 * otherwise a client could truncate it while the daemon reads it and the
 * daemon would take SIGBUS. Mappings are released when the session's last
 * reference goes (an executor still running an operation keeps it).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control/control.h"
#include "config.h"
#include "base/daemon.h"
#include "gpu/gpu.h"
#include "net/tenants.h"
#include "gpu/owner.h"
#include "gpu_abi.h"

/* The registrations of s's uid and of everyone against their caps (d->caps):
 * each holds an fd and a mapping. Under d->lock. */
static int mem_quota(struct r2_session *s, uint64_t size, char *err, size_t errlen)
{
	const struct r2d_caps *k = &s->d->caps;
	uint64_t n = 0, bytes = 0, un = 0, ubytes = 0, tn = 0, tbytes = 0;
	struct r2_tenant_policy pol;

	if (!r2d_tenants_policy_at(s->d, s->tenant_idx, &pol))
		pol.max_regs = 0, pol.max_mem = 0;
	for (struct r2_session *o = s->d->sessions; o; o = o->next) {
		n += o->nmem;
		bytes += o->mem_bytes;
		if (o->uid == s->uid) {
			un += o->nmem;
			ubytes += o->mem_bytes;
		}
		if (o->tenant_idx == s->tenant_idx) {
			tn += o->nmem;
			tbytes += o->mem_bytes;
		}
	}
	if (un + 1 > k->regs_per_uid)
		snprintf(err, errlen, "quota max_regs_per_uid: uid %u holds %llu registrations",
			 (unsigned)s->uid, (unsigned long long)un);
	else if (n + 1 > k->regs)
		snprintf(err, errlen, "quota max_regs: the daemon holds %llu registrations",
			 (unsigned long long)n);
	else if (ubytes + size > k->mem_per_uid)
		snprintf(err, errlen, "quota max_mem_per_uid: uid %u holds %llu bytes, %llu more "
			 "is over %llu", (unsigned)s->uid, (unsigned long long)ubytes,
			 (unsigned long long)size, (unsigned long long)k->mem_per_uid);
	else if (bytes + size > k->mem)
		snprintf(err, errlen, "quota max_mem: the daemon holds %llu bytes, %llu more is "
			 "over %llu", (unsigned long long)bytes, (unsigned long long)size,
			 (unsigned long long)k->mem);
	else if (s->uid && pol.max_regs && tn + 1 > pol.max_regs)
		snprintf(err, errlen, "quota max_regs of tenant %s: it holds %llu registrations",
			 pol.name, (unsigned long long)tn);
	else if (s->uid && pol.max_mem && tbytes + size > pol.max_mem)
		snprintf(err, errlen, "quota max_mem of tenant %s: it holds %llu bytes, %llu more "
			 "is over %llu", pol.name, (unsigned long long)tbytes,
			 (unsigned long long)size, (unsigned long long)pol.max_mem);
	else
		return 0;
	s->d->quota_refusals++;
	return R2CCL_E_QUOTA;
}

int r2d_mem_register(struct r2_session *s, int fd, uint64_t size, uint32_t *id, char *err,
		     size_t errlen)
{
	struct r2_memreg *m;
	struct stat st;
	int seals, r;
	uint64_t quota = (uint64_t)r2_param_int(&s->d->params, P_MAX_MEM_PER_SESSION);

	if (size == 0) {
		snprintf(err, errlen, "size 0");
		return -EINVAL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "the descriptor is not a memfd/regular file");
		return -EINVAL;
	}
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
		snprintf(err, errlen, "the memfd must be sealed with F_SEAL_SHRINK");
		return -EPERM;
	}
	if ((uint64_t)st.st_size < size) {
		snprintf(err, errlen, "declared size %llu exceeds the file's %lld bytes",
			 (unsigned long long)size, (long long)st.st_size);
		return -EINVAL;
	}
	/* Resident, not just declared: a sparse memfd would have the daemon
	 * fault in pages charged to its own cgroup (and a 1 TiB hole per
	 * session exhausts its address space). libr2ccl fallocates its memfds,
	 * so the pages are the client's. */
	if ((uint64_t)st.st_blocks * 512 < size) {
		snprintf(err, errlen,
			 "sparse memfd: %llu of its %llu bytes are allocated (fallocate it "
			 "before registering)",
			 (unsigned long long)st.st_blocks * 512, (unsigned long long)size);
		return -EINVAL;
	}
	if (s->mem_bytes + size > quota) {
		snprintf(err, errlen, "quota max_mem_per_session: %llu + %llu bytes over %llu",
			 (unsigned long long)s->mem_bytes, (unsigned long long)size,
			 (unsigned long long)quota);
		return R2CCL_E_QUOTA;
	}
	r = mem_quota(s, size, err, errlen);
	if (r < 0)
		return r;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m->addr == MAP_FAILED) {
		r = -errno;
		snprintf(err, errlen, "mmap: %s", strerror(errno));
		free(m);
		return r;
	}
	m->fd = fd;
	m->size = size;
	atomic_init(&m->refs, 1);
	m->id = s->next_mem_id++;
	m->next = s->mem;
	s->mem = m;
	s->mem_bytes += size;
	s->nmem++;
	*id = m->id;
	return 0;
}

void r2d_mem_put(struct r2_memreg *m)
{
	if (!m || atomic_fetch_sub(&m->refs, 1) != 1)
		return;
	if (r2_mem_is_gpu(m)) {
		r2_gpu_region_free(m); /* closes the allocation with its last region */
		return;
	}
	munmap(m->addr, m->size);
	close(m->fd);
	free(m);
}

int r2d_mem_deregister(struct r2_session *s, uint32_t id)
{
	for (struct r2_memreg **pp = &s->mem; *pp; pp = &(*pp)->next) {
		struct r2_memreg *m = *pp;
		if (m->id != id)
			continue;
		*pp = m->next;
		if (!r2_mem_is_gpu(m))
			s->mem_bytes -= m->size;
		s->nmem--;
		/* An operation still using it (a client that frees memory
		 * before its operation completed) keeps the mapping alive. */
		m->next = NULL;
		r2d_mem_put(m);
		return 0;
	}
	return R2CCL_E_BAD_BUFFER;
}

void r2d_mem_release_all(struct r2_session *s)
{
	struct r2_memreg *m, *next;

	for (m = s->mem; m; m = next) {
		next = m->next;
		m->next = NULL;
		r2d_mem_put(m);
	}
	s->mem = NULL;
	s->mem_bytes = 0;
	s->nmem = 0;
}

int r2d_mem_resolve(struct r2_session *s, uint32_t id, uint64_t off, uint64_t len, void **addr,
		    struct r2_memreg **ref)
{
	for (struct r2_memreg *m = s->mem; m; m = m->next) {
		if (m->id != id)
			continue;
		if (off > m->size || len > m->size - off)
			return R2CCL_E_BAD_BUFFER;
		*addr = (char *)m->addr + off;
		atomic_fetch_add(&m->refs, 1);
		*ref = m;
		return 0;
	}
	return R2CCL_E_BAD_BUFFER;
}

/* GPU memory (daemon/gpu/): a region of a CUDA IPC or cuMem allocation the
 * daemon opened; it lives in the session's table like a memfd region and is
 * resolved the same way (addr is the daemon's device pointer). GPU memory is
 * not counted against max_mem_per_session: the daemon maps it, it does not
 * hold a copy. */
int r2d_mem_register_gpu(struct r2_session *s, const struct r2_gpu_reg_req *req, uint32_t *id,
			 char *err, size_t errlen)
{
	struct r2_memreg *m = NULL;
	/* the registration caps count GPU regions too (each may hold a cuMem
	 * fd or an opened IPC handle); their bytes are device memory, so 0 */
	int r = mem_quota(s, 0, err, errlen);

	if (r < 0)
		return r;
	/* gpu_legacy_ipc=deny refuses a legacy IPC handle before any GPU is
	 * touched; same-pid is checked where the handle is opened (gpu/owner.h) */
	if (req->kind == R2_GPU_MEM_IPC &&
	    r2_gpu_legacy_parse(r2_param_str(&s->d->params, P_GPU_LEGACY_IPC)) ==
		    R2_GPU_LEGACY_DENY)
		return r2_gpu_ipc_owner_check(R2_GPU_LEGACY_DENY, req->ipc_handle,
					      req->ipc_handle_len, -1, s->pidfd, s->nspid, err,
					      errlen);
	r = r2_gpu_region_new(s, req, &m, err, errlen);
	if (r < 0)
		return r;
	m->id = s->next_mem_id++;
	m->next = s->mem;
	s->mem = m;
	s->nmem++; /* its bytes are not host memory: mem_bytes stays */
	*id = m->id;
	return 0;
}
