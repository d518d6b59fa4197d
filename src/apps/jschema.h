/* apps/jschema: JSON Schema validation for the subset app schemas use:
 * type (one name or a list), properties, required, additionalProperties
 * (a boolean or a schema), items, enum, const, minimum, maximum, minLength,
 * maxLength (in characters), minItems, maxItems.  Other keywords (title,
 * description, $schema, ...) are ignored, as validators do with unknown ones.
 *
 * Debian's only JSON Schema library for C-family code is C++ (valijson), so
 * this is a small pure module: no I/O, no state. */
#ifndef GPUPOOL_JSCHEMA_H
#define GPUPOOL_JSCHEMA_H

#include <jansson.h>
#include <stddef.h>

typedef struct jschema_error {
    char path[256];    /* where it failed: "" for the root, else "a.b[2].c" */
    char message[256]; /* what is wrong, naming the path */
} jschema_error;

/* 0 when v satisfies schema; -1 with the first violation found. */
int jschema_validate(const json_t *schema, const json_t *v, jschema_error *e);

/* Whether schema is one this module can apply: an object whose known
 * keywords have the right types (recursively).  -1 with the reason; path
 * then names the keyword. */
int jschema_check(const json_t *schema, jschema_error *e);

#endif
