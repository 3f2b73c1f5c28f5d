/* SPDX-License-Identifier: MIT */
/*
 * The host's tenants on the rails (tenants.h): the scheduler's table and
 * queues behind one lock, the windows of bytes handed to each rail's
 * transport per peer, and the chunks handed on as they open.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/daemon.h"
#include "log.h"
#include "net/net.h"
#include "net/rails.h"
#include "net/tenants.h"
#include "util.h"

#define DOWN_SLOTS 16
#define PEER_SLOTS 64 /* peers per rail with their own window; the rest share one */

/* A queued chunk: what r2d_rails_send needs to post it later. */
struct tq_item {
	struct r2_sched_item it; /* first: the scheduler hands back this */
	int rail;
	_Atomic int *railp; /* the engine's record of its rail: set when it moves */
	uint64_t peer;
	struct r2_chunk_hdr hdr;
	const void *buf;
	uint64_t ctx;
	struct tq_item *fnext; /* failed list */
};

struct r2_tenants {
	pthread_mutex_t lock;
	struct r2d *d;
	struct r2_sched s;
	bool on;
	uint64_t window; /* sched_window: bytes per rail and peer not yet written */
	/* bytes handed to each rail's transport per peer and not yet written
	 * (its connection's queue): a peer at `window` waits, the others go on */
	struct {
		_Atomic uint64_t peer;
		_Atomic int64_t bytes;
	} inflight[R2_SCHED_MAX_RAILS][PEER_SLOTS];
	uint64_t bytes_rail[R2_SCHED_MAX_TENANTS][R2_SCHED_MAX_RAILS];
	/* bytes per second now: bytes_rail at the last snapshot (taken by the
	 * rails thread once a second) and the rates over the second before */
	uint64_t snap_rail[R2_SCHED_MAX_TENANTS][R2_SCHED_MAX_RAILS];
	uint64_t bps_rail[R2_SCHED_MAX_TENANTS][R2_SCHED_MAX_RAILS];
	uint64_t snap_us;
	uint64_t changed_us[R2_SCHED_MAX_TENANTS];
	/* proxy buffer bytes each tenant's chunks hold now, the most at once,
	 * and the takes its max_proxy refused (r2d_tenants_proxy_take) */
	_Atomic uint64_t proxy_held[R2_SCHED_MAX_TENANTS], proxy_high[R2_SCHED_MAX_TENANTS];
	_Atomic uint64_t proxy_waits[R2_SCHED_MAX_TENANTS];
	/* operations submitted and not completed (max_pending_ops) */
	_Atomic uint32_t ops_open[R2_SCHED_MAX_TENANTS];
	/* control requests in the current 100 ms window (max_req_rate; the
	 * loop thread only): the window's start, requests in it, the sessions
	 * that asked in it and in the one before (each gets its share) */
	uint64_t req_win_us[R2_SCHED_MAX_TENANTS];
	uint32_t req_n[R2_SCHED_MAX_TENANTS];
	uint32_t req_sess[R2_SCHED_MAX_TENANTS], req_sess_prev[R2_SCHED_MAX_TENANTS];
	_Atomic uint64_t req_paced[R2_SCHED_MAX_TENANTS]; /* requests held back */
	/* the three quotas above, read without the lock on the hot paths
	 * (caps_refresh copies them from the policies under it) */
	_Atomic uint32_t cap_req[R2_SCHED_MAX_TENANTS], cap_ops[R2_SCHED_MAX_TENANTS];
	_Atomic uint64_t cap_proxy[R2_SCHED_MAX_TENANTS];
	_Atomic bool cap_known[R2_SCHED_MAX_TENANTS]; /* caps_refresh saw the entry */
	struct tq_item *failed; /* to complete with -ENOTCONN from the rails thread */
	/* (rail, peer) whose connection failed under a queued chunk or an
	 * ERROR: refused at once (-ENOTCONN: the engine takes another rail)
	 * until its connection is back (CONN); the rails thread's view, ahead
	 * of the loop's conn_mask */
	uint64_t down[R2_SCHED_MAX_RAILS][DOWN_SLOTS];
};

