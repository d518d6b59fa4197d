/* Unit tests: the model catalogue (parsing, validation errors that name the
 * entry and field, aliases, per-node overrides, what a node is sent and its
 * etag), the worker's side (an entry as a --load spec, a model's state), and
 * the registry placing a catalogue model only on nodes that reported its
 * file's sha256. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "catalog/catalog.h"
#include "node/registry.h"
#include "sched/placement.h"
#include "worker/wcatalog.h"

#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

static const char *GOOD =
    "{\"models\":["
    "{\"name\":\"qwen2.5-7b\",\"aliases\":[\"qwen\",\"qwen-7b\"],\"engine\":\"llama-server\","
    "\"gguf\":\"/models/qwen.gguf\",\"sha256\":\"" SHA_A "\",\"ctx\":8192,\"parallel\":2,"
    "\"cache_type_k\":\"q8_0\",\"cache_type_v\":\"q8_0\",\"keep_alive\":\"10m\",\"trust\":\"trusted\","
    "\"nodes\":{\"box-2\":{\"gguf\":\"/data/qwen.gguf\",\"ctx\":4096},\"box-3\":{\"keep_alive\":-1}}},"
    "{\"name\":\"llama3:8b\",\"engine\":\"ollama\",\"ollama\":\"llama3:8b\"},"
    "{\"name\":\"mistral-7b\",\"engine\":\"vllm\",\"dir\":\"/models/mistral\"},"
    "{\"name\":\"phi\",\"engine\":\"command\",\"gguf\":\"/m/phi.gguf\",\"command\":\"my-server {model} --port {port}\","
    "\"keep_alive\":30}"
    "]}";

static catalog *parse(const char *text, char *err, size_t errlen)
{
    return catalog_parse(text, strlen(text), err, errlen);
}

static void parses_every_field(void **state)
{
    (void)state;
    char err[300] = "";
    catalog *c = parse(GOOD, err, sizeof err);
    if (!c) fail_msg("%s", err);
    assert_int_equal(c->n, 4);
    const cat_entry *q = &c->e[0];
    assert_string_equal(q->name, "qwen2.5-7b");
    assert_int_equal(q->naliases, 2);
    assert_int_equal(q->engine, CAT_LLAMA_SERVER);
    assert_string_equal(q->sha256, SHA_A);
    assert_int_equal(q->s.ctx, 8192);
    assert_int_equal(q->s.parallel, 2);
    assert_string_equal(q->s.ctk, "q8_0");
    assert_int_equal(q->s.keep_alive_ms, 600000);
    assert_int_equal(q->trust, CAT_TRUST_TRUSTED);
    assert_int_equal(q->noverrides, 2);
    assert_int_equal(c->e[1].engine, CAT_OLLAMA);
    assert_string_equal(c->e[1].s.ollama, "llama3:8b");
    assert_int_equal(c->e[1].trust, CAT_TRUST_ANY);
    assert_int_equal(c->e[1].s.keep_alive_ms, CAT_KEEP_ALIVE_UNSET);
    assert_int_equal(c->e[2].engine, CAT_VLLM);
    assert_string_equal(c->e[2].s.dir, "/models/mistral");
    assert_int_equal(c->e[3].engine, CAT_COMMAND);
    assert_int_equal(c->e[3].s.keep_alive_ms, 30000);
    catalog_free(c);
}

/* Each bad catalogue fails with a message naming where. */
static void errors_name_entry_and_field(void **state)
{
    (void)state;
    static const struct { const char *text, *want; } cases[] = {
        {"[]", "must be an object"},
        {"{\"models\":{}}", "'models' is missing or not an array"},
        {"{\"models\":[],\"extra\":1}", "unknown top-level field 'extra'"},
        {"{\"models\":[{\"gguf\":\"/a.gguf\"}]}", "models[0]: 'name' is missing"},
        {"{\"models\":[{\"name\":\"a b\",\"gguf\":\"/a.gguf\"}]}", "models[0]: name 'a b' must be"},
        {"{\"models\":[{\"name\":\"m\"}]}", "model 'm': engine llama-server needs 'gguf'"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"rel.gguf\"}]}", "model 'm': 'gguf' must be an absolute path"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a,b.gguf\"}]}", "model 'm': 'gguf' must not contain a comma"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"sha256\":\"xyz\"}]}", "model 'm': 'sha256' must be 64 hex digits"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"ctx\":0}]}", "model 'm': 'ctx' must be a whole number"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"cache_type_k\":\"q9\"}]}", "model 'm': 'cache_type_k' is not a cache type"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"keep_alive\":\"soon\"}]}", "model 'm': 'keep_alive' must be"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"trust\":\"maybe\"}]}", "model 'm': 'trust' must be"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"engine\":\"tgi\"}]}", "model 'm': 'engine' must be"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"ctxx\":1}]}", "model 'm': unknown field 'ctxx'"},
        {"{\"models\":[{\"name\":\"m\",\"engine\":\"ollama\",\"gguf\":\"/a.gguf\"}]}", "model 'm': engine ollama takes its weights from 'ollama' only"},
        {"{\"models\":[{\"name\":\"m\",\"engine\":\"vllm\",\"dir\":\"/d\",\"sha256\":\"" SHA_A "\"}]}", "model 'm': 'sha256' pins a GGUF file"},
        {"{\"models\":[{\"name\":\"m\",\"engine\":\"command\",\"gguf\":\"/a.gguf\"}]}", "model 'm': engine command needs 'command'"},
        {"{\"models\":[{\"name\":\"m\",\"engine\":\"command\",\"gguf\":\"/a.gguf\",\"command\":\"x {model}\"}]}", "must contain {port}"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"nodes\":{\"n1\":{\"sha256\":\"" SHA_A "\"}}}]}",
         "model 'm', node 'n1': 'sha256' cannot differ per node"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"nodes\":{\"n1\":{\"dir\":\"/d\"}}}]}",
         "model 'm', node 'n1': engine llama-server takes its weights from 'gguf' only"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"nodes\":{\"n1\":{\"aliases\":[]}}}]}",
         "model 'm', node 'n1': 'aliases' cannot be set per node"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"nodes\":{\"n1\":{\"ctx\":-4}}}]}", "model 'm', node 'n1': 'ctx'"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"aliases\":[\"x\"]},{\"name\":\"x\",\"gguf\":\"/b.gguf\"}]}",
         "model 'x': 'x' is already an alias of model 'm'"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"aliases\":[\"m\"]}]}", "model 'm': 'm' is already the name of model 'm'"},
        {"{\"models\":[{\"name\":\"m\",\"gguf\":\"/a.gguf\",\"name\":\"n\"}]}", "not JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[300] = "";
        catalog *c = parse(cases[i].text, err, sizeof err);
        if (c) fail_msg("case %zu parsed: %s", i, cases[i].text);
        if (!strstr(err, cases[i].want)) fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].want);
        assert_null(strchr(err, '\n'));
    }
}

