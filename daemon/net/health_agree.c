/* SPDX-License-Identifier: MIT */
/*
 * View agreement: each communicator's coordinator (host index 0) proposes
 * the view when the facts change; members stop at their next collective
 * boundary and answer with the last collective they started; the commit
 * names the first collective that uses it (max started + 1). Executors ask
 * for the view to plan each collective with (r2d_health_op_begin).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/health_int.h"
#include "log.h"
#include "peer.pb-c.h"
#include "util.h"

/* A proposal not answered, or a commit not come, after this long is sent
 * again (the rail it went by may have failed just then). */
#define VIEW_RESEND_US 200000ull

struct hcomm *r2h_hc_get(struct r2_health *h, uint64_t key, bool create)
{
	struct hcomm *hc;

	for (hc = h->comms; hc; hc = hc->next)
		if (hc->key == key)
			return hc;
	if (!create || !(hc = calloc(1, sizeof(*hc))))
		return NULL;
	hc->key = key;
	hc->next = h->comms;
	h->comms = hc;
	return hc;
}

/* Under d->lock: the record for c, filled in. */
struct hcomm *r2h_hc_for(struct r2d *d, struct r2_comm *c)
{
	struct r2_health *h = d->health;
	struct hcomm *hc;

	pthread_mutex_lock(&h->lock);
	hc = r2h_hc_get(h, c->key, true);
	if (hc && !hc->known && c->hosts && c->nhosts > 0) {
		hc->host_ids = calloc((size_t)c->nhosts, sizeof(uint64_t));
		hc->acked = calloc((size_t)c->nhosts, 1);
		if (hc->host_ids && hc->acked) {
			for (int i = 0; i < c->nhosts; i++)
				hc->host_ids[i] = c->hosts[i].id;
			hc->uid = c->uid;
			hc->id = c->id;
			hc->nhosts = c->nhosts;
			hc->my_host = c->my_host;
			hc->known = true;
		}
	}
	pthread_mutex_unlock(&h->lock);
	return hc && hc->known ? hc : NULL;
}

void r2h_hc_free(struct hcomm *hc)
{
	while (hc->views) {
		struct hview_node *n = hc->views;
		hc->views = n->next;
		r2d_view_free(n->v);
		free(n);
	}
	for (int i = 0; i < hc->nhist; i++)
		r2d_view_free(hc->hist[i]);
	r2d_view_free(hc->prop);
	free(hc->host_ids);
	free(hc->acked);
	free(hc);
}

static void pack_view(R2peer__PlanView *m, const struct hcomm *hc, const struct r2_view *v,
		      uint32_t *dn, uint64_t *bw)
{
	size_t n = 0;

	m->uid.data = (uint8_t *)&hc->uid;
	m->uid.len = sizeof(hc->uid);
	if (!v)
		return;
	m->epoch = v->epoch;
	m->start_opseq = v->start;
	m->nrails = v->nrails;
	for (uint32_t i = 0; i < v->nhosts * v->nrails; i++)
		if (v->down[i])
			dn[n++] = i;
	m->n_down_nics = n;
	m->down_nics = dn;
	bool anybw = false;
	for (uint32_t i = 0; i < v->nhosts * v->nrails; i++) {
		bw[i] = v->bw[i];
		anybw |= bw[i] != 0;
	}
	if (anybw) {
		m->n_nic_bw = v->nhosts * v->nrails;
		m->nic_bw = bw;
	}
}

void r2h_send_view(struct r2d *d, struct hcomm *hc, int to, uint32_t type,
		      const struct r2_view *v, uint64_t epoch, uint64_t started)
{
	R2peer__PlanView m = R2PEER__PLAN_VIEW__INIT;
	size_t n = v ? (size_t)v->nhosts * v->nrails + 1 : 1;
	uint32_t *dn = calloc(n, sizeof(*dn));
	uint64_t *bw = calloc(n, sizeof(*bw));

	if (dn && bw) {
		pack_view(&m, hc, v, dn, bw);
		m.epoch = epoch;
		m.started = started;
		if (type == R2PEER__PEER_MSG__PEER_VIEW_ACK)
			m.have_epoch = hc->committed_epoch;
		for (int i = 0; i < hc->nhosts; i++)
			if (i != hc->my_host && (to < 0 || to == i))
				r2h_send_peer_msg(d, hc->host_ids[i], type, &m.base);
	}
	free(dn);
	free(bw);
}

