/* catalog: see catalog.h. */
#include "catalog/catalog.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/ggml_types.h"
#include "util/err.h"
#include "util/ids.h"
#include "worker/residency.h"

const char *cat_engine_name(cat_engine e)
{
    static const char *names[] = {"llama-server", "ollama", "vllm", "command"};
    return (unsigned)e < CAT_ENGINES ? names[e] : "unknown";
}

const char *cat_trust_name(cat_trust t) { return t == CAT_TRUST_TRUSTED ? "trusted" : "external"; }

void catalog_free(catalog *c)
{
    if (!c) return;
    for (int i = 0; i < c->n; i++) free(c->e[i].overrides);
    free(c->e);
    free(c);
}

/* Model names travel in --load specs, file names and URLs: letters, digits
 * and . _ - : / only. */
static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 127) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (!isalnum(ch) && !strchr("._-:/", ch)) return 0;
    }
    return 1;
}

/* Where a failing field is, for the message: "model 'x'" or
 * "model 'x', node 'y'". */
typedef struct where {
    char text[260];
} where;

static int copy_string(json_t *v, char *out, size_t outlen, const where *w, const char *field, char *err,
                       size_t errlen)
{
    const char *s = json_string_value(v);
    if (!s) return err_out(err, errlen, "%s: '%s' must be a string", w->text, field);
    if (strlen(s) >= outlen) return err_out(err, errlen, "%s: '%s' is longer than %zu bytes", w->text, field, outlen - 1);
    if (strchr(s, '\n') || strchr(s, '\r')) return err_out(err, errlen, "%s: '%s' holds a line break", w->text, field);
    snprintf(out, outlen, "%s", s);
    return 0;
}

static int take_path(json_t *v, char *out, size_t outlen, const where *w, const char *field, char *err, size_t errlen)
{
    if (copy_string(v, out, outlen, w, field, err, errlen)) return -1;
    if (out[0] != '/') return err_out(err, errlen, "%s: '%s' must be an absolute path", w->text, field);
    /* A worker turns the entry into a --load spec, which commas separate. */
    if (strchr(out, ',')) return err_out(err, errlen, "%s: '%s' must not contain a comma", w->text, field);
    return 0;
}

static int take_count(json_t *v, int *out, const where *w, const char *field, char *err, size_t errlen)
{
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > (1 << 24))
        return err_out(err, errlen, "%s: '%s' must be a whole number from 1 to %d", w->text, field, 1 << 24);
    *out = (int)json_integer_value(v);
    return 0;
}

static int take_cache_type(json_t *v, char out[16], const where *w, const char *field, char *err, size_t errlen)
{
    if (copy_string(v, out, 16, w, field, err, errlen)) return -1;
    if (ggml_type_from_name(out) < 0)
        return err_out(err, errlen, "%s: '%s' is not a cache type (f16, bf16, q8_0, q4_0, ...)", w->text, field);
    return 0;
}

static int take_keep_alive(json_t *v, int64_t *ms, const where *w, char *err, size_t errlen)
{
    char why[128];
    if (json_is_null(v) || res_keep_alive(v, ms, why, sizeof why) != 1)
        return err_out(err, errlen, "%s: 'keep_alive' must be seconds or a duration like \"10m\", \"1h\" or -1 (never)",
                       w->text);
    if (*ms < 0) *ms = RES_FOREVER;
    return 0;
}

/* The settings fields, shared by entries and their per-node overrides.
 * 1 when key is one of them (taken into s), 0 when it is not, -1 on a bad value. */
