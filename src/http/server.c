/* http/server: see server.h.  The only file that includes libmicrohttpd. */
#include "http/server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "http/loop.h"
#include "http/pool.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/str.h"

/* One libmicrohttpd daemon on one I/O loop.  Every daemon accepts from the
 * same listening socket, so connections spread over the loops and each is
 * served, start to end, by the loop that accepted it. */
typedef struct mhd_slot {
    struct MHD_Daemon *d;
    int epfd;          /* libmicrohttpd's own epoll set, watched by the I/O loop */
    io_timer *timer;   /* libmicrohttpd's next timeout */
    atomic_int kick;   /* a run of libmicrohttpd is already posted to the loop */
    int loop;
    http_server *srv;
} mhd_slot;

struct http_server {
    mhd_slot slot[IO_MAX_LOOPS];
    int nslots;
    http_server_opts o;
    int port;
    work_pool *pool;
    atomic_int suspended; /* connections parked; all must be back before stop */
    atomic_int stopping;  /* new requests get 503 and never reach the pool */
    int listen_fd;        /* ours to close once quiesced */
};

typedef struct hdr {
    char *name, *value;
    struct hdr *next;
} hdr;

/* A request moves NEW -> BUSY (a handler or deferred work has it) -> READY
 * (answer set, waiting for the loop to send it) -> SENT. */
enum req_state { R_NEW, R_BUSY, R_READY, R_SENT };

struct http_req {
    struct MHD_Connection *c;
    http_server *srv;
    mhd_slot *slot;
    char method[16];
    char *path;
    buf body;
    int too_large;
    int responded;
    struct sockaddr_storage peer_sa; /* formatted only when asked for */
    char peer[64];
    atomic_int peer_done;
    hdr *out_headers;
    hdr *in_headers;   /* added by the application; found before the client's */
    struct MHD_Response *resp;
    int status;
    pthread_mutex_t mu; /* state and suspended, shared with other threads */
    enum req_state state;
    int suspended;
    int64_t t0_us;
    int64_t body_us;   /* from the headers to the body's last byte */
    int tag;
    void *ctx;
    void (*free_ctx)(void *);
    void *note;
    void (*free_note)(void *);
};

struct http_waker {
    pthread_mutex_t mu;
    int refs;
    http_server *srv;
    mhd_slot *slot;
    struct MHD_Connection *c;
    int suspended, pending, closed;
    http_stream_read read;
    http_stream_done done;
    void *ctx;
};

/* Suspend and resume are paired under the caller's mutex, so a resume can
 * never run before its suspend (which libmicrohttpd does not allow). */
static void park(http_server *s, struct MHD_Connection *c)
{
    MHD_suspend_connection(c);
    atomic_fetch_add(&s->suspended, 1);
}

static void run_mhd(mhd_slot *m);

static void kicked(void *arg)
{
    mhd_slot *m = arg;
    atomic_store(&m->kick, 0);
    run_mhd(m);
}

/* A resumed connection is picked up by the next run of its libmicrohttpd;
 * make sure one happens soon (its own signal does not reach an external
 * loop). */
static void unpark(mhd_slot *m, struct MHD_Connection *c)
{
    MHD_resume_connection(c);
    atomic_fetch_sub(&m->srv->suspended, 1);
    if (!atomic_exchange(&m->kick, 1)) io_post_to(m->loop, kicked, m);
}

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
/* The text is made on first use, as most requests never ask and formatting
 * it cost more than a tenth of the worker's own work on a proxied call. */
const char *http_req_peer(const http_req *r)
{
    http_req *w = (http_req *)r;
    if (!atomic_load(&w->peer_done)) {
        char text[64] = "";
        if (w->peer_sa.ss_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)&w->peer_sa)->sin_addr, text, sizeof text);
        else if (w->peer_sa.ss_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)&w->peer_sa)->sin6_addr, text, sizeof text);
        pthread_mutex_lock(&w->mu);
        if (!atomic_load(&w->peer_done)) {
            memcpy(w->peer, text, sizeof text);
            atomic_store(&w->peer_done, 1);
        }
        pthread_mutex_unlock(&w->mu);
    }
    return w->peer;
}
int http_responded(const http_req *r) { return r->responded; }
void http_req_set_tag(http_req *r, int tag) { r->tag = tag; }
int http_req_tag(const http_req *r) { return r->tag; }
void *http_req_ctx(const http_req *r) { return r->ctx; }

