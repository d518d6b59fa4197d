/* sched/rollout: see rollout.h. */
#include "sched/rollout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const STATE[] = {"running", "paused", "completed", "rolled_back", "aborted"};

const char *ro_state_name(ro_state s) { return (unsigned)s < 5 ? STATE[s] : "unknown"; }

int ro_state_parse(const char *name, ro_state *out)
{
    for (int i = 0; name && i < 5; i++)
        if (!strcmp(name, STATE[i])) {
            *out = (ro_state)i;
            return 0;
        }
    return -1;
}

#define BAD(p, ...)                                  \
    do {                                             \
        snprintf(param, paramlen, "%s", p);          \
        snprintf(msg, msglen, __VA_ARGS__);          \
        return -1;                                   \
    } while (0)

/* A model or rollout name: printable, no spaces, no slash-free rules beyond
 * what a path segment needs (the name is one in /v1/rollouts/{name}). */
static int name_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n >= max) return 0;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == '"' || *p == '\\' || *p == 0x7f) return 0;
    return 1;
}

/* A number field: absent = def; otherwise a number within lo..hi. */
static int number(const json_t *body, const char *key, double lo, double hi, double def, double *out)
{
    const json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v)) { *out = def; return 0; }
    if (!json_is_number(v)) return -1;
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) return -1;
    *out = d;
    return 0;
}

int ro_spec_parse(const json_t *body, ro_spec *out, char *param, size_t paramlen, char *msg, size_t msglen)
{
    memset(out, 0, sizeof *out);
    if (!json_is_object(body)) BAD("", "the body must be a JSON object");
    static const char *const names[][2] = {{"name", "the rollout's name, which clients put in \"model\""},
                                           {"stable", "the model serving the traffic now"},
                                           {"canary", "the model being rolled out"}};
    char *dst[3] = {out->name, out->stable, out->canary};
    size_t cap[3] = {sizeof out->name, sizeof out->stable, sizeof out->canary};
    for (int i = 0; i < 3; i++) {
        const json_t *v = json_object_get(body, names[i][0]);
        if (!v) BAD(names[i][0], "'%s' (%s) is required", names[i][0], names[i][1]);
        if (!json_is_string(v) || !name_ok(json_string_value(v), cap[i]))
            BAD(names[i][0], "'%s' must be a non-empty string without spaces, shorter than %zu characters",
                names[i][0], cap[i]);
        snprintf(dst[i], cap[i], "%s", json_string_value(v));
    }
    if (strchr(out->name, '/') || strchr(out->name, '?') || strchr(out->name, '%'))
        BAD("name", "'name' must not contain '/', '?' or '%%' (it is a path segment)");
    if (!strcmp(out->stable, out->canary)) BAD("canary", "'canary' must name another model than 'stable'");
    if (!strcmp(out->name, out->canary)) BAD("name", "'name' must differ from 'canary'");

    const json_t *steps = json_object_get(body, "steps");
    if (!steps || json_is_null(steps)) {
        static const int def[] = {5, 25, 50, 100};
        memcpy(out->steps, def, sizeof def);
        out->nsteps = 4;
    } else {
        if (!json_is_array(steps) || json_array_size(steps) == 0 || json_array_size(steps) > RO_MAX_STEPS)
            BAD("steps", "'steps' must be an array of 1 to %d percentages", RO_MAX_STEPS);
        size_t i;
        const json_t *s;
        json_array_foreach(steps, i, s) {
            json_int_t v = json_integer_value(s);
            if (!json_is_integer(s) || v < 1 || v > 100 || (i > 0 && v <= out->steps[i - 1]))
                BAD("steps", "'steps' must be increasing whole percentages from 1 to 100, like [5, 25, 50, 100]");
            out->steps[out->nsteps++] = (int)v;
        }
    }
    double d;
    if (number(body, "max_error_rate", 0, 1, 0.05, &out->max_error_rate))
        BAD("max_error_rate", "'max_error_rate' must be a number from 0 to 1");
    if (number(body, "max_p95_ms", 0, 86400000, 0, &out->max_p95_ms))
        BAD("max_p95_ms", "'max_p95_ms' must be a number of milliseconds (0 = latency is not judged)");
    const json_t *w = json_object_get(body, "window");
    if (!w || json_is_null(w)) out->window = 100;
    else if (!json_is_integer(w) || json_integer_value(w) < 1 || json_integer_value(w) > RO_WINDOW_MAX)
        BAD("window", "'window' must be a whole number of requests from 1 to %d", RO_WINDOW_MAX);
    else out->window = (int)json_integer_value(w);
    if (number(body, "window_s", 0, 86400 * 30, 0, &d))
        BAD("window_s", "'window_s' must be a number of seconds (0 = outcomes of any age count)");
    out->window_ms = (int64_t)llround(d * 1000);
    const json_t *m = json_object_get(body, "min_samples");
    if (!m || json_is_null(m)) out->min_samples = out->window < 20 ? out->window : 20;
    else if (!json_is_integer(m) || json_integer_value(m) < 1 || json_integer_value(m) > out->window)
        BAD("min_samples", "'min_samples' must be a whole number from 1 to 'window' (%d)", out->window);
    else out->min_samples = (int)json_integer_value(m);
    if (number(body, "auto_advance_s", 0, 86400 * 30, 0, &d))
        BAD("auto_advance_s", "'auto_advance_s' must be a number of seconds (0 = advanced by hand)");
    out->auto_advance_ms = (int64_t)llround(d * 1000);
    return 0;
}

