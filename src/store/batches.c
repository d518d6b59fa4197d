/* store/batches.c: the batch half of store.h, on store/sqlite.c's connection.
 *
 * Batch calls are rare next to task transitions, so their statements are
 * prepared per call rather than kept: nothing here adds to the connection's
 * standing state.  Each call holds the store's mutex throughout, and a call
 * that writes runs in one BEGIN IMMEDIATE transaction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sqlite_int.h"
#include "store/store.h"

static const char *const STATUS[5] = {"queued", "running", "succeeded", "failed", "canceled"};




static int exec(store *s, sqlite3 *db, const char *sql, const char *what)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? STORE_OK : store_db_err(s, what);
}

/* Commits unless rc is STORE_ERR, then rolls back; returns the final rc. */
static int end_tx(store *s, sqlite3 *db, int rc)
{
    if (rc != STORE_ERR && exec(s, db, "COMMIT", "commit") == STORE_OK) return rc;
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    return STORE_ERR;
}

static int idem_check(store *s, sqlite3 *db, const batch_new *b, char existing_id[64])
{
    sqlite3_stmt *st = store_prepare(s, db, "SELECT id, body_hash FROM batches WHERE idem_key=?1");
    if (!st) return STORE_ERR;
    store_bind_text(st, 1, b->idem_key);
    int r = sqlite3_step(st), rc = STORE_OK;
    if (r == SQLITE_ROW) {
        const char *hash = (const char *)sqlite3_column_text(st, 1);
        rc = hash && b->body_hash && !strcmp(hash, b->body_hash) ? STORE_DUPLICATE : STORE_CONFLICT;
        if (existing_id) snprintf(existing_id, 64, "%s", (const char *)sqlite3_column_text(st, 0));
    } else if (r != SQLITE_DONE) {
        rc = store_db_err(s, "look up a batch's idempotency key");
    }
    sqlite3_finalize(st);
    return rc;
}

static int insert_items(store *s, sqlite3 *db, const batch_new *b)
{
    sqlite3_stmt *st = store_prepare(s, db, STORE_TASK_INSERT_SQL);
    if (!st) return STORE_ERR;
    int rc = STORE_OK;
    for (int i = 0; i < b->n && rc == STORE_OK; i++) {
        const task_new *t = &b->items[i];
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        store_bind_task(st, t, b->id, i, b->custom_ids ? b->custom_ids[i] : NULL);
        if (sqlite3_step(st) != SQLITE_DONE) rc = store_db_err(s, "insert a batch item");
    }
    sqlite3_finalize(st);
    return rc;
}

int store_batch_insert(store *s, const batch_new *b, char existing_id[64])
{
    if (!s || !b || b->n < 1) return STORE_ERR;
    sqlite3 *db = store_db_lock(s);
    int rc = exec(s, db, "BEGIN IMMEDIATE", "begin transaction");
    if (rc == STORE_OK && b->idem_key) rc = idem_check(s, db, b, existing_id);
    if (rc == STORE_OK) {
        sqlite3_stmt *st = store_prepare(s, db, "INSERT INTO batches(id,type,model,priority,total,idem_key,body_hash,owner,"
                                       "created_ms) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9)");
        if (st) {
            store_bind_text(st, 1, b->id);
            store_bind_text(st, 2, b->type);
            store_bind_text(st, 3, b->model ? b->model : "");
            sqlite3_bind_int(st, 4, b->priority);
            sqlite3_bind_int(st, 5, b->n);
            store_bind_text(st, 6, b->idem_key);
            store_bind_text(st, 7, b->body_hash);
            store_bind_text(st, 8, b->owner ? b->owner : "");
            sqlite3_bind_int64(st, 9, b->created_ms);
        }
        rc = store_step_done(s, st, "insert batch");
    }
    if (rc == STORE_OK) rc = insert_items(s, db, b);
    if (rc == STORE_OK || rc == STORE_ERR) rc = end_tx(s, db, rc);
    else sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL); /* a duplicate: nothing written */
    store_db_unlock(s);
    return rc;
}

#define BATCH_COLS "SELECT id,type,model,priority,total,created_ms,cancelled_ms FROM batches "