void http_req_set_ctx(http_req *r, void *ctx, void (*free_ctx)(void *))
{
    if (r->ctx && r->free_ctx) r->free_ctx(r->ctx);
    r->ctx = ctx;
    r->free_ctx = free_ctx;
}
int http_resp_status(const http_req *r) { return r->status; }

void http_req_set_note(http_req *r, void *note, void (*free_note)(void *))
{
    if (r->note && r->free_note) r->free_note(r->note);
    r->note = note;
    r->free_note = free_note;
}
void *http_req_note(const http_req *r) { return r->note; }

void *http_req_take_note(http_req *r)
{
    void *n = r->note;
    r->note = NULL;
    r->free_note = NULL;
    return n;
}

const char *http_req_header(const http_req *r, const char *name)
{
    for (const hdr *h = r->in_headers; h; h = h->next)
        if (!strcasecmp(h->name, name)) return h->value;
    return MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, name);
}

static hdr *hdr_push(hdr **list, const char *name, const char *value)
{
    hdr *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->name = strdup(name);
    h->value = strdup(value);
    if (!h->name || !h->value) {
        free(h->name);
        free(h->value);
        free(h);
        return NULL;
    }
    h->next = *list;
    *list = h;
    return h;
}

static void hdr_free_all(hdr *h)
{
    while (h) {
        hdr *n = h->next;
        free(h->name);
        free(h->value);
        free(h);
        h = n;
    }
}

void http_req_add_header(http_req *r, const char *name, const char *value) { hdr_push(&r->in_headers, name, value); }

int http_req_replace_body(http_req *r, const char *data, size_t len)
{
    buf fresh = {0};
    if (buf_append(&fresh, data, len)) { buf_free(&fresh); return -1; }
    buf_free(&r->body);
    r->body = fresh;
    return 0;
}

const char *http_req_query(const http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->c, MHD_GET_ARGUMENT_KIND, name);
}

int64_t http_req_body_us(const http_req *r) { return r->body_us; }

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
void http_set_header(http_req *r, const char *name, const char *value) { hdr_push(&r->out_headers, name, value); }

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
    http_answer a = {.status = status, .content_type = content_type, .body = body, .len = len};
    if (r->srv->o.answer) r->srv->o.answer(r, &a, r->srv->o.app);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(a.len, (void *)a.body, MHD_RESPMEM_MUST_COPY);
    attach(r, a.status, resp, a.content_type);
    free(a.replaced);
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

void http_respond_fd(http_req *r, int status, const char *content_type, int fd, uint64_t offset, uint64_t len)
{
    if (r->responded) { close(fd); return; }
    http_answer a = {.status = status, .content_type = content_type, .streamed = 1};
    if (r->srv->o.answer) r->srv->o.answer(r, &a, r->srv->o.app);
    free(a.replaced);
    struct MHD_Response *resp = MHD_create_response_from_fd_at_offset64(len, fd, offset);
    if (!resp) {
        close(fd);
        http_respond_text(r, 500, "cannot send the file\n");
        return;
    }
    attach(r, a.status, resp, a.content_type);
}

static void waker_unref(http_waker *w)
{
    pthread_mutex_lock(&w->mu);
    int left = --w->refs;
    pthread_mutex_unlock(&w->mu);
    if (left) return;
    pthread_mutex_destroy(&w->mu);
    free(w);
}

void http_waker_release(http_waker *w)
{
    if (w) waker_unref(w);
}

void http_stream_wake(http_waker *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    if (w->suspended) {
        w->suspended = 0;
        unpark(w->slot, w->c);
    } else {
        w->pending = 1;
    }
    pthread_mutex_unlock(&w->mu);
}

