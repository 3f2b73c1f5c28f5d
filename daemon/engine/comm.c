/* SPDX-License-Identifier: MIT */
/*
 * Communicators: joining (CommInit), leaving (destroy, abort, a client that
 * dies), timeouts, and the clear error every rank gets when one fails.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/comm.h"
#include "engine/source.h"
#include "config.h"
#include "net/health.h"
#include "log.h"
#include "net/tenants.h"
#include "planner/planner.h"
#include "r2ccl.pb-c.h"
#include "util.h"

const char *r2d_comm_state_name(enum r2_comm_state st)
{
	switch (st) {
	case R2_COMM_JOINING:
		return "joining";
	case R2_COMM_READY:
		return "ready";
	case R2_COMM_BROKEN:
		return "broken";
	case R2_COMM_DEAD:
		return "dead";
	}
	return "?";
}

int r2d_comm_mode_parse(const char *name)
{
	if (!name)
		return -1;
	if (!strcmp(name, "balance"))
		return R2_MODE_BALANCE;
	if (!strcmp(name, "hotrepair"))
		return R2_MODE_HOTREPAIR;
	return -1;
}

const char *r2d_comm_mode_name(int mode)
{
	return mode == R2_MODE_BALANCE ? "balance" : mode == R2_MODE_HOTREPAIR ? "hotrepair" : "";
}

struct r2_comm *r2d_comm_by_uid(struct r2d *d, const struct r2_uid *uid)
{
	for (struct r2_comm *c = d->comms; c; c = c->next)
		if (c->state != R2_COMM_DEAD && !memcmp(&c->uid, uid, sizeof(*uid)))
			return c;
	return NULL;
}

struct r2_comm *r2d_comm_by_key(struct r2d *d, uint64_t key)
{
	for (struct r2_comm *c = d->comms; c; c = c->next)
		if (c->state != R2_COMM_DEAD && c->key == key)
			return c;
	return NULL;
}

struct r2_comm *r2d_comm_by_key_any(struct r2d *d, uint64_t key)
{
	struct r2_comm *c = r2d_comm_by_key(d, key);

	for (c = c ? c : d->comms; c; c = c->next)
		if (c->key == key)
			return c;
	return NULL;
}

struct r2_comm *r2d_comm_find(struct r2d *d, uint32_t id)
{
	for (struct r2_comm *c = d->comms; c; c = c->next)
		if (c->id == id && c->state != R2_COMM_DEAD)
			return c;
	return NULL;
}

static void init_reply(struct r2_session *s, uint64_t req_id, int status, const char *error,
		       const struct r2_comm *c, int rank)
{
	R2ccl__CommInitReply rep = R2CCL__COMM_INIT_REPLY__INIT;

	rep.req_id = req_id;
	rep.status = status;
	rep.error = (char *)(error ? error : "");
	if (c && status == 0) {
		rep.comm_id = (c->id << 16) | (uint32_t)rank; /* the member's handle */
		rep.local_ranks = (uint32_t)c->local_ranks;
		rep.nhosts = (uint32_t)c->nhosts;
	}
	s->src->reply(s, R2CCL__MSG_TYPE__MSG_COMM_INIT_REPLY, &rep);
}

void r2d_op_free(struct r2_op *op, int status)
{
	if (!op)
		return;
	/* every op with memory references has its source (engine.c submit);
	 * the table outlives the source's last reference */
	const struct r2_source_ops *src = op->s ? op->s->src : NULL;
	if (op->s && op->tenant1)
		r2d_tenants_op_end(op->s->d, op->tenant1 - 1);
	if (op->s) {
		src->complete(op->s, op->sqe.tag, status);
		src->put(op->s);
	}
	if (src) {
		src->mem_put(op->sendref);
		src->mem_put(op->recvref);
	}
	free(op);
}

static void fail_pending(struct r2_comm *c, int err)
{
	for (int r = 0; r < c->nranks; r++) {
		struct r2_comm_member *m = &c->m[r];
		struct r2_op *op, *next;

		for (op = m->head; op; op = next) {
			next = op->next;
			r2d_op_free(op, err);
		}
		m->head = m->tail = NULL;
		m->npending = 0;
	}
}

