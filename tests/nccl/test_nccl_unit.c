/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of libnccl's pieces without I/O (libclient/nccl/): the header's
 * ABI against NCCL 2.28's documented values, ncclConfig_t parsing across
 * versions, the mapping of r2ccl errors to ncclResult_t and messages, and
 * the group bookkeeping: nesting, recording, the agreed order, and that the
 * order never deadlocks queues that match heads as r2ccld does.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/comm.h" /* daemon/: struct r2_uid */
#include "nccl_int.h"

/* ---- the ABI ---- */

START_TEST(abi_values)
{
	/* NCCL 2.28's nccl.h values, which compiled clients carry */
	ck_assert_int_eq(sizeof(ncclUniqueId), 128);
	ck_assert_int_eq(ncclInProgress, 7);
	ck_assert_int_eq(ncclRemoteError, 6);
	ck_assert_int_eq(ncclNumResults, 8);
	ck_assert_int_eq(ncclFloat16, 6);
	ck_assert_int_eq(ncclFloat32, 7);
	ck_assert_int_eq(ncclFloat64, 8);
	ck_assert_int_eq(ncclBfloat16, 9);
	ck_assert_int_eq(ncclFloat8e4m3, 10);
	ck_assert_int_eq(ncclFloat8e5m2, 11);
	ck_assert_int_eq(ncclNumTypes, 12);
	ck_assert_int_eq(ncclMax, 2);
	ck_assert_int_eq(ncclMin, 3);
	ck_assert_int_eq(ncclAvg, 4);
	ck_assert_int_eq(ncclNumOps, 5);
	ck_assert_int_eq(sizeof(ncclRedOp_t), 4);
	ck_assert_int_eq(ncclMaxRedOp, 0x7fffffff);
	ck_assert_int_eq(NCCL_VERSION_CODE, 22809);
	ck_assert_int_eq(NCCL_VERSION(2, 8, 4), 2804);
	ck_assert_int_eq(NCCL_SPLIT_NOCOLOR, -1);
	/* ncclConfig_t 2.28 on LP64: 3 header fields, 4 ints, a pointer, 2
	 * ints, a pointer, 6 ints */
	ck_assert_int_eq(offsetof(ncclConfig_t, blocking), 16);
	ck_assert_int_eq(offsetof(ncclConfig_t, netName), 32);
	ck_assert_int_eq(offsetof(ncclConfig_t, splitShare), 40);
	ck_assert_int_eq(offsetof(ncclConfig_t, commName), 48);
	ck_assert_int_eq(offsetof(ncclConfig_t, nvlinkCentricSched), 76);
	ck_assert_int_eq(sizeof(ncclConfig_t), 80);
	ck_assert_int_eq(sizeof(ncclSimInfo_t), 24);
}
END_TEST

START_TEST(abi_initializer)
{
	ncclConfig_t c = NCCL_CONFIG_INITIALIZER;

	ck_assert_int_eq(c.size, sizeof(ncclConfig_t));
	ck_assert_uint_eq(c.magic, 0xcafebeef);
	ck_assert_uint_eq(c.version, 22809);
	ck_assert_int_eq(c.blocking, NCCL_CONFIG_UNDEF_INT);
	ck_assert_ptr_null(c.netName);
	ck_assert_ptr_null(c.commName);
	ck_assert_int_eq(c.nvlinkCentricSched, NCCL_CONFIG_UNDEF_INT);
}
END_TEST

START_TEST(dtype_map)
{
	ck_assert_int_eq(nccl_dtype_r2(ncclBfloat16), R2CCL_BFLOAT16);
	ck_assert_int_eq(nccl_dtype_r2(ncclFloat32), R2CCL_FLOAT32);
	ck_assert_int_eq(nccl_dtype_r2(ncclFloat16), R2CCL_FLOAT16);
	ck_assert_int_eq(nccl_dtype_r2(ncclInt64), R2CCL_INT64);
	ck_assert_int_eq(nccl_dtype_r2(ncclFloat8e4m3), -1);
	ck_assert_int_eq(nccl_dtype_size(ncclFloat8e5m2), 1);
	ck_assert_int_eq(nccl_dtype_size(ncclBfloat16), 2);
	ck_assert_int_eq(nccl_dtype_size(ncclFloat64), 8);
	ck_assert_int_eq(nccl_dtype_size((ncclDataType_t)12), 0);
}
END_TEST

