/* SPDX-License-Identifier: MIT */
/*
 * Path and rail state machines: rtnetlink link events, transport CONN and
 * ERROR, heartbeats and silence, re-probing failed paths with backoff, and
 * the operator's drain.
 *
 * A rail's NIC losing carrier fails the rail at once: every peer connection
 * on it is dropped (queued and in-flight chunks complete with errors and
 * are re-posted on the other rails), the executors hear of it, and every
 * peer daemon is told (PEER_RAIL_EVENT) over the healthy rails. Heartbeats
 * go per peer per rail every hb_interval; a path with no message at all for
 * hb_misses intervals is failed for that peer (silent black hole), as is one
 * whose transport reports an ERROR. Failed paths are re-probed (connect)
 * with exponential backoff, forever; a path rejoins after recover_stable_ms
 * up (longer when it flaps).
 */
#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/health_int.h"
#include "log.h"
#include "peer.pb-c.h"
#include "util.h"


#define PROBE_MAX_MS 8000

/* ---- peers and paths ---- */

bool r2h_local_bad(const struct r2_rail *rl)
{
	return !rl->h.link_up || rl->h.drained ||
	       (rl->h.state == R2_RS_RECOVERING && rl->h.up_since_us) ||
	       (rl->h.state == R2_RS_FAILED && !rl->h.link_up);
}

void r2h_set_bad(struct r2d *d, struct r2_peer *p)
{
	struct r2_rails *rs = d->rails;
	uint32_t bad = 0;

	for (int r = 0; r < rs->n; r++) {
		uint8_t st = p->link[r].state;
		if (r2h_local_bad(&rs->rail[r]) || st == R2_RS_FAILED || st == R2_RS_RECOVERING ||
		    (p->remote_down & (1u << r)))
			bad |= 1u << r;
	}
	if (atomic_exchange(&p->bad_mask, bad) != bad)
		d->health->view_dirty = true;
}

void r2h_link_state(struct r2d *d, struct r2_peer *p, int r, int st, const char *cause)
{
	struct r2_plink *l = &p->link[r];
	char name[64], subj[96];

	if (l->state == st)
		return;
	snprintf(subj, sizeof(subj), "%s/%s", d->rails->rail[r].ifname,
		 r2h_peer_name(d, p->id, name, sizeof(name)));
	r2d_health_event(d, st == R2_RS_FAILED ? 2 : 3, "path", subj, "%s -> %s: %s",
			 r2d_rstate_name(l->state), r2d_rstate_name(st), cause);
	l->state = (uint8_t)st;
	l->changes++;
	l->since_us = r2_now_us();
	if (cause != l->cause)
		snprintf(l->cause, sizeof(l->cause), "%s", cause);
}

/* Fails the path to p on rail r. report: tell the peers (a path failure
 * only; NIC failures are told by the caller). deliver: tell the executors
 * (the transport did not already). */
void r2h_link_fail(struct r2d *d, struct r2_peer *p, int r, const char *cause, bool report,
		      bool deliver)
{
	struct r2_rails *rs = d->rails;
	struct r2_plink *l = &p->link[r];
	uint64_t hb_ms = p_us(d, P_HB_INTERVAL) / 1000;

	l->errors++;
	rs->rail[r].h.errors++;
	if (l->state == R2_RS_FAILED) {
		r2h_set_bad(d, p);
		return;
	}
	r2h_pmon_reset(d, p, r);
	r2h_link_state(d, p, r, R2_RS_FAILED, cause);
	l->failovers++;
	rs->rail[r].h.failovers++;
	if (p->conn_mask & (1u << r))
		r2d_rails_drop(d, r, p->id);
	p->conn_mask &= ~(1u << r);
	p->want_mask &= ~(1u << r);
	l->backoff_ms = hb_ms > 100 ? hb_ms : 100;
	l->next_probe_us = r2_now_us() + l->backoff_ms * 1000;
	r2h_set_bad(d, p);
	if (deliver) {
		struct r2_tp_cqe e = { .type = R2_TPC_ERROR, .status = -ECONNABORTED,
				       .peer = p->id, .stream = -1 };
		d->net_ev->deliver(d, r, &e);
	}
	if (report)
		r2h_broadcast_rail(d, r, R2_RS_FAILED, p->id, cause);
}

