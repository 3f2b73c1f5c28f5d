/* SPDX-License-Identifier: MIT */
/*
 * r2ccl-bench internals: r2ccl-bench.c (the process that forks the ranks),
 * args.c (the command line), ops.c (names, sizes), data.c (inputs and their
 * check), rank.c (one rank's run), table.c (the nccl-tests table), peers.c
 * (running the Gloo/MPI peer programs and printing their table and the
 * ratio table), calibrate.c.
 */
#ifndef R2CCL_BENCH_H
#define R2CCL_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "r2ccl.h"

enum bench_op {
	BOP_ALLREDUCE = 0,
	BOP_ALLGATHER,
	BOP_REDUCESCATTER,
	BOP_BROADCAST,
	BOP_REDUCE,
	BOP_SENDRECV,
	BOP_COUNT
};

#define BENCH_MAX_SIZES 256
#define MAX_LOCAL 1024 /* rank processes on one host */

#define EXIT_WRONG 1      /* wrong values, or a rank failed */
#define EXIT_USAGE 2
#define EXIT_RANK_WRONG 4 /* a rank's status: it ran, and some values were wrong */

/* Everything the command line decides. */
struct bench_opts {
	enum bench_op op;
	size_t minbytes, maxbytes, stepbytes;
	unsigned long stepfactor; /* > 1: multiply; else add stepbytes */
	int iters, warmup, check;
	r2ccl_dtype_t dtype;
	r2ccl_redop_t redop;
	int root;
	int local_ranks; /* K rank processes forked on this host */
	int nranks;      /* N ranks in the communicator (all hosts) */
	int first_rank;  /* this host's ranks are first_rank .. first_rank+K-1 */
	const char *uid_file;
	double uid_timeout_s;
	const char *trace_file;
	bool trace_all; /* every rank writes trace_file.<rank> */
	bool pct;       /* --pct: rank 0's p50 / p99 (and the peer's) after the tables */
	const char *socket_path;
	const char *peer;      /* NULL, "mpi", "mpi-tcp", "gloo" */
	const char *peer_addr; /* gloo: this host's address (default 127.0.0.1) */
	const char *peer_store; /* gloo: shared rendezvous directory, or NULL */
	double peer_timeout_s;
	int timeout_ms; /* r2ccl_connect_opts_t.timeout_ms */
	bool gpu;       /* GPU buffers, stream-ordered calls (--gpu) */
	const char *calibrate_file; /* sendrecv --calibrate FILE */
	int gpu_dev;    /* --gpu=D, or -1: the local rank index */
};

/* One printed row (one size), as rank 0 measured it. */
struct bench_row {
	size_t size;   /* nccl-tests' "size" column: max(send bytes, recv bytes) */
	size_t count;  /* nccl-tests' "count" column: the count passed to the call */
	double time_us[2]; /* [0] out-of-place, [1] in-place */
	double p50_us[2], p99_us[2]; /* of rank 0's timed iterations */
	double algbw[2], busbw[2];
	long long wrong[2]; /* -1: not checked */
};

/* Sizes of one step for op, nranks, as nccl-tests computes them. */
struct bench_sizes {
	size_t count;      /* count argument of the call (per-rank for AG/RS) */
	size_t send_bytes; /* bytes in sendbuff */
	size_t recv_bytes; /* bytes in recvbuff */
	size_t size;       /* printed size: max(send, recv) */
};

/* Helpers in r2ccl-bench.c, used by peers.c too. */
const char *bench_op_name(enum bench_op op);
const char *bench_type_name(r2ccl_dtype_t t); /* nccl-tests name: "float", "half", ... */
const char *bench_redop_name(r2ccl_redop_t op);
bool bench_op_has_redop(enum bench_op op);
bool bench_op_has_root(enum bench_op op);
double bench_bus_factor(enum bench_op op, int nranks);
void bench_step_sizes(enum bench_op op, size_t loop_bytes, size_t elsize, int nranks,
		      struct bench_sizes *out);
/* The loop sizes (nccl-tests: minbytes, *stepfactor or +stepbytes, <= maxbytes). */
int bench_size_list(const struct bench_opts *o, size_t *sizes, int max);
/* "%7.2f" / "%7.1f" / "%7.0f" like nccl-tests. */
void bench_format_time(char *buf, size_t len, double us);

/* ops.c */
size_t bench_type_size(r2ccl_dtype_t t);
bool bench_type_is_float(r2ccl_dtype_t t);
int bench_parse_type(const char *s, r2ccl_dtype_t *t);        /* 0 or -1 */
int bench_parse_redop(const char *s, r2ccl_redop_t *op);      /* 0 or -1 */
enum bench_op bench_parse_op(const char *s);                  /* BOP_COUNT: none */
double bench_now_us(void);                                    /* CLOCK_MONOTONIC */

