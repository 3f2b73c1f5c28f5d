/* SPDX-License-Identifier: MIT */
/*
 * Shared by the peer benchmark programs (mpi_peer.c, gloo_peer.cc): the
 * command line, the per-op sizes (nccl-tests' rules, as r2ccl-bench) and the
 * output line that r2ccl-bench parses:
 *   r2peer peer=P op=OP type=T redop=R root=N ranks=N size=B count=C time_us=T
 *          algbw=A busbw=B wrong=W
 * printed by global rank 0, one line per size. wrong: elements that differ
 * from the expected result (rank 0's own buffer for gloo, all ranks for MPI),
 * -1 with -c 0. Header-only so that C and C++ share it.
 */
#ifndef R2CCL_PEER_COMMON_H
#define R2CCL_PEER_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PEER_MAX_SIZES 256

enum peer_op { P_ALLREDUCE, P_ALLGATHER, P_REDUCESCATTER, P_BROADCAST, P_REDUCE, P_SENDRECV, P_NOPS };
static const char *const peer_op_names[P_NOPS] = { "allreduce", "allgather", "reducescatter",
						   "broadcast", "reduce", "sendrecv" };

struct peer_args {
	int op;
	const char *type; /* nccl-tests name */
	const char *redop;
	int root, iters, warmup, check;
	int rank, nranks;            /* gloo only */
	const char *store, *addr;    /* gloo only */
	int nsizes;
	size_t sizes[PEER_MAX_SIZES];
};

static inline int peer_parse_args(int argc, char **argv, struct peer_args *a, int gloo)
{
	memset(a, 0, sizeof(*a));
	a->op = P_ALLREDUCE;
	a->type = "float";
	a->redop = "sum";
	a->iters = 20;
	a->warmup = 5;
	a->check = 1;
	a->rank = -1;
	a->addr = "127.0.0.1";
	for (int i = 1; i < argc; i++) {
		const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int takes = 1;
		if (!strcmp(s, "-o") && v) {
			int k;
			for (k = 0; k < P_NOPS; k++)
				if (!strcmp(v, peer_op_names[k]))
					break;
			if (k == P_NOPS) {
				fprintf(stderr, "peer: unknown op %s\n", v);
				return -1;
			}
			a->op = k;
		} else if (!strcmp(s, "-d") && v) {
			a->type = v;
		} else if (!strcmp(s, "-r") && v) {
			a->redop = v;
		} else if (!strcmp(s, "-R") && v) {
			a->root = atoi(v);
		} else if (!strcmp(s, "-n") && v) {
			a->iters = atoi(v);
		} else if (!strcmp(s, "-w") && v) {
			a->warmup = atoi(v);
		} else if (!strcmp(s, "-c") && v) {
			a->check = atoi(v);
		} else if (gloo && !strcmp(s, "--rank") && v) {
			a->rank = atoi(v);
		} else if (gloo && !strcmp(s, "--nranks") && v) {
			a->nranks = atoi(v);
		} else if (gloo && !strcmp(s, "--store") && v) {
			a->store = v;
		} else if (gloo && !strcmp(s, "--addr") && v) {
			a->addr = v;
		} else if (s[0] >= '0' && s[0] <= '9' && a->nsizes < PEER_MAX_SIZES) {
			a->sizes[a->nsizes++] = strtoull(s, NULL, 10);
			takes = 0;
		} else {
			fprintf(stderr, "peer: bad argument %s\n", s);
			return -1;
		}
		i += takes;
	}
	if (a->iters < 1)
		a->iters = 1;
	if (gloo && (a->rank < 0 || a->nranks < 1 || a->rank >= a->nranks || !a->store)) {
		fprintf(stderr, "peer: gloo needs --rank R --nranks N --store DIR\n");
		return -1;
	}
	return 0;
}

struct peer_sizes {
	size_t count, send_elems, recv_elems, size;
};

/* As bench_step_sizes() in tools/bench/r2ccl-bench.c. */
static inline void peer_step(int op, size_t loop_bytes, size_t es, int n, struct peer_sizes *s)
{
	size_t count = loop_bytes / es;
	if (op == P_ALLGATHER) {
		s->count = count / (size_t)n;
		s->send_elems = s->count;
		s->recv_elems = s->count * (size_t)n;
	} else if (op == P_REDUCESCATTER) {
		s->count = count / (size_t)n;
		s->send_elems = s->count * (size_t)n;
		s->recv_elems = s->count;
	} else {
		s->count = s->send_elems = s->recv_elems = count;
	}
	s->size = (s->send_elems > s->recv_elems ? s->send_elems : s->recv_elems) * es;
}

static inline double peer_bus_factor(int op, int n)
{
	if (op == P_ALLREDUCE)
		return 2.0 * (n - 1) / n;
	if (op == P_ALLGATHER || op == P_REDUCESCATTER)
		return (double)(n - 1) / n;
	return 1.0;
}

static inline double peer_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Test pattern (small integers, exact in every type the peers support). */
static inline double peer_in(int op, const char *redop, int rank, size_t g)
{
	if (op == P_ALLGATHER || op == P_BROADCAST || op == P_SENDRECV)
		return (double)((rank * 7 + g) % 100 + 1);
	if (!strcmp(redop, "prod"))
		return (rank == 0 && (g & 1)) ? 2 : 1;
	return (double)((rank + g) % 3 + 1);
}

static inline double peer_reduced(const char *redop, int n, size_t g)
{
	double acc = peer_in(P_ALLREDUCE, redop, 0, g);
	for (int k = 1; k < n; k++) {
		double v = peer_in(P_ALLREDUCE, redop, k, g);
		if (!strcmp(redop, "prod"))
			acc *= v;
		else if (!strcmp(redop, "min"))
			acc = v < acc ? v : acc;
		else if (!strcmp(redop, "max"))
			acc = v > acc ? v : acc;
		else
			acc += v;
	}
	return acc;
}

static inline int peer_cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/* lat: the n iterations' times (us), sorted here, for p50_us and p99_us;
 * NULL: the line has the average only (time_us). */
static inline void peer_print_lat(const char *peer, const struct peer_args *a, int n,
				  const struct peer_sizes *s, double us, long long wrong,
				  double *lat, int nlat)
{
	double algbw = us > 0 ? (double)s->size / us / 1e3 : 0;

	printf("r2peer peer=%s op=%s type=%s redop=%s root=%d ranks=%d size=%zu count=%zu "
	       "time_us=%.3f algbw=%.6f busbw=%.6f wrong=%lld",
	       peer, peer_op_names[a->op], a->type, a->redop, a->root, n, s->size, s->count, us,
	       algbw, algbw * peer_bus_factor(a->op, n), a->check ? wrong : -1);
	if (lat && nlat > 0) {
		qsort(lat, (size_t)nlat, sizeof(double), peer_cmp_double);
		printf(" p50_us=%.3f p99_us=%.3f", lat[nlat / 2], lat[nlat * 99 / 100]);
	}
	printf("\n");
	fflush(stdout);
}

static inline void peer_print(const char *peer, const struct peer_args *a, int n,
			      const struct peer_sizes *s, double us, long long wrong)
{
	peer_print_lat(peer, a, n, s, us, wrong, NULL, 0);
}

#endif
