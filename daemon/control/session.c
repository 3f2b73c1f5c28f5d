/* SPDX-License-Identifier: MIT */
/*
 * Client sessions: identity, the control frames (every one untrusted), the
 * shared ring handed to the client, and a bounded queue of replies for
 * clients that read slowly.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "control/control.h"
#include "engine/comm.h"
#include "engine/source.h"
#include "config.h"
#include "base/daemon.h"
#include "gpu/gpu.h"
#include "gpu_abi.h"
#include "net/tenants.h"
#include "gpu/owner.h"
#include "log.h"
#include "r2ccl.pb-c.h"
#include "util.h"

static void session_free(struct r2_session *s)
{
	struct r2_outbuf *o, *next;

	r2d_mem_release_all(s);
	if (s->ring)
		munmap(s->ring, sizeof(*s->ring));
	r2_closep(&s->ring_fd);
	r2_closep(&s->sq_efd);
	r2_closep(&s->cq_efd);
	r2_closep(&s->pidfd);
	for (o = s->outq_head; o; o = next) {
		next = o->next;
		for (int i = 0; i < o->nfds; i++)
			close(o->fds[i]);
		free(o);
	}
	r2_frame_reader_reset(&s->reader);
	pthread_mutex_destroy(&s->cq_lock);
	free(s);
}

void r2d_session_get(struct r2_session *s)
{
	atomic_fetch_add(&s->refs, 1);
}

void r2d_session_put(struct r2_session *s)
{
	if (s && atomic_fetch_sub(&s->refs, 1) == 1)
		session_free(s);
}

void r2d_session_complete(struct r2_session *s, uint64_t tag, int status)
{
	struct r2_ring_shm *ring = s->ring;
	uint64_t one = 1;
	uint32_t tail;

	if (!ring || s->dead)
		return;
	pthread_mutex_lock(&s->cq_lock);
	tail = atomic_load_explicit(&ring->cq_tail, memory_order_relaxed);
	/* The client consumes in order; it cannot have more than R2_RING_ENTRIES
	 * operations outstanding (it checks before submitting), so the CQ never
	 * overflows for a well-behaved client. A client that lies only loses its
	 * own completions. */
	ring->cq[tail & (R2_RING_ENTRIES - 1)].tag = tag;
	ring->cq[tail & (R2_RING_ENTRIES - 1)].status = status;
	ring->cq[tail & (R2_RING_ENTRIES - 1)].reserved = 0;
	atomic_store(&ring->cq_tail, tail + 1);
	pthread_mutex_unlock(&s->cq_lock);
	/* a client still polling its CQ needs no wake-up (ring.h) */
	if (!atomic_load(&ring->client_waiting))
		return;
	if (write(s->cq_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_debug("session %llu: completion signal: %s", (unsigned long long)s->id,
			  strerror(errno));
}

/* ---- outgoing frames ---- */

static void on_session_io(uv_poll_t *h, int status, int events);

static void set_poll(struct r2_session *s);

/* The tick (server.c): closes sessions that did not say hello in time and
 * reads throttled ones again once their window passed. Loop thread. */
void r2d_sessions_tick(struct r2d *d, uint64_t now)
{
	struct r2_session *s, *next;
	uint64_t deadline = (uint64_t)d->caps.hello_timeout_ms * 1000;

	for (s = d->sessions; s; s = next) {
		next = s->next;
		if (s->closing)
			continue;
		if (!s->hello_done && now - s->connected_at_us > deadline) {
			log_warn_rl("session %llu (pid %d uid %u): no hello within %u ms; closing",
				    (unsigned long long)s->id, (int)s->pid, (unsigned)s->uid,
				    d->caps.hello_timeout_ms);
			r2d_session_close(s, "no hello in time (hello_timeout_ms)");
			continue;
		}
		if (s->throttled_until_us && now >= s->throttled_until_us) {
			s->throttled_until_us = 0;
			set_poll(s);
		}
	}
}

/* A throttled session (max_req_rate) is not watched for its hang-up either:
 * a client that closes while throttled would report it on every turn of the
 * loop (level-triggered) and spin the loop thread until the tick reads it
 * again (found 2026-12-05: 13 us turns for up to 100 ms). */
static void set_poll(struct r2_session *s)
{
	int ev = s->throttled_until_us ? 0 : UV_READABLE | UV_DISCONNECT;

	if (s->closing)
		return;
	if (s->outq_head)
		ev |= UV_WRITABLE;
	if (ev != s->poll_events) {
		if (ev)
			uv_poll_start(&s->poll, ev, on_session_io);
		else
			uv_poll_stop(&s->poll);
		s->poll_events = ev;
	}
}

/* Writes queued frames; returns 0, or negative errno when the socket failed. */
static int flush_outq(struct r2_session *s)
{
	while (s->outq_head) {
		struct r2_outbuf *o = s->outq_head;
		struct iovec iov = { o->data + o->off, o->len - o->off };
		union {
			char buf[CMSG_SPACE(sizeof(int) * R2_FRAME_MAX_FDS)];
			struct cmsghdr align;
		} cbuf;
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n;

		if (o->nfds && o->off == 0) {
			struct cmsghdr *cm;
			memset(&cbuf, 0, sizeof(cbuf));
			mh.msg_control = cbuf.buf;
			mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)o->nfds);
			cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)o->nfds);
			memcpy(CMSG_DATA(cm), o->fds, sizeof(int) * (size_t)o->nfds);
		}
		n = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			return -errno;
		}
		if (o->nfds && o->off == 0) {
			for (int i = 0; i < o->nfds; i++)
				close(o->fds[i]);
			o->nfds = 0;
		}
		o->off += (size_t)n;
		s->outq_bytes -= (size_t)n;
		if (o->off == o->len) {
			s->outq_head = o->next;
			if (!s->outq_head)
				s->outq_tail = NULL;
			free(o);
		}
	}
	return 0;
}

