/* api/rollout_table: see rollout_table.h. */
#include "api/rollout_table.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/metrics.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/log.h"

#define TICK_MS 100

typedef struct entry {
    rollout r;
    int dirty;              /* changed since it was last written */
} entry;

struct rollout_table {
    store *st;
    pthread_mutex_t mu;     /* the entries */
    pthread_mutex_t write_mu; /* one writer at a time, so writes land in order */
    pthread_cond_t cv;
    pthread_t thread;
    int stopping;
    entry *e[ROLLOUT_TABLE_MAX];
    int n;
};

static entry *find(rollout_table *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->e[i]->r.spec.name, name)) return t->e[i];
    return NULL;
}

/* Writes every changed rollout.  The views are taken under the table's
 * lock and written after it, so routing never waits on the disk. */
static void flush(rollout_table *t)
{
    pthread_mutex_lock(&t->write_mu);
    json_t *views[ROLLOUT_TABLE_MAX];
    int n = 0;
    pthread_mutex_lock(&t->mu);
    int64_t now = mono_ms();
    for (int i = 0; i < t->n; i++)
        if (t->e[i]->dirty) {
            t->e[i]->dirty = 0;
            views[n++] = ro_to_json(&t->e[i]->r, now);
        }
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < n; i++) {
        char *text = views[i] ? json_dumps(views[i], JSON_COMPACT) : NULL;
        const char *name = json_string_value(json_object_get(views[i], "name"));
        if (!text || store_rollout_put(t->st, name, text, json_integer_value(json_object_get(views[i], "updated_ms"))))
            log_warn("rollout %s: cannot write it to the store: %s", name ? name : "?", store_errmsg(t->st));
        free(text);
        json_decref(views[i]);
    }
    pthread_mutex_unlock(&t->write_mu);
}

void rollout_table_tick(rollout_table *t)
{
    pthread_mutex_lock(&t->mu);
    int64_t now = mono_ms(), wall = wall_ms();
    for (int i = 0; i < t->n; i++) {
        rollout *r = &t->e[i]->r;
        if (ro_tick(r, now, wall)) {
            t->e[i]->dirty = 1;
            log_info("rollout %s: %s", r->spec.name, r->reason);
        }
    }
    pthread_mutex_unlock(&t->mu);
    flush(t);
}

static void *ticker(void *arg)
{
    rollout_table *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stopping) {
        struct timespec at = mono_deadline(TICK_MS);
        pthread_cond_timedwait(&t->cv, &t->mu, &at);
        if (t->stopping) break;
        pthread_mutex_unlock(&t->mu);
        rollout_table_tick(t);
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

rollout_table *rollout_table_open(store *st, char *err, size_t errlen)
{
    json_t *all = store_rollout_all(st);
    if (!all) {
        err_out(err, errlen, "rollouts: %s", store_errmsg(st));
        return NULL;
    }
    rollout_table *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(all);
        err_out(err, errlen, "rollouts: out of memory");
        return NULL;
    }
    t->st = st;
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->write_mu, NULL);
    cond_init_monotonic(&t->cv);
    size_t i;
    json_t *one;
    json_array_foreach(all, i, one) {
        entry *e = calloc(1, sizeof *e);
        if (!e || t->n >= ROLLOUT_TABLE_MAX || ro_from_json(one, &e->r, mono_ms())) {
            log_warn("rollouts: a stored rollout could not be read back; it is left out");
            free(e);
            continue;
        }
        t->e[t->n++] = e;
    }
    json_decref(all);
    if (t->n) log_info("rollouts: %d read back from the store", t->n);
    if (pthread_create(&t->thread, NULL, ticker, t)) {
        err_out(err, errlen, "rollouts: cannot start a thread");
        for (int k = 0; k < t->n; k++) free(t->e[k]);
        free(t);
        return NULL;
    }
    return t;
}

void rollout_table_close(rollout_table *t)
{
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stopping = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    flush(t);
    for (int i = 0; i < t->n; i++) free(t->e[i]);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->write_mu);
    free(t);
}

