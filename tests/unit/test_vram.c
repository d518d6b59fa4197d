/* test_vram: the estimate against hand-computed byte counts, from GGUF files
 * that carry real architecture metadata and real tensor shapes (their data
 * regions are holes), and from the presets; plus the JSON and the CLI. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "plan/arch.h"
#include "plan/ggml_types.h"
#include "plan/plan.h"
#include "unit/gguf_writer.h"

#define MiB (1024ull * 1024)
#define GiB (1024ull * MiB)

static plan_model *load(gw *w)
{
    char path[256], err[256];
    gw_write_file(w, path, sizeof path);
    plan_model *m = plan_model_open(path, err, sizeof err);
    unlink(path);
    gw_free(w);
    if (!m) fail_msg("%s", err);
    return m;
}

static const gw_llama LLAMA2_7B = {32, 4096, 11008, 32, 32, 128, 32000, 0, GGML_TYPE_F16, false};
static const gw_llama LLAMA3_8B = {32, 4096, 14336, 32, 8, 128, 128256, 0, GGML_TYPE_F16, false};
static const gw_llama QWEN25_7B = {28, 3584, 18944, 28, 4, 128, 152064, 0, GGML_TYPE_F16, false};

static plan_model *llama_like(const char *arch, const gw_llama *c, uint32_t ctx_train)
{
    gw w;
    gw_init(&w, 3);
    gw_llama_kv(&w, arch, c, ctx_train);
    gw_llama_tensors(&w, c);
    return load(&w);
}

static plan_result run(const plan_model *m, const plan_settings *s)
{
    plan_result r;
    char err[256];
    if (plan_compute(m, s, &r, err, sizeof err) < 0) fail_msg("%s", err);
    return r;
}

static plan_settings at(uint32_t ctx, uint32_t parallel)
{
    plan_settings s;
    plan_settings_init(&s);
    s.ctx = ctx;
    s.parallel = parallel;
    return s;
}

/* --- KV cache --------------------------------------------------------------- */

static void test_kv_llama2_7b(void **state)
{
    (void)state;
    plan_model *m = llama_like("llama", &LLAMA2_7B, 4096);
    plan_settings s = at(2048, 1);
    plan_result r = run(m, &s);
    assert_int_equal(r.kv_bytes_per_token, 524288);   /* 32 layers x 32 heads x 128 x 2 (K,V) x 2 bytes */
    assert_int_equal(r.kv_cells, 2048);
    assert_int_equal(r.kv, 1 * GiB);
    assert_int_equal(r.gpu[0].kv, 1 * GiB);
    /* Weights: token_embd stays on the host, the rest is on the GPU. */
    assert_int_equal(r.host.weights, 32000ull * 4096 * 2);
    assert_int_equal(m->params_total, 6738415616ull);  /* Llama-2-7B's published count */
    plan_model_free(m);
}

static void test_kv_llama3_8b(void **state)
{
    (void)state;
    plan_model *m = llama_like("llama", &LLAMA3_8B, 131072);
    plan_settings s = at(8192, 1);
    plan_result r = run(m, &s);
    assert_int_equal(r.kv_bytes_per_token, 131072);
    assert_int_equal(r.kv, 1024 * MiB);
    assert_int_equal(m->params_total, 8030261248ull);
    plan_model_free(m);
}

static void test_kv_qwen25_7b(void **state)
{
    (void)state;
    plan_model *m = llama_like("qwen2", &QWEN25_7B, 32768);
    plan_settings s = at(32768, 1);
    plan_result r = run(m, &s);
    assert_int_equal(r.kv, 1792 * MiB);
    plan_model_free(m);
}