static void add_view(struct r2_health *h, struct hcomm *hc, struct r2_view *v)
{
	struct hview_node *n = calloc(1, sizeof(*n)), **pp;

	if (!n) {
		r2d_view_free(v);
		return;
	}
	n->v = v;
	pthread_mutex_lock(&h->lock);
	if (v->epoch > hc->committed_epoch) {
		for (pp = &hc->views; *pp && (*pp)->v->start <= v->start; pp = &(*pp)->next)
			;
		n->next = *pp;
		*pp = n;
		hc->committed_epoch = v->epoch;
		n = NULL;
	}
	if (hc->hold && hc->hold_epoch <= v->epoch) {
		hc->hold = false;
		pthread_cond_broadcast(&h->cond);
	}
	pthread_mutex_unlock(&h->lock);
	if (n) {
		r2d_view_free(n->v);
		free(n);
	}
}

/* A committed view plans some of this host's NICs degraded: the rails show
 * it (and healthy again once a view no longer does). */
static void view_local(struct r2d *d, const struct hcomm *hc, const struct r2_view *v)
{
	struct r2_rails *rs = d->rails;
	char cause[160];

	for (int r = 0; rs && r < rs->n; r++) {
		struct r2_rail *rl = &rs->rail[r];
		size_t i = (size_t)hc->my_host * (v ? v->nrails : 0) + (size_t)r;
		bool slow = v && (uint32_t)r < v->nrails && v->bw[i] && !v->down[i];
		if (slow && rl->h.state == R2_RS_HEALTHY) {
			snprintf(cause, sizeof(cause),
				 "slow paths (throughput monitor): planned at %llu%% by view %llu",
				 (unsigned long long)(v->bw[i] * 100 / R2_PLAN_NOMINAL_BPS),
				 (unsigned long long)v->epoch);
			r2h_rail_state(d, r, R2_RS_DEGRADED, cause);
		} else if (!slow && rl->h.state == R2_RS_DEGRADED) {
			snprintf(cause, sizeof(cause), "throughput normal again (view %llu)",
				 v ? (unsigned long long)v->epoch : 0ull);
			r2h_rail_state(d, r, R2_RS_HEALTHY, cause);
		}
	}
}

/* A view committed (by this coordinator, or received): logged, shown on
 * the rails, and handed to the executors. */
void r2h_view_committed(struct r2d *d, struct hcomm *hc, struct r2_view *v)
{
	char what[256], subj[32];

	r2h_view_describe(v, what, sizeof(what));
	snprintf(subj, sizeof(subj), "comm %u", hc->id);
	d->health->replans++;
	if (hc->hold && hc->hold_since_us) { /* add_view below ends the hold */
		d->health->replan_timed++;
		d->health->replan_us_sum += r2_now_us() - hc->hold_since_us;
	}
	r2d_health_event(d, 3, "replan", subj, "view %llu from collective %llu: %s",
			 (unsigned long long)v->epoch, (unsigned long long)v->start, what);
	view_local(d, hc, v);
	r2h_mon_view(d, hc, v, r2_now_us());
	add_view(d->health, hc, v);
}

void r2h_send_commits(struct r2d *d, struct hcomm *hc, int to, uint64_t have)
{
	if (hc->nhist && hc->hist[0]->epoch > have + 1)
		log_warn("communicator %u: a member asks for view %llu, the oldest kept is %llu",
			 hc->id, (unsigned long long)have + 1,
			 (unsigned long long)hc->hist[0]->epoch);
	for (int i = 0; i < hc->nhist; i++)
		if (hc->hist[i]->epoch > have)
			r2h_send_view(d, hc, to, R2PEER__PEER_MSG__PEER_VIEW_COMMIT, hc->hist[i],
				      hc->hist[i]->epoch, 0);
}

