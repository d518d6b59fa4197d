/* e2e: batches (POST /v1/batches): the array and JSONL forms, results in
 * input order, a bad item refusing the whole batch, idempotency, cancel, and
 * a 500-item batch that loses a worker to kill -9 half-way and still
 * accounts for every item. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define CHAT(content, tokens) \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"" content "\"}],\"max_tokens\":" #tokens "}"

static const char *jstr(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }
static json_int_t jint(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

/* Submits a batch; returns its id (caller frees) or NULL; *r keeps the answer. */
static char *submit(h_pool *p, const char *body, const char *const *headers, h_resp *r)
{
    h_request(p, "POST", "/v1/batches", body, headers, r);
    const char *id = jstr(r->json, "id");
    return id ? strdup(id) : NULL;
}

typedef struct batch_cond {
    h_pool *p;
    const char *id;
    json_int_t min_done; /* 0: wait for a final status */
} batch_cond;

static json_t *get_batch(h_pool *p, const char *id)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/batches/%s", id);
    h_resp r;
    h_request(p, "GET", path, NULL, NULL, &r);
    json_t *j = r.status == 200 ? json_incref(r.json) : NULL;
    h_resp_free(&r);
    return j;
}

static int batch_reached(void *ctx)
{
    batch_cond *bc = ctx;
    json_t *b = get_batch(bc->p, bc->id);
    int ok = 0;
    if (b) {
        json_t *rc = json_object_get(b, "request_counts");
        if (bc->min_done) ok = jint(rc, "completed") + jint(rc, "failed") >= bc->min_done;
        else ok = strcmp(jstr(b, "status"), "in_progress") != 0;
    }
    json_decref(b);
    return ok;
}

static json_t *wait_batch(h_pool *p, const char *id, int64_t timeout_ms)
{
    batch_cond bc = {p, id, 0};
    if (!h_wait_until(batch_reached, &bc, timeout_ms)) return NULL;
    return get_batch(p, id);
}

static json_t *results(h_pool *p, const char *id)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/batches/%s/results", id);
    h_resp r;
    h_request(p, "GET", path, NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *data = json_incref(json_object_get(r.json, "data"));
    h_resp_free(&r);
    return data;
}

static int setup(void **state)
{
    h_pool *p = h_pool_new("batches");
    h_start_coordinator(p, NULL);
    h_start_worker(p, "machine-a", "--ttft-ms%2010%20--tps%20500%20--slots%202", NULL);
    h_start_worker(p, "machine-b", "--ttft-ms%2010%20--tps%20500%20--slots%202", NULL);
    *state = p;
    return 0;
}

