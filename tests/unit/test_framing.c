// SPDX-License-Identifier: MIT
/* Unit tests of the control-socket framing (common/framing.c). */
#include <check.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "framing.h"
#include "unit_support.h"

static int sv[2];

static void setup(void)
{
	tu_fds_mark();
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static void teardown(void)
{
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	/* every test ends with nothing leaked */
	tu_fds_check();
}

static void make_hdr(uint8_t *b, uint32_t magic, uint16_t type, uint16_t nfds, uint32_t len,
		     uint32_t flags)
{
	struct r2_frame_hdr h = {
		.magic = htole32(magic),
		.type = htole16(type),
		.nfds = htole16(nfds),
		.len = htole32(len),
		.flags = htole32(flags),
	};

	memcpy(b, &h, sizeof(h));
}

/* Raw sendmsg of buf with nfds descriptors attached. */
static void raw_send(int s, const void *buf, size_t len, const int *fds, int nfds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * 16)];
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

	memset(cbuf, 0, sizeof(cbuf));
	if (nfds) {
		struct cmsghdr *c;

		msg.msg_control = cbuf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	ck_assert_int_eq(sendmsg(s, &msg, MSG_NOSIGNAL), (ssize_t)len);
}

static int make_memfd(int i)
{
	char name[32];
	int fd;

	snprintf(name, sizeof(name), "r2test%d", i);
	fd = memfd_create(name, MFD_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 4096 * (i + 1)), 0);
	return fd;
}

static void assert_same_file(int a, int b)
{
	struct stat sa, sb;

	ck_assert_int_eq(fstat(a, &sa), 0);
	ck_assert_int_eq(fstat(b, &sb), 0);
	ck_assert_uint_eq(sa.st_ino, sb.st_ino);
	ck_assert_uint_eq(sa.st_dev, sb.st_dev);
	ck_assert_int_ne(a, b);
}

static void close_all(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

START_TEST(test_round_trip_fds)
{
	/* _i = number of fds, 0..8; alternate memfds and pipes */
	int nfds = _i;
	int fds[R2_FRAME_MAX_FDS], pipes[R2_FRAME_MAX_FDS][2];
	char payload[1000];
	struct r2_frame_reader r;
	struct r2_frame f;

	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (char)(i * 7 + nfds);
	for (int i = 0; i < nfds; i++) {
		pipes[i][0] = pipes[i][1] = -1;
		if (i % 2) {
			ck_assert_int_eq(pipe2(pipes[i], O_CLOEXEC), 0);
			fds[i] = pipes[i][0];
		} else {
			fds[i] = make_memfd(i);
		}
	}
	ck_assert_int_eq(r2_frame_send(sv[0], 42, payload, sizeof(payload), fds, nfds, 1000), 0);
	r2_frame_reader_init(&r, 0);
	ck_assert_int_eq(r2_frame_recv(sv[1], &r, &f, 1000), 1);
	ck_assert_uint_eq(f.type, 42);
	ck_assert_uint_eq(f.nfds, nfds);
	ck_assert_uint_eq(f.len, sizeof(payload));
	ck_assert_mem_eq(f.payload, payload, sizeof(payload));
	for (int i = 0; i < nfds; i++) {
		assert_same_file(fds[i], f.fds[i]);
		ck_assert_int_eq(fcntl(f.fds[i], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	}
	for (int i = nfds; i < R2_FRAME_MAX_FDS; i++)
		ck_assert_int_eq(f.fds[i], -1);
	/* a received pipe end works */
	if (nfds >= 2) {
		char c = 0;

		ck_assert_int_eq(write(pipes[1][1], "x", 1), 1);
		ck_assert_int_eq(read(f.fds[1], &c, 1), 1);
		ck_assert_int_eq(c, 'x');
	}
	r2_frame_free(&f);
	r2_frame_free(&f); /* idempotent */
	r2_frame_reader_reset(&r);
	close_all(fds, nfds);
	for (int i = 0; i < nfds; i++)
		if (i % 2)
			close(pipes[i][1]);
}
END_TEST

START_TEST(test_zero_length)
{
	struct r2_frame_reader r;
	struct r2_frame f;

	ck_assert_int_eq(r2_frame_send(sv[0], 7, NULL, 0, NULL, 0, -1), 0);
	ck_assert_int_eq(r2_frame_send(sv[0], 8, "ab", 2, NULL, 0, -1), 0);
	r2_frame_reader_init(&r, 0);
	ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), 1);
	ck_assert_uint_eq(f.type, 7);
	ck_assert_uint_eq(f.len, 0);
	ck_assert_ptr_nonnull(f.payload);
	r2_frame_free(&f);
	/* the next frame follows without a byte lost */
	ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), 1);
	ck_assert_uint_eq(f.type, 8);
	ck_assert_uint_eq(f.len, 2);
	ck_assert_mem_eq(f.payload, "ab", 2);
	r2_frame_free(&f);
	/* nothing more: the non-blocking reader says "need more" */
	ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), 0);
	ck_assert_int_eq(r2_frame_recv(sv[1], &r, &f, 50), -ETIMEDOUT);
}
END_TEST

