/* http/upstream: see upstream.h.  Everything here runs on the I/O loop
 * thread that made the call, so nothing is locked. */
#include "http/upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "http/loop.h"
#include "http/wire.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/str.h"

#define IDLE_MAX 1024            /* kept connections, all hosts together */
#define IDLE_MAX_AGE_MS 118000   /* curl's default: older ones are not trusted */
#define CANCEL_SWEEP_MS 200      /* how often running calls ask whether their caller left */
#define KEY_LEN 300

/* curl's words for the same failures, so logs and errors read as before. */
#define E_CONNECT "Couldn't connect to server"
#define E_TIMEOUT "Timeout was reached"
#define E_SEND "Failed sending data to the peer"
#define E_RECV "Failure when receiving data from the peer"
#define E_NOTHING "Server returned nothing (no headers, no data)"
#define E_PARTIAL "Transferred a partial file"
#define E_ABORTED "Operation was aborted by an application callback"
#define E_MEMORY "Out of memory"
#define E_HEAD "Weird server reply"

typedef struct conn {
    int fd;
    char key[KEY_LEN];
    int64_t idle_since_ms;
    struct conn *next;
} conn;

typedef struct call {
    /* what to send */
    char key[KEY_LEN];
    struct sockaddr_storage addr;
    socklen_t addrlen;
    buf head_out;
    const char *body_out;
    size_t body_out_len, sent;
    /* the connection */
    int fd;
    int reused, retried, connecting;
    int64_t deadline_us;         /* 0 = none */
    int64_t connect_deadline_us; /* while connecting */
    long connect_ms;
    int (*cancelled)(void *ctx);
    void *cancel_ctx;
    http_async_done done;
    void *done_ctx;
    /* what came back */
    int got_bytes;
    http_wire w;
    struct call *next;
} call;

/* Each loop thread has its own calls and kept connections. */
static __thread struct {
    conn *idle;
    int nidle;
    call *active;
    io_timer *timer;
    int64_t timer_due_us; /* 0 = not armed */
} U;

/* ---- kept connections ---- */

static void close_fd(int fd)
{
    io_forget(fd);
    close(fd);
}

static void conn_drop(conn *c)
{
    for (conn **pp = &U.idle; *pp; pp = &(*pp)->next)
        if (*pp == c) { *pp = c->next; U.nidle--; break; }
    close_fd(c->fd);
    free(c);
}

/* A kept connection said something while no call uses it: the peer closed it
 * (or broke the protocol).  Either way it cannot serve a call. */
static void on_idle_event(void *ctx, int fd, uint32_t events)
{
    (void)fd; (void)events;
    conn_drop(ctx);
}

static void conn_keep(const char *key, int fd)
{
    conn *c = U.nidle < IDLE_MAX ? malloc(sizeof *c) : NULL;
    if (!c || io_watch(fd, EPOLLIN, on_idle_event, c)) {
        free(c);
        close_fd(fd);
        return;
    }
    c->fd = fd;
    str_copy(c->key, sizeof c->key, key);
    c->idle_since_ms = mono_ms();
    c->next = U.idle;
    U.idle = c;
    U.nidle++;
}

/* The most recently kept connection to key, or -1. */
static int conn_take(const char *key)
{
    int64_t now = mono_ms();
    for (conn *c = U.idle, *next; c; c = next) {
        next = c->next;
        if (strcmp(c->key, key)) continue;
        if (now - c->idle_since_ms > IDLE_MAX_AGE_MS) {
            conn_drop(c);
            continue;
        }
        int fd = c->fd;
        for (conn **pp = &U.idle; *pp; pp = &(*pp)->next)
            if (*pp == c) { *pp = c->next; U.nidle--; break; }
        free(c);
        return fd;
    }
    return -1;
}

/* ---- URLs ---- */

/* http://HOST[:PORT][/PATH]: fills the address, the pool key, the Host value
 * and the path.  -1 for anything else (https, names to resolve, user info). */
