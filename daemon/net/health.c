/* SPDX-License-Identifier: MIT */
/*
 * Rail health (BRIEF.md decision 9): detectors, state machines, re-probing,
 * and the planning view each communicator agrees on. docs/resilience.md is
 * the design; this is a map:
 *
 *  - rtnetlink (RTMGRP_LINK) in the control loop: a rail's NIC losing carrier
 *    fails the rail at once: every peer connection on it is dropped (queued
 *    and in-flight chunks complete with errors and are re-posted on the
 *    other rails), the executors hear of it, and every peer daemon is told
 *    (PEER_RAIL_EVENT) over the healthy rails.
 *  - heartbeats per peer per rail every hb_interval; a path with no message
 *    at all for hb_misses intervals is failed for that peer (silent black
 *    hole). Transport ERRORs fail the path too.
 *  - failed paths are re-probed (connect) with exponential backoff, forever;
 *    a path rejoins after recover_stable_ms up (longer when it flaps).
 *  - the view: each communicator's coordinator (host index 0) proposes the
 *    set of unusable NICs when it changes; members stop at their next
 *    collective boundary and answer with the last collective they started;
 *    the commit names the first collective that uses it (max started + 1).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/comm_record.h"
#include "config.h"
#include "net/health.h"
#include "net/net.h"
#include "log.h"
#include "peer.pb-c.h"
#include "r2ccl.pb-c.h"
#include "net/rails.h"
#include "util.h"

#define EV_RING 256
#define PROBE_MAX_MS 8000

struct hview_node {
	struct hview_node *next;
	struct r2_view *v;
};

/* Per communicator (key): the agreed views and the agreement state. */
struct hcomm {
	struct hcomm *next;
	uint64_t key;
	/* filled by the loop when it knows the communicator */
	bool known;
	struct r2_uid uid;
	uint32_t id;
	int nhosts, my_host;
	uint64_t *host_ids;
	/* executor side (h->lock) */
	bool hold;
	uint64_t hold_epoch, hold_since_us;
	uint64_t started;
	struct hview_node *views; /* ascending start */
	uint64_t committed_epoch;
	/* coordinator (loop thread) */
	struct r2_view *last; /* committed content (NULL: everything up) */
	struct r2_view *prop;
	uint8_t *acked;
	uint64_t max_started, prop_us;
	uint64_t resent_us; /* coordinator: PROPOSE again; member: ACK again */
	bool replan;
	bool seen;
};

struct hevent {
	uint64_t seq, ms;
	int sev;
	char kind[16], subject[64], msg[224];
};

struct linkrep {
	uint64_t a, b;
	int rail;
};

/* A slow path a -> b on a rail (throughput monitor; a's own or reported by
 * a), with the bandwidth to plan it at (nominal scale). */
struct slowrep {
	uint64_t a, b;
	int rail;
	uint64_t bw;
};

/* Throughput monitor of one (peer, rail) path, sender side: bytes
 * acknowledged while chunks were outstanding, over the time they were
 * outstanding. An idle path measures nothing (not "slow"). */
struct pmon {
	/* any thread, under mon_lock[rail] */
	int64_t out;            /* data bytes posted, not yet acknowledged */
	uint64_t busy_us;       /* its share of the rail's busy time (below) */
	uint64_t acked, last_ack_us;
	uint64_t busy_since_us; /* when out last went above 0 */
	int bslot;              /* index in its rail's busy list, -1: idle */
	/* loop thread */
	double rate;            /* EWMA of bytes/s while busy; 0: none yet */
	uint64_t rate_us;       /* last valid sample */
	bool fresh;             /* this round's sample was valid */
	bool slow;
	int below;              /* consecutive samples under the threshold */
	uint64_t ok_since_us;   /* slow, but measuring fine since */
	uint64_t band_since_us; /* slow, but not below degraded_pct since */
	uint64_t bw;            /* reported planning bandwidth while slow */
};

struct r2_health {
	struct r2d *d;
	uv_timer_t timer;
	uv_poll_t nlpoll;
	int nlfd;
	bool nl_on, timer_on;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct hcomm *comms;
	struct hevent ev[EV_RING];
	uint64_t evseq;
	uint64_t my_seq;
	struct linkrep *reps;
	size_t nreps, capreps;
	uint64_t last_hb_us, last_stat_us, last_link_poll_us, last_mon_us;
	uint64_t last_tick_us, stall_until_us; /* this daemon not scheduled */
	bool view_dirty;
	struct slowrep *slow;
	size_t nslow, capslow;
	pthread_mutex_t mon_lock[R2_MAX_RAILS];
	struct pmon *mon; /* [peer index * R2_MAX_RAILS + rail] */
	double *rates;    /* scratch: recent path rates (tick_monitor) */
	struct rmon {     /* per rail, under mon_lock[rail] */
		uint64_t last_us;
		int nbusy;
		struct pmon *busy[R2_MAX_PEERS];
	} *rmon;
};

const char *r2d_rstate_name(int st)
{
	switch (st) {
	case R2_RS_HEALTHY: return "healthy";
	case R2_RS_DEGRADED: return "degraded";
	case R2_RS_FAILED: return "failed";
	case R2_RS_RECOVERING: return "recovering";
	case R2_RS_DRAINED: return "drained";
	}
	return "unknown";
}

static uint64_t p_us(struct r2d *d, int p)
{
	return (uint64_t)r2_param_int(&d->params, p);
}

/* ---- events ---- */

void r2d_health_event(struct r2d *d, int sev, const char *kind, const char *subject,
		      const char *fmt, ...)
{
	struct r2_health *h = d->health;
	struct timespec ts;
	char msg[224];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (sev <= 1)
		log_err("%s %s: %s", kind, subject, msg);
	else if (sev == 2)
		log_warn("%s %s: %s", kind, subject, msg);
	else
		log_info("%s %s: %s", kind, subject, msg);
	if (!h)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	pthread_mutex_lock(&h->lock);
	struct hevent *e = &h->ev[h->evseq % EV_RING];
	e->seq = ++h->evseq;
	e->ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	e->sev = sev;
	snprintf(e->kind, sizeof(e->kind), "%s", kind);
	snprintf(e->subject, sizeof(e->subject), "%s", subject);
	snprintf(e->msg, sizeof(e->msg), "%s", msg);
	pthread_mutex_unlock(&h->lock);
}

/* ---- views ---- */

static struct r2_view *view_new(uint32_t nh, uint32_t nr)
{
	struct r2_view *v = calloc(1, sizeof(*v));

	if (!v)
		return NULL;
	v->nhosts = nh;
	v->nrails = nr;
	v->down = calloc((size_t)nh * nr + 1, 1);
	v->bw = calloc((size_t)nh * nr + 1, sizeof(*v->bw));
	if (!v->down || !v->bw) {
		free(v->down);
		free(v->bw);
		free(v);
		return NULL;
	}
	return v;
}

void r2d_view_free(struct r2_view *v)
{
	if (!v)
		return;
	free(v->down);
	free(v->bw);
	free(v->links);
	free(v);
}

static struct r2_view *view_copy(const struct r2_view *s)
{
	struct r2_view *v = view_new(s->nhosts, s->nrails);

	if (!v)
		return NULL;
	v->epoch = s->epoch;
	v->start = s->start;
	memcpy(v->down, s->down, (size_t)s->nhosts * s->nrails);
	memcpy(v->bw, s->bw, (size_t)s->nhosts * s->nrails * sizeof(*v->bw));
	if (s->nlinks) {
		v->links = malloc(sizeof(uint32_t) * 3 * s->nlinks);
		if (!v->links) {
			r2d_view_free(v);
			return NULL;
		}
		memcpy(v->links, s->links, sizeof(uint32_t) * 3 * s->nlinks);
		v->nlinks = s->nlinks;
	}
	return v;
}

static bool view_clear(const struct r2_view *v)
{
	for (size_t i = 0; i < (size_t)v->nhosts * v->nrails; i++)
		if (v->down[i] || v->bw[i])
			return false;
	return v->nlinks == 0;
}

static bool view_eq(const struct r2_view *a, const struct r2_view *b)
{
	if (!a || !b)
		return (!a || view_clear(a)) && (!b || view_clear(b));
	size_t n = (size_t)a->nhosts * a->nrails;
	if (a->nhosts != b->nhosts || a->nrails != b->nrails || a->nlinks != b->nlinks)
		return false;
	if (memcmp(a->down, b->down, n))
		return false;
	for (size_t i = 0; i < n; i++) {
		/* bandwidth: a change under 20% is no reason to re-plan */
		double x = (double)a->bw[i], y = (double)b->bw[i];
		if ((x == 0) != (y == 0) || (x > 0 && (x > 1.2 * y || y > 1.2 * x)))
			return false;
	}
	return !a->nlinks || !memcmp(a->links, b->links, sizeof(uint32_t) * 3 * a->nlinks);
}

