// SPDX-License-Identifier: MIT
/*
 * The logger of the daemon and the tools. One write(2) per line so that lines
 * of different threads do not interleave; the "<N>" prefix is the syslog
 * priority that journald reads from a service's stderr.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static _Atomic int log_level = R2_LOG_INFO;

void r2_log_set_level(int level)
{
	if (level < R2_LOG_ERR)
		level = R2_LOG_ERR;
	if (level > R2_LOG_DEBUG)
		level = R2_LOG_DEBUG;
	atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

int r2_log_get_level(void)
{
	return atomic_load_explicit(&log_level, memory_order_relaxed);
}

int r2_log_level_parse(const char *s, int *level)
{
	static const struct {
		const char *name;
		int level;
	} names[] = {
		{ "err", R2_LOG_ERR },	 { "error", R2_LOG_ERR }, { "warn", R2_LOG_WARN },
		{ "warning", R2_LOG_WARN }, { "info", R2_LOG_INFO }, { "debug", R2_LOG_DEBUG },
	};

	if (!s)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcasecmp(s, names[i].name)) {
			if (level)
				*level = names[i].level;
			return 0;
		}
	}
	return -EINVAL;
}

void r2_log(int level, const char *fmt, ...)
{
	char buf[2048];
	int saved = errno;
	va_list ap;
	int n, m;
	size_t len;

	if (level > r2_log_get_level())
		goto out;
	n = snprintf(buf, sizeof(buf), "<%d>", level);
	va_start(ap, fmt);
	m = vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		goto out;
	len = (size_t)n + (size_t)m;
	if (len > sizeof(buf) - 2)
		len = sizeof(buf) - 2;
	/* one line per call: a trailing newline is added when missing */
	while (len > (size_t)n && buf[len - 1] == '\n')
		len--;
	buf[len++] = '\n';
	for (size_t off = 0; off < len;) {
		ssize_t w = write(STDERR_FILENO, buf + off, len - off);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		off += (size_t)w;
	}
out:
	errno = saved;
}

static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;

int r2_ratelimit_ok(struct r2_ratelimit *rl, unsigned *suppressed)
{
	struct timespec ts;
	unsigned long long now;
	int ok;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (unsigned long long)ts.tv_sec * 1000 + (unsigned long long)ts.tv_nsec / 1000000;
	*suppressed = 0;
	pthread_mutex_lock(&rl_lock);
	if (!rl->window_start_ms || now - rl->window_start_ms >= rl->interval_ms) {
		*suppressed = rl->suppressed;
		rl->window_start_ms = now;
		rl->printed = 0;
		rl->suppressed = 0;
	}
	ok = rl->printed < rl->burst;
	if (ok)
		rl->printed++;
	else
		rl->suppressed++;
	pthread_mutex_unlock(&rl_lock);
	return ok;
}
