/* SPDX-License-Identifier: MIT */
/*
 * Multi-host bootstrap (loop thread).
 *
 * The unique id names the root daemon (the one rank 0's process asked) and
 * every one of its rail addresses, so no single NIC is needed to reach it.
 * A daemon whose local ranks join a communicator rooted elsewhere connects to
 * the root on every rail it shares with it and sends JOIN (its host id, the
 * global ranks it holds, its rail addresses); it re-sends JOIN as more local
 * ranks arrive. When the root has every rank, it checks them (each host holds
 * a contiguous block of ranks, the same count on every host; no rank twice;
 * the same nranks everywhere), orders the hosts by first rank and sends the
 * MEMBERSHIP to every daemon. Each daemon then connects to every other on
 * every rail, and the communicator becomes ready once those connections are
 * up. Any failure is told to every daemon (JOIN_FAIL) and every rank gets the
 * error; a host that never joins ends in the bootstrap timeout on every rank.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm.h"
#include "config.h"
#include "net/health.h"
#include "log.h"
#include "peer.pb-c.h"
#include "net/rails.h"
#include "util.h"

void r2d_uid_fill(struct r2d *d, struct r2_uid *uid)
{
	struct r2_rails *rs = d->rails;

	uid->naddrs = 0;
	for (int i = 0; rs && i < rs->n && i < 8; i++) {
		uid->addrs[uid->naddrs] = rs->rail[i].addr.s_addr;
		uid->ports[uid->naddrs] = rs->rail[i].port;
		uid->naddrs++;
	}
}

static void fill_addrs(struct r2d *d, R2peer__RailAddr *ra, R2peer__RailAddr **rap, size_t *n)
{
	struct r2_rails *rs = d->rails;

	*n = 0;
	for (int i = 0; rs && i < rs->n; i++) {
		r2peer__rail_addr__init(&ra[i]);
		ra[i].rail = (uint32_t)i;
		ra[i].ipv4 = rs->rail[i].addr.s_addr;
		ra[i].port = rs->rail[i].port;
		rap[i] = &ra[i];
		(*n)++;
	}
}

static int send_msg(struct r2d *d, uint64_t peer, uint32_t type, const ProtobufCMessage *m)
{
	size_t len = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(len ? len : 1);
	int r;

	if (!buf)
		return -ENOMEM;
	protobuf_c_message_pack(m, buf);
	r = r2d_rails_send_ctrl(d, peer, type, buf, (uint32_t)len);
	free(buf);
	return r;
}

/* Non-root: (re)send JOIN with every local rank. */
static void send_join(struct r2_comm *c)
{
	struct r2d *d = c->d;
	R2peer__Join j = R2PEER__JOIN__INIT;
	R2peer__RailAddr ra[R2_MAX_RAILS], *rap[R2_MAX_RAILS];
	uint32_t ranks[1024];
	size_t n = 0;
	int r;

	for (int i = 0; i < c->nranks && n < 1024; i++)
		if (c->m[i].local)
			ranks[n++] = (uint32_t)i;
	j.uid.data = (uint8_t *)&c->uid;
	j.uid.len = sizeof(c->uid);
	j.host_id = d->host_id;
	j.nranks = (uint32_t)c->nranks;
	j.n_ranks = n;
	j.ranks = ranks;
	fill_addrs(d, ra, rap, &j.n_addrs);
	j.addrs = rap;
	j.hostname = d->hostname;
	j.mode = (char *)r2d_comm_mode_name(c->mode);
	r = send_msg(d, c->uid.host_id, R2PEER__PEER_MSG__PEER_JOIN, &j.base);
	if (r == 0)
		c->joined_sent = true;
	else
		log_debug("communicator %u: JOIN to the root not sent yet: %s", c->id, strerror(-r));
}

static bool connected_to(struct r2d *d, uint64_t peer)
{
	struct r2_peer *p = d->rails ? r2d_rails_peer(d, peer, false) : NULL;

	return p && p->conn_mask;
}

