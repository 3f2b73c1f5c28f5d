/* SPDX-License-Identifier: MIT */
/* Planner internals shared by the plan*.c files, shard.c, expand.c and model.c. */
#ifndef R2CCL_PLANNER_INT_H
#define R2CCL_PLANNER_INT_H

#include "planner.h"

#define R2_LRAIL_PAIR 0xffffu
#define R2_ALL_HOSTS UINT32_MAX

struct r2_hop {
	uint16_t rail, rail2;
	uint32_t via;
};

/* Read-only view used by both the builder and the expansion. */
struct r2_view {
	uint32_t n, R, elem;
	enum r2_plan_op op;
	uint64_t size;
	const struct r2_comp *comp;
	uint32_t ncomp;
	const uint32_t *hosts;
	const struct r2_hclass *cls;
	const struct r2_hcx *hcx;
	uint32_t nhcx;
	const struct r2_route *route;
	uint32_t nroute;
	const struct r2_link *down;
	uint32_t ndown;
	uint32_t rem_host;
	uint64_t rem_bytes;
};

void r2_view_of_plan(const struct r2_plan *p, struct r2_view *v);

static inline uint64_t r2_split_lo(uint64_t E, uint64_t k, uint64_t parts)
{
	return (uint64_t)(((unsigned __int128)E * k) / parts);
}

/* Element-aligned sub-range k of parts of [off, off+len). */
static inline void r2_sub_range(uint64_t off, uint64_t len, uint32_t elem, uint64_t k,
				uint64_t parts, uint64_t *o, uint64_t *l)
{
	uint64_t E = len / elem;
	uint64_t a = r2_split_lo(E, k, parts), b = r2_split_lo(E, k + 1, parts);
	*o = off + a * elem;
	*l = (b - a) * elem;
}

uint32_t r2_view_class(const struct r2_view *v, uint32_t h);
bool r2_view_route(const struct r2_view *v, uint32_t a, uint32_t b, uint16_t lrail,
		   struct r2_hop *hop);
bool r2_link_is_down(const struct r2_link *d, uint32_t nd, uint32_t a, uint32_t b,
		     uint16_t rail);
uint16_t r2_pair_down_mask(const struct r2_link *d, uint32_t nd, uint32_t a, uint32_t b);

/* Position of h in comp's members, or UINT32_MAX. */
uint32_t r2_comp_pos(const struct r2_view *v, const struct r2_comp *c, uint32_t h);
uint32_t r2_comp_member(const struct r2_view *v, const struct r2_comp *c, uint32_t pos);
/* Ring piece t of m (allreduce: contiguous split; AG/RS: member t's segment). */
void r2_ring_piece(const struct r2_view *v, const struct r2_comp *c, uint32_t t,
		   uint64_t *off, uint64_t *len);
uint32_t r2_tree_depth(uint32_t idx);

/* Shard plan: bytes owned by host j, and the rail split of pair (i, j):
 * frac[r] sums to 1 over usable common rails; returns false (no rail) if
 * the pair must be bridged. */
uint64_t r2_shard_of(const struct r2_view *v, uint32_t j);
bool r2_pair_split(const struct r2_view *v, uint32_t i, uint32_t j, double frac[]);
/* Splits len bytes (element aligned) over rails by frac; lens[r]. */
void r2_split_bytes(uint64_t len, uint32_t elem, uint32_t R, const double frac[],
		    uint64_t lens[]);

/* Log-step reduce-scatter / all-gather (hd.c). */
#define R2_HD_MAX_LEVELS 32
#define R2_HD_MAX_FAN 64   /* largest radix the builder uses */
struct r2_hd_geo {
	uint32_t L, m, s0;
	bool rd;   /* recursive doubling (R2_ALGO_RD): levels >= nh exchange the owned range */
	uint32_t nh; /* RD: halving levels before (and their all-gather after) */
	uint32_t f[R2_HD_MAX_LEVELS], stride[R2_HD_MAX_LEVELS], w[R2_HD_MAX_LEVELS];
};
/* One message of a host in one step; slot: the sender's offset - 1 within
 * its group (rail of variant 1), 0xffff for the fold of an extra host. A
 * Bruck block that wraps past the last piece has a second range: its bytes
 * are [off, off+len) then [off2, off2+len2). */
struct r2_hd_msg {
	uint32_t peer;
	bool send;
	uint8_t kind;
	uint16_t slot, nslot; /* nslot: f - 1 of the step (0: fold) */
	uint64_t off, len;
	uint64_t off2, len2;
};
/* A message's transfers: lens (r2_hd_rails over len + len2) laid over its
 * bytes in order, rail by rail; a rail whose share crosses from the first
 * range to the second has two. aligned (a Bruck comp's lrail bit 1): the
 * two ranges on disjoint rails instead (one transfer a rail, the bytes
 * split by whole rails), where the message has two rails. Returns the count
 * (at most R + 1). */
