/* e2e: the two-track router.  A sim engine plays the cloud backend (with
 * prices), a worker with a sim engine is the local pool.  Model "auto" goes
 * to the cloud when the request is complex and stays local when simple;
 * past the soft threshold of a key's budget non-urgent requests stay local
 * and urgent ones still go; at the hard cap everything runs locally, and the
 * pool still serves; another key's budget is its own; the spend survives a
 * restart.  Every answer says its route and why.  Then the fallback hops: a
 * failing cloud hands the request to the local model, and a pool without the
 * local model hands it to the cloud. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define KEY1 "Authorization: Bearer key-one-secret"
#define KEY2 "Authorization: Bearer key-two-secret"

typedef struct answer {
    long status;
    char route[200];
    char node[64];
    char model[64];
} answer;

/* One chat completion for model auto: text, max_tokens and extra headers. */
static answer ask(h_pool *p, const char *key, const char *text, int max_tokens, const char *h1, const char *h2)
{
    char body[4096];
    snprintf(body, sizeof body,
             "{\"model\":\"auto\",\"max_tokens\":%d,\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
             max_tokens, text);
    const char *headers[4] = {NULL};
    int n = 0;
    if (key) headers[n++] = key;
    if (h1) headers[n++] = h1;
    if (h2) headers[n++] = h2;
    h_resp r;
    h_request(p, "POST", "/v1/chat/completions", body, headers, &r);
    answer a = {.status = r.status};
    h_header(&r, "X-Gpupool-Route", a.route, sizeof a.route);
    h_header(&r, "X-Gpupool-Node", a.node, sizeof a.node);
    const char *m = json_string_value(json_object_get(r.json, "model"));
    snprintf(a.model, sizeof a.model, "%s", m ? m : "");
    if (r.status != 200) print_message("answer %ld: %.*s\n", r.status, (int)r.len, r.body ? r.body : "");
    h_resp_free(&r);
    return a;
}

