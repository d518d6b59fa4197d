/* e2e chaos: 200 async tasks on four sim-engine workers while, one after the
 * other and each while tasks are running, an engine is killed, a worker is
 * kill -9ed, another is frozen with SIGSTOP (unreachable, its sockets open)
 * and later resumed, and the coordinator is kill -9ed and restarted.
 *
 * What must hold: every accepted task ends "succeeded" (none lost, none
 * failed), the task list holds exactly the 200 accepted tasks (a resubmission
 * with the same Idempotency-Key after the crash creates nothing new), a result
 * once visible never changes (checked on every poll, after the restart and at
 * the end), and each dead or frozen node is shown offline within three
 * heartbeat intervals plus the tolerance explained at DETECT_LIMIT_MS. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>

#include "harness.h"

#define NTASKS 200
#define HEARTBEAT_MS 200 /* what the harness gives serve and worker */
/* The coordinator marks a node offline once now - last_beat > 3 intervals,
 * and checks that every half interval.  The last beat was received at or
 * before the signal, so the coordinator's own bound from the signal is
 * 3 * 200 + 100 ms.  On top of that the test's view: h_wait_until pauses
 * 20 ms between checks and each check is one GET /v1/nodes, which takes tens
 * of ms under ASan on a loaded 2-core machine; 100 ms covers both.  A node
 * that took one more beat to be noticed (800 ms) would fail. */
#define DETECT_LIMIT_MS (3 * HEARTBEAT_MS + HEARTBEAT_MS / 2 + 100)

/* ~20 ms to the first token, then 30 tokens at 100/s: each attempt runs
 * about 0.3 s, so every fault finds attempts in flight.  Two slots per
 * engine, four workers: eight at a time while all are up. */
#define SIM_ARGS "--ttft-ms%2020%20--tps%20100%20--slots%202"
/* Up to 10 attempts: a re-queued task is the oldest, so it is dispatched
 * first and is likely to be running when the next fault hits.  One run saw a
 * task lose attempts to kill -9, SIGSTOP and the restart and succeed on its
 * fourth, which the default of 3 would have failed, rightly. */
#define TASK_FMT "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"max_attempts\":10,\"input\":{\"messages\":" \
                 "[{\"role\":\"user\",\"content\":\"chaos task %d\"}],\"max_tokens\":30}}"
#define NWORKERS 4
/* Succeeded tasks before each fault: engine, kill -9, SIGSTOP, coordinator. */
static const int FAULT_AT[4] = {20, 50, 80, 120};

static const char *const NAMES[NWORKERS] = {"chaos-engine", "chaos-killed", "chaos-frozen", "chaos-steady"};

/* ---- the watcher: reads every task's result once it is visible -------- */

typedef struct seen {
    char id[64];
    /* The compact dump of "result" when first seen succeeded.  The server
     * itself parses the stored text and dumps it again, and jansson keeps
     * key order, so equal dumps mean the stored result did not change. */
    char *result;
    int64_t first_ms;  /* when it was first seen */
} seen;

typedef struct watcher {
    h_pool *p;
    pthread_t th;
    pthread_mutex_t mu;
    int stop;
    seen s[NTASKS * 2];
    int n;
    int polls, failed_polls;
    int changed, regressed; /* a seen result that changed; a succeeded task that left that state */
    char problem[512];
} watcher;

static char *result_text(json_t *task)
{
    return json_dumps(json_object_get(task, "result"), JSON_COMPACT | JSON_ENCODE_ANY);
}

static seen *find_seen(watcher *w, const char *id)
{
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->s[i].id, id)) return &w->s[i];
    return NULL;
}

/* Compares one task as listed now with what was seen before, and records it
 * when it is seen succeeded for the first time.  Caller holds w->mu. */
static void check_task(watcher *w, json_t *t)
{
    const char *id = json_string_value(json_object_get(t, "id"));
    const char *status = json_string_value(json_object_get(t, "status"));
    if (!id || !status) return;
    seen *s = find_seen(w, id);
    if (!s && strcmp(status, "succeeded")) return;
    char *now = result_text(t);
    if (!s) {
        if (w->n < (int)(sizeof w->s / sizeof w->s[0])) {
            s = &w->s[w->n++];
            snprintf(s->id, sizeof s->id, "%s", id);
            s->result = now;
            s->first_ms = h_now_ms();
            now = NULL;
        }
    } else if (strcmp(status, "succeeded")) {
        if (!w->regressed++)
            snprintf(w->problem, sizeof w->problem, "task %s was succeeded and is now %s", id, status);
    } else if (!now || strcmp(now, s->result)) {
        if (!w->changed++)
            snprintf(w->problem, sizeof w->problem, "task %s: result changed from %.180s to %.180s", id, s->result,
                     now ? now : "(none)");
    }
    free(now);
}

