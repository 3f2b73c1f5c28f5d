// SPDX-License-Identifier: MIT
/*
 * Unit tests of the control socket's client side (common/rpc.c), which
 * libr2ccl and r2cclctl share: dialing, one request and its reply (the reply
 * wanted, a RESULT in its place, another type, a malformed RESULT, the
 * deadline, a closed peer), HELLO. The "daemon" is this process: it queues
 * its reply on the accepted socket before the call, then reads the request.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "framing.h"
#include "r2ccl.h"
#include "rpc.h"

static char dir[] = "/tmp/r2ccl-rpc-XXXXXX";
static char path[100];
static int lfd = -1, sfd = -1; /* listening, and the accepted connection */
static struct r2_rpc c;

static void setup(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/s", dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(lfd, 4), 0);
	r2_rpc_init(&c, 1u << 20, 2000);
	ck_assert_int_eq(r2_rpc_dial(&c, path, R2_RPC_NONBLOCK | R2_RPC_SNDTIMEO), 0);
	sfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(sfd, 0);
}

static void teardown(void)
{
	r2_rpc_close(&c);
	ck_assert_int_eq(c.fd, -1);
	if (sfd >= 0)
		close(sfd);
	close(lfd);
	unlink(path);
	rmdir(dir);
}

/* Queues a frame of type carrying msg (NULL: len raw bytes of junk). */
static void daemon_sends(uint16_t type, const ProtobufCMessage *msg, size_t junk)
{
	uint8_t buf[256];
	size_t len = msg ? protobuf_c_message_pack(msg, buf) : junk;

	if (!msg)
		memset(buf, 0xff, len);
	ck_assert_int_eq(r2_frame_send(sfd, type, buf, (uint32_t)len, NULL, 0, 1000), 0);
}

static void daemon_sends_result(int status, const char *error)
{
	R2ccl__Result res = R2CCL__RESULT__INIT;

	res.status = status;
	res.error = (char *)error;
	daemon_sends(R2CCL__MSG_TYPE__MSG_RESULT, &res.base, 0);
}

/* Reads the request the client sent: it is a StatusRequest of req_id 7. */
static void daemon_gets_status_request(void)
{
	struct r2_frame_reader rd;
	R2ccl__StatusRequest *q;
	struct r2_frame f;

	r2_frame_reader_init(&rd, 1u << 20);
	ck_assert_int_eq(r2_frame_recv(sfd, &rd, &f, 1000), 1);
	ck_assert_int_eq(f.type, R2CCL__MSG_TYPE__MSG_STATUS);
	q = r2ccl__status_request__unpack(NULL, f.len, f.payload);
	ck_assert_ptr_nonnull(q);
	ck_assert_int_eq(q->req_id, 7);
	r2ccl__status_request__free_unpacked(q, NULL);
	r2_frame_free(&f);
	r2_frame_reader_reset(&rd);
}

static int call_status(uint16_t want, struct r2_frame *f, R2ccl__Result **res)
{
	R2ccl__StatusRequest q = R2CCL__STATUS_REQUEST__INIT;

	q.req_id = 7;
	return r2_rpc_call(&c, R2CCL__MSG_TYPE__MSG_STATUS, &q.base, NULL, 0, want, f, res);
}