int rollout_table_mentioned(rollout_table *t, const char *body, size_t len)
{
    if (!t) return 0;
    int hit = 0;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n && !hit; i++) {
        const char *name = t->e[i]->r.spec.name;
        hit = memmem(body, len, name, strlen(name)) != NULL;
    }
    pthread_mutex_unlock(&t->mu);
    return hit;
}

int rollout_table_route(rollout_table *t, const char *model, const char *key, rollout_pick *out)
{
    if (!t || !model) return 0;
    pthread_mutex_lock(&t->mu);
    entry *e = find(t, model);
    if (e) {
        out->version = ro_choose(&e->r, key);
        snprintf(out->name, sizeof out->name, "%s", e->r.spec.name);
        snprintf(out->model, sizeof out->model, "%s", ro_model(&e->r, out->version));
    }
    pthread_mutex_unlock(&t->mu);
    return e != NULL;
}

/* With the table's lock held; a rollback is written by the next flush. */
static void record(entry *e, int version, int error, double latency_ms)
{
    if (ro_record(&e->r, version, error, latency_ms, mono_ms(), wall_ms())) {
        e->dirty = 1;
        log_warn("rollout %s: %s; all traffic is back on %s", e->r.spec.name, e->r.reason, e->r.spec.stable);
    }
}

void rollout_table_outcome(rollout_table *t, const char *name, int version, int error, double latency_ms)
{
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    entry *e = find(t, name);
    if (e) record(e, version, error, latency_ms);
    pthread_mutex_unlock(&t->mu);
}

void rollout_table_model_outcome(rollout_table *t, const char *model, int error, double latency_ms)
{
    if (!t || !model) return;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n; i++) {
        entry *e = t->e[i];
        if (ro_finished(&e->r)) continue;
        if (!strcmp(e->r.spec.canary, model)) record(e, RO_CANARY, error, latency_ms);
        else if (!strcmp(e->r.spec.stable, model)) record(e, RO_STABLE, error, latency_ms);
    }
    pthread_mutex_unlock(&t->mu);
}

rollout_rc rollout_table_create(rollout_table *t, const ro_spec *spec, json_t **out, char *why, size_t len)
{
    *out = NULL;
    entry *fresh = calloc(1, sizeof *fresh);
    if (!fresh) {
        snprintf(why, len, "out of memory");
        return ROLLOUT_FULL;
    }
    ro_start(&fresh->r, spec, mono_ms(), wall_ms());
    fresh->dirty = 1;
    rollout_rc rc = ROLLOUT_OK;
    pthread_mutex_lock(&t->mu);
    entry *old = find(t, spec->name);
    for (int i = 0; i < t->n && rc == ROLLOUT_OK; i++) {
        const ro_spec *o = &t->e[i]->r.spec;
        if (t->e[i] == old) continue;
        /* A name that is another rollout's version would route in circles. */
        if (!strcmp(o->name, spec->stable) || !strcmp(o->name, spec->canary) || !strcmp(o->stable, spec->name) ||
            !strcmp(o->canary, spec->name)) {
            snprintf(why, len, "the rollout '%s' already uses the name '%s' or a version of it", o->name,
                     spec->name);
            rc = ROLLOUT_REFUSED;
        }
    }
    if (rc == ROLLOUT_OK && old && !ro_finished(&old->r)) {
        snprintf(why, len, "the rollout '%s' is %s; abort it first, or wait until it ends", spec->name,
                 ro_state_name(old->r.state));
        rc = ROLLOUT_REFUSED;
    } else if (rc == ROLLOUT_OK && !old && t->n >= ROLLOUT_TABLE_MAX) {
        snprintf(why, len, "the coordinator holds at most %d rollouts", ROLLOUT_TABLE_MAX);
        rc = ROLLOUT_FULL;
    }
    if (rc == ROLLOUT_OK) {
        if (old) {
            for (int i = 0; i < t->n; i++)
                if (t->e[i] == old) t->e[i] = fresh;
            free(old);
        } else {
            t->e[t->n++] = fresh;
        }
        *out = ro_to_json(&fresh->r, mono_ms());
        fresh = NULL;
    }
    pthread_mutex_unlock(&t->mu);
    free(fresh);
    if (rc == ROLLOUT_OK) {
        log_info("rollout %s: started, %s -> %s at %d %%", spec->name, spec->stable, spec->canary, spec->steps[0]);
        flush(t);
    }
    return rc;
}

