/* http/relay: forwards one upstream HTTP call to one waiting client.
 *
 * Streamed: the upstream call runs on its own thread and writes into a small
 * bounded buffer, waking the client's connection, which the I/O loop feeds
 * from that buffer without ever waiting; nothing is buffered whole.  If the
 * client goes away the upstream call is cancelled; if the upstream breaks
 * after an SSE stream has started, the client gets a final OpenAI-shaped
 * error event instead of a silent cut.
 *
 * Non-streamed: one call, blocking (relay_call_buffered) or on the I/O loop
 * (relay_call_async), also cancelled when the client leaves. */
#ifndef GPUPOOL_HTTP_RELAY_H
#define GPUPOOL_HTTP_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "http/client.h"
#include "http/server.h"

typedef struct relay relay;

typedef struct relay_outcome {
    long status;          /* upstream HTTP status, 0 if none arrived */
    int upstream_failed;  /* transport error or cut before the end */
    int client_gone;      /* the client left before the end */
    size_t bytes;         /* body bytes relayed */
    int64_t first_byte_us, total_us;
    char error[256];
} relay_outcome;

/* Runs once, on the upstream thread, when the upstream call has ended. */
typedef void (*relay_finish_fn)(void *ctx, const relay_outcome *o);

/* Starts the call.  Strings in `o` are copied. */
relay *relay_start(const http_call_opts *o, relay_finish_fn fin, void *fin_ctx);

/* Streams that can carry on elsewhere.  An SSE stream is relayed event by
 * event, never half an event, so a stream that breaks leaves the client at an
 * event boundary.  tap sees each run of whole events as it arrives; when the
 * upstream breaks after events were relayed, resume is asked for a call that
 * continues the answer (on another node): it fills *next, whose strings it
 * keeps alive until it is asked again or fin runs, and returns 1; or returns
 * 0 and the client gets the error event.  Both run on the upstream thread. */
typedef struct relay_resume {
    void (*tap)(void *ctx, const char *events, size_t len);
    int (*resume)(void *ctx, http_call_opts *next, const char *why);
    void *ctx;
} relay_resume;
relay *relay_start_resumable(const http_call_opts *o, const relay_resume *rs, relay_finish_fn fin, void *fin_ctx);

/* Blocks until the upstream answered (head, and with want_body the first body
 * bytes too) or failed.  Returns the HTTP status, or 0 on failure.  When the
 * waiting client (may be NULL) leaves meanwhile, the upstream call is
 * cancelled and 0 is returned. */
long relay_wait(relay *r, int want_body, http_req *client);
const char *relay_error(relay *r);
const char *relay_content_type(relay *r);

/* A break upstream reaches the client as a break (its connection is cut)
 * instead of an error event: for the worker's front door, whose client is
 * the coordinator, which decides whether the answer can go on elsewhere. */
void relay_pass_breaks(relay *r);
/* Hands the stream to the client with the given status; the relay is then
 * owned by the client connection. */
void relay_to_client(relay *r, http_req *client, int status);
/* Reads the rest of the body (bounded by max) and gives up the relay. */
char *relay_collect(relay *r, size_t max, size_t *len);
/* Cancels the upstream call and gives up the relay. */
void relay_abandon(relay *r);
/* The non-streamed path: one blocking call on the caller's thread, with no
 * hand-off between threads, cancelled if the waiting client leaves.  The
 * answer is small and buffered, and sent with a Content-Length. */
int relay_call_buffered(const http_call_opts *o, http_req *client, http_result *res);
/* The same without any thread waiting: done() runs on the client loop
 * thread (see http_call_async).  Returns 0, or -1 if it could not start. */
int relay_call_async(const http_call_opts *o, http_req *client, http_async_done done, void *ctx);
/* Answers the client with an upstream result: its status, body, type and
 * X-Gpupool-* headers. */
void relay_respond_result(http_req *client, const http_result *res);

/* At shutdown: cancels every relay's upstream call and ends every stream, so
 * no handler or stream stays stuck on a slow engine. */
void relay_abort_all(void);

#endif
