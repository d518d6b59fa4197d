/* plan/vram: the memory estimate.  Pure functions of a plan_model and the
 * run settings: no I/O, no globals, so the CLI, the /v1/plan endpoint and the
 * scheduler all get the same answer.  docs/planner.md names the llama.cpp
 * rule behind each part. */
#ifndef GPUPOOL_PLAN_VRAM_H
#define GPUPOOL_PLAN_VRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan/model.h"

#define PLAN_MAX_GPUS 16
#define PLAN_CTX_PAD 256            /* llama.cpp pads n_ctx (and the SWA cache) to 256 cells */
#define PLAN_NGL_ALL (-1)

typedef struct plan_settings {
    uint32_t ctx;                   /* context per slot, tokens */
    uint32_t parallel;              /* slots sharing one unified KV cache */
    uint32_t type_k, type_v;        /* ggml types of the K and V cache */
    bool flash_attn;
    uint32_t ubatch;                /* physical batch, tokens */
    int32_t ngl;                    /* layers on the GPUs; PLAN_NGL_ALL = every layer and the output */
    uint32_t n_gpu;                 /* 0: one GPU of unknown size (report the need only) */
    uint64_t gpu_free[PLAN_MAX_GPUS];
    uint64_t overhead;              /* per GPU: CUDA context, cuBLAS workspace, ... */
    double margin_pct;              /* safety margin, percent of each GPU's need ... */
    uint64_t margin_bytes;          /* ... plus this many bytes */
} plan_settings;

typedef struct plan_dev {
    uint64_t free;                  /* 0 for the host and for an unknown GPU */
    uint32_t layer_first, layer_count;
    bool output;                    /* holds the output layer */
    uint64_t weights, kv, state, compute, overhead, margin, total;
    bool fits;
} plan_dev;

typedef struct plan_result {
    uint32_t kv_cells;              /* cells of full-attention layers: ctx*parallel padded */
    uint32_t kv_cells_swa;          /* cells of sliding-window layers */
    uint32_t ubatch;                /* effective */
    uint32_t ngl;                   /* effective: 0 .. n_layer+1 */
    uint64_t kv_bytes_per_token;    /* over full-attention layers, for one cell */
    uint64_t weights, kv, state, compute, overhead, margin, total;  /* summed over the GPUs */
    bool fit_known;                 /* GPU sizes were given */
    bool fits;                      /* every GPU fits (true when unknown) */
    uint32_t n_gpu;
    plan_dev host;                  /* weights, KV and state left in host memory */
    plan_dev gpu[PLAN_MAX_GPUS];
} plan_result;

/* llama-server's defaults: 4096 tokens, 1 slot, f16 K/V, no flash
 * attention, ubatch 512, every layer offloaded, 384 MiB overhead, 5 % margin. */
void plan_settings_init(plan_settings *s);

/* The estimate.  0 on success; -1 with one line in err when the settings
 * cannot run (llama.cpp would refuse them too). */
int plan_compute(const plan_model *m, const plan_settings *s, plan_result *r, char *err, size_t errlen);

/* Searches over plan_compute, for the GPUs in s.  0 when nothing fits. */
uint32_t plan_max_ctx(const plan_model *m, const plan_settings *s);       /* per slot, at s->parallel */
uint32_t plan_max_parallel(const plan_model *m, const plan_settings *s);  /* at s->ctx */
/* The most layers that fit (partial offload); -1 if not even 0 fits. */
int plan_max_ngl(const plan_model *m, const plan_settings *s);

/* Expected token-generation slowdown with ngl layers offloaded, against a
 * full offload, and its class ("none", "mild", "heavy", "severe"). */
double plan_slowdown(const plan_model *m, const plan_settings *s, int ngl, const char **cls);

/* Bytes one GPU needs to hold the whole model at this context and slot
 * count, with the other settings from base (NULL: plan_settings_init).
 * UINT64_MAX when the settings cannot run.  For the scheduler. */
uint64_t plan_need_bytes(const plan_model *m, const plan_settings *base, uint32_t ctx, uint32_t parallel);

#endif
