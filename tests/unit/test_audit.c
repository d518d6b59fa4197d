/* Unit tests: api/audit_rec (request ids, redacted and capped bodies, the
 * task a call concerns, ?since=) and store/audit (insert, query, a stream's
 * late text, pruning). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/audit.h"
#include "api/audit_rec.h"
#include "policy/detect.h"
#include "store/audit.h"
#include "store/store.h"

static detect_rules *rules;

static int setup(void **state)
{
    (void)state;
    static const char *const kw[] = {"Project Falcon", NULL};
    char err[256];
    rules = detect_rules_new(kw, NULL, err, sizeof err);
    return rules ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    detect_rules_free(rules);
    return 0;
}

static void request_ids(void **state)
{
    (void)state;
    assert_true(audit_request_id_ok("my-req_1.2:3"));
    assert_true(audit_request_id_ok("0123456789012345678901234567890123456789012345678901234567890123"));
    assert_false(audit_request_id_ok("01234567890123456789012345678901234567890123456789012345678901234"));
    assert_false(audit_request_id_ok(""));
    assert_false(audit_request_id_ok(NULL));
    assert_false(audit_request_id_ok("a b"));
    assert_false(audit_request_id_ok("a\r\nX-Evil: 1"));
    assert_false(audit_request_id_ok("caf\xc3\xa9"));
}

static void json_bodies_redacted(void **state)
{
    (void)state;
    /* The e-mail is escaped in the JSON text: only a decoded walk sees it. */
    const char *body = "{\"model\":\"m\",\"id\":\"task_4111111111111111\",\"input\":{\"messages\":[{\"role\":\"user\","
                       "\"content\":\"mail bob\\u0040example.com about Project Falcon\"}]}}";
    int cut = -1;
    char *out = audit_redact_body(rules, body, strlen(body), 0, 4096, 1, &cut);
    assert_non_null(out);
    assert_int_equal(cut, 0);
    assert_null(strstr(out, "example.com"));
    assert_null(strstr(out, "Falcon"));
    assert_non_null(strstr(out, "[REDACTED:email]"));
    assert_non_null(strstr(out, "[REDACTED:keyword]"));
    /* no field is exempt, ids included */
    assert_null(strstr(out, "4111111111111111"));
    free(out);
    /* keys, and numbers (a phone sent as a JSON number) */
    const char *odd = "{\"call 13800138000\":1,\"phone\":13800138000,\"n\":[4111111111111111,7,0.5]}";
    out = audit_redact_body(rules, odd, strlen(odd), 0, 4096, 1, &cut);
    assert_null(strstr(out, "13800138000"));
    assert_null(strstr(out, "4111111111111111"));
    assert_non_null(strstr(out, "\"phone\":\"[REDACTED:cn_mobile]\""));
    assert_non_null(strstr(out, ",7,0.5]"));
    free(out);
}