/* ---- config ---- */

START_TEST(config_defaults)
{
	struct nccl_cfg c;
	char err[200] = "";

	unsetenv("NCCL_COMM_BLOCKING");
	ck_assert_int_eq(nccl_config_parse(NULL, &c, err, sizeof(err)), ncclSuccess);
	ck_assert(c.blocking);
	setenv("NCCL_COMM_BLOCKING", "0", 1);
	ck_assert_int_eq(nccl_config_parse(NULL, &c, err, sizeof(err)), ncclSuccess);
	ck_assert(!c.blocking);
	unsetenv("NCCL_COMM_BLOCKING");
}
END_TEST

START_TEST(config_fields)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	struct nccl_cfg c;
	char err[200] = "";

	cfg.blocking = 0;
	cfg.commName = "trainer";
	cfg.netName = "eth1";
	cfg.splitShare = 1;
	ck_assert_int_eq(nccl_config_parse(&cfg, &c, err, sizeof(err)), ncclSuccess);
	ck_assert(!c.blocking);
	ck_assert_str_eq(c.comm_name, "trainer");
	ck_assert_str_eq(c.net_name, "eth1");
	ck_assert_int_eq(c.split_share, 1);
	cfg.blocking = 1;
	ck_assert_int_eq(nccl_config_parse(&cfg, &c, err, sizeof(err)), ncclSuccess);
	ck_assert(c.blocking);
	cfg.blocking = 7;
	ck_assert_int_eq(nccl_config_parse(&cfg, &c, err, sizeof(err)), ncclInvalidArgument);
	ck_assert_ptr_nonnull(strstr(err, "blocking"));
}
END_TEST

START_TEST(config_bad_magic)
{
	ncclConfig_t cfg;
	struct nccl_cfg c;
	char err[200] = "";

	memset(&cfg, 0, sizeof(cfg)); /* not initialized with the macro */
	cfg.size = sizeof(cfg);
	ck_assert_int_eq(nccl_config_parse(&cfg, &c, err, sizeof(err)), ncclInvalidArgument);
	ck_assert_ptr_nonnull(strstr(err, "NCCL_CONFIG_INITIALIZER"));
}
END_TEST

START_TEST(config_older_caller)
{
	/* a program built against NCCL 2.18: its struct ends after splitShare;
	 * whatever lies beyond (here: garbage) must not be read */
	union {
		ncclConfig_t cfg;
		unsigned char raw[sizeof(ncclConfig_t)];
	} u;
	struct nccl_cfg c;
	char err[200] = "";

	memset(u.raw, 0xa5, sizeof(u.raw));
	u.cfg.size = offsetof(ncclConfig_t, splitShare) + sizeof(int);
	u.cfg.magic = NCCL_CONFIG_MAGIC;
	u.cfg.version = NCCL_VERSION(2, 18, 5);
	u.cfg.blocking = 0;
	u.cfg.cgaClusterSize = NCCL_CONFIG_UNDEF_INT;
	u.cfg.minCTAs = u.cfg.maxCTAs = NCCL_CONFIG_UNDEF_INT;
	u.cfg.netName = NULL;
	u.cfg.splitShare = 1;
	ck_assert_int_eq(nccl_config_parse(&u.cfg, &c, err, sizeof(err)), ncclSuccess);
	ck_assert(!c.blocking);
	ck_assert_int_eq(c.split_share, 1);
	ck_assert_str_eq(c.comm_name, ""); /* commName (2.27) is past its end */
	/* a 2.14 caller: only blocking */
	u.cfg.size = offsetof(ncclConfig_t, blocking) + sizeof(int);
	u.cfg.version = NCCL_VERSION(2, 14, 3);
	u.cfg.splitShare = 0x5a5a5a5a;
	ck_assert_int_eq(nccl_config_parse(&u.cfg, &c, err, sizeof(err)), ncclSuccess);
	ck_assert_int_eq(c.split_share, 0);
	/* a size that says more than the version is cut to the version */
	u.cfg.size = sizeof(ncclConfig_t);
	u.cfg.version = NCCL_VERSION(2, 17, 1);
	ck_assert_int_eq(nccl_config_parse(&u.cfg, &c, err, sizeof(err)), ncclSuccess);
	ck_assert_int_eq(c.split_share, 0);
	/* older than the versioned config */
	u.cfg.version = NCCL_VERSION(2, 12, 0);
	ck_assert_int_eq(nccl_config_parse(&u.cfg, &c, err, sizeof(err)), ncclInvalidArgument);
}
END_TEST

