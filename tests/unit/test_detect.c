/* Unit tests: policy/detect and policy/redact.  Check digits are computed here
 * with methods independent of the module's (the recursive ISO 7064 form, a
 * textbook Luhn), so a shared mistake cannot make both sides agree. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "policy/detect.h"
#include "policy/redact.h"

static detect_rules *rules;

static int setup(void **state)
{
    (void)state;
    static const char *const kw[] = {"机密", "Project Falcon", "a.b", NULL};
    static const char *const re[] = {"EMP-[0-9]{6}", "员工编号\\d{4}", NULL};
    char err[256];
    rules = detect_rules_new(kw, re, err, sizeof err);
    if (!rules) fprintf(stderr, "rules: %s\n", err);
    return rules ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    detect_rules_free(rules);
    return 0;
}

/* Appends the ISO 7064 MOD 11-2 check character to 17 digits, computed
 * recursively (p = (p + d) * 2 mod 11) rather than with the weight table. */
static void make_id(char out[19], const char *first17)
{
    int p = 0;
    for (int i = 0; i < 17; i++) p = ((p + first17[i] - '0') * 2) % 11;
    int c = (12 - p) % 11;
    memcpy(out, first17, 17);
    out[17] = c == 10 ? 'X' : (char)('0' + c);
    out[18] = 0;
}

static int luhn_valid(const char *digits)
{
    size_t n = strlen(digits);
    int sum = 0;
    for (size_t i = 0; i < n; i++) {
        int d = digits[n - 1 - i] - '0';
        if (i % 2) d = d * 2 > 9 ? d * 2 - 9 : d * 2;
        sum += d;
    }
    return sum % 10 == 0;
}

/* Finds the Luhn check digit for a payload by trying all ten. */
static void make_card(char *out, const char *payload)
{
    size_t n = strlen(payload);
    memcpy(out, payload, n);
    out[n + 1] = 0;
    for (char c = '0'; c <= '9'; c++) {
        out[n] = c;
        if (luhn_valid(out)) return;
    }
}

static int scan(const char *text, detect_hit *h, int max)
{
    return detect_text(rules, text, strlen(text), h, max);
}

/* Exactly one hit, of rule, covering exactly want inside text. */
static void expect_one(const char *text, const char *rule, const char *want)
{
    detect_hit h[4];
    int n = scan(text, h, 4);
    if (n != 1) fprintf(stderr, "in \"%s\": %d hits\n", text, n);
    assert_int_equal(n, 1);
    assert_string_equal(h[0].rule, rule);
    const char *at = strstr(text, want);
    assert_non_null(at);
    assert_int_equal(h[0].start, (size_t)(at - text));
    assert_int_equal(h[0].len, strlen(want));
}

static void expect_none(const char *text)
{
    detect_hit h[4];
    int n = scan(text, h, 4);
    if (n) fprintf(stderr, "in \"%s\": unexpected %s at %zu+%zu\n", text, h[0].rule, h[0].start, h[0].len);
    assert_int_equal(n, 0);
}

static void resident_ids(void **state)
{
    (void)state;
    char id[19], t[128];
    make_id(id, "11010119900307777");
    snprintf(t, sizeof t, "我的身份证号是%s。", id);
    expect_one(t, "cn_resident_id", id);
    /* Lower-case x and an X check character. */
    int found = 0;
    for (unsigned seq = 0; seq < 1000 && !found; seq++) {
        char first[18];
        snprintf(first, sizeof first, "44030519851231%03u", seq % 1000);
        make_id(id, first);
        found = id[17] == 'X';
    }
    assert_true(found);
    snprintf(t, sizeof t, "ID:%s end", id);
    expect_one(t, "cn_resident_id", id);
    id[17] = 'x';
    snprintf(t, sizeof t, "ID:%s end", id);
    expect_one(t, "cn_resident_id", id);
    /* A wrong check digit, an impossible date (check digit still right). */
    make_id(id, "11010119900307777");
    id[17] = id[17] == '0' ? '1' : '0';
    if (!luhn_valid(id)) expect_none(id);
    make_id(id, "11010119900230123");
    expect_none(id);
    make_id(id, "11010120000229123"); /* 2000 is a leap year */
    expect_one(id, "cn_resident_id", id);
    make_id(id, "11010119000229123"); /* 1900 is not */
    if (!luhn_valid(id)) expect_none(id);
    /* Inside a 20-digit run it is no ID (and 20 digits are no card). */
    make_id(id, "11010119900307777");
    snprintf(t, sizeof t, "ref 12%s", id);
    expect_none(t);
    snprintf(t, sizeof t, "ref %s99", id);
    expect_none(t);
}

