/* api/jsoncase: see jsoncase.h. */
#include "api/jsoncase.h"

#include <ctype.h>
#include <string.h>

static int is_lower(char c) { return c >= 'a' && c <= 'z'; }
static int is_upper(char c) { return c >= 'A' && c <= 'Z'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int copy(const char *in, char *out, size_t outlen)
{
    size_t n = strlen(in);
    if (n >= outlen) return -1;
    memcpy(out, in, n + 1);
    return (int)n;
}

int jsoncase_to_snake(const char *in, char *out, size_t outlen)
{
    if (!is_lower(in[0]) && !is_upper(in[0])) return copy(in, out, outlen);
    for (const char *p = in; *p; p++)
        if (!is_lower(*p) && !is_upper(*p) && !is_digit(*p)) return copy(in, out, outlen);
    size_t n = 0;
    for (size_t i = 0; in[i]; i++) {
        char c = in[i];
        if (is_upper(c)) {
            /* A capital starts a word after a small letter or digit, and
             * also ends a run of capitals that is an acronym ("HTTPServer"). */
            int starts = i > 0 && (!is_upper(in[i - 1]) || is_lower(in[i + 1]));
            if (starts) {
                if (n + 1 >= outlen) return -1;
                out[n++] = '_';
            }
            c = (char)tolower((unsigned char)c);
        }
        if (n + 1 >= outlen) return -1;
        out[n++] = c;
    }
    out[n] = 0;
    return (int)n;
}

int jsoncase_to_camel(const char *in, char *out, size_t outlen)
{
    if (!is_lower(in[0])) return copy(in, out, outlen);
    for (const char *p = in; *p; p++)
        if (!is_lower(*p) && !is_digit(*p) && *p != '_') return copy(in, out, outlen);
    size_t n = 0;
    for (size_t i = 0; in[i]; i++) {
        char c = in[i];
        if (c == '_' && is_lower(in[i + 1])) {
            c = (char)toupper((unsigned char)in[++i]);
        } else if (c == '_' && is_digit(in[i + 1])) {
            continue; /* "rate_1h" reads as "rate1h" */
        }
        if (n + 1 >= outlen) return -1;
        out[n++] = c;
    }
    out[n] = 0;
    return (int)n;
}

/* Names whose values belong to the caller (see jsoncase.h). */
static int opaque(const char *snake)
{
    static const char *const names[] = {"metadata", "logit_bias", "parameters", "schema"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(snake, names[i])) return 1;
    return 0;
}

typedef int (*convert_fn)(const char *, char *, size_t);

static int rename_tree(json_t *j, convert_fn conv, convert_fn to_snake, int keep_keys);

static int rename_object(json_t *j, convert_fn conv, convert_fn to_snake, int keep_keys)
{
    json_t *fresh = json_object();
    if (!fresh) return -1;
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v) {
        char nk[256], sk[256];
        /* A key too long to rename is kept: nothing the API defines is. */
        const char *name = keep_keys || conv(k, nk, sizeof nk) < 0 ? k : nk;
        if (to_snake(k, sk, sizeof sk) < 0) sk[0] = 0;
        if (!opaque(sk)) {
            /* A map keyed by model names: keep its keys, rename inside. */
            int map = !strcmp(sk, "models") && json_is_object(v);
            if (rename_tree(v, conv, to_snake, map)) { json_decref(fresh); return -1; }
        }
        int native = !strcmp(name, k);
        if (json_object_get(fresh, name) && !native) continue;
        if (json_object_set(fresh, name, v)) { json_decref(fresh); return -1; }
    }
    int rc = json_object_clear(j) || json_object_update(j, fresh) ? -1 : 0;
    json_decref(fresh);
    return rc;
}

static int rename_tree(json_t *j, convert_fn conv, convert_fn to_snake, int keep_keys)
{
    if (json_is_object(j)) return rename_object(j, conv, to_snake, keep_keys);
    if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v)
            if (rename_tree(v, conv, to_snake, 0)) return -1;
    }
    return 0;
}

int jsoncase_keys_to_snake(json_t *j) { return rename_tree(j, jsoncase_to_snake, jsoncase_to_snake, 0); }
int jsoncase_keys_to_camel(json_t *j) { return rename_tree(j, jsoncase_to_camel, jsoncase_to_snake, 0); }
