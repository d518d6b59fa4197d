/* e2e: the semantic cache in the chat path.  One coordinator with --cache on
 * and one simulated worker.  A hit must be answered while the worker's
 * engine is frozen (so it cannot have reached it); the partitions and trust
 * tiers, the skip rules, the SSE replay, invalidation and the metrics are
 * checked over HTTP as a client sees them. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define CAPITAL "What is the capital of France?"

typedef struct cache_pool {
    h_pool *p;
    h_proc *worker;
} cache_pool;

static int node_full(void *ctx)
{
    h_resp r;
    int busy = 0;
    if (!h_request(ctx, "GET", "/v1/nodes", NULL, NULL, &r))
        busy = (int)json_integer_value(json_object_get(json_array_get(json_object_get(r.json, "data"), 0), "inflight"));
    h_resp_free(&r);
    return busy >= 2;
}

static int one_ready(void *ctx) { return h_node_count(ctx, "ready") >= 1; }

static int setup(void **state)
{
    cache_pool *cp = calloc(1, sizeof *cp);
    cp->p = h_pool_new("cache");
    /* A frozen engine must not hang a miss for long. */
    h_start_coordinator(cp->p, "--cache on --upstream-timeout-ms 3000 --max-attempts 1");
    cp->worker = h_start_worker(cp->p, "machine-a", "--ttft-ms%2010%20--tps%20500%20--slots%202", NULL);
    *state = cp;
    return 0;
}

/* A pool with no processes yet, for a test that starts its own. */
static int setup_bare(void **state)
{
    cache_pool *cp = calloc(1, sizeof *cp);
    cp->p = h_pool_new("cache-keys");
    *state = cp;
    return 0;
}

static int teardown(void **state)
{
    cache_pool *cp = *state;
    void *p = cp->p;
    free(cp);
    return h_pool_teardown(&p);
}

/* A chat body: earlier turns (NULL or "user|assistant|" pairs), the
 * question, temperature, stream. */
static char *chat(const char *earlier, const char *question, double temperature, int stream)
{
    json_t *msgs = json_array();
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", "You answer briefly."));
    if (earlier) {
        char *copy = strdup(earlier), *save = NULL;
        int i = 0;
        for (char *t = strtok_r(copy, "|", &save); t; t = strtok_r(NULL, "|", &save), i++)
            json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", i % 2 ? "assistant" : "user", "content", t));
        free(copy);
    }
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", question));
    json_t *b = json_pack("{s:s, s:o, s:i, s:f, s:b}", "model", "sim-llama-8b", "messages", msgs, "max_tokens", 6,
                          "temperature", temperature, "stream", stream);
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return text;
}

typedef struct answer {
    long status;
    char cache[32];   /* X-Gpupool-Cache, "" when absent */
    char route[128];
    char node[64];
    char ctype[64];
    char *content;    /* the first choice's content (non-stream) or the body (stream) */
} answer;

static void answer_free(answer *a) { free(a->content); }

static answer ask(h_pool *p, const char *body, const char *const *headers)
{
    answer a = {0};
    h_resp r;
    assert_int_equal(h_request(p, "POST", "/v1/chat/completions", body, headers, &r), 0);
    a.status = r.status;
    h_header(&r, "X-Gpupool-Cache", a.cache, sizeof a.cache);
    h_header(&r, "X-Gpupool-Route", a.route, sizeof a.route);
    h_header(&r, "X-Gpupool-Node", a.node, sizeof a.node);
    h_header(&r, "Content-Type", a.ctype, sizeof a.ctype);
    const char *c = json_string_value(
        json_object_get(json_object_get(json_array_get(json_object_get(r.json, "choices"), 0), "message"), "content"));
    a.content = strdup(c ? c : r.body ? r.body : "");
    h_resp_free(&r);
    return a;
}

/* A counter from /metrics, or -1 when absent. */
static double metric(h_pool *p, const char *name)
{
    h_resp r;
    if (h_request(p, "GET", "/metrics", NULL, NULL, &r) || r.status != 200) { h_resp_free(&r); return -1; }
    char pat[128];
    snprintf(pat, sizeof pat, "\n%s ", name);
    const char *at = r.body ? strstr(r.body, pat) : NULL;
    double v = at ? atof(at + strlen(pat)) : -1;
    h_resp_free(&r);
    return v;
}

typedef struct inserts_ctx { h_pool *p; double want; } inserts_ctx;
static int inserts_reached(void *arg)
{
    inserts_ctx *c = arg;
    return metric(c->p, "gpupool_cache_inserts_total") >= c->want;
}

/* A miss that must be stored before the next step: a stream's answer is
 * stored when its relay ends, which may come after the client saw [DONE]. */
