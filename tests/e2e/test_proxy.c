/* e2e: OpenAI-compatible calls through a pool of a coordinator and two
 * workers with simulated engines. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define CHAT "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],\"max_tokens\":6}"
#define CHAT_STREAM "{\"model\":\"sim-llama-8b\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],\"max_tokens\":6}"

static int setup(void **state)
{
    h_pool *p = h_pool_new("proxy");
    h_start_coordinator(p, "--queue-timeout-ms 20000");
    h_start_worker(p, "machine-a", "--ttft-ms%2020%20--tps%20200%20--slots%202", NULL);
    h_start_worker(p, "machine-b", "--ttft-ms%2020%20--tps%20200%20--slots%202", NULL);
    *state = p;
    return 0;
}

static void chat_without_stream(void **state)
{
    h_pool *p = *state;
    h_resp r;
    assert_int_equal(h_request(p, "POST", "/v1/chat/completions", CHAT, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *msg = json_object_get(json_array_get(json_object_get(r.json, "choices"), 0), "message");
    const char *content = json_string_value(json_object_get(msg, "content"));
    assert_non_null(content);
    assert_non_null(strstr(content, "[simulated]"));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r.json, "usage"), "completion_tokens")), 6);
    char v[128];
    assert_non_null(h_header(&r, "X-Gpupool-Node", v, sizeof v));
    assert_memory_equal(v, "node-", 5);
    assert_non_null(h_header(&r, "X-Gpupool-Route", v, sizeof v));
    assert_string_equal(v, "local; reason=pool"); /* an ordinary request on the pool's own nodes */
    assert_non_null(h_header(&r, "X-Gpupool-Simulated", v, sizeof v));
    assert_string_equal(v, "true");
    h_resp_free(&r);
}

static void chat_stream_relays_events(void **state)
{
    h_pool *p = *state;
    h_resp r;
    assert_int_equal(h_request(p, "POST", "/v1/chat/completions", CHAT_STREAM, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    int events = 0;
    for (const char *s = r.body; (s = strstr(s, "data: ")); s += 6) events++;
    /* role chunk + 6 tokens + finish chunk + [DONE] */
    assert_int_equal(events, 9);
    assert_non_null(strstr(r.body, "\"chat.completion.chunk\""));
    assert_non_null(strstr(r.body, "data: [DONE]"));
    h_resp_free(&r);
}

/* The first bytes of a stream arrive long before the last: the gateway
 * relays each event as it comes instead of buffering the answer. */
static void stream_is_not_buffered(void **state)
{
    h_pool *p = *state;
    const char *req =
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
        "Connection: close\r\n\r\n%s";
    const char *body = "{\"model\":\"sim-llama-8b\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"max_tokens\":80}";
    char raw[1024];
    snprintf(raw, sizeof raw, req, strlen(body), body);
    int64_t t0 = h_now_ms();
    int fd = h_raw_connect_send(p->coord->port, raw, strlen(raw));
    assert_true(fd >= 0);
    char first[4096];
    size_t n = 0;
    while (!strstr(first, "[simulated]") && h_now_ms() - t0 < 10000) {
        size_t got = h_raw_read(fd, first + n, sizeof first - n, 50);
        n += got;
        first[n] = 0;
    }
    int64_t t_first = h_now_ms() - t0;
    static char rest[65536];
    h_raw_read(fd, rest, sizeof rest, 10000);
    int64_t t_all = h_now_ms() - t0;
    close(fd);
    assert_non_null(strstr(first, "[simulated]"));
    assert_non_null(strstr(rest, "[DONE]"));
    /* 80 tokens at 200/s take ~400 ms; the first token comes after ~20 ms */
    assert_true(t_all - t_first >= 100);
}

static void completions_embeddings_models(void **state)
{
    h_pool *p = *state;
    h_resp r;
    h_request(p, "POST", "/v1/completions", "{\"model\":\"sim-llama-8b\",\"prompt\":\"once\",\"max_tokens\":3}", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "object")), "text_completion");
    h_resp_free(&r);

    h_request(p, "POST", "/v1/embeddings", "{\"model\":\"sim-llama-8b\",\"input\":[\"a\",\"b\"]}", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_array_size(json_object_get(r.json, "data")), 2);
    h_resp_free(&r);

    h_request(p, "GET", "/v1/models", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *m = json_array_get(json_object_get(r.json, "data"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "id")), "sim-llama-8b");
    assert_int_equal(json_array_size(json_object_get(m, "nodes")), 2);
    h_resp_free(&r);
}

static void nodes_show_gpus_and_engines(void **state)
{
    h_pool *p = *state;
    h_resp r;
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *data = json_object_get(r.json, "data");
    assert_int_equal(json_array_size(data), 2);
    json_t *n = json_array_get(data, 0);
    assert_string_equal(json_string_value(json_object_get(n, "state")), "ready");
    assert_true(json_integer_value(json_object_get(n, "heartbeat_age_ms")) < 5000);
    json_t *g = json_array_get(json_object_get(n, "gpus"), 0);
    assert_string_equal(json_string_value(json_object_get(g, "name")), "RTX 3060");
    assert_int_equal(json_integer_value(json_object_get(g, "total_bytes")), 12LL << 30);
    assert_int_equal(json_integer_value(json_object_get(g, "free_bytes")), 10LL << 30);
    assert_non_null(json_object_get(g, "temperature_c"));
    json_t *e = json_array_get(json_object_get(n, "engines"), 0);
    assert_true(json_is_true(json_object_get(e, "simulated")));
    assert_string_equal(json_string_value(json_array_get(json_object_get(e, "models"), 0)), "sim-llama-8b");
    h_resp_free(&r);
}

