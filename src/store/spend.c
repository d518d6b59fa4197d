/* store/spend: the cloud_spend table (see store.h): one row per local day
 * and API key, added to as cloud answers are charged. */
#include <sqlite3.h>

#include "store/sqlite_int.h"
#include "store/store.h"

int store_spend_add(store *s, const char *day, const char *owner, int64_t requests, int64_t tokens, double cost)
{
    if (!s) return STORE_ERR;
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *st = NULL;
    int rc = STORE_ERR;
    if (sqlite3_prepare_v2(db,
                           "INSERT INTO cloud_spend(day,owner,requests,tokens,cost) VALUES(?1,?2,?3,?4,?5) "
                           "ON CONFLICT(day,owner) DO UPDATE SET requests=requests+excluded.requests,"
                           " tokens=tokens+excluded.tokens, cost=cost+excluded.cost",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, day, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, owner, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 3, requests);
        sqlite3_bind_int64(st, 4, tokens);
        sqlite3_bind_double(st, 5, cost);
        rc = sqlite3_step(st) == SQLITE_DONE ? STORE_OK : STORE_ERR;
    }
    if (rc != STORE_OK) store_db_err(s, "record cloud spend");
    sqlite3_finalize(st);
    store_db_unlock(s);
    return rc;
}

int store_spend_load(store *s, const char *day,
                     void (*fn)(void *ctx, const char *owner, int64_t requests, int64_t tokens, double cost),
                     void *ctx)
{
    if (!s) return STORE_ERR;
    sqlite3 *db = store_db_lock(s);
    sqlite3_stmt *st = NULL;
    int rc = STORE_ERR;
    if (sqlite3_prepare_v2(db, "SELECT owner,requests,tokens,cost FROM cloud_spend WHERE day=?1", -1, &st, NULL) ==
        SQLITE_OK) {
        sqlite3_bind_text(st, 1, day, -1, SQLITE_TRANSIENT);
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            const unsigned char *owner = sqlite3_column_text(st, 0);
            fn(ctx, owner ? (const char *)owner : "", sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2),
               sqlite3_column_double(st, 3));
        }
        rc = r == SQLITE_DONE ? STORE_OK : STORE_ERR;
    }
    if (rc != STORE_OK) store_db_err(s, "load cloud spend");
    sqlite3_finalize(st);
    store_db_unlock(s);
    return rc;
}
