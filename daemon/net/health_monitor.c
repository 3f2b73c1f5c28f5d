/* SPDX-License-Identifier: MIT */
/*
 * The throughput monitor: slow (peer, rail) paths, found on the sending
 * side, reported to every peer so that views plan their NIC degraded.
 *
 * Per path: the bytes of data chunks acknowledged while at least one was
 * outstanding, over the time one was outstanding (shared among the paths of
 * the rail busy at the same time): what the path delivers while it has
 * work, so an idle rail is never "slow", nor a path that shares its NIC
 * with others. Every MON_PERIOD_US the loop samples each path (a sample
 * needs MON_MIN_BUSY_US of work and MON_MIN_BYTES acknowledged) and
 * compares its rate with this host's other paths measured recently (the
 * best other one, or the upper quartile when more than 3). Below
 * degraded_pct for MON_SLOW_SAMPLES samples in a row: the path is slow,
 * told to every peer (RailEvent DEGRADED with the planning bandwidth); the
 * communicator's coordinator turns slow paths into a degraded NIC
 * (health_view.c) and every daemon plans with that NIC's bandwidth.
 * Back above 1.5 x degraded_pct (at most 90%) for recover_stable_ms, not
 * below degraded_pct for MON_BAND_FACTOR x recover_stable_ms, or not
 * measured for MON_EXPIRE_US (traffic returns to it: measured again):
 * normal. A NIC planned degraded for a while gets a trial
 * (r2h_mon_trial_due): its slow paths are normal again, so that the next
 * view plans it at full speed and they are measured there, since at a small
 * share a path whose NIC is fast again can measure under degraded_pct, or
 * nothing, for as long as the share lasts (its chunks wait at the receiver
 * behind the full-share ones). A path is not judged while it ramps up
 * (r2h_mon_ramping), nor while either end has a NIC planned degraded
 * (mon_exempt).
 * docs/resilience.md "Slow paths as degraded NICs" has the measurements
 * behind each rule.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/health_int.h"
#include "log.h"
#include "util.h"

#define MON_PERIOD_US 500000ull
#define MON_MIN_BUSY_US 50000ull
#define MON_MIN_BYTES (1ull << 20)
#define MON_SLOW_SAMPLES 3
#define MON_RECENT_US 5000000ull
#define MON_EXPIRE_US 10000000ull
/* A slow path that measures between degraded_pct and the recovery line
 * (1.5 x degraded_pct) for this many recover_stable_ms is normal again: it
 * would not have been found slow. Planned at a small share, a path that is
 * fast again may measure no better than that (its chunks queue at a
 * receiving NIC the others load fully, which its sender does not see). */
#define MON_BAND_FACTOR 2
/* Nothing acknowledged for this long while work is out: its chunks went by
 * another rail or were lost with a connection; count afresh. */
#define MON_NOACK_US 1000000ull

int r2h_mon_init(struct r2_health *h)
{
	for (int i = 0; i < R2_MAX_RAILS; i++)
		pthread_mutex_init(&h->mon_lock[i], NULL);
	h->mon = calloc((size_t)R2_MAX_PEERS * R2_MAX_RAILS, sizeof(*h->mon));
	h->rmon = calloc(R2_MAX_RAILS, sizeof(*h->rmon));
	h->rates = calloc((size_t)R2_MAX_PEERS * R2_MAX_RAILS, sizeof(double));
	if (!h->mon || !h->rmon) {
		free(h->mon);
		h->mon = NULL;
		return -ENOMEM;
	}
	for (size_t i = 0; i < (size_t)R2_MAX_PEERS * R2_MAX_RAILS; i++)
		h->mon[i].bslot = -1;
	return 0;
}

void r2h_mon_free(struct r2_health *h)
{
	free(h->slow);
	free(h->mon);
	free(h->rmon);
	free(h->rates);
	for (int i = 0; i < R2_MAX_RAILS; i++)
		pthread_mutex_destroy(&h->mon_lock[i]);
}

static struct pmon *pmon_of(struct r2d *d, int rail, uint64_t peer)
{
	struct r2_health *h = d->health;
	struct r2_rails *rs = d->rails;
	struct r2_peer *p;