static void commit(struct r2d *d, struct hcomm *hc)
{
	struct r2_view *v = hc->prop, *keep;

	hc->prop = NULL;
	v->start = hc->max_started + 1;
	/* never before the previous commit's start (a dropped proposal's
	 * partial ACKs may report less): members planned those sequences
	 * with it already */
	if (hc->nhist && hc->hist[hc->nhist - 1] && v->start < hc->hist[hc->nhist - 1]->start)
		v->start = hc->hist[hc->nhist - 1]->start;
	keep = r2h_view_copy(v);
	if (keep) {
		if (hc->nhist == R2H_VIEW_HIST) {
			r2d_view_free(hc->hist[0]);
			memmove(hc->hist, hc->hist + 1, sizeof(hc->hist[0]) * (R2H_VIEW_HIST - 1));
			hc->nhist--;
		}
		hc->hist[hc->nhist++] = keep;
	}
	/* the commit before this one goes again first: a member that lost it
	 * (written on a rail as it failed) while this one gets through
	 * installs both, in order, and plans the collectives between their
	 * starts as everyone else (commit_in: a gap holds instead) */
	r2h_send_commits(d, hc, -1, v->epoch > 1 ? v->epoch - 2 : 0);
	if (!keep)
		r2h_send_view(d, hc, -1, R2PEER__PEER_MSG__PEER_VIEW_COMMIT, v, v->epoch, 0);
	r2h_view_committed(d, hc, v);
}

static void propose(struct r2d *d, struct hcomm *hc, struct r2_view *v)
{
	struct r2_health *h = d->health;

	v->epoch = hc->committed_epoch + 1;
	hc->prop = v;
	memset(hc->acked, 0, (size_t)hc->nhosts);
	hc->acked[hc->my_host] = 1;
	hc->prop_us = r2_now_us();
	pthread_mutex_lock(&h->lock);
	hc->hold = true;
	hc->hold_epoch = v->epoch;
	hc->hold_since_us = hc->prop_us;
	hc->max_started = hc->started;
	pthread_mutex_unlock(&h->lock);
	hc->replan = false;
	r2h_send_view(d, hc, -1, R2PEER__PEER_MSG__PEER_VIEW_PROPOSE, NULL, v->epoch, 0);
	if (hc->nhosts <= 1)
		commit(d, hc);
}

void r2h_check_acks(struct r2d *d, struct hcomm *hc)
{
	if (!hc->prop)
		return;
	for (int i = 0; i < hc->nhosts; i++)
		if (!hc->acked[i])
			return;
	commit(d, hc);
}

/* ---- control messages from peers ---- */


/* ---- executor side ---- */

/* c broke (health's peer timeout, an abort from a peer): read without
 * d->lock, as the executors do; a stale answer costs one more 20 ms wait */
static bool comm_broken(const struct r2_comm *c)
{
	return c->state == R2_COMM_BROKEN || c->state == R2_COMM_DEAD || c->abort_err;
}

struct r2_view *r2d_health_op_begin(struct r2_comm *c, uint64_t seq)
{
	struct r2d *d = c->d;
	struct r2_health *h = d->health;
	struct r2_view *v = NULL;
	struct hcomm *hc;
	/* A member holds at most twice as long as the coordinator keeps a
	 * proposal (peer_timeout_ms): a commit can come until the coordinator
	 * drops it, and a member that went on with the old view before a commit
	 * naming its next collective would run another plan than the others
	 * (all of them then wait until op_timeout_ms). Once the coordinator
	 * dropped it, its next proposal (or commit) releases the member. */
	uint64_t limit = p_us(d, P_PEER_TIMEOUT_MS) * 2000;

