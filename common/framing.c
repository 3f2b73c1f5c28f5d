// SPDX-License-Identifier: MIT
/*
 * Control-socket framing: see framing.h for the wire format.
 *
 * Receiving: every recvmsg() has room for R2_FRAME_MAX_FDS + 1 descriptors,
 * so that "more than the maximum" is seen, and never reads past the end of
 * the current frame, so the descriptors of the next frame (attached by the
 * kernel to the first byte of its header) are never picked up early.
 * Descriptors are only accepted with the first byte of a header; any that
 * arrive at another point, or with a frame that turns out to be invalid, are
 * closed before -EPROTO is returned. All reads use MSG_DONTWAIT, so
 * r2_frame_read() never blocks even on a blocking socket.
 */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "framing.h"
#include "util.h"

#define RX_FDS_ROOM (R2_FRAME_MAX_FDS + 1)

union r2_cmsg_rx {
	struct cmsghdr hdr;
	char buf[CMSG_SPACE(sizeof(int) * RX_FDS_ROOM)];
};

union r2_cmsg_tx {
	struct cmsghdr hdr;
	char buf[CMSG_SPACE(sizeof(int) * R2_FRAME_MAX_FDS)];
};

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		r2_closep(&fds[i]);
}

void r2_frame_free(struct r2_frame *f)
{
	int n;

	if (!f)
		return;
	n = f->nfds > R2_FRAME_MAX_FDS ? R2_FRAME_MAX_FDS : f->nfds;
	close_fds(f->fds, n);
	for (int i = 0; i < R2_FRAME_MAX_FDS; i++)
		f->fds[i] = -1;
	free(f->payload);
	f->payload = NULL;
	f->len = 0;
	f->nfds = 0;
	f->type = 0;
}

static void frame_clear(struct r2_frame *f)
{
	memset(f, 0, sizeof(*f));
	for (int i = 0; i < R2_FRAME_MAX_FDS; i++)
		f->fds[i] = -1;
}

void r2_frame_reader_init(struct r2_frame_reader *r, uint32_t max_len)
{
	memset(r, 0, sizeof(*r));
	r->max_len = max_len ? max_len : R2_FRAME_DEFAULT_MAX;
	frame_clear(&r->cur);
}

void r2_frame_reader_reset(struct r2_frame_reader *r)
{
	if (!r)
		return;
	/* fds are held in cur.fds[0..nfds_got) from the header's first byte on */
	close_fds(r->cur.fds, r->nfds_got > R2_FRAME_MAX_FDS ? R2_FRAME_MAX_FDS : r->nfds_got);
	free(r->cur.payload);
	frame_clear(&r->cur);
	r->nfds_got = 0;
	r->got = 0;
	memset(r->hdr, 0, sizeof(r->hdr));
}

/*
 * One recvmsg() into buf. Returns bytes read (> 0), -ECONNRESET on EOF,
 * -EAGAIN, or another negative errno. Descriptors that came with the data are
 * stored in fds (room for RX_FDS_ROOM) and counted in *nfds; *ctrunc is set
 * when the kernel had more than fit.
 */
static ssize_t recv_some(int sock, void *buf, size_t len, int *fds, int *nfds, bool *ctrunc)
{
	union r2_cmsg_rx cm;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = cm.buf,
		.msg_controllen = sizeof(cm.buf),
	};
	struct cmsghdr *c;
	ssize_t n;

	*nfds = 0;
	*ctrunc = false;
	do
		n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;

	for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		size_t k;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*nfds < RX_FDS_ROOM)
				fds[(*nfds)++] = fd;
			else
				close(fd); /* cannot happen with our buffer size */
		}
	}
	if (msg.msg_flags & MSG_CTRUNC)
		*ctrunc = true;
	if (n == 0 && *nfds == 0)
		return -ECONNRESET;
	return n;
}

static int frame_fail(struct r2_frame_reader *r, int *fds, int nfds, int err)
{
	close_fds(fds, nfds);
	r2_frame_reader_reset(r);
	return err;
}

static int check_header(struct r2_frame_reader *r)
{
	struct r2_frame_hdr h;

	memcpy(&h, r->hdr, sizeof(h));
	h.magic = le32toh(h.magic);
	h.type = le16toh(h.type);
	h.nfds = le16toh(h.nfds);
	h.len = le32toh(h.len);
	h.flags = le32toh(h.flags);
	if (h.magic != R2_FRAME_MAGIC || h.flags != 0 || h.len > r->max_len ||
	    h.nfds > R2_FRAME_MAX_FDS || h.nfds != r->nfds_got)
		return -EPROTO;
	r->cur.type = h.type;
	r->cur.nfds = h.nfds;
	r->cur.len = h.len;
	/* never NULL for a delivered frame, even when empty */
	r->cur.payload = malloc(h.len ? h.len : 1);
	if (!r->cur.payload)
		return -ENOMEM;
	return 0;
}

