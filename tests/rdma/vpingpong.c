// SPDX-License-Identifier: MIT
/*
 * r2-vpingpong: the verbs provider end to end, between two hosts (the soft-RoCE
 * guests of tests/rdma/). One process per host:
 *
 *   r2-vpingpong pingpong a|b IFNAME ADDR PEER_ADDR
 *   r2-vpingpong fail     a|b IFNAME ADDR PEER_ADDR
 *
 * Both open r2_tp_verbs_ops on the rail (IFNAME, ADDR, side channel port
 * 7700); a dials b.
 * pingpong: a sends messages of sizes 0 .. 256 KiB (single slot, several
 *   fragments), from memory registered with reg_mem (zero copy) and from
 *   unregistered memory (bounce copy); b checks each byte and echoes it;
 *   a checks the echo. Then a burst of 64 x 10 KiB without waiting, checked
 *   in order per QP and by content, answered by one ACK. Exit 0: all exact.
 * fail: after a few round trips, a sets its own IFNAME down while sending;
 *   a must see R2_TPC_ERROR (and failed SENDs) and b must see R2_TPC_ERROR
 *   (side channel keepalive) within 30 s. Exit 0 when both did.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "transport.h"

static const struct r2_tp_ops *ops = &r2_tp_verbs_ops;
static struct r2_tp *tp;
static uint64_t me, peer;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* waits for one completion of type want (others: SEND ok counted, RECV
 * queued is a bug here); returns it, or type 0 on timeout */
static int nsend_ok, nsend_fail, nerr;

static struct r2_tp_cqe wait_cqe(int want, double secs)
{
	struct r2_tp_cqe e;
	double end = now_s() + secs;
	for (;;) {
		int n = ops->poll(tp, &e, 1);
		if (n == 1) {
			if (e.type == R2_TPC_SEND) {
				if (e.status)
					nsend_fail++;
				else
					nsend_ok++;
			}
			if (e.type == R2_TPC_ERROR)
				nerr++;
			if (e.type == want || e.type == R2_TPC_ERROR)
				return e;
			if (e.type == R2_TPC_RECV) /* e.g. the fail test's last messages */
				ops->release(tp, e.buf);
			continue;
		}
		if (now_s() > end) {
			memset(&e, 0, sizeof(e));
			return e;
		}
		struct pollfd pf = { .fd = ops->event_fd(tp), .events = POLLIN };
		poll(&pf, 1, 100);
	}
}

static void fill(uint8_t *p, uint32_t len, uint32_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seed * 131u + i * 7u + (i >> 8));
}

static int check(const uint8_t *p, uint32_t len, uint32_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		if (p[i] != (uint8_t)(seed * 131u + i * 7u + (i >> 8)))
			return -1;
	return 0;
}

static int send_wait(const struct r2_chunk_hdr *h, const void *buf)
{
	int r;
	while ((r = ops->post_send(tp, peer, h, buf, 1)) == -EAGAIN)
		usleep(1000);
	if (r) {
		fprintf(stderr, "post_send: %s\n", strerror(-r));
		return r;
	}
	struct r2_tp_cqe e = wait_cqe(R2_TPC_SEND, 30);
	if (e.type != R2_TPC_SEND || e.status) {
		fprintf(stderr, "send completion: type %d status %d\n", e.type, e.status);
		return -EIO;
	}
	return 0;
}

