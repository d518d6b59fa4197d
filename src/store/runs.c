/* store/runs.c: the app and pipeline runs half of store.h, on
 * store/sqlite.c's connection.  A run is one row in `runs` and one row per
 * stage in `run_stages`; each try of a stage is an ordinary task (so the
 * dispatcher places, retries and hedges it like any other), named by the
 * stage row.  Rows are read as JSON objects, the *_json columns parsed, so
 * the runner and the API share one view.  Statements are prepared per call:
 * runs are few next to task transitions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sqlite_int.h"
#include "store/store.h"

const char STORE_RUNS_SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS runs("
    " id TEXT PRIMARY KEY NOT NULL,"
    " kind TEXT NOT NULL CHECK(kind IN ('app','pipeline')),"
    " name TEXT NOT NULL,"
    " status TEXT NOT NULL CHECK(status IN ('queued','running','succeeded','failed','canceled')),"
    " def_json TEXT NOT NULL,"
    " input_json TEXT NOT NULL,"
    " sensitivity TEXT NOT NULL DEFAULT 'normal',"
    " route_rule TEXT,"
    " owner TEXT NOT NULL DEFAULT '',"
    " priority INTEGER NOT NULL DEFAULT 5,"
    " output_json TEXT,"
    " error_json TEXT,"
    " created_ms INTEGER NOT NULL,"
    " started_ms INTEGER NOT NULL DEFAULT 0,"
    " finished_ms INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS runs_active ON runs(status) WHERE status IN ('queued','running');"
    "CREATE TABLE IF NOT EXISTS run_stages("
    " run_id TEXT NOT NULL REFERENCES runs(id),"
    " idx INTEGER NOT NULL,"
    " name TEXT NOT NULL,"
    " model TEXT NOT NULL,"
    " status TEXT NOT NULL DEFAULT 'pending'"
    "  CHECK(status IN ('pending','running','succeeded','failed','skipped','canceled')),"
    " task_id TEXT,"
    " tries INTEGER NOT NULL DEFAULT 0,"
    " request_json TEXT,"
    " output_json TEXT,"
    " raw_text TEXT,"
    " error_json TEXT,"
    " node TEXT,"
    " attempts_json TEXT,"
    " started_ms INTEGER NOT NULL DEFAULT 0,"
    " finished_ms INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY(run_id, idx));";



static int step_done(store *s, sqlite3_stmt *st, const char *what)
{
    int r = sqlite3_step(st);
    int rc = r == SQLITE_DONE ? STORE_OK : store_db_err(s, what);
    sqlite3_finalize(st);
    return rc;
}

int store_run_insert(store *s, const run_new *r)
{
    sqlite3 *db = store_db_lock(s);
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? STORE_OK
                                                                                : store_db_err(s, "begin a run");
    sqlite3_stmt *st = rc ? NULL
                          : store_prepare(s, db,
                                 "INSERT INTO runs(id,kind,name,status,def_json,input_json,sensitivity,route_rule,owner,"
                                 "priority,created_ms) VALUES(?1,?2,?3,'queued',?4,?5,?6,?7,?8,?9,?10)");
    if (st) {
        store_bind_text(st, 1, r->id);
        store_bind_text(st, 2, r->kind);
        store_bind_text(st, 3, r->name);
        store_bind_text(st, 4, r->def_json);
        store_bind_text(st, 5, r->input_json);
        store_bind_text(st, 6, r->sensitivity ? r->sensitivity : "normal");
        store_bind_text(st, 7, r->route_rule);
        store_bind_text(st, 8, r->owner ? r->owner : "");
        sqlite3_bind_int(st, 9, r->priority);
        sqlite3_bind_int64(st, 10, r->created_ms);
        rc = step_done(s, st, "insert a run");
    } else if (!rc) {
        rc = STORE_ERR;
    }
    for (int i = 0; i < r->n_stages && rc == STORE_OK; i++) {
        st = store_prepare(s, db, "INSERT INTO run_stages(run_id,idx,name,model) VALUES(?1,?2,?3,?4)");
        if (!st) { rc = STORE_ERR; break; }
        store_bind_text(st, 1, r->id);
        sqlite3_bind_int(st, 2, i);
        store_bind_text(st, 3, r->stage_names[i]);
        store_bind_text(st, 4, r->stage_models[i]);
        rc = step_done(s, st, "insert a run stage");
    }
    if (rc == STORE_OK && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) rc = store_db_err(s, "commit a run");
    if (rc != STORE_OK) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    store_db_unlock(s);
    return rc;
}

/* A row as an object: names from the columns, "_json" columns parsed and
 * named without the suffix. */
