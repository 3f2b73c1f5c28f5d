// SPDX-License-Identifier: MIT
/* Unit tests of the engine (daemon/engine/): communicators formed through
 * the real bootstrap (JOIN / MEMBERSHIP over loopback rails) and every
 * collective and send/recv run by the real dispatcher, executors and rail
 * phase between several hosts of one process (engine_harness.h), each result
 * checked element by element against its definition. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine_harness.h"

#define T_MS 10000

/* nhosts hosts on rails rail_mask, rph ranks each, one communicator: the
 * sessions in rank order in ss[]. */
static void cluster_p(struct th_host **hs, int nhosts, int rph, uint32_t rail_mask,
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
	ck_assert(th_wait_init(ss, nhosts * rph, T_MS));
	for (int r = 0; r < nhosts * rph; r++) {
		ck_assert_int_eq(ss[r]->init_status, 0);
		ck_assert_uint_eq(ss[r]->comm_id & 0xffff, (uint32_t)r);
		ck_assert_uint_eq(ss[r]->nhosts, (uint32_t)nhosts);
	}
}

static void cluster(struct th_host **hs, int nhosts, int rph, uint32_t rail_mask,
		    struct th_sess **ss)
{
	cluster_p(hs, nhosts, rph, rail_mask, ss, NULL);
}

static void free_all(struct th_host **hs, int n)
{
	for (int i = n - 1; i >= 0; i--)
		th_host_free(hs[i]);
}

static int32_t val(int rank, uint64_t i)
{
	return (int32_t)((rank + 1) * 1000 + (int64_t)(i % 977)) - 500;
}

/* AllReduce SUM of int32 over n ranks; count elements. */
static void allreduce(struct th_sess **ss, int n, uint64_t count, uint32_t redop)
{
	int32_t *in[16], *out[16];
	uint32_t im[16], om[16];
	uint64_t tag[16];

	for (int r = 0; r < n; r++) {
		im[r] = th_mem(ss[r], count * 4, (void **)&in[r]);
		om[r] = th_mem(ss[r], count * 4, (void **)&out[r]);
		for (uint64_t i = 0; i < count; i++)
			in[r][i] = val(r, i);
	}
	for (int r = 0; r < n; r++)
		tag[r] = th_submit(ss[r], R2_OP_ALLREDUCE, count, R2CCL_INT32, redop, 0, im[r],
				   om[r]);
	for (int r = 0; r < n; r++)
		ck_assert_int_eq(th_wait(ss[r], tag[r], T_MS), 0);
	for (uint64_t i = 0; i < count; i++) {
		int32_t want = val(0, i);
		for (int r = 1; r < n; r++)
			want = redop == R2CCL_MAX ? (val(r, i) > want ? val(r, i) : want)
						  : want + val(r, i);
		for (int r = 0; r < n; r++)
			TH_CHECK(out[r][i] == want, "rank %d element %llu: %d, want %d", r,
				      (unsigned long long)i, out[r][i], want);
	}
}

/* two hosts, one rank each, two rails: a multi-chunk AllReduce (1 MB, 64 KB
 * chunks) and a small one (inline on the dispatcher), then a MAX */
START_TEST(test_allreduce_two_hosts)
{
	struct th_host *hs[2];
	struct th_sess *ss[2];

	cluster(hs, 2, 1, 0x3, ss);
	allreduce(ss, 2, 256 * 1024, R2CCL_SUM);
	allreduce(ss, 2, 100, R2CCL_SUM);
	allreduce(ss, 2, 50000, R2CCL_MAX);
	free_all(hs, 2);
}
END_TEST

/* three hosts of two ranks each: local phase, rail phase, local phase */
START_TEST(test_allreduce_three_hosts_two_ranks)
{
	struct th_host *hs[3];
	struct th_sess *ss[6];

	cluster(hs, 3, 2, 0x3, ss);
	allreduce(ss, 6, 100000, R2CCL_SUM);
	free_all(hs, 3);
}
END_TEST

