// SPDX-License-Identifier: MIT
/* What several unit tests share (unit_support.h). */
#include <check.h>
#include <dirent.h>
#include <time.h>

#include "unit_support.h"

static int fds_at_start;

int tu_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own fd */
}

void tu_fds_mark(void)
{
	fds_at_start = tu_count_fds();
}

void tu_fds_check(void)
{
	ck_assert_int_eq(tu_count_fds(), fds_at_start);
}

uint64_t tu_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}
