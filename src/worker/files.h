/* worker/files: what a worker knows about model files: the ones it holds and
 * can hand to peers (by SHA-256), and its downloads from peers with their
 * progress.  The heartbeat reports both; the front door serves the first
 * (worker/fileserve), worker/peerfetch fills both.  Its own lock; callers
 * may hold the worker's lock around these calls, never the other way. */
#ifndef GPUPOOL_FILES_H
#define GPUPOOL_FILES_H

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

#define FILES_MAX 16

typedef struct file_held {
    char sha256[65];
    char path[512];
    uint64_t bytes;
} file_held;

typedef enum xfer_state { XFER_WAITING, XFER_FETCHING, XFER_DONE, XFER_FAILED } xfer_state;

typedef struct file_transfer {
    char sha256[65];
    char model[128];
    char dest[512];
    xfer_state state;
    uint64_t done, total;   /* bytes; total 0 until a source said */
    double rate_bps;
    int64_t eta_s;          /* -1 unknown */
    int attempts;
    char source[256];
    char error[600];        /* the last failure, kept while it retries */
} file_transfer;

typedef struct worker_files {
    pthread_mutex_t mu;
    file_held held[FILES_MAX];
    int nheld;
    file_transfer xfers[FILES_MAX];
    int nxfers;
} worker_files;

void files_init(worker_files *f);
void files_destroy(worker_files *f);
/* Offers a file to peers (again, when the sha256 is known already). */
void files_add_held(worker_files *f, const char *sha256, const char *path, uint64_t bytes);
/* The held file with this digest (any case): 1 with path and bytes, else 0. */
int files_find_held(worker_files *f, const char *sha256, char *path, size_t pathlen, uint64_t *bytes);
/* A download's slot, -1 when all are taken. */
int files_transfer_add(worker_files *f, const char *sha256, const char *model, const char *dest);
void files_transfer_set(worker_files *f, int idx, const file_transfer *t);
void files_transfer_get(worker_files *f, int idx, file_transfer *t);
/* [{"sha256","bytes"}] and the downloads, for the heartbeat. */
json_t *files_held_json(worker_files *f);
json_t *files_transfers_json(worker_files *f);
const char *xfer_state_name(xfer_state s);

#endif
