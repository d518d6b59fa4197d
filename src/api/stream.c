/* api/stream: see stream.h. */
#include "api/stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cache.h"
#include "api/errors.h"
#include "api/sse_text.h"
#include "http/relay.h"
#include "policy/cache_replay.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"

#define MAX_CONTINUATIONS 2
#define MAX_TRIED 8

/* Lives from the start of the call until the relay's last callback. */
typedef struct session {
    coord *c;
    node_lease lease;          /* the node serving now */
    int held;                  /* lease still held */
    api_kind kind;
    char model[256];
    reg_request rq;
    char *orig;                /* the client's body */
    size_t orig_len;
    buf text;                  /* delivered so far */
    int events;
    char tried[MAX_TRIED][40];
    int ntried;
    int continuations, may_continue;
    char url[512];
    char *next_body;
    api_cache_req cache;       /* a lookup that missed: its answer may be stored */
    char owner[40];            /* charged for what a cloud backend answers */
    double prompt_tokens;      /* the estimate the charge uses */
    int urgent;                /* for the budget's check when a continuation would go out */
    cache_stream *collect;     /* the answer so far, to store; NULL when not storing */
    api_session turn;          /* a conversation session's turn (inactive when none) */
    int turn_committed;        /* stored on seeing the answer's end, before the client did */
    char request_id[72];       /* for the audit record's text */
    int64_t started_us;
} session;

static void session_free(session *s)
{
    buf_free(&s->text);
    cache_stream_free(s->collect);
    api_session_free(&s->turn);
    free(s->orig);
    free(s->next_body);
    free(s);
}

static void note_tried(session *s, const char *id)
{
    if (s->ntried < MAX_TRIED) snprintf(s->tried[s->ntried++], sizeof s->tried[0], "%s", id);
}

static void tap(void *ctx, const char *events, size_t len)
{
    session *s = ctx;
    s->events += sse_collect_text(events, len, &s->text);
    /* The end of the answer: store the turn now, before the client reads
     * it and sends the next one. */
    if (s->turn.active && !s->turn_committed && memmem(events, len, "data: [DONE]", 12)) {
        api_session_commit(s->c, &s->turn, NULL, s->text.data ? s->text.data : "", s->text.len);
        s->turn_committed = 1;
    }
    /* Stop collecting as soon as the answer can no longer be stored. */
    if (s->collect && cache_stream_feed(s->collect, events, len)) {
        cache_stream_free(s->collect);
        s->collect = NULL;
    }
}

/* The request that continues what was delivered: the same one, with the
 * text so far as the start of the answer.  NULL when it cannot continue. */
static char *continuation_body(session *s)
{
    json_t *b = json_loadb(s->orig, s->orig_len, 0, NULL);
    if (!json_is_object(b)) { json_decref(b); return NULL; }
    int ok = 1;
    if (s->kind == KIND_CHAT) {
        json_t *msgs = json_object_get(b, "messages");
        ok = json_is_array(msgs);
        if (ok) json_array_append_new(msgs, json_pack("{s:s, s:s%}", "role", "assistant", "content", s->text.data ? s->text.data : "", s->text.len));
        /* vLLM needs these to continue rather than answer anew; llama-server
         * and Ollama continue a final assistant message on their own. */
        json_object_set_new(b, "continue_final_message", json_true());
        json_object_set_new(b, "add_generation_prompt", json_false());
    } else {
        json_t *prompt = json_object_get(b, "prompt");
        ok = json_is_string(prompt);
        if (ok) {
            buf p = {0};
            buf_append(&p, json_string_value(prompt), json_string_length(prompt));
            buf_append(&p, s->text.data ? s->text.data : "", s->text.len);
            json_object_set_new(b, "prompt", json_stringn(p.data ? p.data : "", p.len));
            buf_free(&p);
        }
    }
    const char *names[] = {"max_completion_tokens", "max_tokens"};
    for (int i = 0; ok && i < 2; i++) {
        json_t *m = json_object_get(b, names[i]);
        if (!json_is_integer(m)) continue;
        json_int_t left = json_integer_value(m) - s->events;
        if (left <= 0) ok = 0; /* it broke at the very end: nothing left to say */
        else json_object_set_new(b, names[i], json_integer(left));
    }
    char *text = ok ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    return text;
}

