/* SPDX-License-Identifier: MIT */
/*
 * minimpi's collectives, as nccl-tests calls them, on the ranks mpirun
 * starts (3 in the unit suite): each result against what MPI defines.
 * Exits 1 with the first wrong value.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi.h"

#define CHECK(cond)                                                                 \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "rank %d: %s:%d: %s\n", rank, __FILE__,      \
				__LINE__, #cond);                                   \
			exit(1);                                                    \
		}                                                                   \
	} while (0)

int main(int argc, char **argv)
{
	int rank, size, v, sub_rank, sub_size;
	int64_t big;
	double d;
	uint64_t hashes[64];
	char line[16], lines[64 * 16];
	unsigned char id[128];
	MPI_Comm sub;

	MPI_Init(&argc, &argv);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	CHECK(size >= 1 && size <= 64 && rank < size);

	for (int i = 0; i < size; i++)
		hashes[i] = i == rank ? 1000u + rank : 0;
	MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hashes, sizeof(uint64_t), MPI_BYTE,
		      MPI_COMM_WORLD);
	for (int i = 0; i < size; i++)
		CHECK(hashes[i] == 1000u + i);

	v = rank + 1;
	MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	CHECK(v == size * (size + 1) / 2);
	v = 10 - rank;
	MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	CHECK(v == 10 - (size - 1));
	big = (int64_t)rank << 40;
	MPI_Allreduce(MPI_IN_PLACE, &big, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
	CHECK(big == (int64_t)(size - 1) << 40);
	d = 0.5 * rank;
	MPI_Allreduce(MPI_IN_PLACE, &d, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	CHECK(d == 0.25 * size * (size - 1));

	snprintf(line, sizeof(line), "rank %d", rank);
	MPI_Gather(line, sizeof(line), MPI_BYTE, lines, sizeof(line), MPI_BYTE, 0, MPI_COMM_WORLD);
	if (rank == 0)
		for (int i = 0; i < size; i++) {
			snprintf(line, sizeof(line), "rank %d", i);
			CHECK(strcmp(lines + i * sizeof(line), line) == 0);
		}

	memset(id, rank == size - 1 ? 0xab : 0, sizeof(id));
	MPI_Bcast(id, sizeof(id), MPI_BYTE, size - 1, MPI_COMM_WORLD);
	for (size_t i = 0; i < sizeof(id); i++)
		CHECK(id[i] == 0xab);

	/* two colors, ranks of each ordered by descending world rank (key) */
	MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &sub);
	MPI_Comm_size(sub, &sub_size);
	MPI_Comm_rank(sub, &sub_rank);
	CHECK(sub_size == (size + 1 - rank % 2) / 2);
	v = 0;
	for (int r = rank + 2; r < size; r += 2)
		v++; /* the ranks of my color with a smaller key come first */
	CHECK(sub_rank == v);
	v = rank;
	MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, sub);
	CHECK(v % 2 == rank % 2 && v >= rank);
	MPI_Comm_free(&sub);
	CHECK(sub == MPI_COMM_NULL);

	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Finalize();
	if (rank == 0)
		printf("minimpi: %d ranks OK\n", size);
	return 0;
}