	if (!h)
		return NULL;
	pthread_mutex_lock(&h->lock);
	hc = r2h_hc_get(h, c->key, true);
	if (!hc) {
		pthread_mutex_unlock(&h->lock);
		return NULL;
	}
	/* ... and not at all for a communicator broken meanwhile (a peer's
	 * daemon gone: its next collective fails at once instead of holding
	 * for a commit that cannot come) */
	while (hc->hold && !c->stop && !comm_broken(c) && r2_now_us() - hc->hold_since_us < limit) {
		struct timespec ts = r2_deadline_in_us(20000);
		pthread_cond_timedwait(&h->cond, &h->lock, &ts);
	}
	if (hc->hold) /* the agreement did not finish in time: go on */
		hc->hold = false;
	hc->started = seq;
	struct hview_node *use = NULL;
	for (struct hview_node *n = hc->views; n && n->v->start <= seq; n = n->next)
		use = n;
	if (use) {
		/* older views are never needed again (seq only grows) */
		while (hc->views != use) {
			struct hview_node *n = hc->views;
			hc->views = n->next;
			r2d_view_free(n->v);
			free(n);
		}
		v = r2h_view_copy(use->v);
	}
	pthread_mutex_unlock(&h->lock);
	return v;
}

/* ---- the tick ---- */

/* p has no rail to this host, but another connected peer may reach it:
 * control messages go through it (detour.h). */
bool r2h_bridged(struct r2d *d, const struct r2_peer *p)
{
	struct r2_rails *rs = d->rails;

	for (int i = 0; i < atomic_load(&rs->npeers); i++)
		if (&rs->peer[i] != p && rs->peer[i].conn_mask)
			return true;
	return false;
}

/* p's daemon is gone: no connection, and every rail's was reset or its dial
 * refused. No bridge reaches it either, so nobody waits peer_timeout_ms for
 * it (a bridge that lost it too drops what is detoured to it). */
bool r2h_daemon_gone(struct r2d *d, const struct r2_peer *p)
{
	uint32_t all = (1u << d->rails->n) - 1;

	return p && !p->conn_mask && (p->gone_mask & all) == all;
}

/* Breaks c (under d->lock) when a peer host of it has had no connection on
 * any rail for peer_timeout_ms, no data through a bridge (detour.h) either,
 * and no collective of c has completed in that time (a view that routes
 * around the missing paths keeps them completing, and each needs every
 * host). */
/* t (0: never) is within win of now; t may be later than now (another
 * thread stored it after this tick read the clock: no wrap to "long ago") */
static bool recent(uint64_t t, uint64_t now, uint64_t win)
{
	return t && t + win >= now;
}

static void comm_check_peers(struct r2d *d, struct r2_comm *c, uint64_t now, uint64_t ptimeout)
{
	for (int i = 0; i < c->nhosts; i++) {
		struct r2_peer *p = i == c->my_host ? NULL : r2d_rails_peer_find(d, c->hosts[i].id);
		uint64_t via = p ? atomic_load(&p->detour_rx_us) : 0;
		if (!p || !p->nopath_since_us)
			continue;
		bool dead = r2h_daemon_gone(d, p);
		if (!dead && (recent(p->nopath_since_us, now, ptimeout) || recent(via, now, ptimeout) ||
			      recent(c->coll_done_us, now, ptimeout)))
			continue;
		char why[192];
		if (dead)
			snprintf(why, sizeof(why),
				 "peer host %s's daemon is gone (every rail's connection reset or "
				 "refused)",
				 c->hosts[i].name);
		else
			snprintf(why, sizeof(why), "peer host %s unreachable on every rail for %llu ms",
				 c->hosts[i].name,
				 (unsigned long long)(now - p->nopath_since_us) / 1000);
		r2d_health_event(d, 1, "comm_broken", c->hosts[i].name, "comm %u: %s", c->id, why);
		d->net_ev->comm_break(c, R2CCL_E_PEER_GONE, why);
		return;
	}
}

/* Member: a hold for a coordinator that has no rail left and no other host
 * to reach it through ends (the executor then finds the peer gone); a hold
 * for a commit that may have been lost (sent on a rail that had just
 * failed) acknowledges again: the coordinator answers an old epoch's ACK
 * with its commit. */
