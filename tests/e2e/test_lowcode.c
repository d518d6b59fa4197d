/* e2e: the gateway called exactly as a low-code data source calls it (Alibaba's
 * lowcode-engine "fetch" type, over universal-request's XHR): cross-origin
 * with credentials, a preflight first (its JSON Content-Type and the
 * Authorization header need one), a 5 s timeout on every request, POST with a
 * JSON body to submit, GET with query parameters to poll, errors in a 200
 * envelope, camelCase fields.  Also: the OpenAPI document is served as it is
 * in the repository, and every operation it describes is routed. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "harness.h"
#include "http/client.h"

#define PAGE "http://lowcode.test:3333"     /* in --cors-origin */
#define FORMS "http://forms.test"          /* in --cors-origin and --envelope-origin */
#define KEY "lowcode-test-key"
#define TIMEOUT_MS 5000                    /* what the data sources below are configured with */

static int setup(void **state)
{
    h_pool *p = h_pool_new("lowcode");
    snprintf(p->api_key, sizeof p->api_key, KEY);
    h_start_coordinator(p, "--api-key " KEY " --cors-origin " PAGE "," FORMS " --envelope-origin " FORMS
                           " --cors-max-age 120");
    h_start_worker(p, "machine-a", "--ttft-ms%205%20--tps%201000%20--slots%202", NULL);
    *state = p;
    return 0;
}

/* One XHR as universal-request sends it: Accept, the page's Origin, the
 * data source's headers, a JSON body as text, a timeout.  Returns the answer
 * (status 0 when it timed out). */
static void xhr(h_pool *p, const char *method, const char *path, const char *origin, const char *content_type,
                const char *body, const char *const *extra, h_resp *out)
{
    const char *headers[16];
    char o[128];
    int n = 0;
    headers[n++] = "Accept: application/json, text/plain, */*";
    if (origin) {
        snprintf(o, sizeof o, "Origin: %s", origin);
        headers[n++] = o;
    }
    for (int i = 0; extra && extra[i] && n < 15; i++) headers[n++] = extra[i];
    headers[n] = NULL;
    char url[1024];
    snprintf(url, sizeof url, "%s%s", p->base, path);
    http_call_opts opts = {.method = method, .url = url, .body = body, .body_len = body ? strlen(body) : 0,
                           .content_type = content_type, .headers = headers, .timeout_ms = TIMEOUT_MS};
    http_result res;
    memset(out, 0, sizeof *out);
    http_call(&opts, &res);
    out->status = res.status;
    snprintf(out->headers, sizeof out->headers, "%s", res.headers ? res.headers : "");
    out->body = res.body;
    out->len = res.body_len;
    res.body = NULL;
    free(res.headers);
    res.headers = NULL;
    if (res.timed_out) fail_msg("%s %s took longer than the data source's %d ms timeout", method, path, TIMEOUT_MS);
    if (out->body && out->len) out->json = json_loadb(out->body, out->len, 0, NULL);
}

static const char *hdr(const h_resp *r, const char *name)
{
    static char v[1024];
    return h_header(r, name, v, sizeof v);
}

static const char *str_at(json_t *j, const char *a, const char *b)
{
    json_t *x = json_object_get(j, a);
    return json_string_value(b ? json_object_get(x, b) : x);
}

