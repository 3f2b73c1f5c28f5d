// SPDX-License-Identifier: MIT
/*
 * Integration tests: an unprivileged local user attacks r2ccld (issue 23,
 * docs/security.md). The attacker runs in a forked child that drops to uid
 * 65534 (nobody); the victim is a job of root (a 2-rank AllReduce loop with
 * checked results) through the same daemon. Each attack is refused or
 * bounded with R2CCL_E_QUOTA / -EACCES and the cap's name, the daemon's fd
 * and thread counts stay bounded, and the victim has no failed operation.
 * Needs root to switch uids (exits 77 otherwise).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "framing.h"
#include "ring.h"
#include "harness.h"
#include "victim.h"
#include "r2ccl.h"
#include "r2ccl.pb-c.h"

#define NOBODY 65534

static struct th_daemon D;

/* ---- the attacker: a child of uid 65534; any failed check exits 1 ---- */

static void adv_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void adv_fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "attacker: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	_exit(1);
}

#define A(cond, ...)                     \
	do {                             \
		if (!(cond))             \
			adv_fail(__VA_ARGS__); \
	} while (0)

/* Runs fn(arg) as uid 65534 in a child; fails the test unless it exits 0. */
static void as_nobody(void (*fn)(void *), void *arg)
{
	pid_t pid = fork();
	int st;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setresgid(NOBODY, NOBODY, NOBODY) < 0 || setresuid(NOBODY, NOBODY, NOBODY) < 0)
			adv_fail("setresuid: %s", strerror(errno));
		fn(arg);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "the attacker's checks failed (status %d; see above)", st);
}

static r2ccl_client_t *connect_or_fail(void)
{
	r2ccl_client_t *c = NULL;
	int r = r2ccl_connect(NULL, &c);

	A(r == 0, "connect: %s (%s)", r2ccl_strerror(r), r2ccl_last_error());
	return c;
}

/* ---- raw control connections ---- */

static int raw_connect(void)
{
	return th_connect_raw(D.socket);
}

static void raw_send(int fd, uint16_t type, const void *msg, const int *fds, int nfds)
{
	const ProtobufCMessage *m = msg;
	size_t len = protobuf_c_message_get_packed_size(m);
	uint8_t buf[512];
	int r;

	A(len <= sizeof(buf), "message too long");
	protobuf_c_message_pack(m, buf);
	r = r2_frame_send(fd, type, buf, (uint32_t)len, fds, nfds, 5000);
	A(r == 0, "send: %s", strerror(-r));
}

/* The next frame of fd (type want) in f; false on EOF or timeout (10 s: a
 * reply comes at once when all is well, and a loaded machine is slow). */
static bool raw_recv(int fd, struct r2_frame_reader *rd, struct r2_frame *f, uint16_t want)
{
	int r = r2_frame_recv(fd, rd, f, 10000);

	if (r != 1)
		return false;
	A(f->type == want, "reply type %u, expected %u", f->type, want);
	return true;
}

/* A handshake on fd: the reply's status (and error in err). */
static int raw_hello(int fd, struct r2_frame_reader *rd, bool control_only, char *err,
		     size_t errlen)
{
	R2ccl__Hello h = R2CCL__HELLO__INIT;
	R2ccl__HelloReply *rep;
	struct r2_frame f;
	int st;

	h.proto_version = R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT;
	h.client_name = "adversary";
	h.control_only = control_only;
	raw_send(fd, R2CCL__MSG_TYPE__MSG_HELLO, &h, NULL, 0);
	if (!raw_recv(fd, rd, &f, R2CCL__MSG_TYPE__MSG_HELLO_REPLY))
		return -ECONNRESET;
	rep = r2ccl__hello_reply__unpack(NULL, f.len, f.payload);
	A(rep, "hello reply unpack");
	st = rep->status;
	snprintf(err, errlen, "%s", rep->error ? rep->error : "");
	r2ccl__hello_reply__free_unpacked(rep, NULL);
	r2_frame_free(&f);
	return st;
}

static int raw_memreg(int fd, struct r2_frame_reader *rd, int mfd, uint64_t size, char *err,
		      size_t errlen)
{
	R2ccl__MemRegister m = R2CCL__MEM_REGISTER__INIT;
	R2ccl__MemRegisterReply *rep;
	struct r2_frame f;
	int st;

	m.req_id = 9;
	m.size = size;
	raw_send(fd, R2CCL__MSG_TYPE__MSG_MEM_REGISTER, &m, &mfd, 1);
	A(raw_recv(fd, rd, &f, R2CCL__MSG_TYPE__MSG_MEM_REGISTER_REPLY), "no registration reply");
	rep = r2ccl__mem_register_reply__unpack(NULL, f.len, f.payload);
	A(rep, "registration reply unpack");
	st = rep->status;
	snprintf(err, errlen, "%s", rep->error ? rep->error : "");
	r2ccl__mem_register_reply__free_unpacked(rep, NULL);
	r2_frame_free(&f);
	return st;
}

static int sealed_memfd(size_t size, bool resident)
{
	int fd = memfd_create("adv", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	A(fd >= 0, "memfd_create");
	A(ftruncate(fd, (off_t)size) == 0, "ftruncate");
	if (resident)
		A(fallocate(fd, 0, 0, (off_t)size) == 0, "fallocate");
	A(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0, "seal");
	return fd;
}

/* ---- the daemon's counts ---- */

static long proc_status(const char *key)
{
	char path[64], line[256];
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)D.pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)))
			v = atol(line + strlen(key) + 1);
	fclose(f);
	return v;
}

