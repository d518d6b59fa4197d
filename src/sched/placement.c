/* sched/placement: see placement.h. */
#include "sched/placement.h"

#include <string.h>

static int fits(const place_candidate *c) { return c->loadable && c->need_bytes <= c->free_vram; }

static int qualifies(const place_candidate *c)
{
    int slots = c->slots > 0 ? c->slots : 1;
    return c->ready && (c->has_model || fits(c)) && !c->excluded && c->inflight < slots;
}

/* Negative when a is better than b. */
static int compare(const place_candidate *a, const place_candidate *b)
{
    if (a->has_model != b->has_model) return a->has_model ? -1 : 1;
    long sa = a->slots > 0 ? a->slots : 1, sb = b->slots > 0 ? b->slots : 1;
    /* a->inflight/sa < b->inflight/sb, without division */
    long l = (long)a->inflight * sb, r = (long)b->inflight * sa;
    if (l != r) return l < r ? -1 : 1;
    if (a->free_vram != b->free_vram) return a->free_vram > b->free_vram ? -1 : 1;
    return strcmp(a->id ? a->id : "", b->id ? b->id : "");
}

int placement_pick(const place_candidate *c, size_t n)
{
    int best = -1;
    for (size_t i = 0; i < n; i++) {
        if (!qualifies(&c[i])) continue;
        if (best < 0 || compare(&c[i], &c[best]) < 0) best = (int)i;
    }
    return best;
}

place_block placement_why(const place_candidate *c, size_t n)
{
    int serves = 0, usable = 0, could_start = 0;
    for (size_t i = 0; i < n; i++) {
        if (!c[i].has_model && !c[i].loadable) continue;
        serves = 1;
        if (c[i].ready && !c[i].excluded && (c[i].has_model || fits(&c[i]))) usable = 1;
        if (c[i].loadable && !c[i].has_model) could_start = 1;
        if (qualifies(&c[i])) return PLACE_OK;
    }
    if (!serves) return PLACE_NO_MODEL;
    if (usable) return PLACE_BUSY;
    return could_start ? PLACE_NO_FIT : PLACE_UNAVAILABLE;
}
