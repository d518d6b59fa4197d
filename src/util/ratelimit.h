/* util/ratelimit: a token bucket that keeps a byte stream under a rate.
 * Pure: the caller passes the monotonic time in microseconds and does the
 * waiting itself, so the arithmetic is tested without sleeping. */
#ifndef GPUPOOL_RATELIMIT_H
#define GPUPOOL_RATELIMIT_H

#include <stdint.h>

typedef struct rate_bucket {
    double rate;     /* bytes per second; 0: no limit */
    double burst;    /* the most bytes that may pass at once after a pause */
    double tokens;   /* may go negative: bytes taken ahead of the rate */
    int64_t last_us;
} rate_bucket;

/* A bucket that starts full.  burst 0: a quarter of a second at the rate
 * (at least 64 KiB), enough for a socket read without stalling it. */
void rate_init(rate_bucket *b, uint64_t bytes_per_s, uint64_t burst, int64_t now_us);
/* Takes n bytes that have passed; returns how many microseconds the caller
 * should wait before more may pass (0: none). */
int64_t rate_take(rate_bucket *b, uint64_t n, int64_t now_us);

#endif