	if (!h || !h->mon || !rs || rail < 0 || rail >= rs->n)
		return NULL;
	p = r2d_rails_peer_find(d, peer);
	return p ? &h->mon[(size_t)(p - rs->peer) * R2_MAX_RAILS + (size_t)rail] : NULL;
}

/* Under mon_lock[rail]: the time since the last call is shared among the
 * paths of the rail that had work (k paths at once get 1/k each), so a path
 * that shares its NIC with others is not "slow" for it: its rate is what it
 * would deliver alone. */
static void rmon_advance(struct r2_health *h, int rail, uint64_t now)
{
	struct rmon *x = &h->rmon[rail];

	if (x->nbusy && now > x->last_us) {
		uint64_t share = (now - x->last_us) / (uint64_t)x->nbusy;
		for (int i = 0; i < x->nbusy; i++)
			x->busy[i]->busy_us += share;
	}
	x->last_us = now;
}

static void rmon_idle(struct r2_health *h, int rail, struct pmon *m)
{
	struct rmon *x = &h->rmon[rail];

	m->out = 0;
	if (m->bslot < 0 || m->bslot >= x->nbusy || x->busy[m->bslot] != m)
		return;
	x->busy[m->bslot] = x->busy[--x->nbusy];
	x->busy[m->bslot]->bslot = m->bslot;
	m->bslot = -1;
}

void r2d_health_peer_forget(struct r2d *d, int slot, uint64_t id)
{
	struct r2_health *h = d->health;

	if (h)
		r2h_pathev_forget(h, id);
	if (!h || !h->mon || slot < 0 || slot >= R2_MAX_PEERS)
		return;
	for (int r = 0; r < R2_MAX_RAILS; r++) {
		struct pmon *m = &h->mon[(size_t)slot * R2_MAX_RAILS + (size_t)r];
		pthread_mutex_lock(&h->mon_lock[r]);
		rmon_idle(h, r, m);
		memset(m, 0, sizeof(*m));
		m->bslot = -1;
		pthread_mutex_unlock(&h->mon_lock[r]);
		if (h->rates)
			h->rates[(size_t)slot * R2_MAX_RAILS + (size_t)r] = 0;
	}
}

void r2d_health_data_posted(struct r2d *d, int rail, uint64_t peer, int64_t len)
{
	struct pmon *m = pmon_of(d, rail, peer);
	struct r2_health *h = d->health;
	uint64_t now;

	if (!m || !len)
		return;
	now = r2_now_us();
	pthread_mutex_lock(&h->mon_lock[rail]);
	rmon_advance(h, rail, now);
	if (len > 0 && m->out <= 0)
		m->busy_since_us = now;
	if (len > 0 && m->out <= 0 && m->bslot < 0) {
		m->bslot = h->rmon[rail].nbusy;
		h->rmon[rail].busy[h->rmon[rail].nbusy++] = m;
	}
	m->out += len;
	if (m->out <= 0) /* a post that failed, undone */
		rmon_idle(h, rail, m);
	pthread_mutex_unlock(&h->mon_lock[rail]);
}

void r2d_health_data_acked(struct r2d *d, int rail, uint64_t peer, uint32_t len)
{
	struct pmon *m = pmon_of(d, rail, peer);
	struct r2_health *h = d->health;
	uint64_t now;

	if (!m || !len)
		return;
	now = r2_now_us();
	pthread_mutex_lock(&h->mon_lock[rail]);
	if (m->out > 0) {
		rmon_advance(h, rail, now);
		m->acked += len;
		m->last_ack_us = now;
		m->out -= len;
		if (m->out <= 0)
			rmon_idle(h, rail, m);
	}
	pthread_mutex_unlock(&h->mon_lock[rail]);
}
void r2h_slow_set(struct r2_health *h, uint64_t a, uint64_t b, int rail, uint64_t bw)
{
	for (size_t i = 0; i < h->nslow; i++) {
		struct slowrep *x = &h->slow[i];
		if (x->a != a || x->b != b || x->rail != rail)
			continue;
		if (!bw)
			*x = h->slow[--h->nslow];
		else
			x->bw = bw;
		h->view_dirty = true;
		return;
	}
	if (!bw)
		return;
	if (h->nslow == h->capslow) {
		size_t cap = h->capslow ? h->capslow * 2 : 16;
		void *n = realloc(h->slow, cap * sizeof(*h->slow));
		if (!n)
			return;
		h->slow = n;
		h->capslow = cap;
	}
	h->slow[h->nslow++] = (struct slowrep){ a, b, rail, bw };
	h->view_dirty = true;
}