START_TEST(config_sizes)
{
	ck_assert_int_eq(nccl_config_size_of_version(21300), 0);
	ck_assert_int_eq(nccl_config_size_of_version(21403), 20);
	ck_assert_int_eq(nccl_config_size_of_version(21805), 44);
	ck_assert_int_eq(nccl_config_size_of_version(22603), 48);
	ck_assert_int_eq(nccl_config_size_of_version(22809), sizeof(ncclConfig_t));
	ck_assert_int_eq(nccl_config_size_of_version(23000), sizeof(ncclConfig_t));
}
END_TEST

/* ---- errors ---- */

START_TEST(error_mapping)
{
	ck_assert_int_eq(nccl_result_of(0), ncclSuccess);
	ck_assert_int_eq(nccl_result_of(-EINVAL), ncclInvalidArgument);
	ck_assert_int_eq(nccl_result_of(-EOVERFLOW), ncclInvalidArgument);
	ck_assert_int_eq(nccl_result_of(R2CCL_E_BAD_BUFFER), ncclInvalidArgument);
	ck_assert_int_eq(nccl_result_of(R2CCL_E_MISMATCH), ncclInvalidUsage);
	ck_assert_int_eq(nccl_result_of(R2CCL_E_DUP_RANK), ncclInvalidUsage);
	ck_assert_int_eq(nccl_result_of(R2CCL_E_PEER_GONE), ncclRemoteError);
	ck_assert_int_eq(nccl_result_of(R2CCL_E_NO_PATH), ncclRemoteError);
	ck_assert_int_eq(nccl_result_of(R2CCL_E_COMM_BROKEN), ncclRemoteError);
	ck_assert_int_eq(nccl_result_of(-ETIMEDOUT), ncclRemoteError);
	ck_assert_int_eq(nccl_result_of(R2CCL_E_DAEMON_GONE), ncclSystemError);
	ck_assert_int_eq(nccl_result_of(-ECONNREFUSED), ncclSystemError);
	ck_assert_int_eq(nccl_result_of(-ENOENT), ncclSystemError);
	ck_assert_int_eq(nccl_result_of(-ENOMEM), ncclSystemError);
	ck_assert_int_eq(nccl_result_of(R2CCL_E_PROTOCOL), ncclInternalError);
	ck_assert_int_eq(nccl_result_of(-ENODEV), ncclUnhandledCudaError);
}
END_TEST

START_TEST(error_messages)
{
	struct ncclComm comm;

	memset(&comm, 0, sizeof(comm));
	ck_assert_int_eq(nccl_fail_r2(&comm, R2CCL_E_PEER_GONE, "ncclAllReduce"),
			 ncclRemoteError);
	ck_assert_ptr_nonnull(strstr(ncclGetLastError(&comm), "ncclAllReduce: "));
	ck_assert_ptr_nonnull(strstr(ncclGetLastError(&comm), r2ccl_strerror(R2CCL_E_PEER_GONE)));
	/* the thread's last error too, for calls without a communicator */
	ck_assert_str_eq(ncclGetLastError(NULL), comm.last_err);
	ck_assert_int_eq(nccl_fail(NULL, ncclInvalidUsage, "x %d", 42), ncclInvalidUsage);
	ck_assert_str_eq(ncclGetLastError(NULL), "x 42");
	ck_assert_ptr_nonnull(strstr(ncclGetLastError(&comm), "ncclAllReduce"));
	for (int r = 0; r < ncclNumResults; r++)
		ck_assert_ptr_null(strstr(ncclGetErrorString((ncclResult_t)r), "unknown"));
	ck_assert_str_eq(ncclGetErrorString(ncclSuccess), "no error");
	ck_assert_ptr_nonnull(strstr(ncclGetErrorString((ncclResult_t)99), "unknown"));
}
END_TEST

