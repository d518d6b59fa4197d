/* api/router: the coordinator's one HTTP handler.  It maps method and path to
 * a handler, checks client API keys, and records every answer in metrics. */
#include <stdio.h>
#include <string.h>

#include "api/coord.h"
#include "api/errors.h"
#include "api/metrics.h"
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

static const struct {
    const char *path;
    metrics_route route;
    int kind;
} proxied[] = {
    {"/v1/chat/completions", ROUTE_CHAT, KIND_CHAT},
    {"/v1/completions", ROUTE_COMPLETIONS, KIND_COMPLETION},
    {"/v1/embeddings", ROUTE_EMBEDDINGS, KIND_EMBEDDING},
};

static int proxied_index(const char *path)
{
    for (size_t i = 0; i < sizeof proxied / sizeof proxied[0]; i++)
        if (is(path, proxied[i].path)) return (int)i;
    return -1;
}

static metrics_route route_and_run(coord *c, http_req *req)
{
    const char *m = http_req_method(req), *p = http_req_path(req);
    int get = is(m, "GET"), post = is(m, "POST"), del = is(m, "DELETE");

    if (is(p, "/healthz") && get) {
        http_respond_text(req, 200, "{\"status\":\"ok\"}");
        return ROUTE_HEALTH;
    }
    if (is(p, "/metrics") && get) { api_metrics(c, req); return ROUTE_METRICS; }
    if (is(p, "/internal/v1/register") && post) { api_register(c, req); return ROUTE_REGISTER; }
    if (is(p, "/internal/v1/heartbeat") && post) { api_heartbeat(c, req); return ROUTE_HEARTBEAT; }

    int px = proxied_index(p);
    if (px >= 0) {
        if (!post) goto wrong_method;
        if (authorized(c, req)) api_openai_proxy(c, req, proxied[px].kind);
        return proxied[px].route;
    }
    if (is(p, "/v1/models")) {
        if (!get) goto wrong_method;
        if (authorized(c, req)) api_models(c, req);
        return ROUTE_MODELS;
    }
    if (is(p, "/v1/nodes")) {
        if (!get) goto wrong_method;
        if (authorized(c, req)) api_nodes(c, req);
        return ROUTE_NODES;
    }
    if (!strncmp(p, "/v1/nodes/", 10) && p[10]) {
        char id[64];
        const char *slash = strchr(p + 10, '/');
        size_t idlen = slash ? (size_t)(slash - (p + 10)) : strlen(p + 10);
        const char *verb = slash ? slash + 1 : "";
        if (idlen == 0 || idlen >= sizeof id) goto not_found;
        memcpy(id, p + 10, idlen);
        id[idlen] = 0;
        if (!*verb && del) verb = "forget";
        else if ((is(verb, "drain") || is(verb, "undrain")) && !post) goto wrong_method;
        else if (!is(verb, "drain") && !is(verb, "undrain")) {
            if (!*verb) goto wrong_method;
            goto not_found;
        }
        if (admin_authorized(c, req)) api_node_admin(c, req, id, verb);
        return ROUTE_NODES;
    }
    if (is(p, "/v1/plan")) {
        if (!post) goto wrong_method;
        if (authorized(c, req)) api_plan(c, req);
        return ROUTE_PLAN;
    }
    if (is(p, "/v1/tasks")) {
        if (post) { if (authorized(c, req)) api_tasks_create(c, req); return ROUTE_TASKS_CREATE; }
        if (get) { if (authorized(c, req)) api_tasks_list(c, req); return ROUTE_TASKS_LIST; }
        goto wrong_method;
    }
    if (!strncmp(p, "/v1/tasks/", 10) && p[10] && !strchr(p + 10, '/')) {
        const char *id = p + 10;
        if (get) { if (authorized(c, req)) api_tasks_get(c, req, id); return ROUTE_TASKS_GET; }
        if (del) { if (authorized(c, req)) api_tasks_cancel(c, req, id); return ROUTE_TASKS_CANCEL; }
        goto wrong_method;
    }
not_found:
    api_error(req, 404, "invalid_request_error", "not_found", NULL, "no such endpoint: %s %s", m, p);
    return ROUTE_OTHER;
wrong_method:
    api_error(req, 405, "invalid_request_error", "method_not_allowed", NULL, "%s is not allowed on %s", m, p);
    return ROUTE_OTHER;
}

http_fast_rc coord_fast(http_req *req, void *app)
{
    coord *c = app;
    int px = proxied_index(http_req_path(req));
    if (px < 0 || !is(http_req_method(req), "POST")) return HTTP_PASS;
    http_req_set_tag(req, (int)proxied[px].route + 1);
    if (!authorized(c, req)) return HTTP_HANDLED;
    return api_openai_fast(c, req, proxied[px].kind);
}

void coord_handle(http_req *req, void *app)
{
    http_req_set_tag(req, (int)route_and_run(app, req) + 1);
}

void coord_observe(http_req *req, int status, int64_t dur_us, void *app)
{
    (void)app;
    /* Tags are route + 1, so an untagged answer (e.g. an early 413) is "other". */
    int tag = http_req_tag(req);
    metrics_observe(tag > 0 ? (metrics_route)(tag - 1) : ROUTE_OTHER, status, dur_us);
}
