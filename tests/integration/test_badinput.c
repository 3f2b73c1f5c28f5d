// SPDX-License-Identifier: MIT
/*
 * Integration tests: hostile and broken input to a real r2ccld.
 *
 * Every case runs against its own daemon. A healthy 2-rank communicator
 * (two libr2ccl clients driven by two threads of this process) runs an
 * allreduce before and after the bad input and must get exact results; the
 * daemon must log a clear error (checked on a distinctive phrase), drop only
 * the offending session, stay up, and exit 0 on SIGTERM at the end.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "framing.h"
#include "harness.h"
#include "r2ccl.h"
#include "r2ccl.pb-c.h"
#include "ring.h"

#define NELEM 1024

static struct th_daemon D;

/* ------------------------------------------------------------------------ */
/* libr2ccl ranks driven by threads                                         */

struct rank {
	r2ccl_client_t *cl;
	r2ccl_comm_t *comm;
	int32_t *buf;
	int rank, nranks;
	r2ccl_unique_id_t id;
	size_t count;
	int ret;
	double ms;
};

static void *th_init(void *a)
{
	struct rank *r = a;
	double t0 = th_now_ms();

	r->ret = r2ccl_comm_init_rank(r->cl, &r->comm, r->nranks, &r->id, r->rank);
	r->ms = th_now_ms() - t0;
	return NULL;
}

static void *th_allreduce(void *a)
{
	struct rank *r = a;
	double t0 = th_now_ms();

	r->ret = r2ccl_allreduce(r->comm, r->buf, r->buf, r->count, R2CCL_INT32, R2CCL_SUM);
	r->ms = th_now_ms() - t0;
	return NULL;
}

/* Runs fn on each rank in its own thread (delay_ms between starts), joins. */
static void run_ranks(void *(*fn)(void *), struct rank *r, int n, int delay_ms)
{
	pthread_t t[8];

	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(pthread_create(&t[i], NULL, fn, &r[i]), 0);
		if (delay_ms)
			usleep((useconds_t)delay_ms * 1000);
	}
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
}

static r2ccl_client_t *connect_client(const char *name)
{
	r2ccl_connect_opts_t o = R2CCL_CONNECT_OPTS_INITIALIZER;
	r2ccl_client_t *cl = NULL;
	int r;

	o.client_name = name;
	o.timeout_ms = 10000;
	r = r2ccl_connect(&o, &cl);
	ck_assert_msg(r == 0, "r2ccl_connect: %s", r2ccl_strerror(r));
	return cl;
}

/* n clients (one per rank) with a buffer each and the same unique id. */
static void ranks_connect(struct rank *r, int n, const char *name)
{
	for (int i = 0; i < n; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		r[i].cl = connect_client(name);
		r[i].rank = i;
		r[i].nranks = n;
		r[i].count = NELEM;
		ck_assert_int_eq(r2ccl_mem_alloc(r[i].cl, NELEM * sizeof(int32_t), (void **)&r[i].buf),
				 0);
	}
	ck_assert_int_eq(r2ccl_get_unique_id(r[0].cl, &r[0].id), 0);
	for (int i = 1; i < n; i++)
		r[i].id = r[0].id;
}

static void ranks_init(struct rank *r, int n)
{
	run_ranks(th_init, r, n, 0);
	for (int i = 0; i < n; i++)
		ck_assert_msg(r[i].ret == 0, "rank %d init: %s", i, r2ccl_strerror(r[i].ret));
}

static void ranks_free(struct rank *r, int n)
{
	for (int i = 0; i < n; i++) {
		if (r[i].comm)
			r2ccl_comm_destroy(r[i].comm);
		r[i].comm = NULL;
		r2ccl_disconnect(r[i].cl);
		r[i].cl = NULL;
	}
}

/* The healthy communicator of every case. */
static struct rank H[2];

static void healthy_setup(void)
{
	ranks_connect(H, 2, "healthy");
	ranks_init(H, 2);
}

/* One allreduce with exact results (int32 sums). */
static void healthy_check(int round)
{
	for (int r = 0; r < 2; r++)
		for (int i = 0; i < NELEM; i++)
			H[r].buf[i] = (r + 1) * 100000 + i * 3 + round;
	run_ranks(th_allreduce, H, 2, 0);
	for (int r = 0; r < 2; r++) {
		ck_assert_msg(H[r].ret == 0, "healthy rank %d allreduce (round %d): %s", r, round,
			      r2ccl_strerror(H[r].ret));
		for (int i = 0; i < NELEM; i++)
			ck_assert_msg(H[r].buf[i] == 300000 + i * 6 + 2 * round,
				      "healthy rank %d elem %d: %d", r, i, H[r].buf[i]);
	}
}

static void healthy_done(void)
{
	healthy_check(99);
	ranks_free(H, 2);
}

/* The start of a case: its daemon (extra arguments args), the healthy
 * communicator and its first allreduce. */
static void case_begin(const char *const *args)
{
	th_start(&D, args);
	healthy_setup();
	healthy_check(0);
}

static int daemon_sessions(void);

/* The end of a case: the healthy communicator still exact (and the daemon
 * serving `sessions` sessions, unless -1), the daemon exits 0 on SIGTERM. */
static void case_end(int sessions)
{
	healthy_check(1);
	if (sessions >= 0)
		ck_assert_int_eq(daemon_sessions(), sessions);
	healthy_done();
	th_stop_ok(&D);
}

/* ------------------------------------------------------------------------ */
/* raw control connections                                                  */

struct raw {
	int fd;
	struct r2_frame_reader rd;
	int ring_fd, sq_efd, cq_efd; /* a full (non-control) handshake */
};

static int raw_open(struct raw *c)
{
	c->fd = th_connect_raw(D.socket);
	ck_assert_msg(c->fd >= 0, "connect %s", D.socket);
	r2_frame_reader_init(&c->rd, 64u << 20);
	c->ring_fd = c->sq_efd = c->cq_efd = -1;
	return c->fd;
}

static void raw_close(struct raw *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	r2_frame_reader_reset(&c->rd);
	if (c->ring_fd >= 0)
		close(c->ring_fd);
	if (c->sq_efd >= 0)
		close(c->sq_efd);
	if (c->cq_efd >= 0)
		close(c->cq_efd);
	c->ring_fd = c->sq_efd = c->cq_efd = -1;
}

