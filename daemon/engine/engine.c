/* SPDX-License-Identifier: MIT */
/*
 * The engine: the dispatcher thread and the communicators' executors.
 *
 * The dispatcher waits (epoll) on every session's doorbell eventfd. For each
 * submission it copies the SQE out of shared memory, validates it (opcode,
 * type, op, the communicator handle and membership, buffer ranges against the
 * registered memory), and queues it on its rank's FIFO. Then it matches: the
 * heads of all ranks form one collective when they agree, otherwise every rank
 * gets R2CCL_E_MISMATCH; a SEND and the RECV of its peer form a transfer.
 * Matched operations up to inline_max bytes run on the dispatcher itself
 * (lowest latency); larger ones go to the communicator's executor thread.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "engine/comm.h"
#include "engine/source.h"
#include "config.h"
#include "engine/exec.h"
#include "gpu/gpu.h"
#include "log.h"
#include "net/net.h"
#include "util.h"

struct r2_engine {
	struct r2d *d;
	int epfd;
	int wake_fd;
	pthread_t thread;
	atomic_bool stop;
	atomic_int busy;          /* matched operations queued or running */
	atomic_uint_fast64_t heartbeat;
	uint64_t last_seen_heartbeat;
	struct r2_pool *pool;
	struct r2_workq *applyq; /* apply_threads (NULL: none) */
	/* sessions the dispatcher busy-polls after activity (spin_us) */
	pthread_mutex_t slock;
	struct r2_session **spin;
	int nspin, capspin;
};

bool r2d_engine_alive(struct r2d *d)
{
	struct r2_engine *e = d->engine;
	uint64_t hb = atomic_load(&e->heartbeat);
	bool alive = hb != e->last_seen_heartbeat;

	e->last_seen_heartbeat = hb;
	return alive;
}

int r2d_engine_busy(struct r2d *d)
{
	return d->engine ? atomic_load(&d->engine->busy) : 0;
}

struct r2_pool *r2d_engine_pool(struct r2d *d)
{
	return d->engine->pool;
}

struct r2_workq *r2d_engine_applyq(struct r2d *d)
{
	return d->engine ? d->engine->applyq : NULL;
}

/* ---- submission ---- */

static bool is_collective(uint32_t opcode)
{
	return opcode >= R2_OP_ALLREDUCE && opcode <= R2_OP_REDUCE;
}


static int validate(struct r2d *d, struct r2_session *s, const struct r2_sqe *q,
		    struct r2_comm **cp, struct r2_op *op)
{
	struct r2_comm *c;
	uint64_t slen, rlen;
	int rank, r;

	if (q->opcode == R2_OP_NOP || q->opcode >= R2_OP_MAX)
		return -EINVAL;
	if (q->dtype >= R2CCL_NUM_DTYPES)
		return -EINVAL;
	if ((q->opcode == R2_OP_ALLREDUCE || q->opcode == R2_OP_REDUCESCATTER ||
	     q->opcode == R2_OP_REDUCE) &&
	    q->redop >= R2CCL_NUM_OPS)
		return -EINVAL;
	if (d->draining)
		return R2CCL_E_SHUTDOWN;
	c = r2d_comm_find(d, q->comm_id >> 16);
	rank = (int)(q->comm_id & 0xffff);
	if (!c || rank >= c->nranks || c->m[rank].s != s || (uint32_t)rank != q->rank)
		return -ENOENT; /* not a communicator of this session: nothing to see */
	if (c->state == R2_COMM_BROKEN)
		/* say why when the reason is the caller's to know */
		return c->broken_err == R2CCL_E_SHUTDOWN || c->broken_err == R2CCL_E_PEER_GONE ||
				       c->broken_err == R2CCL_E_DUP_RANK
			       ? c->broken_err
			       : R2CCL_E_COMM_BROKEN;
	if (c->state != R2_COMM_READY)
		return -EAGAIN;
	if ((q->opcode == R2_OP_BROADCAST || q->opcode == R2_OP_REDUCE ||
	     q->opcode == R2_OP_SEND || q->opcode == R2_OP_RECV) &&
	    (q->root < 0 || q->root >= c->nranks))
		return -EINVAL;
	if ((q->opcode == R2_OP_SEND || q->opcode == R2_OP_RECV) && q->root == rank)
		return -EINVAL;
	if (is_collective(q->opcode)) {
		for (int q2 = 0; q2 < c->nranks; q2++)
			if (c->m[q2].left)
				return R2CCL_E_PEER_GONE;
	} else if (c->m[q->root].left &&
		   !(q->opcode == R2_OP_RECV && r2d_comm_left_sent_known(c, (int)q->root))) {
		return R2CCL_E_PEER_GONE; /* (a receive from a rank that sent first: the
					     executor tells: exec_rail_p2p.c) */
	}
	if (!r2d_op_extents(q, c->nranks, rank, &slen, &rlen))
		return -EOVERFLOW;
	if (slen) {
		r = s->src->mem_resolve(s, q->send_mem, q->send_off, slen, &op->sendbuf, &op->sendref);
		if (r < 0)
			return r;
	}
	if (rlen) {
		r = s->src->mem_resolve(s, q->recv_mem, q->recv_off, rlen, &op->recvbuf, &op->recvref);
		if (r < 0)
			return r;
	}
	op->rank = rank;
	*cp = c;
	return 0;
}

