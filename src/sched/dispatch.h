/* sched/dispatch: runs accepted async tasks.  The only I/O in sched/.
 *
 * One thread reads the queued tasks from the store, orders them with
 * sched/queue (priority with aging, shortest job first, per-key limits),
 * leases a node slot for each from the registry (sched/placement decides),
 * marks the task running and calls the node on a thread of its own.
 * Outcomes go back to the store: a result is written once.  A failed attempt
 * is queued again after a backoff that doubles, and placed on another node
 * where one can take it, until its attempts run out; every attempt is kept
 * with its node and a reason code.  An attempt running past `hedge_factor`
 * times its estimate is started again on another node: the first result
 * wins and the other attempt is cancelled.  Requests waiting synchronously
 * for a slot go before queued tasks, since a person is waiting on them. */
#ifndef GPUPOOL_DISPATCH_H
#define GPUPOOL_DISPATCH_H

#include <stdint.h>

#include "node/registry.h"
#include "sched/queue.h"
#include "store/store.h"

typedef struct dispatcher dispatcher;

typedef struct dispatch_cfg {
    store *st;
    registry *reg;
    int max_attempts;          /* default for tasks that name none */
    int64_t task_timeout_ms;   /* longest run of one attempt */
    queue_cfg queue;
    double hedge_factor;       /* start a second attempt past this x the estimate; 0 = never */
    int64_t hedge_min_ms;      /* never before this long */
    int64_t backoff_ms;        /* first retry delay; doubles per attempt, up to 32x */
    /* Optional: each attempt's outcome for its model (ok = the node did
     * its job), e.g. for the rollouts judging a version. */
    void (*outcome)(void *ctx, const char *model, int ok, double total_ms);
    void *outcome_ctx;
} dispatch_cfg;

dispatcher *dispatcher_start(const dispatch_cfg *cfg);
/* Cancels running calls (their tasks stay running and are re-queued at the
 * next start) and waits for every thread to end. */
void dispatcher_stop(dispatcher *d);
/* Capacity may have appeared (a slot freed, a node joined). */
void dispatcher_wake(dispatcher *d);
/* A task was queued. */
void dispatcher_task_queued(dispatcher *d);
/* The node went offline: its running calls are cancelled and re-queued. */
void dispatcher_node_offline(dispatcher *d, const char *node_id);
/* The node's heartbeats are overdue (registry_silent): its running attempts
 * start again on another node now; the first result wins. */
void dispatcher_node_silent(dispatcher *d, const char *node_id);
/* The task was canceled by a user: stop its call. */
void dispatcher_cancel_task(dispatcher *d, const char *task_id);
int dispatcher_running(dispatcher *d);
/* Where the task stood in the last dispatch order: tasks ahead of it and
 * their estimated work (ms, summed).  -1 when it was not in that order. */
int dispatcher_queue_position(dispatcher *d, const char *task_id, int64_t *ahead, double *work_ahead_ms);
/* Attempts started again on another node because they ran too long. */
uint64_t dispatcher_hedges(dispatcher *d);

#endif
