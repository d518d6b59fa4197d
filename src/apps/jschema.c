/* apps/jschema: see jschema.h. */
#include "apps/jschema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64 /* deeper schemas or documents are refused, not recursed into */

static int fail(jschema_error *e, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(jschema_error *e, const char *path, const char *fmt, ...)
{
    snprintf(e->path, sizeof e->path, "%s", path);
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(e->message, sizeof e->message, "%s%s%s", path[0] ? "'" : "", path[0] ? path : "the value",
             path[0] ? "' " : " ");
    size_t n = strlen(e->message);
    snprintf(e->message + n, sizeof e->message - n, "%s", what);
    return -1;
}

/* "path.key", cut to fit (a path that long is only ever shown). */
static void child_path(char *out, size_t len, const char *path, const char *key)
{
    size_t i = 0;
    for (const char *p = path; *p && i + 1 < len; p++) out[i++] = *p;
    if (path[0] && i + 1 < len) out[i++] = '.';
    for (const char *p = key; *p && i + 1 < len; p++) out[i++] = *p;
    out[i] = 0;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    default: return "null";
    }
}

static int is_type(const json_t *v, const char *t)
{
    if (!t) return 0; /* not a type name: an unchecked schema matches nothing with it */
    if (!strcmp(t, "number")) return json_is_number(v);
    /* 2.0 is an integer to JSON Schema, though jansson reads it as a real. */
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v));
    return !strcmp(t, type_name(v));
}