/* ---- the victim: root's 2-rank AllReduce loop (victim.h) ---- */

struct victim {
	struct th_victim l;
	const char *attack;
};

static void victim_start_(struct victim *v, const char *attack)
{
	ck_assert_msg(th_victim_init(&v->l) == 0, "the victim: %s", v->l.why);
	v->attack = attack;
	ck_assert_msg(th_victim_run(&v->l) == 0, "the victim: %s", v->l.why);
}

#define victim_start(v) victim_start_(v, __func__)

/* Stops the loop: it ran (20 AllReduces at least, after the attack: a
 * loaded machine is slow), and no operation failed. */
static void victim_stop(struct victim *v)
{
	ck_assert_msg(th_victim_stop(&v->l, 20, 15) == 0, "the victim failed: %s", v->l.why);
	/* figures, not checks (a shared machine's timing is not a test) */
	printf("victim beside %s: %zu AllReduces of 4 KiB, p50 %.0f us, p99 %.0f us\n",
	       v->attack ? v->attack : "?", v->l.nlat, v->l.p50, v->l.p99);
	fflush(stdout);
	ck_assert_msg(th_victim_fini(&v->l) == 0, "the victim: %s", v->l.why);
}

/* ---- fixtures ---- */

static void start(const char *const *args)
{
	th_start(&D, args);
	/* the client side runs as nobody: it must reach the socket (mode 0666) */
	ck_assert_int_eq(chmod(D.dir, 0755), 0);
}

/* ---- joining another uid's communicator ---- */

struct join_arg {
	r2ccl_unique_id_t id;
	int nranks, rank;
	int want;
	const char *reason; /* in r2ccl_last_error, or NULL */
	float contribute;   /* when it joins: one AllReduce adding this */
};

static void join_as_nobody(void *p)
{
	struct join_arg *j = p;
	r2ccl_client_t *c = connect_or_fail();
	r2ccl_comm_config_t cfg = R2CCL_COMM_CONFIG_INITIALIZER;
	r2ccl_comm_t *comm = NULL;
	int r = r2ccl_comm_init_rank_config(c, &comm, j->nranks, &j->id, j->rank, &cfg);

	A(r == j->want, "join rank %d/%d: %s (%s), expected %s", j->rank, j->nranks,
	  r2ccl_strerror(r), r2ccl_last_error(), r2ccl_strerror(j->want));
	if (j->reason)
		A(strstr(r2ccl_last_error(), j->reason), "reason \"%s\" lacks \"%s\"",
		  r2ccl_last_error(), j->reason);
	if (r == 0) {
		float *buf;
		A(r2ccl_mem_alloc(c, sizeof(float), (void **)&buf) == 0, "mem_alloc");
		*buf = j->contribute;
		A(r2ccl_allreduce(comm, buf, buf, 1, R2CCL_FLOAT32, R2CCL_SUM) == 0, "allreduce");
		A(*buf == j->contribute + 1.0f, "sum %f", *buf);
		A(r2ccl_comm_destroy(comm) == 0, "destroy");
	}
	r2ccl_disconnect(c);
}

/* How `r2cclctl --json status` shows a communicator one rank joined. */
#define COMM_JOINED_1 "\"joined\": 1,"

struct owner {
	r2ccl_client_t *c;
	r2ccl_comm_t *comm;
	r2ccl_unique_id_t id;
	int nranks, rank, share, r;
	pthread_t t;
};

static void *owner_init(void *a)
{
	struct owner *o = a;
	r2ccl_comm_config_t cfg = R2CCL_COMM_CONFIG_INITIALIZER;

	cfg.share = (r2ccl_share_t)o->share;
	o->r = r2ccl_comm_init_rank_config(o->c, &o->comm, o->nranks, &o->id, o->rank, &cfg);
	return NULL;
}

/* Root's rank 0 of a 2-rank communicator, joining (blocked) in a thread. */
static void owner_begin(struct owner *o, int share)
{
	memset(o, 0, sizeof(*o));
	ck_assert_int_eq(r2ccl_connect(NULL, &o->c), 0);
	ck_assert_int_eq(r2ccl_get_unique_id(o->c, &o->id), 0);
	o->nranks = 2;
	o->share = share;
	ck_assert_int_eq(pthread_create(&o->t, NULL, owner_init, o), 0);
	/* its CommInit reached the daemon (the first to join owns the
	 * communicator): waited for, since a loaded machine is slow */
	ck_assert_msg(th_wait_status(&D, COMM_JOINED_1, 10000),
		      "no communicator with one rank joined within 10 s");
}

struct ar {
	r2ccl_client_t *c;
	r2ccl_comm_t *comm;
	float in, out;
	int r;
	pthread_t t;
};

static void *ar_run(void *a)
{
	struct ar *x = a;
	float *buf;

	x->r = r2ccl_mem_alloc(x->c, sizeof(float), (void **)&buf);
	if (x->r)
		return NULL;
	*buf = x->in;
	x->r = r2ccl_allreduce(x->comm, buf, buf, 1, R2CCL_FLOAT32, R2CCL_SUM);
	x->out = *buf;
	r2ccl_mem_free(x->c, buf);
	return NULL;
}

