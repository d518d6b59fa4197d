/* policy/cache_key: what the semantic cache may answer and under which key.
 * Owns the skip rules (no-cache, temperature, shapes the cache cannot key
 * safely) and the key of an OpenAI chat body: an exact part, hashed (the
 * system and developer prompts, the earlier turns in the window, every
 * parameter that can change the answer, the last message's role and name),
 * and a fuzzy part, the last user message's normalised text, which is
 * embedded and compared by similarity.  So "how old is he?" only ever meets
 * entries whose earlier turns were the same.  Pure: no I/O, thread-safe.
 * See docs/cache.md. */
#ifndef GPUPOOL_CACHE_KEY_H
#define GPUPOOL_CACHE_KEY_H

#include <jansson.h>
#include <stddef.h>

#include "policy/cache.h"

/* 1 when a Cache-Control request header value (NULL = absent) says no-cache
 * or no-store, in any case, among comma-separated directives. */
int cache_no_cache_header(const char *cache_control);

/* Why a chat completions body must not be looked up or stored, or NULL when
 * it may be:
 *   "no_cache"          the request said so (no_cache non-zero)
 *   "not_chat"          not an object with a non-empty messages array
 *   "temperature"       temperature above max_temperature; an absent one
 *                       counts as OpenAI's default, 1
 *   "last_not_user"     the last message is not the user's
 *   "non_text_content"  a message holds images, audio, files or anything but
 *                       text parts, or a content of an unknown shape */
const char *cache_skip_reason(const json_t *body, double max_temperature, int no_cache);

/* Builds the key of a body that cache_skip_reason accepted.  turns is how many
 * messages other than system/developer ones the key covers, the last one
 * included (0 = all); system and developer messages always count.  Parameters
 * that cannot change the answer (stream, stream_options, user, temperature
 * within the allowed range) are left out; every other field is in.  Fills
 * key (model borrowed from body, partition borrowed from the argument, both
 * to outlive key's use) and *text: the last message's normalised text,
 * malloc'd, to embed.  Returns 0, or -1 when the body has the wrong shape or
 * memory ran out (*text NULL). */
int cache_key_build(const json_t *body, int turns, const char *partition, cache_tier tier, cache_key *key,
                    char **text, size_t *text_len);

#endif
