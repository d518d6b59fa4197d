/* Unit tests for which started engines stay loaded (worker/residency:
 * keep-alive durations, idle expiry, least-recently-used eviction that never
 * touches busy or pinned engines), the fake GPUs' accounting of the
 * engines' memory, the measured-memory file (worker/measured) and the
 * --load options, command template and log tail (worker/managed). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit/gguf_writer.h"
#include "worker/gpu.h"
#include "worker/managed.h"
#include "worker/measured.h"
#include "worker/residency.h"

#define GiB 1073741824ULL
#define MiB 1048576ULL

static void durations(void **state)
{
    (void)state;
    int64_t ms = 0;
    assert_int_equal(res_parse_duration("300", &ms), 0);
    assert_int_equal(ms, 300000);
    assert_int_equal(res_parse_duration("10m", &ms), 0);
    assert_int_equal(ms, 600000);
    assert_int_equal(res_parse_duration("1h30m", &ms), 0);
    assert_int_equal(ms, 5400000);
    assert_int_equal(res_parse_duration("90s", &ms), 0);
    assert_int_equal(ms, 90000);
    assert_int_equal(res_parse_duration("2.5m", &ms), 0);
    assert_int_equal(ms, 150000);
    assert_int_equal(res_parse_duration("500ms", &ms), 0);
    assert_int_equal(ms, 500);
    assert_int_equal(res_parse_duration("0", &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(res_parse_duration("-1", &ms), 0);
    assert_int_equal(ms, RES_FOREVER);
    assert_int_equal(res_parse_duration("-5m", &ms), 0);
    assert_int_equal(ms, RES_FOREVER);
    const char *bad[] = {"", "m", "10x", "1h30", "inf", "nan", "0x10s", "--1", "5 m", "-", NULL};
    for (int i = 0; bad[i]; i++) assert_int_equal(res_parse_duration(bad[i], &ms), -1);
    /* Huge values are a year, not an overflow. */
    assert_int_equal(res_parse_duration("99999999h", &ms), 0);
    assert_true(ms > 0 && ms <= 366LL * 86400 * 1000);
}

static void request_keep_alive(void **state)
{
    (void)state;
    int64_t ms = 7;
    char err[200];
    assert_int_equal(res_keep_alive(NULL, &ms, err, sizeof err), 0);
    json_t *j = json_loads("{\"a\":0,\"b\":2.5,\"c\":-1,\"d\":\"10m\",\"e\":\"soon\",\"f\":null,\"g\":true}", 0, NULL);
    assert_int_equal(res_keep_alive(json_object_get(j, "f"), &ms, err, sizeof err), 0);
    assert_int_equal(res_keep_alive(json_object_get(j, "a"), &ms, err, sizeof err), 1);
    assert_int_equal(ms, 0);
    assert_int_equal(res_keep_alive(json_object_get(j, "b"), &ms, err, sizeof err), 1);
    assert_int_equal(ms, 2500);
    assert_int_equal(res_keep_alive(json_object_get(j, "c"), &ms, err, sizeof err), 1);
    assert_int_equal(ms, RES_FOREVER);
    assert_int_equal(res_keep_alive(json_object_get(j, "d"), &ms, err, sizeof err), 1);
    assert_int_equal(ms, 600000);
    assert_int_equal(res_keep_alive(json_object_get(j, "e"), &ms, err, sizeof err), -1);
    assert_non_null(strstr(err, "keep_alive"));
    assert_int_equal(res_keep_alive(json_object_get(j, "g"), &ms, err, sizeof err), -1);
    json_decref(j);
}

static void expiry(void **state)
{
    (void)state;
    res_engine e[4] = {
        {.running = 1, .last_used_ms = 1000, .keep_alive_ms = 500},
        {.running = 1, .last_used_ms = 1000, .keep_alive_ms = 0},
        {.running = 1, .busy = 1, .last_used_ms = 0, .keep_alive_ms = 0},
        {.running = 1, .last_used_ms = 0, .keep_alive_ms = RES_FOREVER},
    };
    assert_false(res_expired(&e[0], 1499));
    assert_true(res_expired(&e[0], 1500));
    assert_true(res_expired(&e[1], 1000)); /* keep_alive 0: right after the request */
    assert_false(res_expired(&e[2], 99999)); /* requests in flight */
    assert_false(res_expired(&e[3], 99999999));
    assert_int_equal(res_next_expiry(e, 1, 1200), 300);
    assert_int_equal(res_next_expiry(e, 4, 1200), 0);
    assert_int_equal(res_next_expiry(&e[2], 2, 5), -1);
    res_engine pinned = {.running = 1, .pinned = 1, .keep_alive_ms = 0};
    assert_false(res_expired(&pinned, 5));
    res_engine stopped = {.running = 0, .keep_alive_ms = 0};
    assert_false(res_expired(&stopped, 5));
}

