/* test_simcore: the engine simulator's pure logic (sim/simcore) and wire
 * shapes (sim/simwire), without sockets or clocks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sim/simcore.h"
#include "sim/simreply.h"
#include "sim/simwire.h"

static sim_config defaults(void)
{
    sim_config c;
    char err[256];
    sim_config_defaults(&c);
    assert_int_equal(sim_config_finish(&c, err, sizeof err), 0);
    return c;
}

/* The first n tokens for (seed, input_hash), concatenated. */
static void gen_text(uint64_t seed, uint64_t h, int n, char *out, size_t len)
{
    sim_gen g;
    sim_gen_init(&g, seed, h);
    out[0] = 0;
    for (int i = 0; i < n; i++) strncat(out, sim_gen_next(&g), len - strlen(out) - 1);
}

static uint64_t hash_str(const char *s) { return sim_hash(SIM_HASH_INIT, s, strlen(s)); }

static void test_text_deterministic(void **state)
{
    (void)state;
    char a[2048], b[2048], c[2048], d[2048];
    gen_text(42, hash_str("hello there"), 64, a, sizeof a);
    gen_text(42, hash_str("hello there"), 64, b, sizeof b);
    gen_text(42, hash_str("hello therE"), 64, c, sizeof c);
    gen_text(43, hash_str("hello there"), 64, d, sizeof d);
    assert_string_equal(a, b);
    assert_string_not_equal(a, c);
    assert_string_not_equal(a, d);
}

static void test_first_token_marker(void **state)
{
    (void)state;
    for (uint64_t seed = 0; seed < 20; seed++) {
        sim_gen g;
        sim_gen_init(&g, seed, hash_str("x"));
        assert_string_equal(sim_gen_next(&g), "[simulated]");
        /* Nothing the generator says may need JSON escaping, nor be empty. */
        for (int i = 0; i < 500; i++) {
            const char *t = sim_gen_next(&g);
            assert_true(strlen(t) > 0);
            assert_null(strpbrk(t, "\"\\\n\r\t"));
        }
    }
}

static void test_fault_rates(void **state)
{
    (void)state;
    sim_config c = defaults();
    c.error_rate = 0.1;
    int errors = 0, none = 0;
    for (uint64_t i = 0; i < 10000; i++) {
        sim_fault f = sim_fault_draw(&c, i, 1);
        errors += f == SIM_FAULT_ERROR;
        none += f == SIM_FAULT_NONE;
        assert_int_equal(f, sim_fault_draw(&c, i, 1)); /* a pure function of (seed, i) */
    }
    assert_in_range(errors, 800, 1200);
    assert_int_equal(errors + none, 10000);

    /* Three rates side by side each hold; drops only happen to streams. */
    c.error_rate = 0.1;
    c.hang_rate = 0.05;
    c.drop_rate = 0.2;
    int n[4] = {0}, dropped_plain = 0;
    for (uint64_t i = 0; i < 10000; i++) {
        n[sim_fault_draw(&c, i, 1)]++;
        dropped_plain += sim_fault_draw(&c, i, 0) == SIM_FAULT_DROP;
    }
    assert_in_range(n[SIM_FAULT_ERROR], 800, 1200);
    assert_in_range(n[SIM_FAULT_HANG], 380, 620);
    assert_in_range(n[SIM_FAULT_DROP], 1700, 2300);
    assert_int_equal(dropped_plain, 0);

    /* No rates, no faults; another seed, another sequence. */
    sim_config z = defaults();
    for (uint64_t i = 0; i < 1000; i++) assert_int_equal(sim_fault_draw(&z, i, 1), SIM_FAULT_NONE);
    sim_config s2 = c;
    s2.seed = 7;
    int differ = 0;
    for (uint64_t i = 0; i < 1000; i++) differ += sim_fault_draw(&c, i, 1) != sim_fault_draw(&s2, i, 1);
    assert_true(differ > 0);
}

