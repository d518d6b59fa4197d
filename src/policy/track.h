/* policy/track: the two-track decision, local or cloud, for one request.
 * Pure: it reads the request's features, the configured rules and the key's
 * budget level, and says where the request goes, which model to ask for, and
 * why (the reason every answer's X-Gpupool-Route carries).
 *
 * The model alias "auto" resolves to the configured local or cloud model.
 * An auto request goes to the cloud when the X-Gpupool-Track header says so,
 * or when it looks complex: enough prompt tokens, a large max_tokens, or a
 * configured keyword in its text.  An explicit model that only the cloud
 * serves goes to the cloud.  Whatever goes to the cloud is then held to the
 * key's budget: past the soft threshold only urgent requests still go, at the
 * hard cap none does, and it runs locally instead (auto's local model).  A
 * private request never goes to the cloud, whatever the rules say. */
#ifndef GPUPOOL_TRACK_H
#define GPUPOOL_TRACK_H

#include <jansson.h>
#include <stdint.h>

#include "policy/budget.h"

#define TRACK_ALIAS "auto"
#define TRACK_MAX_KEYWORDS 32
#define TRACK_MAX_PRICES 16

typedef struct track_price {
    char backend[40];     /* the external node's id, "cloud-NAME" */
    double in_per_m, out_per_m; /* price per million prompt / completion tokens */
} track_price;

typedef struct track_cfg {
    char auto_local[128], auto_cloud[128]; /* what "auto" resolves to; "" = none */
    double prompt_tokens;  /* estimated prompt tokens from which auto is complex; 0 = rule off */
    double max_tokens;     /* requested max_tokens from which auto is complex; 0 = rule off */
    char *keywords[TRACK_MAX_KEYWORDS]; /* text that makes auto complex (ASCII case-insensitive) */
    int nkeywords;
    int urgent_priority;   /* X-Gpupool-Priority from which a request is urgent (default 8) */
    track_price prices[TRACK_MAX_PRICES];
    int nprices;
} track_cfg;

void track_cfg_init(track_cfg *c);
void track_cfg_free(track_cfg *c);
/* One --track-rule: "prompt-tokens=N", "max-tokens=N", "keyword=WORD" or
 * "urgent-priority=N".  Returns 0, or -1 with err set. */
int track_rule_add(track_cfg *c, const char *spec, char *err, size_t errlen);
/* The price of an external backend, per million tokens. */
int track_price_set(track_cfg *c, const char *backend_id, double in_per_m, double out_per_m);
/* What a cloud answer of these tokens cost on that backend (0 without a price). */
double track_cost(const track_cfg *c, const char *backend_id, int64_t prompt_tokens, int64_t completion_tokens);
/* The first keyword found in the request's text (messages' contents, prompt,
 * input), or NULL. */
const char *track_keyword_hit(const track_cfg *c, const json_t *body);

typedef enum track_target { TRACK_LOCAL, TRACK_CLOUD } track_target;

typedef struct track_request {
    int is_auto;               /* the model is the alias */
    int cloud_model;           /* an explicit model that only the cloud serves */
    double prompt_tokens, max_tokens;
    const char *keyword;       /* a keyword the text hit, or NULL */
    const char *hint;          /* X-Gpupool-Track: "cloud", "local" or NULL */
    int urgent;
    const char *private_rule;  /* why it is private; NULL when it is not */
    int cloud_failed;          /* the cloud failed it already: this is the fallback hop */
    int local_failed;          /* local capacity failed it or had no room in time */
} track_request;

typedef struct track_decision {
    track_target target;
    const char *model;         /* the model to ask for; NULL = the request's own */
    const char *kind;          /* the reason's class, for metrics: simple, complex, header, model,
                                * pool, private, budget_soft, budget_hard, fallback, no_cloud */
    char reason[160];          /* e.g. "complex (prompt_tokens 5000 >= 4000)" */
    int refuse;                /* it may not go to the cloud and has no local model: 429 */
} track_decision;

void track_decide(const track_cfg *c, const track_request *rq, const budget_view *bv, track_decision *out);

/* Whether X-Gpupool-Track / X-Gpupool-Urgency values are valid (NULL is). */
int track_hint_valid(const char *hint);
int track_urgency_valid(const char *urgency);

#endif
