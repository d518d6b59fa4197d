/* apps/cond: a pipeline stage's condition ("if").  The whole syntax:
 *
 *   PATH                     true when the value exists and is not false,
 *                            null, 0, "" or empty
 *   !PATH                    the opposite
 *   PATH == LITERAL          equal (numbers by value)
 *   PATH != LITERAL
 *
 * PATH is a template path (apps/template: "stages.intent.output.label",
 * "input.lang"); LITERAL is 'text' or "text" (no escapes), a number, true,
 * false or null.  Pure. */
#ifndef GPUPOOL_COND_H
#define GPUPOOL_COND_H

#include <jansson.h>
#include <stddef.h>

/* Evaluates expr over ctx: 1 true, 0 false, -1 malformed (reason in err). */
int cond_eval(const char *expr, const json_t *ctx, char *err, size_t errlen);

#endif
