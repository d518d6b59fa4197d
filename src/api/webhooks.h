/* api/webhooks: callbacks when tasks and batches finish.  A callback_url
 * given with a task or batch is a subscription in the store; one thread
 * notices objects that reached a final status, stores a delivery for each
 * (durable: a restart loses none), and POSTs it: JSON body the object as the
 * API shows it, headers X-Gpupool-Event, X-Gpupool-Delivery and
 * X-Gpupool-Signature (api/webhook_rec).  A non-2xx answer or no answer is
 * retried with exponential backoff and jitter up to max_attempts; every
 * attempt is kept for the delivery log.  Other producers (pipelines) can
 * enqueue their own events with webhook_enqueue. */
#ifndef GPUPOOL_API_WEBHOOKS_H
#define GPUPOOL_API_WEBHOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "node/cidr.h"
#include "store/webhooks.h"

typedef struct webhooks webhooks;
struct coord;

typedef struct webhook_cfg {
    const char *secret;      /* signs every delivery */
    int max_attempts;        /* per delivery */
    int64_t backoff_ms;      /* the first retry's delay; doubles */
    int64_t max_backoff_ms;
    int64_t timeout_ms;      /* one attempt */
    cidr_list allow;         /* hosts deliveries may go to; empty = any */
} webhook_cfg;

/* Starts the delivery thread over db (which it then owns); c gives the
 * objects' JSON.  NULL on failure. */
webhooks *webhooks_start(struct coord *c, wh_db *db, const webhook_cfg *cfg);
void webhooks_stop(webhooks *w);
wh_db *webhooks_db(webhooks *w);

/* 0 when url may be a callback: http(s), and with an allow list a host that
 * is, or resolves only to, allowed addresses.  -1 with a reason. */
int webhook_url_allowed(webhooks *w, const char *url, char *why, size_t whylen);
/* POST body (JSON) to url as event about object_id, durably and soon.
 * 0, or -1 when it could not be stored. */
int webhook_enqueue(webhooks *w, const char *event, const char *object_id, const char *url, const char *body);
/* When the task or batch (kind "task" / "batch") reaches a final status,
 * its object is delivered to url.  0, or -1. */
int webhook_subscribe(webhooks *w, const char *kind, const char *object_id, const char *url);

#endif
