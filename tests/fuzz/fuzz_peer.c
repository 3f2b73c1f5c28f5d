// SPDX-License-Identifier: MIT
/*
 * fuzz_peer: what r2ccld takes from other hosts (the rails) under libFuzzer.
 * Two parts, chosen by the input's first byte:
 *
 * - bit 7 clear: messages from a peer daemon. Three real daemons live in the
 *   process (host.h) on two loopback rails: A (host 0) and B (host 1) share
 *   a communicator formed by the real JOIN / MEMBERSHIP exchange (one rank
 *   each, fake submission sources as in tests/unit/engine_harness.c), C
 *   (host 2) shares none. The input is a list of messages, each
 *     u8 ctl | struct r2_chunk_hdr (56 bytes, as on the wire) | payload
 *   that B (or C: ctl bit 3) posts to A on rail ctl bit 0, so A's rails
 *   thread, detours, chunk mailbox, executor, bootstrap (JOIN, MEMBERSHIP,
 *   JOIN_FAIL, ABORT) and health (RAIL_EVENT, plan views, PEER_ALIVE,
 *   heartbeats) take them from the transport as they take any message. The
 *   payload is hdr.len bytes (cut to what the input holds). ctl bit 1 puts
 *   the communicator's key in hdr.comm, bit 2 the right magic (the fuzzer
 *   cannot learn a key that changes when a communicator is rebuilt; with
 *   ctl bit 4 the key of the communicator A joins at C, below); the bytes
 *   of the seeds' unique ids in a payload are replaced by the
 *   communicators' own. With mode bit 0 an AllReduce runs on A and B while
 *   the messages come, so they meet a running rail phase; both ranks must
 *   complete (any status) in time. With mode bit 1, A first joins a new
 *   2-rank communicator rooted at C as rank 1, whose rank 0 never comes: A
 *   waits for its MEMBERSHIP, which the input may send from C; C is then
 *   host 0, the coordinator whose plan views A follows. A communicator of
 *   A and B that the input broke is made again for the next input.
 * - bit 7 set: a TCP stream into the tcp provider (daemon/transport/tcp*.c):
 *   a real instance listens on 127.0.0.1, the harness connects, writes the
 *   rest of the input (the stream hello of tcp_wire.h, chunk headers,
 *   payloads) and shuts its side down; the provider must close the stream.
 *   Its completions are taken and released.
 *
 * Checks besides the sanitizers: the AllReduce ends, A's orphan chunks stay
 * within their caps and age (exec_rail_mbox.c), the TCP stream is closed.
 *
 * The harness waits for A to have taken every message: after them it sends a
 * heartbeat with a marked clock on each rail, whose answer (A's rails thread
 * answers in order) B's rails thread records as an RTT (rtt_us).
 *
 * R2CCL_FUZZ_SEEDS=DIR ./fuzz_peer writes the seed corpus and exits.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/comm.h"
#include "engine/exec_rail_int.h"
#include "engine/source.h"
#include "host.h"
#include "log.h"
#include "net/rails.h"
#include "r2ccl.pb-c.h"
#include "seeds.h"
#include "transport/transport.h"
#include "util.h"

#define MARK_DELTA_US 7000000ull /* the marker heartbeat's clock: 7 s back */
#define NELEMS 4096              /* floats of the AllReduce */
#define MAX_PAYLOAD (1u << 16)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- fake submission sources (engine/source.h) ---- */

struct fsess {
	struct r2_session s; /* what the engine sees: first */
	pthread_mutex_t lock;
	bool init_done;
	int init_status;
	char init_error[192];
	uint32_t comm_id;
	uint64_t done_tag;
	int ndone;
	struct r2_memreg mem[2];
	uint64_t next_tag;
};

static void src_complete(struct r2_session *s, uint64_t tag, int status)
{
	struct fsess *f = (struct fsess *)s;

	pthread_mutex_lock(&f->lock);
	f->ndone++;
	f->done_tag = tag;
	pthread_mutex_unlock(&f->lock);
}

