// SPDX-License-Identifier: MIT
/*
 * relay_floor: the floor of a small AllReduce of two hosts that goes through
 * a daemon on each host, as r2ccld's does (issue 21's "within 2x a TCP
 * ping-pong" against what any client -> daemon -> wire -> daemon -> client
 * path costs). Beside tcp_pingpong in tools/bench/small-bench.sh.
 *
 *   relay_floor -l PORT [-T 1|2] [-n ITERS] [-w WARMUP] SIZE...   (host 1)
 *   relay_floor -c ADDR PORT [-T 1|2] [-n ITERS] [-w WARMUP] SIZE...  (host 0)
 *
 * Each side is two processes, as a client and r2ccld are: the client (a
 * forked child) writes its input (float32) into shared memory, rings an
 * eventfd and waits on another; the daemon (the parent) sends the input to
 * the other side's daemon over one TCP connection (TCP_NODELAY), takes the
 * other side's input from it, adds the two into the client's output and
 * rings the client's eventfd. The daemon is
 *   -T 1  one thread waiting on both the client's eventfd and the socket
 *         (epoll): the fewest wake-ups a daemon can have, three an
 *         operation and host (daemon for the doorbell, daemon for the
 *         peer's message, client for its completion);
 *   -T 2  a thread for the client's doorbell that sends, and one reading the
 *         socket; whichever has the second of the two inputs completes the
 *         operation (r2ccld's dispatcher posting and its TCP thread
 *         completing, with no executor between them).
 * Both sides run the same sizes in the same order; the client side (-c)
 * prints per size, after WARMUP operations (default 20), ITERS (default
 * 1000) timed one by one from the doorbell to the completion:
 *   relay threads=T size=B iters=N p50_us=X p99_us=Y
 * Every result is checked (exit 1 on a wrong sum). Sizes are whole float32
 * elements, 4 B to 1 MiB. Exit 0, 1 on an error (said), 2 on bad usage.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "floor_common.h"

#define MAX_SIZE (1u << 20)

struct shared {
	uint32_t size;   /* this operation's bytes, set by the client */
	uint32_t quit;   /* the client is done */
	char hdr_in[4];  /* the message's header, just before in[] */
	float in[MAX_SIZE / 4], out[MAX_SIZE / 4];
};

struct relay {
	struct shared *sh;
	int sock, sq, cq;
	char hdr_peer[4]; /* the message's header, just before peer[] */
	float peer[MAX_SIZE / 4];
	/* -T 2: operation k's peer input goes to peer2[k & 1] (the reader may
	 * take the next message before the sender has counted its own: the
	 * peer sends k + 1 once it has our k), and arrived[k & 1] counts its
	 * inputs in (own sent, peer's received) */
	float *peer2[2];
	atomic_int arrived[2];
};

static void ring(int fd)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) != sizeof(one))
		perror("relay_floor: eventfd");
}

static void complete(struct relay *r, const float *peer)
{
	uint32_t n = r->sh->size / 4;

	for (uint32_t i = 0; i < n; i++)
		r->sh->out[i] = r->sh->in[i] + peer[i];
	ring(r->cq);
}

/* A message: the size (4 bytes, host order: both ends are this machine's
 * namespaces or alike) and the input. */
#define HDR 4u
_Static_assert(offsetof(struct shared, in) == offsetof(struct shared, hdr_in) + HDR, "hdr_in");
_Static_assert(offsetof(struct relay, peer) == offsetof(struct relay, hdr_peer) + HDR, "hdr_peer");

/* -T 1: one thread, epoll on the doorbell and the socket (non-blocking:
 * both daemons send at once, so a large send must not block the reading).
 * The peer sends its next input only once it has our last, so at most one
 * operation's message waits here. */
