/* SPDX-License-Identifier: MIT */
/*
 * minimpi's collectives (mpi.h): every one is an all-to-all exchange of one
 * block per rank through files in $MINIMPI_DIR, named <comm>.<seq>.<rank>,
 * written whole (a temporary name, then rename) and polled for. A rank that
 * has read every block of step s knows every rank has finished step s - 1, so
 * it removes its own block of s - 1; mpirun removes the directory at the end.
 * $MINIMPI_SIZE and $MINIMPI_RANK give the world (default: one rank); the
 * folder is made if missing.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mpi.h"

#define MAX_COMMS 64
#define TIMEOUT_S 600

struct comm {
	int used, size, rank, nsplits;
	int *world; /* world rank of each rank */
	char name[96];
	unsigned long seq;
};

static struct comm comms[MAX_COMMS];
static const char *dir;

static void die(const char *what)
{
	fprintf(stderr, "minimpi: %s\n", what);
	exit(1);
}

static size_t type_size(MPI_Datatype t)
{
	return (size_t)t >> 4;
}

int MPI_Init(int *argc, char ***argv)
{
	const char *s = getenv("MINIMPI_SIZE"), *r = getenv("MINIMPI_RANK");

	(void)argc;
	(void)argv;
	comms[0].used = 1;
	comms[0].size = s ? atoi(s) : 1;
	comms[0].rank = r ? atoi(r) : 0;
	dir = getenv("MINIMPI_DIR");
	if (comms[0].size < 1 || comms[0].rank < 0 || comms[0].rank >= comms[0].size)
		die("MINIMPI_SIZE / MINIMPI_RANK out of range");
	if (comms[0].size > 1 && !dir)
		die("MINIMPI_DIR is not set (run through tests/nccl/minimpi/mpirun)");
	/* ranks started by hand (one per namespace host) share a new folder */
	if (comms[0].size > 1 && mkdir(dir, 0700) < 0 && errno != EEXIST)
		die("cannot create MINIMPI_DIR");
	comms[0].world = calloc(comms[0].size, sizeof(int));
	for (int i = 0; i < comms[0].size; i++)
		comms[0].world[i] = i;
	strcpy(comms[0].name, "w");
	return MPI_SUCCESS;
}

int MPI_Finalize(void)
{
	return MPI_Barrier(MPI_COMM_WORLD);
}

int MPI_Abort(MPI_Comm comm, int code)
{
	(void)comm;
	exit(code ? code : 1);
}

static struct comm *get(MPI_Comm c)
{
	if (c < 0 || c >= MAX_COMMS || !comms[c].used)
		die("invalid communicator");
	return &comms[c];
}

int MPI_Comm_size(MPI_Comm comm, int *size)
{
	*size = get(comm)->size;
	return MPI_SUCCESS;
}

int MPI_Comm_rank(MPI_Comm comm, int *rank)
{
	*rank = get(comm)->rank;
	return MPI_SUCCESS;
}

static void block_path(char *p, size_t n, const struct comm *c, unsigned long seq, int rank)
{
	snprintf(p, n, "%s/%s.%lu.%d", dir, c->name, seq, c->world[rank]);
}

/* every rank's n bytes of mine, in rank order, into all (n * size bytes) */
static void exchange(struct comm *c, const void *mine, size_t n, void *all)
{
	char path[512], tmp[520];
	unsigned long seq = c->seq++;
	time_t give_up = time(NULL) + TIMEOUT_S;

	memmove((char *)all + (size_t)c->rank * n, mine, n);
	if (c->size == 1)
		return;
	block_path(path, sizeof(path), c, seq, c->rank);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, mine, n) != (ssize_t)n || close(fd) < 0 || rename(tmp, path) < 0)
		die("cannot write a block into MINIMPI_DIR");
	for (int r = 0; r < c->size; r++) {
		long wait_ns = 20000;

		if (r == c->rank)
			continue;
		block_path(path, sizeof(path), c, seq, r);
		while ((fd = open(path, O_RDONLY)) < 0) {
			struct timespec ts = { 0, wait_ns };

			if (errno != ENOENT || time(NULL) > give_up)
				die("a rank did not arrive (timeout or error)");
			nanosleep(&ts, NULL);
			if (wait_ns < 1000000)
				wait_ns *= 2;
		}
		if (pread(fd, (char *)all + (size_t)r * n, n, 0) != (ssize_t)n)
			die("a short block");
		close(fd);
	}
	if (seq > 0) {
		block_path(path, sizeof(path), c, seq - 1, c->rank);
		unlink(path);
	}
}