void r2h_rail_state(struct r2d *d, int r, int st, const char *cause)
{
	struct r2_rail *rl = &d->rails->rail[r];

	if (rl->h.state == st)
		return;
	r2d_health_event(d, st == R2_RS_FAILED ? 2 : 3, "rail_state", rl->ifname, "%s -> %s: %s",
			 r2d_rstate_name(rl->h.state), r2d_rstate_name(st), cause);
	rl->h.state = (uint8_t)st;
	rl->h.since_us = r2_now_us();
	rl->h.changes++;
	snprintf(rl->h.cause, sizeof(rl->h.cause), "%s", cause);
	d->health->view_dirty = true;
}

static int recent_flaps(struct r2_rail *rl, uint64_t now)
{
	int n = 0;

	for (int i = 0; i < 16; i++)
		if (rl->h.flap_us[i] && now - rl->h.flap_us[i] < 60000000ull)
			n++;
	return n;
}

/* Stability required before a failed rail rejoins: doubled per recent
 * failure (a flapping link stays out longer), at most 8x. */
static uint64_t stable_us(struct r2d *d, struct r2_rail *rl, uint64_t now)
{
	int f = recent_flaps(rl, now);
	uint64_t base = p_us(d, P_RECOVER_STABLE_MS) * 1000;

	return base << (f <= 1 ? 0 : f >= 4 ? 3 : f - 1);
}

static void rail_link(struct r2d *d, int r, bool up, const char *how)
{
	struct r2_rails *rs = d->rails;
	struct r2_rail *rl = &rs->rail[r];
	uint64_t now = r2_now_us();
	char cause[128];

	if (rl->h.link_up == up)
		return;
	rl->h.link_up = up;
	if (!up) {
		snprintf(cause, sizeof(cause), "link down (%s)", how);
		rl->h.flap_us[rl->h.changes % 16] = now;
		rl->h.up_since_us = 0;
		rl->h.errors++;
		r2h_rail_state(d, r, R2_RS_FAILED, cause);
		for (int i = 0; i < atomic_load(&rs->npeers); i++) {
			struct r2_peer *p = &rs->peer[i];
			if (p->link[r].known || (p->conn_mask & (1u << r)))
				r2h_link_fail(d, p, r, cause, false, true);
		}
		r2h_broadcast_rail(d, r, R2_RS_FAILED, 0, cause);
		return;
	}
	rl->h.up_since_us = now;
	snprintf(cause, sizeof(cause), "link up (%s); rejoins after %llu ms stable", how,
		 (unsigned long long)(stable_us(d, rl, now) / 1000));
	r2h_rail_state(d, r, R2_RS_RECOVERING, cause);
	for (int i = 0; i < atomic_load(&rs->npeers); i++) {
		struct r2_peer *p = &rs->peer[i];
		p->link[r].next_probe_us = now; /* probe at once */
		p->link[r].backoff_ms = 0;
		r2h_set_bad(d, p);
	}
}

/* ---- rtnetlink ---- */

