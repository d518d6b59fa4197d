/* policy/detect: see detect.h.  Each rule is one compiled PCRE2 pattern; the
 * built-in number rules find candidates with a pattern and then confirm them
 * in C (check digit, birth date, Luhn), because a regex cannot do arithmetic
 * and an unchecked 16-digit run is as likely an order number as a card. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "policy/detect.h"

#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum check { CHECK_NONE, CHECK_RESIDENT_ID, CHECK_LUHN };

typedef struct rule {
    pcre2_code *code;
    char name[32];
    enum check check;
    int needs_at; /* e-mail: text without '@' is skipped with one memchr */
    int min_digits; /* a number: skipped when detect_digit_stretch is smaller */
} rule;

struct detect_rules {
    rule *rules; /* in precedence order: built-ins, keywords, regexes */
    int n;
};

/* The built-ins are ASCII-only patterns compiled without UTF: byte matching is
 * faster, invalid UTF-8 cannot upset it, and a CJK character's bytes are never
 * digits or e-mail characters, so "号是110101..." still has a boundary.  The
 * (?<![0-9]) / (?![0-9]) guards stop a longer digit run from yielding a
 * shorter number.  Precedence is the order of this table. */
static const struct builtin {
    const char *name;
    enum check check;
    /* Every match is one stretch of digits, spaces, '-' and '+' (an id's
     * final X ends it) with at least this many digits: 17 for an id, 11 for
     * a mobile number, 13 for a card.  0: no such bound. */
    int min_digits;
    const char *pattern;
} builtins[] = {
    {"cn_resident_id", CHECK_RESIDENT_ID, 17, "(?<![0-9])[1-9][0-9]{16}[0-9Xx](?![0-9])"},
    /* 11 digits 1[3-9]..., optional +86/0086/86, plain or 3-4-4 with one
     * consistent separator. */
    {"cn_mobile", CHECK_NONE, 11,
     "(?<![0-9])(?:(?:\\+|00)?86[ -]?)?1[3-9][0-9](?:[0-9]{8}|([ -])[0-9]{4}\\1[0-9]{4})(?![0-9])"},
    /* Contiguous, or the groupings cards are printed in (4-4-4-4[-3], 4-6-5,
     * 4-6-4) with one consistent separator; free-form separators would turn
     * "2024-11-29 1234..." into candidates. */
    {"bank_card", CHECK_LUHN, 13,
     "(?<![0-9])(?:[0-9]{13,19}"
     "|[0-9]{4}([ -])[0-9]{4}\\1[0-9]{4}\\1[0-9]{1,4}(?:\\1[0-9]{1,4})?"
     "|[0-9]{4}([ -])[0-9]{6}\\2[0-9]{4,5})(?![0-9])"},
    {"email", CHECK_NONE, 0,
     "(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\\.[A-Za-z0-9-]+)*"
     "\\.[A-Za-z]{2,63}(?![A-Za-z0-9-])"},
};
enum { N_BUILTIN = sizeof builtins / sizeof builtins[0] };

const char *detect_builtin_pattern(size_t i) { return i < N_BUILTIN ? builtins[i].pattern : NULL; }
int detect_builtin_min_digits(size_t i) { return i < N_BUILTIN ? builtins[i].min_digits : 0; }

int detect_digit_stretch(const char *s, size_t len)
{
    int best = 0, run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((unsigned)(c - '0') < 10u) {
            if (++run > best) best = run;
        } else if (c != ' ' && c != '-' && c != '+') {
            run = 0;
        }
    }
    return best;
}

/* Configured text is UTF-8: caseless matching must fold beyond ASCII, and
 * MATCH_INVALID_UTF makes arbitrary request bytes safe to scan. */
#define UTF_OPTS (PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF)

static pcre2_code *compile(const char *pat, size_t n, uint32_t opts, char *msg, size_t msglen)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)pat, n, opts, &ec, &eo, NULL);
    if (!c) {
        PCRE2_UCHAR m[256];
        if (pcre2_get_error_message(ec, m, sizeof m) < 0) snprintf((char *)m, sizeof m, "error %d", ec);
        snprintf(msg, msglen, "%s at offset %zu", (char *)m, (size_t)eo);
        return NULL;
    }
    /* Without JIT support the interpreter does the same job, only slower. */
    (void)pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
    return c;
}

static int by_length_desc(const void *a, const void *b)
{
    size_t la = strlen(*(const char *const *)a), lb = strlen(*(const char *const *)b);
    return la < lb ? 1 : la > lb ? -1 : 0;
}

/* All keywords become one alternation, so the text is scanned once however
 * many there are.  Longest first, so "机密文件" is reported whole rather than
 * as "机密".  Every ASCII non-alphanumeric is escaped, which PCRE2 defines as
 * a literal; UTF-8 bytes pass through.  Returns NULL with err set. */