static void raw_send_msg(struct raw *c, uint16_t type, const void *msg, const int *fds, int nfds)
{
	const ProtobufCMessage *m = msg;
	size_t len = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(len + 1);
	int r;

	protobuf_c_message_pack(m, buf);
	r = r2_frame_send(c->fd, type, buf, (uint32_t)len, fds, nfds, 5000);
	free(buf);
	ck_assert_msg(r == 0, "send: %s", strerror(-r));
}

static void raw_recv(struct raw *c, struct r2_frame *f, uint16_t want)
{
	int r = r2_frame_recv(c->fd, &c->rd, f, 5000);

	ck_assert_msg(r == 1, "recv: %d (%s)", r, r < 0 ? strerror(-r) : "");
	ck_assert_msg(f->type == want, "reply type %u, expected %u", f->type, want);
}

/* Handshake; control_only: no ring (no fds in the reply). */
static void raw_hello(struct raw *c, bool control_only)
{
	R2ccl__Hello h = R2CCL__HELLO__INIT;
	R2ccl__HelloReply *rep;
	struct r2_frame f;

	h.proto_version = R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT;
	h.client_name = "raw";
	h.control_only = control_only;
	raw_send_msg(c, R2CCL__MSG_TYPE__MSG_HELLO, &h, NULL, 0);
	raw_recv(c, &f, R2CCL__MSG_TYPE__MSG_HELLO_REPLY);
	rep = r2ccl__hello_reply__unpack(NULL, f.len, f.payload);
	ck_assert_ptr_nonnull(rep);
	ck_assert_msg(rep->status == 0, "hello: %d %s", rep->status, rep->error);
	r2ccl__hello_reply__free_unpacked(rep, NULL);
	ck_assert_int_eq(f.nfds, control_only ? 0 : 3);
	if (!control_only) {
		c->ring_fd = f.fds[0];
		c->sq_efd = f.fds[1];
		c->cq_efd = f.fds[2];
		f.fds[0] = f.fds[1] = f.fds[2] = -1;
	}
	r2_frame_free(&f);
}

/* A StatusRequest answered with status 0: the session is still served.
 * Returns the number of sessions the daemon reports. */
static int raw_status(struct raw *c)
{
	R2ccl__StatusRequest q = R2CCL__STATUS_REQUEST__INIT;
	R2ccl__StatusReply *rep;
	struct r2_frame f;
	int n;

	q.req_id = 77;
	raw_send_msg(c, R2CCL__MSG_TYPE__MSG_STATUS, &q, NULL, 0);
	raw_recv(c, &f, R2CCL__MSG_TYPE__MSG_STATUS_REPLY);
	rep = r2ccl__status_reply__unpack(NULL, f.len, f.payload);
	ck_assert_ptr_nonnull(rep);
	ck_assert_int_eq(rep->status, 0);
	ck_assert_int_eq(rep->req_id, 77);
	n = (int)rep->n_sessions;
	r2ccl__status_reply__free_unpacked(rep, NULL);
	r2_frame_free(&f);
	return n;
}

static void expect_dropped(struct raw *c)
{
	/* at once when all is well; 10 s for a loaded machine */
	ck_assert_msg(th_wait_eof(c->fd, 10000) == 0, "the daemon did not close the session");
}

/* Sessions the daemon reports, from a fresh control connection. */
static int daemon_sessions(void)
{
	struct raw c;
	int n;

	raw_open(&c);
	raw_hello(&c, true);
	n = raw_status(&c) - 1; /* not counting this one */
	raw_close(&c);
	return n;
}

/* Waits (10 s at most: a loaded machine is slow) until the daemon holds at
 * most base fds (what it held before). */
static void expect_no_fd_leak(int base)
{
	double end = th_now_ms() + 10000;
	int n = -1;

	for (;;) {
		n = th_daemon_nfds(&D);
		if (n >= 0 && n <= base)
			return;
		if (th_now_ms() >= end)
			break;
		usleep(10000);
	}
	ck_abort_msg("r2ccld holds %d fds, %d before the bad input (leak)", n, base);
}

/* Bytes that protobuf-c refuses as message type desc (checked here first). */
static size_t garbage_for(const ProtobufCMessageDescriptor *desc, uint8_t *buf, size_t len)
{
	uint32_t x = 0x12345678u;

	for (int attempt = 0; attempt < 1000; attempt++) {
		ProtobufCMessage *m;

		for (size_t i = 0; i < len; i++) {
			x = x * 1103515245u + 12345u;
			buf[i] = (uint8_t)(x >> 16);
		}
		m = protobuf_c_message_unpack(desc, NULL, len, buf);
		if (!m)
			return len;
		protobuf_c_message_free_unpacked(m, NULL);
	}
	ck_abort_msg("no garbage found");
	return 0;
}

/* ------------------------------------------------------------------------ */
/* cases                                                                    */

START_TEST(truncated_frames)
{
	struct raw c;
	uint8_t hdr[16];
	int base;

	case_begin(NULL);
	base = th_daemon_nfds(&D);

	/* half a header, then close */
	raw_open(&c);
	{
		uint32_t magic = R2_FRAME_MAGIC;
		memcpy(hdr, &magic, 4);
		hdr[4] = R2CCL__MSG_TYPE__MSG_HELLO;
		hdr[5] = hdr[6] = hdr[7] = 0;
	}
	ck_assert_int_eq(send(c.fd, hdr, 8, MSG_NOSIGNAL), 8);
	raw_close(&c);
	th_expect_log(&D, "(truncated frame)", 1);

	/* half a payload, then close (before the handshake) */
	raw_open(&c);
	ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, R2CCL__MSG_TYPE__MSG_HELLO, 0, 100,
					   0, NULL, 0, "0123456789012345678901234567890123456789"
						       "0123456789",
					   50),
			 0);
	raw_close(&c);
	th_expect_log(&D, "(truncated frame)", 2);

	/* half a payload after a full handshake (a session with a ring) */
	raw_open(&c);
	raw_hello(&c, false);
	ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, R2CCL__MSG_TYPE__MSG_STATUS, 0, 64,
					   0, NULL, 0, "01234567890123456789", 20),
			 0);
	raw_close(&c);
	th_expect_log(&D, "(truncated frame)", 3);

	/* a header cut in the middle of the magic, after a handshake */
	raw_open(&c);
	raw_hello(&c, true);
	ck_assert_int_eq(send(c.fd, hdr, 3, MSG_NOSIGNAL), 3);
	raw_close(&c);
	th_expect_log(&D, "(truncated frame)", 4);

	expect_no_fd_leak(base);
	case_end(2);
}
END_TEST

