/* SPDX-License-Identifier: MIT */
/*
 * Lazy acknowledgements of eager messages, and of a small collective's
 * descriptors and last chunks by the planner's plan (docs/architecture.md,
 * Small AllReduce across hosts).
 *
 * An eager message goes out flagged R2_CHUNK_LAZY_ACK the first time. Its
 * receiver does not write an ACK for it at once: it owes one (rl_ack_owe).
 * Its next eager message to that host, of a later collective, pays it: a
 * host posts a collective's messages only after it finished the one before,
 * and it finished that one only with every message of it in hand. So the
 * sender, taking from its mailbox a data chunk of collective M from host h,
 * takes every lingering message of its own to h of a collective before M
 * as acknowledged (rl_p2p_implied), and remembers M for h: a host ahead
 * sends its chunk of M while this one is still in M - 1, before the
 * message it answers starts to linger (rl_acks_seen_apply then). What a
 * host owes and cannot pay that way goes as ACKs: before a collective on
 * another path, when none followed within rl_ack_owed_us (the executor's
 * loop, r2_acks_due), and when the communicator's executor stops.
 *
 * A message posted again (its connection failed) loses the flag: its
 * receiver, which may have had it already and dropped the copy, answers it
 * at once. So does one that goes through a bridge, from then on (its
 * receiver answers the bridge at once, R2_CHUNK_DETOUR, and may have the
 * bridged copy when it comes direct). The flag keeps a message out of the
 * throughput monitor only (net/rails.c); the tenants' windows count it.
 *
 * The planner's path does the same for a collective of up to R2_LAZY_OP_MAX
 * bytes with ack_linger on (struct railop lazy): its descriptors, and an
 * AllReduce's last step's direct chunks, go flagged; the descriptors, sent
 * to every peer at each such collective's start, pay what this host owes
 * (desc_send); a peer's message of a later collective taken during the
 * operation acknowledges its lazy sends to that peer not yet lingering
 * (rl_ack_implied_op); the operation's waits send the ACKs owed past
 * rl_ack_owed_us (op_take); and an operation that must await its ACKs (one
 * that could not let its chunks linger) sends its flagged messages still
 * unanswered after 2 x rl_ack_owed_us again, unflagged (lazy_again,
 * exec_rail_loop.c): a peer held elsewhere (a view's agreement, a GPU
 * stream) answers a second copy from its receiving thread at once.
 * Only a transfer (Send/Recv) flushes what is owed before it.
 *
 * What it saves, per small AllReduce on 2 hosts: each daemon's ACK write
 * and the peer's read of it (a wake-up of its TCP thread), on the 2-core
 * machine some 8 of 21 system calls per operation and host
 * (tools/bench/small-cost.sh; docs/benchmarks.md).
 *
 * Executor thread only (the mailbox's reader).
 */
#include <errno.h>
#include <stdlib.h>

#include "net/detour.h"
#include "net/rails.h"
#include "util.h"

#include "engine/exec_rail_int.h"

uint64_t rl_ack_owed_us = 1000;

struct owed {
	struct r2_chunk_hdr hdr; /* the message's header */
	uint64_t peer;           /* the daemon it came from */
	int rail;                /* the rail it came by */
};

struct owed_list {
	struct owed *v;
	int n, cap;
	uint64_t since; /* us: the oldest entry's arrival */
	/* [host]: the latest collective of a data chunk taken from it (its
	 * chunk may come before this host's own messages of the collective
	 * before linger: a host ahead; rl_acks_seen_apply) */
	uint64_t *seen;
	int nseen;
};

static struct owed_list *owed_of(struct r2_comm *c, bool make)
{
	if (!c->acks_owed && make)
		c->acks_owed = calloc(1, sizeof(struct owed_list));
	return c->acks_owed;
}

void rl_ack_owe(struct r2_comm *c, const struct r2_rmsg *m)
{
	/* not lazy, or through a bridge (answered there at once): nothing */
	if ((m->cqe.hdr.flags & (R2_CHUNK_LAZY_ACK | R2_CHUNK_DETOUR)) != R2_CHUNK_LAZY_ACK)
		return;
	struct owed_list *o = owed_of(c, true);

	if (o && o->n == o->cap) {
		int cap = o->cap ? o->cap * 2 : 8;
		struct owed *v = realloc(o->v, (size_t)cap * sizeof(*v));
		if (v) {
			o->v = v;
			o->cap = cap;
		}
	}
	if (!o || o->n == o->cap) {
		/* no memory to remember it: answered now */
		rl_ack_send(c->d, m->rail, m->cqe.peer, &m->cqe.hdr);
		return;
	}
	if (o->n == 0)
		o->since = m->when_us;
	o->v[o->n++] = (struct owed){ .hdr = m->cqe.hdr, .peer = m->cqe.peer, .rail = m->rail };
}

bool rl_lazy_unanswered(const struct sendrec *s)
{
	return !s->acked && !s->via && (s->hdr.flags & R2_CHUNK_LAZY_ACK);
}

void rl_ack_seen(struct r2_comm *c, uint32_t host, uint64_t opseq)
{
	struct owed_list *o;

	if (host >= (uint32_t)c->nhosts || !(o = owed_of(c, true)))
		return;
	if (!o->seen && (o->seen = calloc((size_t)c->nhosts, sizeof(*o->seen))))
		o->nseen = c->nhosts;
	if (host < (uint32_t)o->nseen && opseq > o->seen[host])
		o->seen[host] = opseq;
	if (c->p2p_ops)
		rl_p2p_implied(c, host, opseq);
}

void rl_acks_seen_apply(struct r2_comm *c)
{
	struct owed_list *o = owed_of(c, false);

	for (int h = 0; o && o->seen && h < o->nseen && c->p2p_ops; h++)
		if (o->seen[h])
			rl_p2p_implied(c, (uint32_t)h, o->seen[h]);
}

void rl_acks_implied(struct r2_comm *c, uint32_t host, uint64_t opseq)
{
	struct owed_list *o = owed_of(c, false);
	int k = 0;

	if (!o)
		return;
	for (int i = 0; i < o->n; i++)
		if (o->v[i].hdr.src != host || o->v[i].hdr.opseq >= opseq)
			o->v[k++] = o->v[i];
	o->n = k;
}

void r2_acks_flush(struct r2_comm *c)
{
	struct owed_list *o = owed_of(c, false);

	for (int i = 0; o && i < o->n; i++)
		rl_ack_send(c->d, o->v[i].rail, o->v[i].peer, &o->v[i].hdr);
	if (o && o->n) {
		atomic_fetch_add(&c->d->acks_owed_sent_total, (uint64_t)o->n);
		o->n = 0;
	}
}

uint64_t r2_acks_due(struct r2_comm *c)
{
	struct owed_list *o = owed_of(c, false);

	return o && o->n ? o->since + rl_ack_owed_us : 0;
}

void rl_acks_free(struct r2_comm *c)
{
	struct owed_list *o = owed_of(c, false);

	if (!o)
		return;
	free(o->v);
	free(o->seen);
	free(o);
	c->acks_owed = NULL;
}
