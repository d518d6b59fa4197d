/* api/apps: prompt apps and pipelines over HTTP.  A call is validated
 * against the input schema (400 naming the field), classified for
 * sensitivity once, stored as a run (store/runs.c) and left to the runner
 * (apps/runner), which submits each stage as a task.  An app call waits for
 * its run unless asked not to; a pipeline call never waits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/coord.h"
#include "api/errors.h"
#include "apps/appcfg.h"
#include "apps/jschema.h"
#include "apps/runner.h"
#include "policy/classify.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/log.h"

void api_apps_list(coord *c, http_req *req, int pipelines)
{
    json_t *j = json_pack("{s:s,s:o}", "object", "list", "data", apps_cfg_list(c->apps, pipelines));
    http_respond_json(req, 200, j);
    json_decref(j);
}

/* The public view of a run: its definition and requests stay inside. */
static json_t *run_view(json_t *run)
{
    const char *kind = json_string_value(json_object_get(run, "kind"));
    json_object_set_new(run, "object", json_string(kind && !strcmp(kind, "app") ? "app.run" : "pipeline.run"));
    json_object_del(run, "def");
    json_object_del(run, "owner");
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(run, "stages"), i, s) {
        json_object_del(s, "request");
        int64_t a = json_integer_value(json_object_get(s, "started_ms"));
        int64_t b = json_integer_value(json_object_get(s, "finished_ms"));
        json_object_set_new(s, "duration_ms", a && b ? json_integer(b - a) : json_null());
        if (!json_is_array(json_object_get(s, "attempts"))) json_object_set_new(s, "attempts", json_array());
    }
    return run;
}

static int wants_async(http_req *req, const json_t *body)
{
    const char *prefer = http_req_header(req, "Prefer");
    return json_is_true(json_object_get(body, "async")) || (prefer && strcasestr(prefer, "respond-async"));
}

/* The body's fields besides the input; 0 when they are sound. */
static int read_options(http_req *req, const json_t *body, int *priority)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)body, k, v) {
        if (strcmp(k, "input") && strcmp(k, "async") && strcmp(k, "priority") && strcmp(k, "callback_url")) {
            api_bad_request(req, "invalid_value", k,
                            "unknown field '%s' (the body is {\"input\", \"async\", \"priority\", \"callback_url\"})", k);
            return -1;
        }
    }
    json_t *a = json_object_get(body, "async");
    if (a && !json_is_boolean(a)) {
        api_bad_request(req, "invalid_type", "async", "'async' must be true or false");
        return -1;
    }
    json_t *p = json_object_get(body, "priority");
    *priority = 5;
    if (p && !json_is_null(p)) {
        if (!json_is_integer(p) || json_integer_value(p) < 0 || json_integer_value(p) > 9) {
            api_bad_request(req, "invalid_value", "priority", "'priority' must be an integer from 0 to 9");
            return -1;
        }
        *priority = (int)json_integer_value(p);
    }
    return 0;
}

/* Every stage's model must be served, and by a trusted node when private. */
static int check_models(coord *c, http_req *req, const json_t *def, const classification *cls)
{
    size_t i;
    const json_t *s;
    json_array_foreach(json_object_get(def, "stages"), i, s) {
        const char *m = json_string_value(json_object_get(s, "model"));
        const char *what = strcmp(json_string_value(json_object_get(def, "kind")), "app") ? "stage" : "app";
        if (!registry_model_known(c->reg, m)) {
            api_error(req, 404, "invalid_request_error", "model_not_found", NULL,
                      "%s '%s' uses the model '%s', which no node in the pool serves", what,
                      json_string_value(json_object_get(s, "name")), m);
            return -1;
        }
        if (cls->is_private && !registry_model_trusted(c->reg, m)) {
            api_server_error(req, 503, "no_trusted_capacity",
                             "the input is private (%s) and no trusted node serves '%s' (%s '%s'); it was not accepted",
                             cls->rule, m, what, json_string_value(json_object_get(s, "name")));
            return -1;
        }
    }
    return 0;
}

