/* store/task_json: the public JSON view of a stored task (what
 * GET /v1/tasks/{id} shows).  Pure: a task_rec in, JSON out. */
#include <jansson.h>

#include "store/sqlite_int.h"
#include "store/store.h"

json_t *store_json_str(const char *v) {
    json_t *j = v ? json_string(v) : NULL;
    return j ? j : json_null();
}

json_t *store_json_ms(int64_t v) {
    return v ? json_integer(v) : json_null();
}

json_t *store_task_json(const task_rec *t) {
    if (!t) return NULL;
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "id", store_json_str(t->id));
    json_object_set_new(o, "object", json_string("task"));
    json_object_set_new(o, "type", store_json_str(t->type));
    json_object_set_new(o, "model", store_json_str(t->model));
    json_object_set_new(o, "priority", json_integer(t->priority));
    json_object_set_new(o, "status", store_json_str(t->status));
    json_object_set_new(o, "attempts", json_integer(t->attempts));
    json_object_set_new(o, "max_attempts", json_integer(t->max_attempts));
    json_object_set_new(o, "node", store_json_str(t->node));
    json_object_set_new(o, "created_at", json_integer(t->created_ms));
    json_object_set_new(o, "started_at", store_json_ms(t->started_ms));
    json_object_set_new(o, "finished_at", store_json_ms(t->finished_ms));
    json_object_set_new(o, "queued_ms",
                        t->started_ms ? json_integer(t->started_ms - t->created_ms) : json_null());
    json_object_set_new(o, "run_ms", t->started_ms && t->finished_ms
                                         ? json_integer(t->finished_ms - t->started_ms)
                                         : json_null());
    json_t *result = t->result_json ? json_loads(t->result_json, JSON_DECODE_ANY, NULL) : NULL;
    json_object_set_new(o, "result", result ? result : json_null());
    json_t *error = json_null();
    if (t->error_code) {
        error = json_object();
        json_object_set_new(error, "code", store_json_str(t->error_code));
        json_object_set_new(error, "message", json_string(t->error_message ? t->error_message : ""));
    }
    json_object_set_new(o, "error", error);
    json_t *route = json_object();
    json_object_set_new(route, "sensitivity", store_json_str(t->sensitivity ? t->sensitivity : "normal"));
    json_object_set_new(route, "rule", store_json_str(t->route_rule));
    json_object_set_new(o, "route", route);
    if (t->batch_id) json_object_set_new(o, "batch_id", json_string(t->batch_id));
    return o;
}