static void on_netlink(uv_poll_t *ph, int status, int events)
{
	struct r2d *d = ph->data;
	struct r2_rails *rs = d->rails;
	char buf[16384];

	(void)events;
	if (status < 0 || !rs)
		return;
	for (;;) {
		ssize_t n = recv(d->health->nlfd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n <= 0)
			break;
		for (struct nlmsghdr *nh = (struct nlmsghdr *)buf; NLMSG_OK(nh, (size_t)n);
		     nh = NLMSG_NEXT(nh, n)) {
			if (nh->nlmsg_type != RTM_NEWLINK && nh->nlmsg_type != RTM_DELLINK)
				continue;
			struct ifinfomsg *ifi = NLMSG_DATA(nh);
			bool up = nh->nlmsg_type == RTM_NEWLINK && (ifi->ifi_flags & IFF_UP) &&
				  (ifi->ifi_flags & IFF_RUNNING);
			for (int r = 0; r < rs->n; r++)
				if (rs->rail[r].h.ifindex == (uint32_t)ifi->ifi_index)
					rail_link(d, r, up, up ? "rtnetlink: carrier up"
							       : "rtnetlink: carrier/operstate down");
		}
	}
	r2h_kick(d);
}

int r2h_netlink_open(struct r2d *d)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = RTMGRP_LINK };
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	d->health->nlfd = fd;
	uv_poll_init(d->loop, &d->health->nlpoll, fd);
	d->health->nlpoll.data = d;
	uv_poll_start(&d->health->nlpoll, UV_READABLE, on_netlink);
	d->health->nl_on = true;
	return 0;
}


void r2d_health_conn(struct r2d *d, int rail, uint64_t peer, int type, int status)
{
	struct r2_rails *rs = d->rails;
	struct r2_peer *p;
	uint64_t now = r2_now_us();
	char cause[128];

	if (!d->health || !rs || rail < 0 || rail >= rs->n)
		return;
	p = r2d_rails_peer(d, peer, type == R2_TPC_CONN);
	if (!p)
		return;
	struct r2_plink *l = &p->link[rail];
	if (type == R2_TPC_CONN) {
		p->gone_mask &= ~(1u << rail);
		l->known = true;
		l->conn_us = now;
		l->missed = 0;
		atomic_store(&p->last_rx_us[rail], now);
		if (l->state == R2_RS_FAILED) {
			l->stable_since_us = now;
			r2h_link_state(d, p, rail, R2_RS_RECOVERING, "connected again (probe)");
		}
		r2h_set_bad(d, p);
		/* a peer that connects first now learns of NICs of ours that were
		 * drained or failed before (their events went to the peers
		 * connected then): once per peer, on its first connection */
		if (!p->conn_mask || (p->conn_mask & ~(1u << rail)) == 0)
			r2h_tell_local_state(d, p);
		return;
	}
	/* reset by the peer, or a dial refused: its host answers, its daemon
	 * is not there (a link down times out or is unreachable instead) */
	if (status == -ECONNRESET || status == -ECONNREFUSED)
		p->gone_mask |= 1u << rail;
	else
		p->gone_mask &= ~(1u << rail);
	snprintf(cause, sizeof(cause), "connection error: %s", strerror(-status));
	r2h_link_fail(d, p, rail, cause, false, false);
	r2h_kick(d);
}

/* ---- the tick ---- */

/* p has no rail to this host: a heartbeat through a bridge (detour.h), so
 * that a peer reached only through a third host stays alive while the plan
 * relays its data (nothing of its own then comes through a bridge) or while
 * no collective runs. Not to a peer gone or silent past its timeout (the
 * bridge would only drop it); it answers with its own. */
static void heartbeat_bridged(struct r2d *d, struct r2_peer *p, uint64_t now, uint64_t ptimeout)
{
	uint64_t last = atomic_load(&p->detour_rx_us);

	if (last < p->nopath_since_us)
		last = p->nopath_since_us;
	/* last may be later than now: the rails thread stores detour_rx_us */
	if ((now > last && now - last > ptimeout) || r2h_daemon_gone(d, p) || !r2h_bridged(d, p))
		return;
	r2d_rails_send_ctrl_all(d, p->id, R2PEER__PEER_MSG__PEER_ALIVE, "", 0);
}

