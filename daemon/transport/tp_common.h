/* SPDX-License-Identifier: MIT */
/*
 * What every transport provider shares: the completion queue to the engine
 * (with its eventfd), the chunk header's wire byte order, the peer id hash,
 * the monotonic clock and the byte counters (rdma-core keeps such code once,
 * in util/). Private to daemon/transport/.
 */
#ifndef R2CCL_TP_COMMON_H
#define R2CCL_TP_COMMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport.h"

#define R2_TP_HDR_SIZE ((uint32_t)sizeof(struct r2_chunk_hdr))

/* The completion queue a provider hands to the engine (ops->poll,
 * ops->event_fd): a growable ring under a mutex; efd is readable while the
 * ring is not empty. */
struct r2_tp_cq {
	pthread_mutex_t lock;
	struct r2_tp_cqe *e;
	size_t cap, head, cnt;
	int efd;
	const char *name;                      /* the provider, for the one log line */
	void (*release)(void *arg, void *buf); /* gives back a dropped RECV's buffer */
	void *arg;
};

/* Creates the eventfd; name, release and arg as above. 0 or -errno. */
int r2_tp_cq_init(struct r2_tp_cq *q, const char *name, void (*release)(void *arg, void *buf),
		  void *arg);
/* Gives back the buffers of RECVs still queued and frees the ring and the
 * eventfd (no completions). Accepts a queue never initialised (efd 0 after
 * calloc is not closed: set efd to -1 before init can fail). */
void r2_tp_cq_destroy(struct r2_tp_cq *q);
/* Queues a completion and signals efd when the ring was empty. Out of
 * memory: the completion is dropped (logged once here; a RECV's buffer is
 * released so that nothing leaks). */
void r2_tp_cq_push(struct r2_tp_cq *q, const struct r2_tp_cqe *e);
/* A CONN or ERROR (or any completion without header or buffer). */
void r2_tp_cq_push_simple(struct r2_tp_cq *q, int type, int status, uint64_t peer,
			  struct r2_tp_conn *conn);

/* eventfd helpers (errors ignored: a full counter is still readable). */
void r2_tp_efd_signal(int fd);
void r2_tp_efd_drain(int fd);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t r2_tp_now_ns(void);

/* Converts a chunk header between host order and the wire's little-endian
 * order (the same swap both ways). */
void r2_tp_hdr_le(struct r2_chunk_hdr *h);

/* Bucket of a 64-bit id among n (a murmur-style mix). */
unsigned r2_tp_hash64(uint64_t v, unsigned n);

/* Bytes moved, for ops->stats (the throughput monitor). */
struct r2_tp_counters {
	_Atomic uint64_t tx_bytes, rx_bytes;
};

static inline void r2_tp_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* A peer connection's entry in its rail's peer table: the first member of
 * each provider's peer struct. All under the provider's lock (b.lock). */
struct r2_tp_peer {
	struct r2_tp_peer *hnext;        /* hash chain (while in_table) */
	struct r2_tp_peer *anext, *aprev; /* every live peer (until unlinked) */
	uint64_t id;                     /* the peer daemon's id */
	bool in_table, failed;
};

#define R2_TP_PEER_BUCKETS 256

struct r2_tp_peers {
	struct r2_tp_peer *bucket[R2_TP_PEER_BUCKETS];
	struct r2_tp_peer *all;          /* anext chain */
};

/* The entry of id (NULL: none; a failed peer stays findable until
 * unhashed). */
struct r2_tp_peer *r2_tp_peer_find(const struct r2_tp_peers *t, uint64_t id);
/* Hashes p under id and puts it first in the list of live peers. */
void r2_tp_peer_insert(struct r2_tp_peers *t, struct r2_tp_peer *p, uint64_t id);
/* Takes p out of the hash (a new connection of that id can be made). */
void r2_tp_peer_unhash(struct r2_tp_peers *t, struct r2_tp_peer *p);
/* Takes p out of the hash and off the list of live peers. */
void r2_tp_peer_unlink(struct r2_tp_peers *t, struct r2_tp_peer *p);

/* The first member of every provider's struct r2_tp (as rdma-core's
 * verbs_context starts each provider's context): what the operations below
 * serve for every provider. */
