/* api/openai: the OpenAI-compatible calls (chat, completions, embeddings,
 * models).  It validates, waits for a node slot, and forwards the request to
 * the chosen worker (streams through api/stream.c); a node that fails before
 * answering is replaced by another without the client noticing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cache.h"
#include "api/coord.h"
#include "api/errors.h"
#include "api/sessions.h"
#include "api/validate.h"
#include "catalog/catalog.h"
#include "http/client.h"
#include "api/stream.h"
#include "api/track.h"
#include "policy/classify.h"
#include "http/relay.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/str.h"

#define MAX_TRIES 8

/* What the fast path hands the blocking one: the nodes the request already
 * failed on, so the retry goes elsewhere, and the cache lookup it already
 * made, so a request is looked up (and counted) once. */
typedef struct tried_nodes {
    char ids[MAX_TRIES][40];
    int n;
    int looked_up;
    api_cache_req cache;
} tried_nodes;

/* A carry for the blocking path; NULL when memory ran out (the retry then
 * may try the same node, and the request is looked up again). */
static tried_nodes *carry_new(http_req *req, const api_cache_req *cr)
{
    tried_nodes *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (cr) {
        t->looked_up = 1;
        t->cache = *cr;
    }
    http_req_set_ctx(req, t, free);
    return t;
}

/* What the call taught about the node, for its profile (callers skip calls
 * the client left, which teach nothing). */
static void observe(registry *reg, const node_lease *l, long status, int ok, const char *body, size_t len,
                    int64_t started_us, double first_byte_ms)
{
    call_sample s = {.total_ms = (double)(mono_us() - started_us) / 1000.0, .first_byte_ms = first_byte_ms};
    if (ok && status == 200) call_sample_parse_answer(&s, body, len);
    registry_observe(reg, l, ok, &s, mono_ms());
}

/* Whether the node, not the request, is the problem: its self-check failed
 * (503 not_ready) or it refused the node token (401/403).  Another node may
 * serve the same request. */
int api_node_refused(long status, const char *body)
{
    if (status == 401 || status == 403) return 1;
    return status == 503 && body && strstr(body, "\"not_ready\"") != NULL;
}

void api_retry_after(coord *c, http_req *req, int64_t waiting)
{
    /* When the pool should have drained what is ahead, at its rate of the
     * last minute. */
    double rate = registry_drain_rate(c->reg, mono_ms());
    double secs = rate > 0 ? ceil((double)(waiting + 1) / rate) : 5;
    if (secs < 1) secs = 1;
    if (secs > 600) secs = 600;
    char v[16];
    snprintf(v, sizeof v, "%d", (int)secs);
    http_set_header(req, "Retry-After", v);
}



/* A request read, validated and classified: what placement needs (its size,
 * its answer's length, its priority from X-Gpupool-Priority, 0-9, default 5,
 * and whether it must stay on trusted capacity). */
typedef struct prepared {
    json_t *body;
    char model[256];
    int stream;
    classification cls;
    reg_request rq;
    api_session sess;          /* a session turn (api/sessions); sess.active 0 when none */
    char *raw;                 /* the body to forward when it is not the client's; NULL = the client's */
    size_t raw_len;
    track_request tr;          /* what the two-track router reads (api/track) */
} prepared;

/* Error answers say where the request was headed too: the track the router
 * chose and why, or the pool. */
static void route_on_error(http_req *req, int tracked, const track_decision *d, const char *private_rule)
{
    char route[200];
    if (tracked && d->reason[0])
        snprintf(route, sizeof route, "%s; reason=%s", d->target == TRACK_CLOUD ? "cloud" : "local", d->reason);
    else if (private_rule && *private_rule) snprintf(route, sizeof route, "local; reason=private (%s)", private_rule);
    else snprintf(route, sizeof route, "local; reason=pool");
    http_set_header(req, "X-Gpupool-Route", route);
}

/* A catalogue alias becomes the entry's name, in model and in the body the
 * node gets (engines know only the name).  0, or -1 after answering. */
