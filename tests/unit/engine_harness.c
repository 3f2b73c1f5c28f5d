// SPDX-License-Identifier: MIT
/* The in-process cluster of the engine's unit tests (engine_harness.h). */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "control/control.h"
#include "engine_harness.h"
#include "lbhost.h"
#include "engine/source.h"
#include "net/health.h"
#include "r2ccl.pb-c.h"

static struct th_host *hosts[TH_MAX_HOSTS];

uint64_t th_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- the fake submission source (engine/source.h) ---- */

static struct th_sess *sess_of(struct r2_session *s)
{
	return (struct th_sess *)s; /* s is the first member */
}

static void src_complete(struct r2_session *s, uint64_t tag, int status)
{
	struct th_sess *t = sess_of(s);

	pthread_mutex_lock(&t->lock);
	ck_assert_int_lt(t->ndone, TH_MAX_DONE);
	t->done[t->ndone].tag = tag;
	t->done[t->ndone].status = status;
	t->ndone++;
	pthread_mutex_unlock(&t->lock);
}

static int src_reply(struct r2_session *s, uint16_t type, const void *msg)
{
	struct th_sess *t = sess_of(s);

	if (type == R2CCL__MSG_TYPE__MSG_COMM_INIT_REPLY) {
		const R2ccl__CommInitReply *r = msg;
		pthread_mutex_lock(&t->lock);
		t->init_done = true;
		t->init_status = r->status;
		t->comm_id = r->comm_id;
		t->nhosts = r->nhosts;
		pthread_mutex_unlock(&t->lock);
	} else if (type == R2CCL__MSG_TYPE__MSG_RESULT) {
		const R2ccl__Result *r = msg;
		pthread_mutex_lock(&t->lock);
		t->nresults++;
		t->result_status = r->status;
		snprintf(t->result_error, sizeof(t->result_error), "%s", r->error ? r->error : "");
		pthread_mutex_unlock(&t->lock);
	}
	return 0;
}

static void src_get(struct r2_session *s)
{
	atomic_fetch_add(&s->refs, 1);
}

static void src_put(struct r2_session *s)
{
	ck_assert_int_gt(atomic_fetch_sub(&s->refs, 1), 1); /* the harness keeps one */
}

static int src_mem_resolve(struct r2_session *s, uint32_t id, uint64_t off, uint64_t len,
			   void **addr, struct r2_memreg **ref)
{
	struct th_sess *t = sess_of(s);

	for (int i = 0; i < t->nmem; i++) {
		struct r2_memreg *m = &t->mem[i];
		if (m->id != id)
			continue;
		if (off > m->size || len > m->size - off)
			return R2CCL_E_BAD_BUFFER;
		atomic_fetch_add(&m->refs, 1);
		*addr = (char *)m->addr + off;
		*ref = m;
		return 0;
	}
	return R2CCL_E_BAD_BUFFER;
}

static void src_mem_put(struct r2_memreg *m)
{
	if (m)
		ck_assert_int_gt(atomic_fetch_sub(&m->refs, 1), 1);
}

static const struct r2_source_ops src_ops = {
	.complete = src_complete,
	.reply = src_reply,
	.get = src_get,
	.put = src_put,
	.mem_resolve = src_mem_resolve,
	.mem_put = src_mem_put,
};

/* ---- hosts ---- */

bool th_slow_silence;

struct th_host *th_host_new(int idx, uint32_t rail_mask, const char *const *params)
{
	static const char *const defaults[] = {
		"log_level=warn",   "hb_interval=20000",	"hb_misses=3",
		"peer_timeout_ms=600", "recover_stable_ms=200", "bootstrap_timeout_ms=10000",
		"op_timeout_ms=20000", "reduce_threads=1",	"apply_threads=0",
		"spin_us=0",	       "chunk_size=64K",	"inline_max=4K",
		"proxy_pool_max=64M",  "proxy_buf_size=1M",	NULL
	};
	/* the same, silence and send stalls judged after 500 ms (th_slow_silence) */
	static const char *const slow[] = {
		"log_level=warn",   "hb_interval=20000",	"hb_misses=25",
		"hb_stall_misses=25",  "peer_timeout_ms=600",	"recover_stable_ms=200",
		"bootstrap_timeout_ms=10000", "op_timeout_ms=20000", "reduce_threads=1",
		"apply_threads=0",     "spin_us=0",		"chunk_size=64K",
		"inline_max=4K",       "proxy_pool_max=64M",	"proxy_buf_size=1M",
		NULL
	};
	struct th_host *h = calloc(1, sizeof(*h));
	const struct r2t_host_cfg cfg = { .idx = idx, .rail_mask = rail_mask,
					  .defaults = th_slow_silence ? slow : defaults,
					  .params = params, .src = R2_PS_CLI, .name = "host" };
	char err[256] = "";

	ck_assert_ptr_nonnull(h);
	ck_assert(idx >= 0 && idx < TH_MAX_HOSTS && !hosts[idx]);
	h->idx = idx;
	ck_assert_msg(r2t_host_start(&h->d, &h->loop, &cfg, err, sizeof(err)) == 0, "host %d: %s", idx,
		      err);
	ck_assert_int_eq(h->d.rails->n, __builtin_popcount(rail_mask));
	hosts[idx] = h;
	return h;
}