static int take_setting(const char *key, json_t *v, cat_settings *s, const where *w, char *err, size_t errlen)
{
    if (!strcmp(key, "gguf")) return take_path(v, s->gguf, sizeof s->gguf, w, key, err, errlen) ? -1 : 1;
    if (!strcmp(key, "dir")) return take_path(v, s->dir, sizeof s->dir, w, key, err, errlen) ? -1 : 1;
    if (!strcmp(key, "ollama")) {
        if (copy_string(v, s->ollama, sizeof s->ollama, w, key, err, errlen)) return -1;
        if (!valid_name(s->ollama)) return err_out(err, errlen, "%s: 'ollama' is not a model tag", w->text);
        return 1;
    }
    if (!strcmp(key, "command")) {
        if (copy_string(v, s->command, sizeof s->command, w, key, err, errlen)) return -1;
        if (!strstr(s->command, "{port}"))
            return err_out(err, errlen, "%s: 'command' must contain {port}, where the engine listens", w->text);
        return 1;
    }
    if (!strcmp(key, "ctx")) return take_count(v, &s->ctx, w, key, err, errlen) ? -1 : 1;
    if (!strcmp(key, "parallel")) return take_count(v, &s->parallel, w, key, err, errlen) ? -1 : 1;
    if (!strcmp(key, "cache_type_k")) return take_cache_type(v, s->ctk, w, key, err, errlen) ? -1 : 1;
    if (!strcmp(key, "cache_type_v")) return take_cache_type(v, s->ctv, w, key, err, errlen) ? -1 : 1;
    if (!strcmp(key, "keep_alive")) return take_keep_alive(v, &s->keep_alive_ms, w, err, errlen) ? -1 : 1;
    return 0;
}

/* The location fields an engine kind reads: exactly its own one. */
static int check_location(const cat_engine eng, const cat_settings *s, int in_override, const where *w, char *err,
                          size_t errlen)
{
    const char *want = eng == CAT_OLLAMA ? "ollama" : eng == CAT_VLLM ? "dir" : "gguf";
    int has_gguf = s->gguf[0] != 0, has_ollama = s->ollama[0] != 0, has_dir = s->dir[0] != 0;
    int own = eng == CAT_OLLAMA ? has_ollama : eng == CAT_VLLM ? has_dir : has_gguf;
    if (has_gguf + has_ollama + has_dir > own)
        return err_out(err, errlen, "%s: engine %s takes its weights from '%s' only", w->text, cat_engine_name(eng), want);
    if (!in_override && !own)
        return err_out(err, errlen, "%s: engine %s needs '%s'", w->text, cat_engine_name(eng), want);
    if (s->command[0] && eng != CAT_COMMAND)
        return err_out(err, errlen, "%s: 'command' is for engine command only", w->text);
    return 0;
}

static int parse_override(cat_entry *e, const char *node, json_t *o, cat_override *out, char *err, size_t errlen)
{
    where w;
    snprintf(w.text, sizeof w.text, "model '%.100s', node '%.100s'", e->name, node);
    if (!json_is_object(o)) return err_out(err, errlen, "%s: an override must be an object", w.text);
    if (!*node || strlen(node) >= sizeof out->node) return err_out(err, errlen, "%s: not a node name", w.text);
    memset(out, 0, sizeof *out);
    snprintf(out->node, sizeof out->node, "%s", node);
    out->s.keep_alive_ms = CAT_KEEP_ALIVE_UNSET;
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        int rc = take_setting(key, v, &out->s, &w, err, errlen);
        if (rc < 0) return -1;
        if (rc) continue;
        if (!strcmp(key, "sha256"))
            return err_out(err, errlen, "%s: 'sha256' cannot differ per node (one version everywhere)", w.text);
        return err_out(err, errlen, "%s: '%s' cannot be set per node (gguf, ollama, dir, command, ctx, parallel, "
                       "cache_type_k, cache_type_v, keep_alive can)", w.text, key);
    }
    return check_location(e->engine, &out->s, 1, &w, err, errlen);
}

