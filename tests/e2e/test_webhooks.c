/* e2e: webhooks.  A receiver in this process fails the first two deliveries
 * with 500, so the coordinator retries with backoff; the third is taken.
 * Every delivery carries a signature the receiver verifies with the secret,
 * the event and the delivery id; the body is the finished task (or batch),
 * and the delivery log shows all three attempts.  A delivery that is still
 * pending survives a coordinator crash.  Bad callback URLs get 400. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/webhooks.h"
#include "harness.h"
#include "http/client.h"
#include "http/server.h"
#include "store/store.h"
#include "util/ids.h"

#define SECRET "whsec-test-0123456789"
#define MAX_CALLS 32

typedef struct call {
    char event[64], delivery[64], signature[160];
    char *body;
    int valid;   /* the signature verified */
    int status;  /* what the receiver answered */
} call;

typedef struct receiver {
    pthread_mutex_t mu;
    call calls[MAX_CALLS];
    int n;
    int fail_first;   /* answer 500 to this many calls */
    int fail_all;     /* answer 500 to every call */
    http_server *srv;
    char url[128];
} receiver;

/* Checks "t=<unix>,v1=<hex>" against HMAC-SHA256(secret, t "." body),
 * computed here independently of the coordinator's code path. */
static int verify(const char *sig, const char *body, size_t len)
{
    long long t;
    char mac[65];
    if (!sig || sscanf(sig, "t=%lld,v1=%64[0-9a-f]", &t, mac) != 2) return 0;
    if (llabs((long long)time(NULL) - t) > 300) return 0;
    char *msg = malloc(len + 32);
    int n = sprintf(msg, "%lld.", t);
    memcpy(msg + n, body, len);
    char want[65];
    hmac_sha256_hex(SECRET, msg, (size_t)n + len, want);
    free(msg);
    return !strcmp(want, mac);
}

static void receive(http_req *req, void *app)
{
    receiver *r = app;
    size_t len;
    const char *body = http_req_body(req, &len);
    pthread_mutex_lock(&r->mu);
    int status = 200;
    if (r->n < MAX_CALLS) {
        call *c = &r->calls[r->n];
        const char *e = http_req_header(req, "X-Gpupool-Event"), *d = http_req_header(req, "X-Gpupool-Delivery");
        const char *s = http_req_header(req, "X-Gpupool-Signature");
        snprintf(c->event, sizeof c->event, "%s", e ? e : "");
        snprintf(c->delivery, sizeof c->delivery, "%s", d ? d : "");
        snprintf(c->signature, sizeof c->signature, "%s", s ? s : "");
        c->body = strndup(body, len);
        c->valid = verify(s, body, len);
        status = r->fail_all || r->n < r->fail_first ? 500 : 200;
        c->status = status;
        r->n++;
    }
    pthread_mutex_unlock(&r->mu);
    http_respond_text(req, status, status == 200 ? "ok" : "try again");
}

static void receiver_start(receiver *r, int fail_first)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->fail_first = fail_first;
    char err[200];
    http_server_opts so = {.listen = "127.0.0.1:0", .handler = receive, .app = r};
    r->srv = http_server_start(&so, err, sizeof err);
    assert_non_null(r->srv);
    snprintf(r->url, sizeof r->url, "http://127.0.0.1:%d/hook", http_server_port(r->srv));
}

static void receiver_stop(receiver *r)
{
    http_server_stop(r->srv);
    for (int i = 0; i < r->n; i++) free(r->calls[i].body);
    pthread_mutex_destroy(&r->mu);
}

typedef struct count_ctx { receiver *r; int want; } count_ctx;
static int calls_reach(void *ctx)
{
    count_ctx *c = ctx;
    pthread_mutex_lock(&c->r->mu);
    int n = c->r->n;
    pthread_mutex_unlock(&c->r->mu);
    return n >= c->want;
}

static int setup(void **state)
{
    *state = h_pool_new("webhooks");
    return 0;
}

static json_t *deliveries(h_pool *p, const char *query)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/webhooks/deliveries?%s", query);
    h_resp r;
    h_request(p, "GET", path, NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *d = json_incref(json_object_get(r.json, "data"));
    h_resp_free(&r);
    return d;
}

