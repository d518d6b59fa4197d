/* worker/agent: a worker's state and its conversation with the coordinator.
 *
 * The agent thread registers with the pool's join token, then heartbeats
 * every interval with the live GPU and engine picture, takes rotated node
 * tokens, and registers again when the coordinator forgets it (a restart).
 * Before each beat it checks itself: a GPU that no longer answers makes the
 * node not ready, and the owner's rules (worker/owner) make it drain; either
 * is reported with its reason and logged once when it starts and ends.
 * Between beats it stops started engines whose keep-alive ran out.  The
 * front door (worker/frontdoor.c) reads the same state under its lock.
 * Starting, evicting and stopping started engines is in worker/loader.c,
 * part of this module. */
#ifndef GPUPOOL_AGENT_H
#define GPUPOOL_AGENT_H

#include <pthread.h>
#include <stdint.h>

#include "worker/engine.h"
#include "worker/files.h"
#include "worker/gpu.h"
#include "worker/idle.h"
#include "worker/managed.h"
#include "worker/owner.h"

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
    int64_t unload_wait_ms;     /* longest wait for VRAM to come back after stopping engines */
    managed_defaults managed;   /* --data, --margin */
    pthread_cond_t load_cv;     /* a managed engine finished starting */
    pthread_mutex_t probe_mu;   /* the GPU probe and its charges: the agent and starts use it */
    owner_policy owner;         /* settle_ms is set from the heartbeat interval */
    idle_source *idle;          /* NULL: the user's activity is not asked about */
    uint64_t fetch_rate_bps;    /* --fetch-rate: downloads from peers; 0 no limit */
    worker_files files;         /* files offered to peers, downloads from them (own lock) */
    pthread_t fetch_thread;     /* worker/peerfetch */
    int fetch_running;
    int fetch_busy, fetch_again;  /* under mu: a fetch pass runs; another was asked for */
    /* the agent thread's alone */
    owner_state owner_st;
    int adopted_pid[WORKER_MAX_ENGINES];  /* listener of an engine we front, 0 unknown */
    int64_t adopted_at[WORKER_MAX_ENGINES];
    /* live, guarded by mu */
    engine engines[WORKER_MAX_ENGINES];
    int nengines;
    gpu_info gpus[GPU_MAX];     /* free_bytes within the owner's cap */
    int ngpus;
    int gpus_seen;              /* the most GPUs one read has found */
    int gpu_lost;               /* self-check: the GPUs do not answer */
    char gpu_lost_reason[256];
    int draining;               /* the owner's rules want the machine back */
    owner_rule drain_rule;
    char drain_reason[OWNER_REASON_LEN];
    char node_id[40];
    char token[72], prev_token[72];
    int registered;
    uint64_t seq;
    int inflight;
    int starting;               /* a managed start (with its evictions) is under way: one at a time */
    int64_t settle_until_ms;    /* an engine stopped: its VRAM may still be on its way back */
    int stops_running;          /* threads stopping idle engines (worker/loader), waited for at the end */
    int beat_soon;              /* an engine was taken out or has exited: beat now, so the pool knows */
    /* Engines taken out of service whose process has not exited yet: the
     * VRAM each held is on its way back, offered to the pool as if free
     * (worker/loader).  Twice the engines: one may be stopping while its
     * successor is taken out in turn. */
    struct { int pid; uint64_t bytes; } releasing[2 * WORKER_MAX_ENGINES];
    int nreleasing;
    double link_bytes, link_ms; /* large request bodies since the last heartbeat, and their arrival time */
    int stopping;
    pthread_t thread;
    /* the catalogue the coordinator sent (worker/wcatalog), guarded by mu */
    struct wcatalog *catalog;
    int hasher_running;         /* a thread hashes model files, off the heartbeat path */
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
/* Stops started engines idle past their keep-alive (every idle one while
 * the node drains); returns how many.  They are out of service at once and
 * exit on a thread of their own, which sets beat_soon when they are gone. */
int worker_unload_idle(worker *w, int64_t now);
/* Waits for the stops worker_unload_idle started: before the worker ends. */
void worker_wait_stops(worker *w);
/* Milliseconds until a started engine's keep-alive runs out, -1 if none. */
int64_t worker_next_unload_ms(worker *w, int64_t now);
/* Caller holds mu: a request on engine idx ended at now, with the
 * keep_alive it asked for (has_ka 0: the model's default applies). */
void worker_engine_used_locked(worker *w, int idx, int has_ka, int64_t ka_ms, int64_t now);
/* Caller holds mu.  The heartbeat's view of the started models: their
 * fields merged into each engine's JSON, the loadable list, and the VRAM
 * idle engines would give back. */
uint64_t worker_managed_report_locked(worker *w, json_t *engines, json_t *loadable, int64_t now);
/* Caller holds mu.  The VRAM of engines taken out of service and still
 * exiting: on its way back. */
uint64_t worker_releasing_locked(const worker *w);
/* A request body of `bytes` took `us` to arrive after its headers: the next
 * heartbeat reports it, so the coordinator learns the link's throughput. */
void worker_note_upload(worker *w, size_t bytes, int64_t us);
/* Whether the bearer is this node's current or previous token. */
int worker_token_ok(worker *w, const char *bearer);
/* Why this node takes no new work now (its self-check failed, or it
 * drains), written into why; 0 when it takes work. */
int worker_refuses_work(worker *w, char *why, size_t whylen);

#endif
