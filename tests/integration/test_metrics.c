// SPDX-License-Identifier: MIT
/*
 * Integration test of the metrics (docs/operations.md "Metrics"): a real
 * r2ccld with metrics_listen and metrics_textfile, a one-rank communicator
 * that runs AllReduce and AllGather; GET /metrics then counts them by tenant,
 * kind and result, with their bytes and latency histogram, and the textfile
 * holds the same names (written by rename: no temporary file left). The
 * HTTP responder answers 404, 405, 431, and closes a silent connection
 * after its timeout. A bad metrics_listen stops the daemon at start.
 * The live views beside the metrics: r2cclctl top and events --follow.
 */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "r2ccl.h"

#define COUNT 1024

static struct th_daemon D;

static void kill_daemon_at_exit(void)
{
	if (D.pid > 0)
		th_daemon_stop(&D, SIGKILL, 1000);
	th_daemon_cleanup(&D);
}

/* A TCP port free on 127.0.0.1 now. */
static int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	ck_assert_int_ge(fd, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static int dial(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(fd, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect :%d: %s",
		      port, strerror(errno));
	return fd;
}

/* Sends req (len bytes), reads until the server closes (timeout_ms at
 * most); the response in a malloc'd string. */
static char *exchange(int port, const char *req, size_t len, int timeout_ms)
{
	int fd = dial(port);
	size_t cap = 1 << 16, n = 0;
	char *out = malloc(cap);
	double end = th_now_ms() + timeout_ms;

	ck_assert_ptr_nonnull(out);
	if (len)
		ck_assert_int_eq(send(fd, req, len, MSG_NOSIGNAL), (ssize_t)len);
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int left = (int)(end - th_now_ms());
		ck_assert_msg(left > 0, "no end of the response within %d ms", timeout_ms);
		if (poll(&p, 1, left) <= 0)
			continue;
		if (n + 4096 > cap) {
			cap *= 2;
			out = realloc(out, cap);
			ck_assert_ptr_nonnull(out);
		}
		ssize_t k = recv(fd, out + n, cap - n - 1, 0);
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	out[n] = 0;
	close(fd);
	return out;
}

static char *get(int port, const char *path)
{
	char req[256];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);

	return exchange(port, req, (size_t)n, 10000); /* 10 s: a loaded machine is slow */
}

/* The value of the first sample line that starts with name and holds every
 * one of the label strings (NULL-terminated list); -1 if none. */
static double sample(const char *text, const char *name, const char *const *labels)
{
	size_t nl = strlen(name);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, name, nl) || (p[nl] != '{' && p[nl] != ' '))
			continue;
		const char *eol = strchr(p, '\n');
		size_t ll = eol ? (size_t)(eol - p) : strlen(p);
		char line[1024];
		if (ll >= sizeof(line))
			continue;
		memcpy(line, p, ll);
		line[ll] = 0;
		bool all = true;
		for (int i = 0; labels && labels[i]; i++)
			all = all && strstr(line, labels[i]);
		if (all)
			return strtod(strrchr(line, ' ') + 1, NULL);
	}
	return -1;
}

