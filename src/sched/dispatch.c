/* sched/dispatch: see dispatch.h. */
#include "sched/dispatch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "http/client.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"

enum cancel_reason { CANCEL_NONE, CANCEL_USER, CANCEL_NODE_OFFLINE, CANCEL_SHUTDOWN };

typedef struct exec {
    dispatcher *d;
    char task_id[64];
    int attempt;
    char *body;
    api_kind kind;
    node_lease lease;
    enum cancel_reason cancel;
    buf out;
    struct exec *next;
} exec;

struct dispatcher {
    dispatch_cfg cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t loop;
    int stopping, woken;
    /* Whether the store may hold queued tasks: capacity changes on every
     * request, and only then is it worth asking the store. */
    int maybe_queued;
    exec *running;
    int nrunning;
};

void dispatcher_wake(dispatcher *d)
{
    pthread_mutex_lock(&d->mu);
    if (!d->maybe_queued) { pthread_mutex_unlock(&d->mu); return; }
    d->woken = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

static void cancel_where(dispatcher *d, const char *node_id, const char *task_id, enum cancel_reason why)
{
    pthread_mutex_lock(&d->mu);
    for (exec *e = d->running; e; e = e->next) {
        if (node_id && strcmp(e->lease.node_id, node_id)) continue;
        if (task_id && strcmp(e->task_id, task_id)) continue;
        if (e->cancel == CANCEL_NONE) e->cancel = why;
    }
    pthread_mutex_unlock(&d->mu);
}

void dispatcher_task_queued(dispatcher *d)
{
    pthread_mutex_lock(&d->mu);
    d->maybe_queued = 1;
    d->woken = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

void dispatcher_node_offline(dispatcher *d, const char *node_id)
{
    cancel_where(d, node_id, NULL, CANCEL_NODE_OFFLINE);
}

void dispatcher_cancel_task(dispatcher *d, const char *task_id) { cancel_where(d, NULL, task_id, CANCEL_USER); }

int dispatcher_running(dispatcher *d)
{
    pthread_mutex_lock(&d->mu);
    int n = d->nrunning;
    pthread_mutex_unlock(&d->mu);
    return n;
}

static int exec_cancelled(void *ctx)
{
    exec *e = ctx;
    pthread_mutex_lock(&e->d->mu);
    int c = e->cancel != CANCEL_NONE;
    pthread_mutex_unlock(&e->d->mu);
    return c;
}

static int exec_data(void *ctx, const char *p, size_t n)
{
    exec *e = ctx;
    return e->out.len + n > (64u << 20) ? 1 : buf_append(&e->out, p, n);
}

/* The attempt ended without a result: queue the task again, or fail it once
 * its attempts are used up. */
static void retry_or_fail(exec *e, const char *code, const char *msg)
{
    dispatcher *d = e->d;
    int64_t now = wall_ms();
    if (e->attempt >= d->cfg.max_attempts) {
        char full[512];
        snprintf(full, sizeof full, "gave up after %d attempt(s); last: %s", e->attempt, msg);
        if (store_task_fail(d->cfg.st, e->task_id, e->attempt, code, full, now) == STORE_OK)
            log_warn("task %s failed: %s (%s)", e->task_id, full, code);
        return;
    }
    if (store_task_requeue(d->cfg.st, e->task_id, e->attempt, code, msg) == STORE_OK) {
        pthread_mutex_lock(&d->mu);
        d->maybe_queued = 1;
        pthread_mutex_unlock(&d->mu);
        log_info("task %s attempt %d on %s ended (%s: %s); queued again", e->task_id, e->attempt,
                 e->lease.node_id, code, msg);
    }
}

static void record_outcome(exec *e, int rc, const http_result *res, enum cancel_reason why)
{
    dispatcher *d = e->d;
    char msg[384];
    if (why == CANCEL_USER || why == CANCEL_SHUTDOWN) return;
    if (why == CANCEL_NODE_OFFLINE) {
        retry_or_fail(e, "node_offline", "the node stopped sending heartbeats");
        return;
    }
    if (rc != 0 && res->status == 0) {
        snprintf(msg, sizeof msg, "node %s unreachable: %s", e->lease.node_id, res->error);
        registry_mark_unreachable(d->cfg.reg, e->lease.node_id, res->error, mono_ms());
        retry_or_fail(e, res->timed_out ? "timeout" : "node_unreachable", msg);
        return;
    }
    json_error_t jerr;
    json_t *body = json_loadb(e->out.data ? e->out.data : "", e->out.len, 0, &jerr);
    const char *emsg = NULL, *ecode = NULL;
    json_t *err = json_object_get(body, "error");
    if (json_is_object(err)) {
        emsg = json_string_value(json_object_get(err, "message"));
        ecode = json_string_value(json_object_get(err, "code"));
    }
    if (rc != 0) {
        snprintf(msg, sizeof msg, "node %s broke off the answer: %s", e->lease.node_id, res->error);
        retry_or_fail(e, "node_unreachable", msg);
    } else if (res->status == 200 && json_is_object(body) && !err) {
        char *text = json_dumps(body, JSON_COMPACT);
        int src = store_task_succeed(d->cfg.st, e->task_id, e->attempt, text, wall_ms());
        if (src == STORE_STALE) log_info("task %s: late result of attempt %d ignored", e->task_id, e->attempt);
        free(text);
    } else if (res->status == 200) {
        retry_or_fail(e, "bad_engine_response", "the node answered 200 with no JSON object");
    } else if (res->status == 401 || res->status == 403) {
        /* The worker does not take this node token (it re-registered, or a
         * token race): a node problem, not the task's. */
        registry_mark_unreachable(d->cfg.reg, e->lease.node_id, "the worker refused its node token", mono_ms());
        snprintf(msg, sizeof msg, "node %s refused the dispatch (%ld)", e->lease.node_id, res->status);
        retry_or_fail(e, "node_auth", msg);
    } else if (res->status == 503 && ecode && !strcmp(ecode, "not_ready")) {
        registry_mark_unreachable(d->cfg.reg, e->lease.node_id, emsg ? emsg : "not ready", mono_ms());
        snprintf(msg, sizeof msg, "node %s not ready: %s", e->lease.node_id, emsg ? emsg : "");
        retry_or_fail(e, "node_not_ready", msg);
    } else if (res->status >= 500 || res->status == 429) {
        snprintf(msg, sizeof msg, "node %s answered %ld: %s", e->lease.node_id, res->status, emsg ? emsg : "");
        retry_or_fail(e, "engine_error", msg);
    } else {
        snprintf(msg, sizeof msg, "the engine refused the request (%ld): %s", res->status,
                 emsg ? emsg : "no message");
        store_task_fail(d->cfg.st, e->task_id, e->attempt, "engine_rejected", msg, wall_ms());
    }
    json_decref(body);
}

static void *exec_thread(void *arg)
{
    exec *e = arg;
    dispatcher *d = e->d;
    char url[512];
    snprintf(url, sizeof url, "%s%s", e->lease.address, api_kind_path(e->kind));
    char hdr[128];
    snprintf(hdr, sizeof hdr, "X-Gpupool-Task: %s", e->task_id);
    const char *headers[] = {hdr, NULL};
    http_call_opts o = {.method = "POST", .url = url, .body = e->body, .body_len = strlen(e->body),
                        .bearer = e->lease.token, .headers = headers, .timeout_ms = d->cfg.task_timeout_ms};
    http_stream_cbs cb = {NULL, exec_data, exec_cancelled, e};
    http_result res;
    int rc = http_call_stream(&o, &cb, &res);
    pthread_mutex_lock(&d->mu);
    enum cancel_reason why = e->cancel;
    pthread_mutex_unlock(&d->mu);
    record_outcome(e, rc, &res, why);
    int served = rc == 0 && registry_status_served(res.status);
    http_result_free(&res);
    registry_release(d->cfg.reg, &e->lease, mono_ms(), served);

    pthread_mutex_lock(&d->mu);
    for (exec **pp = &d->running; *pp; pp = &(*pp)->next)
        if (*pp == e) { *pp = e->next; break; }
    d->nrunning--;
    d->woken = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    buf_free(&e->out);
    free(e->body);
    free(e);
    return NULL;
}

/* The OpenAI body the node receives: the task's input, its model, no stream. */
static char *node_body(const task_rec *t)
{
    json_t *in = json_loads(t->input_json ? t->input_json : "{}", 0, NULL);
    if (!json_is_object(in)) { json_decref(in); in = json_object(); }
    json_object_set_new(in, "model", json_string(t->model));
    json_object_set_new(in, "stream", json_false());
    char *s = json_dumps(in, JSON_COMPACT);
    json_decref(in);
    return s;
}

static int start_one(dispatcher *d, const char *id)
{
    task_rec t;
    if (store_task_get(d->cfg.st, id, &t) != STORE_OK) return 0;
    node_lease lease;
    if (registry_acquire(d->cfg.reg, t.model, NULL, 0, &lease) != PLACE_OK) { task_rec_free(&t); return 0; }
    int attempt = 0;
    if (store_task_claim(d->cfg.st, id, lease.node_id, wall_ms(), &attempt) != STORE_OK) {
        registry_release(d->cfg.reg, &lease, mono_ms(), 0);
        task_rec_free(&t);
        return 0;
    }
    exec *e = calloc(1, sizeof *e);
    e->d = d;
    snprintf(e->task_id, sizeof e->task_id, "%.63s", id);
    e->attempt = attempt;
    e->kind = api_kind_from_task_type(t.type);
    e->body = node_body(&t);
    e->lease = lease;
    task_rec_free(&t);
    log_info("task %s attempt %d -> %s", id, attempt, lease.node_id);

    pthread_mutex_lock(&d->mu);
    e->next = d->running;
    d->running = e;
    d->nrunning++;
    pthread_mutex_unlock(&d->mu);
    pthread_t th;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &a, exec_thread, e)) {
        /* Could not run it now: give the attempt back. */
        pthread_mutex_lock(&d->mu);
        d->running = e->next;
        d->nrunning--;
        pthread_mutex_unlock(&d->mu);
        store_task_requeue(d->cfg.st, id, attempt, "no_thread", "could not start a thread");
        registry_release(d->cfg.reg, &lease, mono_ms(), 0);
        free(e->body);
        free(e);
        pthread_attr_destroy(&a);
        return 0;
    }
    pthread_attr_destroy(&a);
    return 1;
}

