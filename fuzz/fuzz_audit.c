/* fuzz_audit: libFuzzer target for the audit and webhook parsers of outside
 * data: api/audit_rec (request ids, redacted capped bodies, ?since=) and
 * api/webhook_rec (callback URLs).  Any bytes must pass without a crash or
 * sanitizer report; a redacted body must fit its cap and hold no hit of the
 * rules where they look (a JSON body's strings, any other body's text); an accepted URL must have a host without '/', '@' or whitespace.
 * Built and run by fuzz/run_audit.sh. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/audit_rec.h"
#include "api/webhook_rec.h"
#include "policy/detect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static detect_rules *rules;

/* Whether the detectors find anything where they look in a redacted body:
 * in each string and integer of a JSON object or array (keys too, escapes
 * decoded, as the redaction sees them), or anywhere in any other body. */
static int json_hit(const json_t *j)
{
    detect_hit h;
    if (json_is_string(j)) return detect_text(rules, json_string_value(j), json_string_length(j), &h, 1) > 0;
    if (json_is_integer(j)) { /* the audit redacts numbers too (a phone sent as one) */
        char num[32];
        int n = snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
        return detect_text(rules, num, (size_t)n, &h, 1) > 0;
    }
    const char *k;
    json_t *v;
    size_t i;
    if (json_is_object(j))
        json_object_foreach((json_t *)j, k, v) if (detect_text(rules, k, strlen(k), &h, 1) > 0 || json_hit(v)) return 1;
    if (json_is_array(j))
        json_array_foreach(j, i, v) if (json_hit(v)) return 1;
    return 0;
}

static int shows_hit(const char *out, size_t n)
{
    json_t *j = n && (out[0] == '{' || out[0] == '[') ? json_loadb(out, n, 0, NULL) : NULL;
    detect_hit h;
    int hit = j ? json_hit(j) : detect_text(rules, out, n, &h, 1) > 0;
    json_decref(j);
    return hit;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!rules) {
        static const char *const kw[] = {"Secret Project", NULL};
        rules = detect_rules_new(kw, NULL, NULL, 0);
        if (!rules) abort();
    }
    const char *t = (const char *)data;
    size_t cap = size ? data[0] % 200 : 0;
    for (int raw = 0; raw < 2; raw++) {
        int cut;
        char *out = audit_redact_body(rules, t, size, size > 1 && data[1] & 1, cap, raw, &cut);
        if (!out) abort();
        size_t n = strlen(out);
        if (n > cap) abort();
        /* what is left whole was redacted, so a rescan of an uncut body finds
         * nothing (a cut one may end in part of a placeholder) */
        if (!cut && shows_hit(out, n) && !memchr(t, 0, size)) abort();
        free(out);
    }
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    (void)audit_request_id_ok(s);
    int64_t since;
    (void)audit_parse_since(s, 1700000000000LL, &since);
    char host[256], why[200];
    if (!webhook_url_check(s, host, sizeof host, why, sizeof why)) {
        if (!*host || strpbrk(host, "/@ \t\r\n")) abort();
    }
    char task[64];
    audit_task_of("POST", "/v1/tasks", NULL, s, size, task, sizeof task);
    free(s);
    return 0;
}