static void test_kv_quantized(void **state)
{
    (void)state;
    plan_model *m = llama_like("llama", &LLAMA3_8B, 131072);
    plan_settings s = at(8192, 1);
    s.type_k = s.type_v = GGML_TYPE_Q8_0;
    s.flash_attn = true;
    plan_result r = run(m, &s);
    /* q8_0 is 34 bytes per 32 elements: 1024 MiB x 34/64. */
    assert_int_equal(r.kv, 1024 * MiB / 64 * 34);
    assert_int_equal(r.kv_bytes_per_token, 32 * 2 * (1024 / 32 * 34));
    /* The other cache types at their block sizes. */
    static const struct { uint32_t t; uint64_t row; } rows[] = {
        {GGML_TYPE_F32, 4096}, {GGML_TYPE_BF16, 2048}, {GGML_TYPE_Q4_0, 576}, {GGML_TYPE_Q4_1, 640},
        {GGML_TYPE_IQ4_NL, 576}, {GGML_TYPE_Q5_0, 704}, {GGML_TYPE_Q5_1, 768},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        s.type_k = s.type_v = rows[i].t;
        r = run(m, &s);
        assert_int_equal(r.kv_bytes_per_token, 32 * 2 * rows[i].row);
    }
    /* Quantized V without flash attention is refused, as llama.cpp does;
     * a quantized K alone is fine. */
    s.flash_attn = false;
    s.type_k = GGML_TYPE_Q8_0;
    s.type_v = GGML_TYPE_Q4_0;
    char err[256];
    assert_int_equal(plan_compute(m, &s, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "needs --flash-attn"));
    s.type_v = GGML_TYPE_F16;
    r = run(m, &s);
    assert_int_equal(r.kv_bytes_per_token, 32 * (1088 + 2048));
    /* Types llama.cpp does not offer for the cache. */
    s.type_k = GGML_TYPE_Q4_K;
    assert_int_equal(plan_compute(m, &s, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "not one llama.cpp accepts"));
    plan_model_free(m);
}

static void test_kv_padding_and_slots(void **state)
{
    (void)state;
    plan_model *m = llama_like("llama", &LLAMA3_8B, 131072);
    plan_settings s = at(1000, 1);
    plan_result r = run(m, &s);
    assert_int_equal(r.kv_cells, 1024);
    assert_int_equal(r.kv, 1024ull * 131072);
    /* Slots share one unified cache of ctx x parallel cells, padded once. */
    s = at(1000, 3);
    r = run(m, &s);
    assert_int_equal(r.kv_cells, 3072);
    assert_int_equal(r.kv, 3072ull * 131072);
    s = at(4096, 4);
    r = run(m, &s);
    assert_int_equal(r.kv, 2 * GiB);
    plan_model_free(m);
}

static void test_kv_per_layer_arrays(void **state)
{
    (void)state;
    gw_llama c = {4, 1024, 4096, 8, 8, 128, 1000, 0, GGML_TYPE_F16, false};
    gw w;
    gw_init(&w, 3);
    gw_kv_str(&w, "general.architecture", "llama");
    gw_kv_u32(&w, "llama.block_count", 4);
    gw_kv_u32(&w, "llama.context_length", 4096);
    gw_kv_u32(&w, "llama.embedding_length", 1024);
    gw_kv_u32(&w, "llama.feed_forward_length", 4096);
    static const uint32_t heads[] = {8, 8, 8, 8}, kv_heads[] = {8, 8, 4, 0};
    gw_kv_arr_u32(&w, "llama.attention.head_count", heads, 4);
    gw_kv_arr_u32(&w, "llama.attention.head_count_kv", kv_heads, 4);
    gw_llama_tensors(&w, &c);
    plan_model *m = load(&w);
    assert_false(m->has_kv[3]);   /* no KV heads, no cells */
    plan_settings s = at(4096, 1);
    s.flash_attn = true;
    plan_result r = run(m, &s);
    /* Head size n_embd/n_head = 128; K and V rows of 8, 8, 4 heads, f16. */
    assert_int_equal(r.kv_bytes_per_token, (8 + 8 + 4) * 128 * 2 * 2);
    /* Without flash attention V is stored transposed and llama.cpp pads
     * every layer's V to the widest one. */
    s.flash_attn = false;
    r = run(m, &s);
    assert_int_equal(r.kv_bytes_per_token, (8 + 8 + 4) * 128 * 2 + 3 * 8 * 128 * 2);
    plan_model_free(m);
}

/* Gemma-2-9B: 42 layers, 8 KV heads x 256, window 4096 on every other layer. */
static plan_model *gemma2_9b(void)
{
    gw_llama c = {42, 3584, 14336, 16, 8, 256, 256000, 0, GGML_TYPE_F16, true};
    gw w;
    gw_init(&w, 3);
    gw_llama_kv(&w, "gemma2", &c, 8192);
    gw_kv_u32(&w, "gemma2.attention.sliding_window", 4096);
    gw_llama_tensors(&w, &c);
    return load(&w);
}