static int parse_url(const char *url, call *c, char *host_hdr, size_t hlen, const char **path)
{
    if (!url || strncasecmp(url, "http://", 7)) return -1;
    const char *h = url + 7, *hend, *p;
    char host[128];
    if (*h == '[') {
        hend = strchr(h, ']');
        if (!hend) return -1;
        if ((size_t)(hend - h - 1) >= sizeof host) return -1;
        memcpy(host, h + 1, (size_t)(hend - h - 1));
        host[hend - h - 1] = 0;
        p = hend + 1;
    } else {
        hend = h + strcspn(h, ":/?#@");
        if (*hend == '@' || hend == h || (size_t)(hend - h) >= sizeof host) return -1;
        memcpy(host, h, (size_t)(hend - h));
        host[hend - h] = 0;
        p = hend;
    }
    long port = 80;
    if (*p == ':') {
        char *e;
        port = strtol(p + 1, &e, 10);
        if (e == p + 1 || port <= 0 || port > 65535) return -1;
        p = e;
    }
    if (*p && *p != '/' && *p != '?') return -1;
    if (strchr(p, '#') || strchr(p, ' ')) return -1;
    *path = p;
    memset(&c->addr, 0, sizeof c->addr);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&c->addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&c->addr;
    const char *ip = !strcasecmp(host, "localhost") ? "127.0.0.1" : host;
    if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        c->addrlen = sizeof *v4;
    } else if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        c->addrlen = sizeof *v6;
    } else {
        return -1;
    }
    /* The Host header as curl writes it: the URL's host, and the port unless 80. */
    size_t hl = (size_t)(hend - h) + (*h == '[');
    if (hl + 8 >= hlen) return -1;
    memcpy(host_hdr, h, hl);
    host_hdr[hl] = 0;
    char ps[8] = ":";
    str_uint(ps + 1, sizeof ps - 1, (unsigned long long)port);
    if (port != 80) str_copy(host_hdr + hl, hlen - hl, ps);
    size_t kl = str_copy(c->key, sizeof c->key, host);
    str_copy(c->key + kl, sizeof c->key - kl, ps);
    return 0;
}

/* ---- timers ---- */

static void on_timer(void *ctx);

static void timer_at(int64_t due_us)
{
    if (!due_us) return;
    if (!U.timer && !(U.timer = io_timer_new(on_timer, NULL))) return;
    if (U.timer_due_us && U.timer_due_us <= due_us) return;
    U.timer_due_us = due_us;
    int64_t ms = (due_us - mono_us() + 999) / 1000;
    io_timer_set(U.timer, ms < 0 ? 0 : ms);
}

/* ---- ending a call ---- */

static void unlink_call(call *c)
{
    for (call **pp = &U.active; *pp; pp = &(*pp)->next)
        if (*pp == c) { *pp = c->next; break; }
}

static void call_free(call *c)
{
    buf_free(&c->head_out);
    wire_free(&c->w);
    free(c);
}

/* Ends the call: keeps or closes its connection, then tells the caller.
 * error NULL means the answer is complete. */
static void finish(call *c, const char *error, int aborted, int timed_out)
{
    unlink_call(c);
    if (c->fd >= 0) {
        int keep = !error && c->w.keep && c->sent == c->head_out.len + c->body_out_len && c->w.in.len == 0;
        if (keep) conn_keep(c->key, c->fd);
        else close_fd(c->fd);
        c->fd = -1;
    }
    http_result res;
    memset(&res, 0, sizeof res);
    res.status = c->w.head_done ? c->w.status : 0;
    str_copy(res.content_type, sizeof res.content_type, c->w.content_type);
    if (error) {
        str_copy(res.error, sizeof res.error, error);
        res.aborted = aborted;
        res.timed_out = timed_out;
    }
    res.body_len = c->w.body.len;
    res.body = buf_steal(&c->w.body);
    res.headers = buf_steal(&c->w.head);
    c->done(c->done_ctx, &res);
    http_result_free(&res);
    call_free(c);
}

/* ---- sending ---- */

static void on_event(void *ctx, int fd, uint32_t events);
static void start_on(call *c, int fd, int reused);

/* A reused connection that failed before any answer byte was most likely
 * closed by the peer while kept: make the call once more on a fresh one. */
static int retry_fresh(call *c)
{
    if (!c->reused || c->got_bytes || c->retried) return 0;
    close_fd(c->fd);
    c->fd = -1;
    c->retried = 1;
    c->sent = 0;
    wire_free(&c->w);
    wire_init(&c->w);
    start_on(c, -1, 0);
    return 1;
}

