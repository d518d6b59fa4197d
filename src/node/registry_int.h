/* node/registry_int: the registry's state, shared by node/registry.c
 * (admission, tokens, heartbeats, states, administration, the JSON views)
 * and node/leases.c (placement candidates, leases, waits, observations).
 * Not part of any API: nothing outside node/ includes it. */
#ifndef GPUPOOL_REGISTRY_INT_H
#define GPUPOOL_REGISTRY_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

#include "node/registry.h"

#define DRAIN_RING 256

typedef struct active_lease {
    uint32_t seq;
    int64_t start;
    double est;
    char model[128]; /* whole: a node's model names are under 128 bytes (engine_parse_models) */
} active_lease;

typedef struct node {
    char id[40];
    char name[64];
    char address[256];
    char fingerprint[72];
    char peer[64];
    char token[72], prev_token[72];
    int64_t token_issued, token_expires, prev_expires;
    int64_t last_beat, registered_at;
    int64_t unloaded_at;  /* when a beat last showed one of its started engines stopped */
    int silent_reported;  /* registry_silent named it during this silence: placement passes it over */
    uint64_t seq;
    node_state state;
    char state_reason[128];
    int inflight, reported_inflight, slots;
    uint64_t free_vram, total_vram;
    char **models;
    int nmodels;
    /* models it can start, with the planner's need in bytes */
    char **loadable;
    uint64_t *need;
    int nloadable;
    json_t *gpus, *engines, *loadable_json;
    json_t *model_files;  /* per model: the file's sha256 and state, as the worker reports them */
    json_t *files, *transfers;  /* model files it offers peers, and its own downloads */
    /* circuit breaker */
    int fails;            /* failures in a row */
    int64_t open_until;   /* open (no work) until this monotonic ms; 0 = not open */
    int64_t cooldown_ms;  /* the next cooldown */
    int half_open;        /* cooldown over: one probe may go */
    int probing;          /* that probe is out */
    /* what placement reads besides the above */
    int engine_busy, engine_queued; /* the engines' own load signals */
    int temp_c, throttled;          /* the hottest GPU */
    node_profile prof;
    int admin_drained;    /* drained by hand: no new work whatever the beats say */
    int external;         /* trust tier external: a cloud backend, never sent private work */
    /* leases out now, with when they began and their estimate, so a busy
     * node can say when its first slot should free */
    active_lease active[32];
    int nactive;
} node;

struct registry {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    registry_cfg cfg;
    char *join_token;
    node **nodes;
    int n, cap;
    int waiters;
    struct waiter *queue;
    int64_t drain[DRAIN_RING];
    int drain_n, drain_i;
    void (*on_change)(void *);
    void *on_change_ctx;
    int stopping;
    unsigned rr_ticket;   /* round-robin's running counter */
    uint32_t lease_seq;
    uint64_t cold_starts;
    const struct catalog *catalog; /* the model catalogue; NULL = none */
};

/* Helpers both halves use; callers hold the registry's lock. */
void reg_changed(registry *r);        /* wakes the requests waiting for a slot */
void reg_notify(registry *r);         /* runs the on-change callback (without the lock) */
node *reg_find(registry *r, const char *id);
int reg_has_model(const node *nd, const char *model);
/* The need for a model the node can start; 0 with *found = 0 if it cannot. */
uint64_t reg_loadable_need(const node *nd, const char *model, int *found);
/* Takes a report's "files" and "transfers" into the node (node/files.c). */
void reg_absorb_files(node *nd, json_t *report);

/* node/catalog_view.c: the catalogue's side of the registry. */
/* Whether the node may get work for model: no catalogue entry pins a file
 * for it, or the node reported that very file's sha256.  External
 * capacity is not checked (it has no files to report). */
int reg_hash_ok(const registry *r, const node *nd, const char *model);
/* Adds the catalogue (as the node sees it) to a register or heartbeat
 * answer, unless the request's catalog_etag says the node has it. */
void reg_catalog_answer(const registry *r, const node *nd, json_t *req, json_t *resp);
/* The node's catalogue models with their states, for /v1/nodes. */
void reg_node_catalog_json(const registry *r, const node *nd, json_t *o);
/* Adds the catalogue's entries (aliases, per-node states) to the model
 * list: entries already in seen (by id) are extended, others appended. */
void reg_models_catalog(const registry *r, json_t *data, json_t *seen);

#endif