/* ---- peers and paths ---- */

static bool local_bad(struct r2_rail *rl)
{
	return !rl->h.link_up || rl->h.drained ||
	       (rl->h.state == R2_RS_RECOVERING && rl->h.up_since_us) ||
	       (rl->h.state == R2_RS_FAILED && !rl->h.link_up);
}

static void set_bad(struct r2d *d, struct r2_peer *p)
{
	struct r2_rails *rs = d->rails;
	uint32_t bad = 0;

	for (int r = 0; r < rs->n; r++) {
		uint8_t st = p->link[r].state;
		if (local_bad(&rs->rail[r]) || st == R2_RS_FAILED || st == R2_RS_RECOVERING ||
		    (p->remote_down & (1u << r)))
			bad |= 1u << r;
	}
	if (atomic_exchange(&p->bad_mask, bad) != bad)
		d->health->view_dirty = true;
}

static const char *peer_name(struct r2d *d, uint64_t id, char *buf, size_t len)
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

static void send_peer_msg(struct r2d *d, uint64_t peer, uint32_t type, const ProtobufCMessage *m)
{
	size_t len = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(len ? len : 1);

	if (!buf)
		return;
	protobuf_c_message_pack(m, buf);
	r2d_rails_send_ctrl_all(d, peer, type, buf, (uint32_t)len);
	free(buf);
}

/* Tells every connected peer daemon about (this host, rail[, peer]); bw: a
 * slow path's planning bandwidth (state DEGRADED; 0: no longer slow). */
static void broadcast_ev(struct r2d *d, int rail, int state, uint64_t peer_host, uint64_t bw,
			 const char *cause)
{
	struct r2_rails *rs = d->rails;
	R2peer__RailEvent e = R2PEER__RAIL_EVENT__INIT;

	e.host_id = d->host_id;
	e.rail = (uint32_t)rail;
	e.state = (uint32_t)state;
	e.peer_host = peer_host;
	e.bw = bw;
	e.cause = (char *)(cause ? cause : "");
	e.seq = ++d->health->my_seq;
	for (int i = 0; i < atomic_load(&rs->npeers); i++)
		if (rs->peer[i].conn_mask)
			send_peer_msg(d, rs->peer[i].id, R2PEER__PEER_MSG__PEER_RAIL_EVENT, &e.base);
}

static void broadcast_rail(struct r2d *d, int rail, int state, uint64_t peer_host,
			   const char *cause)
{
	broadcast_ev(d, rail, state, peer_host, 0, cause);
}

static void link_state(struct r2d *d, struct r2_peer *p, int r, int st, const char *cause)
{
	struct r2_plink *l = &p->link[r];
	char name[64], subj[96];

	if (l->state == st)
		return;
	snprintf(subj, sizeof(subj), "%s/%s", d->rails->rail[r].ifname,
		 peer_name(d, p->id, name, sizeof(name)));
	r2d_health_event(d, st == R2_RS_FAILED ? 2 : 3, "path", subj, "%s -> %s: %s",
			 r2d_rstate_name(l->state), r2d_rstate_name(st), cause);
	l->state = (uint8_t)st;
	l->since_us = r2_now_us();
	if (cause != l->cause)
		snprintf(l->cause, sizeof(l->cause), "%s", cause);
}

/* ---- throughput monitor (slow paths -> degraded NICs) ----
 *
 * Per (peer, rail) path, on the sending side: the bytes of data chunks
 * acknowledged while at least one was outstanding, over the time one was
 * outstanding (shared among the paths of the rail busy at the same time):
 * what the path delivers while it has work, so an idle rail is never
 * "slow", nor a path that shares its NIC with others. Every MON_PERIOD_US the loop samples each path (a sample
 * needs MON_MIN_BUSY_US of work and MON_MIN_BYTES acknowledged) and compares
 * its rate with this host's other paths measured recently (the best other
 * one, or the upper quartile when more than 3). Below
 * degraded_pct for MON_SLOW_SAMPLES samples in a row: the path is slow, told
 * to every peer (RailEvent DEGRADED with the planning bandwidth); the
 * communicator's coordinator turns slow paths into a degraded NIC (the
 * endpoint most slow paths share, like failed paths) in its view, and every
 * daemon plans with that NIC's bandwidth (balance: smaller shares on it).
 * Back above 1.5 x degraded_pct (at most 90%) for recover_stable_ms, not
 * below degraded_pct for MON_BAND_FACTOR x recover_stable_ms, or not
 * measured for MON_EXPIRE_US (traffic returns to it: measured again): normal.
 * A path is not judged in its first MON_RAMP_US as healthy. */
#define MON_PERIOD_US 500000ull
#define MON_MIN_BUSY_US 50000ull
#define MON_MIN_BYTES (1ull << 20)
#define MON_SLOW_SAMPLES 3
#define MON_RECENT_US 5000000ull
#define MON_EXPIRE_US 10000000ull
/* A path that just turned healthy (rejoined, or back from degraded) is not
 * judged for this long: its first traffic after the re-plan ramps up (TCP
 * slow start, the other paths' queues draining) and measured 22% of the best
 * path for over a second in the faults suite, which kept it planned at a
 * reduced share for 10 s. */
#define MON_RAMP_US 3000000ull
/* A slow path that measures between degraded_pct and the recovery line
 * (1.5 x degraded_pct) for this many recover_stable_ms is normal again: it
 * would not have been found slow. Planned at a small share, a path that is
 * fast again may measure no better than that (its chunks queue at a
 * receiving NIC the others load fully, which its sender does not see): in
 * the steady-state runs host 1's path to host 3 measured 57% of the best
 * path for 30 s after the cap on host 1's NIC was lifted, kept host 3's
 * NIC in the next communicator's view, and that communicator ran at 0.73-0.87
 * of its healthy speed. */
#define MON_BAND_FACTOR 2

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

static void slow_set(struct r2_health *h, uint64_t a, uint64_t b, int rail, uint64_t bw)
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

static void link_state(struct r2d *d, struct r2_peer *p, int r, int st, const char *cause);

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
	slow_set(d->health, d->host_id, p->id, r, bw);
	if (bw)
		link_state(d, p, r, R2_RS_DEGRADED, cause);
	else if (p->link[r].state == R2_RS_DEGRADED)
		link_state(d, p, r, R2_RS_HEALTHY, cause);
	broadcast_ev(d, r, R2_RS_DEGRADED, p->id, bw, cause);
}

