/* util/str: bounded copies into fixed-size fields.  What snprintf(dst, cap,
 * "%s", src) does, without printf's machinery, which on the proxy path cost
 * more than the copying itself. */
#ifndef GPUPOOL_STR_H
#define GPUPOOL_STR_H

#include <stddef.h>

/* Copies src (NULL counts as "") into dst, cut to cap - 1 bytes, always
 * terminated when cap > 0.  Returns the bytes copied. */
size_t str_copy(char *dst, size_t cap, const char *src);
/* The same for the first n bytes of src (which need no terminator). */
size_t str_copy_n(char *dst, size_t cap, const char *src, size_t n);

/* Writes v in decimal into dst (cut as str_copy cuts); returns its length. */
size_t str_uint(char *dst, size_t cap, unsigned long long v);

#endif