static int resolve_alias(coord *c, http_req *req, json_t *body, char *model, size_t len)
{
    const char *name = catalog_resolve(c->catalog, model);
    if (!name || !strcmp(name, model)) return 0;
    snprintf(model, len, "%s", name);
    json_object_set_new(body, "model", json_string(name));
    char *text = json_dumps(body, JSON_COMPACT);
    int rc = text ? http_req_replace_body(req, text, strlen(text)) : -1;
    free(text);
    if (rc) api_server_error(req, 503, "no_capacity", "out of memory");
    return rc ? -1 : 0;
}

static void prepared_free(prepared *p)
{
    json_decref(p->body);
    p->body = NULL;
    api_session_free(&p->sess);
    free(p->raw);
    p->raw = NULL;
}

/* Returns 0, -1 after answering the client (and then owns nothing), or 1
 * when the request needs a pool thread (may_block 0 and it names a
 * session, whose history is read and may be summarised). */
static int prepare(coord *c, http_req *req, api_kind kind, prepared *p, int may_block)
{
    memset(p, 0, sizeof *p);
    json_t *body = api_read_json_object(req);
    if (!body) return -1;
    api_invalid why;
    if (api_validate_body(kind, body, &why)) {
        api_bad_request(req, why.code, why.param[0] ? why.param : NULL, "%s", why.message);
        json_decref(body);
        return -1;
    }
    snprintf(p->model, sizeof p->model, "%s", json_string_value(json_object_get(body, "model")));
    if (resolve_alias(c, req, body, p->model, sizeof p->model)) {
        json_decref(body);
        return -1;
    }
    p->stream = json_is_true(json_object_get(body, "stream"));
    p->body = body;
    if (kind == KIND_CHAT && api_session_named(req, body)) {
        if (!may_block) {
            prepared_free(p);
            return 1;
        }
        /* The whole conversation from here on: it is what is classified,
         * cached, sized and sent. */
        if (api_session_begin(c, req, body, &p->sess)) {
            prepared_free(p);
            return -1;
        }
    }
    if (classify_request(c->rules, body, http_req_header(req, "X-Gpupool-Sensitivity"), coord_key_private(c, req),
                         &p->cls)) {
        api_bad_request(req, "invalid_value", "X-Gpupool-Sensitivity",
                        "X-Gpupool-Sensitivity must be \"private\" or \"normal\"");
        prepared_free(p);
        return -1;
    }
    api_session_classified(c, &p->sess, &p->cls);
    audit_route_class(req, p->cls.is_private, p->cls.rule);
    size_t len;
    http_req_body(req, &len);
    if (p->sess.active) {
        api_session_fit(c, req, body, &p->sess);
        if (!(p->raw = api_session_forward_body(body, &p->raw_len))) {
            api_server_error(req, 500, "store_error", "out of memory");
            prepared_free(p);
            return -1;
        }
        len = p->raw_len;
    }
    const char *prio = http_req_header(req, "X-Gpupool-Priority");
    if (prio && !(prio[0] >= '0' && prio[0] <= '9' && !prio[1])) {
        api_bad_request(req, "invalid_value", "X-Gpupool-Priority", "X-Gpupool-Priority must be one digit, 0 to 9");
        prepared_free(p);
        return -1;
    }
    p->rq = (reg_request){.model = p->model, .prompt_tokens = api_estimate_prompt_tokens(body),
                          .max_tokens = kind == KIND_EMBEDDING ? 1 : api_requested_max_tokens(body),
                          .payload_bytes = (double)len,
                          .priority = prio ? prio[0] - '0' : 5,
                          .trusted_only = p->cls.is_private};
    if (api_track_features(c, req, body, p->model, p->rq.prompt_tokens, p->rq.max_tokens, p->rq.priority,
                           p->cls.is_private ? p->cls.rule : NULL, &p->tr)) {
        prepared_free(p);
        return -1;
    }
    /* "auto" stands for the router's local model when the request is private. */
    const char *local = p->tr.is_auto ? api_track_cfg(c->track)->auto_local : p->model;
    if (!p->tr.is_auto && !registry_model_known(c->reg, p->model)) {
        api_error(req, 404, "invalid_request_error", "model_not_found", "model",
                  "the model '%s' is not served by any node in the pool", p->model);
        prepared_free(p);
        return -1;
    }
    char blocked[400];
    if (!p->tr.is_auto && registry_model_blocked(c->reg, p->model, blocked, sizeof blocked)) {
        api_server_error(req, 503, "model_mismatch",
                         "no node holds the catalogue's file for '%s' (sha256 %.12s…): %s; it was not sent anywhere",
                         p->model, catalog_find(c->catalog, p->model)->sha256, blocked);
        prepared_free(p);
        return -1;
    }
    if (p->cls.is_private && (!*local || !registry_model_trusted(c->reg, local))) {
        route_on_error(req, 0, NULL, p->cls.rule);
        api_server_error(req, 503, "no_trusted_capacity",
                         "the request is private (%s) and no trusted node serves '%s'; it was not sent anywhere",
                         p->cls.rule, *local ? local : p->model);
        prepared_free(p);
        return -1;
    }
    const cat_entry *entry = catalog_find(c->catalog, p->model);
    if (entry && entry->trust == CAT_TRUST_TRUSTED) {
        if (!registry_model_trusted(c->reg, p->model)) {
            api_server_error(req, 503, "no_trusted_capacity",
                             "the catalogue keeps '%s' on trusted nodes and none serves it; it was not sent anywhere",
                             p->model);
            prepared_free(p);
            return -1;
        }
        p->rq.trusted_only = 1;
    }
    return 0;
}

