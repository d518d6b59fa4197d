/* plan/presets: built-in architectures and quant tiers.
 *
 * Shapes are the ones in each model's config.json (as llama.cpp's converter
 * writes them to GGUF).  Parameter counts are built tensor by tensor from
 * those shapes, so they land on the published totals (Llama-3.1-8B 8.03 B,
 * Mixtral-8x7B 46.7 B with 12.9 B active, ...).  A quant tier's bits per
 * weight are the file sizes llama-quantize lists for Llama-3-8B, divided by
 * its 8.03 B weights: they already include the tensors a mix keeps wider
 * (output head at Q6_K, norms at F32), which is why Q4_K_M is 4.90 and not
 * 4.5. */
#include "util/err.h"
#include "plan/presets.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct preset {
    const char *name, *alias, *desc, *arch;
    uint32_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx_train;
    bool tied, qkv_bias, qk_norm, sandwich_norm;  /* sandwich: Gemma's extra post-norms */
    uint32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp, n_dense_lead;
    uint32_t n_swa, swa_pattern;
    uint32_t kv_lora_rank, rope_dim, nope_dim, v_head_dim;  /* MLA (DeepSeek-V2) */
} preset;

/* The shape every preset states: layers, width, FFN, heads, KV heads, head
 * size, vocabulary, trained context. */
#define SHAPE(l, e, ff, h, kv, hd, voc, ctx)                                          \
    .n_layer = l, .n_embd = e, .n_ff = ff, .n_head = h, .n_head_kv = kv, .head_dim = hd, \
    .n_vocab = voc, .n_ctx_train = ctx

