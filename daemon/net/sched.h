/* SPDX-License-Identifier: MIT */
/*
 * The tenants' scheduler of the rails' send path: who sends the next chunk.
 *
 * A tenant (docs/tenancy.md) is an entry of the tenant table: a policy of
 * the configuration's [tenants] section (a name, a cgroup v2 path prefix,
 * weight, rate, class, quotas), or a tenant made for a cgroup no entry
 * matches (the "default" entry's policy, its own queue). Every data chunk
 * of the rail phase belongs to the tenant of its communicator.
 *
 * Per rail, each tenant has a FIFO of chunks. r2_sched_next() picks the
 * next chunk of a rail:
 *  1. latency-class tenants first (strict priority), except that after
 *     `prio_run` bytes of latency chunks in a row while bulk chunks waited,
 *     one bulk chunk goes (bulk is never starved);
 *  2. within a class, fair queueing by bytes across the host's rails: each
 *     tenant has a virtual time, its bytes sent on every rail divided by
 *     its weight, and each rail sends the chunk of the tenant furthest
 *     behind (the least virtual time; ties in round-robin order). Shares
 *     follow the weights per rail when the tenants queue alike on every
 *     rail, and over the rails together when they do not: a tenant with no
 *     chunk for one rail gets more of the others. A tenant that had nothing
 *     queued starts level with those that did (no credit for idle time),
 *     and one that falls further behind (its peer's window full) catches
 *     up at most 16 x quantum bytes per unit of weight. A chunk is queued
 *     on the rail its plan gave it, but where may_move allows, a rail
 *     whose queues hold no chunk of the tenant furthest behind takes that
 *     tenant's chunk from another rail's queue: a tenant whose chunks for
 *     one rail ran out (its step's share of that rail already sent) keeps
 *     its share on the others' bytes, and a rail with nothing queued takes
 *     work from a busy one;
 *  3. a tenant with a rate (bits/s, per host: one token bucket shared by the
 *     rails) sends a chunk only when its bucket holds the chunk's bytes; the
 *     bucket holds at most max(burst, the chunk), burst = 2% of one second's
 *     bytes unless set, so in any window T it sends at most rate*T + burst
 *     (a chunk larger than burst: rate*T + chunk).
 * Chunks not eligible (throttled) stay queued; r2_sched_next_wake() says when
 * the first becomes eligible.
 *
 * Pure code: no I/O, no locks, no clock (every call takes `now_us`); the
 * caller (net/rails.c) serializes the calls. Items are the caller's (an
 * embedded struct r2_sched_item), never allocated here.
 */
#ifndef R2CCL_SCHED_H
#define R2CCL_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define R2_SCHED_MAX_RAILS 32
#define R2_SCHED_MAX_TENANTS 64 /* the last one, "_other", takes the rest */
#define R2_SCHED_NAME 64
#define R2_SCHED_CGROUP 256

enum r2_tclass { R2_TCLASS_BULK = 0, R2_TCLASS_LATENCY = 1 };

/* A tenant's policy: from the configuration, r2cclctl tenants set, or the
 * default entry for a cgroup no entry matches. */
struct r2_tenant_policy {
	char name[R2_SCHED_NAME];
	char cgroup[R2_SCHED_CGROUP]; /* path prefix ("/a/b" matches "/a/b" and "/a/b/..."); "" none */
	uint32_t weight;              /* 1..10000: the share under contention */
	uint64_t rate_bps;            /* bits/s per host, 0: no cap */
	uint64_t burst_bytes;         /* 0: 2% of one second's bytes at rate_bps */
	enum r2_tclass cls;
	/* quotas (docs/security.md's per-uid caps, per tenant); 0: the per-uid cap */
	uint32_t max_sessions, max_comms, max_regs;
	uint64_t max_mem;
	/* and the tenant's own, all its sessions and communicators on the host
	 * together: control requests per second (paced, not refused),
	 * operations submitted and not completed, proxy buffer bytes its chunks
	 * hold (0: none) */
	uint32_t max_req_rate, max_pending_ops;
	uint64_t max_proxy;
};