static int src_reply(struct r2_session *s, uint16_t type, const void *msg)
{
	struct fsess *f = (struct fsess *)s;

	if (type == R2CCL__MSG_TYPE__MSG_COMM_INIT_REPLY) {
		const R2ccl__CommInitReply *r = msg;
		pthread_mutex_lock(&f->lock);
		f->init_done = true;
		f->init_status = r->status;
		snprintf(f->init_error, sizeof(f->init_error), "%s", r->error ? r->error : "");
		f->comm_id = r->comm_id;
		pthread_mutex_unlock(&f->lock);
	}
	return 0;
}

static void src_get(struct r2_session *s)
{
	atomic_fetch_add(&s->refs, 1);
}

static void src_put(struct r2_session *s)
{
	FZ_CHECK(atomic_fetch_sub(&s->refs, 1) > 1); /* the harness keeps one */
}

static int src_mem_resolve(struct r2_session *s, uint32_t id, uint64_t off, uint64_t len,
			   void **addr, struct r2_memreg **ref)
{
	struct fsess *f = (struct fsess *)s;

	for (int i = 0; i < 2; i++) {
		struct r2_memreg *m = &f->mem[i];
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
		FZ_CHECK(atomic_fetch_sub(&m->refs, 1) > 1);
}

static const struct r2_source_ops src_ops = {
	.complete = src_complete,
	.reply = src_reply,
	.get = src_get,
	.put = src_put,
	.mem_resolve = src_mem_resolve,
	.mem_put = src_mem_put,
};

static struct fsess *sess_new(struct fz_host *h)
{
	struct fsess *f = calloc(1, sizeof(*f));
	struct r2_session *s = &f->s;

	FZ_CHECK(f);
	pthread_mutex_init(&f->lock, NULL);
	s->d = &h->d;
	s->src = &src_ops;
	s->id = h->d.next_session_id++;
	s->fd = s->ring_fd = s->cq_efd = -1;
	s->hello_done = true;
	s->pid = getpid();
	s->uid = getuid();
	snprintf(s->tenant, sizeof(s->tenant), "fuzz");
	snprintf(s->name, sizeof(s->name), "rank-of-host%d", h->idx);
	atomic_store(&s->refs, 1);
	pthread_mutex_init(&s->cq_lock, NULL);
	s->ring = aligned_alloc(64, sizeof(*s->ring));
	FZ_CHECK(s->ring);
	memset(s->ring, 0, sizeof(*s->ring));
	s->ring->entries = R2_RING_ENTRIES;
	s->sq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	FZ_CHECK(s->sq_efd >= 0);
	for (int i = 0; i < 2; i++) {
		f->mem[i].id = (uint32_t)i + 1;
		f->mem[i].fd = -1;
		f->mem[i].size = NELEMS * sizeof(float);
		f->mem[i].addr = calloc(NELEMS, sizeof(float));
		FZ_CHECK(f->mem[i].addr);
		atomic_store(&f->mem[i].refs, 1);
	}
	f->next_tag = 1;
	pthread_mutex_lock(&h->d.lock);
	s->next = h->d.sessions;
	h->d.sessions = s;
	h->d.nsessions++;
	pthread_mutex_unlock(&h->d.lock);
	FZ_CHECK(r2d_engine_add_session(&h->d, s) == 0);
	return f;
}

/* ---- the cluster ---- */

static struct fz_host *ha, *hb, *hc;
static struct fsess *sa, *sb, *sj;
static struct r2_uid uid, seed_uid;   /* A and B's communicator */
static struct r2_uid juid, seed_juid; /* the one A joins at C */
static uint64_t key, jkey;
static uint64_t nonce = 0x5eed, jnonce = 0xc0ffee;

static bool both_init(void *arg)
{
	bool r;

	pthread_mutex_lock(&sa->lock);
	pthread_mutex_lock(&sb->lock);
	r = sa->init_done && sb->init_done;
	pthread_mutex_unlock(&sb->lock);
	pthread_mutex_unlock(&sa->lock);
	return r;
}

static void init_rank(struct fsess *f, const struct r2_uid *u, int rank)
{
	R2ccl__CommInit m = R2CCL__COMM_INIT__INIT;

	f->init_done = false;
	m.req_id = 100 + (uint64_t)rank;
	m.id.data = (uint8_t *)u;
	m.id.len = sizeof(*u);
	m.nranks = 2;
	m.rank = (uint32_t)rank;
	m.mode = "";
	r2d_comm_handle_init(&f->s, &m);
}

static void make_uid(struct r2_uid *u, struct fz_host *root, uint64_t n)
{
	memset(u, 0, sizeof(*u));
	u->magic = R2_UID_MAGIC;
	u->version = 1;
	u->host_id = root->d.host_id;
	u->nonce = n;
	r2d_uid_fill(&root->d, u);
}

/* A communicator of A and B, rooted at A; true when both ranks have it. */
static bool comm_form(void)
{
	make_uid(&uid, ha, nonce++);
	key = uid.host_id ^ uid.nonce;
	init_rank(sa, &uid, 0);
	init_rank(sb, &uid, 1);
	return fz_until(both_init, NULL, 5000) && sa->init_status == 0 && sb->init_status == 0;
}

static bool comm_ready(struct fz_host *h)
{
	struct r2_comm *c;
	bool r;

	pthread_mutex_lock(&h->d.lock);
	c = r2d_comm_by_key(&h->d, key);
	r = c && c->state == R2_COMM_READY;
	pthread_mutex_unlock(&h->d.lock);
	return r;
}

static void comm_drop(struct fsess *f)
{
	if (f->init_done && f->init_status == 0)
		r2d_comm_handle_destroy(&f->s, 1, f->comm_id, true);
	f->init_done = false;
}

/* A communicator of A and B that an input broke (A or B dropped it: a
 * forged ABORT, a peer declared gone) is made again; A and B must be able to
 * form one: what a peer sent must not keep two healthy daemons apart. */
static void comm_again(void)
{
	if (comm_ready(ha) && comm_ready(hb))
		return;
	comm_drop(sa);
	comm_drop(sb);
	if (!comm_form()) {
		fprintf(stderr, "fuzz_peer: A and B cannot form a communicator again "
				"(A: %s, status %d: %s; B: %s, status %d: %s)\n",
			sa->init_done ? "answered" : "no answer in 5 s", sa->init_status,
			sa->init_error, sb->init_done ? "answered" : "no answer in 5 s",
			sb->init_status, sb->init_error);
		abort();
	}
}

/* Rank 1 of a 2-rank communicator rooted at C, joined from A: C never sees
 * rank 0, so A's communicator waits for its MEMBERSHIP (which the input may
 * bring, from C) until the bootstrap timeout. */
static void comm_join_c(void)
{
	comm_drop(sj); /* the last one, if it formed */
	make_uid(&juid, hc, jnonce++);
	jkey = juid.host_id ^ juid.nonce;
	init_rank(sj, &juid, 1);
}

/* ---- the tcp part ---- */

static struct r2_tp *tcp;
static uint16_t tcp_port;
#define TCP_SELF_ID 0x7777ull

static void tcp_open(void)
{
	struct r2_tp_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	snprintf(cfg.ifname, sizeof(cfg.ifname), "lo");
	cfg.addr.s_addr = htonl(INADDR_LOOPBACK);
	cfg.self_id = TCP_SELF_ID;
	cfg.streams = 2;
	cfg.nodelay = true;
	cfg.max_msg = 1 << 20;
	cfg.progress_threads = 1;
	cfg.user_timeout_ms = 2000;
	FZ_CHECK(r2_tp_tcp_ops.open(&cfg, &tcp) == 0);
	FZ_CHECK(r2_tp_tcp_ops.listen_port(tcp, &tcp_port) == 0);
}

static void tcp_drain_cq(void)
{
	struct r2_tp_cqe cq[64];
	int n;

	while ((n = r2_tp_tcp_ops.poll(tcp, cq, 64)) > 0)
		for (int i = 0; i < n; i++)
			if (cq[i].type == R2_TPC_RECV && cq[i].buf)
				r2_tp_tcp_ops.release(tcp, cq[i].buf);
}

static void tcp_input(const uint8_t *data, size_t size)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(tcp_port) };
	uint64_t until;
	size_t off = 0;
	int fd;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	FZ_CHECK(fd >= 0);
	FZ_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	FZ_CHECK(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
	until = fz_now_ms() + 10000;
	while (fz_now_ms() < until) {
		uint8_t buf[4096];
		ssize_t n;

		if (off < size) {
			n = send(fd, data + off, size - off, MSG_NOSIGNAL);
			if (n > 0)
				off += (size_t)n;
			else if (n < 0 && errno != EAGAIN)
				off = size; /* the provider dropped the stream */
			if (off == size)
				shutdown(fd, SHUT_WR);
		}
		n = recv(fd, buf, sizeof(buf), 0);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			break; /* the provider closed it */
		tcp_drain_cq();
		if (n < 0) {
			struct pollfd p = { fd, POLLIN | (off < size ? POLLOUT : 0), 0 };
			poll(&p, 1, 10);
		}
	}
	if (fz_now_ms() >= until) {
		fprintf(stderr, "fuzz_peer: the tcp provider kept the stream open 10 s after "
				"its EOF\n");
		abort();
	}
	close(fd);
	tcp_drain_cq();
}

