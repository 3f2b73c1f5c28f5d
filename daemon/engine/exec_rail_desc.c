/* SPDX-License-Identifier: MIT */
/*
 * The operation's descriptor, compared with every peer host's: a collective
 * whose hosts disagree (kind, count, type, reduction, root) fails at once on
 * every rank with a reason naming both calls, instead of waiting for
 * op_timeout_ms.
 *
 * At its start each host sends every other host of the communicator one
 * small DATA message flagged R2_CHUNK_DESC holding its struct op_desc; it is
 * acknowledged and sent again after a failure like any chunk (a small
 * operation's lazily: the peer's next collective acknowledges it, and this
 * one pays what this host owed the peer, exec_rail_ack.c). A host
 * compares each peer's descriptor with its own once, when it comes (one
 * that comes before its operation waits with the early chunks), and an
 * operation succeeds only once every peer's came: a mismatch cannot pass
 * unnoticed even where the plans happen to move bytes that fit. Since every
 * host hears from every other, each one that disagrees with any peer finds
 * out by itself: nothing more has to be told. The descriptor names the view
 * the host planned with too: hosts that planned one collective with views
 * that differ (the agreement failed: a member ran on without a commit it
 * had acknowledged) break the communicator at once with that reason, where
 * each would drop the other's chunks until op_timeout_ms.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "net/health.h"
#include "net/rails.h"

#include "engine/exec_rail_int.h"

void rl_desc_fill(struct op_desc *dd, const struct r2_exec *x)
{
	const struct r2_sqe *q = &x->ops[0]->sqe;

	memset(dd, 0, sizeof(*dd));
	dd->opcode = x->opcode;
	dd->dtype = q->dtype;
	dd->count = q->count;
	dd->redop = x->opcode == R2_OP_ALLREDUCE || x->opcode == R2_OP_REDUCESCATTER ||
				    x->opcode == R2_OP_REDUCE
			    ? q->redop
			    : 0;
	dd->root = x->opcode == R2_OP_BROADCAST || x->opcode == R2_OP_REDUCE ? q->root : -1;
}

/* The first field of b (host src's) that differs from a (this host's), in
 * words; false when they agree. */
static bool desc_differs(const struct r2_comm *c, uint64_t opseq, const struct op_desc *a,
			 const struct op_desc *b, uint32_t src, char *why, size_t len)
{
	uint32_t rank = c->hosts[src].first_rank;
	int n;

	n = snprintf(why, len, "collective %llu (%s): rank %u ", (unsigned long long)opseq,
		     r2_opcode_name(a->opcode), rank);
	if (n < 0 || (size_t)n >= len)
		n = 0;
	why += n;
	len -= (size_t)n;
	if (b->opcode != a->opcode)
		snprintf(why, len, "called %s, this rank %s", r2_opcode_name(b->opcode),
			 r2_opcode_name(a->opcode));
	else if (b->count != a->count)
		snprintf(why, len, "posted count %llu, this rank %llu",
			 (unsigned long long)b->count, (unsigned long long)a->count);
	else if (b->dtype != a->dtype)
		snprintf(why, len, "posted type %s, this rank %s",
			 r2ccl_dtype_name((r2ccl_dtype_t)b->dtype),
			 r2ccl_dtype_name((r2ccl_dtype_t)a->dtype));
	else if (b->redop != a->redop)
		snprintf(why, len, "posted op %s, this rank %s",
			 r2ccl_redop_name((r2ccl_redop_t)b->redop),
			 r2ccl_redop_name((r2ccl_redop_t)a->redop));
	else if (b->root != a->root)
		snprintf(why, len, "posted root %d, this rank %d", b->root, a->root);
	else
		return false;
	return true;
}

