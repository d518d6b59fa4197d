/* api/track: see track.h. */
#include "api/track.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api/coord.h"
#include "api/errors.h"
#include "api/metrics.h"
#include "util/clock.h"
#include "util/log.h"

static const char *const KINDS[] = {"simple", "complex", "header", "model", "pool", "private",
                                    "budget_soft", "budget_hard", "fallback", "no_cloud"};
#define NKINDS (sizeof KINDS / sizeof KINDS[0])

struct api_track {
    track_cfg cfg;
    budget *bud;
    store *st;
    pthread_mutex_t mu;
    uint64_t routed[2][NKINDS];
};

/* Budgets are per local calendar day, as people read their bills. */
static void today(char out[16])
{
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(out, 16, "%Y-%m-%d", &tm);
}

static void restore_row(void *ctx, const char *owner, int64_t requests, int64_t tokens, double cost)
{
    char day[16];
    today(day);
    budget_restore(ctx, owner, day, requests, tokens, cost);
}

api_track *api_track_new(const track_cfg *cfg, budget *b, store *st)
{
    api_track *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->cfg = *cfg;
    t->bud = b;
    t->st = st;
    pthread_mutex_init(&t->mu, NULL);
    char day[16];
    today(day);
    if (st && b && store_spend_load(st, day, restore_row, b) != STORE_OK)
        log_warn("cannot read today's cloud spend: %s", store_errmsg(st));
    return t;
}

void api_track_free(api_track *t)
{
    if (!t) return;
    track_cfg_free(&t->cfg);
    budget_free(t->bud);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

const track_cfg *api_track_cfg(const api_track *t) { return &t->cfg; }

int api_track_features(coord *c, http_req *req, const json_t *body, const char *model, double prompt_tokens,
                       double max_tokens, int priority, const char *private_rule, track_request *out)
{
    memset(out, 0, sizeof *out);
    const char *hint = http_req_header(req, "X-Gpupool-Track");
    const char *urgency = http_req_header(req, "X-Gpupool-Urgency");
    if (!track_hint_valid(hint)) {
        api_bad_request(req, "invalid_value", "X-Gpupool-Track", "X-Gpupool-Track must be \"cloud\", \"local\" or \"auto\"");
        return -1;
    }
    if (!track_urgency_valid(urgency)) {
        api_bad_request(req, "invalid_value", "X-Gpupool-Urgency", "X-Gpupool-Urgency must be \"urgent\" or \"normal\"");
        return -1;
    }
    const track_cfg *cfg = c->track ? &c->track->cfg : NULL;
    out->is_auto = cfg && !strcmp(model, TRACK_ALIAS) && (cfg->auto_local[0] || cfg->auto_cloud[0]);
    out->cloud_model = !out->is_auto && registry_model_known(c->reg, model) && !registry_model_trusted(c->reg, model);
    out->prompt_tokens = prompt_tokens;
    out->max_tokens = max_tokens;
    out->keyword = out->is_auto ? track_keyword_hit(cfg, body) : NULL;
    out->hint = hint && strcasecmp(hint, "auto") ? hint : NULL;
    out->urgent = (urgency && !strcasecmp(urgency, "urgent")) ||
                  (!(urgency && !strcasecmp(urgency, "normal")) && cfg && priority >= cfg->urgent_priority);
    out->private_rule = private_rule;
    return 0;
}

static budget_view view_now(coord *c, const char *owner)
{
    budget_view v = {.level = BUDGET_OK, .limit = ""};
    if (!c->track || !c->track->bud) return v;
    char day[16];
    today(day);
    return budget_check(c->track->bud, owner, mono_ms(), day);
}

void api_track_decide(coord *c, const char *owner, const track_request *rq, track_decision *out)
{
    static const track_cfg none = {.urgent_priority = 8};
    budget_view v = view_now(c, owner);
    track_decide(c->track ? &c->track->cfg : &none, rq, &v, out);
}

int api_track_cloud_allowed(coord *c, const char *owner, int urgent)
{
    budget_view v = view_now(c, owner);
    return v.level == BUDGET_OK || (v.level == BUDGET_SOFT && urgent);
}

static void persist(coord *c, const char *owner, int64_t requests, int64_t tokens, double cost)
{
    char day[16];
    today(day);
    if (c->track->st && store_spend_add(c->track->st, day, owner, requests, tokens, cost) != STORE_OK)
        log_warn("cannot record cloud spend: %s", store_errmsg(c->track->st));
}

void api_track_charge_request(coord *c, const char *owner)
{
    if (!c->track) return;
    char day[16];
    today(day);
    budget_charge_request(c->track->bud, owner, mono_ms(), day);
    persist(c, owner, 1, 0, 0);
}

void api_track_charge_tokens(coord *c, const char *owner, const char *backend, int64_t prompt, int64_t completion)
{
    if (!c->track) return;
    double cost = track_cost(&c->track->cfg, backend, prompt, completion);
    char day[16];
    today(day);
    budget_charge_usage(c->track->bud, owner, day, prompt + completion, cost);
    persist(c, owner, 0, prompt + completion, cost);
}

void api_track_charge_answer(coord *c, const char *owner, const char *backend, const char *body, size_t len,
                             double prompt_est, double completion_est)
{
    int64_t prompt = (int64_t)(prompt_est + 0.5), completion = (int64_t)(completion_est + 0.5);
    json_t *j = body ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *u = json_object_get(j, "usage");
    /* What the backend says it billed wins over our estimate. */
    if (json_is_integer(json_object_get(u, "prompt_tokens")))
        prompt = (int64_t)json_integer_value(json_object_get(u, "prompt_tokens"));
    if (json_is_integer(json_object_get(u, "completion_tokens")))
        completion = (int64_t)json_integer_value(json_object_get(u, "completion_tokens"));
    else if (json_is_integer(json_object_get(u, "total_tokens")))
        completion = (int64_t)json_integer_value(json_object_get(u, "total_tokens")) - prompt;
    json_decref(j);
    api_track_charge_tokens(c, owner, backend, prompt, completion < 0 ? 0 : completion);
}

void api_track_count(coord *c, int cloud, const char *kind)
{
    if (!c->track) return;
    for (size_t i = 0; i < NKINDS; i++)
        if (!strcmp(KINDS[i], kind)) {
            pthread_mutex_lock(&c->track->mu);
            c->track->routed[cloud ? 1 : 0][i]++;
            pthread_mutex_unlock(&c->track->mu);
        }
}

void api_budget_get(coord *c, http_req *req)
{
    char owner[40], day[16];
    coord_owner(c, req, owner);
    today(day);
    budget *b = c->track ? c->track->bud : NULL;
    json_t *j = b ? budget_json(b, owner, mono_ms(), day) : NULL;
    if (!j) {
        api_server_error(req, 500, "store_error", "out of memory building the budget's view");
        return;
    }
    http_respond_json(req, 200, j);
    json_decref(j);
}

void api_track_metrics(coord *c, buf *out)
{
    if (!c->track) return;
    metrics_header(out, "gpupool_route_total", "counter",
                   "Requests routed, by track (local or cloud) and the class of the reason.");
    pthread_mutex_lock(&c->track->mu);
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i < NKINDS; i++)
            if (c->track->routed[t][i])
                buf_printf(out, "gpupool_route_total{track=\"%s\",reason=\"%s\"} %llu\n", t ? "cloud" : "local",
                           KINDS[i], (unsigned long long)c->track->routed[t][i]);
    pthread_mutex_unlock(&c->track->mu);
    char day[16];
    today(day);
    budget_render_metrics(c->track->bud, out, mono_ms(), day);
}
