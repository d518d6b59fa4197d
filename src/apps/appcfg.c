/* apps/appcfg: see appcfg.h. */
#include "apps/appcfg.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/cond.h"
#include "apps/jschema.h"
#include "apps/template.h"

struct apps_cfg {
    json_t *apps, *pipelines; /* name -> normalised definition */
};

static int bad(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-'))
            return 0;
    return 1;
}

static int schema_field(const json_t *src, const char *key, json_t *dst, const char *where, char *err, size_t errlen)
{
    const json_t *s = json_object_get(src, key);
    if (!s) return 0;
    jschema_error e;
    if (jschema_check(s, &e))
        return bad(err, errlen, "%s: %s: %s%s%s", where, key, e.path, e.path[0] ? ": " : "", e.message);
    json_object_set_new(dst, key, json_deep_copy(s));
    return 0;
}

static int int_field(const json_t *src, const char *key, json_int_t lo, json_int_t hi, json_int_t dflt, json_t *dst,
                     const char *where, char *err, size_t errlen)
{
    const json_t *v = json_object_get(src, key);
    if (!v) {
        if (dflt >= 0) json_object_set_new(dst, key, json_integer(dflt));
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return bad(err, errlen, "%s: '%s' must be a whole number from %lld to %lld", where, key, (long long)lo,
                   (long long)hi);
    json_object_set_new(dst, key, json_integer(json_integer_value(v)));
    return 0;
}

/* One stage (an app's fields are a stage's, without name and if). */
static json_t *stage(const json_t *src, const char *name, const char *where, char *err, size_t errlen)
{
    json_t *st = json_pack("{s:s}", "name", name);
    const char *model = json_string_value(json_object_get(src, "model"));
    const json_t *prompt = json_object_get(src, "prompt"), *sys = json_object_get(src, "system");
    const json_t *cond = json_object_get(src, "if"), *temp = json_object_get(src, "temperature");
    char why[256];
    if (!json_is_object(src)) { bad(err, errlen, "%s: must be an object", where); goto fail; }
    if (!model || !*model) { bad(err, errlen, "%s: 'model' (a non-empty string) is required", where); goto fail; }
    json_object_set_new(st, "model", json_string(model));
    if (!json_is_string(prompt)) { bad(err, errlen, "%s: 'prompt' (a template string) is required", where); goto fail; }
    if (tmpl_check(json_string_value(prompt), why, sizeof why)) { bad(err, errlen, "%s: prompt: %s", where, why); goto fail; }
    json_object_set_new(st, "prompt", json_string(json_string_value(prompt)));
    if (sys) {
        if (!json_is_string(sys) || tmpl_check(json_string_value(sys), why, sizeof why)) {
            bad(err, errlen, "%s: 'system' must be a template string", where);
            goto fail;
        }
        json_object_set_new(st, "system", json_string(json_string_value(sys)));
    }
    if (cond) {
        json_t *empty = json_object();
        int r = json_is_string(cond) ? cond_eval(json_string_value(cond), empty, why, sizeof why) : -1;
        json_decref(empty);
        if (!json_is_string(cond)) snprintf(why, sizeof why, "must be a string");
        if (r < 0) { bad(err, errlen, "%s: if: %s", where, why); goto fail; }
        json_object_set_new(st, "if", json_string(json_string_value(cond)));
    }
    if (temp) {
        if (!json_is_number(temp) || json_number_value(temp) < 0 || json_number_value(temp) > 2) {
            bad(err, errlen, "%s: 'temperature' must be a number from 0 to 2", where);
            goto fail;
        }
        json_object_set_new(st, "temperature", json_real(json_number_value(temp)));
    }
    if (schema_field(src, "output_schema", st, where, err, errlen) ||
        int_field(src, "max_retries", 0, 10, APPS_DEFAULT_RETRIES, st, where, err, errlen) ||
        int_field(src, "max_attempts", 1, 10, APPS_DEFAULT_ATTEMPTS, st, where, err, errlen) ||
        int_field(src, "max_tokens", 1, 1000000, -1, st, where, err, errlen))
        goto fail;
    return st;
fail:
    json_decref(st);
    return NULL;
}

static json_t *head(const char *kind, const char *name, const json_t *src, const char *where, char *err, size_t errlen)
{
    json_t *d = json_pack("{s:s,s:s}", "kind", kind, "name", name);
    const json_t *desc = json_object_get(src, "description");
    if (desc && !json_is_string(desc)) {
        bad(err, errlen, "%s: 'description' must be a string", where);
        json_decref(d);
        return NULL;
    }
    if (desc) json_object_set_new(d, "description", json_string(json_string_value(desc)));
    if (schema_field(src, "input_schema", d, where, err, errlen)) {
        json_decref(d);
        return NULL;
    }
    if (!json_object_get(d, "input_schema")) json_object_set_new(d, "input_schema", json_pack("{s:s}", "type", "object"));
    return d;
}

static json_t *app(const char *name, const json_t *src, char *err, size_t errlen)
{
    char where[128];
    snprintf(where, sizeof where, "app '%s'", name);
    if (!json_is_object(src)) return bad(err, errlen, "%s: must be an object", where), NULL;
    json_t *d = head("app", name, src, where, err, errlen);
    json_t *st = d ? stage(src, name, where, err, errlen) : NULL;
    if (!st) { json_decref(d); return NULL; }
    json_object_set_new(d, "stages", json_pack("[o]", st));
    return d;
}

static json_t *pipeline(const char *name, const json_t *src, char *err, size_t errlen)
{
    char where[192];
    snprintf(where, sizeof where, "pipeline '%s'", name);
    if (!json_is_object(src)) return bad(err, errlen, "%s: must be an object", where), NULL;
    const json_t *stages = json_object_get(src, "stages");
    if (!json_is_array(stages) || json_array_size(stages) == 0 || json_array_size(stages) > 32)
        return bad(err, errlen, "%s: 'stages' must be a list of 1 to 32 stages", where), NULL;
    json_t *d = head("pipeline", name, src, where, err, errlen);
    if (!d) return NULL;
    json_t *out = json_array();
    json_object_set_new(d, "stages", out);
    size_t i;
    const json_t *s;
    json_array_foreach(stages, i, s) {
        const char *sn = json_string_value(json_object_get(s, "name"));
        snprintf(where, sizeof where, "pipeline '%s' stage %zu", name, i);
        if (!name_ok(sn)) {
            bad(err, errlen, "%s: 'name' must be 1 to 64 letters, digits, '_' or '-'", where);
            goto fail;
        }
        for (size_t k = 0; k < i; k++)
            if (!strcmp(json_string_value(json_object_get(json_array_get(out, k), "name")), sn)) {
                bad(err, errlen, "%s: the name '%s' is used twice", where, sn);
                goto fail;
            }
        snprintf(where, sizeof where, "pipeline '%s' stage '%s'", name, sn);
        json_t *st = stage(s, sn, where, err, errlen);
        if (!st) goto fail;
        json_array_append_new(out, st);
    }
    return d;
fail:
    json_decref(d);
    return NULL;
}

static int section(const json_t *root, const char *key, json_t *dst, json_t *(*one)(const char *, const json_t *, char *, size_t),
                   char *err, size_t errlen)
{
    const json_t *sec = json_object_get(root, key);
    if (!sec) return 0;
    if (!json_is_object(sec)) return bad(err, errlen, "'%s' must be an object of name: definition", key);
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)sec, name, v) {
        if (!name_ok(name)) return bad(err, errlen, "%s: the name '%.64s' must be 1 to 64 letters, digits, '_' or '-'", key, name);
        json_t *d = one(name, v, err, errlen);
        if (!d) return -1;
        json_object_set_new(dst, name, d);
    }
    return 0;
}

