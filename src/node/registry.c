/* node/registry: see registry.h.  This half admits workers, issues and checks
 * node tokens, takes heartbeats, keeps node states and the breaker, and
 * answers administration and the JSON views; node/leases.c hands out slots. */
#include "node/registry.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/ids.h"
#include "util/log.h"

#include "node/registry_int.h"

const char *node_state_name(node_state s)
{
    static const char *names[] = {"ready", "not_ready", "draining", "offline"};
    return s < NODE_STATES ? names[s] : "unknown";
}

registry *registry_new(const registry_cfg *cfg)
{
    registry *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    cond_init_monotonic(&r->cv);
    r->cfg = *cfg;
    r->join_token = strdup(cfg->join_token ? cfg->join_token : "");
    r->cfg.join_token = r->join_token;
    if (r->cfg.heartbeat_ms <= 0) r->cfg.heartbeat_ms = 2000;
    if (r->cfg.missed_beats <= 0) r->cfg.missed_beats = 3;
    if (r->cfg.token_ttl_ms <= 0) r->cfg.token_ttl_ms = 600000;
    if (r->cfg.breaker_failures <= 0) r->cfg.breaker_failures = 3;
    if (r->cfg.breaker_cooldown_ms <= 0) r->cfg.breaker_cooldown_ms = 5000;
    static const place_weights unset;
    if (!memcmp(&r->cfg.placement.w, &unset, sizeof unset)) place_weights_default(&r->cfg.placement.w);
    return r;
}

static void node_free_models(node *nd)
{
    for (int i = 0; i < nd->nmodels; i++) free(nd->models[i]);
    free(nd->models);
    nd->models = NULL;
    nd->nmodels = 0;
    for (int i = 0; i < nd->nloadable; i++) free(nd->loadable[i]);
    free(nd->loadable);
    free(nd->need);
    nd->loadable = NULL;
    nd->need = NULL;
    nd->nloadable = 0;
}

/* The need for a model the node can start; 0 with *found = 0 if it cannot. */
uint64_t reg_loadable_need(const node *nd, const char *model, int *found)
{
    for (int i = 0; i < nd->nloadable; i++)
        if (!strcmp(nd->loadable[i], model)) { *found = 1; return nd->need[i]; }
    *found = 0;
    return 0;
}

static void node_free(node *nd)
{
    node_free_models(nd);
    json_decref(nd->gpus);
    json_decref(nd->engines);
    json_decref(nd->loadable_json);
    json_decref(nd->model_files);
    json_decref(nd->files);
    json_decref(nd->transfers);
    free(nd);
}

void registry_free(registry *r)
{
    if (!r) return;
    for (int i = 0; i < r->n; i++) node_free(r->nodes[i]);
    free(r->nodes);
    free(r->join_token);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void registry_shutdown(registry *r)
{
    pthread_mutex_lock(&r->mu);
    r->stopping = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void registry_on_change(registry *r, void (*fn)(void *), void *ctx)
{
    pthread_mutex_lock(&r->mu);
    r->on_change = fn;
    r->on_change_ctx = ctx;
    pthread_mutex_unlock(&r->mu);
}

void reg_changed(registry *r)
{
    if (r->waiters) pthread_cond_broadcast(&r->cv);
}

void reg_notify(registry *r)
{
    void (*fn)(void *) = r->on_change;
    void *ctx = r->on_change_ctx;
    if (fn) fn(ctx);
}

node *reg_find(registry *r, const char *id)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->nodes[i]->id, id)) return r->nodes[i];
    return NULL;
}

/* Room for one more node.  Caller holds the lock. */
static int grow_nodes(registry *r)
{
    int cap = r->cap ? r->cap * 2 : 16;
    node **grown = realloc(r->nodes, sizeof *grown * (size_t)cap);
    if (!grown) return -1;
    r->nodes = grown;
    r->cap = cap;
    return 0;
}

int reg_has_model(const node *nd, const char *model)
{
    for (int i = 0; i < nd->nmodels; i++)
        if (!strcmp(nd->models[i], model)) return 1;
    return 0;
}

