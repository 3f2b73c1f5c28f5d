// SPDX-License-Identifier: MIT
/* The verbs provider's pure functions (daemon/transport/verbs_util.c). */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"
#include "verbs_util.h"

START_TEST(wc_classes)
{
	ck_assert_int_eq(r2v_wc_classify(IBV_WC_SUCCESS), R2V_WC_OK);
	ck_assert_int_eq(r2v_wc_classify(IBV_WC_RETRY_EXC_ERR), R2V_WC_RETRY);
	ck_assert_int_eq(r2v_wc_classify(IBV_WC_RESP_TIMEOUT_ERR), R2V_WC_RETRY);
	ck_assert_int_eq(r2v_wc_classify(IBV_WC_RNR_RETRY_EXC_ERR), R2V_WC_RNR);
	ck_assert_int_eq(r2v_wc_classify(IBV_WC_WR_FLUSH_ERR), R2V_WC_FLUSH);
	ck_assert_int_eq(r2v_wc_classify(IBV_WC_REM_ACCESS_ERR), R2V_WC_REMOTE);
	ck_assert_int_eq(r2v_wc_classify(IBV_WC_REM_OP_ERR), R2V_WC_REMOTE);
	ck_assert_int_eq(r2v_wc_classify(IBV_WC_LOC_LEN_ERR), R2V_WC_LOCAL);
	ck_assert_int_eq(r2v_wc_classify(IBV_WC_LOC_PROT_ERR), R2V_WC_LOCAL);
	ck_assert_int_eq(r2v_wc_classify(IBV_WC_FATAL_ERR), R2V_WC_FATAL);
	ck_assert_int_eq(r2v_wc_classify((enum ibv_wc_status)999), R2V_WC_FATAL);
	ck_assert_int_eq(r2v_wc_errno(IBV_WC_SUCCESS), 0);
	ck_assert_int_eq(r2v_wc_errno(IBV_WC_RETRY_EXC_ERR), -ETIMEDOUT);
	ck_assert_int_eq(r2v_wc_errno(IBV_WC_RNR_RETRY_EXC_ERR), -EBUSY);
	ck_assert_int_eq(r2v_wc_errno(IBV_WC_WR_FLUSH_ERR), -ECONNABORTED);
	ck_assert_int_eq(r2v_wc_errno(IBV_WC_REM_INV_REQ_ERR), -ECONNREFUSED);
	ck_assert_int_eq(r2v_wc_errno(IBV_WC_LOC_QP_OP_ERR), -EIO);
	ck_assert_int_eq(r2v_wc_errno(IBV_WC_GENERAL_ERR), -ENODEV);
	/* every status has a class with a name, and only SUCCESS is OK */
	for (int s = 0; s <= IBV_WC_TM_RNDV_INCOMPLETE; s++) {
		enum r2v_wc_class c = r2v_wc_classify((enum ibv_wc_status)s);
		ck_assert_str_ne(r2v_wc_class_name(c), "?");
		ck_assert_int_eq(c == R2V_WC_OK, s == IBV_WC_SUCCESS);
		ck_assert_int_eq(r2v_wc_errno((enum ibv_wc_status)s) == 0, s == IBV_WC_SUCCESS);
	}
}
END_TEST

static struct r2v_gid_ent ent(int idx, int type, const char *v4)
{
	struct r2v_gid_ent e = { .index = idx, .type = type };
	if (v4) {
		e.gid[10] = e.gid[11] = 0xff;
		inet_pton(AF_INET, v4, e.gid + 12);
	} else { /* link-local fe80:: */
		e.gid[0] = 0xfe;
		e.gid[1] = 0x80;
		e.gid[15] = (uint8_t)idx;
	}
	return e;
}

static uint32_t ip(const char *s)
{
	struct in_addr a;
	inet_pton(AF_INET, s, &a);
	return a.s_addr;
}

