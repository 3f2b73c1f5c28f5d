// SPDX-License-Identifier: MIT
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "util.h"

void r2_closep(int *fd)
{
	int saved = errno;

	if (fd && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	errno = saved;
}

int r2_grow(void *arr, size_t *cap, size_t n, size_t elem, size_t first)
{
	void **a = arr;
	size_t c;
	void *p;

	if (n < *cap)
		return 0;
	c = *cap ? *cap * 2 : first;
	p = realloc(*a, c * elem);
	if (!p)
		return -ENOMEM;
	*a = p;
	*cap = c;
	return 0;
}

uint64_t r2_spin_budget_us(int64_t v)
{
	static long ncpu;

	if (v >= 0)
		return (uint64_t)v;
	if (!ncpu)
		ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	return ncpu >= 8 ? 50 : 0;
}

int r2_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg)
{
	struct sched_param sp = { .sched_priority = 0 };
	pthread_attr_t a;
	bool set;
	int r;

	if (pthread_attr_init(&a) != 0)
		return pthread_create(thread, NULL, fn, arg);
	set = pthread_attr_setinheritsched(&a, PTHREAD_EXPLICIT_SCHED) == 0 &&
	      pthread_attr_setschedpolicy(&a, SCHED_OTHER) == 0 &&
	      pthread_attr_setschedparam(&a, &sp) == 0;
	r = pthread_create(thread, set ? &a : NULL, fn, arg);
	pthread_attr_destroy(&a);
	return r;
}

int r2_sched_batch(void)
{
	struct sched_param sp = { .sched_priority = 0 };
	int r = pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);

	return -r;
}
