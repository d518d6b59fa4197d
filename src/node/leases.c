/* node/leases: the half of the registry that hands out node slots (see
 * registry.h): it turns each node into a placement candidate for one model,
 * asks sched/placement, keeps the lease and the line of requests waiting for
 * a slot, and folds what finished calls measured into the nodes' profiles.
 * The registry's state lives in registry_int.h, shared with registry.c. */
#include "node/registry.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/registry_int.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/str.h"

/* What the worker said about a model it can start (need, slots, the models
 * starting it would stop), or NULL. */
static json_t *loadable_entry(const node *nd, const char *model)
{
    size_t i;
    json_t *l;
    json_array_foreach(nd->loadable_json, i, l) {
        const char *name = json_string_value(json_object_get(l, "model"));
        if (name && !strcmp(name, model)) return l;
    }
    return NULL;
}

static int excluded(const char *id, const char *const *ex, int nex)
{
    for (int i = 0; i < nex; i++)
        if (ex[i] && !strcmp(ex[i], id)) return 1;
    return 0;
}

/* The pool's figures for a model, for nodes that have not measured it: the
 * best any node measured.  Optimistic on purpose, so that an untried node
 * gets tried rather than losing every tie to one already measured.
 * Caller holds the lock. */
static void pool_priors(registry *r, const char *model, place_request *pr)
{
    pr->prior_ttft_ms = pr->prior_tps = pr->prior_load_ms = 0;
    for (int i = 0; i < r->n; i++) {
        const model_speed *m = profile_speed(&r->nodes[i]->prof, model);
        if (!m) continue;
        if (m->ttft_ms > 0 && (!pr->prior_ttft_ms || m->ttft_ms < pr->prior_ttft_ms)) pr->prior_ttft_ms = m->ttft_ms;
        if (m->tps > pr->prior_tps) pr->prior_tps = m->tps;
        if (m->load_ms > 0 && (!pr->prior_load_ms || m->load_ms < pr->prior_load_ms)) pr->prior_load_ms = m->load_ms;
    }
}

static place_request to_place_request(registry *r, const reg_request *rq)
{
    place_request pr = {.prompt_tokens = rq->prompt_tokens, .max_tokens = rq->max_tokens,
                        .payload_bytes = rq->payload_bytes, .rr_ticket = r->rr_ticket, .priority = rq->priority,
                        .queued_ahead = rq->queued_ahead};
    pool_priors(r, rq->model, &pr);
    return pr;
}

/* A success rate that a single early failure does not sink: four virtual
 * successes stand in for the calls not yet seen. */
static double smoothed_success(const node *nd, int64_t now)
{
    int calls = 0;
    double rate = profile_success_rate(&nd->prof, now, &calls);
    if (calls == 0) return -1;
    return (rate * calls + 4) / (calls + 4);
}

/* The node as one model sees it: the slots of the engines serving that
 * model, their own load, and the requests the pool has out for it there,
 * with when the first of those should end.  A node runs an engine per
 * model, so one model's full engine leaves another's free.  A model not
 * running yet has one slot: the request that starts it; the rest wait for
 * the start to finish rather than all paying for it. */
typedef struct model_view {
    int slots, busy, queued, inflight;
    double first_free_ms;
} model_view;

static int lists(json_t *models, const char *model)
{
    size_t i;
    json_t *m;
    json_array_foreach(models, i, m) if (json_string_value(m) && !strcmp(json_string_value(m), model)) return 1;
    return 0;
}

