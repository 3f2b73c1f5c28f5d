/* SPDX-License-Identifier: MIT */
/*
 * The verbs provider's private header: its objects (device, rail instance,
 * peer, QP, side-channel socket, message) and what its files share. The
 * provider: verbs.c (instance, progress, operation table; its header comment
 * describes the whole), verbs_dev.c (devices, ports, async events), verbs_qp.c
 * (peers and QPs), verbs_data.c (send and receive paths), verbs_cm.c (the TCP
 * side channel that exchanges QPs); verbs_util.c (pure functions).
 */
#ifndef R2CCL_VERBS_INT_H
#define R2CCL_VERBS_INT_H

#include <arpa/inet.h>
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "config.h"
#include "log.h"
#include "nicfilter.h"
#include "tp_common.h"
#include "transport.h"
#include "verbs_util.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#define HDR_SIZE R2_TP_HDR_SIZE
#define V_DEFAULT_QPS 2
#define V_DEFAULT_TIMEOUT 14    /* 4.096 us << 14 = 67 ms per try */
#define V_DEFAULT_RETRY 7
#define V_DEFAULT_SLOT (64u << 10)
#define V_DEFAULT_RDEPTH 256
#define V_DEFAULT_SDEPTH 64
#define V_DEFAULT_MAX_MSG (64u << 20)
#define V_DEFAULT_MAX_QUEUED (64ull << 20)
#define V_DEFAULT_TIMEOUT_MS 5000u
#define V_POST_BATCH 32
#define V_POLL_BATCH 32
#define V_QP_BUCKETS 1024
#define V_RECV_TAG (1ull << 63)
#define V_HEAP_MAGIC 0x56324842u
#define V_HEAP_HDR 64u

enum { OBJ_WAKE = 1, OBJ_LISTEN, OBJ_SOCK, OBJ_CHAN };
enum { ROLE_DIAL = 1, ROLE_ACCEPT };
enum { S_DIALING = 1, S_WAIT_HELLO, S_WAIT_REPLY, S_WAIT_READY, S_WAIT_UP, S_UP };

struct r2_tp;

struct vdev {
	struct vdev *next;
	char name[IBV_SYSFS_NAME_MAX];
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int refs;
	int stop_fd;
	pthread_t tid;
	bool started;
	struct r2_tp *tps; /* rails on this device (g_lock) */
};

struct vmsg {
	struct vmsg *next;
	struct r2_chunk_hdr hdr;  /* host order */
	struct r2_chunk_hdr wire; /* little-endian */
	const uint8_t *buf;
	uint32_t len;
	uint32_t lkey;
	bool zc;                  /* payload in registered memory */
	bool hdr_posted;
	uint32_t posted;          /* payload bytes posted */
	uint64_t ctx;
};

struct vrec {
	uint64_t seq;
	struct vmsg *m;
	int slot;  /* send slot, -1 none */
	bool last;
};

struct vpeer;

struct vqp {
	struct vqp *hnext;
	struct r2_tp *tp;
	struct vpeer *peer;
	struct ibv_qp *qp;
	uint32_t qpn, psn;
	int idx;
	atomic_bool fatal;
	uint8_t *hdrs;
	struct ibv_mr *hmr;
	struct vmsg *tq_head, *tq_tail;
	uint64_t queued;
	struct vrec *ring;
	uint32_t depth, r_head, r_cnt;
	uint64_t seq;
	/* reassembly */
	bool rx_active;
	struct r2_chunk_hdr rx_hdr;
	uint8_t *rx_buf;
	uint32_t rx_got;
};

struct vsock {
	int kind;
	struct vsock *next; /* tp->socks */
	int fd;
	int state;
	struct vpeer *peer;
	bool dead;
	uint64_t deadline;
	uint8_t rx[R2V_CM_SIZE];
	uint32_t rx_got;
	uint8_t tx[2 * R2V_CM_SIZE];
	uint32_t tx_len, tx_done;
	bool want_out;
	/* the exchange so far: the proofs cover both messages */
	struct r2v_cm_msg hs_hello, hs_reply;
	/* acceptor: counted in tp->prehello until READY's proof checks out */
	bool prehello;
	struct in_addr raddr;
};

struct vpeer {
	struct r2_tp_peer h;  /* first: id, table, list (tp->b.peers) */
	struct vpeer *dnext;  /* tp->dead */
	uint64_t nonce;
	int role;
	bool conn_reported;
	int fail_status;
	struct vsock *sock;
	int nqps;
	uint32_t rslot, max_msg; /* the peer's */
	unsigned rr;
	uint64_t queued;
	struct vqp *qps[R2V_MAX_QPS];
};