static void submit(struct r2d *d, struct r2_session *s, const struct r2_sqe *q)
{
	struct r2_op *op = calloc(1, sizeof(*op));
	struct r2_comm *c = NULL;
	struct r2_comm_member *m;
	int r;

	if (!op) {
		s->src->complete(s, q->tag, -ENOMEM);
		return;
	}
	op->sqe = *q;
	r = validate(d, s, q, &c, op);
	if (r < 0) {
		s->src->mem_put(op->sendref);
		s->src->mem_put(op->recvref);
		free(op);
		d->op_errors_total++;
		log_debug("session %llu: submission refused: %s", (unsigned long long)s->id,
			  r2ccl_strerror(r));
		s->src->complete(s, q->tag, r);
		return;
	}
	if (!r2d_comm_may_queue(c, op->rank) || /* max_pending_ops: c is broken now */
	    !r2d_comm_tenant_may_submit(c, s, op)) {
		s->src->mem_put(op->sendref);
		s->src->mem_put(op->recvref);
		free(op);
		d->op_errors_total++;
		s->src->complete(s, q->tag, R2CCL_E_QUOTA);
		return;
	}
	op->s = s;
	s->src->get(s);
	op->submitted_us = r2_now_us();
	m = &c->m[op->rank];
	if (m->tail)
		m->tail->next = op;
	else
		m->head = op;
	m->tail = op;
	m->npending++;
	s->ops_total++;
	r2d_engine_progress_comm(c);
}

/* ---- matching ---- */

static struct r2_op *pop_head(struct r2_comm *c, int r)
{
	struct r2_comm_member *m = &c->m[r];
	struct r2_op *op = m->head;

	m->head = op->next;
	if (!m->head)
		m->tail = NULL;
	m->npending--;
	op->next = NULL;
	return op;
}

static uint64_t exec_bytes(const struct r2_exec *x)
{
	const struct r2_sqe *q = &x->ops[0]->sqe;
	uint64_t b = q->count * r2ccl_dtype_size((r2ccl_dtype_t)q->dtype);

	if (x->opcode == R2_OP_ALLGATHER || x->opcode == R2_OP_REDUCESCATTER)
		b *= (uint64_t)x->c->nranks;
	return b;
}

static void queue_exec(struct r2_comm *c, struct r2_exec *x)
{
	struct r2_engine *e = c->d->engine;

	atomic_fetch_add(&e->busy, 1);
	if (c->exec_tail)
		c->exec_tail->next = x;
	else
		c->exec_head = x;
	c->exec_tail = x;
	pthread_cond_signal(&c->cond);
	/* an executor pumping its mailbox (transfers or acknowledgements in
	 * flight, r2_p2p_pending) looks up at once instead of at its timeout */
	r2d_comm_mbox_wake(c);
}

/* Inline executions found while matching; run after the lock is dropped. */
static __thread struct r2_exec *inline_head, **inline_tail;
static __thread bool on_dispatcher;