/* Small AllReduces across hosts go eager (exec_rail_eager.c: one message
 * each way), larger ones by the planner's schedule, mixed in one
 * communicator; exact results; the eager count says which path ran. */
START_TEST(test_allreduce_eager)
{
	struct th_host *hs[3];
	struct th_sess *ss[6];
	enum { NQ = 4 }; /* a session holds 8 memory regions */
	int32_t *in[2][NQ], *out[2][NQ];
	uint32_t im[2][NQ], om[2][NQ];
	uint64_t tag[2][NQ];
	const uint64_t cnt[NQ] = { 1, 100000, 37, 5000 }; /* the second by the planner */

	cluster(hs, 2, 1, 0x3, ss);
	allreduce(ss, 2, 1, R2CCL_SUM);
	allreduce(ss, 2, 256 * 1024, R2CCL_SUM); /* planner */
	allreduce(ss, 2, 16384, R2CCL_MAX);      /* 64 KB: the largest eager one */
	allreduce(ss, 2, 16385, R2CCL_SUM);      /* planner */
	for (int h = 0; h < 2; h++)
		ck_assert_uint_eq(atomic_load(&hs[h]->d.eager_ops_total), 2);
	free_all(hs, 2);

	/* queued back to back, small and large mixed: a host ahead sends the
	 * next operation's message while the other still runs this one */
	cluster(hs, 2, 1, 0x3, ss);
	for (int q = 0; q < NQ; q++) {
		for (int r = 0; r < 2; r++) {
			im[r][q] = th_mem(ss[r], cnt[q] * 4, (void **)&in[r][q]);
			om[r][q] = th_mem(ss[r], cnt[q] * 4, (void **)&out[r][q]);
			for (uint64_t i = 0; i < cnt[q]; i++)
				in[r][q][i] = val(r, i + (uint64_t)q);
		}
	}
	for (int r = 0; r < 2; r++)
		for (int q = 0; q < NQ; q++)
			tag[r][q] = th_submit(ss[r], R2_OP_ALLREDUCE, cnt[q], R2CCL_INT32,
					      R2CCL_SUM, 0, im[r][q], om[r][q]);
	for (int q = 0; q < NQ; q++)
		for (int r = 0; r < 2; r++)
			ck_assert_int_eq(th_wait(ss[r], tag[r][q], T_MS), 0);
	for (int q = 0; q < NQ; q++)
		for (uint64_t i = 0; i < cnt[q]; i++)
			for (int r = 0; r < 2; r++)
				TH_CHECK(out[r][q][i] == val(0, i + (uint64_t)q) + val(1, i + (uint64_t)q),
					 "op %d rank %d element %llu", q, r, (unsigned long long)i);
	for (int h = 0; h < 2; h++)
		ck_assert_uint_eq(atomic_load(&hs[h]->d.eager_ops_total), NQ - 1);
	free_all(hs, 2);

	/* three hosts of two ranks: local phase, eager exchange, local phase */
	cluster(hs, 3, 2, 0x3, ss);
	allreduce(ss, 6, 1000, R2CCL_SUM);
	allreduce(ss, 6, 7, R2CCL_MAX);
	for (int h = 0; h < 3; h++)
		ck_assert_uint_eq(atomic_load(&hs[h]->d.eager_ops_total), 2);
	free_all(hs, 3);
}
END_TEST

/* AllGather, ReduceScatter, Broadcast, Reduce on nhosts hosts of rph
 * ranks each */
