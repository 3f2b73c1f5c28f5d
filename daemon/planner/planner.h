/* SPDX-License-Identifier: MIT */
/*
 * The planner (BRIEF.md decision 8): pure code, no I/O, no threads, no
 * logging. Input: a cluster (hosts x rails, one NIC per host per rail, with
 * state and bandwidth), an operation and its size. Output: a compact plan
 * (struct r2_plan) with its predicted time, the lower bound for that cluster
 * and operation, and gap = time / bound. The engine executes a plan by asking
 * r2_plan_expand() for the transfers of its host at each step.
 *
 * Network model: rail r is one non-blocking switch; host h reaches host g on
 * rail r through NIC (h, r) and NIC (g, r), both usable (not DOWN) and the
 * pair's link on that rail not listed as failed. A NIC has a bandwidth per
 * direction (bytes/s); sends and receives proceed at the same time.
 *
 * Execution contract (see docs/planner.md for figures):
 *  - Steps 0 .. nsteps-1. In step k a host posts every transfer that
 *    r2_plan_expand(plan, host, k) lists. A send reads the value its host had
 *    at the start of step k; a receive writes dst[off, off+len) with
 *    R2_XFER_COPY (dst = src) or R2_XFER_REDUCE (dst = op(dst, src)). A host
 *    may start step k+1 once all of its step-k transfers are complete.
 *  - The planner guarantees that within one step no host sends bytes it also
 *    receives into, and that a COPY receive overlaps no other receive. Several
 *    REDUCE receives may target the same bytes in one step (direct
 *    reduce-scatter, tree reduce): the engine applies them one at a time
 *    (exec_rail_apply.c waits for an overlapping one on the apply queue), in
 *    the order they arrive, not the order listed: a float sum's rounding may
 *    differ from run to run, while every host gets the same bits (the bytes
 *    are reduced at one host and copied to the others).
 *  - A bridge hop is one transfer relayed inside one step: the sender's entry
 *    has via = bridge host, rail = first-hop rail, rail2 = second-hop rail;
 *    the receiver's entry has via = bridge, rail = second-hop rail, rail2 =
 *    first-hop rail; the bridge host gets an R2_XFER_RELAY entry (peer =
 *    source, dst = destination, rail = in, rail2 = out) and forwards the
 *    bytes through a staging buffer without reducing or writing its own
 *    working buffer. off/len are offsets in the source's and destination's
 *    working buffers (which use the same layout).
 *  - Working buffer per host: allreduce/reducescatter/reduce: the full input
 *    (size bytes), result in place (reducescatter: host i's result is its
 *    segment [i*size/n, (i+1)*size/n)); allgather: the full output (size
 *    bytes), host i's segment valid at start; broadcast: full buffer, valid
 *    at the root at start; sendrecv: size bytes, root = sender, peer =
 *    receiver. For allgather/reducescatter size must be a multiple of
 *    nhosts * elem; elsewhere a multiple of elem.
 */
#ifndef R2CCL_PLANNER_H
#define R2CCL_PLANNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define R2_PLAN_MAX_RAILS 16
#define R2_NO_HOST UINT32_MAX
#define R2_RECURSION_THRESH_DEFAULT 0.3 /* R2CCL_RECURSION_THRESH */

enum r2_nic_state { R2_NIC_UP = 0, R2_NIC_DEGRADED = 1, R2_NIC_DOWN = 2 };

struct r2_nic {
	uint8_t state;      /* enum r2_nic_state; DOWN means bandwidth 0 */
	double bw_tx;       /* bytes/s, measured or nominal */
	double bw_rx;
	double lat;         /* s, added to alpha for each message on this NIC */
};

/* A failed host pair on one rail (both NICs up, the path between them not):
 * the case "link A-B fails" that local ring repair handles with a bridge. */
struct r2_link {
	uint32_t a, b;      /* a < b */
	uint16_t rail;
};

/* Cost model: one step costs, on each NIC, msgs * (alpha + lat) +
 * bytes / bw, the step takes the maximum over NICs plus gamma * depth. */
struct r2_cost {
	double alpha;       /* s per message */
	double gamma;       /* s per depth level per step */
};

struct r2_cluster {
	uint32_t nhosts, nrails;
	struct r2_nic *nic;             /* [h * nrails + r] */
	const uint8_t *pcie_dist;       /* optional [h * nrails + r]: PCIe hops from
	                                 * the host's GPUs to NIC r (bridge choice) */
	const struct r2_link *down;     /* sorted by (a, b, rail); may be NULL */
	uint32_t ndown;
	struct r2_cost cost;
};

