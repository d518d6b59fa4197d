/* sim/simcore: the engine simulator's pure logic: its configuration and the
 * parsing of option values, deterministic text and embeddings, fault draws,
 * slot accounting, usage counters and pacing arithmetic.
 *
 * Nothing here touches a socket, reads a clock or takes a lock: times come in
 * as arguments and the caller serialises access to shared state, so every
 * decision the simulator makes can be unit-tested. */
#ifndef GPUPOOL_SIMCORE_H
#define GPUPOOL_SIMCORE_H

#include <stddef.h>
#include <stdint.h>

#define SIM_MAX_MODELS 32
#define SIM_MODEL_NAME_MAX 128
#define SIM_MAX_SLOTS 1024
#define SIM_MAX_TOKENS 1048576
#define SIM_EMBED_DIM 64
#define SIM_N_CTX 8192 /* what /slots reports; nothing is limited by it */
#define SIM_FIRST_TOKEN "[simulated]"
#define SIM_DEFAULT_MODEL "sim-llama-8b"
#define SIM_DEFAULT_VRAM_GB 5.5

typedef struct sim_model {
    char name[SIM_MODEL_NAME_MAX];
    uint64_t vram_bytes; /* GB on the command line means GiB (2^30 bytes) */
} sim_model;

typedef struct sim_config {
    sim_model models[SIM_MAX_MODELS];
    int n_models;
    int64_t ttft_ms;
    double tps; /* 0 = no pacing at all */
    int slots;
    uint64_t seed;
    int max_tokens_default;
    double error_rate, hang_rate, drop_rate;
    int single_model; /* answer any model name with the first model, as llama-server does */
    int loading;      /* start "loading a model": every endpoint answers 503 until
                       * sim_server_loaded(), as llama-server does while it loads */
    int fail_first;   /* the first N chat/completion requests answer 500 */
    const struct sim_replies *replies; /* --reply-map, owned by the caller; NULL: none */
} sim_config;

/* The documented defaults, with no models yet: sim_config_finish adds the
 * default model only when no --model was given, so that giving one replaces it. */
void sim_config_defaults(sim_config *c);
/* Applies one option given by its long name without dashes ("tps", "model",
 * ...).  Returns 0, or -1 with a one-line reason naming the option. */
int sim_config_set(sim_config *c, const char *opt, const char *val, char *err, size_t errlen);
/* Checks what single options cannot (the fault rates together) and fills in
 * the default model.  Returns 0 or -1 with a reason. */
int sim_config_finish(sim_config *c, char *err, size_t errlen);
/* Index of the served model with this exact name, or -1. */
int sim_find_model(const sim_config *c, const char *name);

/* "NAME" or "NAME:VRAM_GB"; the part after the last ':' is always the VRAM,
 * so a name that contains ':' must be given with its VRAM. */
int sim_parse_model(const char *spec, sim_model *out, char *err, size_t errlen);

/* ---- deterministic text ---- */
#define SIM_HASH_INIT 0xcbf29ce484222325ULL
/* FNV-1a, continued from h. */
uint64_t sim_hash(uint64_t h, const void *p, size_t n);
uint64_t sim_splitmix64(uint64_t *state);

typedef struct sim_gen {
    uint64_t state;
    int n;          /* tokens handed out so far */
    int prev_punct;
} sim_gen;

/* input_hash covers the model and the request's input (see simreq). */
void sim_gen_init(sim_gen *g, uint64_t seed, uint64_t input_hash);
/* The next token: SIM_FIRST_TOKEN first, then " word" or punctuation.  The
 * strings are static and never need JSON escaping. */
const char *sim_gen_next(sim_gen *g);

/* Whitespace-separated words: the simulator's stand-in for a tokenizer. */
int sim_count_words(const char *s, size_t len);

/* A unit-length vector that depends only on (seed, text). */
void sim_embed(uint64_t seed, const char *text, size_t len, float out[SIM_EMBED_DIM]);

/* ---- faults ---- */
typedef enum sim_fault { SIM_FAULT_NONE, SIM_FAULT_ERROR, SIM_FAULT_HANG, SIM_FAULT_DROP } sim_fault;
/* The fate of the seq-th inference request (0-based, in arrival order).  One
 * uniform draw per request is split error | hang | drop | none, so each rate
 * holds on its own; a drop only applies to streams, others then succeed. */
sim_fault sim_fault_draw(const sim_config *c, uint64_t seq, int streaming);
/* --fail-first: whether the text_seq-th chat/completion request (0-based,
 * embeddings not counted) is answered 500 whatever the rates say. */
int sim_fails_first(const sim_config *c, uint64_t text_seq);

/* ---- pacing: all offsets are from the moment the request got its slot ---- */
/* When token i (0-based) may go out, in microseconds. */
int64_t sim_token_due_us(const sim_config *c, int i);
/* How many of n tokens are out after elapsed_us. */
int sim_tokens_done(const sim_config *c, int n, int64_t elapsed_us);
/* Tokens a dropped stream delivers before the cut (about half, at least 1). */
int sim_drop_after(int n);

/* ---- slots: FIFO admission, at most n requests processing ---- */
typedef struct sim_slot {
    int busy;
    int64_t task;      /* llama-server's id_task; -1 when idle */
    int model;
    int n_predict;
    int stream;
    int64_t start_us;
} sim_slot;

/* Lives on the waiting thread's stack while it is queued. */
typedef struct sim_waiter {
    struct sim_waiter *next, *prev;
} sim_waiter;

typedef struct sim_slots {
    int n, busy, waiting;
    sim_slot *slot;
    sim_waiter *head, *tail;
    int64_t next_task;
} sim_slots;

int sim_slots_init(sim_slots *s, int n);
void sim_slots_free(sim_slots *s);
/* Takes a free slot for w (NULL for a request that has not queued) if it is
 * w's turn: a newcomer only when nobody is queued, a queued waiter only at the
 * head.  Returns the slot id, or -1 to queue / keep waiting. */
int sim_slots_try_take(sim_slots *s, sim_waiter *w, int model, int n_predict, int stream,
                       int64_t now_us);
void sim_slots_enqueue(sim_slots *s, sim_waiter *w);
/* Removes a waiter that gives up without a slot. */
void sim_slots_leave(sim_slots *s, sim_waiter *w);
void sim_slots_release(sim_slots *s, int id);
/* True when a queued waiter could take a slot now (whom to wake). */
int sim_slots_should_wake(const sim_slots *s);

/* ---- usage counters (llama-server's /metrics totals) ---- */
typedef struct sim_usage {
    uint64_t requests, prompt_tokens, completion_tokens;
} sim_usage;
void sim_usage_add(sim_usage *u, int prompt_tokens, int completion_tokens);

#endif
