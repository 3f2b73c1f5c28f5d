/* SPDX-License-Identifier: MIT */
/* r2ccl-bench's command line: the flags of nccl-tests and its own, checked. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "r2ccl.h"

/* "8", "64M", "1.5K", "1G", "64MB", "64MiB": binary multiples, like nccl-tests. */
static int parse_size(const char *s, size_t *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno || v < 0 || !isfinite(v))
		return -1;
	double mult = 1;
	switch (*end) {
	case 'k': case 'K': mult = 1024.0; end++; break;
	case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default: break;
	}
	if (mult > 1 && *end == 'i')
		end++;
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end)
		return -1;
	v *= mult;
	if (v >= 18446744073709551615.0)
		return -1;
	*out = (size_t)v;
	return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 0);
	if (end == s || *end || errno || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end || errno || !(v >= lo && v <= hi))
		return -1;
	*out = v;
	return 0;
}

/* ----------------------------------------------------------------- usage */

static void usage(FILE *f)
{
	fprintf(f,
"usage: r2ccl-bench OP [options]\n"
"  OP: allreduce allgather reducescatter broadcast reduce sendrecv\n"
"nccl-tests flags (sizes take K/M/G suffixes, binary):\n"
"  -b, --minbytes N       smallest size (default 8)\n"
"  -e, --maxbytes N       largest size (default 64M)\n"
"  -f, --stepfactor F     multiply the size by F each step (default 2)\n"
"  -i, --stepbytes N      add N each step when F is 1 (default 1M)\n"
"  -n, --iters N          timed iterations per size (default 20)\n"
"  -w, --warmup_iters N   warm-up iterations per size (default 5)\n"
"  -c, --check 0|1        check every result element on every rank (default 1)\n"
"  -d, --datatype T       int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double\n"
"                         (also float16 float32 float64 bf16 char int); default float\n"
"  -o, --op OP            sum prod min max avg (default sum)\n"
"  -r, --root R           root of broadcast and reduce (default 0)\n"
"ranks:\n"
"  --local-ranks K        K rank processes on this host (default 1, or N without --uid-file)\n"
"  --nranks N             ranks in the communicator, all hosts (default K)\n"
"  --first-rank R         this host's ranks are R..R+K-1 (default 0)\n"
"  --uid-file PATH        several hosts: the host with rank 0 writes the unique id to PATH\n"
"                         (temp file + rename), the others wait for it; use a fresh path\n"
"                         (rank 0's host removes it at a successful end)\n"
"  --uid-timeout S        how long to wait for the uid file (default 60)\n"
"  --socket PATH          r2ccld's socket (default $R2CCL_SOCKET, else %s)\n"
"  --connect-timeout MS   r2ccl_connect timeout (default: the library's)\n"
"output:\n"
"  --trace FILE           rank 0 writes one CSV line per timed iteration:\n"
"                         iteration,start_us,end_us,size,in_place (CLOCK_MONOTONIC us)\n"
"  --trace-all            every rank writes FILE.<rank> instead\n"
"  --pct                  after the tables: rank 0's p50 and p99 per size (out of place),\n"
"                         and the peer's (Gloo's) beside them; rows start with '#pct'\n"
"peers (run on the same sizes after R2CCL, then a ratio table r2ccl/peer busbw):\n"
"  --peer mpi|mpi-tcp|gloo  OpenMPI shared memory, OpenMPI tcp btl, Gloo over TCP\n"
"  --peer-addr ADDR       Gloo: this host's address (default 127.0.0.1)\n"
"  --peer-store DIR       Gloo: rendezvous directory shared by all hosts (default: a temp\n"
"                         directory; with --uid-file, one next to the uid file)\n"
"  --peer-timeout S       kill the peer run after S seconds (default 600)\n"
"  --gpu[=D]              GPU buffers (cuMemAlloc, registered with r2ccl_mem_register_gpu),\n"
"                         stream-ordered calls, the stream synchronized after each; GPU D,\n"
"                         else local rank index, modulo the GPU count\n"
"  --calibrate FILE       sendrecv between 2 ranks (2 hosts): fit the planner's cost model\n"
"                         T = alpha + size/bw to the one-way times, print it, write\n"
"                         cost_alpha_us for r2ccld's configuration to FILE\n"
"The table has nccl-tests' columns; time is rank 0's average in us; algbw = size/time and\n"
"busbw = algbw * (allreduce 2(n-1)/n, allgather/reducescatter (n-1)/n, others 1), in GB/s\n"
"(1e9 B/s). '# Out of bounds values' counts the results with wrong elements. Exit status:\n"
"0 ok, 1 wrong values or a failed rank, 2 usage.\n",
		R2CCL_DEFAULT_SOCKET);
}

enum {
	OPT_LOCAL_RANKS = 1000,
	OPT_NRANKS,
	OPT_FIRST_RANK,
	OPT_UID_FILE,
	OPT_UID_TIMEOUT,
	OPT_TRACE,
	OPT_TRACE_ALL,
	OPT_PCT,
	OPT_SOCKET,
	OPT_PEER,
	OPT_PEER_ADDR,
	OPT_PEER_STORE,
	OPT_PEER_TIMEOUT,
	OPT_GPU,
	OPT_CALIBRATE,
	OPT_CONNECT_TIMEOUT,
};

