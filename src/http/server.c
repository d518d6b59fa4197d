/* http/server: see server.h.  The only file that includes libmicrohttpd. */
#include "http/server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/buf.h"
#include "util/log.h"

struct http_server {
    struct MHD_Daemon *d;
    http_server_opts o;
    int port;
};

typedef struct hdr {
    char *name, *value;
    struct hdr *next;
} hdr;

struct http_req {
    struct MHD_Connection *c;
    http_server *srv;
    char method[16];
    char *path;
    buf body;
    int too_large;
    int responded;
    char peer[64];
    hdr *out_headers;
    struct MHD_Response *resp;
    int status;
};

int http_parse_listen(const char *listen, char *host, size_t hostlen, int *port)
{
    if (!listen || !*listen) return -1;
    const char *colon;
    size_t hl;
    const char *h = listen;
    if (listen[0] == '[') {
        const char *end = strchr(listen, ']');
        if (!end || end[1] != ':') return -1;
        h = listen + 1;
        hl = (size_t)(end - h);
        colon = end + 1;
    } else {
        colon = strrchr(listen, ':');
        if (!colon) return -1;
        hl = (size_t)(colon - listen);
    }
    if (hl == 0 || hl >= hostlen) return -1;
    memcpy(host, h, hl);
    host[hl] = 0;
    char *e;
    long p = strtol(colon + 1, &e, 10);
    if (*e || p < 0 || p > 65535 || e == colon + 1) return -1;
    *port = (int)p;
    return 0;
}

int http_listen_is_loopback(const char *listen)
{
    char host[128];
    int port;
    if (http_parse_listen(listen, host, sizeof host, &port)) return 0;
    if (!strcmp(host, "localhost") || !strcmp(host, "::1")) return 1;
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
    return 0;
}

/* ---- request accessors ---- */
const char *http_req_method(const http_req *r) { return r->method; }
const char *http_req_path(const http_req *r) { return r->path; }
const char *http_req_peer(const http_req *r) { return r->peer; }
int http_responded(const http_req *r) { return r->responded; }
int http_resp_status(const http_req *r) { return r->status; }

const char *http_req_header(const http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, name);
}

const char *http_req_query(const http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->c, MHD_GET_ARGUMENT_KIND, name);
}

const char *http_req_body(const http_req *r, size_t *len)
{
    if (len) *len = r->body.len;
    return r->body.data ? r->body.data : "";
}