/* Link state by polling too, once a second (netlink may be missing). */
static void poll_links(struct r2d *d, uint64_t now)
{
	struct r2_rails *rs = d->rails;
	struct r2_health *h = d->health;

	if (now - h->last_link_poll_us < 1000000 && h->nl_on)
		return;
	h->last_link_poll_us = now;
	for (int r = 0; r < rs->n; r++) {
		int st = rs->rail[r].ops->link_state(rs->rail[r].tp);
		if (st >= 0)
			rail_link(d, r, st == 1, "link state poll");
	}
}

/* The rails' byte rates (MEASURED in `r2cclctl rails`): 1 s samples, EWMA. */
static void sample_rails(struct r2d *d, uint64_t now)
{
	struct r2_rails *rs = d->rails;
	struct r2_health *h = d->health;
	double dt;

	if (now - h->last_stat_us < 1000000)
		return;
	dt = h->last_stat_us ? (double)(now - h->last_stat_us) / 1e6 : 0;
	h->last_stat_us = now;
	for (int r = 0; r < rs->n; r++) {
		struct r2_rhealth *x = &rs->rail[r].h;
		uint64_t tx = 0, rx = 0;
		rs->rail[r].ops->stats(rs->rail[r].tp, &tx, &rx);
		if (dt > 0) {
			double t = (double)(tx - x->last_tx) / dt, q = (double)(rx - x->last_rx) / dt;
			x->tx_bps = (uint64_t)(0.5 * (double)x->tx_bps + 0.5 * t);
			x->rx_bps = (uint64_t)(0.5 * (double)x->rx_bps + 0.5 * q);
		}
		x->last_tx = tx;
		x->last_rx = rx;
	}
}

/* Rail r's state from its link and its paths: recovering -> healthy once
 * the link is stable; failed when no peer it knows is reachable on it;
 * healthy again when one is. */
static void rail_transition(struct r2d *d, int r, uint64_t now)
{
	struct r2_rails *rs = d->rails;
	struct r2_rail *rl = &rs->rail[r];
	int nknown = 0, nfailed = 0, nup = 0;
	const char *first = NULL;

	for (int i = 0; i < atomic_load(&rs->npeers); i++) {
		struct r2_plink *l = &rs->peer[i].link[r];
		if (!l->known)
			continue;
		nknown++;
		if (l->state == R2_RS_FAILED) {
			nfailed++;
			if (!first)
				first = l->cause;
		} else if (rs->peer[i].conn_mask & (1u << r)) {
			nup++;
		}
	}
	if (!rl->h.link_up)
		return;
	if (rl->h.state == R2_RS_RECOVERING && rl->h.up_since_us &&
	    now - rl->h.up_since_us >= stable_us(d, rl, now)) {
		r2h_rail_state(d, r, R2_RS_HEALTHY, "link stable");
		rl->h.up_since_us = 0;
		r2h_broadcast_rail(d, r, rl->h.drained ? R2_RS_DRAINED : R2_RS_HEALTHY, 0,
				   "link stable");
		for (int i = 0; i < atomic_load(&rs->npeers); i++)
			r2h_set_bad(d, &rs->peer[i]);
	} else if ((rl->h.state == R2_RS_HEALTHY || rl->h.state == R2_RS_DEGRADED) && nknown &&
		   nfailed == nknown) {
		char cause[160];
		snprintf(cause, sizeof(cause), "no peer reachable: %s", first);
		rl->h.flap_us[rl->h.changes % 16] = now;
		r2h_rail_state(d, r, R2_RS_FAILED, cause);
	} else if (rl->h.state == R2_RS_FAILED && nup) {
		r2h_rail_state(d, r, R2_RS_HEALTHY, "a peer is reachable again");
	}
}

void r2h_tick_rails(struct r2d *d, uint64_t now)
{
	poll_links(d, now);
	sample_rails(d, now);
	for (int r = 0; r < d->rails->n; r++)
		rail_transition(d, r, now);
}

/* The last time peer p was heard from on any connected rail, or through a
 * bridge (detour.h: its data says it is alive, so a rail that stays silent
 * meanwhile is a failed path, not a stalled host); 0: no connection. */
