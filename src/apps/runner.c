/* apps/runner: see runner.h. */
#include "apps/runner.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "apps/cond.h"
#include "apps/stage.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/log.h"

#define MAX_ACTIVE 512
#define POLL_MS 25 /* how soon a finished task is noticed; the store is the only signal */

struct app_runner {
    store *st;
    dispatcher *disp;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* kicks and stop, to the thread */
    pthread_cond_t done_cv; /* a run ended, to runner_wait */
    int stop, kicked;
};

static int final(const char *status)
{
    return status && (!strcmp(status, "succeeded") || !strcmp(status, "failed") || !strcmp(status, "canceled"));
}

static void ended(app_runner *r)
{
    pthread_mutex_lock(&r->mu);
    pthread_cond_broadcast(&r->done_cv);
    pthread_mutex_unlock(&r->mu);
}

static void finish_run(app_runner *r, const char *id, const char *status, json_t *output, json_t *error)
{
    json_t *f = json_pack("{s:s,s:I}", "status", status, "finished_ms", (json_int_t)wall_ms());
    if (output) json_object_set_new(f, "output", output);
    if (error) json_object_set_new(f, "error", error);
    /* STORE_STALE: it was cancelled meanwhile, and stays so. */
    if (store_run_set(r->st, id, f) == STORE_ERR)
        log_error("run %s: cannot record its end: %s", id, store_errmsg(r->st));
    json_decref(f);
    ended(r);
}

/* Submits one try of a stage as a task; its id goes to task_id. */
static int submit(app_runner *r, const json_t *run, const json_t *def, json_t *request, char task_id[64])
{
    char *text = json_dumps(request, JSON_COMPACT);
    char hash[65];
    sha256_hex(text, strlen(text), hash);
    make_id(task_id, 64, "task");
    const char *sens = json_string_value(json_object_get(run, "sensitivity"));
    task_new t = {.id = task_id, .type = "chat", .model = json_string_value(json_object_get(def, "model")),
                  .priority = (int)json_integer_value(json_object_get(run, "priority")), .input_json = text,
                  .body_hash = hash, .max_attempts = (int)json_integer_value(json_object_get(def, "max_attempts")),
                  .created_ms = wall_ms(), .owner = json_string_value(json_object_get(run, "owner")),
                  .prompt_tokens = api_estimate_prompt_tokens(request),
                  .max_tokens = api_requested_max_tokens(request), .sensitivity = sens,
                  .route_rule = json_string_value(json_object_get(run, "route_rule"))};
    if (t.max_attempts < 1) t.max_attempts = 1;
    char existing[64];
    int rc = store_task_insert(r->st, &t, existing);
    free(text);
    if (rc == STORE_OK) dispatcher_task_queued(r->disp);
    return rc == STORE_OK ? 0 : -1;
}

/* Records a stage's new try; when the run ended meanwhile (a cancel), the
 * task just submitted for it is cancelled rather than left to run. */
static void record_try(app_runner *r, const char *id, size_t idx, const json_t *f, const char *task)
{
    if (store_run_stage_set(r->st, id, (int)idx, f) == STORE_STALE &&
        store_task_cancel(r->st, task, wall_ms()) == STORE_OK)
        dispatcher_cancel_task(r->disp, task);
}

/* The "stages" object the templates see, from the stages before idx. */
static json_t *done_stages(const json_t *stages, size_t idx)
{
    json_t *o = json_object();
    for (size_t i = 0; i < idx; i++) {
        const json_t *s = json_array_get(stages, i);
        const char *status = json_string_value(json_object_get(s, "status"));
        const char *name = json_string_value(json_object_get(s, "name"));
        if (!strcmp(status, "skipped")) json_object_set_new(o, name, json_pack("{s:b}", "skipped", 1));
        else
            json_object_set_new(o, name, json_pack("{s:O,s:O}", "output", json_object_get(s, "output"), "text",
                                                   json_object_get(s, "raw_text")));
    }
    return o;
}

static json_t *error_obj(const char *code, const char *stage, const char *fmt, const char *detail)
{
    char msg[600];
    snprintf(msg, sizeof msg, fmt, detail);
    return json_pack("{s:s,s:s,s:s}", "code", code, "message", msg, "stage", stage);
}

/* Starts stage idx: skipped (1) when its condition is false, else its first
 * try submitted (0); -1 when the run failed. */
