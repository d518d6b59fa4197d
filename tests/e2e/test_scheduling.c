/* e2e: the scheduler with real processes: measured speed steers work to the
 * faster node, failed attempts go to another node, slow attempts are hedged,
 * priorities jump the queue, per-key limits hold, and the admin verbs drain,
 * undrain and forget nodes. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define TASK(prio, tokens)                                                                      \
    "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"priority\":" #prio ",\"input\":{\"messages\":" \
    "[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":" #tokens "}}"
#define CHAT "{\"model\":\"sim-llama-8b\",\"max_tokens\":20,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"

static int setup(void **state)
{
    h_pool *p = h_pool_new("sched");
    *state = p;
    return 0;
}

static char *submit_as(h_pool *p, const char *key, const char *body)
{
    char auth[160];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
    const char *headers[] = {auth, NULL};
    h_resp r;
    h_request(p, "POST", "/v1/tasks", body, key ? headers : NULL, &r);
    assert_int_equal(r.status, 202);
    char *id = strdup(json_string_value(json_object_get(r.json, "id")));
    h_resp_free(&r);
    return id;
}

static char *submit(h_pool *p, const char *body) { return submit_as(p, NULL, body); }

static json_t *final(h_pool *p, const char *id)
{
    json_t *t = h_wait_task_final(p, id, 30000);
    assert_non_null(t);
    return t;
}

static const char *node_name_of(h_pool *p, const char *node_id, char *out, size_t len)
{
    return h_node_field(p, "id", node_id, "name", out, len);
}

static void faster_node_gets_the_work(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_start_worker(p, "fast", "--ttft-ms%205%20--tps%20400%20--slots%204", NULL);
    h_start_worker(p, "slow", "--ttft-ms%205%20--tps%2020%20--slots%204", NULL);
    int on_fast = 0;
    char seq[256] = "";
    for (int i = 0; i < 14; i++) {
        h_resp r;
        h_request(p, "POST", "/v1/chat/completions", CHAT, NULL, &r);
        assert_int_equal(r.status, 200);
        char node[64], name[64];
        h_header(&r, "X-Gpupool-Node", node, sizeof node);
        node_name_of(p, node, name, sizeof name);
        /* the first calls try both nodes; after that speed decides */
        if (i >= 4) on_fast += !strcmp(name, "fast");
        strncat(seq, name[0] == 'f' ? "F" : "s", sizeof seq - strlen(seq) - 1);
        h_resp_free(&r);
    }
    if (on_fast != 10) fail_msg("nodes chosen: %s", seq);
    /* the profile shows what was measured */
    char fast_id[64];
    h_node_field(p, "name", "fast", "id", fast_id, sizeof fast_id);
    h_resp r;
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    json_t *n, *prof = NULL;
    size_t i;
    json_array_foreach(json_object_get(r.json, "data"), i, n)
        if (!strcmp(json_string_value(json_object_get(n, "id")), fast_id)) prof = json_object_get(n, "profile");
    json_t *m = json_object_get(json_object_get(prof, "models"), "sim-llama-8b");
    assert_non_null(m);
    assert_true(json_real_value(json_object_get(m, "tokens_per_s")) > 100);
    h_resp_free(&r);
}

static void failed_attempts_retry_on_another_node(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, "--retry-backoff-ms 100");
    h_start_worker(p, "broken", "--ttft-ms%205%20--tps%20200%20--slots%204%20--error-rate%201", NULL);
    h_start_worker(p, "good", "--ttft-ms%205%20--tps%20200%20--slots%204", NULL);
    char *ids[8];
    for (int i = 0; i < 8; i++) ids[i] = submit(p, TASK(5, 10));
    char broken_id[64];
    h_node_field(p, "name", "broken", "id", broken_id, sizeof broken_id);
    int retried = 0;
    for (int i = 0; i < 8; i++) {
        json_t *t = final(p, ids[i]);
        assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
        json_t *hist = json_object_get(t, "attempt_history");
        size_t n = json_array_size(hist);
        for (size_t a = 0; a + 1 < n; a++) {
            json_t *at = json_array_get(hist, a), *next = json_array_get(hist, a + 1);
            assert_string_equal(json_string_value(json_object_get(at, "outcome")), "engine_error");
            assert_string_equal(json_string_value(json_object_get(at, "node")), broken_id);
            /* the retry went to the other node */
            assert_string_not_equal(json_string_value(json_object_get(next, "node")), broken_id);
            retried++;
        }
        assert_string_not_equal(json_string_value(json_object_get(t, "node")), broken_id);
        json_decref(t);
        free(ids[i]);
    }
    assert_true(retried >= 1);
    /* a synchronous call that meets the broken engine is retried as well */
    for (int i = 0; i < 6; i++) {
        h_resp r;
        h_request(p, "POST", "/v1/chat/completions", CHAT, NULL, &r);
        assert_int_equal(r.status, 200);
        char node[64];
        h_header(&r, "X-Gpupool-Node", node, sizeof node);
        assert_string_not_equal(node, broken_id);
        h_resp_free(&r);
    }
}

