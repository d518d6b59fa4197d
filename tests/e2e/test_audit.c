/* e2e: the audit log.  Calls appear with their request id and redacted
 * bodies (and the detected text is nowhere in the database files), can be
 * found by request id and by task id, a synchronous call's route record
 * names the node that served it, only admin keys may read the log, and
 * `gpupool logs` prints it.  With --audit off calls still get request ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define USER "Authorization: Bearer user-key"
#define ADMIN "Authorization: Bearer boss-key"

static int setup(void **state)
{
    *state = h_pool_new("audit");
    return 0;
}

typedef struct rec_ctx { h_pool *p; const char *path; json_t *found; } rec_ctx;

/* The answer at path once it is 200 (the writer runs behind the calls). */
static int record_there(void *ctx)
{
    rec_ctx *c = ctx;
    h_resp r;
    const char *hdr[] = {ADMIN, NULL};
    h_request(c->p, "GET", c->path, NULL, hdr, &r);
    int ok = r.status == 200 && r.json;
    if (ok) c->found = json_incref(r.json);
    h_resp_free(&r);
    return ok;
}

static json_t *wait_record(h_pool *p, const char *path)
{
    rec_ctx c = {p, path, NULL};
    if (!h_wait_until(record_there, &c, 10000)) fail_msg("no audit record at %s", path);
    return c.found;
}

/* Whether any of the store's files hold text (the WAL included). */
static int on_disk(h_pool *p, const char *text)
{
    const char *suffix[] = {"", "-wal"};
    int found = 0;
    for (int i = 0; i < 2; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/data/gpupool.db%s", p->dir, suffix[i]);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        rewind(f);
        char *b = malloc((size_t)n + 1);
        if (b && fread(b, 1, (size_t)n, f) == (size_t)n) found |= memmem(b, (size_t)n, text, strlen(text)) != NULL;
        free(b);
        fclose(f);
    }
    return found;
}

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static void calls_are_recorded_redacted_and_routed(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, "--api-key user-key --admin-key boss-key --privacy-keyword Falcon");
    snprintf(p->api_key, sizeof p->api_key, "boss-key");
    h_start_worker(p, "machine-a", "--ttft-ms%205%20--tps%20400", NULL);

    /* a synchronous call with a client-chosen request id */
    const char *hdr[] = {USER, "X-Request-Id: audit-chat-1", NULL};
    h_resp r;
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"sim-llama-8b\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\","
              "\"content\":\"write to carol.secret@example.com about Falcon\"}]}", hdr, &r);
    assert_int_equal(r.status, 200);
    char rid[80], node[64];
    assert_non_null(h_header(&r, "X-Request-Id", rid, sizeof rid));
    assert_string_equal(rid, "audit-chat-1");
    assert_non_null(h_header(&r, "X-Gpupool-Node", node, sizeof node));
    h_resp_free(&r);

    json_t *rec = wait_record(p, "/v1/audit/audit-chat-1");
    assert_string_equal(str(rec, "method"), "POST");
    assert_string_equal(str(rec, "path"), "/v1/chat/completions");
    assert_int_equal(json_integer_value(json_object_get(rec, "status")), 200);
    assert_true(!strncmp(str(rec, "owner"), "key-", 4));
    char *req_body = json_dumps(json_object_get(rec, "request_body"), 0);
    assert_null(strstr(req_body, "carol.secret"));
    assert_null(strstr(req_body, "Falcon"));
    assert_non_null(strstr(req_body, "[REDACTED:email]"));
    assert_non_null(strstr(req_body, "[REDACTED:keyword]"));
    free(req_body);
    assert_true(json_is_array(json_object_get(json_object_get(rec, "response_body"), "choices")));
    json_t *route = json_object_get(rec, "route");
    assert_string_equal(str(route, "sensitivity"), "private");
    assert_string_equal(str(route, "rule"), "email");
    assert_string_equal(json_string_value(json_array_get(json_object_get(route, "nodes"), 0)), node);
    json_t *att = json_array_get(json_object_get(route, "attempts"), 0);
    assert_string_equal(str(att, "node"), node);
    assert_string_equal(str(att, "outcome"), "ok");
    assert_string_equal(str(att, "backend"), "local");
    json_decref(rec);
    assert_false(on_disk(p, "carol.secret@example.com"));

    /* a task: its creation and its reads are found by its id */
    long status;
    char *tid = h_submit_task(p, "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"input\":{\"max_tokens\":4,"
                                 "\"messages\":[{\"role\":\"user\",\"content\":\"call 13800138000\"}]}}", NULL, &status);
    assert_int_equal(status, 202);
    json_decref(h_wait_task_final(p, tid, 10000));
    char path[256];
    snprintf(path, sizeof path, "/v1/audit?task_id=%s", tid);
    int64_t deadline = h_now_ms() + 10000;
    size_t calls = 0;
    json_t *list = NULL;
    while (h_now_ms() < deadline) {
        json_decref(list);
        list = wait_record(p, path);
        calls = json_array_size(json_object_get(list, "data"));
        if (calls >= 2) break;
    }
    assert_true(calls >= 2); /* the POST and at least one GET */
    int saw_post = 0;
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(list, "data"), i, x) {
        assert_string_equal(str(x, "task_id"), tid);
        char *b = json_dumps(json_object_get(x, "request_body"), JSON_ENCODE_ANY);
        assert_null(strstr(b, "13800138000"));
        free(b);
        saw_post |= !strcmp(str(x, "method"), "POST");
    }
    assert_true(saw_post);
    json_decref(list);
    /* (the task's own input is stored with the task, so the number is on
     * disk there; only the audit table must not hold it) */

    /* an unsafe client id is replaced, and the answer says by what */
    const char *bad[] = {USER, "X-Request-Id: not ok/with spaces", NULL};
    h_request(p, "GET", "/v1/models", NULL, bad, &r);
    assert_non_null(h_header(&r, "X-Request-Id", rid, sizeof rid));
    assert_true(!strncmp(rid, "req_", 4));
    h_resp_free(&r);

    /* only admin keys read the log */
    const char *user[] = {USER, NULL};
    h_request(p, "GET", "/v1/audit", NULL, user, &r);
    assert_int_equal(r.status, 403);
    h_resp_free(&r);
    h_request(p, "GET", "/v1/audit?since=nonsense", NULL, NULL, &r);
    assert_int_equal(r.status, 400);
    h_resp_free(&r);
    h_request(p, "GET", "/v1/audit/no-such-request", NULL, NULL, &r);
    assert_int_equal(r.status, 404);
    h_resp_free(&r);

    /* the CLI */
    char args[512];
    snprintf(args, sizeof args, "logs --coordinator %s --api-key boss-key --request audit-chat-1", p->base);
    h_proc *cli = h_run_cli(p, "logs", args);
    assert_int_equal(h_wait_exit(cli, 10000), 0);
    assert_true(h_log_contains(cli, "audit-chat-1"));
    assert_true(h_log_contains(cli, node));
    assert_true(h_log_contains(cli, "[REDACTED:email]"));
    assert_false(h_log_contains(cli, "carol.secret"));
    snprintf(args, sizeof args, "logs --coordinator %s --api-key user-key", p->base);
    cli = h_run_cli(p, "logs-user", args);
    assert_int_not_equal(h_wait_exit(cli, 10000), 0);

    h_request(p, "GET", "/metrics", NULL, NULL, &r);
    assert_non_null(strstr(r.body, "gpupool_audit_records_total"));
    assert_non_null(strstr(r.body, "gpupool_audit_dropped_total 0"));
    h_resp_free(&r);
    free(tid);
}