START_TEST(frame_too_long)
{
	const char *const args[] = { "--max-frame", "65536", NULL };
	struct raw c;
	uint8_t *big;

	case_begin(args);

	/* exactly the maximum is fine: a StatusRequest padded with an unknown
	 * length-delimited field 15 (1 tag byte, 3 length bytes) */
	big = calloc(1, 65536);
	big[0] = (15 << 3) | 2;
	big[1] = (uint8_t)(0x80 | (65532 & 0x7f));
	big[2] = (uint8_t)(0x80 | ((65532 >> 7) & 0x7f));
	big[3] = (uint8_t)(65532 >> 14);
	raw_open(&c);
	raw_hello(&c, true);
	ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, R2CCL__MSG_TYPE__MSG_STATUS, 0,
					   65536, 0, NULL, 0, big, 65536),
			 0);
	{
		struct r2_frame f;
		R2ccl__StatusReply *rep;
		raw_recv(&c, &f, R2CCL__MSG_TYPE__MSG_STATUS_REPLY);
		rep = r2ccl__status_reply__unpack(NULL, f.len, f.payload);
		ck_assert_ptr_nonnull(rep);
		ck_assert_int_eq(rep->status, 0);
		r2ccl__status_reply__free_unpacked(rep, NULL);
		r2_frame_free(&f);
	}
	/* one byte more: dropped (the header alone is enough) */
	ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, R2CCL__MSG_TYPE__MSG_STATUS, 0,
					   65537, 0, NULL, 0, NULL, 0),
			 0);
	expect_dropped(&c);
	raw_close(&c);
	th_expect_log(&D, "length over 65536 bytes", 1);

	/* a huge length as the very first frame */
	raw_open(&c);
	ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, R2CCL__MSG_TYPE__MSG_HELLO, 0,
					   0xffffffffu, 0, NULL, 0, NULL, 0),
			 0);
	expect_dropped(&c);
	raw_close(&c);
	/* before hello the cap is max_frame_prehello (4 KiB by default) */
	th_expect_log(&D, "length over 4096 bytes", 1);

	/* bad magic and non-zero flags: the same path */
	raw_open(&c);
	ck_assert_int_eq(th_send_frame_raw(c.fd, 0xdeadbeef, R2CCL__MSG_TYPE__MSG_HELLO, 0, 0, 0,
					   NULL, 0, NULL, 0),
			 0);
	expect_dropped(&c);
	raw_close(&c);
	raw_open(&c);
	ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, R2CCL__MSG_TYPE__MSG_HELLO, 0, 0, 1,
					   NULL, 0, NULL, 0),
			 0);
	expect_dropped(&c);
	raw_close(&c);
	th_expect_log(&D, "invalid frame", 4);
	free(big);

	case_end(-1);
}
END_TEST

START_TEST(garbage_protobuf)
{
	struct raw c;
	uint8_t g[200];
	size_t n;

	case_begin(NULL);

	/* as the Hello */
	n = garbage_for(&r2ccl__hello__descriptor, g, sizeof(g));
	raw_open(&c);
	ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, R2CCL__MSG_TYPE__MSG_HELLO, 0,
					   (uint32_t)n, 0, NULL, 0, g, n),
			 0);
	expect_dropped(&c);
	raw_close(&c);
	th_expect_log(&D, "malformed request", 1);

	/* as a CommInit after a valid hello */
	n = garbage_for(&r2ccl__comm_init__descriptor, g, sizeof(g));
	raw_open(&c);
	raw_hello(&c, false);
	ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, R2CCL__MSG_TYPE__MSG_COMM_INIT, 0,
					   (uint32_t)n, 0, NULL, 0, g, n),
			 0);
	expect_dropped(&c);
	raw_close(&c);
	th_expect_log(&D, "malformed request", 2);

	/* as a MemRegister with its fd (the fd must not leak) */
	{
		int base = th_daemon_nfds(&D);
		int mfd = memfd_create("x", MFD_CLOEXEC);
		n = garbage_for(&r2ccl__mem_register__descriptor, g, sizeof(g));
		raw_open(&c);
		raw_hello(&c, false);
		ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC,
						   R2CCL__MSG_TYPE__MSG_MEM_REGISTER, 1, (uint32_t)n,
						   0, &mfd, 1, g, n),
				 0);
		expect_dropped(&c);
		raw_close(&c);
		close(mfd);
		th_expect_log(&D, "malformed request", 3);
		expect_no_fd_leak(base);
	}

	/* a request before the handshake */
	raw_open(&c);
	{
		R2ccl__StatusRequest q = R2CCL__STATUS_REQUEST__INIT;
		raw_send_msg(&c, R2CCL__MSG_TYPE__MSG_STATUS, &q, NULL, 0);
	}
	expect_dropped(&c);
	raw_close(&c);
	th_expect_log(&D, "before the handshake", 1);

	/* a second handshake */
	raw_open(&c);
	raw_hello(&c, true);
	{
		R2ccl__Hello h = R2CCL__HELLO__INIT;
		h.proto_version = R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT;
		raw_send_msg(&c, R2CCL__MSG_TYPE__MSG_HELLO, &h, NULL, 0);
	}
	expect_dropped(&c);
	raw_close(&c);
	th_expect_log(&D, "second handshake", 1);

	case_end(2);
}
END_TEST

START_TEST(unknown_type)
{
	struct raw c;

	case_begin(NULL);

	raw_open(&c);
	raw_hello(&c, true);
	ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, 999, 0, 0, 0, NULL, 0, NULL, 0), 0);
	expect_dropped(&c);
	raw_close(&c);
	th_expect_log(&D, "unknown message type 999", 1);

	/* before the handshake, with a payload; and a reply type sent to the daemon */
	raw_open(&c);
	ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, 999, 0, 4, 0, NULL, 0, "abcd", 4),
			 0);
	expect_dropped(&c);
	raw_close(&c);
	th_expect_log(&D, "unknown message type 999", 2);
	raw_open(&c);
	raw_hello(&c, true);
	ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, R2CCL__MSG_TYPE__MSG_HELLO_REPLY, 0,
					   0, 0, NULL, 0, NULL, 0),
			 0);
	expect_dropped(&c);
	raw_close(&c);
	th_expect_log(&D, "unknown message type 2", 1);
	raw_open(&c);
	raw_hello(&c, true);
	ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, 0xffff, 0, 0, 0, NULL, 0, NULL, 0),
			 0);
	expect_dropped(&c);
	raw_close(&c);
	th_expect_log(&D, "unknown message type 65535", 1);

	case_end(-1);
}
END_TEST