apps_cfg *apps_cfg_parse(const char *text, size_t len, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        bad(err, errlen, "not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return NULL;
    }
    apps_cfg *c = calloc(1, sizeof *c);
    c->apps = json_object();
    c->pipelines = json_object();
    const char *k;
    json_t *v;
    if (!json_is_object(root)) {
        bad(err, errlen, "want a JSON object with \"apps\" and/or \"pipelines\"");
        goto fail;
    }
    json_object_foreach(root, k, v) if (strcmp(k, "apps") && strcmp(k, "pipelines")) {
        bad(err, errlen, "unknown top-level field '%.64s' (want \"apps\" and/or \"pipelines\")", k);
        goto fail;
    }
    if (section(root, "apps", c->apps, app, err, errlen) ||
        section(root, "pipelines", c->pipelines, pipeline, err, errlen))
        goto fail;
    json_decref(root);
    return c;
fail:
    json_decref(root);
    apps_cfg_free(c);
    return NULL;
}

apps_cfg *apps_cfg_load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        bad(err, errlen, "cannot open %s", path);
        return NULL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[8192];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n > cap) {
            cap = (len + n) * 2;
            char *t = realloc(text, cap);
            if (!t) break;
            text = t;
        }
        memcpy(text + len, chunk, n);
        len += n;
    }
    fclose(f);
    char why[400];
    apps_cfg *c = apps_cfg_parse(text ? text : "", len, why, sizeof why);
    free(text);
    if (!c) bad(err, errlen, "%s: %s", path, why);
    return c;
}