static uint64_t heard_any(const struct r2_rails *rs, struct r2_peer *p)
{
	uint64_t last_any = 0, via;

	for (int r = 0; r < rs->n; r++) {
		if (!(p->conn_mask & (1u << r)))
			continue;
		uint64_t x = atomic_load(&p->last_rx_us[r]);
		if (x < p->link[r].conn_us)
			x = p->link[r].conn_us;
		if (x > last_any)
			last_any = x;
	}
	via = atomic_load(&p->detour_rx_us);
	if (last_any && via > last_any)
		last_any = via;
	return last_any;
}

/* The silence limits of one tick. */
struct silence {
	uint64_t iv, silent, stall, ptimeout;
	bool hb; /* a heartbeat is due */
};

/* A connected path (peer index i, rail r): its heartbeat; failed when
 * silent; healthy once it has been up stably. A peer silent on every rail
 * at once (whole) is stalled or gone as a whole, not a NIC: failing its
 * paths after hb_misses would leave no path and break its communicators at
 * once, when a host that was not scheduled for a while comes back by
 * itself. Such a peer's paths fail only after peer_timeout_ms of silence,
 * and its communicators break then (a dead daemon resets its connections at
 * once; a host black-holed on every rail ends here). */
static void path_connected(struct r2d *d, int i, int r, uint64_t last_any, bool whole,
			   const struct silence *sl, uint64_t now)
{
	struct r2_peer *p = &d->rails->peer[i];
	struct r2_plink *l = &p->link[r];
	struct r2_rail *rl = &d->rails->rail[r];
	uint64_t last = atomic_load(&p->last_rx_us[r]);

	if (last < l->conn_us)
		last = l->conn_us;
	if (sl->hb) {
		struct r2_chunk_hdr hh = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_HEARTBEAT,
					   .off = now };
		rl->ops->post_send(rl->tp, p->id, &hh, NULL, 0);
	}
	uint32_t missed = now > last ? (uint32_t)((now - last) / sl->iv) : 0;
	if (missed > l->missed)
		l->missed_total += missed - l->missed;
	l->missed = missed;
	bool stalled = r2h_send_stalled(d->health, i, r, now, last, last_any, sl->stall);
	if (now > last && (now - last > sl->silent || stalled) &&
	    now >= d->health->stall_until_us && (!whole || now - last_any > sl->ptimeout)) {
		char cause[160];
		snprintf(cause, sizeof(cause),
			 "no message for %llu ms (%u heartbeats missed): silent %s",
			 (unsigned long long)(now - last) / 1000, l->missed,
			 whole	   ? "on every rail (peer timeout)"
			 : stalled ? "path with data outstanding (send stall)"
				   : "path");
		if (whole)
			p->nopath_since_us = last_any;
		r2h_link_fail(d, p, r, cause, true, true);
		return;
	}
	if (l->state == R2_RS_RECOVERING && rl->h.link_up && !(p->remote_down & (1u << r)) &&
	    now - l->stable_since_us >= stable_us(d, rl, now)) {
		r2h_link_state(d, p, r, R2_RS_HEALTHY, "stable");
		r2h_set_bad(d, p);
		r2h_broadcast_rail(d, r, R2_RS_HEALTHY, p->id, "stable");
	}
}

/* A failed path not connected: dial it again when its backoff is over
 * (doubled per probe, at most PROBE_MAX_MS). */
static void path_probe(struct r2d *d, struct r2_peer *p, int r, uint64_t now)
{
	struct r2_plink *l = &p->link[r];
	struct r2_rail *rl = &d->rails->rail[r];

	if (l->state != R2_RS_FAILED && l->state != R2_RS_RECOVERING)
		return;
	if (!rl->h.link_up || (p->remote_down & (1u << r)) || !p->addr[r] ||
	    now < l->next_probe_us)
		return;
	p->want_mask &= ~(1u << r);
	int e = r2d_rails_connect(d, p->id, p->addr[r], p->port[r]);
	log_debug("rail %s: probing peer %016llx (backoff %llu ms): %s", rl->ifname,
		  (unsigned long long)p->id, (unsigned long long)l->backoff_ms,
		  e < 0 ? strerror(-e) : "dialing");
	l->backoff_ms = l->backoff_ms ? l->backoff_ms * 2 : 100;
	if (l->backoff_ms > PROBE_MAX_MS)
		l->backoff_ms = PROBE_MAX_MS;
	l->next_probe_us = now + l->backoff_ms * 1000;
}

