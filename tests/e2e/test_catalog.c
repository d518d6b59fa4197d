/* e2e: the model catalogue and one version everywhere.  A coordinator with
 * a catalogue of two models (alpha, beta) whose files pin a sha256, and two
 * workers that start the simulator as their engine: w1 holds alpha's file
 * and has no beta; w2 holds other bytes under both names (a per-node path
 * override) and more free VRAM, so placement alone would pick it first.
 * Requests for alpha (by alias) always go to w1; beta, which only w2 has,
 * fails with model_mismatch and reaches no node; /v1/nodes, /metrics,
 * /v1/models and `gpupool models` show the states; mended files are taken
 * up without restarts, and so is a changed entry.  A bad catalogue stops
 * `gpupool serve` with the entry and field named. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "unit/gguf_writer.h"
#include "util/ids.h"

/* A tiny llama: a few MiB of (sparse) F16 weights, hashed in no time. */
static const gw_llama TINY = {2, 256, 512, 4, 4, 64, 1000, 0, 1, false};

typedef struct fixture {
    h_pool p;
    char alpha[400], alpha_other[400], beta[400], beta_other[400];
    char sha_alpha[65], sha_beta[65];
    char catalog[400];
} fixture;

static void write_model(char *path, size_t len)
{
    gw w;
    gw_init(&w, 3);
    gw_llama_kv(&w, "llama", &TINY, 2048);
    gw_llama_tensors(&w, &TINY);
    gw_write_file(&w, path, len);
    gw_free(&w);
}

/* The same GGUF with its last byte changed: it plans the same, hashes differently. */
static void write_other(const char *from, char *path, size_t len)
{
    char cmd[1000];
    snprintf(path, len, "%s.other", from);
    snprintf(cmd, sizeof cmd, "cp %s %s && printf x | dd of=%s bs=1 seek=$(($(stat -c %%s %s) - 1)) conv=notrunc "
             "2>/dev/null", from, path, path, from);
    assert_int_equal(system(cmd), 0);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    h_pool_init(&f->p, "catalog");
    setenv("TMPDIR", f->p.dir, 1);
    write_model(f->alpha, sizeof f->alpha);
    write_model(f->beta, sizeof f->beta);
    write_other(f->alpha, f->alpha_other, sizeof f->alpha_other);
    write_other(f->beta, f->beta_other, sizeof f->beta_other);
    assert_int_equal(sha256_file_hex(f->alpha, f->sha_alpha), 0);
    assert_int_equal(sha256_file_hex(f->beta, f->sha_beta), 0);
    snprintf(f->catalog, sizeof f->catalog, "%s/catalog.json", f->p.dir);
    FILE *fp = fopen(f->catalog, "w");
    assert_non_null(fp);
    fprintf(fp,
            "{\"models\":[\n"
            " {\"name\":\"alpha\",\"aliases\":[\"a\",\"alpha-latest\"],\"engine\":\"llama-server\",\"gguf\":\"%s\",\n"
            "  \"sha256\":\"%s\",\"ctx\":512,\"parallel\":2,\"keep_alive\":\"10m\",\"trust\":\"trusted\",\n"
            "  \"nodes\":{\"w2\":{\"gguf\":\"%s\"}}},\n"
            " {\"name\":\"beta\",\"aliases\":[\"b\"],\"gguf\":\"%s\",\"sha256\":\"%s\",\"ctx\":512,\n"
            "  \"nodes\":{\"w1\":{\"gguf\":\"%s/nowhere/beta.gguf\"},\"w2\":{\"gguf\":\"%s\"}}}\n"
            "]}\n",
            f->alpha, f->sha_alpha, f->alpha_other, f->beta, f->sha_beta, f->p.dir, f->beta_other);
    fclose(fp);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    int problems = h_pool_cleanup(&f->p);
    free(f);
    return problems;
}

/* The worker's default llama-server command, run by the simulator. */
#define SIM_CMD                                                                                                   \
    "{self}%20sim-engine%20-m%20{model}%20--alias%20{name}%20--host%20127.0.0.1%20--port%20{port}%20-c%20"     \
    "{ctx_total}%20-np%20{parallel}%20--kv-unified%20-ngl%20999%20-ctk%20{cache_type_k}%20-ctv%20"             \
    "{cache_type_v}%20-fa%20{flash_attn}%20--ttft-ms%200"