/* Queues one frame; fds are duplicated (the caller keeps its own). */
int r2d_session_send(struct r2_session *s, uint16_t type, const void *payload, size_t len,
		     const int *fds, int nfds)
{
	struct r2_outbuf *o;
	struct r2_frame_hdr hdr = { R2_FRAME_MAGIC, type, (uint16_t)nfds, (uint32_t)len, 0 };
	int r;

	if (s->closing)
		return -ECONNRESET;
	if (s->outq_bytes + len > (size_t)r2_param_int(&s->d->params, P_MAX_OUTQ)) {
		r2d_session_close(s, "client does not read its replies (queue full)");
		return -ENOBUFS;
	}
	o = malloc(sizeof(*o) + R2_FRAME_HDR_SIZE + len);
	if (!o)
		return -ENOMEM;
	o->next = NULL;
	o->len = R2_FRAME_HDR_SIZE + len;
	o->off = 0;
	o->nfds = 0;
	memcpy(o->data, &hdr, R2_FRAME_HDR_SIZE);
	if (len)
		memcpy(o->data + R2_FRAME_HDR_SIZE, payload, len);
	for (int i = 0; i < nfds; i++) {
		o->fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
		if (o->fds[i] < 0) {
			r = -errno;
			for (int j = 0; j < i; j++)
				close(o->fds[j]);
			free(o);
			return r;
		}
		o->nfds++;
	}
	if (s->outq_tail)
		s->outq_tail->next = o;
	else
		s->outq_head = o;
	s->outq_tail = o;
	s->outq_bytes += o->len;
	r = flush_outq(s);
	if (r < 0) {
		r2d_session_close(s, "write failed");
		return r;
	}
	set_poll(s);
	return 0;
}

int r2d_session_reply(struct r2_session *s, uint16_t type, const void *msg)
{
	const ProtobufCMessage *m = msg;
	size_t len = protobuf_c_message_get_packed_size(m);
	uint8_t stackbuf[512], *buf = len <= sizeof(stackbuf) ? stackbuf : malloc(len);
	int r;

	if (!buf)
		return -ENOMEM;
	protobuf_c_message_pack(m, buf);
	r = r2d_session_send(s, type, buf, len, NULL, 0);
	if (buf != stackbuf)
		free(buf);
	return r;
}

static void reply_result(struct r2_session *s, uint64_t req_id, int status, const char *error)
{
	R2ccl__Result res = R2CCL__RESULT__INIT;

	res.req_id = req_id;
	res.status = status;
	res.error = (char *)(error ? error : "");
	r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_RESULT, &res);
}

/* ---- identity ---- */

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* The cgroup v2 path of pid ("0::/path" of /proc/PID/cgroup, which names it
 * relative to the v2 hierarchy's root wherever that is mounted: /sys/fs/cgroup,
 * or /sys/fs/cgroup/unified on hybrid hosts). 1, or 0: none (no v2
 * hierarchy), -ENAMETOOLONG: a path of outlen characters or more. */
static int cgroup_v2_of(pid_t pid, char *out, size_t outlen)
{
	char path[64], *line = NULL;
	size_t cap = 0;
	int found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (getline(&line, &cap, f) > 0) {
		if (strncmp(line, "0::", 3))
			continue;
		line[strcspn(line, "\n")] = 0;
		if (line[3] == '/' && strlen(line + 3) < outlen) {
			memcpy(out, line + 3, strlen(line + 3) + 1);
			found = 1;
		} else if (line[3] == '/') {
			found = -ENAMETOOLONG;
		}
		break;
	}
	free(line);
	fclose(f);
	return found;
}

