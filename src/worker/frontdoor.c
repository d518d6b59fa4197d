/* worker/frontdoor: see frontdoor.h. */
#include "worker/frontdoor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "http/relay.h"
#include "util/clock.h"
#include "util/json_skim.h"
#include "util/log.h"
#include "worker/agent.h"
#include "worker/fileserve.h"
#include "worker/managed.h"
#include "worker/residency.h"

typedef struct job {
    worker *w;
    int engine;
    int has_ka;        /* the request named a keep_alive */
    int64_t ka_ms;
} job;

static void job_finished(job *j, const relay_outcome *o)
{
    worker *w = j->w;
    pthread_mutex_lock(&w->mu);
    w->inflight--;
    w->engines[j->engine].inflight--;
    worker_engine_used_locked(w, j->engine, j->has_ka, j->ka_ms, mono_ms());
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
    char msg[1100];
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

static void forward_buffered(worker *w, http_req *req, const http_call_opts *o, const job *jb)
{
    int idx = jb->engine;
    http_result res;
    relay_call_buffered(o, req, &res);
    relay_outcome none = {0};
    job j = *jb;
    job_finished(&j, &none);
    if (res.status) relay_respond_result(req, &res);
    else if (!http_req_client_gone(req)) {
        engine_failed(w, idx, o->url, res.error);
        not_ready(req, "the engine did not answer: %s", res.error);
    }
    http_result_free(&res);
}

static void forward_stream(worker *w, http_req *req, const http_call_opts *o, const job *jb)
{
    int idx = jb->engine;
    job *j = malloc(sizeof *j);
    *j = *jb;
    relay *r = relay_start(o, job_done, j);
    if (!r) {
        relay_outcome none = {0};
        job_done(j, &none);
        not_ready(req, "%s", "cannot start the engine call");
        return;
    }
    /* Wait for the first event: an engine that dies before its first token
     * is then a not_ready answer the coordinator can retry elsewhere. */
    long status = relay_wait(r, 1, req);
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
    relay_pass_breaks(r);
    relay_to_client(r, req, (int)status);
}

/* An engine that is up and serves the model, fewest in flight first; takes a
 * slot on it.  -1 when none.  Caller holds mu. */
static int pick_engine(worker *w, const char *model, int *up)
{
    int pick = -1;
    *up = 0;
    for (int i = 0; i < w->nengines; i++) {
        if (!w->engines[i].healthy && !w->engines[i].managed) continue;
        (*up)++;
        if (!w->engines[i].healthy || !engine_has_model(&w->engines[i], model)) continue;
        if (pick < 0 || w->engines[i].inflight < w->engines[pick].inflight) pick = i;
    }
    return pick;
}

static int has_managed(worker *w, const char *model)
{
    for (int i = 0; i < w->nengines; i++)
        if (w->engines[i].managed && !strcmp(w->engines[i].managed->name, model)) return 1;
    return 0;
}

#define NEEDS_LOAD (-2)

/* The request's model and stream flag without parsing it, where that reads
 * exactly what a parse would: well-formed text, a model without escapes, and
 * no keep_alive (whose value needs the parse).  0, or -1 to parse it. */
static int skim_request(const char *raw, size_t len, char *model, size_t mlen, int *stream)
{
    json_skim k;
    skim_init(&k, raw, len);
    if (skim_object(&k)) return -1;
    int have_model = 0;
    *stream = 0;
    const char *key;
    size_t kl;
    int r;
    while ((r = skim_key(&k, &key, &kl)) == 1) {
        if (skim_key_is(key, kl, "model")) {
            const char *v;
            size_t vl;
            int got = skim_string(&k, &v, &vl);
            if (got < 0) return -1;
            have_model = got && vl < mlen && !memchr(v, '\\', vl);
            if (got && !have_model) return -1;
            if (have_model) {
                memcpy(model, v, vl);
                model[vl] = 0;
            }
        } else if (skim_key_is(key, kl, "stream")) {
            if ((*stream = skim_true(&k)) < 0) return -1;
        } else if (skim_key_is(key, kl, "keep_alive")) {
            return -1;
        } else if (skim_value(&k)) {
            return -1;
        }
    }
    return r == 0 && have_model && skim_done(&k) ? 0 : -1;
}

/* Reads the model, whether to stream and the keep_alive, checks this node
 * can serve it, and takes an engine slot (j->engine).  Returns the engine's
 * index; -1 after answering; NEEDS_LOAD (only when may_load is 0) when a
 * managed engine must start. */
static int take_engine(worker *w, http_req *req, char *url, size_t urllen, int *stream, int may_load, job *j)
{
    /* A draining node still finishes what it runs; new work is refused as
     * not_ready so the coordinator gives it to another node at once. */
    char why[1024];
    if (worker_refuses_work(w, why, sizeof why)) {
        not_ready(req, "%s", why);
        return -1;
    }
    size_t len;
    const char *raw = http_req_body(req, &len);
    /* Every proxied call passes here: skim it when that is exact, as a full
     * parse cost more than the rest of the worker's own work on it. */
    char skimmed[256];
    json_t *body = NULL;
    const char *model = skimmed;
    if (skim_request(raw, len, skimmed, sizeof skimmed, stream)) {
        body = json_loadb(raw, len, 0, NULL);
        model = json_string_value(json_object_get(body, "model"));
        *stream = json_is_true(json_object_get(body, "stream"));
    }
    if (!model) {
        json_decref(body);
        api_bad_request(req, "missing_field", "model", "'model' is required");
        return -1;
    }
    char kerr[160];
    *j = (job){.w = w};
    j->has_ka = res_keep_alive(json_object_get(body, "keep_alive"), &j->ka_ms, kerr, sizeof kerr);
    if (j->has_ka < 0) {
        json_decref(body);
        api_bad_request(req, "invalid_value", "keep_alive", "%s", kerr);
        return -1;
    }
    int pick, up;
    for (int round = 0;; round++) {
        pthread_mutex_lock(&w->mu);
        pick = pick_engine(w, model, &up);
        int managed = pick < 0 && has_managed(w, model);
        if (pick >= 0) {
            snprintf(url, urllen, "%s%s", w->engines[pick].url, http_req_path(req));
            w->engines[pick].inflight++;
            w->inflight++;
        }
        pthread_mutex_unlock(&w->mu);
        if (pick >= 0 || !managed || round > 0) break;
        if (!may_load) { json_decref(body); return NEEDS_LOAD; }
        why[0] = 0;
        if (worker_ensure_loaded(w, model, why, sizeof why) < 0) {
            not_ready(req, "%s", why);
            json_decref(body);
            return -1;
        }
    }
    if (pick < 0) {
        if (!up) not_ready(req, "%s", "no engine on this node is answering");
        else not_ready(req, "model '%s' is not loaded on this node", model);
    }
    json_decref(body);
    j->engine = pick;
    return pick;
}

static void forward(worker *w, http_req *req)
{
    char url[512];
    int stream;
    job j;
    if (take_engine(w, req, url, sizeof url, &stream, 1, &j) < 0) return;
    size_t len;
    const char *raw = http_req_body(req, &len);
    worker_note_upload(w, len, http_req_body_us(req));
    http_call_opts o = {.method = "POST", .url = url, .body = raw, .body_len = len};
    if (stream) forward_stream(w, req, &o, &j);
    else forward_buffered(w, req, &o, &j);
}

typedef struct fast_job {
    job j;
    http_req *req;
    char url[512];
} fast_job;

static void fast_done(void *ctx, http_result *res)
{
    fast_job *f = ctx;
    relay_outcome none = {0};
    job_finished(&f->j, &none);
    if (res->status) {
        relay_respond_result(f->req, res);
    } else if (http_req_client_gone(f->req)) {
        api_error(f->req, 499, "invalid_request_error", "client_closed", NULL, "the client left");
    } else {
        engine_failed(f->j.w, f->j.engine, f->url, res->error);
        not_ready(f->req, "the engine did not answer: %s", res->error);
    }
    http_req_complete(f->req);
    free(f);
}

static int is_inference(const char *p)
{
    return !strcmp(p, "/v1/chat/completions") || !strcmp(p, "/v1/completions") || !strcmp(p, "/v1/embeddings");
}

static int token_refused(worker *w, http_req *req)
{
    if (worker_token_ok(w, http_req_bearer(req))) return 0;
    log_warn("refused %s from %s: not this node's token", http_req_path(req), http_req_peer(req));
    api_error(req, 401, "invalid_request_error", "unauthorized", NULL, "work must come from this node's coordinator");
    return 1;
}

http_fast_rc frontdoor_fast(http_req *req, void *app)
{
    worker *w = app;
    if (!is_inference(http_req_path(req)) || strcmp(http_req_method(req), "POST")) return HTTP_PASS;
    if (token_refused(w, req)) return HTTP_HANDLED;
    fast_job *f = calloc(1, sizeof *f);
    if (!f) return HTTP_PASS;
    int stream;
    int pick = take_engine(w, req, f->url, sizeof f->url, &stream, 0, &f->j);
    if (pick == NEEDS_LOAD) { free(f); return HTTP_PASS; } /* starting an engine blocks */
    if (pick < 0) { free(f); return HTTP_HANDLED; }
    f->req = req;
    size_t len;
    const char *raw = http_req_body(req, &len);
    http_call_opts o = {.method = "POST", .url = f->url, .body = raw, .body_len = len};
    if (stream || relay_call_async(&o, req, fast_done, f)) {
        /* Streams are relayed from a pool thread; give the slot back first.
         * No request ended: its keep_alive (0 would stop the engine now)
         * applies when the pool thread's call does. */
        pthread_mutex_lock(&w->mu);
        w->inflight--;
        w->engines[pick].inflight--;
        pthread_mutex_unlock(&w->mu);
        free(f);
        return HTTP_PASS;
    }
    worker_note_upload(w, len, http_req_body_us(req));
    return HTTP_DEFERRED;
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
    if (!strncmp(p, FILESERVE_PREFIX, strlen(FILESERVE_PREFIX))) {
        fileserve_handle(&w->files, w->join_token, req);
        return;
    }
    if (!is_inference(p)) {
        api_error(req, 404, "invalid_request_error", "not_found", NULL, "no such endpoint on a worker: %s", p);
        return;
    }
    if (strcmp(m, "POST")) {
        api_error(req, 405, "invalid_request_error", "method_not_allowed", NULL, "use POST");
        return;
    }
    if (token_refused(w, req)) return;
    forward(w, req);
}
