/* worker/fetch: downloads one file, named by its SHA-256, from peers that
 * hold it (libcurl, GET with a file token from worker/peerauth).
 *
 * Bytes go to DEST.part; an attempt resumes from the .part's size with a
 * Range request, hashing the bytes already there and then the new ones as
 * they arrive.  At the end the digest must equal the expected one: then the
 * .part is renamed to DEST (atomic), else it is deleted and the source
 * counts as bad.  Sources are tried in turn, rounds of them with a growing
 * pause between; a source that sends nothing for stall_ms is given up on
 * (CLOCK_MONOTONIC).  A rate limit (util/ratelimit) keeps the download from
 * filling the LAN.  Blocking; progress goes to a callback. */
#ifndef GPUPOOL_FETCH_H
#define GPUPOOL_FETCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct fetch_progress {
    uint64_t done, total;     /* total 0 until the source says */
    uint64_t resumed_from;    /* where this attempt started */
    double rate_bps;          /* recent bytes per second */
    int64_t eta_s;            /* -1 unknown */
    const char *source;
    int attempt;              /* 1, 2, ... over every source and round */
} fetch_progress;

typedef struct fetch_opts {
    const char *const *urls;  /* full URLs of the file, best first */
    int nurls;
    const char *sha256;       /* expected, 64 hex digits */
    const char *dest;
    const char *join_token;   /* signs the file tokens */
    uint64_t rate_bps;        /* 0: no limit */
    int64_t stall_ms;         /* 0: 30000 */
    int64_t connect_timeout_ms; /* 0: 5000 */
    int rounds;               /* passes over the sources; 0: 3 */
    int64_t backoff_ms;       /* the first pause between rounds (doubling, at most 30 s); 0: 1000 */
    /* called about twice a second, and once at the end of each attempt */
    void (*progress)(void *ctx, const fetch_progress *p);
    /* nonzero: give up now (checked while bytes flow and during pauses) */
    int (*cancelled)(void *ctx);
    void *ctx;
} fetch_opts;

typedef enum fetch_rc {
    FETCH_OK = 0,
    FETCH_FAILED = -1,    /* no source delivered; the .part is kept for a resume */
    FETCH_CORRUPT = -2,   /* the last complete download did not match the sha256; the .part was deleted */
    FETCH_CANCELLED = -3
} fetch_rc;

/* Fetches o->dest.  On failure err says why (the last source's reason). */
fetch_rc fetch_file(const fetch_opts *o, char *err, size_t errlen);

#endif
