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
    char engine_cmd[1024];      /* template for managed engines */
    int64_t load_timeout_ms;
    pthread_cond_t load_cv;     /* a managed engine finished starting */
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
/* Makes sure an engine serves `model`: starts its managed engine if it has
 * one and it is stopped (waiting for a start already under way).  Returns
 * 1 when an engine is up, 0 when no engine of this node can serve it, -1
 * when starting failed (why says so).  Blocking. */
int worker_ensure_loaded(worker *w, const char *model, char *why, size_t whylen);
/* Whether the bearer is this node's current or previous token. */
int worker_token_ok(worker *w, const char *bearer);

#endif