void r2d_comm_break(struct r2_comm *c, int err, const char *why)
{
	if (c->state == R2_COMM_DEAD)
		return;
	/* logged, kept for MSG_COMM_REASON and listed in `r2cclctl events` */
	if (!c->why[0]) /* the first reason, as broken_err keeps the first error */
		snprintf(c->why, sizeof(c->why), "%s", why);
	char subj[32];
	snprintf(subj, sizeof(subj), "communicator %u", c->id);
	r2d_health_event_of(c->d, c->serial, 2, "comm_failed", subj,
			    "%s: %s (%d ranks, tenant %s)", why, r2ccl_strerror(err), c->nranks,
			    c->tenant);
	if (c->state == R2_COMM_JOINING) {
		char msg[256];
		snprintf(msg, sizeof(msg), "%s", why);
		for (int r = 0; r < c->nranks; r++) {
			if (c->m[r].s && !c->m[r].s->closing)
				init_reply(c->m[r].s, c->m[r].init_req_id, err, msg, NULL, -1);
		}
	}
	fail_pending(c, err == R2CCL_E_MISMATCH || err == -ETIMEDOUT || err == R2CCL_E_PEER_GONE ||
				err == R2CCL_E_SHUTDOWN || err == R2CCL_E_DUP_RANK ||
				err == R2CCL_E_BOOTSTRAP || err == R2CCL_E_NO_PATH ||
				err == R2CCL_E_QUOTA
			    ? err
			    : R2CCL_E_COMM_BROKEN);
	c->state = R2_COMM_BROKEN;
	if (!c->broken_err)
		c->broken_err = err;
	if (!c->abort_err)
		c->abort_err = err;
	r2d_comm_mbox_wake(c); /* an executor waiting on peers */
}

static void comm_unlink(struct r2d *d, struct r2_comm *c)
{
	for (struct r2_comm **pp = &d->comms; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			return;
		}
	}
}

/* Called with d->lock held; drops it while joining the executor thread. */
/* ---- tombstones: communicators that failed lately ---- */

#define TOMBS 64
#define TOMB_KEEP_US (120ull * 1000000) /* longer than any bootstrap timeout in use */

struct comm_tomb {
	struct r2_uid uid;
	int status;
	uint64_t at_us;
	char why[192];
};

/* communicators that ended here lately, by key: this host's index in
 * them (a detoured chunk that still comes for another host is refused) */
struct comm_end {
	uint64_t key;
	int my_host;
	uint64_t at_us;
};

struct comm_tombs {
	struct comm_tomb t[TOMBS];
	unsigned next;
	struct comm_end e[TOMBS];
	unsigned next_end;
};

static void tomb_add(struct r2d *d, const struct r2_comm *c)
{
	struct comm_tombs *ts = d->comm_tombs;

	if (!ts && !(ts = d->comm_tombs = calloc(1, sizeof(*ts))))
		return;
	struct comm_tomb *t = &ts->t[ts->next++ % TOMBS];
	t->uid = c->uid;
	t->status = c->broken_err;
	t->at_us = r2_now_us();
	snprintf(t->why, sizeof(t->why), "%s", c->why[0] ? c->why : r2ccl_strerror(c->broken_err));
}

static void end_add(struct r2d *d, const struct r2_comm *c)
{
	struct comm_tombs *ts = d->comm_tombs;

	if (!c->hosts || c->nhosts < 2)
		return;
	if (!ts && !(ts = d->comm_tombs = calloc(1, sizeof(*ts))))
		return;
	ts->e[ts->next_end++ % TOMBS] = (struct comm_end){ c->key, c->my_host, r2_now_us() };
}

int r2d_comm_my_host_by_key(struct r2d *d, uint64_t key)
{
	struct r2_comm *c = r2d_comm_by_key_any(d, key);
	const struct comm_tombs *ts = d->comm_tombs;
	uint64_t now = r2_now_us();

	if (c)
		return c->hosts ? c->my_host : -1;
	for (int i = 0; ts && i < TOMBS; i++)
		if (ts->e[i].at_us && ts->e[i].key == key && now - ts->e[i].at_us < TOMB_KEEP_US)
			return ts->e[i].my_host;
	return -1;
}

int r2d_comm_tomb(struct r2d *d, const struct r2_uid *uid, char *why, size_t len)
{
	const struct comm_tombs *ts = d->comm_tombs;
	uint64_t now = r2_now_us();

	for (int i = 0; ts && i < TOMBS; i++) {
		const struct comm_tomb *t = &ts->t[i];
		if (t->status && now - t->at_us < TOMB_KEEP_US &&
		    !memcmp(&t->uid, uid, sizeof(*uid))) {
			snprintf(why, len, "%s", t->why);
			return t->status;
		}
	}
	return 0;
}

