/* util/ratelimit: see ratelimit.h. */
#include "util/ratelimit.h"

void rate_init(rate_bucket *b, uint64_t bytes_per_s, uint64_t burst, int64_t now_us)
{
    b->rate = (double)bytes_per_s;
    if (!burst) {
        burst = bytes_per_s / 4;
        if (burst < 65536) burst = 65536;
    }
    b->burst = (double)burst;
    b->tokens = b->burst;
    b->last_us = now_us;
}

int64_t rate_take(rate_bucket *b, uint64_t n, int64_t now_us)
{
    if (b->rate <= 0) return 0;
    if (now_us > b->last_us) {
        b->tokens += b->rate * (double)(now_us - b->last_us) / 1e6;
        if (b->tokens > b->burst) b->tokens = b->burst;
        b->last_us = now_us;
    }
    b->tokens -= (double)n;
    if (b->tokens >= 0) return 0;
    return (int64_t)(-b->tokens * 1e6 / b->rate) + 1;
}
