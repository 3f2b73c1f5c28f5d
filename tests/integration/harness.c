/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#ifndef R2CCLD_PATH
#define R2CCLD_PATH "r2ccld"
#endif

static void msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

int th_connect_raw(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int th_daemon_start(struct th_daemon *d, const char *const *extra)
{
	const char *bin = getenv("R2CCLD") ? getenv("R2CCLD") : R2CCLD_PATH;
	const char *argv[64];
	int n = 0;

	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/r2ccl-test-XXXXXX");
	if (!mkdtemp(d->dir)) {
		perror("mkdtemp");
		return -1;
	}
	snprintf(d->socket, sizeof(d->socket), "%s/r2ccld.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/r2ccld.log", d->dir);
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = d->socket;
	argv[n++] = "--config";
	argv[n++] = "/dev/null";
	for (int i = 0; extra && extra[i] && n < 62; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	d->pid = fork();
	if (d->pid < 0)
		return -1;
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(bin, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	for (int i = 0; i < 1000; i++) {
		int fd = th_connect_raw(d->socket);
		if (fd >= 0) {
			close(fd);
			setenv("R2CCL_SOCKET", d->socket, 1);
			return 0;
		}
		if (!th_daemon_alive(d))
			break;
		msleep(10);
	}
	fprintf(stderr, "r2ccld did not come up; its log (%s):\n", d->log);
	{
		char cmd[400];
		snprintf(cmd, sizeof(cmd), "cat %s >&2", d->log);
		if (system(cmd) < 0)
			(void)0;
	}
	th_daemon_stop(d, SIGKILL, 1000);
	return -1;
}

bool th_daemon_alive(struct th_daemon *d)
{
	int st;

	if (d->pid <= 0)
		return false;
	return waitpid(d->pid, &st, WNOHANG) == 0;
}

int th_daemon_stop(struct th_daemon *d, int sig, int timeout_ms)
{
	int st;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, sig);
	for (int t = 0; t < timeout_ms; t += 10) {
		pid_t r = waitpid(d->pid, &st, WNOHANG);
		if (r == d->pid) {
			d->pid = 0;
			if (WIFEXITED(st))
				return WEXITSTATUS(st);
			return 128 + WTERMSIG(st);
		}
		msleep(10);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &st, 0);
	d->pid = 0;
	return -1;
}

int th_log_count(struct th_daemon *d, const char *needle)
{
	FILE *f = fopen(d->log, "r");
	char line[4096];
	int n = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, needle))
			n++;
	fclose(f);
	return n;
}

void th_daemon_cleanup(struct th_daemon *d)
{
	char cmd[400];

	if (d->pid > 0)
		th_daemon_stop(d, SIGKILL, 1000);
	if (d->dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
		if (system(cmd) < 0)
			(void)0;
	}
}
