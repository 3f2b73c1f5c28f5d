// SPDX-License-Identifier: MIT
/* The seed corpus of the harnesses (seeds.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/comm.h"
#include "framing.h"
#include "host.h"
#include "net/rails.h"
#include "peer.pb-c.h"
#include "r2ccl.pb-c.h"
#include "ring.h"
#include "seeds.h"

void fz_buf_put(struct fz_buf *b, const void *p, size_t len)
{
	if (b->len + len > b->cap) {
		b->cap = (b->len + len) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		FZ_CHECK(b->p);
	}
	if (len)
		memcpy(b->p + b->len, p, len);
	b->len += len;
}

void fz_buf_free(struct fz_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

int fz_buf_save(const struct fz_buf *b, const char *dir, const char *name)
{
	char path[4096];
	int fd, r = 0;

	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, b->p, b->len) != (ssize_t)b->len)
		r = -EIO;
	close(fd);
	return r;
}

/* ---- fuzz_frame ---- */

/* One frame: header (with nfds) and the packed message. */
static void frame(struct fz_buf *b, uint16_t type, const void *msg, uint16_t nfds)
{
	const ProtobufCMessage *m = msg;
	size_t len = m ? protobuf_c_message_get_packed_size(m) : 0;
	struct r2_frame_hdr h = { R2_FRAME_MAGIC, type, nfds, (uint32_t)len, 0 };
	uint8_t *p = malloc(len + 1);

	FZ_CHECK(p);
	if (m)
		protobuf_c_message_pack(m, p);
	fz_buf_put(b, &h, sizeof(h));
	fz_buf_put(b, p, len);
	free(p);
}

static void hello(struct fz_buf *b, uint32_t version, bool control_only)
{
	R2ccl__Hello m = R2CCL__HELLO__INIT;

	m.proto_version = version;
	m.client_name = "seed";
	m.lib_version = "0.1.0";
	m.control_only = control_only;
	frame(b, R2CCL__MSG_TYPE__MSG_HELLO, &m, 0);
}

static void comm_init(struct fz_buf *b, const struct r2_uid *uid, uint32_t nranks, uint32_t rank,
		      const char *mode, uint32_t share)
{
	R2ccl__CommInit m = R2CCL__COMM_INIT__INIT;

	m.req_id = 10 + rank;
	m.id.data = (uint8_t *)uid;
	m.id.len = sizeof(*uid);
	m.nranks = nranks;
	m.rank = rank;
	m.mode = (char *)mode;
	m.share = share;
	frame(b, R2CCL__MSG_TYPE__MSG_COMM_INIT, &m, 0);
}

static void mem_register(struct fz_buf *b, uint64_t size)
{
	R2ccl__MemRegister m = R2CCL__MEM_REGISTER__INIT;

	m.req_id = 3;
	m.size = size;
	frame(b, R2CCL__MSG_TYPE__MSG_MEM_REGISTER, &m, 1);
}

static int save(struct fz_buf *b, const char *dir, const char *name)
{
	int r = fz_buf_save(b, dir, name);

	fz_buf_free(b);
	return r;
}