static void test_kv_sliding_window(void **state)
{
    (void)state;
    plan_model *m = gemma2_9b();
    for (uint32_t il = 0; il < 42; il++) assert_int_equal(m->swa[il], il % 2 == 0);
    plan_settings s = at(8192, 1);
    plan_result r = run(m, &s);
    /* Global layers: 21 x 8192 cells; window layers: 21 x pad256(4096 + 512)
     * = 4608 cells; each cell 8 heads x 256 x 2 (K,V) x 2 bytes = 8192 B. */
    assert_int_equal(r.kv_cells_swa, 4608);
    assert_int_equal(r.kv, 21ull * 8192 * 8192 + 21ull * 4608 * 8192);
    assert_int_equal(r.kv, 2100 * MiB);
    /* Two slots: the window counts once per sequence. */
    s = at(8192, 2);
    r = run(m, &s);
    assert_int_equal(r.kv_cells_swa, 8704);
    assert_int_equal(r.kv, 21ull * 16384 * 8192 + 21ull * 8704 * 8192);
    /* A context shorter than the window: no saving. */
    s = at(2048, 1);
    r = run(m, &s);
    assert_int_equal(r.kv_cells_swa, 2048);
    assert_int_equal(r.kv, 42ull * 2048 * 8192);
    /* Tied embeddings: the output head is a second copy of token_embd. */
    assert_int_equal(r.host.weights, 256000ull * 3584 * 2);
    assert_int_equal(m->w_output, 256000ull * 3584 * 2 + 3584 * 4);
    plan_model_free(m);
}

static void test_swa_pattern_key(void **state)
{
    (void)state;
    gw_llama c = {4, 512, 1024, 4, 4, 128, 1000, 0, GGML_TYPE_F16, false};
    gw w;
    gw_init(&w, 3);
    gw_llama_kv(&w, "newarch", &c, 8192);
    gw_kv_u32(&w, "newarch.attention.sliding_window", 512);
    static const bool pat[] = {true, false, true, true};
    gw_kv_arr_bool(&w, "newarch.attention.sliding_window_pattern", pat, 4);
    gw_llama_tensors(&w, &c);
    plan_model *m = load(&w);
    for (int i = 0; i < 4; i++) assert_int_equal(m->swa[i], pat[i]);
    plan_settings s = at(8192, 1);
    plan_result r = run(m, &s);
    assert_int_equal(r.kv_cells_swa, 1024);
    assert_int_equal(r.kv, (1ull * 8192 + 3ull * 1024) * 4 * 128 * 2 * 2);
    plan_model_free(m);

    /* Without a pattern llama.cpp ignores sliding_window (e.g. Mistral). */
    gw_init(&w, 3);
    gw_llama_kv(&w, "llama", &c, 8192);
    gw_kv_u32(&w, "llama.attention.sliding_window", 512);
    gw_llama_tensors(&w, &c);
    m = load(&w);
    r = run(m, &s);
    assert_int_equal(r.kv, 4ull * 8192 * 4 * 128 * 2 * 2);
    plan_model_free(m);
}

/* --- MoE, MLA, recurrent -------------------------------------------------- */

static void test_moe_mixtral(void **state)
{
    (void)state;
    gw_llama c = {32, 4096, 14336, 32, 8, 128, 32000, 8, GGML_TYPE_Q4_0, false};
    plan_model *m = llama_like("llama", &c, 32768);
    assert_int_equal(m->n_expert, 8);
    assert_int_equal(m->n_expert_used, 2);
    /* Mixtral-8x7B's published counts: 46.7 B total, 12.9 B active. */
    assert_int_equal(m->params_total, 46702792704ull);
    assert_int_equal(m->params_active, 12879925248ull);
    plan_settings s = at(4096, 1);
    plan_result r = run(m, &s);
    /* Every expert's weights count: per layer attention 41,943,040 and
     * experts 1,409,286,144 weights at 18/32 bytes, norms and router f32. */
    uint64_t layer = (41943040ull + 1409286144ull) / 32 * 18 + 2 * 4096 * 4 + 4096 * 8 * 4;
    assert_int_equal(layer, 816480256ull);
    uint64_t output = 4096 * 4 + 32000ull * 4096 / 32 * 18;
    assert_int_equal(r.gpu[0].weights, 32 * layer + output);
    assert_int_equal(r.host.weights, 32000ull * 4096 / 32 * 18);
    assert_int_equal(r.kv_bytes_per_token, 131072);
    plan_model_free(m);
}