/* The tenant of s: its cgroup v2 path, read while its pidfd shows the same
 * process alive (so the pid was not reused under us); "uid:N" when there
 * is no v2 hierarchy or the process cannot be pinned. Read at accept and
 * again at hello (the one that counts). */
static int read_tenant(struct r2_session *s)
{
	char cg[sizeof(s->tenant)];
	int r;

	snprintf(s->tenant, sizeof(s->tenant), "uid:%u", (unsigned)s->uid);
	if (s->pidfd < 0)
		return 0;
	r = cgroup_v2_of(s->pid, cg, sizeof(cg));
	if (r <= 0 || r2_gpu_pidfd_alive(s->pidfd) != 1)
		return r < 0 ? r : 0;
	memcpy(s->tenant, cg, sizeof(cg));
	return 0;
}

/* Pins the connecting process (s->pidfd) and reads its pid as it sees it
 * (s->nspid), for the owner check of legacy CUDA IPC handles (gpu/owner.h).
 * SO_PEERPIDFD names the process that connected, whatever happened since.
 * Before Linux 6.5, pidfd_open(s->pid): wrong only if that process exited
 * between its connect and this accept and its pid was given to another
 * (docs/security.md says so). Either way the pidfd then tells whether the
 * pid is still that process's when a handle is checked. */