static void member_tick(struct r2d *d, struct r2_comm *c, struct hcomm *hc, uint64_t now)
{
	struct r2_health *h = d->health;
	struct r2_peer *p = r2d_rails_peer_find(d, c->hosts[0].id);
	uint64_t ep = 0, st = 0;

	if (p && p->nopath_since_us && (!r2h_bridged(d, p) || r2h_daemon_gone(d, p))) {
		pthread_mutex_lock(&h->lock);
		if (hc->hold) {
			hc->hold = false;
			pthread_cond_broadcast(&h->cond);
		}
		pthread_mutex_unlock(&h->lock);
	}
	pthread_mutex_lock(&h->lock);
	if (hc->hold && now - hc->hold_since_us > VIEW_RESEND_US &&
	    now - hc->resent_us > VIEW_RESEND_US) {
		ep = hc->hold_epoch;
		st = hc->started;
		hc->resent_us = now;
	}
	pthread_mutex_unlock(&h->lock);
	if (ep)
		r2h_send_view(d, hc, 0, R2PEER__PEER_MSG__PEER_VIEW_ACK, NULL, ep, st);
}

/* Coordinator: a proposal that not every host acknowledged is dropped. The
 * members that hold for it are released by a commit of the view they
 * already plan with (same content, this epoch): safe whoever gets it or
 * not, and nobody waits out its hold limit (a killed peer's communicator
 * breaks at once, not 2 x peer_timeout_ms later). */