/* A queued chunk: embedded in the caller's record. */
struct r2_sched_item {
	struct r2_sched_item *next;
	uint32_t len;    /* bytes (the chunk's payload) */
	uint16_t tenant; /* index in the tenant table */
	uint64_t enq_us;
};

struct r2_sched_tenant {
	struct r2_tenant_policy pol;
	bool used;
	bool dynamic;             /* made for a cgroup no entry matched */
	uint64_t limit_bps;       /* the tenant's own cap (r2ccl_set_bandwidth_limit), 0: none */
	uint64_t reserve_bps;     /* its reserved minimum (the same call), 0: none */
	uint64_t reserve_asked;   /* what the call asked: reserve_bps is it cut to
				   * the cap and the weight share, again each
				   * time the table or the capacity changes */
	/* token buckets: the cap (rate), the reservation */
	double tokens, rtokens;
	uint64_t tb_us;
	/* counters */
	uint64_t bytes, chunks;   /* sent (handed to the transports) */
	uint64_t ops;             /* operations completed (r2_sched_note_op) */
	uint32_t queued;          /* chunks waiting, all rails */
	uint64_t queued_bytes;
	uint64_t throttled_us;    /* time with chunks waiting on its bucket */
	uint64_t throttled_since; /* 0: not throttled now */
	uint64_t max_wait_us;     /* longest a chunk waited in its queue */
	double vtime;             /* fair queueing: bytes sent / weight (r2_sched_next) */
};

struct r2_sched_q {
	struct r2_sched_item *head, **tail;
	bool active; /* in its rail's ring */
	uint16_t next_active;
};

struct r2_sched_rail {
	struct r2_sched_q q[R2_SCHED_MAX_TENANTS];
	/* round-robin rings per class: tenant indices, cur first */
	uint16_t ring[2][R2_SCHED_MAX_TENANTS];
	int nring[2], cur[2];
	uint64_t lat_run;      /* latency bytes in a row while bulk waited */
	uint32_t queued;
};

struct r2_sched {
	bool enabled;          /* off: FIFO over all tenants (sched = 0) */
	uint32_t quantum;      /* fair queueing's grain: the catch-up bound is 16 quanta */
	uint64_t prio_run;     /* latency bytes before a waiting bulk chunk goes */
	double vlast[2];       /* per class: the virtual time of the last chunk sent */
	int ntenants;
	uint64_t capacity_bps; /* the rails' (last r2_sched_set_limit; 0: unknown) */
	struct r2_sched_tenant t[R2_SCHED_MAX_TENANTS];
	struct r2_sched_rail rail[R2_SCHED_MAX_RAILS];
	/* scheduler off: one FIFO per rail */
	struct r2_sched_item *fifo_head[R2_SCHED_MAX_RAILS], **fifo_tail[R2_SCHED_MAX_RAILS];
	/* may the item go now? (NULL: always) A tenant whose head item may not
	 * is passed over like a throttled one (net/tenants.c: its peer's window
	 * on the rail is full) */
	bool (*may_send)(const struct r2_sched_item *it, void *arg);
	void *may_send_arg;
	/* may the item, queued on another rail, go on rail `to` instead? (NULL:
	 * never; net/tenants.c: the same peer, reachable and healthy there, a
	 * transport that sends from any memory, its window open). With it a
	 * rail whose own queues hold nothing owed takes the chunk of the tenant
	 * furthest behind from another rail's queue (see 2. above); its arg
	 * is may_send_arg */
	bool (*may_move)(const struct r2_sched_item *it, int to, void *arg);
};

