/* SPDX-License-Identifier: MIT */
/*
 * Integration-test harness: starts a real r2ccld (the one just built) on a
 * private socket, and stops it, checking how it exited.
 */
#ifndef R2CCL_TEST_HARNESS_H
#define R2CCL_TEST_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

struct th_daemon {
	pid_t pid;
	char dir[256];    /* private temporary directory */
	char socket[300]; /* dir/r2ccld.sock */
	char log[300];    /* dir/r2ccld.log: the daemon's stderr */
};

/* Starts R2CCLD (env R2CCLD, else the build's daemon/r2ccld) with
 * --socket DIR/r2ccld.sock and the extra arguments (NULL-terminated), waits
 * until the socket accepts connections (10 s at most), sets R2CCL_SOCKET in
 * this process's environment. Returns 0 or -1 (and prints why). */
int th_daemon_start(struct th_daemon *d, const char *const *extra_args);
/* Sends sig, waits up to timeout_ms; returns the exit status (0-255), 128+N
 * if killed by signal N, or -1 on timeout (then SIGKILLs it). */
int th_daemon_stop(struct th_daemon *d, int sig, int timeout_ms);
/* true if the daemon process is still running */
bool th_daemon_alive(struct th_daemon *d);
/* Counts occurrences of needle in the daemon's log. */
int th_log_count(struct th_daemon *d, const char *needle);
/* Removes the temporary directory. */
void th_daemon_cleanup(struct th_daemon *d);

/* Raw control-socket connection (for malformed-input tests). */
int th_connect_raw(const char *socket_path);

#endif