static void pin_peer(struct r2_session *s)
{
	socklen_t len = sizeof(int);
	char path[64], buf[4096];
	ssize_t n;
	int fd;

	if (getsockopt(s->fd, SOL_SOCKET, SO_PEERPIDFD, &s->pidfd, &len) < 0 || s->pidfd < 0) {
		s->pidfd = -1;
		if (s->pid > 0)
			s->pidfd = (int)syscall(SYS_pidfd_open, s->pid, 0);
		if (s->pidfd < 0) {
			s->pidfd = -1;
			return;
		}
	}
	snprintf(path, sizeof(path), "/proc/%d/status", (int)s->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	/* read before the liveness check: a status read from a pid reused
	 * after the pidfd's process exited is caught by the check */
	if (n <= 0 || (buf[n] = 0, r2_gpu_status_nspid(buf, &s->nspid) < 0) ||
	    r2_gpu_pidfd_alive(s->pidfd) != 1) {
		r2_closep(&s->pidfd);
		s->nspid = 0;
		return;
	}
	s->nslevels = r2_gpu_status_nslevels(buf);
}

/* ---- the ring ---- */

static int setup_ring(struct r2_session *s)
{
	s->ring_fd = memfd_create("r2ccl-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (s->ring_fd < 0)
		return -errno;
	if (ftruncate(s->ring_fd, sizeof(*s->ring)) < 0)
		return -errno;
	fcntl(s->ring_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	s->ring = mmap(NULL, sizeof(*s->ring), PROT_READ | PROT_WRITE, MAP_SHARED, s->ring_fd, 0);
	if (s->ring == MAP_FAILED) {
		s->ring = NULL;
		return -errno;
	}
	memset(s->ring, 0, sizeof(*s->ring));
	s->ring->magic = R2_RING_MAGIC;
	s->ring->entries = R2_RING_ENTRIES;
	s->sq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->cq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->sq_efd < 0 || s->cq_efd < 0)
		return -errno;
	return 0;
}

/* ---- requests ---- */

/* max_sessions_per_uid, counted over the sessions past hello (root is not
 * capped: r2cclctl must get in). */
static int session_quota(struct r2_session *s, char *err, size_t errlen)
{
	struct r2_tenant_policy pol;
	uint32_t n = 0, nt = 0;

	if (s->uid == 0)
		return 0;
	if (!r2d_tenants_policy_at(s->d, s->tenant_idx, &pol))
		pol.max_sessions = 0;
	pthread_mutex_lock(&s->d->lock);
	for (struct r2_session *o = s->d->sessions; o; o = o->next) {
		bool live = o != s && o->hello_done && !o->closing;
		n += live && o->uid == s->uid;
		/* r2cclctl's control-only sessions are not a tenant's */
		nt += live && o->uid && !o->control_only && o->tenant_idx == s->tenant_idx;
	}
	if (n >= s->d->caps.sessions_per_uid)
		snprintf(err, errlen, "quota max_sessions_per_uid: uid %u has %u sessions",
			 (unsigned)s->uid, n);
	else if (pol.max_sessions && !s->control_only && nt >= pol.max_sessions)
		snprintf(err, errlen, "quota max_sessions of tenant %s: it has %u sessions",
			 pol.name, nt);
	else
		err[0] = 0;
	if (err[0])
		s->d->quota_refusals++;
	pthread_mutex_unlock(&s->d->lock);
	return err[0] ? R2CCL_E_QUOTA : 0;
}

static int handle_hello(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__Hello *m = r2ccl__hello__unpack(NULL, f->len, f->payload);
	R2ccl__HelloReply rep = R2CCL__HELLO_REPLY__INIT;
	char err[160] = "";
	int fds[3], r = 0;

	if (!m)
		return -EPROTO;
	rep.proto_version = R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT;
	rep.daemon_version = R2CCL_VERSION;
	if (m->proto_version != R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT) {
		snprintf(err, sizeof(err),
			 "protocol version %u is not supported (this daemon speaks %d)",
			 m->proto_version, R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT);
		log_warn_rl("session %llu (pid %d): %s", (unsigned long long)s->id, (int)s->pid, err);
		rep.status = R2CCL_E_PROTO_VERSION;
		rep.error = err;
		r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_HELLO_REPLY, &rep);
		r2ccl__hello__free_unpacked(m, NULL);
		r2d_session_close(s, "unsupported protocol version");
		return 0;
	}
	snprintf(s->name, sizeof(s->name), "%s", m->client_name ? m->client_name : "");
	for (char *p = s->name; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == '"' || *p == '\\')
			*p = '?';
	s->control_only = m->control_only;
	r2ccl__hello__free_unpacked(m, NULL);
	/* where it is now: its tenant from here on. A cgroup path too long to
	 * keep is refused: as "uid:N" it would leave its tenant's caps */
	if (read_tenant(s) < 0) {
		snprintf(err, sizeof(err), "the client's cgroup path is %zu characters or longer: "
			 "r2ccld cannot tell its tenant", sizeof(s->tenant));
		log_warn_rl("session %llu (pid %d uid %u): refused: %s", (unsigned long long)s->id,
			    (int)s->pid, (unsigned)s->uid, err);
		rep.status = -ENAMETOOLONG;
		rep.error = err;
		r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_HELLO_REPLY, &rep);
		r2d_session_close(s, err);
		return 0;
	}
	/* r2cclctl (control only) makes no tenant of its own cgroup */
	s->tenant_idx = s->control_only ? r2d_tenants_find(s->d, s->tenant)
					: r2d_tenants_of(s->d, s->tenant);
	if (session_quota(s, err, sizeof(err)) < 0) {
		log_warn_rl("session %llu (pid %d uid %u): refused: %s", (unsigned long long)s->id,
			    (int)s->pid, (unsigned)s->uid, err);
		rep.status = R2CCL_E_QUOTA;
		rep.error = err;
		r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_HELLO_REPLY, &rep);
		r2d_session_close(s, err);
		return 0;
	}
	if (s->d->draining) {
		rep.status = R2CCL_E_SHUTDOWN;
		rep.error = "the daemon is shutting down";
		r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_HELLO_REPLY, &rep);
		return -ESHUTDOWN;
	}
	if (!s->control_only) {
		r = setup_ring(s);
		if (r == 0)
			r = r2d_engine_add_session(s->d, s);
		if (r < 0) {
			rep.status = r;
			rep.error = "cannot create the submission ring";
			r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_HELLO_REPLY, &rep);
			return r;
		}
	}
	rep.session_id = s->id;
	rep.ring_entries = R2_RING_ENTRIES;
	rep.ring_bytes = sizeof(struct r2_ring_shm);
	rep.op_timeout_ms = (uint32_t)r2_param_int(&s->d->params, P_OP_TIMEOUT_MS);
	s->hello_done = true;
	s->reader.max_len = (uint32_t)r2_param_int(&s->d->params, P_MAX_FRAME);
	log_info("session %llu: pid %d uid %u tenant %s name '%s'%s", (unsigned long long)s->id,
		 (int)s->pid, (unsigned)s->uid, s->tenant, s->name,
		 s->control_only ? " (control)" : "");
	if (s->control_only)
		return r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_HELLO_REPLY, &rep);
	fds[0] = s->ring_fd;
	fds[1] = s->sq_efd;
	fds[2] = s->cq_efd;
	{
		size_t len = r2ccl__hello_reply__get_packed_size(&rep);
		uint8_t buf[256];
		if (len > sizeof(buf))
			return -EOVERFLOW;
		r2ccl__hello_reply__pack(&rep, buf);
		return r2d_session_send(s, R2CCL__MSG_TYPE__MSG_HELLO_REPLY, buf, len, fds, 3);
	}
}

