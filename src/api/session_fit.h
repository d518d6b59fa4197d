/* api/session_fit: the pure half of conversation sessions (api/sessions).
 * Owns what a session id may be, how a request's messages split into the
 * system prompt and the new turn, the conversation rebuilt from a stored
 * session, which of its oldest turns go when it outgrows its token budget
 * (the estimate is api_estimate_json_tokens, the queue's), the request that
 * summarises them, reading an answer back, and the public JSON view of a
 * session.  No I/O, thread-safe. */
#ifndef GPUPOOL_API_SESSION_FIT_H
#define GPUPOOL_API_SESSION_FIT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define SESSION_ID_MAX 128

/* The gateway's session settings (gpupool serve --session-*). */
typedef struct session_config {
    double max_tokens;         /* the conversation's budget, the answer's reserve included */
    int64_t ttl_ms;            /* a session expires this long after its last turn; 0 = never */
    const char *summary_model; /* summarises dropped turns; NULL = they are just dropped */
    int summary_max_tokens;    /* the longest summary asked for */
} session_config;
#define SESSION_DEFAULT_MAX_TOKENS 4096
#define SESSION_DEFAULT_TTL_S 86400
#define SESSION_DEFAULT_SUMMARY_TOKENS 256
/* The system note a summary becomes, followed by the summary's text. */
#define SESSION_SUMMARY_PREFIX "Summary of the earlier conversation: "

/* 1 when id is 1..SESSION_ID_MAX characters of A-Z a-z 0-9 . _ : - */
int session_id_valid(const char *id);

/* Splits a request's messages: system and developer messages go to *system
 * (NULL when there are none: the stored prompt stays), the others, in
 * order, to *turn.  Returns 0, or -1 when messages is not an array. */
int session_split(const json_t *messages, json_t **system, json_t **turn);

/* The estimated tokens of an array of messages. */
double session_tokens(const json_t *messages);

/* How many of history's oldest messages to drop so that fixed_tokens (the
 * system prompt, a summary, the new turn, the answer's reserve) plus what
 * remains fits budget.  Whole turns go: what remains starts with a user
 * message.  All of it when even that is not enough (the new turn is never
 * dropped); 0 when it fits. */
size_t session_fit_drop(const json_t *history, double fixed_tokens, double budget);

/* The conversation sent to the model: system, then the summary as a system
 * note (when not NULL), then history from index `from`, then turn. */
json_t *session_conversation(const json_t *system, const char *summary, const json_t *history, size_t from,
                             const json_t *turn);

/* The chat body asking model to fold history[0..n) into old_summary (NULL
 * when none) in at most max_tokens. */
json_t *session_summary_body(const char *model, const char *old_summary, const json_t *history, size_t n,
                             int max_tokens);

/* choices[0].message of a chat.completion, as the assistant message to keep
 * (a new reference), or NULL when the answer has none. */
json_t *session_assistant_message(const json_t *completion);

/* The public view (GET /v1/sessions/{id}): id, object "session", model,
 * system, summary, messages, message_count, tokens (the conversation's
 * estimate), private and private_rule, created_at, updated_at and expires_at
 * (wall ms; expires_at null when never). */
json_t *session_json(const session_rec *r);

#endif
