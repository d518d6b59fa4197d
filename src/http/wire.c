/* http/wire: see wire.h. */
#include "http/wire.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_HEAD 65536
#define MAX_CHUNK_LINE 4096

enum body_mode { BODY_LENGTH, BODY_CHUNKED, BODY_TO_CLOSE, BODY_NONE };
enum chunk_state { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER };

void wire_init(http_wire *w) { memset(w, 0, sizeof *w); }

void wire_free(http_wire *w)
{
    buf_free(&w->in);
    buf_free(&w->head);
    buf_free(&w->body);
}

static int header_is(const char *line, size_t len, const char *name, const char **value, size_t *vlen)
{
    size_t n = strlen(name);
    if (len <= n || line[n] != ':' || strncasecmp(line, name, n)) return 0;
    const char *v = line + n + 1, *e = line + len;
    while (v < e && (*v == ' ' || *v == '\t')) v++;
    while (e > v && (e[-1] == ' ' || e[-1] == '\t')) e--;
    *value = v;
    *vlen = (size_t)(e - v);
    return 1;
}

static int value_has(const char *v, size_t vl, const char *token)
{
    size_t n = strlen(token);
    for (size_t i = 0; i + n <= vl; i++)
        if (!strncasecmp(v + i, token, n)) return 1;
    return 0;
}

/* A complete head of len bytes at w->in: 1 read, 0 an interim 1xx head (to
 * drop), -1 malformed. */
static int parse_head(http_wire *w, size_t len)
{
    const char *p = w->in.data, *end = p + len;
    /* "HTTP/1.x NNN reason" */
    if (len < 12 || strncmp(p, "HTTP/1.", 7) || p[7] < '0' || p[7] > '9' || p[8] != ' ') return -1;
    for (int i = 9; i < 12; i++)
        if (p[i] < '0' || p[i] > '9') return -1;
    int minor = p[7] - '0';
    long status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    if (status < 100) return -1;
    if (status < 200 && status != 101) return 0;
    buf_reset(&w->head);
    w->content_type[0] = 0;
    w->keep = minor >= 1;
    w->mode = BODY_TO_CLOSE;
    int have_length = 0;
    const char *line = memchr(p, '\n', len);
    line = line ? line + 1 : end;
    while (line < end) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        if (!nl) break;
        size_t ll = (size_t)(nl - line);
        if (ll && line[ll - 1] == '\r') ll--;
        if (ll == 0) break;
        if (w->head.len < 16384 && (buf_append(&w->head, line, ll) || buf_append(&w->head, "\r\n", 2))) return -1;
        const char *v;
        size_t vl;
        if (header_is(line, ll, "Content-Type", &v, &vl)) {
            if (vl >= sizeof w->content_type) vl = sizeof w->content_type - 1;
            memcpy(w->content_type, v, vl);
            w->content_type[vl] = 0;
        } else if (header_is(line, ll, "Content-Length", &v, &vl)) {
            char num[32];
            if (!vl || vl >= sizeof num) return -1;
            memcpy(num, v, vl);
            num[vl] = 0;
            char *e;
            long long n = strtoll(num, &e, 10);
            if (*e || n < 0 || num[0] < '0' || num[0] > '9') return -1;
            w->left = n;
            have_length = 1;
        } else if (header_is(line, ll, "Transfer-Encoding", &v, &vl)) {
            if (value_has(v, vl, "chunked")) w->mode = BODY_CHUNKED;
        } else if (header_is(line, ll, "Connection", &v, &vl)) {
            if (value_has(v, vl, "close")) w->keep = 0;
            else if (value_has(v, vl, "keep-alive")) w->keep = 1;
        }
        line = nl + 1;
    }
    if (w->mode != BODY_CHUNKED && have_length) w->mode = BODY_LENGTH;
    if (status == 204 || status == 304 || (w->mode == BODY_LENGTH && w->left == 0)) w->mode = BODY_NONE;
    if (w->mode == BODY_TO_CLOSE) w->keep = 0;
    w->status = status;
    w->head_done = 1;
    w->chunk = CH_SIZE;
    return 1;
}

/* Moves up to w->left bytes of w->in to the body. */
static int take(http_wire *w)
{
    size_t n = (long long)w->in.len < w->left ? w->in.len : (size_t)w->left;
    if (n && buf_append(&w->body, w->in.data, n)) return -1;
    buf_consume(&w->in, n);
    w->left -= (long long)n;
    return 0;
}

/* Body bytes from w->in: WIRE_DONE, WIRE_MORE or an error. */
static int take_body(http_wire *w)
{
    if (w->mode == BODY_NONE) return WIRE_DONE;
    if (w->mode == BODY_TO_CLOSE) {
        if (w->in.len && buf_append(&w->body, w->in.data, w->in.len)) return WIRE_NO_MEMORY;
        buf_reset(&w->in);
        return WIRE_MORE;
    }
    if (w->mode == BODY_LENGTH) {
        if (take(w)) return WIRE_NO_MEMORY;
        return w->left == 0 ? WIRE_DONE : WIRE_MORE;
    }
    for (;;) {
        if (w->chunk == CH_DATA) {
            if (take(w)) return WIRE_NO_MEMORY;
            if (w->left) return WIRE_MORE;
            w->chunk = CH_DATA_END;
        }
        if (w->chunk == CH_DATA_END) {
            if (w->in.len < 2) return WIRE_MORE;
            if (memcmp(w->in.data, "\r\n", 2)) return WIRE_BAD_BODY;
            buf_consume(&w->in, 2);
            w->chunk = CH_SIZE;
        }
        const char *nl = w->in.len ? memchr(w->in.data, '\n', w->in.len) : NULL;
        if (!nl) return w->in.len > MAX_CHUNK_LINE ? WIRE_BAD_BODY : WIRE_MORE;
        size_t ll = (size_t)(nl - w->in.data) + 1;
        if (w->chunk == CH_TRAILER) {
            int blank = ll <= 2;
            buf_consume(&w->in, ll);
            if (blank) return WIRE_DONE;
            continue;
        }
        char *e;
        long long n = strtoll(w->in.data, &e, 16);
        int digit = (w->in.data[0] >= '0' && w->in.data[0] <= '9') || (w->in.data[0] >= 'a' && w->in.data[0] <= 'f') ||
                    (w->in.data[0] >= 'A' && w->in.data[0] <= 'F');
        if (!digit || n < 0 || (*e != '\r' && *e != '\n' && *e != ';' && *e != ' ' && *e != '\t')) return WIRE_BAD_BODY;
        buf_consume(&w->in, ll);
        w->left = n;
        w->chunk = n ? CH_DATA : CH_TRAILER;
    }
}

int wire_feed(http_wire *w, const char *p, size_t n)
{
    if (n && buf_append(&w->in, p, n)) return WIRE_NO_MEMORY;
    while (!w->head_done) {
        const char *e = w->in.len >= 4 ? memmem(w->in.data, w->in.len, "\r\n\r\n", 4) : NULL;
        if (!e) return w->in.len > MAX_HEAD ? WIRE_BAD_HEAD : WIRE_MORE;
        size_t hl = (size_t)(e - w->in.data) + 4;
        if (parse_head(w, hl) < 0) return WIRE_BAD_HEAD;
        buf_consume(&w->in, hl);
    }
    return take_body(w);
}

int wire_eof(http_wire *w) { return w->head_done && w->mode == BODY_TO_CLOSE; }
