/* worker/filehash: the SHA-256 of the model files a worker holds, remembered
 * in a small JSON file (the worker's DATA/hashes.json) so a multi-gigabyte
 * GGUF is read once, not at every start.  An entry is keyed by the file's
 * absolute path and holds its size, inode, mtime and ctime: a replaced,
 * rewritten or touched file is hashed again.  As in git's "racy" index
 * entries, an entry is trusted only when the file's mtime was at least
 * FILEHASH_SETTLE_NS away from the moment it was looked at: a write in the
 * same timestamp tick as the hashing (a filesystem's clock ticks every few
 * milliseconds, or every second or two on some) would leave every stamp as
 * it was.  Such a fresh file is simply hashed again next time.  Writes go
 * through a temporary file and a rename; within a process each update of
 * the cache is whole, so threads sharing it lose none of each other's
 * entries (one worker per data directory: processes do not share one). */
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

/* 2 s: the coarsest timestamps in use (FAT) tick every 2 seconds. */
#define FILEHASH_SETTLE_NS 2000000000LL

/* Whether a digest taken at stat_ns (wall clock, ns) of a file last
 * modified at mtime_ns can be trusted for as long as its stamps stay: the
 * two are at least FILEHASH_SETTLE_NS apart, either way (a file stamped in
 * the future is not read again every time). */
int filehash_settled(int64_t mtime_ns, int64_t stat_ns);

/* Whether s is 64 lower- or upper-case hex digits. */
int filehash_valid(const char *s);

#endif