typedef struct client { h_pool *p; long status; const char *node; char nodebuf[64]; } client;

static void *one_client(void *arg)
{
    client *c = arg;
    h_resp r;
    h_request(c->p, "POST", "/v1/chat/completions", CHAT, NULL, &r);
    c->status = r.status;
    const char *id = json_string_value(json_object_get(r.json, "id"));
    snprintf(c->nodebuf, sizeof c->nodebuf, "%s", id ? id : "");
    h_resp_free(&r);
    return NULL;
}

/* 20 clients at once against 4 slots: all are served (the rest wait in the
 * queue) and both nodes take work. */
static void twenty_concurrent_clients(void **state)
{
    h_pool *p = *state;
    pthread_t t[20];
    client c[20];
    for (int i = 0; i < 20; i++) {
        c[i] = (client){.p = p};
        pthread_create(&t[i], NULL, one_client, &c[i]);
    }
    for (int i = 0; i < 20; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 20; i++) assert_int_equal(c[i].status, 200);
    h_resp r;
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(r.json, "data"), i, n) assert_int_equal(json_integer_value(json_object_get(n, "inflight")), 0);
    h_resp_free(&r);
    h_request(p, "GET", "/metrics", NULL, NULL, &r);
    assert_non_null(strstr(r.body, "gpupool_http_requests_total{route=\"chat_completions\",code=\"200\"}"));
    assert_non_null(strstr(r.body, "gpupool_http_request_duration_seconds_bucket{route=\"chat_completions\""));
    assert_non_null(strstr(r.body, "gpupool_nodes{state=\"ready\"} 2"));
    assert_non_null(strstr(r.body, "gpupool_queue_depth 0"));
    h_resp_free(&r);
}

static int all_idle(void *ctx)
{
    h_pool *p = ctx;
    h_resp r;
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    int busy = 0;
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(r.json, "data"), i, n) {
        busy += (int)json_integer_value(json_object_get(n, "inflight"));
        busy += (int)json_integer_value(json_object_get(n, "worker_inflight"));
    }
    h_resp_free(&r);
    return busy == 0;
}

/* Sends, over a raw socket it leaves open, a chat that would run for
 * minutes (100000 tokens at 200/s). */
static int send_long_chat(h_pool *p, int stream)
{
    char body[256], raw[1024];
    snprintf(body, sizeof body,
             "{\"model\":\"sim-llama-8b\",\"stream\":%s,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
             "\"max_tokens\":100000}", stream ? "true" : "false");
    snprintf(raw, sizeof raw,
             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
    return h_raw_connect_send(p->coord->port, raw, strlen(raw));
}

/* A client that leaves mid-stream frees its slot on the node and the
 * engine: the upstream call is cancelled, not left to run to the end. */
static void client_disconnect_cancels_upstream(void **state)
{
    h_pool *p = *state;
    int fd = send_long_chat(p, 1);
    char got[4096] = "";
    size_t n = 0;
    int64_t deadline = h_now_ms() + 10000;
    while (!strstr(got, "200 OK") && n < sizeof got - 1 && h_now_ms() < deadline)
        n += h_raw_read(fd, got + n, sizeof got - n, 50);
    assert_non_null(strstr(got, "200 OK"));
    assert_false(all_idle(p));
    close(fd);
    /* 100000 tokens at 200/s would hold the slot for over 8 minutes */
    assert_true(h_wait_until(all_idle, p, 8000));
}

static int some_busy(void *ctx) { return !all_idle(ctx); }

/* The same for a non-streamed call, which waits on the I/O loop: the
 * node's and the engine's calls are cancelled when the client leaves. */
static void client_disconnect_cancels_buffered_call(void **state)
{
    h_pool *p = *state;
    int fd = send_long_chat(p, 0);
    assert_true(fd >= 0);
    assert_true(h_wait_until(some_busy, p, 10000)); /* it is running */
    close(fd);
    assert_true(h_wait_until(all_idle, p, 8000));
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chat_without_stream),
        cmocka_unit_test(chat_stream_relays_events),
        cmocka_unit_test(stream_is_not_buffered),
        cmocka_unit_test(completions_embeddings_models),
        cmocka_unit_test(nodes_show_gpus_and_engines),
        cmocka_unit_test(twenty_concurrent_clients),
        cmocka_unit_test(client_disconnect_cancels_upstream),
        cmocka_unit_test(client_disconnect_cancels_buffered_call),
    };
    return cmocka_run_group_tests_name("e2e_proxy", tests, setup, h_pool_teardown);
}
