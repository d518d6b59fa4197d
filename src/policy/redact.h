/* policy/redact: copies of text and request bodies with every detected span
 * replaced by "[REDACTED:<rule>]", for logs and audit records.  Uses the rules
 * and the field list of policy/detect.h; pure, thread-safe like detect_text. */
#ifndef GPUPOOL_REDACT_H
#define GPUPOOL_REDACT_H

#include <jansson.h>
#include <stddef.h>

#include "policy/detect.h"

/* A malloc'd, NUL-terminated copy of len bytes of text with each hit
 * replaced, and replaced again until a scan of the copy finds nothing (a hit
 * that overlapped another one's bytes shows only then); *out_len (optional)
 * gets its length, which matters only when the text itself holds NUL bytes.
 * NULL when memory ran out. */
char *redact_text(const detect_rules *r, const char *text, size_t len, size_t *out_len);

/* A deep copy of an OpenAI body with every field detect_request scans
 * redacted; other fields are copied unchanged.  NULL when memory ran out. */
json_t *redact_request(const detect_rules *r, const json_t *openai_body);

#endif
