/* node/registry: the coordinator's live view of its workers.
 *
 * It admits workers (join token, address allowlist), issues node tokens bound
 * to the machine fingerprint and the registering address, rotates them on
 * heartbeats, tracks each node's state, GPUs, engines and models, and leases
 * engine slots to requests.  A node missing `missed_beats` heartbeats in a
 * row goes offline.  Callers pass `now` (CLOCK_MONOTONIC ms) to every rule
 * about time, so they are tested without sleeping; only the waits for a
 * slot read the clock. */
#ifndef GPUPOOL_REGISTRY_H
#define GPUPOOL_REGISTRY_H

#include <jansson.h>
#include <stdint.h>

#include "node/cidr.h"
#include "sched/placement.h"
#include "sched/profile.h"

typedef enum node_state { NODE_READY, NODE_NOT_READY, NODE_DRAINING, NODE_OFFLINE, NODE_STATES } node_state;
const char *node_state_name(node_state s);

typedef struct registry_cfg {
    const char *join_token;
    cidr_list allow;          /* empty = any address */
    int64_t heartbeat_ms;     /* the interval workers are told to use */
    int missed_beats;         /* offline after this many missed (3) */
    int64_t token_ttl_ms;     /* node tokens expire after this */
    int breaker_failures;     /* failures in a row that open a node's breaker (3) */
    int64_t breaker_cooldown_ms; /* first cooldown (5000); doubles up to 16x */
    place_cfg placement;      /* policy and score weights (all-zero weights: the defaults) */
} registry_cfg;

typedef struct registry registry;

/* What placement needs to know about one request. */
typedef struct reg_request {
    const char *model;
    double prompt_tokens, max_tokens, payload_bytes;
    int priority;             /* waiting requests: higher first (0..9) */
    int64_t now;              /* monotonic ms for the profile's windows; 0 = read the clock */
    int trusted_only;         /* private: never placed on external capacity */
    int queued_ahead;         /* requests for the model already waiting for a busy node */
} reg_request;

typedef struct node_lease {
    char node_id[40];
    char address[256];
    char token[72];
    char model[128];
    int cold;                 /* the node had to start the model */
    int external;             /* external capacity (a cloud backend) */
    double est_ms;            /* placement's estimate of the service time */
    uint32_t seq;             /* which lease of the node, for its release */
} node_lease;

registry *registry_new(const registry_cfg *cfg);
void registry_free(registry *r);
/* Ends every wait for a slot now (they time out), for shutdown. */
void registry_shutdown(registry *r);

/* The control-plane calls.  Each returns an HTTP status; on 200 *resp holds
 * the answer, otherwise why[] says what was refused (and it is logged). */
int registry_register(registry *r, const char *bearer, json_t *req, const char *peer, int64_t now,
                      json_t **resp, char *why, size_t whylen);
int registry_heartbeat(registry *r, const char *bearer, json_t *req, const char *peer, int64_t now,
                       json_t **resp, char *why, size_t whylen);

/* Marks nodes offline whose heartbeats stopped, and lets nodes whose breaker
 * cooldown is over take one probe; writes the ids of nodes that went offline
 * (up to max) and returns how many went offline on this call. */
int registry_sweep(registry *r, int64_t now, char (*offline)[40], int max);
/* A frozen machine (a laptop lid shut, SIGSTOP) keeps its sockets open and
 * answers nothing, so its calls neither fail nor finish.  A ready node
 * whose heartbeats are overdue by more than (missed_beats - 1) intervals
 * and a half is "silent": placement passes it over, and this writes the ids
 * of nodes that turned silent since the last call (up to max, each once per
 * silence) so their running work can start again elsewhere before the node
 * is declared offline.  Returns how many. */
int registry_silent(registry *r, int64_t now, char (*silent)[40], int max);
/* The monotonic ms at which the next node would turn silent or offline, or
 * its breaker cooldown end, if nothing is heard; INT64_MAX when no node. */
int64_t registry_next_deadline(registry *r, int64_t now);

/* A failed dispatch makes the node not-ready until its next heartbeat, and
 * counts towards its circuit breaker: after `breaker_failures` failures in a
 * row the node gets no work for a cooldown (which doubles each time it trips
 * again, up to a limit), then one request probes it (half-open); a success
 * closes the breaker, a failure opens it again.  Heartbeats alone do not
 * close it: a node can beat and still fail every request. */
void registry_mark_unreachable(registry *r, const char *node_id, const char *reason, int64_t now);

typedef enum reg_wait {
    REG_OK,
    REG_NO_MODEL,    /* no node, live or not, serves the model */
    REG_QUEUE_FULL,  /* too many requests already waiting */
    REG_TIMEOUT,     /* waited until the deadline */
    REG_EXHAUSTED,   /* every node that could serve it was excluded */
    REG_NO_FIT,      /* nodes could start it, but it fits no node's free VRAM */
} reg_wait;