static void fail(call *c, const char *error)
{
    if (!retry_fresh(c)) finish(c, error, 0, 0);
}

/* Sends what is left of the request: 0, or -1 after ending the call. */
static int send_more(call *c)
{
    size_t total = c->head_out.len + c->body_out_len;
    while (c->sent < total) {
        struct iovec iov[2];
        int n = 0;
        if (c->sent < c->head_out.len) {
            iov[n++] = (struct iovec){c->head_out.data + c->sent, c->head_out.len - c->sent};
            if (c->body_out_len) iov[n++] = (struct iovec){(void *)c->body_out, c->body_out_len};
        } else {
            size_t off = c->sent - c->head_out.len;
            iov[n++] = (struct iovec){(void *)(c->body_out + off), c->body_out_len - off};
        }
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (w <= 0) { fail(c, E_SEND); return -1; }
        c->sent += (size_t)w;
    }
    uint32_t want = EPOLLIN | (c->sent < total ? EPOLLOUT : 0);
    if (io_watch(c->fd, want, on_event, c)) { finish(c, E_MEMORY, 0, 0); return -1; }
    return 0;
}

/* ---- receiving ---- */

/* Reads what arrived and moves the call on. */
static void receive(call *c)
{
    char tmp[16384];
    for (;;) {
        ssize_t n = recv(c->fd, tmp, sizeof tmp, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0) { fail(c, E_RECV); return; }
        if (n == 0) {
            if (wire_eof(&c->w)) finish(c, NULL, 0, 0);
            else if (c->w.head_done) finish(c, E_PARTIAL, 0, 0);
            else fail(c, c->got_bytes ? E_RECV : E_NOTHING);
            return;
        }
        c->got_bytes = 1;
        int r = wire_feed(&c->w, tmp, (size_t)n);
        if (r == WIRE_DONE) { finish(c, NULL, 0, 0); return; }
        if (r != WIRE_MORE) { finish(c, r == WIRE_BAD_HEAD ? E_HEAD : r == WIRE_NO_MEMORY ? E_MEMORY : E_RECV, 0, 0); return; }
        /* Short answers come in one piece; read again only when the loop says
         * there is more, instead of a read that finds nothing. */
        if ((size_t)n < sizeof tmp) return;
    }
}

static void on_event(void *ctx, int fd, uint32_t events)
{
    (void)fd;
    call *c = ctx;
    if (c->connecting) {
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) || err) {
            if (err == EINPROGRESS) return;
            finish(c, E_CONNECT, 0, 0);
            return;
        }
        if (!(events & (EPOLLOUT | EPOLLIN))) return;
        c->connecting = 0;
        c->connect_deadline_us = 0;
        if (send_more(c)) return;
        if (!(events & EPOLLIN)) return;
    } else if ((events & EPOLLOUT) && c->sent < c->head_out.len + c->body_out_len) {
        if (send_more(c)) return;
    }
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) receive(c);
}

/* Connects (fd < 0) or reuses fd, and sends. */
static void start_on(call *c, int fd, int reused)
{
    c->reused = reused;
    c->connecting = 0;
    c->fd = fd;
    if (fd < 0) {
        fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) { finish(c, E_CONNECT, 0, 0); return; }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        int rc = connect(fd, (struct sockaddr *)&c->addr, c->addrlen);
        if (rc && errno != EINPROGRESS) {
            finish(c, E_CONNECT, 0, 0);
            return;
        }
        if (rc) {
            c->connecting = 1;
            c->connect_deadline_us = mono_us() + c->connect_ms * 1000;
            if (io_watch(fd, EPOLLOUT, on_event, c)) { finish(c, E_MEMORY, 0, 0); return; }
            timer_at(c->connect_deadline_us);
            return;
        }
    }
    send_more(c);
}

/* ---- deadlines, cancelling, shutdown ---- */

