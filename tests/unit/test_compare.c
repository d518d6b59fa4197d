/* Unit tests: the arithmetic of `gpupool compare` (policy/compare): JSON
 * found in answers, field agreement, parse shares, latency percentiles. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "policy/compare.h"

static int extracts(const char *text, const char *want)
{
    json_t *j = cmp_extract_json(text, strlen(text));
    if (!want) {
        json_decref(j);
        return j == NULL;
    }
    json_t *w = json_loads(want, 0, NULL);
    int ok = j && cmp_values_equal(j, w);
    json_decref(j);
    json_decref(w);
    return ok;
}

static void json_is_found_in_answers(void **state)
{
    (void)state;
    assert_true(extracts("{\"a\":1}", "{\"a\":1}"));
    assert_true(extracts("  \n{\"a\":1}\n ", "{\"a\":1}"));
    assert_true(extracts("Here it is:\n```json\n{\"a\": 2}\n```\nDone.", "{\"a\":2}"));
    assert_true(extracts("```\n[1, 2]\n```", "[1,2]"));
    assert_true(extracts("Sure! {\"a\": {\"b\": 3}} Hope that helps.", "{\"a\":{\"b\":3}}"));
    assert_true(extracts("no json here", NULL));
    assert_true(extracts("{\"a\": 1", NULL));
    assert_true(extracts("} backwards {", NULL));
    assert_true(extracts("```json\nnot json\n```", NULL));
    assert_true(extracts("", NULL));
    assert_true(extracts("{\"a\":1,\"a\":2}", NULL)); /* duplicate keys are not an answer */
}

static void equality_of_values(void **state)
{
    (void)state;
    json_t *a = json_loads("{\"n\":1,\"s\":\"x\",\"l\":[1,{\"k\":2.0}],\"o\":{\"p\":true,\"q\":null}}", 0, NULL);
    json_t *b = json_loads("{\"o\":{\"q\":null,\"p\":true},\"l\":[1.0,{\"k\":2}],\"s\":\"x\",\"n\":1.0}", 0, NULL);
    json_t *c = json_loads("{\"n\":1,\"s\":\"X\",\"l\":[1,{\"k\":2}],\"o\":{\"p\":true,\"q\":null}}", 0, NULL);
    json_t *d = json_loads("[2, 1]", 0, NULL), *e = json_loads("[1, 2]", 0, NULL);
    assert_true(cmp_values_equal(a, b));
    assert_false(cmp_values_equal(a, c));
    assert_false(cmp_values_equal(d, e));
    assert_false(cmp_values_equal(a, NULL));
    assert_true(cmp_values_equal(NULL, NULL));
    json_t *s1 = json_string("1"), *n1 = json_integer(1);
    assert_false(cmp_values_equal(s1, n1));
    json_decref(a), json_decref(b), json_decref(c), json_decref(d), json_decref(e), json_decref(s1), json_decref(n1);
}

static void requests_from_lines(void **state)
{
    (void)state;
    char err[200];
    int chat = -1;
    json_t *b = cmp_request("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true}", "m1", &chat, err,
                            sizeof err);
    assert_non_null(b);
    assert_int_equal(chat, 1);
    assert_string_equal(json_string_value(json_object_get(b, "model")), "m1");
    assert_null(json_object_get(b, "stream"));
    assert_int_equal(json_integer_value(json_object_get(b, "temperature")), 0);
    json_decref(b);
    b = cmp_request("{\"prompt\":\"x\",\"temperature\":0.7,\"model\":\"other\"}", "m2", &chat, err, sizeof err);
    assert_int_equal(chat, 0);
    assert_string_equal(json_string_value(json_object_get(b, "model")), "m2");
    assert_true(json_real_value(json_object_get(b, "temperature")) == 0.7);
    json_decref(b);
    assert_null(cmp_request("{\"input\":\"x\"}", "m", &chat, err, sizeof err));
    assert_non_null(strstr(err, "messages"));
    assert_null(cmp_request("[1]", "m", &chat, err, sizeof err));
    assert_null(cmp_request("{bad", "m", &chat, err, sizeof err));
    assert_null(cmp_request("{\"messages\":\"hi\"}", "m", &chat, err, sizeof err));

    json_t *ans = json_loads("{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"hey\"}}]}", 0, NULL);
    assert_string_equal(cmp_answer_text(ans), "hey");
    json_decref(ans);
    ans = json_loads("{\"choices\":[{\"text\":\"yo\"}]}", 0, NULL);
    assert_string_equal(cmp_answer_text(ans), "yo");
    json_decref(ans);
    assert_null(cmp_answer_text(NULL));
}

/* Ten items of three fields: B differs on 2 fields of one item and 1 of
 * another, fails to parse once, and once the request failed. */
