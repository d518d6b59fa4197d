/* Unit tests: api/webhook_rec (callback URL checks, the signature against an
 * HMAC computed here with libcrypto directly, the backoff schedule) and
 * store/webhooks (a subscription fires only once its task has finished; a
 * delivery's attempts are logged in order). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/webhook_rec.h"
#include "store/store.h"
#include "store/webhooks.h"

static void urls(void **state)
{
    (void)state;
    char host[256], why[200];
    assert_int_equal(webhook_url_check("http://10.0.0.5:8080/hook?x=1", host, sizeof host, why, sizeof why), 0);
    assert_string_equal(host, "10.0.0.5");
    assert_int_equal(webhook_url_check("HTTPS://hooks.example.com/a", host, sizeof host, why, sizeof why), 0);
    assert_string_equal(host, "hooks.example.com");
    assert_int_equal(webhook_url_check("http://[fd00::1]:9/x", host, sizeof host, why, sizeof why), 0);
    assert_string_equal(host, "fd00::1");
    assert_int_equal(webhook_url_check("http://h", host, sizeof host, why, sizeof why), 0);
    const char *bad[] = {"", "ftp://h/", "file:///etc/passwd", "http://", "http:///x", "http://u:p@h/",
                         "http://h:0/", "http://h:65536/", "http://h:80x/", "http://h /", "http://h/\n",
                         "http://[fd00::1/", "gopher://h"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (!webhook_url_check(bad[i], host, sizeof host, why, sizeof why)) fail_msg("accepted '%s'", bad[i]);
    char longer[WEBHOOK_URL_MAX + 20] = "http://h/";
    memset(longer + 9, 'a', WEBHOOK_URL_MAX);
    longer[WEBHOOK_URL_MAX + 9] = 0;
    assert_int_equal(webhook_url_check(longer, host, sizeof host, why, sizeof why), -1);
}

static void signature(void **state)
{
    (void)state;
    const char *body = "{\"id\":\"task_1\"}";
    char sig[128];
    webhook_signature("s3cret", 1700000000, body, strlen(body), sig, sizeof sig);
    unsigned char mac[32];
    unsigned int n = 0;
    const char *msg = "1700000000.{\"id\":\"task_1\"}";
    HMAC(EVP_sha256(), "s3cret", 6, (const unsigned char *)msg, strlen(msg), mac, &n);
    char want[128] = "t=1700000000,v1=";
    for (unsigned i = 0; i < n; i++) sprintf(want + strlen(want), "%02x", mac[i]);
    assert_string_equal(sig, want);
    /* another secret, time or body signs differently */
    char other[128];
    webhook_signature("s3creT", 1700000000, body, strlen(body), other, sizeof other);
    assert_string_not_equal(sig, other);
    webhook_signature("s3cret", 1700000001, body, strlen(body), other, sizeof other);
    assert_string_not_equal(sig + 16, other + 16);
    webhook_signature("s3cret", 1700000000, "{}", 2, other, sizeof other);
    assert_string_not_equal(sig, other);
}

static void backoff(void **state)
{
    (void)state;
    /* doubling from the base, within [0.5, 1) of the nominal delay */
    for (int a = 1; a <= 6; a++) {
        int64_t nominal = 1000LL << (a - 1);
        assert_int_equal(webhook_backoff_ms(a, 1000, 1000000, 0.0), nominal / 2);
        int64_t hi = webhook_backoff_ms(a, 1000, 1000000, 0.999);
        assert_true(hi < nominal && hi >= nominal * 99 / 100);
    }
    /* capped, and never overflowing for huge attempt numbers */
    assert_int_equal(webhook_backoff_ms(40, 1000, 60000, 0.0), 30000);
    assert_true(webhook_backoff_ms(1000, 1000, 60000, 0.5) <= 60000);
    assert_true(webhook_backoff_ms(0, 1000, 60000, 0.0) >= 1);
    assert_true(webhook_backoff_ms(1, 1, 1, 0.0) >= 1);
    char ev[64];
    webhook_event_name("task", "failed", ev, sizeof ev);
    assert_string_equal(ev, "task.failed");
}

static void store_flow(void **state)
{
    (void)state;
    char dir[] = "/tmp/gpupool-wh-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[256];
    store *st = store_open(dir, err, sizeof err);
    assert_non_null(st);
    wh_db *db = wh_db_open(dir, err, sizeof err);
    assert_non_null(db);
    task_new t = {.id = "task_w1", .type = "chat", .model = "m", .input_json = "{}", .max_attempts = 1,
                  .created_ms = 1};
    char existing[64];
    assert_int_equal(store_task_insert(st, &t, existing), STORE_OK);
    assert_int_equal(wh_subscribe(db, "task", "task_w1", "http://h/x", 1), 0);
    assert_int_equal(wh_subscribe(db, "task", "task_nope", "http://h/x", 1), 0); /* never fires */
    json_t *f = wh_fired(db, 10);
    assert_int_equal(json_array_size(f), 0); /* still queued */
    json_decref(f);
    assert_int_equal(store_task_cancel(st, "task_w1", 5), STORE_OK);
    f = wh_fired(db, 10);
    assert_int_equal(json_array_size(f), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(f, 0), "object_id")), "task_w1");
    json_decref(f);
    assert_int_equal(wh_enqueue(db, "whd_1", "task.canceled", "task_w1", "http://h/x", "{}", 10, "task_w1"), 0);
    f = wh_fired(db, 10);
    assert_int_equal(json_array_size(f), 0); /* fired once only */
    json_decref(f);
    json_t *due = wh_due(db, 10, 10);
    assert_int_equal(json_array_size(due), 1);
    json_decref(due);
    assert_int_equal(wh_record(db, "whd_1", 1, 10, 3, 500, "the receiver answered 500", "pending", 1000), 0);
    due = wh_due(db, 999, 10);
    assert_int_equal(json_array_size(due), 0); /* not yet */
    json_decref(due);
    due = wh_due(db, 1000, 10);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(due, 0), "attempts")), 1);
    json_decref(due);
    assert_int_equal(wh_record(db, "whd_1", 2, 1000, 2, 204, NULL, "delivered", 0), 0);
    json_t *log = wh_list(db, "task_w1", 10);
    json_t *d = json_array_get(log, 0);
    assert_string_equal(json_string_value(json_object_get(d, "state")), "delivered");
    assert_true(json_is_null(json_object_get(d, "next_attempt_ms")));
    json_t *att = json_object_get(d, "attempts");
    assert_int_equal(json_array_size(att), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(att, 0), "status_code")), 500);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(att, 1), "status_code")), 204);
    json_decref(log);
    /* finished deliveries older than the cut are forgotten */
    assert_int_equal(wh_prune(db, 5), 0);
    assert_int_equal(wh_prune(db, 11), 1);
    log = wh_list(db, "task_w1", 10);
    assert_int_equal(json_array_size(log), 0);
    json_decref(log);
    wh_db_close(db);
    store_close(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(urls),
        cmocka_unit_test(signature),
        cmocka_unit_test(backoff),
        cmocka_unit_test(store_flow),
    };
    return cmocka_run_group_tests_name("webhooks", tests, NULL, NULL);
}
