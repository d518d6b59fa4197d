/* e2e: POST /v1/plan answers what `gpupool plan --json` prints, for presets
 * and for GGUF files in the coordinator's models directory only. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "unit/gguf_writer.h"

static int setup(void **state)
{
    h_pool *p = h_pool_new("plan");
    char args[512];
    snprintf(args, sizeof args, "--models-dir %s/models", p->dir);
    char models[300];
    snprintf(models, sizeof models, "%s/models", p->dir);
    mkdir(models, 0700);
    h_start_coordinator(p, args);
    *state = p;
    return 0;
}

/* The JSON the CLI printed into its log. */
static json_t *cli_json(h_pool *p, const char *args)
{
    h_proc *cli = h_run_cli(p, "plan-cli", args);
    assert_true(h_wait_exit(cli, 20000) <= 1);
    FILE *f = fopen(cli->log, "r");
    assert_non_null(f);
    json_error_t e;
    json_t *j = json_loadf(f, JSON_DISABLE_EOF_CHECK, &e);
    fclose(f);
    if (!j) fail_msg("CLI output is not JSON: %s", e.text);
    return j;
}

static void preset_matches_cli(void **state)
{
    h_pool *p = *state;
    h_resp r;
    h_request(p, "POST", "/v1/plan",
              "{\"model\":\"llama-3.1-8b\",\"quant\":\"Q4_K_M\",\"ctx\":8192,\"parallel\":2,\"gpus\":[\"12G\",\"8G\"]}",
              NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *cli = cli_json(p, "plan --model llama-3.1-8b --quant Q4_K_M --ctx 8192 --parallel 2 --gpu 12G,8G --json");
    assert_true(json_equal(r.json, cli));
    assert_true(json_is_true(json_object_get(r.json, "fits")));
    json_decref(cli);
    h_resp_free(&r);
}

static void gguf_file_in_models_dir(void **state)
{
    h_pool *p = *state;
    static const gw_llama small = {32, 4096, 14336, 32, 8, 128, 128256, 0, 1 /* F16 */, false};
    gw w;
    gw_init(&w, 3);
    gw_llama_kv(&w, "llama", &small, 8192);
    gw_llama_tensors(&w, &small);
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/models", p->dir);
    setenv("TMPDIR", dir, 1);
    gw_write_file(&w, path, sizeof path);
    gw_free(&w);
    char body[512];
    snprintf(body, sizeof body, "{\"file\":\"%s\",\"ctx\":8192,\"gpus\":[\"24G\"]}", basename(path));
    h_resp r;
    h_request(p, "POST", "/v1/plan", body, NULL, &r);
    assert_int_equal(r.status, 200);
    char args[600];
    snprintf(args, sizeof args, "plan %s --ctx 8192 --gpu 24G --json", path);
    json_t *cli = cli_json(p, args);
    assert_true(json_equal(r.json, cli));
    json_decref(cli);
    h_resp_free(&r);
}

static void refusals(void **state)
{
    h_pool *p = *state;
    h_resp r;
    h_request(p, "POST", "/v1/plan", "{\"file\":\"../../../../etc/passwd\"}", NULL, &r);
    assert_int_equal(r.status, 404);
    h_resp_free(&r);
    h_request(p, "POST", "/v1/plan", "{\"model\":\"gpt-17\"}", NULL, &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "param")), "model");
    h_resp_free(&r);
    h_request(p, "POST", "/v1/plan", "{\"model\":\"llama-3.1-8b\",\"ctx\":\"lots\"}", NULL, &r);
    assert_int_equal(r.status, 400);
    h_resp_free(&r);
    h_request(p, "POST", "/v1/plan", "{}", NULL, &r);
    assert_int_equal(r.status, 400);
    h_resp_free(&r);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(preset_matches_cli),
        cmocka_unit_test(gguf_file_in_models_dir),
        cmocka_unit_test(refusals),
    };
    return cmocka_run_group_tests_name("e2e_plan", tests, setup, h_pool_teardown);
}
