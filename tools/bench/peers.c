/* SPDX-License-Identifier: MIT */
/*
 * r2ccl-bench --peer: runs the same op, type, reduction, root, sizes and
 * iteration counts on a peer library, on this host's ranks, and prints the
 * peer's table and the ratio table r2ccl/peer.
 *
 *  - gloo: tools/peers/gloo_peer, one process per rank forked here, rendezvous
 *    through a Gloo FileStore directory (shared by all hosts: the network
 *    namespaces of tests/cluster share the filesystem), TCP on --peer-addr.
 *  - mpi / mpi-tcp: tools/peers/mpi_peer under
 *    `mpirun --allow-run-as-root --oversubscribe -np K` (mpi-tcp adds
 *    `--mca btl tcp,self`; $R2CCL_MPIRUN names mpirun, $R2CCL_MPIRUN_ARGS adds
 *    arguments, split at spaces). One host only.
 *
 * The peer programs print, on their global rank 0, one line per size:
 *   r2peer op=OP type=T redop=R root=N ranks=N size=B count=C time_us=T algbw=A busbw=B wrong=W
 * (size and count as in r2ccl-bench's table; wrong -1 when not checked).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define MAX_ARGS (64 + BENCH_MAX_SIZES)

int peer_find_program(const char *name, char *out, size_t outlen)
{
	char dirs[4][PATH_MAX];
	int nd = 0;
	const char *env = getenv("R2CCL_PEER_DIR");
	if (env && *env)
		snprintf(dirs[nd++], PATH_MAX, "%s", env);
#ifdef R2_PEER_DIR
	snprintf(dirs[nd++], PATH_MAX, "%s", R2_PEER_DIR);
#endif
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = 0;
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0;
			if (snprintf(dirs[nd], PATH_MAX, "%s/peers", exe) < PATH_MAX)
				nd++;
			if (snprintf(dirs[nd], PATH_MAX, "%s/../libexec/r2ccl", exe) < PATH_MAX)
				nd++;
		}
	}
	for (int i = 0; i < nd; i++) {
		if ((size_t)snprintf(out, outlen, "%s/%s", dirs[i], name) >= outlen)
			continue;
		if (!access(out, X_OK))
			return 0;
	}
	snprintf(out, outlen, "%s", name);
	return -ENOENT;
}

static const char *field(const char *line, const char *key)
{
	size_t kl = strlen(key);
	for (const char *p = line; (p = strstr(p, key)); p += kl)
		if ((p == line || p[-1] == ' ') && p[kl] == '=')
			return p + kl + 1;
	return NULL;
}

int peer_parse_line(const char *line, struct peer_row *row)
{
	const char *v;
	if (strncmp(line, "r2peer ", 7))
		return -1;
	struct peer_row r = { .wrong = -1 };
	if (!(v = field(line, "size")) || sscanf(v, "%zu", &r.size) != 1)
		return -1;
	if (!(v = field(line, "count")) || sscanf(v, "%zu", &r.count) != 1)
		return -1;
	if (!(v = field(line, "time_us")) || sscanf(v, "%lf", &r.time_us) != 1)
		return -1;
	if (!(v = field(line, "algbw")) || sscanf(v, "%lf", &r.algbw) != 1)
		return -1;
	if (!(v = field(line, "busbw")) || sscanf(v, "%lf", &r.busbw) != 1)
		return -1;
	if ((v = field(line, "wrong")))
		sscanf(v, "%lld", &r.wrong);
	if ((v = field(line, "p50_us")))
		sscanf(v, "%lf", &r.p50_us);
	if ((v = field(line, "p99_us")))
		sscanf(v, "%lf", &r.p99_us);
	*row = r;
	return 0;
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ull;
	}
	return h;
}

static void rm_store(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	char p[PATH_MAX];
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(dir);
}

/* The common flags of both peer programs. */
static int common_args(const struct bench_opts *o, const size_t *sizes, int nsizes, char **argv,
		       int n, char bufs[][32])
{
	int b = 0;
#define ADD(s) (argv[n++] = (char *)(s))
#define ADDF(...) (snprintf(bufs[b], 32, __VA_ARGS__), argv[n++] = bufs[b++])
	ADD("-o");
	ADD(bench_op_name(o->op));
	ADD("-d");
	ADD(bench_type_name(o->dtype));
	ADD("-r");
	ADD(bench_redop_name(o->redop));
	ADD("-R");
	ADDF("%d", o->root);
	ADD("-n");
	ADDF("%d", o->iters);
	ADD("-w");
	ADDF("%d", o->warmup);
	ADD("-c");
	ADDF("%d", o->check);
	for (int i = 0; i < nsizes && n < MAX_ARGS - 1; i++)
		ADDF("%zu", sizes[i]);
	argv[n] = NULL;
	return n;
#undef ADD
#undef ADDF
}