static const preset presets[] = {
    {"llama-2-7b", "7b", "Llama-2-7B (the classic 7B shape)", "llama",
     SHAPE(32, 4096, 11008, 32, 32, 128, 32000, 4096)},
    {"llama-2-13b", "13b", "Llama-2-13B", "llama",
     SHAPE(40, 5120, 13824, 40, 40, 128, 32000, 4096)},
    {"llama-3.1-8b", NULL, "Llama-3.1-8B / Llama-3-8B", "llama",
     SHAPE(32, 4096, 14336, 32, 8, 128, 128256, 131072)},
    {"llama-3.1-70b", "70b", "Llama-3.1-70B / Llama-3.3-70B", "llama",
     SHAPE(80, 8192, 28672, 64, 8, 128, 128256, 131072)},
    {"llama-3.2-1b", NULL, "Llama-3.2-1B", "llama",
     SHAPE(16, 2048, 8192, 32, 8, 64, 128256, 131072), .tied = true},
    {"llama-3.2-3b", NULL, "Llama-3.2-3B", "llama",
     SHAPE(28, 3072, 8192, 24, 8, 128, 128256, 131072), .tied = true},
    {"mistral-7b", NULL, "Mistral-7B v0.3", "llama",
     SHAPE(32, 4096, 14336, 32, 8, 128, 32768, 32768)},
    {"mistral-nemo-12b", NULL, "Mistral-Nemo-12B", "llama",
     SHAPE(40, 5120, 14336, 32, 8, 128, 131072, 131072)},
    {"qwen2.5-7b", NULL, "Qwen2.5-7B", "qwen2",
     SHAPE(28, 3584, 18944, 28, 4, 128, 152064, 32768), .qkv_bias = true},
    {"qwen2.5-14b", NULL, "Qwen2.5-14B", "qwen2",
     SHAPE(48, 5120, 13824, 40, 8, 128, 152064, 32768), .qkv_bias = true},
    {"qwen2.5-32b", "32b", "Qwen2.5-32B", "qwen2",
     SHAPE(64, 5120, 27648, 40, 8, 128, 152064, 32768), .qkv_bias = true},
    {"qwen2.5-72b", NULL, "Qwen2.5-72B", "qwen2",
     SHAPE(80, 8192, 29568, 64, 8, 128, 152064, 32768), .qkv_bias = true},
    {"qwen3-8b", NULL, "Qwen3-8B", "qwen3",
     SHAPE(36, 4096, 12288, 32, 8, 128, 151936, 40960), .qk_norm = true},
    {"qwen3-32b", NULL, "Qwen3-32B", "qwen3",
     SHAPE(64, 5120, 25600, 64, 8, 128, 151936, 40960), .qk_norm = true},
    {"qwen3-30b-a3b", NULL, "Qwen3-30B-A3B (MoE, 128 experts, 8 active)", "qwen3moe",
     SHAPE(48, 2048, 0, 32, 4, 128, 151936, 40960), .qk_norm = true,
     .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768},
    {"mixtral-8x7b", NULL, "Mixtral-8x7B (MoE, 8 experts, 2 active)", "llama",
     SHAPE(32, 4096, 0, 32, 8, 128, 32000, 32768), .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 14336},
    {"deepseek-v2-lite", NULL, "DeepSeek-V2-Lite (MLA, MoE 64 experts, 6 active + 2 shared)", "deepseek2",
     SHAPE(27, 2048, 10944, 16, 1, 0, 102400, 163840),
     .n_expert = 64, .n_expert_used = 6, .n_ff_exp = 1408, .n_ff_shexp = 2 * 1408, .n_dense_lead = 1,
     .kv_lora_rank = 512, .rope_dim = 64, .nope_dim = 128, .v_head_dim = 128},
    {"gemma-2-9b", NULL, "Gemma-2-9B (sliding window 4096 on every other layer)", "gemma2",
     SHAPE(42, 3584, 14336, 16, 8, 256, 256000, 8192), .tied = true, .sandwich_norm = true,
     .n_swa = 4096, .swa_pattern = 2},
    {"gemma-2-27b", NULL, "Gemma-2-27B", "gemma2",
     SHAPE(46, 4608, 36864, 32, 16, 128, 256000, 8192), .tied = true, .sandwich_norm = true,
     .n_swa = 4096, .swa_pattern = 2},
    {"gemma-3-12b", NULL, "Gemma-3-12B (text; sliding window 1024 on 5 of 6 layers)", "gemma3",
     SHAPE(48, 3840, 15360, 16, 8, 256, 262144, 131072), .tied = true, .sandwich_norm = true, .qk_norm = true,
     .n_swa = 1024, .swa_pattern = 6},
    {"phi-3-mini", NULL, "Phi-3-mini-4k (3.8B)", "phi3",
     SHAPE(32, 3072, 8192, 32, 32, 96, 32064, 4096)},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

static const plan_quant quants[] = {
    {"F32", 32.0},    {"F16", 16.0},     {"BF16", 16.0},    {"Q8_0", 8.51},    {"Q6_K", 6.57},
    {"Q5_K_M", 5.70}, {"Q5_K_S", 5.57},  {"Q5_1", 6.04},    {"Q5_0", 5.57},    {"Q4_K_M", 4.90},
    {"Q4_K_S", 4.67}, {"Q4_1", 5.11},    {"Q4_0", 4.64},    {"IQ4_NL", 4.50},  {"IQ4_XS", 4.25},
    {"Q3_K_L", 4.31}, {"Q3_K_M", 4.00},  {"Q3_K_S", 3.65},  {"IQ3_M", 3.66},   {"IQ3_S", 3.44},
    {"IQ3_XS", 3.30}, {"IQ3_XXS", 3.06}, {"Q2_K", 3.17},    {"IQ2_M", 2.70},   {"IQ2_S", 2.50},
    {"IQ2_XS", 2.31}, {"IQ2_XXS", 2.06}, {"IQ1_M", 1.75},   {"IQ1_S", 1.56},   {"TQ2_0", 2.06},
    {"TQ1_0", 1.69},
};
#define N_QUANTS (sizeof quants / sizeof quants[0])


const plan_quant *plan_quant_find(const char *name)
{
    if (!name) return NULL;
    if (!strcasecmp(name, "fp16")) name = "F16";
    if (!strcasecmp(name, "fp32")) name = "F32";
    if (!strcasecmp(name, "q4_k")) name = "Q4_K_M";
    if (!strcasecmp(name, "q5_k")) name = "Q5_K_M";
    if (!strcasecmp(name, "q3_k")) name = "Q3_K_M";
    for (size_t i = 0; i < N_QUANTS; i++)
        if (!strcasecmp(quants[i].name, name)) return &quants[i];
    return NULL;
}

size_t plan_quant_count(void) { return N_QUANTS; }
const plan_quant *plan_quant_at(size_t i) { return i < N_QUANTS ? &quants[i] : NULL; }

const char *plan_ftype_name(uint64_t ftype)
{
    static const char *const names[] = {
        [0] = "F32",      [1] = "F16",      [2] = "Q4_0",     [3] = "Q4_1",    [7] = "Q8_0",
        [8] = "Q5_0",     [9] = "Q5_1",     [10] = "Q2_K",    [11] = "Q3_K_S", [12] = "Q3_K_M",
        [13] = "Q3_K_L",  [14] = "Q4_K_S",  [15] = "Q4_K_M",  [16] = "Q5_K_S", [17] = "Q5_K_M",
        [18] = "Q6_K",    [19] = "IQ2_XXS", [20] = "IQ2_XS",  [21] = "Q2_K_S", [22] = "IQ3_XS",
        [23] = "IQ3_XXS", [24] = "IQ1_S",   [25] = "IQ4_NL",  [26] = "IQ3_S",  [27] = "IQ3_M",
        [28] = "IQ2_S",   [29] = "IQ2_M",   [30] = "IQ4_XS",  [31] = "IQ1_M",  [32] = "BF16",
        [36] = "TQ1_0",   [37] = "TQ2_0",   [38] = "MXFP4_MOE",
    };
    return ftype < sizeof names / sizeof names[0] ? names[ftype] : NULL;
}

size_t plan_preset_count(void) { return N_PRESETS; }
const char *plan_preset_name(size_t i) { return i < N_PRESETS ? presets[i].name : NULL; }
const char *plan_preset_desc(size_t i) { return i < N_PRESETS ? presets[i].desc : NULL; }

static const preset *preset_find(const char *name)
{
    for (size_t i = 0; i < N_PRESETS; i++)
        if (!strcasecmp(presets[i].name, name) || (presets[i].alias && !strcasecmp(presets[i].alias, name)))
            return &presets[i];
    return NULL;
}

/* Parameters of one repeating layer, tensor by tensor as llama.cpp's
 * load_tensors creates them for the architecture. */
static void layer_params(const preset *p, uint32_t il, uint64_t *total, uint64_t *active)
{
    uint64_t e = p->n_embd, n = 0, inactive = 0;
    uint64_t norms = p->sandwich_norm ? 4 : 2;
    n += norms * e;
    if (p->kv_lora_rank) {
        /* MLA without q-LoRA (V2-Lite): q, kv_a (latent + rope key), its
         * norm, kv_b (per-head nope key and value), output. */
        uint64_t qk = p->nope_dim + p->rope_dim;
        n += e * p->n_head * qk;
        n += e * (p->kv_lora_rank + p->rope_dim) + p->kv_lora_rank;
        n += (uint64_t)p->kv_lora_rank * p->n_head * (p->nope_dim + p->v_head_dim);
        n += (uint64_t)p->n_head * p->v_head_dim * e;
    } else {
        uint64_t q = (uint64_t)p->n_head * p->head_dim, kv = (uint64_t)p->n_head_kv * p->head_dim;
        n += e * q + 2 * e * kv + q * e;
        if (p->qkv_bias) n += q + 2 * kv;
        if (p->qk_norm) n += 2 * (uint64_t)p->head_dim;
    }
    if (p->n_expert && il >= p->n_dense_lead) {
        uint64_t experts = 3 * e * p->n_ff_exp * p->n_expert;
        n += e * p->n_expert + experts + 3 * e * p->n_ff_shexp;
        inactive = experts - 3 * e * p->n_ff_exp * p->n_expert_used;
    } else {
        n += 3 * e * p->n_ff;
    }
    *total = n;
    *active = n - inactive;
}

int plan_model_from_preset(const char *name, const char *quant, plan_model *m, char *err, size_t errlen)
{
    const preset *p = name ? preset_find(name) : NULL;
    if (!p) return err_out(err, errlen, "unknown model preset '%s' (see gpupool plan --list-presets)", name ? name : "");
    const plan_quant *q = plan_quant_find(quant ? quant : "Q4_K_M");
    if (!q) return err_out(err, errlen, "unknown quant '%s' (e.g. F16, Q8_0, Q6_K, Q5_K_M, Q4_K_M, IQ4_XS)", quant);
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", p->desc);
    snprintf(m->arch, sizeof m->arch, "%s", p->arch);
    snprintf(m->source, sizeof m->source, "preset");
    snprintf(m->quant, sizeof m->quant, "%s", q->name);
    m->n_layer = p->n_layer;
    m->n_ctx_train = p->n_ctx_train;
    m->n_embd = p->n_embd;
    m->n_vocab = p->n_vocab;
    m->n_ff = p->n_ff;
    m->n_expert = p->n_expert;
    m->n_expert_used = p->n_expert_used;
    m->n_ff_exp = p->n_ff_exp;
    m->n_swa = p->n_swa;
    if (p->kv_lora_rank) {
        /* As an MLA-converted GGUF states it: one KV head holding the
         * latent plus the rope key; no V cache. */
        m->is_mla = true;
        m->n_embd_head_k = p->kv_lora_rank + p->rope_dim;
        m->n_embd_head_v = p->kv_lora_rank;
    } else {
        m->n_embd_head_k = m->n_embd_head_v = p->head_dim;
    }
    double bytes_per_param = q->bpw / 8.0;
    for (uint32_t il = 0; il < p->n_layer; il++) {
        m->n_head[il] = p->n_head;
        m->n_head_kv[il] = p->n_head_kv;
        m->has_kv[il] = true;
        m->swa[il] = p->swa_pattern && (il % p->swa_pattern < p->swa_pattern - 1);
        uint64_t t, a;
        layer_params(p, il, &t, &a);
        m->params_total += t;
        m->params_active += a;
        m->w_layer[il] = (uint64_t)((double)t * bytes_per_param);
    }
    uint64_t embd = (uint64_t)p->n_vocab * p->n_embd;
    m->params_total += embd + p->n_embd + (p->tied ? 0 : embd);
    m->params_active += embd + p->n_embd + (p->tied ? 0 : embd);
    m->w_input = (uint64_t)((double)embd * bytes_per_param);
    /* A tied head is loaded a second time for the output layer. */
    m->w_output = (uint64_t)((double)(embd + p->n_embd) * bytes_per_param);
    return 0;
}
