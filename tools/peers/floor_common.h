/* SPDX-License-Identifier: MIT */
/*
 * Shared by the floor programs (tcp_pingpong.c, relay_floor.c): whole
 * reads and writes on a TCP stream, the monotonic clock in microseconds,
 * a sort of the timings, and a connect that retries while the other side
 * starts. Header-only (static functions), each program one file.
 */
#ifndef R2CCL_FLOOR_COMMON_H
#define R2CCL_FLOOR_COMMON_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* n bytes to (wr) or from fd, whole; -1 on an error or the peer's close */
static int io_all(int fd, void *buf, size_t n, int wr)
{
	char *p = buf;

	while (n) {
		ssize_t r = wr ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* A connection to addr:port (TCP_NODELAY), retried for 10 s; -1 (said on
 * stderr, prog's name first) when none came. */
static int dial(const char *prog, const char *addr, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	if (inet_pton(AF_INET, addr, &a.sin_addr) != 1) {
		fprintf(stderr, "%s: not an IPv4 address: %s\n", prog, addr);
		return -1;
	}
	for (int t = 0; t < 200; t++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a))) {
			nodelay(fd);
			return fd;
		}
		if (fd >= 0)
			close(fd);
		usleep(50000);
	}
	fprintf(stderr, "%s: cannot connect to %s:%d: %s\n", prog, addr, port, strerror(errno));
	return -1;
}

#endif