typedef struct state_ctx { h_pool *p; char query[128]; const char *state; } state_ctx;
static int delivery_in_state(void *ctx)
{
    state_ctx *c = ctx;
    json_t *d = deliveries(c->p, c->query);
    const char *st = json_string_value(json_object_get(json_array_get(d, 0), "state"));
    int ok = st && !strcmp(st, c->state);
    json_decref(d);
    return ok;
}

static void retried_signed_and_logged(void **state)
{
    h_pool *p = *state;
    receiver rx;
    receiver_start(&rx, 2);
    h_start_coordinator(p, "--webhook-secret " SECRET " --webhook-backoff-ms 100 --webhook-max-attempts 5");
    h_start_worker(p, "machine-a", "--ttft-ms%205%20--tps%20400", NULL);

    /* bad URLs are refused before anything is stored */
    const char *bad[] = {"\"ftp://x/y\"", "\"http://\"", "\"http://user@host/\"", "42", "\"http://h:99999/\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"callback_url\":%s,"
                                    "\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}}", bad[i]);
        h_resp r;
        h_request(p, "POST", "/v1/tasks", body, NULL, &r);
        assert_int_equal(r.status, 400);
        assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "param")), "callback_url");
        h_resp_free(&r);
    }

    char body[512];
    snprintf(body, sizeof body, "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"callback_url\":\"%s\","
                                "\"input\":{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}}",
             rx.url);
    long status;
    char *tid = h_submit_task(p, body, NULL, &status);
    assert_int_equal(status, 202);
    count_ctx three = {&rx, 3};
    assert_true(h_wait_until(calls_reach, &three, 15000));
    state_ctx delivered = {p, "", "delivered"};
    snprintf(delivered.query, sizeof delivered.query, "task_id=%s", tid);
    assert_true(h_wait_until(delivery_in_state, &delivered, 5000));

    pthread_mutex_lock(&rx.mu);
    assert_int_equal(rx.n, 3); /* delivered: no fourth call */
    for (int i = 0; i < 3; i++) {
        assert_true(rx.calls[i].valid);
        assert_string_equal(rx.calls[i].event, "task.succeeded");
        assert_string_equal(rx.calls[i].delivery, rx.calls[0].delivery); /* one delivery, retried */
        json_t *t = json_loads(rx.calls[i].body, 0, NULL);
        assert_string_equal(json_string_value(json_object_get(t, "id")), tid);
        assert_string_equal(json_string_value(json_object_get(t, "status")), "succeeded");
        json_decref(t);
    }
    char delivery_id[64];
    snprintf(delivery_id, sizeof delivery_id, "%s", rx.calls[0].delivery);
    pthread_mutex_unlock(&rx.mu);

    /* the signature fails with another secret: the check has teeth */
    assert_false(verify("t=1,v1=00", "{}", 2));

    json_t *log = deliveries(p, delivered.query);
    assert_int_equal(json_array_size(log), 1);
    json_t *d = json_array_get(log, 0);
    assert_string_equal(json_string_value(json_object_get(d, "id")), delivery_id);
    assert_string_equal(json_string_value(json_object_get(d, "event")), "task.succeeded");
    json_t *att = json_object_get(d, "attempts");
    assert_int_equal(json_array_size(att), 3);
    long want[] = {500, 500, 200};
    int64_t prev = 0;
    for (size_t i = 0; i < 3; i++) {
        json_t *a = json_array_get(att, i);
        assert_int_equal(json_integer_value(json_object_get(a, "attempt")), (json_int_t)i + 1);
        assert_int_equal(json_integer_value(json_object_get(a, "status_code")), want[i]);
        assert_true(i == 2 ? json_is_null(json_object_get(a, "error")) : json_is_string(json_object_get(a, "error")));
        int64_t t = json_integer_value(json_object_get(a, "time_ms"));
        if (i) assert_true(t - prev >= 50); /* backed off: at least half the 100 ms base */
        prev = t;
    }
    json_decref(log);

    /* a batch: one delivery once every item has finished */
    snprintf(body, sizeof body, "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"callback_url\":\"%s\",\"inputs\":["
                                "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]},"
                                "{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]}]}", rx.url);
    h_resp r;
    h_request(p, "POST", "/v1/batches", body, NULL, &r);
    assert_int_equal(r.status, 202);
    char bid[64];
    snprintf(bid, sizeof bid, "%s", json_string_value(json_object_get(r.json, "id")));
    h_resp_free(&r);
    count_ctx four = {&rx, 4};
    assert_true(h_wait_until(calls_reach, &four, 15000));
    pthread_mutex_lock(&rx.mu);
    assert_true(rx.calls[3].valid);
    assert_string_equal(rx.calls[3].event, "batch.completed");
    json_t *b = json_loads(rx.calls[3].body, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(b, "id")), bid);
    json_decref(b);
    pthread_mutex_unlock(&rx.mu);
    state_ctx batch_done = {p, "", "delivered"};
    snprintf(batch_done.query, sizeof batch_done.query, "batch_id=%s", bid);
    assert_true(h_wait_until(delivery_in_state, &batch_done, 5000));

    receiver_stop(&rx);
    free(tid);
}