/* One pass over GET /v1/tasks.  Returns the number of tasks listed, -1 when
 * the coordinator did not answer (it is down during its restart). */
static int watch_once(watcher *w)
{
    h_resp r;
    h_request(w->p, "GET", "/v1/tasks?limit=1000", NULL, NULL, &r);
    json_t *data = r.status == 200 ? json_object_get(r.json, "data") : NULL;
    int n = -1;
    pthread_mutex_lock(&w->mu);
    w->polls++;
    if (json_is_array(data)) {
        size_t i;
        json_t *t;
        json_array_foreach(data, i, t) check_task(w, t);
        n = (int)json_array_size(data);
    } else {
        w->failed_polls++;
    }
    pthread_mutex_unlock(&w->mu);
    h_resp_free(&r);
    return n;
}

static void *watch_thread(void *arg)
{
    watcher *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        int stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        if (stop) break;
        watch_once(w);
        poll(NULL, 0, 50); /* a pause between passes, not a wait for anything */
    }
    return NULL;
}

/* Results that changed or tasks that left "succeeded", so far; prints the first. */
static int watch_problems(watcher *w)
{
    pthread_mutex_lock(&w->mu);
    int n = w->changed + w->regressed;
    if (n) fprintf(stderr, "chaos: %s\n", w->problem);
    pthread_mutex_unlock(&w->mu);
    return n;
}

static int seen_count(watcher *w)
{
    pthread_mutex_lock(&w->mu);
    int n = w->n;
    pthread_mutex_unlock(&w->mu);
    return n;
}

/* ---- conditions --------------------------------------------------------- */

typedef struct node_cond {
    h_pool *p;
    const char *name;
    const char *state;
} node_cond;

static int node_in_state(void *ctx)
{
    node_cond *c = ctx;
    char st[32];
    h_node_field(c->p, "name", c->name, "state", st, sizeof st);
    return !strcmp(st, c->state);
}

/* Tasks running on a node, as the coordinator lists them. */
static int running_on(h_pool *p, const char *node_id)
{
    h_resp r;
    h_request(p, "GET", "/v1/tasks?status=running&limit=1000", NULL, NULL, &r);
    int n = 0;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(r.json, "data"), i, t) {
        const char *node = json_string_value(json_object_get(t, "node"));
        n += node && (!node_id || !strcmp(node, node_id));
    }
    h_resp_free(&r);
    return n;
}

typedef struct run_cond {
    h_pool *p;
    const char *node_id; /* NULL: any node */
} run_cond;

static int has_running(void *ctx)
{
    run_cond *c = ctx;
    return running_on(c->p, c->node_id) > 0;
}

typedef struct progress_cond {
    watcher *w;
    int want;
} progress_cond;

/* At least want tasks were seen succeeded. */
static int progressed(void *ctx)
{
    progress_cond *c = ctx;
    return seen_count(c->w) >= c->want;
}

typedef struct reason_cond {
    h_pool *p;
    const char *name, *reason;
} reason_cond;

static int reason_is(void *ctx)
{
    reason_cond *c = ctx;
    char why[160];
    h_node_field(c->p, "name", c->name, "state_reason", why, sizeof why);
    return !strcmp(why, c->reason);
}

typedef struct final_cond {
    h_pool *p;
    int final, succeeded;
} final_cond;

static int all_final(void *ctx)
{
    final_cond *c = ctx;
    h_resp r;
    h_request(c->p, "GET", "/v1/tasks?limit=1000", NULL, NULL, &r);
    c->final = c->succeeded = 0;
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(r.json, "data"), i, t) {
        const char *st = json_string_value(json_object_get(t, "status"));
        if (!st) continue;
        c->succeeded += !strcmp(st, "succeeded");
        c->final += !strcmp(st, "succeeded") || !strcmp(st, "failed") || !strcmp(st, "canceled");
    }
    int listed = (int)json_array_size(json_object_get(r.json, "data"));
    h_resp_free(&r);
    return listed >= NTASKS && c->final == listed;
}

/* ---- the test ----------------------------------------------------------- */