/* The answer to a (GPU) memory registration; a refusal is logged. */
static int mem_register_reply(struct r2_session *s, uint64_t req_id, int r, char *err,
			      uint32_t id, const char *what)
{
	R2ccl__MemRegisterReply rep = R2CCL__MEM_REGISTER_REPLY__INIT;

	if (r < 0)
		log_warn_rl("session %llu: %smemory registration refused: %s",
			    (unsigned long long)s->id, what, err);
	rep.req_id = req_id;
	rep.status = r;
	rep.error = err;
	rep.mem_id = id;
	r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_MEM_REGISTER_REPLY, &rep);
	return 0;
}

static int handle_mem_register(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__MemRegister *m = r2ccl__mem_register__unpack(NULL, f->len, f->payload);
	char err[256] = "";
	uint32_t id = 0;
	int r;

	if (!m)
		return -EPROTO;
	if (s->control_only) {
		r2ccl__mem_register__free_unpacked(m, NULL);
		return -EPROTO;
	}
	pthread_mutex_lock(&s->d->lock);
	r = r2d_mem_register(s, f->fds[0], m->size, &id, err, sizeof(err));
	pthread_mutex_unlock(&s->d->lock);
	if (r == 0)
		f->fds[0] = -1; /* taken */
	uint64_t req_id = m->req_id;
	r2ccl__mem_register__free_unpacked(m, NULL);
	return mem_register_reply(s, req_id, r, err, id, "");
}

static int handle_mem_deregister(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__MemDeregister *m = r2ccl__mem_deregister__unpack(NULL, f->len, f->payload);
	int r;

	if (!m)
		return -EPROTO;
	pthread_mutex_lock(&s->d->lock);
	r = r2d_mem_deregister(s, m->mem_id);
	pthread_mutex_unlock(&s->d->lock);
	reply_result(s, m->req_id, r, r ? "no such memory registration" : "");
	r2ccl__mem_deregister__free_unpacked(m, NULL);
	return 0;
}

/* MSG_MEM_REGISTER_GPU (IPC handle, no fd) and _GPU_FD: a cuMem fd, or an
 * IPC handle with the GPU's device file (gpu_legacy_ipc=gpu-access). */
static int handle_mem_register_gpu(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__MemRegisterGpu *m = r2ccl__mem_register_gpu__unpack(NULL, f->len, f->payload);
	struct r2_gpu_reg_req req;
	char err[512] = "";
	uint32_t id = 0;
	int r;

	if (!m)
		return -EPROTO;
	if (s->control_only) {
		r2ccl__mem_register_gpu__free_unpacked(m, NULL);
		return -EPROTO;
	}
	memset(&req, 0, sizeof(req));
	req.kind = m->kind;
	req.ipc_handle = m->ipc_handle.data;
	req.ipc_handle_len = m->ipc_handle.len;
	req.uuid = m->device_uuid.data;
	req.uuid_len = m->device_uuid.len;
	req.alloc_base = m->alloc_base;
	req.alloc_size = m->alloc_size;
	req.offset = m->offset;
	req.size = m->size;
	req.fd = f->nfds && m->kind == R2_GPU_MEM_CUMEM_FD ? f->fds[0] : -1;
	req.dev_fd = f->nfds && m->kind == R2_GPU_MEM_IPC ? f->fds[0] : -1;
	if (f->type != R2CCL__MSG_TYPE__MSG_MEM_REGISTER_GPU_FD &&
	    m->kind == R2_GPU_MEM_CUMEM_FD) {
		snprintf(err, sizeof(err), "GPU memory kind %u does not fit message type %u",
			 m->kind, f->type);
		r = -EINVAL;
	} else {
		pthread_mutex_lock(&s->d->lock);
		r = r2d_mem_register_gpu(s, &req, &id, err, sizeof(err));
		pthread_mutex_unlock(&s->d->lock);
	}
	if (r == 0 && req.fd >= 0)
		f->fds[0] = -1; /* taken; a device file is closed with the frame */
	uint64_t req_id = m->req_id;
	r2ccl__mem_register_gpu__free_unpacked(m, NULL);
	return mem_register_reply(s, req_id, r, err, id, "GPU ");
}