static int start_stage(app_runner *r, const char *id, const json_t *run, size_t idx)
{
    const json_t *stages = json_object_get(run, "stages");
    const json_t *def = json_array_get(json_object_get(json_object_get(run, "def"), "stages"), idx);
    const char *name = json_string_value(json_object_get(def, "name"));
    json_t *so_far = done_stages(stages, idx);
    json_t *ctx = stage_context(json_object_get(run, "input"), so_far);
    json_decref(so_far);
    char err[400];
    int64_t now = wall_ms();
    const char *cond = json_string_value(json_object_get(def, "if"));
    int rc = -1;
    if (cond) {
        int v = cond_eval(cond, ctx, err, sizeof err);
        if (v < 0) {
            finish_run(r, id, "failed", NULL, error_obj("stage_failed", name, "%s", err));
            goto out;
        }
        if (v == 0) {
            json_t *f = json_pack("{s:s,s:I,s:I}", "status", "skipped", "started_ms", (json_int_t)now, "finished_ms",
                                  (json_int_t)now);
            store_run_stage_set(r->st, id, (int)idx, f);
            json_decref(f);
            rc = 1;
            goto out;
        }
    }
    json_t *req = stage_request(def, ctx, err, sizeof err);
    char task[64];
    if (!req) {
        finish_run(r, id, "failed", NULL, error_obj("stage_failed", name, "%s", err));
        goto out;
    }
    if (submit(r, run, def, req, task)) {
        log_error("run %s: stage %s: cannot store its task: %s", id, name, store_errmsg(r->st));
        json_decref(req);
        goto out; /* tried again on the next pass */
    }
    json_t *f = json_pack("{s:s,s:s,s:i,s:o,s:I}", "status", "running", "task_id", task, "tries", 1, "request", req,
                          "started_ms", (json_int_t)now);
    record_try(r, id, idx, f, task);
    json_decref(f);
    rc = 0;
out:
    json_decref(ctx);
    return rc;
}

/* The stage's attempts so far with this task's appended. */
static json_t *attempts_with(app_runner *r, const json_t *stage, const char *task_id)
{
    json_t *all = json_is_array(json_object_get(stage, "attempts")) ? json_deep_copy(json_object_get(stage, "attempts"))
                                                                    : json_array();
    json_t *mine = store_task_attempts(r->st, task_id);
    size_t i;
    json_t *a;
    json_array_foreach(mine, i, a) {
        json_object_set_new(a, "task_id", json_string(task_id));
        json_object_set_new(a, "try", json_integer(json_integer_value(json_object_get(stage, "tries"))));
        json_array_append(all, a);
    }
    json_decref(mine);
    return all;
}

/* Looks at a running stage's task: 0 still going or tried again, 1 the
 * stage succeeded, -1 the run ended. */
static int check_stage(app_runner *r, const char *id, const json_t *run, size_t idx)
{
    const json_t *stage = json_array_get(json_object_get(run, "stages"), idx);
    const json_t *def = json_array_get(json_object_get(json_object_get(run, "def"), "stages"), idx);
    const char *name = json_string_value(json_object_get(def, "name"));
    const char *task_id = json_string_value(json_object_get(stage, "task_id"));
    task_rec t;
    if (!task_id || store_task_get(r->st, task_id, &t) != STORE_OK) return 0;
    int rc = 0;
    if (!final(t.status)) goto out;
    json_t *f = json_pack("{s:o,s:s*}", "attempts", attempts_with(r, stage, task_id), "node", t.node);
    if (strcmp(t.status, "succeeded")) {
        int canceled = !strcmp(t.status, "canceled");
        json_t *err = json_pack("{s:s,s:s,s:s}", "code", canceled ? "canceled" : "stage_failed", "message",
                                t.error_message ? t.error_message : t.status, "stage", name);
        if (t.error_code) json_object_set_new(err, "cause", json_string(t.error_code));
        json_object_set_new(f, "status", json_string(canceled ? "canceled" : "failed"));
        json_object_set(f, "error", err);
        json_object_set_new(f, "finished_ms", json_integer(wall_ms()));
        store_run_stage_set(r->st, id, (int)idx, f);
        finish_run(r, id, canceled ? "canceled" : "failed", NULL, err);
        rc = -1;
        json_decref(f);
        goto out;
    }
    json_t *result = t.result_json ? json_loads(t.result_json, 0, NULL) : NULL;
    const char *text = stage_reply_text(result);
    json_t *output;
    char why[400];
    json_object_set_new(f, "raw_text", text ? json_string(text) : json_null());
    if (stage_judge(def, text, &output, why, sizeof why) == 0) {
        json_object_set_new(f, "status", json_string("succeeded"));
        json_object_set_new(f, "output", output);
        json_object_set_new(f, "finished_ms", json_integer(wall_ms()));
        store_run_stage_set(r->st, id, (int)idx, f);
        rc = 1;
    } else if (json_integer_value(json_object_get(stage, "tries")) <= json_integer_value(json_object_get(def, "max_retries"))) {
        json_t *req = stage_retry_request(json_object_get(stage, "request"), text, why,
                                          json_object_get(def, "output_schema"));
        char task[64];
        if (submit(r, run, def, req, task) == 0) {
            json_object_set_new(f, "task_id", json_string(task));
            json_object_set_new(f, "tries", json_integer(json_integer_value(json_object_get(stage, "tries")) + 1));
            json_object_set_new(f, "request", req);
            json_object_set_new(f, "error", json_pack("{s:s,s:s}", "code", "output_invalid", "message", why));
            record_try(r, id, idx, f, task);
        } else {
            json_decref(req);
        }
    } else {
        json_t *err = json_pack("{s:s,s:s,s:s,s:s*,s:O}", "code", "output_invalid", "message", why, "stage", name,
                                "raw_text", text, "tries", json_object_get(stage, "tries"));
        json_object_set_new(f, "status", json_string("failed"));
        json_object_set(f, "error", err);
        json_object_set_new(f, "finished_ms", json_integer(wall_ms()));
        store_run_stage_set(r->st, id, (int)idx, f);
        finish_run(r, id, "failed", NULL, err);
        rc = -1;
    }
    json_decref(result);
    json_decref(f);
out:
    task_rec_free(&t);
    return rc;
}