static void aliases_resolve_to_the_name(void **state)
{
    (void)state;
    char err[300];
    catalog *c = parse(GOOD, err, sizeof err);
    assert_string_equal(catalog_resolve(c, "qwen"), "qwen2.5-7b");
    assert_string_equal(catalog_resolve(c, "qwen-7b"), "qwen2.5-7b");
    assert_string_equal(catalog_resolve(c, "qwen2.5-7b"), "qwen2.5-7b");
    assert_null(catalog_resolve(c, "qwen2"));
    assert_null(catalog_resolve(NULL, "qwen"));
    assert_ptr_equal(catalog_find(c, "qwen"), &c->e[0]);
    catalog_free(c);
}

static void overrides_apply_to_their_node_only(void **state)
{
    (void)state;
    char err[300];
    catalog *c = parse(GOOD, err, sizeof err);
    cat_settings s;
    catalog_settings_for(&c->e[0], "box-1", &s);
    assert_string_equal(s.gguf, "/models/qwen.gguf");
    assert_int_equal(s.ctx, 8192);
    catalog_settings_for(&c->e[0], "box-2", &s);
    assert_string_equal(s.gguf, "/data/qwen.gguf");
    assert_int_equal(s.ctx, 4096);
    assert_int_equal(s.parallel, 2); /* not overridden */
    assert_string_equal(s.ctk, "q8_0");
    catalog_settings_for(&c->e[0], "box-3", &s);
    assert_string_equal(s.gguf, "/models/qwen.gguf");
    assert_int_equal(s.keep_alive_ms, -1);
    catalog_free(c);
}

