/* Unit tests: util/json_skim, and reading an engine's answer with it
 * (call_sample_parse_answer) gives what a full parse with jansson gives. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <string.h>

#include "sched/profile.h"
#include "util/json_skim.h"

/* What the answer said, read the old way: parse all of it. */
static call_sample parsed_whole(const char *body)
{
    call_sample s = {0};
    json_t *j = json_loadb(body, strlen(body), 0, NULL);
    json_t *usage = json_object_get(j, "usage"), *timings = json_object_get(j, "timings");
    json_t *ct = json_object_get(usage, "completion_tokens");
    if (json_is_integer(ct)) s.completion_tokens = (int)json_integer_value(ct);
    json_t *pm = json_object_get(timings, "prompt_ms"), *dm = json_object_get(timings, "predicted_ms");
    if (json_is_number(pm)) s.engine_prompt_ms = json_number_value(pm);
    if (json_is_number(dm)) s.engine_decode_ms = json_number_value(dm);
    json_decref(j);
    return s;
}

static void answers_read_as_a_full_parse_reads_them(void **state)
{
    (void)state;
    static const char *const bodies[] = {
        "{\"id\":\"x\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hi\"}}],"
        "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":42,\"total_tokens\":45},"
        "\"timings\":{\"prompt_ms\":12.5,\"predicted_ms\":4.1e2}}",
        " { \"usage\" : { \"completion_tokens\" : 7 } } \n",
        "{\"usage\":{},\"timings\":{},\"x\":1}",
        "{\"usage\":{\"completion_tokens\":1.5}}",
        "{\"usage\":{\"completion_tokens\":\"9\"},\"timings\":{\"prompt_ms\":null,\"predicted_ms\":-3}}",
        "{\"usage\":{\"completion_tokens\":5},\"usage\":{\"completion_tokens\":6}}",
        "{\"usage\":{\"completion_tokens\":5},\"usage\":3}",
        "{\"usage\":[1,2],\"timings\":\"fast\"}",
        "{\"content\":\"a \\\"usage\\\": {\\\"completion_tokens\\\": 99} \\u00e9 }\",\"usage\":{\"completion_tokens\":2}}",
        "{\"nested\":{\"usage\":{\"completion_tokens\":11}},\"a\":[true,false,null,{\"b\":[[]]}]}",
        "{\"usage\":{\"completion_tokens\":5}} trailing",
        "{\"usage\":{\"completion_tokens\":5},}",
        "{\"usage\":{\"completion_tokens\":05}}",
        "{\"usage\":{\"completion_tokens\":5}",
        "{\"usage\":{\"completion_tokens\":5 \"x\":1}}",
        "{\"s\":\"tab\there\",\"usage\":{\"completion_tokens\":5}}",
        "{\"s\":\"bad \\q escape\",\"usage\":{\"completion_tokens\":5}}",
        "[{\"usage\":{\"completion_tokens\":5}}]",
        "{\"a\":tru,\"usage\":{\"completion_tokens\":5}}",
        "{\"timings\":{\"prompt_ms\":-0.25E+1,\"predicted_ms\":0}}",
        "not json",
        "",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        call_sample want = parsed_whole(bodies[i]), got = {0};
        call_sample_parse_answer(&got, bodies[i], strlen(bodies[i]));
        if (got.completion_tokens != want.completion_tokens || got.engine_prompt_ms != want.engine_prompt_ms ||
            got.engine_decode_ms != want.engine_decode_ms)
            fail_msg("body %zu (%s): got %d %g %g, want %d %g %g", i, bodies[i], got.completion_tokens,
                     got.engine_prompt_ms, got.engine_decode_ms, want.completion_tokens, want.engine_prompt_ms,
                     want.engine_decode_ms);
    }
    call_sample none = {0};
    call_sample_parse_answer(&none, NULL, 0);
    assert_int_equal(none.completion_tokens, 0);
}

static void skim_walks_members_and_stops_at_the_end(void **state)
{
    (void)state;
    const char *t = "{\"a\":{\"x\":[1,{\"y\":\"}\"}]},\"b\":2.5,\"c\":\"s\"}";
    json_skim s;
    skim_init(&s, t, strlen(t));
    assert_int_equal(skim_object(&s), 0);
    const char *k;
    size_t kl;
    assert_int_equal(skim_key(&s, &k, &kl), 1);
    assert_true(skim_key_is(k, kl, "a"));
    assert_int_equal(skim_value(&s), 0);
    assert_int_equal(skim_key(&s, &k, &kl), 1);
    assert_true(skim_key_is(k, kl, "b"));
    double v = 0;
    int is_int = 1;
    assert_int_equal(skim_number(&s, &v, &is_int), 1);
    assert_true(v == 2.5 && !is_int);
    assert_int_equal(skim_key(&s, &k, &kl), 1);
    assert_int_equal(skim_number(&s, &v, &is_int), 0); /* a string, skipped */
    assert_int_equal(skim_key(&s, &k, &kl), 0);
    assert_true(skim_done(&s));
    /* Nesting is bounded, and a failure sticks. */
    char deep[200];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    skim_init(&s, deep, strlen(deep));
    assert_int_equal(skim_value(&s), -1);
    assert_int_equal(skim_value(&s), -1);
    assert_false(skim_done(&s));
}

static void skim_reads_strings_and_true(void **state)
{
    (void)state;
    const char *t = "{\"model\":\"m-1\",\"stream\":true,\"n\":\"a\\\"b\",\"x\":false,\"y\":1}";
    json_skim s;
    skim_init(&s, t, strlen(t));
    const char *k, *v;
    size_t kl, vl;
    assert_int_equal(skim_object(&s), 0);
    assert_int_equal(skim_key(&s, &k, &kl), 1);
    assert_int_equal(skim_string(&s, &v, &vl), 1);
    assert_true(vl == 3 && !memcmp(v, "m-1", 3));
    assert_int_equal(skim_key(&s, &k, &kl), 1);
    assert_int_equal(skim_true(&s), 1);
    assert_int_equal(skim_key(&s, &k, &kl), 1);
    assert_int_equal(skim_string(&s, &v, &vl), 1);
    assert_true(vl == 4 && !memcmp(v, "a\\\"b", 4)); /* escapes stay raw */
    assert_int_equal(skim_key(&s, &k, &kl), 1);
    assert_int_equal(skim_true(&s), 0);
    assert_int_equal(skim_key(&s, &k, &kl), 1);
    assert_int_equal(skim_string(&s, &v, &vl), 0); /* a number, skipped */
    assert_int_equal(skim_key(&s, &k, &kl), 0);
    assert_true(skim_done(&s));
    skim_init(&s, "{\"stream\":tru}", 14);
    assert_int_equal(skim_object(&s), 0);
    assert_int_equal(skim_key(&s, &k, &kl), 1);
    assert_int_equal(skim_true(&s), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(answers_read_as_a_full_parse_reads_them),
        cmocka_unit_test(skim_walks_members_and_stops_at_the_end),
        cmocka_unit_test(skim_reads_strings_and_true),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
