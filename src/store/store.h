/* store: the coordinator's durable state (tasks and their attempts).
 *
 * One interface, SQLite in WAL mode behind it (store/sqlite.c).  Every call is
 * thread-safe.  A task is on disk before store_task_insert returns, so an
 * accepted task survives kill -9.  A task's result is written once: the first
 * finished attempt wins and later completions are ignored.
 *
 * Task states: queued -> running -> succeeded | failed | canceled. */
#ifndef GPUPOOL_STORE_H
#define GPUPOOL_STORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct store store;

enum store_rc {
    STORE_OK = 0,
    STORE_ERR = -1,        /* I/O or database error; message in store_errmsg */
    STORE_NOT_FOUND = 1,
    STORE_DUPLICATE = 2,   /* idempotency key seen with the same body: *existing set */
    STORE_CONFLICT = 3,    /* idempotency key seen with a different body */
    STORE_STALE = 4,       /* the task is not in the state/attempt the call expects */
};

typedef struct task_new {
    const char *id;          /* "task_..." */
    const char *type;        /* chat | completion | embedding */
    const char *model;
    int priority;            /* 0..9, higher first */
    const char *input_json;  /* the OpenAI body, compact JSON */
    const char *idem_key;    /* NULL when absent */
    const char *body_hash;   /* sha256 hex of the request body, for idempotency */
    int max_attempts;
    int64_t created_ms;      /* wall clock, display only */
    const char *owner;       /* who submitted it (an API key's id); NULL = anonymous */
    double prompt_tokens;    /* estimated, for the queue's order */
    double max_tokens;       /* requested; 0 = not given */
    const char *sensitivity; /* "private" (trusted capacity only) or "normal"; NULL = normal */
    const char *route_rule;  /* why it is private (the rule that fired, or "header", "api_key") */
} task_new;

/* A task as stored.  Strings are owned; free with task_rec_free. */
typedef struct task_rec {
    char *id, *type, *model, *status, *node, *input_json, *result_json;
    char *error_code, *error_message;
    char *sensitivity, *route_rule;
    char *batch_id;          /* NULL unless the task is an item of a batch */
    int priority, attempts, max_attempts;
    int64_t created_ms, started_ms, finished_ms; /* wall clock; 0 = not yet */
} task_rec;

store *store_open(const char *dir, char *err, size_t errlen);
void store_close(store *s);
const char *store_errmsg(store *s);

int store_task_insert(store *s, const task_new *t, char existing_id[64]);
int store_task_get(store *s, const char *id, task_rec *out);
void task_rec_free(task_rec *t);
/* status may be NULL for all; newest first; returns a JSON array of task objects
 * (same shape as store_task_json). */
json_t *store_task_list(store *s, const char *status, int limit);
/* The public JSON view of a task (what GET /v1/tasks/{id} shows). */
json_t *store_task_json(const task_rec *t);

/* What the queue orders by, for up to max queued tasks (priority desc, then
 * oldest first, as a starting order).  Returns how many. */
typedef struct queued_task {
    char id[64];
    char model[128];
    char type[16];
    char owner[40];
    int priority, attempts, max_attempts;
    double prompt_tokens, max_tokens;
    int trusted_only;        /* private: only trusted capacity may run it */
} queued_task;
int store_task_queued(store *s, queued_task *out, int max);
/* A second attempt on another node while the first still runs (the task
 * stays running; the first finished attempt wins). */
int store_task_hedge(store *s, const char *id, const char *node, int64_t now_ms, int *attempt);
/* Records how one attempt ended without changing the task (another attempt
 * of it still runs). */
int store_task_end_attempt(store *s, const char *id, int attempt, const char *code, const char *message,
                           int64_t now_ms);