rollout_rc rollout_table_act(rollout_table *t, const char *name, const char *verb, json_t **out, char *why,
                             size_t len)
{
    *out = NULL;
    pthread_mutex_lock(&t->mu);
    entry *e = find(t, name);
    rollout_rc rc = ROLLOUT_NOT_FOUND;
    if (e) {
        int64_t now = mono_ms(), wall = wall_ms();
        int r = !strcmp(verb, "advance") ? ro_advance(&e->r, now, wall, why, len)
              : !strcmp(verb, "pause")   ? ro_pause(&e->r, wall, why, len)
              : !strcmp(verb, "resume")  ? ro_resume(&e->r, now, wall, why, len)
                                         : ro_abort(&e->r, wall, why, len);
        rc = r ? ROLLOUT_REFUSED : ROLLOUT_OK;
        if (!r) {
            e->dirty = 1;
            log_info("rollout %s: %s", name, e->r.reason);
        }
        *out = ro_to_json(&e->r, now);
    } else {
        snprintf(why, len, "no rollout is named '%s'", name);
    }
    pthread_mutex_unlock(&t->mu);
    if (rc == ROLLOUT_OK) flush(t);
    return rc;
}

json_t *rollout_table_get(rollout_table *t, const char *name)
{
    pthread_mutex_lock(&t->mu);
    entry *e = find(t, name);
    json_t *j = e ? ro_to_json(&e->r, mono_ms()) : NULL;
    pthread_mutex_unlock(&t->mu);
    return j;
}

json_t *rollout_table_list(rollout_table *t)
{
    json_t *data = json_array();
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n; i++) json_array_append_new(data, ro_to_json(&t->e[i]->r, mono_ms()));
    pthread_mutex_unlock(&t->mu);
    return data;
}

void rollout_table_metrics(rollout_table *t, buf *out)
{
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    if (t->n) {
        metrics_header(out, "gpupool_rollout_canary_share", "gauge", "The canary's share of a rollout's traffic, percent.");
        for (int i = 0; i < t->n; i++)
            buf_printf(out, "gpupool_rollout_canary_share{rollout=\"%s\"} %d\n", t->e[i]->r.spec.name,
                       ro_share(&t->e[i]->r));
        metrics_header(out, "gpupool_rollout_state", "gauge", "1 for the state each rollout is in.");
        for (int i = 0; i < t->n; i++)
            for (int s = RO_RUNNING; s <= RO_ABORTED; s++)
                buf_printf(out, "gpupool_rollout_state{rollout=\"%s\",state=\"%s\"} %d\n", t->e[i]->r.spec.name,
                           ro_state_name((ro_state)s), t->e[i]->r.state == (ro_state)s);
        static const char *const role[2] = {"stable", "canary"};
        metrics_header(out, "gpupool_rollout_requests_total", "counter", "Requests a rollout routed, by version.");
        for (int i = 0; i < t->n; i++)
            for (int v = 0; v < 2; v++)
                buf_printf(out, "gpupool_rollout_requests_total{rollout=\"%s\",version=\"%s\",model=\"%s\"} %llu\n",
                           t->e[i]->r.spec.name, role[v], ro_model(&t->e[i]->r, v),
                           (unsigned long long)t->e[i]->r.win[v].total);
        metrics_header(out, "gpupool_rollout_errors_total", "counter", "Failed requests a rollout routed, by version.");
        for (int i = 0; i < t->n; i++)
            for (int v = 0; v < 2; v++)
                buf_printf(out, "gpupool_rollout_errors_total{rollout=\"%s\",version=\"%s\",model=\"%s\"} %llu\n",
                           t->e[i]->r.spec.name, role[v], ro_model(&t->e[i]->r, v),
                           (unsigned long long)t->e[i]->r.win[v].errors);
    }
    pthread_mutex_unlock(&t->mu);
}