static int running_engines(const json_t *engines)
{
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(engines, i, e) {
        const char *st = json_string_value(json_object_get(e, "state"));
        n += st && !strcmp(st, "running");
    }
    return n;
}

/* Takes what a worker reports (GPUs, engines) into the node's record. */
static void absorb_report(node *nd, json_t *req, int64_t now)
{
    /* Large bodies the node received since its last beat, and how long they
     * took to arrive: the link's throughput for the payload cost. */
    json_t *link = json_object_get(req, "link");
    double lbytes = json_number_value(json_object_get(link, "bytes")), lms = json_number_value(json_object_get(link, "ms"));
    if (lbytes > 0 && lms > 0) profile_observe_link(&nd->prof, lbytes, lms);
    json_t *gpus = json_object_get(req, "gpus");
    json_t *engines = json_object_get(req, "engines");
    /* An engine it started has stopped: its memory may show as taken a
     * beat longer (node/leases gives such a node more time before no-fit). */
    if (nd->engines && json_is_array(engines) && running_engines(engines) < running_engines(nd->engines))
        nd->unloaded_at = now;
    json_decref(nd->gpus);
    json_decref(nd->engines);
    nd->gpus = json_is_array(gpus) ? json_deep_copy(gpus) : json_array();
    nd->engines = json_is_array(engines) ? json_deep_copy(engines) : json_array();
    nd->free_vram = nd->total_vram = 0;
    nd->temp_c = -1;
    nd->throttled = 0;
    size_t i;
    json_t *g;
    json_array_foreach(nd->gpus, i, g) {
        nd->free_vram += (uint64_t)json_integer_value(json_object_get(g, "free_bytes"));
        nd->total_vram += (uint64_t)json_integer_value(json_object_get(g, "total_bytes"));
        json_t *t = json_object_get(g, "temperature_c");
        if (json_is_integer(t) && json_integer_value(t) > nd->temp_c) nd->temp_c = (int)json_integer_value(t);
        nd->throttled |= json_is_true(json_object_get(g, "throttled"));
    }
    node_free_models(nd);
    nd->slots = nd->engine_busy = nd->engine_queued = 0;
    json_t *e;
    json_array_foreach(nd->engines, i, e) {
        if (!json_is_true(json_object_get(e, "healthy"))) continue;
        json_int_t s = json_integer_value(json_object_get(e, "slots"));
        nd->slots += s > 0 ? (int)s : 1;
        nd->engine_busy += (int)json_integer_value(json_object_get(e, "slots_busy"));
        nd->engine_queued += (int)json_integer_value(json_object_get(e, "queued"));
        size_t j;
        json_t *m;
        json_array_foreach(json_object_get(e, "models"), j, m) {
            const char *name = json_string_value(m);
            if (!name || reg_has_model(nd, name)) continue;
            char **grown = realloc(nd->models, sizeof *grown * (size_t)(nd->nmodels + 1));
            if (!grown) break;
            nd->models = grown;
            nd->models[nd->nmodels++] = strdup(name);
        }
    }
    json_t *ld = json_object_get(req, "loadable");
    json_decref(nd->loadable_json);
    nd->loadable_json = json_is_array(ld) ? json_deep_copy(ld) : json_array();
    size_t nl = json_array_size(nd->loadable_json);
    nd->loadable = calloc(nl ? nl : 1, sizeof *nd->loadable);
    nd->need = calloc(nl ? nl : 1, sizeof *nd->need);
    json_t *l;
    json_array_foreach(nd->loadable_json, i, l) {
        const char *name = json_string_value(json_object_get(l, "model"));
        json_int_t need = json_integer_value(json_object_get(l, "need_bytes"));
        if (!name || need <= 0 || !nd->loadable || !nd->need) continue;
        nd->loadable[nd->nloadable] = strdup(name);
        nd->need[nd->nloadable++] = (uint64_t)need;
    }
    nd->reported_inflight = (int)json_integer_value(json_object_get(req, "inflight"));
    json_t *files = json_object_get(req, "model_files");
    json_decref(nd->model_files);
    nd->model_files = json_is_array(files) ? json_deep_copy(files) : json_array();
    reg_absorb_files(nd, req);
}

