/* Unit tests for reading what an engine allocated from its log
 * (worker/memlog), and the simulator's llama-server lines (sim/simload) read back by the same
 * parser.  The samples keep llama-server's exact line shapes from several
 * llama.cpp generations: the 2024 llm_load_tensors / llama_kv_cache_init /
 * llama_new_context_with_model lines, the 2025 load_tensors /
 * llama_kv_cache_unified / llama_context ones, and the current
 * llama_kv_cache / sched_reserve ones with their timestamped, coloured
 * prefix. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/ggml_types.h"
#include "plan/plan.h"
#include "sim/simload.h"
#include "unit/gguf_writer.h"
#include "worker/memlog.h"

#define MiB(x) ((uint64_t)llround((x) * 1048576.0))

static int parse(const char *text, memlog_figures *f)
{
    return memlog_parse(text, strlen(text), f);
}

/* A 2024 build with two GPUs: "buffer size" without "model". */
static void old_format_two_gpus(void **state)
{
    (void)state;
    const char *log =
        "llm_load_tensors: ggml ctx size =    0.37 MiB\n"
        "llm_load_tensors: offloading 40 repeating layers to GPU\n"
        "llm_load_tensors: offloaded 41/41 layers to GPU\n"
        "llm_load_tensors:        CPU buffer size =  1640.62 MiB\n"
        "llm_load_tensors:      CUDA0 buffer size =  5434.38 MiB\n"
        "llm_load_tensors:      CUDA1 buffer size = 13989.53 MiB\n"
        "....................................................................................\n"
        "llama_new_context_with_model: n_ctx      = 4096\n"
        "llama_kv_cache_init:      CUDA0 KV buffer size =  1536.00 MiB\n"
        "llama_kv_cache_init:      CUDA1 KV buffer size =  3584.00 MiB\n"
        "llama_new_context_with_model: KV self size  = 5120.00 MiB, K (f16): 2560.00 MiB, V (f16): 2560.00 MiB\n"
        "llama_new_context_with_model:  CUDA_Host  output buffer size =     1.95 MiB\n"
        "llama_new_context_with_model: pipeline parallelism enabled (n_copies=4)\n"
        "llama_new_context_with_model:      CUDA0 compute buffer size =   672.01 MiB\n"
        "llama_new_context_with_model:      CUDA1 compute buffer size =   588.02 MiB\n"
        "llama_new_context_with_model:  CUDA_Host compute buffer size =    40.02 MiB\n";
    memlog_figures f;
    assert_int_equal(parse(log, &f), 1);
    assert_int_equal(f.model_bytes, MiB(5434.38) + MiB(13989.53));
    assert_int_equal(f.kv_bytes, MiB(1536) + MiB(3584));
    assert_int_equal(f.compute_bytes, MiB(672.01) + MiB(588.02));
    /* The output buffer and the KV summary line are not buffers to count. */
    assert_int_equal(f.host_bytes, MiB(1640.62) + MiB(40.02));
    assert_int_equal(f.gpu_buffers, 6);
    assert_int_equal(memlog_gpu_total(&f), f.model_bytes + f.kv_bytes + f.compute_bytes);
}

/* A 2025 build: "model buffer size", llama_kv_cache_unified, llama_context. */
static void unified_format(void **state)
{
    (void)state;
    const char *log =
        "load_tensors: loading model tensors, this can take a while... (mmap = true)\n"
        "load_tensors: layer   0 assigned to device CUDA0, is_swa = 0\n"
        "load_tensors: offloading 32 repeating layers to GPU\n"
        "load_tensors: offloading output layer to GPU\n"
        "load_tensors: offloaded 33/33 layers to GPU\n"
        "load_tensors:        CUDA0 model buffer size =  4403.49 MiB\n"
        "load_tensors:   CPU_Mapped model buffer size =   281.81 MiB\n"
        ".......................................................................................\n"
        "llama_context: constructing llama_context\n"
        "llama_context: n_ctx         = 8192\n"
        "llama_context:  CUDA_Host  output buffer size =     0.49 MiB\n"
        "llama_kv_cache_unified:      CUDA0 KV buffer size =  1024.00 MiB\n"
        "llama_kv_cache_unified: size = 1024.00 MiB (  8192 cells,  32 layers,  1/1 seqs), K (f16):  512.00 MiB, "
        "V (f16):  512.00 MiB\n"
        "llama_context:      CUDA0 compute buffer size =   560.00 MiB\n"
        "llama_context:  CUDA_Host compute buffer size =    24.01 MiB\n"
        "llama_context: graph nodes  = 1158\n"
        "llama_context: graph splits = 2\n"
        "main: model loaded\n";
    memlog_figures f;
    assert_int_equal(parse(log, &f), 1);
    assert_int_equal(f.model_bytes, MiB(4403.49));
    assert_int_equal(f.kv_bytes, MiB(1024));
    assert_int_equal(f.compute_bytes, MiB(560));
    assert_int_equal(f.host_bytes, MiB(281.81) + MiB(24.01));
}