static void bad_version(uint32_t version)
{
	R2ccl__Hello h = R2CCL__HELLO__INIT;
	R2ccl__HelloReply *rep;
	struct r2_frame f;
	struct raw c;
	char want[64];

	raw_open(&c);
	h.proto_version = version;
	h.client_name = "old-client";
	raw_send_msg(&c, R2CCL__MSG_TYPE__MSG_HELLO, &h, NULL, 0);
	raw_recv(&c, &f, R2CCL__MSG_TYPE__MSG_HELLO_REPLY);
	ck_assert_int_eq(f.nfds, 0);
	rep = r2ccl__hello_reply__unpack(NULL, f.len, f.payload);
	ck_assert_ptr_nonnull(rep);
	ck_assert_int_eq(rep->status, R2CCL_E_PROTO_VERSION);
	ck_assert_uint_eq(rep->proto_version, R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT);
	snprintf(want, sizeof(want), "protocol version %u", version);
	ck_assert_msg(rep->error && strstr(rep->error, want), "error text: '%s'",
		      rep->error ? rep->error : "(null)");
	ck_assert_uint_eq(rep->session_id, 0);
	r2ccl__hello_reply__free_unpacked(rep, NULL);
	r2_frame_free(&f);
	expect_dropped(&c);
	raw_close(&c);
	snprintf(want, sizeof(want), "protocol version %u is not supported", version);
	th_expect_log(&D, want, 1);
}

START_TEST(wrong_protocol_version)
{
	r2ccl_client_t *cl;

	case_begin(NULL);

	bad_version(7);
	bad_version(0);
	bad_version(0xffffffffu);
	ck_assert_str_ne(r2ccl_strerror(R2CCL_E_PROTO_VERSION), "");

	/* a normal client right after is not confused */
	cl = connect_client("after-version-error");
	ck_assert_int_eq(r2ccl_client_check(cl), 0);
	{
		void *p;
		ck_assert_int_eq(r2ccl_mem_alloc(cl, 4096, &p), 0);
		ck_assert_int_eq(r2ccl_mem_free(cl, p), 0);
	}
	r2ccl_disconnect(cl);

	case_end(-1);
}
END_TEST

static int sealed_memfd(size_t size)
{
	int fd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	if (size <= (1 << 20)) /* resident (the daemon refuses sparse memfds) */
		ck_assert_int_eq(fallocate(fd, 0, 0, (off_t)size), 0);
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
	return fd;
}

/* A MemRegister of size packed into buf (64 bytes); its length. */
static size_t memreg_payload(uint64_t size, uint8_t *buf)
{
	R2ccl__MemRegister m = R2CCL__MEM_REGISTER__INIT;

	m.req_id = 5;
	m.size = size;
	return r2ccl__mem_register__pack(&m, buf);
}

static void send_memreg(struct raw *c, uint64_t size, uint16_t declared, const int *fds, int n)
{
	uint8_t buf[64];
	size_t len = memreg_payload(size, buf);

	ck_assert_int_eq(th_send_frame_raw(c->fd, R2_FRAME_MAGIC, R2CCL__MSG_TYPE__MSG_MEM_REGISTER,
					   declared, (uint32_t)len, 0, fds, n, buf, len),
			 0);
}

/* On a fresh session (its HELLO control_only or not), one frame of type
 * declaring `declared` fds with nattach attached: the daemon drops the
 * session and its log has needle n times. */
static void expect_frame_dropped(bool control_only, uint16_t type, uint16_t declared,
				 const int *fds, int nattach, const void *payload, size_t len,
				 const char *needle, int n)
{
	struct raw c;

	raw_open(&c);
	raw_hello(&c, control_only);
	ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, type, declared, (uint32_t)len, 0,
					   fds, nattach, payload, len),
			 0);
	expect_dropped(&c);
	raw_close(&c);
	th_expect_log(&D, needle, n);
}

START_TEST(fd_count_mismatch)
{
	struct raw c;
	uint8_t mr[64];
	size_t len;
	int base, f2[2], p[2];

	case_begin(NULL);
	base = th_daemon_nfds(&D);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	f2[0] = sealed_memfd(4096);
	f2[1] = p[0];

	/* header nfds 0, two fds attached */
	expect_frame_dropped(true, R2CCL__MSG_TYPE__MSG_STATUS, 0, f2, 2, NULL, 0,
			     "fd count differs from the header", 1);
	/* MEM_REGISTER declaring 1 fd, 2 attached */
	len = memreg_payload(4096, mr);
	expect_frame_dropped(false, R2CCL__MSG_TYPE__MSG_MEM_REGISTER, 1, f2, 2, mr, len,
			     "fd count differs from the header", 2);
	/* MEM_REGISTER declaring 1 fd, none attached */
	expect_frame_dropped(false, R2CCL__MSG_TYPE__MSG_MEM_REGISTER, 1, NULL, 0, mr, len,
			     "fd count differs from the header", 3);
	/* MEM_REGISTER declaring 0 and carrying 0: the handler's count is 1 */
	expect_frame_dropped(false, R2CCL__MSG_TYPE__MSG_MEM_REGISTER, 0, NULL, 0, mr, len,
			     "carries 0 file descriptors, expected 1", 1);
	/* a StatusRequest declaring and carrying 1 fd (its handler takes none) */
	expect_frame_dropped(true, R2CCL__MSG_TYPE__MSG_STATUS, 1, f2, 1, NULL, 0,
			     "carries 1 file descriptors, expected 0", 1);

	/* fds attached to payload bytes rather than to the header */
	raw_open(&c);
	raw_hello(&c, true);
	{
		/* header alone first, then one payload byte with SCM_RIGHTS */
		ck_assert_int_eq(th_send_frame_raw(c.fd, R2_FRAME_MAGIC, R2CCL__MSG_TYPE__MSG_STATUS, 0,
						   2, 0, NULL, 0, NULL, 0),
				 0);
		usleep(50000);
		union {
			char b[CMSG_SPACE(sizeof(int) * 2)];
			struct cmsghdr a;
		} cm;
		char byte = 0x08;
		struct iovec iov = { &byte, 1 };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
				     .msg_controllen = CMSG_SPACE(sizeof(int) * 2) };
		struct cmsghdr *cmh = CMSG_FIRSTHDR(&mh);
		cmh->cmsg_level = SOL_SOCKET;
		cmh->cmsg_type = SCM_RIGHTS;
		cmh->cmsg_len = CMSG_LEN(sizeof(int) * 2);
		memcpy(CMSG_DATA(cmh), f2, sizeof(int) * 2);
		ck_assert_int_eq(sendmsg(c.fd, &mh, MSG_NOSIGNAL), 1);
	}
	expect_dropped(&c);
	raw_close(&c);
	th_expect_log(&D, "invalid frame", 4);

	/* more fds than the frame maximum (declared and attached) */
	{
		int many[12];
		for (int i = 0; i < 12; i++)
			many[i] = p[1];
		expect_frame_dropped(true, R2CCL__MSG_TYPE__MSG_STATUS, 12, many, 12, NULL, 0,
				     "invalid frame", 5);
	}

	close(f2[0]);
	close(p[0]);
	close(p[1]);
	expect_no_fd_leak(base);
	case_end(2);
}
END_TEST

