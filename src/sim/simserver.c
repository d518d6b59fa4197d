/* sim/simserver: see simserver.h.  Shapes come from simwire, decisions from
 * simcore; this file owns threads, waiting and the clock. */
#include "sim/simserver.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/server.h"
#include "sim/simreply.h"
#include "sim/simwire.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/ids.h"

struct sim_server {
    sim_config cfg;
    http_server *http;
    int fast;                 /* no ttft and no tps: never look at the clock to wait */
    int64_t started_s;        /* wall clock, for "created" */
    uint64_t id_nonce;        /* keeps ids distinct across engines with one seed */
    atomic_uint_fast64_t seq; /* inference requests so far: the fault draw index */
    atomic_uint_fast64_t text_seq; /* chat/completion requests so far, for --fail-first */
    atomic_int stopping;      /* written under both mutexes, so no wake-up is lost */
    atomic_int streams;       /* stream states alive; all must end before the server is freed */
    atomic_int loading;       /* "loading the model": everything answers 503 */

    pthread_mutex_t mu;       /* slots and usage */
    pthread_cond_t slot_cv;
    sim_slots slots;
    sim_usage usage;

    /* Pacing and hangs wait here rather than in sleep_ms so shutdown can end
     * them at once instead of waiting out a long stream. */
    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cv;
};

/* ---- waiting ---- */

/* Returns 0 at the deadline (monotonic µs), -1 if the server is stopping. */
static int wait_until(sim_server *s, int64_t deadline_us)
{
    if (mono_us() >= deadline_us) return atomic_load(&s->stopping) ? -1 : 0;
    pthread_mutex_lock(&s->stop_mu);
    while (!atomic_load(&s->stopping)) {
        if (mono_us() >= deadline_us) break;
        struct timespec ts = {deadline_us / 1000000, (deadline_us % 1000000) * 1000};
        pthread_cond_timedwait(&s->stop_cv, &s->stop_mu, &ts);
    }
    pthread_mutex_unlock(&s->stop_mu);
    return atomic_load(&s->stopping) ? -1 : 0;
}

