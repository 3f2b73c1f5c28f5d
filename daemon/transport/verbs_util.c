// SPDX-License-Identifier: MIT
/* The verbs provider's pure functions (see verbs_util.h). No ibv_* calls. */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "hmac_sha256.h"
#include "verbs_util.h"

enum r2v_wc_class r2v_wc_classify(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_SUCCESS:
		return R2V_WC_OK;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RESP_TIMEOUT_ERR:
		return R2V_WC_RETRY;
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return R2V_WC_RNR;
	case IBV_WC_WR_FLUSH_ERR:
		return R2V_WC_FLUSH;
	case IBV_WC_REM_ACCESS_ERR:
	case IBV_WC_REM_INV_REQ_ERR:
	case IBV_WC_REM_OP_ERR:
	case IBV_WC_REM_ABORT_ERR:
	case IBV_WC_REM_INV_RD_REQ_ERR:
	case IBV_WC_INV_EECN_ERR:
	case IBV_WC_INV_EEC_STATE_ERR:
		return R2V_WC_REMOTE;
	case IBV_WC_LOC_LEN_ERR:
	case IBV_WC_LOC_QP_OP_ERR:
	case IBV_WC_LOC_EEC_OP_ERR:
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_MW_BIND_ERR:
	case IBV_WC_BAD_RESP_ERR:
	case IBV_WC_LOC_ACCESS_ERR:
	case IBV_WC_LOC_RDD_VIOL_ERR:
	case IBV_WC_TM_ERR:
	case IBV_WC_TM_RNDV_INCOMPLETE:
		return R2V_WC_LOCAL;
	case IBV_WC_FATAL_ERR:
	case IBV_WC_GENERAL_ERR:
	default:
		return R2V_WC_FATAL;
	}
}

int r2v_wc_errno(enum ibv_wc_status st)
{
	switch (r2v_wc_classify(st)) {
	case R2V_WC_OK:
		return 0;
	case R2V_WC_RETRY:
		return -ETIMEDOUT;
	case R2V_WC_RNR:
		return -EBUSY;
	case R2V_WC_FLUSH:
		return -ECONNABORTED;
	case R2V_WC_REMOTE:
		return -ECONNREFUSED;
	case R2V_WC_LOCAL:
		return -EIO;
	case R2V_WC_FATAL:
	default:
		return -ENODEV;
	}
}

const char *r2v_wc_class_name(enum r2v_wc_class c)
{
	static const char *const n[] = { "ok", "retry-exceeded", "rnr-retry-exceeded", "flushed",
					 "remote", "local", "fatal" };
	return (unsigned)c < sizeof(n) / sizeof(n[0]) ? n[c] : "?";
}