/* ---- messages to A ---- */

static bool marks_back(void *arg)
{
	struct r2_peer *p = arg;

	for (int r = 0; r < 2; r++)
		if (atomic_load(&p->rtt_us[r]) < MARK_DELTA_US)
			return false;
	return true;
}

/* Heartbeats with a marked clock from h to A on both rails; true when both
 * answers came back (A's rails thread took everything sent before). */
static bool sync_with_a(struct fz_host *h)
{
	struct r2_peer *p = r2d_rails_peer_find(&h->d, ha->d.host_id);
	uint64_t now = fz_now_ms() * 1000;

	if (!p)
		return false;
	for (int r = 0; r < 2; r++) {
		struct r2_rail *rl = &h->d.rails->rail[r];
		struct r2_chunk_hdr hh = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_HEARTBEAT,
					   .off = now - MARK_DELTA_US };
		atomic_store(&p->rtt_us[r], 0);
		if (rl->ops->post_send(rl->tp, ha->d.host_id, &hh, NULL, 0) < 0)
			return false;
	}
	return fz_until(marks_back, p, 2000);
}

static void replace_uid(uint8_t *p, size_t len, const struct r2_uid *from,
			const struct r2_uid *to)
{
	for (uint8_t *q = p; len >= sizeof(*from) &&
			     (q = memmem(q, len - (size_t)(q - p), from, sizeof(*from)));
	     q += sizeof(*from))
		memcpy(q, to, sizeof(*to));
}