static pcre2_code *compile_keywords(const char *const *kw, size_t n, char *err, size_t errlen)
{
    char m[320];
    for (size_t i = 0; i < n; i++) {
        if (!kw[i][0]) {
            snprintf(err, errlen, "keyword %zu is empty", i);
            return NULL;
        }
        pcre2_code *one = compile(kw[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_LITERAL, m, sizeof m);
        if (!one) {
            snprintf(err, errlen, "keyword %zu: %s", i, m);
            return NULL;
        }
        pcre2_code_free(one);
    }
    const char **sorted = malloc(sizeof *sorted * n);
    size_t total = 1;
    for (size_t i = 0; i < n; i++) total += 2 * strlen(kw[i]) + 1;
    char *pat = malloc(total);
    if (!sorted || !pat) {
        free(sorted);
        free(pat);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    memcpy(sorted, kw, sizeof *sorted * n);
    qsort(sorted, n, sizeof *sorted, by_length_desc);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (i) pat[o++] = '|';
        for (const unsigned char *p = (const unsigned char *)sorted[i]; *p; p++) {
            if (*p < 0x80 && !(*p >= '0' && *p <= '9') && !((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z'))
                pat[o++] = '\\';
            pat[o++] = (char)*p;
        }
    }
    pcre2_code *c = compile(pat, o, UTF_OPTS | PCRE2_CASELESS, m, sizeof m);
    if (!c) snprintf(err, errlen, "keywords: %s", m);
    free(pat);
    free(sorted);
    return c;
}

detect_rules *detect_rules_new(const char *const *keywords, const char *const *regexes, char *err,
                               size_t errlen)
{
    char scratch[8];
    if (!err || !errlen) err = scratch, errlen = sizeof scratch;
    err[0] = 0;
    size_t nkw = 0, nre = 0;
    while (keywords && keywords[nkw]) nkw++;
    while (regexes && regexes[nre]) nre++;
    detect_rules *r = calloc(1, sizeof *r);
    if (r) r->rules = calloc(N_BUILTIN + 1 + nre, sizeof *r->rules);
    if (!r || !r->rules) {
        free(r);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    char m[320];
    for (int i = 0; i < N_BUILTIN; i++) {
        rule *ru = &r->rules[r->n];
        ru->code = compile(builtins[i].pattern, PCRE2_ZERO_TERMINATED, 0, m, sizeof m);
        if (!ru->code) {
            snprintf(err, errlen, "built-in %s: %s", builtins[i].name, m);
            goto fail;
        }
        snprintf(ru->name, sizeof ru->name, "%s", builtins[i].name);
        ru->check = builtins[i].check;
        ru->needs_at = !strcmp(ru->name, "email");
        ru->min_digits = builtins[i].min_digits;
        r->n++;
    }
    if (nkw) {
        rule *ru = &r->rules[r->n];
        if (!(ru->code = compile_keywords(keywords, nkw, err, errlen))) goto fail;
        snprintf(ru->name, sizeof ru->name, "keyword");
        r->n++;
    }
    for (size_t i = 0; i < nre; i++) {
        rule *ru = &r->rules[r->n];
        ru->code = compile(regexes[i], PCRE2_ZERO_TERMINATED, UTF_OPTS, m, sizeof m);
        if (!ru->code) {
            snprintf(err, errlen, "regex %zu (%.40s): %s", i, regexes[i], m);
            goto fail;
        }
        snprintf(ru->name, sizeof ru->name, "regex:%zu", i);
        r->n++;
    }
    return r;
fail:
    detect_rules_free(r);
    return NULL;
}

void detect_rules_free(detect_rules *r)
{
    if (!r) return;
    for (int i = 0; i < r->n; i++) pcre2_code_free(r->rules[i].code);
    free(r->rules);
    free(r);
}

/* ---- confirming candidates ---- */

static int leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

/* GB 11643: digits 7-14 are the birth date, the 18th is ISO 7064 MOD 11-2. */
static int resident_id_ok(const char *s)
{
    static const int w[17] = {7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2};
    int sum = 0;
    for (int i = 0; i < 17; i++) sum += (s[i] - '0') * w[i];
    char want = "10X98765432"[sum % 11];
    char got = s[17] == 'x' ? 'X' : s[17];
    if (got != want) return 0;
    int y = (s[6] - '0') * 1000 + (s[7] - '0') * 100 + (s[8] - '0') * 10 + (s[9] - '0');
    int mo = (s[10] - '0') * 10 + (s[11] - '0');
    int d = (s[12] - '0') * 10 + (s[13] - '0');
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 1900 || y > 2099 || mo < 1 || mo > 12 || d < 1) return 0;
    return d <= mdays[mo - 1] + (mo == 2 && leap(y));
}

static int luhn_ok(const char *s, size_t n)
{
    int sum = 0, digits = 0;
    for (size_t i = n; i-- > 0;) {
        if (s[i] < '0' || s[i] > '9') continue;
        int v = s[i] - '0';
        if (digits++ & 1) v = v * 2 > 9 ? v * 2 - 9 : v * 2;
        sum += v;
    }
    return digits >= 13 && digits <= 19 && sum % 10 == 0;
}

/* Returns the confirmed length of the candidate at s (n bytes), or 0.  A
 * grouped card that fails is retried without its last group: in "4111 1111
 * 1111 1111 2 pcs" the pattern greedily took the "2". */
static size_t confirm(enum check c, const char *s, size_t n)
{
    if (c == CHECK_RESIDENT_ID) return resident_id_ok(s) ? n : 0;
    if (c != CHECK_LUHN) return n;
    while (n) {
        if (luhn_ok(s, n)) return n;
        size_t cut = n;
        while (cut && s[cut - 1] >= '0' && s[cut - 1] <= '9') cut--;
        if (!cut) return 0; /* contiguous: nothing to drop */
        n = cut - 1;
    }
    return 0;
}

/* ---- collecting hits ---- */

typedef struct hvec {
    detect_hit *v;
    int n, cap;
} hvec;

static int hvec_push(hvec *h, const char *rule_name, size_t start, size_t len)
{
    if (h->n == h->cap) {
        int cap = h->cap ? h->cap * 2 : 16;
        detect_hit *v = realloc(h->v, sizeof *v * (size_t)cap);
        if (!v) return -1;
        h->v = v, h->cap = cap;
    }
    h->v[h->n++] = (detect_hit){rule_name, start, len};
    return 0;
}

/* Keeps what is accepted and adds the candidates that overlap none of it;
 * both lists are sorted and disjoint, so one merge pass does it. */
static int merge(hvec *acc, const hvec *cand, hvec *tmp)
{
    tmp->n = 0;
    int i = 0;
    for (int j = 0; j < cand->n; j++) {
        const detect_hit *c = &cand->v[j];
        for (; i < acc->n && acc->v[i].start + acc->v[i].len <= c->start; i++)
            if (hvec_push(tmp, acc->v[i].rule, acc->v[i].start, acc->v[i].len) < 0) return -1;
        if (i < acc->n && acc->v[i].start < c->start + c->len) continue;
        if (hvec_push(tmp, c->rule, c->start, c->len) < 0) return -1;
    }
    for (; i < acc->n; i++)
        if (hvec_push(tmp, acc->v[i].rule, acc->v[i].start, acc->v[i].len) < 0) return -1;
    hvec t = *acc;
    *acc = *tmp, *tmp = t;
    return 0;
}

/* Next offset after an empty match, on a character boundary: continuation
 * bytes can never start a match, so skipping them is always safe. */
static size_t step(const char *s, size_t len, size_t off)
{
    off++;
    while (off < len && ((unsigned char)s[off] & 0xC0) == 0x80) off++;
    return off;
}

/* One rule over the whole text, candidates into cand.  A match that PCRE2
 * gives up on (match/heap limit on a pathological custom regex) marks the
 * rest of the text as a hit: failing open would let data through. */
static int scan_rule(const rule *ru, const char *text, size_t len, pcre2_match_data *md, hvec *cand)
{
    size_t off = 0;
    while (off <= len) {
        int rc = pcre2_match(ru->code, (PCRE2_SPTR)text, len, off, 0, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(ru->code, (PCRE2_SPTR)text, len, off, PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc == PCRE2_ERROR_NOMEMORY) return -1;
        if (rc < 0) return off < len ? hvec_push(cand, ru->name, off, len - off) : 0;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (e <= s || e <= off) { /* empty, or \K games: never report, always progress */
            off = step(text, len, e > off ? e : off);
            continue;
        }
        size_t n = confirm(ru->check, text + s, e - s);
        if (n && hvec_push(cand, ru->name, s, n) < 0) return -1;
        /* Go on right after what was kept: a candidate that failed its check,
         * or the groups a Luhn check dropped, may hold the start of a real
         * one (1523-4111-1111-1111-1111 hides a card). */
        off = n ? s + n : step(text, len, s);
    }
    return 0;
}

static int collect(const detect_rules *r, const char *text, size_t len, hvec *acc)
{
    hvec cand = {0}, tmp = {0};
    /* One ovector pair is all we read; captures are only backreferences. */
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    int rc = md ? 0 : -1;
    int has_at = len && memchr(text, '@', len) != NULL;
    /* Most text (prose, an answer's JSON around it) has no number long enough
     * for any built-in: one pass here saves their three scans. */
    int digits = detect_digit_stretch(text, len);
    for (int i = 0; i < r->n && rc == 0; i++) {
        if (r->rules[i].needs_at && !has_at) continue;
        if (digits < r->rules[i].min_digits) continue;
        cand.n = 0;
        rc = scan_rule(&r->rules[i], text, len, md, &cand);
        if (rc || !cand.n) continue;
        if (acc->n) {
            rc = merge(acc, &cand, &tmp);
        } else {
            hvec t = *acc;
            *acc = cand, cand = t;
        }
    }
    pcre2_match_data_free(md);
    free(cand.v);
    free(tmp.v);
    return rc;
}

int detect_text(const detect_rules *r, const char *text, size_t len, detect_hit *hits, int max_hits)
{
    if (!r || (!text && len)) return 0;
    hvec acc = {0};
    if (collect(r, text ? text : "", len, &acc) < 0) {
        free(acc.v);
        return -1;
    }
    for (int i = 0; i < acc.n && i < max_hits; i++) hits[i] = acc.v[i];
    int n = acc.n;
    free(acc.v);
    return n;
}

/* ---- requests ---- */

/* Tool arguments are JSON text; a client that escapes non-ASCII writes 机密
 * as \u673a\u5bc6, which no keyword would match, so such text is decoded and
 * re-encoded (raw UTF-8, numbers kept) before it is scanned. */
static int visit(json_t *s, int is_args, detect_field_fn fn, void *ctx)
{
    if (!json_is_string(s)) return 0;
    const char *t = json_string_value(s);
    size_t n = json_string_length(s);
    if (is_args && memmem(t, n, "\\u", 2)) {
        json_t *j = json_loadb(t, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (j) {
            char *d = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
            json_decref(j);
            if (!d) return -1;
            int rc = fn(s, d, strlen(d), ctx);
            free(d);
            return rc;
        }
    }
    return fn(s, t, n, ctx);
}

static int visit_list(json_t *v, detect_field_fn fn, void *ctx)
{
    if (!json_is_array(v)) return visit(v, 0, fn, ctx);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        int rc = visit(e, 0, fn, ctx);
        if (rc) return rc;
    }
    return 0;
}

static int visit_message(json_t *m, detect_field_fn fn, void *ctx)
{
    int rc = 0;
    json_t *c = json_object_get(m, "content"), *e;
    size_t i;
    if (json_is_array(c)) {
        json_array_foreach(c, i, e)
        {
            if ((rc = visit(json_is_object(e) ? json_object_get(e, "text") : e, 0, fn, ctx))) return rc;
        }
    } else if ((rc = visit(c, 0, fn, ctx))) {
        return rc;
    }
    json_array_foreach(json_object_get(m, "tool_calls"), i, e)
    {
        json_t *f = json_object_get(e, "function");
        if ((rc = visit(json_object_get(f, "arguments"), 1, fn, ctx))) return rc;
    }
    return visit(json_object_get(json_object_get(m, "function_call"), "arguments"), 1, fn, ctx);
}

int detect_walk_request(const json_t *openai_body, detect_field_fn fn, void *ctx)
{
    /* jansson's getters take const and hand back mutable nodes; redaction
     * walks its own deep copy, so nothing the caller passed is changed. */
    if (!json_is_object(openai_body)) return 0;
    size_t i;
    json_t *m;
    int rc;
    json_array_foreach(json_object_get(openai_body, "messages"), i, m)
    {
        if (json_is_object(m) && (rc = visit_message(m, fn, ctx))) return rc;
    }
    if ((rc = visit_list(json_object_get(openai_body, "prompt"), fn, ctx))) return rc;
    return visit_list(json_object_get(openai_body, "input"), fn, ctx);
}

typedef struct req_scan {
    const detect_rules *r;
    detect_result *out;
} req_scan;

static int scan_field(json_t *field, const char *text, size_t len, void *ctx)
{
    (void)field;
    req_scan *s = ctx;
    detect_hit h;
    int n = detect_text(s->r, text, len, &h, 1);
    if (n < 0) return -1;
    if (n > 0 && !s->out->sensitive) snprintf(s->out->first_rule, sizeof s->out->first_rule, "%s", h.rule);
    if (n > 0) s->out->sensitive = 1;
    s->out->hits += n;
    return 0;
}

int detect_request(const detect_rules *r, const json_t *openai_body, detect_result *out)
{
    memset(out, 0, sizeof *out);
    req_scan s = {r, out};
    if (detect_walk_request(openai_body, scan_field, &s) < 0) {
        out->sensitive = 1;
        snprintf(out->first_rule, sizeof out->first_rule, "error");
        return -1;
    }
    return 0;
}
