/* e2e: the simulator's test knobs on a real engine process: --fail-first
 * answers the first chat/completion requests 500 and then serves, and
 * --reply-map answers a matching last user message with exactly the mapped
 * text, whole or streamed, while the answer stays marked simulated outside
 * its content. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static int setup(void **state)
{
    *state = h_pool_new("simreply");
    return 0;
}

static h_proc *engine(h_pool *p, const char *extra)
{
    char map[400], args[1024];
    snprintf(map, sizeof map, "%s/replies.json", p->dir);
    FILE *f = fopen(map, "w");
    assert_non_null(f);
    fputs("[{\"match\":\"give json\",\"reply\":\"{\\\"label\\\": \\\"question\\\", \\\"n\\\": 2}\"},"
          "{\"match\":\"quote\",\"reply\":\"say \\\"hi\\\"\\nbye\"}]",
          f);
    fclose(f);
    snprintf(args, sizeof args, "sim-engine --listen 127.0.0.1:0 --ttft-ms 0 --tps 0 --reply-map %s %s", map,
             extra);
    h_proc *e = h_spawn(p, "engine", args, NULL);
    assert_true(h_wait_port(e, 20000) > 0);
    return e;
}

static long chat(h_pool *p, h_proc *e, const char *text, int stream, h_resp *r)
{
    char url[96], body[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions", e->port);
    snprintf(body, sizeof body,
             "{\"model\":\"sim-llama-8b\",\"stream\":%s,\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
             stream ? "true" : "false", text);
    h_request(p, "POST", url, body, NULL, r);
    return r->status;
}

static const char *content(const h_resp *r)
{
    json_t *c = json_array_get(json_object_get(r->json, "choices"), 0);
    return json_string_value(json_object_get(json_object_get(c, "message"), "content"));
}

static void fail_first_then_mapped_reply(void **state)
{
    h_pool *p = *state;
    h_proc *e = engine(p, "--fail-first 2");
    h_resp r;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(chat(p, e, "give json", 0, &r), 500);
        assert_non_null(json_object_get(json_object_get(r.json, "error"), "message"));
        h_resp_free(&r);
    }
    assert_int_equal(chat(p, e, "please give json now", 0, &r), 200);
    assert_string_equal(content(&r), "{\"label\": \"question\", \"n\": 2}");
    assert_string_equal(json_string_value(json_object_get(r.json, "system_fingerprint")), "gpupool-sim");
    char v[16];
    assert_non_null(h_header(&r, "X-Gpupool-Simulated", v, sizeof v));
    h_resp_free(&r);
    /* Unmatched: the usual generated text, marker first. */
    assert_int_equal(chat(p, e, "something else", 0, &r), 200);
    assert_int_equal(strncmp(content(&r), "[simulated]", 11), 0);
    h_resp_free(&r);
}

static void streamed_reply_is_verbatim(void **state)
{
    h_pool *p = *state;
    h_proc *e = engine(p, "");
    h_resp r;
    assert_int_equal(chat(p, e, "quote me", 1, &r), 200);
    /* The deltas, unescaped and joined, are the reply exactly. */
    char got[256] = "";
    int stop = 0;
    for (char *s = r.body; (s = strstr(s, "data: {"));) {
        char *end = strstr(s, "\n\n");
        assert_non_null(end);
        json_t *ev = json_loadb(s + 6, (size_t)(end - s - 6), 0, NULL);
        assert_non_null(ev);
        json_t *c = json_array_get(json_object_get(ev, "choices"), 0);
        const char *t = json_string_value(json_object_get(json_object_get(c, "delta"), "content"));
        if (t) strncat(got, t, sizeof got - strlen(got) - 1);
        const char *fin = json_string_value(json_object_get(c, "finish_reason"));
        stop |= fin && !strcmp(fin, "stop");
        json_decref(ev);
        s = end;
    }
    assert_string_equal(got, "say \"hi\"\nbye");
    assert_true(stop);
    h_resp_free(&r);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(fail_first_then_mapped_reply, setup, h_pool_teardown),
        cmocka_unit_test_setup_teardown(streamed_reply_is_verbatim, setup, h_pool_teardown),
    };
    return cmocka_run_group_tests_name("e2e_simreply", tests, NULL, NULL);
}
