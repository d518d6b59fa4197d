/* plan/vram: how many bytes each device needs for a model at given settings.
 *
 * Weights, KV cache and recurrent state mirror llama.cpp exactly (same
 * padding, same per-layer row sizes, same device for each layer).  The
 * compute buffer is an estimate of ggml-alloc's peak: llama.cpp measures it
 * by building the worst-case graph, which a planner cannot do without the
 * engine; the terms below are the tensors that dominate that peak. */
#include "util/err.h"
#include "plan/vram.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "plan/ggml_types.h"

#define MiB (1024ull * 1024)
/* Token generation reads every offloaded weight once per token; host RAM
 * delivers roughly a tenth of a GPU's bandwidth (60 vs 600 GB/s class). */
#define GPU_TO_HOST_BANDWIDTH 10.0


void plan_settings_init(plan_settings *s)
{
    memset(s, 0, sizeof *s);
    s->ctx = 4096;
    s->parallel = 1;
    s->type_k = s->type_v = GGML_TYPE_F16;
    s->ubatch = 512;
    s->ngl = PLAN_NGL_ALL;
    s->overhead = 384 * MiB;
    s->margin_pct = 5.0;
}

static uint64_t pad_to(uint64_t x, uint64_t p)
{
    return (x + p - 1) / p * p;
}

/* The cache types llama.cpp accepts for -ctk/-ctv. */
static bool cache_type_ok(uint32_t t)
{
    switch (t) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q4_1: case GGML_TYPE_IQ4_NL: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1:
        return true;
    default:
        return false;
    }
}

static uint64_t n_embd_k_gqa(const plan_model *m, uint32_t il)
{
    return (uint64_t)m->n_embd_head_k * m->n_head_kv[il];
}

static uint64_t n_embd_v_gqa(const plan_model *m, uint32_t il)
{
    return (uint64_t)m->n_embd_head_v * m->n_head_kv[il];
}

/* The device of layer il (il == n_layer is the output layer): -1 = host,
 * else a GPU index.  This is llama.cpp's default layer split: the last ngl
 * layers are offloaded, cut into runs in proportion to each GPU's share of
 * the total free memory (split points compared as float, upper_bound). */
typedef struct split {
    int i_gpu_start, act;
    uint32_t n;
    float points[PLAN_MAX_GPUS];
} split;

static void split_init(split *sp, const plan_model *m, const plan_settings *s, uint32_t ngl)
{
    sp->n = s->n_gpu ? s->n_gpu : 1;
    sp->i_gpu_start = (int)m->n_layer - (int)ngl > 0 ? (int)m->n_layer - (int)ngl : 0;
    sp->act = (int)ngl < (int)m->n_layer + 1 ? (int)ngl : (int)m->n_layer + 1;
    float sum = 0;
    for (uint32_t i = 0; i < sp->n; i++) {
        sum += s->n_gpu ? (float)s->gpu_free[i] : 1.0f;
        sp->points[i] = sum;
    }
    for (uint32_t i = 0; i < sp->n; i++) sp->points[i] = sum > 0 ? sp->points[i] / sum : (float)(i + 1) / sp->n;
}

static int split_dev(const split *sp, int il)
{
    if (il < sp->i_gpu_start || il - sp->i_gpu_start >= sp->act) return -1;
    float x = (float)(il - sp->i_gpu_start) / (float)sp->act;
    for (uint32_t i = 0; i < sp->n; i++)
        if (sp->points[i] > x) return (int)i;
    return (int)sp->n - 1;
}

/* Peak of the tensors alive at once in one GPU's compute buffer (f32
 * activations for ub tokens).  Three phases compete: attention of the
 * widest layer on the device, its feed-forward, and the output head. */
static uint64_t attn_bytes(const plan_model *m, uint32_t il, uint64_t cells, uint64_t ub, bool fa)
{
    uint64_t nh = m->n_head[il], hk = m->n_embd_head_k, hv = m->n_embd_head_v;
    uint64_t act = ub * 4 * (2 * m->n_embd + nh * hk + m->n_head_kv[il] * (hk + hv));
    uint64_t mask = cells * ub * 4;
    /* Without flash attention the full KQ score matrix is materialised. */
    uint64_t kq = fa ? 0 : nh * cells * ub * 4;
    return act + mask + kq;
}

static uint64_t ffn_bytes(const plan_model *m, uint64_t ub)
{
    uint64_t dense = ub * 4 * (2 * m->n_embd + 3 * m->n_ff);
    uint64_t moe = 0;
    if (m->n_expert)
        moe = ub * 4 * (2 * m->n_embd + m->n_expert + 3 * (uint64_t)m->n_expert_used * m->n_ff_exp);
    return dense > moe ? dense : moe;
}

static void finish_dev(plan_dev *d, const plan_settings *s, bool fit_known)
{
    uint64_t need = d->weights + d->kv + d->state + d->compute + d->overhead;
    d->margin = (uint64_t)((double)need * s->margin_pct / 100.0) + s->margin_bytes;
    d->total = need + d->margin;
    d->fits = !fit_known || d->total <= d->free;
}