static void dispatch_exec(struct r2_comm *c, struct r2_exec *x)
{
	uint64_t inl = (uint64_t)r2_param_int(&c->d->params, P_INLINE_MAX);

	if (on_dispatcher && c->nhosts <= 1 && !c->exec_head && !c->executing &&
	    exec_bytes(x) <= inl) {
		atomic_fetch_add(&c->d->engine->busy, 1);
		c->executing = true;
		c->refs++;
		*inline_tail = x;
		inline_tail = &x->next;
		return;
	}
	queue_exec(c, x);
}

static bool same_collective(const struct r2_sqe *a, const struct r2_sqe *b)
{
	if (a->opcode != b->opcode || a->count != b->count || a->dtype != b->dtype)
		return false;
	if ((a->opcode == R2_OP_ALLREDUCE || a->opcode == R2_OP_REDUCESCATTER ||
	     a->opcode == R2_OP_REDUCE) &&
	    a->redop != b->redop)
		return false;
	if ((a->opcode == R2_OP_BROADCAST || a->opcode == R2_OP_REDUCE) && a->root != b->root)
		return false;
	return true;
}

static bool match_collective(struct r2_comm *c)
{
	const struct r2_sqe *q0 = NULL;
	struct r2_exec *x;
	int r0 = -1, k;

	for (int r = 0; r < c->nranks; r++) {
		if (!c->m[r].local)
			continue;
		if (!c->m[r].head || !is_collective(c->m[r].head->sqe.opcode))
			return false;
		if (r0 < 0)
			r0 = r;
	}
	if (r0 < 0)
		return false;
	q0 = &c->m[r0].head->sqe;
	for (int r = r0 + 1; r < c->nranks; r++) {
		if (!c->m[r].local)
			continue;
		const struct r2_sqe *q = &c->m[r].head->sqe;
		if (!same_collective(q0, q)) {
			char why[256];
			snprintf(why, sizeof(why),
				 "rank %d called %s count %llu %s, rank %d called %s count %llu %s",
				 r0, r2_opcode_name(q0->opcode), (unsigned long long)q0->count,
				 r2ccl_dtype_name((r2ccl_dtype_t)q0->dtype), r,
				 r2_opcode_name(q->opcode), (unsigned long long)q->count,
				 r2ccl_dtype_name((r2ccl_dtype_t)q->dtype));
			c->d->op_errors_total += (uint64_t)c->nranks;
			r2d_comm_break(c, R2CCL_E_MISMATCH, why);
			return false;
		}
	}
	x = calloc(1, sizeof(*x) + sizeof(x->ops[0]) * (size_t)c->local_ranks);
	if (!x)
		return false;
	x->c = c;
	x->opcode = q0->opcode;
	k = 0;
	for (int r = 0; r < c->nranks; r++)
		if (c->m[r].local)
			x->ops[k++] = pop_head(c, r);
	x->nops = k;
	c->coll_matched++; /* numbered as every host numbers it (PEER_LEAVE) */
	dispatch_exec(c, x);
	return true;
}

static bool match_p2p(struct r2_comm *c)
{
	for (int r = 0; r < c->nranks; r++) {
		struct r2_op *s = c->m[r].head, *rv;
		struct r2_exec *x;
		int p;

		if (s && (s->sqe.opcode == R2_OP_SEND || s->sqe.opcode == R2_OP_RECV) &&
		    !c->m[s->sqe.root].local) {
			/* the other end is on another host: the rail phase pairs it */
			x = calloc(1, sizeof(*x) + sizeof(x->ops[0]));
			if (!x)
				return false;
			x->c = c;
			x->opcode = s->sqe.opcode;
			x->nops = 1;
			x->ops[0] = pop_head(c, r);
			dispatch_exec(c, x);
			return true;
		}
		if (!s || s->sqe.opcode != R2_OP_SEND)
			continue;
		p = s->sqe.root;
		rv = c->m[p].head;
		if (!rv || rv->sqe.opcode != R2_OP_RECV || rv->sqe.root != r)
			continue;
		if (rv->sqe.count != s->sqe.count || rv->sqe.dtype != s->sqe.dtype) {
			char why[160];
			snprintf(why, sizeof(why),
				 "rank %d sends %llu x %s to rank %d, which receives %llu x %s", r,
				 (unsigned long long)s->sqe.count,
				 r2ccl_dtype_name((r2ccl_dtype_t)s->sqe.dtype), p,
				 (unsigned long long)rv->sqe.count,
				 r2ccl_dtype_name((r2ccl_dtype_t)rv->sqe.dtype));
			r2d_comm_break(c, R2CCL_E_MISMATCH, why);
			return false;
		}
		x = calloc(1, sizeof(*x) + sizeof(x->ops[0]) * 2);
		if (!x)
			return false;
		x->c = c;
		x->opcode = R2_OP_SEND;
		x->nops = 2;
		x->ops[0] = pop_head(c, r);
		x->ops[1] = pop_head(c, p);
		dispatch_exec(c, x);
		return true;
	}
	return false;
}