/* Current builds: the llama_kv_cache and sched_reserve prefixes, a
 * sliding-window model with two KV caches per device, a timestamp and
 * colour codes before each line, and the fitting pass that prints every
 * line once before the real load. */
static void newest_format_with_fit_pass(void **state)
{
    (void)state;
    const char *log =
        "\x1b[34m0.01.200.100\x1b[0m \x1b[32mI \x1b[0mload_tensors:        CUDA0 model buffer size =  9000.00 MiB\n"
        "\x1b[34m0.01.200.101\x1b[0m \x1b[32mI \x1b[0mload_tensors:   CPU_Mapped model buffer size =   900.00 MiB\n"
        "\x1b[34m0.01.300.000\x1b[0m \x1b[32mI \x1b[0mllama_kv_cache:      CUDA0 KV buffer size =  2000.00 MiB\n"
        "\x1b[34m0.01.300.500\x1b[0m \x1b[32mI \x1b[0msched_reserve:      CUDA0 compute buffer size =   900.00 MiB\n"
        "llama_params_fit: the model fits, loading it\n"
        "\x1b[34m1.14.600.100\x1b[0m \x1b[32mI \x1b[0mload_tensors:        CUDA0 model buffer size =  7640.20 MiB\n"
        "\x1b[34m1.14.600.101\x1b[0m \x1b[32mI \x1b[0mload_tensors:   CPU_Mapped model buffer size =   787.50 MiB\n"
        "\x1b[34m1.14.608.918\x1b[0m \x1b[32mI \x1b[0mllama_context:  CUDA_Host  output buffer size =     0.98 MiB\n"
        "\x1b[34m1.14.608.946\x1b[0m \x1b[32mI \x1b[0mllama_kv_cache_iswa: creating non-SWA KV cache, size = 8192 cells\n"
        "\x1b[34m1.14.610.021\x1b[0m \x1b[32mI \x1b[0mllama_kv_cache:      CUDA0 KV buffer size =   256.00 MiB\n"
        "\x1b[34m1.14.610.500\x1b[0m \x1b[32mI \x1b[0mllama_kv_cache_iswa: creating     SWA KV cache, size = 1536 cells\n"
        "\x1b[34m1.14.611.021\x1b[0m \x1b[32mI \x1b[0mllama_kv_cache:      CUDA0 KV buffer size =   240.00 MiB\n"
        "\x1b[34m1.14.623.585\x1b[0m \x1b[32mI \x1b[0mllama_kv_cache: size =  240.00 MiB (  1536 cells,  40 layers)\n"
        "\x1b[34m1.14.700.000\x1b[0m \x1b[32mI \x1b[0msched_reserve:      CUDA0 compute buffer size =   517.12 MiB\n"
        "\x1b[34m1.14.700.001\x1b[0m \x1b[32mI \x1b[0msched_reserve:  CUDA_Host compute buffer size =    24.02 MiB\n";
    memlog_figures f;
    assert_int_equal(parse(log, &f), 1);
    assert_int_equal(f.model_bytes, MiB(7640.20));
    assert_int_equal(f.kv_bytes, MiB(256) + MiB(240));
    assert_int_equal(f.compute_bytes, MiB(517.12));
    assert_int_equal(f.host_bytes, MiB(787.50) + MiB(24.02));
    assert_int_equal(f.lines, 6);
}

/* A CPU build (the repository's own comparison runs): every buffer is host
 * memory; a recurrent state counts with the KV cache. */