typedef struct chaos {
    h_pool p;
    watcher w;
    int watching;
    h_proc *workers[NWORKERS];
    char *accepted[NTASKS]; /* task ids, by submission */
    json_t *final;          /* every task as read at the end */
} chaos;

static int setup(void **state)
{
    chaos *c = calloc(1, sizeof *c);
    h_pool_init(&c->p, "chaos");
    pthread_mutex_init(&c->w.mu, NULL);
    c->w.p = &c->p;
    *state = c;
    return 0;
}

static void stop_watcher(chaos *c)
{
    if (!c->watching) return;
    pthread_mutex_lock(&c->w.mu);
    c->w.stop = 1;
    pthread_mutex_unlock(&c->w.mu);
    pthread_join(c->w.th, NULL);
    c->watching = 0;
}

static int teardown(void **state)
{
    chaos *c = *state;
    stop_watcher(c);
    /* A failed assertion may leave the frozen worker stopped: wake it so
     * that it can stop on SIGTERM like the others. */
    for (int i = 0; i < c->p.nprocs; i++) h_kill(&c->p.procs[i], SIGCONT);
    int problems = h_pool_cleanup(&c->p);
    for (int i = 0; i < c->w.n; i++) free(c->w.s[i].result);
    for (int i = 0; i < NTASKS; i++) free(c->accepted[i]);
    json_decref(c->final);
    pthread_mutex_destroy(&c->w.mu);
    free(c);
    return problems;
}

/* How many of the tasks' attempts ended with outcome on node_id (NULL: any). */
static int count_outcomes(json_t *tasks, const char *outcome, const char *node_id)
{
    int n = 0;
    size_t i, k;
    json_t *t, *a;
    json_array_foreach(tasks, i, t) {
        json_array_foreach(json_object_get(t, "attempt_history"), k, a) {
            const char *o = json_string_value(json_object_get(a, "outcome"));
            const char *nd = json_string_value(json_object_get(a, "node"));
            n += o && !strcmp(o, outcome) && (!node_id || (nd && !strcmp(nd, node_id)));
        }
    }
    return n;
}

static int64_t detect(h_pool *p, const char *name, const char *state, int64_t since, int64_t timeout_ms)
{
    node_cond nc = {p, name, state};
    if (!h_wait_until(node_in_state, &nc, timeout_ms)) return -1;
    return h_now_ms() - since;
}

