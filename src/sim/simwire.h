/* sim/simwire: the simulator's wire shapes, OpenAI's and llama-server's:
 * reading and validating inference requests, and writing every JSON body,
 * SSE event and metrics page the simulator sends.
 *
 * Pure like simcore (times and ids are passed in), so the shapes can be
 * checked without a socket. */
#ifndef GPUPOOL_SIMWIRE_H
#define GPUPOOL_SIMWIRE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/simcore.h"
#include "util/buf.h"

typedef enum sim_kind { SIM_CHAT, SIM_COMPLETION, SIM_EMBEDDING } sim_kind;

typedef struct sim_request {
    sim_kind kind;
    int model;          /* index into the config's models */
    int stream, include_usage;
    int max_tokens;     /* completions always generate exactly this many */
    int prompt_tokens;
    uint64_t input_hash; /* over the model and the input text; seeds the text */
    json_t *input;      /* embeddings: the "input" string or array, borrowed */
    int base64;         /* embeddings: encoding_format "base64" */
    const char *match_text; /* the last user message (chat) or the prompt; borrowed, may be NULL */
    const char *reply;  /* --reply-map's answer for it, or NULL for generated text; then
                         * max_tokens is its piece count and it finishes with "stop" */
} sim_request;

typedef struct sim_error {
    int status;
    const char *type;   /* invalid_request_error | server_error */
    const char *code;
    const char *param;  /* NULL when the error is not about one field */
    char message[256];
} sim_error;

void sim_error_set(sim_error *e, int status, const char *type, const char *code,
                   const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* {"error":{"message","type","param","code"}} */
json_t *sim_error_json(const sim_error *e);

/* Parses and validates a request body.  On success returns 0 and *root holds
 * the parsed body (free it with json_decref after the answer, rq->input points
 * into it); on failure returns -1 with *root NULL and e filled in. */
int sim_request_parse(const sim_config *c, sim_kind kind, const char *body, size_t len,
                      json_t **root, sim_request *rq, sim_error *e);

/* ---- whole answers ---- */
json_t *sim_models_json(const sim_config *c, int64_t created_s);
/* A non-streamed chat.completion or text_completion carrying `text`. */
json_t *sim_completion_json(const sim_config *c, const sim_request *rq, const char *id,
                            int64_t created_s, const char *text);
json_t *sim_embeddings_json(const sim_config *c, const sim_request *rq);
/* llama-server's GET /slots array. */
json_t *sim_slots_json(const sim_config *c, const sim_slots *s, int64_t now_us);
/* llama-server's Prometheus metrics page. */
int sim_metrics_text(buf *out, const sim_slots *s, const sim_usage *u);

/* ---- SSE events of a streamed completion ----
 * The constant head of every chunk is built once per stream so that a token
 * costs one small append. */
typedef struct sim_sse {
    char head[384];
    size_t head_len;
    int chat, include_usage;
    int stop; /* finish_reason "stop" (a whole canned reply) rather than "length" */
} sim_sse;

void sim_sse_init(sim_sse *x, const sim_config *c, const sim_request *rq, const char *id,
                  int64_t created_s);
/* Chat only: the first chunk, delta {"role":"assistant","content":""}. */
int sim_sse_role(buf *out, const sim_sse *x);
int sim_sse_token(buf *out, const sim_sse *x, const char *token);
/* The same for arbitrary text (a --reply-map piece), JSON-escaped. */
int sim_sse_text(buf *out, const sim_sse *x, const char *text, size_t len);
/* The chunk with finish_reason "length". */
int sim_sse_final(buf *out, const sim_sse *x);
/* stream_options.include_usage: empty choices and the usage object. */
int sim_sse_usage(buf *out, const sim_sse *x, int prompt_tokens, int completion_tokens);
int sim_sse_done(buf *out);

#endif