static void mobiles(void **state)
{
    (void)state;
    expect_one("call 13800138000 now", "cn_mobile", "13800138000");
    expect_one("我的手机13912345678，谢谢", "cn_mobile", "13912345678");
    expect_one("tel: +86 138 0013 8000.", "cn_mobile", "+86 138 0013 8000");
    expect_one("tel: +86-138-0013-8000.", "cn_mobile", "+86-138-0013-8000");
    expect_one("tel 0086 13800138000", "cn_mobile", "0086 13800138000");
    expect_one("tel 8615912345678", "cn_mobile", "8615912345678");
    expect_one("手机：189-1234-5678", "cn_mobile", "189-1234-5678");
    expect_none("run 138001380001 rows"); /* 12 digits */
    expect_none("id 12800138000");        /* 1 then 2 is no mobile prefix */
    expect_none("138 0013-8000");         /* mixed separators */
    expect_none("order 913800138000");
}

static void emails(void **state)
{
    (void)state;
    expect_one("mail zhang.san+tag@mail.example.com.cn please", "email", "zhang.san+tag@mail.example.com.cn");
    expect_one("联系邮箱：li_si@sub.example.org。谢谢", "email", "li_si@sub.example.org");
    expect_one("(x-y@a-b.io)", "email", "x-y@a-b.io");
    expect_one("end: bob@example.com.", "email", "bob@example.com");
    expect_none("user@localhost and @handle and a@b");
}

static void bank_cards(void **state)
{
    (void)state;
    expect_one("card 4111 1111 1111 1111 ok", "bank_card", "4111 1111 1111 1111");
    expect_one("card 4111-1111-1111-1111", "bank_card", "4111-1111-1111-1111");
    expect_one("卡号4111111111111111。", "bank_card", "4111111111111111");
    expect_one("2 cards: 4111 1111 1111 1111 2 pcs", "bank_card", "4111 1111 1111 1111");
    char c[24], t[96], g[32];
    make_card(c, "622202123456789012"); /* 19 digits */
    snprintf(g, sizeof g, "%.4s %.4s %.4s %.4s %.3s", c, c + 4, c + 8, c + 12, c + 16);
    snprintf(t, sizeof t, "银行卡 %s 工行", g);
    expect_one(t, "bank_card", g);
    expect_one(c, "bank_card", c);
    /* A card behind four digits: the longer candidate fails its check, and
     * the card inside it is still found. */
    char prefixed[64], hidden[32];
    unsigned prefix = 1000;
    for (; prefix < 10000; prefix++) {
        int ok = 1;
        for (int keep = 16; keep >= 4 && ok; keep -= 4) {
            snprintf(hidden, sizeof hidden, "%u%.*s", prefix % 10000, keep, "4111111111111111");
            ok = !luhn_valid(hidden);
        }
        if (ok) break;
    }
    assert_true(prefix < 10000);
    snprintf(prefixed, sizeof prefixed, "ref %u-4111-1111-1111-1111 paid", prefix % 10000);
    expect_one(prefixed, "bank_card", "4111-1111-1111-1111");
    expect_none("card 4111 1111 1111 1112");
    expect_none("4111111111111112");
    /* An ID that also passes Luhn is reported once, as an ID. */
    char id[19];
    int found = 0;
    for (unsigned seq = 0; seq < 1000 && !found; seq++) {
        char first[18];
        snprintf(first, sizeof first, "32010219880808%03u", seq % 1000);
        make_id(id, first);
        found = id[17] != 'X' && luhn_valid(id);
    }
    assert_true(found);
    expect_one(id, "cn_resident_id", id);
}

