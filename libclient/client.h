/* SPDX-License-Identifier: MIT */
/* libr2ccl internals. */
#ifndef R2CCL_CLIENT_H
#define R2CCL_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "r2ccl.h"
#include "ring.h"
#include "rpc.h"

struct r2_cmem {
	struct r2_cmem *next;
	void *addr;
	size_t size;
	uint32_t id;
	int fd;
};

/* Handles are checked on every call (r2c_client_use, r2c_comm_use): a live
 * one carries its LIVE magic; disconnect and destroy release everything a
 * handle owns but keep its few bytes, marked DEAD, on a list for the
 * process's lifetime, so a stale pointer is answered -EBADF instead of
 * being read after free (docs/client.md, "Lifetimes"). */
#define R2C_CLIENT_LIVE 0x52324331u /* "R2C1" */
#define R2C_CLIENT_DEAD 0x52324330u
#define R2C_COMM_LIVE 0x5232434du   /* "R2CM" */
#define R2C_COMM_DEAD 0x5232436du

struct r2ccl_client {
	uint32_t magic;
	pid_t pid;          /* the process that connected; others get R2CCL_E_FORKED */
	unsigned fork_gen;  /* r2c_fork_gen() then: a child's differs */
	struct r2ccl_comm *comms; /* live communicators, released by disconnect */
	struct r2ccl_client *tomb_next;
	struct r2_rpc rpc;  /* the control socket */
	int sq_efd, cq_efd;
	struct r2_ring_shm *ring;
	size_t ring_bytes;
	uint64_t session_id;
	uint64_t next_req;
	uint64_t next_tag;
	int timeout_ms;     /* control replies (a call may raise it for one request) */
	int op_timeout_ms;  /* the daemon's op timeout; we wait a little longer */
	bool gone;          /* the daemon closed the session */
	struct r2_cmem *mem;
	uint32_t inflight;
};

struct r2ccl_comm {
	uint32_t magic;
	const char *dead_why; /* DEAD: why the handle is no longer usable */
	struct r2ccl_comm *next; /* in client->comms, then on the dead list */
	r2ccl_client_t *client;
	uint32_t handle; /* the daemon's member handle */
	int nranks, rank;
	uint32_t nhosts; /* hosts the communicator spans (0: not told) */
	bool broken;
};

/* 0 if c may be used by this process; else -EINVAL (NULL), -EBADF (not a
 * live client: disconnected already), R2CCL_E_FORKED (connected by another
 * process). Sets the thread's last error when it fails. */
int r2c_client_use(r2ccl_client_t *c);
/* How many fork()s this process is from the one that loaded the library
 * (0 there): a client remembers it at connect (handle.c). */
unsigned r2c_fork_gen(void);
/* The same for a communicator and its client. */
int r2c_comm_use(const r2ccl_comm_t *comm);
/* Returns from the calling function when comm may not be used. */
#define R2C_COMM_USE(comm)                           \
	do {                                         \
		int r2c_use_ = r2c_comm_use(comm);   \
		if (r2c_use_ < 0)                    \
			return r2c_use_;             \
	} while (0)

/* Marks comm dead (why: for r2ccl_last_error), unlinks it from its client
 * and keeps its bytes on the dead list. */
void r2c_comm_bury(r2ccl_comm_t *comm, const char *why);
/* Buries c's communicators, marks c dead and keeps its bytes on the dead
 * list (its resources were released before). */
void r2c_client_bury(r2ccl_client_t *c);

/* The thread's last error (r2ccl_last_error): sets it to the printf-formatted
 * text and returns err, so failures read `return r2c_fail(err, ...)`. */
int r2c_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clears it (at the start of a call that may fail). */
void r2c_clear_error(void);
/* After a communicator error status from the daemon, asks the daemon why
 * (MSG_COMM_REASON) and records it; returns err. */
int r2c_comm_failed(r2ccl_comm_t *comm, int err);

/* Drops the GPU state (gpu.c) kept for c; at disconnect. */
void r2c_gpu_forget(r2ccl_client_t *c);
/* Retires comm's GPU state (gpu_comm.c) once the daemon has let comm go:
 * streams still waiting for its operations are released (-ECANCELED), and
 * its memory, registrations and events are freed once no stream can touch
 * them (at once when its streams are done, else at a later GPU call). */
void r2c_gpu_comm_forget(r2ccl_comm_t *comm);
/* A completion that a blocking call took from the queue and that is not its
 * own: a failed stream-ordered operation's releases that operation's stream
 * (its error for r2ccl_comm_get_async_error), as reap_all in gpu.c does. */
void r2c_gpu_cqe(r2ccl_client_t *c, const struct r2_cqe *e);
/* The send and receive lengths of opcode with count elements of dtype on
 * comm (root: the root, or the peer of a send/recv), after the checks every
 * entry point makes: -EINVAL, -EOVERFLOW, or comm's own error (comm.c). */
int r2c_op_lengths(r2ccl_comm_t *comm, uint32_t opcode, size_t count, r2ccl_dtype_t dtype,
		   int root, uint64_t *slen, uint64_t *rlen);
/* One stream-ordered operation of slen/rlen bytes on comm (gpu.c): 0 once
 * queued on the stream, else the error (set as the thread's last). */
int r2c_gpu_submit(r2ccl_comm_t *comm, uint32_t opcode, const void *sendbuff, uint64_t slen,
		   void *recvbuff, uint64_t rlen, size_t count, r2ccl_dtype_t dtype,
		   r2ccl_redop_t op, int root, void *stream);

/* One request/reply exchange on the control socket. reply is unpacked with
 * unpack (a protobuf-c *_unpack function) and must be freed by the caller;
 * fds that came with the reply land in rfds (up to max_rfds, -1 for none). */
int r2c_rpc(r2ccl_client_t *c, uint16_t type, const void *msg, uint16_t reply_type,
	    void **reply, void *(*unpack)(void *, size_t, const uint8_t *), const int *fds,
	    int nfds, int *rfds, int max_rfds);

/* 0 while the daemon serves c's session; R2CCL_E_DAEMON_GONE once it is
 * gone (r2ccl_client_check without the handle check). */
int r2c_client_alive(r2ccl_client_t *c);

/* Submits one SQE and waits for its completion. */
int r2c_submit_wait(r2ccl_client_t *c, struct r2_sqe *q);

/* Finds the registration holding [p, p+len); 0 or R2CCL_E_BAD_BUFFER. */
int r2c_mem_lookup(r2ccl_client_t *c, const void *p, uint64_t len, uint32_t *id, uint64_t *off);

#endif
