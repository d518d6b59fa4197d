/* e2e: rollouts.  Two models, v1 and v2, under the name "chat": the
 * canary's share of real requests follows each step exactly, a session
 * keeps its version, tasks are routed too, `gpupool rollout` moves the
 * rollout through its states and it survives a coordinator restart; a
 * canary whose engine fails (--error-rate 1) is rolled back by itself and
 * all traffic returns to stable; a healthy one advances on its own. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define FAST "--ttft-ms%200%20--tps%200"

static int setup(void **state)
{
    *state = h_pool_new("rollout");
    return 0;
}

/* The role the answer names in X-Gpupool-Version: 1 canary, 0 stable, -1
 * none; the answer's model must be that version's. */
static int chat_role(h_pool *p, const char *session)
{
    char hdr[160];
    const char *headers[] = {hdr, NULL};
    snprintf(hdr, sizeof hdr, "X-Gpupool-Session: %s", session ? session : "");
    h_resp r;
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"chat\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}",
              session ? headers : NULL, &r);
    char v[256];
    int role = -1;
    if (r.status == 200 && h_header(&r, "X-Gpupool-Version", v, sizeof v)) {
        const char *model = json_string_value(json_object_get(r.json, "model"));
        if (strstr(v, "role=canary") && !strncmp(v, "v2;", 3)) role = 1;
        else if (strstr(v, "role=stable") && !strncmp(v, "v1;", 3)) role = 0;
        if (!model || (role >= 0 && strcmp(model, role ? "v2" : "v1"))) role = -2;
        if (!strstr(v, "rollout=chat")) role = -3;
    }
    if (role < 0 && r.status == 200) fail_msg("role %d from %s", role, v);
    if (r.status != 200) role = -10 - (int)r.status;
    h_resp_free(&r);
    return role;
}

static int canaries(h_pool *p, int n)
{
    int c = 0;
    for (int i = 0; i < n; i++) {
        int role = chat_role(p, NULL);
        if (role < 0) fail_msg("request %d: no version (%d)", i, role);
        c += role;
    }
    return c;
}

static json_t *rollout(h_pool *p, const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/rollouts/%s", name);
    h_resp r;
    h_request(p, "GET", path, NULL, NULL, &r);
    json_t *j = r.status == 200 ? json_incref(r.json) : NULL;
    h_resp_free(&r);
    return j;
}

static const char *state_of(h_pool *p, const char *name, char *out, size_t len)
{
    json_t *j = rollout(p, name);
    snprintf(out, len, "%s", j ? json_string_value(json_object_get(j, "state")) : "");
    json_decref(j);
    return out;
}

static int cli(h_pool *p, const char *args, const char *expect_in_log)
{
    char full[768];
    snprintf(full, sizeof full, "rollout %s --coordinator %s", args, p->base);
    h_proc *c = h_run_cli(p, "cli", full);
    int rc = h_wait_exit(c, 10000);
    if (expect_in_log && !h_log_contains(c, expect_in_log)) fail_msg("'%s' did not print '%s'", args, expect_in_log);
    return rc;
}

static long post(h_pool *p, const char *path, const char *body, h_resp *r)
{
    h_request(p, "POST", path, body, NULL, r);
    return r->status;
}

#define ITEM "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}"

typedef struct batch_ctx {
    h_pool *p;
    char id[96];
} batch_ctx;

static int batch_done(void *ctx)
{
    batch_ctx *b = ctx;
    char path[160];
    snprintf(path, sizeof path, "/v1/batches/%s", b->id);
    h_resp r;
    h_request(b->p, "GET", path, NULL, NULL, &r);
    const char *st = json_string_value(json_object_get(r.json, "status"));
    int done = st && !strcmp(st, "completed");
    h_resp_free(&r);
    return done;
}

