/* SPDX-License-Identifier: MIT */
/* libr2ccl internals. */
#ifndef R2CCL_CLIENT_H
#define R2CCL_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

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

struct r2ccl_client {
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
	r2ccl_client_t *client;
	uint32_t handle; /* the daemon's member handle */
	int nranks, rank;
	bool broken;
};

/* One request/reply exchange on the control socket. reply is unpacked with
 * unpack (a protobuf-c *_unpack function) and must be freed by the caller;
 * fds that came with the reply land in rfds (up to max_rfds, -1 for none). */
int r2c_rpc(r2ccl_client_t *c, uint16_t type, const void *msg, uint16_t reply_type,
	    void **reply, void *(*unpack)(void *, size_t, const uint8_t *), const int *fds,
	    int nfds, int *rfds, int max_rfds);

/* Submits one SQE and waits for its completion. */
int r2c_submit_wait(r2ccl_client_t *c, struct r2_sqe *q);

/* Finds the registration holding [p, p+len); 0 or R2CCL_E_BAD_BUFFER. */
int r2c_mem_lookup(r2ccl_client_t *c, const void *p, uint64_t len, uint32_t *id, uint64_t *off);

#endif
