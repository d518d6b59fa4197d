/* util/str: see str.h. */
#include "util/str.h"

#include <string.h>

size_t str_copy_n(char *dst, size_t cap, const char *src, size_t n)
{
    if (!cap) return 0;
    if (!src) n = 0;
    if (n > cap - 1) n = cap - 1;
    if (n) memcpy(dst, src, n);
    dst[n] = 0;
    return n;
}

size_t str_copy(char *dst, size_t cap, const char *src)
{
    if (!cap) return 0;
    /* strnlen, so that a long source is not read past what is kept */
    return str_copy_n(dst, cap, src, src ? strnlen(src, cap - 1) : 0);
}

size_t str_uint(char *dst, size_t cap, unsigned long long v)
{
    char d[24];
    size_t i = sizeof d;
    do d[--i] = (char)('0' + v % 10); while ((v /= 10) && i);
    return str_copy_n(dst, cap, d + i, sizeof d - i);
}