/* The sync answer of an app run that ended (or did not in time). */
static void answer_app(http_req *req, json_t *run)
{
    const char *status = json_string_value(json_object_get(run, "status"));
    const json_t *err = json_object_get(run, "error");
    const char *code = json_string_value(json_object_get(err, "code"));
    if (!strcmp(status, "succeeded")) {
        http_respond_json(req, 200, run_view(run));
        return;
    }
    if (!strcmp(status, "failed") || !strcmp(status, "canceled")) {
        int invalid = code && !strcmp(code, "output_invalid");
        const char *msg = json_string_value(json_object_get(err, "message"));
        char text[700];
        snprintf(text, sizeof text, "%s%s", invalid ? "the model's output never satisfied the output schema: " : "",
                 msg ? msg : "the run failed");
        json_t *e = json_pack("{s:s,s:s,s:s,s:n}", "message", text, "type",
                              "server_error", "code",
                              invalid ? "output_invalid" : "stage_failed", "param");
        const json_t *raw = json_object_get(err, "raw_text");
        json_object_set(e, "raw_text", raw ? (json_t *)raw : json_null());
        json_t *j = json_pack("{s:o,s:O}", "error", e, "run", run_view(run));
        http_respond_json(req, invalid ? 422 : 502, j);
        json_decref(j);
        return;
    }
    /* Still going at the deadline: the caller polls like an async call. */
    http_respond_json(req, 202, run_view(run));
}

void api_app_call(coord *c, http_req *req, const char *name, int pipeline)
{
    const json_t *def = pipeline ? apps_cfg_pipeline(c->apps, name) : apps_cfg_app(c->apps, name);
    if (!def) {
        api_error(req, 404, "invalid_request_error", pipeline ? "pipeline_not_found" : "app_not_found", NULL,
                  "no %s named '%s' (GET /v1/%s lists them)", pipeline ? "pipeline" : "app", name,
                  pipeline ? "pipelines" : "apps");
        return;
    }
    json_t *body = api_read_json_object(req);
    if (!body) return;
    json_t *input = json_object_get(body, "input");
    int priority;
    char *input_text = NULL, *def_text = NULL;
    const char *callback;
    if (read_options(req, body, &priority) || api_callback_url(c, req, json_object_get(body, "callback_url"), &callback))
        goto out;
    if (!input) {
        api_bad_request(req, "missing_field", "input", "'input' is required (an object the input schema accepts)");
        goto out;
    }
    jschema_error je;
    if (!json_is_object(input)) {
        api_bad_request(req, "invalid_type", "input", "'input' must be an object");
        goto out;
    }
    if (jschema_validate(json_object_get(def, "input_schema"), input, &je)) {
        char param[300];
        snprintf(param, sizeof param, "input%s%s", je.path[0] && je.path[0] != '[' ? "." : "", je.path);
        api_bad_request(req, strstr(je.message, "required") ? "missing_field" : "invalid_value", param, "input: %s",
                        je.message);
        goto out;
    }
    input_text = json_dumps(input, JSON_COMPACT);
    /* The detectors read the input as one user message's text. */
    json_t *probe = json_pack("{s:[{s:s,s:s}]}", "messages", "role", "user", "content", input_text);
    classification cls;
    int bad = classify_request(c->rules, probe, http_req_header(req, "X-Gpupool-Sensitivity"),
                               coord_key_private(c, req), &cls);
    json_decref(probe);
    if (bad) {
        api_bad_request(req, "invalid_value", "X-Gpupool-Sensitivity", "X-Gpupool-Sensitivity must be \"private\" or \"normal\"");
        goto out;
    }
    if (check_models(c, req, def, &cls)) goto out;
    const json_t *stages = json_object_get(def, "stages");
    size_t n = json_array_size(stages);
    const char *names[32], *models[32];
    for (size_t i = 0; i < n && i < 32; i++) {
        names[i] = json_string_value(json_object_get(json_array_get(stages, i), "name"));
        models[i] = json_string_value(json_object_get(json_array_get(stages, i), "model"));
    }
    char id[64], owner[40];
    make_id(id, sizeof id, "run");
    coord_owner(c, req, owner);
    def_text = json_dumps(def, JSON_COMPACT);
    run_new r = {.id = id, .kind = pipeline ? "pipeline" : "app", .name = name, .def_json = def_text,
                 .input_json = input_text, .sensitivity = cls.is_private ? "private" : "normal",
                 .route_rule = cls.is_private ? cls.rule : NULL, .owner = owner, .priority = priority,
                 .created_ms = wall_ms(), .stage_names = names, .stage_models = models, .n_stages = (int)n};
    if (store_run_insert(c->st, &r) != STORE_OK) {
        log_error("could not store a run: %s", store_errmsg(c->st));
        api_server_error(req, 503, "store_unavailable", "the run could not be stored; nothing was accepted");
        goto out;
    }
    /* Subscribed before the run can end, so its end is never missed. */
    if (callback && webhook_subscribe(c->hooks, "run", id, callback))
        log_warn("run %s: its callback could not be stored", id);
    runner_kick(c->runner);
    char loc[128];
    snprintf(loc, sizeof loc, "/v1/%s/runs/%s", pipeline ? "pipelines" : "apps", id);
    http_set_header(req, "Location", loc);
    http_set_header(req, "X-Gpupool-Run", id);
    if (pipeline || wants_async(req, body)) {
        json_t *j = json_pack("{s:s,s:s,s:s,s:s}", "id", id, "object", pipeline ? "pipeline.run" : "app.run", "name",
                              name, "status", "queued");
        http_respond_json(req, 202, j);
        json_decref(j);
        goto out;
    }
    json_t *run = runner_wait(c->runner, id, c->cfg.upstream_timeout_ms);
    if (run) answer_app(req, run);
    else api_server_error(req, 500, "store_error", "the run could not be read");
    json_decref(run);
out:
    free(input_text);
    free(def_text);
    json_decref(body);
}