static void expect_stored(h_pool *p, double before)
{
    inserts_ctx c = {p, before + 1};
    assert_true(h_wait_until(inserts_reached, &c, 5000));
}

static void set_engine_frozen(cache_pool *cp, int frozen)
{
    pid_t engine = h_child_pid(cp->worker->pid, "sim-engine");
    assert_true(engine > 0);
    kill(engine, frozen ? SIGSTOP : SIGCONT);
}

static void hit_without_reaching_the_worker(void **state)
{
    cache_pool *cp = *state;
    h_pool *p = cp->p;
    char *body = chat(NULL, CAPITAL, 0, 0);
    double ins = metric(p, "gpupool_cache_inserts_total");
    answer first = ask(p, body, NULL);
    assert_int_equal(first.status, 200);
    assert_string_equal(first.cache, "miss");
    assert_memory_equal(first.node, "node-", 5);
    expect_stored(p, ins);

    set_engine_frozen(cp, 1);
    answer again = ask(p, body, NULL);
    char *near = chat(NULL, "what is the capital of france, please", 0, 0);
    answer similar = ask(p, near, NULL);
    set_engine_frozen(cp, 0);

    assert_int_equal(again.status, 200);
    assert_string_equal(again.cache, "hit");
    assert_string_equal(again.route, "local; reason=cache");
    assert_string_equal(again.node, ""); /* no node served it */
    assert_string_equal(again.content, first.content);
    /* a near duplicate (similarity about 0.99 with the built-in embedder) */
    assert_int_equal(similar.status, 200);
    assert_string_equal(similar.cache, "hit");
    assert_string_equal(similar.content, first.content);

    /* A different question is not near enough. */
    char *other = chat(NULL, "What is the capital of Spain?", 0, 0);
    answer spain = ask(p, other, NULL);
    assert_string_equal(spain.cache, "miss");
    assert_memory_equal(spain.node, "node-", 5);

    answer_free(&first); answer_free(&again); answer_free(&similar); answer_free(&spain);
    free(body); free(near); free(other);
    assert_true(metric(p, "gpupool_cache_hits_total") >= 2);
    assert_true(metric(p, "gpupool_cache_lookups_total") >= 4);
    assert_true(metric(p, "gpupool_cache_bytes") > 0);
    assert_true(metric(p, "gpupool_cache_hit_ratio") > 0);
}

/* "How old is he?" after a turn about one person never gets the answer
 * given after a turn about another. */
static void earlier_turns_separate_entries(void **state)
{
    cache_pool *cp = *state;
    h_pool *p = cp->p;
    char *obama = chat("Who was the 44th US president?|Barack Obama.", "How old is he?", 0, 0);
    char *biden = chat("Who was the 46th US president?|Joe Biden.", "How old is he?", 0, 0);
    double ins = metric(p, "gpupool_cache_inserts_total");
    answer a = ask(p, obama, NULL);
    assert_string_equal(a.cache, "miss");
    expect_stored(p, ins);
    answer b = ask(p, biden, NULL);
    assert_string_equal(b.cache, "miss");
    assert_memory_equal(b.node, "node-", 5);
    answer c = ask(p, obama, NULL);
    assert_string_equal(c.cache, "hit");
    answer_free(&a); answer_free(&b); answer_free(&c);
    free(obama); free(biden);
}

static void no_cache_and_temperature_skip(void **state)
{
    cache_pool *cp = *state;
    h_pool *p = cp->p;
    char *body = chat(NULL, "Name a prime number between 10 and 20.", 0, 0);
    const char *nc[] = {"Cache-Control: no-cache", NULL};
    double skipped = metric(p, "gpupool_cache_skipped_total");
    answer a = ask(p, body, nc);
    assert_int_equal(a.status, 200);
    assert_string_equal(a.cache, ""); /* not looked up */
    assert_memory_equal(a.node, "node-", 5);
    /* and not stored: the next plain request misses */
    answer b = ask(p, body, NULL);
    assert_string_equal(b.cache, "miss");
    /* now stored, but no-cache still goes to the node */
    answer c = ask(p, body, nc);
    assert_string_equal(c.cache, "");
    assert_memory_equal(c.node, "node-", 5);

    char *hot = chat(NULL, "Name a prime number between 10 and 20.", 0.9, 0);
    answer d = ask(p, hot, NULL);
    assert_int_equal(d.status, 200);
    assert_string_equal(d.cache, "");
    assert_memory_equal(d.node, "node-", 5);
    assert_true(metric(p, "gpupool_cache_skipped_total") >= skipped + 3);
    answer_free(&a); answer_free(&b); answer_free(&c); answer_free(&d);
    free(body); free(hot);
}

