/* SPDX-License-Identifier: MIT */
/*
 * Log-step schedule for any number of hosts: Bruck's all-gather with radix
 * r = k + 1 (k peers a step), its mirror image for reduce-scatter, and the
 * two in a row for allreduce. hd.c's halving/doubling needs the hosts to
 * factor into small radices (a prime n has one step of n - 1 peers, or the
 * ring); this one takes ceil(log_r n) steps for every n, and each host still
 * receives (n - 1) / n of the buffer in all (bandwidth-optimal).
 *
 * Pieces: piece s is host s's segment (allgather, reducescatter) or piece s
 * of n of the buffer (allreduce); indices mod n. Before all-gather level l,
 * host p holds the c_l = r^l (at most n) pieces [p, p + c_l). At level l,
 * for t = 1 .. k with t c_l < c_{l+1} = min(r c_l, n), it receives the
 * pieces [p + t c_l, p + t c_l + len_t), len_t = min(c_l, c_{l+1} - t c_l),
 * from host p + t c_l (COPY) and sends [p, p + len_t) to host p - t c_l.
 * Reduce-scatter runs the levels backwards with every transfer reversed
 * (REDUCE): host p, responsible for the window [p, p + c_{l+1}), sends
 * [p + t c_l, p + t c_l + len_t) to host p + t c_l and keeps [p, p + c_l),
 * into which the k senders p - t c_l reduce (several REDUCE receives on the
 * same bytes, as the contract allows). A block that wraps past piece n - 1
 * is one message of two ranges (r2_hd_parts lays its rails over both). Members are every host in order (comp mem = all hosts);
 * the comp's level is L = ceil(log_r n), its radix plan->hosts[fac].
 */
#include "planner_int.h"
#include "util.h"

uint32_t r2_bruck_levels(uint32_t n, uint32_t r)
{
	uint32_t L = 0;
	for (uint64_t c = 1; c < n; c *= r)
		L++;
	return L;
}

uint32_t r2_bruck_nsteps(enum r2_plan_op op, const struct r2_comp *c)
{
	return op == R2_PLAN_ALLREDUCE ? 2u * c->level : c->level;
}

size_t r2_bruck_max_msgs(const struct r2_view *v, const struct r2_comp *c)
{
	return 2 * (size_t)(v->hosts[c->fac] - 1);
}

/* Byte range of pieces [a, a + cnt), a + cnt <= n. */
static void pieces(const struct r2_view *v, const struct r2_comp *c, uint32_t a, uint32_t cnt,
		   uint64_t *off, uint64_t *len)
{
	uint64_t o0, l0, o1, l1;
	r2_sub_range(c->off, c->len, v->elem, a, v->n, &o0, &l0);
	r2_sub_range(c->off, c->len, v->elem, a + cnt - 1, v->n, &o1, &l1);
	*off = o0;
	*len = o1 + l1 - o0;
}

/* Pieces [a, a + cnt) mod n, to or from peer: one message, with a second
 * range if the block wraps past piece n - 1. */
static void put_block(const struct r2_view *v, const struct r2_comp *c, uint32_t a, uint32_t cnt,
		      uint32_t peer, bool send, uint8_t kind, uint16_t slot, uint16_t nslot,
		      struct r2_hd_msg *out, size_t max, size_t *nm)
{
	uint32_t run = a + cnt <= v->n ? cnt : v->n - a;
	struct r2_hd_msg m = { peer, send, kind, slot, nslot, 0, 0, 0, 0 };
	pieces(v, c, a, run, &m.off, &m.len);
	if (run < cnt)
		pieces(v, c, 0, cnt - run, &m.off2, &m.len2);
	if (!m.len) { /* empty pieces: the second range alone */
		m.off = m.off2;
		m.len = m.len2;
		m.off2 = m.len2 = 0;
	}
	if (!m.len)
		return;
	if (*nm < max)
		out[*nm] = m;
	(*nm)++;
}

size_t r2_bruck_msgs(const struct r2_view *v, const struct r2_comp *c, uint32_t h, int64_t j,
		     struct r2_hd_msg *out, size_t max)
{
	uint32_t n = v->n, r = v->hosts[c->fac], L = c->level;
	size_t nm = 0;
	if (j < 0 || j >= (int64_t)r2_bruck_nsteps(v->op, c) || h >= n)
		return 0;
	/* the level of step j, and whether it gathers (COPY) or reduces */
	bool ag = v->op == R2_PLAN_ALLGATHER || (v->op == R2_PLAN_ALLREDUCE && j >= L);
	uint32_t l = v->op == R2_PLAN_ALLGATHER ? (uint32_t)j
		     : v->op == R2_PLAN_REDUCESCATTER ? L - 1 - (uint32_t)j
		     : j < L ? L - 1 - (uint32_t)j : (uint32_t)j - L;
	uint64_t cl = 1;
	for (uint32_t i = 0; i < l; i++)
		cl *= r;
	uint64_t cn = cl * r < n ? cl * r : n;
	/* the step's blocks: t = 1 .. k, the last levels fewer (the rails are
	 * dealt to the blocks there are: r2_hd_rails' variant 1) */
	uint16_t k = (uint16_t)R2_MIN((uint64_t)r - 1, (cn - 1) / cl);
	for (uint32_t t = 1; t <= k; t++) {
		uint32_t s = (uint32_t)(t * cl), len = (uint32_t)(cn - s < cl ? cn - s : cl);
		uint32_t up = (h + s) % n, down = (h + n - s) % n;
		uint16_t slot = (uint16_t)(t - 1);
		if (ag) {
			put_block(v, c, up, len, up, false, R2_XFER_COPY, slot, k, out, max, &nm);
			put_block(v, c, h, len, down, true, R2_XFER_COPY, slot, k, out, max, &nm);
		} else {
			put_block(v, c, up, len, up, true, R2_XFER_REDUCE, slot, k, out, max, &nm);
			put_block(v, c, h, len, down, false, R2_XFER_REDUCE, slot, k, out, max, &nm);
		}
	}
	return nm;
}