/* How many of the batch's answers came from v2; every one must be v1 or v2. */
static int batch_canaries(h_pool *p, const char *id)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/batches/%s/results", id);
    h_resp r;
    h_request(p, "GET", path, NULL, NULL, &r);
    int n = 0;
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(r.json, "data"), i, item) {
        const char *m = json_string_value(json_object_get(json_object_get(json_object_get(item, "response"), "body"), "model"));
        if (!m || (strcmp(m, "v1") && strcmp(m, "v2"))) fail_msg("batch item %zu: model %s", i, m ? m : "(none)");
        n += !strcmp(m, "v2");
    }
    h_resp_free(&r);
    return n;
}

static int node_ready(void *ctx) { return h_node_count(ctx, "ready") >= 1; }

static void steps_split_traffic_and_the_cli_moves_them(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_start_worker(p, "machine-a", FAST "%20--model%20v1%20--model%20v2", NULL);
    h_resp r;
    /* Bad specs are refused with the field named. */
    assert_int_equal(post(p, "/v1/rollouts", "{\"name\":\"chat\",\"stable\":\"v1\",\"canary\":\"v2\",\"steps\":[50,10]}", &r), 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "param")), "steps");
    h_resp_free(&r);
    assert_int_equal(post(p, "/v1/rollouts", "{\"name\":\"chat\",\"stable\":\"v1\",\"canary\":\"v9\"}", &r), 404);
    h_resp_free(&r);
    assert_int_equal(post(p, "/v1/rollouts", "{\"name\":\"v1\",\"stable\":\"v1\",\"canary\":\"v2\"}", &r), 400);
    h_resp_free(&r);

    assert_int_equal(cli(p, "start chat --stable v1 --canary v2 --steps 10,50,100 --window 50 --min-samples 5",
                         "running at 10 %"), 0);
    assert_int_equal(post(p, "/v1/rollouts", "{\"name\":\"chat\",\"stable\":\"v1\",\"canary\":\"v2\"}", &r), 409);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")), "rollout_exists");
    h_resp_free(&r);

    /* 10 %: exactly 2 of 20 requests on the canary. */
    assert_int_equal(canaries(p, 20), 2);
    assert_int_equal(cli(p, "advance chat", "running at 50 %"), 0);
    assert_int_equal(canaries(p, 20), 10);

    /* A session keeps its version at 50 %. */
    int first = chat_role(p, "conversation-42");
    for (int i = 0; i < 6; i++) assert_int_equal(chat_role(p, "conversation-42"), first);

    /* A task naming the rollout runs on a version. */
    long st;
    char *id = h_submit_task(p, "{\"type\":\"chat\",\"model\":\"chat\",\"input\":{\"messages\":[{\"role\":\"user\","
                                "\"content\":\"hi\"}],\"max_tokens\":2}}", NULL, &st);
    assert_int_equal(st, 202);
    json_t *task = h_wait_task_final(p, id, 20000);
    assert_non_null(task);
    const char *tm = json_string_value(json_object_get(task, "model"));
    assert_true(!strcmp(tm, "v1") || !strcmp(tm, "v2"));
    json_decref(task);
    free(id);

    /* So do a batch's items: 2 of 4 at 50 %. */
    assert_int_equal(post(p, "/v1/batches", "{\"type\":\"chat\",\"model\":\"chat\",\"inputs\":[" ITEM "," ITEM "," ITEM
                                            "," ITEM "]}", &r), 202);
    batch_ctx bc = {p, ""};
    snprintf(bc.id, sizeof bc.id, "%s", json_string_value(json_object_get(r.json, "id")));
    h_resp_free(&r);
    assert_true(h_wait_until(batch_done, &bc, 20000));
    assert_int_equal(batch_canaries(p, bc.id), 2);

    assert_int_equal(cli(p, "pause chat", "paused at 50 %"), 0);
    assert_int_not_equal(cli(p, "pause chat", "cannot be paused"), 0);
    assert_int_equal(canaries(p, 10), 5); /* paused holds the share */
    assert_int_equal(cli(p, "resume chat", "running at 50 %"), 0);
    assert_int_equal(cli(p, "advance chat", "running at 100 %"), 0);
    assert_int_equal(canaries(p, 10), 10);
    assert_int_equal(cli(p, "advance chat", "completed"), 0);
    assert_int_equal(canaries(p, 5), 5);

    /* A client cannot claim a pick for a request the rollout did not route. */
    const char *spoof[] = {"X-Gpupool-Rollout-Pick: 1 chat", NULL};
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"v2\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}", spoof, &r);
    assert_int_equal(r.status, 200);
    assert_null(h_header(&r, "X-Gpupool-Version", (char[64]){0}, 64));
    h_resp_free(&r);

    json_t *j = rollout(p, "chat");
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "completed");
    assert_int_equal(json_integer_value(json_object_get(j, "share")), 100);
    json_t *v = json_object_get(j, "versions");
    /* 18+10+5 on stable and 2+10+5+10+5 on the canary, the batch's 2 and
     * 2, plus the session's 7 on one of them and the task's attempt on the
     * other or the same. */
    json_int_t stable = json_integer_value(json_object_get(json_object_get(v, "stable"), "requests"));
    json_int_t canary = json_integer_value(json_object_get(json_object_get(v, "canary"), "requests"));
    assert_int_equal(stable + canary, 33 + 32 + 7 + 1 + 4);
    assert_in_range(stable, 33 + 2, 33 + 2 + 8);
    json_decref(j);

    h_request(p, "GET", "/metrics", NULL, NULL, &r);
    assert_non_null(strstr(r.body, "gpupool_rollout_canary_share{rollout=\"chat\"} 100"));
    assert_non_null(strstr(r.body, "gpupool_rollout_state{rollout=\"chat\",state=\"completed\"} 1"));
    h_resp_free(&r);

    /* A finished rollout's name may start again; the state survives a restart. */
    assert_int_equal(cli(p, "start chat --stable v1 --canary v2 --steps 20,100", "running at 20 %"), 0);
    assert_int_equal(cli(p, "abort chat", "aborted"), 0);
    /* Killed outright: the abort was written before it was answered. */
    h_kill(p->coord, SIGKILL);
    assert_int_equal(h_wait_exit(p->coord, 10000), 128 + SIGKILL);
    h_restart_coordinator(p);
    assert_true(h_wait_until(node_ready, p, 20000));
    char s[32];
    assert_string_equal(state_of(p, "chat", s, sizeof s), "aborted");
    assert_int_equal(cli(p, "status", "chat: aborted"), 0);
    assert_int_equal(canaries(p, 5), 0);
    /* A stream is routed the same way. */
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"chat\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
              "\"max_tokens\":2}", NULL, &r);
    assert_int_equal(r.status, 200);
    char version[128];
    assert_non_null(h_header(&r, "X-Gpupool-Version", version, sizeof version));
    assert_string_equal(version, "v1; role=stable; rollout=chat");
    assert_non_null(strstr(r.body, "[DONE]"));
    assert_non_null(strstr(r.body, "\"model\":\"v1\""));
    h_resp_free(&r);
    assert_int_equal(cli(p, "advance nope", "no rollout is named"), 1);
}

