/* e2e: models started on demand where the planner says they fit, and
 * stopped when idle. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "unit/gguf_writer.h"

/* Llama-3-8B shape at F16: about 15 GiB of weights, so it fits a 24 GB card
 * with 22 GB free and not a 12 GB one. */
static const gw_llama LLAMA3_8B = {32, 4096, 14336, 32, 8, 128, 128256, 0, 1, false};

typedef struct fixture {
    h_pool p;
    char gguf[400];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    h_pool_init(&f->p, "lifecycle");
    gw w;
    gw_init(&w, 3);
    gw_llama_kv(&w, "llama", &LLAMA3_8B, 8192);
    gw_llama_tensors(&w, &LLAMA3_8B);
    setenv("TMPDIR", f->p.dir, 1);
    gw_write_file(&w, f->gguf, sizeof f->gguf);
    gw_free(&w);
    h_start_coordinator(&f->p, NULL);
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

#define CHAT "{\"model\":\"llama-local\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3}"

static void worker_args(fixture *f, char *out, size_t len, const char *gpu, const char *name)
{
    snprintf(out, len,
             "--fake-gpu %s --data %s/%s --load llama-local=%s,ctx=2048,parallel=1,keep-alive=1 "
             /* Like llama-server, the engine lists its own id (not the name the
              * worker gave the model) and answers whatever model is asked. */
             "--engine-cmd {self}%%20sim-engine%%20--model%%20engine-side-id%%20--single-model%%20"
             "--listen%%20127.0.0.1:{port}%%20--ttft-ms%%200%%20--tps%%200",
             gpu, f->p.dir, name, f->gguf);
}


static const char *engine_state(h_pool *p, const char *name, char *out, size_t len)
{
    h_resp r;
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    size_t i;
    json_t *n;
    out[0] = 0;
    json_array_foreach(json_object_get(r.json, "data"), i, n) {
        if (strcmp(json_string_value(json_object_get(n, "name")), name)) continue;
        json_t *e = json_array_get(json_object_get(n, "engines"), 0);
        snprintf(out, len, "%s", json_string_value(json_object_get(e, "state")));
    }
    h_resp_free(&r);
    return out;
}

/* The node lists the model as loaded (engine running and refreshed). */
static int heartbeats_seen(void *ctx)
{
    h_resp r;
    h_request(ctx, "GET", "/v1/models", NULL, NULL, &r);
    json_t *m = json_array_get(json_object_get(r.json, "data"), 0);
    int loaded = json_array_size(json_object_get(m, "nodes")) == 1;
    h_resp_free(&r);
    return loaded;
}

static int big_stopped(void *ctx)
{
    char st[32];
    return !strcmp(engine_state(ctx, "big", st, sizeof st), "stopped");
}

static void starts_where_it_fits_and_stops_when_idle(void **state)
{
    fixture *f = *state;
    h_pool *p = &f->p;
    char args[1200];
    worker_args(f, args, sizeof args, "RTX%204090:24:22", "big");
    h_start_worker(p, "big", NULL, args);
    worker_args(f, args, sizeof args, "RTX%203060:12:10", "small");
    h_start_worker(p, "small", NULL, args);

    /* The model is offered, with the planner's need, by both nodes. */
    h_resp r;
    h_request(p, "GET", "/v1/models", NULL, NULL, &r);
    json_t *m = json_array_get(json_object_get(r.json, "data"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "id")), "llama-local");
    assert_int_equal(json_array_size(json_object_get(m, "loadable_on")), 2);
    h_resp_free(&r);

    char big[64], small[64], v[64];
    h_node_field(p, "name", "big", "id", big, sizeof big);
    h_node_field(p, "name", "small", "id", small, sizeof small);
    for (int i = 0; i < 3; i++) {
        if (i == 2) h_wait_until(heartbeats_seen, p, 5000); /* after the engine has been refreshed */
        h_request(p, "POST", "/v1/chat/completions", CHAT, NULL, &r);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, "[simulated]"));
        assert_string_equal(h_header(&r, "X-Gpupool-Node", v, sizeof v), big);
        h_resp_free(&r);
    }
    char st[32];
    assert_string_equal(engine_state(p, "small", st, sizeof st), "stopped");
    /* keep-alive is 1 s: the idle engine is stopped, and started again on use */
    assert_true(h_wait_until(big_stopped, p, 10000));
    h_request(p, "POST", "/v1/chat/completions", CHAT, NULL, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
}

static void fits_nowhere(void **state)
{
    fixture *f = *state;
    h_pool *p = &f->p;
    char args[1200];
    worker_args(f, args, sizeof args, "RTX%203060:12:10", "small");
    h_start_worker(p, "small", NULL, args);
    h_resp r;
    h_request(p, "POST", "/v1/chat/completions", CHAT, NULL, &r);
    assert_int_equal(r.status, 503);
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")), "insufficient_vram");
    h_resp_free(&r);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(starts_where_it_fits_and_stops_when_idle, setup, teardown),
        cmocka_unit_test_setup_teardown(fits_nowhere, setup, teardown),
    };
    return cmocka_run_group_tests_name("e2e_lifecycle", tests, NULL, NULL);
}
