/* e2e: who may join the pool and who may call it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static int setup(void **state)
{
    h_pool *p = h_pool_new("auth");
    *state = p;
    return 0;
}

typedef struct log_ctx { h_proc *proc; const char *text; } log_ctx;
static int log_has(void *ctx)
{
    log_ctx *c = ctx;
    return h_log_contains(c->proc, c->text);
}

static void wrong_join_token_refused(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    char args[512];
    snprintf(args, sizeof args, "worker --coordinator %s --join-token not-the-token --listen 127.0.0.1:0 --engine sim "
             "--heartbeat-ms 100", p->base);
    h_proc *w = h_spawn(p, "intruder", args, NULL);
    log_ctx c = {w, "refused registration (401)"};
    assert_true(h_wait_until(log_has, &c, 10000));
    log_ctx c2 = {p->coord, "wrong or missing join token"};
    assert_true(h_wait_until(log_has, &c2, 5000));
    assert_int_equal(h_node_count(p, NULL), 0);
}

static long post_json(h_pool *p, const char *path, const char *bearer, json_t *body, json_t **answer)
{
    char *text = json_dumps(body, JSON_COMPACT);
    char auth[256];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", bearer);
    const char *headers[] = {auth, NULL};
    h_resp r;
    h_request(p, "POST", path, text, headers, &r);
    free(text);
    long st = r.status;
    if (answer) *answer = json_incref(r.json);
    h_resp_free(&r);
    return st;
}

static void stolen_node_token_refused(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    const char *fp_a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const char *fp_b = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    json_t *reg = json_pack("{s:s, s:s, s:s, s:[], s:[]}", "name", "a", "fingerprint", fp_a, "address",
                            "http://127.0.0.1:9", "gpus", "engines");
    json_t *ans = NULL;
    assert_int_equal(post_json(p, "/internal/v1/register", p->join_token, reg, &ans), 200);
    const char *token = json_string_value(json_object_get(ans, "node_token"));
    const char *node = json_string_value(json_object_get(ans, "node_id"));
    assert_non_null(token);

    json_t *beat = json_pack("{s:s, s:s, s:i, s:[], s:[]}", "node_id", node, "fingerprint", fp_a, "seq", 1, "gpus", "engines");
    assert_int_equal(post_json(p, "/internal/v1/heartbeat", token, beat, NULL), 200);
    /* the same token from another machine */
    json_object_set_new(beat, "fingerprint", json_string(fp_b));
    json_object_set_new(beat, "seq", json_integer(2));
    assert_int_equal(post_json(p, "/internal/v1/heartbeat", token, beat, NULL), 403);
    /* a made-up token */
    json_object_set_new(beat, "fingerprint", json_string(fp_a));
    assert_int_equal(post_json(p, "/internal/v1/heartbeat", "0000", beat, NULL), 401);
    /* registering with a node token instead of the join token */
    assert_int_equal(post_json(p, "/internal/v1/register", token, reg, NULL), 401);
    log_ctx c = {p->coord, "presented by another machine"};
    assert_true(h_wait_until(log_has, &c, 5000));
    json_decref(beat);
    json_decref(reg);
    json_decref(ans);
}

static void client_api_keys(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, "--api-key key-one --api-key key-two");
    h_resp r;
    h_request(p, "GET", "/v1/models", NULL, NULL, &r);
    assert_int_equal(r.status, 401);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")), "invalid_api_key");
    h_resp_free(&r);
    const char *bad[] = {"Authorization: Bearer key-three", NULL};
    h_request(p, "GET", "/v1/models", NULL, bad, &r);
    assert_int_equal(r.status, 401);
    h_resp_free(&r);
    const char *good[] = {"Authorization: Bearer key-two", NULL};
    h_request(p, "GET", "/v1/models", NULL, good, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    h_request(p, "POST", "/v1/tasks", "{}", NULL, &r);
    assert_int_equal(r.status, 401);
    h_resp_free(&r);
    h_request(p, "GET", "/healthz", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    /* a worker still joins with the join token */
    snprintf(p->api_key, sizeof p->api_key, "key-one");
    h_start_worker(p, "machine-a", NULL, NULL);
}

static void beyond_loopback_needs_keys(void **state)
{
    h_pool *p = *state;
    char args[512];
    snprintf(args, sizeof args, "serve --listen 0.0.0.0:0 --data %s/d2 --join-token x", p->dir);
    h_proc *s = h_spawn(p, "open-serve", args, NULL);
    assert_int_equal(h_wait_exit(s, 10000), 2);
    assert_true(h_log_contains(s, "refusing to listen on 0.0.0.0:0 beyond loopback"));
}

static void address_allowlist(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, "--allow-cidr 10.0.0.0/8");
    char args[512];
    snprintf(args, sizeof args, "worker --coordinator %s --join-token %s --listen 127.0.0.1:0 --engine sim "
             "--heartbeat-ms 100", p->base, p->join_token);
    h_proc *w = h_spawn(p, "outsider", args, NULL);
    log_ctx c = {w, "refused registration (403)"};
    assert_true(h_wait_until(log_has, &c, 10000));
    assert_int_equal(h_node_count(p, NULL), 0);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(wrong_join_token_refused, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(stolen_node_token_refused, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(client_api_keys, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(beyond_loopback_needs_keys, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(address_allowlist, setup, h_pool_teardown),
    };
    return cmocka_run_group_tests_name("e2e_auth", tests, NULL, NULL);
}