static void wake_rails(struct r2d *d);
static bool peer_window_open(const struct r2_sched_item *it, void *arg);
static bool may_move(const struct r2_sched_item *it, int to, void *arg);

int r2d_tenants_init(struct r2d *d)
{
	struct r2_tenants *ts;

	if (d->tenants)
		return 0;
	ts = calloc(1, sizeof(*ts));
	if (!ts)
		return -ENOMEM;
	pthread_mutex_init(&ts->lock, NULL);
	r2_sched_init(&ts->s, 1 << 20, 4 << 20);
	ts->s.may_send = peer_window_open;
	ts->s.may_move = may_move;
	ts->s.may_send_arg = ts;
	ts->d = d;
	ts->on = true;
	ts->window = 4 << 20;
	d->tenants = ts;
	return 0;
}

static bool drop_all(struct r2_sched_item *it, void *arg)
{
	(void)arg;
	free(it); /* a struct tq_item, its first member */
	return true;
}

void r2d_tenants_free(struct r2d *d)
{
	struct r2_tenants *ts = d->tenants;

	if (!ts)
		return;
	for (int r = 0; r < R2_SCHED_MAX_RAILS; r++)
		r2_sched_remove(&ts->s, r, drop_all, NULL);
	while (ts->failed) {
		struct tq_item *q = ts->failed;
		ts->failed = q->fnext;
		free(q);
	}
	pthread_mutex_destroy(&ts->lock);
	free(ts);
	d->tenants = NULL;
}

void r2d_tenants_configure(struct r2d *d, bool on, uint32_t quantum, uint64_t prio_run,
			   uint64_t window, bool move)
{
	struct r2_tenants *ts = d->tenants;

	if (!ts)
		return;
	pthread_mutex_lock(&ts->lock);
	ts->on = on;
	ts->s.quantum = quantum ? quantum : ts->s.quantum;
	ts->s.prio_run = prio_run ? prio_run : ts->s.prio_run;
	ts->window = window ? window : ts->window;
	ts->s.may_move = move ? may_move : NULL;
	pthread_mutex_unlock(&ts->lock);
}

bool r2d_tenants_on(struct r2d *d)
{
	struct r2_tenants *ts = d->tenants;
	bool on;

	if (!ts)
		return false;
	pthread_mutex_lock(&ts->lock);
	on = ts->on;
	pthread_mutex_unlock(&ts->lock);
	return on;
}

/* Under ts->lock, after any change of the table's policies. */
static void caps_refresh(struct r2_tenants *ts)
{
	for (int k = 0; k < R2_SCHED_MAX_TENANTS; k++) {
		const struct r2_sched_tenant *x = &ts->s.t[k];
		atomic_store(&ts->cap_req[k], x->used ? x->pol.max_req_rate : 0);
		atomic_store(&ts->cap_ops[k], x->used ? x->pol.max_pending_ops : 0);
		atomic_store(&ts->cap_proxy[k], x->used ? x->pol.max_proxy : 0);
	}
}

int r2d_tenants_policy_set(struct r2d *d, const struct r2_tenant_policy *p)
{
	struct r2_tenants *ts = d->tenants;
	int t;

	if (!ts)
		return -ENODEV;
	pthread_mutex_lock(&ts->lock);
	t = r2_sched_policy_set(&ts->s, p, r2_now_us());
	if (t >= 0)
		ts->changed_us[t] = r2_now_us();
	caps_refresh(ts); /* "default" also changes the unmatched cgroups' */
	pthread_mutex_unlock(&ts->lock);
	wake_rails(d); /* the queues see the change now, not at the next completion */
	return t;
}

