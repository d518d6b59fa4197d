/* util/json_skim: see json_skim.h.  Follows RFC 8259's grammar, as jansson
 * does when it parses: control bytes in strings, leading zeros and bare
 * literals other than true/false/null are errors. */
#include "util/json_skim.h"

#include <stdlib.h>
#include <string.h>

#define SKIM_MAX_DEPTH 64

void skim_init(json_skim *s, const char *text, size_t len)
{
    s->p = text;
    s->end = text ? text + len : text;
    s->bad = !text;
    s->depth = 0;
    s->first = 0;
}

static int fail(json_skim *s)
{
    s->bad = 1;
    return -1;
}

static void white(json_skim *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

/* Expects byte c after white space; consumes it. */
static int expect(json_skim *s, char c)
{
    white(s);
    if (s->bad || s->p >= s->end || *s->p != c) return fail(s);
    s->p++;
    return 0;
}

static int is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* A string, its opening quote already consumed: sets *start and *len to its raw bytes. */
static int string_body(json_skim *s, const char **start, size_t *len)
{
    const char *b = s->p;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            if (start) *start = b;
            if (len) *len = (size_t)(s->p - b);
            s->p++;
            return 0;
        }
        if (c < 0x20) return fail(s);
        if (c == '\\') {
            if (++s->p >= s->end) return fail(s);
            char e = *s->p;
            if (e == 'u') {
                if (s->end - s->p < 5 || !is_hex(s->p[1]) || !is_hex(s->p[2]) || !is_hex(s->p[3]) || !is_hex(s->p[4]))
                    return fail(s);
                s->p += 4;
            } else if (!strchr("\"\\/bfnrt", e) || !e) {
                return fail(s);
            }
        }
        s->p++;
    }
    return fail(s);
}

static int digits(json_skim *s)
{
    const char *b = s->p;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') s->p++;
    return s->p > b ? 0 : fail(s);
}

/* A number at s->p: its extent, and whether it is an integer. */
static int number(json_skim *s, const char **start, int *is_int)
{
    *start = s->p;
    *is_int = 1;
    if (s->p < s->end && *s->p == '-') s->p++;
    if (s->p < s->end && *s->p == '0') s->p++;
    else if (digits(s)) return -1;
    if (s->p < s->end && *s->p == '.') {
        s->p++;
        *is_int = 0;
        if (digits(s)) return -1;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        s->p++;
        *is_int = 0;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-')) s->p++;
        if (digits(s)) return -1;
    }
    return 0;
}

static int literal(json_skim *s, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n)) return fail(s);
    s->p += n;
    return 0;
}

int skim_value(json_skim *s)
{
    white(s);
    if (s->bad || s->p >= s->end) return fail(s);
    char c = *s->p;
    if (c == '"') {
        s->p++;
        return string_body(s, NULL, NULL);
    }
    if (c == '{' || c == '[') {
        if (++s->depth > SKIM_MAX_DEPTH) return fail(s);
        s->p++;
        char close = c == '{' ? '}' : ']';
        white(s);
        if (s->p < s->end && *s->p == close) {
            s->p++;
            s->depth--;
            return 0;
        }
        for (;;) {
            if (c == '{') {
                if (expect(s, '"') || string_body(s, NULL, NULL) || expect(s, ':')) return -1;
            }
            if (skim_value(s)) return -1;
            white(s);
            if (s->p >= s->end) return fail(s);
            if (*s->p == ',') { s->p++; continue; }
            if (*s->p != close) return fail(s);
            s->p++;
            s->depth--;
            return 0;
        }
    }
    if (c == 't') return literal(s, "true");
    if (c == 'f') return literal(s, "false");
    if (c == 'n') return literal(s, "null");
    const char *start;
    int is_int;
    return number(s, &start, &is_int);
}

int skim_object(json_skim *s)
{
    if (expect(s, '{')) return -1;
    s->first = 1; /* no comma before its first member */
    s->depth++;
    return 0;
}

int skim_key(json_skim *s, const char **key, size_t *keylen)
{
    white(s);
    if (s->bad || s->p >= s->end) return fail(s);
    /* After '{' comes a key or '}'; after a member, ',' or '}'. */
    if (*s->p == '}') {
        s->p++;
        s->depth--;
        s->first = 0;
        return 0;
    }
    if (!s->first) {
        if (*s->p != ',') return fail(s);
        s->p++;
    }
    s->first = 0;
    if (expect(s, '"') || string_body(s, key, keylen) || expect(s, ':')) return -1;
    return 1;
}

int skim_number(json_skim *s, double *v, int *is_int)
{
    white(s);
    if (s->bad || s->p >= s->end) return fail(s);
    char c = *s->p;
    if (c != '-' && (c < '0' || c > '9')) return skim_value(s) ? -1 : 0;
    const char *start;
    if (number(s, &start, is_int)) return -1;
    /* strtod stops where the grammar did; copy so it cannot read past the text. */
    char tmp[64];
    size_t n = (size_t)(s->p - start);
    char *text = n < sizeof tmp ? tmp : malloc(n + 1);
    if (!text) return fail(s);
    memcpy(text, start, n);
    text[n] = 0;
    *v = strtod(text, NULL);
    if (text != tmp) free(text);
    return 1;
}

int skim_string(json_skim *s, const char **v, size_t *len)
{
    white(s);
    if (s->bad || s->p >= s->end) return fail(s);
    if (*s->p != '"') return skim_value(s) ? -1 : 0;
    s->p++;
    return string_body(s, v, len) ? -1 : 1;
}

int skim_true(json_skim *s)
{
    white(s);
    if (s->bad || s->p >= s->end) return fail(s);
    if (*s->p == 't') return literal(s, "true") ? -1 : 1;
    return skim_value(s) ? -1 : 0;
}

int skim_done(json_skim *s)
{
    white(s);
    return !s->bad && s->p == s->end;
}

int skim_key_is(const char *key, size_t keylen, const char *name)
{
    return strlen(name) == keylen && !memcmp(key, name, keylen);
}