void r2d_comm_put(struct r2_comm *c)
{
	struct r2d *d = c->d;

	if (--c->refs > 0)
		return;
	if (c->broken_err && c->broken_err != R2CCL_E_SHUTDOWN)
		tomb_add(d, c);
	/* Still linked (dead, refs 0) while its executor ends: the send
	 * completions of the chunks that executor still lists reach its mailbox
	 * (r2d_comm_by_key_any); unlinked, the rails thread took the
	 * communicator for gone and freed them under the executor. */
	if (c->thread_started) {
		c->stop = true;
		pthread_cond_signal(&c->cond);
		r2d_comm_mbox_wake(c); /* (one pumping its mailbox) */
		pthread_mutex_unlock(&d->lock);
		pthread_join(c->thread, NULL);
		pthread_mutex_lock(&d->lock);
	}
	fail_pending(c, R2CCL_E_COMM_BROKEN);
	r2d_comm_mbox_flush(c);
	end_add(d, c);
	comm_unlink(d, c);
	pthread_cond_destroy(&c->cond);
	pthread_cond_destroy(&c->mbox_cond);
	pthread_mutex_destroy(&c->mbox_lock);
	free(c->hosts);
	free(c->rank_host);
	free(c->p2p);
	for (int r = 0; r < c->nranks; r++)
		free(c->m[r].sent);
	free(c->m);
	free(c);
}

void r2d_comm_leave_why(int rank, const char *host, enum r2_leave how, char *why, size_t len)
{
	snprintf(why, len, "rank %d%s%.64s left the communicator (%s)", rank,
		 host ? " on host " : "", host ? host : "",
		 how == R2_LEAVE_DIED ? "client died" : how == R2_LEAVE_ABORT ? "abort" : "destroy");
}

void r2d_comm_member_left(struct r2_comm *c, int rank, enum r2_leave how, uint64_t after)
{
	c->m[rank].left = true;
	if (!c->left_why[0])
		r2d_comm_leave_why(rank, c->m[rank].local ? NULL : c->hosts[c->rank_host[rank]].name,
				   how, c->left_why, sizeof(c->left_why));
	if (after < c->gone_after)
		c->gone_after = after;
	r2d_engine_fail_left(c, rank);
	r2d_comm_mbox_wake(c); /* an executor waiting in a collective */
}

bool r2d_comm_left_sent_known(const struct r2_comm *c, int from)
{
	return from >= 0 && from < c->nranks && c->m[from].left && !c->m[from].local &&
	       c->m[from].sent;
}

bool r2d_comm_sent_before_left(const struct r2_comm *c, int from, int to, uint64_t n)
{
	/* n: the receive's counter, 21 bits (rl_p2p_seq); sent: the count */
	return r2d_comm_left_sent_known(c, from) && to >= 0 && to < c->nranks &&
	       r2_p2p_ctr_before(n, c->m[from].sent[to]);
}

/* A member leaves (destroy, abort or death). Under d->lock. */
static void member_leave(struct r2_comm *c, int rank, enum r2_leave how)
{
	struct r2_comm_member *m = &c->m[rank];
	struct r2_op *op, *next;
	bool died = how == R2_LEAVE_DIED;
	char why[128];
	int others = 0;

	for (op = m->head; op; op = next) {
		next = op->next;
		r2d_op_free(op, c->d->draining ? R2CCL_E_SHUTDOWN
					       : died  ? R2CCL_E_PEER_GONE
						       : -ECANCELED);
	}
	m->head = m->tail = NULL;
	m->npending = 0;
	m->s = NULL;
	m->left = true;
	c->joined--;
	for (int r = 0; r < c->nranks; r++)
		others += c->m[r].s != NULL;
	r2d_comm_leave_why(rank, NULL, how, why, sizeof(why));
	if (c->nhosts > 1 && c->hosts && c->state == R2_COMM_READY) {
		/* the other hosts' ranks learn it now, not at op_timeout_ms */
		r2d_bootstrap_leave(c, rank, how);
		if (died && !others)
			r2d_comm_break(c, R2CCL_E_PEER_GONE, why);
	}
	if (others && c->state == R2_COMM_JOINING) {
		snprintf(why, sizeof(why), "rank %d left during initialization", rank);
		r2d_comm_break(c, c->d->draining ? R2CCL_E_SHUTDOWN : R2CCL_E_BOOTSTRAP, why);
	} else if (others && died) {
		r2d_comm_break(c, c->d->draining ? R2CCL_E_SHUTDOWN : R2CCL_E_PEER_GONE, why);
	} else if (others) {
		/* Destroyed while others still run: operations that need this
		 * rank (collectives, transfers with it) fail; transfers between
		 * the others go on (engine.c checks m->left). */
		r2d_comm_member_left(c, rank, how, c->coll_matched);
	}
	if (!others) {
		c->state = R2_COMM_DEAD;
		r2d_comm_put(c);
	}
}