bool r2d_tenants_policy_get(struct r2d *d, const char *name, struct r2_tenant_policy *p)
{
	struct r2_tenants *ts = d->tenants;
	int t;

	if (!ts)
		return false;
	pthread_mutex_lock(&ts->lock);
	t = r2_sched_find(&ts->s, name);
	if (t >= 0)
		*p = ts->s.t[t].pol;
	pthread_mutex_unlock(&ts->lock);
	return t >= 0;
}

bool r2d_tenants_policy_at(struct r2d *d, int t, struct r2_tenant_policy *p)
{
	struct r2_tenants *ts = d->tenants;
	bool ok;

	if (!ts || t < 0 || t >= R2_SCHED_MAX_TENANTS)
		return false;
	pthread_mutex_lock(&ts->lock);
	ok = ts->s.t[t].used;
	if (ok)
		*p = ts->s.t[t].pol;
	pthread_mutex_unlock(&ts->lock);
	return ok;
}

bool r2d_tenants_has_class(struct r2d *d, enum r2_tclass cls)
{
	struct r2_tenants *ts = d->tenants;
	bool any = false;

	if (!ts)
		return false;
	pthread_mutex_lock(&ts->lock);
	for (int t = 0; t < R2_SCHED_MAX_TENANTS && !any; t++)
		any = ts->s.t[t].used && ts->s.t[t].pol.cls == cls;
	pthread_mutex_unlock(&ts->lock);
	return any;
}

int r2d_tenants_of(struct r2d *d, const char *cgroup)
{
	struct r2_tenants *ts = d->tenants;
	int t;

	if (!ts)
		return 0;
	pthread_mutex_lock(&ts->lock);
	t = r2_sched_tenant_of(&ts->s, cgroup ? cgroup : "", r2_now_us());
	if (t >= 0 && !atomic_load(&ts->cap_known[t])) { /* made now: its quotas */
		caps_refresh(ts);
		atomic_store(&ts->cap_known[t], true);
	}
	pthread_mutex_unlock(&ts->lock);
	return t;
}

int r2d_tenants_find(struct r2d *d, const char *cgroup)
{
	struct r2_tenants *ts = d->tenants;
	int t;

	if (!ts)
		return -ENOENT;
	pthread_mutex_lock(&ts->lock);
	t = r2_sched_tenant_find(&ts->s, cgroup ? cgroup : "");
	pthread_mutex_unlock(&ts->lock);
	return t;
}

/* The host's rails together, bits/s, from the NICs' link speeds (one
 * unknown counts as cost_nic_bw). */
static uint64_t rails_capacity(struct r2d *d)
{
	uint64_t sum = 0;

	for (int r = 0; d->rails && r < d->rails->n; r++) {
		uint64_t mbps = 0;
		for (int i = 0; i < d->topo.nnics; i++) {
			const struct r2_topo_nic *n = &d->topo.nics[i];
			if (!strcmp(n->name, d->rails->rail[r].ifname) ||
			    !strcmp(n->netdev, d->rails->rail[r].ifname))
				mbps = n->speed_mbps;
		}
		/* a link speed unknown (virtual NICs): the planner's healthy NIC
		 * (cost_nic_bw, bytes/s), so that a reservation is still cut */
		sum += mbps ? mbps * 1000000ull
			    : (uint64_t)r2_param_int(&d->params, P_COST_NIC_BW) * 8;
	}
	return sum;
}

int r2d_tenants_set_limit(struct r2d *d, int t, uint64_t limit_bps, uint64_t reserve_bps)
{
	struct r2_tenants *ts = d->tenants;

	if (!ts || t < 0 || t >= R2_SCHED_MAX_TENANTS)
		return -EINVAL;
	uint64_t capacity = rails_capacity(d);

	pthread_mutex_lock(&ts->lock);
	if (limit_bps == UINT64_MAX)
		limit_bps = ts->s.t[t].limit_bps;
	if (reserve_bps == UINT64_MAX)
		reserve_bps = ts->s.t[t].reserve_asked;
	r2_sched_set_limit(&ts->s, t, limit_bps, reserve_bps, capacity, r2_now_us());
	ts->changed_us[t] = r2_now_us();
	pthread_mutex_unlock(&ts->lock);
	wake_rails(d);
	return 0;
}

