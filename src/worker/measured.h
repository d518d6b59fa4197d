/* worker/measured: the memory engines were seen to allocate, remembered per
 * model file and run settings in a small JSON file (the worker's
 * DATA/measured.json), so a restarted worker offers a model with what it
 * really took rather than the planner's estimate, and `gpupool plan
 * --measured` can set the two side by side.
 *
 * An entry is keyed by the model file (absolute path, size and
 * modification time, so a replaced file is measured again), the context per
 * slot, the slots, the K and V cache types and flash attention.  Writes go
 * through a temporary file and a rename: a crash leaves the old file or the
 * new one, never half of one.  The file keeps the newest MEASURED_MAX
 * entries.  Callers serialise writes (one worker per data directory). */
#ifndef GPUPOOL_MEASURED_H
#define GPUPOOL_MEASURED_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define MEASURED_MAX 256

typedef struct measured_key {
    char file[512];
    uint64_t file_bytes;
    int64_t file_mtime_ns; /* ns: a file replaced within the same second is another file */
    int ctx, parallel;
    char cache_type_k[16], cache_type_v[16];
    int flash_attn;
} measured_key;

typedef struct measured_entry {
    measured_key key;
    uint64_t model_bytes, kv_bytes, compute_bytes; /* on the GPUs */
    uint64_t host_bytes;
    int64_t measured_at;                           /* wall-clock seconds, for people */
} measured_entry;

/* Fills a key for this file (made absolute, and stat()ed) and settings.
 * 0, or -1 with a reason when the file cannot be read. */
int measured_key_for(const char *file, int ctx, int parallel, const char *ctk, const char *ctv, int flash_attn,
                     measured_key *k, char *err, size_t errlen);
/* 1 and *out filled when path holds an entry for k, 0 when it holds none
 * (or does not exist), -1 with a reason when it cannot be read. */
int measured_lookup(const char *path, const measured_key *k, measured_entry *out, char *err, size_t errlen);
/* Adds or replaces e's entry.  0, or -1 with a reason. */
int measured_store(const char *path, const measured_entry *e, char *err, size_t errlen);

uint64_t measured_total(const measured_entry *e);
/* {"model_bytes","kv_bytes","compute_bytes","total_bytes"} (+ "host_bytes"). */
json_t *measured_json(const measured_entry *e);

#endif