/* A dial to the peer still under way on some rail (rails.c clears a rail's
 * want bit when its connection fails): one rail refusing fast (another
 * transport at the other end, a dead port) must not fail a JOIN that a
 * slower rail can still carry. */
static bool dialing_to(struct r2d *d, uint64_t peer)
{
	struct r2_peer *p = d->rails ? r2d_rails_peer(d, peer, false) : NULL;

	return p && (p->want_mask & ~p->conn_mask);
}

/* Every peer reachable on every rail it shares with us? */
#define BOOT_RAIL_GRACE_US 2000000ull

static void try_ready(struct r2_comm *c);

static bool all_connected(struct r2_comm *c)
{
	struct r2d *d = c->d;

	for (int h = 0; h < c->nhosts; h++) {
		struct r2_peer *p;
		uint32_t need = 0;
		if (h == c->my_host)
			continue;
		for (int a = 0; a < c->hosts[h].naddrs; a++) {
			int rail = r2d_rails_match(d, c->hosts[h].addr[a]);
			if (rail >= 0)
				need |= 1u << rail;
		}
		p = r2d_rails_peer(d, c->hosts[h].id, false);
		if (!need || !p || !(p->conn_mask & need))
			return false;
		/* every shared rail, or at least one once the grace time passed:
		 * a communicator formed while a NIC is down starts on the others */
		if ((p->conn_mask & need) != need &&
		    r2_now_us() - c->membership_us < BOOT_RAIL_GRACE_US)
			return false;
	}
	return true;
}

/* Loop tick: communicators waiting for connections (grace time). */
void r2d_bootstrap_tick(struct r2d *d)
{
	for (struct r2_comm *c = d->comms; c; c = c->next)
		if (c->state == R2_COMM_JOINING && c->have_membership)
			try_ready(c);
}

static void try_ready(struct r2_comm *c)
{
	if (c->state != R2_COMM_JOINING || !c->have_membership || !all_connected(c))
		return;
	r2d_comm_ready(c);
	r2d_comm_adopt_orphans(c); /* data that came before we were ready */
}

/* Tells host that c (uid) cannot be formed. */
static void join_fail_to(struct r2d *d, uint64_t host, ProtobufCBinaryData uid, int status,
			 const char *why)
{
	R2peer__JoinFail f = R2PEER__JOIN_FAIL__INIT;

	f.uid = uid;
	f.status = status;
	f.error = (char *)why;
	send_msg(d, host, R2PEER__PEER_MSG__PEER_JOIN_FAIL, &f.base);
}

static void fail_all(struct r2_comm *c, int status, const char *why)
{
	ProtobufCBinaryData uid = { sizeof(c->uid), (uint8_t *)&c->uid };
	uint64_t sent[256];
	int nsent = 0;

	for (int r = 0; r < c->nranks; r++) {
		uint64_t h = c->m[r].remote_host;
		bool dup = false;
		if (!h)
			continue;
		for (int i = 0; i < nsent; i++)
			dup |= sent[i] == h;
		if (dup || nsent >= 256)
			continue;
		sent[nsent++] = h;
		join_fail_to(c->d, h, uid, status, why);
	}
	r2d_comm_break(c, status, why);
}

void r2d_bootstrap_fail(struct r2_comm *c, int status, const char *why)
{
	if (c->uid.host_id == c->d->host_id) {
		fail_all(c, status, why);
		return;
	}
	if (c->joined_sent) {
		ProtobufCBinaryData uid = { sizeof(c->uid), (uint8_t *)&c->uid };
		join_fail_to(c->d, c->uid.host_id, uid, status, why);
	}
	r2d_comm_break(c, status, why);
}