START_TEST(version)
{
	int v = 0;

	ck_assert_int_eq(ncclGetVersion(&v), ncclSuccess);
	ck_assert_int_eq(v, 22809);
	ck_assert_int_eq(ncclGetVersion(NULL), ncclInvalidArgument);
}
END_TEST

START_TEST(debug_env)
{
	char path[64], want[64], text[2048] = "";
	size_t got;
	FILE *f;

	snprintf(path, sizeof(path), "/tmp/nccl-unit-debug.%d", (int)getpid());
	setenv("NCCL_DEBUG", "WARN", 1);
	setenv("NCCL_DEBUG_FILE", "/tmp/nccl-unit-debug.%p", 1);
	ncclResetDebugInit();
	ck_assert_int_eq(nccl_log_level(), NCCL_LOG_WARN);
	nccl_log(NCCL_LOG_INFO, "not at WARN");
	nccl_fail(NULL, ncclInvalidUsage, "hello %d", 7);
	ncclResetDebugInit(); /* closes the file */
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	got = fread(text, 1, sizeof(text) - 1, f);
	text[got] = 0;
	fclose(f);
	unlink(path);
	/* the version line first (as NCCL), then the warning */
	ck_assert_ptr_nonnull(strstr(text, "NCCL version 2.28.9"));
	snprintf(want, sizeof(want), "NCCL WARN hello 7");
	ck_assert_ptr_nonnull(strstr(text, want));
	ck_assert_ptr_null(strstr(text, "not at WARN"));
	unsetenv("NCCL_DEBUG");
	unsetenv("NCCL_DEBUG_FILE");
	ncclResetDebugInit();
	ck_assert_int_eq(nccl_log_level(), NCCL_LOG_NONE);
	setenv("NCCL_DEBUG", "info", 1);
	ncclResetDebugInit();
	ck_assert_int_eq(nccl_log_level(), NCCL_LOG_INFO);
	unsetenv("NCCL_DEBUG");
	ncclResetDebugInit();
}
END_TEST

/* ---- derived ids (ncclCommShrink) ---- */

START_TEST(uid_derive)
{
	r2ccl_unique_id_t p, a, b, c;
	int ex1[] = { 2, 5 }, ex2[] = { 5, 2 }, ex3[] = { 2 };

	ck_assert_int_eq(offsetof(struct r2_uid, nonce), NCCL_UID_NONCE_OFF);
	for (size_t i = 0; i < sizeof(p.internal); i++)
		p.internal[i] = (char)(i * 37 + 1);
	nccl_uid_derive(&p, 1, ex1, 2, &a);
	nccl_uid_derive(&p, 1, ex2, 2, &b);
	ck_assert_mem_eq(a.internal, b.internal, sizeof(a.internal)); /* list order */
	nccl_uid_derive(&p, 2, ex1, 2, &c);
	ck_assert(memcmp(a.internal, c.internal, sizeof(a.internal)) != 0); /* generation */
	nccl_uid_derive(&p, 1, ex3, 1, &c);
	ck_assert(memcmp(a.internal, c.internal, sizeof(a.internal)) != 0); /* the set */
	/* only the nonce changes: the root daemon and its addresses stay */
	ck_assert_mem_eq(a.internal, p.internal, NCCL_UID_NONCE_OFF);
	ck_assert_mem_eq(a.internal + NCCL_UID_NONCE_OFF + 8, p.internal + NCCL_UID_NONCE_OFF + 8,
			 sizeof(p.internal) - NCCL_UID_NONCE_OFF - 8);
	ck_assert(memcmp(a.internal + NCCL_UID_NONCE_OFF, p.internal + NCCL_UID_NONCE_OFF, 8) != 0);
}
END_TEST

/* ---- groups ---- */

/* fake communicators: the rank is all the order needs */
struct fake {
	int rank;
};
static int fake_rank(const struct ncclComm *c)
{
	return ((const struct fake *)(const void *)c)->rank;
}

