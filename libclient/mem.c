/* SPDX-License-Identifier: MIT */
/*
 * Host memory shared with the daemon: a sealed memfd per allocation, mapped
 * here and (after MemRegister) in r2ccld, so collectives work in place.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client.h"
#include "r2ccl.pb-c.h"
#include "util.h"

static void *unpack_reg(void *a, size_t l, const uint8_t *d)
{
	return r2ccl__mem_register_reply__unpack(a, l, d);
}

static void *unpack_result(void *a, size_t l, const uint8_t *d)
{
	return r2ccl__result__unpack(a, l, d);
}

int r2ccl_mem_alloc(r2ccl_client_t *c, size_t size, void **ptr)
{
	R2ccl__MemRegister req = R2CCL__MEM_REGISTER__INIT;
	R2ccl__MemRegisterReply *rep = NULL;
	struct r2_cmem *m;
	long pg = sysconf(_SC_PAGESIZE);
	size_t len;
	int r;

	if ((r = r2c_client_use(c)) < 0)
		return r;
	if (!ptr || size == 0)
		return r2c_fail(-EINVAL, "r2ccl_mem_alloc: %s", !ptr ? "ptr is NULL" : "size 0");
	*ptr = NULL;
	if (size > SIZE_MAX - (size_t)pg)
		return -ENOMEM;
	len = (size + (size_t)pg - 1) & ~((size_t)pg - 1);
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->fd = memfd_create("r2ccl-buf", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (m->fd < 0) {
		r = -errno;
		goto fail;
	}
	/* the pages are allocated here, charged to this process (the daemon
	 * refuses sparse memfds: docs/security.md) */
	if (ftruncate(m->fd, (off_t)len) < 0 || fallocate(m->fd, 0, 0, (off_t)len) < 0 ||
	    fcntl(m->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		r = -errno;
		goto fail;
	}
	m->addr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
	if (m->addr == MAP_FAILED) {
		m->addr = NULL;
		r = -errno;
		goto fail;
	}
	m->size = len;
	req.req_id = c->next_req++;
	req.size = len;
	r = r2c_rpc(c, R2CCL__MSG_TYPE__MSG_MEM_REGISTER, &req,
		    R2CCL__MSG_TYPE__MSG_MEM_REGISTER_REPLY, (void **)&rep, unpack_reg, &m->fd, 1,
		    NULL, 0);
	if (r < 0)
		goto fail;
	r = rep->status;
	m->id = rep->mem_id;
	if (r < 0 && rep->error && rep->error[0])
		r2c_fail(r, "%s", rep->error); /* the daemon's reason (a quota's name) */
	r2ccl__mem_register_reply__free_unpacked(rep, NULL);
	if (r < 0)
		goto fail;
	m->next = c->mem;
	c->mem = m;
	*ptr = m->addr;
	return 0;
fail:
	if (m->addr)
		munmap(m->addr, len);
	r2_closep(&m->fd);
	free(m);
	return r;
}

int r2ccl_mem_free(r2ccl_client_t *c, void *ptr)
{
	R2ccl__MemDeregister req = R2CCL__MEM_DEREGISTER__INIT;
	R2ccl__Result *rep = NULL;
	struct r2_cmem **pp, *m;
	int r;

	if ((r = r2c_client_use(c)) < 0)
		return r;
	if (!ptr)
		return 0;
	for (pp = &c->mem; *pp; pp = &(*pp)->next)
		if ((*pp)->addr == ptr)
			break;
	if (!*pp)
		return r2c_fail(R2CCL_E_BAD_BUFFER,
				"r2ccl_mem_free: %p is not a buffer of r2ccl_mem_alloc of this client "
				"(freed already?)", ptr);
	m = *pp;
	*pp = m->next;
	req.req_id = c->next_req++;
	req.mem_id = m->id;
	r = r2c_rpc(c, R2CCL__MSG_TYPE__MSG_MEM_DEREGISTER, &req, R2CCL__MSG_TYPE__MSG_RESULT,
		    (void **)&rep, unpack_result, NULL, 0, NULL, 0);
	if (r == 0) {
		r = rep->status;
		r2ccl__result__free_unpacked(rep, NULL);
	}
	if (r == R2CCL_E_DAEMON_GONE)
		r = 0; /* nothing to release on the other side */
	munmap(m->addr, m->size);
	close(m->fd);
	free(m);
	return r;
}

int r2c_mem_lookup(r2ccl_client_t *c, const void *p, uint64_t len, uint32_t *id, uint64_t *off)
{
	const char *a = p;

	for (struct r2_cmem *m = c->mem; m; m = m->next) {
		const char *base = m->addr;
		if (a < base || a >= base + m->size)
			continue;
		if (len > m->size - (size_t)(a - base))
			return r2c_fail(R2CCL_E_BAD_BUFFER,
					"%llu bytes at %p run past the end of their r2ccl_mem_alloc "
					"buffer (%zu bytes at %p)",
					(unsigned long long)len, p, m->size, m->addr);
		*id = m->id;
		*off = (uint64_t)(a - base);
		return 0;
	}
	return r2c_fail(R2CCL_E_BAD_BUFFER, "%p is not in a buffer of r2ccl_mem_alloc", p);
}