/* The run of that kind, or NULL with the answer given. */
static json_t *read_run(coord *c, http_req *req, const char *id, int pipeline)
{
    json_t *run;
    int rc = store_run_get(c->st, id, &run);
    const char *kind = rc == STORE_OK ? json_string_value(json_object_get(run, "kind")) : NULL;
    if (rc == STORE_NOT_FOUND || (kind && strcmp(kind, pipeline ? "pipeline" : "app"))) {
        json_decref(run);
        api_error(req, 404, "invalid_request_error", "run_not_found", NULL, "no %s run with id '%s'",
                  pipeline ? "pipeline" : "app", id);
        return NULL;
    }
    if (rc != STORE_OK) api_server_error(req, 500, "store_error", "the run could not be read");
    return rc == STORE_OK ? run : NULL;
}

json_t *api_run_view(coord *c, const char *id, int *found)
{
    json_t *run;
    int rc = store_run_get(c->st, id, &run);
    *found = rc == STORE_OK;
    if (rc == STORE_NOT_FOUND) return NULL;
    return rc == STORE_OK ? run_view(run) : NULL;
}

void api_run_get(coord *c, http_req *req, const char *id, int pipeline)
{
    json_t *run = read_run(c, req, id, pipeline);
    if (!run) return;
    http_respond_json(req, 200, run_view(run));
    json_decref(run);
}

void api_run_cancel(coord *c, http_req *req, const char *id, int pipeline)
{
    json_t *run = read_run(c, req, id, pipeline);
    if (!run) return;
    json_decref(run);
    char task[64];
    int rc = store_run_cancel(c->st, id, wall_ms(), task);
    if (rc == STORE_STALE) {
        api_error(req, 409, "invalid_request_error", "run_finished", NULL, "run '%s' has already ended", id);
        return;
    }
    if (rc != STORE_OK) {
        api_server_error(req, 500, "store_error", "the run could not be canceled");
        return;
    }
    /* The stage's task is stopped too; a task that already ended stays as it is. */
    if (task[0] && store_task_cancel(c->st, task, wall_ms()) == STORE_OK) dispatcher_cancel_task(c->disp, task);
    api_run_get(c, req, id, pipeline);
}