/* One AllReduce over the owner's rank 0 and (c1, comm1) as rank 1: 1 + 2. */
static void owner_allreduce(struct owner *o, r2ccl_client_t *c1, r2ccl_comm_t *comm1)
{
	struct ar a0 = { o->c, o->comm, 1.0f, 0, -1, 0 }, a1 = { c1, comm1, 2.0f, 0, -1, 0 };

	ck_assert_int_eq(pthread_create(&a0.t, NULL, ar_run, &a0), 0);
	ar_run(&a1);
	pthread_join(a0.t, NULL);
	ck_assert_int_eq(a0.r, 0);
	ck_assert_int_eq(a1.r, 0);
	ck_assert(a0.out == 3.0f && a1.out == 3.0f);
}

START_TEST(join_other_uid)
{
	struct owner o;
	struct join_arg j = { .nranks = 2, .rank = 1, .want = -EACCES,
			      .reason = "may not join" };
	r2ccl_client_t *c1;
	r2ccl_comm_t *comm1 = NULL;

	start(NULL);
	owner_begin(&o, R2CCL_SHARE_OWNER);
	j.id = o.id;
	/* the free rank, a duplicate of the owner's rank, a wrong nranks: each
	 * refused, the joiner alone */
	as_nobody(join_as_nobody, &j);
	j.rank = 0;
	as_nobody(join_as_nobody, &j);
	j.nranks = 3;
	j.rank = 2;
	as_nobody(join_as_nobody, &j);
	th_expect_log(&D, "communicator refused", 3);
	/* the owner's communicator forms with root's rank 1 and works */
	ck_assert_int_eq(r2ccl_connect(NULL, &c1), 0);
	ck_assert_int_eq(r2ccl_comm_init_rank(c1, &comm1, 2, &o.id, 1), 0);
	pthread_join(o.t, NULL);
	ck_assert_int_eq(o.r, 0);
	owner_allreduce(&o, c1, comm1);
	/* joining it once formed: refused the same way */
	j.nranks = 2;
	j.rank = 1;
	as_nobody(join_as_nobody, &j);
	owner_allreduce(&o, c1, comm1);
	ck_assert_int_eq(r2ccl_comm_destroy(comm1), 0);
	ck_assert_int_eq(r2ccl_comm_destroy(o.comm), 0);
	r2ccl_disconnect(c1);
	r2ccl_disconnect(o.c);
	th_stop_ok(&D);
}
END_TEST

/* share = R2CCL_SHARE_ANY_UID: another uid joins; its malformed joins fail
 * it alone (the owner's own would fail everyone, as a job's bug) */
START_TEST(join_shared)
{
	struct owner o;
	struct join_arg j = { .nranks = 3, .rank = 1, .want = R2CCL_E_MISMATCH,
			      .reason = "nranks" };

	start(NULL);
	owner_begin(&o, R2CCL_SHARE_ANY_UID);
	j.id = o.id;
	as_nobody(join_as_nobody, &j);
	j.nranks = 2;
	j.rank = 0;
	j.want = R2CCL_E_DUP_RANK;
	j.reason = "twice";
	as_nobody(join_as_nobody, &j);
	/* now a good join of nobody: one AllReduce with root's rank 0 */
	j.rank = 1;
	j.want = 0;
	j.reason = NULL;
	j.contribute = 5.0f;
	{
		pid_t pid = fork();
		int st;
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			if (setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
			    setresuid(NOBODY, NOBODY, NOBODY) < 0)
				_exit(2);
			join_as_nobody(&j);
			_exit(0);
		}
		pthread_join(o.t, NULL);
		ck_assert_int_eq(o.r, 0);
		struct ar a0 = { o.c, o.comm, 1.0f, 0, -1, 0 };
		ar_run(&a0);
		ck_assert_int_eq(a0.r, 0);
		ck_assert(a0.out == 6.0f);
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nobody's rank: %d", st);
	}
	ck_assert_int_eq(r2ccl_comm_destroy(o.comm), 0);
	r2ccl_disconnect(o.c);
	th_stop_ok(&D);
}
END_TEST

/* ---- resources: each cap reached by nobody while root's job runs ---- */

/* Communicators: 1-rank ones until max_comms_per_uid, with its name. */
static void many_comms(void *p)
{
	r2ccl_client_t *c = connect_or_fail();
	r2ccl_comm_t *comm[9];
	r2ccl_unique_id_t id;
	int r = 0, n;

	for (n = 0; n < 9; n++) {
		A(r2ccl_get_unique_id(c, &id) == 0, "unique id");
		r = r2ccl_comm_init_rank(c, &comm[n], 1, &id, 0);
		if (r)
			break;
	}
	A(n == 8 && r == R2CCL_E_QUOTA, "%d communicators, then %s", n, r2ccl_strerror(r));
	A(strstr(r2ccl_last_error(), "max_comms_per_uid"), "reason: %s", r2ccl_last_error());
	/* r2cclctl status -v shows the cap and this uid's use */
	{
		const char *ctl = getenv("R2CCLCTL");
		const char *argv[] = { ctl, "--socket", D.socket, "status", "-v", NULL };
		char out[16384], *line;
		unsigned long lim = 0, used = 0;

		A(ctl && th_run(argv, out, sizeof(out), 10000) == 0, "r2cclctl status: %s", out);
		line = strstr(out, "\nmax_comms_per_uid ");
		A(line && sscanf(line + 19, "%lu %lu", &lim, &used) == 2, "no cap line in: %s",
		  out);
		A(lim == 8 && used == 8, "max_comms_per_uid shown as %lu used of %lu", used, lim);
	}
	/* one freed: one more fits */
	A(r2ccl_comm_destroy(comm[0]) == 0, "destroy");
	A(r2ccl_get_unique_id(c, &id) == 0, "unique id");
	A(r2ccl_comm_init_rank(c, &comm[0], 1, &id, 0) == 0, "after a destroy: %s",
	  r2ccl_last_error());
	r2ccl_disconnect(c);
}

