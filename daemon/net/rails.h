/* SPDX-License-Identifier: MIT */
/*
 * Rails: one transport instance per selected NIC with an IPv4 address, the
 * peer daemons they connect to, and the thread that drains their completion
 * queues. Data and acknowledgements go straight to the communicator's mailbox
 * (its executor runs the rail phase); control messages and connection events
 * go to the control loop (bootstrap, failure handling), through d->async.
 */
#ifndef R2CCL_RAILS_H
#define R2CCL_RAILS_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/daemon.h"
#include "transport/transport.h"

#define R2_MAX_RAILS 8
/* hdr.flags: an eager message whose receiver owes its ACK, paid by its own
 * next collective's message (engine/exec_rail_ack.c). The throughput
 * monitor and the send-stall detector leave it out (r2d_rails_send): its
 * answer comes when the receiver's next collective does, not when the path
 * carried it. */
#define R2_CHUNK_LAZY_ACK 0x80
#define R2_MAX_PEERS 1024
#define R2_RAIL_USE_SLOTS 32

/* Health states of a rail and of a (peer, rail) path (health.c). */
enum r2_rstate { R2_RS_HEALTHY = 0, R2_RS_DEGRADED, R2_RS_FAILED, R2_RS_RECOVERING,
		 R2_RS_DRAINED /* on the wire only (RailEvent) */ };

/* Local rail health (loop thread; health.c). */
struct r2_rhealth {
	uint8_t state;         /* enum r2_rstate */
	bool link_up;          /* rtnetlink / link_state */
	bool drained;          /* r2cclctl drain */
	uint32_t ifindex;
	uint64_t since_us, up_since_us;
	uint64_t errors, failovers, changes;
	uint64_t flap_us[16];  /* recent failures (hysteresis) */
	char cause[128];
	uint64_t last_tx, last_rx, last_stat_us; /* throughput monitor */
	uint64_t tx_bps, rx_bps;                 /* sliding window (EWMA), bytes/s */
};

struct r2_rail {
	int index;
	char ifname[64];
	struct in_addr addr, mask;
	uint16_t port;
	const struct r2_tp_ops *ops;  /* tcp, or verbs where the NIC has an RDMA port */
	struct r2_tp *tp;
	char rdma_dev[64];            /* verbs: "rxe0:1" (device:port); "" for tcp */
	struct r2_rhealth h;
	struct r2_bufpool *pool; /* proxy buffers on this NIC's node (bufpool.c) */
	struct r2_rails *rs;
};

/* Health of the path to one peer on one rail (loop thread; health.c). */
struct r2_plink {
	uint8_t state;         /* enum r2_rstate */
	bool known;            /* ever connected or wanted */
	uint64_t since_us, conn_us, stable_since_us;
	uint64_t last_hb_tx_us, next_probe_us, backoff_ms;
	uint32_t missed;
	uint64_t missed_total; /* heartbeats missed, summed as they are counted */
	uint64_t errors, failovers, changes;
	char cause[128];
};

struct r2_peer {
	/* the peer daemon's id; 0: a free entry (evicted, r2d_rails_make_room),
	 * set last when an entry is (re)used so other threads never match a
	 * half-filled one */
	_Atomic uint64_t id;
	uint32_t conn_mask; /* rails with a usable connection */
	uint32_t want_mask; /* rails we asked to connect */
	/* connected rails not warmed up yet: no communicator needed the peer
	 * when they came up (rails.c: warm-up goes only to needed peers) */
	uint32_t warm_pending;
	uint32_t addr[R2_MAX_RAILS]; /* its address on each rail (network order), 0 unknown */
	uint16_t port[R2_MAX_RAILS];
	struct r2_plink link[R2_MAX_RAILS];
	uint32_t remote_down;      /* its own NICs it told us are failed or drained */
	/* last RailEvent seq about its own NIC r, whoever passed it on */
	uint64_t nic_seq[R2_MAX_RAILS];
	uint64_t nopath_since_us;  /* no connection on any rail since (0: has one) */
	/* rails whose connection it reset or whose dial it refused (no daemon
	 * listens there any more); a CONN clears the rail (health.c) */
	uint32_t gone_mask;
	atomic_uint_fast64_t last_rx_us[R2_MAX_RAILS]; /* rails thread: any message */
	atomic_uint_fast64_t rtt_us[R2_MAX_RAILS];     /* heartbeat round trip */
	atomic_uint bad_mask;      /* rails the engine avoids to this peer (any thread) */
	/* the last time its data came through a bridge (detour.c): alive while
	 * no rail connects it to this host */
	_Atomic uint64_t detour_rx_us;
	/* traffic per rail (metrics): data chunks and their bytes sent and
	 * received, and chunks the engine posted again because this path lost
	 * them with its connection (r2d_rails_note_resend); any thread */
	atomic_uint_fast64_t tx_bytes[R2_MAX_RAILS], tx_chunks[R2_MAX_RAILS];
	atomic_uint_fast64_t rx_bytes[R2_MAX_RAILS], rx_chunks[R2_MAX_RAILS];
	atomic_uint_fast64_t resends[R2_MAX_RAILS];
};

