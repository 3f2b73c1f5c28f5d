/* SPDX-License-Identifier: MIT */
/*
 * Rail health's private header: the state its files share (health.c,
 * health_state.c, health_monitor.c, health_view.c, health_agree.c,
 * health_peer.c, health_query.c). Nothing outside health includes it.
 *
 * Threads: the loop thread owns everything but what is marked otherwise.
 * h->lock guards the event ring and each hcomm's executor side (hold,
 * started, views); mon_lock[rail] guards the monitor's counters that the
 * rails thread and the executors update. Lock order: d->lock, then h->lock.
 */
#ifndef R2CCL_HEALTH_INT_H
#define R2CCL_HEALTH_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>
#include <uv.h>

#include "base/comm_record.h"
#include "config.h"
#include "net/health.h"
#include "net/net.h"
#include "net/rails.h"

#define EV_RING 256

struct hview_node {
	struct hview_node *next;
	struct r2_view *v;
};

#define R2H_VIEW_HIST 8 /* commits a coordinator keeps (hcomm.hist) */

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
	/* the last R2H_VIEW_HIST commits, oldest first (r2h_last: the newest,
	 * NULL before the first: everything up); a member that missed some (a
	 * commit written on a rail as it failed) gets them again */
	struct r2_view *hist[R2H_VIEW_HIST];
	int nhist;
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
	uint64_t owner; /* r2d_health_event_of */
};

/* A failed path a - b on a rail that a peer reported (not our own). */
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

/* A path event (RailEvent with a peer_host) about the path a - b on a
 * rail, of a kind: its state (failed, healthy again) or its speed (slow,
 * normal again: DEGRADED). Received (h->pev_in): the last sequence number
 * applied, so that a copy or an older event about the same path is dropped,
 * while events about other paths, which come over other streams, are
 * taken in any order. */
struct pathseq {
	uint64_t a, b;
	uint32_t rail;
	bool speed;
	uint64_t seq;
};

/* This host's own (h->pev_out): sent again `again` more times, every
 * PATHEV_AGAIN_US, with the same sequence number, so that a lost "healthy"
 * or "normal again" does not leave the path planned failed or slow on a
 * peer. */
struct pathev {
	struct pathseq k;
	uint32_t state;
	uint64_t bw;
	uint8_t again;
	uint64_t next_us;
	char cause[96];
};

/* Throughput monitor of one (peer, rail) path, sender side: bytes
 * acknowledged while chunks were outstanding, over the time they were
 * outstanding. An idle path measures nothing (not "slow"). */
/* A NIC as the committed views plan it (loop thread): degraded since when,
 * and how many times in a row it was degraded again within
 * MON_TRIAL_HOLD_US of being planned at full speed (its trials' backoff). */
struct nicdeg {
	bool on;
	uint64_t since_us, free_us;
	int trials;
};

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
	uint64_t busy_from_us;  /* first sample with traffic since it joined (ramp-up) */
	struct nicdeg nic;      /* the peer's NIC on this rail, as views plan it */
};

struct rmon { /* per rail, under mon_lock[rail] */
	uint64_t last_us;
	int nbusy;
	struct pmon *busy[R2_MAX_PEERS];
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
	/* re-plans (metrics): views committed, and the time from the hold
	 * (proposal seen) to the commit, summed, for those that held */
	uint64_t replans, replan_timed, replan_us_sum;
	struct linkrep *reps;
	size_t nreps, capreps;
	uint64_t last_hb_us, last_stat_us, last_link_poll_us, last_mon_us;
	uint64_t last_tick_us, stall_until_us; /* this daemon not scheduled */
	bool view_dirty;
	struct slowrep *slow;
	size_t nslow, capslow;
	struct pathseq *pev_in; /* (loop thread) */
	size_t npev_in, cappev_in;
	struct pathev *pev_out;
	size_t npev_out, cappev_out;
	pthread_mutex_t mon_lock[R2_MAX_RAILS];
	struct pmon *mon; /* [peer index * R2_MAX_RAILS + rail] */
	double *rates;    /* scratch: recent path rates (the monitor's reference) */
	struct rmon *rmon; /* [rail] */
	struct nicdeg nic_self[R2_MAX_RAILS]; /* this host's NICs, as views plan them */
};

static inline uint64_t p_us(struct r2d *d, int p)
{
	return (uint64_t)r2_param_int(&d->params, p);
}

static inline struct pmon *r2h_pmon(struct r2d *d, int peer_index, int rail)
{
	return &d->health->mon[(size_t)peer_index * R2_MAX_RAILS + (size_t)rail];
}

/* health.c: a change that may change a view: propose at once. */
void r2h_kick(struct r2d *d);

/* health_state.c: path and rail state machines, rtnetlink, re-probing */
bool r2h_local_bad(const struct r2_rail *rl);
void r2h_set_bad(struct r2d *d, struct r2_peer *p);
void r2h_link_state(struct r2d *d, struct r2_peer *p, int r, int st, const char *cause);
void r2h_link_fail(struct r2d *d, struct r2_peer *p, int r, const char *cause, bool report,
		   bool deliver);
