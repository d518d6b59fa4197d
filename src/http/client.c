/* http/client: see client.h. */
#include "http/client.h"

#include <curl/curl.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/loop.h"
#include "http/upstream.h"
#include "util/buf.h"

#define POOL_MAX 256

static atomic_int aborting_all; /* shutdown: end every asynchronous call */

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static CURL *pool[POOL_MAX];
static int pool_n;

void http_client_global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static void loop_stop(void);

void http_client_global_cleanup(void)
{
    loop_stop();
    io_loop_stop();
    pthread_mutex_lock(&pool_mu);
    for (int i = 0; i < pool_n; i++) curl_easy_cleanup(pool[i]);
    pool_n = 0;
    pthread_mutex_unlock(&pool_mu);
    curl_global_cleanup();
}

static CURL *handle_get(void)
{
    CURL *h = NULL;
    pthread_mutex_lock(&pool_mu);
    if (pool_n) h = pool[--pool_n];
    pthread_mutex_unlock(&pool_mu);
    if (!h) h = curl_easy_init();
    else curl_easy_reset(h); /* keeps the connection cache */
    return h;
}

static void handle_put(CURL *h)
{
    pthread_mutex_lock(&pool_mu);
    if (pool_n < POOL_MAX) { pool[pool_n++] = h; h = NULL; }
    pthread_mutex_unlock(&pool_mu);
    if (h) curl_easy_cleanup(h);
}

typedef struct call_state {
    const http_stream_cbs *cb; /* NULL for buffered calls */
    const http_call_opts *opts;
    struct curl_slist *hl;
    /* asynchronous calls own copies of their strings */
    int async;
    http_call_opts own;
    char *url, *bearer, *ctype_in, *method, **headers;
    http_async_done done;
    void *done_ctx;
    struct call_state *next;
    buf body;
    buf head;
    long status;
    char ctype[128];
    int status_sent;
    int stop;
    CURL *h;
} call_state;

static int deliver_status(call_state *st)
{
    if (st->status_sent) return 0;
    st->status_sent = 1;
    curl_easy_getinfo(st->h, CURLINFO_RESPONSE_CODE, &st->status);
    if (st->cb && st->cb->on_status && st->cb->on_status(st->cb->ctx, st->status, st->ctype, st->head.data ? st->head.data : "")) {
        st->stop = 1;
        return -1;
    }
    return 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    call_state *st = ud;
    size_t len = size * n;
    if (!strncmp(p, "HTTP/", 5)) buf_reset(&st->head); /* a new head (after 100 Continue) */
    else if (len > 2 && st->head.len < 16384) buf_append(&st->head, p, len);
    if (len > 13 && !strncasecmp(p, "Content-Type:", 13)) {
        const char *v = p + 13;
        while (*v == ' ') v++;
        size_t vl = len - (size_t)(v - p);
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n')) vl--;
        if (vl >= sizeof st->ctype) vl = sizeof st->ctype - 1;
        memcpy(st->ctype, v, vl);
        st->ctype[vl] = 0;
    } else if (len <= 2 && (p[0] == '\r' || p[0] == '\n')) {
        long code = 0;
        curl_easy_getinfo(st->h, CURLINFO_RESPONSE_CODE, &code);
        /* An interim 100 Continue is followed by the real head. */
        if (code >= 200 && deliver_status(st)) return 0;
    }
    return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    call_state *st = ud;
    size_t len = size * n;
    if (deliver_status(st)) return 0;
    if (st->cb) {
        if (st->cb->on_data && st->cb->on_data(st->cb->ctx, p, len)) { st->stop = 1; return 0; }
        return len;
    }
    return buf_append(&st->body, p, len) ? 0 : len;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a; (void)b; (void)c; (void)d;
    call_state *st = ud;
    if (st->cb && st->cb->cancelled && st->cb->cancelled(st->cb->ctx)) { st->stop = 1; return 1; }
    if (st->opts->cancelled && st->opts->cancelled(st->opts->cancel_ctx)) { st->stop = 1; return 1; }
    if (st->async && atomic_load(&aborting_all)) { st->stop = 1; return 1; }
    return 0;
}

