/* apps/template: see template.h. */
#include "apps/template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"

const json_t *tmpl_lookup(const json_t *ctx, const char *path, size_t len)
{
    const json_t *v = ctx;
    size_t i = 0;
    while (v && i < len) {
        size_t j = i;
        while (j < len && path[j] != '.') j++;
        char key[256];
        if (j - i == 0 || j - i >= sizeof key) return NULL;
        memcpy(key, path + i, j - i);
        key[j - i] = 0;
        if (json_is_object(v)) {
            v = json_object_get(v, key);
        } else if (json_is_array(v) && strspn(key, "0123456789") == strlen(key)) {
            v = json_array_get(v, strtoul(key, NULL, 10));
        } else {
            return NULL;
        }
        i = j + 1;
    }
    return v;
}

static int trim(const char **s, size_t *n)
{
    while (*n && (**s == ' ' || **s == '\t')) (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t')) (*n)--;
    return *n > 0;
}

/* One pass for both rendering (out) and checking (out NULL). */
static int walk(const char *t, const json_t *ctx, buf *out, char *err, size_t errlen)
{
    for (size_t i = 0; t[i];) {
        if (t[i] == '\\' && t[i + 1] == '\\' && t[i + 2] == '{' && t[i + 3] == '{') {
            if (out) buf_puts(out, "\\");
            i += 2;
            /* the "{{" after it still opens a field */
            continue;
        }
        if (t[i] == '\\' && t[i + 1] == '{' && t[i + 2] == '{') {
            if (out) buf_puts(out, "{{");
            i += 3;
            continue;
        }
        if (t[i] == '{' && t[i + 1] == '{') {
            const char *end = strstr(t + i + 2, "}}");
            if (!end) {
                snprintf(err, errlen, "template: '{{' at offset %zu is not closed by '}}'", i);
                return -1;
            }
            const char *p = t + i + 2;
            size_t n = (size_t)(end - p);
            if (!trim(&p, &n) || memchr(p, '{', n)) {
                snprintf(err, errlen, "template: the field at offset %zu names no path", i);
                return -1;
            }
            if (out) {
                const json_t *v = tmpl_lookup(ctx, p, n);
                if (json_is_string(v)) {
                    buf_append(out, json_string_value(v), json_string_length(v));
                } else if (v) {
                    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
                    if (s) buf_puts(out, s);
                    free(s);
                }
            }
            i = (size_t)(end - t) + 2;
            continue;
        }
        if (out) buf_append(out, t + i, 1);
        i++;
    }
    return 0;
}

char *tmpl_render(const char *tmpl, const json_t *ctx, char *err, size_t errlen)
{
    buf out = {0};
    if (walk(tmpl, ctx, &out, err, errlen) || buf_puts(&out, "")) {
        buf_free(&out);
        return NULL;
    }
    return buf_steal(&out);
}

int tmpl_check(const char *tmpl, char *err, size_t errlen) { return walk(tmpl, NULL, NULL, err, errlen); }
