/* Unit tests: policy/cache, the semantic cache's store (hits, misses,
 * threshold edges, partitions and tiers, TTL, the byte bound and LRU order,
 * replacement, invalidation, persistence), and the whole path from a chat
 * body through policy/cache_key and policy/embed, where different earlier
 * turns must never hit.  Time is injected; nothing sleeps. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/cache.h"
#include "policy/cache_key.h"
#include "policy/cache_metrics.h"
#include "policy/embed.h"

#define D 384
#define WALL0 1700000000000LL /* an arbitrary wall clock at open */

/* (c, sqrt(1 - c^2), 0, ...): its cosine with e(0) is c. */
static void at_cos(float *v, double c)
{
    memset(v, 0, D * sizeof *v);
    v[0] = (float)c;
    v[1] = (float)sqrt(1 - c * c);
}

/* A unit vector along axis i. */
static void axis(float *v, int i)
{
    memset(v, 0, D * sizeof *v);
    v[i] = 1;
}

static cache_key mkkey(const char *model, const char *part, cache_tier tier, int ctx)
{
    cache_key k = {model, part, tier, {0}};
    k.context[0] = (unsigned char)ctx;
    return k;
}

static semcache *open_mem(double threshold, size_t max_bytes, int64_t ttl)
{
    cache_config cfg;
    cache_config_init(&cfg);
    cfg.threshold = threshold;
    cfg.max_bytes = max_bytes;
    cfg.ttl_ms = ttl;
    char err[256];
    semcache *c = semcache_open(NULL, &cfg, 0, WALL0, err, sizeof err);
    assert_non_null(c);
    return c;
}

/* 1 and the answer when the lookup hits. */
static int look(semcache *c, const cache_key *k, const float *v, int64_t now, char *answer, size_t n)
{
    cache_hit h;
    int rc = semcache_lookup(c, k, v, D, now, &h);
    assert_true(rc == 0 || rc == 1);
    if (rc == 1 && answer) snprintf(answer, n, "%s", h.answer);
    cache_hit_free(&h);
    return rc;
}

static void put(semcache *c, const cache_key *k, const float *v, const char *answer, int64_t now)
{
    assert_int_equal(semcache_insert(c, k, v, D, answer, strlen(answer), now), 0);
}

static void hit_and_miss(void **state)
{
    (void)state;
    semcache *c = open_mem(0.9, 1 << 20, 0);
    cache_key k = mkkey("m", "key1", CACHE_TIER_EXTERNAL, 1);
    float v[D], w[D];
    axis(v, 0);
    axis(w, 1);
    put(c, &k, v, "{\"answer\":1}", 10);
    cache_hit h;
    assert_int_equal(semcache_lookup(c, &k, v, D, 20, &h), 1);
    assert_string_equal(h.answer, "{\"answer\":1}");
    assert_int_equal(h.len, strlen("{\"answer\":1}"));
    assert_true(fabs(h.similarity - 1.0) < 1e-6);
    assert_int_equal(h.age_ms, 10);
    cache_hit_free(&h);
    assert_int_equal(look(c, &k, w, 20, NULL, 0), 0); /* orthogonal */
    /* A vector of any length is normalised: 5 * v is v. */
    for (int i = 0; i < D; i++) w[i] = 5 * v[i];
    assert_int_equal(look(c, &k, w, 20, NULL, 0), 1);
    /* A zero vector never hits and is never stored. */
    memset(w, 0, sizeof w);
    assert_int_equal(look(c, &k, w, 20, NULL, 0), 0);
    assert_int_equal(semcache_insert(c, &k, w, D, "x", 1, 20), 1);
    cache_stats st;
    semcache_stats(c, &st);
    assert_int_equal(st.lookups, 4);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.inserts, 1);
    assert_int_equal(st.entries, 1);
    assert_true(st.bytes > D * sizeof(float) && st.bytes < 4 * D * sizeof(float));
    semcache_count_skip(c);
    semcache_stats(c, &st);
    assert_int_equal(st.skipped, 1);
    semcache_close(c);
}

