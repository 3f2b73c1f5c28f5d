/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#ifndef R2CCLD_PATH
#define R2CCLD_PATH "r2ccld"
#endif

static void msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

int th_connect_raw(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int th_daemon_start(struct th_daemon *d, const char *const *extra)
{
	const char *bin = getenv("R2CCLD") ? getenv("R2CCLD") : R2CCLD_PATH;
	const char *argv[64];
	int n = 0;

	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/r2ccl-test-XXXXXX");
	if (!mkdtemp(d->dir)) {
		perror("mkdtemp");
		return -1;
	}
	snprintf(d->socket, sizeof(d->socket), "%s/r2ccld.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/r2ccld.log", d->dir);
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = d->socket;
	argv[n++] = "--config";
	argv[n++] = "/dev/null";
	bool own_key = false;
	for (int i = 0; extra && extra[i] && n < 60; i++) {
		own_key |= !strcmp(extra[i], "--cluster-key-file");
		argv[n++] = extra[i];
	}
	/* every daemon a test starts shares one cluster key, so that two of
	 * them form communicators across their rails (peer_auth,
	 * docs/security.md): the same bytes in a file of its own directory,
	 * mode 0600 */
	if (!own_key) {
		static const char test_key[] = "r2ccl-integration-test-cluster-key\n";
		int kfd;

		snprintf(d->key, sizeof(d->key), "%s/cluster.key", d->dir);
		kfd = open(d->key, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (kfd < 0 || write(kfd, test_key, sizeof(test_key) - 1) !=
					(ssize_t)(sizeof(test_key) - 1)) {
			perror("cluster key");
			if (kfd >= 0)
				close(kfd);
			return -1;
		}
		close(kfd);
		argv[n++] = "--cluster-key-file";
		argv[n++] = d->key;
	}
	argv[n] = NULL;
	d->pid = fork();
	if (d->pid < 0)
		return -1;
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(bin, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	for (int i = 0; i < 1000; i++) {
		int fd = th_connect_raw(d->socket);
		if (fd >= 0) {
			close(fd);
			setenv("R2CCL_SOCKET", d->socket, 1);
			return 0;
		}
		if (!th_daemon_alive(d))
			break;
		msleep(10);
	}
	fprintf(stderr, "r2ccld did not come up; its log (%s):\n", d->log);
	{
		char cmd[400];
		snprintf(cmd, sizeof(cmd), "cat %s >&2", d->log);
		if (system(cmd) < 0)
			(void)0;
	}
	th_daemon_stop(d, SIGKILL, 1000);
	return -1;
}

bool th_daemon_alive(struct th_daemon *d)
{
	int st;

	if (d->pid <= 0)
		return false;
	return waitpid(d->pid, &st, WNOHANG) == 0;
}

int th_daemon_stop(struct th_daemon *d, int sig, int timeout_ms)
{
	int st;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, sig);
	for (int t = 0; t < timeout_ms; t += 10) {
		pid_t r = waitpid(d->pid, &st, WNOHANG);
		if (r == d->pid) {
			d->pid = 0;
			if (WIFEXITED(st))
				return WEXITSTATUS(st);
			return 128 + WTERMSIG(st);
		}
		msleep(10);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &st, 0);
	d->pid = 0;
	return -1;
}

int th_log_count(struct th_daemon *d, const char *needle)
{
	FILE *f = fopen(d->log, "r");
	char line[4096];
	int n = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, needle))
			n++;
	fclose(f);
	return n;
}

void th_daemon_cleanup(struct th_daemon *d)
{
	char cmd[400];

	if (d->pid > 0)
		th_daemon_stop(d, SIGKILL, 1000);
	if (d->dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
		if (system(cmd) < 0)
			(void)0;
	}
}

/* ---- additions for the bad-input and lifecycle tests ---- */

#include <dirent.h>
#include <endian.h>
#include <poll.h>
#include <stdint.h>

double th_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int th_wait_log(struct th_daemon *d, const char *needle, int min, int timeout_ms)
{
	double end = th_now_ms() + timeout_ms;
	int n;

	for (;;) {
		n = th_log_count(d, needle);
		if (n >= min || th_now_ms() >= end)
			return n;
		msleep(10);
	}
}

bool th_wait_status(struct th_daemon *d, const char *needle, int timeout_ms)
{
	const char *ctl = getenv("R2CCLCTL");
	const char *const argv[] = { ctl, "--socket", d->socket, "--json", "status", NULL };
	double end = th_now_ms() + timeout_ms;
	static char out[1 << 16];

	if (!ctl || !ctl[0])
		return false;
	for (;;) {
		if (th_run(argv, out, sizeof(out), timeout_ms) == 0 && strstr(out, needle))
			return true;
		if (th_now_ms() >= end)
			return false;
		msleep(20);
	}
}

int th_daemon_nfds(struct th_daemon *d)
{
	char path[64];
	DIR *dir;
	struct dirent *e;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((e = readdir(dir)))
		if (e->d_name[0] != '.')
			n++;
	closedir(dir);
	return n;
}