/* One MemRegister on c; returns the reply's status (session kept). */
static int memreg_status(struct raw *c, uint64_t size, int fd, char *err, size_t errlen)
{
	R2ccl__MemRegisterReply *rep;
	struct r2_frame f;
	int st;

	send_memreg(c, size, 1, &fd, 1);
	raw_recv(c, &f, R2CCL__MSG_TYPE__MSG_MEM_REGISTER_REPLY);
	rep = r2ccl__mem_register_reply__unpack(NULL, f.len, f.payload);
	ck_assert_ptr_nonnull(rep);
	ck_assert_int_eq(rep->req_id, 5);
	st = rep->status;
	snprintf(err, errlen, "%s", rep->error ? rep->error : "");
	r2ccl__mem_register_reply__free_unpacked(rep, NULL);
	r2_frame_free(&f);
	return st;
}

START_TEST(memreg_bad_fd)
{
	struct raw c;
	char err[256];
	int base, fd, p[2];

	case_begin(NULL);
	base = th_daemon_nfds(&D);

	raw_open(&c);
	raw_hello(&c, false);

	/* an unsealed memfd */
	fd = memfd_create("unsealed", MFD_CLOEXEC);
	ck_assert_int_eq(ftruncate(fd, 4096), 0);
	ck_assert_int_eq(memreg_status(&c, 4096, fd, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, "F_SEAL_SHRINK"), "error: %s", err);
	close(fd);

	/* a sealable memfd without F_SEAL_SHRINK */
	fd = memfd_create("grow-only", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ck_assert_int_eq(ftruncate(fd, 4096), 0);
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_GROW), 0);
	ck_assert_int_eq(memreg_status(&c, 4096, fd, err, sizeof(err)), -EPERM);
	close(fd);

	/* a pipe */
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	ck_assert_int_eq(memreg_status(&c, 4096, p[0], err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "not a memfd"), "error: %s", err);
	close(p[0]);
	close(p[1]);

	/* /dev/zero (a character device) */
	fd = open("/dev/zero", O_RDWR | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(memreg_status(&c, 4096, fd, err, sizeof(err)), -EINVAL);
	close(fd);

	/* a sealed memfd smaller than declared, and size 0 */
	fd = sealed_memfd(4096);
	ck_assert_int_eq(memreg_status(&c, 8192, fd, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "exceeds"), "error: %s", err);
	ck_assert_int_eq(memreg_status(&c, 0, fd, err, sizeof(err)), -EINVAL);
	/* an absurd size */
	ck_assert_int_ne(memreg_status(&c, UINT64_MAX, fd, err, sizeof(err)), 0);

	th_expect_log(&D, "memory registration refused", 7);
	/* the session is kept: a good registration works, and a status */
	ck_assert_int_eq(memreg_status(&c, 4096, fd, err, sizeof(err)), 0);
	close(fd);
	raw_status(&c);
	raw_close(&c);

	expect_no_fd_leak(base);
	case_end(-1);
}
END_TEST

/* ---- a rank killed mid-operation (3 processes) ---- */

static void child_rank(int rank, const r2ccl_unique_id_t *id, int ready_w, int go_r, int res_w)
{
	r2ccl_client_t *cl = NULL;
	r2ccl_comm_t *comm = NULL;
	int32_t *buf;
	int r;
	char ch;
	struct {
		int ret;
		double ms;
	} res = { 0, 0 };

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	r = r2ccl_connect(NULL, &cl);
	if (r == 0)
		r = r2ccl_mem_alloc(cl, NELEM * sizeof(int32_t), (void **)&buf);
	if (r == 0)
		r = r2ccl_comm_init_rank(cl, &comm, 3, id, rank);
	ch = r == 0 ? 'R' : 'E';
	if (write(ready_w, &ch, 1) != 1 || r != 0)
		_exit(10);
	if (read(go_r, &ch, 1) != 1)
		_exit(11);
	if (rank == 2) {
		pause(); /* the parent kills this one */
		_exit(12);
	}
	for (int i = 0; i < NELEM; i++)
		buf[i] = i;
	{
		double t0 = th_now_ms();
		res.ret = r2ccl_allreduce(comm, buf, buf, NELEM, R2CCL_INT32, R2CCL_SUM);
		res.ms = th_now_ms() - t0;
	}
	if (write(res_w, &res, sizeof(res)) != sizeof(res))
		_exit(13);
	/* the communicator is broken for good; leaving it is clean */
	r2ccl_comm_destroy(comm);
	r2ccl_disconnect(cl);
	_exit(0);
}