void api_served_by(http_req *req, const node_lease *l, const char *private_rule, const char *route_reason)
{
    http_set_header(req, "X-Gpupool-Node", l->node_id);
    char route[200];
    if (route_reason && *route_reason)
        snprintf(route, sizeof route, "%s; reason=%s", l->external ? "cloud" : "local", route_reason);
    else if (l->external) snprintf(route, sizeof route, "cloud; reason=external backend %s", l->node_id);
    else if (private_rule && *private_rule) snprintf(route, sizeof route, "local; reason=private (%s)", private_rule);
    else snprintf(route, sizeof route, "local; reason=pool");
    http_set_header(req, "X-Gpupool-Route", route);
    if (private_rule && *private_rule) http_set_header(req, "X-Gpupool-Sensitivity", "private");
}

/* Each forward_* returns 1 when the client has its answer (or has left), 0
 * when the node failed before answering and another node may be tried. */
/* An engine error another node may not repeat (it crashed, ran out of
 * memory, timed out): worth one more try elsewhere while tries remain. */
static int engine_failed(long status) { return status >= 500 && status != 501 && status != 505; }

static const char *attempt_outcome(const http_result *res)
{
    if (!res->status) return "unreachable";
    if (api_node_refused(res->status, res->body)) return "refused";
    return engine_failed(res->status) ? "engine_error" : "ok";
}