/* A failed or reconnected path measures afresh. */
static void pmon_reset(struct r2d *d, struct r2_peer *p, int r)
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
	if (m->slow) {
		m->slow = false;
		m->bw = 0;
		m->ok_since_us = 0;
		m->band_since_us = 0;
		slow_set(h, d->host_id, p->id, r, 0);
		broadcast_ev(d, r, R2_RS_DEGRADED, p->id, 0, "path failed");
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
 * slower than the others is not a slow NIC. Seen: with host 2's rail 0 down
 * on 4 x 2, the three senders each measured host 2's rail 1 at 29-37% of
 * their best path; that "degraded" re-plan made a 4 MB AllReduce slower
 * (39 ms mean, 28 of 146 over 45 ms) than the NIC-down plan alone (36 ms, 1
 * of 71). */
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
 * again (their chunks queue behind the others' at a receiving NIC): after a
 * cap was lifted, such a path measured 39% of the best one and was reported
 * slow anew, and the next communicator started degraded. No new slow report
 * for them: the ones that put the NIC there stand until they clear. */
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

static void tick_monitor(struct r2d *d, uint64_t now)
{
	struct r2_health *h = d->health;
	struct r2_rails *rs = d->rails;
	int np = atomic_load(&rs->npeers), nr = rs->n;
	double thr = (double)r2_param_int(&d->params, P_DEGRADED_PCT) / 100.0;
	double rec = thr * 1.5 > 0.9 ? 0.9 : thr * 1.5;
	uint64_t stable = p_us(d, P_RECOVER_STABLE_MS) * 1000;
	char cause[160], name[64];

	if (!h->mon || now - h->last_mon_us < MON_PERIOD_US)
		return;
	h->last_mon_us = now;
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
			/* nothing acknowledged for a second while work is out: its
			 * chunks went by another rail or were lost with a
			 * connection; count afresh */
			if (m->out > 0 && now - m->last_ack_us > 1000000 && !m->acked) {
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
	/* The reference a path is compared with: with up to 3 paths measured
	 * recently, the best other one; with more, the upper quartile of them
	 * all (one path that measures above the line rate, a burst through a
	 * shaper's bucket, does not make the others look slow; a NIC whose
	 * paths are all slow still has its host's other rails above it). */
	double best = 0, second = 0, q75 = 0;
	const struct pmon *bestm = NULL;
	size_t nrec = 0;
	for (int i = 0; i < np; i++) {
		for (int r = 0; r < nr; r++) {
			const struct pmon *o = &h->mon[(size_t)i * R2_MAX_RAILS + (size_t)r];
			if (o->rate <= 0 || now - o->rate_us > MON_RECENT_US)
				continue;
			if (h->rates)
				h->rates[nrec] = o->rate;
			nrec++;
			if (o->rate > best) {
				second = best;
				best = o->rate;
				bestm = o;
			} else if (o->rate > second) {
				second = o->rate;
			}
		}
	}
	if (nrec > 3 && h->rates) {
		qsort(h->rates, nrec, sizeof(double), cmp_double);
		q75 = h->rates[(nrec - 1) * 3 / 4];
	}
	for (int i = 0; i < np; i++) {
		struct r2_peer *p = &rs->peer[i];
		for (int r = 0; r < nr; r++) {
			struct pmon *m = &h->mon[(size_t)i * R2_MAX_RAILS + (size_t)r];
			double ref = q75 > 0 ? q75 : m == bestm ? second : best;
			if (m->slow && (thr <= 0 || now - m->rate_us > MON_EXPIRE_US)) {
				path_slow(d, p, r, 0,
					  thr <= 0 ? "throughput monitor off"
						   : "not measured for 10 s: planned at full speed again");
				continue;
			}
			if (!m->fresh || thr <= 0)
				continue;
			if (ref <= 0)
				continue;
			if (!m->slow && p->link[r].state == R2_RS_HEALTHY &&
			    now - p->link[r].since_us < MON_RAMP_US) {
				m->below = 0; /* ramping up after it rejoined */
				continue;
			}
			if (!m->slow && peer_short(p, nr)) {
				m->below = 0; /* its NICs left carry more than their share */
				continue;
			}
			if (!m->slow && (rs->rail[r].h.state == R2_RS_DEGRADED ||
					 planned_degraded(d, p, r))) {
				m->below = 0; /* planned at a small share already */
				continue;
			}
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
				m->below = ratio < thr ? m->below + 1 : 0;
				if (m->below >= MON_SLOW_SAMPLES) {
					r2d_health_event(d, 2, "slow_path",
							 peer_name(d, p->id, name, sizeof(name)),
							 "%s: %s", rs->rail[r].ifname, cause);
					path_slow(d, p, r, bw, cause);
				}
				continue;
			}
			if (ratio >= thr) {
				if (!m->band_since_us)
					m->band_since_us = now;
				if (ratio >= rec && !m->ok_since_us)
					m->ok_since_us = now;
				if (ratio < rec)
					m->ok_since_us = 0;
				if ((m->ok_since_us && now - m->ok_since_us >= stable) ||
				    now - m->band_since_us >= MON_BAND_FACTOR * stable) {
					path_slow(d, p, r, 0, cause);
					continue;
				}
				if (ratio >= rec)
					continue;
			} else {
				m->band_since_us = 0;
				m->ok_since_us = 0;
			}
			/* a new figure only when it is off by 2x: every new figure
			 * may re-plan, and busy rates on a loaded host vary */
			if ((double)bw > 2 * (double)m->bw || 2 * (double)bw < (double)m->bw)
				path_slow(d, p, r, bw, cause);
		}
	}
}

/* Fails the path to p on rail r. report: tell the peers (a path failure
 * only; NIC failures are told by the caller). deliver: tell the executors
 * (the transport did not already). */
static void link_fail(struct r2d *d, struct r2_peer *p, int r, const char *cause, bool report,
		      bool deliver)
{
	struct r2_rails *rs = d->rails;
	struct r2_plink *l = &p->link[r];
	uint64_t hb_ms = p_us(d, P_HB_INTERVAL) / 1000;

	l->errors++;
	rs->rail[r].h.errors++;
	if (l->state == R2_RS_FAILED) {
		set_bad(d, p);
		return;
	}
	pmon_reset(d, p, r);
	link_state(d, p, r, R2_RS_FAILED, cause);
	l->failovers++;
	rs->rail[r].h.failovers++;
	if (p->conn_mask & (1u << r))
		r2d_rails_drop(d, r, p->id);
	p->conn_mask &= ~(1u << r);
	p->want_mask &= ~(1u << r);
	l->backoff_ms = hb_ms > 100 ? hb_ms : 100;
	l->next_probe_us = r2_now_us() + l->backoff_ms * 1000;
	set_bad(d, p);
	if (deliver) {
		struct r2_tp_cqe e = { .type = R2_TPC_ERROR, .status = -ECONNABORTED,
				       .peer = p->id, .stream = -1 };
		d->net_ev->deliver(d, r, &e);
	}
	if (report)
		broadcast_rail(d, r, R2_RS_FAILED, p->id, cause);
}

static void rail_state(struct r2d *d, int r, int st, const char *cause)
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
		rail_state(d, r, R2_RS_FAILED, cause);
		for (int i = 0; i < atomic_load(&rs->npeers); i++) {
			struct r2_peer *p = &rs->peer[i];
			if (p->link[r].known || (p->conn_mask & (1u << r)))
				link_fail(d, p, r, cause, false, true);
		}
		broadcast_rail(d, r, R2_RS_FAILED, 0, cause);
		return;
	}
	rl->h.up_since_us = now;
	snprintf(cause, sizeof(cause), "link up (%s); rejoins after %llu ms stable", how,
		 (unsigned long long)(stable_us(d, rl, now) / 1000));
	rail_state(d, r, R2_RS_RECOVERING, cause);
	for (int i = 0; i < atomic_load(&rs->npeers); i++) {
		struct r2_peer *p = &rs->peer[i];
		p->link[r].next_probe_us = now; /* probe at once */
		p->link[r].backoff_ms = 0;
		set_bad(d, p);
	}
}

static void kick(struct r2d *d);

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
	kick(d);
}

static int netlink_open(struct r2d *d)
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

/* ---- transport events ---- */

static void tell_local_state(struct r2d *d, struct r2_peer *p)
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
		send_peer_msg(d, p->id, R2PEER__PEER_MSG__PEER_RAIL_EVENT, &e.base);
	}
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
		l->known = true;
		l->conn_us = now;
		l->missed = 0;
		atomic_store(&p->last_rx_us[rail], now);
		if (l->state == R2_RS_FAILED) {
			l->stable_since_us = now;
			link_state(d, p, rail, R2_RS_RECOVERING, "connected again (probe)");
		}
		set_bad(d, p);
		/* a peer that connects first now learns of NICs of ours that were
		 * drained or failed before (their events went to the peers
		 * connected then): once per peer, on its first connection */
		if (!p->conn_mask || (p->conn_mask & ~(1u << rail)) == 0)
			tell_local_state(d, p);
		return;
	}
	snprintf(cause, sizeof(cause), "connection error: %s", strerror(-status));
	link_fail(d, p, rail, cause, false, false);
	kick(d);
}

/* ---- per communicator ---- */

static struct hcomm *hc_get(struct r2_health *h, uint64_t key, bool create)
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
static struct hcomm *hc_for(struct r2d *d, struct r2_comm *c)
{
	struct r2_health *h = d->health;
	struct hcomm *hc;