static json_t *row_json(sqlite3_stmt *st)
{
    json_t *o = json_object();
    for (int i = 0; i < sqlite3_column_count(st); i++) {
        const char *name = sqlite3_column_name(st, i);
        size_t n = strlen(name);
        int js = n > 5 && !strcmp(name + n - 5, "_json");
        char key[64];
        snprintf(key, sizeof key, "%.*s", js ? (int)(n - 5) : (int)n, name);
        json_t *v;
        switch (sqlite3_column_type(st, i)) {
        case SQLITE_INTEGER: v = json_integer(sqlite3_column_int64(st, i)); break;
        case SQLITE_NULL: v = json_null(); break;
        default: {
            const char *t = (const char *)sqlite3_column_text(st, i);
            v = js ? json_loads(t, JSON_DECODE_ANY, NULL) : json_string(t);
            if (!v) v = json_null();
        }
        }
        json_object_set_new(o, key, v);
    }
    return o;
}

int store_run_get(store *s, const char *id, json_t **out)
{
    *out = NULL;
    sqlite3 *db = store_db_lock(s);
    int rc = STORE_ERR;
    sqlite3_stmt *st = store_prepare(s, db, "SELECT * FROM runs WHERE id=?1");
    if (!st) goto out;
    store_bind_text(st, 1, id);
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW) *out = row_json(st);
    rc = r == SQLITE_ROW ? STORE_OK : r == SQLITE_DONE ? STORE_NOT_FOUND : store_db_err(s, "read a run");
    sqlite3_finalize(st);
    if (rc != STORE_OK) goto out;
    st = store_prepare(s, db, "SELECT idx AS \"index\",name,model,status,task_id,tries,request_json,output_json,raw_text,"
                     "error_json,node,attempts_json,started_ms,finished_ms FROM run_stages WHERE run_id=?1 ORDER BY idx");
    if (!st) { rc = STORE_ERR; goto out; }
    store_bind_text(st, 1, id);
    json_t *stages = json_array();
    while ((r = sqlite3_step(st)) == SQLITE_ROW) json_array_append_new(stages, row_json(st));
    json_object_set_new(*out, "stages", stages);
    if (r != SQLITE_DONE) rc = store_db_err(s, "read run stages");
    sqlite3_finalize(st);
out:
    store_db_unlock(s);
    if (rc != STORE_OK) {
        json_decref(*out);
        *out = NULL;
    }
    return rc;
}

