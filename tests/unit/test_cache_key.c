/* Unit tests: policy/cache_key (skip rules, what the exact key covers) and
 * policy/cache_replay (which answers are stored, SSE replay, and collecting
 * a streamed answer back into a completion). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/cache_key.h"
#include "policy/cache_replay.h"

static json_t *parse(const char *s)
{
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    if (!j) fprintf(stderr, "bad test JSON: %s: %s\n", e.text, s);
    assert_non_null(j);
    return j;
}

static const char *skip_why(const char *body, double max_t, int no_cache)
{
    json_t *j = parse(body);
    const char *why = cache_skip_reason(j, max_t, no_cache);
    json_decref(j);
    return why;
}

#define MSG_U "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static void skip_rules(void **state)
{
    (void)state;
    assert_null(skip_why("{\"temperature\":0.2," MSG_U "}", 0.3, 0));
    assert_null(skip_why("{\"temperature\":0.3," MSG_U "}", 0.3, 0));
    assert_string_equal(skip_why("{\"temperature\":0.2," MSG_U "}", 0.3, 1), "no_cache");
    assert_string_equal(skip_why("{\"temperature\":0.31," MSG_U "}", 0.3, 0), "temperature");
    assert_string_equal(skip_why("{" MSG_U "}", 0.3, 0), "temperature"); /* absent = 1 */
    assert_null(skip_why("{" MSG_U "}", 1.0, 0));
    assert_string_equal(skip_why("{\"temperature\":\"0\"," MSG_U "}", 1.0, 0), "temperature");
    assert_string_equal(skip_why("{\"temperature\":0,\"messages\":[]}", 1, 0), "not_chat");
    assert_string_equal(skip_why("{\"temperature\":0,\"prompt\":\"x\"}", 1, 0), "not_chat");
    assert_string_equal(skip_why("[1]", 1, 0), "not_chat");
    assert_string_equal(skip_why("{\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
                             "{\"role\":\"assistant\",\"content\":\"a\"}]}",
                             1, 0),
                        "last_not_user");
    assert_string_equal(skip_why("{\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                             "\"text\":\"what is this\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
                             1, 0),
                        "non_text_content");
    assert_null(skip_why("{\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                     "\"text\":\"a\"},\"b\"]}]}",
                     1, 0));
    assert_string_equal(skip_why("{\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":5}]}", 1, 0),
                        "non_text_content");

    assert_int_equal(cache_no_cache_header("no-cache"), 1);
    assert_int_equal(cache_no_cache_header("max-age=0, No-Store"), 1);
    assert_int_equal(cache_no_cache_header(" NO-CACHE ,x"), 1);
    assert_int_equal(cache_no_cache_header("no-cache-please"), 0);
    assert_int_equal(cache_no_cache_header("max-age=60"), 0);
    assert_int_equal(cache_no_cache_header(""), 0);
    assert_int_equal(cache_no_cache_header(NULL), 0);
}

/* The key's context and text for body with the given window. */
static void key_of(const char *body, int turns, unsigned char ctx[32], char *text, size_t n)
{
    json_t *j = parse(body);
    cache_key k;
    char *t;
    size_t len;
    assert_int_equal(cache_key_build(j, turns, "tenant", CACHE_TIER_EXTERNAL, &k, &t, &len), 0);
    assert_string_equal(k.model, "m");
    assert_string_equal(k.partition, "tenant");
    assert_int_equal(k.tier, CACHE_TIER_EXTERNAL);
    memcpy(ctx, k.context, 32);
    if (text) snprintf(text, n, "%s", t);
    assert_int_equal(len, strlen(t));
    free(t);
    json_decref(j);
}

static int same_ctx(const char *a, const char *b, int turns)
{
    unsigned char x[32], y[32];
    key_of(a, turns, x, NULL, 0);
    key_of(b, turns, y, NULL, 0);
    return memcmp(x, y, 32) == 0;
}

#define SYS(s) "{\"role\":\"system\",\"content\":\"" s "\"}"
#define U(s) "{\"role\":\"user\",\"content\":\"" s "\"}"
#define A(s) "{\"role\":\"assistant\",\"content\":\"" s "\"}"
#define BODY(params, msgs) "{\"model\":\"m\"," params "\"messages\":[" msgs "]}"

