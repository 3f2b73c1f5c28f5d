/* SPDX-License-Identifier: MIT */
/*
 * Chunks sent from W (tcp_zero_copy): waiting until the transports let go
 * of W before it changes or the operation ends.
 */
#include <errno.h>

#include "log.h"
#include "net/rails.h"
#include "util.h"

#include "engine/exec_rail_int.h"

/* s's bytes overlap W[off, off+len). */
static bool overlaps(const struct sendrec *s, uint64_t off, uint64_t len)
{
	return s->hdr.off < off + len && off < s->hdr.off + s->hdr.len;
}

/* A transport may still read s->buf: posted, its completion not come, and
 * not acknowledged; or acknowledged, but posted more than once or through a
 * bridge, when the ACK may be another copy's and this one still queued
 * (linger_blocked in exec_rail_loop.c: the same rule) */
static bool tp_holds(const struct sendrec *s)
{
	return s->posted && !s->sent && (!s->acked || s->posts > 1 || s->via);
}

/* A borrowed chunk overlapping [off, off+len) (len 0: any) that a transport
 * may still read. */
static struct sendrec *held_borrowed(const struct rail_tx *tx, uint64_t off, uint64_t len)
{
	for (struct sendrec *s = tx->sends; s; s = s->next)
		if (s->borrowed && tp_holds(s) && (!len || (!s->stable && overlaps(s, off, len))))
			return s;
	return NULL;
}


/* Waits until no transport reads a borrowed chunk overlapping [off,
 * off+len) (len 0: any), or deadline_us. Meanwhile it handles send
 * completions, acknowledgements and errors; data messages wait in the
 * mailbox, in their order (the caller is in the middle of applying one).
 * any_error: stop at a failure rl_handle() reports (else the caller is ending
 * a failed operation and only waits for the transports). */
static int settle(struct railop *o, uint64_t off, uint64_t len, uint64_t deadline_us,
		  bool any_error)
{
	struct r2_rmsg *kh = NULL, *kt = NULL;
	int r = 0;

	while (held_borrowed(&o->tx, off, len)) {
		struct r2_rmsg *m;
		if (r2_now_us() > deadline_us) {
			r = -ETIMEDOUT;
			break;
		}
		m = rl_mbox_take(o->c, 10);
		if (!m)
			continue;
		if (m->cqe.type == R2_TPC_RECV && m->cqe.hdr.kind == R2_MSG_DATA) {
			if (kt)
				kt->next = m;
			else
				kh = m;
			kt = m;
			continue;
		}
		int64_t n = rl_handle(o, m, UINT32_MAX, 0);
		if (n < 0 && any_error) {
			r = (int)n;
			break;
		}
	}
	if (kh)
		rl_mbox_unget(o->c, kh, kt);
	return r;
}

/* A failed operation ends: no transport may still read W afterwards (the
 * client may reuse or unmap it). Normally the failed connections complete
 * their sends at once; a stalled one is dropped after a second (its sends
 * then complete with an error): bounded. */
void rl_settle_end(struct railop *o)
{
	struct sendrec *s;

	if (!held_borrowed(&o->tx, 0, 0) || !settle(o, 0, 0, r2_now_us() + 1000000, false))
		return;
	for (s = o->tx.sends; s; s = s->next) {
		if (!s->borrowed || !tp_holds(s))
			continue;
		log_warn("communicator %u: a chunk (op %llu step %u to host %u) is still queued on "
			 "rail %d: dropping that connection",
			 o->c->id, (unsigned long long)s->hdr.opseq, s->hdr.step, s->hdr.dst,
			 s->rail);
		r2d_rails_drop(o->d, s->rail, s->peer);
	}
	if (settle(o, 0, 0, r2_now_us() + 2000000, false))
		log_err("communicator %u: a transport still holds chunks of operation %llu",
			  o->c->id, (unsigned long long)o->opseq);
}

/* settle() within the operation's deadline, stopping at a failure, its time
 * in the operation's profile. */
static int settle_timed(struct railop *o, uint64_t off, uint64_t len)
{
	uint64_t t = r2_now_us();
	int r = settle(o, off, len, o->deadline, true);

	o->prof.settle_us += r2_now_us() - t;
	return r;
}

int rl_settle_copy_all(struct railop *o)
{
	int r;

	if (held_borrowed(&o->tx, 0, 0) && (r = settle_timed(o, 0, 0)) < 0)
		return r;
	for (struct sendrec *s = o->tx.sends; s; s = s->next)
		if (s->borrowed && !s->acked && (r = rl_unborrow(o->d, s)) < 0)
			return r;
	return 0;
}

/* W[off, off+len) is about to change: every unacknowledged chunk sent from
 * there gets its own copy first (after its transport has let go of it).
 * In a ring this never waits (a region is written only after what was sent
 * from it was applied downstream); plans that send and receive one region
 * in one step do. */
int rl_before_write(struct railop *o, uint64_t off, uint64_t len)
{
	bool any = false;
	int r;

	/* (an acknowledged one too while a transport may still read it: a
	 * second copy, posted again or through a bridge, torn by the write,
	 * could reach a receiver that applies it first) */
	for (struct sendrec *s = o->tx.sends; s && !any; s = s->next)
		any = s->borrowed && !s->stable && (!s->acked || tp_holds(s)) && overlaps(s, off, len);
	if (!any)
		return 0;
	if (held_borrowed(&o->tx, off, len) && (r = settle_timed(o, off, len)) < 0)
		return r;
	for (struct sendrec *s = o->tx.sends; s; s = s->next)
		if (s->borrowed && !s->stable && !s->acked && overlaps(s, off, len) &&
		    (r = rl_unborrow(o->d, s)) < 0)
			return r;
	return 0;
}