void r2h_rail_state(struct r2d *d, int r, int st, const char *cause);
int r2h_netlink_open(struct r2d *d);
void r2h_rails_init(struct r2d *d);
void r2h_tick_rails(struct r2d *d, uint64_t now);
void r2h_tick_paths(struct r2d *d, uint64_t now);

/* health_monitor.c: the throughput monitor */
int r2h_mon_init(struct r2_health *h);
void r2h_mon_free(struct r2_health *h);
void r2h_slow_set(struct r2_health *h, uint64_t a, uint64_t b, int rail, uint64_t bw);
void r2h_pmon_reset(struct r2d *d, struct r2_peer *p, int r);
bool r2h_send_stalled(struct r2_health *h, int i, int r, uint64_t now, uint64_t last,
		      uint64_t last_any, uint64_t stall);
void r2h_tick_monitor(struct r2d *d, uint64_t now);
/* The ramp-up rule (unit-tested): whether path l, not slow, is not to be
 * judged at now. busy_from_us: its first sample with traffic since it last
 * turned healthy or connected (0: none yet). */
#define MON_RAMP_US 3000000ull
bool r2h_mon_ramping(const struct r2_plink *l, uint64_t busy_from_us, uint64_t now);
/* The trial rule (unit-tested): whether the slow paths of a NIC planned
 * degraded since `since`, degraded again within MON_TRIAL_HOLD_US of its
 * last `trials` releases, are planned at full speed again at now to be
 * measured there. */
#define MON_TRIAL_FACTOR 4
#define MON_TRIAL_MAX_SHIFT 5
#define MON_TRIAL_HOLD_US 15000000ull
bool r2h_mon_trial_due(uint64_t since, int trials, uint64_t stable_us, uint64_t now);
/* A committed view plans NIC n degraded (deg) or not, at now. */
void r2h_nicdeg_set(struct nicdeg *n, bool deg, uint64_t now);
void r2h_mon_view(struct r2d *d, const struct hcomm *hc, const struct r2_view *v, uint64_t now);

/* health_view.c: planning views and how this host computes one */
struct r2_view *r2h_view_new(uint32_t nh, uint32_t nr);
struct r2_view *r2h_view_copy(const struct r2_view *s);
bool r2h_view_eq(const struct r2_view *a, const struct r2_view *b);
void r2h_view_describe(const struct r2_view *v, char *buf, size_t len);
struct r2_view *r2h_compute_view(struct r2d *d, struct hcomm *hc);

/* health_agree.c: view agreement */
struct hcomm *r2h_hc_get(struct r2_health *h, uint64_t key, bool create);
struct hcomm *r2h_hc_for(struct r2d *d, struct r2_comm *c);
void r2h_hc_free(struct hcomm *hc);
void r2h_send_view(struct r2d *d, struct hcomm *hc, int to, uint32_t type,
		   const struct r2_view *v, uint64_t epoch, uint64_t started);
/* coordinator: the kept commits after epoch `have` again, oldest first, to
 * host `to` (-1: every member) */
void r2h_send_commits(struct r2d *d, struct hcomm *hc, int to, uint64_t have);
/* coordinator: the content committed last (NULL: none yet, everything up) */
static inline const struct r2_view *r2h_last(const struct hcomm *hc)
{
	return hc->nhist ? hc->hist[hc->nhist - 1] : NULL;
}
/* a view committed (this coordinator's, or received): logged, shown on the
 * rails, handed to the executors */
void r2h_view_committed(struct r2d *d, struct hcomm *hc, struct r2_view *v);
/* coordinator: commits the proposal once every host acknowledged it */
void r2h_check_acks(struct r2d *d, struct hcomm *hc);
void r2h_tick_comms(struct r2d *d, uint64_t now);
void r2h_tick_degraded(struct r2d *d);

/* health_peer.c: control messages between peer daemons */
const char *r2h_peer_name(struct r2d *d, uint64_t id, char *buf, size_t len);
void r2h_send_peer_msg(struct r2d *d, uint64_t peer, uint32_t type, const ProtobufCMessage *m);
void r2h_broadcast_ev(struct r2d *d, int rail, int state, uint64_t peer_host, uint64_t bw,
		      const char *cause);
void r2h_broadcast_rail(struct r2d *d, int rail, int state, uint64_t peer_host,
			const char *cause);
void r2h_tell_local_state(struct r2d *d, struct r2_peer *p);
/* this host's path events sent again (struct pathev); forgets everything
 * from or about peer id (its path events' numbers, its reports of failed and
 * slow paths, theirs about it) */
void r2h_tick_pathev(struct r2d *d, uint64_t now);
void r2h_pathev_forget(struct r2_health *h, uint64_t id);
void r2h_pathev_free(struct r2_health *h);

/* health_agree.c: p has no rail but another connected peer may bridge to it;
 * p's daemon is gone (every rail reset or refused, no connection) */
bool r2h_bridged(struct r2d *d, const struct r2_peer *p);
bool r2h_daemon_gone(struct r2d *d, const struct r2_peer *p);

#endif