static int forward_buffered(coord *c, http_req *req, const http_call_opts *o, const node_lease *lease,
                            const char *private_rule, const api_track_hop *hop, const api_cache_req *cr,
                            api_session *sess, int may_retry, char *why, size_t whylen)
{
    http_result res;
    int64_t t0 = mono_us();
    relay_call_buffered(o, req, &res);
    int ok = registry_status_served(res.status) && !api_node_refused(res.status, res.body);
    if (!http_req_client_gone(req)) observe(c->reg, lease, res.status, ok, res.body, res.body_len, t0, 0);
    registry_release(c->reg, lease, mono_ms(), ok);
    /* The cloud bills what it answered, whoever is still listening. */
    if (lease->external && res.status == 200)
        api_track_charge_answer(c, hop->owner, lease->node_id, res.body, res.body_len, hop->prompt_tokens, 0);
    audit_route_attempt(req, lease->node_id, lease->external, res.status, attempt_outcome(&res));
    int done = 1;
    if (res.status == 0 && http_req_client_gone(req)) {
        api_error(req, 499, "invalid_request_error", "client_closed", NULL, "the client left");
    } else if (res.status && engine_failed(res.status) && may_retry && !api_node_refused(res.status, res.body)) {
        snprintf(why, whylen, "%s: the engine answered %ld", lease->node_id, res.status);
        done = 0;
    } else if (res.status && !api_node_refused(res.status, res.body)) {
        api_served_by(req, lease, private_rule, hop->reason);
        /* Stored before answering, so the client's next request can hit. */
        api_cache_store(c, cr, res.status, res.body, res.body_len);
        if (sess->active && res.status == 200) {
            json_t *completion = json_loadb(res.body, res.body_len, 0, NULL);
            api_session_commit(c, sess, completion, NULL, 0);
            json_decref(completion);
        }
        relay_respond_result(req, &res);
    } else {
        char said[200];
        if (res.status) api_error_text(res.body, res.body_len, "refused the request", said, sizeof said);
        snprintf(why, whylen, "%s: %s", lease->node_id, res.status ? said : res.error);
        registry_mark_unreachable(c->reg, lease->node_id, res.status ? said : res.error, mono_ms());
        done = 0;
    }
    http_result_free(&res);
    return done;
}

static void proxy(coord *c, http_req *req, int kind, prepared *pr);

/* The body asking for another model (auto's resolution); NULL when memory
 * ran out. */
static char *with_model(const char *raw, size_t len, const char *model)
{
    json_t *b = json_loadb(raw, len, 0, NULL);
    char *out = NULL;
    if (json_is_object(b) && !json_object_set_new(b, "model", json_string(model))) out = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return out;
}

void api_openai_proxy(coord *c, http_req *req, int kind)
{
    prepared pr;
    if (prepare(c, req, (api_kind)kind, &pr, 1)) return;
    proxy(c, req, kind, &pr);
    prepared_free(&pr);
}