static void raw_scan_shortcut(void **state)
{
    (void)state;
    /* nothing to redact: kept byte for byte, unparsed */
    const char *clean = "{\"b\": 1,  \"a\":\"hello\"}";
    int cut;
    char *out = audit_redact_body(rules, clean, strlen(clean), 0, 4096, 1, &cut);
    assert_string_equal(out, clean);
    free(out);
    /* one-character escapes (a model's answer is full of \n) keep the
     * shortcut: kept byte for byte when nothing is found ... */
    const char *lines = "{\"a\":\"line one\\nline \\\"two\\\"\\t\\/ \\\\u0040 ok\"}";
    out = audit_redact_body(rules, lines, strlen(lines), 0, 4096, 1, &cut);
    assert_string_equal(out, lines);
    free(out);
    /* ... and the scan sees the decoded text: a span right after an escape,
     * and a keyword that needs the escaped character, are both found */
    const char *after = "{\"a\":\"hi\\nbob@example.com\"}";
    out = audit_redact_body(rules, after, strlen(after), 0, 4096, 1, &cut);
    assert_non_null(strstr(out, "[REDACTED:email]"));
    assert_null(strstr(out, "bob@"));
    free(out);
    static const char *const kw[] = {"top/secret", NULL};
    char kerr[200];
    detect_rules *slash = detect_rules_new(kw, NULL, kerr, sizeof kerr);
    assert_non_null(slash);
    const char *esc = "{\"a\":\"the top\\/secret plan\"}";
    out = audit_redact_body(slash, esc, strlen(esc), 0, 4096, 1, &cut);
    assert_non_null(strstr(out, "[REDACTED:keyword]"));
    free(out);
    detect_rules_free(slash);
    /* an escape could hide a span from the raw scan: parsed and redacted */
    const char *hidden = "{\"a\":\"bob\\u0040example.com\"}";
    out = audit_redact_body(rules, hidden, strlen(hidden), 0, 4096, 1, &cut);
    assert_non_null(strstr(out, "[REDACTED:email]"));
    free(out);
    /* a regex anchored to a field's start sees only fields, not raw text */
    static const char *const re[] = {"^secret", NULL};
    char err[200];
    detect_rules *anchored = detect_rules_new(NULL, re, err, sizeof err);
    assert_non_null(anchored);
    const char *body = "{\"a\":\"secret plan\"}";
    out = audit_redact_body(anchored, body, strlen(body), 0, 4096, 0, &cut);
    assert_null(strstr(out, "secret plan"));
    free(out);
    detect_rules_free(anchored);
}

static void text_bodies_and_caps(void **state)
{
    (void)state;
    /* SSE text, not JSON */
    const char *sse = "data: {\"x\":\"call 13800138000\"}\n\n";
    int cut;
    char *out = audit_redact_body(rules, sse, strlen(sse), 0, 4096, 1, &cut);
    assert_null(strstr(out, "13800138000"));
    assert_int_equal(cut, 0);
    free(out);
    /* An e-mail the cap cuts through is redacted, not half kept. */
    char big[2048];
    memset(big, 'a', sizeof big);
    big[0] = '{'; /* looks like JSON but is cut: treated as text */
    memcpy(big + 95, " alice@example.org ", 19);
    big[sizeof big - 1] = 0;
    out = audit_redact_body(rules, big, strlen(big), 0, 100, 1, &cut);
    assert_int_equal(cut, 1);
    assert_true(strlen(out) <= 100);
    assert_null(strstr(out, "alice"));
    free(out);
    /* the caller kept only a prefix: still marked cut */
    out = audit_redact_body(rules, "short", 5, 1, 100, 1, &cut);
    assert_string_equal(out, "short");
    assert_int_equal(cut, 1);
    free(out);
    /* never cut inside a UTF-8 sequence */
    const char *cjk = "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xbd\xa0\xe5\xa5\xbd";
    out = audit_redact_body(rules, cjk, strlen(cjk), 0, 4, 1, &cut);
    assert_string_equal(out, "\xe4\xbd\xa0");
    assert_int_equal(cut, 1);
    free(out);
    out = audit_redact_body(rules, NULL, 0, 0, 4, 1, &cut);
    assert_string_equal(out, "");
    free(out);
}

static void task_of(void **state)
{
    (void)state;
    char id[64];
    audit_task_of("GET", "/v1/tasks/task_abc", NULL, NULL, 0, id, sizeof id);
    assert_string_equal(id, "task_abc");
    audit_task_of("GET", "/v1/tasks/poll", "task_p", NULL, 0, id, sizeof id);
    assert_string_equal(id, "task_p");
    const char *resp = "{\"id\":\"task_new\",\"status\":\"queued\"}";
    audit_task_of("POST", "/v1/tasks", NULL, resp, strlen(resp), id, sizeof id);
    assert_string_equal(id, "task_new");
    const char *env = "{\"ok\":true,\"status\":202,\"data\":{\"id\":\"task_env\"}}";
    audit_task_of("POST", "/v1/tasks", NULL, env, strlen(env), id, sizeof id);
    assert_string_equal(id, "task_env");
    audit_task_of("POST", "/v1/chat/completions", NULL, resp, strlen(resp), id, sizeof id);
    assert_string_equal(id, "");
    const char *err = "{\"error\":{\"message\":\"x\"}}";
    audit_task_of("POST", "/v1/tasks", NULL, err, strlen(err), id, sizeof id);
    assert_string_equal(id, "");
}