/* The key's budget as GET /v1/budget has it (caller decrefs). */
static json_t *budget_of(h_pool *p, const char *key)
{
    const char *headers[] = {key, NULL};
    h_resp r;
    h_request(p, "GET", "/v1/budget", NULL, key ? headers : NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *j = json_incref(r.json);
    h_resp_free(&r);
    return j;
}

static const char *level_of(h_pool *p, const char *key, char *out, size_t len)
{
    json_t *j = budget_of(p, key);
    snprintf(out, len, "%s", json_string_value(json_object_get(j, "level")));
    json_decref(j);
    return out;
}

typedef struct charged_ctx { h_pool *p; const char *key; json_int_t tokens; } charged_ctx;
static int charged_more(void *ctx)
{
    charged_ctx *c = ctx;
    json_t *j = budget_of(c->p, c->key);
    int more = json_integer_value(json_object_get(json_object_get(j, "used"), "tokens_today")) > c->tokens;
    json_decref(j);
    return more;
}

static h_proc *start_cloud(h_pool *p, const char *extra)
{
    char args[256];
    snprintf(args, sizeof args, "sim-engine --listen 127.0.0.1:0 --model gpt-sim --ttft-ms 0 --tps 0 %s",
             extra ? extra : "");
    h_proc *cloud = h_spawn(p, "cloud", args, NULL);
    h_wait_port(cloud, 20000);
    setenv("GPUPOOL_TEST_CLOUD_KEY", "sk-cloud-test", 1);
    return cloud;
}

static int prefix(const char *s, const char *pre) { return !strncmp(s, pre, strlen(pre)); }

static void routes_and_budget_degrade(void **state)
{
    h_pool *p = *state;
    h_proc *cloud = start_cloud(p, NULL);
    char args[1024];
    /* 400 tokens a day, soft from half of it; each cloud answer here is about
     * 35 tokens (a few of prompt, 30 of completion) */
    snprintf(args, sizeof args,
             "--api-key key-one-secret --api-key key-two-secret "
             "--cloud acme=http://127.0.0.1:%d,models=gpt-sim,key-env=GPUPOOL_TEST_CLOUD_KEY,price-in=1000,price-out=2000 "
             "--auto-local sim-llama-8b --auto-cloud gpt-sim --track-rule prompt-tokens=100 --track-rule keyword=prove "
             "--budget default:tokens-day=400,soft=0.5",
             cloud->port);
    h_start_coordinator(p, args);
    snprintf(p->api_key, sizeof p->api_key, "key-one-secret");
    h_start_worker(p, "desk", "--ttft-ms%200%20--tps%200", NULL);

    /* the alias is listed with what it stands for */
    h_resp mr;
    h_request(p, "GET", "/v1/models", NULL, NULL, &mr);
    assert_int_equal(mr.status, 200);
    json_t *models = json_object_get(mr.json, "data"), *m;
    size_t mi;
    int listed = 0;
    json_array_foreach(models, mi, m) if (!strcmp(json_string_value(json_object_get(m, "id")), "auto")) {
        listed = 1;
        assert_string_equal(json_string_value(json_object_get(json_object_get(m, "resolves_to"), "cloud")), "gpt-sim");
    }
    assert_true(listed);
    h_resp_free(&mr);

    /* simple stays local, complex goes to the cloud, both say why */
    answer a = ask(p, KEY1, "hello there", 4, NULL, NULL);
    assert_int_equal(a.status, 200);
    assert_string_equal(a.route, "local; reason=simple");
    assert_false(prefix(a.node, "cloud-"));
    a = ask(p, KEY1, "please prove the lemma", 30, NULL, NULL);
    assert_int_equal(a.status, 200);
    assert_string_equal(a.route, "cloud; reason=complex (keyword 'prove')");
    assert_string_equal(a.node, "cloud-acme");
    assert_string_equal(a.model, "gpt-sim");
    /* a long prompt is complex too */
    char longtext[2400];
    memset(longtext, 0, sizeof longtext);
    for (int i = 0; i < 150; i++) memcpy(longtext + i * 5, "word ", 5);
    a = ask(p, KEY2, longtext, 5, NULL, NULL);
    assert_int_equal(a.status, 200);
    assert_true(prefix(a.route, "cloud; reason=complex (prompt_tokens "));
    /* a stream to the cloud is charged too (its events, without usage) */
    json_t *before = budget_of(p, KEY2);
    const char *k2[] = {KEY2, NULL};
    h_resp sr;
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"auto\",\"stream\":true,\"max_tokens\":6,\"messages\":[{\"role\":\"user\",\"content\":"
              "\"prove it\"}]}",
              k2, &sr);
    assert_int_equal(sr.status, 200);
    char sroute[128];
    assert_string_equal(h_header(&sr, "X-Gpupool-Route", sroute, sizeof sroute), "cloud; reason=complex (keyword 'prove')");
    assert_non_null(strstr(sr.body, "[DONE]"));
    h_resp_free(&sr);
    /* charged when the relay ends, which may be just after the client saw [DONE] */
    charged_ctx cc = {p, KEY2, json_integer_value(json_object_get(json_object_get(before, "used"), "tokens_today"))};
    assert_true(h_wait_until(charged_more, &cc, 5000));
    json_t *after = budget_of(p, KEY2);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(after, "used"), "requests_today")), 2);
    json_decref(before);
    json_decref(after);
    /* the header chooses over the rules */
    a = ask(p, KEY1, "please prove it", 4, "X-Gpupool-Track: local", NULL);
    assert_string_equal(a.route, "local; reason=header (X-Gpupool-Track: local)");

    /* the cloud's usage was charged, at its prices */
    json_t *b = budget_of(p, KEY1);
    json_t *used = json_object_get(b, "used");
    json_int_t tokens = json_integer_value(json_object_get(used, "tokens_today"));
    assert_true(tokens >= 30 && tokens < 60);
    assert_int_equal(json_integer_value(json_object_get(used, "requests_today")), 1);
    double cost = json_real_value(json_object_get(used, "cost_today"));
    assert_true(cost > tokens * 1000 / 1e6 && cost <= tokens * 2000 / 1e6 + 1e-9);
    assert_string_equal(json_string_value(json_object_get(b, "level")), "ok");
    json_decref(b);

    /* urgent complex requests go to the cloud until the soft threshold */
    char level[16];
    int sent = 0;
    while (strcmp(level_of(p, KEY1, level, sizeof level), "soft") && sent++ < 12) {
        a = ask(p, KEY1, "prove this", 30, "X-Gpupool-Urgency: urgent", NULL);
        assert_int_equal(a.status, 200);
        assert_true(prefix(a.route, "cloud; reason=complex"));
    }
    assert_string_equal(level, "soft");
    /* past it: the non-urgent one stays local, the urgent one still goes */
    a = ask(p, KEY1, "prove this", 30, NULL, NULL);
    assert_int_equal(a.status, 200);
    assert_true(prefix(a.route, "local; reason=budget soft threshold (tokens-day at "));
    assert_false(prefix(a.node, "cloud-"));
    assert_string_equal(a.model, "sim-llama-8b");
    a = ask(p, KEY1, "prove this", 30, "X-Gpupool-Priority: 9", NULL); /* urgent by priority */
    assert_int_equal(a.status, 200);
    assert_true(prefix(a.route, "cloud; reason=complex"));

    /* urgent ones until the hard cap; then everything runs locally */
    sent = 0;
    while (strcmp(level_of(p, KEY1, level, sizeof level), "hard") && sent++ < 12) {
        a = ask(p, KEY1, "prove this", 30, "X-Gpupool-Urgency: urgent", NULL);
        assert_true(prefix(a.route, "cloud; reason=complex"));
    }
    assert_string_equal(level, "hard");
    a = ask(p, KEY1, "prove this", 30, "X-Gpupool-Urgency: urgent", "X-Gpupool-Track: cloud");
    assert_int_equal(a.status, 200);
    assert_true(prefix(a.route, "local; reason=budget hard cap (tokens-day at "));
    assert_false(prefix(a.node, "cloud-"));
    /* local capacity is not limited by the cloud budget */
    for (int i = 0; i < 3; i++) {
        a = ask(p, KEY1, "hello again", 4, NULL, NULL);
        assert_int_equal(a.status, 200);
        assert_string_equal(a.route, "local; reason=simple");
    }
    /* an explicit local model is answered as ever */
    h_resp r;
    const char *k1[] = {KEY1, NULL};
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"sim-llama-8b\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"prove\"}]}",
              k1, &r);
    assert_int_equal(r.status, 200);
    char route[128];
    assert_string_equal(h_header(&r, "X-Gpupool-Route", route, sizeof route), "local; reason=pool");
    h_resp_free(&r);
    /* the other key has its own budget */
    a = ask(p, KEY2, "prove this", 5, NULL, NULL);
    assert_true(prefix(a.route, "cloud; reason=complex"));
    /* a bad header is refused */
    a = ask(p, KEY1, "x", 3, "X-Gpupool-Track: moon", NULL);
    assert_int_equal(a.status, 400);

    /* /metrics shows routes and budgets */
    h_request(p, "GET", "/metrics", NULL, NULL, &r);
    assert_non_null(strstr(r.body, "gpupool_route_total{track=\"cloud\",reason=\"complex\"}"));
    assert_non_null(strstr(r.body, "gpupool_route_total{track=\"local\",reason=\"budget_hard\"} 1"));
    assert_non_null(strstr(r.body, "gpupool_budget_level{key=\"key-"));
    h_resp_free(&r);

    /* a restart keeps the day's spend */
    b = budget_of(p, KEY1);
    tokens = json_integer_value(json_object_get(json_object_get(b, "used"), "tokens_today"));
    json_decref(b);
    h_kill(p->coord, SIGTERM);
    assert_int_equal(h_wait_exit(p->coord, 10000), 0);
    h_restart_coordinator(p);
    b = budget_of(p, KEY1);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(b, "used"), "tokens_today")), tokens);
    assert_string_equal(json_string_value(json_object_get(b, "level")), "hard");
    json_decref(b);
}