static void issue_token(registry *r, node *nd, int64_t now)
{
    if (nd->token[0]) {
        memcpy(nd->prev_token, nd->token, sizeof nd->token);
        nd->prev_expires = nd->token_expires;
    }
    rand_hex(nd->token, 32);
    nd->token_issued = now;
    nd->token_expires = now + r->cfg.token_ttl_ms;
}

static int refuse(char *why, size_t whylen, int status, const char *peer, const char *fmt, const char *arg)
{
    char msg[200];
    snprintf(msg, sizeof msg, fmt, arg);
    snprintf(why, whylen, "%s", msg);
    log_warn("refused worker from %s: %s", peer && *peer ? peer : "?", msg);
    return status;
}

int registry_register(registry *r, const char *bearer, json_t *req, const char *peer, int64_t now,
                      json_t **resp, char *why, size_t whylen)
{
    *resp = NULL;
    if (!bearer || !r->join_token[0] || !secret_equal(bearer, r->join_token))
        return refuse(why, whylen, 401, peer, "%s", "wrong or missing join token");
    if (!cidr_list_allows(&r->cfg.allow, peer))
        return refuse(why, whylen, 403, peer, "address %s is not in the allowed ranges", peer);
    const char *fp = json_string_value(json_object_get(req, "fingerprint"));
    const char *addr = json_string_value(json_object_get(req, "address"));
    const char *name = json_string_value(json_object_get(req, "name"));
    if (!fp || strlen(fp) < 16 || strlen(fp) > 64)
        return refuse(why, whylen, 400, peer, "%s", "registration lacks a machine fingerprint");
    if (!addr || strncmp(addr, "http://", 7) || strlen(addr) > 250)
        return refuse(why, whylen, 400, peer, "%s", "registration lacks an http:// address");

    char digest[65];
    sha256_hex(fp, strlen(fp), digest);
    char id[40];
    snprintf(id, sizeof id, "node-%.12s", digest);

    pthread_mutex_lock(&r->mu);
    node *nd = reg_find(r, id);
    if (!nd) {
        if (r->n == r->cap && grow_nodes(r)) {
            pthread_mutex_unlock(&r->mu);
            return refuse(why, whylen, 503, peer, "%s", "out of memory");
        }
        nd = calloc(1, sizeof *nd);
        if (!nd) { pthread_mutex_unlock(&r->mu); return refuse(why, whylen, 503, peer, "%s", "out of memory"); }
        r->nodes[r->n++] = nd;
        snprintf(nd->id, sizeof nd->id, "%s", id);
        nd->registered_at = now;
    }
    snprintf(nd->fingerprint, sizeof nd->fingerprint, "%s", fp);
    snprintf(nd->address, sizeof nd->address, "%s", addr);
    snprintf(nd->name, sizeof nd->name, "%s", name ? name : id);
    snprintf(nd->peer, sizeof nd->peer, "%s", peer ? peer : "");
    nd->prev_token[0] = 0;
    nd->token[0] = 0;
    issue_token(r, nd, now);
    nd->last_beat = now;
    nd->silent_reported = 0;
    nd->seq = 0;
    /* Work is sent only after a heartbeat proves the worker holds its new
     * token; otherwise the first dispatch could race the worker storing it. */
    nd->state = NODE_NOT_READY;
    snprintf(nd->state_reason, sizeof nd->state_reason, "registered; waiting for its first heartbeat");
    absorb_report(nd, req, now);
    *resp = json_pack("{s:s, s:s, s:I, s:I}", "node_id", nd->id, "node_token", nd->token,
                      "token_expires_in_ms", (json_int_t)r->cfg.token_ttl_ms,
                      "heartbeat_ms", (json_int_t)r->cfg.heartbeat_ms);
    reg_catalog_answer(r, nd, req, *resp);
    log_info("node %s (%s) registered from %s at %s with %d model(s), %d slot(s)", nd->id, nd->name,
             nd->peer, nd->address, nd->nmodels, nd->slots);
    reg_changed(r);
    pthread_mutex_unlock(&r->mu);
    reg_notify(r);
    return 200;
}

