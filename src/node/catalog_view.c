/* node/catalog_view: the model catalogue as the registry applies it.  A
 * catalogue entry that pins a sha256 may be served only by nodes whose
 * worker reported that file ("one version everywhere"); this file decides
 * that per node, tells each node its catalogue (only when its etag is
 * stale), and gives the per-node states the views and metrics show:
 * loaded, loadable, mismatch, missing, hashing, and unverified (a node
 * serves the name but reported no digest for it).  Callers hold the
 * registry's lock, except for the registry_* calls, which take it. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "catalog/catalog.h"
#include "node/registry_int.h"

void registry_set_catalog(registry *r, const catalog *cat)
{
    pthread_mutex_lock(&r->mu);
    r->catalog = cat;
    pthread_mutex_unlock(&r->mu);
}

/* What the worker reported about model's file, or NULL. */
static json_t *reported(const node *nd, const char *model)
{
    size_t i;
    json_t *f;
    json_array_foreach(nd->model_files, i, f) {
        const char *m = json_string_value(json_object_get(f, "model"));
        if (m && !strcmp(m, model)) return f;
    }
    return NULL;
}

/* The entry's state on the node, or NULL when the node neither reports nor
 * serves it; *sha gets the digest it reported (NULL if none). */
static const char *state_on(const node *nd, const cat_entry *e, const char **sha)
{
    json_t *rep = reported(nd, e->name);
    const char *st = rep ? json_string_value(json_object_get(rep, "state")) : NULL;
    const char *h = rep ? json_string_value(json_object_get(rep, "sha256")) : NULL;
    *sha = h;
    int loadable, has = reg_has_model(nd, e->name);
    reg_loadable_need(nd, e->name, &loadable);
    if (st && !strcmp(st, "missing")) return "missing";
    if (st && !strcmp(st, "fetching")) return "fetching"; /* from a peer: not offered yet */
    if (e->sha256[0] && h && !catalog_hash_matches(e, h)) return "mismatch";
    if (st && !strcmp(st, "hashing") && e->sha256[0]) return "hashing";
    if (!has && !loadable) return rep ? (st && !strcmp(st, "hashing") ? "hashing" : "missing") : NULL;
    if (e->sha256[0] && !h) return "unverified";
    return has ? "loaded" : "loadable";
}

int reg_hash_ok(const registry *r, const node *nd, const char *model)
{
    if (nd->external || !r->catalog) return 1;
    const cat_entry *e = catalog_find(r->catalog, model);
    if (!e || !e->sha256[0]) return 1;
    json_t *rep = reported(nd, e->name);
    return catalog_hash_matches(e, rep ? json_string_value(json_object_get(rep, "sha256")) : NULL);
}

void reg_catalog_answer(const registry *r, const node *nd, json_t *req, json_t *resp)
{
    if (!r->catalog || !resp) return;
    json_t *cj = catalog_node_json(r->catalog, nd->name);
    const char *etag = json_string_value(json_object_get(cj, "etag"));
    const char *have = json_string_value(json_object_get(req, "catalog_etag"));
    json_object_set_new(resp, "catalog_etag", json_string(etag ? etag : ""));
    if (!have || !etag || strcmp(have, etag)) json_object_set(resp, "catalog", json_object_get(cj, "models"));
    json_decref(cj);
}

void reg_node_catalog_json(const registry *r, const node *nd, json_t *o)
{
    if (!r->catalog || nd->external) return;
    json_t *list = json_array(), *mismatches = json_array();
    for (int i = 0; i < r->catalog->n; i++) {
        const cat_entry *e = &r->catalog->e[i];
        const char *sha;
        const char *st = state_on(nd, e, &sha);
        if (!st) continue;
        json_t *m = json_pack("{s:s, s:s}", "model", e->name, "state", st);
        json_object_set_new(m, "sha256", sha ? json_string(sha) : json_null());
        json_object_set_new(m, "pinned_sha256", e->sha256[0] ? json_string(e->sha256) : json_null());
        json_array_append_new(list, m);
        if (!strcmp(st, "mismatch")) json_array_append_new(mismatches, json_string(e->name));
    }
    json_object_set_new(o, "catalog", list);
    json_object_set_new(o, "mismatches", mismatches);
}

void reg_models_catalog(const registry *r, json_t *data, json_t *seen)
{
    for (int i = 0; r->catalog && i < r->catalog->n; i++) {
        const cat_entry *e = &r->catalog->e[i];
        json_t *entry = json_object_get(seen, e->name);
        if (!entry) {
            entry = json_pack("{s:s, s:s, s:s, s:[], s:[]}", "id", e->name, "object", "model", "owned_by", "gpupool",
                              "nodes", "loadable_on");
            json_object_set_new(seen, e->name, entry);
            json_array_append(data, entry);
        }
        json_t *info = catalog_entry_json(e);
        json_object_set(entry, "aliases", json_object_get(info, "aliases"));
        json_object_set(entry, "engine", json_object_get(info, "engine"));
        json_object_set(entry, "sha256", json_object_get(info, "sha256"));
        json_object_set(entry, "trust", json_object_get(info, "trust"));
        json_object_set_new(entry, "catalog", info);
        json_t *status = json_array();
        for (int k = 0; k < r->n; k++) {
            const node *nd = r->nodes[k];
            if (nd->state == NODE_OFFLINE || nd->external) continue;
            const char *sha;
            const char *st = state_on(nd, e, &sha);
            if (!st) continue;
            json_t *s = json_pack("{s:s, s:s, s:s}", "node", nd->id, "name", nd->name, "state", st);
            json_object_set_new(s, "sha256", sha ? json_string(sha) : json_null());
            json_array_append_new(status, s);
        }
        json_object_set_new(entry, "status", status);
    }
}

int registry_model_blocked(registry *r, const char *model, char *why, size_t whylen)
{
    pthread_mutex_lock(&r->mu);
    int serving = 0, blocked = 0;
    size_t o = 0;
    if (whylen) why[0] = 0;
    const cat_entry *e = r->catalog ? catalog_find(r->catalog, model) : NULL;
    for (int i = 0; e && i < r->n; i++) {
        const node *nd = r->nodes[i];
        int loadable;
        reg_loadable_need(nd, model, &loadable);
        if (nd->state == NODE_OFFLINE || (!loadable && !reg_has_model(nd, model))) continue;
        if (reg_hash_ok(r, nd, model)) { serving = 1; continue; }
        const char *sha;
        const char *st = state_on(nd, e, &sha);
        blocked++;
        if (o < whylen) {
            int w = snprintf(why + o, whylen - o, "%s%s (%s%s%.12s%s)", o ? ", " : "", nd->name, st ? st : "unverified",
                             sha ? ", sha256 " : "", sha ? sha : "", sha ? "…" : "");
            if (w > 0) o += (size_t)w;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return !serving && blocked > 0;
}

json_t *registry_catalog_status(registry *r)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&r->mu);
    for (int i = 0; r->catalog && i < r->catalog->n; i++) {
        const cat_entry *e = &r->catalog->e[i];
        for (int k = 0; k < r->n; k++) {
            const node *nd = r->nodes[k];
            if (nd->state == NODE_OFFLINE || nd->external) continue;
            const char *sha;
            const char *st = state_on(nd, e, &sha);
            if (st)
                json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s}", "node", nd->id, "name", nd->name, "model",
                                                     e->name, "state", st));
        }
    }
    pthread_mutex_unlock(&r->mu);
    return arr;
}
