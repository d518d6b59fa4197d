/* Unit tests: http/wire, the reader of upstream HTTP/1.1 answers on the
 * proxy's hot path (framing, interim heads, keep-alive, malformed input). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "http/wire.h"

/* Feeds text in pieces of `step` bytes; returns the last result. */
static int feed(http_wire *w, const char *text, size_t step)
{
    size_t n = strlen(text);
    int r = WIRE_MORE;
    for (size_t i = 0; i < n && r == WIRE_MORE; i += step) r = wire_feed(w, text + i, i + step <= n ? step : n - i);
    return r;
}

static void reads_a_length_framed_answer_in_any_pieces(void **state)
{
    (void)state;
    const char *a = "HTTP/1.1 200 OK\r\nContent-Type:  application/json \r\nX-Gpupool-Simulated: true\r\n"
                    "Content-Length: 7\r\n\r\n{\"a\":1}";
    for (size_t step = 1; step <= strlen(a); step += 5) {
        http_wire w;
        wire_init(&w);
        assert_int_equal(feed(&w, a, step), WIRE_DONE);
        assert_int_equal(w.status, 200);
        assert_true(w.keep);
        assert_string_equal(w.content_type, "application/json");
        assert_string_equal(w.body.data, "{\"a\":1}");
        assert_string_equal(w.head.data, "Content-Type:  application/json \r\nX-Gpupool-Simulated: true\r\nContent-Length: 7\r\n");
        assert_int_equal(w.in.len, 0);
        wire_free(&w);
    }
}

static void reads_chunks_extensions_and_trailers(void **state)
{
    (void)state;
    const char *a = "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "4;ext=1\r\nabcd\r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n";
    for (size_t step = 1; step <= 9; step += 4) {
        http_wire w;
        wire_init(&w);
        assert_int_equal(feed(&w, a, step), WIRE_DONE);
        assert_int_equal(w.status, 201);
        assert_string_equal(w.body.data, "abcd0123456789");
        assert_true(w.keep);
        wire_free(&w);
    }
}

static void an_answer_to_the_end_of_the_connection_is_not_kept(void **state)
{
    (void)state;
    http_wire w;
    wire_init(&w);
    assert_int_equal(feed(&w, "HTTP/1.1 200 OK\r\n\r\npart one, ", 64), WIRE_MORE);
    assert_int_equal(wire_feed(&w, "part two", 8), WIRE_MORE);
    assert_true(wire_eof(&w));
    assert_string_equal(w.body.data, "part one, part two");
    assert_false(w.keep);
    wire_free(&w);
    /* HTTP/1.0 and Connection: close end the connection after the answer */
    wire_init(&w);
    assert_int_equal(feed(&w, "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", 64), WIRE_DONE);
    assert_false(w.keep);
    wire_free(&w);
    wire_init(&w);
    assert_int_equal(feed(&w, "HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno", 64), WIRE_DONE);
    assert_false(w.keep);
    assert_int_equal(w.status, 503);
    wire_free(&w);
    /* a length-framed answer cut short is not complete */
    wire_init(&w);
    assert_int_equal(feed(&w, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 64), WIRE_MORE);
    assert_false(wire_eof(&w));
    wire_free(&w);
}

static void interim_heads_and_bodiless_statuses(void **state)
{
    (void)state;
    http_wire w;
    wire_init(&w);
    assert_int_equal(feed(&w, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n", 3), WIRE_DONE);
    assert_int_equal(w.status, 204);
    assert_string_equal(w.head.data, "X-A: b\r\n");
    assert_int_equal(w.body.len, 0);
    wire_free(&w);
    /* bytes after the answer stay in `in` (the connection cannot be reused) */
    wire_init(&w);
    assert_int_equal(feed(&w, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP", 64), WIRE_DONE);
    assert_int_equal(w.in.len, 4);
    wire_free(&w);
}

static void malformed_answers_are_refused(void **state)
{
    (void)state;
    static const struct { const char *text; int want; } bad[] = {
        {"HTTP/2 200 OK\r\n\r\n", WIRE_BAD_HEAD},
        {"HTTP/1.1 2x0 OK\r\n\r\n", WIRE_BAD_HEAD},
        {"SMTP ready\r\n\r\n", WIRE_BAD_HEAD},
        {"HTTP/1.1 099 Low\r\n\r\n", WIRE_BAD_HEAD},
        {"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", WIRE_BAD_HEAD},
        {"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", WIRE_BAD_HEAD},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", WIRE_BAD_BODY},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", WIRE_BAD_BODY},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY", WIRE_BAD_BODY},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        http_wire w;
        wire_init(&w);
        assert_int_equal(feed(&w, bad[i].text, 64), bad[i].want);
        wire_free(&w);
    }
    /* a head that never ends is bounded */
    http_wire w;
    wire_init(&w);
    char line[1024];
    memset(line, 'a', sizeof line - 1);
    line[sizeof line - 1] = 0;
    int r = wire_feed(&w, "HTTP/1.1 200 OK\r\n", 17);
    for (int i = 0; i < 100 && r == WIRE_MORE; i++) r = wire_feed(&w, line, strlen(line));
    assert_int_equal(r, WIRE_BAD_HEAD);
    wire_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_a_length_framed_answer_in_any_pieces),
        cmocka_unit_test(reads_chunks_extensions_and_trailers),
        cmocka_unit_test(an_answer_to_the_end_of_the_connection_is_not_kept),
        cmocka_unit_test(interim_heads_and_bodiless_statuses),
        cmocka_unit_test(malformed_answers_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
