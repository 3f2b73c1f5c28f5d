// SPDX-License-Identifier: MIT
/*
 * The rails' control messages to peer daemons (rails.h): each a copy the
 * transport holds until its send completion (rl_ctrl_copy_free), sent on
 * the first rail that takes it, or through a bridge host when no rail
 * reaches the peer (ctrl_detour / rl_ctrl_detour_in). Moved out of rails.c,
 * which keeps the rails' threads, start and stop.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/comm_record.h"
#include "net/bufpool.h"
#include "config.h"
#include "hmac_sha256.h"
#include "net/health.h"
#include "net/net.h"
#include "log.h"
#include "net/detour.h"
#include "net/rails.h"
#include "net/rails_int.h"
#include "net/tenants.h"
#include "util.h"

static int send_ctrl_hdr(struct r2d *d, uint64_t peer, const struct r2_chunk_hdr *hh,
			 const void *buf);

static void *ctrl_copy_new(struct r2_rails *rs, const void *buf, uint32_t len)
{
	struct ctrl_copy *c = malloc(sizeof(*c) + (len ? len : 1));

	if (!c)
		return NULL;
	if (len) /* a zero-length message may come with no buffer */
		memcpy(c->payload, buf, len);
	pthread_mutex_lock(&rs->ctrl_lock);
	c->prev = NULL;
	c->next = rs->ctrl_copies;
	if (c->next)
		c->next->prev = c;
	rs->ctrl_copies = c;
	pthread_mutex_unlock(&rs->ctrl_lock);
	return c->payload;
}