void r2d_engine_fail_left(struct r2_comm *c, int rank)
{
	for (int r = 0; r < c->nranks; r++) {
		struct r2_comm_member *m = &c->m[r];
		struct r2_op **pp = &m->head, *prev = NULL;

		while (*pp) {
			struct r2_op *op = *pp;
			if (is_collective(op->sqe.opcode) ||
			    (op->sqe.root == rank && !(op->sqe.opcode == R2_OP_RECV &&
						       r2d_comm_left_sent_known(c, rank)))) {
				*pp = op->next;
				m->npending--;
				if (m->tail == op)
					m->tail = prev;
				r2d_op_free(op, R2CCL_E_PEER_GONE);
				continue;
			}
			prev = op;
			pp = &op->next;
		}
	}
}

void r2d_engine_progress_comm(struct r2_comm *c)
{
	while (c->state == R2_COMM_READY && (match_collective(c) || match_p2p(c)))
		;
}

/* ---- execution ---- */

_Static_assert(R2_OPSTAT_NKINDS >= R2_OP_MAX, "an op_stats row per opcode");

/* Under d->lock: the tenant's row (the last one, "_other", once full). */
static struct r2_op_stats *op_stats_row(struct r2d *d, const char *tenant)
{
	const char *t = tenant[0] ? tenant : "_none";
	uint32_t i;

	for (i = 0; i < d->nop_stats; i++)
		if (!strncmp(d->op_stats[i].tenant, t, sizeof(d->op_stats[i].tenant) - 1))
			return &d->op_stats[i];
	if (d->nop_stats == R2_OPSTAT_TENANTS - 1)
		t = "_other";
	else if (d->nop_stats == R2_OPSTAT_TENANTS)
		return &d->op_stats[R2_OPSTAT_TENANTS - 1];
	i = d->nop_stats++;
	snprintf(d->op_stats[i].tenant, sizeof(d->op_stats[i].tenant), "%.127s", t);
	return &d->op_stats[i];
}

/* Under d->lock: one operation of x done with status, for the metrics. */
static void op_stats_add(struct r2d *d, struct r2_exec *x, int status)
{
	static const double bounds[R2_LAT_NBUCKETS] = R2_LAT_BOUNDS;
	struct r2_comm *c = x->c;
	struct r2_op_stats *st = op_stats_row(d, c->tenant);
	uint64_t first = 0, bytes = 0, slen, rlen;
	uint32_t k = x->opcode < R2_OP_MAX ? x->opcode : R2_OP_NOP;
	int b;

	for (int i = 0; i < x->nops; i++) {
		struct r2_op *op = x->ops[i];
		if (!op)
			continue;
		if (!first || (op->submitted_us && op->submitted_us < first))
			first = op->submitted_us;
		if (!bytes && r2d_op_extents(&op->sqe, c->nranks, op->rank, &slen, &rlen))
			bytes = slen > rlen ? slen : rlen;
	}
	double sec = first ? (double)(r2_now_us() - first) / 1e6 : 0;
	for (b = 0; b < R2_LAT_NBUCKETS && sec > bounds[b]; b++)
		;
	st->ops[k][status < 0]++;
	st->bytes[k] += bytes;
	st->lat[b]++;
	st->lat_sum += sec;
	c->bytes_total += bytes;
	c->lat_ns_total += (uint64_t)(sec * 1e9);
	c->op_errors += status < 0;
}