/* A node is told its own view; the etag changes with it and only with it. */
static void node_view_and_etag(void **state)
{
    (void)state;
    char err[300];
    catalog *c = parse(GOOD, err, sizeof err);
    json_t *one = catalog_node_json(c, "box-1"), *one_again = catalog_node_json(c, "box-1");
    json_t *two = catalog_node_json(c, "box-2"), *other = catalog_node_json(c, "box-9");
    const char *e1 = json_string_value(json_object_get(one, "etag"));
    assert_int_equal(strlen(e1), 16);
    assert_string_equal(e1, json_string_value(json_object_get(one_again, "etag")));
    assert_string_not_equal(e1, json_string_value(json_object_get(two, "etag")));
    assert_string_equal(e1, json_string_value(json_object_get(other, "etag"))); /* no override for box-9 */
    json_t *q2 = json_array_get(json_object_get(two, "models"), 0);
    assert_string_equal(json_string_value(json_object_get(q2, "gguf")), "/data/qwen.gguf");
    assert_int_equal(json_integer_value(json_object_get(q2, "ctx")), 4096);
    assert_string_equal(json_string_value(json_object_get(q2, "sha256")), SHA_A);
    assert_string_equal(json_string_value(json_object_get(q2, "engine")), "llama-server");
    json_t *ol = json_array_get(json_object_get(one, "models"), 1);
    assert_true(json_is_null(json_object_get(ol, "sha256")));
    assert_null(json_object_get(ol, "ctx"));
    json_t *shown = catalog_entry_json(&c->e[0]);
    assert_non_null(json_object_get(json_object_get(shown, "overrides"), "box-2"));
    json_decref(shown);
    json_decref(one);
    json_decref(one_again);
    json_decref(two);
    json_decref(other);
    catalog_free(c);
}

static void hash_matching_ignores_case_only(void **state)
{
    (void)state;
    char err[300];
    catalog *c = parse(GOOD, err, sizeof err);
    assert_true(catalog_hash_matches(&c->e[0], SHA_A));
    assert_true(catalog_hash_matches(&c->e[0], "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
    assert_false(catalog_hash_matches(&c->e[0], SHA_B));
    assert_false(catalog_hash_matches(&c->e[0], NULL));
    assert_false(catalog_hash_matches(&c->e[0], "aaaa"));
    assert_true(catalog_hash_matches(&c->e[1], NULL)); /* pins nothing */
    catalog_free(c);
}

/* ---- the worker's side ---- */

static void entry_becomes_load_spec(void **state)
{
    (void)state;
    char err[300];
    catalog *c = parse(GOOD, err, sizeof err);
    json_t *two = catalog_node_json(c, "box-2"), *three = catalog_node_json(c, "box-3");
    char spec[1400];
    assert_int_equal(wcat_load_spec(json_array_get(json_object_get(two, "models"), 0), spec, sizeof spec, err, sizeof err), 0);
    assert_string_equal(spec, "qwen2.5-7b=/data/qwen.gguf,ctx=4096,parallel=2,ctk=q8_0,ctv=q8_0,keep-alive=600000ms");
    assert_int_equal(wcat_load_spec(json_array_get(json_object_get(three, "models"), 0), spec, sizeof spec, err, sizeof err), 0);
    assert_non_null(strstr(spec, ",keep-alive=-1"));
    assert_int_equal(wcat_load_spec(json_array_get(json_object_get(two, "models"), 3), spec, sizeof spec, err, sizeof err), 0);
    assert_string_equal(spec, "phi=/m/phi.gguf,keep-alive=30000ms");
    assert_int_equal(wcat_load_spec(json_array_get(json_object_get(two, "models"), 1), spec, sizeof spec, err, sizeof err), -1);
    assert_non_null(strstr(err, "engine ollama is not started by the worker"));
    json_t *bad = json_pack("{s:s, s:s, s:s}", "name", "x=y", "engine", "llama-server", "gguf", "/a.gguf");
    assert_int_equal(wcat_load_spec(bad, spec, sizeof spec, err, sizeof err), -1);
    json_decref(bad);
    json_decref(two);
    json_decref(three);
    catalog_free(c);
}

static void worker_state_of_a_model(void **state)
{
    (void)state;
    assert_string_equal(wcat_state(0, "", SHA_A, 0), "hashing");
    assert_string_equal(wcat_state(-1, "", SHA_A, 0), "missing");
    assert_string_equal(wcat_state(1, SHA_B, SHA_A, 1), "mismatch");
    assert_string_equal(wcat_state(1, SHA_A, SHA_A, 0), "loadable");
    assert_string_equal(wcat_state(1, SHA_A, SHA_A, 1), "loaded");
    assert_string_equal(wcat_state(1, SHA_B, "", 1), "loaded"); /* nothing pinned */
    assert_string_equal(wcat_state(0, "", "", 0), "loadable"); /* nothing pinned: never hashed */
}

/* ---- placement: a node whose file differs is never chosen ---- */

static void placement_skips_mismatched_nodes(void **state)
{
    (void)state;
    place_cfg cfg = {.policy = POLICY_SCORE};
    place_weights_default(&cfg.w);
    place_request rq = {.max_tokens = 100};
    /* The mismatched node is the better one on every other count. */
    place_candidate c[] = {
        {.id = "fast", .ready = 1, .has_model = 1, .slots = 8, .free_vram = 100, .tps = 500, .samples = 9,
         .success = 1, .temp_c = -1, .mismatch = 1},
        {.id = "slow", .ready = 1, .loadable = 1, .need_bytes = 1, .slots = 1, .free_vram = 10, .tps = 5,
         .success = -1, .temp_c = -1},
    };
    for (int p = 0; p < 3; p++) {
        cfg.policy = (place_policy)p;
        assert_int_equal(placement_pick(&cfg, &rq, c, 2, NULL), 1);
    }
    cfg.policy = POLICY_SCORE;
    assert_int_equal(placement_why(&cfg, c, 2), PLACE_OK);
    c[1].inflight = 1; /* the one good node is busy: wait for it, not the other */
    assert_int_equal(placement_pick(&cfg, &rq, c, 2, NULL), PLACE_NONE);
    assert_int_equal(placement_why(&cfg, c, 2), PLACE_BUSY);
    c[1].mismatch = 1; /* only other files left: as if nobody served it */
    assert_int_equal(placement_why(&cfg, c, 2), PLACE_NO_MODEL);
}

/* ---- the registry: a file that differs blocks routing ---- */

static json_t *report(const char *name, const char *fp, const char *model, const char *sha)
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:[{s:s, s:I, s:I}], s:[{s:s, s:b, s:[s], s:i}]}", "name", name,
                          "fingerprint", fp, "address", "http://127.0.0.1:1", "gpus", "name", "g", "total_bytes",
                          (json_int_t)100, "free_bytes", (json_int_t)50, "engines", "kind", "sim", "healthy", 1,
                          "models", model, "slots", 4);
    json_t *f = json_pack("{s:s, s:s}", "model", model, "state", "loaded");
    json_object_set_new(f, "sha256", sha ? json_string(sha) : json_null());
    json_object_set_new(j, "model_files", json_pack("[o]", f));
    return j;
}

