/* SPDX-License-Identifier: MIT */
/*
 * r2ccl-bench: nccl-tests for R2CCL.
 *
 *   r2ccl-bench OP [nccl-tests flags] [--local-ranks K] [--nranks N --first-rank R
 *               --uid-file PATH] [--peer mpi|mpi-tcp|gloo] ...
 *
 * Process model: the bench forks K rank processes (this host's ranks
 * first_rank .. first_rank+K-1); each connects to r2ccld on its own, joins the
 * communicator and runs the sizes. The parent creates the unique id when it
 * holds rank 0 (and writes it to --uid-file for the other hosts) or waits for
 * the uid file otherwise, and passes the id to its children through one pipe
 * each. The process holding rank 0 prints the table in nccl-tests' columns;
 * after the children exit, the parent runs the peer (--peer), prints its table
 * and the ratio table, and exits non-zero if any value was wrong or any rank
 * failed. `r2ccl-bench --help` documents every flag.
 *
 * This file: the parent process (fork the ranks, the unique id, wait for the
 * ranks, the peer run); bench.h lists the others.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "gpumem.h"
#include "r2ccl.h"
#include "uidfile.h"



/* ------------------------------------------------------------------ main */

/* Forks this host's ranks (before the parent has a session, which they must
 * not inherit); each waits for the unique id on its pipe (wfd[i]). */
static int fork_ranks(const struct bench_opts *o, struct shared_page *sh, int *wfd, pid_t *pids)
{
	fflush(NULL);
	for (int i = 0; i < o->local_ranks; i++) {
		int p[2];
		if (pipe(p)) {
			perror("r2ccl-bench: pipe");
			return EXIT_WRONG;
		}
		pid_t pid = fork();
		if (pid < 0) {
			perror("r2ccl-bench: fork");
			return EXIT_WRONG;
		}
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(p[1]);
			for (int j = 0; j < i; j++)
				close(wfd[j]);
			r2ccl_unique_id_t id;
			size_t got = 0;
			while (got < sizeof(id)) {
				ssize_t r = read(p[0], (char *)&id + got, sizeof(id) - got);
				if (r < 0 && errno == EINTR)
					continue;
				if (r <= 0)
					_exit(EXIT_WRONG); /* the parent failed; it says why */
				got += (size_t)r;
			}
			close(p[0]);
			_exit(bench_rank_main(o, o->first_rank + i, &id, sh));
		}
		close(p[0]);
		wfd[i] = p[1];
		pids[i] = pid;
		sh->pids[i] = pid;
	}
	return 0;
}

/* The unique id: created (and written to --uid-file) on the host of rank 0,
 * read from --uid-file elsewhere. 0 or EXIT_WRONG after saying why. */
static int get_uid(const struct bench_opts *o, r2ccl_client_t **client, r2ccl_unique_id_t *id)
{
	int err;

	if (o->first_rank == 0) {
		r2ccl_connect_opts_t copts = R2CCL_CONNECT_OPTS_INITIALIZER;
		copts.socket_path = o->socket_path;
		copts.timeout_ms = o->timeout_ms;
		copts.client_name = "r2ccl-bench";
		err = r2ccl_connect(&copts, client);
		if (err) {
			const char *path = o->socket_path ? o->socket_path : getenv("R2CCL_SOCKET");
			fprintf(stderr, "r2ccl-bench: cannot connect to r2ccld at %s: %s\n",
				path ? path : R2CCL_DEFAULT_SOCKET, r2ccl_strerror(err));
			return EXIT_WRONG;
		} else if ((err = r2ccl_get_unique_id(*client, id))) {
			fprintf(stderr, "r2ccl-bench: r2ccl_get_unique_id: %s\n", r2ccl_strerror(err));
			return EXIT_WRONG;
		} else if (o->uid_file && (err = r2_uid_write(o->uid_file, id))) {
			fprintf(stderr, "r2ccl-bench: cannot write %s: %s\n", o->uid_file, strerror(-err));
			return EXIT_WRONG;
		}
		return 0;
	}
	err = r2_uid_wait(o->uid_file, o->uid_timeout_s, id);
	if (err == -ETIMEDOUT) {
		fprintf(stderr,
			"r2ccl-bench: no unique id in %s after %g s (is the host with rank 0 running?)\n",
			o->uid_file, o->uid_timeout_s);
		return EXIT_WRONG;
	} else if (err) {
		fprintf(stderr, "r2ccl-bench: cannot read %s: %s\n", o->uid_file,
			err == -EINVAL ? "not a unique id" : strerror(-err));
		return EXIT_WRONG;
	}
	return 0;
}

