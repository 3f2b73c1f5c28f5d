/* SPDX-License-Identifier: MIT */
/*
 * Control messages between peer daemons: the RailEvents this host sends
 * (its NICs, its paths, its slow paths) and those it receives, and the
 * view agreement's messages received (PROPOSE, ACK, COMMIT, REQUEST: what
 * they do to a communicator's agreement state, health_agree.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/health_int.h"
#include "peer.pb-c.h"
#include "util.h"


const char *r2h_peer_name(struct r2d *d, uint64_t id, char *buf, size_t len)
{
	/* a host name from any communicator that has it */
	pthread_mutex_lock(&d->lock);
	for (struct r2_comm *c = d->comms; c; c = c->next) {
		for (int h = 0; h < c->nhosts && c->hosts; h++) {
			if (c->hosts[h].id == id && c->hosts[h].name[0]) {
				snprintf(buf, len, "%s", c->hosts[h].name);
				pthread_mutex_unlock(&d->lock);
				return buf;
			}
		}
	}
	pthread_mutex_unlock(&d->lock);
	snprintf(buf, len, "%016llx", (unsigned long long)id);
	return buf;
}

void r2h_send_peer_msg(struct r2d *d, uint64_t peer, uint32_t type, const ProtobufCMessage *m)
{
	size_t len = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(len ? len : 1);

	if (!buf)
		return;
	protobuf_c_message_pack(m, buf);
	r2d_rails_send_ctrl_all(d, peer, type, buf, (uint32_t)len);
	free(buf);
}

/* ---- path events: one sequence per path (struct pathev) ---- */

/* a path event of this host goes PATHEV_AGAIN more times, this far apart */
#define PATHEV_AGAIN 3
#define PATHEV_AGAIN_US 500000ull

static bool pathseq_is(const struct pathseq *k, uint64_t a, uint64_t b, uint32_t rail, bool speed)
{
	return k->a == a && k->b == b && k->rail == rail && k->speed == speed;
}

static bool about(uint64_t a, uint64_t b, uint64_t id)
{
	return a == id || b == id;
}

/* Drops the entries of the array v (n of them, unordered) whose KEY.a or
 * KEY.b is id (KEY: nothing, or the member that holds a and b). */
#define DROP_ABOUT(v, n, KEY, id)                                  \
	for (size_t i_ = 0; i_ < (n);) {                           \
		if (about((v)[i_] KEY.a, (v)[i_] KEY.b, (id)))      \
			(v)[i_] = (v)[--(n)];                      \
		else                                               \
			i_++;                                      \
	}

void r2h_pathev_forget(struct r2_health *h, uint64_t id)
{
	size_t n0 = h->nreps + h->nslow;

	DROP_ABOUT(h->pev_in, h->npev_in, , id);
	DROP_ABOUT(h->pev_out, h->npev_out, .k, id);
	DROP_ABOUT(h->reps, h->nreps, , id);
	DROP_ABOUT(h->slow, h->nslow, , id);
	if (h->nreps + h->nslow != n0)
		h->view_dirty = true;
}

void r2h_pathev_free(struct r2_health *h)
{
	free(h->pev_in);
	free(h->pev_out);
	h->pev_in = NULL;
	h->pev_out = NULL;
	h->npev_in = h->cappev_in = h->npev_out = h->cappev_out = 0;
}

static void send_ev_all(struct r2d *d, const R2peer__RailEvent *e)
{
	struct r2_rails *rs = d->rails;

	for (int i = 0; i < atomic_load(&rs->npeers); i++)
		if (rs->peer[i].conn_mask)
			r2h_send_peer_msg(d, rs->peer[i].id, R2PEER__PEER_MSG__PEER_RAIL_EVENT, &e->base);
}

/* A RailEvent of this host about (k.a = this host, rail[, k.b]) */
static void ev_send(struct r2d *d, const struct pathseq *k, uint32_t state, uint64_t bw,
		    const char *cause)
{
	R2peer__RailEvent e = R2PEER__RAIL_EVENT__INIT;

	e.host_id = k->a;
	e.rail = k->rail;
	e.state = state;
	e.peer_host = k->b;
	e.bw = bw;
	e.cause = (char *)(cause ? cause : "");
	e.seq = k->seq;
	send_ev_all(d, &e);
}

/* Tells every connected peer daemon about (this host, rail[, peer]); bw: a
 * slow path's planning bandwidth (state DEGRADED; 0: no longer slow). An
 * event about a path goes again, the same, PATHEV_AGAIN times
 * (r2h_tick_pathev): the peers apply it once. */
