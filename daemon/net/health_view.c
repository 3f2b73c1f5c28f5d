/* SPDX-License-Identifier: MIT */
/*
 * Planning views: what a communicator's view holds (NICs down, degraded
 * NICs' bandwidth) and how this host computes the view it would propose
 * from the facts it knows (its NICs, its paths, what peers reported).
 * Deterministic, so any daemon computes the same view from the same facts.
 */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "net/health_int.h"

struct r2_view *r2h_view_new(uint32_t nh, uint32_t nr)
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

struct r2_view *r2h_view_copy(const struct r2_view *s)
{
	struct r2_view *v = r2h_view_new(s->nhosts, s->nrails);

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

bool r2h_view_eq(const struct r2_view *a, const struct r2_view *b)
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

/* The view in words, for the event log ("host 1 rail 0, ..."). */
void r2h_view_describe(const struct r2_view *v, char *buf, size_t len)
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
}

/* The bandwidths of the newest kept commit that degraded a NIC on rail r
 * (NULL: none), for the tie rule below: a trial (health_monitor.c) commits
 * "every NIC up", and the slow paths it finds again come one by one. */
static const uint64_t *blamed(const struct hcomm *hc, uint32_t nh, uint32_t nr, uint32_t r)
{
	for (int k = hc->nhist - 1; k >= 0; k--) {
		const struct r2_view *l = hc->hist[k];
		if (!l || l->nhosts != nh || l->nrails != nr)
			return NULL;
		for (uint32_t a = 0; a < nh; a++)
			if (l->bw[a * nr + r] && !l->down[a * nr + r])
				return l->bw;
	}
	return NULL;
}

/* Slow paths (throughput monitor) as degraded NICs: on each rail, the NIC
 * of the endpoint that most slow paths share is planned at the slowest of
 * their bandwidths; its paths are then accounted for; repeat. (A NIC capped
 * in both directions slows the paths into and out of its host, so it is the
 * endpoint both share; ties: the NIC the newest kept commit degraded on that
 * rail, else the higher host index, as for failed paths.) */
static void degraded_nics(struct r2d *d, const struct hcomm *hc, struct r2_view *v)
{
	struct r2_health *h = d->health;
	uint32_t nr = v->nrails, nh = v->nhosts;
	size_t n = h->nslow;
	int *ia = calloc(n + 1, sizeof(int)), *ib = calloc(n + 1, sizeof(int));
	uint32_t *cnt = calloc((size_t)nh * nr + 1, sizeof(uint32_t));

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
		const uint64_t *was = blamed(hc, nh, nr, r);
		for (;;) {
			uint32_t best = UINT32_MAX, bc = 0;
			uint64_t bw = 0;
			for (uint32_t a = 0; a < nh; a++) {
				uint32_t x = cnt[a * nr + r];
				/* a tie goes to the NIC degraded last (one path of
				 * two cleared first, or found slow again first after
				 * a trial, does not move the blame), else to the
				 * higher index */
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


/* NICs known down: ours, and those their hosts told us about. */
static void view_down_nics(struct r2d *d, const struct hcomm *hc, struct r2_view *v)
{
	struct r2_rails *rs = d->rails;
	uint32_t nr = v->nrails, nh = v->nhosts;

	for (uint32_t a = 0; a < nh; a++) {
		if ((int)a == hc->my_host) {
			for (uint32_t r = 0; r < nr; r++)
				if (r2h_local_bad(&rs->rail[r]))
					v->down[a * nr + r] = 1;
			continue;
		}
		struct r2_peer *p = r2d_rails_peer_find(d, hc->host_ids[a]);
		for (uint32_t r = 0; p && r < nr; r++)
			if (p->remote_down & (1u << r))
				v->down[a * nr + r] = 1;
	}
}

/* Failed paths not explained by a NIC down, ours and those peers reported,
 * counted per endpoint NIC into cnt[host * nrails + rail]. */
static void view_count_failed(struct r2d *d, const struct hcomm *hc, const struct r2_view *v,
			      uint32_t *cnt)
{
	struct r2_health *h = d->health;
	uint32_t nr = v->nrails, nh = v->nhosts, me = (uint32_t)hc->my_host;

	for (uint32_t a = 0; a < nh; a++) {
		struct r2_peer *p =
			(int)a == hc->my_host ? NULL : r2d_rails_peer_find(d, hc->host_ids[a]);
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
}

/* A failed path is planned as a NIC down (a view holds NICs, not paths):
 * on each rail, the endpoint with the most failed paths (ties: the higher
 * host index); its paths are then accounted for; repeat. */
static void view_blame_failed(struct r2_view *v, uint32_t *cnt)
{
	uint32_t nr = v->nrails, nh = v->nhosts;

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
			for (uint32_t a = 0; a < nh; a++)
				if (a != best && cnt[a * nr + r])
					cnt[a * nr + r]--;
			cnt[best * nr + r] = 0;
		}
	}
}

/* The view this daemon would propose for hc now. */
struct r2_view *r2h_compute_view(struct r2d *d, struct hcomm *hc)
{
	uint32_t nr = (uint32_t)d->rails->n, nh = (uint32_t)hc->nhosts;
	struct r2_view *v = r2h_view_new(nh, nr);
	uint32_t *cnt;

	if (!v)
		return NULL;
	cnt = calloc((size_t)nh * nr + 1, sizeof(*cnt));
	if (!cnt) {
		r2d_view_free(v);
		return NULL;
	}
	view_down_nics(d, hc, v);
	view_count_failed(d, hc, v, cnt);
	view_blame_failed(v, cnt);
	free(cnt);
	degraded_nics(d, hc, v);
	return v;
}