START_TEST(dial_errors)
{
	struct r2_rpc d;
	char longp[200];

	r2_rpc_init(&d, 1024, 100);
	ck_assert_int_eq(r2_rpc_dial(&d, "/tmp/r2ccl-rpc-no-such-dir/s", 0), -ENOENT);
	r2_rpc_close(&d);
	memset(longp, 'a', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = 0;
	ck_assert_int_eq(r2_rpc_dial(&d, longp, 0), -ENAMETOOLONG);
	r2_rpc_close(&d);
	/* the fixture's socket: non-blocking as asked */
	ck_assert_int_ne(fcntl(c.fd, F_GETFL) & O_NONBLOCK, 0);
	ck_assert_int_eq(r2_rpc_dial(&d, path, 0), 0);
	ck_assert_int_eq(fcntl(d.fd, F_GETFL) & O_NONBLOCK, 0);
	r2_rpc_close(&d);
}
END_TEST

START_TEST(reply_wanted)
{
	R2ccl__StatusReply rep = R2CCL__STATUS_REPLY__INIT, *got;
	R2ccl__Result *res = (void *)1;
	struct r2_frame f;

	rep.req_id = 7;
	rep.version = "9.9";
	daemon_sends(R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &rep.base, 0);
	ck_assert_int_eq(call_status(R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &f, &res), 0);
	ck_assert_ptr_null(res);
	ck_assert_int_eq(f.type, R2CCL__MSG_TYPE__MSG_STATUS_REPLY);
	got = r2ccl__status_reply__unpack(NULL, f.len, f.payload);
	ck_assert_ptr_nonnull(got);
	ck_assert_str_eq(got->version, "9.9");
	r2ccl__status_reply__free_unpacked(got, NULL);
	r2_frame_free(&f);
	daemon_gets_status_request();
}
END_TEST

/* A reply to an earlier request (req_id 6) whose call gave up waiting comes
 * first: skipped, the call returns its own (7); a generic RESULT of 6 too.
 * Before 2026-12-07 it took the first frame, so every later call got the
 * reply to the one before it. */
START_TEST(stale_reply_skipped)
{
	R2ccl__StatusReply rep = R2CCL__STATUS_REPLY__INIT, *got;
	R2ccl__Result old = R2CCL__RESULT__INIT, *res = (void *)1;
	struct r2_frame f;

	rep.req_id = 6;
	rep.version = "stale";
	daemon_sends(R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &rep.base, 0);
	old.req_id = 6;
	old.status = -5;
	daemon_sends(R2CCL__MSG_TYPE__MSG_RESULT, &old.base, 0);
	rep.req_id = 7;
	rep.version = "mine";
	daemon_sends(R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &rep.base, 0);
	ck_assert_int_eq(call_status(R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &f, &res), 0);
	ck_assert_ptr_null(res);
	got = r2ccl__status_reply__unpack(NULL, f.len, f.payload);
	ck_assert_ptr_nonnull(got);
	ck_assert_uint_eq(got->req_id, 7);
	ck_assert_str_eq(got->version, "mine");
	r2ccl__status_reply__free_unpacked(got, NULL);
	r2_frame_free(&f);
	daemon_gets_status_request();
}
END_TEST

START_TEST(result_in_place)
{
	R2ccl__Result *res = NULL;
	struct r2_frame f;

	daemon_sends_result(-EOPNOTSUPP, "not here");
	ck_assert_int_eq(call_status(R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &f, &res), R2_RPC_RESULT);
	ck_assert_ptr_nonnull(res);
	ck_assert_int_eq(res->status, -EOPNOTSUPP);
	ck_assert_str_eq(res->error, "not here");
	ck_assert_ptr_null(f.payload);
	r2ccl__result__free_unpacked(res, NULL);
	daemon_gets_status_request();
}
END_TEST

START_TEST(result_wanted)
{
	R2ccl__Result *res = NULL, *got;
	struct r2_frame f;

	daemon_sends_result(0, "");
	ck_assert_int_eq(call_status(R2CCL__MSG_TYPE__MSG_RESULT, &f, &res), 0);
	ck_assert_ptr_null(res);
	ck_assert_int_eq(f.type, R2CCL__MSG_TYPE__MSG_RESULT);
	got = r2ccl__result__unpack(NULL, f.len, f.payload);
	ck_assert_ptr_nonnull(got);
	ck_assert_int_eq(got->status, 0);
	r2ccl__result__free_unpacked(got, NULL);
	r2_frame_free(&f);
}
END_TEST

START_TEST(unexpected_type)
{
	R2ccl__Result *res = NULL;
	R2ccl__RailsReply rr = R2CCL__RAILS_REPLY__INIT;
	struct r2_frame f;

	daemon_sends(R2CCL__MSG_TYPE__MSG_RAILS_REPLY, &rr.base, 0);
	ck_assert_int_eq(call_status(R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &f, &res),
			 R2_RPC_UNEXPECTED);
	ck_assert_int_eq(f.type, R2CCL__MSG_TYPE__MSG_RAILS_REPLY);
	ck_assert_ptr_null(f.payload);
	ck_assert_ptr_null(res);
}
END_TEST

START_TEST(malformed_result)
{
	R2ccl__Result *res = NULL;
	struct r2_frame f;

	daemon_sends(R2CCL__MSG_TYPE__MSG_RESULT, NULL, 16);
	ck_assert_int_eq(call_status(R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &f, &res), -EPROTO);
	ck_assert_ptr_null(res);
}
END_TEST

START_TEST(deadline_and_timeout)
{
	R2ccl__Result *res = NULL;
	struct r2_frame f;

	/* nothing answers within the timeout */
	c.timeout_ms = 100;
	ck_assert_int_eq(call_status(R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &f, &res), -ETIMEDOUT);
	/* a deadline already past: no wait for the reply at all */
	c.deadline_ms = r2_rpc_now_ms() - 1;
	daemon_sends_result(0, "");
	ck_assert_int_eq(call_status(R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &f, &res), -ETIMEDOUT);
}
END_TEST

START_TEST(peer_closed)
{
	R2ccl__Result *res = NULL;
	struct r2_frame f;
	int r;

	close(sfd);
	sfd = -1;
	r = call_status(R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &f, &res);
	ck_assert_msg(r == -ECONNRESET || r == -EPIPE, "closed peer: %d", r);
}
END_TEST

START_TEST(hello)
{
	R2ccl__Hello h;

	r2_rpc_hello_init(&h, "me", true);
	ck_assert_int_eq(h.proto_version, R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT);
	ck_assert_str_eq(h.client_name, "me");
	ck_assert_str_eq(h.lib_version, R2CCL_VERSION_STRING);
	ck_assert(h.control_only);
	r2_rpc_hello_init(&h, "lib", false);
	ck_assert(!h.control_only);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("rpc");
	TCase *tc = tcase_create("rpc");
	SRunner *sr;
	int failed;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, dial_errors);
	tcase_add_test(tc, reply_wanted);
	tcase_add_test(tc, stale_reply_skipped);
	tcase_add_test(tc, result_in_place);
	tcase_add_test(tc, result_wanted);
	tcase_add_test(tc, unexpected_type);
	tcase_add_test(tc, malformed_result);
	tcase_add_test(tc, deadline_and_timeout);
	tcase_add_test(tc, peer_closed);
	tcase_add_test(tc, hello);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