static plan_model *deepseek2_lite(bool mla)
{
    gw w;
    gw_init(&w, 3);
    gw_kv_str(&w, "general.architecture", "deepseek2");
    gw_kv_u32(&w, "deepseek2.block_count", 27);
    gw_kv_u32(&w, "deepseek2.context_length", 163840);
    gw_kv_u32(&w, "deepseek2.embedding_length", 2048);
    gw_kv_u32(&w, "deepseek2.feed_forward_length", 10944);
    gw_kv_u32(&w, "deepseek2.attention.head_count", 16);
    gw_kv_u32(&w, "deepseek2.attention.kv_lora_rank", 512);
    gw_kv_u32(&w, "deepseek2.rope.dimension_count", 64);
    gw_kv_u32(&w, "deepseek2.expert_count", 64);
    gw_kv_u32(&w, "deepseek2.expert_used_count", 6);
    gw_kv_u32(&w, "deepseek2.expert_feed_forward_length", 1408);
    if (mla) {
        /* As convert_hf_to_gguf writes it for MLA: the latent is the key. */
        gw_kv_u32(&w, "deepseek2.attention.head_count_kv", 1);
        gw_kv_u32(&w, "deepseek2.attention.key_length", 576);
        gw_kv_u32(&w, "deepseek2.attention.value_length", 512);
        gw_kv_u32(&w, "deepseek2.attention.key_length_mla", 192);
        gw_kv_u32(&w, "deepseek2.attention.value_length_mla", 128);
    } else {
        gw_kv_u32(&w, "deepseek2.attention.head_count_kv", 16);
        gw_kv_u32(&w, "deepseek2.attention.key_length", 192);
        gw_kv_u32(&w, "deepseek2.attention.value_length", 128);
    }
    gw_tensor(&w, "token_embd.weight", GGML_TYPE_F16, 2, 2048, 102400, 1);
    gw_tensor(&w, "blk.0.attn_kv_a_mqa.weight", GGML_TYPE_F16, 2, 2048, 576, 1);
    gw_tensor(&w, "blk.1.ffn_gate_exps.weight", GGML_TYPE_F16, 3, 2048, 1408, 64);
    gw_tensor(&w, "output.weight", GGML_TYPE_F16, 2, 2048, 102400, 1);
    return load(&w);
}

static void test_kv_mla(void **state)
{
    (void)state;
    plan_model *m = deepseek2_lite(true);
    assert_true(m->is_mla);
    plan_settings s = at(4096, 1);
    plan_result r = run(m, &s);
    /* K only: 27 layers x (512 latent + 64 rope) x 2 bytes. */
    assert_int_equal(r.kv_bytes_per_token, 27 * 576 * 2);
    assert_int_equal(r.kv, 27ull * 576 * 2 * 4096);
    /* No V cache, so a quantized V type needs no flash attention. */
    s.type_v = GGML_TYPE_Q8_0;
    r = run(m, &s);
    assert_int_equal(r.kv_bytes_per_token, 27 * 576 * 2);
    /* Experts: 1 of 64 tensors' weights, 6 of 64 active. */
    uint64_t exps = 2048ull * 1408 * 64;
    assert_int_equal(m->params_total - m->params_active, exps - exps / 64 * 6);
    plan_model_free(m);

    /* An older conversion without MLA: a full per-head K and V cache. */
    m = deepseek2_lite(false);
    assert_false(m->is_mla);
    s = at(4096, 1);
    r = run(m, &s);
    assert_int_equal(r.kv_bytes_per_token, 27 * 16 * (192 + 128) * 2);
    plan_model_free(m);
}

static void test_recurrent_state(void **state)
{
    (void)state;
    /* Mamba-130M: 24 layers, d_inner 1536, d_conv 4, d_state 16. */
    gw w;
    gw_init(&w, 3);
    gw_kv_str(&w, "general.architecture", "mamba");
    gw_kv_u32(&w, "mamba.block_count", 24);
    gw_kv_u32(&w, "mamba.context_length", 1048576);
    gw_kv_u32(&w, "mamba.embedding_length", 768);
    gw_kv_u32(&w, "mamba.feed_forward_length", 0);
    gw_kv_u32(&w, "mamba.attention.head_count", 0);
    gw_kv_u32(&w, "mamba.ssm.conv_kernel", 4);
    gw_kv_u32(&w, "mamba.ssm.inner_size", 1536);
    gw_kv_u32(&w, "mamba.ssm.state_size", 16);
    gw_kv_u32(&w, "mamba.ssm.time_step_rank", 48);
    gw_tensor(&w, "token_embd.weight", GGML_TYPE_F16, 2, 768, 50280, 1);
    gw_tensor(&w, "blk.0.ssm_in.weight", GGML_TYPE_F16, 2, 768, 3072, 1);
    plan_model *m = load(&w);
    assert_false(plan_model_has_kv(m));
    plan_settings s = at(4096, 4);
    plan_result r = run(m, &s);
    assert_int_equal(r.kv, 0);
    /* Per layer and sequence, f32: conv (4-1) x 1536 + ssm 16 x 1536. */
    assert_int_equal(r.state, 24ull * (3 * 1536 + 16 * 1536) * 4 * 4);
    plan_model_free(m);
}