/* Blocks for a slot in FIFO order; -1 when the server stops first. */
static int acquire(sim_server *s, const sim_request *rq, int64_t *start_us)
{
    int stream = rq->stream && rq->kind != SIM_EMBEDDING;
    int n = rq->kind == SIM_EMBEDDING ? 0 : rq->max_tokens;
    pthread_mutex_lock(&s->mu);
    int id = -1;
    if (!atomic_load(&s->stopping)) {
        *start_us = mono_us();
        id = sim_slots_try_take(&s->slots, NULL, rq->model, n, stream, *start_us);
        if (id < 0) {
            sim_waiter w;
            sim_slots_enqueue(&s->slots, &w);
            for (;;) {
                pthread_cond_wait(&s->slot_cv, &s->mu);
                if (atomic_load(&s->stopping)) break;
                *start_us = mono_us();
                id = sim_slots_try_take(&s->slots, &w, rq->model, n, stream, *start_us);
                if (id >= 0) break;
            }
            if (id < 0) sim_slots_leave(&s->slots, &w);
            /* With several slots free the next in line must be told too. */
            else if (sim_slots_should_wake(&s->slots)) pthread_cond_broadcast(&s->slot_cv);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return id;
}

static void release(sim_server *s, int id, int prompt_tokens, int completion_tokens)
{
    pthread_mutex_lock(&s->mu);
    sim_slots_release(&s->slots, id);
    sim_usage_add(&s->usage, prompt_tokens, completion_tokens);
    if (sim_slots_should_wake(&s->slots)) pthread_cond_broadcast(&s->slot_cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---- plain answers ---- */

static void respond_error(http_req *r, int status, const char *type, const char *code,
                          const char *message)
{
    sim_error e;
    sim_error_set(&e, status, type, code, NULL, "%s", message);
    json_t *j = sim_error_json(&e);
    http_respond_json(r, status, j);
    json_decref(j);
}

static void respond_sim_error(http_req *r, const sim_error *e)
{
    json_t *j = sim_error_json(e);
    http_respond_json(r, e->status, j);
    json_decref(j);
}

static void respond_owned(http_req *r, int status, json_t *j)
{
    if (!j) {
        respond_error(r, 500, "server_error", "internal_error", "could not build the answer");
        return;
    }
    http_respond_json(r, status, j);
    json_decref(j);
}

static void answer_id(sim_server *s, char *out, size_t len, const char *prefix, uint64_t seq)
{
    uint64_t x = s->id_nonce ^ seq;
    snprintf(out, len, "%s%016llx", prefix, (unsigned long long)sim_splitmix64(&x));
}

/* ---- streams ---- */

enum phase { P_TOKENS, P_FINAL, P_USAGE, P_DONE, P_END, P_CUT };

/* A stream is produced on its own thread, paced by the clock, into `ready`;
 * the server's event loop takes from `ready` without ever waiting. */
typedef struct sim_stream {
    sim_server *s;
    int slot;
    int64_t start_us;
    int n, sent, cut_after; /* cut_after < 0: deliver everything */
    int prompt_tokens;
    enum phase phase;
    sim_gen gen;
    const char *reply_at; /* the rest of a --reply-map answer, or NULL for generated text */
    sim_sse sse;
    buf out;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    buf ready;
    int finished; /* 1 complete, -1 cut */
    int gone;     /* the connection is done with the stream */
    int refs;
    http_waker *waker;
} sim_stream;

/* Appends the next event(s) to st->out. */
static void produce(sim_stream *st)
{
    switch (st->phase) {
    case P_TOKENS:
        if (st->sent == 0 && st->sse.chat) sim_sse_role(&st->out, &st->sse);
        if (st->reply_at) {
            size_t k = sim_reply_piece(st->reply_at);
            sim_sse_text(&st->out, &st->sse, st->reply_at, k);
            st->reply_at += k;
        } else {
            sim_sse_token(&st->out, &st->sse, sim_gen_next(&st->gen));
        }
        st->sent++;
        if (st->sent == st->cut_after) st->phase = P_CUT;
        else if (st->sent == st->n) st->phase = P_FINAL;
        break;
    case P_FINAL:
        sim_sse_final(&st->out, &st->sse);
        st->phase = st->sse.include_usage ? P_USAGE : P_DONE;
        break;
    case P_USAGE:
        sim_sse_usage(&st->out, &st->sse, st->prompt_tokens, st->sent);
        st->phase = P_DONE;
        break;
    case P_DONE:
        sim_sse_done(&st->out);
        st->phase = P_END;
        break;
    default:
        break;
    }
}

static void stream_unref(sim_stream *st)
{
    pthread_mutex_lock(&st->mu);
    int left = --st->refs;
    pthread_mutex_unlock(&st->mu);
    if (left) return;
    sim_server *srv = st->s;
    release(srv, st->slot, st->prompt_tokens, st->sent);
    buf_free(&st->out);
    buf_free(&st->ready);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    free(st);
    atomic_fetch_sub(&srv->streams, 1);
}

#define READY_HIGH_WATER (256 * 1024)

/* The producer: waits until each token is due, appends it, wakes the
 * connection.  Waits in steps so a stopping server or a gone client ends it. */
static void *stream_thread(void *arg)
{
    sim_stream *st = arg;
    pthread_mutex_lock(&st->mu);
    while (!st->gone && st->phase != P_END && st->phase != P_CUT) {
        if (st->phase == P_TOKENS && !st->s->fast) {
            int64_t due = st->start_us + sim_token_due_us(&st->s->cfg, st->sent);
            while (!st->gone && !atomic_load(&st->s->stopping) && mono_us() < due) {
                int64_t step = due - mono_us();
                if (step > 100000) step = 100000;
                struct timespec ts = mono_deadline(step / 1000 + 1);
                pthread_cond_timedwait(&st->cv, &st->mu, &ts);
            }
            if (atomic_load(&st->s->stopping)) { st->phase = P_CUT; break; }
        }
        while (!st->gone && st->ready.len > READY_HIGH_WATER) pthread_cond_wait(&st->cv, &st->mu);
        if (st->gone) break;
        buf_reset(&st->out);
        produce(st);
        buf_append(&st->ready, st->out.data, st->out.len);
        http_waker *w = st->waker;
        pthread_mutex_unlock(&st->mu);
        http_stream_wake(w);
        pthread_mutex_lock(&st->mu);
    }
    st->finished = st->phase == P_END ? 1 : -1;
    http_waker *w = st->waker;
    st->waker = NULL;
    pthread_mutex_unlock(&st->mu);
    http_stream_wake(w);
    http_waker_release(w);
    stream_unref(st);
    return NULL;
}

/* Runs on the server's event loop: hands out what is ready, never waits. */
static ssize_t stream_read(void *ctx, char *dst, size_t max)
{
    sim_stream *st = ctx;
    pthread_mutex_lock(&st->mu);
    ssize_t n = HTTP_STREAM_WAIT;
    if (st->ready.len) {
        n = (ssize_t)(st->ready.len < max ? st->ready.len : max);
        memcpy(dst, st->ready.data, (size_t)n);
        buf_consume(&st->ready, (size_t)n);
        pthread_cond_broadcast(&st->cv);
    } else if (st->finished) {
        n = st->finished > 0 ? HTTP_STREAM_END : HTTP_STREAM_ERROR;
    }
    pthread_mutex_unlock(&st->mu);
    return n;
}

static void stream_done(void *ctx)
{
    sim_stream *st = ctx;
    pthread_mutex_lock(&st->mu);
    st->gone = 1;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    stream_unref(st);
}

static void start_stream(sim_server *s, http_req *r, const sim_request *rq, int slot,
                         int64_t start_us, int drop, uint64_t seq)
{
    sim_stream *st = calloc(1, sizeof *st);
    if (!st) {
        release(s, slot, rq->prompt_tokens, 0);
        respond_error(r, 500, "server_error", "internal_error", "out of memory");
        return;
    }
    st->s = s;
    st->slot = slot;
    st->start_us = start_us;
    st->n = rq->max_tokens;
    st->cut_after = drop ? sim_drop_after(rq->max_tokens) : -1;
    st->prompt_tokens = rq->prompt_tokens;
    st->phase = P_TOKENS;
    st->refs = 2; /* the producer's and the connection's */
    atomic_fetch_add(&s->streams, 1);
    pthread_mutex_init(&st->mu, NULL);
    cond_init_monotonic(&st->cv);
    sim_gen_init(&st->gen, s->cfg.seed, rq->input_hash);
    st->reply_at = rq->reply;
    char id[48];
    answer_id(s, id, sizeof id, rq->kind == SIM_CHAT ? "chatcmpl-sim-" : "cmpl-sim-", seq);
    sim_sse_init(&st->sse, &s->cfg, rq, id, (int64_t)time(NULL));
    /* stream_done runs even if the stream cannot start. */
    st->waker = http_respond_stream(r, 200, "text/event-stream", stream_read, stream_done, st);
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (!st->waker || pthread_create(&t, &a, stream_thread, st)) {
        http_waker_release(st->waker);
        st->waker = NULL;
        pthread_mutex_lock(&st->mu);
        st->finished = -1;
        pthread_mutex_unlock(&st->mu);
        stream_unref(st);
    }
    pthread_attr_destroy(&a);
}

static ssize_t cut_read(void *ctx, char *dst, size_t max) { return HTTP_STREAM_ERROR; }

/* A hung request answers nothing and holds no slot (a slot held forever
 * would soon wedge the whole engine, which is a different fault).  The
 * wrapper gives no way to notice the client leaving, so it waits for
 * shutdown, asleep on the condition variable. */
static void hang(sim_server *s, http_req *r)
{
    pthread_mutex_lock(&s->stop_mu);
    while (!atomic_load(&s->stopping)) pthread_cond_wait(&s->stop_cv, &s->stop_mu);
    pthread_mutex_unlock(&s->stop_mu);
    /* Shutting down: close the connection without an answer. */
    http_waker_release(http_respond_stream(r, 200, "text/event-stream", cut_read, NULL, NULL));
}

/* ---- inference ---- */

static void text_of(const sim_config *c, const sim_request *rq, buf *text)
{
    if (rq->reply) {
        buf_puts(text, rq->reply);
        return;
    }
    sim_gen g;
    sim_gen_init(&g, c->seed, rq->input_hash);
    for (int i = 0; i < rq->max_tokens; i++) buf_puts(text, sim_gen_next(&g));
}

static void answer_now(sim_server *s, http_req *r, const sim_request *rq, int slot, uint64_t seq);

/* Acts out one validated request: its fault, its wait for a slot, its timing. */
static void serve_infer(sim_server *s, http_req *r, const sim_request *rq)
{
    int stream = rq->stream && rq->kind != SIM_EMBEDDING;
    uint64_t seq = atomic_fetch_add(&s->seq, 1);
    sim_fault f = sim_fault_draw(&s->cfg, seq, stream);
    if (rq->kind != SIM_EMBEDDING && sim_fails_first(&s->cfg, atomic_fetch_add(&s->text_seq, 1)))
        f = SIM_FAULT_ERROR;
    if (f == SIM_FAULT_ERROR) {
        respond_error(r, 500, "server_error", "simulated_fault", "simulated engine failure");
        return;
    }
    if (f == SIM_FAULT_HANG) {
        hang(s, r);
        return;
    }
    int64_t start_us = 0;
    int slot = acquire(s, rq, &start_us);
    if (slot < 0) {
        respond_error(r, 503, "server_error", "shutting_down", "the engine is shutting down");
        return;
    }
    if (stream) {
        start_stream(s, r, rq, slot, start_us, f == SIM_FAULT_DROP, seq);
        return;
    }
    /* Embeddings cost one prefill (ttft); completions their last token's time. */
    int64_t due = sim_token_due_us(&s->cfg, rq->kind == SIM_EMBEDDING ? 0 : rq->max_tokens - 1);
    if (!s->fast && wait_until(s, start_us + due)) {
        release(s, slot, rq->prompt_tokens, 0);
        respond_error(r, 503, "server_error", "shutting_down", "the engine is shutting down");
        return;
    }
    answer_now(s, r, rq, slot, seq);
}

/* Builds and sends a whole (non-streamed) answer and frees the slot. */
static void answer_now(sim_server *s, http_req *r, const sim_request *rq, int slot, uint64_t seq)
{
    json_t *answer;
    if (rq->kind == SIM_EMBEDDING) {
        answer = sim_embeddings_json(&s->cfg, rq);
    } else {
        buf text = {0};
        char id[48];
        text_of(&s->cfg, rq, &text);
        answer_id(s, id, sizeof id, rq->kind == SIM_CHAT ? "chatcmpl-sim-" : "cmpl-sim-", seq);
        answer = text.data ? sim_completion_json(&s->cfg, rq, id, (int64_t)time(NULL), text.data)
                           : NULL;
        buf_free(&text);
    }
    release(s, slot, rq->prompt_tokens, rq->kind == SIM_EMBEDDING ? 0 : rq->max_tokens);
    respond_owned(r, 200, answer);
}

static void handle_infer(sim_server *s, http_req *r, sim_kind kind)
{
    size_t len;
    const char *body = http_req_body(r, &len);
    json_t *root;
    sim_request rq;
    sim_error e;
    if (sim_request_parse(&s->cfg, kind, body, len, &root, &rq, &e)) {
        respond_sim_error(r, &e);
        return;
    }
    serve_infer(s, r, &rq);
    json_decref(root);
}

/* ---- the other endpoints ---- */

static void handle_models(sim_server *s, http_req *r)
{
    respond_owned(r, 200, sim_models_json(&s->cfg, s->started_s));
}

static void handle_health(sim_server *s, http_req *r)
{
    respond_owned(r, 200, json_pack("{s:s}", "status", "ok"));
}

static void handle_slots(sim_server *s, http_req *r)
{
    pthread_mutex_lock(&s->mu);
    json_t *j = sim_slots_json(&s->cfg, &s->slots, mono_us());
    int none_free = s->slots.busy >= s->slots.n;
    pthread_mutex_unlock(&s->mu);
    /* llama-server's ?fail_on_no_slot=1 turns "all busy" into a 503. */
    const char *fail = http_req_query(r, "fail_on_no_slot");
    if (none_free && fail && strcmp(fail, "0") && strcmp(fail, "false")) {
        json_decref(j);
        respond_error(r, 503, "unavailable_error", "no_slot_available", "no slot available");
        return;
    }
    respond_owned(r, 200, j);
}

static void handle_metrics(sim_server *s, http_req *r)
{
    buf page = {0};
    pthread_mutex_lock(&s->mu);
    int rc = sim_metrics_text(&page, &s->slots, &s->usage);
    pthread_mutex_unlock(&s->mu);
    if (rc) respond_error(r, 500, "server_error", "internal_error", "out of memory");
    else http_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", page.data, page.len);
    buf_free(&page);
}

static void handle_chat(sim_server *s, http_req *r) { handle_infer(s, r, SIM_CHAT); }
static void handle_completions(sim_server *s, http_req *r) { handle_infer(s, r, SIM_COMPLETION); }
static void handle_embeddings(sim_server *s, http_req *r) { handle_infer(s, r, SIM_EMBEDDING); }

static const struct route {
    const char *path, *method;
    void (*fn)(sim_server *s, http_req *r);
} routes[] = {
    {"/v1/chat/completions", "POST", handle_chat},
    {"/v1/completions", "POST", handle_completions},
    {"/v1/embeddings", "POST", handle_embeddings},
    {"/v1/models", "GET", handle_models},
    {"/health", "GET", handle_health},
    {"/slots", "GET", handle_slots},
    {"/metrics", "GET", handle_metrics},
};

/* llama-server's answer to every request while it loads the model. */
static void respond_loading(http_req *r)
{
    http_set_header(r, "X-Gpupool-Simulated", "true");
    respond_owned(r, 503, json_pack("{s:{s:i, s:s, s:s}}", "error", "code", 503, "message", "Loading model", "type",
                                    "unavailable_error"));
}

/* On the event loop: the endpoints that never wait, and, for an unpaced
 * engine without faults, whole answers when a slot is free right now. */
static http_fast_rc handle_fast(http_req *r, void *app)
{
    sim_server *s = app;
    if (atomic_load(&s->loading)) {
        respond_loading(r);
        return HTTP_HANDLED;
    }
    const char *path = http_req_path(r), *method = http_req_method(r);
    int infer = !strcmp(method, "POST") && (!strcmp(path, "/v1/chat/completions") ||
                                            !strcmp(path, "/v1/completions") || !strcmp(path, "/v1/embeddings"));
    if (!infer) return HTTP_PASS;
    if (!s->fast || s->cfg.error_rate > 0 || s->cfg.hang_rate > 0 || s->cfg.drop_rate > 0) return HTTP_PASS;
    /* The counter only grows, so once past --fail-first it stays past. */
    if (sim_fails_first(&s->cfg, atomic_load(&s->text_seq))) return HTTP_PASS;
    sim_kind kind = !strcmp(path, "/v1/chat/completions") ? SIM_CHAT
                    : !strcmp(path, "/v1/completions")    ? SIM_COMPLETION
                                                          : SIM_EMBEDDING;
    http_set_header(r, "X-Gpupool-Simulated", "true");
    size_t len;
    const char *body = http_req_body(r, &len);
    json_t *root;
    sim_request rq;
    sim_error e;
    if (sim_request_parse(&s->cfg, kind, body, len, &root, &rq, &e)) {
        respond_sim_error(r, &e);
        return HTTP_HANDLED;
    }
    http_fast_rc rc = HTTP_PASS;
    if (!rq.stream || kind == SIM_EMBEDDING) {
        pthread_mutex_lock(&s->mu);
        int n = kind == SIM_EMBEDDING ? 0 : rq.max_tokens;
        int slot = atomic_load(&s->stopping) ? -1 : sim_slots_try_take(&s->slots, NULL, rq.model, n, 0, mono_us());
        pthread_mutex_unlock(&s->mu);
        if (slot >= 0) {
            answer_now(s, r, &rq, slot, atomic_fetch_add(&s->seq, 1));
            rc = HTTP_HANDLED;
        }
    }
    json_decref(root);
    return rc;
}

static void handle(http_req *r, void *app)
{
    sim_server *s = app;
    if (atomic_load(&s->loading)) {
        respond_loading(r);
        return;
    }
    const char *path = http_req_path(r), *method = http_req_method(r);
    http_set_header(r, "X-Gpupool-Simulated", "true");
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(routes[i].path, path)) continue;
        /* HEAD is a GET without the body; libmicrohttpd drops the body. */
        if (!strcmp(routes[i].method, method) ||
            (!strcmp(method, "HEAD") && !strcmp(routes[i].method, "GET"))) {
            routes[i].fn(s, r);
        } else {
            char msg[160];
            snprintf(msg, sizeof msg, "%s %s is not allowed; use %s", method, path, routes[i].method);
            http_set_header(r, "Allow", routes[i].method);
            respond_error(r, 405, "invalid_request_error", "method_not_allowed", msg);
        }
        return;
    }
    char msg[300];
    snprintf(msg, sizeof msg, "no such endpoint: %s %.200s", method, path);
    respond_error(r, 404, "invalid_request_error", "not_found", msg);
}

/* ---- life cycle ---- */

sim_server *sim_server_start(const sim_config *c, const char *listen, char *err, size_t errlen)
{
    sim_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->cfg = *c;
    s->fast = c->ttft_ms == 0 && c->tps <= 0;
    s->started_s = (int64_t)time(NULL);
    char hex[17];
    rand_hex(hex, 8);
    s->id_nonce = strtoull(hex, NULL, 16);
    atomic_init(&s->seq, 0);
    atomic_init(&s->text_seq, 0);
    atomic_init(&s->stopping, 0);
    atomic_init(&s->streams, 0);
    atomic_init(&s->loading, c->loading);
    if (sim_slots_init(&s->slots, c->slots)) {
        snprintf(err, errlen, "out of memory");
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->slot_cv, NULL);
    pthread_mutex_init(&s->stop_mu, NULL);
    cond_init_monotonic(&s->stop_cv);
    http_server_opts o = {.listen = listen, .fast = handle_fast, .handler = handle, .app = s};
    s->http = http_server_start(&o, err, errlen);
    if (!s->http) {
        sim_server_stop(s);
        return NULL;
    }
    return s;
}

int sim_server_port(const sim_server *s) { return http_server_port(s->http); }

void sim_server_loaded(sim_server *s) { atomic_store(&s->loading, 0); }

void sim_server_stop(sim_server *s)
{
    if (!s) return;
    /* Connection threads are joined by http_server_stop, so every request
     * blocked in here must be woken first. */
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->stopping, 1);
    pthread_cond_broadcast(&s->slot_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&s->stop_mu);
    pthread_cond_broadcast(&s->stop_cv);
    pthread_mutex_unlock(&s->stop_mu);
    http_server_stop(s->http);
    /* Stream producers may still be finishing; they use the slots. */
    int64_t deadline = mono_ms() + 5000;
    while (atomic_load(&s->streams) > 0 && mono_ms() < deadline) sleep_ms(2);
    pthread_cond_destroy(&s->stop_cv);
    pthread_mutex_destroy(&s->stop_mu);
    pthread_cond_destroy(&s->slot_cv);
    pthread_mutex_destroy(&s->mu);
    sim_slots_free(&s->slots);
    free(s);
}