/* The node broke off mid-answer: lease another and say how to go on. */
static int resume(void *ctx, http_call_opts *next, const char *why)
{
    session *s = ctx;
    coord *c = s->c;
    int64_t now = mono_ms();
    log_warn("stream for %s broke on %s after %d event(s): %s", s->model, s->lease.node_id, s->events, why);
    registry_mark_unreachable(c->reg, s->lease.node_id, why && *why ? why : "stream broke off", now);
    registry_observe(c->reg, &s->lease, 0, NULL, now);
    registry_release(c->reg, &s->lease, now, 0);
    s->held = 0;
    note_tried(s, s->lease.node_id);
    if (!s->may_continue || s->continuations >= MAX_CONTINUATIONS || (s->kind != KIND_CHAT && s->kind != KIND_COMPLETION))
        return 0;
    char *body = continuation_body(s);
    if (!body) return 0;
    const char *ex[MAX_TRIED];
    for (int i = 0; i < s->ntried; i++) ex[i] = s->tried[i];
    /* A continuation is a hop too: the cloud only while the budget allows. */
    reg_request rq = s->rq;
    rq.trusted_only = rq.trusted_only || !api_track_cloud_allowed(c, s->owner, s->urgent);
    if (registry_acquire(c->reg, &rq, ex, s->ntried, &s->lease) != PLACE_OK) {
        log_warn("stream for %s: no other node can continue it", s->model);
        free(body);
        return 0;
    }
    s->held = 1;
    if (s->lease.external) api_track_charge_request(c, s->owner);
    s->continuations++;
    free(s->next_body);
    s->next_body = body;
    snprintf(s->url, sizeof s->url, "%s%s", s->lease.address, api_kind_path(s->kind));
    *next = (http_call_opts){.method = "POST", .url = s->url, .body = body, .body_len = strlen(body),
                             .bearer = s->lease.token, .idle_timeout_ms = c->cfg.upstream_timeout_ms};
    log_info("stream for %s continues on %s after %zu byte(s) of text", s->model, s->lease.node_id, s->text.len);
    return 1;
}

static void finished(void *ctx, const relay_outcome *o)
{
    session *s = ctx;
    if (o->upstream_failed) log_warn("stream from %s ended early: %s", s->lease.node_id, o->error);
    if (s->held) {
        int ok = registry_status_served(o->status) && !o->upstream_failed;
        if (!o->client_gone) {
            /* A continued stream's timings mix two nodes: only its outcome counts. */
            call_sample smp = {.total_ms = o->total_us / 1000.0, .first_byte_ms = o->first_byte_us / 1000.0};
            registry_observe(s->c->reg, &s->lease, ok, s->continuations ? NULL : &smp, mono_ms());
        }
        registry_release(s->c->reg, &s->lease, mono_ms(), ok);
        if (s->lease.external && o->status == 200)
            api_track_charge_tokens(s->c, s->owner, s->lease.node_id, (int64_t)(s->prompt_tokens + 0.5), s->events);
    }
    /* A continued answer is stitched from two nodes' streams: it is not
     * stored, since its chunks need not make one well-formed answer. */
    if (s->collect && o->status == 200 && !o->upstream_failed && !o->client_gone && !s->continuations) {
        json_t *completion = cache_stream_finish(s->collect);
        api_cache_store_json(s->c, &s->cache, completion);
        json_decref(completion);
    }
    if (s->turn.active && !s->turn_committed && o->status == 200 && !o->upstream_failed && !o->client_gone)
        api_session_commit(s->c, &s->turn, NULL, s->text.data ? s->text.data : "", s->text.len);
    if (s->events > 0 || s->text.len)
        audit_stream_done(s->c->audit, s->request_id, s->text.data, s->text.len, mono_us() - s->started_us);
    session_free(s);
}