/* extra: "--engine none" for a worker with only the catalogue's models
 * (otherwise the harness gives it a simulator engine of its own too). */
static h_proc *start_worker(fixture *f, const char *name, const char *gpu, const char *extra)
{
    char args[2000];
    snprintf(args, sizeof args, "--fake-gpu %s --data %s/data-%s --heartbeat-ms 300 --engine-cmd %s %s", gpu, f->p.dir,
             name, SIM_CMD, extra);
    return h_start_worker(&f->p, name, NULL, args);
}

/* The state of model on the node called name in GET /v1/models ("" when not listed). */
static void model_state(h_pool *p, const char *model, const char *name, char *out, size_t len)
{
    h_resp r;
    h_request(p, "GET", "/v1/models", NULL, NULL, &r);
    out[0] = 0;
    size_t i, k;
    json_t *m, *s;
    json_array_foreach(json_object_get(r.json, "data"), i, m) {
        if (strcmp(json_string_value(json_object_get(m, "id")), model)) continue;
        json_array_foreach(json_object_get(m, "status"), k, s)
            if (!strcmp(json_string_value(json_object_get(s, "name")), name))
                snprintf(out, len, "%s", json_string_value(json_object_get(s, "state")));
    }
    h_resp_free(&r);
}

typedef struct want { h_pool *p; const char *model, *node, *state; } want;

static int state_is(void *arg)
{
    want *w = arg;
    char st[32];
    model_state(w->p, w->model, w->node, st, sizeof st);
    return !strcmp(st, w->state);
}

/* Generous: a worker looks at its files again every 10 s, then hashes them. */
static void wait_state(h_pool *p, const char *model, const char *node, const char *state)
{
    want w = {p, model, node, state};
    if (!h_wait_until(state_is, &w, 30000)) {
        char st[32];
        model_state(p, model, node, st, sizeof st);
        /* What the coordinator knows of the nodes, for whoever reads a failure. */
        h_resp r;
        h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
        fprintf(stderr, "GET /v1/nodes: %s\n", r.body ? r.body : "(none)");
        h_resp_free(&r);
        h_dump_logs(p);
        fail_msg("%s on %s: state '%s', wanted '%s'", model, node, st, state);
    }
}

static long chat(h_pool *p, const char *model, h_resp *r)
{
    char body[256];
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3}",
             model);
    h_request(p, "POST", "/v1/chat/completions", body, NULL, r);
    return r->status;
}

static int log_count(h_proc *proc, const char *text)
{
    FILE *fp = fopen(proc->log, "r");
    if (!fp) return 0;
    int n = 0;
    char line[4096];
    while (fgets(line, sizeof line, fp))
        if (strstr(line, text)) n++;
    fclose(fp);
    return n;
}

/* The "catalog" states a node shows in GET /v1/nodes, as "alpha=loaded,beta=fetching". */
static void node_catalog(h_pool *p, const char *name, char *out, size_t len, char *mismatches, size_t mlen)
{
    h_resp r;
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    out[0] = mismatches[0] = 0;
    size_t i, k, o = 0, mo = 0;
    json_t *n, *m;
    json_array_foreach(json_object_get(r.json, "data"), i, n) {
        if (strcmp(json_string_value(json_object_get(n, "name")), name)) continue;
        json_array_foreach(json_object_get(n, "catalog"), k, m)
            o += (size_t)snprintf(out + o, len - o, "%s%s=%s", o ? "," : "", json_string_value(json_object_get(m, "model")),
                                  json_string_value(json_object_get(m, "state")));
        json_array_foreach(json_object_get(n, "mismatches"), k, m)
            mo += (size_t)snprintf(mismatches + mo, mlen - mo, "%s%s", mo ? "," : "", json_string_value(m));
    }
    h_resp_free(&r);
}

