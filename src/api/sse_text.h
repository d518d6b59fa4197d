/* api/sse_text: reads the text an OpenAI-style SSE stream has delivered so
 * far (chat.completion.chunk deltas or completion chunks), so that a stream
 * cut off on one node can be continued on another.  Pure. */
#ifndef GPUPOOL_SSE_TEXT_H
#define GPUPOOL_SSE_TEXT_H

#include <stddef.h>

#include "util/buf.h"

/* Appends the content of every `data:` event in events (whole events) to
 * text; returns how many events carried content. */
int sse_collect_text(const char *events, size_t len, buf *text);

#endif