void apps_cfg_free(apps_cfg *c)
{
    if (!c) return;
    json_decref(c->apps);
    json_decref(c->pipelines);
    free(c);
}

const json_t *apps_cfg_app(const apps_cfg *c, const char *name) { return c ? json_object_get(c->apps, name) : NULL; }

const json_t *apps_cfg_pipeline(const apps_cfg *c, const char *name)
{
    return c ? json_object_get(c->pipelines, name) : NULL;
}

static int by_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

json_t *apps_cfg_list(const apps_cfg *c, int pipelines)
{
    json_t *out = json_array();
    const json_t *all = c ? (pipelines ? c->pipelines : c->apps) : NULL;
    size_t n = json_object_size(all), i = 0;
    const char **names = calloc(n + 1, sizeof *names);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)all, k, v) names[i++] = k;
    qsort(names, n, sizeof *names, by_name);
    for (i = 0; i < n; i++) {
        const json_t *d = json_object_get(all, names[i]);
        json_t *view = json_pack("{s:s,s:s,s:O}", "name", names[i], "object", pipelines ? "pipeline" : "app",
                                 "input_schema", json_object_get(d, "input_schema"));
        const json_t *desc = json_object_get(d, "description");
        if (desc) json_object_set(view, "description", (json_t *)desc);
        const json_t *stages = json_object_get(d, "stages");
        if (!pipelines) {
            const json_t *st = json_array_get(stages, 0);
            json_object_set(view, "model", json_object_get(st, "model"));
            const json_t *os = json_object_get(st, "output_schema");
            json_object_set(view, "output_schema", os ? (json_t *)os : json_null());
            json_object_set(view, "max_retries", json_object_get(st, "max_retries"));
        } else {
            json_t *sv = json_array();
            size_t j;
            const json_t *st;
            json_array_foreach(stages, j, st) {
                json_t *one = json_pack("{s:O,s:O}", "name", json_object_get(st, "name"), "model",
                                        json_object_get(st, "model"));
                const char *const keys[] = {"if", "output_schema", "max_retries", "max_attempts"};
                for (size_t q = 0; q < 4; q++)
                    if (json_object_get(st, keys[q])) json_object_set(one, keys[q], json_object_get(st, keys[q]));
                json_array_append_new(sv, one);
            }
            json_object_set_new(view, "stages", sv);
        }
        json_array_append_new(out, view);
    }
    free(names);
    return out;
}
