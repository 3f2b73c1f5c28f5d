/* SPDX-License-Identifier: MIT */
/*
 * gpu_legacy_ipc end to end, without a GPU (integration suite, every build):
 * a daemon started with --gpu-legacy-ipc deny answers a legacy CUDA IPC
 * registration with -EPERM, naming the parameter in its reply and its log;
 * one on the default (gpu-access) never accepts a handle that is not the
 * client's (here: 64 bytes no driver made), nor with /dev/null passed as the
 * GPU's device file. The GPU cases are the gpu
 * suite's test_ipc_owner.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "ipc_raw.h"

static int fails;
#define EXPECT(c, ...)                                                                      \
	do {                                                                                \
		if (!(c)) {                                                                 \
			fprintf(stderr, "FAIL line %d: ", __LINE__);                        \
			fprintf(stderr, __VA_ARGS__);                                       \
			fprintf(stderr, "\n");                                              \
			fails++;                                                            \
		}                                                                           \
	} while (0)

static int run(const char *const *args, const char *want_err, const char *want_log)
{
	struct th_daemon d;
	uint8_t h[64], uuid[16];
	char err[512];
	int st;

	memset(h, 0xab, sizeof(h));
	memset(uuid, 0x11, sizeof(uuid));
	memset(&d, 0, sizeof(d));
	if (th_daemon_start(&d, args) < 0) {
		fprintf(stderr, "r2ccld did not start\n");
		return 1;
	}
	st = ipc_raw_register(d.socket, h, uuid, 0x7f0000000000ull, 2u << 20, -1, err,
			      sizeof(err));
	printf("%s: %d (%s)\n", args[1] ? args[1] : "default", st, err);
	EXPECT(st < 0, "a handle that is not the client's was accepted");
	/* with a file that is no GPU's passed as the device file */
	int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	st = ipc_raw_register(d.socket, h, uuid, 0x7f0000000000ull, 2u << 20, null_fd, err,
			      sizeof(err));
	close(null_fd);
	printf("%s, /dev/null as the device file: %d (%s)\n", args[1] ? args[1] : "default", st,
	       err);
	EXPECT(st < 0, "a handle with /dev/null for the GPU's device file was accepted");
	if (want_err) {
		EXPECT(st == -EPERM, "status %d, want -EPERM", st);
		EXPECT(strstr(err, want_err), "reason '%s' does not name '%s'", err, want_err);
	}
	if (want_log)
		EXPECT(th_wait_log(&d, want_log, 1, 5000) >= 1, "the daemon's log has no '%s'",
		       want_log);
	EXPECT(th_daemon_alive(&d), "r2ccld died");
	EXPECT(th_daemon_stop(&d, SIGTERM, 20000) == 0, "r2ccld did not stop cleanly (log %s)",
	       d.log);
	if (!fails)
		th_daemon_cleanup(&d);
	return 0;
}

int main(void)
{
	const char *const deny[] = { "--gpu-legacy-ipc", "deny", NULL };
	const char *const dflt[] = { NULL, NULL };

	if (run(deny, "gpu_legacy_ipc=deny", "memory registration refused: gpu_legacy_ipc=deny"))
		return 1;
	if (run(dflt, NULL, NULL))
		return 1;
	printf("%s\n", fails ? "FAILED" : "PASSED");
	return fails ? 1 : 0;
}