START_TEST(comms_per_uid)
{
	const char *const args[] = { "--max-comms-per-uid", "8", NULL };
	struct victim v;
	long threads0, threads;

	start(args);
	victim_start(&v);
	threads0 = proc_status("Threads:");
	as_nobody(many_comms, NULL);
	threads = proc_status("Threads:");
	/* an executor per communicator, 8 at most (all gone again now) */
	ck_assert_msg(threads <= threads0 + 8, "threads %ld, %ld before", threads, threads0);
	victim_stop(&v);
	th_stop_ok(&D);
}
END_TEST

/* Idle connections that never say hello: max_prehello_per_uid at once, the
 * rest closed; all closed after hello_timeout_ms; root still gets in. */
static void idle_conns(void *p)
{
	int fd[20];
	struct r2_frame_reader rd;
	char err[256];
	double t0 = th_now_ms();

	for (int i = 0; i < 20; i++) {
		fd[i] = raw_connect();
		A(fd[i] >= 0, "connect");
	}
	/* the daemon accepts them in the order they came and closes each one
	 * past max_prehello_per_uid (8) at once: fd[8] to fd[19]. Waited for
	 * (10 s at most), not slept on: a loaded machine is slow. */
	for (int i = 8; i < 20; i++)
		A(th_wait_eof(fd[i], 10000) == 0,
		  "idle connection %d still open, max_prehello_per_uid is 8", i);
	/* the first 8 were kept: only the hello deadline (1 s here) closes
	 * them, not before it (a lower bound, which no slowness breaks) */
	for (int i = 0; i < 8; i++) {
		A(th_wait_eof(fd[i], 10000) == 0, "idle connection %d still open", i);
		A(th_now_ms() - t0 >= 950, "idle connection %d closed after %.0f ms, before the "
		  "hello deadline (not kept; max_prehello_per_uid is 8)", i, th_now_ms() - t0);
	}
	/* a frame announced bigger than max_frame_prehello: dropped at once */
	int f = raw_connect();
	int sr = th_send_frame_raw(f, R2_FRAME_MAGIC, R2CCL__MSG_TYPE__MSG_HELLO, 0,
				   (1u << 20) - 1, 0, NULL, 0, "x", 1);
	/* the daemon may drop it between the header and the byte after it */
	A(sr == 0 || sr == -EPIPE || sr == -ECONNRESET, "send: %s", strerror(-sr));
	A(th_wait_eof(f, 10000) == 0, "a 1 MiB frame before hello was not refused");
	close(f);
	/* and a well-behaved session of nobody still gets in */
	f = raw_connect();
	r2_frame_reader_init(&rd, 1 << 20);
	A(raw_hello(f, &rd, true, err, sizeof(err)) == 0, "hello: %s", err);
	close(f);
	r2_frame_reader_reset(&rd);
	for (int i = 0; i < 20; i++)
		close(fd[i]);
}

#if defined(__SANITIZE_ADDRESS__)
#define RSS_SLACK_KB (64 * 1024)
#else
#define RSS_SLACK_KB 16384
#endif

START_TEST(prehello)
{
	const char *const args[] = { "--hello-timeout-ms", "1000", NULL };
	struct victim v;
	long rss0;

	start(args);
	victim_start(&v);
	rss0 = proc_status("VmRSS:");
	as_nobody(idle_conns, NULL);
	/* ASan keeps freed memory in its quarantine and shadow: a wider bound
	 * there (the daemon's own growth is what the normal build checks) */
	ck_assert_msg(proc_status("VmRSS:") < rss0 + RSS_SLACK_KB, "RSS grew from %ld to %ld kB",
		      rss0, proc_status("VmRSS:"));
	th_expect_log(&D, "no hello within 1000 ms", 1);
	th_expect_log(&D, "too many connections without hello", 1);
	/* 12 refused, their warnings rate-limited to 10 per 5 s */
	ck_assert_int_le(th_log_count(&D, "too many connections without hello"), 10);
	victim_stop(&v);
	th_stop_ok(&D);
}
END_TEST

/* Root's slots: nobody holds every pre-hello slot it may; root's r2cclctl
 * still connects. */
static void hold_prehello(void *p)
{
	int *pipes = p; /* [0], [1]: to the parent; [2], [3]: from it */
	int fd[40];
	char c;

	for (int i = 0; i < 40; i++)
		fd[i] = raw_connect();
	A(write(pipes[1], "x", 1) == 1, "pipe");
	A(read(pipes[2], &c, 1) == 1, "pipe");
	for (int i = 0; i < 40; i++)
		if (fd[i] >= 0)
			close(fd[i]);
}

START_TEST(prehello_root_slots)
{
	/* 8 overall, one kept for root; nobody may hold 7 (per uid: 40) */
	const char *const args[] = { "--max-prehello", "8", "--max-prehello-per-uid", "40",
				     NULL };
	const char *ctl = getenv("R2CCLCTL");
	int pfd[4];
	char out[4096];

	start(args);
	ck_assert_int_eq(pipe(pfd), 0);
	ck_assert_int_eq(pipe(pfd + 2), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setresgid(NOBODY, NOBODY, NOBODY) < 0 || setresuid(NOBODY, NOBODY, NOBODY) < 0)
			_exit(2);
		hold_prehello(pfd);
		_exit(0);
	}
	ck_assert_int_eq(read(pfd[0], out, 1), 1);
	/* the daemon has taken nobody's 7 and refused the rest (waited for
	 * instead of slept on: a loaded machine is slow); root still gets in */
	th_expect_log(&D, "too many connections without hello", 1);
	ck_assert_msg(ctl && ctl[0], "R2CCLCTL is not set");
	{
		const char *const argv[] = { ctl, "--socket", D.socket, "status", NULL };
		ck_assert_msg(th_run(argv, out, sizeof(out), 10000) == 0, "root's status: %s", out);
	}
	ck_assert_int_eq(write(pfd[3], "x", 1), 1);
	waitpid(pid, NULL, 0);
	th_stop_ok(&D);
}
END_TEST

