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
 *                  3 a sealed sparse memfd of 1 MiB;
 *   mode bit 3:    the next byte n, and the input ends with n SQEs
 *                  (struct r2_sqe, common/ring.h) that the harness writes
 *                  into the session's shared ring once the daemon has read
 *                  the frames (so after the HelloReply gave the ring), then
 *                  rings the doorbell; it waits for the dispatcher to take
 *                  them. An SQE's comm_id, send_mem or recv_mem ~0 stands
 *                  for the last communicator handle or memory id the daemon
 *                  gave this session.
 * The stream is cut at frame headers (magic, then len bytes of payload) so
 * that the fds travel with their header, as libr2ccl sends them; what does
 * not parse is written as it is. Replies are read with the framing reader
 * and must parse (their fds closed, but the ring's). After the input the harness shuts its side down and runs the
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
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/control.h"
#include "framing.h"
#include "host.h"
#include "r2ccl.pb-c.h"
#include "ring.h"
#include "util.h"
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

struct client {
	int fd;
	bool eof;                  /* the daemon closed its end */
	struct r2_frame_reader rd; /* the daemon's replies */
	int ring_fd, sq_efd;       /* from the HelloReply */
	uint32_t comm_id, mem_id;  /* the last CommInitReply's, MemRegisterReply's */
};

/* Reads the daemon's replies: keeps the ring's fds and the last communicator
 * handle and memory id it gave, closes every other fd; false at EOF. */
static bool drain(struct client *c)
{
	for (;;) {
		struct r2_frame f;
		int r = r2_frame_read(c->fd, &c->rd, &f);

		if (r == 0)
			return true;
		if (r < 0)
			return false; /* EOF (a reply the reader refuses: the check below) */
		if (f.type == R2CCL__MSG_TYPE__MSG_HELLO_REPLY && f.nfds == 3 && c->ring_fd < 0) {
			c->ring_fd = f.fds[0];
			c->sq_efd = f.fds[1];
			f.fds[0] = f.fds[1] = -1;
		} else if (f.type == R2CCL__MSG_TYPE__MSG_COMM_INIT_REPLY) {
			R2ccl__CommInitReply *m =
				r2ccl__comm_init_reply__unpack(NULL, f.len, f.payload);
			FZ_CHECK(m); /* the daemon's own replies must parse */
			if (m->status == 0)
				c->comm_id = m->comm_id;
			r2ccl__comm_init_reply__free_unpacked(m, NULL);
		} else if (f.type == R2CCL__MSG_TYPE__MSG_MEM_REGISTER_REPLY) {
			R2ccl__MemRegisterReply *m =
				r2ccl__mem_register_reply__unpack(NULL, f.len, f.payload);
			FZ_CHECK(m);
			if (m->status == 0)
				c->mem_id = m->mem_id;
			r2ccl__mem_register_reply__free_unpacked(m, NULL);
		}
		r2_frame_free(&f);
	}
}

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
		if (!drain(c))
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

	if (!drain(c))
		c->eof = true;
	return c->eof && host->d.nsessions == 0;
}

static bool all_read(void *arg)
{
	struct client *c = arg;
	int q = 0;

	if (!drain(c))
		c->eof = true;
	return c->eof || (ioctl(c->fd, SIOCOUTQ, &q) == 0 && q == 0);
}

struct sq_wait {
	struct r2_ring_shm *ring;
	int daemon_fd; /* the session's socket in the daemon */
};

/* The dispatcher took every SQE, or the session is closing (it has left
 * the engine: a frame after the ring was given dropped it). */
static bool sq_taken(void *arg)
{
	struct sq_wait *w = arg;
	struct r2_session *s;
	bool open = false;

	if (atomic_load(&w->ring->sq_head) == atomic_load(&w->ring->sq_tail))
		return true;
	pthread_mutex_lock(&host->d.lock);
	for (s = host->d.sessions; s; s = s->next)
		open |= s->fd == w->daemon_fd && !s->closing;
	pthread_mutex_unlock(&host->d.lock);
	return !open;
}

