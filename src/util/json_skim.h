/* util/json_skim: reads a few members out of a JSON text without building
 * it.  The text is checked as it is walked (strings, numbers, literals,
 * nesting), so a caller that walks to the end knows the text was well formed;
 * nothing is allocated.  For hot paths that need two or three figures from a
 * body they otherwise pass through untouched (an engine's answer). */
#ifndef GPUPOOL_UTIL_JSON_SKIM_H
#define GPUPOOL_UTIL_JSON_SKIM_H

#include <stddef.h>

typedef struct json_skim {
    const char *p, *end;
    int bad;   /* set at the first malformed byte; every call then fails */
    int depth; /* nesting of the value being skipped, bounded */
    int first; /* the object just entered has had no member yet */
} json_skim;

void skim_init(json_skim *s, const char *text, size_t len);
/* Enters an object: 0, or -1 when the next value is not one. */
int skim_object(json_skim *s);
/* The next member of the object entered last: 1 with its key (raw bytes
 * between the quotes, escapes left as they are) and the ':' consumed, 0 at
 * its closing '}', -1 when malformed. */
int skim_key(json_skim *s, const char **key, size_t *keylen);
/* Skips the next value, whatever it is.  0 or -1. */
int skim_value(json_skim *s);
/* The next value if it is a number: 1 (and *is_int when it has no fraction
 * or exponent), 0 when it is something else (skipped), -1 when malformed. */
int skim_number(json_skim *s, double *v, int *is_int);
/* The next value if it is a string: 1 with its raw bytes (escapes left as
 * they are), 0 when it is something else (skipped), -1 when malformed. */
int skim_string(json_skim *s, const char **v, size_t *len);
/* The next value: 1 when it is true, 0 when it is anything else (skipped),
 * -1 when malformed. */
int skim_true(json_skim *s);
/* Whether only white space is left (the text ended where it should). */
int skim_done(json_skim *s);
/* Whether key (from skim_key) is exactly `name`. */
int skim_key_is(const char *key, size_t keylen, const char *name);

#endif
