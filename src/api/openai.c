/* api/openai: the OpenAI-compatible calls (chat, completions, embeddings,
 * models).  It validates, waits for a node slot, and forwards the request to
 * the chosen worker: streamed answers relay event by event, and a node that
 * fails before answering is replaced by another without the client noticing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/coord.h"
#include "api/errors.h"
#include "api/validate.h"
#include "http/client.h"
#include "http/relay.h"
#include "util/clock.h"
#include "util/log.h"

#define MAX_TRIES 8

/* Nodes a request already failed on, carried from the fast path to the
 * blocking one so the retry goes elsewhere. */
typedef struct tried_nodes {
    char ids[MAX_TRIES][40];
    int n;
} tried_nodes;

typedef struct lease_hold {
    registry *reg;
    node_lease lease;
} lease_hold;

/* What the call taught about the node, for its profile (callers skip calls
 * the client left, which teach nothing). */
static void observe(registry *reg, const node_lease *l, long status, int ok, const char *body, size_t len,
                    int64_t started_us, double first_byte_ms)
{
    call_sample s = {.total_ms = (double)(mono_us() - started_us) / 1000.0, .first_byte_ms = first_byte_ms};
    if (ok && status == 200) call_sample_parse_answer(&s, body, len);
    registry_observe(reg, l, ok, &s, mono_ms());
}

static void release_on_finish(void *ctx, const relay_outcome *o)
{
    lease_hold *h = ctx;
    if (o->upstream_failed) log_warn("stream from %s ended early: %s", h->lease.node_id, o->error);
    int ok = registry_status_served(o->status) && !o->upstream_failed;
    if (!o->client_gone) {
        call_sample s = {.total_ms = o->total_us / 1000.0, .first_byte_ms = o->first_byte_us / 1000.0};
        registry_observe(h->reg, &h->lease, ok, &s, mono_ms());
    }
    registry_release(h->reg, &h->lease, mono_ms(), ok);
    free(h);
}

/* Whether the node, not the request, is the problem: its self-check failed
 * (503 not_ready) or it refused the node token (401/403).  Another node may
 * serve the same request. */
static int node_refused(long status, const char *body)
{
    if (status == 401 || status == 403) return 1;
    return status == 503 && body && strstr(body, "\"not_ready\"") != NULL;
}

static void retry_after(coord *c, http_req *req)
{
    double rate = registry_drain_rate(c->reg, mono_ms());
    int waiting = registry_waiters(c->reg);
    double secs = rate > 0 ? ceil((waiting + 1) / rate) : 5;
    if (secs < 1) secs = 1;
    if (secs > 120) secs = 120;
    char v[16];
    snprintf(v, sizeof v, "%d", (int)secs);
    http_set_header(req, "Retry-After", v);
}



/* What placement needs from the request: its size, its answer's length and
 * its priority (X-Gpupool-Priority, 0-9, default 5). */
static reg_request describe(const char *model, json_t *body, api_kind kind, http_req *req)
{
    size_t len;
    http_req_body(req, &len);
    const char *p = http_req_header(req, "X-Gpupool-Priority");
    int prio = p && p[0] >= '0' && p[0] <= '9' && !p[1] ? p[0] - '0' : 5;
    double max_tokens = kind == KIND_EMBEDDING ? 1 : api_requested_max_tokens(body);
    return (reg_request){.model = model, .prompt_tokens = api_estimate_prompt_tokens(body),
                         .max_tokens = max_tokens, .payload_bytes = (double)len, .priority = prio};
}

static void served_by(http_req *req, const node_lease *l)
{
    http_set_header(req, "X-Gpupool-Node", l->node_id);
    http_set_header(req, "X-Gpupool-Route", "local");
}

/* Each forward_* returns 1 when the client has its answer (or has left), 0
 * when the node failed before answering and another node may be tried. */
static int forward_buffered(coord *c, http_req *req, const http_call_opts *o, const node_lease *lease,
                            char *why, size_t whylen)
{
    http_result res;
    int64_t t0 = mono_us();
    relay_call_buffered(o, req, &res);
    int ok = registry_status_served(res.status) && !node_refused(res.status, res.body);
    if (!http_req_client_gone(req)) observe(c->reg, lease, res.status, ok, res.body, res.body_len, t0, 0);
    registry_release(c->reg, lease, mono_ms(), ok);
    int done = 1;
    if (res.status == 0 && http_req_client_gone(req)) {
        api_error(req, 499, "invalid_request_error", "client_closed", NULL, "the client left");
    } else if (res.status && !node_refused(res.status, res.body)) {
        served_by(req, lease);
        relay_respond_result(req, &res);
    } else {
        snprintf(why, whylen, "%s: %s", lease->node_id, res.status ? "refused the request" : res.error);
        registry_mark_unreachable(c->reg, lease->node_id, res.status ? "refused the request" : res.error, mono_ms());
        done = 0;
    }
    http_result_free(&res);
    return done;
}

