/* plan/arch: hyperparameters and weight placement from GGUF metadata.
 *
 * Keys are "<arch>.<name>" as llama.cpp's LLM_KV table spells them.  Where a
 * key may hold one value or one per layer (head_count, head_count_kv,
 * feed_forward_length), both forms are read, as llama.cpp's get_key_or_arr
 * does.  Which layers use a sliding window or keep a recurrent state is an
 * architecture rule in llama.cpp; the few architectures that have one are
 * listed here. */
#include "util/err.h"
#include "plan/arch.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/ggml_types.h"
#include "plan/presets.h"


bool plan_model_has_kv(const plan_model *m)
{
    for (uint32_t i = 0; i < m->n_layer; i++)
        if (m->has_kv[i]) return true;
    return false;
}

bool plan_model_is_recurrent(const plan_model *m)
{
    for (uint32_t i = 0; i < m->n_layer; i++)
        if (m->recurrent[i]) return true;
    return false;
}

static const gguf_kv *akey(const gguf_file *f, const plan_model *m, const char *suffix)
{
    char k[160];
    snprintf(k, sizeof k, "%s.%s", m->arch, suffix);
    return gguf_find(f, k);
}

/* A scalar key; *out untouched when absent.  -1 when present but not an
 * unsigned integer. */
static int get_u64(const gguf_file *f, const plan_model *m, const char *suffix, uint64_t *out, char *err,
                   size_t errlen)
{
    const gguf_kv *kv = akey(f, m, suffix);
    if (!kv) return 0;
    if (!gguf_kv_uint(kv, out))
        return err_out(err, errlen, "%s.%s must be a non-negative integer (it is %s)", m->arch, suffix,
                       gguf_type_name(kv->type));
    return 1;
}

/* A key that is either one value for all layers or an array with one value
 * per layer (llama.cpp's get_key_or_arr).  Returns 1 if found, 0 if absent. */
static int get_per_layer(const gguf_file *f, const plan_model *m, const char *suffix, uint32_t *out, char *err,
                         size_t errlen)
{
    const gguf_kv *kv = akey(f, m, suffix);
    if (!kv) return 0;
    if (kv->type == GGUF_TYPE_ARRAY) {
        if (kv->arr_n != m->n_layer)
            return err_out(err, errlen, "%s.%s has %" PRIu64 " entries for %" PRIu32 " layers", m->arch, suffix,
                           kv->arr_n, m->n_layer);
        for (uint32_t i = 0; i < m->n_layer; i++) {
            uint64_t v;
            if (!gguf_arr_uint(kv, i, &v) || v > UINT32_MAX)
                return err_out(err, errlen, "%s.%s[%" PRIu32 "] is not a 32-bit unsigned integer", m->arch, suffix,
                               i);
            out[i] = (uint32_t)v;
        }
        return 1;
    }
    uint64_t v;
    if (!gguf_kv_uint(kv, &v) || v > UINT32_MAX)
        return err_out(err, errlen, "%s.%s must be a 32-bit unsigned integer", m->arch, suffix);
    for (uint32_t i = 0; i < m->n_layer; i++) out[i] = (uint32_t)v;
    return 1;
}

static bool arch_is(const plan_model *m, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(m->arch, *list)) return true;
    return false;
}

/* llama.cpp's set_swa_pattern(n): every n-th layer is global, the rest slide. */
static void swa_pattern(plan_model *m, uint32_t n)
{
    for (uint32_t i = 0; i < m->n_layer; i++) m->swa[i] = n == 0 || (i % n < n - 1);
}

