// SPDX-License-Identifier: MIT
/*
 * Example: N processes on one host form a communicator. The parent forks
 * the ranks first (a client must not cross fork()), then connects as rank 0,
 * makes the unique id and hands it to every child through a pipe. Each rank
 * runs AllReduce, AllGather and Broadcast on r2ccl_mem_alloc buffers, checks
 * the results, and tears down in order: communicator, memory, client.
 *
 *   r2ccld &                   # or the system service
 *   ./onehost 4                # 4 ranks (default 2)
 *
 * Build against an installed libr2ccl:
 *   cc onehost.c $(pkg-config --cflags --libs r2ccl) -o onehost
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <r2ccl.h>

#define COUNT 1024

/* Prints what failed with the library's reason and returns 1. */
static int fail(int rank, const char *what, int err)
{
	fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, what, r2ccl_strerror(err),
		r2ccl_last_error());
	return 1;
}

/* Reads exactly len bytes (the id) from fd. */
static int read_full(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* One rank's whole life, given the id. Returns the exit status. */
static int run_rank(r2ccl_client_t *client, const r2ccl_unique_id_t *id, int nranks, int rank)
{
	r2ccl_comm_t *comm = NULL;
	float *buf = NULL, *all = NULL;
	int r, bad = 0, status = 1;

	/* blocks until every rank has joined (or bootstrap_timeout_ms) */
	r = r2ccl_comm_init_rank(client, &comm, nranks, id, rank);
	if (r < 0)
		return fail(rank, "r2ccl_comm_init_rank", r);
	if ((r = r2ccl_mem_alloc(client, COUNT * sizeof(float), (void **)&buf)) < 0 ||
	    (r = r2ccl_mem_alloc(client, (size_t)nranks * COUNT * sizeof(float), (void **)&all)) <
		    0) {
		fail(rank, "r2ccl_mem_alloc", r);
		goto out;
	}

	/* AllReduce in place: every rank gives rank+1, the sum is n(n+1)/2 */
	for (int i = 0; i < COUNT; i++)
		buf[i] = (float)(rank + 1);
	r = r2ccl_allreduce(comm, buf, buf, COUNT, R2CCL_FLOAT32, R2CCL_SUM);
	if (r < 0) {
		fail(rank, "r2ccl_allreduce", r);
		goto out;
	}
	for (int i = 0; i < COUNT; i++)
		bad += buf[i] != (float)(nranks * (nranks + 1) / 2);

	/* AllGather: block k of `all` is rank k's buffer */
	for (int i = 0; i < COUNT; i++)
		buf[i] = (float)(rank * COUNT + i);
	r = r2ccl_allgather(comm, buf, all, COUNT, R2CCL_FLOAT32);
	if (r < 0) {
		fail(rank, "r2ccl_allgather", r);
		goto out;
	}
	for (int i = 0; i < nranks * COUNT; i++)
		bad += all[i] != (float)i;

	/* Broadcast from the last rank */
	for (int i = 0; i < COUNT; i++)
		buf[i] = rank == nranks - 1 ? (float)(i * 2) : -1.0f;
	r = r2ccl_broadcast(comm, buf, buf, COUNT, R2CCL_FLOAT32, nranks - 1);
	if (r < 0) {
		fail(rank, "r2ccl_broadcast", r);
		goto out;
	}
	for (int i = 0; i < COUNT; i++)
		bad += buf[i] != (float)(i * 2);

	if (bad)
		fprintf(stderr, "rank %d: %d wrong values\n", rank, bad);
	else
		printf("rank %d of %d: allreduce, allgather, broadcast ok\n", rank, nranks);
	status = bad ? 1 : 0;
out:
	/* teardown order: communicator, buffers, then the client (main) */
	r = r2ccl_comm_destroy(comm);
	if (r < 0)
		status = fail(rank, "r2ccl_comm_destroy", r);
	r2ccl_mem_free(client, all);
	r2ccl_mem_free(client, buf);
	return status;
}

int main(int argc, char **argv)
{
	int nranks = argc > 1 ? atoi(argv[1]) : 2;
	int pipes[64][2];
	pid_t pids[64];
	r2ccl_client_t *client = NULL;
	r2ccl_unique_id_t id;
	int r, status = 0;

	if (nranks < 1 || nranks > 64) {
		fprintf(stderr, "usage: %s [nranks 1..64]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* fork the ranks before any client exists */
	for (int k = 1; k < nranks; k++) {
		if (pipe(pipes[k]) < 0) {
			perror("pipe");
			return 1;
		}
		pids[k] = fork();
		if (pids[k] < 0) {
			perror("fork");
			return 1;
		}
		if (pids[k] == 0) {
			close(pipes[k][1]);
			if (read_full(pipes[k][0], &id, sizeof(id)) < 0) {
				fprintf(stderr, "rank %d: no id from rank 0\n", k);
				_exit(1);
			}
			r = r2ccl_connect(NULL, &client);
			if (r < 0)
				_exit(fail(k, "r2ccl_connect", r));
			status = run_rank(client, &id, nranks, k);
			r2ccl_disconnect(client);
			_exit(status);
		}
		close(pipes[k][0]);
	}

	/* rank 0: connect, make the id, send it to the others */
	r = r2ccl_connect(NULL, &client);
	if (r == 0)
		r = r2ccl_get_unique_id(client, &id);
	if (r < 0) {
		fail(0, "r2ccl_connect / r2ccl_get_unique_id", r);
		memset(&id, 0, sizeof(id)); /* the children then fail to join */
		status = 1;
	}
	for (int k = 1; k < nranks; k++) {
		if (status == 0 && write(pipes[k][1], &id, sizeof(id)) != (ssize_t)sizeof(id))
			status = 1;
		close(pipes[k][1]); /* a child reading EOF gives up */
	}
	if (status == 0)
		status = run_rank(client, &id, nranks, 0);
	r2ccl_disconnect(client);
	for (int k = 1; k < nranks; k++) {
		int st = 0;
		if (waitpid(pids[k], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "rank %d failed (status %#x)\n", k, st);
			status = 1;
		}
	}
	if (status == 0)
		printf("all %d ranks ok\n", nranks);
	return status;
}