/* A free 16-bit id (the member handle is id << 16 | rank), 0 when all are
 * taken: one pass over the communicators marks the live ids, one over the
 * marks finds the next free one after the last given, so the time is bounded
 * (under d->lock) whatever a client did. Dead ones still linked keep theirs. */
static uint32_t alloc_id(struct r2d *d)
{
	uint64_t used[0x10000 / 64];
	uint32_t id = d->next_comm_id;

	memset(used, 0, sizeof(used));
	used[0] = 1; /* 0 is never an id */
	for (struct r2_comm *c = d->comms; c; c = c->next)
		used[(c->id & 0xffff) / 64] |= 1ull << (c->id % 64);
	for (uint32_t n = 0; n < 0x10000; n++, id++) {
		id &= 0xffff;
		if (!(used[id / 64] & (1ull << (id % 64)))) {
			d->next_comm_id = (id + 1) & 0xffff;
			return id;
		}
	}
	return 0;
}

struct r2_comm *r2d_comm_new(struct r2d *d, const struct r2_uid *uid, int nranks,
			     const char *tenant)
{
	struct r2_comm *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->m = calloc((size_t)nranks, sizeof(*c->m));
	if (!c->m) {
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	c->d = d;
	c->key = uid->host_id ^ uid->nonce;
	c->my_host = 0;
	c->id = alloc_id(d);
	if (!c->id) {
		free(c->m);
		free(c);
		errno = EAGAIN;
		return NULL;
	}
	c->serial = ++d->comm_serial;
	pthread_mutex_init(&c->mbox_lock, NULL);
	pthread_cond_init(&c->mbox_cond, NULL);
	c->uid = *uid;
	c->nranks = nranks;
	c->nhosts = 0; /* known with the membership */
	c->state = R2_COMM_JOINING;
	c->refs = 1;
	c->created_us = r2_now_us();
	snprintf(c->tenant, sizeof(c->tenant), "%s", tenant);
	c->owner_uid = (uint32_t)-1;
	c->mode = -1;
	c->gone_after = UINT64_MAX;
	pthread_cond_init(&c->cond, NULL);
	c->next = d->comms;
	d->comms = c;
	return c;
}

/* A communicator that failed with no local rank in it has nobody to
 * destroy it: one a peer's JOIN began here whose local ranks never came
 * (a job that died, or a peer's junk). Freed here; its tombstone answers a
 * late JOIN or CommInit. Before, each stayed until the daemon stopped and
 * counted against max_comms: fuzz_peer's JOINs of made-up ids filled the
 * table within a minute and this host's own ranks were refused. Under
 * d->lock. */
static void reap_unowned(struct r2d *d)
{
	struct r2_comm *next;

	for (struct r2_comm *c = d->comms; c; c = next) {
		bool local = false;
		next = c->next;
		if (c->state != R2_COMM_BROKEN || c->refs != 1 || c->thread_started)
			continue;
		for (int r = 0; r < c->nranks && !local; r++)
			local = c->m[r].s != NULL;
		if (local)
			continue;
		c->state = R2_COMM_DEAD;
		r2d_comm_put(c); /* no executor: unlinks c alone, d->lock stays held */
	}
}

/* max_comms and max_comms_per_uid before s creates a communicator (each
 * has an executor thread). Under d->lock. */
int r2d_comm_quota(struct r2_session *s, char *err, size_t errlen)
{
	const struct r2d_caps *k = &s->d->caps;
	uint32_t n = 0, mine = 0, tenant = 0;
	struct r2_tenant_policy pol;

	if (!s->uid || !r2d_tenants_policy_at(s->d, s->tenant_idx, &pol))
		pol.max_comms = 0;
	reap_unowned(s->d); /* not only at the next tick */
	for (struct r2_comm *c = s->d->comms; c; c = c->next) {
		/* one a peer's JOIN made, no local rank in it yet, counts against
		 * that peer's cap (bootstrap.c), not against local ranks: a peer
		 * that JOINs junk must not lock this host's ranks out */
		if (c->state == R2_COMM_DEAD || r2_comm_begun_waiting(c))
			continue;
		n++;
		mine += c->owner_uid == s->uid;
		tenant += pol.max_comms && c->owner_uid &&
			  r2d_tenants_find(s->d, c->tenant) == s->tenant_idx;
	}
	if (mine >= k->comms_per_uid)
		snprintf(err, errlen, "quota max_comms_per_uid: uid %u owns %u communicators",
			 (unsigned)s->uid, mine);
	else if (n >= k->comms)
		snprintf(err, errlen, "quota max_comms: the daemon has %u communicators", n);
	else if (pol.max_comms && tenant >= pol.max_comms)
		snprintf(err, errlen, "quota max_comms of tenant %s: it owns %u communicators",
			 pol.name, tenant);
	else
		return 0;
	s->d->quota_refusals++;
	return R2CCL_E_QUOTA;
}

/* max_pending_ops: whether rank may queue one more operation on c; when it
 * may not, c breaks with the cap's name as its reason (a correct client has
 * at most a ring of operations outstanding, so the job is stuck or hostile)
 * and the queued operations are freed. Under d->lock. */
bool r2d_comm_may_queue(struct r2_comm *c, int rank)
{
	char why[160];

	if (c->m[rank].npending < c->d->caps.pending_ops)
		return true;
	snprintf(why, sizeof(why),
		 "quota max_pending_ops: rank %d queued %u operations its peers did not match",
		 rank, c->m[rank].npending);
	c->d->quota_refusals++;
	log_warn_rl("communicator %u: %s", c->id, why);
	r2d_comm_break(c, R2CCL_E_QUOTA, why);
	return false;
}

/* The tenant's max_pending_ops (root's operations are counted, never
 * refused): whether op of session s may go on c; when it may not, c breaks
 * as for max_pending_ops per rank. Under d->lock. */
bool r2d_comm_tenant_may_submit(struct r2_comm *c, struct r2_session *s, struct r2_op *op)
{
	struct r2_tenant_policy pol;
	uint32_t n;
	char why[200];

	int r = r2d_tenants_op_begin(c->d, s->tenant_idx, s->uid != 0, &n);

	if (r >= 0) {
		op->tenant1 = r > 0 ? s->tenant_idx + 1 : 0;
		return true;
	}
	if (!r2d_tenants_policy_at(c->d, s->tenant_idx, &pol))
		snprintf(pol.name, sizeof(pol.name), "?");
	snprintf(why, sizeof(why),
		 "quota max_pending_ops of tenant %s: it has %u operations submitted and not "
		 "completed",
		 pol.name, n);
	c->d->quota_refusals++;
	log_warn_rl("communicator %u: %s", c->id, why);
	r2d_comm_break(c, R2CCL_E_QUOTA, why);
	return false;
}

/* Whether s may add a rank to c (docs/security.md): the owner's uid and
 * tenant, or anyone when the owner shared it. A communicator formed on
 * another host has no local owner until its first local rank joins. */
static bool may_join(const struct r2_comm *c, const struct r2_session *s, char *err,
		     size_t errlen)
{
	if (c->owner_uid == (uint32_t)-1 || c->share == R2CCL_SHARE_ANY_UID)
		return true;
	if (c->owner_uid == s->uid && !strcmp(c->tenant, s->tenant))
		return true;
	snprintf(err, errlen,
		 "communicator %u belongs to uid %u%s; uid %u may not join it (its creator "
		 "did not set share = R2CCL_SHARE_ANY_UID)",
		 c->id, (unsigned)c->owner_uid,
		 c->owner_uid == s->uid ? " in another tenant" : "", (unsigned)s->uid);
	return false;
}

void r2d_comm_refused(struct r2_session *s, uint64_t req_id, int err, const char *why)
{
	log_warn_rl("session %llu (pid %d uid %u): communicator refused: %s",
			 (unsigned long long)s->id, (int)s->pid, (unsigned)s->uid, why);
	init_reply(s, req_id, err, why, NULL, -1);
}

extern void *r2d_comm_executor(void *arg);

void r2d_comm_ready(struct r2_comm *c)
{
	c->state = R2_COMM_READY;
	c->local_ranks = 0;
	for (int r = 0; r < c->nranks; r++)
		c->local_ranks += c->m[r].local;
	if (r2_thread_create(&c->thread, r2d_comm_executor, c) == 0) {
		char tn[16];
		snprintf(tn, sizeof(tn), "r2-exec-%u", c->id);
		pthread_setname_np(c->thread, tn);
		c->thread_started = true;
	} else {
		r2d_comm_break(c, -EAGAIN, "cannot start the communicator's executor thread");
		return;
	}
	log_info("communicator %u ready: %d ranks on %d host(s), tenant %s", c->id, c->nranks,
		 c->nhosts, c->tenant);
	for (int r = 0; r < c->nranks; r++)
		if (c->m[r].s)
			init_reply(c->m[r].s, c->m[r].init_req_id, 0, NULL, c, r);
}

void r2d_comm_handle_init(struct r2_session *s, const void *msg)
{
	const R2ccl__CommInit *m = msg;
	struct r2d *d = s->d;
	struct r2_uid uid;
	struct r2_comm *c;
	char err[192];
	bool foreign;
	int mode;

	if (m->id.len != sizeof(uid)) {
		init_reply(s, m->req_id, -EINVAL, "the unique id has the wrong length", NULL, -1);
		return;
	}
	memcpy(&uid, m->id.data, sizeof(uid));
	if (uid.magic != R2_UID_MAGIC || uid.version != 1) {
		init_reply(s, m->req_id, -EINVAL,
			   "not an R2CCL unique id (use r2ccl_get_unique_id)", NULL, -1);
		return;
	}
	if (m->nranks < 1 || m->nranks > 65536 || m->rank >= m->nranks) {
		snprintf(err, sizeof(err), "rank %u / nranks %u out of range", m->rank, m->nranks);
		init_reply(s, m->req_id, -EINVAL, err, NULL, -1);
		return;
	}
	/* the communicator's mode: the rank's, else this daemon's R2CCL_MODE */
	mode = r2d_comm_mode_parse(m->mode && m->mode[0] ? m->mode
						       : r2_param_str(&d->params, P_MODE));
	if (mode < 0) {
		snprintf(err, sizeof(err), "mode \"%.64s\" is neither balance nor hotrepair",
			 m->mode);
		init_reply(s, m->req_id, -EINVAL, err, NULL, -1);
		return;
	}
	if (d->draining) {
		init_reply(s, m->req_id, R2CCL_E_SHUTDOWN, "the daemon is shutting down", NULL, -1);
		return;
	}
	pthread_mutex_lock(&d->lock);
	c = r2d_comm_by_uid(d, &uid);
	if (uid.host_id != d->host_id && !c && uid.naddrs == 0) {
		pthread_mutex_unlock(&d->lock);
		init_reply(s, m->req_id, R2CCL_E_BOOTSTRAP,
			   "the unique id names another host's daemon but carries no address "
			   "to reach it (its daemon has no rails)",
			   NULL, -1);
		return;
	}
	if (!c) {
		/* a rank that comes after its communicator failed and was freed
		 * (every local rank that had joined left) learns why */
		char why[192];
		int st = r2d_comm_tomb(d, &uid, why, sizeof(why));
		if (st) {
			pthread_mutex_unlock(&d->lock);
			snprintf(err, sizeof(err), "the communicator failed before rank %u joined: %.120s",
				 m->rank, why);
			init_reply(s, m->req_id, st, err, NULL, -1);
			return;
		}
		int r = r2d_comm_quota(s, err, sizeof(err));
		if (r < 0) {
			pthread_mutex_unlock(&d->lock);
			r2d_comm_refused(s, m->req_id, r, err);
			return;
		}
		c = r2d_comm_new(d, &uid, (int)m->nranks, s->tenant);
		if (!c) {
			r = errno == EAGAIN ? R2CCL_E_QUOTA : -ENOMEM;
			pthread_mutex_unlock(&d->lock);
			r2d_comm_refused(s, m->req_id, r,
					 r == R2CCL_E_QUOTA
						 ? "quota comm_ids: all 65535 communicator ids "
						   "of this daemon are in use"
						 : "out of memory");
			return;
		}
	} else if (!may_join(c, s, err, sizeof(err))) {
		/* the joiner alone fails; the owner's communicator goes on */
		pthread_mutex_unlock(&d->lock);
		r2d_comm_refused(s, m->req_id, -EACCES, err);
		return;
	}
	/* a malformed join (wrong nranks, mode, a rank given twice) by another
	 * uid the owner let in fails that joiner alone; by the owner's own uid
	 * it is a bug of the job and every rank hears of it (as before) */
	foreign = c->owner_uid != (uint32_t)-1 && c->owner_uid != s->uid;
	if (c->state != R2_COMM_JOINING) {
		/* a rank that comes after the communicator failed learns why */
		int st = c->state == R2_COMM_READY ? R2CCL_E_DUP_RANK
			 : c->broken_err	    ? c->broken_err
						    : R2CCL_E_COMM_BROKEN;
		snprintf(err, sizeof(err), "communicator %u is %s; rank %u cannot join it", c->id,
			 r2d_comm_state_name(c->state), m->rank);
		pthread_mutex_unlock(&d->lock);
		init_reply(s, m->req_id, st, err, NULL, -1);
		return;
	}
	if ((int)m->nranks != c->nranks) {
		snprintf(err, sizeof(err), "rank %u says nranks %u, others said %d", m->rank,
			 m->nranks, c->nranks);
		init_reply(s, m->req_id, R2CCL_E_MISMATCH, err, NULL, -1);
		if (!foreign)
			r2d_bootstrap_fail(c, R2CCL_E_MISMATCH, err);
		pthread_mutex_unlock(&d->lock);
		return;
	}
	if (c->mode >= 0 && c->mode != mode) {
		snprintf(err, sizeof(err), "rank %u asks for mode %s, others for %s", m->rank,
			 r2d_comm_mode_name(mode), r2d_comm_mode_name(c->mode));
		init_reply(s, m->req_id, R2CCL_E_MISMATCH, err, NULL, -1);
		if (!foreign)
			r2d_bootstrap_fail(c, R2CCL_E_MISMATCH, err);
		pthread_mutex_unlock(&d->lock);
		return;
	}
	if (c->m[m->rank].s || c->m[m->rank].remote_host) {
		if (c->m[m->rank].s)
			snprintf(err, sizeof(err), "rank %u was given twice (pids %d and %d)",
				 m->rank, (int)c->m[m->rank].s->pid, (int)s->pid);
		else
			snprintf(err, sizeof(err), "rank %u was given twice (here and on host "
				 "%016llx)", m->rank,
				 (unsigned long long)c->m[m->rank].remote_host);
		init_reply(s, m->req_id, R2CCL_E_DUP_RANK, err, NULL, -1);
		if (!foreign)
			r2d_comm_break(c, R2CCL_E_DUP_RANK, err);
		pthread_mutex_unlock(&d->lock);
		return;
	}
	if (c->owner_uid == (uint32_t)-1) {
		c->owner_uid = s->uid;
		c->share = m->share == R2CCL_SHARE_ANY_UID ? R2CCL_SHARE_ANY_UID
							   : R2CCL_SHARE_OWNER;
		snprintf(c->tenant, sizeof(c->tenant), "%s", s->tenant);
	}
	c->mode = mode;
	c->m[m->rank].s = s;
	c->m[m->rank].init_req_id = m->req_id;
	c->m[m->rank].left = false;
	c->joined++;
	c->m[m->rank].local = true;
	r2d_bootstrap_joined(c);
	pthread_mutex_unlock(&d->lock);
}

static int member_rank(const struct r2_comm *c, const struct r2_session *s, int from)
{
	for (int r = from; r < c->nranks; r++)
		if (c->m[r].s == s)
			return r;
	return -1;
}

void r2d_comm_handle_destroy(struct r2_session *s, uint64_t req_id, uint32_t comm_id, bool abort)
{
	struct r2d *d = s->d;
	R2ccl__Result res = R2CCL__RESULT__INIT;
	struct r2_comm *c;
	int rank;

	/* comm_id carries the rank in its low 16 bits (see engine.c) */
	pthread_mutex_lock(&d->lock);
	c = r2d_comm_find(d, comm_id >> 16);
	rank = (int)(comm_id & 0xffff);
	if (!c || rank >= c->nranks || c->m[rank].s != s) {
		res.status = -ENOENT;
		res.error = "no such communicator in this session";
	} else {
		log_debug("communicator %u: rank %d %s", c->id, rank,
			  abort ? "aborted" : "destroyed");
		member_leave(c, rank, abort ? R2_LEAVE_ABORT : R2_LEAVE_DESTROY);
	}
	pthread_mutex_unlock(&d->lock);
	res.req_id = req_id;
	if (!res.error)
		res.error = "";
	s->src->reply(s, R2CCL__MSG_TYPE__MSG_RESULT, &res);
}

void r2d_comm_handle_reason(struct r2_session *s, uint64_t req_id, uint32_t comm_id)
{
	R2ccl__Result res = R2CCL__RESULT__INIT;
	struct r2_comm *c;
	int rank = (int)(comm_id & 0xffff);
	char why[sizeof(c->why)];

	pthread_mutex_lock(&s->d->lock);
	c = r2d_comm_find(s->d, comm_id >> 16);
	if (!c || rank >= c->nranks || c->m[rank].s != s) {
		res.status = -ENOENT;
		res.error = "no such communicator in this session";
	} else if (!c->broken_err && c->left_why[0]) {
		/* not broken, but a member left: what needed it failed */
		res.status = R2CCL_E_PEER_GONE;
		snprintf(why, sizeof(why), "%s", c->left_why);
		res.error = why;
	} else {
		res.status = c->broken_err;
		memcpy(why, c->why, sizeof(why));
		res.error = why;
	}
	pthread_mutex_unlock(&s->d->lock);
	res.req_id = req_id;
	s->src->reply(s, R2CCL__MSG_TYPE__MSG_RESULT, &res);
}

void r2d_comm_session_gone(struct r2d *d, struct r2_session *s)
{
	struct r2_comm *c, *next;

again:
	for (c = d->comms; c; c = next) {
		next = c->next;
		/* Several ranks of one session: leave them all. The last one's
		 * leave puts c, which drops d->lock while it joins c's executor:
		 * meanwhile another thread (the dispatcher's inline run, a GPU
		 * job) may put and free next. So start again from the head; the
		 * session has one membership fewer each time. */
		int r;
		while ((r = member_rank(c, s, 0)) >= 0) {
			bool last = true; /* member_leave's "others" is 0: c is put */
			for (int q = 0; q < c->nranks && last; q++)
				last = q == r || !c->m[q].s;
			member_leave(c, r, R2_LEAVE_DIED);
			if (last)
				goto again;
		}
	}
}

void r2d_comm_tick(struct r2d *d)
{
	int64_t boot = r2_param_int(&d->params, P_BOOTSTRAP_TIMEOUT_MS) * 1000;
	int64_t opt = r2_param_int(&d->params, P_OP_TIMEOUT_MS) * 1000;
	uint64_t now;
	char why[192];

	pthread_mutex_lock(&d->lock);
	r2d_bootstrap_tick(d);
	/* read the clock under the lock: an op stamped by the dispatcher while
	 * we waited for it is never "older" than now (signed differences too) */
	now = r2_now_us();
	if (now > (uint64_t)boot)
		r2d_orphans_expire(d, now - (uint64_t)boot);
	for (struct r2_comm *c = d->comms; c; c = c->next) {
		if (c->state == R2_COMM_JOINING && (int64_t)(now - c->created_us) > boot) {
			int missing = -1;
			for (int r = 0; r < c->nranks && missing < 0; r++)
				if (!c->m[r].s)
					missing = r;
			snprintf(why, sizeof(why),
				 "only %d of %d ranks joined within %llu ms (rank %d missing)",
				 c->joined, c->nranks, (unsigned long long)(boot / 1000), missing);
			r2d_comm_break(c, R2CCL_E_BOOTSTRAP, why);
			continue;
		}
		if (c->state != R2_COMM_READY)
			continue;
		for (int r = 0; r < c->nranks; r++) {
			struct r2_op *op = c->m[r].head;
			if (!op || (int64_t)(now - op->submitted_us) <= opt)
				continue;
			int absent = -1;
			for (int q = 0; q < c->nranks && absent < 0; q++)
				if (!c->m[q].head)
					absent = q;
			snprintf(why, sizeof(why),
				 "rank %d waited %llu ms for rank %d to call the matching "
				 "operation",
				 r, (unsigned long long)(opt / 1000), absent);
			r2d_comm_break(c, -ETIMEDOUT, why);
			break;
		}
	}
	reap_unowned(d);
	pthread_mutex_unlock(&d->lock);
}

void r2d_comm_destroy_all(struct r2d *d)
{
	pthread_mutex_lock(&d->lock);
	while (d->comms) {
		struct r2_comm *c = d->comms;
		while (c && c->refs == 0) /* another thread's put joins its executor */
			c = c->next;
		if (!c) {
			pthread_mutex_unlock(&d->lock);
			usleep(1000);
			pthread_mutex_lock(&d->lock);
			continue;
		}
		for (int r = 0; r < c->nranks; r++)
			c->m[r].s = NULL;
		fail_pending(c, R2CCL_E_SHUTDOWN);
		c->state = R2_COMM_DEAD;
		c->refs = 1;
		r2d_comm_put(c);
	}
	/* under the lock: the rails thread, which still runs, reads the
	 * ended communicators (r2d_comm_my_host_by_key, a detoured chunk) */
	free(d->comm_tombs);
	d->comm_tombs = NULL;
	pthread_mutex_unlock(&d->lock);
}
