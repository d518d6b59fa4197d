/* e2e: conversation sessions and the pool embedder of the semantic cache.
 * A recording server in this process plays an external backend: it keeps
 * every body it receives and answers "reply-N" (N = the messages it was
 * sent) or, for the summary model, a fixed summary; so the test sees exactly
 * which history reached the engine. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "http/server.h"

#define MAX_BODIES 64

typedef struct recorder {
    pthread_mutex_t mu;
    char *bodies[MAX_BODIES];
    int n;
    http_server *srv;
} recorder;

static recorder rec;

static void rec_handle(http_req *req, void *app)
{
    recorder *r = app;
    size_t len;
    const char *raw = http_req_body(req, &len);
    pthread_mutex_lock(&r->mu);
    if (r->n < MAX_BODIES) r->bodies[r->n++] = strndup(raw ? raw : "", len);
    pthread_mutex_unlock(&r->mu);
    json_t *body = json_loadb(raw ? raw : "", len, 0, NULL);
    const char *model = json_string_value(json_object_get(body, "model"));
    if (!strcmp(http_req_path(req), "/v1/embeddings")) {
        http_respond_text(req, 200, "{\"object\":\"list\",\"data\":[{\"object\":\"embedding\",\"index\":0,"
                                    "\"embedding\":[0.6,0.8,0]}],\"model\":\"rec-embed\"}");
        json_decref(body);
        return;
    }
    char text[64];
    if (model && !strcmp(model, "rec-summary")) snprintf(text, sizeof text, "SUMMARY-TEXT");
    else snprintf(text, sizeof text, "reply-%zu", json_array_size(json_object_get(body, "messages")));
    char out[1024];
    if (json_is_true(json_object_get(body, "stream"))) {
        snprintf(out, sizeof out,
                 "data: {\"id\":\"r1\",\"object\":\"chat.completion.chunk\",\"model\":\"rec-chat\",\"choices\":[{"
                 "\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"%s\"},\"finish_reason\":null}]}\n\n"
                 "data: {\"id\":\"r1\",\"object\":\"chat.completion.chunk\",\"model\":\"rec-chat\",\"choices\":[{"
                 "\"index\":0,\"delta\":{\"content\":\"-streamed\"},\"finish_reason\":null}]}\n\n"
                 "data: {\"id\":\"r1\",\"object\":\"chat.completion.chunk\",\"model\":\"rec-chat\",\"choices\":[{"
                 "\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
                 text);
        http_respond(req, 200, "text/event-stream", out, strlen(out));
    } else {
        snprintf(out, sizeof out,
                 "{\"id\":\"r1\",\"object\":\"chat.completion\",\"model\":\"%s\",\"choices\":[{\"index\":0,"
                 "\"message\":{\"role\":\"assistant\",\"content\":\"%s\"},\"finish_reason\":\"stop\"}],"
                 "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6}}",
                 model ? model : "rec-chat", text);
        http_respond_text(req, 200, out);
    }
    json_decref(body);
}

static int rec_count(void)
{
    pthread_mutex_lock(&rec.mu);
    int n = rec.n;
    pthread_mutex_unlock(&rec.mu);
    return n;
}

/* The k-th recorded body, parsed (caller decrefs). */
static json_t *rec_body(int k)
{
    pthread_mutex_lock(&rec.mu);
    json_t *j = k < rec.n ? json_loads(rec.bodies[k], 0, NULL) : NULL;
    pthread_mutex_unlock(&rec.mu);
    return j;
}

/* A response header's value, "" when absent (so a missing one fails an
 * assertion instead of crashing the test). */
static const char *hdr(const h_resp *r, const char *name, char *out, size_t len)
{
    const char *v = h_header(r, name, out, len);
    return v ? v : "";
}

static const char *msg_field(const json_t *body, size_t i, const char *f)
{
    const char *v = json_string_value(json_object_get(json_array_get(json_object_get(body, "messages"), i), f));
    return v ? v : "";
}

/* Starts the coordinator with the recorder as backend "rec" (models
 * rec-chat, rec-summary, and sim-llama-8b when also_sim). */
static void start(h_pool *p, const char *extra, int also_sim)
{
    char args[1024];
    setenv("GPUPOOL_TEST_REC_KEY", "sk-rec", 1);
    snprintf(args, sizeof args,
             "--upstream-timeout-ms 5000 --queue-timeout-ms 3000 "
             "--cloud rec=http://127.0.0.1:%d,models=rec-chat|rec-summary|rec-embed%s,key-env=GPUPOOL_TEST_REC_KEY %s",
             http_server_port(rec.srv), also_sim ? "|sim-llama-8b" : "", extra ? extra : "");
    h_start_coordinator(p, args);
}