static void threshold_edges(void **state)
{
    (void)state;
    semcache *c = open_mem(0.9, 1 << 20, 0);
    cache_key k = mkkey("m", "", CACHE_TIER_EXTERNAL, 1);
    float v[D], q[D];
    axis(v, 0);
    put(c, &k, v, "A", 0);
    at_cos(q, 0.9 + 1e-4);
    assert_int_equal(look(c, &k, q, 1, NULL, 0), 1);
    at_cos(q, 0.9 - 1e-4);
    assert_int_equal(look(c, &k, q, 1, NULL, 0), 0);
    /* The most similar of several wins. */
    float b[D];
    at_cos(b, 0.99);
    put(c, &k, b, "B", 0);
    char got[16];
    at_cos(q, 0.995);
    assert_int_equal(look(c, &k, q, 1, got, sizeof got), 1);
    assert_string_equal(got, "B");
    at_cos(q, 0.9999);
    assert_int_equal(look(c, &k, q, 1, got, sizeof got), 1);
    assert_string_equal(got, "A");
    semcache_close(c);
}

static void partitions(void **state)
{
    (void)state;
    semcache *c = open_mem(0.9, 1 << 20, 0);
    float v[D];
    axis(v, 3);
    cache_key k = mkkey("m1", "key1", CACHE_TIER_EXTERNAL, 1);
    put(c, &k, v, "A", 0);
    cache_key other;
    other = mkkey("m2", "key1", CACHE_TIER_EXTERNAL, 1); /* model */
    assert_int_equal(look(c, &other, v, 1, NULL, 0), 0);
    other = mkkey("m1", "key2", CACHE_TIER_EXTERNAL, 1); /* API key / tenant */
    assert_int_equal(look(c, &other, v, 1, NULL, 0), 0);
    other = mkkey("m1", "", CACHE_TIER_EXTERNAL, 1);
    assert_int_equal(look(c, &other, v, 1, NULL, 0), 0);
    other = mkkey("m1", "key1", CACHE_TIER_EXTERNAL, 2); /* context */
    assert_int_equal(look(c, &other, v, 1, NULL, 0), 0);
    cache_hit h;
    assert_int_equal(semcache_lookup(c, &k, v, D - 1, 1, &h), 0); /* another dimension */
    assert_int_equal(look(c, &k, v, 1, NULL, 0), 1);
    /* Tiers: a private entry is seen only by trusted lookups; an external
     * entry by both; an unknown tier sees nothing. */
    float p[D];
    axis(p, 7);
    cache_key priv = mkkey("m1", "key1", CACHE_TIER_TRUSTED, 1);
    put(c, &priv, p, "P", 0);
    assert_int_equal(look(c, &k, p, 1, NULL, 0), 0);
    char got[8];
    assert_int_equal(look(c, &priv, p, 1, got, sizeof got), 1);
    assert_string_equal(got, "P");
    assert_int_equal(look(c, &priv, v, 1, got, sizeof got), 1);
    assert_string_equal(got, "A");
    cache_key bad = mkkey("m1", "key1", (cache_tier)7, 1);
    assert_int_equal(look(c, &bad, v, 1, NULL, 0), 0);
    assert_int_equal(semcache_insert(c, &bad, v, D, "x", 1, 1), 1);
    cache_key neg = mkkey("m1", "key1", (cache_tier)-1, 1);
    assert_int_equal(look(c, &neg, v, 1, NULL, 0), 0);
    semcache_close(c);

    assert_true(cache_tier_visible(CACHE_TIER_EXTERNAL, CACHE_TIER_EXTERNAL));
    assert_true(cache_tier_visible(CACHE_TIER_EXTERNAL, CACHE_TIER_TRUSTED));
    assert_true(cache_tier_visible(CACHE_TIER_TRUSTED, CACHE_TIER_TRUSTED));
    assert_false(cache_tier_visible(CACHE_TIER_TRUSTED, CACHE_TIER_EXTERNAL));
    assert_false(cache_tier_visible((cache_tier)-1, CACHE_TIER_TRUSTED));
    assert_false(cache_tier_visible(CACHE_TIER_EXTERNAL, (cache_tier)2));
}

