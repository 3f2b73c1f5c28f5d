/* SPDX-License-Identifier: MIT */
/*
 * Detours, the sender's side: with no rail left to a peer, a chunk goes
 * through a bridge host (detour.h), and a bridge's refusal picks another.
 */
#include <errno.h>

#include "net/detour.h"
#include "log.h"
#include "net/rails.h"
#include "net/tenants.h"
#include "util.h"

#include "engine/exec_rail_int.h"

/* ---- detours (detour.h): the sender's side ---- */

static bool nacked(const struct rail_detours *det, uint32_t dst, uint32_t via)
{
	for (size_t i = 0; i < det->nnacked; i++)
		if (det->nacked[i].dst == dst && det->nacked[i].via == via)
			return true;
	return false;
}

static int host_of(const struct r2_comm *c, uint64_t id)
{
	for (int h = 0; c->hosts && h < c->nhosts; h++)
		if (c->hosts[h].id == id)
			return h;
	return -1;
}

/* A host of the communicator (not this one, not dst, not one that refused)
 * with a connection from this host: the bridges to dst, in turn from dst + 1;
 * -1 if none. */
static int bridge_after(const struct r2_comm *c, const struct rail_detours *det, uint32_t dst,
			int k0)
{
	for (int k = k0; k < c->nhosts; k++) {
		int h = (int)((dst + (uint32_t)k) % (uint32_t)c->nhosts);
		struct r2_peer *p;
		if (h == c->my_host || h == (int)dst || nacked(det, dst, (uint32_t)h))
			continue;
		p = r2d_rails_peer_find(c->d, c->hosts[h].id);
		if (p && p->conn_mask)
			return k;
	}
	return -1;
}

/* No rail left to peer: go on through a bridge? Not when the peer reset
 * every connection (its daemon died or restarted: nobody reaches it). */
bool rl_detour_possible(const struct railop *o, uint64_t peer)
{
	return rl_detour_possible_for(o->c, &o->det, peer);
}

bool rl_detour_possible_for(const struct r2_comm *c, const struct rail_detours *det,
			    uint64_t peer)
{
	int dst = host_of(c, peer);
	struct r2_rails *rs = c->d->rails;
	uint32_t all = rs ? (1u << rs->n) - 1 : 0;

	return dst >= 0 && (c->hosts[dst].reset_rails & all) != all &&
	       bridge_after(c, det, (uint32_t)dst, 1) >= 0;
}

int rl_detour_send(struct r2_comm *c, struct rail_detours *det, struct sendrec *s,
		   uint64_t opseq)
{
	struct r2d *d = c->d;
	uint32_t dst = s->hdr.dst;
	int n = d->rails ? d->rails->n : 0;

	/* only a chunk for its peer itself (not a planned relay's first hop) */
	if (!c->hosts || dst >= (uint32_t)c->nhosts || c->hosts[dst].id != s->peer ||
	    s->hdr.kind != R2_MSG_DATA)
		return -ENOTCONN;
	for (int k = bridge_after(c, det, dst, 1); k >= 0; k = bridge_after(c, det, dst, k + 1)) {
		uint64_t id = c->hosts[(dst + (uint32_t)k) % (uint32_t)c->nhosts].id;
		uint32_t bad = r2d_rails_bad(d, id);
		for (int pass = 0; pass < 2; pass++)
			for (int i = 0; i < n; i++) {
				if (((bad >> i) & 1) != (uint32_t)pass)
					continue;
				if (s->borrowed && !r2d_rails_zero_copy(d, i) && rl_unborrow(d, s) < 0)
					return -ENOMEM;
				s->hdr.flags |= R2_CHUNK_DETOUR;
				/* through its tenant's queue, as a direct chunk */
				if (r2d_rails_send_tenant(d, i, id, &s->hdr, s->buf,
							  (uint64_t)(uintptr_t)s, s->tenant,
							  NULL) == 0) {
					s->via = id;
					s->rail = i;
					s->posted = true;
					if (!det->detoured++)
						log_warn("communicator %u: no rail left to host %u: op "
							 "%llu goes on through host %u",
							 c->id, dst, (unsigned long long)opseq,
							 host_of(c, id));
					return 0;
				}
				s->hdr.flags &= (uint16_t)~R2_CHUNK_DETOUR;
			}
	}
	return -ENOTCONN;
}

/* A bridge refused a chunk (no rail to its destination either): another
 * bridge, or, with none left, the destination is gone. */
int rl_detour_refused(struct r2_comm *c, struct rail_detours *det, const struct r2_chunk_hdr *h,
		      uint64_t from)
{
	int via = host_of(c, from);
	bool busy = (h->flags & R2_CHUNK_BUSY) != 0; /* its queues full: again later */

	if (!busy && via >= 0 && !nacked(det, h->dst, (uint32_t)via) &&
	    R2_GROW(det->nacked, det->capnacked, det->nnacked, 8) == 0) {
		det->nacked[det->nnacked].dst = h->dst;
		det->nacked[det->nnacked].via = (uint32_t)via;
		det->nnacked++;
	}
	struct r2_peer *p = h->dst < (uint32_t)c->nhosts
				    ? r2d_rails_peer_find(c->d, c->hosts[h->dst].id)
				    : NULL;
	if (h->dst < (uint32_t)c->nhosts && bridge_after(c, det, h->dst, 1) < 0 &&
	    !(p && p->conn_mask)) {
		log_warn("communicator %u: host %u unreachable, directly or through any other "
			 "host", c->id, h->dst);
		return R2CCL_E_PEER_GONE;
	}
	return 0;
}

int rl_nack(struct railop *o, const struct r2_chunk_hdr *h, uint64_t from)
{
	bool busy = (h->flags & R2_CHUNK_BUSY) != 0;

	for (struct sendrec *s = o->tx.sends; s; s = s->next)
		if (s->hdr.opseq == h->opseq && s->hdr.step == h->step && s->hdr.off == h->off &&
		    s->hdr.dst == h->dst && s->hdr.src == h->src && !s->acked &&
		    rl_sent_to(s) == from) {
			s->retries += !busy;
			if (rl_nack_defer(s, busy))
				continue;
			s->posted = false;
			s->sent = false;
			o->tx.need_repost = true;
		}
	return rl_detour_refused(o->c, &o->det, h, from);
}