typedef struct state_ctx {
    h_pool *p;
    const char *want;
} state_ctx;

static int in_state(void *ctx)
{
    state_ctx *c = ctx;
    char s[32];
    return !strcmp(state_of(c->p, "chat", s, sizeof s), c->want);
}

static void failing_canary_rolls_back(void **state)
{
    h_pool *p = *state;
    /* One attempt per request, and a breaker that never opens: every
     * canary request reaches the failing engine and fails. */
    h_start_coordinator(p, "--max-attempts 1 --breaker-failures 1000");
    h_start_worker(p, "machine-a", FAST "%20--model%20v1", NULL);
    h_start_worker(p, "machine-b", FAST "%20--model%20v2%20--error-rate%201", NULL);
    h_resp r;
    assert_int_equal(post(p, "/v1/rollouts",
                          "{\"name\":\"chat\",\"stable\":\"v1\",\"canary\":\"v2\",\"steps\":[50,100],"
                          "\"max_error_rate\":0.2,\"window\":10,\"min_samples\":4}",
                          &r),
                     201);
    h_resp_free(&r);
    /* At 50 % the 2nd, 4th, 6th and 8th requests go to the canary; three
     * failures are too few to judge. */
    int failed = 0;
    for (int i = 0; i < 6; i++) failed += chat_role(p, NULL) < 0;
    assert_int_equal(failed, 3);
    char s[32];
    assert_string_equal(state_of(p, "chat", s, sizeof s), "running");
    failed = 0;
    for (int i = 0; i < 2; i++) failed += chat_role(p, NULL) < 0;
    assert_int_equal(failed, 1);
    state_ctx c = {p, "rolled_back"};
    assert_true(h_wait_until(in_state, &c, 5000));
    json_t *j = rollout(p, "chat");
    assert_int_equal(json_integer_value(json_object_get(j, "share")), 0);
    assert_non_null(strstr(json_string_value(json_object_get(j, "reason")), "error rate"));
    json_t *canary = json_object_get(json_object_get(j, "versions"), "canary");
    assert_int_equal(json_integer_value(json_object_get(canary, "errors")), 4);
    json_decref(j);
    /* Every request is on stable now, and served. */
    for (int i = 0; i < 10; i++) assert_int_equal(chat_role(p, NULL), 0);
    assert_int_equal(cli(p, "resume chat", "rolled_back"), 1);
    h_request(p, "GET", "/metrics", NULL, NULL, &r);
    assert_non_null(strstr(r.body, "gpupool_rollout_errors_total{rollout=\"chat\",version=\"canary\",model=\"v2\"} 4"));
    h_resp_free(&r);
}