	pthread_mutex_lock(&h->lock);
	hc = hc_get(h, c->key, true);
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

static struct r2_peer *peer_of(struct r2d *d, uint64_t id)
{
	return r2d_rails_peer_find(d, id);
}

/* Slow paths (throughput monitor) as degraded NICs: on each rail, the NIC
 * of the endpoint that most slow paths share is planned at the slowest of
 * their bandwidths; its paths are then accounted for; repeat. (A NIC capped
 * in both directions slows the paths into and out of its host, so it is the
 * endpoint both share; ties: the higher host index, as for failed paths.) */
static void degraded_nics(struct r2d *d, const struct hcomm *hc, struct r2_view *v)
{
	struct r2_health *h = d->health;
	uint32_t nr = v->nrails, nh = v->nhosts;
	size_t n = h->nslow;
	int *ia = calloc(n + 1, sizeof(int)), *ib = calloc(n + 1, sizeof(int));
	uint32_t *cnt = calloc((size_t)nh * nr + 1, sizeof(uint32_t));
	const struct r2_view *l = hc->last;
	const uint64_t *was = l && l->nhosts == nh && l->nrails == nr ? l->bw : NULL;

	if (!ia || !ib || !cnt)
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct slowrep *x = &h->slow[i];
		uint32_t r = (uint32_t)x->rail;
		ia[i] = ib[i] = -1;
		for (uint32_t k = 0; k < nh; k++) {
			if (hc->host_ids[k] == x->a)
				ia[i] = (int)k;
			if (hc->host_ids[k] == x->b)
				ib[i] = (int)k;
		}
		if (ia[i] < 0 || ib[i] < 0 || r >= nr || v->down[(uint32_t)ia[i] * nr + r] ||
		    v->down[(uint32_t)ib[i] * nr + r]) {
			ia[i] = -1;
			continue;
		}
		cnt[(uint32_t)ia[i] * nr + r]++;
		cnt[(uint32_t)ib[i] * nr + r]++;
	}
	for (uint32_t r = 0; r < nr; r++) {
		for (;;) {
			uint32_t best = UINT32_MAX, bc = 0;
			uint64_t bw = 0;
			for (uint32_t a = 0; a < nh; a++) {
				uint32_t x = cnt[a * nr + r];
				/* a tie goes to the NIC the last view already
				 * degraded (one path of two cleared first does not
				 * move the blame), else to the higher index */
				if (x && (x > bc || (x == bc && (!was || !was[best * nr + r] ||
								  was[a * nr + r])))) {
					bc = x;
					best = a;
				}
			}
			if (best == UINT32_MAX)
				break;
			for (size_t i = 0; i < n; i++) {
				if (ia[i] < 0 || (uint32_t)h->slow[i].rail != r ||
				    ((uint32_t)ia[i] != best && (uint32_t)ib[i] != best))
					continue;
				if (!bw || h->slow[i].bw < bw)
					bw = h->slow[i].bw;
				cnt[(uint32_t)ia[i] * nr + r]--;
				cnt[(uint32_t)ib[i] * nr + r]--;
				ia[i] = -1;
			}
			if (bw)
				v->bw[best * nr + r] = bw;
		}
	}
out:
	free(ia);
	free(ib);
	free(cnt);
}

/* The view this daemon would propose for hc now. */
static struct r2_view *compute_view(struct r2d *d, struct hcomm *hc)
{
	struct r2_rails *rs = d->rails;
	struct r2_health *h = d->health;
	uint32_t nr = (uint32_t)rs->n, nh = (uint32_t)hc->nhosts;
	struct r2_view *v = view_new(nh, nr);
	uint32_t *cnt;

	if (!v)
		return NULL;
	cnt = calloc((size_t)nh * nr + 1, sizeof(*cnt));
	if (!cnt) {
		r2d_view_free(v);
		return NULL;
	}
	/* NICs known down: ours, and those their hosts told us about */
	for (uint32_t a = 0; a < nh; a++) {
		if ((int)a == hc->my_host) {
			for (uint32_t r = 0; r < nr; r++)
				if (local_bad(&rs->rail[r]))
					v->down[a * nr + r] = 1;
			continue;
		}
		struct r2_peer *p = peer_of(d, hc->host_ids[a]);
		for (uint32_t r = 0; p && r < nr; r++)
			if (p->remote_down & (1u << r))
				v->down[a * nr + r] = 1;
	}
	/* failed paths not explained by a NIC down: ours and those reported */
	uint32_t me = (uint32_t)hc->my_host;
	for (uint32_t a = 0; a < nh; a++) {
		struct r2_peer *p = (int)a == hc->my_host ? NULL : peer_of(d, hc->host_ids[a]);
		for (uint32_t r = 0; p && r < nr; r++) {
			uint8_t st = p->link[r].state;
			if ((st == R2_RS_FAILED || st == R2_RS_RECOVERING) && !v->down[a * nr + r] &&
			    !v->down[me * nr + r]) {
				cnt[a * nr + r]++;
				cnt[me * nr + r]++;
			}
		}
	}
	for (size_t i = 0; i < h->nreps; i++) {
		int ia = -1, ib = -1;
		uint32_t r = (uint32_t)h->reps[i].rail;
		for (uint32_t x = 0; x < nh; x++) {
			if (hc->host_ids[x] == h->reps[i].a)
				ia = (int)x;
			if (hc->host_ids[x] == h->reps[i].b)
				ib = (int)x;
		}
		if (ia < 0 || ib < 0 || ia == hc->my_host || ib == hc->my_host || r >= nr ||
		    v->down[(uint32_t)ia * nr + r] || v->down[(uint32_t)ib * nr + r])
			continue;
		cnt[(uint32_t)ia * nr + r]++;
		cnt[(uint32_t)ib * nr + r]++;
	}
	/* The executor does not relay through bridges yet: a failed path is
	 * planned as a NIC down, the endpoint with more failed paths on that
	 * rail (ties: the higher host index). Deterministic, so any daemon
	 * would compute the same from the same facts. */
	for (uint32_t r = 0; r < nr; r++) {
		for (;;) {
			uint32_t best = UINT32_MAX, bc = 0;
			for (uint32_t a = 0; a < nh; a++) {
				if (v->down[a * nr + r] || !cnt[a * nr + r])
					continue;
				if (cnt[a * nr + r] >= bc) {
					bc = cnt[a * nr + r];
					best = a;
				}
			}
			if (best == UINT32_MAX)
				break;
			v->down[best * nr + r] = 1;
			/* the paths of best are accounted for */
			for (uint32_t a = 0; a < nh; a++)
				if (a != best && cnt[a * nr + r])
					cnt[a * nr + r]--;
			cnt[best * nr + r] = 0;
		}
	}
	free(cnt);
	degraded_nics(d, hc, v);
	return v;
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

static void send_view(struct r2d *d, struct hcomm *hc, int to, uint32_t type,
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
		for (int i = 0; i < hc->nhosts; i++)
			if (i != hc->my_host && (to < 0 || to == i))
				send_peer_msg(d, hc->host_ids[i], type, &m.base);
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

static void describe(const struct r2_view *v, struct r2d *d, char *buf, size_t len)
{
	size_t o = 0;

	buf[0] = 0;
	for (uint32_t i = 0; v && i < v->nhosts * v->nrails && o + 24 < len; i++)
		if (v->down[i])
			o += (size_t)snprintf(buf + o, len - o, "%shost %u rail %u", o ? ", " : "",
					      i / v->nrails, i % v->nrails);
		else if (v->bw[i])
			o += (size_t)snprintf(buf + o, len - o, "%shost %u rail %u degraded (%llu%%)",
					      o ? ", " : "", i / v->nrails, i % v->nrails,
					      (unsigned long long)(v->bw[i] * 100 / R2_PLAN_NOMINAL_BPS));
	if (!o)
		snprintf(buf, len, "every NIC up");
	(void)d;
}

static void rail_state(struct r2d *d, int r, int st, const char *cause);

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
			rail_state(d, r, R2_RS_DEGRADED, cause);
		} else if (!slow && rl->h.state == R2_RS_DEGRADED) {
			snprintf(cause, sizeof(cause), "throughput normal again (view %llu)",
				 v ? (unsigned long long)v->epoch : 0ull);
			rail_state(d, r, R2_RS_HEALTHY, cause);
		}
	}
}

static void commit(struct r2d *d, struct hcomm *hc)
{
	struct r2_view *v = hc->prop;
	char what[256], subj[32];

	hc->prop = NULL;
	v->start = hc->max_started + 1;
	r2d_view_free(hc->last);
	hc->last = view_copy(v);
	send_view(d, hc, -1, R2PEER__PEER_MSG__PEER_VIEW_COMMIT, v, v->epoch, 0);
	describe(v, d, what, sizeof(what));
	snprintf(subj, sizeof(subj), "comm %u", hc->id);
	r2d_health_event(d, 3, "replan", subj, "view %llu from collective %llu: %s",
			 (unsigned long long)v->epoch, (unsigned long long)v->start, what);
	view_local(d, hc, v);
	add_view(d->health, hc, v);
}

