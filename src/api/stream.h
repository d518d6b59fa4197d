/* api/stream: one streamed OpenAI call through the pool.  It waits for the
 * node's first event before answering the client, so a node that dies before
 * the first token is replaced without the client noticing.  When a node
 * breaks off after tokens were sent, the answer goes on from another node:
 * the text so far is sent as a prefix for it to continue (the assistant
 * message with continue_final_message for chat, the prompt for completions),
 * and an SSE comment marks the seam.  Where nothing can continue it, the
 * stream ends with an OpenAI-shaped error event, never a silent cut. */
#ifndef GPUPOOL_API_STREAM_H
#define GPUPOOL_API_STREAM_H

#include <stddef.h>

#include "api/cache.h"
#include "api/coord.h"
#include "api/sessions.h"
#include "api/track.h"
#include "api/validate.h"
#include "http/client.h"

/* Returns 1 when the client has its answer (or has left), 0 when the node
 * failed before answering (why says how) and another may be tried.  The
 * lease is the session's from then on.  tried lists nodes that failed this
 * request already.  private_rule (NULL when the request is not private) is
 * shown in the answer's route header, with hop's reason; the continuation
 * keeps rq's tier, and what ran on a cloud backend is charged to hop's
 * owner (the prompt's estimate and one token per event).  cr
 * (NULL or not storing: nothing is stored) is a cache lookup that missed: a
 * stream that ends properly on its first node is collected and stored.
 * sess (NULL or inactive: none) is a session turn: a stream that ends
 * properly (continued or not) stores its text as the assistant's answer. */
int api_forward_stream(coord *c, http_req *req, const http_call_opts *o, const node_lease *lease,
                       const reg_request *rq, api_kind kind, const char *private_rule, const api_track_hop *hop,
                       const api_cache_req *cr, const api_session *sess, const char *const *tried, int ntried,
                       char *why, size_t whylen);

#endif