/* One run as far as it can go now. */
static void advance(app_runner *r, const char *id)
{
    json_t *run;
    if (store_run_get(r->st, id, &run) != STORE_OK) return;
    const char *status0 = json_string_value(json_object_get(run, "status"));
    if (final(status0)) {
        json_decref(run);
        return;
    }
    if (!strcmp(status0, "queued")) {
        json_t *f = json_pack("{s:s,s:I}", "status", "running", "started_ms", (json_int_t)wall_ms());
        store_run_set(r->st, id, f);
        json_decref(f);
    }
    for (int guard = 0; guard < 64; guard++) {
        const json_t *stages = json_object_get(run, "stages");
        size_t idx = 0;
        while (idx < json_array_size(stages)) {
            const char *s = json_string_value(json_object_get(json_array_get(stages, idx), "status"));
            if (strcmp(s, "succeeded") && strcmp(s, "skipped")) break;
            idx++;
        }
        if (idx == json_array_size(stages)) {
            /* The output is the last stage that ran. */
            const json_t *out = json_null();
            for (size_t i = idx; i-- > 0;) {
                const json_t *s = json_array_get(stages, i);
                if (!strcmp(json_string_value(json_object_get(s, "status")), "succeeded")) {
                    out = json_object_get(s, "output");
                    break;
                }
            }
            finish_run(r, id, "succeeded", json_incref((json_t *)out), NULL);
            break;
        }
        const char *status = json_string_value(json_object_get(json_array_get(stages, idx), "status"));
        int step = !strcmp(status, "pending") ? start_stage(r, id, run, idx)
                   : !strcmp(status, "running") ? check_stage(r, id, run, idx)
                                                : -1;
        if (step != 1) break;
        /* A stage finished or was skipped: read the run again and go on. */
        json_decref(run);
        if (store_run_get(r->st, id, &run) != STORE_OK) return;
    }
    json_decref(run);
}

static void *loop(void *arg)
{
    app_runner *r = arg;
    char (*ids)[64] = malloc(sizeof(char[64]) * MAX_ACTIVE);
    int idle = 0;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        if (!r->stop && !r->kicked) {
            struct timespec ts = mono_deadline(idle ? 500 : POLL_MS);
            pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        }
        int stop = r->stop;
        r->kicked = 0;
        pthread_mutex_unlock(&r->mu);
        if (stop) break;
        int n = store_run_active(r->st, ids, MAX_ACTIVE);
        idle = n <= 0;
        for (int i = 0; i < n; i++) advance(r, ids[i]);
    }
    free(ids);
    return NULL;
}

app_runner *runner_start(store *st, dispatcher *disp)
{
    app_runner *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->st = st;
    r->disp = disp;
    pthread_mutex_init(&r->mu, NULL);
    cond_init_monotonic(&r->cv);
    cond_init_monotonic(&r->done_cv);
    if (pthread_create(&r->thread, NULL, loop, r)) {
        pthread_cond_destroy(&r->cv);
        pthread_cond_destroy(&r->done_cv);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
    }
    return r;
}

void runner_stop(app_runner *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_cond_broadcast(&r->done_cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
}

void runner_free(app_runner *r)
{
    if (!r) return;
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->done_cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void runner_kick(app_runner *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->kicked = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

json_t *runner_wait(app_runner *r, const char *id, int64_t timeout_ms)
{
    int64_t deadline = mono_ms() + timeout_ms;
    for (;;) {
        json_t *run;
        if (store_run_get(r->st, id, &run) != STORE_OK) return NULL;
        if (final(json_string_value(json_object_get(run, "status"))) || mono_ms() >= deadline) return run;
        json_decref(run);
        pthread_mutex_lock(&r->mu);
        int64_t left = deadline - mono_ms();
        struct timespec ts = mono_deadline(left < 200 ? (left > 0 ? left : 1) : 200);
        if (!r->stop) pthread_cond_timedwait(&r->done_cv, &r->mu, &ts);
        int stop = r->stop;
        pthread_mutex_unlock(&r->mu);
        if (stop) {
            store_run_get(r->st, id, &run);
            return run;
        }
    }
}