static void ttl(void **state)
{
    (void)state;
    semcache *c = open_mem(0.9, 1 << 20, 1000);
    cache_key k = mkkey("m", "", CACHE_TIER_EXTERNAL, 1);
    float v[D], w[D];
    axis(v, 0);
    axis(w, 1);
    put(c, &k, v, "A", 0);
    put(c, &k, w, "B", 500);
    assert_int_equal(look(c, &k, v, 999, NULL, 0), 1); /* a hit does not extend the TTL */
    assert_int_equal(look(c, &k, v, 1000, NULL, 0), 0);
    cache_stats st;
    semcache_stats(c, &st);
    assert_int_equal(st.expired, 1); /* the lookup that saw it removed it */
    assert_int_equal(st.entries, 1);
    assert_int_equal(semcache_expire(c, 1499), 0);
    assert_int_equal(semcache_expire(c, 1500), 1);
    semcache_stats(c, &st);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.bytes, 0);
    /* Re-inserting restarts the clock (TTL from insertion). */
    put(c, &k, v, "A1", 2000);
    put(c, &k, v, "A2", 2800);
    assert_int_equal(look(c, &k, v, 3500, NULL, 0), 1);
    semcache_close(c);
}

/* Bytes one entry of a one-character answer and the bucket take. */
static void sizes(size_t *entry, size_t *bucket)
{
    semcache *c = open_mem(0.9, 1 << 20, 0);
    cache_key k = mkkey("m", "p", CACHE_TIER_EXTERNAL, 1);
    float v[D];
    cache_stats one, two;
    axis(v, 0);
    put(c, &k, v, "A", 0);
    semcache_stats(c, &one);
    axis(v, 1);
    put(c, &k, v, "B", 0);
    semcache_stats(c, &two);
    *entry = two.bytes - one.bytes;
    *bucket = one.bytes - *entry;
    semcache_close(c);
}

static void byte_bound_lru(void **state)
{
    (void)state;
    size_t e, b;
    sizes(&e, &b);
    assert_true(e >= D * sizeof(float) && b > 0);
    semcache *c = open_mem(0.9, 3 * e + b, 0);
    cache_key k = mkkey("m", "p", CACHE_TIER_EXTERNAL, 1);
    float v[4][D];
    for (int i = 0; i < 4; i++) axis(v[i], i);
    put(c, &k, v[0], "A", 1);
    put(c, &k, v[1], "B", 2);
    put(c, &k, v[2], "C", 3);
    assert_int_equal(look(c, &k, v[0], 4, NULL, 0), 1); /* A is now the most recent */
    put(c, &k, v[3], "D", 5);                            /* evicts B, the least recent */
    cache_stats st;
    semcache_stats(c, &st);
    assert_int_equal(st.entries, 3);
    assert_int_equal(st.evicted, 1);
    assert_true(st.bytes <= st.max_bytes);
    assert_int_equal(st.bytes, 3 * e + b);
    assert_int_equal(look(c, &k, v[1], 6, NULL, 0), 0);
    assert_int_equal(look(c, &k, v[0], 6, NULL, 0), 1);
    assert_int_equal(look(c, &k, v[2], 6, NULL, 0), 1);
    assert_int_equal(look(c, &k, v[3], 6, NULL, 0), 1);
    semcache_close(c);

    /* An entry larger than the whole bound is refused, nothing evicted. */
    c = open_mem(0.9, 2 * e + b, 0);
    put(c, &k, v[0], "A", 1);
    char *huge = malloc(3 * e);
    memset(huge, 'y', 3 * e);
    assert_int_equal(semcache_insert(c, &k, v[1], D, huge, 3 * e, 2), 1);
    free(huge);
    semcache_stats(c, &st);
    assert_int_equal(st.entries, 1);
    /* Other partitions share the bound: a new bucket's overhead counts too. */
    cache_key k2 = mkkey("m", "q", CACHE_TIER_EXTERNAL, 1);
    put(c, &k2, v[1], "B", 3);
    put(c, &k2, v[2], "C", 4);
    semcache_stats(c, &st);
    assert_true(st.bytes <= st.max_bytes);
    assert_int_equal(look(c, &k, v[0], 5, NULL, 0), 0); /* A went first */
    assert_int_equal(look(c, &k2, v[2], 5, NULL, 0), 1);
    semcache_close(c);
}

static void replace_duplicate(void **state)
{
    (void)state;
    semcache *c = open_mem(0.9, 1 << 20, 0);
    cache_key k = mkkey("m", "", CACHE_TIER_EXTERNAL, 1);
    float v[D];
    axis(v, 0);
    put(c, &k, v, "old", 0);
    put(c, &k, v, "new", 1);
    cache_stats st;
    semcache_stats(c, &st);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.replaced, 1);
    char got[8];
    assert_int_equal(look(c, &k, v, 2, got, sizeof got), 1);
    assert_string_equal(got, "new");
    semcache_close(c);
}