/* A proposal not answered, or a commit not come, after this long is sent
 * again (the rail it went by may have failed just then). */
#define VIEW_RESEND_US 200000ull

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
	send_view(d, hc, -1, R2PEER__PEER_MSG__PEER_VIEW_PROPOSE, NULL, v->epoch, 0);
	if (hc->nhosts <= 1)
		commit(d, hc);
}

static void check_acks(struct r2d *d, struct hcomm *hc)
{
	if (!hc->prop)
		return;
	for (int i = 0; i < hc->nhosts; i++)
		if (!hc->acked[i])
			return;
	commit(d, hc);
}

/* ---- control messages from peers ---- */

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

static void rail_event_in(struct r2d *d, const R2peer__RailEvent *e, uint64_t from)
{
	struct r2_rails *rs = d->rails;
	struct r2_peer *p = r2d_rails_peer_find(d, e->host_id);
	int r = (int)e->rail;
	char cause[160], name[64];

	if (!p || r < 0 || r >= rs->n)
		return;
	if (!e->peer_host) {
		/* about its own NIC: first-hand, or passed on by another host
		 * (below); ordered per NIC, so any copy, by any rail or host,
		 * applies once and never after a later one */
		if (e->seq && e->seq <= p->nic_seq[r])
			return;
		p->nic_seq[r] = e->seq;
		if (from == e->host_id) {
			/* passed on to every other peer: one that has no rail left
			 * to the NIC's host (two NICs failed on different rails)
			 * learns it through this host; without it, it kept sending
			 * into the failed NIC until the peer timeout */
			for (int i = 0; i < atomic_load(&rs->npeers); i++)
				if (rs->peer[i].conn_mask && rs->peer[i].id != from)
					send_peer_msg(d, rs->peer[i].id,
						      R2PEER__PEER_MSG__PEER_RAIL_EVENT, &e->base);
		}
	} else {
		if (from != e->host_id)
			return;
		if (e->seq && e->seq <= p->remote_seq)
			return; /* a copy that came by another rail, or older */
		p->remote_seq = e->seq;
	}
	if (e->state == R2_RS_DEGRADED && e->peer_host) {
		/* its throughput monitor: the path to peer_host is slow (bw) or
		 * normal again (bw 0) */
		slow_set(d->health, e->host_id, e->peer_host, r, e->bw);
		r2d_health_event(d, 3, "peer_path", peer_name(d, p->id, name, sizeof(name)),
				 "rail %d to %016llx %s (%s)", r, (unsigned long long)e->peer_host,
				 e->bw ? "slow" : "normal again", e->cause);
		return;
	}
	if (e->peer_host && e->peer_host != d->host_id) {
		linkrep_set(d->health, e->host_id, e->peer_host, r, e->state == R2_RS_FAILED);
		return;
	}
	if (e->peer_host == d->host_id) {
		if (e->state == R2_RS_FAILED) {
			snprintf(cause, sizeof(cause), "%s reports the path silent: %s",
				 peer_name(d, p->id, name, sizeof(name)), e->cause);
			link_fail(d, p, r, cause, false, true);
		}
		return;
	}
	/* the peer's NIC itself */
	if (e->state == R2_RS_FAILED || e->state == R2_RS_DRAINED) {
		p->remote_down |= 1u << r;
		d->health->view_dirty = true;
		snprintf(cause, sizeof(cause), "%s's NIC %s: %s",
			 peer_name(d, p->id, name, sizeof(name)),
			 e->state == R2_RS_DRAINED ? "drained" : "failed", e->cause);
		if (e->state == R2_RS_FAILED)
			link_fail(d, p, r, cause, false, true);
		else
			r2d_health_event(d, 3, "peer_rail", name, "rail %d: %s", r, cause);
	} else if (e->state == R2_RS_HEALTHY || e->state == R2_RS_DEGRADED) {
		p->remote_down &= ~(1u << r);
		d->health->view_dirty = true;
		p->link[r].next_probe_us = r2_now_us();
		p->link[r].backoff_ms = 0;
		r2d_health_event(d, 3, "peer_rail", peer_name(d, p->id, name, sizeof(name)),
				 "rail %d usable again (%s)", r, e->cause);
	}
	set_bad(d, p);
}

void r2d_health_ctrl(struct r2d *d, const struct r2_loop_ev *ev)
{
	struct r2_health *h = d->health;
	const uint8_t *buf = ev->cqe.buf;
	size_t len = ev->cqe.hdr.len;
	uint32_t type = ev->cqe.hdr.aux;

	if (!h)
		return;
	if (type == R2PEER__PEER_MSG__PEER_RAIL_EVENT) {
		R2peer__RailEvent *e = r2peer__rail_event__unpack(NULL, len, buf);
		if (e) {
			rail_event_in(d, e, ev->cqe.peer);
			r2peer__rail_event__free_unpacked(e, NULL);
		}
		kick(d);
		return;
	}
	R2peer__PlanView *m = r2peer__plan_view__unpack(NULL, len, buf);
	struct r2_uid u;
	struct hcomm *hc = NULL;
	int from = -1;

	if (!m)
		return;
	if (m->uid.len == sizeof(u)) {
		memcpy(&u, m->uid.data, sizeof(u));
		pthread_mutex_lock(&d->lock);
		struct r2_comm *c = d->net_ev->comm_by_uid(d, &u);
		if (c && c->state == R2_COMM_READY)
			hc = hc_for(d, c);
		pthread_mutex_unlock(&d->lock);
	}
	for (int i = 0; hc && i < hc->nhosts; i++)
		if (hc->host_ids[i] == ev->cqe.peer)
			from = i;
	if (!hc || from < 0)
		goto out;
	switch (type) {
	case R2PEER__PEER_MSG__PEER_VIEW_PROPOSE:
		if (from != 0 || m->epoch <= hc->committed_epoch)
			break;
		{
			uint64_t started;
			pthread_mutex_lock(&h->lock);
			hc->hold = true;
			hc->hold_epoch = m->epoch;
			hc->hold_since_us = r2_now_us();
			started = hc->started;
			pthread_mutex_unlock(&h->lock);
			send_view(d, hc, 0, R2PEER__PEER_MSG__PEER_VIEW_ACK, NULL, m->epoch, started);
		}
		break;
	case R2PEER__PEER_MSG__PEER_VIEW_ACK:
		if (hc->my_host == 0 && hc->last && m->epoch <= hc->last->epoch &&
		    (!hc->prop || m->epoch != hc->prop->epoch)) {
			/* a member still holding for this epoch: its commit was lost */
			send_view(d, hc, from, R2PEER__PEER_MSG__PEER_VIEW_COMMIT, hc->last,
				  hc->last->epoch, 0);
			break;
		}
		if (hc->my_host != 0 || !hc->prop || m->epoch != hc->prop->epoch)
			break;
		hc->acked[from] = 1;
		if (m->started > hc->max_started)
			hc->max_started = m->started;
		check_acks(d, hc);
		break;
	case R2PEER__PEER_MSG__PEER_VIEW_COMMIT: {
		if (from != 0 || m->epoch <= hc->committed_epoch || m->nrails == 0)
			break;
		struct r2_view *v = view_new((uint32_t)hc->nhosts, m->nrails);
		if (!v)
			break;
		v->epoch = m->epoch;
		v->start = m->start_opseq;
		for (size_t i = 0; i < m->n_down_nics; i++)
			if (m->down_nics[i] < v->nhosts * v->nrails)
				v->down[m->down_nics[i]] = 1;
		for (size_t i = 0; i < m->n_nic_bw && i < v->nhosts * v->nrails; i++)
			v->bw[i] = m->nic_bw[i];
		{
			char what[256], subj[32];
			describe(v, d, what, sizeof(what));
			snprintf(subj, sizeof(subj), "comm %u", hc->id);
			r2d_health_event(d, 3, "replan", subj, "view %llu from collective %llu: %s",
					 (unsigned long long)v->epoch,
					 (unsigned long long)v->start, what);
		}
		view_local(d, hc, v);
		add_view(h, hc, v);
		break;
	}
	case R2PEER__PEER_MSG__PEER_VIEW_REQUEST:
		if (hc->my_host == 0)
			hc->replan = true;
		break;
	}
out:
	r2peer__plan_view__free_unpacked(m, NULL);
}

/* ---- executor side ---- */

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
	hc = hc_get(h, c->key, true);
	if (!hc) {
		pthread_mutex_unlock(&h->lock);
		return NULL;
	}
	while (hc->hold && !c->stop && r2_now_us() - hc->hold_since_us < limit) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20 * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
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
		v = view_copy(use->v);
	}
	pthread_mutex_unlock(&h->lock);
	return v;
}

