/* policy/cache: the semantic cache's store.  Owns the entries (a unit vector
 * and a stored answer each), their partitions, the similarity search, the
 * bounds (bytes with LRU eviction, a TTL from insertion), invalidation, the
 * counters for metrics, and persistence in one SQLite file.
 *
 * What is cacheable and under which key is policy/cache_key.h; turning a
 * stored answer into SSE is policy/cache_replay.h; vectors come from
 * policy/embed.h or from an embedding model of the pool.  Thread-safe:
 * lookups share a read lock, and inserts, a hit's LRU update, expiry and
 * invalidation take the write lock.  Takes `now` (monotonic ms) as an argument
 * and never reads a clock.  See docs/cache.md. */
#ifndef GPUPOOL_CACHE_H
#define GPUPOOL_CACHE_H

#include <stddef.h>
#include <stdint.h>

/* The trust tier of an entry is that of the request that made it, and a
 * lookup states the tier of its own request.  CACHE_TIER_TRUSTED is a private
 * request (policy/classify), which only trusted nodes may serve;
 * CACHE_TIER_EXTERNAL is any other request, which may be routed to external
 * capacity.  An entry made from a private request never answers a lookup of
 * CACHE_TIER_EXTERNAL.  The lookup comes before placement, so a request that
 * is not private looks up as EXTERNAL even if it ends on a trusted node.  See
 * cache_tier_visible. */
typedef enum cache_tier {
    CACHE_TIER_EXTERNAL = 0,
    CACHE_TIER_TRUSTED = 1,
} cache_tier;

/* 1 when an entry of tier `entry` may answer a lookup of tier `lookup`: an
 * entry is visible to lookups of its own tier or a more trusted one. */
int cache_tier_visible(cache_tier entry, cache_tier lookup);

/* Where an entry lives and what a lookup may see.  Entries are found only
 * when model, partition, tier (see above) and context all match; the
 * similarity search runs only inside that set. */
typedef struct cache_key {
    const char *model;         /* the requested model */
    const char *partition;     /* API key id or tenant ("" = none); stored on disk, never a secret */
    cache_tier tier;
    unsigned char context[32]; /* cache_key_build: system prompt, earlier turns, parameters */
} cache_key;

typedef struct cache_config {
    const char *embedder;   /* identity of the vectors (EMBED_BUILTIN_ID, or "model:NAME"); entries
                               made by another embedder are dropped at open */
    double threshold;       /* cosine similarity a hit needs (>=); default CACHE_DEFAULT_THRESHOLD */
    size_t max_bytes;       /* bound on the entries' bytes; least recently used go first */
    int64_t ttl_ms;         /* an entry expires this long after it was inserted; 0 = never */
    int turns;              /* messages the key covers, the last one included; 0 = all (cache_key.h) */
    double max_temperature; /* requests sampling hotter than this are not cached (cache_key.h) */
} cache_config;

/* Chosen on bench/data/paraphrase.tsv with the built-in embedder: one step
 * above the lowest threshold with no false hit there, for margin
 * (docs/cache.md).  An embedding model needs its own. */
#define CACHE_DEFAULT_THRESHOLD 0.95

/* The defaults: built-in embedder, CACHE_DEFAULT_THRESHOLD, 64 MiB, 24 h,
 * 8 turns, temperature up to 0.3. */
void cache_config_init(cache_config *cfg);

typedef struct semcache semcache;

/* Opens the cache, loading db_path's entries (created with mode 0600 if
 * absent); db_path NULL keeps the cache in memory only.  now_ms is the
 * monotonic clock and wall_ms the wall clock at this moment: the file stores
 * wall times, so that TTLs and LRU order survive a restart or a reboot.
 * Entries of another embedder, expired ones and those over max_bytes are
 * dropped from the file.  NULL with one line in err on failure. */
semcache *semcache_open(const char *db_path, const cache_config *cfg, int64_t now_ms, int64_t wall_ms,
                        char *err, size_t errlen);
void semcache_close(semcache *c);

typedef struct cache_hit {
    char *answer;     /* malloc'd copy of the stored answer, NUL-terminated */
    size_t len;
    double similarity;
    int64_t age_ms;   /* since the entry was inserted */
} cache_hit;
void cache_hit_free(cache_hit *h);

/* The most similar entry visible to the key (same model, partition and
 * context; tier by cache_tier_visible) that has not expired, if its cosine
 * similarity to vec (dim floats, any length; it is normalised here) is at
 * least the threshold.  Returns 1 with *hit filled, 0 on a miss (a zero
 * vector always misses), -1 when memory ran out. */
int semcache_lookup(semcache *c, const cache_key *key, const float *vec, int dim, int64_t now_ms,
                    cache_hit *hit);

/* Stores answer (len bytes, normally a chat.completion's JSON) under the key
 * and vector.  An entry of the same key and exactly the same vector is
 * replaced.  Evicts least recently used entries until the bytes fit.
 * Returns 0 when stored, 1 when not (zero vector, dim outside 1..65536, or an
 * entry larger than max_bytes), -1 on a memory or database error (message in
 * semcache_errmsg; nothing is stored). */
int semcache_insert(semcache *c, const cache_key *key, const float *vec, int dim, const char *answer,
                    size_t len, int64_t now_ms);

/* Which entries invalidation removes: every given field must match; NULL
 * (or tier -1) matches anything, so a zeroed scope with tier -1 is "all". */
typedef struct cache_scope {
    const char *model;
    const char *partition;
    int tier; /* a cache_tier, or -1 */
} cache_scope;

/* Removes the matching entries from memory and from the file.  Returns how
 * many, or -1 when the file could not be updated (they are gone from memory
 * anyway; message in semcache_errmsg). */
long semcache_invalidate(semcache *c, const cache_scope *scope);

/* Removes entries whose TTL has passed (lookups never return them anyway;
 * this gives their bytes back).  Returns how many. */
long semcache_expire(semcache *c, int64_t now_ms);

/* Counts a request the cache was not asked about (cache_skip_reason). */
void semcache_count_skip(semcache *c);

typedef struct cache_stats {
    uint64_t lookups, hits, misses, skipped;
    uint64_t inserts, replaced, evicted, expired, invalidated;
    uint64_t entries;
    uint64_t bytes, max_bytes;
} cache_stats;
/* A snapshot of the counters (since open) and of the current size.  Hit rate
 * is hits / lookups. */
void semcache_stats(semcache *c, cache_stats *out);

/* The last database error, for logs. */
const char *semcache_errmsg(semcache *c);

#endif