static void invalidate(void **state)
{
    (void)state;
    semcache *c = open_mem(0.9, 1 << 20, 0);
    float v[D];
    axis(v, 0);
    const char *models[] = {"m1", "m2"}, *parts[] = {"a", "b"};
    for (int m = 0; m < 2; m++)
        for (int p = 0; p < 2; p++)
            for (int t = 0; t < 2; t++) {
                cache_key k = mkkey(models[m], parts[p], (cache_tier)t, 1);
                put(c, &k, v, "x", 0);
            }
    cache_scope s = {"m1", NULL, -1};
    assert_int_equal(semcache_invalidate(c, &s), 4);
    s = (cache_scope){NULL, "a", CACHE_TIER_TRUSTED};
    assert_int_equal(semcache_invalidate(c, &s), 1); /* m2/a/trusted */
    cache_key k = mkkey("m2", "a", CACHE_TIER_EXTERNAL, 1);
    assert_int_equal(look(c, &k, v, 1, NULL, 0), 1);
    k = mkkey("m1", "a", CACHE_TIER_EXTERNAL, 1);
    assert_int_equal(look(c, &k, v, 1, NULL, 0), 0);
    s = (cache_scope){NULL, NULL, -1};
    assert_int_equal(semcache_invalidate(c, &s), 3);
    cache_stats st;
    semcache_stats(c, &st);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.invalidated, 8);
    semcache_close(c);
}

static char *tmp_db(char dir[64])
{
    snprintf(dir, 64, "/tmp/gpupool-cache-test-XXXXXX");
    assert_non_null(mkdtemp(dir));
    static char path[96];
    snprintf(path, sizeof path, "%s/cache.db", dir);
    return path;
}

static void rm_db(const char *dir, const char *path)
{
    char p[128];
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
    rmdir(dir);
}

static semcache *open_db(const char *path, double thr, size_t max, int64_t ttl, int64_t now, int64_t wall,
                         const char *embedder)
{
    cache_config cfg;
    cache_config_init(&cfg);
    cfg.threshold = thr;
    cfg.max_bytes = max;
    cfg.ttl_ms = ttl;
    if (embedder) cfg.embedder = embedder;
    char err[256];
    semcache *c = semcache_open(path, &cfg, now, wall, err, sizeof err);
    if (!c) fprintf(stderr, "open: %s\n", err);
    assert_non_null(c);
    return c;
}

