/* fuzz_cache: libFuzzer target for the semantic cache's pure parts.  Any
 * bytes (invalid UTF-8 included) must normalise idempotently and embed to a
 * unit or zero vector; as SSE they must collect without a crash, and what
 * they collect into must replay and collect back to the same choices; input
 * that parses as JSON also goes through the skip rules, the key and the
 * replay.  Built and run by fuzz/run_cache.sh. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/cache_key.h"
#include "policy/cache_replay.h"
#include "policy/embed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static json_t *collect(const char *t, size_t n, size_t cut)
{
    cache_stream *s = cache_stream_new();
    if (!s) abort();
    if (cache_stream_feed(s, t, cut) == 0) cache_stream_feed(s, t + cut, n - cut);
    json_t *out = cache_stream_finish(s);
    cache_stream_free(s);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *t = (const char *)data;
    size_t n1, n2;
    char *once = embed_normalise(t, size, &n1);
    if (!once) abort();
    char *twice = embed_normalise(once, n1, &n2);
    if (!twice || n1 != n2 || memcmp(once, twice, n1) != 0) abort();
    free(once);
    free(twice);

    float v[EMBED_DIM];
    if (embed_text(t, size, v) != 0) abort();
    double s = 0;
    for (int i = 0; i < EMBED_DIM; i++) {
        if (!isfinite(v[i])) abort();
        s += (double)v[i] * v[i];
    }
    if (s != 0 && fabs(s - 1) > 1e-4) abort();

    json_t *c = collect(t, size, size / 2);
    if (c) {
        char *sse = cache_replay_sse(c, 1, NULL);
        if (!sse) abort();
        json_t *back = collect(sse, strlen(sse), strlen(sse) / 3);
        if (!back || json_array_size(json_object_get(back, "choices")) !=
                         json_array_size(json_object_get(c, "choices")))
            abort();
        json_decref(back);
        free(sse);
        json_decref(c);
    }

    json_t *j = json_loadb(t, size, 0, NULL);
    if (j) {
        if (!cache_skip_reason(j, 2.0, 0)) {
            cache_key k;
            char *text;
            size_t len;
            if (cache_key_build(j, 3, "p", CACHE_TIER_EXTERNAL, &k, &text, &len) == 0) free(text);
        }
        cache_answer_storable(j);
        free(cache_replay_sse(j, 1, NULL));
        json_decref(j);
    }
    return 0;
}