/* --- placement ------------------------------------------------------------ */

static void test_offload_placement(void **state)
{
    (void)state;
    gw_llama c = {4, 512, 1024, 4, 4, 128, 1000, 0, GGML_TYPE_F16, false};
    plan_model *m = llama_like("llama", &c, 4096);
    uint64_t layer = m->w_layer[0], out = m->w_output, in = m->w_input;
    assert_int_equal(in, 1000ull * 512 * 2);
    assert_int_equal(out, 1000ull * 512 * 2 + 512 * 4);
    plan_settings s = at(1024, 1);
    plan_result r = run(m, &s);
    assert_int_equal(r.ngl, 5);
    assert_int_equal(r.gpu[0].weights, 4 * layer + out);
    assert_true(r.gpu[0].output);
    /* -ngl 4: every repeating layer, but the output layer stays behind. */
    s.ngl = 4;
    r = run(m, &s);
    assert_int_equal(r.gpu[0].weights, 4 * layer);
    assert_int_equal(r.host.weights, in + out);
    assert_int_equal(r.gpu[0].compute > 0, 1);
    /* -ngl 2: the last two layers; the others' KV stays in host memory too. */
    s.ngl = 2;
    r = run(m, &s);
    assert_int_equal(r.gpu[0].layer_first, 2);
    assert_int_equal(r.gpu[0].layer_count, 2);
    assert_int_equal(r.gpu[0].weights, 2 * layer);
    assert_int_equal(r.host.kv, r.gpu[0].kv);
    s.ngl = 0;
    r = run(m, &s);
    assert_int_equal(r.gpu[0].weights, 0);
    assert_int_equal(r.gpu[0].kv, 0);
    plan_model_free(m);
}

static void test_multi_gpu_split(void **state)
{
    (void)state;
    plan_model *m = llama_like("llama", &LLAMA3_8B, 131072);
    plan_settings s = at(4096, 1);
    s.n_gpu = 2;
    s.gpu_free[0] = 24 * GiB;
    s.gpu_free[1] = 8 * GiB;
    plan_result r = run(m, &s);
    /* Split points at 24/32 = 0.75 of 33 offloaded layers: layer i goes to
     * GPU 0 while i/33 < 0.75. */
    assert_int_equal(r.gpu[0].layer_first, 0);
    assert_int_equal(r.gpu[0].layer_count, 25);
    assert_int_equal(r.gpu[1].layer_first, 25);
    assert_int_equal(r.gpu[1].layer_count, 7);
    assert_true(r.gpu[1].output);
    assert_int_equal(r.gpu[0].kv, 25ull * 4096 * 4096);
    assert_int_equal(r.gpu[1].kv, 7ull * 4096 * 4096);
    assert_true(r.fits);
    assert_true(r.fit_known);
    plan_model_free(m);
}

/* --- fit searches ----------------------------------------------------------- */

static bool fits(const plan_model *m, plan_settings s)
{
    plan_result r;
    return plan_compute(m, &s, &r, NULL, 0) == 0 && r.fits;
}

static void test_fit_searches(void **state)
{
    (void)state;
    plan_model *m = llama_like("llama", &LLAMA3_8B, 131072);  /* F16: ~15 GiB of weights */
    plan_settings s = at(4096, 1);
    s.n_gpu = 1;
    s.gpu_free[0] = 12 * GiB;
    assert_false(fits(m, s));
    int ngl = plan_max_ngl(m, &s);
    assert_true(ngl > 0 && ngl < 33);
    plan_settings t = s;
    t.ngl = ngl;
    assert_true(fits(m, t));
    t.ngl = ngl + 1;
    assert_false(fits(m, t));
    const char *cls;
    double slow = plan_slowdown(m, &s, ngl, &cls);
    assert_true(slow > 1.5 && slow < 10);
    assert_string_not_equal(cls, "none");
    assert_true(plan_slowdown(m, &s, 33, &cls) == 1.0);
    assert_string_equal(cls, "none");

    s.gpu_free[0] = 24 * GiB;
    assert_true(fits(m, s));
    uint32_t mc = plan_max_ctx(m, &s);
    assert_true(mc > 4096 && mc < 131072);
    t = s;
    t.ctx = mc;
    assert_true(fits(m, t));
    t.ctx = mc + 1;
    assert_false(fits(m, t));
    uint32_t mp = plan_max_parallel(m, &s);
    assert_true(mp > 1);
    t = s;
    t.parallel = mp;
    assert_true(fits(m, t));
    t.parallel = mp + 1;
    assert_false(fits(m, t));
    /* No GPU size given: no verdict, no searches. */
    s.n_gpu = 0;
    assert_int_equal(plan_max_ctx(m, &s), 0);
    plan_model_free(m);
}