int th_send_frame_raw(int sock, uint32_t magic, uint16_t type, uint16_t nfds, uint32_t len,
		      uint32_t flags, const int *fds, int nattach, const void *payload,
		      size_t plen)
{
	struct {
		uint32_t magic;
		uint16_t type;
		uint16_t nfds;
		uint32_t len;
		uint32_t flags;
	} __attribute__((packed)) h = { htole32(magic), htole16(type), htole16(nfds),
					 htole32(len), htole32(flags) };
	union {
		char buf[CMSG_SPACE(sizeof(int) * 16)];
		struct cmsghdr align;
	} cm;
	/* header and payload in one sendmsg: the frame arrives whole, so a
	 * daemon that drops the session on reading its header (with the fds)
	 * cannot make a second write fail with EPIPE first */
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)payload, payload ? plen : 0 } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
	const char *p = payload;
	ssize_t sent;

	if (nattach > 16)
		return -EINVAL;
	if (nattach > 0) {
		struct cmsghdr *c;
		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nattach);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nattach);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nattach);
	}
	if (!payload)
		plen = 0;
	do
		sent = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (sent < 0 && errno == EINTR);
	if (sent < (ssize_t)sizeof(h))
		return sent < 0 ? -errno : -EIO;
	p += (size_t)sent - sizeof(h);
	plen -= (size_t)sent - sizeof(h);
	while (plen) {
		ssize_t n = send(sock, p, plen, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		plen -= (size_t)n;
	}
	return 0;
}

int th_wait_eof(int sock, int timeout_ms)
{
	double end = th_now_ms() + timeout_ms;

	for (;;) {
		struct pollfd pfd = { .fd = sock, .events = POLLIN };
		char buf[4096];
		union {
			char b[CMSG_SPACE(sizeof(int) * 16)];
			struct cmsghdr align;
		} cm;
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
				     .msg_controllen = sizeof(cm.b) };
		double left = end - th_now_ms();
		ssize_t n;

		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&pfd, 1, (int)left + 1) <= 0)
			continue;
		n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				close(fd);
			}
		}
	}
}

int th_run(const char *const *argv, char *out, size_t outlen, int timeout_ms)
{
	int pfd[2], st;
	size_t got = 0;
	pid_t pid;
	double end = th_now_ms() + timeout_ms;
	bool eof = false;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		execv(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	while (!eof) {
		struct pollfd p = { .fd = pfd[0], .events = POLLIN };
		double left = end - th_now_ms();
		char tmp[4096];
		ssize_t n;

		if (left <= 0)
			break;
		if (poll(&p, 1, (int)left + 1) <= 0)
			continue;
		n = read(pfd[0], tmp, sizeof(tmp));
		if (n <= 0) {
			eof = true;
			break;
		}
		if (out && outlen > 1 && got < outlen - 1) {
			size_t k = (size_t)n < outlen - 1 - got ? (size_t)n : outlen - 1 - got;
			memcpy(out + got, tmp, k);
			got += k;
		}
	}
	close(pfd[0]);
	if (out && outlen)
		out[got] = 0;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (th_now_ms() >= end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		msleep(10);
	}
}

/* ---- Check helpers of the test programs ---- */

static struct th_daemon *at_exit_daemon;

static void kill_daemon_at_exit(void)
{
	/* a failed assertion exits the test's process: never leave a daemon */
	if (at_exit_daemon->pid > 0)
		th_daemon_stop(at_exit_daemon, SIGKILL, 1000);
	th_daemon_cleanup(at_exit_daemon);
}

void th_start(struct th_daemon *d, const char *const *extra)
{
	if (!at_exit_daemon) {
		at_exit_daemon = d;
		atexit(kill_daemon_at_exit);
	}
	ck_assert_msg(d == at_exit_daemon, "one daemon per test program");
	ck_assert_msg(th_daemon_start(d, extra) == 0, "r2ccld did not start");
}

void th_stop_ok(struct th_daemon *d)
{
	int st;

	ck_assert_msg(th_daemon_alive(d), "r2ccld died; log in %s", d->log);
	st = th_daemon_stop(d, SIGTERM, 15000);
	ck_assert_msg(st == 0, "r2ccld exited with %d on SIGTERM (log %s)", st, d->log);
	th_daemon_cleanup(d);
}

void th_expect_log(struct th_daemon *d, const char *needle, int min)
{
	int n = th_wait_log(d, needle, min, TH_LOG_WAIT_MS);

	ck_assert_msg(n >= min, "daemon log has %d line(s) with \"%s\", expected >= %d (%s)", n,
		      needle, min, d->log);
}

void th_temp_path(char *dir, const char *name, char *path, size_t len)
{
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_lt(snprintf(path, len, "%s/%s", dir, name), (int)len);
}

Suite *th_suite(const char *name, int timeout_s, const TTest *const *tests, size_t n)
{
	Suite *s = suite_create(name);
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, timeout_s);
	for (size_t i = 0; i < n; i++)
		tcase_add_test(tc, tests[i]);
	suite_add_tcase(s, tc);
	return s;
}

void th_daemon_stop_ok(struct th_daemon *d)
{
	int st;

	ck_assert_msg(th_daemon_alive(d), "r2ccld died; log in %s", d->log);
	st = th_daemon_stop(d, SIGTERM, 15000);
	ck_assert_msg(st == 0, "r2ccld exited with %d on SIGTERM (log %s)", st, d->log);
	th_daemon_cleanup(d);
}

int th_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