static void other_collectives(int nhosts, int rph, const char *const *params)
{
	struct th_host *hs[4];
	struct th_sess *ss[8];
	const int n = nhosts * rph;
	const uint64_t cnt = 30000;
	int32_t *in[8], *out[8];
	uint32_t im[8], om[8];
	uint64_t tag[8];

	cluster_p(hs, nhosts, rph, 0x3, ss, params);
	for (int r = 0; r < n; r++) {
		im[r] = th_mem(ss[r], cnt * n * 4, (void **)&in[r]);
		om[r] = th_mem(ss[r], cnt * n * 4, (void **)&out[r]);
		for (uint64_t i = 0; i < cnt * n; i++)
			in[r][i] = val(r, i);
	}
	/* AllGather: rank r's cnt elements at r * cnt everywhere */
	for (int r = 0; r < n; r++)
		tag[r] = th_submit(ss[r], R2_OP_ALLGATHER, cnt, R2CCL_INT32, 0, 0, im[r], om[r]);
	for (int r = 0; r < n; r++)
		ck_assert_int_eq(th_wait(ss[r], tag[r], T_MS), 0);
	for (int r = 0; r < n; r++)
		for (int q = 0; q < n; q++)
			for (uint64_t i = 0; i < cnt; i++)
				TH_CHECK(out[r][q * cnt + i] == val(q, i), "allgather rank %d block %d", r, q);
	/* ReduceScatter: rank r gets the sum of block r */
	for (int r = 0; r < n; r++)
		tag[r] = th_submit(ss[r], R2_OP_REDUCESCATTER, cnt, R2CCL_INT32, R2CCL_SUM, 0,
				   im[r], om[r]);
	for (int r = 0; r < n; r++)
		ck_assert_int_eq(th_wait(ss[r], tag[r], T_MS), 0);
	for (int r = 0; r < n; r++)
		for (uint64_t i = 0; i < cnt; i++) {
			int32_t want = 0;
			for (int q = 0; q < n; q++)
				want += val(q, r * cnt + i);
			TH_CHECK(out[r][i] == want, "reducescatter rank %d", r);
		}
	/* Broadcast from rank 1 */
	for (int r = 0; r < n; r++)
		tag[r] = th_submit(ss[r], R2_OP_BROADCAST, cnt, R2CCL_INT32, 0, 1, im[r], om[r]);
	for (int r = 0; r < n; r++)
		ck_assert_int_eq(th_wait(ss[r], tag[r], T_MS), 0);
	for (int r = 0; r < n; r++)
		for (uint64_t i = 0; i < cnt; i++)
			TH_CHECK(out[r][i] == val(1, i), "broadcast rank %d", r);
	/* Reduce to the last rank */
	memset(out[n - 1], 0, cnt * 4);
	for (int r = 0; r < n; r++)
		tag[r] = th_submit(ss[r], R2_OP_REDUCE, cnt, R2CCL_INT32, R2CCL_SUM, n - 1, im[r],
				   om[r]);
	for (int r = 0; r < n; r++)
		ck_assert_int_eq(th_wait(ss[r], tag[r], T_MS), 0);
	for (uint64_t i = 0; i < cnt; i++) {
		int32_t want = 0;
		for (int q = 0; q < n; q++)
			want += val(q, i);
		TH_CHECK(out[n - 1][i] == want, "reduce element %llu", (unsigned long long)i);
	}
	free_all(hs, nhosts);
}

START_TEST(test_other_collectives)
{
	other_collectives(3, 1, NULL);
}
END_TEST

/* two ranks per host (the local phases), with a reduction pool of two
 * threads and an apply thread */
START_TEST(test_other_collectives_two_ranks)
{
	static const char *const p[] = { "reduce_threads=2", "apply_threads=1", NULL };

	other_collectives(2, 2, p);
}
END_TEST

/* one host, three ranks: the local executor only, with a reduction pool
 * of two threads; then send/recv between two of its ranks */
