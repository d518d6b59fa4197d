/* store/audit: the audit table in dir/gpupool.db, through a connection of its
 * own so that audit writes never hold the task store's lock.  Records arrive
 * already redacted (api/audit); this file only stores, queries and prunes. */
#ifndef GPUPOOL_STORE_AUDIT_H
#define GPUPOOL_STORE_AUDIT_H

#include <jansson.h>
#include <stdint.h>

typedef struct audit_db audit_db;

/* One call as it is kept.  Strings may be NULL (stored as NULL). */
typedef struct audit_entry {
    const char *request_id;
    int64_t ts_ms;            /* wall time the request arrived */
    const char *method, *path;
    int status;
    int64_t duration_us;
    const char *owner;        /* "key-<digest>" or "" */
    const char *task_id;      /* the task the call created or read */
    const char *request_body, *response_body;
    int truncated;            /* a body was cut at the size cap */
    const char *route_json;   /* the route record of a proxied call */
} audit_entry;

typedef struct audit_query {
    const char *request_id, *task_id; /* NULL = any */
    int64_t since_ms;                 /* 0 = any */
    int limit;                        /* 1..1000 */
} audit_query;

/* The audit schema, run by store/sqlite.c's migration to version 5. */
extern const char STORE_AUDIT_SCHEMA[];

/* Opens dir/gpupool.db (the task store has created and migrated it).
 * NULL with a one-line reason in err. */
audit_db *audit_db_open(const char *dir, char *err, size_t errlen);
void audit_db_close(audit_db *db);
/* Inserts n entries in one transaction; 0, or -1. */
int audit_db_insert(audit_db *db, const audit_entry *const *e, int n);
/* A streamed answer's text, known only once the stream ends.  Returns 1, 0
 * when no entry has the id (yet), or -1. */
int audit_db_set_response(audit_db *db, const char *request_id, const char *body, int truncated,
                          int64_t duration_us);
/* Deletes entries older than before_ms; returns how many, or -1. */
int64_t audit_db_prune(audit_db *db, int64_t before_ms);
/* Matching entries, newest first, as a JSON array (NULL on error). */
json_t *audit_db_query(audit_db *db, const audit_query *q);

#endif
