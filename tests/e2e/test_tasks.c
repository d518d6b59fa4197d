/* e2e: the durable async task API: lifecycle, listing, cancel, idempotency. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define TASK(model, tokens) \
    "{\"type\":\"chat\",\"model\":\"" model "\",\"priority\":3,\"input\":{\"messages\":" \
    "[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":" #tokens "}}"

static int setup(void **state)
{
    h_pool *p = h_pool_new("tasks");
    h_start_coordinator(p, NULL);
    h_start_worker(p, "machine-a", "--ttft-ms%2010%20--tps%20500%20--slots%201", NULL);
    h_start_worker(p, "machine-b", "--ttft-ms%2010%20--tps%20500%20--slots%201", NULL);
    *state = p;
    return 0;
}

static void lifecycle(void **state)
{
    h_pool *p = *state;
    long status;
    char *id = h_submit_task(p, TASK("sim-llama-8b", 4), NULL, &status);
    assert_int_equal(status, 202);
    assert_non_null(id);
    assert_memory_equal(id, "task_", 5);
    json_t *t = h_wait_task_final(p, id, 20000);
    assert_non_null(t);
    assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
    assert_int_equal(json_integer_value(json_object_get(t, "attempts")), 1);
    assert_int_equal(json_integer_value(json_object_get(t, "priority")), 3);
    assert_memory_equal(json_string_value(json_object_get(t, "node")), "node-", 5);
    assert_true(json_is_integer(json_object_get(t, "queued_ms")));
    assert_true(json_is_integer(json_object_get(t, "run_ms")));
    assert_true(json_is_null(json_object_get(t, "error")));
    json_t *choice = json_array_get(json_object_get(json_object_get(t, "result"), "choices"), 0);
    assert_non_null(strstr(json_string_value(json_object_get(json_object_get(choice, "message"), "content")), "[simulated]"));
    json_t *hist = json_object_get(t, "attempt_history");
    assert_int_equal(json_array_size(hist), 1);
    json_decref(t);

    h_resp r;
    h_request(p, "GET", "/v1/tasks?status=succeeded&limit=10", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    int found = 0;
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(r.json, "data"), i, x) {
        assert_string_equal(json_string_value(json_object_get(x, "status")), "succeeded");
        found |= !strcmp(json_string_value(json_object_get(x, "id")), id);
    }
    assert_true(found);
    h_resp_free(&r);
    h_request(p, "GET", "/v1/tasks?status=queued", NULL, NULL, &r);
    json_array_foreach(json_object_get(r.json, "data"), i, x) assert_string_not_equal(json_string_value(json_object_get(x, "id")), id);
    h_resp_free(&r);
    free(id);
}

static void embedding_and_completion_tasks(void **state)
{
    h_pool *p = *state;
    long status;
    char *a = h_submit_task(p, "{\"type\":\"embedding\",\"model\":\"sim-llama-8b\",\"input\":{\"input\":\"abc\"}}", NULL, &status);
    assert_int_equal(status, 202);
    char *b = h_submit_task(p, "{\"type\":\"completion\",\"model\":\"sim-llama-8b\",\"input\":{\"prompt\":\"abc\",\"max_tokens\":2}}", NULL, &status);
    assert_int_equal(status, 202);
    json_t *ta = h_wait_task_final(p, a, 20000), *tb = h_wait_task_final(p, b, 20000);
    assert_string_equal(json_string_value(json_object_get(ta, "status")), "succeeded");
    assert_string_equal(json_string_value(json_object_get(tb, "status")), "succeeded");
    assert_string_equal(json_string_value(json_object_get(json_object_get(ta, "result"), "object")), "list");
    assert_string_equal(json_string_value(json_object_get(json_object_get(tb, "result"), "object")), "text_completion");
    json_decref(ta);
    json_decref(tb);
    free(a);
    free(b);
}

static void idempotency(void **state)
{
    h_pool *p = *state;
    long s1, s2, s3;
    char *a = h_submit_task(p, TASK("sim-llama-8b", 2), "order-42", &s1);
    char *b = h_submit_task(p, TASK("sim-llama-8b", 2), "order-42", &s2);
    assert_int_equal(s1, 202);
    assert_int_equal(s2, 200);
    assert_string_equal(a, b);
    char *c = h_submit_task(p, TASK("sim-llama-8b", 3), "order-42", &s3);
    assert_int_equal(s3, 409);
    assert_null(c);
    /* Without a key, the same body is a new task. */
    char *d = h_submit_task(p, TASK("sim-llama-8b", 2), NULL, &s3);
    assert_int_equal(s3, 202);
    assert_string_not_equal(a, d);
    json_decref(h_wait_task_final(p, a, 20000));
    json_decref(h_wait_task_final(p, d, 20000));
    free(a);
    free(b);
    free(d);
}

