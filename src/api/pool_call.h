/* api/pool_call: one buffered OpenAI call the gateway itself makes through
 * the pool (a session's summary, a cache embedding), with the same placement,
 * trust rule and node bookkeeping as a client's call.  Blocks: call it from a
 * pool thread, never the event loop. */
#ifndef GPUPOOL_API_POOL_CALL_H
#define GPUPOOL_API_POOL_CALL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "api/coord.h"
#include "api/validate.h"

/* Sends body (its "model" names the model) to kind's path on a node that
 * serves it; trusted_only keeps it off external capacity.  Waits at most
 * wait_ms for a slot and timeout_ms for each answer; another node is tried
 * when one fails, up to the configured attempts.  Returns 0 with *answer
 * (the parsed 200 answer; caller decrefs), or -1 with why filled. */
int api_pool_call(coord *c, api_kind kind, const json_t *body, int trusted_only, int64_t wait_ms,
                  int64_t timeout_ms, json_t **answer, char *why, size_t whylen);

#endif