/* Root: every rank present? Then check and publish the membership. */
static void root_check(struct r2_comm *c)
{
	struct r2d *d = c->d;
	int present = 0, nh = 0, per = -1;
	struct r2_host *hosts;
	char why[192];

	for (int r = 0; r < c->nranks; r++)
		present += c->m[r].local || c->m[r].remote_host;
	if (present < c->nranks || c->have_membership)
		return;
	hosts = calloc((size_t)c->nranks, sizeof(*hosts));
	c->rank_host = calloc((size_t)c->nranks, sizeof(int));
	if (!hosts || !c->rank_host) {
		free(hosts);
		fail_all(c, -ENOMEM, "out of memory");
		return;
	}
	/* hosts in order of first rank; each a contiguous block */
	for (int r = 0; r < c->nranks; r++) {
		uint64_t id = c->m[r].local ? d->host_id : c->m[r].remote_host;
		if (nh == 0 || hosts[nh - 1].id != id) {
			for (int h = 0; h < nh; h++) {
				if (hosts[h].id == id) {
					snprintf(why, sizeof(why),
						 "the ranks of host %016llx are not contiguous "
						 "(rank %d); give each host a block of ranks",
						 (unsigned long long)id, r);
					free(hosts);
					fail_all(c, R2CCL_E_BOOTSTRAP, why);
					return;
				}
			}
			hosts[nh].id = id;
			hosts[nh].first_rank = (uint32_t)r;
			nh++;
		}
		hosts[nh - 1].nlocal++;
		c->rank_host[r] = nh - 1;
	}
	for (int h = 0; h < nh; h++) {
		if (per < 0)
			per = (int)hosts[h].nlocal;
		if ((int)hosts[h].nlocal != per) {
			snprintf(why, sizeof(why),
				 "hosts hold different numbers of ranks (%d and %u); every host "
				 "must hold the same count",
				 per, hosts[h].nlocal);
			free(hosts);
			fail_all(c, R2CCL_E_BOOTSTRAP, why);
			return;
		}
	}
	/* addresses: ours from the rails, theirs from their JOIN (kept in hosts
	 * by handle_join through c->hosts of a previous partial state) */
	for (int h = 0; h < nh; h++) {
		if (hosts[h].id == d->host_id) {
			struct r2_rails *rs = d->rails;
			for (int i = 0; rs && i < rs->n; i++) {
				hosts[h].addr[i] = rs->rail[i].addr.s_addr;
				hosts[h].port[i] = rs->rail[i].port;
			}
			hosts[h].naddrs = rs ? rs->n : 0;
			snprintf(hosts[h].name, sizeof(hosts[h].name), "%s", d->hostname);
			c->my_host = h;
		} else {
			for (int k = 0; c->hosts && k < c->nhosts; k++) {
				if (c->hosts[k].id == hosts[h].id) {
					uint32_t fr = hosts[h].first_rank, nl = hosts[h].nlocal;
					hosts[h] = c->hosts[k];
					hosts[h].first_rank = fr;
					hosts[h].nlocal = nl;
				}
			}
		}
	}
	free(c->hosts);
	c->hosts = hosts;
	c->nhosts = nh;
	c->have_membership = true;
	c->membership_us = r2_now_us();
	log_info("communicator %u: all %d ranks present on %d hosts; publishing the membership",
		 c->id, c->nranks, nh);
	{
		R2peer__Membership m = R2PEER__MEMBERSHIP__INIT;
		R2peer__HostEntry *he = calloc((size_t)nh, sizeof(*he));
		R2peer__HostEntry **hep = calloc((size_t)nh, sizeof(*hep));
		R2peer__RailAddr *ra = calloc((size_t)nh * R2_COMM_MAX_RAILS, sizeof(*ra));
		R2peer__RailAddr **rap = calloc((size_t)nh * R2_COMM_MAX_RAILS, sizeof(*rap));

		if (!he || !hep || !ra || !rap) {
			free(he);
			free(hep);
			free(ra);
			free(rap);
			fail_all(c, -ENOMEM, "out of memory");
			return;
		}
		for (int h = 0; h < nh; h++) {
			r2peer__host_entry__init(&he[h]);
			he[h].host_id = hosts[h].id;
			he[h].first_rank = hosts[h].first_rank;
			he[h].nlocal = hosts[h].nlocal;
			he[h].hostname = hosts[h].name;
			for (int a = 0; a < hosts[h].naddrs; a++) {
				R2peer__RailAddr *x = &ra[h * R2_COMM_MAX_RAILS + a];
				r2peer__rail_addr__init(x);
				x->rail = (uint32_t)a;
				x->ipv4 = hosts[h].addr[a];
				x->port = hosts[h].port[a];
				rap[h * R2_COMM_MAX_RAILS + a] = x;
			}
			he[h].n_addrs = (size_t)hosts[h].naddrs;
			he[h].addrs = &rap[h * R2_COMM_MAX_RAILS];
			hep[h] = &he[h];
		}
		m.uid.data = (uint8_t *)&c->uid;
		m.uid.len = sizeof(c->uid);
		m.nranks = (uint32_t)c->nranks;
		m.mode = (char *)r2d_comm_mode_name(c->mode);
		m.n_hosts = (size_t)nh;
		m.hosts = hep;
		for (int h = 0; h < nh; h++)
			if (h != c->my_host)
				send_msg(d, hosts[h].id, R2PEER__PEER_MSG__PEER_MEMBERSHIP, &m.base);
		free(he);
		free(hep);
		free(ra);
		free(rap);
	}
	for (int h = 0; h < nh; h++)
		if (h != c->my_host)
			for (int a = 0; a < hosts[h].naddrs; a++)
				r2d_rails_connect(d, hosts[h].id, hosts[h].addr[a], hosts[h].port[a]);
	try_ready(c);
}