void r2d_exec_complete(struct r2_exec *x, int status)
{
	struct r2_comm *c = x->c;
	struct r2d *d = c->d;

	if (x->gpu_stage) /* GPU buffers staged for the rails: copy back first */
		status = r2_gpu_stage_end(x, status);
	pthread_mutex_lock(&d->lock);
	op_stats_add(d, x, status);
	c->ops_total++;
	if (status == 0 && c->nhosts > 1 && x->opcode != R2_OP_SEND && x->opcode != R2_OP_RECV)
		c->coll_done_us = r2_now_us();
	d->ops_total += (uint64_t)x->nops;
	if (status < 0)
		d->op_errors_total += (uint64_t)x->nops;
	pthread_mutex_unlock(&d->lock);
	/* The completions after the counters, and outside d->lock: each writes
	 * a CQE (the session's cq_lock), may wake its client (a syscall, and on
	 * a small host the woken client takes this CPU) and drops memory
	 * references (a GPU handle's close). The ops left every queue when x
	 * was made, so nothing else reaches them; the dispatcher, which takes
	 * d->lock for every submission, does not wait behind any of this. */
	for (int i = 0; i < x->nops; i++)
		r2d_op_free(x->ops[i], status);
	atomic_fetch_sub(&d->engine->busy, 1);
	free(x);
}

static void exec_one(struct r2_exec *x)
{
	int r = r2_exec_run(x, x->c->d->engine->pool);

	if (r == R2_EXEC_PENDING)
		return; /* a transfer across hosts completes later (exec_rail.c) */
	if (r < 0)
		log_warn("communicator %u: %s failed: %s", x->c->id, r2_opcode_name(x->opcode),
			 r2ccl_strerror(r));
	r2d_exec_complete(x, r);
}