static void *loop_thread(void *arg)
{
    dispatcher *d = arg;
    pthread_mutex_lock(&d->mu);
    while (!d->stopping) {
        if (!d->woken) {
            struct timespec ts = mono_deadline(250);
            pthread_cond_timedwait(&d->cv, &d->mu, &ts);
        }
        d->woken = 0;
        if (d->stopping) break;
        pthread_mutex_unlock(&d->mu);
        int started = 0, n = -1;
        if (registry_waiters(d->cfg.reg) == 0) {
            char ids[64][64];
            n = store_task_next_queued(d->cfg.st, ids, 64);
            for (int i = 0; i < n; i++) started += start_one(d, ids[i]);
        }
        pthread_mutex_lock(&d->mu);
        /* Nothing queued: sleep until a task is queued again.  Tasks left
         * queued for want of a slot are retried on capacity changes. */
        if (n == 0) d->maybe_queued = 0;
        (void)started;
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

dispatcher *dispatcher_start(const dispatch_cfg *cfg)
{
    dispatcher *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->cfg = *cfg;
    d->maybe_queued = 1; /* the store may hold tasks from before a restart */
    if (d->cfg.max_attempts <= 0) d->cfg.max_attempts = 3;
    if (d->cfg.task_timeout_ms <= 0) d->cfg.task_timeout_ms = 600000;
    pthread_mutex_init(&d->mu, NULL);
    cond_init_monotonic(&d->cv);
    if (pthread_create(&d->loop, NULL, loop_thread, d)) {
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
        free(d);
        return NULL;
    }
    return d;
}

void dispatcher_stop(dispatcher *d)
{
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    d->stopping = 1;
    for (exec *e = d->running; e; e = e->next) e->cancel = CANCEL_SHUTDOWN;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->loop, NULL);
    pthread_mutex_lock(&d->mu);
    while (d->nrunning) {
        struct timespec ts = mono_deadline(100);
        pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    }
    pthread_mutex_unlock(&d->mu);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}
