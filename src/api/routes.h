/* api/routes: the coordinator's route table, the one list of what the HTTP
 * API answers.  The router dispatches from it and the OpenAPI test compares
 * it with docs/openapi.json, so an endpoint cannot be added to one without
 * the other.  Pure: no sockets, no state. */
#ifndef GPUPOOL_API_ROUTES_H
#define GPUPOOL_API_ROUTES_H

#include <stddef.h>

#include "api/metrics.h"

typedef enum api_op {
    OP_HEALTH, OP_METRICS, OP_OPENAPI, OP_REGISTER, OP_HEARTBEAT,
    OP_CHAT, OP_COMPLETIONS, OP_EMBEDDINGS, OP_MODELS,
    OP_TASKS_CREATE, OP_TASKS_LIST, OP_TASK_POLL, OP_TASK_GET, OP_TASK_CANCEL,
    OP_NODES, OP_NODE_DRAIN, OP_NODE_UNDRAIN, OP_NODE_FORGET, OP_PLAN,
    OP_CACHE_INVALIDATE,
    OP_BATCHES_CREATE, OP_BATCHES_LIST, OP_BATCH_GET, OP_BATCH_RESULTS, OP_BATCH_CANCEL,
    OP_SESSION_GET, OP_SESSION_DELETE,
    OP_BUDGET,
    OP_APPS_LIST, OP_APP_CALL, OP_APP_RUN_GET, OP_PIPELINES_LIST, OP_PIPELINE_CALL, OP_PIPELINE_RUN_GET,
    OP_APP_RUN_CANCEL, OP_PIPELINE_RUN_CANCEL,
    OP_ROLLOUTS_CREATE, OP_ROLLOUTS_LIST, OP_ROLLOUT_GET, OP_ROLLOUT_ADVANCE, OP_ROLLOUT_PAUSE, OP_ROLLOUT_RESUME,
    OP_ROLLOUT_ABORT,
    OP_AUDIT_LIST, OP_AUDIT_GET, OP_WEBHOOK_DELIVERIES,
    OP_FILE_SOURCES
} api_op;

typedef enum api_auth {
    AUTH_OPEN,   /* no key needed (health, metrics, the API document) */
    AUTH_CLIENT, /* a client API key when keys are in use */
    AUTH_ADMIN,  /* an admin key when keys are in use */
    AUTH_NODE    /* the control plane's own tokens, checked by its handler */
} api_auth;

typedef struct api_route {
    const char *method;
    const char *path;    /* as in the OpenAPI document: a segment "{id}" matches any one segment */
    api_op op;
    api_auth auth;
    metrics_route metric;
    int internal;        /* the workers' control plane: not in the public document */
} api_route;

/* Every route, concrete paths before templated ones. */
const api_route *api_routes(size_t *n);

/* The route for method and path (path without its query).  NULL when there
 * is none; *path_known then says whether another method would have matched
 * (405 rather than 404).  A "{id}" segment's text is copied to id (empty when
 * the path has none; NULL when it does not fit in idlen). */
const api_route *api_route_find(const char *method, const char *path, char *id, size_t idlen, int *path_known);

/* The methods the path answers, "GET, POST" (for Allow and CORS preflights);
 * "" for an unknown path.  Returns the length written. */
size_t api_route_methods(const char *path, char *out, size_t len);

#endif