static void test_need_bytes(void **state)
{
    (void)state;
    plan_model *m = llama_like("llama", &LLAMA3_8B, 131072);
    plan_settings s = at(8192, 2);
    plan_result r = run(m, &s);
    assert_int_equal(plan_need_bytes(m, NULL, 8192, 2), r.gpu[0].total);
    assert_true(plan_need_bytes(m, NULL, 16384, 2) > r.gpu[0].total);
    /* The parts add up: weights + KV + compute + overhead, plus 5 %. */
    uint64_t need = r.gpu[0].weights + r.gpu[0].kv + r.gpu[0].compute + r.gpu[0].overhead;
    assert_int_equal(r.gpu[0].margin, (uint64_t)((double)need * 0.05));
    s.margin_pct = 0;
    s.margin_bytes = 100 * MiB;
    s.overhead = 0;
    r = run(m, &s);
    assert_int_equal(r.gpu[0].total, r.gpu[0].weights + r.gpu[0].kv + r.gpu[0].compute + 100 * MiB);
    assert_int_equal(plan_need_bytes(m, NULL, 0, 1), UINT64_MAX);
    plan_model_free(m);
}

static void test_compute_buffer(void **state)
{
    (void)state;
    plan_model *m = llama_like("llama", &LLAMA3_8B, 131072);
    plan_settings s = at(8192, 1);
    s.flash_attn = true;
    plan_result r = run(m, &s);
    /* With flash attention the logits dominate: 128256 x 512 x 4 bytes plus
     * one hidden state (llama.cpp reports about 258.5 MiB here). */
    assert_int_equal(r.compute, 512ull * 4 * (128256 + 4096));
    /* Without it the KQ scores of 32 heads x 8192 cells x 512 tokens (f32)
     * dominate (llama.cpp reports about 560 MiB). */
    s.flash_attn = false;
    r = run(m, &s);
    assert_true(r.compute > 512 * MiB && r.compute < 600 * MiB);
    plan_model_free(m);
}

/* --- presets ----------------------------------------------------------------- */

static void test_presets(void **state)
{
    (void)state;
    /* Published totals.  Active counts here include every tensor a token
     * touches; DeepSeek quotes 2.4 B for V2-Lite by leaving out the input
     * embedding (0.21 B), Mixtral's 12.9 B keeps it. */
    static const struct { const char *name; double total, active; } want[] = {
        {"llama-3.1-8b", 8.03e9, 8.03e9},   {"llama-2-7b", 6.74e9, 6.74e9},   {"llama-3.1-70b", 70.6e9, 70.6e9},
        {"qwen2.5-7b", 7.62e9, 7.62e9},     {"qwen2.5-14b", 14.77e9, 14.77e9}, {"qwen2.5-32b", 32.76e9, 32.76e9},
        {"qwen2.5-72b", 72.7e9, 72.7e9},    {"mistral-7b", 7.25e9, 7.25e9},    {"gemma-2-9b", 9.24e9, 9.24e9},
        {"mixtral-8x7b", 46.7e9, 12.9e9},   {"qwen3-30b-a3b", 30.5e9, 3.3e9},  {"deepseek-v2-lite", 15.7e9, 2.66e9},
    };
    char err[256];
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        plan_model *m = plan_model_preset(want[i].name, "Q4_K_M", err, sizeof err);
        if (!m) fail_msg("%s", err);
        if (fabs((double)m->params_total / want[i].total - 1) > 0.02 ||
            fabs((double)m->params_active / want[i].active - 1) > 0.04)
            fail_msg("%s: %llu total / %llu active", want[i].name, (unsigned long long)m->params_total,
                     (unsigned long long)m->params_active);
        plan_model_free(m);
    }
    plan_model *m = plan_model_preset("llama-3.1-8b", "q4_k_m", err, sizeof err);
    assert_int_equal(m->params_total, 8030261248ull);
    plan_settings s = at(8192, 1);
    plan_result r = run(m, &s);
    assert_int_equal(r.kv, 1024 * MiB);
    /* Q4_K_M at 4.90 bits: 8.03 B weights are 4.58 GiB, as llama-quantize lists. */
    double gib = (double)(r.weights + r.host.weights) / GiB;
    assert_true(fabs(gib - 4.58) < 0.02);
    plan_model_free(m);
    m = plan_model_preset("mixtral-8x7b", "Q4_K_M", err, sizeof err);
    assert_int_equal(m->params_total, 46702792704ull);
    assert_int_equal(m->params_active, 12879925248ull);
    plan_model_free(m);
    m = plan_model_preset("deepseek-v2-lite", "F16", err, sizeof err);
    r = run(m, &s);
    assert_int_equal(r.kv_bytes_per_token, 27 * 576 * 2);
    plan_model_free(m);
    m = plan_model_preset("gemma-2-9b", "F16", err, sizeof err);
    r = run(m, &s);
    assert_int_equal(r.kv, 2100 * MiB);
    plan_model_free(m);
    /* Every preset plans at the defaults. */
    for (size_t i = 0; i < plan_preset_count(); i++) {
        m = plan_model_preset(plan_preset_name(i), NULL, err, sizeof err);
        if (!m) fail_msg("%s", err);
        s = at(4096, 1);
        r = run(m, &s);
        assert_true(r.total > 0);
        plan_model_free(m);
    }
    assert_null(plan_model_preset("no-such-model", NULL, err, sizeof err));
    assert_non_null(strstr(err, "unknown model preset"));
    assert_null(plan_model_preset("7b", "Q9_X", err, sizeof err));
    assert_non_null(strstr(err, "unknown quant"));
}

