/* store/webhooks: see webhooks.h.  Times are wall-clock milliseconds: a
 * delivery's next attempt must keep its meaning across a restart. */
#include "store/webhooks.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sqlite_int.h"
#include "util/err.h"

const char STORE_WEBHOOK_SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS webhook_subs("
    " object_id TEXT PRIMARY KEY NOT NULL,"
    " kind TEXT NOT NULL CHECK(kind IN ('task','batch','run')),"
    " url TEXT NOT NULL,"
    " created_ms INTEGER NOT NULL,"
    " fired_ms INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS webhook_subs_open ON webhook_subs(kind) WHERE fired_ms = 0;"
    "CREATE TABLE IF NOT EXISTS webhook_deliveries("
    " id TEXT PRIMARY KEY NOT NULL,"
    " event TEXT NOT NULL,"
    " object_id TEXT NOT NULL,"
    " url TEXT NOT NULL,"
    " body TEXT NOT NULL,"
    " state TEXT NOT NULL DEFAULT 'pending' CHECK(state IN ('pending','delivered','failed')),"
    " attempts INTEGER NOT NULL DEFAULT 0,"
    " created_ms INTEGER NOT NULL,"
    " next_ms INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS webhook_due ON webhook_deliveries(next_ms) WHERE state = 'pending';"
    "CREATE INDEX IF NOT EXISTS webhook_object ON webhook_deliveries(object_id);"
    "CREATE TABLE IF NOT EXISTS webhook_attempts("
    " delivery_id TEXT NOT NULL,"
    " attempt INTEGER NOT NULL,"
    " ts_ms INTEGER NOT NULL,"
    " duration_ms INTEGER NOT NULL,"
    " status INTEGER NOT NULL,"
    " error TEXT,"
    " PRIMARY KEY(delivery_id, attempt)) WITHOUT ROWID;";

struct wh_db {
    pthread_mutex_t mu;
    sqlite3 *db;
};

wh_db *wh_db_open(const char *dir, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/gpupool.db", dir);
    wh_db *w = calloc(1, sizeof *w);
    if (!w) { err_out(err, errlen, "webhooks: out of memory"); return NULL; }
    pthread_mutex_init(&w->mu, NULL);
    int rc = sqlite3_open_v2(path, &w->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(w->db, 5000);
        /* A delivery must survive what a task survives. */
        rc = sqlite3_exec(w->db, "PRAGMA synchronous=FULL;", NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK) {
        err_out(err, errlen, "webhooks: %s: %s", path, w->db ? sqlite3_errmsg(w->db) : sqlite3_errstr(rc));
        wh_db_close(w);
        return NULL;
    }
    return w;
}

void wh_db_close(wh_db *w)
{
    if (!w) return;
    sqlite3_close(w->db);
    pthread_mutex_destroy(&w->mu);
    free(w);
}


static json_t *col(sqlite3_stmt *st, int i)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL) return json_null();
    if (sqlite3_column_type(st, i) == SQLITE_INTEGER) return json_integer(sqlite3_column_int64(st, i));
    return json_string((const char *)sqlite3_column_text(st, i));
}

/* Runs sql with the text/NULL params (and up to two integers after them),
 * collecting rows as objects keyed by names.  Call with the lock held. */
static json_t *rows(wh_db *w, const char *sql, const char *const *names, int ncols, const char *p1, int64_t i2,
                    int64_t i3)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(w->db, sql, -1, &st, NULL) != SQLITE_OK) return NULL;
    if (sqlite3_bind_parameter_count(st) >= 1) store_bind_text(st, 1, p1);
    if (sqlite3_bind_parameter_count(st) >= 2) sqlite3_bind_int64(st, 2, i2);
    if (sqlite3_bind_parameter_count(st) >= 3) sqlite3_bind_int64(st, 3, i3);
    json_t *out = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *o = json_object();
        for (int i = 0; i < ncols; i++) json_object_set_new(o, names[i], col(st, i));
        json_array_append_new(out, o);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) { json_decref(out); return NULL; }
    return out;
}

static int exec_bound(wh_db *w, const char *sql, const char *const *texts, int nt, const int64_t *ints, int ni)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(w->db, sql, -1, &st, NULL) != SQLITE_OK) return -1;
    for (int i = 0; i < nt; i++) store_bind_text(st, i + 1, texts[i]);
    for (int i = 0; i < ni; i++) sqlite3_bind_int64(st, nt + i + 1, ints[i]);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
    sqlite3_finalize(st);
    return rc;
}