START_TEST(test_many_frames_with_fds)
{
	/* back-to-back frames: each frame's fds stay with that frame */
	struct r2_frame_reader r;
	struct r2_frame f;
	int a = make_memfd(0), b = make_memfd(1);
	int two[2] = { a, b };

	ck_assert_int_eq(r2_frame_send(sv[0], 1, "one", 3, &a, 1, -1), 0);
	ck_assert_int_eq(r2_frame_send(sv[0], 2, "two", 3, NULL, 0, -1), 0);
	ck_assert_int_eq(r2_frame_send(sv[0], 3, "three", 5, two, 2, -1), 0);
	r2_frame_reader_init(&r, 0);
	ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), 1);
	ck_assert_uint_eq(f.nfds, 1);
	assert_same_file(a, f.fds[0]);
	r2_frame_free(&f);
	ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), 1);
	ck_assert_uint_eq(f.type, 2);
	ck_assert_uint_eq(f.nfds, 0);
	r2_frame_free(&f);
	ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), 1);
	ck_assert_uint_eq(f.nfds, 2);
	assert_same_file(a, f.fds[0]);
	assert_same_file(b, f.fds[1]);
	r2_frame_free(&f);
	close(a);
	close(b);
}
END_TEST

START_TEST(test_truncated_then_close)
{
	struct r2_frame_reader r;
	struct r2_frame f;
	uint8_t buf[R2_FRAME_HDR_SIZE + 10];
	int m = make_memfd(0);

	make_hdr(buf, R2_FRAME_MAGIC, 5, 1, 100, 0);
	memset(buf + R2_FRAME_HDR_SIZE, 'p', 10);
	raw_send(sv[0], buf, sizeof(buf), &m, 1);
	close(m);
	close(sv[0]);
	sv[0] = -1;
	r2_frame_reader_init(&r, 0);
	ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), -ECONNRESET);
	/* the partial state is kept: header and 10 payload bytes, one fd held */
	ck_assert_uint_eq(r.got, R2_FRAME_HDR_SIZE + 10);
	ck_assert_uint_eq(r.cur.len, 100);
	ck_assert_int_eq(r.nfds_got, 1);
	ck_assert_int_ge(r.cur.fds[0], 0);
	r2_frame_reader_reset(&r); /* closes the held fd (teardown checks) */
	ck_assert_uint_eq(r.got, 0);
	ck_assert_int_eq(r.cur.fds[0], -1);
}
END_TEST

START_TEST(test_close_in_header)
{
	struct r2_frame_reader r;
	struct r2_frame f;
	uint8_t buf[R2_FRAME_HDR_SIZE];

	make_hdr(buf, R2_FRAME_MAGIC, 5, 0, 0, 0);
	raw_send(sv[0], buf, 5, NULL, 0);
	shutdown(sv[0], SHUT_WR);
	r2_frame_reader_init(&r, 0);
	ck_assert_int_eq(r2_frame_recv(sv[1], &r, &f, 1000), -ECONNRESET);
	ck_assert_uint_eq(r.got, 5);
	r2_frame_reader_reset(&r);
}
END_TEST

