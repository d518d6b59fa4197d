/* e2e: bad input gets a clear OpenAI-shaped 4xx, the process stays up, and
 * nothing already accepted is lost. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static int setup(void **state)
{
    h_pool *p = h_pool_new("badinput");
    h_start_coordinator(p, "--max-body 64K");
    h_start_worker(p, "machine-a", "--ttft-ms%200%20--tps%200", NULL);
    *state = p;
    return 0;
}

/* Sends body to path and checks status, error code and (optionally) param. */
static void expect_error(h_pool *p, const char *path, const char *body, long status, const char *code, const char *param)
{
    h_resp r;
    h_request(p, "POST", path, body, NULL, &r);
    if (r.status != status) fprintf(stderr, "POST %s %s -> %ld %s\n", path, body, r.status, r.body);
    assert_int_equal(r.status, status);
    json_t *err = json_object_get(r.json, "error");
    assert_true(json_is_object(err));
    assert_true(json_string_length(json_object_get(err, "message")) > 5);
    assert_non_null(json_string_value(json_object_get(err, "type")));
    if (strcmp(json_string_value(json_object_get(err, "code")), code))
        fprintf(stderr, "POST %s %s -> %s\n", path, body, r.body);
    assert_string_equal(json_string_value(json_object_get(err, "code")), code);
    if (param) assert_string_equal(json_string_value(json_object_get(err, "param")), param);
    h_resp_free(&r);
}

#define CHATP "/v1/chat/completions"

static void malformed_and_non_utf8_json(void **state)
{
    h_pool *p = *state;
    expect_error(p, CHATP, "{\"model\":", 400, "invalid_json", NULL);
    expect_error(p, CHATP, "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}",
                 400, "invalid_json", NULL);
    expect_error(p, CHATP, "[1,2]", 400, "invalid_json", NULL);
    expect_error(p, CHATP, "", 400, "empty_body", NULL);
    expect_error(p, "/v1/tasks", "{\"type\":\"chat\",", 400, "invalid_json", NULL);
    h_resp r;
    h_request(p, "POST", CHATP, "{\"model\":\"x\",\"model\":\"y\"}", NULL, &r);
    assert_int_equal(r.status, 400);
    h_resp_free(&r);
}

static void wrong_types_and_missing_fields(void **state)
{
    h_pool *p = *state;
    expect_error(p, CHATP, "{\"model\":42,\"messages\":[]}", 400, "invalid_type", "model");
    expect_error(p, CHATP, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400, "missing_field", "model");
    expect_error(p, CHATP, "{\"model\":\"sim-llama-8b\"}", 400, "missing_field", "messages");
    expect_error(p, CHATP, "{\"model\":\"sim-llama-8b\",\"messages\":\"hi\"}", 400, "invalid_type", "messages");
    expect_error(p, CHATP, "{\"model\":\"sim-llama-8b\",\"messages\":[]}", 400, "invalid_value", "messages");
    expect_error(p, CHATP, "{\"model\":\"sim-llama-8b\",\"messages\":[{\"content\":\"x\"}]}", 400, "missing_field", "messages[0]");
    expect_error(p, CHATP, "{\"model\":\"sim-llama-8b\",\"stream\":\"yes\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                 400, "invalid_type", "stream");
    expect_error(p, CHATP, "{\"model\":\"sim-llama-8b\",\"max_tokens\":\"5\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                 400, "invalid_type", "max_tokens");
    expect_error(p, "/v1/completions", "{\"model\":\"sim-llama-8b\",\"prompt\":7}", 400, "invalid_type", "prompt");
    expect_error(p, "/v1/embeddings", "{\"model\":\"sim-llama-8b\"}", 400, "missing_field", "input");
    expect_error(p, "/v1/tasks", "{\"model\":\"sim-llama-8b\",\"input\":{}}", 400, "missing_field", "type");
    expect_error(p, "/v1/tasks", "{\"type\":\"video\",\"model\":\"sim-llama-8b\",\"input\":{}}", 400, "invalid_value", "type");
    expect_error(p, "/v1/tasks", "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"input\":\"hi\"}", 400, "invalid_type", "input");
    expect_error(p, "/v1/tasks", "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"input\":{}}", 400, "missing_field", "input.messages");
    expect_error(p, "/v1/tasks", "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"priority\":12,\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}}",
                 400, "invalid_value", "priority");
    expect_error(p, "/v1/tasks", "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"priority\":\"high\",\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}}",
                 400, "invalid_type", "priority");
    /* A model name longer than the fields that carry it, which would be cut
     * to another name: "sim-llama-8b" and 300 more bytes is not sim-llama-8b. */
    char longer[600], body[900];
    snprintf(longer, sizeof longer, "sim-llama-8b%0300d", 0);
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", longer);
    expect_error(p, CHATP, body, 400, "invalid_value", "model");
    static const char *const prio[] = {"X-Gpupool-Priority: 12", NULL};
    h_resp r;
    h_request(p, "POST", CHATP, "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", prio, &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "param")), "X-Gpupool-Priority");
    h_resp_free(&r);
    snprintf(body, sizeof body, "{\"type\":\"chat\",\"model\":\"%s\",\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}}", longer);
    expect_error(p, "/v1/tasks", body, 400, "invalid_value", "model");
}

