/* buf: a growable byte buffer, always NUL-terminated for convenience. */
#ifndef GPUPOOL_BUF_H
#define GPUPOOL_BUF_H

#include <stddef.h>

typedef struct buf {
    char *data;
    size_t len;
    size_t cap;
} buf;

int buf_append(buf *b, const void *p, size_t n);
int buf_puts(buf *b, const char *s);
int buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends v in decimal. */
int buf_put_uint(buf *b, unsigned long long v);
/* Appends len bytes of text escaped for the inside of a JSON string (no
 * quotes): '"', '\\' and control characters.  Bytes >= 0x80 pass as they
 * are, so the text must already be UTF-8. */
int buf_put_json_text(buf *b, const char *text, size_t len);
/* Drops the first n bytes. */
void buf_consume(buf *b, size_t n);
void buf_reset(buf *b);
void buf_free(buf *b);
/* Hands the bytes to the caller (never NULL) and empties the buffer. */
char *buf_steal(buf *b);

#endif