static void persistence(void **state)
{
    (void)state;
    char dir[64];
    const char *path = tmp_db(dir);
    size_t e, b;
    sizes(&e, &b);
    float v[3][D];
    for (int i = 0; i < 3; i++) axis(v[i], i);
    cache_key k = mkkey("m", "p", CACHE_TIER_EXTERNAL, 1), priv = mkkey("m", "p", CACHE_TIER_TRUSTED, 1);

    /* Monotonic 100 at wall WALL0; entries at mono 100..102. */
    semcache *c = open_db(path, 0.9, 1 << 20, 10000, 100, WALL0, NULL);
    put(c, &k, v[0], "A", 100);
    put(c, &k, v[1], "B", 101);
    put(c, &priv, v[2], "P", 102);
    assert_int_equal(look(c, &k, v[0], 103, NULL, 0), 1); /* A most recent, then P, then B */
    semcache_close(c);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);

    /* After a "reboot": the monotonic clock restarted at 5, 2 s of wall time passed. */
    c = open_db(path, 0.9, 1 << 20, 10000, 5, WALL0 + 2000, NULL);
    cache_stats st;
    semcache_stats(c, &st);
    assert_int_equal(st.entries, 3);
    char got[8];
    assert_int_equal(look(c, &k, v[1], 6, got, sizeof got), 1);
    assert_string_equal(got, "B");
    assert_int_equal(look(c, &k, v[2], 6, NULL, 0), 0); /* still private */
    assert_int_equal(look(c, &priv, v[2], 7, got, sizeof got), 1);
    assert_string_equal(got, "P");
    /* The TTL kept counting across the restart: A was inserted at wall WALL0,
     * 2000 ms before this open at mono 5, so it expires at mono 5 + 8000. */
    assert_int_equal(look(c, &k, v[0], 5 + 7999, NULL, 0), 1);
    assert_int_equal(look(c, &k, v[0], 5 + 8000, NULL, 0), 0);
    semcache_close(c);

    /* A expired above and left the file; B was used at mono 6, P at 7.  With
     * room for one entry the least recently used, B, goes at open. */
    c = open_db(path, 0.9, 1 << 20, 10000, 0, WALL0 + 2100, NULL);
    semcache_stats(c, &st);
    assert_int_equal(st.entries, 2);
    semcache_close(c);
    c = open_db(path, 0.9, e + b + 1, 10000, 0, WALL0 + 2200, NULL);
    semcache_stats(c, &st);
    assert_int_equal(st.entries, 1);
    assert_int_equal(look(c, &priv, v[2], 1, NULL, 0), 1); /* P was the most recent */
    semcache_close(c);

    /* Invalidation reaches the file. */
    c = open_db(path, 0.9, 1 << 20, 10000, 0, WALL0 + 2300, NULL);
    put(c, &k, v[0], "A", 1);
    cache_scope s = {NULL, NULL, CACHE_TIER_TRUSTED};
    assert_int_equal(semcache_invalidate(c, &s), 1);
    semcache_close(c);
    c = open_db(path, 0.9, 1 << 20, 10000, 0, WALL0 + 2400, NULL);
    semcache_stats(c, &st);
    assert_int_equal(st.entries, 1);
    assert_int_equal(look(c, &k, v[0], 1, NULL, 0), 1);
    semcache_close(c);

    /* Another embedder's vectors are not comparable: they are dropped. */
    c = open_db(path, 0.9, 1 << 20, 10000, 0, WALL0 + 2500, "model:bge-m3");
    semcache_stats(c, &st);
    assert_int_equal(st.entries, 0);
    semcache_close(c);
    c = open_db(path, 0.9, 1 << 20, 10000, 0, WALL0 + 2600, NULL);
    semcache_stats(c, &st);
    assert_int_equal(st.entries, 0);
    semcache_close(c);

    /* A file that is not a database is an error, not a crash. */
    FILE *f = fopen(path, "w");
    fputs("not a database, not at all, not even close to one", f);
    fclose(f);
    char err[256] = "";
    cache_config cfg;
    cache_config_init(&cfg);
    assert_null(semcache_open(path, &cfg, 0, WALL0, err, sizeof err));
    assert_true(strlen(err) > 0);
    rm_db(dir, path);
}

/* ---- the whole path: body -> key -> embedding -> store ---------------------- */

static json_t *chat(const char *who, const char *question)
{
    char about[64];
    snprintf(about, sizeof about, "Tell me about %s.", who);
    return json_pack("{s:s,s:f,s:[{s:s,s:s},{s:s,s:s},{s:s,s:s},{s:s,s:s}]}", "model", "qwen2.5-7b",
                     "temperature", 0.0, "messages", "role", "system", "content", "You are helpful.", "role",
                     "user", "content", about, "role", "assistant", "content", "Here is what I know.", "role",
                     "user", "content", question);
}

/* 1 on a hit for body; stores answer on a miss when store is set. */
static int through(semcache *c, json_t *body, const char *store, cache_tier tier)
{
    cache_config cfg;
    cache_config_init(&cfg);
    assert_null(cache_skip_reason(body, cfg.max_temperature, 0));
    cache_key k;
    char *text;
    size_t n;
    assert_int_equal(cache_key_build(body, cfg.turns, "key-1", tier, &k, &text, &n), 0);
    float v[EMBED_DIM];
    assert_int_equal(embed_text(text, n, v), 0);
    free(text);
    cache_hit h;
    int rc = semcache_lookup(c, &k, v, EMBED_DIM, 1, &h);
    cache_hit_free(&h);
    if (!rc && store) assert_int_equal(semcache_insert(c, &k, v, EMBED_DIM, store, strlen(store), 1), 0);
    return rc;
}

