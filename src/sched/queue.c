/* sched/queue: see queue.h. */
#include "sched/queue.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Aging may lift a task past every class, so that it cannot starve. */
#define MAX_AGED_PRIORITY 1000

int queue_effective_priority(const queue_cfg *cfg, const queue_item *it, int64_t now)
{
    int64_t waited = now - it->enqueued_ms;
    if (cfg->aging_ms <= 0 || waited <= 0) return it->priority;
    int64_t lift = waited / cfg->aging_ms;
    int64_t p = it->priority + lift;
    return p > MAX_AGED_PRIORITY ? MAX_AGED_PRIORITY : (int)p;
}

typedef struct keyed {
    size_t idx;
    int prio;
    double est;
    int64_t enq;
    const char *id;
} keyed;

static int cmp(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->prio != y->prio) return x->prio > y->prio ? -1 : 1;
    if (x->est != y->est) return x->est < y->est ? -1 : 1;
    if (x->enq != y->enq) return x->enq < y->enq ? -1 : 1;
    return strcmp(x->id ? x->id : "", y->id ? y->id : "");
}

size_t queue_order(const queue_cfg *cfg, const queue_item *items, size_t n, int64_t now, size_t *order)
{
    keyed stack[256];
    keyed *k = n <= 256 ? stack : malloc(n * sizeof *k);
    if (!k) {
        /* No memory to sort: offer them as they came rather than none. */
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (items[i].not_before_ms <= now) order[m++] = i;
        return m;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].not_before_ms > now) continue;
        double est = items[i].est_ms;
        k[m++] = (keyed){i, queue_effective_priority(cfg, &items[i], now), isfinite(est) && est > 0 ? est : 0,
                         items[i].enqueued_ms, items[i].id};
    }
    qsort(k, m, sizeof *k, cmp);
    for (size_t i = 0; i < m; i++) order[i] = k[i].idx;
    if (k != stack) free(k);
    return m;
}

int queue_owner_may_start(const queue_cfg *cfg, int running, int others_waiting, int total_slots)
{
    if (cfg->key_max_running > 0 && running >= cfg->key_max_running) return 0;
    if (cfg->key_max_share > 0 && others_waiting && total_slots > 0) {
        /* At least one slot, so a small pool still serves every key. */
        int cap = (int)floor(cfg->key_max_share * total_slots);
        if (cap < 1) cap = 1;
        if (running >= cap) return 0;
    }
    return 1;
}