static ssize_t stream_cb(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    http_waker *w = cls;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        w->pending = 0;
        pthread_mutex_unlock(&w->mu);
        ssize_t n = w->read(w->ctx, out, max);
        if (n > 0) return n;
        if (n == HTTP_STREAM_END) return MHD_CONTENT_READER_END_OF_STREAM;
        if (n != HTTP_STREAM_WAIT) return MHD_CONTENT_READER_END_WITH_ERROR;
        pthread_mutex_lock(&w->mu);
        if (w->pending) { /* bytes came while we looked: read again */
            pthread_mutex_unlock(&w->mu);
            continue;
        }
        park(w->srv, w->c);
        w->suspended = 1;
        pthread_mutex_unlock(&w->mu);
        return 0;
    }
}

static void stream_free(void *cls)
{
    http_waker *w = cls;
    pthread_mutex_lock(&w->mu);
    w->closed = 1;
    pthread_mutex_unlock(&w->mu);
    if (w->done) w->done(w->ctx);
    waker_unref(w);
}

http_waker *http_respond_stream(http_req *r, int status, const char *content_type,
                                http_stream_read read, http_stream_done done, void *ctx)
{
    http_waker *w = r->responded ? NULL : calloc(1, sizeof *w);
    if (!w) { if (done) done(ctx); return NULL; }
    if (r->srv->o.answer) {
        http_answer a = {.status = status, .content_type = content_type, .streamed = 1};
        r->srv->o.answer(r, &a, r->srv->o.app);
        free(a.replaced); /* a stream's status and body are its producer's */
    }
    pthread_mutex_init(&w->mu, NULL);
    w->refs = 2; /* the connection's and the producer's */
    w->srv = r->srv;
    w->slot = r->slot;
    w->c = r->c;
    w->read = read;
    w->done = done;
    w->ctx = ctx;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_cb, w, stream_free);
    if (!resp) {
        stream_free(w);
        waker_unref(w);
        return NULL;
    }
    attach(r, status, resp, content_type);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    return w;
}

/* ---- libmicrohttpd glue ---- */
static void req_free(http_req *r)
{
    if (!r) return;
    hdr_free_all(r->out_headers);
    hdr_free_all(r->in_headers);
    if (r->resp) MHD_destroy_response(r->resp);
    if (r->ctx && r->free_ctx) r->free_ctx(r->ctx);
    if (r->note && r->free_note) r->free_note(r->note);
    pthread_mutex_destroy(&r->mu);
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
    r->state = R_SENT;
    if (r->srv->o.observe) r->srv->o.observe(r, r->status, mono_us() - r->t0_us, r->srv->o.app);
    return ret;
}

void http_req_complete(http_req *r)
{
    pthread_mutex_lock(&r->mu);
    r->state = R_READY;
    if (r->suspended) {
        r->suspended = 0;
        unpark(r->slot, r->c);
    }
    pthread_mutex_unlock(&r->mu);
}

static void run_handler(void *arg)
{
    http_req *r = arg;
    r->srv->o.handler(r, r->srv->o.app);
    if (!r->responded) {
        log_error("handler for %s %s gave no answer", r->method, r->path);
        http_respond_text(r, 500, "no response\n");
    }
    http_req_complete(r);
}

void http_req_run_handler(http_req *r)
{
    if (atomic_load(&r->srv->stopping) || work_pool_run(r->srv->pool, run_handler, r)) {
        http_respond_text(r, 503, "shutting down\n");
        http_req_complete(r);
    }
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

static http_req *req_new(mhd_slot *m, struct MHD_Connection *c, const char *url, const char *method)
{
    http_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->c = c;
    r->srv = m->srv;
    r->slot = m;
    pthread_mutex_init(&r->mu, NULL);
    str_copy(r->method, sizeof r->method, method);
    r->path = strdup(url);
    r->t0_us = mono_us();
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET) memcpy(&r->peer_sa, sa, sizeof(struct sockaddr_in));
        else if (sa->sa_family == AF_INET6) memcpy(&r->peer_sa, sa, sizeof(struct sockaddr_in6));
    }
    return r;
}

/* The whole request is here: answer it now, defer it, or hand it to a pool
 * thread.  Runs on the event loop. */
