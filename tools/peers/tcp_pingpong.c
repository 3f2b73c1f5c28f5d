// SPDX-License-Identifier: MIT
/*
 * tcp_pingpong: the round trip of one message over one TCP connection
 * (TCP_NODELAY), the floor a small collective across two hosts is set
 * against (issue 21: "within 2x a TCP ping-pong round trip over the same
 * rail", tools/bench/small-bench.sh).
 *
 *   tcp_pingpong -s PORT                      echo, one client, then exit
 *   tcp_pingpong -c ADDR PORT [-n ITERS] [-w WARMUP] SIZE...
 *
 * The client sends SIZE bytes, the server sends them back; per size, after
 * WARMUP round trips (default 20), ITERS (default 1000) are timed one by one
 * (CLOCK_MONOTONIC) and one line is printed:
 *   pingpong size=B iters=N p50_us=X p99_us=Y
 * The client retries its connect for 10 s (the server may start after it).
 * Exit status 0, 1 on an error (said on stderr), 2 on bad usage.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floor_common.h"

#define MAX_SIZE (64u << 20)

/* Per size the client says the size and the number of round trips (two
 * 4-byte words, network order); then each round trip is the bytes one way
 * and back, one write each (nothing else on the wire while timed). A size
 * of 0 ends the session. */
static int serve(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0), fd;
	char *buf = malloc(MAX_SIZE);

	if (l < 0 || !buf || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) ||
	    (fd = accept(l, NULL, NULL)) < 0) {
		perror("tcp_pingpong: server");
		return 1;
	}
	nodelay(fd);
	for (;;) {
		uint32_t hdr[2], n, count;
		if (io_all(fd, hdr, sizeof(hdr), 0))
			break;
		n = ntohl(hdr[0]);
		count = ntohl(hdr[1]);
		if (!n || n > MAX_SIZE)
			break;
		for (uint32_t i = 0; i < count; i++)
			if (io_all(fd, buf, n, 0) || io_all(fd, buf, n, 1))
				goto out;
	}
out:
	close(fd);
	close(l);
	free(buf);
	return 0;
}

static int one_size(int fd, char *buf, uint32_t size, int iters, int warmup, double *rt)
{
	uint32_t hdr[2] = { htonl(size), htonl((uint32_t)(warmup + iters)) };

	if (io_all(fd, hdr, sizeof(hdr), 1))
		return -1;
	for (int i = -warmup; i < iters; i++) {
		double t0 = now_us();
		if (io_all(fd, buf, size, 1) || io_all(fd, buf, size, 0))
			return -1;
		if (i >= 0)
			rt[i] = now_us() - t0;
	}
	qsort(rt, (size_t)iters, sizeof(*rt), cmp_double);
	printf("pingpong size=%u iters=%d p50_us=%.1f p99_us=%.1f\n", size, iters, rt[iters / 2],
	       rt[iters * 99 / 100]);
	fflush(stdout);
	return 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: tcp_pingpong -s PORT\n"
			"       tcp_pingpong -c ADDR PORT [-n ITERS] [-w WARMUP] SIZE...\n");
	return 2;
}

int main(int argc, char **argv)
{
	int iters = 1000, warmup = 20, fd, rc = 0, k = 4;

	if (argc == 3 && !strcmp(argv[1], "-s"))
		return serve(atoi(argv[2]));
	if (argc < 5 || strcmp(argv[1], "-c"))
		return usage();
	for (; k + 1 < argc && argv[k][0] == '-'; k += 2) {
		if (!strcmp(argv[k], "-n"))
			iters = atoi(argv[k + 1]);
		else if (!strcmp(argv[k], "-w"))
			warmup = atoi(argv[k + 1]);
		else
			return usage();
	}
	if (iters < 1 || warmup < 0 || k >= argc)
		return usage();
	double *rt = calloc((size_t)iters, sizeof(*rt));
	char *buf = calloc(1, MAX_SIZE);
	if (!rt || !buf || (fd = dial("tcp_pingpong", argv[2], atoi(argv[3]))) < 0) {
		free(rt);
		free(buf);
		return 1;
	}
	for (; k < argc && !rc; k++) {
		long size = atol(argv[k]);
		if (size < 1 || size > (long)MAX_SIZE) {
			fprintf(stderr, "tcp_pingpong: a size is 1 to %u bytes: %s\n", MAX_SIZE, argv[k]);
			rc = 2;
		} else if (one_size(fd, buf, (uint32_t)size, iters, warmup, rt)) {
			perror("tcp_pingpong: round trip");
			rc = 1;
		}
	}
	uint32_t end[2] = { 0, 0 };
	(void)io_all(fd, end, sizeof(end), 1);
	close(fd);
	free(rt);
	free(buf);
	return rc;
}