START_TEST(test_local_collectives)
{
	static const char *const p[] = { "reduce_threads=2", NULL };
	struct th_host *hs[1];
	struct th_sess *ss[2];
	const uint64_t cnt = 100000;
	int32_t *b0, *r1;
	uint32_t m0, n1;
	uint64_t t0, t1;

	other_collectives(1, 3, p);
	cluster_p(hs, 1, 2, 0x1, ss, p);
	m0 = th_mem(ss[0], cnt * 4, (void **)&b0);
	n1 = th_mem(ss[1], cnt * 4, (void **)&r1);
	for (uint64_t i = 0; i < cnt; i++)
		b0[i] = val(0, i);
	t1 = th_submit(ss[1], R2_OP_RECV, cnt, R2CCL_INT32, 0, 0, 0, n1);
	t0 = th_submit(ss[0], R2_OP_SEND, cnt, R2CCL_INT32, 0, 1, m0, 0);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), 0);
	ck_assert_int_eq(th_wait(ss[1], t1, T_MS), 0);
	ck_assert_mem_eq(r1, b0, cnt * 4);
	free_all(hs, 1);
}
END_TEST

START_TEST(test_allreduce_threads)
{
	static const char *const p[] = { "reduce_threads=2", "apply_threads=1", NULL };
	struct th_host *hs[2];
	struct th_sess *ss[4];

	cluster_p(hs, 2, 2, 0x3, ss, p);
	allreduce(ss, 4, 1 << 20, R2CCL_SUM);
	free_all(hs, 2);
}
END_TEST

/* Send/Recv between hosts, both directions, then a mismatch refused */
START_TEST(test_send_recv)
{
	struct th_host *hs[2];
	struct th_sess *ss[2];
	const uint64_t cnt = 200000;
	int32_t *b0, *b1, *r0, *r1;
	uint32_t m0, m1, n0, n1;
	uint64_t t0, t1;

	cluster(hs, 2, 1, 0x3, ss);
	m0 = th_mem(ss[0], cnt * 4, (void **)&b0);
	m1 = th_mem(ss[1], cnt * 4, (void **)&b1);
	n0 = th_mem(ss[0], cnt * 4, (void **)&r0);
	n1 = th_mem(ss[1], cnt * 4, (void **)&r1);
	for (uint64_t i = 0; i < cnt; i++) {
		b0[i] = val(0, i);
		b1[i] = val(1, i);
	}
	t0 = th_submit(ss[0], R2_OP_SEND, cnt, R2CCL_INT32, 0, 1, m0, 0);
	t1 = th_submit(ss[1], R2_OP_RECV, cnt, R2CCL_INT32, 0, 0, 0, n1);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), 0);
	ck_assert_int_eq(th_wait(ss[1], t1, T_MS), 0);
	ck_assert_mem_eq(r1, b0, cnt * 4);
	/* the receive first this time */
	t0 = th_submit(ss[0], R2_OP_RECV, cnt, R2CCL_INT32, 0, 1, 0, n0);
	th_pump(20);
	t1 = th_submit(ss[1], R2_OP_SEND, cnt, R2CCL_INT32, 0, 0, m1, 0);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), 0);
	ck_assert_int_eq(th_wait(ss[1], t1, T_MS), 0);
	ck_assert_mem_eq(r0, b1, cnt * 4);
	/* to itself, and with a buffer out of range: refused at submission */
	t0 = th_submit(ss[0], R2_OP_SEND, cnt, R2CCL_INT32, 0, 0, m0, 0);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), -EINVAL);
	t0 = th_submit(ss[0], R2_OP_SEND, cnt + 1, R2CCL_INT32, 0, 1, m0, 0);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), R2CCL_E_BAD_BUFFER);
	free_all(hs, 2);
}
END_TEST

/* Collectives whose ranks (of one host) disagree fail with MISMATCH on
 * every rank and break the communicator: what comes after is refused */
