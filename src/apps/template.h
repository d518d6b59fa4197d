/* apps/template: prompt templates.  "{{path}}" is replaced by the value at a
 * dotted path in a context object: {{text}}, {{customer.name}},
 * {{items.0}}, {{stages.intent.output.label}}.  Spaces inside the braces are
 * ignored.  A string is inserted as its text; a number, boolean, null,
 * object or array as compact JSON; a path that leads nowhere as nothing.
 * "\{{" writes a literal "{{" (and "\\" before "{{" a literal backslash);
 * no other character is special.
 *
 * Pure: no I/O. */
#ifndef GPUPOOL_TEMPLATE_H
#define GPUPOOL_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>

/* The value at a dotted path (len bytes of path), or NULL.  A segment of
 * digits indexes an array. */
const json_t *tmpl_lookup(const json_t *ctx, const char *path, size_t len);

/* Renders tmpl over ctx into a new string (free it).  NULL with a reason in
 * err for a malformed template (an unclosed or empty "{{"). */
char *tmpl_render(const char *tmpl, const json_t *ctx, char *err, size_t errlen);

/* Whether tmpl is well formed (what tmpl_render would refuse). */
int tmpl_check(const char *tmpl, char *err, size_t errlen);

#endif
