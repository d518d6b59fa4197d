/* apps/stage: what one stage of a run asks and how its answer is judged,
 * from the stage's definition (apps/appcfg) and the run so far.  Pure: the
 * runner (apps/runner) does the I/O.
 *
 * The context templates and conditions see is the input's own fields at the
 * top level ({{text}}), the input again as "input" ({{input.text}}, which
 * works whatever the input's field names), and "stages": each finished
 * stage as {"output": ..., "text": the raw reply}; a skipped stage is there
 * as {"skipped": true}. */
#ifndef GPUPOOL_STAGE_H
#define GPUPOOL_STAGE_H

#include <jansson.h>
#include <stddef.h>

/* A new context object; stages may be NULL. */
json_t *stage_context(const json_t *input, const json_t *stages);

/* The chat completion body of a stage's first try: system and user messages
 * from its templates (the user message ends with the output schema when the
 * stage has one), and its model, max_tokens and temperature.  NULL with a
 * reason for a template that cannot render. */
json_t *stage_request(const json_t *stage_def, const json_t *ctx, char *err, size_t errlen);

/* The next try after an invalid answer: the earlier conversation, the
 * answer as the assistant's turn, and a user turn that says what was wrong
 * ("Your previous reply was not valid: ...") and asks again. */
json_t *stage_retry_request(const json_t *prev_request, const char *reply, const char *why, const json_t *schema);

/* The reply text of a chat completion result, or NULL. */
const char *stage_reply_text(const json_t *result);

/* Judges a reply.  Without an output schema the output is the text itself.
 * With one, the text (less surrounding whitespace and a ``` fence) must
 * parse as JSON and satisfy the schema.  0 with *output set (caller
 * decrefs); -1 with why filled in. */
int stage_judge(const json_t *stage_def, const char *text, json_t **output, char *why, size_t whylen);

#endif