static void row_to_batch(sqlite3_stmt *st, batch_rec *b)
{
    memset(b, 0, sizeof *b);
    snprintf(b->id, sizeof b->id, "%s", (const char *)sqlite3_column_text(st, 0));
    snprintf(b->type, sizeof b->type, "%s", (const char *)sqlite3_column_text(st, 1));
    snprintf(b->model, sizeof b->model, "%s", (const char *)sqlite3_column_text(st, 2));
    b->priority = sqlite3_column_int(st, 3);
    b->total = sqlite3_column_int64(st, 4);
    b->created_ms = sqlite3_column_int64(st, 5);
    b->cancelled_ms = sqlite3_column_int64(st, 6);
}

/* The items' counts and times, with the lock held. */
static int batch_progress(store *s, sqlite3 *db, batch_rec *b)
{
    sqlite3_stmt *st = store_prepare(s, db, "SELECT status, count(*), min(NULLIF(started_ms,0)), max(finished_ms) "
                                   "FROM tasks WHERE batch_id=?1 GROUP BY status");
    if (!st) return STORE_ERR;
    store_bind_text(st, 1, b->id);
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        const char *status = (const char *)sqlite3_column_text(st, 0);
        for (int i = 0; i < 5; i++)
            if (status && !strcmp(status, STATUS[i])) b->counts[i] = sqlite3_column_int64(st, 1);
        int64_t started = sqlite3_column_int64(st, 2), finished = sqlite3_column_int64(st, 3);
        if (started && (!b->first_started_ms || started < b->first_started_ms)) b->first_started_ms = started;
        if (finished > b->last_finished_ms) b->last_finished_ms = finished;
    }
    int rc = r == SQLITE_DONE ? STORE_OK : store_db_err(s, "read a batch's progress");
    sqlite3_finalize(st);
    return rc;
}

int store_batch_get(store *s, const char *id, batch_rec *out)
{
    if (!s || !out) return STORE_ERR;
    memset(out, 0, sizeof *out);
    if (!id) return STORE_NOT_FOUND;
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *st = store_prepare(s, db, BATCH_COLS "WHERE id=?1");
    int rc = STORE_ERR;
    if (st) {
        store_bind_text(st, 1, id);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW) { row_to_batch(st, out); rc = STORE_OK; }
        else if (r == SQLITE_DONE) rc = STORE_NOT_FOUND;
        else store_db_err(s, "get batch");
        sqlite3_finalize(st);
    }
    if (rc == STORE_OK) rc = batch_progress(s, db, out);
    store_db_unlock(s);
    return rc;
}

int store_batch_list(store *s, batch_rec *out, int max)
{
    if (!s || !out || max < 1) return s ? 0 : STORE_ERR;
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *st = store_prepare(s, db, BATCH_COLS "ORDER BY created_ms DESC, rowid DESC LIMIT ?1");
    int n = STORE_ERR;
    if (st) {
        sqlite3_bind_int(st, 1, max);
        int r;
        n = 0;
        while (n < max && (r = sqlite3_step(st)) == SQLITE_ROW) row_to_batch(st, &out[n++]);
        if (n < max && r != SQLITE_DONE) n = store_db_err(s, "list batches");
        sqlite3_finalize(st);
    }
    for (int i = 0; i < n; i++)
        if (batch_progress(s, db, &out[i]) != STORE_OK) { n = STORE_ERR; break; }
    store_db_unlock(s);
    return n;
}

static json_t *text_or_null(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? json_string((const char *)t) : json_null();
}

json_t *store_batch_items(store *s, const char *id)
{
    if (!s) return NULL;
    json_t *arr = json_array();
    if (!arr || !id) return arr;
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *st = store_prepare(s, db, "SELECT batch_index,custom_id,id,status,result_json,error_code,error_message,attempts "
                                   "FROM tasks WHERE batch_id=?1 ORDER BY batch_index");
    int r = SQLITE_ERROR;
    if (st) {
        store_bind_text(st, 1, id);
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            json_t *it = json_object();
            json_object_set_new(it, "index", json_integer(sqlite3_column_int(st, 0)));
            json_object_set_new(it, "custom_id", text_or_null(st, 1));
            json_object_set_new(it, "task_id", text_or_null(st, 2));
            json_object_set_new(it, "status", text_or_null(st, 3));
            json_object_set_new(it, "attempts", json_integer(sqlite3_column_int(st, 7)));
            const char *res = (const char *)sqlite3_column_text(st, 4);
            json_t *result = res ? json_loads(res, JSON_DECODE_ANY, NULL) : NULL;
            json_object_set_new(it, "result", result ? result : json_null());
            const char *code = (const char *)sqlite3_column_text(st, 5);
            const char *status = (const char *)sqlite3_column_text(st, 3);
            /* A succeeded item may carry the code of an earlier attempt
             * that failed; only an unfinished or failed item shows one. */
            if (status && !strcmp(status, "canceled"))
                json_object_set_new(it, "error", json_pack("{s:s, s:s}", "code", "canceled", "message",
                                                           "the item was cancelled"));
            else if (code && status && strcmp(status, "succeeded"))
                json_object_set_new(it, "error", json_pack("{s:s, s:o}", "code", code, "message",
                                                           text_or_null(st, 6)));
            else
                json_object_set_new(it, "error", json_null());
            json_array_append_new(arr, it);
        }
        sqlite3_finalize(st);
    }
    if (r != SQLITE_DONE) {
        if (st) store_db_err(s, "read a batch's items");
        json_decref(arr);
        arr = NULL;
    }
    store_db_unlock(s);
    return arr;
}

