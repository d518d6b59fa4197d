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
} task_new;

/* A task as stored.  Strings are owned; free with task_rec_free. */
typedef struct task_rec {
    char *id, *type, *model, *status, *node, *input_json, *result_json;
    char *error_code, *error_message;
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

/* Up to max queued tasks in dispatch order: priority desc, then created asc.
 * Fills ids (each 64 bytes) and returns how many. */
int store_task_next_queued(store *s, char (*ids)[64], int max);
/* What the queue orders by, for up to max queued tasks (priority desc, then
 * oldest first, as a starting order).  Returns how many. */
typedef struct queued_task {
    char id[64];
    char model[128];
    char type[16];
    char owner[40];
    int priority, attempts, max_attempts;
    double prompt_tokens, max_tokens;
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

#endif