static void eviction(void **state)
{
    (void)state;
    /* 24 GB card: A (oldest use), B busy, C pinned, D idle and newer. */
    res_engine e[4] = {
        {.running = 1, .last_used_ms = 100, .bytes = 8 * GiB},
        {.running = 1, .busy = 1, .last_used_ms = 50, .bytes = 6 * GiB},
        {.running = 1, .pinned = 1, .last_used_ms = 10, .bytes = 4 * GiB},
        {.running = 1, .last_used_ms = 300, .bytes = 4 * GiB},
    };
    int v[4];
    assert_int_equal(res_evictable(e, 4), 12 * GiB);
    assert_int_equal(res_pick_victims(e, 4, 2 * GiB, 2 * GiB, v), 0);      /* fits already */
    assert_int_equal(res_pick_victims(e, 4, 9 * GiB, 2 * GiB, v), 1);      /* A is enough */
    assert_int_equal(v[0], 0);
    assert_int_equal(res_pick_victims(e, 4, 12 * GiB, 2 * GiB, v), 2);     /* A, then D */
    assert_int_equal(v[0], 0);
    assert_int_equal(v[1], 3);
    /* Stopping every idle one would not be enough: nothing is stopped. */
    assert_int_equal(res_pick_victims(e, 4, 15 * GiB, 2 * GiB, v), -1);
    /* Least recently used first, even when a newer one alone would do. */
    e[3].bytes = 10 * GiB;
    assert_int_equal(res_pick_victims(e, 4, 9 * GiB, 2 * GiB, v), 1);
    assert_int_equal(v[0], 0);
    e[0].busy = 1;
    assert_int_equal(res_pick_victims(e, 4, 9 * GiB, 2 * GiB, v), 1);
    assert_int_equal(v[0], 3);
    res_engine none = {.running = 0, .bytes = 8 * GiB};
    assert_int_equal(res_pick_victims(&none, 1, 4 * GiB, 0, v), -1);
}

/* Fake GPUs lose an engine's share while it runs and list it as a process. */
static void fake_charges(void **state)
{
    (void)state;
    char err[200];
    const char *fakes[] = {"A:24:20", "B:12:10", NULL};
    gpu_probe *p = gpu_probe_open(fakes, err, sizeof err);
    assert_non_null(p);
    gpu_info g[GPU_MAX];
    gpu_probe_charge(p, 4242, 16 * GiB);
    assert_int_equal(gpu_probe_read(p, g, GPU_MAX), 2);
    assert_int_equal(g[0].free_bytes, 4 * GiB);
    assert_int_equal(g[1].free_bytes, 10 * GiB);
    assert_int_equal(g[0].nprocs, 1);
    assert_int_equal(g[0].procs[0].pid, 4242);
    assert_int_equal(g[0].procs[0].used_bytes, 16 * GiB);
    /* A second engine spills onto the next GPU. */
    gpu_probe_charge(p, 4343, 6 * GiB);
    assert_int_equal(gpu_probe_read(p, g, GPU_MAX), 2);
    assert_int_equal(g[0].free_bytes, 0);
    assert_int_equal(g[1].free_bytes, 8 * GiB);
    assert_int_equal(g[1].procs[0].pid, 4343);
    assert_int_equal(g[1].procs[0].used_bytes, 2 * GiB);
    /* Charging again replaces; stopping gives it all back. */
    gpu_probe_charge(p, 4343, 1 * GiB);
    gpu_probe_uncharge(p, 4242);
    assert_int_equal(gpu_probe_read(p, g, GPU_MAX), 2);
    assert_int_equal(g[0].free_bytes, 19 * GiB);
    assert_int_equal(g[1].free_bytes, 10 * GiB);
    gpu_probe_uncharge(p, 4343);
    gpu_probe_uncharge(p, 9999);
    assert_int_equal(gpu_probe_read(p, g, GPU_MAX), 2);
    assert_int_equal(g[0].free_bytes, 20 * GiB);
    assert_int_equal(g[0].nprocs, 0);
    gpu_probe_close(p);
    /* More than every GPU holds leaves them at zero, never wrapping. */
    gpu_info two[2] = {{.free_bytes = GiB, .nprocs = 0}, {.free_bytes = GiB, .nprocs = -1}};
    gpu_charge c = {77, 5 * GiB};
    gpu_fake_apply_charges(two, 2, &c, 1);
    assert_int_equal(two[0].free_bytes, 0);
    assert_int_equal(two[1].free_bytes, 0);
    assert_int_equal(two[1].nprocs, -1); /* a GPU without a process list keeps none */
    /* Memory still being given back is taken, but no process holds it. */
    gpu_info one = {.free_bytes = 4 * GiB, .nprocs = 0};
    gpu_charge back = {0, GiB};
    gpu_fake_apply_charges(&one, 1, &back, 1);
    assert_int_equal(one.free_bytes, 3 * GiB);
    assert_int_equal(one.nprocs, 0);
}