static void preflight(void **state)
{
    h_pool *p = *state;
    static const char *const ask[] = {"Access-Control-Request-Method: POST",
                                      "Access-Control-Request-Headers: authorization,content-type,x-gpupool-envelope,"
                                      "x-gpupool-case,idempotency-key",
                                      NULL};
    h_resp r;
    xhr(p, "OPTIONS", "/v1/tasks", PAGE, NULL, NULL, ask, &r);
    assert_int_equal(r.status, 204);
    assert_string_equal(hdr(&r, "Access-Control-Allow-Origin"), PAGE);
    assert_string_equal(hdr(&r, "Access-Control-Allow-Credentials"), "true");
    assert_non_null(strstr(hdr(&r, "Access-Control-Allow-Methods"), "POST"));
    assert_non_null(strstr(hdr(&r, "Access-Control-Allow-Methods"), "GET"));
    const char *allowed = hdr(&r, "Access-Control-Allow-Headers");
    assert_non_null(allowed);
    static const char *const need[] = {"Authorization", "Content-Type", "Idempotency-Key", "X-Gpupool-Envelope",
                                       "X-Gpupool-Case"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) assert_non_null(strcasestr(allowed, need[i]));
    assert_string_equal(hdr(&r, "Access-Control-Max-Age"), "120");
    assert_non_null(strstr(r.headers, "Vary: Origin"));
    h_resp_free(&r);

    /* The poll URL's preflight: GET only. */
    static const char *const ask_get[] = {"Access-Control-Request-Method: GET", NULL};
    xhr(p, "OPTIONS", "/v1/tasks/poll", PAGE, NULL, NULL, ask_get, &r);
    assert_int_equal(r.status, 204);
    assert_string_equal(hdr(&r, "Access-Control-Allow-Methods"), "GET, OPTIONS");
    h_resp_free(&r);

    /* Another origin: refused, and nothing that would let its page read. */
    xhr(p, "OPTIONS", "/v1/tasks", "http://evil.test", NULL, NULL, ask, &r);
    assert_int_equal(r.status, 403);
    assert_null(hdr(&r, "Access-Control-Allow-Origin"));
    assert_string_equal(str_at(r.json, "error", "code"), "cors_origin_not_allowed");
    h_resp_free(&r);
    /* Its simple requests are answered (a server cannot stop a browser
     * sending them) but without CORS headers, so its page cannot read them. */
    static const char *const auth[] = {"Authorization: Bearer " KEY, NULL};
    xhr(p, "GET", "/v1/models", "http://evil.test", NULL, NULL, auth, &r);
    assert_int_equal(r.status, 200);
    assert_null(hdr(&r, "Access-Control-Allow-Origin"));
    assert_non_null(strstr(r.headers, "Vary: Origin"));
    h_resp_free(&r);

    /* OPTIONS that is no preflight says what the path allows. */
    xhr(p, "OPTIONS", "/v1/tasks", NULL, NULL, NULL, NULL, &r);
    assert_int_equal(r.status, 204);
    assert_string_equal(hdr(&r, "Allow"), "POST, GET, OPTIONS");
    h_resp_free(&r);
    xhr(p, "OPTIONS", "/v1/nothing-here", PAGE, NULL, NULL, ask, &r);
    assert_int_equal(r.status, 404);
    h_resp_free(&r);
}

/* The data source's own headers: its options.headers. */
static const char *const DS_HEADERS[] = {"Authorization: Bearer " KEY, "X-Gpupool-Envelope: always200",
                                         "X-Gpupool-Case: camel", NULL};

static void submit_then_poll(void **state)
{
    h_pool *p = *state;
    /* Submit: options.method POST, options.params as the JSON body, in the
     * page's camelCase, with the idempotency key in the body. */
    const char *submit = "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"priority\":7,\"maxAttempts\":2,"
                         "\"idempotencyKey\":\"form-42\",\"input\":{\"messages\":[{\"role\":\"user\","
                         "\"content\":\"Summarise this ticket\"}],\"maxTokens\":6}}";
    h_resp r;
    xhr(p, "POST", "/v1/tasks", PAGE, "application/json", submit, DS_HEADERS, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(hdr(&r, "Access-Control-Allow-Origin"), PAGE);
    assert_string_equal(hdr(&r, "X-Gpupool-Status"), "202");
    assert_non_null(strstr(hdr(&r, "Access-Control-Expose-Headers"), "X-Gpupool-Task"));
    assert_true(json_is_true(json_object_get(r.json, "ok")));
    assert_int_equal(json_integer_value(json_object_get(r.json, "status")), 202);
    char id[128];
    snprintf(id, sizeof id, "%s", str_at(json_object_get(r.json, "data"), "id", NULL));
    assert_memory_equal(id, "task_", 5);
    h_resp_free(&r);

    /* The same submission again (a double click): the same task. */
    xhr(p, "POST", "/v1/tasks", PAGE, "application/json", submit, DS_HEADERS, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "status")), 200);
    assert_string_equal(str_at(json_object_get(r.json, "data"), "id", NULL), id);
    assert_string_equal(hdr(&r, "Idempotent-Replayed"), "true");
    h_resp_free(&r);

    /* Poll: options.method GET, options.params {id, fields} as the query. */
    char path[512];
    snprintf(path, sizeof path, "/v1/tasks/poll?id=%s&fields=status,result,error,maxAttempts", id);
    json_t *data = NULL;
    int64_t deadline = h_now_ms() + 20000;
    while (h_now_ms() < deadline) {
        xhr(p, "GET", path, PAGE, "application/json", NULL, DS_HEADERS, &r);
        assert_int_equal(r.status, 200);
        assert_string_equal(hdr(&r, "Access-Control-Allow-Origin"), PAGE);
        assert_true(json_is_true(json_object_get(r.json, "ok")));
        data = json_incref(json_object_get(r.json, "data"));
        h_resp_free(&r);
        const char *st = str_at(data, "status", NULL);
        if (!strcmp(st, "succeeded") || !strcmp(st, "failed") || !strcmp(st, "canceled")) break;
        json_decref(data);
        data = NULL;
        poll(NULL, 0, 100); /* the page's polling interval */
    }
    assert_non_null(data);
    assert_string_equal(str_at(data, "status", NULL), "succeeded");
    /* Only the fields asked for (and the id), in camelCase. */
    assert_int_equal(json_object_size(data), 5);
    assert_int_equal(json_integer_value(json_object_get(data, "maxAttempts")), 2);
    assert_true(json_is_null(json_object_get(data, "error")));
    json_t *choice = json_array_get(json_object_get(json_object_get(data, "result"), "choices"), 0);
    assert_non_null(json_object_get(choice, "finishReason"));
    assert_null(json_object_get(choice, "finish_reason"));
    assert_non_null(strstr(str_at(choice, "message", "content"), "[simulated]"));
    json_decref(data);

    /* The path form polls the same task; without the low-code headers the
     * answer is the plain snake_case task. */
    snprintf(path, sizeof path, "/v1/tasks/%s", id);
    static const char *const plain[] = {"Authorization: Bearer " KEY, NULL};
    xhr(p, "GET", path, PAGE, NULL, NULL, plain, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "max_attempts")), 2);
    assert_int_equal(json_integer_value(json_object_get(r.json, "priority")), 7);
    assert_string_equal(str_at(r.json, "status", NULL), "succeeded");
    h_resp_free(&r);
}