void *r2d_comm_executor(void *arg)
{
	struct r2_comm *c = arg;
	struct r2d *d = c->d;
	bool ran = false; /* an operation ended: busy-poll for the next first */

	pthread_mutex_lock(&d->lock);
	for (;;) {
		struct r2_exec *x;

		while (!c->stop && (!c->exec_head || c->executing)) {
			/* ACKs owed for eager messages that no collective of
			 * this host paid in time (exec_rail_ack.c) */
			uint64_t due = c->nhosts > 1 ? r2_acks_due(c) : 0, now = 0;
			if (due && (now = r2_now_us()) >= due) {
				pthread_mutex_unlock(&d->lock);
				r2_acks_flush(c);
				pthread_mutex_lock(&d->lock);
				continue;
			}
			if (r2_p2p_pending(c)) {
				/* transfers across hosts in flight: pump the mailbox
				 * (until an operation is queued: gen, seen under
				 * d->lock, which queue_exec holds) */
				unsigned gen = atomic_load(&c->mbox_gen);
				pthread_mutex_unlock(&d->lock);
				r2_p2p_pump(c, due ? (int)R2_DIV_UP(due - now, 1000) : 20, gen);
				pthread_mutex_lock(&d->lock);
				continue;
			}
			if (ran && c->nhosts > 1) {
				/* a loop of small operations across hosts (decode)
				 * submits the next at once: no wake-up for it */
				unsigned gen = atomic_load(&c->mbox_gen);
				ran = false;
				pthread_mutex_unlock(&d->lock);
				r2_exec_spin(c, gen);
				pthread_mutex_lock(&d->lock);
				continue;
			}
			if (due) {
				struct timespec ts = r2_deadline_in_us(due - now); /* c->cond's clock */
				pthread_cond_timedwait(&c->cond, &d->lock, &ts);
				continue;
			}
			pthread_cond_wait(&c->cond, &d->lock);
		}
		if (c->stop)
			break;
		x = c->exec_head;
		c->exec_head = x->next;
		if (!c->exec_head)
			c->exec_tail = NULL;
		c->executing = true;
		pthread_mutex_unlock(&d->lock);
		exec_one(x);
		pthread_mutex_lock(&d->lock);
		c->executing = false;
		ran = true;
	}
	/* stopping: transfers in flight and operations not run fail */
	pthread_mutex_unlock(&d->lock);
	r2_p2p_fail_all(c, R2CCL_E_COMM_BROKEN);
	pthread_mutex_lock(&d->lock);
	while (c->exec_head) {
		struct r2_exec *x = c->exec_head;
		c->exec_head = x->next;
		pthread_mutex_unlock(&d->lock);
		r2d_exec_complete(x, R2CCL_E_COMM_BROKEN);
		pthread_mutex_lock(&d->lock);
	}
	c->exec_tail = NULL;
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

static void run_inline(struct r2d *d)
{
	while (inline_head) {
		struct r2_exec *x = inline_head;
		struct r2_comm *c = x->c;

		inline_head = x->next;
		if (!inline_head)
			inline_tail = &inline_head;
		x->next = NULL;
		exec_one(x);
		pthread_mutex_lock(&d->lock);
		c->executing = false;
		if (c->exec_head)
			pthread_cond_signal(&c->cond);
		r2d_comm_put(c);
		pthread_mutex_unlock(&d->lock);
	}
}

/* ---- the dispatcher ---- */

static void drain_ring(struct r2d *d, struct r2_session *s, bool doorbell)
{
	struct r2_ring_shm *ring = s->ring;
	uint64_t v;

	if (doorbell && read(s->sq_efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return;
	pthread_mutex_lock(&d->lock);
	if (!s->dead && !s->closing) {
		uint32_t tail = atomic_load_explicit(&ring->sq_tail, memory_order_acquire);
		uint32_t n = tail - s->sq_seen;

		/* A client that moves the tail by more than the ring holds is
		 * broken or hostile: take what the ring can hold, in order. */
		if (n > R2_RING_ENTRIES)
			n = R2_RING_ENTRIES;
		for (uint32_t i = 0; i < n; i++) {
			struct r2_sqe q = ring->sq[s->sq_seen & (R2_RING_ENTRIES - 1)];
			s->sq_seen++;
			atomic_store_explicit(&ring->sq_head, s->sq_seen, memory_order_release);
			submit(d, s, &q);
		}
	}
	pthread_mutex_unlock(&d->lock);
	run_inline(d);
}

static void set_spinning(struct r2_engine *e, uint32_t v)
{
	for (int i = 0; i < e->nspin; i++)
		atomic_store(&e->spin[i]->ring->daemon_spinning, v);
}

/* Work in any ring? Drains it (caller holds e->slock). */
static bool poll_rings(struct r2_engine *e)
{
	bool found = false;

	for (int i = 0; i < e->nspin; i++) {
		struct r2_session *s = e->spin[i];
		if (atomic_load(&s->ring->sq_tail) != s->sq_seen) {
			drain_ring(e->d, s, false);
			found = true;
		}
	}
	return found;
}

/* After activity, busy-poll every ring for spin_us (yielding the CPU on each
 * pass): a collective's other ranks usually arrive within microseconds, and
 * they need no doorbell (no syscall, no wake-up) while we poll. */
static void spin(struct r2_engine *e)
{
	int64_t spin_us = r2_param_int(&e->d->params, P_SPIN_US);
	uint64_t until;

	if (spin_us <= 0)
		return;
	pthread_mutex_lock(&e->slock);
	set_spinning(e, 1);
	until = r2_now_us() + (uint64_t)spin_us;
	while (r2_now_us() < until && !atomic_load(&e->stop)) {
		if (poll_rings(e))
			until = r2_now_us() + (uint64_t)spin_us;
		/* busy clients may keep this loop going: each pass counts as
		 * going round (no epoll batch is held here) */
		atomic_fetch_add(&e->heartbeat, 1);
		pthread_mutex_unlock(&e->slock);
		sched_yield();
		pthread_mutex_lock(&e->slock);
	}
	set_spinning(e, 0);
	/* a client that saw us spinning skipped its doorbell: look once more */
	poll_rings(e);
	pthread_mutex_unlock(&e->slock);
}

static void *dispatcher(void *arg)
{
	struct r2_engine *e = arg;
	struct epoll_event ev[64];

	on_dispatcher = true;
	inline_tail = &inline_head;
	while (!atomic_load(&e->stop)) {
		int n = epoll_wait(e->epfd, ev, 64, 100);

		for (int i = 0; i < n; i++) {
			struct r2_session *s = ev[i].data.ptr;
			if (!s) {
				uint64_t v;
				if (read(e->wake_fd, &v, sizeof(v)) < 0)
					(void)0;
				continue;
			}
			drain_ring(e->d, s, true);
		}
		/* after the batch, not at its start: a session removed from the
		 * epoll set before this count moved is in no batch any more
		 * (r2d_engine_remove_session; spin() sees only e->spin) */
		atomic_fetch_add(&e->heartbeat, 1);
		if (n > 0)
			spin(e);
	}
	return NULL;
}

static void spin_remove(struct r2_engine *e, struct r2_session *s)
{
	pthread_mutex_lock(&e->slock);
	for (int i = 0; i < e->nspin; i++) {
		if (e->spin[i] == s) {
			e->spin[i] = e->spin[--e->nspin];
			break;
		}
	}
	pthread_mutex_unlock(&e->slock);
}

int r2d_engine_add_session(struct r2d *d, struct r2_session *s)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = s };

	struct r2_engine *e = d->engine;

	s->src->get(s); /* the engine's reference, dropped in remove */
	pthread_mutex_lock(&e->slock);
	if (e->nspin == e->capspin) {
		int cap = e->capspin ? e->capspin * 2 : 16;
		void *n = realloc(e->spin, (size_t)cap * sizeof(*e->spin));
		if (!n) {
			pthread_mutex_unlock(&e->slock);
			s->src->put(s);
			return -ENOMEM;
		}
		e->spin = n;
		e->capspin = cap;
	}
	e->spin[e->nspin++] = s;
	pthread_mutex_unlock(&e->slock);
	if (epoll_ctl(e->epfd, EPOLL_CTL_ADD, s->sq_efd, &ev) < 0) {
		int r = -errno;
		spin_remove(e, s);
		s->src->put(s);
		return r;
	}
	return 0;
}

void r2d_engine_remove_session(struct r2d *d, struct r2_session *s)
{
	uint64_t one = 1;

	if (s->sq_efd < 0 || !s->ring || !d->engine)
		return; /* stopped: r2d_engine_stop dropped the engine's references */
	if (epoll_ctl(d->engine->epfd, EPOLL_CTL_DEL, s->sq_efd, NULL) < 0)
		return; /* was never added */
	spin_remove(d->engine, s);
	/* The dispatcher may hold s from an epoll batch taken before the DEL:
	 * it checks s->dead/closing under d->lock, and the reference below is
	 * dropped only after that batch ended (the count moves at the end of
	 * each). A dispatcher that does not go round within 2 s keeps the
	 * reference: a session leaked, not one freed under it. */
	uint64_t hb = atomic_load(&d->engine->heartbeat); /* before the wake-up */
	if (write(d->engine->wake_fd, &one, sizeof(one)) < 0)
		(void)0;
	for (int i = 0; i < 4000 && atomic_load(&d->engine->heartbeat) == hb; i++)
		usleep(500);
	if (atomic_load(&d->engine->heartbeat) == hb) {
		log_warn("session %llu: the dispatcher did not go round in 2 s; its record is "
			 "kept (leaked) rather than freed under it",
			 (unsigned long long)s->id);
		return;
	}
	s->src->put(s);
}

/* What net reports to the engine (net/net.h): registered at start, before
 * the rails start, so net never calls the engine by name. */
static const struct r2_net_events net_events = {
	.deliver = r2d_comm_deliver,           /* exec_rail.c */
	.loop_event = r2d_bootstrap_event,     /* bootstrap.c */
	.comm_by_key = r2d_comm_by_key,        /* comm.c */
	.comm_by_uid = r2d_comm_by_uid,
	.my_host_by_key = r2d_comm_my_host_by_key,
	.comm_break = r2d_comm_break,
	.rails_closing = r2d_orphans_free,     /* exec_rail_mbox.c */
};

/* What the GPU path asks of the engine (gpu/gpu.h): registered at start,
 * so gpu never calls the engine or the control layer by name. */
static void gpu_exec_done(struct r2_exec *x, int status)
{
	struct r2_comm *c = x->c;
	struct r2d *d = c->d;

	r2d_exec_complete(x, status);
	pthread_mutex_lock(&d->lock);
	r2d_comm_put(c); /* the GPU job's reference */
	pthread_mutex_unlock(&d->lock);
}

static int gpu_mem_resolve(struct r2_session *s, uint32_t id, uint64_t off, uint64_t len,
			   void **addr, struct r2_memreg **ref)
{
	return s->src->mem_resolve(s, id, off, len, addr, ref);
}

static void gpu_mem_put(struct r2_session *s, struct r2_memreg *m)
{
	s->src->mem_put(m);
}

static const struct r2_gpu_engine gpu_engine = {
	.exec_done = gpu_exec_done,
	.exec_hier = r2_exec_hier, /* exec_rail.c */
	.progress = r2_p2p_progress, /* exec_rail_p2p.c */
	.mem_resolve = gpu_mem_resolve,
	.mem_put = gpu_mem_put,
};

int r2d_engine_start(struct r2d *d)
{
	struct r2_engine *e = calloc(1, sizeof(*e));
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	int nthreads = (int)r2_param_int(&d->params, P_REDUCE_THREADS);
	int napply, r;

	if (!e)
		return -ENOMEM;
	e->d = d;
	r2d_net_set_events(d, &net_events);
	r2_gpu_set_engine(&gpu_engine);
	pthread_mutex_init(&e->slock, NULL);
	e->epfd = epoll_create1(EPOLL_CLOEXEC);
	e->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (e->epfd < 0 || e->wake_fd < 0) {
		r = -errno;
		goto fail;
	}
	epoll_ctl(e->epfd, EPOLL_CTL_ADD, e->wake_fd, &ev);
	if (nthreads <= 0)
		nthreads = d->topo.ncpus > 0 ? d->topo.ncpus : 2;
	r = r2_pool_create(&e->pool, nthreads);
	if (r < 0)
		goto fail;
	napply = (int)r2_param_int(&d->params, P_APPLY_THREADS);
	if (napply < 0) /* by the cores: none below 8 (applied inline), else 1 per 4, up to 8 */
		napply = d->topo.ncpus >= 8 ? R2_MIN(8, d->topo.ncpus / 4) : 0;
	if (napply > 0 && (r = r2_workq_create(&e->applyq, napply, "r2-apply")) < 0) {
		r2_pool_destroy(e->pool);
		goto fail;
	}
	d->engine = e;
	r = -r2_thread_create(&e->thread, dispatcher, e);
	if (r == 0)
		pthread_setname_np(e->thread, "r2-dispatch");
	if (r < 0) {
		d->engine = NULL;
		r2_pool_destroy(e->pool);
		r2_workq_destroy(e->applyq);
		goto fail;
	}
	log_info("engine: dispatcher up, %d reduction threads, %d apply threads, inline up to "
		 "%lld bytes", nthreads, napply, (long long)r2_param_int(&d->params, P_INLINE_MAX));
	return 0;
fail:
	r2_closep(&e->epfd);
	r2_closep(&e->wake_fd);
	free(e);
	return r;
}

void r2d_engine_stop(struct r2d *d)
{
	struct r2_engine *e = d->engine;
	uint64_t one = 1;

	if (!e)
		return;
	atomic_store(&e->stop, true);
	if (write(e->wake_fd, &one, sizeof(one)) < 0)
		(void)0;
	pthread_join(e->thread, NULL);
	/* The communicators' executors use the reduction pool, the apply queue
	 * and the busy count until they end (an operation in its rail phase
	 * fails and completes): joined before those go. A communicator that no
	 * session's close freed would otherwise run on a freed engine. */
	r2d_comm_destroy_all(d);
	/* sessions the control layer has not removed: the engine's references */
	for (int i = 0; i < e->nspin; i++)
		e->spin[i]->src->put(e->spin[i]);
	e->nspin = 0;
	r2_pool_destroy(e->pool);
	r2_workq_destroy(e->applyq);
	r2_closep(&e->epfd);
	r2_closep(&e->wake_fd);
	pthread_mutex_destroy(&e->slock);
	free(e->spin);
	free(e);
	d->engine = NULL;
}
