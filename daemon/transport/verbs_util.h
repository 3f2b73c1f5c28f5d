/* SPDX-License-Identifier: MIT */
/*
 * The verbs provider's logic that needs no device (pure functions, unit
 * tested in tests/unit/test_verbs.c): completion status classification, GID
 * choice, QP state transition attributes, MTU conversions, and the side
 * channel's connection message (pack/unpack with validation).
 *
 * It uses libibverbs' types and constants (infiniband/verbs.h) but calls no
 * ibv_* function. r2_verbs_probe() at the end is the exception: it is
 * implemented in verbs_dev.c (it opens devices) and declared here for the
 * provider's probe and its unit test.
 */
#ifndef R2CCL_VERBS_UTIL_H
#define R2CCL_VERBS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

/* ---- completion status ---- */

enum r2v_wc_class {
	R2V_WC_OK = 0,
	R2V_WC_RETRY,   /* transport retries exhausted: peer/link unreachable */
	R2V_WC_RNR,     /* receiver not ready retries exhausted */
	R2V_WC_FLUSH,   /* flushed: a consequence of an earlier error */
	R2V_WC_REMOTE,  /* the remote side refused (access, invalid request, op error) */
	R2V_WC_LOCAL,   /* local protection/length/QP error: a bug or a bad buffer */
	R2V_WC_FATAL,   /* device fatal / unknown */
};

enum r2v_wc_class r2v_wc_classify(enum ibv_wc_status st);
/* The negative errno reported with R2_TPC_ERROR / a failed R2_TPC_SEND:
 * OK 0, RETRY -ETIMEDOUT, RNR -EBUSY, FLUSH -ECONNABORTED, REMOTE -ECONNREFUSED,
 * LOCAL -EIO, FATAL -ENODEV. */
int r2v_wc_errno(enum ibv_wc_status st);
const char *r2v_wc_class_name(enum r2v_wc_class c);

/* ---- GID choice ---- */

enum r2v_gid_type { R2V_GID_IB = 0, R2V_GID_ROCE_V1 = 1, R2V_GID_ROCE_V2 = 2 };

struct r2v_gid_ent {
	int index;
	int type;             /* enum r2v_gid_type */
	uint8_t gid[16];
	uint32_t ndev_ifindex; /* 0: none / unknown */
};

/* True if gid is an IPv4-mapped address (::ffff:a.b.c.d); *ipv4 (network
 * order) gets the address. */
bool r2v_gid_ipv4(const uint8_t gid[16], uint32_t *ipv4);
/* Chooses the GID index for a rail whose IPv4 address is ipv4 (network
 * order; 0: any). Preference: RoCE v2 with that IPv4 address, then RoCE v1
 * with it, then (ipv4 == 0 only) the first RoCE v2 IPv4 entry; for an IB
 * port (ib true) the first IB entry (index 0 normally). Entries with an
 * all-zero GID are ignored. Returns the index or -ENOENT. */
int r2v_gid_choose(const struct r2v_gid_ent *ents, int n, uint32_t ipv4, bool ib);
/* "RoCE v2" / "IB/RoCE v1" (the sysfs gid_attrs/types text) -> type, -1 unknown */
int r2v_gid_type_parse(const char *s, bool ib_port);

/* ---- MTU ---- */

/* IBV_MTU_256..4096 -> bytes; 0 for an invalid value */
int r2v_mtu_bytes(enum ibv_mtu m);
/* largest IBV_MTU_* not above bytes; 0 if bytes < 256 */
enum ibv_mtu r2v_mtu_from_bytes(int bytes);
bool r2v_mtu_valid(int m);
/* path MTU for a connection: the smaller of both ends, never above the
 * RoCE netdev MTU when netdev_mtu > 0 */
enum ibv_mtu r2v_mtu_path(enum ibv_mtu local, enum ibv_mtu remote, int netdev_mtu);

/* ---- QP transitions (RC) ---- */

struct r2v_rtr_params {
	uint32_t dest_qpn, rq_psn;
	enum ibv_mtu mtu;
	uint8_t port;
	bool global;          /* GRH (RoCE always; IB across subnets) */
	uint8_t dgid[16];
	int sgid_index;
	uint16_t dlid;
	uint8_t traffic_class, sl, hop_limit;
};
/* Each fills *attr (zeroed first) and returns the ibv_modify_qp mask. */
int r2v_qp_init_attr(struct ibv_qp_attr *attr, uint8_t port, unsigned access);
int r2v_qp_rtr_attr(struct ibv_qp_attr *attr, const struct r2v_rtr_params *p);
int r2v_qp_rts_attr(struct ibv_qp_attr *attr, uint32_t sq_psn, int timeout, int retry_cnt,
		    int rnr_retry);

