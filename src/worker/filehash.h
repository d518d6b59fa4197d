/* worker/filehash: the SHA-256 of the model files a worker holds, remembered
 * in a small JSON file (the worker's DATA/hashes.json) so a multi-gigabyte
 * GGUF is read once, not at every start.  An entry is keyed by the file's
 * absolute path, size and modification time: a replaced or touched file is
 * hashed again.  Writes go through a temporary file and a rename.  Callers
 * serialise calls for one cache file (one worker per data directory). */
#ifndef GPUPOOL_FILEHASH_H
#define GPUPOOL_FILEHASH_H

#include <stddef.h>
#include <stdint.h>

#define FILEHASH_MAX 512

/* The hex SHA-256 of file into out, from cache_path when it holds a current
 * entry, else read and hashed and stored there (cache_path may be NULL: no
 * cache).  *bytes gets the file's size when bytes is not NULL.  0, or -1
 * with a reason. */
int filehash_get(const char *cache_path, const char *file, char out[65], uint64_t *bytes, char *err, size_t errlen);

/* The same, reading the file in blocks and asking cancelled(ctx) before
 * each: nonzero stops it (-1, "cancelled"), so a worker told to stop is not
 * held up by a large file's first hashing. */
int filehash_get_cancellable(const char *cache_path, const char *file, char out[65], uint64_t *bytes,
                             int (*cancelled)(void *ctx), void *ctx, char *err, size_t errlen);

/* Whether s is 64 lower- or upper-case hex digits. */
int filehash_valid(const char *s);

#endif
