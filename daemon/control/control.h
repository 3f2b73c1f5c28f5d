/* SPDX-License-Identifier: MIT */
/*
 * The control layer: the client side of r2ccld. The control loop (server.c),
 * sessions (session.c), the memory registry (memreg.c), r2cclctl requests
 * (ctl.c), configuration (config.c). The session and memory records are in
 * base/daemon.h (the engine reaches them through engine/source.h only).
 */
#ifndef R2CCL_CONTROL_H
#define R2CCL_CONTROL_H

#include <stdio.h>

#include "base/daemon.h"
#include "framing.h"
#include "gpu/gpu.h"

/* A control frame not yet written (the client is slow to read). */
struct r2_outbuf {
	struct r2_outbuf *next;
	size_t len, off;
	int fds[R2_FRAME_MAX_FDS];
	int nfds;
	uint8_t data[];
};

/* config.c (the table: config_params.c) */
int r2d_config_load(struct r2d *d, int argc, char **argv, char *err, size_t errlen);
void r2d_config_log(const struct r2d *d);
int r2d_config_reload(struct r2d *d);
/* Resolves the caps (d->caps) from the parameters and this host. */
void r2d_caps_update(struct r2d *d);
void r2d_usage(FILE *f);
/* The parameters' text as "help" (--help's lines), "conf" (the example
 * configuration) or "markdown" (operations.md's table); -EINVAL otherwise. */
int r2d_print_params(FILE *f, const char *format);
/* --check-config: every parameter with its source, to f, no log prefixes. */
void r2d_config_print(const struct r2d *d, FILE *f);

/* server.c: the control loop */
int r2d_server_start(struct r2d *d);
void r2d_server_stop(struct r2d *d);
void r2d_notify(struct r2d *d, const char *state);
void r2d_begin_drain(struct r2d *d, const char *why);

/* metrics.c: Prometheus text (GET /metrics on metrics_listen, and
 * metrics_textfile), rail overlap (loop thread) */
struct sockaddr_in;
int r2d_metrics_start(struct r2d *d);
void r2d_metrics_close(struct r2d *d); /* closes its handles (finish) */
void r2d_metrics_free(struct r2d *d);  /* after the loop ended */
/* The metrics page (malloc'd, *len bytes, not NUL-terminated); 0 or <0. */
int r2d_metrics_render(struct r2d *d, char **out, size_t *len);
/* "PORT" (127.0.0.1), "ADDR:PORT", ":PORT" or "*:PORT" (every address). */
int r2d_metrics_parse_listen(const char *s, struct sockaddr_in *sa);
/* Communicators (and *tenants) whose data used the rail in the last second. */
uint32_t r2d_metrics_rail_overlap(struct r2d *d, int rail, uint32_t *tenants);

/* session.c */
void r2d_session_accept(struct r2d *d, int fd);
void r2d_session_close(struct r2_session *s, const char *why);
/* Hello deadline and request-rate throttling (loop thread, the tick). */
void r2d_sessions_tick(struct r2d *d, uint64_t now);
int r2d_session_send(struct r2_session *s, uint16_t type, const void *msg_packed, size_t len,
		     const int *fds, int nfds);
/* Packs a protobuf-c message and queues it; drops the session on failure. */
int r2d_session_reply(struct r2_session *s, uint16_t type, const void *protobuf_msg);
void r2d_session_get(struct r2_session *s);
void r2d_session_put(struct r2_session *s);
/* Posts a completion to the session's CQ and signals it (any thread). */
void r2d_session_complete(struct r2_session *s, uint64_t tag, int status);

/* memreg.c (callers hold d->lock) */
int r2d_mem_register(struct r2_session *s, int fd, uint64_t size, uint32_t *id, char *err,
		     size_t errlen);
int r2d_mem_deregister(struct r2_session *s, uint32_t id);
void r2d_mem_release_all(struct r2_session *s);
/* Resolves (id, off, len) to an address and takes a reference on the region
 * (drop it with r2d_mem_put); R2CCL_E_BAD_BUFFER if unknown or out of range. */
int r2d_mem_resolve(struct r2_session *s, uint32_t id, uint64_t off, uint64_t len, void **addr,
		    struct r2_memreg **ref);
void r2d_mem_put(struct r2_memreg *m); /* accepts NULL; any thread */
/* Registers a GPU region (gpu/gpu.h) in s's memory table (under d->lock). */
int r2d_mem_register_gpu(struct r2_session *s, const struct r2_gpu_reg_req *req, uint32_t *id,
			 char *err, size_t errlen);

/* ctl.c: r2cclctl requests (d->lock taken inside) */
void r2d_ctl_status(struct r2_session *s, uint64_t req_id);
int r2d_ctl_rails(struct r2_session *s, struct r2_frame *f);
int r2d_ctl_events(struct r2_session *s, struct r2_frame *f);
/* Whether uid (tenant) may see event x: root every event, another user
 * those of a communicator it owns that is still known (by its serial: an id
 * given again to someone else's communicator does not show the old one's);
 * the rest (rails, peers, the configuration) are root's. */
struct r2d_event_info;
bool r2d_event_visible(struct r2d *d, uint32_t uid, const char *tenant,
		       const struct r2d_event_info *x);
int r2d_ctl_nic_admin(struct r2_session *s, struct r2_frame *f);
int r2d_ctl_rebalance(struct r2_session *s, struct r2_frame *f);
/* ctl_tenants.c: r2cclctl tenants, tenants set, r2ccl_set_bandwidth_limit */
int r2d_ctl_tenants(struct r2_session *s, struct r2_frame *f);
int r2d_ctl_tenant_set(struct r2_session *s, struct r2_frame *f);

#endif