static void mismatched_file_never_gets_work(void **state)
{
    fixture *f = *state;
    char args[600];
    snprintf(args, sizeof args, "--catalog %s --heartbeat-ms 300", f->catalog);
    h_start_coordinator(&f->p, args);
    h_proc *w1 = start_worker(f, "w1", "RTX%203060:12:8", "--engine none");
    h_proc *w2 = start_worker(f, "w2", "RTX%204090:24:22", "");
    wait_state(&f->p, "alpha", "w1", "loadable");
    wait_state(&f->p, "alpha", "w2", "mismatch");
    wait_state(&f->p, "beta", "w2", "mismatch");
    /* w1 lacks beta's file and asks its peers for it, but the one peer with
     * a beta holds other bytes: it keeps trying. */
    wait_state(&f->p, "beta", "w1", "fetching");
    assert_true(h_log_contains(w2, "is not the catalogue's file"));

    char st[200], mism[200];
    node_catalog(&f->p, "w2", st, sizeof st, mism, sizeof mism);
    assert_string_equal(st, "alpha=mismatch,beta=mismatch");
    assert_string_equal(mism, "alpha,beta");
    node_catalog(&f->p, "w1", st, sizeof st, mism, sizeof mism);
    assert_string_equal(st, "alpha=loadable,beta=fetching");
    assert_string_equal(mism, "");

    h_resp r;
    h_request(&f->p, "GET", "/metrics", NULL, NULL, &r);
    assert_non_null(strstr(r.body, "gpupool_model_mismatch{node=\"w2\",model=\"alpha\"} 1"));
    assert_non_null(strstr(r.body, "gpupool_model_mismatch{node=\"w2\",model=\"beta\"} 1"));
    assert_non_null(strstr(r.body, "gpupool_model_mismatches 2"));
    assert_null(strstr(r.body, "gpupool_model_mismatch{node=\"w1\""));
    h_resp_free(&r);

    /* w2 has more free VRAM, so only the digest keeps alpha off it; the
     * aliases name the same entry. */
    char w1_id[64];
    h_node_field(&f->p, "name", "w1", "id", w1_id, sizeof w1_id);
    const char *names[] = {"a", "alpha-latest", "alpha", "a", "a", "alpha"};
    for (int i = 0; i < 6; i++) {
        if (chat(&f->p, names[i], &r) != 200) fail_msg("%s: %ld %s", names[i], r.status, r.body ? r.body : "");
        char node[64];
        assert_non_null(h_header(&r, "X-Gpupool-Node", node, sizeof node));
        assert_string_equal(node, w1_id);
        h_resp_free(&r);
    }
    wait_state(&f->p, "alpha", "w1", "loaded");
    wait_state(&f->p, "alpha", "w2", "mismatch");
    /* The engine on w2 never started. */
    assert_int_equal(log_count(w2, "engine for alpha is up"), 0);
    assert_int_equal(log_count(w1, "engine for alpha is up"), 1);

    /* An async task may name an alias too. */
    long status = 0;
    char *task = h_submit_task(&f->p, "{\"type\":\"chat\",\"model\":\"alpha-latest\",\"input\":{\"messages\":"
                                      "[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3}}", NULL, &status);
    assert_int_equal(status, 202);
    json_t *done = h_wait_task_final(&f->p, task, 15000);
    assert_non_null(done);
    assert_string_equal(json_string_value(json_object_get(done, "status")), "succeeded");
    assert_string_equal(json_string_value(json_object_get(done, "model")), "alpha");
    json_decref(done);
    free(task);

    /* So may a batch. */
    h_request(&f->p, "POST", "/v1/batches",
              "{\"type\":\"chat\",\"model\":\"a\",\"inputs\":[{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
              "\"max_tokens\":2}]}", NULL, &r);
    if (r.status != 202) fail_msg("batch: %ld %s", r.status, r.body ? r.body : "");
    assert_string_equal(json_string_value(json_object_get(r.json, "model")), "alpha");
    h_resp_free(&r);

    /* beta is only on the node whose file differs: refused, sent nowhere. */
    const char *betas[] = {"beta", "b"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(chat(&f->p, betas[i], &r), 503);
        const char *code = json_string_value(json_object_get(json_object_get(r.json, "error"), "code"));
        const char *msg = json_string_value(json_object_get(json_object_get(r.json, "error"), "message"));
        assert_string_equal(code, "model_mismatch");
        assert_non_null(strstr(msg, "w2 (mismatch"));
        assert_non_null(strstr(msg, "'beta'"));
        h_resp_free(&r);
    }
    task = h_submit_task(&f->p, "{\"type\":\"chat\",\"model\":\"b\",\"input\":{\"messages\":"
                                "[{\"role\":\"user\",\"content\":\"hi\"}]}}", NULL, &status);
    assert_int_equal(status, 503);
    free(task);
    assert_int_equal(log_count(w2, "engine for beta"), 0);

    /* GET /v1/models: the entries with their aliases and digests. */
    h_request(&f->p, "GET", "/v1/models", NULL, NULL, &r);
    assert_string_equal(json_string_value(json_object_get(r.json, "object")), "list");
    json_t *m;
    size_t i;
    int seen = 0;
    json_array_foreach(json_object_get(r.json, "data"), i, m) {
        if (strcmp(json_string_value(json_object_get(m, "id")), "alpha")) continue;
        seen = 1;
        assert_string_equal(json_string_value(json_object_get(m, "object")), "model");
        assert_string_equal(json_string_value(json_array_get(json_object_get(m, "aliases"), 0)), "a");
        assert_string_equal(json_string_value(json_object_get(m, "sha256")), f->sha_alpha);
        assert_int_equal(json_array_size(json_object_get(m, "nodes")), 1);
        assert_int_equal(json_array_size(json_object_get(m, "loadable_on")), 0);
    }
    assert_true(seen);
    h_resp_free(&r);

    /* gpupool models prints the same. */
    char cli[300];
    snprintf(cli, sizeof cli, "models --coordinator %s", f->p.base);
    h_proc *cmd = h_run_cli(&f->p, "models", cli);
    assert_int_equal(h_wait_exit(cmd, 10000), 0);
    char line[200];
    snprintf(line, sizeof line, "%.12s", f->sha_alpha);
    assert_true(h_log_contains(cmd, line));
    assert_true(h_log_contains(cmd, "a,alpha-latest"));
    assert_true(h_log_contains(cmd, "w1:loaded w2:mismatch") || h_log_contains(cmd, "w2:mismatch w1:loaded"));
    assert_true(h_log_contains(cmd, "w2:mismatch"));

    /* Putting the catalogue's bytes in place on w2 mends it, and copying
     * beta's file where w1 looks for it gives w1 beta, without a restart:
     * the workers look at their files again. */
    char fix[3000];
    snprintf(fix, sizeof fix, "cp %s %s.tmp && mv %s.tmp %s && mkdir -p %s/nowhere && cp %s %s/nowhere/beta.gguf",
             f->alpha, f->alpha_other, f->alpha_other, f->alpha_other, f->p.dir, f->beta, f->p.dir);
    assert_int_equal(system(fix), 0);
    wait_state(&f->p, "alpha", "w2", "loadable");
    wait_state(&f->p, "beta", "w1", "loadable");
    assert_int_equal(chat(&f->p, "b", &r), 200);
    char beta_node[64];
    assert_non_null(h_header(&r, "X-Gpupool-Node", beta_node, sizeof beta_node));
    assert_string_equal(beta_node, w1_id);
    h_resp_free(&r);
    h_request(&f->p, "GET", "/metrics", NULL, NULL, &r);
    assert_null(strstr(r.body, "gpupool_model_mismatch{node=\"w2\",model=\"alpha\"}"));
    assert_non_null(strstr(r.body, "gpupool_model_mismatches 1")); /* beta on w2 is still another file */
    h_resp_free(&r);

    /* The catalogue went to each worker once, not with every beat. */
    assert_int_equal(log_count(w1, "model catalogue "), 1);
    assert_int_equal(log_count(w2, "model catalogue "), 1);
}