struct r2_tp {
	struct r2_tp_base b; /* first: tp_common.h */
	struct r2_tp_config cfg;
	struct vdev *dev;
	struct r2_tp *dnext;
	uint8_t port;
	int link_layer;
	enum ibv_mtu active_mtu;
	uint16_t lid;
	int gid_index;
	uint8_t gid[16];
	int netdev_mtu;
	atomic_bool port_event, dev_fatal, qp_event;
	atomic_int port_err; /* 1: PORT_ERR seen (until ACTIVE) */

	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	int cq_size;
	struct ibv_srq *srq;
	uint32_t slot;
	int rdepth;
	uint8_t *rslab;
	struct ibv_mr *rmr;
	int rslots;
	int *rspare;
	int rspare_n;
	uint8_t *sslab;
	struct ibv_mr *smr;
	int sslots;
	int *sfree;
	int sfree_n;
	int tx_out, tx_cap;

	int lfd, wfd, epfd;
	int listen_kind, wake_kind, chan_kind;
	pthread_t tid;
	bool started;
	atomic_bool stop;

	/* b.lock: peers, QPs, side channel sockets */
	struct vpeer *dead; /* failed peers waiting for the reaper (dnext chain) */
	struct vqp *qbuckets[V_QP_BUCKETS];
	struct vsock *socks;
	unsigned prehello; /* accepted side channels before READY's proof */


	pthread_mutex_t pool_lock; /* rspare */

	pthread_mutex_t reg_lock;
	struct vreg *regs;

	/* payload bytes sent straight from memory registered with reg_mem
	 * (zero copy) and copied into the send slots (logged at close) */
	_Atomic uint64_t tx_zc_bytes, tx_copy_bytes;
};

struct vreg {
	struct vreg *next;
	uintptr_t addr;
	size_t len;
	struct ibv_mr *mr;
};

extern pthread_mutex_t v_devs_lock; /* the devices and their rails */

/* verbs_dev.c: devices, ports, async events */
void v_dev_put(struct vdev *d);
int v_open_port(struct r2_tp *tp, char *devname, size_t devlen);
int verbs_probe(const struct r2_tp_config *cfg, struct r2_tp_choice *c);

/* verbs_qp.c: peers and QPs (under tp->b.lock) */
void v_peer_fail(struct r2_tp *tp, struct vpeer *p, int status, bool report);
void v_peer_fail_hook(struct r2_tp *tp, struct r2_tp_peer *p, int status, bool report);
struct vpeer *v_peer_find(struct r2_tp *tp, uint64_t id);
int v_peer_make_qps(struct r2_tp *tp, struct vpeer *p);
struct vpeer *v_peer_new(struct r2_tp *tp, uint64_t id, int role, int nqps, uint64_t nonce);
/* The same, not in the peer table (an acceptor's before the dialer's proof:
 * r2_tp_peer_insert when it checks out). */
struct vpeer *v_peer_alloc(uint64_t id, int role, int nqps, uint64_t nonce);
int v_peer_qps_rts(struct r2_tp *tp, struct vpeer *p, const struct r2v_cm_msg *rm);
struct vqp *v_qp_find(struct r2_tp *tp, uint32_t qpn);
void v_reap(struct r2_tp *tp);

/* verbs_data.c: buffers, completions, send and receive paths */
void v_complete_send(struct r2_tp *tp, struct vqp *q, struct vmsg *m, int status);
void v_cq_release(void *arg, void *buf);
int v_drain_cq(struct r2_tp *tp);
void v_heap_put(void *buf);
int v_open_queues(struct r2_tp *tp);
void v_push_simple(struct r2_tp *tp, int type, int status, struct vpeer *p);
int verbs_dereg_mem(struct r2_tp *tp, void *handle);
int verbs_post_send(struct r2_tp *tp, uint64_t peer_id, const struct r2_chunk_hdr *hdr,
		     const void *buf, uint64_t ctx);
int verbs_reg_mem(struct r2_tp *tp, void *addr, size_t len, void **handle);
void verbs_release(struct r2_tp *tp, void *buf);

/* verbs_cm.c: the side channel */
void v_on_listen(struct r2_tp *tp);
void v_on_sock(struct r2_tp *tp, struct vsock *s, uint32_t ev);
int v_open_side_channel(struct r2_tp *tp);
void v_sock_fail(struct r2_tp *tp, struct vsock *s, int status);
int verbs_connect(struct r2_tp *tp, uint64_t peer_id, struct in_addr addr, uint16_t port);

#endif