int plan_compute(const plan_model *m, const plan_settings *s, plan_result *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (!m->n_layer || m->n_layer > PLAN_MAX_LAYERS) return err_out(err, errlen, "model has no layers");
    if (s->ctx < 1) return err_out(err, errlen, "context must be at least 1 token");
    if (s->parallel < 1) return err_out(err, errlen, "parallel must be at least 1 slot");
    if (s->ubatch < 1) return err_out(err, errlen, "ubatch must be at least 1 token");
    if (s->n_gpu > PLAN_MAX_GPUS) return err_out(err, errlen, "at most %d GPUs", PLAN_MAX_GPUS);
    const ggml_type_info *tk = ggml_type_get(s->type_k), *tv = ggml_type_get(s->type_v);
    if (!tk || !cache_type_ok(s->type_k))
        return err_out(err, errlen, "K cache type %s is not one llama.cpp accepts", tk ? tk->name : "?");
    if (!tv || !cache_type_ok(s->type_v))
        return err_out(err, errlen, "V cache type %s is not one llama.cpp accepts", tv ? tv->name : "?");
    if (tv->blck > 1 && !s->flash_attn && !m->is_mla && plan_model_has_kv(m))
        return err_out(err, errlen, "a quantized V cache (%s) needs --flash-attn: llama.cpp refuses it otherwise",
                       tv->name);
    uint64_t n_ctx = (uint64_t)s->ctx * s->parallel;
    if (n_ctx > (1ull << 31)) return err_out(err, errlen, "context x parallel = %" PRIu64 " is too large", n_ctx);

    /* llama_context pads n_ctx to 256; with a unified cache all slots share
     * those cells. */
    r->kv_cells = (uint32_t)pad_to(n_ctx, PLAN_CTX_PAD);
    r->ubatch = s->ubatch < r->kv_cells ? s->ubatch : r->kv_cells;
    /* llama_kv_cache_iswa: the window times the sequences, plus one ubatch,
     * capped at the full cache, then padded to 256. */
    uint64_t swa = (uint64_t)m->n_swa * s->parallel + r->ubatch;
    r->kv_cells_swa = (uint32_t)pad_to(swa < r->kv_cells ? swa : r->kv_cells, PLAN_CTX_PAD);
    r->ngl = s->ngl < 0 || (uint32_t)s->ngl > m->n_layer + 1 ? m->n_layer + 1 : (uint32_t)s->ngl;
    r->fit_known = s->n_gpu > 0;
    r->n_gpu = s->n_gpu ? s->n_gpu : 1;

    split sp;
    split_init(&sp, m, s, r->ngl);
    for (uint32_t g = 0; g < r->n_gpu; g++) {
        r->gpu[g].free = s->n_gpu ? s->gpu_free[g] : 0;
        r->gpu[g].overhead = s->overhead;
    }
    uint64_t v_max = 0;  /* with V transposed (no flash attention) every layer's V row is the widest */
    for (uint32_t il = 0; il < m->n_layer; il++)
        if (m->has_kv[il] && n_embd_v_gqa(m, il) > v_max) v_max = n_embd_v_gqa(m, il);

    uint64_t attn_peak[PLAN_MAX_GPUS] = {0};
    bool busy[PLAN_MAX_GPUS] = {0};
    uint64_t n_seq = s->parallel;  /* recurrent memory: one state per sequence, at least 1 */
    for (uint32_t il = 0; il < m->n_layer; il++) {
        int d = split_dev(&sp, (int)il);
        plan_dev *dev = d < 0 ? &r->host : &r->gpu[d];
        if (dev->layer_count == 0) dev->layer_first = il;
        dev->layer_count++;
        dev->weights += m->w_layer[il];
        if (m->has_kv[il]) {
            uint64_t cells = m->swa[il] ? r->kv_cells_swa : r->kv_cells;
            uint64_t kb, vb = 0;
            if (!ggml_type_nbytes(s->type_k, n_embd_k_gqa(m, il), &kb))
                return err_out(err, errlen, "K cache type %s needs rows that are a multiple of %" PRIu32
                               " elements; layer %" PRIu32 " has %" PRIu64, tk->name, tk->blck, il,
                               n_embd_k_gqa(m, il));
            uint64_t vn = s->flash_attn ? n_embd_v_gqa(m, il) : v_max;
            if (!m->is_mla && !ggml_type_nbytes(s->type_v, vn, &vb))
                return err_out(err, errlen, "V cache type %s needs rows that are a multiple of %" PRIu32
                               " elements; layer %" PRIu32 " has %" PRIu64, tv->name, tv->blck, il, vn);
            dev->kv += (kb + vb) * cells;
            r->kv_bytes_per_token += kb + vb;
            if (d >= 0) {
                uint64_t a = attn_bytes(m, il, cells, r->ubatch, s->flash_attn);
                if (a > attn_peak[d]) attn_peak[d] = a;
            }
        }
        if (m->recurrent[il]) dev->state += (m->n_embd_r + m->n_embd_s) * 4 * n_seq;  /* f32 r and s tensors */
        if (d >= 0) busy[d] = true;
    }
    int od = split_dev(&sp, (int)m->n_layer);
    plan_dev *out = od < 0 ? &r->host : &r->gpu[od];
    out->weights += m->w_output;
    out->output = true;
    r->host.weights += m->w_input;  /* the input layer always stays on the CPU */

    uint64_t ub = r->ubatch;
    for (uint32_t g = 0; g < r->n_gpu; g++) {
        plan_dev *dev = &r->gpu[g];
        uint64_t c = 0;
        if (busy[g]) {
            c = attn_peak[g];
            uint64_t f = ffn_bytes(m, ub);
            if (f > c) c = f;
        }
        if (dev->output) {
            uint64_t o = ub * 4 * (m->n_vocab + m->n_embd);  /* logits for every token of the ubatch */
            if (o > c) c = o;
        }
        dev->compute = c;
        finish_dev(dev, s, r->fit_known);
        r->weights += dev->weights;
        r->kv += dev->kv;
        r->state += dev->state;
        r->compute += dev->compute;
        r->overhead += dev->overhead;
        r->margin += dev->margin;
        r->total += dev->total;
    }
    r->host.total = r->host.weights + r->host.kv + r->host.state;
    r->host.fits = true;
    r->fits = true;
    for (uint32_t g = 0; g < r->n_gpu; g++)
        if (!r->gpu[g].fits) r->fits = false;
    return 0;
}

