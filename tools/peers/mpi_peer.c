/* SPDX-License-Identifier: MIT */
/*
 * mpi_peer: the MPI peer of r2ccl-bench (Open MPI from Debian's
 * libopenmpi-dev). Runs one op over the given sizes with MPI's own
 * collectives, out of place, and prints one r2peer line per size on rank 0
 * (see peer_common.h). Launch: mpirun --allow-run-as-root --oversubscribe
 * -np K mpi_peer [-o OP] [-d TYPE] [-r REDOP] [-R ROOT] [-n ITERS] [-w WARMUP]
 * [-c 0|1] BYTES...   (add --mca btl tcp,self for TCP).
 * Types: int8 uint8 int32 uint32 int64 uint64 float double (MPI has no
 * half/bfloat16). avg runs as sum (MPI has no average).
 * Timing: warm-up, MPI_Barrier, then rank 0's average over the iterations.
 */
#include <mpi.h>
#include <stdint.h>

#include "peer_common.h"

static int mpi_type(const char *t, MPI_Datatype *dt, size_t *es)
{
	static const char *const names[] = { "int8", "uint8", "int32", "uint32",
					     "int64", "uint64", "float", "double" };
	static const size_t sizes[] = { 1, 1, 4, 4, 8, 8, 4, 8 };
	MPI_Datatype d[] = { MPI_INT8_T, MPI_UINT8_T, MPI_INT32_T, MPI_UINT32_T,
			     MPI_INT64_T, MPI_UINT64_T, MPI_FLOAT, MPI_DOUBLE };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(t, names[i])) {
			*dt = d[i];
			*es = sizes[i];
			return 0;
		}
	return -1;
}

static void put(void *b, size_t j, const char *t, double v)
{
	if (!strcmp(t, "int8")) ((int8_t *)b)[j] = (int8_t)v;
	else if (!strcmp(t, "uint8")) ((uint8_t *)b)[j] = (uint8_t)v;
	else if (!strcmp(t, "int32")) ((int32_t *)b)[j] = (int32_t)v;
	else if (!strcmp(t, "uint32")) ((uint32_t *)b)[j] = (uint32_t)v;
	else if (!strcmp(t, "int64")) ((int64_t *)b)[j] = (int64_t)v;
	else if (!strcmp(t, "uint64")) ((uint64_t *)b)[j] = (uint64_t)v;
	else if (!strcmp(t, "float")) ((float *)b)[j] = (float)v;
	else ((double *)b)[j] = v;
}

static double get(const void *b, size_t j, const char *t)
{
	if (!strcmp(t, "int8")) return ((const int8_t *)b)[j];
	if (!strcmp(t, "uint8")) return ((const uint8_t *)b)[j];
	if (!strcmp(t, "int32")) return ((const int32_t *)b)[j];
	if (!strcmp(t, "uint32")) return ((const uint32_t *)b)[j];
	if (!strcmp(t, "int64")) return (double)((const int64_t *)b)[j];
	if (!strcmp(t, "uint64")) return (double)((const uint64_t *)b)[j];
	if (!strcmp(t, "float")) return ((const float *)b)[j];
	return ((const double *)b)[j];
}

int main(int argc, char **argv)
{
	struct peer_args a;
	MPI_Init(&argc, &argv);
	int rank, n;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	MPI_Datatype dt = MPI_FLOAT;
	size_t es = 4;
	MPI_Op op = MPI_SUM;
	if (peer_parse_args(argc, argv, &a, 0))
		MPI_Abort(MPI_COMM_WORLD, 2);
	if (mpi_type(a.type, &dt, &es)) {
		if (!rank)
			fprintf(stderr, "mpi_peer: type %s is not supported by MPI\n", a.type);
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
	if (!strcmp(a.redop, "prod")) op = MPI_PROD;
	else if (!strcmp(a.redop, "min")) op = MPI_MIN;
	else if (!strcmp(a.redop, "max")) op = MPI_MAX;
	if (a.root >= n)
		a.root = 0;

	size_t maxs = 0, maxr = 0;
	for (int i = 0; i < a.nsizes; i++) {
		struct peer_sizes s;
		peer_step(a.op, a.sizes[i], es, n, &s);
		if (s.send_elems > maxs) maxs = s.send_elems;
		if (s.recv_elems > maxr) maxr = s.recv_elems;
	}
	char *sb = malloc(maxs * es + 64), *rb = malloc(maxr * es + 64);
	if (!sb || !rb)
		MPI_Abort(MPI_COMM_WORLD, 4);
	int to = (rank + 1) % n, from = (rank - 1 + n) % n;

	for (int si = 0; si < a.nsizes; si++) {
		struct peer_sizes s;
		peer_step(a.op, a.sizes[si], es, n, &s);
		int c = (int)s.count;
		for (size_t j = 0; j < s.send_elems; j++)
			put(sb, j, a.type, peer_in(a.op, a.redop, rank, j));
		memset(rb, 0, s.recv_elems * es);
		if (a.op == P_BROADCAST && rank == a.root)
			memcpy(rb, sb, s.count * es);
		long long wrong = 0, total = 0;
		double t0 = 0, us = 0;
		/* it -1: the checked run; then the warm-up; then the timed loop */
		for (int it = -a.warmup - 1; it < a.iters; it++) {
			if (it == 0) {
				MPI_Barrier(MPI_COMM_WORLD);
				t0 = peer_now_us();
			}
			if (!c) {
				/* nothing to move */
			} else if (a.op == P_ALLREDUCE) {
				MPI_Allreduce(sb, rb, c, dt, op, MPI_COMM_WORLD);
			} else if (a.op == P_ALLGATHER) {
				MPI_Allgather(sb, c, dt, rb, c, dt, MPI_COMM_WORLD);
			} else if (a.op == P_REDUCESCATTER) {
				MPI_Reduce_scatter_block(sb, rb, c, dt, op, MPI_COMM_WORLD);
			} else if (a.op == P_BROADCAST) {
				MPI_Bcast(rb, c, dt, a.root, MPI_COMM_WORLD);
			} else if (a.op == P_REDUCE) {
				MPI_Reduce(sb, rb, c, dt, op, a.root, MPI_COMM_WORLD);
			} else {
				MPI_Sendrecv(sb, c, dt, to, 0, rb, c, dt, from, 0, MPI_COMM_WORLD,
					     MPI_STATUS_IGNORE);
			}
			if (it == -a.warmup - 1 && a.check) {
				size_t ne = (a.op == P_REDUCE && rank != a.root) ? 0 : s.recv_elems;
				for (size_t j = 0; j < ne; j++) {
					double e;
					if (a.op == P_ALLGATHER)
						e = peer_in(a.op, a.redop, (int)(j / s.count), j % s.count);
					else if (a.op == P_BROADCAST)
						e = peer_in(a.op, a.redop, a.root, j);
					else if (a.op == P_SENDRECV)
						e = peer_in(a.op, a.redop, from, j);
					else if (a.op == P_REDUCESCATTER)
						e = peer_reduced(a.redop, n, (size_t)rank * s.count + j);
					else
						e = peer_reduced(a.redop, n, j);
					if (get(rb, j, a.type) != e)
						wrong++;
				}
			}
		}
		us = (peer_now_us() - t0) / a.iters;
		MPI_Reduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (!rank)
			peer_print("mpi", &a, n, &s, us, total);
	}
	free(sb);
	free(rb);
	MPI_Finalize();
	return 0;
}
