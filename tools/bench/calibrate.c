/* SPDX-License-Identifier: MIT */
/*
 * r2ccl-bench sendrecv --calibrate FILE: fits the planner's cost model
 * T = alpha + size / bw (docs/planner.md, "Calibration") to the one-way
 * transfer times the ping-pong between two ranks measured, with the planner's
 * own least-squares fit (r2_cost_fit), prints measured against fitted, and
 * writes the result as r2ccld configuration (cost_alpha_us) to FILE.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "planner.h"

int bench_calibrate(const struct bench_opts *o, const struct bench_row *rows, int n)
{
	struct r2_sample s[BENCH_MAX_SIZES];
	double alpha, beta, gamma, rms;
	int k = 0, r;
	FILE *f;
	char day[16];
	time_t now = time(NULL);

	/* each timed iteration of the 2-rank ring is a round trip: two
	 * one-way transfers of `size` bytes, one after the other */
	for (int i = 0; i < n && k < BENCH_MAX_SIZES; i++)
		if (rows[i].time_us[0] > 0)
			s[k++] = (struct r2_sample){ .size = (double)rows[i].size, .depth = 0,
						     .time = rows[i].time_us[0] * 1e-6 / 2 };
	if (k < 2) {
		fprintf(stderr, "r2ccl-bench: --calibrate needs at least two sizes (-b < -e)\n");
		return -EINVAL;
	}
	r = r2_cost_fit(s, (size_t)k, &alpha, &beta, &gamma, &rms);
	if (r < 0 || beta <= 0) {
		fprintf(stderr, "r2ccl-bench: the times do not fit T = alpha + size/bw (%s)\n",
			r < 0 ? strerror(-r) : "no positive bandwidth");
		return r < 0 ? r : -EDOM;
	}
	printf("# calibration: T = alpha + size/bw fitted to %d one-way transfer times\n", k);
	printf("#%13s %12s %12s %8s\n", "size (B)", "measured us", "model us", "error");
	for (int i = 0; i < k; i++) {
		double m = alpha + beta * s[i].size;
		printf("#%13.0f %12.1f %12.1f %7.1f%%\n", s[i].size, s[i].time * 1e6, m * 1e6,
		       (m - s[i].time) / s[i].time * 100);
	}
	printf("# alpha %.1f us, bandwidth %.4f GB/s, rms %.1f us\n", alpha * 1e6, 1e-9 / beta,
	       rms * 1e6);
	if (alpha < 0)
		printf("# alpha < 0: the per-message cost is not identifiable from these sizes (the\n"
		       "# small ones went faster than the line: a rate limiter's burst, caches);\n"
		       "# cost_alpha_us is not written\n");
	if (!(f = fopen(o->calibrate_file, "w"))) {
		fprintf(stderr, "r2ccl-bench: cannot write %s: %s\n", o->calibrate_file, strerror(errno));
		return -errno;
	}
	strftime(day, sizeof(day), "%Y-%m-%d", gmtime(&now));
	fprintf(f, "# r2ccld configuration from r2ccl-bench sendrecv --calibrate, %s:\n", day);
	fprintf(f, "# T = alpha + size/bw fitted to one-way transfers of %.0f..%.0f B between "
		   "two hosts (rms %.1f us).\n", s[0].size, s[k - 1].size, rms * 1e6);
	fprintf(f, "# Measured bandwidth of one transfer: %.4f GB/s (the planner takes each NIC's\n"
		   "# from its link speed and the throughput monitor).\n", 1e-9 / beta);
	if (alpha >= 0)
		fprintf(f, "cost_alpha_us = %.0f\n", alpha * 1e6);
	else
		fprintf(f, "# alpha fitted %.0f us (< 0): not identifiable, cost_alpha_us unchanged\n",
			alpha * 1e6);
	fclose(f);
	if (alpha >= 0)
		printf("# wrote %s (cost_alpha_us = %.0f)\n", o->calibrate_file, alpha * 1e6);
	else
		printf("# wrote %s (bandwidth only)\n", o->calibrate_file);
	return 0;
}
