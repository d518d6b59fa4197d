/* apps/cond: see cond.h. */
#include "apps/cond.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/template.h"

static const char *skip_ws(const char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    return s;
}

static int path_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

static int truthy(const json_t *v)
{
    if (!v || json_is_null(v) || json_is_false(v)) return 0;
    if (json_is_number(v)) return json_number_value(v) != 0;
    if (json_is_string(v)) return json_string_length(v) > 0;
    if (json_is_array(v)) return json_array_size(v) > 0;
    if (json_is_object(v)) return json_object_size(v) > 0;
    return 1;
}

/* The literal at s as a new JSON value, *end after it; NULL if malformed. */
static json_t *literal(const char *s, const char **end)
{
    if (*s == '\'' || *s == '"') {
        const char *close = strchr(s + 1, *s);
        if (!close) return NULL;
        *end = close + 1;
        return json_stringn(s + 1, (size_t)(close - s - 1));
    }
    static const struct { const char *word; int kind; } words[] = {{"true", 1}, {"false", 2}, {"null", 3}};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(words[i].word);
        if (!strncmp(s, words[i].word, n) && !path_char(s[n])) {
            *end = s + n;
            return words[i].kind == 1 ? json_true() : words[i].kind == 2 ? json_false() : json_null();
        }
    }
    char *e;
    double d = strtod(s, &e);
    if (e == s || !isfinite(d)) return NULL;
    *end = e;
    return json_real(d);
}

static int same(const json_t *a, const json_t *b)
{
    if (!a) return 0;
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    return json_equal((json_t *)a, (json_t *)b);
}

int cond_eval(const char *expr, const json_t *ctx, char *err, size_t errlen)
{
    const char *s = skip_ws(expr);
    int negate = 0;
    if (*s == '!' && s[1] != '=') {
        negate = 1;
        s = skip_ws(s + 1);
    }
    const char *p = s;
    while (path_char(*s)) s++;
    size_t plen = (size_t)(s - p);
    if (plen == 0) {
        snprintf(err, errlen, "condition '%.100s': expected a path such as stages.NAME.output.FIELD", expr);
        return -1;
    }
    const json_t *v = tmpl_lookup(ctx, p, plen);
    s = skip_ws(s);
    if (!*s) return negate ? !truthy(v) : truthy(v);
    int eq;
    if (!strncmp(s, "==", 2)) eq = 1;
    else if (!strncmp(s, "!=", 2)) eq = 0;
    else {
        snprintf(err, errlen, "condition '%.100s': expected == or != after the path", expr);
        return -1;
    }
    if (negate) {
        snprintf(err, errlen, "condition '%.100s': '!' goes only before a lone path", expr);
        return -1;
    }
    const char *end;
    json_t *lit = literal(skip_ws(s + 2), &end);
    if (!lit || *skip_ws(end)) {
        json_decref(lit);
        snprintf(err, errlen, "condition '%.100s': expected one literal ('text', a number, true, false or null) "
                              "after the operator", expr);
        return -1;
    }
    int r = same(v, lit) == eq;
    json_decref(lit);
    return r;
}