/* Sends a crafted header (+ payload) with fds, expects -EPROTO and no leak. */
static void expect_eproto(uint32_t magic, uint16_t nfds_hdr, uint32_t len, uint32_t flags,
			  int nfds_sent, uint32_t max_len)
{
	struct r2_frame_reader r;
	struct r2_frame f;
	uint8_t buf[R2_FRAME_HDR_SIZE + 64];
	int fds[R2_FRAME_MAX_FDS + 2];
	size_t blen = R2_FRAME_HDR_SIZE + (len < 64 ? len : 64);

	for (int i = 0; i < nfds_sent; i++)
		fds[i] = make_memfd(i);
	make_hdr(buf, magic, 9, nfds_hdr, len, flags);
	memset(buf + R2_FRAME_HDR_SIZE, 'z', 64);
	raw_send(sv[0], buf, blen, fds, nfds_sent);
	close_all(fds, nfds_sent);
	r2_frame_reader_init(&r, max_len);
	ck_assert_int_eq(r2_frame_recv(sv[1], &r, &f, 1000), -EPROTO);
	/* the reader dropped what it held: teardown counts fds */
	ck_assert_uint_eq(r.got, 0);
	ck_assert_int_eq(r.nfds_got, 0);
	ck_assert_ptr_null(r.cur.payload);
	r2_frame_reader_reset(&r);
}

START_TEST(test_bad_magic)
{
	expect_eproto(0x12345678, 1, 4, 0, 1, 0);
}
END_TEST

START_TEST(test_nonzero_flags)
{
	expect_eproto(R2_FRAME_MAGIC, 2, 4, 1, 2, 0);
}
END_TEST

START_TEST(test_len_over_max)
{
	/* exactly the maximum is fine */
	{
		struct r2_frame_reader r;
		struct r2_frame f;
		char p[64] = { 0 };

		ck_assert_int_eq(r2_frame_send(sv[0], 1, p, 64, NULL, 0, -1), 0);
		r2_frame_reader_init(&r, 64);
		ck_assert_int_eq(r2_frame_recv(sv[1], &r, &f, 1000), 1);
		ck_assert_uint_eq(f.len, 64);
		r2_frame_free(&f);
	}
	expect_eproto(R2_FRAME_MAGIC, 1, 65, 0, 1, 64);
	expect_eproto(R2_FRAME_MAGIC, 0, UINT32_MAX, 0, 0, 0);
}
END_TEST

START_TEST(test_more_fds_than_declared)
{
	expect_eproto(R2_FRAME_MAGIC, 1, 4, 0, 3, 0);
}
END_TEST

START_TEST(test_fewer_fds_than_declared)
{
	expect_eproto(R2_FRAME_MAGIC, 3, 4, 0, 1, 0);
	/* none at all */
	expect_eproto(R2_FRAME_MAGIC, 2, 0, 0, 0, 0);
}
END_TEST

START_TEST(test_more_fds_than_max)
{
	/* header claims 10 (over the maximum) and 10 arrive; also 9 arriving for 8 */
	expect_eproto(R2_FRAME_MAGIC, 10, 4, 0, 10, 0);
	expect_eproto(R2_FRAME_MAGIC, 8, 4, 0, 9, 0);
}
END_TEST

START_TEST(test_fds_in_payload)
{
	/* fds attached to a payload byte, not the header's first byte */
	struct r2_frame_reader r;
	struct r2_frame f;
	uint8_t buf[R2_FRAME_HDR_SIZE];
	int m = make_memfd(0);

	make_hdr(buf, R2_FRAME_MAGIC, 1, 0, 8, 0);
	raw_send(sv[0], buf, sizeof(buf), NULL, 0);
	r2_frame_reader_init(&r, 0);
	ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), 0);
	raw_send(sv[0], "12345678", 8, &m, 1);
	close(m);
	ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), -EPROTO);
	r2_frame_reader_reset(&r);
}
END_TEST

START_TEST(test_fds_mid_header)
{
	struct r2_frame_reader r;
	struct r2_frame f;
	uint8_t buf[R2_FRAME_HDR_SIZE];
	int m = make_memfd(0);

	make_hdr(buf, R2_FRAME_MAGIC, 1, 1, 0, 0);
	raw_send(sv[0], buf, 4, NULL, 0);
	r2_frame_reader_init(&r, 0);
	ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), 0);
	raw_send(sv[0], buf + 4, sizeof(buf) - 4, &m, 1);
	close(m);
	ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), -EPROTO);
	r2_frame_reader_reset(&r);
}
END_TEST

