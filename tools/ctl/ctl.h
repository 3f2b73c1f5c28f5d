/* SPDX-License-Identifier: MIT */
/*
 * r2cclctl's internals: the invocation, exit codes, text and JSON output, the
 * column engine that prints a section as a table or as JSON, and the
 * commands. main.c parses the arguments; talk.c talks to the daemon.
 */
#ifndef R2CCLCTL_CTL_H
#define R2CCLCTL_CTL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "r2ccl.pb-c.h"
#include "rpc.h"

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
	bool follow; /* events, tenants --follow */
	int interval_ms; /* tenants --follow: between queries (0: 1000) */
	long count;      /* tenants --follow: queries (0: until interrupted) */
	const char *cmd;
	struct r2_rpc rpc;
	char daemon_version[64];
	uint32_t proto_version;
	uint64_t session_id;
};

/* ---- text.c: terminal-safe text, units ---- */

/* Copies s for a terminal: controls and invalid UTF-8 become '?' (malloc'ed,
 * exits on ENOMEM). */
char *safe_text(const char *s);
size_t text_width(const char *s);
/* Writes s as a JSON string (escaped, invalid UTF-8 as U+FFFD). */
void json_string(FILE *f, const char *s);
void *xmalloc(size_t n);
const char *fmt_bytes(uint64_t b, char *buf, size_t len);
const char *fmt_speed(uint64_t mbps, char *buf, size_t len);
const char *fmt_duration(uint64_t s, char *buf, size_t len);
const char *fmt_numa(int n, char *buf, size_t len);
const char *or_dash(const char *s);
/* vasprintf's string (malloc'ed), NULL when it fails. */
char *vformat(const char *fmt, va_list ap);
/* The terminal-safe text of fmt (dflt when it cannot be formatted); *raw gets
 * the formatted string as it is (malloc'ed, or NULL). Both are the caller's. */
