/* plan/model: what the planner needs to know about a model, whether it came
 * from a GGUF file (arch.c) or from a built-in preset (presets.c): the
 * hyperparameters llama.cpp sizes its buffers from, and the weight bytes
 * grouped the way llama.cpp places them (input layer, each repeating layer,
 * output layer). */
#ifndef GPUPOOL_PLAN_MODEL_H
#define GPUPOOL_PLAN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PLAN_MAX_LAYERS 1024

typedef struct plan_model {
    char name[128];
    char arch[64];          /* general.architecture, e.g. "llama" */
    char source[8];         /* "gguf" or "preset" */
    char quant[24];         /* file type or quant tier, e.g. "Q4_K_M" */
    uint64_t file_bytes;    /* GGUF file size; 0 for presets */

    /* Hyperparameters, as llama.cpp's llama_hparams holds them. */
    uint32_t n_layer;
    uint64_t n_ctx_train;
    uint64_t n_embd;
    uint64_t n_vocab;
    uint64_t n_ff;                      /* largest dense FFN width */
    uint32_t n_head[PLAN_MAX_LAYERS];
    uint32_t n_head_kv[PLAN_MAX_LAYERS];
    uint32_t n_embd_head_k, n_embd_head_v;
    bool is_mla;                        /* K holds the compressed latent; no V cache */
    uint32_t n_expert, n_expert_used;
    uint64_t n_ff_exp;
    uint32_t n_swa;                     /* sliding window, tokens; 0 = none */
    bool swa[PLAN_MAX_LAYERS];          /* layer uses the sliding window */
    bool recurrent[PLAN_MAX_LAYERS];    /* layer keeps a recurrent state */
    bool has_kv[PLAN_MAX_LAYERS];       /* layer keeps K/V cells */
    uint64_t n_embd_r, n_embd_s;        /* recurrent state per layer per sequence (f32 elements) */

    /* Weights in bytes, grouped by where llama.cpp puts them. */
    uint64_t w_input;                   /* token embeddings: always host memory */
    uint64_t w_layer[PLAN_MAX_LAYERS];
    uint64_t w_output;                  /* output norm and head (a tied head is a copy of the embeddings) */
    uint64_t params_total, params_active;
} plan_model;

/* Any layer keeps K/V cells / a recurrent state. */
bool plan_model_has_kv(const plan_model *m);
bool plan_model_is_recurrent(const plan_model *m);

#endif