static int on_close_socket(void *clientp, curl_socket_t fd);

/* Configures st->h for the call.  The caller keeps o's strings alive. */
static void setup(call_state *st, const http_call_opts *o)
{
    CURL *h = st->h;
    struct curl_slist *hl = NULL;
    char line[1024];
    if (o->body) {
        snprintf(line, sizeof line, "Content-Type: %s", o->content_type ? o->content_type : "application/json");
        hl = curl_slist_append(hl, line);
    }
    if (o->bearer && *o->bearer) { /* an empty one (a backend without a key): none */
        snprintf(line, sizeof line, "Authorization: Bearer %s", o->bearer);
        hl = curl_slist_append(hl, line);
    }
    hl = curl_slist_append(hl, "Expect:");
    for (const char *const *x = o->headers; x && *x; x++) hl = curl_slist_append(hl, *x);
    st->hl = hl;

    curl_easy_setopt(h, CURLOPT_URL, o->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, o->connect_timeout_ms ? o->connect_timeout_ms : 3000L);
    if (o->timeout_ms) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, o->timeout_ms);
    if (o->idle_timeout_ms) {
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        long s = (o->idle_timeout_ms + 999) / 1000;
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, s < 1 ? 1L : s);
    }
    if (o->recv_buffer) curl_easy_setopt(h, CURLOPT_BUFFERSIZE, o->recv_buffer);
    const char *method = o->method ? o->method : (o->body ? "POST" : "GET");
    if (o->body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, o->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
    }
    if (strcmp(method, "GET") && strcmp(method, "POST"))
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, st);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, st);
    curl_easy_setopt(h, CURLOPT_PRIVATE, st);
    if (st->async) curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
    if ((st->cb && st->cb->cancelled) || o->cancelled || st->async) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, st);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }
}

/* Fills res from a finished transfer and gives the handle back. */
static int finish(call_state *st, CURLcode rc, http_result *res)
{
    CURL *h = st->h;
    memset(res, 0, sizeof *res);
    if (rc == CURLE_OK) deliver_status(st); /* an empty body still has a head */
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &res->status);
    snprintf(res->content_type, sizeof res->content_type, "%s", st->ctype);
    int ok = 0;
    if (rc != CURLE_OK) {
        res->aborted = st->stop;
        res->timed_out = rc == CURLE_OPERATION_TIMEDOUT;
        snprintf(res->error, sizeof res->error, "%s", curl_easy_strerror(rc));
        if (!st->status_sent) res->status = 0;
        ok = -1;
    }
    if (!st->cb) {
        res->body_len = st->body.len;
        res->body = buf_steal(&st->body);
    }
    res->headers = buf_steal(&st->head);
    buf_free(&st->body);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(st->hl);
    st->hl = NULL;
    /* A handle whose transfer failed may hold a broken connection; drop it. */
    if (rc == CURLE_OK) handle_put(h);
    else curl_easy_cleanup(h);
    st->h = NULL;
    if (ok == 0 && res->status == 0) {
        snprintf(res->error, sizeof res->error, "no HTTP answer");
        ok = -1;
    }
    return ok;
}

static int perform(const http_call_opts *o, const http_stream_cbs *cb, http_result *res)
{
    call_state st;
    memset(&st, 0, sizeof st);
    st.cb = cb;
    st.opts = o;
    st.h = handle_get();
    if (!st.h) {
        memset(res, 0, sizeof *res);
        snprintf(res->error, sizeof res->error, "out of memory");
        return -1;
    }
    setup(&st, o);
    return finish(&st, curl_easy_perform(st.h), res);
}

int http_call(const http_call_opts *o, http_result *res) { return perform(o, NULL, res); }

int http_call_stream(const http_call_opts *o, const http_stream_cbs *cb, http_result *res)
{
    return perform(o, cb, res);
}

/* ---- calls on the shared I/O loop ---- */