static int parse_entry(json_t *m, int index, cat_entry *e, char *err, size_t errlen)
{
    where w;
    memset(e, 0, sizeof *e);
    e->s.keep_alive_ms = CAT_KEEP_ALIVE_UNSET;
    if (!json_is_object(m)) return err_out(err, errlen, "models[%d]: an entry must be an object", index);
    const char *name = json_string_value(json_object_get(m, "name"));
    if (!name) return err_out(err, errlen, "models[%d]: 'name' is missing or not a string", index);
    if (!valid_name(name))
        return err_out(err, errlen, "models[%d]: name '%.100s' must be 1-127 letters, digits or . _ - : /", index, name);
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(w.text, sizeof w.text, "model '%s'", e->name);
    const char *eng = json_string_value(json_object_get(m, "engine"));
    e->engine = CAT_LLAMA_SERVER;
    if (json_object_get(m, "engine")) {
        int k = 0;
        while (k < CAT_ENGINES && (!eng || strcmp(eng, cat_engine_name((cat_engine)k)))) k++;
        if (k == CAT_ENGINES)
            return err_out(err, errlen, "%s: 'engine' must be llama-server, ollama, vllm or command", w.text);
        e->engine = (cat_engine)k;
    }
    json_t *nodes = NULL;
    const char *key;
    json_t *v;
    json_object_foreach(m, key, v) {
        int rc = take_setting(key, v, &e->s, &w, err, errlen);
        if (rc < 0) return -1;
        if (rc || !strcmp(key, "name") || !strcmp(key, "engine")) continue;
        if (!strcmp(key, "aliases")) {
            if (!json_is_array(v)) return err_out(err, errlen, "%s: 'aliases' must be an array of names", w.text);
            if (json_array_size(v) > CAT_MAX_ALIASES)
                return err_out(err, errlen, "%s: more than %d aliases", w.text, CAT_MAX_ALIASES);
            size_t i;
            json_t *a;
            json_array_foreach(v, i, a) {
                const char *s = json_string_value(a);
                if (!s || !valid_name(s))
                    return err_out(err, errlen, "%s: aliases[%zu] must be 1-127 letters, digits or . _ - : /", w.text, i);
                snprintf(e->aliases[e->naliases++], sizeof e->aliases[0], "%s", s);
            }
        } else if (!strcmp(key, "sha256")) {
            const char *s = json_string_value(v);
            if (!s || strlen(s) != 64 || strspn(s, "0123456789abcdefABCDEF") != 64)
                return err_out(err, errlen, "%s: 'sha256' must be 64 hex digits", w.text);
            for (int i = 0; i < 64; i++) e->sha256[i] = (char)tolower((unsigned char)s[i]);
            e->sha256[64] = 0;
        } else if (!strcmp(key, "trust")) {
            const char *s = json_string_value(v);
            if (s && !strcmp(s, "trusted")) e->trust = CAT_TRUST_TRUSTED;
            else if (s && !strcmp(s, "external")) e->trust = CAT_TRUST_ANY;
            else return err_out(err, errlen, "%s: 'trust' must be \"trusted\" or \"external\"", w.text);
        } else if (!strcmp(key, "nodes")) {
            if (!json_is_object(v)) return err_out(err, errlen, "%s: 'nodes' must be an object keyed by node name", w.text);
            nodes = v;
        } else {
            return err_out(err, errlen, "%s: unknown field '%.60s'", w.text, key);
        }
    }
    if (check_location(e->engine, &e->s, 0, &w, err, errlen)) return -1;
    if (e->engine == CAT_COMMAND && !e->s.command[0])
        return err_out(err, errlen, "%s: engine command needs 'command'", w.text);
    if (e->sha256[0] && e->engine != CAT_LLAMA_SERVER && e->engine != CAT_COMMAND)
        return err_out(err, errlen, "%s: 'sha256' pins a GGUF file; engine %s has none", w.text,
                       cat_engine_name(e->engine));
    size_t nn = nodes ? json_object_size(nodes) : 0;
    if (nn) {
        e->overrides = calloc(nn, sizeof *e->overrides);
        if (!e->overrides) return err_out(err, errlen, "out of memory");
        json_object_foreach(nodes, key, v) {
            if (parse_override(e, key, v, &e->overrides[e->noverrides], err, errlen)) return -1;
            e->noverrides++;
        }
    }
    return 0;
}

