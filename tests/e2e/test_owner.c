/* e2e: the owner comes back.  A foreign process on a worker's GPU drains the
 * node within a heartbeat, its running work finishes, the queued work goes
 * to the other node, and the node serves again once the process is gone.  A
 * GPU whose context is lost fails the self-check until it answers again.
 * The owner's policy (user activity, VRAM cap, serving hours) works from a
 * config file and the command line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "util/opts.h"

#define HEARTBEAT_MS 200
#define TASK "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"input\":{\"messages\":" \
             "[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":20}}"
/* One slot and about a second a task: work queues, and what runs is still
 * running when the owner comes back. */
#define SIM_ARGS "--ttft-ms%2050%20--tps%2020%20--slots%201"
#define GPU_FREE "RTX 3060:12:10\n"
#define GPU_TAKEN "RTX 3060:12:6 proc=2999999:4\n"

static int setup(void **state)
{
    h_pool *p = h_pool_new("owner");
    *state = p;
    return 0;
}

static void put(const char *path, const char *text)
{
    /* Renamed into place, so the worker never reads half a file. */
    if (write_file_atomic(path, text)) fail_msg("cannot write %s", path);
}

static void node_of(h_pool *p, const char *name, const char *field, char *out, size_t len)
{
    h_node_field(p, "name", name, field, out, len);
}

typedef struct node_ctx { h_pool *p; const char *name, *state; } node_ctx;
static int node_in_state(void *ctx)
{
    node_ctx *c = ctx;
    char st[32];
    node_of(c->p, c->name, "state", st, sizeof st);
    return !strcmp(st, c->state);
}

static int wait_state(h_pool *p, const char *name, const char *state, int64_t timeout_ms)
{
    node_ctx c = {p, name, state};
    return h_wait_until(node_in_state, &c, timeout_ms);
}

static int worker_busy(void *ctx)
{
    node_ctx *c = ctx;
    h_resp r;
    h_request(c->p, "GET", "/v1/nodes", NULL, NULL, &r);
    int busy = 0;
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(r.json, "data"), i, n)
        if (!strcmp(json_string_value(json_object_get(n, "name")), c->name))
            busy = json_integer_value(json_object_get(n, "worker_inflight")) > 0;
    h_resp_free(&r);
    return busy;
}

/* A task's status and node right now. */
static void task_where(h_pool *p, const char *id, char *status, char *node, size_t len)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/tasks/%s", id);
    h_resp r;
    h_request(p, "GET", path, NULL, NULL, &r);
    const char *s = json_string_value(json_object_get(r.json, "status"));
    const char *n = json_string_value(json_object_get(r.json, "node"));
    snprintf(status, len, "%s", s ? s : "");
    snprintf(node, len, "%s", n ? n : "");
    h_resp_free(&r);
}

static char *submit(h_pool *p)
{
    long st;
    char *id = h_submit_task(p, TASK, NULL, &st);
    assert_int_equal(st, 202);
    assert_non_null(id);
    return id;
}

/* Waits for every task to succeed and counts those that ran on node_id. */
static int finish_all(h_pool *p, char **ids, int n, const char *node_id)
{
    int on = 0;
    for (int i = 0; i < n; i++) {
        json_t *t = h_wait_task_final(p, ids[i], 60000);
        assert_non_null(t);
        assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
        on += !strcmp(json_string_value(json_object_get(t, "node")), node_id);
        json_decref(t);
    }
    return on;
}

