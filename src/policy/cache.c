/* policy/cache: see cache.h.
 *
 * Layout.  Entries that can match each other (same embedder, dimension,
 * model, partition, tier and context) form a bucket, found by the SHA-256 of
 * those fields in a chained hash table.  A bucket keeps its vectors in one
 * contiguous, 64-byte aligned float array, rows padded with zeros to a
 * multiple of 16, so a lookup is a straight scan at memory bandwidth.
 * Removing an entry moves the bucket's last row into its place.  Entries are
 * also on two lists: by last use (eviction) and by insertion (expiry).
 *
 * Persistence (policy/cache_db) is write-through: every insert, removal and
 * hit's use time is written under the write lock, and the file is read only
 * at open. */
#include "policy/cache.h"
#include "util/err.h"
#include "policy/cache_db.h"
#include "policy/embed.h"
#include "policy/vecdot.h"

#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIM 65536

typedef struct bucket bucket;

typedef struct entry {
    int64_t id; /* the row's id in the file; a counter when in memory only */
    bucket *b;
    uint32_t idx; /* its row in b */
    struct entry *lru_prev, *lru_next; /* head: most recently used */
    struct entry *age_prev, *age_next; /* head: oldest insertion */
    int64_t created, used;             /* monotonic ms */
    size_t bytes;                      /* what it counts against max_bytes */
    size_t len;
    char answer[]; /* len bytes and a NUL */
} entry;

struct bucket {
    unsigned char key[32];
    char *model, *partition;
    int tier, dim, stride;
    uint32_t n, cap;
    float *vecs;     /* cap rows of stride floats */
    entry **ents;    /* row -> entry */
    uint64_t *vhash; /* row -> hash of its bytes, to spot an exact duplicate */
    size_t bytes;    /* its own overhead, counted in the cache's bytes */
    bucket *next;    /* hash chain */
};

struct semcache {
    pthread_rwlock_t lock;
    cache_config cfg;
    char *embedder;
    bucket **slots;
    size_t nslots, nbuckets;
    entry *lru_head, *lru_tail, *age_head, *age_tail;
    uint64_t bytes, entries;
    int64_t wall_offset; /* wall ms - monotonic ms, fixed at open */
    int64_t next_id;
    cache_db *db; /* NULL: in memory only */
    _Atomic uint64_t lookups, hits, misses, skipped;
    uint64_t inserts, replaced, evicted, expired, invalidated;
    char err[256];
};

enum why { GONE_EVICTED, GONE_REPLACED, GONE_EXPIRED, GONE_INVALIDATED };

/* ---- small helpers -------------------------------------------------------- */

int cache_tier_visible(cache_tier entry_tier, cache_tier lookup)
{
    return (int)entry_tier >= 0 && entry_tier <= lookup && lookup <= CACHE_TIER_TRUSTED;
}

void cache_config_init(cache_config *cfg)
{
    *cfg = (cache_config){
        .embedder = EMBED_BUILTIN_ID,
        .threshold = CACHE_DEFAULT_THRESHOLD,
        .max_bytes = (size_t)64 << 20,
        .ttl_ms = 24LL * 3600 * 1000,
        .turns = 8,
        .max_temperature = 0.3,
    };
}

void cache_hit_free(cache_hit *h)
{
    if (!h) return;
    free(h->answer);
    h->answer = NULL;
}


static void frame(EVP_MD_CTX *md, const void *p, size_t n)
{
    uint64_t len = n;
    EVP_DigestUpdate(md, &len, sizeof len);
    EVP_DigestUpdate(md, p, n);
}

/* The bucket an entry of this key, tier and dimension lives in. */
static int bucket_key(const semcache *c, const cache_key *k, int tier, int dim, unsigned char out[32])
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        return -1;
    }
    int32_t t = tier, d = dim;
    const char *m = k->model ? k->model : "", *p = k->partition ? k->partition : "";
    frame(md, c->embedder, strlen(c->embedder));
    frame(md, &d, sizeof d);
    frame(md, m, strlen(m));
    frame(md, p, strlen(p));
    frame(md, &t, sizeof t);
    frame(md, k->context, sizeof k->context);
    unsigned int n = 0;
    int ok = EVP_DigestFinal_ex(md, out, &n) == 1;
    EVP_MD_CTX_free(md);
    return ok ? 0 : -1;
}