/* queued -> running on node; increments attempts; *attempt gets the new number. */
int store_task_claim(store *s, const char *id, const char *node, int64_t now_ms, int *attempt);
/* running (or queued again) -> succeeded, written once. STORE_STALE if already final. */
int store_task_succeed(store *s, const char *id, int attempt, const char *result_json, int64_t now_ms);
/* -> failed with a reason code (written once). */
int store_task_fail(store *s, const char *id, int attempt, const char *code, const char *message, int64_t now_ms);
/* running -> queued, recording why the attempt ended (the caller knows no
 * other attempt of the task is still open). */
int store_task_requeue(store *s, const char *id, int attempt, const char *code, const char *message);
/* queued|running -> canceled.  STORE_STALE if already final. */
int store_task_cancel(store *s, const char *id, int64_t now_ms);
/* At start-up: every running task goes back to queued.  Returns how many. */
int store_requeue_running(store *s);
/* Counts per status: queued, running, succeeded, failed, canceled. */
int store_task_counts(store *s, int64_t counts[5]);
/* How many queued tasks go before this queued one (0 = next). */
int store_task_queue_position(store *s, const char *id, int64_t *ahead);
/* Each attempt: node, outcome code, message, times (for the task's history). */
json_t *store_task_attempts(store *s, const char *id);

/* ---- batches (store/batches.c) ------------------------------------------
 * A batch is one row plus its items, each an ordinary task (so the
 * dispatcher schedules, retries and hedges them like any other) carrying the
 * batch's id and its index in the input.  A batch's progress is read from
 * its tasks, never kept twice. */
typedef struct batch_new {
    const char *id;          /* "batch_..." */
    const char *type;        /* the items' type when they share one, else "mixed" */
    const char *model;       /* the batch's model ("" when items name their own) */
    int priority;
    const char *idem_key;    /* NULL when absent */
    const char *body_hash;
    const char *owner;
    int64_t created_ms;
    const task_new *items;   /* n tasks; their idem_key is ignored */
    const char *const *custom_ids; /* n entries, each NULL or the caller's id */
    int n;
} batch_new;

/* Inserts the batch and all its items in one transaction: all or nothing.
 * STORE_DUPLICATE / STORE_CONFLICT as for tasks (existing_id set). */
int store_batch_insert(store *s, const batch_new *b, char existing_id[64]);

typedef struct batch_rec {
    char id[64], type[16], model[256];
    int priority;
    int64_t total;
    int64_t counts[5];       /* items per task status, in store.h's order */
    int64_t created_ms, cancelled_ms;
    int64_t first_started_ms;  /* 0 = no item has started */
    int64_t last_finished_ms;  /* 0 = no item has finished */
} batch_rec;

int store_batch_get(store *s, const char *id, batch_rec *out);
/* Up to max batches, newest first; returns how many. */
int store_batch_list(store *s, batch_rec *out, int max);
/* The items in input order: {index, custom_id, task_id, status, attempts,
 * result, error}.  NULL on a database error; an empty array for an unknown id. */
json_t *store_batch_items(store *s, const char *id);
/* Marks the batch cancelled and cancels its queued and running items in one
 * transaction.  *running gets the ids of the items that were running (their
 * calls are to be stopped); caller decrefs.  STORE_STALE when the batch was
 * already cancelled or every item had finished. */
int store_batch_cancel(store *s, const char *id, int64_t now_ms, json_t **running);

/* ---- conversation sessions (store/sessions.c) ----------------------------
 * A session is one row, keyed by its owner (an API key's id) and the
 * client's id, plus its non-system messages in order.  Times are wall clock
 * (display and expiry across restarts). */
typedef struct session_rec {
    char owner[40], id[129], model[256];
    json_t *system;          /* the latest system/developer messages (an array) */
    char *summary;           /* of turns dropped earlier; NULL = none */
    int is_private;
    char private_rule[64];
    int64_t created_ms, updated_ms, expires_ms; /* expires 0 = never */
    json_t *messages;        /* oldest first */
    int64_t first_seq;       /* the sequence number of messages[0] */
} session_rec;
void session_rec_free(session_rec *r);

/* STORE_NOT_FOUND when there is none for this owner, or it expired by now_ms. */
int store_session_get(store *s, const char *owner, const char *id, int64_t now_ms, session_rec *out);