static int daemon_one(struct relay *r)
{
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = r->sq };
	char *msg = r->hdr_peer, *out = r->sh->hdr_in;
	size_t got = 0, sent = 0, len = 0;
	bool own = false, sending = false;

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, r->sq, &ev))
		return -1;
	ev.data.fd = r->sock;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, r->sock, &ev))
		return -1;
	for (;;) {
		struct epoll_event e[2];
		int n = epoll_wait(ep, e, 2, -1);
		bool want_out = sending;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		for (int i = 0; i < n; i++) {
			if (e[i].data.fd == r->sq) {
				uint64_t v;
				if (read(r->sq, &v, sizeof(v)) != sizeof(v))
					return -1;
				if (r->sh->quit)
					return 0;
				memcpy(out, &r->sh->size, HDR);
				len = HDR + r->sh->size;
				own = sending = true;
				sent = 0;
			}
		}
		while (sending && sent < len) {
			ssize_t w = send(r->sock, out + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0 && errno == EAGAIN)
				break;
			if (w < 0)
				return -1;
			sent += (size_t)w;
		}
		if (sending && sent == len)
			sending = false;
		for (;;) {
			uint32_t size = 0;
			if (got >= HDR)
				memcpy(&size, msg, HDR);
			size_t want = got < HDR ? HDR : HDR + size;
			if (got >= HDR && size > MAX_SIZE)
				return -1;
			if (got >= want)
				break;
			ssize_t k = recv(r->sock, msg + got, want - got, MSG_DONTWAIT);
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0 && errno == EAGAIN)
				break;
			if (k <= 0)
				return k == 0 ? 0 : -1;
			got += (size_t)k;
		}
		if (own && !sending && got == len) {
			complete(r, r->peer);
			own = false;
			got = 0;
		}
		if (sending != want_out) {
			ev.events = EPOLLIN | (sending ? EPOLLOUT : 0);
			ev.data.fd = r->sock;
			if (epoll_ctl(ep, EPOLL_CTL_MOD, r->sock, &ev))
				return -1;
		}
	}
}

/* Operation k's inputs in (own sent, peer's received): the second
 * completes it. */
static void arrive(struct relay *r, uint64_t k)
{
	if (atomic_fetch_add(&r->arrived[k & 1], 1) == 1) {
		atomic_store(&r->arrived[k & 1], 0);
		complete(r, r->peer2[k & 1]);
	}
}

/* -T 2: the socket's reader */
static void *reader(void *arg)
{
	struct relay *r = arg;

	for (uint64_t k = 0;; k++) {
		uint32_t size;
		if (io_all(r->sock, &size, HDR, 0) || size > MAX_SIZE ||
		    io_all(r->sock, r->peer2[k & 1], size, 0))
			return NULL;
		arrive(r, k);
	}
}

static int daemon_two(struct relay *r)
{
	pthread_t t;

	r->peer2[0] = r->peer;
	r->peer2[1] = malloc(MAX_SIZE);
	if (!r->peer2[1] || pthread_create(&t, NULL, reader, r))
		return -1;
	for (uint64_t k = 0;; k++) {
		uint64_t v;
		if (read(r->sq, &v, sizeof(v)) != sizeof(v))
			return -1;
		if (r->sh->quit)
			break;
		/* sent before it counts: the client reuses its input once the
		 * operation is complete */
		memcpy(r->sh->hdr_in, &r->sh->size, HDR);
		if (io_all(r->sock, r->sh->hdr_in, HDR + r->sh->size, 1))
			return -1;
		arrive(r, k);
	}
	shutdown(r->sock, SHUT_RDWR);
	pthread_join(t, NULL);
	free(r->peer2[1]);
	return 0;
}

/* The client: per size, WARMUP + ITERS operations, each timed from the
 * doorbell to the completion, every result checked. side: 0 or 1 (its
 * input is (i % 1000) + side * 1000 + j % 7, the sum known). */