static void test_embedding(void **state)
{
    (void)state;
    float a[SIM_EMBED_DIM], b[SIM_EMBED_DIM], c[SIM_EMBED_DIM], d[SIM_EMBED_DIM];
    sim_embed(42, "the quick fox", 13, a);
    sim_embed(42, "the quick fox", 13, b);
    sim_embed(42, "the quick fix", 13, c);
    sim_embed(1, "the quick fox", 13, d);
    double norm = 0;
    for (int i = 0; i < SIM_EMBED_DIM; i++) norm += (double)a[i] * a[i];
    assert_true(fabs(sqrt(norm) - 1.0) < 1e-5);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    assert_memory_not_equal(a, d, sizeof a);
    sim_embed(42, "", 0, c);
    norm = 0;
    for (int i = 0; i < SIM_EMBED_DIM; i++) norm += (double)c[i] * c[i];
    assert_true(fabs(sqrt(norm) - 1.0) < 1e-5);
}

static int set(sim_config *c, const char *opt, const char *val)
{
    char err[256];
    err[0] = 0;
    int rc = sim_config_set(c, opt, val, err, sizeof err);
    if (rc) assert_true(strlen(err) > 0 && !strchr(err, '\n'));
    return rc;
}

static void test_options(void **state)
{
    (void)state;
    sim_config c;
    char err[256];
    sim_config_defaults(&c);
    assert_int_equal(c.ttft_ms, 200);
    assert_true(c.tps == 50);
    assert_int_equal(c.slots, 4);
    assert_int_equal(c.seed, 42);
    assert_int_equal(c.max_tokens_default, 64);

    assert_int_equal(set(&c, "tps", "0"), 0);
    assert_true(c.tps == 0);
    assert_int_equal(set(&c, "tps", "12.5"), 0);
    assert_int_equal(set(&c, "ttft-ms", "0"), 0);
    assert_int_equal(set(&c, "slots", "1"), 0);
    assert_int_equal(set(&c, "seed", "18446744073709551615"), 0);
    assert_true(c.seed == UINT64_MAX);
    assert_int_equal(set(&c, "max-tokens-default", "16"), 0);
    assert_int_equal(set(&c, "error-rate", "0.25"), 0);
    assert_int_equal(set(&c, "hang-rate", "0"), 0);
    assert_int_equal(set(&c, "drop-rate", "1e-1"), 0);

    assert_int_equal(set(&c, "tps", "abc"), -1);
    assert_int_equal(set(&c, "tps", "-1"), -1);
    assert_int_equal(set(&c, "tps", "nan"), -1);
    assert_int_equal(set(&c, "tps", ""), -1);
    assert_int_equal(set(&c, "ttft-ms", "10ms"), -1);
    assert_int_equal(set(&c, "ttft-ms", "-5"), -1);
    assert_int_equal(set(&c, "slots", "0"), -1);
    assert_int_equal(set(&c, "slots", "2.5"), -1);
    assert_int_equal(set(&c, "seed", "-1"), -1);
    assert_int_equal(set(&c, "seed", "x"), -1);
    assert_int_equal(set(&c, "seed", "0x10"), -1);
    assert_int_equal(set(&c, "seed", "010"), 0);
    assert_true(c.seed == 10); /* decimal, not octal */
    assert_int_equal(set(&c, "max-tokens-default", "0"), -1);
    assert_int_equal(set(&c, "error-rate", "1.5"), -1);
    assert_int_equal(set(&c, "hang-rate", "-0.1"), -1);
    assert_int_equal(set(&c, "drop-rate", "half"), -1);
    assert_int_equal(set(&c, "no-such-option", "1"), -1);
    assert_int_equal(c.slots, 1); /* failed sets leave the value alone */

    /* Rates may not add up to more than one. */
    sim_config_defaults(&c);
    set(&c, "error-rate", "0.6");
    set(&c, "hang-rate", "0.3");
    set(&c, "drop-rate", "0.2");
    assert_int_equal(sim_config_finish(&c, err, sizeof err), -1);
    set(&c, "drop-rate", "0.1");
    assert_int_equal(sim_config_finish(&c, err, sizeof err), 0);
}