static int pingpong(bool a)
{
	static const uint32_t sizes[] = { 0, 1, 56, 4000, 65480, 65536, 100000, 262144 };
	const int nsz = (int)(sizeof(sizes) / sizeof(sizes[0]));
	size_t regsz = 1u << 20;
	uint8_t *reg = aligned_alloc(4096, regsz), *unreg = malloc(regsz);
	void *mh;
	int r = ops->reg_mem(tp, reg, regsz, &mh);
	if (r) {
		fprintf(stderr, "reg_mem: %s\n", strerror(-r));
		return 1;
	}
	int bad = 0, n = 0;
	double t0 = now_s();
	for (int mode = 0; mode < 2; mode++) {
		uint8_t *buf = mode ? unreg : reg;
		for (int i = 0; i < nsz; i++) {
			uint32_t seed = (uint32_t)(mode * 100 + i);
			struct r2_chunk_hdr h = { .kind = R2_MSG_DATA, .chunk = seed, .off = sizes[i],
						  .len = sizes[i] };
			if (a) {
				fill(buf, sizes[i], seed);
				if (send_wait(&h, buf))
					return 1;
			}
			struct r2_tp_cqe e = wait_cqe(R2_TPC_RECV, 60);
			if (e.type != R2_TPC_RECV) {
				fprintf(stderr, "no message (size %u, mode %d): type %d status %d\n",
					sizes[i], mode, e.type, e.status);
				return 1;
			}
			if (e.hdr.chunk != seed || e.hdr.len != sizes[i] || e.hdr.off != sizes[i] ||
			    e.hdr.magic != R2_CHUNK_MAGIC || check(e.buf, e.hdr.len, seed)) {
				fprintf(stderr, "BAD message size %u mode %d\n", sizes[i], mode);
				bad++;
			}
			if (!a) { /* echo from a copy in buf (mode decides registered or not) */
				if (e.hdr.len)
					memcpy(buf, e.buf, e.hdr.len);
				ops->release(tp, e.buf);
				if (send_wait(&h, buf))
					return 1;
			} else {
				ops->release(tp, e.buf);
			}
			n++;
			printf("%s size %7u ok\n", mode ? "unregistered" : "registered  ", sizes[i]);
		}
	}
	double t1 = now_s();
	printf("round trips: %d in %.2f s (%.1f ms each), bad %d\n", n, t1 - t0, (t1 - t0) * 1e3 / n,
	       bad);
	/* burst */
	const int burst = 64;
	const uint32_t bsz = 10240;
	if (a) {
		for (int i = 0; i < burst; i++) {
			fill(reg + (size_t)i * bsz, bsz, 1000u + (uint32_t)i);
			struct r2_chunk_hdr h = { .kind = R2_MSG_DATA, .chunk = 1000u + (uint32_t)i,
						  .len = bsz };
			r = ops->post_send(tp, peer, &h, reg + (size_t)i * bsz, 1);
			if (r) {
				fprintf(stderr, "burst post_send: %s\n", strerror(-r));
				return 1;
			}
		}
		struct r2_tp_cqe e = wait_cqe(R2_TPC_RECV, 120);
		if (e.type != R2_TPC_RECV || e.hdr.kind != R2_MSG_ACK || e.hdr.aux != (uint32_t)burst) {
			fprintf(stderr, "burst: no ACK (type %d, aux %u)\n", e.type, e.hdr.aux);
			return 1;
		}
		while (nsend_ok < 2 * nsz + burst) { /* the burst's SENDs */
			struct r2_tp_cqe s = wait_cqe(R2_TPC_SEND, 30);
			if (s.type != R2_TPC_SEND)
				break;
		}
		printf("burst: %d x %u B acknowledged, sends completed %d\n", burst, bsz, nsend_ok);
		if (nsend_ok != 2 * nsz + burst)
			bad++;
	} else {
		int got = 0, bb = 0;
		while (got < burst) {
			struct r2_tp_cqe e = wait_cqe(R2_TPC_RECV, 120);
			if (e.type != R2_TPC_RECV) {
				fprintf(stderr, "burst: got %d of %d\n", got, burst);
				return 1;
			}
			if (e.hdr.len != bsz || check(e.buf, bsz, e.hdr.chunk))
				bb++;
			ops->release(tp, e.buf);
			got++;
		}
		struct r2_chunk_hdr h = { .kind = R2_MSG_ACK, .aux = (uint32_t)got };
		if (send_wait(&h, NULL))
			return 1;
		printf("burst: %d received, %d bad\n", got, bb);
		bad += bb;
	}
	uint64_t tx, rx;
	ops->stats(tp, &tx, &rx);
	printf("stats: tx %llu rx %llu bytes\n", (unsigned long long)tx, (unsigned long long)rx);
	ops->dereg_mem(tp, mh);
	free(reg);
	free(unreg);
	return bad ? 1 : 0;
}