static int desc_send(struct railop *o, int h)
{
	struct r2_comm *c = o->c;
	struct r2_rails *rs = o->d->rails;
	struct sendrec *s = calloc(1, sizeof(*s));
	int r;

	if (!s || !(s->buf = malloc(sizeof(o->desc.mine)))) {
		free(s);
		return -ENOMEM;
	}
	memcpy(s->buf, &o->desc.mine, sizeof(o->desc.mine));
	s->hdr.magic = R2_CHUNK_MAGIC;
	s->hdr.kind = R2_MSG_DATA;
	s->hdr.flags = R2_CHUNK_DESC | (o->lazy ? R2_CHUNK_LAZY_ACK : 0);
	s->hdr.comm = c->key;
	s->hdr.opseq = o->opseq;
	s->hdr.step = R2_DESC_STEP;
	s->hdr.src = (uint32_t)c->my_host;
	s->hdr.dst = (uint32_t)h;
	s->hdr.len = sizeof(o->desc.mine);
	/* spread over the rails (rl_post_any takes another if this one is bad) */
	s->rail = rs && rs->n ? (c->my_host + h) % rs->n : 0;
	s->peer = c->hosts[h].id;
	/* its tenant's queue and class, as the operation's chunks: a latency
	 * tenant's operation ends when its peers' descriptors came, so they
	 * must not wait behind another tenant's bulk bytes */
	s->tenant = rl_tenant(o);
	rl_sends_add(&o->tx, s);
	r = rl_post(o, s);
	if (r < 0)
		o->tx.need_repost = true; /* full or no connection this instant: later */
	else
		/* h takes it only once it ended every collective before this
		 * one, so with all of my messages of them: what I owe h for
		 * its messages of them is paid (flagged or not, h's mailbox
		 * reader takes it so: rl_ack_seen) */
		rl_acks_implied(c, (uint32_t)h, o->opseq);
	return 0;
}

/* What plans follow from in a view (NICs down, measured bandwidths, links
 * down), hashed; 0 for none and for one with nothing in it, which plans as
 * none. */
static uint64_t view_hash(const struct r2_view *v)
{
	uint64_t x = 0xcbf29ce484222325ull;
	bool any = false;

#define MIX(val) (x = (x ^ (uint64_t)(val)) * 0x100000001b3ull)
	for (size_t i = 0; v && i < (size_t)v->nhosts * v->nrails; i++) {
		if (!v->down[i] && !v->bw[i])
			continue;
		any = true;
		MIX(i);
		MIX(v->down[i]);
		MIX(v->bw[i]);
	}
	for (size_t i = 0; v && i < (size_t)v->nlinks * 3; i++) {
		any = true;
		MIX(v->links[i]);
	}
#undef MIX
	return !any ? 0 : x ? x : 1;
}

int rl_desc_begin(struct railop *o)
{
	struct r2_comm *c = o->c;
	struct r2_rmsg **pp = &o->stash;
	int r;

	rl_desc_fill(&o->desc.mine, o->stage.x);
	o->desc.mine.view_epoch = o->view ? o->view->epoch : 0;
	o->desc.mine.view_hash = view_hash(o->view);
	o->desc.got = calloc((size_t)c->nhosts, 1);
	if (!o->desc.got)
		return -ENOMEM;
	for (int h = 0; h < c->nhosts; h++)
		if (h != c->my_host && (r = desc_send(o, h)) < 0)
			return r;
	/* those that came before the operation */
	while (*pp) {
		struct r2_rmsg *m = *pp;
		if ((m->cqe.hdr.flags & R2_CHUNK_DESC) && m->cqe.hdr.opseq == o->opseq) {
			*pp = m->next;
			r = rl_desc_in(o, m);
			rl_rmsg_free(o->d, m);
			if (r < 0)
				return r;
			continue;
		}
		pp = &m->next;
	}
	return 0;
}

/* The hosts disagree about one call: c breaks with why; R2CCL_E_MISMATCH. */
static int mismatch_break(struct r2_comm *c, const char *why)
{
	log_warn("communicator %u: %s", c->id, why);
	pthread_mutex_lock(&c->d->lock);
	r2d_comm_break(c, R2CCL_E_MISMATCH, why);
	pthread_mutex_unlock(&c->d->lock);
	return R2CCL_E_MISMATCH;
}

/* Host src planned collective opseq with another view than this host:
 * the view agreement failed there; c breaks (R2CCL_E_COMM_BROKEN). */