static bool fits_with(const plan_model *m, const plan_settings *s)
{
    plan_result r;
    return plan_compute(m, s, &r, NULL, 0) == 0 && r.fits;
}

uint32_t plan_max_ctx(const plan_model *m, const plan_settings *s)
{
    if (!s->n_gpu) return 0;
    plan_settings t = *s;
    uint64_t hi = m->n_ctx_train ? m->n_ctx_train : (1u << 20);
    if (hi * t.parallel > (1ull << 31)) hi = (1ull << 31) / t.parallel;
    uint64_t lo = 0;  /* invariant: lo fits (or is 0), hi+1 does not need testing beyond hi */
    t.ctx = (uint32_t)hi;
    if (fits_with(m, &t)) return (uint32_t)hi;
    while (lo + 1 < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        t.ctx = (uint32_t)mid;
        if (fits_with(m, &t)) lo = mid;
        else hi = mid;
    }
    return (uint32_t)lo;
}

uint32_t plan_max_parallel(const plan_model *m, const plan_settings *s)
{
    if (!s->n_gpu) return 0;
    plan_settings t = *s;
    uint64_t hi = 1024;
    if (hi * t.ctx > (1ull << 31)) hi = (1ull << 31) / (t.ctx ? t.ctx : 1);
    if (hi < 1) return 0;
    uint64_t lo = 0;
    t.parallel = (uint32_t)hi;
    if (fits_with(m, &t)) return (uint32_t)hi;
    while (lo + 1 < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        t.parallel = (uint32_t)mid;
        if (fits_with(m, &t)) lo = mid;
        else hi = mid;
    }
    return (uint32_t)lo;
}

int plan_max_ngl(const plan_model *m, const plan_settings *s)
{
    plan_settings t = *s;
    for (int ngl = (int)m->n_layer + 1; ngl >= 0; ngl--) {
        t.ngl = ngl;
        if (fits_with(m, &t)) return ngl;
    }
    return -1;
}

double plan_slowdown(const plan_model *m, const plan_settings *s, int ngl, const char **cls)
{
    plan_settings t = *s;
    plan_result r;
    t.ngl = ngl;
    double slow = 1.0;
    if (plan_compute(m, &t, &r, NULL, 0) == 0) {
        /* The embeddings are only looked up, never streamed: leave them out. */
        double host = (double)(r.host.weights - m->w_input);
        double all = host + (double)r.weights;
        if (all > 0) slow = 1.0 + host / all * (GPU_TO_HOST_BANDWIDTH - 1.0);
    }
    if (cls) *cls = slow < 1.05 ? "none" : slow < 2.0 ? "mild" : slow < 5.0 ? "heavy" : "severe";
    return slow;
}

uint64_t plan_need_bytes(const plan_model *m, const plan_settings *base, uint32_t ctx, uint32_t parallel)
{
    plan_settings s;
    if (base) s = *base;
    else plan_settings_init(&s);
    s.ctx = ctx;
    s.parallel = parallel;
    s.n_gpu = 0;
    s.ngl = PLAN_NGL_ALL;
    plan_result r;
    if (plan_compute(m, &s, &r, NULL, 0) < 0) return UINT64_MAX;
    return r.gpu[0].total;
}
