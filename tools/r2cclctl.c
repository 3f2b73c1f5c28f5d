// SPDX-License-Identifier: MIT
/*
 * r2cclctl - the operator CLI of r2ccld.
 *
 *   r2cclctl [--socket PATH] [--json] [--timeout MS] [-v] COMMAND [ARG]
 *
 * Talks to the daemon's control socket (proto/r2ccl.proto, framed by
 * common/framing.h): HELLO with control_only set, then one request and its
 * reply. Human output is aligned tables; --json prints one JSON object with
 * "schema_version": 1 (the stable contract, docs/operations.md).
 *
 * Exit status: 0 ok, 1 failure (the daemon answered an error, protocol error,
 * timeout), 2 usage, 3 daemon not running, 4 permission denied.
 *
 * Strings from the daemon may come from other users (client names, tenants):
 * they are printed with control characters replaced (tables) or escaped
 * (JSON), never raw.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include "framing.h"
#include "r2ccl.h"
#include "r2ccl.pb-c.h"

#define CTL_SCHEMA_VERSION 1
#define CTL_DEFAULT_TIMEOUT_MS 10000
#define CTL_MAX_REPLY (64u << 20) /* the daemon's max_frame upper bound */
#define CTL_REQ_ID 1

enum ctl_exit {
	EXIT_OK = 0,
	EXIT_FAIL = 1,
	EXIT_USAGE = 2,
	EXIT_NOT_RUNNING = 3,
	EXIT_DENIED = 4,
};

struct ctl {
	const char *socket;
	int timeout_ms;
	bool json;
	bool verbose;
	const char *cmd;
	int fd;
	uint64_t deadline_ms;
	struct r2_frame_reader rd;
	char daemon_version[64];
	uint32_t proto_version;
	uint64_t session_id;
};

/* ------------------------------------------------------------------------ */
/* Text: UTF-8, terminal-safe text, JSON strings                            */

/* Length (1..4) of the valid UTF-8 sequence at s, 0 if invalid; *cp gets the
 * code point. s is NUL-terminated (a NUL ends any sequence as invalid). */
