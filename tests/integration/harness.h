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
	char key[300];    /* dir/cluster.key: the tests' shared cluster key */
};

/* Starts R2CCLD (env R2CCLD, else the build's daemon/r2ccld) with
 * --socket DIR/r2ccld.sock, the extra arguments (NULL-terminated) and,
 * unless they name one, --cluster-key-file DIR/cluster.key (the same key in
 * every daemon a test starts, so that two of them authenticate), waits
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
/* Waits until `r2cclctl --json status` of d (what d shows the calling uid;
 * $R2CCLCTL) holds needle at least once (polling); returns true then, false
 * when timeout_ms passed. For states that nothing else tells, such as a
 * communicator a CommInit created, or one freed. */
bool th_wait_status(struct th_daemon *d, const char *needle, int timeout_ms);
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

/* ---- Check helpers of the test programs: they fail the running test ---- */

/* Long: a line that must come comes at once when all is well, and a loaded
 * machine (the sanitizer build on a shared 2-core CI host) is slow. */
#define TH_LOG_WAIT_MS 10000

#include <check.h>

/* Starts d (th_daemon_start) or fails; the first call has d SIGKILLed and
 * cleaned up when the test's process exits (a failed assertion included). */
void th_start(struct th_daemon *d, const char *const *extra);
/* The end of a case: d is alive and exits 0 on SIGTERM. */
void th_stop_ok(struct th_daemon *d);
/* d's log has needle at least min times within TH_LOG_WAIT_MS. */
void th_expect_log(struct th_daemon *d, const char *needle, int min);
/* Makes the directory of the mkdtemp template dir, and path dir/name. */
void th_temp_path(char *dir, const char *name, char *path, size_t len);
/* A suite of one test case, both called name, with the n tests. */
Suite *th_suite(const char *name, int timeout_s, const TTest *const *tests, size_t n);
/* Runs the suite, each test forked; EXIT_SUCCESS when none failed. */
/* The daemon is alive, stops cleanly on SIGTERM (exit 0 within 15 s), and
 * its files are removed; a Check assertion fails otherwise. */
void th_daemon_stop_ok(struct th_daemon *d);
int th_run_suite(Suite *s);
/* The main() of a test program: suite name, each test's timeout in seconds,
 * then the tests (START_TEST's names). */
#define TH_MAIN(name, timeout_s, ...)                                               \
	int main(void)                                                              \
	{                                                                           \
		const TTest *const tests_[] = { __VA_ARGS__ };                      \
                                                                                    \
		return th_run_suite(th_suite(name, timeout_s, tests_,               \
					     sizeof(tests_) / sizeof(tests_[0]))); \
	}

#endif