int fz_seeds_frame(struct r2d *d, const char *dir)
{
	struct fz_buf b = { 0 };
	struct r2_uid uid;
	uint8_t mode;
	int r = 0;

	memset(&uid, 0, sizeof(uid));
	uid.magic = R2_UID_MAGIC;
	uid.version = 1;
	uid.host_id = d->host_id;
	uid.nonce = 0x5eed;
	r2d_uid_fill(d, &uid);

	/* a one-rank communicator: unique id, init, reason, destroy */
	mode = 0;
	fz_buf_put(&b, &mode, 1);
	hello(&b, R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT, false);
	{
		R2ccl__GetUniqueId m = R2CCL__GET_UNIQUE_ID__INIT;
		m.req_id = 1;
		frame(&b, R2CCL__MSG_TYPE__MSG_GET_UNIQUE_ID, &m, 0);
	}
	comm_init(&b, &uid, 1, 0, "", 0);
	{
		R2ccl__CommReason m = R2CCL__COMM_REASON__INIT;
		m.req_id = 20;
		m.comm_id = 1 << 16;
		frame(&b, R2CCL__MSG_TYPE__MSG_COMM_REASON, &m, 0);
	}
	{
		R2ccl__CommDestroy m = R2CCL__COMM_DESTROY__INIT;
		m.req_id = 21;
		m.comm_id = 1 << 16;
		frame(&b, R2CCL__MSG_TYPE__MSG_COMM_DESTROY, &m, 0);
	}
	r |= save(&b, dir, "comm_one_rank");

	/* two ranks of one communicator from one session of a user (shared) */
	mode = 1;
	fz_buf_put(&b, &mode, 1);
	hello(&b, R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT, false);
	uid.nonce++;
	comm_init(&b, &uid, 2, 1, "hotrepair", 1);
	comm_init(&b, &uid, 2, 0, "hotrepair", 1);
	r |= save(&b, dir, "comm_two_ranks_user");

	/* a communicator rooted on another daemon: the bootstrap dials it */
	mode = 0;
	fz_buf_put(&b, &mode, 1);
	hello(&b, R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT, false);
	uid.nonce++;
	uid.host_id = 0x2000;
	comm_init(&b, &uid, 4, 2, "balance", 0);
	r |= save(&b, dir, "comm_remote_root");

	/* memory: register a sealed memfd, deregister it */
	mode = 0;
	fz_buf_put(&b, &mode, 1);
	hello(&b, R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT, false);
	mem_register(&b, 65536);
	{
		R2ccl__MemDeregister m = R2CCL__MEM_DEREGISTER__INIT;
		m.req_id = 4;
		m.mem_id = 1;
		frame(&b, R2CCL__MSG_TYPE__MSG_MEM_DEREGISTER, &m, 0);
	}
	r |= save(&b, dir, "mem_register");

	/* a sparse memfd (mode's fd kind 3), refused */
	mode = 3 << 1;
	fz_buf_put(&b, &mode, 1);
	hello(&b, R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT, false);
	mem_register(&b, 1 << 20);
	r |= save(&b, dir, "mem_sparse");

	/* GPU registrations (refused without CUDA, but parsed and checked) */
	mode = 0;
	fz_buf_put(&b, &mode, 1);
	hello(&b, R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT, false);
	{
		static uint8_t handle[64], dev[16];
		R2ccl__MemRegisterGpu m = R2CCL__MEM_REGISTER_GPU__INIT;
		m.req_id = 5;
		m.kind = 1;
		m.ipc_handle.data = handle;
		m.ipc_handle.len = sizeof(handle);
		m.device_uuid.data = dev;
		m.device_uuid.len = sizeof(dev);
		m.alloc_base = 0x7f0000000000;
		m.alloc_size = 1 << 21;
		m.offset = 4096;
		m.size = 65536;
		frame(&b, R2CCL__MSG_TYPE__MSG_MEM_REGISTER_GPU, &m, 0);
		m.kind = 2;
		m.ipc_handle.len = 0;
		frame(&b, R2CCL__MSG_TYPE__MSG_MEM_REGISTER_GPU_FD, &m, 1);
	}
	r |= save(&b, dir, "mem_gpu");

	/* r2cclctl: status, rails, events, rebalance, drain and undrain */
	mode = 1;
	fz_buf_put(&b, &mode, 1);
	hello(&b, R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT, true);
	{
		R2ccl__StatusRequest st = R2CCL__STATUS_REQUEST__INIT;
		R2ccl__RailsRequest ra = R2CCL__RAILS_REQUEST__INIT;
		R2ccl__EventsRequest ev = R2CCL__EVENTS_REQUEST__INIT;
		R2ccl__Rebalance rb = R2CCL__REBALANCE__INIT;
		R2ccl__NicAdmin na = R2CCL__NIC_ADMIN__INIT;
		frame(&b, R2CCL__MSG_TYPE__MSG_STATUS, &st, 0);
		frame(&b, R2CCL__MSG_TYPE__MSG_RAILS, &ra, 0);
		ev.max = 10;
		frame(&b, R2CCL__MSG_TYPE__MSG_EVENTS, &ev, 0);
		frame(&b, R2CCL__MSG_TYPE__MSG_REBALANCE, &rb, 0);
		na.nic = "lb0";
		na.drain = true;
		frame(&b, R2CCL__MSG_TYPE__MSG_NIC_ADMIN, &na, 0);
		na.drain = false;
		frame(&b, R2CCL__MSG_TYPE__MSG_NIC_ADMIN, &na, 0);
	}
	r |= save(&b, dir, "ctl_requests");
	mode = 0; /* the same as root */
	fz_buf_put(&b, &mode, 1);
	hello(&b, R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT, true);
	{
		R2ccl__NicAdmin na = R2CCL__NIC_ADMIN__INIT;
		R2ccl__StatusRequest st = R2CCL__STATUS_REQUEST__INIT;
		na.nic = "lb0";
		na.drain = true;
		frame(&b, R2CCL__MSG_TYPE__MSG_NIC_ADMIN, &na, 0);
		frame(&b, R2CCL__MSG_TYPE__MSG_STATUS, &st, 0);
		na.drain = false;
		frame(&b, R2CCL__MSG_TYPE__MSG_NIC_ADMIN, &na, 0);
	}
	r |= save(&b, dir, "ctl_root_drain");

	/* the ring: memory and a one-rank communicator, then SQEs (mode bit 3)
	 * whose ~0 ids the harness replaces by the ones the daemon gave */
	for (int two = 0; two < 2; two++) {
		struct r2_sqe q[3];
		uint8_t n = 3;
		memset(q, 0, sizeof(q));
		for (int i = 0; i < 3; i++) {
			q[i].tag = 1 + (uint64_t)i;
			q[i].comm_id = UINT32_MAX;
			q[i].count = 1024;
			q[i].dtype = R2CCL_FLOAT32;
			q[i].redop = R2CCL_SUM;
			q[i].send_mem = q[i].recv_mem = UINT32_MAX;
			q[i].recv_off = 16384;
		}
		q[0].opcode = R2_OP_ALLREDUCE;
		q[1].opcode = R2_OP_BROADCAST;
		q[2].opcode = R2_OP_ALLGATHER;
		q[2].count = 256;
		mode = 8;
		fz_buf_put(&b, &mode, 1);
		fz_buf_put(&b, &n, 1);
		hello(&b, R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT, false);
		mem_register(&b, 65536);
		uid.host_id = d->host_id;
		uid.nonce++;
		comm_init(&b, &uid, two ? 2 : 1, 0, "", 0);
		fz_buf_put(&b, q, sizeof(q));
		r |= save(&b, dir, two ? "ring_rank_alone" : "ring_collectives");
	}

	/* a protocol version this daemon does not speak */
	mode = 0;
	fz_buf_put(&b, &mode, 1);
	hello(&b, 999, false);
	r |= save(&b, dir, "hello_bad_version");

	/* a frame announced longer than the pre-hello cap */
	mode = 0;
	fz_buf_put(&b, &mode, 1);
	{
		struct r2_frame_hdr h = { R2_FRAME_MAGIC, R2CCL__MSG_TYPE__MSG_HELLO, 0, 1 << 20,
					  0 };
		fz_buf_put(&b, &h, sizeof(h));
		fz_buf_put(&b, "partial", 7);
	}
	r |= save(&b, dir, "prehello_long_frame");
	return r;
}