void r2h_broadcast_ev(struct r2d *d, int rail, int state, uint64_t peer_host, uint64_t bw,
			 const char *cause)
{
	struct r2_health *h = d->health;
	struct pathseq k = { d->host_id, peer_host, (uint32_t)rail, state == R2_RS_DEGRADED,
			     ++h->my_seq };

	ev_send(d, &k, (uint32_t)state, bw, cause);
	if (!peer_host)
		return;
	struct pathev *x = NULL;
	for (size_t i = 0; i < h->npev_out && !x; i++)
		if (pathseq_is(&h->pev_out[i].k, k.a, k.b, k.rail, k.speed))
			x = &h->pev_out[i];
	if (!x) {
		if (R2_GROW(h->pev_out, h->cappev_out, h->npev_out, 16) < 0)
			return; /* (no memory: sent once) */
		x = &h->pev_out[h->npev_out++];
	}
	memset(x, 0, sizeof(*x));
	x->k = k;
	x->state = (uint32_t)state;
	x->bw = bw;
	snprintf(x->cause, sizeof(x->cause), "%s", cause ? cause : "");
	x->again = PATHEV_AGAIN;
	x->next_us = r2_now_us() + PATHEV_AGAIN_US;
}

void r2h_tick_pathev(struct r2d *d, uint64_t now)
{
	struct r2_health *h = d->health;

	for (size_t i = 0; i < h->npev_out;) {
		struct pathev *x = &h->pev_out[i];
		if (now < x->next_us) {
			i++;
			continue;
		}
		ev_send(d, &x->k, x->state, x->bw, x->cause);
		x->next_us = now + PATHEV_AGAIN_US;
		if (--x->again == 0)
			h->pev_out[i] = h->pev_out[--h->npev_out];
		else
			i++;
	}
}

void r2h_broadcast_rail(struct r2d *d, int rail, int state, uint64_t peer_host,
			   const char *cause)
{
	r2h_broadcast_ev(d, rail, state, peer_host, 0, cause);
}

/* A peer that connects first now learns of NICs of ours that were drained or
 * failed before (their events went to the peers connected then). */
void r2h_tell_local_state(struct r2d *d, struct r2_peer *p)
{
	struct r2_rails *rs = d->rails;

	for (int r = 0; r < rs->n; r++) {
		struct r2_rail *rl = &rs->rail[r];
		R2peer__RailEvent e = R2PEER__RAIL_EVENT__INIT;
		if (!rl->h.drained && rl->h.link_up)
			continue;
		e.host_id = d->host_id;
		e.rail = (uint32_t)r;
		e.state = rl->h.drained ? R2_RS_DRAINED : R2_RS_FAILED;
		e.cause = rl->h.drained ? "drained by the operator" : rl->h.cause;
		e.seq = ++d->health->my_seq;
		r2h_send_peer_msg(d, p->id, R2PEER__PEER_MSG__PEER_RAIL_EVENT, &e.base);
	}
}

/* A peer reports its path to another host failed (failed) or healthy again. */
static void linkrep_set(struct r2_health *h, uint64_t a, uint64_t b, int rail, bool failed)
{
	for (size_t i = 0; i < h->nreps; i++) {
		if (h->reps[i].rail == rail && ((h->reps[i].a == a && h->reps[i].b == b) ||
						 (h->reps[i].a == b && h->reps[i].b == a))) {
			if (!failed)
				h->reps[i] = h->reps[--h->nreps];
			return;
		}
	}
	if (!failed)
		return;
	if (h->nreps == h->capreps) {
		size_t cap = h->capreps ? h->capreps * 2 : 16;
		void *n = realloc(h->reps, cap * sizeof(*h->reps));
		if (!n)
			return;
		h->reps = n;
		h->capreps = cap;
	}
	h->reps[h->nreps++] = (struct linkrep){ a, b, rail };
	h->view_dirty = true;
}

/* Whether RailEvent e (from peer `from`, about host p) is new. An event
 * about its own NIC comes first-hand or passed on by another host; ordered
 * per NIC, so any copy, by any rail or host, applies once and never after a
 * later one. A first-hand one is passed on to every other peer: one that
 * has no rail left to the NIC's host (two NICs failed on different rails)
 * learns it through this host, or it would keep sending into the failed
 * NIC until the peer timeout. An event about a path comes first-hand only,
 * ordered per path and kind (struct pathseq): before 2026-12-07 one number
 * per peer, so an older event about another path that came after a newer
 * one was dropped. */