static void no_cross_conversation(void **state)
{
    (void)state;
    semcache *c = open_mem(CACHE_DEFAULT_THRESHOLD, 1 << 20, 0);
    json_t *obama = chat("Barack Obama", "how old is he?");
    json_t *biden = chat("Joe Biden", "how old is he?");
    json_t *obama2 = chat("Barack Obama", "How old is he");
    json_t *alone = json_pack("{s:s,s:f,s:[{s:s,s:s},{s:s,s:s}]}", "model", "qwen2.5-7b", "temperature", 0.0,
                              "messages", "role", "system", "content", "You are helpful.", "role", "user",
                              "content", "how old is he?");
    assert_int_equal(through(c, obama, "{\"a\":\"Obama's age\"}", CACHE_TIER_EXTERNAL), 0);
    assert_int_equal(through(c, biden, NULL, CACHE_TIER_EXTERNAL), 0);
    assert_int_equal(through(c, alone, NULL, CACHE_TIER_EXTERNAL), 0);
    assert_int_equal(through(c, obama2, NULL, CACHE_TIER_EXTERNAL), 1);
    /* A private conversation's entry is not served to an external route. */
    json_t *secret = chat("Project Falcon", "what is its budget?");
    assert_int_equal(through(c, secret, "{\"a\":\"budget\"}", CACHE_TIER_TRUSTED), 0);
    assert_int_equal(through(c, secret, NULL, CACHE_TIER_EXTERNAL), 0);
    assert_int_equal(through(c, secret, NULL, CACHE_TIER_TRUSTED), 1);
    json_decref(obama);
    json_decref(biden);
    json_decref(obama2);
    json_decref(alone);
    json_decref(secret);
    semcache_close(c);
}

static void metrics_text(void **state)
{
    (void)state;
    semcache *c = open_mem(0.9, 1 << 20, 0);
    cache_key k = mkkey("m", "", CACHE_TIER_EXTERNAL, 1);
    float v[D], w[D];
    axis(v, 0);
    axis(w, 1);
    put(c, &k, v, "A", 0);
    assert_int_equal(look(c, &k, v, 1, NULL, 0), 1);
    assert_int_equal(look(c, &k, w, 1, NULL, 0), 0);
    semcache_count_skip(c);
    cache_stats st;
    semcache_stats(c, &st);
    buf out = {0};
    assert_int_equal(cache_metrics_render(&st, &out), 0);
    static const char *const want[] = {"gpupool_cache_lookups_total 2\n", "gpupool_cache_hits_total 1\n",
                                       "gpupool_cache_misses_total 1\n", "gpupool_cache_skipped_total 1\n",
                                       "gpupool_cache_hit_ratio 0.5\n", "gpupool_cache_entries 1\n",
                                       "gpupool_cache_removed_total{reason=\"lru\"} 0\n",
                                       "# TYPE gpupool_cache_bytes gauge\n", "gpupool_cache_max_bytes 1048576\n", NULL};
    for (int i = 0; want[i]; i++) {
        if (!strstr(out.data, want[i])) fprintf(stderr, "missing %s in:\n%s", want[i], out.data);
        assert_non_null(strstr(out.data, want[i]));
    }
    buf_free(&out);
    semcache_close(c);
}

typedef struct worker_arg {
    semcache *c;
    int id, bad;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    cache_key k = mkkey("m", "", CACHE_TIER_EXTERNAL, 1);
    float v[D];
    for (int i = 0; i < 300; i++) {
        axis(v, (a->id * 97 + i) % D);
        char ans[16];
        snprintf(ans, sizeof ans, "%d", (a->id * 97 + i) % D);
        if (i % 3 == 0) {
            if (semcache_insert(a->c, &k, v, D, ans, strlen(ans), i) < 0) a->bad++;
        } else {
            char got[16];
            int rc = look(a->c, &k, v, i, got, sizeof got);
            if (rc == 1 && strcmp(got, ans) != 0) a->bad++; /* a hit is always the right row */
        }
        if (i % 50 == 0) {
            cache_scope s = {"m", NULL, -1};
            if (a->id == 0) semcache_invalidate(a->c, &s);
        }
    }
    return NULL;
}

static void threads(void **state)
{
    (void)state;
    size_t e, b;
    sizes(&e, &b);
    semcache *c = open_mem(0.99, 100 * e + b, 0); /* small: evictions race with lookups */
    pthread_t th[4];
    worker_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (worker_arg){c, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(a[i].bad, 0);
    }
    cache_stats st;
    semcache_stats(c, &st);
    assert_true(st.bytes <= st.max_bytes);
    assert_int_equal(st.lookups, st.hits + st.misses);
    semcache_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hit_and_miss),
        cmocka_unit_test(threshold_edges),
        cmocka_unit_test(partitions),
        cmocka_unit_test(ttl),
        cmocka_unit_test(byte_bound_lru),
        cmocka_unit_test(replace_duplicate),
        cmocka_unit_test(invalidate),
        cmocka_unit_test(persistence),
        cmocka_unit_test(no_cross_conversation),
        cmocka_unit_test(metrics_text),
        cmocka_unit_test(threads),
    };
    return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}