static void chaos_run(void **state)
{
    chaos *c = *state;
    h_pool *p = &c->p;
    int64_t t_start = h_now_ms();
    h_start_coordinator(p, NULL);
    char ids[NWORKERS][64];
    for (int i = 0; i < NWORKERS; i++) {
        c->workers[i] = h_start_worker(p, NAMES[i], SIM_ARGS, NULL);
        h_node_field(p, "name", NAMES[i], "id", ids[i], sizeof ids[i]);
        assert_memory_equal(ids[i], "node-", 5);
    }
    for (int i = 0; i < NWORKERS; i++)
        for (int j = 0; j < i; j++) assert_string_not_equal(ids[i], ids[j]);

    assert_int_equal(pthread_create(&c->w.th, NULL, watch_thread, &c->w), 0);
    c->watching = 1;

    /* 200 tasks, each with its own key; every one is accepted (202). */
    char **accepted = c->accepted;
    char body[512], key[64];
    int64_t t_submit = h_now_ms();
    for (int i = 0; i < NTASKS; i++) {
        long st = 0;
        snprintf(body, sizeof body, TASK_FMT, i);
        snprintf(key, sizeof key, "chaos-%03d", i);
        accepted[i] = h_submit_task(p, body, key, &st);
        assert_int_equal(st, 202);
        assert_non_null(accepted[i]);
    }
    int64_t submit_ms = h_now_ms() - t_submit;

    /* The faults come one after the other as the run progresses, each once
     * the node it hits has attempts in flight. */
    /* 1. An engine dies under its worker. */
    progress_cond pc = {&c->w, FAULT_AT[0]};
    assert_true(h_wait_until(progressed, &pc, 30000));
    run_cond rc = {p, ids[0]};
    assert_true(h_wait_until(has_running, &rc, 10000));
    pid_t engine = h_child_pid(c->workers[0]->pid, "sim-engine");
    assert_true(engine > 0);
    int64_t t_engine = h_now_ms();
    assert_int_equal(kill(engine, SIGKILL), 0);
    int64_t engine_detect = detect(p, NAMES[0], "not_ready", t_engine, 5000);
    assert_true(engine_detect >= 0);
    /* Its worker's self-check then reports it in every heartbeat. */
    reason_cond rsc = {p, NAMES[0], "no engine is answering"};
    assert_true(h_wait_until(reason_is, &rsc, 5000));
    int64_t engine_beat = h_now_ms() - t_engine;

    /* 2. A worker is kill -9ed. */
    pc.want = FAULT_AT[1];
    assert_true(h_wait_until(progressed, &pc, 30000));
    rc.node_id = ids[1];
    assert_true(h_wait_until(has_running, &rc, 10000));
    int64_t t_kill = h_now_ms();
    h_kill(c->workers[1], SIGKILL);
    int64_t kill_detect = detect(p, NAMES[1], "offline", t_kill, 5000);
    assert_int_equal(h_wait_exit(c->workers[1], 5000), 128 + SIGKILL);

    /* 3. A worker freezes (its sockets stay open, nothing answers), and
     * wakes again once it was seen offline. */
    pc.want = FAULT_AT[2];
    assert_true(h_wait_until(progressed, &pc, 30000));
    rc.node_id = ids[2];
    assert_true(h_wait_until(has_running, &rc, 10000));
    int64_t t_stop = h_now_ms();
    h_kill(c->workers[2], SIGSTOP);
    int64_t stop_detect = detect(p, NAMES[2], "offline", t_stop, 5000);
    h_kill(c->workers[2], SIGCONT);
    int64_t t_cont = h_now_ms();
    int64_t wake_ms = detect(p, NAMES[2], "ready", t_cont, 10000);

    fprintf(stderr, "chaos: submit %lld ms; engine kill -> not_ready %lld ms (heartbeat says so at %lld ms); "
                    "kill -9 -> offline %lld ms; SIGSTOP -> offline %lld ms; SIGCONT -> ready %lld ms "
                    "(limit %d ms)\n",
            (long long)submit_ms, (long long)engine_detect, (long long)engine_beat, (long long)kill_detect,
            (long long)stop_detect, (long long)wake_ms, DETECT_LIMIT_MS);
    assert_true(engine_detect <= DETECT_LIMIT_MS && engine_beat <= DETECT_LIMIT_MS);
    assert_true(kill_detect >= 0 && kill_detect <= DETECT_LIMIT_MS);
    assert_true(stop_detect >= 0 && stop_detect <= DETECT_LIMIT_MS);
    assert_true(wake_ms >= 0);

    /* 4. The coordinator is kill -9ed while tasks run, and restarted. */
    pc.want = FAULT_AT[3];
    assert_true(h_wait_until(progressed, &pc, 30000));
    rc.node_id = NULL;
    assert_true(h_wait_until(has_running, &rc, 10000));
    int seen_before_crash = seen_count(&c->w);
    h_kill(p->coord, SIGKILL);
    assert_int_equal(h_wait_exit(p->coord, 5000), 128 + SIGKILL);
    int64_t t_restart = h_now_ms();
    h_restart_coordinator(p);
    /* The live workers join again; the one whose engine is dead joins too,
     * and is not ready. */
    int64_t rejoin_ms[NWORKERS] = {0};
    for (int i = 0; i < NWORKERS; i++) {
        if (i == 1) continue;
        rejoin_ms[i] = detect(p, NAMES[i], i == 0 ? "not_ready" : "ready", t_restart, 15000);
        assert_true(rejoin_ms[i] >= 0);
    }
    /* Nodes are not stored: the killed worker, which never came back, is not
     * listed by the restarted coordinator. */
    char st[32];
    h_node_field(p, "name", NAMES[1], "state", st, sizeof st);
    assert_string_equal(st, "");

    /* Every result seen before the crash reads the same after it. */
    assert_true(seen_before_crash > 0);
    assert_int_equal(watch_once(&c->w), NTASKS);
    assert_int_equal(watch_problems(&c->w), 0);

    /* Submitting every task again with its key finds the same task. */
    for (int i = 0; i < NTASKS; i++) {
        snprintf(body, sizeof body, TASK_FMT, i);
        snprintf(key, sizeof key, "chaos-%03d", i);
        char hdr[100];
        snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", key);
        const char *headers[] = {hdr, NULL};
        h_resp r;
        h_request(p, "POST", "/v1/tasks", body, headers, &r);
        assert_int_equal(r.status, 200);
        assert_string_equal(json_string_value(json_object_get(r.json, "id")), accepted[i]);
        char replayed[16];
        assert_non_null(h_header(&r, "Idempotent-Replayed", replayed, sizeof replayed));
        assert_string_equal(replayed, "true");
        h_resp_free(&r);
    }

    /* Everything finishes. */
    final_cond fc = {p, 0, 0};
    int done = h_wait_until(all_final, &fc, 40000);
    if (!done) fprintf(stderr, "chaos: %d final, %d succeeded\n", fc.final, fc.succeeded);
    assert_true(done);
    stop_watcher(c);
    assert_int_equal(watch_once(&c->w), NTASKS);
    int64_t total_ms = h_now_ms() - t_start;

    /* The list holds exactly the accepted tasks, each once, all succeeded. */
    h_resp r;
    h_request(p, "GET", "/v1/tasks?limit=1000", NULL, NULL, &r);
    json_t *data = json_object_get(r.json, "data");
    assert_int_equal(json_array_size(data), NTASKS);
    int hit[NTASKS] = {0};
    size_t i;
    json_t *t;
    json_array_foreach(data, i, t) {
        const char *id = json_string_value(json_object_get(t, "id"));
        int k = 0;
        while (k < NTASKS && strcmp(accepted[k], id)) k++;
        assert_true(k < NTASKS);
        assert_int_equal(hit[k]++, 0);
        assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
    }
    h_resp_free(&r);

    /* Each task read on its own: succeeded, with the result first seen. */
    json_t *all = c->final = json_array();
    int attempts_total = 0, max_attempts = 0;
    for (int k = 0; k < NTASKS; k++) {
        char path[128];
        snprintf(path, sizeof path, "/v1/tasks/%s", accepted[k]);
        h_request(p, "GET", path, NULL, NULL, &r);
        assert_int_equal(r.status, 200);
        assert_string_equal(json_string_value(json_object_get(r.json, "status")), "succeeded");
        seen *s = find_seen(&c->w, accepted[k]);
        assert_non_null(s);
        char *now = result_text(r.json);
        int same = !strcmp(now, s->result);
        if (!same) fprintf(stderr, "chaos: task %s: result %.200s, first seen %.200s\n", accepted[k], now, s->result);
        free(now);
        if (!same) h_resp_free(&r);
        assert_true(same);
        int a = (int)json_integer_value(json_object_get(r.json, "attempts"));
        attempts_total += a;
        if (a > max_attempts) max_attempts = a;
        /* The attempt that succeeded is the last one, on the task's node. */
        json_t *hist = json_object_get(r.json, "attempt_history");
        json_t *last = json_array_get(hist, json_array_size(hist) - 1);
        assert_string_equal(json_string_value(json_object_get(last, "outcome")), "succeeded");
        assert_string_equal(json_string_value(json_object_get(last, "node")),
                            json_string_value(json_object_get(r.json, "node")));
        json_array_append(all, r.json);
        h_resp_free(&r);
    }
    assert_int_equal(watch_problems(&c->w), 0);
    assert_int_equal(seen_count(&c->w), NTASKS);

    /* Each fault hit attempts in flight, and those tasks moved elsewhere. */
    int on_engine = count_outcomes(all, "node_not_ready", ids[0]);
    int on_killed = count_outcomes(all, "node_unreachable", ids[1]);
    int on_frozen = count_outcomes(all, "node_offline", ids[2]);
    int restarted = count_outcomes(all, "coordinator_restart", NULL);
    fprintf(stderr, "chaos: %lld ms in all, %d attempts for %d tasks (at most %d for one); interrupted: "
                    "%d by the dead engine, %d by kill -9, %d by SIGSTOP, %d by the restart; "
                    "rejoin %lld/%lld/%lld ms; %d watcher passes\n",
            (long long)total_ms, attempts_total, NTASKS, max_attempts, on_engine, on_killed, on_frozen, restarted,
            (long long)rejoin_ms[0], (long long)rejoin_ms[2], (long long)rejoin_ms[3], c->w.polls);
    assert_true(on_engine >= 1);
    assert_true(on_killed >= 1);
    assert_true(on_frozen >= 1);
    assert_true(restarted >= 1);
    /* The node whose engine died is still not ready (nothing restarts the
     * engine), by its own heartbeats. */
    h_node_field(p, "name", NAMES[0], "state", st, sizeof st);
    assert_string_equal(st, "not_ready");
    assert_true(h_wait_until(reason_is, &rsc, 5000));
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(chaos_run, setup, teardown),
    };
    return cmocka_run_group_tests_name("e2e_chaos", tests, NULL, NULL);
}
