// SPDX-License-Identifier: MIT
/*
 * fuzz_frame: the control socket of r2ccld (BRIEF.md decision 1: every frame
 * from a client is untrusted) under libFuzzer. One real daemon core lives in
 * the process (host.h: parameters, caps, engine, rails on the loopback
 * provider); each input is one client session: a socketpair whose daemon end
 * goes through r2d_session_accept, as server.c's listener hands it over, and
 * whose other end the harness writes the input to. So the frame reader
 * (common/framing.c), the dispatch table and every handler of session.c,
 * memreg.c, comm.c and ctl.c see the bytes as they would come from a client.
 *
 * Input: one mode byte, then the bytes of the stream.
 *   mode bit 0:    the session's uid is 1000 (not root: the caps and
 *                  ownership checks apply) instead of 0;
 *   mode bits 1-2: the kind of fd sent with a frame whose header counts fds:
 *                  0 a sealed memfd of 64 KiB with its pages written (what
 *                  libr2ccl sends), 1 the same without seals, 2 an eventfd,
 *                  3 a sealed sparse memfd of 1 MiB.
 * The stream is cut at frame headers (magic, then len bytes of payload) so
 * that the fds travel with their header, as libr2ccl sends them; what does
 * not parse is written as it is. Replies are read and thrown away (their
 * fds closed). After the input the harness shuts its side down and runs the
 * loop until the daemon has closed the session.
 *
 * Checks besides the sanitizers: the session always ends (no hang); no fd
 * and no session outlives the inputs (counted every input).
 *
 * R2CCL_FUZZ_SEEDS=DIR ./fuzz_frame writes the seed corpus (real frames of
 * every request, seeds.c) to DIR and exits.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/control.h"
#include "framing.h"
#include "host.h"
#include "seeds.h"

#define FD_SLACK 16 /* fds the daemon may hold between inputs (async close) */

static struct fz_host *host;
static int base_fds;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int count_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	FZ_CHECK(dir);
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n - 1; /* the directory's own */
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *seeds = getenv("R2CCL_FUZZ_SEEDS");

	signal(SIGPIPE, SIG_IGN);
	host = fz_host_new(0, 0x1, NULL);
	if (seeds)
		exit(fz_seeds_frame(&host->d, seeds) < 0 ? 1 : 0);
	fz_pump_once();
	base_fds = count_fds();
	return 0;
}

/* An fd of the kind mode asks for, sent with a frame. */
static int make_fd(unsigned kind)
{
	static uint8_t page[4096];
	int fd;

	if (kind == 2)
		return eventfd(0, EFD_CLOEXEC);
	fd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	FZ_CHECK(fd >= 0);
	if (kind == 3) {
		FZ_CHECK(ftruncate(fd, 1 << 20) == 0);
	} else {
		memset(page, 0x5a, sizeof(page));
		for (int i = 0; i < 16; i++)
			FZ_CHECK(write(fd, page, sizeof(page)) == sizeof(page));
	}
	if (kind != 1)
		FZ_CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
	return fd;
}

/* Reads what the daemon sent (and closes the fds it passed); false at EOF. */
static bool drain(int fd)
{
	for (;;) {
		uint8_t buf[8192];
		union {
			char b[CMSG_SPACE(sizeof(int) * R2_FRAME_MAX_FDS)];
			struct cmsghdr align;
		} cbuf;
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.b,
				     .msg_controllen = sizeof(cbuf.b) };
		ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

		if (n > 0) {
			for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
				if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
					continue;
				int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
				for (int i = 0; i < k; i++) {
					int x;
					memcpy(&x, CMSG_DATA(c) + (size_t)i * sizeof(int), sizeof(int));
					close(x);
				}
			}
			continue;
		}
		if (n == 0)
			return false;
		return errno == EAGAIN || errno == EINTR;
	}
}

struct client {
	int fd;
	bool eof; /* the daemon closed its end */
};

/* Sends len bytes (with nfds fds of kind on the first byte), running the
 * daemon's loop while the socket is full. false once the daemon is gone. */
static bool send_piece(struct client *c, const uint8_t *p, size_t len, int nfds, unsigned kind)
{
	int fds[R2_FRAME_MAX_FDS + 1];
	size_t off = 0;
	int spins = 0;

	for (int i = 0; i < nfds; i++)
		fds[i] = make_fd(kind);
	while (off < len && !c->eof) {
		struct iovec iov = { (void *)(p + off), len - off };
		union {
			char b[CMSG_SPACE(sizeof(int) * (R2_FRAME_MAX_FDS + 1))];
			struct cmsghdr align;
		} cbuf;
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n;

		if (off == 0 && nfds) {
			memset(&cbuf, 0, sizeof(cbuf));
			mh.msg_control = cbuf.b;
			mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
			struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
			memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
		}
		n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			c->eof = true; /* EPIPE, ECONNRESET: the daemon dropped us */
			break;
		}
		fz_pump_once();
		if (!drain(c->fd))
			c->eof = true;
		FZ_CHECK(++spins < 1000000); /* a daemon that never reads */
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return !c->eof;
}

static bool session_gone(void *arg)
{
	struct client *c = arg;

	if (!drain(c->fd))
		c->eof = true;
	return c->eof && host->d.nsessions == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct r2d *d = &host->d;
	struct client c = { -1, false };
	int sv[2];
	unsigned mode, kind;
	size_t off = 0;

	if (size < 1)
		return -1;
	mode = data[0];
	kind = (mode >> 1) & 3;
	data++;
	size--;
	FZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	FZ_CHECK(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0); /* as accept4 makes it */
	r2d_session_accept(d, sv[0]);
	FZ_CHECK(d->sessions && d->sessions->fd == sv[0]);
	if (mode & 1)
		d->sessions->uid = 1000;
	c.fd = sv[1];

	while (off < size && !c.eof) {
		struct r2_frame_hdr h;
		size_t len = size - off;
		int nfds = 0;

		if (len >= R2_FRAME_HDR_SIZE) {
			memcpy(&h, data + off, sizeof(h));
			if (h.magic == R2_FRAME_MAGIC) {
				if (R2_FRAME_HDR_SIZE + (size_t)h.len < len)
					len = R2_FRAME_HDR_SIZE + (size_t)h.len;
				nfds = h.nfds <= R2_FRAME_MAX_FDS + 1 ? h.nfds : 0;
				/* the header with its fds, then the payload */
				if (!send_piece(&c, data + off, R2_FRAME_HDR_SIZE, nfds, kind))
					break;
				off += R2_FRAME_HDR_SIZE;
				len -= R2_FRAME_HDR_SIZE;
				nfds = 0;
			}
		}
		if (!send_piece(&c, data + off, len, nfds, kind))
			break;
		off += len;
		fz_pump_once();
	}
	shutdown(c.fd, SHUT_WR);
	if (!fz_until(session_gone, &c, 5000)) {
		fprintf(stderr, "fuzz_frame: the session did not end within 5 s of EOF\n");
		abort();
	}
	close(c.fd);
	/* communicators of the session end on the loop (bootstrap timeouts are
	 * 500 ms here): their fds and threads come back by then */
	int n = count_fds();
	if (n > base_fds + FD_SLACK) {
		fprintf(stderr, "fuzz_frame: %d fds open after the input, %d before the first\n",
			n, base_fds);
		abort();
	}
	return 0;
}
