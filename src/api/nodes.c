/* api/nodes: the node-facing control plane (register, heartbeat), the node
 * list people read, and the Prometheus metrics page. */
#include <stdio.h>
#include <string.h>

#include "api/cache.h"
#include "api/coord.h"
#include "api/errors.h"
#include "api/metrics.h"
#include "api/track.h"
#include "api/rollout_table.h"
#include "catalog/catalog.h"
#include "util/buf.h"
#include "util/clock.h"

void api_nodes(coord *c, http_req *req)
{
    json_t *j = json_pack("{s:s, s:o}", "object", "list", "data", registry_nodes_json(c->reg, mono_ms()));
    http_respond_json(req, 200, j);
    json_decref(j);
}

void api_node_admin(coord *c, http_req *req, const char *id, const char *verb)
{
    int64_t now = mono_ms();
    int rc;
    if (!strcmp(verb, "forget")) {
        const char *force = http_req_query(req, "force");
        rc = registry_forget(c->reg, id, force && (!strcmp(force, "1") || !strcmp(force, "true")));
        if (rc == -2) {
            api_error(req, 409, "invalid_request_error", "node_live", NULL,
                      "node '%s' is not offline; its worker would register again (stop it first, or add ?force=1)", id);
            return;
        }
    } else {
        rc = registry_set_drain(c->reg, id, !strcmp(verb, "drain"), now);
    }
    if (rc == -1) {
        api_error(req, 404, "invalid_request_error", "node_not_found", NULL, "no node with id '%s'", id);
        return;
    }
    json_t *j = json_pack("{s:s, s:s, s:b}", "id", id, "action", verb, "ok", 1);
    http_respond_json(req, 200, j);
    json_decref(j);
    dispatcher_wake(c->disp);
}

typedef int (*control_fn)(registry *, const char *, json_t *, const char *, int64_t, json_t **, char *, size_t);

static void control(coord *c, http_req *req, control_fn fn)
{
    json_t *body = api_read_json_object(req);
    if (!body) return;
    json_t *resp = NULL;
    char why[256] = "";
    int status = fn(c->reg, http_req_bearer(req), body, http_req_peer(req), mono_ms(), &resp, why, sizeof why);
    if (status == 200) {
        http_respond_json(req, 200, resp);
        dispatcher_wake(c->disp);
    } else {
        const char *code = status == 401 ? "unauthorized" : status == 403 ? "forbidden" : "invalid_request";
        api_error(req, status, "invalid_request_error", code, NULL, "%s", why);
    }
    json_decref(resp);
    json_decref(body);
}

void api_register(coord *c, http_req *req) { control(c, req, registry_register); }
void api_heartbeat(coord *c, http_req *req) { control(c, req, registry_heartbeat); }

/* A Prometheus label value: node names come from workers. */
static void label_value(const char *in, char *out, size_t len)
{
    size_t o = 0;
    for (; in && *in && o + 3 < len; in++) {
        if (*in == '"' || *in == '\\') out[o++] = '\\';
        out[o++] = *in == '\n' ? ' ' : *in;
    }
    out[o] = 0;
}

/* Per node and catalogue model: a 1 for each file that differs from the
 * catalogue's, and how many nodes are in each state per model. */
