/* policy/cache_replay: the semantic cache's answers in the shapes a client
 * asked for.  Owns which answers may be stored, the replay of a stored
 * chat.completion as the SSE events of a streamed answer
 * (chat.completion.chunk objects, then [DONE]), and the reverse: collecting a
 * streamed upstream answer into one chat.completion to store.  Pure: no I/O,
 * no clock; one cache_stream per answer.  See docs/cache.md. */
#ifndef GPUPOOL_CACHE_REPLAY_H
#define GPUPOOL_CACHE_REPLAY_H

#include <jansson.h>
#include <stddef.h>

/* The response header a cached answer carries, with the value "hit". */
#define CACHE_HEADER "X-Gpupool-Cache"

/* 1 when a chat.completion may be stored: no error, at least one choice, and
 * every choice a message that ended with stop, length, tool_calls or
 * function_call (not content_filter, not cut off). */
int cache_answer_storable(const json_t *completion);

/* The SSE body that streams a stored chat.completion: for each choice a
 * chunk with the role, one with the content, one with the tool calls (if
 * any) and one with the finish reason; a usage chunk (choices: []) when
 * include_usage and the answer has usage; then "data: [DONE]".  Each event
 * is "data: <json>\n\n".  Returns malloc'd text (length in *len), or NULL
 * when the completion has no choices or memory ran out. */
char *cache_replay_sse(const json_t *completion, int include_usage, size_t *len);

typedef struct cache_stream cache_stream;

cache_stream *cache_stream_new(void);
void cache_stream_free(cache_stream *s);

/* Bytes of an upstream SSE answer, as they arrive (split anywhere).  Returns
 * 0, or -1 once the stream can no longer give a storable answer (an error
 * event, a chunk that is not JSON, over 16 MiB, memory): stop feeding then. */
int cache_stream_feed(cache_stream *s, const char *data, size_t len);

/* The chat.completion the stream amounted to (new reference), or NULL when
 * it did not end properly: [DONE] after a finish reason for every choice. */
json_t *cache_stream_finish(cache_stream *s);

#endif
