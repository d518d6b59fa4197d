/* policy/budget: what each API key may spend on the cloud, and what it has
 * spent.  Pure state behind a mutex: no I/O, no clocks; callers pass the
 * monotonic time (for the requests-per-minute window, a duration) and the
 * local wall date (for the daily counters, which restart when it changes).
 *
 * A limit set holds requests per minute, tokens per day and cost per day
 * (any may be 0 = unlimited) and the soft threshold, a share of each limit.
 * The set for a key is its own when one was given, else the default one; a
 * key without either has no budget.  Only what goes to the cloud is counted:
 * local capacity is never limited by a budget. */
#ifndef GPUPOOL_BUDGET_H
#define GPUPOOL_BUDGET_H

#include <jansson.h>
#include <stdint.h>

#include "util/buf.h"

#define BUDGET_MAX_KEYS 64

typedef struct budget_limits {
    int64_t rpm;          /* cloud requests per minute; 0 = no limit */
    int64_t tokens_day;   /* cloud tokens (prompt + completion) per day; 0 = no limit */
    double cost_day;      /* cloud cost per day, in the prices' currency; 0 = no limit */
    double soft;          /* share of a limit from which non-urgent work stays local (default 0.8) */
} budget_limits;

typedef enum budget_level { BUDGET_OK, BUDGET_SOFT, BUDGET_HARD } budget_level;
const char *budget_level_name(budget_level l);

/* Where a key stands: its level and the limit that set it (the one nearest
 * its cap), e.g. "cost-day" at 0.85 of it. */
typedef struct budget_view {
    budget_level level;
    const char *limit;    /* "rpm", "tokens-day", "cost-day"; "" when none is set */
    double share;         /* used / limit of that one */
    int limited;          /* the key has a limit set at all */
} budget_view;

typedef struct budget budget;

budget *budget_new(void);
void budget_free(budget *b);

/* Parses "rpm=N,tokens-day=N,cost-day=X,soft=F" (any subset, any order).
 * Returns 0, or -1 with err set. */
int budget_limits_parse(const char *spec, budget_limits *out, char *err, size_t errlen);
/* Sets the limits for owner ("" or "default" = every key without its own). */
int budget_set_limits(budget *b, const char *owner, const budget_limits *l);
/* Whether any limit is configured. */
int budget_configured(const budget *b);

/* The level for owner now.  day is the local date, "YYYY-MM-DD". */
budget_view budget_check(budget *b, const char *owner, int64_t now_ms, const char *day);
/* Counts one cloud request in the minute window. */
void budget_charge_request(budget *b, const char *owner, int64_t now_ms, const char *day);
/* Adds a cloud answer's tokens and cost to the day. */
void budget_charge_usage(budget *b, const char *owner, const char *day, int64_t tokens, double cost);
/* Sets the day's counters from the store after a restart. */
void budget_restore(budget *b, const char *owner, const char *day, int64_t requests, int64_t tokens, double cost);

/* GET /v1/budget's object for owner (new reference). */
json_t *budget_json(budget *b, const char *owner, int64_t now_ms, const char *day);
/* gpupool_budget_* gauges for every key seen today. */
void budget_render_metrics(budget *b, buf *out, int64_t now_ms, const char *day);

#endif
