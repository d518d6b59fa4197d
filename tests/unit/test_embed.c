/* Unit tests: policy/embed, the built-in embedder and the normaliser.  The
 * similarity bounds here are properties the cache relies on (a changed
 * number or a negation must fall well below the default threshold), not
 * exact figures of the current features. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/cache.h"
#include "policy/embed.h"

static double cos_of(const char *a, const char *b)
{
    float x[EMBED_DIM], y[EMBED_DIM];
    assert_int_equal(embed_text(a, strlen(a), x), 0);
    assert_int_equal(embed_text(b, strlen(b), y), 0);
    double s = 0;
    for (int i = 0; i < EMBED_DIM; i++) s += (double)x[i] * y[i];
    return s;
}

static void expect_norm(const char *in, const char *want)
{
    size_t n = 0;
    char *got = embed_normalise(in, strlen(in), &n);
    assert_non_null(got);
    if (strcmp(got, want) != 0) fprintf(stderr, "normalise(\"%s\") = \"%s\", want \"%s\"\n", in, got, want);
    assert_string_equal(got, want);
    assert_int_equal(n, strlen(want));
    free(got);
}

static void normalise(void **state)
{
    (void)state;
    expect_norm("  Hello,   WORLD!! ", "hello world");
    expect_norm("ＨＥＬＬＯ，　ｗｏｒｌｄ！１２３", "hello world 123"); /* full-width forms, ideographic space */
    expect_norm("你好，世界。", "你好 世界");
    expect_norm("Don’t stop", "don't stop"); /* curly apostrophe inside a word is kept */
    expect_norm("'quoted' text", "quoted text");
    expect_norm("1,000 and 3.5 and 1,2", "1000 and 3.5 and 1 2");
    expect_norm("c++ and 50% of $5", "c++ and 50% of $5");
    expect_norm("ÀÉÎ ΑΒΓ АБВ Ł", "àéî αβγ абв ł");
    expect_norm("用Python写", "用python写");
    expect_norm("", "");
    expect_norm("?!。，", "");
    expect_norm("a\xff\xfe" "b \xe6\x9c", "a b"); /* invalid bytes are separators */
    /* Idempotent: the key hashes normalised text, which may be normalised again. */
    const char *t = "Ｗhat’s 1,000 × 2？ 请问：怎么办";
    char *once = embed_normalise(t, strlen(t), NULL);
    char *twice = embed_normalise(once, strlen(once), NULL);
    assert_string_equal(once, twice);
    free(once);
    free(twice);
}

static void deterministic_unit_vectors(void **state)
{
    (void)state;
    const char *texts[] = {"How do I reset my password?", "怎么重置密码？", "用Python读取CSV文件", "42", "x"};
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
        float a[EMBED_DIM], b[EMBED_DIM];
        assert_int_equal(embed_text(texts[k], strlen(texts[k]), a), 0);
        assert_int_equal(embed_text(texts[k], strlen(texts[k]), b), 0);
        assert_memory_equal(a, b, sizeof a);
        double s = 0;
        for (int i = 0; i < EMBED_DIM; i++) s += (double)a[i] * a[i];
        assert_true(fabs(s - 1.0) < 1e-5);
    }
}

static void empty_is_zero(void **state)
{
    (void)state;
    float v[EMBED_DIM];
    const char *texts[] = {"", "   ", "?!…。", NULL};
    for (int k = 0; texts[k]; k++) {
        assert_int_equal(embed_text(texts[k], strlen(texts[k]), v), 0);
        for (int i = 0; i < EMBED_DIM; i++) assert_true(v[i] == 0.0f);
    }
    assert_int_equal(embed_text(NULL, 0, v), 0);
}

static void same_meaning_close(void **state)
{
    (void)state;
    assert_true(cos_of("How do I reset my password?", "how do i reset my password") > 0.999);
    assert_true(cos_of("ＨＯＷ ｄｏ Ｉ reset my password？", "How do I reset my password?") > 0.999);
    assert_true(cos_of("怎么重置密码？", "如何重置密码") > 0.999);       /* variants of "how" */
    assert_true(cos_of("用Python写代码", "用 python 写代码") > 0.999);  /* mixed scripts, spacing */
    assert_true(cos_of("What's the speed of light?", "What is the speed of light") > 0.85);
    assert_true(cos_of("给我五个点子", "给我5个点子") > 0.9);            /* numerals and digits agree */
}

static void near_misses_apart(void **state)
{
    (void)state;
    double thr = CACHE_DEFAULT_THRESHOLD;
    assert_true(cos_of("Book a table for 2 people", "Book a table for 4 people") < 0.8);
    assert_true(cos_of("订两张票", "订三张票") < 0.8);
    assert_true(cos_of("二十五个", "二十六个") < 0.8);
    assert_true(cos_of("I can log in to the VPN", "I can't log in to the VPN") < 0.9);
    assert_true(cos_of("I can log in to the VPN", "I cannot log in to the VPN") < 0.9);
    assert_true(cos_of("我能登录VPN", "我不能登录VPN") < 0.9);
    assert_true(cos_of("The server is running", "The server is not running") < 0.9);
    assert_true(cos_of("Convert Celsius to Fahrenheit", "Convert Fahrenheit to Celsius") < thr);
    assert_true(cos_of("What is the capital of France?", "What is the capital of Germany?") < thr);
    assert_true(cos_of("how old is he?", "how old are you?") < thr);
    assert_true(cos_of("hello", "完全不同的句子") < 0.1);
}

static void model_answers(void **state)
{
    (void)state;
    json_t *body = embed_request_body("bge-m3", "hello");
    assert_string_equal(json_string_value(json_object_get(body, "model")), "bge-m3");
    assert_string_equal(json_string_value(json_object_get(body, "input")), "hello");
    json_decref(body);

    float *v = NULL;
    json_t *ok = json_loads("{\"data\":[{\"embedding\":[3,0,4],\"index\":0}]}", 0, NULL);
    assert_int_equal(embed_parse_response(ok, &v), 3);
    assert_true(fabsf(v[0] - 0.6f) < 1e-6f && v[1] == 0 && fabsf(v[2] - 0.8f) < 1e-6f);
    free(v);
    json_decref(ok);
    static const char *const bad[] = {"{}", "{\"data\":[]}", "{\"data\":[{\"embedding\":[]}]}",
                                      "{\"data\":[{\"embedding\":[0,0]}]}",
                                      "{\"data\":[{\"embedding\":[1,\"x\"]}]}", "[1,2]", NULL};
    for (int i = 0; bad[i]; i++) {
        json_t *j = json_loads(bad[i], 0, NULL);
        assert_int_equal(embed_parse_response(j, &v), -1);
        assert_null(v);
        json_decref(j);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(normalise),
        cmocka_unit_test(deterministic_unit_vectors),
        cmocka_unit_test(empty_is_zero),
        cmocka_unit_test(same_meaning_close),
        cmocka_unit_test(near_misses_apart),
        cmocka_unit_test(model_answers),
    };
    return cmocka_run_group_tests_name("embed", tests, NULL, NULL);
}
