/* buf: see buf.h. */
#include "util/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/str.h"

static int reserve(buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

int buf_append(buf *b, const void *p, size_t n)
{
    if (reserve(b, n)) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

int buf_puts(buf *b, const char *s) { return buf_append(b, s, strlen(s)); }

int buf_printf(buf *b, const char *fmt, ...)
{
    /* Formats once into the room there is, and again only when it did not
     * fit: most lines fit, and formatting is the cost. */
    if (reserve(b, 0)) return -1;
    size_t room = b->cap - b->len;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->data + b->len, room, fmt, ap);
    va_end(ap);
    if (n < 0) { b->data[b->len] = 0; return -1; }
    if ((size_t)n >= room) {
        if (reserve(b, (size_t)n)) { b->data[b->len] = 0; return -1; }
        va_start(ap, fmt);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
    return 0;
}

int buf_put_uint(buf *b, unsigned long long v)
{
    char d[24];
    size_t n = str_uint(d, sizeof d, v);
    return buf_append(b, d, n);
}

int buf_put_json_text(buf *b, const char *text, size_t len)
{
    size_t run = 0; /* bytes that need no escape, appended at once */
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch != '"' && ch != '\\' && ch >= 0x20) continue;
        if (buf_append(b, text + run, i - run)) return -1;
        run = i + 1;
        char esc[8] = {'\\', (char)ch, 0};
        if (ch == '\n') esc[1] = 'n';
        else if (ch < 0x20) snprintf(esc, sizeof esc, "\\u%04x", ch);
        if (buf_puts(b, esc)) return -1;
    }
    return buf_append(b, text + run, len - run);
}

void buf_consume(buf *b, size_t n)
{
    if (n >= b->len) { b->len = 0; if (b->data) b->data[0] = 0; return; }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = 0;
}

void buf_reset(buf *b) { b->len = 0; if (b->data) b->data[0] = 0; }

void buf_free(buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

char *buf_steal(buf *b)
{
    char *p = b->data ? b->data : calloc(1, 1);
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}