struct r2_tp *th_tp(struct th_host *h, int r)
{
	ck_assert(r >= 0 && r < h->d.rails->n);
	return h->d.rails->rail[r].tp;
}

void th_host_free(struct th_host *h)
{
	if (!h)
		return;
	struct r2d *d = &h->d;

	for (int i = 0; i < h->nsess; i++)
		if (!h->sess[i]->gone)
			th_sess_die(h->sess[i]);
	/* as the control layer stops (server.c finish) */
	r2d_rails_quiesce(d);
	uv_close((uv_handle_t *)&d->rails->async, NULL);
	r2d_health_close(d);
	hosts[h->idx] = NULL;
	ck_assert_int_eq(uv_run(&h->loop, UV_RUN_DEFAULT), 0);
	r2d_engine_stop(d);
	r2d_comm_destroy_all(d);
	r2d_rails_stop(d);
	r2d_orphans_free(d);
	ck_assert_int_eq(uv_loop_close(&h->loop), 0);
	for (int i = 0; i < h->nsess; i++) {
		struct th_sess *t = h->sess[i];
		ck_assert_int_eq(atomic_load(&t->s.refs), 1); /* every operation let go */
		for (int m = 0; m < t->nmem; m++) {
			ck_assert_int_eq(atomic_load(&t->mem[m].refs), 1);
			free(t->mem[m].addr);
		}
		close(t->s.sq_efd);
		free(t->s.ring);
		pthread_mutex_destroy(&t->lock);
		pthread_mutex_destroy(&t->s.cq_lock);
		free(t);
	}
	r2_params_free(&d->params);
	pthread_mutex_destroy(&d->lock);
	free(h);
	/* no receive buffer went back while a send still read it (the
	 * transport contract; a real provider would put other bytes on the
	 * wire): every test that stops a host checks it */
	ck_assert_uint_eq(r2_lb_misuse(), 0);
}

/* ---- sessions ---- */

struct th_sess *th_sess_new(struct th_host *h)
{
	struct th_sess *t = calloc(1, sizeof(*t));
	struct r2_session *s = &t->s;

	ck_assert_ptr_nonnull(t);
	ck_assert_int_lt(h->nsess, TH_MAX_SESS);
	t->h = h;
	pthread_mutex_init(&t->lock, NULL);
	s->d = &h->d;
	s->src = &src_ops;
	s->id = h->d.next_session_id++;
	s->fd = s->ring_fd = s->cq_efd = -1;
	s->hello_done = true;
	s->pid = getpid();
	s->uid = getuid();
	s->gid = getgid();
	snprintf(s->tenant, sizeof(s->tenant), "test");
	snprintf(s->name, sizeof(s->name), "rank-of-host%d", h->idx);
	atomic_store(&s->refs, 1);
	pthread_mutex_init(&s->cq_lock, NULL);
	s->ring = aligned_alloc(64, sizeof(*s->ring));
	ck_assert_ptr_nonnull(s->ring);
	memset(s->ring, 0, sizeof(*s->ring));
	s->ring->entries = R2_RING_ENTRIES;
	s->sq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ck_assert_int_ge(s->sq_efd, 0);
	t->next_tag = 1;
	pthread_mutex_lock(&h->d.lock);
	s->next = h->d.sessions;
	h->d.sessions = s;
	h->d.nsessions++;
	pthread_mutex_unlock(&h->d.lock);
	ck_assert_int_eq(r2d_engine_add_session(&h->d, s), 0);
	h->sess[h->nsess++] = t;
	return t;
}

void th_sess_die(struct th_sess *t)
{
	struct r2d *d = &t->h->d;

	r2d_engine_remove_session(d, &t->s);
	pthread_mutex_lock(&d->lock);
	t->s.dead = true;
	r2d_comm_session_gone(d, &t->s);
	pthread_mutex_unlock(&d->lock);
	t->gone = true;
}

uint32_t th_mem(struct th_sess *s, uint64_t size, void **addr)
{
	struct r2_memreg *m;

	ck_assert_int_lt(s->nmem, TH_MAX_MEM);
	m = &s->mem[s->nmem++];
	m->id = (uint32_t)s->nmem;
	m->fd = -1;
	m->size = size;
	m->addr = calloc(1, size ? size : 1);
	ck_assert_ptr_nonnull(m->addr);
	atomic_store(&m->refs, 1);
	*addr = m->addr;
	return m->id;
}

void th_uid(struct th_host *h, struct r2_uid *uid)
{
	static uint64_t nonce = 0x5eed;

	memset(uid, 0, sizeof(*uid));
	uid->magic = R2_UID_MAGIC;
	uid->version = 1;
	uid->host_id = h->d.host_id;
	uid->nonce = nonce++;
	r2d_uid_fill(&h->d, uid);
}