/* --- JSON ------------------------------------------------------------------ */

static void test_json(void **state)
{
    (void)state;
    char err[256];
    plan_model *m = plan_model_preset("llama-3.1-8b", "Q4_K_M", err, sizeof err);
    plan_settings s;
    plan_settings_init(&s);
    json_t *req = json_pack("{s:i, s:i, s:s, s:s, s:b, s:i, s:[s,s], s:s}", "ctx", 8192, "parallel", 2,
                            "cache_type_k", "q8_0", "cache_type_v", "q8_0", "flash_attn", 1, "ubatch", 256,
                            "gpus", "12G", "8G", "margin", "10%");
    assert_int_equal(plan_settings_from_json(req, &s, err, sizeof err), 0);
    json_decref(req);
    assert_int_equal(s.ctx, 8192);
    assert_int_equal(s.parallel, 2);
    assert_int_equal(s.type_k, GGML_TYPE_Q8_0);
    assert_true(s.flash_attn);
    assert_int_equal(s.n_gpu, 2);
    assert_int_equal(s.gpu_free[1], 8 * GiB);
    assert_true(s.margin_pct == 10);
    json_t *m5 = json_pack("{s:s}", "margin", "5");
    assert_int_equal(plan_settings_from_json(m5, &s, err, sizeof err), 0);
    assert_true(s.margin_pct == 5 && s.margin_bytes == 0);
    json_decref(m5);
    m5 = json_pack("{s:s}", "margin", "512M");
    assert_int_equal(plan_settings_from_json(m5, &s, err, sizeof err), 0);
    assert_true(s.margin_pct == 0 && s.margin_bytes == 512 * MiB);
    json_decref(m5);
    s.margin_pct = 10;
    s.margin_bytes = 0;
    plan_result r = run(m, &s);
    json_t *j = plan_to_json(m, &s, &r);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "model"), "params_total")), 8030261248ll);
    assert_int_equal(json_integer_value(json_object_get(j, "kv_cells")), 16384);
    assert_int_equal(json_array_size(json_object_get(j, "devices")), 3);
    assert_true(json_is_boolean(json_object_get(j, "fits")));
    assert_true(json_is_integer(json_object_get(j, "max_ctx")));
    assert_true(json_is_integer(json_object_get(j, "max_parallel")));
    assert_non_null(json_object_get(j, "tensor_split"));
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "settings"), "cache_type_k")), "q8_0");
    json_decref(j);

    static const char *const bad[] = {
        "{\"ctx\": 0}", "{\"ctx\": \"x\"}", "{\"cache_type_k\": \"q9\"}", "{\"gpus\": [\"12Q\"]}",
        "{\"margin\": \"abc\"}", "{\"ngl\": -5}", "{\"flash_attn\": 1}", "[]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *b = json_loads(bad[i], 0, NULL);
        plan_settings_init(&s);
        err[0] = 0;
        assert_int_equal(plan_settings_from_json(b, &s, err, sizeof err), -1);
        assert_true(err[0] != 0);
        json_decref(b);
    }
    uint64_t v;
    assert_int_equal(plan_parse_size("12G", 0, &v), 0);
    assert_int_equal(v, 12 * GiB);
    assert_int_equal(plan_parse_size("12GiB", 0, &v), 0);
    assert_int_equal(v, 12 * GiB);
    assert_int_equal(plan_parse_size("8192M", 0, &v), 0);
    assert_int_equal(v, 8 * GiB);
    assert_int_equal(plan_parse_size("12", 'G', &v), 0);
    assert_int_equal(v, 12 * GiB);
    assert_int_equal(plan_parse_size("1.5G", 0, &v), 0);
    assert_int_equal(v, 3 * GiB / 2);
    assert_int_equal(plan_parse_size("-1G", 0, &v), -1);
    assert_int_equal(plan_parse_size("12X", 0, &v), -1);
    assert_int_equal(plan_parse_size("", 0, &v), -1);
    plan_model_free(m);
}