void ro_start(rollout *r, const ro_spec *spec, int64_t now_ms, int64_t wall)
{
    memset(r, 0, sizeof *r);
    r->spec = *spec;
    r->state = RO_RUNNING;
    r->step_started_ms = now_ms;
    r->created_wall_ms = r->updated_wall_ms = wall;
    snprintf(r->reason, sizeof r->reason, "started at %d %%", spec->steps[0]);
}

int ro_finished(const rollout *r) { return r->state >= RO_COMPLETED; }

int ro_share(const rollout *r)
{
    switch (r->state) {
    case RO_RUNNING:
    case RO_PAUSED: return r->spec.steps[r->step];
    case RO_COMPLETED: return 100;
    default: return 0;
    }
}

static uint64_t fnv1a(const char *a, const char *b)
{
    uint64_t h = 1469598103934665603ULL;
    for (const char *s = a; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL;
    for (const char *s = b; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

int ro_choose(rollout *r, const char *key)
{
    int share = ro_share(r);
    if (share <= 0) return RO_STABLE;
    if (share >= 100) return RO_CANARY;
    if (key && *key) {
        /* Buckets of 0.01 %, salted with the name so two rollouts split a
         * session population differently. */
        return fnv1a(r->spec.name, key) % 10000 < (uint64_t)share * 100 ? RO_CANARY : RO_STABLE;
    }
    /* The n-th choice goes to the canary when it takes the canary's count
     * over floor(n x share): an even spread, exact over any prefix. */
    uint64_t n = r->picks++;
    return (n + 1) * (uint64_t)share / 100 > n * (uint64_t)share / 100 ? RO_CANARY : RO_STABLE;
}

const char *ro_model(const rollout *r, int version) { return version == RO_CANARY ? r->spec.canary : r->spec.stable; }

/* The k-th smallest of v[0..n) (0-based), reordering v: quickselect, so a
 * verdict on every outcome costs a pass over the window, not a sort. */
static double kth_smallest(double *v, int n, int k)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot) i++;
            while (v[j] > pivot) j--;
            if (i <= j) {
                double t = v[i];
                v[i++] = v[j];
                v[j--] = t;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return v[k];
    }
    return v[k];
}

static void window_stats(const rollout *r, int version, int64_t now_ms, int with_p95, ro_stats *out)
{
    memset(out, 0, sizeof *out);
    const ro_window *w = &r->win[version ? 1 : 0];
    double lat[RO_WINDOW_MAX];
    int nlat = 0;
    for (int i = 0; i < w->n; i++) {
        const ro_sample *s = &w->s[(w->head - 1 - i + RO_WINDOW_MAX) % RO_WINDOW_MAX];
        if (i >= r->spec.window) break;
        if (r->spec.window_ms > 0 && s->at_ms < now_ms - r->spec.window_ms) break; /* newest first */
        out->n++;
        if (s->error) out->errors++;
        else if (with_p95) lat[nlat++] = s->latency_ms;
    }
    out->error_rate = out->n ? (double)out->errors / out->n : 0;
    if (nlat) {
        /* Nearest rank: the smallest value at or above 95 % of them. */
        int rank = (int)ceil(0.95 * nlat);
        out->p95_ms = kth_smallest(lat, nlat, rank > 0 ? rank - 1 : 0);
    }
}

void ro_window_stats(const rollout *r, int version, int64_t now_ms, ro_stats *out)
{
    window_stats(r, version, now_ms, 1, out);
}

ro_verdict ro_judge(const rollout *r, int64_t now_ms, char *reason, size_t len)
{
    ro_stats st;
    window_stats(r, RO_CANARY, now_ms, r->spec.max_p95_ms > 0, &st);
    if (st.n < r->spec.min_samples) {
        snprintf(reason, len, "%d of %d outcomes needed so far", st.n, r->spec.min_samples);
        return RO_WAIT;
    }
    if (st.error_rate > r->spec.max_error_rate) {
        snprintf(reason, len, "error rate %.3g (%d of %d) of %s is above %.3g", st.error_rate, st.errors, st.n,
                 r->spec.canary, r->spec.max_error_rate);
        return RO_ROLLBACK;
    }
    if (r->spec.max_p95_ms > 0 && st.p95_ms > r->spec.max_p95_ms) {
        snprintf(reason, len, "p95 latency %.0f ms over %d outcomes of %s is above %.0f ms", st.p95_ms, st.n,
                 r->spec.canary, r->spec.max_p95_ms);
        return RO_ROLLBACK;
    }
    snprintf(reason, len, "healthy over %d outcomes", st.n);
    return RO_HEALTHY;
}

int ro_record(rollout *r, int version, int error, double latency_ms, int64_t now_ms, int64_t wall)
{
    ro_window *w = &r->win[version ? 1 : 0];
    w->s[w->head] = (ro_sample){.at_ms = now_ms, .latency_ms = latency_ms, .error = error != 0};
    w->head = (w->head + 1) % RO_WINDOW_MAX;
    if (w->n < RO_WINDOW_MAX) w->n++;
    w->total++;
    if (error) w->errors++;
    if (version != RO_CANARY || ro_finished(r)) return 0;
    char why[600];
    if (ro_judge(r, now_ms, why, sizeof why) != RO_ROLLBACK) return 0;
    r->state = RO_ROLLED_BACK;
    snprintf(r->reason, sizeof r->reason, "rolled back at %d %%: %s", r->spec.steps[r->step], why);
    r->updated_wall_ms = wall;
    return 1;
}

static void step_up(rollout *r, int64_t now_ms, int64_t wall, const char *how)
{
    if (r->step + 1 < r->spec.nsteps) {
        r->step++;
        r->state = RO_RUNNING;
        snprintf(r->reason, sizeof r->reason, "%s to %d %%", how, r->spec.steps[r->step]);
    } else {
        r->state = RO_COMPLETED;
        snprintf(r->reason, sizeof r->reason, "completed (%s): all traffic on %s", how, r->spec.canary);
    }
    r->step_started_ms = now_ms;
    r->updated_wall_ms = wall;
}

int ro_tick(rollout *r, int64_t now_ms, int64_t wall)
{
    if (r->state != RO_RUNNING || r->spec.auto_advance_ms <= 0) return 0;
    if (now_ms - r->step_started_ms < r->spec.auto_advance_ms) return 0;
    char why[600];
    /* A step without enough outcomes to judge stays until it has them. */
    if (ro_judge(r, now_ms, why, sizeof why) != RO_HEALTHY) return 0;
    step_up(r, now_ms, wall, "advanced automatically");
    return 1;
}

static int refuse(const rollout *r, char *why, size_t len, const char *what)
{
    snprintf(why, len, "the rollout '%s' is %s; it cannot %s", r->spec.name, ro_state_name(r->state), what);
    return -1;
}

int ro_advance(rollout *r, int64_t now_ms, int64_t wall, char *why, size_t len)
{
    if (ro_finished(r)) return refuse(r, why, len, "advance");
    step_up(r, now_ms, wall, "advanced");
    return 0;
}

int ro_pause(rollout *r, int64_t wall, char *why, size_t len)
{
    if (r->state != RO_RUNNING) return refuse(r, why, len, "be paused");
    r->state = RO_PAUSED;
    snprintf(r->reason, sizeof r->reason, "paused at %d %%", r->spec.steps[r->step]);
    r->updated_wall_ms = wall;
    return 0;
}

int ro_resume(rollout *r, int64_t now_ms, int64_t wall, char *why, size_t len)
{
    if (r->state != RO_PAUSED) return refuse(r, why, len, "be resumed");
    r->state = RO_RUNNING;
    r->step_started_ms = now_ms; /* a paused step earns no time toward advancing */
    snprintf(r->reason, sizeof r->reason, "resumed at %d %%", r->spec.steps[r->step]);
    r->updated_wall_ms = wall;
    return 0;
}

int ro_abort(rollout *r, int64_t wall, char *why, size_t len)
{
    if (ro_finished(r)) return refuse(r, why, len, "be aborted");
    snprintf(r->reason, sizeof r->reason, "aborted at %d %%: all traffic back on %s", ro_share(r), r->spec.stable);
    r->state = RO_ABORTED;
    r->updated_wall_ms = wall;
    return 0;
}

static json_t *version_json(const rollout *r, int v, int64_t now_ms)
{
    ro_stats st;
    ro_window_stats(r, v, now_ms, &st);
    return json_pack("{s:s, s:I, s:I, s:{s:i, s:i, s:f, s:f}}", "model", ro_model(r, v), "requests",
                     (json_int_t)r->win[v].total, "errors", (json_int_t)r->win[v].errors, "window", "requests", st.n,
                     "errors", st.errors, "error_rate", st.error_rate, "p95_ms", st.p95_ms);
}

json_t *ro_to_json(const rollout *r, int64_t now_ms)
{
    const ro_spec *s = &r->spec;
    json_t *steps = json_array();
    for (int i = 0; i < s->nsteps; i++) json_array_append_new(steps, json_integer(s->steps[i]));
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:o, s:i, s:i, s:f, s:f, s:i, s:f, s:i, s:f, s:s, s:I, s:I}",
                          "object", "rollout", "name", s->name, "stable", s->stable, "canary", s->canary, "steps",
                          steps, "step", r->step, "share", ro_share(r), "max_error_rate", s->max_error_rate,
                          "max_p95_ms", s->max_p95_ms, "window", s->window, "window_s", s->window_ms / 1000.0,
                          "min_samples", s->min_samples, "auto_advance_s", s->auto_advance_ms / 1000.0, "reason",
                          r->reason, "created_at", (json_int_t)(r->created_wall_ms / 1000), "updated_at",
                          (json_int_t)(r->updated_wall_ms / 1000));
    if (!j) return NULL;
    json_object_set_new(j, "state", json_string(ro_state_name(r->state)));
    /* Milliseconds as well, so a restart keeps the exact times. */
    json_object_set_new(j, "created_ms", json_integer(r->created_wall_ms));
    json_object_set_new(j, "updated_ms", json_integer(r->updated_wall_ms));
    json_object_set_new(j, "versions", json_pack("{s:o, s:o}", "stable", version_json(r, RO_STABLE, now_ms),
                                                 "canary", version_json(r, RO_CANARY, now_ms)));
    return j;
}

int ro_from_json(const json_t *j, rollout *out, int64_t now_ms)
{
    ro_spec spec;
    char param[64], msg[256];
    if (ro_spec_parse(j, &spec, param, sizeof param, msg, sizeof msg)) return -1;
    ro_start(out, &spec, now_ms, json_integer_value(json_object_get(j, "created_ms")));
    if (ro_state_parse(json_string_value(json_object_get(j, "state")), &out->state)) return -1;
    json_int_t step = json_integer_value(json_object_get(j, "step"));
    if (step < 0 || step >= spec.nsteps) return -1;
    out->step = (int)step;
    const char *reason = json_string_value(json_object_get(j, "reason"));
    snprintf(out->reason, sizeof out->reason, "%s", reason ? reason : "");
    out->updated_wall_ms = json_integer_value(json_object_get(j, "updated_ms"));
    return 0;
}