static void run_ops(void)
{
	r2ccl_client_t *cl = NULL;
	r2ccl_comm_t *comm = NULL;
	r2ccl_unique_id_t id;
	float *buf = NULL, *all = NULL;

	ck_assert_int_eq(r2ccl_connect(NULL, &cl), 0);
	ck_assert_int_eq(r2ccl_get_unique_id(cl, &id), 0);
	ck_assert_int_eq(r2ccl_comm_init_rank(cl, &comm, 1, &id, 0), 0);
	ck_assert_int_eq(r2ccl_mem_alloc(cl, COUNT * sizeof(float), (void **)&buf), 0);
	ck_assert_int_eq(r2ccl_mem_alloc(cl, COUNT * sizeof(float), (void **)&all), 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(r2ccl_allreduce(comm, buf, buf, COUNT, R2CCL_FLOAT32, R2CCL_SUM),
				 0);
	ck_assert_int_eq(r2ccl_allgather(comm, buf, all, COUNT, R2CCL_FLOAT32), 0);
	ck_assert_int_eq(r2ccl_comm_destroy(comm), 0);
	r2ccl_mem_free(cl, all);
	r2ccl_mem_free(cl, buf);
	r2ccl_disconnect(cl);
}

START_TEST(metrics_served)
{
	char port_s[16], prom[300], dir[300];
	int port = free_port();

	snprintf(port_s, sizeof(port_s), "%d", port);
	snprintf(dir, sizeof(dir), "/tmp/r2ccl-metrics-XXXXXX");
	th_temp_path(dir, "r2ccl.prom", prom, sizeof(prom));
	atexit(kill_daemon_at_exit);
	{
		const char *const args[] = { "--port", "0", "--metrics-listen", port_s,
					     "--metrics-textfile", prom, NULL };
		th_start(&D, args);
	}
	th_expect_log(&D, "metrics at http://127.0.0.1:", 1);
	run_ops();

	char *r = get(port, "/metrics");
	ck_assert_msg(!strncmp(r, "HTTP/1.1 200 OK\r\n", 17), "%.300s", r);
	ck_assert_ptr_nonnull(strstr(r, "Content-Type: text/plain; version=0.0.4"));
	char *body = strstr(r, "\r\n\r\n");
	ck_assert_ptr_nonnull(body);
	body += 4;
	char cl[64];
	snprintf(cl, sizeof(cl), "Content-Length: %zu\r\n", strlen(body));
	ck_assert_msg(strstr(r, cl), "body of %zu bytes, headers: %.300s", strlen(body), r);
	{
		const char *const ok_ar[] = { "op=\"allreduce\"", "result=\"ok\"", NULL };
		const char *const ok_ag[] = { "op=\"allgather\"", "result=\"ok\"", NULL };
		const char *const err[] = { "result=\"error\"", NULL };
		const char *const by_ar[] = { "op=\"allreduce\"", NULL };
		const char *const inf[] = { "le=\"+Inf\"", NULL };
		const char *const le10[] = { "le=\"10\"", NULL };
		ck_assert_double_eq(sample(body, "r2ccl_tenant_operations_total", ok_ar), 3);
		ck_assert_double_eq(sample(body, "r2ccl_tenant_operations_total", ok_ag), 1);
		ck_assert_double_eq(sample(body, "r2ccl_tenant_operations_total", err), -1);
		ck_assert_double_eq(sample(body, "r2ccl_tenant_bytes_total", by_ar),
				    3.0 * COUNT * sizeof(float));
		ck_assert_double_eq(
			sample(body, "r2ccl_tenant_operation_latency_seconds_bucket", inf), 4);
		ck_assert_double_eq(
			sample(body, "r2ccl_tenant_operation_latency_seconds_bucket", le10), 4);
		ck_assert_double_eq(
			sample(body, "r2ccl_tenant_operation_latency_seconds_count", NULL), 4);
		double sum = sample(body, "r2ccl_tenant_operation_latency_seconds_sum", NULL);
		ck_assert(sum > 0 && sum < 10);
		ck_assert_double_eq(sample(body, "r2ccl_operations_total", NULL), 4);
		ck_assert(sample(body, "r2ccl_uptime_seconds", NULL) > 0);
		/* the communicator was destroyed: its own lines are gone */
		ck_assert_double_eq(sample(body, "r2ccl_communicator_operations_total", NULL), -1);
		ck_assert_double_eq(sample(body, "r2ccl_communicators", NULL), 0);
	}
	free(r);

	/* r2cclctl status carries the rail overlap of every NIC */
	{
		const char *ctl = getenv("R2CCLCTL");
		char out[65536];
		ck_assert_msg(ctl && ctl[0], "R2CCLCTL is not set");
		const char *const argv[] = { ctl, "--json", "status", NULL };
		ck_assert_int_eq(th_run(argv, out, sizeof(out), 10000), 0);
		ck_assert_msg(strstr(out, "\"rail_overlap\":") &&
				      strstr(out, "\"rail_overlap_tenants\":"),
			      "%.2000s", out);
		/* and why each NIC is or is not a rail (the default rule here) */
		int nk = 0, nr = 0;
		for (const char *p = out; (p = strstr(p, "\"rail_overlap_tenants\":")); p++)
			nk++; /* a member of nics[] only */
		for (const char *p = out; (p = strstr(p, "\"rail_reason\": \"")); p++)
			nr += p[16] != '"'; /* not empty */
		ck_assert_msg(nk > 0 && nr == nk, "%d NICs, %d reasons: %.2000s", nk, nr, out);
	}

	/* HEAD: the headers only */
	r = exchange(port, "HEAD /metrics HTTP/1.1\r\n\r\n", 26, 10000);
	ck_assert_msg(!strncmp(r, "HTTP/1.1 200 OK\r\n", 17), "%.300s", r);
	ck_assert_str_eq(strstr(r, "\r\n\r\n"), "\r\n\r\n");
	free(r);
	r = get(port, "/nothing");
	ck_assert_msg(!strncmp(r, "HTTP/1.1 404 ", 13), "%.300s", r);
	free(r);
	r = exchange(port, "POST /metrics HTTP/1.1\r\n\r\n", 26, 10000);
	ck_assert_msg(!strncmp(r, "HTTP/1.1 405 ", 13), "%.300s", r);
	free(r);
	r = exchange(port, "garbage\r\n\r\n", 11, 10000);
	ck_assert_msg(!strncmp(r, "HTTP/1.1 400 ", 13), "%.300s", r);
	free(r);
	{
		char big[6000];
		memset(big, 'a', sizeof(big));
		memcpy(big, "GET /", 5);
		r = exchange(port, big, sizeof(big), 10000);
		ck_assert_msg(!strncmp(r, "HTTP/1.1 431 ", 13), "%.300s", r);
		free(r);
	}
	/* a client that sends nothing is cut off (5 s), not kept: not before
	 * then, and soon after (10 s more, room for a loaded machine) */
	double t0 = th_now_ms();
	r = exchange(port, "GET /metr", 9, 15000);
	ck_assert_str_eq(r, "");
	ck_assert(th_now_ms() - t0 > 4000);
	free(r);

	/* the textfile: written every 5 s (by a rename: never read half
	 * written), same names, no temporary left. A round after the
	 * operations counts them: waited for, 20 s at most (a loaded machine
	 * is slow), instead of sleeping one round. */
	const char *const ok_ar[] = { "op=\"allreduce\"", "result=\"ok\"", NULL };
	char text[65536];
	double ops = -1, tf = th_now_ms();
	bool seen = false;
	do {
		FILE *f = fopen(prom, "r");
		if (f) {
			size_t n = fread(text, 1, sizeof(text) - 1, f);
			fclose(f);
			text[n] = 0;
			seen = true;
			ops = sample(text, "r2ccl_tenant_operations_total", ok_ar);
		}
		if (ops != 3)
			usleep(100 * 1000);
	} while (ops != 3 && th_now_ms() - tf < 20000);
	ck_assert_msg(seen, "no %s", prom);
	ck_assert_double_eq(ops, 3);
	ck_assert_ptr_nonnull(strstr(text, "# TYPE r2ccl_failovers_total counter\n"));
	*strrchr(prom, '/') = 0;
	DIR *dh = opendir(prom);
	ck_assert_ptr_nonnull(dh);
	for (struct dirent *e; (e = readdir(dh));)
		ck_assert_msg(!strstr(e->d_name, ".tmp"), "left behind: %s", e->d_name);
	closedir(dh);
	th_stop_ok(&D);
}
END_TEST

struct busy {
	r2ccl_comm_t *comm;
	float *buf;
	atomic_bool stop;
	int err;
};

static void *busy_loop(void *arg)
{
	struct busy *b = arg;

	while (!atomic_load(&b->stop) && !b->err)
		b->err = r2ccl_allreduce(b->comm, b->buf, b->buf, COUNT, R2CCL_FLOAT32, R2CCL_SUM);
	return NULL;
}

/* r2cclctl top: COUNT rounds of the rails and the live communicators; with
 * AllReduces running, the last round shows their rate, bytes and latency */
START_TEST(top_view)
{
	const char *ctl = getenv("R2CCLCTL");
	r2ccl_client_t *cl = NULL;
	r2ccl_comm_t *comm = NULL;
	r2ccl_unique_id_t id;
	float *buf = NULL;
	char out[65536], line[128];

	ck_assert_msg(ctl && ctl[0], "R2CCLCTL is not set");
	atexit(kill_daemon_at_exit);
	{
		const char *const args[] = { "--port", "0", NULL };
		th_start(&D, args);
	}
	ck_assert_int_eq(r2ccl_connect(NULL, &cl), 0);
	ck_assert_int_eq(r2ccl_get_unique_id(cl, &id), 0);
	ck_assert_int_eq(r2ccl_comm_init_rank(cl, &comm, 1, &id, 0), 0);
	ck_assert_int_eq(r2ccl_mem_alloc(cl, COUNT * sizeof(float), (void **)&buf), 0);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(r2ccl_allreduce(comm, buf, buf, COUNT, R2CCL_FLOAT32, R2CCL_SUM),
				 0);
	{
		const char *const argv[] = { ctl, "top", "2", NULL };
		double t0 = th_now_ms();
		ck_assert_int_eq(th_run(argv, out, sizeof(out), 10000), 0);
		ck_assert(th_now_ms() - t0 >= 900); /* a second between the rounds */
	}
	int rounds = 0;
	for (const char *p = out; (p = strstr(p, "\nCOMM ")); p++)
		rounds++;
	ck_assert_msg(rounds == 2, "%d rounds:\n%s", rounds, out);
	ck_assert_msg(strstr(out, "NIC "), "%s", out);
	/* the communicator: id 1 here, its 5 operations */
	snprintf(line, sizeof(line), "\n%-6u ", 1u);
	const char *row = strstr(out, line);
	ck_assert_msg(row, "no communicator row:\n%s", out);
	const char *eol = strchr(row + 1, '\n');
	ck_assert_ptr_nonnull(eol);
	ck_assert_msg(eol - 2 > row && !strncmp(eol - 2, " 5", 2), "%.*s", (int)(eol - row), row);
	{
		const char *const argv[] = { ctl, "top", "x", NULL };
		ck_assert_int_eq(th_run(argv, out, sizeof(out), 10000), 2);
	}
	{
		struct busy b = { .comm = comm, .buf = buf };
		pthread_t t;
		const char *const argv[] = { ctl, "top", "3", NULL };
		ck_assert_int_eq(pthread_create(&t, NULL, busy_loop, &b), 0);
		int rc = th_run(argv, out, sizeof(out), 10000);
		atomic_store(&b.stop, true);
		pthread_join(t, NULL);
		ck_assert_int_eq(b.err, 0);
		ck_assert_int_eq(rc, 0);
	}
	/* the last round's row: OPS/S > 0, BYTES/S, a latency in ms */
	row = strstr(out, "\n1      ");
	for (const char *p = row; p && (p = strstr(p + 1, "\n1      "));)
		row = p;
	ck_assert_msg(row, "%s", out);
	{
		unsigned cid, hosts, ranks;
		char tenant[64], state[16], bu[16], lu[8];
		double ops, bytes, lat;
		ck_assert_msg(sscanf(row + 1, "%u %63s %15s %u %u %lf %lf %15s %lf %7s", &cid, tenant,
				     state, &hosts, &ranks, &ops, &bytes, bu, &lat, lu) == 10,
			      "%.200s", row + 1);
		ck_assert_msg(ops > 0 && bytes > 0 && lat > 0 && (!strcmp(lu, "ms") || !strcmp(lu, "us")), "%.200s",
			      row + 1);
	}
	ck_assert_int_eq(r2ccl_comm_destroy(comm), 0);
	r2ccl_mem_free(cl, buf);
	r2ccl_disconnect(cl);
	th_stop_ok(&D);
}
END_TEST

/* Reads fd into buf (NUL-terminated) until it holds n occurrences of needle
 * or timeout_ms passed; the occurrences found. */
static int read_until(int fd, char *buf, size_t len, size_t *used, const char *needle, int n,
		      int timeout_ms)
{
	double end = th_now_ms() + timeout_ms;
	int found = 0;

	for (;;) {
		found = 0;
		for (const char *p = buf; (p = strstr(p, needle)); p++)
			found++;
		int left = (int)(end - th_now_ms());
		if (found >= n || left <= 0)
			return found;
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, left) <= 0)
			continue;
		ssize_t k = read(fd, buf + *used, len - 1 - *used);
		if (k <= 0)
			return found;
		*used += (size_t)k;
		buf[*used] = 0;
	}
}

