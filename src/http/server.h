/* http/server: the HTTP server every gpupool process uses (libmicrohttpd).
 *
 * It owns sockets, request bodies and the body-size limit.  One event-loop
 * thread serves every connection (epoll), so nothing on it may block.  An
 * application gives two handlers, each seeing a whole request (body read):
 *
 *   fast     runs on the event loop.  It answers at once, or starts work that
 *            answers later from another thread (HTTP_DEFERRED, then
 *            http_req_complete), or passes (HTTP_PASS).  The hot proxy path.
 *   handler  runs on a pool thread and may block (queue waits, SQLite,
 *            streams being set up).  It answers before returning.
 *
 * Every request is answered exactly once with one of the http_respond* calls.
 * A streamed body never blocks the loop: its reader says "nothing yet" and the
 * producer wakes the stream when bytes arrive. */
#ifndef GPUPOOL_HTTP_SERVER_H
#define GPUPOOL_HTTP_SERVER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct http_server http_server;
typedef struct http_req http_req;

typedef void (*http_handler)(http_req *req, void *app);

typedef enum http_fast_rc { HTTP_HANDLED, HTTP_DEFERRED, HTTP_PASS } http_fast_rc;
typedef http_fast_rc (*http_fast_handler)(http_req *req, void *app);
/* Runs once per answered request, on the event loop, when the answer is
 * queued: for metrics.  dur_us counts from the whole request to its answer. */
typedef void (*http_observer)(http_req *req, int status, int64_t dur_us, void *app);

/* An answer about to be fixed, shown to the application's answer hook.  For a
 * whole body the hook may change status, content_type and body; a new body it
 * allocates goes in `replaced` (malloc'd; the server frees it).  For a stream
 * (streamed = 1, no body yet) it may only add headers. */
typedef struct http_answer {
    int status;
    const char *content_type;
    const char *body;
    size_t len;
    int streamed;
    char *replaced;
} http_answer;
/* Runs in every respond call, on the thread that answers, before the answer
 * is built; it may add headers with http_set_header.  So that one place can
 * apply policies that hold for every answer (CORS, envelopes) however the
 * answer was made, including the server's own (413). */
typedef void (*http_answer_hook)(http_req *req, http_answer *a, void *app);

typedef struct http_server_opts {
    const char *listen;      /* "127.0.0.1:8080", "0.0.0.0:0", "[::1]:0" */
    size_t max_body;         /* larger bodies get 413; 0 = 8 MiB */
    unsigned idle_timeout_s; /* idle keep-alive connections are closed; 0 = 300 */
    http_fast_handler fast;  /* optional */
    http_handler handler;
    http_observer observe;   /* optional */
    http_answer_hook answer; /* optional */
    void *app;
} http_server_opts;

/* Starts serving.  On failure returns NULL and writes a one-line reason. */
http_server *http_server_start(const http_server_opts *o, char *err, size_t errlen);
/* The port actually bound (useful with port 0). */
int http_server_port(const http_server *s);
void http_server_stop(http_server *s);

/* Splits "host:port" / "[v6]:port"; returns 0 on success. */
int http_parse_listen(const char *listen, char *host, size_t hostlen, int *port);
/* True when the host part of a listen address is a loopback address. */
int http_listen_is_loopback(const char *listen);

/* ---- the request ---- */
const char *http_req_method(const http_req *r);
const char *http_req_path(const http_req *r);
const char *http_req_header(const http_req *r, const char *name);
const char *http_req_query(const http_req *r, const char *name);
const char *http_req_body(const http_req *r, size_t *len);
/* Microseconds from the request's headers to its body's last byte: with a
 * large body, how fast the link to the caller carries data. */
int64_t http_req_body_us(const http_req *r);
const char *http_req_peer(const http_req *r); /* textual IP address */
/* True once the client has closed its side (checked without blocking), so a
 * handler waiting on something slow can give up on a caller who left. */
int http_req_client_gone(const http_req *r);
/* Replaces the request body (copied), e.g. after the application rewrote
 * its field names; handlers that run later read the new one. */
int http_req_replace_body(http_req *r, const char *data, size_t len);
/* Adds a request header (copied) that http_req_header finds before the
 * client's own, e.g. a value the client could only send in the body. */
void http_req_add_header(http_req *r, const char *name, const char *value);
/* Bearer token from Authorization, or NULL. */
const char *http_req_bearer(const http_req *r);
/* A small tag the application keeps on the request (e.g. its route). */
void http_req_set_tag(http_req *r, int tag);
int http_req_tag(const http_req *r);
/* Application state that travels with the request (freed with it). */
void http_req_set_ctx(http_req *r, void *ctx, void (*free_ctx)(void *));
void *http_req_ctx(const http_req *r);
/* A second slot for a concern that spans every request whatever its handler
 * (the audit record), so it never competes with a handler's ctx.  Freed with
 * the request unless taken back first. */
void http_req_set_note(http_req *r, void *note, void (*free_note)(void *));
void *http_req_note(const http_req *r);
void *http_req_take_note(http_req *r);

/* ---- deferred answers ---- */
/* After a fast handler returned HTTP_DEFERRED: the answer has been given
 * (http_respond*), send it.  Any thread. */
void http_req_complete(http_req *r);
/* After HTTP_DEFERRED: run the blocking handler for this request after all
 * (e.g. the fast path failed and must wait or retry).  Any thread. */
void http_req_run_handler(http_req *r);

/* ---- the answer (exactly one respond call per request) ---- */
void http_set_header(http_req *r, const char *name, const char *value);
void http_respond(http_req *r, int status, const char *content_type, const void *body, size_t len);
void http_respond_json(http_req *r, int status, json_t *j); /* does not steal j */
void http_respond_text(http_req *r, int status, const char *text);
/* len bytes of the open file fd from offset, sent by the kernel without
 * passing through a buffer here (sendfile where it can).  Takes fd: it is
 * closed when the answer is done or could not be made.  A HEAD request gets
 * the headers alone. */
void http_respond_fd(http_req *r, int status, const char *content_type, int fd, uint64_t offset, uint64_t len);

/* A streamed body.  read() runs on the event loop and must not block: it
 * fills up to max bytes and returns how many, HTTP_STREAM_END at the end,
 * HTTP_STREAM_ERROR to cut the stream, or HTTP_STREAM_WAIT when it has
 * nothing yet; then the producer calls http_stream_wake(waker) when it has.
 * done() runs once, when the connection is finished with the stream for any
 * reason.  The waker stays valid until the producer releases it. */
#define HTTP_STREAM_END 0
#define HTTP_STREAM_ERROR (-1)
#define HTTP_STREAM_WAIT (-2)
typedef struct http_waker http_waker;
typedef ssize_t (*http_stream_read)(void *ctx, char *out, size_t max);
typedef void (*http_stream_done)(void *ctx);
/* Returns the waker (one reference for the producer), or NULL if the stream
 * could not be set up (done() has then already run). */
http_waker *http_respond_stream(http_req *r, int status, const char *content_type,
                                http_stream_read read, http_stream_done done, void *ctx);
void http_stream_wake(http_waker *w);
void http_waker_release(http_waker *w);
int http_responded(const http_req *r);
/* The status of the answer given so far (0 before any). */
int http_resp_status(const http_req *r);

#endif
