// SPDX-License-Identifier: MIT
/* r2cclctl's failures: a line on stderr, an error object with --json, the exit code. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "r2ccl.h"

/* Reports a failure: a line on stderr and, with --json, an error object on
 * stdout (so `r2cclctl --json ... | jq` always has an object to read).
 * status is the negative error code (0 if none). Returns exit_code. */
int report(struct ctl *c, int exit_code, int status, const char *fmt, ...)
{
	char *raw, *s;
	va_list ap;

	va_start(ap, fmt);
	s = safe_vformat(&raw, "error", fmt, ap);
	va_end(ap);
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
int report_status(struct ctl *c, const char *what, int status, const char *err)
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
int report_io(struct ctl *c, const char *what, int err)
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