int wh_subscribe(wh_db *w, const char *kind, const char *object_id, const char *url, int64_t now_ms)
{
    const char *t[] = {object_id, kind, url};
    pthread_mutex_lock(&w->mu);
    int rc = exec_bound(w, "INSERT OR IGNORE INTO webhook_subs(object_id,kind,url,created_ms) VALUES(?1,?2,?3,?4)",
                        t, 3, &now_ms, 1);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

json_t *wh_fired(wh_db *w, int max)
{
    static const char *const names[] = {"object_id", "kind", "url"};
    pthread_mutex_lock(&w->mu);
    json_t *j = rows(w,
                     "SELECT s.object_id, s.kind, s.url FROM webhook_subs s WHERE s.fired_ms = 0 AND ("
                     " (s.kind = 'task' AND EXISTS (SELECT 1 FROM tasks t WHERE t.id = s.object_id"
                     "   AND t.status IN ('succeeded','failed','canceled')))"
                     " OR (s.kind = 'batch' AND EXISTS (SELECT 1 FROM batches b WHERE b.id = s.object_id)"
                     "   AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.batch_id = s.object_id"
                     "   AND t.status IN ('queued','running')))"
                     " OR (s.kind = 'run' AND EXISTS (SELECT 1 FROM runs r WHERE r.id = s.object_id"
                     "   AND r.status IN ('succeeded','failed','canceled'))))"
                     " LIMIT ?2",
                     names, 3, NULL, max, 0);
    pthread_mutex_unlock(&w->mu);
    return j;
}

int wh_enqueue(wh_db *w, const char *id, const char *event, const char *object_id, const char *url,
               const char *body, int64_t now_ms, const char *fires)
{
    const char *t[] = {id, event, object_id, url, body};
    int64_t times[] = {now_ms, now_ms};
    pthread_mutex_lock(&w->mu);
    int rc = sqlite3_exec(w->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    if (!rc)
        rc = exec_bound(w, "INSERT INTO webhook_deliveries(id,event,object_id,url,body,created_ms,next_ms)"
                           " VALUES(?1,?2,?3,?4,?5,?6,?7)", t, 5, times, 2);
    if (!rc && fires) {
        const char *f[] = {fires};
        rc = exec_bound(w, "UPDATE webhook_subs SET fired_ms = ?2 WHERE object_id = ?1", f, 1, &now_ms, 1);
    }
    if (!rc) rc = sqlite3_exec(w->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    if (sqlite3_get_autocommit(w->db) == 0) sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

json_t *wh_due(wh_db *w, int64_t now_ms, int max)
{
    static const char *const names[] = {"id", "event", "object_id", "url", "body", "attempts"};
    pthread_mutex_lock(&w->mu);
    json_t *j = rows(w,
                     "SELECT id, event, object_id, url, body, attempts FROM webhook_deliveries"
                     " WHERE state = 'pending' AND next_ms <= ?2 ORDER BY next_ms LIMIT ?3",
                     names, 6, NULL, now_ms, max);
    pthread_mutex_unlock(&w->mu);
    return j;
}

int wh_record(wh_db *w, const char *id, int attempt, int64_t ts_ms, int64_t duration_ms, long status,
              const char *error, const char *state, int64_t next_ms)
{
    const char *t[] = {id, error};
    int64_t a[] = {attempt, ts_ms, duration_ms, status};
    const char *u[] = {id, state};
    int64_t b[] = {attempt, next_ms};
    pthread_mutex_lock(&w->mu);
    int rc = sqlite3_exec(w->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    if (!rc)
        rc = exec_bound(w, "INSERT OR REPLACE INTO webhook_attempts(delivery_id,error,attempt,ts_ms,duration_ms,status)"
                           " VALUES(?1,?2,?3,?4,?5,?6)", t, 2, a, 4);
    if (!rc)
        rc = exec_bound(w, "UPDATE webhook_deliveries SET state = ?2, attempts = ?3, next_ms = ?4 WHERE id = ?1",
                        u, 2, b, 2);
    if (!rc) rc = sqlite3_exec(w->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    if (sqlite3_get_autocommit(w->db) == 0) sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

json_t *wh_list(wh_db *w, const char *object_id, int limit)
{
    static const char *const names[] = {"id", "event", "object_id", "url", "state", "attempt_count", "created_ms",
                                        "next_attempt_ms"};
    static const char *const anames[] = {"attempt", "time_ms", "duration_ms", "status_code", "error"};
    pthread_mutex_lock(&w->mu);
    json_t *list = rows(w,
                        "SELECT id, event, object_id, url, state, attempts, created_ms, next_ms FROM webhook_deliveries"
                        " WHERE (?1 IS NULL OR object_id = ?1) ORDER BY created_ms DESC, rowid DESC LIMIT ?2",
                        names, 8, object_id, limit, 0);
    size_t i;
    json_t *d;
    json_array_foreach(list, i, d) {
        json_t *att = rows(w,
                           "SELECT attempt, ts_ms, duration_ms, status, error FROM webhook_attempts"
                           " WHERE delivery_id = ?1 ORDER BY attempt",
                           anames, 5, json_string_value(json_object_get(d, "id")), 0, 0);
        json_object_set_new(d, "attempts", att ? att : json_array());
        if (strcmp(json_string_value(json_object_get(d, "state")), "pending"))
            json_object_set_new(d, "next_attempt_ms", json_null());
    }
    pthread_mutex_unlock(&w->mu);
    return list;
}

int64_t wh_prune(wh_db *w, int64_t before_ms)
{
    const int64_t t[] = {before_ms};
    pthread_mutex_lock(&w->mu);
    int rc = sqlite3_exec(w->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    if (!rc)
        rc = exec_bound(w, "DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT id FROM webhook_deliveries"
                           " WHERE state != 'pending' AND created_ms < ?1)", NULL, 0, t, 1);
    if (!rc)
        rc = exec_bound(w, "DELETE FROM webhook_deliveries WHERE state != 'pending' AND created_ms < ?1", NULL, 0, t, 1);
    int64_t n = rc ? -1 : sqlite3_changes(w->db);
    if (!rc) rc = exec_bound(w, "DELETE FROM webhook_subs WHERE fired_ms != 0 AND fired_ms < ?1", NULL, 0, t, 1);
    if (!rc) rc = sqlite3_exec(w->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    if (sqlite3_get_autocommit(w->db) == 0) sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
    pthread_mutex_unlock(&w->mu);
    return rc ? -1 : n;
}