void r2d_bootstrap_joined(struct r2_comm *c)
{
	struct r2d *d = c->d;

	if (c->uid.host_id == d->host_id) {
		c->root_local = true;
		if (c->joined == c->nranks) { /* everyone is here: one host */
			c->nhosts = 1;
			c->have_membership = true;
	c->membership_us = r2_now_us();
			r2d_comm_ready(c);
			return;
		}
		root_check(c);
		return;
	}
	/* the root is elsewhere: reach it on every rail we share with it */
	for (uint32_t a = 0; a < c->uid.naddrs && a < 8; a++)
		r2d_rails_connect(d, c->uid.host_id, c->uid.addrs[a], c->uid.ports[a]);
	if (connected_to(d, c->uid.host_id))
		send_join(c);
}

static struct r2_comm *comm_for(struct r2d *d, ProtobufCBinaryData uid)
{
	struct r2_uid u;

	if (uid.len != sizeof(u))
		return NULL;
	memcpy(&u, uid.data, sizeof(u));
	return r2d_comm_by_uid(d, &u);
}

_Static_assert((int)R2_LEAVE_ABORT == (int)R2PEER__LEAVE_HOW__LEAVE_ABORT &&
		       (int)R2_LEAVE_DIED == (int)R2PEER__LEAVE_HOW__LEAVE_DIED,
	       "enum r2_leave is PEER_LEAVE's LeaveHow");

void r2d_bootstrap_leave(struct r2_comm *c, int rank, enum r2_leave how)
{
	R2peer__Leave l = R2PEER__LEAVE__INIT;

	l.uid.data = (uint8_t *)&c->uid;
	l.uid.len = sizeof(c->uid);
	l.host_id = c->d->host_id;
	l.rank = (uint32_t)rank;
	l.how = (R2peer__LeaveHow)how;
	l.coll_matched = c->coll_matched;
	uint64_t *sent = NULL;
	/* a destroy only: an abort or a death drops what is in flight */
	if (how == R2_LEAVE_DESTROY && c->m[rank].sent &&
	    (sent = calloc((size_t)c->nranks, sizeof(*sent)))) {
		for (int r = 0; r < c->nranks; r++)
			sent[r] = __atomic_load_n(&c->m[rank].sent[r], __ATOMIC_RELAXED);
		l.p2p_sent = sent;
		l.n_p2p_sent = (size_t)c->nranks;
	}
	for (int h = 0; h < c->nhosts; h++)
		if (h != c->my_host)
			send_msg(c->d, c->hosts[h].id, R2PEER__PEER_MSG__PEER_LEAVE, &l.base);
	free(sent);
}