static void tmpfile_path(char *out, size_t len, const char *tag)
{
    snprintf(out, len, "/tmp/gpupool-unit-%s-%d", tag, (int)getpid());
}

static void measured_file(void **state)
{
    (void)state;
    char model[200], path[200], err[300];
    tmpfile_path(model, sizeof model, "model.gguf");
    tmpfile_path(path, sizeof path, "measured.json");
    FILE *f = fopen(model, "w");
    fputs("not really a model", f);
    fclose(f);
    unlink(path);
    measured_key k;
    assert_int_equal(measured_key_for(model, 2048, 2, "f16", "q8_0", 1, &k, err, sizeof err), 0);
    assert_int_equal(k.file_bytes, 18);
    measured_entry e = {.key = k, .model_bytes = 4000 * MiB, .kv_bytes = 512 * MiB, .compute_bytes = 300 * MiB,
                        .host_bytes = 280 * MiB, .measured_at = 1700000000};
    measured_entry got;
    assert_int_equal(measured_lookup(path, &k, &got, err, sizeof err), 0); /* no file yet */
    assert_int_equal(measured_store(path, &e, err, sizeof err), 0);
    assert_int_equal(measured_lookup(path, &k, &got, err, sizeof err), 1);
    assert_int_equal(got.kv_bytes, 512 * MiB);
    assert_int_equal(measured_total(&got), 4812 * MiB);
    assert_int_equal(got.key.flash_attn, 1);
    /* Other settings are another entry; the same ones replace it. */
    measured_key k2 = k;
    k2.parallel = 4;
    assert_int_equal(measured_lookup(path, &k2, &got, err, sizeof err), 0);
    measured_entry e2 = e;
    e2.key = k2;
    assert_int_equal(measured_store(path, &e2, err, sizeof err), 0);
    e.kv_bytes = 600 * MiB;
    assert_int_equal(measured_store(path, &e, err, sizeof err), 0);
    assert_int_equal(measured_lookup(path, &k, &got, err, sizeof err), 1);
    assert_int_equal(got.kv_bytes, 600 * MiB);
    json_t *root = json_load_file(path, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(root, "entries")), 2);
    json_decref(root);
    /* A rewritten model file is a different model. */
    f = fopen(model, "a");
    fputs("!", f);
    fclose(f);
    measured_key k3;
    assert_int_equal(measured_key_for(model, 2048, 2, "f16", "q8_0", 1, &k3, err, sizeof err), 0);
    assert_int_equal(measured_lookup(path, &k3, &got, err, sizeof err), 0);
    /* A damaged file reads as an error, and is replaced by the next store. */
    f = fopen(path, "w");
    fputs("{\"entries\": 5", f);
    fclose(f);
    assert_int_equal(measured_lookup(path, &k, &got, err, sizeof err), -1);
    assert_int_equal(measured_store(path, &e, err, sizeof err), 0);
    assert_int_equal(measured_lookup(path, &k, &got, err, sizeof err), 1);
    assert_int_equal(measured_key_for("/nonexistent/x.gguf", 1, 1, NULL, NULL, 0, &k, err, sizeof err), -1);
    json_t *j = measured_json(&got);
    assert_int_equal(json_integer_value(json_object_get(j, "total_bytes")), (json_int_t)measured_total(&got));
    json_decref(j);
    unlink(path);
    unlink(model);
}

static void log_tail(void **state)
{
    (void)state;
    char out[200];
    managed_log_tail("a\nb\n\n  \nc\r\nd\n", 3, out, sizeof out);
    assert_string_equal(out, "b | c | d");
    managed_log_tail("only", 4, out, sizeof out);
    assert_string_equal(out, "only");
    managed_log_tail("", 4, out, sizeof out);
    assert_string_equal(out, "");
    char small[8];
    managed_log_tail("first line\nsecond line\n", 2, small, sizeof small);
    assert_true(strlen(small) < sizeof small);
}

static const gw_llama SMALL = {16, 2048, 8192, 32, 8, 64, 32000, 0, 1, false};