/* The same resident memfd registered again and again: max_regs_per_uid; a
 * sparse memfd: refused. The daemon's fds stay bounded. */
static void many_regs(void *p)
{
	int base = *(int *)p;
	struct r2_frame_reader rd;
	char err[256];
	int f = raw_connect(), mfd = sealed_memfd(4096, true), r = 0, n;

	r2_frame_reader_init(&rd, 1 << 20);
	A(raw_hello(f, &rd, false, err, sizeof(err)) == 0, "hello: %s", err);
	for (n = 0; n < 100; n++) {
		r = raw_memreg(f, &rd, mfd, 4096, err, sizeof(err));
		if (r)
			break;
	}
	A(n == 32 && r == R2CCL_E_QUOTA, "%d registrations, then %d (%s)", n, r, err);
	A(strstr(err, "max_regs_per_uid"), "reason: %s", err);
	A(th_daemon_nfds(&D) <= base + 32 + 8 || th_daemon_nfds(&D) < 0, "daemon fds %d",
	  th_daemon_nfds(&D));
	close(mfd);
	/* 1 TiB declared, nothing allocated */
	mfd = sealed_memfd(1ull << 40, false);
	r = raw_memreg(f, &rd, mfd, 1ull << 40, err, sizeof(err));
	A(r == -EINVAL && strstr(err, "sparse"), "a sparse memfd: %d (%s)", r, err);
	close(mfd);
	close(f);
	r2_frame_reader_reset(&rd);
}

START_TEST(registrations)
{
	const char *const args[] = { "--max-regs-per-uid", "32", NULL };
	struct victim v;
	int base;

	start(args);
	victim_start(&v);
	base = th_daemon_nfds(&D);
	as_nobody(many_regs, &base);
	victim_stop(&v);
	th_stop_ok(&D);
}
END_TEST

/* Sessions of one uid: max_sessions_per_uid, with its name. */
static void many_sessions(void *p)
{
	r2ccl_client_t *c[5];
	int r = 0, n;

	for (n = 0; n < 5; n++) {
		r = r2ccl_connect(NULL, &c[n]);
		if (r)
			break;
	}
	A(n == 4 && r == R2CCL_E_QUOTA, "%d sessions, then %s", n, r2ccl_strerror(r));
	A(strstr(r2ccl_last_error(), "max_sessions_per_uid"), "reason: %s", r2ccl_last_error());
	for (int i = 0; i < n; i++)
		r2ccl_disconnect(c[i]);
}

START_TEST(sessions_per_uid)
{
	const char *const args[] = { "--max-sessions-per-uid", "4", NULL };
	struct victim v;

	start(args);
	victim_start(&v); /* root: not counted */
	as_nobody(many_sessions, NULL);
	victim_stop(&v);
	th_stop_ok(&D);
}
END_TEST

/* A flood of status requests: read at max_req_rate, all answered. */
static void flood(void *p)
{
	struct r2_frame_reader rd;
	R2ccl__StatusRequest q = R2CCL__STATUS_REQUEST__INIT;
	char err[256];
	int f = raw_connect();
	double t0;

	r2_frame_reader_init(&rd, 64 << 20);
	A(raw_hello(f, &rd, true, err, sizeof(err)) == 0, "hello: %s", err);
	t0 = th_now_ms();
	for (int i = 0; i < 300; i++) {
		struct r2_frame fr;
		q.req_id = (uint64_t)i + 1;
		raw_send(f, R2CCL__MSG_TYPE__MSG_STATUS, &q, NULL, 0);
		if (i % 16 == 15 || i == 299)
			for (int k = i - (i % 16); k <= i; k++) {
				A(raw_recv(f, &rd, &fr, R2CCL__MSG_TYPE__MSG_STATUS_REPLY),
				  "status reply %d", k);
				r2_frame_free(&fr);
			}
	}
	/* 300 requests at 200/s: 1.5 s at least (20 per 100 ms window) */
	A(th_now_ms() - t0 >= 1300, "300 requests answered in %.0f ms", th_now_ms() - t0);
	close(f);
	r2_frame_reader_reset(&rd);
}

START_TEST(request_flood)
{
	const char *const args[] = { "--max-req-rate", "200", NULL };
	struct victim v;

	start(args);
	victim_start(&v);
	as_nobody(flood, NULL);
	th_expect_log(&D, "over max_req_rate", 1);
	victim_stop(&v);
	th_stop_ok(&D);
}
END_TEST

/* Operations queued on a rank whose peer never matches them: with raw
 * sessions (the library keeps one op in flight per call), 256 AllReduces on
 * rank 0's ring. Past max_pending_ops the communicator breaks with
 * R2CCL_E_QUOTA and the cap's name as its reason; the queue is freed. */
struct raw_sess {
	int fd;
	struct r2_frame_reader rd;
	struct r2_ring_shm *ring;
	int ring_fd, sq_efd, cq_efd;
};

