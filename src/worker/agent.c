/* worker/agent: see agent.h. */
#include "worker/agent.h"

#include <stdio.h>
#include <string.h>

#include "http/client.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/log.h"

void worker_refresh(worker *w)
{
    gpu_info gpus[GPU_MAX];
    int ngpus = w->probe ? gpu_probe_read(w->probe, gpus, GPU_MAX) : 0;
    engine fresh[WORKER_MAX_ENGINES];
    pthread_mutex_lock(&w->mu);
    int n = w->nengines;
    engine snap[WORKER_MAX_ENGINES];
    memcpy(snap, w->engines, sizeof(engine) * (size_t)n);
    pthread_mutex_unlock(&w->mu);
    /* Engine calls happen outside the lock so requests are never held up. */
    for (int i = 0; i < n; i++) engine_refresh(&snap[i], &fresh[i]);
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < n; i++) {
        int inflight = w->engines[i].inflight;
        if (w->engines[i].healthy != fresh[i].healthy)
            log_info("engine %s at %s is %s%s%s", engine_kind_name(fresh[i].kind), fresh[i].url,
                     fresh[i].healthy ? "up" : "down", fresh[i].error[0] ? ": " : "", fresh[i].error);
        w->engines[i] = fresh[i];
        w->engines[i].inflight = inflight;
    }
    if (ngpus >= 0) {
        memcpy(w->gpus, gpus, sizeof(gpu_info) * (size_t)ngpus);
        w->ngpus = ngpus;
    }
    pthread_mutex_unlock(&w->mu);
}

int worker_token_ok(worker *w, const char *bearer)
{
    if (!bearer) return 0;
    pthread_mutex_lock(&w->mu);
    int ok = (w->token[0] && secret_equal(bearer, w->token)) || (w->prev_token[0] && secret_equal(bearer, w->prev_token));
    pthread_mutex_unlock(&w->mu);
    return ok;
}

/* Caller holds mu.  What the coordinator needs to place work here. */
static json_t *report(worker *w)
{
    json_t *gpus = json_array(), *engines = json_array();
    for (int i = 0; i < w->ngpus; i++) json_array_append_new(gpus, gpu_info_json(&w->gpus[i]));
    int healthy = 0;
    for (int i = 0; i < w->nengines; i++) {
        json_array_append_new(engines, engine_json(&w->engines[i]));
        healthy += w->engines[i].healthy;
    }
    json_t *j = json_pack("{s:s, s:s, s:s, s:o, s:o, s:i, s:b}", "name", w->name, "address", w->address,
                          "fingerprint", w->fingerprint, "gpus", gpus, "engines", engines, "inflight",
                          w->inflight, "ready", healthy > 0);
    if (!healthy) json_object_set_new(j, "not_ready_reason", json_string("no engine is answering"));
    return j;
}

static long post(worker *w, const char *path, const char *bearer, json_t *body, json_t **answer)
{
    char url[384];
    snprintf(url, sizeof url, "%s%s", w->coordinator, path);
    char *text = json_dumps(body, JSON_COMPACT);
    http_call_opts o = {.method = "POST", .url = url, .body = text, .body_len = strlen(text), .bearer = bearer,
                        .timeout_ms = 5000, .connect_timeout_ms = 2000};
    http_result res;
    http_call(&o, &res);
    free(text);
    *answer = res.status ? json_loadb(res.body, res.body_len, 0, NULL) : NULL;
    if (!res.status) log_debug("coordinator unreachable: %s", res.error);
    long st = res.status;
    http_result_free(&res);
    return st;
}

static const char *error_message(json_t *answer)
{
    const char *m = json_string_value(json_object_get(json_object_get(answer, "error"), "message"));
    return m ? m : "no reason given";
}

static void do_register(worker *w)
{
    pthread_mutex_lock(&w->mu);
    json_t *body = report(w);
    pthread_mutex_unlock(&w->mu);
    json_t *ans = NULL;
    long st = post(w, "/internal/v1/register", w->join_token, body, &ans);
    json_decref(body);
    if (st == 200) {
        const char *id = json_string_value(json_object_get(ans, "node_id"));
        const char *tok = json_string_value(json_object_get(ans, "node_token"));
        json_int_t hb = json_integer_value(json_object_get(ans, "heartbeat_ms"));
        if (id && tok) {
            pthread_mutex_lock(&w->mu);
            snprintf(w->node_id, sizeof w->node_id, "%s", id);
            snprintf(w->prev_token, sizeof w->prev_token, "%s", w->token);
            snprintf(w->token, sizeof w->token, "%s", tok);
            w->registered = 1;
            w->seq = 0;
            if (hb > 0) w->heartbeat_ms = hb;
            pthread_mutex_unlock(&w->mu);
            log_info("joined the pool at %s as %s", w->coordinator, id);
        }
    } else if (st) {
        log_error("the coordinator refused registration (%ld): %s", st, error_message(ans));
    }
    json_decref(ans);
}

static void do_heartbeat(worker *w)
{
    pthread_mutex_lock(&w->mu);
    json_t *body = report(w);
    json_object_set_new(body, "node_id", json_string(w->node_id));
    json_object_set_new(body, "seq", json_integer((json_int_t)++w->seq));
    char token[72];
    snprintf(token, sizeof token, "%s", w->token);
    pthread_mutex_unlock(&w->mu);
    json_t *ans = NULL;
    long st = post(w, "/internal/v1/heartbeat", token, body, &ans);
    json_decref(body);
    if (st == 200) {
        const char *tok = json_string_value(json_object_get(ans, "node_token"));
        if (tok) {
            pthread_mutex_lock(&w->mu);
            snprintf(w->prev_token, sizeof w->prev_token, "%s", w->token);
            snprintf(w->token, sizeof w->token, "%s", tok);
            pthread_mutex_unlock(&w->mu);
            log_debug("node token rotated");
        }
    } else if (st == 401) {
        /* The coordinator restarted or our token expired: join again. */
        log_warn("the coordinator no longer knows this node (%s); registering again", error_message(ans));
        pthread_mutex_lock(&w->mu);
        w->registered = 0;
        pthread_mutex_unlock(&w->mu);
    } else if (st) {
        log_warn("heartbeat refused (%ld): %s", st, error_message(ans));
    }
    json_decref(ans);
}

static void *agent_thread(void *arg)
{
    worker *w = arg;
    for (;;) {
        worker_refresh(w);
        pthread_mutex_lock(&w->mu);
        int registered = w->registered, stopping = w->stopping;
        pthread_mutex_unlock(&w->mu);
        if (stopping) break;
        if (!registered) {
            do_register(w);
            pthread_mutex_lock(&w->mu);
            registered = w->registered;
            pthread_mutex_unlock(&w->mu);
        }
        /* Right after registering too: the first beat makes the node ready. */
        if (registered) do_heartbeat(w);
        pthread_mutex_lock(&w->mu);
        struct timespec ts = mono_deadline(w->heartbeat_ms);
        while (!w->stopping && pthread_cond_timedwait(&w->cv, &w->mu, &ts) == 0) {}
        stopping = w->stopping;
        pthread_mutex_unlock(&w->mu);
        if (stopping) break;
    }
    return NULL;
}

int worker_agent_start(worker *w)
{
    return pthread_create(&w->thread, NULL, agent_thread, w);
}

void worker_agent_stop(worker *w)
{
    pthread_mutex_lock(&w->mu);
    w->stopping = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
}
