// SPDX-License-Identifier: MIT
/*
 * Integration tests of tenants (issue 20, docs/tenancy.md). Clients are
 * forked children moved into child cgroups of the cgroup v2 hierarchy (found
 * in /proc/self/mountinfo: /sys/fs/cgroup, or /sys/fs/cgroup/unified on
 * hybrid hosts) before they drop to an unprivileged uid; the daemon's
 * configuration maps each cgroup to a tenant with quotas.
 *
 * isolation_*: a victim tenant runs a 2-rank AllReduce loop while a
 * neighbour tenant (of the same uid, then of another uid) tries the
 * victim's communicator id, memory ids and replayed unique id: every try is
 * refused with a clear error, and the victim has no failed operation. Then
 * each runs into its own tenant's quotas (communicators, registrations,
 * sessions): R2CCL_E_QUOTA naming the tenant's quota.
 * policy: `r2cclctl tenants` (the configuration's tenants), `tenants set`
 * (root only), and r2ccl_set_bandwidth_limit (a cap never above the
 * policy's, a reservation).
 *
 * Needs root and a writable cgroup v2 hierarchy (exits 77 otherwise).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "framing.h"
#include "harness.h"
#include "victim.h"
#include "r2ccl.h"
#include "r2ccl.pb-c.h"

#define UID_A 65534
#define UID_B 65533

static struct th_daemon D;
static char CG[256];   /* the v2 hierarchy's mount point */
static char BASE[64];  /* "/r2ccl-test-PID": the tenants' cgroups below it */

/* ---- cgroups ---- */

/* The mount point of the cgroup v2 hierarchy (mountinfo's fstype cgroup2). */
static bool cgroup_v2_mount(char *out, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[1024];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char mnt[512], *dash = strstr(line, " - ");
		if (!dash || strncmp(dash + 3, "cgroup2 ", 8))
			continue;
		/* id parent major:minor root mount-point ... */
		if (sscanf(line, "%*s %*s %*s %*s %511s", mnt) == 1 && strlen(mnt) < len) {
			snprintf(out, len, "%s", mnt);
			found = true;
		}
	}
	fclose(f);
	return found;
}

/* Two leaves whose paths agree in their first 63 characters: tenants made
 * for them have the same (cut) name */
#define LONG_LEAF "tenant-name-cut-at-63-characters-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
/* A leaf of 240 characters: its path (BASE/leaf) is over the 255 a tenant
 * keeps */
#define HUGE_LEAF "cgroup-path-too-long-yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"

static int cg_path(char *buf, size_t len, const char *leaf, const char *file)
{
	return snprintf(buf, len, "%s%s%s%s%s%s", CG, BASE, leaf ? "/" : "", leaf ? leaf : "",
			file ? "/" : "", file ? file : "");
}

/* Makes BASE and its leaves; false if the hierarchy is not writable. */
static bool cg_setup(void)
{
	static const char *const leaves[] = { "a", "b", "c", "d", "e", LONG_LEAF "1",
					      LONG_LEAF "2", HUGE_LEAF };
	char p[512];

	if (!cgroup_v2_mount(CG, sizeof(CG)))
		return false;
	snprintf(BASE, sizeof(BASE), "/r2ccl-test-%d", (int)getpid());
	cg_path(p, sizeof(p), NULL, NULL);
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		return false;
	for (size_t i = 0; i < sizeof(leaves) / sizeof(leaves[0]); i++) {
		cg_path(p, sizeof(p), leaves[i], NULL);
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return false;
	}
	return true;
}

static void cg_cleanup(void)
{
	static const char *const leaves[] = { "a", "b", "c", "d", "e", LONG_LEAF "1",
					      LONG_LEAF "2", HUGE_LEAF };
	char p[512];

	for (size_t i = 0; i < sizeof(leaves) / sizeof(leaves[0]); i++) {
		cg_path(p, sizeof(p), leaves[i], NULL);
		rmdir(p);
	}
	cg_path(p, sizeof(p), NULL, NULL);
	rmdir(p);
}

/* Moves the calling process into BASE/leaf. */
static int cg_enter(const char *leaf)
{
	char p[512];
	int fd, r = 0;

	cg_path(p, sizeof(p), leaf, "cgroup.procs");
	fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, "0", 1) != 1)
		r = -errno;
	close(fd);
	return r;
}

/* ---- children: any failed check exits 1 ---- */

static void child_fail(const char *who, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));
static void child_fail(const char *who, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", who);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	_exit(1);
}

#define C(who, cond, ...)                          \
	do {                                       \
		if (!(cond))                       \
			child_fail(who, __VA_ARGS__); \
	} while (0)

/* In the child: the tenant's cgroup, then the uid. */
static void become(const char *who, const char *leaf, uid_t uid)
{
	int r = cg_enter(leaf);

	C(who, r == 0, "cgroup %s%s: %s", BASE, leaf, strerror(-r));
	C(who, setresgid(uid, uid, uid) == 0 && setresuid(uid, uid, uid) == 0, "setresuid: %s",
	  strerror(errno));
}

static pid_t fork_child(void (*fn)(void *), void *arg)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		fn(arg);
		_exit(0);
	}
	return pid;
}

static void wait_ok(pid_t pid, const char *who)
{
	int st;

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s's checks failed (status %d)", who,
		      st);
}

static void expect_quota(const char *who, int r, const char *quota)
{
	C(who, r == R2CCL_E_QUOTA, "expected R2CCL_E_QUOTA (%s), got %s (%s)", quota,
	  r2ccl_strerror(r), r2ccl_last_error());
	C(who, strstr(r2ccl_last_error(), quota), "the error does not name %s: %s", quota,
	  r2ccl_last_error());
}

/* ---- the victim: a 2-rank AllReduce loop in its tenant (victim.h) ---- */

struct victim {
	const char *leaf, *tenant;
	uid_t uid;
	int id_w;    /* the unique id goes out here */
	int ready_w; /* one byte when the loop runs */
	int stop_r;  /* one byte: stop */
	struct th_victim l;
};

#define VICTIM_BYTES (256u << 10)
/* The neighbour alternates: quiet for WIN_MS, trying for WIN_MS, WIN_PAIRS
 * times; the victim's p99 in the trying windows is set against its p99 in
 * the quiet ones (each of some thousands of AllReduces), pooled, and pair
 * by pair (the median of the ten ratios: a burst of the machine that falls
 * in one window moves the pooled p99 by up to 15% either way on 2 cores,
 * the median by 0-3%). R2C_TENANTS_IDLE_NEIGHBOUR=1 keeps the neighbour
 * quiet in its trying windows too: the noise floor. */
