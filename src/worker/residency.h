/* worker/residency: which of the engines a worker started stay loaded.
 *
 * Pure decisions over a snapshot of the started engines, with `now`
 * (monotonic ms) passed in: when an idle engine's keep-alive has run out,
 * and which idle engines to stop, least recently used first, so another
 * model fits.  An engine with requests in flight (or still starting) is
 * never chosen, nor a pinned one.  Also reads keep-alive durations the way
 * Ollama spells them, for --load and for a request's "keep_alive". */
#ifndef GPUPOOL_RESIDENCY_H
#define GPUPOOL_RESIDENCY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define RES_FOREVER (-1) /* a keep-alive that never runs out */

typedef struct res_engine {
    int running;           /* started (its process is up) */
    int busy;              /* requests in flight, or starting or stopping */
    int pinned;            /* stays loaded: never stopped for idleness or room */
    int64_t last_used_ms;  /* when its last request ended (or it started) */
    int64_t keep_alive_ms; /* after its last request; RES_FOREVER, or 0: at once */
    uint64_t bytes;        /* the VRAM stopping it gives back */
} res_engine;

/* "300" (seconds), "10m", "1h30m", "90s", "2.5m", "500ms", "0", "-1" (any
 * negative: forever).  0 and *ms set, or -1 when malformed. */
int res_parse_duration(const char *s, int64_t *ms);
/* A request's keep_alive: a JSON number of seconds or a duration string.
 * 1 and *ms set when present, 0 when absent (NULL or null), -1 with a
 * reason when malformed. */
int res_keep_alive(const json_t *v, int64_t *ms, char *err, size_t errlen);

/* Whether an engine should stop now because it has been idle too long. */
int res_expired(const res_engine *e, int64_t now);
/* Milliseconds until the next engine expires (0: one has), -1 when none will. */
int64_t res_next_expiry(const res_engine *e, int n, int64_t now);

/* VRAM that stopping every idle, unpinned engine would give back. */
uint64_t res_evictable(const res_engine *e, int n);
/* Which engines to stop so that `need` fits: idle, unpinned, running ones,
 * least recently used first, until free plus what they give back covers
 * need.  Writes their indexes to victims (room for n) and returns how many:
 * 0 when need already fits, -1 when stopping every candidate would not be
 * enough (nothing is chosen then). */
int res_pick_victims(const res_engine *e, int n, uint64_t need, uint64_t free_bytes, int *victims);

#endif