/* Defaults of a policy (weight 1, bulk, no cap, quotas 0). */
void r2_tenant_policy_default(struct r2_tenant_policy *p, const char *name);
/* "weight=3 rate=2G class=latency max_comms=8 ...": the keys given are set
 * in p; -EINVAL with a message for anything else. Rates take K, M, G, T
 * (decimal, bits/s: 300M = 300,000,000 bit/s); max_mem takes K, M, G, T
 * (binary bytes). */
int r2_tenant_policy_parse(struct r2_tenant_policy *p, const char *spec, char *err,
			   size_t errlen);
/* One line "name cgroup weight=.. rate=.. class=.." (the configuration's
 * syntax, docs/tenancy.md). */
int r2_tenant_policy_format(const struct r2_tenant_policy *p, char *buf, size_t len);
const char *r2_tclass_name(enum r2_tclass c);

/* Starts empty and enabled: entry 0 is "default" (the policy given to the
 * cgroups no entry matches; its own queues carry chunks of no tenant, such
 * as those a bridge relays). enabled = false: one FIFO per rail, a model of
 * the scheduler off for the tests (the daemon's sched = 0 bypasses the
 * queues instead, net/tenants.c). */
void r2_sched_init(struct r2_sched *s, uint32_t quantum, uint64_t prio_run);
/* Adds or replaces the entry named p->name (its counters and queues kept);
 * "default" also sets the policy of the tenants made for unmatched cgroups.
 * Returns its index, -ENOSPC when the table is full. */
int r2_sched_policy_set(struct r2_sched *s, const struct r2_tenant_policy *p, uint64_t now_us);
/* The index of the tenant named name, -ENOENT. */
int r2_sched_find(const struct r2_sched *s, const char *name);
/* The tenant of a cgroup path: the entry with the longest matching prefix;
 * none: a tenant of its own (named by the path, the default entry's policy),
 * made on first use; the table full: the last entry ("_other"). */
int r2_sched_tenant_of(struct r2_sched *s, const char *cgroup, uint64_t now_us);
/* The same without making one: -ENOENT when no tenant has it yet. */
int r2_sched_tenant_find(const struct r2_sched *s, const char *cgroup);
/* The tenant's own cap and reservation (bits/s, 0: none). The cap is
 * clamped to the policy's rate, the reservation to the (clamped) cap and,
 * when capacity_bps (the host's rails, bits/s) is known, to the tenant's
 * weight share of it among the tenants of the table. */
void r2_sched_set_limit(struct r2_sched *s, int t, uint64_t limit_bps, uint64_t reserve_bps,
			uint64_t capacity_bps, uint64_t now_us);
/* The rate in force: min(policy rate, own cap), 0 none. */
uint64_t r2_sched_rate(const struct r2_sched *s, int t);
uint64_t r2_sched_burst(const struct r2_sched *s, int t);

void r2_sched_enqueue(struct r2_sched *s, int rail, struct r2_sched_item *it, uint64_t now_us);
/* The next chunk of the rail (dequeued; its tenant's bucket charged), or
 * NULL: nothing queued, or every queued chunk waits for tokens or may not
 * go (may_send). The chunk may come from another rail's queue (may_move):
 * the caller sends it on this rail. */
struct r2_sched_item *r2_sched_next(struct r2_sched *s, int rail, uint64_t now_us);
/* A chunk r2_sched_next gave that the transport could not take: back at
 * the head of its queue, its bytes given back to its bucket and deficit. */
void r2_sched_requeue(struct r2_sched *s, int rail, struct r2_sched_item *it);
/* Removes every queued item for which drop(it, arg) is true (a connection
 * dropped), calling it for each (drop may free an item it says true for);
 * returns how many. */
int r2_sched_remove(struct r2_sched *s, int rail,
		    bool (*drop)(struct r2_sched_item *it, void *arg), void *arg);
/* When (us) a chunk throttled by its bucket becomes eligible; UINT64_MAX
 * if none waits for tokens. */
uint64_t r2_sched_next_wake(struct r2_sched *s, uint64_t now_us);
uint32_t r2_sched_queued(const struct r2_sched *s, int rail);

#endif