bool r2d_tenants_proxy_take(struct r2d *d, int t, uint64_t bytes)
{
	struct r2_tenants *ts = d->tenants;
	uint64_t cap, held;

	if (!ts || t < 0 || t >= R2_SCHED_MAX_TENANTS)
		return true;
	cap = atomic_load(&ts->cap_proxy[t]);
	held = atomic_load(&ts->proxy_held[t]);
	do {
		/* one chunk at a time always goes: a quota under a chunk cannot stop it */
		if (cap && held && held + bytes > cap) {
			atomic_fetch_add(&ts->proxy_waits[t], 1);
			return false;
		}
	} while (!atomic_compare_exchange_weak(&ts->proxy_held[t], &held, held + bytes));
	held += bytes;
	for (uint64_t hi = atomic_load(&ts->proxy_high[t]);
	     held > hi && !atomic_compare_exchange_weak(&ts->proxy_high[t], &hi, held);)
		;
	return true;
}

int r2d_tenants_op_begin(struct r2d *d, int t, bool enforce, uint32_t *n)
{
	struct r2_tenants *ts = d->tenants;
	uint32_t cap, open;

	*n = 0;
	if (!ts || t < 0 || t >= R2_SCHED_MAX_TENANTS)
		return 0; /* allowed, not counted */
	cap = enforce ? atomic_load(&ts->cap_ops[t]) : 0;
	open = atomic_load(&ts->ops_open[t]);
	do {
		*n = open;
		if (cap && open >= cap)
			return -1;
	} while (!atomic_compare_exchange_weak(&ts->ops_open[t], &open, open + 1));
	return 1;
}

bool r2d_tenants_req(struct r2d *d, int t, uint64_t now, struct r2_req_slot *sl,
		     uint64_t *until, uint32_t *rate)
{
	struct r2_tenants *ts = d->tenants;
	uint32_t per_win, share;

	sl->charged = false;
	if (!ts || t < 0 || t >= R2_SCHED_MAX_TENANTS || !(*rate = atomic_load(&ts->cap_req[t])))
		return true;
	if (now - ts->req_win_us[t] >= 100000) {
		ts->req_win_us[t] = now;
		ts->req_n[t] = 0;
		ts->req_sess_prev[t] = ts->req_sess[t];
		ts->req_sess[t] = 0;
	}
	if (sl->win != ts->req_win_us[t]) { /* its first request in this window */
		sl->win = ts->req_win_us[t];
		sl->n = 0;
		ts->req_sess[t]++;
	}
	per_win = *rate / 10; /* max_req_rate is 0 or at least 10 */
	/* each session that asked in the window before gets its share, so a
	 * session cannot be starved by its tenant's others */
	share = R2_MAX(1u, per_win / R2_MAX(1u, ts->req_sess_prev[t]));
	*until = ts->req_win_us[t] + 100000;
	if (ts->req_n[t] >= per_win || sl->n >= share) {
		atomic_fetch_add(&ts->req_paced[t], 1);
		return false;
	}
	ts->req_n[t]++;
	sl->n++;
	sl->charged = true;
	return true;
}

void r2d_tenants_req_refund(struct r2d *d, int t, struct r2_req_slot *sl)
{
	struct r2_tenants *ts = d->tenants;

	if (!sl->charged || !ts || t < 0 || t >= R2_SCHED_MAX_TENANTS)
		return;
	sl->charged = false;
	if (sl->win == ts->req_win_us[t] && ts->req_n[t] && sl->n) {
		ts->req_n[t]--;
		sl->n--;
	}
}

