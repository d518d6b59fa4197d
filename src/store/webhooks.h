/* store/webhooks: the webhook tables in dir/gpupool.db, through a connection
 * of their own: subscriptions (an object's callback_url, until its final
 * status fires it), deliveries (durable, so a restart loses none) and each
 * delivery's attempts (the delivery log).  I/O only; api/webhooks decides. */
#ifndef GPUPOOL_STORE_WEBHOOKS_H
#define GPUPOOL_STORE_WEBHOOKS_H

#include <jansson.h>
#include <stdint.h>

typedef struct wh_db wh_db;

/* The schema, run by store/sqlite.c's migration to version 6. */
extern const char STORE_WEBHOOK_SCHEMA[];

wh_db *wh_db_open(const char *dir, char *err, size_t errlen);
void wh_db_close(wh_db *db);

/* kind is "task" or "batch".  A second subscription of an object is
 * ignored.  0, or -1. */
int wh_subscribe(wh_db *db, const char *kind, const char *object_id, const char *url, int64_t now_ms);
/* Subscriptions not yet fired whose object has reached a final status (a
 * task succeeded, failed or was canceled; a batch has no item queued or
 * running), up to max: [{object_id, kind, url}].  NULL on error. */
json_t *wh_fired(wh_db *db, int max);

/* Stores a pending delivery due now and, when fires is set, marks that
 * object's subscription fired, in one transaction.  0, or -1. */
int wh_enqueue(wh_db *db, const char *id, const char *event, const char *object_id, const char *url,
               const char *body, int64_t now_ms, const char *fires);
/* Pending deliveries due by now, oldest due first, up to max:
 * [{id, event, object_id, url, body, attempts}].  NULL on error. */
json_t *wh_due(wh_db *db, int64_t now_ms, int max);
/* One attempt's outcome (status 0: no HTTP answer; error NULL on success),
 * and the delivery's new state: "pending" (again at next_ms), "delivered"
 * or "failed". */
int wh_record(wh_db *db, const char *id, int attempt, int64_t ts_ms, int64_t duration_ms, long status,
              const char *error, const char *state, int64_t next_ms);
/* Forgets finished deliveries (and their attempts) and fired
 * subscriptions from before before_ms; returns how many deliveries, or -1. */
int64_t wh_prune(wh_db *db, int64_t before_ms);
/* Deliveries of an object (any object when NULL), newest first, each with
 * its attempts.  NULL on error. */
json_t *wh_list(wh_db *db, const char *object_id, int limit);

#endif