static int failtest(bool a, const char *ifname)
{
	uint8_t buf[4096];
	memset(buf, 7, sizeof(buf));
	struct r2_chunk_hdr h = { .kind = R2_MSG_DATA, .len = sizeof(buf) };
	for (int i = 0; i < 3; i++) { /* a few round trips first */
		if (a && send_wait(&h, buf))
			return 1;
		struct r2_tp_cqe e = wait_cqe(R2_TPC_RECV, 60);
		if (e.type != R2_TPC_RECV)
			return 1;
		ops->release(tp, e.buf);
		if (!a && send_wait(&h, buf))
			return 1;
	}
	printf("3 round trips ok, link state %d\n", ops->link_state(tp));
	double t0 = now_s();
	int accepted = 0, refused = 0, before = nsend_ok + nsend_fail;
	if (a) {
		char cmd[128];
		for (int i = 0; i < 8; i++)
			ops->post_send(tp, peer, &h, buf, 1) ? refused++ : accepted++;
		snprintf(cmd, sizeof(cmd), "ip link set %s down", ifname);
		if (system(cmd))
			return 1;
		for (int i = 0; i < 8; i++)
			ops->post_send(tp, peer, &h, buf, 1) ? refused++ : accepted++;
	}
	struct r2_tp_cqe e = wait_cqe(R2_TPC_ERROR, 30);
	double t1 = now_s();
	/* collect the SEND completions of what was queued */
	for (;;) {
		struct r2_tp_cqe s = wait_cqe(R2_TPC_SEND, 1);
		if (s.type == 0)
			break;
	}
	printf("ERROR completion: %s (status %d) after %.2f s; link state %d; sends ok %d failed %d\n",
	       e.type == R2_TPC_ERROR ? "yes" : "NO", e.status, t1 - t0, ops->link_state(tp),
	       nsend_ok, nsend_fail);
	int r = ops->post_send(tp, peer, &h, buf, 1);
	printf("post_send after the failure: %d (%s)\n", r, strerror(-r));
	/* every accepted send completed (ok before the failure, or failed) */
	int done = nsend_ok + nsend_fail - before;
	printf("posted around the failure: %d accepted, %d refused, %d completed\n", accepted,
	       refused, done);
	return e.type == R2_TPC_ERROR && r == -ENOTCONN && done == accepted ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc < 6) {
		fprintf(stderr, "usage: %s pingpong|fail a|b IFNAME ADDR PEER_ADDR\n", argv[0]);
		return 2;
	}
	bool a = !strcmp(argv[2], "a");
	me = a ? 1 : 2;
	peer = a ? 2 : 1;
	struct r2_tp_config cfg = { .port = 7700, .self_id = me, .max_msg = 1u << 20,
				    .user_timeout_ms = 5000 };
	snprintf(cfg.ifname, sizeof(cfg.ifname), "%s", argv[3]);
	struct in_addr pa;
	if (!inet_aton(argv[4], &cfg.addr) || !inet_aton(argv[5], &pa))
		return 2;
	int r = ops->open(&cfg, &tp);
	if (r) {
		fprintf(stderr, "open verbs on %s: %s\n", argv[3], strerror(-r));
		return 1;
	}
	printf("verbs open on %s, link state %d\n", argv[3], ops->link_state(tp));
	double t0 = now_s();
	if (a) {
		for (;;) { /* b may not listen yet */
			r = ops->connect(tp, peer, pa, 7700);
			if (r && r != -EALREADY) {
				fprintf(stderr, "connect: %s\n", strerror(-r));
				return 1;
			}
			struct r2_tp_cqe e = wait_cqe(R2_TPC_CONN, 30);
			if (e.type == R2_TPC_CONN)
				break;
			if (now_s() - t0 > 60) {
				fprintf(stderr, "no connection\n");
				return 1;
			}
			sleep(1);
		}
	} else {
		struct r2_tp_cqe e = wait_cqe(R2_TPC_CONN, 90);
		if (e.type != R2_TPC_CONN) {
			fprintf(stderr, "no connection (type %d status %d)\n", e.type, e.status);
			return 1;
		}
	}
	printf("connected in %.2f s\n", now_s() - t0);
	int rc = !strcmp(argv[1], "fail") ? failtest(a, argv[3]) : pingpong(a);
	if (!a || strcmp(argv[1], "fail"))
		sleep(1); /* let the last messages leave before closing */
	ops->close(tp);
	printf("%s\n", rc ? "FAIL" : "PASS");
	return rc;
}