START_TEST(gid_choice)
{
	/* a typical RoCE table: link-local v1/v2, then v1/v2 per IPv4 address */
	struct r2v_gid_ent t[] = {
		ent(0, R2V_GID_ROCE_V1, NULL), ent(1, R2V_GID_ROCE_V2, NULL),
		ent(2, R2V_GID_ROCE_V1, "198.18.0.1"), ent(3, R2V_GID_ROCE_V2, "198.18.0.1"),
		ent(4, R2V_GID_ROCE_V1, "10.0.0.5"), ent(5, R2V_GID_ROCE_V2, "10.0.0.5"),
	};
	int n = (int)(sizeof(t) / sizeof(t[0]));
	ck_assert_int_eq(r2v_gid_choose(t, n, ip("198.18.0.1"), false), 3);
	ck_assert_int_eq(r2v_gid_choose(t, n, ip("10.0.0.5"), false), 5);
	ck_assert_int_eq(r2v_gid_choose(t, n, ip("10.9.9.9"), false), -ENOENT);
	ck_assert_int_eq(r2v_gid_choose(t, n, 0, false), 3); /* first v2 IPv4 */
	/* only v1 for that address */
	struct r2v_gid_ent v1[] = { ent(0, R2V_GID_ROCE_V1, NULL), ent(7, R2V_GID_ROCE_V1, "198.18.1.2") };
	ck_assert_int_eq(r2v_gid_choose(v1, 2, ip("198.18.1.2"), false), 7);
	/* order in the table does not matter; the lowest index among equals */
	struct r2v_gid_ent rev[] = { ent(9, R2V_GID_ROCE_V2, "198.18.0.1"), ent(4, R2V_GID_ROCE_V2, "198.18.0.1"),
				     ent(2, R2V_GID_ROCE_V1, "198.18.0.1") };
	ck_assert_int_eq(r2v_gid_choose(rev, 3, ip("198.18.0.1"), false), 4);
	/* zero GIDs are empty entries */
	struct r2v_gid_ent z[] = { { .index = 0, .type = R2V_GID_ROCE_V2 } };
	ck_assert_int_eq(r2v_gid_choose(z, 1, 0, false), -ENOENT);
	/* IB: the first IB entry */
	struct r2v_gid_ent ib[] = { ent(0, R2V_GID_IB, NULL), ent(1, R2V_GID_IB, NULL) };
	ck_assert_int_eq(r2v_gid_choose(ib, 2, ip("198.18.0.1"), true), 0);
	ck_assert_int_eq(r2v_gid_choose(NULL, 0, 0, false), -ENOENT);
	uint32_t a = 0;
	ck_assert(r2v_gid_ipv4(t[3].gid, &a));
	ck_assert_uint_eq(a, ip("198.18.0.1"));
	ck_assert(!r2v_gid_ipv4(t[1].gid, &a));
	ck_assert_int_eq(r2v_gid_type_parse("RoCE v2", false), R2V_GID_ROCE_V2);
	ck_assert_int_eq(r2v_gid_type_parse("IB/RoCE v1", false), R2V_GID_ROCE_V1);
	ck_assert_int_eq(r2v_gid_type_parse("IB/RoCE v1", true), R2V_GID_IB);
	ck_assert_int_eq(r2v_gid_type_parse("what", false), -1);
	ck_assert_int_eq(r2v_gid_type_parse(NULL, false), -1);
}
END_TEST