int registry_heartbeat(registry *r, const char *bearer, json_t *req, const char *peer, int64_t now,
                       json_t **resp, char *why, size_t whylen)
{
    *resp = NULL;
    const char *id = json_string_value(json_object_get(req, "node_id"));
    const char *fp = json_string_value(json_object_get(req, "fingerprint"));
    if (!id || !bearer) return refuse(why, whylen, 401, peer, "%s", "heartbeat without node id or token");
    pthread_mutex_lock(&r->mu);
    node *nd = reg_find(r, id);
    int status = 0;
    if (!nd) {
        status = refuse(why, whylen, 401, peer, "unknown node %s (register again)", id);
    } else {
        int cur = secret_equal(bearer, nd->token) && now < nd->token_expires;
        int prev = nd->prev_token[0] && secret_equal(bearer, nd->prev_token) && now < nd->prev_expires;
        if (!cur && !prev)
            status = refuse(why, whylen, 401, peer, "invalid or expired token for node %s", id);
        else if (!fp || strcmp(fp, nd->fingerprint))
            status = refuse(why, whylen, 403, peer, "token of node %s presented by another machine", id);
        else if (strcmp(peer ? peer : "", nd->peer))
            status = refuse(why, whylen, 403, peer, "token of node %s presented from another address", id);
        else if (!cidr_list_allows(&r->cfg.allow, peer))
            status = refuse(why, whylen, 403, peer, "address %s is not in the allowed ranges", peer);
    }
    if (status) { pthread_mutex_unlock(&r->mu); return status; }

    uint64_t seq = (uint64_t)json_integer_value(json_object_get(req, "seq"));
    if (seq && seq <= nd->seq) {
        /* A late or replayed beat says nothing newer; accept it without effect. */
        *resp = json_pack("{s:b}", "ok", 1);
        pthread_mutex_unlock(&r->mu);
        return 200;
    }
    nd->seq = seq;
    nd->last_beat = now;
    nd->silent_reported = 0;
    absorb_report(nd, req, now);
    node_state was = nd->state;
    json_t *ready = json_object_get(req, "ready");
    const char *reason = json_string_value(json_object_get(req, "not_ready_reason"));
    const char *drain_why = json_string_value(json_object_get(req, "draining_reason"));
    if (nd->admin_drained) {
        nd->state = NODE_DRAINING;
        snprintf(nd->state_reason, sizeof nd->state_reason, "drained by an administrator");
    } else if (json_is_true(json_object_get(req, "draining"))) {
        nd->state = NODE_DRAINING;
        snprintf(nd->state_reason, sizeof nd->state_reason, "%s", drain_why ? drain_why : "the worker is draining");
    } else if (ready && !json_is_true(ready)) {
        nd->state = NODE_NOT_READY;
        snprintf(nd->state_reason, sizeof nd->state_reason, "%s", reason ? reason : "self-check failed");
    } else {
        nd->state = NODE_READY;
        nd->state_reason[0] = 0;
    }
    if (was != nd->state)
        log_info("node %s is now %s%s%s", nd->id, node_state_name(nd->state),
                 nd->state_reason[0] ? ": " : "", nd->state_reason);
    /* Rotate at half life; the old token stays valid until it expires. */
    int rotate = now - nd->token_issued >= r->cfg.token_ttl_ms / 2;
    if (rotate && secret_equal(bearer, nd->token)) issue_token(r, nd, now);
    *resp = json_pack("{s:b, s:I}", "ok", 1, "heartbeat_ms", (json_int_t)r->cfg.heartbeat_ms);
    if (rotate) {
        json_object_set_new(*resp, "node_token", json_string(nd->token));
        json_object_set_new(*resp, "token_expires_in_ms", json_integer(nd->token_expires - now));
    }
    reg_catalog_answer(r, nd, req, *resp);
    reg_changed(r);
    pthread_mutex_unlock(&r->mu);
    reg_notify(r);
    return 200;
}

