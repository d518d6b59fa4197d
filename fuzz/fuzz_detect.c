/* fuzz_detect: libFuzzer target for policy/detect and policy/redact.  Any
 * bytes (invalid UTF-8 included) must scan without a crash or sanitizer
 * report, give in-range, sorted, disjoint hits, and redact to a string with
 * no hit left; input that parses as JSON also goes through the request walk.
 * Wherever a built-in pattern matches, the text's digit stretch must reach
 * that pattern's bound (text below it is never scanned for it).
 * Built and run by fuzz/run_detect.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "policy/detect.h"
#include "policy/redact.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static detect_rules *rules;
static pcre2_code *builtin[8];
static pcre2_match_data *md;

static void check_bounds(const char *t, size_t n)
{
    int stretch = detect_digit_stretch(t, n);
    for (size_t i = 0; builtin[i]; i++)
        if (stretch < detect_builtin_min_digits(i) && pcre2_match(builtin[i], (PCRE2_SPTR)t, n, 0, 0, md, NULL) >= 0)
            abort();
}

static void check_hits(const char *t, size_t n)
{
    detect_hit h[64];
    int k = detect_text(rules, t, n, h, 64);
    if (k < 0) abort();
    for (int i = 0; i < k && i < 64; i++) {
        if (!h[i].len || h[i].start + h[i].len > n) abort();
        if (i && h[i].start < h[i - 1].start + h[i - 1].len) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!rules) {
        static const char *const kw[] = {"机密", "Secret Project", "a+b", NULL};
        static const char *const re[] = {"EMP-\\d{6}", "(?i)token[=:]\\s*\\w+", "x*", NULL};
        rules = detect_rules_new(kw, re, NULL, 0);
        if (!rules) abort();
        for (size_t i = 0; i < 7 && detect_builtin_pattern(i); i++) {
            int ec;
            PCRE2_SIZE eo;
            builtin[i] = pcre2_compile((PCRE2_SPTR)detect_builtin_pattern(i), PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
            if (!builtin[i]) abort();
        }
        md = pcre2_match_data_create(1, NULL);
    }
    const char *t = (const char *)data;
    check_hits(t, size);
    check_bounds(t, size);
    size_t rn;
    char *red = redact_text(rules, t, size, &rn);
    if (!red) abort();
    free(red);

    json_t *j = json_loadb(t, size, JSON_DECODE_ANY, NULL);
    if (j) {
        detect_result res;
        if (detect_request(rules, j, &res) != 0) abort();
        json_t *rj = redact_request(rules, j);
        if (!rj) abort();
        json_decref(rj);
        json_decref(j);
    }
    return 0;
}