static struct nccl_op p2p(struct fake *f, enum nccl_opkind k, int peer, size_t count, unsigned seq)
{
	struct nccl_op o;

	memset(&o, 0, sizeof(o));
	o.kind = k;
	o.comm = (struct ncclComm *)(void *)f;
	o.root = peer;
	o.count = count;
	o.dtype = ncclFloat32;
	o.seq = seq;
	return o;
}

START_TEST(group_order_basic)
{
	struct fake f = { 1 };
	struct nccl_op ops[5];

	/* rank 1: recv from 2, allreduce, send to 0, send to 2, recv from 0 */
	ops[0] = p2p(&f, NCCL_OP_RECV, 2, 1, 0);
	ops[1] = p2p(&f, NCCL_OP_SEND, 0, 1, 1);
	ops[1].kind = NCCL_OP_ALLREDUCE;
	ops[2] = p2p(&f, NCCL_OP_SEND, 0, 1, 2);
	ops[3] = p2p(&f, NCCL_OP_SEND, 2, 1, 3);
	ops[4] = p2p(&f, NCCL_OP_RECV, 0, 1, 4);
	nccl_group_order(ops, 5, fake_rank);
	/* the collective first, then transfers by (source, destination) */
	ck_assert_int_eq(ops[0].kind, NCCL_OP_ALLREDUCE);
	ck_assert(ops[1].kind == NCCL_OP_RECV && ops[1].root == 0); /* 0->1 */
	ck_assert(ops[2].kind == NCCL_OP_SEND && ops[2].root == 0); /* 1->0 */
	ck_assert(ops[3].kind == NCCL_OP_SEND && ops[3].root == 2); /* 1->2 */
	ck_assert(ops[4].kind == NCCL_OP_RECV && ops[4].root == 2); /* 2->1 */
}
END_TEST

/* Simulates r2ccld's matching (daemon/engine.c match_p2p): a send at the
 * head of its rank's queue runs once its peer's head is the matching
 * receive. Returns true if every queue empties. */
static bool drains(struct nccl_op **q, size_t *len, int nranks)
{
	size_t head[16] = { 0 };
	bool moved = true;

	while (moved) {
		moved = false;
		for (int r = 0; r < nranks; r++) {
			struct nccl_op *s, *rv;
			int p;
			if (head[r] >= len[r])
				continue;
			s = &q[r][head[r]];
			if (s->kind != NCCL_OP_SEND)
				continue;
			p = s->root;
			if (head[p] >= len[p])
				continue;
			rv = &q[p][head[p]];
			if (rv->kind != NCCL_OP_RECV || rv->root != r)
				continue;
			ck_assert_int_eq(rv->count, s->count); /* the right pair */
			head[r]++;
			head[p]++;
			moved = true;
		}
	}
	for (int r = 0; r < nranks; r++)
		if (head[r] != len[r])
			return false;
	return true;
}

START_TEST(group_order_never_deadlocks)
{
	enum { N = 6, MAXOPS = 64 };
	struct fake f[N];
	struct nccl_op *q[N];
	size_t len[N];
	unsigned seed = 12345;

	for (int r = 0; r < N; r++) {
		f[r].rank = r;
		q[r] = calloc(MAXOPS, sizeof(struct nccl_op));
	}
	for (int trial = 0; trial < 200; trial++) {
		int nr = 2 + (int)(rand_r(&seed) % (N - 1));
		memset(len, 0, sizeof(len));
		/* random transfers (several per pair, distinct counts to check
		 * that pairs match in order), each rank's list shuffled */
		int nt = 1 + (int)(rand_r(&seed) % 20);
		for (int t = 0; t < nt; t++) {
			int a = (int)(rand_r(&seed) % (unsigned)nr), b;
			do
				b = (int)(rand_r(&seed) % (unsigned)nr);
			while (b == a);
			q[a][len[a]] = p2p(&f[a], NCCL_OP_SEND, b, (size_t)t + 1, 0);
			len[a]++;
			q[b][len[b]] = p2p(&f[b], NCCL_OP_RECV, a, (size_t)t + 1, 0);
			len[b]++;
		}
		for (int r = 0; r < nr; r++) {
			for (size_t i = len[r]; i > 1; i--) {
				size_t j = rand_r(&seed) % i;
				struct nccl_op t = q[r][i - 1];
				q[r][i - 1] = q[r][j];
				q[r][j] = t;
			}
			/* the program's call order, then sorted by count within a
			 * pair so the k-th send meets the k-th receive */
			for (size_t i = 0; i < len[r]; i++)
				q[r][i].seq = (unsigned)q[r][i].count;
		}
		for (int r = 0; r < nr; r++)
			nccl_group_order(q[r], len[r], fake_rank);
		ck_assert_msg(drains(q, len, nr), "trial %d deadlocked", trial);
	}
	for (int r = 0; r < N; r++)
		free(q[r]);
}
END_TEST

