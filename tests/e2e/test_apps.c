/* e2e: prompt apps.  A coordinator with --apps serves two apps on a worker
 * whose simulated engine answers from a --reply-map: "extract" gets broken
 * JSON first, and the retry (matched on the validation error it carries)
 * gets valid JSON; "stubborn" keeps answering JSON the output schema
 * refuses until its retries run out.  Input that breaks the input schema is
 * a 400 naming the field; an async call returns a run to poll; GET /v1/apps
 * and `gpupool apps` list the apps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static const char APPS[] =
    "{\"apps\":{"
    "\"extract\":{\"description\":\"label a message\",\"model\":\"m-small\","
    " \"input_schema\":{\"type\":\"object\",\"required\":[\"text\"],\"additionalProperties\":false,"
    "  \"properties\":{\"text\":{\"type\":\"string\",\"minLength\":1},\"lang\":{\"enum\":[\"en\",\"de\"]}}},"
    " \"prompt\":\"Extract from: {{text}}\","
    " \"output_schema\":{\"type\":\"object\",\"required\":[\"label\"],"
    "  \"properties\":{\"label\":{\"enum\":[\"question\",\"complaint\"]}}}},"
    "\"stubborn\":{\"model\":\"m-small\",\"prompt\":\"Stubborn: {{text}}\",\"max_retries\":1,"
    " \"output_schema\":{\"type\":\"object\",\"required\":[\"label\"],"
    "  \"properties\":{\"label\":{\"enum\":[\"question\",\"complaint\"]}}}}"
    "}}";

/* Most specific first: a retry's last user message carries the error. */
static const char REPLIES[] =
    "[{\"match\":\"was not valid: it is not JSON\",\"reply\":\"{\\\"label\\\": \\\"question\\\"}\"},"
    "{\"match\":\"must be one of\",\"reply\":\"{\\\"label\\\": \\\"still praise\\\"}\"},"
    "{\"match\":\"Extract from\",\"reply\":\"Sure! {label: question\"},"
    "{\"match\":\"Stubborn\",\"reply\":\"{\\\"label\\\": \\\"praise\\\"}\"}]";

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    h_pool *p = h_pool_new("apps");
    char apps[400], replies[400], args[600], sim[600];
    snprintf(apps, sizeof apps, "%s/apps.json", p->dir);
    snprintf(replies, sizeof replies, "%s/replies.json", p->dir);
    write_file(apps, APPS);
    write_file(replies, REPLIES);
    snprintf(args, sizeof args, "--apps %s", apps);
    h_start_coordinator(p, args);
    snprintf(sim, sizeof sim, "--ttft-ms%%200%%20--tps%%200%%20--model%%20m-small%%20--reply-map%%20%s", replies);
    h_start_worker(p, "machine-a", sim, NULL);
    *state = p;
    return 0;
}

static long call(h_pool *p, const char *app, const char *body, h_resp *r)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/apps/%s", app);
    h_request(p, "POST", path, body, NULL, r);
    return r->status;
}

static const json_t *stage0(const h_resp *r, const char *under)
{
    const json_t *run = under ? json_object_get(r->json, under) : r->json;
    return json_array_get(json_object_get(run, "stages"), 0);
}

static void invalid_json_is_retried_with_the_error(void **state)
{
    h_pool *p = *state;
    h_resp r;
    assert_int_equal(call(p, "extract", "{\"input\":{\"text\":\"where is my parcel?\"}}", &r), 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "status")), "succeeded");
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "output"), "label")), "question");
    const json_t *s = stage0(&r, NULL);
    assert_int_equal(json_integer_value(json_object_get(s, "tries")), 2);
    assert_string_equal(json_string_value(json_object_get(s, "raw_text")), "{\"label\": \"question\"}");
    assert_non_null(json_string_value(json_object_get(s, "node")));
    /* One node attempt per try, both on the worker. */
    assert_int_equal((int)json_array_size(json_object_get(s, "attempts")), 2);
    h_resp_free(&r);
}