/* With keys, a client key may look at rollouts but only an admin key may
 * start or move one. */
static void changes_need_an_admin_key(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, "--api-key user-key --admin-key boss-key");
    snprintf(p->api_key, sizeof p->api_key, "user-key");
    h_start_worker(p, "machine-a", FAST "%20--model%20v1%20--model%20v2", NULL);
    const char *user[] = {"Authorization: Bearer user-key", NULL}, *boss[] = {"Authorization: Bearer boss-key", NULL};
    const char *body = "{\"name\":\"chat\",\"stable\":\"v1\",\"canary\":\"v2\"}";
    h_resp r;
    h_request(p, "POST", "/v1/rollouts", body, user, &r);
    assert_int_equal(r.status, 403);
    h_resp_free(&r);
    h_request(p, "POST", "/v1/rollouts", body, boss, &r);
    assert_int_equal(r.status, 201);
    h_resp_free(&r);
    h_request(p, "POST", "/v1/rollouts/chat/abort", "{}", user, &r);
    assert_int_equal(r.status, 403);
    h_resp_free(&r);
    h_request(p, "GET", "/v1/rollouts", NULL, user, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_array_size(json_object_get(r.json, "data")), 1);
    h_resp_free(&r);
    const char *nobody[] = {"Accept: application/json", NULL};
    h_request(p, "GET", "/v1/rollouts/chat", NULL, nobody, &r);
    assert_int_equal(r.status, 401);
    h_resp_free(&r);
}

static void healthy_canary_advances_by_itself(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_start_worker(p, "machine-a", FAST "%20--model%20v1%20--model%20v2", NULL);
    h_resp r;
    assert_int_equal(post(p, "/v1/rollouts",
                          "{\"name\":\"chat\",\"stable\":\"v1\",\"canary\":\"v2\",\"steps\":[50,100],"
                          "\"window\":10,\"min_samples\":2,\"auto_advance_s\":0.3}",
                          &r),
                     201);
    h_resp_free(&r);
    /* Without outcomes the step waits, however long. */
    state_ctx c = {p, "completed"};
    assert_false(h_wait_until(in_state, &c, 800));
    int64_t deadline = h_now_ms() + 15000;
    char s[32];
    while (strcmp(state_of(p, "chat", s, sizeof s), "completed") && h_now_ms() < deadline) canaries(p, 2);
    assert_string_equal(s, "completed");
    assert_int_equal(canaries(p, 4), 4);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(steps_split_traffic_and_the_cli_moves_them, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(failing_canary_rolls_back, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(changes_need_an_admin_key, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(healthy_canary_advances_by_itself, setup, h_pool_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