/* Registers and beats once; returns the register answer's catalogue etag. */
static void join(registry *r, const char *name, const char *fp, const char *model, const char *sha, char *etag)
{
    json_t *req = report(name, fp, model, sha), *resp = NULL;
    char why[200];
    assert_int_equal(registry_register(r, "join", req, "127.0.0.1", 0, &resp, why, sizeof why), 200);
    assert_true(json_is_array(json_object_get(resp, "catalog")));
    snprintf(etag, 24, "%s", json_string_value(json_object_get(resp, "catalog_etag")));
    json_object_set_new(req, "node_id", json_copy(json_object_get(resp, "node_id")));
    json_object_set_new(req, "seq", json_integer(1));
    json_object_set_new(req, "catalog_etag", json_string(etag));
    const char *tok = json_string_value(json_object_get(resp, "node_token"));
    json_t *beat = NULL;
    assert_int_equal(registry_heartbeat(r, tok, req, "127.0.0.1", 10, &beat, why, sizeof why), 200);
    /* The node has this catalogue: the beat's answer does not repeat it. */
    assert_null(json_object_get(beat, "catalog"));
    assert_string_equal(json_string_value(json_object_get(beat, "catalog_etag")), etag);
    json_decref(beat);
    json_decref(resp);
    json_decref(req);
}

