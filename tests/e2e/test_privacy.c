/* e2e: private requests never leave trusted capacity.  A recording server in
 * this process plays the cloud backend and keeps every body it receives.
 * Sensitive and ordinary requests are mixed at random while the trusted nodes
 * fail, hang, and are killed or frozen; afterwards the cloud's record must
 * hold no sensitive request, and every sensitive request either succeeded on
 * a trusted node or failed with a documented error. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "http/server.h"

#define REQUESTS 90
#define THREADS 3

/* ---- the "cloud": answers like an OpenAI server and records every body ---- */

typedef struct cloud {
    pthread_mutex_t mu;
    char *bodies[REQUESTS * 4];
    int n;
    http_server *srv;
} cloud;

static void cloud_handle(http_req *req, void *app)
{
    cloud *c = app;
    size_t len;
    const char *body = http_req_body(req, &len);
    pthread_mutex_lock(&c->mu);
    if (c->n < (int)(sizeof c->bodies / sizeof c->bodies[0])) c->bodies[c->n++] = strndup(body ? body : "", len);
    pthread_mutex_unlock(&c->mu);
    if (!strcmp(http_req_path(req), "/v1/chat/completions"))
        http_respond_text(req, 200,
                          "{\"id\":\"cloud-1\",\"object\":\"chat.completion\",\"model\":\"sim-llama-8b\",\"choices\":"
                          "[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"from the cloud\"},"
                          "\"finish_reason\":\"stop\"}]}");
    else
        http_respond_text(req, 404, "{\"error\":{\"message\":\"no\",\"type\":\"invalid_request_error\"}}");
}

/* ---- the mix ---- */

typedef struct sent {
    int sensitive;
    char marker[64];   /* what only this request's text contains */
    long status;
    char route[128];
    char node[64];
    char code[64];
} sent;

typedef struct run {
    h_pool *p;
    sent reqs[REQUESTS];
    int next;
    pthread_mutex_t mu;
} run;

/* Sensitive payloads of each kind the detectors know, each made unique. */
static void make_body(int i, int sensitive, char *body, size_t len, char *marker, size_t mlen)
{
    static const char *kinds[] = {"mobile", "id", "card", "email", "keyword"};
    const char *kind = kinds[i % 5];
    char text[160];
    if (!sensitive) {
        snprintf(marker, mlen, "ordinary-%d", i);
        snprintf(text, sizeof text, "please summarise item %s", marker);
    } else if (!strcmp(kind, "mobile")) {
        snprintf(marker, mlen, "138%08d", 10000000 + i);
        snprintf(text, sizeof text, "my number is %s, call me", marker);
    } else if (!strcmp(kind, "id")) {
        snprintf(marker, mlen, "11010519491231002X"); /* a valid check digit */
        snprintf(text, sizeof text, "身份证号 %s 第%d条", marker, i);
    } else if (!strcmp(kind, "card")) {
        snprintf(marker, mlen, "4111111111111111");
        snprintf(text, sizeof text, "card %s request %d", marker, i);
    } else if (!strcmp(kind, "email")) {
        snprintf(marker, mlen, "person%d@example.com", i);
        snprintf(text, sizeof text, "mail %s about it", marker);
    } else {
        snprintf(marker, mlen, "蓝鲸计划-%d", i);
        snprintf(text, sizeof text, "关于%s的汇报", marker);
    }
    snprintf(body, len, "{\"model\":\"sim-llama-8b\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
             text);
}

static void *client(void *arg)
{
    run *r = arg;
    unsigned seed = 0;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int i = r->next++;
        pthread_mutex_unlock(&r->mu);
        if (i >= REQUESTS) break;
        seed = (unsigned)i * 2654435761u;
        sent *s = &r->reqs[i];
        s->sensitive = (seed >> 7) % 2;
        char body[512];
        make_body(i, s->sensitive, body, sizeof body, s->marker, sizeof s->marker);
        h_resp resp;
        h_request(r->p, "POST", "/v1/chat/completions", body, NULL, &resp);
        s->status = resp.status;
        h_header(&resp, "X-Gpupool-Route", s->route, sizeof s->route);
        h_header(&resp, "X-Gpupool-Node", s->node, sizeof s->node);
        const char *code = json_string_value(json_object_get(json_object_get(resp.json, "error"), "code"));
        snprintf(s->code, sizeof s->code, "%s", code ? code : "");
        h_resp_free(&resp);
    }
    return NULL;
}

