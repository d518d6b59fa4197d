/* api/cache: see cache.h. */
#include "api/cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/errors.h"
#include "api/pool_call.h"
#include "policy/cache_key.h"
#include "policy/cache_metrics.h"
#include "policy/cache_replay.h"
#include "util/clock.h"
#include "util/log.h"

/* The key of a remembered miss; it borrows cr's strings, so it lives no
 * longer than cr. */
static cache_key key_of(const api_cache_req *cr)
{
    cache_key k = {.model = cr->model, .partition = cr->partition, .tier = cr->tier};
    memcpy(k.context, cr->context, sizeof k.context);
    return k;
}

static void answer_hit(http_req *req, const json_t *body, const cache_hit *hit, const char *private_rule)
{
    http_set_header(req, CACHE_HEADER, "hit");
    http_set_header(req, "X-Gpupool-Route", "local; reason=cache");
    if (private_rule && *private_rule) http_set_header(req, "X-Gpupool-Sensitivity", "private");
    char age[32];
    snprintf(age, sizeof age, "%lld", (long long)(hit->age_ms / 1000));
    http_set_header(req, "Age", age);
    if (!json_is_true(json_object_get(body, "stream"))) {
        http_respond(req, 200, "application/json", hit->answer, hit->len);
        return;
    }
    json_t *completion = json_loadb(hit->answer, hit->len, 0, NULL);
    json_t *so = json_object_get(body, "stream_options");
    size_t len = 0;
    char *sse = completion ? cache_replay_sse(completion, json_is_true(json_object_get(so, "include_usage")), &len)
                           : NULL;
    if (sse) http_respond(req, 200, "text/event-stream", sse, len);
    else api_server_error(req, 500, "store_error", "the cached answer could not be replayed as a stream");
    free(sse);
    json_decref(completion);
}

/* How long a lookup waits for the embedding model: a slow one only costs
 * a miss, never the request. */
#define POOL_EMBED_WAIT_MS 2000
#define POOL_EMBED_TIMEOUT_MS 10000

/* The vector of text into cr; 0, or -1 when there is none (the lookup is
 * then a miss that stores nothing). */
static int embed(coord *c, const char *text, size_t len, int is_private, api_cache_req *cr)
{
    if (!c->cfg.cache_pool_model) {
        cr->dim = EMBED_DIM;
        return embed_text(text, len, cr->vec);
    }
    json_t *body = embed_request_body(c->cfg.cache_pool_model, text);
    json_t *answer = NULL;
    char why[300];
    int64_t timeout = c->cfg.upstream_timeout_ms < POOL_EMBED_TIMEOUT_MS ? c->cfg.upstream_timeout_ms
                                                                          : POOL_EMBED_TIMEOUT_MS;
    int rc = body ? api_pool_call(c, KIND_EMBEDDING, body, is_private, POOL_EMBED_WAIT_MS, timeout, &answer, why,
                                  sizeof why)
                  : -1;
    json_decref(body);
    float *v = NULL;
    int dim = rc ? -1 : embed_parse_response(answer, &v);
    json_decref(answer);
    if (dim > 0 && dim <= API_CACHE_MAX_DIM) {
        memcpy(cr->vec, v, (size_t)dim * sizeof *v);
        cr->dim = dim;
    } else {
        log_warn("semantic cache: no embedding from '%s' (%s); a miss", c->cfg.cache_pool_model,
                 rc ? why : dim > 0 ? "too many dimensions" : "no usable vector");
        dim = -1;
    }
    free(v);
    return dim > 0 ? 0 : -1;
}

