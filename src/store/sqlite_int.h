/* store/sqlite_int: what the store's other SQLite files (store/batches.c)
 * share with store/sqlite.c, which owns the connection.  Not for callers of
 * store.h. */
#ifndef GPUPOOL_STORE_SQLITE_INT_H
#define GPUPOOL_STORE_SQLITE_INT_H

#include <jansson.h>
#include <sqlite3.h>
#include <stdint.h>

#include "store/store.h"

/* Takes the store's mutex and returns its connection; every use of the
 * connection happens between this and store_db_unlock. */
sqlite3 *store_db_lock(store *s);
void store_db_unlock(store *s);
/* Records the connection's last error as "what: message" for store_errmsg;
 * returns STORE_ERR.  Call with the lock held. */
int store_db_err(store *s, const char *what);
/* Binds v (copied), or NULL when v is NULL. */
void store_bind_text(sqlite3_stmt *st, int i, const char *v);
/* A one-off statement on db; NULL (the error recorded) when it will not compile. */
sqlite3_stmt *store_prepare(store *s, sqlite3 *db, const char *sql);
/* Steps st to its end and finalizes it (NULL: STORE_ERR); STORE_OK, or
 * STORE_ERR with "what: message" recorded. */
int store_step_done(store *s, sqlite3_stmt *st, const char *what);

/* The one INSERT of a task, and its binding: plain tasks (with their
 * idempotency key) and batch items (with their batch, index and custom id)
 * go into the table the same way. */
#define STORE_TASK_INSERT_SQL                                                                        \
    "INSERT INTO tasks(id,type,model,priority,status,attempts,max_attempts,input_json,idem_key,"       \
    "body_hash,created_ms,owner,prompt_tokens,max_tokens,sensitivity,route_rule,batch_id,batch_index," \
    "custom_id) VALUES(?1,?2,?3,?4,'queued',0,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)"
void store_bind_task(sqlite3_stmt *st, const task_new *t, const char *batch_id, int batch_index,
                     const char *custom_id);

/* store/sessions.c's tables: a conversation's row (its owner is part of
 * the key, so two API keys never share one) and its messages in order. */
#define STORE_SESSIONS_SCHEMA                                                                  \
    "CREATE TABLE IF NOT EXISTS sessions("                                                     \
    " owner TEXT NOT NULL, id TEXT NOT NULL, model TEXT NOT NULL DEFAULT '',"                  \
    " system_json TEXT NOT NULL DEFAULT '[]', summary TEXT,"                                   \
    " is_private INTEGER NOT NULL DEFAULT 0, private_rule TEXT,"                               \
    " next_seq INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL,"                       \
    " updated_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL DEFAULT 0,"                     \
    " PRIMARY KEY(owner, id)) WITHOUT ROWID;"                                                  \
    "CREATE INDEX IF NOT EXISTS sessions_expires ON sessions(expires_ms) WHERE expires_ms > 0;" \
    "CREATE TABLE IF NOT EXISTS session_messages("                                             \
    " owner TEXT NOT NULL, session_id TEXT NOT NULL, seq INTEGER NOT NULL,"                    \
    " message_json TEXT NOT NULL,"                                                             \
    " PRIMARY KEY(owner, session_id, seq),"                                                    \
    " FOREIGN KEY(owner, session_id) REFERENCES sessions(owner, id) ON DELETE CASCADE) WITHOUT ROWID;"

/* JSON for a column value: null for a NULL string or a 0 time (display). */
json_t *store_json_str(const char *v);
json_t *store_json_ms(int64_t v);

/* The runs tables (store/runs.c), created by schema version 5. */
extern const char STORE_RUNS_SCHEMA[];
/* store/schema.c: every table, and the steps from older versions. */
extern const char STORE_SCHEMA[];
extern const char STORE_MIGRATE_1_2[], STORE_MIGRATE_2_3[], STORE_MIGRATE_3_4[];

#endif
