/* policy/classify: decides whether a request is private, so that it runs on
 * trusted capacity only.  Pure.
 *
 * A request is private when the detectors find sensitive data in any field
 * they scan (policy/detect), when the client says so with the header
 * X-Gpupool-Sensitivity: private, or when its API key is private by default.
 * Nothing lowers it: "normal" in the header does not undo a detector's hit or
 * a key's default, and a detector that fails (out of memory) counts as a hit. */
#ifndef GPUPOOL_CLASSIFY_H
#define GPUPOOL_CLASSIFY_H

#include <jansson.h>

#include "policy/detect.h"

typedef struct classification {
    int is_private;
    char rule[64];   /* why: a detector's rule, "header" or "api_key"; "" when normal */
} classification;

/* header is the X-Gpupool-Sensitivity value or NULL.  Returns 0, or -1 when
 * the header is neither "private" nor "normal" (the caller answers 400). */
int classify_request(const detect_rules *rules, const json_t *body, const char *header, int key_private,
                     classification *out);

#endif