#define WIN_PAIRS 10
#define WIN_MS 200.0

static void victim_main(void *arg)
{
	struct victim *v = arg;
	char b = 1;

	become("victim", v->leaf, v->uid);
	/* a decode-sized AllReduce (256 KiB): the inference traffic a
	 * neighbour must not slow; test_adversary's victim keeps 4 KiB */
	C("victim", th_victim_init_size(&v->l, VICTIM_BYTES) == 0, "%s", v->l.why);
	C("victim", write(v->id_w, &v->l.id, sizeof(v->l.id)) == sizeof(v->l.id), "id pipe");
	C("victim", th_victim_run(&v->l) == 0, "%s", v->l.why);
	C("victim", write(v->ready_w, &b, 1) == 1, "ready pipe");
	/* the neighbour's windows: quiet, trying, quiet, trying, ... */
	double win[4 * WIN_PAIRS], quiet[2 * WIN_PAIRS], busy[2 * WIN_PAIRS];
	C("victim", read(v->stop_r, win, sizeof(win)) == sizeof(win), "stop pipe");
	/* at least 20 AllReduces in all (a loaded machine is slow) */
	C("victim", th_victim_stop(&v->l, 20, 30) == 0, "beside the neighbour: %s", v->l.why);
	for (int k = 0; k < WIN_PAIRS; k++) {
		memcpy(&quiet[2 * k], &win[4 * k], 2 * sizeof(double));
		memcpy(&busy[2 * k], &win[4 * k + 2], 2 * sizeof(double));
	}
	/* the AllReduces begun in the quiet windows, then in the busy ones:
	 * interleaved, so that a drift of the machine's speed (two seconds
	 * alone differed by 20% on 2 cores) falls on both alike */
	size_t n0 = th_victim_windows(&v->l, quiet, WIN_PAIRS);
	double p50 = v->l.p50, p99 = v->l.p99;
	size_t n1 = th_victim_windows(&v->l, busy, WIN_PAIRS);
	C("victim", n0 >= 20 && n1 >= 20, "only %zu and %zu AllReduces in the windows", n0, n1);
	/* pair by pair: the median of the trying / quiet p99 ratios */
	double ratio[WIN_PAIRS];
	for (int k = 0; k < WIN_PAIRS; k++) {
		th_victim_windows(&v->l, &quiet[2 * k], 1);
		double q99 = v->l.p99;
		th_victim_windows(&v->l, &busy[2 * k], 1);
		ratio[k] = q99 > 0 ? v->l.p99 / q99 : 1.0;
	}
	qsort(ratio, WIN_PAIRS, sizeof(ratio[0]), th_cmp_double);
	double pair_move = 100.0 * (ratio[WIN_PAIRS / 2] - 1.0);
	th_victim_windows(&v->l, busy, WIN_PAIRS);
	double move = p99 > 0 ? 100.0 * (v->l.p99 - p99) / p99 : 0.0;
	/* figures against issue 20's 10%, not checks: on 2 cores the machine's
	 * own bursts move them more than that now and then (docs/tenancy.md) */
	printf("victim (tenant of %s, uid %u), AllReduces of %zu KiB, %d x %.0f ms windows each: "
	       "neighbour quiet %zu, p50 %.0f us, p99 %.0f us; neighbour trying %zu, p50 %.0f us, "
	       "p99 %.0f us (p99 %+.1f%%; median of the %d pairs' p99 ratios %+.1f%%)\n",
	       v->leaf, (unsigned)v->uid, (size_t)VICTIM_BYTES >> 10, WIN_PAIRS, WIN_MS, n0, p50,
	       p99, n1, v->l.p50, v->l.p99, move, WIN_PAIRS, pair_move);
	fflush(stdout);
	/* its own quota: max_comms = 1 (the 2-rank one) */
	r2ccl_unique_id_t id2;
	r2ccl_comm_t *c2 = NULL;
	char q[96];
	snprintf(q, sizeof(q), "quota max_comms of tenant %s", v->tenant);
	C("victim", r2ccl_get_unique_id(v->l.cl[0], &id2) == 0, "unique id");
	expect_quota("victim", r2ccl_comm_init_rank(v->l.cl[0], &c2, 1, &id2, 0), q);
	C("victim", th_victim_fini(&v->l) == 0, "%s", v->l.why);
}

/* ---- the neighbour ---- */

struct neighbour {
	const char *leaf, *tenant;
	uid_t uid;
	int id_r;
	int win_w; /* its windows' first and last th_now_ms go out here */
	uint32_t victim_comm; /* the victim's communicator id (r2cclctl comms) */
};

/* A raw session: hello, then requests whose Result status is returned. */
struct raw {
	int fd;
	struct r2_frame_reader rd;
};

static void raw_send(struct raw *w, uint16_t type, const void *msg)
{
	const ProtobufCMessage *m = msg;
	size_t len = protobuf_c_message_get_packed_size(m);
	uint8_t buf[512];

	C("neighbour", len <= sizeof(buf), "message too long");
	protobuf_c_message_pack(m, buf);
	C("neighbour", r2_frame_send(w->fd, type, buf, (uint32_t)len, NULL, 0, 5000) == 0, "send");
}

static void raw_open(struct raw *w)
{
	R2ccl__Hello h = R2CCL__HELLO__INIT;
	struct r2_frame f;

	w->fd = th_connect_raw(D.socket);
	C("neighbour", w->fd >= 0, "connect");
	r2_frame_reader_init(&w->rd, 1 << 20);
	h.proto_version = R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT;
	h.client_name = "neighbour";
	h.control_only = true;
	raw_send(w, R2CCL__MSG_TYPE__MSG_HELLO, &h);
	C("neighbour", r2_frame_recv(w->fd, &w->rd, &f, 5000) == 1, "hello reply");
	r2_frame_free(&f);
}

/* The Result's status of a request; its error text in err. */
static int raw_result(struct raw *w, uint16_t type, const void *msg, char *err, size_t errlen)
{
	struct r2_frame f;
	R2ccl__Result *res;
	int st;

	raw_send(w, type, msg);
	C("neighbour", r2_frame_recv(w->fd, &w->rd, &f, 5000) == 1, "no reply");
	C("neighbour", f.type == R2CCL__MSG_TYPE__MSG_RESULT, "reply type %u", f.type);
	res = r2ccl__result__unpack(NULL, f.len, f.payload);
	C("neighbour", res, "result unpack");
	st = res->status;
	snprintf(err, errlen, "%s", res->error ? res->error : "");
	r2ccl__result__free_unpacked(res, NULL);
	r2_frame_free(&f);
	return st;
}