START_TEST(test_mismatch)
{
	struct th_host *hs[1];
	struct th_sess *ss[2];
	int32_t *a, *b;
	uint32_t ma, mb;
	uint64_t t0, t1;

	cluster(hs, 1, 2, 0x1, ss);
	ma = th_mem(ss[0], 4096, (void **)&a);
	mb = th_mem(ss[1], 4096, (void **)&b);
	t0 = th_submit(ss[0], R2_OP_ALLREDUCE, 100, R2CCL_INT32, R2CCL_SUM, 0, ma, ma);
	t1 = th_submit(ss[1], R2_OP_ALLREDUCE, 200, R2CCL_INT32, R2CCL_SUM, 0, mb, mb);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), R2CCL_E_MISMATCH);
	ck_assert_int_eq(th_wait(ss[1], t1, T_MS), R2CCL_E_MISMATCH);
	t0 = th_submit(ss[0], R2_OP_ALLREDUCE, 100, R2CCL_INT32, R2CCL_SUM, 0, ma, ma);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), R2CCL_E_COMM_BROKEN);
	free_all(hs, 1);
}
END_TEST

/* A communicator of two ranks on one host: no rail phase */
START_TEST(test_local_only)
{
	struct th_host *hs[1];
	struct th_sess *ss[2];

	cluster(hs, 1, 2, 0x1, ss);
	allreduce(ss, 2, 300000, R2CCL_SUM);
	free_all(hs, 1);
}
END_TEST

/* Bootstrap failures: ranks that disagree on nranks fail every rank
 * (JOIN_FAIL through the root); a rank given twice fails with DUP_RANK */
START_TEST(test_bootstrap_failures)
{
	struct th_host *hs[2];
	struct th_sess *a, *b, *c;
	struct r2_uid uid;

	hs[0] = th_host_new(0, 0x3, NULL);
	hs[1] = th_host_new(1, 0x3, NULL);
	th_uid(hs[0], &uid);
	a = th_sess_new(hs[0]);
	b = th_sess_new(hs[1]);
	th_init(a, &uid, 3, 0);
	th_init(b, &uid, 3, 0); /* rank 0 again, on another host */
	c = th_sess_new(hs[1]);
	th_init(c, &uid, 3, 2);
	struct th_sess *ss[3] = { a, b, c };
	ck_assert(th_wait_init(ss, 3, T_MS));
	ck_assert_int_ne(a->init_status, 0);
	ck_assert_int_ne(b->init_status, 0);
	ck_assert_int_ne(c->init_status, 0);
	free_all(hs, 2);
}
END_TEST

