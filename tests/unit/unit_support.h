/* SPDX-License-Identifier: MIT */
/*
 * What several unit tests share (test_framing.c, test_loopback.c,
 * test_tcp.c): the leak check of file descriptors around each case, and a
 * monotonic clock in milliseconds.
 */
#ifndef R2CCL_UNIT_SUPPORT_H
#define R2CCL_UNIT_SUPPORT_H

#include <stdint.h>

/* The process's open file descriptors (from /proc/self/fd). */
int tu_count_fds(void);
/* A case's setup remembers the count; its teardown checks that the same
 * number is open again (every eventfd, socket, pipe closed). */
void tu_fds_mark(void);
void tu_fds_check(void);
uint64_t tu_now_ms(void);

#endif
