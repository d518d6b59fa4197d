/* sched/rollout: one rollout, two versions of a model under one name.
 *
 * A rollout sends a share of the traffic for its name to the canary version
 * and the rest to the stable one.  The share is raised in steps (by hand, or
 * after auto_advance_ms when the canary's window looks healthy), and the
 * rollout rolls back by itself when the canary's error rate or p95 latency
 * over its sliding window crosses a threshold.  Pure: every call takes the
 * time (monotonic ms) from the caller, nothing here locks or does I/O. */
#ifndef GPUPOOL_SCHED_ROLLOUT_H
#define GPUPOOL_SCHED_ROLLOUT_H

#include <jansson.h>
#include <stdint.h>

#define RO_NAME_MAX 128
#define RO_MODEL_MAX 256
#define RO_MAX_STEPS 16
#define RO_WINDOW_MAX 1000
#define RO_REASON_MAX 1024

typedef enum ro_state { RO_RUNNING, RO_PAUSED, RO_COMPLETED, RO_ROLLED_BACK, RO_ABORTED } ro_state;
enum { RO_STABLE = 0, RO_CANARY = 1 };

typedef struct ro_spec {
    char name[RO_NAME_MAX];      /* what clients put in "model" */
    char stable[RO_MODEL_MAX];   /* the model serving the rest of the traffic */
    char canary[RO_MODEL_MAX];   /* the model being rolled out */
    int steps[RO_MAX_STEPS];     /* the canary's share per step, percent, increasing, 1..100 */
    int nsteps;
    double max_error_rate;       /* 0..1: more than this over the window rolls back */
    double max_p95_ms;           /* 0 = latency is not judged */
    int window;                  /* the last N outcomes of a version are judged */
    int64_t window_ms;           /* ... of which only those this recent; 0 = any age */
    int min_samples;             /* fewer outcomes than this in the window: no verdict yet */
    int64_t auto_advance_ms;     /* a healthy step lasting this long advances; 0 = by hand */
} ro_spec;

typedef struct ro_sample {
    int64_t at_ms;
    double latency_ms;
    int error;
} ro_sample;

/* The last `window` outcomes of one version, a ring. */
typedef struct ro_window {
    ro_sample s[RO_WINDOW_MAX];
    int head, n;
    uint64_t total, errors;      /* since the rollout started, for metrics */
} ro_window;

typedef struct ro_stats {
    int n, errors;
    double error_rate;
    double p95_ms;               /* of the successful outcomes; 0 when none */
} ro_stats;

typedef struct rollout {
    ro_spec spec;
    ro_state state;
    int step;                    /* index into spec.steps */
    char reason[RO_REASON_MAX];  /* why it ended, paused, or last moved */
    int64_t step_started_ms;
    int64_t created_wall_ms, updated_wall_ms;
    uint64_t picks;              /* unkeyed choices made, for the even split */
    ro_window win[2];            /* RO_STABLE, RO_CANARY */
} rollout;

typedef enum ro_verdict { RO_WAIT, RO_HEALTHY, RO_ROLLBACK } ro_verdict;

/* Reads and checks an API body {name, stable, canary, steps, max_error_rate,
 * max_p95_ms, window, window_s, min_samples, auto_advance_s}.  Returns 0, or
 * -1 with the offending field in param and a sentence in msg. */
int ro_spec_parse(const json_t *body, ro_spec *out, char *param, size_t paramlen, char *msg, size_t msglen);

void ro_start(rollout *r, const ro_spec *spec, int64_t now_ms, int64_t wall);
const char *ro_state_name(ro_state s);
int ro_state_parse(const char *name, ro_state *out);
/* The canary's share now, percent: its step while running or paused, 100
 * once completed, 0 after a rollback or an abort. */
int ro_share(const rollout *r);
/* The version the next request goes to.  With a key (a session or a
 * conversation) the choice is a hash of it, so the same key keeps its
 * version while the share stays; without, the choices follow the share
 * exactly (3 in 20 at 15 %). */
int ro_choose(rollout *r, const char *key);
const char *ro_model(const rollout *r, int version);

/* The version's window at now. */
void ro_window_stats(const rollout *r, int version, int64_t now_ms, ro_stats *out);
/* What the canary's window says against the thresholds; reason says why a
 * rollback (or why it is healthy). */
ro_verdict ro_judge(const rollout *r, int64_t now_ms, char *reason, size_t len);

/* One outcome of a request the rollout routed.  While running or paused the
 * canary is judged after each of its outcomes; returns 1 when that rolled
 * the rollout back. */
int ro_record(rollout *r, int version, int error, double latency_ms, int64_t now_ms, int64_t wall);
/* Auto-advance: returns 1 when the rollout moved a step (or completed). */
int ro_tick(rollout *r, int64_t now_ms, int64_t wall);

/* The operator's moves.  Each returns 0, or -1 with why it does not apply
 * in the current state. */
int ro_advance(rollout *r, int64_t now_ms, int64_t wall, char *why, size_t len);
int ro_pause(rollout *r, int64_t wall, char *why, size_t len);
int ro_resume(rollout *r, int64_t now_ms, int64_t wall, char *why, size_t len);
int ro_abort(rollout *r, int64_t wall, char *why, size_t len);
/* Whether the rollout is over (completed, rolled back or aborted). */
int ro_finished(const rollout *r);

/* The rollout as the API shows it and the store keeps it (caller decrefs). */
json_t *ro_to_json(const rollout *r, int64_t now_ms);
/* A rollout back from ro_to_json's text: its spec and state; the windows
 * start empty and the step's clock at now.  Returns 0 or -1. */
int ro_from_json(const json_t *j, rollout *out, int64_t now_ms);

#endif
