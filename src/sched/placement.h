/* sched/placement: picks the node for one request.  Pure: structs in,
 * decision out, no clock and no I/O, so every rule is unit-tested.
 *
 * The gpupool policy ("score") estimates, for each node that qualifies, how
 * long the request would take to finish there, and picks the smallest:
 *
 *   speed    x  (time to first token + max_tokens / tokens per second)
 * + affinity x  cold-start time, when the model is not loaded there (half
 *               again when the start must stop other models, which will
 *               then cost a start of their own)
 * + load     x  the wait and slow-down implied by busy slots (its own
 *               requests, or the engine's own count when that is higher)
 * + link     x  payload bytes / measured link throughput
 *
 * divided by the success rate over the last hour (raised to `success`) and
 * multiplied up for a hot or throttled GPU.  Unmeasured figures fall back to
 * the pool's best figures for the model, with a small edge so that a node
 * not yet measured gets tried.  A node qualifies when it is ready, was
 * not tried already for this request, holds the catalogue's file for the
 * model (when the catalogue pins one), has a free slot, and serves the model
 * or can start it within its free VRAM (the planner's need).  When a busy
 * node would still finish much sooner than any free one, the request waits
 * for it (PLACE_DEFER) instead of going to a slow node, once the free node's
 * figures rest on a few calls (not on a guess): "much" is `defer`
 * for priority 0 and nears 1 for priority 9, so urgent work waits for fast
 * nodes and leaves the slow ones to work that can afford them.
 *
 * The baselines other gateways use are here too, for comparison: round-robin
 * and least-connections route at once among ready nodes with the model and
 * ignore slots (the engine queues). */
#ifndef GPUPOOL_PLACEMENT_H
#define GPUPOOL_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

typedef enum place_policy { POLICY_SCORE, POLICY_ROUND_ROBIN, POLICY_LEAST_CONN } place_policy;
/* "gpupool" (or "score"), "round-robin", "least-connections". */
int place_policy_parse(const char *s, place_policy *out);
const char *place_policy_name(place_policy p);

typedef struct place_weights {
    double speed, affinity, load, link, success, temp;
    int hot_c;        /* a GPU at or above this temperature is penalised */
    double defer;     /* wait for a busy node when its estimate is below defer x the best free one's; 0 = never */
} place_weights;
void place_weights_default(place_weights *w);
/* "speed=1,affinity=1,load=1,link=1,success=2,temp=1,hot_c=83,defer=0.5"; keys may be omitted. */
int place_weights_parse(const char *spec, place_weights *w, char *err, size_t errlen);

typedef struct place_cfg {
    place_policy policy;
    place_weights w;
} place_cfg;

typedef struct place_request {
    double prompt_tokens;   /* estimated from the body */
    double max_tokens;      /* requested, or a default */
    double payload_bytes;   /* request body size */
    /* the pool's figures for the model, where a node has none of its own */
    double prior_ttft_ms, prior_tps, prior_load_ms;
    unsigned rr_ticket;     /* round-robin: the caller's running counter */
    int priority;           /* 0..9: the higher, the more worth waiting for a faster node */
    int queued_ahead;       /* requests for the model already waiting for a busy node */
} place_request;

typedef struct place_candidate {
    const char *id;
    int ready;        /* state ready, self-check passed, breaker closed */
    int has_model;    /* an engine on it serves the model now */
    int loadable;     /* it can start an engine for the model */
    uint64_t need_bytes; /* the planner's estimate for starting it */
    int evicting;     /* starting it would stop other (idle) models there */
    int excluded;     /* already tried for this request */
    int mismatch;     /* its file for the model is not the catalogue's (or not verified): never chosen */
    int inflight;     /* requests the coordinator has on it */
    int slots;        /* engine slots; <= 0 counts as 1 */
    double busy_until_ms; /* with every slot taken: when the first should free (0 = not known) */
    uint64_t free_vram;
    /* load signals the node's engines report (0 when they report none) */
    int engine_busy, engine_queued;
    /* the node's profile for this model (0 = not measured) */
    double ttft_ms, tps, load_ms;
    int samples;      /* how many calls those figures come from */
    double success;   /* success rate over the last hour, 0..1; < 0 unknown */
    int temp_c;       /* hottest GPU; < 0 unknown */
    int throttled;
    double link_bytes_per_ms;
} place_candidate;

#define PLACE_NONE (-1)
#define PLACE_DEFER (-2)

/* Index of the chosen candidate, PLACE_NONE when none qualifies, or
 * PLACE_DEFER when the request should wait for a busy node (policy score).
 * est_ms (may be NULL) gets the chosen node's estimate. */
int placement_pick(const place_cfg *cfg, const place_request *rq, const place_candidate *c, size_t n,
                   double *est_ms);
/* The estimated milliseconds to finish rq on c, as the score policy sees it
 * (before the success and temperature factors: the plain service time). */
double placement_service_ms(const place_request *rq, const place_candidate *c);
double placement_score(const place_weights *w, const place_request *rq, const place_candidate *c);

/* Why nothing qualified, for the caller's answer. */
typedef enum place_block {
    PLACE_OK,          /* something qualifies */
    PLACE_NO_MODEL,    /* no node at all serves the model */
    PLACE_BUSY,        /* nodes serve it, all their slots are taken */
    PLACE_UNAVAILABLE, /* nodes serve it, none is ready (or all excluded) */
    PLACE_NO_FIT,      /* nodes could start it, but it fits no free VRAM */
    PLACE_DEFERRED,    /* a free node exists, but waiting for a busy one is faster */
} place_block;
place_block placement_why(const place_cfg *cfg, const place_candidate *c, size_t n);

#endif
