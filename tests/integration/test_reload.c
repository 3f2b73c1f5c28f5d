// SPDX-License-Identifier: MIT
/*
 * Integration test: SIGHUP with a changed configuration file applies what is
 * reloadable and reports what is not (kept until a restart) in the log and
 * in `r2cclctl events` (issue 24: a changed port was kept silently).
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static struct th_daemon D;
static char cfg[300];

static void kill_daemon_at_exit(void)
{
	if (D.pid > 0)
		th_daemon_stop(&D, SIGKILL, 1000);
	th_daemon_cleanup(&D);
	unlink(cfg);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	ck_assert_int_ge(fputs(text, f), 0);
	ck_assert_int_eq(fclose(f), 0);
}

static void expect_log(const char *needle, int min)
{
	int n = th_wait_log(&D, needle, min, TH_LOG_WAIT_MS);

	ck_assert_msg(n >= min, "daemon log has %d line(s) with \"%s\", expected >= %d (%s)", n,
		      needle, min, D.log);
}

START_TEST(sighup_reports_kept)
{
	const char *ctl = getenv("R2CCLCTL");
	char out[16384];
	int rc;

	ck_assert_msg(ctl && ctl[0], "R2CCLCTL is not set");
	snprintf(cfg, sizeof(cfg), "/tmp/r2ccl-reload-%d.conf", (int)getpid());
	write_file(cfg, "op_timeout_ms = 20000\n");
	atexit(kill_daemon_at_exit);
	{
		const char *const args[] = { "--config", cfg, "--port", "0", NULL };
		ck_assert_int_eq(th_daemon_start(&D, args), 0);
	}
	/* a reloadable change, a kept one (inflight from the file), and one
	 * the command line overrides (port: not reported, the CLI wins anyway) */
	write_file(cfg, "op_timeout_ms = 12345\nmax_frame = 2M\nport = 29517\n");
	kill(D.pid, SIGHUP);
	expect_log("reload: op_timeout_ms = 12345", 1);
	expect_log("config_kept max_frame: the file's value 2097152 is not applied until a "
		   "restart (not reloadable); running with 1048576", 1);
	ck_assert_int_eq(th_log_count(&D, "config_kept port"), 0);
	{
		const char *argv[] = { ctl, "--socket", D.socket, "events", NULL };
		rc = th_run(argv, out, sizeof(out), 10000);
	}
	ck_assert_msg(rc == 0, "events: exit %d:\n%.3000s", rc, out);
	ck_assert_msg(strstr(out, "config_kept") && strstr(out, "max_frame"), "%.3000s", out);
	ck_assert_msg(!strstr(out, "op_timeout_ms"), "a reloaded value listed as kept:\n%.3000s",
		      out);
	/* the same file again: still kept, said again */
	kill(D.pid, SIGHUP);
	expect_log("SIGHUP: reloading", 2);
	/* said again: the second line comes after the reload's, so it is waited
	 * for; then, after a while, no third */
	expect_log("is not applied until a restart", 2);
	usleep(300 * 1000);
	ck_assert_int_eq(th_log_count(&D, "is not applied until a restart"), 2);
	ck_assert_int_eq(th_daemon_stop(&D, SIGTERM, 15000), 0);
}
END_TEST

TH_MAIN("reload", 60, sighup_reports_kept)