static void unknown_model_endpoint_and_method(void **state)
{
    h_pool *p = *state;
    expect_error(p, CHATP, "{\"model\":\"gpt-17\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 404, "model_not_found", "model");
    expect_error(p, "/v1/tasks", "{\"type\":\"chat\",\"model\":\"gpt-17\",\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}}",
                 404, "model_not_found", "model");
    expect_error(p, "/v1/nonsense", "{}", 404, "not_found", NULL);
    h_resp r;
    h_request(p, "GET", CHATP, NULL, NULL, &r);
    assert_int_equal(r.status, 405);
    h_resp_free(&r);
    h_request(p, "GET", "/v1/tasks?limit=abc", NULL, NULL, &r);
    assert_int_equal(r.status, 400);
    h_resp_free(&r);
    h_request(p, "GET", "/v1/tasks?status=exploded", NULL, NULL, &r);
    assert_int_equal(r.status, 400);
    h_resp_free(&r);
}

static void oversized_body(void **state)
{
    h_pool *p = *state;
    size_t n = 100 * 1024;
    char *big = malloc(n + 200);
    int off = snprintf(big, 200, "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"");
    memset(big + off, 'a', n);
    strcpy(big + off + n, "\"}]}");
    expect_error(p, CHATP, big, 413, "body_too_large", NULL);
    expect_error(p, "/v1/tasks", big, 413, "body_too_large", NULL);
    free(big);
}

/* Headers of 12 KB (long tokens, cookies) are served; 40 KB are refused
 * with 431 and the server stays up. */
static void large_and_oversized_headers(void **state)
{
    h_pool *p = *state;
    size_t n = 40 * 1024;
    char *h = malloc(n + 32);
    int off = snprintf(h, 32, "X-Padding: ");
    memset(h + off, 'a', n);
    h[off + 12 * 1024] = 0;
    const char *fits[] = {h, NULL};
    h_resp r;
    h_request(p, "POST", CHATP, "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2}", fits, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    memset(h + off, 'a', n);
    h[off + n] = 0;
    const char *too_big[] = {h, NULL};
    h_request(p, "GET", "/healthz", NULL, too_big, &r);
    assert_int_equal(r.status, 431);
    h_resp_free(&r);
    free(h);
    h_request(p, "GET", "/healthz", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
}

/* After all of the above, earlier work is intact and the gateway serves. */
static void nothing_lost_and_still_up(void **state)
{
    h_pool *p = *state;
    long st;
    char *id = h_submit_task(p, "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2}}", NULL, &st);
    assert_int_equal(st, 202);
    malformed_and_non_utf8_json(state);
    oversized_body(state);
    json_t *t = h_wait_task_final(p, id, 10000);
    assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
    json_decref(t);
    free(id);
    h_resp r;
    h_request(p, "GET", "/healthz", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    h_request(p, "POST", CHATP, "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2}", NULL, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(malformed_and_non_utf8_json),
        cmocka_unit_test(wrong_types_and_missing_fields),
        cmocka_unit_test(unknown_model_endpoint_and_method),
        cmocka_unit_test(oversized_body),
        cmocka_unit_test(large_and_oversized_headers),
        cmocka_unit_test(nothing_lost_and_still_up),
    };
    return cmocka_run_group_tests_name("e2e_badinput", tests, setup, h_pool_teardown);
}