static void cpu_only_and_recurrent(void **state)
{
    (void)state;
    const char *cpu = "load_tensors:   CPU_Mapped model buffer size =  2106.26 MiB\n"
                      "llama_kv_cache:        CPU KV buffer size =    64.00 MiB\n"
                      "llama_context:        CPU compute buffer size =   154.01 MiB\n";
    memlog_figures f;
    assert_int_equal(parse(cpu, &f), 1);
    assert_int_equal(f.gpu_buffers, 0);
    assert_int_equal(memlog_gpu_total(&f), 0);
    assert_int_equal(f.host_bytes, MiB(2106.26) + MiB(64) + MiB(154.01));

    const char *mamba = "load_tensors:        CUDA0 model buffer size =  1000.00 MiB\n"
                        "llama_memory_recurrent:      CUDA0 RS buffer size =    23.75 MiB\n"
                        "llama_context:      CUDA0 compute buffer size =    50.00 MiB\n";
    assert_int_equal(parse(mamba, &f), 1);
    assert_int_equal(f.kv_bytes, MiB(23.75));
}

static void incomplete_and_noise(void **state)
{
    (void)state;
    memlog_figures f;
    /* Still loading: the weights are placed, the context is not made yet. */
    assert_int_equal(parse("load_tensors:        CUDA0 model buffer size =  4403.49 MiB\n", &f), 0);
    assert_int_equal(f.model_bytes, MiB(4403.49));
    assert_int_equal(parse("", &f), 0);
    assert_int_equal(memlog_parse(NULL, 0, &f), 0);
    const char *noise = "srv  log_server_r: request: GET /health 127.0.0.1 503\n"
                        "tensor blk.59.ffn_up_exps.weight buffer type overriden to CPU\n"
                        "llama_context: KV buffer size = lots of MiB\n"
                        "llama_context:      CUDA0 compute buffer size = -5.00 MiB\n"
                        "load_tensors:        CUDA0 model buffer size =  12.00 GiB\n"
                        "slot update_slots: id  0 | task 0 | buffer size = 3 MiB\n";
    assert_int_equal(parse(noise, &f), 0);
    assert_int_equal(f.lines, 0);
    assert_true(memlog_is_host("CPU"));
    assert_true(memlog_is_host("CPU_REPACK"));
    assert_true(memlog_is_host("CUDA_Host"));
    assert_true(memlog_is_host("Vulkan_Host"));
    assert_false(memlog_is_host("CUDA0"));
    assert_false(memlog_is_host("ROCm1"));
    assert_false(memlog_is_host("MTL0"));
}

/* The text without a final newline still parses its last line. */
static void last_line_unterminated(void **state)
{
    (void)state;
    memlog_figures f;
    const char *log = "load_tensors:        CUDA0 model buffer size =   100.00 MiB\n"
                      "llama_context:      CUDA0 compute buffer size =    10.50 MiB";
    assert_int_equal(parse(log, &f), 1);
    assert_int_equal(f.compute_bytes, MiB(10.5));
}

/* ---- the simulator's side ---- */

static const gw_llama SMALL = {16, 2048, 8192, 32, 8, 64, 32000, 0, 1, false};

static plan_model *small_model(char *path, size_t len)
{
    gw w;
    gw_init(&w, 3);
    gw_llama_kv(&w, "llama", &SMALL, 4096);
    gw_llama_tensors(&w, &SMALL);
    gw_write_file(&w, path, len);
    gw_free(&w);
    char err[256];
    plan_model *m = plan_model_open(path, err, sizeof err);
    assert_non_null(m);
    return m;
}

static void sim_flags(void **state)
{
    (void)state;
    sim_llama l;
    sim_llama_defaults(&l);
    char err[256];
    assert_int_equal(sim_llama_set(&l, "ctx-size", "8192", err, sizeof err), 0);
    assert_int_equal(sim_llama_set(&l, "parallel", "2", err, sizeof err), 0);
    assert_int_equal(sim_llama_set(&l, "n-gpu-layers", "999", err, sizeof err), 0);
    assert_int_equal(sim_llama_set(&l, "cache-type-k", "q8_0", err, sizeof err), 0);
    assert_int_equal(sim_llama_set(&l, "cache-type-v", "q4_0", err, sizeof err), 0);
    assert_int_equal(sim_llama_set(&l, "flash-attn", "", err, sizeof err), 0);
    assert_int_equal(l.flash_attn, 1);
    assert_int_equal(sim_llama_set(&l, "flash-attn", "auto", err, sizeof err), 0);
    assert_int_equal(l.flash_attn, 0);
    assert_int_equal(l.ctx_total, 8192);
    assert_int_equal(l.parallel, 2);
    assert_int_equal(l.ngl, 999);
    assert_int_equal(l.type_k, GGML_TYPE_Q8_0);
    assert_int_equal(l.type_v, GGML_TYPE_Q4_0);
    assert_int_equal(sim_llama_set(&l, "cache-type-k", "q9", err, sizeof err), -1);
    assert_non_null(strstr(err, "q9"));
    assert_int_equal(sim_llama_set(&l, "flash-attn", "maybe", err, sizeof err), -1);
    assert_int_equal(sim_llama_set(&l, "parallel", "0", err, sizeof err), -1);
    assert_int_equal(sim_llama_set(&l, "mem-factor", "0", err, sizeof err), -1);
    assert_int_equal(sim_llama_set(&l, "nonsense", "1", err, sizeof err), -1);
    /* The load takes the file's size at the disk speed, or what it is told. */
    assert_int_equal(sim_llama_load_ms(&l, 4000000000ULL), 2000);
    assert_int_equal(sim_llama_set(&l, "load-ms", "150", err, sizeof err), 0);
    assert_int_equal(sim_llama_load_ms(&l, 4000000000ULL), 150);
}

