/* http/relay: see relay.h. */
#include "http/relay.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/buf.h"
#include "util/clock.h"
#include "util/str.h"

#define RELAY_HIGH_WATER (256 * 1024)
#define RELAY_CHECK_MS 100

static atomic_int aborting;

void relay_abort_all(void)
{
    atomic_store(&aborting, 1);
    http_client_abort_all();
}

struct relay {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    /* the call, with owned copies of its strings */
    http_call_opts opts;
    char *url, *body, *bearer, *method, *ctype_in;
    char **headers;
    /* progress */
    buf data;
    int head, ended, reader_gone, error_sent;
    long status;
    char ctype[128];
    buf passthrough; /* the upstream head's header lines */
    http_waker *waker; /* wakes the client's stream when bytes arrive */
    relay_outcome out;
    int64_t t0;
    relay_finish_fn fin;
    void *fin_ctx;
    /* SSE framing and continuation */
    int framing;        /* the answer is an event stream: relay whole events only */
    buf pending;        /* the start of an event not yet complete */
    relay_resume rs;
    int continuing;     /* a continuation call runs: its head is not the client's */
    int cont_refused;   /* the continuation answered something other than 200 */
    size_t relayed;     /* bytes of whole events handed towards the client */
    int pass_breaks;    /* cut the client off on a break rather than send an error event */
};

static void relay_unref(relay *r)
{
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    buf_free(&r->data);
    buf_free(&r->passthrough);
    buf_free(&r->pending);
    free(r->url); free(r->body); free(r->bearer); free(r->method); free(r->ctype_in);
    for (char **h = r->headers; h && *h; h++) free(*h);
    free(r->headers);
    free(r);
}

/* Copies the X-Gpupool-* lines of an upstream head (e.g. X-Gpupool-Simulated)
 * onto the client's answer, so the client sees what the node said. */
static void pass_gpupool_headers(http_req *client, const char *headers)
{
    for (const char *line = headers; line && *line;) {
        const char *end = strstr(line, "\r\n");
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *colon = memchr(line, ':', len);
        if (len > 10 && colon && !strncasecmp(line, "X-Gpupool-", 10)) {
            char name[64], value[256];
            str_copy_n(name, sizeof name, line, (size_t)(colon - line));
            const char *v = colon + 1;
            while (v < line + len && *v == ' ') v++;
            str_copy_n(value, sizeof value, v, (size_t)(line + len - v));
            http_set_header(client, name, value);
        }
        line = end ? end + 2 : line + len;
    }
}

