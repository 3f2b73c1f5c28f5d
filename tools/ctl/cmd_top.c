/* SPDX-License-Identifier: MIT */
/*
 * r2cclctl top [COUNT]: a live view, refreshed every second (COUNT rounds;
 * none or 0: until interrupted): per rail its state and what it sent and
 * received per second over the last round, per communicator its tenant,
 * state, operations and bytes per second and their mean latency over the
 * last round. From the rails and status replies (the
 * rates are differences between two rounds; the first round shows the
 * throughput monitor's measured rate). For people: --json is refused (use
 * the metrics, or `r2cclctl --json rails` / `status`).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

struct last {
	uint64_t key; /* rail index + 1, or communicator id | 1 << 32 */
	uint64_t a, b;
};

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The value remembered under key (and found: true), then remembers a, b. */
static bool swap_last(struct last **l, size_t *n, uint64_t key, uint64_t *a, uint64_t *b)
{
	for (size_t i = 0; i < *n; i++)
		if ((*l)[i].key == key) {
			uint64_t pa = (*l)[i].a, pb = (*l)[i].b;
			(*l)[i].a = *a;
			(*l)[i].b = *b;
			*a = pa;
			*b = pb;
			return true;
		}
	*l = realloc(*l, (*n + 1) * sizeof(**l));
	if (!*l)
		abort();
	(*l)[(*n)++] = (struct last){ key, *a, *b };
	return false;
}

/* bytes/s as "12.3 MB/s" */
static const char *rate_text(double bps, char *buf, size_t len)
{
	static const char *const u[] = { "B/s", "KB/s", "MB/s", "GB/s" };
	int k = 0;

	while (bps >= 1000 && k < 3) {
		bps /= 1000;
		k++;
	}
	snprintf(buf, len, "%.1f %s", bps, u[k]);
	return buf;
}

static int one_round(struct ctl *c, struct last **l, size_t *nl, double dt, bool clear)
{
	R2ccl__RailsReply *rr = NULL;
	R2ccl__StatusReply *st = NULL;
	char tx[32], rx[32];
	int r;

	r = get_rails(c, &rr);
	if (r)
		return r;
	r = get_status(c, &st);
	if (r) {
		r2ccl__rails_reply__free_unpacked(rr, NULL);
		return r;
	}
	if (clear)
		fputs("\033[H\033[2J", stdout);
	printf("r2ccld on %s: up %" PRIu64 " s, %zu sessions, %zu communicators, %" PRIu64
	       " operations (%" PRIu64 " failed)\n\n",
	       st->hostname, st->uptime_s, st->n_sessions, st->n_comms, st->ops_total,
	       st->op_errors_total);
	printf("%-16s %-10s %12s %12s %9s %9s\n", "NIC", "STATE", "TX", "RX", "FAILOVERS",
	       "OVERLAP");
	for (size_t i = 0; i < rr->n_rails; i++) {
		const R2ccl__RailInfo *x = rr->rails[i];
		uint64_t a = x->tx_bytes_total, b = x->rx_bytes_total;
		double txr, rxr;
		uint32_t ov = 0;

		if (swap_last(l, nl, x->index + 1, &a, &b) && dt > 0) {
			txr = (double)(x->tx_bytes_total - a) / dt;
			rxr = (double)(x->rx_bytes_total - b) / dt;
		} else {
			txr = rxr = (double)x->measured_mbps * 125000.0;
		}
		for (size_t k = 0; k < st->n_nics; k++)
			if (!strcmp(st->nics[k]->name, x->nic))
				ov = st->nics[k]->rail_overlap;
		printf("%-16s %-10s %12s %12s %9" PRIu64 " %9u\n", x->nic,
		       x->drained ? "drained" : x->state, rate_text(txr, tx, sizeof(tx)),
		       rate_text(rxr, rx, sizeof(rx)), x->failovers_total, ov);
	}
	printf("\n%-6s %-20s %-8s %6s %6s %10s %12s %12s %12s\n", "COMM", "TENANT", "STATE",
	       "HOSTS", "RANKS", "OPS/S", "BYTES/S", "LATENCY", "OPS");
	for (size_t i = 0; i < st->n_comms; i++) {
		const R2ccl__CommInfo *x = st->comms[i];
		uint64_t a = x->ops_total, b = x->bytes_total;
		uint64_t la = x->op_latency_ns_total, lb = 0;
		double ops = 0, bps = 0;
		char br[32], lat[32] = "-";

		bool had = swap_last(l, nl, (uint64_t)x->id | 1ull << 32, &a, &b);
		swap_last(l, nl, (uint64_t)x->id | 2ull << 32, &la, &lb);
		if (had && dt > 0) {
			ops = (double)(x->ops_total - a) / dt;
			bps = (double)(x->bytes_total - b) / dt;
			if (x->ops_total > a) { /* mean over the operations of the round */
				double us = (double)(x->op_latency_ns_total - la) / 1e3 /
					    (double)(x->ops_total - a);
				if (us < 1000)
					snprintf(lat, sizeof(lat), "%.1f us", us);
				else
					snprintf(lat, sizeof(lat), "%.2f ms", us / 1e3);
			}
		}
		printf("%-6u %-20.20s %-8s %6u %6u %10.1f %12s %12s %12" PRIu64 "\n", x->id,
		       x->tenant, x->state, x->nhosts, x->nranks, ops, rate_text(bps, br, sizeof(br)),
		       lat, x->ops_total);
	}
	fflush(stdout);
	r2ccl__rails_reply__free_unpacked(rr, NULL);
	r2ccl__status_reply__free_unpacked(st, NULL);
	return 0;
}

int cmd_top(struct ctl *c, int argc, char **argv)
{
	uint32_t count = 0;
	struct last *l = NULL;
	size_t nl = 0;
	double t = 0;
	int r = 0;

	if (argc > 0 && parse_u32(argv[0], &count) < 0)
		return report(c, EXIT_USAGE, 0, "top: COUNT is a number of refreshes: '%s'", argv[0]);
	if (c->json)
		return report(c, EXIT_USAGE, 0,
			      "top is a live view for people; use --json rails or --json status");
	for (uint32_t round = 0; !count || round < count; round++) {
		if (round) {
			struct timespec ts = { 1, 0 };
			nanosleep(&ts, NULL);
		}
		double now = mono_s();
		r = one_round(c, &l, &nl, round ? now - t : 0, isatty(STDOUT_FILENO));
		t = now;
		if (r)
			break;
		if (!count || round + 1 < count)
			putchar('\n');
	}
	free(l);
	return r ? r : EXIT_OK;
}