static int client(struct shared *sh, int sq, int cq, int side, int threads, int iters,
		  int warmup, char **sizes, int nsizes)
{
	double *rt = calloc((size_t)iters, sizeof(*rt));
	int rc = 0;

	for (int k = 0; k < nsizes && !rc && rt; k++) {
		uint32_t size = (uint32_t)atol(sizes[k]), n = size / 4;
		sh->size = size;
		for (int i = -warmup; i < iters; i++) {
			uint64_t v;
			float base = (float)((i + warmup) % 1000);
			for (uint32_t j = 0; j < n; j++)
				sh->in[j] = base + (float)(side * 1000 + j % 7);
			double t0 = now_us();
			ring(sq);
			if (read(cq, &v, sizeof(v)) != sizeof(v)) {
				rc = 1;
				break;
			}
			if (i >= 0)
				rt[i] = now_us() - t0;
			for (uint32_t j = 0; j < n; j++) {
				if (sh->out[j] != 2 * base + 1000 + (float)(2 * (j % 7))) {
					fprintf(stderr, "relay_floor: wrong sum at %u of %u B\n", j, size);
					rc = 1;
					break;
				}
			}
		}
		if (rc)
			break;
		qsort(rt, (size_t)iters, sizeof(*rt), cmp_double);
		if (side == 0)
			printf("relay threads=%d size=%u iters=%d p50_us=%.1f p99_us=%.1f\n", threads,
			       size, iters, rt[iters / 2], rt[iters * 99 / 100]);
		fflush(stdout);
	}
	sh->quit = 1;
	ring(sq);
	free(rt);
	return rc || !rt;
}

static int accept_on(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0), fd = -1;

	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) ||
	    (fd = accept(l, NULL, NULL)) < 0)
		perror("relay_floor: listen");
	if (l >= 0)
		close(l);
	return fd;
}

static int usage(void)
{
	fprintf(stderr, "usage: relay_floor -l PORT [-T 1|2] [-n ITERS] [-w WARMUP] SIZE...\n"
			"       relay_floor -c ADDR PORT [-T 1|2] [-n ITERS] [-w WARMUP] SIZE...\n");
	return 2;
}

int main(int argc, char **argv)
{
	int iters = 1000, warmup = 20, threads = 1, k, side, st = 0, rc;
	struct relay *r;

	if (argc >= 3 && !strcmp(argv[1], "-l"))
		k = 3, side = 1;
	else if (argc >= 4 && !strcmp(argv[1], "-c"))
		k = 4, side = 0;
	else
		return usage();
	for (; k + 1 < argc && argv[k][0] == '-'; k += 2) {
		if (!strcmp(argv[k], "-n"))
			iters = atoi(argv[k + 1]);
		else if (!strcmp(argv[k], "-w"))
			warmup = atoi(argv[k + 1]);
		else if (!strcmp(argv[k], "-T"))
			threads = atoi(argv[k + 1]);
		else
			return usage();
	}
	if (iters < 1 || warmup < 0 || k >= argc || (threads != 1 && threads != 2))
		return usage();
	for (int i = k; i < argc; i++) {
		long s = atol(argv[i]);
		if (s < 4 || s > (long)MAX_SIZE || s % 4) {
			fprintf(stderr, "relay_floor: a size is 4 B to 1 MiB of float32: %s\n",
				argv[i]);
			return 2;
		}
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return 1;
	r->sh = mmap(NULL, sizeof(*r->sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		     -1, 0);
	r->sq = eventfd(0, 0);
	r->cq = eventfd(0, 0);
	r->sock = side ? accept_on(atoi(argv[2])) : dial("relay_floor", argv[2], atoi(argv[3]));
	if (r->sh == MAP_FAILED || r->sq < 0 || r->cq < 0 || r->sock < 0) {
		perror("relay_floor: setup");
		return 1;
	}
	nodelay(r->sock);
	pid_t pid = fork();
	if (pid < 0) {
		perror("relay_floor: fork");
		return 1;
	}
	if (pid == 0) {
		close(r->sock);
		_exit(client(r->sh, r->sq, r->cq, side, threads, iters, warmup, argv + k,
			     argc - k));
	}
	rc = threads == 1 ? daemon_one(r) : daemon_two(r);
	if (rc) {
		perror("relay_floor: daemon");
		kill(pid, SIGTERM);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		rc = -1;
	close(r->sock);
	munmap(r->sh, sizeof(*r->sh));
	free(r);
	return rc ? 1 : 0;
}