static void proxy(coord *c, http_req *req, int kind, prepared *pr)
{
    tried_nodes *earlier = http_req_ctx(req);
    api_cache_req cache = {0};
    json_t *hit = NULL;
    if (earlier && earlier->looked_up) cache = earlier->cache;
    else if (kind == KIND_CHAT && api_cache_begin(c, req, pr->body, pr->cls.is_private,
                                                  pr->cls.is_private ? pr->cls.rule : NULL, &cache,
                                                  pr->sess.active ? &hit : NULL)) {
        /* A hit is this turn's answer too. */
        if (hit) api_session_commit(c, &pr->sess, hit, NULL, 0);
        json_decref(hit);
        return;
    }
    char model[256];
    snprintf(model, sizeof model, "%s", pr->model);
    int stream = pr->stream;
    reg_request rq = pr->rq;
    rq.model = model;
    const char *private_rule = pr->cls.is_private ? pr->cls.rule : NULL;
    track_request tr = pr->tr;
    int tracked = tr.is_auto || tr.cloud_model;
    api_track_hop hop = {.prompt_tokens = rq.prompt_tokens, .urgent = tr.urgent};
    coord_owner(c, req, hop.owner);
    size_t raw_len;
    const char *raw = http_req_body(req, &raw_len);
    if (pr->raw) { /* a session's whole conversation */
        raw = pr->raw;
        raw_len = pr->raw_len;
    }
    char *hop_body = NULL; /* the body for a model other than the client's */
    const char *tried[MAX_TRIES];
    char tried_ids[MAX_TRIES][40];
    int ntried = 0;
    for (int i = 0; earlier && i < earlier->n; i++) {
        snprintf(tried_ids[ntried], sizeof tried_ids[ntried], "%s", earlier->ids[i]);
        tried[ntried] = tried_ids[ntried];
        ntried++;
    }
    char last_error[300] = "";
    /* A tracked request may take one hop more: to the other track. */
    int tries = c->cfg.max_attempts + tracked < MAX_TRIES ? c->cfg.max_attempts + tracked : MAX_TRIES;
    int64_t deadline = mono_ms() + c->cfg.queue_timeout_ms;
    track_decision d = {0};

    for (int attempt = ntried; attempt < tries; attempt++) {
        /* Every hop asks again: the budget may have moved, and a failed
         * track sends the request to the other one. */
        api_track_decide(c, hop.owner, &tr, &d);
        if (d.refuse) {
            route_on_error(req, tracked, &d, private_rule);
            api_retry_after(c, req, 0);
            api_error(req, 429, "rate_limit_error", "budget_exceeded", "model",
                      "'%s' may not go to the cloud now (%s) and no local model stands in for it", pr->model,
                      d.reason);
            goto out;
        }
        if (tracked && d.target == TRACK_LOCAL && tr.local_failed) { /* nowhere left to go */
            char was[sizeof last_error];
            snprintf(was, sizeof was, "%s", last_error);
            snprintf(last_error, sizeof last_error, "%.140s; not the cloud: %.130s", was, d.reason);
            break;
        }
        const char *want = d.model ? d.model : pr->model;
        if (strcmp(want, model)) {
            snprintf(model, sizeof model, "%s", want);
            free(hop_body);
            if (!(hop_body = with_model(raw, raw_len, model))) {
                api_server_error(req, 503, "no_capacity", "out of memory");
                goto out;
            }
            if (attempt > ntried) deadline = mono_ms() + c->cfg.queue_timeout_ms; /* a new track, a new wait */
        }
        /* Local means the pool's own nodes; an untracked request may still
         * fall back to an external backend while its budget allows. */
        rq.trusted_only = private_rule != NULL ||
                          (tracked ? d.target == TRACK_LOCAL : !api_track_cloud_allowed(c, hop.owner, tr.urgent));
        hop.reason = tracked ? d.reason : NULL;
        node_lease lease;
        reg_wait w = registry_acquire_wait(c->reg, &rq, tried, ntried, deadline, c->cfg.queue_max, &lease);
        if (w != REG_OK && w != REG_QUEUE_FULL && tracked && !tr.local_failed && !tr.cloud_failed) {
            /* This track has no room: the other one, if the router allows it. */
            if (d.target == TRACK_LOCAL) tr.local_failed = 1;
            else tr.cloud_failed = 1;
            snprintf(last_error, sizeof last_error, "no %s capacity for '%s'",
                     d.target == TRACK_LOCAL ? "local" : "cloud", model);
            continue;
        }
        if (w == REG_NO_MODEL || w == REG_QUEUE_FULL || w == REG_NO_FIT) route_on_error(req, tracked, &d, private_rule);
        if (w == REG_NO_MODEL) {
            api_error(req, 404, "invalid_request_error", "model_not_found", "model",
                      "the model '%s' is not served by any node in the pool", model);
            goto out;
        }
        if (w == REG_QUEUE_FULL) {
            api_retry_after(c, req, registry_waiters(c->reg));
            api_error(req, 429, "rate_limit_error", "queue_full", NULL,
                      "all nodes serving '%s' are busy and the queue is full; retry later", model);
            goto out;
        }
        if (w == REG_NO_FIT) {
            api_server_error(req, 503, "insufficient_vram",
                             "the model '%s' fits the free VRAM of no node now (see /v1/nodes for each node's need)", model);
            goto out;
        }
        if (w == REG_TIMEOUT || w == REG_EXHAUSTED) break;

        if (lease.external) api_track_charge_request(c, hop.owner);
        const char *body = hop_body ? hop_body : raw;
        size_t len = hop_body ? strlen(hop_body) : raw_len;
        char url[512];
        snprintf(url, sizeof url, "%s%s", lease.address, api_kind_path((api_kind)kind));
        http_call_opts o = {.method = "POST", .url = url, .body = body, .body_len = len,
                            .bearer = lease.token, .timeout_ms = stream ? 0 : c->cfg.upstream_timeout_ms,
                            .idle_timeout_ms = stream ? c->cfg.upstream_timeout_ms : 0};
        int done = stream ? api_forward_stream(c, req, &o, &lease, &rq, (api_kind)kind, private_rule, &hop, &cache,
                                               &pr->sess, tried, ntried, last_error, sizeof last_error)
                          : forward_buffered(c, req, &o, &lease, private_rule, &hop, &cache, &pr->sess,
                                             attempt + 1 < tries, last_error, sizeof last_error);
        if (done) {
            api_track_count(c, lease.external, tracked ? d.kind : private_rule ? "private" : "pool");
            goto out;
        }
        log_warn("request for %s: node %s failed before answering (%s); trying another", model,
                 lease.node_id, last_error);
        snprintf(tried_ids[ntried], sizeof tried_ids[ntried], "%s", lease.node_id);
        tried[ntried] = tried_ids[ntried];
        ntried++;
        /* A cloud that failed hands the request back to the local track. */
        if (tracked && lease.external) tr.cloud_failed = 1;
    }
    route_on_error(req, tracked, &d, private_rule);
    if (ntried) {
        api_server_error(req, 502, "no_node_answered", "no node could serve '%s' (tried %d): %s", model, ntried,
                         last_error);
    } else if (tracked && last_error[0]) {
        api_retry_after(c, req, registry_waiters(c->reg));
        api_server_error(req, 503, "no_capacity", "no track could take the request: %s", last_error);
    } else {
        api_retry_after(c, req, registry_waiters(c->reg));
        api_server_error(req, 503, "no_capacity", "no node could take a request for '%s' within %lld ms", model,
                         (long long)c->cfg.queue_timeout_ms);
    }
out:
    free(hop_body);
}

