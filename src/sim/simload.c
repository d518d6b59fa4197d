/* sim/simload: see simload.h. */
#include "sim/simload.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/ggml_types.h"
#include "util/err.h"

#define MiB 1048576.0

void sim_llama_defaults(sim_llama *l)
{
    memset(l, 0, sizeof *l);
    l->ctx_total = 4096;
    l->parallel = 1;
    l->ngl = PLAN_NGL_ALL;
    l->type_k = l->type_v = GGML_TYPE_F16;
    l->ubatch = 512;
    l->mem_factor = 1;
    l->load_ms = -1;
    l->load_gbps = 2;
}

static int whole(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int real(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int sim_llama_set(sim_llama *l, const char *opt, const char *val, char *err, size_t errlen)
{
    long long n;
    if (!val) val = "";
    if (!strcmp(opt, "model-file")) {
        if (!*val || strlen(val) >= sizeof l->path) return err_out(err, errlen, "-m: a model file path is needed");
        snprintf(l->path, sizeof l->path, "%s", val);
    } else if (!strcmp(opt, "alias")) {
        if (!*val || strlen(val) >= sizeof l->alias) return err_out(err, errlen, "--alias: 1 to %zu characters", sizeof l->alias - 1);
        snprintf(l->alias, sizeof l->alias, "%s", val);
    } else if (!strcmp(opt, "ctx-size")) {
        if (whole(val, 0, 1 << 24, &n)) return err_out(err, errlen, "-c: '%s' is not a context size (0 = the model's)", val);
        l->ctx_total = (uint32_t)n;
    } else if (!strcmp(opt, "parallel")) {
        /* llama-server's -1 is "auto"; it picks 4 slots then. */
        if (!strcmp(val, "-1")) n = 4;
        else if (whole(val, 1, SIM_MAX_SLOTS, &n)) return err_out(err, errlen, "-np: '%s' is not 1..%d slots", val, SIM_MAX_SLOTS);
        l->parallel = (uint32_t)n;
    } else if (!strcmp(opt, "n-gpu-layers")) {
        if (!strcmp(val, "all") || !strcmp(val, "auto") || !strcmp(val, "-1")) l->ngl = PLAN_NGL_ALL;
        else if (whole(val, 0, 100000, &n)) return err_out(err, errlen, "-ngl: '%s' is not a layer count", val);
        else l->ngl = (int32_t)n;
    } else if (!strcmp(opt, "cache-type-k") || !strcmp(opt, "cache-type-v")) {
        int t = ggml_type_from_name(val);
        if (t < 0) return err_out(err, errlen, "--%s: unknown cache type '%s'", opt, val);
        if (opt[11] == 'k') l->type_k = (uint32_t)t;
        else l->type_v = (uint32_t)t;
    } else if (!strcmp(opt, "flash-attn")) {
        if (!*val || !strcmp(val, "on") || !strcmp(val, "1") || !strcmp(val, "true")) l->flash_attn = 1;
        else if (!strcmp(val, "off") || !strcmp(val, "auto") || !strcmp(val, "0") || !strcmp(val, "false")) l->flash_attn = 0;
        else return err_out(err, errlen, "-fa: '%s' is not on, off or auto", val);
    } else if (!strcmp(opt, "ubatch-size")) {
        if (whole(val, 1, 1 << 20, &n)) return err_out(err, errlen, "-ub: '%s' is not a batch size", val);
        l->ubatch = (uint32_t)n;
    } else if (!strcmp(opt, "mem-factor")) {
        if (real(val, 0.01, 100, &l->mem_factor)) return err_out(err, errlen, "--mem-factor: '%s' is not in [0.01, 100]", val);
    } else if (!strcmp(opt, "load-ms")) {
        if (whole(val, 0, 3600000, &n)) return err_out(err, errlen, "--load-ms: '%s' is not 0..3600000", val);
        l->load_ms = n;
    } else if (!strcmp(opt, "unload-ms")) {
        if (whole(val, 0, 600000, &n)) return err_out(err, errlen, "--unload-ms: '%s' is not 0..600000", val);
        l->unload_ms = n;
    } else if (!strcmp(opt, "load-gbps")) {
        if (real(val, 0.001, 1000, &l->load_gbps)) return err_out(err, errlen, "--load-gbps: '%s' is not in [0.001, 1000]", val);
    } else {
        return err_out(err, errlen, "unknown option --%s", opt);
    }
    return 0;
}

static uint64_t scaled(const sim_llama *l, uint64_t b)
{
    return (uint64_t)llround((double)b * l->mem_factor);
}

int sim_llama_size(const sim_llama *l, const plan_model *m, sim_llama_sizes *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    plan_settings s;
    plan_settings_init(&s);
    uint64_t total = l->ctx_total ? l->ctx_total : m->n_ctx_train;
    if (!total) total = 4096;
    /* -c is every slot together; the planner wants it per slot (rounded up,
     * so the unified cache is never smaller than llama-server's). */
    s.ctx = (uint32_t)((total + l->parallel - 1) / l->parallel);
    s.parallel = l->parallel;
    s.type_k = l->type_k;
    s.type_v = l->type_v;
    s.flash_attn = l->flash_attn != 0;
    s.ubatch = l->ubatch;
    s.ngl = l->ngl;
    plan_result r;
    if (plan_compute(m, &s, &r, err, errlen) < 0) return -1;
    out->host_weights = scaled(l, r.host.weights);
    out->gpu_weights = scaled(l, r.gpu[0].weights);
    out->host_kv = scaled(l, r.host.kv + r.host.state);
    out->gpu_kv = scaled(l, r.gpu[0].kv + r.gpu[0].state);
    out->gpu_compute = scaled(l, r.gpu[0].compute);
    out->layers_on_gpu = r.ngl;
    out->layers = m->n_layer + 1;
    return 0;
}

int64_t sim_llama_load_ms(const sim_llama *l, uint64_t file_bytes)
{
    if (l->load_ms >= 0) return l->load_ms;
    return (int64_t)llround((double)file_bytes / (l->load_gbps * 1e9) * 1000.0);
}

/* The names llama.cpp gives a CUDA build's buffers. */
#define GPU_BUF "CUDA0"

void sim_llama_model_lines(buf *out, const sim_llama_sizes *s)
{
    buf_printf(out, "load_tensors: offloaded %u/%u layers to GPU\n", s->layers_on_gpu, s->layers);
    if (s->gpu_weights) buf_printf(out, "load_tensors: %12s model buffer size = %8.2f MiB\n", GPU_BUF, s->gpu_weights / MiB);
    /* The input embeddings always stay in host memory. */
    buf_printf(out, "load_tensors: %12s model buffer size = %8.2f MiB\n", "CPU_Mapped", s->host_weights / MiB);
}

void sim_llama_context_lines(buf *out, const sim_llama_sizes *s)
{
    if (s->gpu_kv) buf_printf(out, "llama_kv_cache: %10s KV buffer size = %8.2f MiB\n", GPU_BUF, s->gpu_kv / MiB);
    if (s->host_kv) buf_printf(out, "llama_kv_cache: %10s KV buffer size = %8.2f MiB\n", "CPU", s->host_kv / MiB);
    buf_printf(out, "llama_context: %10s compute buffer size = %8.2f MiB\n",
               s->gpu_weights || s->gpu_kv ? GPU_BUF : "CPU", s->gpu_compute / MiB);
}