/* What one successful turn (or a turn classified private) writes, in one
 * transaction: the row is made when absent; privacy only ever goes up. */
typedef struct session_write {
    const char *owner, *id, *model;
    const json_t *system;    /* replaces the stored one; NULL = keep */
    const json_t *append;    /* messages to add at the end; NULL = none */
    int64_t drop_before_seq; /* delete messages numbered below this; 0 = none */
    const char *summary;     /* replaces the stored one; NULL = keep */
    int is_private;
    const char *private_rule;
    int64_t now_ms, ttl_ms;  /* ttl 0 = never expires */
} session_write;
int store_session_write(store *s, const session_write *w);
/* STORE_NOT_FOUND when the owner has no such session. */
int store_session_delete(store *s, const char *owner, const char *id);
/* Removes sessions whose expiry passed; returns how many, or -1. */
long store_session_expire(store *s, int64_t now_ms);

/* ---- cloud spend (store/spend.c) ----------------------------------------
 * What each API key sent to the cloud, per local day ("YYYY-MM-DD"), so that
 * a restart does not reset a budget. */
int store_spend_add(store *s, const char *day, const char *owner, int64_t requests, int64_t tokens, double cost);
/* Calls fn for each key's row of day; returns STORE_OK or STORE_ERR. */
int store_spend_load(store *s, const char *day,
                     void (*fn)(void *ctx, const char *owner, int64_t requests, int64_t tokens, double cost),
                     void *ctx);

/* ---- app and pipeline runs (store/runs.c) --------------------------------
 * A run of an app or pipeline: its definition as it was when the run began
 * (so a resumed run does not change under a new config), its input, and one
 * row per stage.  Each try of a stage is an ordinary task; the stage row
 * names the current one.  Run states are the task states; a stage is
 * pending, running, succeeded, failed, skipped or canceled. */
typedef struct run_new {
    const char *id;          /* "run_..." */
    const char *kind;        /* app | pipeline */
    const char *name;
    const char *def_json;    /* the normalised definition (apps/appcfg) */
    const char *input_json;
    const char *sensitivity; /* carried to every stage's tasks */
    const char *route_rule;
    const char *owner;
    int priority;
    int64_t created_ms;
    const char *const *stage_names, *const *stage_models;
    int n_stages;
} run_new;
int store_run_insert(store *s, const run_new *r);
/* The run as JSON: its columns (def, input, output, error parsed) and
 * "stages", each {index, name, model, status, task_id, tries, request,
 * output, raw_text, error, node, attempts, started_ms, finished_ms}.
 * STORE_NOT_FOUND for an unknown id. */
int store_run_get(store *s, const char *id, json_t **out);
/* Ids of queued and running runs, oldest first; how many, or -1. */
int store_run_active(store *s, char (*ids)[64], int max);
/* Sets the fields given (by their JSON names: status, output, error,
 * started_ms, finished_ms; a stage also task_id, tries, request, raw_text,
 * node, attempts); others are left alone. */
int store_run_set(store *s, const char *id, const json_t *fields);
int store_run_stage_set(store *s, const char *id, int idx, const json_t *fields);
/* Both change nothing once the run has ended, and then return STORE_STALE.
 * Cancels a queued or running
 * run and its unfinished stages in one transaction; task_id gets the running
 * stage's task ("" when none), whose call is the caller's to stop.
 * STORE_STALE when the run had already ended. */
int store_run_cancel(store *s, const char *id, int64_t now_ms, char task_id[64]);
/* ---- rollouts (store/rollouts.c) ----------------------------------------
 * A rollout is kept whole as its JSON view (sched/rollout), one row per name:
 * a new rollout under a finished one's name replaces it. */
int store_rollout_put(store *s, const char *name, const char *rollout_json, int64_t updated_ms);
/* Every stored rollout's JSON, oldest first; NULL on a database error. */
json_t *store_rollout_all(store *s);

#endif