/* The path (this host -> p, rail r) is slow (bw > 0, planning bandwidth)
 * or normal again (bw 0): record, mark the path, tell every peer. */
static void path_slow(struct r2d *d, struct r2_peer *p, int r, uint64_t bw, const char *cause)
{
	struct pmon *m = &d->health->mon[(size_t)(p - d->rails->peer) * R2_MAX_RAILS + (size_t)r];

	m->slow = bw != 0;
	m->bw = bw;
	m->below = 0;
	m->ok_since_us = 0;
	m->band_since_us = 0;
	r2h_slow_set(d->health, d->host_id, p->id, r, bw);
	if (bw)
		r2h_link_state(d, p, r, R2_RS_DEGRADED, cause);
	else if (p->link[r].state == R2_RS_DEGRADED)
		r2h_link_state(d, p, r, R2_RS_HEALTHY, cause);
	r2h_broadcast_ev(d, r, R2_RS_DEGRADED, p->id, bw, cause);
}

/* A failed or reconnected path measures afresh. */
void r2h_pmon_reset(struct r2d *d, struct r2_peer *p, int r)
{
	struct r2_health *h = d->health;
	struct pmon *m;

	if (!h || !h->mon)
		return;
	m = &h->mon[(size_t)(p - d->rails->peer) * R2_MAX_RAILS + (size_t)r];
	pthread_mutex_lock(&h->mon_lock[r]);
	rmon_advance(h, r, r2_now_us());
	rmon_idle(h, r, m);
	m->busy_us = 0;
	m->acked = 0;
	pthread_mutex_unlock(&h->mon_lock[r]);
	m->rate = 0;
	m->rate_us = 0;
	m->fresh = false;
	m->below = 0;
	m->busy_from_us = 0;
	if (m->slow) {
		m->slow = false;
		m->bw = 0;
		m->ok_since_us = 0;
		m->band_since_us = 0;
		r2h_slow_set(h, d->host_id, p->id, r, 0);
		r2h_broadcast_ev(d, r, R2_RS_DEGRADED, p->id, 0, "path failed");
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Whether peer p has lost (or drained) a NIC, or a path to it failed: then
 * every host sends it through the NICs it has left, whose receive side is
 * shared by more senders than each sender sees, and a path to it that is
 * slower than the others is not a slow NIC (a "degraded" re-plan of such a
 * peer made AllReduce slower than the NIC-down plan alone: resilience.md). */
static bool peer_short(const struct r2_peer *p, int nr)
{
	for (int x = 0; x < nr; x++)
		if ((p->remote_down & (1u << x)) || p->link[x].state == R2_RS_FAILED ||
		    p->link[x].state == R2_RS_RECOVERING)
			return true;
	return false;
}

/* Whether a committed view of a live communicator already plans the NIC of
 * peer p on rail r as degraded (loop thread). Its paths then carry a small
 * share and measure low against the best path even when the NIC is fast
 * again (their chunks queue behind the others' at a receiving NIC), and a
 * new slow report would start the next communicator degraded. No new slow
 * report for them: the ones that put the NIC there stand until they clear. */
static bool planned_degraded(struct r2d *d, const struct r2_peer *p, int r)
{
	struct r2_health *h = d->health;
	bool yes = false;

	pthread_mutex_lock(&h->lock);
	for (struct hcomm *hc = h->comms; hc && !yes; hc = hc->next) {
		struct hview_node *n = hc->views;
		if (!hc->seen || !hc->host_ids)
			continue;
		while (n && n->next)
			n = n->next; /* the latest committed */
		if (!n || !n->v || (uint32_t)r >= n->v->nrails)
			continue;
		for (uint32_t k = 0; k < n->v->nhosts && k < (uint32_t)hc->nhosts; k++)
			if (hc->host_ids[k] == p->id) {
				size_t i = (size_t)k * n->v->nrails + (size_t)r;
				yes = n->v->bw[i] && !n->v->down[i];
				break;
			}
	}
	pthread_mutex_unlock(&h->lock);
	return yes;
}
/* A send stall on path (peer index i, rail r): data posted to it has waited
 * longer than stall with no acknowledgement and nothing at all heard on the
 * path since (last), while the peer was heard on another rail within stall
 * (last_any): a path that carries work answers every chunk, so this is a
 * black hole seen sooner than hb_misses of silence. */
bool r2h_send_stalled(struct r2_health *h, int i, int r, uint64_t now, uint64_t last,
		      uint64_t last_any, uint64_t stall)
{
	struct pmon *m;
	uint64_t since;
	bool out;

	if (!stall || !h->mon || now <= last || now - last <= stall || now - last_any > stall)
		return false;
	m = &h->mon[(size_t)i * R2_MAX_RAILS + (size_t)r];
	pthread_mutex_lock(&h->mon_lock[r]);
	out = m->out > 0;
	since = m->last_ack_us > m->busy_since_us ? m->last_ack_us : m->busy_since_us;
	pthread_mutex_unlock(&h->mon_lock[r]);
	return out && now > since && now - since > stall;
}

/* When path l joined: it last turned healthy (rejoined, or back from
 * degraded) or connected. */
static uint64_t joined_us(const struct r2_plink *l)
{
	return l->since_us > l->conn_us ? l->since_us : l->conn_us;
}

/* A path ramps up for MON_RAMP_US from its first traffic after it joined:
 * TCP slow start on a new connection, the other paths' queues draining
 * after the re-plan that turns traffic to it. That traffic comes when a
 * committed view plans the path again, which can be well after this host
 * holds it healthy (the view waits for every host's facts, and the other
 * side's dial follows its backoff): counting from the state change, as
 * before, left a rejoined path judged from its first byte. A path not
 * healthy (failed, recovering: its peer is short of paths, see peer_short)
 * is not judged either. */
bool r2h_mon_ramping(const struct r2_plink *l, uint64_t busy_from_us, uint64_t now)
{
	if (l->state != R2_RS_HEALTHY && l->state != R2_RS_DEGRADED)
		return true;
	if (now < joined_us(l) + MON_RAMP_US)
		return true;
	return !busy_from_us || busy_from_us < joined_us(l) || now < busy_from_us + MON_RAMP_US;
}

/* A NIC's first trial comes MON_TRIAL_FACTOR x recover_stable_ms after a
 * view planned it degraded, the next ones twice as late per time it was
 * degraded again within MON_TRIAL_HOLD_US of being released (the view at
 * full speed, the ramp-up and MON_SLOW_SAMPLES take about 5 s), at most
 * 2^MON_TRIAL_MAX_SHIFT times: a NIC that stays slow pays a few seconds at
 * a full share now and then, ever more rarely; one that is fast again comes
 * back within the wait at worst. The NIC's, not each path's: every host
 * sees the same commits, so the paths of one NIC have their trials
 * together and the view that follows plans it at full speed. */
bool r2h_mon_trial_due(uint64_t since, int trials, uint64_t stable_us, uint64_t now)
{
	int shift = trials < 0 ? 0 : trials > MON_TRIAL_MAX_SHIFT ? MON_TRIAL_MAX_SHIFT : trials;

	return stable_us && since && now >= since &&
	       now - since >= ((MON_TRIAL_FACTOR * stable_us) << shift);
}

void r2h_nicdeg_set(struct nicdeg *n, bool deg, uint64_t now)
{
	if (deg && !n->on) {
		bool again = n->free_us && now - n->free_us <= MON_TRIAL_HOLD_US;
		n->trials = !again ? 0 : n->trials < MON_TRIAL_MAX_SHIFT ? n->trials + 1 : n->trials;
		n->since_us = now;
		n->on = true;
	} else if (!deg && n->on) {
		n->on = false;
		n->free_us = now;
	}
}

/* A view committed: the NICs it plans degraded are so from now (those it
 * no longer plans degraded are released by mon_nic_sync once no live
 * communicator's latest view does). */
void r2h_mon_view(struct r2d *d, const struct hcomm *hc, const struct r2_view *v, uint64_t now)
{
	struct r2_health *h = d->health;

	if (!h || !h->mon || !v || !hc->host_ids)
		return;
	for (uint32_t k = 0; k < v->nhosts && k < (uint32_t)hc->nhosts; k++) {
		struct r2_peer *p = (int)k == hc->my_host ? NULL
							  : r2d_rails_peer_find(d, hc->host_ids[k]);
		if ((int)k != hc->my_host && !p)
			continue;
		for (uint32_t r = 0; r < v->nrails && r < R2_MAX_RAILS; r++) {
			size_t i = (size_t)k * v->nrails + r;
			if (!v->bw[i] || v->down[i])
				continue;
			r2h_nicdeg_set(p ? &r2h_pmon(d, (int)(p - d->rails->peer), (int)r)->nic
					 : &h->nic_self[r],
				       true, now);
		}
	}
}

/* The NIC records of NICs no live communicator plans degraded any more:
 * released (a communicator that ended, a view that planned them at full
 * speed again). */
static void mon_nic_sync(struct r2d *d, int np, int nr, uint64_t now)
{
	struct r2_health *h = d->health;

	for (int r = 0; r < nr; r++)
		if (h->nic_self[r].on && d->rails->rail[r].h.state != R2_RS_DEGRADED)
			r2h_nicdeg_set(&h->nic_self[r], false, now);
	for (int i = 0; i < np; i++)
		for (int r = 0; r < nr; r++) {
			struct pmon *m = r2h_pmon(d, i, r);
			if (m->nic.on && !planned_degraded(d, &d->rails->peer[i], r))
				r2h_nicdeg_set(&m->nic, false, now);
		}
}

/* This period's sample of every path (busy time, bytes acknowledged) into
 * its rate: an EWMA of the valid samples. */
static void mon_sample(struct r2_health *h, int np, int nr, uint64_t now)
{
	for (int r = 0; r < nr; r++) {
		pthread_mutex_lock(&h->mon_lock[r]);
		rmon_advance(h, r, now);
		pthread_mutex_unlock(&h->mon_lock[r]);
	}
	for (int i = 0; i < np; i++) {
		for (int r = 0; r < nr; r++) {
			struct pmon *m = &h->mon[(size_t)i * R2_MAX_RAILS + (size_t)r];
			uint64_t db, da;
			pthread_mutex_lock(&h->mon_lock[r]);
			if (m->out > 0 && now - m->last_ack_us > MON_NOACK_US && !m->acked) {
				rmon_idle(h, r, m);
				m->busy_us = 0;
			}
			db = m->busy_us;
			da = m->acked;
			m->busy_us = m->acked = 0;
			pthread_mutex_unlock(&h->mon_lock[r]);
			m->fresh = false;
			if (db >= MON_MIN_BUSY_US && da >= MON_MIN_BYTES) {
				double x = (double)da * 1e6 / (double)db;
				m->rate = m->rate > 0 ? 0.5 * m->rate + 0.5 * x : x;
				m->rate_us = now;
				m->fresh = true;
			}
		}
	}
}

/* The reference a path is compared with: with up to 3 paths measured
 * recently, the best other one; with more, the upper quartile of them all
 * (one path that measures above the line rate, a burst through a shaper's
 * bucket, does not make the others look slow; a NIC whose paths are all
 * slow still has its host's other rails above it). */
struct mon_ref {
	double best, second, q75;
	const struct pmon *bestm;
};

static void mon_reference(struct r2_health *h, int np, int nr, uint64_t now, struct mon_ref *x)
{
	size_t nrec = 0;

	memset(x, 0, sizeof(*x));
	for (int i = 0; i < np; i++) {
		for (int r = 0; r < nr; r++) {
			const struct pmon *o = &h->mon[(size_t)i * R2_MAX_RAILS + (size_t)r];
			if (o->rate <= 0 || now - o->rate_us > MON_RECENT_US)
				continue;
			if (h->rates)
				h->rates[nrec] = o->rate;
			nrec++;
			if (o->rate > x->best) {
				x->second = x->best;
				x->best = o->rate;
				x->bestm = o;
			} else if (o->rate > x->second) {
				x->second = o->rate;
			}
		}
	}
	if (nrec > 3 && h->rates) {
		qsort(h->rates, nrec, sizeof(double), cmp_double);
		x->q75 = h->rates[(nrec - 1) * 3 / 4];
	}
}

/* The lines a path is judged by (degraded_pct; the recovery line). */
struct mon_lines {
	double thr, rec;
	uint64_t stable;
};

/* A path not slow: MON_SLOW_SAMPLES samples in a row below the line. */
static void mon_judge_new(struct r2d *d, struct r2_peer *p, int r, struct pmon *m, double ratio,
			  uint64_t bw, const char *cause, double thr)
{
	char name[64];

	m->below = ratio < thr ? m->below + 1 : 0;
	if (m->below < MON_SLOW_SAMPLES)
		return;
	r2d_health_event(d, 2, "slow_path", r2h_peer_name(d, p->id, name, sizeof(name)), "%s: %s",
			 d->rails->rail[r].ifname, cause);
	path_slow(d, p, r, bw, cause);
}

/* A slow path's trial, when its NIC's is due (r2h_mon_trial_due): normal
 * again, so the next view plans the NIC at full speed. The NIC: this
 * host's on the rail, or the peer's, whichever a committed view plans
 * degraded (none: no trial; its reports stand until they clear). Due by
 * time alone: at a small share a path fast again may not even make a valid
 * sample (its chunks take less than MON_MIN_BUSY_US a period). */
static bool mon_trial(struct r2d *d, struct r2_peer *p, int r, struct pmon *m,
		      const struct mon_lines *ln, uint64_t now)
{
	const struct nicdeg *n = d->health->nic_self[r].on ? &d->health->nic_self[r]
				 : m->nic.on			   ? &m->nic
								   : NULL;
	char why[160];

	if (!n || !r2h_mon_trial_due(n->since_us, n->trials, ln->stable, now))
		return false;
	snprintf(why, sizeof(why),
		 "trial %d: %s NIC degraded for %.0f s, planned at full speed again to measure it",
		 n->trials + 1, n == &m->nic ? "its" : "this host's",
		 (double)(now - n->since_us) / 1e6);
	path_slow(d, p, r, 0, why);
	return true;
}

/* A slow path: normal again (recovery line held, or inside the band long
 * enough), or a new planning figure when it measures under half of it
 * (every new figure may re-plan, and busy rates on a loaded host vary).
 * Lower only: at a small share a capped NIC's chunks pass in bursts (a
 * shaper's bucket refills while it idles) and measured twice its figure;
 * raised, the figure overloaded it, then came down again: 45 ms per
 * iteration instead of 31 (docs/resilience.md, Trials). A NIC fast again
 * comes back by the rules above or by its trial. */
static void mon_judge_slow(struct r2d *d, struct r2_peer *p, int r, struct pmon *m, double ratio,
			   uint64_t bw, const char *cause, const struct mon_lines *ln,
			   uint64_t now)
{
	if (ratio >= ln->thr) {
		if (!m->band_since_us)
			m->band_since_us = now;
		if (ratio >= ln->rec && !m->ok_since_us)
			m->ok_since_us = now;
		if (ratio < ln->rec)
			m->ok_since_us = 0;
		if ((m->ok_since_us && now - m->ok_since_us >= ln->stable) ||
		    now - m->band_since_us >= MON_BAND_FACTOR * ln->stable) {
			path_slow(d, p, r, 0, cause);
			return;
		}
		if (ratio >= ln->rec)
			return;
	} else {
		m->band_since_us = 0;
		m->ok_since_us = 0;
	}
	if (2 * (double)bw < (double)m->bw)
		path_slow(d, p, r, bw, cause);
}

/* Whether path (p, r), not slow, is to be left unjudged this period. */
static bool mon_exempt(struct r2d *d, struct r2_peer *p, int r, struct pmon *m, uint64_t now)
{
	if (m->fresh && (!m->busy_from_us || m->busy_from_us < joined_us(&p->link[r])))
		m->busy_from_us = now; /* its first traffic since it joined */
	if (r2h_mon_ramping(&p->link[r], m->busy_from_us, now)) {
		/* its ramp-up samples are not kept: the first sample after the
		 * ramp starts its rate afresh */
		m->rate = 0;
		return true;
	}
	if (peer_short(p, d->rails->n))
		return true; /* its NICs left carry more than their share */
	/* either end has a NIC planned at a small share: on this rail, the
	 * path carries a small share already; on another, that host's other
	 * NICs carry its traffic too, at a receive side that each sender
	 * shares without seeing it, as for a peer short of a NIC */
	for (int x = 0; x < d->rails->n; x++)
		if (d->rails->rail[x].h.state == R2_RS_DEGRADED || planned_degraded(d, p, x))
			return true;
	return false;
}

static void mon_judge(struct r2d *d, int i, int r, const struct mon_ref *x,
		      const struct mon_lines *ln, uint64_t now)
{
	struct r2_peer *p = &d->rails->peer[i];
	struct pmon *m = r2h_pmon(d, i, r);
	double ref = x->q75 > 0 ? x->q75 : m == x->bestm ? x->second : x->best;
	char cause[160];

	if (m->slow && (ln->thr <= 0 || now - m->rate_us > MON_EXPIRE_US)) {
		path_slow(d, p, r, 0,
			  ln->thr <= 0 ? "throughput monitor off"
				       : "not measured for 10 s: planned at full speed again");
		return;
	}
	if (m->slow && ln->thr > 0 && mon_trial(d, p, r, m, ln, now))
		return;
	if (!m->slow && mon_exempt(d, p, r, m, now)) {
		m->below = 0;
		return;
	}
	if (!m->fresh || ln->thr <= 0 || ref <= 0)
		return;
	double ratio = m->rate / ref;
	if (ratio > 1)
		ratio = 1;
	if (ratio < 0.02)
		ratio = 0.02;
	uint64_t bw = (uint64_t)(ratio * 1000) * (R2_PLAN_NOMINAL_BPS / 1000);
	snprintf(cause, sizeof(cause),
		 "throughput %.0f MB/s while busy, %.0f%% of the best path (%.0f MB/s)",
		 m->rate / 1e6, ratio * 100, ref / 1e6);
	if (!m->slow) {
		mon_judge_new(d, p, r, m, ratio, bw, cause, ln->thr);
		return;
	}
	log_debug("monitor: slow path to %016llx rail %d: %.0f%% of the best path, planned at %.0f%%",
		  (unsigned long long)p->id, r, ratio * 100,
		  (double)m->bw * 100 / (double)R2_PLAN_NOMINAL_BPS);
	mon_judge_slow(d, p, r, m, ratio, bw, cause, ln, now);
}

void r2h_tick_monitor(struct r2d *d, uint64_t now)
{
	struct r2_health *h = d->health;
	struct r2_rails *rs = d->rails;
	int np = atomic_load(&rs->npeers), nr = rs->n;
	struct mon_lines ln;
	struct mon_ref x;

	if (!h->mon || now - h->last_mon_us < MON_PERIOD_US)
		return;
	h->last_mon_us = now;
	ln.thr = (double)r2_param_int(&d->params, P_DEGRADED_PCT) / 100.0;
	ln.rec = ln.thr * 1.5 > 0.9 ? 0.9 : ln.thr * 1.5;
	ln.stable = p_us(d, P_RECOVER_STABLE_MS) * 1000;
	mon_sample(h, np, nr, now);
	mon_nic_sync(d, np, nr, now);
	mon_reference(h, np, nr, now, &x);
	for (int i = 0; i < np; i++)
		for (int r = 0; r < nr; r++)
			mon_judge(d, i, r, &x, &ln, now);
}
