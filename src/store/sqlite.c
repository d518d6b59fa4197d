/* store/sqlite.c: the SQLite implementation of store.h.
 *
 * Owns dir/gpupool.db: its schema (store/schema.c, versioned with PRAGMA user_version), the
 * tasks and attempts tables, and every state transition of a task.  One
 * connection in WAL mode with synchronous=FULL, so a committed write survives
 * kill -9 and power loss.  A pthread mutex serialises all use of the
 * connection and of its prepared statements; a transition that reads before it
 * writes runs inside one BEGIN IMMEDIATE transaction under that mutex, so it is
 * atomic and race-free.  Attempt rows are "open" while their outcome is NULL. */
#include "store/store.h"
#include "store/sqlite_int.h"
#include "store/audit.h"
#include "store/webhooks.h"
#include "util/err.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/opts.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SCHEMA_VERSION 6
#define BUSY_TIMEOUT_MS 5000

enum { Q_QUEUED, Q_RUNNING, Q_SUCCEEDED, Q_FAILED, Q_CANCELED };
static const char *const STATUS[5] = {"queued", "running", "succeeded", "failed", "canceled"};

#define TASK_COLS                                                                   \
    "SELECT id,type,model,status,node,input_json,result_json,error_code,error_message," \
    "sensitivity,route_rule,batch_id,"                                                  \
    "priority,attempts,max_attempts,created_ms,started_ms,finished_ms FROM tasks "

enum {
    ST_BEGIN, ST_COMMIT, ST_ROLLBACK, ST_INSERT, ST_IDEM, ST_GET, ST_STATE, ST_LIST,
    ST_LIST_STATUS, ST_CLAIM, ST_ATT_NEW, ST_FINISH, ST_ATT_END, ST_ATT_CLOSE,
    ST_REQUEUE, ST_CANCEL, ST_RQ_ATT, ST_RQ_ALL, ST_COUNTS, ST_ATTEMPTS, ST_AHEAD, ST_QUEUED, ST_HEDGE, ST_ATT_OPEN, ST_N
};

static const char *const SQL[ST_N] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_INSERT] = STORE_TASK_INSERT_SQL,
    [ST_IDEM] = "SELECT id, body_hash FROM tasks WHERE idem_key=?1",
    [ST_GET] = TASK_COLS "WHERE id=?1",
    [ST_STATE] = "SELECT status, attempts FROM tasks WHERE id=?1",
    [ST_LIST] = TASK_COLS "ORDER BY created_ms DESC, rowid DESC LIMIT ?1",
    [ST_LIST_STATUS] = TASK_COLS "WHERE status=?2 ORDER BY created_ms DESC, rowid DESC LIMIT ?1",
    [ST_CLAIM] = "UPDATE tasks SET status='running', node=?2, attempts=attempts+1, "
                 "started_ms=?3 WHERE id=?1",
    [ST_ATT_NEW] = "INSERT INTO attempts(task_id,attempt,node,started_ms) VALUES(?1,?2,?3,?4)",
    /* The task's node becomes the node of the attempt that finished it. */
    [ST_FINISH] = "UPDATE tasks SET status=?2, result_json=?3, error_code=?4, error_message=?5,"
                  " finished_ms=?6, node=COALESCE((SELECT node FROM attempts"
                  " WHERE task_id=?1 AND attempt=?7), node) WHERE id=?1",
    [ST_ATT_END] = "UPDATE attempts SET ended_ms=?3, outcome=?4, message=?5 "
                   "WHERE task_id=?1 AND attempt=?2",
    [ST_ATT_CLOSE] = "UPDATE attempts SET ended_ms=?2, outcome=?3, message=?4 "
                     "WHERE task_id=?1 AND outcome IS NULL",
    [ST_REQUEUE] = "UPDATE tasks SET status='queued', node=NULL, error_code=?2, "
                   "error_message=?3 WHERE id=?1",
    [ST_CANCEL] = "UPDATE tasks SET status='canceled', finished_ms=?2 WHERE id=?1",
    [ST_RQ_ATT] = "UPDATE attempts SET ended_ms=?1, outcome='coordinator_restart', message=?2 "
                  "WHERE outcome IS NULL AND task_id IN (SELECT id FROM tasks WHERE status='running')",
    [ST_RQ_ALL] = "UPDATE tasks SET status='queued', node=NULL, error_code='coordinator_restart',"
                  " error_message=?1 WHERE status='running'",
    [ST_COUNTS] = "SELECT status, count(*) FROM tasks GROUP BY status",
    /* Queued tasks dispatched before this one: higher priority, or the same
     * priority and older (rowid breaks ties, as in the dispatch order). */
    [ST_AHEAD] = "SELECT count(*) FROM tasks t, tasks me WHERE me.id=?1 AND me.status='queued' "
                 "AND t.status='queued' AND (t.priority > me.priority OR (t.priority = me.priority AND "
                 "(t.created_ms < me.created_ms OR (t.created_ms = me.created_ms AND t.rowid < me.rowid))))",
    [ST_QUEUED] = "SELECT id,model,priority,owner,prompt_tokens,max_tokens,attempts,max_attempts,type,sensitivity "
                  "FROM tasks WHERE status='queued' ORDER BY priority DESC, created_ms ASC, rowid ASC LIMIT ?1",
    [ST_ATT_OPEN] = "SELECT count(*) FROM attempts WHERE task_id=?1 AND attempt=?2 AND outcome IS NULL",
    [ST_HEDGE] = "UPDATE tasks SET attempts=attempts+1 WHERE id=?1 AND status='running'",
    [ST_ATTEMPTS] = "SELECT attempt,node,started_ms,ended_ms,outcome,message FROM attempts "
                    "WHERE task_id=?1 ORDER BY attempt",
};

