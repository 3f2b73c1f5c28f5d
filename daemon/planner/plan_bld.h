/* SPDX-License-Identifier: MIT */
/* The plan builder's private types, shared by the files of plan construction:
 * plan_ctx.c (context, builder, routes), plan_cost.c (analytic cost),
 * plan_sched.c (the schedules) and plan.c (candidates and the choice). */
#ifndef R2_PLAN_BLD_H
#define R2_PLAN_BLD_H

#include "planner_int.h"

#define MAX_LEVELS 16

struct bld {
	struct ctx *x;
	enum r2_algo algo;
	struct r2_comp *comp;
	uint32_t ncomp, capcomp;
	uint32_t *hosts;
	uint32_t nhl, caphl;
	struct r2_route *route;
	uint32_t nroute, caproute;
	uint32_t *rhash;         /* (a,b,lrail) -> route index */
	uint32_t rcap;
	uint32_t *bridge_use;
	struct r2_hclass *cls;   /* own copy (shard plan writes lambda/shard) */
	uint32_t rem_host;
	uint64_t rem_bytes;
	uint32_t nsteps;
	uint16_t nchunks, depth;
	uint32_t nedges, nkept, nbridged, nremapped;
	double time;
	int err;
};

static inline bool usable(const struct ctx *x, uint32_t h, uint32_t r)
{
	return (x->cls[x->hcls[h]].mask >> r) & 1u;
}

static inline double hbw_rail(const struct ctx *x, uint32_t h, uint32_t r)
{
	return x->cls[x->hcls[h]].bw[r];
}

enum ph_type {
	PH_RING, PH_INJECT, PH_EXTRACT, PH_CHAIN_B, PH_CHAIN_R, PH_TREE_B, PH_TREE_R,
	PH_DIRECT, PH_SHARD_FIRST, PH_SHARD_MID, PH_SHARD_LAST, PH_HD
};

struct phase {
	uint32_t s0, s1;
	uint32_t comp;
	uint8_t type;
};

enum share_rule { SHARE_EQUAL, SHARE_BOTTLENECK };

/* plan_ctx.c */
struct r2_comp *pl_add_comp(struct bld *b);
uint32_t pl_add_hosts(struct bld *b, const uint32_t *h, uint32_t k);
int pl_add_route(struct bld *b, const struct r2_route *rt);
void pl_bld_free(struct bld *b);
int pl_bld_init(struct bld *b, struct ctx *x, enum r2_algo algo);
void pl_bld_sort_routes(struct bld *b);
void pl_bld_view(struct bld *b, struct r2_view *v);
void pl_ctx_free(struct ctx *x);
int pl_ctx_init(struct ctx *x, const struct r2_cluster *c, const struct r2_opdesc *op, const struct r2_plan_params *prm);
int pl_edge_route(struct bld *b, uint32_t a, uint32_t bb, uint16_t l, struct r2_hop *hop, bool count);
bool pl_find_bridge(struct bld *b, uint32_t a, uint32_t bb, uint32_t pa, uint32_t pb, struct r2_hop *hop);
void *pl_grow(void *p, uint32_t *cap, uint32_t need, size_t sz);
bool pl_pair_ok(const struct ctx *x, uint32_t a, uint32_t b, uint32_t r);
/* Special host i of nhcx + 2 ndown: the hosts outside class 0, then both
 * ends of each failed link (a host may come more than once). */
uint32_t pl_special_host(const struct ctx *x, uint32_t i);
int pl_rhash_find(struct bld *b, uint32_t a, uint32_t bb, uint16_t l);

/* plan_cost.c */
int pl_bld_cost(struct bld *b);
void pl_ld_clear(struct ctx *x);

/* plan_sched.c */
int pl_build_direct(struct bld *b);
int pl_build_hd(struct bld *b, const uint32_t *fac, uint32_t L, uint32_t m, int variant);
int pl_build_bruck(struct bld *b, uint32_t r, int variant);
int pl_build_pipe(struct bld *b, enum r2_algo algo, bool steiner, uint32_t K, enum share_rule rule);
int pl_build_recursive(struct bld *b);
int pl_build_rings(struct bld *b, enum share_rule rule);
int pl_build_shard(struct bld *b, uint32_t K);

#endif