static int load_swa(const gguf_file *f, plan_model *m, char *err, size_t errlen)
{
    /* Architectures whose sliding-window layout is fixed in llama.cpp's
     * load_hparams rather than stored in the file. */
    static const struct { const char *arch; uint32_t pattern; uint32_t n_swa; } fixed[] = {
        {"gemma2", 2, 0}, {"gemma3", 6, 0}, {"gemma3n", 5, 0}, {"cohere2", 4, 0},
        {"gpt-oss", 2, 0}, {"exaone4", 4, 0}, {"llama4", 4, 8192},
    };
    uint64_t n_swa = 0;
    int rc = get_u64(f, m, "attention.sliding_window", &n_swa, err, errlen);
    if (rc < 0) return -1;
    uint32_t pattern = 0;
    bool known = false;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (!strcmp(m->arch, fixed[i].arch)) {
            pattern = fixed[i].pattern;
            if (!n_swa) n_swa = fixed[i].n_swa;
            known = true;
        }
    const gguf_kv *pk = akey(f, m, "attention.sliding_window_pattern");
    if (pk && pk->type == GGUF_TYPE_ARRAY) {
        /* One bool per layer: true = sliding window. */
        if (pk->arr_n != m->n_layer)
            return err_out(err, errlen, "%s.attention.sliding_window_pattern has %" PRIu64 " entries for %" PRIu32
                           " layers", m->arch, pk->arr_n, m->n_layer);
        for (uint32_t i = 0; i < m->n_layer; i++) {
            uint64_t v = 0;
            if (!gguf_arr_uint(pk, i, &v))
                return err_out(err, errlen, "%s.attention.sliding_window_pattern[%" PRIu32 "] is not a bool",
                               m->arch, i);
            m->swa[i] = v != 0;
        }
        known = true;
        pattern = UINT32_MAX;
    } else if (pk) {
        uint64_t p;
        if (!gguf_kv_uint(pk, &p) || p > PLAN_MAX_LAYERS)
            return err_out(err, errlen, "%s.attention.sliding_window_pattern must be a small integer", m->arch);
        pattern = (uint32_t)p;
        known = true;
    }
    if (!known || n_swa == 0) {
        /* llama.cpp ignores sliding_window for other architectures. */
        memset(m->swa, 0, sizeof m->swa);
        m->n_swa = 0;
        return 0;
    }
    if (n_swa > UINT32_MAX) return err_out(err, errlen, "%s.attention.sliding_window is too large", m->arch);
    m->n_swa = (uint32_t)n_swa;
    if (pattern != UINT32_MAX) swa_pattern(m, pattern);
    return 0;
}

static int load_recurrent(const gguf_file *f, plan_model *m, char *err, size_t errlen)
{
    static const char *const pure[] = {"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", NULL};
    /* Hybrids whose attention layers are the ones with KV heads. */
    static const char *const by_heads[] = {"jamba", "granitehybrid", "nemotron_h", "lfm2", "lfm2moe", "plamo2", NULL};
    uint64_t d_conv = 0, d_inner = 0, d_state = 0, n_group = 0, wkv = 0, shift = 2, l_cache = 0;
    if (get_u64(f, m, "ssm.conv_kernel", &d_conv, err, errlen) < 0 ||
        get_u64(f, m, "ssm.inner_size", &d_inner, err, errlen) < 0 ||
        get_u64(f, m, "ssm.state_size", &d_state, err, errlen) < 0 ||
        get_u64(f, m, "ssm.group_count", &n_group, err, errlen) < 0 ||
        get_u64(f, m, "wkv.head_size", &wkv, err, errlen) < 0 ||
        get_u64(f, m, "token_shift_count", &shift, err, errlen) < 0 ||
        get_u64(f, m, "shortconv.l_cache", &l_cache, err, errlen) < 0)
        return -1;
    for (uint32_t i = 0; i < m->n_layer; i++) {
        m->recurrent[i] = false;
        m->has_kv[i] = m->n_head_kv[i] > 0;
    }
    if (arch_is(m, pure)) {
        for (uint32_t i = 0; i < m->n_layer; i++) {
            m->recurrent[i] = true;
            m->has_kv[i] = false;
        }
    } else if (arch_is(m, by_heads)) {
        for (uint32_t i = 0; i < m->n_layer; i++) m->recurrent[i] = m->n_head_kv[i] == 0;
    } else if (!strcmp(m->arch, "qwen3next")) {
        uint64_t every = 4;
        if (get_u64(f, m, "full_attention_interval", &every, err, errlen) < 0) return -1;
        if (every == 0) every = 4;
        for (uint32_t i = 0; i < m->n_layer; i++) {
            m->recurrent[i] = (i + 1) % every != 0;
            m->has_kv[i] = !m->recurrent[i];
        }
    } else if (!strcmp(m->arch, "falcon-h1")) {
        /* Every layer has both an attention and an SSM branch. */
        for (uint32_t i = 0; i < m->n_layer; i++) m->recurrent[i] = true;
    }
    if (!plan_model_is_recurrent(m)) return 0;
    /* llama_hparams::n_embd_r / n_embd_s: the conv (or token-shift) state and
     * the SSM (or WKV) state, in elements per layer per sequence. */
    if (wkv) {
        m->n_embd_r = shift * m->n_embd;
        m->n_embd_s = m->n_embd * wkv;
    } else if (l_cache) {
        m->n_embd_r = m->n_embd * (l_cache - 1);
        m->n_embd_s = d_state * d_inner;
    } else {
        m->n_embd_r = (d_conv > 0 ? d_conv - 1 : 0) * (d_inner + 2 * n_group * d_state);
        m->n_embd_s = d_state * d_inner;
    }
    if (m->n_embd_r > (1ull << 40) || m->n_embd_s > (1ull << 40))
        return err_out(err, errlen, "recurrent state sizes of %s are implausibly large", m->arch);
    return 0;
}