static void foreign_process_drains_within_a_heartbeat(void **state)
{
    h_pool *p = *state;
    char gpus[300], args[400];
    snprintf(gpus, sizeof gpus, "%s/a-gpus", p->dir);
    put(gpus, GPU_FREE);
    snprintf(args, sizeof args, "--fake-gpu-file %s", gpus);
    h_start_coordinator(p, NULL);
    h_proc *a = h_start_worker(p, "machine-a", SIM_ARGS, args);
    h_start_worker(p, "machine-b", SIM_ARGS, NULL);
    char a_id[64], b_id[64];
    node_of(p, "machine-a", "id", a_id, sizeof a_id);
    node_of(p, "machine-b", "id", b_id, sizeof b_id);

    enum { BEFORE = 6, AFTER = 3 };
    char *ids[BEFORE + AFTER];
    for (int i = 0; i < BEFORE; i++) ids[i] = submit(p);
    /* Work is inside A's engine before the owner comes back. */
    node_ctx busy = {p, "machine-a", NULL};
    assert_true(h_wait_until(worker_busy, &busy, 20000));
    char st[32], node[64];
    int running_on_a = -1;
    for (int i = 0; i < BEFORE; i++) {
        task_where(p, ids[i], st, node, sizeof node);
        if (!strcmp(st, "running") && !strcmp(node, a_id)) running_on_a = i;
    }
    assert_true(running_on_a >= 0);

    int64_t t0 = h_now_ms();
    put(gpus, GPU_TAKEN);
    assert_true(wait_state(p, "machine-a", "draining", 5000));
    int64_t took = h_now_ms() - t0;
    print_message("drained %lld ms after the foreign process appeared (heartbeat %d ms)\n", (long long)took,
                  HEARTBEAT_MS);
    /* One beat to see it and send it, plus what polling and a loaded
     * machine add. */
    assert_true(took <= 2 * HEARTBEAT_MS + 600);

    /* What ran on A at that moment may finish there; nothing else may. */
    int may_stay[BEFORE] = {0};
    for (int i = 0; i < BEFORE; i++) {
        task_where(p, ids[i], st, node, sizeof node);
        may_stay[i] = !strcmp(st, "running") && !strcmp(node, a_id);
    }
    for (int i = BEFORE; i < BEFORE + AFTER; i++) ids[i] = submit(p);

    for (int i = 0; i < BEFORE + AFTER; i++) {
        json_t *t = h_wait_task_final(p, ids[i], 60000);
        assert_non_null(t);
        const char *tn = json_string_value(json_object_get(t, "node"));
        assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
        if (i == running_on_a) {
            /* Running work is let finish, not moved. */
            assert_string_equal(tn, a_id);
            assert_int_equal(json_integer_value(json_object_get(t, "attempts")), 1);
        } else if (i >= BEFORE || !may_stay[i]) {
            if (strcmp(tn, b_id)) fail_msg("task %d ran on %s after machine-a drained", i, tn);
        }
        json_decref(t);
    }
    char reason[160];
    node_of(p, "machine-a", "state", st, sizeof st);
    assert_string_equal(st, "draining");
    node_of(p, "machine-a", "state_reason", reason, sizeof reason);
    if (reason[0]) assert_non_null(strstr(reason, "foreign process"));
    assert_true(h_log_contains(a, "draining, taking no new work: a foreign process (pid 2999999, 4 GiB) is using GPU 0"));

    /* The owner leaves: ready again once that has held for a few beats. */
    put(gpus, GPU_FREE);
    assert_true(wait_state(p, "machine-a", "ready", 10000));
    assert_true(h_log_contains(a, "serving again: no longer a foreign process"));
    char *again[4];
    for (int i = 0; i < 4; i++) again[i] = submit(p);
    assert_true(finish_all(p, again, 4, a_id) >= 1);
    for (int i = 0; i < 4; i++) free(again[i]);
    for (int i = 0; i < BEFORE + AFTER; i++) free(ids[i]);
}

/* A woken machine whose GPU context is gone: not ready, no work, until the
 * GPU answers again. */
static void lost_gpu_fails_the_self_check(void **state)
{
    h_pool *p = *state;
    char gpus[300], args[400];
    snprintf(gpus, sizeof gpus, "%s/a-gpus", p->dir);
    put(gpus, GPU_FREE);
    snprintf(args, sizeof args, "--fake-gpu-file %s", gpus);
    h_start_coordinator(p, NULL);
    h_proc *a = h_start_worker(p, "machine-a", SIM_ARGS, args);
    h_start_worker(p, "machine-b", SIM_ARGS, NULL);
    char a_id[64];
    node_of(p, "machine-a", "id", a_id, sizeof a_id);

    put(gpus, "lost\n");
    assert_true(wait_state(p, "machine-a", "not_ready", 5000));
    char reason[160];
    node_of(p, "machine-a", "state_reason", reason, sizeof reason);
    assert_non_null(strstr(reason, "GPU"));
    assert_true(h_log_contains(a, "self-check failed, taking no work"));
    char *ids[4];
    for (int i = 0; i < 4; i++) ids[i] = submit(p);
    assert_int_equal(finish_all(p, ids, 4, a_id), 0);
    /* Still not ready: it is the self-check, not a passing failure. */
    char st[32];
    node_of(p, "machine-a", "state", st, sizeof st);
    assert_string_equal(st, "not_ready");

    put(gpus, GPU_FREE);
    assert_true(wait_state(p, "machine-a", "ready", 10000));
    assert_true(h_log_contains(a, "self-check passes again"));
    for (int i = 0; i < 4; i++) free(ids[i]);
    for (int i = 0; i < 4; i++) ids[i] = submit(p);
    assert_true(finish_all(p, ids, 4, a_id) >= 1);
    for (int i = 0; i < 4; i++) free(ids[i]);
}