int api_forward_stream(coord *c, http_req *req, const http_call_opts *o, const node_lease *lease,
                       const reg_request *rq, api_kind kind, const char *private_rule, const api_track_hop *hop,
                       const api_cache_req *cr, const api_session *sess, const char *const *tried, int ntried,
                       char *why, size_t whylen)
{
    session *s = calloc(1, sizeof *s);
    if (!s || !(s->orig = malloc(o->body_len + 1))) {
        free(s);
        registry_release(c->reg, lease, mono_ms(), 0);
        snprintf(why, whylen, "out of memory");
        return 0;
    }
    memcpy(s->orig, o->body, o->body_len);
    s->orig[o->body_len] = 0;
    s->orig_len = o->body_len;
    snprintf(s->request_id, sizeof s->request_id, "%s", audit_request_id(req));
    s->started_us = mono_us();
    s->c = c;
    s->lease = *lease;
    s->held = 1;
    s->kind = kind;
    snprintf(s->model, sizeof s->model, "%s", rq->model);
    s->rq = *rq;
    s->rq.model = s->model;
    snprintf(s->owner, sizeof s->owner, "%s", hop->owner);
    s->prompt_tokens = hop->prompt_tokens;
    s->urgent = hop->urgent;
    const char *opt = http_req_header(req, "X-Gpupool-Continue");
    s->may_continue = c->cfg.stream_continue && !(opt && !strcmp(opt, "off"));
    for (int i = 0; i < ntried; i++) note_tried(s, tried[i]);
    if (cr && cr->store && c->cache && (s->collect = cache_stream_new())) s->cache = *cr;
    if (sess && sess->active) api_session_copy(&s->turn, sess);
    node_lease first = *lease;
    relay_resume rs = {tap, resume, s};
    relay *r = relay_start_resumable(o, &rs, finished, s);
    if (!r) {
        registry_release(c->reg, lease, mono_ms(), 0);
        session_free(s);
        snprintf(why, whylen, "cannot start a thread");
        return 0;
    }
    /* The first event, not just the head: a node that dies before its first
     * token is then replaced without the client noticing. */
    long status = relay_wait(r, 1, req);
    if (status == 0 && http_req_client_gone(req)) {
        relay_abandon(r);
        api_error(req, 499, "invalid_request_error", "client_closed", NULL, "the client left");
        return 1;
    }
    audit_route_attempt(req, first.node_id, first.external, status,
                        status == 0 ? "unreachable" : api_node_refused(status, NULL) ? "refused" : "ok");
    if (status == 200) {
        api_served_by(req, &first, private_rule, hop->reason);
        relay_to_client(r, req, 200);
        return 1;
    }
    if (status == 0) {
        snprintf(why, whylen, "%s: %s", first.node_id, relay_error(r));
        registry_mark_unreachable(c->reg, first.node_id, relay_error(r), mono_ms());
        relay_abandon(r);
        return 0;
    }
    size_t blen;
    char ctype[128];
    snprintf(ctype, sizeof ctype, "%s", relay_content_type(r));
    char *b = relay_collect(r, 1 << 20, &blen);
    int refused = api_node_refused(status, b);
    if (!refused) {
        api_served_by(req, &first, private_rule, hop->reason);
        http_respond(req, (int)status, ctype[0] ? ctype : "application/json", b, blen);
    } else {
        char said[200];
        api_error_text(b, blen, "refused", said, sizeof said);
        snprintf(why, whylen, "%s: %s (%ld)", first.node_id, said, status);
        registry_mark_unreachable(c->reg, first.node_id, status == 503 ? "self-check failed" : "refused its node token",
                                  mono_ms());
    }
    free(b);
    return !refused;
}
