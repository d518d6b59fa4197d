/* sched/dispatch: see dispatch.h. */
#include "sched/dispatch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "http/client.h"
#include "sched/taskmemo.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"

/* One pass looks at this many queued tasks at most; the rest wait their turn
 * in the store's priority order. */
#define PASS_MAX 4096

enum cancel_reason { CANCEL_NONE, CANCEL_USER, CANCEL_NODE_OFFLINE, CANCEL_SHUTDOWN, CANCEL_SUPERSEDED };

typedef struct exec {
    dispatcher *d;
    char task_id[64];
    char owner[40];
    int attempt, max_attempts;
    int hedge;         /* this attempt was started beside a slow one */
    int hedged;        /* a second attempt was started beside this one */
    int64_t hedge_next_ms; /* when to look for a node to hedge on again */
    int node_silent;   /* its node's heartbeats are overdue: start it elsewhere now */
    char *body;
    api_kind kind;
    node_lease lease;
    int64_t started_ms;
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
    memo_table *memo;
    uint64_t hedges;
    /* the last dispatch order, for queue positions */
    char (*order_ids)[64];
    double *order_work;  /* estimated work ahead of each, cumulative */
    size_t norder;
};

void dispatcher_wake(dispatcher *d)
{
    pthread_mutex_lock(&d->mu);
    /* Running attempts may need a second one (hedging) even with no queue. */
    if (!d->maybe_queued && !d->nrunning) { pthread_mutex_unlock(&d->mu); return; }
    d->woken = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* Caller holds mu.  skip (may be NULL) is spared. */
static void cancel_where_locked(dispatcher *d, const char *node_id, const char *task_id, const exec *skip,
                                enum cancel_reason why)
{
    for (exec *e = d->running; e; e = e->next) {
        if (e == skip) continue;
        if (node_id && strcmp(e->lease.node_id, node_id)) continue;
        if (task_id && strcmp(e->task_id, task_id)) continue;
        if (e->cancel == CANCEL_NONE) e->cancel = why;
    }
}

static void cancel_where(dispatcher *d, const char *node_id, const char *task_id, enum cancel_reason why)
{
    pthread_mutex_lock(&d->mu);
    cancel_where_locked(d, node_id, task_id, NULL, why);
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

void dispatcher_node_silent(dispatcher *d, const char *node_id)
{
    pthread_mutex_lock(&d->mu);
    for (exec *e = d->running; e; e = e->next)
        if (!strcmp(e->lease.node_id, node_id)) {
            e->node_silent = 1;
            e->hedge_next_ms = 0;
        }
    d->woken = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

void dispatcher_cancel_task(dispatcher *d, const char *task_id) { cancel_where(d, NULL, task_id, CANCEL_USER); }

int dispatcher_running(dispatcher *d)
{
    pthread_mutex_lock(&d->mu);
    int n = d->nrunning;
    pthread_mutex_unlock(&d->mu);
    return n;
}

uint64_t dispatcher_hedges(dispatcher *d)
{
    pthread_mutex_lock(&d->mu);
    uint64_t n = d->hedges;
    pthread_mutex_unlock(&d->mu);
    return n;
}

int dispatcher_queue_position(dispatcher *d, const char *task_id, int64_t *ahead, double *work_ahead_ms)
{
    pthread_mutex_lock(&d->mu);
    int found = -1;
    for (size_t i = 0; i < d->norder; i++) {
        if (strcmp(d->order_ids[i], task_id)) continue;
        *ahead = (int64_t)i;
        *work_ahead_ms = d->order_work[i];
        found = 0;
        break;
    }
    pthread_mutex_unlock(&d->mu);
    return found;
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

/* Whether another attempt of e's task still runs (and may yet succeed). */
static int sibling_running(dispatcher *d, const exec *e)
{
    pthread_mutex_lock(&d->mu);
    int yes = 0;
    for (exec *x = d->running; x && !yes; x = x->next)
        yes = x != e && !strcmp(x->task_id, e->task_id) && x->cancel == CANCEL_NONE;
    pthread_mutex_unlock(&d->mu);
    return yes;
}

static int64_t backoff_ms(const dispatcher *d, int attempt)
{
    int shift = attempt - 1 < 5 ? attempt - 1 : 5;
    return d->cfg.backoff_ms << (shift > 0 ? shift : 0);
}

/* The attempt ended without a result: queue the task again after a backoff,
 * or fail it once its attempts are used up.  While another attempt of it
 * runs, only this attempt's end is recorded. */
static void retry_or_fail(exec *e, const char *code, const char *msg)
{
    dispatcher *d = e->d;
    int64_t now = wall_ms();
    if (sibling_running(d, e)) {
        store_task_end_attempt(d->cfg.st, e->task_id, e->attempt, code, msg, now);
        log_info("task %s attempt %d on %s ended (%s: %s); another attempt runs", e->task_id, e->attempt,
                 e->lease.node_id, code, msg);
        return;
    }
    if (e->attempt >= e->max_attempts) {
        char full[512];
        snprintf(full, sizeof full, "gave up after %d attempt(s); last: %s", e->attempt, msg);
        if (store_task_fail(d->cfg.st, e->task_id, e->attempt, code, full, now) == STORE_OK)
            log_warn("task %s failed: %s (%s)", e->task_id, full, code);
        return;
    }
    /* A node that went away is no reason to wait: the retry goes to another
     * node at once.  An engine that failed the request may fail it again, so
     * that retry waits. */
    int node_gone = !strcmp(code, "node_offline") || !strcmp(code, "node_unreachable") ||
                    !strcmp(code, "node_not_ready") || !strcmp(code, "node_auth");
    pthread_mutex_lock(&d->mu);
    int64_t delay = node_gone ? 0 : backoff_ms(d, e->attempt);
    memo_failed(d->memo, e->task_id, e->lease.node_id, delay, mono_ms());
    pthread_mutex_unlock(&d->mu);
    if (store_task_requeue(d->cfg.st, e->task_id, e->attempt, code, msg) == STORE_OK) {
        pthread_mutex_lock(&d->mu);
        d->maybe_queued = 1;
        pthread_mutex_unlock(&d->mu);
        log_info("task %s attempt %d on %s ended (%s: %s); queued again in %lld ms", e->task_id, e->attempt,
                 e->lease.node_id, code, msg, (long long)delay);
    }
}

/* A result was written: the task's other attempts are moot. */
static void supersede_siblings(exec *e)
{
    pthread_mutex_lock(&e->d->mu);
    cancel_where_locked(e->d, NULL, e->task_id, e, CANCEL_SUPERSEDED);
    pthread_mutex_unlock(&e->d->mu);
}

/* Returns whether the node did its job, for its profile. */
static int record_outcome(exec *e, int rc, const http_result *res, enum cancel_reason why)
{
    dispatcher *d = e->d;
    char msg[384];
    if (why == CANCEL_USER || why == CANCEL_SHUTDOWN || why == CANCEL_SUPERSEDED) return -1;
    if (why == CANCEL_NODE_OFFLINE) {
        retry_or_fail(e, "node_offline", "the node stopped sending heartbeats");
        return 0;
    }
    if (rc != 0 && res->status == 0) {
        snprintf(msg, sizeof msg, "node %s unreachable: %s", e->lease.node_id, res->error);
        registry_mark_unreachable(d->cfg.reg, e->lease.node_id, res->error, mono_ms());
        retry_or_fail(e, res->timed_out ? "timeout" : "node_unreachable", msg);
        return 0;
    }
    json_error_t jerr;
    json_t *body = json_loadb(e->out.data ? e->out.data : "", e->out.len, 0, &jerr);
    const char *emsg = NULL, *ecode = NULL;
    json_t *err = json_object_get(body, "error");
    if (json_is_object(err)) {
        emsg = json_string_value(json_object_get(err, "message"));
        ecode = json_string_value(json_object_get(err, "code"));
    }
    int ok = 0;
    if (rc != 0) {
        snprintf(msg, sizeof msg, "node %s broke off the answer: %s", e->lease.node_id, res->error);
        retry_or_fail(e, "node_unreachable", msg);
    } else if (res->status == 200 && json_is_object(body) && !err) {
        char *text = json_dumps(body, JSON_COMPACT);
        int src = store_task_succeed(d->cfg.st, e->task_id, e->attempt, text, wall_ms());
        if (src == STORE_STALE) log_info("task %s: late result of attempt %d ignored", e->task_id, e->attempt);
        free(text);
        supersede_siblings(e);
        ok = 1;
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
        supersede_siblings(e);
        ok = 1; /* the node did its job: the request was at fault */
    }
    json_decref(body);
    return ok;
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
    int64_t t0 = mono_us();
    int rc = http_call_stream(&o, &cb, &res);
    pthread_mutex_lock(&d->mu);
    enum cancel_reason why = e->cancel;
    pthread_mutex_unlock(&d->mu);
    int ok = record_outcome(e, rc, &res, why);
    if (ok >= 0) {
        call_sample s = {.total_ms = (double)(mono_us() - t0) / 1000.0};
        if (ok) call_sample_parse_answer(&s, e->out.data, e->out.len);
        registry_observe(d->cfg.reg, &e->lease, ok, &s, mono_ms());
        if (d->cfg.outcome) d->cfg.outcome(d->cfg.outcome_ctx, e->lease.model, ok, s.total_ms);
    }
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

static reg_request describe(const queued_task *q)
{
    /* An embedding's answer is one vector, about a token's time. */
    double max_tokens = !strcmp(q->type, "embedding") ? 1 : q->max_tokens;
    return (reg_request){.model = q->model, .prompt_tokens = q->prompt_tokens, .max_tokens = max_tokens,
                         .priority = q->priority, .trusted_only = q->trusted_only};
}

/* Starts a thread for an attempt that holds a lease.  Returns 0, or -1 with
 * the exec freed (the caller gives the attempt back). */
static int launch(dispatcher *d, exec *e)
{
    pthread_mutex_lock(&d->mu);
    e->next = d->running;
    d->running = e;
    d->nrunning++;
    pthread_mutex_unlock(&d->mu);
    pthread_t th;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &a, exec_thread, e);
    pthread_attr_destroy(&a);
    if (!rc) return 0;
    pthread_mutex_lock(&d->mu);
    for (exec **pp = &d->running; *pp; pp = &(*pp)->next)
        if (*pp == e) { *pp = e->next; break; }
    d->nrunning--;
    pthread_mutex_unlock(&d->mu);
    free(e->body);
    free(e);
    return -1;
}

static exec *new_exec(dispatcher *d, const task_rec *t, const node_lease *lease, int attempt)
{
    exec *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->d = d;
    snprintf(e->task_id, sizeof e->task_id, "%.63s", t->id);
    e->attempt = attempt;
    e->max_attempts = t->max_attempts > 0 ? t->max_attempts : d->cfg.max_attempts;
    e->kind = api_kind_from_task_type(t->type);
    e->body = node_body(t);
    e->lease = *lease;
    e->started_ms = mono_ms();
    return e;
}

enum start_rc { STARTED, NO_NODE, DEFERRED, GONE };

/* Leases a node for a queued task, avoiding the nodes it failed on when
 * another can take it, and starts its attempt. */
static enum start_rc start_one(dispatcher *d, const queued_task *q, const char *const *tried, int ntried,
                                int queued_ahead)
{
    reg_request rq = describe(q);
    rq.queued_ahead = queued_ahead;
    node_lease lease;
    place_block b = registry_acquire(d->cfg.reg, &rq, tried, ntried, &lease);
    if (b != PLACE_OK && b != PLACE_DEFERRED && ntried) b = registry_acquire(d->cfg.reg, &rq, NULL, 0, &lease);
    if (b == PLACE_DEFERRED) return DEFERRED;
    if (b != PLACE_OK) return NO_NODE;
    task_rec t;
    int attempt = 0;
    if (store_task_get(d->cfg.st, q->id, &t) != STORE_OK) {
        registry_release(d->cfg.reg, &lease, mono_ms(), 0);
        return GONE;
    }
    if (store_task_claim(d->cfg.st, q->id, lease.node_id, wall_ms(), &attempt) != STORE_OK) {
        registry_release(d->cfg.reg, &lease, mono_ms(), 0);
        task_rec_free(&t);
        return GONE;
    }
    exec *e = new_exec(d, &t, &lease, attempt);
    task_rec_free(&t);
    if (e) snprintf(e->owner, sizeof e->owner, "%s", q->owner);
    if (!e || launch(d, e)) {
        store_task_requeue(d->cfg.st, q->id, attempt, "no_thread", "could not start a thread");
        registry_release(d->cfg.reg, &lease, mono_ms(), 0);
        return NO_NODE;
    }
    log_info("task %s attempt %d -> %s%s (estimate %.0f ms)", q->id, attempt, lease.node_id,
             lease.cold ? ", cold start" : "", lease.est_ms);
    return STARTED;
}

/* Attempts running past hedge_factor x their estimate, or on a node gone
 * silent, get a second attempt on another node, while attempts remain. */
static void hedge_slow(dispatcher *d)
{
    int64_t now = mono_ms();
    char ids[32][64];
    char nodes[32][40];
    int silent[32];
    int n = 0;
    pthread_mutex_lock(&d->mu);
    for (exec *e = d->running; e && n < 32; e = e->next) {
        if (e->hedge || e->hedged || e->cancel != CANCEL_NONE || e->attempt >= e->max_attempts) continue;
        double limit = d->cfg.hedge_factor * e->lease.est_ms;
        if (limit < d->cfg.hedge_min_ms) limit = (double)d->cfg.hedge_min_ms;
        int slow = d->cfg.hedge_factor > 0 && now - e->started_ms >= limit;
        if (!(slow || e->node_silent) || now < e->hedge_next_ms) continue;
        snprintf(ids[n], sizeof ids[n], "%s", e->task_id);
        snprintf(nodes[n], sizeof nodes[n], "%s", e->lease.node_id);
        silent[n] = e->node_silent;
        /* A busy pool may have no node for it now: look again in a second,
         * not on every pass. */
        e->hedge_next_ms = now + 1000;
        n++;
    }
    pthread_mutex_unlock(&d->mu);
    for (int i = 0; i < n; i++) {
        task_rec t;
        if (store_task_get(d->cfg.st, ids[i], &t) != STORE_OK) continue;
        queued_task q = {.priority = t.priority, .trusted_only = t.sensitivity && !strcmp(t.sensitivity, "private")};
        snprintf(q.model, sizeof q.model, "%s", t.model);
        snprintf(q.type, sizeof q.type, "%s", t.type);
        reg_request rq = describe(&q);
        const char *ex[] = {nodes[i]};
        node_lease lease;
        int attempt;
        if (registry_acquire(d->cfg.reg, &rq, ex, 1, &lease) != PLACE_OK) { task_rec_free(&t); continue; }
        if (store_task_hedge(d->cfg.st, ids[i], lease.node_id, wall_ms(), &attempt) != STORE_OK) {
            registry_release(d->cfg.reg, &lease, mono_ms(), 0);
            task_rec_free(&t);
            continue;
        }
        exec *e = new_exec(d, &t, &lease, attempt);
        task_rec_free(&t);
        if (!e) { registry_release(d->cfg.reg, &lease, mono_ms(), 0); continue; }
        e->hedge = 1;
        if (launch(d, e)) {
            store_task_end_attempt(d->cfg.st, ids[i], attempt, "no_thread", "could not start a thread", wall_ms());
            registry_release(d->cfg.reg, &lease, mono_ms(), 0);
            continue;
        }
        pthread_mutex_lock(&d->mu);
        d->hedges++;
        for (exec *x = d->running; x; x = x->next)
            if (x != e && !strcmp(x->task_id, ids[i]) && !x->hedge) x->hedged = 1;
        pthread_mutex_unlock(&d->mu);
        log_warn("task %s: attempt on %s is %s; attempt %d started on %s, the first result wins", ids[i], nodes[i],
                 silent[i] ? "on a silent node" : "slow", attempt, lease.node_id);
    }
}

static int owner_running(dispatcher *d, const char *owner)
{
    int n = 0;
    for (exec *e = d->running; e; e = e->next) n += !e->hedge && !strcmp(e->owner, owner);
    return n;
}

/* One pass over the queue: order it, then start what can start.  Returns
 * how many tasks were queued (0 = the queue is empty). */
static int dispatch_pass(dispatcher *d, queued_task *rows, queue_item *items, size_t *order)
{
    int n = store_task_queued(d->cfg.st, rows, PASS_MAX);
    if (n <= 0) {
        pthread_mutex_lock(&d->mu);
        d->norder = 0;
        pthread_mutex_unlock(&d->mu);
        return n < 0 ? 1 : 0;
    }
    int64_t now = mono_ms();
    pthread_mutex_lock(&d->mu);
    memo_begin_pass(d->memo);
    for (int i = 0; i < n; i++) {
        task_memo *m = memo_get(d->memo, rows[i].id, now);
        if (m) m->seen = 1;
        items[i] = (queue_item){.id = rows[i].id, .owner = rows[i].owner, .priority = rows[i].priority,
                                .enqueued_ms = m ? m->first_seen_ms : now, .not_before_ms = m ? m->not_before_ms : 0};
    }
    if (n < PASS_MAX) memo_end_pass(d->memo, now);
    pthread_mutex_unlock(&d->mu);
    for (int i = 0; i < n; i++) {
        reg_request rq = describe(&rows[i]);
        items[i].est_ms = registry_estimate_ms(d->cfg.reg, &rq);
    }
    size_t k = queue_order(&d->cfg.queue, items, (size_t)n, now, order);

    /* Keep the order for queue positions. */
    pthread_mutex_lock(&d->mu);
    double work = 0;
    for (size_t i = 0; i < k; i++) {
        snprintf(d->order_ids[i], sizeof d->order_ids[i], "%s", items[order[i]].id);
        d->order_work[i] = work;
        work += items[order[i]].est_ms;
    }
    d->norder = k;
    pthread_mutex_unlock(&d->mu);

    int total_slots = registry_total_slots(d->cfg.reg);
    /* Shares bind only while some other owner waits too. */
    int several_owners = 0;
    for (size_t i = 1; i < k && !several_owners; i++)
        several_owners = strcmp(rows[order[i]].owner, rows[order[0]].owner) != 0;
    char blocked[16][128];
    int nblocked = 0;
    /* Tasks that chose to wait for a busy (faster) node, per model: each
     * later one counts them as ahead of it in that node's line. */
    char waiting_model[16][128];
    int waiting_n[16], nwaiting = 0;
    for (size_t i = 0; i < k; i++) {
        const queued_task *q = &rows[order[i]];
        int skip = 0;
        for (int b = 0; b < nblocked && !skip; b++) skip = !strcmp(blocked[b], q->model);
        if (skip) continue;
        pthread_mutex_lock(&d->mu);
        int running = owner_running(d, q->owner);
        const char *tried[MEMO_TRIED];
        char tried_ids[MEMO_TRIED][40];
        int ntried = 0;
        task_memo *m = memo_find(d->memo, q->id);
        for (int t = 0; m && t < m->ntried; t++) {
            snprintf(tried_ids[t], sizeof tried_ids[t], "%s", m->tried[t]);
            tried[ntried++] = tried_ids[t];
        }
        pthread_mutex_unlock(&d->mu);
        if (!queue_owner_may_start(&d->cfg.queue, running, several_owners, total_slots)) continue;
        int w = 0;
        while (w < nwaiting && strcmp(waiting_model[w], q->model)) w++;
        enum start_rc rc = start_one(d, q, tried, ntried, w < nwaiting ? waiting_n[w] : 0);
        if (rc == NO_NODE && nblocked < 16) snprintf(blocked[nblocked++], sizeof blocked[0], "%s", q->model);
        if (rc == DEFERRED && w == nwaiting && nwaiting < 16) {
            snprintf(waiting_model[nwaiting], sizeof waiting_model[0], "%s", q->model);
            waiting_n[nwaiting++] = 0;
        }
        if (rc == DEFERRED && w < 16) waiting_n[w]++;
    }
    return n;
}

static void *loop_thread(void *arg)
{
    dispatcher *d = arg;
    queued_task *rows = calloc(PASS_MAX, sizeof *rows);
    queue_item *items = calloc(PASS_MAX, sizeof *items);
    size_t *order = calloc(PASS_MAX, sizeof *order);
    pthread_mutex_lock(&d->mu);
    while (!d->stopping && rows && items && order) {
        if (!d->woken) {
            struct timespec ts = mono_deadline(250);
            pthread_cond_timedwait(&d->cv, &d->mu, &ts);
        }
        d->woken = 0;
        if (d->stopping) break;
        int queued = d->maybe_queued;
        pthread_mutex_unlock(&d->mu);
        hedge_slow(d);
        int n = -1;
        if (queued && registry_waiters(d->cfg.reg) == 0) n = dispatch_pass(d, rows, items, order);
        pthread_mutex_lock(&d->mu);
        /* Nothing queued: sleep until a task is queued again.  Tasks left
         * queued for want of a slot are retried on capacity changes. */
        if (n == 0) d->maybe_queued = 0;
    }
    pthread_mutex_unlock(&d->mu);
    free(rows);
    free(items);
    free(order);
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
    if (d->cfg.backoff_ms <= 0) d->cfg.backoff_ms = 250;
    if (d->cfg.hedge_min_ms <= 0) d->cfg.hedge_min_ms = 2000;
    d->memo = memo_new();
    d->order_ids = calloc(PASS_MAX, sizeof *d->order_ids);
    d->order_work = calloc(PASS_MAX, sizeof *d->order_work);
    pthread_mutex_init(&d->mu, NULL);
    cond_init_monotonic(&d->cv);
    if (!d->memo || !d->order_ids || !d->order_work || pthread_create(&d->loop, NULL, loop_thread, d)) {
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
        memo_free(d->memo);
        free(d->order_ids);
        free(d->order_work);
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
    memo_free(d->memo);
    free(d->order_ids);
    free(d->order_work);
    free(d);
}