static int setup(void **state)
{
    memset(&rec, 0, sizeof rec);
    pthread_mutex_init(&rec.mu, NULL);
    char err[200];
    http_server_opts so = {.listen = "127.0.0.1:0", .handler = rec_handle, .app = &rec};
    rec.srv = http_server_start(&so, err, sizeof err);
    assert_non_null(rec.srv);
    *state = h_pool_new("sessions");
    return 0;
}

static int teardown(void **state)
{
    int rc = h_pool_teardown(state);
    http_server_stop(rec.srv);
    for (int k = 0; k < rec.n; k++) free(rec.bodies[k]);
    pthread_mutex_destroy(&rec.mu);
    return rc;
}

/* One user turn; returns the status, the answer's text in text. */
static long turn(h_pool *p, const char *key, const char *session_field, const char *content, const char *extra_header,
                 h_resp *out)
{
    char body[1024], auth[160];
    snprintf(body, sizeof body, "{\"model\":\"rec-chat\",%s\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
             session_field ? session_field : "", content);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", key ? key : "none");
    const char *hs[] = {auth, extra_header, NULL};
    h_request(p, "POST", "/v1/chat/completions", body, hs, out);
    return out->status;
}

static const char *answer_text(const h_resp *r)
{
    const char *v = json_string_value(json_object_get(
        json_object_get(json_array_get(json_object_get(r->json, "choices"), 0), "message"), "content"));
    return v ? v : "";
}

static int session_gone(void *ctx)
{
    h_resp r;
    h_request(ctx, "GET", "/v1/sessions/brief", NULL, NULL, &r);
    long st = r.status;
    h_resp_free(&r);
    return st == 404;
}

/* Three turns (the second streamed, the third named by header): the engine
 * sees the whole history each time, without session_id. */
static void three_turns_reach_the_engine_whole(void **state)
{
    h_pool *p = *state;
    start(p, NULL, 0);
    h_resp r;
    /* turn 1, with a system prompt */
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"rec-chat\",\"session_id\":\"conv-1\",\"messages\":[{\"role\":\"system\",\"content\":"
              "\"be brief\"},{\"role\":\"user\",\"content\":\"first question\"}]}",
              NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(answer_text(&r), "reply-2");
    char hv[64];
    assert_string_equal(hdr(&r, "X-Gpupool-Session", hv, sizeof hv), "conv-1");
    h_resp_free(&r);
    /* turn 2, streamed: only the new message */
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"rec-chat\",\"session_id\":\"conv-1\",\"stream\":true,\"messages\":[{\"role\":\"user\","
              "\"content\":\"second question\"}]}",
              NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(r.body);
    assert_non_null(strstr(r.body, "reply-4"));
    h_resp_free(&r);
    /* turn 3, the session named by header */
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"rec-chat\",\"messages\":[{\"role\":\"user\",\"content\":\"third question\"}]}",
              (const char *[]){"X-Gpupool-Session: conv-1", NULL}, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(answer_text(&r), "reply-6");
    h_resp_free(&r);

    assert_int_equal(rec_count(), 3);
    json_t *b = rec_body(2);
    assert_int_equal(json_array_size(json_object_get(b, "messages")), 6);
    assert_string_equal(msg_field(b, 0, "content"), "be brief");
    assert_string_equal(msg_field(b, 1, "content"), "first question");
    assert_string_equal(msg_field(b, 2, "content"), "reply-2");
    assert_string_equal(msg_field(b, 3, "content"), "second question");
    assert_string_equal(msg_field(b, 4, "content"), "reply-4-streamed");
    assert_string_equal(msg_field(b, 5, "content"), "third question");
    assert_null(json_object_get(b, "session_id"));
    json_decref(b);

    h_request(p, "GET", "/v1/sessions/conv-1", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(json_string_value(json_object_get(r.json, "object")), "session");
    assert_int_equal(json_array_size(json_object_get(r.json, "messages")), 6);
    assert_int_equal(json_array_size(json_object_get(r.json, "system")), 1);
    assert_true(json_integer_value(json_object_get(r.json, "tokens")) > 5);
    assert_false(json_is_true(json_object_get(r.json, "private")));
    assert_true(json_integer_value(json_object_get(r.json, "updated_at")) >=
                json_integer_value(json_object_get(r.json, "created_at")));
    h_resp_free(&r);

    h_request(p, "DELETE", "/v1/sessions/conv-1", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_true(json_is_true(json_object_get(r.json, "deleted")));
    h_resp_free(&r);
    h_request(p, "GET", "/v1/sessions/conv-1", NULL, NULL, &r);
    assert_int_equal(r.status, 404);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")),
                        "session_not_found");
    h_resp_free(&r);
    /* a bad id is refused before anything is sent */
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"rec-chat\",\"session_id\":\"no spaces\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
              NULL, &r);
    assert_int_equal(r.status, 400);
    h_resp_free(&r);
    assert_int_equal(rec_count(), 3);
}