static bool event_fresh(struct r2d *d, struct r2_peer *p, const R2peer__RailEvent *e,
			uint64_t from, bool known)
{
	struct r2_rails *rs = d->rails;
	int r = (int)e->rail;

	if (e->peer_host) {
		if (from != e->host_id)
			return false;
		/* a path this host does not know the far end of is not kept
		 * (path_event_in: only what removes a report): no number
		 * either */
		if (!e->seq || !known)
			return true;
		struct r2_health *h = d->health;
		bool speed = e->state == R2_RS_DEGRADED;
		struct pathseq *x = NULL;
		for (size_t i = 0; i < h->npev_in && !x; i++)
			if (pathseq_is(&h->pev_in[i], e->host_id, e->peer_host, e->rail, speed))
				x = &h->pev_in[i];
		if (x && e->seq <= x->seq)
			return false; /* a copy that came by another rail, or older */
		if (!x) {
			if (R2_GROW(h->pev_in, h->cappev_in, h->npev_in, 16) < 0)
				return true;
			x = &h->pev_in[h->npev_in++];
		}
		*x = (struct pathseq){ e->host_id, e->peer_host, e->rail, speed, e->seq };
		return true;
	}
	if (e->seq && e->seq <= p->nic_seq[r])
		return false;
	p->nic_seq[r] = e->seq;
	if (from == e->host_id)
		for (int i = 0; i < atomic_load(&rs->npeers); i++)
			if (rs->peer[i].conn_mask && rs->peer[i].id != from)
				r2h_send_peer_msg(d, rs->peer[i].id, R2PEER__PEER_MSG__PEER_RAIL_EVENT,
						  &e->base);
	return true;
}

/* A RailEvent about p's path to e->peer_host (this host or another);
 * known: this host is that host, or has it in its peer table. */
static void path_event_in(struct r2d *d, struct r2_peer *p, const R2peer__RailEvent *e,
			  bool known)
{
	int r = (int)e->rail;
	char cause[160], name[64];

	/* a path between two other hosts matters only when this host knows
	 * the far end (a communicator's hosts connect to each other): reports
	 * about any other host would pile up, one entry each, for as long as
	 * the daemon runs. What removes a report applies whatever the far end
	 * (forgotten here since, r2h_pathev_forget). */
	if (!known && ((e->state == R2_RS_DEGRADED && e->bw) || e->state == R2_RS_FAILED))
		return;
	if (e->state == R2_RS_DEGRADED) {
		/* its throughput monitor: the path to peer_host is slow (bw) or
		 * normal again (bw 0) */
		r2h_slow_set(d->health, e->host_id, e->peer_host, r, e->bw);
		r2d_health_event(d, 3, "peer_path", r2h_peer_name(d, p->id, name, sizeof(name)),
				 "rail %d to %016llx %s (%s)", r, (unsigned long long)e->peer_host,
				 e->bw ? "slow" : "normal again", e->cause);
		return;
	}
	if (e->peer_host != d->host_id) {
		linkrep_set(d->health, e->host_id, e->peer_host, r, e->state == R2_RS_FAILED);
		return;
	}
	if (e->state == R2_RS_FAILED) {
		snprintf(cause, sizeof(cause), "%s reports the path silent: %s",
			 r2h_peer_name(d, p->id, name, sizeof(name)), e->cause);
		r2h_link_fail(d, p, r, cause, false, true);
	}
}

/* A RailEvent about p's own NIC on rail e->rail. */
static void nic_event_in(struct r2d *d, struct r2_peer *p, const R2peer__RailEvent *e)
{
	int r = (int)e->rail;
	char cause[160], name[64];

	if (e->state == R2_RS_FAILED || e->state == R2_RS_DRAINED) {
		p->remote_down |= 1u << r;
		d->health->view_dirty = true;
		snprintf(cause, sizeof(cause), "%s's NIC %s: %s",
			 r2h_peer_name(d, p->id, name, sizeof(name)),
			 e->state == R2_RS_DRAINED ? "drained" : "failed", e->cause);
		if (e->state == R2_RS_FAILED)
			r2h_link_fail(d, p, r, cause, false, true);
		else
			r2d_health_event(d, 3, "peer_rail", name, "rail %d: %s", r, cause);
	} else if (e->state == R2_RS_HEALTHY || e->state == R2_RS_DEGRADED) {
		p->remote_down &= ~(1u << r);
		d->health->view_dirty = true;
		p->link[r].next_probe_us = r2_now_us();
		p->link[r].backoff_ms = 0;
		r2d_health_event(d, 3, "peer_rail", r2h_peer_name(d, p->id, name, sizeof(name)),
				 "rail %d usable again (%s)", r, e->cause);
	}
	r2h_set_bad(d, p);
}