/* Reads "r2peer" lines from fd until EOF or the deadline. */
static int read_rows(int fd, double deadline, struct peer_row *rows, int maxrows, int *nrows,
		     int echo)
{
	char buf[8192];
	size_t have = 0;
	for (;;) {
		double left = deadline - mono_s();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			continue;
		ssize_t got = read(fd, buf + have, sizeof(buf) - 1 - have);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return 0;
		have += (size_t)got;
		buf[have] = 0;
		char *line = buf, *nl;
		while ((nl = strchr(line, '\n'))) {
			*nl = 0;
			struct peer_row row;
			if (!peer_parse_line(line, &row)) {
				if (*nrows < maxrows)
					rows[(*nrows)++] = row;
			} else if (echo && *line) {
				fprintf(stderr, "peer: %s\n", line);
			}
			line = nl + 1;
		}
		have = strlen(line);
		memmove(buf, line, have);
		if (have == sizeof(buf) - 1)
			have = 0; /* an absurdly long line: drop it */
	}
}

/* Waits for the pids (or kills their process group at the deadline). */
static int reap(pid_t pgid, pid_t *pids, int n, double deadline)
{
	int bad = 0, left = n;
	bool killed = false;
	while (left > 0) {
		int st;
		pid_t pid = waitpid(-pgid, &st, WNOHANG);
		if (pid > 0) {
			for (int i = 0; i < n; i++)
				if (pids[i] == pid) {
					pids[i] = 0;
					left--;
					if (!WIFEXITED(st) || WEXITSTATUS(st))
						bad = 1;
				}
			continue;
		}
		if (pid < 0 && errno != EINTR)
			break;
		if (!killed && mono_s() > deadline) {
			kill(-pgid, SIGKILL);
			killed = true;
			bad = 1;
		}
		usleep(10 * 1000);
	}
	return bad ? -EIO : 0;
}

/* One peer run: its inputs, the pipe rank 0's output comes through, where
 * its rows and description go. */
struct peer_job {
	const struct bench_opts *o;
	const size_t *sizes;
	int nsizes;
	const char *prog;
	int p[2];
	double deadline;
	struct peer_row *rows;
	int maxrows;
	char *desc;
	size_t desclen;
};