/* A changed entry reaches a worker that holds the old one: the coordinator
 * restarts with another path for w1, the worker takes it up (its engine is
 * stopped), hashes the new file and the pool sees the mismatch. */
static void changed_entry_is_taken_up(void **state)
{
    fixture *f = *state;
    char args[600];
    snprintf(args, sizeof args, "--catalog %s --heartbeat-ms 300", f->catalog);
    h_start_coordinator(&f->p, args);
    h_proc *w1 = start_worker(f, "w1", "RTX%203060:12:8", "--engine none");
    wait_state(&f->p, "alpha", "w1", "loadable");
    FILE *fp = fopen(f->catalog, "w");
    assert_non_null(fp);
    fprintf(fp, "{\"models\":[{\"name\":\"alpha\",\"gguf\":\"%s\",\"sha256\":\"%s\",\"ctx\":512,"
            "\"nodes\":{\"w1\":{\"gguf\":\"%s\"}}}]}\n", f->alpha, f->sha_alpha, f->alpha_other);
    fclose(fp);
    h_kill(f->p.coord, SIGTERM);
    assert_int_equal(h_wait_exit(f->p.coord, 10000), 0);
    h_restart_coordinator(&f->p);
    wait_state(&f->p, "alpha", "w1", "mismatch");
    assert_true(h_log_contains(w1, "catalogue model alpha: new settings taken up"));
    assert_int_equal(log_count(w1, "model catalogue "), 2);
    h_resp r;
    assert_int_equal(chat(&f->p, "alpha", &r), 503);
    h_resp_free(&r);
}