enum r2_plan_op {
	R2_PLAN_ALLREDUCE = 0, R2_PLAN_ALLGATHER, R2_PLAN_REDUCESCATTER,
	R2_PLAN_BROADCAST, R2_PLAN_REDUCE, R2_PLAN_SENDRECV, R2_PLAN_COUNT
};

/* Policies. The daemon's mode "balance" (default) is R2_POL_OURS, mode
 * "hotrepair" is R2_POL_HOTREPAIR; the others exist for r2ccl-sim. */
enum r2_policy {
	R2_POL_OURS = 0,   /* best schedule by the cost model (failure-optimized) */
	R2_POL_PLAIN,      /* equal shares per rail, no failover (hangs on DOWN) */
	R2_POL_HOTREPAIR,  /* failed NIC's traffic to a backup NIC, equal shares */
	R2_POL_BALANCE,    /* shares per rail proportional to ring bottleneck */
	R2_POL_R2CCL,      /* recursive dual-ring (seed / R2CCL failure-optimized) */
	R2_POL_COUNT
};

enum r2_mode { R2_MODE_BALANCE = 0, R2_MODE_HOTREPAIR = 1 };

enum r2_algo {
	R2_ALGO_RING = 0,  /* rings over rails, one stripe per rail */
	R2_ALGO_RECURSIVE, /* recursive dual-ring: levels of sub-rings + leaves */
	R2_ALGO_SHARD,     /* direct RS+AG, unequal shard ownership, pipelined */
	R2_ALGO_CHAIN,     /* pipelined chain (broadcast/reduce) */
	R2_ALGO_TREE,      /* pipelined binary tree (broadcast/reduce) */
	R2_ALGO_DIRECT,    /* point to point (sendrecv) */
	R2_ALGO_HD,        /* log-step: mixed-radix recursive halving/doubling */
	R2_ALGO_RD,        /* log-step: mixed-radix recursive doubling (allreduce,
	                    * the owned range each step, after nhalf halving
	                    * levels; receives overlap the step's own sends: see
	                    * docs/planner.md "Execution contract") */
	R2_ALGO_BRUCK,     /* log-step for any n: Bruck's all-gather (radix k + 1),
	                    * its mirror reduce-scatter, both for allreduce */
	R2_ALGO_COUNT
};

/* R2CCL_ROUTING_ALGO: how broadcast/reduce pick a shape. */
enum r2_routing {
	R2_ROUTE_AUTO = 0,    /* cheapest by the cost model */
	R2_ROUTE_RING = 1,    /* chain */
	R2_ROUTE_TREE = 2,    /* binary tree, host order */
	R2_ROUTE_STEINER = 3, /* tree whose interior avoids degraded hosts (default;
	                       * still compared with the chain by cost) */
};

struct r2_plan_params {
	double recursion_thresh;  /* R2CCL_RECURSION_THRESH, default 0.3 */
	int routing_algo;         /* R2CCL_ROUTING_ALGO, enum r2_routing, default 3 */
	uint32_t max_chunks;      /* pipeline depth cap, default 64 */
	uint64_t min_chunk;       /* bytes, smallest pipelined chunk, default 4096 */
	bool no_logstep;          /* leave the log-step (HD) schedules out of the
	                           * choice (r2ccl-sim: "today's plans"), default false */
	bool no_rd;               /* leave recursive doubling (R2_ALGO_RD, the
	                           * contract's exception) out, default false */
	double logstep_margin;    /* a log-step plan must be cheaper than the best
	                           * other by this fraction, default 0 */
	bool logstep_healthy;     /* log-step plans only on a healthy cluster,
	                           * default false */
	uint32_t logstep_max_hosts; /* log-step plans with logstep_margin up to
	                           * this many hosts, default 0 (any) */
	double logstep_far_margin; /* beyond logstep_max_hosts, with this margin
	                           * instead, default 1 (none there) */
	bool bruck_only;          /* of the log-step schedules, Bruck's alone (any
	                           * n; R2CCL_LOGSTEP=bruck), default false */
	bool rd_pairs;            /* recursive doubling only with pairs (radix 2)
	                           * in its doubling levels, where every member
	                           * adds its own f - 1 values in its own order
	                           * (a + b == b + a: every host gets the same
	                           * bits), default false */
};