static void raw_close(struct raw *w)
{
	r2_frame_reader_reset(&w->rd);
	close(w->fd);
}

/* One round of tries at the victim's communicator, memory and unique id,
 * each refused with a clear error, and of this tenant's registration quota
 * (max_regs=2). c and w stay open over the rounds (max_sessions=2). */
static void neighbour_round(struct neighbour *n, r2ccl_client_t *c, struct raw *w,
			    const r2ccl_unique_id_t *id)
{
	r2ccl_comm_t *comm = NULL;
	char err[256], q[128];
	void *p[3] = { NULL, NULL, NULL };
	int r;

	/* the victim's unique id, replayed: a free rank is taken by neither */
	r = r2ccl_comm_init_rank(c, &comm, 2, id, 1);
	C("neighbour", r == -EACCES, "joining the victim's communicator: %s (%s), not -EACCES",
	  r2ccl_strerror(r), r2ccl_last_error());
	C("neighbour", strstr(r2ccl_last_error(), "may not join"), "unclear error: %s",
	  r2ccl_last_error());

	/* the victim's communicator id and memory ids, on a raw session */
	R2ccl__Rebalance rb = R2CCL__REBALANCE__INIT;
	rb.req_id = 1;
	rb.comm_id = n->victim_comm;
	r = raw_result(w, R2CCL__MSG_TYPE__MSG_REBALANCE, &rb, err, sizeof(err));
	C("neighbour", r == -ENOENT && err[0], "rebalance of the victim's communicator: %d (%s)",
	  r, err);
	for (uint32_t rank = 0; rank < 2; rank++) {
		R2ccl__CommDestroy cd = R2CCL__COMM_DESTROY__INIT;
		cd.req_id = 2;
		cd.comm_id = n->victim_comm << 16 | rank;
		cd.abort = true;
		r = raw_result(w, R2CCL__MSG_TYPE__MSG_COMM_DESTROY, &cd, err, sizeof(err));
		C("neighbour", r == -ENOENT && strstr(err, "no such communicator"),
		  "abort of the victim's rank %u: %d (%s)", rank, r, err);
	}
	for (uint32_t m = 1; m <= 4; m++) {
		R2ccl__MemDeregister md = R2CCL__MEM_DEREGISTER__INIT;
		md.req_id = 3;
		md.mem_id = m;
		r = raw_result(w, R2CCL__MSG_TYPE__MSG_MEM_DEREGISTER, &md, err, sizeof(err));
		C("neighbour", r == R2CCL_E_BAD_BUFFER && strstr(err, "no such memory"),
		  "deregistering memory id %u: %d (%s)", m, r, err);
	}

	snprintf(q, sizeof(q), "quota max_regs of tenant %s", n->tenant);
	C("neighbour", r2ccl_mem_alloc(c, 4096, &p[0]) == 0 && r2ccl_mem_alloc(c, 4096, &p[1]) == 0,
	  "two registrations: %s", r2ccl_last_error());
	expect_quota("neighbour", r2ccl_mem_alloc(c, 4096, &p[2]), q);
	r2ccl_mem_free(c, p[0]);
	r2ccl_mem_free(c, p[1]);
}

static void neighbour_main(void *arg)
{
	struct neighbour *n = arg;
	r2ccl_unique_id_t id;
	r2ccl_client_t *c, *c2 = NULL, *c3 = NULL;
	r2ccl_comm_t *mine = NULL, *mine2 = NULL;
	struct raw w;
	char q[128];
	double win[4 * WIN_PAIRS];
	int rounds = 0;

	/* Its own processing runs at nice 19: on a 2-core host the victim's
	 * ranks, the daemon and a neighbour that never sleeps share the cores,
	 * and what the victim would measure is the kernel's CPU share (which
	 * an operator sets per tenant cgroup, cpu.weight), not the daemon's
	 * isolation. The daemon's work for the neighbour runs at its own
	 * priority: that is what the figure measures. */
	C("neighbour", setpriority(PRIO_PROCESS, 0, 19) == 0, "nice: %s", strerror(errno));
	become("neighbour", n->leaf, n->uid);
	C("neighbour", read(n->id_r, &id, sizeof(id)) == sizeof(id), "id pipe");
	C("neighbour", r2ccl_connect(NULL, &c) == 0, "connect: %s", r2ccl_last_error());
	raw_open(&w);
	for (int k = 0; k < 2 * WIN_PAIRS; k++) {
		double t0 = th_now_ms();
		if (k % 2 == 0 || getenv("R2C_TENANTS_IDLE_NEIGHBOUR")) {
			usleep((useconds_t)(WIN_MS * 1000));
		} else {
			do {
				neighbour_round(n, c, &w, &id);
				rounds++;
			} while (th_now_ms() - t0 < WIN_MS);
		}
		win[2 * k] = t0;
		win[2 * k + 1] = th_now_ms();
	}
	raw_close(&w);
	C("neighbour", write(n->win_w, win, sizeof(win)) == sizeof(win), "window pipe");
	printf("neighbour (tenant of %s, uid %u): %d rounds of tries in %d windows of %.0f ms, "
	       "each refused\n", n->leaf, (unsigned)n->uid, rounds, WIN_PAIRS, WIN_MS);
	fflush(stdout);

	/* its own quotas: max_comms=1, max_sessions=2 (max_regs: each round) */
	snprintf(q, sizeof(q), "quota max_comms of tenant %s", n->tenant);
	r2ccl_unique_id_t u1, u2;
	C("neighbour", r2ccl_get_unique_id(c, &u1) == 0 && r2ccl_get_unique_id(c, &u2) == 0,
	  "unique ids");
	C("neighbour", r2ccl_comm_init_rank(c, &mine, 1, &u1, 0) == 0, "its first communicator: %s",
	  r2ccl_last_error());
	expect_quota("neighbour", r2ccl_comm_init_rank(c, &mine2, 1, &u2, 0), q);
	snprintf(q, sizeof(q), "quota max_sessions of tenant %s", n->tenant);
	C("neighbour", r2ccl_connect(NULL, &c2) == 0, "a second session: %s", r2ccl_last_error());
	expect_quota("neighbour", r2ccl_connect(NULL, &c3), q);
	C("neighbour", r2ccl_comm_destroy(mine) == 0, "destroy");
	r2ccl_disconnect(c2);
	r2ccl_disconnect(c);
}

