/* api/audit_rec: see audit_rec.h. */
#include "api/audit_rec.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "policy/redact.h"

int audit_request_id_ok(const char *id)
{
    if (!id) return 0;
    size_t n = strlen(id);
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = id[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                 ch == '_' || ch == ':' || ch == '-';
        if (!ok) return 0;
    }
    return 1;
}

/* A redacted copy of j: every string, key and number (a phone or card
 * number may come as a JSON number) with a hit gets its spans replaced;
 * a number with a hit becomes the redacted string.  NULL when memory ran out. */
static json_t *redacted(const detect_rules *r, json_t *j)
{
    if (json_is_string(j) || json_is_integer(j) || json_is_real(j)) {
        char num[64];
        const char *text = num;
        size_t len;
        if (json_is_string(j)) { text = json_string_value(j); len = json_string_length(j); }
        else if (json_is_integer(j)) len = (size_t)snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
        else len = (size_t)snprintf(num, sizeof num, "%.17g", json_real_value(j));
        if (!json_is_string(j)) {
            detect_hit hit;
            int n = detect_text(r, text, len, &hit, 1);
            if (n == 0) return json_incref(j);
            if (n < 0) return NULL;
        }
        size_t n;
        char *red = redact_text(r, text, len, &n);
        json_t *out = red ? json_stringn(red, n) : NULL;
        free(red);
        return out;
    }
    if (json_is_object(j)) {
        /* Keys too: a client may put anything there.  Identifiers as well:
         * an "id" may be the client's text (a hex id whose digit run passes
         * for a card number is redacted too; a record's task_id is taken
         * before redaction). */
        json_t *out = json_object();
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            char *rk = out ? redact_text(r, k, strlen(k), NULL) : NULL;
            json_t *rv = rk ? redacted(r, v) : NULL;
            if (!rv || json_object_set_new(out, rk, rv)) { free(rk); json_decref(out); return NULL; }
            free(rk);
        }
        return out;
    }
    if (json_is_array(j)) {
        json_t *out = json_array();
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) {
            json_t *rv = out ? redacted(r, v) : NULL;
            if (!rv || json_array_append_new(out, rv)) { json_decref(out); return NULL; }
        }
        return out;
    }
    return json_incref(j);
}

/* Cuts s to at most cap bytes, never inside a UTF-8 sequence. */
static void cut_utf8(char *s, size_t cap)
{
    size_t n = strlen(s);
    if (n <= cap) return;
    while (cap > 0 && ((unsigned char)s[cap] & 0xC0) == 0x80) cap--;
    s[cap] = 0;
}

/* The text with the escapes that stand for one ASCII character (\" \\ \/
 * \b \f \n \r \t) decoded, so that a scan sees what the strings say; NULL
 * when it holds another escape (\u could spell anything) or memory ran out. */
static char *decode_simple_escapes(const char *s, size_t len, size_t *out_len)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    char *o = malloc(len + 1);
    if (!o) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '\\') { o[n++] = s[i]; continue; }
        const char *k = ++i < len && s[i] ? strchr(from, s[i]) : NULL;
        if (!k) { free(o); return NULL; }
        o[n++] = to[k - from];
    }
    o[n] = 0;
    *out_len = n;
    return o;
}

/* Whether a scan of the whole text, its simple escapes decoded, finds
 * nothing, so that parsing it and scanning each string would change
 * nothing.  Model answers are full of \n: they keep this path. */
static int raw_clean(const detect_rules *r, const char *body, size_t len)
{
    detect_hit hit;
    if (!memchr(body, '\\', len)) return detect_text(r, body, len, &hit, 1) == 0;
    size_t n = 0;
    char *text = decode_simple_escapes(body, len, &n);
    int clean = text && detect_text(r, text, n, &hit, 1) == 0;
    free(text);
    return clean;
}

char *audit_redact_body(const detect_rules *r, const char *body, size_t len, int cut, size_t cap, int raw_scan,
                        int *truncated)
{
    *truncated = cut;
    char *out = NULL;
    if (!cut && len <= cap && len && (body[0] == '{' || body[0] == '[') && raw_scan && raw_clean(r, body, len)) {
        if (!(out = malloc(len + 1))) return NULL;
        memcpy(out, body, len);
        out[len] = 0;
        if (strlen(out) == len) return out;
        free(out); /* a NUL inside: not JSON text; redact as text below */
        out = NULL;
    }
    if (!cut && len <= cap && len && (body[0] == '{' || body[0] == '[')) {
        json_t *j = json_loadb(body, len, 0, NULL);
        json_t *red = j ? redacted(r, j) : NULL;
        if (red) out = json_dumps(red, JSON_COMPACT);
        json_decref(red);
        json_decref(j);
    }
    if (!out) {
        size_t keep = len > cap + AUDIT_REDACT_MARGIN ? cap + AUDIT_REDACT_MARGIN : len;
        if (keep < len) *truncated = 1;
        out = redact_text(r, body ? body : "", body ? keep : 0, NULL);
        if (!out) return NULL;
    }
    if (strlen(out) > cap) {
        cut_utf8(out, cap);
        *truncated = 1;
    }
    return out;
}

void audit_task_of(const char *method, const char *path, const char *poll_id, const char *response, size_t len,
                   char *out, size_t outlen)
{
    out[0] = 0;
    if (outlen == 0) return;
    const char *pre = "/v1/tasks/";
    if (!strncmp(path, pre, strlen(pre))) {
        const char *id = path + strlen(pre);
        size_t n = strcspn(id, "/");
        if (!strcmp(id, "poll")) {
            id = poll_id ? poll_id : "";
            n = strlen(id);
        }
        if (n && n < outlen) { memcpy(out, id, n); out[n] = 0; }
        return;
    }
    if (strcmp(method, "POST") || strcmp(path, "/v1/tasks") || !response || !len) return;
    json_t *j = json_loadb(response, len, 0, NULL);
    const char *id = json_string_value(json_object_get(j, "id"));
    /* the low-code envelope: {"ok","status","data":{...}} */
    if (!id) id = json_string_value(json_object_get(json_object_get(j, "data"), "id"));
    if (id && !strncmp(id, "task_", 5) && strlen(id) < outlen) strcpy(out, id);
    json_decref(j);
}

int audit_parse_since(const char *s, int64_t now_ms, int64_t *out)
{
    if (!s || !*s) return -1;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0 || s[0] == '-' || s[0] == '+') return -1;
    if (!*end) { *out = v; return 0; }
    if (end[1]) return -1;
    long long unit = *end == 's' ? 1000 : *end == 'm' ? 60000 : *end == 'h' ? 3600000 : *end == 'd' ? 86400000 : 0;
    if (!unit || v > 3650LL * 86400000 / unit) return -1;
    *out = now_ms - v * unit;
    if (*out < 0) *out = 0;
    return 0;
}
