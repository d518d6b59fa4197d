/* api/audit_rec: the pure decisions behind an audit record: whether a
 * client's request id may be kept, a body's redacted and size-capped copy, and
 * which task a call concerns.  No I/O, no state; thread-safe. */
#ifndef GPUPOOL_API_AUDIT_REC_H
#define GPUPOOL_API_AUDIT_REC_H

#include <stddef.h>
#include <stdint.h>

#include "policy/detect.h"

/* Bytes kept beyond the cap before redacting, so that a sensitive span the
 * cap cuts through is still seen whole and redacted, not half kept. */
#define AUDIT_REDACT_MARGIN 256

/* 1 when a client-supplied X-Request-Id is 1..64 characters of
 * [A-Za-z0-9._:-], so it is safe to echo, store and query. */
int audit_request_id_ok(const char *id);

/* A malloc'd copy of len bytes of body with every detected span redacted
 * ("[REDACTED:<rule>]") and at most cap bytes long (cut at a UTF-8 boundary).
 * cut says the caller already kept only a prefix of a longer body.  A whole
 * JSON body has each string value redacted (escapes decoded first); anything
 * else is redacted as text.  *truncated is set when the result is not the
 * whole body.  NULL when memory ran out.
 * raw_scan says the rules hold no configured regex (which may be anchored to
 * a field's start or end), so that a JSON body without \u escapes in which a
 * scan of its whole text, its one-character escapes (\n, \", ...) decoded,
 * finds nothing may be kept as it is, unparsed. */
char *audit_redact_body(const detect_rules *r, const char *body, size_t len, int cut, size_t cap, int raw_scan,
                        int *truncated);

/* The task a call concerns: the {id} of /v1/tasks/{id}, poll_id (the
 * ?id= of /v1/tasks/poll), or the "id" of a task a POST /v1/tasks answer
 * holds.  Writes "" when none. */
void audit_task_of(const char *method, const char *path, const char *poll_id, const char *response, size_t len,
                   char *out, size_t outlen);

/* ?since= and --since: unix milliseconds, or an age ("90s", "15m", "2h",
 * "7d") before now_ms.  0, or -1 when it is neither. */
int audit_parse_since(const char *s, int64_t now_ms, int64_t *out);

#endif
