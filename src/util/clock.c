/* clock: see clock.h. */
#include "util/clock.h"

#include <errno.h>

int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int64_t ms)
{
    if (ms <= 0) return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR) {}
}

struct timespec mono_at(int64_t abs_ms)
{
    struct timespec ts = {abs_ms / 1000, (abs_ms % 1000) * 1000000};
    return ts;
}

struct timespec mono_deadline(int64_t ms) { return mono_at(mono_ms() + ms); }

int64_t timespec_ns(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

int cond_init_monotonic(pthread_cond_t *c)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int r = pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
    return r;
}