int registry_sweep(registry *r, int64_t now, char (*offline)[40], int max)
{
    int count = 0;
    int64_t limit = r->cfg.heartbeat_ms * r->cfg.missed_beats;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) {
        node *nd = r->nodes[i];
        if (nd->open_until && now >= nd->open_until) {
            nd->open_until = 0;
            nd->half_open = 1;
            nd->probing = 0;
            log_info("node %s: cooldown over, the next request probes it", nd->id);
            reg_changed(r);
        }
        if (nd->external || nd->state == NODE_OFFLINE || now - nd->last_beat <= limit) continue;
        nd->state = NODE_OFFLINE;
        snprintf(nd->state_reason, sizeof nd->state_reason, "no heartbeat for %lld ms",
                 (long long)(now - nd->last_beat));
        log_warn("node %s (%s) is offline: %s", nd->id, nd->name, nd->state_reason);
        if (count < max) snprintf(offline[count], 40, "%s", nd->id);
        count++;
    }
    if (count) reg_changed(r);
    pthread_mutex_unlock(&r->mu);
    return count;
}

static int64_t silent_after_ms(const registry_cfg *cfg)
{
    return cfg->heartbeat_ms * (cfg->missed_beats - 1) + cfg->heartbeat_ms / 2;
}

int registry_silent(registry *r, int64_t now, char (*silent)[40], int max)
{
    int count = 0;
    int64_t after = silent_after_ms(&r->cfg);
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) {
        node *nd = r->nodes[i];
        if (nd->external || nd->state == NODE_OFFLINE || nd->silent_reported || now - nd->last_beat <= after)
            continue;
        nd->silent_reported = 1;
        log_warn("node %s (%s) is silent: no heartbeat for %lld ms; its running work starts again elsewhere", nd->id,
                 nd->name, (long long)(now - nd->last_beat));
        if (count < max) snprintf(silent[count], 40, "%s", nd->id);
        count++;
    }
    if (count) reg_changed(r);
    pthread_mutex_unlock(&r->mu);
    return count;
}

int64_t registry_next_deadline(registry *r, int64_t now)
{
    int64_t next = INT64_MAX;
    int64_t offline_after = r->cfg.heartbeat_ms * r->cfg.missed_beats, silent_after = silent_after_ms(&r->cfg);
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) {
        const node *nd = r->nodes[i];
        if (nd->open_until && nd->open_until < next) next = nd->open_until;
        if (nd->external || nd->state == NODE_OFFLINE) continue;
        int64_t due = nd->last_beat + (nd->silent_reported ? offline_after : silent_after) + 1;
        if (due < next) next = due;
    }
    pthread_mutex_unlock(&r->mu);
    return next < now ? now : next;
}

static const char *breaker_name(const node *nd)
{
    return nd->open_until ? "open" : nd->half_open ? "half_open" : "closed";
}

void registry_mark_unreachable(registry *r, const char *node_id, const char *reason, int64_t now)
{
    pthread_mutex_lock(&r->mu);
    node *nd = reg_find(r, node_id);
    if (nd) {
        if (nd->state == NODE_READY) {
            nd->state = NODE_NOT_READY;
            snprintf(nd->state_reason, sizeof nd->state_reason, "%s", reason);
            log_warn("node %s is not ready until its next heartbeat: %s", nd->id, reason);
        }
        nd->fails++;
        if (nd->half_open || nd->fails >= r->cfg.breaker_failures) {
            if (!nd->cooldown_ms) nd->cooldown_ms = r->cfg.breaker_cooldown_ms;
            nd->open_until = now + nd->cooldown_ms;
            log_warn("node %s: circuit open for %lld ms after %d failure(s) in a row (%s)", nd->id,
                     (long long)nd->cooldown_ms, nd->fails, reason);
            if (nd->cooldown_ms < r->cfg.breaker_cooldown_ms * 16) nd->cooldown_ms *= 2;
            nd->half_open = nd->probing = 0;
        }
    }
    pthread_mutex_unlock(&r->mu);
}

