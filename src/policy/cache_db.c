/* policy/cache_db: see cache_db.h.  One connection, prepared statements made
 * once; the caller's write lock serialises every call. */
#include "policy/cache_db.h"
#include "util/err.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SCHEMA_VERSION 1
#define BUSY_TIMEOUT_MS 5000

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS cache_entries("
    " id INTEGER PRIMARY KEY,"
    " embedder TEXT NOT NULL,"
    " dim INTEGER NOT NULL,"
    " model TEXT NOT NULL,"
    " partition TEXT NOT NULL,"
    " tier INTEGER NOT NULL,"
    " context BLOB NOT NULL," /* 32 bytes */
    " vec BLOB NOT NULL,"     /* dim float32, host order, unit length */
    " answer BLOB NOT NULL,"
    " created_ms INTEGER NOT NULL," /* wall clock */
    " used_ms INTEGER NOT NULL);";

enum { ST_BEGIN, ST_COMMIT, ST_ROLLBACK, ST_INSERT, ST_DELETE, ST_TOUCH, ST_OTHERS, ST_ALL, ST_N };
static const char *const SQL[ST_N] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_INSERT] = ("INSERT INTO cache_entries(embedder,dim,model,partition,tier,context,vec,answer,"
                   "created_ms,used_ms) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?9)"),
    [ST_DELETE] = "DELETE FROM cache_entries WHERE id=?1",
    [ST_TOUCH] = "UPDATE cache_entries SET used_ms=?2 WHERE id=?1",
    [ST_OTHERS] = "DELETE FROM cache_entries WHERE embedder<>?1",
    [ST_ALL] = ("SELECT id,embedder,dim,model,partition,tier,context,vec,answer,created_ms,used_ms "
                "FROM cache_entries ORDER BY created_ms, id"),
};

struct cache_db {
    sqlite3 *db;
    sqlite3_stmt *st[ST_N];
    int depth, failed; /* nested transactions */
    char err[256];
};


static int fail(cache_db *d, const char *what)
{
    err_out(d->err, sizeof d->err, "cache: %s: %s", what, sqlite3_errmsg(d->db));
    return -1;
}

static sqlite3_stmt *ps(cache_db *d, int k)
{
    sqlite3_stmt *st = d->st[k];
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
}

static int run(cache_db *d, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : fail(d, what);
}

const char *cache_db_errmsg(const cache_db *d) { return d->err; }

void cache_db_begin(cache_db *d)
{
    if (d->depth++ == 0) d->failed = run(d, ps(d, ST_BEGIN), "begin") != 0;
}

int cache_db_end(cache_db *d, int ok)
{
    if (!ok) d->failed = 1;
    if (--d->depth > 0) return ok ? 0 : -1;
    if (!d->failed && run(d, ps(d, ST_COMMIT), "commit") == 0) return 0;
    sqlite3_stmt *st = ps(d, ST_ROLLBACK); /* keeps d->err */
    sqlite3_step(st);
    sqlite3_reset(st);
    return -1;
}

int cache_db_insert(cache_db *d, const cache_db_row *r, int64_t *id)
{
    sqlite3_stmt *st = ps(d, ST_INSERT);
    sqlite3_bind_text(st, 1, r->embedder, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, r->dim);
    sqlite3_bind_text(st, 3, r->model, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, r->partition, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, r->tier);
    sqlite3_bind_blob(st, 6, r->context, 32, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 7, r->vec, (sqlite3_uint64)r->dim * sizeof(float), SQLITE_STATIC);
    sqlite3_bind_blob64(st, 8, r->len ? r->answer : "", r->len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 9, r->created_ms);
    if (run(d, st, "insert entry") != 0) return -1;
    *id = sqlite3_last_insert_rowid(d->db);
    return 0;
}

int cache_db_delete(cache_db *d, int64_t id)
{
    sqlite3_stmt *st = ps(d, ST_DELETE);
    sqlite3_bind_int64(st, 1, id);
    return run(d, st, "delete entry");
}

int cache_db_touch(cache_db *d, int64_t id, int64_t used_ms)
{
    sqlite3_stmt *st = ps(d, ST_TOUCH);
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, used_ms);
    return run(d, st, "record use");
}

