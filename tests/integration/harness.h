/* SPDX-License-Identifier: MIT */
/*
 * Integration-test harness: starts a real r2ccld (the one just built) on a
 * private socket, and stops it, checking how it exited.
 */
#ifndef R2CCL_TEST_HARNESS_H
#define R2CCL_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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

/* ---- additions for the bad-input and lifecycle tests ---- */

/* Waits until th_log_count(d, needle) >= min (polling); returns the count
 * reached (>= min) or the last count seen when timeout_ms passed. */
int th_wait_log(struct th_daemon *d, const char *needle, int min, int timeout_ms);
/* Number of open file descriptors of the daemon (/proc/PID/fd), -1 on error. */
int th_daemon_nfds(struct th_daemon *d);
/* Sends one raw frame header (the fields as given, little-endian) with
 * nattach descriptors in SCM_RIGHTS, then payload (plen bytes, may be 0).
 * Returns 0 or negative errno. Never raises SIGPIPE. */
int th_send_frame_raw(int sock, uint32_t magic, uint16_t type, uint16_t nfds, uint32_t len,
		      uint32_t flags, const int *fds, int nattach, const void *payload,
		      size_t plen);
/* Waits until the peer closed sock (EOF or reset), discarding whatever
 * arrives (and closing received fds). Returns 0 on EOF, -ETIMEDOUT. */
int th_wait_eof(int sock, int timeout_ms);
/* Runs argv (argv[0] a path) to completion with stdout+stderr captured in
 * out (NUL-terminated, truncated to outlen-1). Returns the exit status
 * (0-255), 128+N if killed by signal N, -1 on timeout (then SIGKILLs it). */
int th_run(const char *const *argv, char *out, size_t outlen, int timeout_ms);
/* Monotonic milliseconds. */
double th_now_ms(void);

#endif