/* At a small budget the oldest turns go, whole, and stay gone. */
static void a_small_budget_drops_the_oldest_turns(void **state)
{
    h_pool *p = *state;
    start(p, "--session-max-tokens 40", 0);
    const char *qs[] = {"aaaa aaaa aaaa aaaa aaaa aaaa aaaa", "bbbb bbbb bbbb bbbb bbbb bbbb bbbb",
                        "cccc cccc cccc cccc cccc cccc cccc", "dddd dddd dddd dddd dddd dddd dddd"};
    h_resp r;
    char dropped[16] = "";
    for (int i = 0; i < 4; i++) {
        assert_int_equal(turn(p, NULL, "\"session_id\":\"small\",", qs[i], NULL, &r), 200);
        if (i == 3) h_header(&r, "X-Gpupool-Session-Dropped", dropped, sizeof dropped);
        h_resp_free(&r);
    }
    /* each question ~9 tokens, each answer ~2: 40 hold the new one and two earlier turns */
    json_t *b = rec_body(3);
    size_t n = json_array_size(json_object_get(b, "messages"));
    assert_true(n >= 3 && n < 7);
    assert_string_equal(msg_field(b, n - 1, "content"), qs[3]);
    for (size_t i = 0; i < n; i++) assert_true(strcmp(msg_field(b, i, "content"), qs[0]) != 0);
    assert_string_equal(msg_field(b, 0, "role"), "user");
    json_decref(b);
    assert_true(atoi(dropped) >= 2);
    h_request(p, "GET", "/v1/sessions/small", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_array_size(json_object_get(r.json, "messages")), n + 1);
    assert_true(json_is_null(json_object_get(r.json, "summary")));
    h_resp_free(&r);
}

/* With a summary model, the dropped turns come back as a system note. */
static void summary_mode_asks_the_summary_model(void **state)
{
    h_pool *p = *state;
    start(p, "--session-max-tokens 48 --session-summary-model rec-summary --session-summary-max-tokens 8", 0);
    const char *qs[] = {"aaaa aaaa aaaa aaaa aaaa aaaa aaaa", "bbbb bbbb bbbb bbbb bbbb bbbb bbbb",
                        "cccc cccc cccc cccc cccc cccc cccc", "dddd dddd dddd dddd dddd dddd dddd"};
    h_resp r;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(turn(p, NULL, "\"session_id\":\"sum\",", qs[i], NULL, &r), 200);
        h_resp_free(&r);
    }
    int summaries = 0, last_chat = -1;
    for (int k = 0; k < rec_count(); k++) {
        json_t *b = rec_body(k);
        const char *model = json_string_value(json_object_get(b, "model"));
        if (!strcmp(model, "rec-summary")) {
            summaries++;
            /* it was asked about the first question */
            if (summaries == 1) assert_non_null(strstr(msg_field(b, 1, "content"), qs[0]));
        } else {
            last_chat = k;
        }
        json_decref(b);
    }
    assert_true(summaries >= 1);
    json_t *b = rec_body(last_chat);
    int noted = 0;
    for (size_t i = 0; i < json_array_size(json_object_get(b, "messages")); i++)
        noted |= !strcmp(msg_field(b, i, "role"), "system") && strstr(msg_field(b, i, "content"), "SUMMARY-TEXT");
    assert_true(noted);
    json_decref(b);
    h_request(p, "GET", "/v1/sessions/sum", NULL, NULL, &r);
    assert_string_equal(json_string_value(json_object_get(r.json, "summary")), "SUMMARY-TEXT");
    h_resp_free(&r);
}

