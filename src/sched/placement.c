/* sched/placement: see placement.h. */
#include "sched/placement.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the pool assumes before it has measured anything: a 7-8B model on a
 * consumer card, a model load from local disk, and a gigabit LAN. */
#define DEFAULT_TTFT_MS 300.0
#define DEFAULT_TPS 30.0
#define DEFAULT_LOAD_MS 20000.0
#define DEFAULT_MAX_TOKENS 256.0
#define DEFAULT_LINK_BYTES_PER_MS 100000.0
/* Passing over a free node needs figures for it, not the defaults. */
#define DEFER_MIN_SAMPLES 3

int place_policy_parse(const char *s, place_policy *out)
{
    if (!s) return -1;
    if (!strcmp(s, "gpupool") || !strcmp(s, "score")) *out = POLICY_SCORE;
    else if (!strcmp(s, "round-robin") || !strcmp(s, "rr")) *out = POLICY_ROUND_ROBIN;
    else if (!strcmp(s, "least-connections") || !strcmp(s, "lc")) *out = POLICY_LEAST_CONN;
    else return -1;
    return 0;
}

const char *place_policy_name(place_policy p)
{
    static const char *names[] = {"gpupool", "round-robin", "least-connections"};
    return (unsigned)p < 3 ? names[p] : "unknown";
}

void place_weights_default(place_weights *w)
{
    *w = (place_weights){.speed = 1, .affinity = 1, .load = 1, .link = 1, .success = 2, .temp = 1,
                         .hot_c = 83, .defer = 0.5};
}

int place_weights_parse(const char *spec, place_weights *w, char *err, size_t errlen)
{
    char *copy = strdup(spec ? spec : ""), *save = NULL;
    if (!copy) return -1;
    int rc = 0;
    for (char *kv = strtok_r(copy, ",", &save); kv && !rc; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        char *end = NULL;
        double v = eq ? strtod(eq + 1, &end) : 0;
        if (!eq || end == eq + 1 || *end || v < 0 || v > 1000) {
            snprintf(err, errlen, "'%s' is not KEY=NUMBER (0..1000)", kv);
            rc = -1;
            break;
        }
        *eq = 0;
        if (!strcmp(kv, "speed")) w->speed = v;
        else if (!strcmp(kv, "affinity")) w->affinity = v;
        else if (!strcmp(kv, "load")) w->load = v;
        else if (!strcmp(kv, "link")) w->link = v;
        else if (!strcmp(kv, "success")) w->success = v;
        else if (!strcmp(kv, "temp")) w->temp = v;
        else if (!strcmp(kv, "hot_c")) w->hot_c = (int)v;
        else if (!strcmp(kv, "defer")) w->defer = v;
        else {
            snprintf(err, errlen, "unknown weight '%s' (speed, affinity, load, link, success, temp, hot_c, defer)",
                     kv);
            rc = -1;
        }
    }
    free(copy);
    return rc;
}

static int fits(const place_candidate *c) { return c->loadable && c->need_bytes <= c->free_vram; }

static int slots_of(const place_candidate *c) { return c->slots > 0 ? c->slots : 1; }

/* Could serve the request, leaving slots aside. */
static int eligible(const place_candidate *c)
{
    return c->ready && !c->excluded && !c->mismatch && (c->has_model || fits(c));
}

static int has_free_slot(const place_candidate *c) { return c->inflight < slots_of(c); }

static int qualifies(const place_cfg *cfg, const place_candidate *c)
{
    return eligible(c) && (cfg->policy != POLICY_SCORE || has_free_slot(c));
}

static double or_default(double v, double prior, double fallback)
{
    return v > 0 ? v : prior > 0 ? prior : fallback;
}

double placement_service_ms(const place_request *rq, const place_candidate *c)
{
    double ttft = or_default(c->ttft_ms, rq->prior_ttft_ms, DEFAULT_TTFT_MS);
    double tps = or_default(c->tps, rq->prior_tps, DEFAULT_TPS);
    double tokens = rq->max_tokens > 0 ? rq->max_tokens : DEFAULT_MAX_TOKENS;
    return ttft + tokens * 1000.0 / tps;
}

/* Requests on the node as the busier of the two counts says: the engine may
 * serve people who bypass the pool. */
static int occupancy(const place_candidate *c)
{
    int busy = c->engine_busy > c->inflight ? c->engine_busy : c->inflight;
    return busy + (c->engine_queued > 0 ? c->engine_queued : 0);
}

