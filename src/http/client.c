/* http/client: see client.h. */
#include "http/client.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/buf.h"

#define POOL_MAX 256

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static CURL *pool[POOL_MAX];
static int pool_n;

void http_client_global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

void http_client_global_cleanup(void)
{
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
    return 0;
}

static int perform(const http_call_opts *o, const http_stream_cbs *cb, http_result *res)
{
    memset(res, 0, sizeof *res);
    call_state st;
    memset(&st, 0, sizeof st);
    st.cb = cb;
    st.opts = o;
    CURL *h = handle_get();
    if (!h) { snprintf(res->error, sizeof res->error, "out of memory"); return -1; }
    st.h = h;

    struct curl_slist *hl = NULL;
    char line[1024];
    if (o->body) {
        snprintf(line, sizeof line, "Content-Type: %s", o->content_type ? o->content_type : "application/json");
        hl = curl_slist_append(hl, line);
    }
    if (o->bearer) {
        snprintf(line, sizeof line, "Authorization: Bearer %s", o->bearer);
        hl = curl_slist_append(hl, line);
    }
    hl = curl_slist_append(hl, "Expect:");
    for (const char *const *x = o->headers; x && *x; x++) hl = curl_slist_append(hl, *x);

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
    const char *method = o->method ? o->method : (o->body ? "POST" : "GET");
    if (o->body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, o->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
    }
    if (strcmp(method, "GET") && strcmp(method, "POST"))
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &st);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &st);
    if ((cb && cb->cancelled) || o->cancelled) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &st);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }

    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK) deliver_status(&st); /* an empty body still has a head */
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &res->status);
    snprintf(res->content_type, sizeof res->content_type, "%s", st.ctype);
    int ok = 0;
    if (rc != CURLE_OK) {
        res->aborted = st.stop;
        res->timed_out = rc == CURLE_OPERATION_TIMEDOUT;
        snprintf(res->error, sizeof res->error, "%s", curl_easy_strerror(rc));
        if (!st.status_sent) res->status = 0;
        ok = -1;
    }
    if (!cb) {
        res->body_len = st.body.len;
        res->body = buf_steal(&st.body);
    }
    res->headers = buf_steal(&st.head);
    buf_free(&st.body);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hl);
    /* A handle whose transfer failed may hold a broken connection; drop it. */
    if (rc == CURLE_OK) handle_put(h);
    else curl_easy_cleanup(h);
    if (ok == 0 && res->status == 0) {
        snprintf(res->error, sizeof res->error, "no HTTP answer");
        ok = -1;
    }
    return ok;
}

int http_call(const http_call_opts *o, http_result *res) { return perform(o, NULL, res); }

int http_call_stream(const http_call_opts *o, const http_stream_cbs *cb, http_result *res)
{
    return perform(o, cb, res);
}

void http_result_free(http_result *res)
{
    free(res->body);
    free(res->headers);
    res->body = res->headers = NULL;
}