/* ---- fixtures ---- */

static char CONF[512];

/* The configuration: tb's weight as given, then extra (a line, or ""). */
static void write_conf(int tb_weight, const char *extra)
{
	FILE *f = fopen(CONF, "we");
	/* the neighbours' tenants' control requests per second: their tries
	 * are paced there (R2C_TENANTS_NEIGHBOUR_RATE=0: not, for a comparison) */
	const char *nrate = getenv("R2C_TENANTS_NEIGHBOUR_RATE");

	if (!nrate || !*nrate)
		nrate = "200";

	ck_assert_ptr_nonnull(f);
	fprintf(f, "[tenants]\n"
		   "default = weight=1\n"
		   "ta = cgroup=%s/a weight=1 max_comms=1\n"
		   "tb = cgroup=%s/b weight=%d rate=300M class=latency max_comms=1 max_regs=2 "
		   "max_sessions=2 max_req_rate=%s\n"
		   "tc = cgroup=%s/c weight=1 max_comms=1\n"
		   "td = cgroup=%s/d weight=1 max_comms=1 max_regs=2 max_sessions=2 max_req_rate=%s\n"
		   "te = cgroup=%s/e weight=1 max_pending_ops=2 max_req_rate=100\n%s",
		BASE, BASE, tb_weight, nrate, BASE, BASE, nrate, BASE, extra);
	fclose(f);
}

static void start(void)
{
	char dir[] = "/tmp/r2ccl-tenants-XXXXXX";
	const char *args[] = { "--config", CONF, NULL };

	th_temp_path(dir, "r2ccld.conf", CONF, sizeof(CONF));
	ck_assert_int_eq(chmod(dir, 0755), 0);
	write_conf(3, "");
	th_start(&D, args);
	/* the clients run as other users: they must reach the socket */
	ck_assert_int_eq(chmod(D.dir, 0755), 0);
	th_expect_log(&D, "tenants: 6 from", 1);
}

/* The id of the only communicator (r2cclctl comms --json, as root). */
static uint32_t only_comm_id(void)
{
	const char *argv[] = { getenv("R2CCLCTL"), "--json", "comms", NULL };
	static char out[1 << 16];
	char *p;

	ck_assert_int_eq(th_run(argv, out, sizeof(out), 10000), 0);
	p = strstr(out, "\"id\":");
	ck_assert_msg(p, "no communicator in %s", out);
	ck_assert_ptr_null(strstr(p + 1, "\"id\":"));
	return (uint32_t)strtoul(p + 5, NULL, 10);
}

static void isolation(const char *vleaf, const char *vtenant, uid_t vuid, const char *nleaf,
		      const char *ntenant, uid_t nuid)
{
	static struct victim v;
	struct neighbour n = { .leaf = nleaf, .tenant = ntenant, .uid = nuid };
	int idp[2], readyp[2], stopp[2], winp[2];
	pid_t vp, np;
	double win[4 * WIN_PAIRS];
	char b = 1;

	start();
	ck_assert_int_eq(pipe(idp), 0);
	ck_assert_int_eq(pipe(readyp), 0);
	ck_assert_int_eq(pipe(stopp), 0);
	memset(&v, 0, sizeof(v));
	v.leaf = vleaf;
	v.tenant = vtenant;
	v.uid = vuid;
	v.id_w = idp[1];
	v.ready_w = readyp[1];
	v.stop_r = stopp[0];
	n.id_r = idp[0];
	vp = fork_child(victim_main, &v);
	ck_assert_int_eq(read(readyp[0], &b, 1), 1);
	n.victim_comm = only_comm_id();
	ck_assert_int_eq(pipe(winp), 0); /* after the victim's fork: only the neighbour has it */
	n.win_w = winp[1];
	np = fork_child(neighbour_main, &n);
	close(winp[1]);
	/* the neighbour's window goes on to the victim, which stops then; a
	 * neighbour that died stops it too (an empty window fails its check) */
	ssize_t got = read(winp[0], win, sizeof(win));
	if (got != (ssize_t)sizeof(win))
		memset(win, 0, sizeof(win));
	ck_assert_int_eq(write(stopp[1], win, sizeof(win)), sizeof(win));
	close(winp[0]);
	wait_ok(np, "the neighbour");
	wait_ok(vp, "the victim");
	th_expect_log(&D, "may not join it", 1);
	th_stop_ok(&D);
}

/* Two users in cgroups whose tenants' names are equal (cut to 63
 * characters): each sees its own row of `r2cclctl tenants` only. Before
 * 2026-12-07 rows were matched by name, and each saw both. */
struct cut_child {
	const char *leaf;
	uid_t uid;
	int ready_w, go_r, done_w;
};

static void cut_main(void *arg)
{
	const struct cut_child *k = arg;
	const char *argv[] = { getenv("R2CCLCTL"), "--json", "tenants", NULL };
	static char out[1 << 16];
	r2ccl_client_t *c;
	char b = 1;

	become("cut", k->leaf, k->uid);
	C("cut", r2ccl_connect(NULL, &c) == 0, "connect: %s", r2ccl_last_error());
	C("cut", write(k->ready_w, &b, 1) == 1, "ready");
	C("cut", read(k->go_r, &b, 1) == 1, "go");
	C("cut", th_run(argv, out, sizeof(out), 10000) == 0, "r2cclctl tenants: %s", out);
	const char *row = strstr(out, "\"cgroup\":");
	C("cut", row && strstr(row, k->leaf), "no row of its own: %s", out);
	C("cut", !strstr(row + 1, "\"cgroup\":"), "%s sees another row: %s", k->leaf, out);
	C("cut", write(k->done_w, &b, 1) == 1, "done");
	C("cut", read(k->go_r, &b, 1) == 1, "go");
	r2ccl_disconnect(c);
}

START_TEST(rows_by_tenant_not_name)
{
	struct cut_child k[2] = { { LONG_LEAF "1", UID_A, 0, 0, 0 },
				  { LONG_LEAF "2", UID_B, 0, 0, 0 } };
	int ready[2], go[2][2], done[2];
	pid_t pid[2];
	char b = 1;

	start();
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(done), 0);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(pipe(go[i]), 0);
		k[i].ready_w = ready[1];
		k[i].done_w = done[1];
		k[i].go_r = go[i][0];
		pid[i] = fork_child(cut_main, &k[i]);
	}
	for (int i = 0; i < 2; i++) /* both sessions up */
		ck_assert_int_eq(read(ready[0], &b, 1), 1);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(write(go[i][1], &b, 1), 1);
		ck_assert_int_eq(read(done[0], &b, 1), 1);
	}
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(write(go[i][1], &b, 1), 1);
		wait_ok(pid[i], k[i].leaf);
		close(go[i][0]);
		close(go[i][1]);
	}
	close(ready[0]);
	close(ready[1]);
	close(done[0]);
	close(done[1]);
	th_stop_ok(&D);
}
END_TEST

