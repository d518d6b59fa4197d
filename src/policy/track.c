/* policy/track: see track.h. */
#include "policy/track.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/opts.h"

void track_cfg_init(track_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->urgent_priority = 8;
}

void track_cfg_free(track_cfg *c)
{
    for (int i = 0; i < c->nkeywords; i++) free(c->keywords[i]);
    c->nkeywords = 0;
}

int track_rule_add(track_cfg *c, const char *spec, char *err, size_t errlen)
{
    const char *eq = strchr(spec, '=');
    long v;
    if (eq && !strncmp(spec, "keyword=", 8) && eq[1]) {
        if (c->nkeywords >= TRACK_MAX_KEYWORDS) {
            snprintf(err, errlen, "at most %d keyword rules", TRACK_MAX_KEYWORDS);
            return -1;
        }
        c->keywords[c->nkeywords++] = strdup(eq + 1);
        return 0;
    }
    if (eq && !opts_parse_int(eq + 1, 0, 100000000, &v)) {
        size_t klen = (size_t)(eq - spec);
        if (klen == 13 && !strncmp(spec, "prompt-tokens", klen)) { c->prompt_tokens = (double)v; return 0; }
        if (klen == 10 && !strncmp(spec, "max-tokens", klen)) { c->max_tokens = (double)v; return 0; }
        if (klen == 15 && !strncmp(spec, "urgent-priority", klen) && v <= 10) { c->urgent_priority = (int)v; return 0; }
    }
    snprintf(err, errlen, "a track rule is prompt-tokens=N, max-tokens=N, keyword=WORD or urgent-priority=N, not '%s'",
             spec);
    return -1;
}

int track_price_set(track_cfg *c, const char *backend_id, double in_per_m, double out_per_m)
{
    for (int i = 0; i < c->nprices; i++)
        if (!strcmp(c->prices[i].backend, backend_id)) {
            c->prices[i].in_per_m = in_per_m;
            c->prices[i].out_per_m = out_per_m;
            return 0;
        }
    if (c->nprices >= TRACK_MAX_PRICES) return -1;
    track_price *p = &c->prices[c->nprices++];
    snprintf(p->backend, sizeof p->backend, "%s", backend_id);
    p->in_per_m = in_per_m;
    p->out_per_m = out_per_m;
    return 0;
}

double track_cost(const track_cfg *c, const char *backend_id, int64_t prompt_tokens, int64_t completion_tokens)
{
    for (int i = 0; i < c->nprices; i++)
        if (!strcmp(c->prices[i].backend, backend_id))
            return ((double)prompt_tokens * c->prices[i].in_per_m + (double)completion_tokens * c->prices[i].out_per_m) /
                   1e6;
    return 0;
}

/* Every string in v (message contents and their parts, a prompt or its list). */
static const char *hit_in(const track_cfg *c, const json_t *v, int depth)
{
    if (depth > 6) return NULL;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        for (int i = 0; i < c->nkeywords; i++)
            if (strcasestr(s, c->keywords[i])) return c->keywords[i];
        return NULL;
    }
    size_t i;
    json_t *x;
    const char *hit = NULL;
    if (json_is_array(v)) {
        json_array_foreach(v, i, x) if ((hit = hit_in(c, x, depth + 1))) return hit;
    } else if (json_is_object(v)) {
        /* the text, not the role or a part's type */
        const char *fields[] = {"content", "text", NULL};
        for (int k = 0; fields[k]; k++)
            if ((hit = hit_in(c, json_object_get(v, fields[k]), depth + 1))) return hit;
    }
    return NULL;
}

const char *track_keyword_hit(const track_cfg *c, const json_t *body)
{
    if (!c->nkeywords) return NULL;
    const char *fields[] = {"messages", "prompt", "input", NULL};
    for (int k = 0; fields[k]; k++) {
        const char *hit = hit_in(c, json_object_get(body, fields[k]), 0);
        if (hit) return hit;
    }
    return NULL;
}

int track_hint_valid(const char *hint)
{
    return !hint || !strcasecmp(hint, "cloud") || !strcasecmp(hint, "local") || !strcasecmp(hint, "auto");
}

int track_urgency_valid(const char *urgency)
{
    return !urgency || !strcasecmp(urgency, "urgent") || !strcasecmp(urgency, "normal");
}

/* A header value stays printable ASCII: a keyword that is not is named by
 * its position. */
static void keyword_label(const track_cfg *c, const char *kw, char *out, size_t len)
{
    int ascii = 1;
    for (const char *p = kw; *p && ascii; p++) ascii = *p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\';
    if (ascii) { snprintf(out, len, "'%s'", kw); return; }
    int idx = 0;
    for (int i = 0; i < c->nkeywords; i++)
        if (c->keywords[i] == kw) idx = i + 1;
    snprintf(out, len, "#%d", idx);
}