static void on_timer(void *ctx)
{
    (void)ctx;
    U.timer_due_us = 0;
    int64_t now = mono_us(), soonest = 0;
    for (call *c = U.active, *next; c; c = next) {
        next = c->next;
        if (c->deadline_us && now >= c->deadline_us) { finish(c, E_TIMEOUT, 0, 1); continue; }
        if (c->connecting && c->connect_deadline_us && now >= c->connect_deadline_us) {
            finish(c, E_TIMEOUT, 0, 1);
            continue;
        }
        if (c->cancelled && c->cancelled(c->cancel_ctx)) { finish(c, E_ABORTED, 1, 0); continue; }
        int64_t due = c->cancelled ? now + CANCEL_SWEEP_MS * 1000 : 0;
        if (c->deadline_us && (!due || c->deadline_us < due)) due = c->deadline_us;
        if (c->connecting && c->connect_deadline_us && (!due || c->connect_deadline_us < due)) due = c->connect_deadline_us;
        if (due && (!soonest || due < soonest)) soonest = due;
    }
    /* finish() may have started other calls that armed the timer already. */
    timer_at(soonest);
}

void upstream_abort_calls(void)
{
    while (U.active) {
        call *c = U.active;
        finish(c, E_ABORTED, 1, 0);
    }
}

void upstream_close_idle(void)
{
    while (U.idle) conn_drop(U.idle);
    if (U.timer) io_timer_free(U.timer);
    U.timer = NULL;
    U.timer_due_us = 0;
}

/* ---- starting ---- */

static void start(void *arg)
{
    call *c = arg;
    c->next = U.active;
    U.active = c;
    int64_t now = mono_us();
    int64_t due = c->cancelled ? now + CANCEL_SWEEP_MS * 1000 : 0;
    if (c->deadline_us && (!due || c->deadline_us < due)) due = c->deadline_us;
    timer_at(due);
    int fd = conn_take(c->key);
    start_on(c, fd, fd >= 0);
}

int upstream_call(const http_call_opts *o, http_async_done done, void *ctx)
{
    const char *method = o->method ? o->method : (o->body ? "POST" : "GET");
    if (!strcasecmp(method, "HEAD") || strpbrk(method, " \r\n") || o->idle_timeout_ms) return 1;
    call *c = calloc(1, sizeof *c);
    if (!c) return -1;
    char host[160];
    const char *path;
    if (parse_url(o->url, c, host, sizeof host, &path)) { free(c); return 1; }
    /* Built by appends: this head is written for every proxied call. */
    buf *h = &c->head_out;
    int bad = buf_puts(h, method) | buf_puts(h, *path == '/' ? " " : " /") | buf_puts(h, path) |
              buf_puts(h, " HTTP/1.1\r\nHost: ") | buf_puts(h, host) | buf_puts(h, "\r\nAccept: */*\r\n");
    if (o->body)
        bad |= buf_puts(h, "Content-Type: ") | buf_puts(h, o->content_type ? o->content_type : "application/json") |
               buf_puts(h, "\r\n");
    if (o->bearer && *o->bearer) bad |= buf_puts(h, "Authorization: Bearer ") | buf_puts(h, o->bearer) | buf_puts(h, "\r\n");
    for (const char *const *x = o->headers; x && *x; x++) {
        if (strpbrk(*x, "\r\n")) { call_free(c); return 1; }
        bad |= buf_puts(h, *x) | buf_puts(h, "\r\n");
    }
    if (o->body || strcasecmp(method, "GET"))
        bad |= buf_puts(h, "Content-Length: ") | buf_put_uint(h, o->body ? o->body_len : 0) | buf_puts(h, "\r\n");
    bad |= buf_puts(&c->head_out, "\r\n");
    if (bad) { call_free(c); return -1; }
    wire_init(&c->w);
    c->body_out = o->body;
    c->body_out_len = o->body ? o->body_len : 0;
    c->fd = -1;
    int64_t now = mono_us();
    c->deadline_us = o->timeout_ms > 0 ? now + o->timeout_ms * 1000 : 0;
    c->connect_ms = o->connect_timeout_ms ? o->connect_timeout_ms : 3000L;
    c->cancelled = o->cancelled;
    c->cancel_ctx = o->cancel_ctx;
    c->done = done;
    c->done_ctx = ctx;
    if (io_on_loop()) start(c);
    else if (io_post(start, c)) { call_free(c); return -1; }
    return 0;
}
