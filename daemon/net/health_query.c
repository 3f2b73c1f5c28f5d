/* SPDX-License-Identifier: MIT */
/*
 * Health's event ring and its read-only queries: events logged and kept
 * for `r2cclctl events`, and snapshots of the rails and paths for
 * `r2cclctl rails`/`peers` (ctl_health.c turns them into replies).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/health_int.h"
#include "log.h"
#include "util.h"

static void event_add(struct r2d *d, uint64_t owner, int sev, const char *kind,
		      const char *subject, const char *fmt, va_list ap)
{
	struct r2_health *h = d->health;
	struct timespec ts;
	char msg[224];

	vsnprintf(msg, sizeof(msg), fmt, ap);
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
	e->owner = owner;
	e->ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	e->sev = sev;
	snprintf(e->kind, sizeof(e->kind), "%s", kind);
	snprintf(e->subject, sizeof(e->subject), "%s", subject);
	snprintf(e->msg, sizeof(e->msg), "%s", msg);
	pthread_mutex_unlock(&h->lock);
}

void r2d_health_event(struct r2d *d, int sev, const char *kind, const char *subject,
		      const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	event_add(d, 0, sev, kind, subject, fmt, ap);
	va_end(ap);
}

void r2d_health_event_of(struct r2d *d, uint64_t owner, int sev, const char *kind,
			 const char *subject, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	event_add(d, owner, sev, kind, subject, fmt, ap);
	va_end(ap);
}

int r2d_health_events(struct r2d *d, uint64_t since, uint32_t max, struct r2d_event_info **ev,
		      size_t *n, uint64_t *last_seq)
{
	static const char *const sev[] = { "err", "err", "warn", "info" };
	struct r2_health *h = d->health;
	struct r2d_event_info *out = calloc(EV_RING, sizeof(*out));

	*ev = out;
	*n = 0;
	*last_seq = 0;
	if (!out)
		return -ENOMEM;
	if (!h)
		return 0;
	pthread_mutex_lock(&h->lock);
	/* the ring's window after since (since may be anything a client
	 * sends: at or past the last event there is nothing; since + 1 must
	 * not wrap), at most max of them, never more than the ring holds */
	uint64_t first = h->evseq > EV_RING ? h->evseq - EV_RING + 1 : 1;
	if (since >= h->evseq)
		first = h->evseq + 1;
	else if (first <= since)
		first = since + 1;
	if (max && h->evseq >= first && h->evseq - first + 1 > max)
		first = h->evseq - max + 1;
	for (uint64_t q = first; q <= h->evseq && *n < EV_RING; q++) {
		const struct hevent *e = &h->ev[(q - 1) % EV_RING];
		struct r2d_event_info *x = &out[(*n)++];
		x->seq = e->seq;
		x->owner = e->owner;
		x->time_ms = e->ms;
		x->severity = sev[e->sev & 3];
		memcpy(x->kind, e->kind, sizeof(x->kind));
		memcpy(x->subject, e->subject, sizeof(x->subject));
		memcpy(x->msg, e->msg, sizeof(x->msg));
	}
	*last_seq = h->evseq;
	pthread_mutex_unlock(&h->lock);
	return 0;
}

static void rail_info(struct r2_rail *rl, int r, struct r2d_rail_info *x)
{
	snprintf(x->nic, sizeof(x->nic), "%s", rl->ifname);
	x->index = (uint32_t)r;
	x->state = r2d_rstate_name(rl->h.state);
	x->transport = rl->ops->name;
	x->tx_bps = rl->h.tx_bps;
	x->rx_bps = rl->h.rx_bps;
	rl->ops->stats(rl->tp, &x->tx_bytes, &x->rx_bytes);
	x->errors = rl->h.errors;
	x->changes = rl->h.changes;
	x->failovers = rl->h.failovers;
	x->since_us = rl->h.since_us;
	x->drained = rl->h.drained;
	snprintf(x->cause, sizeof(x->cause), "%s",
		 rl->h.drained ? "drained by the operator" : rl->h.cause);
}

static void path_info(struct r2d *d, struct r2_peer *p, int r, struct r2d_path_info *x)
{
	struct r2_plink *l = &p->link[r];

	x->peer = p->id;
	r2h_peer_name(d, p->id, x->host, sizeof(x->host));
	x->rail = (uint32_t)r;
	snprintf(x->nic, sizeof(x->nic), "%s", d->rails->rail[r].ifname);
	x->addr = p->addr[r];
	x->state = r2d_rstate_name(l->state);
	if ((p->remote_down & (1u << r)) && l->state != R2_RS_FAILED)
		x->state = "failed";
	x->rtt_us = atomic_load(&p->rtt_us[r]);
	x->last_rx_us = atomic_load(&p->last_rx_us[r]);
	x->missed = l->missed;
	x->missed_total = l->missed_total;
	x->errors = l->errors;
	x->failovers = l->failovers;
	x->changes = l->changes;
	x->tx_bytes = atomic_load_explicit(&p->tx_bytes[r], memory_order_relaxed);
	x->tx_chunks = atomic_load_explicit(&p->tx_chunks[r], memory_order_relaxed);
	x->rx_bytes = atomic_load_explicit(&p->rx_bytes[r], memory_order_relaxed);
	x->rx_chunks = atomic_load_explicit(&p->rx_chunks[r], memory_order_relaxed);
	x->resends = atomic_load_explicit(&p->resends[r], memory_order_relaxed);
	if (d->health && d->health->mon)
		x->rate_bps = (uint64_t)r2h_pmon(d, (int)(p - d->rails->peer), r)->rate;
	snprintf(x->cause, sizeof(x->cause), "%s", l->cause);
}

int r2d_health_snapshot(struct r2d *d, struct r2d_health_snap *s)
{
	struct r2_rails *rs = d->rails;
	int np = rs ? atomic_load(&rs->npeers) : 0, nr = rs ? rs->n : 0;

	memset(s, 0, sizeof(*s));
	s->rails = calloc((size_t)nr + 1, sizeof(*s->rails));
	s->paths = calloc((size_t)np * (size_t)nr + 1, sizeof(*s->paths));
	if (!s->rails || !s->paths) {
		r2d_health_snap_free(s);
		return -ENOMEM;
	}
	for (int r = 0; r < nr; r++)
		rail_info(&rs->rail[r], r, &s->rails[s->nrails++]);
	for (int i = 0; i < np; i++) {
		struct r2_peer *p = &rs->peer[i];
		for (int r = 0; r < nr; r++) {
			if (!p->link[r].known && !(p->conn_mask & (1u << r)))
				continue;
			struct r2d_path_info *x = &s->paths[s->npaths++];
			path_info(d, p, r, x);
			s->rails[r].tx_chunks += x->tx_chunks;
			s->rails[r].rx_chunks += x->rx_chunks;
			s->rails[r].resends += x->resends;
			s->rails[r].hb_missed += x->missed_total;
		}
	}
	if (d->health) {
		s->replans = d->health->replans;
		s->replan_timed = d->health->replan_timed;
		s->replan_us_sum = d->health->replan_us_sum;
	}
	return 0;
}

void r2d_health_snap_free(struct r2d_health_snap *s)
{
	if (!s)
		return;
	free(s->rails);
	free(s->paths);
	memset(s, 0, sizeof(*s));
}
