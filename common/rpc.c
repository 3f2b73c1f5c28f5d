/* SPDX-License-Identifier: MIT */
/* Request/reply on the control socket (rpc.h): dial, HELLO, one exchange. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "r2ccl.h"
#include "rpc.h"

uint64_t r2_rpc_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void r2_rpc_init(struct r2_rpc *c, uint32_t max_reply, int timeout_ms)
{
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->timeout_ms = timeout_ms;
	r2_frame_reader_init(&c->rd, max_reply);
}

int r2_rpc_dial(struct r2_rpc *c, const char *path, unsigned flags)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	if ((flags & R2_RPC_SNDTIMEO) && c->timeout_ms >= 0) {
		/* A Unix-socket connect waits for a full backlog up to SO_SNDTIMEO. */
		struct timeval tv = { .tv_sec = c->timeout_ms / 1000,
				      .tv_usec = (c->timeout_ms % 1000) * 1000 };

		setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	if (flags & R2_RPC_NONBLOCK) {
		/* The framing layer waits with poll() and reads until EAGAIN. */
		r = fcntl(c->fd, F_GETFL);
		if (r < 0 || fcntl(c->fd, F_SETFL, r | O_NONBLOCK) < 0)
			return -errno;
	}
	return 0;
}

void r2_rpc_close(struct r2_rpc *c)
{
	r2_frame_reader_reset(&c->rd);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

/* How long the next send or receive may wait: -1 forever, 0 past the deadline. */
static int rpc_wait_ms(const struct r2_rpc *c)
{
	uint64_t now;

	if (!c->deadline_ms)
		return c->timeout_ms;
	now = r2_rpc_now_ms();
	return now >= c->deadline_ms ? 0 : (int)(c->deadline_ms - now);
}

/* Field 1 of a packed message when it is a varint (every request and reply
 * but HELLO's carries its req_id there); 0 if not. */
static uint64_t field1(const uint8_t *p, size_t len)
{
	uint64_t v = 0;

	if (len < 2 || p[0] != 0x08)
		return 0;
	for (size_t i = 1; i < len && i <= 10; i++) {
		v |= (uint64_t)(p[i] & 0x7f) << (7 * (i - 1));
		if (!(p[i] & 0x80))
			return v;
	}
	return 0;
}

int r2_rpc_call(struct r2_rpc *c, uint16_t type, const ProtobufCMessage *msg, const int *fds,
		int nfds, uint16_t want, struct r2_frame *f, R2ccl__Result **res)
{
	size_t len = protobuf_c_message_get_packed_size(msg);
	uint8_t *buf;
	int r;

	memset(f, 0, sizeof(*f));
	for (int i = 0; i < R2_FRAME_MAX_FDS; i++)
		f->fds[i] = -1;
	*res = NULL;
	buf = malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	protobuf_c_message_pack(msg, buf);
	uint64_t req = type == R2CCL__MSG_TYPE__MSG_HELLO ? 0 : field1(buf, len);
	r = r2_frame_send(c->fd, type, buf, (uint32_t)len, fds, nfds, rpc_wait_ms(c));
	free(buf);
	if (r < 0)
		return r;
	for (;;) {
		if (c->deadline_ms && rpc_wait_ms(c) == 0)
			return -ETIMEDOUT;
		r = r2_frame_recv(c->fd, &c->rd, f, rpc_wait_ms(c));
		if (r < 0)
			return r;
		/* the reply to an earlier request whose call gave up waiting
		 * (a timeout): not this one's */
		uint64_t got = req ? field1(f->payload, f->len) : 0;
		if (!got || got == req)
			break;
		r2_frame_free(f);
	}
	if (f->type == R2CCL__MSG_TYPE__MSG_RESULT && want != R2CCL__MSG_TYPE__MSG_RESULT) {
		*res = r2ccl__result__unpack(NULL, f->len, f->payload);
		r2_frame_free(f);
		return *res ? R2_RPC_RESULT : -EPROTO;
	}
	if (f->type != want) {
		uint16_t got = f->type;

		r2_frame_free(f);
		f->type = got;
		return R2_RPC_UNEXPECTED;
	}
	return 0;
}

void r2_rpc_hello_init(R2ccl__Hello *h, const char *client_name, bool control_only)
{
	r2ccl__hello__init(h);
	h->proto_version = R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT;
	h->client_name = (char *)client_name;
	h->lib_version = R2CCL_VERSION_STRING;
	h->control_only = control_only;
}
