/* store/rollouts.c: the rollout half of store.h, on store/sqlite.c's
 * connection.  A rollout changes a handful of times in its life, so each
 * call prepares its statement and holds the store's mutex throughout. */
#include <stdlib.h>

#include "store/sqlite_int.h"
#include "store/store.h"

int store_rollout_put(store *s, const char *name, const char *rollout_json, int64_t updated_ms)
{
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *st = NULL;
    int rc = STORE_OK;
    if (sqlite3_prepare_v2(db,
                           "INSERT INTO rollouts(name, rollout_json, updated_ms) VALUES(?1, ?2, ?3) "
                           "ON CONFLICT(name) DO UPDATE SET rollout_json=excluded.rollout_json, "
                           "updated_ms=excluded.updated_ms",
                           -1, &st, NULL) != SQLITE_OK) {
        rc = store_db_err(s, "prepare the rollout write");
    } else {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, rollout_json, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, updated_ms);
        if (sqlite3_step(st) != SQLITE_DONE) rc = store_db_err(s, "write a rollout");
    }
    sqlite3_finalize(st);
    store_db_unlock(s);
    return rc;
}

json_t *store_rollout_all(store *s)
{
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *st = NULL;
    json_t *all = NULL;
    if (sqlite3_prepare_v2(db, "SELECT rollout_json FROM rollouts ORDER BY updated_ms, name", -1, &st, NULL) !=
        SQLITE_OK) {
        store_db_err(s, "prepare the rollout read");
        goto out;
    }
    all = json_array();
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        const char *text = (const char *)sqlite3_column_text(st, 0);
        json_t *one = text ? json_loads(text, 0, NULL) : NULL;
        if (one) json_array_append_new(all, one);
    }
    if (r != SQLITE_DONE) {
        store_db_err(s, "read the rollouts");
        json_decref(all);
        all = NULL;
    }
out:
    sqlite3_finalize(st);
    store_db_unlock(s);
    return all;
}
