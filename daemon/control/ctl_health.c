/* SPDX-License-Identifier: MIT */
/*
 * r2cclctl's rails, peers and events requests: replies built from rail
 * health's read-only snapshots (health.h), so health knows nothing of
 * sessions or reply messages.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/control.h"
#include "engine/comm.h"
#include "net/health.h"
#include "r2ccl.pb-c.h"
#include "util.h"

/* The nominal speed of a NIC from the topology (0: unknown). */
static uint32_t nic_speed(struct r2d *d, const char *nic)
{
	uint32_t mbps = 0;

	for (int i = 0; i < d->topo.nnics; i++)
		if (!strcmp(d->topo.nics[i].name, nic) || !strcmp(d->topo.nics[i].netdev, nic))
			mbps = d->topo.nics[i].speed_mbps;
	return mbps;
}

/* The ready communicators that have host `peer` among their hosts. */
static uint32_t peer_comms(struct r2d *d, uint64_t peer)
{
	uint32_t n = 0;

	pthread_mutex_lock(&d->lock);
	for (struct r2_comm *c = d->comms; c; c = c->next)
		for (int h = 0; h < c->nhosts && c->hosts; h++)
			if (c->hosts[h].id == peer && c->state == R2_COMM_READY)
				n++;
	pthread_mutex_unlock(&d->lock);
	return n;
}

static void rail_reply(struct r2d *d, const struct r2d_rail_info *x, uint64_t now,
		       R2ccl__RailInfo *ri)
{
	r2ccl__rail_info__init(ri);
	ri->nic = (char *)x->nic;
	ri->index = x->index;
	ri->state = (char *)x->state;
	ri->transport = (char *)x->transport;
	ri->speed_mbps = nic_speed(d, x->nic);
	ri->measured_mbps = (x->tx_bps > x->rx_bps ? x->tx_bps : x->rx_bps) * 8 / 1000000;
	ri->tx_bytes_total = x->tx_bytes;
	ri->rx_bytes_total = x->rx_bytes;
	ri->errors_total = x->errors;
	ri->state_changes_total = x->changes;
	ri->state_since_s = (now - x->since_us) / 1000000;
	ri->drained = x->drained;
	ri->cause = (char *)x->cause;
	ri->failovers_total = x->failovers;
}

static void path_reply(struct r2d *d, const struct r2d_path_info *x, uint64_t now, char *addr,
		       R2ccl__PeerInfo *pi)
{
	struct in_addr a = { x->addr };

	r2ccl__peer_info__init(pi);
	pi->host = (char *)x->host;
	pi->rail = (char *)x->nic;
	inet_ntop(AF_INET, &a, addr, INET_ADDRSTRLEN);
	pi->address = addr;
	pi->state = (char *)x->state;
	pi->rtt_us = x->rtt_us;
	pi->last_heartbeat_ms = x->last_rx_us && now > x->last_rx_us ? (now - x->last_rx_us) / 1000 : 0;
	pi->missed_heartbeats = x->missed;
	pi->cause = (char *)x->cause;
	pi->errors_total = x->errors;
	pi->failovers_total = x->failovers;
	pi->comms = peer_comms(d, x->peer);
}

