// SPDX-License-Identifier: MIT
/*
 * r2cclctl rebalance, drain, undrain, version: the commands that act on the
 * daemon (a RESULT answers them) and the versions of both ends.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "r2ccl.h"

/* Sends an administrative request; on its RESULT of status 0 prints text,
 * or with --json the command, its nic (or comm_id when nic is NULL) and 0. */
static int act(struct ctl *c, uint16_t type, const ProtobufCMessage *req, const char *text,
	       const char *nic, uint32_t comm)
{
	struct r2_frame f;
	int r = ctl_call(c, c->cmd, type, req, R2CCL__MSG_TYPE__MSG_RESULT, &f);

	if (r)
		return r;
	r2_frame_free(&f);
	if (c->json) {
		struct jw j;

		jw_begin(&j);
		jw_str(&j, "command", c->cmd);
		if (nic)
			jw_str(&j, "nic", nic);
		else
			jw_u64(&j, "comm_id", comm);
		jw_i64(&j, "status", 0);
		jw_end(&j);
	} else {
		char *s = safe_text(text);

		printf("%s\n", s);
		free(s);
	}
	return EXIT_OK;
}

int parse_u32(const char *s, uint32_t *out)
{
	char *end;
	unsigned long v;

	if (!s[0] || s[0] == '-' || s[0] == '+')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int cmd_rebalance(struct ctl *c, int argc, char **argv)
{
	R2ccl__Rebalance req = R2CCL__REBALANCE__INIT;
	char text[96];

	/* COMM was checked before connecting. */
	req.req_id = CTL_REQ_ID;
	if (argc > 0)
		parse_u32(argv[0], &req.comm_id);
	if (req.comm_id)
		snprintf(text, sizeof(text), "communicator %u: re-plan requested", req.comm_id);
	else
		snprintf(text, sizeof(text), "every communicator: re-plan requested");
	return act(c, R2CCL__MSG_TYPE__MSG_REBALANCE, &req.base, text, NULL, req.comm_id);
}

int cmd_nic_admin(struct ctl *c, int argc, char **argv)
{
	R2ccl__NicAdmin req = R2CCL__NIC_ADMIN__INIT;
	char text[160];

	req.req_id = CTL_REQ_ID;
	req.nic = argv[0];
	req.drain = !strcmp(c->cmd, "drain");
	snprintf(text, sizeof(text), "%s: %s", argv[0],
		 req.drain ? "drained (traffic moves to the other rails)" : "in use again");
	return act(c, R2CCL__MSG_TYPE__MSG_NIC_ADMIN, &req.base, text, argv[0], 0);
}

int cmd_version(struct ctl *c, int argc, char **argv)
{
	char *v;
	int r;

	/* The client's version even when the daemon does not answer. */
	if (!c->json)
		printf("r2cclctl %s (protocol %d)\n", R2CCL_VERSION_STRING,
		       R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT);
	fflush(stdout);
	r = ctl_connect(c); /* the handshake carries the daemon's version */
	if (r)
		return r;
	if (c->json) {
		struct jw j;

		jw_begin(&j);
		jw_open(&j, "client", '{');
		jw_str(&j, "version", R2CCL_VERSION_STRING);
		jw_u64(&j, "proto_version", R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT);
		jw_close(&j, '}');
		jw_open(&j, "daemon", '{');
		jw_str(&j, "version", c->daemon_version);
		jw_u64(&j, "proto_version", c->proto_version);
		jw_close(&j, '}');
		jw_end(&j);
		return EXIT_OK;
	}
	v = safe_text(or_dash(c->daemon_version));
	printf("r2ccld   %s (protocol %u)\n", v, c->proto_version);
	free(v);
	return EXIT_OK;
}