bool r2v_gid_ipv4(const uint8_t gid[16], uint32_t *ipv4)
{
	static const uint8_t pre[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	if (memcmp(gid, pre, sizeof(pre)))
		return false;
	if (ipv4)
		memcpy(ipv4, gid + 12, 4);
	return true;
}

static bool gid_zero(const uint8_t gid[16])
{
	for (int i = 0; i < 16; i++)
		if (gid[i])
			return false;
	return true;
}

int r2v_gid_choose(const struct r2v_gid_ent *ents, int n, uint32_t ipv4, bool ib)
{
	int best = -ENOENT, best_rank = 0;

	if (!ents || n <= 0)
		return -ENOENT;
	for (int i = 0; i < n; i++) {
		const struct r2v_gid_ent *e = &ents[i];
		uint32_t a;
		int rank = 0;
		if (e->index < 0 || gid_zero(e->gid))
			continue;
		if (ib) {
			if (e->type == R2V_GID_IB)
				rank = 1;
		} else if (r2v_gid_ipv4(e->gid, &a)) {
			if (ipv4 && a == ipv4)
				rank = e->type == R2V_GID_ROCE_V2 ? 4 : e->type == R2V_GID_ROCE_V1 ? 3 : 0;
			else if (!ipv4 && e->type == R2V_GID_ROCE_V2)
				rank = 2;
		}
		/* the lowest index wins among equals */
		if (rank > best_rank || (rank && rank == best_rank && e->index < best)) {
			best_rank = rank;
			best = e->index;
		}
	}
	return best;
}

int r2v_gid_type_parse(const char *s, bool ib_port)
{
	if (!s)
		return -1;
	if (!strncmp(s, "RoCE v2", 7))
		return R2V_GID_ROCE_V2;
	if (!strncmp(s, "IB/RoCE v1", 10))
		return ib_port ? R2V_GID_IB : R2V_GID_ROCE_V1;
	return -1;
}

int r2v_mtu_bytes(enum ibv_mtu m)
{
	return r2v_mtu_valid((int)m) ? 128 << (int)m : 0;
}

bool r2v_mtu_valid(int m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096;
}

enum ibv_mtu r2v_mtu_from_bytes(int bytes)
{
	int m = 0;
	for (int k = IBV_MTU_256; k <= IBV_MTU_4096; k++)
		if ((128 << k) <= bytes)
			m = k;
	return (enum ibv_mtu)m;
}

enum ibv_mtu r2v_mtu_path(enum ibv_mtu local, enum ibv_mtu remote, int netdev_mtu)
{
	int m = (int)local < (int)remote ? (int)local : (int)remote;
	if (!r2v_mtu_valid(m))
		m = IBV_MTU_1024;
	if (netdev_mtu > 0) {
		/* RoCE: the IB MTU must fit in the Ethernet MTU with the
		 * headers (IP/UDP/BTH/ICRC: about 80 bytes). */
		enum ibv_mtu n = r2v_mtu_from_bytes(netdev_mtu - 80);
		if (n && (int)n < m)
			m = (int)n;
		if (!n)
			m = IBV_MTU_256;
	}
	return (enum ibv_mtu)m;
}

int r2v_qp_init_attr(struct ibv_qp_attr *attr, uint8_t port, unsigned access)
{
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = IBV_QPS_INIT;
	attr->pkey_index = 0;
	attr->port_num = port;
	attr->qp_access_flags = access;
	return IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
}

int r2v_qp_rtr_attr(struct ibv_qp_attr *attr, const struct r2v_rtr_params *p)
{
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = IBV_QPS_RTR;
	attr->path_mtu = p->mtu;
	attr->dest_qp_num = p->dest_qpn & 0xffffff;
	attr->rq_psn = p->rq_psn & 0xffffff;
	attr->max_dest_rd_atomic = 1;
	attr->min_rnr_timer = 12; /* 0.64 ms */
	attr->ah_attr.port_num = p->port;
	attr->ah_attr.dlid = p->dlid;
	attr->ah_attr.sl = p->sl;
	attr->ah_attr.src_path_bits = 0;
	if (p->global) {
		attr->ah_attr.is_global = 1;
		memcpy(attr->ah_attr.grh.dgid.raw, p->dgid, 16);
		attr->ah_attr.grh.sgid_index = (uint8_t)p->sgid_index;
		attr->ah_attr.grh.hop_limit = p->hop_limit ? p->hop_limit : 64;
		attr->ah_attr.grh.traffic_class = p->traffic_class;
		attr->ah_attr.grh.flow_label = 0;
	}
	return IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
	       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
}

int r2v_qp_rts_attr(struct ibv_qp_attr *attr, uint32_t sq_psn, int timeout, int retry_cnt,
		    int rnr_retry)
{
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = IBV_QPS_RTS;
	attr->sq_psn = sq_psn & 0xffffff;
	attr->timeout = (uint8_t)(timeout < 0 ? 0 : timeout > 31 ? 31 : timeout);
	attr->retry_cnt = (uint8_t)(retry_cnt < 0 ? 0 : retry_cnt > 7 ? 7 : retry_cnt);
	attr->rnr_retry = (uint8_t)(rnr_retry < 0 ? 0 : rnr_retry > 7 ? 7 : rnr_retry);
	attr->max_rd_atomic = 1;
	return IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
	       IBV_QP_MAX_QP_RD_ATOMIC;
}

/* ---- connection message ----
 * offset size field
 *  0 4 magic        4 2 version    6 2 type       8 2 nqps     10 2 rail
 * 12 2 lid         14 1 mtu       15 1 link_layer 16 4 slot_size 20 4 max_msg
 * 24 8 self_id     32 8 dst_id    40 8 nonce     48 16 gid
 * 64 4*16 qpn     128 4*16 psn    = 192
 */
static void put16(uint8_t *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

static int cm_check(const struct r2v_cm_msg *m)
{
	if (m->type < R2V_CM_HELLO || m->type > R2V_CM_UP || (m->flags & ~R2V_CM_F_AUTH))
		return -1;
	if (m->nqps < 1 || m->nqps > R2V_MAX_QPS)
		return -1;
	if (!r2v_mtu_valid(m->mtu))
		return -1;
	if (m->slot_size < 4096 || m->slot_size > (64u << 20))
		return -1;
	if (!m->max_msg || m->self_id == m->dst_id)
		return -1;
	for (int i = 0; i < R2V_MAX_QPS; i++) {
		if (m->qpn[i] > 0xffffff || m->psn[i] > 0xffffff)
			return -1;
		if (i < m->nqps && (m->type == R2V_CM_HELLO || m->type == R2V_CM_REPLY) &&
		    m->qpn[i] == 0)
			return -1;
	}
	return 0;
}

int r2v_cm_pack(const struct r2v_cm_msg *m, uint8_t *out)
{
	if (!m || !out || cm_check(m))
		return -EINVAL;
	memset(out, 0, R2V_CM_SIZE);
	put32(out + 0, R2V_CM_MAGIC);
	put16(out + 4, R2V_CM_VERSION);
	put16(out + 6, m->type);
	put16(out + 8, m->nqps);
	put16(out + 10, m->rail);
	put16(out + 12, m->lid);
	out[14] = m->mtu;
	out[15] = m->link_layer;
	put32(out + 16, m->slot_size);
	put32(out + 20, m->max_msg);
	put64(out + 24, m->self_id);
	put64(out + 32, m->dst_id);
	put64(out + 40, m->nonce);
	memcpy(out + 48, m->gid, 16);
	for (int i = 0; i < R2V_MAX_QPS; i++) {
		put32(out + 64 + 4 * i, i < m->nqps ? m->qpn[i] : 0);
		put32(out + 128 + 4 * i, i < m->nqps ? m->psn[i] : 0);
	}
	put16(out + 192, m->flags); /* 194..195 and 244..255 stay zero */
	memcpy(out + 196, m->chal, R2V_CM_CHAL);
	memcpy(out + 212, m->mac, R2V_CM_MAC);
	return R2V_CM_SIZE;
}

int r2v_cm_unpack(const uint8_t *in, size_t len, struct r2v_cm_msg *m)
{
	if (!in || !m || len != R2V_CM_SIZE)
		return -EPROTO;
	memset(m, 0, sizeof(*m));
	if (get32(in) != R2V_CM_MAGIC || get16(in + 4) != R2V_CM_VERSION)
		return -EPROTO;
	m->type = get16(in + 6);
	m->nqps = get16(in + 8);
	m->rail = get16(in + 10);
	m->lid = get16(in + 12);
	m->mtu = in[14];
	m->link_layer = in[15];
	m->slot_size = get32(in + 16);
	m->max_msg = get32(in + 20);
	m->self_id = get64(in + 24);
	m->dst_id = get64(in + 32);
	m->nonce = get64(in + 40);
	memcpy(m->gid, in + 48, 16);
	for (int i = 0; i < R2V_MAX_QPS; i++) {
		m->qpn[i] = get32(in + 64 + 4 * i);
		m->psn[i] = get32(in + 128 + 4 * i);
		/* entries past nqps must be zero */
		if (i >= m->nqps && (m->qpn[i] || m->psn[i]))
			return -EPROTO;
	}
	m->flags = get16(in + 192);
	memcpy(m->chal, in + 196, R2V_CM_CHAL);
	memcpy(m->mac, in + 212, R2V_CM_MAC);
	if (get16(in + 194))
		return -EPROTO;
	for (int i = 244; i < R2V_CM_SIZE; i++)
		if (in[i])
			return -EPROTO;
	return cm_check(m) ? -EPROTO : 0;
}

void r2v_cm_mac(const uint8_t *key, size_t keylen, int prover, const struct r2v_cm_msg *hello,
		const struct r2v_cm_msg *reply, uint8_t mac[R2V_CM_MAC])
{
	struct r2v_cm_msg a = *hello, b = *reply;
	uint8_t pa[R2V_CM_SIZE], pb[R2V_CM_SIZE];

	memset(a.mac, 0, sizeof(a.mac));
	memset(b.mac, 0, sizeof(b.mac));
	/* both were unpacked or are about to be sent: they pack */
	if (r2v_cm_pack(&a, pa) < 0 || r2v_cm_pack(&b, pb) < 0) {
		memset(mac, 0, R2V_CM_MAC);
		return;
	}
	r2_hmac_proof(key, keylen, "r2ccl verbs cm v2", (uint8_t)prover, pa, sizeof(pa), pb,
		      sizeof(pb), mac);
}

int r2v_cm_check_mac(const uint8_t *key, size_t keylen, const struct r2v_cm_msg *hello,
		     const struct r2v_cm_msg *reply, const struct r2v_cm_msg *m)
{
	uint8_t want[R2V_CM_MAC];

	if (keylen)
		r2v_cm_mac(key, keylen, m->type, hello, reply, want);
	return r2_proof_check(keylen, m->flags & R2V_CM_F_AUTH, want, m->mac);
}