static void input_schema_violations_are_400_naming_the_field(void **state)
{
    h_pool *p = *state;
    static const struct { const char *body, *param, *code; } cases[] = {
        {"{\"input\":{}}", "input.text", "missing_field"},
        {"{\"input\":{\"text\":7}}", "input.text", "invalid_value"},
        {"{\"input\":{\"text\":\"\"}}", "input.text", "invalid_value"},
        {"{\"input\":{\"text\":\"x\",\"lang\":\"fr\"}}", "input.lang", "invalid_value"},
        {"{\"input\":{\"text\":\"x\",\"extra\":1}}", "input.extra", "invalid_value"},
        {"{\"text\":\"x\"}", "text", "invalid_value"},
        {"{\"input\":\"x\"}", "input", "invalid_type"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        h_resp r;
        assert_int_equal(call(p, "extract", cases[i].body, &r), 400);
        const json_t *e = json_object_get(r.json, "error");
        assert_string_equal(json_string_value(json_object_get(e, "param")), cases[i].param);
        assert_string_equal(json_string_value(json_object_get(e, "code")), cases[i].code);
        h_resp_free(&r);
    }
    h_resp r;
    assert_int_equal(call(p, "nope", "{\"input\":{}}", &r), 404);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")), "app_not_found");
    h_resp_free(&r);
}

static void exhausted_retries_fail_with_the_raw_text(void **state)
{
    h_pool *p = *state;
    h_resp r;
    assert_int_equal(call(p, "stubborn", "{\"input\":{\"text\":\"great service\"}}", &r), 422);
    const json_t *e = json_object_get(r.json, "error");
    assert_string_equal(json_string_value(json_object_get(e, "code")), "output_invalid");
    assert_string_equal(json_string_value(json_object_get(e, "raw_text")), "{\"label\": \"still praise\"}");
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "label"));
    const json_t *s = stage0(&r, "run");
    assert_int_equal(json_integer_value(json_object_get(s, "tries")), 2);
    assert_string_equal(json_string_value(json_object_get(s, "status")), "failed");
    h_resp_free(&r);
}

typedef struct poll_ctx {
    h_pool *p;
    char path[160];
    json_t *last;
} poll_ctx;

static int run_ended(void *arg)
{
    poll_ctx *c = arg;
    h_resp r;
    h_request(c->p, "GET", c->path, NULL, NULL, &r);
    const char *st = json_string_value(json_object_get(r.json, "status"));
    int done = r.status == 200 && st && (!strcmp(st, "succeeded") || !strcmp(st, "failed"));
    if (done) {
        json_decref(c->last);
        c->last = json_incref(r.json);
    }
    h_resp_free(&r);
    return done;
}

static void async_call_and_listing(void **state)
{
    h_pool *p = *state;
    h_resp r;
    const char *prefer[] = {"Prefer: respond-async", NULL};
    h_request(p, "POST", "/v1/apps/extract", "{\"input\":{\"text\":\"is it open?\",\"lang\":\"en\"}}", prefer, &r);
    assert_int_equal(r.status, 202);
    poll_ctx c = {.p = p};
    snprintf(c.path, sizeof c.path, "/v1/apps/runs/%s", json_string_value(json_object_get(r.json, "id")));
    h_resp_free(&r);
    assert_true(h_wait_until(run_ended, &c, 15000));
    assert_string_equal(json_string_value(json_object_get(c.last, "status")), "succeeded");
    assert_string_equal(json_string_value(json_object_get(json_object_get(c.last, "output"), "label")), "question");
    json_decref(c.last);
    h_request(p, "GET", "/v1/pipelines/runs/run_nope", NULL, NULL, &r);
    assert_int_equal(r.status, 404);
    h_resp_free(&r);

    h_request(p, "GET", "/v1/apps", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    const json_t *data = json_object_get(r.json, "data");
    assert_int_equal((int)json_array_size(data), 2);
    const json_t *a = json_array_get(data, 0);
    assert_string_equal(json_string_value(json_object_get(a, "name")), "extract");
    assert_true(json_is_object(json_object_get(a, "input_schema")));
    assert_true(json_is_object(json_object_get(a, "output_schema")));
    h_resp_free(&r);

    char args[200];
    snprintf(args, sizeof args, "apps --coordinator %s", p->base);
    h_proc *cli = h_run_cli(p, "apps-cli", args);
    assert_int_equal(h_wait_exit(cli, 10000), 0);
    assert_true(h_log_contains(cli, "extract"));
    assert_true(h_log_contains(cli, "stubborn"));
    assert_true(h_log_contains(cli, "m-small"));
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(invalid_json_is_retried_with_the_error, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(input_schema_violations_are_400_naming_the_field, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(exhausted_retries_fail_with_the_raw_text, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(async_call_and_listing, setup, h_pool_teardown),
    };
    return cmocka_run_group_tests_name("e2e_apps", tests, NULL, NULL);
}