static int handle_unique_id(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__GetUniqueId *m = r2ccl__get_unique_id__unpack(NULL, f->len, f->payload);
	R2ccl__UniqueIdReply rep = R2CCL__UNIQUE_ID_REPLY__INIT;
	struct r2_uid uid;

	if (!m)
		return -EPROTO;
	memset(&uid, 0, sizeof(uid));
	uid.magic = R2_UID_MAGIC;
	uid.version = 1;
	uid.host_id = s->d->host_id;
	if (getrandom(&uid.nonce, sizeof(uid.nonce), 0) != sizeof(uid.nonce))
		uid.nonce = r2_now_ns() ^ ((uint64_t)s->id << 40);
	r2d_uid_fill(s->d, &uid); /* every rail address of this (the root) daemon */
	rep.req_id = m->req_id;
	rep.id.data = (uint8_t *)&uid;
	rep.id.len = sizeof(uid);
	r2ccl__get_unique_id__free_unpacked(m, NULL);
	r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_UNIQUE_ID_REPLY, &rep);
	return 0;
}

static int handle_comm_init(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__CommInit *m = r2ccl__comm_init__unpack(NULL, f->len, f->payload);

	if (!m)
		return -EPROTO;
	if (s->control_only) {
		r2ccl__comm_init__free_unpacked(m, NULL);
		return -EPROTO;
	}
	r2d_comm_handle_init(s, m);
	r2ccl__comm_init__free_unpacked(m, NULL);
	return 0;
}

static int handle_comm_destroy(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__CommDestroy *m = r2ccl__comm_destroy__unpack(NULL, f->len, f->payload);

	if (!m)
		return -EPROTO;
	r2d_comm_handle_destroy(s, m->req_id, m->comm_id, m->abort);
	r2ccl__comm_destroy__free_unpacked(m, NULL);
	return 0;
}

static int handle_comm_reason(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__CommReason *m = r2ccl__comm_reason__unpack(NULL, f->len, f->payload);

	if (!m)
		return -EPROTO;
	r2d_comm_handle_reason(s, m->req_id, m->comm_id);
	r2ccl__comm_reason__free_unpacked(m, NULL);
	return 0;
}

static int handle_status(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__StatusRequest *m = r2ccl__status_request__unpack(NULL, f->len, f->payload);

	if (!m)
		return -EPROTO;
	r2d_ctl_status(s, m->req_id);
	r2ccl__status_request__free_unpacked(m, NULL);
	return 0;
}

__attribute__((unused)) static int handle_not_supported(struct r2_session *s,
						     struct r2_frame *f)
{
	/* Known requests this daemon does not serve yet: answer, do not drop. */
	reply_result(s, 0, -EOPNOTSUPP, "not supported by this daemon");
	return 0;
}

struct handler {
	int (*fn)(struct r2_session *s, struct r2_frame *f);
	int nfds;         /* exact number of fds the frame must carry */
	bool before_hello;
};

static const struct handler handlers[] = {
	[R2CCL__MSG_TYPE__MSG_HELLO] = { handle_hello, 0, true },
	[R2CCL__MSG_TYPE__MSG_GET_UNIQUE_ID] = { handle_unique_id, 0, false },
	[R2CCL__MSG_TYPE__MSG_COMM_INIT] = { handle_comm_init, 0, false },
	[R2CCL__MSG_TYPE__MSG_COMM_DESTROY] = { handle_comm_destroy, 0, false },
	[R2CCL__MSG_TYPE__MSG_MEM_REGISTER] = { handle_mem_register, 1, false },
	[R2CCL__MSG_TYPE__MSG_MEM_DEREGISTER] = { handle_mem_deregister, 0, false },
	[R2CCL__MSG_TYPE__MSG_STATUS] = { handle_status, 0, false },
	[R2CCL__MSG_TYPE__MSG_REBALANCE] = { r2d_ctl_rebalance, 0, false },
	[R2CCL__MSG_TYPE__MSG_NIC_ADMIN] = { r2d_ctl_nic_admin, 0, false },
	[R2CCL__MSG_TYPE__MSG_RAILS] = { r2d_ctl_rails, 0, false },
	[R2CCL__MSG_TYPE__MSG_EVENTS] = { r2d_ctl_events, 0, false },
	[R2CCL__MSG_TYPE__MSG_MEM_REGISTER_GPU] = { handle_mem_register_gpu, 0, false },
	[R2CCL__MSG_TYPE__MSG_MEM_REGISTER_GPU_FD] = { handle_mem_register_gpu, 1, false },
	[R2CCL__MSG_TYPE__MSG_COMM_REASON] = { handle_comm_reason, 0, false },
	[R2CCL__MSG_TYPE__MSG_TENANTS] = { r2d_ctl_tenants, 0, false },
	[R2CCL__MSG_TYPE__MSG_TENANT_SET] = { r2d_ctl_tenant_set, 0, false },
};

