/* SPDX-License-Identifier: MIT */
/*
 * The peers of this host's rails: the cluster key their connections prove
 * (docs/security.md: r2d_cluster_key_load, the check at start, the
 * transports' authentication setup), and the peer table (up to
 * R2_MAX_PEERS daemons; peers that no communicator needs are evicted to
 * make room).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/comm_record.h"
#include "config.h"
#include "hmac_sha256.h"
#include "log.h"
#include "net/health.h"
#include "net/net.h"
#include "net/rails.h"
#include "util.h"

/* ---- the cluster key (docs/security.md) ---- */

#define KEY_MIN 16
#define KEY_MAX 4096

int r2d_cluster_key_load(const char *path, uint8_t key[64], uint32_t *len, char *err,
			 size_t errlen)
{
	uint8_t buf[KEY_MAX + 1];
	struct stat st;
	ssize_t n;
	size_t got = 0;
	int fd, r = 0;

	*len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "cluster_key_file %s: %s", path, strerror(errno));
		return r;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "cluster_key_file %s: not a regular file", path);
		r = -EINVAL;
		goto out;
	}
	if (st.st_mode & 077) {
		snprintf(err, errlen,
			 "cluster_key_file %s: mode %04o lets group or others read or write "
			 "it; the key must be secret (chmod 600 %s)",
			 path, (unsigned)(st.st_mode & 07777), path);
		r = -EPERM;
		goto out;
	}
	while (got < sizeof(buf) && (n = read(fd, buf + got, sizeof(buf) - got)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			snprintf(err, errlen, "cluster_key_file %s: %s", path, strerror(errno));
			goto out;
		}
		got += (size_t)n;
	}
	while (got && (buf[got - 1] == '\n' || buf[got - 1] == '\r' || buf[got - 1] == ' ' ||
		       buf[got - 1] == '\t'))
		got--; /* `openssl rand -base64 32 > key` ends with a newline */
	if (got < KEY_MIN || got > KEY_MAX) {
		snprintf(err, errlen,
			 "cluster_key_file %s: %zu bytes; a key has %d to %d (e.g. openssl "
			 "rand -base64 32)",
			 path, got, KEY_MIN, KEY_MAX);
		r = -EINVAL;
		goto out;
	}
	if (got > 64) { /* what HMAC does with a key longer than a block */
		r2_sha256(buf, got, key);
		*len = R2_SHA256_LEN;
	} else {
		memcpy(key, buf, got);
		*len = (uint32_t)got;
	}
out:
	r2_wipe(buf, sizeof(buf));
	close(fd);
	return r;
}

int r2d_peer_auth_check(struct r2d *d, char *err, size_t errlen)
{
	uint8_t key[64];
	uint32_t len;
	int r;

	if (strcmp(r2_param_str(&d->params, P_PEER_AUTH), "on"))
		return 0;
	r = r2d_cluster_key_load(r2_param_str(&d->params, P_CLUSTER_KEY_FILE), key, &len, err,
				 errlen);
	r2_wipe(key, sizeof(key));
	return r == -ENOENT ? 0 : r; /* no key: said at start, the rails refuse peers */
}

/* The rails' authentication (rails_start): the key into cfg, or none. */
void r2d_rails_auth_setup(struct r2d *d, struct r2_tp_config *cfg)
{
	const char *path = r2_param_str(&d->params, P_CLUSTER_KEY_FILE);
	char err[512];
	int r;

	if (strcmp(r2_param_str(&d->params, P_PEER_AUTH), "on")) {
		cfg->auth = R2_TP_AUTH_NONE;
		log_warn("peer_auth = off: rail connections are not authenticated; any host on a "
			 "rail network can connect as a peer daemon (docs/security.md)");
		return;
	}
	r = r2d_cluster_key_load(path, cfg->auth_key, &cfg->auth_key_len, err, sizeof(err));
	if (r == 0) {
		cfg->auth = R2_TP_AUTH_KEY;
		log_info("peer port: cluster key from %s; every rail connection proves it", path);
		return;
	}
	cfg->auth = R2_TP_AUTH_REFUSE;
	if (r == -ENOENT)
		log_warn("no cluster key (%s): the TCP rails refuse every peer daemon and "
			 "communicators across hosts cannot form over them; create the same key "
			 "on every host (docs/security.md) or set peer_auth = off",
			 path);
	else
		log_err("%s; the TCP rails refuse every peer daemon", err);
}
struct r2_peer *r2d_rails_peer(struct r2d *d, uint64_t id, bool create)
{
	struct r2_rails *rs = d->rails;
	int n = atomic_load(&rs->npeers), slot = -1;