static void send_msg(struct fz_host *h, int rail, struct r2_chunk_hdr *hdr, const uint8_t *p)
{
	struct r2_rail *rl = &h->d.rails->rail[rail];
	/* ctx 1: a control copy, freed by the rails thread at its SEND */
	uint8_t *copy = r2d_rails_ctrl_copy(&h->d, p, hdr->len);

	FZ_CHECK(copy);
	/* the seeds' unique ids stand for the communicators' */
	replace_uid(copy, hdr->len, &seed_uid, &uid);
	replace_uid(copy, hdr->len, &seed_juid, &juid);
	if (rl->ops->post_send(rl->tp, ha->d.host_id, hdr, copy, 1) < 0)
		r2d_rails_ctrl_free(&h->d, copy);
}

static bool done_both(void *arg)
{
	const uint64_t *tags = arg;
	bool r;

	pthread_mutex_lock(&sa->lock);
	pthread_mutex_lock(&sb->lock);
	r = sa->ndone && sa->done_tag == tags[0] && sb->ndone && sb->done_tag == tags[1];
	pthread_mutex_unlock(&sb->lock);
	pthread_mutex_unlock(&sa->lock);
	return r;
}

static uint64_t submit_allreduce(struct fsess *f)
{
	struct r2_ring_shm *ring = f->s.ring;
	uint32_t tail = atomic_load(&ring->sq_tail);
	struct r2_sqe *q = &ring->sq[tail & (R2_RING_ENTRIES - 1)];
	uint64_t one = 1;

	memset(q, 0, sizeof(*q));
	q->tag = f->next_tag++;
	q->opcode = R2_OP_ALLREDUCE;
	q->comm_id = f->comm_id;
	q->rank = f->comm_id & 0xffff;
	q->count = NELEMS;
	q->dtype = R2CCL_FLOAT32;
	q->redop = R2CCL_SUM;
	q->send_mem = 1;
	q->recv_mem = 2;
	atomic_store(&ring->sq_tail, tail + 1);
	FZ_CHECK(write(f->s.sq_efd, &one, sizeof(one)) == sizeof(one));
	return q->tag;
}