/* PEER_LEAVE: a rank of the sending host left (r2d_bootstrap_leave). */
static void handle_leave(struct r2d *d, uint64_t from, const R2peer__Leave *l)
{
	struct r2_comm *c = comm_for(d, l->uid);
	char why[128];

	if (!c || c->state == R2_COMM_DEAD || c->state == R2_COMM_BROKEN || !c->have_membership ||
	    !c->rank_host || l->rank >= (uint32_t)c->nranks ||
	    (uint32_t)l->how > (uint32_t)R2PEER__LEAVE_HOW__LEAVE_DIED)
		return;
	/* only the rank's own daemon may say it left */
	if (from != l->host_id || c->hosts[c->rank_host[l->rank]].id != from) {
		log_warn_rl("PEER_LEAVE from %016llx for rank %u, which it does not hold; ignored",
			    (unsigned long long)from, l->rank);
		return;
	}
	if (l->how == R2PEER__LEAVE_HOW__LEAVE_DIED) {
		r2d_comm_leave_why((int)l->rank, c->hosts[c->rank_host[l->rank]].name, R2_LEAVE_DIED,
				   why, sizeof(why));
		r2d_comm_break(c, R2CCL_E_PEER_GONE, why);
	} else if (!c->m[l->rank].left) {
		log_info("communicator %u: rank %u on host %016llx left (%s)", c->id, l->rank,
			 (unsigned long long)from,
			 l->how == R2PEER__LEAVE_HOW__LEAVE_ABORT ? "abort" : "destroy");
		/* what it sent before: receives from it up to that still complete */
		if (l->n_p2p_sent == (size_t)c->nranks && !c->m[l->rank].sent &&
		    (c->m[l->rank].sent = calloc((size_t)c->nranks, sizeof(uint64_t))))
			memcpy(c->m[l->rank].sent, l->p2p_sent, (size_t)c->nranks * sizeof(uint64_t));
		r2d_comm_member_left(c, (int)l->rank, (enum r2_leave)l->how, l->coll_matched);
	}
}

/* Communicators a peer's JOIN makes at their root before any local rank
 * joins (a member's JOIN may come first): each holds a table of nranks
 * members until it forms or bootstrap_timeout_ms fails it, so a peer may
 * have at most R2_MAX(64, max_comms / 4) of them and 2^18 ranks in them at
 * a time here (a job that creates communicators back to back while this
 * host's ranks lag stays far below); beyond that its JOIN is refused
 * (JOIN_FAIL, quota). Found by tests/fuzz/fuzz_peer: JOINs of made-up ids
 * filled the communicator table and this host's own ranks were refused. */
#define BEGUN_RANKS_MAX (1u << 18)

static bool begun_ok(struct r2d *d, uint64_t from, uint32_t nranks, char *why, size_t len)
{
	uint32_t n = 0, cap = R2_MAX(64u, d->caps.comms / 4);
	uint64_t ranks = nranks;

	for (struct r2_comm *c = d->comms; c; c = c->next) {
		if (c->begun_by != from || !r2_comm_begun_waiting(c))
			continue;
		n++;
		ranks += (uint64_t)c->nranks;
	}
	if (n < cap && ranks <= BEGUN_RANKS_MAX)
		return true;
	snprintf(why, len,
		 "quota: peer %016llx has begun %u communicators on this root that no local "
		 "rank joined yet (%llu ranks; at most %u and %u)",
		 (unsigned long long)from, n, (unsigned long long)ranks, cap, BEGUN_RANKS_MAX);
	d->quota_refusals++;
	return false;
}