static int view_mismatch(struct r2_comm *c, uint64_t opseq, const struct op_desc *mine,
			 const struct op_desc *theirs, uint32_t src)
{
	char why[256];

	snprintf(why, sizeof(why),
		 "collective %llu: host %u planned it with view %llu and this host with view "
		 "%llu, which differ: the hosts' agreement on views failed (a member ran on "
		 "without a commit it had acknowledged, docs/resilience.md)",
		 (unsigned long long)opseq, src, (unsigned long long)theirs->view_epoch,
		 (unsigned long long)mine->view_epoch);
	log_warn("communicator %u: %s", c->id, why);
	pthread_mutex_lock(&c->d->lock);
	r2d_comm_break(c, R2CCL_E_COMM_BROKEN, why);
	pthread_mutex_unlock(&c->d->lock);
	return R2CCL_E_COMM_BROKEN;
}

int rl_desc_check(struct r2_comm *c, uint64_t opseq, const struct op_desc *mine,
		  const struct op_desc *theirs, uint32_t src)
{
	char why[192];

	if (!desc_differs(c, opseq, mine, theirs, src, why, sizeof(why)))
		return 0;
	return mismatch_break(c, why);
}

int rl_path_mismatch(struct r2_comm *c, uint64_t opseq, uint32_t src, bool eager)
{
	char why[256];

	snprintf(why, sizeof(why),
		 "collective %llu: host %u took the %s path and this host the %s one for the same "
		 "call: eager_max, eager_hosts, chunk_size, cost_alpha_us or cost_nic_bw "
		 "differ between the hosts' configurations (they must be alike)",
		 (unsigned long long)opseq, src, eager ? "planner's" : "eager",
		 eager ? "eager" : "planner's");
	return mismatch_break(c, why);
}

/* An eager message's header carries its operation's descriptor
 * (exec_rail_eager.c): its step holds the kind, type and reduction, its off
 * the count (the eager path sends the whole buffer, at offset 0). */
void rl_desc_to_hdr(const struct op_desc *d, struct r2_chunk_hdr *h)
{
	h->flags |= R2_CHUNK_EAGER;
	h->step = (d->opcode & 0xffffu) << 16 | (d->dtype & 0xffu) << 8 | (d->redop & 0xffu);
	h->off = d->count;
}

void rl_desc_from_hdr(struct op_desc *d, const struct r2_chunk_hdr *h)
{
	memset(d, 0, sizeof(*d));
	d->opcode = h->step >> 16;
	d->dtype = (h->step >> 8) & 0xffu;
	d->redop = h->step & 0xffu;
	d->count = h->off;
	d->root = -1;
}

int rl_desc_in(struct railop *o, const struct r2_rmsg *m)
{
	const struct r2_chunk_hdr *h = &m->cqe.hdr;
	struct r2_comm *c = o->c;
	struct op_desc theirs;

	if (h->opseq != o->opseq)
		return 1;
	/* (without the view: a daemon before 2026-12-08) */
	bool with_view = h->len == sizeof(theirs);

	if (h->src >= (uint32_t)c->nhosts || (int)h->src == c->my_host ||
	    (!with_view && h->len != offsetof(struct op_desc, view_epoch)) || !o->desc.got) {
		log_warn_rl("communicator %u: a malformed operation descriptor from host %u; "
			    "dropped", c->id, h->src);
		return 0;
	}
	if (o->desc.got[h->src])
		return 0; /* delivered twice */
	rl_ack_owe(c, m); /* lazy: paid by my next collective's descriptor */
	memset(&theirs, 0, sizeof(theirs));
	memcpy(&theirs, m->cqe.buf, h->len);
	if (rl_desc_check(c, o->opseq, &o->desc.mine, &theirs, h->src) < 0)
		return R2CCL_E_MISMATCH;
	if (with_view && theirs.view_hash != o->desc.mine.view_hash)
		return view_mismatch(c, o->opseq, &o->desc.mine, &theirs, h->src);
	o->desc.got[h->src] = 1;
	o->desc.ngot++;
	return 0;
}

bool rl_desc_done(const struct railop *o)
{
	return o->desc.ngot >= o->c->nhosts - 1;
}

void rl_desc_end(struct railop *o)
{
	free(o->desc.got);
	o->desc.got = NULL;
}