START_TEST(test_byte_by_byte)
{
	struct r2_frame_reader r;
	struct r2_frame f;
	uint8_t buf[R2_FRAME_HDR_SIZE + 33];
	int fds[2] = { make_memfd(0), make_memfd(1) };

	make_hdr(buf, R2_FRAME_MAGIC, 77, 2, 33, 0);
	for (int i = 0; i < 33; i++)
		buf[R2_FRAME_HDR_SIZE + i] = (uint8_t)(i + 1);
	r2_frame_reader_init(&r, 0);
	ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), 0);
	for (size_t i = 0; i < sizeof(buf); i++) {
		raw_send(sv[0], buf + i, 1, fds, i == 0 ? 2 : 0);
		if (i + 1 < sizeof(buf)) {
			ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), 0);
			ck_assert_uint_eq(r.got, i + 1);
		}
	}
	ck_assert_int_eq(r2_frame_read(sv[1], &r, &f), 1);
	ck_assert_uint_eq(f.type, 77);
	ck_assert_uint_eq(f.len, 33);
	ck_assert_mem_eq(f.payload, buf + R2_FRAME_HDR_SIZE, 33);
	ck_assert_uint_eq(f.nfds, 2);
	assert_same_file(fds[0], f.fds[0]);
	assert_same_file(fds[1], f.fds[1]);
	ck_assert_uint_eq(r.got, 0);
	r2_frame_free(&f);
	close_all(fds, 2);
}
END_TEST

START_TEST(test_large_nonblocking)
{
	/* a payload larger than the socket buffer: send blocks in poll while a
	 * child process reads */
	uint32_t len = 4u << 20;
	uint8_t *p = malloc(len);
	struct r2_frame_reader r;
	struct r2_frame f;
	pid_t pid;
	int m = make_memfd(0);

	ck_assert_ptr_nonnull(p);
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i * 31);
	ck_assert_int_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int ok;

		close(sv[0]);
		r2_frame_reader_init(&r, len);
		ok = r2_frame_recv(sv[1], &r, &f, 10000) == 1 && f.len == len &&
		     !memcmp(f.payload, p, len) && f.nfds == 1;
		_exit(ok ? 0 : 1);
	}
	ck_assert_int_eq(r2_frame_send(sv[0], 3, p, len, &m, 1, 10000), 0);
	{
		int st;

		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	close(m);
	free(p);
}
END_TEST

START_TEST(test_send_errors)
{
	int bad[1] = { -1 };
	int nine[9] = { 0 };

	ck_assert_int_eq(r2_frame_send(sv[0], 1, NULL, 5, NULL, 0, -1), -EINVAL);
	ck_assert_int_eq(r2_frame_send(sv[0], 1, NULL, 0, nine, 9, -1), -EINVAL);
	ck_assert_int_eq(r2_frame_send(sv[0], 1, NULL, 0, bad, 1, -1), -EBADF);
	close(sv[1]);
	sv[1] = -1;
	/* no SIGPIPE: the test process would die */
	ck_assert_int_eq(r2_frame_send(sv[0], 1, "x", 1, NULL, 0, -1), -EPIPE);
}
END_TEST

START_TEST(test_send_timeout)
{
	static uint8_t p[1 << 16];
	int ret;

	/* nobody reads: the socket buffer fills and the send times out */
	for (int i = 0; i < 1000; i++) {
		ret = r2_frame_send(sv[0], 1, p, sizeof(p), NULL, 0, 20);
		if (ret)
			break;
	}
	ck_assert_int_eq(ret, -ETIMEDOUT);
}
END_TEST

static Suite *framing_suite(void)
{
	Suite *s = suite_create("framing");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_loop_test(tc, test_round_trip_fds, 0, R2_FRAME_MAX_FDS + 1);
	tcase_add_test(tc, test_zero_length);
	tcase_add_test(tc, test_many_frames_with_fds);
	tcase_add_test(tc, test_truncated_then_close);
	tcase_add_test(tc, test_close_in_header);
	tcase_add_test(tc, test_bad_magic);
	tcase_add_test(tc, test_nonzero_flags);
	tcase_add_test(tc, test_len_over_max);
	tcase_add_test(tc, test_more_fds_than_declared);
	tcase_add_test(tc, test_fewer_fds_than_declared);
	tcase_add_test(tc, test_more_fds_than_max);
	tcase_add_test(tc, test_fds_in_payload);
	tcase_add_test(tc, test_fds_mid_header);
	tcase_add_test(tc, test_byte_by_byte);
	tcase_add_test(tc, test_large_nonblocking);
	tcase_add_test(tc, test_send_errors);
	tcase_add_test(tc, test_send_timeout);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(framing_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