static int node_count_ready(void *ctx) { return h_node_count(ctx, "ready") >= 1; }

static void fallback_hops(void **state)
{
    h_pool *p = *state;
    /* a cloud that fails every request */
    h_proc *cloud = start_cloud(p, "--error-rate 1");
    char args[1024];
    snprintf(args, sizeof args,
             "--cloud acme=http://127.0.0.1:%d,models=gpt-sim,key-env=GPUPOOL_TEST_CLOUD_KEY "
             "--auto-local sim-llama-8b --auto-cloud gpt-sim --track-rule max-tokens=100 "
             "--budget default:rpm=100",
             cloud->port);
    h_start_coordinator(p, args);
    h_start_worker(p, "desk", "--ttft-ms%200%20--tps%200", NULL);
    assert_true(h_wait_until(node_count_ready, p, 10000));
    answer a = ask(p, NULL, "write a long essay", 200, NULL, NULL);
    assert_int_equal(a.status, 200);
    assert_true(prefix(a.route, "local; reason=fallback (the cloud failed; was complex (max_tokens 200 >= 100))"));
    assert_false(prefix(a.node, "cloud-"));
    /* the cloud was asked once, and charged one request */
    json_t *b = budget_of(p, NULL);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(b, "used"), "requests_today")), 1);
    json_decref(b);
    /* a private request never tries the cloud, whatever it asks */
    a = ask(p, NULL, "mail zhang.san@example.com a long essay", 200, "X-Gpupool-Track: cloud", NULL);
    assert_int_equal(a.status, 200);
    assert_string_equal(a.route, "local; reason=private (email)");
    b = budget_of(p, NULL);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(b, "used"), "requests_today")), 1);
    json_decref(b);
}