void r2d_tenants_op_end(struct r2d *d, int t)
{
	struct r2_tenants *ts = d->tenants;

	if (ts && t >= 0 && t < R2_SCHED_MAX_TENANTS)
		atomic_fetch_sub(&ts->ops_open[t], 1);
}

uint64_t r2d_tenants_proxy_use(struct r2d *d, int t, uint64_t *cap)
{
	struct r2_tenants *ts = d->tenants;

	*cap = 0;
	if (!ts || t < 0 || t >= R2_SCHED_MAX_TENANTS)
		return 0;
	*cap = atomic_load(&ts->cap_proxy[t]);
	return atomic_load(&ts->proxy_held[t]);
}

void r2d_tenants_proxy_give(struct r2d *d, int t, uint64_t bytes)
{
	struct r2_tenants *ts = d->tenants;

	if (ts && t >= 0 && t < R2_SCHED_MAX_TENANTS)
		atomic_fetch_sub(&ts->proxy_held[t], bytes);
}

int r2d_tenants_rows(struct r2d *d, struct r2_tenant_row *rows, int max)
{
	struct r2_tenants *ts = d->tenants;
	uint64_t now = r2_now_us();
	int n = 0;

	if (!ts)
		return 0;
	pthread_mutex_lock(&ts->lock);
	for (int t = 0; t < R2_SCHED_MAX_TENANTS && n < max; t++) {
		const struct r2_sched_tenant *x = &ts->s.t[t];
		struct r2_tenant_row *w = &rows[n++];
		if (!x->used) {
			n--;
			continue;
		}
		memset(w, 0, sizeof(*w));
		w->index = t;
		w->pol = x->pol;
		w->dynamic = x->dynamic;
		w->rate_bps = r2_sched_rate(&ts->s, t);
		w->limit_bps = x->limit_bps;
		w->reserve_bps = x->reserve_bps;
		w->burst_bytes = w->rate_bps ? r2_sched_burst(&ts->s, t) : 0;
		w->bytes = x->bytes;
		w->chunks = x->chunks;
		memcpy(w->bytes_rail, ts->bytes_rail[t], sizeof(w->bytes_rail));
		memcpy(w->bytes_per_s_rail, ts->bps_rail[t], sizeof(w->bytes_per_s_rail));
		for (int r = 0; r < R2_SCHED_MAX_RAILS; r++)
			w->bytes_per_s += ts->bps_rail[t][r];
		w->queued = x->queued;
		w->queued_bytes = x->queued_bytes;
		w->throttled_us = x->throttled_us +
				  (x->throttled_since && now > x->throttled_since
					   ? now - x->throttled_since
					   : 0);
		w->max_wait_us = x->max_wait_us;
		w->changed_us = ts->changed_us[t];
		w->proxy_bytes = atomic_load(&ts->proxy_held[t]);
		w->proxy_high = atomic_load(&ts->proxy_high[t]);
		w->proxy_waits = atomic_load(&ts->proxy_waits[t]);
		w->ops_open = atomic_load(&ts->ops_open[t]);
		w->req_paced = atomic_load(&ts->req_paced[t]);
	}
	pthread_mutex_unlock(&ts->lock);
	return n;
}

/* ---- the send path ---- */

static bool is_down(struct r2_tenants *ts, int rail, uint64_t peer)
{
	for (int i = 0; i < DOWN_SLOTS; i++)
		if (ts->down[rail][i] == peer)
			return true;
	return false;
}

static void set_down(struct r2_tenants *ts, int rail, uint64_t peer, bool down)
{
	int free_slot = -1;

	for (int i = 0; i < DOWN_SLOTS; i++) {
		if (ts->down[rail][i] == peer) {
			if (!down)
				ts->down[rail][i] = 0;
			return;
		}
		if (!ts->down[rail][i] && free_slot < 0)
			free_slot = i;
	}
	if (down && peer)
		ts->down[rail][free_slot >= 0 ? free_slot : (int)(peer % DOWN_SLOTS)] = peer;
}

