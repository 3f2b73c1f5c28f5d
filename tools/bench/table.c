/* SPDX-License-Identifier: MIT */
/* r2ccl-bench's result table, in nccl-tests' columns (rank 0 prints it). */
#include <stdio.h>

#include "bench.h"

void bench_print_header(const struct bench_opts *o, const struct shared_page *sh)
{
	printf("# r2ccl-bench %s (libr2ccl header %s)  op: %s\n", R2CCL_VERSION_STRING,
	       R2CCL_VERSION_STRING, bench_op_name(o->op));
	printf("# nRanks %d localRanks %d firstRank %d minBytes %zu maxBytes %zu step: ", o->nranks,
	       o->local_ranks, o->first_rank, o->minbytes, o->maxbytes);
	if (o->stepfactor > 1)
		printf("%lu(factor)", o->stepfactor);
	else
		printf("%zu(bytes)", o->stepbytes);
	printf(" warmup iters: %d iters: %d validation: %d\n", o->warmup, o->iters, o->check);
	printf("# time: rank 0's average over iters, after warmup and a barrier; GB/s = 1e9 B/s\n");
	printf("#\n# Using ranks\n");
	for (int i = 0; i < o->local_ranks; i++)
		printf("#  Rank %2d Pid %6d on %s\n", o->first_rank + i, (int)sh->pids[i], sh->host);
	if (o->nranks > o->local_ranks)
		printf("#  (ranks of other hosts not listed)\n");
	printf("#\n");
	printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
	       "", "", "", "", "");
	printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count",
	       "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
	       "#wrong");
	printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
	       "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
	       "");
	fflush(stdout);
}

void bench_print_row(const struct bench_opts *o, const struct bench_row *row)
{
	const char *redop = bench_op_has_redop(o->op) || o->op == BOP_SENDRECV ?
				    bench_redop_name(o->redop) : "none";
	/* nccl-tests prints the op for sendrecv although it is unused */
	printf("%12zu  %12zu  %8s  %6s  %6i", row->size, row->count, bench_type_name(o->dtype), redop,
	       bench_op_has_root(o->op) ? o->root : -1);
	for (int ip = 0; ip < 2; ip++) {
		char ts[32], ws[32];
		bench_format_time(ts, sizeof(ts), row->time_us[ip]);
		if (row->wrong[ip] < 0)
			snprintf(ws, sizeof(ws), "%5s", "N/A");
		else
			snprintf(ws, sizeof(ws), "%5lld", row->wrong[ip]);
		printf("  %7s  %6.2f  %6.2f  %5s", ts, row->algbw[ip], row->busbw[ip], ws);
	}
	printf("\n");
	fflush(stdout);
}

void bench_print_summary(long long failed_checks, double bw_sum, int bw_count)
{
	printf("# %-20s : %lld %s\n", "Out of bounds values", failed_checks,
	       failed_checks ? "FAILED" : "OK");
	printf("# %-20s : %g \n", "Avg bus bandwidth", bw_count ? bw_sum / bw_count : 0.0);
	printf("#\n");
	fflush(stdout);
}