static int known_type(const char *t)
{
    static const char *const names[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (t && !strcmp(t, names[i])) return 1;
    return 0;
}

/* UTF-8 characters, not bytes: "é" is one. */
static size_t char_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static int check_type(const json_t *schema, const json_t *v, const char *path, jschema_error *e)
{
    const json_t *t = json_object_get(schema, "type");
    if (!t) return 0;
    if (json_is_string(t)) {
        if (is_type(v, json_string_value(t))) return 0;
        return fail(e, path, "must be of type %s, not %s", json_string_value(t), type_name(v));
    }
    char want[128] = "";
    size_t i;
    const json_t *x;
    json_array_foreach(t, i, x) {
        if (!json_is_string(x)) continue;
        if (is_type(v, json_string_value(x))) return 0;
        size_t n = strlen(want);
        snprintf(want + n, sizeof want - n, "%s%s", n ? " or " : "", json_string_value(x));
    }
    return fail(e, path, "must be of type %s, not %s", want, type_name(v));
}

static int validate(const json_t *schema, const json_t *v, const char *path, int depth, jschema_error *e);

static int check_object(const json_t *schema, const json_t *v, const char *path, int depth, jschema_error *e)
{
    const json_t *props = json_object_get(schema, "properties");
    const json_t *req = json_object_get(schema, "required");
    const json_t *extra = json_object_get(schema, "additionalProperties");
    char sub[sizeof e->path];
    size_t i;
    const json_t *x;
    json_array_foreach(req, i, x) {
        const char *k = json_string_value(x);
        if (k && !json_object_get(v, k)) {
            child_path(sub, sizeof sub, path, k);
            return fail(e, sub, "is required");
        }
    }
    const char *k;
    const json_t *val;
    json_object_foreach((json_t *)v, k, val) {
        child_path(sub, sizeof sub, path, k);
        const json_t *ps = json_object_get(props, k);
        if (ps) {
            if (validate(ps, val, sub, depth + 1, e)) return -1;
        } else if (json_is_false(extra)) {
            return fail(e, sub, "is not an allowed property");
        } else if (json_is_object(extra)) {
            if (validate(extra, val, sub, depth + 1, e)) return -1;
        }
    }
    return 0;
}

static int check_array(const json_t *schema, const json_t *v, const char *path, int depth, jschema_error *e)
{
    const json_t *mn = json_object_get(schema, "minItems"), *mx = json_object_get(schema, "maxItems");
    if (mn && (double)json_array_size(v) < json_number_value(mn))
        return fail(e, path, "must have at least %g items", json_number_value(mn));
    if (mx && (double)json_array_size(v) > json_number_value(mx))
        return fail(e, path, "must have at most %g items", json_number_value(mx));
    const json_t *items = json_object_get(schema, "items");
    if (!items) return 0;
    char sub[sizeof e->path];
    size_t i;
    const json_t *x;
    json_array_foreach(v, i, x) {
        snprintf(sub, sizeof sub, "%s[%zu]", path, i);
        if (validate(items, x, sub, depth + 1, e)) return -1;
    }
    return 0;
}

static int check_scalar(const json_t *schema, const json_t *v, const char *path, jschema_error *e)
{
    if (json_is_string(v)) {
        size_t n = char_count(json_string_value(v), json_string_length(v));
        const json_t *mn = json_object_get(schema, "minLength"), *mx = json_object_get(schema, "maxLength");
        if (mn && (double)n < json_number_value(mn))
            return fail(e, path, "must be at least %g characters long", json_number_value(mn));
        if (mx && (double)n > json_number_value(mx))
            return fail(e, path, "must be at most %g characters long", json_number_value(mx));
    }
    if (json_is_number(v)) {
        const json_t *mn = json_object_get(schema, "minimum"), *mx = json_object_get(schema, "maximum");
        if (mn && json_number_value(v) < json_number_value(mn))
            return fail(e, path, "must be at least %g", json_number_value(mn));
        if (mx && json_number_value(v) > json_number_value(mx))
            return fail(e, path, "must be at most %g", json_number_value(mx));
    }
    return 0;
}

/* JSON equality where 1 and 1.0 are the same number, as JSON Schema has it. */
static int same(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    return json_equal((json_t *)a, (json_t *)b);
}

static int validate(const json_t *schema, const json_t *v, const char *path, int depth, jschema_error *e)
{
    if (depth > MAX_DEPTH) return fail(e, path, "is nested too deeply");
    if (json_is_true(schema)) return 0;
    if (json_is_false(schema)) return fail(e, path, "is not allowed");
    if (check_type(schema, v, path, e)) return -1;
    const json_t *en = json_object_get(schema, "enum");
    if (en) {
        int ok = 0;
        size_t i;
        const json_t *x;
        json_array_foreach(en, i, x) ok |= same(x, v);
        if (!ok) {
            char *list = json_dumps(en, JSON_COMPACT | JSON_ENCODE_ANY);
            int rc = fail(e, path, "must be one of %.150s", list ? list : "the enum");
            free(list);
            return rc;
        }
    }
    const json_t *cn = json_object_get(schema, "const");
    if (cn && !same(cn, v)) return fail(e, path, "must equal the schema's const value");
    if (json_is_object(v)) return check_object(schema, v, path, depth, e);
    if (json_is_array(v)) return check_array(schema, v, path, depth, e);
    return check_scalar(schema, v, path, e);
}

int jschema_validate(const json_t *schema, const json_t *v, jschema_error *e)
{
    e->path[0] = e->message[0] = 0;
    if (!v) return fail(e, "", "is missing");
    return validate(schema, v, "", 0, e);
}

/* ---- checking a schema ---- */

static int check(const json_t *s, const char *path, int depth, jschema_error *e);

static int want_number(const json_t *s, const char *kw, const char *path, int nonneg, jschema_error *e)
{
    const json_t *v = json_object_get(s, kw);
    if (!v) return 0;
    char p[sizeof e->path];
    child_path(p, sizeof p, path, kw);
    if (!json_is_number(v) || (nonneg && json_number_value(v) < 0))
        return fail(e, p, "must be a %snumber", nonneg ? "non-negative " : "");
    return 0;
}

static int check(const json_t *s, const char *path, int depth, jschema_error *e)
{
    if (depth > MAX_DEPTH) return fail(e, path, "is nested too deeply");
    if (json_is_boolean(s)) return 0;
    if (!json_is_object(s)) return fail(e, path, "must be a schema (an object or a boolean)");
    char p[sizeof e->path];
    const json_t *t = json_object_get(s, "type");
    if (t) {
        child_path(p, sizeof p, path, "type");
        if (json_is_string(t)) {
            if (!known_type(json_string_value(t))) return fail(e, p, "names an unknown type '%s'", json_string_value(t));
        } else if (json_is_array(t) && json_array_size(t) > 0) {
            size_t i;
            const json_t *x;
            json_array_foreach(t, i, x) if (!known_type(json_string_value(x))) return fail(e, p, "names an unknown type");
        } else {
            return fail(e, p, "must be a type name or a non-empty list of them");
        }
    }
    const json_t *props = json_object_get(s, "properties");
    if (props) {
        child_path(p, sizeof p, path, "properties");
        if (!json_is_object(props)) return fail(e, p, "must be an object");
        const char *k;
        const json_t *v;
        char sub[sizeof e->path];
        json_object_foreach((json_t *)props, k, v) {
            child_path(sub, sizeof sub, p, k);
            if (check(v, sub, depth + 1, e)) return -1;
        }
    }
    const json_t *req = json_object_get(s, "required");
    if (req) {
        child_path(p, sizeof p, path, "required");
        if (!json_is_array(req)) return fail(e, p, "must be a list of property names");
        size_t i;
        const json_t *x;
        json_array_foreach(req, i, x) if (!json_is_string(x)) return fail(e, p, "must be a list of property names");
    }
    const json_t *en = json_object_get(s, "enum");
    child_path(p, sizeof p, path, "enum");
    if (en && (!json_is_array(en) || json_array_size(en) == 0)) return fail(e, p, "must be a non-empty list");
    const json_t *extra = json_object_get(s, "additionalProperties");
    child_path(p, sizeof p, path, "additionalProperties");
    if (extra && check(extra, p, depth + 1, e)) return -1;
    const json_t *items = json_object_get(s, "items");
    child_path(p, sizeof p, path, "items");
    if (items && check(items, p, depth + 1, e)) return -1;
    if (want_number(s, "minimum", path, 0, e) || want_number(s, "maximum", path, 0, e) ||
        want_number(s, "minLength", path, 1, e) || want_number(s, "maxLength", path, 1, e) ||
        want_number(s, "minItems", path, 1, e) || want_number(s, "maxItems", path, 1, e))
        return -1;
    return 0;
}

int jschema_check(const json_t *schema, jschema_error *e)
{
    e->path[0] = e->message[0] = 0;
    if (!schema) return fail(e, "", "is missing");
    return check(schema, "", 0, e);
}