char *safe_vformat(char **raw, const char *dflt, const char *fmt, va_list ap);
/* Prints "  label:  value" lines of a status block (value made safe). */
void kv(const char *label, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- json.c: a tiny JSON writer (pretty, two-space indent) ---- */

#define JW_MAX_DEPTH 16

struct jw {
	FILE *f;
	int depth;
	bool nonempty[JW_MAX_DEPTH];
};

void jw_open(struct jw *j, const char *key, char bracket);
void jw_close(struct jw *j, char bracket);
void jw_str(struct jw *j, const char *key, const char *v);
void jw_u64(struct jw *j, const char *key, uint64_t v);
void jw_i64(struct jw *j, const char *key, int64_t v);
void jw_bool(struct jw *j, const char *key, bool v);
/* Opens the top-level object with its schema version; jw_end closes it. */
void jw_begin(struct jw *j);
void jw_end(struct jw *j);

/* ---- table.c: aligned tables ---- */

#define TBL_MAX_COLS 16

struct table {
	int ncols;
	const char *hdr[TBL_MAX_COLS]; /* a leading '>' right-aligns the column */
	char **cells;                  /* rows * ncols, safe text */
	size_t rows, cap;
	int col; /* next cell of the current row */
};

void tbl_init(struct table *t, const char *const *hdr);
void tbl_cell(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tbl_print(struct table *t, FILE *f);
void tbl_free(struct table *t);

/* ---- columns.c: one description per section drives table and JSON ---- */

enum col_type { COL_STR, COL_U32, COL_I32, COL_U64, COL_BOOL, COL_SIZE };

struct col;
/* A cell's text for the table (made safe after): buf, written, or a string
 * of the row. */
typedef const char *(*col_text_fn)(const struct col *col, const void *row, size_t idx, char *buf,
			    size_t len);
/* Writes a member's value in the JSON (after its key). */
typedef void (*col_json_fn)(struct jw *j, const struct col *col, const void *row);

#define COL_VERBOSE 0x1u /* in the table with -v only */

struct col {
	const char *key;    /* JSON member; NULL: not in the JSON */
	const char *hdr;    /* table header ('>' right-aligns); NULL: not in the table */
	int pos;            /* the table's column order (the JSON keeps the array's) */
	enum col_type type; /* the field's C type */
	size_t off;         /* the field in the row */
	col_text_fn text;   /* NULL: the field in decimal, or its string or '-' */
	col_json_fn json;   /* NULL: the field as a JSON string, number or bool */
	unsigned flags;
	const char *unit;   /* after a number in the table ("us") */
};

struct section {
	const char *key; /* the JSON array's name */
	const struct col *cols;
	size_t ncols;
};

#define COLS(a) (a), sizeof(a) / sizeof((a)[0])

void section_table(const struct section *s, void *const *rows, size_t n, bool verbose);
void section_json(struct jw *j, const struct section *s, void *const *rows, size_t n);
/* One row as a JSON object named s->key (the table columns unused). */
void section_object(struct jw *j, const struct section *s, const void *row);
/* Prints rows as the section's table or, into j, as its JSON array. */
void section_out(struct ctl *c, struct jw *j, const struct section *s, void *const *rows,
		 size_t n);

/* A command's whole output: the section's table, or a JSON object with
 * schema_version and the section. */
void section_print(struct ctl *c, const struct section *s, void *const *rows, size_t n);

/* The field of a row a column describes, by its type. */
uint64_t col_u64(const struct col *col, const void *row);
int64_t col_i64(const struct col *col, const void *row);
const char *col_str(const struct col *col, const void *row);

/* Text forms shared by the sections. */
const char *txt_bytes(const struct col *col, const void *row, size_t idx, char *buf, size_t len);
const char *txt_speed(const struct col *col, const void *row, size_t idx, char *buf, size_t len);
const char *txt_numa(const struct col *col, const void *row, size_t idx, char *buf, size_t len);
const char *txt_duration(const struct col *col, const void *row, size_t idx, char *buf, size_t len);
const char *txt_raw(const struct col *col, const void *row, size_t idx, char *buf, size_t len);
const char *txt_index(const struct col *col, const void *row, size_t idx, char *buf, size_t len);
const char *txt_zero_dash(const struct col *col, const void *row, size_t idx, char *buf, size_t len);

/* ---- report.c: errors and exit codes ---- */

/* Reports a failure on stderr and, with --json, as an error object on stdout.
 * status is the negative error code (0 if none). Returns exit_code. */
int report(struct ctl *c, int exit_code, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Reports an error status the daemon answered (err: its text, may be empty). */
int report_status(struct ctl *c, const char *what, int status, const char *err);
/* Reports a transport error (negative errno) while talking to the daemon. */
int report_io(struct ctl *c, const char *what, int err);

/* ---- talk.c: talking to the daemon ---- */

/* Connects and says HELLO; 0 or the exit code after reporting. */
int ctl_connect(struct ctl *c);
void ctl_close(struct ctl *c);
/* Sends a request and receives its reply of type want (want == MSG_RESULT: a
 * RESULT of status 0). 0 with *f filled (the caller frees it), or the exit
 * code after reporting. */
int ctl_call(struct ctl *c, const char *what, uint16_t type, const ProtobufCMessage *req,
	     uint16_t want, struct r2_frame *f);
/* A query: a request of type (a req_desc message, its req_id set), a reply
 * of want unpacked as desc, its status checked. 0 with *out (the caller
 * frees it), or the exit code after reporting. */
int ctl_query(struct ctl *c, uint16_t type, const ProtobufCMessageDescriptor *req_desc,
	      uint16_t want, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out);
/* The same with the request as given (its fields, req_id, set by the caller). */
int ctl_query_req(struct ctl *c, uint16_t type, const ProtobufCMessage *req, uint16_t want,
		  const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out);
/* MSG_STATUS -> StatusReply, MSG_RAILS -> RailsReply. */
int get_status(struct ctl *c, R2ccl__StatusReply **out);
int get_rails(struct ctl *c, R2ccl__RailsReply **out);

/* ---- the commands (cmd_status.c, cmd_health.c, cmd_admin.c) ---- */

typedef int (*ctl_cmd_fn)(struct ctl *c, int argc, char **argv);

int cmd_status(struct ctl *c, int argc, char **argv);
int cmd_section(struct ctl *c, int argc, char **argv);
int cmd_tenants(struct ctl *c, int argc, char **argv);
int cmd_rails(struct ctl *c, int argc, char **argv);
int cmd_peers(struct ctl *c, int argc, char **argv);
int cmd_events(struct ctl *c, int argc, char **argv);
int cmd_top(struct ctl *c, int argc, char **argv); /* cmd_top.c */
int cmd_rebalance(struct ctl *c, int argc, char **argv);
int cmd_nic_admin(struct ctl *c, int argc, char **argv);
int cmd_version(struct ctl *c, int argc, char **argv);
int parse_u32(const char *s, uint32_t *out);

#endif
