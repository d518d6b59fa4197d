/* store/audit: see audit.h.  synchronous=NORMAL on this connection: an audit
 * record lost to a power cut costs less than an fsync per batch on the
 * coordinator's disk, and tasks keep their own FULL connection. */
#include "store/audit.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sqlite_int.h"
#include "util/err.h"

const char STORE_AUDIT_SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS audit("
    " request_id TEXT NOT NULL,"
    " ts_ms INTEGER NOT NULL,"
    " method TEXT NOT NULL,"
    " path TEXT NOT NULL,"
    " status INTEGER NOT NULL,"
    " duration_us INTEGER NOT NULL,"
    " owner TEXT NOT NULL DEFAULT '',"
    " task_id TEXT,"
    " request_body TEXT,"
    " response_body TEXT,"
    " truncated INTEGER NOT NULL DEFAULT 0,"
    " route_json TEXT);"
    "CREATE INDEX IF NOT EXISTS audit_request ON audit(request_id);"
    "CREATE INDEX IF NOT EXISTS audit_task ON audit(task_id) WHERE task_id IS NOT NULL;"
    "CREATE INDEX IF NOT EXISTS audit_ts ON audit(ts_ms);";

#define COLS "request_id,ts_ms,method,path,status,duration_us,owner,task_id,request_body,response_body,truncated,route_json"

struct audit_db {
    pthread_mutex_t mu;
    sqlite3 *db;
    sqlite3_stmt *insert;
};

audit_db *audit_db_open(const char *dir, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/gpupool.db", dir);
    audit_db *a = calloc(1, sizeof *a);
    if (!a) { err_out(err, errlen, "audit: out of memory"); return NULL; }
    pthread_mutex_init(&a->mu, NULL);
    int rc = sqlite3_open_v2(path, &a->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(a->db, 5000);
        rc = sqlite3_exec(a->db, "PRAGMA synchronous=NORMAL;", NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v3(a->db, "INSERT INTO audit(" COLS ") VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
                                -1, SQLITE_PREPARE_PERSISTENT, &a->insert, NULL);
    if (rc != SQLITE_OK) {
        err_out(err, errlen, "audit: %s: %s", path, a->db ? sqlite3_errmsg(a->db) : sqlite3_errstr(rc));
        audit_db_close(a);
        return NULL;
    }
    return a;
}

void audit_db_close(audit_db *a)
{
    if (!a) return;
    sqlite3_finalize(a->insert);
    sqlite3_close(a->db);
    pthread_mutex_destroy(&a->mu);
    free(a);
}


/* Each row's texts live until its step and its bindings are cleared right
 * after, so SQLite may read them in place instead of copying every body. */
static void bind_static(sqlite3_stmt *st, int i, const char *v)
{
    if (v) sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
    else sqlite3_bind_null(st, i);
}

int audit_db_insert(audit_db *a, const audit_entry *const *e, int n)
{
    int bad = 0;
    pthread_mutex_lock(&a->mu);
    sqlite3_exec(a->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    for (int i = 0; i < n; i++) {
        sqlite3_stmt *st = a->insert;
        bind_static(st, 1, e[i]->request_id);
        sqlite3_bind_int64(st, 2, e[i]->ts_ms);
        bind_static(st, 3, e[i]->method);
        bind_static(st, 4, e[i]->path);
        sqlite3_bind_int(st, 5, e[i]->status);
        sqlite3_bind_int64(st, 6, e[i]->duration_us);
        bind_static(st, 7, e[i]->owner ? e[i]->owner : "");
        bind_static(st, 8, e[i]->task_id && *e[i]->task_id ? e[i]->task_id : NULL);
        bind_static(st, 9, e[i]->request_body);
        bind_static(st, 10, e[i]->response_body);
        sqlite3_bind_int(st, 11, e[i]->truncated);
        bind_static(st, 12, e[i]->route_json);
        if (sqlite3_step(st) != SQLITE_DONE) bad++;
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
    int rc = sqlite3_exec(a->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK && !bad ? 0 : -1;
    if (sqlite3_get_autocommit(a->db) == 0) sqlite3_exec(a->db, "ROLLBACK", NULL, NULL, NULL);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int audit_db_set_response(audit_db *a, const char *request_id, const char *body, int truncated, int64_t duration_us)
{
    pthread_mutex_lock(&a->mu);
    sqlite3_stmt *st = NULL;
    /* The newest call with the id: a client may reuse its ids. */
    int rc = sqlite3_prepare_v2(a->db,
                                "UPDATE audit SET response_body=?2, truncated=MAX(truncated,?3),"
                                " duration_us=MAX(duration_us,?4) WHERE rowid=(SELECT MAX(rowid) FROM audit"
                                " WHERE request_id=?1)", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        store_bind_text(st, 1, request_id);
        store_bind_text(st, 2, body);
        sqlite3_bind_int(st, 3, truncated);
        sqlite3_bind_int64(st, 4, duration_us);
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    }
    int changed = rc == SQLITE_OK ? sqlite3_changes(a->db) : -1;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&a->mu);
    return changed;
}

int64_t audit_db_prune(audit_db *a, int64_t before_ms)
{
    pthread_mutex_lock(&a->mu);
    sqlite3_stmt *st = NULL;
    int64_t n = -1;
    if (sqlite3_prepare_v2(a->db, "DELETE FROM audit WHERE ts_ms < ?1", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, before_ms);
        if (sqlite3_step(st) == SQLITE_DONE) n = sqlite3_changes(a->db);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&a->mu);
    return n;
}

static json_t *col_str(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? json_string((const char *)t) : json_null();
}

/* A body that is JSON is shown as JSON; anything else as a string. */
static json_t *col_body(sqlite3_stmt *st, int i)
{
    const char *t = (const char *)sqlite3_column_text(st, i);
    if (!t) return json_null();
    json_t *j = (t[0] == '{' || t[0] == '[') ? json_loads(t, JSON_DECODE_ANY, NULL) : NULL;
    return j ? j : json_string(t);
}

json_t *audit_db_query(audit_db *a, const audit_query *q)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT " COLS " FROM audit WHERE (?1 IS NULL OR request_id=?1) AND (?2 IS NULL OR task_id=?2)"
             " AND ts_ms >= ?3 ORDER BY ts_ms DESC, rowid DESC LIMIT ?4");
    pthread_mutex_lock(&a->mu);
    sqlite3_stmt *st = NULL;
    json_t *out = NULL;
    if (sqlite3_prepare_v2(a->db, sql, -1, &st, NULL) == SQLITE_OK) {
        store_bind_text(st, 1, q->request_id);
        store_bind_text(st, 2, q->task_id);
        sqlite3_bind_int64(st, 3, q->since_ms);
        sqlite3_bind_int(st, 4, q->limit > 0 ? q->limit : 100);
        out = json_array();
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            json_t *r = json_object();
            json_object_set_new(r, "request_id", col_str(st, 0));
            json_object_set_new(r, "created_ms", json_integer(sqlite3_column_int64(st, 1)));
            json_object_set_new(r, "method", col_str(st, 2));
            json_object_set_new(r, "path", col_str(st, 3));
            json_object_set_new(r, "status", json_integer(sqlite3_column_int(st, 4)));
            json_object_set_new(r, "duration_ms", json_real((double)sqlite3_column_int64(st, 5) / 1000.0));
            json_object_set_new(r, "owner", col_str(st, 6));
            json_object_set_new(r, "task_id", col_str(st, 7));
            json_object_set_new(r, "request_body", col_body(st, 8));
            json_object_set_new(r, "response_body", col_body(st, 9));
            json_object_set_new(r, "truncated", json_boolean(sqlite3_column_int(st, 10)));
            json_t *route = col_body(st, 11);
            json_object_set_new(r, "route", json_is_object(route) ? route : (json_decref(route), json_null()));
            json_array_append_new(out, r);
        }
        if (rc != SQLITE_DONE) { json_decref(out); out = NULL; }
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&a->mu);
    return out;
}
