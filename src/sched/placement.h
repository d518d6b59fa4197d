/* sched/placement: picks the node for one request.  Pure: structs in,
 * decision out, no clock and no I/O, so every rule is unit-tested.
 *
 * A ready node qualifies when it has a free slot and either serves the model
 * now or can start it: the planner's need for the model (at its context and
 * slots) fits the node's free VRAM.  Among those, a node that has the model
 * loaded goes first (no cold start), then the fewest in-flight requests
 * relative to slots, then the most free VRAM, then the lowest id (stable). */
#ifndef GPUPOOL_PLACEMENT_H
#define GPUPOOL_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

typedef struct place_candidate {
    const char *id;
    int ready;        /* state ready and self-check passed */
    int has_model;    /* an engine on it serves the model now */
    int loadable;     /* it can start an engine for the model */
    uint64_t need_bytes; /* the planner's estimate for starting it */
    int excluded;     /* already tried for this request */
    int inflight;
    int slots;        /* engine slots; <= 0 counts as 1 */
    uint64_t free_vram;
} place_candidate;

/* Index of the chosen candidate, or -1 when none qualifies. */
int placement_pick(const place_candidate *c, size_t n);

/* Why nothing qualified, for the caller's answer. */
typedef enum place_block {
    PLACE_OK,          /* something qualifies */
    PLACE_NO_MODEL,    /* no node at all serves the model */
    PLACE_BUSY,        /* nodes serve it, all their slots are taken */
    PLACE_UNAVAILABLE, /* nodes serve it, none is ready (or all excluded) */
    PLACE_NO_FIT,      /* nodes could start it, but it fits no free VRAM */
} place_block;
place_block placement_why(const place_candidate *c, size_t n);

#endif