START_TEST(mtu)
{
	ck_assert_int_eq(r2v_mtu_bytes(IBV_MTU_256), 256);
	ck_assert_int_eq(r2v_mtu_bytes(IBV_MTU_1024), 1024);
	ck_assert_int_eq(r2v_mtu_bytes(IBV_MTU_4096), 4096);
	ck_assert_int_eq(r2v_mtu_bytes((enum ibv_mtu)0), 0);
	ck_assert_int_eq(r2v_mtu_bytes((enum ibv_mtu)6), 0);
	ck_assert_int_eq(r2v_mtu_from_bytes(4096), IBV_MTU_4096);
	ck_assert_int_eq(r2v_mtu_from_bytes(9000), IBV_MTU_4096);
	ck_assert_int_eq(r2v_mtu_from_bytes(1500), IBV_MTU_1024);
	ck_assert_int_eq(r2v_mtu_from_bytes(255), 0);
	for (int m = IBV_MTU_256; m <= IBV_MTU_4096; m++)
		ck_assert_int_eq(r2v_mtu_from_bytes(r2v_mtu_bytes((enum ibv_mtu)m)), m);
	ck_assert_int_eq(r2v_mtu_path(IBV_MTU_4096, IBV_MTU_1024, 0), IBV_MTU_1024);
	ck_assert_int_eq(r2v_mtu_path(IBV_MTU_2048, IBV_MTU_4096, 0), IBV_MTU_2048);
	/* RoCE on a 1500-byte Ethernet MTU: 1024 */
	ck_assert_int_eq(r2v_mtu_path(IBV_MTU_4096, IBV_MTU_4096, 1500), IBV_MTU_1024);
	ck_assert_int_eq(r2v_mtu_path(IBV_MTU_4096, IBV_MTU_4096, 9000), IBV_MTU_4096);
	ck_assert_int_eq(r2v_mtu_path(IBV_MTU_4096, (enum ibv_mtu)0, 0), IBV_MTU_1024);
}
END_TEST