static model_view view_for(const node *nd, const char *model, int64_t now)
{
    model_view v = {0};
    if (nd->external) {
        v.slots = nd->slots;
        v.inflight = nd->inflight;
    } else {
        size_t i;
        json_t *e;
        json_array_foreach(nd->engines, i, e) {
            if (!json_is_true(json_object_get(e, "healthy")) || !lists(json_object_get(e, "models"), model)) continue;
            json_int_t sl = json_integer_value(json_object_get(e, "slots"));
            v.slots += sl > 0 ? (int)sl : 1;
            v.busy += (int)json_integer_value(json_object_get(e, "slots_busy"));
            v.queued += (int)json_integer_value(json_object_get(e, "queued"));
        }
        if (!v.slots) v.slots = 1;
        for (int k = 0; k < nd->nactive; k++)
            v.inflight += !strcmp(nd->active[k].model, model);
        /* More leases than are tracked: the node's own count bounds them. */
        if (nd->nactive == (int)(sizeof nd->active / sizeof nd->active[0]) && nd->inflight > v.inflight)
            v.inflight = nd->inflight;
    }
    if (v.inflight < v.slots) return v;
    /* All taken: the first to end frees one; a lease past its estimate is
     * taken to need a tenth of it more. */
    double best = -1;
    for (int k = 0; k < nd->nactive; k++) {
        if (strcmp(nd->active[k].model, model)) continue;
        double left = nd->active[k].est - (double)(now - nd->active[k].start);
        if (left < nd->active[k].est * 0.1) left = nd->active[k].est * 0.1;
        if (best < 0 || left < best) best = left;
    }
    v.first_free_ms = best > 0 ? best : 0;
    return v;
}

static place_candidate candidate(const registry *r, const node *nd, const reg_request *rq, const char *const *ex,
                                 int nex, int64_t now)
{
    const char *model = rq->model;
    int loadable;
    uint64_t need = reg_loadable_need(nd, model, &loadable);
    int breaker_ok = !nd->open_until && !(nd->half_open && nd->probing);
    const model_speed *m = profile_speed(&nd->prof, model);
    /* A model to be started may stop others there. */
    int evicting = 0;
    json_t *entry = !reg_has_model(nd, model) && loadable ? loadable_entry(nd, model) : NULL;
    if (entry) evicting = json_array_size(json_object_get(entry, "evicts")) > 0;
    model_view v = view_for(nd, model, now);
    return (place_candidate){.id = nd->id, .ready = nd->state == NODE_READY && breaker_ok && !nd->silent_reported,
                             .has_model = reg_has_model(nd, model), .loadable = loadable, .need_bytes = need,
                             .mismatch = !reg_hash_ok(r, nd, model),
                             .excluded = excluded(nd->id, ex, nex) || (rq->trusted_only && nd->external),
                             .inflight = v.inflight, .slots = v.slots, .evicting = evicting,
                             .free_vram = nd->free_vram, .busy_until_ms = v.first_free_ms, .engine_busy = v.busy,
                             .engine_queued = v.queued, .ttft_ms = m ? m->ttft_ms : 0,
                             .tps = m ? m->tps : 0, .load_ms = m ? m->load_ms : 0, .samples = m ? m->samples : 0,
                             .success = smoothed_success(nd, now), .temp_c = nd->temp_c,
                             .throttled = nd->throttled, .link_bytes_per_ms = nd->prof.link_bytes_per_ms};
}

/* Caller holds the lock. */
static place_block try_acquire(registry *r, const reg_request *rq, const char *const *ex, int nex, node_lease *out)
{
    place_candidate stackc[64]; /* not zeroed (10 KB): every entry used is filled below */
    place_candidate *c = r->n <= 64 ? stackc : calloc((size_t)r->n, sizeof *c);
    if (!c) return PLACE_BUSY;
    int64_t now = rq->now ? rq->now : mono_ms();
    /* External backends serve a model only where no live trusted node serves
     * it: the pool's own GPUs first, and private work never leaves them. */
    int trusted_serves = 0;
    for (int i = 0; i < r->n && !trusted_serves; i++) {
        int loadable;
        reg_loadable_need(r->nodes[i], rq->model, &loadable);
        trusted_serves = !r->nodes[i]->external && r->nodes[i]->state != NODE_OFFLINE &&
                         (loadable || reg_has_model(r->nodes[i], rq->model)) && reg_hash_ok(r, r->nodes[i], rq->model);
    }
    reg_request local = *rq;
    local.trusted_only = rq->trusted_only || trusted_serves;
    for (int i = 0; i < r->n; i++) c[i] = candidate(r, r->nodes[i], &local, ex, nex, now);
    place_request pr = to_place_request(r, rq);
    double est = 0;
    int pick = placement_pick(&r->cfg.placement, &pr, c, (size_t)r->n, &est);
    place_block why = pick >= 0 ? PLACE_OK : pick == PLACE_DEFER ? PLACE_DEFERRED
                                                                 : placement_why(&r->cfg.placement, c, (size_t)r->n);
    int cold = pick >= 0 && !c[pick].has_model;
    if (c != stackc) free(c);
    if (pick < 0) return why;
    node *nd = r->nodes[pick];
    if (rq->trusted_only && nd->external) {
        /* Placement excluded it; this is the last line of defence. */
        log_error("refusing to place a private request on external node %s", nd->id);
        return PLACE_UNAVAILABLE;
    }
    nd->inflight++;
    r->rr_ticket++;
    out->seq = ++r->lease_seq;
    if (nd->nactive < (int)(sizeof nd->active / sizeof nd->active[0])) {
        active_lease *a = &nd->active[nd->nactive++];
        *a = (active_lease){.seq = out->seq, .start = now, .est = est};
        str_copy(a->model, sizeof a->model, rq->model);
    }
    if (nd->half_open) nd->probing = 1;
    if (cold) r->cold_starts++;
    str_copy(out->node_id, sizeof out->node_id, nd->id);
    str_copy(out->address, sizeof out->address, nd->address);
    str_copy(out->token, sizeof out->token, nd->token);
    str_copy(out->model, sizeof out->model, rq->model);
    out->cold = cold;
    out->external = nd->external;
    out->est_ms = est;
    return PLACE_OK;
}