int store_batch_cancel(store *s, const char *id, int64_t now_ms, json_t **running)
{
    if (running) *running = NULL;
    if (!s) return STORE_ERR;
    if (!id) return STORE_NOT_FOUND;
    sqlite3 *db = store_db_lock(s);
    json_t *ids = json_array();
    int rc = exec(s, db, "BEGIN IMMEDIATE", "begin transaction");
    if (rc == STORE_OK) {
        sqlite3_stmt *st = store_prepare(s, db, "SELECT cancelled_ms, (SELECT count(*) FROM tasks WHERE batch_id=?1 AND "
                                       "status IN ('queued','running')) FROM batches WHERE id=?1");
        rc = STORE_ERR;
        if (st) {
            store_bind_text(st, 1, id);
            int r = sqlite3_step(st);
            if (r == SQLITE_ROW)
                rc = sqlite3_column_int64(st, 0) || !sqlite3_column_int64(st, 1) ? STORE_STALE : STORE_OK;
            else if (r == SQLITE_DONE) rc = STORE_NOT_FOUND;
            else store_db_err(s, "read batch");
            sqlite3_finalize(st);
        }
    }
    if (rc == STORE_OK) {
        sqlite3_stmt *st = store_prepare(s, db, "SELECT id FROM tasks WHERE batch_id=?1 AND status='running'");
        rc = STORE_ERR;
        if (st) {
            store_bind_text(st, 1, id);
            int r;
            while ((r = sqlite3_step(st)) == SQLITE_ROW)
                json_array_append_new(ids, json_string((const char *)sqlite3_column_text(st, 0)));
            rc = r == SQLITE_DONE ? STORE_OK : store_db_err(s, "read a batch's running items");
            sqlite3_finalize(st);
        }
    }
    if (rc == STORE_OK) {
        sqlite3_stmt *st = store_prepare(s, db, "UPDATE attempts SET ended_ms=?2, outcome='canceled', "
                                       "message='the batch was cancelled' WHERE outcome IS NULL AND task_id IN "
                                       "(SELECT id FROM tasks WHERE batch_id=?1 AND status='running')");
        if (st) { store_bind_text(st, 1, id); sqlite3_bind_int64(st, 2, now_ms); }
        rc = store_step_done(s, st, "close a batch's attempts");
    }
    if (rc == STORE_OK) {
        sqlite3_stmt *st = store_prepare(s, db, "UPDATE tasks SET status='canceled', finished_ms=?2 "
                                       "WHERE batch_id=?1 AND status IN ('queued','running')");
        if (st) { store_bind_text(st, 1, id); sqlite3_bind_int64(st, 2, now_ms); }
        rc = store_step_done(s, st, "cancel a batch's items");
    }
    if (rc == STORE_OK) {
        sqlite3_stmt *st = store_prepare(s, db, "UPDATE batches SET cancelled_ms=?2 WHERE id=?1");
        if (st) { store_bind_text(st, 1, id); sqlite3_bind_int64(st, 2, now_ms); }
        rc = store_step_done(s, st, "cancel batch");
    }
    if (rc == STORE_OK || rc == STORE_ERR) rc = end_tx(s, db, rc);
    else sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    store_db_unlock(s);
    if (rc == STORE_OK && running) *running = ids;
    else json_decref(ids);
    return rc;
}