static void handle_join(struct r2d *d, uint64_t from, const R2peer__Join *j)
{
	struct r2_uid u;
	struct r2_comm *c;
	char why[192];

	if (j->uid.len != sizeof(u))
		return;
	memcpy(&u, j->uid.data, sizeof(u));
	if (u.magic != R2_UID_MAGIC || u.host_id != d->host_id) {
		log_warn("JOIN from %016llx for a communicator this daemon is not the root of",
			 (unsigned long long)j->host_id);
		return;
	}
	c = r2d_comm_by_uid(d, &u);
	if (!c) {
		/* the communicator failed here and was freed: a host that joins
		 * late hears the same error at once */
		int st = r2d_comm_tomb(d, &u, why, sizeof(why));
		if (st) {
			join_fail_to(d, j->host_id, j->uid, st, why);
			return;
		}
		if (j->nranks < 1 || j->nranks > 65536)
			return;
		if (!begun_ok(d, from, j->nranks, why, sizeof(why))) {
			log_warn_rl("JOIN from %016llx refused: %s", (unsigned long long)from, why);
			join_fail_to(d, from, j->uid, R2CCL_E_QUOTA, why);
			return;
		}
		c = r2d_comm_new(d, &u, (int)j->nranks, "");
		if (!c)
			return;
		c->root_local = true;
		c->begun_by = from;
	}
	if (c->state != R2_COMM_JOINING) {
		/* A member's JOIN sent again (one per rail that came up) is
		 * harmless; a host that is not a member joins a communicator that
		 * is already complete: its ranks are duplicates of ranks that are
		 * running. The job is misconfigured: every rank hears of it. */
		for (int h = 0; h < c->nhosts && c->hosts; h++)
			if (c->hosts[h].id == j->host_id)
				return;
		snprintf(why, sizeof(why),
			 "host %s joined communicator %u after it was complete: its ranks were "
			 "given twice",
			 j->hostname, c->id);
		join_fail_to(d, j->host_id, j->uid, R2CCL_E_DUP_RANK, why);
		if (c->state == R2_COMM_READY) {
			R2peer__Abort a = R2PEER__ABORT__INIT;
			a.uid = j->uid;
			a.status = R2CCL_E_DUP_RANK;
			a.error = why;
			a.host_id = d->host_id;
			for (int h = 0; h < c->nhosts; h++)
				if (h != c->my_host)
					send_msg(d, c->hosts[h].id, R2PEER__PEER_MSG__PEER_ABORT,
						 &a.base);
			r2d_comm_break(c, R2CCL_E_DUP_RANK, why);
		}
		return;
	}
	if ((int)j->nranks != c->nranks) {
		snprintf(why, sizeof(why), "host %s says nranks %u, others said %d", j->hostname,
			 j->nranks, c->nranks);
		c->m[0].remote_host = c->m[0].remote_host ? c->m[0].remote_host : 0;
		fail_all(c, R2CCL_E_MISMATCH, why);
		/* tell the sender too: it holds no rank yet in our table */
		join_fail_to(d, j->host_id, j->uid, R2CCL_E_MISMATCH, why);
		return;
	}
	if (j->mode && j->mode[0]) {
		int mode = r2d_comm_mode_parse(j->mode);
		if (mode < 0 || (c->mode >= 0 && mode != c->mode)) {
			snprintf(why, sizeof(why), "host %s asks for mode %.16s, others for %s",
				 j->hostname, j->mode, r2d_comm_mode_name(c->mode));
			join_fail_to(d, j->host_id, j->uid, R2CCL_E_MISMATCH, why);
			fail_all(c, R2CCL_E_MISMATCH, why);
			return;
		}
		c->mode = mode;
	}
	for (size_t i = 0; i < j->n_ranks; i++) {
		uint32_t r = j->ranks[i];
		if (r >= (uint32_t)c->nranks)
			continue;
		if (c->m[r].local || (c->m[r].remote_host && c->m[r].remote_host != j->host_id)) {
			snprintf(why, sizeof(why), "rank %u was given twice (hosts %016llx and %s)", r,
				 (unsigned long long)(c->m[r].local ? d->host_id
								    : c->m[r].remote_host),
				 j->hostname);
			join_fail_to(d, j->host_id, j->uid, R2CCL_E_DUP_RANK, why);
			fail_all(c, R2CCL_E_DUP_RANK, why);
			return;
		}
		c->m[r].remote_host = j->host_id;
	}
	/* remember its addresses (a partial host table until the membership) */
	{
		int k;
		for (k = 0; c->hosts && k < c->nhosts; k++)
			if (c->hosts[k].id == j->host_id)
				break;
		if (!c->hosts || k == c->nhosts) {
			struct r2_host *nh = realloc(c->hosts, sizeof(*nh) * (size_t)(c->nhosts + 1));
			if (!nh)
				return;
			c->hosts = nh;
			k = c->nhosts++;
			memset(&c->hosts[k], 0, sizeof(c->hosts[k]));
		}
		c->hosts[k].id = j->host_id;
		snprintf(c->hosts[k].name, sizeof(c->hosts[k].name), "%s", j->hostname);
		c->hosts[k].naddrs = 0;
		for (size_t a = 0; a < j->n_addrs && a < R2_COMM_MAX_RAILS; a++) {
			c->hosts[k].addr[a] = j->addrs[a]->ipv4;
			c->hosts[k].port[a] = (uint16_t)j->addrs[a]->port;
			c->hosts[k].naddrs++;
		}
	}
	root_check(c);
}