int store_run_active(store *s, char (*ids)[64], int max)
{
    sqlite3 *db = store_db_lock(s);
    int n = 0;
    sqlite3_stmt *st = store_prepare(s, db, "SELECT id FROM runs WHERE status IN ('queued','running') ORDER BY created_ms LIMIT ?1");
    if (st) {
        sqlite3_bind_int(st, 1, max);
        while (n < max && sqlite3_step(st) == SQLITE_ROW)
            snprintf(ids[n++], 64, "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    } else {
        n = -1;
    }
    store_db_unlock(s);
    return n;
}

/* Only these columns may be set; the names come from here, never from the
 * caller's keys, so the SQL is never built from outside text. */
static const char *const RUN_COLS[] = {"status", "output_json", "error_json", "started_ms", "finished_ms", NULL};
static const char *const STAGE_COLS[] = {"status", "task_id", "tries", "request_json", "output_json", "raw_text",
                                         "error_json", "node", "attempts_json", "started_ms", "finished_ms", NULL};

static int set_cols(store *s, const char *table, const char *const *cols, const char *id, int idx, const json_t *f)
{
    char sql[1024];
    size_t n = (size_t)snprintf(sql, sizeof sql, "UPDATE %s SET ", table);
    const char *used[16];
    int k = 0;
    for (int i = 0; cols[i] && k < 16; i++) {
        char key[64];
        size_t cl = strlen(cols[i]);
        int js = cl > 5 && !strcmp(cols[i] + cl - 5, "_json");
        snprintf(key, sizeof key, "%.*s", js ? (int)(cl - 5) : (int)cl, cols[i]);
        if (!json_object_get(f, key)) continue;
        n += (size_t)snprintf(sql + n, sizeof sql - n, "%s%s=?%d", k ? "," : "", cols[i], k + 1);
        used[k++] = cols[i];
    }
    if (k == 0) return STORE_OK;
    /* Only a run still going changes: a cancel is never overwritten by the
     * runner finishing the step it was in. */
    snprintf(sql + n, sizeof sql - n,
             idx < 0 ? " WHERE id=?%d AND status IN ('queued','running')"
                     : " WHERE run_id=?%d AND idx=?%d AND (SELECT status FROM runs WHERE id=run_id) IN ('queued','running')",
             k + 1, k + 2);
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *st = store_prepare(s, db, sql);
    int rc = STORE_ERR;
    if (st) {
        for (int i = 0; i < k; i++) {
            size_t cl = strlen(used[i]);
            int js = cl > 5 && !strcmp(used[i] + cl - 5, "_json");
            char key[64];
            snprintf(key, sizeof key, "%.*s", js ? (int)(cl - 5) : (int)cl, used[i]);
            const json_t *v = json_object_get(f, key);
            if (json_is_null(v)) sqlite3_bind_null(st, i + 1);
            else if (js) {
                char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
                sqlite3_bind_text(st, i + 1, t ? t : "null", -1, SQLITE_TRANSIENT);
                free(t);
            } else if (json_is_integer(v)) sqlite3_bind_int64(st, i + 1, json_integer_value(v));
            else store_bind_text(st, i + 1, json_string_value(v));
        }
        store_bind_text(st, k + 1, id);
        if (idx >= 0) sqlite3_bind_int(st, k + 2, idx);
        rc = step_done(s, st, "update a run");
        if (rc == STORE_OK && sqlite3_changes(db) == 0) rc = STORE_STALE;
    }
    store_db_unlock(s);
    return rc;
}

int store_run_set(store *s, const char *id, const json_t *fields) { return set_cols(s, "runs", RUN_COLS, id, -1, fields); }

int store_run_stage_set(store *s, const char *id, int idx, const json_t *fields)
{
    return set_cols(s, "run_stages", STAGE_COLS, id, idx, fields);
}

int store_run_cancel(store *s, const char *id, int64_t now_ms, char task_id[64])
{
    task_id[0] = 0;
    sqlite3 *db = store_db_lock(s);
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? STORE_OK
                                                                                : store_db_err(s, "begin a cancel");
    sqlite3_stmt *st = rc ? NULL : store_prepare(s, db, "SELECT status FROM runs WHERE id=?1");
    if (st) {
        store_bind_text(st, 1, id);
        int r = sqlite3_step(st);
        const char *status = r == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
        rc = r == SQLITE_DONE ? STORE_NOT_FOUND
             : r != SQLITE_ROW ? store_db_err(s, "read a run")
             : strcmp(status, "queued") && strcmp(status, "running") ? STORE_STALE
                                                                    : STORE_OK;
        sqlite3_finalize(st);
    } else if (!rc) {
        rc = STORE_ERR;
    }
    if (rc == STORE_OK && (st = store_prepare(s, db, "SELECT task_id FROM run_stages WHERE run_id=?1 AND status='running'"))) {
        store_bind_text(st, 1, id);
        if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
            snprintf(task_id, 64, "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    }
    if (rc == STORE_OK && (st = store_prepare(s, db, "UPDATE run_stages SET status='canceled', finished_ms=?2 "
                                            "WHERE run_id=?1 AND status IN ('pending','running')"))) {
        store_bind_text(st, 1, id);
        sqlite3_bind_int64(st, 2, now_ms);
        rc = step_done(s, st, "cancel run stages");
    }
    if (rc == STORE_OK && (st = store_prepare(s, db, "UPDATE runs SET status='canceled', finished_ms=?2, "
                                            "error_json='{\"code\":\"canceled\",\"message\":\"canceled by a user\"}' "
                                            "WHERE id=?1"))) {
        store_bind_text(st, 1, id);
        sqlite3_bind_int64(st, 2, now_ms);
        rc = step_done(s, st, "cancel a run");
    }
    if (rc == STORE_ERR || sqlite3_exec(db, rc == STORE_OK ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK) {
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        if (rc == STORE_OK) rc = store_db_err(s, "commit a cancel");
    }
    store_db_unlock(s);
    return rc;
}
