/* SPDX-License-Identifier: MIT */
/*
 * minimpi: the part of MPI that nccl-tests 2.19 calls (src/common.cu,
 * src/util.cu), enough to run its binaries built with MPI=1 as several
 * processes without an MPI installation: 2 ranks on one GPU, or one rank per
 * namespace host of tests/cluster. The ranks meet through files in a shared
 * directory (tests/nccl/minimpi/mpirun; docs/nccl.md). Not an MPI: no
 * point-to-point, no derived types, blocking collectives only.
 */
#ifndef MINIMPI_MPI_H
#define MINIMPI_MPI_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;

#define MPI_COMM_NULL (-1)
#define MPI_COMM_WORLD 0
#define MPI_UNDEFINED (-32766)
#define MPI_SUCCESS 0
#define MPI_ERR_OTHER 16
#define MPI_IN_PLACE ((void *)1)

/* the type's code is its size in bytes times 16 plus its kind (0 integer,
 * 1 floating point): minimpi_type_size() and the reductions read it back */
#define MPI_DATATYPE_NULL 0
#define MPI_BYTE ((1 << 4) | 0)
#define MPI_CHAR ((1 << 4) | 0)
#define MPI_INT ((4 << 4) | 0)
#define MPI_INT32_T ((4 << 4) | 0)
#define MPI_LONG ((8 << 4) | 0)
#define MPI_LONG_LONG ((8 << 4) | 0)
#define MPI_INT64_T ((8 << 4) | 0)
#define MPI_UINT64_T ((8 << 4) | 2)
#define MPI_FLOAT ((4 << 4) | 1)
#define MPI_DOUBLE ((8 << 4) | 1)

#define MPI_OP_NULL 0
#define MPI_SUM 1
#define MPI_MIN 2
#define MPI_MAX 3

int MPI_Init(int *argc, char ***argv);
int MPI_Finalize(void);
int MPI_Abort(MPI_Comm comm, int code);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out);
int MPI_Comm_free(MPI_Comm *comm);
int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm);
int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
		  int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
	       int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
		  MPI_Comm comm);

#ifdef __cplusplus
}
#endif
#endif
