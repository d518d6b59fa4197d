/* sched/dispatch: runs accepted async tasks.  The only I/O in sched/.
 *
 * One thread takes queued tasks from the store in dispatch order, leases a
 * node slot from the registry, marks the task running and calls the node on a
 * thread of its own.  Outcomes go back to the store: a result is written once;
 * a lost node, an unreachable node or a 5xx puts the task back in the queue
 * until its attempts run out.  Requests waiting synchronously for a slot go
 * before queued tasks, since a person is waiting on them. */
#ifndef GPUPOOL_DISPATCH_H
#define GPUPOOL_DISPATCH_H

#include <stdint.h>

#include "node/registry.h"
#include "store/store.h"

typedef struct dispatcher dispatcher;

typedef struct dispatch_cfg {
    store *st;
    registry *reg;
    int max_attempts;
    int64_t task_timeout_ms;
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
/* The task was canceled by a user: stop its call. */
void dispatcher_cancel_task(dispatcher *d, const char *task_id);
int dispatcher_running(dispatcher *d);

#endif