/* Writes n SQEs (the input's) into the session's ring and rings its
 * doorbell; a handle or memory id ~0 stands for the last one the daemon
 * gave (the fuzzer cannot know them: they change from input to input). */
static void submit(struct client *c, int daemon_fd, const uint8_t *p, size_t n)
{
	struct r2_ring_shm *ring;
	struct sq_wait w;
	uint64_t one = 1;
	uint32_t tail;

	if (c->ring_fd < 0 || !n)
		return;
	n = R2_MIN(n, R2_RING_ENTRIES);
	ring = mmap(NULL, sizeof(*ring), PROT_READ | PROT_WRITE, MAP_SHARED, c->ring_fd, 0);
	FZ_CHECK(ring != MAP_FAILED);
	tail = atomic_load(&ring->sq_tail);
	for (size_t i = 0; i < n; i++) {
		struct r2_sqe q;
		memcpy(&q, p + i * sizeof(q), sizeof(q));
		if (q.comm_id == UINT32_MAX)
			q.comm_id = c->comm_id;
		if (q.send_mem == UINT32_MAX)
			q.send_mem = c->mem_id;
		if (q.recv_mem == UINT32_MAX)
			q.recv_mem = c->mem_id;
		memcpy(&ring->sq[(tail + i) & (R2_RING_ENTRIES - 1)], &q, sizeof(q));
	}
	atomic_store(&ring->sq_tail, tail + (uint32_t)n);
	FZ_CHECK(write(c->sq_efd, &one, sizeof(one)) == sizeof(one));
	/* the dispatcher (its own thread) copies them out and validates them */
	w.ring = ring;
	w.daemon_fd = daemon_fd;
	if (!fz_until(sq_taken, &w, 5000)) {
		fprintf(stderr, "fuzz_frame: the dispatcher did not take the SQEs in 5 s\n");
		abort();
	}
	munmap(ring, sizeof(*ring));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct r2d *d = &host->d;
	struct client c = { .fd = -1, .ring_fd = -1, .sq_efd = -1 };
	const uint8_t *sqes = NULL;
	size_t nsqe = 0, off = 0;
	unsigned mode, kind;
	int sv[2];

	if (size < 1)
		return -1;
	mode = data[0];
	kind = (mode >> 1) & 3;
	data++;
	size--;
	if ((mode & 8) && size >= 1) { /* n, then the frames, then n SQEs */
		nsqe = R2_MIN((size_t)data[0], (size - 1) / sizeof(struct r2_sqe));
		data++;
		size -= 1 + nsqe * sizeof(struct r2_sqe);
		sqes = data + size;
	}
	FZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	FZ_CHECK(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0); /* as accept4 makes it */
	r2d_session_accept(d, sv[0]);
	FZ_CHECK(d->sessions && d->sessions->fd == sv[0]);
	if (mode & 1)
		d->sessions->uid = 1000;
	c.fd = sv[1];
	r2_frame_reader_init(&c.rd, 64u << 20);

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
	if (nsqe && !c.eof) {
		/* once the daemon has read every frame (and so answered them) */
		fz_until(all_read, &c, 5000);
		for (int i = 0; i < 10; i++)
			fz_pump_once();
		drain(&c);
		submit(&c, sv[0], sqes, nsqe);
	}
	shutdown(c.fd, SHUT_WR);
	if (!fz_until(session_gone, &c, 5000)) {
		fprintf(stderr, "fuzz_frame: the session did not end within 5 s of EOF\n");
		abort();
	}
	close(c.fd);
	r2_frame_reader_reset(&c.rd);
	if (c.ring_fd >= 0)
		close(c.ring_fd);
	if (c.sq_efd >= 0)
		close(c.sq_efd);
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
