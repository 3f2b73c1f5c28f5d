// SPDX-License-Identifier: MIT
/*
 * r2cclctl talking to the daemon: connect and HELLO (control_only), one
 * request and its reply (common/rpc.c), the daemon's answers turned into
 * messages and exit codes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

int ctl_call(struct ctl *c, const char *what, uint16_t type, const ProtobufCMessage *req,
	     uint16_t want, struct r2_frame *f)
{
	R2ccl__Result *res = NULL;
	int r, status;

	r = r2_rpc_call(&c->rpc, type, req, NULL, 0, want, f, &res);
	if (r < 0)
		return report_io(c, what, r);
	if (r == R2_RPC_UNEXPECTED)
		return report(c, EXIT_FAIL, -EPROTO, "%s: unexpected reply (message type %u)", what,
			      f->type);
	if (r == 0 && want != R2CCL__MSG_TYPE__MSG_RESULT)
		return 0;
	if (r == 0) { /* the RESULT wanted: success when its status is 0 */
		res = r2ccl__result__unpack(NULL, f->len, f->payload);
		if (!res) {
			r2_frame_free(f);
			return report_io(c, what, -EPROTO);
		}
		if (res->status == 0) {
			r2ccl__result__free_unpacked(res, NULL);
			return 0;
		}
		r2_frame_free(f);
	}
	status = res->status ? res->status : -EPROTO; /* a RESULT where data was expected */
	r = report_status(c, what, status, res->error);
	r2ccl__result__free_unpacked(res, NULL);
	return r;
}

int ctl_connect(struct ctl *c)
{
	R2ccl__Hello hello;
	R2ccl__HelloReply *rep;
	struct r2_frame f;
	int r;

	r2_rpc_init(&c->rpc, CTL_MAX_REPLY, c->timeout_ms);
	c->rpc.deadline_ms = r2_rpc_now_ms() + (uint64_t)c->timeout_ms;
	r = r2_rpc_dial(&c->rpc, c->socket, R2_RPC_NONBLOCK | R2_RPC_SNDTIMEO);
	if (r == -ENAMETOOLONG)
		return report(c, EXIT_USAGE, r, "socket path too long: %s", c->socket);
	if (r == -ENOENT || r == -ECONNREFUSED || r == -ENOTDIR)
		return report(c, EXIT_NOT_RUNNING, r,
			      "cannot connect to %s: %s (is r2ccld running?)", c->socket,
			      strerror(-r));
	if (r == -EACCES || r == -EPERM)
		return report(c, EXIT_DENIED, r,
			      "cannot connect to %s: %s (see socket_mode and socket_group "
			      "in r2ccld.conf)",
			      c->socket, strerror(-r));
	if (r == -EAGAIN || r == -EWOULDBLOCK)
		r = -ETIMEDOUT;
	if (r < 0)
		return report(c, EXIT_FAIL, r, "cannot connect to %s: %s", c->socket,
			      strerror(-r));

	r2_rpc_hello_init(&hello, "r2cclctl", true);
	r = ctl_call(c, "handshake", R2CCL__MSG_TYPE__MSG_HELLO, &hello.base,
		     R2CCL__MSG_TYPE__MSG_HELLO_REPLY, &f);
	if (r)
		return r;
	rep = r2ccl__hello_reply__unpack(NULL, f.len, f.payload);
	r2_frame_free(&f);
	if (!rep)
		return report_io(c, "handshake", -EPROTO);
	snprintf(c->daemon_version, sizeof(c->daemon_version), "%s",
		 rep->daemon_version ? rep->daemon_version : "");
	c->proto_version = rep->proto_version;
	c->session_id = rep->session_id;
	r = 0;
	if (rep->status != 0)
		r = report_status(c, "handshake", rep->status, rep->error);
	r2ccl__hello_reply__free_unpacked(rep, NULL);
	return r;
}

void ctl_close(struct ctl *c)
{
	r2_rpc_close(&c->rpc);
}

/* A reply's int32 'status' and string 'error' fields (every *Reply has them). */
static int reply_status(const ProtobufCMessage *m, const char **err)
{
	const ProtobufCFieldDescriptor *fs, *fe;

	fs = protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "status");
	fe = protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "error");
	*err = fe ? *(const char *const *)((const char *)m + fe->offset) : NULL;
	return fs ? *(const int32_t *)((const char *)m + fs->offset) : 0;
}

int ctl_query(struct ctl *c, uint16_t type, const ProtobufCMessageDescriptor *req_desc,
	      uint16_t want, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out)
{
	ProtobufCMessage *req = xmalloc(req_desc->sizeof_message);
	const ProtobufCFieldDescriptor *id;
	int r;

	protobuf_c_message_init(req_desc, req);
	id = protobuf_c_message_descriptor_get_field_by_name(req_desc, "req_id");
	if (id)
		*(uint64_t *)((char *)req + id->offset) = CTL_REQ_ID;
	r = ctl_query_req(c, type, req, want, desc, out);
	free(req);
	return r;
}

int ctl_query_req(struct ctl *c, uint16_t type, const ProtobufCMessage *req, uint16_t want,
		  const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out)
{
	ProtobufCMessage *rep;
	struct r2_frame f;
	const char *err;
	int r, status;

	r = ctl_call(c, c->cmd, type, req, want, &f);
	if (r)
		return r;
	rep = protobuf_c_message_unpack(desc, NULL, f.len, f.payload);
	r2_frame_free(&f);
	if (!rep)
		return report_io(c, c->cmd, -EPROTO);
	status = reply_status(rep, &err);
	if (status != 0) {
		r = report_status(c, c->cmd, status, err);
		protobuf_c_message_free_unpacked(rep, NULL);
		return r;
	}
	*out = rep;
	return 0;
}

int get_status(struct ctl *c, R2ccl__StatusReply **out)
{
	return ctl_query(c, R2CCL__MSG_TYPE__MSG_STATUS, &r2ccl__status_request__descriptor,
			 R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &r2ccl__status_reply__descriptor,
			 (ProtobufCMessage **)out);
}

int get_rails(struct ctl *c, R2ccl__RailsReply **out)
{
	return ctl_query(c, R2CCL__MSG_TYPE__MSG_RAILS, &r2ccl__rails_request__descriptor,
			 R2CCL__MSG_TYPE__MSG_RAILS_REPLY, &r2ccl__rails_reply__descriptor,
			 (ProtobufCMessage **)out);
}