/* A's orphans (early chunks, exec_rail_mbox.c) stay within their byte cap
 * and none outlives the bootstrap timeout by more than a few ticks. */
static void check_orphans(void)
{
	struct r2d *d = &ha->d;
	uint64_t limit = (uint64_t)r2_param_int(&d->params, P_BOOTSTRAP_TIMEOUT_MS) * 1000 +
			 1000000;
	uint64_t now = r2_now_us(), bytes = 0;

	pthread_mutex_lock(&d->lock);
	for (struct r2_rmsg *m = d->orphans; m; m = m->next) {
		bytes += m->cqe.hdr.len;
		if (now > m->when_us + limit) {
			fprintf(stderr, "fuzz_peer: an orphan chunk held for %llu ms\n",
				(unsigned long long)(now - m->when_us) / 1000);
			abort();
		}
	}
	FZ_CHECK(bytes == d->orphan_bytes);
	FZ_CHECK(bytes <= (uint64_t)r2_param_int(&d->params, P_PROXY_POOL_MAX));
	pthread_mutex_unlock(&d->lock);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *seeds = getenv("R2CCL_FUZZ_SEEDS");

	signal(SIGPIPE, SIG_IGN);
	ha = fz_host_new(0, 0x3, NULL);
	hb = fz_host_new(1, 0x3, NULL);
	hc = fz_host_new(2, 0x3, NULL);
	sa = sess_new(ha);
	sb = sess_new(hb);
	sj = sess_new(ha);
	/* another uid: the communicators sj leaves waiting (one per input with
	 * mode bit 1, each until the 500 ms bootstrap timeout) count against
	 * its own max_comms_per_uid, not against A and B's ranks' */
	sj->s.uid = getuid() + 4242;
	FZ_CHECK(comm_form());
	seed_uid = uid;
	make_uid(&seed_juid, hc, jnonce);
	for (int r = 0; r < 2; r++)
		r2d_rails_connect(&hc->d, ha->d.host_id, ha->d.rails->rail[r].addr.s_addr,
				  ha->d.rails->rail[r].port);
	tcp_open();
	if (seeds)
		exit(fz_seeds_peer(&ha->d, &hb->d, &hc->d, &uid, key, &seed_juid, TCP_SELF_ID,
				   seeds) < 0 ? 1 : 0);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t tags[2] = { 0, 0 };
	unsigned mode;
	bool run_op;

	if (size < 1)
		return -1;
	mode = data[0];
	data++;
	size--;
	if (mode & 0x80) {
		tcp_input(data, size);
		return 0;
	}
	comm_again();
	if (mode & 2)
		comm_join_c();
	run_op = mode & 1;
	if (run_op) {
		tags[0] = submit_allreduce(sa);
		tags[1] = submit_allreduce(sb);
	}
	while (size > 1 + sizeof(struct r2_chunk_hdr)) {
		unsigned ctl = data[0];
		struct r2_chunk_hdr hdr;
		struct fz_host *from = ctl & 8 ? hc : hb;

		memcpy(&hdr, data + 1, sizeof(hdr));
		data += 1 + sizeof(hdr);
		size -= 1 + sizeof(hdr);
		if (ctl & 2)
			hdr.comm = ctl & 16 ? jkey : key;
		if (ctl & 4)
			hdr.magic = R2_CHUNK_MAGIC;
		if (hdr.len > size)
			hdr.len = (uint32_t)size;
		if (hdr.len > MAX_PAYLOAD)
			hdr.len = MAX_PAYLOAD;
		send_msg(from, ctl & 1, &hdr, data);
		data += hdr.len;
		size -= hdr.len;
		fz_pump_once();
	}
	sync_with_a(hb);
	sync_with_a(hc);
	if (run_op && !fz_until(done_both, tags, 10000)) {
		fprintf(stderr, "fuzz_peer: an AllReduce of A and B did not complete in 10 s\n");
		abort();
	}
	check_orphans();
	/* here, so that the input that broke A and B is the one kept */
	comm_again();
	return 0;
}
