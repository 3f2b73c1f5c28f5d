// SPDX-License-Identifier: MIT
/*
 * Example: one rank of a job spread over several hosts (docs/multihost.md).
 * Each host runs its own r2ccld; every rank runs this program against its
 * host's daemon. Rank 0 makes the 128-byte unique id; the others get it
 * from a file on a shared filesystem or from an environment variable that
 * the launcher sets:
 *
 *   id from a file (rank 0 writes it, the others wait for it):
 *     host A:  ./multihost --rank 0 --nranks 2 --id-file /shared/job.id
 *     host B:  ./multihost --rank 1 --nranks 2 --id-file /shared/job.id
 *
 *   id in the environment (hex, 256 characters):
 *     export R2CCL_EXAMPLE_ID=$(./multihost --print-id)   # on rank 0's host
 *     ./multihost --rank R --nranks N                     # every rank
 *
 * Ranks are numbered in contiguous, equal blocks per host: with 2 hosts of
 * 4 ranks, ranks 0-3 on the first host and 4-7 on the second.
 * Each rank runs an AllReduce (sum of rank+1) and checks it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <r2ccl.h>

#define COUNT 4096
#define ID_WAIT_S 60

static int fail(int rank, const char *what, int err)
{
	fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, what, r2ccl_strerror(err),
		r2ccl_last_error());
	return 1;
}

static void id_to_hex(const r2ccl_unique_id_t *id, char *hex)
{
	for (size_t i = 0; i < sizeof(id->internal); i++)
		sprintf(hex + 2 * i, "%02x", (unsigned char)id->internal[i]);
}

static int id_from_hex(const char *hex, r2ccl_unique_id_t *id)
{
	if (strlen(hex) != 2 * sizeof(id->internal))
		return -1;
	for (size_t i = 0; i < sizeof(id->internal); i++) {
		unsigned v;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return -1;
		id->internal[i] = (char)v;
	}
	return 0;
}

/* Rank 0: writes the id to path atomically (a reader never sees half). */
static int write_id(const char *path, const r2ccl_unique_id_t *id)
{
	char tmp[4096];
	int fd;

	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -errno;
	if (write(fd, id, sizeof(*id)) != (ssize_t)sizeof(*id) || fsync(fd) < 0) {
		close(fd);
		unlink(tmp);
		return -EIO;
	}
	close(fd);
	return rename(tmp, path) < 0 ? -errno : 0;
}

/* Other ranks: waits up to ID_WAIT_S for the file. */
static int read_id(const char *path, r2ccl_unique_id_t *id)
{
	for (int i = 0; i < ID_WAIT_S * 10; i++) {
		int fd = open(path, O_RDONLY);
		if (fd >= 0) {
			ssize_t n = read(fd, id, sizeof(*id));
			close(fd);
			return n == (ssize_t)sizeof(*id) ? 0 : -EIO;
		}
		nanosleep(&(struct timespec){ 0, 100000000L }, NULL);
	}
	return -ETIMEDOUT;
}

int main(int argc, char **argv)
{
	const char *id_file = NULL, *env;
	int rank = -1, nranks = -1, print_id = 0, r, status = 1, bad = 0;
	r2ccl_client_t *client = NULL;
	r2ccl_comm_t *comm = NULL;
	r2ccl_unique_id_t id;
	float *buf = NULL;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rank") && i + 1 < argc)
			rank = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--nranks") && i + 1 < argc)
			nranks = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--id-file") && i + 1 < argc)
			id_file = argv[++i];
		else if (!strcmp(argv[i], "--print-id"))
			print_id = 1;
		else {
			fprintf(stderr, "usage: %s --print-id | --rank R --nranks N "
					"[--id-file PATH]\n", argv[0]);
			return 2;
		}
	}
	if (!print_id && (nranks < 1 || rank < 0 || rank >= nranks)) {
		fprintf(stderr, "%s: --rank and --nranks are needed (0 <= rank < nranks)\n",
			argv[0]);
		return 2;
	}

	r = r2ccl_connect(NULL, &client);
	if (r < 0)
		return fail(rank, "r2ccl_connect", r);

	/* the id: made by rank 0 (or --print-id), read by the others */
	env = getenv("R2CCL_EXAMPLE_ID");
	if (print_id) {
		char hex[2 * R2CCL_UNIQUE_ID_BYTES + 1];
		r = r2ccl_get_unique_id(client, &id);
		if (r < 0) {
			fail(0, "r2ccl_get_unique_id", r);
			goto out;
		}
		id_to_hex(&id, hex);
		printf("%s\n", hex);
		status = 0;
		goto out;
	} else if (env && env[0]) {
		if (id_from_hex(env, &id) < 0) {
			fprintf(stderr, "rank %d: R2CCL_EXAMPLE_ID is not 256 hex digits\n", rank);
			goto out;
		}
	} else if (!id_file) {
		fprintf(stderr, "rank %d: give --id-file or set R2CCL_EXAMPLE_ID\n", rank);
		goto out;
	} else if (rank == 0) {
		r = r2ccl_get_unique_id(client, &id);
		if (r == 0)
			r = write_id(id_file, &id);
		if (r < 0) {
			fail(rank, "making the id", r);
			goto out;
		}
	} else if ((r = read_id(id_file, &id)) < 0) {
		fprintf(stderr, "rank %d: no id in %s: %s\n", rank, id_file, strerror(-r));
		goto out;
	}

	/* blocks until all nranks ranks, on every host, have joined */
	r = r2ccl_comm_init_rank(client, &comm, nranks, &id, rank);
	if (r < 0) {
		fail(rank, "r2ccl_comm_init_rank", r);
		goto out;
	}
	r = r2ccl_mem_alloc(client, COUNT * sizeof(float), (void **)&buf);
	if (r < 0) {
		fail(rank, "r2ccl_mem_alloc", r);
		goto out;
	}
	for (int i = 0; i < COUNT; i++)
		buf[i] = (float)(rank + 1);
	r = r2ccl_allreduce(comm, buf, buf, COUNT, R2CCL_FLOAT32, R2CCL_SUM);
	if (r < 0) {
		fail(rank, "r2ccl_allreduce", r);
		goto out;
	}
	for (int i = 0; i < COUNT; i++)
		bad += buf[i] != (float)(nranks * (nranks + 1) / 2);
	if (bad) {
		fprintf(stderr, "rank %d: %d wrong values\n", rank, bad);
		goto out;
	}
	printf("rank %d of %d: allreduce ok\n", rank, nranks);
	status = 0;
out:
	if (comm && (r = r2ccl_comm_destroy(comm)) < 0)
		status = fail(rank, "r2ccl_comm_destroy", r);
	r2ccl_mem_free(client, buf);
	r2ccl_disconnect(client);
	if (status == 0 && rank == 0 && id_file)
		unlink(id_file); /* every rank has joined: the id file is no longer needed */
	return status;
}
