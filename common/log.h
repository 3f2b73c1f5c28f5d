/* SPDX-License-Identifier: MIT */
/* Logging for the daemon and the tools (library code does not log). Lines go to
 * stderr (journald adds the time under systemd) with a level prefix that
 * journald understands (<3> err, <4> warning, <6> info, <7> debug). */
#ifndef R2CCL_LOG_H
#define R2CCL_LOG_H

#include <stdarg.h>

enum r2_log_level { R2_LOG_ERR = 3, R2_LOG_WARN = 4, R2_LOG_INFO = 6, R2_LOG_DEBUG = 7 };

void r2_log_set_level(int level);
int r2_log_get_level(void);
/* Parses "err", "warn", "info", "debug"; returns -EINVAL otherwise. */
int r2_log_level_parse(const char *s, int *level);
void r2_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...) r2_log(R2_LOG_ERR, __VA_ARGS__)
#define log_warn(...) r2_log(R2_LOG_WARN, __VA_ARGS__)
#define log_info(...) r2_log(R2_LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                 \
	do {                                           \
		if (r2_log_get_level() >= R2_LOG_DEBUG) \
			r2_log(R2_LOG_DEBUG, __VA_ARGS__); \
	} while (0)

/* A rate limit for lines a client can cause (one per call site): at most
 * burst lines per interval; the first line of the next interval says how many
 * were left out. Thread-safe. */
struct r2_ratelimit {
	unsigned interval_ms, burst;
	unsigned long long window_start_ms;
	unsigned printed, suppressed;
};
#define R2_RATELIMIT_INIT(ms, n) { (ms), (n), 0, 0, 0 }
/* Whether the caller may log now; *suppressed gets the lines left out since
 * the last one allowed (to say so), else 0. */
int r2_ratelimit_ok(struct r2_ratelimit *rl, unsigned *suppressed);

/* log_warn for what clients can trigger: 10 lines per 5 s per call site */
#define log_warn_rl(...)                                                               \
	do {                                                                           \
		static struct r2_ratelimit rl_ = R2_RATELIMIT_INIT(5000, 10);          \
		unsigned sup_;                                                         \
		if (r2_ratelimit_ok(&rl_, &sup_)) {                                    \
			if (sup_)                                                      \
				r2_log(R2_LOG_WARN, "(%u similar lines left out)", sup_); \
			r2_log(R2_LOG_WARN, __VA_ARGS__);                              \
		}                                                                      \
	} while (0)

#endif