static void test_model_specs(void **state)
{
    (void)state;
    sim_model m;
    char err[256];
    assert_int_equal(sim_parse_model("tiny", &m, err, sizeof err), 0);
    assert_string_equal(m.name, "tiny");
    assert_true(m.vram_bytes == (uint64_t)(5.5 * 1073741824.0));
    assert_int_equal(sim_parse_model("big-70b:40", &m, err, sizeof err), 0);
    assert_string_equal(m.name, "big-70b");
    assert_true(m.vram_bytes == 40ull << 30);
    assert_int_equal(sim_parse_model("llama3:8b:4.5", &m, err, sizeof err), 0);
    assert_string_equal(m.name, "llama3:8b");
    assert_int_equal(sim_parse_model("org/Model-1.5B:0.5", &m, err, sizeof err), 0);

    const char *bad[] = {"", ":5", "m:", "m:abc", "m:-1", "m:0", "m:9999", "has space",
                         "quo\"te:1", "llama3:8b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(sim_parse_model(bad[i], &m, err, sizeof err), -1);
        assert_true(strlen(err) > 0);
    }
    char longname[200];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    assert_int_equal(sim_parse_model(longname, &m, err, sizeof err), -1);

    /* No --model: the default; any --model replaces it; duplicates refused. */
    sim_config c = defaults();
    assert_int_equal(c.n_models, 1);
    assert_string_equal(c.models[0].name, SIM_DEFAULT_MODEL);
    sim_config_defaults(&c);
    assert_int_equal(set(&c, "model", "a:1"), 0);
    assert_int_equal(set(&c, "model", "b"), 0);
    assert_int_equal(set(&c, "model", "a:2"), -1);
    assert_int_equal(sim_config_finish(&c, err, sizeof err), 0);
    assert_int_equal(c.n_models, 2);
    assert_int_equal(sim_find_model(&c, "b"), 1);
    assert_int_equal(sim_find_model(&c, SIM_DEFAULT_MODEL), -1);
    assert_int_equal(sim_find_model(&c, NULL), -1);
}

static void test_word_count(void **state)
{
    (void)state;
    assert_int_equal(sim_count_words("", 0), 0);
    assert_int_equal(sim_count_words("   \n\t", 5), 0);
    assert_int_equal(sim_count_words("one", 3), 1);
    assert_int_equal(sim_count_words("  one two\tthree\nfour  ", 22), 4);
}

static int parse(const sim_config *c, sim_kind k, const char *body, sim_request *rq, sim_error *e)
{
    json_t *root = NULL;
    int rc = sim_request_parse(c, k, body, strlen(body), &root, rq, e);
    if (rc) assert_null(root);
    json_decref(root);
    return rc;
}

static void test_prompt_tokens(void **state)
{
    (void)state;
    sim_config c = defaults();
    sim_request rq;
    sim_error e;
    assert_int_equal(parse(&c, SIM_CHAT,
                           "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"system\","
                           "\"content\":\"be brief\"},{\"role\":\"user\",\"content\":[{\"type\":"
                           "\"text\",\"text\":\"hello big world\"}]}]}",
                           &rq, &e),
                     0);
    assert_int_equal(rq.prompt_tokens, 5);
    assert_int_equal(rq.max_tokens, 64);
    assert_false(rq.stream);
    /* Empty input still costs one token. */
    assert_int_equal(parse(&c, SIM_COMPLETION, "{\"model\":\"sim-llama-8b\",\"prompt\":\"\"}", &rq, &e), 0);
    assert_int_equal(rq.prompt_tokens, 1);
    assert_int_equal(parse(&c, SIM_COMPLETION,
                           "{\"model\":\"sim-llama-8b\",\"prompt\":[\"a b\",\"c\"],\"max_tokens\":3,"
                           "\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
                           &rq, &e),
                     0);
    assert_int_equal(rq.prompt_tokens, 3);
    assert_int_equal(rq.max_tokens, 3);
    assert_true(rq.stream && rq.include_usage);
    uint64_t h1 = rq.input_hash;
    assert_int_equal(parse(&c, SIM_COMPLETION, "{\"model\":\"sim-llama-8b\",\"prompt\":[\"a bc\"]}", &rq, &e), 0);
    assert_true(rq.input_hash != h1);
    assert_int_equal(parse(&c, SIM_EMBEDDING, "{\"model\":\"sim-llama-8b\",\"input\":[\"x y\",\"z\"]}", &rq, &e), 0);
    assert_int_equal(rq.prompt_tokens, 3);
}