void r2d_tenants_conn(struct r2d *d, int rail, uint64_t peer, bool up)
{
	struct r2_tenants *ts = d->tenants;

	if (!ts || rail < 0 || rail >= R2_SCHED_MAX_RAILS)
		return;
	pthread_mutex_lock(&ts->lock);
	set_down(ts, rail, peer, !up);
	pthread_mutex_unlock(&ts->lock);
}

/* The peer's slot of the rail's window (any thread; lock-free: a slot is
 * claimed once for a peer and kept). */
static _Atomic int64_t *peer_slot(struct r2_tenants *ts, int rail, uint64_t peer)
{
	unsigned h = (unsigned)((peer * 0x9E3779B97F4A7C15ull) >> 58); /* 0..63 */

	for (int i = 0; i < PEER_SLOTS; i++) {
		int k = (int)((h + (unsigned)i) % PEER_SLOTS);
		uint64_t cur = atomic_load(&ts->inflight[rail][k].peer);
		if (cur == peer)
			return &ts->inflight[rail][k].bytes;
		if (!cur) {
			uint64_t zero = 0;
			if (atomic_compare_exchange_strong(&ts->inflight[rail][k].peer, &zero, peer) ||
			    zero == peer)
				return &ts->inflight[rail][k].bytes;
		}
	}
	return &ts->inflight[rail][h % PEER_SLOTS].bytes; /* full: shares one */
}

/* A latency-class chunk may go while the window holds less than twice
 * sched_window: bulk chunks fill one window, the latency class has one
 * more, so it never waits for bulk bytes to be written (its own bytes stay
 * bounded). */
static bool window_open(struct r2_tenants *ts, const struct tq_item *q, int rail)
{
	int64_t limit = (int64_t)ts->window;

	if (ts->s.t[q->it.tenant].pol.cls == R2_TCLASS_LATENCY)
		limit *= 2;
	return atomic_load(peer_slot(ts, rail, q->peer)) < limit;
}

static bool peer_window_open(const struct r2_sched_item *it, void *arg)
{
	const struct tq_item *q = (const struct tq_item *)it;

	return window_open(arg, q, q->rail);
}

/* A data chunk of the engine's (it gave its record's rail) may go to its
 * peer on another rail (r2d_rails_movable) whose window to the peer is open. */
static bool may_move(const struct r2_sched_item *it, int to, void *arg)
{
	struct r2_tenants *ts = arg;
	const struct tq_item *q = (const struct tq_item *)it;

	return q->railp && !is_down(ts, to, q->peer) &&
	       r2d_rails_movable(ts->d, q->rail, to, q->peer) && window_open(ts, q, to);
}

/* Hands the rail's chunks on while their peers' windows are open (ts->lock held). A
 * chunk the transport cannot take now (-EAGAIN) goes back to the head of
 * its queue; one whose connection is gone goes to the failed list. */
static bool pump(struct r2d *d, struct r2_tenants *ts, int rail, uint64_t now)
{
	bool failed = false;

	for (;;) {
		struct tq_item *q = (struct tq_item *)r2_sched_next(&ts->s, rail, now);
		int r;
		if (!q)
			break;
		if (q->rail != rail) {
			/* taken from another rail's queue (may_move): the engine's
			 * record follows before the transport can complete it */
			q->rail = rail;
			atomic_store(q->railp, rail);
		}
		if (ts->s.t[q->it.tenant].pol.cls == R2_TCLASS_LATENCY)
			q->hdr.flags |= R2_CHUNK_URGENT; /* the transport's latency lane */
		r = r2d_rails_send(d, rail, q->peer, &q->hdr, q->buf, q->ctx);
		if (r == -EAGAIN) {
			r2_sched_requeue(&ts->s, rail, &q->it);
			break;
		}
		if (r < 0) {
			if (r == -ENOTCONN)
				set_down(ts, rail, q->peer, true);
			q->fnext = ts->failed;
			ts->failed = q;
			failed = true;
			continue;
		}
		ts->bytes_rail[q->it.tenant][rail] += q->hdr.len;
		free(q);
	}
	return failed;
}

