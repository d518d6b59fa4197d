/* worker/agent: a worker's state and its conversation with the coordinator.
 *
 * The agent thread registers with the pool's join token, then heartbeats
 * every interval with the live GPU and engine picture, takes rotated node
 * tokens, and registers again when the coordinator forgets it (a restart).
 * The front door (worker/frontdoor.c) reads the same state under its lock. */
#ifndef GPUPOOL_AGENT_H
#define GPUPOOL_AGENT_H

#include <pthread.h>
#include <stdint.h>

#include "worker/engine.h"
#include "worker/gpu.h"

#define WORKER_MAX_ENGINES 8

typedef struct worker {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* set up before start, read-only afterwards */
    char coordinator[256];
    char join_token[256];
    char name[64];
    char address[256];
    char fingerprint[65];
    int64_t heartbeat_ms;
    gpu_probe *probe;
    /* live, guarded by mu */
    engine engines[WORKER_MAX_ENGINES];
    int nengines;
    gpu_info gpus[GPU_MAX];
    int ngpus;
    char node_id[40];
    char token[72], prev_token[72];
    int registered;
    uint64_t seq;
    int inflight;
    int stopping;
    pthread_t thread;
} worker;

int worker_agent_start(worker *w);
void worker_agent_stop(worker *w);
/* Reads GPUs and engines now (also done before every heartbeat). */
void worker_refresh(worker *w);
/* Whether the bearer is this node's current or previous token. */
int worker_token_ok(worker *w, const char *bearer);

#endif
