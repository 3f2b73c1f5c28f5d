/* SPDX-License-Identifier: MIT */
/*
 * Control-socket framing (BRIEF.md decision 1).
 *
 * A frame is a fixed 16-byte header followed by a protobuf-c payload:
 *
 *   u32 magic   'R2CF' (0x46433252 little-endian)
 *   u16 type    message type (enum r2_msg_type, proto/r2ccl.proto)
 *   u16 nfds    number of file descriptors passed with SCM_RIGHTS
 *   u32 len     payload length, at most the configured maximum
 *   u32 flags   reserved, must be 0
 *
 * The fds travel in the control message of the sendmsg() that carries the
 * header. The receiver checks that exactly nfds arrived with the header; any
 * extra or missing fds, a bad magic, a length over the maximum or non-zero
 * flags make the frame invalid. Everything here is non-blocking-friendly: the
 * reader keeps partial state between calls.
 */
#ifndef R2CCL_FRAMING_H
#define R2CCL_FRAMING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define R2_FRAME_MAGIC 0x46433252u
#define R2_FRAME_HDR_SIZE 16
#define R2_FRAME_MAX_FDS 8
#define R2_FRAME_DEFAULT_MAX (1u << 20) /* R2CCL_MAX_FRAME default */

struct r2_frame_hdr {
	uint32_t magic;
	uint16_t type;
	uint16_t nfds;
	uint32_t len;
	uint32_t flags;
};

/* A received frame. Owns payload (malloc) and fds (closed by r2_frame_free
 * unless taken, i.e. set to -1 by the consumer). */
struct r2_frame {
	uint16_t type;
	uint16_t nfds;
	uint32_t len;
	uint8_t *payload;
	int fds[R2_FRAME_MAX_FDS];
};

void r2_frame_free(struct r2_frame *f); /* frees contents, accepts NULL */

/* Incremental reader for one stream socket. */
struct r2_frame_reader {
	uint32_t max_len;
	size_t got;                 /* bytes of header+payload received so far */
	uint8_t hdr[R2_FRAME_HDR_SIZE];
	struct r2_frame cur;
	int nfds_got;
};

void r2_frame_reader_init(struct r2_frame_reader *r, uint32_t max_len);
void r2_frame_reader_reset(struct r2_frame_reader *r); /* closes held fds */

/* Reads what the socket has. Returns 1 and fills *out (ownership passes) when
 * a whole frame arrived, 0 if more bytes are needed (EAGAIN), -ECONNRESET on
 * orderly close (0 bytes), -EPROTO for an invalid frame (bad magic, flags,
 * too long, fd count differs from the header), other negative errno on error. */
int r2_frame_read(int sock, struct r2_frame_reader *r, struct r2_frame *out);

/* Blocking send of a whole frame with fds (loops over partial writes, EINTR;
 * on EAGAIN polls for POLLOUT up to timeout_ms, -1 = forever). */
int r2_frame_send(int sock, uint16_t type, const void *payload, uint32_t len, const int *fds,
		  int nfds, int timeout_ms);

/* Blocking receive of one whole frame within timeout_ms (-1 forever). */
int r2_frame_recv(int sock, struct r2_frame_reader *r, struct r2_frame *out, int timeout_ms);

#endif