/* A built-in is skipped for text whose longest stretch of digits, spaces,
 * '-' and '+' holds fewer digits than any of its matches needs.  The bound
 * is checked here against the patterns themselves: wherever one matches, the
 * stretch is at least its bound (and fuzz_detect checks it on any bytes). */
static void number_prefilter(void **state)
{
    (void)state;
    assert_int_equal(detect_digit_stretch("", 0), 0);
    assert_int_equal(detect_digit_stretch("no digits here", 14), 0);
    const char *t = "created:1796131782, id c31f1ffd5f97604a";
    assert_int_equal(detect_digit_stretch(t, strlen(t)), 10);
    t = "tel: +86 138-0013-8000.";
    assert_int_equal(detect_digit_stretch(t, strlen(t)), 13);
    t = "号是11010519491231002X，";
    assert_int_equal(detect_digit_stretch(t, strlen(t)), 17);
    static const char *const texts[] = {"13800138000", "+86 138 0013 8000", "189-1234-5678", "4222222222222",
                                        "4111 1111 1111 1", "4111-111111-1111", "11010519491231002X",
                                        "a 1 2 3 4 5 6 7 8 9 0 1 2 3 b", "1380013800", "411111111111"};
    int matched = 0;
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        size_t len = strlen(texts[k]);
        for (size_t i = 0; detect_builtin_pattern(i); i++) {
            int ec;
            PCRE2_SIZE eo;
            pcre2_code *c = pcre2_compile((PCRE2_SPTR)detect_builtin_pattern(i), PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
            assert_non_null(c);
            pcre2_match_data *md = pcre2_match_data_create(1, NULL);
            int rc = pcre2_match(c, (PCRE2_SPTR)texts[k], len, 0, 0, md, NULL);
            if (rc >= 0) {
                matched++;
                if (detect_digit_stretch(texts[k], len) < detect_builtin_min_digits(i))
                    fail_msg("pattern %zu matches '%s' below its bound %d", i, texts[k], detect_builtin_min_digits(i));
            }
            pcre2_match_data_free(md);
            pcre2_code_free(c);
        }
    }
    assert_true(matched >= 7); /* the bounds were tested against real matches */
    /* Numbers exactly at the bounds are still found. */
    expect_one("call 13800138000", "cn_mobile", "13800138000");
    expect_one("visa 4222222222222 ok", "bank_card", "4222222222222");
    char id[19];
    make_id(id, "11010519491231002");
    expect_one(id, "cn_resident_id", id);
}

static void keywords_and_regexes(void **state)
{
    (void)state;
    expect_one("这是机密文件", "keyword", "机密");
    expect_one("about PROJECT FALCON today", "keyword", "PROJECT FALCON");
    expect_one("see a.b here", "keyword", "a.b");
    expect_none("see axb here"); /* '.' in a keyword is literal */
    expect_one("badge EMP-123456", "regex:0", "EMP-123456");
    expect_one("员工编号0042号", "regex:1", "员工编号0042");
    /* Precedence and order: sorted by position, built-ins before keywords. */
    detect_hit h[8];
    assert_int_equal(scan("机密: bob@x.cn 13800138000 EMP-000001", h, 8), 4);
    assert_string_equal(h[0].rule, "keyword");
    assert_string_equal(h[1].rule, "email");
    assert_string_equal(h[2].rule, "cn_mobile");
    assert_string_equal(h[3].rule, "regex:0");
    /* The total is returned even when fewer slots are given. */
    assert_int_equal(scan("机密 机密 机密", h, 1), 3);
    assert_int_equal(scan("机密 机密 机密", NULL, 0), 3);
}