place_block registry_acquire(registry *r, const reg_request *rq, const char *const *exclude, int nexclude,
                             node_lease *out)
{
    pthread_mutex_lock(&r->mu);
    place_block b = try_acquire(r, rq, exclude, nexclude, out);
    pthread_mutex_unlock(&r->mu);
    return b;
}

/* Requests waiting for a slot, oldest first.  A waiter may lease only when
 * no other waiter for the same model goes before it: one of higher priority,
 * or of the same priority that came earlier.  So one busy model never
 * blocks the others. */
typedef struct waiter {
    const char *model;
    int priority;
    struct waiter *next;
} waiter;

static int first_for_model(registry *r, const waiter *w)
{
    int earlier = 1;
    for (const waiter *x = r->queue; x; x = x->next) {
        if (x == w) { earlier = 0; continue; }
        if (strcmp(x->model, w->model)) continue;
        if (x->priority > w->priority || (x->priority == w->priority && earlier)) return 0;
    }
    return 1;
}

reg_wait registry_acquire_wait(registry *r, const reg_request *rq, const char *const *exclude, int nexclude,
                               int64_t deadline, int max_waiters, node_lease *out)
{
    pthread_mutex_lock(&r->mu);
    waiter me = {rq->model, rq->priority, NULL};
    place_block b = PLACE_BUSY;
    if (first_for_model(r, &me)) b = try_acquire(r, rq, exclude, nexclude, out);
    if (b == PLACE_OK) { pthread_mutex_unlock(&r->mu); return REG_OK; }
    if (b == PLACE_NO_MODEL) { pthread_mutex_unlock(&r->mu); return REG_NO_MODEL; }
    if (b == PLACE_UNAVAILABLE && nexclude > 0) { pthread_mutex_unlock(&r->mu); return REG_EXHAUSTED; }
    /* Not fitting may be a heartbeat behind an unload that freed the room:
     * give it a heartbeat interval before saying it fits nowhere, and where
     * a node has just stopped an engine (the beat that says so can still
     * show its memory taken, and a worker busy stopping engines beats
     * late) two intervals and at least 2 s. */
    int64_t no_fit_until = 0;
    if (b == PLACE_NO_FIT) {
        int64_t grace = r->cfg.heartbeat_ms, now = mono_ms();
        for (int i = 0; i < r->n; i++)
            if (r->nodes[i]->unloaded_at && now - r->nodes[i]->unloaded_at < 3000)
                grace = 2 * r->cfg.heartbeat_ms > 2000 ? 2 * r->cfg.heartbeat_ms : 2000;
        no_fit_until = now + grace;
        if (no_fit_until > deadline) no_fit_until = deadline;
    }
    if (r->waiters >= max_waiters) { pthread_mutex_unlock(&r->mu); return b == PLACE_NO_FIT ? REG_NO_FIT : REG_QUEUE_FULL; }
    waiter **tail = &r->queue;
    while (*tail) tail = &(*tail)->next;
    *tail = &me;
    r->waiters++;
    reg_wait result = REG_TIMEOUT;
    struct timespec ts = mono_at(no_fit_until ? no_fit_until : deadline);
    for (;;) {
        if (first_for_model(r, &me)) {
            b = try_acquire(r, rq, exclude, nexclude, out);
            if (b == PLACE_OK) { result = REG_OK; break; }
            if (b != PLACE_NO_FIT && no_fit_until) {
                no_fit_until = 0; /* room came: wait as for any slot now */
                ts = mono_at(deadline);
            }
        }
        if (no_fit_until && mono_ms() >= no_fit_until) { result = REG_NO_FIT; break; }
        if (mono_ms() >= deadline || r->stopping) break;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    for (waiter **pp = &r->queue; *pp; pp = &(*pp)->next)
        if (*pp == &me) { *pp = me.next; break; }
    r->waiters--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return result;
}

void registry_release(registry *r, const node_lease *l, int64_t now, int served)
{
    pthread_mutex_lock(&r->mu);
    node *nd = reg_find(r, l->node_id);
    if (nd && nd->inflight > 0) nd->inflight--;
    for (int i = 0; nd && i < nd->nactive; i++)
        if (nd->active[i].seq == l->seq) { nd->active[i] = nd->active[--nd->nactive]; break; }
    if (nd && served) {
        if (nd->half_open) log_info("node %s: probe answered, circuit closed", nd->id);
        nd->fails = 0;
        nd->half_open = nd->probing = 0;
        nd->cooldown_ms = 0;
    } else if (nd && nd->half_open) {
        nd->probing = 0; /* the probe told nothing (e.g. the client left): allow another */
    }
    r->drain[r->drain_i] = now;
    r->drain_i = (r->drain_i + 1) % DRAIN_RING;
    if (r->drain_n < DRAIN_RING) r->drain_n++;
    reg_changed(r);
    pthread_mutex_unlock(&r->mu);
    reg_notify(r);
}

void registry_observe(registry *r, const node_lease *l, int ok, const call_sample *s, int64_t now)
{
    pthread_mutex_lock(&r->mu);
    node *nd = reg_find(r, l->node_id);
    if (nd) {
        profile_observe_outcome(&nd->prof, ok, now);
        if (ok && s) {
            const model_speed *m = profile_speed(&nd->prof, l->model);
            double ttft, tps;
            profile_derive(s, m ? m->ttft_ms : 0, &ttft, &tps);
            if (l->cold) {
                /* The call paid for the start: what it took beyond a warm
                 * call's time is the load.  Its speed figures are skewed. */
                double warm = 0;
                if (m && m->tps > 0)
                    warm = m->ttft_ms + (s->completion_tokens > 0 ? s->completion_tokens : 0) * 1000.0 / m->tps;
                profile_observe_load(&nd->prof, l->model, s->total_ms - warm, now);
            } else {
                profile_observe_speed(&nd->prof, l->model, ttft, tps, now);
            }
        }
    }
    pthread_mutex_unlock(&r->mu);
}

double registry_estimate_ms(registry *r, const reg_request *rq)
{
    pthread_mutex_lock(&r->mu);
    place_request pr = to_place_request(r, rq);
    pthread_mutex_unlock(&r->mu);
    place_candidate none = {.success = -1, .temp_c = -1};
    return placement_service_ms(&pr, &none);
}

uint64_t registry_cold_starts(registry *r)
{
    pthread_mutex_lock(&r->mu);
    uint64_t n = r->cold_starts;
    pthread_mutex_unlock(&r->mu);
    return n;
}

int registry_total_slots(registry *r)
{
    pthread_mutex_lock(&r->mu);
    int n = 0;
    for (int i = 0; i < r->n; i++)
        if (r->nodes[i]->state == NODE_READY) n += r->nodes[i]->slots;
    pthread_mutex_unlock(&r->mu);
    return n;
}

int registry_status_served(long status)
{
    return status >= 200 && status < 500 && status != 401 && status != 403;
}

int registry_waiters(registry *r)
{
    pthread_mutex_lock(&r->mu);
    int w = r->waiters;
    pthread_mutex_unlock(&r->mu);
    return w;
}