/* one case per test: CK_RUN_CASE=<test name> runs one */
#define ADD(t)                                      \
	do {                                        \
		TCase *tc = tcase_create(#t);       \
		tcase_set_timeout(tc, 60);          \
		tcase_add_test(tc, t);              \
		suite_add_tcase(s, tc);             \
	} while (0)

/* A rank that never calls the collective: the others fail with ETIMEDOUT
 * after op_timeout_ms, and the reason says who was waited for */
START_TEST(test_op_timeout)
{
	static const char *const p[] = { "op_timeout_ms=300", NULL };
	struct th_host *h = th_host_new(0, 0x1, p);
	struct th_sess *ss[2] = { th_sess_new(h), th_sess_new(h) };
	struct r2_uid uid;
	int32_t *a;
	uint32_t ma;
	uint64_t t0, start;

	th_uid(h, &uid);
	th_init(ss[0], &uid, 2, 0);
	th_init(ss[1], &uid, 2, 1);
	ck_assert(th_wait_init(ss, 2, T_MS));
	ma = th_mem(ss[0], 4096, (void **)&a);
	start = th_now_ms();
	t0 = th_submit(ss[0], R2_OP_ALLREDUCE, 100, R2CCL_INT32, R2CCL_SUM, 0, ma, ma);
	ck_assert_int_eq(th_wait(ss[0], t0, T_MS), -ETIMEDOUT);
	ck_assert_uint_ge(th_now_ms() - start, 300);
	r2d_comm_handle_reason(&ss[0]->s, 7, ss[0]->comm_id);
	ck_assert_int_eq(ss[0]->nresults, 1);
	ck_assert_int_eq(ss[0]->result_status, -ETIMEDOUT);
	ck_assert_ptr_nonnull(strstr(ss[0]->result_error, "rank 1"));
	/* a communicator of another session: not found */
	r2d_comm_handle_reason(&ss[1]->s, 8, ss[0]->comm_id);
	ck_assert_int_eq(ss[1]->result_status, -ENOENT);
	th_host_free(h);
}
END_TEST

/* A rank on the second host never joins: every joined rank fails with
 * BOOTSTRAP after bootstrap_timeout_ms */
START_TEST(test_bootstrap_timeout)
{
	static const char *const p[] = { "bootstrap_timeout_ms=300", NULL };
	struct th_host *hs[2] = { th_host_new(0, 0x3, p), th_host_new(1, 0x3, p) };
	struct th_sess *ss[2] = { th_sess_new(hs[0]), th_sess_new(hs[1]) };
	struct r2_uid uid;

	th_uid(hs[0], &uid);
	th_init(ss[0], &uid, 3, 0);
	th_init(ss[1], &uid, 3, 1); /* rank 2 never comes */
	ck_assert(th_wait_init(ss, 2, T_MS));
	ck_assert_int_eq(ss[0]->init_status, R2CCL_E_BOOTSTRAP);
	ck_assert_int_eq(ss[1]->init_status, R2CCL_E_BOOTSTRAP);
	free_all(hs, 2);
}
END_TEST

/* CommInit arguments refused: a bad unique id, rank out of range, a mode
 * nobody knows, nranks that disagree across hosts (JOIN_FAIL) */
START_TEST(test_init_refused)
{
	struct th_host *hs[2] = { th_host_new(0, 0x3, NULL), th_host_new(1, 0x3, NULL) };
	struct th_sess *a = th_sess_new(hs[0]), *b = th_sess_new(hs[1]);
	struct r2_uid uid;
	struct th_sess *ss[2] = { a, b };

	memset(&uid, 0, sizeof(uid));
	th_init(a, &uid, 2, 0);
	ck_assert(a->init_done);
	ck_assert_int_eq(a->init_status, -EINVAL);
	a->init_done = false;
	th_uid(hs[0], &uid);
	th_init(a, &uid, 2, 5);
	ck_assert_int_eq(a->init_status, -EINVAL);
	a->init_done = false;
	th_init(a, &uid, 2, 0);
	th_init(b, &uid, 3, 1);
	ck_assert(th_wait_init(ss, 2, T_MS));
	ck_assert_int_ne(a->init_status, 0);
	ck_assert_int_ne(b->init_status, 0);
	free_all(hs, 2);
}
END_TEST

/* Destroy: a rank that left answers ENOENT; a collective its peer on the
 * other host calls afterwards waits for it, and fails after op_timeout_ms */
START_TEST(test_destroy_and_abort)
{
	static const char *const p[] = { "op_timeout_ms=400", NULL };
	struct th_host *hs[2];
	struct th_sess *ss[2];
	int32_t *b;
	uint32_t mb;
	uint64_t t;
	struct r2_uid uid;

	hs[0] = th_host_new(0, 0x3, p);
	hs[1] = th_host_new(1, 0x3, p);
	th_uid(hs[0], &uid);
	for (int i = 0; i < 2; i++) {
		ss[i] = th_sess_new(hs[i]);
		th_init(ss[i], &uid, 2, i);
	}
	ck_assert(th_wait_init(ss, 2, T_MS));
	allreduce(ss, 2, 1000, R2CCL_SUM);
	r2d_comm_handle_destroy(&ss[0]->s, 9, ss[0]->comm_id, true);
	ck_assert_int_eq(ss[0]->nresults, 1);
	ck_assert_int_eq(ss[0]->result_status, 0);
	/* again: gone from this session */
	r2d_comm_handle_destroy(&ss[0]->s, 10, ss[0]->comm_id, false);
	ck_assert_int_eq(ss[0]->result_status, -ENOENT);
	mb = th_mem(ss[1], 4096, (void **)&b);
	th_pump(100);
	t = th_submit(ss[1], R2_OP_ALLREDUCE, 100, R2CCL_INT32, R2CCL_SUM, 0, mb, mb);
	ck_assert_int_eq(th_wait(ss[1], t, 5000), -ETIMEDOUT);
	r2d_comm_handle_destroy(&ss[1]->s, 11, ss[1]->comm_id, false);
	ck_assert_int_eq(ss[1]->result_status, 0);
	free_all(hs, 2);
}
END_TEST

/* A draining daemon refuses new operations with SHUTDOWN */
START_TEST(test_draining)
{
	struct th_host *hs[1];
	struct th_sess *ss[2];
	int32_t *a;
	uint32_t ma;
	uint64_t t;

	cluster(hs, 1, 2, 0x1, ss);
	ma = th_mem(ss[0], 4096, (void **)&a);
	pthread_mutex_lock(&hs[0]->d.lock);
	hs[0]->d.draining = true;
	pthread_mutex_unlock(&hs[0]->d.lock);
	t = th_submit(ss[0], R2_OP_ALLREDUCE, 100, R2CCL_INT32, R2CCL_SUM, 0, ma, ma);
	ck_assert_int_eq(th_wait(ss[0], t, T_MS), R2CCL_E_SHUTDOWN);
	ck_assert_int_eq(r2d_engine_busy(&hs[0]->d), 0);
	free_all(hs, 1);
}
END_TEST

/* float32 and uint8 AllReduce across hosts: exact for values whose sums
 * are exact in the type */
START_TEST(test_other_types)
{
	struct th_host *hs[2];
	struct th_sess *ss[2];
	const uint64_t cnt = 100000;
	float *fi[2], *fo[2];
	uint32_t im[2], om[2];
	uint64_t tag[2];

	cluster(hs, 2, 1, 0x3, ss);
	for (int r = 0; r < 2; r++) {
		im[r] = th_mem(ss[r], cnt * 4, (void **)&fi[r]);
		om[r] = th_mem(ss[r], cnt * 4, (void **)&fo[r]);
		for (uint64_t i = 0; i < cnt; i++)
			fi[r][i] = (float)((i % 1000) * (r + 1)) * 0.5f;
	}
	for (int r = 0; r < 2; r++)
		tag[r] = th_submit(ss[r], R2_OP_ALLREDUCE, cnt, R2CCL_FLOAT32, R2CCL_SUM, 0, im[r],
				   om[r]);
	for (int r = 0; r < 2; r++)
		ck_assert_int_eq(th_wait(ss[r], tag[r], T_MS), 0);
	for (int r = 0; r < 2; r++)
		for (uint64_t i = 0; i < cnt; i++)
			TH_CHECK(fo[r][i] == (float)((i % 1000) * 3) * 0.5f, "rank %d element %llu", r,
				 (unsigned long long)i);
	free_all(hs, 2);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("engine");

	ADD(test_allreduce_two_hosts);
	ADD(test_allreduce_three_hosts_two_ranks);
	ADD(test_allreduce_eager);
	ADD(test_other_collectives);
	ADD(test_other_collectives_two_ranks);
	ADD(test_allreduce_threads);
	ADD(test_local_collectives);
	ADD(test_send_recv);
	ADD(test_mismatch);
	ADD(test_local_only);
	ADD(test_bootstrap_failures);
	ADD(test_op_timeout);
	ADD(test_bootstrap_timeout);
	ADD(test_init_refused);
	ADD(test_destroy_and_abort);
	ADD(test_draining);
	ADD(test_other_types);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	int nf;

	srunner_run_all(sr, CK_NORMAL);
	nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}