static void raw_sess_open(struct raw_sess *r)
{
	R2ccl__Hello h = R2CCL__HELLO__INIT;
	R2ccl__HelloReply *rep;
	struct r2_frame f;

	r->fd = raw_connect();
	A(r->fd >= 0, "connect");
	r2_frame_reader_init(&r->rd, 64 << 20);
	h.proto_version = R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT;
	h.client_name = "adversary-ring";
	raw_send(r->fd, R2CCL__MSG_TYPE__MSG_HELLO, &h, NULL, 0);
	A(raw_recv(r->fd, &r->rd, &f, R2CCL__MSG_TYPE__MSG_HELLO_REPLY), "hello reply");
	rep = r2ccl__hello_reply__unpack(NULL, f.len, f.payload);
	A(rep && rep->status == 0 && f.nfds == 3, "hello refused");
	r2ccl__hello_reply__free_unpacked(rep, NULL);
	r->ring_fd = f.fds[0];
	r->sq_efd = f.fds[1];
	r->cq_efd = f.fds[2];
	f.fds[0] = f.fds[1] = f.fds[2] = -1;
	r2_frame_free(&f);
	r->ring = mmap(NULL, sizeof(*r->ring), PROT_READ | PROT_WRITE, MAP_SHARED, r->ring_fd, 0);
	A(r->ring != MAP_FAILED, "mmap ring");
}

static void raw_comm_init(struct raw_sess *r, const void *id, size_t idlen, int rank)
{
	R2ccl__CommInit m = R2CCL__COMM_INIT__INIT;

	m.req_id = 100 + (uint64_t)rank;
	m.id.data = (uint8_t *)id;
	m.id.len = idlen;
	m.nranks = 2;
	m.rank = (uint32_t)rank;
	raw_send(r->fd, R2CCL__MSG_TYPE__MSG_COMM_INIT, &m, NULL, 0);
}

static uint32_t raw_comm_handle(struct raw_sess *r)
{
	R2ccl__CommInitReply *rep;
	struct r2_frame f;
	uint32_t h;

	A(raw_recv(r->fd, &r->rd, &f, R2CCL__MSG_TYPE__MSG_COMM_INIT_REPLY), "init reply");
	rep = r2ccl__comm_init_reply__unpack(NULL, f.len, f.payload);
	A(rep && rep->status == 0, "init: %d %s", rep ? rep->status : 0,
	  rep ? rep->error : "");
	h = rep->comm_id;
	r2ccl__comm_init_reply__free_unpacked(rep, NULL);
	r2_frame_free(&f);
	return h;
}

static void pending_flood(void *p)
{
	struct raw_sess a, b;
	R2ccl__GetUniqueId q = R2CCL__GET_UNIQUE_ID__INIT;
	R2ccl__UniqueIdReply *idrep;
	R2ccl__CommReason cr = R2CCL__COMM_REASON__INIT;
	R2ccl__Result *res;
	struct r2_frame f;
	char err[256];
	uint8_t id[256];
	size_t idlen;
	uint32_t handle, got = 0, quota = 0;
	uint64_t one = 1;
	int mfd;
	uint32_t mem;

	raw_sess_open(&a);
	raw_sess_open(&b);
	mfd = sealed_memfd(4096, true);
	{
		R2ccl__MemRegister m = R2CCL__MEM_REGISTER__INIT;
		R2ccl__MemRegisterReply *mr;
		m.req_id = 9;
		m.size = 4096;
		raw_send(a.fd, R2CCL__MSG_TYPE__MSG_MEM_REGISTER, &m, &mfd, 1);
		A(raw_recv(a.fd, &a.rd, &f, R2CCL__MSG_TYPE__MSG_MEM_REGISTER_REPLY), "reg");
		mr = r2ccl__mem_register_reply__unpack(NULL, f.len, f.payload);
		A(mr && mr->status == 0, "register: %s", mr ? mr->error : "");
		mem = mr->mem_id;
		r2ccl__mem_register_reply__free_unpacked(mr, NULL);
		r2_frame_free(&f);
	}
	q.req_id = 1;
	raw_send(a.fd, R2CCL__MSG_TYPE__MSG_GET_UNIQUE_ID, &q, NULL, 0);
	A(raw_recv(a.fd, &a.rd, &f, R2CCL__MSG_TYPE__MSG_UNIQUE_ID_REPLY), "unique id");
	idrep = r2ccl__unique_id_reply__unpack(NULL, f.len, f.payload);
	A(idrep && idrep->id.len <= sizeof(id), "unique id reply");
	idlen = idrep->id.len;
	memcpy(id, idrep->id.data, idlen);
	r2ccl__unique_id_reply__free_unpacked(idrep, NULL);
	r2_frame_free(&f);
	raw_comm_init(&a, id, idlen, 0);
	raw_comm_init(&b, id, idlen, 1);
	handle = raw_comm_handle(&a);
	(void)raw_comm_handle(&b);

	/* 200 AllReduces of rank 0; rank 1 never calls one */
	for (uint32_t i = 0; i < 200; i++) {
		struct r2_sqe *e = &a.ring->sq[i % R2_RING_ENTRIES];
		memset(e, 0, sizeof(*e));
		e->tag = i + 1;
		e->opcode = R2_OP_ALLREDUCE;
		e->comm_id = handle;
		e->count = 1;
		e->dtype = R2CCL_FLOAT32;
		e->redop = R2CCL_SUM;
		e->rank = 0;
		e->send_mem = e->recv_mem = mem;
	}
	atomic_store(&a.ring->sq_tail, 200);
	A(write(a.sq_efd, &one, sizeof(one)) == sizeof(one), "doorbell");
	for (int w = 0; w < 500 && got < 200; w++) {
		got = atomic_load(&a.ring->cq_tail);
		usleep(10000);
	}
	A(got == 200, "%u of 200 completions", got);
	for (uint32_t i = 0; i < got; i++)
		quota += a.ring->cq[i % R2_RING_ENTRIES].status == R2CCL_E_QUOTA;
	/* the 16 queued and the one refused: R2CCL_E_QUOTA; later ones: broken */
	A(quota == 17, "%u completions with R2CCL_E_QUOTA", quota);
	cr.req_id = 7;
	cr.comm_id = handle;
	raw_send(a.fd, R2CCL__MSG_TYPE__MSG_COMM_REASON, &cr, NULL, 0);
	A(raw_recv(a.fd, &a.rd, &f, R2CCL__MSG_TYPE__MSG_RESULT), "reason");
	res = r2ccl__result__unpack(NULL, f.len, f.payload);
	A(res && res->status == R2CCL_E_QUOTA && strstr(res->error, "max_pending_ops"),
	  "reason: %d %s", res ? res->status : 0, res ? res->error : "");
	snprintf(err, sizeof(err), "%s", res->error);
	r2ccl__result__free_unpacked(res, NULL);
	r2_frame_free(&f);
	close(a.fd);
	close(b.fd);
	close(mfd);
}