static void key_contents(void **state)
{
    (void)state;
    unsigned char ctx[32];
    char text[64];
    key_of(BODY("", SYS("s") "," U("  How OLD is he？ ")), 0, ctx, text, sizeof text);
    assert_string_equal(text, "how old is he"); /* the last message, normalised, is what is embedded */

    /* The last message's text is not in the exact part: that is the similarity's job. */
    assert_true(same_ctx(BODY("", U("a")), BODY("", U("b")), 0));
    /* System prompt: in, normalised. */
    assert_false(same_ctx(BODY("", SYS("be brief") "," U("q")), BODY("", SYS("be long") "," U("q")), 0));
    assert_true(same_ctx(BODY("", SYS("Be brief.") "," U("q")), BODY("", SYS("be   BRIEF") "," U("q")), 0));
    assert_false(same_ctx(BODY("", SYS("s") "," U("q")), BODY("", U("q")), 0));
    /* Earlier turns: in. */
    assert_false(same_ctx(BODY("", U("about Obama") "," A("ok") "," U("how old is he?")),
                          BODY("", U("about Biden") "," A("ok") "," U("how old is he?")), 0));
    assert_false(same_ctx(BODY("", U("x") "," A("ok") "," U("q")), BODY("", U("x") "," A("no") "," U("q")), 0));
    /* Roles matter, not just texts. */
    assert_false(same_ctx(BODY("", U("x") "," U("q")), BODY("", A("x") "," U("q")), 0));
    /* The window: with turns=2 only the message before the last counts
     * (system prompts always do); turns=0 is the whole conversation. */
    const char *c1 = BODY("", SYS("s") "," U("first A") "," A("r1") "," U("u2") "," A("r2") "," U("q"));
    const char *c2 = BODY("", SYS("s") "," U("first B") "," A("r1") "," U("u2") "," A("r2") "," U("q"));
    assert_true(same_ctx(c1, c2, 2));
    assert_true(same_ctx(c1, c2, 4));
    assert_false(same_ctx(c1, c2, 5));
    assert_false(same_ctx(c1, c2, 0));
    assert_false(same_ctx(c1, BODY("", SYS("t") "," U("first A") "," A("r1") "," U("u2") "," A("r2") "," U("q")), 2));
    assert_false(same_ctx(c1, BODY("", SYS("s") "," U("first A") "," A("r1") "," U("u2") "," A("r3") "," U("q")), 2));
    assert_true(same_ctx(BODY("", U("q")), BODY("", U("q")), 1));

    /* Parameters: neutral ones out, the rest in, in any key order. */
    assert_true(same_ctx(BODY("\"stream\":true,\"temperature\":0.2,\"user\":\"bob\",", U("q")),
                         BODY("\"temperature\":0,\"stream_options\":{\"include_usage\":true},", U("q")), 0));
    assert_false(same_ctx(BODY("\"max_tokens\":10,", U("q")), BODY("\"max_tokens\":20,", U("q")), 0));
    assert_false(same_ctx(BODY("", U("q")), BODY("\"tools\":[{\"type\":\"function\"}],", U("q")), 0));
    assert_false(same_ctx(BODY("\"seed\":1,", U("q")), BODY("\"seed\":2,", U("q")), 0));
    assert_true(same_ctx(BODY("\"max_tokens\":10,\"top_p\":0.5,", U("q")), BODY("\"top_p\":0.5,\"max_tokens\":10,", U("q")), 0));
    assert_true(same_ctx(BODY("\"response_format\":{\"type\":\"json_schema\",\"x\":1},", U("q")),
                         BODY("\"response_format\":{\"x\":1,\"type\":\"json_schema\"},", U("q")), 0));
    /* Framing: moving text between fields does not collide. */
    assert_false(same_ctx(BODY("", SYS("ab") "," U("q")), BODY("", SYS("a") "," SYS("b") "," U("q")), 0));
    /* The last message's name and other fields count. */
    assert_false(same_ctx(BODY("", U("q")), BODY("", "{\"role\":\"user\",\"name\":\"ann\",\"content\":\"q\"}"), 0));

    json_t *bad = parse("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}"); /* no model */
    cache_key k;
    char *t = (char *)"x";
    size_t n = 1;
    assert_int_equal(cache_key_build(bad, 0, NULL, CACHE_TIER_EXTERNAL, &k, &t, &n), -1);
    assert_null(t);
    json_decref(bad);
}