static int progress_at(run *r, int n)
{
    pthread_mutex_lock(&r->mu);
    int done = r->next >= n;
    pthread_mutex_unlock(&r->mu);
    return done;
}

typedef struct at_ctx { run *r; int n; } at_ctx;
static int reached(void *ctx) { at_ctx *a = ctx; return progress_at(a->r, a->n); }

static int node_offline(void *ctx)
{
    h_pool *p = ((void **)ctx)[0];
    const char *name = ((void **)ctx)[1];
    char st[32];
    h_node_field(p, "name", name, "state", st, sizeof st);
    return !strcmp(st, "offline");
}

static void private_requests_never_reach_the_cloud(void **state)
{
    h_pool *p = *state;
    cloud cl = {.n = 0};
    pthread_mutex_init(&cl.mu, NULL);
    char err[200];
    http_server_opts so = {.listen = "127.0.0.1:0", .handler = cloud_handle, .app = &cl};
    cl.srv = http_server_start(&so, err, sizeof err);
    assert_non_null(cl.srv);
    char args[512];
    setenv("GPUPOOL_TEST_CLOUD_KEY", "sk-cloud-test", 1);
    snprintf(args, sizeof args,
             "--upstream-timeout-ms 1500 --queue-timeout-ms 3000 --privacy-keyword 蓝鲸计划 "
             "--cloud acme=http://127.0.0.1:%d,models=sim-llama-8b,key-env=GPUPOOL_TEST_CLOUD_KEY",
             http_server_port(cl.srv));
    h_start_coordinator(p, args);
    /* trusted nodes that fail and hang now and then */
    h_proc *a = h_start_worker(p, "flaky", "--ttft-ms%205%20--tps%20400%20--error-rate%200.3", NULL);
    h_proc *b = h_start_worker(p, "hangs", "--ttft-ms%205%20--tps%20400%20--hang-rate%200.2", NULL);
    h_proc *c = h_start_worker(p, "steady", "--ttft-ms%205%20--tps%20400", NULL);

    run r = {.p = p};
    pthread_mutex_init(&r.mu, NULL);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, client, &r);
    at_ctx at = {&r, 20};
    assert_true(h_wait_until(reached, &at, 60000));
    h_kill(a, SIGKILL);
    h_wait_exit(a, 5000);
    at.n = 40;
    assert_true(h_wait_until(reached, &at, 60000));
    h_kill(b, SIGSTOP);
    at.n = 55;
    assert_true(h_wait_until(reached, &at, 60000));
    /* the last trusted node goes too: ordinary work now has only the cloud */
    h_kill(c, SIGKILL);
    h_wait_exit(c, 5000);
    void *oc[] = {p, "steady"};
    assert_true(h_wait_until(node_offline, oc, 10000));
    void *ob[] = {p, "hangs"};
    assert_true(h_wait_until(node_offline, ob, 10000));
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);

    int sensitive = 0, sensitive_ok = 0, ordinary_cloud = 0;
    for (int i = 0; i < REQUESTS; i++) {
        sent *s = &r.reqs[i];
        if (!s->sensitive) {
            ordinary_cloud += s->status == 200 && !strncmp(s->route, "cloud", 5);
            continue;
        }
        sensitive++;
        if (s->route[0]) {
            /* answered by a node (200, or the engine's own error): a trusted one */
            if (strncmp(s->route, "local", 5) || !strncmp(s->node, "cloud-", 6))
                fail_msg("sensitive request %d went to %s (%s)", i, s->node, s->route);
            sensitive_ok += s->status == 200;
        } else if (strcmp(s->code, "no_capacity") && strcmp(s->code, "no_node_answered") &&
                   strcmp(s->code, "no_trusted_capacity")) {
            /* or refused with one of the documented errors, never served elsewhere */
            fail_msg("sensitive request %d: status %ld code '%s'", i, s->status, s->code);
        }
    }
    /* the cloud's record: ordinary requests only */
    pthread_mutex_lock(&cl.mu);
    int cloud_seen = cl.n;
    for (int k = 0; k < cl.n; k++)
        for (int i = 0; i < REQUESTS; i++)
            if (r.reqs[i].sensitive && strstr(cl.bodies[k], r.reqs[i].marker))
                fail_msg("the cloud received sensitive request %d: %s", i, cl.bodies[k]);
    pthread_mutex_unlock(&cl.mu);
    /* the test means something: both kinds were sent, the cloud was used, and
     * sensitive work was served while trusted nodes lived */
    assert_true(sensitive >= 20 && sensitive <= REQUESTS - 20);
    assert_true(sensitive_ok >= 5);
    assert_true(cloud_seen >= 1);
    assert_true(ordinary_cloud >= 1);

    /* a private request with no trusted node left fails clearly, and fast */
    h_resp resp;
    h_request(p, "POST", "/v1/chat/completions",
              "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
              (const char *[]){"X-Gpupool-Sensitivity: private", NULL}, &resp);
    assert_int_equal(resp.status / 100, 5);
    assert_int_equal(cl.n, cloud_seen);
    h_resp_free(&resp);
    h_kill(b, SIGCONT);

    http_server_stop(cl.srv);
    for (int k = 0; k < cl.n; k++) free(cl.bodies[k]);
    pthread_mutex_destroy(&cl.mu);
    pthread_mutex_destroy(&r.mu);
}