static void local_missing_falls_back_to_cloud(void **state)
{
    h_pool *p = *state;
    h_proc *cloud = start_cloud(p, NULL);
    char args[1024];
    /* the local model is served by no node: simple requests go out */
    snprintf(args, sizeof args,
             "--cloud acme=http://127.0.0.1:%d,models=gpt-sim,key-env=GPUPOOL_TEST_CLOUD_KEY "
             "--auto-local nobody-serves-this --auto-cloud gpt-sim --queue-timeout-ms 1000 "
             "--budget default:rpm=2,soft=1",
             cloud->port);
    h_start_coordinator(p, args);
    answer a = ask(p, NULL, "hello", 4, NULL, NULL);
    assert_int_equal(a.status, 200);
    assert_string_equal(a.route, "cloud; reason=fallback (local capacity failed; was simple)");
    assert_string_equal(a.node, "cloud-acme");
    a = ask(p, NULL, "hello", 4, NULL, NULL);
    assert_int_equal(a.status, 200);
    /* two a minute: the third has nowhere to go and says so */
    a = ask(p, NULL, "hello", 4, NULL, NULL);
    assert_int_equal(a.status / 100, 5);
    assert_non_null(strstr(a.route, "; reason=")); /* errors say where it was headed too */
    /* a private one is not sent anywhere */
    a = ask(p, NULL, "call 13812345678", 4, NULL, NULL);
    assert_int_equal(a.status, 503);
    assert_string_equal(a.route, "local; reason=private (cn_mobile)");
}

static int setup(void **state)
{
    *state = h_pool_new("track");
    return 0;
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(routes_and_budget_degrade, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(fallback_hops, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(local_missing_falls_back_to_cloud, setup, h_pool_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