static void load_options(void **state)
{
    (void)state;
    char gguf[300], spec[600], err[400], dir[200];
    gw w;
    gw_init(&w, 3);
    gw_llama_kv(&w, "llama", &SMALL, 4096);
    gw_llama_tensors(&w, &SMALL);
    gw_write_file(&w, gguf, sizeof gguf);
    gw_free(&w);
    tmpfile_path(dir, sizeof dir, "data");
    managed_defaults d = {.margin_pct = 5, .overhead_bytes = 384 * MiB};
    snprintf(d.data_dir, sizeof d.data_dir, "%s", dir);
    engine e;
    snprintf(spec, sizeof spec, "my/model=%s,ctx=1024,parallel=2,keep-alive=10m,ctk=q8_0,ctv=q8_0,fa=on,pin", gguf);
    assert_int_equal(managed_parse(spec, &d, &e, err, sizeof err), 0);
    managed_spec *m = e.managed;
    assert_string_equal(m->name, "my/model");
    assert_int_equal(m->keep_alive_ms, 600000);
    assert_true(m->pinned);
    assert_true(m->flash_attn);
    assert_string_equal(m->ctk, "q8_0");
    assert_false(m->measured);
    assert_int_equal(m->need_bytes, m->estimate_bytes);
    /* The log's file name keeps the model name readable but safe. */
    assert_non_null(strstr(m->log_path, "/logs/my_model.log"));
    char line[1024], *argv[32];
    int argc = managed_argv("{self} sim-engine -m {model} -c {ctx_total} -np {parallel} -ctk {cache_type_k} "
                            "-ctv {cache_type_v} -fa {flash_attn} --port {port}",
                            m, 4321, "/bin/gpupool", line, sizeof line, argv, 32);
    assert_int_equal(argc, 16);
    assert_string_equal(argv[0], "/bin/gpupool");
    assert_string_equal(argv[5], "2048");
    assert_string_equal(argv[9], "q8_0");
    assert_string_equal(argv[13], "on");
    assert_string_equal(argv[15], "4321");
    /* A measurement: its buffers, the overhead, then the margin on both. */
    measured_entry me = {.model_bytes = 1000 * MiB, .kv_bytes = 100 * MiB, .compute_bytes = 36 * MiB};
    assert_int_equal(managed_measured_need(&d, &me), (uint64_t)((1520 * MiB) * 1.05));
    json_t *j = managed_json(m, 0, 0);
    assert_string_equal(json_string_value(json_object_get(j, "state")), "stopped");
    assert_string_equal(json_string_value(json_object_get(j, "need_source")), "estimate");
    assert_true(json_is_true(json_object_get(j, "pinned")));
    json_decref(j);
    free(m);
    /* What a start measured before is what the next worker offers. */
    mkdir(dir, 0700);
    snprintf(spec, sizeof spec, "m=%s,ctx=2048", gguf);
    measured_entry prior = {.model_bytes = 900 * MiB, .kv_bytes = 64 * MiB, .compute_bytes = 100 * MiB};
    char mpath[300];
    snprintf(mpath, sizeof mpath, "%s/measured.json", dir);
    assert_int_equal(measured_key_for(gguf, 2048, 1, "f16", "f16", 0, &prior.key, err, sizeof err), 0);
    assert_int_equal(measured_store(mpath, &prior, err, sizeof err), 0);
    assert_int_equal(managed_parse(spec, &d, &e, err, sizeof err), 0);
    assert_true(e.managed->measured);
    assert_int_equal(e.managed->need_bytes, managed_measured_need(&d, &prior));
    assert_true(e.managed->need_bytes < e.managed->estimate_bytes);
    free(e.managed);
    unlink(mpath);
    rmdir(dir);

    const char *bad[] = {"x=%s,ctx=0", "x=%s,keep-alive=soon", "x=%s,ctk=q9", "x=%s,fa=maybe", "x=%s,pin=2",
                         "x=%s,colour=blue", "x=%s,ctv=q8_0", "=%s", NULL};
    for (int i = 0; bad[i]; i++) {
        snprintf(spec, sizeof spec, bad[i], gguf);
        assert_int_equal(managed_parse(spec, &d, &e, err, sizeof err), -1);
    }
    /* Quantized V without flash attention: the planner refuses, with its reason. */
    snprintf(spec, sizeof spec, "x=%s,ctv=q8_0", gguf);
    managed_parse(spec, &d, &e, err, sizeof err);
    assert_non_null(strstr(err, "x:"));
    unlink(gguf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(durations),       cmocka_unit_test(request_keep_alive), cmocka_unit_test(expiry),
        cmocka_unit_test(eviction),        cmocka_unit_test(fake_charges),       cmocka_unit_test(measured_file),
        cmocka_unit_test(load_options),    cmocka_unit_test(log_tail),
    };
    return cmocka_run_group_tests_name("residency", tests, NULL, NULL);
}
