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

#endif