void r2h_tick_paths(struct r2d *d, uint64_t now)
{
	struct r2_rails *rs = d->rails;
	struct r2_health *h = d->health;
	struct silence sl;

	sl.iv = p_us(d, P_HB_INTERVAL);
	sl.silent = sl.iv * p_us(d, P_HB_MISSES);
	sl.stall = sl.iv * p_us(d, P_HB_STALL_MISSES);
	sl.ptimeout = p_us(d, P_PEER_TIMEOUT_MS) * 1000;
	sl.hb = now - h->last_hb_us >= sl.iv;
	if (sl.hb)
		h->last_hb_us = now;
	for (int i = 0; i < atomic_load(&rs->npeers); i++) {
		struct r2_peer *p = &rs->peer[i];
		uint64_t last_any = heard_any(rs, p);
		bool whole = last_any && now > last_any && now - last_any > sl.silent;
		bool known = false;
		for (int r = 0; r < rs->n; r++) {
			if (p->conn_mask & (1u << r))
				path_connected(d, i, r, last_any, whole, &sl, now);
			else
				path_probe(d, p, r, now);
			known |= p->link[r].known;
		}
		if (p->conn_mask || !known)
			p->nopath_since_us = 0;
		else if (!p->nopath_since_us)
			p->nopath_since_us = now;
		if (sl.hb && p->nopath_since_us)
			heartbeat_bridged(d, p, now, sl.ptimeout);
	}
}

/* Drains or undrains a rail (r2cclctl drain/undrain, root only): no new
 * traffic, connections kept; every peer is told. */
int r2d_health_drain(struct r2d *d, const char *nic, bool drain, char *err, size_t errlen)
{
	struct r2_rails *rs = d->rails;

	for (int r = 0; rs && r < rs->n; r++) {
		struct r2_rail *rl = &rs->rail[r];
		if (strcmp(rl->ifname, nic))
			continue;
		if (rl->h.drained == drain)
			return 0;
		rl->h.drained = drain;
		r2d_health_event(d, 3, "drain", rl->ifname, "%s by r2cclctl",
				 drain ? "drained (no new traffic; connections kept)" : "undrained");
		for (int i = 0; i < atomic_load(&rs->npeers); i++)
			r2h_set_bad(d, &rs->peer[i]);
		r2h_broadcast_rail(d, r,
			       drain ? R2_RS_DRAINED
				     : (rl->h.state == R2_RS_FAILED ? R2_RS_FAILED : R2_RS_HEALTHY),
			       0, drain ? "drained by the operator" : "undrained by the operator");
		return 0;
	}
	snprintf(err, errlen, "%s is not a rail of this daemon (see 'r2cclctl rails')", nic);
	return -ENODEV;
}

/* The rails' health at start: link state as the transport sees it. */
void r2h_rails_init(struct r2d *d)
{
	struct r2_rails *rs = d->rails;

	for (int i = 0; i < rs->n; i++) {
		struct r2_rail *rl = &rs->rail[i];
		int st = rl->ops->link_state(rl->tp);
		rl->h.ifindex = if_nametoindex(rl->ifname);
		rl->h.link_up = st != 0;
		rl->h.state = st == 0 ? R2_RS_FAILED : R2_RS_HEALTHY;
		rl->h.since_us = r2_now_us();
		snprintf(rl->h.cause, sizeof(rl->h.cause), "%s",
			 st == 0 ? "link down at start" : "start");
	}
}
