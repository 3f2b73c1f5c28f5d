/* SPDX-License-Identifier: MIT */
#ifndef R2CCL_UTIL_H
#define R2CCL_UTIL_H

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <time.h>

#define R2_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define R2_MIN(a, b) ((a) < (b) ? (a) : (b))
#define R2_MAX(a, b) ((a) > (b) ? (a) : (b))
#define R2_DIV_UP(a, b) (((a) + (b)-1) / (b))

static inline uint64_t r2_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t r2_now_us(void) { return r2_now_ns() / 1000; }

/* Formats a message into err[errlen], if err is given (the err/errlen
 * out-parameters of parsers and probes). */
void r2_seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The CLOCK_REALTIME time us microseconds from now: the deadline of a
 * pthread_cond_timedwait on a condition of the default clock. */
static inline struct timespec r2_deadline_in_us(uint64_t us)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(us / 1000000u);
	ts.tv_nsec += (long)(us % 1000000u) * 1000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

/* A busy-poll budget as configured: v >= 0 as is; -1 (auto)
 * R2_SPIN_AUTO_US on hosts of 8 or more CPUs and 0 on smaller ones, where a
 * spinning thread takes the CPU that the thread it waits for needs. */
#define R2_SPIN_AUTO_US 250
uint64_t r2_spin_budget_us(int64_t v);

/* One pass of a busy-poll loop: tells the core (and a sibling thread) so. */
static inline void r2_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}


/* Makes room for one more element in a growable array (*arr holding n of
 * *cap elements of elem bytes): doubles it, first to `first` elements.
 * 0, or -ENOMEM (the array unchanged). */
int r2_grow(void *arr, size_t *cap, size_t n, size_t elem, size_t first);
#define R2_GROW(arr, cap, n, first) r2_grow(&(arr), &(cap), (n), sizeof(*(arr)), (first))

/* Closes fd if >= 0 and sets it to -1; keeps errno. */
void r2_closep(int *fd);

/* pthread_create, the new thread in the normal policy (SCHED_OTHER) whatever
 * its creator's: the daemon's control thread may run SCHED_BATCH
 * (r2_sched_batch, control_batch), and the data-path threads it starts later (executors,
 * the GPU worker) must not inherit that. Returns once the new thread runs
 * (the daemon's threads are all made here). Returns pthread_create's
 * result. */
int r2_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg);

/* The calling thread in SCHED_BATCH: same CPU share, but its wake-ups do
 * not preempt the threads running (docs/architecture.md, Threads). 0 or
 * -errno. */
int r2_sched_batch(void);

#endif
