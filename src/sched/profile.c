/* sched/profile: see profile.h. */
#include "sched/profile.h"

#include <stdio.h>
#include <string.h>

/* New samples count for a fifth: a node that changes speed (a colleague's
 * game, thermal throttling) shows within a few calls, one odd call does not. */
#define ALPHA 0.2
#define LINK_MIN_BYTES 16384.0
#define MIN_TPS_TOKENS 8

static double ewma(double old, double sample)
{
    return old > 0 ? old + ALPHA * (sample - old) : sample;
}

void call_sample_parse_answer(call_sample *s, const char *body, size_t len)
{
    json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *usage = json_object_get(j, "usage"), *timings = json_object_get(j, "timings");
    json_t *ct = json_object_get(usage, "completion_tokens");
    if (json_is_integer(ct)) s->completion_tokens = (int)json_integer_value(ct);
    json_t *pm = json_object_get(timings, "prompt_ms"), *dm = json_object_get(timings, "predicted_ms");
    if (json_is_number(pm)) s->engine_prompt_ms = json_number_value(pm);
    if (json_is_number(dm)) s->engine_decode_ms = json_number_value(dm);
    json_decref(j);
}

int profile_derive(const call_sample *s, double prior_ttft_ms, double *ttft_ms, double *tps)
{
    *ttft_ms = 0;
    *tps = 0;
    if (s->engine_prompt_ms > 0) *ttft_ms = s->engine_prompt_ms;
    else if (s->first_byte_ms > 0) *ttft_ms = s->first_byte_ms;
    if (s->completion_tokens <= 1) {
        /* A one-token answer is all first token. */
        if (*ttft_ms <= 0 && s->total_ms > 0) *ttft_ms = s->total_ms;
        return 0;
    }
    double decode_ms = s->engine_decode_ms;
    if (decode_ms <= 0 && s->total_ms > 0) {
        double first = *ttft_ms > 0 ? *ttft_ms : prior_ttft_ms;
        if (first <= 0 || first >= s->total_ms) first = 0;
        decode_ms = s->total_ms - first;
    }
    /* A few tokens say more about the call's overhead than about decoding. */
    if (decode_ms > 0 && s->completion_tokens >= MIN_TPS_TOKENS) *tps = (s->completion_tokens - 1) * 1000.0 / decode_ms;
    return 0;
}

static model_speed *entry(node_profile *p, const char *model, int64_t now)
{
    model_speed *oldest = &p->speed[0];
    for (int i = 0; i < PROFILE_MODELS; i++) {
        model_speed *m = &p->speed[i];
        if (m->model[0] && !strcmp(m->model, model)) return m;
        if (!m->model[0] || (oldest->model[0] && m->last_ms < oldest->last_ms)) oldest = m;
    }
    /* The least recently measured model makes room. */
    memset(oldest, 0, sizeof *oldest);
    snprintf(oldest->model, sizeof oldest->model, "%s", model);
    oldest->last_ms = now;
    return oldest;
}

void profile_observe_speed(node_profile *p, const char *model, double ttft_ms, double tps, int64_t now)
{
    if (!model || (ttft_ms <= 0 && tps <= 0)) return;
    model_speed *m = entry(p, model, now);
    if (ttft_ms > 0) m->ttft_ms = ewma(m->ttft_ms, ttft_ms);
    if (tps > 0) m->tps = ewma(m->tps, tps);
    m->samples++;
    m->last_ms = now;
}

void profile_observe_load(node_profile *p, const char *model, double load_ms, int64_t now)
{
    if (!model || load_ms <= 0) return;
    model_speed *m = entry(p, model, now);
    m->load_ms = ewma(m->load_ms, load_ms);
    m->last_ms = now;
}

void profile_observe_outcome(node_profile *p, int ok, int64_t now)
{
    int64_t minute = now / 60000;
    int i = (int)(minute % PROFILE_MINUTES);
    if (p->hour[i].minute != minute) {
        p->hour[i].minute = minute;
        p->hour[i].ok = p->hour[i].fail = 0;
    }
    if (ok) p->hour[i].ok++;
    else p->hour[i].fail++;
}

void profile_observe_link(node_profile *p, double bytes, double ms)
{
    if (bytes < LINK_MIN_BYTES || ms <= 0) return;
    p->link_bytes_per_ms = ewma(p->link_bytes_per_ms, bytes / ms);
}

const model_speed *profile_speed(const node_profile *p, const char *model)
{
    for (int i = 0; model && i < PROFILE_MODELS; i++)
        if (p->speed[i].model[0] && !strcmp(p->speed[i].model, model)) return &p->speed[i];
    return NULL;
}

double profile_success_rate(const node_profile *p, int64_t now, int *calls)
{
    int64_t minute = now / 60000;
    uint64_t ok = 0, fail = 0;
    for (int i = 0; i < PROFILE_MINUTES; i++) {
        if (minute - p->hour[i].minute >= PROFILE_MINUTES || p->hour[i].minute > minute) continue;
        ok += p->hour[i].ok;
        fail += p->hour[i].fail;
    }
    if (calls) *calls = (int)(ok + fail);
    return ok + fail ? (double)ok / (double)(ok + fail) : -1;
}

json_t *profile_json(const node_profile *p, int64_t now)
{
    json_t *models = json_object();
    for (int i = 0; i < PROFILE_MODELS; i++) {
        const model_speed *m = &p->speed[i];
        if (!m->model[0]) continue;
        json_object_set_new(models, m->model,
                            json_pack("{s:f, s:f, s:f, s:i}", "ttft_ms", m->ttft_ms, "tokens_per_s", m->tps,
                                      "load_ms", m->load_ms, "samples", m->samples));
    }
    int calls;
    double rate = profile_success_rate(p, now, &calls);
    return json_pack("{s:o, s:o, s:i, s:o}", "models", models, "success_rate_1h",
                     rate >= 0 ? json_real(rate) : json_null(), "calls_1h", calls, "link_bytes_per_ms",
                     p->link_bytes_per_ms > 0 ? json_real(p->link_bytes_per_ms) : json_null());
}
