/* policy/embed: text embeddings for the semantic cache.  Owns the one text
 * normalisation the cache keys on (case and width folding, punctuation and
 * white space collapsed) and the built-in embedder, which needs no model:
 * hashed character n-grams (Latin trigrams inside words, word unigrams, CJK
 * character unigrams and bigrams) plus a small, heavily weighted part for
 * numbers and negations, so that "2 tickets" and "3 tickets" or "can" and
 * "cannot" stay apart.  Also the two pure halves of using an embedding model
 * of the pool instead: the /v1/embeddings request body and reading its answer.
 * Pure: no I/O, no global state; every function is thread-safe.  See
 * docs/cache.md. */
#ifndef GPUPOOL_EMBED_H
#define GPUPOOL_EMBED_H

#include <jansson.h>
#include <stddef.h>

#define EMBED_DIM 384
/* The identity of the built-in embedder's vectors.  It changes whenever the
 * features change, so a cache never compares vectors of two versions. */
#define EMBED_BUILTIN_ID "builtin-ngram-v1"

/* The normalised form of len bytes of UTF-8: ASCII, Latin-1, Latin
 * Extended-A, Greek and Cyrillic lower-cased; full-width forms folded to
 * half-width; curly quotes to straight ones; each run of white space,
 * punctuation and invalid bytes becomes one space, none at either end.  An
 * apostrophe inside a word, a '.' between digits and a ',' between digits
 * (dropped: 1,000 is 1000) are kept.  Returns a malloc'd NUL-terminated
 * string (length in *out_len when not NULL), or NULL when memory ran out. */
char *embed_normalise(const char *text, size_t len, size_t *out_len);

/* The built-in embedding of len bytes of UTF-8 into out, L2-normalised (unit
 * length), or all zeros when the text has no features (empty, or only
 * punctuation).  The same text always gives the same vector.  Returns 0, or
 * -1 when memory ran out (out is then all zeros). */
int embed_text(const char *text, size_t len, float out[EMBED_DIM]);

/* {"model": model, "input": text} for POST /v1/embeddings. */
json_t *embed_request_body(const char *model, const char *text);

/* Reads data[0].embedding of a /v1/embeddings answer into a malloc'd,
 * L2-normalised vector in *out.  Returns its dimension, or -1 (and *out NULL)
 * when the answer holds no usable embedding (missing, empty, not numbers, all
 * zeros, or larger than 65536). */
int embed_parse_response(const json_t *answer, float **out);

#endif
