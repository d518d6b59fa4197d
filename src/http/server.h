/* http/server: the HTTP server every gpupool process uses (libmicrohttpd).
 *
 * It owns sockets, request bodies and the body-size limit.  An application
 * gives one handler; the handler sees a whole request (body already read) and
 * answers exactly once with one of the http_respond* calls.  Each connection
 * has its own thread, so a handler may block (proxying, waiting in a queue),
 * and a stream reader may block until it has bytes. */
#ifndef GPUPOOL_HTTP_SERVER_H
#define GPUPOOL_HTTP_SERVER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct http_server http_server;
typedef struct http_req http_req;

typedef void (*http_handler)(http_req *req, void *app);

typedef struct http_server_opts {
    const char *listen;      /* "127.0.0.1:8080", "0.0.0.0:0", "[::1]:0" */
    size_t max_body;         /* larger bodies get 413; 0 = 8 MiB */
    unsigned idle_timeout_s; /* idle keep-alive connections are closed; 0 = 300 */
    http_handler handler;
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
const char *http_req_peer(const http_req *r); /* textual IP address */
/* True once the client has closed its side (checked without blocking), so a
 * handler waiting on something slow can give up on a caller who left. */
int http_req_client_gone(const http_req *r);
/* Bearer token from Authorization, or NULL. */
const char *http_req_bearer(const http_req *r);

/* ---- the answer (exactly one respond call per request) ---- */
void http_set_header(http_req *r, const char *name, const char *value);
void http_respond(http_req *r, int status, const char *content_type, const void *body, size_t len);
void http_respond_json(http_req *r, int status, json_t *j); /* does not steal j */
void http_respond_text(http_req *r, int status, const char *text);

/* A streamed body.  read() fills up to max bytes and returns how many, 0 at
 * the end, or -1 to cut the stream; it may block.  done() runs once, when the
 * connection is finished with the stream for any reason (complete, client
 * gone, error); `completed` says whether the whole body was delivered. */
typedef ssize_t (*http_stream_read)(void *ctx, char *out, size_t max);
typedef void (*http_stream_done)(void *ctx);
void http_respond_stream(http_req *r, int status, const char *content_type,
                         http_stream_read read, http_stream_done done, void *ctx);
int http_responded(const http_req *r);
/* The status of the answer given so far (0 before any). */
int http_resp_status(const http_req *r);

#endif
