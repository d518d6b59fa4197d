/* api/rollout_table: the coordinator's rollouts (sched/rollout), by name.
 *
 * Thread-safe: the event loop routes requests and records their outcomes
 * here, pool threads act on rollouts, and a thread of its own advances them
 * on time and writes every change to the store.  Changes made on the event
 * loop (a rollback) are written by that thread, so the loop never waits on
 * SQLite. */
#ifndef GPUPOOL_API_ROLLOUT_TABLE_H
#define GPUPOOL_API_ROLLOUT_TABLE_H

#include <jansson.h>
#include <stddef.h>

#include "sched/rollout.h"
#include "store/store.h"
#include "util/buf.h"

#define ROLLOUT_TABLE_MAX 64

typedef struct rollout_table rollout_table;

/* Loads the stored rollouts and starts the ticking thread; NULL with err
 * on a store error. */
rollout_table *rollout_table_open(store *st, char *err, size_t errlen);
/* Writes what is unwritten and stops the thread. */
void rollout_table_close(rollout_table *t);

/* Whether the body may name a rollout (a cheap scan before any parse). */
int rollout_table_mentioned(rollout_table *t, const char *body, size_t len);

typedef struct rollout_pick {
    char name[RO_NAME_MAX];
    char model[RO_MODEL_MAX];
    int version;            /* RO_STABLE or RO_CANARY */
} rollout_pick;
/* When model names a rollout: the version this request goes to (key keeps
 * a session on one version).  Returns 1 then, 0 when it names none. */
int rollout_table_route(rollout_table *t, const char *model, const char *key, rollout_pick *out);
/* A routed request's outcome. */
void rollout_table_outcome(rollout_table *t, const char *name, int version, int error, double latency_ms);
/* An outcome of work for a model (async tasks, which carry no pick): it
 * counts for every unfinished rollout of which the model is a version. */
void rollout_table_model_outcome(rollout_table *t, const char *model, int error, double latency_ms);

typedef enum rollout_rc { ROLLOUT_OK, ROLLOUT_NOT_FOUND, ROLLOUT_REFUSED, ROLLOUT_FULL, ROLLOUT_STORE } rollout_rc;
/* A new rollout; REFUSED when an unfinished one has the name (a finished
 * one is replaced).  *out gets its view (caller decrefs). */
rollout_rc rollout_table_create(rollout_table *t, const ro_spec *spec, json_t **out, char *why, size_t len);
/* verb: advance, pause, resume, abort. */
rollout_rc rollout_table_act(rollout_table *t, const char *name, const char *verb, json_t **out, char *why,
                             size_t len);
/* One rollout's view, or NULL; every rollout's, oldest first. */
json_t *rollout_table_get(rollout_table *t, const char *name);
json_t *rollout_table_list(rollout_table *t);
/* Auto-advances due rollouts and writes changed ones (the thread calls it). */
void rollout_table_tick(rollout_table *t);
/* Prometheus lines: each rollout's share, state, and per version requests
 * and errors. */
void rollout_table_metrics(rollout_table *t, buf *out);

#endif
