/* worker/frontdoor: see frontdoor.h. */
#include "worker/frontdoor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "http/relay.h"
#include "util/log.h"
#include "worker/agent.h"

typedef struct job {
    worker *w;
    int engine;
} job;

static void job_finished(job *j, const relay_outcome *o)
{
    worker *w = j->w;
    pthread_mutex_lock(&w->mu);
    w->inflight--;
    w->engines[j->engine].inflight--;
    pthread_mutex_unlock(&w->mu);
    if (o->upstream_failed) log_warn("engine call ended early: %s", o->error);
}

static void job_done(void *ctx, const relay_outcome *o)
{
    job_finished(ctx, o);
    free(ctx);
}

static void not_ready(http_req *req, const char *fmt, const char *arg)
{
    char msg[300];
    snprintf(msg, sizeof msg, fmt, arg);
    api_error(req, 503, "server_error", "not_ready", NULL, "%s", msg);
}

static void engine_failed(worker *w, int idx, const char *url, const char *why)
{
    pthread_mutex_lock(&w->mu);
    w->engines[idx].healthy = 0;
    snprintf(w->engines[idx].error, sizeof w->engines[idx].error, "%.190s", why);
    pthread_mutex_unlock(&w->mu);
    log_warn("engine at %s did not answer: %s", url, why);
}

static void forward_buffered(worker *w, http_req *req, const http_call_opts *o, int idx)
{
    http_result res;
    relay_call_buffered(o, req, &res);
    relay_outcome none = {0};
    job j = {w, idx};
    job_finished(&j, &none);
    if (res.status) relay_respond_result(req, &res);
    else if (!http_req_client_gone(req)) {
        engine_failed(w, idx, o->url, res.error);
        not_ready(req, "the engine did not answer: %s", res.error);
    }
    http_result_free(&res);
}

static void forward_stream(worker *w, http_req *req, const http_call_opts *o, int idx)
{
    job *j = malloc(sizeof *j);
    j->w = w;
    j->engine = idx;
    relay *r = relay_start(o, job_done, j);
    if (!r) {
        relay_outcome none = {0};
        job_done(j, &none);
        not_ready(req, "%s", "cannot start the engine call");
        return;
    }
    long status = relay_wait(r, 0, req);
    if (status == 0) {
        char why[256];
        snprintf(why, sizeof why, "%s", relay_error(r));
        relay_abandon(r);
        if (!http_req_client_gone(req)) {
            engine_failed(w, idx, o->url, why);
            not_ready(req, "the engine did not answer: %s", why);
        }
        return;
    }
    relay_to_client(r, req, (int)status);
}

static void forward(worker *w, http_req *req)
{
    size_t len;
    const char *raw = http_req_body(req, &len);
    json_t *body = json_loadb(raw, len, 0, NULL);
    const char *model = json_string_value(json_object_get(body, "model"));
    if (!model) {
        json_decref(body);
        api_bad_request(req, "missing_field", "model", "'model' is required");
        return;
    }
    pthread_mutex_lock(&w->mu);
    int pick = -1, up = 0;
    for (int i = 0; i < w->nengines; i++) {
        if (!w->engines[i].healthy) continue;
        up++;
        if (!engine_has_model(&w->engines[i], model)) continue;
        if (pick < 0 || w->engines[i].inflight < w->engines[pick].inflight) pick = i;
    }
    char url[512] = "";
    if (pick >= 0) {
        snprintf(url, sizeof url, "%s%s", w->engines[pick].url, http_req_path(req));
        w->engines[pick].inflight++;
        w->inflight++;
    }
    pthread_mutex_unlock(&w->mu);
    if (pick < 0) {
        if (!up) not_ready(req, "%s", "no engine on this node is answering");
        else not_ready(req, "model '%s' is not loaded on this node", model);
        json_decref(body);
        return;
    }
    int stream = json_is_true(json_object_get(body, "stream"));
    json_decref(body);
    http_call_opts o = {.method = "POST", .url = url, .body = raw, .body_len = len};
    if (stream) forward_stream(w, req, &o, pick);
    else forward_buffered(w, req, &o, pick);
}

void frontdoor_handle(http_req *req, void *app)
{
    worker *w = app;
    const char *m = http_req_method(req), *p = http_req_path(req);
    if (!strcmp(p, "/healthz")) {
        pthread_mutex_lock(&w->mu);
        json_t *j = json_pack("{s:s, s:b, s:s}", "status", "ok", "registered", w->registered, "node_id", w->node_id);
        pthread_mutex_unlock(&w->mu);
        http_respond_json(req, 200, j);
        json_decref(j);
        return;
    }
    int inference = !strcmp(p, "/v1/chat/completions") || !strcmp(p, "/v1/completions") || !strcmp(p, "/v1/embeddings");
    if (!inference) {
        api_error(req, 404, "invalid_request_error", "not_found", NULL, "no such endpoint on a worker: %s", p);
        return;
    }
    if (strcmp(m, "POST")) {
        api_error(req, 405, "invalid_request_error", "method_not_allowed", NULL, "use POST");
        return;
    }
    if (!worker_token_ok(w, http_req_bearer(req))) {
        log_warn("refused %s from %s: not this node's token", p, http_req_peer(req));
        api_error(req, 401, "invalid_request_error", "unauthorized", NULL, "work must come from this node's coordinator");
        return;
    }
    forward(w, req);
}