/* --- the CLI ---------------------------------------------------------------- */

static int cli(const char *line)
{
    char copy[512], *argv[32];
    int argc = 0;
    snprintf(copy, sizeof copy, "%s", line);
    for (char *t = strtok(copy, " "); t && argc < 31; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    fflush(stdout);
    fflush(stderr);
    int o = dup(1), e = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    int rc = cmd_plan(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(o, 1);
    dup2(e, 2);
    close(o);
    close(e);
    close(null);
    return rc;
}

static void test_cli_exit_status(void **state)
{
    (void)state;
    assert_int_equal(cli("plan --model llama-3.1-8b --gpu 12G"), 0);
    assert_int_equal(cli("plan --model llama-3.1-8b --quant F16 --gpu 8G"), 1);
    assert_int_equal(cli("plan --model llama-3.1-8b --quant F16 --gpu 8G,12G --json"), 0);
    assert_int_equal(cli("plan --model llama-3.1-8b"), 0);
    assert_int_equal(cli("plan --model qwen2.5-72b --gpu 24G --ctx 32768 -np 4 -fa -ctk q8_0 -ctv q8_0"), 1);
    assert_int_equal(cli("plan --table"), 0);
    assert_int_equal(cli("plan --list-presets"), 0);
    assert_int_equal(cli("plan"), 2);
    assert_int_equal(cli("plan /nonexistent.gguf"), 2);
    assert_int_equal(cli("plan --model nope"), 2);
    assert_int_equal(cli("plan --model llama-3.1-8b --ctx 0"), 2);
    assert_int_equal(cli("plan --model llama-3.1-8b --gpu twelve"), 2);
    assert_int_equal(cli("plan --model llama-3.1-8b --bogus"), 2);
    assert_int_equal(cli("plan --model llama-3.1-8b --ctx"), 2);
    assert_int_equal(cli("plan --model llama-3.1-8b -ctv q4_0"), 2);  /* needs flash attention */

    /* A file, and a malformed one. */
    gw w;
    gw_init(&w, 3);
    gw_llama c = {4, 512, 1024, 4, 4, 128, 1000, 0, GGML_TYPE_F16, false};
    gw_llama_kv(&w, "llama", &c, 4096);
    gw_llama_tensors(&w, &c);
    char path[256], line[400];
    gw_write_file(&w, path, sizeof path);
    gw_free(&w);
    snprintf(line, sizeof line, "plan %s --gpu 1G --json", path);
    assert_int_equal(cli(line), 0);
    snprintf(line, sizeof line, "plan %s --quant Q4_0", path);
    assert_int_equal(cli(line), 2);
    assert_int_equal(truncate(path, 100), 0);
    snprintf(line, sizeof line, "plan %s", path);
    assert_int_equal(cli(line), 2);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_llama2_7b),
        cmocka_unit_test(test_kv_llama3_8b),
        cmocka_unit_test(test_kv_qwen25_7b),
        cmocka_unit_test(test_kv_quantized),
        cmocka_unit_test(test_kv_padding_and_slots),
        cmocka_unit_test(test_kv_per_layer_arrays),
        cmocka_unit_test(test_kv_sliding_window),
        cmocka_unit_test(test_swa_pattern_key),
        cmocka_unit_test(test_moe_mixtral),
        cmocka_unit_test(test_kv_mla),
        cmocka_unit_test(test_recurrent_state),
        cmocka_unit_test(test_offload_placement),
        cmocka_unit_test(test_multi_gpu_split),
        cmocka_unit_test(test_fit_searches),
        cmocka_unit_test(test_need_bytes),
        cmocka_unit_test(test_compute_buffer),
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_cli_exit_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