/* Asynchronous calls run on the process's I/O loop (http/loop.h) through a
 * curl multi handle in socket mode: curl tells us which sockets to watch and
 * when to time out, and the loop tells curl what happened. */
static struct {
    CURLM *multi;
    io_timer *timer;
    io_timer *sweep;    /* asks waiting calls whether their callers left */
    int sweep_armed;
    call_state *active; /* for aborting them all at shutdown */
    int ready;
} A;

/* curl runs a transfer's progress callback only when something happens on
 * it, so a call waiting minutes for a silent node would not see its caller
 * leave.  The loop asks every waiting call itself this often. */
#define CANCEL_SWEEP_MS 200

static atomic_int async_ready;

static void async_abort(void *arg);

static void upstream_abort(void *arg)
{
    (void)arg;
    upstream_abort_calls();
}

void http_client_abort_all(void)
{
    atomic_store(&aborting_all, 1);
    if (!atomic_load(&async_ready)) return;
    /* Fast calls run on the loop that made them; curl's on loop 0. */
    for (int i = 1; i < io_loop_count(); i++) io_post_to(i, upstream_abort, NULL);
    io_post_to(0, async_abort, NULL);
}

static void async_free(call_state *st)
{
    free(st->url);
    free(st->bearer);
    free(st->ctype_in);
    free(st->method);
    for (char **x = st->headers; x && *x; x++) free(*x);
    free(st->headers);
    free(st);
}

static void unlink_active(call_state *st)
{
    for (call_state **pp = &A.active; *pp; pp = &(*pp)->next)
        if (*pp == st) { *pp = st->next; break; }
}

static void reap(void)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(A.multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        call_state *st = NULL;
        CURL *h = m->easy_handle;
        CURLcode rc = m->data.result;
        curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&st);
        curl_multi_remove_handle(A.multi, h);
        unlink_active(st);
        http_result res;
        finish(st, rc, &res);
        st->done(st->done_ctx, &res);
        http_result_free(&res);
        async_free(st);
    }
}

static void on_socket_ready(void *ctx, int fd, uint32_t events)
{
    (void)ctx;
    int flags = 0, running;
    if (events & EPOLLIN) flags |= CURL_CSELECT_IN;
    if (events & EPOLLOUT) flags |= CURL_CSELECT_OUT;
    if (events & (EPOLLERR | EPOLLHUP)) flags |= CURL_CSELECT_ERR;
    curl_multi_socket_action(A.multi, fd, flags, &running);
    reap();
}

static int on_curl_socket(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)e; (void)userp; (void)socketp;
    uint32_t ev = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) ev |= EPOLLIN;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) ev |= EPOLLOUT;
    /* A connection curl keeps for the next call stays registered, so the
     * next call on it needs no epoll_ctl at all. */
    if (what == CURL_POLL_REMOVE) io_idle(fd);
    else io_watch(fd, ev, on_socket_ready, NULL);
    return 0;
}

/* curl closes a socket: forget it first, since the number may come back. */
static int on_close_socket(void *clientp, curl_socket_t fd)
{
    (void)clientp;
    io_forget(fd);
    return close(fd);
}

static void on_timer(void *ctx)
{
    (void)ctx;
    int running;
    curl_multi_socket_action(A.multi, CURL_SOCKET_TIMEOUT, 0, &running);
    reap();
}

static void arm_sweep(void)
{
    if (A.sweep_armed || !A.active) return;
    A.sweep_armed = 1;
    io_timer_set(A.sweep, CANCEL_SWEEP_MS);
}

static void on_sweep(void *ctx)
{
    (void)ctx;
    A.sweep_armed = 0;
    call_state *stop[64];
    int n = 0;
    for (call_state *st = A.active; st && n < 64; st = st->next)
        if (on_progress(st, 0, 0, 0, 0)) stop[n++] = st;
    /* Ended outside curl's own loop, exactly as reap() ends a finished one. */
    for (int i = 0; i < n; i++) {
        call_state *st = stop[i];
        curl_multi_remove_handle(A.multi, st->h);
        unlink_active(st);
        http_result res;
        finish(st, CURLE_ABORTED_BY_CALLBACK, &res);
        st->done(st->done_ctx, &res);
        http_result_free(&res);
        async_free(st);
    }
    arm_sweep();
}

