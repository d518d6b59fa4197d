/* api/router: the coordinator's one HTTP handler.  It maps method and path to
 * a handler through the route table (api/routes), checks client API keys,
 * applies the low-code policy (api/lowcode) to every request and answer, and
 * records every answer in metrics. */
#include <stdio.h>
#include <string.h>

#include "api/cache.h"
#include "api/coord.h"
#include "api/errors.h"
#include "api/metrics.h"
#include "api/openapi.h"
#include "api/routes.h"
#include "api/track.h"
#include "api/validate.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/log.h"

static int authorized(coord *c, http_req *req)
{
    if (c->cfg.nkeys == 0) return 1;
    const char *key = http_req_bearer(req);
    if (key)
        for (int i = 0; i < c->cfg.nkeys; i++)
            if (secret_equal(key, c->cfg.api_keys[i])) return 1;
    log_warn("refused %s %s from %s: %s", http_req_method(req), http_req_path(req), http_req_peer(req),
             key ? "unknown API key" : "no API key");
    api_error(req, 401, "invalid_request_error", "invalid_api_key", NULL,
              key ? "the API key is not valid" : "an API key is required (Authorization: Bearer ...)");
    return 0;
}

void coord_owner(coord *c, http_req *req, char out[40])
{
    out[0] = 0;
    const char *key = http_req_bearer(req);
    if (c->cfg.nkeys == 0 || !key) return;
    /* A digest, so the key itself is never stored or shown. */
    char digest[65];
    sha256_hex(key, strlen(key), digest);
    snprintf(out, 40, "key-%.12s", digest);
}

int coord_key_private(coord *c, http_req *req)
{
    const char *key = http_req_bearer(req);
    for (int i = 0; key && i < c->cfg.nprivate; i++)
        if (secret_equal(key, c->cfg.private_keys[i])) return 1;
    return 0;
}

static int is(const char *a, const char *b) { return !strcmp(a, b); }

/* Administration needs an admin key whenever keys are in use. */
static int admin_authorized(coord *c, http_req *req)
{
    if (!authorized(c, req)) return 0;
    if (c->cfg.nkeys == 0) return 1;
    const char *key = http_req_bearer(req);
    for (int i = 0; i < c->cfg.nadmin; i++)
        if (secret_equal(key, c->cfg.admin_keys[i])) return 1;
    log_warn("refused %s %s from %s: not an admin key", http_req_method(req), http_req_path(req), http_req_peer(req));
    api_error(req, 403, "invalid_request_error", "admin_required", NULL, "this needs an admin API key");
    return 0;
}

