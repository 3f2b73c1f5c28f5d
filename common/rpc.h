/* SPDX-License-Identifier: MIT */
/*
 * Request/reply on the control socket, shared by libr2ccl and r2cclctl:
 * connecting to r2ccld's socket, the HELLO message, and one exchange (a
 * protobuf-c request framed by framing.h, its reply frame). Library code: no
 * logging, negative errno values; the callers map them to their own
 * conventions (libr2ccl's R2CCL_E_*, r2cclctl's messages and exit codes).
 */
#ifndef R2CCL_RPC_H
#define R2CCL_RPC_H

#include <stdbool.h>
#include <stdint.h>

#include "framing.h"
#include "r2ccl.pb-c.h"

/* One connection to the daemon's control socket. */
struct r2_rpc {
	int fd;
	int timeout_ms;       /* each send and each receive; -1 waits forever */
	uint64_t deadline_ms; /* 0: none; else (CLOCK_MONOTONIC ms) bounds them all */
	struct r2_frame_reader rd;
};

/* r2_rpc_call skips a reply whose req_id (field 1) is not its request's:
 * one that came after an earlier call gave up on it. */
/* r2_rpc_dial flags */
#define R2_RPC_NONBLOCK 0x1u /* the socket non-blocking once connected */
#define R2_RPC_SNDTIMEO 0x2u /* a full backlog waits timeout_ms at most (SO_SNDTIMEO) */

/* r2_rpc_call's answers besides 0 and negative errno */
#define R2_RPC_RESULT 1     /* a RESULT came in place of the reply wanted */
#define R2_RPC_UNEXPECTED 2 /* a frame of another type came (f->type says which) */

/* Milliseconds on CLOCK_MONOTONIC. */
uint64_t r2_rpc_now_ms(void);

/* Sets c up, not connected: replies up to max_reply bytes, timeout_ms per
 * send and receive, no deadline. */
void r2_rpc_init(struct r2_rpc *c, uint32_t max_reply, int timeout_ms);

/* Connects to the Unix socket at path. 0, or a negative errno: -ENAMETOOLONG
 * for a path sockaddr_un cannot hold, else socket()'s, connect()'s or
 * fcntl()'s error (-ENOENT, -ECONNREFUSED: nothing listens there). */
int r2_rpc_dial(struct r2_rpc *c, const char *path, unsigned flags);

/* Closes the socket and drops a partial frame; accepts a closed c. */
void r2_rpc_close(struct r2_rpc *c);

/* Sends msg as a frame of type (with nfds fds) and receives the reply.
 * Returns 0 with *f a frame of type want (the caller frees it; its fds are the
 * caller's to take); R2_RPC_RESULT with *res the unpacked RESULT the daemon
 * answered in place of want (want != MSG_RESULT; the caller frees it);
 * R2_RPC_UNEXPECTED with f->type the type of another frame (nothing to free);
 * or a negative errno: the framing layer's (-ETIMEDOUT, -ECONNRESET, -EPIPE,
 * -EPROTO for a malformed frame or RESULT), -ENOMEM. */
int r2_rpc_call(struct r2_rpc *c, uint16_t type, const ProtobufCMessage *msg, const int *fds,
		int nfds, uint16_t want, struct r2_frame *f, R2ccl__Result **res);

/* Fills a HELLO of this build's protocol and version for client_name. */
void r2_rpc_hello_init(R2ccl__Hello *h, const char *client_name, bool control_only);

#endif