static int on_curl_timer(CURLM *m, long ms, void *userp)
{
    (void)m; (void)userp;
    io_timer_set(A.timer, ms);
    return 0;
}

static void async_setup(void *arg)
{
    (void)arg;
    A.multi = curl_multi_init();
    A.timer = io_timer_new(on_timer, NULL);
    A.sweep = io_timer_new(on_sweep, NULL);
    /* Keep idle keep-alive connections to every node and engine. */
    curl_multi_setopt(A.multi, CURLMOPT_MAXCONNECTS, 1024L);
    curl_multi_setopt(A.multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(A.multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    A.ready = 1;
}

static void async_add(void *arg)
{
    call_state *st = arg;
    if (!A.ready) async_setup(NULL);
    st->next = A.active;
    A.active = st;
    curl_multi_add_handle(A.multi, st->h); /* arms the timer at once */
    arm_sweep();
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

int http_call_async(const http_call_opts *o, http_async_done done, void *ctx)
{
    if (atomic_load(&aborting_all) || io_loop_start()) return -1;
    atomic_store(&async_ready, 1);
    /* Plain HTTP with a buffered answer (every proxied call) skips curl. */
    int fast = upstream_call(o, done, ctx);
    if (fast <= 0) return fast;
    call_state *st = calloc(1, sizeof *st);
    if (!st) return -1;
    st->async = 1;
    st->done = done;
    st->done_ctx = ctx;
    st->own = *o;
    st->own.url = st->url = dup_or_null(o->url);
    st->own.bearer = st->bearer = dup_or_null(o->bearer);
    st->own.content_type = st->ctype_in = dup_or_null(o->content_type);
    st->own.method = st->method = dup_or_null(o->method);
    size_t nh = 0;
    while (o->headers && o->headers[nh]) nh++;
    st->headers = calloc(nh + 1, sizeof *st->headers);
    for (size_t i = 0; i < nh; i++) st->headers[i] = strdup(o->headers[i]);
    st->own.headers = (const char *const *)st->headers;
    st->opts = &st->own;
    st->h = handle_get();
    if (!st->h) { async_free(st); return -1; }
    setup(st, &st->own);
    atomic_store(&async_ready, 1);
    if (io_loop_index() == 0) async_add(st);
    else io_post_to(0, async_add, st);
    return 0;
}

/* Ends every call still running (their done() runs with an error). */
static void async_abort(void *arg)
{
    (void)arg;
    upstream_abort_calls();
    if (!A.ready) return;
    while (A.active) {
        call_state *st = A.active;
        A.active = st->next;
        curl_multi_remove_handle(A.multi, st->h);
        st->stop = 1;
        http_result res;
        finish(st, CURLE_ABORTED_BY_CALLBACK, &res);
        st->done(st->done_ctx, &res);
        http_result_free(&res);
        async_free(st);
    }
}

static void upstream_teardown(void *arg)
{
    (void)arg;
    upstream_abort_calls();
    upstream_close_idle();
}

static void async_teardown(void *arg)
{
    async_abort(arg);
    upstream_close_idle();
    if (!A.ready) return;
    curl_multi_cleanup(A.multi);
    io_timer_free(A.timer);
    io_timer_free(A.sweep);
    A.multi = NULL;
    A.timer = NULL;
    A.sweep = NULL;
    A.sweep_armed = 0;
    A.ready = 0;
}

static void loop_stop(void)
{
    if (!atomic_load(&async_ready)) return;
    atomic_store(&aborting_all, 1);
    for (int i = 1; i < io_loop_count(); i++) io_run_sync_on(i, upstream_teardown, NULL);
    io_run_sync(async_teardown, NULL);
}

void http_result_free(http_result *res)
{
    free(res->body);
    free(res->headers);
    res->body = res->headers = NULL;
}
