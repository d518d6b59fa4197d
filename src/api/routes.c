/* api/routes: see routes.h. */
#include "api/routes.h"

#include <stdio.h>
#include <string.h>

static const api_route ROUTES[] = {
    {"GET", "/healthz", OP_HEALTH, AUTH_OPEN, ROUTE_HEALTH, 0},
    {"GET", "/metrics", OP_METRICS, AUTH_OPEN, ROUTE_METRICS, 0},
    {"GET", "/openapi.json", OP_OPENAPI, AUTH_OPEN, ROUTE_OPENAPI, 0},
    {"POST", "/internal/v1/register", OP_REGISTER, AUTH_NODE, ROUTE_REGISTER, 1},
    {"POST", "/internal/v1/heartbeat", OP_HEARTBEAT, AUTH_NODE, ROUTE_HEARTBEAT, 1},
    {"GET", "/internal/v1/files/{id}/sources", OP_FILE_SOURCES, AUTH_NODE, ROUTE_FILES, 1},
    {"POST", "/v1/chat/completions", OP_CHAT, AUTH_CLIENT, ROUTE_CHAT, 0},
    {"POST", "/v1/completions", OP_COMPLETIONS, AUTH_CLIENT, ROUTE_COMPLETIONS, 0},
    {"POST", "/v1/embeddings", OP_EMBEDDINGS, AUTH_CLIENT, ROUTE_EMBEDDINGS, 0},
    {"GET", "/v1/models", OP_MODELS, AUTH_CLIENT, ROUTE_MODELS, 0},
    {"POST", "/v1/tasks", OP_TASKS_CREATE, AUTH_CLIENT, ROUTE_TASKS_CREATE, 0},
    {"GET", "/v1/tasks", OP_TASKS_LIST, AUTH_CLIENT, ROUTE_TASKS_LIST, 0},
    {"GET", "/v1/tasks/poll", OP_TASK_POLL, AUTH_CLIENT, ROUTE_TASKS_GET, 0},
    {"GET", "/v1/tasks/{id}", OP_TASK_GET, AUTH_CLIENT, ROUTE_TASKS_GET, 0},
    {"DELETE", "/v1/tasks/{id}", OP_TASK_CANCEL, AUTH_CLIENT, ROUTE_TASKS_CANCEL, 0},
    {"POST", "/v1/batches", OP_BATCHES_CREATE, AUTH_CLIENT, ROUTE_BATCHES, 0},
    {"GET", "/v1/batches", OP_BATCHES_LIST, AUTH_CLIENT, ROUTE_BATCHES, 0},
    {"GET", "/v1/batches/{id}", OP_BATCH_GET, AUTH_CLIENT, ROUTE_BATCHES, 0},
    {"GET", "/v1/batches/{id}/results", OP_BATCH_RESULTS, AUTH_CLIENT, ROUTE_BATCHES, 0},
    {"POST", "/v1/batches/{id}/cancel", OP_BATCH_CANCEL, AUTH_CLIENT, ROUTE_BATCHES, 0},
    {"GET", "/v1/sessions/{id}", OP_SESSION_GET, AUTH_CLIENT, ROUTE_SESSIONS, 0},
    {"DELETE", "/v1/sessions/{id}", OP_SESSION_DELETE, AUTH_CLIENT, ROUTE_SESSIONS, 0},
    {"GET", "/v1/nodes", OP_NODES, AUTH_CLIENT, ROUTE_NODES, 0},
    {"POST", "/v1/nodes/{id}/drain", OP_NODE_DRAIN, AUTH_ADMIN, ROUTE_NODES, 0},
    {"POST", "/v1/nodes/{id}/undrain", OP_NODE_UNDRAIN, AUTH_ADMIN, ROUTE_NODES, 0},
    {"DELETE", "/v1/nodes/{id}", OP_NODE_FORGET, AUTH_ADMIN, ROUTE_NODES, 0},
    {"POST", "/v1/plan", OP_PLAN, AUTH_CLIENT, ROUTE_PLAN, 0},
    {"DELETE", "/v1/cache", OP_CACHE_INVALIDATE, AUTH_ADMIN, ROUTE_CACHE, 0},
    {"GET", "/v1/budget", OP_BUDGET, AUTH_CLIENT, ROUTE_BUDGET, 0},
    {"GET", "/v1/apps", OP_APPS_LIST, AUTH_CLIENT, ROUTE_APPS, 0},
    {"POST", "/v1/apps/{name}", OP_APP_CALL, AUTH_CLIENT, ROUTE_APPS, 0},
    {"GET", "/v1/apps/runs/{id}", OP_APP_RUN_GET, AUTH_CLIENT, ROUTE_APPS, 0},
    {"DELETE", "/v1/apps/runs/{id}", OP_APP_RUN_CANCEL, AUTH_CLIENT, ROUTE_APPS, 0},
    {"GET", "/v1/pipelines", OP_PIPELINES_LIST, AUTH_CLIENT, ROUTE_APPS, 0},
    {"POST", "/v1/pipelines/{name}", OP_PIPELINE_CALL, AUTH_CLIENT, ROUTE_APPS, 0},
    {"GET", "/v1/pipelines/runs/{id}", OP_PIPELINE_RUN_GET, AUTH_CLIENT, ROUTE_APPS, 0},
    {"DELETE", "/v1/pipelines/runs/{id}", OP_PIPELINE_RUN_CANCEL, AUTH_CLIENT, ROUTE_APPS, 0},
    {"POST", "/v1/rollouts", OP_ROLLOUTS_CREATE, AUTH_ADMIN, ROUTE_ROLLOUTS, 0},
    {"GET", "/v1/rollouts", OP_ROLLOUTS_LIST, AUTH_CLIENT, ROUTE_ROLLOUTS, 0},
    {"GET", "/v1/rollouts/{name}", OP_ROLLOUT_GET, AUTH_CLIENT, ROUTE_ROLLOUTS, 0},
    {"POST", "/v1/rollouts/{name}/advance", OP_ROLLOUT_ADVANCE, AUTH_ADMIN, ROUTE_ROLLOUTS, 0},
    {"POST", "/v1/rollouts/{name}/pause", OP_ROLLOUT_PAUSE, AUTH_ADMIN, ROUTE_ROLLOUTS, 0},
    {"POST", "/v1/rollouts/{name}/resume", OP_ROLLOUT_RESUME, AUTH_ADMIN, ROUTE_ROLLOUTS, 0},
    {"POST", "/v1/rollouts/{name}/abort", OP_ROLLOUT_ABORT, AUTH_ADMIN, ROUTE_ROLLOUTS, 0},
    {"GET", "/v1/audit", OP_AUDIT_LIST, AUTH_ADMIN, ROUTE_AUDIT, 0},
    {"GET", "/v1/audit/{request_id}", OP_AUDIT_GET, AUTH_ADMIN, ROUTE_AUDIT, 0},
    {"GET", "/v1/webhooks/deliveries", OP_WEBHOOK_DELIVERIES, AUTH_CLIENT, ROUTE_WEBHOOKS, 0},
};
#define NROUTES (sizeof ROUTES / sizeof ROUTES[0])