/* What the simulator prints for a file is what the planner says, and the
 * worker's parser reads back exactly that. */
static void sim_lines_read_back(void **state)
{
    (void)state;
    char path[300];
    plan_model *m = small_model(path, sizeof path);
    sim_llama l;
    sim_llama_defaults(&l);
    l.ctx_total = 4096;
    l.parallel = 2;
    sim_llama_sizes sz;
    char err[256];
    assert_int_equal(sim_llama_size(&l, m, &sz, err, sizeof err), 0);
    plan_settings s;
    plan_settings_init(&s);
    s.ctx = 2048;
    s.parallel = 2;
    plan_result r;
    assert_int_equal(plan_compute(m, &s, &r, err, sizeof err), 0);
    assert_int_equal(sz.gpu_weights, r.gpu[0].weights);
    assert_int_equal(sz.gpu_kv, r.gpu[0].kv);
    assert_int_equal(sz.gpu_compute, r.gpu[0].compute);
    assert_int_equal(sz.host_weights, r.host.weights);
    buf b = {0};
    sim_llama_model_lines(&b, &sz);
    memlog_figures f;
    assert_int_equal(memlog_parse(b.data, b.len, &f), 0); /* the context is not made yet */
    sim_llama_context_lines(&b, &sz);
    assert_int_equal(memlog_parse(b.data, b.len, &f), 1);
    /* Two decimals of MiB: within 5 KiB of each buffer. */
    assert_true(llabs((long long)f.model_bytes - (long long)sz.gpu_weights) < 6000);
    assert_true(llabs((long long)f.kv_bytes - (long long)sz.gpu_kv) < 6000);
    assert_true(llabs((long long)f.compute_bytes - (long long)sz.gpu_compute) < 6000);
    assert_non_null(strstr(b.data, "load_tensors:        CUDA0 model buffer size = "));
    buf_free(&b);

    /* --mem-factor scales what is printed; -ngl 0 keeps it all in host memory. */
    l.mem_factor = 0.5;
    sim_llama_sizes half;
    assert_int_equal(sim_llama_size(&l, m, &half, err, sizeof err), 0);
    assert_true(llabs((long long)half.gpu_weights * 2 - (long long)sz.gpu_weights) <= 2);
    l.mem_factor = 1;
    l.ngl = 0;
    assert_int_equal(sim_llama_size(&l, m, &sz, err, sizeof err), 0);
    assert_int_equal(sz.gpu_weights, 0);
    buf c = {0};
    sim_llama_model_lines(&c, &sz);
    sim_llama_context_lines(&c, &sz);
    assert_int_equal(memlog_parse(c.data, c.len, &f), 1);
    assert_int_equal(f.gpu_buffers, 0);
    buf_free(&c);
    /* A quantized V cache without flash attention is refused, as llama.cpp does. */
    l.type_v = GGML_TYPE_Q8_0;
    assert_int_equal(sim_llama_size(&l, m, &sz, err, sizeof err), -1);
    plan_model_free(m);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(old_format_two_gpus),
        cmocka_unit_test(unified_format),
        cmocka_unit_test(newest_format_with_fit_pass),
        cmocka_unit_test(cpu_only_and_recurrent),
        cmocka_unit_test(incomplete_and_noise),
        cmocka_unit_test(last_line_unterminated),
        cmocka_unit_test(sim_flags),
        cmocka_unit_test(sim_lines_read_back),
    };
    return cmocka_run_group_tests_name("memlog", tests, NULL, NULL);
}
