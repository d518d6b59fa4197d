/* api/tasks: durable async tasks.  A task is validated, stored (and so
 * survives a crash) and only then acknowledged with 202; the dispatcher runs
 * it later.  Idempotency-Key makes a retried submission return the same task. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/catalog.h"
#include "api/coord.h"
#include "api/errors.h"
#include "api/validate.h"
#include "catalog/catalog.h"
#include "policy/classify.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/log.h"

static const char *STATES[] = {"queued", "running", "succeeded", "failed", "canceled"};

static json_t *task_view(coord *c, const char *id, int *found)
{
    task_rec t;
    int rc = store_task_get(c->st, id, &t);
    *found = rc == STORE_OK;
    if (rc != STORE_OK) return NULL;
    json_t *j = store_task_json(&t);
    json_t *attempts = store_task_attempts(c->st, id);
    json_object_set_new(j, "attempt_history", attempts ? attempts : json_array());
    /* The route record: its classification and every node it touched. */
    json_t *touched = json_array(), *route = json_object_get(j, "route");
    size_t i;
    json_t *a;
    json_array_foreach(attempts, i, a) {
        const char *node = json_string_value(json_object_get(a, "node"));
        int seen = 0;
        size_t k;
        json_t *x;
        json_array_foreach(touched, k, x) seen |= node && !strcmp(json_string_value(x), node);
        if (node && !seen) json_array_append_new(touched, json_string(node));
    }
    if (route) json_object_set_new(route, "nodes", touched);
    else json_decref(touched);
    int64_t ahead;
    double work_ahead = 0;
    if (!strcmp(t.status, "queued")) {
        /* The dispatcher's own order when it has placed the task in one;
         * before its first pass, the store's priority order. */
        int known = dispatcher_queue_position(c->disp, id, &ahead, &work_ahead) == 0;
        if (known || store_task_queue_position(c->st, id, &ahead) == STORE_OK) {
            /* The ETA assumes the pool keeps draining at its rate of the last
             * minute; before it has one, the estimated work ahead spread
             * over the pool's slots. */
            double rate = registry_drain_rate(c->reg, mono_ms());
            int slots = registry_total_slots(c->reg);
            json_t *eta = json_null();
            if (rate > 0) eta = json_integer((json_int_t)((ahead + 1) / rate * 1000));
            else if (known && slots > 0) eta = json_integer((json_int_t)(work_ahead / slots));
            json_object_set_new(j, "queue_position", json_integer(ahead));
            json_object_set_new(j, "eta_ms", eta);
        }
    }
    task_rec_free(&t);
    return j;
}

json_t *api_task_view(coord *c, const char *id, int *found) { return task_view(c, id, found); }