/* A daemon, one child whose checks must pass, and a line its log must have */
static void one_child(void (*fn)(void *), const char *who, const char *logged)
{
	start();
	wait_ok(fork_child(fn, NULL), who);
	th_expect_log(&D, logged, 1);
	th_stop_ok(&D);
}

/* A client whose cgroup path is too long for a tenant's name is refused at
 * hello, saying why; before 2026-12-07 it became the tenant "uid:N" with the
 * default policy, out of its real tenant's caps. */
static void huge_main(void *arg)
{
	r2ccl_client_t *c = NULL;

	(void)arg;
	become("huge", HUGE_LEAF, UID_A);
	int r = r2ccl_connect(NULL, &c);
	C("huge", r == -ENAMETOOLONG, "connect: %d (%s)", r, r2ccl_last_error());
	C("huge", strstr(r2ccl_last_error(), "cgroup path"), "%s", r2ccl_last_error());
}

START_TEST(cgroup_path_too_long)
{
	one_child(huge_main, "the client in the long cgroup", "cannot tell its tenant");
}
END_TEST

START_TEST(isolation_same_uid)
{
	isolation("a", "ta", UID_A, "b", "tb", UID_A);
}
END_TEST

START_TEST(isolation_other_uid)
{
	isolation("c", "tc", UID_B, "d", "td", UID_A);
}
END_TEST

/* ---- the tenant's own quotas on operations and control requests ---- */

#define PEND_RANKS 4

struct pend_rank {
	r2ccl_client_t *c;
	r2ccl_comm_t *comm;
	r2ccl_unique_id_t id;
	int rank, r;
	void *buf;
	char err[256];
};

static void *pend_init(void *arg)
{
	struct pend_rank *p = arg;

	p->r = r2ccl_comm_init_rank(p->c, &p->comm, PEND_RANKS, &p->id, p->rank);
	snprintf(p->err, sizeof(p->err), "%s", r2ccl_last_error());
	return NULL;
}

static void *pend_allreduce(void *arg)
{
	struct pend_rank *p = arg;

	p->r = r2ccl_allreduce(p->comm, p->buf, p->buf, 1024, R2CCL_FLOAT32, R2CCL_SUM);
	snprintf(p->err, sizeof(p->err), "%s", r2ccl_last_error());
	return NULL;
}

/* The tenant's row as its own user sees it (r2cclctl --json tenants): the
 * number after "key": */
static uint64_t own_tenant_field(const char *key)
{
	const char *argv[] = { getenv("R2CCLCTL"), "--json", "tenants", NULL };
	static char out[1 << 16];
	char k[64];
	const char *p;

	C("quotas", th_run(argv, out, sizeof(out), 10000) == 0, "r2cclctl tenants: %s", out);
	snprintf(k, sizeof(k), "\"%s\":", key);
	p = strstr(out, k);
	C("quotas", p, "no %s in %s", key, out);
	return strtoull(p + strlen(k), NULL, 10);
}

/* Tenant te (max_pending_ops=2, max_req_rate=100): a 4-rank communicator of
 * its own sessions; ranks 0 and 1 submit an AllReduce that rank 3 never
 * matches (two operations open), then rank 2's is the third: refused with
 * R2CCL_E_QUOTA naming the quota, and the communicator breaks, so 0 and 1
 * learn it too (not a hang). Then two sessions of te send 60 requests each:
 * every one answered, the tenant's 100/s held over both together (at most
 * 10 per 100 ms window: 120 take at least 1.1 s), its pacing counted. */