/* Why an auto request wants the cloud (1) or not (0), in kind and reason. */
static int auto_wants_cloud(const track_cfg *c, const track_request *rq, track_decision *d)
{
    if (rq->hint && !strcasecmp(rq->hint, "local")) {
        d->kind = "header";
        snprintf(d->reason, sizeof d->reason, "header (X-Gpupool-Track: local)");
        return 0;
    }
    if (rq->hint && !strcasecmp(rq->hint, "cloud")) {
        d->kind = "header";
        snprintf(d->reason, sizeof d->reason, "header (X-Gpupool-Track: cloud)");
        return 1;
    }
    d->kind = "complex";
    if (c->prompt_tokens > 0 && rq->prompt_tokens >= c->prompt_tokens) {
        snprintf(d->reason, sizeof d->reason, "complex (prompt_tokens %.0f >= %.0f)", rq->prompt_tokens,
                 c->prompt_tokens);
        return 1;
    }
    if (c->max_tokens > 0 && rq->max_tokens >= c->max_tokens) {
        snprintf(d->reason, sizeof d->reason, "complex (max_tokens %.0f >= %.0f)", rq->max_tokens, c->max_tokens);
        return 1;
    }
    if (rq->keyword) {
        char label[80];
        keyword_label(c, rq->keyword, label, sizeof label);
        snprintf(d->reason, sizeof d->reason, "complex (keyword %s)", label);
        return 1;
    }
    d->kind = "simple";
    snprintf(d->reason, sizeof d->reason, "simple");
    return 0;
}

static const char *local_model(const track_cfg *c, const track_request *rq)
{
    if (rq->is_auto || rq->cloud_model) return c->auto_local[0] ? c->auto_local : NULL;
    return NULL;
}

void track_decide(const track_cfg *c, const track_request *rq, const budget_view *bv, track_decision *d)
{
    memset(d, 0, sizeof *d);
    d->target = TRACK_LOCAL;
    if (rq->private_rule) {
        /* Before any rule: nothing sends private work out. */
        d->kind = "private";
        snprintf(d->reason, sizeof d->reason, "private (%s)", rq->private_rule);
        d->model = rq->is_auto ? local_model(c, rq) : NULL;
        d->refuse = rq->is_auto && !d->model;
        return;
    }
    if (!rq->is_auto && !rq->cloud_model) {
        d->kind = "pool";
        snprintf(d->reason, sizeof d->reason, "pool");
        return;
    }
    int wants;
    if (rq->is_auto) {
        wants = auto_wants_cloud(c, rq, d);
        if (wants && !c->auto_cloud[0]) {
            wants = 0;
            d->kind = "no_cloud";
            snprintf(d->reason, sizeof d->reason, "no cloud model for auto");
        }
    } else {
        wants = 1;
        d->kind = "model";
        snprintf(d->reason, sizeof d->reason, "model (only the cloud serves it)");
    }
    int can_cloud = rq->cloud_model || c->auto_cloud[0];
    char was[160];
    snprintf(was, sizeof was, "%s", d->reason);
    if (!wants && rq->local_failed && can_cloud && !rq->cloud_failed) {
        wants = 1;
        d->kind = "fallback";
        snprintf(d->reason, sizeof d->reason, "fallback (local capacity failed; was %.100s)", was);
    } else if (wants && rq->cloud_failed) {
        wants = 0;
        d->kind = "fallback";
        snprintf(d->reason, sizeof d->reason, "fallback (the cloud failed; was %.100s)", was);
    }
    if (wants && bv && bv->level == BUDGET_HARD) {
        wants = 0;
        d->kind = "budget_hard";
        snprintf(d->reason, sizeof d->reason, "budget hard cap (%s at %.0f%%)", bv->limit, bv->share * 100);
    } else if (wants && bv && bv->level == BUDGET_SOFT && !rq->urgent) {
        wants = 0;
        d->kind = "budget_soft";
        snprintf(d->reason, sizeof d->reason, "budget soft threshold (%s at %.0f%%), not urgent", bv->limit,
                 bv->share * 100);
    }
    if (wants) {
        d->target = TRACK_CLOUD;
        d->model = rq->is_auto ? c->auto_cloud : NULL;
        return;
    }
    d->model = local_model(c, rq);
    /* An auto request without a local model, or a cloud-only model with
     * nothing to stand in for it, has nowhere to run. */
    d->refuse = (rq->is_auto || rq->cloud_model) && !d->model;
}