int r2_frame_read(int sock, struct r2_frame_reader *r, struct r2_frame *out)
{
	int fds[RX_FDS_ROOM];
	int nfds;
	bool ctrunc;
	ssize_t n;
	int ret;

	for (;;) {
		if (r->got < R2_FRAME_HDR_SIZE) {
			bool first = r->got == 0;

			n = recv_some(sock, r->hdr + r->got, R2_FRAME_HDR_SIZE - r->got, fds,
				      &nfds, &ctrunc);
			if (n < 0)
				return n == -EAGAIN ? 0 : (int)n;
			/* descriptors only with the first byte, never more than the maximum */
			if (ctrunc || (nfds && !first) || nfds > R2_FRAME_MAX_FDS || n == 0)
				return frame_fail(r, fds, nfds, -EPROTO);
			for (int i = 0; i < nfds; i++)
				r->cur.fds[i] = fds[i];
			if (first)
				r->nfds_got = nfds;
			r->got += (size_t)n;
			if (r->got < R2_FRAME_HDR_SIZE)
				continue;
			ret = check_header(r);
			if (ret < 0)
				return frame_fail(r, NULL, 0, ret);
		}
		if (r->got < R2_FRAME_HDR_SIZE + (size_t)r->cur.len) {
			size_t off = r->got - R2_FRAME_HDR_SIZE;

			n = recv_some(sock, r->cur.payload + off, r->cur.len - off, fds, &nfds,
				      &ctrunc);
			if (n < 0)
				return n == -EAGAIN ? 0 : (int)n;
			if (ctrunc || nfds || n == 0)
				return frame_fail(r, fds, nfds, -EPROTO);
			r->got += (size_t)n;
			continue;
		}
		/* complete: ownership of payload and fds passes to the caller */
		*out = r->cur;
		frame_clear(&r->cur);
		r->nfds_got = 0;
		r->got = 0;
		return 1;
	}
}

static int wait_for(int sock, short events, uint64_t deadline_ns, int timeout_ms)
{
	struct pollfd pfd = { .fd = sock, .events = events };
	int ms = -1;
	int n;

	if (timeout_ms >= 0) {
		uint64_t now = r2_now_ns();

		ms = now >= deadline_ns ? 0 : (int)R2_DIV_UP(deadline_ns - now, 1000000ull);
	}
	do
		n = poll(&pfd, 1, ms);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ETIMEDOUT;
	if (pfd.revents & POLLNVAL)
		return -EBADF;
	return 0;
}

int r2_frame_send(int sock, uint16_t type, const void *payload, uint32_t len, const int *fds,
		  int nfds, int timeout_ms)
{
	uint64_t deadline = 0;
	struct r2_frame_hdr h;
	union r2_cmsg_tx cm;
	size_t total, sent = 0;

	if (nfds < 0 || nfds > R2_FRAME_MAX_FDS || (nfds && !fds) || (len && !payload))
		return -EINVAL;
	for (int i = 0; i < nfds; i++)
		if (fds[i] < 0)
			return -EBADF;
	if (timeout_ms >= 0)
		deadline = r2_now_ns() + (uint64_t)timeout_ms * 1000000ull;

	h.magic = htole32(R2_FRAME_MAGIC);
	h.type = htole16(type);
	h.nfds = htole16((uint16_t)nfds);
	h.len = htole32(len);
	h.flags = 0;
	total = R2_FRAME_HDR_SIZE + (size_t)len;

	while (sent < total) {
		struct iovec iov[2];
		struct msghdr msg = { .msg_iov = iov };
		ssize_t n;
		int ret;

		if (sent < R2_FRAME_HDR_SIZE) {
			iov[0].iov_base = (char *)&h + sent;
			iov[0].iov_len = R2_FRAME_HDR_SIZE - sent;
			iov[1].iov_base = (void *)payload;
			iov[1].iov_len = len;
			msg.msg_iovlen = len ? 2 : 1;
		} else {
			iov[0].iov_base = (char *)payload + (sent - R2_FRAME_HDR_SIZE);
			iov[0].iov_len = total - sent;
			msg.msg_iovlen = 1;
		}
		/* the descriptors go with the first byte of the header */
		if (sent == 0 && nfds) {
			memset(&cm, 0, sizeof(cm));
			msg.msg_control = cm.buf;
			msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
			cm.hdr.cmsg_level = SOL_SOCKET;
			cm.hdr.cmsg_type = SCM_RIGHTS;
			cm.hdr.cmsg_len = CMSG_LEN(sizeof(int) * nfds);
			memcpy(CMSG_DATA(&cm.hdr), fds, sizeof(int) * nfds);
		}
		n = sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n >= 0) {
			sent += (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		ret = wait_for(sock, POLLOUT, deadline, timeout_ms);
		if (ret < 0)
			return ret; /* a partly sent frame leaves the stream unusable */
	}
	return 0;
}

int r2_frame_recv(int sock, struct r2_frame_reader *r, struct r2_frame *out, int timeout_ms)
{
	uint64_t deadline = 0;
	int ret;

	if (timeout_ms >= 0)
		deadline = r2_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		ret = r2_frame_read(sock, r, out);
		if (ret != 0)
			return ret;
		ret = wait_for(sock, POLLIN, deadline, timeout_ms);
		if (ret < 0)
			return ret;
	}
}