static int metric_at_least(h_pool *p, const char *name, long want)
{
    h_resp r;
    h_request(p, "GET", "/metrics", NULL, NULL, &r);
    char line[128];
    snprintf(line, sizeof line, "\n%s ", name); /* the sample, not its # HELP line */
    const char *at = r.body ? strstr(r.body, line) : NULL;
    long v = at ? strtol(at + strlen(line), NULL, 10) : -1;
    h_resp_free(&r);
    return v >= want;
}

static void slow_attempt_is_hedged_elsewhere(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, "--hedge-factor 2 --hedge-min-ms 400");
    h_start_worker(p, "stuck", "--ttft-ms%205%20--tps%20200%20--slots%204%20--hang-rate%201", NULL);
    h_start_worker(p, "fine", "--ttft-ms%205%20--tps%20200%20--slots%204", NULL);
    char *ids[6];
    for (int i = 0; i < 6; i++) ids[i] = submit(p, TASK(5, 10));
    char stuck_id[64];
    h_node_field(p, "name", "stuck", "id", stuck_id, sizeof stuck_id);
    int superseded = 0;
    for (int i = 0; i < 6; i++) {
        json_t *t = final(p, ids[i]);
        assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
        assert_string_not_equal(json_string_value(json_object_get(t, "node")), stuck_id);
        size_t a;
        json_t *at;
        json_array_foreach(json_object_get(t, "attempt_history"), a, at) {
            const char *out = json_string_value(json_object_get(at, "outcome"));
            if (out && !strcmp(out, "superseded")) {
                assert_string_equal(json_string_value(json_object_get(at, "node")), stuck_id);
                superseded++;
            }
        }
        json_decref(t);
        free(ids[i]);
    }
    assert_true(superseded >= 1);
    assert_true(metric_at_least(p, "gpupool_hedged_attempts_total", superseded));
}

static int64_t started_at(h_pool *p, const char *id)
{
    json_t *t = final(p, id);
    int64_t v = json_integer_value(json_object_get(t, "started_at"));
    json_decref(t);
    return v;
}

typedef struct running_ctx { h_pool *p; const char *id; } running_ctx;
static int is_running(void *ctx)
{
    running_ctx *c = ctx;
    char st[32];
    h_task_status(c->p, c->id, st, sizeof st);
    return !strcmp(st, "running");
}

static void high_priority_jumps_the_queue(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_start_worker(p, "only", "--ttft-ms%205%20--tps%2050%20--slots%201", NULL);
    char *filler = submit(p, TASK(5, 25)); /* ~0.5 s holding the only slot */
    running_ctx rc = {p, filler};
    assert_true(h_wait_until(is_running, &rc, 10000));
    char *low[4];
    for (int i = 0; i < 4; i++) low[i] = submit(p, TASK(1, 5));
    char *high = submit(p, TASK(9, 5));
    /* while it waits, it is first in line */
    char path[128];
    snprintf(path, sizeof path, "/v1/tasks/%s", high);
    h_resp r;
    h_request(p, "GET", path, NULL, NULL, &r);
    if (!strcmp(json_string_value(json_object_get(r.json, "status")), "queued"))
        assert_int_equal(json_integer_value(json_object_get(r.json, "queue_position")), 0);
    h_resp_free(&r);
    int64_t h = started_at(p, high);
    for (int i = 0; i < 4; i++) {
        assert_true(h <= started_at(p, low[i]));
        free(low[i]);
    }
    free(high);
    free(filler);
}

typedef struct share_ctx { h_pool *p; int max_a_running; } share_ctx;

