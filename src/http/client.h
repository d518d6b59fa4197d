/* http/client: outgoing HTTP calls (libcurl), the only file that includes curl.
 *
 * Easy handles are pooled so that keep-alive connections to workers and
 * engines are reused across calls; that reuse is most of the gateway's speed. */
#ifndef GPUPOOL_HTTP_CLIENT_H
#define GPUPOOL_HTTP_CLIENT_H

#include <stddef.h>

void http_client_global_init(void);
void http_client_global_cleanup(void);

typedef struct http_call_opts {
    const char *method;          /* default GET, or POST when body is set */
    const char *url;
    const char *body;
    size_t body_len;
    const char *content_type;    /* default application/json when body is set */
    const char *bearer;          /* Authorization: Bearer ...; NULL or "": none */
    const char *const *headers;  /* extra "Name: value" lines, NULL-terminated */
    long timeout_ms;             /* whole call; 0 = none */
    long connect_timeout_ms;     /* 0 = 3000 */
    long idle_timeout_ms;        /* abort when no byte arrives for this long; 0 = none */
    long recv_buffer;            /* bytes curl reads at a time (large downloads); 0 = curl's 16 KiB */
    int (*cancelled)(void *ctx); /* polled while waiting; non-zero stops the call */
    void *cancel_ctx;
} http_call_opts;

typedef struct http_result {
    long status;            /* 0 when no HTTP answer arrived */
    char *body;             /* buffered calls only; NUL-terminated; free() it */
    size_t body_len;
    char content_type[128];
    char *headers;          /* the response head's header lines, "Name: value\r\n"...; free() it */
    char error[256];        /* transport error text when status == 0 or aborted */
    int aborted;            /* stopped by the caller's callbacks */
    int timed_out;
} http_result;

/* A buffered call.  Returns 0 when an HTTP answer (any status) arrived. */
int http_call(const http_call_opts *o, http_result *res);

/* A streamed call.  on_status runs once when the response head is complete
 * (headers: all header lines of the head);
 * on_data for each piece of body as it arrives; either returning non-zero
 * stops the transfer.  cancelled() is polled while waiting. */
typedef struct http_stream_cbs {
    int (*on_status)(void *ctx, long status, const char *content_type, const char *headers);
    int (*on_data)(void *ctx, const char *data, size_t len);
    int (*cancelled)(void *ctx);
    void *ctx;
} http_stream_cbs;
int http_call_stream(const http_call_opts *o, const http_stream_cbs *cb, http_result *res);

/* An asynchronous call, driven by one shared loop thread: done() runs on that
 * thread when the call ends (res is freed after it returns; steal what you
 * keep).  The body must stay valid until then; other strings are copied.
 * Returns 0, or -1 when the call could not be started. */
typedef void (*http_async_done)(void *ctx, http_result *res);
int http_call_async(const http_call_opts *o, http_async_done done, void *ctx);
/* At shutdown: every asynchronous call ends at once with an error. */
void http_client_abort_all(void);

void http_result_free(http_result *res);

#endif