void api_models(coord *c, http_req *req)
{
    json_t *j = registry_models_json(c->reg, mono_ms());
    const track_cfg *tc = c->track ? api_track_cfg(c->track) : NULL;
    if (tc && (tc->auto_local[0] || tc->auto_cloud[0])) {
        /* The router's alias, so that clients that pick from the list can pick it. */
        json_t *resolves = json_pack("{s:o, s:o}", "local", tc->auto_local[0] ? json_string(tc->auto_local) : json_null(),
                                     "cloud", tc->auto_cloud[0] ? json_string(tc->auto_cloud) : json_null());
        json_array_append_new(json_object_get(j, "data"),
                              json_pack("{s:s, s:s, s:s, s:o}", "id", TRACK_ALIAS, "object", "model", "owned_by",
                                        "gpupool", "resolves_to", resolves));
    }
    http_respond_json(req, 200, j);
    json_decref(j);
}

/* ---- the fast path: on the event loop, no thread waits ---- */

typedef struct fast_call {
    coord *c;
    http_req *req;
    node_lease lease;
    int64_t started_us;
    char private_rule[64];
    api_cache_req *cache; /* NULL when the cache was not asked: 16 KB not to zero per call */
} fast_call;

static void fast_done(void *ctx, http_result *res)
{
    fast_call *f = ctx;
    http_req *req = f->req;
    int ok = registry_status_served(res->status) && !api_node_refused(res->status, res->body);
    /* A call that got its answer teaches whether or not the client is still
     * there, so only a failed one costs the look at the client's socket. */
    if (res->status || !http_req_client_gone(req))
        observe(f->c->reg, &f->lease, res->status, ok, res->body, res->body_len, f->started_us, 0);
    registry_release(f->c->reg, &f->lease, mono_ms(), ok);
    audit_route_attempt(req, f->lease.node_id, f->lease.external, res->status, attempt_outcome(res));
    int retry = engine_failed(res->status) && f->c->cfg.max_attempts > 1;
    if (res->status && !api_node_refused(res->status, res->body) && !retry) {
        api_served_by(req, &f->lease, f->private_rule, NULL);
        api_track_count(f->c, 0, f->private_rule[0] ? "private" : "pool");
        api_cache_store(f->c, f->cache, res->status, res->body, res->body_len);
        relay_respond_result(req, res);
        http_req_complete(req);
    } else if (res->status == 0 && http_req_client_gone(req)) {
        api_error(req, 499, "invalid_request_error", "client_closed", NULL, "the client left");
        http_req_complete(req);
    } else {
        /* The node failed before answering: the blocking path retries on
         * other nodes, waiting for a slot if it must. */
        const char *why = retry ? "the engine failed" : res->status ? "refused the request" : res->error;
        if (!retry) registry_mark_unreachable(f->c->reg, f->lease.node_id, why, mono_ms());
        log_warn("node %s failed before answering (%s); trying another", f->lease.node_id, why);
        tried_nodes *t = carry_new(req, f->cache);
        if (t) {
            snprintf(t->ids[0], sizeof t->ids[0], "%s", f->lease.node_id);
            t->n = 1;
        }
        http_req_run_handler(req);
    }
    free(f->cache);
    free(f);
}