struct r2_opdesc {
	enum r2_plan_op op;
	uint64_t size;      /* bytes of the working buffer (see above) */
	uint32_t elem;      /* element size: every offset/length is a multiple */
	uint32_t root;      /* broadcast/reduce root; sendrecv sender */
	uint32_t peer;      /* sendrecv receiver */
	enum r2_policy policy;
};

enum r2_xfer_dir { R2_XFER_SEND = 0, R2_XFER_RECV = 1, R2_XFER_RELAY = 2 };
enum r2_xfer_kind { R2_XFER_COPY = 0, R2_XFER_REDUCE = 1 };

struct r2_xfer {
	uint32_t peer;      /* other end; RELAY: the source */
	uint32_t via;       /* bridge host or R2_NO_HOST; RELAY: the destination */
	uint16_t rail;      /* rail of this host's NIC (RELAY: incoming) */
	uint16_t rail2;     /* other hop's rail if bridged (RELAY: outgoing) */
	uint8_t dir;        /* enum r2_xfer_dir */
	uint8_t kind;       /* enum r2_xfer_kind, applied by the receiver */
	uint64_t off, len;  /* bytes in the working buffer */
};

/* ---- plan (compact) ---------------------------------------------------- */

/* One schedule on a byte range. */
struct r2_comp {
	uint8_t algo;       /* enum r2_algo */
	uint8_t level;      /* recursion level (0 = global ring) */
	uint16_t lrail;     /* logical rail of rings/chains/trees */
	uint16_t nchunks;   /* pipeline depth K (chain/tree/shard) */
	uint8_t nhalf;      /* RD: levels 0 .. nhalf-1 halve (reduce-scatter
	                     * before, all-gather after), the rest double */
	uint32_t step0;     /* first step of the ring/pipeline proper */
	uint32_t nsteps;    /* steps used, inject/extract included */
	uint32_t nmem, mem; /* members: plan->hosts[mem .. mem+nmem) in order;
	                     * mem == UINT32_MAX: all hosts ascending */
	uint32_t nleaf, leaf; /* recursive: hosts outside the ring (inject/extract) */
	uint64_t off, len;  /* range; allgather/reducescatter: sub-range of every
	                     * host's segment, relative to the segment start
	                     * (HD: the whole buffer) */
	uint32_t fac;       /* HD: radices plan->hosts[fac .. fac+level); lrail =
	                     * rail variant (0 split by bandwidth, 1 one rail per
	                     * peer); leaf/nleaf = the folded extra hosts.
	                     * Bruck: radix plan->hosts[fac], level = its levels */
};

/* A host class: hosts with the same rail states and bandwidths. */
struct r2_hclass {
	uint32_t count;
	uint16_t mask;      /* usable rails */
	uint8_t remap[R2_PLAN_MAX_RAILS]; /* HotRepair: rail used for logical rail r */
	double bw[R2_PLAN_MAX_RAILS];     /* min(tx, rx) of usable NICs, 0 otherwise */
	double lambda[R2_PLAN_MAX_RAILS]; /* shard plan: rail split scaling */
	uint64_t shard;     /* shard plan: bytes owned by each host of the class */
};

struct r2_hcx { uint32_t host, cls; };

/* A route that is not "direct on the logical rail". lrail == 0xffff: the
 * pair's route for shard/direct plans (only bridged pairs are listed). */
struct r2_route {
	uint32_t a, b;
	uint16_t lrail;
	uint16_t rail, rail2; /* first hop (a side) and second hop (b side) */
	uint32_t via;         /* bridge or R2_NO_HOST */
};

struct r2_plan {
	enum r2_plan_op op;
	enum r2_policy policy;
	enum r2_algo algo;
	uint32_t nhosts, nrails, elem, root, peer;
	uint64_t size;
	uint32_t nsteps;
	uint16_t nchunks;   /* K of the main component */
	uint16_t depth;     /* recursion levels - 1, + 1 if any bridge */
	double time;        /* predicted (s), cost model, step by step */
	double bound;       /* lower bound (s): max(bandwidth bound, alpha*ceil(log2 n)) */
	double gap;         /* time / bound (>= 1 up to rounding) */
	double edges_kept;  /* rings: fraction of ring edges unchanged (direct, own rail) */
	uint32_t nbridged;  /* ring edges or pairs that go through a bridge host */
	uint32_t nremapped; /* ring edges moved to another rail (HotRepair) */
	struct r2_cost cost;
	uint32_t ncomp;
	struct r2_comp *comp;
	uint32_t nhostlist;
	uint32_t *hosts;
	uint32_t nclass;
	struct r2_hclass *cls;
	uint32_t nhcx;      /* hosts not in class 0, sorted by host */
	struct r2_hcx *hcx;
	uint32_t nroute;    /* sorted by (a, b, lrail) */
	struct r2_route *route;
	uint32_t ndown;
	struct r2_link *down;
	uint32_t rem_host;  /* shard plan: host that owns the rounding remainder */
	uint64_t rem_bytes;
	size_t bytes;       /* memory held by this plan (one allocation) */
};