void api_tasks_create(coord *c, http_req *req)
{
    json_t *body = api_read_json_object(req);
    if (!body) return;
    json_t *type = json_object_get(body, "type"), *model = json_object_get(body, "model");
    json_t *input = json_object_get(body, "input"), *prio = json_object_get(body, "priority");
    json_t *maxat = json_object_get(body, "max_attempts");
    api_kind kind = api_kind_from_task_type(json_string_value(type));
    json_t *in = NULL;
    const char *key = http_req_header(req, "Idempotency-Key");
    if (!type) { api_bad_request(req, "missing_field", "type", "'type' is required"); goto out; }
    if (kind == KIND_UNKNOWN) {
        api_bad_request(req, json_is_string(type) ? "invalid_value" : "invalid_type", "type",
                        "'type' must be one of \"chat\", \"completion\", \"embedding\"");
        goto out;
    }
    if (!model) { api_bad_request(req, "missing_field", "model", "'model' is required"); goto out; }
    if (!json_is_string(model) || !json_string_length(model)) {
        api_bad_request(req, "invalid_type", "model", "'model' must be a non-empty string");
        goto out;
    }
    if (json_string_length(model) > API_MODEL_MAX) {
        api_bad_request(req, "invalid_value", "model", "'model' is longer than 255 bytes");
        goto out;
    }
    /* A catalogue alias runs as the entry's name. */
    const char *canonical = catalog_resolve(c->catalog, json_string_value(model));
    if (canonical && strcmp(canonical, json_string_value(model))) {
        json_object_set_new(body, "model", json_string(canonical));
        model = json_object_get(body, "model");
    }
    if (!input) { api_bad_request(req, "missing_field", "input", "'input' is required"); goto out; }
    if (!json_is_object(input)) {
        api_bad_request(req, "invalid_type", "input", "'input' must be an object (the OpenAI request body)");
        goto out;
    }
    int priority = 5;
    if (prio && !json_is_null(prio)) {
        if (!json_is_integer(prio)) { api_bad_request(req, "invalid_type", "priority", "'priority' must be an integer"); goto out; }
        if (json_integer_value(prio) < 0 || json_integer_value(prio) > 9) {
            api_bad_request(req, "invalid_value", "priority", "'priority' must be between 0 and 9");
            goto out;
        }
        priority = (int)json_integer_value(prio);
    }
    int max_attempts = c->cfg.max_attempts;
    if (maxat && !json_is_null(maxat)) {
        if (!json_is_integer(maxat) || json_integer_value(maxat) < 1 || json_integer_value(maxat) > 10) {
            api_bad_request(req, "invalid_value", "max_attempts", "'max_attempts' must be an integer from 1 to 10");
            goto out;
        }
        max_attempts = (int)json_integer_value(maxat);
    }
    if (key && (strlen(key) == 0 || strlen(key) > 255)) {
        api_bad_request(req, "invalid_value", "Idempotency-Key", "the Idempotency-Key header must be 1 to 255 characters");
        goto out;
    }
    char version_model[256];
    if (api_rollout_task_model(c, req, json_string_value(model), input, version_model, sizeof version_model)) {
        json_object_set_new(body, "model", json_string(version_model));
        model = json_object_get(body, "model");
    }
    const char *callback;
    if (api_callback_url(c, req, json_object_get(body, "callback_url"), &callback)) goto out;
    in = json_deep_copy(input);
    json_object_set(in, "model", model);
    json_object_del(in, "stream");
    api_invalid why;
    if (api_validate_body(kind, in, &why)) {
        char param[80];
        snprintf(param, sizeof param, "input.%s", why.param);
        api_bad_request(req, why.code, param, "input: %s", why.message);
        goto out;
    }
    if (!registry_model_known(c->reg, json_string_value(model))) {
        api_error(req, 404, "invalid_request_error", "model_not_found", "model",
                  "the model '%s' is not served by any node in the pool", json_string_value(model));
        goto out;
    }
    char blocked[400];
    if (registry_model_blocked(c->reg, json_string_value(model), blocked, sizeof blocked)) {
        api_server_error(req, 503, "model_mismatch", "no node holds the catalogue's file for '%s': %s; not queued",
                         json_string_value(model), blocked);
        goto out;
    }
    classification cls;
    if (classify_request(c->rules, in, http_req_header(req, "X-Gpupool-Sensitivity"), coord_key_private(c, req),
                         &cls)) {
        api_bad_request(req, "invalid_value", "X-Gpupool-Sensitivity",
                        "X-Gpupool-Sensitivity must be \"private\" or \"normal\"");
        goto out;
    }
    if (cls.is_private && !registry_model_trusted(c->reg, json_string_value(model))) {
        api_server_error(req, 503, "no_trusted_capacity",
                         "the task is private (%s) and no trusted node serves '%s'; it was not accepted", cls.rule,
                         json_string_value(model));
        goto out;
    }
    int64_t counts[5];
    if (store_task_counts(c->st, counts) == STORE_OK && counts[0] >= c->cfg.task_queue_max) {
        api_retry_after(c, req, counts[0]);
        api_error(req, 429, "rate_limit_error", "queue_full", NULL,
                  "%lld tasks are queued, the most this pool holds; retry later", (long long)counts[0]);
        goto out;
    }
    size_t len;
    const char *raw = http_req_body(req, &len);
    char hash[65], id[64], existing[64] = "";
    sha256_hex(raw, len, hash);
    make_id(id, sizeof id, "task");
    char *input_text = json_dumps(in, JSON_COMPACT);
    char owner[40];
    coord_owner(c, req, owner);
    task_new t = {.id = id, .type = api_kind_task_type(kind), .model = json_string_value(model),
                  .priority = priority, .input_json = input_text, .idem_key = key, .body_hash = hash,
                  .max_attempts = max_attempts, .created_ms = wall_ms(), .owner = owner,
                  .prompt_tokens = api_estimate_prompt_tokens(in), .max_tokens = api_requested_max_tokens(in),
                  .sensitivity = cls.is_private ? "private" : "normal", .route_rule = cls.is_private ? cls.rule : NULL};
    int rc = store_task_insert(c->st, &t, existing);
    free(input_text);
    if (rc == STORE_DUPLICATE) {
        int found;
        json_t *j = task_view(c, existing, &found);
        http_set_header(req, "Idempotent-Replayed", "true");
        http_set_header(req, "X-Gpupool-Task", existing);
        if (j) http_respond_json(req, 200, j);
        else api_server_error(req, 500, "store_error", "the earlier task could not be read");
        json_decref(j);
    } else if (rc == STORE_CONFLICT) {
        api_error(req, 409, "invalid_request_error", "idempotency_key_reused", "Idempotency-Key",
                  "this Idempotency-Key was already used with a different request body (task %s)", existing);
    } else if (rc != STORE_OK) {
        log_error("could not store a task: %s", store_errmsg(c->st));
        api_server_error(req, 503, "store_unavailable", "the task could not be stored; nothing was accepted");
    } else {
        if (callback && webhook_subscribe(c->hooks, "task", id, callback))
            log_error("task %s: could not store its callback_url", id);
        json_t *j = json_pack("{s:s, s:s, s:s}", "id", id, "object", "task", "status", "queued");
        http_set_header(req, "X-Gpupool-Task", id);
        http_respond_json(req, 202, j);
        json_decref(j);
        dispatcher_task_queued(c->disp);
    }
out:
    json_decref(in);
    json_decref(body);
}