/* ---- the tick ---- */

static void tick_rails(struct r2d *d, uint64_t now)
{
	struct r2_rails *rs = d->rails;
	struct r2_health *h = d->health;

	/* link state by polling too, once a second (netlink may be missing) */
	if (now - h->last_link_poll_us >= 1000000 || !h->nl_on) {
		h->last_link_poll_us = now;
		for (int r = 0; r < rs->n; r++) {
			int st = rs->rail[r].ops->link_state(rs->rail[r].tp);
			if (st >= 0)
				rail_link(d, r, st == 1, "link state poll");
		}
	}
	/* throughput monitor: 1 s samples, EWMA */
	if (now - h->last_stat_us >= 1000000) {
		double dt = h->last_stat_us ? (double)(now - h->last_stat_us) / 1e6 : 0;
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
	for (int r = 0; r < rs->n; r++) {
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
			continue;
		if (rl->h.state == R2_RS_RECOVERING && rl->h.up_since_us &&
		    now - rl->h.up_since_us >= stable_us(d, rl, now)) {
			rail_state(d, r, R2_RS_HEALTHY, "link stable");
			rl->h.up_since_us = 0;
			broadcast_rail(d, r, rl->h.drained ? R2_RS_DRAINED : R2_RS_HEALTHY, 0,
				       "link stable");
			for (int i = 0; i < atomic_load(&rs->npeers); i++)
				set_bad(d, &rs->peer[i]);
		} else if ((rl->h.state == R2_RS_HEALTHY || rl->h.state == R2_RS_DEGRADED) &&
			   nknown && nfailed == nknown) {
			char cause[160];
			snprintf(cause, sizeof(cause), "no peer reachable: %s", first);
			rl->h.flap_us[rl->h.changes % 16] = now;
			rail_state(d, r, R2_RS_FAILED, cause);
		} else if (rl->h.state == R2_RS_FAILED && nup) {
			rail_state(d, r, R2_RS_HEALTHY, "a peer is reachable again");
		}
	}
}

/* A send stall on path (peer index i, rail r): data posted to it has waited
 * longer than stall with no acknowledgement and nothing at all heard on the
 * path since (last), while the peer was heard on another rail within stall
 * (last_any): a path that carries work answers every chunk, so this is a
 * black hole seen sooner than hb_misses of silence. */
static bool send_stalled(struct r2_health *h, int i, int r, uint64_t now, uint64_t last,
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

static void tick_paths(struct r2d *d, uint64_t now)
{
	struct r2_rails *rs = d->rails;
	struct r2_health *h = d->health;
	uint64_t iv = p_us(d, P_HB_INTERVAL);
	uint64_t silent = iv * p_us(d, P_HB_MISSES);
	uint64_t stall = iv * p_us(d, P_HB_STALL_MISSES);
	uint64_t ptimeout = p_us(d, P_PEER_TIMEOUT_MS) * 1000;
	bool hb = now - h->last_hb_us >= iv;

	if (hb)
		h->last_hb_us = now;
	for (int i = 0; i < atomic_load(&rs->npeers); i++) {
		struct r2_peer *p = &rs->peer[i];
		/* Heard from on some rail lately? A peer silent on every rail at
		 * once is stalled or gone as a whole, not a NIC: failing its paths
		 * after hb_misses would leave no path and break its communicators
		 * at once, when a host that was not scheduled for a second (seen
		 * on an overloaded machine: 1.6 s) comes back by itself. Such a
		 * peer's paths fail only after peer_timeout_ms of silence, and its
		 * communicators break then (a dead daemon resets its connections
		 * at once; a host black-holed on every rail ends here). */
		uint64_t last_any = 0;
		for (int r = 0; r < rs->n; r++) {
			if (!(p->conn_mask & (1u << r)))
				continue;
			uint64_t x = atomic_load(&p->last_rx_us[r]);
			if (x < p->link[r].conn_us)
				x = p->link[r].conn_us;
			if (x > last_any)
				last_any = x;
		}
		/* its data through a bridge (detour.h) says it is alive: a rail
		 * that stays silent meanwhile is a failed path, not a stalled host */
		uint64_t via = atomic_load(&p->detour_rx_us);
		if (last_any && via > last_any)
			last_any = via;
		bool whole = last_any && now > last_any && now - last_any > silent;
		for (int r = 0; r < rs->n; r++) {
			struct r2_plink *l = &p->link[r];
			struct r2_rail *rl = &rs->rail[r];
			if (p->conn_mask & (1u << r)) {
				uint64_t last = atomic_load(&p->last_rx_us[r]);
				if (last < l->conn_us)
					last = l->conn_us;
				if (hb) {
					struct r2_chunk_hdr hh = { .magic = R2_CHUNK_MAGIC,
								   .kind = R2_MSG_HEARTBEAT,
								   .off = now };
					rl->ops->post_send(rl->tp, p->id, &hh, NULL, 0);
				}
				l->missed = now > last ? (uint32_t)((now - last) / iv) : 0;
				bool stalled = send_stalled(h, i, r, now, last, last_any, stall);
				if (now > last && (now - last > silent || stalled) &&
				    now >= h->stall_until_us && (!whole || now - last_any > ptimeout)) {
					char cause[160];
					snprintf(cause, sizeof(cause),
						 "no message for %llu ms (%u heartbeats missed): "
						 "silent %s",
						 (unsigned long long)(now - last) / 1000, l->missed,
						 whole	  ? "on every rail (peer timeout)"
						 : stalled ? "path with data outstanding (send stall)"
							   : "path");
					if (whole)
						p->nopath_since_us = last_any;
					link_fail(d, p, r, cause, true, true);
					continue;
				}
				if (l->state == R2_RS_RECOVERING && rl->h.link_up &&
				    !(p->remote_down & (1u << r)) &&
				    now - l->stable_since_us >= stable_us(d, rl, now)) {
					link_state(d, p, r, R2_RS_HEALTHY, "stable");
					set_bad(d, p);
					broadcast_rail(d, r, R2_RS_HEALTHY, p->id, "stable");
				}
				continue;
			}
			if (l->state != R2_RS_FAILED && l->state != R2_RS_RECOVERING)
				continue;
			if (!rl->h.link_up || (p->remote_down & (1u << r)) || !p->addr[r] ||
			    now < l->next_probe_us)
				continue;
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
		bool known = false;
		for (int r = 0; r < rs->n; r++)
			known |= p->link[r].known;
		if (p->conn_mask || !known)
			p->nopath_since_us = 0;
		else if (!p->nopath_since_us)
			p->nopath_since_us = now;
	}
}

/* p has no rail to this host, but another connected peer may reach it:
 * control messages go through it (detour.h). */
static bool bridged(struct r2d *d, const struct r2_peer *p)
{
	struct r2_rails *rs = d->rails;

	for (int i = 0; i < atomic_load(&rs->npeers); i++)
		if (&rs->peer[i] != p && rs->peer[i].conn_mask)
			return true;
	return false;
}

static void tick_comms(struct r2d *d, uint64_t now)
{
	struct r2_health *h = d->health;
	uint64_t ptimeout = p_us(d, P_PEER_TIMEOUT_MS) * 1000;

	pthread_mutex_lock(&d->lock);
	for (struct hcomm *hc = h->comms; hc; hc = hc->next)
		hc->seen = false;
	for (struct r2_comm *c = d->comms; c; c = c->next) {
		if (c->state != R2_COMM_READY || c->nhosts < 2)
			continue;
		struct hcomm *hc = hc_for(d, c);
		if (!hc)
			continue;
		hc->seen = true;
		/* a peer with no connection on any rail for peer_timeout_ms */
		for (int i = 0; i < c->nhosts; i++) {
			struct r2_peer *p = i == c->my_host ? NULL : peer_of(d, c->hosts[i].id);
			/* its data still comes through a bridge (detour.h): alive */
			uint64_t via = p ? atomic_load(&p->detour_rx_us) : 0;
			if (p && p->nopath_since_us && now - p->nopath_since_us > ptimeout &&
			    (!via || now - via > ptimeout)) {
				char why[192];
				snprintf(why, sizeof(why),
					 "peer host %s unreachable on every rail for %llu ms",
					 c->hosts[i].name,
					 (unsigned long long)(now - p->nopath_since_us) / 1000);
				r2d_health_event(d, 1, "comm_broken", c->hosts[i].name, "comm %u: %s",
						 c->id, why);
				d->net_ev->comm_break(c, R2CCL_E_PEER_GONE, why);
				break;
			}
		}
		if (c->state == R2_COMM_READY && hc->my_host != 0) {
			/* holding for a coordinator that has no rail left and no
			 * other host to reach it through: go on (the executor then
			 * finds the peer gone) */
			struct r2_peer *p = peer_of(d, c->hosts[0].id);
			if (p && p->nopath_since_us && !bridged(d, p)) {
				pthread_mutex_lock(&h->lock);
				if (hc->hold) {
					hc->hold = false;
					pthread_cond_broadcast(&h->cond);
				}
				pthread_mutex_unlock(&h->lock);
			}
			/* holding for a commit that may have been lost (sent on a
			 * rail that had just failed): acknowledge again; the
			 * coordinator answers an old epoch's ACK with its commit */
			uint64_t ep = 0, st = 0;
			pthread_mutex_lock(&h->lock);
			if (hc->hold && now - hc->hold_since_us > VIEW_RESEND_US &&
			    now - hc->resent_us > VIEW_RESEND_US) {
				ep = hc->hold_epoch;
				st = hc->started;
				hc->resent_us = now;
			}
			pthread_mutex_unlock(&h->lock);
			if (ep)
				send_view(d, hc, 0, R2PEER__PEER_MSG__PEER_VIEW_ACK, NULL, ep, st);
		}
		if (c->state != R2_COMM_READY || hc->my_host != 0)
			continue;
		if (hc->prop && now - hc->prop_us > VIEW_RESEND_US &&
		    now - hc->resent_us > VIEW_RESEND_US) {
			/* a proposal sent on a rail that had just failed: again, to
			 * those that did not answer (by now through a bridge) */
			hc->resent_us = now;
			for (int i = 0; i < hc->nhosts; i++)
				if (!hc->acked[i])
					send_view(d, hc, i, R2PEER__PEER_MSG__PEER_VIEW_PROPOSE, NULL,
						  hc->prop->epoch, 0);
		}
		if (hc->prop) {
			bool gone = false; /* a member with no rail at all will not answer */
			for (int i = 0; i < c->nhosts; i++) {
				struct r2_peer *p = i == c->my_host ? NULL : peer_of(d, c->hosts[i].id);
				if (p && p->nopath_since_us && !hc->acked[i] && !bridged(d, p))
					gone = true;
			}
			if (gone || now - hc->prop_us > ptimeout) {
				log_warn("communicator %u: view %llu not acknowledged by every "
					 "host (%s); dropped",
					 c->id, (unsigned long long)hc->prop->epoch,
					 gone ? "a member is unreachable" : "timeout");
				/* The members that hold for it are released by a commit
				 * of the view they already plan with (same content, this
				 * epoch): safe whoever gets it or not, and nobody waits
				 * out its hold limit (a killed peer's communicator
				 * breaks at once, not 2 x peer_timeout_ms later). */
				struct r2_view *same =
					hc->last ? view_copy(hc->last)
						 : view_new((uint32_t)hc->nhosts, (uint32_t)d->rails->n);
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
			continue;
		}
		struct r2_view *v = compute_view(d, hc);
		if (!v)
			continue;
		if (!hc->replan && view_eq(v, hc->last)) {
			r2d_view_free(v);
			continue;
		}
		propose(d, hc, v);
	}
	/* records of communicators gone */
	pthread_mutex_lock(&h->lock);
	for (struct hcomm **pp = &h->comms; *pp;) {
		struct hcomm *hc = *pp;
		if (hc->known && !hc->seen && !d->net_ev->comm_by_key(d, hc->key)) {
			*pp = hc->next;
			while (hc->views) {
				struct hview_node *n = hc->views;
				hc->views = n->next;
				r2d_view_free(n->v);
				free(n);
			}
			r2d_view_free(hc->last);
			r2d_view_free(hc->prop);
			free(hc->host_ids);
			free(hc->acked);
			free(hc);
			continue;
		}
		pp = &hc->next;
	}
	pthread_mutex_unlock(&h->lock);
	pthread_mutex_unlock(&d->lock);
}

/* A NIC shown degraded stays so while the latest committed view of a live
 * communicator plans it degraded: when its communicators end, or their
 * views no longer do (the slow paths measured normal, nothing re-planned
 * because the view is then "every NIC up" again), it is healthy again. */
static void tick_degraded(struct r2d *d)
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
			rail_state(d, r, R2_RS_HEALTHY,
				   "throughput normal again (no communicator plans it degraded)");
}

/* A change that may change a view: propose at once, not at the next tick. */
static void kick(struct r2d *d)
{
	if (d->health && d->health->view_dirty) {
		d->health->view_dirty = false;
		tick_comms(d, r2_now_us());
	}
}

static void on_tick(uv_timer_t *t)
{
	struct r2d *d = t->data;
	uint64_t now = r2_now_us();

	if (!d->rails || !d->health)
		return;
	if (uv_is_closing((uv_handle_t *)&d->rails->async)) {
		r2d_health_close(d); /* the daemon is stopping */
		return;
	}
	/* This tick comes late by more than a heartbeat interval: this daemon
	 * was not running (an overloaded host, a VM paused): its own threads
	 * did not see the messages that came meanwhile, so silence is no
	 * evidence until the rails thread has caught up (one interval). */
	{
		struct r2_health *h = d->health;
		uint64_t iv = p_us(d, P_HB_INTERVAL);
		if (h->last_tick_us && now - h->last_tick_us > iv + 100000) {
			h->stall_until_us = now + iv;
			log_warn("health: no tick for %llu ms (this daemon was not scheduled); "
				 "silent paths are not judged for %llu ms",
				 (unsigned long long)(now - h->last_tick_us) / 1000,
				 (unsigned long long)iv / 1000);
		}
		h->last_tick_us = now;
	}
	tick_rails(d, now);
	tick_paths(d, now);
	tick_monitor(d, now);
	d->health->view_dirty = false;
	tick_comms(d, now);
	tick_degraded(d);
}

int r2d_health_start(struct r2d *d)
{
	struct r2_health *h;
	struct r2_rails *rs = d->rails;
	uint64_t iv = p_us(d, P_HB_INTERVAL) / 1000;
	uint64_t tick_ms = iv / 4;
	int r;

	if (!rs)
		return 0;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->d = d;
	h->nlfd = -1;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
	for (int i = 0; i < R2_MAX_RAILS; i++)
		pthread_mutex_init(&h->mon_lock[i], NULL);
	h->mon = calloc((size_t)R2_MAX_PEERS * R2_MAX_RAILS, sizeof(*h->mon));
	h->rmon = calloc(R2_MAX_RAILS, sizeof(*h->rmon));
	h->rates = calloc((size_t)R2_MAX_PEERS * R2_MAX_RAILS, sizeof(double));
	if (!h->mon || !h->rmon) {
		free(h->mon);
		h->mon = NULL;
		log_warn("health: no memory for the throughput monitor; it is off");
	}
	for (size_t i = 0; h->mon && i < (size_t)R2_MAX_PEERS * R2_MAX_RAILS; i++)
		h->mon[i].bslot = -1;
	d->health = h;
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
	r = netlink_open(d);
	if (r < 0)
		log_warn("health: rtnetlink unavailable (%s); link state polled once a second",
			 strerror(-r));
	uv_timer_init(d->loop, &h->timer);
	h->timer.data = d;
	if (tick_ms < 5)
		tick_ms = 5;
	if (tick_ms > 100)
		tick_ms = 100;
	uv_timer_start(&h->timer, on_tick, tick_ms, tick_ms);
	h->timer_on = true;
	log_info("health: heartbeats every %llu ms, a path silent for %lld intervals fails, "
		 "rejoin after %lld ms stable, peer timeout %lld ms",
		 (unsigned long long)iv, (long long)r2_param_int(&d->params, P_HB_MISSES),
		 (long long)r2_param_int(&d->params, P_RECOVER_STABLE_MS),
		 (long long)r2_param_int(&d->params, P_PEER_TIMEOUT_MS));
	return 0;
}

void r2d_health_close(struct r2d *d)
{
	struct r2_health *h = d->health;

	if (!h)
		return;
	if (h->timer_on) {
		uv_timer_stop(&h->timer);
		uv_close((uv_handle_t *)&h->timer, NULL);
		h->timer_on = false;
	}
	if (h->nl_on) {
		uv_poll_stop(&h->nlpoll);
		uv_close((uv_handle_t *)&h->nlpoll, NULL);
		h->nl_on = false;
	}
}

void r2d_health_free(struct r2d *d)
{
	struct r2_health *h = d->health;

	if (!h)
		return;
	if (h->nlfd >= 0)
		close(h->nlfd);
	while (h->comms) {
		struct hcomm *hc = h->comms;
		h->comms = hc->next;
		while (hc->views) {
			struct hview_node *n = hc->views;
			hc->views = n->next;
			r2d_view_free(n->v);
			free(n);
		}
		r2d_view_free(hc->last);
		r2d_view_free(hc->prop);
		free(hc->host_ids);
		free(hc->acked);
		free(hc);
	}
	free(h->reps);
	free(h->slow);
	free(h->mon);
	free(h->rmon);
	free(h->rates);
	for (int i = 0; i < R2_MAX_RAILS; i++)
		pthread_mutex_destroy(&h->mon_lock[i]);
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->cond);
	free(h);
	d->health = NULL;
}

/* ---- r2cclctl ---- */

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
			set_bad(d, &rs->peer[i]);
		broadcast_rail(d, r,
			       drain ? R2_RS_DRAINED
				     : (rl->h.state == R2_RS_FAILED ? R2_RS_FAILED : R2_RS_HEALTHY),
			       0, drain ? "drained by the operator" : "undrained by the operator");
		return 0;
	}
	snprintf(err, errlen, "%s is not a rail of this daemon (see 'r2cclctl rails')", nic);
	return -ENODEV;
}

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
		struct hcomm *hc = hc_for(d, c);
		if (!hc)
			continue;
		if (hc->my_host == 0)
			hc->replan = true;
		else
			send_view(d, hc, 0, R2PEER__PEER_MSG__PEER_VIEW_REQUEST, NULL, 0, 0);
	}
	pthread_mutex_unlock(&d->lock);
	return comm_id && !found ? -ENOENT : 0;
}