static void streams_keep_their_text(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, NULL);
    h_start_worker(p, "machine-a", "--ttft-ms%205%20--tps%20400", NULL);
    const char *hdr[] = {"X-Request-Id: audit-stream-1", NULL};
    h_resp r;
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"sim-llama-8b\",\"stream\":true,\"max_tokens\":6,\"messages\":[{\"role\":\"user\","
              "\"content\":\"hello dave@example.net\"}]}", hdr, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    /* the record is written at the stream's start, its text at its end */
    int64_t deadline = h_now_ms() + 10000;
    json_t *rec = NULL;
    while (h_now_ms() < deadline) {
        json_decref(rec);
        rec = wait_record(p, "/v1/audit/audit-stream-1");
        if (json_is_string(json_object_get(rec, "response_body")) && *str(rec, "response_body")) break;
    }
    assert_non_null(strstr(str(rec, "response_body"), "[simulated]"));
    char *b = json_dumps(json_object_get(rec, "request_body"), 0);
    assert_null(strstr(b, "dave@example.net"));
    free(b);
    assert_int_equal(json_array_size(json_object_get(json_object_get(rec, "route"), "nodes")), 1);
    json_decref(rec);
}

static void audit_off_still_names_requests(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, "--audit off");
    h_resp r;
    h_request(p, "GET", "/v1/audit", NULL, NULL, &r);
    assert_int_equal(r.status, 404);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")), "audit_off");
    char rid[80];
    assert_non_null(h_header(&r, "X-Request-Id", rid, sizeof rid));
    h_resp_free(&r);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(calls_are_recorded_redacted_and_routed, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(streams_keep_their_text, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(audit_off_still_names_requests, setup, h_pool_teardown),
    };
    return cmocka_run_group_tests_name("audit", tests, NULL, NULL);
}