static void wake_rails(struct r2d *d)
{
	uint64_t one = 1;

	if (d->rails && d->rails->started && write(d->rails->wake_fd, &one, sizeof(one)) < 0)
		(void)0;
}

int r2d_rails_send_tenant(struct r2d *d, int rail, uint64_t peer, const struct r2_chunk_hdr *hdr,
			  const void *buf, uint64_t ctx, int t, _Atomic int *railp)
{
	struct r2_tenants *ts = d->tenants;
	struct r2_peer *p;
	struct tq_item *q;
	bool failed;
	int r;

	if (!ts || !d->rails || rail < 0 || rail >= d->rails->n || rail >= R2_SCHED_MAX_RAILS ||
	    t < 0 || t >= R2_SCHED_MAX_TENANTS)
		return r2d_rails_send(d, rail, peer, hdr, buf, ctx);
	pthread_mutex_lock(&ts->lock);
	if (!ts->on) {
		/* scheduler off: straight to the transport, counted */
		pthread_mutex_unlock(&ts->lock);
		r = r2d_rails_send(d, rail, peer, hdr, buf, ctx);
		if (r == 0) {
			pthread_mutex_lock(&ts->lock);
			ts->s.t[t].bytes += hdr->len;
			ts->s.t[t].chunks++;
			ts->bytes_rail[t][rail] += hdr->len;
			pthread_mutex_unlock(&ts->lock);
		}
		return r;
	}
	pthread_mutex_unlock(&ts->lock);
	/* no connection on the rail: the caller tries another at once */
	p = r2d_rails_peer_find(d, peer);
	if (!p || !(__atomic_load_n(&p->conn_mask, __ATOMIC_RELAXED) & (1u << rail)))
		return -ENOTCONN;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->it.len = hdr->len;
	q->it.tenant = (uint16_t)t;
	q->rail = rail;
	q->railp = railp;
	q->peer = peer;
	q->hdr = *hdr;
	q->buf = buf;
	q->ctx = ctx;
	pthread_mutex_lock(&ts->lock);
	if (is_down(ts, rail, peer)) {
		pthread_mutex_unlock(&ts->lock);
		free(q);
		return -ENOTCONN;
	}
	r2_sched_enqueue(&ts->s, rail, &q->it, r2_now_us());
	failed = pump(d, ts, rail, r2_now_us());
	/* the chunk waits (its window full): another rail may take it */
	for (int o = 0; railp && r2_sched_queued(&ts->s, rail) &&
			o < R2_MIN(d->rails->n, R2_SCHED_MAX_RAILS);
	     o++)
		if (o != rail)
			failed |= pump(d, ts, o, r2_now_us());
	pthread_mutex_unlock(&ts->lock);
	if (failed)
		wake_rails(d); /* the rails thread completes them */
	return 0;
}

void r2d_tenants_sent(struct r2d *d, int rail, uint64_t peer, uint32_t len)
{
	struct r2_tenants *ts = d->tenants;
	_Atomic int64_t *b;

	if (!ts || rail < 0 || rail >= R2_SCHED_MAX_RAILS)
		return;
	b = peer_slot(ts, rail, peer);
	if (atomic_fetch_sub(b, (int64_t)len) < (int64_t)len)
		atomic_store(b, 0); /* never below 0 */
}

/* Every posted data chunk is in the window until its send completion
 * (r2d_rails_send counts, the rails thread takes off). */
