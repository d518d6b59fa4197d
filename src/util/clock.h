/* clock: the two clocks gpupool uses.  Every timeout, deadline and schedule is
 * on the monotonic clock; wall time is only stored and shown to people. */
#ifndef GPUPOOL_CLOCK_H
#define GPUPOOL_CLOCK_H

#include <stdint.h>
#include <time.h>

int64_t mono_ms(void);
int64_t mono_us(void);
int64_t wall_ms(void);
/* Sleeps on the monotonic clock; used by long-running loops, never by tests. */
void sleep_ms(int64_t ms);
/* An absolute CLOCK_MONOTONIC timespec `ms` from now, for pthread_cond_timedwait
 * on a condition variable created with cond_init_monotonic(). */
struct timespec mono_deadline(int64_t ms);
struct timespec mono_at(int64_t abs_ms);
/* A timespec (either clock, or a file's st_mtim) in nanoseconds. */
int64_t timespec_ns(struct timespec t);

#include <pthread.h>
int cond_init_monotonic(pthread_cond_t *c);

#endif