/* Names and aliases are one namespace: each says one entry. */
static int check_unique(const catalog *c, char *err, size_t errlen)
{
    for (int i = 0; i < c->n; i++)
        for (int k = -1; k < c->e[i].naliases; k++) {
            const char *s = k < 0 ? c->e[i].name : c->e[i].aliases[k];
            for (int j = 0; j <= i; j++)
                for (int l = -1; l < c->e[j].naliases; l++) {
                    if (j == i && l >= k) break;
                    const char *t = l < 0 ? c->e[j].name : c->e[j].aliases[l];
                    if (!strcmp(s, t))
                        return err_out(err, errlen, "model '%s': '%s' is already %s of model '%s'", c->e[i].name, s,
                                       l < 0 ? "the name" : "an alias", c->e[j].name);
                }
        }
    return 0;
}

catalog *catalog_parse(const char *text, size_t len, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        err_out(err, errlen, "not JSON (line %d: %s)", je.line, je.text);
        return NULL;
    }
    catalog *c = calloc(1, sizeof *c);
    json_t *models = json_object_get(root, "models");
    const char *key;
    json_t *v;
    int bad = !c;
    if (!c) err_out(err, errlen, "out of memory");
    else if (!json_is_object(root)) bad = err_out(err, errlen, "the catalogue must be an object {\"models\": [...]}");
    else if (!json_is_array(models)) bad = err_out(err, errlen, "'models' is missing or not an array");
    else if (json_array_size(models) > CAT_MAX_ENTRIES)
        bad = err_out(err, errlen, "more than %d models", CAT_MAX_ENTRIES);
    if (!bad)
        json_object_foreach(root, key, v) if (strcmp(key, "models")) {
            bad = err_out(err, errlen, "unknown top-level field '%.60s' (only \"models\")", key);
            break;
        }
    if (!bad && json_array_size(models)) {
        c->e = calloc(json_array_size(models), sizeof *c->e);
        if (!c->e) bad = err_out(err, errlen, "out of memory");
    }
    for (size_t i = 0; !bad && i < json_array_size(models); i++) {
        bad = parse_entry(json_array_get(models, i), (int)i, &c->e[c->n], err, errlen);
        c->n++; /* counted even when it failed, so its overrides are freed */
    }
    if (!bad) bad = check_unique(c, err, errlen);
    json_decref(root);
    if (bad) {
        catalog_free(c);
        return NULL;
    }
    return c;
}

catalog *catalog_load(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        err_out(err, errlen, "cannot open %s", path);
        return NULL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *grown = cap <= (16u << 20) ? realloc(text, cap) : NULL;
            if (!grown) {
                free(text);
                fclose(f);
                err_out(err, errlen, "%s: too large (16 MiB at most)", path);
                return NULL;
            }
            text = grown;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    fclose(f);
    char why[400];
    catalog *c = catalog_parse(text, len, why, sizeof why);
    free(text);
    if (!c) err_out(err, errlen, "%s: %s", path, why);
    return c;
}

const cat_entry *catalog_find(const catalog *c, const char *model)
{
    if (!c || !model) return NULL;
    for (int i = 0; i < c->n; i++) {
        if (!strcmp(c->e[i].name, model)) return &c->e[i];
        for (int k = 0; k < c->e[i].naliases; k++)
            if (!strcmp(c->e[i].aliases[k], model)) return &c->e[i];
    }
    return NULL;
}

const char *catalog_resolve(const catalog *c, const char *model)
{
    const cat_entry *e = catalog_find(c, model);
    return e ? e->name : NULL;
}