static void pending_delivery_survives_a_crash(void **state)
{
    h_pool *p = *state;
    receiver rx;
    receiver_start(&rx, 0);
    rx.fail_all = 1;
    h_start_coordinator(p, "--webhook-secret " SECRET " --webhook-backoff-ms 300 --webhook-max-backoff-ms 300 "
                           "--webhook-max-attempts 50");
    h_start_worker(p, "machine-a", "--ttft-ms%205%20--tps%20400", NULL);
    char body[512];
    snprintf(body, sizeof body, "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"callback_url\":\"%s\","
                                "\"input\":{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}}",
             rx.url);
    long status;
    char *tid = h_submit_task(p, body, NULL, &status);
    assert_int_equal(status, 202);
    count_ctx one = {&rx, 1};
    assert_true(h_wait_until(calls_reach, &one, 15000));
    h_kill(p->coord, SIGKILL);
    h_wait_exit(p->coord, 5000);
    pthread_mutex_lock(&rx.mu);
    int before = rx.n;
    rx.fail_all = 0;
    pthread_mutex_unlock(&rx.mu);
    h_restart_coordinator(p);
    count_ctx more = {&rx, before + 1};
    assert_true(h_wait_until(calls_reach, &more, 15000));
    state_ctx delivered = {p, "", "delivered"};
    snprintf(delivered.query, sizeof delivered.query, "task_id=%s", tid);
    assert_true(h_wait_until(delivery_in_state, &delivered, 5000));
    pthread_mutex_lock(&rx.mu);
    assert_true(rx.calls[rx.n - 1].valid);
    assert_string_equal(rx.calls[rx.n - 1].delivery, rx.calls[0].delivery);
    pthread_mutex_unlock(&rx.mu);
    receiver_stop(&rx);
    free(tid);
}

static void allow_cidr_refuses_other_hosts(void **state)
{
    h_pool *p = *state;
    h_start_coordinator(p, "--webhook-allow-cidr 10.0.0.0/8");
    h_resp r;
    h_request(p, "POST", "/v1/tasks",
              "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"callback_url\":\"http://127.0.0.1:9/x\","
              "\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}}", NULL, &r);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "webhook-allow-cidr"));
    h_resp_free(&r);
}

/* The C API other producers use: an event of their own, delivered signed,
 * retried and logged like a task's. */
