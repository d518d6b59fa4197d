/* api/coord: the coordinator's shared state and its request handlers.
 * cmd/serve.c builds a coord and hands coord_handle to the HTTP server. */
#ifndef GPUPOOL_COORD_H
#define GPUPOOL_COORD_H

#include <stdint.h>

#include "api/audit.h"
#include "api/lowcode.h"
#include "api/session_fit.h"
#include "api/webhooks.h"
#include "http/server.h"
#include "node/registry.h"
#include "policy/cache.h"
#include "sched/dispatch.h"
#include "store/store.h"

#define COORD_MAX_KEYS 64

typedef struct coord_cfg {
    char *api_keys[COORD_MAX_KEYS]; /* empty = no client authentication */
    int nkeys;
    char *admin_keys[COORD_MAX_KEYS]; /* also in api_keys; may drain and forget nodes */
    int nadmin;
    char *private_keys[COORD_MAX_KEYS]; /* also in api_keys; their requests are private by default */
    int nprivate;
    int queue_max;             /* requests that may wait for a slot */
    int64_t task_queue_max;    /* async tasks that may be queued */
    int64_t queue_timeout_ms;  /* how long a request waits for a slot */
    int64_t upstream_timeout_ms;
    int max_attempts;          /* nodes tried per request / task */
    const char *models_dir;    /* GGUF files POST /v1/plan may read; NULL = none */
    int stream_continue;       /* a stream that breaks after tokens goes on from another node */
    lowcode_cfg lowcode;       /* CORS, the always-200 envelope, camelCase (api/lowcode) */
    cache_config cache;        /* the semantic cache's settings (used when coord.cache is open) */
    const char *cache_pool_model; /* the cache's vectors come from this embedding model; NULL = built-in */
    session_config sessions;   /* conversation sessions (api/sessions) */
} coord_cfg;

typedef struct coord {
    coord_cfg cfg;
    store *st;
    registry *reg;
    dispatcher *disp;
    const struct detect_rules *rules; /* sensitive-data detectors (policy/detect) */
    semcache *cache;                  /* the semantic cache (api/cache); NULL when off */
    struct api_track *track;          /* the two-track router's rules and budgets (api/track) */
    const struct apps_cfg *apps;      /* --apps: prompt apps and pipelines (apps/appcfg); NULL = none */
    struct app_runner *runner;        /* moves their runs on (apps/runner) */
    struct rollout_table *rollouts;   /* api/rollout_table; NULL: no rollouts */
    const struct catalog *catalog;    /* the model catalogue (--catalog); NULL when none */
    auditor *audit;                   /* the audit log (api/audit); NULL when off */
    webhooks *hooks;                  /* callback deliveries (api/webhooks) */
    int64_t started_mono;
} coord;

/* The HTTP handlers: the fast one runs on the event loop and takes the
 * proxied calls that can go out at once; the other runs on a pool thread
 * and may block.  Both route and authenticate; coord_observe records metrics. */
http_fast_rc coord_fast(http_req *req, void *app);
void coord_handle(http_req *req, void *app);
void coord_observe(http_req *req, int status, int64_t dur_us, void *app);
/* The server's answer hook: the low-code policy over every answer. */
void coord_answer(http_req *req, http_answer *a, void *app);
/* Who made the request, for per-key limits: "key-" and a digest of its API
 * key, or "" without keys. */
void coord_owner(coord *c, http_req *req, char out[40]);
/* Whether the request's API key makes it private by default. */
int coord_key_private(coord *c, http_req *req);

/* Handlers, one file each (api/openai.c, api/tasks.c, api/nodes.c). */
void api_openai_proxy(coord *c, http_req *req, int kind);
http_fast_rc api_openai_fast(coord *c, http_req *req, int kind);
void api_models(coord *c, http_req *req);
void api_tasks_create(coord *c, http_req *req);
void api_tasks_get(coord *c, http_req *req, const char *id);
void api_tasks_list(coord *c, http_req *req);
void api_tasks_cancel(coord *c, http_req *req, const char *id);
/* api/batches.c: POST /v1/batches, GET /v1/batches[/{id}[/results]],
 * POST /v1/batches/{id}/cancel. */