START_TEST(group_crossed_deadlocks_unordered)
{
	/* the case the order exists for: both ranks send first */
	struct fake f[2] = { { 0 }, { 1 } };
	struct nccl_op a[2], b[2], *q[2] = { a, b };
	size_t len[2] = { 2, 2 };

	a[0] = p2p(&f[0], NCCL_OP_SEND, 1, 1, 0);
	a[1] = p2p(&f[0], NCCL_OP_RECV, 1, 2, 1);
	b[0] = p2p(&f[1], NCCL_OP_SEND, 0, 2, 0);
	b[1] = p2p(&f[1], NCCL_OP_RECV, 0, 1, 1);
	ck_assert(!drains(q, len, 2));
	nccl_group_order(a, 2, fake_rank);
	nccl_group_order(b, 2, fake_rank);
	ck_assert(drains(q, len, 2));
}
END_TEST

static struct nccl_op seen[32];
static size_t nseen;
static int runs;

static ncclResult_t record_runner(struct nccl_op *ops, size_t n)
{
	runs++;
	memcpy(seen, ops, n * sizeof(*ops));
	nseen = n;
	return ncclSuccess;
}

START_TEST(group_bookkeeping)
{
	struct fake f = { 0 };
	struct nccl_op o = p2p(&f, NCCL_OP_SEND, 1, 4, 0);
	bool queued = true;

	nccl_group_set_runner(record_runner);
	runs = 0;
	/* outside a group nothing is queued: the caller runs it */
	ck_assert_int_eq(nccl_group_add(&o, &queued), ncclSuccess);
	ck_assert(!queued);
	ck_assert_int_eq(ncclGroupEnd(), ncclInvalidUsage);
	ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
	ck_assert_int_eq(ncclGroupStart(), ncclSuccess); /* nested */
	ck_assert_int_eq(nccl_group_depth(), 2);
	for (int i = 0; i < 3; i++) {
		o.count = (size_t)i + 1;
		ck_assert_int_eq(nccl_group_add(&o, &queued), ncclSuccess);
		ck_assert(queued);
	}
	ck_assert_int_eq(ncclGroupEnd(), ncclSuccess); /* inner: nothing runs */
	ck_assert_int_eq(runs, 0);
	ck_assert_int_eq(nccl_group_pending(), 3);
	ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
	ck_assert_int_eq(runs, 1);
	ck_assert_int_eq(nseen, 3);
	for (size_t i = 0; i < 3; i++) {
		ck_assert_int_eq(seen[i].count, i + 1);
		ck_assert_int_eq(seen[i].seq, i);
	}
	ck_assert_int_eq(nccl_group_pending(), 0);
	ck_assert_int_eq(nccl_group_depth(), 0);
}
END_TEST

START_TEST(group_simulate)
{
	struct fake f = { 0 };
	struct nccl_op o = p2p(&f, NCCL_OP_SEND, 1, 1 << 20, 0);
	ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER, bad;
	bool queued;

	nccl_group_set_runner(record_runner);
	runs = 0;
	ncclGroupStart();
	nccl_group_add(&o, &queued);
	ck_assert_int_eq(ncclGroupSimulateEnd(&info), ncclSuccess);
	ck_assert_int_eq(runs, 0); /* simulated: nothing ran */
	ck_assert_int_eq(nccl_group_pending(), 0);
	ck_assert(info.estimatedTime > 20.0f);
	memset(&bad, 0, sizeof(bad));
	ncclGroupStart();
	ck_assert_int_eq(ncclGroupSimulateEnd(&bad), ncclInvalidArgument);
	ck_assert_int_eq(ncclGroupSimulateEnd(NULL), ncclSuccess);
	ck_assert_int_eq(ncclGroupSimulateEnd(NULL), ncclInvalidUsage);
}
END_TEST