/* An entry made from a private request never answers a request that may
 * go to external capacity; a private request may use an ordinary entry. */
static void private_entries_stay_private(void **state)
{
    cache_pool *cp = *state;
    h_pool *p = cp->p;
    const char *priv[] = {"X-Gpupool-Sensitivity: private", NULL};
    char *secret = chat(NULL, "Summarise the merger memo for project Falcon.", 0, 0);
    double ins = metric(p, "gpupool_cache_inserts_total");
    answer a = ask(p, secret, priv);
    assert_int_equal(a.status, 200);
    assert_string_equal(a.cache, "miss");
    expect_stored(p, ins);
    answer b = ask(p, secret, NULL); /* the same text, not private */
    assert_string_equal(b.cache, "miss");
    assert_memory_equal(b.node, "node-", 5);
    answer c = ask(p, secret, priv);
    assert_string_equal(c.cache, "hit");
    assert_string_equal(c.content, a.content);

    /* The other way round: an ordinary entry answers a private request,
     * since nothing private went into it (cache_tier_visible). */
    char *plain = chat(NULL, "What is the boiling point of water in Celsius?", 0, 0);
    ins = metric(p, "gpupool_cache_inserts_total");
    answer d = ask(p, plain, NULL);
    assert_string_equal(d.cache, "miss");
    expect_stored(p, ins);
    answer e = ask(p, plain, priv);
    assert_string_equal(e.cache, "hit");
    answer_free(&a); answer_free(&b); answer_free(&c); answer_free(&d); answer_free(&e);
    free(secret); free(plain);
}

static void streams_are_stored_and_replayed(void **state)
{
    cache_pool *cp = *state;
    h_pool *p = cp->p;
    char *streamed = chat(NULL, "Spell the word cat.", 0, 1);
    char *plain = chat(NULL, "Spell the word cat.", 0, 0);
    double ins = metric(p, "gpupool_cache_inserts_total");
    answer a = ask(p, streamed, NULL);
    assert_int_equal(a.status, 200);
    assert_string_equal(a.cache, "miss");
    assert_non_null(strstr(a.content, "data: [DONE]"));
    expect_stored(p, ins); /* the streamed answer, collected */

    set_engine_frozen(cp, 1);
    answer b = ask(p, plain, NULL);
    answer c = ask(p, streamed, NULL);
    set_engine_frozen(cp, 0);
    assert_int_equal(b.status, 200);
    assert_string_equal(b.cache, "hit");
    assert_non_null(strstr(b.content, "[simulated]"));
    assert_int_equal(c.status, 200);
    assert_string_equal(c.cache, "hit");
    assert_non_null(strstr(c.ctype, "text/event-stream"));
    assert_non_null(strstr(c.content, "\"chat.completion.chunk\""));
    assert_non_null(strstr(c.content, "[simulated]"));
    const char *done = strstr(c.content, "data: [DONE]");
    assert_non_null(done);
    assert_string_equal(done, "data: [DONE]\n\n"); /* the last event */
    answer_free(&a); answer_free(&b); answer_free(&c);
    free(streamed); free(plain);
}