/* The MPI peer: mpirun -np K on this host, its output parsed. */
static int run_mpi(struct peer_job *j)
{
	const struct bench_opts *o = j->o;
	char *argv[MAX_ARGS + 16], bufs[MAX_ARGS][32];
	int k = o->local_ranks, nrows = 0, err = 0;
	int n = 0;
	const char *mpirun = getenv("R2CCL_MPIRUN");
	char kbuf[16], *extra = NULL;
	snprintf(kbuf, sizeof(kbuf), "%d", k);
	argv[n++] = (char *)(mpirun && *mpirun ? mpirun : "mpirun");
	argv[n++] = "--allow-run-as-root";
	argv[n++] = "--oversubscribe";
	argv[n++] = "-np";
	argv[n++] = kbuf;
	if (!strcmp(o->peer, "mpi-tcp")) {
		argv[n++] = "--mca";
		argv[n++] = "btl";
		argv[n++] = "tcp,self";
	}
	const char *ea = getenv("R2CCL_MPIRUN_ARGS");
	if (ea && *ea && (extra = strdup(ea)))
		for (char *s, *t = strtok_r(extra, " ", &s); t && n < 16;
		     t = strtok_r(NULL, " ", &s))
			argv[n++] = t;
	argv[n++] = (char *)j->prog;
	common_args(o, j->sizes, j->nsizes, argv, n, bufs);
	snprintf(j->desc, j->desclen, "mpi (Open MPI %s, mpirun -np %d)",
		 strcmp(o->peer, "mpi-tcp") ? "shared memory" : "tcp btl", k);
	pid_t pid = fork();
	if (pid < 0) {
		free(extra);
		close(j->p[0]);
		close(j->p[1]);
		return -errno;
	}
	if (pid == 0) {
		setpgid(0, 0);
		dup2(j->p[1], 1);
		close(j->p[1]);
		execvp(argv[0], argv);
		fprintf(stderr, "r2ccl-bench: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid);
	free(extra);
	close(j->p[1]);
	err = read_rows(j->p[0], j->deadline, j->rows, j->maxrows, &nrows, 1);
	close(j->p[0]);
	int r = reap(pid, &pid, 1, err ? 0 : j->deadline);
	if (err == -ETIMEDOUT)
		snprintf(j->desc, j->desclen, "mpi timed out after %g s", o->peer_timeout_s);
	else if (r)
		snprintf(j->desc, j->desclen, "mpirun failed (its messages are above)");
	return err ? err : r ? r : nrows;
}

/* Gloo: the store directory, shared by every host of this run (made here
 * when missing). 0, or a negative errno with desc saying why. */
static int gloo_store(const struct bench_opts *o, const char *uid_hex, char *store,
		      size_t storelen, char *desc, size_t desclen)
{
	char tag[20];
	snprintf(tag, sizeof(tag), "%016llx", (unsigned long long)fnv1a(uid_hex ? uid_hex : ""));
	if (o->peer_store) {
		snprintf(store, storelen, "%s/r2ccl-gloo-%s", o->peer_store, tag);
	} else if (o->uid_file) {
		char d[PATH_MAX];
		snprintf(d, sizeof(d), "%s", o->uid_file);
		char *slash = strrchr(d, '/');
		if (slash)
			*slash = 0;
		else
			snprintf(d, sizeof(d), ".");
		if (snprintf(store, storelen, "%s/.r2ccl-gloo-%s", d, tag) >= (int)storelen) {
			snprintf(desc, desclen, "path too long: %s", d);
			return -ENAMETOOLONG;
		}
	} else {
		snprintf(store, storelen, "/tmp/r2ccl-gloo-%d-%s", (int)getpid(), tag);
	}
	if (mkdir(store, 0700) && errno != EEXIST) {
		snprintf(desc, desclen, "cannot create %s: %s", store, strerror(errno));
		return -errno;
	}
	return 0;
}

/* The Gloo peer: this host's ranks, rank 0's output parsed. */
static int run_gloo(struct peer_job *j, const char *uid_hex)
{
	const struct bench_opts *o = j->o;
	char *argv[MAX_ARGS + 16], bufs[MAX_ARGS][32];
	int k = o->local_ranks, nrows = 0, err = 0;
	char store[PATH_MAX];
	bool own_store;

	err = gloo_store(o, uid_hex, store, sizeof(store), j->desc, j->desclen);
	if (err) {
		close(j->p[0]);
		close(j->p[1]);
		return err;
	}
	own_store = o->first_rank == 0;
	snprintf(j->desc, j->desclen, "gloo (Gloo TCP on %s, %d ranks, store %s)", o->peer_addr,
		 o->nranks, store);

	pid_t pgid = 0, *pids = calloc((size_t)k, sizeof(pid_t));
	if (!pids) {
		close(j->p[0]);
		close(j->p[1]);
		return -ENOMEM;
	}
	char rbuf[16], nbuf[16];
	int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	for (int i = 0; i < k; i++) {
		int rank = o->first_rank + i, n = 0;
		snprintf(rbuf, sizeof(rbuf), "%d", rank);
		snprintf(nbuf, sizeof(nbuf), "%d", o->nranks);
		argv[n++] = (char *)j->prog;
		argv[n++] = "--rank";
		argv[n++] = rbuf;
		argv[n++] = "--nranks";
		argv[n++] = nbuf;
		argv[n++] = "--store";
		argv[n++] = store;
		argv[n++] = "--addr";
		argv[n++] = (char *)o->peer_addr;
		common_args(o, j->sizes, j->nsizes, argv, n, bufs);
		pid_t pid = fork();
		if (pid < 0) {
			err = -errno;
			break;
		}
		if (pid == 0) {
			setpgid(0, pgid);
			dup2(rank == 0 ? j->p[1] : devnull, 1);
			close(j->p[1]);
			execv((char *)j->prog, argv);
			fprintf(stderr, "r2ccl-bench: cannot run %s: %s\n", (char *)j->prog, strerror(errno));
			_exit(127);
		}
		if (!pgid)
			pgid = pid;
		setpgid(pid, pgid);
		pids[i] = pid;
	}
	if (devnull >= 0)
		close(devnull);
	close(j->p[1]);
	if (!err)
		err = read_rows(j->p[0], j->deadline, j->rows, j->maxrows, &nrows, 1);
	close(j->p[0]);
	int r = pgid ? reap(pgid, pids, k, err ? 0 : j->deadline) : -ECHILD;
	free(pids);
	if (own_store && !err && !r)
		rm_store(store);
	else if (!o->uid_file && !o->peer_store)
		rm_store(store);
	if (err == -ETIMEDOUT)
		snprintf(j->desc, j->desclen, "gloo timed out after %g s (store %s)", o->peer_timeout_s, store);
	else if (err || r)
		snprintf(j->desc, j->desclen, "a gloo rank failed (its messages are above; store %s)", store);
	return err ? err : r ? r : nrows;
}

int peer_run(const struct bench_opts *o, const size_t *sizes, int nsizes, const char *uid_hex,
	     struct peer_row *rows, int maxrows, char *desc, size_t desclen)
{
	char prog[PATH_MAX];
	bool gloo = !strcmp(o->peer, "gloo");
	const char *pname = gloo ? "gloo_peer" : "mpi_peer";
	struct peer_job j = { .o = o, .sizes = sizes, .nsizes = nsizes, .prog = prog,
			      .deadline = mono_s() + o->peer_timeout_s, .rows = rows,
			      .maxrows = maxrows, .desc = desc, .desclen = desclen };

	if (peer_find_program(pname, prog, sizeof(prog))) {
		snprintf(desc, desclen,
			 "%s not found (built only when %s is installed; set R2CCL_PEER_DIR)", pname,
			 gloo ? "libgloo-dev" : "libopenmpi-dev");
		return -ENOENT;
	}
	int *p = j.p;
	if (pipe(p)) {
		snprintf(desc, desclen, "pipe: %s", strerror(errno));
		return -errno;
	}
	fcntl(p[0], F_SETFD, FD_CLOEXEC);
	fflush(NULL);

	return gloo ? run_gloo(&j, uid_hex) : run_mpi(&j);
}

void peer_print(const struct bench_opts *o, const char *desc, const struct peer_row *pr, int np,
		const struct bench_row *rr, int nr)
{
	const char *pn = o->peer;
	const char *redop = bench_op_has_redop(o->op) || o->op == BOP_SENDRECV ?
				    bench_redop_name(o->redop) : "none";
	int root = bench_op_has_root(o->op) ? o->root : -1;

	printf("#\n# Peer: %s, %s, out-of-place; rows start with '#peer'\n", desc,
	       bench_op_name(o->op));
	printf("#      %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s\n", "size", "count", "type", "redop",
	       "root", "time", "algbw", "busbw", "#wrong");
	printf("#      %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "", "",
	       "(us)", "(GB/s)", "(GB/s)", "");
	double bw = 0;
	for (int i = 0; i < np; i++) {
		char ts[32], ws[32];
		bench_format_time(ts, sizeof(ts), pr[i].time_us);
		if (pr[i].wrong < 0)
			snprintf(ws, sizeof(ws), "%5s", "N/A");
		else
			snprintf(ws, sizeof(ws), "%5lld", pr[i].wrong);
		printf("#peer  %10zu  %12zu  %8s  %6s  %6i  %7s  %6.2f  %6.2f  %5s\n", pr[i].size,
		       pr[i].count, bench_type_name(o->dtype), redop, root, ts, pr[i].algbw,
		       pr[i].busbw, ws);
		bw += pr[i].busbw;
	}
	printf("# %-20s : %g \n", "Avg bus bandwidth", np ? bw / np : 0.0);
	printf("#\n# Ratio r2ccl/%s (out-of-place): busbw ratio > 1 and time ratio < 1: R2CCL is faster;"
	       " rows start with '#ratio'\n", pn);
	printf("#      %10s  %11s  %11s  %8s  %11s  %11s  %8s\n", "size", "r2ccl busbw", "peer busbw",
	       "ratio", "r2ccl us", "peer us", "ratio");
	for (int i = 0; i < np; i++) {
		const struct bench_row *r = NULL;
		for (int j = 0; j < nr; j++)
			if (rr[j].size == pr[i].size) {
				r = &rr[j];
				break;
			}
		if (!r)
			continue;
		char br[16], tr[16];
		if (pr[i].busbw > 0)
			snprintf(br, sizeof(br), "%8.2f", r->busbw[0] / pr[i].busbw);
		else
			snprintf(br, sizeof(br), "%8s", "-");
		if (pr[i].time_us > 0)
			snprintf(tr, sizeof(tr), "%8.2f", r->time_us[0] / pr[i].time_us);
		else
			snprintf(tr, sizeof(tr), "%8s", "-");
		printf("#ratio %10zu  %11.3f  %11.3f  %8s  %11.1f  %11.1f  %8s\n", pr[i].size,
		       r->busbw[0], pr[i].busbw, br, r->time_us[0], pr[i].time_us, tr);
	}
	printf("#\n");
	fflush(stdout);
}

void pct_print(const struct bench_opts *o, const struct bench_row *rr, int nr,
	       const struct peer_row *prow, int np)
{
	const char *pn = prow && o->peer ? o->peer : NULL;

	printf("#\n# Per-iteration times, rank 0, out-of-place (us); rows start with '#pct'%s\n",
	       pn ? "; ratio: r2ccl p50 / peer p50 (< 1: R2CCL is faster)" : "");
	printf("#      %10s  %10s  %10s", "size", "r2ccl p50", "r2ccl p99");
	if (pn)
		printf("  %10s  %10s  %8s", "peer p50", "peer p99", "ratio");
	printf("\n");
	for (int i = 0; i < nr; i++) {
		const struct peer_row *p = NULL;
		for (int j = 0; pn && j < np; j++)
			if (prow[j].size == rr[i].size && prow[j].p50_us > 0)
				p = &prow[j];
		printf("#pct   %10zu  %10.1f  %10.1f", rr[i].size, rr[i].p50_us[0], rr[i].p99_us[0]);
		if (p)
			printf("  %10.1f  %10.1f  %8.2f", p->p50_us, p->p99_us,
			       rr[i].p50_us[0] / p->p50_us);
		else if (pn)
			printf("  %10s  %10s  %8s", "-", "-", "-");
		printf("\n");
	}
	printf("#\n");
	fflush(stdout);
}
