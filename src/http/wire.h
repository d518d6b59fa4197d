/* http/wire: reads one HTTP/1.1 response from the bytes of a connection, as
 * they arrive: the status, the header lines, and the body framed by
 * Content-Length, chunked transfer coding or the end of the connection.
 * Interim 1xx heads are skipped.  Pure (no sockets), for http/upstream. */
#ifndef GPUPOOL_HTTP_WIRE_H
#define GPUPOOL_HTTP_WIRE_H

#include <stddef.h>

#include "util/buf.h"

enum { WIRE_MORE = 0, WIRE_DONE = 1, WIRE_BAD_HEAD = -1, WIRE_BAD_BODY = -2, WIRE_NO_MEMORY = -3 };

typedef struct http_wire {
    buf in;          /* received, not yet consumed: after WIRE_DONE, bytes beyond the answer */
    int head_done;
    long status;
    int keep;        /* the connection may carry another exchange */
    buf head;        /* the header lines, "Name: value\r\n"... (the status line left out) */
    buf body;
    char content_type[128];
    /* framing */
    int mode;
    long long left;
    int chunk;
} http_wire;

void wire_init(http_wire *w);
void wire_free(http_wire *w);
/* Takes n more bytes: WIRE_DONE when the answer is complete, WIRE_MORE, or
 * one of the errors. */
int wire_feed(http_wire *w, const char *p, size_t n);
/* The peer closed the connection: whether that completes the answer (one
 * whose body runs to the end of the connection). */
int wire_eof(http_wire *w);

#endif
