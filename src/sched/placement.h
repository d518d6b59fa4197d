/* sched/placement: picks the node for one request.  Pure: structs in,
 * decision out, no clock and no I/O, so every rule is unit-tested.
 *
 * First version of the rule: only ready nodes that serve the model and have a
 * free engine slot qualify; among them the fewest in-flight requests relative
 * to slots wins, then the most free VRAM, then the lowest id (stable). */
#ifndef GPUPOOL_PLACEMENT_H
#define GPUPOOL_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

typedef struct place_candidate {
    const char *id;
    int ready;        /* state ready and self-check passed */
    int has_model;    /* an engine on it lists the model */
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
} place_block;
place_block placement_why(const place_candidate *c, size_t n);

#endif
