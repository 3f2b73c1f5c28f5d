// SPDX-License-Identifier: MIT
/* The TCP warm-up of new rail connections, one connection of a rail at a
 * time (loop thread; rails.c calls it as connections come up). */
#include <stdint.h>

#include "base/daemon.h"
#include "log.h"
#include "net/rails_int.h"
#include "transport/transport.h"
#include "util.h"

/* Warm-up of a new TCP connection (tcp_warmup bytes per stream, in messages
 * of WARMUP_MSG the peer drops): TCP starts with a window of 10 segments and
 * grows it only while it is limited by it, so a connection that has carried
 * only heartbeats needs several round trips of slow start when a re-plan
 * first sends a chunk on it. The window then stays as long as the host keeps
 * it over idle periods (net.ipv4.tcp_slow_start_after_idle = 0,
 * docs/operations.md).
 * One connection of a rail warms up at a time (loop thread): the next starts
 * when the last message of the one before completes (WARMUP_CTX, sent or
 * failed). All at once, a host of a 16-host cluster put 15 x 2 MB per stream
 * on its NIC together, and heartbeats queued behind them went unanswered for
 * 600 ms: paths judged failed at the start (docs/planner.md). */
#define WARMUP_MSG (256u << 10)
static const uint8_t warmup_zeros[WARMUP_MSG];

/* Posts peer's warm-up on rail; false: nothing is in flight (not a TCP
 * rail, warm-up off, or the first post failed). */
static bool warmup_post(struct r2_rails *rs, int rail, uint64_t peer)
{
	struct r2_rail *rl = &rs->rail[rail];
	int64_t bytes = r2_param_int(&rs->d->params, P_TCP_WARMUP) * R2_MAX(1, rs->tcp_streams);
	struct r2_chunk_hdr h = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_HEARTBEAT,
				  .flags = R2_HB_WARMUP, .len = WARMUP_MSG };

	if (!(rl->ops->caps & R2_TP_CAP_STREAMS))
		return false; /* verbs: no congestion window to grow */
	for (; bytes > 0; bytes -= WARMUP_MSG) {
		bool last = bytes <= WARMUP_MSG;
		int r = rl->ops->post_send(rl->tp, peer, &h, warmup_zeros, last ? WARMUP_CTX : 0);
		if (r < 0)
			return false; /* those posted go out; the next peer's start now */
		if (last)
			return true;
	}
	return false;
}

/* The rail's next waiting warm-up that gets under way (loop thread); the
 * run logged when none is left. */
static void warmup_next(struct r2_rails *rs, int rail)
{
	rs->warm_busy[rail] = 0;
	while (rs->warm_n[rail] > 0) {
		uint64_t peer = rs->warm_q[rail][rs->warm_head[rail]];
		rs->warm_head[rail] = (rs->warm_head[rail] + 1) % R2_MAX_PEERS;
		rs->warm_n[rail]--;
		rs->warm_run[rail]++;
		if (warmup_post(rs, rail, peer)) {
			rs->warm_busy[rail] = peer;
			return;
		}
	}
	if (rs->warm_run[rail])
		log_info("rail %d (%s): TCP warm-up of %d connection%s done, one at a time, in "
			 "%llu ms",
			 rail, rs->rail[rail].ifname, rs->warm_run[rail],
			 rs->warm_run[rail] == 1 ? "" : "s",
			 (unsigned long long)((r2_now_us() - rs->warm_run_us[rail]) / 1000));
	rs->warm_run[rail] = 0;
}

void rl_warmup(struct r2_rails *rs, int rail, uint64_t peer)
{
	if (!(rs->rail[rail].ops->caps & R2_TP_CAP_STREAMS) ||
	    !r2_param_int(&rs->d->params, P_TCP_WARMUP))
		return;
	if (rs->warm_n[rail] == R2_MAX_PEERS)
		return; /* the queue is full: this one goes cold */
	rs->warm_q[rail][(rs->warm_head[rail] + rs->warm_n[rail]) % R2_MAX_PEERS] = peer;
	rs->warm_n[rail]++;
	if (!rs->warm_busy[rail]) {
		if (!rs->warm_run[rail])
			rs->warm_run_us[rail] = r2_now_us();
		warmup_next(rs, rail);
	}
}

void rl_warmup_done(struct r2_rails *rs, int rail, uint64_t peer)
{
	if (rs->warm_busy[rail] == peer)
		warmup_next(rs, rail);
}