static const char RESTART_MSG[] = "the coordinator restarted while the attempt was running";

struct store {
    sqlite3 *db;
    pthread_mutex_t mu;
    sqlite3_stmt *st[ST_N];
    char err[512];
};

/* ---- small helpers ------------------------------------------------------ */


/* Records the connection's last error as "what: message"; returns STORE_ERR. */
static int db_err(store *s, const char *what) {
    err_out(s->err, sizeof s->err, "%s: %s", what, sqlite3_errmsg(s->db));
    return STORE_ERR;
}

sqlite3 *store_db_lock(store *s) {
    pthread_mutex_lock(&s->mu);
    return s->db;
}

void store_db_unlock(store *s) {
    pthread_mutex_unlock(&s->mu);
}

void store_bind_text(sqlite3_stmt *st, int i, const char *v)
{
    if (v) sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(st, i);
}

sqlite3_stmt *store_prepare(store *s, sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        store_db_err(s, "prepare a statement");
        sqlite3_finalize(st);
        return NULL;
    }
    return st;
}

int store_step_done(store *s, sqlite3_stmt *st, const char *what)
{
    if (!st) return STORE_ERR;
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {}
    int rc = r == SQLITE_DONE ? STORE_OK : store_db_err(s, what);
    sqlite3_finalize(st);
    return rc;
}

int store_db_err(store *s, const char *what) {
    return db_err(s, what);
}

/* A prepared statement, reset and with its bindings cleared. */
static sqlite3_stmt *ps(store *s, int k) {
    sqlite3_stmt *st = s->st[k];
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
}


/* Steps a statement to completion, ignoring rows; resets it afterwards. */
static int run_st(store *s, sqlite3_stmt *st, const char *what) {
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {}
    if (rc != SQLITE_DONE) db_err(s, what);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? STORE_OK : STORE_ERR;
}

static char *col_dup(sqlite3_stmt *st, int i) {
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? strdup((const char *)t) : NULL;
}

static int status_index(const char *st) {
    for (int i = 0; st && i < 5; i++)
        if (strcmp(st, STATUS[i]) == 0) return i;
    return -1;
}