static enum MHD_Result dispatch(http_server *s, http_req *r)
{
    int64_t now = mono_us();
    r->body_us = now - r->t0_us;
    r->t0_us = now;
    if (r->too_large) { too_large(r); return send_now(r); }
    http_fast_rc rc = s->o.fast ? s->o.fast(r, s->o.app) : HTTP_PASS;
    if (rc == HTTP_HANDLED) return send_now(r);
    pthread_mutex_lock(&r->mu);
    if (rc == HTTP_DEFERRED && r->state == R_READY) { /* finished already */
        pthread_mutex_unlock(&r->mu);
        return send_now(r);
    }
    park(s, r->c);
    r->suspended = 1;
    pthread_mutex_unlock(&r->mu);
    if (rc == HTTP_PASS) http_req_run_handler(r);
    return MHD_YES;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version,
                                 const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    mhd_slot *m = cls;
    http_server *s = m->srv;
    http_req *r = *con_cls;
    if (!r) {
        if (!(r = req_new(m, c, url, method))) return MHD_NO;
        *con_cls = r;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
            r->too_large = 1;
            r->state = R_BUSY;
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
    pthread_mutex_lock(&r->mu);
    enum req_state st = r->state;
    if (st == R_NEW) r->state = R_BUSY;
    pthread_mutex_unlock(&r->mu);
    if (st == R_NEW) return dispatch(s, r);
    if (st == R_READY) return send_now(r);
    return MHD_YES; /* already answered */
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls; (void)c; (void)toe;
    req_free(*con_cls);
    *con_cls = NULL;
}

/* ---- on the I/O loop ---- */

static void run_mhd(mhd_slot *m)
{
    MHD_UNSIGNED_LONG_LONG ms = 1000;
    int has = MHD_NO;
    /* A connection still able to write (a large body going out) is ready
     * again at once: run it now, a few rounds, rather than a loop turn later. */
    for (int i = 0; i < 16; i++) {
        MHD_run(m->d);
        has = MHD_get_timeout(m->d, &ms);
        if (has != MHD_YES || ms != 0) break;
    }
    if (has == MHD_YES) io_timer_set(m->timer, ms > 1000 ? 1000 : (int64_t)ms);
    else io_timer_set(m->timer, 1000);
}

static void on_mhd_ready(void *ctx, int fd, uint32_t events)
{
    (void)fd; (void)events;
    run_mhd(ctx);
}

static void on_mhd_timer(void *ctx) { run_mhd(ctx); }

static void attach_to_loop(void *arg)
{
    mhd_slot *m = arg;
    m->timer = io_timer_new(on_mhd_timer, m);
    io_watch(m->epfd, EPOLLIN, on_mhd_ready, m);
    run_mhd(m);
}

static void quiesce(void *arg)
{
    mhd_slot *m = arg;
    int fd = MHD_quiesce_daemon(m->d);
    if (fd >= 0) m->srv->listen_fd = fd; /* the same socket for every daemon */
}

static void detach_from_loop(void *arg)
{
    mhd_slot *m = arg;
    io_watch(m->epfd, 0, NULL, NULL);
    io_timer_free(m->timer);
    m->timer = NULL;
    MHD_stop_daemon(m->d);
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

/* Stops the daemons that are not on a loop yet (start failed half way). */
static void stop_unattached(http_server *s)
{
    for (int i = s->nslots - 1; i >= 0; i--) {
        if (i > 0) MHD_quiesce_daemon(s->slot[i].d); /* the socket is the first one's to close */
        MHD_stop_daemon(s->slot[i].d);
    }
    s->nslots = 0;
}

/* How many loops a server spreads its connections over: one per core, as an
 * event-driven proxy runs one worker per core. */
static int loops_wanted(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > IO_MAX_LOOPS ? IO_MAX_LOOPS : (int)n;
}

/* Each connection's memory for request headers and buffers.  libmicrohttpd
 * zeroes all of it after every request, so its default (32 KB) costs more
 * than an answer on the proxy path; 16 KB still takes about 15 KB of headers
 * (docs/api.md: 431). */
#define CONN_MEMORY ((size_t)16384)

static struct MHD_Daemon *start_daemon(http_server *s, mhd_slot *m, unsigned flags, const struct sockaddr *sa, int listen_fd)
{
    m->srv = s;
    /* A process that ignores SIGPIPE (every gpupool command does) lets
     * libmicrohttpd send files with sendfile(). */
    struct sigaction pipe_sa;
    int sigpipe_ignored = sigaction(SIGPIPE, NULL, &pipe_sa) == 0 && pipe_sa.sa_handler == SIG_IGN;
    if (listen_fd < 0)
        return MHD_start_daemon(flags, 0, NULL, NULL, on_access, m,
                                MHD_OPTION_SOCK_ADDR, sa,
                                MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                MHD_OPTION_CONNECTION_TIMEOUT, s->o.idle_timeout_s,
                                MHD_OPTION_CONNECTION_LIMIT, 4096u,
                                MHD_OPTION_CONNECTION_MEMORY_LIMIT, CONN_MEMORY,
                                MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
                                MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                                MHD_OPTION_SIGPIPE_HANDLED_BY_APP, sigpipe_ignored,
                                MHD_OPTION_END);
    return MHD_start_daemon(flags, 0, NULL, NULL, on_access, m,
                            MHD_OPTION_LISTEN_SOCKET, listen_fd,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, s->o.idle_timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, 4096u,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, CONN_MEMORY,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_SIGPIPE_HANDLED_BY_APP, sigpipe_ignored,
                            MHD_OPTION_END);
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
    /* libmicrohttpd runs on the shared I/O loop (external epoll); ITC lets
     * other threads resume parked connections. */
    unsigned flags = MHD_USE_EPOLL | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | MHD_USE_TURBO;
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
    s->pool = work_pool_new(4, 1024);
    s->listen_fd = -1;
    mhd_slot *first = &s->slot[0];
    first->d = start_daemon(s, first, flags, (struct sockaddr *)&ss, -1);
    if (!first->d) {
        snprintf(err, errlen, "cannot listen on %s (address in use or not available)", o->listen);
        work_pool_free(s->pool);
        free(s);
        return NULL;
    }
    s->nslots = 1;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(first->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : port;
    const union MHD_DaemonInfo *li = MHD_get_daemon_info(first->d, MHD_DAEMON_INFO_LISTEN_FD);
    int lfd = li ? li->listen_fd : -1;
    int loops = io_loops_start(loops_wanted());
    while (lfd >= 0 && s->nslots < loops) {
        mhd_slot *m = &s->slot[s->nslots];
        if (!(m->d = start_daemon(s, m, flags, NULL, lfd))) break;
        s->nslots++;
    }
    for (int i = 0; i < s->nslots; i++) {
        const union MHD_DaemonInfo *ei = MHD_get_daemon_info(s->slot[i].d, MHD_DAEMON_INFO_EPOLL_FD);
        s->slot[i].epfd = ei ? ei->epoll_fd : -1;
        s->slot[i].loop = i;
        if (s->slot[i].epfd < 0) loops = 0;
    }
    if (loops < 1) {
        snprintf(err, errlen, "cannot run the HTTP server on the I/O loop");
        stop_unattached(s);
        work_pool_free(s->pool);
        free(s);
        return NULL;
    }
    for (int i = 0; i < s->nslots; i++) io_run_sync_on(s->slot[i].loop, attach_to_loop, &s->slot[i]);
    return s;
}

int http_server_port(const http_server *s) { return s->port; }

void http_server_stop(http_server *s)
{
    if (!s) return;
    /* New requests are refused, and once the loop has passed this point no
     * more work reaches the pool.  Blocking handlers then finish (the caller
     * has made their waits end), and every parked connection must be back
     * before libmicrohttpd stops. */
    atomic_store(&s->stopping, 1);
    for (int i = 0; i < s->nslots; i++) io_run_sync_on(s->slot[i].loop, quiesce, &s->slot[i]);
    work_pool_free(s->pool);
    int64_t deadline = mono_ms() + 15000;
    while (atomic_load(&s->suspended) > 0 && mono_ms() < deadline) sleep_ms(5);
    if (atomic_load(&s->suspended) > 0) {
        log_error("%d connection(s) still parked at shutdown; leaving the server running", atomic_load(&s->suspended));
        return;
    }
    for (int i = 0; i < s->nslots; i++) io_run_sync_on(s->slot[i].loop, detach_from_loop, &s->slot[i]);
    if (s->listen_fd >= 0) close(s->listen_fd);
    free(s);
}