static void bad_config(void **state)
{
    (void)state;
    char err[256];
    const char *const re[] = {"ok", "([a-z", NULL};
    assert_null(detect_rules_new(NULL, re, err, sizeof err));
    assert_non_null(strstr(err, "regex 1"));
    assert_non_null(strstr(err, "offset"));
    assert_null(strchr(err, '\n'));
    const char *const kw[] = {"fine", "", NULL};
    assert_null(detect_rules_new(kw, NULL, err, sizeof err));
    assert_non_null(strstr(err, "keyword 1"));
    const char *const bad_utf8[] = {"\xff\xfe", NULL};
    assert_null(detect_rules_new(bad_utf8, NULL, err, sizeof err));
    assert_non_null(strstr(err, "keyword 0"));
    /* No config at all: built-ins only. */
    detect_rules *r = detect_rules_new(NULL, NULL, err, sizeof err);
    assert_non_null(r);
    detect_hit h;
    assert_int_equal(detect_text(r, "机密 a@b.cn", strlen("机密 a@b.cn"), &h, 1), 1);
    detect_rules_free(r);
}

static void no_false_positives(void **state)
{
    (void)state;
    expect_none("Order 2024-11-29 shipped on 2024/12/01 at 10:30, total ¥1,299.00 (USD 179.99).");
    expect_none("gpupool v1.12.3, llama.cpp b4215, CUDA 12.4.1, driver 550.54.15, build 20241129.");
    expect_none("IP 192.168.1.10:8080, port 11434, pid 123456, uptime 86400 s, 3.14159265358979");
    expect_none("订单号 202411290001，共 3 件，运费 12 元，电话区号 010。");
    expect_none("ratio 1/3, 50%, 2^10 = 1024, temp 36.6℃, 2024年11月29日");
    expect_none("email me at name at example dot com; @channel; me@");
    /* Invalid UTF-8 is scanned, never matched by UTF rules, never fatal. */
    const char junk[] = "\xff\xfe\x80 13800138000 \xe6\x9c \xc0\xaf";
    detect_hit h[2];
    assert_int_equal(detect_text(rules, junk, sizeof junk - 1, h, 2), 1);
    assert_int_equal(detect_text(rules, "", 0, h, 2), 0);
    assert_int_equal(detect_text(rules, NULL, 0, h, 2), 0);
}

static const char *chat_body =
    "{\"model\":\"qwen\",\"temperature\":0.2,\"messages\":["
    "{\"role\":\"system\",\"content\":\"You are a helpful assistant. 本对话内容机密。\"},"
    "{\"role\":\"developer\",\"content\":\"Answer in Chinese.\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"请联系 li_si@example.cn\"},"
    "{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x/13800138000.png\"}}]},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
    "\"function\":{\"name\":\"lookup\",\"arguments\":\"{\\\"phone\\\": 13912345678, "
    "\\\"note\\\": \\\"\\\\u673a\\\\u5bc6\\\"}\"}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"not found\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"lookup\",\"description\":\"a@b.cn\"}}]}";

static void requests(void **state)
{
    (void)state;
    json_t *j = json_loads(chat_body, 0, NULL);
    assert_non_null(j);
    detect_result res;
    assert_int_equal(detect_request(rules, j, &res), 0);
    assert_true(res.sensitive);
    assert_string_equal(res.first_rule, "keyword"); /* the system prompt */
    /* keyword (system), email (user part), mobile + escaped keyword (tool
     * arguments); not the image URL, not the tool definition. */
    assert_int_equal(res.hits, 4);
    json_decref(j);

    j = json_loads("{\"model\":\"m\",\"prompt\":[\"hi\",\"EMP-000042\"]}", 0, NULL);
    detect_request(rules, j, &res);
    assert_true(res.sensitive);
    assert_string_equal(res.first_rule, "regex:0");
    json_decref(j);
    j = json_loads("{\"model\":\"m\",\"input\":\"bob@example.com\"}", 0, NULL);
    detect_request(rules, j, &res);
    assert_string_equal(res.first_rule, "email");
    json_decref(j);
    j = json_loads("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],\"input\":[1,2]}",
                   0, NULL);
    detect_request(rules, j, &res);
    assert_false(res.sensitive);
    assert_int_equal(res.hits, 0);
    assert_string_equal(res.first_rule, "");
    json_decref(j);
    assert_int_equal(detect_request(rules, NULL, &res), 0);
    assert_false(res.sensitive);
}

