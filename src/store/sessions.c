/* store/sessions.c: the conversation-session half of store.h, on
 * store/sqlite.c's connection.
 *
 * Like store/batches.c, statements are prepared per call, so nothing here
 * adds to the connection's standing state.  Each call holds the store's mutex
 * throughout; a write runs in one BEGIN IMMEDIATE transaction, so two turns
 * of one session that finish together both land, in some order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sqlite_int.h"
#include "store/store.h"




static const char *col(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? (const char *)t : NULL;
}

void session_rec_free(session_rec *r)
{
    if (!r) return;
    json_decref(r->system);
    json_decref(r->messages);
    free(r->summary);
    memset(r, 0, sizeof *r);
}

static int read_messages(store *s, sqlite3 *db, session_rec *out)
{
    sqlite3_stmt *st = store_prepare(s, db, "SELECT seq, message_json FROM session_messages WHERE owner=?1 AND "
                                   "session_id=?2 ORDER BY seq");
    if (!st) return STORE_ERR;
    store_bind_text(st, 1, out->owner);
    store_bind_text(st, 2, out->id);
    int r, first = 1;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (first) out->first_seq = sqlite3_column_int64(st, 0);
        first = 0;
        const char *m = col(st, 1);
        json_t *j = m ? json_loads(m, 0, NULL) : NULL;
        json_array_append_new(out->messages, j ? j : json_object());
    }
    int rc = r == SQLITE_DONE ? STORE_OK : store_db_err(s, "read a session's messages");
    sqlite3_finalize(st);
    return rc;
}

int store_session_get(store *s, const char *owner, const char *id, int64_t now_ms, session_rec *out)
{
    memset(out, 0, sizeof *out);
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *st = store_prepare(s, db, "SELECT model, system_json, summary, is_private, private_rule, next_seq,"
                                   " created_ms, updated_ms, expires_ms FROM sessions WHERE owner=?1 AND id=?2");
    int rc = STORE_ERR;
    if (!st) goto out;
    store_bind_text(st, 1, owner);
    store_bind_text(st, 2, id);
    int r = sqlite3_step(st);
    if (r == SQLITE_DONE) rc = STORE_NOT_FOUND;
    else if (r != SQLITE_ROW) rc = store_db_err(s, "read a session");
    else if (sqlite3_column_int64(st, 8) && sqlite3_column_int64(st, 8) <= now_ms) rc = STORE_NOT_FOUND;
    else {
        snprintf(out->owner, sizeof out->owner, "%s", owner);
        snprintf(out->id, sizeof out->id, "%s", id);
        snprintf(out->model, sizeof out->model, "%s", col(st, 0) ? col(st, 0) : "");
        out->system = col(st, 1) ? json_loads(col(st, 1), 0, NULL) : NULL;
        if (!json_is_array(out->system)) {
            json_decref(out->system);
            out->system = json_array();
        }
        out->summary = col(st, 2) ? strdup(col(st, 2)) : NULL;
        out->is_private = sqlite3_column_int(st, 3);
        snprintf(out->private_rule, sizeof out->private_rule, "%s", col(st, 4) ? col(st, 4) : "");
        out->first_seq = sqlite3_column_int64(st, 5);
        out->created_ms = sqlite3_column_int64(st, 6);
        out->updated_ms = sqlite3_column_int64(st, 7);
        out->expires_ms = sqlite3_column_int64(st, 8);
        out->messages = json_array();
        rc = STORE_OK;
    }
    sqlite3_finalize(st);
    if (rc == STORE_OK) rc = read_messages(s, db, out);
out:
    store_db_unlock(s);
    if (rc != STORE_OK) session_rec_free(out);
    return rc;
}

static char *dump_or_null(const json_t *j)
{
    return j ? json_dumps(j, JSON_COMPACT) : NULL;
}

static int write_tx(store *s, sqlite3 *db, const session_write *w)
{
    /* An expired session that was not swept yet is gone: a new one starts. */
    sqlite3_stmt *gone = store_prepare(s, db, "DELETE FROM sessions WHERE owner=?1 AND id=?2 AND expires_ms>0 AND expires_ms<=?3");
    if (gone) {
        store_bind_text(gone, 1, w->owner);
        store_bind_text(gone, 2, w->id);
        sqlite3_bind_int64(gone, 3, w->now_ms);
    }
    if (store_step_done(s, gone, "expire a session") != STORE_OK) return STORE_ERR;
    char *system = dump_or_null(w->system);
    int64_t expires = w->ttl_ms > 0 ? w->now_ms + w->ttl_ms : 0;
    /* Privacy only goes up, and its first rule stays. */
    sqlite3_stmt *st = store_prepare(s, db,
                            "INSERT INTO sessions(owner,id,model,system_json,summary,is_private,private_rule,"
                            "created_ms,updated_ms,expires_ms) VALUES(?1,?2,?3,COALESCE(?4,'[]'),?5,?6,"
                            "CASE WHEN ?6 THEN ?7 END,?8,?8,?9) ON CONFLICT(owner,id) DO UPDATE SET "
                            "model=CASE WHEN ?3<>'' THEN ?3 ELSE model END, system_json=COALESCE(?4,system_json),"
                            "summary=COALESCE(?5,summary), private_rule=CASE WHEN is_private THEN private_rule "
                            "WHEN ?6 THEN ?7 END, is_private=MAX(is_private,?6), updated_ms=?8, expires_ms=?9");
    int rc = STORE_ERR;
    if (st) {
        store_bind_text(st, 1, w->owner);
        store_bind_text(st, 2, w->id);
        store_bind_text(st, 3, w->model ? w->model : "");
        store_bind_text(st, 4, system);
        store_bind_text(st, 5, w->summary);
        sqlite3_bind_int(st, 6, w->is_private ? 1 : 0);
        store_bind_text(st, 7, w->private_rule ? w->private_rule : "");
        sqlite3_bind_int64(st, 8, w->now_ms);
        sqlite3_bind_int64(st, 9, expires);
        rc = store_step_done(s, st, "write a session");
    }
    free(system);
    if (rc == STORE_OK && w->drop_before_seq > 0) {
        st = store_prepare(s, db, "DELETE FROM session_messages WHERE owner=?1 AND session_id=?2 AND seq<?3");
        if (st) {
            store_bind_text(st, 1, w->owner);
            store_bind_text(st, 2, w->id);
            sqlite3_bind_int64(st, 3, w->drop_before_seq);
        }
        rc = store_step_done(s, st, "drop a session's oldest messages");
    }
    size_t i;
    json_t *m;
    json_array_foreach(w->append, i, m) {
        if (rc != STORE_OK) break;
        char *text = json_dumps(m, JSON_COMPACT);
        st = text ? store_prepare(s, db,
                         "INSERT INTO session_messages(owner,session_id,seq,message_json) SELECT ?1,?2,next_seq,?3 "
                         "FROM sessions WHERE owner=?1 AND id=?2")
                  : NULL;
        if (st) {
            store_bind_text(st, 1, w->owner);
            store_bind_text(st, 2, w->id);
            store_bind_text(st, 3, text);
        }
        rc = store_step_done(s, st, "append a session message");
        free(text);
        if (rc != STORE_OK) break;
        st = store_prepare(s, db, "UPDATE sessions SET next_seq=next_seq+1 WHERE owner=?1 AND id=?2");
        if (st) {
            store_bind_text(st, 1, w->owner);
            store_bind_text(st, 2, w->id);
        }
        rc = store_step_done(s, st, "number a session message");
    }
    return rc;
}