void r2d_tenants_posted(struct r2d *d, int rail, uint64_t peer, uint32_t len)
{
	struct r2_tenants *ts = d->tenants;

	if (ts && rail >= 0 && rail < R2_SCHED_MAX_RAILS)
		atomic_fetch_add(peer_slot(ts, rail, peer), (int64_t)len);
}

static void complete_failed(struct r2d *d, struct tq_item *list)
{
	while (list) {
		struct tq_item *q = list;
		struct r2_tp_cqe c = { .type = R2_TPC_SEND, .status = -ENOTCONN, .peer = q->peer,
				       .hdr = q->hdr, .buf = (void *)q->buf, .ctx = q->ctx,
				       .stream = -1 };
		list = q->fnext;
		if (d->net_ev && d->net_ev->deliver)
			d->net_ev->deliver(d, q->rail, &c);
		free(q);
	}
}

/* The bytes each tenant sent on each rail in the last second or so, as
 * bytes per second (under ts->lock). */
static void take_rates(struct r2_tenants *ts, uint64_t now)
{
	uint64_t dt = now - ts->snap_us;

	for (int t = 0; t < R2_SCHED_MAX_TENANTS; t++)
		for (int r = 0; r < R2_SCHED_MAX_RAILS; r++) {
			uint64_t b = ts->bytes_rail[t][r] - ts->snap_rail[t][r];
			ts->bps_rail[t][r] = ts->snap_us && dt ? b * 1000000 / dt : 0;
			ts->snap_rail[t][r] = ts->bytes_rail[t][r];
		}
	ts->snap_us = now;
}

int r2d_tenants_pump_all(struct r2d *d, int max_ms)
{
	struct r2_tenants *ts = d->tenants;
	struct tq_item *failed;
	uint64_t now = r2_now_us(), wake;
	int n = d->rails ? R2_MIN(d->rails->n, R2_SCHED_MAX_RAILS) : 0;

	if (!ts)
		return max_ms;
	pthread_mutex_lock(&ts->lock);
	bool any = false;
	for (int r = 0; r < n; r++)
		any |= r2_sched_queued(&ts->s, r) != 0;
	for (int r = 0; any && r < n; r++) /* an empty rail may take others' chunks */
		pump(d, ts, r, now);
	if (now - ts->snap_us >= 1000000) /* bytes per second now, once a second */
		take_rates(ts, now);
	failed = ts->failed;
	ts->failed = NULL;
	wake = r2_sched_next_wake(&ts->s, now);
	pthread_mutex_unlock(&ts->lock);
	complete_failed(d, failed);
	if (wake == UINT64_MAX)
		return max_ms;
	return (int)R2_MIN((uint64_t)max_ms, wake > now ? (wake - now + 999) / 1000 : 0);
}

struct drop_arg {
	uint64_t peer;
	struct tq_item **out;
};

static bool drop_peer(struct r2_sched_item *it, void *arg)
{
	struct drop_arg *a = arg;
	struct tq_item *q = (struct tq_item *)it;

	if (a->peer && q->peer != a->peer)
		return false;
	q->fnext = *a->out;
	*a->out = q;
	return true;
}

void r2d_tenants_fail(struct r2d *d, int rail, uint64_t peer)
{
	struct r2_tenants *ts = d->tenants;
	struct tq_item *list = NULL;
	struct drop_arg a = { .peer = peer, .out = &list };

	if (!ts || rail < 0 || rail >= R2_SCHED_MAX_RAILS)
		return;
	pthread_mutex_lock(&ts->lock);
	if (peer)
		set_down(ts, rail, peer, true);
	if (r2_sched_remove(&ts->s, rail, drop_peer, &a) > 0) {
		struct tq_item **tail = &list;
		while (*tail)
			tail = &(*tail)->fnext;
		*tail = ts->failed;
		ts->failed = list;
		list = NULL;
	}
	pthread_mutex_unlock(&ts->lock);
	if (ts->failed)
		wake_rails(d);
}