static int forward_stream(coord *c, http_req *req, const http_call_opts *o, const node_lease *lease,
                          char *why, size_t whylen)
{
    lease_hold *h = malloc(sizeof *h);
    h->reg = c->reg;
    h->lease = *lease;
    relay *r = relay_start(o, release_on_finish, h);
    if (!r) {
        registry_release(c->reg, lease, mono_ms(), 0);
        free(h);
        snprintf(why, whylen, "cannot start a thread");
        return 0;
    }
    long status = relay_wait(r, 0, req);
    if (status == 0 && http_req_client_gone(req)) {
        relay_abandon(r);
        api_error(req, 499, "invalid_request_error", "client_closed", NULL, "the client left");
        return 1;
    }
    if (status == 200) {
        served_by(req, lease);
        relay_to_client(r, req, 200);
        return 1;
    }
    if (status == 0) {
        snprintf(why, whylen, "%s: %s", lease->node_id, relay_error(r));
        registry_mark_unreachable(c->reg, lease->node_id, relay_error(r), mono_ms());
        relay_abandon(r);
        return 0;
    }
    size_t blen;
    char ctype[128];
    snprintf(ctype, sizeof ctype, "%s", relay_content_type(r));
    char *b = relay_collect(r, 1 << 20, &blen);
    int done = !node_refused(status, b);
    if (done) {
        served_by(req, lease);
        http_respond(req, (int)status, ctype[0] ? ctype : "application/json", b, blen);
    } else {
        snprintf(why, whylen, "%s: refused (%ld)", lease->node_id, status);
        registry_mark_unreachable(c->reg, lease->node_id, status == 503 ? "self-check failed" : "refused its node token", mono_ms());
    }
    free(b);
    return done;
}

void api_openai_proxy(coord *c, http_req *req, int kind)
{
    json_t *body = api_read_json_object(req);
    if (!body) return;
    api_invalid why;
    if (api_validate_body((api_kind)kind, body, &why)) {
        api_bad_request(req, why.code, why.param[0] ? why.param : NULL, "%s", why.message);
        json_decref(body);
        return;
    }
    char model[256];
    snprintf(model, sizeof model, "%s", json_string_value(json_object_get(body, "model")));
    int stream = json_is_true(json_object_get(body, "stream"));
    reg_request rq = describe(model, body, (api_kind)kind, req);
    json_decref(body);

    if (!registry_model_known(c->reg, model)) {
        api_error(req, 404, "invalid_request_error", "model_not_found", "model",
                  "the model '%s' is not served by any node in the pool", model);
        return;
    }
    size_t len;
    const char *raw = http_req_body(req, &len);
    const char *tried[MAX_TRIES];
    char tried_ids[MAX_TRIES][40];
    int ntried = 0;
    tried_nodes *earlier = http_req_ctx(req);
    for (int i = 0; earlier && i < earlier->n; i++) {
        snprintf(tried_ids[ntried], sizeof tried_ids[ntried], "%s", earlier->ids[i]);
        tried[ntried] = tried_ids[ntried];
        ntried++;
    }
    char last_error[300] = "";
    int tries = c->cfg.max_attempts < MAX_TRIES ? c->cfg.max_attempts : MAX_TRIES;
    int64_t deadline = mono_ms() + c->cfg.queue_timeout_ms;

    for (int attempt = ntried; attempt < tries; attempt++) {
        node_lease lease;
        reg_wait w = registry_acquire_wait(c->reg, &rq, tried, ntried, deadline, c->cfg.queue_max, &lease);
        if (w == REG_NO_MODEL) {
            api_error(req, 404, "invalid_request_error", "model_not_found", "model",
                      "the model '%s' is not served by any node in the pool", model);
            return;
        }
        if (w == REG_QUEUE_FULL) {
            retry_after(c, req);
            api_error(req, 429, "rate_limit_error", "queue_full", NULL,
                      "all nodes serving '%s' are busy and the queue is full; retry later", model);
            return;
        }
        if (w == REG_NO_FIT) {
            api_server_error(req, 503, "insufficient_vram",
                             "the model '%s' fits the free VRAM of no node now (see /v1/nodes for each node's need)", model);
            return;
        }
        if (w == REG_TIMEOUT || w == REG_EXHAUSTED) break;

        char url[512];
        snprintf(url, sizeof url, "%s%s", lease.address, api_kind_path((api_kind)kind));
        http_call_opts o = {.method = "POST", .url = url, .body = raw, .body_len = len,
                            .bearer = lease.token, .timeout_ms = stream ? 0 : c->cfg.upstream_timeout_ms,
                            .idle_timeout_ms = stream ? c->cfg.upstream_timeout_ms : 0};
        int done = stream ? forward_stream(c, req, &o, &lease, last_error, sizeof last_error)
                          : forward_buffered(c, req, &o, &lease, last_error, sizeof last_error);
        if (done) return;
        log_warn("request for %s: node %s failed before answering (%s); trying another", model,
                 lease.node_id, last_error);
        snprintf(tried_ids[ntried], sizeof tried_ids[ntried], "%s", lease.node_id);
        tried[ntried] = tried_ids[ntried];
        ntried++;
    }
    if (ntried) {
        api_server_error(req, 502, "no_node_answered", "no node could serve '%s' (tried %d): %s", model, ntried,
                         last_error);
    } else {
        retry_after(c, req);
        api_server_error(req, 503, "no_capacity", "no node could take a request for '%s' within %lld ms", model,
                         (long long)c->cfg.queue_timeout_ms);
    }
}