/* its SEND completion, a post that failed, or the stop */
void rl_ctrl_copy_free(struct r2_rails *rs, void *payload)
{
	struct ctrl_copy *c;

	if (!payload)
		return;
	c = (struct ctrl_copy *)((uint8_t *)payload - offsetof(struct ctrl_copy, payload));
	pthread_mutex_lock(&rs->ctrl_lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		rs->ctrl_copies = c->next;
	if (c->next)
		c->next->prev = c->prev;
	pthread_mutex_unlock(&rs->ctrl_lock);
	free(c);
}

void *r2d_rails_ctrl_copy(struct r2d *d, const void *buf, uint32_t len)
{
	return d->rails ? ctrl_copy_new(d->rails, buf, len) : NULL;
}

void r2d_rails_ctrl_free(struct r2d *d, void *copy)
{
	if (d->rails)
		rl_ctrl_copy_free(d->rails, copy);
}

/* bridges a detoured control message goes through */
#define CTRL_BRIDGES 2

/* A control message for a peer with no rail left to it goes through
 * CTRL_BRIDGES other connected peers (detour.h): flagged, with its origin
 * in hdr.comm and its destination in hdr.opseq; the bridge passes it on (or
 * drops it, with no rail to the destination either: there is no NACK), the
 * destination takes it as the origin's (view agreement, aborts: each
 * applies a copy once). The bridges differ from one message to the next
 * (ctrl_bridge_next): the view agreement's messages go again every 200 ms
 * until answered, and each try goes through other bridges. Until
 * 2026-12-07 every try went through the first connected peer, and one that
 * could not reach the destination either held the view up for
 * peer_timeout_ms. */
static int ctrl_detour(struct r2d *d, uint64_t peer, const struct r2_chunk_hdr *hh,
		       const void *buf)
{
	struct r2_rails *rs = d->rails;
	struct r2_chunk_hdr h = *hh;
	int np = rs ? atomic_load(&rs->npeers) : 0;
	unsigned start = np ? atomic_fetch_add(&rs->ctrl_bridge_next, 1) % (unsigned)np : 0;
	int sent = 0;

	h.flags |= R2_CHUNK_DETOUR;
	h.comm = d->host_id;
	h.opseq = peer;
	for (int k = 0; k < np && sent < CTRL_BRIDGES; k++) {
		const struct r2_peer *b = &rs->peer[(start + (unsigned)k) % (unsigned)np];
		uint64_t id = atomic_load(&b->id);
		if (id && id != peer && b->conn_mask && send_ctrl_hdr(d, id, &h, buf) == 0)
			sent++;
	}
	return sent ? 0 : -ENOTCONN;
}

/* Rails thread: a detoured control message; true when passed on (this host
 * is the bridge), else *c is made the origin's. */
bool rl_ctrl_detour_in(struct r2_rails *rs, int rail, struct r2_tp_cqe *c)
{
	if (!(c->hdr.flags & R2_CHUNK_DETOUR))
		return false;
	if (c->hdr.opseq != rs->d->host_id) {
		struct r2_chunk_hdr h = c->hdr;
		static struct r2_ratelimit rl = R2_RATELIMIT_INIT(5000, 5);
		unsigned sup;
		if (send_ctrl_hdr(rs->d, h.opseq, &h, c->buf) < 0 && r2_ratelimit_ok(&rl, &sup))
			log_warn("detour: control message %u from %016llx to %016llx: no rail to "
				 "it either; dropped",
				 h.aux, (unsigned long long)h.comm, (unsigned long long)h.opseq);
		r2d_rails_release(rs->d, rail, c->buf);
		return true;
	}
	c->peer = c->hdr.comm;
	/* a control message through a bridge says its origin is alive, though
	 * no rail connects it to this host (health's peer timeout) */
	struct r2_peer *p = r2d_rails_peer_find(rs->d, c->peer);
	if (p)
		atomic_store(&p->detour_rx_us, r2_now_us());
	return false;
}

static int send_ctrl_hdr(struct r2d *d, uint64_t peer, const struct r2_chunk_hdr *hh,
			 const void *buf)
{
	struct r2_rails *rs = d->rails;
	struct r2_chunk_hdr h = *hh;
	uint32_t len = h.len;
	int r = -ENOTCONN;
	uint32_t bad = rs ? r2d_rails_bad(d, peer) : 0;

	/* healthy rails first, then any connected one */
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; rs && i < rs->n; i++) {
			if (((bad >> i) & 1) != (uint32_t)pass)
				continue;
			void *copy = ctrl_copy_new(rs, buf, len);
			if (!copy)
				return -ENOMEM;
			/* ctx = 1 marks a control copy the completion frees */
			r = rs->rail[i].ops->post_send(rs->rail[i].tp, peer, &h, copy, 1);
			if (r == 0)
				return 0;
			rl_ctrl_copy_free(rs, copy);
		}
	}
	return r;
}

int r2d_rails_send_ctrl_all(struct r2d *d, uint64_t peer, uint32_t type, const void *buf,
			    uint32_t len)
{
	struct r2_rails *rs = d->rails;
	struct r2_chunk_hdr h = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_CTRL, .len = len,
				  .aux = type };
	uint32_t bad = rs ? r2d_rails_bad(d, peer) : 0;
	int sent = 0;

	for (int i = 0; rs && i < rs->n; i++) {
		if (bad & (1u << i))
			continue;
		void *copy = ctrl_copy_new(rs, buf, len);
		if (!copy)
			break;
		if (rs->rail[i].ops->post_send(rs->rail[i].tp, peer, &h, copy, 1) == 0)
			sent++;
		else
			rl_ctrl_copy_free(rs, copy);
	}
	if (sent)
		return 0;
	int r = r2d_rails_send_ctrl(d, peer, type, buf, len);
	return r == -ENOTCONN ? ctrl_detour(d, peer, &h, buf) : r;
}

int r2d_rails_send_ctrl(struct r2d *d, uint64_t peer, uint32_t type, const void *buf,
			uint32_t len)
{
	struct r2_chunk_hdr h = { .magic = R2_CHUNK_MAGIC, .kind = R2_MSG_CTRL, .len = len,
				  .aux = type };
	return send_ctrl_hdr(d, peer, &h, buf);
}