int MPI_Barrier(MPI_Comm comm)
{
	struct comm *c = get(comm);
	char *all = malloc(c->size);

	exchange(c, "", 1, all);
	free(all);
	return MPI_SUCCESS;
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
		  int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
	struct comm *c = get(comm);
	size_t n = (size_t)recvcount * type_size(recvtype);

	if (sendbuf != MPI_IN_PLACE && (size_t)sendcount * type_size(sendtype) != n)
		die("MPI_Allgather: send and receive sizes differ");
	exchange(c, sendbuf == MPI_IN_PLACE ? (char *)recvbuf + c->rank * n : sendbuf, n, recvbuf);
	return MPI_SUCCESS;
}

int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
	       int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
	struct comm *c = get(comm);
	size_t n = (size_t)sendcount * type_size(sendtype);
	char *all = malloc(n * c->size);

	(void)recvcount;
	(void)recvtype;
	exchange(c, sendbuf, n, all);
	if (c->rank == root)
		memcpy(recvbuf, all, n * c->size);
	free(all);
	return MPI_SUCCESS;
}

int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
	struct comm *c = get(comm);
	size_t n = (size_t)count * type_size(type);
	char *all = malloc(n * c->size);

	exchange(c, buf, n, all);
	memcpy(buf, all + (size_t)root * n, n);
	free(all);
	return MPI_SUCCESS;
}

#define REDUCE(T)                                                                   \
	do {                                                                        \
		T *a = (T *)acc, *b = (T *)in;                                      \
		for (int i = 0; i < count; i++)                                     \
			a[i] = op == MPI_SUM ? a[i] + b[i] :                        \
			       op == MPI_MIN ? (b[i] < a[i] ? b[i] : a[i]) :        \
					       (b[i] > a[i] ? b[i] : a[i]);         \
	} while (0)

static void reduce(void *acc, const void *in, int count, MPI_Datatype t, MPI_Op op)
{
	switch (t) {
	case MPI_INT: REDUCE(int32_t); break;
	case MPI_INT64_T: REDUCE(int64_t); break;
	case MPI_UINT64_T: REDUCE(uint64_t); break;
	case MPI_FLOAT: REDUCE(float); break;
	case MPI_DOUBLE: REDUCE(double); break;
	default: die("MPI_Allreduce: unsupported type");
	}
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
		  MPI_Comm comm)
{
	struct comm *c = get(comm);
	size_t n = (size_t)count * type_size(type);
	char *all = malloc(n * c->size);

	if (op != MPI_SUM && op != MPI_MIN && op != MPI_MAX)
		die("MPI_Allreduce: unsupported operation");
	exchange(c, sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, n, all);
	memcpy(recvbuf, all, n);
	for (int r = 1; r < c->size; r++)
		reduce(recvbuf, all + r * n, count, type, op);
	free(all);
	return MPI_SUCCESS;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out)
{
	struct comm *c = get(comm), *n = NULL;
	int mine[2] = { color, key }, *all = malloc(sizeof(mine) * c->size), slot;
	char parent[sizeof(c->name)];

	exchange(c, mine, sizeof(mine), all);
	*out = MPI_COMM_NULL;
	if (color == MPI_UNDEFINED)
		goto out;
	for (slot = 1; slot < MAX_COMMS && comms[slot].used; slot++)
		;
	if (slot == MAX_COMMS)
		die("too many communicators");
	n = &comms[slot];
	memset(n, 0, sizeof(*n));
	n->world = calloc(c->size, sizeof(int));
	/* members ordered by (key, old rank), as MPI orders them */
	for (;;) {
		int best = -1;

		for (int r = 0; r < c->size; r++) {
			int taken = 0;

			if (all[2 * r] != color)
				continue;
			for (int i = 0; i < n->size; i++)
				taken |= n->world[i] == c->world[r];
			if (!taken && (best < 0 || all[2 * r + 1] < all[2 * best + 1]))
				best = r;
		}
		if (best < 0)
			break;
		if (best == c->rank)
			n->rank = n->size;
		n->world[n->size++] = c->world[best];
	}
	n->used = 1;
	memcpy(parent, c->name, sizeof(parent));
	if (snprintf(n->name, sizeof(n->name), "%.40s-%d.%d", parent, c->nsplits, color) >=
	    (int)sizeof(n->name))
		die("communicator name too long");
	*out = slot;
out:
	c->nsplits++;
	free(all);
	return MPI_SUCCESS;
}

int MPI_Comm_free(MPI_Comm *comm)
{
	if (*comm > 0 && *comm < MAX_COMMS) {
		free(comms[*comm].world);
		comms[*comm].used = 0;
	}
	*comm = MPI_COMM_NULL;
	return MPI_SUCCESS;
}