static void coord_drop(struct r2d *d, struct r2_comm *c, struct hcomm *hc, bool gone)
{
	struct r2_health *h = d->health;
	struct r2_view *same;

	log_warn("communicator %u: view %llu not acknowledged by every host (%s); dropped", c->id,
		 (unsigned long long)hc->prop->epoch,
		 gone ? "a member is unreachable" : "timeout");
	same = r2h_last(hc) ? r2h_view_copy(r2h_last(hc))
			: r2h_view_new((uint32_t)hc->nhosts, (uint32_t)d->rails->n);
	if (same) {
		same->epoch = hc->prop->epoch;
		r2d_view_free(hc->prop);
		hc->prop = same;
		commit(d, hc);
	} else {
		r2d_view_free(hc->prop);
		hc->prop = NULL;
	}
	pthread_mutex_lock(&h->lock);
	hc->hold = false;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

/* Coordinator with a proposal out: sent again to those that did not answer
 * (a rail that had just failed; by now through a bridge); dropped when a
 * member has no rail at all (it will not answer) or after peer_timeout_ms. */
static void coord_pending(struct r2d *d, struct r2_comm *c, struct hcomm *hc, uint64_t now,
			  uint64_t ptimeout)
{
	bool gone = false;

	if (now - hc->prop_us > VIEW_RESEND_US && now - hc->resent_us > VIEW_RESEND_US) {
		hc->resent_us = now;
		for (int i = 0; i < hc->nhosts; i++)
			if (!hc->acked[i])
				r2h_send_view(d, hc, i, R2PEER__PEER_MSG__PEER_VIEW_PROPOSE, NULL,
					      hc->prop->epoch, 0);
	}
	for (int i = 0; i < c->nhosts; i++) {
		struct r2_peer *p = i == c->my_host ? NULL : r2d_rails_peer_find(d, c->hosts[i].id);
		if (p && p->nopath_since_us && !hc->acked[i] &&
		    (!r2h_bridged(d, p) || r2h_daemon_gone(d, p)))
			gone = true;
	}
	if (gone || now - hc->prop_us > ptimeout)
		coord_drop(d, c, hc, gone);
}

/* Coordinator, no proposal out: propose when the view this host computes
 * differs from the last committed one (or a re-plan was asked for). */
static void coord_tick(struct r2d *d, struct hcomm *hc)
{
	struct r2_view *v = r2h_compute_view(d, hc);

	if (!v)
		return;
	if (!hc->replan && r2h_view_eq(v, r2h_last(hc))) {
		r2d_view_free(v);
		return;
	}
	propose(d, hc, v);
}

/* Records of communicators gone (under d->lock). */
static void reap_comms(struct r2d *d)
{
	struct r2_health *h = d->health;

	pthread_mutex_lock(&h->lock);
	for (struct hcomm **pp = &h->comms; *pp;) {
		struct hcomm *hc = *pp;
		if (hc->known && !hc->seen && !d->net_ev->comm_by_key(d, hc->key)) {
			*pp = hc->next;
			r2h_hc_free(hc);
			continue;
		}
		pp = &hc->next;
	}
	pthread_mutex_unlock(&h->lock);
}

void r2h_tick_comms(struct r2d *d, uint64_t now)
{
	struct r2_health *h = d->health;
	uint64_t ptimeout = p_us(d, P_PEER_TIMEOUT_MS) * 1000;

	pthread_mutex_lock(&d->lock);
	for (struct hcomm *hc = h->comms; hc; hc = hc->next)
		hc->seen = false;
	for (struct r2_comm *c = d->comms; c; c = c->next) {
		if (c->state != R2_COMM_READY || c->nhosts < 2)
			continue;
		struct hcomm *hc = r2h_hc_for(d, c);
		if (!hc)
			continue;
		hc->seen = true;
		comm_check_peers(d, c, now, ptimeout);
		if (c->state != R2_COMM_READY)
			continue;
		if (hc->my_host != 0)
			member_tick(d, c, hc, now);
		else if (hc->prop)
			coord_pending(d, c, hc, now, ptimeout);
		else
			coord_tick(d, hc);
	}
	reap_comms(d);
	pthread_mutex_unlock(&d->lock);
}

/* A NIC shown degraded stays so while the latest committed view of a live
 * communicator plans it degraded: when its communicators end, or their
 * views no longer do (the slow paths measured normal, nothing re-planned
 * because the view is then "every NIC up" again), it is healthy again. */
void r2h_tick_degraded(struct r2d *d)
{
	struct r2_health *h = d->health;
	struct r2_rails *rs = d->rails;
	uint32_t mask = 0;
	bool any = false;

	for (int r = 0; r < rs->n; r++)
		any |= rs->rail[r].h.state == R2_RS_DEGRADED;
	if (!any)
		return;
	pthread_mutex_lock(&h->lock);
	for (const struct hcomm *hc = h->comms; hc; hc = hc->next) {
		const struct r2_view *v = NULL;
		if (!hc->known)
			continue;
		for (const struct hview_node *n = hc->views; n; n = n->next)
			v = n->v;
		for (uint32_t r = 0; v && (int)r < rs->n && r < v->nrails; r++) {
			size_t i = (size_t)hc->my_host * v->nrails + r;
			if (v->bw[i] && !v->down[i])
				mask |= 1u << r;
		}
	}
	pthread_mutex_unlock(&h->lock);
	for (int r = 0; r < rs->n; r++)
		if (rs->rail[r].h.state == R2_RS_DEGRADED && !(mask & (1u << r)))
			r2h_rail_state(d, r, R2_RS_HEALTHY,
				   "throughput normal again (no communicator plans it degraded)");
}


/* r2cclctl rebalance: the communicators named re-plan at their next collective. */
int r2d_health_rebalance(struct r2d *d, uint32_t comm_id, uint32_t uid, const char *tenant)
{
	struct r2_health *h = d->health;
	int found = 0;

	pthread_mutex_lock(&d->lock);
	for (struct r2_comm *c = d->comms; c; c = c->next) {
		if (comm_id && c->id != comm_id)
			continue;
		if (uid != 0 && (c->owner_uid != uid || strcmp(c->tenant, tenant)))
			continue;
		found++;
		if (c->state != R2_COMM_READY || c->nhosts < 2 || !h)
			continue;
		struct hcomm *hc = r2h_hc_for(d, c);
		if (!hc)
			continue;
		if (hc->my_host == 0)
			hc->replan = true;
		else
			r2h_send_view(d, hc, 0, R2PEER__PEER_MSG__PEER_VIEW_REQUEST, NULL, 0, 0);
	}
	pthread_mutex_unlock(&d->lock);
	return comm_id && !found ? -ENOENT : 0;
}