static void catalog_metrics(coord *c, buf *out)
{
    if (!c->catalog) return;
    json_t *st = registry_catalog_status(c->reg);
    metrics_header(out, "gpupool_model_mismatch", "gauge",
                   "1 for each node whose file for a catalogue model differs from the catalogue's sha256.");
    size_t i;
    json_t *s;
    int mismatches = 0;
    json_array_foreach(st, i, s) {
        if (strcmp(json_string_value(json_object_get(s, "state")), "mismatch")) continue;
        char node[140];
        label_value(json_string_value(json_object_get(s, "name")), node, sizeof node);
        buf_printf(out, "gpupool_model_mismatch{node=\"%s\",model=\"%s\"} 1\n", node,
                   json_string_value(json_object_get(s, "model")));
        mismatches++;
    }
    metrics_header(out, "gpupool_model_mismatches", "gauge", "Node and catalogue model pairs whose files differ.");
    buf_printf(out, "gpupool_model_mismatches %d\n", mismatches);
    metrics_header(out, "gpupool_catalog_nodes", "gauge", "Live nodes per catalogue model and state.");
    json_t *counts = json_object();
    json_array_foreach(st, i, s) {
        char key[300];
        snprintf(key, sizeof key, "model=\"%s\",state=\"%s\"", json_string_value(json_object_get(s, "model")),
                 json_string_value(json_object_get(s, "state")));
        json_object_set_new(counts, key, json_integer(json_integer_value(json_object_get(counts, key)) + 1));
    }
    const char *key;
    json_t *v;
    json_object_foreach(counts, key, v) buf_printf(out, "gpupool_catalog_nodes{%s} %lld\n", key, (long long)json_integer_value(v));
    json_decref(counts);
    json_decref(st);
}

void api_metrics(coord *c, http_req *req)
{
    buf out = {0};
    metrics_render_requests(&out);
    metrics_header(&out, "gpupool_queue_depth", "gauge", "Requests waiting for a node slot.");
    buf_printf(&out, "gpupool_queue_depth %d\n", registry_waiters(c->reg));
    int64_t counts[5] = {0};
    static const char *states[] = {"queued", "running", "succeeded", "failed", "canceled"};
    if (store_task_counts(c->st, counts) == STORE_OK) {
        metrics_header(&out, "gpupool_tasks", "gauge", "Stored async tasks by state.");
        for (int i = 0; i < 5; i++) buf_printf(&out, "gpupool_tasks{state=\"%s\"} %lld\n", states[i], (long long)counts[i]);
    }
    int nodes[NODE_STATES];
    registry_counts(c->reg, nodes);
    metrics_header(&out, "gpupool_nodes", "gauge", "Registered nodes by state.");
    for (int i = 0; i < NODE_STATES; i++)
        buf_printf(&out, "gpupool_nodes{state=\"%s\"} %d\n", node_state_name((node_state)i), nodes[i]);
    metrics_header(&out, "gpupool_dispatch_running", "gauge", "Async task attempts in flight.");
    buf_printf(&out, "gpupool_dispatch_running %d\n", dispatcher_running(c->disp));
    metrics_header(&out, "gpupool_cold_starts_total", "counter", "Requests placed on a node that had to start the model.");
    buf_printf(&out, "gpupool_cold_starts_total %llu\n", (unsigned long long)registry_cold_starts(c->reg));
    metrics_header(&out, "gpupool_hedged_attempts_total", "counter", "Slow attempts started again on another node.");
    buf_printf(&out, "gpupool_hedged_attempts_total %llu\n", (unsigned long long)dispatcher_hedges(c->disp));
    metrics_header(&out, "gpupool_uptime_seconds", "gauge", "Seconds since the coordinator started.");
    buf_printf(&out, "gpupool_uptime_seconds %lld\n", (long long)((mono_ms() - c->started_mono) / 1000));
    api_cache_metrics(c, &out);
    api_track_metrics(c, &out);
    rollout_table_metrics(c->rollouts, &out);
    catalog_metrics(c, &out);
    if (c->audit) {
        uint64_t written, dropped;
        auditor_counts(c->audit, &written, &dropped);
        metrics_header(&out, "gpupool_audit_records_total", "counter", "Audit records written.");
        buf_printf(&out, "gpupool_audit_records_total %llu\n", (unsigned long long)written);
        metrics_header(&out, "gpupool_audit_dropped_total", "counter", "Audit records dropped: the writer's queue was full.");
        buf_printf(&out, "gpupool_audit_dropped_total %llu\n", (unsigned long long)dropped);
    }
    http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", out.data, out.len);
    buf_free(&out);
}