int registry_set_drain(registry *r, const char *node_id, int drain, int64_t now)
{
    (void)now;
    pthread_mutex_lock(&r->mu);
    node *nd = reg_find(r, node_id);
    if (!nd) { pthread_mutex_unlock(&r->mu); return -1; }
    nd->admin_drained = drain;
    if (drain && nd->state != NODE_OFFLINE) {
        nd->state = NODE_DRAINING;
        snprintf(nd->state_reason, sizeof nd->state_reason, "drained by an administrator");
    } else if (!drain && nd->state == NODE_DRAINING) {
        /* Ready again on its next heartbeat, which tells whether it is fit. */
        nd->state = NODE_NOT_READY;
        snprintf(nd->state_reason, sizeof nd->state_reason, "undrained; waiting for its next heartbeat");
    }
    log_info("node %s %s by an administrator", nd->id, drain ? "drained" : "undrained");
    reg_changed(r);
    pthread_mutex_unlock(&r->mu);
    reg_notify(r);
    return 0;
}

int registry_forget(registry *r, const char *node_id, int force)
{
    pthread_mutex_lock(&r->mu);
    int idx = -1;
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->nodes[i]->id, node_id)) idx = i;
    if (idx < 0) { pthread_mutex_unlock(&r->mu); return -1; }
    node *nd = r->nodes[idx];
    if (nd->state != NODE_OFFLINE && !force) { pthread_mutex_unlock(&r->mu); return -2; }
    log_info("node %s (%s) forgotten by an administrator", nd->id, nd->name);
    node_free(nd);
    memmove(&r->nodes[idx], &r->nodes[idx + 1], sizeof *r->nodes * (size_t)(r->n - idx - 1));
    r->n--;
    reg_changed(r);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

int registry_model_known(registry *r, const char *model)
{
    pthread_mutex_lock(&r->mu);
    int known = 0;
    for (int i = 0; i < r->n && !known; i++) {
        reg_loadable_need(r->nodes[i], model, &known);
        known |= reg_has_model(r->nodes[i], model);
    }
    pthread_mutex_unlock(&r->mu);
    return known;
}

int registry_model_trusted(registry *r, const char *model)
{
    pthread_mutex_lock(&r->mu);
    int known = 0;
    for (int i = 0; i < r->n && !known; i++) {
        if (r->nodes[i]->external) continue;
        reg_loadable_need(r->nodes[i], model, &known);
        known |= reg_has_model(r->nodes[i], model);
    }
    pthread_mutex_unlock(&r->mu);
    return known;
}

int registry_add_external(registry *r, const char *name, const char *base_url, const char *api_key,
                          const char *const *models, int nmodels, int slots, int64_t now)
{
    char id[40];
    snprintf(id, sizeof id, "cloud-%.33s", name);
    pthread_mutex_lock(&r->mu);
    node *nd = NULL;
    if (reg_find(r, id) || (r->n == r->cap && grow_nodes(r)) || !(nd = calloc(1, sizeof *nd))) {
        pthread_mutex_unlock(&r->mu);
        return -1;
    }
    snprintf(nd->id, sizeof nd->id, "%s", id);
    snprintf(nd->name, sizeof nd->name, "%s", name);
    snprintf(nd->address, sizeof nd->address, "%s", base_url);
    snprintf(nd->token, sizeof nd->token, "%s", api_key ? api_key : "");
    nd->external = 1;
    nd->state = NODE_READY;
    nd->registered_at = nd->last_beat = now;
    nd->slots = slots > 0 ? slots : 16;
    nd->temp_c = -1;
    nd->models = calloc((size_t)(nmodels > 0 ? nmodels : 1), sizeof *nd->models);
    for (int i = 0; nd->models && i < nmodels; i++) nd->models[nd->nmodels++] = strdup(models[i]);
    nd->gpus = json_array();
    nd->engines = json_array();
    nd->loadable_json = json_array();
    r->nodes[r->n++] = nd;
    log_info("external backend %s at %s serves %d model(s); private requests never go there", id, base_url, nmodels);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

double registry_drain_rate(registry *r, int64_t now)
{
    pthread_mutex_lock(&r->mu);
    int recent = 0;
    for (int i = 0; i < r->drain_n; i++)
        if (now - r->drain[i] <= 60000) recent++;
    pthread_mutex_unlock(&r->mu);
    return recent / 60.0;
}

void registry_counts(registry *r, int counts[NODE_STATES])
{
    memset(counts, 0, sizeof(int) * NODE_STATES);
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) counts[r->nodes[i]->state]++;
    pthread_mutex_unlock(&r->mu);
}