static int dispatch(struct r2_session *s, struct r2_frame *f)
{
	const struct handler *h;

	if (f->type >= R2_ARRAY_SIZE(handlers) || !handlers[f->type].fn) {
		log_warn_rl("session %llu (pid %d): unknown message type %u; dropping the session",
			 (unsigned long long)s->id, (int)s->pid, f->type);
		return -EPROTO;
	}
	h = &handlers[f->type];
	if (!s->hello_done && !h->before_hello) {
		log_warn_rl("session %llu (pid %d): message type %u before the handshake; dropping",
			 (unsigned long long)s->id, (int)s->pid, f->type);
		return -EPROTO;
	}
	if (s->hello_done && f->type == R2CCL__MSG_TYPE__MSG_HELLO) {
		log_warn_rl("session %llu: second handshake; dropping", (unsigned long long)s->id);
		return -EPROTO;
	}
	if (f->nfds != h->nfds) {
		log_warn_rl("session %llu (pid %d): message type %u carries %u file descriptors, "
			 "expected %d; dropping the session",
			 (unsigned long long)s->id, (int)s->pid, f->type, f->nfds, h->nfds);
		return -EPROTO;
	}
	return h->fn(s, f);
}

/* max_req_rate: a session that used up its 100 ms window (or whose tenant
 * used up its max_req_rate's, net/tenants.h) is not read until
 * the next one (it is slowed, not refused: a burst of a correct job loses
 * nothing). Its requests wait in the socket buffer, then in the client. */
static bool over_rate(struct r2_session *s)
{
	uint64_t now = r2_now_us();
	uint32_t per_window = R2_MAX(1, s->d->caps.req_rate / 10);

	if (now - s->req_window_us >= 100000) {
		s->req_window_us = now;
		s->req_count = 0;
	}
	if (s->req_count++ < per_window) {
		uint64_t until = 0;
		uint32_t rate = 0;
		/* the tenant's own, all its sessions together (root's not) */
		if (!s->uid || !s->hello_done ||
		    r2d_tenants_req(s->d, s->tenant_idx, now, &s->treq, &until, &rate))
			return false;
		if (!s->throttled_until_us)
			log_warn_rl("session %llu (pid %d uid %u): its tenant is over its quota "
				    "max_req_rate (%u/s); reading its sessions more slowly",
				    (unsigned long long)s->id, (int)s->pid, (unsigned)s->uid, rate);
		s->req_count--;
		s->throttled_until_us = until;
		set_poll(s);
		return true;
	}
	if (!s->throttled_until_us)
		log_warn_rl("session %llu (pid %d uid %u): over max_req_rate (%u/s); reading it "
			    "more slowly",
			    (unsigned long long)s->id, (int)s->pid, (unsigned)s->uid,
			    s->d->caps.req_rate);
	s->req_count--;
	s->throttled_until_us = s->req_window_us + 100000;
	set_poll(s);
	return true;
}

/* The check found room but the read no request: nothing to count. */
static void rate_refund(struct r2_session *s)
{
	if (s->req_count)
		s->req_count--;
	r2d_tenants_req_refund(s->d, s->tenant_idx, &s->treq);
}

static void on_session_io(uv_poll_t *h, int status, int events)
{
	struct r2_session *s = h->data;
	int r;

	if (s->closing)
		return;
	if (status < 0) {
		r2d_session_close(s, uv_strerror(status));
		return;
	}
	if (events & UV_WRITABLE) {
		r = flush_outq(s);
		if (r < 0) {
			r2d_session_close(s, "write failed");
			return;
		}
		set_poll(s);
	}
	if (!(events & (UV_READABLE | UV_DISCONNECT)))
		return;
	for (int i = 0; i < 32 && !s->closing; i++) {
		struct r2_frame f;

		/* a hang-up is read at once: its session's slots and memory go
		 * back now, not when a busy tenant's window lets it (what the
		 * socket still holds is bounded by its buffer) */
		if (!(events & UV_DISCONNECT) && over_rate(s))
			return;
		r = r2_frame_read(s->fd, &s->reader, &f);
		if (r == 0) {
			rate_refund(s);
			return;
		}
		if (r < 0) {
			if (r == -ECONNRESET && s->reader.got == 0) {
				r2d_session_close(s, "client disconnected");
			} else if (r == -ECONNRESET) {
				log_warn_rl("session %llu (pid %d): connection closed inside a frame "
					 "(truncated frame)",
					 (unsigned long long)s->id, (int)s->pid);
				r2d_session_close(s, "truncated frame");
			} else if (r == -EPROTO) {
				log_warn_rl("session %llu (pid %d): invalid frame (bad magic, flags, "
					 "length over %u bytes, or fd count differs from the "
					 "header); dropping the session",
					 (unsigned long long)s->id, (int)s->pid, s->reader.max_len);
				r2d_session_close(s, "invalid frame");
			} else {
				r2d_session_close(s, strerror(-r));
			}
			return;
		}
		r = dispatch(s, &f);
		r2_frame_free(&f);
		if (r == -EPROTO && !s->closing) {
			/* garbage protobuf or a wrong message: the handler said why
			 * unless unpacking failed */
			log_warn_rl("session %llu (pid %d): malformed request; dropping the session",
				 (unsigned long long)s->id, (int)s->pid);
			r2d_session_close(s, "protocol error");
			return;
		}
		if (r < 0 && !s->closing) {
			r2d_session_close(s, strerror(-r));
			return;
		}
	}
}

