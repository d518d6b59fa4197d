/* policy/cache_db: the semantic cache's SQLite file.  Owns its schema
 * (versioned with PRAGMA user_version), its pragmas and the rows in and out.
 * Only policy/cache uses it, always under its write lock, so it is not
 * thread-safe itself.  WAL with synchronous=NORMAL: a cache may lose its
 * last writes on power loss, never its consistency.  secure_delete=ON,
 * because removed answers may hold private data.  Times are wall ms. */
#ifndef GPUPOOL_CACHE_DB_H
#define GPUPOOL_CACHE_DB_H

#include <stddef.h>
#include <stdint.h>

typedef struct cache_db cache_db;

/* One entry as stored.  Pointers are borrowed: in cache_db_each they live
 * until fn returns; in cache_db_insert until it returns. */
typedef struct cache_db_row {
    int64_t id;
    const char *embedder;
    int dim;
    const char *model, *partition;
    int tier;
    const unsigned char *context; /* 32 bytes */
    const float *vec;             /* dim floats, host byte order */
    const char *answer;
    size_t len;
    int64_t created_ms, used_ms;
} cache_db_row;

/* Opens or creates path (mode 0600 when created).  NULL with one line in err. */
cache_db *cache_db_open(const char *path, char *err, size_t errlen);
void cache_db_close(cache_db *d);
const char *cache_db_errmsg(const cache_db *d);

/* A transaction around several writes.  Nests: only the outermost pair
 * talks to SQLite.  cache_db_end with ok 0 makes the whole of it roll back;
 * it returns -1 when the outermost level rolled back or could not commit. */
void cache_db_begin(cache_db *d);
int cache_db_end(cache_db *d, int ok);

/* Each returns 0, or -1 with the reason in cache_db_errmsg. */
int cache_db_insert(cache_db *d, const cache_db_row *r, int64_t *id); /* r->id and used_ms ignored */
int cache_db_delete(cache_db *d, int64_t id);
int cache_db_touch(cache_db *d, int64_t id, int64_t used_ms);
int cache_db_delete_other_embedders(cache_db *d, const char *embedder);

/* Calls fn for each row, oldest insertion first.  fn returns 0 to go on, 1
 * to delete that row and go on, -1 to stop (cache_db_each then returns -1).
 * A row whose columns do not have the stored shapes (wrong sizes) is deleted
 * without calling fn. */
int cache_db_each(cache_db *d, int (*fn)(const cache_db_row *r, void *arg), void *arg);

#endif