struct r2_hd_part { uint16_t rail; uint64_t off, len; };
size_t r2_hd_parts(const struct r2_hd_msg *m, const uint64_t lens[], uint32_t R, uint32_t elem,
		   bool aligned, struct r2_hd_part out[]);
void r2_hd_geo(const struct r2_view *v, const struct r2_comp *c, struct r2_hd_geo *g);
uint32_t r2_hd_host(const struct r2_view *v, const struct r2_comp *c, const struct r2_hd_geo *g,
		    uint32_t p);
size_t r2_hd_msgs(const struct r2_view *v, const struct r2_comp *c, const struct r2_hd_geo *g,
		  uint32_t h, int64_t j, struct r2_hd_msg *out, size_t max);
/* Position of h: member index, UINT32_MAX - 1 - i for extra i, UINT32_MAX
 * outside; r2_hd_msgs_at takes it precomputed (member lists are searched). */
uint32_t r2_hd_pos(const struct r2_view *v, const struct r2_comp *c, const struct r2_hd_geo *g,
		   uint32_t h);
size_t r2_hd_msgs_at(const struct r2_view *v, const struct r2_comp *c, const struct r2_hd_geo *g,
		     uint32_t h, uint32_t p, int64_t j, struct r2_hd_msg *out, size_t max);
/* Bytes per rail of a message a -> b (false: the pair shares no rail). */
bool r2_hd_rails(const struct r2_view *v, const struct r2_comp *c, uint32_t a, uint32_t b,
		 uint16_t slot, uint16_t nslot, uint64_t len, uint64_t lens[]);
uint32_t r2_hd_nsteps(enum r2_plan_op op, const struct r2_comp *c);
size_t r2_hd_max_msgs(const struct r2_view *v, const struct r2_comp *c);

/* Bruck's log-step schedule for any n (bruck.c): levels ceil(log_r n), steps
 * of the comp, the most messages of a host in a step, and host h's messages
 * in step j (the same records as HD's; r2_hd_rails splits them). */
uint32_t r2_bruck_levels(uint32_t n, uint32_t r);
uint32_t r2_bruck_nsteps(enum r2_plan_op op, const struct r2_comp *c);
size_t r2_bruck_max_msgs(const struct r2_view *v, const struct r2_comp *c);
size_t r2_bruck_msgs(const struct r2_view *v, const struct r2_comp *c, uint32_t h, int64_t j,
		     struct r2_hd_msg *out, size_t max);

/* An HD plan with the given radices, members and rail variant (0 or 1; |
 * R2_HD_RD: recursive doubling instead, allreduce only, | R2_HD_NHALF(h):
 * its first h < L levels halving), whatever its cost (tests, r2ccl-sim). */
#define R2_HD_RD 2
#define R2_HD_NHALF(h) ((h) << 8)
int r2_plan_build_hd(const struct r2_cluster *c, const struct r2_opdesc *op, const uint32_t *fac,
		     uint32_t L, uint32_t m, int variant, struct r2_plan **out);
/* A Bruck plan of radix r (2 .. R2_HD_MAX_FAN + 1, below n) and variant
 * 0 .. 3 (pl_build_bruck), whatever its cost (tests, r2ccl-sim). */
int r2_plan_build_bruck(const struct r2_cluster *c, const struct r2_opdesc *op, uint32_t r,
			int variant, struct r2_plan **out);

/* Cluster-derived context shared by the candidates of one r2_plan_build. */
struct ctx {
	const struct r2_cluster *c;
	const struct r2_opdesc *op;
	struct r2_plan_params prm;
	uint32_t n, R, elem;
	uint32_t *hcls;          /* class of each host */
	struct r2_hclass *cls;
	uint32_t ncls;
	struct r2_hcx *hcx;
	uint32_t nhcx;
	double *hbw;             /* per host: sum of usable min(tx, rx) */
	bool any_down;
	/* shard plan solved once per build (independent of K) */
	struct r2_hclass *shard_cls;
	uint32_t shard_rem_cls;
	uint64_t shard_rem;
	/* loads for the analytic cost */
	double *tx, *rx;
	uint32_t *mt, *mr;
	/* NICs loaded since pl_ld_clear (r2_ld_hop), unless ld_full: the step
	 * time and the next clear visit only those */
	uint32_t *touch;
	uint8_t *mark;
	size_t ntouch;
	bool ld_full;
};

void r2_ld_hop(struct ctx *x, uint32_t a, uint32_t bb, const struct r2_hop *h, double bytes,
	       double sign);
uint64_t r2_ceil_chunk(uint64_t len, uint32_t elem, uint32_t K);
/* part: 0 first step (RS only), 1 middle (RS + AG), 2 last (AG only). */
void r2_shard_phase_load(struct ctx *x, const struct r2_view *v, const struct r2_comp *cp,
			 int part);
int r2_shard_solve(struct r2_hclass *cls, uint32_t ncls, uint32_t n, uint32_t R, uint64_t S,
		   uint32_t elem, uint32_t *rem_cls, uint64_t *rem);

#endif