static int stride_of(int dim) { return (dim + 15) & ~15; }

/* A unit-length copy of vec, zero-padded to the stride, into out (64-byte
 * aligned, stride floats).  0 when vec is all zeros (or not finite). */
static int unit_row(const float *vec, int dim, float *out)
{
    double s = 0;
    for (int i = 0; i < dim; i++) s += (double)vec[i] * vec[i];
    if (!(s > 0) || !isfinite(s)) return 0;
    float inv = (float)(1.0 / sqrt(s));
    int stride = stride_of(dim);
    for (int i = 0; i < dim; i++) out[i] = vec[i] * inv;
    for (int i = dim; i < stride; i++) out[i] = 0;
    return 1;
}

static uint64_t row_hash(const float *row, int stride)
{
    const unsigned char *p = (const unsigned char *)row;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < (size_t)stride * sizeof *row; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

static float *alloc_row(int stride)
{
    return aligned_alloc(64, (size_t)stride * sizeof(float));
}

/* ---- the scan ------------------------------------------------------------- */

#define SCAN_BLOCK 256

/* The best live entry of b at or above the threshold (into *best, *best_s);
 * *saw_expired when a candidate had expired. */
static void scan(const semcache *c, const bucket *b, const float *q, int64_t now, entry **best,
                 float *best_s, int *saw_expired)
{
    float s[SCAN_BLOCK];
    float thr = (float)c->cfg.threshold;
    for (uint32_t base = 0; base < b->n; base += SCAN_BLOCK) {
        uint32_t m = b->n - base < SCAN_BLOCK ? b->n - base : SCAN_BLOCK;
        vecdot_many(b->vecs + (size_t)base * (size_t)b->stride, b->stride, m, q, s);
        for (uint32_t i = 0; i < m; i++) {
            if (s[i] < thr || s[i] <= *best_s) continue;
            entry *e = b->ents[base + i];
            if (now - e->created >= c->cfg.ttl_ms) {
                *saw_expired = 1;
                continue;
            }
            *best = e;
            *best_s = s[i];
        }
    }
}

/* ---- buckets and lists (write lock held) ---------------------------------- */

static bucket *find_bucket(const semcache *c, const unsigned char key[32])
{
    uint64_t h;
    memcpy(&h, key, sizeof h);
    for (bucket *b = c->slots[h & (c->nslots - 1)]; b; b = b->next)
        if (memcmp(b->key, key, 32) == 0) return b;
    return NULL;
}

static void rehash(semcache *c)
{
    size_t n = c->nslots * 2;
    bucket **s = calloc(n, sizeof *s);
    if (!s) return; /* chains just get longer */
    for (size_t i = 0; i < c->nslots; i++)
        for (bucket *b = c->slots[i], *next; b; b = next) {
            next = b->next;
            uint64_t h;
            memcpy(&h, b->key, sizeof h);
            b->next = s[h & (n - 1)];
            s[h & (n - 1)] = b;
        }
    free(c->slots);
    c->slots = s;
    c->nslots = n;
}

static size_t bucket_overhead(const char *model, const char *partition)
{
    return sizeof(bucket) + strlen(model) + strlen(partition) + 2;
}

static bucket *new_bucket(semcache *c, const unsigned char key[32], const cache_key *k, int tier, int dim)
{
    bucket *b = calloc(1, sizeof *b);
    const char *m = k->model ? k->model : "", *p = k->partition ? k->partition : "";
    if (!b || !(b->model = strdup(m)) || !(b->partition = strdup(p))) {
        if (b) free(b->model);
        free(b);
        return NULL;
    }
    memcpy(b->key, key, 32);
    b->tier = tier;
    b->dim = dim;
    b->stride = stride_of(dim);
    b->bytes = bucket_overhead(m, p);
    uint64_t h;
    memcpy(&h, key, sizeof h);
    b->next = c->slots[h & (c->nslots - 1)];
    c->slots[h & (c->nslots - 1)] = b;
    c->bytes += b->bytes;
    if (++c->nbuckets > c->nslots * 2) rehash(c);
    return b;
}

static void free_bucket_mem(bucket *b)
{
    free(b->vecs);
    free(b->ents);
    free(b->vhash);
    free(b->model);
    free(b->partition);
    free(b);
}

static void drop_bucket(semcache *c, bucket *b)
{
    uint64_t h;
    memcpy(&h, b->key, sizeof h);
    bucket **pp = &c->slots[h & (c->nslots - 1)];
    while (*pp != b) pp = &(*pp)->next;
    *pp = b->next;
    c->bytes -= b->bytes;
    c->nbuckets--;
    free_bucket_mem(b);
}

/* Room for cap rows; rows [0, n) are kept.  -1 when memory ran out. */
static int bucket_resize(bucket *b, uint32_t cap)
{
    float *v = aligned_alloc(64, (size_t)cap * (size_t)b->stride * sizeof(float));
    entry **e = malloc((size_t)cap * sizeof *e);
    uint64_t *h = malloc((size_t)cap * sizeof *h);
    if (!v || !e || !h) {
        free(v);
        free(e);
        free(h);
        return -1;
    }
    if (b->n) {
        memcpy(v, b->vecs, (size_t)b->n * (size_t)b->stride * sizeof(float));
        memcpy(e, b->ents, (size_t)b->n * sizeof *e);
        memcpy(h, b->vhash, (size_t)b->n * sizeof *h);
    }
    free(b->vecs);
    free(b->ents);
    free(b->vhash);
    b->vecs = v;
    b->ents = e;
    b->vhash = h;
    b->cap = cap;
    return 0;
}

static void lru_unlink(semcache *c, entry *e)
{
    if (e->lru_prev) e->lru_prev->lru_next = e->lru_next;
    else c->lru_head = e->lru_next;
    if (e->lru_next) e->lru_next->lru_prev = e->lru_prev;
    else c->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void lru_push_head(semcache *c, entry *e)
{
    e->lru_prev = NULL;
    e->lru_next = c->lru_head;
    if (c->lru_head) c->lru_head->lru_prev = e;
    else c->lru_tail = e;
    c->lru_head = e;
}

static void age_unlink(semcache *c, entry *e)
{
    if (e->age_prev) e->age_prev->age_next = e->age_next;
    else c->age_head = e->age_next;
    if (e->age_next) e->age_next->age_prev = e->age_prev;
    else c->age_tail = e->age_prev;
}

static void age_push_tail(semcache *c, entry *e)
{
    e->age_next = NULL;
    e->age_prev = c->age_tail;
    if (c->age_tail) c->age_tail->age_next = e;
    else c->age_head = e;
    c->age_tail = e;
}

/* ---- the file (no-ops in memory) ------------------------------------------ */

static void tx_begin(semcache *c)
{
    if (c->db) cache_db_begin(c->db);
}

static int tx_end(semcache *c, int ok)
{
    return c->db ? cache_db_end(c->db, ok) : ok ? 0 : -1;
}

static int db_delete(semcache *c, int64_t id)
{
    return c->db ? cache_db_delete(c->db, id) : 0;
}

/* ---- entries (write lock held) -------------------------------------------- */

/* Removes e from memory and the file; the bucket goes when it empties.
 * Returns -1 when the file could not be updated. */
static int drop_entry(semcache *c, entry *e, enum why why)
{
    bucket *b = e->b;
    uint32_t i = e->idx, last = b->n - 1;
    if (i != last) {
        memcpy(b->vecs + (size_t)i * (size_t)b->stride, b->vecs + (size_t)last * (size_t)b->stride,
               (size_t)b->stride * sizeof(float));
        b->ents[i] = b->ents[last];
        b->ents[i]->idx = i;
        b->vhash[i] = b->vhash[last];
    }
    b->n--;
    lru_unlink(c, e);
    age_unlink(c, e);
    c->bytes -= e->bytes;
    c->entries--;
    if (why == GONE_EVICTED) c->evicted++;
    else if (why == GONE_REPLACED) c->replaced++;
    else if (why == GONE_EXPIRED) c->expired++;
    else c->invalidated++;
    int rc = db_delete(c, e->id);
    free(e);
    if (!b->n) drop_bucket(c, b);
    else if (b->cap > 64 && b->n <= b->cap / 4) bucket_resize(b, b->cap / 2); /* may fail: keeps the old */
    return rc;
}

static long expire_locked(semcache *c, int64_t now)
{
    long n = 0;
    if (c->age_head && now - c->age_head->created >= c->cfg.ttl_ms) tx_begin(c);
    while (c->age_head && now - c->age_head->created >= c->cfg.ttl_ms) {
        drop_entry(c, c->age_head, GONE_EXPIRED);
        n++;
    }
    if (n) tx_end(c, 1);
    return n;
}

static size_t entry_bytes(size_t len, int stride)
{
    return sizeof(entry) + len + 1 + (size_t)stride * sizeof(float) + sizeof(entry *) + sizeof(uint64_t);
}

/* Adds an entry whose row is already unit length and padded.  The caller has
 * made room.  NULL when memory ran out (nothing changed but maybe an empty
 * new bucket, which is removed). */
static entry *add_entry(semcache *c, const cache_key *k, int tier, int dim, const unsigned char bkey[32],
                        const float *row, uint64_t vh, const char *answer, size_t len, int64_t created,
                        int64_t used, int64_t id)
{
    bucket *b = find_bucket(c, bkey);
    int fresh = !b;
    if (!b && !(b = new_bucket(c, bkey, k, tier, dim))) return NULL;
    entry *e = malloc(sizeof *e + len + 1);
    if (!e || (b->n == b->cap && bucket_resize(b, b->cap < 16 ? 16 : b->cap + b->cap / 2) != 0)) {
        free(e);
        if (fresh) drop_bucket(c, b);
        return NULL;
    }
    memcpy(b->vecs + (size_t)b->n * (size_t)b->stride, row, (size_t)b->stride * sizeof(float));
    b->ents[b->n] = e;
    b->vhash[b->n] = vh;
    *e = (entry){.id = id, .b = b, .idx = b->n, .created = created, .used = used, .len = len};
    e->bytes = entry_bytes(len, b->stride);
    if (len) memcpy(e->answer, answer, len);
    e->answer[len] = '\0';
    b->n++;
    lru_push_head(c, e);
    age_push_tail(c, e);
    c->bytes += e->bytes;
    c->entries++;
    return e;
}

/* ---- the API -------------------------------------------------------------- */

int semcache_lookup(semcache *c, const cache_key *key, const float *vec, int dim, int64_t now_ms,
                    cache_hit *hit)
{
    memset(hit, 0, sizeof *hit);
    atomic_fetch_add_explicit(&c->lookups, 1, memory_order_relaxed);
    float *q = dim >= 1 && dim <= MAX_DIM ? alloc_row(stride_of(dim)) : NULL;
    if (!q || !unit_row(vec, dim, q)) {
        free(q);
        atomic_fetch_add_explicit(&c->misses, 1, memory_order_relaxed);
        return dim >= 1 && dim <= MAX_DIM && !q ? -1 : 0;
    }
    unsigned char keys[2][32];
    for (int t = 0; t <= CACHE_TIER_TRUSTED; t++)
        if (bucket_key(c, key, t, dim, keys[t]) != 0) {
            free(q);
            return -1;
        }
    entry *best = NULL;
    float best_s = -2;
    int saw_expired = 0, rc = 0, best_tier = 0;
    uint32_t best_idx = 0;
    int64_t best_id = 0;

    pthread_rwlock_rdlock(&c->lock);
    for (int t = 0; t <= CACHE_TIER_TRUSTED; t++) {
        if (!cache_tier_visible((cache_tier)t, key->tier)) continue;
        const bucket *b = find_bucket(c, keys[t]);
        entry *before = best;
        if (b) scan(c, b, q, now_ms, &best, &best_s, &saw_expired);
        if (best != before) best_tier = t;
    }
    if (best) {
        hit->answer = malloc(best->len + 1);
        if (hit->answer) {
            memcpy(hit->answer, best->answer, best->len + 1);
            hit->len = best->len;
            hit->similarity = best_s;
            hit->age_ms = now_ms - best->created;
            best_idx = best->idx;
            best_id = best->id;
            rc = 1;
        } else {
            rc = -1;
        }
    }
    pthread_rwlock_unlock(&c->lock);
    free(q);

    if (rc == 1 || saw_expired) {
        /* The entry may have gone between the locks: it is found again by
         * bucket, row and id before it is touched, never dereferenced blind. */
        pthread_rwlock_wrlock(&c->lock);
        bucket *b = rc == 1 ? find_bucket(c, keys[best_tier]) : NULL;
        if (b && !(best_idx < b->n && b->ents[best_idx] == best)) /* moved by a removal */
            for (best_idx = 0; best_idx < b->n && b->ents[best_idx] != best; best_idx++) {}
        if (b && best_idx < b->n && best->id == best_id) {
            best->used = now_ms;
            lru_unlink(c, best);
            lru_push_head(c, best);
            /* A failure costs only the LRU order after a restart. */
            if (c->db) cache_db_touch(c->db, best->id, now_ms + c->wall_offset);
        }
        if (saw_expired) expire_locked(c, now_ms);
        pthread_rwlock_unlock(&c->lock);
    }
    atomic_fetch_add_explicit(rc == 1 ? &c->hits : &c->misses, 1, memory_order_relaxed);
    return rc;
}

int semcache_insert(semcache *c, const cache_key *key, const float *vec, int dim, const char *answer,
                    size_t len, int64_t now_ms)
{
    if (dim < 1 || dim > MAX_DIM || key->tier < CACHE_TIER_EXTERNAL || key->tier > CACHE_TIER_TRUSTED)
        return 1;
    int stride = stride_of(dim);
    const char *m = key->model ? key->model : "", *p = key->partition ? key->partition : "";
    size_t need = entry_bytes(len, stride) + bucket_overhead(m, p);
    if (need > c->cfg.max_bytes) return 1;
    float *row = alloc_row(stride);
    if (!row) return -1;
    if (!unit_row(vec, dim, row)) {
        free(row);
        return 1;
    }
    uint64_t vh = row_hash(row, stride);
    unsigned char bkey[32];
    if (bucket_key(c, key, key->tier, dim, bkey) != 0) {
        free(row);
        return -1;
    }

    pthread_rwlock_wrlock(&c->lock);
    expire_locked(c, now_ms);
    tx_begin(c);
    bucket *b = find_bucket(c, bkey);
    for (uint32_t i = 0; b && i < b->n; i++)
        if (b->vhash[i] == vh &&
            memcmp(b->vecs + (size_t)i * (size_t)stride, row, (size_t)stride * sizeof(float)) == 0) {
            drop_entry(c, b->ents[i], GONE_REPLACED);
            break;
        }
    /* Least recently used first; the bucket's overhead counts only if it is
     * new, and eviction may empty it. */
    while (c->lru_tail && c->bytes + entry_bytes(len, stride) +
                                  (find_bucket(c, bkey) ? 0 : bucket_overhead(m, p)) > c->cfg.max_bytes)
        drop_entry(c, c->lru_tail, GONE_EVICTED);

    int rc = 0;
    int64_t id = ++c->next_id;
    if (c->db) {
        cache_db_row r = {.embedder = c->embedder, .dim = dim, .model = m, .partition = p,
                          .tier = key->tier, .context = key->context, .vec = row, .answer = answer,
                          .len = len, .created_ms = now_ms + c->wall_offset};
        rc = cache_db_insert(c->db, &r, &id);
    }
    entry *e = NULL;
    if (rc == 0 && !(e = add_entry(c, key, key->tier, dim, bkey, row, vh, answer, len, now_ms, now_ms, id))) {
        err_out(c->err, sizeof c->err, "cache: out of memory");
        rc = -1;
    }
    if (tx_end(c, rc == 0) != 0) {
        if (e) { /* not on disk: not in memory either */
            drop_entry(c, e, GONE_INVALIDATED);
            c->invalidated--;
        }
        rc = -1;
    }
    if (rc == 0) c->inserts++;
    pthread_rwlock_unlock(&c->lock);
    free(row);
    return rc;
}

static int scope_match(const bucket *b, const cache_scope *s)
{
    return (!s->model || strcmp(s->model, b->model) == 0) &&
           (!s->partition || strcmp(s->partition, b->partition) == 0) && (s->tier < 0 || s->tier == b->tier);
}

long semcache_invalidate(semcache *c, const cache_scope *scope)
{
    long n = 0;
    int failed = 0;
    pthread_rwlock_wrlock(&c->lock);
    tx_begin(c);
    for (size_t i = 0; i < c->nslots; i++) {
        bucket *b = c->slots[i];
        while (b) {
            bucket *next = b->next;
            if (scope_match(b, scope)) {
                uint32_t k = b->n;
                while (k-- > 0) { /* the last drop frees b */
                    failed |= drop_entry(c, b->ents[k], GONE_INVALIDATED) != 0;
                    n++;
                }
            }
            b = next;
        }
    }
    failed |= tx_end(c, !failed) != 0;
    pthread_rwlock_unlock(&c->lock);
    return failed ? -1 : n;
}

long semcache_expire(semcache *c, int64_t now_ms)
{
    pthread_rwlock_wrlock(&c->lock);
    long n = expire_locked(c, now_ms);
    pthread_rwlock_unlock(&c->lock);
    return n;
}

void semcache_count_skip(semcache *c)
{
    atomic_fetch_add_explicit(&c->skipped, 1, memory_order_relaxed);
}

void semcache_stats(semcache *c, cache_stats *out)
{
    pthread_rwlock_rdlock(&c->lock);
    *out = (cache_stats){
        .lookups = atomic_load(&c->lookups),
        .hits = atomic_load(&c->hits),
        .misses = atomic_load(&c->misses),
        .skipped = atomic_load(&c->skipped),
        .inserts = c->inserts,
        .replaced = c->replaced,
        .evicted = c->evicted,
        .expired = c->expired,
        .invalidated = c->invalidated,
        .entries = c->entries,
        .bytes = c->bytes,
        .max_bytes = c->cfg.max_bytes,
    };
    pthread_rwlock_unlock(&c->lock);
}

const char *semcache_errmsg(semcache *c)
{
    return c->db && cache_db_errmsg(c->db)[0] ? cache_db_errmsg(c->db) : c->err;
}

/* ---- open, load, close ------------------------------------------------------ */

static int by_used(const void *a, const void *b)
{
    const entry *x = *(entry *const *)a, *y = *(entry *const *)b;
    return x->used < y->used ? -1 : x->used > y->used ? 1 : (x->id > y->id) - (x->id < y->id);
}

typedef struct loading {
    semcache *c;
    int64_t now;
    float *row; /* room for the largest stride */
} loading;

/* One stored row back into memory; 1 (delete it) when it has expired or
 * does not make sense, -1 when memory ran out. */
static int load_row(const cache_db_row *r, void *arg)
{
    loading *l = arg;
    semcache *c = l->c;
    int64_t created = r->created_ms - c->wall_offset, used = r->used_ms - c->wall_offset;
    if (created > l->now) created = l->now; /* the wall clock went back */
    if (used > l->now) used = l->now;
    if (r->tier < CACHE_TIER_EXTERNAL || r->tier > CACHE_TIER_TRUSTED || l->now - created >= c->cfg.ttl_ms)
        return 1;
    cache_key k = {r->model, r->partition, (cache_tier)r->tier, {0}};
    memcpy(k.context, r->context, 32);
    /* Stored at unit length: only padded here, so its hash is as before. */
    int stride = stride_of(r->dim);
    memcpy(l->row, r->vec, (size_t)r->dim * sizeof(float));
    for (int i = 0; i < stride; i++)
        if (i >= r->dim) l->row[i] = 0;
        else if (!isfinite(l->row[i])) return 1;
    unsigned char bkey[32];
    if (bucket_key(c, &k, r->tier, r->dim, bkey) != 0 ||
        !add_entry(c, &k, r->tier, r->dim, bkey, l->row, row_hash(l->row, stride), r->answer, r->len,
                   created, used, r->id)) {
        err_out(c->err, sizeof c->err, "cache: out of memory while loading");
        return -1;
    }
    return 0;
}

/* Reads every entry of this embedder that has not expired (the rest leave
 * the file), orders the LRU list by last use and evicts down to max_bytes. */
static int load(semcache *c, int64_t now)
{
    loading l = {c, now, alloc_row(MAX_DIM)};
    if (!l.row) {
        err_out(c->err, sizeof c->err, "cache: out of memory while loading");
        return -1;
    }
    tx_begin(c);
    int ok = cache_db_delete_other_embedders(c->db, c->embedder) == 0 && cache_db_each(c->db, load_row, &l) == 0;
    free(l.row);
    if (ok && c->entries) {
        entry **v = malloc(c->entries * sizeof *v);
        if (!v) {
            err_out(c->err, sizeof c->err, "cache: out of memory while loading");
            ok = 0;
        } else {
            size_t n = 0;
            for (entry *e = c->lru_head; e; e = e->lru_next) v[n++] = e;
            qsort(v, n, sizeof *v, by_used);
            c->lru_head = c->lru_tail = NULL;
            for (size_t i = 0; i < n; i++) lru_push_head(c, v[i]);
            free(v);
        }
    }
    while (ok && c->lru_tail && c->bytes > c->cfg.max_bytes) ok = drop_entry(c, c->lru_tail, GONE_EVICTED) == 0;
    c->evicted = 0;
    return tx_end(c, ok);
}

semcache *semcache_open(const char *db_path, const cache_config *cfg, int64_t now_ms, int64_t wall_ms,
                        char *err, size_t errlen)
{
    semcache *c = calloc(1, sizeof *c);
    if (!c) {
        err_out(err, errlen, "cache: out of memory");
        return NULL;
    }
    if (cfg) c->cfg = *cfg;
    else cache_config_init(&c->cfg);
    c->nslots = 64;
    c->slots = calloc(c->nslots, sizeof *c->slots);
    c->embedder = strdup(c->cfg.embedder ? c->cfg.embedder : EMBED_BUILTIN_ID);
    c->wall_offset = wall_ms - now_ms;
    if (!c->slots || !c->embedder || pthread_rwlock_init(&c->lock, NULL) != 0) {
        free(c->slots);
        free(c->embedder);
        free(c);
        err_out(err, errlen, "cache: out of memory");
        return NULL;
    }
    c->cfg.embedder = c->embedder;
    if (c->cfg.ttl_ms <= 0) c->cfg.ttl_ms = INT64_MAX / 4;
    if (db_path && (!(c->db = cache_db_open(db_path, err, errlen)) || load(c, now_ms) != 0)) {
        if (c->db) err_out(err, errlen, "%s", semcache_errmsg(c));
        semcache_close(c);
        return NULL;
    }
    return c;
}

void semcache_close(semcache *c)
{
    if (!c) return;
    for (entry *e = c->lru_head, *next; e; e = next) {
        next = e->lru_next;
        free(e);
    }
    for (size_t i = 0; i < c->nslots; i++)
        for (bucket *b = c->slots[i], *next; b; b = next) {
            next = b->next;
            free_bucket_mem(b);
        }
    cache_db_close(c->db);
    pthread_rwlock_destroy(&c->lock);
    free(c->slots);
    free(c->embedder);
    free(c);
}