static void bad_catalogue_names_entry_and_field(void **state)
{
    fixture *f = *state;
    char path[400], args[1000];
    snprintf(path, sizeof path, "%s/bad.json", f->p.dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fprintf(fp, "{\"models\":[{\"name\":\"gamma\",\"gguf\":\"%s\",\"sha256\":\"abc\"}]}", f->alpha);
    fclose(fp);
    snprintf(args, sizeof args, "serve --listen 127.0.0.1:0 --data %s/bad-data --catalog %s", f->p.dir, path);
    h_proc *s = h_run_cli(&f->p, "serve-bad", args);
    assert_int_not_equal(h_wait_exit(s, 10000), 0);
    assert_true(h_log_contains(s, "model 'gamma': 'sha256' must be 64 hex digits"));
}

static int file_has_sha(void *arg)
{
    const char **pair = arg;
    char sha[65];
    return sha256_file_hex(pair[0], sha) == 0 && !strcmp(sha, pair[1]);
}

/* A catalogue model whose file one node lacks comes to it from the node
 * that has it: w2 starts "fetching", downloads and checks the file, and
 * then serves the model itself. */
static void missing_file_is_fetched_from_a_peer(void **state)
{
    fixture *f = *state;
    char dir[500], path[600], cat[500], args[1200];
    snprintf(dir, sizeof dir, "%s/w2-models", f->p.dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/gamma.gguf", dir);
    snprintf(cat, sizeof cat, "%s/fetch-catalog.json", f->p.dir);
    FILE *fp = fopen(cat, "w");
    assert_non_null(fp);
    fprintf(fp,
            "{\"models\":[{\"name\":\"gamma\",\"gguf\":\"%s\",\"sha256\":\"%s\",\"ctx\":512,"
            "\"nodes\":{\"w2\":{\"gguf\":\"%s\"}}}]}\n",
            f->alpha, f->sha_alpha, path);
    fclose(fp);
    snprintf(args, sizeof args, "--catalog %s --heartbeat-ms 300", cat);
    h_start_coordinator(&f->p, args);
    start_worker(f, "w1", "RTX%203060:12:8", "--engine none");
    h_proc *w2 = start_worker(f, "w2", "RTX%204090:24:22", "--engine none");
    wait_state(&f->p, "gamma", "w1", "loadable");
    wait_state(&f->p, "gamma", "w2", "loadable");
    const char *pair[] = {path, f->sha_alpha};
    assert_true(h_wait_until(file_has_sha, pair, 5000));
    assert_true(h_log_contains(w2, "sha256 verified"));
    /* With w1 drained, w2 serves it from its own copy. */
    char drain[600];
    snprintf(drain, sizeof drain, "drain w1 --coordinator %s", f->p.base);
    h_proc *c = h_run_cli(&f->p, "cli", drain);
    assert_int_equal(h_wait_exit(c, 10000), 0);
    h_resp r;
    assert_int_equal(chat(&f->p, "gamma", &r), 200);
    char node[64], w2_id[64];
    assert_non_null(h_header(&r, "X-Gpupool-Node", node, sizeof node));
    h_node_field(&f->p, "name", "w2", "id", w2_id, sizeof w2_id);
    assert_string_equal(node, w2_id);
    h_resp_free(&r);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(mismatched_file_never_gets_work, setup, teardown),
        cmocka_unit_test_setup_teardown(changed_entry_is_taken_up, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_catalogue_names_entry_and_field, setup, teardown),
        cmocka_unit_test_setup_teardown(missing_file_is_fetched_from_a_peer, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