static void enqueue_api_delivers(void **state)
{
    h_pool *p = *state;
    receiver rx;
    receiver_start(&rx, 1);
    http_client_global_init();
    char dir[512], err[256];
    snprintf(dir, sizeof dir, "%s/api", p->dir);
    store *st = store_open(dir, err, sizeof err);
    assert_non_null(st);
    wh_db *db = wh_db_open(dir, err, sizeof err);
    assert_non_null(db);
    webhook_cfg cfg = {.secret = SECRET, .max_attempts = 3, .backoff_ms = 50, .max_backoff_ms = 50, .timeout_ms = 2000};
    webhooks *w = webhooks_start(NULL, db, &cfg); /* no tasks or batches: no coordinator needed */
    assert_non_null(w);
    assert_int_equal(webhook_enqueue(w, "pipeline.finished", "pipe_1", rx.url, "{\"id\":\"pipe_1\"}"), 0);
    count_ctx two = {&rx, 2};
    assert_true(h_wait_until(calls_reach, &two, 10000));
    json_t *log = NULL;
    int64_t deadline = h_now_ms() + 5000;
    while (h_now_ms() < deadline) {
        json_decref(log);
        log = wh_list(webhooks_db(w), "pipe_1", 10);
        const char *s = json_string_value(json_object_get(json_array_get(log, 0), "state"));
        if (s && !strcmp(s, "delivered")) break;
    }
    json_t *d = json_array_get(log, 0);
    assert_string_equal(json_string_value(json_object_get(d, "state")), "delivered");
    assert_int_equal(json_array_size(json_object_get(d, "attempts")), 2);
    json_decref(log);
    pthread_mutex_lock(&rx.mu);
    assert_true(rx.calls[1].valid);
    assert_string_equal(rx.calls[1].event, "pipeline.finished");
    assert_string_equal(rx.calls[1].body, "{\"id\":\"pipe_1\"}");
    pthread_mutex_unlock(&rx.mu);
    webhooks_stop(w);
    store_close(st);
    receiver_stop(&rx);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* An app run with callback_url is delivered when it ends, as app.succeeded
 * with the run as GET /v1/apps/runs/{id} shows it. */
static void app_run_calls_back(void **state)
{
    h_pool *p = *state;
    receiver rx;
    receiver_start(&rx, 0);
    char apps[400], replies[400], args[700], sim[600];
    snprintf(apps, sizeof apps, "%s/apps.json", p->dir);
    snprintf(replies, sizeof replies, "%s/replies.json", p->dir);
    write_text(apps, "{\"apps\":{\"label\":{\"model\":\"m-small\",\"prompt\":\"Label: {{text}}\","
                     "\"output_schema\":{\"type\":\"object\",\"required\":[\"label\"]}}}}");
    write_text(replies, "[{\"match\":\"Label:\",\"reply\":\"{\\\"label\\\": \\\"question\\\"}\"}]");
    snprintf(args, sizeof args, "--webhook-secret " SECRET " --webhook-backoff-ms 100 --apps %s", apps);
    h_start_coordinator(p, args);
    snprintf(sim, sizeof sim, "--ttft-ms%%200%%20--tps%%200%%20--model%%20m-small%%20--reply-map%%20%s", replies);
    h_start_worker(p, "machine-a", sim, NULL);
    char body[512];
    snprintf(body, sizeof body, "{\"input\":{\"text\":\"where is it?\"},\"async\":true,\"callback_url\":\"%s\"}",
             rx.url);
    h_resp r;
    h_request(p, "POST", "/v1/apps/label", body, NULL, &r);
    assert_int_equal(r.status, 202);
    char run[64];
    snprintf(run, sizeof run, "%s", json_string_value(json_object_get(r.json, "id")));
    h_resp_free(&r);
    /* a bad callback is refused before anything is stored */
    h_request(p, "POST", "/v1/apps/label", "{\"input\":{\"text\":\"x\"},\"callback_url\":\"ftp://x\"}", NULL, &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "param")), "callback_url");
    h_resp_free(&r);
    count_ctx one = {&rx, 1};
    assert_true(h_wait_until(calls_reach, &one, 15000));
    pthread_mutex_lock(&rx.mu);
    assert_string_equal(rx.calls[0].event, "app.succeeded");
    assert_true(rx.calls[0].valid);
    json_t *got = json_loads(rx.calls[0].body, 0, NULL);
    pthread_mutex_unlock(&rx.mu);
    assert_string_equal(json_string_value(json_object_get(got, "id")), run);
    assert_string_equal(json_string_value(json_object_get(json_object_get(got, "output"), "label")), "question");
    json_decref(got);
    state_ctx delivered = {p, "", "delivered"};
    snprintf(delivered.query, sizeof delivered.query, "run_id=%s", run);
    assert_true(h_wait_until(delivery_in_state, &delivered, 5000));
    receiver_stop(&rx);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(retried_signed_and_logged, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(pending_delivery_survives_a_crash, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(allow_cidr_refuses_other_hosts, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(enqueue_api_delivers, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(app_run_calls_back, setup, h_pool_teardown),
    };
    return cmocka_run_group_tests_name("webhooks", tests, NULL, NULL);
}