int cache_db_delete_other_embedders(cache_db *d, const char *embedder)
{
    sqlite3_stmt *st = ps(d, ST_OTHERS);
    sqlite3_bind_text(st, 1, embedder, -1, SQLITE_STATIC);
    return run(d, st, "drop other embedders' entries");
}

int cache_db_each(cache_db *d, int (*fn)(const cache_db_row *r, void *arg), void *arg)
{
    sqlite3_stmt *st = ps(d, ST_ALL);
    int rc, out = 0;
    while (out == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        cache_db_row r = {
            .id = sqlite3_column_int64(st, 0),
            .embedder = (const char *)sqlite3_column_text(st, 1),
            .dim = sqlite3_column_int(st, 2),
            .model = (const char *)sqlite3_column_text(st, 3),
            .partition = (const char *)sqlite3_column_text(st, 4),
            .tier = sqlite3_column_int(st, 5),
            .context = sqlite3_column_blob(st, 6),
            .vec = sqlite3_column_blob(st, 7),
            .answer = sqlite3_column_blob(st, 8),
            .len = (size_t)sqlite3_column_bytes(st, 8),
            .created_ms = sqlite3_column_int64(st, 9),
            .used_ms = sqlite3_column_int64(st, 10),
        };
        int shaped = r.embedder && r.model && r.partition && r.dim >= 1 && r.dim <= 65536 && r.context &&
                     sqlite3_column_bytes(st, 6) == 32 && r.vec &&
                     sqlite3_column_bytes(st, 7) == r.dim * (int)sizeof(float);
        if (!r.answer) r.answer = "", r.len = 0;
        int k = shaped ? fn(&r, arg) : 1;
        if (k < 0) out = -1;
        else if (k > 0 && cache_db_delete(d, r.id) != 0) out = -1; /* the current row: safe mid-scan */
    }
    if (out == 0 && rc != SQLITE_DONE) out = fail(d, "read entries");
    sqlite3_reset(st);
    return out;
}

static int setup(cache_db *d, const char *path)
{
    sqlite3_busy_timeout(d->db, BUSY_TIMEOUT_MS);
    sqlite3_stmt *v = NULL;
    int ver = 0;
    if (sqlite3_prepare_v2(d->db, "PRAGMA user_version", -1, &v, NULL) == SQLITE_OK &&
        sqlite3_step(v) == SQLITE_ROW)
        ver = sqlite3_column_int(v, 0);
    sqlite3_finalize(v);
    if (ver > SCHEMA_VERSION) {
        err_out(d->err, sizeof d->err, "cache: %s has schema version %d, newer than this gpupool's %d", path,
                ver, SCHEMA_VERSION);
        return -1;
    }
    char sql[sizeof SCHEMA + 160];
    snprintf(sql, sizeof sql,
             "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA secure_delete=ON;"
             "BEGIN IMMEDIATE; %s PRAGMA user_version=%d; COMMIT;",
             SCHEMA, SCHEMA_VERSION);
    if (sqlite3_exec(d->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        fail(d, "create schema");
        sqlite3_exec(d->db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
    }
    for (int i = 0; i < ST_N; i++)
        if (sqlite3_prepare_v3(d->db, SQL[i], -1, SQLITE_PREPARE_PERSISTENT, &d->st[i], NULL) != SQLITE_OK)
            return fail(d, "prepare statements");
    return 0;
}

cache_db *cache_db_open(const char *path, char *err, size_t errlen)
{
    cache_db *d = calloc(1, sizeof *d);
    if (!d) {
        err_out(err, errlen, "cache: out of memory");
        return NULL;
    }
    /* The file holds answers to private requests: only this user reads it
     * (SQLite gives the -wal and -shm files the same mode). */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        err_out(err, errlen, "cache: cannot open %s: %s", path, strerror(errno));
        free(d);
        return NULL;
    }
    close(fd);
    if (sqlite3_open_v2(path, &d->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        err_out(err, errlen, "cache: %s: %s", path, d->db ? sqlite3_errmsg(d->db) : "out of memory");
        cache_db_close(d);
        return NULL;
    }
    if (setup(d, path) != 0) {
        err_out(err, errlen, "%s", d->err);
        cache_db_close(d);
        return NULL;
    }
    return d;
}

void cache_db_close(cache_db *d)
{
    if (!d) return;
    for (int i = 0; i < ST_N; i++) sqlite3_finalize(d->st[i]);
    sqlite3_close(d->db);
    free(d);
}
