// SPDX-License-Identifier: MIT
/* Fills the operations a provider lacks: each returns -EOPNOTSUPP (release
 * and close do nothing; event_fd returns -EOPNOTSUPP like the others). */
#include <errno.h>
#include <stddef.h>

#include "transport.h"

static int d_open(const struct r2_tp_config *cfg, struct r2_tp **out)
{
	(void)cfg;
	if (out)
		*out = NULL;
	return -EOPNOTSUPP;
}

static void d_close(struct r2_tp *tp) { (void)tp; }

static int d_listen_port(struct r2_tp *tp, uint16_t *port)
{
	(void)tp;
	(void)port;
	return -EOPNOTSUPP;
}

static int d_connect(struct r2_tp *tp, uint64_t peer_id, struct in_addr addr, uint16_t port)
{
	(void)tp;
	(void)peer_id;
	(void)addr;
	(void)port;
	return -EOPNOTSUPP;
}

static int d_disconnect(struct r2_tp *tp, uint64_t peer_id)
{
	(void)tp;
	(void)peer_id;
	return -EOPNOTSUPP;
}

static int d_reg_mem(struct r2_tp *tp, void *addr, size_t len, void **handle)
{
	(void)tp;
	(void)addr;
	(void)len;
	(void)handle;
	return -EOPNOTSUPP;
}

static int d_dereg_mem(struct r2_tp *tp, void *handle)
{
	(void)tp;
	(void)handle;
	return -EOPNOTSUPP;
}

static int d_post_send(struct r2_tp *tp, uint64_t peer_id, const struct r2_chunk_hdr *hdr,
		       const void *buf, uint64_t ctx)
{
	(void)tp;
	(void)peer_id;
	(void)hdr;
	(void)buf;
	(void)ctx;
	return -EOPNOTSUPP;
}

static void d_release(struct r2_tp *tp, void *buf)
{
	(void)tp;
	(void)buf;
}

static int d_poll(struct r2_tp *tp, struct r2_tp_cqe *out, int max)
{
	(void)tp;
	(void)out;
	(void)max;
	return -EOPNOTSUPP;
}

static int d_event_fd(struct r2_tp *tp)
{
	(void)tp;
	return -EOPNOTSUPP;
}

static int d_link_state(struct r2_tp *tp)
{
	(void)tp;
	return -EOPNOTSUPP;
}

static int d_stats(struct r2_tp *tp, uint64_t *tx_bytes, uint64_t *rx_bytes)
{
	(void)tp;
	(void)tx_bytes;
	(void)rx_bytes;
	return -EOPNOTSUPP;
}

void r2_tp_fill_dummy_ops(struct r2_tp_ops *ops)
{
	if (!ops)
		return;
	if (!ops->name)
		ops->name = "dummy";
#define FILL(op) \
	if (!ops->op) \
		ops->op = d_##op
	FILL(open);
	FILL(close);
	FILL(listen_port);
	FILL(connect);
	FILL(disconnect);
	FILL(reg_mem);
	FILL(dereg_mem);
	FILL(post_send);
	FILL(release);
	FILL(poll);
	FILL(event_fd);
	FILL(link_state);
	FILL(stats);
#undef FILL
}