double placement_score(const place_weights *w, const place_request *rq, const place_candidate *c)
{
    double service = placement_service_ms(rq, c);
    double cold = c->has_model ? 0 : or_default(c->load_ms, rq->prior_load_ms, DEFAULT_LOAD_MS);
    if (c->evicting) cold *= 1.5;
    int occ = occupancy(c), slots = slots_of(c);
    /* With every slot taken, requests already waiting for this node are in
     * line before this one too. */
    if (occ >= slots && rq->queued_ahead > 0) occ += rq->queued_ahead;
    /* Waiting for a slot: until the first running request should end (when
     * the registry knows), or about a (slots+1)th of a request's time; then
     * a slot's share of each request in line before this one.  And sharing
     * the engine's batch slows each request down somewhat. */
    double wait = 0;
    if (occ >= slots && c->busy_until_ms > 0) wait = c->busy_until_ms + (occ - slots) * service / slots;
    else if (occ >= slots) wait = (occ - slots + 1) * service / (slots + 1);
    double shared = 0.25 * service * (occ < slots ? occ : slots) / slots;
    double link = c->link_bytes_per_ms > 0 ? c->link_bytes_per_ms : DEFAULT_LINK_BYTES_PER_MS;
    double xfer = rq->payload_bytes > 0 ? rq->payload_bytes / link : 0;
    double s = w->speed * service + w->affinity * cold + w->load * (wait + shared) + w->link * xfer;
    if (c->success >= 0 && w->success > 0) s /= pow(c->success > 0.05 ? c->success : 0.05, w->success);
    if (c->temp_c >= 0 && w->hot_c > 0 && c->temp_c >= w->hot_c) s *= 1 + w->temp * 0.1 * (c->temp_c - w->hot_c + 1);
    if (c->throttled) s *= 1 + w->temp;
    /* Not measured here yet while others are: judged by the best figures in
     * the pool, and a little ahead of them, so it is tried once rather than
     * losing every tie to a node already known. */
    if (c->tps <= 0 && c->ttft_ms <= 0 && rq->prior_tps > 0) s *= 0.9;
    return s;
}

static int id_cmp(const place_candidate *a, const place_candidate *b)
{
    return strcmp(a->id ? a->id : "", b->id ? b->id : "");
}

static int pick_score(const place_cfg *cfg, const place_request *rq, const place_candidate *c, size_t n,
                      double *est_ms)
{
    int best = PLACE_NONE;
    double best_s = 0, busy_s = -1;
    for (size_t i = 0; i < n; i++) {
        if (!eligible(&c[i])) continue;
        double s = placement_score(&cfg->w, rq, &c[i]);
        if (!has_free_slot(&c[i])) {
            /* Its score counts the wait for a slot. */
            if (busy_s < 0 || s < busy_s) busy_s = s;
            continue;
        }
        /* Ties: the most free VRAM (room to grow), then the id (stable). */
        int better = best < 0 || s < best_s;
        if (!better && s == best_s)
            better = c[i].free_vram != c[best].free_vram ? c[i].free_vram > c[best].free_vram
                                                         : id_cmp(&c[i], &c[best]) < 0;
        if (better) {
            best = (int)i;
            best_s = s;
        }
    }
    if (best >= 0 && cfg->w.defer > 0 && busy_s >= 0 && c[best].samples >= DEFER_MIN_SAMPLES) {
        int prio = rq->priority < 0 ? 0 : rq->priority > 9 ? 9 : rq->priority;
        double defer = cfg->w.defer + (1 - cfg->w.defer) * prio / 10.0;
        if (busy_s < defer * best_s) return PLACE_DEFER;
    }
    if (best >= 0 && est_ms) *est_ms = placement_service_ms(rq, &c[best]);
    return best;
}

static int pick_round_robin(const place_cfg *cfg, const place_request *rq, const place_candidate *c, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += qualifies(cfg, &c[i]);
    if (!k) return PLACE_NONE;
    size_t want = rq->rr_ticket % k;
    for (size_t i = 0; i < n; i++)
        if (qualifies(cfg, &c[i]) && want-- == 0) return (int)i;
    return PLACE_NONE;
}

static int pick_least_conn(const place_cfg *cfg, const place_candidate *c, size_t n)
{
    int best = PLACE_NONE;
    for (size_t i = 0; i < n; i++) {
        if (!qualifies(cfg, &c[i])) continue;
        if (best < 0 || c[i].inflight < c[best].inflight ||
            (c[i].inflight == c[best].inflight && id_cmp(&c[i], &c[best]) < 0))
            best = (int)i;
    }
    return best;
}

int placement_pick(const place_cfg *cfg, const place_request *rq, const place_candidate *c, size_t n,
                   double *est_ms)
{
    int pick;
    switch (cfg->policy) {
    case POLICY_ROUND_ROBIN: pick = pick_round_robin(cfg, rq, c, n); break;
    case POLICY_LEAST_CONN: pick = pick_least_conn(cfg, c, n); break;
    default: return pick_score(cfg, rq, c, n, est_ms);
    }
    if (pick >= 0 && est_ms) *est_ms = placement_service_ms(rq, &c[pick]);
    return pick;
}

place_block placement_why(const place_cfg *cfg, const place_candidate *c, size_t n)
{
    int serves = 0, usable = 0, could_start = 0;
    for (size_t i = 0; i < n; i++) {
        /* A node with another file of the model does not serve it at all. */
        if ((!c[i].has_model && !c[i].loadable) || c[i].mismatch) continue;
        serves = 1;
        if (eligible(&c[i])) usable = 1;
        if (c[i].loadable && !c[i].has_model) could_start = 1;
        if (qualifies(cfg, &c[i])) return PLACE_OK;
    }
    if (!serves) return PLACE_NO_MODEL;
    if (usable) return PLACE_BUSY;
    return could_start ? PLACE_NO_FIT : PLACE_UNAVAILABLE;
}