static void since(void **state)
{
    (void)state;
    int64_t v;
    assert_int_equal(audit_parse_since("1700000000000", 0, &v), 0);
    assert_int_equal(v, 1700000000000LL);
    assert_int_equal(audit_parse_since("15m", 1000000000, &v), 0);
    assert_int_equal(v, 1000000000 - 15 * 60000);
    assert_int_equal(audit_parse_since("2d", 100, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(audit_parse_since("-5m", 0, &v), -1);
    assert_int_equal(audit_parse_since("5y", 0, &v), -1);
    assert_int_equal(audit_parse_since("5mm", 0, &v), -1);
    assert_int_equal(audit_parse_since("", 0, &v), -1);
}

static void store_roundtrip(void **state)
{
    (void)state;
    char dir[] = "/tmp/gpupool-audit-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[256];
    store *st = store_open(dir, err, sizeof err);
    assert_non_null(st);
    audit_db *db = audit_db_open(dir, err, sizeof err);
    assert_non_null(db);
    audit_entry a = {.request_id = "r1", .ts_ms = 1000, .method = "POST", .path = "/v1/tasks", .status = 202,
                     .duration_us = 1500, .owner = "key-abc", .task_id = "task_1",
                     .request_body = "{\"a\":1}", .response_body = "plain"};
    audit_entry b = {.request_id = "r2", .ts_ms = 5000, .method = "POST", .path = "/v1/chat/completions",
                     .status = 200, .duration_us = 10, .route_json = "{\"sensitivity\":\"normal\",\"nodes\":[\"n1\"]}"};
    const audit_entry *rows[] = {&a, &b};
    assert_int_equal(audit_db_insert(db, rows, 2), 0);
    audit_query q = {.task_id = "task_1", .limit = 10};
    json_t *j = audit_db_query(db, &q);
    assert_int_equal(json_array_size(j), 1);
    json_t *r = json_array_get(j, 0);
    assert_string_equal(json_string_value(json_object_get(r, "request_id")), "r1");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "request_body"), "a")), 1);
    assert_string_equal(json_string_value(json_object_get(r, "response_body")), "plain");
    assert_true(json_is_null(json_object_get(r, "route")));
    json_decref(j);
    /* a stream's text arrives late; an unknown id changes nothing */
    assert_int_equal(audit_db_set_response(db, "r2", "streamed text", 0, 99), 1);
    assert_int_equal(audit_db_set_response(db, "nope", "x", 0, 1), 0);
    audit_query q2 = {.request_id = "r2", .limit = 10};
    j = audit_db_query(db, &q2);
    r = json_array_get(j, 0);
    assert_string_equal(json_string_value(json_object_get(r, "response_body")), "streamed text");
    assert_string_equal(json_string_value(json_array_get(json_object_get(json_object_get(r, "route"), "nodes"), 0)), "n1");
    json_decref(j);
    audit_query q3 = {.since_ms = 2000, .limit = 10};
    j = audit_db_query(db, &q3);
    assert_int_equal(json_array_size(j), 1);
    json_decref(j);
    assert_int_equal(audit_db_prune(db, 2000), 1);
    audit_query all = {.limit = 10};
    j = audit_db_query(db, &all);
    assert_int_equal(json_array_size(j), 1);
    json_decref(j);
    audit_db_close(db);
    store_close(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A full queue drops and counts; it never blocks the caller. */
static void full_queue_drops(void **state)
{
    (void)state;
    char dir[] = "/tmp/gpupool-auditq-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[256];
    store *st = store_open(dir, err, sizeof err);
    audit_db *db = audit_db_open(dir, err, sizeof err);
    assert_non_null(db);
    audit_cfg cfg = {.days = 1, .body_max = 1024, .queue_max = 2, .raw_scan = 1};
    auditor *a = auditor_start(db, rules, &cfg);
    assert_non_null(a);
    /* far faster than the writer can take them */
    for (int i = 0; i < 20000; i++) audit_stream_done(a, "req_x", "text", 4, 1);
    uint64_t written, dropped;
    auditor_counts(a, &written, &dropped);
    assert_true(dropped > 0);
    assert_true(dropped < 20000);
    auditor_stop(a);
    store_close(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static int response_is(audit_db *db, const char *id, const char *want)
{
    audit_query q = {.request_id = id, .limit = 1};
    json_t *j = audit_db_query(db, &q);
    const char *got = json_string_value(json_object_get(json_array_get(j, 0), "response_body"));
    int same = got && !strcmp(got, want);
    json_decref(j);
    return same;
}

/* The writer wakes for 32 waiting records, not only on its timer, so a busy
 * gateway never piles up hundreds of them for one long round; fewer wait for
 * the timer (a minute here) or the stop. */
static void writer_wakes_for_a_batch(void **state)
{
    (void)state;
    char dir[] = "/tmp/gpupool-auditw-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[256], id[32];
    store *st = store_open(dir, err, sizeof err);
    audit_db *db = audit_db_open(dir, err, sizeof err);
    assert_non_null(db);
    audit_entry e[40];
    char ids[40][32];
    const audit_entry *rows[40];
    for (int i = 0; i < 40; i++) {
        snprintf(ids[i], sizeof ids[i], "req_%d", i);
        e[i] = (audit_entry){.request_id = ids[i], .ts_ms = (int64_t)time(NULL) * 1000, .method = "POST", .path = "/v1/chat/completions",
                             .status = 200, .response_body = "head"};
        rows[i] = &e[i];
    }
    assert_int_equal(audit_db_insert(db, rows, 40), 0);
    audit_cfg cfg = {.days = 1, .body_max = 1024, .queue_max = 1024, .raw_scan = 1, .nap_ms = 60000};
    auditor *a = auditor_start(db, rules, &cfg);
    assert_non_null(a);
    for (int i = 0; i < 31; i++) {
        snprintf(id, sizeof id, "req_%d", i);
        audit_stream_done(a, id, "text", 4, 1);
    }
    /* Nothing may happen here, so there is no condition to wait on: the
     * writer gets 300 ms to do what it must not. */
    usleep(300 * 1000);
    assert_true(response_is(db, "req_0", "head"));
    audit_stream_done(a, "req_31", "text", 4, 1);
    int done = 0;
    for (int t = 0; t < 1000 && !done; t++) {
        done = response_is(db, "req_31", "text") && response_is(db, "req_0", "text");
        if (!done) usleep(10 * 1000);
    }
    assert_true(done);
    audit_stream_done(a, "req_32", "text", 4, 1);
    usleep(100 * 1000); /* again a check that nothing happens */
    assert_true(response_is(db, "req_32", "head"));
    auditor_stop(a); /* writes what waits, and closes db */
    db = audit_db_open(dir, err, sizeof err);
    assert_non_null(db);
    assert_true(response_is(db, "req_32", "text"));
    assert_true(response_is(db, "req_33", "head"));
    audit_db_close(db);
    store_close(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(request_ids),
        cmocka_unit_test(json_bodies_redacted),
        cmocka_unit_test(raw_scan_shortcut),
        cmocka_unit_test(text_bodies_and_caps),
        cmocka_unit_test(task_of),
        cmocka_unit_test(since),
        cmocka_unit_test(store_roundtrip),
        cmocka_unit_test(full_queue_drops),
        cmocka_unit_test(writer_wakes_for_a_batch),
    };
    return cmocka_run_group_tests_name("audit", tests, setup, teardown);
}
