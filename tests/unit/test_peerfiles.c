/* Unit tests of the pure parts of peer file sharing: the token bucket
 * (util/ratelimit), Range and Content-Range parsing (http/range), the
 * file token check with an injected clock (worker/peerauth), and a file's
 * hashing stopped half-way (worker/filehash). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include <stdlib.h>
#include <unistd.h>

#include "http/range.h"
#include "util/ratelimit.h"
#include "worker/filehash.h"
#include "worker/peerauth.h"

#define SHA "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

static void bucket_allows_a_burst_then_the_rate(void **state)
{
    (void)state;
    rate_bucket b;
    rate_init(&b, 1000000, 100000, 0); /* 1 MB/s, 100 kB burst */
    assert_int_equal(rate_take(&b, 100000, 0), 0);
    /* 50 kB more at once is 50 ms ahead of the rate. */
    int64_t wait = rate_take(&b, 50000, 0);
    assert_true(wait >= 50000 && wait <= 50001);
    /* After that wait, the debt is paid: the next byte waits 1 us or so. */
    assert_true(rate_take(&b, 1, 50000) <= 2);
    /* A long pause refills only up to the burst. */
    assert_int_equal(rate_take(&b, 100000, 10000000), 0);
    assert_true(rate_take(&b, 1000, 10000000) >= 1000);
}

static void bucket_keeps_the_average(void **state)
{
    (void)state;
    rate_bucket b;
    rate_init(&b, 2000000, 0, 0); /* 2 MB/s; burst defaults to a quarter second */
    assert_int_equal((int64_t)b.burst, 500000);
    int64_t now = 0;
    uint64_t sent = 0;
    /* 16 kB pieces, waiting as told: 10 MB take about 5 s less the burst. */
    while (sent < 10000000) {
        now += rate_take(&b, 16384, now);
        sent += 16384;
    }
    double secs = (double)now / 1e6;
    assert_true(secs > 4.6 && secs < 4.8);
}

static void no_rate_never_waits(void **state)
{
    (void)state;
    rate_bucket b;
    rate_init(&b, 0, 0, 0);
    assert_int_equal(rate_take(&b, 1u << 30, 0), 0);
}

static void ranges_parse(void **state)
{
    (void)state;
    uint64_t a = 0, z = 0;
    assert_int_equal(http_range_parse(NULL, 100, &a, &z), HTTP_RANGE_NONE);
    assert_int_equal(http_range_parse("bytes=0-9", 100, &a, &z), HTTP_RANGE_OK);
    assert_true(a == 0 && z == 9);
    assert_int_equal(http_range_parse("bytes=50-", 100, &a, &z), HTTP_RANGE_OK);
    assert_true(a == 50 && z == 99);
    assert_int_equal(http_range_parse("bytes=90-1000", 100, &a, &z), HTTP_RANGE_OK); /* cut to the end */
    assert_true(a == 90 && z == 99);
    assert_int_equal(http_range_parse("bytes=-10", 100, &a, &z), HTTP_RANGE_OK);
    assert_true(a == 90 && z == 99);
    assert_int_equal(http_range_parse("bytes=-1000", 100, &a, &z), HTTP_RANGE_OK);
    assert_true(a == 0 && z == 99);
    assert_int_equal(http_range_parse(" Bytes = 5-5", 100, &a, &z), HTTP_RANGE_OK);
    assert_true(a == 5 && z == 5);
    assert_int_equal(http_range_parse("bytes=99-", 100, &a, &z), HTTP_RANGE_OK);
}