void catalog_settings_for(const cat_entry *e, const char *node_name, cat_settings *out)
{
    *out = e->s;
    for (int i = 0; node_name && i < e->noverrides; i++) {
        const cat_settings *o = &e->overrides[i].s;
        if (strcmp(e->overrides[i].node, node_name)) continue;
        if (o->gguf[0]) snprintf(out->gguf, sizeof out->gguf, "%s", o->gguf);
        if (o->ollama[0]) snprintf(out->ollama, sizeof out->ollama, "%s", o->ollama);
        if (o->dir[0]) snprintf(out->dir, sizeof out->dir, "%s", o->dir);
        if (o->command[0]) snprintf(out->command, sizeof out->command, "%s", o->command);
        if (o->ctx) out->ctx = o->ctx;
        if (o->parallel) out->parallel = o->parallel;
        if (o->ctk[0]) snprintf(out->ctk, sizeof out->ctk, "%s", o->ctk);
        if (o->ctv[0]) snprintf(out->ctv, sizeof out->ctv, "%s", o->ctv);
        if (o->keep_alive_ms != CAT_KEEP_ALIVE_UNSET) out->keep_alive_ms = o->keep_alive_ms;
    }
}

static void set_str(json_t *o, const char *k, const char *v)
{
    if (v && *v) json_object_set_new(o, k, json_string(v));
}

static void settings_json(json_t *o, const cat_settings *s)
{
    set_str(o, "gguf", s->gguf);
    set_str(o, "ollama", s->ollama);
    set_str(o, "dir", s->dir);
    set_str(o, "command", s->command);
    if (s->ctx) json_object_set_new(o, "ctx", json_integer(s->ctx));
    if (s->parallel) json_object_set_new(o, "parallel", json_integer(s->parallel));
    set_str(o, "cache_type_k", s->ctk);
    set_str(o, "cache_type_v", s->ctv);
    if (s->keep_alive_ms != CAT_KEEP_ALIVE_UNSET) json_object_set_new(o, "keep_alive_ms", json_integer(s->keep_alive_ms));
}

static json_t *identity_json(const cat_entry *e)
{
    json_t *aliases = json_array();
    for (int k = 0; k < e->naliases; k++) json_array_append_new(aliases, json_string(e->aliases[k]));
    json_t *o = json_pack("{s:s, s:o, s:s, s:s}", "name", e->name, "aliases", aliases, "engine",
                          cat_engine_name(e->engine), "trust", cat_trust_name(e->trust));
    if (o) json_object_set_new(o, "sha256", e->sha256[0] ? json_string(e->sha256) : json_null());
    return o;
}

json_t *catalog_node_json(const catalog *c, const char *node_name)
{
    json_t *models = json_array();
    for (int i = 0; c && i < c->n; i++) {
        json_t *o = identity_json(&c->e[i]);
        if (!o) continue;
        cat_settings s;
        catalog_settings_for(&c->e[i], node_name, &s);
        settings_json(o, &s);
        json_array_append_new(models, o);
    }
    char *text = json_dumps(models, JSON_COMPACT | JSON_SORT_KEYS);
    char digest[65] = "";
    if (text) sha256_hex(text, strlen(text), digest);
    free(text);
    digest[16] = 0;
    return json_pack("{s:s, s:o}", "etag", digest, "models", models);
}

json_t *catalog_entry_json(const cat_entry *e)
{
    json_t *o = identity_json(e);
    if (!o) return NULL;
    settings_json(o, &e->s);
    json_t *nodes = json_object();
    for (int i = 0; i < e->noverrides; i++) {
        json_t *ov = json_object();
        settings_json(ov, &e->overrides[i].s);
        json_object_set_new(nodes, e->overrides[i].node, ov);
    }
    json_object_set_new(o, "overrides", nodes);
    return o;
}

int catalog_hash_matches(const cat_entry *e, const char *reported)
{
    if (!e || !e->sha256[0]) return 1;
    if (!reported || strlen(reported) != 64) return 0;
    for (int i = 0; i < 64; i++)
        if (tolower((unsigned char)reported[i]) != e->sha256[i]) return 0;
    return 1;
}