static void invalidate_clears(void **state)
{
    cache_pool *cp = *state;
    h_pool *p = cp->p;
    char *body = chat(NULL, "How many legs does a spider have?", 0, 0);
    double ins = metric(p, "gpupool_cache_inserts_total");
    answer a = ask(p, body, NULL);
    expect_stored(p, ins);
    answer b = ask(p, body, NULL);
    assert_string_equal(b.cache, "hit");

    h_resp r;
    assert_int_equal(h_request(p, "DELETE", "/v1/cache?model=another-model", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "removed")), 0);
    h_resp_free(&r);
    assert_int_equal(h_request(p, "DELETE", "/v1/cache?tier=sideways", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 400);
    h_resp_free(&r);
    assert_int_equal(h_request(p, "DELETE", "/v1/cache?model=sim-llama-8b", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_true(json_is_true(json_object_get(r.json, "enabled")));
    assert_true(json_integer_value(json_object_get(r.json, "removed")) >= 1);
    h_resp_free(&r);

    answer c = ask(p, body, NULL);
    assert_string_equal(c.cache, "miss");
    assert_memory_equal(c.node, "node-", 5);
    assert_true(metric(p, "gpupool_cache_removed_total{reason=\"invalidated\"}") >= 1);
    answer_free(&a); answer_free(&b); answer_free(&c);
    free(body);
}

static void *busy_request(void *arg)
{
    h_pool *p = arg;
    /* not cacheable (temperature 1), long enough to hold its slot */
    char *body = chat(NULL, "Write a long story.", 1, 0);
    json_t *b = json_loads(body, 0, NULL);
    json_object_set_new(b, "max_tokens", json_integer(400));
    char *text = json_dumps(b, JSON_COMPACT);
    h_resp r;
    h_request(p, "POST", "/v1/chat/completions", text, NULL, &r);
    h_resp_free(&r);
    json_decref(b);
    free(text);
    free(body);
    return NULL;
}

/* A request the event loop cannot place at once (every slot busy) waits on
 * a pool thread: it is looked up once, and its answer is stored there. */
static void waiting_request_is_looked_up_once_and_stored(void **state)
{
    cache_pool *cp = *state;
    h_pool *p = cp->p;
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, busy_request, p);
    /* both slots taken, so the next request cannot be placed at once */
    assert_true(h_wait_until(node_full, p, 5000));
    char *body = chat(NULL, "Which planet is closest to the sun?", 0, 0);
    double lookups = metric(p, "gpupool_cache_lookups_total");
    answer a = ask(p, body, NULL);
    assert_int_equal(a.status, 200);
    assert_string_equal(a.cache, "miss");
    assert_true(metric(p, "gpupool_cache_lookups_total") == lookups + 1);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    answer b = ask(p, body, NULL);
    assert_string_equal(b.cache, "hit");
    assert_string_equal(b.content, a.content);
    answer_free(&a); answer_free(&b);
    free(body);
}

/* With keys: one key's entries never answer another's requests, and
 * invalidation needs an admin key. */
static void keys_partition_and_admin(void **state)
{
    cache_pool *cp = *state;
    h_pool *p = cp->p;
    h_start_coordinator(p, "--cache on --api-key alice-key --api-key bob-key --admin-key root-key");
    snprintf(p->api_key, sizeof p->api_key, "alice-key"); /* for the harness's own calls */
    cp->worker = h_start_worker(p, "machine-b", "--ttft-ms%2010%20--tps%20500", NULL);
    const char *alice[] = {"Authorization: Bearer alice-key", NULL};
    const char *bob[] = {"Authorization: Bearer bob-key", NULL};
    const char *root[] = {"Authorization: Bearer root-key", NULL};
    char *body = chat(NULL, "Translate hello into French.", 0, 0);
    answer a = ask(p, body, alice);
    assert_int_equal(a.status, 200);
    assert_string_equal(a.cache, "miss");
    answer b = ask(p, body, bob);
    assert_string_equal(b.cache, "miss");
    answer c = ask(p, body, alice);
    assert_string_equal(c.cache, "hit");
    h_resp r;
    assert_int_equal(h_request(p, "DELETE", "/v1/cache", NULL, alice, &r), 0);
    assert_int_equal(r.status, 403);
    h_resp_free(&r);
    assert_int_equal(h_request(p, "DELETE", "/v1/cache", NULL, root, &r), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "removed")), 2);
    h_resp_free(&r);
    answer_free(&a); answer_free(&b); answer_free(&c);
    free(body);
}

/* The entries are in DATA/cache.db and survive a restart. */
static void persists_across_restart(void **state)
{
    cache_pool *cp = *state;
    h_pool *p = cp->p;
    char *body = chat(NULL, "What colour is the sky on a clear day?", 0, 0);
    double ins = metric(p, "gpupool_cache_inserts_total");
    answer a = ask(p, body, NULL);
    expect_stored(p, ins);
    h_kill(p->coord, SIGTERM);
    assert_int_equal(h_wait_exit(p->coord, 10000), 0);
    h_restart_coordinator(p);
    /* The model must be known again (its worker registers anew) before the
     * request is looked up at all. */
    assert_true(h_wait_until(one_ready, p, 15000));
    answer b = ask(p, body, NULL);
    assert_int_equal(b.status, 200);
    assert_string_equal(b.cache, "hit");
    assert_string_equal(b.content, a.content);
    answer_free(&a); answer_free(&b);
    free(body);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(hit_without_reaching_the_worker, setup, teardown),
        cmocka_unit_test_setup_teardown(earlier_turns_separate_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(no_cache_and_temperature_skip, setup, teardown),
        cmocka_unit_test_setup_teardown(private_entries_stay_private, setup, teardown),
        cmocka_unit_test_setup_teardown(streams_are_stored_and_replayed, setup, teardown),
        cmocka_unit_test_setup_teardown(invalidate_clears, setup, teardown),
        cmocka_unit_test_setup_teardown(persists_across_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(waiting_request_is_looked_up_once_and_stored, setup, teardown),
    };
    const struct CMUnitTest keyed[] = {
        cmocka_unit_test_setup_teardown(keys_partition_and_admin, setup_bare, teardown),
    };
    return cmocka_run_group_tests_name("cache", tests, NULL, NULL) |
           cmocka_run_group_tests_name("cache_keys", keyed, NULL, NULL);
}