/* An event for the control loop. */
struct r2_loop_ev {
	struct r2_loop_ev *next;
	int rail;
	struct r2_tp_cqe cqe; /* CTRL RECV (buf owned: release with the rail), CONN, ERROR */
};

struct r2_rails {
	struct r2d *d;
	int n;
	struct r2_rail rail[R2_MAX_RAILS];
	pthread_t thread;
	int epfd, wake_fd;
	uint64_t spin_us; /* exec_spin_us: polled this long after traffic */
	atomic_bool stop;
	bool started;
	/* tcp_rx_direct (rails.c): off once the rails stop; progress threads
	 * delivering now */
	atomic_bool direct_off;
	atomic_int direct_busy;
	/* peers (loop thread only) */
	struct r2_peer peer[R2_MAX_PEERS];
	/* entries in use or freed, grows only; entries never move (other
	 * threads read them); a freed one (id 0) is reused first */
	atomic_int npeers;
	uint64_t evicted; /* entries freed to make room (r2d_rails_make_room) */
	/* control messages' copies the transports hold until their SEND
	 * completion (struct ctrl_copy, rails_int.h): a provider's close() drops
	 * its queued sends without completions, so the stop frees what is
	 * left here (ctrl_lock) */
	pthread_mutex_t ctrl_lock;
	struct ctrl_copy *ctrl_copies;
	/* where the next control message's detour starts looking for bridges
	 * in the peer table (rails_ctrl.c ctrl_detour) */
	atomic_uint ctrl_bridge_next;
	/* events for the loop */
	pthread_mutex_t qlock;
	struct r2_loop_ev *qhead, *qtail;
	uv_async_t async;
	uint64_t tx_msgs, rx_msgs;
	/* TCP warm-ups (rails.c warmup), one connection at a time per rail
	 * (loop thread only): warm_busy the peer whose bytes are in flight (0:
	 * none), warm_q the peers waiting, in order */
	uint64_t warm_busy[R2_MAX_RAILS];
	uint64_t warm_q[R2_MAX_RAILS][R2_MAX_PEERS];
	int warm_head[R2_MAX_RAILS], warm_n[R2_MAX_RAILS];
	/* the run of warm-ups under way since the rail's queue was last empty:
	 * connections warmed (or given up), and when it began (logged at its end) */
	int warm_run[R2_MAX_RAILS];
	uint64_t warm_run_us[R2_MAX_RAILS];
	/* tcp_threads, tcp_streams: as set, or (0) by the cores, at start-up */
	int tcp_threads, tcp_streams;
	/* rail overlap (metrics): the keys of the communicators whose data went
	 * out or came in on each rail since the last r2d_rails_take_usage (any
	 * thread; a key past the slots counts in used_more) */
	_Atomic uint64_t used_by[R2_MAX_RAILS][R2_RAIL_USE_SLOTS];
	atomic_uint used_more[R2_MAX_RAILS];
};

/* The cluster key of cluster_key_file into key (at most 64 bytes: a longer
 * key is hashed, as HMAC would), *len its length. 0; -ENOENT (no file);
 * -EPERM (group or others may read or write it); -EINVAL (not a regular
 * file, shorter than 16 or longer than 4096 bytes); -errno. err says which,
 * for people. */
int r2d_cluster_key_load(const char *path, uint8_t key[64], uint32_t *len, char *err,
			 size_t errlen);
/* Configuration check (start-up, --check-config): with peer_auth = on, a
 * cluster key file that exists must load. 0 or <0 with err. */
int r2d_peer_auth_check(struct r2d *d, char *err, size_t errlen);
/* The rails' authentication (rails_start, net/peers.c): the cluster key
 * into cfg, or none (peer_auth = off), or refusing every peer (no key). */
struct r2_tp_config;
void r2d_rails_auth_setup(struct r2d *d, struct r2_tp_config *cfg);
int r2d_rails_start(struct r2d *d);
/* Tests: every selected NIC of d->topo is a rail on provider ops (the
 * loopback provider, transport/loopback.h), at the IPv4 address its topology
 * entry lists (nic->addr, a /24) rather than the NIC's own; otherwise as
 * r2d_rails_start. Several daemons of one process form a cluster this way. */