static void redaction(void **state)
{
    (void)state;
    const char *t = "call 13800138000 or mail a@b.cn, 机密!";
    char *r = redact_text(rules, t, strlen(t), NULL);
    assert_string_equal(r, "call [REDACTED:cn_mobile] or mail [REDACTED:email], [REDACTED:keyword]!");
    free(r);
    size_t n;
    r = redact_text(rules, "nothing here", 12, &n);
    assert_string_equal(r, "nothing here");
    assert_int_equal(n, 12);
    free(r);
    /* A hit that shows only once the one that overlapped it is replaced
     * (a mobile number won the bytes a card's first groups shared with it):
     * redacted too, so the copy holds nothing a scan would find. */
    const char *shadowed = "{0555%2622-152-1523-5555-2622-1524-5555-1523-5}";
    r = redact_text(rules, shadowed, strlen(shadowed), &n);
    detect_hit left;
    assert_int_equal(detect_text(rules, r, n, &left, 1), 0);
    assert_non_null(strstr(r, "[REDACTED:bank_card]"));
    free(r);
    /* Many hits: past the stack array. */
    char many[2048] = "";
    for (int i = 0; i < 100; i++) strcat(many, "机密 ");
    r = redact_text(rules, many, strlen(many), NULL);
    assert_int_equal(strlen(r), 100 * strlen("[REDACTED:keyword] "));
    free(r);

    json_t *j = json_loads(chat_body, 0, NULL);
    json_t *red = redact_request(rules, j);
    assert_non_null(red);
    json_t *msgs = json_object_get(red, "messages");
    assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 0), "content")),
                        "You are a helpful assistant. 本对话内容[REDACTED:keyword]。");
    json_t *part = json_array_get(json_object_get(json_array_get(msgs, 2), "content"), 0);
    assert_string_equal(json_string_value(json_object_get(part, "text")), "请联系 [REDACTED:email]");
    json_t *call = json_array_get(json_object_get(json_array_get(msgs, 3), "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")),
                        "{\"phone\":[REDACTED:cn_mobile],\"note\":\"[REDACTED:keyword]\"}");
    assert_string_equal(json_string_value(json_object_get(red, "model")), "qwen");
    /* The original is untouched and the copy no longer detects anything. */
    detect_result res;
    detect_request(rules, j, &res);
    assert_int_equal(res.hits, 4);
    detect_request(rules, red, &res);
    assert_int_equal(res.hits, 0);
    json_decref(red);
    json_decref(j);
}

typedef struct worker_arg {
    const char *text;
    int want, bad;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    detect_hit h[8];
    for (int i = 0; i < 300; i++) {
        if (detect_text(rules, a->text, strlen(a->text), h, 8) != a->want) a->bad++;
        char *r = redact_text(rules, a->text, strlen(a->text), NULL);
        if (!r || strstr(r, "13800138000")) a->bad++;
        free(r);
    }
    return NULL;
}

static void threads(void **state)
{
    (void)state;
    static const char *texts[4] = {
        "机密 13800138000",
        "13800138000 and bob@example.com and 4111 1111 1111 1111",
        "我的身份证号是11010119900307777? no; 13800138000 EMP-123456",
        "员工编号1234 13800138000 PROJECT falcon",
    };
    worker_arg a[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        detect_hit h[8];
        a[i] = (worker_arg){texts[i], scan(texts[i], h, 8), 0};
        assert_true(a[i].want >= 2);
        assert_int_equal(pthread_create(&th[i], NULL, worker, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(a[i].bad, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(resident_ids),
        cmocka_unit_test(mobiles),
        cmocka_unit_test(emails),
        cmocka_unit_test(bank_cards),
        cmocka_unit_test(number_prefilter),
        cmocka_unit_test(keywords_and_regexes),
        cmocka_unit_test(bad_config),
        cmocka_unit_test(no_false_positives),
        cmocka_unit_test(requests),
        cmocka_unit_test(redaction),
        cmocka_unit_test(threads),
    };
    return cmocka_run_group_tests_name("detect", tests, setup, teardown);
}