/* A session belongs to its key: another key neither sees nor joins it. */
static void another_key_gets_404(void **state)
{
    h_pool *p = *state;
    start(p, "--api-key k-one --api-key k-two", 0);
    h_resp r;
    assert_int_equal(turn(p, "k-one", "\"session_id\":\"mine\",", "secret plan of one", NULL, &r), 200);
    h_resp_free(&r);
    const char *two[] = {"Authorization: Bearer k-two", NULL};
    h_request(p, "GET", "/v1/sessions/mine", NULL, two, &r);
    assert_int_equal(r.status, 404);
    h_resp_free(&r);
    h_request(p, "DELETE", "/v1/sessions/mine", NULL, two, &r);
    assert_int_equal(r.status, 404);
    h_resp_free(&r);
    /* the same id under the other key is another conversation */
    assert_int_equal(turn(p, "k-two", "\"session_id\":\"mine\",", "hello from two", NULL, &r), 200);
    assert_string_equal(answer_text(&r), "reply-1");
    h_resp_free(&r);
    const char *one[] = {"Authorization: Bearer k-one", NULL};
    h_request(p, "GET", "/v1/sessions/mine", NULL, one, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(msg_field(r.json, 0, "content"), "secret plan of one");
    h_resp_free(&r);
}

/* One private turn makes the session private for good: a later turn with
 * nothing sensitive in it still stays on trusted capacity. */
static void a_private_session_stays_private(void **state)
{
    h_pool *p = *state;
    /* a small budget with a summary model that both backends serve: the
     * private session's summaries must stay on the trusted node too */
    start(p, "--session-max-tokens 40 --session-summary-model sim-llama-8b", 1);
    h_start_worker(p, "desk", "--ttft-ms%205%20--tps%20400", NULL);
    h_resp r;
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"sim-llama-8b\",\"session_id\":\"priv\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\","
              "\"content\":\"the board minutes\"}]}",
              (const char *[]){"X-Gpupool-Sensitivity: private", NULL}, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    int before = rec_count();
    for (int i = 0; i < 6; i++) {
        h_request(p, "POST", "/v1/chat/completions",
                  "{\"model\":\"sim-llama-8b\",\"session_id\":\"priv\",\"max_tokens\":4,\"messages\":[{\"role\":"
                  "\"user\",\"content\":\"and the weather?\"}]}",
                  NULL, &r);
        assert_int_equal(r.status, 200);
        char route[128], sens[32];
        assert_true(strncmp(hdr(&r, "X-Gpupool-Route", route, sizeof route), "local", 5) == 0);
        assert_string_equal(hdr(&r, "X-Gpupool-Sensitivity", sens, sizeof sens), "private");
        h_resp_free(&r);
    }
    assert_int_equal(rec_count(), before);
    h_request(p, "GET", "/v1/sessions/priv", NULL, NULL, &r);
    assert_true(json_is_true(json_object_get(r.json, "private")));
    assert_string_equal(json_string_value(json_object_get(r.json, "private_rule")), "header");
    assert_true(json_array_size(json_object_get(r.json, "messages")) < 14);
    assert_true(json_is_string(json_object_get(r.json, "summary")));
    h_resp_free(&r);
}

/* A session expires its TTL after its last turn; the id then starts afresh. */
static void a_session_expires(void **state)
{
    h_pool *p = *state;
    start(p, "--session-ttl-s 1", 0);
    h_resp r;
    assert_int_equal(turn(p, NULL, "\"session_id\":\"brief\",", "hello", NULL, &r), 200);
    h_resp_free(&r);
    h_request(p, "GET", "/v1/sessions/brief", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_true(json_integer_value(json_object_get(r.json, "expires_at")) >
                json_integer_value(json_object_get(r.json, "updated_at")));
    h_resp_free(&r);
    assert_true(h_wait_until(session_gone, p, 5000));
    assert_int_equal(turn(p, NULL, "\"session_id\":\"brief\",", "hello again", NULL, &r), 200);
    assert_string_equal(answer_text(&r), "reply-1");
    h_resp_free(&r);
}

/* The cache with vectors from an embedding model of the pool: a repeat
 * hits; two sessions never share entries; an embedder that cannot answer
 * is a miss, not an error. */
static void the_pool_embedder_hits_on_a_repeat(void **state)
{
    h_pool *p = *state;
    start(p, "--cache on --cache-embedder pool:sim-llama-8b", 0);
    h_start_worker(p, "desk", "--ttft-ms%201%20--tps%200", NULL);
    h_resp r;
    char hv[32];
    const char *q = "{\"model\":\"rec-chat\",\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":"
                    "\"what is the capital of France\"}]}";
    h_request(p, "POST", "/v1/chat/completions", q, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(hdr(&r, "X-Gpupool-Cache", hv, sizeof hv), "miss");
    h_resp_free(&r);
    h_request(p, "POST", "/v1/chat/completions", q, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(hdr(&r, "X-Gpupool-Cache", hv, sizeof hv), "hit");
    h_resp_free(&r);
    assert_int_equal(rec_count(), 1);

    /* the same question in two sessions: each asks the engine */
    const char *s1 = "{\"model\":\"rec-chat\",\"temperature\":0,\"session_id\":\"s-a\",\"messages\":[{\"role\":"
                     "\"user\",\"content\":\"name a colour\"}]}";
    const char *s2 = "{\"model\":\"rec-chat\",\"temperature\":0,\"session_id\":\"s-b\",\"messages\":[{\"role\":"
                     "\"user\",\"content\":\"name a colour\"}]}";
    h_request(p, "POST", "/v1/chat/completions", s1, NULL, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    h_request(p, "POST", "/v1/chat/completions", s2, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(hdr(&r, "X-Gpupool-Cache", hv, sizeof hv), "miss");
    h_resp_free(&r);
    assert_int_equal(rec_count(), 3);
    /* a session started afresh under the same id meets its own first turn
     * in the cache; the hit is stored as the turn */
    h_request(p, "DELETE", "/v1/sessions/s-a", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    h_request(p, "POST", "/v1/chat/completions", s1, NULL, &r);
    assert_string_equal(hdr(&r, "X-Gpupool-Cache", hv, sizeof hv), "hit");
    h_resp_free(&r);
    assert_int_equal(rec_count(), 3);
    h_request(p, "GET", "/v1/sessions/s-a", NULL, NULL, &r);
    assert_int_equal(json_array_size(json_object_get(r.json, "messages")), 2);
    assert_string_equal(msg_field(r.json, 1, "content"), "reply-1");
    h_resp_free(&r);
}

/* A private request's text is embedded on trusted capacity only: with the
 * embedding model only on the external backend, its lookup is a miss and
 * the backend never sees it; an ordinary request's text does go there. */
static void a_private_lookup_never_embeds_externally(void **state)
{
    h_pool *p = *state;
    start(p, "--cache on --cache-embedder pool:rec-embed", 0);
    h_start_worker(p, "desk", "--ttft-ms%201%20--tps%200", NULL);
    h_resp r;
    char hv[32];
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"sim-llama-8b\",\"temperature\":0,\"max_tokens\":3,\"messages\":[{\"role\":\"user\","
              "\"content\":\"the board minutes\"}]}",
              (const char *[]){"X-Gpupool-Sensitivity: private", NULL}, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(hdr(&r, "X-Gpupool-Cache", hv, sizeof hv), "miss");
    h_resp_free(&r);
    assert_int_equal(rec_count(), 0);
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"sim-llama-8b\",\"temperature\":0,\"max_tokens\":3,\"messages\":[{\"role\":\"user\","
              "\"content\":\"the lunch menu\"}]}",
              NULL, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    assert_true(rec_count() >= 1);
    json_t *b = rec_body(0);
    assert_string_equal(json_string_value(json_object_get(b, "input")), "the lunch menu");
    json_decref(b);
}

static void an_absent_embedder_is_a_miss(void **state)
{
    h_pool *p = *state;
    start(p, "--cache on --cache-embedder pool:no-such-embedder", 0);
    h_resp r;
    char hv[32];
    const char *q = "{\"model\":\"rec-chat\",\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    for (int i = 0; i < 2; i++) {
        h_request(p, "POST", "/v1/chat/completions", q, NULL, &r);
        assert_int_equal(r.status, 200);
        assert_string_equal(hdr(&r, "X-Gpupool-Cache", hv, sizeof hv), "miss");
        h_resp_free(&r);
    }
    assert_int_equal(rec_count(), 2);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(three_turns_reach_the_engine_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(a_small_budget_drops_the_oldest_turns, setup, teardown),
        cmocka_unit_test_setup_teardown(summary_mode_asks_the_summary_model, setup, teardown),
        cmocka_unit_test_setup_teardown(another_key_gets_404, setup, teardown),
        cmocka_unit_test_setup_teardown(a_private_session_stays_private, setup, teardown),
        cmocka_unit_test_setup_teardown(a_session_expires, setup, teardown),
        cmocka_unit_test_setup_teardown(the_pool_embedder_hits_on_a_repeat, setup, teardown),
        cmocka_unit_test_setup_teardown(a_private_lookup_never_embeds_externally, setup, teardown),
        cmocka_unit_test_setup_teardown(an_absent_embedder_is_a_miss, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