static bool has_prefix(const char *s, const char *p)
{
    return !strncmp(s, p, strlen(p));
}

/* Which group a tensor belongs to: -1 input, -2 output, else its layer. */
static long tensor_group(const char *name, uint32_t n_layer)
{
    static const char *const input[] = {"token_embd.", "token_types.", "position_embd.", "token_embd_norm.",
                                        "per_layer_token_embd.", NULL};
    for (const char *const *p = input; *p; p++)
        if (has_prefix(name, *p)) return -1;
    if (has_prefix(name, "blk.")) {
        char *end;
        unsigned long il = strtoul(name + 4, &end, 10);
        if (end != name + 4 && *end == '.' && il < n_layer) return (long)il;
    }
    return -2;
}

static int load_weights(const gguf_file *f, plan_model *m, char *err, size_t errlen)
{
    const gguf_tensor *embd = NULL;
    bool has_output = false;
    double inactive = 0;  /* expert parameters that a token does not touch */
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        long g = tensor_group(t->name, m->n_layer);
        if (g == -1) {
            m->w_input += t->nbytes;
            if (!strcmp(t->name, "token_embd.weight")) embd = t;
        } else if (g == -2) {
            m->w_output += t->nbytes;
            if (!strcmp(t->name, "output.weight")) has_output = true;
        } else {
            m->w_layer[g] += t->nbytes;
        }
        m->params_total += nel;
        /* Routed experts are stored stacked: [.., .., n_expert]; shared
         * experts (_shexp) run for every token. */
        if (strstr(t->name, "_exps.") && m->n_expert && m->n_expert_used <= m->n_expert)
            inactive += (double)nel * (1.0 - (double)m->n_expert_used / m->n_expert);
    }
    m->params_active = m->params_total - (uint64_t)inactive;
    /* With tied embeddings llama.cpp loads token_embd a second time as the
     * output head (TENSOR_DUPLICATED), on the output layer's device. */
    if (!has_output && embd) m->w_output += embd->nbytes;
    if (!m->n_vocab && embd) m->n_vocab = embd->ne[1];
    (void)err;
    (void)errlen;
    return 0;
}

