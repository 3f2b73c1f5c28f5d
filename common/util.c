// SPDX-License-Identifier: MIT
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "util.h"

void r2_seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

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
	return ncpu >= 8 ? R2_SPIN_AUTO_US : 0;
}

/* The new thread tells its creator it runs before it calls fn: a thread
 * still starting when its creator goes on is one nobody can account for
 * (under LeakSanitizer, the starting thread's own allocations are reported
 * as leaks if a leak check comes then: CI's fuzz_peer failure). */
struct thread_start {
	void *(*fn)(void *);
	void *arg;
	sem_t up;
};

static void *thread_trampoline(void *p)
{
	struct thread_start *st = p;
	void *(*fn)(void *) = st->fn;
	void *arg = st->arg;

	sem_post(&st->up); /* st is the creator's, gone after this */
	return fn(arg);
}

int r2_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg)
{
	struct sched_param sp = { .sched_priority = 0 };
	struct thread_start st = { .fn = fn, .arg = arg };
	pthread_attr_t a;
	bool set = false, attr;
	int r;

	if (sem_init(&st.up, 0, 0) != 0)
		return errno;
	attr = pthread_attr_init(&a) == 0;
	if (attr)
		set = pthread_attr_setinheritsched(&a, PTHREAD_EXPLICIT_SCHED) == 0 &&
		      pthread_attr_setschedpolicy(&a, SCHED_OTHER) == 0 &&
		      pthread_attr_setschedparam(&a, &sp) == 0;
	r = pthread_create(thread, set ? &a : NULL, thread_trampoline, &st);
	if (attr)
		pthread_attr_destroy(&a);
	while (r == 0 && sem_wait(&st.up) != 0 && errno == EINTR)
		;
	sem_destroy(&st.up);
	return r;
}

int r2_sched_batch(void)
{
	struct sched_param sp = { .sched_priority = 0 };
	int r = pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);

	return -r;
}