static void agreement_over_all_fields(void **state)
{
    (void)state;
    cmp_report r;
    cmp_init(&r, NULL, 0);
    const char *same = "{\"name\":\"Ann\",\"age\":30,\"tags\":[\"a\"]}";
    for (int i = 0; i < 6; i++) cmp_add(&r, same, "```json\n{\"tags\":[\"a\"],\"age\":30.0,\"name\":\"Ann\"}\n```");
    cmp_add(&r, same, "{\"name\":\"Bob\",\"age\":31,\"tags\":[\"a\"]}");
    cmp_add(&r, same, "{\"name\":\"Ann\",\"age\":30,\"tags\":[\"b\"]}");
    cmp_add(&r, same, "I cannot answer that.");
    cmp_add(&r, same, NULL);
    assert_int_equal(r.items, 10);
    assert_int_equal(r.parsed[CMP_A], 10);
    assert_int_equal(r.parsed[CMP_B], 8);
    assert_int_equal(r.answered[CMP_B], 9);
    assert_int_equal(r.total, 30);
    assert_int_equal(r.agree, 30 - 2 - 1 - 3 - 3);
    assert_int_equal(r.items_identical, 6);
    assert_int_equal(r.nfields, 3);
    assert_string_equal(r.fields[0].name, "name");
    assert_int_equal(r.fields[0].agree, 7);
    assert_int_equal(r.fields[2].agree, 7);
    assert_int_equal(r.fields[1].agree, 7);
    json_t *j = cmp_report_json(&r, "f16", "q4", 0.7);
    assert_true(json_is_true(json_object_get(j, "pass")));
    assert_true(json_real_value(json_object_get(j, "agreement")) == 21.0 / 30);
    assert_true(json_real_value(json_object_get(json_object_get(json_object_get(j, "models"), "b"), "parse_rate")) ==
                0.8);
    json_decref(j);
    j = cmp_report_json(&r, "f16", "q4", 0.75);
    assert_false(json_is_true(json_object_get(j, "pass")));
    json_decref(j);
    cmp_free(&r);
}

/* Named fields: only those count; a field on one side only disagrees, on
 * neither agrees; extra fields are ignored. */
static void agreement_over_named_fields(void **state)
{
    (void)state;
    const char *fields[] = {"a", "b"};
    cmp_report r;
    cmp_init(&r, fields, 2);
    cmp_add(&r, "{\"a\":1,\"b\":2,\"c\":3}", "{\"a\":1,\"b\":2,\"c\":4}");
    cmp_add(&r, "{\"a\":1}", "{\"a\":1,\"b\":2}");
    cmp_add(&r, "{\"a\":1}", "{\"a\":1}");
    cmp_add(&r, "nothing", "nothing");
    assert_int_equal(r.total, 8);
    assert_int_equal(r.agree, 2 + 1 + 2);
    assert_int_equal(r.nfields, 2);
    assert_int_equal(r.items_identical, 2);
    cmp_free(&r);

    /* Neither side gave JSON, all fields by default: one disagreement. */
    cmp_init(&r, NULL, 0);
    cmp_add(&r, "x", NULL);
    assert_int_equal(r.total, 1);
    assert_int_equal(r.agree, 0);
    assert_true(cmp_agreement(&r) == 0);
    cmp_free(&r);
    cmp_init(&r, NULL, 0);
    assert_true(cmp_agreement(&r) == 1);
    cmp_free(&r);
}

static void latency_percentiles(void **state)
{
    (void)state;
    cmp_report r;
    cmp_init(&r, NULL, 0);
    for (int i = 1; i <= 100; i++) cmp_add_latency(&r, CMP_A, i);
    for (int i = 1; i <= 20; i++) cmp_add_latency(&r, CMP_B, 10.0 * i);
    assert_true(cmp_latency(&r, CMP_A, 0.5) == 50);
    assert_true(cmp_latency(&r, CMP_A, 0.95) == 95);
    assert_true(cmp_latency(&r, CMP_B, 0.5) == 100);
    assert_true(cmp_latency(&r, CMP_B, 0.95) == 190);
    json_t *j = cmp_report_json(&r, "a", "b", 0.95);
    json_t *d = json_object_get(j, "latency_diff_ms");
    assert_true(json_real_value(json_object_get(d, "p50")) == 50);
    assert_true(json_real_value(json_object_get(d, "p95")) == 95);
    json_decref(j);
    cmp_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(json_is_found_in_answers),   cmocka_unit_test(equality_of_values),
        cmocka_unit_test(requests_from_lines),        cmocka_unit_test(agreement_over_all_fields),
        cmocka_unit_test(agreement_over_named_fields), cmocka_unit_test(latency_percentiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