static void rails_reply(struct r2_session *s, uint64_t req_id)
{
	struct r2d *d = s->d;
	R2ccl__RailsReply rep = R2CCL__RAILS_REPLY__INIT;
	struct r2d_health_snap snap;
	R2ccl__RailInfo *ri = NULL, **rip = NULL;
	R2ccl__PeerInfo *pi = NULL, **pip = NULL;
	char (*addrs)[INET_ADDRSTRLEN] = NULL;
	uint64_t now = r2_now_us();

	rep.req_id = req_id;
	rep.error = "";
	if (r2d_health_snapshot(d, &snap) < 0)
		goto nomem;
	ri = calloc(snap.nrails + 1, sizeof(*ri));
	rip = calloc(snap.nrails + 1, sizeof(*rip));
	pi = calloc(snap.npaths + 1, sizeof(*pi));
	pip = calloc(snap.npaths + 1, sizeof(*pip));
	addrs = calloc(snap.npaths + 1, sizeof(*addrs));
	if (!ri || !rip || !pi || !pip || !addrs)
		goto nomem;
	for (size_t r = 0; r < snap.nrails; r++) {
		rail_reply(d, &snap.rails[r], now, &ri[r]);
		rip[r] = &ri[r];
	}
	rep.n_rails = snap.nrails;
	rep.rails = rip;
	for (size_t i = 0; i < snap.npaths; i++) {
		path_reply(d, &snap.paths[i], now, addrs[i], &pi[i]);
		pip[i] = &pi[i];
	}
	/* peer host ids are root's: with one a local user could pose as that
	 * peer on the rail network (docs/security.md) */
	rep.n_peers = s->uid == 0 ? snap.npaths : 0;
	rep.peers = pip;
	goto send;
nomem:
	rep.status = -ENOMEM;
	rep.error = "out of memory";
send:
	r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_RAILS_REPLY, &rep);
	r2d_health_snap_free(&snap);
	free(ri);
	free(rip);
	free(pi);
	free(pip);
	free(addrs);
}

bool r2d_event_visible(struct r2d *d, uint32_t uid, const char *tenant,
		       const struct r2d_event_info *x)
{
	bool mine = false;

	if (uid == 0)
		return true;
	if (!x->owner)
		return false;
	pthread_mutex_lock(&d->lock);
	for (struct r2_comm *c = d->comms; c; c = c->next)
		if (c->serial == x->owner && c->owner_uid == uid && !strcmp(c->tenant, tenant))
			mine = true;
	pthread_mutex_unlock(&d->lock);
	return mine;
}

static void events_reply(struct r2_session *s, uint64_t req_id, uint64_t since, uint32_t max)
{
	R2ccl__EventsReply rep = R2CCL__EVENTS_REPLY__INIT;
	struct r2d_event_info *x = NULL;
	R2ccl__Event *ev = NULL, **evp = NULL;
	size_t n = 0;

	rep.req_id = req_id;
	rep.error = "";
	if (r2d_health_events(s->d, since, max, &x, &n, &rep.last_seq) < 0 ||
	    !(ev = calloc(n + 1, sizeof(*ev))) || !(evp = calloc(n + 1, sizeof(*evp)))) {
		rep.status = -ENOMEM;
		rep.error = "out of memory";
		n = 0;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (!r2d_event_visible(s->d, s->uid, s->tenant, &x[i]))
			continue;
		r2ccl__event__init(&ev[k]);
		ev[k].seq = x[i].seq;
		ev[k].time_unix_ms = x[i].time_ms;
		ev[k].severity = (char *)x[i].severity;
		ev[k].kind = x[i].kind;
		ev[k].subject = x[i].subject;
		ev[k].message = x[i].msg;
		evp[k] = &ev[k];
		k++;
	}
	rep.n_events = k;
	rep.events = evp;
	r2d_session_reply(s, R2CCL__MSG_TYPE__MSG_EVENTS_REPLY, &rep);
	free(x);
	free(ev);
	free(evp);
}

int r2d_ctl_rails(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__RailsRequest *m = r2ccl__rails_request__unpack(NULL, f->len, f->payload);

	if (!m)
		return -EPROTO;
	rails_reply(s, m->req_id);
	r2ccl__rails_request__free_unpacked(m, NULL);
	return 0;
}

int r2d_ctl_events(struct r2_session *s, struct r2_frame *f)
{
	R2ccl__EventsRequest *m = r2ccl__events_request__unpack(NULL, f->len, f->payload);

	if (!m)
		return -EPROTO;
	events_reply(s, m->req_id, m->since_seq, m->max);
	r2ccl__events_request__free_unpacked(m, NULL);
	return 0;
}