static void handle_membership(struct r2d *d, const R2peer__Membership *m)
{
	struct r2_comm *c = comm_for(d, m->uid);
	struct r2_host *hosts;
	int nh = (int)m->n_hosts;

	if (!c || c->state != R2_COMM_JOINING || c->have_membership || nh < 1 ||
	    (int)m->nranks != c->nranks)
		return;
	if (m->mode && m->mode[0] && r2d_comm_mode_parse(m->mode) != c->mode) {
		char why[128];
		snprintf(why, sizeof(why), "the root has mode %.16s, this host %s", m->mode,
			 r2d_comm_mode_name(c->mode));
		r2d_bootstrap_fail(c, R2CCL_E_MISMATCH, why);
		return;
	}
	hosts = calloc((size_t)nh, sizeof(*hosts));
	c->rank_host = calloc((size_t)c->nranks, sizeof(int));
	if (!hosts || !c->rank_host) {
		free(hosts);
		r2d_comm_break(c, -ENOMEM, "out of memory");
		return;
	}
	c->my_host = -1;
	for (int h = 0; h < nh; h++) {
		const R2peer__HostEntry *e = m->hosts[h];
		hosts[h].id = e->host_id;
		hosts[h].first_rank = e->first_rank;
		hosts[h].nlocal = e->nlocal;
		snprintf(hosts[h].name, sizeof(hosts[h].name), "%s", e->hostname);
		for (size_t a = 0; a < e->n_addrs && a < R2_COMM_MAX_RAILS; a++) {
			hosts[h].addr[a] = e->addrs[a]->ipv4;
			hosts[h].port[a] = (uint16_t)e->addrs[a]->port;
			hosts[h].naddrs++;
		}
		for (uint32_t r = e->first_rank;
		     r < e->first_rank + e->nlocal && r < (uint32_t)c->nranks; r++)
			c->rank_host[r] = h;
		if (e->host_id == d->host_id)
			c->my_host = h;
	}
	free(c->hosts);
	c->hosts = hosts;
	c->nhosts = nh;
	if (c->my_host < 0) {
		r2d_comm_break(c, R2CCL_E_BOOTSTRAP, "the membership does not list this host");
		return;
	}
	c->have_membership = true;
	c->membership_us = r2_now_us();
	for (int h = 0; h < nh; h++)
		if (h != c->my_host)
			for (int a = 0; a < hosts[h].naddrs; a++)
				r2d_rails_connect(d, hosts[h].id, hosts[h].addr[a], hosts[h].port[a]);
	log_info("communicator %u: membership received: %d hosts, this is host %d", c->id, nh,
		 c->my_host);
	try_ready(c);
}