void api_batches_create(coord *c, http_req *req);
void api_batches_get(coord *c, http_req *req, const char *id);
void api_batches_list(coord *c, http_req *req);
void api_batches_results(coord *c, http_req *req, const char *id);
void api_batches_cancel(coord *c, http_req *req, const char *id);
/* api/apps.c: GET /v1/apps and /v1/pipelines, POST /v1/apps/{name} and
 * /v1/pipelines/{name}, GET and DELETE /v1/apps/runs/{id} and
 * /v1/pipelines/runs/{id}. */
void api_apps_list(coord *c, http_req *req, int pipelines);
void api_app_call(coord *c, http_req *req, const char *name, int pipeline);
void api_run_get(coord *c, http_req *req, const char *id, int pipeline);
/* An app or pipeline run as GET /v1/.../runs/{id} shows it (webhook bodies);
 * NULL with *found 0 when there is none. */
json_t *api_run_view(coord *c, const char *id, int *found);
/* DELETE /v1/apps/runs/{id}, /v1/pipelines/runs/{id}. */
void api_run_cancel(coord *c, http_req *req, const char *id, int pipeline);
/* api/rollouts.c: POST /v1/rollouts, GET /v1/rollouts[/{name}], POST
 * /v1/rollouts/{name}/{advance,pause,resume,abort} (verb), and the
 * rewrite of a request naming a rollout (on the fast path, before any
 * handler), its outcome (from coord_observe), and an async task's model
 * (returns 1 and writes the version's model to out when model is a rollout;
 * with req NULL, for a batch's items, it names no version in a header). */
void api_rollouts_create(coord *c, http_req *req);
void api_rollouts_list(coord *c, http_req *req);
void api_rollouts_get(coord *c, http_req *req, const char *name);
void api_rollouts_act(coord *c, http_req *req, const char *name, const char *verb);
void api_rollout_route(coord *c, http_req *req);
void api_rollout_observe(coord *c, http_req *req, int status, int64_t dur_us);
int api_rollout_task_model(coord *c, http_req *req, const char *model, json_t *input, char *out, size_t outlen);
void api_nodes(coord *c, http_req *req);
/* POST /v1/nodes/{id}/drain, /undrain; DELETE /v1/nodes/{id} (admin). */
void api_node_admin(coord *c, http_req *req, const char *id, const char *verb);
void api_register(coord *c, http_req *req);
void api_heartbeat(coord *c, http_req *req);
void api_file_sources(coord *c, http_req *req, const char *sha256);
void api_metrics(coord *c, http_req *req);
void api_plan(coord *c, http_req *req);
/* api/sessions.c: GET and DELETE /v1/sessions/{id}. */
void api_sessions_get(coord *c, http_req *req, const char *id);
void api_sessions_delete(coord *c, http_req *req, const char *id);
/* api/audit_api.c: GET /v1/audit and GET /v1/audit/{request_id} (admin). */
void api_audit_list(coord *c, http_req *req);
void api_audit_get(coord *c, http_req *req, const char *request_id);
/* api/webhooks_api.c: GET /v1/webhooks/deliveries; and callback_url, shared
 * by task and batch creation: NULL when absent, else the URL, or -1 after
 * answering 400. */
void api_webhook_deliveries(coord *c, http_req *req);
int api_callback_url(coord *c, http_req *req, json_t *v, const char **url);
/* A task and a batch as GET /v1/tasks/{id} and /v1/batches/{id} show them
 * (webhook bodies); NULL with *found 0 when there is none. */
json_t *api_task_view(coord *c, const char *id, int *found);
json_t *api_batch_view(coord *c, const char *id, int *found);

/* Shared by the proxy paths (api/openai.c, api/stream.c): the headers that
 * name who served (route_reason: the router's reason for X-Gpupool-Route,
 * NULL for the default one), and whether an answer is the node refusing (its
 * self-check failed, or it refused its token) so another node may serve. */
void api_served_by(http_req *req, const node_lease *l, const char *private_rule, const char *route_reason);
int api_node_refused(long status, const char *body);
/* Retry-After for a 429: when the pool should have drained `waiting`
 * requests ahead, at its rate of the last minute. */
void api_retry_after(coord *c, http_req *req, int64_t waiting);

#endif
