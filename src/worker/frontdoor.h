/* worker/frontdoor: the worker's HTTP entrance.  Only the coordinator, holding
 * this node's token, may send work.  Before forwarding, the worker checks
 * itself: its GPUs answer, it is not draining for its owner, and an engine
 * is up and has the model; otherwise it answers 503 with code "not_ready"
 * so the coordinator tries another node at once. */
#ifndef GPUPOOL_FRONTDOOR_H
#define GPUPOOL_FRONTDOOR_H

#include "http/server.h"

/* app is the worker (worker/agent.h).  The fast handler forwards
 * non-streamed calls from the event loop; the other takes the rest. */
http_fast_rc frontdoor_fast(http_req *req, void *app);
void frontdoor_handle(http_req *req, void *app);

#endif