struct r2_tp_base {
	struct r2_tp_cq cmpl;       /* completions to the engine */
	struct r2_tp_counters ctr;  /* bytes moved */
	uint16_t port;              /* the port listened on (ops->listen_port) */
	pthread_mutex_t lock;       /* the provider's state lock: peers and more */
	bool lock_ok;               /* lock initialised */
	struct r2_tp_peers peers;
	/* The provider's failure of a peer connection (under lock): ERROR by
	 * tcp.c's rules when report, queued sends completed with status. */
	void (*peer_fail)(struct r2_tp *tp, struct r2_tp_peer *p, int status, bool report);
};

/* The start of every ops->open: checks the arguments, clears *out and
 * allocates size zeroed bytes into *tp. 0, -EINVAL or -ENOMEM. */
int r2_tp_alloc(const struct r2_tp_config *cfg, struct r2_tp **out, size_t size, struct r2_tp **tp);

/* The checks every post_send starts with: -EINVAL without a header or
 * with a payload length but no buffer, -EMSGSIZE past max_msg, else 0. */
int r2_tp_send_check(const struct r2_chunk_hdr *hdr, const void *buf, uint32_t max_msg);

/* ---- the peer port's hello (docs/security.md): shared by tcp and verbs ---- */

/* The HMAC key of cfg->auth (R2_TP_AUTH_KEY), and its length in *len;
 * *len is 0 otherwise (no proofs). */
const uint8_t *r2_tp_auth_key(const struct r2_tp_config *cfg, size_t *len);
/* The peer port's defaults for hellos, where the configuration says 0 (both
 * providers: tcp's streams and verbs' side channels) */
#define R2_TP_DEFAULT_HELLO_TIMEOUT_MS 3000u
#define R2_TP_DEFAULT_PREHELLO_MAX 256u
#define R2_TP_DEFAULT_PREHELLO_PER_ADDR 16u
/* Fills cfg's hello_timeout_ms, prehello_max and prehello_per_addr where 0;
 * each provider's open calls it once. */
void r2_tp_hello_defaults(struct r2_tp_config *cfg);
/* n fresh random bytes (a challenge) from getrandom (the kernel's pool is
 * ready once the daemon runs). 0 or -errno. */
int r2_tp_random(void *p, size_t n);
/* Why a hello was refused, for the log: -EACCES (a proof), -EPERM (no key
 * here), -EMSGSIZE, anything else (malformed, or not for this daemon). */
const char *r2_tp_refusal(int r);

struct sockaddr_in;
/* One connection from the listener lfd (non-blocking, close-on-exec), its
 * source in *ra: the fd, or -1 when there is nothing more to take now
 * (EAGAIN, or an error: said, rate-limited, naming what; after EMFILE and
 * the like a 10 ms pause, so that a full fd table does not make the caller
 * spin). */
int r2_tp_accept(int lfd, struct sockaddr_in *ra, const char *what);

/* Initialises b (completion queue as r2_tp_cq_init, lock, empty peer
 * table, the peer_fail hook). 0 or -errno; r2_tp_base_fini undoes it (also
 * after a failed init, when b was zeroed first). */
int r2_tp_base_init(struct r2_tp_base *b, const char *name, void (*release)(void *arg, void *buf),
		    void *arg,
		    void (*peer_fail)(struct r2_tp *tp, struct r2_tp_peer *p, int status, bool report));
void r2_tp_base_fini(struct r2_tp_base *b);

/* ops->listen_port, ops->poll, ops->event_fd, ops->stats and ops->disconnect of every
 * provider (disconnect: peer_fail(-ECONNABORTED, no ERROR); -ENOTCONN when
 * there is no live connection). */
int r2_tp_base_listen_port(struct r2_tp *tp, uint16_t *port);
int r2_tp_base_poll(struct r2_tp *tp, struct r2_tp_cqe *out, int max);
int r2_tp_base_event_fd(struct r2_tp *tp);
int r2_tp_base_stats(struct r2_tp *tp, uint64_t *tx_bytes, uint64_t *rx_bytes);
int r2_tp_base_disconnect(struct r2_tp *tp, uint64_t peer_id);

#endif