/* ---- fuzz_peer ---- */

/* One message of fuzz_peer's list: ctl, header, payload. */
static void peer_msg(struct fz_buf *b, uint8_t ctl, struct r2_chunk_hdr h, const void *payload)
{
	fz_buf_put(b, &ctl, 1);
	fz_buf_put(b, &h, sizeof(h));
	fz_buf_put(b, payload, h.len);
}

/* A control message (R2_MSG_CTRL, aux the PeerMsg type) from the peer. */
static void peer_ctrl(struct fz_buf *b, uint8_t ctl, uint32_t type, const void *msg)
{
	const ProtobufCMessage *m = msg;
	struct r2_chunk_hdr h = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_CTRL, .aux = type };
	uint8_t *p;

	h.len = m ? (uint32_t)protobuf_c_message_get_packed_size(m) : 0;
	p = malloc(h.len + 1);
	FZ_CHECK(p);
	if (m)
		protobuf_c_message_pack(m, p);
	peer_msg(b, ctl, h, p);
	free(p);
}

static void rail_addrs(struct r2d *d, R2peer__RailAddr *ra, R2peer__RailAddr **rap, size_t *n)
{
	*n = 0;
	for (int r = 0; r < d->rails->n && r < 2; r++) {
		r2peer__rail_addr__init(&ra[r]);
		ra[r].rail = (uint32_t)r;
		ra[r].ipv4 = d->rails->rail[r].addr.s_addr;
		ra[r].port = d->rails->rail[r].port;
		rap[r] = &ra[r];
		(*n)++;
	}
}