static void per_key_limit_holds(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, "--api-key key-a --api-key key-b --key-max-running 1");
    snprintf(p->api_key, sizeof p->api_key, "key-a");
    h_start_worker(p, "wide", "--ttft-ms%205%20--tps%2050%20--slots%204", NULL);
    char *a[4];
    for (int i = 0; i < 4; i++) a[i] = submit_as(p, "key-a", TASK(5, 15));
    char *b = submit_as(p, "key-b", TASK(5, 15));
    /* key-a never has two tasks running at once, though slots are free: one
     * listing is one snapshot of the store */
    int max_running = 0, done = 0;
    int64_t deadline = h_now_ms() + 30000;
    while (!done && h_now_ms() < deadline) {
        h_resp r;
        h_request(p, "GET", "/v1/tasks?limit=100", NULL, NULL, &r);
        int running = 0;
        done = 1;
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(r.json, "data"), k, t) {
            const char *id = json_string_value(json_object_get(t, "id"));
            const char *st = json_string_value(json_object_get(t, "status"));
            for (int i = 0; i < 4; i++) {
                if (strcmp(id, a[i])) continue;
                running += !strcmp(st, "running");
                done &= !strcmp(st, "succeeded");
            }
        }
        h_resp_free(&r);
        if (running > max_running) max_running = running;
    }
    assert_true(done);
    assert_int_equal(max_running, 1);
    json_t *t = final(p, b);
    assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
    /* key-b did not wait for all of key-a's work */
    int64_t b_start = json_integer_value(json_object_get(t, "started_at"));
    json_decref(t);
    json_t *last = final(p, a[3]);
    assert_true(b_start < json_integer_value(json_object_get(last, "started_at")));
    json_decref(last);
    for (int i = 0; i < 4; i++) free(a[i]);
    free(b);
}

typedef struct state_ctx { h_pool *p; const char *name, *state; } state_ctx;
static int node_in_state(void *ctx)
{
    state_ctx *c = ctx;
    char st[32];
    h_node_field(c->p, "name", c->name, "state", st, sizeof st);
    return !strcmp(st, c->state);
}

static int cli(h_pool *p, const char *args, const char *expect_in_log)
{
    char full[512];
    snprintf(full, sizeof full, "%s --coordinator %s", args, p->base);
    h_proc *c = h_run_cli(p, "cli", full);
    int rc = h_wait_exit(c, 10000);
    if (expect_in_log && !h_log_contains(c, expect_in_log)) fail_msg("'%s' did not print '%s'", args, expect_in_log);
    return rc;
}

static void admin_verbs_drain_undrain_forget(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, "--api-key user-key --admin-key boss-key");
    snprintf(p->api_key, sizeof p->api_key, "user-key");
    h_proc *a = h_start_worker(p, "machine-a", "--ttft-ms%205%20--tps%20200", NULL);
    h_start_worker(p, "machine-b", "--ttft-ms%205%20--tps%20200", NULL);
    /* a user key may look but not drain */
    assert_int_equal(cli(p, "nodes --api-key user-key", "machine-a"), 0);
    assert_int_not_equal(cli(p, "drain machine-a --api-key user-key", "admin"), 0);
    assert_int_equal(cli(p, "drain machine-a --api-key boss-key", "draining"), 0);
    state_ctx drained = {p, "machine-a", "draining"};
    assert_true(node_in_state(&drained));
    assert_int_equal(cli(p, "nodes --api-key boss-key", "drained by an administrator"), 0);
    /* new work goes to b only, heartbeats notwithstanding */
    char a_id[64];
    h_node_field(p, "name", "machine-a", "id", a_id, sizeof a_id);
    for (int i = 0; i < 4; i++) {
        char *id = submit_as(p, "user-key", TASK(5, 5));
        json_t *t = final(p, id);
        assert_string_not_equal(json_string_value(json_object_get(t, "node")), a_id);
        json_decref(t);
        free(id);
    }
    assert_true(node_in_state(&drained));
    assert_int_equal(cli(p, "undrain machine-a --api-key boss-key", "undrained"), 0);
    state_ctx ready = {p, "machine-a", "ready"};
    assert_true(h_wait_until(node_in_state, &ready, 5000));
    /* forgetting a live node needs --force; an offline one goes */
    assert_int_not_equal(cli(p, "forget machine-a --api-key boss-key", "not offline"), 0);
    h_kill(a, SIGKILL);
    h_wait_exit(a, 5000);
    state_ctx offline = {p, "machine-a", "offline"};
    assert_true(h_wait_until(node_in_state, &offline, 10000));
    assert_int_equal(cli(p, "forget machine-a --api-key boss-key", "forgotten"), 0);
    assert_int_equal(h_node_count(p, NULL), 1);
    assert_int_not_equal(cli(p, "drain no-such-node --api-key boss-key", "no node"), 0);
}


typedef struct direct_call { h_pool *p; char url[256]; } direct_call;
static void *call_engine_directly(void *arg)
{
    direct_call *d = arg;
    h_resp r;
    h_request(d->p, "POST", d->url,
              "{\"model\":\"sim-llama-8b\",\"max_tokens\":40,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
              NULL, &r);
    h_resp_free(&r);
    return NULL;
}

typedef struct busy_engine { h_pool *p; const char *name; } busy_engine;
static int engine_reports_load(void *ctx)
{
    busy_engine *b = ctx;
    char id[64];
    h_node_field(b->p, "name", b->name, "id", id, sizeof id);
    h_resp r;
    h_request(b->p, "GET", "/v1/nodes", NULL, NULL, &r);
    int busy = 0;
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(r.json, "data"), i, n)
        if (!strcmp(json_string_value(json_object_get(n, "id")), id))
            busy = (int)(json_integer_value(json_object_get(n, "engine_busy")) +
                         json_integer_value(json_object_get(n, "engine_queued")));
    h_resp_free(&r);
    return busy >= 3;
}