/* Leases a slot now, or says why not.  exclude lists node ids to skip. */
place_block registry_acquire(registry *r, const reg_request *rq, const char *const *exclude, int nexclude,
                             node_lease *out);
/* Waits (bounded queue of at most max_waiters) until a slot is free or the
 * deadline (monotonic ms) passes.  A model that fits no node's free VRAM is
 * given one heartbeat interval (an unload may not be reported yet) before
 * REG_NO_FIT.  Waiters for one model go by priority,
 * then first come first served. */
reg_wait registry_acquire_wait(registry *r, const reg_request *rq, const char *const *exclude, int nexclude,
                               int64_t deadline, int max_waiters, node_lease *out);
/* What a finished call taught about the node: its outcome (ok = it did its
 * job) and, when ok, its speed for the lease's model (and the load time when
 * the call had to start the model).  Feeds the node's profile. */
void registry_observe(registry *r, const node_lease *l, int ok, const call_sample *s, int64_t now);
/* The pool's estimate of the service time of a request for model on its
 * best node, from the nodes' measured speeds (defaults before anything is
 * measured).  For ordering the queue. */
double registry_estimate_ms(registry *r, const reg_request *rq);
/* Requests placed on a node that had to start the model first. */
uint64_t registry_cold_starts(registry *r);
/* All engine slots of ready nodes, for per-key shares. */
int registry_total_slots(registry *r);

/* Administration.  A node drained by hand takes no new work until undrained,
 * whatever its heartbeats say.  Forgetting removes a node; a live node is
 * refused unless force is set (its worker would only register again). */
int registry_set_drain(registry *r, const char *node_id, int drain, int64_t now);
/* 0 removed, -1 unknown node, -2 the node is not offline (and !force). */
int registry_forget(registry *r, const char *node_id, int force);
/* Gives the slot back; served says the node answered the request (any
 * status it chose), which resets its failure count and closes its breaker. */
void registry_release(registry *r, const node_lease *l, int64_t now, int served);
/* Whether an HTTP status from a node shows it did its job: any answer but a
 * 5xx and the worker's own refusal of its token (401/403). */
int registry_status_served(long status);
/* How many requests wait for a slot right now (gives them precedence). */
int registry_waiters(registry *r);
/* Registers a callback run (outside the lock) whenever capacity may have
 * appeared: a release, a registration or a heartbeat. */
void registry_on_change(registry *r, void (*fn)(void *), void *ctx);

/* Peer file sharing (node/files.c).  Which live nodes other than the asker
 * hold the file with this sha256 (lower-case hex), from their heartbeats'
 * "files": {"sha256", "bytes", "sources": [{"node_id", "name", "url"}]},
 * ready nodes first.  The asker proves it is a node with its node token,
 * from the address it registered from.  Returns an HTTP status like the
 * control-plane calls. */
int registry_file_sources(registry *r, const char *bearer, const char *sha256, const char *peer, int64_t now,
                          json_t **resp, char *why, size_t whylen);

int registry_model_known(registry *r, const char *model);
/* Whether trusted capacity (any node but external backends, live or not)
 * serves or can start the model: a private request has nowhere else to go. */
int registry_model_trusted(registry *r, const char *model);

/* The model catalogue (catalog/catalog.h), read-only while the registry
 * lives; NULL = none.  With one, a model whose entry pins a sha256 goes
 * only to nodes that reported that file, each node is told the catalogue
 * in its register and heartbeat answers, and the views show per-node states. */
struct catalog;
void registry_set_catalog(registry *r, const struct catalog *cat);
/* Whether every node that has or could start model is barred from it by a
 * file that differs from the catalogue's (or is not verified yet): 1 with a
 * one-line account of those nodes in why, 0 when some node may serve it or
 * none has it at all. */
int registry_model_blocked(registry *r, const char *model, char *why, size_t whylen);
/* Per live node and catalogue model, its state there: an array of
 * {"node":id, "name":node name, "model":entry name, "state":...}. */
json_t *registry_catalog_status(registry *r);

/* External capacity: an OpenAI-compatible backend outside the LAN (a cloud
 * API), trust tier "external".  It serves a model only while no live trusted
 * node serves (or can start) it, and never a private request.  It never heartbeats and is always ready
 * (its breaker still applies); api_key is sent as its bearer token; base_url
 * is the part before /v1.  Its id is "cloud-" + name.  Returns 0, or -1 when
 * the name is taken or memory ran out. */
int registry_add_external(registry *r, const char *name, const char *base_url, const char *api_key,
                          const char *const *models, int nmodels, int slots, int64_t now);
/* Average requests/s finished over the last minute, for Retry-After. */
double registry_drain_rate(registry *r, int64_t now);
void registry_counts(registry *r, int counts[NODE_STATES]);
json_t *registry_nodes_json(registry *r, int64_t now);
/* The union of models on live nodes, OpenAI /v1/models shape. */
json_t *registry_models_json(registry *r, int64_t now);

#endif