void r2d_health_ctl_events(struct r2_session *s, uint64_t req_id, uint64_t since, uint32_t max,
			   r2_reply_fn reply)
{
	struct r2d *d = s->d;
	struct r2_health *h = d->health;
	R2ccl__EventsReply rep = R2CCL__EVENTS_REPLY__INIT;
	R2ccl__Event *ev = calloc(EV_RING, sizeof(*ev));
	R2ccl__Event **evp = calloc(EV_RING, sizeof(*evp));
	struct hevent *copy = calloc(EV_RING, sizeof(*copy));
	static const char *const sev[] = { "err", "err", "warn", "info" };
	size_t n = 0;

	rep.req_id = req_id;
	rep.error = "";
	if (!ev || !evp || !copy) {
		rep.status = -ENOMEM;
		rep.error = "out of memory";
	} else if (h) {
		pthread_mutex_lock(&h->lock);
		uint64_t first = h->evseq > EV_RING ? h->evseq - EV_RING + 1 : 1;
		if (first <= since)
			first = since + 1;
		if (max && h->evseq >= first && h->evseq - first + 1 > max)
			first = h->evseq - max + 1;
		for (uint64_t q = first; q <= h->evseq; q++) {
			copy[n] = h->ev[(q - 1) % EV_RING];
			r2ccl__event__init(&ev[n]);
			ev[n].seq = copy[n].seq;
			ev[n].time_unix_ms = copy[n].ms;
			ev[n].severity = (char *)sev[copy[n].sev & 3];
			ev[n].kind = copy[n].kind;
			ev[n].subject = copy[n].subject;
			ev[n].message = copy[n].msg;
			evp[n] = &ev[n];
			n++;
		}
		rep.last_seq = h->evseq;
		pthread_mutex_unlock(&h->lock);
	}
	rep.n_events = n;
	rep.events = evp;
	reply(s, R2CCL__MSG_TYPE__MSG_EVENTS_REPLY, &rep);
	free(ev);
	free(evp);
	free(copy);
}