/* Someone uses node a's engine directly, bypassing the pool: the load its
 * engine reports steers the pool's requests to node b. */
static void engine_load_from_outside_steers_work_away(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    /* more free VRAM: without the load signal it would win every tie */
    h_start_worker(p, "shared", "--ttft-ms%205%20--tps%2020%20--slots%202", "--fake-gpu RTX%204090:24:22");
    h_start_worker(p, "quiet", "--ttft-ms%205%20--tps%2020%20--slots%202", NULL);
    char id[64];
    h_node_field(p, "name", "shared", "id", id, sizeof id);
    h_resp r;
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    direct_call d = {.p = p};
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(r.json, "data"), i, n)
        if (!strcmp(json_string_value(json_object_get(n, "id")), id))
            snprintf(d.url, sizeof d.url, "%s/v1/chat/completions",
                     json_string_value(json_object_get(json_array_get(json_object_get(n, "engines"), 0), "url")));
    h_resp_free(&r);
    assert_true(d.url[0]);
    pthread_t t[4];
    for (int k = 0; k < 4; k++) pthread_create(&t[k], NULL, call_engine_directly, &d);
    busy_engine be = {p, "shared"};
    assert_true(h_wait_until(engine_reports_load, &be, 10000));
    for (int k = 0; k < 3; k++) {
        h_request(p, "POST", "/v1/chat/completions", CHAT, NULL, &r);
        assert_int_equal(r.status, 200);
        char node[64], name[64];
        h_header(&r, "X-Gpupool-Node", node, sizeof node);
        assert_string_equal(node_name_of(p, node, name, sizeof name), "quiet");
        h_resp_free(&r);
    }
    for (int k = 0; k < 4; k++) pthread_join(t[k], NULL);
}


/* The task queue is bounded: past --task-queue-max the answer is 429 with a
 * Retry-After, and what was accepted still runs. */
static void task_queue_is_bounded(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, "--task-queue-max 2");
    h_start_worker(p, "only", "--ttft-ms%205%20--tps%20200", NULL);
    /* drained, so the queue only fills */
    assert_int_equal(cli(p, "drain only", "draining"), 0);
    char *a = submit(p, TASK(5, 3)), *b = submit(p, TASK(5, 3));
    h_resp r;
    h_request(p, "POST", "/v1/tasks", TASK(5, 3), NULL, &r);
    assert_int_equal(r.status, 429);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")), "queue_full");
    char ra[16];
    assert_non_null(h_header(&r, "Retry-After", ra, sizeof ra));
    assert_true(atoi(ra) >= 1);
    h_resp_free(&r);
    assert_int_equal(cli(p, "undrain only", "undrained"), 0);
    json_t *t = final(p, a);
    assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
    json_decref(t);
    t = final(p, b);
    assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
    json_decref(t);
    free(a);
    free(b);
}

static int link_measured(void *arg)
{
    h_pool *p = arg;
    h_resp r;
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    json_t *prof = json_object_get(json_array_get(json_object_get(r.json, "data"), 0), "profile");
    double v = json_number_value(json_object_get(prof, "link_bytes_per_ms"));
    h_resp_free(&r);
    return v > 0;
}

/* A large request teaches the coordinator how fast the node's link is: the
 * worker times the body's arrival and its next heartbeat says so. */
static void large_payload_measures_the_link(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_start_worker(p, "only", "--ttft-ms%205%20--tps%20400", NULL);
    assert_false(link_measured(p));
    size_t n = 1 << 20;
    char *text = malloc(n + 1);
    memset(text, 'a', n);
    text[n] = 0;
    json_t *body = json_pack("{s:s, s:i, s:[{s:s, s:s}]}", "model", "sim-llama-8b", "max_tokens", 1, "messages", "role",
                             "user", "content", text);
    char *raw = json_dumps(body, JSON_COMPACT);
    h_resp r;
    h_request(p, "POST", "/v1/chat/completions", raw, NULL, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    assert_true(h_wait_until(link_measured, p, 10000));
    free(raw);
    json_decref(body);
    free(text);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(faster_node_gets_the_work, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(failed_attempts_retry_on_another_node, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(slow_attempt_is_hedged_elsewhere, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(high_priority_jumps_the_queue, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(per_key_limit_holds, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(admin_verbs_drain_undrain_forget, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(engine_load_from_outside_steers_work_away, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(task_queue_is_bounded, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(large_payload_measures_the_link, setup, h_pool_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