int fz_seeds_peer(struct r2d *root, struct r2d *peer, struct r2d *other, const struct r2_uid *uid,
		  uint64_t key, const struct r2_uid *juid, uint64_t tcp_id, const char *dir)
{
	ProtobufCBinaryData ub = { sizeof(*uid), (uint8_t *)uid };
	R2peer__RailAddr ra[2], *rap[2];
	struct fz_buf b = { 0 };
	uint8_t mode;
	int r = 0;

	/* bootstrap: JOIN of host 1's rank, MEMBERSHIP, JOIN_FAIL, ABORT */
	mode = 0;
	fz_buf_put(&b, &mode, 1);
	{
		R2peer__Join j = R2PEER__JOIN__INIT;
		uint32_t ranks[1] = { 1 };
		j.uid = ub;
		j.host_id = peer->host_id;
		j.nranks = 2;
		j.ranks = ranks;
		j.n_ranks = 1;
		rail_addrs(peer, ra, rap, &j.n_addrs);
		j.addrs = rap;
		j.hostname = "fuzz1";
		j.mode = "balance";
		peer_ctrl(&b, 4, R2PEER__PEER_MSG__PEER_JOIN, &j);
	}
	r |= save(&b, dir, "join");
	fz_buf_put(&b, &mode, 1);
	{
		R2peer__Membership m = R2PEER__MEMBERSHIP__INIT;
		R2peer__HostEntry he[2], *hep[2];
		R2peer__RailAddr ra2[2], *rap2[2];
		m.uid = ub;
		m.nranks = 2;
		m.mode = "hotrepair";
		for (int i = 0; i < 2; i++) {
			r2peer__host_entry__init(&he[i]);
			he[i].host_id = i ? peer->host_id : root->host_id;
			he[i].first_rank = (uint32_t)i;
			he[i].nlocal = 1;
			he[i].hostname = i ? "fuzz1" : "fuzz0";
			hep[i] = &he[i];
		}
		rail_addrs(root, ra, rap, &he[0].n_addrs);
		he[0].addrs = rap;
		rail_addrs(peer, ra2, rap2, &he[1].n_addrs);
		he[1].addrs = rap2;
		m.hosts = hep;
		m.n_hosts = 2;
		peer_ctrl(&b, 4, R2PEER__PEER_MSG__PEER_MEMBERSHIP, &m);
	}
	r |= save(&b, dir, "membership");

	/* the membership of the communicator rooted at C that A waits in (mode
	 * bit 1; sent from C: ctl bit 3) */
	mode = 2;
	fz_buf_put(&b, &mode, 1);
	{
		ProtobufCBinaryData jb = { sizeof(*juid), (uint8_t *)juid };
		R2peer__Membership m = R2PEER__MEMBERSHIP__INIT;
		R2peer__HostEntry he[2], *hep[2];
		R2peer__RailAddr ra2[2], *rap2[2];
		m.uid = jb;
		m.nranks = 2;
		for (int i = 0; i < 2; i++) {
			r2peer__host_entry__init(&he[i]);
			he[i].host_id = i ? root->host_id : other->host_id;
			he[i].first_rank = (uint32_t)i;
			he[i].nlocal = 1;
			he[i].hostname = i ? "fuzz0" : "fuzz2";
			hep[i] = &he[i];
		}
		rail_addrs(other, ra, rap, &he[0].n_addrs);
		he[0].addrs = rap;
		rail_addrs(root, ra2, rap2, &he[1].n_addrs);
		he[1].addrs = rap2;
		m.hosts = hep;
		m.n_hosts = 2;
		peer_ctrl(&b, 4 | 8, R2PEER__PEER_MSG__PEER_MEMBERSHIP, &m);
		struct fz_buf mb = { 0 };
		fz_buf_put(&mb, b.p + 1, b.len - 1); /* the membership alone */
		/* then a chunk of it (ctl bit 4: its key) */
		struct r2_chunk_hdr h = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_DATA,
					  .opseq = 1, .src = 0, .dst = 1, .len = 64 };
		static uint8_t zeros[64];
		peer_msg(&b, 2 | 4 | 8 | 16, h, zeros);
		r |= save(&b, dir, "membership_from_c");

		/* the membership, then C (host 0, the coordinator) commits a
		 * plan view: one of 2 rails per host (the right shape), and one
		 * of 2^28 rails, which made A allocate 4 GiB for it */
		for (int big = 0; big < 2; big++) {
			R2peer__PlanView v = R2PEER__PLAN_VIEW__INIT;
			uint32_t down[1] = { 3 };
			fz_buf_put(&b, &mode, 1);
			fz_buf_put(&b, mb.p, mb.len);
			v.uid = jb;
			v.epoch = 1;
			v.start_opseq = 1;
			v.nrails = big ? 1u << 28 : 2;
			v.down_nics = down;
			v.n_down_nics = 1;
			peer_ctrl(&b, 4 | 8, R2PEER__PEER_MSG__PEER_VIEW_COMMIT, &v);
			r |= save(&b, dir, big ? "regress-view-commit-huge-nrails" : "view_commit");
		}
		fz_buf_free(&mb);
	}
	mode = 0;
	fz_buf_put(&b, &mode, 1);
	{
		R2peer__JoinFail f = R2PEER__JOIN_FAIL__INIT;
		R2peer__Abort a = R2PEER__ABORT__INIT;
		f.uid = ub;
		f.status = R2CCL_E_BOOTSTRAP;
		f.error = "seed: join failed";
		peer_ctrl(&b, 4, R2PEER__PEER_MSG__PEER_JOIN_FAIL, &f);
		a.uid = ub;
		a.status = R2CCL_E_PEER_GONE;
		a.error = "seed: aborted";
		a.host_id = peer->host_id;
		peer_ctrl(&b, 5, R2PEER__PEER_MSG__PEER_ABORT, &a);
	}
	r |= save(&b, dir, "join_fail_abort");

	/* health: a rail event, the plan view exchange, a bridged heartbeat */
	fz_buf_put(&b, &mode, 1);
	{
		R2peer__RailEvent e = R2PEER__RAIL_EVENT__INIT;
		e.host_id = peer->host_id;
		e.rail = 1;
		e.state = 2;
		e.peer_host = root->host_id;
		e.cause = "seed: link down";
		e.seq = 1;
		peer_ctrl(&b, 4, R2PEER__PEER_MSG__PEER_RAIL_EVENT, &e);
		e.peer_host = 0;
		e.state = 1;
		e.bw = 1000000;
		e.seq = 2;
		peer_ctrl(&b, 5, R2PEER__PEER_MSG__PEER_RAIL_EVENT, &e);
		e.state = 0;
		e.seq = 3;
		peer_ctrl(&b, 4, R2PEER__PEER_MSG__PEER_RAIL_EVENT, &e);
	}
	r |= save(&b, dir, "rail_events");
	fz_buf_put(&b, &mode, 1);
	{
		R2peer__PlanView v = R2PEER__PLAN_VIEW__INIT;
		uint32_t down[1] = { 3 };
		uint64_t bw[4] = { 0, 0, 0, 1000000 };
		v.uid = ub;
		v.epoch = 1;
		v.nrails = 2;
		v.down_nics = down;
		v.n_down_nics = 1;
		v.nic_bw = bw;
		v.n_nic_bw = 4;
		peer_ctrl(&b, 4, R2PEER__PEER_MSG__PEER_VIEW_REQUEST, &v);
		peer_ctrl(&b, 4, R2PEER__PEER_MSG__PEER_VIEW_PROPOSE, &v);
		v.started = 0;
		peer_ctrl(&b, 4, R2PEER__PEER_MSG__PEER_VIEW_ACK, &v);
		v.start_opseq = 1;
		peer_ctrl(&b, 4, R2PEER__PEER_MSG__PEER_VIEW_COMMIT, &v);
		peer_ctrl(&b, 4 | 8, R2PEER__PEER_MSG__PEER_ALIVE, NULL);
	}
	r |= save(&b, dir, "plan_views");

	/* heartbeats: a request, an answer, a warm-up message */
	fz_buf_put(&b, &mode, 1);
	{
		static uint8_t zeros[4096];
		struct r2_chunk_hdr h = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_HEARTBEAT };
		peer_msg(&b, 0, h, NULL);
		h.flags = 1;
		h.off = 1;
		peer_msg(&b, 1, h, NULL);
		h.flags = 2;
		h.len = sizeof(zeros);
		peer_msg(&b, 0, h, zeros);
	}
	r |= save(&b, dir, "heartbeats");

	/* chunks of the communicator while an AllReduce runs (mode bit 0):
	 * data, its acknowledgement, a chunk through a detour */
	mode = 1;
	fz_buf_put(&b, &mode, 1);
	{
		static float data[256];
		struct r2_chunk_hdr h = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_DATA,
					  .comm = key, .opseq = 1, .src = 1, .dst = 0,
					  .len = sizeof(data) };
		for (int i = 0; i < 256; i++)
			data[i] = (float)i;
		peer_msg(&b, 6, h, data);
		h.chunk = 1;
		h.off = sizeof(data);
		peer_msg(&b, 7, h, data);
		h.kind = R2_MSG_ACK;
		h.len = 0;
		h.aux = sizeof(data);
		h.src = 0;
		h.dst = 1;
		peer_msg(&b, 6, h, NULL);
		h.kind = R2_MSG_DATA;
		h.flags = 0x1; /* R2_CHUNK_DETOUR */
		h.src = 1;
		h.dst = 2;
		h.len = sizeof(data);
		peer_msg(&b, 6, h, data);
		h.kind = R2_MSG_ACK;
		h.flags = 0x1 | 0x4; /* DETOUR | DELIVERED */
		h.len = 0;
		peer_msg(&b, 6, h, NULL);
	}
	r |= save(&b, dir, "chunks_during_allreduce");

	/* a TCP stream: the hello of tcp_wire.h, a heartbeat, a control message */
	mode = 0x80;
	fz_buf_put(&b, &mode, 1);
	{
		struct {
			uint32_t magic;
			uint16_t version, stream, nstreams, rail;
			uint32_t max_msg;
			uint64_t self_id, dst_id, nonce;
		} hello = { 0x48435432u, 1, 0, 1, 0, 1 << 20, peer->host_id, tcp_id, 42 };
		struct r2_chunk_hdr h = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_HEARTBEAT };
		R2peer__Abort a = R2PEER__ABORT__INIT;
		uint8_t p[256];
		_Static_assert(sizeof(hello) == 40, "tcp_wire.h's hello");
		fz_buf_put(&b, &hello, sizeof(hello));
		fz_buf_put(&b, &h, sizeof(h));
		a.uid = ub;
		a.status = R2CCL_E_PEER_GONE;
		a.error = "seed";
		h.kind = R2_MSG_CTRL;
		h.aux = R2PEER__PEER_MSG__PEER_ABORT;
		h.len = (uint32_t)r2peer__abort__pack(&a, p);
		fz_buf_put(&b, &h, sizeof(h));
		fz_buf_put(&b, p, h.len);
	}
	r |= save(&b, dir, "tcp_stream");
	return r;
}