/* A private task records why it is private and where it ran; a task for a
 * model only the cloud serves is refused if private. */
static void private_task_route_record(void **state)
{
    h_pool *p = *state;
    setenv("GPUPOOL_TEST_CLOUD_KEY", "sk-cloud-test", 1);
    h_start_coordinator(p, "--cloud acme=http://127.0.0.1:9,models=cloud-only,key-env=GPUPOOL_TEST_CLOUD_KEY");
    h_start_worker(p, "desk", "--ttft-ms%205%20--tps%20400", NULL);
    long st;
    char *id = h_submit_task(p,
                             "{\"type\":\"chat\",\"model\":\"sim-llama-8b\",\"input\":{\"messages\":[{\"role\":"
                             "\"user\",\"content\":\"write to zhang.san@example.com\"}],\"max_tokens\":3}}",
                             NULL, &st);
    assert_int_equal(st, 202);
    json_t *t = h_wait_task_final(p, id, 20000);
    assert_non_null(t);
    json_t *route = json_object_get(t, "route");
    assert_string_equal(json_string_value(json_object_get(route, "sensitivity")), "private");
    assert_string_equal(json_string_value(json_object_get(route, "rule")), "email");
    assert_true(json_array_size(json_object_get(route, "nodes")) >= 1);
    assert_true(strncmp(json_string_value(json_array_get(json_object_get(route, "nodes"), 0)), "cloud-", 6) != 0);
    json_decref(t);
    free(id);
    h_resp r;
    h_request(p, "POST", "/v1/tasks",
              "{\"type\":\"chat\",\"model\":\"cloud-only\",\"input\":{\"messages\":[{\"role\":\"user\",\"content\":"
              "\"13812345678\"}]}}",
              NULL, &r);
    assert_int_equal(r.status, 503);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")),
                        "no_trusted_capacity");
    h_resp_free(&r);
    h_request(p, "POST", "/v1/chat/completions", "{\"model\":\"sim-llama-8b\",\"messages\":[]}",
              (const char *[]){"X-Gpupool-Sensitivity: secret", NULL}, &r);
    assert_int_equal(r.status, 400);
    h_resp_free(&r);
}

static int setup(void **state)
{
    *state = h_pool_new("privacy");
    return 0;
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(private_requests_never_reach_the_cloud, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(private_task_route_record, setup, h_pool_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
