/* SPDX-License-Identifier: MIT */
/*
 * Rail health's lifecycle and its tick (BRIEF.md decision 9;
 * docs/resilience.md is the design). The tick drives the detectors in
 * turn; the work is in the files named in health.h:
 *
 *  - health_state.c: path and rail state machines, rtnetlink, heartbeats,
 *    re-probing failed paths;
 *  - health_monitor.c: the throughput monitor (slow paths);
 *  - health_view.c: planning views and how one is computed;
 *  - health_agree.c: the view agreement of each communicator;
 *  - health_peer.c: control messages between peer daemons;
 *  - health_query.c: the event ring and read-only snapshots for r2cclctl.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/health_int.h"
#include "log.h"
#include "util.h"

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

void r2h_kick(struct r2d *d)
{
	if (d->health && d->health->view_dirty) {
		d->health->view_dirty = false;
		r2h_tick_comms(d, r2_now_us());
	}
}

/* This tick comes late by more than a heartbeat interval: this daemon was
 * not running (an overloaded host, a VM paused): its own threads did not
 * see the messages that came meanwhile, so silence is no evidence until the
 * rails thread has caught up (one interval). */
static void check_late(struct r2d *d, uint64_t now)
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
	check_late(d, now);
	r2h_tick_rails(d, now);
	r2h_tick_paths(d, now);
	r2h_tick_monitor(d, now);
	r2h_tick_pathev(d, now);
	d->health->view_dirty = false;
	r2h_tick_comms(d, now);
	r2h_tick_degraded(d);
}

int r2d_health_start(struct r2d *d)
{
	struct r2_health *h;
	uint64_t iv = p_us(d, P_HB_INTERVAL) / 1000;
	uint64_t tick_ms = iv / 4;
	int r;

	if (!d->rails)
		return 0;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->d = d;
	h->nlfd = -1;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
	if (r2h_mon_init(h) < 0)
		log_warn("health: no memory for the throughput monitor; it is off");
	d->health = h;
	r2h_rails_init(d);
	r = r2h_netlink_open(d);
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
		r2h_hc_free(hc);
	}
	free(h->reps);
	r2h_pathev_free(h);
	r2h_mon_free(h);
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->cond);
	free(h);
	d->health = NULL;
}
