/* Unit tests: a request's classification (private or normal) from the
 * detectors, the client's header and the API key's default. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "policy/classify.h"

static json_t *chat(const char *text)
{
    return json_pack("{s:s, s:[{s:s, s:s}]}", "model", "m", "messages", "role", "user", "content", text);
}

static void detectors_header_and_key(void **state)
{
    (void)state;
    const char *kw[] = {"项目代号", NULL};
    char err[200];
    detect_rules *r = detect_rules_new(kw, NULL, err, sizeof err);
    assert_non_null(r);
    classification c;
    json_t *plain = chat("what is the weather like"), *phone = chat("call me at 13812345678"),
           *secret = chat("关于项目代号的进度");
    assert_int_equal(classify_request(r, plain, NULL, 0, &c), 0);
    assert_false(c.is_private);
    assert_string_equal(c.rule, "");
    assert_int_equal(classify_request(r, phone, NULL, 0, &c), 0);
    assert_true(c.is_private);
    assert_string_equal(c.rule, "cn_mobile");
    assert_int_equal(classify_request(r, secret, "normal", 0, &c), 0);
    assert_true(c.is_private); /* "normal" does not undo a detector */
    assert_string_equal(c.rule, "keyword");
    assert_int_equal(classify_request(r, plain, "private", 0, &c), 0);
    assert_true(c.is_private);
    assert_string_equal(c.rule, "header");
    assert_int_equal(classify_request(r, plain, "Normal", 1, &c), 0);
    assert_true(c.is_private); /* nor a key's default */
    assert_string_equal(c.rule, "api_key");
    assert_int_equal(classify_request(r, plain, "secret", 0, &c), -1);
    /* no rules at all: only the header and the key decide */
    assert_int_equal(classify_request(NULL, phone, NULL, 0, &c), 0);
    assert_false(c.is_private);
    json_decref(plain);
    json_decref(phone);
    json_decref(secret);
    detect_rules_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(detectors_header_and_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
