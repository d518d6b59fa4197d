/* http/range: see range.h. */
#include "http/range.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Digits only (no sign, no spaces), into *v; the end in *end. */
static int number(const char *s, const char **end, uint64_t *v)
{
    if (!isdigit((unsigned char)*s)) return -1;
    uint64_t n = 0;
    for (; isdigit((unsigned char)*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (n > (UINT64_MAX - d) / 10) return -1;
        n = n * 10 + d;
    }
    *end = s;
    *v = n;
    return 0;
}

static const char *skip_ws(const char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    return s;
}

http_range_rc http_range_parse(const char *h, uint64_t size, uint64_t *first, uint64_t *last)
{
    if (!h) return HTTP_RANGE_NONE;
    h = skip_ws(h);
    if (strncasecmp(h, "bytes", 5)) return HTTP_RANGE_BAD;
    h = skip_ws(h + 5);
    if (*h++ != '=') return HTTP_RANGE_BAD;
    h = skip_ws(h);
    uint64_t a = 0, b = 0;
    const char *e;
    if (*h == '-') {
        /* the last N bytes */
        if (number(h + 1, &e, &b) || *skip_ws(e) || b == 0 || size == 0) return HTTP_RANGE_BAD;
        *first = b >= size ? 0 : size - b;
        *last = size - 1;
        return HTTP_RANGE_OK;
    }
    if (number(h, &e, &a) || *e != '-') return HTTP_RANGE_BAD;
    h = e + 1;
    if (*skip_ws(h) == 0) {
        b = UINT64_MAX;
    } else {
        if (number(h, &e, &b) || *skip_ws(e)) return HTTP_RANGE_BAD;
        if (b < a) return HTTP_RANGE_BAD;
    }
    if (a >= size) return HTTP_RANGE_BAD;
    *first = a;
    *last = b >= size ? size - 1 : b;
    return HTTP_RANGE_OK;
}

void http_content_range(uint64_t first, uint64_t last, uint64_t size, char *out, size_t outlen)
{
    if (first > last) snprintf(out, outlen, "bytes */%" PRIu64, size);
    else snprintf(out, outlen, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, first, last, size);
}

int http_content_range_parse(const char *v, uint64_t *first, uint64_t *total)
{
    if (!v) return -1;
    v = skip_ws(v);
    if (strncasecmp(v, "bytes", 5)) return -1;
    v = skip_ws(v + 5);
    const char *e;
    uint64_t a, b;
    if (*v == '*') {
        *first = UINT64_MAX;
        e = v + 1;
    } else {
        if (number(v, &e, &a) || *e != '-' || number(e + 1, &e, &b) || b < a) return -1;
        *first = a;
    }
    if (*e++ != '/') return -1;
    if (*e == '*' && !*skip_ws(e + 1)) { *total = 0; return 0; }
    if (number(e, &e, total) || *skip_ws(e)) return -1;
    return 0;
}
