/* policy/budget: see budget.h.  The minute window is 60 one-second buckets,
 * so it slides with a second's granularity in constant memory per key. */
#include "policy/budget.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/opts.h"

#define WINDOW_S 60

typedef struct spend {
    char owner[40];
    int has_limits;
    budget_limits lim;
    char day[16];
    int64_t requests_day, tokens_day;
    double cost_day;
    int64_t bucket_sec[WINDOW_S];
    int64_t bucket_n[WINDOW_S];
} spend;

struct budget {
    pthread_mutex_t mu;
    int has_default;
    budget_limits def;
    spend *keys;
    int n, cap;
};

const char *budget_level_name(budget_level l)
{
    return l == BUDGET_HARD ? "hard" : l == BUDGET_SOFT ? "soft" : "ok";
}

budget *budget_new(void)
{
    budget *b = calloc(1, sizeof *b);
    if (b) pthread_mutex_init(&b->mu, NULL);
    return b;
}

void budget_free(budget *b)
{
    if (!b) return;
    pthread_mutex_destroy(&b->mu);
    free(b->keys);
    free(b);
}

int budget_limits_parse(const char *spec, budget_limits *out, char *err, size_t errlen)
{
    *out = (budget_limits){.soft = 0.8};
    char *copy = strdup(spec), *save = NULL;
    if (!copy) { snprintf(err, errlen, "out of memory"); return -1; }
    int rc = 0, any = 0;
    for (char *kv = strtok_r(copy, ",", &save); kv && !rc; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        long v;
        char *end;
        if (!eq) { rc = -1; break; }
        *eq++ = 0;
        any = 1;
        if (!strcmp(kv, "rpm") && !opts_parse_int(eq, 0, 100000000, &v)) out->rpm = v;
        else if (!strcmp(kv, "tokens-day") && !opts_parse_int(eq, 0, 2000000000000L, &v)) out->tokens_day = v;
        else if (!strcmp(kv, "cost-day")) {
            out->cost_day = strtod(eq, &end);
            if (end == eq || *end || out->cost_day < 0) rc = -1;
        } else if (!strcmp(kv, "soft")) {
            out->soft = strtod(eq, &end);
            if (end == eq || *end || out->soft <= 0 || out->soft > 1) rc = -1;
        } else rc = -1;
    }
    free(copy);
    if (rc || !any) {
        snprintf(err, errlen, "a budget wants rpm=N,tokens-day=N,cost-day=X,soft=F (soft in (0,1]), not '%s'", spec);
        return -1;
    }
    return 0;
}

/* Caller holds the lock.  NULL only when memory ran out. */
static spend *find(budget *b, const char *owner, int create)
{
    for (int i = 0; i < b->n; i++)
        if (!strcmp(b->keys[i].owner, owner)) return &b->keys[i];
    if (!create) return NULL;
    if (b->n == b->cap) {
        int cap = b->cap ? b->cap * 2 : 16;
        spend *k = realloc(b->keys, (size_t)cap * sizeof *k);
        if (!k) return NULL;
        b->keys = k;
        b->cap = cap;
    }
    spend *s = &b->keys[b->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->owner, sizeof s->owner, "%s", owner);
    return s;
}

/* The day's counters start again when the date changes. */
static void roll_day(spend *s, const char *day)
{
    if (!strcmp(s->day, day)) return;
    snprintf(s->day, sizeof s->day, "%s", day);
    s->requests_day = s->tokens_day = 0;
    s->cost_day = 0;
}

static int64_t window_count(const spend *s, int64_t now_ms)
{
    int64_t sec = now_ms / 1000, n = 0;
    for (int i = 0; i < WINDOW_S; i++)
        if (s->bucket_n[i] && s->bucket_sec[i] > sec - WINDOW_S) n += s->bucket_n[i];
    return n;
}

int budget_set_limits(budget *b, const char *owner, const budget_limits *l)
{
    pthread_mutex_lock(&b->mu);
    int rc = 0;
    if (!*owner || !strcmp(owner, "default")) {
        b->def = *l;
        b->has_default = 1;
    } else {
        spend *s = find(b, owner, 1);
        if (s) {
            s->lim = *l;
            s->has_limits = 1;
        } else rc = -1;
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}

int budget_configured(const budget *b)
{
    if (!b) return 0;
    if (b->has_default) return 1;
    for (int i = 0; i < b->n; i++)
        if (b->keys[i].has_limits) return 1;
    return 0;
}

static const budget_limits *limits_of(const budget *b, const spend *s)
{
    if (s && s->has_limits) return &s->lim;
    return b->has_default ? &b->def : NULL;
}

/* Caller holds the lock; s may be NULL (nothing spent yet). */
static budget_view view_of(const budget *b, const spend *s, int64_t now_ms)
{
    budget_view v = {.level = BUDGET_OK, .limit = ""};
    const budget_limits *l = limits_of(b, s);
    if (!l) return v;
    v.limited = 1;
    struct { const char *name; double used, cap; } dims[] = {
        {"rpm", s ? (double)window_count(s, now_ms) : 0, (double)l->rpm},
        {"tokens-day", s ? (double)s->tokens_day : 0, (double)l->tokens_day},
        {"cost-day", s ? s->cost_day : 0, l->cost_day},
    };
    double best = -1;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        if (dims[i].cap <= 0) continue;
        double share = dims[i].used / dims[i].cap;
        if (share > best) {
            best = share;
            v.limit = dims[i].name;
            v.share = share;
        }
    }
    if (best >= 1) v.level = BUDGET_HARD;
    else if (best >= l->soft) v.level = BUDGET_SOFT;
    return v;
}