static void rail_event_in(struct r2d *d, const R2peer__RailEvent *e, uint64_t from)
{
	struct r2_peer *p = r2d_rails_peer_find(d, e->host_id);
	/* a path event's far end: this host, or one in its peer table */
	bool known = e->peer_host &&
		     (e->peer_host == d->host_id || r2d_rails_peer_find(d, e->peer_host));

	if (!p || (int)e->rail < 0 || (int)e->rail >= d->rails->n ||
	    !event_fresh(d, p, e, from, known))
		return;
	if (e->peer_host)
		path_event_in(d, p, e, known);
	else
		nic_event_in(d, p, e);
}

/* ---- view messages from peers ---- */

/* Member: the coordinator proposes a view: hold at the next collective
 * boundary and answer with the last collective started. */
static void propose_in(struct r2d *d, struct hcomm *hc, const R2peer__PlanView *m)
{
	struct r2_health *h = d->health;
	uint64_t started;

	if (m->epoch <= hc->committed_epoch)
		return;
	pthread_mutex_lock(&h->lock);
	/* a copy of an older proposal (control messages take every rail, and
	 * one rail may be slower) neither lowers the epoch held for, which
	 * a commit of that older one would then end too early (this host
	 * planning with it from a sequence the others plan with the newer),
	 * nor restarts the hold's clock, which bounds it */
	if (!hc->hold)
		hc->hold_since_us = r2_now_us();
	if (!hc->hold || hc->hold_epoch < m->epoch)
		hc->hold_epoch = m->epoch;
	hc->hold = true;
	started = hc->started;
	pthread_mutex_unlock(&h->lock);
	r2h_send_view(d, hc, 0, R2PEER__PEER_MSG__PEER_VIEW_ACK, NULL, m->epoch, started);
}

/* Coordinator: a member's answer (from: its host index). */
static void ack_in(struct r2d *d, struct hcomm *hc, const R2peer__PlanView *m, int from)
{
	if (hc->my_host == 0 && r2h_last(hc) && m->epoch <= r2h_last(hc)->epoch &&
	    (!hc->prop || m->epoch != hc->prop->epoch)) {
		/* a member still holding for this epoch: a commit was lost; it
		 * gets every one after the last it installed (have_epoch) */
		r2h_send_commits(d, hc, from, m->have_epoch);
		return;
	}
	if (hc->my_host != 0 || !hc->prop || m->epoch != hc->prop->epoch)
		return;
	hc->acked[from] = 1;
	if (m->started > hc->max_started)
		hc->max_started = m->started;
	r2h_check_acks(d, hc);
}

/* a member missing commits asks again at most this often per communicator */
#define VIEW_GAP_ASK_US 20000ull

/* Member: the coordinator's commit. */
static void commit_in(struct r2d *d, struct hcomm *hc, const R2peer__PlanView *m)
{
	struct r2_view *v;
	uint64_t started;

	/* a host has at most R2_MAX_RAILS rails: more would only size an
	 * allocation after the peer's word (2^32 rails: 64 GiB; fuzz_peer) */
	if (m->epoch <= hc->committed_epoch || m->nrails == 0 || m->nrails > R2_MAX_RAILS)
		return;
	if (m->epoch > hc->committed_epoch + 1) {
		/* A gap: commits before this one were lost (epochs are
		 * consecutive). Installing this one would plan the collectives
		 * from a missing view's start to this one's with an older view
		 * than the other hosts (each then drops the other's chunks and
		 * the operation times out everywhere). Hold the next collective
		 * and ask the coordinator for the commits after the last view
		 * installed (member_tick asks again while the hold lasts).
		 * Unless this view starts at a collective this host has not
		 * started (held now, it starts none before the install): every
		 * collective still to come here is then planned with it or a
		 * later one, and the views missed, which start no later, plan
		 * none of them. The coordinator keeps R2H_VIEW_HIST commits: a
		 * member further behind caught up only that way (before
		 * 2026-12-07 it held until its hold limit, then ran on with its
		 * old view). */
		uint64_t now = r2_now_us();
		bool ask, skip;
		char subj[32];

		pthread_mutex_lock(&d->health->lock);
		if (!hc->hold)
			hc->hold_since_us = now;
		hc->hold = true;
		if (hc->hold_epoch < m->epoch)
			hc->hold_epoch = m->epoch;
		started = hc->started;
		skip = m->start_opseq <= started + 1;
		/* once for the copies that come on each rail */
		ask = !skip && now - hc->resent_us > VIEW_GAP_ASK_US;
		if (ask)
			hc->resent_us = now;
		pthread_mutex_unlock(&d->health->lock);
		snprintf(subj, sizeof(subj), "comm %u", hc->id);
		if (skip) {
			r2d_health_event(d, 2, "replan", subj,
					 "view %llu came before view %llu; it starts at collective "
					 "%llu, not started here: the views missed plan none to come",
					 (unsigned long long)m->epoch,
					 (unsigned long long)hc->committed_epoch + 1,
					 (unsigned long long)m->start_opseq);
		} else {
			if (!ask)
				return;
			r2d_health_event(d, 2, "replan", subj,
					 "view %llu came before view %llu: asking the coordinator "
					 "for the views missed",
					 (unsigned long long)m->epoch,
					 (unsigned long long)hc->committed_epoch + 1);
			r2h_send_view(d, hc, 0, R2PEER__PEER_MSG__PEER_VIEW_ACK, NULL,
				      hc->hold_epoch, started);
			return;
		}
	}
	v = r2h_view_new((uint32_t)hc->nhosts, m->nrails);
	if (!v)
		return;
	v->epoch = m->epoch;
	v->start = m->start_opseq;
	for (size_t i = 0; i < m->n_down_nics; i++)
		if (m->down_nics[i] < v->nhosts * v->nrails)
			v->down[m->down_nics[i]] = 1;
	for (size_t i = 0; i < m->n_nic_bw && i < v->nhosts * v->nrails; i++)
		v->bw[i] = m->nic_bw[i];
	r2h_view_committed(d, hc, v);
}

