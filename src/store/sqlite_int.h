/* store/sqlite_int: what the store's other SQLite files (store/batches.c)
 * share with store/sqlite.c, which owns the connection.  Not for callers of
 * store.h. */
#ifndef GPUPOOL_STORE_SQLITE_INT_H
#define GPUPOOL_STORE_SQLITE_INT_H

#include <sqlite3.h>

#include "store/store.h"

/* Takes the store's mutex and returns its connection; every use of the
 * connection happens between this and store_db_unlock. */
sqlite3 *store_db_lock(store *s);
void store_db_unlock(store *s);
/* Records the connection's last error as "what: message" for store_errmsg;
 * returns STORE_ERR.  Call with the lock held. */
int store_db_err(store *s, const char *what);

#endif
