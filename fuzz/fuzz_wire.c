/* fuzz_wire: libFuzzer target for http/wire, the reader of every upstream
 * answer on the proxy's hot path.  Any bytes must be read without a crash or
 * sanitizer report, and reading them whole or in pieces (split where the
 * first byte says) must end the same way: same result, status, body and
 * header lines.  Built and run by fuzz/run_wire.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int read_all(http_wire *w, const char *p, size_t n, size_t step)
{
    int r = WIRE_MORE;
    for (size_t i = 0; i < n && r == WIRE_MORE; i += step) r = wire_feed(w, p + i, i + step <= n ? step : n - i);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t step = (size_t)data[0] % 17 + 1;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    http_wire a, b;
    wire_init(&a);
    wire_init(&b);
    int ra = read_all(&a, p, n, n ? n : 1), rb = read_all(&b, p, n, step);
    if (ra != rb || a.head_done != b.head_done) abort();
    if (ra == WIRE_DONE || ra == WIRE_MORE) {
        if (a.status != b.status || a.body.len != b.body.len || a.head.len != b.head.len) abort();
        if (a.body.len && memcmp(a.body.data, b.body.data, a.body.len)) abort();
        if (a.head.len && memcmp(a.head.data, b.head.data, a.head.len)) abort();
        if (wire_eof(&a) != wire_eof(&b)) abort();
    }
    wire_free(&a);
    wire_free(&b);
    return 0;
}