static void test_request_errors(void **state)
{
    (void)state;
    sim_config c = defaults();
    sim_request rq;
    sim_error e;
    static const struct {
        sim_kind k;
        const char *body;
        int status;
        const char *code;
    } cases[] = {
        {SIM_CHAT, "{not json", 400, "invalid_json"},
        {SIM_CHAT, "[1,2]", 400, "invalid_request"},
        {SIM_CHAT, "{\"model\":\"nope\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 404, "model_not_found"},
        {SIM_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", 404, "model_not_found"},
        {SIM_CHAT, "{\"model\":3,\"messages\":[]}", 400, "invalid_request"},
        {SIM_CHAT, "{\"model\":\"sim-llama-8b\"}", 400, "invalid_request"},
        {SIM_CHAT, "{\"model\":\"sim-llama-8b\",\"messages\":[]}", 400, "invalid_request"},
        {SIM_CHAT, "{\"model\":\"sim-llama-8b\",\"messages\":[{\"content\":\"hi\"}]}", 400, "invalid_request"},
        {SIM_CHAT, "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "invalid_request"},
        {SIM_CHAT, "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":0}", 400, "invalid_request"},
        {SIM_CHAT, "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":\"yes\"}", 400, "invalid_request"},
        {SIM_COMPLETION, "{\"model\":\"sim-llama-8b\"}", 400, "invalid_request"},
        {SIM_COMPLETION, "{\"model\":\"sim-llama-8b\",\"prompt\":[1,2]}", 400, "invalid_request"},
        {SIM_EMBEDDING, "{\"model\":\"sim-llama-8b\",\"input\":[]}", 400, "invalid_request"},
        {SIM_EMBEDDING, "{\"model\":\"sim-llama-8b\",\"input\":\"x\",\"encoding_format\":\"hex\"}", 400, "invalid_request"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(parse(&c, cases[i].k, cases[i].body, &rq, &e), -1);
        assert_int_equal(e.status, cases[i].status);
        assert_string_equal(e.code, cases[i].code);
        json_t *j = sim_error_json(&e);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
                            "invalid_request_error");
        json_decref(j);
    }
}

static void test_slots_fifo(void **state)
{
    (void)state;
    sim_slots s;
    assert_int_equal(sim_slots_init(&s, 2), 0);
    int a = sim_slots_try_take(&s, NULL, 0, 10, 0, 0);
    int b = sim_slots_try_take(&s, NULL, 0, 10, 1, 0);
    assert_true(a >= 0 && b >= 0 && a != b);
    assert_int_equal(sim_slots_try_take(&s, NULL, 0, 10, 0, 0), -1);
    sim_waiter w1, w2, w3;
    sim_slots_enqueue(&s, &w1);
    sim_slots_enqueue(&s, &w2);
    sim_slots_enqueue(&s, &w3);
    assert_int_equal(s.waiting, 3);
    assert_false(sim_slots_should_wake(&s));
    sim_slots_release(&s, a);
    assert_true(sim_slots_should_wake(&s));
    /* A newcomer and a later waiter may not jump the line. */
    assert_int_equal(sim_slots_try_take(&s, NULL, 0, 10, 0, 0), -1);
    assert_int_equal(sim_slots_try_take(&s, &w2, 0, 10, 0, 0), -1);
    assert_int_equal(sim_slots_try_take(&s, &w1, 0, 10, 0, 0), a);
    assert_int_equal(s.waiting, 2);
    /* A waiter that gives up leaves the line intact behind it. */
    sim_slots_leave(&s, &w2);
    sim_slots_release(&s, b);
    assert_int_equal(sim_slots_try_take(&s, &w3, 0, 10, 0, 0), b);
    assert_int_equal(s.waiting, 0);
    assert_null(s.head);
    assert_int_equal(s.busy, 2);
    sim_slots_free(&s);
}

static void test_pacing(void **state)
{
    (void)state;
    sim_config c = defaults(); /* 200 ms, 50 tps */
    assert_int_equal(sim_token_due_us(&c, 0), 200000);
    assert_int_equal(sim_token_due_us(&c, 1), 220000);
    assert_int_equal(sim_tokens_done(&c, 64, 100000), 0);
    assert_int_equal(sim_tokens_done(&c, 64, 200000), 1);
    assert_int_equal(sim_tokens_done(&c, 64, 230000), 2);
    assert_int_equal(sim_tokens_done(&c, 64, 100000000), 64);
    c.tps = 0;
    c.ttft_ms = 0;
    assert_int_equal(sim_token_due_us(&c, 1000), 0);
    assert_int_equal(sim_tokens_done(&c, 64, 0), 64);
    assert_int_equal(sim_drop_after(64), 32);
    assert_int_equal(sim_drop_after(1), 1);
    assert_int_equal(sim_drop_after(3), 2);
}

static void test_usage(void **state)
{
    (void)state;
    sim_usage u = {0};
    sim_usage_add(&u, 5, 64);
    sim_usage_add(&u, 1, 0);
    assert_int_equal(u.requests, 2);
    assert_int_equal(u.prompt_tokens, 6);
    assert_int_equal(u.completion_tokens, 64);
}

static void test_sse_shapes(void **state)
{
    (void)state;
    sim_config c = defaults();
    sim_request rq;
    sim_error e;
    assert_int_equal(parse(&c, SIM_CHAT,
                           "{\"model\":\"sim-llama-8b\",\"messages\":[{\"role\":\"user\",\"content\":"
                           "\"hi\"}],\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
                           &rq, &e),
                     0);
    sim_sse x;
    sim_sse_init(&x, &c, &rq, "chatcmpl-sim-1", 1700000000);
    buf b = {0};
    sim_sse_role(&b, &x);
    sim_sse_token(&b, &x, "[simulated]");
    sim_sse_final(&b, &x);
    sim_sse_usage(&b, &x, 1, 1);
    sim_sse_done(&b);
    /* Every event but [DONE] is one JSON object of the chunk shape. */
    int events = 0;
    for (char *p = b.data; (p = strstr(p, "data: ")); events++) {
        char *end = strstr(p, "\n\n");
        assert_non_null(end);
        *end = 0;
        if (strcmp(p + 6, "[DONE]")) {
            json_error_t je;
            json_t *j = json_loads(p + 6, 0, &je);
            assert_non_null(j);
            assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion.chunk");
            assert_string_equal(json_string_value(json_object_get(j, "model")), "sim-llama-8b");
            assert_non_null(json_object_get(j, "usage"));
            json_decref(j);
        }
        p = end + 2;
    }
    assert_int_equal(events, 5);
    buf_free(&b);
}

static const char *const MAP =
    "[{\"match\":\"fix it\",\"reply\":\"{\\\"label\\\": \\\"ok\\\"}\"},"
    "{\"match\":\"hello\",\"reply\":\"Hi \\\"there\\\"\\n  you\"},"
    "{\"match\":\"*\",\"reply\":\"\"}]";

static void test_reply_map(void **state)
{
    (void)state;
    char err[256];
    sim_replies r;
    assert_int_equal(sim_replies_parse(MAP, strlen(MAP), &r, err, sizeof err), 0);
    assert_int_equal((int)r.n, 3);
    /* First match wins; "*" catches the rest, a missing text included. */
    assert_string_equal(sim_replies_find(&r, "please fix it, hello"), "{\"label\": \"ok\"}");
    assert_string_equal(sim_replies_find(&r, "oh hello"), "Hi \"there\"\n  you");
    assert_string_equal(sim_replies_find(&r, "other"), "");
    assert_string_equal(sim_replies_find(&r, NULL), "");
    assert_null(sim_replies_find(NULL, "hello"));
    /* Pieces: whitespace and the word after it; concatenated they are the text. */
    const char *t = "Hi \"there\"\n  you";
    assert_int_equal(sim_reply_pieces(t), 3);
    assert_int_equal((int)sim_reply_piece(t), 2);
    assert_int_equal((int)sim_reply_piece(t + 2), 8);
    assert_int_equal((int)sim_reply_piece(t + 10), 6);
    assert_int_equal((int)sim_reply_piece(t + 16), 0);
    assert_int_equal(sim_reply_pieces(""), 1);
    sim_replies_free(&r);

    static const char *const bad[] = {"{}", "[1]", "[{\"match\":\"a\"}]", "[{\"match\":1,\"reply\":\"x\"}]", "nope"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(sim_replies_parse(bad[i], strlen(bad[i]), &r, err, sizeof err), -1);
        assert_non_null(strstr(err, "--reply-map"));
        assert_null(r.v);
    }
}

static void test_reply_requests(void **state)
{
    (void)state;
    char err[256];
    sim_replies r;
    assert_int_equal(sim_replies_parse(MAP, strlen(MAP) - strlen(",{\"match\":\"*\",\"reply\":\"\"}]"), &r, err,
                                       sizeof err), -1); /* cut JSON */
    const char *map = "[{\"match\":\"fix it\",\"reply\":\"{\\\"a\\\": 1}\"}]";
    assert_int_equal(sim_replies_parse(map, strlen(map), &r, err, sizeof err), 0);
    sim_config c = defaults();
    c.replies = &r;
    c.single_model = 1; /* the bodies name no model */
    sim_request rq;
    sim_error e;
    /* Only the LAST user message counts, not earlier turns nor the assistant's. */
    assert_int_equal(parse(&c, SIM_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"fix it\"},"
                           "{\"role\":\"assistant\",\"content\":\"x\"},{\"role\":\"user\",\"content\":\"no\"}]}",
                           &rq, &e), 0);
    assert_null(rq.reply);
    assert_int_equal(rq.max_tokens, c.max_tokens_default);
    assert_int_equal(parse(&c, SIM_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
                           "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"now fix it\"}]}],"
                           "\"max_tokens\":500}",
                           &rq, &e), 0);
    assert_string_equal(rq.reply, "{\"a\": 1}");
    assert_int_equal(rq.max_tokens, 2);
    json_t *j = sim_completion_json(&c, &rq, "chatcmpl-sim-1", 1, rq.reply);
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(choice, "message"), "content")),
                        "{\"a\": 1}");
    assert_string_equal(json_string_value(json_object_get(choice, "finish_reason")), "stop");
    /* Still marked simulated, outside the content. */
    assert_string_equal(json_string_value(json_object_get(j, "system_fingerprint")), "gpupool-sim");
    json_decref(j);
    assert_int_equal(parse(&c, SIM_COMPLETION, "{\"prompt\":[\"please fix it\"]}", &rq, &e), 0);
    assert_non_null(rq.reply);

    /* A streamed reply: escaped pieces that concatenate to the text, finishing "stop". */
    assert_int_equal(parse(&c, SIM_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"fix it\"}],\"stream\":true}", &rq,
                           &e), 0);
    sim_sse x;
    sim_sse_init(&x, &c, &rq, "chatcmpl-sim-2", 1);
    char got[64] = "";
    for (const char *p = "{\"a\":\n\t1}"; *p;) {
        size_t k = sim_reply_piece(p);
        buf b = {0};
        assert_int_equal(sim_sse_text(&b, &x, p, k), 0);
        json_t *ev = json_loads(b.data + 6, 0, NULL);
        assert_non_null(ev);
        const char *content = json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(ev, "choices"), 0), "delta"), "content"));
        assert_non_null(content);
        strncat(got, content, sizeof got - strlen(got) - 1);
        json_decref(ev);
        buf_free(&b);
        p += k;
    }
    assert_string_equal(got, "{\"a\":\n\t1}");
    buf b = {0};
    sim_sse_final(&b, &x);
    assert_non_null(strstr(b.data, "\"finish_reason\":\"stop\""));
    buf_free(&b);
    sim_replies_free(&r);
}

static void test_fail_first(void **state)
{
    (void)state;
    sim_config c = defaults();
    char err[256];
    assert_false(sim_fails_first(&c, 0));
    assert_int_equal(sim_config_set(&c, "fail-first", "2", err, sizeof err), 0);
    assert_true(sim_fails_first(&c, 0));
    assert_true(sim_fails_first(&c, 1));
    assert_false(sim_fails_first(&c, 2));
    assert_int_equal(sim_config_set(&c, "fail-first", "-1", err, sizeof err), -1);
    assert_non_null(strstr(err, "--fail-first"));
    assert_int_equal(sim_config_set(&c, "fail-first", "x", err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_deterministic),
        cmocka_unit_test(test_first_token_marker),
        cmocka_unit_test(test_fault_rates),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_model_specs),
        cmocka_unit_test(test_word_count),
        cmocka_unit_test(test_prompt_tokens),
        cmocka_unit_test(test_request_errors),
        cmocka_unit_test(test_slots_fifo),
        cmocka_unit_test(test_pacing),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_sse_shapes),
        cmocka_unit_test(test_reply_map),
        cmocka_unit_test(test_reply_requests),
        cmocka_unit_test(test_fail_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