static void quotas_main(void *arg)
{
	struct pend_rank p[PEND_RANKS];
	pthread_t th[PEND_RANKS];
	struct raw w[2];
	char q[96], err[256];
	int k;

	(void)arg;
	become("quotas", "e", UID_A);
	memset(p, 0, sizeof(p));
	for (k = 0; k < PEND_RANKS; k++) {
		C("quotas", r2ccl_connect(NULL, &p[k].c) == 0, "connect: %s", r2ccl_last_error());
		p[k].rank = k;
	}
	C("quotas", r2ccl_get_unique_id(p[0].c, &p[0].id) == 0, "unique id");
	for (k = 0; k < PEND_RANKS; k++) {
		p[k].id = p[0].id;
		C("quotas", pthread_create(&th[k], NULL, pend_init, &p[k]) == 0, "thread");
	}
	for (k = 0; k < PEND_RANKS; k++) {
		pthread_join(th[k], NULL);
		C("quotas", p[k].r == 0, "rank %d's init: %s (%s)", k, r2ccl_strerror(p[k].r),
		  p[k].err);
		C("quotas", r2ccl_mem_alloc(p[k].c, 4096, &p[k].buf) == 0, "memory: %s",
		  r2ccl_last_error());
	}
	for (k = 0; k < 2; k++)
		C("quotas", pthread_create(&th[k], NULL, pend_allreduce, &p[k]) == 0, "thread");
	for (int i = 0; i < 1000 && own_tenant_field("pending_ops") < 2; i++)
		usleep(10000);
	C("quotas", own_tenant_field("pending_ops") == 2, "two operations open");
	snprintf(q, sizeof(q), "quota max_pending_ops of tenant te");
	pend_allreduce(&p[2]);
	C("quotas", p[2].r == R2CCL_E_QUOTA && strstr(p[2].err, q),
	  "the third operation: %s (%s), expected R2CCL_E_QUOTA naming %s",
	  r2ccl_strerror(p[2].r), p[2].err, q);
	for (k = 0; k < 2; k++) {
		pthread_join(th[k], NULL);
		C("quotas", p[k].r == R2CCL_E_QUOTA && strstr(p[k].err, q),
		  "rank %d's open operation: %s (%s), expected the communicator broken at %s", k,
		  r2ccl_strerror(p[k].r), p[k].err, q);
	}
	C("quotas", own_tenant_field("pending_ops") == 0, "operations still open");
	for (k = 0; k < PEND_RANKS; k++) {
		r2ccl_comm_destroy(p[k].comm);
		r2ccl_mem_free(p[k].c, p[k].buf);
		r2ccl_disconnect(p[k].c);
	}
	printf("quotas: max_pending_ops=2: the third open operation refused (%s)\n", q);
	fflush(stdout);

	uint64_t paced0 = own_tenant_field("req_paced");
	raw_open(&w[0]);
	raw_open(&w[1]);
	double t0 = th_now_ms();
	for (int i = 0; i < 120; i++) {
		R2ccl__Rebalance rb = R2CCL__REBALANCE__INIT;
		rb.req_id = (uint64_t)i + 1;
		rb.comm_id = 999999;
		int r = raw_result(&w[i % 2], R2CCL__MSG_TYPE__MSG_REBALANCE, &rb, err, sizeof(err));
		C("quotas", r == -ENOENT && err[0], "request %d: %d (%s)", i, r, err);
	}
	double ms = th_now_ms() - t0;
	raw_close(&w[0]);
	raw_close(&w[1]);
	uint64_t paced = own_tenant_field("req_paced") - paced0;
	printf("quotas: max_req_rate=100: 120 requests on 2 sessions answered in %.0f ms, the "
	       "sessions paced %llu times\n",
	       ms, (unsigned long long)paced);
	fflush(stdout);
	C("quotas", ms >= 1000, "120 requests in %.0f ms: over max_req_rate=100", ms);
	C("quotas", paced > 0, "no pacing counted");

	/* one session of the tenant cannot starve another: b (the older, read
	 * after a in each window) asks once while a has 100 requests queued;
	 * at 100/s a's take 1 s, and b's answer comes while most of a's are
	 * still waiting (before its share of the window, b waited for all of
	 * them) */
	raw_open(&w[1]);
	raw_open(&w[0]);
	for (int i = 0; i < 100; i++) {
		R2ccl__Rebalance rb = R2CCL__REBALANCE__INIT;
		rb.req_id = 1000 + (uint64_t)i;
		rb.comm_id = 999999;
		raw_send(&w[0], R2CCL__MSG_TYPE__MSG_REBALANCE, &rb);
	}
	R2ccl__Rebalance rb1 = R2CCL__REBALANCE__INIT;
	rb1.req_id = 1;
	rb1.comm_id = 999999;
	C("quotas", raw_result(&w[1], R2CCL__MSG_TYPE__MSG_REBALANCE, &rb1, err, sizeof(err)) ==
			    -ENOENT,
	  "b's request: %s", err);
	int got = 0;
	struct r2_frame f;
	while (got < 100 && r2_frame_recv(w[0].fd, &w[0].rd, &f, 0) == 1) {
		r2_frame_free(&f);
		got++;
	}
	printf("quotas: a session's one request answered while %d of another's 100 were\n", got);
	fflush(stdout);
	C("quotas", got < 50, "b waited for %d of a's 100 requests", got);
	for (; got < 100; got++) {
		C("quotas", r2_frame_recv(w[0].fd, &w[0].rd, &f, 10000) == 1, "a's answer %d", got);
		r2_frame_free(&f);
	}
	raw_close(&w[0]);
	raw_close(&w[1]);
}

START_TEST(quotas)
{
	one_child(quotas_main, "the quotas child", "over its quota max_req_rate");
}
END_TEST

/* ---- policy at run time ---- */