static void mismatched_hash_blocks_routing(void **state)
{
    (void)state;
    char err[300], etag[24];
    catalog *c = parse(GOOD, err, sizeof err);
    registry_cfg cfg = {.join_token = "join", .heartbeat_ms = 1000, .missed_beats = 3, .token_ttl_ms = 10000};
    registry *r = registry_new(&cfg);
    registry_set_catalog(r, c);
    join(r, "good", "11111111111111111111111111111111", "qwen2.5-7b", SHA_A, etag);
    join(r, "bad", "22222222222222222222222222222222", "qwen2.5-7b", SHA_B, etag);
    join(r, "unhashed", "33333333333333333333333333333333", "qwen2.5-7b", NULL, etag);
    /* Every lease goes to the one node with the catalogue's file. */
    node_lease l[4];
    json_t *nodes = registry_nodes_json(r, 10);
    const char *good_id = NULL;
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n) if (!strcmp(json_string_value(json_object_get(n, "name")), "good"))
        good_id = json_string_value(json_object_get(n, "id"));
    for (int k = 0; k < 4; k++) {
        assert_int_equal(registry_acquire(r, &(reg_request){.model = "qwen2.5-7b", .now = 10}, NULL, 0, &l[k]), PLACE_OK);
        assert_string_equal(l[k].node_id, good_id);
    }
    /* With it full, nothing goes to the others. */
    node_lease extra;
    assert_int_equal(registry_acquire(r, &(reg_request){.model = "qwen2.5-7b", .now = 10}, NULL, 0, &extra), PLACE_BUSY);
    assert_false(registry_model_blocked(r, "qwen2.5-7b", err, sizeof err));
    /* Tried on the good node already: none is left. */
    const char *ex[] = {good_id};
    for (int k = 0; k < 4; k++) registry_release(r, &l[k], 20, 1);
    assert_int_equal(registry_acquire(r, &(reg_request){.model = "qwen2.5-7b", .now = 20}, ex, 1, &extra), PLACE_UNAVAILABLE);
    /* The views say why. */
    json_array_foreach(nodes, i, n) {
        const char *name = json_string_value(json_object_get(n, "name"));
        const char *st = json_string_value(json_object_get(json_array_get(json_object_get(n, "catalog"), 0), "state"));
        if (!strcmp(name, "good")) assert_string_equal(st, "loaded");
        if (!strcmp(name, "bad")) {
            assert_string_equal(st, "mismatch");
            assert_string_equal(json_string_value(json_array_get(json_object_get(n, "mismatches"), 0)), "qwen2.5-7b");
        }
        if (!strcmp(name, "unhashed")) assert_string_equal(st, "unverified");
    }
    json_t *models = registry_models_json(r, 20);
    json_t *q = json_array_get(json_object_get(models, "data"), 0);
    assert_string_equal(json_string_value(json_object_get(q, "id")), "qwen2.5-7b");
    assert_int_equal(json_array_size(json_object_get(q, "nodes")), 1);
    assert_int_equal(json_array_size(json_object_get(q, "status")), 3);
    assert_string_equal(json_string_value(json_array_get(json_object_get(q, "aliases"), 0)), "qwen");
    json_decref(models);
    json_t *st = registry_catalog_status(r);
    assert_int_equal(json_array_size(st), 3);
    json_decref(st);
    json_decref(nodes);
    registry_free(r);
    catalog_free(c);
}

static void model_only_on_mismatched_nodes_is_blocked(void **state)
{
    (void)state;
    char err[300], etag[24], why[300];
    catalog *c = parse(GOOD, err, sizeof err);
    registry_cfg cfg = {.join_token = "join", .heartbeat_ms = 1000, .missed_beats = 3, .token_ttl_ms = 10000};
    registry *r = registry_new(&cfg);
    registry_set_catalog(r, c);
    join(r, "bad", "22222222222222222222222222222222", "qwen2.5-7b", SHA_B, etag);
    join(r, "other", "44444444444444444444444444444444", "phi3", NULL, etag);
    assert_true(registry_model_blocked(r, "qwen2.5-7b", why, sizeof why));
    assert_non_null(strstr(why, "bad (mismatch, sha256 bbbbbbbbbbbb"));
    node_lease l;
    assert_int_equal(registry_acquire(r, &(reg_request){.model = "qwen2.5-7b", .now = 10}, NULL, 0, &l), PLACE_NO_MODEL);
    /* Outside the catalogue nothing is checked. */
    assert_false(registry_model_blocked(r, "phi3", why, sizeof why));
    assert_int_equal(registry_acquire(r, &(reg_request){.model = "phi3", .now = 10}, NULL, 0, &l), PLACE_OK);
    registry_free(r);
    catalog_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_every_field),
        cmocka_unit_test(errors_name_entry_and_field),
        cmocka_unit_test(aliases_resolve_to_the_name),
        cmocka_unit_test(overrides_apply_to_their_node_only),
        cmocka_unit_test(node_view_and_etag),
        cmocka_unit_test(hash_matching_ignores_case_only),
        cmocka_unit_test(entry_becomes_load_spec),
        cmocka_unit_test(worker_state_of_a_model),
        cmocka_unit_test(placement_skips_mismatched_nodes),
        cmocka_unit_test(mismatched_hash_blocks_routing),
        cmocka_unit_test(model_only_on_mismatched_nodes_is_blocked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