void api_models(coord *c, http_req *req)
{
    json_t *j = registry_models_json(c->reg, mono_ms());
    http_respond_json(req, 200, j);
    json_decref(j);
}

/* ---- the fast path: on the event loop, no thread waits ---- */

typedef struct fast_call {
    coord *c;
    http_req *req;
    node_lease lease;
    int64_t started_us;
} fast_call;

static void fast_done(void *ctx, http_result *res)
{
    fast_call *f = ctx;
    http_req *req = f->req;
    int ok = registry_status_served(res->status) && !node_refused(res->status, res->body);
    if (!http_req_client_gone(req)) observe(f->c->reg, &f->lease, res->status, ok, res->body, res->body_len, f->started_us, 0);
    registry_release(f->c->reg, &f->lease, mono_ms(), ok);
    if (res->status && !node_refused(res->status, res->body)) {
        served_by(req, &f->lease);
        relay_respond_result(req, res);
        http_req_complete(req);
    } else if (res->status == 0 && http_req_client_gone(req)) {
        api_error(req, 499, "invalid_request_error", "client_closed", NULL, "the client left");
        http_req_complete(req);
    } else {
        /* The node failed before answering: the blocking path retries on
         * other nodes, waiting for a slot if it must. */
        const char *why = res->status ? "refused the request" : res->error;
        registry_mark_unreachable(f->c->reg, f->lease.node_id, why, mono_ms());
        log_warn("node %s failed before answering (%s); trying another", f->lease.node_id, why);
        tried_nodes *t = calloc(1, sizeof *t);
        if (t) {
            snprintf(t->ids[0], sizeof t->ids[0], "%s", f->lease.node_id);
            t->n = 1;
            http_req_set_ctx(req, t, free);
        }
        http_req_run_handler(req);
    }
    free(f);
}

http_fast_rc api_openai_fast(coord *c, http_req *req, int kind)
{
    json_t *body = api_read_json_object(req);
    if (!body) return HTTP_HANDLED;
    api_invalid why;
    if (api_validate_body((api_kind)kind, body, &why)) {
        api_bad_request(req, why.code, why.param[0] ? why.param : NULL, "%s", why.message);
        json_decref(body);
        return HTTP_HANDLED;
    }
    const char *model = json_string_value(json_object_get(body, "model"));
    int stream = json_is_true(json_object_get(body, "stream"));
    if (!registry_model_known(c->reg, model)) {
        api_error(req, 404, "invalid_request_error", "model_not_found", "model",
                  "the model '%s' is not served by any node in the pool", model);
        json_decref(body);
        return HTTP_HANDLED;
    }
    /* Streams, and calls that would have to wait for a slot, block a pool
     * thread instead; so do calls while others already wait (first come,
     * first served). */
    fast_call *f = NULL;
    reg_request rq = describe(model, body, (api_kind)kind, req);
    if (stream || registry_waiters(c->reg) > 0 || !(f = calloc(1, sizeof *f)) ||
        registry_acquire(c->reg, &rq, NULL, 0, &f->lease) != PLACE_OK) {
        free(f);
        json_decref(body);
        return HTTP_PASS;
    }
    json_decref(body);
    f->c = c;
    f->req = req;
    f->started_us = mono_us();
    size_t len;
    const char *raw = http_req_body(req, &len);
    char url[512];
    snprintf(url, sizeof url, "%s%s", f->lease.address, api_kind_path((api_kind)kind));
    http_call_opts o = {.method = "POST", .url = url, .body = raw, .body_len = len, .bearer = f->lease.token,
                        .timeout_ms = c->cfg.upstream_timeout_ms};
    if (relay_call_async(&o, req, fast_done, f)) {
        registry_release(c->reg, &f->lease, mono_ms(), 0);
        free(f);
        return HTTP_PASS;
    }
    return HTTP_DEFERRED;
}