static int same_str(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int begin(store *s) {
    return run_st(s, ps(s, ST_BEGIN), "begin transaction");
}

/* Commits unless rc is STORE_ERR (then rolls back); returns the final rc. */
static int end_tx(store *s, int rc) {
    if (rc != STORE_ERR) {
        if (run_st(s, ps(s, ST_COMMIT), "commit") == STORE_OK) return rc;
        rc = STORE_ERR;
    }
    sqlite3_stmt *st = ps(s, ST_ROLLBACK); /* keeps s->err: no db_err here */
    sqlite3_step(st);
    sqlite3_reset(st);
    return rc;
}

/* Inside a transaction: a task's status index and attempt count. */
static int task_state(store *s, const char *id, int *status, int *attempts) {
    sqlite3_stmt *st = ps(s, ST_STATE);
    store_bind_text(st, 1, id);
    int rc = sqlite3_step(st), out = STORE_OK;
    if (rc == SQLITE_ROW) {
        *status = status_index((const char *)sqlite3_column_text(st, 0));
        *attempts = sqlite3_column_int(st, 1);
    } else if (rc == SQLITE_DONE) {
        out = STORE_NOT_FOUND;
    } else {
        out = db_err(s, "read task state");
    }
    sqlite3_reset(st);
    return out;
}

/* Sets an attempt row's outcome (task_id, attempt, ended, outcome, message). */
static int end_attempt(store *s, const char *id, int attempt, int64_t ended,
                       const char *outcome, const char *message) {
    sqlite3_stmt *st = ps(s, ST_ATT_END);
    store_bind_text(st, 1, id);
    sqlite3_bind_int(st, 2, attempt);
    sqlite3_bind_int64(st, 3, ended);
    store_bind_text(st, 4, outcome);
    store_bind_text(st, 5, message);
    return run_st(s, st, "record attempt outcome");
}

/* Closes every attempt of the task that is still open. */
static int close_open_attempts(store *s, const char *id, int64_t ended, const char *outcome,
                               const char *message) {
    sqlite3_stmt *st = ps(s, ST_ATT_CLOSE);
    store_bind_text(st, 1, id);
    sqlite3_bind_int64(st, 2, ended);
    store_bind_text(st, 3, outcome);
    store_bind_text(st, 4, message);
    return run_st(s, st, "close open attempts");
}

/* ---- open / close ------------------------------------------------------- */

/* Runs a single-row statement and copies its first column as text. */
static int query_text(sqlite3 *db, const char *sql, char *out, size_t outlen) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            const unsigned char *t = sqlite3_column_text(st, 0);
            snprintf(out, outlen, "%s", t ? (const char *)t : "");
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            out[0] = '\0';
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    return rc;
}