static int up_status(void *ctx, long status, const char *ctype, const char *headers)
{
    relay *r = ctx;
    pthread_mutex_lock(&r->mu);
    if (r->continuing) {
        /* The client has its head already; only a streamed 200 can go on. */
        r->cont_refused = status != 200 || !strstr(ctype ? ctype : "", "text/event-stream");
        pthread_mutex_unlock(&r->mu);
        return r->cont_refused;
    }
    r->framing = strstr(ctype ? ctype : "", "text/event-stream") != NULL;
    buf_puts(&r->passthrough, headers);
    r->head = 1;
    r->status = status;
    str_copy(r->ctype, sizeof r->ctype, ctype);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* Where the last whole SSE event in p ends (after its blank line), or 0. */
static size_t events_end(const char *p, size_t n)
{
    for (size_t i = n; i >= 2; i--) {
        if (p[i - 1] == '\n' && p[i - 2] == '\n') return i;
        if (i >= 4 && p[i - 1] == '\n' && p[i - 2] == '\r' && p[i - 3] == '\n' && p[i - 4] == '\r') return i;
    }
    return 0;
}

static int up_data(void *ctx, const char *p, size_t n)
{
    relay *r = ctx;
    pthread_mutex_lock(&r->mu);
    if (!r->out.bytes) r->out.first_byte_us = mono_us() - r->t0;
    while (r->data.len > RELAY_HIGH_WATER && !r->reader_gone && !atomic_load(&aborting)) {
        struct timespec ts = mono_deadline(RELAY_CHECK_MS);
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    int gone = r->reader_gone || atomic_load(&aborting);
    char *whole = NULL;
    size_t wlen = 0;
    if (!gone && r->framing) {
        buf_append(&r->pending, p, n);
        wlen = events_end(r->pending.data, r->pending.len);
        /* The tap sees events before the client can read them, so what it
         * records of an answer (a conversation's turn) is there before the
         * client, having read the end, asks its next question. */
        if (wlen && r->rs.tap && (whole = malloc(wlen))) {
            memcpy(whole, r->pending.data, wlen);
        } else if (wlen) {
            buf_append(&r->data, r->pending.data, wlen);
            r->relayed += wlen;
        }
        if (wlen) buf_consume(&r->pending, wlen);
        r->out.bytes += n;
        pthread_cond_broadcast(&r->cv);
    } else if (!gone) {
        buf_append(&r->data, p, n);
        r->out.bytes += n;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    if (whole) {
        r->rs.tap(r->rs.ctx, whole, wlen);
        pthread_mutex_lock(&r->mu);
        buf_append(&r->data, whole, wlen);
        r->relayed += wlen;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        free(whole);
    }
    pthread_mutex_lock(&r->mu);
    http_waker *w = r->waker;
    pthread_mutex_unlock(&r->mu);
    http_stream_wake(w);
    return gone;
}

static int up_cancelled(void *ctx)
{
    relay *r = ctx;
    pthread_mutex_lock(&r->mu);
    int gone = r->reader_gone || atomic_load(&aborting);
    pthread_mutex_unlock(&r->mu);
    return gone;
}

/* After a break: whether to ask for a continuation.  Caller holds mu. */
static int may_resume(relay *r, int rc)
{
    return (rc != 0 || r->cont_refused) && r->rs.resume && r->framing && r->status == 200 && r->relayed > 0 &&
           !r->reader_gone && !atomic_load(&aborting);
}

static void *upstream_thread(void *arg)
{
    relay *r = arg;
    http_stream_cbs cb = {up_status, up_data, up_cancelled, r};
    http_result res;
    int rc = http_call_stream(&r->opts, &cb, &res);
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int again = may_resume(r, rc);
        pthread_mutex_unlock(&r->mu);
        http_call_opts next;
        if (!again || !r->rs.resume(r->rs.ctx, &next, res.error)) break;
        pthread_mutex_lock(&r->mu);
        /* The broken event is dropped; an SSE comment (which clients skip)
         * says where the answer goes on. */
        buf_reset(&r->pending);
        buf_printf(&r->data, ": gpupool: the node failed (%.200s); the answer continues on another node\n\n",
                   res.error[0] ? res.error : "connection lost");
        r->continuing = 1;
        r->cont_refused = 0;
        http_waker *w = r->waker;
        pthread_mutex_unlock(&r->mu);
        http_stream_wake(w);
        http_result_free(&res);
        next.cancelled = NULL;
        next.cancel_ctx = NULL;
        rc = http_call_stream(&next, &cb, &res);
    }
    pthread_mutex_lock(&r->mu);
    r->ended = 1;
    if (!r->continuing) r->out.status = res.status;
    r->out.total_us = mono_us() - r->t0;
    if (rc != 0 || r->cont_refused) {
        if (r->reader_gone) r->out.client_gone = 1;
        else r->out.upstream_failed = 1;
        snprintf(r->out.error, sizeof r->out.error, "%s",
                 r->cont_refused ? "the node continuing the stream refused it" : res.error);
    } else if (r->reader_gone) {
        r->out.client_gone = 1;
    }
    if (rc == 0 && !r->cont_refused && r->pending.len) {
        buf_append(&r->data, r->pending.data, r->pending.len); /* a last event without its blank line */
        buf_reset(&r->pending);
    }
    if (!r->head) r->status = res.status;
    pthread_cond_broadcast(&r->cv);
    relay_outcome o = r->out;
    http_waker *w = r->waker;
    r->waker = NULL;
    pthread_mutex_unlock(&r->mu);
    http_stream_wake(w);
    http_waker_release(w);
    http_result_free(&res);
    if (r->fin) r->fin(r->fin_ctx, &o);
    relay_unref(r);
    return NULL;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

relay *relay_start(const http_call_opts *o, relay_finish_fn fin, void *fin_ctx)
{
    return relay_start_resumable(o, NULL, fin, fin_ctx);
}

relay *relay_start_resumable(const http_call_opts *o, const relay_resume *rs, relay_finish_fn fin, void *fin_ctx)
{
    relay *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    if (rs) r->rs = *rs;
    pthread_mutex_init(&r->mu, NULL);
    cond_init_monotonic(&r->cv);
    r->refs = 2;
    r->opts = *o;
    r->url = dup_or_null(o->url);
    r->bearer = dup_or_null(o->bearer);
    r->method = dup_or_null(o->method);
    r->ctype_in = dup_or_null(o->content_type);
    if (o->body) {
        r->body = malloc(o->body_len + 1);
        memcpy(r->body, o->body, o->body_len);
        r->body[o->body_len] = 0;
    }
    size_t nh = 0;
    while (o->headers && o->headers[nh]) nh++;
    r->headers = calloc(nh + 1, sizeof *r->headers);
    for (size_t i = 0; i < nh; i++) r->headers[i] = strdup(o->headers[i]);
    r->opts.url = r->url;
    r->opts.body = r->body;
    r->opts.bearer = r->bearer;
    r->opts.method = r->method;
    r->opts.content_type = r->ctype_in;
    r->opts.headers = (const char *const *)r->headers;
    r->fin = fin;
    r->fin_ctx = fin_ctx;
    r->t0 = mono_us();
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, upstream_thread, r)) {
        pthread_attr_destroy(&a);
        r->refs = 1;
        relay_unref(r);
        return NULL;
    }
    pthread_attr_destroy(&a);
    return r;
}

long relay_wait(relay *r, int want_body, http_req *client)
{
    pthread_mutex_lock(&r->mu);
    while (!r->ended && !(r->head && (!want_body || r->data.len))) {
        struct timespec ts = mono_deadline(RELAY_CHECK_MS);
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (r->ended || (r->head && (!want_body || r->data.len))) break;
        if (atomic_load(&aborting) || (client && http_req_client_gone(client))) {
            /* Nobody is waiting for this answer any more: stop the call. */
            r->reader_gone = 1;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
    }
    long st = r->head ? r->status : 0;
    /* A call that broke before any body byte counts as no answer. */
    if (want_body && r->ended && r->out.upstream_failed && !r->data.len) st = 0;
    pthread_mutex_unlock(&r->mu);
    return st;
}

const char *relay_error(relay *r) { return r->out.error; }
const char *relay_content_type(relay *r) { return r->ctype; }

static void mark_gone(relay *r)
{
    pthread_mutex_lock(&r->mu);
    r->reader_gone = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Runs on the event loop: never waits. */
static ssize_t client_read(void *ctx, char *out, size_t max)
{
    relay *r = ctx;
    pthread_mutex_lock(&r->mu);
    ssize_t n = HTTP_STREAM_WAIT;
    if (r->data.len) {
        n = (ssize_t)(r->data.len < max ? r->data.len : max);
        memcpy(out, r->data.data, (size_t)n);
        buf_consume(&r->data, (size_t)n);
        pthread_cond_broadcast(&r->cv);
    } else if (atomic_load(&aborting)) {
        n = HTTP_STREAM_ERROR;
    } else if (r->ended && r->out.upstream_failed && strstr(r->ctype, "text/event-stream") && !r->pass_breaks) {
        if (r->error_sent) {
            n = HTTP_STREAM_END;
        } else {
            /* Tell the client the stream broke, in a shape OpenAI clients parse. */
            r->error_sent = 1;
            char ev[512];
            snprintf(ev, sizeof ev,
                     "data: {\"error\":{\"message\":\"the node serving this stream failed mid-response: %s\","
                     "\"type\":\"server_error\",\"code\":\"upstream_interrupted\"}}\n\n",
                     r->out.error[0] ? r->out.error : "connection lost");
            size_t l = strlen(ev);
            if (l > max) l = max;
            memcpy(out, ev, l);
            n = (ssize_t)l;
        }
    } else if (r->ended) {
        n = r->out.upstream_failed ? HTTP_STREAM_ERROR : HTTP_STREAM_END;
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

static void client_done(void *ctx)
{
    relay *r = ctx;
    mark_gone(r);
    relay_unref(r);
}

void relay_pass_breaks(relay *r)
{
    pthread_mutex_lock(&r->mu);
    r->pass_breaks = 1;
    pthread_mutex_unlock(&r->mu);
}

void relay_to_client(relay *r, http_req *client, int status)
{
    const char *ct = r->ctype[0] ? r->ctype : "application/octet-stream";
    pass_gpupool_headers(client, r->passthrough.data);
    http_waker *w = http_respond_stream(client, status, ct, client_read, client_done, r);
    if (!w) return; /* client_done has run and given up our reference */
    pthread_mutex_lock(&r->mu);
    if (r->ended) {
        /* Everything is already here; the reader will not need waking. */
        pthread_mutex_unlock(&r->mu);
        http_waker_release(w);
        return;
    }
    r->waker = w;
    pthread_mutex_unlock(&r->mu);
}

char *relay_collect(relay *r, size_t max, size_t *len)
{
    pthread_mutex_lock(&r->mu);
    while (!r->ended && r->data.len < max && !atomic_load(&aborting)) {
        struct timespec ts = mono_deadline(RELAY_CHECK_MS);
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    size_t n = r->data.len < max ? r->data.len : max;
    char *p = malloc(n + 1);
    if (p) { memcpy(p, r->data.data ? r->data.data : "", n); p[n] = 0; }
    *len = p ? n : 0;
    pthread_mutex_unlock(&r->mu);
    mark_gone(r);
    relay_unref(r);
    return p;
}

void relay_abandon(relay *r)
{
    mark_gone(r);
    relay_unref(r);
}

typedef struct client_watch {
    http_req *client;
    int64_t next_check;
} client_watch;

/* Polled by curl many times a second; looks at the socket at most every
 * RELAY_CHECK_MS. */
static int client_left(void *ctx)
{
    client_watch *w = ctx;
    if (atomic_load(&aborting)) return 1;
    int64_t now = mono_ms();
    if (now < w->next_check) return 0;
    w->next_check = now + RELAY_CHECK_MS;
    return http_req_client_gone(w->client);
}

int relay_call_buffered(const http_call_opts *o, http_req *client, http_result *res)
{
    client_watch w = {client, mono_ms() + RELAY_CHECK_MS};
    http_call_opts with_watch = *o;
    with_watch.cancelled = client_left;
    with_watch.cancel_ctx = &w;
    return http_call(&with_watch, res);
}

typedef struct async_watch {
    client_watch watch;
    http_async_done done;
    void *ctx;
} async_watch;

static void async_finished(void *ctx, http_result *res)
{
    async_watch *a = ctx;
    a->done(a->ctx, res);
    free(a);
}

int relay_call_async(const http_call_opts *o, http_req *client, http_async_done done, void *ctx)
{
    async_watch *a = malloc(sizeof *a);
    if (!a) return -1;
    a->watch = (client_watch){client, mono_ms() + RELAY_CHECK_MS};
    a->done = done;
    a->ctx = ctx;
    http_call_opts with_watch = *o;
    with_watch.cancelled = client_left;
    with_watch.cancel_ctx = &a->watch;
    if (http_call_async(&with_watch, async_finished, a)) { free(a); return -1; }
    return 0;
}

void relay_respond_result(http_req *client, const http_result *res)
{
    pass_gpupool_headers(client, res->headers);
    http_respond(client, (int)res->status, res->content_type[0] ? res->content_type : "application/json",
                 res->body ? res->body : "", res->body_len);
}
