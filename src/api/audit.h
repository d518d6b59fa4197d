/* api/audit: the audit log of every API call.  On the request's path it only
 * copies: a request id (the client's X-Request-Id when sane, else a fresh
 * one, echoed on every answer), capped copies of both bodies, the route a
 * proxied call took, status and duration; the record then goes on a bounded
 * in-memory queue.  One writer thread redacts it (api/audit_rec, so detected
 * spans never reach the disk), writes it through store/audit in batches and
 * prunes by age.  A full queue drops the record and counts the drop, rather
 * than making a request wait. */
#ifndef GPUPOOL_API_AUDIT_H
#define GPUPOOL_API_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "http/server.h"
#include "policy/detect.h"
#include "store/audit.h"

typedef struct auditor auditor;

typedef struct audit_cfg {
    int days;            /* records older than this are pruned */
    size_t body_max;     /* bytes kept of each body */
    int queue_max;       /* records that may wait for the writer */
    int raw_scan;        /* no configured regex: see audit_redact_body */
    int nap_ms;          /* the writer's longest wait for a few records; 0 = 50 */
} audit_cfg;

/* Starts the writer over db (which it then owns).  NULL on failure. */
auditor *auditor_start(audit_db *db, const detect_rules *rules, const audit_cfg *cfg);
/* Writes what is queued, stops the writer, closes the database. */
void auditor_stop(auditor *a);
audit_db *auditor_db(auditor *a);
/* Records written and dropped (a full queue) so far, for /metrics. */
void auditor_counts(auditor *a, uint64_t *written, uint64_t *dropped);

/* ---- on the request's path (each cheap, none blocks) ---- */
/* What is kept of a call: all of it; not its answer (the audit log's own
 * answers, which would nest the log in itself); nothing (the workers' control
 * plane, whose bodies carry the pool's tokens). */
typedef enum audit_keep { AUDIT_ALL, AUDIT_NO_ANSWER, AUDIT_NONE } audit_keep;
/* The request's id: set on the request (X-Request-Id, which
 * http_req_header then finds) and on its answer.  With a (audit on) it also
 * starts the request's record; owner is coord_owner's digest. */
void audit_begin(auditor *a, http_req *req, const char *owner, audit_keep keep);
/* The answer hook's view of the answer: its body, or that it streams. */
void audit_answer(auditor *a, http_req *req, const http_answer *ans);
/* The answer is queued: the record goes to the writer. */
void audit_finish(auditor *a, http_req *req, int status, int64_t dur_us);
/* The route record of a proxied call: its classification, then each node or
 * backend tried and how it went ("ok", "engine_error", "refused",
 * "unreachable", "stream_broke"). */
void audit_route_class(http_req *req, int is_private, const char *rule);
void audit_route_attempt(http_req *req, const char *node_id, int external, long status, const char *outcome);
/* The request's id ("" before audit_begin). */
const char *audit_request_id(http_req *req);
/* A stream's assembled text, once it ended (the record was written at its
 * start, without a body). */
void audit_stream_done(auditor *a, const char *request_id, const char *text, size_t len, int64_t dur_us);

#endif