json_t *registry_nodes_json(registry *r, int64_t now)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) {
        node *nd = r->nodes[i];
        json_t *models = json_array();
        for (int j = 0; j < nd->nmodels; j++) json_array_append_new(models, json_string(nd->models[j]));
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:i, s:i, s:i, s:O, s:O, s:o, s:I, s:I}",
                              "id", nd->id, "name", nd->name, "address", nd->address,
                              "state", node_state_name(nd->state),
                              "heartbeat_age_ms", (json_int_t)(now - nd->last_beat),
                              "inflight", nd->inflight, "worker_inflight", nd->reported_inflight,
                              "slots", nd->slots, "gpus", nd->gpus, "engines", nd->engines,
                              "models", models, "free_vram_bytes", (json_int_t)nd->free_vram,
                              "total_vram_bytes", (json_int_t)nd->total_vram);
        if (o) {
            json_object_set_new(o, "state_reason",
                                nd->state_reason[0] ? json_string(nd->state_reason) : json_null());
            json_object_set_new(o, "loadable", nd->loadable_json ? json_incref(nd->loadable_json) : json_array());
            json_object_set_new(o, "breaker", json_string(breaker_name(nd)));
            json_object_set_new(o, "admin_drained", json_boolean(nd->admin_drained));
            json_object_set_new(o, "trust", json_string(nd->external ? "external" : "trusted"));
            json_object_set_new(o, "engine_busy", json_integer(nd->engine_busy));
            json_object_set_new(o, "engine_queued", json_integer(nd->engine_queued));
            json_object_set_new(o, "profile", profile_json(&nd->prof, now));
            json_object_set_new(o, "consecutive_failures", json_integer(nd->fails));
            reg_node_catalog_json(r, nd, o);
            json_object_set_new(o, "files", nd->files ? json_incref(nd->files) : json_array());
            json_object_set_new(o, "transfers", nd->transfers ? json_incref(nd->transfers) : json_array());
            json_array_append_new(arr, o);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return arr;
}

json_t *registry_models_json(registry *r, int64_t now)
{
    (void)now;
    json_t *data = json_array();
    json_t *seen = json_object();
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) {
        node *nd = r->nodes[i];
        if (nd->state == NODE_OFFLINE) continue;
        /* Loaded models list their nodes under "nodes"; models a node can
         * start list it under "loadable_on". */
        for (int k = 0; k < nd->nmodels + nd->nloadable; k++) {
            const char *name = k < nd->nmodels ? nd->models[k] : nd->loadable[k - nd->nmodels];
            if (!reg_hash_ok(r, nd, name)) continue; /* listed under the entry's status instead */
            json_t *entry = json_object_get(seen, name);
            if (!entry) {
                entry = json_pack("{s:s, s:s, s:s, s:[], s:[]}", "id", name, "object", "model", "owned_by",
                                  "gpupool", "nodes", "loadable_on");
                json_object_set_new(seen, name, entry);
                json_array_append(data, entry);
            }
            json_array_append_new(json_object_get(entry, k < nd->nmodels ? "nodes" : "loadable_on"),
                                  json_string(nd->id));
        }
    }
    reg_models_catalog(r, data, seen);
    pthread_mutex_unlock(&r->mu);
    json_decref(seen);
    return json_pack("{s:s, s:o}", "object", "list", "data", data);
}