static void on_closed(uv_handle_t *h)
{
	struct r2_session *s = h->data;
	struct r2d *d = s->d;
	struct r2_session **pp;

	r2d_engine_remove_session(d, s);
	pthread_mutex_lock(&d->lock);
	s->dead = true;
	r2d_comm_session_gone(d, s);
	for (pp = &d->sessions; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	d->nsessions--;
	pthread_mutex_unlock(&d->lock);
	r2_closep(&s->fd);
	r2d_session_put(s);
}

void r2d_session_close(struct r2_session *s, const char *why)
{
	if (s->closing)
		return;
	s->closing = true;
	log_info("session %llu (pid %d): closed: %s", (unsigned long long)s->id, (int)s->pid,
		 why);
	/* best effort: a final reply (e.g. a version error) may still be queued */
	flush_outq(s);
	uv_poll_stop(&s->poll);
	uv_close((uv_handle_t *)&s->poll, on_closed);
}

/* What the engine calls for a session's submissions (engine/source.h). */
static const struct r2_source_ops session_src = {
	.complete = r2d_session_complete,
	.reply = r2d_session_reply,
	.get = r2d_session_get,
	.put = r2d_session_put,
	.mem_resolve = r2d_mem_resolve,
	.mem_put = r2d_mem_put,
};

/* Whether a new connection of uid would pass the pre-hello caps: per uid,
 * and overall with the last prehello_root slots kept for root (r2cclctl of
 * the operator gets in while others hold connections open). Under d->lock. */
static bool prehello_full(struct r2d *d, uid_t uid)
{
	uint32_t all = 0, mine = 0;

	for (struct r2_session *o = d->sessions; o; o = o->next) {
		if (o->hello_done || o->closing)
			continue;
		all++;
		mine += o->uid == uid;
	}
	if (uid == 0)
		return all >= d->caps.prehello;
	return mine >= d->caps.prehello_per_uid ||
	       all + d->caps.prehello_root >= d->caps.prehello;
}

void r2d_session_accept(struct r2d *d, int fd)
{
	struct r2_session *s = calloc(1, sizeof(*s));
	struct ucred cred;
	socklen_t cl = sizeof(cred);

	if (!s) {
		close(fd);
		return;
	}
	s->d = d;
	s->src = &session_src;
	s->fd = fd;
	s->ring_fd = s->sq_efd = s->cq_efd = s->pidfd = -1;
	atomic_init(&s->refs, 1);
	pthread_mutex_init(&s->cq_lock, NULL);
	/* a few KiB until hello: an announced length is allocated when read */
	r2_frame_reader_init(&s->reader, d->caps.prehello_frame);
	s->next_mem_id = 1;
	s->connected_at_us = r2_now_us();
	s->pidfd = -1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) {
		s->pid = cred.pid;
		s->uid = cred.uid;
		s->gid = cred.gid;
	}
	pin_peer(s); /* s->pidfd, s->nspid */
	read_tenant(s);
	pthread_mutex_lock(&d->lock);
	if (prehello_full(d, s->uid)) {
		d->quota_refusals++;
		pthread_mutex_unlock(&d->lock);
		log_warn_rl("refusing a connection of pid %d uid %u: too many connections "
			    "without hello (max_prehello %u, max_prehello_per_uid %u)",
			    (int)s->pid, (unsigned)s->uid, d->caps.prehello,
			    d->caps.prehello_per_uid);
		close(fd);
		r2_closep(&s->pidfd);
		pthread_mutex_destroy(&s->cq_lock);
		r2_frame_reader_reset(&s->reader);
		free(s);
		return;
	}
	s->id = d->next_session_id++;
	s->next = d->sessions;
	d->sessions = s;
	d->nsessions++;
	pthread_mutex_unlock(&d->lock);
	uv_poll_init(d->loop, &s->poll, fd);
	s->poll.data = s;
	set_poll(s);
	log_debug("session %llu: connected (pid %d uid %u)", (unsigned long long)s->id,
		  (int)s->pid, (unsigned)s->uid);
}
