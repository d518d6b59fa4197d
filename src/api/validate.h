/* api/validate: checks OpenAI request bodies before anything is queued or
 * forwarded.  Pure: a JSON object in, an error (message + offending field) out. */
#ifndef GPUPOOL_API_VALIDATE_H
#define GPUPOOL_API_VALIDATE_H

#include <jansson.h>
#include <stddef.h>

typedef enum api_kind { KIND_CHAT, KIND_COMPLETION, KIND_EMBEDDING, KIND_UNKNOWN } api_kind;

api_kind api_kind_from_task_type(const char *type); /* chat | completion | embedding */
const char *api_kind_task_type(api_kind k);
const char *api_kind_path(api_kind k);              /* /v1/chat/completions ... */

typedef struct api_invalid {
    char message[256];
    char param[64];
    const char *code; /* missing_field | invalid_type | invalid_value */
} api_invalid;

/* The longest model name taken, in bytes: names are kept in fixed fields
 * (256 bytes) on the way, and a longer one would be cut to another name. */
#define API_MODEL_MAX 255

/* Returns 0 when the body is acceptable for the kind. */
int api_validate_body(api_kind k, json_t *body, api_invalid *why);

/* Rough sizes for placement and queue order, from a validated body: the
 * prompt's tokens (about four bytes of Latin text, or one CJK character, per
 * token) and the requested max_tokens (0 when not given). */
double api_estimate_prompt_tokens(json_t *body);
double api_requested_max_tokens(json_t *body);
/* The same estimate for any JSON value (every string in it), e.g. one message. */
double api_estimate_json_tokens(const json_t *v);

#endif