void r2d_health_ctl_rails(struct r2_session *s, uint64_t req_id, r2_reply_fn reply)
{
	struct r2d *d = s->d;
	struct r2_rails *rs = d->rails;
	R2ccl__RailsReply rep = R2CCL__RAILS_REPLY__INIT;
	int np = rs ? atomic_load(&rs->npeers) : 0, nr = rs ? rs->n : 0;
	R2ccl__RailInfo *ri = calloc((size_t)nr + 1, sizeof(*ri));
	R2ccl__RailInfo **rip = calloc((size_t)nr + 1, sizeof(*rip));
	size_t maxp = (size_t)np * (size_t)nr + 1;
	R2ccl__PeerInfo *pi = calloc(maxp, sizeof(*pi));
	R2ccl__PeerInfo **pip = calloc(maxp, sizeof(*pip));
	char (*names)[64] = calloc(maxp, 64), (*addrs)[32] = calloc(maxp, 32);
	uint64_t now = r2_now_us();
	size_t n = 0;

	rep.req_id = req_id;
	rep.error = "";
	if (!ri || !rip || !pi || !pip || !names || !addrs) {
		rep.status = -ENOMEM;
		rep.error = "out of memory";
		goto send;
	}
	for (int r = 0; r < nr; r++) {
		struct r2_rail *rl = &rs->rail[r];
		uint64_t tx = 0, rx = 0;
		r2ccl__rail_info__init(&ri[r]);
		ri[r].nic = rl->ifname;
		ri[r].index = (uint32_t)r;
		ri[r].state = (char *)r2d_rstate_name(rl->h.state);
		ri[r].transport = (char *)rl->ops->name;
		for (int i = 0; i < d->topo.nnics; i++)
			if (!strcmp(d->topo.nics[i].name, rl->ifname))
				ri[r].speed_mbps = d->topo.nics[i].speed_mbps;
		ri[r].measured_mbps = (rl->h.tx_bps > rl->h.rx_bps ? rl->h.tx_bps : rl->h.rx_bps) *
				      8 / 1000000;
		rl->ops->stats(rl->tp, &tx, &rx);
		ri[r].tx_bytes_total = tx;
		ri[r].rx_bytes_total = rx;
		ri[r].errors_total = rl->h.errors;
		ri[r].state_changes_total = rl->h.changes;
		ri[r].state_since_s = (now - rl->h.since_us) / 1000000;
		ri[r].drained = rl->h.drained;
		ri[r].cause = rl->h.drained ? "drained by the operator" : rl->h.cause;
		ri[r].failovers_total = rl->h.failovers;
		rip[r] = &ri[r];
	}
	rep.n_rails = (size_t)nr;
	rep.rails = rip;
	for (int i = 0; i < np; i++) {
		struct r2_peer *p = &rs->peer[i];
		for (int r = 0; r < nr; r++) {
			struct r2_plink *l = &p->link[r];
			if (!l->known && !(p->conn_mask & (1u << r)))
				continue;
			R2ccl__PeerInfo *x = &pi[n];
			r2ccl__peer_info__init(x);
			peer_name(d, p->id, names[n], 64);
			x->host = names[n];
			x->rail = rs->rail[r].ifname;
			struct in_addr a = { p->addr[r] };
			inet_ntop(AF_INET, &a, addrs[n], 32);
			x->address = addrs[n];
			x->state = (char *)r2d_rstate_name(l->state);
			if ((p->remote_down & (1u << r)) && l->state != R2_RS_FAILED)
				x->state = "failed";
			x->rtt_us = atomic_load(&p->rtt_us[r]);
			uint64_t last = atomic_load(&p->last_rx_us[r]);
			x->last_heartbeat_ms = last && now > last ? (now - last) / 1000 : 0;
			x->missed_heartbeats = l->missed;
			x->cause = l->cause;
			x->errors_total = l->errors;
			x->failovers_total = l->failovers;
			pthread_mutex_lock(&d->lock);
			for (struct r2_comm *c = d->comms; c; c = c->next)
				for (int h = 0; h < c->nhosts && c->hosts; h++)
					if (c->hosts[h].id == p->id && c->state == R2_COMM_READY)
						x->comms++;
			pthread_mutex_unlock(&d->lock);
			pip[n] = x;
			n++;
		}
	}
	rep.n_peers = n;
	rep.peers = pip;
send:
	reply(s, R2CCL__MSG_TYPE__MSG_RAILS_REPLY, &rep);
	free(ri);
	free(rip);
	free(pi);
	free(pip);
	free(names);
	free(addrs);
}