void r2d_bootstrap_event(struct r2d *d, struct r2_loop_ev *ev)
{
	const struct r2_tp_cqe *q = &ev->cqe;

	if (q->type == R2_TPC_RECV && q->hdr.kind == R2_MSG_CTRL &&
	    q->hdr.aux >= R2PEER__PEER_MSG__PEER_RAIL_EVENT &&
	    q->hdr.aux <= R2PEER__PEER_MSG__PEER_ALIVE) {
		r2d_health_ctrl(d, ev); /* rail events, plan views, bridged heartbeats: health.c */
		return;
	}
	pthread_mutex_lock(&d->lock);
	if (q->type == R2_TPC_CONN) {
		for (struct r2_comm *c = d->comms; c; c = c->next) {
			if (c->state != R2_COMM_JOINING)
				continue;
			/* (re)send JOIN whenever a rail to the root comes up: the
			 * root merges it, and a JOIN lost with a dropped dial is
			 * sent again */
			if (!c->root_local && !c->have_membership && q->peer == c->uid.host_id)
				send_join(c);
			try_ready(c);
		}
	} else if (q->type == R2_TPC_ERROR) {
		for (struct r2_comm *c = d->comms; c; c = c->next) {
			if (c->state == R2_COMM_JOINING && !c->root_local &&
			    q->peer == c->uid.host_id && !connected_to(d, q->peer) &&
			    !dialing_to(d, q->peer) && !c->joined_sent) {
				char why[160];
				snprintf(why, sizeof(why),
					 "cannot reach the communicator's root daemon on any rail "
					 "(%s)",
					 strerror(-q->status));
				r2d_comm_break(c, R2CCL_E_BOOTSTRAP, why);
			}
		}
	} else if (q->type == R2_TPC_RECV && q->hdr.kind == R2_MSG_CTRL) {
		const uint8_t *p = q->buf;
		size_t len = q->hdr.len;
		switch (q->hdr.aux) {
		case R2PEER__PEER_MSG__PEER_JOIN: {
			R2peer__Join *j = r2peer__join__unpack(NULL, len, p);
			if (j) {
				handle_join(d, q->peer, j);
				r2peer__join__free_unpacked(j, NULL);
			}
			break;
		}
		case R2PEER__PEER_MSG__PEER_MEMBERSHIP: {
			R2peer__Membership *m = r2peer__membership__unpack(NULL, len, p);
			if (m) {
				handle_membership(d, m);
				r2peer__membership__free_unpacked(m, NULL);
			}
			break;
		}
		case R2PEER__PEER_MSG__PEER_JOIN_FAIL: {
			R2peer__JoinFail *f = r2peer__join_fail__unpack(NULL, len, p);
			struct r2_comm *c = f ? comm_for(d, f->uid) : NULL;
			/* the root passes a member's failure on to every other member */
			if (c && c->state == R2_COMM_JOINING && c->uid.host_id == d->host_id)
				fail_all(c, f->status < 0 ? f->status : R2CCL_E_BOOTSTRAP,
					 f->error);
			else if (c && c->state == R2_COMM_JOINING)
				r2d_comm_break(c, f->status < 0 ? f->status : R2CCL_E_BOOTSTRAP,
					       f->error);
			if (f)
				r2peer__join_fail__free_unpacked(f, NULL);
			break;
		}
		case R2PEER__PEER_MSG__PEER_LEAVE: {
			R2peer__Leave *l = r2peer__leave__unpack(NULL, len, p);
			if (l) {
				handle_leave(d, q->peer, l);
				r2peer__leave__free_unpacked(l, NULL);
			}
			break;
		}
		case R2PEER__PEER_MSG__PEER_ABORT: {
			R2peer__Abort *a = r2peer__abort__unpack(NULL, len, p);
			struct r2_comm *c = a ? comm_for(d, a->uid) : NULL;
			if (c && c->state != R2_COMM_DEAD)
				r2d_comm_break(c, a->status < 0 ? a->status : R2CCL_E_PEER_GONE,
					       a->error);
			if (a)
				r2peer__abort__free_unpacked(a, NULL);
			break;
		}
		default:
			log_warn("unknown control message %u from peer %016llx", q->hdr.aux,
				 (unsigned long long)q->peer);
		}
	}
	pthread_mutex_unlock(&d->lock);
}