START_TEST(qp_transitions)
{
	struct ibv_qp_attr a;
	int m = r2v_qp_init_attr(&a, 2, IBV_ACCESS_LOCAL_WRITE);
	ck_assert_int_eq(a.qp_state, IBV_QPS_INIT);
	ck_assert_int_eq(a.port_num, 2);
	ck_assert_int_eq(a.qp_access_flags, IBV_ACCESS_LOCAL_WRITE);
	ck_assert_int_eq(m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);

	struct r2v_rtr_params p = { .dest_qpn = 0x1234567, .rq_psn = 0xabcdef12, .mtu = IBV_MTU_1024,
				    .port = 1, .global = true, .sgid_index = 3, .traffic_class = 106,
				    .sl = 3 };
	p.dgid[15] = 9;
	m = r2v_qp_rtr_attr(&a, &p);
	ck_assert_int_eq(a.qp_state, IBV_QPS_RTR);
	ck_assert_uint_eq(a.dest_qp_num, 0x234567); /* 24 bits */
	ck_assert_uint_eq(a.rq_psn, 0xcdef12);
	ck_assert_int_eq(a.path_mtu, IBV_MTU_1024);
	ck_assert_int_eq(a.ah_attr.is_global, 1);
	ck_assert_int_eq(a.ah_attr.grh.sgid_index, 3);
	ck_assert_int_eq(a.ah_attr.grh.traffic_class, 106);
	ck_assert_int_eq(a.ah_attr.grh.hop_limit, 64);
	ck_assert_int_eq(a.ah_attr.grh.dgid.raw[15], 9);
	ck_assert_int_eq(a.ah_attr.sl, 3);
	ck_assert_int_eq(m & IBV_QP_AV, IBV_QP_AV);
	ck_assert_int_eq(m, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	p.global = false;
	p.dlid = 17;
	r2v_qp_rtr_attr(&a, &p);
	ck_assert_int_eq(a.ah_attr.is_global, 0);
	ck_assert_int_eq(a.ah_attr.dlid, 17);

	m = r2v_qp_rts_attr(&a, 0x1000001, 14, 7, 7);
	ck_assert_int_eq(a.qp_state, IBV_QPS_RTS);
	ck_assert_uint_eq(a.sq_psn, 1);
	ck_assert_int_eq(a.timeout, 14);
	ck_assert_int_eq(a.retry_cnt, 7);
	ck_assert_int_eq(a.rnr_retry, 7);
	ck_assert_int_eq(m, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	r2v_qp_rts_attr(&a, 0, 40, 9, -1); /* clamped */
	ck_assert_int_eq(a.timeout, 31);
	ck_assert_int_eq(a.retry_cnt, 7);
	ck_assert_int_eq(a.rnr_retry, 0);
}
END_TEST

static struct r2v_cm_msg good(void)
{
	struct r2v_cm_msg m = { .type = R2V_CM_HELLO, .nqps = 2, .rail = 1, .lid = 0,
				.mtu = IBV_MTU_1024, .link_layer = IBV_LINK_LAYER_ETHERNET,
				.slot_size = 65536, .max_msg = 1u << 20, .self_id = 11,
				.dst_id = 22, .nonce = 0x123456789abcdefull };
	m.gid[10] = m.gid[11] = 0xff;
	m.gid[15] = 1;
	m.qpn[0] = 17;
	m.qpn[1] = 18;
	m.psn[0] = 0xabcdef;
	m.psn[1] = 1;
	return m;
}

START_TEST(cm_roundtrip)
{
	uint8_t w[R2V_CM_SIZE];
	struct r2v_cm_msg m = good(), u;
	ck_assert_int_eq(r2v_cm_pack(&m, w), R2V_CM_SIZE);
	ck_assert_int_eq(r2v_cm_unpack(w, sizeof(w), &u), 0);
	ck_assert_mem_eq(&m, &u, sizeof(m));
	/* little-endian on the wire */
	ck_assert_int_eq(w[0], 0x32);
	ck_assert_int_eq(w[24], 11);
	/* the challenge and the proof travel */
	m.flags = R2V_CM_F_AUTH;
	for (int i = 0; i < R2V_CM_CHAL; i++)
		m.chal[i] = (uint8_t)(i + 1);
	for (int i = 0; i < R2V_CM_MAC; i++)
		m.mac[i] = (uint8_t)(0xa0 + i);
	ck_assert_int_eq(r2v_cm_pack(&m, w), R2V_CM_SIZE);
	ck_assert_int_eq(r2v_cm_unpack(w, sizeof(w), &u), 0);
	ck_assert_mem_eq(&m, &u, sizeof(m));
	ck_assert_int_eq(w[196], 1);
	ck_assert_int_eq(w[212], 0xa0);
	/* READY needs no QPNs */
	m.type = R2V_CM_READY;
	memset(m.qpn, 0, sizeof(m.qpn));
	memset(m.psn, 0, sizeof(m.psn));
	ck_assert_int_eq(r2v_cm_pack(&m, w), R2V_CM_SIZE);
	ck_assert_int_eq(r2v_cm_unpack(w, sizeof(w), &u), 0);
	ck_assert_int_eq(u.type, R2V_CM_READY);
}
END_TEST

/* every single-field corruption is refused */
START_TEST(cm_validation)
{
	uint8_t w[R2V_CM_SIZE], c[R2V_CM_SIZE];
	struct r2v_cm_msg m = good(), u;
	ck_assert_int_eq(r2v_cm_pack(&m, w), R2V_CM_SIZE);
	ck_assert_int_eq(r2v_cm_unpack(w, sizeof(w) - 1, &u), -EPROTO);
	ck_assert_int_eq(r2v_cm_unpack(NULL, sizeof(w), &u), -EPROTO);
	struct { int off; uint8_t v; } bad[] = {
		{ 0, 0 },      /* magic */
		{ 4, 1 },      /* version 1 (before the side channel's proofs) */
		{ 6, 0 },      /* type 0 */
		{ 6, 5 },      /* type 5 */
		{ 8, 0 },      /* nqps 0 */
		{ 8, 17 },     /* nqps 17 */
		{ 14, 0 },     /* mtu 0 */
		{ 14, 6 },     /* mtu 6 */
		{ 18, 0 },     /* slot_size 65536 -> 0 */
		{ 19, 0xff },  /* slot_size huge */
		{ 20, 0 },     /* max_msg (1 MiB: byte 22) stays; see below */
		{ 64 + 3, 1 }, /* qpn 25 bits */
		{ 128 + 3, 1 },/* psn 25 bits */
		{ 64 + 8, 5 }, /* qpn[2] set past nqps */
		{ 192, 2 },    /* an unknown flag */
		{ 194, 1 },    /* reserved after the flags */
		{ 250, 1 },    /* reserved after the MAC */
	};
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (bad[i].off == 20)
			continue;
		memcpy(c, w, sizeof(c));
		c[bad[i].off] = bad[i].v;
		ck_assert_msg(r2v_cm_unpack(c, sizeof(c), &u) == -EPROTO, "offset %d", bad[i].off);
	}
	/* max_msg 0 */
	memcpy(c, w, sizeof(c));
	memset(c + 20, 0, 4);
	ck_assert_int_eq(r2v_cm_unpack(c, sizeof(c), &u), -EPROTO);
	/* self == dst */
	memcpy(c, w, sizeof(c));
	memcpy(c + 32, c + 24, 8);
	ck_assert_int_eq(r2v_cm_unpack(c, sizeof(c), &u), -EPROTO);
	/* qpn 0 in a HELLO */
	memcpy(c, w, sizeof(c));
	memset(c + 64, 0, 4);
	ck_assert_int_eq(r2v_cm_unpack(c, sizeof(c), &u), -EPROTO);
	/* pack refuses what unpack would */
	m.nqps = 0;
	ck_assert_int_eq(r2v_cm_pack(&m, w), -EINVAL);
	m = good();
	m.qpn[0] = 1u << 24;
	ck_assert_int_eq(r2v_cm_pack(&m, w), -EINVAL);
	/* random bytes never crash and almost never pass */
	srand(1);
	int passed = 0;
	for (int k = 0; k < 20000; k++) {
		for (int i = 0; i < R2V_CM_SIZE; i++)
			c[i] = (uint8_t)rand();
		passed += r2v_cm_unpack(c, sizeof(c), &u) == 0;
	}
	ck_assert_int_eq(passed, 0);
}
END_TEST

/* The side channel's proofs (docs/security.md): the acceptor's REPLY and the
 * dialer's READY each prove the cluster key over both HELLO and REPLY. */
static void cm_exchange(const char *key, struct r2v_cm_msg *h, struct r2v_cm_msg *r,
			struct r2v_cm_msg *y)
{
	size_t kl = key ? strlen(key) : 0;

	*h = good();
	h->flags = kl ? R2V_CM_F_AUTH : 0;
	memset(h->chal, 0x11, sizeof(h->chal));
	*r = good();
	r->type = R2V_CM_REPLY;
	r->self_id = 22;
	r->dst_id = 11;
	r->qpn[0] = 40;
	r->flags = h->flags;
	memset(r->chal, 0x22, sizeof(r->chal));
	if (kl)
		r2v_cm_mac((const uint8_t *)key, kl, R2V_CM_REPLY, h, r, r->mac);
	*y = *h;
	y->type = R2V_CM_READY;
	memset(y->qpn, 0, sizeof(y->qpn));
	memset(y->psn, 0, sizeof(y->psn));
	memset(y->chal, 0, sizeof(y->chal));
	if (kl)
		r2v_cm_mac((const uint8_t *)key, kl, R2V_CM_READY, h, r, y->mac);
}

START_TEST(cm_proofs)
{
	const uint8_t *K = (const uint8_t *)"cluster key";
	const size_t KL = strlen("cluster key");
	struct r2v_cm_msg h, r, y, x;

	/* the right key: both proofs check out, and they differ (no reflection) */
	cm_exchange("cluster key", &h, &r, &y);
	ck_assert_int_eq(r2v_cm_check_mac(K, KL, &h, &r, &r), 0);
	ck_assert_int_eq(r2v_cm_check_mac(K, KL, &h, &r, &y), 0);
	ck_assert(memcmp(r.mac, y.mac, R2V_CM_MAC) != 0);
	x = y;
	memcpy(x.mac, r.mac, R2V_CM_MAC); /* the acceptor's proof sent back */
	ck_assert_int_eq(r2v_cm_check_mac(K, KL, &h, &r, &x), -EACCES);
	/* another key */
	cm_exchange("another key", &h, &r, &y);
	ck_assert_int_eq(r2v_cm_check_mac(K, KL, &h, &r, &r), -EACCES);
	ck_assert_int_eq(r2v_cm_check_mac(K, KL, &h, &r, &y), -EACCES);
	/* no key on the other side, or the flag without a key here */
	cm_exchange(NULL, &h, &r, &y);
	ck_assert_int_eq(r2v_cm_check_mac(K, KL, &h, &r, &y), -EACCES);
	ck_assert_int_eq(r2v_cm_check_mac(NULL, 0, &h, &r, &y), 0);
	cm_exchange("cluster key", &h, &r, &y);
	ck_assert_int_eq(r2v_cm_check_mac(NULL, 0, &h, &r, &y), -EACCES);
	/* a proof is bound to every field of both messages: a replayed READY
	 * fails against a new challenge, and so does a changed QP number */
	x = r;
	x.chal[0] ^= 1;
	ck_assert_int_eq(r2v_cm_check_mac(K, KL, &h, &x, &y), -EACCES);
	x = h;
	x.qpn[1]++;
	ck_assert_int_eq(r2v_cm_check_mac(K, KL, &x, &r, &r), -EACCES);
	x = h;
	x.self_id = 33;
	ck_assert_int_eq(r2v_cm_check_mac(K, KL, &x, &r, &y), -EACCES);
	/* the flag cleared on a right MAC */
	x = y;
	x.flags = 0;
	ck_assert_int_eq(r2v_cm_check_mac(K, KL, &h, &r, &x), -EACCES);
}
END_TEST

/* The daemon's choice of provider (rails.c): a netdev without an RDMA port
 * (lo never has one) is -ENODEV for the probe and for open (the rail then
 * uses tcp); a malformed R2CCL_IB_HCA filter is -EINVAL before any device
 * is looked at. */
START_TEST(no_rdma_port)
{
	char dev[64] = "unchanged";
	int port = -1;
	struct r2_tp_config cfg = { .ifname = "lo", .rail = 0, .self_id = 1 };
	struct r2_tp *tp = (struct r2_tp *)&cfg;

	unsetenv("R2CCL_IB_HCA");
	cfg.addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(r2_verbs_probe("lo", NULL, dev, sizeof(dev), &port), -ENODEV);
	ck_assert_str_eq(dev, "unchanged");
	ck_assert_int_eq(port, -1);
	ck_assert_int_eq(r2_verbs_probe("no-such-netdev0", "", dev, sizeof(dev), &port), -ENODEV);
	ck_assert_int_eq(r2_verbs_probe("lo", "mlx5_0:x", dev, sizeof(dev), &port), -EINVAL);
	ck_assert_int_eq(r2_tp_verbs_ops.open(&cfg, &tp), -ENODEV);
	ck_assert_ptr_null(tp);
	snprintf(cfg.ib_hca, sizeof(cfg.ib_hca), "rxe0:1x");
	ck_assert_int_eq(r2_tp_verbs_ops.open(&cfg, &tp), -EINVAL);
	ck_assert_ptr_null(tp);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("verbs");
	TCase *tc = tcase_create("util");
	tcase_add_test(tc, wc_classes);
	tcase_add_test(tc, gid_choice);
	tcase_add_test(tc, mtu);
	tcase_add_test(tc, qp_transitions);
	tcase_add_test(tc, cm_roundtrip);
	tcase_add_test(tc, cm_validation);
	tcase_add_test(tc, cm_proofs);
	tcase_add_test(tc, no_rdma_port);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	int nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