static const char COMPLETION[] =
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"m\","
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"你好, world\"},"
    "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}";

static const char TOOLS[] =
    "{\"id\":\"chatcmpl-2\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"m\","
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
    "{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"a\\\":1}\"}},"
    "{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"put\",\"arguments\":\"{}\"}}]},"
    "\"finish_reason\":\"tool_calls\"}]}";

static void storable(void **state)
{
    (void)state;
    static const struct {
        const char *json;
        int ok;
    } cases[] = {
        {COMPLETION, 1},
        {TOOLS, 1},
        {"{\"object\":\"chat.completion\",\"choices\":[{\"message\":{\"content\":\"x\"},\"finish_reason\":\"length\"}]}", 1},
        {"{\"choices\":[{\"message\":{\"content\":\"x\"},\"finish_reason\":\"content_filter\"}]}", 0},
        {"{\"choices\":[{\"message\":{\"content\":\"x\"},\"finish_reason\":null}]}", 0},
        {"{\"choices\":[{\"finish_reason\":\"stop\"}]}", 0},
        {"{\"choices\":[]}", 0},
        {"{\"error\":{\"message\":\"x\"},\"choices\":[{\"message\":{},\"finish_reason\":\"stop\"}]}", 0},
        {"{\"object\":\"text_completion\",\"choices\":[{\"message\":{},\"finish_reason\":\"stop\"}]}", 0},
        {"[]", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *j = parse(cases[i].json);
        assert_int_equal(cache_answer_storable(j), cases[i].ok);
        json_decref(j);
    }
}

/* The JSON of each data: event, in order; the last is [DONE]. */
static int events(const char *sse, json_t **out, int max, int *done)
{
    int n = 0;
    *done = 0;
    for (const char *p = sse; *p;) {
        assert_memory_equal(p, "data: ", 6);
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        if (strncmp(p + 6, "[DONE]", 6) == 0) {
            *done = 1;
            assert_string_equal(end + 2, "");
            break;
        }
        json_error_t e;
        assert_true(n < max);
        out[n] = json_loadb(p + 6, (size_t)(end - p - 6), 0, &e);
        assert_non_null(out[n]);
        n++;
        p = end + 2;
    }
    return n;
}

static const json_t *delta(const json_t *ev) { return json_object_get(json_array_get(json_object_get(ev, "choices"), 0), "delta"); }

static void replay(void **state)
{
    (void)state;
    json_t *c = parse(COMPLETION);
    size_t len;
    char *sse = cache_replay_sse(c, 1, &len);
    assert_non_null(sse);
    assert_int_equal(len, strlen(sse));
    json_t *ev[8];
    int done, n = events(sse, ev, 8, &done);
    assert_true(done);
    assert_int_equal(n, 4); /* role, content, finish, usage */
    for (int i = 0; i < n; i++) {
        assert_string_equal(json_string_value(json_object_get(ev[i], "object")), "chat.completion.chunk");
        assert_string_equal(json_string_value(json_object_get(ev[i], "id")), "chatcmpl-1");
        assert_string_equal(json_string_value(json_object_get(ev[i], "model")), "m");
        assert_int_equal(json_integer_value(json_object_get(ev[i], "created")), 1700000000);
    }
    assert_string_equal(json_string_value(json_object_get(delta(ev[0]), "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(delta(ev[1]), "content")), "你好, world");
    const json_t *last = json_array_get(json_object_get(ev[2], "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(last, "finish_reason")), "stop");
    assert_int_equal(json_object_size(json_object_get(last, "delta")), 0);
    assert_true(json_is_null(json_object_get(json_array_get(json_object_get(ev[0], "choices"), 0), "finish_reason")));
    assert_int_equal(json_array_size(json_object_get(ev[3], "choices")), 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(ev[3], "usage"), "total_tokens")), 7);
    for (int i = 0; i < n; i++) json_decref(ev[i]);
    free(sse);
    sse = cache_replay_sse(c, 0, NULL); /* no usage chunk unless asked for */
    assert_int_equal(events(sse, ev, 8, &done), 3);
    for (int i = 0; i < 3; i++) json_decref(ev[i]);
    free(sse);
    json_decref(c);

    c = parse(TOOLS);
    sse = cache_replay_sse(c, 1, NULL);
    n = events(sse, ev, 8, &done);
    assert_int_equal(n, 3); /* role, tool calls, finish; no usage in the answer */
    const json_t *calls = json_object_get(delta(ev[1]), "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(calls, 1), "index")), 1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments")),
                        "{\"a\":1}");
    for (int i = 0; i < n; i++) json_decref(ev[i]);
    free(sse);
    json_decref(c);

    c = parse("{\"choices\":[]}");
    assert_null(cache_replay_sse(c, 0, NULL));
    json_decref(c);
}

/* Both absent, or equal. */
static int same(const json_t *a, const json_t *b) { return (!a && !b) || json_equal(a, b); }

/* Feeds sse to a new collector in pieces of `step` bytes. */
static json_t *collect(const char *sse, size_t step, int *feed_rc)
{
    cache_stream *s = cache_stream_new();
    size_t n = strlen(sse);
    *feed_rc = 0;
    for (size_t i = 0; i < n && !*feed_rc; i += step) *feed_rc = cache_stream_feed(s, sse + i, i + step > n ? n - i : step);
    json_t *out = cache_stream_finish(s);
    cache_stream_free(s);
    return out;
}

static void stream_round_trip(void **state)
{
    (void)state;
    const char *cases[] = {COMPLETION, TOOLS};
    for (int k = 0; k < 2; k++) {
        json_t *c = parse(cases[k]);
        char *sse = cache_replay_sse(c, 1, NULL);
        for (size_t step = 1; step < 40; step += 7) {
            int rc;
            json_t *back = collect(sse, step, &rc);
            assert_int_equal(rc, 0);
            assert_non_null(back);
            assert_true(cache_answer_storable(back));
            const json_t *m0 = json_object_get(json_array_get(json_object_get(back, "choices"), 0), "message");
            const json_t *w0 = json_object_get(json_array_get(json_object_get(c, "choices"), 0), "message");
            assert_true(same(json_object_get(m0, "content"), json_object_get(w0, "content")));
            assert_true(same(json_object_get(m0, "tool_calls"), json_object_get(w0, "tool_calls")));
            assert_string_equal(json_string_value(json_object_get(back, "id")),
                                json_string_value(json_object_get(c, "id")));
            assert_true(same(json_object_get(back, "usage"), json_object_get(c, "usage")));
            json_decref(back);
        }
        free(sse);
        json_decref(c);
    }

    /* A real engine's stream: content in many deltas, CRLF, comments, a final usage chunk. */
    const char *eng = ": keep-alive\r\n\r\n"
                      "data: {\"id\":\"x\",\"model\":\"m\",\"created\":2,\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\r\n\r\n"
                      "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"
                      "data:{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n"
                      "data: {\"id\":\"x\",\"choices\":[],\"usage\":{\"total_tokens\":5}}\n\n"
                      "data: [DONE]\n\n";
    int rc;
    json_t *back = collect(eng, 5, &rc);
    assert_non_null(back);
    const json_t *ch = json_array_get(json_object_get(back, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(ch, "message"), "content")), "Hello");
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    assert_string_equal(json_string_value(json_object_get(back, "object")), "chat.completion");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(back, "usage"), "total_tokens")), 5);
    json_decref(back);

    /* Streams that must not be stored. */
    const char *bad[] = {
        /* cut off: no [DONE] */
        "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n",
        /* no finish reason */
        "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n",
        /* the gateway's own interruption event */
        ("data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n"
         "data: {\"error\":{\"code\":\"upstream_interrupted\"}}\n\ndata: [DONE]\n\n"),
        "event: error\ndata: {}\n\n",
        "data: not json\n\n",
        "data: [DONE]\n\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        back = collect(bad[i], 3, &rc);
        assert_null(back);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(skip_rules),
        cmocka_unit_test(key_contents),
        cmocka_unit_test(storable),
        cmocka_unit_test(replay),
        cmocka_unit_test(stream_round_trip),
    };
    return cmocka_run_group_tests_name("cache_key", tests, NULL, NULL);
}