/* ---- API ---------------------------------------------------------------- */

void r2_plan_params_default(struct r2_plan_params *p);

/* Builds a plan. Returns 0 and *out (free with r2_plan_free), or -EINVAL
 * (bad description), -ENETUNREACH (a host has no usable NIC or a pair cannot
 * be connected even through a bridge), -EHOSTDOWN (policy PLAIN with a NIC
 * down: the plain ring cannot run), -ENOMEM. */
int r2_plan_build(const struct r2_cluster *c, const struct r2_opdesc *op,
		  const struct r2_plan_params *prm, struct r2_plan **out);
void r2_plan_free(struct r2_plan *p);

/* Transfers of host h in step k. Returns the count (<= r2_plan_max_xfers),
 * or -ENOSPC if max is too small, -EINVAL for a bad host/step. */
int r2_plan_expand(const struct r2_plan *p, uint32_t h, uint32_t k,
		   struct r2_xfer *out, size_t max);
size_t r2_plan_max_xfers(const struct r2_plan *p);

/* Step-by-step cost of the expanded plan (O(nhosts * nsteps * xfers): for
 * tests and r2ccl-sim at small sizes; r2_plan_build predicts analytically). */
double r2_plan_eval(const struct r2_plan *p, const struct r2_cluster *c);

/* Lower bound (s) for an operation on a cluster (docs/planner.md): the larger
 * of alpha + the bandwidth bound W (host level cuts) and alpha * rounds,
 * rounds = ceil(log_{P+1} n) with P the most usable NICs of a host. */
double r2_bound(const struct r2_cluster *c, const struct r2_opdesc *op);
/* The same, and W alone in *bw (if not NULL). */
double r2_bound_terms(const struct r2_cluster *c, const struct r2_opdesc *op, double *bw);
double r2_bound_rounds(const struct r2_cluster *c, const struct r2_opdesc *op);

/* busbw as nccl-tests defines it (bytes/s) for time t. */
double r2_busbw(enum r2_plan_op op, uint32_t n, uint64_t size, double t);

const char *r2_op_name(enum r2_plan_op op);
const char *r2_policy_name(enum r2_policy p);
const char *r2_algo_name(enum r2_algo a);
int r2_op_parse(const char *s, enum r2_plan_op *op);
int r2_policy_parse(const char *s, enum r2_policy *p);
enum r2_policy r2_mode_policy(enum r2_mode m);

/* Calibration: least-squares fit of T = alpha + beta*size + gamma*depth
 * over n samples. Returns 0, or -EINVAL if the system is singular (then
 * gamma is fixed at 0 and alpha/beta are fitted if possible) / n < 2.
 * rms gets the residual RMS (s) if not NULL. */
struct r2_sample { double size, depth, time; };
int r2_cost_fit(const struct r2_sample *s, size_t n, double *alpha,
		double *beta, double *gamma, double *rms);

/* Precomputed plans for every single-NIC failure (h, r). */
struct r2_plan_table {
	uint32_t nhosts, nrails;
	struct r2_plan **plan;  /* [h * nrails + r], NULL if unplannable */
	size_t bytes;           /* total memory of the table and its plans */
};
int r2_plan_table_build(const struct r2_cluster *c, const struct r2_opdesc *op,
			const struct r2_plan_params *prm, struct r2_plan_table *t);
const struct r2_plan *r2_plan_table_lookup(const struct r2_plan_table *t,
					   uint32_t host, uint32_t rail);
void r2_plan_table_free(struct r2_plan_table *t);

/* Host class of h in a plan (for the engine and tests). */
uint32_t r2_plan_class(const struct r2_plan *p, uint32_t h);

#endif