int r2d_rails_start_on(struct r2d *d, const struct r2_tp_ops *ops);
void r2d_rails_stop(struct r2d *d);
/* Joins the rails thread (before the loop closes its handles). */
void r2d_rails_quiesce(struct r2d *d);
/* Between r2d_rails_own_sends(true) and (false) (nested: the outermost
 * counts), a message this thread writes inline (tcp, a small message to an
 * idle stream) has its send completion taken on this thread at the scope's
 * end, instead of through the completion queue and the rails thread's
 * wake-up. The caller holds no lock at the end: the completion goes to the
 * engine (r2d_comm_deliver) as the rails thread would hand it. */
void r2d_rails_own_sends(bool on);
/* Sends a message on a rail to a peer daemon. */
int r2d_rails_send(struct r2d *d, int rail, uint64_t peer, const struct r2_chunk_hdr *hdr,
		   const void *buf, uint64_t ctx);
/* A copy of len bytes of buf that a transport sends with ctx 1: the rails
 * free it at its SEND completion, or at the stop (a provider's close()
 * drops queued sends without completions). NULL: no memory. */
void *r2d_rails_ctrl_copy(struct r2d *d, const void *buf, uint32_t len);
/* Frees such a copy that no transport took. */
void r2d_rails_ctrl_free(struct r2d *d, void *copy);
/* Sends a control message (protobuf-packed) to a peer on every connected rail
 * until one accepts it (no single NIC carries the control plane). */
int r2d_rails_send_ctrl(struct r2d *d, uint64_t peer, uint32_t type, const void *buf,
			uint32_t len);
/* Connects to a peer on the rail whose subnet holds addr (loop thread; under
 * d->lock for a peer not in the table yet, r2d_rails_make_room). A rail
 * already connected to it and not warmed up yet is warmed up now. */
int r2d_rails_connect(struct r2d *d, uint64_t peer, uint32_t ipv4, uint16_t port);
/* The entry of peer id; with create, a new one in a free entry when it has
 * none (NULL: the table is full, r2d_rails_make_room first). Loop thread. */
struct r2_peer *r2d_rails_peer(struct r2d *d, uint64_t id, bool create);
/* Makes sure the peer table has a free entry: when it is full, evicts a peer
 * no communicator needs (one with no connection first, else an idle
 * connected one, whose connections are dropped). 0, or -ENOSPC when every
 * peer is needed. Loop thread, under d->lock (it reads the communicators). */
int r2d_rails_make_room(struct r2d *d);
/* Whether a communicator here needs peer id (a member, or the root it
 * joins). Under d->lock. */
bool r2d_rails_peer_needed(struct r2d *d, uint64_t id);
/* Rail whose subnet holds ipv4 (network order), -1 if none. */
int r2d_rails_match(struct r2d *d, uint32_t ipv4);
void r2d_rails_release(struct r2d *d, int rail, void *buf);
/* Any thread: the peer entry (NULL if unknown). */
struct r2_peer *r2d_rails_peer_find(struct r2d *d, uint64_t id);
/* Whether a chunk posted on this rail may be sent from the working buffer
 * itself (TCP rails with tcp_zero_copy; verbs needs registered memory). */
bool r2d_rails_zero_copy(struct r2d *d, int rail);
/* Drops the rail's connection to a peer (its queued sends complete with an
 * error); health reconnects it. */
void r2d_rails_drop(struct r2d *d, int rail, uint64_t peer);
/* The communicator keys whose data used the rail since the last call (up to
 * max into keys; the count, plus keys that did not fit in the slots), and
 * starts a new interval (loop thread). */
int r2d_rails_take_usage(struct r2d *d, int rail, uint64_t *keys, int max);
/* The engine posts n data chunks again that the path (peer, rail) lost
 * with its connection (metrics; any thread). */
void r2d_rails_note_resend(struct r2d *d, int rail, uint64_t peer, uint32_t n);
/* Rails the engine should not use to this peer (health), any thread. */
uint32_t r2d_rails_bad(struct r2d *d, uint64_t peer);
/* May a data chunk queued for the peer on rail `from` go on rail `to`
 * instead (the tenants' scheduler, net/tenants.c)? Both rails of one
 * transport that sends from any host memory (tcp, loopback: a buffer
 * registered with one NIC would not do), `to` connected to the peer, and
 * both the rail and the path to the peer healthy there (not degraded: a
 * slower rail keeps the smaller share the planner gave it). Any thread. */
bool r2d_rails_movable(struct r2d *d, int from, int to, uint64_t peer);
/* Sends a control message to a peer on every healthy connected rail (at least
 * one attempt on any connected rail; with no rail connected to it, through
 * another connected peer, detour.h); 0 if at least one accepted it. */
int r2d_rails_send_ctrl_all(struct r2d *d, uint64_t peer, uint32_t type, const void *buf,
			    uint32_t len);

#endif