/* A thread started inside a group fails: ncclGroupEnd returns its result,
 * and the text, which was that thread's, becomes the caller's (issue 19:
 * ncclCommInitAll failed with an empty ncclGetLastError). */
static void *failing_thread(void *arg)
{
	struct nccl_deferred *d = arg;

	d->result = nccl_fail(NULL, ncclInvalidUsage, "communicator creation: rank 1 was given "
			      "twice");
	snprintf(d->err, sizeof(d->err), "%s", ncclGetLastError(NULL));
	return NULL;
}

static void *silent_thread(void *arg)
{
	((struct nccl_deferred *)arg)->result = ncclRemoteError; /* and no text */
	return NULL;
}

static void *fine_thread(void *arg)
{
	((struct nccl_deferred *)arg)->result = ncclSuccess;
	return NULL;
}

struct deferred_case {
	void *(*fn)(void *);
	ncclResult_t res;
	char before[256], after[256];
};

static void *group_with_deferred(void *arg)
{
	struct deferred_case *dc = arg;
	struct nccl_deferred *d = calloc(1, sizeof(*d)), *ok = calloc(1, sizeof(*ok));
	pthread_t t, t2;

	ncclGroupStart();
	pthread_create(&t2, NULL, fine_thread, ok); /* a creation that worked */
	nccl_group_defer_thread(t2, ok);
	pthread_create(&t, NULL, dc->fn, d);
	nccl_group_defer_thread(t, d);
	snprintf(dc->before, sizeof(dc->before), "%s", ncclGetLastError(NULL));
	dc->res = ncclGroupEnd();
	snprintf(dc->after, sizeof(dc->after), "%s", ncclGetLastError(NULL));
	return NULL;
}

START_TEST(group_deferred_error_text)
{
	struct deferred_case dc = { .fn = failing_thread };
	pthread_t t;

	nccl_group_set_runner(record_runner);
	/* on fresh threads: their last error starts empty */
	pthread_create(&t, NULL, group_with_deferred, &dc);
	pthread_join(t, NULL);
	ck_assert_str_eq(dc.before, "");
	ck_assert_int_eq(dc.res, ncclInvalidUsage);
	ck_assert_str_eq(dc.after, "communicator creation: rank 1 was given twice");
	memset(&dc, 0, sizeof(dc));
	dc.fn = silent_thread;
	pthread_create(&t, NULL, group_with_deferred, &dc);
	pthread_join(t, NULL);
	ck_assert_int_eq(dc.res, ncclRemoteError);
	ck_assert_msg(strstr(dc.after, "gave no reason"), "text: \"%s\"", dc.after);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nccl");
	TCase *t = tcase_create("all");
	SRunner *sr;
	int failed;

	tcase_add_test(t, abi_values);
	tcase_add_test(t, abi_initializer);
	tcase_add_test(t, dtype_map);
	tcase_add_test(t, config_defaults);
	tcase_add_test(t, config_fields);
	tcase_add_test(t, config_bad_magic);
	tcase_add_test(t, config_older_caller);
	tcase_add_test(t, config_sizes);
	tcase_add_test(t, error_mapping);
	tcase_add_test(t, error_messages);
	tcase_add_test(t, version);
	tcase_add_test(t, debug_env);
	tcase_add_test(t, uid_derive);
	tcase_add_test(t, group_order_basic);
	tcase_add_test(t, group_order_never_deadlocks);
	tcase_add_test(t, group_crossed_deadlocks_unordered);
	tcase_add_test(t, group_bookkeeping);
	tcase_add_test(t, group_simulate);
	tcase_add_test(t, group_deferred_error_text);
	suite_add_tcase(s, t);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