/* Waits for the ranks; once one fails, gives the others 30 s to notice.
 * Returns rc, or EXIT_WRONG when a rank failed. */
static int wait_ranks(const struct bench_opts *o, pid_t *pids, int rc)
{
	int k = o->local_ranks, left = k, failed = 0;
	double kill_at = 0;

	while (left > 0) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid > 0) {
			for (int i = 0; i < k; i++)
				if (pids[i] == pid) {
					pids[i] = 0;
					left--;
					int bad = !WIFEXITED(st) || WEXITSTATUS(st);
					if (WIFEXITED(st) && WEXITSTATUS(st) == EXIT_RANK_WRONG) {
						rc = EXIT_WRONG; /* the table says it */
						continue;
					}
					if (bad && !rc) /* rc: the parent already said why */
						fprintf(stderr, "r2ccl-bench: rank %d %s %d\n", o->first_rank + i,
							WIFEXITED(st) ? "exited with status" : "killed by signal",
							WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
					if (bad && !failed) {
						failed = 1;
						kill_at = bench_now_us() + 30e6;
					}
				}
			continue;
		}
		if (pid < 0 && errno != EINTR)
			break;
		if (failed && bench_now_us() > kill_at) {
			for (int i = 0; i < k; i++)
				if (pids[i] > 0) {
					fprintf(stderr, "r2ccl-bench: killing rank %d\n", o->first_rank + i);
					kill(pids[i], SIGKILL);
				}
			kill_at = bench_now_us() + 3600e6;
		}
		usleep(20 * 1000);
	}
	return failed ? EXIT_WRONG : rc;
}

/* After the ranks: --calibrate, then the peer run and its tables. */
static int after_ranks(const struct bench_opts *o, const struct shared_page *sh,
		       const char *uid_hex, int rc)
{
	if (o->calibrate_file && o->first_rank == 0 && !rc &&
	    bench_calibrate(o, sh->rows, sh->nrows))
		rc = EXIT_WRONG;
	struct peer_row prow[BENCH_MAX_SIZES];
	int np = -1;
	if (o->peer && uid_hex[0]) {
		size_t sizes[BENCH_MAX_SIZES];
		int nsizes = bench_size_list(o, sizes, BENCH_MAX_SIZES);
		char desc[256];
		np = peer_run(o, sizes, nsizes, uid_hex, prow, BENCH_MAX_SIZES, desc, sizeof(desc));
		if (np < 0) {
			fprintf(stderr, "r2ccl-bench: peer %s failed: %s\n", o->peer, desc);
			rc = EXIT_WRONG;
		} else if (o->first_rank == 0) {
			peer_print(o, desc, prow, np, sh->rows, sh->nrows);
		}
	}
	if (o->pct && o->first_rank == 0 && !rc)
		pct_print(o, sh->rows, sh->nrows, np >= 0 ? prow : NULL, np);
	return rc;
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	if (bench_parse_args(argc, argv, &o))
		return EXIT_USAGE;
	setvbuf(stdout, NULL, _IOLBF, 0);

	int k = o.local_ranks;
	struct shared_page *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		perror("r2ccl-bench: mmap");
		return EXIT_WRONG;
	}
	memset(sh, 0, sizeof(*sh));
	gethostname(sh->host, sizeof(sh->host) - 1);

	int *wfd = calloc((size_t)k, sizeof(int));
	pid_t *pids = calloc((size_t)k, sizeof(pid_t));
	if (!wfd || !pids)
		return EXIT_WRONG;
	if (fork_ranks(&o, sh, wfd, pids))
		return EXIT_WRONG;
	signal(SIGPIPE, SIG_IGN);

	r2ccl_unique_id_t id;
	r2ccl_client_t *client = NULL;
	char uid_hex[R2_UID_HEX_LEN + 1] = "";
	int rc = get_uid(&o, &client, &id);
	if (!rc)
		r2_uid_to_hex(&id, uid_hex);
	for (int i = 0; i < k; i++) {
		if (!rc && write(wfd[i], &id, sizeof(id)) != (ssize_t)sizeof(id))
			fprintf(stderr, "r2ccl-bench: rank %d did not take its id\n", o.first_rank + i);
		close(wfd[i]); /* on failure: EOF, the child exits */
	}

	rc = wait_ranks(&o, pids, rc);
	r2ccl_disconnect(client);
	if (o.first_rank == 0 && o.uid_file && !rc)
		unlink(o.uid_file); /* every rank joined: nobody needs it any more */
	rc = after_ranks(&o, sh, uid_hex, rc);
	free(wfd);
	free(pids);
	return rc;
}