/* ---- side channel connection message ---- */

#define R2V_CM_MAGIC 0x4d435632u /* "2VCM" */
#define R2V_CM_VERSION 2
#define R2V_MAX_QPS 16
#define R2V_CM_SIZE 256 /* bytes on the wire, every message */
#define R2V_CM_CHAL 16
#define R2V_CM_MAC 32
#define R2V_CM_F_AUTH 0x1 /* the message carries a cluster key proof */

/*
 * The exchange (docs/security.md, "The peer port"): the dialer's HELLO (its
 * QPs and a challenge), the acceptor's REPLY (its QPs, its own challenge and
 * a proof over both messages), the dialer's READY (its proof over the same),
 * the acceptor's UP once its QPs are ready to receive. The acceptor changes
 * nothing (no peer replaced, no QP made ready) before READY's proof checks
 * out; the dialer trusts nothing before REPLY's.
 */
enum r2v_cm_type { R2V_CM_HELLO = 1, R2V_CM_REPLY = 2, R2V_CM_READY = 3, R2V_CM_UP = 4 };

struct r2v_cm_msg {
	uint16_t type;        /* enum r2v_cm_type */
	uint16_t nqps;        /* 1..R2V_MAX_QPS */
	uint16_t rail;
	uint16_t lid;
	uint8_t mtu;          /* enum ibv_mtu (active MTU of the sender's port) */
	uint8_t link_layer;   /* IBV_LINK_LAYER_* */
	uint16_t flags;       /* R2V_CM_F_* */
	uint32_t slot_size;   /* the sender's receive slot bytes (fragment size) */
	uint32_t max_msg;     /* largest payload the sender accepts */
	uint64_t self_id, dst_id, nonce;
	uint8_t gid[16];
	uint32_t qpn[R2V_MAX_QPS];
	uint32_t psn[R2V_MAX_QPS];
	uint8_t chal[R2V_CM_CHAL]; /* HELLO, REPLY: the sender's random challenge */
	uint8_t mac[R2V_CM_MAC];   /* REPLY, READY: the proof (zero without a key) */
};

/* Little-endian; out has R2V_CM_SIZE bytes. Returns R2V_CM_SIZE or -EINVAL
 * (a message unpack would refuse). */
int r2v_cm_pack(const struct r2v_cm_msg *m, uint8_t *out);
/* Validates everything: magic, version, type, nqps 1..16, mtu 1..5, qpn and
 * psn 24-bit and qpn != 0 (HELLO/REPLY), slot_size 4 KiB..64 MiB, max_msg
 * != 0, self_id != dst_id. 0 or -EPROTO. */
int r2v_cm_unpack(const uint8_t *in, size_t len, struct r2v_cm_msg *m);
/* The proof of prover (R2V_CM_REPLY or R2V_CM_READY) over the HELLO and the
 * REPLY (their mac fields left out) with the cluster key. */
void r2v_cm_mac(const uint8_t *key, size_t keylen, int prover, const struct r2v_cm_msg *hello,
		const struct r2v_cm_msg *reply, uint8_t mac[R2V_CM_MAC]);
/* Whether m (the REPLY or the READY of that exchange) carries the right flag
 * and proof for the key (keylen 0: none, peer_auth = off). 0 or -EACCES. */
int r2v_cm_check_mac(const uint8_t *key, size_t keylen, const struct r2v_cm_msg *hello,
		     const struct r2v_cm_msg *reply, const struct r2v_cm_msg *m);

/* ---- the verbs provider's device probe (verbs_dev.c) ---- */

/* Whether an RDMA device port is bound to the netdev ifname (RoCE: a GID
 * of the port has that netdev; IB: /sys/class/net/IF/device/infiniband/)
 * and passes the ib_hca filter hca (NULL/empty: any). dev (devlen bytes) and port get it. 0, -ENODEV, or <0. */
int r2_verbs_probe(const char *ifname, const char *hca, char *dev, size_t devlen, int *port);

#endif