static int two_running(void *ctx)
{
    h_resp r;
    h_request(ctx, "GET", "/v1/tasks?status=running", NULL, NULL, &r);
    int n = (int)json_array_size(json_object_get(r.json, "data"));
    h_resp_free(&r);
    return n == 2;
}

static void cancel(void **state)
{
    h_pool *p = *state;
    /* Two long tasks fill both slots; the third waits in the queue. */
    long st;
    char *long1 = h_submit_task(p, TASK("sim-llama-8b", 100000), NULL, &st);
    char *long2 = h_submit_task(p, TASK("sim-llama-8b", 100000), NULL, &st);
    /* Both running first: queued together with them, the short tasks would
     * go ahead of the second long one (shortest job first). */
    assert_true(h_wait_until(two_running, p, 10000));
    char *queued = h_submit_task(p, TASK("sim-llama-8b", 2), NULL, &st);
    char *behind = h_submit_task(p, TASK("sim-llama-8b", 2), NULL, &st);
    char path[256];
    h_resp r;
    /* While both slots are busy the later task waits behind the earlier one. */
    snprintf(path, sizeof path, "/v1/tasks/%s", behind);
    h_request(p, "GET", path, NULL, NULL, &r);
    assert_string_equal(json_string_value(json_object_get(r.json, "status")), "queued");
    assert_int_equal(json_integer_value(json_object_get(r.json, "queue_position")), 1);
    assert_non_null(json_object_get(r.json, "eta_ms"));
    h_resp_free(&r);
    h_request(p, "DELETE", path, NULL, NULL, &r);
    h_resp_free(&r);
    free(behind);
    snprintf(path, sizeof path, "/v1/tasks/%s", queued);
    h_request(p, "DELETE", path, NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "status")), "canceled");
    h_resp_free(&r);
    h_request(p, "DELETE", path, NULL, NULL, &r);
    assert_int_equal(r.status, 409);
    h_resp_free(&r);
    char *ids[] = {long1, long2};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "/v1/tasks/%s", ids[i]);
        h_request(p, "DELETE", path, NULL, NULL, &r);
        assert_int_equal(r.status, 200);
        h_resp_free(&r);
        json_t *t = h_wait_task_final(p, ids[i], 5000);
        assert_string_equal(json_string_value(json_object_get(t, "status")), "canceled");
        json_decref(t);
    }
    char s[32];
    assert_string_equal(h_task_status(p, queued, s, sizeof s), "canceled");
    h_request(p, "GET", "/v1/tasks/task_doesnotexist", NULL, NULL, &r);
    assert_int_equal(r.status, 404);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")), "task_not_found");
    h_resp_free(&r);
    free(long1);
    free(long2);
    free(queued);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lifecycle),
        cmocka_unit_test(embedding_and_completion_tasks),
        cmocka_unit_test(idempotency),
        cmocka_unit_test(cancel),
    };
    return cmocka_run_group_tests_name("e2e_tasks", tests, setup, h_pool_teardown);
}