static void errors_in_the_envelope(void **state)
{
    h_pool *p = *state;
    h_resp r;
    /* Unknown task: 404 in the body, 200 on the wire. */
    xhr(p, "GET", "/v1/tasks/poll?id=task_nope", PAGE, NULL, NULL, DS_HEADERS, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(hdr(&r, "X-Gpupool-Status"), "404");
    assert_true(json_is_false(json_object_get(r.json, "ok")));
    assert_int_equal(json_integer_value(json_object_get(r.json, "status")), 404);
    assert_string_equal(str_at(r.json, "error", "code"), "task_not_found");
    h_resp_free(&r);
    /* A bad field is named as the page wrote it. */
    xhr(p, "POST", "/v1/tasks", PAGE, "application/json",
        "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
        "\"maxTokens\":-1}}",
        DS_HEADERS, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "status")), 400);
    assert_string_equal(str_at(r.json, "error", "param"), "input.maxTokens");
    h_resp_free(&r);
    /* No key: 401 in the envelope, with the CORS headers the page needs to
     * read it. */
    static const char *const nokey[] = {"X-Gpupool-Envelope: always200", NULL};
    xhr(p, "GET", "/v1/models", PAGE, NULL, NULL, nokey, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(str_at(r.json, "error", "code"), "invalid_api_key");
    assert_string_equal(hdr(&r, "Access-Control-Allow-Origin"), PAGE);
    h_resp_free(&r);
    /* /healthz is JSON, so it is wrapped too. */
    xhr(p, "GET", "/healthz", PAGE, NULL, NULL, nokey, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(hdr(&r, "Content-Type"), "application/json"));
    assert_true(json_is_true(json_object_get(r.json, "ok")));
    assert_string_equal(str_at(r.json, "data", "status"), "ok");
    h_resp_free(&r);
    /* Without the envelope the status is the real one. */
    static const char *const plain[] = {"Authorization: Bearer " KEY, NULL};
    xhr(p, "GET", "/v1/tasks/poll?id=task_nope", PAGE, NULL, NULL, plain, &r);
    assert_int_equal(r.status, 404);
    assert_string_equal(str_at(r.json, "error", "code"), "task_not_found");
    h_resp_free(&r);
    xhr(p, "GET", "/v1/tasks/poll", PAGE, NULL, NULL, plain, &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(str_at(r.json, "error", "param"), "id");
    h_resp_free(&r);
    /* An --envelope-origin gets it without asking, and may opt out. */
    xhr(p, "GET", "/v1/tasks/poll?id=task_nope", FORMS, NULL, NULL, plain, &r);
    assert_int_equal(r.status, 200);
    assert_true(json_is_false(json_object_get(r.json, "ok")));
    assert_string_equal(hdr(&r, "Access-Control-Allow-Origin"), FORMS);
    h_resp_free(&r);
    xhr(p, "GET", "/v1/tasks/poll?id=task_nope&envelope=off", FORMS, NULL, NULL, plain, &r);
    assert_int_equal(r.status, 404);
    h_resp_free(&r);
    /* A value the gateway does not know is refused, with the real status. */
    xhr(p, "GET", "/v1/models?envelope=sometimes", PAGE, NULL, NULL, plain, &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(str_at(r.json, "error", "param"), "envelope");
    assert_string_equal(hdr(&r, "Access-Control-Allow-Origin"), PAGE);
    h_resp_free(&r);
}

static void chat_from_the_page(void **state)
{
    h_pool *p = *state;
    /* No Content-Type header in the data source: XHR sends the JSON text as
     * text/plain, which the gateway reads all the same. */
    static const char *const hdrs[] = {"Authorization: Bearer " KEY, NULL};
    h_resp r;
    xhr(p, "POST", "/v1/chat/completions?envelope=always200&case=camel", PAGE, "text/plain;charset=UTF-8",
        "{\"model\":\"sim-llama-8b\",\"maxTokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", hdrs,
        &r);
    assert_int_equal(r.status, 200);
    assert_true(json_is_true(json_object_get(r.json, "ok")));
    json_t *data = json_object_get(r.json, "data");
    assert_string_equal(str_at(data, "object", NULL), "chat.completion");
    assert_non_null(json_object_get(json_object_get(data, "usage"), "completionTokens"));
    assert_non_null(hdr(&r, "X-Gpupool-Node"));
    assert_string_equal(hdr(&r, "Access-Control-Allow-Origin"), PAGE);
    h_resp_free(&r);
    /* A stream is never wrapped: SSE as the engine sent it. */
    xhr(p, "POST", "/v1/chat/completions?envelope=always200", PAGE, "application/json",
        "{\"model\":\"sim-llama-8b\",\"stream\":true,\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        hdrs, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "data: [DONE]"));
    assert_string_equal(hdr(&r, "Access-Control-Allow-Origin"), PAGE);
    h_resp_free(&r);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

static void openapi_document_served_and_routed(void **state)
{
    h_pool *p = *state;
    h_resp r;
    /* Open, like /healthz: no key. */
    xhr(p, "GET", "/openapi.json", PAGE, NULL, NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(hdr(&r, "Content-Type"), "application/json"));
    assert_string_equal(hdr(&r, "Access-Control-Allow-Origin"), PAGE);
    char *file = slurp("docs/openapi.json");
    if (file) {
        assert_int_equal(strlen(file), r.len);
        assert_memory_equal(file, r.body, r.len);
    }
    free(file);
    json_t *doc = json_incref(r.json);
    h_resp_free(&r);
    assert_string_equal(str_at(doc, "openapi", NULL), "3.1.0");
    /* Every documented operation is answered by a handler, not by the
     * router's 404/405 (ids that exist nowhere, empty bodies: no side
     * effects). */
    static const char *const methods[][2] = {{"get", "GET"}, {"post", "POST"}, {"delete", "DELETE"}};
    static const char *const auth[] = {"Authorization: Bearer " KEY, NULL};
    const char *path;
    json_t *item;
    int asked = 0;
    json_object_foreach(json_object_get(doc, "paths"), path, item) {
        char url[256];
        snprintf(url, sizeof url, "%s", path);
        char *brace = strstr(url, "{id}");
        if (brace) {
            char rest[128];
            snprintf(rest, sizeof rest, "%s", brace + 4);
            snprintf(brace, sizeof url - (size_t)(brace - url), "not-a-real-id%s", rest);
        }
        for (size_t i = 0; i < 3; i++) {
            if (!json_object_get(item, methods[i][0])) continue;
            const char *m = methods[i][1];
            xhr(p, m, url, NULL, NULL, strcmp(m, "POST") ? NULL : "", auth, &r);
            const char *code = r.json ? str_at(r.json, "error", "code") : NULL;
            if (r.status == 0 || (code && (!strcmp(code, "not_found") || !strcmp(code, "method_not_allowed"))))
                fail_msg("%s %s is documented but the gateway answered %ld %s", m, url, r.status, code ? code : "");
            h_resp_free(&r);
            asked++;
        }
    }
    assert_true(asked >= 17);
    json_decref(doc);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(preflight),
        cmocka_unit_test(submit_then_poll),
        cmocka_unit_test(errors_in_the_envelope),
        cmocka_unit_test(chat_from_the_page),
        cmocka_unit_test(openapi_document_served_and_routed),
    };
    return cmocka_run_group_tests_name("e2e_lowcode", tests, setup, h_pool_teardown);
}