START_TEST(client_killed_mid_op)
{
	r2ccl_client_t *cl;
	r2ccl_unique_id_t id;
	pid_t pid[3];
	int ready[2], go[3][2], res[2][2];
	char ch;

	case_begin(NULL);

	cl = connect_client("uid-maker");
	ck_assert_int_eq(r2ccl_get_unique_id(cl, &id), 0);
	r2ccl_disconnect(cl);
	ck_assert_int_eq(pipe(ready), 0);
	for (int r = 0; r < 3; r++)
		ck_assert_int_eq(pipe(go[r]), 0);
	for (int r = 0; r < 2; r++)
		ck_assert_int_eq(pipe(res[r]), 0);
	for (int r = 0; r < 3; r++) {
		pid[r] = fork();
		ck_assert_int_ge(pid[r], 0);
		if (pid[r] == 0)
			child_rank(r, &id, ready[1], go[r][0], r < 2 ? res[r][1] : -1);
	}
	for (int r = 0; r < 3; r++) {
		ck_assert_int_eq(read(ready[0], &ch, 1), 1);
		ck_assert_msg(ch == 'R', "a rank failed to join");
	}
	for (int r = 0; r < 3; r++)
		ck_assert_int_eq(write(go[r][1], "g", 1), 1);
	usleep(300000); /* ranks 0 and 1 are waiting in the allreduce (if not yet,
			 * they still learn that rank 2 is gone) */
	kill(pid[2], SIGKILL);
	waitpid(pid[2], NULL, 0);
	for (int r = 0; r < 2; r++) {
		struct pollfd p = { res[r][0], POLLIN, 0 };
		struct {
			int ret;
			double ms;
		} out;
		int st;

		ck_assert_msg(poll(&p, 1, 20000) == 1, "rank %d hangs after rank 2 died", r);
		ck_assert_int_eq(read(res[r][0], &out, sizeof(out)), sizeof(out));
		ck_assert_msg(out.ret == R2CCL_E_PEER_GONE, "rank %d: %d (%s), expected PEER_GONE", r,
			      out.ret, r2ccl_strerror(out.ret));
		/* 300 ms of waiting before the kill, then promptly: well before
		 * op_timeout_ms (30 s by default), with room for a loaded machine */
		ck_assert_msg(out.ms < 20000, "rank %d learnt after %.0f ms", r, out.ms);
		ck_assert_int_eq(waitpid(pid[r], &st, 0), pid[r]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d exit %d", r, st);
	}
	th_expect_log(&D, "rank 2 left the communicator (client died)", 1);

	case_end(2);
}
END_TEST

START_TEST(client_never_reads)
{
	const char *const args[] = { "--max-outq", "65536", NULL };
	R2ccl__StatusRequest q = R2CCL__STATUS_REQUEST__INIT;
	uint8_t buf[32];
	size_t len;
	struct raw c;
	int sent = 0, r = 0;
	double t0;

	case_begin(args);

	raw_open(&c);
	raw_hello(&c, true);
	q.req_id = 1;
	len = r2ccl__status_request__pack(&q, buf);
	t0 = th_now_ms();
	while (sent < 20000 && th_now_ms() - t0 < 20000) {
		r = r2_frame_send(c.fd, R2CCL__MSG_TYPE__MSG_STATUS, buf, (uint32_t)len, NULL, 0,
				  2000);
		if (r < 0)
			break;
		sent++;
		if (sent % 500 == 0 && th_log_count(&D, "queue full") > 0)
			break;
	}
	ck_assert_msg(r == 0 || r == -EPIPE || r == -ECONNRESET || r == -ETIMEDOUT,
		      "send: %s after %d frames", strerror(-r), sent);
	th_expect_log(&D, "client does not read its replies (queue full)", 1);
	/* the session is gone: what is left to read ends with EOF */
	expect_dropped(&c);
	raw_close(&c);

	case_end(2);
}
END_TEST

START_TEST(thousand_connections)
{
	int base;

	case_begin(NULL);
	base = th_daemon_nfds(&D);

	for (int i = 0; i < 1000; i++) {
		struct raw c;
		R2ccl__Hello h = R2CCL__HELLO__INIT;

		raw_open(&c);
		h.proto_version = R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT;
		h.control_only = i % 8 == 1;
		switch (i % 4) {
		case 0: /* connect and drop */
			break;
		case 1: /* hello, gone without reading the reply */
			raw_send_msg(&c, R2CCL__MSG_TYPE__MSG_HELLO, &h, NULL, 0);
			break;
		case 2: /* a full handshake (a ring), then gone */
			raw_hello(&c, i % 8 == 2);
			break;
		case 3: /* mid-frame */
			ck_assert_int_eq(send(c.fd, "R2CF\x01\x00", 6, MSG_NOSIGNAL), 6);
			break;
		}
		raw_close(&c);
	}
	/* 250 truncated frames; their warnings are rate-limited (10 per 5 s) */
	th_expect_log(&D, "(truncated frame)", 10);
	expect_no_fd_leak(base);
	/* the daemon drops the sessions as it reads their ends: waited for
	 * (10 s at most), a loaded machine is slow */
	for (double end = th_now_ms() + 10000; daemon_sessions() != 2 && th_now_ms() < end;)
		usleep(10000);
	ck_assert_int_eq(daemon_sessions(), 2);

	case_end(-1);
}
END_TEST

START_TEST(mismatched_collective)
{
	struct rank m[2];

	case_begin(NULL);

	ranks_connect(m, 2, "mismatch");
	ranks_init(m, 2);
	m[0].count = 10;
	m[1].count = 11;
	run_ranks(th_allreduce, m, 2, 0);
	for (int r = 0; r < 2; r++) {
		ck_assert_msg(m[r].ret == R2CCL_E_MISMATCH, "rank %d: %d (%s)", r, m[r].ret,
			      r2ccl_strerror(m[r].ret));
		/* at once, not at op_timeout_ms (30 s by default): a bound that
		 * a loaded machine does not reach */
		ck_assert_msg(m[r].ms < 15000, "rank %d learnt after %.0f ms", r, m[r].ms);
	}
	th_expect_log(&D, "count 10", 1);
	th_expect_log(&D, "count 11", 1);
	/* the communicator stays broken */
	m[0].count = m[1].count = 10;
	run_ranks(th_allreduce, m, 2, 0);
	for (int r = 0; r < 2; r++)
		ck_assert_msg(m[r].ret == R2CCL_E_COMM_BROKEN, "rank %d after mismatch: %s", r,
			      r2ccl_strerror(m[r].ret));
	ranks_free(m, 2);

	case_end(-1);
}
END_TEST

START_TEST(rank_never_arrives)
{
	const char *const args[] = { "--op-timeout-ms", "500", NULL };
	struct rank m[2];

	case_begin(args);

	ranks_connect(m, 2, "lonely");
	ranks_init(m, 2);
	th_allreduce(&m[0]);
	ck_assert_msg(m[0].ret == -ETIMEDOUT, "rank 0 alone: %d (%s)", m[0].ret,
		      r2ccl_strerror(m[0].ret));
	/* not before the deadline (500 ms); after it, soon: 10 s, room for a
	 * loaded machine */
	ck_assert_msg(m[0].ms < 10000, "timed out after %.0f ms", m[0].ms);
	ck_assert_msg(m[0].ms >= 450, "timed out after only %.0f ms", m[0].ms);
	th_expect_log(&D, "waited 500 ms for rank 1", 1);
	/* rank 1, late, finds the communicator failed */
	th_allreduce(&m[1]);
	ck_assert_msg(m[1].ret == R2CCL_E_COMM_BROKEN, "late rank 1: %s",
		      r2ccl_strerror(m[1].ret));
	ranks_free(m, 2);

	case_end(-1);
}
END_TEST

/* Waits for the completion of tag in a raw session's ring. */
static int ring_wait(struct r2_ring_shm *ring, int cq_efd, uint64_t tag)
{
	double end = th_now_ms() + 10000; /* a loaded machine is slow */

	while (th_now_ms() < end) {
		uint32_t head = atomic_load(&ring->cq_head), tail = atomic_load(&ring->cq_tail);
		while (head != tail) {
			struct r2_cqe e = ring->cq[head & (R2_RING_ENTRIES - 1)];
			head++;
			atomic_store(&ring->cq_head, head);
			if (e.tag == tag)
				return e.status;
		}
		struct pollfd p = { cq_efd, POLLIN, 0 };
		uint64_t v;
		if (poll(&p, 1, 100) == 1 && read(cq_efd, &v, sizeof(v)) < 0)
			(void)0;
	}
	ck_abort_msg("no completion for tag %llu", (unsigned long long)tag);
	return 0;
}

static int ring_submit(struct r2_ring_shm *ring, int sq_efd, int cq_efd, struct r2_sqe *q)
{
	static uint64_t tag = 1000;
	uint32_t tail = atomic_load(&ring->sq_tail);
	uint64_t one = 1;

	q->tag = ++tag;
	ring->sq[tail & (R2_RING_ENTRIES - 1)] = *q;
	atomic_store(&ring->sq_tail, tail + 1);
	ck_assert_int_eq(write(sq_efd, &one, sizeof(one)), sizeof(one));
	return ring_wait(ring, cq_efd, q->tag);
}

START_TEST(wrong_buffers)
{
	r2ccl_client_t *cl;
	struct rank m[1];
	int32_t *heap, *p;

	case_begin(NULL);

	/* through the library: memory not from r2ccl_mem_alloc, or past its end */
	ranks_connect(m, 1, "buffers");
	ranks_init(m, 1);
	cl = m[0].cl;
	heap = calloc(NELEM, sizeof(int32_t));
	ck_assert_int_eq(r2ccl_allreduce(m[0].comm, heap, heap, NELEM, R2CCL_INT32, R2CCL_SUM),
			 R2CCL_E_BAD_BUFFER);
	ck_assert_int_eq(r2ccl_allreduce(m[0].comm, m[0].buf, heap, NELEM, R2CCL_INT32, R2CCL_SUM),
			 R2CCL_E_BAD_BUFFER);
	ck_assert_int_eq(r2ccl_allreduce(m[0].comm, m[0].buf + 1, m[0].buf + 1, 1024 * 1024,
					 R2CCL_INT32, R2CCL_SUM),
			 R2CCL_E_BAD_BUFFER);
	ck_assert_int_eq(r2ccl_mem_free(cl, heap), R2CCL_E_BAD_BUFFER);
	free(heap);
	/* the one-rank communicator still works */
	for (int i = 0; i < NELEM; i++)
		m[0].buf[i] = i;
	ck_assert_int_eq(r2ccl_allreduce(m[0].comm, m[0].buf, m[0].buf, NELEM, R2CCL_INT32,
					 R2CCL_SUM),
			 0);
	ck_assert_int_eq(m[0].buf[NELEM - 1], NELEM - 1);
	ck_assert_int_eq(r2ccl_mem_alloc(cl, 4096, (void **)&p), 0);
	ck_assert_int_eq(r2ccl_mem_free(cl, p), 0);
	ranks_free(m, 1);

	/* forged SQEs in a raw session's shared ring */
	{
		struct raw c;
		struct r2_ring_shm *ring;
		struct r2_frame f;
		uint32_t handle, mem_id;
		char err[256];
		int mfd = sealed_memfd(4096);
		struct r2_sqe q;

		raw_open(&c);
		raw_hello(&c, false);
		ring = mmap(NULL, sizeof(*ring), PROT_READ | PROT_WRITE, MAP_SHARED, c.ring_fd, 0);
		ck_assert_ptr_ne(ring, MAP_FAILED);
		{
			R2ccl__GetUniqueId g = R2CCL__GET_UNIQUE_ID__INIT;
			R2ccl__UniqueIdReply *u;
			R2ccl__CommInit ci = R2CCL__COMM_INIT__INIT;
			R2ccl__CommInitReply *cr;

			raw_send_msg(&c, R2CCL__MSG_TYPE__MSG_GET_UNIQUE_ID, &g, NULL, 0);
			raw_recv(&c, &f, R2CCL__MSG_TYPE__MSG_UNIQUE_ID_REPLY);
			u = r2ccl__unique_id_reply__unpack(NULL, f.len, f.payload);
			ck_assert_ptr_nonnull(u);
			r2_frame_free(&f);
			ci.id = u->id;
			ci.nranks = 1;
			ci.rank = 0;
			raw_send_msg(&c, R2CCL__MSG_TYPE__MSG_COMM_INIT, &ci, NULL, 0);
			r2ccl__unique_id_reply__free_unpacked(u, NULL);
			raw_recv(&c, &f, R2CCL__MSG_TYPE__MSG_COMM_INIT_REPLY);
			cr = r2ccl__comm_init_reply__unpack(NULL, f.len, f.payload);
			ck_assert_ptr_nonnull(cr);
			ck_assert_int_eq(cr->status, 0);
			handle = cr->comm_id;
			r2ccl__comm_init_reply__free_unpacked(cr, NULL);
			r2_frame_free(&f);
		}
		{
			R2ccl__MemRegisterReply *rep;
			send_memreg(&c, 4096, 1, &mfd, 1);
			raw_recv(&c, &f, R2CCL__MSG_TYPE__MSG_MEM_REGISTER_REPLY);
			rep = r2ccl__mem_register_reply__unpack(NULL, f.len, f.payload);
			ck_assert_ptr_nonnull(rep);
			ck_assert_int_eq(rep->status, 0);
			mem_id = rep->mem_id;
			r2ccl__mem_register_reply__free_unpacked(rep, NULL);
			r2_frame_free(&f);
		}
		memset(&q, 0, sizeof(q));
		q.opcode = R2_OP_ALLREDUCE;
		q.comm_id = handle;
		q.count = 16;
		q.dtype = R2CCL_INT32;
		q.send_mem = q.recv_mem = mem_id;
		ck_assert_int_eq(ring_submit(ring, c.sq_efd, c.cq_efd, &q), 0);
		q.send_mem = 999; /* no such registration */
		ck_assert_int_eq(ring_submit(ring, c.sq_efd, c.cq_efd, &q), R2CCL_E_BAD_BUFFER);
		q.send_mem = mem_id;
		q.recv_off = 4096 - 32; /* runs past the end */
		ck_assert_int_eq(ring_submit(ring, c.sq_efd, c.cq_efd, &q), R2CCL_E_BAD_BUFFER);
		q.recv_off = UINT64_MAX - 8; /* overflows */
		ck_assert_int_eq(ring_submit(ring, c.sq_efd, c.cq_efd, &q), R2CCL_E_BAD_BUFFER);
		q.recv_off = 0;
		q.count = UINT64_MAX / 2; /* size overflow */
		ck_assert_int_lt(ring_submit(ring, c.sq_efd, c.cq_efd, &q), 0);
		q.count = 16;
		q.opcode = 99;
		ck_assert_int_eq(ring_submit(ring, c.sq_efd, c.cq_efd, &q), -EINVAL);
		q.opcode = R2_OP_ALLREDUCE;
		q.dtype = 1000;
		ck_assert_int_eq(ring_submit(ring, c.sq_efd, c.cq_efd, &q), -EINVAL);
		q.dtype = R2CCL_INT32;
		q.comm_id = H[0].comm ? 0x7fff0000u : 0; /* not this session's */
		ck_assert_int_eq(ring_submit(ring, c.sq_efd, c.cq_efd, &q), -ENOENT);
		q.comm_id = handle;
		q.rank = 5; /* lies about its rank */
		ck_assert_int_eq(ring_submit(ring, c.sq_efd, c.cq_efd, &q), -ENOENT);
		q.rank = 0;
		ck_assert_int_eq(ring_submit(ring, c.sq_efd, c.cq_efd, &q), 0);
		/* the session is still served on the control socket */
		ck_assert_int_eq(memreg_status(&c, 4096, mfd, err, sizeof(err)), 0);
		munmap(ring, sizeof(*ring));
		close(mfd);
		raw_close(&c);
	}

	case_end(-1);
}
END_TEST

/* Both ranks of m are refused at once (err, well before the bootstrap
 * timeout of 30 s: within 15 s, room for a loaded machine) and the daemon
 * logs needle. */
static void expect_join_refused(struct rank *m, int err, const char *needle)
{
	pthread_t t[2];
	double t0, t1;

	/* rank 0 joins first (the message names the later rank) */
	t0 = th_now_ms();
	ck_assert_int_eq(pthread_create(&t[0], NULL, th_init, &m[0]), 0);
	ck_assert_msg(th_wait_status(&D, "\"joined\": 1,", 10000),
		      "no communicator with one rank joined within 10 s");
	t1 = th_now_ms();
	ck_assert_int_eq(pthread_create(&t[1], NULL, th_init, &m[1]), 0);
	for (int r = 0; r < 2; r++)
		pthread_join(t[r], NULL);
	for (int r = 0; r < 2; r++) {
		/* from rank 1's start: rank 0 waited for it before */
		double ms = r ? m[1].ms : m[0].ms - (t1 - t0);
		ck_assert_msg(m[r].ret == err, "rank %d: %d (%s)", r, m[r].ret,
			      r2ccl_strerror(m[r].ret));
		ck_assert_msg(ms < 15000, "rank %d learnt %.0f ms after rank 1 came", r, ms);
	}
	th_expect_log(&D, needle, 1);
}

START_TEST(duplicate_rank)
{
	struct rank m[2];

	case_begin(NULL);
	ranks_connect(m, 2, "dup");
	m[1].rank = 0;
	expect_join_refused(m, R2CCL_E_DUP_RANK, "rank 0 was given twice");
	ck_assert_ptr_null(m[0].comm);
	ck_assert_ptr_null(m[1].comm);
	ranks_free(m, 2);
	case_end(-1);
}
END_TEST

START_TEST(nranks_mismatch)
{
	struct rank m[2];

	case_begin(NULL);
	ranks_connect(m, 2, "nranks");
	m[1].nranks = 3;
	expect_join_refused(m, R2CCL_E_MISMATCH, "rank 1 says nranks 3, others said 2");
	ranks_free(m, 2);
	case_end(-1);
}
END_TEST

START_TEST(bootstrap_never_completes)
{
	const char *const args[] = { "--bootstrap-timeout-ms", "500", NULL };
	struct rank m[2];

	case_begin(args);

	ranks_connect(m, 2, "alone");
	th_init(&m[0]);
	ck_assert_msg(m[0].ret == R2CCL_E_BOOTSTRAP, "rank 0 alone: %d (%s)", m[0].ret,
		      r2ccl_strerror(m[0].ret));
	/* not before the deadline (500 ms); after it, soon: 10 s, room for a
	 * loaded machine */
	ck_assert_msg(m[0].ms < 10000, "failed after %.0f ms", m[0].ms);
	ck_assert_msg(m[0].ms >= 450, "failed after only %.0f ms", m[0].ms);
	th_expect_log(&D, "only 1 of 2 ranks joined within 500 ms (rank 1 missing)", 1);
	/* a late rank 1 cannot join the failed communicator */
	th_init(&m[1]);
	ck_assert_msg(m[1].ret == R2CCL_E_COMM_BROKEN || m[1].ret == R2CCL_E_BOOTSTRAP,
		      "late rank 1: %d (%s)", m[1].ret, r2ccl_strerror(m[1].ret));
	ranks_free(m, 2);

	case_end(-1);
}
END_TEST

/* The tests in the order they run. */
TH_MAIN("badinput", 60, truncated_frames, frame_too_long,
	garbage_protobuf, unknown_type, wrong_protocol_version, fd_count_mismatch, memreg_bad_fd,
	client_killed_mid_op, client_never_reads, thousand_connections, mismatched_collective,
	rank_never_arrives, wrong_buffers, duplicate_rank, nranks_mismatch,
	bootstrap_never_completes)