budget_view budget_check(budget *b, const char *owner, int64_t now_ms, const char *day)
{
    pthread_mutex_lock(&b->mu);
    spend *s = find(b, owner, 0);
    if (s) roll_day(s, day);
    budget_view v = view_of(b, s, now_ms);
    pthread_mutex_unlock(&b->mu);
    return v;
}

void budget_charge_request(budget *b, const char *owner, int64_t now_ms, const char *day)
{
    pthread_mutex_lock(&b->mu);
    spend *s = find(b, owner, 1);
    if (s) {
        roll_day(s, day);
        int64_t sec = now_ms / 1000;
        int i = (int)(sec % WINDOW_S);
        if (s->bucket_sec[i] != sec) {
            s->bucket_sec[i] = sec;
            s->bucket_n[i] = 0;
        }
        s->bucket_n[i]++;
        s->requests_day++;
    }
    pthread_mutex_unlock(&b->mu);
}

void budget_charge_usage(budget *b, const char *owner, const char *day, int64_t tokens, double cost)
{
    pthread_mutex_lock(&b->mu);
    spend *s = find(b, owner, 1);
    if (s) {
        roll_day(s, day);
        s->tokens_day += tokens > 0 ? tokens : 0;
        s->cost_day += cost > 0 ? cost : 0;
    }
    pthread_mutex_unlock(&b->mu);
}

void budget_restore(budget *b, const char *owner, const char *day, int64_t requests, int64_t tokens, double cost)
{
    pthread_mutex_lock(&b->mu);
    spend *s = find(b, owner, 1);
    if (s) {
        roll_day(s, day);
        s->requests_day = requests;
        s->tokens_day = tokens;
        s->cost_day = cost;
    }
    pthread_mutex_unlock(&b->mu);
}

static json_t *limit_or_null(double v, int integer)
{
    if (v <= 0) return json_null();
    return integer ? json_integer((json_int_t)v) : json_real(v);
}

json_t *budget_json(budget *b, const char *owner, int64_t now_ms, const char *day)
{
    pthread_mutex_lock(&b->mu);
    spend *s = find(b, owner, 0);
    if (s) roll_day(s, day);
    budget_view v = view_of(b, s, now_ms);
    const budget_limits *l = limits_of(b, s);
    json_t *limits = l ? json_pack("{s:o, s:o, s:o, s:f}", "requests_per_minute", limit_or_null((double)l->rpm, 1),
                                   "tokens_per_day", limit_or_null((double)l->tokens_day, 1), "cost_per_day",
                                   limit_or_null(l->cost_day, 0), "soft", l->soft)
                       : json_null();
    json_t *j = json_pack("{s:s, s:s, s:s, s:o, s:{s:I, s:I, s:I, s:f}, s:s, s:o, s:f}", "object", "budget", "key",
                          owner, "day", day, "limits", limits, "used", "requests_last_minute",
                          (json_int_t)(s ? window_count(s, now_ms) : 0), "requests_today",
                          (json_int_t)(s ? s->requests_day : 0), "tokens_today", (json_int_t)(s ? s->tokens_day : 0),
                          "cost_today", s ? s->cost_day : 0.0, "level", budget_level_name(v.level), "nearest_limit",
                          *v.limit ? json_string(v.limit) : json_null(), "share", v.share);
    pthread_mutex_unlock(&b->mu);
    return j;
}

void budget_render_metrics(budget *b, buf *out, int64_t now_ms, const char *day)
{
    pthread_mutex_lock(&b->mu);
    buf_printf(out, "# HELP gpupool_budget_tokens_today Cloud tokens charged today, by API key.\n"
                    "# TYPE gpupool_budget_tokens_today gauge\n");
    for (int i = 0; i < b->n; i++) {
        roll_day(&b->keys[i], day);
        buf_printf(out, "gpupool_budget_tokens_today{key=\"%s\"} %lld\n", b->keys[i].owner,
                   (long long)b->keys[i].tokens_day);
    }
    buf_printf(out, "# HELP gpupool_budget_cost_today Cloud cost charged today, by API key.\n"
                    "# TYPE gpupool_budget_cost_today gauge\n");
    for (int i = 0; i < b->n; i++)
        buf_printf(out, "gpupool_budget_cost_today{key=\"%s\"} %.6f\n", b->keys[i].owner, b->keys[i].cost_day);
    buf_printf(out, "# HELP gpupool_budget_requests_last_minute Cloud requests in the last minute, by API key.\n"
                    "# TYPE gpupool_budget_requests_last_minute gauge\n");
    for (int i = 0; i < b->n; i++)
        buf_printf(out, "gpupool_budget_requests_last_minute{key=\"%s\"} %lld\n", b->keys[i].owner,
                   (long long)window_count(&b->keys[i], now_ms));
    buf_printf(out, "# HELP gpupool_budget_level Budget level by API key: 0 ok, 1 soft threshold passed, 2 hard cap.\n"
                    "# TYPE gpupool_budget_level gauge\n");
    for (int i = 0; i < b->n; i++)
        buf_printf(out, "gpupool_budget_level{key=\"%s\"} %d\n", b->keys[i].owner,
                   (int)view_of(b, &b->keys[i], now_ms).level);
    pthread_mutex_unlock(&b->mu);
}