START_TEST(pending_ops)
{
	const char *const args[] = { "--max-pending-ops", "16", NULL };
	struct victim v;

	start(args);
	victim_start(&v);
	as_nobody(pending_flood, NULL);
	th_expect_log(&D, "quota max_pending_ops", 1);
	victim_stop(&v);
	th_stop_ok(&D);
}
END_TEST

/* Many communicators that never form (one rank of two each, no executor
 * thread yet): past max_comms the answer is R2CCL_E_QUOTA at once, and the
 * daemon keeps answering (the id allocation and the caps are bounded work). */
static void comm_flood(void *p)
{
	struct raw_sess a;
	R2ccl__GetUniqueId q = R2CCL__GET_UNIQUE_ID__INIT;
	R2ccl__UniqueIdReply *idrep;
	R2ccl__CommInitReply *rep;
	struct r2_frame f;
	uint8_t id[256];
	size_t idlen;
	double t0;

	raw_sess_open(&a);
	q.req_id = 1;
	raw_send(a.fd, R2CCL__MSG_TYPE__MSG_GET_UNIQUE_ID, &q, NULL, 0);
	A(raw_recv(a.fd, &a.rd, &f, R2CCL__MSG_TYPE__MSG_UNIQUE_ID_REPLY), "unique id");
	idrep = r2ccl__unique_id_reply__unpack(NULL, f.len, f.payload);
	A(idrep && idrep->id.len <= sizeof(id) && idrep->id.len >= 32, "unique id reply");
	idlen = idrep->id.len;
	memcpy(id, idrep->id.data, idlen);
	r2ccl__unique_id_reply__free_unpacked(idrep, NULL);
	r2_frame_free(&f);
	t0 = th_now_ms();
	for (uint32_t i = 0; i < 301; i++) {
		/* another communicator each time: its nonce (bytes 16-23) */
		memcpy(id + 16, &i, 4);
		raw_comm_init(&a, id, idlen, 0);
	}
	/* the only reply so far: the 301st, refused */
	A(raw_recv(a.fd, &a.rd, &f, R2CCL__MSG_TYPE__MSG_COMM_INIT_REPLY), "no refusal");
	rep = r2ccl__comm_init_reply__unpack(NULL, f.len, f.payload);
	A(rep && rep->status == R2CCL_E_QUOTA && strstr(rep->error, "max_comms"),
	  "the 301st: %d %s", rep ? rep->status : 0, rep ? rep->error : "");
	r2ccl__comm_init_reply__free_unpacked(rep, NULL);
	r2_frame_free(&f);
	/* bounded work: a generous bound (seconds when all is well under the
	 * sanitizers), since a loaded machine is slow; a hang fails above */
	A(th_now_ms() - t0 < 30000, "301 communicators took %.0f ms", th_now_ms() - t0);
	close(a.fd);
}

START_TEST(comm_id_flood)
{
	const char *const args[] = { "--max-comms", "300", "--max-comms-per-uid", "1000", NULL };
	struct victim v;

	start(args);
	victim_start(&v); /* root's communicator counts: 299 left for nobody */
	as_nobody(comm_flood, NULL);
	victim_stop(&v);
	th_stop_ok(&D);
}
END_TEST

/* The daemon at its fd limit (RLIMIT_NOFILE 64 here): nobody's sessions
 * fill it; the listener stops polling for a while on EMFILE instead of
 * spinning (bounded CPU, a handful of rate-limited lines), root's job runs. */
static long daemon_cpu_ticks(void)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;

	/* the main thread: the loop that runs the listener (the AllReduces run
	 * on the dispatcher and executor threads) */
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)D.pid, (int)D.pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
			 &st) != 2)
		return -1;
	return (long)(ut + st);
}

static void fd_flood(void *p)
{
	int fd[64];
	R2ccl__Hello h = R2CCL__HELLO__INIT;

	h.proto_version = R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT;
	h.client_name = "fd-flood";
	h.control_only = true; /* one fd each in the daemon: its socket */
	for (int i = 0; i < 64; i++) {
		fd[i] = raw_connect();
		A(fd[i] >= 0, "connect");
		raw_send(fd[i], R2CCL__MSG_TYPE__MSG_HELLO, &h, NULL, 0);
		usleep(5000);
	}
	/* tell the parent, then hold them a second */
	A(write(*(int *)p, "x", 1) == 1, "pipe");
	sleep(1);
	for (int i = 0; i < 64; i++)
		close(fd[i]);
}