void th_init(struct th_sess *s, const struct r2_uid *uid, int nranks, int rank)
{
	R2ccl__CommInit m = R2CCL__COMM_INIT__INIT;

	m.req_id = 100 + (uint64_t)rank;
	m.id.data = (uint8_t *)uid;
	m.id.len = sizeof(*uid);
	m.nranks = (uint32_t)nranks;
	m.rank = (uint32_t)rank;
	m.mode = "";
	r2d_comm_handle_init(&s->s, &m);
}

struct init_wait {
	struct th_sess **ss;
	int n;
};

static bool all_init(void *arg)
{
	struct init_wait *w = arg;
	bool all = true;

	for (int i = 0; i < w->n; i++) {
		pthread_mutex_lock(&w->ss[i]->lock);
		all &= w->ss[i]->init_done;
		pthread_mutex_unlock(&w->ss[i]->lock);
	}
	return all;
}

bool th_wait_init(struct th_sess **ss, int n, int timeout_ms)
{
	struct init_wait w = { ss, n };

	return th_until(all_init, &w, timeout_ms);
}

void th_cluster(struct th_host **hs, int nhosts, int rph, uint32_t rail_mask,
		struct th_sess **ss, const char *const *params)
{
	struct r2_uid uid;

	for (int i = 0; i < nhosts; i++)
		hs[i] = th_host_new(i, rail_mask, params);
	th_uid(hs[0], &uid);
	for (int i = 0; i < nhosts; i++)
		for (int k = 0; k < rph; k++) {
			ss[i * rph + k] = th_sess_new(hs[i]);
			th_init(ss[i * rph + k], &uid, nhosts * rph, i * rph + k);
		}
	ck_assert(th_wait_init(ss, nhosts * rph, 10000));
	for (int r = 0; r < nhosts * rph; r++) {
		ck_assert_int_eq(ss[r]->init_status, 0);
		ck_assert_uint_eq(ss[r]->comm_id & 0xffff, (uint32_t)r);
		ck_assert_uint_eq(ss[r]->nhosts, (uint32_t)nhosts);
	}
}

void th_free_all(struct th_host **hs, int n)
{
	for (int i = n - 1; i >= 0; i--)
		th_host_free(hs[i]);
}

int th_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int nf;

	srunner_run_all(sr, CK_NORMAL);
	nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}

/* ---- operations ---- */

uint64_t th_submit(struct th_sess *s, uint32_t opcode, uint64_t count, uint32_t dtype,
		   uint32_t redop, int root, uint32_t send_mem, uint32_t recv_mem)
{
	struct r2_ring_shm *ring = s->s.ring;
	uint32_t tail = atomic_load(&ring->sq_tail);
	struct r2_sqe *q = &ring->sq[tail & (R2_RING_ENTRIES - 1)];
	uint64_t one = 1;

	ck_assert_uint_lt(tail - atomic_load(&ring->sq_head), R2_RING_ENTRIES);
	memset(q, 0, sizeof(*q));
	q->tag = s->next_tag++;
	q->opcode = opcode;
	q->comm_id = s->comm_id;
	q->rank = s->comm_id & 0xffff;
	q->count = count;
	q->dtype = dtype;
	q->redop = redop;
	q->root = root;
	q->send_mem = send_mem;
	q->recv_mem = recv_mem;
	atomic_store(&ring->sq_tail, tail + 1);
	ck_assert_int_eq(write(s->s.sq_efd, &one, sizeof(one)), (int)sizeof(one));
	return q->tag;
}

struct done_wait {
	struct th_sess *s;
	uint64_t tag;
	int status;
};

static bool done(void *arg)
{
	struct done_wait *w = arg;
	bool found = false;

	pthread_mutex_lock(&w->s->lock);
	for (int i = 0; i < w->s->ndone && !found; i++)
		if (w->s->done[i].tag == w->tag) {
			w->status = w->s->done[i].status;
			found = true;
		}
	pthread_mutex_unlock(&w->s->lock);
	return found;
}

int th_wait(struct th_sess *s, uint64_t tag, int timeout_ms)
{
	struct done_wait w = { s, tag, TH_TIMEOUT };

	th_until(done, &w, timeout_ms);
	return w.status;
}

/* ---- the loops ---- */

static void pump_once(void)
{
	uint64_t now = th_now_ms();

	for (int i = 0; i < TH_MAX_HOSTS; i++) {
		struct th_host *h = hosts[i];
		if (!h)
			continue;
		uv_run(&h->loop, UV_RUN_NOWAIT);
		if (now - h->last_tick_us / 1000 >= 20) { /* control's tick */
			h->last_tick_us = now * 1000;
			r2d_comm_tick(&h->d);
		}
	}
}

void th_pump(int ms)
{
	uint64_t until = th_now_ms() + (uint64_t)ms;

	do {
		pump_once();
		usleep(500);
	} while (th_now_ms() < until);
}

bool th_until(bool (*cond)(void *arg), void *arg, int timeout_ms)
{
	uint64_t until = th_now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		if (cond(arg))
			return true;
		if (th_now_ms() >= until)
			return cond(arg);
		pump_once();
		usleep(500);
	}
}