int plan_model_from_gguf(const gguf_file *f, plan_model *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    snprintf(m->source, sizeof m->source, "gguf");
    m->file_bytes = f->file_size;
    const char *arch = gguf_kv_str(gguf_find(f, "general.architecture"));
    if (!arch) return err_out(err, errlen, "general.architecture is missing (or not a string)");
    if (!*arch || strlen(arch) >= sizeof m->arch || strspn(arch, "abcdefghijklmnopqrstuvwxyz0123456789_-.") != strlen(arch))
        return err_out(err, errlen, "general.architecture '%.40s' is not a valid architecture name", arch);
    snprintf(m->arch, sizeof m->arch, "%s", arch);
    const char *name = gguf_kv_str(gguf_find(f, "general.name"));
    snprintf(m->name, sizeof m->name, "%s", name ? name : "");
    uint64_t ft;
    const char *ftn = gguf_kv_uint(gguf_find(f, "general.file_type"), &ft) ? plan_ftype_name(ft) : NULL;
    snprintf(m->quant, sizeof m->quant, "%s", ftn ? ftn : "unknown");

    uint64_t v = 0;
    int rc = get_u64(f, m, "block_count", &v, err, errlen);
    if (rc < 0) return -1;
    if (rc == 0) return err_out(err, errlen, "%s.block_count is missing", m->arch);
    if (v == 0 || v > PLAN_MAX_LAYERS)
        return err_out(err, errlen, "%s.block_count %" PRIu64 " is outside 1..%d", m->arch, v, PLAN_MAX_LAYERS);
    m->n_layer = (uint32_t)v;
    if (get_u64(f, m, "context_length", &m->n_ctx_train, err, errlen) < 0) return -1;
    rc = get_u64(f, m, "embedding_length", &m->n_embd, err, errlen);
    if (rc < 0) return -1;
    if (rc == 0 || m->n_embd == 0 || m->n_embd > (1u << 24))
        return err_out(err, errlen, "%s.embedding_length is missing or out of range", m->arch);
    if (get_u64(f, m, "vocab_size", &m->n_vocab, err, errlen) < 0) return -1;
    if (!m->n_vocab) {
        const gguf_kv *tok = gguf_find(f, "tokenizer.ggml.tokens");
        if (tok && tok->type == GGUF_TYPE_ARRAY) m->n_vocab = tok->arr_n;
    }

    /* Feed-forward width: only the largest matters (compute buffer). */
    uint32_t tmp[PLAN_MAX_LAYERS] = {0};
    if (get_per_layer(f, m, "feed_forward_length", tmp, err, errlen) < 0) return -1;
    for (uint32_t i = 0; i < m->n_layer; i++)
        if (tmp[i] > m->n_ff) m->n_ff = tmp[i];

    if (get_per_layer(f, m, "attention.head_count", m->n_head, err, errlen) < 0) return -1;
    rc = get_per_layer(f, m, "attention.head_count_kv", m->n_head_kv, err, errlen);
    if (rc < 0) return -1;
    if (rc == 0) memcpy(m->n_head_kv, m->n_head, sizeof m->n_head);  /* llama.cpp: n_head_kv defaults to n_head */
    for (uint32_t i = 0; i < m->n_layer; i++)
        if (m->n_head_kv[i] > (1u << 16) || m->n_head[i] > (1u << 16))
            return err_out(err, errlen, "%s: head count of layer %" PRIu32 " is out of range", m->arch, i);

    /* Head size defaults to n_embd / n_head (llama.cpp's n_embd_head_k). */
    uint64_t hk = m->n_head[0] ? m->n_embd / m->n_head[0] : 0, hv;
    if (get_u64(f, m, "attention.key_length", &hk, err, errlen) < 0) return -1;
    hv = hk;
    if (m->n_head[0]) hv = m->n_embd / m->n_head[0];
    if (get_u64(f, m, "attention.value_length", &hv, err, errlen) < 0) return -1;
    if (hk > (1u << 20) || hv > (1u << 20)) return err_out(err, errlen, "%s: head size is out of range", m->arch);
    m->n_embd_head_k = (uint32_t)hk;
    m->n_embd_head_v = (uint32_t)hv;
    /* MLA (DeepSeek-V2/V3, Kimi K2...): files converted for MLA carry the
     * per-head sizes under *_mla and store the latent as key_length with one
     * KV head; llama.cpp then keeps K only (has_v = !is_mla). */
    uint64_t kmla = 0, vmla = 0;
    if (get_u64(f, m, "attention.key_length_mla", &kmla, err, errlen) < 0 ||
        get_u64(f, m, "attention.value_length_mla", &vmla, err, errlen) < 0)
        return -1;
    m->is_mla = kmla && vmla;

    uint64_t ne = 0, nu = 0, ffe = 0;
    if (get_u64(f, m, "expert_count", &ne, err, errlen) < 0 ||
        get_u64(f, m, "expert_used_count", &nu, err, errlen) < 0 ||
        get_u64(f, m, "expert_feed_forward_length", &ffe, err, errlen) < 0)
        return -1;
    if (ne > 4096 || nu > ne) return err_out(err, errlen, "%s: expert counts %" PRIu64 "/%" PRIu64 " are invalid",
                                             m->arch, nu, ne);
    m->n_expert = (uint32_t)ne;
    m->n_expert_used = (uint32_t)nu;
    m->n_ff_exp = ffe ? ffe : m->n_ff;

    if (load_swa(f, m, err, errlen) < 0 || load_recurrent(f, m, err, errlen) < 0 ||
        load_weights(f, m, err, errlen) < 0)
        return -1;
    if (plan_model_has_kv(m) && (!m->n_embd_head_k || (!m->is_mla && !m->n_embd_head_v)))
        return err_out(err, errlen, "%s: attention head size is unknown (no head_count or key_length)", m->arch);
    return 0;
}