http_fast_rc api_openai_fast(coord *c, http_req *req, int kind)
{
    prepared pr;
    int prc = prepare(c, req, (api_kind)kind, &pr, 0);
    if (prc) return prc < 0 ? HTTP_HANDLED : HTTP_PASS;
    json_t *body = pr.body;
    /* Streams block a pool thread, which makes their own lookup; so do
     * lookups that must first ask an embedding model of the pool, and
     * requests the two-track router places.  The fast path leases only the
     * pool's own nodes, since what goes to the cloud is budgeted there. */
    pr.rq.trusted_only = 1;
    if (pr.stream || (kind == KIND_CHAT && c->cache && c->cfg.cache_pool_model) || pr.tr.is_auto ||
        pr.tr.cloud_model) {
        json_decref(body);
        return HTTP_PASS;
    }
    /* A lookup is in memory; a hit's LRU stamp is one small write to the
     * cache file (WAL, no fsync), cheap enough for the event loop. */
    api_cache_req *cache = NULL;
    if (kind == KIND_CHAT && c->cache) {
        if (!(cache = calloc(1, sizeof *cache))) {
            json_decref(body);
            return HTTP_PASS;
        }
        if (api_cache_begin(c, req, body, pr.cls.is_private, pr.cls.is_private ? pr.cls.rule : NULL, cache, NULL)) {
            free(cache);
            json_decref(body);
            return HTTP_HANDLED;
        }
    }
    /* Calls that would have to wait for a slot block a pool thread instead;
     * so do calls while others already wait (first come, first served). */
    fast_call *f = NULL;
    if (registry_waiters(c->reg) > 0 || !(f = calloc(1, sizeof *f)) ||
        registry_acquire(c->reg, &pr.rq, NULL, 0, &f->lease) != PLACE_OK) {
        free(f);
        json_decref(body);
        if (cache) carry_new(req, cache);
        free(cache);
        return HTTP_PASS;
    }
    f->cache = cache;
    if (pr.cls.is_private) str_copy(f->private_rule, sizeof f->private_rule, pr.cls.rule);
    json_decref(body);
    f->c = c;
    f->req = req;
    f->started_us = mono_us();
    size_t len;
    const char *raw = http_req_body(req, &len);
    char url[512];
    size_t ul = str_copy(url, sizeof url, f->lease.address);
    str_copy(url + ul, sizeof url - ul, api_kind_path((api_kind)kind));
    http_call_opts o = {.method = "POST", .url = url, .body = raw, .body_len = len, .bearer = f->lease.token,
                        .timeout_ms = c->cfg.upstream_timeout_ms};
    if (relay_call_async(&o, req, fast_done, f)) {
        registry_release(c->reg, &f->lease, mono_ms(), 0);
        if (cache) carry_new(req, cache);
        free(cache);
        free(f);
        return HTTP_PASS;
    }
    return HTTP_DEFERRED;
}