int api_cache_begin(coord *c, http_req *req, const json_t *body, int is_private, const char *private_rule,
                    api_cache_req *cr, json_t **hit_answer)
{
    memset(cr, 0, sizeof *cr);
    if (!c->cache) return 0;
    const cache_config *cfg = &c->cfg.cache;
    if (cache_skip_reason(body, cfg->max_temperature,
                          cache_no_cache_header(http_req_header(req, "Cache-Control")))) {
        semcache_count_skip(c->cache);
        return 0;
    }
    coord_owner(c, req, cr->partition);
    cr->tier = is_private ? CACHE_TIER_TRUSTED : CACHE_TIER_EXTERNAL;
    cache_key key;
    char *text = NULL;
    size_t len = 0;
    /* A session's turns are all in the key (and its id, a field like any). */
    int turns = json_object_get(body, "session_id") ? 0 : cfg->turns;
    if (cache_key_build(body, turns, cr->partition, cr->tier, &key, &text, &len)) {
        semcache_count_skip(c->cache);
        return 0;
    }
    /* key.model borrows the body; the copy outlives it for the insert. */
    snprintf(cr->model, sizeof cr->model, "%s", key.model);
    memcpy(cr->context, key.context, sizeof cr->context);
    int erc = embed(c, text, len, is_private, cr);
    free(text);
    if (erc && c->cfg.cache_pool_model) {
        http_set_header(req, CACHE_HEADER, "miss");
        return 0;
    }
    if (erc) {
        semcache_count_skip(c->cache);
        return 0;
    }
    key = key_of(cr);
    cache_hit hit = {0};
    int rc = semcache_lookup(c->cache, &key, cr->vec, cr->dim, mono_ms(), &hit);
    if (rc == 1) {
        answer_hit(req, body, &hit, private_rule);
        if (hit_answer) *hit_answer = json_loadb(hit.answer, hit.len, 0, NULL);
        cache_hit_free(&hit);
        return 1;
    }
    http_set_header(req, CACHE_HEADER, "miss");
    cr->store = rc == 0;
    return 0;
}

void api_cache_store_json(coord *c, const api_cache_req *cr, const json_t *completion)
{
    if (!c->cache || !cr || !cr->store || !cache_answer_storable(completion)) return;
    char *json = json_dumps(completion, JSON_COMPACT);
    if (!json) return;
    cache_key key = key_of(cr);
    if (semcache_insert(c->cache, &key, cr->vec, cr->dim, json, strlen(json), mono_ms()) < 0)
        log_warn("semantic cache: cannot store an answer: %s", semcache_errmsg(c->cache));
    free(json);
}

void api_cache_store(coord *c, const api_cache_req *cr, long status, const char *body, size_t len)
{
    if (!c->cache || !cr || !cr->store || status != 200 || !body) return;
    json_t *j = json_loadb(body, len, 0, NULL);
    api_cache_store_json(c, cr, j);
    json_decref(j);
}

void api_cache_invalidate(coord *c, http_req *req)
{
    const char *model = http_req_query(req, "model"), *partition = http_req_query(req, "partition");
    const char *tier = http_req_query(req, "tier");
    cache_scope scope = {.model = model && *model ? model : NULL, .partition = partition, .tier = -1};
    if (tier && !strcmp(tier, "trusted")) scope.tier = CACHE_TIER_TRUSTED;
    else if (tier && !strcmp(tier, "external")) scope.tier = CACHE_TIER_EXTERNAL;
    else if (tier) {
        api_bad_request(req, "invalid_value", "tier", "tier must be \"trusted\" or \"external\"");
        return;
    }
    long removed = c->cache ? semcache_invalidate(c->cache, &scope) : 0;
    if (removed < 0) {
        api_server_error(req, 500, "store_error",
                         "the entries are gone from memory, but the cache file could not be updated: %s",
                         semcache_errmsg(c->cache));
        return;
    }
    if (removed) log_info("semantic cache: invalidated %ld entr%s", removed, removed == 1 ? "y" : "ies");
    json_t *j = json_pack("{s:s, s:b, s:I}", "object", "cache.invalidation", "enabled", c->cache != NULL,
                          "removed", (json_int_t)removed);
    http_respond_json(req, 200, j);
    json_decref(j);
}

void api_cache_metrics(coord *c, buf *out)
{
    if (!c->cache) return;
    cache_stats st;
    semcache_stats(c->cache, &st);
    cache_metrics_render(&st, out);
}