static void bad_ranges_are_refused(void **state)
{
    (void)state;
    uint64_t a, z;
    const char *bad[] = {"bytes=100-", "bytes=200-300", "bytes=9-5", "bytes=0-1,5-6", "items=0-1", "bytes=",
                         "bytes=-", "bytes=-0", "bytes=a-b", "bytes=1-2x", "bytes 0-1", "bytes=+1-2",
                         "bytes=99999999999999999999-", "bytes=--1", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (http_range_parse(bad[i], 100, &a, &z) != HTTP_RANGE_BAD) fail_msg("'%s' was accepted", bad[i]);
    /* Nothing is in an empty file. */
    assert_int_equal(http_range_parse("bytes=0-", 0, &a, &z), HTTP_RANGE_BAD);
    assert_int_equal(http_range_parse("bytes=-5", 0, &a, &z), HTTP_RANGE_BAD);
}

static void content_ranges(void **state)
{
    (void)state;
    char s[64];
    http_content_range(10, 19, 100, s, sizeof s);
    assert_string_equal(s, "bytes 10-19/100");
    http_content_range(1, 0, 100, s, sizeof s);
    assert_string_equal(s, "bytes */100");
    uint64_t first, total;
    assert_int_equal(http_content_range_parse("bytes 10-19/100", &first, &total), 0);
    assert_true(first == 10 && total == 100);
    assert_int_equal(http_content_range_parse(" bytes */100", &first, &total), 0);
    assert_true(first == UINT64_MAX && total == 100);
    assert_int_equal(http_content_range_parse("bytes 0-9/*", &first, &total), 0);
    assert_true(first == 0 && total == 0);
    assert_int_equal(http_content_range_parse("bytes 9-0/100", &first, &total), -1);
    assert_int_equal(http_content_range_parse("bytes 0-9", &first, &total), -1);
    assert_int_equal(http_content_range_parse(NULL, &first, &total), -1);
}

static void file_tokens_check(void **state)
{
    (void)state;
    char tok[PEERAUTH_TOKEN_MAX], why[200];
    int64_t now = 1700000000;
    peerauth_make("pool-secret", SHA, now, tok);
    assert_non_null(strstr(tok, "1700000000."));
    assert_int_equal(peerauth_check("pool-secret", SHA, tok, now, 300, why, sizeof why), 0);
    /* The holder's clock may be a little ahead or behind. */
    assert_int_equal(peerauth_check("pool-secret", SHA, tok, now + 300, 300, why, sizeof why), 0);
    assert_int_equal(peerauth_check("pool-secret", SHA, tok, now - 300, 300, why, sizeof why), 0);
    assert_int_equal(peerauth_check("pool-secret", SHA, tok, now + 301, 300, why, sizeof why), -1);
    assert_non_null(strstr(why, "stale"));
    assert_int_equal(peerauth_check("pool-secret", SHA, tok, now - 301, 300, why, sizeof why), -1);
    /* Another pool's secret, another file, a changed time. */
    assert_int_equal(peerauth_check("other-secret", SHA, tok, now, 300, why, sizeof why), -1);
    assert_non_null(strstr(why, "not signed"));
    char other[65];
    snprintf(other, sizeof other, "%s", SHA);
    other[0] = 'c';
    assert_int_equal(peerauth_check("pool-secret", other, tok, now, 300, why, sizeof why), -1);
    char moved[PEERAUTH_TOKEN_MAX];
    snprintf(moved, sizeof moved, "1700000001%s", strchr(tok, '.'));
    assert_int_equal(peerauth_check("pool-secret", SHA, moved, now, 300, why, sizeof why), -1);
    const char *junk[] = {"", "abc", ".deadbeef", "12x.0000000000000000000000000000000000000000000000000000000000000000",
                          "1700000000.short", "9999999999999.0000000000000000000000000000000000000000000000000000000000000000"};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++)
        assert_int_equal(peerauth_check("pool-secret", SHA, junk[i], now, 300, why, sizeof why), -1);
    assert_int_equal(peerauth_check("pool-secret", SHA, NULL, now, 300, why, sizeof why), -1);
    assert_non_null(strstr(why, "no credentials"));
}

static int calls;
static int cancel_on_second(void *ctx)
{
    (void)ctx;
    return ++calls >= 2;
}

/* A stop during a large file's first hashing ends it, and nothing is kept. */
static void hashing_can_be_cancelled(void **state)
{
    (void)state;
    char dir[] = "/tmp/gpupool-pf-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char file[256], cache[256], out[65], err[200];
    snprintf(file, sizeof file, "%s/model.gguf", dir);
    snprintf(cache, sizeof cache, "%s/hashes.json", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), 3 << 20), 0); /* three blocks */
    fclose(f);
    calls = 0;
    assert_int_equal(filehash_get_cancellable(cache, file, out, NULL, cancel_on_second, NULL, err, sizeof err), -1);
    assert_string_equal(err, "cancelled");
    assert_int_equal(access(cache, F_OK), -1);
    calls = -100;
    assert_int_equal(filehash_get_cancellable(cache, file, out, NULL, cancel_on_second, NULL, err, sizeof err), 0);
    char plain[65];
    assert_int_equal(filehash_get(NULL, file, plain, NULL, err, sizeof err), 0);
    assert_string_equal(out, plain);
    unlink(file);
    unlink(cache);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bucket_allows_a_burst_then_the_rate),
        cmocka_unit_test(bucket_keeps_the_average),
        cmocka_unit_test(no_rate_never_waits),
        cmocka_unit_test(ranges_parse),
        cmocka_unit_test(bad_ranges_are_refused),
        cmocka_unit_test(content_ranges),
        cmocka_unit_test(file_tokens_check),
        cmocka_unit_test(hashing_can_be_cancelled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