int http_req_client_gone(const http_req *r)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd p = {ci->connect_fd, POLLRDHUP, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

const char *http_req_bearer(const http_req *r)
{
    const char *a = http_req_header(r, "Authorization");
    if (!a || strncasecmp(a, "Bearer ", 7)) return NULL;
    a += 7;
    while (*a == ' ') a++;
    return *a ? a : NULL;
}

/* ---- answers ---- */
void http_set_header(http_req *r, const char *name, const char *value)
{
    hdr *h = calloc(1, sizeof *h);
    if (!h) return;
    h->name = strdup(name);
    h->value = strdup(value);
    h->next = r->out_headers;
    r->out_headers = h;
}

static void attach(http_req *r, int status, struct MHD_Response *resp, const char *ctype)
{
    if (!resp) return;
    if (ctype) MHD_add_response_header(resp, "Content-Type", ctype);
    for (hdr *h = r->out_headers; h; h = h->next) MHD_add_response_header(resp, h->name, h->value);
    r->resp = resp;
    r->status = status;
    r->responded = 1;
}

void http_respond(http_req *r, int status, const char *content_type, const void *body, size_t len)
{
    if (r->responded) return;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    attach(r, status, resp, content_type);
}

void http_respond_json(http_req *r, int status, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    if (!s) { http_respond_text(r, 500, "json encoding failed\n"); return; }
    http_respond(r, status, "application/json", s, strlen(s));
    free(s);
}

void http_respond_text(http_req *r, int status, const char *text)
{
    http_respond(r, status, "text/plain; charset=utf-8", text, strlen(text));
}

typedef struct stream_ctx {
    http_stream_read read;
    http_stream_done done;
    void *ctx;
} stream_ctx;

static ssize_t stream_cb(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    stream_ctx *s = cls;
    ssize_t n = s->read(s->ctx, out, max);
    if (n == 0) return MHD_CONTENT_READER_END_OF_STREAM;
    if (n < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
    return n;
}

static void stream_free(void *cls)
{
    stream_ctx *s = cls;
    if (s->done) s->done(s->ctx);
    free(s);
}

void http_respond_stream(http_req *r, int status, const char *content_type,
                         http_stream_read read, http_stream_done done, void *ctx)
{
    if (r->responded) { if (done) done(ctx); return; }
    stream_ctx *s = calloc(1, sizeof *s);
    if (!s) { if (done) done(ctx); return; }
    s->read = read;
    s->done = done;
    s->ctx = ctx;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_cb, s, stream_free);
    if (!resp) { stream_free(s); return; }
    attach(r, status, resp, content_type);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
}

/* ---- libmicrohttpd glue ---- */
static void req_free(http_req *r)
{
    if (!r) return;
    hdr *h = r->out_headers;
    while (h) {
        hdr *n = h->next;
        free(h->name);
        free(h->value);
        free(h);
        h = n;
    }
    if (r->resp) MHD_destroy_response(r->resp);
    buf_free(&r->body);
    free(r->path);
    free(r);
}

static enum MHD_Result send_now(http_req *r)
{
    if (!r->resp) {
        log_error("handler for %s %s gave no answer", r->method, r->path);
        http_respond_text(r, 500, "no response\n");
    }
    enum MHD_Result ret = MHD_queue_response(r->c, (unsigned)r->status, r->resp);
    MHD_destroy_response(r->resp);
    r->resp = NULL;
    return ret;
}

static void too_large(http_req *r)
{
    char msg[256];
    snprintf(msg, sizeof msg,
             "{\"error\":{\"message\":\"request body is larger than the limit of %zu bytes\","
             "\"type\":\"invalid_request_error\",\"code\":\"body_too_large\"}}",
             r->srv->o.max_body);
    http_respond(r, 413, "application/json", msg, strlen(msg));
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version,
                                 const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    http_server *s = cls;
    http_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->c = c;
        r->srv = s;
        snprintf(r->method, sizeof r->method, "%s", method);
        r->path = strdup(url);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, r->peer, sizeof r->peer);
            else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, r->peer, sizeof r->peer);
        }
        *con_cls = r;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
            r->too_large = 1;
            too_large(r);
            return send_now(r);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!r->too_large) {
            if (r->body.len + *upload_size > s->o.max_body) {
                r->too_large = 1;
                buf_free(&r->body);
            } else {
                buf_append(&r->body, upload, *upload_size);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->responded && !r->resp) return MHD_YES; /* already sent (early 413) */
    if (r->too_large) too_large(r);
    else s->o.handler(r, s->o.app);
    return send_now(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls; (void)c; (void)toe;
    req_free(*con_cls);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n')) line[--n] = 0;
    log_debug("http: %s", line);
}

http_server *http_server_start(const http_server_opts *o, char *err, size_t errlen)
{
    char host[128];
    int port;
    if (http_parse_listen(o->listen, host, sizeof host, &port)) {
        snprintf(err, errlen, "bad listen address '%s' (want HOST:PORT)", o->listen ? o->listen : "");
        return NULL;
    }
    if (!strcmp(host, "localhost")) snprintf(host, sizeof host, "127.0.0.1");
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ERROR_LOG;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errlen, "listen host '%s' is not a numeric IP address", host);
        return NULL;
    }
    http_server *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, errlen, "out of memory"); return NULL; }
    s->o = *o;
    if (!s->o.max_body) s->o.max_body = 8u << 20;
    if (!s->o.idle_timeout_s) s->o.idle_timeout_s = 300;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_access, s,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, s->o.idle_timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, 4096u,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, errlen, "cannot listen on %s (address in use or not available)", o->listen);
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : port;
    return s;
}

int http_server_port(const http_server *s) { return s->port; }

void http_server_stop(http_server *s)
{
    if (!s) return;
    MHD_stop_daemon(s->d);
    free(s);
}