int store_session_write(store *s, const session_write *w)
{
    sqlite3 *db = store_db_lock(s);
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? STORE_OK
                                                                             : store_db_err(s, "begin");
    if (rc == STORE_OK) rc = write_tx(s, db, w);
    if (rc == STORE_OK && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) rc = store_db_err(s, "commit");
    if (rc != STORE_OK) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    store_db_unlock(s);
    return rc;
}

int store_session_delete(store *s, const char *owner, const char *id)
{
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *st = store_prepare(s, db, "DELETE FROM sessions WHERE owner=?1 AND id=?2");
    if (st) {
        store_bind_text(st, 1, owner);
        store_bind_text(st, 2, id);
    }
    int rc = store_step_done(s, st, "delete a session");
    if (rc == STORE_OK && sqlite3_changes(db) == 0) rc = STORE_NOT_FOUND;
    store_db_unlock(s);
    return rc;
}

long store_session_expire(store *s, int64_t now_ms)
{
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *st = store_prepare(s, db, "DELETE FROM sessions WHERE expires_ms > 0 AND expires_ms <= ?1");
    if (st) sqlite3_bind_int64(st, 1, now_ms);
    long n = store_step_done(s, st, "expire sessions") == STORE_OK ? (long)sqlite3_changes(db) : -1;
    store_db_unlock(s);
    return n;
}