	for (int i = 0; i < n; i++) {
		uint64_t v = atomic_load(&rs->peer[i].id);
		if (v == id)
			return &rs->peer[i];
		if (!v && slot < 0)
			slot = i;
	}
	if (!create || !id)
		return NULL;
	if (slot < 0) {
		if (n >= R2_MAX_PEERS)
			return NULL;
		slot = n;
	}
	struct r2_peer *p = &rs->peer[slot];
	memset((void *)p, 0, sizeof(*p));
	atomic_store(&p->id, id); /* published after it is filled */
	if (slot == n)
		atomic_store(&rs->npeers, n + 1);
	return p;
}

bool r2d_rails_peer_needed(struct r2d *d, uint64_t id)
{
	for (struct r2_comm *c = d->comms; c; c = c->next) {
		if (c->state == R2_COMM_DEAD)
			continue;
		if (c->uid.host_id == id)
			return true;
		for (int h = 0; c->hosts && h < c->nhosts; h++)
			if (c->hosts[h].id == id)
				return true;
	}
	return false;
}

/* Frees peer p's entry: its connections dropped (no ERROR), its path
 * monitor cleared, id 0 first so other threads stop finding it. */
static void peer_evict(struct r2d *d, struct r2_peer *p)
{
	struct r2_rails *rs = d->rails;
	uint64_t id = atomic_exchange(&p->id, 0);

	for (int r = 0; r < rs->n; r++)
		if ((p->conn_mask | p->want_mask) & (1u << r))
			rs->rail[r].ops->disconnect(rs->rail[r].tp, id);
	r2d_health_peer_forget(d, (int)(p - rs->peer), id);
	memset((void *)p, 0, sizeof(*p));
	rs->evicted++;
	{
		static struct r2_ratelimit rl = R2_RATELIMIT_INIT(5000, 5);
		unsigned sup;
		if (r2_ratelimit_ok(&rl, &sup))
			log_info("peer table full (%d): evicted peer %016llx, which no "
				 "communicator uses (%llu evicted so far)",
				 R2_MAX_PEERS, (unsigned long long)id,
				 (unsigned long long)rs->evicted);
	}
}

int r2d_rails_make_room(struct r2d *d)
{
	struct r2_rails *rs = d->rails;
	int n = atomic_load(&rs->npeers);

	if (n < R2_MAX_PEERS)
		return 0;
	for (int i = 0; i < n; i++)
		if (!atomic_load(&rs->peer[i].id))
			return 0;
	/* a peer with no connection first (a dead daemon's entry, probed
	 * forever otherwise), then an idle connected one */
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < n; i++) {
			struct r2_peer *p = &rs->peer[i];
			if ((pass == 0 && p->conn_mask) || r2d_rails_peer_needed(d, p->id))
				continue;
			peer_evict(d, p);
			return 0;
		}
	}
	return -ENOSPC;
}

struct r2_peer *r2d_rails_peer_find(struct r2d *d, uint64_t id)
{
	struct r2_rails *rs = d->rails;
	int n = rs ? atomic_load(&rs->npeers) : 0;

	for (int i = 0; i < n; i++)
		if (rs->peer[i].id == id)
			return &rs->peer[i];
	return NULL;
}

uint32_t r2d_rails_bad(struct r2d *d, uint64_t peer)
{
	struct r2_peer *p = r2d_rails_peer_find(d, peer);

	return p ? atomic_load_explicit(&p->bad_mask, memory_order_relaxed) : 0;
}

bool r2d_rails_movable(struct r2d *d, int from, int to, uint64_t peer)
{
	struct r2_rails *rs = d->rails;
	struct r2_peer *p;

	if (!rs || from < 0 || to < 0 || from >= rs->n || to >= rs->n || from == to)
		return false;
	if (rs->rail[from].ops != rs->rail[to].ops || !(rs->rail[to].ops->caps & R2_TP_CAP_ZERO_COPY))
		return false;
	if (__atomic_load_n(&rs->rail[to].h.state, __ATOMIC_RELAXED) != R2_RS_HEALTHY)
		return false;
	p = r2d_rails_peer_find(d, peer);
	if (!p || !(__atomic_load_n(&p->conn_mask, __ATOMIC_RELAXED) & (1u << to)) ||
	    (atomic_load_explicit(&p->bad_mask, memory_order_relaxed) & (1u << to)))
		return false;
	return __atomic_load_n(&p->link[to].state, __ATOMIC_RELAXED) == R2_RS_HEALTHY;
}