void api_tasks_get(coord *c, http_req *req, const char *id)
{
    int found;
    json_t *j = task_view(c, id, &found);
    if (!j) {
        if (found) api_server_error(req, 500, "store_error", "the task could not be read");
        else api_error(req, 404, "invalid_request_error", "task_not_found", NULL, "no task with id '%s'", id);
        return;
    }
    http_respond_json(req, 200, j);
    json_decref(j);
}

void api_tasks_list(coord *c, http_req *req)
{
    const char *status = http_req_query(req, "status");
    const char *lim = http_req_query(req, "limit");
    if (status && *status) {
        int ok = 0;
        for (size_t i = 0; i < 5; i++) ok |= !strcmp(status, STATES[i]);
        if (!ok) {
            api_bad_request(req, "invalid_value", "status",
                            "'status' must be one of queued, running, succeeded, failed, canceled");
            return;
        }
    } else {
        status = NULL;
    }
    int limit = 100;
    if (lim) {
        char *e;
        long v = strtol(lim, &e, 10);
        if (*e || e == lim || v < 1 || v > 1000) {
            api_bad_request(req, "invalid_value", "limit", "'limit' must be an integer from 1 to 1000");
            return;
        }
        limit = (int)v;
    }
    json_t *data = store_task_list(c->st, status, limit);
    if (!data) { api_server_error(req, 500, "store_error", "tasks could not be listed"); return; }
    json_t *j = json_pack("{s:s, s:o}", "object", "list", "data", data);
    http_respond_json(req, 200, j);
    json_decref(j);
}

void api_tasks_cancel(coord *c, http_req *req, const char *id)
{
    int rc = store_task_cancel(c->st, id, wall_ms());
    if (rc == STORE_NOT_FOUND) {
        api_error(req, 404, "invalid_request_error", "task_not_found", NULL, "no task with id '%s'", id);
        return;
    }
    if (rc == STORE_STALE) {
        api_error(req, 409, "invalid_request_error", "task_finished", NULL, "task '%s' has already finished", id);
        return;
    }
    if (rc != STORE_OK) { api_server_error(req, 500, "store_error", "the task could not be canceled"); return; }
    dispatcher_cancel_task(c->disp, id);
    api_tasks_get(c, req, id);
}