static long node_long(h_pool *p, const char *name, const char *field)
{
    h_resp r;
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    long v = -1;
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(r.json, "data"), i, n)
        if (!strcmp(json_string_value(json_object_get(n, "name")), name))
            v = (long)json_integer_value(json_object_get(n, field));
    h_resp_free(&r);
    return v;
}

/* The policy from a config file: the user at the keyboard pauses the node,
 * and the VRAM cap bounds what it offers. */
static void owner_policy_from_a_config_file(void **state)
{
    h_pool *p = *state;
    char idle[300], conf[300], text[800], args[400];
    snprintf(idle, sizeof idle, "%s/a-idle", p->dir);
    snprintf(conf, sizeof conf, "%s/a.conf", p->dir);
    put(idle, "3600\n");
    snprintf(text, sizeof text,
             "# the owner's wishes\n"
             "pause-when-user-active = 60\n"
             "fake-idle-file = %s\n"
             "max-vram = 4G\n"
             "serve-hours = 00:00-24:00\n",
             idle);
    put(conf, text);
    snprintf(args, sizeof args, "--config %s", conf);
    h_start_coordinator(p, NULL);
    h_proc *a = h_start_worker(p, "machine-a", SIM_ARGS, args);
    assert_int_equal(node_long(p, "machine-a", "free_vram_bytes"), 4L << 30);

    put(idle, "5\n");
    assert_true(wait_state(p, "machine-a", "draining", 5000));
    assert_true(h_log_contains(a, "the user is active (input 5 s ago)"));
    put(idle, "61\n");
    assert_true(wait_state(p, "machine-a", "ready", 5000));
}

/* Outside its serving hours a node drains from the start; inside them it
 * serves. */
static void serving_hours(void **state)
{
    h_pool *p = *state;
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    int m = tm.tm_hour * 60 + tm.tm_min;
    int later = (m + 60) % 1440, later2 = (m + 120) % 1440, before = (m + 1440 - 60) % 1440;
    char args[600];
    h_start_coordinator(p, NULL);
    /* A window around now (it may wrap past midnight). */
    snprintf(args, sizeof args, "--serve-hours daily%%20%02d:%02d-%02d:%02d", before / 60, before % 60,
             later / 60, later % 60);
    h_start_worker(p, "machine-b", SIM_ARGS, args);

    snprintf(args, sizeof args,
             "worker --coordinator %s --join-token %s --listen 127.0.0.1:0 --engine sim --fake-gpu RTX%%203060:12:10 "
             "--heartbeat-ms %d --name machine-a --serve-hours %02d:%02d-%02d:%02d",
             p->base, p->join_token, HEARTBEAT_MS, later / 60, later % 60, later2 / 60, later2 % 60);
    const char *env[] = {"GPUPOOL_MACHINE_ID=machine-a", NULL};
    h_proc *a = h_spawn(p, "machine-a", args, env);
    h_wait_port(a, 20000);
    assert_true(wait_state(p, "machine-a", "draining", 10000));
    assert_true(h_log_contains(a, "outside serving hours"));
    char st[32];
    node_of(p, "machine-b", "state", st, sizeof st);
    assert_string_equal(st, "ready");
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(foreign_process_drains_within_a_heartbeat, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(lost_gpu_fails_the_self_check, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(owner_policy_from_a_config_file, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(serving_hours, setup, h_pool_teardown),
    };
    return cmocka_run_group_tests_name("owner", tests, NULL, NULL);
}
