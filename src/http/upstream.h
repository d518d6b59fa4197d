/* http/upstream: plain HTTP/1.1 calls with a buffered answer, made on the
 * I/O loop without libcurl, over kept connections to each host.
 *
 * This is the proxy's hot path (coordinator to worker, worker to engine):
 * one send and usually one receive per call, no per-call handle to set up and
 * no liveness poll before reusing a connection.  A kept connection the peer
 * had closed is noticed on the loop, and a call that fails on a reused
 * connection before any answer arrives is made once more on a fresh one, as
 * curl does.  Calls it cannot make (https, host names to resolve, HEAD) are
 * left to http/client's curl path. */
#ifndef GPUPOOL_HTTP_UPSTREAM_H
#define GPUPOOL_HTTP_UPSTREAM_H

#include "http/client.h"

/* Starts the call: 0 started (done() runs on the loop thread, as for
 * http_call_async), -1 could not start, 1 not one this client makes. */
int upstream_call(const http_call_opts *o, http_async_done done, void *ctx);
/* Loop thread: every running call ends at once with an error. */
void upstream_abort_calls(void);
/* Loop thread: closes the kept connections (after upstream_abort_calls). */
void upstream_close_idle(void);

#endif