static void array_batch_in_input_order(void **state)
{
    h_pool *p = *state;
    h_resp r;
    char *id = submit(p,
                      "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"inputs\":["
                      CHAT("zero", 2) "," CHAT("one", 9) ","
                      "{\"custom_id\":\"req-2\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":"
                      CHAT("two", 3) "}," CHAT("three", 1) "," CHAT("four", 6) "]}",
                      NULL, &r);
    assert_int_equal(r.status, 202);
    assert_non_null(id);
    assert_memory_equal(id, "batch_", 6);
    assert_string_equal(jstr(r.json, "object"), "batch");
    assert_string_equal(jstr(r.json, "endpoint"), "/v1/chat/completions");
    assert_int_equal(jint(r.json, "priority"), 1); /* low by default */
    assert_int_equal(jint(json_object_get(r.json, "request_counts"), "total"), 5);
    h_resp_free(&r);

    json_t *b = wait_batch(p, id, 20000);
    assert_non_null(b);
    assert_string_equal(jstr(b, "status"), "completed");
    json_t *rc = json_object_get(b, "request_counts");
    assert_int_equal(jint(rc, "completed"), 5);
    assert_int_equal(jint(rc, "failed"), 0);
    assert_true(json_is_integer(json_object_get(b, "completed_at")));
    assert_true(json_is_null(json_object_get(b, "eta_ms")));
    json_decref(b);

    json_t *data = results(p, id);
    assert_int_equal(json_array_size(data), 5);
    for (size_t i = 0; i < 5; i++) {
        json_t *it = json_array_get(data, i);
        assert_int_equal(jint(it, "index"), (json_int_t)i);
        assert_string_equal(jstr(it, "status"), "succeeded");
        assert_true(json_is_null(json_object_get(it, "error")));
        json_t *resp = json_object_get(it, "response");
        assert_int_equal(jint(resp, "status_code"), 200);
        assert_string_equal(jstr(json_object_get(resp, "body"), "object"), "chat.completion");
    }
    assert_string_equal(jstr(json_array_get(data, 2), "custom_id"), "req-2");
    assert_true(json_is_null(json_object_get(json_array_get(data, 0), "custom_id")));
    json_decref(data);

    h_request(p, "GET", "/v1/batches?limit=5", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(jstr(json_array_get(json_object_get(r.json, "data"), 0), "id"), id);
    h_resp_free(&r);
    free(id);
}

static void jsonl_batch(void **state)
{
    h_pool *p = *state;
    const char *headers[] = {"Content-Type: application/jsonl", NULL};
    h_resp r;
    char *id = submit(p,
                      "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":"
                      "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2}}\n"
                      "\n"
                      "{\"custom_id\":\"b\",\"url\":\"/v1/embeddings\",\"body\":{\"model\":\"sim-llama-8b\",\"input\":\"y\"}}\r\n"
                      "{\"custom_id\":\"c\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":"
                      "{\"model\":\"sim-llama-8b\",\"prompt\":\"z\",\"max_tokens\":2}}\n",
                      headers, &r);
    assert_int_equal(r.status, 202);
    assert_string_equal(jstr(r.json, "type"), "mixed");
    assert_true(json_is_null(json_object_get(r.json, "endpoint")));
    h_resp_free(&r);
    json_t *b = wait_batch(p, id, 20000);
    assert_string_equal(jstr(b, "status"), "completed");
    json_decref(b);

    char path[256];
    snprintf(path, sizeof path, "/v1/batches/%s/results?format=jsonl", id);
    h_request(p, "GET", path, NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    static const char *const want[][2] = {{"a", "chat.completion"}, {"b", "list"}, {"c", "text_completion"}};
    char *save = NULL, *line = strtok_r(r.body, "\n", &save);
    for (int i = 0; i < 3; i++, line = strtok_r(NULL, "\n", &save)) {
        assert_non_null(line);
        json_t *it = json_loads(line, 0, NULL);
        assert_non_null(it);
        assert_string_equal(jstr(it, "custom_id"), want[i][0]);
        assert_string_equal(jstr(json_object_get(json_object_get(it, "response"), "body"), "object"), want[i][1]);
        json_decref(it);
    }
    assert_null(line);
    h_resp_free(&r);
    free(id);
}

static void bad_item_refuses_the_batch(void **state)
{
    h_pool *p = *state;
    h_resp r;
    h_request(p, "GET", "/v1/batches?limit=100", NULL, NULL, &r);
    size_t before = json_array_size(json_object_get(r.json, "data"));
    h_resp_free(&r);
    char *id = submit(p, "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"inputs\":[" CHAT("ok", 2) ","
                         CHAT("ok", 2) ",{\"messages\":\"not a list\"}]}", NULL, &r);
    assert_null(id);
    assert_int_equal(r.status, 400);
    json_t *e = json_object_get(r.json, "error");
    assert_string_equal(jstr(e, "param"), "inputs[2].messages");
    assert_non_null(strstr(jstr(e, "message"), "item 2"));
    h_resp_free(&r);
    /* An unknown model names its item too; an empty batch is refused. */
    submit(p, "{\"type\":\"chat\",\"inputs\":[{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\","
              "\"content\":\"x\"}]},{\"model\":\"nope\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}]}",
              NULL, &r);
    assert_int_equal(r.status, 404);
    assert_non_null(strstr(jstr(json_object_get(r.json, "error"), "message"), "item 1"));
    h_resp_free(&r);
    submit(p, "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"inputs\":[]}", NULL, &r);
    assert_int_equal(r.status, 400);
    h_resp_free(&r);
    const char *jl[] = {"Content-Type: application/x-ndjson", NULL};
    submit(p, CHAT("x", 1) "\n{not json\n", jl, &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(jstr(json_object_get(r.json, "error"), "message"), "line 2"));
    h_resp_free(&r);
    /* Nothing of them was stored. */
    h_request(p, "GET", "/v1/batches?limit=100", NULL, NULL, &r);
    assert_int_equal(json_array_size(json_object_get(r.json, "data")), before);
    h_resp_free(&r);
    h_request(p, "GET", "/v1/batches/batch_nope", NULL, NULL, &r);
    assert_int_equal(r.status, 404);
    assert_string_equal(jstr(json_object_get(r.json, "error"), "code"), "batch_not_found");
    h_resp_free(&r);
}

static void idempotency(void **state)
{
    h_pool *p = *state;
    const char *hk[] = {"Idempotency-Key: batch-k1", NULL};
    const char *body = "{\"type\":\"embedding\",\"model\":\"sim-llama-8b\",\"inputs\":[{\"input\":\"a\"},{\"input\":\"b\"}]}";
    h_resp r;
    char *a = submit(p, body, hk, &r);
    assert_int_equal(r.status, 202);
    h_resp_free(&r);
    char *b = submit(p, body, hk, &r);
    assert_int_equal(r.status, 200);
    char v[16];
    assert_non_null(h_header(&r, "Idempotent-Replayed", v, sizeof v));
    assert_string_equal(a, b);
    h_resp_free(&r);
    submit(p, "{\"type\":\"embedding\",\"model\":\"sim-llama-8b\",\"inputs\":[{\"input\":\"c\"}]}", hk, &r);
    assert_int_equal(r.status, 409);
    h_resp_free(&r);
    json_decref(wait_batch(p, a, 20000));
    free(a);
    free(b);
}

static void cancel(void **state)
{
    h_pool *p = *state;
    /* 40 items of 200 tokens at 500 tokens/s over 4 slots: seconds of work. */
    char body[16384] = "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"inputs\":[";
    for (int i = 0; i < 40; i++) strcat(body, i ? "," CHAT("long", 200) : CHAT("long", 200));
    strcat(body, "]}");
    h_resp r;
    char *id = submit(p, body, NULL, &r);
    assert_int_equal(r.status, 202);
    h_resp_free(&r);
    batch_cond bc = {p, id, 1};
    assert_true(h_wait_until(batch_reached, &bc, 20000));
    char path[256];
    snprintf(path, sizeof path, "/v1/batches/%s/cancel", id);
    h_request(p, "POST", path, "", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(jstr(r.json, "status"), "cancelled");
    json_t *rc = json_object_get(r.json, "request_counts");
    assert_true(jint(rc, "cancelled") > 0);
    assert_int_equal(jint(rc, "completed") + jint(rc, "failed") + jint(rc, "cancelled"), 40);
    assert_int_equal(jint(rc, "queued") + jint(rc, "running"), 0);
    h_resp_free(&r);
    h_request(p, "POST", path, "", NULL, &r);
    assert_int_equal(r.status, 409);
    assert_string_equal(jstr(json_object_get(r.json, "error"), "code"), "batch_finished");
    h_resp_free(&r);
    json_t *data = results(p, id);
    size_t i;
    json_t *it;
    int canceled = 0;
    json_array_foreach(data, i, it) {
        if (strcmp(jstr(it, "status"), "canceled")) continue;
        canceled++;
        assert_true(json_is_null(json_object_get(it, "response")));
        assert_string_equal(jstr(json_object_get(it, "error"), "code"), "canceled");
    }
    assert_true(canceled > 0);
    json_decref(data);
    /* No item of the cancelled batch runs on. */
    h_request(p, "GET", "/v1/tasks?status=running", NULL, NULL, &r);
    assert_int_equal(json_array_size(json_object_get(r.json, "data")), 0);
    h_resp_free(&r);
    free(id);
}

static void batch_yields_to_interactive_work(void **state)
{
    h_pool *p = *state;
    /* 60 items of 100 tokens over 4 slots: about 3 s of queued batch work. */
    char body[16384] = "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"inputs\":[";
    for (int i = 0; i < 60; i++) strcat(body, i ? "," CHAT("bulk", 100) : CHAT("bulk", 100));
    strcat(body, "]}");
    h_resp r;
    char *id = submit(p, body, NULL, &r);
    assert_int_equal(r.status, 202);
    h_resp_free(&r);
    batch_cond bc = {p, id, 1};
    assert_true(h_wait_until(batch_reached, &bc, 20000));
    /* A task at the default priority, and a synchronous call, go before the
     * batch's queued items: both finish while most of the batch waits. */
    long st;
    char *task = h_submit_task(p, "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"input\":" CHAT("now", 2) "}",
                               NULL, &st);
    assert_int_equal(st, 202);
    int64_t t0 = h_now_ms();
    h_request(p, "POST", "/v1/chat/completions", "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\","
              "\"content\":\"now\"}],\"max_tokens\":2}", NULL, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    int64_t sync_ms = h_now_ms() - t0;
    json_t *t = h_wait_task_final(p, task, 20000);
    assert_string_equal(jstr(t, "status"), "succeeded");
    json_decref(t);
    json_t *b = get_batch(p, id);
    json_int_t queued = jint(json_object_get(b, "request_counts"), "queued");
    print_message("with the batch running: a call took %lld ms; %lld batch items were still queued after the task\n",
                  (long long)sync_ms, (long long)queued);
    assert_true(queued > 20);
    json_decref(b);
    char path[256];
    snprintf(path, sizeof path, "/v1/batches/%s/cancel", id);
    h_request(p, "POST", path, "", NULL, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    free(task);
    free(id);
}

/* ---- 500 items, a worker lost to kill -9 half-way ----------------------- */

#define BIG 500

static int big_setup(void **state)
{
    *state = h_pool_new("batches_kill");
    return 0;
}

static void five_hundred_items_survive_a_killed_worker(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_proc *w[3];
    static const char *const names[] = {"machine-a", "machine-b", "machine-c"};
    for (int i = 0; i < 3; i++) w[i] = h_start_worker(p, names[i], "--ttft-ms%2020%20--tps%20200%20--slots%204", NULL);
    size_t cap = 64 + BIG * 128;
    char *body = malloc(cap);
    size_t len = (size_t)snprintf(body, cap, "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"max_attempts\":10,\"inputs\":[");
    for (int i = 0; i < BIG; i++)
        len += (size_t)snprintf(body + len, cap - len, "%s{\"custom_id\":\"item-%d\",\"body\":{\"messages\":"
                                "[{\"role\":\"user\",\"content\":\"n%d\"}],\"max_tokens\":8}}", i ? "," : "", i, i);
    snprintf(body + len, cap - len, "]}");
    h_resp r;
    char *id = submit(p, body, NULL, &r);
    free(body);
    assert_int_equal(r.status, 202);
    h_resp_free(&r);

    /* Mid-way, one worker dies with its items in flight. */
    batch_cond bc = {p, id, BIG / 4};
    assert_true(h_wait_until(batch_reached, &bc, 30000));
    json_t *mid = get_batch(p, id);
    assert_true(json_is_integer(json_object_get(mid, "eta_ms")));
    json_int_t done_at_kill = jint(json_object_get(mid, "request_counts"), "completed");
    json_decref(mid);
    h_kill(w[1], SIGKILL);
    assert_int_equal(h_wait_exit(w[1], 5000), 128 + SIGKILL);

    json_t *b = wait_batch(p, id, 45000);
    assert_non_null(b);
    json_t *rc = json_object_get(b, "request_counts");
    json_int_t ok = jint(rc, "completed"), failed = jint(rc, "failed");
    print_message("batch of %d: %lld done when a worker was killed; %lld succeeded, %lld failed\n", BIG,
                  (long long)done_at_kill, (long long)ok, (long long)failed);
    assert_true(done_at_kill < BIG);
    assert_int_equal(jint(rc, "total"), BIG);
    assert_int_equal(ok + failed, BIG);
    assert_int_equal(jint(rc, "cancelled") + jint(rc, "queued") + jint(rc, "running"), 0);
    json_decref(b);

    json_t *data = results(p, id);
    assert_int_equal(json_array_size(data), BIG);
    int nok = 0, retried = 0;
    for (int i = 0; i < BIG; i++) {
        json_t *it = json_array_get(data, (size_t)i);
        char cid[32];
        snprintf(cid, sizeof cid, "item-%d", i);
        assert_int_equal(jint(it, "index"), i);
        assert_string_equal(jstr(it, "custom_id"), cid);
        retried += jint(it, "attempts") > 1;
        if (!strcmp(jstr(it, "status"), "succeeded")) {
            nok++;
            assert_non_null(json_object_get(json_object_get(it, "response"), "body"));
        } else {
            assert_string_equal(jstr(it, "status"), "failed");
            assert_non_null(jstr(json_object_get(it, "error"), "code"));
        }
    }
    assert_int_equal(nok, ok);
    /* Each item is a task that knows its batch. */
    char path[128];
    snprintf(path, sizeof path, "/v1/tasks/%s", jstr(json_array_get(data, 7), "task_id"));
    h_request(p, "GET", path, NULL, NULL, &r);
    assert_string_equal(jstr(r.json, "batch_id"), id);
    h_resp_free(&r);
    /* The killed worker's items in flight went again elsewhere. */
    print_message("%d items needed more than one attempt\n", retried);
    assert_true(retried > 0);
    json_decref(data);
    free(id);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest shared[] = {
        cmocka_unit_test(array_batch_in_input_order),
        cmocka_unit_test(jsonl_batch),
        cmocka_unit_test(bad_item_refuses_the_batch),
        cmocka_unit_test(idempotency),
        cmocka_unit_test(cancel),
        cmocka_unit_test(batch_yields_to_interactive_work),
    };
    const struct CMUnitTest own[] = {
        cmocka_unit_test_setup_teardown(five_hundred_items_survive_a_killed_worker, big_setup, h_pool_teardown),
    };
    int failed = cmocka_run_group_tests_name("e2e_batches", shared, setup, h_pool_teardown);
    return failed + cmocka_run_group_tests_name("e2e_batches_kill", own, NULL, NULL);
}
