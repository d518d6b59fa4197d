/* sched/profile: see profile.h. */
#include "sched/profile.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "util/json_skim.h"

/* New samples count for a fifth: a node that changes speed (a colleague's
 * game, thermal throttling) shows within a few calls, one odd call does not. */
#define ALPHA 0.2
#define LINK_MIN_BYTES 16384.0
#define MIN_TPS_TOKENS 8

static double ewma(double old, double sample)
{
    return old > 0 ? old + ALPHA * (sample - old) : sample;
}

/* Reads wanted numeric members of the object at s: names[i]'s value goes to
 * out[i] (last one wins, as in a parsed object), ints[i] says whether it was
 * an integer.  Other members are skipped.  0, or -1 when malformed. */
static int skim_members(json_skim *s, const char *const *names, int n, double *out, int *ints, int *found)
{
    const char *key;
    size_t kl;
    int r;
    while ((r = skim_key(s, &key, &kl)) == 1) {
        int i = 0;
        while (i < n && !skim_key_is(key, kl, names[i])) i++;
        if (i == n) {
            if (skim_value(s)) return -1;
            continue;
        }
        int is_int = 0;
        double v = 0;
        int got = skim_number(s, &v, &is_int);
        if (got < 0) return -1;
        found[i] = got;
        out[i] = v;
        ints[i] = is_int;
    }
    return r;
}

/* The answer passes through untouched, so it is skimmed, not parsed: on the
 * proxy's hot path a full parse of every answer cost more than the rest of
 * the coordinator's own work on it. */
void call_sample_parse_answer(call_sample *s, const char *body, size_t len)
{
    static const char *const usage_keys[] = {"completion_tokens"};
    static const char *const timing_keys[] = {"prompt_ms", "predicted_ms"};
    double ct = 0, tm[2] = {0, 0};
    int ct_int = 0, ct_found = 0, tm_int[2], tm_found[2] = {0, 0};
    json_skim k;
    skim_init(&k, body, len);
    if (!body || !len || skim_object(&k)) return;
    const char *key;
    size_t kl;
    int r;
    while ((r = skim_key(&k, &key, &kl)) == 1) {
        int usage = skim_key_is(key, kl, "usage"), timings = !usage && skim_key_is(key, kl, "timings");
        int inner = 0;
        if (usage || timings) {
            /* Only an object counts; a later duplicate replaces an earlier one. */
            json_skim peek = k;
            inner = skim_object(&peek) == 0;
            if (inner) k = peek;
        }
        if (!inner) {
            if (skim_value(&k)) return;
            if (usage) ct_found = 0;
            if (timings) tm_found[0] = tm_found[1] = 0;
            continue;
        }
        if (usage) {
            ct_found = 0;
            if (skim_members(&k, usage_keys, 1, &ct, &ct_int, &ct_found)) return;
        } else {
            tm_found[0] = tm_found[1] = 0;
            if (skim_members(&k, timing_keys, 2, tm, tm_int, tm_found)) return;
        }
    }
    if (r < 0 || !skim_done(&k)) return; /* not JSON: nothing learnt */
    if (ct_found && ct_int && ct >= INT_MIN && ct <= INT_MAX) s->completion_tokens = (int)ct;
    if (tm_found[0]) s->engine_prompt_ms = tm[0];
    if (tm_found[1]) s->engine_decode_ms = tm[1];
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