/* The communicator a view message is about (a live one of ours), and the
 * sender's host index in it. */
static struct hcomm *view_msg_comm(struct r2d *d, const R2peer__PlanView *m, uint64_t peer,
				   int *from)
{
	struct hcomm *hc = NULL;
	struct r2_uid u;

	*from = -1;
	if (m->uid.len != sizeof(u))
		return NULL;
	memcpy(&u, m->uid.data, sizeof(u));
	pthread_mutex_lock(&d->lock);
	struct r2_comm *c = d->net_ev->comm_by_uid(d, &u);
	if (c && c->state == R2_COMM_READY)
		hc = r2h_hc_for(d, c);
	pthread_mutex_unlock(&d->lock);
	for (int i = 0; hc && i < hc->nhosts; i++)
		if (hc->host_ids[i] == peer)
			*from = i;
	return *from < 0 ? NULL : hc;
}

/* PEER_VIEW_PROPOSE, _ACK, _COMMIT, _REQUEST from peer. */
static void view_msg_in(struct r2d *d, uint32_t type, const uint8_t *buf, size_t len, uint64_t peer)
{
	R2peer__PlanView *m = r2peer__plan_view__unpack(NULL, len, buf);
	struct hcomm *hc;
	int from;

	if (!m)
		return;
	hc = view_msg_comm(d, m, peer, &from);
	if (!hc)
		goto out;
	switch (type) {
	case R2PEER__PEER_MSG__PEER_VIEW_PROPOSE:
		if (from == 0)
			propose_in(d, hc, m);
		break;
	case R2PEER__PEER_MSG__PEER_VIEW_ACK:
		ack_in(d, hc, m, from);
		break;
	case R2PEER__PEER_MSG__PEER_VIEW_COMMIT:
		if (from == 0)
			commit_in(d, hc, m);
		break;
	case R2PEER__PEER_MSG__PEER_VIEW_REQUEST:
		if (hc->my_host == 0)
			hc->replan = true;
		break;
	}
out:
	r2peer__plan_view__free_unpacked(m, NULL);
}

void r2d_health_ctrl(struct r2d *d, const struct r2_loop_ev *ev)
{
	uint32_t type = ev->cqe.hdr.aux;

	if (!d->health)
		return;
	if (type == R2PEER__PEER_MSG__PEER_ALIVE)
		return; /* the rails thread marked its origin alive (detour_rx_us) */
	if (type != R2PEER__PEER_MSG__PEER_RAIL_EVENT) {
		view_msg_in(d, type, ev->cqe.buf, ev->cqe.hdr.len, ev->cqe.peer);
		return;
	}
	R2peer__RailEvent *e = r2peer__rail_event__unpack(NULL, ev->cqe.hdr.len, ev->cqe.buf);
	if (e) {
		rail_event_in(d, e, ev->cqe.peer);
		r2peer__rail_event__free_unpacked(e, NULL);
	}
	r2h_kick(d);
}
