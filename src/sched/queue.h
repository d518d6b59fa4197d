/* sched/queue: the order in which queued tasks are dispatched.  Pure: the
 * dispatcher hands in what it knows about each task and `now` (monotonic ms).
 *
 * Priority classes first (0-9, higher first).  Waiting lifts a task one class
 * per `aging_ms`, so a steady stream of urgent work cannot starve the rest.
 * Within a class the shortest estimated job goes first (from its prompt and
 * max_tokens and the pool's measured speed), then the oldest.  A task backing
 * off after a failure is not offered until its time comes.
 *
 * Per-key fairness: an API key may have at most `key_max_running` tasks
 * running, and while other keys have work waiting it may hold at most
 * `key_max_share` of the pool's slots.  Both are checked as each task starts
 * (queue_owner_may_start), since starting one changes the counts. */
#ifndef GPUPOOL_QUEUE_H
#define GPUPOOL_QUEUE_H

#include <stddef.h>
#include <stdint.h>

typedef struct queue_item {
    const char *id;
    const char *owner;       /* who submitted it (an API key's id); "" = anonymous */
    int priority;            /* 0..9 */
    int64_t enqueued_ms;     /* when it was first seen queued */
    double est_ms;           /* estimated service time */
    int64_t not_before_ms;   /* backing off until then; 0 = not */
} queue_item;

typedef struct queue_cfg {
    int64_t aging_ms;        /* one class per this much waiting; 0 = no aging */
    int key_max_running;     /* 0 = no limit */
    double key_max_share;    /* 0 < share <= 1 of all slots while others wait; 0 = no limit */
} queue_cfg;

/* The class a task competes in now. */
int queue_effective_priority(const queue_cfg *cfg, const queue_item *it, int64_t now);

/* Fills order[] with the indexes of the items that may be offered now, in
 * dispatch order, and returns how many. */
size_t queue_order(const queue_cfg *cfg, const queue_item *items, size_t n, int64_t now, size_t *order);

/* Whether a task of an owner that has `running` tasks running may start,
 * given whether other owners have tasks waiting and the pool's slots. */
int queue_owner_may_start(const queue_cfg *cfg, int running, int others_waiting, int total_slots);

#endif
