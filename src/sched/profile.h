/* sched/profile: what the pool has measured about one node, for placement.
 *
 * Per model: moving averages (EWMA) of time to first token, decode speed and
 * cold-start time.  Per node: successes and failures over the last hour in
 * one-minute buckets, and the measured link throughput.  Pure: callers pass
 * `now` (CLOCK_MONOTONIC ms) and nothing here reads a clock or does I/O. */
#ifndef GPUPOOL_PROFILE_H
#define GPUPOOL_PROFILE_H

#include <jansson.h>
#include <stdint.h>

#define PROFILE_MODELS 8
#define PROFILE_MINUTES 60

typedef struct model_speed {
    char model[128];
    double ttft_ms;     /* EWMA; 0 = not measured yet */
    double tps;         /* EWMA decode tokens per second; 0 = not measured yet */
    double load_ms;     /* EWMA time to start the model; 0 = not measured yet */
    int samples;
    int64_t last_ms;    /* when it was last measured (recency for reuse of the entry) */
} model_speed;

typedef struct node_profile {
    model_speed speed[PROFILE_MODELS];
    struct {
        int64_t minute;  /* now / 60000 when the bucket was filled */
        uint32_t ok, fail;
    } hour[PROFILE_MINUTES];
    double link_bytes_per_ms; /* EWMA of upload throughput; 0 = not measured yet */
} node_profile;

/* One finished call as the coordinator saw it.  Any figure may be unknown
 * (negative or 0 where said). */
typedef struct call_sample {
    double total_ms;          /* the whole call */
    double first_byte_ms;     /* streamed calls: time to the first event; <= 0 unknown */
    double engine_prompt_ms;  /* the engine's own timings (llama-server "timings"); <= 0 unknown */
    double engine_decode_ms;
    int completion_tokens;    /* from "usage"; <= 0 unknown */
} call_sample;

/* Derives time to first token and decode speed from a sample, using the
 * engine's timings when it gave them and `prior_ttft_ms` to split a plain
 * total otherwise; answers under 8 tokens give no speed.  Returns 0 and
 * fills what it could (0 = unknown). */
/* Fills completion_tokens and the engine's own timings (llama-server's
 * "timings": prompt_ms, predicted_ms) from an OpenAI answer body. */
void call_sample_parse_answer(call_sample *s, const char *body, size_t len);

int profile_derive(const call_sample *s, double prior_ttft_ms, double *ttft_ms, double *tps);

void profile_observe_speed(node_profile *p, const char *model, double ttft_ms, double tps, int64_t now);
void profile_observe_load(node_profile *p, const char *model, double load_ms, int64_t now);
void profile_observe_outcome(node_profile *p, int ok, int64_t now);
/* bytes moved in ms; tiny transfers say nothing about throughput and are ignored. */
void profile_observe_link(node_profile *p, double bytes, double ms);

/* The model's figures, or NULL when nothing was measured for it. */
const model_speed *profile_speed(const node_profile *p, const char *model);
/* Share of calls that succeeded over the last hour; -1 with no calls. */
double profile_success_rate(const node_profile *p, int64_t now, int *calls);

json_t *profile_json(const node_profile *p, int64_t now);

#endif