static char *ctl(int want, const char *const *args)
{
	static char out[1 << 16];
	const char *argv[16] = { getenv("R2CCLCTL") };
	int n = 1;

	for (; *args && n < 15; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	ck_assert_int_eq(th_run(argv, out, sizeof(out), 10000), want);
	return out;
}

/* The tenant's object in `tenants --json` (from its name on). */
static const char *tenant_json(const char *out, const char *name)
{
	char key[96];
	const char *p;

	snprintf(key, sizeof(key), "\"name\": \"%s\"", name);
	p = strstr(out, key);
	ck_assert_msg(p, "no tenant %s in %s", name, out);
	return p;
}

static void expect_field(const char *obj, const char *field)
{
	const char *end = strstr(obj + 1, "\"name\":");
	const char *p = strstr(obj, field);

	ck_assert_msg(p && (!end || p < end), "%s not in %.600s", field, obj);
}

struct limiter {
	int ready_w, go_r;
};

static void limiter_main(void *arg)
{
	struct limiter *l = arg;
	r2ccl_client_t *c;
	r2ccl_comm_t *comm;
	r2ccl_unique_id_t id;
	char b = 1;

	become("limiter", "b", UID_A);
	C("limiter", r2ccl_connect(NULL, &c) == 0, "connect");
	C("limiter", r2ccl_get_unique_id(c, &id) == 0, "unique id");
	C("limiter", r2ccl_comm_init_rank(c, &comm, 1, &id, 0) == 0, "comm");
	/* a cap of its own below the policy's 300M */
	C("limiter", r2ccl_set_bandwidth_limit(comm, 100000000) == 0, "limit: %s",
	  r2ccl_last_error());
	C("limiter", write(l->ready_w, &b, 1) == 1 && read(l->go_r, &b, 1) == 1, "pipe");
	/* above the policy's: cut to it; then a reservation */
	C("limiter", r2ccl_set_bandwidth_limit(comm, 900000000) == 0, "limit");
	C("limiter", r2ccl_set_bandwidth_limit(comm, R2CCL_BW_RESERVE(50000000)) == 0, "reserve");
	C("limiter", r2ccl_set_bandwidth_limit(comm, INT64_MIN) == -EINVAL, "INT64_MIN");
	C("limiter", write(l->ready_w, &b, 1) == 1 && read(l->go_r, &b, 1) == 1, "pipe");
	/* and as a user, `tenants set` is root's */
	const char *argv[] = { getenv("R2CCLCTL"), "tenants", "set", "tb", "weight=100", NULL };
	char out[4096];
	int st = th_run(argv, out, sizeof(out), 10000);
	C("limiter", st == 4 && strstr(out, "only root"), "tenants set as a user: %d %s", st, out);
	const char *argv2[] = { getenv("R2CCLCTL"), "--json", "tenants", NULL };
	C("limiter", th_run(argv2, out, sizeof(out), 10000) == 0, "tenants as a user");
	C("limiter", strstr(out, "\"name\": \"tb\"") && !strstr(out, "\"name\": \"ta\"") &&
			     !strstr(out, "\"name\": \"default\""),
	  "a user sees another tenant: %s", out);
	r2ccl_comm_destroy(comm);
	r2ccl_disconnect(c);
}

START_TEST(policy)
{
	const char *list[] = { "--json", "tenants", NULL };
	const char *set[] = { "tenants", "set", "ta", "weight=5", "rate=2G", "class=latency", NULL };
	const char *add[] = { "tenants", "set", "te", "cgroup=/r2ccl-none", "weight=2", NULL };
	const char *bad[] = { "tenants", "set", "ta", "weight=0", NULL };
	const char *none[] = { "tenants", "set", "tz", "weight=2", NULL };
	struct limiter l;
	int rp[2], gp[2];
	char b = 1;
	const char *o;

	start();
	o = ctl(0, list);
	expect_field(tenant_json(o, "tb"), "\"weight\": 3");
	expect_field(tenant_json(o, "tb"), "\"rate_bps\": 300000000");
	expect_field(tenant_json(o, "tb"), "\"class\": \"latency\"");
	expect_field(tenant_json(o, "tb"), "\"burst_bytes\": 750000");
	expect_field(tenant_json(o, "ta"), "\"rate_bps\": 0");
	ctl(0, set);
	o = ctl(0, list);
	expect_field(tenant_json(o, "ta"), "\"weight\": 5");
	expect_field(tenant_json(o, "ta"), "\"rate_bps\": 2000000000");
	expect_field(tenant_json(o, "ta"), "\"class\": \"latency\"");
	ctl(0, add);
	o = ctl(0, list);
	expect_field(tenant_json(o, "te"), "\"cgroup\": \"/r2ccl-none\"");
	ck_assert_ptr_nonnull(strstr(ctl(1, bad), "weight: bad value"));
	ck_assert_ptr_nonnull(strstr(ctl(1, none), "needs cgroup="));
	/* a cgroup path as the name: the tenant of that cgroup */
	const char *bypath[] = { "tenants", "set", "/r2ccl-path/x", "weight=6", NULL };
	ctl(0, bypath);
	o = ctl(0, list);
	expect_field(tenant_json(o, "/r2ccl-path/x"), "\"cgroup\": \"/r2ccl-path/x\"");
	expect_field(tenant_json(o, "/r2ccl-path/x"), "\"weight\": 6");

	/* r2ccl_set_bandwidth_limit from a client of tb */
	ck_assert_int_eq(pipe(rp), 0);
	ck_assert_int_eq(pipe(gp), 0);
	l.ready_w = rp[1];
	l.go_r = gp[0];
	pid_t pid = fork_child(limiter_main, &l);
	ck_assert_int_eq(read(rp[0], &b, 1), 1);
	o = ctl(0, list);
	expect_field(tenant_json(o, "tb"), "\"rate_bps\": 100000000");
	expect_field(tenant_json(o, "tb"), "\"limit_bps\": 100000000");
	ck_assert_int_eq(write(gp[1], &b, 1), 1);
	ck_assert_int_eq(read(rp[0], &b, 1), 1);
	o = ctl(0, list);
	expect_field(tenant_json(o, "tb"), "\"rate_bps\": 300000000");
	expect_field(tenant_json(o, "tb"), "\"reserve_bps\": 50000000");
	ck_assert_int_eq(write(gp[1], &b, 1), 1);
	wait_ok(pid, "the limiter");

	/* SIGHUP reads the section again: tb's weight from the file */
	write_conf(4, "");
	ck_assert_int_eq(kill(D.pid, SIGHUP), 0);
	th_expect_log(&D, "tenants: 6 from", 2);
	o = ctl(0, list);
	expect_field(tenant_json(o, "tb"), "\"weight\": 4");
	/* a bad section on SIGHUP keeps the tenants as they were */
	write_conf(9, "tz = weight=2\n");
	ck_assert_int_eq(kill(D.pid, SIGHUP), 0);
	th_expect_log(&D, "cgroup=/path missing (the tenants are kept as they were)", 1);
	o = ctl(0, list);
	expect_field(tenant_json(o, "tb"), "\"weight\": 4");
	th_stop_ok(&D);
}
END_TEST

/* ---- reaction: a rate set with r2cclctl, seen in the byte counters ---- */

/* Two daemons of this host act as two hosts (over its NIC, as
 * test_reasons_hosts does); an 8 MB AllReduce loop between them; host A's
 * tenant is capped to almost nothing with `r2cclctl tenants set`, then
 * uncapped: its bytes stop growing, then grow again. Prints both delays. */
static struct th_daemon RA, RB;

static void kill_pair_at_exit(void)
{
	if (RA.pid > 0)
		th_daemon_stop(&RA, SIGKILL, 1000);
	if (RB.pid > 0)
		th_daemon_stop(&RB, SIGKILL, 1000);
	th_daemon_cleanup(&RA);
	th_daemon_cleanup(&RB);
}

struct pair_rank {
	r2ccl_client_t *c;
	r2ccl_comm_t *comm;
	r2ccl_unique_id_t *id;
	int rank;
	atomic_bool *stop; /* asked: rank 0 ends the loop (pair_loop) */
	atomic_long *failed, *ops;
	atomic_long *stop_at;
};

static void *pair_init(void *a)
{
	struct pair_rank *k = a;

	if (r2ccl_comm_init_rank(k->c, &k->comm, 2, k->id, k->rank) != 0)
		atomic_fetch_add(k->failed, 1);
	return NULL;
}

static void *pair_loop(void *a)
{
	struct pair_rank *k = a;
	const size_t n = 2 << 20; /* 8 MB of float */
	float *buf;

	if (r2ccl_mem_alloc(k->c, n * sizeof(float), (void **)&buf) != 0) {
		atomic_fetch_add(k->failed, 1);
		return NULL;
	}
	for (long it = 0; it < atomic_load(k->stop_at); it++) {
		th_loop_stop_point(k->rank, k->stop, k->stop_at, it);
		buf[0] = 1.0f;
		buf[n - 1] = 2.0f;
		if (r2ccl_allreduce(k->comm, buf, buf, n, R2CCL_FLOAT32, R2CCL_SUM) != 0 ||
		    buf[0] != 2.0f || buf[n - 1] != 4.0f) {
			fprintf(stderr, "rank %d: %s\n", k->rank, r2ccl_last_error());
			atomic_fetch_add(k->failed, 1);
			break;
		}
		atomic_fetch_add(k->ops, 1);
	}
	r2ccl_mem_free(k->c, buf);
	return NULL;
}

/* Host A's field of the tenant named name (-1: not listed yet). */
static long long tenant_field(const char *name, const char *field)
{
	const char *argv[] = { getenv("R2CCLCTL"), "--socket", RA.socket, "--json", "tenants",
			       NULL };
	static char out[1 << 16];
	char key[300];
	const char *p;

	if (th_run(argv, out, sizeof(out), 10000) != 0)
		return -1;
	snprintf(key, sizeof(key), "\"name\": \"%s\"", name);
	p = strstr(out, key);
	snprintf(key, sizeof(key), "\"%s\": ", field);
	p = p ? strstr(p, key) : NULL;
	return p ? atoll(p + strlen(key)) : -1;
}

static long long tenant_bytes(const char *name)
{
	return tenant_field(name, "bytes_total");
}

static void set_rate(const char *name, const char *rate)
{
	char arg[64];
	const char *argv[] = { getenv("R2CCLCTL"), "--socket", RA.socket, "tenants", "set", name,
			       arg, NULL };
	char out[4096];

	snprintf(arg, sizeof(arg), "rate=%s", rate);
	ck_assert_msg(th_run(argv, out, sizeof(out), 10000) == 0, "tenants set: %s", out);
}

START_TEST(reaction)
{
	static r2ccl_unique_id_t id;
	static atomic_bool stop;
	static atomic_long failed, ops, stop_at;
	struct pair_rank k[2];
	pthread_t t[2];
	r2ccl_connect_opts_t o = R2CCL_CONNECT_OPTS_INITIALIZER;
	char tenant[256];
	long long b0, b1, last;
	double t0, t1, t2, tlast, tgrow;

	/* the clients' tenant: this process's cgroup, a tenant of its own */
	ck_assert_int_eq(cg_enter("a"), 0);
	snprintf(tenant, sizeof(tenant), "%s/a", BASE);
	atexit(kill_pair_at_exit);
	ck_assert_int_eq(th_daemon_start(&RA, NULL), 0);
	ck_assert_int_eq(th_daemon_start(&RB, NULL), 0);
	atomic_store(&stop_at, 1L << 40);
	for (int r = 0; r < 2; r++) {
		k[r] = (struct pair_rank){ .id = &id, .rank = r, .stop = &stop, .failed = &failed,
					   .ops = &ops, .stop_at = &stop_at };
		o.socket_path = r ? RB.socket : RA.socket;
		ck_assert_int_eq(r2ccl_connect(&o, &k[r].c), 0);
	}
	ck_assert_int_eq(r2ccl_get_unique_id(k[0].c, &id), 0);
	for (int r = 0; r < 2; r++)
		pthread_create(&t[r], NULL, pair_init, &k[r]);
	for (int r = 0; r < 2; r++)
		pthread_join(t[r], NULL);
	ck_assert_int_eq(atomic_load(&failed), 0);
	for (int r = 0; r < 2; r++)
		pthread_create(&t[r], NULL, pair_loop, &k[r]);
	for (int i = 0; i < 200 && atomic_load(&ops) < 3; i++)
		usleep(50000);
	ck_assert_msg(atomic_load(&ops) >= 3, "the AllReduce loop did not run");
	b0 = tenant_bytes(tenant);
	ck_assert_msg(b0 > 0, "host A counted no bytes for tenant %s", tenant);
	/* bytes per second now (taken once a second): waited for, 10 s at
	 * most, since a loaded machine is slow */
	long long bps = 0;
	for (double end = th_now_ms() + 10000; bps <= 0 && th_now_ms() < end;) {
		usleep(50000);
		bps = tenant_field(tenant, "bytes_per_s");
	}
	ck_assert_msg(bps > 0, "no bytes per second for a tenant that sends");

	/* capped to 8 kbit/s: one chunk would take 1000 s */
	t0 = th_now_ms();
	set_rate(tenant, "8K");
	t1 = th_now_ms();
	last = tenant_bytes(tenant);
	tlast = th_now_ms();
	/* at most the chunks picked while the command was on its way: one per
	 * rail and stream (a handful of MB), nothing after: the bytes stop.
	 * When they stop is a figure (printed below), not a check: a loaded
	 * machine counts those last chunks late. The check: within 10 s they
	 * stand still for a whole second, which an uncapped loop never does. */
	while (th_now_ms() - tlast < 1000 && th_now_ms() - t1 < 10000) {
		long long b = tenant_bytes(tenant);
		if (b != last) {
			last = b;
			tlast = th_now_ms();
		}
	}
	b1 = last;
	ck_assert_msg(th_now_ms() - tlast >= 1000, "bytes still grew %.0f ms after the command",
		      tlast - t1);
	t2 = th_now_ms();
	set_rate(tenant, "0");
	tgrow = -1;
	while (th_now_ms() - t2 < 10000) {
		if (tenant_bytes(tenant) > b1) {
			tgrow = th_now_ms() - t2;
			break;
		}
	}
	ck_assert_msg(tgrow >= 0, "the bytes did not grow again within 10 s of rate=0");
	printf("reaction: cap: r2cclctl tenants set took %.1f ms, the last byte was counted "
	       "%.1f ms after it returned; uncap: the first new byte %.1f ms after the command "
	       "started (polled through r2cclctl, a few ms per poll)\n",
	       t1 - t0, tlast > t1 ? tlast - t1 : 0.0, tgrow);
	fflush(stdout);
	atomic_store(&stop, true);
	for (int r = 0; r < 2; r++)
		pthread_join(t[r], NULL);
	ck_assert_msg(atomic_load(&failed) == 0, "an AllReduce failed");
	for (int r = 0; r < 2; r++) {
		ck_assert_int_eq(r2ccl_comm_destroy(k[r].comm), 0);
		r2ccl_disconnect(k[r].c);
	}
	ck_assert_int_eq(th_daemon_stop(&RA, SIGTERM, 15000), 0);
	ck_assert_int_eq(th_daemon_stop(&RB, SIGTERM, 15000), 0);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { isolation_same_uid, isolation_other_uid,
				       rows_by_tenant_not_name, cgroup_path_too_long, quotas, policy,
				       reaction };
	size_t n = sizeof(tests) / sizeof(tests[0]);
	int r;

	if (geteuid() != 0) {
		printf("SKIP: needs root (cgroups and other uids)\n");
		return 77;
	}
	if (!cg_setup()) {
		printf("SKIP: no writable cgroup v2 hierarchy (%s)\n", CG[0] ? CG : "none mounted");
		cg_cleanup();
		return 77;
	}
	/* reaction needs two daemons joined over a NIC with an IPv4 address */
	if (system("ip -4 -o addr show scope global 2>/dev/null | grep -q .") != 0) {
		printf("no NIC with an IPv4 address: reaction skipped\n");
		n--;
	}
	r = th_run_suite(th_suite("tenants", 300, tests, n));
	cg_cleanup();
	return r;
}