static const struct option longopts[] = {
	{ "minbytes", required_argument, 0, 'b' },
	{ "maxbytes", required_argument, 0, 'e' },
	{ "stepbytes", required_argument, 0, 'i' },
	{ "stepfactor", required_argument, 0, 'f' },
	{ "iters", required_argument, 0, 'n' },
	{ "warmup_iters", required_argument, 0, 'w' },
	{ "check", required_argument, 0, 'c' },
	{ "datatype", required_argument, 0, 'd' },
	{ "op", required_argument, 0, 'o' },
	{ "root", required_argument, 0, 'r' },
	{ "local-ranks", required_argument, 0, OPT_LOCAL_RANKS },
	{ "nranks", required_argument, 0, OPT_NRANKS },
	{ "first-rank", required_argument, 0, OPT_FIRST_RANK },
	{ "uid-file", required_argument, 0, OPT_UID_FILE },
	{ "uid-timeout", required_argument, 0, OPT_UID_TIMEOUT },
	{ "trace", required_argument, 0, OPT_TRACE },
	{ "trace-all", no_argument, 0, OPT_TRACE_ALL },
	{ "pct", no_argument, 0, OPT_PCT },
	{ "socket", required_argument, 0, OPT_SOCKET },
	{ "connect-timeout", required_argument, 0, OPT_CONNECT_TIMEOUT },
	{ "peer", required_argument, 0, OPT_PEER },
	{ "peer-addr", required_argument, 0, OPT_PEER_ADDR },
	{ "peer-store", required_argument, 0, OPT_PEER_STORE },
	{ "peer-timeout", required_argument, 0, OPT_PEER_TIMEOUT },
	{ "gpu", optional_argument, 0, OPT_GPU },
	{ "calibrate", required_argument, 0, OPT_CALIBRATE },
	{ "help", no_argument, 0, 'h' },
	{ 0, 0, 0, 0 },
};

#define BAD(...)                                                   \
	do {                                                       \
		fprintf(stderr, "r2ccl-bench: " __VA_ARGS__);      \
		fprintf(stderr, " (r2ccl-bench --help)\n");        \
		return -1;                                         \
	} while (0)

/* One of nccl-tests' flags (-b -e -i -f -n -w -c -d -o -r): 0, -1 when its
 * value is wrong, 1 when c is not one of them. */
static int parse_nccl_opt(int c, struct bench_opts *o)
{
	long v;

	switch (c) {
	case 'b':
		if (parse_size(optarg, &o->minbytes))
			BAD("invalid size for -b: '%s'", optarg);
		break;
	case 'e':
		if (parse_size(optarg, &o->maxbytes))
			BAD("invalid size for -e: '%s'", optarg);
		break;
	case 'i':
		if (parse_size(optarg, &o->stepbytes) || !o->stepbytes)
			BAD("invalid size for -i: '%s'", optarg);
		break;
	case 'f':
		if (parse_int(optarg, 1, 1 << 20, &v))
			BAD("invalid step factor '%s'", optarg);
		o->stepfactor = (unsigned long)v;
		break;
	case 'n':
		if (parse_int(optarg, 1, 100000000, &v))
			BAD("invalid iteration count '%s'", optarg);
		o->iters = (int)v;
		break;
	case 'w':
		if (parse_int(optarg, 0, 100000000, &v))
			BAD("invalid warm-up count '%s'", optarg);
		o->warmup = (int)v;
		break;
	case 'c':
		if (parse_int(optarg, 0, 1000, &v))
			BAD("invalid value for -c: '%s'", optarg);
		o->check = v > 0;
		break;
	case 'd':
		if (bench_parse_type(optarg, &o->dtype))
			BAD("unknown data type '%s'", optarg);
		break;
	case 'o':
		if (bench_parse_redop(optarg, &o->redop))
			BAD("unknown reduction '%s'", optarg);
		break;
	case 'r':
		if (parse_int(optarg, 0, INT_MAX, &v))
			BAD("invalid root '%s'", optarg);
		o->root = (int)v;
		break;
	default:
		return 1;
	}
	return 0;
}

