/* http/range: the one form of the Range request header gpupool serves, a
 * single byte range ("bytes=A-B", "bytes=A-", "bytes=-N"), and the
 * Content-Range answer that goes with it.  Pure. */
#ifndef GPUPOOL_HTTP_RANGE_H
#define GPUPOOL_HTTP_RANGE_H

#include <stddef.h>
#include <stdint.h>

typedef enum http_range_rc {
    HTTP_RANGE_NONE,   /* no header: the whole body, 200 */
    HTTP_RANGE_OK,     /* *first..*last (inclusive) of size, 206 */
    HTTP_RANGE_BAD     /* malformed, several ranges, or outside the body: 416 */
} http_range_rc;

/* header may be NULL.  A last past the end is cut to the end (RFC 9110). */
http_range_rc http_range_parse(const char *header, uint64_t size, uint64_t *first, uint64_t *last);
/* "bytes A-B/SIZE" (or "bytes * /SIZE" without the space for a 416 when
 * first > last). */
void http_content_range(uint64_t first, uint64_t last, uint64_t size, char *out, size_t outlen);
/* The start and total of a Content-Range answer ("bytes A-B/T", "bytes * /T"
 * without the space: *first = UINT64_MAX); T "*" (unknown) gives total 0.
 * 0, or -1 when it is not one. */
int http_content_range_parse(const char *value, uint64_t *first, uint64_t *total);

#endif