const api_route *api_routes(size_t *n)
{
    *n = NROUTES;
    return ROUTES;
}

/* Whether path fits the template; a "{...}" segment matches one non-empty
 * segment, whose text goes to id.  Returns 1 on a match, 0 otherwise; sets
 * *templated when the template has such a segment. */
static int match(const char *tmpl, const char *path, char *id, size_t idlen, int *templated, int *too_long)
{
    *templated = 0;
    while (*tmpl && *path) {
        if (*tmpl == '{') {
            const char *tend = strchr(tmpl, '}');
            size_t seg = strcspn(path, "/");
            if (!tend || seg == 0) return 0;
            *templated = 1;
            if (id) {
                if (seg >= idlen) *too_long = 1;
                else { memcpy(id, path, seg); id[seg] = 0; }
            }
            tmpl = tend + 1;
            path += seg;
            continue;
        }
        if (*tmpl != *path) return 0;
        tmpl++;
        path++;
    }
    return !*tmpl && !*path;
}

/* Which routes fit path, in one pass over the table: fit[i] for a route
 * that serves it, templ[i] for a template among them.  A concrete path
 * shadows a template that would also match it (/v1/tasks/poll is not the
 * task "poll"), whatever the method. */
static void fitting(const char *path, unsigned char *fit, unsigned char *templ)
{
    int concrete = 0;
    for (size_t i = 0; i < NROUTES; i++) {
        int t = 0, too_long = 0;
        fit[i] = (unsigned char)match(ROUTES[i].path, path, NULL, 0, &t, &too_long);
        templ[i] = (unsigned char)t;
        if (fit[i] && !t) concrete = 1;
    }
    for (size_t i = 0; concrete && i < NROUTES; i++)
        if (templ[i]) fit[i] = 0;
}

const api_route *api_route_find(const char *method, const char *path, char *id, size_t idlen, int *path_known)
{
    *path_known = 0;
    if (id && idlen) id[0] = 0;
    unsigned char fit[NROUTES], templ[NROUTES];
    fitting(path, fit, templ);
    for (size_t i = 0; i < NROUTES; i++) {
        if (!fit[i]) continue;
        *path_known = 1;
        if (strcmp(ROUTES[i].method, method)) continue;
        if (templ[i] && id) {
            int t, too_long = 0;
            match(ROUTES[i].path, path, id, idlen, &t, &too_long);
            if (too_long) { *path_known = 0; return NULL; }
        }
        return &ROUTES[i];
    }
    return NULL;
}

size_t api_route_methods(const char *path, char *out, size_t len)
{
    size_t n = 0;
    if (len) out[0] = 0;
    unsigned char fit[NROUTES], templ[NROUTES];
    fitting(path, fit, templ);
    for (size_t i = 0; i < NROUTES; i++) {
        if (!fit[i]) continue;
        if (strstr(out, ROUTES[i].method)) continue;
        int w = snprintf(out + n, len > n ? len - n : 0, "%s%s", n ? ", " : "", ROUTES[i].method);
        if (w < 0 || (size_t)w >= (len > n ? len - n : 0)) break;
        n += (size_t)w;
    }
    return n;
}