static int utf8_seq(const unsigned char *s, uint32_t *cp)
{
	uint32_t v, min;
	int len;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if ((s[0] & 0xe0) == 0xc0) {
		len = 2, v = s[0] & 0x1f, min = 0x80;
	} else if ((s[0] & 0xf0) == 0xe0) {
		len = 3, v = s[0] & 0x0f, min = 0x800;
	} else if ((s[0] & 0xf8) == 0xf0) {
		len = 4, v = s[0] & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	for (int i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		v = (v << 6) | (s[i] & 0x3f);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return len;
}

/* Copies s for a terminal: C0/C1 controls, DEL and invalid UTF-8 become '?'.
 * Returns a malloc'ed string (never NULL for non-NULL s; exits on ENOMEM). */
static char *safe_text(const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t n = strlen((const char *)p);
	char *out = malloc(n + 1), *o = out;

	if (!out) {
		fputs("r2cclctl: out of memory\n", stderr);
		exit(EXIT_FAIL);
	}
	while (*p) {
		uint32_t cp;
		int len = utf8_seq(p, &cp);

		if (len == 0 || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) {
			*o++ = '?';
			p += len ? len : 1;
			continue;
		}
		memcpy(o, p, (size_t)len);
		o += len;
		p += len;
	}
	*o = 0;
	return out;
}

/* Display width: code points (the tables hold names, numbers, addresses). */
static size_t text_width(const char *s)
{
	size_t w = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			w++;
	return w;
}

/* Writes s as a JSON string: quotes, backslash and controls escaped, invalid
 * UTF-8 replaced by U+FFFD. */
static void json_string(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");

	fputc('"', f);
	while (*p) {
		uint32_t cp;
		int len = utf8_seq(p, &cp);

		if (len == 0) {
			fputs("\\ufffd", f);
			p++;
			continue;
		}
		switch (cp) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\b': fputs("\\b", f); break;
		case '\f': fputs("\\f", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (cp < 0x20)
				fprintf(f, "\\u%04x", (unsigned)cp);
			else
				fwrite(p, 1, (size_t)len, f);
		}
		p += len;
	}
	fputc('"', f);
}

/* ------------------------------------------------------------------------ */
/* A tiny JSON writer (pretty, two-space indent)                            */

#define JW_MAX_DEPTH 16

struct jw {
	FILE *f;
	int depth;
	bool nonempty[JW_MAX_DEPTH];
};

static void jw_indent(struct jw *j)
{
	fputc('\n', j->f);
	for (int i = 0; i < j->depth; i++)
		fputs("  ", j->f);
}

/* Starts a member (key non-NULL, inside an object) or an element (key NULL). */
static void jw_item(struct jw *j, const char *key)
{
	if (j->depth > 0) {
		if (j->nonempty[j->depth])
			fputc(',', j->f);
		j->nonempty[j->depth] = true;
		jw_indent(j);
	}
	if (key) {
		json_string(j->f, key);
		fputs(": ", j->f);
	}
}

static void jw_open(struct jw *j, const char *key, char bracket)
{
	jw_item(j, key);
	fputc(bracket, j->f);
	if (j->depth + 1 < JW_MAX_DEPTH)
		j->depth++;
	j->nonempty[j->depth] = false;
}

static void jw_close(struct jw *j, char bracket)
{
	bool nonempty = j->nonempty[j->depth];

	j->depth--;
	if (nonempty)
		jw_indent(j);
	fputc(bracket, j->f);
	if (j->depth == 0)
		fputc('\n', j->f);
}

static void jw_str(struct jw *j, const char *key, const char *v)
{
	jw_item(j, key);
	json_string(j->f, v);
}

static void jw_u64(struct jw *j, const char *key, uint64_t v)
{
	jw_item(j, key);
	fprintf(j->f, "%" PRIu64, v);
}

static void jw_i64(struct jw *j, const char *key, int64_t v)
{
	jw_item(j, key);
	fprintf(j->f, "%" PRId64, v);
}

static void jw_bool(struct jw *j, const char *key, bool v)
{
	jw_item(j, key);
	fputs(v ? "true" : "false", j->f);
}

/* Opens the top-level object with its schema version. */
static void jw_begin(struct jw *j)
{
	memset(j, 0, sizeof(*j));
	j->f = stdout;
	jw_open(j, NULL, '{');
	jw_u64(j, "schema_version", CTL_SCHEMA_VERSION);
}

static void jw_end(struct jw *j)
{
	jw_close(j, '}');
}

/* ------------------------------------------------------------------------ */
/* Aligned tables                                                           */

#define TBL_MAX_COLS 16

struct table {
	int ncols;
	const char *hdr[TBL_MAX_COLS]; /* a leading '>' right-aligns the column */
	char **cells;                  /* rows * ncols, safe text */
	size_t rows, cap;
	int col; /* next cell of the current row */
};

static void tbl_init(struct table *t, const char *const *hdr)
{
	memset(t, 0, sizeof(*t));
	while (hdr[t->ncols] && t->ncols < TBL_MAX_COLS) {
		t->hdr[t->ncols] = hdr[t->ncols];
		t->ncols++;
	}
	t->col = t->ncols;
}

static void tbl_cell(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tbl_cell(struct table *t, const char *fmt, ...)
{
	char *raw = NULL;
	va_list ap;

	if (t->col == t->ncols) { /* new row */
		if (t->rows == t->cap) {
			size_t ncap = t->cap ? 2 * t->cap : 16;
			char **n = realloc(t->cells, ncap * (size_t)t->ncols * sizeof(*n));

			if (!n)
				goto oom;
			t->cells = n;
			t->cap = ncap;
		}
		t->rows++;
		t->col = 0;
	}
	va_start(ap, fmt);
	if (vasprintf(&raw, fmt, ap) < 0)
		raw = NULL;
	va_end(ap);
	if (!raw)
		goto oom;
	t->cells[(t->rows - 1) * (size_t)t->ncols + (size_t)t->col++] = safe_text(raw);
	free(raw);
	return;
oom:
	fputs("r2cclctl: out of memory\n", stderr);
	exit(EXIT_FAIL);
}

static void tbl_pad(FILE *f, size_t n)
{
	while (n--)
		fputc(' ', f);
}

static void tbl_print(struct table *t, FILE *f)
{
	size_t w[TBL_MAX_COLS];

	for (int c = 0; c < t->ncols; c++) {
		const char *h = t->hdr[c] + (t->hdr[c][0] == '>');

		w[c] = strlen(h);
		for (size_t r = 0; r < t->rows; r++) {
			size_t cw = text_width(t->cells[r * (size_t)t->ncols + (size_t)c]);

			if (cw > w[c])
				w[c] = cw;
		}
	}
	for (size_t r = 0; r <= t->rows; r++) {
		for (int c = 0; c < t->ncols; c++) {
			bool right = t->hdr[c][0] == '>';
			const char *s = r == 0 ? t->hdr[c] + right
					       : t->cells[(r - 1) * (size_t)t->ncols + (size_t)c];
			size_t pad = w[c] - text_width(s);
			bool last = c == t->ncols - 1;

			if (right)
				tbl_pad(f, pad);
			fputs(s, f);
			if (!right && !last)
				tbl_pad(f, pad);
			if (!last)
				fputs("  ", f);
		}
		fputc('\n', f);
	}
}

static void tbl_free(struct table *t)
{
	for (size_t i = 0; i < t->rows * (size_t)t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	memset(t, 0, sizeof(*t));
}

/* Prints "  label:  value" lines of a status block (value made safe). */
static void kv(const char *label, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void kv(const char *label, const char *fmt, ...)
{
	char *raw = NULL, *s;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&raw, fmt, ap) < 0)
		raw = NULL;
	va_end(ap);
	s = safe_text(raw ? raw : "?");
	printf("%12s: %s\n", label, s);
	free(s);
	free(raw);
}

/* ------------------------------------------------------------------------ */
/* Units                                                                    */

static const char *fmt_bytes(uint64_t b, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)b;
	int u = 0;

	while (v >= 1024.0 && u < 5) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", b);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

static const char *fmt_speed(uint64_t mbps, char *buf, size_t len)
{
	if (mbps == 0)
		snprintf(buf, len, "-");
	else if (mbps >= 1000 && mbps % 1000 == 0)
		snprintf(buf, len, "%" PRIu64 "Gb/s", mbps / 1000);
	else if (mbps >= 1000)
		snprintf(buf, len, "%.1fGb/s", (double)mbps / 1000.0);
	else
		snprintf(buf, len, "%" PRIu64 "Mb/s", mbps);
	return buf;
}

/* systemd's style: "3d 4h 5min 6s", the two largest units only. */
static const char *fmt_duration(uint64_t s, char *buf, size_t len)
{
	uint64_t d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60, sec = s % 60;

	if (d)
		snprintf(buf, len, "%" PRIu64 "d %" PRIu64 "h", d, h);
	else if (h)
		snprintf(buf, len, "%" PRIu64 "h %" PRIu64 "min", h, m);
	else if (m)
		snprintf(buf, len, "%" PRIu64 "min %" PRIu64 "s", m, sec);
	else
		snprintf(buf, len, "%" PRIu64 "s", sec);
	return buf;
}

static const char *fmt_numa(int n, char *buf, size_t len)
{
	if (n < 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%d", n);
	return buf;
}

static const char *or_dash(const char *s)
{
	return s && s[0] ? s : "-";
}

/* ------------------------------------------------------------------------ */
/* Errors and exit codes                                                    */

/* Reports a failure: a line on stderr and, with --json, an error object on
 * stdout (so `r2cclctl --json ... | jq` always has an object to read).
 * status is the negative error code (0 if none). Returns exit_code. */
static int report(struct ctl *c, int exit_code, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int report(struct ctl *c, int exit_code, int status, const char *fmt, ...)
{
	char *raw = NULL, *s;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&raw, fmt, ap) < 0)
		raw = NULL;
	va_end(ap);
	s = safe_text(raw ? raw : "error");
	fprintf(stderr, "r2cclctl: %s\n", s);
	if (c->json) {
		struct jw j;

		fflush(stdout);
		jw_begin(&j);
		jw_open(&j, "error", '{');
		jw_str(&j, "command", c->cmd ? c->cmd : "");
		jw_i64(&j, "status", status);
		jw_i64(&j, "exit_code", exit_code);
		jw_str(&j, "message", raw ? raw : "error");
		jw_close(&j, '}');
		jw_end(&j);
	}
	free(s);
	free(raw);
	return exit_code;
}

/* Exit code for an error the daemon answered. */
static int exit_for_status(int status)
{
	return status == -EPERM || status == -EACCES ? EXIT_DENIED : EXIT_FAIL;
}

/* Reports an error status from the daemon (err: its text, may be empty). */
static int report_status(struct ctl *c, const char *what, int status, const char *err)
{
	if (status == -EOPNOTSUPP)
		return report(c, EXIT_FAIL, status, "%s: not supported by this daemon (r2ccld %s)",
			      what, c->daemon_version[0] ? c->daemon_version : "unknown");
	if (err && err[0])
		return report(c, exit_for_status(status), status, "%s: %s (%s)", what, err,
			      r2ccl_strerror(status));
	return report(c, exit_for_status(status), status, "%s: %s", what,
		      r2ccl_strerror(status));
}

/* Reports a transport error (negative errno) while talking to the daemon. */
static int report_io(struct ctl *c, const char *what, int err)
{
	if (err == -ETIMEDOUT || err == -EAGAIN)
		return report(c, EXIT_FAIL, -ETIMEDOUT, "%s: no answer from r2ccld within %d ms",
			      what, c->timeout_ms);
	if (err == -ECONNRESET || err == -EPIPE)
		return report(c, EXIT_FAIL, err, "%s: r2ccld closed the connection", what);
	if (err == -EPROTO)
		return report(c, EXIT_FAIL, err, "%s: malformed frame from r2ccld", what);
	return report(c, EXIT_FAIL, err, "%s: %s", what, strerror(-err));
}

/* ------------------------------------------------------------------------ */
/* Talking to the daemon                                                    */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Milliseconds left before the deadline; 0 once it has passed. */
static int time_left(const struct ctl *c)
{
	uint64_t now = now_ms();

	return now >= c->deadline_ms ? 0 : (int)(c->deadline_ms - now);
}

static int ctl_send(struct ctl *c, uint16_t type, const ProtobufCMessage *msg)
{
	size_t len = protobuf_c_message_get_packed_size(msg);
	uint8_t *buf = malloc(len ? len : 1);
	int r;

	if (!buf)
		return -ENOMEM;
	protobuf_c_message_pack(msg, buf);
	r = r2_frame_send(c->fd, type, buf, (uint32_t)len, NULL, 0, time_left(c));
	free(buf);
	return r < 0 ? r : 0;
}

/* Receives one frame (any fds it carries are closed). */
static int ctl_recv(struct ctl *c, struct r2_frame *f)
{
	int left = time_left(c);
	int r;

	if (left == 0)
		return -ETIMEDOUT;
	r = r2_frame_recv(c->fd, &c->rd, f, left);
	if (r < 0)
		return r;
	for (int i = 0; i < f->nfds && i < R2_FRAME_MAX_FDS; i++) {
		if (f->fds[i] >= 0)
			close(f->fds[i]);
		f->fds[i] = -1;
	}
	return 0;
}

/* Sends a request and receives its reply of type want. A RESULT instead (the
 * daemon's generic answer) is an error when its status is non-zero; with
 * want == MSG_RESULT a zero status is success. Returns 0 with *f filled (the
 * caller frees it), or the exit code after reporting. */
static int ctl_call(struct ctl *c, const char *what, uint16_t type, const ProtobufCMessage *req,
		    uint16_t want, struct r2_frame *f)
{
	int r;

	memset(f, 0, sizeof(*f));
	r = ctl_send(c, type, req);
	if (r < 0)
		return report_io(c, what, r);
	r = ctl_recv(c, f);
	if (r < 0)
		return report_io(c, what, r);
	if (f->type == R2CCL__MSG_TYPE__MSG_RESULT) {
		R2ccl__Result *res = r2ccl__result__unpack(NULL, f->len, f->payload);
		int status;

		if (!res) {
			r2_frame_free(f);
			return report_io(c, what, -EPROTO);
		}
		status = res->status;
		if (status != 0 || want != R2CCL__MSG_TYPE__MSG_RESULT) {
			if (status == 0) /* a RESULT where data was expected */
				status = -EPROTO;
			r = report_status(c, what, status, res->error);
			r2ccl__result__free_unpacked(res, NULL);
			r2_frame_free(f);
			return r;
		}
		r2ccl__result__free_unpacked(res, NULL);
		return 0;
	}
	if (f->type != want) {
		r = report(c, EXIT_FAIL, -EPROTO, "%s: unexpected reply (message type %u)", what,
			   f->type);
		r2_frame_free(f);
		return r;
	}
	return 0;
}

static int ctl_connect(struct ctl *c)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	R2ccl__Hello hello = R2CCL__HELLO__INIT;
	R2ccl__HelloReply *rep;
	struct r2_frame f;
	struct timeval tv;
	int r, err;

	if (strlen(c->socket) >= sizeof(sa.sun_path))
		return report(c, EXIT_USAGE, -ENAMETOOLONG, "socket path too long: %s", c->socket);
	strcpy(sa.sun_path, c->socket);
	c->deadline_ms = now_ms() + (uint64_t)c->timeout_ms;
	r2_frame_reader_init(&c->rd, CTL_MAX_REPLY);

	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return report(c, EXIT_FAIL, -errno, "socket: %s", strerror(errno));
	/* A Unix-socket connect waits for a full backlog up to SO_SNDTIMEO. */
	tv.tv_sec = c->timeout_ms / 1000;
	tv.tv_usec = (c->timeout_ms % 1000) * 1000;
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = errno;
		if (err == ENOENT || err == ECONNREFUSED || err == ENOTDIR)
			return report(c, EXIT_NOT_RUNNING, -err,
				      "cannot connect to %s: %s (is r2ccld running?)", c->socket,
				      strerror(err));
		if (err == EACCES || err == EPERM)
			return report(c, EXIT_DENIED, -err,
				      "cannot connect to %s: %s (see socket_mode and socket_group "
				      "in r2ccld.conf)",
				      c->socket, strerror(err));
		if (err == EAGAIN || err == EWOULDBLOCK)
			err = ETIMEDOUT;
		return report(c, EXIT_FAIL, -err, "cannot connect to %s: %s", c->socket,
			      strerror(err));
	}
	/* The framing layer waits with poll() and reads until EAGAIN. */
	r = fcntl(c->fd, F_GETFL);
	if (r < 0 || fcntl(c->fd, F_SETFL, r | O_NONBLOCK) < 0)
		return report(c, EXIT_FAIL, -errno, "fcntl: %s", strerror(errno));

	hello.proto_version = R2CCL__PROTO_VERSION__PROTO_VERSION_CURRENT;
	hello.client_name = "r2cclctl";
	hello.lib_version = R2CCL_VERSION_STRING;
	hello.control_only = true;
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

static void ctl_close(struct ctl *c)
{
	r2_frame_reader_reset(&c->rd);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

/* MSG_STATUS -> StatusReply (also checks its status). */
static int get_status(struct ctl *c, R2ccl__StatusReply **out)
{
	R2ccl__StatusRequest req = R2CCL__STATUS_REQUEST__INIT;
	R2ccl__StatusReply *rep;
	struct r2_frame f;
	int r;

	req.req_id = CTL_REQ_ID;
	r = ctl_call(c, c->cmd, R2CCL__MSG_TYPE__MSG_STATUS, &req.base,
		     R2CCL__MSG_TYPE__MSG_STATUS_REPLY, &f);
	if (r)
		return r;
	rep = r2ccl__status_reply__unpack(NULL, f.len, f.payload);
	r2_frame_free(&f);
	if (!rep)
		return report_io(c, c->cmd, -EPROTO);
	if (rep->status != 0) {
		r = report_status(c, c->cmd, rep->status, rep->error);
		r2ccl__status_reply__free_unpacked(rep, NULL);
		return r;
	}
	*out = rep;
	return 0;
}

/* MSG_RAILS -> RailsReply. */
static int get_rails(struct ctl *c, R2ccl__RailsReply **out)
{
	R2ccl__RailsRequest req = R2CCL__RAILS_REQUEST__INIT;
	R2ccl__RailsReply *rep;
	struct r2_frame f;
	int r;

	req.req_id = CTL_REQ_ID;
	r = ctl_call(c, c->cmd, R2CCL__MSG_TYPE__MSG_RAILS, &req.base,
		     R2CCL__MSG_TYPE__MSG_RAILS_REPLY, &f);
	if (r)
		return r;
	rep = r2ccl__rails_reply__unpack(NULL, f.len, f.payload);
	r2_frame_free(&f);
	if (!rep)
		return report_io(c, c->cmd, -EPROTO);
	if (rep->status != 0) {
		r = report_status(c, c->cmd, rep->status, rep->error);
		r2ccl__rails_reply__free_unpacked(rep, NULL);
		return r;
	}
	*out = rep;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Sections shared by several commands (table and JSON forms)               */

static void print_nics(struct ctl *c, const R2ccl__StatusReply *st)
{
	static const char *const hdr[] = { "NAME", "KIND", "STATE", ">SPEED", ">NUMA", "RAIL",
					   "ADDRESS", NULL };
	static const char *const hdr_v[] = { "NAME", "KIND", "STATE", ">SPEED", ">NUMA", "RAIL",
					     "ADDRESS", ">MTU", "PCI", NULL };
	struct table t;
	char b1[32], b2[16];

	tbl_init(&t, c->verbose ? hdr_v : hdr);
	for (size_t i = 0; i < st->n_nics; i++) {
		const R2ccl__NicInfo *n = st->nics[i];

		tbl_cell(&t, "%s", or_dash(n->name));
		tbl_cell(&t, "%s", or_dash(n->kind));
		tbl_cell(&t, "%s", or_dash(n->state));
		tbl_cell(&t, "%s", fmt_speed(n->speed_mbps, b1, sizeof(b1)));
		tbl_cell(&t, "%s", fmt_numa(n->numa_node, b2, sizeof(b2)));
		/* a rail shows its transport (and RDMA device), "yes" if it has none open */
		if (n->transport && n->transport[0])
			tbl_cell(&t, "%s%s%s", n->transport, n->rdma_device[0] ? " " : "",
				 n->rdma_device);
		else
			tbl_cell(&t, "%s", n->selected ? "yes" : "-");
		tbl_cell(&t, "%s", or_dash(n->address));
		if (c->verbose) {
			if (n->mtu)
				tbl_cell(&t, "%u", n->mtu);
			else
				tbl_cell(&t, "-");
			tbl_cell(&t, "%s", or_dash(n->pci));
		}
	}
	tbl_print(&t, stdout);
	tbl_free(&t);
}

static void json_nics(struct jw *j, const R2ccl__StatusReply *st)
{
	jw_open(j, "nics", '[');
	for (size_t i = 0; i < st->n_nics; i++) {
		const R2ccl__NicInfo *n = st->nics[i];

		jw_open(j, NULL, '{');
		jw_str(j, "name", n->name);
		jw_str(j, "kind", n->kind);
		jw_str(j, "state", n->state);
		jw_u64(j, "speed_mbps", n->speed_mbps);
		jw_i64(j, "numa_node", n->numa_node);
		jw_bool(j, "rail", n->selected);
		jw_str(j, "address", n->address);
		jw_str(j, "pci", n->pci);
		jw_u64(j, "mtu", n->mtu);
		jw_str(j, "transport", n->transport);
		jw_str(j, "rdma_device", n->rdma_device);
		jw_close(j, '}');
	}
	jw_close(j, ']');
}

static void print_gpus(const R2ccl__StatusReply *st)
{
	static const char *const hdr[] = { "GPU", "NAME", "PCI", ">NUMA", NULL };
	struct table t;
	char b[16];

	tbl_init(&t, hdr);
	for (size_t i = 0; i < st->n_gpus; i++) {
		tbl_cell(&t, "%zu", i);
		tbl_cell(&t, "%s", or_dash(st->gpus[i]->name));
		tbl_cell(&t, "%s", or_dash(st->gpus[i]->pci));
		tbl_cell(&t, "%s", fmt_numa(st->gpus[i]->numa_node, b, sizeof(b)));
	}
	tbl_print(&t, stdout);
	tbl_free(&t);
}

static void json_gpus(struct jw *j, const R2ccl__StatusReply *st)
{
	jw_open(j, "gpus", '[');
	for (size_t i = 0; i < st->n_gpus; i++) {
		jw_open(j, NULL, '{');
		jw_str(j, "name", st->gpus[i]->name);
		jw_str(j, "pci", st->gpus[i]->pci);
		jw_i64(j, "numa_node", st->gpus[i]->numa_node);
		jw_close(j, '}');
	}
	jw_close(j, ']');
}

static void print_sessions(struct ctl *c, const R2ccl__StatusReply *st)
{
	static const char *const hdr[] = { ">ID", ">PID", ">UID", "TENANT", "NAME",
					   ">REGIONS", ">BYTES", ">OPS", NULL };
	static const char *const hdr_v[] = { ">ID", ">PID", ">UID", ">GID", "TENANT", "NAME",
					     "KIND", ">REGIONS", ">BYTES", ">OPS", NULL };
	struct table t;
	char b[32];

	tbl_init(&t, c->verbose ? hdr_v : hdr);
	for (size_t i = 0; i < st->n_sessions; i++) {
		const R2ccl__SessionInfo *s = st->sessions[i];

		tbl_cell(&t, "%" PRIu64, s->id);
		tbl_cell(&t, "%d", s->pid);
		tbl_cell(&t, "%u", s->uid);
		if (c->verbose)
			tbl_cell(&t, "%u", s->gid);
		tbl_cell(&t, "%s", or_dash(s->tenant));
		tbl_cell(&t, "%s", or_dash(s->client_name));
		if (c->verbose)
			tbl_cell(&t, "%s", s->control_only ? "control" : "client");
		tbl_cell(&t, "%u", s->mem_regions);
		tbl_cell(&t, "%s", fmt_bytes(s->mem_bytes, b, sizeof(b)));
		tbl_cell(&t, "%" PRIu64, s->ops_total);
	}
	tbl_print(&t, stdout);
	tbl_free(&t);
}

static void json_sessions(struct jw *j, const R2ccl__StatusReply *st)
{
	jw_open(j, "sessions", '[');
	for (size_t i = 0; i < st->n_sessions; i++) {
		const R2ccl__SessionInfo *s = st->sessions[i];

		jw_open(j, NULL, '{');
		jw_u64(j, "id", s->id);
		jw_i64(j, "pid", s->pid);
		jw_u64(j, "uid", s->uid);
		jw_u64(j, "gid", s->gid);
		jw_str(j, "tenant", s->tenant);
		jw_str(j, "client_name", s->client_name);
		jw_bool(j, "control_only", s->control_only);
		jw_u64(j, "mem_regions", s->mem_regions);
		jw_u64(j, "mem_bytes", s->mem_bytes);
		jw_u64(j, "ops_total", s->ops_total);
		jw_close(j, '}');
	}
	jw_close(j, ']');
}

static void print_comms(const R2ccl__StatusReply *st)
{
	static const char *const hdr[] = { ">ID", "UID", ">NRANKS", ">LOCAL", ">JOINED",
					   ">HOSTS", "STATE", "MODE", "TENANT", ">OPS", NULL };
	struct table t;

	tbl_init(&t, hdr);
	for (size_t i = 0; i < st->n_comms; i++) {
		const R2ccl__CommInfo *m = st->comms[i];

		tbl_cell(&t, "%u", m->id);
		tbl_cell(&t, "%s", or_dash(m->uid));
		tbl_cell(&t, "%u", m->nranks);
		tbl_cell(&t, "%u", m->local_ranks);
		tbl_cell(&t, "%u", m->joined);
		tbl_cell(&t, "%u", m->nhosts);
		tbl_cell(&t, "%s", or_dash(m->state));
		tbl_cell(&t, "%s", or_dash(m->mode));
		tbl_cell(&t, "%s", or_dash(m->tenant));
		tbl_cell(&t, "%" PRIu64, m->ops_total);
	}
	tbl_print(&t, stdout);
	tbl_free(&t);
}

static void json_comms(struct jw *j, const R2ccl__StatusReply *st)
{
	jw_open(j, "comms", '[');
	for (size_t i = 0; i < st->n_comms; i++) {
		const R2ccl__CommInfo *m = st->comms[i];

		jw_open(j, NULL, '{');
		jw_u64(j, "id", m->id);
		jw_str(j, "uid", m->uid);
		jw_u64(j, "nranks", m->nranks);
		jw_u64(j, "local_ranks", m->local_ranks);
		jw_u64(j, "joined", m->joined);
		jw_u64(j, "nhosts", m->nhosts);
		jw_str(j, "state", m->state);
		jw_str(j, "mode", m->mode);
		jw_str(j, "tenant", m->tenant);
		jw_u64(j, "ops_total", m->ops_total);
		jw_close(j, '}');
	}
	jw_close(j, ']');
}

/* Proxy buffer pools, one per rail (daemon/bufpool.c). */
static void print_pools(const R2ccl__StatusReply *st)
{
	static const char *const hdr[] = { "NIC", ">NUMA", ">SIZE", ">MAX", ">IN USE", ">HIGH",
					   ">BUFFER", ">WAITS", ">TIMEOUTS", NULL };
	char b[6][32];
	struct table t;

	tbl_init(&t, hdr);
	for (size_t i = 0; i < st->n_pools; i++) {
		const R2ccl__PoolInfo *p = st->pools[i];

		tbl_cell(&t, "%s", or_dash(p->nic));
		tbl_cell(&t, "%s", fmt_numa(p->numa_node, b[0], sizeof(b[0])));
		tbl_cell(&t, "%s", fmt_bytes(p->bytes, b[1], sizeof(b[1])));
		tbl_cell(&t, "%s", fmt_bytes(p->max_bytes, b[2], sizeof(b[2])));
		tbl_cell(&t, "%s", fmt_bytes(p->in_use_bytes, b[3], sizeof(b[3])));
		tbl_cell(&t, "%s", fmt_bytes(p->high_water_bytes, b[4], sizeof(b[4])));
		tbl_cell(&t, "%s", fmt_bytes(p->buf_size, b[5], sizeof(b[5])));
		tbl_cell(&t, "%" PRIu64, p->waits_total);
		tbl_cell(&t, "%" PRIu64, p->timeouts_total);
	}
	tbl_print(&t, stdout);
	tbl_free(&t);
}

static void json_pools(struct jw *j, const R2ccl__StatusReply *st)
{
	jw_open(j, "pools", '[');
	for (size_t i = 0; i < st->n_pools; i++) {
		const R2ccl__PoolInfo *p = st->pools[i];

		jw_open(j, NULL, '{');
		jw_str(j, "nic", p->nic);
		jw_i64(j, "numa_node", p->numa_node);
		jw_u64(j, "bytes", p->bytes);
		jw_u64(j, "max_bytes", p->max_bytes);
		jw_u64(j, "in_use_bytes", p->in_use_bytes);
		jw_u64(j, "high_water_bytes", p->high_water_bytes);
		jw_u64(j, "buf_size", p->buf_size);
		jw_u64(j, "slab_size", p->slab_size);
		jw_u64(j, "gets_total", p->gets_total);
		jw_u64(j, "waits_total", p->waits_total);
		jw_u64(j, "timeouts_total", p->timeouts_total);
		jw_u64(j, "registrations", p->registrations);
		jw_close(j, '}');
	}
	jw_close(j, ']');
}

static void print_params(const R2ccl__StatusReply *st)
{
	static const char *const hdr[] = { "PARAMETER", "VALUE", "SOURCE", NULL };
	struct table t;

	tbl_init(&t, hdr);
	for (size_t i = 0; i < st->n_params; i++) {
		tbl_cell(&t, "%s", or_dash(st->params[i]->name));
		tbl_cell(&t, "%s", st->params[i]->value ? st->params[i]->value : "");
		tbl_cell(&t, "%s", or_dash(st->params[i]->source));
	}
	tbl_print(&t, stdout);
	tbl_free(&t);
}

static void json_params(struct jw *j, const R2ccl__StatusReply *st)
{
	jw_open(j, "params", '[');
	for (size_t i = 0; i < st->n_params; i++) {
		jw_open(j, NULL, '{');
		jw_str(j, "name", st->params[i]->name);
		jw_str(j, "value", st->params[i]->value);
		jw_str(j, "source", st->params[i]->source);
		jw_close(j, '}');
	}
	jw_close(j, ']');
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                 */

static int cmd_status(struct ctl *c, int argc, char **argv)
{
	R2ccl__StatusReply *st = NULL;
	char b1[32], b2[32];
	int r = get_status(c, &st);

	if (r)
		return r;
	if (c->json) {
		struct jw j;

		jw_begin(&j);
		jw_open(&j, "daemon", '{');
		jw_str(&j, "version", st->version);
		jw_i64(&j, "pid", st->pid);
		jw_u64(&j, "uptime_s", st->uptime_s);
		jw_str(&j, "hostname", st->hostname);
		jw_str(&j, "config_file", st->config_file);
		jw_str(&j, "socket", st->socket);
		jw_u64(&j, "cpus", st->cpus);
		jw_u64(&j, "numa_nodes", st->numa_nodes);
		jw_bool(&j, "mps", st->mps);
		jw_u64(&j, "pool_bytes", st->pool_bytes);
		jw_u64(&j, "pool_used_bytes", st->pool_used_bytes);
		jw_u64(&j, "ops_total", st->ops_total);
		jw_u64(&j, "op_errors_total", st->op_errors_total);
		jw_close(&j, '}');
		json_nics(&j, st);
		json_gpus(&j, st);
		json_sessions(&j, st);
		json_comms(&j, st);
		json_pools(&j, st);
		json_params(&j, st);
		jw_end(&j);
		goto out;
	}
	{
		char *host = safe_text(or_dash(st->hostname));
		char *ver = safe_text(or_dash(st->version));

		printf("r2ccld %s on %s: running\n", ver, host);
		free(host);
		free(ver);
	}
	kv("pid", "%d", st->pid);
	kv("uptime", "%s", fmt_duration(st->uptime_s, b1, sizeof(b1)));
	kv("config", "%s", st->config_file && st->config_file[0] ? st->config_file
								  : "(none, defaults)");
	kv("socket", "%s", or_dash(st->socket));
	kv("cpus", "%u (%u NUMA node%s)", st->cpus, st->numa_nodes,
	   st->numa_nodes == 1 ? "" : "s");
	if (st->n_gpus)
		kv("gpus", "%zu, MPS %s%s", st->n_gpus, st->mps ? "on" : "off",
		   st->mps ? "" : " (run r2ccld and its clients under MPS, see the operations guide)");
	else
		kv("mps", "%s", st->mps ? "on" : "off");
	kv("pool", "%s used of %s", fmt_bytes(st->pool_used_bytes, b1, sizeof(b1)),
	   fmt_bytes(st->pool_bytes, b2, sizeof(b2)));
	kv("operations", "%" PRIu64 " (%" PRIu64 " failed)", st->ops_total, st->op_errors_total);
	kv("sessions", "%zu", st->n_sessions);
	kv("comms", "%zu", st->n_comms);

	printf("\nNICs:\n");
	print_nics(c, st);
	if (st->n_gpus) {
		printf("\nGPUs:\n");
		print_gpus(st);
	}
	if (st->n_sessions) {
		printf("\nSessions:\n");
		print_sessions(c, st);
	}
	if (st->n_comms) {
		printf("\nCommunicators:\n");
		print_comms(st);
	}
	if (st->n_pools) {
		printf("\nProxy buffer pools:\n");
		print_pools(st);
	}
	if (c->verbose) {
		printf("\nParameters:\n");
		print_params(st);
	}
out:
	r2ccl__status_reply__free_unpacked(st, NULL);
	return EXIT_OK;
}

/* sessions, comms, nics: one section of the status reply. */
static int cmd_section(struct ctl *c, int argc, char **argv)
{
	R2ccl__StatusReply *st = NULL;
	int r = get_status(c, &st);

	if (r)
		return r;
	if (c->json) {
		struct jw j;

		jw_begin(&j);
		if (!strcmp(c->cmd, "sessions"))
			json_sessions(&j, st);
		else if (!strcmp(c->cmd, "comms"))
			json_comms(&j, st);
		else
			json_nics(&j, st);
		jw_end(&j);
	} else if (!strcmp(c->cmd, "sessions")) {
		print_sessions(c, st);
	} else if (!strcmp(c->cmd, "comms")) {
		print_comms(st);
	} else {
		print_nics(c, st);
	}
	r2ccl__status_reply__free_unpacked(st, NULL);
	return EXIT_OK;
}

struct tenant {
	const char *name;
	size_t sessions, comms;
	uint64_t mem_regions, mem_bytes, ops_total;
	size_t first; /* index of its first session, -1 if none */
};

static int tenant_cmp(const void *a, const void *b)
{
	return strcmp(((const struct tenant *)a)->name, ((const struct tenant *)b)->name);
}

static struct tenant *tenant_get(struct tenant *v, size_t *n, const char *name)
{
	for (size_t i = 0; i < *n; i++)
		if (!strcmp(v[i].name, name))
			return &v[i];
	memset(&v[*n], 0, sizeof(v[*n]));
	v[*n].name = name;
	v[*n].first = SIZE_MAX;
	return &v[(*n)++];
}

static int cmd_tenants(struct ctl *c, int argc, char **argv)
{
	static const char *const hdr[] = { "TENANT", ">SESSIONS", ">COMMS", ">REGIONS", ">BYTES",
					   ">OPS", "PIDS", NULL };
	R2ccl__StatusReply *st = NULL;
	struct tenant *v;
	size_t n = 0;
	int r = get_status(c, &st);

	if (r)
		return r;
	v = calloc(st->n_sessions + st->n_comms + 1, sizeof(*v));
	if (!v) {
		r2ccl__status_reply__free_unpacked(st, NULL);
		return report(c, EXIT_FAIL, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < st->n_sessions; i++) {
		const R2ccl__SessionInfo *s = st->sessions[i];
		struct tenant *t = tenant_get(v, &n, s->tenant ? s->tenant : "");

		if (t->first == SIZE_MAX)
			t->first = i;
		t->sessions++;
		t->mem_regions += s->mem_regions;
		t->mem_bytes += s->mem_bytes;
		t->ops_total += s->ops_total;
	}
	for (size_t i = 0; i < st->n_comms; i++)
		tenant_get(v, &n, st->comms[i]->tenant ? st->comms[i]->tenant : "")->comms++;
	qsort(v, n, sizeof(*v), tenant_cmp);

	if (c->json) {
		struct jw j;

		jw_begin(&j);
		jw_open(&j, "tenants", '[');
		for (size_t i = 0; i < n; i++) {
			jw_open(&j, NULL, '{');
			jw_str(&j, "tenant", v[i].name);
			jw_u64(&j, "sessions", v[i].sessions);
			jw_u64(&j, "comms", v[i].comms);
			jw_u64(&j, "mem_regions", v[i].mem_regions);
			jw_u64(&j, "mem_bytes", v[i].mem_bytes);
			jw_u64(&j, "ops_total", v[i].ops_total);
			jw_open(&j, "session_ids", '[');
			for (size_t k = 0; k < st->n_sessions; k++)
				if (!strcmp(st->sessions[k]->tenant ? st->sessions[k]->tenant : "",
					    v[i].name))
					jw_u64(&j, NULL, st->sessions[k]->id);
			jw_close(&j, ']');
			jw_open(&j, "pids", '[');
			for (size_t k = 0; k < st->n_sessions; k++)
				if (!strcmp(st->sessions[k]->tenant ? st->sessions[k]->tenant : "",
					    v[i].name))
					jw_i64(&j, NULL, st->sessions[k]->pid);
			jw_close(&j, ']');
			jw_close(&j, '}');
		}
		jw_close(&j, ']');
		jw_end(&j);
	} else {
		struct table t;
		char b[32];

		tbl_init(&t, hdr);
		for (size_t i = 0; i < n; i++) {
			char pids[96] = "";
			size_t len = 0, shown = 0;

			for (size_t k = 0; k < st->n_sessions; k++) {
				const R2ccl__SessionInfo *s = st->sessions[k];

				if (strcmp(s->tenant ? s->tenant : "", v[i].name))
					continue;
				if (shown == 8) {
					snprintf(pids + len, sizeof(pids) - len, ",...");
					break;
				}
				len += (size_t)snprintf(pids + len, sizeof(pids) - len, "%s%d",
							shown ? "," : "", s->pid);
				shown++;
				if (len >= sizeof(pids))
					break;
			}
			tbl_cell(&t, "%s", or_dash(v[i].name));
			tbl_cell(&t, "%zu", v[i].sessions);
			tbl_cell(&t, "%zu", v[i].comms);
			tbl_cell(&t, "%" PRIu64, v[i].mem_regions);
			tbl_cell(&t, "%s", fmt_bytes(v[i].mem_bytes, b, sizeof(b)));
			tbl_cell(&t, "%" PRIu64, v[i].ops_total);
			tbl_cell(&t, "%s", or_dash(pids));
		}
		tbl_print(&t, stdout);
		tbl_free(&t);
	}
	free(v);
	r2ccl__status_reply__free_unpacked(st, NULL);
	return EXIT_OK;
}

static int cmd_rails(struct ctl *c, int argc, char **argv)
{
	static const char *const hdr[] = { "NIC", "STATE", "TRANSPORT", ">SPEED", ">MEASURED",
					   ">TX", ">RX", ">ERRORS", ">FAILOVERS", "SINCE",
					   "CAUSE", NULL };
	R2ccl__RailsReply *rr = NULL;
	int r = get_rails(c, &rr);

	if (r)
		return r;
	if (c->json) {
		struct jw j;

		jw_begin(&j);
		jw_open(&j, "rails", '[');
		for (size_t i = 0; i < rr->n_rails; i++) {
			const R2ccl__RailInfo *x = rr->rails[i];

			jw_open(&j, NULL, '{');
			jw_str(&j, "nic", x->nic);
			jw_u64(&j, "index", x->index);
			jw_str(&j, "state", x->state);
			jw_bool(&j, "drained", x->drained);
			jw_str(&j, "transport", x->transport);
			jw_u64(&j, "speed_mbps", x->speed_mbps);
			jw_u64(&j, "measured_mbps", x->measured_mbps);
			jw_u64(&j, "tx_bytes_total", x->tx_bytes_total);
			jw_u64(&j, "rx_bytes_total", x->rx_bytes_total);
			jw_u64(&j, "errors_total", x->errors_total);
			jw_u64(&j, "state_changes_total", x->state_changes_total);
			jw_u64(&j, "state_since_s", x->state_since_s);
			jw_u64(&j, "failovers_total", x->failovers_total);
			jw_str(&j, "cause", x->cause);
			jw_close(&j, '}');
		}
		jw_close(&j, ']');
		jw_end(&j);
	} else {
		struct table t;
		char b1[32], b2[32], b3[32], b4[32], b5[32];

		tbl_init(&t, hdr);
		for (size_t i = 0; i < rr->n_rails; i++) {
			const R2ccl__RailInfo *x = rr->rails[i];

			tbl_cell(&t, "%s", or_dash(x->nic));
			tbl_cell(&t, "%s%s", or_dash(x->state), x->drained ? " (drained)" : "");
			tbl_cell(&t, "%s", or_dash(x->transport));
			tbl_cell(&t, "%s", fmt_speed(x->speed_mbps, b1, sizeof(b1)));
			tbl_cell(&t, "%s", fmt_speed(x->measured_mbps, b2, sizeof(b2)));
			tbl_cell(&t, "%s", fmt_bytes(x->tx_bytes_total, b3, sizeof(b3)));
			tbl_cell(&t, "%s", fmt_bytes(x->rx_bytes_total, b4, sizeof(b4)));
			tbl_cell(&t, "%" PRIu64, x->errors_total);
			tbl_cell(&t, "%" PRIu64, x->failovers_total);
			tbl_cell(&t, "%s", fmt_duration(x->state_since_s, b5, sizeof(b5)));
			tbl_cell(&t, "%s", or_dash(x->cause));
		}
		tbl_print(&t, stdout);
		tbl_free(&t);
	}
	r2ccl__rails_reply__free_unpacked(rr, NULL);
	return EXIT_OK;
}

static int cmd_peers(struct ctl *c, int argc, char **argv)
{
	static const char *const hdr[] = { "HOST", "RAIL", "ADDRESS", "STATE", ">RTT",
					   ">LAST-HB", ">MISSED", ">COMMS", ">ERRORS",
					   ">FAILOVERS", "CAUSE", NULL };
	R2ccl__RailsReply *rr = NULL;
	int r = get_rails(c, &rr);

	if (r)
		return r;
	if (c->json) {
		struct jw j;

		jw_begin(&j);
		jw_open(&j, "peers", '[');
		for (size_t i = 0; i < rr->n_peers; i++) {
			const R2ccl__PeerInfo *p = rr->peers[i];

			jw_open(&j, NULL, '{');
			jw_str(&j, "host", p->host);
			jw_str(&j, "rail", p->rail);
			jw_str(&j, "address", p->address);
			jw_str(&j, "state", p->state);
			jw_u64(&j, "rtt_us", p->rtt_us);
			jw_u64(&j, "last_heartbeat_ms", p->last_heartbeat_ms);
			jw_u64(&j, "missed_heartbeats", p->missed_heartbeats);
			jw_u64(&j, "comms", p->comms);
			jw_u64(&j, "errors_total", p->errors_total);
			jw_u64(&j, "failovers_total", p->failovers_total);
			jw_str(&j, "cause", p->cause);
			jw_close(&j, '}');
		}
		jw_close(&j, ']');
		jw_end(&j);
	} else {
		struct table t;

		tbl_init(&t, hdr);
		for (size_t i = 0; i < rr->n_peers; i++) {
			const R2ccl__PeerInfo *p = rr->peers[i];

			tbl_cell(&t, "%s", or_dash(p->host));
			tbl_cell(&t, "%s", or_dash(p->rail));
			tbl_cell(&t, "%s", or_dash(p->address));
			tbl_cell(&t, "%s", or_dash(p->state));
			tbl_cell(&t, "%" PRIu64 "us", p->rtt_us);
			tbl_cell(&t, "%" PRIu64 "ms", p->last_heartbeat_ms);
			tbl_cell(&t, "%u", p->missed_heartbeats);
			tbl_cell(&t, "%u", p->comms);
			tbl_cell(&t, "%" PRIu64, p->errors_total);
			tbl_cell(&t, "%" PRIu64, p->failovers_total);
			tbl_cell(&t, "%s", or_dash(p->cause));
		}
		tbl_print(&t, stdout);
		tbl_free(&t);
	}
	r2ccl__rails_reply__free_unpacked(rr, NULL);
	return EXIT_OK;
}

static int cmd_events(struct ctl *c, int argc, char **argv)
{
	static const char *const hdr[] = { "TIME", "SEVERITY", "KIND", "SUBJECT", "MESSAGE",
					   NULL };
	R2ccl__EventsRequest req = R2CCL__EVENTS_REQUEST__INIT;
	R2ccl__EventsReply *ev;
	struct r2_frame f;
	int r;

	req.req_id = CTL_REQ_ID;
	r = ctl_call(c, c->cmd, R2CCL__MSG_TYPE__MSG_EVENTS, &req.base,
		     R2CCL__MSG_TYPE__MSG_EVENTS_REPLY, &f);
	if (r)
		return r;
	ev = r2ccl__events_reply__unpack(NULL, f.len, f.payload);
	r2_frame_free(&f);
	if (!ev)
		return report_io(c, c->cmd, -EPROTO);
	if (ev->status != 0) {
		r = report_status(c, c->cmd, ev->status, ev->error);
		r2ccl__events_reply__free_unpacked(ev, NULL);
		return r;
	}
	if (c->json) {
		struct jw j;

		jw_begin(&j);
		jw_u64(&j, "last_seq", ev->last_seq);
		jw_open(&j, "events", '[');
		for (size_t i = 0; i < ev->n_events; i++) {
			const R2ccl__Event *e = ev->events[i];

			jw_open(&j, NULL, '{');
			jw_u64(&j, "seq", e->seq);
			jw_u64(&j, "time_unix_ms", e->time_unix_ms);
			jw_str(&j, "severity", e->severity);
			jw_str(&j, "kind", e->kind);
			jw_str(&j, "subject", e->subject);
			jw_str(&j, "message", e->message);
			jw_close(&j, '}');
		}
		jw_close(&j, ']');
		jw_end(&j);
	} else {
		struct table t;

		tbl_init(&t, hdr);
		for (size_t i = 0; i < ev->n_events; i++) {
			const R2ccl__Event *e = ev->events[i];
			time_t s = (time_t)(e->time_unix_ms / 1000);
			struct tm tm;
			char ts[32];

			if (localtime_r(&s, &tm))
				strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S", &tm);
			else
				snprintf(ts, sizeof(ts), "%" PRIu64, e->time_unix_ms / 1000);
			tbl_cell(&t, "%s.%03u", ts, (unsigned)(e->time_unix_ms % 1000));
			tbl_cell(&t, "%s", or_dash(e->severity));
			tbl_cell(&t, "%s", or_dash(e->kind));
			tbl_cell(&t, "%s", or_dash(e->subject));
			tbl_cell(&t, "%s", e->message ? e->message : "");
		}
		tbl_print(&t, stdout);
		tbl_free(&t);
	}
	r2ccl__events_reply__free_unpacked(ev, NULL);
	return EXIT_OK;
}

/* Prints the outcome of an administrative command (RESULT status 0). */
static int done(struct ctl *c, const char *text, const char *nic, uint32_t comm)
{
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

static int parse_u32(const char *s, uint32_t *out)
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

static int cmd_rebalance(struct ctl *c, int argc, char **argv)
{
	R2ccl__Rebalance req = R2CCL__REBALANCE__INIT;
	struct r2_frame f;
	char text[96];
	int r;

	/* COMM was checked before connecting. */
	req.req_id = CTL_REQ_ID;
	if (argc > 0)
		parse_u32(argv[0], &req.comm_id);
	r = ctl_call(c, c->cmd, R2CCL__MSG_TYPE__MSG_REBALANCE, &req.base,
		     R2CCL__MSG_TYPE__MSG_RESULT, &f);
	if (r)
		return r;
	r2_frame_free(&f);
	if (req.comm_id)
		snprintf(text, sizeof(text), "communicator %u: re-plan requested", req.comm_id);
	else
		snprintf(text, sizeof(text), "every communicator: re-plan requested");
	return done(c, text, NULL, req.comm_id);
}

static int cmd_nic_admin(struct ctl *c, int argc, char **argv)
{
	R2ccl__NicAdmin req = R2CCL__NIC_ADMIN__INIT;
	struct r2_frame f;
	char text[160];
	int r;

	req.req_id = CTL_REQ_ID;
	req.nic = argv[0];
	req.drain = !strcmp(c->cmd, "drain");
	r = ctl_call(c, c->cmd, R2CCL__MSG_TYPE__MSG_NIC_ADMIN, &req.base,
		     R2CCL__MSG_TYPE__MSG_RESULT, &f);
	if (r)
		return r;
	r2_frame_free(&f);
	snprintf(text, sizeof(text), "%s: %s", argv[0],
		 req.drain ? "drained (traffic moves to the other rails)" : "in use again");
	return done(c, text, argv[0], 0);
}

static int cmd_version(struct ctl *c, int argc, char **argv)
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

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: r2cclctl [OPTION...] COMMAND [ARG]\n"
		"Query and control r2ccld, the R2CCL daemon of this host.\n"
		"\n"
		"Commands:\n"
		"  status            daemon, NICs, GPUs, sessions, communicators\n"
		"                    (-v: parameters and their sources)\n"
		"  sessions          client sessions\n"
		"  comms             communicators\n"
		"  nics              network interfaces and which are rails\n"
		"  tenants           sessions and communicators grouped by tenant\n"
		"  rails             rail health: state, measured bandwidth, errors\n"
		"  peers             peer hosts per rail: heartbeats\n"
		"  events            recent events: rail state changes, re-plans\n"
		"  rebalance [COMM]  re-plan communicator COMM now (every one if omitted)\n"
		"  drain NIC         move traffic off NIC (maintenance)\n"
		"  undrain NIC       use NIC again\n"
		"  version           versions of r2cclctl and r2ccld\n"
		"  help              this text\n"
		"\n"
		"Options:\n"
		"  -s, --socket PATH   daemon socket (default: $R2CCL_SOCKET, else %s)\n"
		"  -j, --json          print one JSON object (\"schema_version\": %d)\n"
		"  -t, --timeout MS    give up after MS milliseconds (default %d)\n"
		"  -v, --verbose       more detail\n"
		"  -h, --help          this text\n"
		"\n"
		"Exit status: 0 ok, 1 failure, 2 usage, 3 daemon not running, "
		"4 permission denied.\n",
		R2CCL_DEFAULT_SOCKET, CTL_SCHEMA_VERSION, CTL_DEFAULT_TIMEOUT_MS);
}

static int cmd_help(struct ctl *c, int argc, char **argv)
{
	usage(stdout);
	return EXIT_OK;
}

struct command {
	const char *name;
	int min_args, max_args;
	bool connect;
	int (*fn)(struct ctl *c, int argc, char **argv);
};

static const struct command commands[] = {
	{ "status", 0, 0, true, cmd_status },
	{ "sessions", 0, 0, true, cmd_section },
	{ "comms", 0, 0, true, cmd_section },
	{ "nics", 0, 0, true, cmd_section },
	{ "tenants", 0, 0, true, cmd_tenants },
	{ "rails", 0, 0, true, cmd_rails },
	{ "peers", 0, 0, true, cmd_peers },
	{ "events", 0, 0, true, cmd_events },
	{ "rebalance", 0, 1, true, cmd_rebalance },
	{ "drain", 1, 1, true, cmd_nic_admin },
	{ "undrain", 1, 1, true, cmd_nic_admin },
	{ "version", 0, 0, false, cmd_version },
	{ "help", 0, 0, false, cmd_help },
};

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("r2cclctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'r2cclctl help'.\n", stderr);
	return EXIT_USAGE;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "timeout", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl c = { .timeout_ms = CTL_DEFAULT_TIMEOUT_MS, .fd = -1 };
	const struct command *cmd = NULL;
	int o, r, nargs;
	char **args;

	signal(SIGPIPE, SIG_IGN);
	opterr = 0;
	while ((o = getopt_long(argc, argv, "s:jt:vh", opts, NULL)) != -1) {
		uint32_t ms;

		switch (o) {
		case 's':
			if (!optarg[0])
				return usage_error("--socket needs a path");
			c.socket = optarg;
			break;
		case 'j':
			c.json = true;
			break;
		case 't':
			if (parse_u32(optarg, &ms) < 0 || ms == 0 || ms > 3600000)
				return usage_error("--timeout takes milliseconds, 1 to 3600000: '%s'",
						   optarg);
			c.timeout_ms = (int)ms;
			break;
		case 'v':
			c.verbose = true;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			if (optopt && strchr("st", optopt))
				return usage_error("option '-%c' needs a value", optopt);
			if (optopt)
				return usage_error("unknown option '-%c'", optopt);
			return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return usage_error("no command given");
	c.cmd = argv[optind];
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(commands[i].name, c.cmd))
			cmd = &commands[i];
	if (!cmd)
		return usage_error("unknown command '%s'", c.cmd);
	args = argv + optind + 1;
	nargs = argc - optind - 1;
	if (nargs < cmd->min_args)
		return usage_error("%s needs %s", cmd->name,
				   cmd->fn == cmd_nic_admin ? "a NIC name" : "an argument");
	if (nargs > cmd->max_args)
		return usage_error("too many arguments for %s", cmd->name);
	if (cmd->fn == cmd_rebalance && nargs == 1) {
		uint32_t id;

		if (parse_u32(args[0], &id) < 0 || id == 0)
			return usage_error("rebalance: COMM is a communicator id (see 'r2cclctl "
					   "comms'): '%s'",
					   args[0]);
	}
	if (cmd->fn == cmd_nic_admin && !args[0][0])
		return usage_error("%s: empty NIC name", cmd->name);

	if (!c.socket) {
		const char *env = getenv("R2CCL_SOCKET");

		c.socket = env && env[0] ? env : R2CCL_DEFAULT_SOCKET;
	}
	if (cmd->connect) {
		r = ctl_connect(&c);
		if (r) {
			ctl_close(&c);
			return r;
		}
	}
	r = cmd->fn(&c, nargs, args);
	ctl_close(&c);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "r2cclctl: write error: %s\n", strerror(errno));
		return EXIT_FAIL;
	}
	return r;
}
