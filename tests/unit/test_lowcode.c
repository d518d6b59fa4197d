/* unit: the low-code policy's pure parts: origins, the per-request
 * decision, the envelope, field trimming, CORS headers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "api/lowcode.h"

static void assert_json(json_t *j, const char *expect)
{
    char *s = json_dumps(j, JSON_COMPACT);
    assert_string_equal(s, expect);
    free(s);
}

static void origins(void **state)
{
    (void)state;
    char out[LOWCODE_ORIGIN_MAX], err[200];
    assert_int_equal(lowcode_origin_normalise("https://Apps.Example.com:8443/", out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "https://apps.example.com:8443");
    assert_int_equal(lowcode_origin_normalise("http://[::1]:3000", out, sizeof out, err, sizeof err), 0);
    assert_string_equal(out, "http://[::1]:3000");
    static const char *const bad[] = {"apps.example.com", "ftp://x", "https://", "https://a.example/path",
                                      "https://a b", "*", "https://a:80x", "https://[::1", "https://a:"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(lowcode_origin_normalise(bad[i], out, sizeof out, err, sizeof err), -1);
    lowcode_cfg c = {0};
    for (int i = 0; i < LOWCODE_MAX_ORIGINS; i++) assert_int_equal(lowcode_add_origin(&c, 1, "http://a.example", err, sizeof err), 0);
    assert_int_equal(lowcode_add_origin(&c, 1, "http://a.example", err, sizeof err), -1);
}

static void decisions(void **state)
{
    (void)state;
    lowcode_cfg c = {0};
    char err[200];
    assert_int_equal(lowcode_add_origin(&c, 1, "https://lowcode.example", err, sizeof err), 0);
    assert_int_equal(lowcode_add_origin(&c, 0, "https://forms.example", err, sizeof err), 0);
    lowcode_mode m;
    const char *bad;

    lowcode_req r = {.path = "/v1/tasks", .origin = "https://LOWCODE.example"};
    assert_int_equal(lowcode_decide(&c, &r, &m, &bad), 0);
    assert_true(m.cors && m.vary && m.applies && !m.envelope && !m.camel);
    assert_string_equal(m.origin, "https://LOWCODE.example"); /* echoed as sent */

    r = (lowcode_req){.path = "/v1/tasks", .origin = "https://evil.example"};
    lowcode_decide(&c, &r, &m, &bad);
    assert_true(!m.cors && m.vary);

    /* An envelope origin gets it by default, and may still turn it off. */
    r = (lowcode_req){.path = "/v1/tasks/poll", .origin = "https://forms.example"};
    lowcode_decide(&c, &r, &m, &bad);
    assert_true(m.envelope && !m.cors);
    r.envelope_header = "off";
    lowcode_decide(&c, &r, &m, &bad);
    assert_false(m.envelope);
    r.envelope_query = "always200"; /* the query wins over the header */
    lowcode_decide(&c, &r, &m, &bad);
    assert_true(m.envelope);

    r = (lowcode_req){.path = "/v1/models", .case_header = "camel"};
    lowcode_decide(&c, &r, &m, &bad);
    assert_true(m.camel);
    r.case_query = "snake";
    lowcode_decide(&c, &r, &m, &bad);
    assert_false(m.camel);

    r = (lowcode_req){.path = "/v1/models", .envelope_query = "sometimes"};
    assert_int_equal(lowcode_decide(&c, &r, &m, &bad), -1);
    assert_string_equal(bad, "envelope");
    r = (lowcode_req){.path = "/v1/models", .case_header = "kebab"};
    assert_int_equal(lowcode_decide(&c, &r, &m, &bad), -1);
    assert_string_equal(bad, "X-Gpupool-Case");

    /* Neither the metrics page, the document nor the workers' plane is
     * rewritten; the workers' plane gets no CORS either. */
    c.envelope_all = c.camel_all = 1;
    r = (lowcode_req){.path = "/metrics", .origin = "https://lowcode.example"};
    lowcode_decide(&c, &r, &m, &bad);
    assert_true(m.cors && !m.applies && !m.envelope);
    r = (lowcode_req){.path = "/openapi.json", .envelope_query = "nonsense"};
    assert_int_equal(lowcode_decide(&c, &r, &m, &bad), 0);
    r = (lowcode_req){.path = "/internal/v1/heartbeat", .origin = "https://lowcode.example"};
    lowcode_decide(&c, &r, &m, &bad);
    assert_true(!m.cors && !m.vary && !m.applies);
    r = (lowcode_req){.path = "/healthz"};
    lowcode_decide(&c, &r, &m, &bad);
    assert_true(m.applies && m.envelope && m.camel);
}