/* args.c: the command line into *o; 0, or -1 after saying why. */
int bench_parse_args(int argc, char **argv, struct bench_opts *o);

/* data.c */
/* ------------------------------------------------------------ data pattern
 *
 * Every input element is a small positive integer, a hash of (rank, global
 * element index g), so that every result is exact in every type whatever the
 * order of the reduction:
 *  - reductions (sum, min, max, avg): 1..M with M = min(5, L/nranks), L the
 *    largest integer every partial sum may reach exactly: int8 127, uint8 255,
 *    bfloat16 256, half 2048 (others: 5). Beyond L ranks the values are all 1
 *    and integer sums wrap as the checker expects (two's complement).
 *  - prod: 1 or 2, and 2 only on ranks 0..5 (products <= 2^6 = 64).
 *  - copies (allgather, broadcast, sendrecv): 1..101.
 * avg on floats is compared with a relative tolerance of 2 units in the last
 * place of the type (the division is the only rounding); everything else must
 * match bit for bit.
 */
struct pattern {
	r2ccl_dtype_t t;
	r2ccl_redop_t op;
	int n;
	uint32_t m; /* reduction values are 1..m */
	bool reduce;
};


struct checker {
	const struct pattern *p;
	int rank; /* checking rank (for messages) */
	const char *what;
	long long wrong;
};

void bench_pattern_init(struct pattern *p, r2ccl_dtype_t t, r2ccl_redop_t op, int n,
			bool reduce);
/* Fills count elements of buf with rank's inputs for global indices g0.. */
void bench_fill(const struct pattern *p, void *buf, size_t count, int rank, uint64_t g0);
/* Reduced values at global indices g0.. in buf[0..count). */
void bench_check_reduced(struct checker *c, const void *buf, size_t count, uint64_t g0);
/* Rank src's copy values at global indices g0.. in buf[0..count). */
void bench_check_copied(struct checker *c, const void *buf, size_t count, int src, uint64_t g0);

/* What the rank processes share with the parent (a MAP_SHARED page). */
struct shared_page {
	int nrows;
	struct bench_row rows[BENCH_MAX_SIZES];
	pid_t pids[MAX_LOCAL];
	char host[256];
};

/* rank.c: one rank process's whole run; its exit status. */
int bench_rank_main(const struct bench_opts *o, int rank, const r2ccl_unique_id_t *uid,
		    struct shared_page *sh);

/* table.c */
void bench_print_header(const struct bench_opts *o, const struct shared_page *sh);
void bench_print_row(const struct bench_opts *o, const struct bench_row *row);
void bench_print_summary(long long failed_checks, double bw_sum, int bw_count);

/* calibrate.c: fits the cost model to rank 0's rows, writes the config. */
int bench_calibrate(const struct bench_opts *o, const struct bench_row *rows, int n);

/* peers.c */
struct peer_row {
	size_t size, count;
	double time_us, algbw, busbw;
	double p50_us, p99_us; /* 0: the peer did not say */
	long long wrong; /* -1: the peer did not check */
};

/* Runs the peer named o->peer on this host's ranks for the given loop sizes.
 * uid_hex (may be NULL) names the run, for the shared Gloo store directory.
 * Returns the number of rows parsed from the global rank 0 peer (0 on hosts
 * that do not hold rank 0), or a negative errno; desc gets a description. */
int peer_run(const struct bench_opts *o, const size_t *sizes, int nsizes, const char *uid_hex,
	     struct peer_row *rows, int maxrows, char *desc, size_t desclen);

/* --pct: rank 0's p50 and p99 per size, out of place, and the peer's where
 * it said them (prow NULL: none), every line starting with '#pct'. */
void pct_print(const struct bench_opts *o, const struct bench_row *rr, int nr,
	       const struct peer_row *prow, int np);

/* Prints the peer's table and the ratio table (every line starts with '#'). */
void peer_print(const struct bench_opts *o, const char *desc, const struct peer_row *prow,
		int npeer, const struct bench_row *rrow, int nr2);

/* Where the peer programs are: $R2CCL_PEER_DIR, R2_PEER_DIR (compile time),
 * <dir of this executable>/peers, <dir of this executable>/../libexec/r2ccl. */
int peer_find_program(const char *name, char *out, size_t outlen);

/* Parses one "r2peer key=value ..." line; 0 when it is one. Exposed for tests. */
int peer_parse_line(const char *line, struct peer_row *row);

#endif