/* r2cclctl events --follow: prints each new event once, as it comes */
START_TEST(events_follow)
{
	const char *ctl = getenv("R2CCLCTL");
	char cfg[300], dir[64], out[16384] = "";
	size_t used = 0;
	int pfd[2];
	pid_t pid;
	FILE *f;

	ck_assert_msg(ctl && ctl[0], "R2CCLCTL is not set");
	snprintf(dir, sizeof(dir), "/tmp/r2ccl-follow-XXXXXX");
	th_temp_path(dir, "r2ccld.conf", cfg, sizeof(cfg));
	f = fopen(cfg, "w");
	ck_assert_ptr_nonnull(f);
	fputs("op_timeout_ms = 20000\n", f);
	fclose(f);
	atexit(kill_daemon_at_exit);
	{
		const char *const args[] = { "--port", "0", "--config", cfg, NULL };
		th_start(&D, args);
	}
	ck_assert_int_eq(pipe(pfd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		execl(ctl, ctl, "events", "--follow", (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	usleep(700 * 1000); /* it has polled once: nothing yet */
	ck_assert_int_eq(read_until(pfd[0], out, sizeof(out), &used, "config_kept", 1, 300), 0);
	f = fopen(cfg, "a");
	ck_assert_ptr_nonnull(f);
	fputs("max_frame = 2M\n", f);
	fclose(f);
	kill(D.pid, SIGHUP);
	ck_assert_msg(read_until(pfd[0], out, sizeof(out), &used, "config_kept", 1, 10000) == 1,
		      "%s", out);
	ck_assert_msg(strstr(out, "max_frame: "), "%s", out);
	kill(D.pid, SIGHUP); /* kept again: a second event, printed once */
	ck_assert_msg(read_until(pfd[0], out, sizeof(out), &used, "config_kept", 2, 10000) == 2,
		      "%s", out);
	usleep(1200 * 1000);
	ck_assert_msg(read_until(pfd[0], out, sizeof(out), &used, "config_kept", 3, 100) == 2,
		      "an event printed twice:\n%s", out);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	close(pfd[0]);
	{
		const char *const argv[] = { ctl, "rails", "--follow", NULL };
		ck_assert_int_eq(th_run(argv, out, sizeof(out), 10000), 2);
	}
	unlink(cfg);
	rmdir(dir);
	th_stop_ok(&D);
}
END_TEST

/* a metrics_listen that is no address: the daemon does not start */
START_TEST(metrics_bad_listen)
{
	struct th_daemon bad;
	const char *const args[] = { "--port", "0", "--metrics-listen", "nohost:99", NULL };

	memset(&bad, 0, sizeof(bad));
	ck_assert_int_ne(th_daemon_start(&bad, args), 0);
	ck_assert_int_ge(th_log_count(&bad, "metrics_listen"), 1);
	th_daemon_cleanup(&bad);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("metrics");
	SRunner *sr;
	int nf;

	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, metrics_served);
	tcase_add_test(tc, metrics_bad_listen);
	tcase_add_test(tc, top_view);
	tcase_add_test(tc, events_follow);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}