static void envelope(void **state)
{
    (void)state;
    json_t *e = lowcode_envelope(202, json_loads("{\"id\":\"task_1\",\"status\":\"queued\"}", 0, NULL));
    assert_json(e, "{\"ok\":true,\"status\":202,\"data\":{\"id\":\"task_1\",\"status\":\"queued\"}}");
    json_decref(e);
    e = lowcode_envelope(404, json_loads("{\"error\":{\"message\":\"no\",\"code\":\"task_not_found\"}}", 0, NULL));
    assert_json(e, "{\"ok\":false,\"status\":404,\"error\":{\"message\":\"no\",\"code\":\"task_not_found\"}}");
    json_decref(e);
    /* A failure that is not the API's error shape still ends up under error. */
    e = lowcode_envelope(500, json_loads("[1]", 0, NULL));
    assert_json(e, "{\"ok\":false,\"status\":500,\"error\":[1]}");
    json_decref(e);
}

static void fields(void **state)
{
    (void)state;
    json_t *t = json_loads("{\"id\":\"task_1\",\"object\":\"task\",\"status\":\"succeeded\",\"result\":{},"
                           "\"queue_position\":0,\"attempts\":1}",
                           0, NULL);
    lowcode_trim_fields(t, "status, result,queuePosition");
    assert_json(t, "{\"id\":\"task_1\",\"status\":\"succeeded\",\"result\":{},\"queue_position\":0}");
    json_decref(t);
    json_t *list = json_loads("{\"object\":\"list\",\"data\":[{\"id\":\"a\",\"object\":\"task\",\"status\":\"queued\"}]}",
                              0, NULL);
    lowcode_trim_fields(list, "status");
    assert_json(list, "{\"object\":\"list\",\"data\":[{\"id\":\"a\",\"status\":\"queued\"}]}");
    json_decref(list);
    json_t *other = json_loads("{\"object\":\"model\",\"id\":\"m\",\"x\":1}", 0, NULL);
    lowcode_trim_fields(other, "id");
    assert_json(other, "{\"object\":\"model\",\"id\":\"m\",\"x\":1}");
    json_decref(other);
    char out[64];
    lowcode_param_to_camel("input.max_tokens", out, sizeof out);
    assert_string_equal(out, "input.maxTokens");
    lowcode_param_to_camel("Idempotency-Key", out, sizeof out);
    assert_string_equal(out, "Idempotency-Key");
}

static const char *header(const lowcode_header *h, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(h[i].name, name)) return h[i].value;
    return NULL;
}

static void cors_headers(void **state)
{
    (void)state;
    lowcode_cfg c = {0};
    lowcode_header h[LOWCODE_MAX_HEADERS];
    lowcode_mode m = {.cors = 1, .vary = 1};
    snprintf(m.origin, sizeof m.origin, "https://lowcode.example");
    int n = lowcode_cors_headers(&m, h);
    assert_string_equal(header(h, n, "Access-Control-Allow-Origin"), "https://lowcode.example");
    assert_string_equal(header(h, n, "Access-Control-Allow-Credentials"), "true");
    assert_string_equal(header(h, n, "Vary"), "Origin");
    /* every answer header of the gateway's own that a page may want */
    const char *exposed = header(h, n, "Access-Control-Expose-Headers");
    static const char *const shown[] = {"X-Gpupool-Node", "X-Gpupool-Route", "X-Gpupool-Task", "X-Gpupool-Simulated",
                                        "X-Gpupool-Status", "X-Gpupool-Sensitivity", "X-Gpupool-Cache", "Retry-After",
                                        "Idempotent-Replayed", "X-Gpupool-Session", "X-Gpupool-Session-Dropped",
                                        "X-Gpupool-Version", "X-Gpupool-Batch", "X-Gpupool-Batch-Status",
                                        "X-Gpupool-Run", "X-Request-Id"};
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++)
        if (!strstr(exposed, shown[i])) fail_msg("%s is not exposed", shown[i]);
    m.cors = 0;
    n = lowcode_cors_headers(&m, h);
    assert_int_equal(n, 1); /* only Vary: Origin */
    n = lowcode_preflight_headers(&c, "GET, POST", h);
    assert_string_equal(header(h, n, "Access-Control-Allow-Methods"), "GET, POST, OPTIONS");
    assert_string_equal(header(h, n, "Access-Control-Max-Age"), "600");
    const char *allowed = header(h, n, "Access-Control-Allow-Headers");
    static const char *const need[] = {"Authorization", "Content-Type", "Idempotency-Key", "X-Gpupool-Envelope",
                                       "X-Gpupool-Case", "X-Gpupool-Priority", "X-Gpupool-Continue",
                                       "X-Gpupool-Sensitivity", "X-Gpupool-Session", "X-Gpupool-Track",
                                       "X-Gpupool-Urgency", "X-Request-Id"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!strstr(allowed, need[i])) fail_msg("%s may not be sent", need[i]);
    c.max_age_s = 60;
    n = lowcode_preflight_headers(&c, "GET", h);
    assert_string_equal(header(h, n, "Access-Control-Max-Age"), "60");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(origins), cmocka_unit_test(decisions),    cmocka_unit_test(envelope),
        cmocka_unit_test(fields),  cmocka_unit_test(cors_headers),
    };
    return cmocka_run_group_tests_name("lowcode", tests, NULL, NULL);
}
