/* store/schema: the SQL that makes the store's tables, and the steps that
 * bring an older file up to date (store/sqlite.c runs them by the file's
 * PRAGMA user_version).  Tables added since version 3 come with the schema
 * alone: it is all CREATE ... IF NOT EXISTS, run whenever the file is older
 * than this build. */
#include "store/sqlite_int.h"

/* store/rollouts.c: a rollout is its API view, kept whole. */
#define ROLLOUTS_TABLE                        \
    "CREATE TABLE IF NOT EXISTS rollouts("    \
    " name TEXT PRIMARY KEY NOT NULL,"        \
    " rollout_json TEXT NOT NULL,"            \
    " updated_ms INTEGER NOT NULL);"

const char STORE_SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS tasks("
    " id TEXT PRIMARY KEY NOT NULL,"
    " type TEXT NOT NULL,"
    " model TEXT NOT NULL,"
    " priority INTEGER NOT NULL DEFAULT 0,"
    " status TEXT NOT NULL"
    "  CHECK(status IN ('queued','running','succeeded','failed','canceled')),"
    " node TEXT,"
    " attempts INTEGER NOT NULL DEFAULT 0,"
    " max_attempts INTEGER NOT NULL DEFAULT 1,"
    " input_json TEXT NOT NULL,"
    " result_json TEXT,"
    " error_code TEXT,"
    " error_message TEXT,"
    " idem_key TEXT UNIQUE," /* NULLs never collide */
    " body_hash TEXT,"
    " created_ms INTEGER NOT NULL,"
    " started_ms INTEGER NOT NULL DEFAULT 0,"
    " finished_ms INTEGER NOT NULL DEFAULT 0,"
    " owner TEXT NOT NULL DEFAULT '',"
    " prompt_tokens REAL NOT NULL DEFAULT 0,"
    " max_tokens REAL NOT NULL DEFAULT 0,"
    " sensitivity TEXT NOT NULL DEFAULT 'normal',"
    " route_rule TEXT,"
    " batch_id TEXT,"     /* NULL unless the task is an item of a batch */
    " batch_index INTEGER,"
    " custom_id TEXT);"
    /* rowid is implicitly the last column of every index, so this one gives
     * the full dispatch order (status, priority DESC, created_ms, rowid). */
    "CREATE INDEX IF NOT EXISTS tasks_dispatch ON tasks(status, priority DESC, created_ms ASC);"
    "CREATE INDEX IF NOT EXISTS tasks_created ON tasks(created_ms);"
    "CREATE TABLE IF NOT EXISTS attempts("
    " task_id TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,"
    " attempt INTEGER NOT NULL,"
    " node TEXT NOT NULL,"
    " started_ms INTEGER NOT NULL,"
    " ended_ms INTEGER NOT NULL DEFAULT 0,"
    " outcome TEXT," /* NULL while the attempt is open */
    " message TEXT,"
    " PRIMARY KEY(task_id, attempt)) WITHOUT ROWID;"
    /* store/batches.c: a batch is this row plus its items, ordinary tasks. */
    "CREATE INDEX IF NOT EXISTS tasks_batch ON tasks(batch_id, batch_index) WHERE batch_id IS NOT NULL;"
    "CREATE TABLE IF NOT EXISTS batches("
    " id TEXT PRIMARY KEY NOT NULL,"
    " type TEXT NOT NULL,"
    " model TEXT NOT NULL,"
    " priority INTEGER NOT NULL,"
    " total INTEGER NOT NULL,"
    " idem_key TEXT UNIQUE,"
    " body_hash TEXT,"
    " owner TEXT NOT NULL DEFAULT '',"
    " created_ms INTEGER NOT NULL,"
    " cancelled_ms INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS batches_created ON batches(created_ms);"
    /* From version 5: conversation sessions (store/sessions.c), what each
     * API key spent on the cloud per local day (store/spend.c), and
     * rollouts (store/rollouts.c). */
    STORE_SESSIONS_SCHEMA
    "CREATE TABLE IF NOT EXISTS cloud_spend("
    " day TEXT NOT NULL,"
    " owner TEXT NOT NULL,"
    " requests INTEGER NOT NULL DEFAULT 0,"
    " tokens INTEGER NOT NULL DEFAULT 0,"
    " cost REAL NOT NULL DEFAULT 0,"
    " PRIMARY KEY(day, owner)) WITHOUT ROWID;"
    ROLLOUTS_TABLE;

/* From version 1: the fields the queue orders by. */
const char STORE_MIGRATE_1_2[] =
    "ALTER TABLE tasks ADD COLUMN owner TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE tasks ADD COLUMN prompt_tokens REAL NOT NULL DEFAULT 0;"
    "ALTER TABLE tasks ADD COLUMN max_tokens REAL NOT NULL DEFAULT 0;";
/* From version 2: the task's classification, which binds every attempt. */
const char STORE_MIGRATE_2_3[] =
    "ALTER TABLE tasks ADD COLUMN sensitivity TEXT NOT NULL DEFAULT 'normal';"
    "ALTER TABLE tasks ADD COLUMN route_rule TEXT;";

/* From version 3: batches (the table and index come with SCHEMA).  From
 * version 5: sessions, cloud_spend and rollouts, which come with SCHEMA alone,
 * and the runs tables. */
const char STORE_MIGRATE_3_4[] =
    "ALTER TABLE tasks ADD COLUMN batch_id TEXT;"
    "ALTER TABLE tasks ADD COLUMN batch_index INTEGER;"
    "ALTER TABLE tasks ADD COLUMN custom_id TEXT;";