/* Pragmas, schema and statements; on failure writes err and returns -1. */
static int setup(store *s, const char *path, char *err, size_t errlen) {
    char val[64];
    const char *step = "set journal mode";
    if (query_text(s->db, "PRAGMA journal_mode=WAL", val, sizeof val) != SQLITE_OK) goto fail;
    if (strcmp(val, "wal") != 0)
        log_warn("store: %s: journal mode is %s, not wal", path, val);
    step = "configure";
    if (sqlite3_exec(s->db, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;", NULL, NULL,
                     NULL) != SQLITE_OK)
        goto fail;
    step = "read schema version";
    if (query_text(s->db, "PRAGMA user_version", val, sizeof val) != SQLITE_OK) goto fail;
    long ver = strtol(val, NULL, 10);
    if (ver > SCHEMA_VERSION) {
        err_out(err, errlen, "store: %s has schema version %ld, newer than this gpupool's %d",
                path, ver, SCHEMA_VERSION);
        return -1;
    }
    if (ver == 1) {
        step = "upgrade the schema from version 1";
        if (sqlite3_exec(s->db, STORE_MIGRATE_1_2, NULL, NULL, NULL) != SQLITE_OK) goto fail;
    }
    if (ver >= 1 && ver <= 2) {
        step = "upgrade the schema from version 2";
        if (sqlite3_exec(s->db, STORE_MIGRATE_2_3, NULL, NULL, NULL) != SQLITE_OK) goto fail;
    }
    if (ver >= 1 && ver <= 3) {
        step = "upgrade the schema from version 3";
        if (sqlite3_exec(s->db, STORE_MIGRATE_3_4, NULL, NULL, NULL) != SQLITE_OK) goto fail;
    }
    if (ver < 5) {
        /* From version 4: app and pipeline runs (store/runs.c). */
        step = "create the runs tables";
        if (sqlite3_exec(s->db, STORE_RUNS_SCHEMA, NULL, NULL, NULL) != SQLITE_OK) goto fail;
    }
    step = "add the audit table (version 5)";
    if (ver < 5 && sqlite3_exec(s->db, STORE_AUDIT_SCHEMA, NULL, NULL, NULL) != SQLITE_OK) goto fail;
    step = "add the webhook tables (version 6)";
    if (ver < 6 && sqlite3_exec(s->db, STORE_WEBHOOK_SCHEMA, NULL, NULL, NULL) != SQLITE_OK) goto fail;
    if (ver < SCHEMA_VERSION) {
        size_t sqlcap = strlen(STORE_SCHEMA) + 96;
        char *sql = malloc(sqlcap);
        if (!sql) goto fail;
        snprintf(sql, sqlcap, "BEGIN IMMEDIATE; %s PRAGMA user_version=%d; COMMIT;", STORE_SCHEMA, SCHEMA_VERSION);
        step = "create schema";
        int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
        free(sql);
        if (rc != SQLITE_OK) {
            err_out(err, errlen, "store: %s: %s: %s", path, step, sqlite3_errmsg(s->db));
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
    }
    step = "prepare statements";
    for (int i = 0; i < ST_N; i++)
        if (sqlite3_prepare_v3(s->db, SQL[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i], NULL) !=
            SQLITE_OK)
            goto fail;
    return 0;
fail:
    err_out(err, errlen, "store: %s: %s: %s", path, step, sqlite3_errmsg(s->db));
    return -1;
}

store *store_open(const char *dir, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (!dir || !*dir) {
        err_out(err, errlen, "store: no data directory given");
        return NULL;
    }
    if (make_dirs(dir)) {
        err_out(err, errlen, "store: cannot create directory %s: %s", dir, strerror(errno));
        return NULL;
    }
    size_t n = strlen(dir) + sizeof "/gpupool.db";
    char *path = malloc(n);
    store *s = calloc(1, sizeof *s);
    if (!path || !s) {
        err_out(err, errlen, "store: out of memory");
        free(path);
        free(s);
        return NULL;
    }
    snprintf(path, n, "%s/gpupool.db", dir);
    pthread_mutex_init(&s->mu, NULL);
    int rc = sqlite3_open_v2(path, &s->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        err_out(err, errlen, "store: open %s: %s", path,
                s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        goto fail;
    }
    sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
    if (setup(s, path, err, errlen) != 0) goto fail;
    free(path);
    return s;
fail:
    free(path);
    store_close(s);
    return NULL;
}

void store_close(store *s) {
    if (!s) return;
    for (int i = 0; i < ST_N; i++) sqlite3_finalize(s->st[i]);
    sqlite3_close(s->db);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

const char *store_errmsg(store *s) {
    return s ? s->err : "store: no store";
}

/* ---- tasks -------------------------------------------------------------- */

void store_bind_task(sqlite3_stmt *st, const task_new *t, const char *batch_id, int batch_index,
                     const char *custom_id) {
    store_bind_text(st, 1, t->id);
    store_bind_text(st, 2, t->type);
    store_bind_text(st, 3, t->model);
    sqlite3_bind_int(st, 4, t->priority);
    sqlite3_bind_int(st, 5, t->max_attempts);
    store_bind_text(st, 6, t->input_json);
    store_bind_text(st, 7, t->idem_key);
    store_bind_text(st, 8, t->body_hash);
    sqlite3_bind_int64(st, 9, t->created_ms);
    store_bind_text(st, 10, t->owner ? t->owner : "");
    sqlite3_bind_double(st, 11, t->prompt_tokens);
    sqlite3_bind_double(st, 12, t->max_tokens);
    store_bind_text(st, 13, t->sensitivity ? t->sensitivity : "normal");
    store_bind_text(st, 14, t->route_rule);
    store_bind_text(st, 15, batch_id);
    if (batch_id) sqlite3_bind_int(st, 16, batch_index);
    else sqlite3_bind_null(st, 16);
    store_bind_text(st, 17, custom_id);
}

int store_task_insert(store *s, const task_new *t, char existing_id[64]) {
    if (!s || !t) return STORE_ERR;
    pthread_mutex_lock(&s->mu);
    int rc = begin(s);
    if (rc == STORE_OK && t->idem_key) {
        sqlite3_stmt *st = ps(s, ST_IDEM);
        store_bind_text(st, 1, t->idem_key);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW) {
            const char *hash = (const char *)sqlite3_column_text(st, 1);
            rc = same_str(hash, t->body_hash) ? STORE_DUPLICATE : STORE_CONFLICT;
            if (existing_id)
                snprintf(existing_id, 64, "%s", (const char *)sqlite3_column_text(st, 0));
        } else if (r != SQLITE_DONE) {
            rc = db_err(s, "look up idempotency key");
        }
        sqlite3_reset(st);
    }
    if (rc == STORE_OK) {
        sqlite3_stmt *st = ps(s, ST_INSERT);
        store_bind_task(st, t, NULL, -1, NULL);
        rc = run_st(s, st, "insert task");
    }
    rc = end_tx(s, rc);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* The owned strings of a task_rec, in TASK_COLS order. */
#define REC_STRS(t)                                                                      \
    {&(t)->id, &(t)->type, &(t)->model, &(t)->status, &(t)->node, &(t)->input_json,      \
     &(t)->result_json, &(t)->error_code, &(t)->error_message, &(t)->sensitivity,         \
     &(t)->route_rule, &(t)->batch_id}
#define REC_NSTRS 12

static void row_to_rec(sqlite3_stmt *st, task_rec *t) {
    char **strs[] = REC_STRS(t);
    for (int i = 0; i < REC_NSTRS; i++) *strs[i] = col_dup(st, i);
    t->priority = sqlite3_column_int(st, REC_NSTRS);
    t->attempts = sqlite3_column_int(st, REC_NSTRS + 1);
    t->max_attempts = sqlite3_column_int(st, REC_NSTRS + 2);
    t->created_ms = sqlite3_column_int64(st, REC_NSTRS + 3);
    t->started_ms = sqlite3_column_int64(st, REC_NSTRS + 4);
    t->finished_ms = sqlite3_column_int64(st, REC_NSTRS + 5);
}

int store_task_get(store *s, const char *id, task_rec *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!s || !out) return STORE_ERR;
    if (!id) return STORE_NOT_FOUND;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *st = ps(s, ST_GET);
    store_bind_text(st, 1, id);
    int r = sqlite3_step(st), rc = STORE_OK;
    if (r == SQLITE_ROW) row_to_rec(st, out);
    else if (r == SQLITE_DONE) rc = STORE_NOT_FOUND;
    else rc = db_err(s, "get task");
    sqlite3_reset(st);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void task_rec_free(task_rec *t) {
    if (!t) return;
    char **strs[] = REC_STRS(t);
    for (int i = 0; i < REC_NSTRS; i++) free(*strs[i]);
    memset(t, 0, sizeof *t);
}

/* Ends a row loop that built arr under the lock: on a database error the
 * partial array is dropped.  Resets the statement and unlocks. */
static json_t *end_rows(store *s, sqlite3_stmt *st, int r, json_t *arr, const char *what)
{
    if (r != SQLITE_DONE) {
        db_err(s, what);
        json_decref(arr);
        arr = NULL;
    }
    sqlite3_reset(st);
    pthread_mutex_unlock(&s->mu);
    return arr;
}

json_t *store_task_list(store *s, const char *status, int limit) {
    if (!s) return NULL;
    if (limit < 1) limit = 1;
    if (limit > 1000) limit = 1000;
    json_t *arr = json_array();
    if (!arr) return NULL;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *st = ps(s, status ? ST_LIST_STATUS : ST_LIST);
    sqlite3_bind_int(st, 1, limit);
    if (status) store_bind_text(st, 2, status);
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        task_rec t = {0};
        row_to_rec(st, &t);
        json_array_append_new(arr, store_task_json(&t));
        task_rec_free(&t);
    }
    return end_rows(s, st, r, arr, "list tasks");
}

int store_task_queued(store *s, queued_task *out, int max) {
    if (!s) return STORE_ERR;
    if (!out || max <= 0) return 0;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *st = ps(s, ST_QUEUED);
    sqlite3_bind_int(st, 1, max);
    int n = 0, r = SQLITE_DONE;
    while (n < max && (r = sqlite3_step(st)) == SQLITE_ROW) {
        queued_task *q = &out[n++];
        snprintf(q->id, sizeof q->id, "%s", (const char *)sqlite3_column_text(st, 0));
        snprintf(q->model, sizeof q->model, "%s", (const char *)sqlite3_column_text(st, 1));
        q->priority = sqlite3_column_int(st, 2);
        const unsigned char *owner = sqlite3_column_text(st, 3);
        snprintf(q->owner, sizeof q->owner, "%s", owner ? (const char *)owner : "");
        q->prompt_tokens = sqlite3_column_double(st, 4);
        q->max_tokens = sqlite3_column_double(st, 5);
        q->attempts = sqlite3_column_int(st, 6);
        q->max_attempts = sqlite3_column_int(st, 7);
        snprintf(q->type, sizeof q->type, "%s", (const char *)sqlite3_column_text(st, 8));
        const unsigned char *sens = sqlite3_column_text(st, 9);
        q->trusted_only = sens && !strcmp((const char *)sens, "private");
    }
    if (n < max && r != SQLITE_DONE) n = db_err(s, "queued tasks");
    sqlite3_reset(st);
    pthread_mutex_unlock(&s->mu);
    return n;
}

int store_task_end_attempt(store *s, const char *id, int attempt, const char *code, const char *message,
                           int64_t now_ms) {
    if (!s) return STORE_ERR;
    if (!id) return STORE_NOT_FOUND;
    pthread_mutex_lock(&s->mu);
    int rc = begin(s);
    if (rc == STORE_OK) rc = end_attempt(s, id, attempt, now_ms, code ? code : "ended", message);
    rc = end_tx(s, rc);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Opens the next attempt of a task on node: a queued task is claimed
 * (-> running), a running one gets a second attempt beside the first. */
static int open_attempt(store *s, const char *id, const char *node, int64_t now_ms, int from, int *attempt) {
    if (!s) return STORE_ERR;
    if (!id) return STORE_NOT_FOUND;
    pthread_mutex_lock(&s->mu);
    int status = -1, attempts = 0;
    int rc = begin(s);
    if (rc == STORE_OK) rc = task_state(s, id, &status, &attempts);
    if (rc == STORE_OK && status != from) rc = STORE_STALE;
    if (rc == STORE_OK && from == Q_QUEUED) {
        sqlite3_stmt *st = ps(s, ST_CLAIM);
        store_bind_text(st, 1, id);
        store_bind_text(st, 2, node);
        sqlite3_bind_int64(st, 3, now_ms);
        rc = run_st(s, st, "claim task");
    } else if (rc == STORE_OK) {
        sqlite3_stmt *st = ps(s, ST_HEDGE);
        store_bind_text(st, 1, id);
        rc = run_st(s, st, "hedge task");
    }
    if (rc == STORE_OK) {
        sqlite3_stmt *st = ps(s, ST_ATT_NEW);
        store_bind_text(st, 1, id);
        sqlite3_bind_int(st, 2, attempts + 1);
        store_bind_text(st, 3, node);
        sqlite3_bind_int64(st, 4, now_ms);
        rc = run_st(s, st, "record attempt");
    }
    rc = end_tx(s, rc);
    if (rc == STORE_OK && attempt) *attempt = attempts + 1;
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int store_task_claim(store *s, const char *id, const char *node, int64_t now_ms, int *attempt) {
    return open_attempt(s, id, node, now_ms, Q_QUEUED, attempt);
}

int store_task_hedge(store *s, const char *id, const char *node, int64_t now_ms, int *attempt) {
    return open_attempt(s, id, node, now_ms, Q_RUNNING, attempt);
}

/* Writes a final outcome once: the task must be queued or running and
 * attempt must be one it has made.  Other open attempts are superseded. */
static int finish(store *s, const char *id, int attempt, int status, const char *result,
                  const char *code, const char *message, int64_t now_ms) {
    if (!s) return STORE_ERR;
    if (!id) return STORE_NOT_FOUND;
    pthread_mutex_lock(&s->mu);
    int cur = -1, attempts = 0;
    int rc = begin(s);
    if (rc == STORE_OK) rc = task_state(s, id, &cur, &attempts);
    if (rc == STORE_OK && ((cur != Q_QUEUED && cur != Q_RUNNING) || attempt < 1 ||
                           attempt > attempts))
        rc = STORE_STALE;
    if (rc == STORE_OK) {
        sqlite3_stmt *st = ps(s, ST_FINISH);
        store_bind_text(st, 1, id);
        store_bind_text(st, 2, STATUS[status]);
        store_bind_text(st, 3, result);
        store_bind_text(st, 4, code);
        store_bind_text(st, 5, message);
        sqlite3_bind_int64(st, 6, now_ms);
        sqlite3_bind_int(st, 7, attempt);
        rc = run_st(s, st, "finish task");
    }
    if (rc == STORE_OK)
        rc = end_attempt(s, id, attempt, now_ms, status == Q_SUCCEEDED ? "succeeded" : code,
                         status == Q_SUCCEEDED ? NULL : message);
    if (rc == STORE_OK) {
        char why[64];
        snprintf(why, sizeof why, "attempt %d finished the task first", attempt);
        rc = close_open_attempts(s, id, now_ms, "superseded", why);
    }
    rc = end_tx(s, rc);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int store_task_succeed(store *s, const char *id, int attempt, const char *result_json,
                       int64_t now_ms) {
    return finish(s, id, attempt, Q_SUCCEEDED, result_json, NULL, NULL, now_ms);
}

int store_task_fail(store *s, const char *id, int attempt, const char *code, const char *message,
                    int64_t now_ms) {
    return finish(s, id, attempt, Q_FAILED, NULL, code ? code : "failed", message, now_ms);
}

int store_task_requeue(store *s, const char *id, int attempt, const char *code,
                       const char *message) {
    if (!s) return STORE_ERR;
    if (!id) return STORE_NOT_FOUND;
    if (!code) code = "requeued";
    pthread_mutex_lock(&s->mu);
    int cur = -1, attempts = 0;
    int rc = begin(s);
    if (rc == STORE_OK) rc = task_state(s, id, &cur, &attempts);
    if (rc == STORE_OK && (cur != Q_RUNNING || attempt < 1 || attempt > attempts)) rc = STORE_STALE;
    if (rc == STORE_OK) {
        /* Only an attempt still open can send the task back: a late report
         * of an attempt already ended must not undo a newer one. */
        sqlite3_stmt *st = ps(s, ST_ATT_OPEN);
        store_bind_text(st, 1, id);
        sqlite3_bind_int(st, 2, attempt);
        int r = sqlite3_step(st);
        if (r != SQLITE_ROW) rc = db_err(s, "read attempt");
        else if (sqlite3_column_int(st, 0) == 0) rc = STORE_STALE;
        sqlite3_reset(st);
    }
    if (rc == STORE_OK) {
        sqlite3_stmt *st = ps(s, ST_REQUEUE);
        store_bind_text(st, 1, id);
        store_bind_text(st, 2, code);
        store_bind_text(st, 3, message);
        rc = run_st(s, st, "requeue task");
    }
    if (rc == STORE_OK) rc = end_attempt(s, id, attempt, wall_ms(), code, message);
    rc = end_tx(s, rc);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int store_task_cancel(store *s, const char *id, int64_t now_ms) {
    if (!s) return STORE_ERR;
    if (!id) return STORE_NOT_FOUND;
    pthread_mutex_lock(&s->mu);
    int cur = -1, attempts = 0;
    int rc = begin(s);
    if (rc == STORE_OK) rc = task_state(s, id, &cur, &attempts);
    if (rc == STORE_OK && cur != Q_QUEUED && cur != Q_RUNNING) rc = STORE_STALE;
    if (rc == STORE_OK) {
        sqlite3_stmt *st = ps(s, ST_CANCEL);
        store_bind_text(st, 1, id);
        sqlite3_bind_int64(st, 2, now_ms);
        rc = run_st(s, st, "cancel task");
    }
    if (rc == STORE_OK) rc = close_open_attempts(s, id, now_ms, "canceled", "the task was canceled");
    rc = end_tx(s, rc);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int store_requeue_running(store *s) {
    if (!s) return STORE_ERR;
    pthread_mutex_lock(&s->mu);
    int n = 0;
    int rc = begin(s);
    if (rc == STORE_OK) {
        sqlite3_stmt *st = ps(s, ST_RQ_ATT); /* before the tasks leave 'running' */
        sqlite3_bind_int64(st, 1, wall_ms());
        store_bind_text(st, 2, RESTART_MSG);
        rc = run_st(s, st, "close attempts at restart");
    }
    if (rc == STORE_OK) {
        sqlite3_stmt *st = ps(s, ST_RQ_ALL);
        store_bind_text(st, 1, RESTART_MSG);
        rc = run_st(s, st, "requeue running tasks");
        n = sqlite3_changes(s->db);
    }
    rc = end_tx(s, rc);
    pthread_mutex_unlock(&s->mu);
    return rc == STORE_OK ? n : rc;
}

int store_task_counts(store *s, int64_t counts[5]) {
    if (!s || !counts) return STORE_ERR;
    for (int i = 0; i < 5; i++) counts[i] = 0;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *st = ps(s, ST_COUNTS);
    int r, rc = STORE_OK;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        int i = status_index((const char *)sqlite3_column_text(st, 0));
        if (i >= 0) counts[i] = sqlite3_column_int64(st, 1);
    }
    if (r != SQLITE_DONE) rc = db_err(s, "count tasks");
    sqlite3_reset(st);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int store_task_queue_position(store *s, const char *id, int64_t *ahead)
{
    if (!s || !id || !ahead) return STORE_ERR;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *st = ps(s, ST_AHEAD);
    store_bind_text(st, 1, id);
    int rc = STORE_OK;
    if (sqlite3_step(st) == SQLITE_ROW) *ahead = sqlite3_column_int64(st, 0);
    else rc = db_err(s, "queue position");
    sqlite3_reset(st);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

json_t *store_task_attempts(store *s, const char *id) {
    if (!s) return NULL;
    json_t *arr = json_array();
    if (!arr || !id) return arr;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *st = ps(s, ST_ATTEMPTS);
    store_bind_text(st, 1, id);
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *a = json_object();
        json_object_set_new(a, "attempt", json_integer(sqlite3_column_int(st, 0)));
        json_object_set_new(a, "node", store_json_str((const char *)sqlite3_column_text(st, 1)));
        json_object_set_new(a, "started_at", json_integer(sqlite3_column_int64(st, 2)));
        json_object_set_new(a, "ended_at", store_json_ms(sqlite3_column_int64(st, 3)));
        json_object_set_new(a, "outcome", store_json_str((const char *)sqlite3_column_text(st, 4)));
        json_object_set_new(a, "message", store_json_str((const char *)sqlite3_column_text(st, 5)));
        json_array_append_new(arr, a);
    }
    return end_rows(s, st, r, arr, "list attempts");
}
