/* policy/detect: finds sensitive data in request text.  Owns the rule set
 * (built-in PRC resident ID, PRC mobile, e-mail and bank-card detectors plus
 * configured keywords and PCRE2 regexes), compiled once and then immutable, so
 * one detect_rules can be shared by every thread; and the list of request
 * fields that are scanned.  Pure: no I/O, no logging, no global state.
 * Redaction of what is found lives in policy/redact.h.  See docs/privacy.md. */
#ifndef GPUPOOL_DETECT_H
#define GPUPOOL_DETECT_H

#include <jansson.h>
#include <stddef.h>

typedef struct detect_rules detect_rules;

/* keywords and regexes are NULL-terminated lists (either may be NULL).
 * Keywords match literally and case-insensitively (Unicode-aware); regexes
 * are PCRE2 syntax, compiled with UTF and UCP.  Returns NULL with a one-line
 * reason in err (which entry, PCRE2's message and offset) on a bad entry. */
detect_rules *detect_rules_new(const char *const *keywords, const char *const *regexes, char *err,
                               size_t errlen);
void detect_rules_free(detect_rules *r);
/* The built-in rules' PCRE2 patterns in their order (before each check, such
 * as Luhn's, confirms a match), for comparing with other tools; NULL past
 * the last.  Compiled without UTF: they match bytes. */
const char *detect_builtin_pattern(size_t i);
/* The fewest digits a match of built-in i holds within one stretch of
 * digits, spaces, '-' and '+'; 0 when there is no such bound.  Text whose
 * detect_digit_stretch is smaller cannot match it, and is not scanned for it. */
int detect_builtin_min_digits(size_t i);
/* The most digits in one stretch of digits, spaces, '-' and '+' of s. */
int detect_digit_stretch(const char *s, size_t len);

/* rule is one of "cn_resident_id", "cn_mobile", "bank_card", "email",
 * "keyword", "regex:<index in the config list>"; it points into the rules and
 * lives as long as they do.  start/len are byte offsets into the text. */
typedef struct detect_hit {
    const char *rule;
    size_t start, len;
} detect_hit;

/* Scans len bytes of UTF-8 (invalid sequences never match and never crash).
 * Hits never overlap: where two rules claim overlapping bytes the one earlier
 * in the order above wins.  Fills up to max_hits hits in text order and
 * returns how many there are in all (possibly more than max_hits), or -1 when
 * memory ran out. */
int detect_text(const detect_rules *r, const char *text, size_t len, detect_hit *hits, int max_hits);

typedef struct detect_result {
    int sensitive;       /* 1 when any scanned field had a hit */
    char first_rule[64]; /* rule of the first hit in scan order, "" when none */
    int hits;            /* hits over all scanned fields */
} detect_result;

/* Scans every user-supplied text field of an OpenAI chat, completion or
 * embedding body (see detect_walk_request).  Returns 0, or -1 when memory ran
 * out; then out says sensitive with first_rule "error", so a caller that only
 * looks at out fails closed. */
int detect_request(const detect_rules *r, const json_t *openai_body, detect_result *out);

/* The one definition of which fields are scanned, shared with redaction:
 * messages[].content (string, or parts' "text"), messages[].tool_calls[]
 * .function.arguments, messages[].function_call.arguments, "prompt" and
 * "input" (string or array of strings).  System and developer messages are
 * messages like any other.  fn gets the string node and the text to scan,
 * which for tool arguments holding \u escapes is the decoded JSON (so escaped
 * CJK keywords are still seen).  A non-zero return from fn stops the walk and
 * is returned; -1 also means memory ran out. */
typedef int (*detect_field_fn)(json_t *field, const char *text, size_t len, void *ctx);
int detect_walk_request(const json_t *openai_body, detect_field_fn fn, void *ctx);

#endif