static metrics_route route_and_run(coord *c, http_req *req)
{
    const char *m = http_req_method(req), *p = http_req_path(req);
    char id[256];
    int known;
    const api_route *rt = api_route_find(m, p, id, sizeof id, &known);
    if (!rt && known) {
        char allow[96], methods[64];
        api_route_methods(p, methods, sizeof methods);
        snprintf(allow, sizeof allow, "%s, OPTIONS", methods);
        http_set_header(req, "Allow", allow);
        api_error(req, 405, "invalid_request_error", "method_not_allowed", NULL, "%s is not allowed on %s", m, p);
        return ROUTE_OTHER;
    }
    if (!rt) {
        api_error(req, 404, "invalid_request_error", "not_found", NULL, "no such endpoint: %s %s", m, p);
        return ROUTE_OTHER;
    }
    if (rt->auth == AUTH_CLIENT && !authorized(c, req)) return rt->metric;
    if (rt->auth == AUTH_ADMIN && !admin_authorized(c, req)) return rt->metric;
    switch (rt->op) {
    case OP_HEALTH: http_respond(req, 200, "application/json", "{\"status\":\"ok\"}", 15); break;
    case OP_METRICS: api_metrics(c, req); break;
    case OP_OPENAPI: api_openapi_serve(req); break;
    case OP_REGISTER: api_register(c, req); break;
    case OP_HEARTBEAT: api_heartbeat(c, req); break;
    case OP_CHAT: api_openai_proxy(c, req, KIND_CHAT); break;
    case OP_COMPLETIONS: api_openai_proxy(c, req, KIND_COMPLETION); break;
    case OP_EMBEDDINGS: api_openai_proxy(c, req, KIND_EMBEDDING); break;
    case OP_MODELS: api_models(c, req); break;
    case OP_TASKS_CREATE: api_tasks_create(c, req); break;
    case OP_TASKS_LIST: api_tasks_list(c, req); break;
    case OP_TASK_POLL: {
        /* The GET form a data source polls with: the id as a parameter. */
        const char *tid = http_req_query(req, "id");
        if (!tid || !*tid) api_bad_request(req, "missing_field", "id", "the query parameter 'id' (a task id) is required");
        else api_tasks_get(c, req, tid);
        break;
    }
    case OP_TASK_GET: api_tasks_get(c, req, id); break;
    case OP_TASK_CANCEL: api_tasks_cancel(c, req, id); break;
    case OP_NODES: api_nodes(c, req); break;
    case OP_NODE_DRAIN: api_node_admin(c, req, id, "drain"); break;
    case OP_NODE_UNDRAIN: api_node_admin(c, req, id, "undrain"); break;
    case OP_NODE_FORGET: api_node_admin(c, req, id, "forget"); break;
    case OP_PLAN: api_plan(c, req); break;
    case OP_CACHE_INVALIDATE: api_cache_invalidate(c, req); break;
    case OP_BATCHES_CREATE: api_batches_create(c, req); break;
    case OP_BATCHES_LIST: api_batches_list(c, req); break;
    case OP_BATCH_GET: api_batches_get(c, req, id); break;
    case OP_BATCH_RESULTS: api_batches_results(c, req, id); break;
    case OP_BATCH_CANCEL: api_batches_cancel(c, req, id); break;
    case OP_SESSION_GET: api_sessions_get(c, req, id); break;
    case OP_SESSION_DELETE: api_sessions_delete(c, req, id); break;
    case OP_BUDGET: api_budget_get(c, req); break;
    case OP_APPS_LIST: api_apps_list(c, req, 0); break;
    case OP_PIPELINES_LIST: api_apps_list(c, req, 1); break;
    case OP_APP_CALL: api_app_call(c, req, id, 0); break;
    case OP_PIPELINE_CALL: api_app_call(c, req, id, 1); break;
    case OP_APP_RUN_GET: api_run_get(c, req, id, 0); break;
    case OP_PIPELINE_RUN_GET: api_run_get(c, req, id, 1); break;
    case OP_APP_RUN_CANCEL: api_run_cancel(c, req, id, 0); break;
    case OP_PIPELINE_RUN_CANCEL: api_run_cancel(c, req, id, 1); break;
    case OP_ROLLOUTS_CREATE: api_rollouts_create(c, req); break;
    case OP_ROLLOUTS_LIST: api_rollouts_list(c, req); break;
    case OP_ROLLOUT_GET: api_rollouts_get(c, req, id); break;
    case OP_ROLLOUT_ADVANCE: api_rollouts_act(c, req, id, "advance"); break;
    case OP_ROLLOUT_PAUSE: api_rollouts_act(c, req, id, "pause"); break;
    case OP_ROLLOUT_RESUME: api_rollouts_act(c, req, id, "resume"); break;
    case OP_ROLLOUT_ABORT: api_rollouts_act(c, req, id, "abort"); break;
    case OP_AUDIT_LIST: api_audit_list(c, req); break;
    case OP_AUDIT_GET: api_audit_get(c, req, id); break;
    case OP_WEBHOOK_DELIVERIES: api_webhook_deliveries(c, req); break;
    case OP_FILE_SOURCES: api_file_sources(c, req, id); break;
    }
    return rt->metric;
}

static int proxied_kind(const api_route *rt)
{
    if (!rt) return -1;
    if (rt->op == OP_CHAT) return KIND_CHAT;
    if (rt->op == OP_COMPLETIONS) return KIND_COMPLETION;
    if (rt->op == OP_EMBEDDINGS) return KIND_EMBEDDING;
    return -1;
}

http_fast_rc coord_fast(http_req *req, void *app)
{
    coord *c = app;
    char id[256];
    int known;
    const api_route *rt = api_route_find(http_req_method(req), http_req_path(req), id, sizeof id, &known);
    char owner[40];
    coord_owner(c, req, owner);
    audit_begin(c->audit, req, owner,
                rt && rt->internal ? AUDIT_NONE
                : rt && (rt->op == OP_AUDIT_LIST || rt->op == OP_AUDIT_GET) ? AUDIT_NO_ANSWER : AUDIT_ALL);
    /* Every request passes here first, so the low-code rewrites happen
     * before any handler reads the body. */
    if (lowcode_prepare(&c->cfg.lowcode, req)) {
        metrics_route mr = is(http_req_method(req), "OPTIONS") ? ROUTE_PREFLIGHT : rt ? rt->metric : ROUTE_OTHER;
        http_req_set_tag(req, (int)mr + 1);
        return HTTP_HANDLED;
    }
    int kind = proxied_kind(rt);
    if (kind < 0) return HTTP_PASS;
    http_req_set_tag(req, (int)rt->metric + 1);
    if (!authorized(c, req)) return HTTP_HANDLED;
    /* Here, so both paths (and a retry on the blocking one) see the
     * version's model and the request is counted for one version once. */
    api_rollout_route(c, req);
    return api_openai_fast(c, req, kind);
}

void coord_handle(http_req *req, void *app)
{
    http_req_set_tag(req, (int)route_and_run(app, req) + 1);
}

void coord_observe(http_req *req, int status, int64_t dur_us, void *app)
{
    coord *c = app;
    audit_finish(c->audit, req, status, dur_us);
    api_rollout_observe(c, req, status, dur_us);
    /* Tags are route + 1, so an untagged answer (e.g. an early 413) is "other". */
    int tag = http_req_tag(req);
    metrics_observe(tag > 0 ? (metrics_route)(tag - 1) : ROUTE_OTHER, status, dur_us);
}

void coord_answer(http_req *req, http_answer *a, void *app)
{
    coord *c = app;
    lowcode_answer(&c->cfg.lowcode, req, a);
    audit_answer(c->audit, req, a);
}