/* One of r2ccl-bench's own flags (or -h, or an error): 0 or -1. */
static int parse_own_opt(int c, char **argv, struct bench_opts *o, int *have_k, int *have_n)
{
	long v;
	double d;

	switch (c) {
	case OPT_LOCAL_RANKS:
		if (parse_int(optarg, 1, MAX_LOCAL, &v))
			BAD("invalid --local-ranks '%s' (1..%d)", optarg, MAX_LOCAL);
		o->local_ranks = (int)v;
		*have_k = 1;
		break;
	case OPT_NRANKS:
		if (parse_int(optarg, 1, 1 << 20, &v))
			BAD("invalid --nranks '%s'", optarg);
		o->nranks = (int)v;
		*have_n = 1;
		break;
	case OPT_FIRST_RANK:
		if (parse_int(optarg, 0, 1 << 20, &v))
			BAD("invalid --first-rank '%s'", optarg);
		o->first_rank = (int)v;
		break;
	case OPT_UID_FILE:
		o->uid_file = optarg;
		break;
	case OPT_UID_TIMEOUT:
		if (parse_double(optarg, 0, 1e7, &d))
			BAD("invalid --uid-timeout '%s'", optarg);
		o->uid_timeout_s = d;
		break;
	case OPT_TRACE:
		o->trace_file = optarg;
		break;
	case OPT_TRACE_ALL:
		o->trace_all = true;
		break;
	case OPT_PCT:
		o->pct = true;
		break;
	case OPT_SOCKET:
		o->socket_path = optarg;
		break;
	case OPT_CONNECT_TIMEOUT:
		if (parse_int(optarg, 1, INT_MAX, &v))
			BAD("invalid --connect-timeout '%s'", optarg);
		o->timeout_ms = (int)v;
		break;
	case OPT_PEER:
		if (strcmp(optarg, "mpi") && strcmp(optarg, "mpi-tcp") && strcmp(optarg, "gloo"))
			BAD("unknown peer '%s' (mpi, mpi-tcp, gloo)", optarg);
		o->peer = optarg;
		break;
	case OPT_PEER_ADDR:
		o->peer_addr = optarg;
		break;
	case OPT_PEER_STORE:
		o->peer_store = optarg;
		break;
	case OPT_PEER_TIMEOUT:
		if (parse_double(optarg, 1, 1e7, &d))
			BAD("invalid --peer-timeout '%s'", optarg);
		o->peer_timeout_s = d;
		break;
	case OPT_CALIBRATE:
		o->calibrate_file = optarg;
		break;
	case OPT_GPU:
		o->gpu = true;
		o->gpu_dev = -1;
		if (optarg && parse_int(optarg, 0, 1023, &v))
			BAD("invalid --gpu device '%s'", optarg);
		if (optarg)
			o->gpu_dev = (int)v;
		break;
	case 'h':
		usage(stdout);
		exit(0);
	case ':':
		BAD("option %s needs a value", argv[optind - 1]);
	default:
		BAD("unknown option '%s'", argv[optind - 1]);
	}
	return 0;
}

/* The operation and the checks across flags, once all are read. */
static int check_opts(int argc, char **argv, struct bench_opts *o, int have_k, int have_n)
{
	if (optind >= argc)
		BAD("missing OP");
	if (optind + 1 < argc)
		BAD("unexpected argument '%s'", argv[optind + 1]);
	o->op = bench_parse_op(argv[optind]);
	if (o->op == BOP_COUNT)
		BAD("unknown OP '%s'", argv[optind]);

	if (!have_k && have_n && !o->uid_file)
		o->local_ranks = o->nranks;
	if (!have_n)
		o->nranks = o->first_rank + o->local_ranks;
	if (o->first_rank + o->local_ranks > o->nranks)
		BAD("ranks %d..%d do not fit in --nranks %d", o->first_rank,
		    o->first_rank + o->local_ranks - 1, o->nranks);
	if (o->local_ranks < o->nranks && !o->uid_file)
		BAD("%d of %d ranks on this host: the other hosts need --uid-file", o->local_ranks,
		    o->nranks);
	if (o->minbytes > o->maxbytes)
		BAD("-b %zu is larger than -e %zu", o->minbytes, o->maxbytes);
	if (bench_op_has_root(o->op) && o->root >= o->nranks)
		BAD("root %d is not a rank of %d", o->root, o->nranks);
	if (o->op == BOP_SENDRECV && o->nranks < 2)
		BAD("sendrecv needs at least 2 ranks (send and recv are blocking)");
	if (o->peer && !strncmp(o->peer, "mpi", 3) && o->nranks != o->local_ranks)
		BAD("--peer %s runs on one host only (mpirun -np K)", o->peer);
	if (o->calibrate_file && (o->op != BOP_SENDRECV || o->nranks != 2))
		BAD("--calibrate times the sendrecv ping-pong of exactly 2 ranks (sendrecv --nranks 2)");
	if (!o->peer_addr)
		o->peer_addr = "127.0.0.1";
	return 0;
}

int bench_parse_args(int argc, char **argv, struct bench_opts *o)
{
	int c, r, have_k = 0, have_n = 0;

	*o = (struct bench_opts){
		.op = BOP_COUNT,
		.minbytes = 8,
		.maxbytes = 64u << 20,
		.stepbytes = 1u << 20,
		.stepfactor = 2,
		.iters = 20,
		.warmup = 5,
		.check = 1,
		.dtype = R2CCL_FLOAT32,
		.redop = R2CCL_SUM,
		.root = 0,
		.local_ranks = 1,
		.nranks = 1,
		.first_rank = 0,
		.uid_timeout_s = 60,
		.peer_timeout_s = 600,
	};

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":b:e:i:f:n:w:c:d:o:r:h", longopts, NULL)) != -1) {
		r = parse_nccl_opt(c, o);
		if (r == 1)
			r = parse_own_opt(c, argv, o, &have_k, &have_n);
		if (r)
			return -1;
	}
	return check_opts(argc, argv, o, have_k, have_n);
}
