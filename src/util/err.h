/* util/err: filling a caller's one-line error buffer. */
#ifndef GPUPOOL_ERR_H
#define GPUPOOL_ERR_H

#include <stddef.h>

/* Formats into err (when err and errlen are set), as one line (line breaks
 * become spaces), and returns -1, so that
 * `return err_out(err, errlen, "...", ...);` reports and fails in one step. */
int err_out(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
