/* sim/simload: the simulator standing in for llama-server while it loads.
 *
 * It takes llama-server's own flags (-m, -c, -np, -ngl, -ctk, -ctv, -fa,
 * -ub, --alias), sizes the model from its GGUF header with the planner,
 * and writes the buffer lines llama-server prints for those sizes in
 * llama.cpp's own format, so that what reads a real server's log (the
 * worker's measured memory) can be tested against the simulator.  It also
 * says how long the load takes: a fixed time, or the file's size at a disk
 * speed.  Pure: the caller opens the file, prints and sleeps. */
#ifndef GPUPOOL_SIMLOAD_H
#define GPUPOOL_SIMLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "plan/plan.h"
#include "sim/simcore.h"
#include "util/buf.h"

typedef struct sim_llama {
    char path[1024];           /* -m; "" when no model file is loaded */
    char alias[SIM_MODEL_NAME_MAX];
    uint32_t ctx_total;        /* -c, every slot together; 0 = the trained context */
    uint32_t parallel;         /* -np */
    int32_t ngl;               /* -ngl; PLAN_NGL_ALL = every layer */
    uint32_t type_k, type_v;   /* -ctk, -ctv */
    int flash_attn;            /* -fa on; off and auto are sized as off (the larger buffer) */
    uint32_t ubatch;           /* -ub */
    double mem_factor;         /* scales every size printed: an engine that takes other than planned */
    int64_t load_ms;           /* -1: the file's size at load_gbps */
    double load_gbps;
    int64_t unload_ms;         /* how long a stop takes: a real engine frees its GPU buffers first */
} sim_llama;

void sim_llama_defaults(sim_llama *l);
/* One option by its long name without dashes: "model-file", "alias",
 * "ctx-size", "parallel", "n-gpu-layers", "cache-type-k", "cache-type-v",
 * "flash-attn" (on, off, auto; "" = on, as the old flag), "ubatch-size",
 * "mem-factor", "load-ms", "load-gbps".  0, or -1 with a reason. */
int sim_llama_set(sim_llama *l, const char *opt, const char *val, char *err, size_t errlen);

typedef struct sim_llama_sizes {
    uint64_t host_weights, gpu_weights;
    uint64_t host_kv, gpu_kv;  /* with any recurrent state */
    uint64_t gpu_compute;
    uint32_t layers_on_gpu, layers;
} sim_llama_sizes;

/* The planner's figures for these flags, scaled by mem_factor.  0, or -1
 * with the reason llama.cpp would refuse them for. */
int sim_llama_size(const sim_llama *l, const plan_model *m, sim_llama_sizes *out, char *err, size_t errlen);
int64_t sim_llama_load_ms(const sim_llama *l, uint64_t file_bytes);
/* What llama-server prints when it has placed the weights (before loading
 * them), and when it has made its KV cache and compute buffers (after). */
void sim_llama_model_lines(buf *out, const sim_llama_sizes *s);
void sim_llama_context_lines(buf *out, const sim_llama_sizes *s);

#endif