START_TEST(fd_limit)
{
	const char *const args[] = { "--max-sessions-per-uid", "1000", NULL };
	struct rlimit old, low;
	struct victim v;
	int pfd[2];
	long cpu0, cpu1;
	char c;

	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	low.rlim_cur = 64; /* the soft limit only: this process gets it back */
	low.rlim_max = old.rlim_max;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	start(args); /* the daemon inherits the limit */
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
	victim_start(&v);
	ck_assert_int_eq(pipe(pfd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setresgid(NOBODY, NOBODY, NOBODY) < 0 || setresuid(NOBODY, NOBODY, NOBODY) < 0)
			_exit(2);
		fd_flood(&pfd[1]);
		_exit(0);
	}
	ck_assert_int_eq(read(pfd[0], &c, 1), 1);
	cpu0 = daemon_cpu_ticks();
	usleep(800000);
	cpu1 = daemon_cpu_ticks();
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	th_expect_log(&D, "not accepting for", 1);
	ck_assert_int_le(th_log_count(&D, "not accepting for"), 10);
	/* 0.8 s at the limit: the loop thread used well under a CPU, not the
	 * spin of a loop on EMFILE */
	ck_assert_msg(cpu1 - cpu0 < 40, "the loop used %ld ticks in 0.8 s", cpu1 - cpu0);
	victim_stop(&v);
	th_stop_ok(&D);
}
END_TEST

/* Events and peers: another user sees none of root's. */
static void events_nobody(void *p)
{
	const char *ctl = getenv("R2CCLCTL");
	const char *argv[] = { ctl, "--socket", D.socket, "events", NULL };
	char out[16384];

	A(ctl && th_run(argv, out, sizeof(out), 10000) == 0, "r2cclctl events: %s", out);
	A(!strstr(out, "comm_failed") && !strstr(out, (const char *)p),
	  "nobody sees root's events: %s", out);

	/* its own communicator fails the same way: that event it sees */
	struct owner o;
	r2ccl_client_t *c1;
	r2ccl_comm_t *comm1 = NULL;
	memset(&o, 0, sizeof(o));
	A(r2ccl_connect(NULL, &o.c) == 0 && r2ccl_connect(NULL, &c1) == 0, "connect");
	A(r2ccl_get_unique_id(o.c, &o.id) == 0, "unique id");
	o.nranks = 2;
	A(pthread_create(&o.t, NULL, owner_init, &o) == 0, "thread");
	/* its CommInit reached the daemon: waited for (a loaded machine is slow) */
	A(th_wait_status(&D, COMM_JOINED_1, 10000), "no communicator with one rank joined");
	A(r2ccl_comm_init_rank(c1, &comm1, 3, &o.id, 1) == R2CCL_E_MISMATCH, "mismatch");
	pthread_join(o.t, NULL);
	A(th_run(argv, out, sizeof(out), 10000) == 0, "r2cclctl events: %s", out);
	A(strstr(out, "comm_failed") && strstr(out, "nranks 3"), "its own event is missing: %s",
	  out);
	r2ccl_disconnect(c1);
	r2ccl_disconnect(o.c);
}

START_TEST(events_filtered)
{
	const char *ctl = getenv("R2CCLCTL");
	const char *argv[] = { ctl, "--socket", D.socket, "events", NULL };
	struct owner o;
	r2ccl_client_t *c1;
	r2ccl_comm_t *comm1 = NULL;
	char out[16384], subj[64];

	ck_assert_msg(ctl && ctl[0], "R2CCLCTL is not set");
	start(NULL);
	/* root's communicator fails (rank 1 says nranks 3): a comm_failed event */
	owner_begin(&o, R2CCL_SHARE_OWNER);
	ck_assert_int_eq(r2ccl_connect(NULL, &c1), 0);
	ck_assert_int_eq(r2ccl_comm_init_rank(c1, &comm1, 3, &o.id, 1), R2CCL_E_MISMATCH);
	pthread_join(o.t, NULL);
	ck_assert_int_eq(o.r, R2CCL_E_MISMATCH);
	snprintf(subj, sizeof(subj), "communicator ");
	ck_assert_int_eq(th_run(argv, out, sizeof(out), 10000), 0);
	ck_assert_msg(strstr(out, "comm_failed"), "root does not see its event: %s", out);
	as_nobody(events_nobody, subj);
	r2ccl_disconnect(c1);
	r2ccl_disconnect(o.c);
	th_stop_ok(&D);
}
END_TEST

/* The victim alone, for the figures beside the attacks'. */
START_TEST(victim_alone)
{
	struct victim v;

	start(NULL);
	victim_start(&v);
	usleep(1500000);
	victim_stop(&v);
	th_stop_ok(&D);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { join_other_uid,	 join_shared,	    comms_per_uid,
				       prehello,	 prehello_root_slots, registrations,
				       sessions_per_uid, request_flood, pending_ops,
				       events_filtered, comm_id_flood, fd_limit, victim_alone };

	if (geteuid() != 0) {
		printf("SKIP: the attacks run as uid %d from a child of root (run as root)\n",
		       NOBODY);
		return 77;
	}
	return th_run_suite(th_suite("adversary", 120, tests, sizeof(tests) / sizeof(tests[0])));
}
